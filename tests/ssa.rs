//! SSA end to end: `capflow run dataflows/ssa-flickr30k.toml` on the embedded sample data.
//!
//! The samples' control signals are checked against what they claim to come from: word counts
//! and levels against the text, boxes against the image's grounded phrases and the sampled
//! subgraph, coverage against a pixel count. The dataset bytes must not depend on `-w`, and a
//! failing external model must fail the run without committing a dataset.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use capflow::export::{read_manifest, read_table};
use capflow::schema::{
    batch_to_rows, BoxXyxy, GroundingRow, ImageRow, SampleRow, TableKind, TableRow,
};

fn run(spec: &Path, out: &Path, workers: usize) -> Output {
    Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .args(["-w", &workers.to_string()])
        .output()
        .unwrap()
}

fn run_ok(out: &Path, workers: usize) {
    let output = run(Path::new("dataflows/ssa-flickr30k.toml"), out, workers);
    assert!(
        output.status.success(),
        "capflow run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn rows<R: TableRow>(dir: &Path, table: TableKind) -> Vec<R> {
    read_table(dir, table)
        .unwrap()
        .flat_map(|b| batch_to_rows::<R>(&b.unwrap()).unwrap())
        .collect()
}

/// Words as the control signal counts them: whitespace tokens with a letter or digit.
fn words(text: &str) -> usize {
    text.split_whitespace()
        .filter(|t| t.chars().any(|c| c.is_ascii_alphanumeric()))
        .count()
}

/// Percent of the `w × h` pixel grid whose pixel centres fall inside some box.
fn pixel_coverage(boxes: &[BoxXyxy], w: i32, h: i32) -> f64 {
    let mut covered = 0u64;
    for y in 0..h {
        for x in 0..w {
            let (cx, cy) = (x as f64 + 0.5, y as f64 + 0.5);
            if boxes
                .iter()
                .any(|b| cx > b.x1 && cx < b.x2 && cy > b.y1 && cy < b.y2)
            {
                covered += 1;
            }
        }
    }
    100.0 * covered as f64 / (w as f64 * h as f64)
}

#[test]
fn ssa_samples_agree_with_their_text_and_groundings() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ssa");
    run_ok(&out, 1);
    let manifest = read_manifest(&out).unwrap();
    for stage in [
        "read",
        "models",
        "gather",
        "amr-align",
        "merge",
        "event-sample",
        "realize",
        "quality-filter",
        "control-signals",
        "mix",
        "export",
    ] {
        assert!(
            manifest.stages.iter().any(|s| s.name == stage),
            "stage {stage} missing from the manifest"
        );
    }
    let mut sizes: HashMap<String, (i32, i32)> = HashMap::new();
    for i in rows::<ImageRow>(&out, TableKind::Images) {
        sizes.insert(i.image_id.clone(), (i.width.unwrap(), i.height.unwrap()));
    }
    let mut phrase_boxes: HashMap<String, Vec<BoxXyxy>> = HashMap::new();
    for g in rows::<GroundingRow>(&out, TableKind::Groundings) {
        phrase_boxes
            .entry(g.image_id.clone())
            .or_default()
            .extend(g.boxes.iter().copied());
    }
    let samples = rows::<SampleRow>(&out, TableKind::Samples);
    let ssa: Vec<_> = samples.iter().filter(|s| s.method == "ssa").collect();
    let originals = samples.iter().filter(|s| s.method == "original").count();
    assert_eq!(
        originals, 100,
        "every embedded caption is kept as an original sample"
    );
    assert!(
        ssa.len() >= 40,
        "only {} SSA samples from 20 images",
        ssa.len()
    );
    let mut per_image: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &ssa {
        *per_image.entry(s.image_id.as_str()).or_default() += 1;
        let n = words(&s.text);
        assert_eq!(s.word_count as usize, n, "{}: {:?}", s.sample_id, s.text);
        let level = match n {
            0 => 0,
            1..=9 => 1,
            10..=19 => 2,
            20..=29 => 3,
            30..=39 => 4,
            _ => 5,
        };
        assert_eq!(s.length_level, level, "{}", s.sample_id);
        // Every control box is a box of one of the image's grounded phrases.
        let image_boxes = &phrase_boxes[&s.image_id];
        for b in &s.control_boxes {
            assert!(
                image_boxes.contains(b),
                "{}: box {b:?} is not grounded",
                s.sample_id
            );
        }
        // Every control label names a node of the sampled subgraph, and a grounded subgraph
        // has as many boxes as it needs.
        let subgraph = s.provenance.subgraph.as_deref().unwrap();
        let graph = capflow::amr::penman::parse(subgraph).unwrap();
        let concepts: Vec<&str> = graph.instances().values().copied().collect();
        for label in &s.control_labels {
            assert!(
                concepts.contains(&label.as_str()),
                "{}: label {label}",
                s.sample_id
            );
        }
        assert_eq!(s.control_boxes.is_empty(), s.control_labels.is_empty());
        let (w, h) = sizes[&s.image_id];
        let expected = pixel_coverage(&s.control_boxes, w, h);
        // Boxes are whole pixels, so the pixel-centre count is exact up to float rounding.
        assert!(
            (s.coverage - expected).abs() < 1e-6,
            "{}: coverage {} vs {expected}",
            s.sample_id,
            s.coverage
        );
        assert!(!s.provenance.source_caption_ids.is_empty());
        assert!(s.quality.iter().all(|q| q.value > 0.7));
    }
    assert!(
        per_image.len() >= 15,
        "SSA samples for only {} of 20 images",
        per_image.len()
    );
    // No sentence twice per image, and none equal to an original caption of the image.
    let mut seen = std::collections::HashSet::new();
    for s in &samples {
        let key = (s.image_id.clone(), s.text.to_lowercase());
        assert!(seen.insert(key), "{} repeats a sentence", s.sample_id);
    }
}

#[test]
fn ssa_bytes_do_not_depend_on_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut datasets = Vec::new();
    for workers in [1, 2, 4] {
        let out = tmp.path().join(format!("w{workers}"));
        run_ok(&out, workers);
        let manifest = read_manifest(&out).unwrap();
        let files: BTreeMap<String, Vec<u8>> = manifest
            .files
            .iter()
            .map(|f| (f.path.clone(), std::fs::read(out.join(&f.path)).unwrap()))
            .collect();
        datasets.push((workers, files));
    }
    let (_, first) = &datasets[0];
    assert!(first.keys().any(|p| p.starts_with("data/train")));
    for (workers, files) in &datasets[1..] {
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            first.keys().collect::<Vec<_>>(),
            "-w {workers} wrote other files"
        );
        for (path, bytes) in files {
            assert!(
                bytes == &first[path],
                "-w {workers}: {path} differs from -w 1"
            );
        }
    }
}

/// A spec like ssa-flickr30k.toml whose realizer is the deterministic test adapter.
fn adapter_spec(dir: &Path, adapter_args: &[&str], timeout_secs: f64) -> Option<PathBuf> {
    let python = common::oracle_python()?;
    let root = common::repo_root();
    let script = root.join("tests/adapters/deterministic.py");
    let mut command = vec![
        python.display().to_string(),
        script.display().to_string(),
        "amr_to_text".to_string(),
    ];
    command.extend(adapter_args.iter().map(|s| s.to_string()));
    let quoted: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    let spec = format!(
        r#"name = "ssa-adapter"
seed = 0

[[inputs]]
format = "flickr30k-entities"
paths = [{flickr:?}]

[[inputs]]
format = "penman"
paths = [{amr:?}]

[ssa]
rules = "flickr"

[models.amr_to_text]
command = [{command}]
batch_timeout_secs = {timeout_secs}
startup_timeout_secs = 0
max_restarts = 0
"#,
        flickr = root
            .join("examples/data/flickr30k_entities")
            .display()
            .to_string(),
        amr = root
            .join("examples/data/amr/captions.amr")
            .display()
            .to_string(),
        command = quoted.join(", "),
    );
    let path = dir.join("spec.toml");
    std::fs::write(&path, spec).unwrap();
    Some(path)
}

fn assert_failed_without_dataset(output: &Output, out: &Path, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the run succeeded: {stderr}");
    assert!(
        stderr.contains("amr_to_text"),
        "adapter not named: {stderr}"
    );
    assert!(stderr.contains("image"), "batch not named: {stderr}");
    assert!(stderr.contains(needle), "reason not given: {stderr}");
    assert!(
        !out.join("manifest.json").exists(),
        "a dataset was committed after the adapter failed"
    );
}

#[test]
fn crashing_adapter_fails_the_run_and_commits_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    // Every event subgraph of image 1000001 is rooted at ride-01.
    let Some(spec) = adapter_spec(tmp.path(), &["--crash-on", "ride-01"], 60.0) else {
        return;
    };
    let out = tmp.path().join("out");
    let output = run(&spec, &out, 2);
    assert_failed_without_dataset(&output, &out, "crash");
}

#[test]
fn hanging_adapter_fails_the_run_and_commits_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(spec) = adapter_spec(tmp.path(), &["--hang-on", "ride-01"], 3.0) else {
        return;
    };
    let out = tmp.path().join("out");
    let output = run(&spec, &out, 1);
    assert_failed_without_dataset(&output, &out, "no reply within");
}

#[test]
fn random_mixing_keeps_the_asked_share_of_ssa_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let all = tmp.path().join("all");
    run_ok(&all, 1);
    let spec = std::fs::read_to_string(common::repo_root().join("dataflows/ssa-flickr30k.toml"))
        .unwrap()
        .replace(
            "strategy = \"all\"",
            "strategy = \"random\"\npercent = 50\nseed = 3",
        )
        .replace(
            "../examples",
            &common::repo_root().join("examples").display().to_string(),
        );
    let spec_path = tmp.path().join("half.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let half = tmp.path().join("half");
    let output = run(&spec_path, &half, 2);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let count = |dir: &Path, method: &str| {
        rows::<SampleRow>(dir, TableKind::Samples)
            .iter()
            .filter(|s| s.method == method)
            .count()
    };
    let n = count(&all, "ssa");
    // round(n / 2), halves up; every original stays.
    assert_eq!(count(&half, "ssa"), n.div_ceil(2));
    assert_eq!(count(&half, "original"), 100);
}

/// Percent of a `w × h` image inside the union of `boxes`, by inclusion–exclusion over the
/// distinct boxes (the intersection of boxes is a box).
fn union_coverage(boxes: &[BoxXyxy], w: i32, h: i32) -> f64 {
    let mut distinct: Vec<BoxXyxy> = Vec::new();
    for b in boxes {
        if !distinct.contains(b) {
            distinct.push(*b);
        }
    }
    assert!(
        distinct.len() < 16,
        "too many boxes for inclusion–exclusion"
    );
    let mut area = 0.0;
    for subset in 1u32..(1 << distinct.len()) {
        let members: Vec<&BoxXyxy> = (0..distinct.len())
            .filter(|i| subset & (1 << i) != 0)
            .map(|i| &distinct[i])
            .collect();
        let x1 = members.iter().map(|b| b.x1).fold(f64::MIN, f64::max);
        let y1 = members.iter().map(|b| b.y1).fold(f64::MIN, f64::max);
        let x2 = members.iter().map(|b| b.x2).fold(f64::MAX, f64::min);
        let y2 = members.iter().map(|b| b.y2).fold(f64::MAX, f64::min);
        let sign = if members.len() % 2 == 1 { 1.0 } else { -1.0 };
        area += sign * (x2 - x1).max(0.0) * (y2 - y1).max(0.0);
    }
    100.0 * area / (w as f64 * h as f64)
}

/// `dataflows/ssa-coco.toml`: the COCO-format sample data (COCO Entities classes, COCO merge
/// rules). Image sizes come from the captions file, captions and groundings from COCO Entities,
/// and the AMRs must find their captions by id.
#[test]
fn ssa_coco_recipe_grounds_samples_in_class_detections() {
    use capflow::schema::{AmrRow, CaptionRow};
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for workers in [1, 2] {
        let out = tmp.path().join(format!("w{workers}"));
        let output = run(Path::new("dataflows/ssa-coco.toml"), &out, workers);
        assert!(
            output.status.success(),
            "capflow run failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let manifest = read_manifest(&out).unwrap();
        let bytes: BTreeMap<String, Vec<u8>> = manifest
            .files
            .iter()
            .map(|f| (f.path.clone(), std::fs::read(out.join(&f.path)).unwrap()))
            .collect();
        files.push(bytes);
    }
    assert!(files[0] == files[1], "-w 2 wrote other bytes than -w 1");
    let out = tmp.path().join("w1");

    // Splits as the sample data lists them.
    let mut split_of: HashMap<String, String> = HashMap::new();
    for split in ["train", "val", "test"] {
        let list =
            common::repo_root().join(format!("examples/data/flickr30k_entities/{split}.txt"));
        for id in std::fs::read_to_string(list).unwrap().split_whitespace() {
            split_of.insert(id.to_string(), split.to_string());
        }
    }
    let sizes: HashMap<String, (i32, i32)> = rows::<ImageRow>(&out, TableKind::Images)
        .into_iter()
        .map(|i| (i.image_id.clone(), (i.width.unwrap(), i.height.unwrap())))
        .collect();
    assert_eq!(sizes.len(), 20);
    // Only COCO Entities' captions: `tables = ["images"]` keeps the captions file's out.
    let captions = rows::<CaptionRow>(&out, TableKind::Captions);
    assert_eq!(captions.len(), 100);
    let caption_ids: std::collections::HashSet<String> =
        captions.iter().map(|c| c.caption_id.clone()).collect();
    for amr in rows::<AmrRow>(&out, TableKind::Amrs) {
        let id = amr.caption_id.unwrap_or_default();
        assert!(
            caption_ids.contains(&id),
            "AMR {} has no caption",
            amr.graph_id
        );
    }
    let mut class_boxes: HashMap<String, Vec<BoxXyxy>> = HashMap::new();
    for g in rows::<GroundingRow>(&out, TableKind::Groundings) {
        class_boxes
            .entry(g.image_id.clone())
            .or_default()
            .extend(g.boxes.iter().copied());
    }
    let samples = rows::<SampleRow>(&out, TableKind::Samples);
    assert_eq!(
        samples.iter().filter(|s| s.method == "original").count(),
        100
    );
    let ssa: Vec<_> = samples.iter().filter(|s| s.method == "ssa").collect();
    assert!(ssa.len() >= 30, "only {} SSA samples", ssa.len());
    let images: std::collections::BTreeSet<&str> =
        ssa.iter().map(|s| s.image_id.as_str()).collect();
    assert!(
        images.len() >= 12,
        "SSA samples for only {} images",
        images.len()
    );
    for s in &ssa {
        assert_eq!(s.split, split_of[&s.image_id], "{}", s.sample_id);
        // Fully grounded: every sample has boxes, and each is a class detection of its image.
        assert!(!s.control_boxes.is_empty(), "{} has no boxes", s.sample_id);
        for b in &s.control_boxes {
            assert!(
                class_boxes[&s.image_id].contains(b),
                "{}: box {b:?} is not a detection of the image",
                s.sample_id
            );
        }
        let (w, h) = sizes[&s.image_id];
        let expected = union_coverage(&s.control_boxes, w, h);
        assert!(
            (s.coverage - expected).abs() < 1e-6,
            "{}: coverage {} vs {expected}",
            s.sample_id,
            s.coverage
        );
        assert_eq!(s.word_count as usize, words(&s.text), "{}", s.sample_id);
        for id in &s.provenance.source_caption_ids {
            assert!(caption_ids.contains(id), "{}: source {id}", s.sample_id);
        }
    }
}

/// The committed COCO-format sample files are what `examples/data/tools/coco.py` derives from
/// the rest of the sample data.
#[test]
fn coco_sample_files_are_regenerated_exactly() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let root = common::repo_root();
    let tmp = tempfile::tempdir().unwrap();
    let output = Command::new(python)
        .arg(root.join("examples/data/tools/coco.py"))
        .arg("--out")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for name in ["captions.json", "coco_entities.json", "captions.amr"] {
        let committed = std::fs::read(root.join("examples/data/coco").join(name)).unwrap();
        let derived = std::fs::read(tmp.path().join(name)).unwrap();
        assert!(
            committed == derived,
            "examples/data/coco/{name} is stale: rerun examples/data/tools/coco.py"
        );
    }
}
