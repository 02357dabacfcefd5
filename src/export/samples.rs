//! A dataset's samples with what evaluating or training on them needs: each image's size and
//! detections ([`RegionContext`]) and its original captions (the references of CIDEr-D and
//! BLEU). Read by `capflow eval controls` and, with the feature `train`, by the training sink
//! and `capflow eval model`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::augment::original::{original_samples, ORIGINAL_METHOD};
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::export::{read_manifest, read_table};
use crate::schema::{
    batch_to_rows, BoxXyxy, CaptionRow, DetectionRow, GroundingRow, ImageRow, SampleRow, TableRow,
};

/// Per-image context of the samples: image sizes and detections.
#[derive(Clone, Debug, Default)]
pub struct RegionContext {
    pub sizes: HashMap<String, (f64, f64)>,
    /// Detections per image, by descending score (then id).
    pub detections: HashMap<String, Vec<DetectionRow>>,
    /// The images table's file name of each image that has one.
    pub file_names: HashMap<String, String>,
}

impl RegionContext {
    pub fn add_image(&mut self, image: &ImageAnnotations) {
        if let Some(size) = image.size() {
            self.sizes.insert(image.image_id.clone(), size);
        }
        if let Some(name) = image.image.as_ref().and_then(|i| i.file_name.clone()) {
            self.file_names.insert(image.image_id.clone(), name);
        }
        let mut detections = image.detections.clone();
        detections.sort_by(|a, b| {
            b.score
                .unwrap_or(0.0)
                .total_cmp(&a.score.unwrap_or(0.0))
                .then_with(|| a.detection_id.cmp(&b.detection_id))
        });
        if !detections.is_empty() {
            self.detections.insert(image.image_id.clone(), detections);
        }
    }

    /// Every detection label (for building the label vocabulary).
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.detections
            .values()
            .flat_map(|d| d.iter().map(|r| r.label.as_str()))
    }

    /// The image size, or the extent of everything boxed in it when the size is unknown.
    pub fn size_of(&self, image_id: &str, sample_boxes: &[BoxXyxy]) -> (f64, f64) {
        if let Some(&size) = self.sizes.get(image_id) {
            return size;
        }
        let boxes = self
            .detections
            .get(image_id)
            .into_iter()
            .flatten()
            .map(|d| &d.bbox)
            .chain(sample_boxes);
        let (w, h) = boxes.fold((1.0f64, 1.0f64), |(w, h), b| (w.max(b.x2), h.max(b.y2)));
        (w, h)
    }
}

/// Samples and their context read from one or more datasets.
#[derive(Clone, Debug, Default)]
pub struct SampleData {
    pub samples: Vec<SampleRow>,
    pub context: RegionContext,
    /// The original captions of every image (references for CIDEr-D and BLEU).
    pub references: BTreeMap<String, Vec<String>>,
}

fn read_rows<R: TableRow>(dir: &Path) -> Result<Vec<R>> {
    let manifest = read_manifest(dir)?;
    if manifest.table_rows(R::KIND) == 0 {
        return Ok(Vec::new());
    }
    let mut rows = Vec::new();
    for batch in read_table(dir, R::KIND)? {
        rows.extend(batch_to_rows::<R>(&batch?).map_err(|e| {
            Error::invalid(
                format!("{} table of {}", R::KIND.name(), dir.display()),
                e.to_string(),
            )
        })?);
    }
    Ok(rows)
}

impl SampleData {
    /// Reads every dataset directory. Each dataset's `samples` table is used as it is; a dataset
    /// whose samples include no `original` ones also gets the original samples built from its
    /// captions and groundings ([`original_samples`]).
    pub fn load(dirs: &[PathBuf]) -> Result<SampleData> {
        let mut data = SampleData::default();
        for dir in dirs {
            data.add_dataset(dir)?;
        }
        Ok(data)
    }

    fn add_dataset(&mut self, dir: &Path) -> Result<()> {
        let mut images: BTreeMap<String, ImageAnnotations> = BTreeMap::new();
        fn image<'a>(
            images: &'a mut BTreeMap<String, ImageAnnotations>,
            id: &str,
        ) -> &'a mut ImageAnnotations {
            images
                .entry(id.to_string())
                .or_insert_with(|| ImageAnnotations::new(id))
        }
        for row in read_rows::<ImageRow>(dir)? {
            let id = row.image_id.clone();
            image(&mut images, &id).push(crate::ingest::Row::Image(row));
        }
        for row in read_rows::<CaptionRow>(dir)? {
            let id = row.image_id.clone();
            image(&mut images, &id).captions.push(row);
        }
        for row in read_rows::<GroundingRow>(dir)? {
            let id = row.image_id.clone();
            image(&mut images, &id).groundings.push(row);
        }
        for row in read_rows::<DetectionRow>(dir)? {
            let id = row.image_id.clone();
            image(&mut images, &id).detections.push(row);
        }
        let samples = read_rows::<SampleRow>(dir)?;
        let has_originals = samples.iter().any(|s| s.method == ORIGINAL_METHOD);
        for image in images.values() {
            self.context.add_image(image);
            if !image.captions.is_empty() {
                self.references.insert(
                    image.image_id.clone(),
                    image.captions.iter().map(|c| c.text.clone()).collect(),
                );
            }
            if !has_originals {
                self.samples.extend(original_samples(image));
            }
        }
        self.samples.extend(samples);
        Ok(())
    }
}
