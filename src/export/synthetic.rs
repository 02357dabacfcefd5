//! A deterministic synthetic caption corpus, for load tests and benchmarks of the write path
//! (`capflow ingest synthetic-captions <images>`, hidden from the help, and `benches/export.rs`).
//!
//! Image `i` gets one [`ImageRow`] and [`CAPTIONS_PER_IMAGE`] caption records; each accepted
//! caption record yields a [`CaptionRow`] and a [`GroundingRow`] for its subject phrase. Every
//! [`REJECT_EVERY`]-th caption record (counting from 1 over the whole corpus) is rejected as an
//! empty caption, so the ledger is exercised too. Text comes from a fixed vocabulary through
//! SplitMix64, so the same image count always gives the same rows.

use crate::error::Result;
use crate::ingest::{RecordSink, Row};
use crate::schema::{BoxXyxy, CaptionRow, GroundingRow, ImageRow, RejectedRow};
use crate::seed::splitmix64;

/// The format name used in rejected records and on the command line.
pub const FORMAT_NAME: &str = "synthetic-captions";
/// Caption records per image.
pub const CAPTIONS_PER_IMAGE: u64 = 5;
/// One caption record in this many is rejected.
pub const REJECT_EVERY: u64 = 97;

const SUBJECTS: [&str; 8] = [
    "a man",
    "a woman",
    "two children",
    "a dog",
    "a brown horse",
    "an old car",
    "a cyclist",
    "three people",
];
/// Flickr30k Entities phrase types of [`SUBJECTS`], index for index.
const SUBJECT_TYPES: [&str; 8] = [
    "people", "people", "people", "animals", "animals", "vehicles", "people", "people",
];
const VERBS: [&str; 8] = [
    "is standing near",
    "walks past",
    "is sitting on",
    "looks at",
    "runs along",
    "is parked beside",
    "jumps over",
    "waits next to",
];
const OBJECTS: [&str; 8] = [
    "a red bench",
    "the river",
    "a wooden fence",
    "a crowded street",
    "a small table",
    "the beach",
    "a tall building",
    "a green field",
];

/// Records that [`generate`] reads for `images` images.
pub fn record_count(images: u64) -> u64 {
    images * CAPTIONS_PER_IMAGE
}

/// Records that [`generate`] rejects for `images` images.
pub fn rejected_count(images: u64) -> u64 {
    record_count(images) / REJECT_EVERY
}

/// Streams the corpus of `images` images into `sink`.
pub fn generate(images: u64, sink: &mut dyn RecordSink) -> Result<()> {
    let source = format!("synthetic:{images}");
    for image in 0..images {
        let image_id = format!("syn{image:09}");
        let width = 320 + (splitmix64(image) % 960) as i32;
        let height = 240 + (splitmix64(image ^ 0xABCD) % 720) as i32;
        sink.row(Row::Image(ImageRow {
            image_id: image_id.clone(),
            dataset: FORMAT_NAME.to_string(),
            split: "train".to_string(),
            file_name: Some(format!("{image_id}.jpg")),
            url: None,
            width: Some(width),
            height: Some(height),
        }))?;
        for index in 0..CAPTIONS_PER_IMAGE {
            let record = image * CAPTIONS_PER_IMAGE + index;
            if (record + 1).is_multiple_of(REJECT_EVERY) {
                sink.reject(RejectedRow {
                    format: FORMAT_NAME.to_string(),
                    source_file: source.clone(),
                    record: format!("image {image} caption {index}"),
                    line: Some(record as i64 + 1),
                    byte_offset: None,
                    reason: "empty caption".to_string(),
                    excerpt: String::new(),
                })?;
                continue;
            }
            let r = splitmix64(record);
            let subject = SUBJECTS[(r & 7) as usize];
            let subject_type = SUBJECT_TYPES[(r & 7) as usize];
            let text = format!(
                "{subject} {} {}",
                VERBS[((r >> 3) & 7) as usize],
                OBJECTS[((r >> 6) & 7) as usize]
            );
            let caption_id = format!("{image_id}#{index}");
            let subject_tokens = subject.split(' ').count() as i32;
            let x1 = ((r >> 9) % (width as u64 / 2)) as f64;
            let y1 = ((r >> 20) % (height as u64 / 2)) as f64;
            sink.row(Row::Caption(CaptionRow {
                image_id: image_id.clone(),
                caption_id: caption_id.clone(),
                dataset: FORMAT_NAME.to_string(),
                split: "train".to_string(),
                caption_index: index as i32,
                text,
            }))?;
            sink.row(Row::Grounding(GroundingRow {
                image_id: image_id.clone(),
                caption_id,
                phrase_id: format!("{}", r % 1000),
                phrase: subject.to_string(),
                phrase_types: vec![subject_type.to_string()],
                token_start: 0,
                token_end: subject_tokens,
                boxes: vec![BoxXyxy::new(
                    x1,
                    y1,
                    x1 + f64::from(width) / 4.0,
                    y1 + f64::from(height) / 4.0,
                )],
                is_scene: false,
                no_box: false,
                not_visual: false,
            }))?;
            sink.accepted()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::VecSink;

    #[test]
    fn accounting_matches_the_documented_counts() {
        let mut sink = VecSink::default();
        generate(100, &mut sink).unwrap();
        let counts = sink.counts();
        // 100 images × 5 captions = 500 records; records 97, 194, 291, 388, 485 are rejected.
        assert_eq!(counts.read, 500);
        assert_eq!(counts.rejected, 5);
        assert_eq!(counts.accepted, 495);
        assert_eq!(record_count(100), 500);
        assert_eq!(rejected_count(100), 5);
        // 100 image rows + (caption + grounding) per accepted record.
        assert_eq!(sink.rows.len(), 100 + 2 * 495);
    }
}
