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
import hashlib, json, os, sys
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
        # A version `capflow optimize` committed has no changelog: it changed no row.
        changes = []
        if m.get("changelog"):
            changes = pq.read_table(os.path.join(root, m["changelog"]["path"])).to_pylist()
        out["changelog"][k] = sorted(
            [r["sample_id"], r["text"], "insert" if r["diff"] > 0 else "delete"] for r in changes)
# Every table's rows at the current version, sorted, as one digest per table.
out["rows"] = {}
for table, version in manifest["delta_versions"].items():
    t = DeltaTable(os.path.join(root, "data", table), version=version).to_pyarrow_table()
    rows = sorted(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())
    out["rows"][table] = [len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()]
latest = os.path.join(root, "data", "samples")
out["latest_polars"] = pl.read_delta(latest).height
out["duckdb_all_files"] = duckdb.sql(
    f"select count(*) from read_parquet('{root}/data/samples/**/*.parquet')").fetchall()[0][0]
print(json.dumps(out))
sys.stdout.flush()
os._exit(0)
"#;

fn capflow(args: &[&str]) -> std::process::Output {
    Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .args(args)
        .output()
        .unwrap()
}

fn run_version(tmp: &Path, below: u64) {
    run_spec_version(tmp, "dataflows/ssa-flickr30k.toml", below, &["--state"]);
}

/// Runs `spec` on the sample images below `below` (in `tmp/input`) into `tmp/out`, with
/// `tmp/state` after each of `state_flags` (`--state`, `--models`); returns its stderr.
fn run_spec_version(tmp: &Path, spec: &str, below: u64, state_flags: &[&str]) -> String {
    let input = tmp.join("input");
    if input.exists() {
        std::fs::remove_dir_all(&input).unwrap();
    }
    common::flickr_sample_inputs(&input, below);
    run_spec(tmp, spec, &tmp.join("out"), state_flags)
}

/// Runs `spec` on `tmp/input` into `out`, with `tmp/state` after each of `state_flags`;
/// returns its stderr.
fn run_spec(tmp: &Path, spec: &str, out: &Path, state_flags: &[&str]) -> String {
    let input = tmp.join("input");
    let state = tmp.join("state");
    let mut args = vec![
        "run",
        spec,
        "--input",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    for flag in state_flags {
        args.extend([*flag, state.to_str().unwrap()]);
    }
    let output = capflow(&args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "capflow run failed:\n{stderr}");
    stderr
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

/// `capflow optimize` on a spec with small chunks in two buckets (so that a bucket has several
/// chunks and a compacted file holds some of them): every version, compacted ones included,
/// reads in `deltalake` and polars with the manifest's counts, a compacted version adds nothing
/// to the change data feed, and the reruns after it (new images, then removed ones) read only
/// what changed, carry the compacted files none of whose chunks changed and write the rows of
/// a fresh run with the same models. A rerun without the state rewrites every chunk and writes
/// a fresh run's files byte for byte.
#[test]
fn optimize_compacts_small_files_and_the_reruns_after_it_write_a_fresh_runs_rows() {
    let Some(python) = common::oracle_python_with("deltalake, polars") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let recipe = std::fs::read_to_string(common::repo_root().join("dataflows/ssa-flickr30k.toml"))
        .unwrap()
        .replace(
            "../examples/data",
            common::repo_root().join("examples/data").to_str().unwrap(),
        )
        .replace("[output]\n", "[output]\nchunk_images = 2\nbuckets = 2\n");
    let spec = tmp.path().join("small-chunks.toml");
    std::fs::write(&spec, recipe).unwrap();
    let spec = spec.to_str().unwrap();
    let optimize = |dir: &Path| -> Value {
        let output = capflow(&[
            "optimize",
            dir.to_str().unwrap(),
            "--target-size",
            "8KiB",
            "--json",
        ]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let compacted = |dir: &Path| {
        read_manifest(dir)
            .unwrap()
            .files
            .iter()
            .filter(|f| !f.spans.is_empty())
            .count()
    };

    run_spec_version(tmp.path(), spec, 1_000_016, &["--state"]);
    let before = read_manifest(&out).unwrap().files.len();
    let report = optimize(&out);
    assert_eq!(report["committed"], true, "{report}");
    assert_eq!(report["version"], 2);
    let after = read_manifest(&out).unwrap();
    assert!(
        after.files.len() < before,
        "{} files, {before} before",
        after.files.len()
    );
    assert_eq!(after.compacted_from.as_ref().map(|d| d.version), Some(1));
    assert!(compacted(&out) > 0);
    // Nothing left to compact: no new version.
    assert_eq!(optimize(&out)["committed"], false);
    let stream = tmp.path().join("stream");
    common::copy_dir(&out, &stream);

    // The same inputs: the state still describes the dataset, so nothing is committed.
    let stderr = run_spec(tmp.path(), spec, &out, &["--state"]);
    assert!(stderr.contains("nothing changed"), "{stderr}");
    // Five new images: only they are computed; compacted files none of whose chunks changed
    // are carried.
    let stderr = run_spec_version(tmp.path(), spec, u64::MAX, &["--state"]);
    assert!(
        stderr.contains("computing 5 new or changed images"),
        "{stderr}"
    );
    assert_eq!(read_manifest(&out).unwrap().version, 3);
    assert!(compacted(&out) > 0, "no compacted file was carried");
    optimize(&out);
    // Three images leave.
    let stderr = run_spec_version(tmp.path(), spec, 1_000_018, &["--state"]);
    assert!(stderr.contains("retracting 3 removed"), "{stderr}");
    assert_eq!(read_manifest(&out).unwrap().version, 5);
    let fresh = tmp.path().join("fresh");
    run_spec(tmp.path(), spec, &fresh, &["--models"]);

    let result = oracle(&python, &out);
    for k in 1..=5u64 {
        let text = std::fs::read(out.join(format!("versions/v{k}.json"))).unwrap();
        let version: capflow::export::Manifest = serde_json::from_slice(&text).unwrap();
        for (table, summary) in &version.tables {
            let read = &result["versions"][k.to_string()][table];
            assert_eq!(read["deltalake"], summary.rows, "version {k}, {table}");
            assert_eq!(read["polars"], summary.rows, "version {k}, {table}");
        }
        if k > 1 {
            assert_eq!(
                result["cdf"][k.to_string()],
                result["changelog"][k.to_string()]
            );
        }
    }
    for k in ["2", "4"] {
        assert_eq!(
            result["cdf"][k],
            serde_json::json!([]),
            "version {k} is a compaction"
        );
    }
    assert_eq!(result["rows"], oracle(&python, &fresh)["rows"]);
    for dir in [&out, &fresh] {
        let report = capflow::export::validate(dir).unwrap();
        assert!(report.is_ok(), "{:?}", report.problems);
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    }

    // Without the state every chunk is rewritten, the samples retracted read from the
    // compacted files: a fresh run's files.
    run_spec(tmp.path(), spec, &stream, &[]);
    let fresh = tmp.path().join("fresh-without-state");
    run_spec(tmp.path(), spec, &fresh, &[]);
    assert!(common::data_files(&stream) == common::data_files(&fresh));
}

/// A shard damaged after its commit is never compacted into a new version: `capflow optimize`
/// names it, exits 3 (bad input) and commits nothing.
#[test]
fn optimize_refuses_a_damaged_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    run_version(tmp.path(), 1_000_016);
    let manifest = read_manifest(&out).unwrap();
    let shard = manifest
        .table_files(capflow::schema::TableKind::Samples)
        .next()
        .unwrap();
    let path = out.join(&shard.path);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let output = capflow(&["optimize", out.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&shard.path), "{stderr}");
    assert_eq!(read_manifest(&out).unwrap().version, 1);
}
