//! `capflow eval controls`: the control metrics of a captions file against a dataset's controls.
//! A hand-made dataset whose every metric is worked out by hand below from the definitions
//! (`docs/metrics.md`, METHODS.md §1 "Metrics"), the pairing rules and their errors, and the
//! SSA recipe on the embedded data checked against pycocoevalcap 1.2 (CIDEr-D, BLEU-1..4 and
//! the CIDEr-D kernel of self-CIDEr) and numpy's SVD.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use capflow::cli::eval::{evaluate_controls_files, ControlsOptions};
use capflow::export::samples::SampleData;
use capflow::export::DatasetWriter;
use capflow::ingest::IngestCounts;
use capflow::schema::{CaptionRow, Provenance, SampleRow};
use serde_json::{json, Value};

fn capflow(args: &[&str]) -> Output {
    Command::new(common::capflow_bin())
        .args(args)
        .current_dir(common::repo_root())
        .output()
        .unwrap()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn sample(id: &str, image: &str, labels: &[&str], level: i32, words: i32, cov: f64) -> SampleRow {
    SampleRow {
        image: None,
        sample_id: id.into(),
        image_id: image.into(),
        split: "train".into(),
        method: "ssa".into(),
        text: format!("the caption of {id}"),
        control_boxes: vec![],
        control_labels: labels.iter().map(|l| l.to_string()).collect(),
        coverage: cov,
        length_level: level,
        word_count: words,
        verbs: vec![],
        quality: vec![],
        provenance: Provenance::default(),
    }
}

fn caption(image: &str, k: usize, text: &str) -> CaptionRow {
    CaptionRow {
        image_id: image.into(),
        caption_id: format!("{image}#{k}"),
        dataset: "hand".into(),
        split: "train".into(),
        caption_index: k as i32,
        text: text.into(),
    }
}

/// Two images, three SSA samples and three reference captions; word vectors in three
/// dimensions chosen so that every cosine is a round number:
/// dog = (1, 0, 0), cat = (0.6, 0.8, 0), sofa = (0, 1, 0), ball = (0, 0, 1), so
/// cos(dog, cat) = 0.6, cos(cat, sofa) = 0.8 and every other pair of different words 0.
struct HandData {
    tmp: tempfile::TempDir,
    dir: PathBuf,
    vectors: PathBuf,
    captions: PathBuf,
}

/// The generated captions, one per sample.
const HAND_CAPTIONS: [(&str, &str, &str); 3] = [
    ("s1", "img1", "A dog runs on the grass ."),
    ("s2", "img1", "One cat chases a ball ."),
    ("s3", "img2", "A dog sleeps on a bed in the sun ."),
];

fn hand_data() -> HandData {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut writer = DatasetWriter::create(&dir, "eval-controls-hand", 1 << 20).unwrap();
    writer
        .write_rows(
            "captions",
            &[
                caption("img1", 0, "A dog runs on the grass ."),
                caption("img1", 1, "A brown dog plays ."),
                caption("img2", 0, "A cat sleeps on a sofa ."),
            ],
        )
        .unwrap();
    writer
        .write_rows(
            "train",
            &[
                sample("s1", "img1", &["dog"], 1, 4, 30.0),
                sample("s2", "img1", &["Dog", "red ball"], 2, 10, 55.0),
                sample("s3", "img2", &["cat", "sofa"], 1, 5, 80.0),
            ],
        )
        .unwrap();
    writer
        .commit(IngestCounts {
            read: 3,
            accepted: 3,
            rejected: 0,
        })
        .unwrap();
    let vectors = tmp.path().join("vectors.txt");
    std::fs::write(
        &vectors,
        "dog 1 0 0\ncat 0.6 0.8 0\nsofa 0 1 0\nball 0 0 1\n",
    )
    .unwrap();
    let captions = tmp.path().join("captions.jsonl");
    let lines: Vec<String> = HAND_CAPTIONS
        .iter()
        .map(|(s, i, c)| json!({"sample_id": s, "image_id": i, "caption": c}).to_string())
        .collect();
    std::fs::write(&captions, lines.join("\n") + "\n").unwrap();
    HandData {
        tmp,
        dir,
        vectors,
        captions,
    }
}

/// The worked example. The noun lexicon is the last word of every control label: {dog, ball,
/// cat, sofa} ("grass", "bed" and "sun" are not nouns of the data). Word counts leave "." out.
///
/// - s1, asks [dog], level 1 / 4 words: "a dog runs on the grass ." has 6 words (level 1: in
///   level; L = |4 − 6| = 2) and nouns {dog}: I = sim(dog, dog) = 1, IoU = 1 / (1 + 1 − 1) = 1,
///   Hal = (1 − 1) / 1 = 0.
/// - s2, asks [dog, ball] (heads of "Dog", "red ball"), level 2 / 10 words: "one cat chases a
///   ball ." has 5 words (level 1: missed; L = 5) and nouns {cat, ball}; the best matching is
///   cat–dog 0.6 + ball–ball 1 (the other, cat–ball 0 + ball–dog 0, is 0): I = 1.6,
///   IoU = 1.6 / (2 + 2 − 1.6) = 2/3, Hal = (2 − 1.6) / 2 = 0.2.
/// - s3, asks [cat, sofa], level 1 / 5 words: "a dog sleeps on a bed in the sun ." has 9 words
///   (level 1: in level; L = 4) and nouns {dog}: best dog–cat 0.6, I = 0.6,
///   IoU = 0.6 / (1 + 2 − 0.6) = 0.25, Hal = (1 − 0.6) / 1 = 0.4.
///
/// Overall: LP = 2 of 3 = 66.67 %, L = (2 + 5 + 4) / 3 = 11/3, IoU = (1 + 2/3 + 1/4) / 3 =
/// 23/36, Hal = (0 + 0.2 + 0.4) / 3 = 0.2.
///
/// D-n over the 23 tokens of the three captions (7 + 6 + 10, "." included): 15 distinct
/// unigrams (a dog runs on the grass . one cat chases ball sleeps bed in sun) and 19 distinct
/// bigrams (6 of s1; one-cat, cat-chases, chases-a, a-ball, ball-. of s2; 8 of s3 besides
/// a-dog): D-1 = 15/23, D-2 = 19/23.
///
/// Self-CIDEr: img1's captions share only "a" and "."; the document frequencies come from the
/// three samples' reference sets (img1's captions twice, img2's once), and "a" and "." are in
/// all three, so their idf is ln 3 − ln 3 = 0. Every other n-gram of the two captions is
/// different, so the kernel is diagonal; each diagonal entry is CIDEr-D of a caption against
/// itself, 10 · (1 + 1 + 1 + 1) / 4 = 10. Singular values {10, 10}: r = √10 / (2√10) = 1/2 and
/// self-CIDEr = −ln(1/2) / ln 2 = 1. img2 has a single caption (undefined), so the mean is 1.
///
/// By coverage band: s1 in [30,40), s2 in [50,60), s3 in [80,90). By length level: L1 = {s1,
/// s3}: IoU (1 + 0.25) / 2 = 0.625, Hal 0.2, LP 100, L 3; L2 = {s2}: IoU 2/3, Hal 0.2, LP 0, L 5.
fn check_hand_report(report: &Value) {
    // f32 word vectors: cosines are exact to about 1e-7.
    let tol = 1e-6;
    let num = |key: &str| report[key].as_f64().unwrap_or_else(|| panic!("{key}"));
    assert_eq!(report["samples"], 3);
    assert_eq!(report["images"], 2);
    assert!(close(num("lp"), 200.0 / 3.0, 1e-12));
    assert!(close(num("l"), 11.0 / 3.0, 1e-12));
    assert!(close(num("iou"), 23.0 / 36.0, tol), "{}", num("iou"));
    assert!(close(num("hal"), 0.2, tol), "{}", num("hal"));
    assert!(close(num("d1"), 15.0 / 23.0, 1e-12));
    assert!(close(num("d2"), 19.0 / 23.0, 1e-12));
    assert!(
        close(num("self_cider"), 1.0, 1e-12),
        "{}",
        num("self_cider")
    );
    // H is the harmonic mean of IoU, G and self-CIDEr (G is the trained quality scorer's).
    match report["g"].as_f64() {
        Some(g) => {
            let h = 3.0 / (36.0 / 23.0 + 1.0 / g + 1.0);
            assert!(close(num("h"), h, tol), "{} vs {h}", num("h"));
        }
        None => assert!(report["h"].is_null()),
    }
    let band = |label: &str| {
        report["by_coverage"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == label)
            .unwrap()
            .clone()
    };
    assert_eq!(band("[30,40)")["samples"], 1);
    assert!(close(band("[30,40)")["iou"].as_f64().unwrap(), 1.0, tol));
    assert_eq!(band("[50,60)")["samples"], 1);
    assert!(close(
        band("[50,60)")["iou"].as_f64().unwrap(),
        2.0 / 3.0,
        tol
    ));
    assert_eq!(band("[80,90)")["samples"], 1);
    assert!(close(band("[80,90)")["hal"].as_f64().unwrap(), 0.4, tol));
    assert_eq!(band("[0,10)")["samples"], 0);
    let levels = report["by_level"].as_array().unwrap();
    assert_eq!(levels.len(), 2);
    let (l1, l2) = (&levels[0], &levels[1]);
    assert_eq!(
        (l1["group"].as_str(), l1["samples"].as_u64()),
        (Some("L1"), Some(2))
    );
    assert!(close(l1["iou"].as_f64().unwrap(), 0.625, tol));
    assert!(close(l1["hal"].as_f64().unwrap(), 0.2, tol));
    assert_eq!(l1["lp"].as_f64(), Some(100.0));
    assert_eq!(l1["l"].as_f64(), Some(3.0));
    assert_eq!(
        (l2["group"].as_str(), l2["samples"].as_u64()),
        (Some("L2"), Some(1))
    );
    assert!(close(l2["iou"].as_f64().unwrap(), 2.0 / 3.0, tol));
    assert_eq!(l2["lp"].as_f64(), Some(0.0));
    assert_eq!(l2["l"].as_f64(), Some(5.0));
}

#[test]
fn hand_computed_example_from_jsonl() {
    let hand = hand_data();
    let out = capflow(&[
        "eval",
        "controls",
        "--data",
        path_str(&hand.dir),
        "--captions",
        path_str(&hand.captions),
        "--vectors",
        path_str(&hand.vectors),
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_hand_report(&report);
    assert!(report.get("predictions").is_none());
    // The dataset has no `original` samples, so the images' three captions are added as
    // original samples (as `eval model` and training do); they have no caption in the file.
    assert_eq!(report["records"], 3);
    assert_eq!(report["matched"], 3);
    assert_eq!(report["unmatched"], 0);
    assert_eq!(report["samples_selected"], 6);
    assert_eq!(report["samples_without_caption"], 3);

    // The text table says the same.
    let out = capflow(&[
        "eval",
        "controls",
        "--data",
        path_str(&hand.dir),
        "--captions",
        path_str(&hand.captions),
        "--vectors",
        path_str(&hand.vectors),
        "--method",
        "ssa",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("3 of 3 captions matched to samples") && text.contains("0 of 3 selected"),
        "{text}"
    );
    for line in [
        "LP (%)         66.67",
        "IoU            0.6389",
        "self-CIDEr     1.0000",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_and_image_only_records_give_the_same_numbers() {
    let hand = hand_data();
    // s3 given by its image alone: with `--method ssa` img2 has one selected sample.
    let parquet = hand.tmp.path().join("captions.parquet");
    write_parquet(
        &parquet,
        vec![
            (
                "sample_id",
                Arc::new(StringArray::from(vec![Some("s1"), Some("s2"), None])) as ArrayRef,
            ),
            (
                "caption",
                Arc::new(StringArray::from(
                    HAND_CAPTIONS.iter().map(|c| c.2).collect::<Vec<_>>(),
                )),
            ),
        ],
    );
    let image_ids = hand.tmp.path().join("image_ids.parquet");
    write_parquet(
        &image_ids,
        vec![
            (
                "sample_id",
                Arc::new(StringArray::from(vec![Some("s1"), Some("s2"), None])) as ArrayRef,
            ),
            (
                "image_id",
                Arc::new(Int64Array::from(vec![None, None, Some(7)])),
            ),
            ("caption", Arc::new(StringArray::from(vec!["a", "b", "c"]))),
        ],
    );
    // The Parquet file has no image id for its third row: it is refused, naming the row.
    let err = evaluate_controls_files(
        std::slice::from_ref(&hand.dir),
        &parquet,
        &ControlsOptions {
            methods: vec!["ssa".into()],
            vectors: Some(hand.vectors.clone()),
            ..ControlsOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("captions.parquet") && err.contains("row 2"),
        "{err}"
    );
    assert!(err.contains("`sample_id` or an `image_id`"), "{err}");
    // A numeric image id is read as its decimal text; image 7 is not in the data.
    let err = evaluate_controls_files(
        std::slice::from_ref(&hand.dir),
        &image_ids,
        &ControlsOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("row 2") && err.contains("no image 7"), "{err}");

    write_parquet(
        &parquet,
        vec![
            (
                "sample_id",
                Arc::new(StringArray::from(vec![Some("s1"), Some("s2"), None])) as ArrayRef,
            ),
            (
                "image_id",
                Arc::new(StringArray::from(vec![None, None, Some("img2")])),
            ),
            (
                "caption",
                Arc::new(StringArray::from(
                    HAND_CAPTIONS.iter().map(|c| c.2).collect::<Vec<_>>(),
                )),
            ),
        ],
    );
    let evaluation = evaluate_controls_files(
        std::slice::from_ref(&hand.dir),
        &parquet,
        &ControlsOptions {
            methods: vec!["ssa".into()],
            vectors: Some(hand.vectors.clone()),
            ..ControlsOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        (evaluation.matched, evaluation.samples_without_caption),
        (3, 0)
    );
    check_hand_report(&serde_json::to_value(&evaluation).unwrap());
    let ids: Vec<&str> = evaluation
        .report
        .predictions
        .iter()
        .map(|p| p.sample_id.as_str())
        .collect();
    assert_eq!(ids, ["s1", "s2", "s3"]);
}

#[test]
fn records_that_pair_with_no_sample_are_errors_or_counted() {
    let hand = hand_data();
    let dir = hand.tmp.path();
    let write = |name: &str, lines: &[Value]| -> PathBuf {
        let p = dir.join(name);
        let text: Vec<String> = lines.iter().map(Value::to_string).collect();
        std::fs::write(&p, text.join("\n")).unwrap();
        p
    };
    let ok = json!({"sample_id": "s1", "caption": "a dog"});
    let cases = [
        (
            write(
                "unknown.jsonl",
                &[ok.clone(), json!({"sample_id": "nope", "caption": "x"})],
            ),
            "line 2",
            "no sample nope in the data",
        ),
        (
            write(
                "ambiguous.jsonl",
                &[json!({"image_id": "img1", "caption": "x"})],
            ),
            "line 1",
            "image img1 has",
        ),
        (
            write(
                "twice.jsonl",
                &[ok.clone(), json!({"sample_id": "s1", "caption": "y"})],
            ),
            "line 2",
            "already has a caption (line 1)",
        ),
        (
            write(
                "wrong_image.jsonl",
                &[json!({"sample_id": "s1", "image_id": "img2", "caption": "x"})],
            ),
            "line 1",
            "not of image img2",
        ),
        (
            write("no_caption.jsonl", &[json!({"sample_id": "s1"})]),
            "line 1",
            "`caption`",
        ),
    ];
    for (file, record, reason) in &cases {
        let out = capflow(&[
            "eval",
            "controls",
            "--data",
            path_str(&hand.dir),
            "--captions",
            path_str(file),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        for part in [path_str(file), record, reason] {
            assert!(stderr.contains(part), "{part} not in {stderr}");
        }
    }
    // Allowed, unknown records are counted and listed, never dropped silently.
    let out = capflow(&[
        "eval",
        "controls",
        "--data",
        path_str(&hand.dir),
        "--captions",
        path_str(&cases[0].0),
        "--allow-unmatched",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["records"].as_u64(), report["matched"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(report["unmatched"], 1);
    assert_eq!(report["unmatched_records"][0]["record"], "line 2");
    // Records outside the selected splits are counted too; with none left, nothing is scored.
    let out = capflow(&[
        "eval",
        "controls",
        "--data",
        path_str(&hand.dir),
        "--captions",
        path_str(&hand.captions),
        "--split",
        "test",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("3 outside the selected splits"), "{stderr}");
    // A layout the extension does not name is a usage error.
    let odd = write("captions.txt", &[ok]);
    let out = capflow(&[
        "eval",
        "controls",
        "--data",
        path_str(&hand.dir),
        "--captions",
        path_str(&odd),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = capflow(&[
        "eval",
        "controls",
        "--data",
        path_str(&hand.dir),
        "--captions",
        path_str(&odd),
        "--format",
        "jsonl",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
}

/// `capflow run dataflows/ssa-flickr30k.toml` on the embedded data, once per test binary.
fn ssa_dataset() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Under cargo's per-target scratch directory, replaced by the next run of this binary.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("eval-controls-dataset");
        let _ = std::fs::remove_dir_all(&dir);
        let out = capflow(&[
            "run",
            "dataflows/ssa-flickr30k.toml",
            "--out",
            path_str(&dir),
        ]);
        assert!(out.status.success(), "{out:?}");
        dir
    })
}

/// The commands of the `eval controls` example in docs/metrics.md, run as written (the
/// dataset written under a temporary directory instead of `out/`).
#[test]
fn documented_example_runs() {
    let doc = std::fs::read_to_string(common::repo_root().join("docs/metrics.md")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = format!("{}/", tmp.path().display());
    let commands: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("capflow run dataflows/ssa-flickr30k.toml"))
        .chain(
            doc.lines()
                .filter(|l| l.starts_with("capflow eval controls --data out/")),
        )
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    let mut last = None;
    for command in commands {
        let line = command.replace("out/", &out_dir);
        let args: Vec<&str> = line.split_whitespace().skip(1).collect();
        let out = capflow(&args);
        assert!(out.status.success(), "{command}: {out:?}");
        last = Some(String::from_utf8(out.stdout).unwrap());
    }
    let text = last.unwrap();
    assert!(
        text.contains("15 of 15 captions matched to samples"),
        "{text}"
    );
    // The doc shows the summary line and the metric rows the command printed, but for the ones
    // that depend on the PPMI word vectors, which are trained on every caption of the dataset
    // (SSA samples included) and so change with the SSA stages.
    let vector_rows = ["IoU ", "Hal ", "H "];
    for line in text
        .lines()
        .take(18)
        .filter(|l| l.starts_with(char::is_alphabetic))
        .filter(|l| !vector_rows.iter().any(|v| l.starts_with(v)))
    {
        let line = line.replace(path_str(tmp.path()), "out");
        assert!(
            doc.contains(&line),
            "docs/metrics.md lacks the output line {line:?}"
        );
    }
}

/// Reads the dataset and the captions file itself (pyarrow), tokenises as capflow documents it
/// (lower case; words of letters and digits joined by `'` or `-`; every other non-space
/// character a token), and scores with pycocoevalcap: `Bleu(4)` and `Cider()` over the samples
/// against their image's captions, and self-CIDEr with the CIDEr-D kernel of pycocoevalcap's
/// `CiderScorer` under the document frequencies of those references and numpy's SVD.
const ORACLE_SCRIPT: &str = r#"
import contextlib, io, json, re, sys
from collections import defaultdict
import numpy as np
import pyarrow.parquet as pq
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.cider.cider_scorer import CiderScorer, cook_refs, cook_test

data, captions_file, out_file = sys.argv[1:4]
manifest = json.load(open(f"{data}/manifest.json"))
def rows(table):
    out = []
    for f in manifest["files"]:
        if f["table"] == table:
            out += pq.read_table(f"{data}/{f['path']}").to_pylist()
    return out
def tok(s):
    return re.findall(r"[^\W_]+(?:['\-][^\W_]+)*|[^\w\s]|_", s.replace("\u2019", "'").lower())
refs = defaultdict(list)
for c in rows("captions"):
    refs[c["image_id"]].append(" ".join(tok(c["text"])))
samples = {s["sample_id"]: s for s in rows("samples")}
hyps = [json.loads(l) for l in open(captions_file) if l.strip()]
gts, res, per_image = {}, {}, defaultdict(list)
for h in hyps:
    s = samples[h["sample_id"]]
    caption = " ".join(tok(h["caption"]))
    per_image[s["image_id"]].append(caption)
    if s["image_id"] in refs:
        gts[h["sample_id"]] = refs[s["image_id"]]
        res[h["sample_id"]] = [caption]
with contextlib.redirect_stdout(io.StringIO()):
    bleu, _ = Bleu(4).compute_score(gts, res)
cider, _ = Cider().compute_score(gts, res)

corpus = CiderScorer(n=4, sigma=6.0)
for k in gts:
    corpus += (res[k][0], gts[k])
corpus.compute_doc_freq()
class FixedDf(CiderScorer):
    """CIDEr-D under the corpus's document frequencies (compute_cider would recount them)."""
    ref_len = property(lambda self: np.log(float(len(corpus.crefs))), lambda self, v: None)
self_cider = []
for image, caps in per_image.items():
    m = len(caps)
    if m < 2:
        continue
    k = FixedDf(n=4, sigma=6.0)
    k.document_frequency = corpus.document_frequency
    for a in caps:
        for b in caps:
            k += (a, [b])
    kernel = np.array(k.compute_cider()).reshape(m, m)
    s = np.linalg.svd(kernel, compute_uv=False)
    if s.max() <= 0:
        continue
    r = np.sqrt(s).max() / np.sqrt(s).sum()
    self_cider.append(-np.log(r) / np.log(m))
words = [c.split() for caps in per_image.values() for c in caps]
def distinct(n):
    grams = {tuple(w[i:i + n]) for w in words for i in range(len(w) - n + 1)}
    return len(grams) / sum(len(w) for w in words)
json.dump({"bleu": bleu, "cider": float(cider), "self_cider": float(np.mean(self_cider)),
           "images_with_self_cider": len(self_cider), "d1": distinct(1), "d2": distinct(2)},
          open(out_file, "w"))
"#;

#[test]
fn ssa_recipe_matches_pycocoevalcap_where_the_metrics_overlap() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let data = ssa_dataset();
    // Captions a model might give: each sample answered with another sample's text of the
    // same image, every second one cut short by two words.
    let samples = SampleData::load(&[data.to_path_buf()]).unwrap().samples;
    let mut by_image: std::collections::BTreeMap<&str, Vec<&SampleRow>> = Default::default();
    for s in &samples {
        by_image.entry(s.image_id.as_str()).or_default().push(s);
    }
    let mut lines = Vec::new();
    for group in by_image.values() {
        for (k, s) in group.iter().enumerate() {
            let text = &group[(k + 1) % group.len()].text;
            let words: Vec<&str> = text.split_whitespace().collect();
            let caption = if k % 2 == 1 && words.len() > 3 {
                words[..words.len() - 2].join(" ")
            } else {
                text.clone()
            };
            lines.push(json!({"sample_id": s.sample_id, "caption": caption}).to_string());
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let captions = tmp.path().join("generated.jsonl");
    std::fs::write(&captions, lines.join("\n")).unwrap();
    let out = capflow(&[
        "eval",
        "controls",
        "--data",
        path_str(data),
        "--captions",
        path_str(&captions),
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ours["matched"].as_u64(), Some(samples.len() as u64));
    assert!(samples.len() > 150, "{}", samples.len());

    let oracle_out = tmp.path().join("oracle.json");
    let status = Command::new(python)
        .args([
            "-c",
            ORACLE_SCRIPT,
            path_str(data),
            path_str(&captions),
            path_str(&oracle_out),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let oracle: Value =
        serde_json::from_str(&std::fs::read_to_string(&oracle_out).unwrap()).unwrap();
    let bleu = ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4"];
    let mut pairs = vec![(
        "CIDEr-D",
        ours["cider_d"].as_f64(),
        oracle["cider"].as_f64(),
        1e-9,
    )];
    pairs.extend(bleu.iter().enumerate().map(|(n, &name)| {
        (
            name,
            ours["bleu"][n].as_f64(),
            oracle["bleu"][n].as_f64(),
            1e-9,
        )
    }));
    pairs.extend([
        // numpy's LAPACK SVD against one-sided Jacobi: the square roots of singular values
        // that are zero in exact arithmetic can differ by ~1e-8 between the two.
        (
            "self-CIDEr",
            ours["self_cider"].as_f64(),
            oracle["self_cider"].as_f64(),
            1e-6,
        ),
        ("D-1", ours["d1"].as_f64(), oracle["d1"].as_f64(), 1e-12),
        ("D-2", ours["d2"].as_f64(), oracle["d2"].as_f64(), 1e-12),
    ]);
    for (name, got, want, tol) in pairs {
        let (got, want) = (got.unwrap(), want.unwrap());
        eprintln!("{name}: capflow {got} pycocoevalcap {want}");
        assert!(close(got, want, tol), "{name}: {got} vs {want}");
    }
    assert_eq!(oracle["images_with_self_cider"], 20);
}
