//! GBC graphs become samples: checked against the raw ml-gbc records (read with serde_json, not
//! through capflow's reader) of the fixtures and the embedded sample graphs.

mod common;

use std::path::Path;

use capflow::augment::gbc::{samples, ConcatSetting, GbcSampleConfig};
use capflow::augment::ImageAnnotations;
use capflow::ingest::{gbc, Row, VecSink};
use capflow::schema::BoxXyxy;
use serde_json::Value;

fn raw_records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        _ => match serde_json::from_str(&text).unwrap() {
            Value::Array(items) => items,
            one => vec![one],
        },
    }
}

fn image_of(path: &Path, index: usize) -> ImageAnnotations {
    let mut sink = VecSink::default();
    gbc::read(path, &mut sink).unwrap();
    let Row::GbcGraph(row) = sink.rows.swap_remove(index) else {
        panic!("not a GBC row");
    };
    let mut image = ImageAnnotations::new(row.image_id.clone());
    image.gbc_graphs.push(row);
    image
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// Expected (text, boxes, labels) of every sample of a raw record, in vertex and caption order.
fn expected(record: &Value) -> Vec<(String, Vec<BoxXyxy>, Vec<String>)> {
    let (w, h) = match record.get("img_size").and_then(Value::as_array) {
        Some(s) => (f(&s[0]), f(&s[1])),
        None => (1.0, 1.0),
    };
    let vertices = record["vertices"].as_array().unwrap();
    let bbox = |v: &Value| {
        let b = &v["bbox"];
        BoxXyxy::new(
            f(&b["left"]) * w,
            f(&b["top"]) * h,
            f(&b["right"]) * w,
            f(&b["bottom"]) * h,
        )
    };
    let mut out = Vec::new();
    for v in vertices {
        let label = v["label"].as_str().unwrap();
        if label == "image" {
            continue;
        }
        let (boxes, labels): (Vec<BoxXyxy>, Vec<String>) = if label == "entity" {
            let name = v["in_edges"]
                .as_array()
                .and_then(|e| e.first())
                .map_or(v["vertex_id"].as_str().unwrap(), |e| {
                    e["text"].as_str().unwrap()
                });
            (vec![bbox(v)], vec![name.to_string()])
        } else {
            v["out_edges"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| {
                    let child = vertices.iter().find(|c| c["vertex_id"] == e["target"])?;
                    Some((bbox(child), e["text"].as_str().unwrap().to_string()))
                })
                .unzip()
        };
        for d in v["descs"].as_array().unwrap() {
            let kind = d["label"].as_str().unwrap();
            if kind == "hardcode" || kind == "bagofwords" {
                continue;
            }
            out.push((
                d["text"].as_str().unwrap().to_string(),
                boxes.clone(),
                labels.clone(),
            ));
        }
    }
    out
}

fn check_file(path: &Path) -> usize {
    let mut total = 0;
    for (i, record) in raw_records(path).iter().enumerate() {
        let image = image_of(path, i);
        let rows = samples(&image, &GbcSampleConfig::default(), 1);
        let want = expected(record);
        assert_eq!(rows.len(), want.len(), "{} record {i}", path.display());
        for (row, (text, boxes, labels)) in rows.iter().zip(&want) {
            assert_eq!(&row.text, text);
            assert_eq!(&row.control_boxes, boxes, "{}", row.sample_id);
            assert_eq!(&row.control_labels, labels, "{}", row.sample_id);
            assert_eq!(row.method, "gbc");
            let words = text
                .split_whitespace()
                .filter(|t| t.chars().any(char::is_alphanumeric))
                .count();
            assert_eq!(row.word_count as usize, words);
            assert_eq!(row.length_level, ((words / 10) as i32 + 1).min(13));
            assert!((0.0..=100.0).contains(&row.coverage));
        }
        // Sample ids are unique.
        let mut ids: Vec<&str> = rows.iter().map(|r| r.sample_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), rows.len());
        total += rows.len();
    }
    total
}

#[test]
fn fixture_captions_become_samples_with_their_boxes() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let mut total = 0;
    for name in [
        "gbc/wiki__wiki_gbc_graphs.jsonl",
        "gbc/wiki_pixtral_gdino__wiki_gbc_graphs.jsonl",
        "gbc/wiki_with_clip_scores__wiki_gbc_graphs_with_clip.jsonl",
        "gbc/prompt_gen__library_turtle_frog_steamponk.json",
    ] {
        total += check_file(&dir.join(name));
    }
    eprintln!("GBC fixtures: {total} samples");
    assert!(total > 300, "{total}");
}

#[test]
fn embedded_graphs_become_samples() {
    let path = common::repo_root().join("examples/data/gbc/sample_gbc.jsonl");
    assert!(check_file(&path) > 10);
}

#[test]
fn concat_sample_joins_every_caption() {
    let path = common::repo_root().join("examples/data/gbc/sample_gbc.jsonl");
    let image = image_of(&path, 0);
    let config = GbcSampleConfig {
        concat: ConcatSetting::On(true),
        ..GbcSampleConfig::default()
    };
    let rows = samples(&image, &config, 1);
    let concat = rows.last().unwrap();
    assert!(concat.sample_id.ends_with(":concat"));
    let every: usize = image.gbc_graphs[0]
        .vertices
        .iter()
        .flat_map(|v| &v.descs)
        .map(|d| d.text.split_whitespace().count())
        .sum();
    assert_eq!(concat.text.split_whitespace().count(), every);
}
