//! The original captions as samples: every caption of an image with the boxes of its grounded
//! phrases as the control signal, so that training and evaluation treat original and augmented
//! data alike.

use super::control::{coverage_percent, distinct_boxes, ssa_length_level, word_count};
use super::ImageAnnotations;
use crate::schema::{Provenance, SampleRow};

/// The method name of samples built from original captions.
pub const ORIGINAL_METHOD: &str = "original";

/// One sample per caption of `image`: text = the caption; control boxes = the distinct boxes of
/// the caption's grounded phrases (scene and box-less phrases have none); control labels = the
/// last word of each grounded phrase with a box (its head noun in English noun phrases), in
/// phrase order, lower case; coverage from the image size (0 when the size is unknown);
/// length level and word count of the caption. Sample ids are `original:<caption_id>`.
pub fn original_samples(image: &ImageAnnotations) -> Vec<SampleRow> {
    let size = image.size();
    let split = image.split().to_string();
    image
        .captions
        .iter()
        .map(|caption| {
            let phrases: Vec<_> = image
                .groundings
                .iter()
                .filter(|g| g.caption_id == caption.caption_id && !g.boxes.is_empty())
                .collect();
            let boxes = distinct_boxes(phrases.iter().flat_map(|g| g.boxes.iter()));
            let labels = phrases
                .iter()
                .filter_map(|g| head_word(&g.phrase))
                .collect();
            let words = word_count(&caption.text);
            let coverage = size.map_or(0.0, |(w, h)| coverage_percent(&boxes, w, h));
            SampleRow {
                image: None,
                sample_id: format!("{ORIGINAL_METHOD}:{}", caption.caption_id),
                image_id: image.image_id.clone(),
                split: split.clone(),
                method: ORIGINAL_METHOD.to_string(),
                text: caption.text.clone(),
                control_boxes: boxes,
                control_labels: labels,
                coverage,
                length_level: ssa_length_level(words),
                word_count: words as i32,
                verbs: Vec::new(),
                quality: Vec::new(),
                provenance: Provenance {
                    source_caption_ids: vec![caption.caption_id.clone()],
                    ..Provenance::default()
                },
            }
        })
        .collect()
}

/// The last word of a phrase (letters and digits kept), lower case.
fn head_word(phrase: &str) -> Option<String> {
    phrase
        .split_whitespace()
        .rev()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric() || *c == '-')
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .find(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{BoxXyxy, CaptionRow, GroundingRow, ImageRow};

    fn grounding(caption: &str, phrase: &str, boxes: Vec<BoxXyxy>) -> GroundingRow {
        GroundingRow {
            image_id: "7".into(),
            caption_id: caption.into(),
            phrase_id: phrase.into(),
            phrase: phrase.into(),
            phrase_types: vec![],
            token_start: 0,
            token_end: 1,
            is_scene: boxes.is_empty(),
            no_box: false,
            not_visual: false,
            boxes,
        }
    }

    #[test]
    fn caption_with_grounded_boxes() {
        let mut image = ImageAnnotations::new("7");
        image.image = Some(ImageRow {
            image_id: "7".into(),
            dataset: "d".into(),
            split: "val".into(),
            file_name: None,
            url: None,
            width: Some(100),
            height: Some(50),
        });
        image.captions.push(CaptionRow {
            image_id: "7".into(),
            caption_id: "7#0".into(),
            dataset: "d".into(),
            split: "val".into(),
            caption_index: 0,
            text: "A young Man rides a bike on a street .".into(),
        });
        let man = BoxXyxy::new(0.0, 0.0, 10.0, 50.0);
        let bike = BoxXyxy::new(10.0, 0.0, 30.0, 25.0);
        image.groundings = vec![
            grounding("7#0", "A young Man", vec![man]),
            grounding("7#0", "a bike", vec![bike, man]),
            grounding("7#0", "a street", vec![]),
            grounding("7#1", "a dog", vec![bike]),
        ];
        let samples = original_samples(&image);
        assert_eq!(samples.len(), 1);
        let s = &samples[0];
        assert_eq!(s.sample_id, "original:7#0");
        assert_eq!(s.split, "val");
        assert_eq!(s.control_boxes, vec![man, bike]);
        assert_eq!(s.control_labels, vec!["man", "bike"]);
        // 500 + 500 of 5000 pixels.
        assert!((s.coverage - 20.0).abs() < 1e-12);
        assert_eq!((s.word_count, s.length_level), (9, 1));
    }
}
