//! SSA's corpus-level models fitted from merged streaming statistics are the models trained on
//! all captions at once, bit for bit.
//!
//! The captions (the embedded Flickr30k Entities sample, read with `capflow::ingest`, and random
//! corpora) are split arbitrarily over 1 to 4 statistics objects, merged in a shuffled order
//! and fitted; the quality scorer must give the same scores and fluencies on many sentences as
//! [`BuiltinQualityScorer::train`], and the word vectors must equal [`train_ppmi_vectors`]'s.

mod common;

use capflow::augment::ssa::SsaCorpusStats;
use capflow::ingest::{read_input, Format, Row, VecSink};
use capflow::select::quality::{BuiltinQualityScorer, QualityConfig, QualityScorer, QualityStats};
use capflow::text::ppmi::{train_ppmi_vectors, PpmiConfig};
use capflow::text::tokenize::tokenize;
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The caption texts of the embedded Flickr30k Entities sample, in read order.
fn flickr_caption_texts() -> Vec<String> {
    let path = common::repo_root().join("examples/data/flickr30k_entities");
    let mut sink = VecSink::default();
    read_input(Format::Flickr30kEntities, &path, &mut sink).unwrap();
    let texts: Vec<String> = sink
        .rows
        .into_iter()
        .filter_map(|row| match row {
            Row::Caption(c) => Some(c.text),
            _ => None,
        })
        .collect();
    assert!(texts.len() >= 50, "{} captions", texts.len());
    texts
}

/// Sentences to score: every caption, each shuffled and cut, and sentences with unseen words.
fn probes(captions: &[Vec<String>], rng: &mut ChaCha8Rng) -> Vec<Vec<String>> {
    let mut probes = Vec::new();
    for caption in captions {
        probes.push(caption.clone());
        let mut shuffled = caption.clone();
        shuffled.shuffle(rng);
        probes.push(shuffled);
        if caption.len() > 1 {
            probes.push(caption[..rng.gen_range(1..caption.len())].to_vec());
        }
    }
    for text in [
        "a zebra juggles seven quokkas on the moon .",
        "the the the",
        "",
        "( a dog \" runs",
        "a man in a blue shirt is xylophoning near a submarine",
    ] {
        probes.push(tokenize(text));
    }
    probes
}

fn assert_same_scores(a: &BuiltinQualityScorer, b: &BuiltinQualityScorer, probes: &[Vec<String>]) {
    assert_eq!(a.threshold().to_bits(), b.threshold().to_bits());
    assert!(a
        .language_model()
        .vocabulary()
        .eq(b.language_model().vocabulary()));
    for probe in probes {
        assert_eq!(
            a.score(probe).to_bits(),
            b.score(probe).to_bits(),
            "{probe:?}"
        );
        if !probe.is_empty() {
            let bits = |s: &BuiltinQualityScorer| s.features(probe).map(f64::to_bits);
            assert_eq!(bits(a), bits(b), "{probe:?}");
        }
        assert_eq!(
            a.language_model().log_prob(probe).to_bits(),
            b.language_model().log_prob(probe).to_bits(),
            "{probe:?}"
        );
    }
}

fn vector_bits(vectors: &[(String, Vec<f32>)]) -> Vec<(String, Vec<u32>)> {
    vectors
        .iter()
        .map(|(w, v)| (w.clone(), v.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

/// `SsaCorpusStats` of `texts` (one input unit), split at random over `parts` objects, each
/// optionally sent through JSON, merged in a random order.
fn ssa_stats(
    texts: &[String],
    quality: &QualityConfig,
    ppmi: &PpmiConfig,
    parts: usize,
    through_json: bool,
    rng: &mut ChaCha8Rng,
) -> SsaCorpusStats {
    let mut stats: Vec<SsaCorpusStats> = (0..parts)
        .map(|_| SsaCorpusStats::new(quality, ppmi))
        .collect();
    let mut index = 0;
    for text in texts {
        if stats[rng.gen_range(0..parts)].add_caption(0, index, text) {
            index += 1;
        }
    }
    if through_json {
        stats = stats
            .iter()
            .map(|s| serde_json::from_str(&serde_json::to_string(s).unwrap()).unwrap())
            .collect();
    }
    stats.shuffle(rng);
    let mut stats = stats.into_iter();
    let mut total = stats.next().unwrap();
    for part in stats {
        total.merge(part).unwrap();
    }
    total
}

#[test]
fn flickr_sample_models_from_merged_stats_are_the_trained_ones() {
    let mut texts = flickr_caption_texts();
    // Empty captions take no number and are not scored, as in training.
    texts.insert(7, "   ".into());
    texts.insert(20, String::new());
    let captions: Vec<Vec<String>> = texts.iter().map(|t| tokenize(t)).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(20261125);
    let probes = probes(&captions, &mut rng);
    for (quality, ppmi) in [
        (QualityConfig::default(), PpmiConfig::default()),
        (
            QualityConfig {
                order: 4,
                calibration_every: 3,
                threshold: 0.6,
                ..QualityConfig::default()
            },
            PpmiConfig {
                window: 4,
                dims: 12,
                min_count: 2,
                ..PpmiConfig::default()
            },
        ),
    ] {
        let scorer = BuiltinQualityScorer::train(&captions, &quality).unwrap();
        let vectors = train_ppmi_vectors(captions.iter().map(Vec::as_slice), &ppmi);
        assert!(!vectors.is_empty());
        for parts in 1..=4 {
            for through_json in [false, true] {
                let stats = ssa_stats(&texts, &quality, &ppmi, parts, through_json, &mut rng);
                assert_eq!(stats.captions(), captions.len() as u64 - 2);
                assert!(stats.approx_bytes() > 0);
                let (fitted_scorer, fitted_vectors) = stats.fit(&quality, &ppmi).unwrap();
                assert_same_scores(&scorer, &fitted_scorer, &probes);
                assert_eq!(vector_bits(&vectors), vector_bits(&fitted_vectors));
            }
        }
    }
}

#[test]
fn ssa_stats_round_trip_through_serde() {
    let texts = flickr_caption_texts();
    let captions: Vec<Vec<String>> = texts.iter().map(|t| tokenize(t)).collect();
    let (quality, ppmi) = (QualityConfig::default(), PpmiConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let stats = ssa_stats(&texts, &quality, &ppmi, 3, false, &mut rng);
    let json = serde_json::to_string(&stats).unwrap();
    let back: SsaCorpusStats = serde_json::from_str(&json).unwrap();
    // Serializing is deterministic: the same statistics give the same bytes.
    assert_eq!(serde_json::to_string(&back).unwrap(), json);
    let (scorer, vectors) = back.fit(&quality, &ppmi).unwrap();
    let probes = probes(&captions, &mut rng);
    assert_same_scores(
        &BuiltinQualityScorer::train(&captions, &quality).unwrap(),
        &scorer,
        &probes,
    );
    assert_eq!(
        vector_bits(&train_ppmi_vectors(
            captions.iter().map(Vec::as_slice),
            &ppmi
        )),
        vector_bits(&vectors)
    );
}

#[test]
fn ssa_stats_refuse_other_settings() {
    let (quality, ppmi) = (QualityConfig::default(), PpmiConfig::default());
    let mut stats = SsaCorpusStats::new(&quality, &ppmi);
    for (i, text) in flickr_caption_texts().iter().enumerate() {
        assert!(stats.add_caption(0, i as u64, text));
    }
    assert!(!stats.add_caption(0, 0, " \t\n"));
    let other = SsaCorpusStats::new(
        &quality,
        &PpmiConfig {
            window: 3,
            ..PpmiConfig::default()
        },
    );
    assert!(stats.clone().merge(other).is_err());
    let every_4 = QualityConfig {
        calibration_every: 4,
        ..QualityConfig::default()
    };
    assert!(stats.clone().fit(&every_4, &ppmi).is_err());
    let window_5 = PpmiConfig {
        window: 5,
        ..PpmiConfig::default()
    };
    assert!(stats.clone().fit(&quality, &window_5).is_err());
    assert!(stats.fit(&quality, &ppmi).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random corpora (some captions empty) split over 1 to 4 `QualityStats` and merged in a
    /// random order fit the scorer `train` trains.
    #[test]
    fn random_corpora_fit_the_trained_scorer(
        corpus in proptest::collection::vec(
            proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "dog", "man", "runs", "on", "the", "beach", "red", ".", ",", "(", ")",
                ]),
                0..12,
            ),
            10..40,
        ),
        order in 1usize..5,
        calibration_every in 1usize..4,
        parts in 1usize..5,
        seed in any::<u64>(),
    ) {
        let captions: Vec<Vec<String>> = corpus
            .iter()
            .map(|c| c.iter().map(|w| w.to_string()).collect())
            .collect();
        let config = QualityConfig { order, calibration_every, ..QualityConfig::default() };
        let trained = BuiltinQualityScorer::train(&captions, &config);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut stats: Vec<QualityStats> = (0..parts).map(|_| QualityStats::new(order)).collect();
        let mut index = 0;
        for caption in &captions {
            stats[rng.gen_range(0..parts)].add_caption(config.holds_out(index), index, caption);
            if !caption.is_empty() {
                index += 1;
            }
        }
        stats.shuffle(&mut rng);
        let mut stats = stats.into_iter();
        let mut total = stats.next().unwrap();
        for part in stats {
            total.merge(part);
        }
        let fitted = BuiltinQualityScorer::from_stats(total, &config);
        match (trained, fitted) {
            (Ok(trained), Ok(fitted)) => {
                let probes = probes(&captions, &mut rng);
                assert_same_scores(&trained, &fitted, &probes);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "train {:?}, from_stats {:?}", a.is_ok(), b.is_ok()),
        }
    }
}
