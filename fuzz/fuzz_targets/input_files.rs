//! Every path-based reader on any file content: GBC (`.jsonl`, `.json`, `.parquet`), PENMAN,
//! capflow's Parquet tables, the COCO and Visual Genome JSON files. The first byte picks the
//! reader; the rest is the file. No input may panic; a reader either reads it (rows and ledger
//! entries) or returns an error that names the file.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use capflow::ingest::{read_input, Format, VecSink};
use libfuzzer_sys::fuzz_target;

const READERS: [(Format, &str); 9] = [
    (Format::Gbc, "graphs.jsonl"),
    (Format::Gbc, "graphs.json"),
    (Format::Gbc, "graphs.parquet"),
    (Format::Penman, "captions.amr"),
    (Format::Capflow, "samples.parquet"),
    (Format::CocoCaptions, "captions_val.json"),
    (Format::CocoInstances, "instances_val.json"),
    (Format::CocoEntities, "coco_entities.json"),
    (Format::VisualGenome, "scene_graphs.json"),
];

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("capflow-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, content)) = data.split_first() else {
        return;
    };
    let (format, name) = READERS[usize::from(pick) % READERS.len()];
    let path = dir().join(name);
    std::fs::write(&path, content).expect("writing the input file");
    let mut sink = VecSink::default();
    if let Err(err) = read_input(format, &path, &mut sink) {
        let message = err.to_string();
        assert!(!message.is_empty());
    }
    for rejected in &sink.rejected {
        assert!(!rejected.reason.is_empty(), "{rejected:?}");
    }
});
