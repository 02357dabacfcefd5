//! Crash safety of the dataset commit: `capflow ingest` is killed with SIGKILL at random points,
//! 20 times, into the same directory. After every kill either there is no manifest (nothing
//! was ever committed) or the dataset validates; once a manifest has appeared it never
//! disappears; and the next uninterrupted run cleans up everything the kills left.

mod common;

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use capflow::export::{read_manifest, read_table, validate};
use capflow::schema::TableKind;
use rand::{Rng, SeedableRng};

/// Images of the synthetic corpus: large enough that a debug build takes about a second.
const IMAGES: &str = "8000";

fn start_ingest(dir: &Path) -> Child {
    Command::new(common::capflow_bin())
        .args([
            "ingest",
            "synthetic-captions",
            IMAGES,
            "--out",
            dir.to_str().unwrap(),
            // Small shards: many files to move, so kills also land inside the commit.
            "--shard-bytes",
            "128KiB",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capflow ingest")
}

/// Rows of a table summed over its batches, read through the manifest.
fn rows_read(dir: &Path, table: TableKind) -> u64 {
    read_table(dir, table)
        .unwrap()
        .map(|batch| batch.unwrap().num_rows() as u64)
        .sum()
}

fn assert_consistent(dir: &Path, context: &str) {
    let report = validate(dir).unwrap_or_else(|e| panic!("{context}: {e}"));
    assert!(report.is_ok(), "{context}: {:?}", report.problems);
    let manifest = read_manifest(dir).unwrap();
    for table in [TableKind::Images, TableKind::Captions, TableKind::Rejected] {
        assert_eq!(
            rows_read(dir, table),
            manifest.table_rows(table),
            "{context}: {}",
            table.name()
        );
    }
}

#[test]
fn killing_ingest_never_leaves_a_dataset_that_does_not_match_its_manifest() {
    let tmp = tempfile::tempdir().unwrap();

    // One uninterrupted run measures how long an ingest takes here.
    let reference = tmp.path().join("reference");
    let started = Instant::now();
    let out = start_ingest(&reference).wait_with_output().unwrap();
    let full = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_consistent(&reference, "uninterrupted run");

    let seed: u64 = rand::random();
    eprintln!("kill schedule seed {seed}, full run {full:?}");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let dir = tmp.path().join("ds");
    let mut committed_once = false;
    let mut outcomes = (0, 0, 0); // (no manifest, manifest, finished before the kill)
    for kill in 0..20 {
        // Half the kills anywhere in the run, half near its end where the commit happens.
        let fraction = if kill % 2 == 0 {
            rng.gen_range(0.0..1.0)
        } else {
            rng.gen_range(0.75..1.1)
        };
        let delay = full.mul_f64(fraction);
        let mut child = start_ingest(&dir);
        std::thread::sleep(delay);
        let finished = matches!(child.try_wait(), Ok(Some(_)));
        let _ = child.kill(); // SIGKILL on Unix; an error only means it had already exited
        let status = child.wait().unwrap();
        let context = format!("kill {kill} after {delay:?} (seed {seed})");
        if finished {
            let mut stderr = String::new();
            use std::io::Read;
            let _ = child
                .stderr
                .take()
                .map(|mut s| s.read_to_string(&mut stderr));
            assert!(status.success(), "{context}: {stderr}");
            outcomes.2 += 1;
        }
        if dir.join("manifest.json").exists() {
            committed_once = true;
            outcomes.1 += 1;
            assert_consistent(&dir, &context);
        } else {
            assert!(
                !committed_once,
                "{context}: the committed manifest disappeared"
            );
            outcomes.0 += 1;
        }
    }
    eprintln!(
        "after 20 kills: {} without manifest, {} with a valid manifest ({} runs had finished)",
        outcomes.0, outcomes.1, outcomes.2
    );

    // The next run succeeds and leaves nothing of the killed runs behind.
    let out = start_ingest(&dir).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = validate(&dir).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let leftovers: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".capflow"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Same input, same rows: the data files are the reference run's, byte for byte.
    let names = |d: &Path| {
        // Every table's shards; the Delta Lake logs record commit times.
        let mut v: Vec<(String, Vec<u8>)> = Vec::new();
        for table in fs::read_dir(d.join("data")).unwrap() {
            for e in fs::read_dir(table.unwrap().path()).unwrap() {
                let e = e.unwrap();
                if e.path().is_file() {
                    v.push((
                        e.file_name().to_string_lossy().into_owned(),
                        fs::read(e.path()).unwrap(),
                    ));
                }
            }
        }
        v.sort();
        v
    };
    assert!(
        names(&dir) == names(&reference),
        "data files differ from the reference run"
    );
}
