//! SSA from plain captions: stage `text-to-amr` parses the captions that have no AMR, with the
//! built-in caption parser or an external parser through the adapter protocol, and `amr-align`
//! grounds the graphs as it grounds read ones.
//!
//! The external parser is the deterministic stand-in of `tests/adapters/deterministic.py`: it
//! answers each caption with the embedded sample's hand-aligned AMR of that caption, stripped
//! of its alignments as amrlib writes graphs, so its output is known independently of capflow.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use capflow::export::{read_manifest, read_table};
use capflow::schema::{batch_to_rows, ImageRow, RejectedRow, SampleRow, TableKind, TableRow};

fn run(spec: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn run_ok(spec: &Path, out: &Path, extra: &[&str]) -> String {
    let output = run(spec, out, extra);
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "capflow run failed: {stderr}");
    stderr
}

fn rows<R: TableRow>(dir: &Path, table: TableKind) -> Vec<R> {
    read_table(dir, table)
        .unwrap()
        .flat_map(|b| batch_to_rows::<R>(&b.unwrap()).unwrap())
        .collect()
}

fn ssa_samples(dir: &Path) -> Vec<SampleRow> {
    rows::<SampleRow>(dir, TableKind::Samples)
        .into_iter()
        .filter(|s| s.method == "ssa")
        .collect()
}

fn stage_rows_in(dir: &Path, stage: &str) -> u64 {
    let manifest = read_manifest(dir).unwrap();
    manifest
        .stages
        .iter()
        .filter(|s| s.name == stage)
        .map(|s| s.rows_in)
        .sum()
}

/// The embedded recipes that start from captions alone run, parse every caption, and write
/// SSA samples each with a control box and a coverage above 0; the bytes do not depend on `-w`.
#[test]
fn text_recipes_run_ssa_on_the_embedded_captions_alone() {
    for recipe in ["ssa-flickr30k-text", "ssa-coco-text"] {
        let tmp = tempfile::tempdir().unwrap();
        let spec = PathBuf::from(format!("dataflows/{recipe}.toml"));
        let one = tmp.path().join("w1");
        let two = tmp.path().join("w2");
        run_ok(&spec, &one, &["-w", "1"]);
        run_ok(&spec, &two, &["-w", "2"]);
        assert_eq!(
            common::data_files(&one),
            common::data_files(&two),
            "{recipe}: -w 1 and -w 2 differ"
        );
        let manifest = read_manifest(&one).unwrap();
        assert!(
            !manifest.files.iter().any(|f| f.table == TableKind::Amrs),
            "{recipe} read AMRs"
        );
        // The 20 images' 100 captions are all parsed.
        assert_eq!(stage_rows_in(&one, "text-to-amr"), 100, "{recipe}");
        assert_eq!(stage_rows_in(&one, "amr-align"), 100, "{recipe}");
        let samples = ssa_samples(&one);
        let images: BTreeSet<&str> = samples.iter().map(|s| s.image_id.as_str()).collect();
        assert!(images.len() >= 15, "{recipe}: SSA samples for {images:?}");
        for sample in &samples {
            assert!(
                !sample.control_boxes.is_empty() && sample.coverage > 0.0,
                "{recipe}: {sample:?}"
            );
        }
    }
}

/// The acceptance run of SSA from text: the 40 real Flickr30k Entities captions of the
/// fixtures (8 images), no AMR input. The fixtures have no Annotations XML (see their
/// SOURCES.md), so the test writes one for each image: a 500 × 375 image with one box per
/// entity chain its captions name (entity ids from the captions' own `[/EN#id/type ...]`
/// markup; boxes laid out on a grid, a function of the chain's rank only).
#[test]
fn ssa_runs_from_the_real_fixture_captions_alone() {
    let Some(sentences) = common::fixture("flickr30k_entities/Sentences") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("flickr30k_entities");
    common::copy_dir(&sentences, &data.join("Sentences"));
    std::fs::create_dir_all(data.join("Annotations")).unwrap();
    let mut images = Vec::new();
    let mut boxes_of: BTreeMap<String, Vec<[f64; 4]>> = BTreeMap::new();
    for entry in std::fs::read_dir(&sentences).unwrap() {
        let path = entry.unwrap().path();
        let id = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut chains: Vec<String> = Vec::new();
        for part in text.split("[/EN#").skip(1) {
            let chain = part.split('/').next().unwrap().to_string();
            if chain != "0" && !chains.contains(&chain) {
                chains.push(chain);
            }
        }
        let mut xml = String::from(
            "<annotation>\n<filename>x.jpg</filename>\n<size><width>500</width>\
             <height>375</height><depth>3</depth></size>\n",
        );
        for (rank, chain) in chains.iter().enumerate() {
            let (col, row) = ((rank % 4) as f64, (rank / 4 % 3) as f64);
            let b = [
                10.0 + 120.0 * col,
                10.0 + 120.0 * row,
                110.0 + 120.0 * col,
                110.0 + 120.0 * row,
            ];
            xml.push_str(&format!(
                "<object><name>{chain}</name><bndbox><xmin>{}</xmin><ymin>{}</ymin>\
                 <xmax>{}</xmax><ymax>{}</ymax></bndbox></object>\n",
                b[0], b[1], b[2], b[3]
            ));
            boxes_of.entry(id.clone()).or_default().push(b);
        }
        xml.push_str("</annotation>\n");
        std::fs::write(data.join("Annotations").join(format!("{id}.xml")), xml).unwrap();
        images.push(id);
    }
    assert_eq!(images.len(), 8);
    let spec = tmp.path().join("ssa-text.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"ssa-fixture-text\"\n[[inputs]]\nformat = \"flickr30k-entities\"\n\
             paths = [{:?}]\n[ssa]\nrules = \"flickr\"\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    run_ok(&spec, &out, &[]);
    assert_eq!(stage_rows_in(&out, "text-to-amr"), 40);
    let samples = ssa_samples(&out);
    let with_samples: BTreeSet<&str> = samples.iter().map(|s| s.image_id.as_str()).collect();
    eprintln!(
        "SSA from text on the fixture captions: {} samples for {} of 8 images",
        samples.len(),
        with_samples.len()
    );
    for s in &samples {
        eprintln!(
            "  {} {:?} boxes {}",
            s.image_id,
            s.text,
            s.control_boxes.len()
        );
    }
    assert!(with_samples.len() >= 5, "SSA samples for {with_samples:?}");
    let sizes: BTreeMap<String, ImageRow> = rows::<ImageRow>(&out, TableKind::Images)
        .into_iter()
        .map(|i| (i.image_id.clone(), i))
        .collect();
    for sample in &samples {
        assert!(!sample.control_boxes.is_empty(), "{sample:?}");
        assert!(sample.coverage > 0.0, "{sample:?}");
        assert_eq!(sizes[&sample.image_id].width, Some(500));
        // Every control box is one of the image's boxes (VOC corners: 1-based, inclusive, so
        // the box starts one pixel before `xmin`).
        for b in &sample.control_boxes {
            assert!(
                boxes_of[&sample.image_id].contains(&[b.x1 + 1.0, b.y1 + 1.0, b.x2, b.y2]),
                "{b:?} is not a box of image {}",
                sample.image_id
            );
        }
    }
}

/// `embedded captions.amr` as the stand-in answers it: alignments and `# ::tok` lines removed.
fn unaligned_penman(to: &Path) {
    let text = std::fs::read_to_string(common::repo_root().join("examples/data/amr/captions.amr"))
        .unwrap();
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("# ::tok") {
            continue;
        }
        let mut kept = String::new();
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '~' {
                if chars.peek() == Some(&'e') {
                    chars.next();
                    chars.next(); // '.'
                }
                while chars
                    .peek()
                    .is_some_and(|c| c.is_ascii_digit() || *c == ',')
                {
                    chars.next();
                }
            } else {
                kept.push(c);
            }
        }
        out.push_str(&kept);
        out.push('\n');
    }
    std::fs::write(to, out).unwrap();
}

fn parser_spec(dir: &Path, data: &Path, log: &Path, max_batch: usize) -> Option<PathBuf> {
    let python = common::oracle_python()?;
    let root = common::repo_root();
    let amrs = root.join("examples/data/amr/captions.amr");
    let command = common::stand_in(
        &python,
        &[
            "text_to_amr",
            "--amr-from",
            amrs.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
        ],
    );
    let spec = dir.join("ssa-parser.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"ssa-parser\"\n[[inputs]]\nformat = \"flickr30k-entities\"\npaths = [{:?}]\n\
             [ssa]\nrules = \"flickr\"\n[models.text_to_amr]\ncommand = {command}\n\
             max_batch_size = {max_batch}\nmax_restarts = 0\n",
            data.display().to_string(),
        ),
    )
    .unwrap();
    Some(spec)
}

/// The rows of each request the stand-in logged.
fn logged_batches(log: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (n, texts) = line.split_once('\t').unwrap();
            let texts: Vec<String> = texts.split(" | ").map(str::to_string).collect();
            assert_eq!(texts.len(), n.parse::<usize>().unwrap());
            texts
        })
        .collect()
}

/// An external parser gets the captions of several images per request, never more than
/// `max_batch_size`; its unaligned graphs are aligned by the built-in aligner; and the SSA
/// samples are those of the same graphs read from a PENMAN input.
#[test]
fn an_external_parser_gets_batches_across_images_and_feeds_amr_align() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::repo_root().join("examples/data/flickr30k_entities");
    let log = tmp.path().join("requests.log");
    let Some(spec) = parser_spec(tmp.path(), &data, &log, 32) else {
        return;
    };
    let out = tmp.path().join("parsed");
    run_ok(&spec, &out, &["-w", "2"]);
    let batches = logged_batches(&log);
    let sent: usize = batches.iter().map(Vec::len).sum();
    assert_eq!(sent, 100, "{batches:?}");
    assert!(batches.iter().all(|b| b.len() <= 32), "{batches:?}");
    // Some request holds more captions than one image has.
    assert!(batches.iter().any(|b| b.len() > 5), "{batches:?}");
    // Every graph was grounded.
    let manifest = read_manifest(&out).unwrap();
    let align = manifest.stages.iter().find(|s| s.name == "amr-align");
    assert_eq!(align.map(|s| (s.rows_in, s.rows_out)), Some((100, 100)));
    // The same graphs, read from a PENMAN file, give the same SSA samples.
    let amr = tmp.path().join("captions.amr");
    unaligned_penman(&amr);
    let read_spec = tmp.path().join("ssa-read.toml");
    std::fs::write(
        &read_spec,
        format!(
            "name = \"ssa-parser\"\n[[inputs]]\nformat = \"flickr30k-entities\"\npaths = [{:?}]\n\
             [[inputs]]\nformat = \"penman\"\npaths = [{:?}]\n[ssa]\nrules = \"flickr\"\n",
            data.display().to_string(),
            amr.display().to_string()
        ),
    )
    .unwrap();
    let read_out = tmp.path().join("read");
    run_ok(&read_spec, &read_out, &["-w", "1"]);
    let texts = |dir: &Path| -> Vec<(String, String, usize)> {
        ssa_samples(dir)
            .into_iter()
            .map(|s| (s.image_id, s.text, s.control_boxes.len()))
            .collect()
    };
    let parsed = texts(&out);
    assert!(parsed.len() > 50, "{parsed:?}");
    assert_eq!(parsed, texts(&read_out));
}

/// With `--state`, the parser's answers are kept: a rerun that refits the corpus-level models
/// after one new caption (`--refit`), computing that image and those whose merge the new models
/// change, sends only the new caption to the parser.
#[test]
fn reruns_with_a_state_never_parse_a_caption_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("flickr30k_entities");
    common::copy_dir(
        &common::repo_root().join("examples/data/flickr30k_entities"),
        &data,
    );
    let log = tmp.path().join("requests.log");
    let Some(spec) = parser_spec(tmp.path(), &data, &log, 64) else {
        return;
    };
    let out = tmp.path().join("out");
    let state = tmp.path().join("state");
    let state_arg = state.display().to_string();
    run_ok(&spec, &out, &["--state", &state_arg]);
    let first: usize = logged_batches(&log).iter().map(Vec::len).sum();
    assert_eq!(first, 100);
    let first_samples = ssa_samples(&out).len();

    let sentences = data.join("Sentences/1000001.txt");
    let mut text = std::fs::read_to_string(&sentences).unwrap();
    text.push_str("[/EN#1001/people A man] rides [/EN#1002/other a bike] .\n");
    std::fs::write(&sentences, text).unwrap();
    std::fs::remove_file(&log).unwrap();
    let stderr = run_ok(&spec, &out, &["--state", &state_arg, "--refit"]);
    // The refit replays the images whose merge the new models leave as it was and computes
    // the others (docs/incremental.md): those it computes take their graphs from the state too.
    assert!(
        stderr.contains("fitted the models on 101 captions"),
        "{stderr}"
    );
    let batches = logged_batches(&log);
    assert_eq!(
        batches,
        vec![vec!["A man rides a bike .".to_string()]],
        "{stderr}"
    );
    // The stand-in has no graph for the new caption: it is in the ledger, and the other
    // captions' graphs came from the state.
    let ledger: Vec<RejectedRow> = rows(&out, TableKind::Rejected);
    assert!(
        ledger.iter().any(
            |r| r.reason.contains("text-to-amr: text_to_amr gave no graph")
                && r.record.contains("1000001")
        ),
        "{ledger:?}"
    );
    assert!(ssa_samples(&out).len() >= first_samples / 2);
}

/// An external quality scorer (`[models.quality_scorer]`) replaces the built-in one: it is asked
/// about the sentences that pass the other checks, several images' in one request, and SSA keeps
/// those scoring above `quality_threshold`. The stand-in scores `min(1, characters / 100)`,
/// computed here again.
#[test]
fn an_external_quality_scorer_decides_what_ssa_keeps() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = common::repo_root();
    let log = tmp.path().join("scored.log");
    let command = common::stand_in(&python, &["quality_scorer", "--log", log.to_str().unwrap()]);
    let spec = tmp.path().join("ssa-gruen.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"ssa-scored\"\n[[inputs]]\nformat = \"flickr30k-entities\"\npaths = [{:?}]\n\
             [[inputs]]\nformat = \"penman\"\npaths = [{:?}]\n\
             [ssa]\nrules = \"flickr\"\nquality_threshold = 0.3\n\
             [models.quality_scorer]\ncommand = {command}\nmax_restarts = 0\n",
            root.join("examples/data/flickr30k_entities")
                .display()
                .to_string(),
            root.join("examples/data/amr/captions.amr")
                .display()
                .to_string(),
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    run_ok(&spec, &out, &["-w", "2"]);
    let stand_in = |text: &str| (text.chars().count() as f64 / 100.0).min(1.0);
    let scored: Vec<String> = logged_batches(&log).into_iter().flatten().collect();
    assert!(logged_batches(&log).iter().any(|b| b.len() > 10));
    let samples = ssa_samples(&out);
    assert!(!samples.is_empty());
    for sample in &samples {
        assert_eq!(sample.quality.len(), 1, "{sample:?}");
        assert_eq!(sample.quality[0].name, "quality_scorer");
        assert!((sample.quality[0].value - stand_in(&sample.text)).abs() < 1e-12);
        assert!(sample.quality[0].value > 0.3, "{sample:?}");
        assert!(
            scored.contains(&sample.text),
            "{} was not scored",
            sample.text
        );
    }
    // Every scored sentence at or below the threshold is counted as a low-quality drop.
    let low = scored.iter().filter(|t| stand_in(t) <= 0.3).count() as u64;
    let manifest = read_manifest(&out).unwrap();
    assert_eq!(
        manifest.dropped["ssa"]
            .get("quality score at or below the threshold")
            .copied()
            .unwrap_or(0),
        low
    );
}
