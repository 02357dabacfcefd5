//! The augmentation methods as plain functions from one image's annotations to samples.
//!
//! Every method reads an [`ImageAnnotations`] (everything the dataflow gathered about one image)
//! and returns [`SampleRow`](crate::schema::SampleRow)s in the shared sample schema, so mixing,
//! filtering, export and training treat all methods alike. Randomness comes from
//! (global seed, image key, stage) only; see [`crate::amr::sample::predicate_rng`].

pub mod clid;
pub mod control;
pub mod cutswap;
pub mod detections;
pub mod gbc;
pub mod method;
pub mod original;
pub mod relatedness;
pub mod ssa;

use crate::ingest::Row;
use crate::schema::{
    AmrRow, CaptionRow, DetectionRow, GbcGraphRow, GroundingRow, ImageRow, SceneGraphRow,
};
use std::collections::BTreeMap;

/// Everything known about one image, gathered from every input of a run.
///
/// The rows keep the order they were read in (input unit, then record), which is the same for
/// any number of workers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageAnnotations {
    pub image_id: String,
    pub image: Option<ImageRow>,
    pub captions: Vec<CaptionRow>,
    pub groundings: Vec<GroundingRow>,
    pub detections: Vec<DetectionRow>,
    pub amrs: Vec<AmrRow>,
    pub scene_graphs: Vec<SceneGraphRow>,
    pub gbc_graphs: Vec<GbcGraphRow>,
}

impl ImageAnnotations {
    pub fn new(image_id: impl Into<String>) -> Self {
        ImageAnnotations {
            image_id: image_id.into(),
            ..Default::default()
        }
    }

    /// Groups rows by image, by image id, each image's rows pushed in the order given
    /// ([`ImageAnnotations::push`]).
    pub fn group(rows: impl IntoIterator<Item = Row>) -> BTreeMap<String, ImageAnnotations> {
        let mut images: BTreeMap<String, ImageAnnotations> = BTreeMap::new();
        for row in rows {
            match images.get_mut(row.image_id()) {
                Some(image) => image.push(row),
                None => {
                    let mut image = ImageAnnotations::new(row.image_id());
                    image.push(row);
                    images.insert(image.image_id.clone(), image);
                }
            }
        }
        images
    }

    /// Gathers rows of one image; rows of other images or sample rows are ignored.
    pub fn from_rows<'a>(image_id: &str, rows: impl IntoIterator<Item = &'a Row>) -> Self {
        let mut image = ImageAnnotations::new(image_id);
        for row in rows {
            if row.image_id() == image_id {
                image.push(row.clone());
            }
        }
        image
    }

    /// Adds one row; a second image row for the same image keeps the first one's fields and
    /// fills in only what the first lacked (width and height often come from another input).
    pub fn push(&mut self, row: Row) {
        match row {
            Row::Image(r) => match &mut self.image {
                None => self.image = Some(r),
                Some(existing) => {
                    existing.width = existing.width.or(r.width);
                    existing.height = existing.height.or(r.height);
                    existing.file_name = existing.file_name.take().or(r.file_name);
                    existing.url = existing.url.take().or(r.url);
                }
            },
            Row::Caption(r) => self.captions.push(r),
            Row::Grounding(r) => self.groundings.push(r),
            Row::Detection(r) => self.detections.push(r),
            Row::Amr(r) => self.amrs.push(r),
            Row::SceneGraph(r) => self.scene_graphs.push(r),
            Row::GbcGraph(r) => self.gbc_graphs.push(r),
            Row::Sample(_) => {}
        }
    }

    /// The image's split: the image row's, else the first caption's, else `train`. A split
    /// the reader could not tell (`unknown`, as for a COCO file named `captions.json`) counts as
    /// none, so a caption's known split wins over it.
    pub fn split(&self) -> &str {
        let known = |s: &&str| !s.is_empty() && *s != "unknown";
        self.image
            .as_ref()
            .map(|i| i.split.as_str())
            .filter(known)
            .or_else(|| self.captions.first().map(|c| c.split.as_str()))
            .unwrap_or("train")
    }

    /// Image size in pixels when known from the image row.
    pub fn size(&self) -> Option<(f64, f64)> {
        let image = self.image.as_ref()?;
        match (image.width, image.height) {
            (Some(w), Some(h)) if w > 0 && h > 0 => Some((w as f64, h as f64)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{CaptionRow, ImageRow};

    #[test]
    fn an_unknown_image_split_gives_way_to_the_captions() {
        let mut image = ImageAnnotations::new("7");
        image.push(Row::Image(ImageRow {
            image_id: "7".into(),
            dataset: "coco".into(),
            split: "unknown".into(),
            file_name: None,
            url: None,
            width: Some(4),
            height: Some(3),
        }));
        image.push(Row::Caption(CaptionRow {
            image_id: "7".into(),
            caption_id: "7#0".into(),
            dataset: "coco".into(),
            split: "val".into(),
            caption_index: 0,
            text: "a dog".into(),
        }));
        assert_eq!(image.split(), "val");
        if let Some(row) = image.image.as_mut() {
            row.split = "test".into();
        }
        assert_eq!(image.split(), "test");
    }
}
