//! Flickr30k Entities annotation XML: any bytes parse or are refused, never panic, and parsed
//! boxes are well-ordered.
#![no_main]

use capflow::ingest::flickr30k::parse_annotation_xml;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(annotation) = parse_annotation_xml(data) {
        for boxes in annotation.boxes.values() {
            for b in boxes {
                assert!(b.x1 <= b.x2 && b.y1 <= b.y2);
            }
        }
    }
});
