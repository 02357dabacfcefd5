//! Image swaps: paste a patch of the new object, cut from another image, over every box of the
//! old object, keeping other mentioned objects visible (thesis §3.2.3).
//!
//! For one text swap:
//! 1. the old object's boxes in the image (its grounded phrase's boxes, else its detections and
//!    scene-graph objects) after NMS at [`ImageSwapConfig::nms_iou`]; their union must cover
//!    between [`ImageSwapConfig::min_area`] and [`ImageSwapConfig::max_area`] of the image;
//! 2. the boxes of other objects the caption mentions are *protected*: the patch leaves them
//!    out, unless a box holds most of the replaced box (a helmet on a man: the man's box is the
//!    helmet's surroundings, not something the helmet covers). More than
//!    [`ImageSwapConfig::max_omitted`] of the patch left out: no image swap;
//! 3. source patches are the new object's boxes in other images (those described with the new
//!    attribute, when there are any) with an aspect ratio and a pixel count close to the
//!    replaced box's; [`ImageSwapConfig::patches_per_swap`] of them are drawn at random;
//! 4. each patch is resized (bilinear) to every replaced box and blended in with an alpha that
//!    rises from the edge of the pasted area over [`ImageSwapConfig::blend_width`] of the box's
//!    shorter side; pixels outside the pasted area are never touched.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use image::RgbImage;
use rand::seq::SliceRandom;

use super::rerank::{builtin_score, BuiltinScore};
use super::text::{ReadCaption, TextSwap};
use super::{Model, ObjectBox, SampleParts};
use crate::amr::sample::predicate_rng;
use crate::augment::control::union_area;
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::models::{ImageText, ImageTextScorer};
use crate::schema::{BoxXyxy, QualityScore, RejectedRow, SampleRow};

/// Stage name of the image swap's random streams.
pub const IMAGE_STAGE: &str = "cutswap-image";

/// Settings of the image swap, the recipe table `[cutswap.image]`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImageSwapConfig {
    /// Directory of the input images; without it there are no image swaps.
    pub images_dir: Option<PathBuf>,
    /// File of an image under `images_dir`: `{file_name}` (the image row's), `{stem}` (it without
    /// its extension) and `{image_id}` are replaced.
    pub file_name: String,
    /// NMS IoU threshold over an object's boxes (boxes overlapping more are one object).
    pub nms_iou: f64,
    /// Bounds of the replaced area as a fraction of the image (thesis: 10 % to 70 %).
    pub min_area: f64,
    pub max_area: f64,
    /// Largest ratio between the aspect ratios (w/h) of the source patch and the replaced box.
    pub max_aspect_change: f64,
    /// Largest ratio between the pixel counts of the source patch and the replaced box, either
    /// way (a patch blown up or shrunk more than this looks wrong).
    pub max_scale_change: f64,
    /// Patches tried per text swap (thesis n_i = 4).
    pub patches_per_swap: usize,
    /// Largest fraction of the patch left out to keep other objects visible (thesis: 50 %).
    pub max_omitted: f64,
    /// A mentioned object's box holding more than this fraction of the replaced box surrounds
    /// it and is not protected.
    pub container_overlap: f64,
    /// Width of the blended seam as a fraction of the replaced box's shorter side.
    pub blend_width: f64,
    /// Pairs scoring below this are dropped: default 0.28 for an external CLIP-like scorer
    /// (thesis), 0.6 for the built-in score.
    pub threshold: Option<f64>,
    /// Best pairs kept per text swap (thesis: 3).
    pub keep_top: usize,
}

impl Default for ImageSwapConfig {
    fn default() -> Self {
        ImageSwapConfig {
            images_dir: None,
            file_name: "{file_name}".to_string(),
            nms_iou: 0.5,
            min_area: 0.10,
            max_area: 0.70,
            max_aspect_change: 1.5,
            max_scale_change: 4.0,
            patches_per_swap: 4,
            max_omitted: 0.5,
            container_overlap: 0.5,
            blend_width: 0.08,
            threshold: None,
            keep_top: 3,
        }
    }
}

/// Default threshold of an external image-text scorer (thesis: CLIP cosine 0.28).
pub const EXTERNAL_THRESHOLD: f64 = 0.28;
/// Default threshold of the built-in score.
pub const BUILTIN_THRESHOLD: f64 = 0.6;

impl ImageSwapConfig {
    pub fn validate(&self) -> Result<()> {
        let fraction = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::Config(format!(
                    "cutswap.image.{name} = {v}: expected a fraction in [0, 1]"
                )))
            }
        };
        fraction("nms_iou", self.nms_iou)?;
        fraction("min_area", self.min_area)?;
        fraction("max_area", self.max_area)?;
        fraction("max_omitted", self.max_omitted)?;
        fraction("container_overlap", self.container_overlap)?;
        fraction("blend_width", self.blend_width)?;
        if self.min_area > self.max_area {
            return Err(Error::Config(format!(
                "cutswap.image.min_area {} is above max_area {}",
                self.min_area, self.max_area
            )));
        }
        for (name, v) in [
            ("max_aspect_change", self.max_aspect_change),
            ("max_scale_change", self.max_scale_change),
        ] {
            if v.is_nan() || v < 1.0 {
                return Err(Error::Config(format!(
                    "cutswap.image.{name} = {v}: expected a ratio of at least 1"
                )));
            }
        }
        Ok(())
    }
}

/// Greedy non-maximum suppression: boxes by score (then area) descending; a box overlapping a
/// kept one with IoU above `iou` is dropped and its attributes join the kept box's.
pub fn nms(mut boxes: Vec<ObjectBox>, iou: f64) -> Vec<ObjectBox> {
    boxes.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.bbox.area().total_cmp(&a.bbox.area()))
    });
    let mut kept: Vec<ObjectBox> = Vec::new();
    for candidate in boxes {
        match kept.iter_mut().find(|k| k.bbox.iou(&candidate.bbox) > iou) {
            Some(k) => k.attributes.extend(candidate.attributes),
            None => kept.push(candidate),
        }
    }
    kept
}

/// One pasted image.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ImageSwap {
    /// The swapped image, PNG-encoded; it goes into the sample row's `image` column.
    #[serde(skip)]
    pub png: Vec<u8>,
    /// Names the patch: `cutswap-` and 16 hex digits of the hash of (image, caption, swap,
    /// patch draw).
    pub patch: String,
    pub source_image_id: String,
    pub source_box: BoxXyxy,
    /// The replaced boxes (after NMS), now showing the new object.
    pub pasted_boxes: Vec<BoxXyxy>,
    /// Mentioned objects' boxes the patch left out.
    pub protected_boxes: Vec<BoxXyxy>,
    /// Fraction of the replaced boxes' pixels left out to keep protected boxes visible.
    pub omitted_fraction: f64,
    pub score: f64,
    /// `builtin` or `external`.
    pub scorer: String,
    pub builtin: BuiltinScore,
}

/// A swapped pair waiting for re-ranking, with its control boxes and labels.
struct Candidate {
    swap: TextSwap,
    image: ImageSwap,
    boxes: Vec<(BoxXyxy, String)>,
}

/// The geometry of one text swap's image swap, before any patch is chosen.
struct Plan {
    /// Replaced boxes as pixel rectangles, each with its mask of pasted pixels.
    targets: Vec<TargetRect>,
    pasted_boxes: Vec<BoxXyxy>,
    protected_boxes: Vec<BoxXyxy>,
    omitted_fraction: f64,
    /// Other mentioned objects: boxes and labels, for the control signal.
    others: Vec<(BoxXyxy, String)>,
    /// The largest replaced box: source patches are compared with it.
    reference: BoxXyxy,
}

/// A replaced box in whole pixels `[x0, x1) × [y0, y1)` and which of its pixels get the patch.
struct TargetRect {
    x0: u32,
    y0: u32,
    x1: u32,
    y1: u32,
    /// Row-major, `true` where the patch goes.
    mask: Vec<bool>,
}

impl TargetRect {
    fn width(&self) -> u32 {
        self.x1 - self.x0
    }
    fn height(&self) -> u32 {
        self.y1 - self.y0
    }
}

/// Whole-pixel bounds of a box clipped to `width × height`, or `None` when empty.
fn pixel_rect(b: &BoxXyxy, width: u32, height: u32) -> Option<(u32, u32, u32, u32)> {
    let clip = |v: f64, max: u32| v.clamp(0.0, f64::from(max));
    let x0 = clip(b.x1.floor(), width) as u32;
    let y0 = clip(b.y1.floor(), height) as u32;
    let x1 = clip(b.x2.ceil(), width) as u32;
    let y1 = clip(b.y2.ceil(), height) as u32;
    (x1 > x0 && y1 > y0).then_some((x0, y0, x1, y1))
}

/// Whether the centre of pixel `(x, y)` lies inside `b`.
fn pixel_in(b: &BoxXyxy, x: u32, y: u32) -> bool {
    let (cx, cy) = (f64::from(x) + 0.5, f64::from(y) + 0.5);
    cx > b.x1 && cx < b.x2 && cy > b.y1 && cy < b.y2
}

impl Model {
    /// The path of an image's file under `images_dir`, from the file-name template.
    pub fn image_path(&self, image_id: &str) -> Option<PathBuf> {
        let config = &self.config.image;
        let dir = config.images_dir.as_ref()?;
        let file_name = self
            .image_files
            .get(image_id)
            .and_then(|f| f.file_name.clone());
        let template = &config.file_name;
        if template.contains("{file_name}") || template.contains("{stem}") {
            file_name.as_ref()?;
        }
        let file_name = file_name.unwrap_or_default();
        let stem = Path::new(&file_name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = template
            .replace("{file_name}", &file_name)
            .replace("{stem}", &stem)
            .replace("{image_id}", image_id);
        Some(dir.join(name))
    }

    /// Image-swap samples of one image: every text swap with a valid image swap, re-ranked by
    /// `scorer` (the built-in score without one), at most `keep_top` per text swap. Each
    /// sample carries its swapped image (PNG) in [`SampleRow::image`]. An image file that
    /// cannot be read is a rejected record; encoding an image or a failing scorer is an error.
    pub fn image_samples(
        &self,
        image: &ImageAnnotations,
        seed: u64,
        scorer: Option<&dyn ImageTextScorer>,
    ) -> Result<(Vec<SampleRow>, Vec<RejectedRow>)> {
        let mut rejected = Vec::new();
        if self.config.image.images_dir.is_none() {
            return Ok((Vec::new(), rejected));
        }
        let mut pixels = ImageCache::default();
        let mut candidates: Vec<Candidate> = Vec::new();
        for row in &image.captions {
            let read = self.read_caption(image, row);
            for swap in self.caption_swaps(&image.image_id, &read, seed) {
                let Some(plan) = self.plan(image, &read, &swap) else {
                    continue;
                };
                let Some(target) = pixels.load(self, &image.image_id, &mut rejected) else {
                    return Ok((Vec::new(), rejected));
                };
                let target = target.clone();
                if plan.targets.is_empty() {
                    continue;
                }
                for swapped in self.paste_patches(
                    image,
                    &swap,
                    &plan,
                    &target,
                    seed,
                    &mut pixels,
                    &mut rejected,
                )? {
                    let mut others = plan.others.clone();
                    others.extend(
                        plan.pasted_boxes
                            .iter()
                            .map(|b| (*b, swap.to_object.clone())),
                    );
                    candidates.push(Candidate {
                        swap: swap.clone(),
                        image: swapped,
                        boxes: others,
                    });
                }
            }
        }
        self.rerank(image, candidates, seed, scorer)
            .map(|rows| (rows, rejected))
    }

    /// Boxes, masks and protected regions of a text swap, or `None` when the replaced area is
    /// out of bounds, the patch would lose too much, or the image size is unknown.
    fn plan(
        &self,
        image: &ImageAnnotations,
        read: &ReadCaption<'_>,
        swap: &TextSwap,
    ) -> Option<Plan> {
        let (width, height) = image.size()?;
        let (w, h) = (width as u32, height as u32);
        let grounded: Vec<ObjectBox> = swap
            .grounding
            .map(|g| read.groundings[g])
            .filter(|g| !g.is_scene)
            .map(|g| {
                g.boxes
                    .iter()
                    .map(|b| ObjectBox {
                        image_id: image.image_id.clone(),
                        bbox: *b,
                        score: 1.0,
                        attributes: Default::default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let replaced = if grounded.is_empty() {
            self.object_boxes(&swap.from_lemma, &image.image_id)
                .to_vec()
        } else {
            nms(grounded, self.config.image.nms_iou)
        };
        let pasted_boxes: Vec<BoxXyxy> = replaced.iter().map(|b| b.bbox).collect();
        let area = union_area(&pasted_boxes) / (width * height);
        if pasted_boxes.is_empty()
            || area < self.config.image.min_area
            || area > self.config.image.max_area
        {
            return None;
        }
        let others = self.mentioned_boxes(image, read, swap);
        let mut protected_boxes = Vec::new();
        let mut targets = Vec::new();
        let (mut total, mut omitted) = (0usize, 0usize);
        for b in &pasted_boxes {
            let (x0, y0, x1, y1) = pixel_rect(b, w, h)?;
            let guards: Vec<BoxXyxy> = others
                .iter()
                .map(|(o, _)| *o)
                .filter(|o| {
                    o.intersection(b) > 0.0
                        && o.intersection(b) / b.area() <= self.config.image.container_overlap
                })
                .collect();
            let mut mask = Vec::with_capacity(((x1 - x0) * (y1 - y0)) as usize);
            for y in y0..y1 {
                for x in x0..x1 {
                    // Pixels whose centre is outside the box (the rect rounds outwards) stay.
                    if !pixel_in(b, x, y) {
                        mask.push(false);
                        continue;
                    }
                    let keep = !guards.iter().any(|g| pixel_in(g, x, y));
                    omitted += usize::from(!keep);
                    total += 1;
                    mask.push(keep);
                }
            }
            for g in guards {
                if !protected_boxes.contains(&g) {
                    protected_boxes.push(g);
                }
            }
            targets.push(TargetRect {
                x0,
                y0,
                x1,
                y1,
                mask,
            });
        }
        let omitted_fraction = omitted as f64 / total.max(1) as f64;
        if omitted_fraction > self.config.image.max_omitted {
            return None;
        }
        let reference = pasted_boxes
            .iter()
            .copied()
            .max_by(|a, b| a.area().total_cmp(&b.area()))?;
        Some(Plan {
            targets,
            pasted_boxes,
            protected_boxes,
            omitted_fraction,
            others,
            reference,
        })
    }

    /// Boxes of the other objects the caption mentions, with labels: its other grounded phrases,
    /// or without groundings its other object mentions' boxes.
    fn mentioned_boxes(
        &self,
        image: &ImageAnnotations,
        read: &ReadCaption<'_>,
        swap: &TextSwap,
    ) -> Vec<(BoxXyxy, String)> {
        let mut out = Vec::new();
        if !read.groundings.is_empty() {
            for (g, grounding) in read.groundings.iter().enumerate() {
                if swap.grounding == Some(g) || grounding.is_scene || grounding.not_visual {
                    continue;
                }
                out.extend(
                    grounding
                        .boxes
                        .iter()
                        .map(|b| (*b, grounding.phrase.clone())),
                );
            }
            return out;
        }
        for mention in &read.mentions {
            if mention.lemma == swap.from_lemma {
                continue;
            }
            for b in self.object_boxes(&mention.lemma, &image.image_id) {
                out.push((b.bbox, mention.lemma.clone()));
            }
        }
        out
    }

    /// Source patches of the new object that fit the plan: boxes in other images with a close
    /// aspect ratio and pixel count, those described with the new attribute first.
    fn source_patches(
        &self,
        image_id: &str,
        swap: &TextSwap,
        reference: &BoxXyxy,
    ) -> Vec<&ObjectBox> {
        let config = &self.config.image;
        let aspect = |b: &BoxXyxy| (b.x2 - b.x1) / (b.y2 - b.y1).max(f64::MIN_POSITIVE);
        let ratio = |a: f64, b: f64| if a > b { a / b } else { b / a };
        let fits = |b: &&ObjectBox| {
            b.bbox.area() > 0.0
                && ratio(aspect(&b.bbox), aspect(reference)) <= config.max_aspect_change
                && ratio(b.bbox.area(), reference.area()) <= config.max_scale_change
        };
        let all: Vec<&ObjectBox> = self
            .boxes
            .get(&swap.to_lemma)
            .into_iter()
            .flat_map(|images| images.iter())
            .filter(|(id, _)| id.as_str() != image_id)
            .flat_map(|(_, boxes)| boxes.iter())
            .filter(fits)
            .collect();
        let with_attribute: Vec<&ObjectBox> = all
            .iter()
            .copied()
            .filter(|b| {
                swap.to_attribute
                    .as_ref()
                    .is_some_and(|a| b.attributes.contains(a))
            })
            .collect();
        if with_attribute.is_empty() {
            all
        } else {
            with_attribute
        }
    }

    /// Pastes up to `patches_per_swap` random source patches; encodes each result as PNG.
    #[allow(clippy::too_many_arguments)]
    fn paste_patches(
        &self,
        image: &ImageAnnotations,
        swap: &TextSwap,
        plan: &Plan,
        target: &RgbImage,
        seed: u64,
        pixels: &mut ImageCache,
        rejected: &mut Vec<RejectedRow>,
    ) -> Result<Vec<ImageSwap>> {
        let config = &self.config.image;
        let mut sources = self.source_patches(&image.image_id, swap, &plan.reference);
        let key = format!("{}#{}", swap.caption_id, swap.index);
        let mut rng = predicate_rng(seed, &image.image_id, IMAGE_STAGE, &key);
        sources.shuffle(&mut rng);
        let mut out = Vec::new();
        for (patch_index, source) in sources
            .into_iter()
            .take(config.patches_per_swap)
            .enumerate()
        {
            let Some(source_pixels) = pixels.load(self, &source.image_id, rejected) else {
                continue;
            };
            let Some((sx0, sy0, sx1, sy1)) =
                pixel_rect(&source.bbox, source_pixels.width(), source_pixels.height())
            else {
                continue;
            };
            let mut result = target.clone();
            let mut pasted = Vec::new();
            for rect in &plan.targets {
                paste(
                    &mut result,
                    rect,
                    source_pixels,
                    (sx0, sy0, sx1, sy1),
                    config.blend_width,
                    &mut pasted,
                );
            }
            let visible = 1.0 - plan.omitted_fraction;
            let builtin = builtin_score(
                swap.to_attribute.as_deref(),
                &source.attributes,
                &pasted,
                visible,
            );
            let mut png = std::io::Cursor::new(Vec::new());
            result
                .write_to(&mut png, image::ImageFormat::Png)
                .map_err(|e| Error::Invalid {
                    what: format!(
                        "cutswap image swap {key}#{patch_index} of image {}",
                        image.image_id
                    ),
                    reason: format!("encoding PNG: {e}"),
                })?;
            out.push(ImageSwap {
                png: png.into_inner(),
                patch: super::sample_id(&image.image_id, &format!("{key}#{patch_index}")),
                source_image_id: source.image_id.clone(),
                source_box: source.bbox,
                pasted_boxes: plan.pasted_boxes.clone(),
                protected_boxes: plan.protected_boxes.clone(),
                omitted_fraction: plan.omitted_fraction,
                score: builtin.value,
                scorer: "builtin".to_string(),
                builtin,
            });
        }
        Ok(out)
    }

    /// Scores every pair, drops those under the threshold, keeps the best `keep_top` per text
    /// swap and turns them into samples.
    fn rerank(
        &self,
        image: &ImageAnnotations,
        mut candidates: Vec<Candidate>,
        seed: u64,
        scorer: Option<&dyn ImageTextScorer>,
    ) -> Result<Vec<SampleRow>> {
        let config = &self.config.image;
        if let Some(scorer) = scorer {
            let scores = if candidates.is_empty() {
                Vec::new()
            } else {
                score_externally(scorer, &image.image_id, &candidates)?
            };
            if scores.len() != candidates.len() {
                return Err(Error::Adapter {
                    adapter: "image_text_scorer".into(),
                    batch: format!("cutswap pairs of image {}", image.image_id),
                    reason: format!("{} scores for {} pairs", scores.len(), candidates.len()),
                });
            }
            for (candidate, score) in candidates.iter_mut().zip(scores) {
                candidate.image.score = score;
                candidate.image.scorer = "external".into();
            }
        }
        let threshold = config.threshold.unwrap_or(if scorer.is_some() {
            EXTERNAL_THRESHOLD
        } else {
            BUILTIN_THRESHOLD
        });
        let mut groups: BTreeMap<(String, usize), Vec<Candidate>> = BTreeMap::new();
        for candidate in candidates {
            if candidate.image.score < threshold {
                continue;
            }
            let key = (candidate.swap.caption_id.clone(), candidate.swap.index);
            groups.entry(key).or_default().push(candidate);
        }
        let mut rows = Vec::new();
        for (_, mut group) in groups {
            // Best first; equal scores keep the draw order (stable sort).
            group.sort_by(|a, b| b.image.score.total_cmp(&a.image.score));
            for (rank, candidate) in group.into_iter().enumerate() {
                let Candidate {
                    swap,
                    image: swapped,
                    boxes,
                } = candidate;
                if rank >= config.keep_top {
                    continue;
                }
                let (boxes, labels) = boxes.into_iter().unzip();
                rows.push(self.sample_row(
                    image,
                    &swap,
                    SampleParts {
                        source: format!(
                            "{}#{}#image#{}",
                            swap.caption_id, swap.index, swapped.patch
                        ),
                        boxes,
                        labels,
                        quality: vec![
                            QualityScore {
                                name: "cutswap_image_text".into(),
                                value: swapped.score,
                            },
                            QualityScore {
                                name: "cutswap_rank".into(),
                                value: (rank + 1) as f64,
                            },
                        ],
                        detail: serde_json::json!({ "text": swap, "image": swapped }),
                        image: Some(swapped.png),
                        seed,
                    },
                ));
            }
        }
        Ok(rows)
    }
}

/// Scores the candidates with an external image-text scorer, which reads image files: each
/// swapped image is written to a temporary directory for the call and removed after it.
fn score_externally(
    scorer: &dyn ImageTextScorer,
    image_id: &str,
    candidates: &[Candidate],
) -> Result<Vec<f64>> {
    let dir = tempfile::Builder::new()
        .prefix("capflow-cutswap-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut pairs = Vec::with_capacity(candidates.len());
    for (i, candidate) in candidates.iter().enumerate() {
        let file = dir.path().join(format!("{i:05}.png"));
        std::fs::write(&file, &candidate.image.png).map_err(|e| Error::io(&file, e))?;
        pairs.push(ImageText {
            image: file,
            text: candidate.swap.text.clone(),
        });
    }
    let scores = scorer
        .score_pairs(&pairs)
        .map_err(|e| e.context(format!("image {image_id}")))?;
    Ok(scores)
}

/// Decoded images of one call, by image id (`None`: unreadable, already rejected).
#[derive(Default)]
struct ImageCache {
    images: HashMap<String, Option<RgbImage>>,
}

impl ImageCache {
    fn load(
        &mut self,
        model: &Model,
        image_id: &str,
        rejected: &mut Vec<RejectedRow>,
    ) -> Option<&RgbImage> {
        if !self.images.contains_key(image_id) {
            let decoded = match model.image_path(image_id) {
                None => {
                    rejected.push(reject(
                        image_id,
                        "",
                        "no image file name to fill the cutswap.image.file_name template",
                    ));
                    None
                }
                Some(path) => match read_rgb(&path) {
                    Ok(img) => Some(img),
                    Err(reason) => {
                        rejected.push(reject(image_id, &path.display().to_string(), &reason));
                        None
                    }
                },
            };
            self.images.insert(image_id.to_string(), decoded);
        }
        self.images.get(image_id).and_then(Option::as_ref)
    }
}

fn reject(image_id: &str, file: &str, reason: &str) -> RejectedRow {
    RejectedRow {
        format: "cutswap-image".into(),
        source_file: file.into(),
        record: format!("image {image_id}"),
        line: None,
        byte_offset: None,
        reason: reason.into(),
        excerpt: String::new(),
    }
}

/// Reads an image file as 8-bit RGB.
pub fn read_rgb(path: &Path) -> std::result::Result<RgbImage, String> {
    let reader = image::ImageReader::open(path)
        .map_err(|e| format!("cannot open image: {e}"))?
        .with_guessed_format()
        .map_err(|e| format!("cannot read image: {e}"))?;
    let decoded = reader
        .decode()
        .map_err(|e| format!("cannot decode image: {e}"))?;
    Ok(decoded.to_rgb8())
}

/// Pastes the source crop `(sx0, sy0, sx1, sy1)` resized to `rect` into `out` through the
/// rect's mask, feathered over `blend_width` of the rect's shorter side. The pasted pixel
/// values (alpha 1 only) are appended to `pasted`.
fn paste(
    out: &mut RgbImage,
    rect: &TargetRect,
    source: &RgbImage,
    (sx0, sy0, sx1, sy1): (u32, u32, u32, u32),
    blend_width: f64,
    pasted: &mut Vec<[u8; 3]>,
) {
    let (rw, rh) = (rect.width(), rect.height());
    let distance = inner_distance(&rect.mask, rw as usize, rh as usize);
    let feather = (blend_width * f64::from(rw.min(rh))).max(1.0);
    let (cw, ch) = (f64::from(sx1 - sx0), f64::from(sy1 - sy0));
    for j in 0..rh {
        for i in 0..rw {
            let at = (j * rw + i) as usize;
            if !rect.mask[at] {
                continue;
            }
            let sx = f64::from(sx0) + (f64::from(i) + 0.5) * cw / f64::from(rw) - 0.5;
            let sy = f64::from(sy0) + (f64::from(j) + 0.5) * ch / f64::from(rh) - 0.5;
            let patch = bilinear(source, sx, sy, (sx0, sy0, sx1, sy1));
            let alpha = (f64::from(distance[at]) / feather).min(1.0);
            let pixel = out.get_pixel_mut(rect.x0 + i, rect.y0 + j);
            for (channel, value) in pixel.0.iter_mut().zip(patch) {
                let blended = alpha * value + (1.0 - alpha) * f64::from(*channel);
                *channel = blended.round().clamp(0.0, 255.0) as u8;
            }
            if alpha >= 1.0 {
                pasted.push(pixel.0);
            }
        }
    }
}

/// Chessboard distance of every mask pixel to the nearest pixel outside the mask (the rect's
/// outside counts as outside): 1 on the seam, growing inwards. Two-pass chamfer transform.
fn inner_distance(mask: &[bool], w: usize, h: usize) -> Vec<u32> {
    let big = u32::MAX / 2;
    let mut d: Vec<u32> = mask.iter().map(|&m| if m { big } else { 0 }).collect();
    let at = |x: isize, y: isize, d: &[u32]| -> u32 {
        if x < 0 || y < 0 || x >= w as isize || y >= h as isize {
            0
        } else {
            d[y as usize * w + x as usize]
        }
    };
    for y in 0..h as isize {
        for x in 0..w as isize {
            let i = y as usize * w + x as usize;
            if d[i] == 0 {
                continue;
            }
            let n = [(-1, -1), (0, -1), (1, -1), (-1, 0)]
                .iter()
                .map(|(dx, dy)| at(x + dx, y + dy, &d))
                .min()
                .unwrap_or(0);
            d[i] = d[i].min(n + 1);
        }
    }
    for y in (0..h as isize).rev() {
        for x in (0..w as isize).rev() {
            let i = y as usize * w + x as usize;
            if d[i] == 0 {
                continue;
            }
            let n = [(1, 1), (0, 1), (-1, 1), (1, 0)]
                .iter()
                .map(|(dx, dy)| at(x + dx, y + dy, &d))
                .min()
                .unwrap_or(0);
            d[i] = d[i].min(n + 1);
        }
    }
    d
}

/// Bilinear sample of `image` at `(x, y)` (pixel centres at integers), clamped to the crop.
fn bilinear(image: &RgbImage, x: f64, y: f64, (x0, y0, x1, y1): (u32, u32, u32, u32)) -> [f64; 3] {
    let x = x.clamp(f64::from(x0), f64::from(x1 - 1));
    let y = y.clamp(f64::from(y0), f64::from(y1 - 1));
    let (xa, ya) = (x.floor() as u32, y.floor() as u32);
    let (xb, yb) = ((xa + 1).min(x1 - 1), (ya + 1).min(y1 - 1));
    let (fx, fy) = (x - f64::from(xa), y - f64::from(ya));
    let mut out = [0.0; 3];
    for (c, value) in out.iter_mut().enumerate() {
        let p = |px: u32, py: u32| f64::from(image.get_pixel(px, py).0[c]);
        let top = p(xa, ya) * (1.0 - fx) + p(xb, ya) * fx;
        let bottom = p(xa, yb) * (1.0 - fx) + p(xb, yb) * fx;
        *value = top * (1.0 - fy) + bottom * fy;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(x1: f64, y1: f64, x2: f64, y2: f64, score: f64, attribute: &str) -> ObjectBox {
        ObjectBox {
            image_id: "1".into(),
            bbox: BoxXyxy::new(x1, y1, x2, y2),
            score,
            attributes: [attribute.to_string()].into_iter().collect(),
        }
    }

    #[test]
    fn nms_keeps_the_best_of_overlapping_boxes() {
        // IoU of the first two: 81 / 119 ≈ 0.68; the third is apart.
        let kept = nms(
            vec![
                object(0.0, 0.0, 10.0, 10.0, 0.6, "red"),
                object(1.0, 1.0, 11.0, 11.0, 0.9, "big"),
                object(50.0, 50.0, 60.0, 60.0, 0.5, "small"),
            ],
            0.5,
        );
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].bbox, BoxXyxy::new(1.0, 1.0, 11.0, 11.0));
        let attributes: Vec<&str> = kept[0].attributes.iter().map(String::as_str).collect();
        assert_eq!(attributes, ["big", "red"]);
        // A threshold above their IoU keeps both.
        assert_eq!(
            nms(
                vec![
                    object(0.0, 0.0, 10.0, 10.0, 0.6, "a"),
                    object(1.0, 1.0, 11.0, 11.0, 0.9, "b")
                ],
                0.7
            )
            .len(),
            2
        );
    }

    #[test]
    fn distance_grows_inwards_from_the_seam() {
        // A 5x5 mask with its centre column cut out.
        let mask: Vec<bool> = (0..25).map(|i| i % 5 != 2).collect();
        let d = inner_distance(&mask, 5, 5);
        assert_eq!(&d[10..15], &[1, 1, 0, 1, 1]);
        let full = inner_distance(&[true; 25], 5, 5);
        assert_eq!(&full[10..15], &[1, 2, 3, 2, 1]);
    }

    #[test]
    fn bilinear_interpolates_between_pixel_centres() {
        let mut img = RgbImage::new(2, 1);
        img.put_pixel(0, 0, image::Rgb([0, 100, 200]));
        img.put_pixel(1, 0, image::Rgb([100, 200, 0]));
        let mid = bilinear(&img, 0.5, 0.0, (0, 0, 2, 1));
        assert_eq!(mid, [50.0, 150.0, 100.0]);
        assert_eq!(bilinear(&img, -3.0, 0.0, (0, 0, 2, 1)), [0.0, 100.0, 200.0]);
    }
}
