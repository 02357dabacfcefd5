//! Visual relatedness against the authors' reference example and independent oracles.
//!
//! - Re-ranking: the reference example (`fixtures/relatedness/pre-trained_*`, from
//!   ahmedssabir/Textual-Visual-Semantic-Dataset) ships `sim ^ P(c)` scores, P(c) and the sorted
//!   output, but not the similarities themselves. `model.py` printed each SBERT similarity from a
//!   float32 numpy array (`str(array)`, at most 8 decimals) and raised `float()` of that text to
//!   P(c); the similarities below were recovered as `round(score ** (1 / P), 8)`, and the oracle
//!   confirms that Python's `pow` of each gives the published score bit for bit. capflow must then
//!   reproduce the published files byte for byte.
//! - TSV: `data_train.tsv` reads and writes back byte for byte; fresh files parse with Python's
//!   `csv` into the same header and well-formed rows.
//! - Search: Recall@K and rankings equal a numpy brute-force search.
//! - SIF: similarities equal a numpy implementation on the gensim GloVe sample.
//! - Gender: counts on the released pairs equal an independent count.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::augment::relatedness::gender::{gender_cooccurrence, GenderLexicon};
use capflow::augment::relatedness::rerank::{
    format_ranked, format_scored, parse_scored_line, read_numbers, read_reference_lines, rerank,
    rerank_score, score_candidates, Candidate,
};
use capflow::augment::relatedness::search::{recall_at_k, CaptionIndex};
use capflow::augment::relatedness::sif::{content_tokens, SentenceEncoder, SifEncoder};
use capflow::augment::relatedness::tsv::{read_pairs, read_train, write_train, TRAIN_HEADER};
use capflow::augment::relatedness::{RelatednessConfig, RelatednessModel, RelatednessStats};
use capflow::augment::ImageAnnotations;
use capflow::ingest::{read_input, Format, VecSink};
use capflow::text::{VectorFormat, WordVectors};
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// SBERT similarities of the reference example, in caption order (see the module comment).
const REFERENCE_SIMILARITIES: [&str; 9] = [
    "0.47191364",
    "0.50430685",
    "0.56281435",
    "0.46205348",
    "0.48925",
    "0.49477386",
    "0.4716114",
    "0.46836817",
    "0.4485305",
];

fn relatedness_fixture(name: &str) -> Option<PathBuf> {
    common::fixture(&format!("relatedness/{name}"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn oracle(args: &[&str]) -> Option<Value> {
    let python = common::oracle_python()?;
    let script = common::repo_root().join("tests/oracles/relatedness_oracle.py");
    let output = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .expect("run oracle script");
    assert!(
        output.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).expect("oracle JSON"))
}

fn capflow(args: &[&str]) -> std::process::Output {
    Command::new(common::capflow_bin())
        .args(args)
        .output()
        .expect("run capflow")
}

fn write_similarities(dir: &Path) -> PathBuf {
    let path = dir.join("sim.txt");
    std::fs::write(&path, REFERENCE_SIMILARITIES.join("\n") + "\n").expect("write similarities");
    path
}

#[test]
fn recovered_similarities_give_the_published_scores_in_python() {
    let Some(prob) = relatedness_fixture("pre-trained_visual-context_prob.txt") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let sims = write_similarities(dir.path());
    let Some(scores) = oracle(&[
        "pow",
        sims.to_str().expect("utf-8"),
        prob.to_str().expect("utf-8"),
    ]) else {
        return;
    };
    let published =
        read(&relatedness_fixture("pre-trained_Visual_re-ranker.txt").expect("fixture"));
    let published: Vec<&str> = published
        .lines()
        .map(|l| l.rsplit_once(',').expect("caption,score").1)
        .collect();
    let scores: Vec<&str> = scores
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s.as_str().expect("repr"))
        .collect();
    assert_eq!(scores, published);
}

#[test]
fn rerank_reproduces_the_reference_scores_and_order() {
    let Some(dir) = common::fixtures_dir().map(|d| d.join("relatedness")) else {
        return;
    };
    let captions = read_reference_lines(&dir.join("pre-trained_caption.txt")).expect("captions");
    let confidences =
        read_numbers(&dir.join("pre-trained_visual-context_prob.txt")).expect("probabilities");
    assert_eq!(captions.len(), 9);
    let candidates: Vec<Candidate> = captions
        .iter()
        .zip(REFERENCE_SIMILARITIES)
        .zip(&confidences)
        .map(|((caption, sim), &confidence)| Candidate {
            caption: caption.clone(),
            similarity: sim.parse().expect("number"),
            confidence,
        })
        .collect();
    let scored = score_candidates(&candidates);
    let ranked = rerank(&scored);

    // Scores equal the published values exactly, caption for caption.
    let published = read(&dir.join("pre-trained_Visual_re-ranker.txt"));
    for (line, ours) in published.lines().zip(&scored) {
        let (caption, score) = parse_scored_line(line, ',').expect("caption,score");
        assert_eq!(caption, ours.caption);
        assert_eq!(score.to_bits(), ours.score.to_bits(), "{caption}");
    }
    // The published order, and both files byte for byte.
    let order = read(&dir.join("pre-trained_Visual_re-rank_re-ranked_output.txt"));
    let expected: Vec<(String, f64)> = order
        .lines()
        .map(|l| parse_scored_line(l, ' ').expect("caption score"))
        .collect();
    let ours: Vec<(String, f64)> = ranked
        .iter()
        .map(|c| (c.caption.clone(), c.score))
        .collect();
    assert_eq!(ours, expected);
    assert_eq!(format_scored(&scored), published);
    assert_eq!(format_ranked(&ranked), order);
}

#[test]
fn rerank_command_writes_the_reference_files() {
    let Some(dir) = common::fixtures_dir().map(|d| d.join("relatedness")) else {
        return;
    };
    let out = tempfile::tempdir().expect("temp dir");
    let sims = write_similarities(out.path());
    let target = out.path().join("ranked");
    let path = |name: &str| dir.join(name).to_str().expect("utf-8").to_string();
    let result = capflow(&[
        "relatedness",
        "rerank",
        "--captions",
        &path("pre-trained_caption.txt"),
        "--visual",
        &path("pre-trained_visual-context_label.txt"),
        "--prob",
        &path("pre-trained_visual-context_prob.txt"),
        "--sim",
        sims.to_str().expect("utf-8"),
        "--image-id",
        "24343",
        "--out",
        target.to_str().expect("utf-8"),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    for (ours, theirs) in [
        ("Visual_re-ranker.txt", "pre-trained_Visual_re-ranker.txt"),
        (
            "Visual_re-rank_re-ranked_output.txt",
            "pre-trained_Visual_re-rank_re-ranked_output.txt",
        ),
    ] {
        assert_eq!(read(&target.join(ours)), read(&dir.join(theirs)), "{ours}");
    }
    assert_eq!(
        read(&target.join("sample_best.json")),
        read(&dir.join("pre-trained_sample_best.json"))
    );

    // Files that do not line up are refused with the file named.
    let short = out.path().join("short.txt");
    std::fs::write(&short, "0.2\n").expect("write");
    let result = capflow(&[
        "relatedness",
        "rerank",
        "--captions",
        &path("pre-trained_caption.txt"),
        "--visual",
        &path("pre-trained_visual-context_label.txt"),
        "--prob",
        short.to_str().expect("utf-8"),
        "--sim",
        sims.to_str().expect("utf-8"),
    ]);
    assert_eq!(result.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("short.txt") && stderr.contains("parallel"),
        "{stderr}"
    );
}

#[test]
fn negative_similarities_score_as_python_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sims = [-0.5, -0.123456789, -1.0, 0.0, 0.75];
    let probs = [0.203588580197762, 0.7, 0.35, 0.5, 0.25];
    let write = |name: &str, values: &[f64]| {
        let path = dir.path().join(name);
        let text: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        std::fs::write(&path, text.join("\n")).expect("write");
        path
    };
    let (sim_path, prob_path) = (write("sim.txt", &sims), write("prob.txt", &probs));
    let Some(expected) = oracle(&[
        "pow",
        sim_path.to_str().expect("utf-8"),
        prob_path.to_str().expect("utf-8"),
    ]) else {
        return;
    };
    for ((sim, prob), expected) in sims
        .iter()
        .zip(probs)
        .zip(expected.as_array().expect("list"))
    {
        let expected: f64 = expected.as_str().expect("repr").parse().expect("float");
        assert_eq!(
            rerank_score(*sim, prob).to_bits(),
            expected.to_bits(),
            "{sim}^{prob}"
        );
    }
}

#[test]
fn train_tsv_reads_and_writes_back_byte_for_byte() {
    let Some(path) = relatedness_fixture("data_train.tsv") else {
        return;
    };
    let rows = read_train(&path).expect("released layout");
    assert_eq!(rows.len(), 59);
    assert!(rows.iter().all(|r| r.id1 == r.id + 1 && r.id2 == r.id + 2));
    let mut out = Vec::new();
    write_train(&mut out, &rows).expect("in memory");
    assert_eq!(String::from_utf8(out).expect("utf-8"), read(&path));
}

#[test]
fn label_command_writes_the_released_layout() {
    let (Some(test), Some(train)) = (
        relatedness_fixture("data_test.tsv"),
        relatedness_fixture("data_train.tsv"),
    ) else {
        return;
    };
    let out = tempfile::tempdir().expect("temp dir");
    let result = capflow(&[
        "relatedness",
        "label",
        "--input",
        test.to_str().expect("utf-8"),
        "--out",
        out.path().to_str().expect("utf-8"),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let pairs = read_pairs(&test).expect("test layout");
    let soft = read_pairs(&out.path().join("soft_labels.tsv")).expect("soft labels");
    assert_eq!(soft.len(), pairs.len());
    let soft_values: Vec<f64> = read(&out.path().join("soft_labels.tsv"))
        .lines()
        .skip(1)
        .map(|l| {
            l.rsplit('\t')
                .next()
                .expect("cosine")
                .parse()
                .expect("float")
        })
        .collect();
    let reference_header = read(&train).lines().next().expect("header").to_string();
    for threshold in ["0.2", "0.3", "0.4"] {
        let file = out.path().join(format!("train_{threshold}.tsv"));
        let text = read(&file);
        assert_eq!(text.lines().next(), Some(reference_header.as_str()));
        let rows = read_train(&file).expect("training layout");
        assert_eq!(rows.len(), pairs.len());
        let th: f64 = threshold.parse().expect("float");
        for ((row, pair), soft) in rows.iter().zip(&pairs).zip(&soft_values) {
            assert_eq!((&row.visual, &row.caption), (&pair.visual, &pair.caption));
            assert_eq!(row.is_related, u8::from(*soft >= th));
        }
        // Python's csv reads the same header and six well-formed fields per row.
        let Some(parsed) = oracle(&["tsv", file.to_str().expect("utf-8")]) else {
            continue;
        };
        let header: Vec<&str> = parsed["header"]
            .as_array()
            .expect("header")
            .iter()
            .map(|h| h.as_str().expect("text"))
            .collect();
        assert_eq!(header, TRAIN_HEADER);
        for (k, row) in parsed["rows"].as_array().expect("rows").iter().enumerate() {
            let fields: Vec<&str> = row
                .as_array()
                .expect("row")
                .iter()
                .map(|f| f.as_str().expect("text"))
                .collect();
            let id: u64 = fields[0].parse().expect("integer id");
            assert_eq!(fields.len(), 6);
            assert_eq!(id, 3 * k as u64);
            assert_eq!(fields[1].parse::<u64>().expect("id1"), id + 1);
            assert_eq!(fields[2].parse::<u64>().expect("id2"), id + 2);
            assert_eq!(
                (fields[3], fields[4]),
                (pairs[k].visual.as_str(), pairs[k].caption.as_str())
            );
            assert!(fields[5] == "0" || fields[5] == "1");
        }
    }
}

#[test]
fn recall_equals_a_brute_force_search() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
    let images = 40;
    let per_image = 5;
    let dim = 12;
    // Each image has a random centre; its captions and its query scatter around it.
    let centres: Vec<Vec<f64>> = (0..images)
        .map(|_| (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect())
        .collect();
    let noisy = |rng: &mut rand_chacha::ChaCha8Rng, c: &[f64], spread: f64| -> Vec<f64> {
        c.iter()
            .map(|x| x + rng.gen_range(-spread..spread))
            .collect()
    };
    let captions: Vec<Vec<f64>> = (0..images * per_image)
        .map(|i| noisy(&mut rng, &centres[i / per_image], 0.9))
        .collect();
    let queries: Vec<Vec<f64>> = centres.iter().map(|c| noisy(&mut rng, c, 0.9)).collect();
    let relevant: Vec<BTreeSet<usize>> = (0..images)
        .map(|i| (i * per_image..(i + 1) * per_image).collect())
        .collect();
    let index = CaptionIndex::new(&captions).expect("vectors");
    let ks = [1usize, 5, 10, 15];
    let rankings: Vec<Vec<usize>> = queries
        .iter()
        .map(|q| {
            index
                .search(q, 15)
                .expect("search")
                .into_iter()
                .map(|h| h.0)
                .collect()
        })
        .collect();

    // Brute force in the test: every cosine in f64, a full sort.
    let brute: Vec<Vec<usize>> = queries
        .iter()
        .map(|q| {
            let mut all: Vec<(usize, f64)> = captions
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let q32: Vec<f32> = q.iter().map(|&x| x as f32).collect();
                    let c32: Vec<f32> = c.iter().map(|&x| x as f32).collect();
                    (i, capflow::text::cosine(&q32, &c32))
                })
                .collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            all.into_iter().take(15).map(|(i, _)| i).collect()
        })
        .collect();
    assert_eq!(rankings, brute);
    let recall: Vec<f64> = ks
        .iter()
        .map(|&k| recall_at_k(&rankings, &relevant, k))
        .collect();
    assert!(recall.windows(2).all(|w| w[0] <= w[1]));
    assert!(
        recall[0] > 0.0 && recall[0] < 1.0,
        "a test that can tell: {recall:?}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("search.json");
    let relevant_json: Vec<Vec<usize>> = relevant
        .iter()
        .map(|r| r.iter().copied().collect())
        .collect();
    std::fs::write(
        &input,
        serde_json::json!({"captions": captions, "queries": queries, "relevant": relevant_json, "ks": ks})
            .to_string(),
    )
    .expect("write");
    let Some(expected) = oracle(&["search", input.to_str().expect("utf-8")]) else {
        return;
    };
    for (ours, theirs) in rankings
        .iter()
        .zip(expected["rankings"].as_array().expect("rankings"))
    {
        let theirs: Vec<usize> = theirs
            .as_array()
            .expect("ranking")
            .iter()
            .take(15)
            .map(|i| i.as_u64().expect("index") as usize)
            .collect();
        assert_eq!(ours, &theirs);
    }
    for (k, value) in ks.iter().zip(&recall) {
        assert_eq!(
            expected["recall"][k.to_string()].as_f64(),
            Some(*value),
            "R@{k}"
        );
    }
}

#[test]
fn sif_similarities_equal_a_numpy_implementation() {
    let Some(glove) = common::fixture("word_vectors/gensim_test_glove.txt") else {
        return;
    };
    let vectors = WordVectors::read(&glove, VectorFormat::Glove).expect("glove sample");
    let corpus_text = [
        "the people said that she was first",
        "he said the new percent was more than one",
        "they were not there after the year",
        "she would have been one of the people",
        "which of their two will be first",
        "it was about the other people",
        "the year after we had been there",
    ];
    let pairs = [
        ("people said", "the people said that she was first"),
        ("year", "they were not there after the year"),
        ("percent more", "he said the new percent was more than one"),
        ("first people", "which of their two will be first"),
        ("zzz unknown", "the year"),
    ];
    let corpus: Vec<Vec<String>> = corpus_text.iter().map(|t| content_tokens(t)).collect();
    for (a, remove) in [(1e-3, 1usize), (0.05, 2), (1e-3, 0)] {
        let sif = SifEncoder::fit(vectors.clone(), &corpus, a, remove);
        let encoder = SentenceEncoder::Sif(sif);
        let ours: Vec<f64> = pairs
            .iter()
            .map(|(x, y)| {
                encoder
                    .similarities_to(x, &[y.to_string()])
                    .expect("built in")[0]
            })
            .collect();
        let dir = tempfile::tempdir().expect("temp dir");
        let input = dir.path().join("sif.json");
        let pair_tokens: Vec<(Vec<String>, Vec<String>)> = pairs
            .iter()
            .map(|(x, y)| (content_tokens(x), content_tokens(y)))
            .collect();
        std::fs::write(
            &input,
            serde_json::json!({"corpus": corpus, "pairs": pair_tokens, "a": a, "remove": remove})
                .to_string(),
        )
        .expect("write");
        let Some(expected) = oracle(&[
            "sif",
            glove.to_str().expect("utf-8"),
            input.to_str().expect("utf-8"),
        ]) else {
            return;
        };
        for (i, (ours, theirs)) in ours
            .iter()
            .zip(expected["similarities"].as_array().expect("list"))
            .enumerate()
        {
            let theirs = theirs.as_f64().expect("number");
            assert!(
                (ours - theirs).abs() < 1e-6,
                "a={a} remove={remove} pair {i}: {ours} vs {theirs}"
            );
        }
    }
}

#[test]
fn gender_counts_on_the_released_pairs_equal_an_independent_count() {
    let Some(path) = relatedness_fixture("data_train.tsv") else {
        return;
    };
    let pairs = read_pairs(&path).expect("released layout");
    let lexicon = GenderLexicon::default();
    let objects: Vec<Vec<String>> = pairs.iter().map(|p| content_tokens(&p.visual)).collect();
    let ours = gender_cooccurrence(
        pairs
            .iter()
            .zip(&objects)
            .map(|(p, o)| (o.iter().map(String::as_str), p.caption.as_str())),
        &lexicon,
    );
    assert!(ours.values().any(|c| c.man > 0) && ours.values().any(|c| c.woman > 0));
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("gender.json");
    let json_pairs: Vec<(Vec<String>, String)> = pairs
        .iter()
        .zip(&objects)
        .map(|(p, o)| (o.clone(), p.caption.clone()))
        .collect();
    std::fs::write(
        &input,
        serde_json::json!({"pairs": json_pairs, "man": lexicon.man, "woman": lexicon.woman, "person": lexicon.person})
            .to_string(),
    )
    .expect("write");
    let Some(expected) = oracle(&["gender", input.to_str().expect("utf-8")]) else {
        return;
    };
    let expected = expected.as_object().expect("table");
    assert_eq!(expected.len(), ours.len());
    for (object, counts) in &ours {
        let theirs = &expected[object];
        assert_eq!(
            [counts.person, counts.man, counts.woman],
            [
                theirs["person"].as_u64().expect("count"),
                theirs["man"].as_u64().expect("count"),
                theirs["woman"].as_u64().expect("count")
            ],
            "{object}"
        );
    }
}

/// The embedded sample data (Flickr30k Entities captions and COCO-style detections) as one
/// `ImageAnnotations` per image.
fn sample_images() -> Vec<ImageAnnotations> {
    let data = common::repo_root().join("examples/data");
    let mut sink = VecSink::default();
    read_input(
        Format::Flickr30kEntities,
        &data.join("flickr30k_entities"),
        &mut sink,
    )
    .expect("sample captions");
    read_input(
        Format::CocoInstances,
        &data.join("detections/instances.json"),
        &mut sink,
    )
    .expect("sample detections");
    let mut images: BTreeMap<String, ImageAnnotations> = BTreeMap::new();
    for row in sink.rows {
        let id = row.image_id().to_string();
        images
            .entry(id.clone())
            .or_insert_with(|| ImageAnnotations::new(id))
            .push(row);
    }
    images.into_values().collect()
}

/// Top-3 classes with probability >= 0.2 per image, read straight from the instances JSON.
fn hand_contexts() -> BTreeMap<String, Vec<(String, f64)>> {
    let path = common::repo_root().join("examples/data/detections/instances.json");
    let json: Value = serde_json::from_str(&read(&path)).expect("instances JSON");
    let names: BTreeMap<u64, String> = json["categories"]
        .as_array()
        .expect("categories")
        .iter()
        .map(|c| {
            (
                c["id"].as_u64().expect("id"),
                c["name"].as_str().expect("name").to_string(),
            )
        })
        .collect();
    let mut best: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for a in json["annotations"].as_array().expect("annotations") {
        let score = a["score"].as_f64().unwrap_or(1.0);
        if score < 0.2 {
            continue;
        }
        let image = a["image_id"].as_u64().expect("image").to_string();
        let name = names[&a["category_id"].as_u64().expect("category")].clone();
        let slot = best.entry(image).or_default().entry(name).or_insert(score);
        *slot = slot.max(score);
    }
    best.into_iter()
        .map(|(image, classes)| {
            let mut classes: Vec<(String, f64)> = classes.into_iter().collect();
            classes.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            classes.truncate(3);
            (image, classes)
        })
        .collect()
}

#[test]
fn samples_on_the_embedded_data_follow_the_method() {
    let images = sample_images();
    let config = RelatednessConfig {
        // Semantic de-duplication off: the hand computation below ranks classes only.
        duplicate_similarity: f64::INFINITY,
        ..RelatednessConfig::default()
    };
    let model = RelatednessModel::fit(&images, &config).expect("fit on sample data");
    let contexts = hand_contexts();
    let mut total = 0;
    let mut ids = BTreeSet::new();
    for image in &images {
        let samples = model.samples(image, 7).expect("built-in encoder");
        let Some(expected) = contexts.get(&image.image_id) else {
            assert!(
                samples.is_empty(),
                "{} has no confident detection",
                image.image_id
            );
            continue;
        };
        assert_eq!(samples.len(), image.captions.len(), "{}", image.image_id);
        let labels: Vec<&str> = expected.iter().map(|(l, _)| l.as_str()).collect();
        let confidence = expected.iter().map(|(_, p)| p).sum::<f64>() / expected.len() as f64;
        let mut previous = f64::INFINITY;
        for (rank, sample) in samples.iter().enumerate() {
            total += 1;
            assert!(ids.insert(sample.sample_id.clone()), "unique sample ids");
            assert_eq!(sample.method, "relatedness");
            assert_eq!(sample.control_labels, labels);
            let q = |name: &str| {
                sample
                    .quality
                    .iter()
                    .find(|s| s.name == name)
                    .unwrap_or_else(|| panic!("quality {name}"))
                    .value
            };
            assert!((q("visual_confidence") - confidence).abs() < 1e-12);
            let sim = q("relatedness");
            assert!((-1.0 - 1e-9..=1.0 + 1e-9).contains(&sim));
            assert_eq!(
                q("relatedness_rerank").to_bits(),
                rerank_score(sim, q("visual_confidence")).to_bits()
            );
            assert!(q("relatedness_rerank") <= previous);
            previous = q("relatedness_rerank");
            assert_eq!(q("relatedness_rank"), (rank + 1) as f64);
            for th in [0.2, 0.3, 0.4] {
                assert_eq!(q(&format!("related@{th}")), f64::from(u8::from(sim >= th)));
            }
            assert!(sample.coverage > 0.0 && sample.coverage <= 100.0);
            assert_eq!(sample.provenance.source_caption_ids.len(), 1);
            assert_eq!(sample.provenance.seed, 7);
        }
    }
    assert!(total > 0);

    // Fitting is independent of image order.
    let mut reversed = images.clone();
    reversed.reverse();
    let again = RelatednessModel::fit(&reversed, &config).expect("fit");
    for image in &images {
        assert_eq!(
            model.samples(image, 7).expect("samples"),
            again.samples(image, 7).expect("samples")
        );
    }

    // Search over the sample captions: Recall@K grows with K and reaches 1 at K = all captions.
    let captions: usize = images.iter().map(|i| i.captions.len()).sum();
    let search_config = RelatednessConfig {
        recall_at: vec![1, 5, captions],
        ..config
    };
    let report = RelatednessModel::fit(&images, &search_config)
        .expect("fit")
        .search_recall(&images)
        .expect("search");
    assert_eq!(report.captions, captions);
    assert_eq!(report.queries, contexts.len());
    assert!(report.recall.windows(2).all(|w| w[0].1 <= w[1].1));
    assert_eq!(report.recall.last().map(|r| r.1), Some(1.0));
}

/// Everything a fitted model holds, as bits: SIF weights by word, removed directions, word
/// vectors, and the scores of every caption of `images`.
type ModelBits = (
    Vec<(String, u64)>,
    Vec<Vec<u64>>,
    Vec<(String, Vec<u32>)>,
    Vec<(String, u64)>,
);

fn model_bits(model: &RelatednessModel, images: &[ImageAnnotations]) -> ModelBits {
    let SentenceEncoder::Sif(sif) = model.encoder() else {
        panic!("a fitted model has the built-in encoder");
    };
    let mut weights: Vec<(String, u64)> = sif
        .weights()
        .iter()
        .map(|(w, x)| (w.clone(), x.to_bits()))
        .collect();
    weights.sort();
    let components = sif
        .components()
        .iter()
        .map(|u| u.iter().map(|x| x.to_bits()).collect())
        .collect();
    let table = sif.vectors();
    let vectors = table
        .words()
        .map(|w| {
            let v = table.get(w).expect("listed word");
            (w.to_string(), v.iter().map(|x| x.to_bits()).collect())
        })
        .collect();
    let mut scores = Vec::new();
    for image in images {
        for sample in model.samples(image, 0).expect("samples") {
            for q in &sample.quality {
                scores.push((
                    format!("{} {}", sample.sample_id, q.name),
                    q.value.to_bits(),
                ));
            }
        }
    }
    (weights, components, vectors, scores)
}

/// A way to split images: the number of parts, the part of image `i`, the merge order.
type Split = (usize, fn(usize) -> usize, &'static [usize]);

/// Statistics of `images` split into `parts` (image `i` into part `assign(i)`, added last
/// image first), each through a bincode round trip, merged in `order`.
fn merged_stats(
    images: &[ImageAnnotations],
    config: &RelatednessConfig,
    parts: usize,
    assign: impl Fn(usize) -> usize,
    order: &[usize],
) -> RelatednessStats {
    let mut stats: Vec<Option<RelatednessStats>> = (0..parts)
        .map(|_| Some(RelatednessStats::new(config)))
        .collect();
    for (i, image) in images.iter().enumerate().rev() {
        stats[assign(i) % parts]
            .as_mut()
            .expect("part")
            .add_image(image);
    }
    let mut round_trip = |k: usize| -> RelatednessStats {
        let part = stats[k].take().expect("each part merged once");
        let bytes = bincode::serialize(&part).expect("serialize");
        bincode::deserialize(&bytes).expect("deserialize")
    };
    let mut total = round_trip(order[0]);
    for &k in &order[1..] {
        total.merge(round_trip(k));
    }
    total
}

#[test]
fn stats_split_any_way_and_merged_in_any_order_fit_the_same_model() {
    let images = sample_images();
    let mut configs = vec![
        RelatednessConfig::default(),
        RelatednessConfig {
            gender_neutral: true,
            remove_components: 2,
            ppmi_dims: 12,
            ppmi_window: 3,
            ..RelatednessConfig::default()
        },
    ];
    if let Some(glove) = common::fixture("word_vectors/gensim_test_glove.txt") {
        configs.push(RelatednessConfig {
            vectors: Some(glove),
            ..RelatednessConfig::default()
        });
    }
    for config in &configs {
        let whole = RelatednessModel::fit(&images, config).expect("fit");
        let expected = model_bits(&whole, &images);
        assert!(!expected.1.is_empty() && !expected.3.is_empty());
        let mut one = RelatednessStats::new(config);
        images.iter().for_each(|image| one.add_image(image));
        assert_eq!(one.images(), images.len() as u64);
        assert!(one.approx_bytes() > 0);
        let splits: [Split; 5] = [
            (2, |i| i, &[0, 1]),
            (2, |i| i / 7, &[1, 0]),
            (3, |i| i * 5 % 3, &[2, 0, 1]),
            (3, |i| (i + 1) / 4, &[1, 2, 0]),
            (4, |i| if i == 3 { 0 } else { 1 + i % 3 }, &[3, 0, 2, 1]),
        ];
        for (parts, assign, order) in splits {
            let total = merged_stats(&images, config, parts, assign, order);
            assert_eq!(total.images(), images.len() as u64);
            let model = RelatednessModel::from_stats(total, config).expect("fit from stats");
            assert!(
                model_bits(&model, &images) == expected,
                "{parts} parts merged in order {order:?} fit another model ({:?})",
                config.vectors
            );
        }
        // Merged into one another in a tree, the whole through bincode again.
        let mut left = merged_stats(&images, config, 2, |i| i % 2, &[1, 0]);
        let right = merged_stats(&images[..0], config, 1, |_| 0, &[0]);
        left.merge(right);
        let bytes = bincode::serialize(&left).expect("serialize");
        let back: RelatednessStats = bincode::deserialize(&bytes).expect("deserialize");
        assert_eq!(bincode::serialize(&back).expect("serialize"), bytes);
        let model = RelatednessModel::from_stats(back, config).expect("fit");
        assert!(model_bits(&model, &images) == expected);
    }
}

#[test]
fn stats_of_other_settings_do_not_merge_or_fit() {
    let images = sample_images();
    let config = RelatednessConfig::default();
    let neutral = RelatednessConfig {
        gender_neutral: true,
        ..RelatednessConfig::default()
    };
    let mut stats = RelatednessStats::new(&config);
    stats.add_image(&images[0]);
    // Fitting with other gathering settings fails; other settings of the fit are free.
    for other in [
        neutral.clone(),
        RelatednessConfig {
            ppmi_window: 4,
            ..RelatednessConfig::default()
        },
    ] {
        let error = RelatednessModel::from_stats(stats.clone(), &other).unwrap_err();
        assert!(error.to_string().contains("cannot fit"), "{error}");
    }
    let free = RelatednessConfig {
        top_k: 2,
        sif_a: 0.01,
        ppmi_dims: 7,
        ..RelatednessConfig::default()
    };
    RelatednessModel::from_stats(stats.clone(), &free).expect("fit");
    // Merging statistics of other settings makes the fit fail.
    let mut other = RelatednessStats::new(&neutral);
    other.add_image(&images[1]);
    stats.merge(other);
    assert_eq!(stats.images(), 2);
    let error = RelatednessModel::from_stats(stats, &config).unwrap_err();
    assert!(error.to_string().contains("cannot be merged"), "{error}");
    // An unreadable vector file fails with its own error, as fitting on images does.
    let missing = RelatednessConfig {
        vectors: Some(PathBuf::from("/nonexistent/vectors.txt")),
        ..RelatednessConfig::default()
    };
    let mut stats = RelatednessStats::new(&missing);
    stats.add_image(&images[0]);
    let error = RelatednessModel::from_stats(stats, &missing).unwrap_err();
    assert_eq!(error.exit_code(), 4, "{error}");
}

/// `[models.embedder]` replaces the SIF encoder: the relatedness recipe with the deterministic
/// stand-in as its sentence encoder. Each soft label is recomputed here from the request the
/// stand-in logged (vector `[characters, count of 'a', index in the request]`): the cosine
/// between the context's vector and the caption's.
#[test]
fn an_external_embedder_gives_the_relatedness_soft_labels() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = common::repo_root();
    let log = tmp.path().join("embedded.log");
    let recipe = std::fs::read_to_string(root.join("dataflows/relatedness.toml")).unwrap();
    let command = common::stand_in(&python, &["embedder", "--log", log.to_str().unwrap()]);
    // The recipe's inputs are relative to `dataflows/`.
    let recipe = recipe.replace("\"../examples/", &format!("\"{}/examples/", root.display()));
    let spec = tmp.path().join("relatedness-embedder.toml");
    std::fs::write(
        &spec,
        format!("{recipe}\n[models.embedder]\ncommand = {command}\nmax_restarts = 0\n"),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let output = Command::new(common::capflow_bin())
        .current_dir(&root)
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let requests: Vec<Vec<String>> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            l.split_once('\t')
                .unwrap()
                .1
                .split(" | ")
                .map(str::to_string)
                .collect()
        })
        .collect();
    let vector = |text: &str, index: usize| -> [f64; 3] {
        [
            text.chars().count() as f64,
            text.matches('a').count() as f64,
            index as f64,
        ]
    };
    let cosine = |a: [f64; 3], b: [f64; 3]| -> f64 {
        let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let norm = |v: [f64; 3]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        dot / (norm(a) * norm(b))
    };
    let samples: Vec<capflow::schema::SampleRow> =
        capflow::export::read_table(&out, capflow::schema::TableKind::Samples)
            .unwrap()
            .flat_map(|b| capflow::schema::batch_to_rows(&b.unwrap()).unwrap())
            .filter(|s: &capflow::schema::SampleRow| s.method == "relatedness")
            .collect();
    assert!(samples.len() >= 50, "{} samples", samples.len());
    for sample in &samples {
        let context = sample.control_labels.join(" ");
        let request = requests
            .iter()
            .find(|r| r[0] == context && r[1..].contains(&sample.text))
            .unwrap_or_else(|| panic!("no request for {context:?} / {:?}", sample.text));
        let index = 1 + request[1..].iter().position(|t| *t == sample.text).unwrap();
        let expected = cosine(vector(&context, 0), vector(&sample.text, index));
        let soft = sample
            .quality
            .iter()
            .find(|q| q.name == "relatedness")
            .unwrap()
            .value;
        assert!((soft - expected).abs() < 1e-6, "{soft} vs {expected}");
    }
}
