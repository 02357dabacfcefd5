//! Controllability metrics of controlled captions (CIC-BART-SSA, App. C.1): content IoU and
//! hallucinated nouns (Hal) by Hungarian matching, length precision (LP) and length error (L),
//! coverage bands, and the harmonic mean H.
//!
//! # Content IoU and Hal
//!
//! The control nouns `E` (the names of the controlled objects) and the caption's nouns `N` are
//! matched one to one by the Hungarian method on word similarity; the intersection `I` is the
//! sum of the matched similarities, `IoU = I / (|N| + |E| − I)`, and
//! `Hal = (|N| − I) / |N|` (the paper's Eq. 1 with `I` in place of "IoU(N, E)": the count of
//! caption nouns that match nothing in the control). Both sets are deduplicated. Similarity is
//! 1 for equal words, else the word-vector cosine clipped to `[0, 1]`, and 0 when either word
//! has no vector.

use std::collections::HashSet;

use crate::augment::control::ssa_length_level;
use crate::cluster::linear_sum_assignment;
use crate::text::WordVectors;

/// The number of coverage bands (`[0, 10)`, `[10, 20)`, ..., `[90, 100]` percent).
pub const COVERAGE_BANDS: usize = 10;

/// The band of a coverage in percent: `floor(coverage / 10)`, 100 % in the last band.
pub fn coverage_band(coverage_percent: f64) -> usize {
    if coverage_percent.is_nan() || coverage_percent <= 0.0 {
        return 0;
    }
    ((coverage_percent / 10.0).floor() as usize).min(COVERAGE_BANDS - 1)
}

/// A band's label, `"[10,20)"`.
pub fn coverage_band_label(band: usize) -> String {
    let lo = band * 10;
    if band + 1 == COVERAGE_BANDS {
        format!("[{lo},100]")
    } else {
        format!("[{lo},{})", lo + 10)
    }
}

/// Content match of one caption against its control nouns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContentMatch {
    /// Sum of the matched similarities.
    pub intersection: f64,
    pub iou: f64,
    /// `None` when the caption has no nouns.
    pub hallucination: Option<f64>,
}

/// Word similarity for matching nouns: 1 when equal, else the clipped cosine, 0 without vectors.
pub fn noun_similarity(vectors: Option<&WordVectors>, a: &str, b: &str) -> f64 {
    if a == b {
        return 1.0;
    }
    vectors
        .and_then(|v| v.cosine(a, b))
        .map_or(0.0, |c| c.clamp(0.0, 1.0))
}

fn dedup(words: &[String]) -> Vec<&str> {
    let mut seen = HashSet::new();
    words
        .iter()
        .map(String::as_str)
        .filter(|w| seen.insert(*w))
        .collect()
}

/// Content IoU and Hal of `caption_nouns` against `control_nouns` (see the module docs).
pub fn content_match(
    control_nouns: &[String],
    caption_nouns: &[String],
    similarity: impl Fn(&str, &str) -> f64,
) -> ContentMatch {
    let control = dedup(control_nouns);
    let caption = dedup(caption_nouns);
    let intersection = if control.is_empty() || caption.is_empty() {
        0.0
    } else {
        let cost: Vec<f64> = caption
            .iter()
            .flat_map(|n| control.iter().map(|e| similarity(n, e)))
            .collect();
        // Finite similarities in [0, 1] always have an optimal assignment.
        linear_sum_assignment(&cost, caption.len(), control.len(), true).map_or(0.0, |a| a.total)
    };
    let union = caption.len() as f64 + control.len() as f64 - intersection;
    ContentMatch {
        intersection,
        iou: if union > 0.0 {
            intersection / union
        } else {
            0.0
        },
        hallucination: (!caption.is_empty())
            .then(|| (caption.len() as f64 - intersection) / caption.len() as f64),
    }
}

/// The nouns of a tokenized caption: tokens in `nouns` (a noun lexicon), in order.
pub fn caption_nouns(tokens: &[String], nouns: &HashSet<String>) -> Vec<String> {
    tokens
        .iter()
        .map(|t| t.to_lowercase())
        .filter(|t| nouns.contains(t))
        .collect()
}

/// Length control of one caption: whether its level is the asked level (LP) and the absolute
/// word-count error (L).
pub fn length_hit(asked_level: i32, asked_words: i32, produced_words: usize) -> (bool, f64) {
    (
        ssa_length_level(produced_words) == asked_level,
        (f64::from(asked_words) - produced_words as f64).abs(),
    )
}

/// Harmonic mean of non-negative values; 0 when any is 0, `None` when empty.
pub fn harmonic_mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    if values.iter().any(|&v| v <= 0.0) {
        return Some(0.0);
    }
    Some(values.len() as f64 / values.iter().map(|v| 1.0 / v).sum::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn hand_computed_content_match() {
        // Control {man, bike}; caption nouns {man, bicycle, street}; sim(bicycle, bike) = 0.8,
        // everything else 0 unless equal. Matching: man–man 1, bicycle–bike 0.8: I = 1.8.
        // IoU = 1.8 / (3 + 2 − 1.8) = 0.5625; Hal = (3 − 1.8) / 3 = 0.4.
        let sim = |a: &str, b: &str| match (a, b) {
            _ if a == b => 1.0,
            ("bicycle", "bike") | ("bike", "bicycle") => 0.8,
            _ => 0.0,
        };
        let m = content_match(&words("man bike"), &words("man bicycle street man"), sim);
        assert!((m.intersection - 1.8).abs() < 1e-12);
        assert!((m.iou - 0.5625).abs() < 1e-12);
        assert!((m.hallucination.unwrap() - 0.4).abs() < 1e-12);
        let none = content_match(&words("man"), &[], sim);
        assert_eq!((none.iou, none.hallucination), (0.0, None));
    }

    #[test]
    fn bands_and_lengths() {
        assert_eq!(coverage_band(0.0), 0);
        assert_eq!(coverage_band(9.99), 0);
        assert_eq!(coverage_band(10.0), 1);
        assert_eq!(coverage_band(100.0), 9);
        assert_eq!(coverage_band_label(9), "[90,100]");
        assert_eq!(coverage_band_label(2), "[20,30)");
        assert_eq!(length_hit(2, 12, 15), (true, 3.0));
        assert_eq!(length_hit(1, 9, 10), (false, 1.0));
    }

    #[test]
    fn harmonic() {
        assert_eq!(harmonic_mean(&[0.5, 0.5]), Some(0.5));
        // 3 / (1/1 + 1/0.5 + 1/0.25) = 3/7.
        assert!((harmonic_mean(&[1.0, 0.5, 0.25]).unwrap() - 3.0 / 7.0).abs() < 1e-12);
        assert_eq!(harmonic_mean(&[0.0, 1.0]), Some(0.0));
    }
}
