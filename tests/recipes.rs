//! The method recipes under `dataflows/` end to end on the embedded sample data: each runs with
//! one and two workers, writes samples of its method that agree with the input they come from
//! (read here independently, straight from the source files), and the dataset's data files are
//! byte-identical for both worker counts.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::export::read_table;
use capflow::schema::{batch_to_rows, CaptionRow, SampleRow, TableKind, TableRow};
use serde_json::Value;

/// Runs `dataflows/<recipe>.toml` with `workers` workers into `out`.
fn run(recipe: &str, out: &Path, workers: usize) {
    let output = Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .arg("run")
        .arg(format!("dataflows/{recipe}.toml"))
        .arg("--out")
        .arg(out)
        .args(["-w", &workers.to_string()])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "capflow run {recipe} -w {workers} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn rows<R: TableRow>(dir: &Path, table: TableKind) -> Vec<R> {
    read_table(dir, table)
        .unwrap()
        .flat_map(|b| batch_to_rows::<R>(&b.unwrap()).unwrap())
        .collect()
}

/// Every file under `dir/data`, by relative path, with its bytes.
fn data_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.join("data")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(path.strip_prefix(dir).unwrap().to_path_buf(), bytes);
            }
        }
    }
    files
}

/// Runs a recipe with 1 and 2 workers, checks the data files are equal, returns the samples.
fn run_both(recipe: &str) -> (tempfile::TempDir, Vec<SampleRow>) {
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("w1");
    let two = tmp.path().join("w2");
    run(recipe, &one, 1);
    run(recipe, &two, 2);
    let (a, b) = (data_files(&one), data_files(&two));
    assert!(!a.is_empty(), "{recipe}: no data files");
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{recipe}: different data files for -w 1 and -w 2"
    );
    for (path, bytes) in &a {
        assert!(
            b[path] == *bytes,
            "{recipe}: {} differs between -w 1 and -w 2",
            path.display()
        );
    }
    let samples = rows::<SampleRow>(&one, TableKind::Samples);
    (tmp, samples)
}

/// Words as the control signal counts them: whitespace tokens with a letter or digit.
fn words(text: &str) -> usize {
    text.split_whitespace()
        .filter(|t| t.chars().any(|c| c.is_ascii_alphanumeric()))
        .count()
}

fn methods(samples: &[SampleRow]) -> BTreeSet<&str> {
    samples.iter().map(|s| s.method.as_str()).collect()
}

fn read_json(relative: &str) -> Value {
    let path = common::repo_root().join("examples/data").join(relative);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn clid_recipe_writes_varying_length_captions_of_the_scene_graphs() {
    let (_tmp, samples) = run_both("clid-vg");
    assert_eq!(methods(&samples), BTreeSet::from(["clid"]));
    // Object boxes of every scene graph, as x1 y1 x2 y2 from VG's x, y, w, h.
    let graphs = read_json("visual_genome/scene_graphs.json");
    let mut boxes: HashMap<String, Vec<[f64; 4]>> = HashMap::new();
    for graph in graphs.as_array().unwrap() {
        let id = graph["image_id"].to_string();
        for o in graph["objects"].as_array().unwrap() {
            let f = |k: &str| o[k].as_f64().unwrap();
            boxes.entry(id.clone()).or_default().push([
                f("x"),
                f("y"),
                f("x") + f("w"),
                f("y") + f("h"),
            ]);
        }
    }
    assert!(samples.len() >= boxes.len(), "{} samples", samples.len());
    let mut levels = BTreeSet::new();
    for s in &samples {
        let n = words(&s.text);
        assert_eq!(s.word_count as usize, n, "{}", s.sample_id);
        assert_eq!(s.length_level as usize, n / 10 + 1, "{}", s.sample_id);
        levels.insert(s.length_level);
        let image_boxes = &boxes[&s.image_id];
        assert!(!s.control_boxes.is_empty(), "{}", s.sample_id);
        for b in &s.control_boxes {
            assert!(
                image_boxes.contains(&[b.x1, b.y1, b.x2, b.y2]),
                "{}: box {b:?} is no object of the scene graph",
                s.sample_id
            );
        }
    }
    assert!(levels.len() >= 2, "one length level only: {levels:?}");
}

#[test]
fn gbc_recipe_writes_one_sample_per_kept_vertex_caption() {
    let (_tmp, samples) = run_both("gbc");
    assert_eq!(methods(&samples), BTreeSet::from(["gbc"]));
    // The recipe keeps entity, composition and relation captions but template and word-list ones.
    let path = common::repo_root().join("examples/data/gbc/sample_gbc.jsonl");
    let mut expected: Vec<String> = Vec::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let graph: Value = serde_json::from_str(line).unwrap();
        for v in graph["vertices"].as_array().unwrap() {
            if !["entity", "composition", "relation"].contains(&v["label"].as_str().unwrap()) {
                continue;
            }
            for d in v["descs"].as_array().unwrap() {
                if !["hardcode", "bagofwords"].contains(&d["label"].as_str().unwrap()) {
                    expected.push(d["text"].as_str().unwrap().to_string());
                }
            }
        }
    }
    let mut got: Vec<String> = samples.iter().map(|s| s.text.clone()).collect();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
}

#[test]
fn relatedness_recipe_ranks_every_caption_of_an_image() {
    let (tmp, samples) = run_both("relatedness");
    assert_eq!(methods(&samples), BTreeSet::from(["relatedness"]));
    let captions = rows::<CaptionRow>(&tmp.path().join("w1"), TableKind::Captions);
    let mut texts: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for c in &captions {
        texts.entry(&c.image_id).or_default().insert(&c.text);
    }
    let mut per_image: BTreeMap<&str, Vec<&SampleRow>> = BTreeMap::new();
    for s in &samples {
        per_image.entry(&s.image_id).or_default().push(s);
    }
    assert!(!per_image.is_empty());
    for (image, image_samples) in per_image {
        let got: BTreeSet<&str> = image_samples.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(got, texts[image], "{image}: samples are not its captions");
        let mut ranks: Vec<f64> = image_samples
            .iter()
            .map(|s| {
                s.quality
                    .iter()
                    .find(|q| q.name == "relatedness_rank")
                    .unwrap()
                    .value
            })
            .collect();
        ranks.sort_by(f64::total_cmp);
        let expected: Vec<f64> = (1..=image_samples.len()).map(|r| r as f64).collect();
        assert_eq!(ranks, expected, "{image}");
    }
}

#[test]
fn cutswap_recipe_keeps_originals_first_and_changes_every_swapped_caption() {
    let (tmp, samples) = run_both("cutswap");
    assert_eq!(methods(&samples), BTreeSet::from(["cutswap", "original"]));
    let captions = rows::<CaptionRow>(&tmp.path().join("w1"), TableKind::Captions);
    let originals: Vec<&SampleRow> = samples.iter().filter(|s| s.method == "original").collect();
    assert_eq!(originals.len(), captions.len());
    let by_id: HashMap<&str, &CaptionRow> = captions
        .iter()
        .map(|c| (c.caption_id.as_str(), c))
        .collect();
    let mut seen_swap: BTreeSet<&str> = BTreeSet::new();
    for s in &samples {
        match s.method.as_str() {
            "original" => assert!(
                !seen_swap.contains(s.image_id.as_str()),
                "{}: an original after a swap of its image",
                s.sample_id
            ),
            _ => {
                seen_swap.insert(&s.image_id);
                let source = s.provenance.source_caption_ids[0]
                    .split('#')
                    .take(2)
                    .collect::<Vec<_>>()
                    .join("#");
                let caption = by_id[source.as_str()];
                assert_eq!(caption.image_id, s.image_id);
                assert_ne!(caption.text, s.text, "{}: nothing swapped", s.sample_id);
                assert_eq!(s.word_count as usize, words(&s.text), "{}", s.sample_id);
            }
        }
    }
    assert!(
        seen_swap.len() >= 5,
        "swaps in {} images only",
        seen_swap.len()
    );
}
