//! Fuzzes the PENMAN parser, the block splitter and the encoder: no input may panic, and every
//! graph that parses must survive `parse(encode(g)) == g`.
#![no_main]

use capflow::amr::penman::{encode, parse, parse_many};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(graph) = parse(text) {
        assert_eq!(parse(&encode(&graph)).as_ref(), Ok(&graph));
    }
    for block in parse_many(text) {
        assert!(text[block.byte_offset..].starts_with(&block.text));
    }
});
