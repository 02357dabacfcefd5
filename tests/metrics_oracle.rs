//! BLEU-1..4, CIDEr-D and the PTB tokenisation against pycocoevalcap 1.2: the expected values
//! in `fixtures/expected/coco_debug_bleu_cider.json` (made by
//! `oracles/make_expected_caption_metrics.py`) and pycocoevalcap run live on random corpora.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::cli::eval::evaluate_caption_files;
use capflow::metrics::{bleu, cider, EvalImage, Tokenizer};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const REFS: &str = "coco/tylin_debug_ref_imageid_to_captions.json";
const HYPS: &str = "coco/tylin_hypo_subset_for_debug_ref.json";
const EXPECTED: &str = "expected/coco_debug_bleu_cider.json";

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

/// The fixture's images, tokenised, in reference-file order (the order of the expected file).
fn fixture_images(fixtures: &Path, tokenizer: Tokenizer) -> Vec<EvalImage> {
    let refs = read_json(&fixtures.join(REFS));
    let hyps = read_json(&fixtures.join(HYPS));
    refs.as_object()
        .unwrap()
        .iter()
        .map(|(id, captions)| {
            let references = captions
                .as_array()
                .unwrap()
                .iter()
                .map(|c| tokenizer.tokenize(c.as_str().unwrap()))
                .collect();
            let hypothesis = tokenizer.tokenize(hyps[id][0].as_str().unwrap());
            EvalImage::new(id.clone(), hypothesis, references)
        })
        .collect()
}

fn check_against_expected(images: &[EvalImage], expected: &Value) {
    let b = bleu::corpus_bleu(images).unwrap();
    let c = cider::cider_d(images).unwrap();
    for k in 0..4 {
        let want = expected["bleu_corpus"][k].as_f64().unwrap();
        assert!(
            close(b.corpus[k], want, 1e-12),
            "BLEU-{} {} vs {want}",
            k + 1,
            b.corpus[k]
        );
    }
    let want = expected["cider_corpus"].as_f64().unwrap();
    assert!(close(c.corpus, want, 1e-12), "CIDEr {} vs {want}", c.corpus);
    for (i, image) in images.iter().enumerate() {
        let want_b4 = expected["bleu4_per_image"][&image.image_id]
            .as_f64()
            .unwrap();
        let want_c = expected["cider_per_image"][&image.image_id]
            .as_f64()
            .unwrap();
        assert!(
            close(b.per_image[i][3], want_b4, 1e-12),
            "{}",
            image.image_id
        );
        assert!(close(c.per_image[i], want_c, 1e-12), "{}", image.image_id);
    }
}

#[test]
fn whitespace_tokenised_fixture_matches_pycocoevalcap() {
    let Some(fixtures) = common::fixtures_dir() else {
        return;
    };
    let expected = read_json(&fixtures.join(EXPECTED));
    let images = fixture_images(&fixtures, Tokenizer::Whitespace);
    check_against_expected(&images, &expected["lower_whitespace"]);
    // The acceptance numbers quoted for this corpus.
    let c = cider::cider_d(&images).unwrap().corpus;
    let b4 = bleu::corpus_bleu(&images).unwrap().corpus[3];
    assert!(close(c, 0.82465, 5e-6) && close(b4, 0.18216, 5e-6));
}

#[test]
fn ptb_tokenised_fixture_matches_official_pipeline() {
    let Some(fixtures) = common::fixtures_dir() else {
        return;
    };
    let expected = &read_json(&fixtures.join(EXPECTED))["ptb_tokenized"];
    let images = fixture_images(&fixtures, Tokenizer::Ptb);
    for image in &images {
        let want_refs: Vec<&str> = expected["tokenized_refs"][&image.image_id]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let got_refs: Vec<String> = image.references.iter().map(|r| r.join(" ")).collect();
        assert_eq!(got_refs, want_refs);
        let want_hyp = expected["tokenized_hyps"][&image.image_id][0]
            .as_str()
            .unwrap();
        assert_eq!(image.hypothesis.join(" "), want_hyp);
    }
    check_against_expected(&images, expected);
}

fn run_cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::capflow_bin())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn cli_prints_pycocoevalcap_numbers_for_both_hypothesis_layouts() {
    let Some(fixtures) = common::fixtures_dir() else {
        return;
    };
    let expected = read_json(&fixtures.join(EXPECTED));
    let refs = fixtures.join(REFS);
    let hyps = fixtures.join(HYPS);
    // The same hypotheses as a COCO results list with numeric image ids.
    let dir = tempfile::tempdir().unwrap();
    let results: Vec<Value> = read_json(&hyps)
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, caps)| json!({"image_id": id.parse::<u64>().unwrap(), "caption": caps[0]}))
        .collect();
    let results_path = dir.path().join("results.json");
    std::fs::write(&results_path, serde_json::to_string(&results).unwrap()).unwrap();

    for (tokenizer, key) in [("whitespace", "lower_whitespace"), ("ptb", "ptb_tokenized")] {
        for hyp_file in [&hyps, &results_path] {
            let (code, stdout, stderr) = run_cli(&[
                "eval",
                "captions",
                "--refs",
                path_str(&refs),
                "--hyps",
                path_str(hyp_file),
                "--tokenize",
                tokenizer,
            ]);
            assert_eq!(code, 0, "{stderr}");
            let report: Value = serde_json::from_str(&stdout).unwrap();
            let want = &expected[key];
            for k in 0..4 {
                let got = report[format!("Bleu_{}", k + 1)].as_f64().unwrap();
                assert!(close(got, want["bleu_corpus"][k].as_f64().unwrap(), 1e-6));
            }
            let got = report["CIDEr"].as_f64().unwrap();
            assert!(close(got, want["cider_corpus"].as_f64().unwrap(), 1e-6));
            for key in ["D-1", "D-2"] {
                let d = report[key].as_f64().unwrap();
                assert!(d > 0.0 && d <= 1.0, "{key} = {d}");
            }
        }
    }
}

#[test]
fn cli_reports_malformed_input_with_file_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let refs = write(
        "refs.json",
        r#"{"1": ["a dog runs"], "2": ["a cat sleeps"]}"#,
    );
    let cases = [
        (
            write("two.json", r#"{"1": ["a dog", "a cat"]}"#),
            "exactly one caption",
        ),
        (write("broken.json", r#"{"1": ["a dog"#), "not valid JSON"),
        (
            write("missing.json", r#"[{"image_id": 3, "caption": "x"}]"#),
            "no references",
        ),
        (write("noid.json", r#"[{"caption": "x"}]"#), "image_id"),
        (write("scalar.json", "42"), "hypotheses must be"),
        (
            write(
                "dup.json",
                r#"[{"image_id": 1, "caption": "x"}, {"image_id": 1, "caption": "y"}]"#,
            ),
            "more than one caption",
        ),
    ];
    for (hyps, reason) in &cases {
        let (code, _, stderr) = run_cli(&[
            "eval",
            "captions",
            "--refs",
            path_str(&refs),
            "--hyps",
            path_str(hyps),
        ]);
        assert_eq!(code, 3, "{stderr}");
        assert!(stderr.contains(path_str(hyps)), "{stderr}");
        assert!(stderr.contains(reason), "{stderr}");
    }
    let bad_refs = write("badrefs.json", r#"{"1": "a dog"}"#);
    let hyps = write("hyps.json", r#"{"1": ["a dog"]}"#);
    let err = evaluate_caption_files(&bad_refs, &hyps, Tokenizer::Whitespace).unwrap_err();
    assert!(err.to_string().contains("badrefs.json"), "{err}");
    let (code, _, stderr) = run_cli(&[
        "eval",
        "captions",
        "--refs",
        "/nonexistent.json",
        "--hyps",
        path_str(&hyps),
    ]);
    assert_eq!(code, 4, "{stderr}");
}

/// pycocoevalcap's Bleu(4) and Cider on every corpus in `corpora.json`.
const PYCOCOEVALCAP_SCRIPT: &str = r#"
import contextlib, io, json, sys
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
out = []
for corpus in json.load(open(sys.argv[1])):
    gts, res = corpus['gts'], corpus['res']
    with contextlib.redirect_stdout(io.StringIO()):
        b, bs = Bleu(4).compute_score(gts, res)
    c, cs = Cider().compute_score(gts, res)
    out.append({'bleu': b, 'bleu_per_image': bs, 'cider': float(c), 'cider_per_image': [float(x) for x in cs]})
json.dump(out, open(sys.argv[2], 'w'))
"#;

fn random_caption(rng: &mut impl Rng, vocabulary: &[&str], min_len: usize) -> Vec<String> {
    let len = rng.gen_range(min_len..=12);
    (0..len)
        .map(|_| vocabulary.choose(rng).unwrap().to_string())
        .collect()
}

#[test]
fn random_corpora_match_live_pycocoevalcap() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20_191_020);
    let mut corpora = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..200 {
        // A small vocabulary so that n-grams overlap and repeat; now and then an empty
        // hypothesis. References are never empty (pycocoevalcap's Cider fails on a corpus
        // without any reference n-gram).
        let vocabulary: Vec<&str> = [
            "a", "dog", "cat", "on", "the", "red", "runs", "grass", "man", "sits", "bench", "two",
        ][..rng.gen_range(3..=12)]
            .to_vec();
        let images: Vec<EvalImage> = (0..rng.gen_range(1..=6))
            .map(|i| {
                let hyp_min = usize::from(!rng.gen_bool(0.05));
                let hypothesis = random_caption(&mut rng, &vocabulary, hyp_min);
                let references = (0..rng.gen_range(1..=5))
                    .map(|_| random_caption(&mut rng, &vocabulary, 1))
                    .collect();
                EvalImage::new(format!("{i}"), hypothesis, references)
            })
            .collect();
        let gts: serde_json::Map<String, Value> = images
            .iter()
            .map(|im| {
                let refs: Vec<String> = im.references.iter().map(|r| r.join(" ")).collect();
                (im.image_id.clone(), json!(refs))
            })
            .collect();
        let res: serde_json::Map<String, Value> = images
            .iter()
            .map(|im| (im.image_id.clone(), json!([im.hypothesis.join(" ")])))
            .collect();
        corpora.push(json!({"gts": gts, "res": res}));
        ours.push((
            bleu::corpus_bleu(&images).unwrap(),
            cider::cider_d(&images).unwrap(),
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("corpora.json");
    let output = dir.path().join("scores.json");
    std::fs::write(&input, serde_json::to_string(&corpora).unwrap()).unwrap();
    let status = Command::new(python)
        .args([
            "-c",
            PYCOCOEVALCAP_SCRIPT,
            path_str(&input),
            path_str(&output),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let oracle = read_json(&output);
    let mut worst = 0.0f64;
    for (i, (b, c)) in ours.iter().enumerate() {
        let o = &oracle[i];
        for k in 0..4 {
            worst = worst.max((b.corpus[k] - o["bleu"][k].as_f64().unwrap()).abs());
            for (j, per) in b.per_image.iter().enumerate() {
                worst = worst.max((per[k] - o["bleu_per_image"][k][j].as_f64().unwrap()).abs());
            }
        }
        worst = worst.max((c.corpus - o["cider"].as_f64().unwrap()).abs());
        for (j, per) in c.per_image.iter().enumerate() {
            worst = worst.max((per - o["cider_per_image"][j].as_f64().unwrap()).abs());
        }
    }
    eprintln!("largest difference from pycocoevalcap over 200 corpora: {worst:e}");
    assert!(worst <= 1e-9, "largest difference {worst:e}");
}

/// pycocoevalcap's PTBTokenizer (Stanford CoreNLP through `java`) on every caption of a list.
const PTB_SCRIPT: &str = r#"
import json, sys
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
caps = json.load(open(sys.argv[1]))
out = PTBTokenizer().tokenize({str(i): [{'caption': c}] for i, c in enumerate(caps)})
json.dump([out[str(i)][0] for i in range(len(caps))], open(sys.argv[2], 'w'))
"#;

fn java_available() -> bool {
    let found = Command::new("java")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CAPFLOW_REQUIRE_ORACLES").as_deref() != Ok("1"),
            "java is needed for the PTB tokenizer oracle and CAPFLOW_REQUIRE_ORACLES=1"
        );
        eprintln!("skipping: java not found (pycocoevalcap's PTBTokenizer needs it)");
    }
    found
}

#[test]
fn ptb_tokenizer_matches_stanford_ptbtokenizer() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    if !java_available() {
        return;
    }
    // Random captions built from the phenomena COCO captions contain: words, contractions,
    // possessives, numbers with separators, abbreviations, quotes, brackets and punctuation.
    let pieces = [
        "A",
        "dog",
        "Man",
        "the",
        "street",
        "is",
        "sitting",
        "T-shirt",
        "man-made",
        "black-and-white",
        "man-made",
        "black-and-white",
        "U.S.",
        "Mr.",
        "3:30",
        "1,000",
        "2.5",
        "dog's",
        "isn't",
        "can't",
        "they're",
        "we've",
        "I'll",
        "cannot",
        "gonna",
        "(red)",
        "[blue]",
        "\"big\"",
        "'quoted'",
        "dogs'",
        "'90s",
        "$5",
        "100%",
        "#1",
        "w/",
        "and/or",
        "e-mail",
        "x+y",
        "--",
        "...",
        "!!",
        "?!",
        "&",
    ];
    // Hyphens join only plain words here (inside the pieces): the PTB lexer's treatment of a
    // hyphen next to a contraction, number or symbol is not reproduced.
    let separators = [
        " ", " ", " ", ", ", ". ", "; ", ": ", "! ", "? ", " - ", " -- ",
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(341);
    let mut captions: Vec<String> = (0..300)
        .map(|_| {
            let mut caption = String::new();
            for i in 0..rng.gen_range(1..=10) {
                if i > 0 {
                    caption.push_str(separators.choose(&mut rng).unwrap());
                }
                caption.push_str(pieces.choose(&mut rng).unwrap());
            }
            if rng.gen_bool(0.7) {
                caption.push('.');
            }
            caption
        })
        .collect();
    captions.push("It\u{2019}s a dog\u{2019}s life.".to_string());
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("captions.json");
    let output = dir.path().join("tokens.json");
    std::fs::write(&input, serde_json::to_string(&captions).unwrap()).unwrap();
    let status = Command::new(python)
        .args(["-c", PTB_SCRIPT, path_str(&input), path_str(&output)])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let oracle = read_json(&output);
    let mismatches: Vec<String> = captions
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let ours = Tokenizer::Ptb.tokenize(c).join(" ");
            let want = oracle[i].as_str().unwrap();
            (ours != want).then(|| format!("{c:?}: ours {ours:?}, PTB {want:?}"))
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        captions.len(),
        mismatches.join("\n")
    );
}

/// numpy's singular values of every matrix in `matrices.json`, sorted descending.
const SVD_SCRIPT: &str = r#"
import json, sys
import numpy as np
mats = json.load(open(sys.argv[1]))
json.dump([sorted(np.linalg.svd(np.array(m), compute_uv=False).tolist(), reverse=True) for m in mats], open(sys.argv[2], 'w'))
"#;

#[test]
fn self_cider_singular_values_match_numpy() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2019);
    // Random kernels of 2..12 captions, some of low rank (repeated rows) as near-duplicate
    // captions produce, some non-symmetric as CIDEr-D's clipping does.
    let matrices: Vec<Vec<Vec<f64>>> = (0..60)
        .map(|t| {
            let m = rng.gen_range(2..=12);
            let mut k: Vec<Vec<f64>> = (0..m)
                .map(|_| (0..m).map(|_| rng.gen_range(0.0..10.0)).collect())
                .collect();
            if t % 3 == 0 {
                for i in 1..m {
                    if rng.gen_bool(0.5) {
                        k[i] = k[0].clone();
                    }
                }
            }
            k
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("matrices.json");
    let output = dir.path().join("singular.json");
    std::fs::write(&input, serde_json::to_string(&matrices).unwrap()).unwrap();
    let status = Command::new(python)
        .args(["-c", SVD_SCRIPT, path_str(&input), path_str(&output)])
        .status()
        .unwrap();
    assert!(status.success());
    let oracle = read_json(&output);
    for (t, k) in matrices.into_iter().enumerate() {
        let mut ours = capflow::metrics::diversity::singular_values(k);
        ours.sort_by(|a, b| b.total_cmp(a));
        let largest = ours[0];
        for (i, s) in ours.iter().enumerate() {
            let want = oracle[t][i].as_f64().unwrap();
            assert!(
                (s - want).abs() <= 1e-10 * largest,
                "matrix {t}: {s} vs {want}"
            );
        }
    }
}
