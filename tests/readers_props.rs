//! Property tests: arbitrary bytes and mutated fixture content never make a reader panic, and
//! the records a reader counts agree with what it emitted and with an independent count.

mod common;

use std::io::Cursor;

use capflow::ingest::flickr30k::{self, parse_annotation_xml, parse_caption_markup};
use capflow::ingest::ledger::Source;
use capflow::ingest::visual_genome::{self, ImageSizes, VgFile};
use capflow::ingest::{coco, read_input, Format, Row, VecSink};
use proptest::prelude::*;
use serde_json::Value;

fn source(format: &'static str) -> Source {
    Source {
        format,
        file: "input".into(),
    }
}

fn count_rows(sink: &VecSink, pick: fn(&Row) -> bool) -> u64 {
    sink.rows.iter().filter(|r| pick(r)).count() as u64
}

/// Feeds `bytes` to every JSON reader and checks the rows against the accepted records.
fn all_json_readers(bytes: &[u8]) {
    let mut sink = VecSink::default();
    coco::read_captions_from(bytes, &source("coco-captions"), "val", &mut sink).unwrap();
    assert_eq!(
        sink.accepted,
        count_rows(&sink, |r| matches!(r, Row::Image(_) | Row::Caption(_)))
    );
    assert_eq!(sink.accepted as usize, sink.rows.len());

    let mut sink = VecSink::default();
    coco::read_instances_from(
        Cursor::new(bytes),
        &source("coco-instances"),
        "val",
        &mut sink,
    )
    .unwrap();
    // Categories are accepted without rows; every row belongs to an accepted record.
    assert!(sink.accepted >= sink.rows.len() as u64);

    let mut sink = VecSink::default();
    coco::read_entities_from(bytes, &source("coco-entities"), &mut sink).unwrap();
    assert_eq!(
        sink.accepted,
        count_rows(&sink, |r| matches!(r, Row::Caption(_)))
    );

    for kind in [
        VgFile::ImageData,
        VgFile::SceneGraphs,
        VgFile::Relationships,
        VgFile::RegionDescriptions,
    ] {
        let mut sink = VecSink::default();
        visual_genome::read_file_from(
            bytes,
            kind,
            &ImageSizes::new(),
            &source("visual-genome"),
            &mut sink,
        )
        .unwrap();
        assert_eq!(sink.accepted as usize, sink.rows.len(), "{kind:?}");
    }
}

/// Non-blank lines, counted without the reader: the records of a sentence file. A byte order
/// mark at the start is not text; `\r\n` and a lone `\r` end a line as `\n` does.
fn sentence_records(bytes: &[u8]) -> u64 {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut unified = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'\r', Some(b'\n')) => i += 1,
            (b'\r', _) => {
                unified.push(b'\n');
                i += 1;
            }
            (b, _) => {
                unified.push(b);
                i += 1;
            }
        }
    }
    let mut segments: Vec<&[u8]> = unified.split(|&b| b == b'\n').collect();
    if segments.last().is_some_and(|s| s.is_empty()) {
        segments.pop();
    }
    segments
        .into_iter()
        .filter(|s| std::str::from_utf8(s).map_or(true, |t| !t.trim().is_empty()))
        .count() as u64
}

fn flickr_sentences(bytes: &[u8]) {
    let mut sink = VecSink::default();
    flickr30k::read_sentences_from(
        bytes,
        "1",
        "unknown",
        None,
        &source("flickr30k-entities"),
        &mut sink,
    )
    .unwrap();
    assert_eq!(sink.counts().read, sentence_records(bytes));
    assert_eq!(
        sink.accepted,
        count_rows(&sink, |r| matches!(r, Row::Caption(_)))
    );
    for row in &sink.rows {
        if let Row::Grounding(g) = row {
            assert!(0 <= g.token_start && g.token_start < g.token_end);
        }
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z\\]\\[{}\"\\\\ ]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,6}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn fixture_bytes(relative: &str) -> Option<Vec<u8>> {
    let path = common::fixture(relative)?;
    Some(std::fs::read(path).unwrap())
}

fn mutate(mut bytes: Vec<u8>, edits: &[(usize, u8)]) -> Vec<u8> {
    if bytes.is_empty() {
        return bytes;
    }
    for &(at, b) in edits {
        let at = at % bytes.len();
        match b % 3 {
            0 => bytes[at] = b,
            1 => {
                bytes.remove(at);
            }
            _ => bytes.insert(at, b),
        }
        if bytes.is_empty() {
            break;
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        all_json_readers(&bytes);
        flickr_sentences(&bytes);
        let _ = parse_annotation_xml(&bytes);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[\\[\\]/ENa-z#0-9 {}\":,\\n]{0,200}") {
        all_json_readers(text.as_bytes());
        flickr_sentences(text.as_bytes());
        let _ = parse_caption_markup(&text);
    }

    /// Any array of well-formed JSON values is split into exactly its elements, whatever they
    /// hold: every element is one record, accepted or rejected.
    #[test]
    fn every_array_element_is_one_record(items in prop::collection::vec(json_value(), 0..12)) {
        let doc = serde_json::to_vec(&Value::Array(items.clone())).unwrap();
        let mut sink = VecSink::default();
        visual_genome::read_file_from(
            &doc[..], VgFile::ImageData, &ImageSizes::new(), &source("visual-genome"), &mut sink,
        ).unwrap();
        prop_assert_eq!(sink.counts().read, items.len() as u64);
        let mut sink = VecSink::default();
        let captions = serde_json::json!({"info": items[..items.len() / 2], "annotations": items});
        coco::read_captions_from(
            &serde_json::to_vec(&captions).unwrap()[..], &source("coco-captions"), "val", &mut sink,
        ).unwrap();
        prop_assert_eq!(sink.counts().read, items.len() as u64);
    }
}

proptest! {
    // Each case reads five fixture files with eight readers; fewer cases keep the run short.
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn mutated_fixtures_never_panic(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        for relative in [
            "coco/minyus_captions_val2014.json_samples.json",
            "coco/minyus_instances_val2014.json_samples.json",
            "coco_entities/coco_entities_record_264169_reconstructed.json",
            "visual_genome/kgtk_vg10_scene_graphs.json",
        ] {
            let Some(bytes) = fixture_bytes(relative) else { return Ok(()); };
            all_json_readers(&mutate(bytes, &edits));
        }
        for name in ["36979", "65567", "178045"] {
            let Some(bytes) = fixture_bytes(&format!("flickr30k_entities/Sentences/{name}.txt")) else {
                return Ok(());
            };
            flickr_sentences(&mutate(bytes, &edits));
        }
    }
}

/// Whole files through the public entry point, including the Parquet reader, from disk.
#[test]
fn garbage_files_through_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(32));
    runner
        .run(&prop::collection::vec(any::<u8>(), 0..256), |bytes| {
            for (name, format) in [
                ("captions_val2014.json", Format::CocoCaptions),
                ("instances_val2014.json", Format::CocoInstances),
                ("entities.json", Format::CocoEntities),
                ("scene_graphs.json", Format::VisualGenome),
                ("1.txt", Format::Flickr30kEntities),
                ("1.xml", Format::Flickr30kEntities),
                ("t.parquet", Format::Capflow),
            ] {
                let path = dir.path().join(name);
                std::fs::write(&path, &bytes).unwrap();
                let mut sink = VecSink::default();
                // The Parquet reader may refuse a whole file (an error, not a panic); the
                // record readers must take any bytes.
                let outcome = read_input(format, &path, &mut sink);
                if format != Format::Capflow {
                    prop_assert!(outcome.is_ok(), "{name}: {outcome:?}");
                }
            }
            Ok(())
        })
        .unwrap();
}
