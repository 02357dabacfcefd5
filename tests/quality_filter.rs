//! The built-in quality scorer filters: on real captions it has not seen, mixed with
//! corruptions of kinds it was not trained on, it ranks the real ones above the broken ones
//! (ROC-AUC) and SSA's threshold of 0.7 keeps the real ones and drops the broken ones. On the
//! SSA recipes' output, the broken sentences the old scorer let through are gone while
//! fluent SSA sentences stay.
//!
//! The corruptions here are written for this test and differ from the scorer's training
//! corruptions (`select::quality::corrupt`: shuffles, dropped and doubled words, agreement
//! errors, role swaps, function-word openings, verb forms in noun slots, words inserted from
//! another caption, a word moved two or more words away, a caption cut off after a word): words
//! replaced by random vocabulary words, two captions spliced after a determiner, determiners
//! and prepositions exchanged for each other, adjacent words transposed, and every determiner
//! and preposition left out.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::path::Path;
use std::process::Command;

use capflow::export::read_table;
use capflow::schema::{batch_to_rows, SampleRow, TableKind};
use capflow::select::quality::{BuiltinQualityScorer, QualityConfig, QualityScorer, FEATURE_NAMES};
use capflow::text::tokenize::{is_punctuation, tokenize};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

/// SSA's threshold in the recipes (`quality_threshold` of `dataflows/ssa-*.toml`).
const THRESHOLD: f64 = 0.7;

/// Caption strings of a COCO annotations file or results list.
fn coco_captions(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: Value = serde_json::from_str(&text).unwrap();
    let records = match &json {
        Value::Array(records) => records.clone(),
        Value::Object(object) => object["annotations"].as_array().unwrap().clone(),
        _ => panic!("{}: neither a list nor an object", path.display()),
    };
    records
        .iter()
        .map(|r| r["caption"].as_str().unwrap().to_string())
        .collect()
}

/// Flickr30k Entities sentences of every `*.txt` in `dir`, markup removed.
fn flickr_captions(dir: &Path) -> Vec<String> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    let mut captions = Vec::new();
    for file in files {
        for line in fs::read_to_string(&file).unwrap().lines() {
            if line.trim().is_empty() {
                continue;
            }
            let words: Vec<&str> = line
                .split_whitespace()
                .filter(|w| !w.starts_with("[/EN#"))
                .map(|w| w.trim_end_matches(']'))
                .collect();
            captions.push(words.join(" "));
        }
    }
    captions
}

/// Every real caption: the embedded Flickr30k Entities and COCO samples and the Flickr30k and
/// COCO caption fixtures, tokenized, each distinct caption once.
fn real_captions(fixtures: &Path) -> Vec<Vec<String>> {
    let root = common::repo_root();
    let mut texts = flickr_captions(&root.join("examples/data/flickr30k_entities/Sentences"));
    texts.extend(coco_captions(
        &root.join("examples/data/coco/captions.json"),
    ));
    texts.extend(flickr_captions(
        &fixtures.join("flickr30k_entities/Sentences"),
    ));
    for file in [
        "coco/minyus_captions_val2014.json_samples.json",
        "coco/minyus_captions_val2017.json_samples.json",
        "coco/captions_val2014_fakecap_results.json",
    ] {
        texts.extend(coco_captions(&fixtures.join(file)));
    }
    let mut seen = HashSet::new();
    texts
        .iter()
        .map(|t| tokenize(t))
        .filter(|t| t.iter().filter(|w| !is_punctuation(w)).count() >= 3)
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

const DETERMINERS: &[&str] = &["a", "an", "the", "two", "some", "his", "her", "their"];
const PREPOSITIONS: &[&str] = &["in", "on", "at", "with", "of", "near", "under", "by", "to"];

fn word_positions(tokens: &[String]) -> Vec<usize> {
    (0..tokens.len())
        .filter(|&i| !is_punctuation(&tokens[i]))
        .collect()
}

/// The held-out corruption kinds.
#[derive(Debug, Clone, Copy)]
enum Broken {
    /// Two words replaced by random words of the vocabulary.
    RandomWords,
    /// A caption up to a determiner, then another caption from a determiner or preposition.
    Splice,
    /// A determiner replaced by a preposition or a preposition by a determiner, twice.
    DeterminerPreposition,
    /// Two pairs of adjacent words transposed.
    Transpose,
    /// Every determiner and preposition left out ("man rides bike street").
    Telegraphic,
}

const KINDS: [Broken; 5] = [
    Broken::RandomWords,
    Broken::Splice,
    Broken::DeterminerPreposition,
    Broken::Transpose,
    Broken::Telegraphic,
];

fn break_caption(
    kind: Broken,
    tokens: &[String],
    other: &[String],
    vocabulary: &[String],
    rng: &mut ChaCha8Rng,
) -> Option<Vec<String>> {
    let words = word_positions(tokens);
    let mut out = tokens.to_vec();
    match kind {
        Broken::RandomWords => {
            for &i in words.choose_multiple(rng, 2) {
                out[i] = vocabulary.choose(rng)?.clone();
            }
        }
        Broken::Splice => {
            let cuts: Vec<usize> = words[..words.len() - 1]
                .iter()
                .copied()
                .filter(|&i| matches!(tokens[i].as_str(), "a" | "an" | "the"))
                .collect();
            let starts: Vec<usize> = (1..other.len())
                .filter(|&i| {
                    DETERMINERS.contains(&other[i].as_str())
                        || PREPOSITIONS.contains(&other[i].as_str())
                })
                .collect();
            let cut = *cuts.choose(rng)?;
            let start = *starts.choose(rng)?;
            out = tokens[..=cut].to_vec();
            out.extend_from_slice(&other[start..]);
        }
        Broken::DeterminerPreposition => {
            let slots: Vec<usize> = words
                .iter()
                .copied()
                .filter(|&i| {
                    DETERMINERS.contains(&tokens[i].as_str())
                        || PREPOSITIONS.contains(&tokens[i].as_str())
                })
                .collect();
            if slots.len() < 2 {
                return None;
            }
            for &i in slots.choose_multiple(rng, 2) {
                let pool = if DETERMINERS.contains(&tokens[i].as_str()) {
                    PREPOSITIONS
                } else {
                    DETERMINERS
                };
                out[i] = pool.choose(rng)?.to_string();
            }
        }
        Broken::Transpose => {
            let pairs: Vec<usize> = (0..words.len() - 1)
                .filter(|&k| {
                    words[k + 1] == words[k] + 1 && tokens[words[k]] != tokens[words[k] + 1]
                })
                .map(|k| words[k])
                .collect();
            let first = *pairs.choose(rng)?;
            out.swap(first, first + 1);
            let second: Vec<usize> = pairs
                .iter()
                .copied()
                .filter(|&i| i + 1 < first || i > first + 1)
                .collect();
            if let Some(&i) = second.choose(rng) {
                out.swap(i, i + 1);
            }
        }
        Broken::Telegraphic => {
            out.retain(|t| {
                !DETERMINERS.contains(&t.as_str()) && !PREPOSITIONS.contains(&t.as_str())
            });
            if tokens.len() - out.len() < 2 || word_positions(&out).len() < 2 {
                return None;
            }
        }
    }
    (out != tokens).then_some(out)
}

#[test]
fn held_out_corruptions_each_break_the_caption() {
    let tokens = tokenize("a young man rides a bike on the street near a park .");
    let other = tokenize("two dogs play with a ball in the snow .");
    let vocabulary: Vec<String> = ["zebra", "quickly", "blue"].map(String::from).to_vec();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for kind in KINDS {
        let broken = break_caption(kind, &tokens, &other, &vocabulary, &mut rng).unwrap();
        assert_ne!(broken, tokens, "{kind:?}");
        if let Broken::Telegraphic = kind {
            assert_eq!(broken.join(" "), "young man rides bike street park .");
        }
    }
}

#[test]
fn scorer_separates_real_captions_from_unseen_kinds_of_corruption() {
    let Some(fixtures) = common::fixtures_dir() else {
        return;
    };
    let captions = real_captions(&fixtures);
    // Every fourth caption is held out of fitting: the real half of the test mix.
    let (test, fit): (Vec<_>, Vec<_>) = captions
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 4 == 3);
    let fit: Vec<Vec<String>> = fit.into_iter().map(|(_, c)| c).collect();
    let test: Vec<Vec<String>> = test.into_iter().map(|(_, c)| c).collect();
    let scorer = BuiltinQualityScorer::train(&fit, &QualityConfig::default()).unwrap();
    assert_eq!(scorer.threshold(), THRESHOLD);

    let vocabulary: Vec<String> = fit
        .iter()
        .flatten()
        .filter(|w| !is_punctuation(w))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(20_261_127);
    let real: Vec<f64> = test.iter().map(|c| scorer.score(c)).collect();
    let kept = |scores: &[f64]| {
        scores.iter().filter(|&&s| s > THRESHOLD).count() as f64 / scores.len() as f64
    };
    let mut all_broken = Vec::new();
    let mut report = Vec::new();
    for kind in KINDS {
        let mut broken = Vec::new();
        for (i, caption) in test.iter().enumerate() {
            let other = &test[(i * 7 + 3) % test.len()];
            if let Some(b) = break_caption(kind, caption, other, &vocabulary, &mut rng) {
                broken.push(scorer.score(&b));
            }
        }
        let auc = common::roc_auc(&real, &broken);
        let dropped = 1.0 - kept(&broken);
        report.push((kind, broken.len(), auc, dropped));
        all_broken.extend(broken);
    }
    let auc = common::roc_auc(&real, &all_broken);
    let real_kept = kept(&real);
    let broken_dropped = 1.0 - kept(&all_broken);
    println!(
        "fitted on {} captions; held out {} real, {} broken",
        fit.len(),
        real.len(),
        all_broken.len()
    );
    for (kind, n, auc, dropped) in &report {
        println!("  {kind:?}: {n} broken, ROC-AUC {auc:.4}, dropped at {THRESHOLD}: {dropped:.3}");
    }
    println!(
        "mix: ROC-AUC {auc:.4}; at {THRESHOLD}: real kept {real_kept:.3}, broken dropped \
         {broken_dropped:.3}"
    );
    let (weights, bias) = scorer.weights();
    for (name, weight) in FEATURE_NAMES.iter().zip(weights) {
        println!("  weight {weight:+.3}  {name}");
    }
    println!("  bias {bias:+.3}");
    // The goals (docs/quality.md): ROC-AUC ≥ 0.95, and at the threshold ≥ 90 % of the real
    // captions kept and ≥ 90 % of the broken ones dropped.
    assert!(auc >= 0.95, "ROC-AUC {auc}");
    assert!(real_kept >= 0.90, "real kept {real_kept}");
    assert!(broken_dropped >= 0.90, "broken dropped {broken_dropped}");
}

/// Sentences the scorer of a plain language model let through on the embedded Flickr30k data.
/// The shuffled "A kick boy ball ." still scores above the threshold when the scorer is fitted on
/// those 100 captions alone (docs/quality.md); its score is printed. None of the five is among
/// the SSA samples of the recipes, from AMRs or from text.
const QUOTED: [&str; 3] = [
    "Two dogs with a dog are happy .",
    "And eat a lunch .",
    "Running has a tree .",
];
const MISSED: &str = "A kick boy ball .";
const ISSUE_QUOTED: [&str; 5] = [
    QUOTED[0],
    QUOTED[1],
    QUOTED[2],
    MISSED,
    "A grass kicks a ball .",
];

#[test]
fn quoted_broken_sentences_score_below_the_threshold() {
    let root = common::repo_root();
    let captions: Vec<Vec<String>> =
        flickr_captions(&root.join("examples/data/flickr30k_entities/Sentences"))
            .iter()
            .map(|c| tokenize(c))
            .collect();
    let scorer = BuiltinQualityScorer::train(&captions, &QualityConfig::default()).unwrap();
    for sentence in QUOTED {
        let score = scorer.score(&tokenize(sentence));
        println!("{score:.3}  {sentence}");
        assert!(score <= THRESHOLD, "{sentence:?} scores {score}");
    }
    println!(
        "{:.3}  {MISSED}  (known miss)",
        scorer.score(&tokenize(MISSED))
    );
}

fn ssa_sentences(spec: &str, out: &Path) -> Vec<String> {
    let output = Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .args(["run", spec, "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{spec}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    read_table(out, TableKind::Samples)
        .unwrap()
        .flat_map(|b| batch_to_rows::<SampleRow>(&b.unwrap()).unwrap())
        .filter(|s| s.method == "ssa")
        .map(|s| s.text)
        .collect()
}

/// Floors just below what the recipes keep (docs/quality.md): fluent SSA sentences survive.
#[test]
fn ssa_recipes_keep_fluent_sentences_and_drop_the_quoted_ones() {
    let tmp = tempfile::tempdir().unwrap();
    for (spec, floor) in [
        ("dataflows/ssa-flickr30k.toml", 100),
        ("dataflows/ssa-coco.toml", 55),
        ("dataflows/ssa-flickr30k-text.toml", 100),
        ("dataflows/ssa-coco-text.toml", 45),
    ] {
        let sentences = ssa_sentences(spec, &tmp.path().join(spec.replace('/', "_")));
        println!("{spec}: {} SSA samples", sentences.len());
        let kept: Vec<&str> = ISSUE_QUOTED
            .into_iter()
            .filter(|quoted| sentences.iter().any(|s| s.eq_ignore_ascii_case(quoted)))
            .collect();
        assert!(kept.is_empty(), "{spec} keeps {kept:?}");
        assert!(
            sentences.len() >= floor,
            "{spec}: only {} SSA samples",
            sentences.len()
        );
    }
}

#[test]
fn quality_score_command_prints_one_score_per_line() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("sentences.txt");
    fs::write(
        &file,
        "A dog runs on the beach .\n\nbeach the on runs dog A .\n",
    )
    .unwrap();
    let output = Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .args(["quality", "score", "--fit"])
        .arg("examples/data/flickr30k_entities/Sentences")
        .args(["--fit", "examples/data/coco/captions.json"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let scores: Vec<f64> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(scores.len(), 3, "{scores:?}");
    assert!(
        scores[0] > THRESHOLD && scores[2] <= THRESHOLD,
        "{scores:?}"
    );
    assert_eq!(scores[1], 0.0);

    let missing = Command::new(common::capflow_bin())
        .args(["quality", "score", "--fit"])
        .arg(tmp.path().join("no-such-corpus.txt"))
        .arg(&file)
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such-corpus.txt"));
}
