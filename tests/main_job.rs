//! The README's main command: `capflow run dataflows/sample.toml` on the embedded sample data.
//! Its dataset is read by pyarrow and DuckDB with the manifest's row counts, every input record
//! is accounted for, and the bytes do not depend on the number of workers.

mod common;

use common::data_files;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use capflow::export::{read_manifest, validate};
use capflow::schema::TableKind;

fn run_sample(out: &Path, workers: usize) {
    let status = Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .args(["run", "dataflows/sample.toml", "--out"])
        .arg(out)
        .args(["-w", &workers.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "capflow run failed with {status}");
}

#[test]
fn sample_run_accounts_for_every_record_and_validates() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("sample");
    run_sample(&out, 1);
    let manifest = read_manifest(&out).unwrap();
    assert!(validate(&out).unwrap().is_ok());
    let counts = &manifest.counts;
    assert_eq!(counts.accepted + counts.rejected, counts.read);
    assert_eq!(
        counts.rejected, 0,
        "the embedded sample has no broken records"
    );
    // Hand counts of examples/data: 20 images × 5 captions, one AMR per caption, 315 grounded
    // phrases, 95 detections, 8 scene graphs, 4 GBC graphs.
    assert_eq!(manifest.table_rows(TableKind::Captions), 100);
    assert_eq!(manifest.table_rows(TableKind::Amrs), 100);
    assert_eq!(manifest.table_rows(TableKind::Groundings), 315);
    assert_eq!(manifest.table_rows(TableKind::Detections), 95);
    assert_eq!(manifest.table_rows(TableKind::SceneGraphs), 8);
    assert_eq!(manifest.table_rows(TableKind::GbcGraphs), 4);
}

#[test]
fn sample_run_bytes_do_not_depend_on_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("w1");
    run_sample(&one, 1);
    let reference = data_files(&one);
    for workers in [2, 4] {
        let dir = tmp.path().join(format!("w{workers}"));
        run_sample(&dir, workers);
        assert_eq!(
            data_files(&dir),
            reference,
            "-w {workers} differs from -w 1"
        );
    }
}

const ORACLE: &str = r#"
import json, os, sys
import duckdb
import pyarrow.parquet as pq

root = sys.argv[1]
manifest = json.load(open(os.path.join(root, "manifest.json")))
out = {}
for split in sorted({f["split"] for f in manifest["files"]}):
    files = [os.path.join(root, f["path"]) for f in manifest["files"] if f["split"] == split]
    arrow_rows = sum(pq.read_table(p).num_rows for p in files)
    duck_rows = duckdb.sql(
        f"select count(*) from read_parquet({files!r})").fetchall()[0][0]
    out[split] = [arrow_rows, duck_rows]
print(json.dumps(out))
"#;

#[test]
fn pyarrow_and_duckdb_read_the_sample_dataset() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("sample");
    run_sample(&out, 2);
    let manifest = read_manifest(&out).unwrap();
    let output = Command::new(python)
        .args(["-c", ORACLE])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: BTreeMap<String, (u64, u64)> = serde_json::from_slice(&output.stdout).unwrap();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for file in &manifest.files {
        *expected.entry(file.split.clone()).or_default() += file.rows;
    }
    assert_eq!(seen.len(), expected.len());
    for (split, rows) in expected {
        assert_eq!(seen[&split], (rows, rows), "split {split}");
    }
}
