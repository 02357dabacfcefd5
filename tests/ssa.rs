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
        // SSA never writes a sample without control boxes (`no control box`).
        assert!(!s.control_boxes.is_empty(), "{} has no boxes", s.sample_id);
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
    assert!(first.keys().any(|p| p.starts_with("data/samples/train")));
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
/// The manifest names why SSA's sentences were dropped: every sentence the quality filter did
/// not pass is under one reason, the same for any number of workers, and the run summary prints
/// the same reasons.
#[test]
fn the_manifest_counts_ssa_drops_by_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for workers in [1, 3] {
        let out = tmp.path().join(format!("w{workers}"));
        let output = run(Path::new("dataflows/ssa-flickr30k.toml"), &out, workers);
        assert!(output.status.success());
        let manifest = read_manifest(&out).unwrap();
        let ssa = &manifest.dropped["ssa"];
        let stage = |name: &str| manifest.stages.iter().find(|s| s.name == name).unwrap();
        let filter = stage("quality-filter");
        assert_eq!(ssa.values().sum::<u64>(), filter.rejected, "{ssa:?}");
        assert_eq!(filter.rows_in, filter.rows_out + filter.rejected);
        assert!(
            ssa.contains_key("quality score at or below the threshold"),
            "{ssa:?}"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        for (reason, n) in ssa {
            assert!(
                stderr.contains(&format!("{n} {reason}")),
                "{reason}: {stderr}"
            );
        }
        seen.push(ssa.clone());
    }
    assert_eq!(seen[0], seen[1]);
}

/// SSA on captions without AMRs, told not to parse them, writes only the original captions;
/// the run says so, naming the cause, and every image gets a ledger record, instead of ending
/// quietly with no SSA sample.
#[test]
fn ssa_without_caption_amrs_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("no-amrs.toml");
    let data = common::repo_root().join("examples/data/flickr30k_entities");
    std::fs::write(
        &spec,
        format!(
            "name = \"no-amrs\"\n[[inputs]]\nformat = \"flickr30k-entities\"\npaths = [{:?}]\n\
             [ssa]\nrules = \"flickr\"\ninclude_originals = true\nparse_captions = \"never\"\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let output = run(&spec, &out, 1);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "warning: ssa: its first stage `amr-align` received nothing from the run's 20 images"
        ) && stderr.contains("no caption AMRs")
            && stderr.contains("parse_captions = \"never\""),
        "{stderr}"
    );
    let manifest = read_manifest(&out).unwrap();
    let align = manifest
        .stages
        .iter()
        .find(|s| s.name == "amr-align")
        .unwrap();
    assert_eq!(align.rows_in, 0);
    // Each of the 20 images, with its 5 captions and no AMR, is in the ledger.
    let ledger: Vec<capflow::schema::RejectedRow> = rows(&out, TableKind::Rejected);
    let no_amr: Vec<_> = ledger
        .iter()
        .filter(|r| r.reason.contains("captions have no AMR"))
        .collect();
    assert_eq!(no_amr.len(), 20, "{ledger:?}");
    assert!(no_amr
        .iter()
        .all(|r| r.reason.contains("the image's 5 captions")));
    // With the AMRs, no warning.
    let with = run(
        Path::new("dataflows/ssa-flickr30k.toml"),
        &tmp.path().join("with"),
        1,
    );
    assert!(!String::from_utf8_lossy(&with.stderr).contains("warning: ssa"));
}

fn adapter_spec(dir: &Path, adapter_args: &[&str], timeout_secs: f64) -> Option<PathBuf> {
    let python = common::oracle_python()?;
    let root = common::repo_root();
    let mut args = vec!["amr_to_text"];
    args.extend_from_slice(adapter_args);
    let command = common::stand_in(&python, &args);
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
command = {command}
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

/// Runs `spec` as two loopback processes writing `out`; their exit codes (fails the test after
/// 120 s).
fn run_two_processes(spec: &Path, out: &Path, dir: &Path) -> [Option<i32>; 2] {
    // Tests of one binary run at once: each call its own ports.
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let port = 40000 + (std::process::id() % 1000) as u16 * 20 + call * 2;
    let hosts = dir.join(format!("hosts-{port}"));
    std::fs::write(
        &hosts,
        format!("127.0.0.1:{port}\n127.0.0.1:{}\n", port + 1),
    )
    .unwrap();
    let mut processes: Vec<std::process::Child> = (0..2)
        .map(|p| {
            Command::new(common::capflow_bin())
                .arg("run")
                .arg(spec)
                .arg("--out")
                .arg(out)
                .args(["-n", "2", "-p", &p.to_string(), "--hostfile"])
                .arg(&hosts)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut codes = [None, None];
    while codes.iter().any(Option::is_none) {
        for (p, child) in processes.iter_mut().enumerate() {
            if codes[p].is_none() {
                codes[p] = child.try_wait().unwrap().map(|s| s.code());
            }
        }
        if std::time::Instant::now() > deadline {
            for child in &mut processes {
                let _ = child.kill();
            }
            panic!("the processes did not end within 120 s: {codes:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    codes.map(Option::flatten)
}

/// With a selecting `[mix]`, every worker waits for every other's tally of its samples before
/// writing them: a run whose stage fails on both processes of a cluster still ends, with the
/// adapter's exit code, and commits nothing.
#[test]
fn a_failing_stage_under_a_selecting_mix_ends_every_process() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(spec) = adapter_spec(tmp.path(), &["--crash-on", "ride-01"], 60.0) else {
        return;
    };
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(
        &spec,
        text.replace(
            "[ssa]",
            "[mix]\nstrategy = \"random\"\npercent = 50\n\n[ssa]",
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let codes = run_two_processes(&spec, &out, tmp.path());
    // Both processes' buckets hold an image whose subgraphs the adapter crashes on.
    assert_eq!(codes, [Some(5), Some(5)]);
    assert!(!out.join("manifest.json").exists());
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

/// The recipe with its `[mix]` table replaced by `mix`, written to `dir/name.toml`.
fn mixed_recipe(dir: &Path, name: &str, mix: &str) -> PathBuf {
    let spec = std::fs::read_to_string(common::repo_root().join("dataflows/ssa-flickr30k.toml"))
        .unwrap()
        .replace("strategy = \"all\"", mix)
        .replace(
            "../examples",
            &common::repo_root().join("examples").display().to_string(),
        );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, spec).unwrap();
    path
}

#[test]
fn random_mixing_keeps_the_asked_share_of_ssa_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let all = tmp.path().join("all");
    run_ok(&all, 1);
    let spec_path = mixed_recipe(
        tmp.path(),
        "half",
        "strategy = \"random\"\npercent = 50\nseed = 3",
    );
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

/// A run with a selecting `[mix]` keeps, chunk by chunk and in the same order, exactly the
/// samples `select::mix::select` keeps of the unmixed run's samples, and every other table
/// holds the unmixed run's rows; the same files with any number of workers, and with a state
/// (whose rerun computes every image and commits nothing new).
#[test]
fn a_mixed_run_keeps_what_the_selection_keeps_of_the_unmixed_samples() {
    use capflow::select::mix::{select, MixConfig};
    let tmp = tempfile::tempdir().unwrap();
    let all = tmp.path().join("all");
    run_ok(&all, 1);
    let unmixed = rows::<SampleRow>(&all, TableKind::Samples);
    let mixes = [
        (
            "random",
            "strategy = \"random\"\npercent = 30\nseed = 11",
            MixConfig::Random {
                percent: 30.0,
                seed: 11,
            },
        ),
        (
            "uniform",
            "strategy = \"uniform-coverage\"\nbins = 10\npercent = 40\nseed = 4",
            MixConfig::UniformCoverage {
                bins: 10,
                percent: Some(40.0),
                seed: 4,
            },
        ),
    ];
    // Files carry the configuration's hash: the other tables are compared by their rows.
    let not_samples = |dir: &Path| {
        TableKind::ALL
            .into_iter()
            .filter(|t| *t != TableKind::Samples)
            .map(|t| {
                read_table(dir, t)
                    .unwrap()
                    .map(|b| b.unwrap())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    for (name, table, config) in mixes {
        let spec = mixed_recipe(tmp.path(), name, table);
        let kept: Vec<SampleRow> = select(&unmixed, &config)
            .unwrap()
            .into_iter()
            .map(|i| unmixed[i].clone())
            .collect();
        assert!(kept.len() < unmixed.len() && kept.iter().any(|s| s.method == "ssa"));
        // The manifest's `mix` stage: every sample in, the kept ones out.
        let assert_mix_counts = |out: &Path| {
            let manifest = read_manifest(out).unwrap();
            let mix = manifest.stages.iter().find(|s| s.name == "mix").unwrap();
            assert_eq!(
                (mix.rows_in, mix.rows_out),
                (unmixed.len() as u64, kept.len() as u64)
            );
        };
        let mut digests = Vec::new();
        for workers in [1, 2] {
            let out = tmp.path().join(format!("{name}-w{workers}"));
            let output = run(&spec, &out, workers);
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert_eq!(rows::<SampleRow>(&out, TableKind::Samples), kept, "{name}");
            assert!(
                not_samples(&out) == not_samples(&all),
                "{name}: other tables differ"
            );
            assert_mix_counts(&out);
            digests.push(common::data_files(&out));
        }
        assert!(digests[0] == digests[1], "{name}: -w 1 and -w 2 differ");
        // Two processes: the same files, and the plan's counts once, not once per process.
        let out = tmp.path().join(format!("{name}-p2"));
        assert_eq!(
            run_two_processes(&spec, &out, tmp.path()),
            [Some(0), Some(0)]
        );
        assert!(
            common::data_files(&out) == digests[0],
            "{name}: 2 processes differ"
        );
        assert_mix_counts(&out);
        // With a state: the same files, and a rerun computes every image (a changed image
        // could change any bucket's selection) but has nothing to commit.
        let out = tmp.path().join(format!("{name}-state"));
        let state = tmp.path().join(format!("{name}-state-dir"));
        for _ in 0..2 {
            let output = Command::new(common::capflow_bin())
                .arg("run")
                .arg(&spec)
                .arg("--out")
                .arg(&out)
                .arg("--state")
                .arg(&state)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{stderr}");
        }
        assert_eq!(read_manifest(&out).unwrap().version, 1);
        assert!(
            common::data_files(&out) == digests[0],
            "{name}: --state differs"
        );
    }
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
    // The lists `val.txt` names the `validation` split.
    for (list, split) in [("train", "train"), ("val", "validation"), ("test", "test")] {
        let list = common::repo_root().join(format!("examples/data/flickr30k_entities/{list}.txt"));
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

/// A caption row of image `1`.
fn caption(k: i32, text: &str) -> capflow::schema::CaptionRow {
    capflow::schema::CaptionRow {
        image_id: "1".into(),
        caption_id: format!("1#{k}"),
        dataset: "flickr30k-entities".into(),
        split: "train".into(),
        caption_index: k,
        text: text.into(),
    }
}

/// A phrase of caption `1#k` over its whitespace tokens `[start, end)`, with one box.
fn phrase(k: i32, id: &str, text: &str, start: i32, end: i32, b: BoxXyxy) -> GroundingRow {
    GroundingRow {
        image_id: "1".into(),
        caption_id: format!("1#{k}"),
        phrase_id: id.into(),
        phrase: text.into(),
        phrase_types: vec!["other".into()],
        token_start: start,
        token_end: end,
        boxes: vec![b],
        is_scene: false,
        no_box: false,
        not_visual: false,
    }
}

/// The AMR of caption `1#k`, as the PENMAN reader gives it.
fn amr(k: i32, penman: &str) -> capflow::schema::AmrRow {
    let graph = capflow::amr::penman::parse(penman).unwrap();
    capflow::schema::AmrRow {
        image_id: "1".into(),
        graph_id: format!("1.{k}"),
        caption_id: None,
        sentence: graph.meta("snt").map(str::to_string),
        tokens: None,
        alignment_flavour: capflow::amr::penman::alignment_flavour(&graph)
            .as_str()
            .into(),
        metadata: Vec::new(),
        penman: penman.into(),
    }
}

/// Every `~e.N` / `~e.N,M` marker removed.
fn strip_alignments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("~e.") {
        out.push_str(&rest[..at]);
        rest = rest[at + 3..].trim_start_matches(|c: char| c.is_ascii_digit() || c == ',');
    }
    out.push_str(rest);
    out
}

/// Caption AMRs without alignments (as amrlib or SPRING write them) are aligned by the built-in
/// aligner and grounded exactly as the same graphs with hand-written ISI alignments, also where
/// the sentence's tokens are not the caption's whitespace tokens (`grass.`, `dog's`).
#[test]
fn unaligned_amrs_are_grounded_like_hand_aligned_ones() {
    use capflow::amr::align::ModifierLexicon;
    use capflow::augment::ssa::align;
    use capflow::augment::ImageAnnotations;

    let dog = BoxXyxy::new(10.0, 20.0, 60.0, 80.0);
    let grass = BoxXyxy::new(0.0, 50.0, 200.0, 100.0);
    let ball = BoxXyxy::new(30.0, 60.0, 40.0, 70.0);
    let image = |amrs: Vec<capflow::schema::AmrRow>| {
        let mut image = ImageAnnotations::new("1");
        image.captions = vec![
            caption(0, "A dog runs on the grass ."),
            caption(1, "A dog runs on the grass."),
            caption(2, "The dog's ball is on the grass."),
        ];
        image.groundings = vec![
            phrase(0, "1", "A dog", 0, 2, dog),
            phrase(0, "2", "the grass", 4, 6, grass),
            phrase(1, "1", "A dog", 0, 2, dog),
            phrase(1, "2", "the grass.", 4, 6, grass),
            phrase(2, "3", "The dog's ball", 0, 3, ball),
            phrase(2, "2", "the grass.", 5, 7, grass),
        ];
        image.amrs = amrs;
        image
    };
    // Hand-aligned over ISI-style tokens: `A dog runs on the grass .` and
    // `The dog 's ball is on the grass .`.
    let runs = "(r / run-02~e.2 :ARG0 (d / dog~e.1) :location (g / grass~e.5))";
    let ball_graph = "(b / ball~e.3 :poss (d / dog~e.1) :location (g / grass~e.7))";
    let aligned = [
        format!("# ::id 1.0\n# ::snt A dog runs on the grass .\n# ::tok A dog runs on the grass .\n{runs}"),
        format!("# ::id 1.1\n# ::snt A dog runs on the grass.\n# ::tok A dog runs on the grass .\n{runs}"),
        format!("# ::id 1.2\n# ::snt The dog's ball is on the grass.\n# ::tok The dog 's ball is on the grass .\n{ball_graph}"),
    ];
    // What a parser without alignments writes: with `# ::tok`, with `# ::snt` only, with no
    // sentence at all (the caption's text is aligned).
    let unaligned = [
        strip_alignments(&aligned[0]),
        format!(
            "# ::id 1.1\n# ::snt A dog runs on the grass.\n{}",
            strip_alignments(runs)
        ),
        format!("# ::id 1.2\n{}", strip_alignments(ball_graph)),
    ];
    for text in &unaligned {
        assert!(!text.contains('~'), "{text}");
    }
    let lexicon = ModifierLexicon::wordnet();
    let rows = |texts: &[String]| -> Vec<_> {
        texts
            .iter()
            .enumerate()
            .map(|(k, t)| amr(k as i32, t))
            .collect()
    };
    let by_hand = align(&image(rows(&aligned)), lexicon);
    let automatic = align(&image(rows(&unaligned)), lexicon);
    assert_eq!(by_hand.token_aligned, 0);
    assert_eq!(automatic.token_aligned, 3);
    assert!(by_hand.rejected.is_empty() && automatic.rejected.is_empty());
    assert_eq!(by_hand.vgamrs.len(), 3);
    assert_eq!(automatic.vgamrs.len(), 3);
    // Hand-checked: the dog and the grass (and the ball) get their phrases' boxes, the
    // predicate nothing.
    let expected: [&[(&str, BoxXyxy)]; 3] = [
        &[("d", dog), ("g", grass)],
        &[("d", dog), ("g", grass)],
        &[("b", ball), ("d", ball), ("g", grass)],
    ];
    for (k, want) in expected.iter().enumerate() {
        for (name, vgamrs) in [("hand-aligned", &by_hand), ("unaligned", &automatic)] {
            let vg = &vgamrs.vgamrs[k];
            assert_eq!(vg.caption_id, format!("1#{k}"), "{name}");
            let got: Vec<(&str, Vec<BoxXyxy>)> = vg
                .node_groundings
                .iter()
                .map(|(var, g)| (var.as_str(), g.boxes.clone()))
                .collect();
            let want: Vec<(&str, Vec<BoxXyxy>)> =
                want.iter().map(|(var, b)| (*var, vec![*b])).collect();
            assert_eq!(got, want, "{name} caption {k}");
        }
        assert_eq!(
            by_hand.vgamrs[k].node_groundings, automatic.vgamrs[k].node_groundings,
            "caption {k}"
        );
    }
    // Aligned graphs are used exactly as read.
    for (k, text) in aligned.iter().enumerate() {
        assert_eq!(
            by_hand.vgamrs[k].graph,
            capflow::amr::penman::parse(text).unwrap()
        );
    }
    // The graphs without `# ::tok` now carry the tokens their new alignments index.
    assert_eq!(
        automatic.vgamrs[1].graph.meta("tok"),
        Some("A dog runs on the grass .")
    );
    assert_eq!(
        automatic.vgamrs[2].graph.meta("tok"),
        Some("The dog 's ball is on the grass .")
    );
}

/// A scorer that likes everything.
struct Perfect;

impl capflow::select::quality::QualityScorer for Perfect {
    fn score(&self, _caption_tokens: &[String]) -> f64 {
        1.0
    }
}

/// A sentence whose subgraph has no grounded box would be a sample without control boxes and
/// with coverage 0: the quality filter drops it, counted as `no control box`, even when it passes
/// every other check.
#[test]
fn quality_filter_drops_subgraphs_without_control_boxes() {
    use capflow::amr::align::ModifierLexicon;
    use capflow::amr::sample::{EventSubgraph, EventVariant};
    use capflow::augment::ssa::{
        builtin_realizer, filter_sentences, CaptionParser, Drop, SsaConfig, SsaModels,
    };
    use capflow::augment::ImageAnnotations;

    let mut image = ImageAnnotations::new("1");
    image.captions = vec![caption(0, "A dog runs on the grass .")];
    let event = |penman: &str, boxes: Vec<BoxXyxy>| EventSubgraph {
        predicate: "r".into(),
        nodes: vec!["r".into(), "d".into(), "g".into()],
        graph: capflow::amr::penman::parse(penman).unwrap(),
        boxes,
        unknown: false,
        variant: EventVariant::Full,
    };
    let events = vec![
        event(
            "(r / run-02 :ARG0 (d / dog) :location (g / grass))",
            vec![BoxXyxy::new(0.0, 0.0, 10.0, 10.0)],
        ),
        event("(r / run-02 :ARG0 (d / dog) :location (g / grass))", vec![]),
        event("(r / run-02 :ARG0 (d / dog))", vec![]),
    ];
    let texts = vec![
        "a dog runs on grass".to_string(),
        "the dog is running on the grass".to_string(),
        "a dog runs".to_string(),
    ];
    let models = SsaModels {
        lexicon: ModifierLexicon::wordnet(),
        vectors: None,
        quality: std::sync::Arc::new(Perfect),
        frames: None,
        realizer: builtin_realizer(),
        parser: CaptionParser::Builtin,
        external_quality: None,
    };
    let filtered = filter_sentences(&image, &events, &texts, &SsaConfig::default(), &models);
    let kept: Vec<usize> = filtered.kept.iter().map(|(i, _)| *i).collect();
    assert_eq!(kept, [0]);
    assert_eq!(filtered.dropped, [(Drop::NoControlBox, 2)]);
    assert_eq!(Drop::NoControlBox.as_str(), "no control box");
}

/// The Flickr30k recipe on the embedded sample data with every `~e.N` stripped from the caption
/// AMRs (what a parser without alignments writes): SSA aligns them itself, says so, and every
/// SSA sample it writes has control boxes and a coverage above 0.
#[test]
fn ssa_aligns_caption_amrs_that_come_without_alignments() {
    let tmp = tempfile::tempdir().unwrap();
    let root = common::repo_root();
    let original = std::fs::read_to_string(root.join("examples/data/amr/captions.amr")).unwrap();
    let stripped = strip_alignments(&original);
    assert!(
        !stripped
            .lines()
            .any(|l| !l.starts_with('#') && l.contains('~')),
        "an alignment is left"
    );
    let graphs = stripped.lines().filter(|l| l.starts_with('(')).count();
    assert_eq!(graphs, 100);
    std::fs::write(tmp.path().join("captions.amr"), &stripped).unwrap();
    let spec = std::fs::read_to_string(root.join("dataflows/ssa-flickr30k.toml"))
        .unwrap()
        .replace(
            "../examples/data/amr/captions.amr",
            &tmp.path().join("captions.amr").display().to_string(),
        )
        .replace("../examples", &root.join("examples").display().to_string());
    let spec_path = tmp.path().join("stripped.toml");
    std::fs::write(&spec_path, spec).unwrap();

    let summary = |dir: &Path, spec: &Path| -> (Vec<SampleRow>, String) {
        let output = run(spec, dir, 2);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "capflow run failed: {stderr}");
        let samples = rows::<SampleRow>(dir, TableKind::Samples)
            .into_iter()
            .filter(|s| s.method == "ssa")
            .collect();
        (samples, stderr)
    };
    let (with_alignments, stderr) = summary(
        &tmp.path().join("aligned"),
        Path::new("dataflows/ssa-flickr30k.toml"),
    );
    assert!(
        !stderr.contains("had no token alignments"),
        "the embedded AMRs are aligned: {stderr}"
    );
    let (without, stderr) = summary(&tmp.path().join("stripped"), &spec_path);
    assert!(
        stderr.contains("ssa: 100 caption AMRs had no token alignments and were aligned"),
        "{stderr}"
    );
    let mean = |samples: &[SampleRow]| {
        samples.iter().map(|s| s.coverage).sum::<f64>() / samples.len().max(1) as f64
    };
    eprintln!(
        "SSA samples: {} with the embedded alignments (mean coverage {:.2}%), {} with them \
         stripped (mean coverage {:.2}%)",
        with_alignments.len(),
        mean(&with_alignments),
        without.len(),
        mean(&without)
    );
    for samples in [&with_alignments, &without] {
        for s in samples.iter() {
            assert!(!s.control_boxes.is_empty(), "{} has no boxes", s.sample_id);
            assert!(s.coverage > 0.0, "{} covers nothing", s.sample_id);
        }
    }
    // The aligner finds most of what the hand alignments give.
    assert!(
        without.len() * 2 >= with_alignments.len(),
        "{} SSA samples without alignments, {} with",
        without.len(),
        with_alignments.len()
    );
    let images: std::collections::BTreeSet<&str> =
        without.iter().map(|s| s.image_id.as_str()).collect();
    assert!(
        images.len() >= 10,
        "SSA samples for {} images",
        images.len()
    );
}
