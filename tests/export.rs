//! Dataset writing, commit, versioning and validation, checked against the rows put in and
//! against hand-computed expectations (never against earlier output of the writer).

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use capflow::export::{
    read_manifest, read_split, read_table, validate, DatasetSink, DatasetWriter, Problem,
    StageMetrics, WriterOptions,
};
use capflow::ingest::{IngestCounts, RecordSink, Row};
use capflow::schema::{
    batch_to_rows, rows_to_batch, BoxXyxy, CaptionRow, Provenance, QualityScore, RejectedRow,
    SampleRow, TableKind,
};
use sha2::{Digest, Sha256};

fn caption(i: usize) -> CaptionRow {
    CaptionRow {
        image_id: format!("img{:05}", i / 5),
        caption_id: format!("img{:05}#{}", i / 5, i % 5),
        dataset: "test".into(),
        split: "train".into(),
        caption_index: (i % 5) as i32,
        // Varied text so that the data does not compress to nothing.
        text: format!(
            "caption {i} of a scene with {} people and {} dogs near tree {}",
            i % 7,
            (i * 31) % 11,
            (i * 7919) % 10007
        ),
    }
}

fn sample(i: usize, split: &str) -> SampleRow {
    SampleRow {
        image: None,
        sample_id: format!("s{i}"),
        image_id: format!("img{i}"),
        split: split.into(),
        method: "ssa".into(),
        text: format!("a sampled caption number {i}"),
        control_boxes: vec![BoxXyxy::new(0.0, 1.0, 10.5, 20.25)],
        control_labels: vec!["dog".into()],
        coverage: 12.5,
        length_level: 2,
        word_count: 5,
        verbs: vec!["run".into()],
        quality: vec![QualityScore {
            name: "lm".into(),
            value: -3.25,
        }],
        provenance: Provenance {
            source_caption_ids: vec![format!("img{i}#0")],
            node_ids: vec!["d".into(), "r".into()],
            subgraph: Some("(r / run-01 :ARG0 (d / dog))".into()),
            seed: 42,
        },
    }
}

fn rejected(i: usize) -> RejectedRow {
    RejectedRow {
        format: "test".into(),
        source_file: "input.txt".into(),
        record: format!("line {i}"),
        line: Some(i as i64),
        byte_offset: None,
        reason: "broken".into(),
        excerpt: "[/EN#".into(),
    }
}

fn counts(accepted: u64, rejected: u64) -> IngestCounts {
    IngestCounts {
        read: accepted + rejected,
        accepted,
        rejected,
    }
}

fn read_rows<R: capflow::schema::TableRow>(dir: &Path, table: TableKind) -> Vec<R> {
    let mut rows = Vec::new();
    for batch in read_table(dir, table).unwrap() {
        rows.extend(batch_to_rows::<R>(&batch.unwrap()).unwrap());
    }
    rows
}

fn sha256_hex(path: &Path) -> String {
    hex::encode(Sha256::digest(fs::read(path).unwrap()))
}

/// The shards in the tables' directories, as `<table>/<name>` (Delta Lake logs left out).
fn data_files(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for table in fs::read_dir(dir.join("data")).unwrap() {
        let table = table.unwrap();
        let table_name = table.file_name().to_string_lossy().into_owned();
        for file in fs::read_dir(table.path()).unwrap() {
            let file = file.unwrap();
            if file.path().is_file() {
                names.push(format!(
                    "{table_name}/{}",
                    file.file_name().to_string_lossy()
                ));
            }
        }
    }
    names.sort();
    names
}

/// Writes `n` captions, samples in two splits and `r` rejected rows; returns the inputs.
fn write_small_dataset(dir: &Path, n: usize, r: usize) -> (Vec<CaptionRow>, Vec<SampleRow>) {
    let captions: Vec<CaptionRow> = (0..n).map(caption).collect();
    let samples: Vec<SampleRow> = (0..10)
        .map(|i| sample(i, if i < 7 { "train" } else { "validation" }))
        .collect();
    let mut writer = DatasetWriter::create(dir, "cfg-small", 1 << 20).unwrap();
    writer.write_rows("captions", &captions).unwrap();
    writer.write_rows("train", &samples[..7]).unwrap();
    writer.write_rows("validation", &samples[7..]).unwrap();
    for i in 0..r {
        writer.reject(rejected(i)).unwrap();
    }
    writer.stage(StageMetrics {
        name: "ingest".into(),
        rows_in: (n + r) as u64,
        rows_out: n as u64,
        rejected: r as u64,
        elapsed_ms: 1,
    });
    writer.commit(counts(n as u64, r as u64)).unwrap();
    (captions, samples)
}

#[test]
fn rows_round_trip_and_manifest_describes_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let (captions, samples) = write_small_dataset(&dir, 2500, 3);

    assert_eq!(read_rows::<CaptionRow>(&dir, TableKind::Captions), captions);
    assert_eq!(read_rows::<SampleRow>(&dir, TableKind::Samples), samples);
    let validation: Vec<SampleRow> = read_split(&dir, TableKind::Samples, "validation")
        .unwrap()
        .flat_map(|b| batch_to_rows::<SampleRow>(&b.unwrap()).unwrap())
        .collect();
    assert_eq!(validation, samples[7..]);
    let ledger = read_rows::<RejectedRow>(&dir, TableKind::Rejected);
    assert_eq!(ledger, (0..3).map(rejected).collect::<Vec<_>>());

    let manifest = read_manifest(&dir).unwrap();
    assert_eq!(manifest.version, 1);
    assert_eq!(manifest.engine_version, capflow::ENGINE_VERSION);
    assert_eq!(manifest.config_hash, "cfg-small");
    assert_eq!(manifest.counts, counts(2500, 3));
    assert_eq!(manifest.stages.len(), 1);
    assert!(manifest.history.is_empty());
    assert_eq!(manifest.table_rows(TableKind::Captions), 2500);
    assert_eq!(manifest.table_rows(TableKind::Samples), 10);
    assert_eq!(manifest.tables["samples"].splits["train"], 7);
    assert_eq!(manifest.tables["samples"].splits["validation"], 3);
    assert_eq!(
        manifest.tables["captions"].schema_fingerprint,
        capflow::schema::schema_fingerprint(&TableKind::Captions.schema())
    );
    // Every listed file exists with the listed size and checksum.
    for file in &manifest.files {
        let path = dir.join(&file.path);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            file.bytes,
            "{}",
            file.path
        );
        assert_eq!(sha256_hex(&path), file.sha256, "{}", file.path);
    }
    // Shard names: `<split>-NNNNN-of-NNNNN-<first 16 hex of sha256>.parquet`.
    let train = manifest.files.iter().find(|f| f.split == "train").unwrap();
    assert_eq!(
        train.path,
        format!(
            "data/samples/train-00000-of-00001-{}.parquet",
            &train.sha256[..16]
        )
    );
    // The top-level ledger holds the same bytes as the ledger shard.
    let ledger_file = manifest.table_files(TableKind::Rejected).next().unwrap();
    assert_eq!(
        sha256_hex(&dir.join("rejected.parquet")),
        ledger_file.sha256
    );
    // Nothing but the dataset is left behind.
    let mut top: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(
        top,
        ["README.md", "data", "manifest.json", "rejected.parquet"]
    );

    let report = validate(&dir).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(report.rows_checked, 2500 + 10 + 3);
}

#[test]
fn dataset_card_lists_every_file_under_its_config_and_split() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_small_dataset(&dir, 100, 0);
    let manifest = read_manifest(&dir).unwrap();
    let card = fs::read_to_string(dir.join("README.md")).unwrap();
    let header = card
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map(|(yaml, _)| yaml)
        .expect("YAML front matter");
    // Card metadata first (no samples' worth of rows: `n<1K`), then the configs.
    assert!(
        header.starts_with(
            "license: \"unknown\"\nlanguage:\n- \"en\"\ntask_categories:\n- \"image-to-text\"\n\
             size_categories:\n- \"n<1K\"\nconfigs:\n"
        ),
        "{header}"
    );
    let train = manifest.files.iter().find(|f| f.split == "train").unwrap();
    let validation = manifest
        .files
        .iter()
        .find(|f| f.split == "validation")
        .unwrap();
    let expected_samples = format!(
        "- config_name: samples\n  default: true\n  data_files:\n  - split: \"train\"\n    path:\n    - \"{}\"\n  - split: \"validation\"\n    path:\n    - \"{}\"\n",
        train.path, validation.path
    );
    assert!(header.ends_with(expected_samples.trim_end()), "{header}");
    // Every file with rows is listed; the empty ledger gets no config.
    for file in &manifest.files {
        assert_eq!(
            header.contains(&format!("- \"{}\"", file.path)),
            file.rows > 0,
            "{}",
            file.path
        );
    }
    assert!(!header.contains("config_name: rejected"), "{header}");
    assert!(
        header.contains(&format!(
            "- config_name: captions\n  data_files:\n  - \"{}\"\n",
            manifest
                .table_files(TableKind::Captions)
                .next()
                .unwrap()
                .path
        )),
        "{header}"
    );
    assert!(card.contains("| captions | - | 100 | 1 |"), "{card}");
    assert!(card.contains("| rejected | - | 0 | 1 |"), "{card}");
}

/// A dataset written before splits were called `validation` holds `val` shards: reading the
/// `validation` split reads them, and the card lists them under `validation`.
#[test]
fn an_earlier_val_split_reads_and_loads_as_validation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let samples: Vec<SampleRow> = (0..6)
        .map(|i| sample(i, if i < 4 { "train" } else { "val" }))
        .collect();
    let mut writer = DatasetWriter::create(&dir, "cfg-val", 1 << 20).unwrap();
    writer.write_rows("train", &samples[..4]).unwrap();
    writer.write_rows("val", &samples[4..]).unwrap();
    writer.commit(counts(0, 0)).unwrap();

    for name in ["validation", "val"] {
        let read: Vec<SampleRow> = read_split(&dir, TableKind::Samples, name)
            .unwrap()
            .flat_map(|b| batch_to_rows::<SampleRow>(&b.unwrap()).unwrap())
            .collect();
        assert_eq!(read, samples[4..], "{name}");
    }
    let manifest = read_manifest(&dir).unwrap();
    let val = manifest.files.iter().find(|f| f.split == "val").unwrap();
    let card = fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(
        card.contains(&format!(
            "  - split: \"validation\"\n    path:\n    - \"{}\"\n",
            val.path
        )),
        "{card}"
    );
    assert!(!card.contains("split: \"val\""), "{card}");
}

#[test]
fn shards_roll_over_at_the_byte_target() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let target = 16 * 1024;
    let captions: Vec<CaptionRow> = (0..20_000).map(caption).collect();
    let mut writer = DatasetWriter::create(&dir, "cfg", target).unwrap();
    for chunk in captions.chunks(3000) {
        writer.write_rows("captions", chunk).unwrap();
    }
    let manifest = writer.commit(counts(20_000, 0)).unwrap();
    let shards: Vec<_> = manifest.table_files(TableKind::Captions).collect();
    assert!(shards.len() > 5, "only {} shards", shards.len());
    let n = shards.len();
    for (i, shard) in shards.iter().enumerate() {
        assert!(
            shard
                .path
                .starts_with(&format!("data/captions/captions-{i:05}-of-{n:05}-")),
            "{}",
            shard.path
        );
        if i + 1 < n {
            // Closed because it reached the target; the overshoot is at most a row group of
            // a quarter target (estimated before compression) plus the footer.
            assert!(shard.bytes >= target, "shard {i}: {} bytes", shard.bytes);
            assert!(shard.bytes < 2 * target, "shard {i}: {} bytes", shard.bytes);
        } else {
            assert!(
                shard.bytes < 2 * target,
                "last shard: {} bytes",
                shard.bytes
            );
        }
    }
    assert_eq!(shards.iter().map(|s| s.rows).sum::<u64>(), 20_000);
    assert_eq!(read_rows::<CaptionRow>(&dir, TableKind::Captions), captions);

    // With the default target the same rows fit one shard.
    let one = tmp.path().join("one");
    let mut writer = DatasetWriter::create(&one, "cfg", 128 << 20).unwrap();
    writer.write_rows("captions", &captions).unwrap();
    let manifest = writer.commit(counts(20_000, 0)).unwrap();
    assert_eq!(manifest.table_files(TableKind::Captions).count(), 1);
}

#[test]
fn same_rows_give_byte_identical_files_however_they_are_batched() {
    let tmp = tempfile::tempdir().unwrap();
    let captions: Vec<CaptionRow> = (0..7_000).map(caption).collect();
    let write = |name: &str, batch: usize| {
        let dir = tmp.path().join(name);
        let mut writer = DatasetWriter::create(&dir, "cfg", 64 * 1024).unwrap();
        for chunk in captions.chunks(batch) {
            writer.write_rows("captions", chunk).unwrap();
        }
        writer.reject(rejected(1)).unwrap();
        writer.commit(counts(7_000, 1)).unwrap();
        dir
    };
    let a = write("a", 7_000);
    let b = write("b", 333);
    let c = write("c", 1);
    let files = data_files(&a);
    assert!(files.len() > 2, "{files:?}");
    assert_eq!(files, data_files(&b));
    assert_eq!(files, data_files(&c));
    for name in &files {
        let bytes = fs::read(a.join("data").join(name)).unwrap();
        assert_eq!(
            bytes,
            fs::read(b.join("data").join(name)).unwrap(),
            "{name}"
        );
        assert_eq!(
            bytes,
            fs::read(c.join("data").join(name)).unwrap(),
            "{name}"
        );
    }
    assert_eq!(
        fs::read(a.join("rejected.parquet")).unwrap(),
        fs::read(c.join("rejected.parquet")).unwrap()
    );
}

#[test]
fn validate_catches_a_corrupted_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_small_dataset(&dir, 500, 1);
    let manifest = read_manifest(&dir).unwrap();
    let file = manifest.table_files(TableKind::Captions).next().unwrap();
    let path = dir.join(&file.path);
    let mut bytes = fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xFF;
    fs::write(&path, bytes).unwrap();
    let report = validate(&dir).unwrap();
    assert!(!report.is_ok());
    assert!(
        report.problems.iter().any(|p| matches!(
            p,
            Problem::ChecksumMismatch { path, .. } if *path == file.path
        )),
        "{:?}",
        report.problems
    );
}

#[test]
fn validate_catches_a_missing_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_small_dataset(&dir, 500, 1);
    let manifest = read_manifest(&dir).unwrap();
    let file = manifest.table_files(TableKind::Samples).next().unwrap();
    fs::remove_file(dir.join(&file.path)).unwrap();
    let report = validate(&dir).unwrap();
    assert_eq!(
        report.problems,
        vec![Problem::MissingFile {
            path: file.path.clone()
        }]
    );
}

#[test]
fn validate_catches_a_wrong_row_count_and_counts_that_do_not_add_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_small_dataset(&dir, 500, 2);
    let path = dir.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    let captions = manifest["files"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|f| f["table"] == "captions")
        .unwrap();
    captions["rows"] = serde_json::json!(499);
    let captions_path = captions["path"].as_str().unwrap().to_string();
    manifest["counts"]["read"] = serde_json::json!(503);
    fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();

    let report = validate(&dir).unwrap();
    assert!(report.problems.contains(&Problem::RowCountMismatch {
        path: captions_path,
        manifest: 499,
        actual: 500
    }));
    // The table summary still says 500, the file entries now sum to 499.
    assert!(report
        .problems
        .iter()
        .any(|p| matches!(p, Problem::TableSummaryMismatch { table, .. } if table == "captions")));
    assert!(report
        .problems
        .iter()
        .any(|p| matches!(p, Problem::CountsMismatch { .. })));
}

#[test]
fn validate_refuses_paths_outside_the_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_small_dataset(&dir, 10, 0);
    let path = dir.join("manifest.json");
    let text = fs::read_to_string(&path).unwrap();
    let manifest = read_manifest(&dir).unwrap();
    let victim = &manifest.files[0].path;
    fs::write(&path, text.replace(victim.as_str(), "../../etc/passwd")).unwrap();
    let report = validate(&dir).unwrap();
    assert!(report.problems.contains(&Problem::UnsafePath {
        path: "../../etc/passwd".into()
    }));
    assert!(read_table(&dir, manifest.files[0].table).is_err());
}

#[test]
fn recommit_replaces_the_version_and_keeps_its_history() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_small_dataset(&dir, 300, 1);
    let v1_files = data_files(&dir);
    let v1_manifest_sha = sha256_hex(&dir.join("manifest.json"));

    let more: Vec<CaptionRow> = (0..400).map(caption).collect();
    let mut writer = DatasetWriter::create(&dir, "cfg-v2", 1 << 20).unwrap();
    writer.write_rows("captions", &more).unwrap();
    let manifest = writer.commit(counts(400, 0)).unwrap();

    assert_eq!(manifest.version, 2);
    assert_eq!(manifest.history.len(), 1);
    assert_eq!(manifest.history[0].version, 1);
    assert_eq!(manifest.history[0].manifest_sha256, v1_manifest_sha);
    assert_eq!(manifest.history[0].counts, counts(300, 1));
    assert_eq!(manifest.history[0].rows["captions"], 300);
    // Only version 2's files remain in data/, and they are what the manifest lists.
    let listed: Vec<String> = manifest
        .files
        .iter()
        .map(|f| f.path.trim_start_matches("data/").to_string())
        .collect();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(data_files(&dir), sorted);
    assert!(v1_files.iter().all(|f| !sorted.contains(f)));
    assert_eq!(read_rows::<CaptionRow>(&dir, TableKind::Captions), more);
    assert!(read_rows::<SampleRow>(&dir, TableKind::Samples).is_empty());
    let report = validate(&dir).unwrap();
    assert!(report.is_ok() && report.warnings.is_empty(), "{report:?}");

    // A third commit appends to the history.
    let writer = DatasetWriter::create(&dir, "cfg-v3", 1 << 20).unwrap();
    let manifest = writer.commit(counts(0, 0)).unwrap();
    assert_eq!(manifest.version, 3);
    let versions: Vec<u64> = manifest.history.iter().map(|h| h.version).collect();
    assert_eq!(versions, [1, 2]);
}

#[test]
fn an_abandoned_write_leaves_the_committed_version_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_small_dataset(&dir, 300, 1);
    let before = fs::read(dir.join("manifest.json")).unwrap();
    let files_before = data_files(&dir);
    {
        let mut writer = DatasetWriter::create(&dir, "cfg-other", 1 << 20).unwrap();
        let other: Vec<CaptionRow> = (1000..3000).map(caption).collect();
        writer.write_rows("captions", &other).unwrap();
        // Dropped without commit, as on an error.
    }
    assert_eq!(fs::read(dir.join("manifest.json")).unwrap(), before);
    assert_eq!(data_files(&dir), files_before);
    assert!(validate(&dir).unwrap().is_ok());
    assert!(fs::read_dir(&dir).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with(".capflow")));
}

#[test]
fn leftovers_of_a_crashed_run_are_reported_then_cleaned_by_the_next_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_small_dataset(&dir, 50, 0);
    // What a run killed mid-commit leaves: its staging directory, its lock (a process id that
    // cannot be running), and a shard already moved into its table's directory.
    let staging = dir.join(".capflow-tmp-4000000000-0123456789abcdef");
    fs::create_dir(&staging).unwrap();
    fs::write(staging.join("captions-captions-00000.parquet"), b"partial").unwrap();
    fs::write(dir.join(".capflow-lock"), "4000000000").unwrap();
    let orphan = "captions-00000-of-00001-00000000deadbeef.parquet";
    fs::write(dir.join("data/captions").join(orphan), b"orphan").unwrap();
    // A file that capflow did not write is never removed.
    fs::write(dir.join("data").join("notes.txt"), b"mine").unwrap();

    let report = validate(&dir).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(
        report.warnings.iter().any(|w| w.contains(orphan)),
        "{:?}",
        report.warnings
    );

    if Path::new("/proc/self").exists() {
        let writer = DatasetWriter::create(&dir, "cfg", 1 << 20).unwrap();
        assert!(!staging.exists());
        writer.commit(counts(0, 0)).unwrap();
        assert!(!dir.join("data/captions").join(orphan).exists());
        assert!(dir.join("data").join("notes.txt").exists());
        assert!(!dir.join(".capflow-lock").exists());
    }
}

#[test]
fn writer_refuses_a_foreign_directory_and_a_second_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let foreign = tmp.path().join("home");
    fs::create_dir(&foreign).unwrap();
    fs::write(foreign.join("thesis.tex"), b"\\documentclass{article}").unwrap();
    let err = DatasetWriter::create(&foreign, "cfg", 1 << 20)
        .err()
        .unwrap();
    assert_eq!(err.exit_code(), 2, "{err}");
    assert!(err.to_string().contains("thesis.tex"), "{err}");

    let dir = tmp.path().join("ds");
    let first = DatasetWriter::create(&dir, "cfg", 1 << 20).unwrap();
    let holder = fs::read_to_string(dir.join(".capflow-lock")).unwrap();
    assert_eq!(holder, std::process::id().to_string());
    let err = DatasetWriter::create(&dir, "cfg", 1 << 20).err().unwrap();
    assert_eq!(err.exit_code(), 2, "{err}");
    // Another process is refused while this one holds the lock.
    let out = capflow(&[
        "ingest",
        "synthetic-captions",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    if Path::new("/proc/self").exists() {
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("being written by process"));
    }
    drop(first);
    let out = capflow(&[
        "ingest",
        "synthetic-captions",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn writer_rejects_bad_splits_schemas_and_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut writer = DatasetWriter::create(&dir, "cfg", 1 << 20).unwrap();
    writer.write_rows("captions", &[caption(0)]).unwrap();
    // `captions` already names the captions table's shards.
    let err = writer
        .write_rows("captions", &[sample(0, "captions")])
        .unwrap_err();
    assert!(err.to_string().contains("already used"), "{err}");
    let err = writer
        .write_rows("train-2", &[sample(0, "train")])
        .unwrap_err();
    assert!(err.to_string().contains("split name"), "{err}");
    let wrong = rows_to_batch(&[sample(0, "train")]).unwrap();
    let err = writer
        .write_batch(TableKind::Captions, "more", &wrong)
        .unwrap_err();
    assert!(err.to_string().contains("schema"), "{err}");
    // 1 accepted + 1 rejected must read 2, and the ledger must hold the 1 rejection.
    let err = DatasetWriter::create(&tmp.path().join("b"), "cfg", 1 << 20)
        .unwrap()
        .commit(IngestCounts {
            read: 3,
            accepted: 1,
            rejected: 1,
        })
        .unwrap_err();
    assert!(err.to_string().contains("read 3"), "{err}");
    let err = writer.commit(counts(1, 1)).unwrap_err();
    assert!(err.to_string().contains("ledger holds 0"), "{err}");
    assert!(!dir.join("manifest.json").exists());
}

#[test]
fn writer_options_control_row_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let options = WriterOptions {
        max_row_group_rows: 1000,
        ..WriterOptions::default()
    };
    let mut writer = DatasetWriter::with_options(&dir, "cfg", options).unwrap();
    let captions: Vec<CaptionRow> = (0..4500).map(caption).collect();
    writer.write_rows("captions", &captions).unwrap();
    let manifest = writer.commit(counts(4500, 0)).unwrap();
    let file = manifest.table_files(TableKind::Captions).next().unwrap();
    let reader = parquet::file::reader::SerializedFileReader::new(
        fs::File::open(dir.join(&file.path)).unwrap(),
    )
    .unwrap();
    use parquet::file::reader::FileReader;
    let metadata = reader.metadata();
    let sizes: Vec<i64> = metadata.row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(sizes, [1000, 1000, 1000, 1000, 500]);
    // ZSTD, statistics, and the capflow key-value metadata.
    let column = metadata.row_group(0).column(0);
    assert!(matches!(
        column.compression(),
        parquet::basic::Compression::ZSTD(_)
    ));
    assert!(column.statistics().is_some());
    let kv: std::collections::HashMap<String, String> = metadata
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
        .collect();
    assert_eq!(kv["capflow.engine_version"], capflow::ENGINE_VERSION);
    assert_eq!(kv["capflow.config_hash"], "cfg");
    assert_eq!(kv["capflow.table"], "captions");
    assert_eq!(
        kv["capflow.schema_fingerprint"],
        capflow::schema::schema_fingerprint(&TableKind::Captions.schema())
    );
}

/// A reader stand-in: three caption lines, the second broken; the first with a grounding.
fn tiny_reader(sink: &mut dyn RecordSink) -> capflow::Result<()> {
    sink.row(Row::Caption(caption(0)))?;
    sink.row(Row::Grounding(capflow::schema::GroundingRow {
        image_id: "img00000".into(),
        caption_id: "img00000#0".into(),
        phrase_id: "1".into(),
        phrase: "people".into(),
        phrase_types: vec!["people".into()],
        token_start: 5,
        token_end: 6,
        boxes: vec![BoxXyxy::new(1.0, 2.0, 3.0, 4.0)],
        is_scene: false,
        no_box: false,
        not_visual: false,
    }))?;
    sink.accepted()?;
    sink.reject(rejected(2))?;
    sink.row(Row::Caption(caption(2)))?;
    sink.row(Row::Sample(sample(9, "test")))?;
    sink.accepted()
}

#[test]
fn dataset_sink_routes_rows_per_table_and_counts_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut writer = DatasetWriter::create(&dir, "cfg", 1 << 20).unwrap();
    let mut sink = DatasetSink::with_flush_rows(&mut writer, 2);
    tiny_reader(&mut sink).unwrap();
    tiny_reader(&mut sink).unwrap();
    assert_eq!(sink.rows_out(), 8);
    let counts = sink.finish().unwrap();
    assert_eq!(
        counts,
        IngestCounts {
            read: 6,
            accepted: 4,
            rejected: 2
        }
    );
    let manifest = writer.commit(counts).unwrap();
    assert_eq!(manifest.table_rows(TableKind::Captions), 4);
    assert_eq!(manifest.table_rows(TableKind::Groundings), 2);
    assert_eq!(manifest.tables["samples"].splits["test"], 2);
    assert_eq!(manifest.table_rows(TableKind::Rejected), 2);
    assert_eq!(
        read_rows::<CaptionRow>(&dir, TableKind::Captions),
        vec![caption(0), caption(2), caption(0), caption(2)]
    );
    assert!(validate(&dir).unwrap().is_ok());
}

fn capflow(args: &[&str]) -> std::process::Output {
    Command::new(common::capflow_bin())
        .args(args)
        .output()
        .expect("run capflow")
}

#[test]
fn cli_ingest_inspect_and_validate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let dir_s = dir.to_str().unwrap();
    // 600 images × 5 caption records; every 97th record is rejected: 3000 read, 30 rejected.
    let out = capflow(&[
        "ingest",
        "synthetic-captions",
        "600",
        "--out",
        dir_s,
        "--shard-bytes",
        "8KiB",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ingested 3000 records (2970 accepted, 30 rejected)"),
        "{stdout}"
    );
    let manifest = read_manifest(&dir).unwrap();
    assert_eq!(manifest.counts, counts(2970, 30));
    assert_eq!(manifest.table_rows(TableKind::Images), 600);
    assert_eq!(manifest.table_rows(TableKind::Captions), 2970);
    assert!(manifest.table_files(TableKind::Captions).count() > 1);
    assert_eq!(manifest.stages.len(), 1);
    assert_eq!(manifest.stages[0].rows_in, 3000);
    assert_eq!(manifest.stages[0].rows_out, 600 + 2 * 2970);

    let out = capflow(&["validate", dir_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid (version 1)"));

    let out = capflow(&["inspect", dir_s, "--rows", "2", "--table", "captions"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("3000 read, 2970 accepted, 30 rejected"),
        "{text}"
    );
    assert!(text.contains("syn000000000#0"), "{text}");
    assert!(!text.contains("syn000000000#2"), "{text}");

    // Corrupt a shard: validate names it and exits 3 (bad data).
    let victim = manifest.table_files(TableKind::Images).next().unwrap();
    let path = dir.join(&victim.path);
    let mut bytes = fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 10);
    fs::write(&path, bytes).unwrap();
    let out = capflow(&["validate", dir_s]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&victim.path), "{stderr}");

    // No manifest: not a dataset.
    let out = capflow(&["validate", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no manifest.json"));

    // Bad arguments are usage errors.
    let out = capflow(&["ingest", "synthetic-captions", "many", "--out", dir_s]);
    assert_eq!(out.status.code(), Some(2));
    let out = capflow(&["ingest", "captions-of-mars", "x", "--out", dir_s]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn cli_ingest_reads_a_capflow_dataset_back_into_a_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    let second = tmp.path().join("second");
    let out = capflow(&[
        "ingest",
        "synthetic-captions",
        "300",
        "--out",
        first.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = capflow(&[
        "ingest",
        "capflow",
        first.to_str().unwrap(),
        "--out",
        second.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = read_manifest(&first).unwrap();
    let b = read_manifest(&second).unwrap();
    // Every data row is one record of the capflow format; the old ledger is not input.
    let data_rows: u64 = [
        TableKind::Images,
        TableKind::Captions,
        TableKind::Groundings,
    ]
    .iter()
    .map(|t| a.table_rows(*t))
    .sum();
    assert_eq!(b.counts, counts(data_rows, 0));
    for table in [
        TableKind::Images,
        TableKind::Captions,
        TableKind::Groundings,
    ] {
        assert_eq!(b.table_rows(table), a.table_rows(table), "{}", table.name());
    }
    assert_eq!(
        read_rows::<CaptionRow>(&second, TableKind::Captions),
        read_rows::<CaptionRow>(&first, TableKind::Captions)
    );
    assert!(validate(&second).unwrap().is_ok());
}

/// A shard that a dataset written before tables had directories keeps in `data/` itself joins
/// its table's directory when a version carries it forward.
#[test]
fn a_carried_shard_of_the_flat_layout_moves_into_its_tables_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut writer = DatasetWriter::create(&dir, "cfg", 1 << 20).unwrap();
    let captions: Vec<CaptionRow> = (0..20).map(caption).collect();
    writer.write_rows("captions", &captions).unwrap();
    let first = writer.commit(counts(20, 0)).unwrap();
    let shard = first
        .table_files(TableKind::Captions)
        .next()
        .unwrap()
        .clone();
    let name = shard.path.rsplit('/').next().unwrap().to_string();
    // Where an earlier capflow kept it, and named it in its manifest.
    fs::rename(dir.join(&shard.path), dir.join("data").join(&name)).unwrap();
    let manifest = dir.join("manifest.json");
    let text = fs::read_to_string(&manifest).unwrap();
    fs::write(
        &manifest,
        text.replace(&shard.path, &format!("data/{name}")),
    )
    .unwrap();
    let legacy = capflow::export::FileEntry {
        path: format!("data/{name}"),
        ..shard.clone()
    };

    let mut writer = DatasetWriter::create(&dir, "cfg", 1 << 20).unwrap();
    writer.carry(&legacy).unwrap();
    let second = writer.commit(counts(20, 0)).unwrap();
    let carried = second.table_files(TableKind::Captions).next().unwrap();
    assert_eq!(carried.path, format!("data/captions/{name}"));
    assert_eq!(carried.sha256, shard.sha256);
    assert_eq!(sha256_hex(&dir.join(&carried.path)), shard.sha256);
    let report = validate(&dir).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}
