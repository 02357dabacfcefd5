//! Pixels for a model that sees its images (`model.image_crop > 0`): every region's box is cut
//! from the sample's image and resized to a square RGB crop, which the captioner's convolutional
//! image encoder reads ([`super::model`]).
//!
//! Images are decoded with the `image` crate and resized with its triangle (bilinear) filter.
//! Samples of one image usually come together (a dataset's samples are stored by image), so the
//! last few decoded images are kept. An image that cannot be read leaves its regions without
//! pixels (the model sees zeros there); [`ImageCrops::report`] says how many and why.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use image::imageops::FilterType;
use image::RgbImage;

use crate::error::{Error, Result};
use crate::schema::BoxXyxy;

use super::config::TrainConfig;

/// Decoded images kept for the next samples.
const CACHED_IMAGES: usize = 8;

/// Crops regions out of the images under one directory.
#[derive(Debug)]
pub struct ImageCrops {
    dir: PathBuf,
    template: String,
    side: u32,
    state: Mutex<CropState>,
}

#[derive(Debug, Default)]
struct CropState {
    /// The last images asked for, newest last; `None`: it could not be read.
    cache: VecDeque<(String, Option<Arc<RgbImage>>)>,
    read: usize,
    unreadable: usize,
    first_error: Option<String>,
}

impl ImageCrops {
    /// The crops a configuration asks for; `None` when the model sees no pixels.
    pub fn new(config: &TrainConfig) -> Option<ImageCrops> {
        let side = u32::try_from(config.model.image_crop)
            .ok()
            .filter(|&s| s > 0)?;
        Some(ImageCrops {
            dir: config.images.dir.clone()?,
            template: config.images.template().to_string(),
            side,
            state: Mutex::new(CropState::default()),
        })
    }

    /// The file of an image: the template filled with its id and, when known, the images
    /// table's file name. `None` when the template needs a file name the image does not have.
    pub fn path(&self, image_id: &str, file_name: Option<&str>) -> Option<PathBuf> {
        let needs_name = self.template.contains("{file_name}") || self.template.contains("{stem}");
        if needs_name && file_name.is_none() {
            return None;
        }
        let file_name = file_name.unwrap_or_default();
        let stem = Path::new(file_name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Some(
            self.dir.join(
                self.template
                    .replace("{file_name}", file_name)
                    .replace("{stem}", &stem)
                    .replace("{image_id}", image_id),
            ),
        )
    }

    /// The crop of every box (`None` for all when the image cannot be read). `size` is the
    /// image size the boxes are given in; the file may be stored at another size.
    pub fn crops(
        &self,
        image_id: &str,
        file_name: Option<&str>,
        boxes: &[BoxXyxy],
        size: (f64, f64),
    ) -> Vec<Option<Vec<u8>>> {
        match self.image(image_id, file_name) {
            Some(image) => {
                let scale = (
                    f64::from(image.width()) / size.0.max(1.0),
                    f64::from(image.height()) / size.1.max(1.0),
                );
                boxes
                    .iter()
                    .map(|b| Some(crop_region(&image, b, scale, self.side)))
                    .collect()
            }
            None => vec![None; boxes.len()],
        }
    }

    fn image(&self, image_id: &str, file_name: Option<&str>) -> Option<Arc<RgbImage>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, image)) = state.cache.iter().find(|(id, _)| id == image_id) {
            return image.clone();
        }
        let image = match self.path(image_id, file_name) {
            None => Err(format!(
                "image {image_id}: no file name for the template {:?}",
                self.template
            )),
            Some(path) => read_rgb(&path).map(Arc::new),
        };
        let image = match image {
            Ok(image) => {
                state.read += 1;
                Some(image)
            }
            Err(reason) => {
                state.unreadable += 1;
                state.first_error.get_or_insert(reason);
                None
            }
        };
        if state.cache.len() == CACHED_IMAGES {
            state.cache.pop_front();
        }
        state.cache.push_back((image_id.to_string(), image.clone()));
        image
    }

    /// Adds what `other` read and could not read to these counts; `other`'s first reason
    /// counts only when these crops have none (`other` cut the crops of later samples).
    pub fn absorb(&self, other: ImageCrops) {
        let other = other.state.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.read += other.read;
        state.unreadable += other.unreadable;
        if state.first_error.is_none() {
            state.first_error = other.first_error;
        }
    }

    /// Images read, images that could not be read, and the first reason.
    pub fn counts(&self) -> (usize, usize, Option<String>) {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (state.read, state.unreadable, state.first_error.clone())
    }

    /// An error when no image at all could be read (a wrong `[images]` setting, most likely);
    /// a warning on stderr when some could not.
    pub fn check(&self) -> Result<()> {
        let (read, unreadable, first) = self.counts();
        if read == 0 && unreadable > 0 {
            return Err(Error::invalid(
                format!("images under {}", self.dir.display()),
                format!(
                    "none of {unreadable} images could be read with file_name {:?} (first: {})",
                    self.template,
                    first.unwrap_or_default()
                ),
            ));
        }
        if let Some(report) = self.report() {
            crate::cli::out::status!("warning: {report}");
        }
        Ok(())
    }

    /// A line for the user when some images could not be read (their regions had no pixels).
    pub fn report(&self) -> Option<String> {
        let (read, unreadable, first) = self.counts();
        (unreadable > 0).then(|| {
            format!(
                "{unreadable} of {} images under {} could not be read, their regions had no \
                 pixels (first: {})",
                read + unreadable,
                self.dir.display(),
                first.unwrap_or_default()
            )
        })
    }
}

fn read_rgb(path: &Path) -> Result<RgbImage, String> {
    let reader = image::ImageReader::open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .with_guessed_format()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let image = reader
        .decode()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(image.to_rgb8())
}

/// The crop of box `b` (in the annotation's coordinates; `scale` maps them to the image's
/// pixels), resized to `side` × `side`, channel-major (`[3, side, side]`, R then G then B).
/// The box is widened to whole pixels and clamped inside the image, at least one pixel wide.
pub fn crop_region(image: &RgbImage, b: &BoxXyxy, scale: (f64, f64), side: u32) -> Vec<u8> {
    let (w, h) = (image.width(), image.height());
    let span = |lo: f64, hi: f64, s: f64, max: u32| {
        let start = ((lo * s).floor().max(0.0) as u32).min(max - 1);
        let end = ((hi * s).ceil().max(0.0) as u32).clamp(start + 1, max);
        (start, end - start)
    };
    let (x, cw) = span(b.x1, b.x2, scale.0, w);
    let (y, ch) = span(b.y1, b.y2, scale.1, h);
    let region = image::imageops::crop_imm(image, x, y, cw, ch).to_image();
    let resized = image::imageops::resize(&region, side, side, FilterType::Triangle);
    let plane = (side * side) as usize;
    let mut out = vec![0u8; 3 * plane];
    for (k, pixel) in resized.pixels().enumerate() {
        for c in 0..3 {
            out[c * plane + k] = pixel[c];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    fn bbox(x1: f64, y1: f64, x2: f64, y2: f64) -> BoxXyxy {
        BoxXyxy { x1, y1, x2, y2 }
    }

    /// Left half red, right half blue, 8 × 4.
    fn halves() -> RgbImage {
        RgbImage::from_fn(8, 4, |x, _| {
            if x < 4 {
                Rgb([200, 0, 0])
            } else {
                Rgb([0, 0, 200])
            }
        })
    }

    #[test]
    fn a_box_inside_one_colour_crops_to_that_colour_channel_by_channel() {
        let crop = crop_region(&halves(), &bbox(4.0, 0.0, 8.0, 4.0), (1.0, 1.0), 4);
        assert_eq!(crop.len(), 3 * 16);
        assert!(crop[..16].iter().all(|&v| v == 0), "red plane");
        assert!(crop[16..32].iter().all(|&v| v == 0), "green plane");
        assert!(crop[32..].iter().all(|&v| v == 200), "blue plane");
    }

    #[test]
    fn boxes_are_scaled_to_the_stored_image_and_clamped_inside_it() {
        // Annotated at 16 × 8, stored at 8 × 4: the box (0,0)-(8,8) is the red half.
        let crop = crop_region(&halves(), &bbox(0.0, 0.0, 8.0, 8.0), (0.5, 0.5), 2);
        assert_eq!(crop, [[200u8; 4], [0; 4], [0; 4]].concat());
        // A box past the image's edge keeps at least one pixel: the last column, blue.
        let crop = crop_region(&halves(), &bbox(20.0, 1.0, 30.0, 2.0), (1.0, 1.0), 2);
        assert_eq!(crop, [[0u8; 4], [0; 4], [200; 4]].concat());
    }

    #[test]
    fn a_box_across_both_halves_keeps_left_and_right() {
        let crop = crop_region(&halves(), &bbox(0.0, 0.0, 8.0, 4.0), (1.0, 1.0), 2);
        // Resized 8 → 2 columns with the triangle filter, 4 source pixels per output pixel:
        // output column 0 is centred on x = 2 and weighs the pixels at 0.5 … 5.5 by
        // 1 - |x - 2| / 4 = .625 .875 .875 .625 (red) and .375 .125 (blue): red 200 · 3 / 3.5
        // = 171, blue 200 · .5 / 3.5 = 29; column 1 is the mirror image.
        let (red, blue) = (&crop[..4], &crop[8..]);
        assert!(
            red[0].abs_diff(171) <= 1 && red[1].abs_diff(29) <= 1,
            "{red:?}"
        );
        assert!(
            blue[0].abs_diff(29) <= 1 && blue[1].abs_diff(171) <= 1,
            "{blue:?}"
        );
    }

    #[test]
    fn file_names_fill_the_template_and_unreadable_images_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        halves().save(dir.path().join("7.png")).unwrap();
        let mut config = TrainConfig::default();
        config.model.image_crop = 4;
        config.images.dir = Some(dir.path().to_path_buf());
        let crops = ImageCrops::new(&config).unwrap();
        assert_eq!(crops.path("7", None), Some(dir.path().join("7.png")));
        let boxes = [bbox(0.0, 0.0, 4.0, 4.0)];
        let got = crops.crops("7", None, &boxes, (8.0, 4.0));
        assert_eq!(got[0].as_ref().unwrap()[0], 200);
        assert_eq!(crops.crops("8", None, &boxes, (8.0, 4.0)), vec![None]);
        // Asked again: from the cache, not counted twice.
        crops.crops("7", None, &boxes, (8.0, 4.0));
        let (read, unreadable, first) = crops.counts();
        assert_eq!((read, unreadable), (1, 1));
        assert!(first.unwrap().contains("8.png"));
        config.images.file_name = Some("{stem}.png".into());
        let crops = ImageCrops::new(&config).unwrap();
        assert_eq!(crops.path("7", None), None);
        assert_eq!(
            crops.path("x", Some("7.jpg")),
            Some(dir.path().join("7.png"))
        );
    }
}
