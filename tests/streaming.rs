//! The streaming engine: a run cut into many small parts writes the same bytes as one in a few
//! large parts and as one on two workers; a rerun into an existing dataset retracts exactly the
//! samples of what left the inputs and writes what a fresh run on the new inputs writes.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::export::{read_changelog, read_manifest, read_table};
use capflow::schema::{batch_to_rows, SampleRow, TableKind};

/// Runs capflow, which must succeed; returns what it wrote to stderr.
fn capflow(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_capflow"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "capflow {args:?}: {stderr}");
    stderr
}

/// The SSA recipe on a copy of the sample data in `dir`, with chunks of about two images so
/// that a bucket can be cut into several parts.
fn recipe(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    common::copy_dir(&common::repo_root().join("examples/data"), &data);
    let text = std::fs::read_to_string(common::repo_root().join("dataflows/ssa-flickr30k.toml"))
        .unwrap()
        .replace("../examples/data", "data")
        .replace("[output]\n", "[output]\nchunk_images = 2\n");
    let spec = dir.join("ssa.toml");
    std::fs::write(&spec, text).unwrap();
    spec
}

/// The current version's data files by name, with their bytes.
fn data_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let manifest = read_manifest(dir).unwrap();
    manifest
        .files
        .iter()
        .filter(|f| f.table != TableKind::Rejected)
        .map(|f| (f.path.clone(), std::fs::read(dir.join(&f.path)).unwrap()))
        .collect()
}

fn samples(dir: &Path) -> Vec<SampleRow> {
    read_table(dir, TableKind::Samples)
        .unwrap()
        .flat_map(|batch| batch_to_rows::<SampleRow>(&batch.unwrap()).unwrap())
        .collect()
}

#[test]
fn small_parts_and_two_workers_write_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = recipe(tmp.path());
    let spec = spec.to_str().unwrap();
    let runs = [
        ("large", vec!["-w", "1"]),
        ("small", vec!["-w", "1", "--memory-limit", "64KiB"]),
        ("small-w2", vec!["-w", "2", "--memory-limit", "64KiB"]),
    ];
    let mut files = Vec::new();
    let mut logs = Vec::new();
    for (name, extra) in &runs {
        let out = tmp.path().join(name);
        let mut args = vec!["run", spec, "--out", out.to_str().unwrap()];
        args.extend(extra.iter().copied());
        logs.push(capflow(&args));
        files.push(data_files(&out));
    }
    // A budget below what the process and its workers hold (104 MiB + 24 MiB a worker, plus
    // their smallest parts) is reported; the default 1 GiB is not.
    let short = "is less than a process with";
    assert!(!logs[0].contains(short), "{}", logs[0]);
    assert!(
        logs[1].contains(
            "--memory-limit 64.00 KiB is less than a process with 1 worker holds \
             at least (about 128.05 MiB)"
        ),
        "{}",
        logs[1]
    );
    assert!(
        logs[2].contains("with 2 workers holds at least (about 152.09 MiB)"),
        "{}",
        logs[2]
    );
    assert!(files[0].len() > 40, "{} files", files[0].len());
    assert_eq!(files[0], files[1], "small parts change the bytes");
    assert_eq!(files[0], files[2], "two workers change the bytes");
}

/// Chunks larger than a part: a chunk's shards are written as its parts come, and their bytes
/// are those of the same chunk written at once.
#[test]
fn chunks_spread_over_parts_write_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = recipe(tmp.path());
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("chunk_images = 2\n", "chunk_images = 6\nbuckets = 1\n");
    std::fs::write(&spec, text).unwrap();
    let spec = spec.to_str().unwrap();
    let mut files = Vec::new();
    for (name, limit) in [("whole", "1GiB"), ("spread", "64KiB")] {
        let out = tmp.path().join(name);
        let args = [
            "run",
            spec,
            "--out",
            out.to_str().unwrap(),
            "--memory-limit",
            limit,
        ];
        capflow(&args);
        files.push(data_files(&out));
    }
    // Parts of the smallest size, 4 KiB, hold an image or two (about 5 KB of rows each), so every
    // closed chunk of several images spreads over several parts.
    let closed_chunks = read_manifest(&tmp.path().join("whole"))
        .unwrap()
        .files
        .iter()
        .filter(|f| f.table == TableKind::Images)
        .filter(|f| f.rows >= 4 && f.chunk.as_deref().is_some_and(|c| !c.is_empty()))
        .count();
    assert!(
        closed_chunks >= 2,
        "{closed_chunks} closed chunks of 4 images or more"
    );
    assert_eq!(
        files[0], files[1],
        "chunks spread over parts change the bytes"
    );
}

#[test]
fn a_rerun_over_a_dataset_retracts_exactly_what_left_the_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = recipe(tmp.path());
    let spec_s = spec.to_str().unwrap();
    let out = tmp.path().join("out");
    let out_s = out.to_str().unwrap();
    capflow(&["run", spec_s, "--out", out_s]);
    let before = samples(&out);

    // The same inputs again: every sample is retracted and added back, so nothing changes and
    // no version is committed.
    let manifest_bytes = std::fs::read(out.join("manifest.json")).unwrap();
    capflow(&["run", spec_s, "--out", out_s, "-w", "2"]);
    assert_eq!(
        std::fs::read(out.join("manifest.json")).unwrap(),
        manifest_bytes
    );
    assert_eq!(samples(&out), before);

    // One image's caption file leaves the inputs.
    let sentences = tmp.path().join("data/flickr30k_entities/Sentences");
    let gone = std::fs::read_dir(&sentences)
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let gone_id = gone.file_stem().unwrap().to_string_lossy().to_string();
    std::fs::remove_file(&gone).unwrap();
    capflow(&["run", spec_s, "--out", out_s]);
    let after = samples(&out);
    let manifest = read_manifest(&out).unwrap();
    let changes = manifest.changelog.as_ref().unwrap();
    let changelog: Vec<(SampleRow, i8)> = read_changelog(&out.join(&changes.path)).unwrap();
    // The changelog turns the old samples into the new ones, as multisets: the corpus-level
    // models are refitted without the image's captions, so other images' samples change too.
    let key = |s: &SampleRow| format!("{s:?}");
    let mut multiset: BTreeMap<String, i64> = BTreeMap::new();
    for sample in &before {
        *multiset.entry(key(sample)).or_default() += 1;
    }
    for (sample, diff) in &changelog {
        *multiset.entry(key(sample)).or_default() += i64::from(*diff);
    }
    let mut wanted: BTreeMap<String, i64> = BTreeMap::new();
    for sample in &after {
        *wanted.entry(key(sample)).or_default() += 1;
    }
    multiset.retain(|_, n| *n != 0);
    assert_eq!(multiset, wanted);
    assert_eq!(
        (changes.added, changes.retracted),
        (
            changelog.iter().filter(|c| c.1 > 0).count() as u64,
            changelog.iter().filter(|c| c.1 < 0).count() as u64
        )
    );
    // Every sample of the image that left is retracted, and none comes back.
    let gone: Vec<&SampleRow> = before.iter().filter(|s| s.image_id == gone_id).collect();
    assert!(!gone.is_empty());
    for sample in gone {
        assert!(changelog.iter().any(|(s, d)| s == sample && *d == -1));
    }
    assert!(after.iter().all(|s| s.image_id != gone_id));
    // Changes come by image id.
    assert!(changelog
        .windows(2)
        .all(|w| w[0].0.image_id <= w[1].0.image_id));

    // The new version holds what a fresh run on the new inputs writes.
    let fresh = tmp.path().join("fresh");
    capflow(&["run", spec_s, "--out", fresh.to_str().unwrap()]);
    assert_eq!(data_files(&out), data_files(&fresh));
}
