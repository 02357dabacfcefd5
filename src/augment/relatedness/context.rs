//! The visual context of an image: its most confident detected classes, near-duplicates removed.
//!
//! The paper keeps the top-3 classes of each classifier after dropping predictions with
//! probability below 0.2, and removes duplicated objects by semantic similarity. Here a class's
//! probability is the best score among its detections (a ground-truth box without a score counts
//! as certain, 1.0). Classes are visited best first; one whose name normalises to a kept one
//! (`sunglass`/`sunglasses`, `crash_helmet`/`crash helmet`) or whose similarity to a kept one
//! reaches `duplicate_similarity` is skipped, and visiting stops once `top_k` are kept. Removing
//! duplicates before truncating means three distinct classes are kept whenever there are three.

use std::collections::BTreeMap;

use crate::augment::control::distinct_boxes;
use crate::schema::{BoxXyxy, DetectionRow};

/// Settings of [`visual_context`].
#[derive(Clone, Debug, PartialEq)]
pub struct ContextRule {
    /// Classes kept per image (paper: 3).
    pub top_k: usize,
    /// Classes less probable than this are dropped (paper: 0.2).
    pub min_probability: f64,
    /// A class at least this similar to a kept one is a duplicate.
    pub duplicate_similarity: f64,
    /// Detection sources to use (`coco-instances`, a detector name); empty means all.
    pub sources: Vec<String>,
}

impl Default for ContextRule {
    fn default() -> Self {
        ContextRule {
            top_k: 3,
            min_probability: 0.2,
            duplicate_similarity: 0.8,
            sources: Vec::new(),
        }
    }
}

/// The classes that describe an image, best first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VisualContext {
    /// Class names as written in the context string (`_` read as a space).
    pub labels: Vec<String>,
    /// Probability of each label.
    pub probabilities: Vec<f64>,
    /// Detections of the kept classes above the probability threshold, in input order.
    pub detection_ids: Vec<String>,
    /// Their boxes, without repeats.
    pub boxes: Vec<BoxXyxy>,
}

impl VisualContext {
    /// The context as the reference writes it: labels joined by spaces
    /// (`motor scooter crash helmet motorcycle`).
    pub fn text(&self) -> String {
        self.labels.join(" ")
    }

    /// `P(c)`: the mean probability of the kept classes, 0 without any.
    pub fn confidence(&self) -> f64 {
        if self.probabilities.is_empty() {
            return 0.0;
        }
        self.probabilities.iter().sum::<f64>() / self.probabilities.len() as f64
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// A class label as it appears in a context string: `_` as a space, whitespace collapsed.
pub fn display_label(label: &str) -> String {
    label
        .replace('_', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A label reduced to lower-case letters and digits (`Crash-Helmet` → `crashhelmet`).
fn spelling_key(label: &str) -> String {
    label
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether two labels spell one class: equal keys, or one is the other plus a plural `s`/`es`
/// (`sunglass`/`sunglasses`, `crash_helmet`/`Crash Helmets`).
fn same_spelling(a: &str, b: &str) -> bool {
    let (a, b) = (spelling_key(a), spelling_key(b));
    let (short, long) = if a.len() <= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    match long.strip_prefix(short.as_str()) {
        Some(rest) => rest.is_empty() || rest == "s" || rest == "es",
        None => false,
    }
}

/// The visual context of one image's detections.
///
/// `similarity(a, b)` compares two labels (`None` when it cannot tell, e.g. a word without a
/// vector); only the spelling rule removes duplicates then.
pub fn visual_context(
    detections: &[DetectionRow],
    rule: &ContextRule,
    similarity: &dyn Fn(&str, &str) -> Option<f64>,
) -> VisualContext {
    let usable = |d: &&DetectionRow| {
        (rule.sources.is_empty() || rule.sources.contains(&d.source))
            && !display_label(&d.label).is_empty()
    };
    // Best probability per class; BTreeMap keeps the visiting order independent of input order.
    let mut best: BTreeMap<String, f64> = BTreeMap::new();
    for detection in detections.iter().filter(usable) {
        let probability = detection_probability(detection);
        // NaN scores count as 0 (see `detection_probability`), so this comparison decides.
        if probability < rule.min_probability {
            continue;
        }
        let slot = best
            .entry(display_label(&detection.label))
            .or_insert(probability);
        *slot = slot.max(probability);
    }
    let mut classes: Vec<(String, f64)> = best.into_iter().collect();
    classes.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));

    let mut context = VisualContext::default();
    for (label, probability) in classes {
        if context.labels.len() >= rule.top_k {
            break;
        }
        let duplicate = context.labels.iter().any(|kept| {
            same_spelling(kept, &label)
                || similarity(kept, &label).is_some_and(|s| s >= rule.duplicate_similarity)
        });
        if !duplicate {
            context.labels.push(label);
            context.probabilities.push(probability);
        }
    }
    let kept: Vec<&DetectionRow> = detections
        .iter()
        .filter(usable)
        .filter(|d| detection_probability(d) >= rule.min_probability)
        .filter(|d| context.labels.contains(&display_label(&d.label)))
        .collect();
    context.detection_ids = kept.iter().map(|d| d.detection_id.clone()).collect();
    context.boxes = distinct_boxes(kept.iter().map(|d| &d.bbox));
    context
}

/// A detection's probability: its score, or 1 for an annotated box without one. A score that
/// is not a number counts as 0.
fn detection_probability(detection: &DetectionRow) -> f64 {
    match detection.score {
        Some(score) if score.is_finite() => score,
        Some(_) => 0.0,
        None => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detection(id: &str, label: &str, score: Option<f64>) -> DetectionRow {
        DetectionRow {
            image_id: "1".into(),
            detection_id: id.into(),
            source: "detector".into(),
            label: label.into(),
            score,
            bbox: BoxXyxy::new(0.0, 0.0, 10.0, 10.0),
            attributes: Vec::new(),
            feature: None,
        }
    }

    fn no_similarity(_: &str, _: &str) -> Option<f64> {
        None
    }

    #[test]
    fn keeps_the_three_most_probable_classes_above_the_threshold() {
        let detections = [
            detection("a", "dog", Some(0.9)),
            detection("b", "frisbee", Some(0.5)),
            detection("c", "dog", Some(0.3)),
            detection("d", "grass", Some(0.19)),
            detection("e", "tree", Some(0.25)),
            detection("f", "person", Some(0.21)),
        ];
        let context = visual_context(&detections, &ContextRule::default(), &no_similarity);
        assert_eq!(context.labels, ["dog", "frisbee", "tree"]);
        assert_eq!(context.probabilities, [0.9, 0.5, 0.25]);
        // (0.9 + 0.5 + 0.25) / 3
        assert!((context.confidence() - 0.55).abs() < 1e-15);
        assert_eq!(context.detection_ids, ["a", "b", "c", "e"]);
        assert_eq!(context.text(), "dog frisbee tree");
    }

    #[test]
    fn duplicates_by_spelling_or_similarity_are_skipped() {
        let detections = [
            detection("a", "sunglasses", Some(0.8)),
            detection("b", "sunglass", Some(0.7)),
            detection("c", "crash_helmet", Some(0.6)),
            detection("d", "motor scooter", Some(0.5)),
            detection("e", "moped", Some(0.4)),
        ];
        let similar = |a: &str, b: &str| -> Option<f64> {
            let pair = [a, b];
            Some(
                if pair.contains(&"moped") && pair.contains(&"motor scooter") {
                    0.85
                } else {
                    0.1
                },
            )
        };
        let context = visual_context(&detections, &ContextRule::default(), &similar);
        assert_eq!(
            context.labels,
            ["sunglasses", "crash helmet", "motor scooter"]
        );
    }

    #[test]
    fn unscored_boxes_are_certain_and_sources_filter() {
        let mut other = detection("b", "cat", Some(0.99));
        other.source = "other".into();
        let detections = [detection("a", "dog", None), other];
        let rule = ContextRule {
            sources: vec!["detector".into()],
            ..ContextRule::default()
        };
        let context = visual_context(&detections, &rule, &no_similarity);
        assert_eq!(context.labels, ["dog"]);
        assert_eq!(context.confidence(), 1.0);
    }

    #[test]
    fn no_confident_class_gives_an_empty_context() {
        let detections = [detection("a", "dog", Some(0.1)), detection("b", "x", None)];
        let rule = ContextRule {
            min_probability: 1.5,
            ..ContextRule::default()
        };
        let context = visual_context(&detections, &rule, &no_similarity);
        assert!(context.is_empty());
        assert_eq!(context.confidence(), 0.0);
        assert!(context.boxes.is_empty());
    }
}
