//! Every table of a dataset is a Delta Lake table that Python `deltalake` and polars read at
//! every version, with the manifest's row counts, and the `samples` table's change data feed
//! between two versions is capflow's changelog. Three versions of the SSA recipe on the
//! embedded sample data: 15 images, all 20 (samples added), then 17 (samples retracted).
//!
//! Needs the oracle virtualenv with `deltalake` and `polars` (scripts/setup-oracles.sh).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use capflow::export::read_manifest;
use serde_json::Value;

mod common;

const ORACLE: &str = r#"
import json, os, sys
import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

root = sys.argv[1]
out = {"versions": {}, "cdf": {}, "changelog": {}}
manifest = json.load(open(os.path.join(root, "manifest.json")))
for k in range(1, manifest["version"] + 1):
    m = json.load(open(os.path.join(root, "versions", f"v{k}.json")))
    rows = {}
    for table, version in m["delta_versions"].items():
        path = os.path.join(root, "data", table)
        dt = DeltaTable(path, version=version)
        rows[table] = {
            "deltalake": dt.to_pyarrow_table().num_rows,
            "polars": pl.read_delta(path, version=version).height,
        }
    out["versions"][k] = rows
    if k > 1:
        before = json.load(open(os.path.join(root, "versions", f"v{k - 1}.json")))
        start = before["delta_versions"]["samples"] + 1
        end = m["delta_versions"]["samples"]
        if start <= end:
            reader = DeltaTable(os.path.join(root, "data", "samples")).load_cdf(
                starting_version=start, ending_version=end)
            cdf = pa.RecordBatchReader.from_stream(reader).read_all()
            out["cdf"][k] = sorted(
                [r["sample_id"], r["text"], r["_change_type"]] for r in cdf.to_pylist())
        else:
            out["cdf"][k] = []
        changes = pq.read_table(os.path.join(root, m["changelog"]["path"])).to_pylist()
        out["changelog"][k] = sorted(
            [r["sample_id"], r["text"], "insert" if r["diff"] > 0 else "delete"] for r in changes)
latest = os.path.join(root, "data", "samples")
out["latest_polars"] = pl.read_delta(latest).height
out["duckdb_all_files"] = duckdb.sql(
    f"select count(*) from read_parquet('{root}/data/samples/**/*.parquet')").fetchall()[0][0]
print(json.dumps(out))
"#;

fn capflow(args: &[&str]) -> std::process::Output {
    Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .args(args)
        .output()
        .unwrap()
}

fn run_version(tmp: &Path, below: u64) {
    let input = tmp.join("input");
    if input.exists() {
        std::fs::remove_dir_all(&input).unwrap();
    }
    common::flickr_sample_inputs(&input, below);
    let output = capflow(&[
        "run",
        "dataflows/ssa-flickr30k.toml",
        "--input",
        input.to_str().unwrap(),
        "--out",
        tmp.join("out").to_str().unwrap(),
        "--state",
        tmp.join("state").to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "capflow run failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn oracle(python: &Path, dir: &Path) -> Value {
    let output = Command::new(python)
        .args(["-c", ORACLE])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the deltalake oracle failed on {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn deltalake_and_polars_read_every_version_and_the_change_feed_is_the_changelog() {
    let Some(python) = common::oracle_python_with("deltalake, polars") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    for below in [1_000_016, u64::MAX, 1_000_018] {
        run_version(tmp.path(), below);
    }
    let manifest = read_manifest(&out).unwrap();
    assert_eq!(manifest.version, 3);
    let result = oracle(&python, &out);

    for k in 1..=3u64 {
        let text = std::fs::read(out.join(format!("versions/v{k}.json"))).unwrap();
        let version: capflow::export::Manifest = serde_json::from_slice(&text).unwrap();
        let tables: Vec<&String> = version.tables.keys().collect();
        let delta: Vec<&String> = version.delta_versions.keys().collect();
        assert_eq!(delta, tables, "version {k}: every table is a Delta table");
        for (table, summary) in &version.tables {
            let read = &result["versions"][k.to_string()][table];
            assert_eq!(read["deltalake"], summary.rows, "version {k}, {table}");
            assert_eq!(read["polars"], summary.rows, "version {k}, {table}");
        }
    }
    // Version 2 added samples, version 3 retracted some: Delta's change data feed holds exactly
    // the changelog's rows, inserts and deletes.
    let mut kinds = BTreeMap::new();
    for k in ["2", "3"] {
        let changelog = &result["changelog"][k];
        assert!(!changelog.as_array().unwrap().is_empty(), "version {k}");
        assert_eq!(&result["cdf"][k], changelog, "version {k}");
        for change in changelog.as_array().unwrap() {
            *kinds
                .entry(change[2].as_str().unwrap().to_string())
                .or_insert(0) += 1;
        }
    }
    assert!(
        kinds.contains_key("insert") && kinds.contains_key("delete"),
        "{kinds:?}"
    );
    let live = manifest.table_rows(capflow::schema::TableKind::Samples);
    assert_eq!(result["latest_polars"], live);
    // The earlier versions' shards stay for time travel, so a glob over the table's directory
    // counts their rows too (`docs/datasets.md`).
    assert!(result["duckdb_all_files"].as_u64().unwrap() > live);
}

/// The newest log entry's version of every table's Delta log under `dir`.
fn delta_heads(dir: &Path) -> BTreeMap<String, u64> {
    let mut heads = BTreeMap::new();
    for table in std::fs::read_dir(dir.join("data")).unwrap() {
        let table = table.unwrap();
        let log = table.path().join("_delta_log");
        let newest = std::fs::read_dir(&log)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.strip_suffix(".json")?.parse::<u64>().ok()
            })
            .max()
            .unwrap();
        heads.insert(table.file_name().to_string_lossy().into_owned(), newest);
    }
    heads
}

/// A run that died after its Delta commits and before its manifest leaves every table one
/// Delta version ahead of the manifest: `validate` warns, and the same command rolls the
/// tables back and commits the version again, with a clean run's files.
#[test]
fn delta_commits_of_a_run_that_died_before_its_manifest_are_rolled_back() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    run_version(tmp.path(), 1_000_016);
    let first = tmp.path().join("first");
    common::copy_dir(&out, &first);
    run_version(tmp.path(), u64::MAX);
    let second = read_manifest(&out).unwrap();
    let clean = common::data_files(&out);
    // What the dying run leaves: version 1's manifest (and records), version 2's files and
    // Delta commits.
    let crashed = tmp.path().join("crashed");
    common::copy_dir(&out, &crashed);
    for kept in ["manifest.json", "README.md", "rejected.parquet"] {
        std::fs::copy(first.join(kept), crashed.join(kept)).unwrap();
    }
    std::fs::remove_file(crashed.join("versions/v2.json")).unwrap();
    std::fs::remove_file(crashed.join("changes/v2.parquet")).unwrap();
    let report = capflow::export::validate(&crashed).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("is not committed")),
        "{:?}",
        report.warnings
    );
    assert_ne!(
        delta_heads(&crashed),
        read_manifest(&crashed).unwrap().delta_versions
    );

    std::fs::remove_dir_all(&out).unwrap();
    std::fs::rename(&crashed, &out).unwrap();
    run_version(tmp.path(), u64::MAX);
    let again = read_manifest(&out).unwrap();
    assert_eq!(again.version, 2);
    assert_eq!(again.delta_versions, second.delta_versions);
    assert_eq!(delta_heads(&out), again.delta_versions);
    assert!(common::data_files(&out) == clean, "the data files differ");
    let report = capflow::export::validate(&out).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(
        !report.warnings.iter().any(|w| w.contains("_delta_log")),
        "{:?}",
        report.warnings
    );
}
