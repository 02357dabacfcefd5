//! Datasets written by capflow are read by the tools people train with: pyarrow (each file and
//! each table's directory `data/<table>/`) and DuckDB (`read_parquet('DIR/data/<table>/*.parquet')`),
//! with the manifest's row counts and checksums. Runs through the oracle virtualenv
//! (`common::oracle_python`).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use capflow::export::{read_manifest, synthetic, DatasetSink, DatasetWriter};
use capflow::schema::{BoxXyxy, Provenance, SampleRow, TableKind};

const ORACLE: &str = r#"
import hashlib, json, os, sys
import duckdb
import pyarrow.parquet as pq

root = sys.argv[1]
manifest = json.load(open(os.path.join(root, "manifest.json")))
out = {"files": {}, "sha256": {}, "kv": {}}
for f in manifest["files"]:
    path = os.path.join(root, f["path"])
    out["files"][f["path"]] = pq.read_table(path).num_rows
    out["sha256"][f["path"]] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    meta = pq.read_metadata(path).metadata
    out["kv"][f["path"]] = {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"capflow.")}
out["rejected_file_rows"] = pq.read_table(os.path.join(root, "rejected.parquet")).num_rows
data = os.path.join(root, "data")
# Each table is a directory: pyarrow reads it whole (its `_delta_log` is skipped), DuckDB by glob.
out["table_dir_rows"] = {}
out["duckdb_table_rows"] = {}
for table in sorted({f["table"] for f in manifest["files"]}):
    out["table_dir_rows"][table] = pq.read_table(os.path.join(data, table)).num_rows
    out["duckdb_table_rows"][table] = duckdb.sql(
        f"select count(*) from read_parquet('{data}/{table}/*.parquet')").fetchall()[0][0]
out["duckdb_per_split"] = {}
for f in manifest["files"]:
    split = f["split"]
    out["duckdb_per_split"][split] = duckdb.sql(
        f"select count(*) from read_parquet('{data}/{f['table']}/{split}-*.parquet')").fetchall()[0][0]
out["duckdb_train_words"] = duckdb.sql(
    f"select sum(word_count) from read_parquet('{data}/samples/train-*.parquet')").fetchall()[0][0]
out["duckdb_first_caption"] = duckdb.sql(
    f"select text from read_parquet('{data}/captions/*.parquet') where caption_id = 'syn000000000#0'").fetchall()[0][0]
print(json.dumps(out))
"#;

fn sample(i: usize, split: &str) -> SampleRow {
    SampleRow {
        image: None,
        sample_id: format!("s{i}"),
        image_id: format!("syn{i:09}"),
        split: split.into(),
        method: "clid".into(),
        text: format!("a man walks past sample {i}"),
        control_boxes: vec![BoxXyxy::new(1.0, 2.0, 30.0, 40.0)],
        control_labels: vec!["man".into()],
        coverage: 3.5,
        length_level: 1,
        word_count: (i % 9) as i32 + 3,
        verbs: vec!["walk".into()],
        quality: Vec::new(),
        provenance: Provenance::default(),
    }
}

fn write_dataset(dir: &Path) -> (Vec<SampleRow>, String) {
    let mut writer = DatasetWriter::create(dir, "readers-test", 16 * 1024).unwrap();
    let mut sink = DatasetSink::new(&mut writer);
    synthetic::generate(3000, &mut sink).unwrap();
    let counts = sink.finish().unwrap();
    let samples: Vec<SampleRow> = (0..5000)
        .map(|i| sample(i, if i % 10 == 0 { "validation" } else { "train" }))
        .collect();
    let (train, validation): (Vec<SampleRow>, Vec<SampleRow>) =
        samples.iter().cloned().partition(|s| s.split == "train");
    writer.write_rows("train", &train).unwrap();
    writer.write_rows("validation", &validation).unwrap();
    writer.commit(counts).unwrap();
    // The first caption as the generator builds it, for a value check through DuckDB.
    let mut first = capflow::ingest::VecSink::default();
    synthetic::generate(1, &mut first).unwrap();
    let text = first
        .rows
        .iter()
        .find_map(|row| match row {
            capflow::ingest::Row::Caption(c) if c.caption_id == "syn000000000#0" => {
                Some(c.text.clone())
            }
            _ => None,
        })
        .unwrap();
    (train, text)
}

#[test]
fn pyarrow_and_duckdb_read_the_dataset_with_the_manifest_counts() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let (train, first_caption) = write_dataset(&dir);
    let manifest = read_manifest(&dir).unwrap();
    assert!(manifest.table_files(TableKind::Captions).count() > 1);
    assert!(manifest.table_files(TableKind::Samples).count() > 2);

    let out = Command::new(&python)
        .args(["-c", ORACLE, dir.to_str().unwrap()])
        .output()
        .expect("run the oracle python");
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let mut per_split: BTreeMap<String, u64> = BTreeMap::new();
    for file in &manifest.files {
        assert_eq!(result["files"][&file.path], file.rows, "{}", file.path);
        assert_eq!(result["sha256"][&file.path], file.sha256.as_str());
        let kv = &result["kv"][&file.path];
        assert_eq!(kv["capflow.table"], file.table.name());
        assert_eq!(kv["capflow.engine_version"], capflow::ENGINE_VERSION);
        assert_eq!(kv["capflow.config_hash"], "readers-test");
        assert_eq!(
            kv["capflow.schema_fingerprint"],
            capflow::schema::schema_fingerprint(&file.table.schema()).as_str()
        );
        *per_split.entry(file.split.clone()).or_default() += file.rows;
    }
    let total: u64 = manifest.files.iter().map(|f| f.rows).sum();
    // 3000 images, 15000 caption records of which 154 are rejected, 5000 samples.
    assert_eq!(total, 3000 + 2 * (15_000 - 154) + 154 + 5000);
    for (table, summary) in &manifest.tables {
        assert_eq!(result["table_dir_rows"][table], summary.rows, "{table}");
        assert_eq!(result["duckdb_table_rows"][table], summary.rows, "{table}");
    }
    assert_eq!(result["rejected_file_rows"], 154);
    for (split, rows) in &per_split {
        assert_eq!(result["duckdb_per_split"][split], *rows, "{split}");
    }
    let words: i64 = train.iter().map(|s| i64::from(s.word_count)).sum();
    assert_eq!(result["duckdb_train_words"], words);
    assert_eq!(result["duckdb_first_caption"], first_caption.as_str());
}
