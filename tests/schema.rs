//! The schema files in `schemas/` are generated from the code and must not drift from it;
//! every table's typed rows survive a RecordBatch round trip.

use capflow::schema::*;

#[test]
fn schema_files_match_the_code() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let mut stale = Vec::new();
    for kind in TableKind::ALL {
        let path = dir.join(format!("{}.json", kind.name()));
        let expected = schema_to_json(kind.name(), &kind.schema());
        match std::fs::read_to_string(&path) {
            Ok(on_disk) if on_disk == expected => {}
            _ => stale.push(path.display().to_string()),
        }
    }
    let known: Vec<String> = TableKind::ALL
        .iter()
        .map(|k| format!("{}.json", k.name()))
        .collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        assert!(known.contains(&name), "schemas/{name} belongs to no table");
    }
    assert!(
        stale.is_empty(),
        "schema files out of date: {stale:?}; run `cargo run -- schema --write schemas`"
    );
}

#[test]
fn fingerprint_changes_with_the_schema() {
    let a = schema_fingerprint(&TableKind::Captions.schema());
    let b = schema_fingerprint(&TableKind::Samples.schema());
    assert_ne!(a, b);
    assert_eq!(a, schema_fingerprint(&TableKind::Captions.schema()));
}

fn sample_row() -> SampleRow {
    SampleRow {
        image: None,
        sample_id: "ssa:1:0".into(),
        image_id: "1".into(),
        split: "train".into(),
        method: "ssa".into(),
        text: "a man rides a horse on the beach".into(),
        control_boxes: vec![BoxXyxy::new(0.5, 1.0, 10.25, 20.0)],
        control_labels: vec!["man".into()],
        coverage: 12.5,
        length_level: 1,
        word_count: 8,
        verbs: vec!["ride".into()],
        quality: vec![QualityScore {
            name: "lm".into(),
            value: 0.875,
        }],
        provenance: Provenance {
            source_caption_ids: vec!["1#0".into(), "1#3".into()],
            node_ids: vec!["r".into(), "m".into()],
            subgraph: Some("(r / ride-01 :ARG0 (m / man))".into()),
            // The largest seed a sample can record: Delta Lake has no unsigned integers.
            seed: i64::MAX as u64,
        },
    }
}

#[test]
fn typed_rows_round_trip_through_record_batches() {
    let mut with_image = sample_row();
    with_image.image = Some(capflow::schema::SampleImage {
        bytes: vec![0x89, b'P', b'N', b'G', 0, 255],
        path: "s1.png".into(),
    });
    let samples = vec![sample_row(), with_image];
    let batch = rows_to_batch(&samples).unwrap();
    assert_eq!(batch.schema(), TableKind::Samples.schema());
    assert_eq!(batch_to_rows::<SampleRow>(&batch).unwrap(), samples);
    // A seed above the Int64 column's range is refused, never wrapped.
    let mut too_large = sample_row();
    too_large.provenance.seed = i64::MAX as u64 + 1;
    assert!(rows_to_batch(&[too_large]).is_err());

    let detections = vec![DetectionRow {
        image_id: "7".into(),
        detection_id: "42".into(),
        source: "coco-instances".into(),
        label: "dog".into(),
        score: None,
        bbox: BoxXyxy::new(1.0, 2.0, 3.0, 4.0),
        attributes: vec![],
        feature: Some(vec![0.1, -2.5e-8]),
    }];
    let batch = rows_to_batch(&detections).unwrap();
    assert_eq!(batch_to_rows::<DetectionRow>(&batch).unwrap(), detections);

    let amrs = vec![AmrRow {
        image_id: "7".into(),
        graph_id: "7.0".into(),
        caption_id: None,
        sentence: Some("A dog .".into()),
        tokens: None,
        alignment_flavour: "none".into(),
        metadata: vec![MetadataEntry {
            key: "id".into(),
            value: "7.0".into(),
        }],
        penman: "(d / dog)".into(),
    }];
    let batch = rows_to_batch(&amrs).unwrap();
    assert_eq!(batch_to_rows::<AmrRow>(&batch).unwrap(), amrs);
}

#[test]
fn empty_row_sets_give_empty_batches() {
    let batch = rows_to_batch::<CaptionRow>(&[]).unwrap();
    assert_eq!(batch.num_rows(), 0);
    assert_eq!(batch.schema(), TableKind::Captions.schema());
}

#[test]
fn box_geometry() {
    let a = BoxXyxy::new(0.0, 0.0, 10.0, 10.0);
    let b = BoxXyxy::new(5.0, 5.0, 15.0, 15.0);
    assert_eq!(a.area(), 100.0);
    assert_eq!(a.intersection(&b), 25.0);
    assert!((a.iou(&b) - 25.0 / 175.0).abs() < 1e-12);
    assert_eq!(a.iou(&a), 1.0);
}

#[test]
fn excerpts_are_cut_on_char_boundaries() {
    let long = "é".repeat(EXCERPT_LIMIT);
    let cut = excerpt(&long);
    assert!(cut.len() <= EXCERPT_LIMIT + "…".len());
    assert!(cut.ends_with('…'));
}
