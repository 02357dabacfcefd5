//! Smatch of the built-in caption parser against hand-made gold AMRs.
//!
//! - the sample captions of the images in `examples/data/flickr30k_entities/{val,test}.txt`
//!   (30 captions, held out: the frame lexicon and the rules were developed on the 70 captions
//!   of the train images, which are printed too);
//! - the Little Prince AMR bank v3.0 sentences of at most 10 tokens (`$CAPFLOW_FIXTURES`, held
//!   out: the frame lexicon uses only the longer sentences).
//!
//! Corpus-level Smatch (matched triples summed over the graphs, as `smatch.py` reports it).
//! With `CAPFLOW_PARSE_SHOW=1` each sentence's F and both graphs are printed.

use std::collections::HashSet;
use std::path::PathBuf;

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
