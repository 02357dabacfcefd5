//! Smatch of the built-in caption parser against hand-made gold AMRs.
//!
//! - the sample captions of the images in `examples/data/flickr30k_entities/{val,test}.txt`
//!   (30 captions, held out: the frame lexicon and the rules were developed on the 70 captions
//!   of the train images, which are printed too);
//! - the Little Prince AMR bank v3.0 sentences of at most 10 tokens (`$CAPFLOW_FIXTURES`, held
//!   out: the frame lexicon uses only the longer sentences).
//!
//! Corpus-level Smatch (matched triples summed over the graphs, as `smatch.py` reports it),
//! cross-checked on the held-out captions against pip `smatch` 1.0.4 (`oracle_smatch.py`).
//! With `CAPFLOW_PARSE_SHOW=1` each sentence's F and both graphs are printed. Also the
//! `capflow amr parse-text` command on the three input layouts and on broken input.

mod common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;

use capflow::amr::parse::parse_caption;
use capflow::amr::penman::{encode, parse_many};
use capflow::amr::smatch::{compute_f, smatch, SmatchOptions};
use capflow::amr::Graph;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn gold_graphs(path: &PathBuf) -> Vec<Graph> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_many(&text)
        .into_iter()
        .map(|b| {
            b.graph
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

/// (precision, recall, F) of the parser over the graphs, summed over triples.
fn score(name: &str, gold: &[&Graph]) -> (f64, f64, f64) {
    let show = std::env::var_os("CAPFLOW_PARSE_SHOW").is_some();
    let options = SmatchOptions::default();
    let (mut matched, mut test_total, mut gold_total) = (0, 0, 0);
    for g in gold {
        let snt = g.meta("snt").expect("gold graphs have # ::snt");
        let parsed = parse_caption(snt);
        let s = smatch(&parsed, g, &options);
        matched += s.matched;
        test_total += s.test_total;
        gold_total += s.gold_total;
        if show {
            println!(
                "--- {name} F {:.3}: {snt}\n{}\n{}",
                s.f1(),
                encode(&parsed),
                encode(g)
            );
        }
    }
    let prf = compute_f(matched, test_total, gold_total);
    println!(
        "{name}: {} graphs, Smatch P {:.4} R {:.4} F {:.4} ({matched} of {test_total} parsed / {gold_total} gold triples)",
        gold.len(),
        prf.0,
        prf.1,
        prf.2
    );
    prf
}

fn split_images(file: &str) -> HashSet<String> {
    std::fs::read_to_string(repo(&format!("examples/data/flickr30k_entities/{file}")))
        .expect("split file")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn image_of(g: &Graph) -> String {
    g.id()
        .unwrap_or_default()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn smatch_on_sample_captions() {
    let gold = gold_graphs(&repo("examples/data/amr/captions.amr"));
    let mut held_out = split_images("val.txt");
    held_out.extend(split_images("test.txt"));
    let (test, dev): (Vec<&Graph>, Vec<&Graph>) =
        gold.iter().partition(|g| held_out.contains(&image_of(g)));
    assert_eq!((test.len(), dev.len()), (30, 70));
    let (_, _, dev_f) = score("sample captions, development (train images)", &dev);
    let (_, _, test_f) = score("sample captions, held out (val+test images)", &test);
    let (_, _, all_f) = score("sample captions, all", &gold.iter().collect::<Vec<_>>());
    assert!(
        test_f >= FLOOR_HELD_OUT,
        "held-out Smatch F {test_f:.4} < {FLOOR_HELD_OUT}"
    );
    assert!(
        dev_f >= FLOOR_DEV,
        "development Smatch F {dev_f:.4} < {FLOOR_DEV}"
    );
    assert!(all_f > 0.0);
}

#[test]
fn smatch_on_little_prince_short_sentences() {
    let Some(fixtures) = std::env::var_os("CAPFLOW_FIXTURES") else {
        eprintln!("CAPFLOW_FIXTURES is not set: skipping the Little Prince measurement");
        return;
    };
    let gold = gold_graphs(&PathBuf::from(fixtures).join("amr/little_prince_v3.0.txt"));
    let short: Vec<&Graph> = gold
        .iter()
        .filter(|g| {
            g.meta("snt")
                .is_some_and(|s| s.split_whitespace().count() <= 10)
        })
        .collect();
    assert!(short.len() > 400, "{} short sentences", short.len());
    let (_, _, f) = score("Little Prince v3.0, sentences of <= 10 tokens", &short);
    assert!(
        f >= FLOOR_LITTLE_PRINCE,
        "Little Prince Smatch F {f:.4} < {FLOOR_LITTLE_PRINCE}"
    );
}

const FLOOR_HELD_OUT: f64 = 0.80;
const FLOOR_DEV: f64 = 0.88;
const FLOOR_LITTLE_PRINCE: f64 = 0.50;

fn held_out_gold() -> Vec<Graph> {
    let mut held_out = split_images("val.txt");
    held_out.extend(split_images("test.txt"));
    gold_graphs(&repo("examples/data/amr/captions.amr"))
        .into_iter()
        .filter(|g| held_out.contains(&image_of(g)))
        .collect()
}

/// pip smatch (hill-climbing) on the same pairs finds at most the matches capflow's exact
/// Smatch proves optimal, and the corpus F of the two agree closely.
#[test]
fn smatch_agrees_with_pip_smatch_on_held_out_captions() {
    let (Some(python), Some(oracles)) = (common::oracle_python(), common::oracles_dir()) else {
        return;
    };
    let gold = held_out_gold();
    let parsed: Vec<Graph> = gold
        .iter()
        .map(|g| parse_caption(g.meta("snt").unwrap_or_default()))
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, graphs: &[Graph]| {
        let path = dir.path().join(name);
        let text: Vec<String> = graphs.iter().map(encode).collect();
        std::fs::write(&path, text.join("\n\n") + "\n").expect("write graphs");
        path
    };
    let (test_file, gold_file) = (write("test.amr", &parsed), write("gold.amr", &gold));
    let out = Command::new(python)
        .arg(oracles.join("oracle_smatch.py"))
        .args([&test_file, &gold_file])
        .output()
        .expect("run oracle_smatch.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let options = SmatchOptions::default();
    let (mut matched, mut tests, mut golds) = (0, 0, 0);
    for (i, (p, g)) in parsed.iter().zip(&gold).enumerate() {
        let ours = smatch(p, g, &options);
        let row = &rows[i];
        let theirs: usize = row[4].parse().expect("match count");
        assert_eq!(
            row[5].parse::<usize>().ok(),
            Some(ours.test_total),
            "pair {i}: {row:?}"
        );
        assert_eq!(
            row[6].parse::<usize>().ok(),
            Some(ours.gold_total),
            "pair {i}: {row:?}"
        );
        assert!(
            theirs <= ours.matched,
            "pair {i}: pip smatch {theirs} > {}",
            ours.matched
        );
        matched += ours.matched;
        tests += ours.test_total;
        golds += ours.gold_total;
    }
    let (_, _, ours_f) = compute_f(matched, tests, golds);
    let theirs_f: f64 = rows
        .last()
        .and_then(|r| {
            r.iter()
                .rev()
                .find_map(|x| x.parse::<f64>().ok().filter(|f| *f <= 1.0))
        })
        .expect("document F");
    println!("held-out captions: capflow Smatch F {ours_f:.4}, pip smatch 1.0.4 F {theirs_f:.4}");
    assert!(
        (ours_f - theirs_f).abs() < 0.01,
        "{ours_f} vs {theirs_f}\n{stdout}"
    );
}

fn capflow(args: &[&str]) -> std::process::Output {
    Command::new(common::capflow_bin())
        .args(args)
        .output()
        .expect("run capflow")
}

/// The gold AMRs' captions come back parsed with the same ids, from the Flickr30k Entities
/// markup and from the COCO captions JSON alike.
#[test]
fn parse_text_reads_flickr_sentences_and_coco_captions() {
    let sentences = repo("examples/data/flickr30k_entities/Sentences/1000001.txt");
    let out = capflow(&["amr", "parse-text", sentences.to_str().expect("utf-8 path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let graphs = parse_many(&String::from_utf8_lossy(&out.stdout));
    let ids: Vec<String> = graphs
        .iter()
        .map(|b| {
            b.graph
                .as_ref()
                .expect("valid PENMAN")
                .id()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        ids,
        [
            "1000001.0",
            "1000001.1",
            "1000001.2",
            "1000001.3",
            "1000001.4"
        ]
    );
    let first = graphs[0].graph.as_ref().expect("valid PENMAN");
    assert_eq!(
        first.meta("snt"),
        Some("A young man rides a bicycle down a city street .")
    );
    assert!(first.meta("tok").is_some());
    assert!(!first.alignments.is_empty());

    let coco = repo("examples/data/coco/captions.json");
    let out = capflow(&[
        "amr",
        "parse-text",
        "--json",
        coco.to_str().expect("utf-8 path"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 100);
    assert_eq!(lines[0]["id"], "10000010");
    assert_eq!(
        lines[0]["snt"],
        "A young man rides a bicycle down a city street."
    );
    assert!(lines[0]["triples"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
}

/// Bad lines are named on stderr with file, line and reason; the good ones are still written
/// and the command exits 3.
#[test]
fn parse_text_reports_bad_captions_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("captions.txt");
    std::fs::write(
        &input,
        b"A dog runs .\n\n. . .\nA cat [/EN#1/animals sleeps\n\xff\xfe\nTwo men fish .\n",
    )
    .expect("write input");
    let output = dir.path().join("out.amr");
    let out = capflow(&[
        "amr",
        "parse-text",
        input.to_str().expect("utf-8 path"),
        "--out",
        output.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "captions.txt: line 3, id captions.1: the caption has no word to parse",
        "captions.txt: line 4, id captions.2: Flickr30k Entities markup",
        "captions.txt: line 5, id captions.3: the line is not UTF-8",
        "3 of 5 captions",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in\n{stderr}");
    }
    let written = std::fs::read_to_string(&output).expect("output written");
    let ids: Vec<String> = parse_many(&written)
        .iter()
        .map(|b| {
            b.graph
                .as_ref()
                .expect("valid PENMAN")
                .id()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(ids, ["captions.0", "captions.4"]);
}
