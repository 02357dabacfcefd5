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

/// Every Parquet file under `dir/data` (shards and change data files), by relative path, with
/// its bytes. The Delta Lake logs record commit times and are left out.
fn data_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.join("data")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.ends_with("_delta_log") {
                continue;
            }
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

#[test]
fn gbc_filtered_recipe_filters_cuts_and_concatenates_as_ml_gbc() {
    let (_tmp, samples) = run_both("gbc-filtered");
    assert_eq!(methods(&samples), BTreeSet::from(["gbc"]));
    let graphs: Vec<Value> =
        std::fs::read_to_string(common::repo_root().join("examples/data/gbc/sample_gbc.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let caption = |g: usize, id: &str, k: usize| -> String {
        let v = graphs[g]["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["vertex_id"] == id)
            .unwrap();
        v["descs"][k]["text"].as_str().unwrap().to_string()
    };
    // Without detail captions every entity goes (none has a child left to keep it); filtering
    // adds bag-of-words captions where the image's short caption or a relation's caption misses
    // an edge text ("dogs, trees"; "people"). The first three vertices in BFS order are the
    // image and its first two children; concat walks them depth-first.
    let image = |g: usize| caption(g, "", 1);
    let expected_vertex_samples = [
        caption(0, "[dog|frisbee]", 0),
        caption(0, "[dog|man]", 0),
        caption(1, "dogs", 0),
        caption(1, "[dogs|trees]", 0),
        caption(2, "people", 0),
        caption(2, "[blanket|people]", 0),
        caption(3, "men", 0),
        caption(3, "[boat|men]", 0),
    ];
    let expected_concat = [
        [
            image(0),
            caption(0, "[dog|frisbee]", 0),
            caption(0, "[dog|man]", 0),
        ]
        .join(" | "),
        [
            image(1),
            "dogs, trees".into(),
            caption(1, "dogs", 0),
            caption(1, "[dogs|trees]", 0),
        ]
        .join(" | "),
        [
            image(2),
            "people".into(),
            caption(2, "people", 0),
            caption(2, "[blanket|people]", 0),
            "people".into(),
        ]
        .join(" | "),
        [image(3), caption(3, "men", 0), caption(3, "[boat|men]", 0)].join(" | "),
    ];
    let (concat, vertex): (Vec<&SampleRow>, Vec<&SampleRow>) = samples
        .iter()
        .partition(|s| s.sample_id.ends_with(":concat"));
    let mut got: Vec<&str> = vertex.iter().map(|s| s.text.as_str()).collect();
    let mut expected: Vec<&str> = expected_vertex_samples.iter().map(String::as_str).collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    let mut got: Vec<&str> = concat.iter().map(|s| s.text.as_str()).collect();
    got.sort();
    let mut expected: Vec<&str> = expected_concat.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(got, expected);
    assert!(concat
        .iter()
        .all(|s| s.provenance.subgraph.as_deref() == Some("dfs")));
}

/// Control boxes of the relatedness samples of a run of `relatedness.toml` with `extra` appended
/// (input paths made absolute).
fn relatedness_boxes(extra: &str) -> Vec<[f64; 4]> {
    let tmp = tempfile::tempdir().unwrap();
    let recipe = std::fs::read_to_string(common::repo_root().join("dataflows/relatedness.toml"))
        .unwrap()
        .replace(
            "\"../examples",
            &format!("\"{}/examples", common::repo_root().display()),
        );
    let spec = tmp.path().join("relatedness.toml");
    std::fs::write(&spec, format!("{recipe}\n{extra}\n")).unwrap();
    let out = tmp.path().join("out");
    let run = Command::new(common::capflow_bin())
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    rows::<SampleRow>(&out, TableKind::Samples)
        .iter()
        .flat_map(|s| s.control_boxes.iter().map(|b| [b.x1, b.y1, b.x2, b.y2]))
        .collect()
}

#[test]
fn detections_table_post_processes_what_relatedness_reads() {
    let area = |b: &[f64; 4]| (b[2] - b[0]) * (b[3] - b[1]);
    let plain = relatedness_boxes("");
    assert!(
        plain.iter().any(|b| area(b) <= 20000.0),
        "the test needs a context box of at most 20000 px"
    );
    // Only the area filter: every other step set to pass everything.
    let filtered = relatedness_boxes(
        "[detections]\nscore_threshold = 0.0\nmin_abs_area = 20000\nnms_single = 1.0\n\
         nms_multiple = 1.0\ncontained = \"keep\"\nhigh_conf_tolerance = 1.0\ntop_k = 1000",
    );
    assert!(!filtered.is_empty());
    for b in &filtered {
        assert!(area(b) > 20000.0, "{b:?} is below min_abs_area");
    }
}

#[test]
fn documented_detections_table_is_the_papers_and_runs() {
    let doc = std::fs::read_to_string(common::repo_root().join("docs/gbc.md")).unwrap();
    let block = doc
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.starts_with("[detections]"))
        .expect("docs/gbc.md has a [detections] example");
    // The GBC paper, App. B.2: confidence 0.05, at most six boxes, regions above 5000 px, NMS
    // 0.05 for [single] and 0.2 for [multiple].
    let table: toml::Value = toml::from_str(block).unwrap();
    let d = &table["detections"];
    assert_eq!(d["score_threshold"].as_float(), Some(0.05));
    assert_eq!(d["top_k"].as_integer(), Some(6));
    assert_eq!(d["min_abs_area"].as_float(), Some(5000.0));
    assert_eq!(d["nms_single"].as_float(), Some(0.05));
    assert_eq!(d["nms_multiple"].as_float(), Some(0.2));
    let parsed: capflow::augment::detections::DetectionFilter = d.clone().try_into().unwrap();
    assert_eq!(
        parsed,
        capflow::augment::detections::DetectionFilter::default()
    );
    assert!(!relatedness_boxes(block).is_empty());
}

#[test]
fn bad_detections_and_gbc_tables_are_refused_with_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let recipe = std::fs::read_to_string(common::repo_root().join("dataflows/gbc.toml"))
        .unwrap()
        .replace(
            "\"../examples",
            &format!("\"{}/examples", common::repo_root().display()),
        );
    for (extra, key) in [
        ("[detections]\nnms_single = 2.0", "nms_single"),
        ("[detections]\nscore_treshold = 0.1", "score_treshold"),
        (
            "[gbc.subgraph]\nmode = \"random\"\nroot_id = \"man\"",
            "root_id",
        ),
        (
            "[gbc.filter]\nrandom_filtering_probs = { detail = -1.0 }",
            "detail",
        ),
        (
            "[gbc.filter]\nmin_clip_score = { detail = 0.2 }",
            "min_clip_score",
        ),
    ] {
        let spec = tmp.path().join("bad.toml");
        std::fs::write(&spec, format!("{recipe}\n{extra}\n")).unwrap();
        let run = Command::new(common::capflow_bin())
            .arg("run")
            .arg(&spec)
            .arg("--out")
            .arg(tmp.path().join("out"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{extra}: {stderr}");
        assert!(stderr.contains(key), "{extra}: {stderr}");
    }
}
