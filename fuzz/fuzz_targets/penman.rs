//! Fuzzes the PENMAN parser, the block splitter and the encoder: no input may panic, every
//! graph that parses must survive `parse(encode(g)) == g`, and every block is the file's text
//! at its offset (a line that ends in a lone `\r` ends in `\n` in the block).
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
        let source = lone_cr_as_lf(&text[block.byte_offset..]);
        assert!(source.starts_with(&block.text), "{block:?}");
    }
});

fn lone_cr_as_lf(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(if c == '\r' && chars.peek() != Some(&'\n') {
            '\n'
        } else {
            c
        });
    }
    out
}
