//! GBC graphs in and out: every ml-gbc fixture read into capflow rows and written back in each
//! layout must reproduce every field (and, for JSONL/JSON, every byte) of what ml-gbc wrote;
//! pyarrow must read our Parquet as ml-gbc's records; masks and statistics must agree with ml-gbc's
//! stored values and an independent Python computation.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::graph::gbc::{
    python_float_repr, python_json, python_json_indented, recompute_masks, record_from_row,
    statistics, write_gbc_file, write_parquet,
};
use capflow::ingest::{gbc, IngestCounts, Row, VecSink};
use capflow::schema::{batch_to_rows, rows_to_batch, GbcGraphRow, RejectedRow};
use proptest::prelude::*;
use serde_json::Value;

const JSONL_FIXTURES: [&str; 3] = [
    "gbc/wiki__wiki_gbc_graphs.jsonl",
    "gbc/wiki_pixtral_gdino__wiki_gbc_graphs.jsonl",
    "gbc/wiki_with_clip_scores__wiki_gbc_graphs_with_clip.jsonl",
];
const JSON_FIXTURE: &str = "gbc/prompt_gen__library_turtle_frog_steamponk.json";
const PARQUET_FIXTURE: &str = "gbc/wiki__wiki_gbc_graphs.parquet";

fn read_gbc(path: &Path) -> (Vec<GbcGraphRow>, Vec<RejectedRow>, IngestCounts) {
    let mut sink = VecSink::default();
    gbc::read(path, &mut sink).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let counts = sink.counts();
    let rows = sink
        .rows
        .into_iter()
        .map(|row| match row {
            Row::GbcGraph(g) => g,
            other => panic!("unexpected row {other:?}"),
        })
        .collect();
    (rows, sink.rejected, counts)
}

/// The non-blank lines of a JSONL fixture, as written by ml-gbc.
fn fixture_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

fn records_of(rows: &[GbcGraphRow]) -> Vec<Value> {
    rows.iter().map(|r| record_from_row(r).unwrap()).collect()
}

fn run_python(python: &Path, script: &str, args: &[&Path]) -> String {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("running the oracle python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn jsonl_fixtures_round_trip_field_by_field_and_byte_for_byte() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (mut total, mut identical) = (0, 0);
    for name in JSONL_FIXTURES {
        let path = dir.join(name);
        let lines = fixture_lines(&path);
        let (rows, rejected, counts) = read_gbc(&path);
        assert!(rejected.is_empty(), "{name}: {rejected:?}");
        assert_eq!(counts.read, lines.len() as u64, "{name}");
        assert_eq!(counts.accepted + counts.rejected, counts.read);
        assert_eq!(rows.len(), lines.len());
        for (line, row) in lines.iter().zip(&rows) {
            let original: Value = serde_json::from_str(line).unwrap();
            let ours = record_from_row(row).unwrap();
            // Value equality is exact on floats and tells 1 from 1.0.
            assert_eq!(ours, original, "{name}: {}", row.image_id);
            total += 1;
            if python_json(&ours) == *line {
                identical += 1;
            }
        }
        // The whole file, written by the JSONL writer.
        let out = tmp.path().join("out.jsonl");
        write_gbc_file(&out, &rows).unwrap();
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(&path).unwrap(),
            "{name}: written file differs from ml-gbc's"
        );
    }
    eprintln!("GBC JSONL: {identical} of {total} lines byte-identical");
    assert_eq!(identical, total);
    assert_eq!(total, 59);
}

#[test]
fn json_list_fixture_round_trips_byte_for_byte() {
    let Some(path) = common::fixture(JSON_FIXTURE) else {
        return;
    };
    let original: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let (rows, rejected, counts) = read_gbc(&path);
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(counts.read, 4);
    let ours = Value::Array(records_of(&rows));
    assert_eq!(ours, original);
    assert_eq!(
        python_json_indented(&ours, 4).as_bytes(),
        std::fs::read(&path).unwrap().as_slice()
    );
    // The generated graphs name their root "image", the captioned ones "".
    assert!(rows.iter().all(|r| r.vertices[0].vertex_id == "image"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.json");
    write_gbc_file(&out, &rows).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&path).unwrap());
}

#[test]
fn every_fixture_survives_our_parquet() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for name in JSONL_FIXTURES
        .iter()
        .chain([&JSON_FIXTURE, &PARQUET_FIXTURE])
    {
        let (rows, rejected, _) = read_gbc(&dir.join(name));
        assert!(rejected.is_empty());
        let parquet = tmp.path().join("graphs.parquet");
        write_gbc_file(&parquet, &rows).unwrap();
        let (back, rejected, counts) = read_gbc(&parquet);
        assert!(rejected.is_empty(), "{name}: {rejected:?}");
        assert_eq!(counts.read, rows.len() as u64);
        assert_eq!(records_of(&back), records_of(&rows), "{name}");
        assert_eq!(
            back.iter().map(|r| &r.image_id).collect::<Vec<_>>(),
            rows.iter().map(|r| &r.image_id).collect::<Vec<_>>()
        );
    }
}

#[test]
fn ml_gbc_parquet_reads_as_its_jsonl_twin() {
    let (Some(parquet), Some(jsonl)) = (
        common::fixture(PARQUET_FIXTURE),
        common::fixture(JSONL_FIXTURES[0]),
    ) else {
        return;
    };
    let (rows, rejected, counts) = read_gbc(&parquet);
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(counts.read, 19);
    let lines = fixture_lines(&jsonl);
    let expected: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records_of(&rows), expected);
    // With ml-gbc's field order restored, the Parquet rows dump to the very JSONL lines.
    for (row, line) in rows.iter().zip(&lines) {
        assert_eq!(python_json(&record_from_row(row).unwrap()), *line);
    }
}

#[test]
fn pyarrow_reads_our_parquet_as_the_fixture_records() {
    let (Some(dir), Some(python)) = (common::fixtures_dir(), common::oracle_python()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let script = r#"
import json, sys
import pyarrow.parquet as pq
ours, source, reference = sys.argv[1], sys.argv[2], sys.argv[3]
if source.endswith(".json"):
    expected = json.load(open(source))
else:
    expected = [json.loads(l) for l in open(source) if l.strip()]
rows = pq.read_table(ours).to_pylist()
assert rows == expected, "rows differ"
same_schema = pq.read_schema(ours).equals(pq.read_schema(reference), check_metadata=False)
print(len(rows), same_schema)
"#;
    let reference = dir.join(PARQUET_FIXTURE);
    for name in JSONL_FIXTURES.iter().chain([&JSON_FIXTURE]) {
        let source = dir.join(name);
        let (rows, _, _) = read_gbc(&source);
        let ours = tmp.path().join("ours.parquet");
        write_gbc_file(&ours, &rows).unwrap();
        let out = run_python(&python, script, &[&ours, &source, &reference]);
        let mut fields = out.split_whitespace();
        assert_eq!(fields.next(), Some(rows.len().to_string().as_str()));
        if *name == JSONL_FIXTURES[0] {
            // Same graphs as ml-gbc's Parquet: same columns, nesting, field order and types.
            assert_eq!(fields.next(), Some("True"), "schema differs from ml-gbc's");
        }
    }
}

#[test]
fn recomputed_masks_equal_the_stored_ones() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let mut jsonl_vertices = 0;
    let mut all_vertices = 0;
    for name in JSONL_FIXTURES.iter().chain([&JSON_FIXTURE]) {
        let (rows, _, _) = read_gbc(&dir.join(name));
        for row in &rows {
            for (vertex, relations) in row.vertices.iter().zip(recompute_masks(row)) {
                let (Some(sub), Some(sup)) = (&vertex.sub_masks, &vertex.super_masks) else {
                    continue;
                };
                assert_eq!(*sub, relations.sub_masks, "{name} {}", vertex.vertex_id);
                assert_eq!(*sup, relations.super_masks, "{name} {}", vertex.vertex_id);
                all_vertices += 1;
                if name.ends_with(".jsonl") {
                    jsonl_vertices += 1;
                }
            }
        }
    }
    eprintln!("GBC masks: {jsonl_vertices} JSONL vertices, {all_vertices} in all, all agree");
    assert_eq!(jsonl_vertices, 886);
    assert_eq!(all_vertices, 908);
}

const STATS_SCRIPT: &str = r#"
import json, sys
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path
out = []
for path in sys.argv[1:]:
    if path.endswith(".json"):
        records = json.load(open(path))
    else:
        records = [json.loads(l) for l in open(path) if l.strip()]
    for r in records:
        vs = r["vertices"]
        idx = {v["vertex_id"]: i for i, v in enumerate(vs)}
        rows, cols = [], []
        for v in vs:
            for e in v["in_edges"] + v["out_edges"]:
                a, b = idx.get(e["source"]), idx.get(e["target"])
                if a is not None and b is not None and a != b:
                    rows += [a, b]
                    cols += [b, a]
        n = len(vs)
        m = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
        d = shortest_path(m, directed=False, unweighted=True)
        finite = d[np.isfinite(d)]
        out.append({
            "vertices": n,
            "edges": sum(len(v["out_edges"]) for v in vs),
            "captions": sum(len(v["descs"]) for v in vs),
            "words": sum(len(c["text"].split()) for v in vs for c in v["descs"]),
            "diameter": int(finite.max()) if finite.size else 0,
        })
print(json.dumps(out))
"#;

#[test]
fn statistics_match_an_independent_python_computation() {
    let (Some(dir), Some(python)) = (common::fixtures_dir(), common::oracle_python()) else {
        return;
    };
    let paths: Vec<PathBuf> = JSONL_FIXTURES
        .iter()
        .chain([&JSON_FIXTURE])
        .map(|n| dir.join(n))
        .collect();
    let args: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let expected: Value = serde_json::from_str(&run_python(&python, STATS_SCRIPT, &args)).unwrap();
    let ours: Vec<Value> = paths
        .iter()
        .flat_map(|p| read_gbc(p).0)
        .map(|row| serde_json::to_value(statistics(&row)).unwrap())
        .collect();
    assert_eq!(Value::Array(ours.clone()), expected);
    assert_eq!(ours.len(), 63);

    // The CLI reports the same per-graph numbers.
    let out = Command::new(common::capflow_bin())
        .args(["gbc", "stats", "--json"])
        .arg(&paths[0])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let graphs = report["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 19);
    for (graph, want) in graphs.iter().zip(expected.as_array().unwrap()) {
        for key in ["vertices", "edges", "captions", "words", "diameter"] {
            assert_eq!(graph[key], want[key], "{key}");
        }
    }
    assert_eq!(report["masks"]["vertices_with_masks"], 231);
    assert_eq!(report["masks"]["agreeing"], 231);
}

#[test]
fn float_repr_matches_python_on_random_doubles() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut values: Vec<f64> = Vec::new();
    while values.len() < 4000 {
        let x = match values.len() % 4 {
            // Arbitrary bit patterns cover every exponent.
            0 => f64::from_bits(rng.gen()),
            // float32 values widened to double, as detector scores are: many ties.
            1 => f64::from(f32::from_bits(rng.gen())),
            2 => rng.gen::<f64>(),
            _ => f64::from(rng.gen::<f32>()),
        };
        if x.is_finite() {
            values.push(x);
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("bits.txt");
    let bits: Vec<String> = values.iter().map(|x| x.to_bits().to_string()).collect();
    std::fs::write(&input, bits.join("\n")).unwrap();
    let script = r#"
import struct, sys
for line in open(sys.argv[1]):
    print(repr(struct.unpack("<d", struct.pack("<Q", int(line)))[0]))
"#;
    let out = run_python(&python, script, &[&input]);
    let expected: Vec<&str> = out.lines().collect();
    assert_eq!(expected.len(), values.len());
    for (x, want) in values.iter().zip(expected) {
        assert_eq!(python_float_repr(*x), want, "bits {}", x.to_bits());
    }
}

#[test]
fn capflow_table_holds_gbc_rows_exactly() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    for name in JSONL_FIXTURES.iter().chain([&JSON_FIXTURE]) {
        let (rows, _, _) = read_gbc(&dir.join(name));
        let batch = rows_to_batch(&rows).unwrap();
        assert_eq!(batch.num_rows(), rows.len());
        let back: Vec<GbcGraphRow> = batch_to_rows(&batch).unwrap();
        assert_eq!(back, rows, "{name}");
    }
}

/// Writes `text` to a fresh file named `name` and reads it.
fn read_text(name: &str, text: &[u8]) -> (Vec<GbcGraphRow>, Vec<RejectedRow>, IngestCounts) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(name);
    std::fs::write(&path, text).unwrap();
    read_gbc(&path)
}

/// A small valid record (not fixture content): an image root with one entity child.
fn small_record(root_id: &str) -> Value {
    serde_json::json!({
        "vertices": [
            {"vertex_id": root_id, "bbox": {"left": 0.0, "top": 0.0, "right": 1.0, "bottom": 1.0,
                "confidence": null}, "label": "image",
             "descs": [{"text": "A dog on grass.", "label": "short"}],
             "in_edges": [], "out_edges": [{"source": root_id, "text": "dog", "target": "dog"}]},
            {"vertex_id": "dog", "bbox": {"left": 0.25, "top": 0.5, "right": 0.75, "bottom": 1.0,
                "confidence": 0.5}, "label": "entity",
             "descs": [{"text": "A brown dog.", "label": "detail", "score": 1}],
             "in_edges": [{"source": root_id, "text": "dog", "target": "dog"}], "out_edges": []}
        ],
        "img_url": null, "img_path": null, "original_caption": null,
        "short_caption": "A dog on grass.", "detail_caption": null,
        "source": {"n": 1, "x": 1.0}
    })
}

#[test]
fn small_record_keeps_integers_floats_nulls_and_unknown_fields() {
    let record = small_record("");
    let line = python_json(&record);
    let (rows, rejected, _) = read_text("one.jsonl", format!("{line}\n").as_bytes());
    assert!(rejected.is_empty(), "{rejected:?}");
    // No img_path, no img_url: the image is named by file and record index.
    assert!(
        rows[0].image_id.ends_with("one.jsonl:0"),
        "{}",
        rows[0].image_id
    );
    let back = record_from_row(&rows[0]).unwrap();
    assert_eq!(back, record);
    assert_eq!(python_json(&back), line);
    assert_eq!(back["source"]["n"], Value::from(1));
    assert!(back["source"]["x"].is_f64());
    // Hand-computed: 4 + 3 words, a root with one child.
    let s = statistics(&rows[0]);
    assert_eq!(
        (s.vertices, s.edges, s.captions, s.words, s.diameter),
        (2, 1, 2, 7, 1)
    );
    // The dog box (area 0.25) lies fully inside the image box: dog ⊂ root.
    let masks = recompute_masks(&rows[0]);
    assert_eq!(masks[0].sub_masks, vec!["dog".to_string()]);
    assert_eq!(masks[1].super_masks, vec![String::new()]);
}

#[test]
fn bad_records_are_rejected_with_line_and_reason() {
    let good = python_json(&small_record(""));
    let mut no_root = small_record("");
    no_root["vertices"][0]["label"] = "entity".into();
    let mut bad_label = small_record("");
    bad_label["vertices"][1]["descs"][0]["label"] = "caption".into();
    let mut dup = small_record("");
    dup["vertices"][1]["vertex_id"] = "".into();
    let mut bad_bbox = small_record("");
    bad_bbox["vertices"][1]["bbox"]["left"] = "0.1".into();
    let lines: Vec<Vec<u8>> = vec![
        good.clone().into_bytes(),
        b"{\"vertices\": [".to_vec(),
        b"[1, 2]".to_vec(),
        python_json(&no_root).into_bytes(),
        Vec::new(),
        python_json(&bad_label).into_bytes(),
        python_json(&dup).into_bytes(),
        b"\xff\xfe{}".to_vec(),
        python_json(&bad_bbox).into_bytes(),
        good.into_bytes(),
    ];
    let text = lines.join(&b'\n');
    let (rows, rejected, counts) = read_text("mixed.jsonl", &text);
    assert_eq!(counts.read, 9, "the blank line is not a record");
    assert_eq!(counts.accepted, 2);
    assert_eq!(rows.len(), 2);
    let where_why: Vec<(Option<i64>, &str)> = rejected
        .iter()
        .map(|r| (r.line, r.reason.as_str()))
        .collect();
    let lines_rejected: Vec<i64> = where_why.iter().map(|(l, _)| l.unwrap()).collect();
    assert_eq!(lines_rejected, vec![2, 3, 4, 6, 7, 8, 9]);
    assert!(where_why[0].1.contains("invalid JSON"));
    assert!(where_why[1].1.contains("expected a JSON object"));
    assert!(where_why[2].1.contains("image"));
    assert!(where_why[3].1.contains("caption label"));
    assert!(where_why[4].1.contains("duplicate vertex_id"));
    assert!(where_why[6].1.contains("bbox"));
    assert!(rejected
        .iter()
        .all(|r| r.format == "gbc" && r.source_file.ends_with("mixed.jsonl")));
    // Record indices count rejected records too: the last good record is record 8.
    assert!(
        rows[1].image_id.ends_with("mixed.jsonl:8"),
        "{}",
        rows[1].image_id
    );
}

#[test]
fn json_list_rejects_broken_elements_and_goes_on() {
    let good = python_json(&small_record("image"));
    let text =
        format!("[\n{good},\n{{\"vertices\": 3}},\n  {{\"oops\": [1, \"]\"]}}, ,\n{good}\n]\n");
    let (rows, rejected, counts) = read_text("list.json", text.as_bytes());
    assert_eq!(counts.accepted, 2);
    assert_eq!(counts.read, 5);
    assert_eq!(rows.len(), 2);
    let lines: Vec<Option<i64>> = rejected.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![Some(3), Some(4), Some(4)]);
    assert!(rejected[0].reason.contains("`vertices` must be a list"));
    assert!(rejected[2].reason.contains("empty list element"));

    // One record without a list; an empty list; a list cut short.
    let (rows, _, counts) = read_text("one.json", good.as_bytes());
    assert_eq!((rows.len(), counts.read), (1, 1));
    let (_, _, counts) = read_text("empty.json", b" [ ] ");
    assert_eq!(counts.read, 0);
    let cut = format!("[{good}, {}", &good[..40]);
    let (rows, rejected, counts) = read_text("cut.json", cut.as_bytes());
    assert_eq!((rows.len(), rejected.len(), counts.read), (1, 1, 2));
    assert!(rejected[0].reason.contains("ends inside"));
}

#[test]
fn cli_converts_between_layouts() {
    let Some(source) = common::fixture(JSON_FIXTURE) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let parquet = tmp.path().join("graphs.parquet");
    let jsonl = tmp.path().join("graphs.jsonl");
    for (from, to) in [(source.as_path(), parquet.as_path()), (&parquet, &jsonl)] {
        let out = Command::new(common::capflow_bin())
            .args(["gbc", "convert"])
            .arg(from)
            .arg(to)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let original: Vec<Value> = serde_json::from_slice(&std::fs::read(&source).unwrap()).unwrap();
    let converted: Vec<Value> = fixture_lines(&jsonl)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(converted, original);
    let out = Command::new(common::capflow_bin())
        .args(["gbc", "convert"])
        .arg(&source)
        .arg(tmp.path().join("graphs.txt"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "unknown extension is a usage error"
    );
}

#[test]
fn parquet_writer_refuses_mixed_column_types() {
    let tmp = tempfile::tempdir().unwrap();
    let records = vec![
        serde_json::json!({"vertices": [], "extra": 1}),
        serde_json::json!({"vertices": [], "extra": "one"}),
    ];
    let err = write_parquet(&tmp.path().join("x.parquet"), &records).unwrap_err();
    assert!(err.to_string().contains("extra"), "{err}");
    assert!(!tmp.path().join("x.parquet").exists());
}

#[test]
fn corrupt_parquet_page_is_an_error_not_a_crash() {
    let Some(path) = common::fixture(PARQUET_FIXTURE) else {
        return;
    };
    // One flipped byte in a definition-level run makes the parquet crate's RLE decoder overflow a
    // shift (found by fuzzing); the read must end with an error naming the file.
    let mut bytes = std::fs::read(path).unwrap();
    assert_eq!(
        bytes.len(),
        95076,
        "fixture changed; the offset below is for the original"
    );
    bytes[53513] = 0x90;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("corrupt.parquet");
    std::fs::write(&file, &bytes).unwrap();
    let mut sink = VecSink::default();
    let err = gbc::read(&file, &mut sink).unwrap_err();
    assert!(err.to_string().contains("corrupt.parquet"), "{err}");
    let counts = sink.counts();
    assert_eq!(counts.accepted + counts.rejected, counts.read);
}

/// Fixture lines with bytes flipped, dropped or inserted, plus arbitrary bytes.
fn mutated(lines: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = lines.len();
    (
        0..n.max(1),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 0..8),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(move |(pick, edits, noise)| {
            let mut bytes = lines.get(pick).cloned().unwrap_or_default();
            for (at, byte, kind) in edits {
                if bytes.is_empty() {
                    bytes.push(byte);
                    continue;
                }
                let i = at.index(bytes.len());
                match kind {
                    0 => bytes[i] = byte,
                    1 => {
                        bytes.remove(i);
                    }
                    _ => bytes.insert(i, byte),
                }
            }
            bytes.push(b'\n');
            bytes.extend(noise);
            bytes
        })
}

fn sample_lines() -> Vec<Vec<u8>> {
    let mut lines = vec![
        python_json(&small_record("")).into_bytes(),
        python_json(&small_record("image")).into_bytes(),
    ];
    if let Some(path) = common::fixture(JSONL_FIXTURES[0]) {
        if let Ok(text) = std::fs::read_to_string(path) {
            lines.extend(text.lines().take(3).map(|l| l.as_bytes().to_vec()));
        }
    }
    lines
}

/// The lines of `bytes` as docs/readers.md defines them: `\n`, `\r\n` and a lone
/// `\r` each end a line.
fn line_pieces(bytes: &[u8]) -> Vec<&[u8]> {
    let (mut out, mut start, mut i) = (Vec::new(), 0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => i += 1,
            b'\r' if bytes.get(i + 1) == Some(&b'\n') => i += 2,
            b'\r' => i += 1,
            _ => {
                i += 1;
                continue;
            }
        }
        let end = if bytes[i - 1] == b'\n' && i >= 2 && bytes[i - 2] == b'\r' {
            i - 2
        } else {
            i - 1
        };
        out.push(&bytes[start..end]);
        start = i;
    }
    out.push(&bytes[start..]);
    out
}

#[test]
fn line_pieces_end_lines_at_every_line_end() {
    let pieces = line_pieces(b"a\nb\r\nc\rd\r\r\ne");
    assert_eq!(pieces, [&b"a"[..], b"b", b"c", b"d", b"", b"e"]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn mutated_jsonl_never_panics_and_is_accounted(bytes in mutated(sample_lines())) {
        let (rows, rejected, counts) = read_text("m.jsonl", &bytes);
        let records = line_pieces(&bytes)
            .into_iter()
            .enumerate()
            .filter(|(i, l)| {
                let l = if *i == 0 { l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l) } else { l };
                !l.iter().all(u8::is_ascii_whitespace)
            })
            .count() as u64;
        prop_assert_eq!(counts.read, records);
        prop_assert_eq!(rows.len() as u64 + rejected.len() as u64, records);
        for row in &rows {
            prop_assert!(record_from_row(row).is_ok());
        }
    }

    #[test]
    fn mutated_json_lists_never_panic(bytes in mutated(sample_lines())) {
        let mut list = b"[".to_vec();
        list.extend(&bytes);
        list.extend(b",");
        list.extend(python_json(&small_record("")).as_bytes());
        list.extend(b"]");
        let (rows, rejected, counts) = read_text("m.json", &list);
        prop_assert_eq!(rows.len() as u64 + rejected.len() as u64, counts.read);
        let (rows, rejected, counts) = read_text("raw.json", &bytes);
        prop_assert_eq!(rows.len() as u64 + rejected.len() as u64, counts.read);
    }

    #[test]
    fn mutated_parquet_never_panics(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        truncate in any::<Option<prop::sample::Index>>(),
    ) {
        let Some(path) = common::fixture(PARQUET_FIXTURE) else { return Ok(()); };
        let mut bytes = std::fs::read(path).unwrap();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        if let Some(at) = truncate {
            bytes.truncate(at.index(bytes.len()));
        }
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("m.parquet");
        std::fs::write(&file, &bytes).unwrap();
        let mut sink = VecSink::default();
        // A damaged file may be an error (it cannot be read at all) but never a panic.
        let _ = gbc::read(&file, &mut sink);
        let counts = sink.counts();
        prop_assert_eq!(counts.accepted + counts.rejected, counts.read);
    }
}
