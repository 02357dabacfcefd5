//! Flickr30k Entities caption markup: any line parses or is refused, never panics, and what
//! parses has phrase spans inside the caption.
#![no_main]

use capflow::ingest::flickr30k::parse_caption_markup;
use capflow::ingest::ledger::Source;
use capflow::ingest::{flickr30k, VecSink};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(line) = std::str::from_utf8(data) {
        if let Ok(caption) = parse_caption_markup(line) {
            for phrase in &caption.phrases {
                assert!(phrase.start < phrase.end && phrase.end <= caption.tokens.len());
            }
        }
    }
    let source = Source {
        format: flickr30k::FORMAT,
        file: "fuzz.txt".into(),
    };
    let mut sink = VecSink::default();
    flickr30k::read_sentences_from(data, "1", "unknown", None, &source, &mut sink)
        .expect("reading from memory cannot fail with I/O");
});
