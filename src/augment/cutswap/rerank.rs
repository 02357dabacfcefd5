//! The built-in image-text score of an image swap, used when no external scorer (CLIP through
//! [`crate::models::ImageTextScorer`]) is configured.
//!
//! The swapped caption claims "there is a `<attribute> <object>` where the patch is". The object
//! claim holds by construction (the patch is a box of that object), so the score measures the
//! two things that can fail:
//! - **attribute agreement**, when the caption now has an attribute: 1 if the source region was
//!   described with that attribute (its image's captions, scene graph or detections); otherwise,
//!   for a basic colour term, the share of the pasted pixels whose nearest basic colour is that
//!   term (a colour-histogram check of the actual output pixels); otherwise 0 (no evidence);
//! - **visibility**: the share of the replaced area the patch covers (1 minus what was left
//!   out to keep other objects visible).
//!
//! The score is the mean of the parts that apply, in [0, 1].

use std::collections::BTreeSet;

/// Basic colour terms with an sRGB prototype each.
const COLOURS: [(&str, [f64; 3]); 13] = [
    ("black", [20.0, 20.0, 20.0]),
    ("white", [240.0, 240.0, 240.0]),
    ("gray", [128.0, 128.0, 128.0]),
    ("grey", [128.0, 128.0, 128.0]),
    ("red", [200.0, 30.0, 30.0]),
    ("green", [40.0, 150.0, 50.0]),
    ("blue", [40.0, 70.0, 200.0]),
    ("yellow", [240.0, 215.0, 40.0]),
    ("orange", [240.0, 140.0, 20.0]),
    ("brown", [120.0, 75.0, 35.0]),
    ("pink", [240.0, 150.0, 180.0]),
    ("purple", [120.0, 50.0, 150.0]),
    ("tan", [210.0, 180.0, 140.0]),
];

/// The sRGB prototype of a basic colour term.
pub fn colour_prototype(term: &str) -> Option<[f64; 3]> {
    COLOURS
        .iter()
        .find(|(n, _)| *n == term)
        .map(|(_, rgb)| *rgb)
}

/// The basic colour term nearest to a pixel (`grey` reads as `gray`).
pub fn nearest_colour(pixel: [u8; 3]) -> &'static str {
    let mut best = ("black", f64::INFINITY);
    for (name, rgb) in COLOURS {
        let d: f64 = (0..3).map(|c| (f64::from(pixel[c]) - rgb[c]).powi(2)).sum();
        if d < best.1 {
            best = (name, d);
        }
    }
    best.0
}

/// The parts and value of the built-in score.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BuiltinScore {
    /// Attribute agreement, when the caption has an attribute.
    pub attribute: Option<f64>,
    /// How the attribute was checked: `described`, `colour` or `unsupported`.
    pub attribute_evidence: Option<String>,
    pub visibility: f64,
    pub value: f64,
}

/// Scores a pasted patch against the caption's new attribute (see the module docs).
pub fn builtin_score(
    attribute: Option<&str>,
    source_attributes: &BTreeSet<String>,
    pasted: &[[u8; 3]],
    visibility: f64,
) -> BuiltinScore {
    let (agreement, evidence) = match attribute {
        None => (None, None),
        Some(a) if source_attributes.contains(a) => (Some(1.0), Some("described")),
        Some(a) if colour_prototype(a).is_some() => {
            let term = if a == "grey" { "gray" } else { a };
            let matching = pasted
                .iter()
                .filter(|p| nearest_colour(**p) == term)
                .count();
            (
                Some(matching as f64 / pasted.len().max(1) as f64),
                Some("colour"),
            )
        }
        Some(_) => (Some(0.0), Some("unsupported")),
    };
    let parts: Vec<f64> = agreement.into_iter().chain([visibility]).collect();
    BuiltinScore {
        attribute: agreement,
        attribute_evidence: evidence.map(str::to_string),
        visibility,
        value: parts.iter().sum::<f64>() / parts.len() as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_share_of_the_pasted_pixels() {
        let none = BTreeSet::new();
        // Three reddish pixels and one blue: 3/4 red; visibility 1; mean (0.75 + 1) / 2.
        let pixels = [[210, 40, 35], [190, 20, 25], [220, 35, 40], [30, 60, 210]];
        let s = builtin_score(Some("red"), &none, &pixels, 1.0);
        assert_eq!(s.attribute, Some(0.75));
        assert!((s.value - 0.875).abs() < 1e-12);
        // A described attribute agrees fully; no attribute scores visibility only.
        let described: BTreeSet<String> = ["young".to_string()].into_iter().collect();
        assert_eq!(
            builtin_score(Some("young"), &described, &pixels, 0.8).value,
            0.9
        );
        assert_eq!(builtin_score(None, &none, &pixels, 0.8).value, 0.8);
        assert_eq!(builtin_score(Some("young"), &none, &pixels, 1.0).value, 0.5);
        assert_eq!(nearest_colour([125, 128, 131]), "gray");
    }
}
