//! Detection post-processing as in GBC (METHODS.md §5): score threshold, area filters, NMS with
//! separate IoU thresholds for "single" and "multiple" objects, removal of boxes that contain
//! another box, confidence tolerance to the best box, and top-k.
//!
//! The steps run in apple/ml-gbc's order (`DetectionTextInput.select_bboxes`), on the detections
//! of one label at a time:
//!
//! 1. keep `score > score_threshold`;
//! 2. keep `area > min_abs_area` (pixels) and `area / image area < max_rel_area`;
//! 3. NMS at `nms_single` or `nms_multiple` ([`nms`], torchvision's algorithm); the survivors
//!    come out by decreasing score;
//! 4. drop every box that contains another surviving box ([`ContainedBoxes`]);
//! 5. for "single" objects, keep boxes whose score is within `high_conf_tolerance` of the best;
//! 6. keep the `top_k` best (stable by score).
//!
//! ```
//! use capflow::augment::detections::{select_boxes, DetectionFilter, Multiplicity, ScoredBox};
//! use capflow::schema::BoxXyxy;
//!
//! let boxes = [
//!     ScoredBox { bbox: BoxXyxy::new(0.0, 0.0, 100.0, 100.0), score: 0.9 },
//!     ScoredBox { bbox: BoxXyxy::new(5.0, 5.0, 105.0, 105.0), score: 0.8 }, // overlaps the first
//!     ScoredBox { bbox: BoxXyxy::new(300.0, 0.0, 400.0, 100.0), score: 0.5 },
//! ];
//! let kept = select_boxes(&boxes, Some((640.0, 480.0)), Multiplicity::Multiple,
//!                         &DetectionFilter::default());
//! assert_eq!(kept, vec![0, 2]);
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::method::Method;
use super::ImageAnnotations;
use crate::error::Result;
use crate::schema::{BoxXyxy, DetectionRow, SampleRow};

/// What to do with boxes nested in one another after NMS (ml-gbc's `remove_inside`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainedBoxes {
    /// Drop a box that contains another box (ml-gbc `remove_inside=False`, its default for
    /// detection: keeps the tight boxes of a group).
    RemoveContaining,
    /// Drop a box that lies inside another box (`remove_inside=True`: keeps one big box).
    RemoveInside,
    /// Keep nested boxes.
    Keep,
}

/// Whether a label names one object or several; GBC uses different NMS thresholds for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Multiplicity {
    Single,
    Multiple,
}

/// How [`postprocess`] decides the [`Multiplicity`] of a detection label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MultiplicityRule {
    /// Plural-looking labels (`dogs`, `people`) are "multiple", others "single".
    LabelNumber,
    /// Every label is "single".
    Single,
    /// Every label is "multiple".
    Multiple,
}

/// Detection post-processing settings, read from a recipe's `[detections]` table.
///
/// Defaults are the GBC paper's (App. B.2) and ml-gbc's library defaults: confidence > 0.05,
/// area > 5000 px, NMS 0.05 for single and 0.2 for multiple objects, boxes containing another
/// box dropped, boxes within 0.05 of the best confidence for single objects, top 6.
/// `max_rel_area` is unset: GBC uses 0.8 only for detections made inside an entity crop.
/// (METHODS.md quotes 0.35 as GBC's production threshold; set `score_threshold = 0.35` for it.)
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectionFilter {
    pub score_threshold: Option<f64>,
    pub min_abs_area: Option<f64>,
    pub max_rel_area: Option<f64>,
    pub nms_single: Option<f64>,
    pub nms_multiple: Option<f64>,
    pub contained: ContainedBoxes,
    pub high_conf_tolerance: Option<f64>,
    pub top_k: Option<usize>,
    pub multiplicity: MultiplicityRule,
}

impl Default for DetectionFilter {
    fn default() -> Self {
        DetectionFilter {
            score_threshold: Some(0.05),
            min_abs_area: Some(5000.0),
            max_rel_area: None,
            nms_single: Some(0.05),
            nms_multiple: Some(0.2),
            contained: ContainedBoxes::RemoveContaining,
            high_conf_tolerance: Some(0.05),
            top_k: Some(6),
            multiplicity: MultiplicityRule::LabelNumber,
        }
    }
}

/// A box with its detector confidence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoredBox {
    pub bbox: BoxXyxy,
    pub score: f64,
}

/// Non-maximum suppression exactly as torchvision's CPU `nms` kernel: boxes in order of
/// decreasing score (a stable sort, so ties keep input order); a box is kept unless an earlier
/// kept box overlaps it with IoU > `iou_threshold`. Areas are `(x2 - x1) * (y2 - y1)` without
/// clamping and intersections clamp width and height at 0, as torchvision computes them; an IoU
/// of 0/0 (two empty boxes) suppresses nothing. Returns the kept indices by decreasing score.
pub fn nms(boxes: &[BoxXyxy], scores: &[f64], iou_threshold: f64) -> Vec<usize> {
    let n = boxes.len().min(scores.len());
    let mut order: Vec<usize> = (0..n).collect();
    // Descending and stable; NaN scores sort last.
    order.sort_by(|&a, &b| {
        scores[b]
            .partial_cmp(&scores[a])
            .unwrap_or_else(|| scores[a].is_nan().cmp(&scores[b].is_nan()))
    });
    let areas: Vec<f64> = boxes[..n]
        .iter()
        .map(|b| (b.x2 - b.x1) * (b.y2 - b.y1))
        .collect();
    let mut suppressed = vec![false; n];
    let mut keep = Vec::new();
    for (rank, &i) in order.iter().enumerate() {
        if suppressed[i] {
            continue;
        }
        keep.push(i);
        let a = &boxes[i];
        for &j in &order[rank + 1..] {
            if suppressed[j] {
                continue;
            }
            let b = &boxes[j];
            let w = (a.x2.min(b.x2) - a.x1.max(b.x1)).max(0.0);
            let h = (a.y2.min(b.y2) - a.y1.max(b.y1)).max(0.0);
            let inter = w * h;
            let iou = inter / (areas[i] + areas[j] - inter);
            if iou > iou_threshold {
                suppressed[j] = true;
            }
        }
    }
    keep
}

/// ml-gbc's `Bbox.is_inside`: `inner` lies within `outer`, edges included.
fn is_inside(inner: &BoxXyxy, outer: &BoxXyxy) -> bool {
    inner.x1 >= outer.x1 && inner.x2 <= outer.x2 && inner.y1 >= outer.y1 && inner.y2 <= outer.y2
}

/// Runs the post-processing steps on the detections of one label and returns the indices of the
/// kept boxes in output order (by decreasing score). `image_size` (width, height in pixels) is
/// needed only for `max_rel_area`; without it that filter is skipped.
pub fn select_boxes(
    boxes: &[ScoredBox],
    image_size: Option<(f64, f64)>,
    multiplicity: Multiplicity,
    filter: &DetectionFilter,
) -> Vec<usize> {
    let mut kept: Vec<usize> = (0..boxes.len())
        .filter(|&i| filter.score_threshold.is_none_or(|t| boxes[i].score > t))
        .filter(|&i| {
            let area = box_area(&boxes[i].bbox);
            let abs_ok = filter.min_abs_area.is_none_or(|min| area > min);
            let rel_ok = match (filter.max_rel_area, image_size) {
                (Some(max), Some((w, h))) => area / (w * h) < max,
                _ => true,
            };
            abs_ok && rel_ok
        })
        .collect();

    let nms_threshold = match multiplicity {
        Multiplicity::Single => filter.nms_single,
        Multiplicity::Multiple => filter.nms_multiple,
    };
    if let Some(threshold) = nms_threshold {
        let candidate_boxes: Vec<BoxXyxy> = kept.iter().map(|&i| boxes[i].bbox).collect();
        let candidate_scores: Vec<f64> = kept.iter().map(|&i| boxes[i].score).collect();
        kept = nms(&candidate_boxes, &candidate_scores, threshold)
            .into_iter()
            .map(|k| kept[k])
            .collect();
    }

    kept = match filter.contained {
        ContainedBoxes::Keep => kept,
        ContainedBoxes::RemoveContaining => kept
            .iter()
            .copied()
            .filter(|&i| {
                !kept
                    .iter()
                    .any(|&j| j != i && is_inside(&boxes[j].bbox, &boxes[i].bbox))
            })
            .collect(),
        ContainedBoxes::RemoveInside => kept
            .iter()
            .copied()
            .filter(|&i| {
                !kept
                    .iter()
                    .any(|&j| j != i && is_inside(&boxes[i].bbox, &boxes[j].bbox))
            })
            .collect(),
    };

    if let (Multiplicity::Single, Some(tolerance)) = (multiplicity, filter.high_conf_tolerance) {
        let best = kept
            .iter()
            .map(|&i| boxes[i].score)
            .fold(f64::NEG_INFINITY, f64::max);
        kept.retain(|&i| best - boxes[i].score < tolerance);
    }

    if let Some(k) = filter.top_k {
        if kept.len() > k {
            kept.sort_by(|&a, &b| boxes[b].score.total_cmp(&boxes[a].score));
            kept.truncate(k);
        }
    }
    kept
}

/// The area the GBC filters compare: torchvision's `(x2 - x1) * (y2 - y1)`.
fn box_area(b: &BoxXyxy) -> f64 {
    (b.x2 - b.x1) * (b.y2 - b.y1)
}

/// Whether a detection label reads as plural (`dogs`, `boxes`, `people`, `children`).
///
/// A small English heuristic for [`MultiplicityRule::LabelNumber`]: the last word ends in `s`
/// but not `ss`, `us` or `is`, or is one of the common irregular plurals.
pub fn looks_plural(label: &str) -> bool {
    let last = label.split_whitespace().last().unwrap_or("").to_lowercase();
    const IRREGULAR: [&str; 8] = [
        "people", "children", "men", "women", "feet", "teeth", "mice", "geese",
    ];
    if IRREGULAR.contains(&last.as_str()) {
        return true;
    }
    last.len() > 2
        && last.ends_with('s')
        && !(last.ends_with("ss") || last.ends_with("us") || last.ends_with("is"))
}

/// Post-processes every detection of one image: detections are grouped by (source, label) and
/// each group goes through [`select_boxes`]. Groups come out in order of their first detection,
/// each group's boxes by decreasing score. A detection without a score counts as confidence 1
/// (ground-truth boxes pass the score threshold).
pub fn postprocess(
    detections: &[DetectionRow],
    image_size: Option<(f64, f64)>,
    filter: &DetectionFilter,
) -> Vec<DetectionRow> {
    let mut groups: BTreeMap<(usize, &str, &str), Vec<usize>> = BTreeMap::new();
    let mut first_seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (i, d) in detections.iter().enumerate() {
        let key = (d.source.as_str(), d.label.as_str());
        let first = *first_seen.entry(key).or_insert(i);
        groups.entry((first, key.0, key.1)).or_default().push(i);
    }
    let mut out = Vec::new();
    for ((_, _, label), members) in groups {
        let multiplicity = match filter.multiplicity {
            MultiplicityRule::Single => Multiplicity::Single,
            MultiplicityRule::Multiple => Multiplicity::Multiple,
            MultiplicityRule::LabelNumber if looks_plural(label) => Multiplicity::Multiple,
            MultiplicityRule::LabelNumber => Multiplicity::Single,
        };
        let boxes: Vec<ScoredBox> = members
            .iter()
            .map(|&i| ScoredBox {
                bbox: detections[i].bbox,
                score: detections[i].score.unwrap_or(1.0),
            })
            .collect();
        for k in select_boxes(&boxes, image_size, multiplicity, filter) {
            out.push(detections[members[k]].clone());
        }
    }
    out
}

impl DetectionFilter {
    /// The image with its detections post-processed ([`postprocess`], with the image row's size
    /// for `max_rel_area`); every other row as it was.
    pub fn apply(&self, image: &ImageAnnotations) -> ImageAnnotations {
        let detections = postprocess(&image.detections, image.size(), self);
        ImageAnnotations {
            detections,
            ..image.clone()
        }
    }

    /// Checks the thresholds: scores and IoUs in [0, 1], areas not negative, `top_k` above 0.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let unit = [
            ("score_threshold", self.score_threshold),
            ("nms_single", self.nms_single),
            ("nms_multiple", self.nms_multiple),
            ("high_conf_tolerance", self.high_conf_tolerance),
        ];
        for (name, value) in unit {
            if let Some(v) = value.filter(|v| !(0.0..=1.0).contains(v)) {
                return Err(format!("[detections] {name} = {v} must be in [0, 1]"));
            }
        }
        if let Some(v) = self.min_abs_area.filter(|v| v.is_nan() || *v < 0.0) {
            return Err(format!(
                "[detections] min_abs_area = {v} must not be negative"
            ));
        }
        if let Some(v) = self.max_rel_area.filter(|v| v.is_nan() || *v <= 0.0) {
            return Err(format!("[detections] max_rel_area = {v} must be positive"));
        }
        if self.top_k == Some(0) {
            return Err("[detections] top_k = 0 keeps no box; leave it out for no limit".into());
        }
        Ok(())
    }
}

/// A method that sees each image's detections post-processed by a [`DetectionFilter`] (a
/// recipe's `[detections]` table): its stage, rows and samples are the inner method's.
pub struct WithDetectionFilter {
    pub filter: DetectionFilter,
    pub method: std::sync::Arc<dyn Method>,
}

impl Method for WithDetectionFilter {
    fn stage(&self) -> &str {
        self.method.stage()
    }

    fn rows_in(&self, image: &ImageAnnotations) -> usize {
        self.method.rows_in(image)
    }

    fn samples(&self, image: &ImageAnnotations, seed: u64) -> Result<Vec<SampleRow>> {
        if image.detections.is_empty() {
            return self.method.samples(image, seed);
        }
        self.method.samples(&self.filter.apply(image), seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(x1: f64, y1: f64, x2: f64, y2: f64, score: f64) -> ScoredBox {
        ScoredBox {
            bbox: BoxXyxy::new(x1, y1, x2, y2),
            score,
        }
    }

    fn no_filters() -> DetectionFilter {
        DetectionFilter {
            score_threshold: None,
            min_abs_area: None,
            max_rel_area: None,
            nms_single: None,
            nms_multiple: None,
            contained: ContainedBoxes::Keep,
            high_conf_tolerance: None,
            top_k: None,
            multiplicity: MultiplicityRule::LabelNumber,
        }
    }

    #[test]
    fn thresholds_are_strict() {
        let boxes = [
            scored(0.0, 0.0, 100.0, 50.0, 0.35), // score equal to the threshold: dropped
            scored(0.0, 0.0, 100.0, 50.0, 0.36), // area 5000, equal to the minimum: dropped
            scored(0.0, 0.0, 100.0, 51.0, 0.36), // area 5100: kept
        ];
        let filter = DetectionFilter {
            score_threshold: Some(0.05),
            min_abs_area: Some(5000.0),
            ..no_filters()
        };
        assert_eq!(
            select_boxes(&boxes, None, Multiplicity::Multiple, &filter),
            vec![2]
        );
        // Relative area: 5100 / (100 * 100) = 0.51, kept under 0.8 and dropped under 0.5.
        let rel = |max| DetectionFilter {
            max_rel_area: Some(max),
            ..no_filters()
        };
        let one = [boxes[2]];
        let size = Some((100.0, 100.0));
        assert_eq!(
            select_boxes(&one, size, Multiplicity::Multiple, &rel(0.8)),
            vec![0]
        );
        assert!(select_boxes(&one, size, Multiplicity::Multiple, &rel(0.5)).is_empty());
    }

    #[test]
    fn single_and_multiple_use_their_own_nms_threshold() {
        // IoU of the two boxes: 50 * 100 / (2 * 10000 - 5000) = 1/3.
        let boxes = [
            scored(0.0, 0.0, 100.0, 100.0, 0.9),
            scored(50.0, 0.0, 150.0, 100.0, 0.88),
        ];
        let filter = DetectionFilter {
            nms_single: Some(0.05),
            nms_multiple: Some(0.5),
            ..no_filters()
        };
        assert_eq!(
            select_boxes(&boxes, None, Multiplicity::Single, &filter),
            vec![0]
        );
        assert_eq!(
            select_boxes(&boxes, None, Multiplicity::Multiple, &filter),
            vec![0, 1]
        );
    }

    #[test]
    fn containing_boxes_and_confidence_tolerance() {
        let boxes = [
            scored(0.0, 0.0, 200.0, 200.0, 0.95), // contains the two below
            scored(10.0, 10.0, 60.0, 60.0, 0.9),
            scored(100.0, 100.0, 150.0, 150.0, 0.84),
        ];
        let remove_containing = DetectionFilter {
            contained: ContainedBoxes::RemoveContaining,
            ..no_filters()
        };
        assert_eq!(
            select_boxes(&boxes, None, Multiplicity::Multiple, &remove_containing),
            vec![1, 2]
        );
        let remove_inside = DetectionFilter {
            contained: ContainedBoxes::RemoveInside,
            ..no_filters()
        };
        assert_eq!(
            select_boxes(&boxes, None, Multiplicity::Multiple, &remove_inside),
            vec![0]
        );
        // Single object: 0.9 - 0.84 = 0.06 is not within 0.05 of the best remaining box.
        let tolerant = DetectionFilter {
            high_conf_tolerance: Some(0.05),
            ..remove_containing.clone()
        };
        assert_eq!(
            select_boxes(&boxes, None, Multiplicity::Single, &tolerant),
            vec![1]
        );
        // The tolerance applies to single objects only.
        assert_eq!(
            select_boxes(&boxes, None, Multiplicity::Multiple, &tolerant),
            vec![1, 2]
        );
    }

    #[test]
    fn top_k_keeps_the_best_scores() {
        let boxes: Vec<ScoredBox> = (0..10)
            .map(|i| {
                let x = 100.0 * i as f64;
                scored(x, 0.0, x + 90.0, 90.0, [0.5, 0.9, 0.1, 0.7, 0.3][i % 5])
            })
            .collect();
        let filter = DetectionFilter {
            top_k: Some(3),
            ..no_filters()
        };
        // Scores 0.9 at 1 and 6, 0.7 at 3 and 8: stable order keeps 1, 6, then 3.
        assert_eq!(
            select_boxes(&boxes, None, Multiplicity::Multiple, &filter),
            vec![1, 6, 3]
        );
    }

    #[test]
    fn plural_labels() {
        for label in ["dogs", "people", "red boxes", "children"] {
            assert!(looks_plural(label), "{label}");
        }
        for label in ["dog", "glass", "bus", "tennis", "person", "s"] {
            assert!(!looks_plural(label), "{label}");
        }
    }
}
