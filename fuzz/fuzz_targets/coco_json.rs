//! The streaming JSON readers (COCO captions, instances, Entities; Visual Genome): any bytes
//! are read record by record without a panic, and every row belongs to an accepted record.
#![no_main]

use std::io::Cursor;

use capflow::ingest::ledger::Source;
use capflow::ingest::visual_genome::{self, ImageSizes, VgFile};
use capflow::ingest::{coco, VecSink};
use libfuzzer_sys::fuzz_target;

fn source(format: &'static str) -> Source {
    Source {
        format,
        file: "fuzz.json".into(),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut sink = VecSink::default();
    coco::read_captions_from(data, &source(coco::CAPTIONS_FORMAT), "val", &mut sink)
        .expect("reading from memory cannot fail with I/O");
    assert_eq!(sink.accepted as usize, sink.rows.len());

    let mut sink = VecSink::default();
    coco::read_instances_from(
        Cursor::new(data),
        &source(coco::INSTANCES_FORMAT),
        "val",
        &mut sink,
    )
    .expect("reading from memory cannot fail with I/O");
    assert!(sink.accepted as usize >= sink.rows.len());

    let mut sink = VecSink::default();
    coco::read_entities_from(data, &source(coco::ENTITIES_FORMAT), &mut sink)
        .expect("reading from memory cannot fail with I/O");

    for kind in [
        VgFile::ImageData,
        VgFile::SceneGraphs,
        VgFile::Relationships,
        VgFile::RegionDescriptions,
    ] {
        let mut sink = VecSink::default();
        visual_genome::read_file_from(
            data,
            kind,
            &ImageSizes::new(),
            &source(visual_genome::FORMAT),
            &mut sink,
        )
        .expect("reading from memory cannot fail with I/O");
        assert_eq!(sink.accepted as usize, sink.rows.len());
    }
});
