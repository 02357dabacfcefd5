//! Caption quality scoring: the [`QualityScorer`] trait and a model-free built-in scorer.
//!
//! SSA keeps a generated caption only when its quality score is above a threshold (0.7 in the
//! paper, where the score comes from GRUEN, an external model). [`BuiltinQualityScorer`] gives
//! capflow a scorer that needs no model: a Kneser-Ney language model trained on the dataset's
//! own original captions judges fluency, and a few well-formedness checks catch what an n-gram
//! model forgives (a caption cut after "a", a doubled word, an unclosed bracket).
//!
//! ```
//! use capflow::select::quality::{BuiltinQualityScorer, QualityConfig, QualityScorer};
//! use capflow::text::tokenize::tokenize;
//!
//! let mut captions = Vec::new();
//! for subject in ["a dog", "a man", "two children", "a woman"] {
//!     for place in ["on the beach", "in a park", "near the water"] {
//!         captions.push(tokenize(&format!("{subject} runs {place} .")));
//!     }
//! }
//! let scorer = BuiltinQualityScorer::train(&captions, &QualityConfig::default())?;
//! assert!(scorer.accepts(&tokenize("a man runs near the water .")));
//! assert!(!scorer.accepts(&tokenize("a man runs near the")));
//! # Ok::<(), capflow::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::text::lm::{LmConfig, NgramLm};
use crate::text::tokenize::is_punctuation;

/// Scores how acceptable a caption is as fluent, well-formed caption text.
///
/// # What the score means
///
/// [`score`](QualityScorer::score) returns a number in `[0, 1]`: 1 is a caption as fluent and
/// well-formed as the best of the scorer's reference captions, 0 is text that is not a caption
/// at all (empty, word salad). It is not a probability; the only contract is that it is
/// monotone in quality and comparable with [`threshold`](QualityScorer::threshold) — a
/// caption is kept when its score is strictly above the threshold.
///
/// # Required and provided methods
///
/// Implementors provide `score`. `threshold` defaults to 0.7, the value SSA uses with GRUEN;
/// `accepts` compares the two and should not need overriding.
///
/// # Execution model
///
/// Scoring is pull-based and pure: the `quality-filter` stage calls `score` once per
/// candidate caption, from any worker thread (hence `Send + Sync`), with the caption already
/// tokenized by [`crate::text::tokenize::tokenize`]. A scorer never fails on a caption: any
/// token list, empty included, gets a score; an input it cannot judge scores 0, which rejects
/// the caption rather than stopping the run. Failures belong to construction (a scorer that
/// cannot be trained or loaded returns an [`Error`] there).
///
/// Models outside the process (GRUEN and the like) implement the batched, fallible
/// [`crate::models::ExternalQualityScorer`] instead; this trait is for in-process scorers.
pub trait QualityScorer: Send + Sync {
    /// The quality of the caption `caption_tokens` in `[0, 1]`.
    fn score(&self, caption_tokens: &[String]) -> f64;

    /// Captions scoring strictly above this are kept.
    fn threshold(&self) -> f64 {
        DEFAULT_THRESHOLD
    }

    /// Whether the caption passes: `score > threshold`.
    fn accepts(&self, caption_tokens: &[String]) -> bool {
        self.score(caption_tokens) > self.threshold()
    }
}

/// The acceptance threshold SSA uses.
pub const DEFAULT_THRESHOLD: f64 = 0.7;

/// Words that cannot end an English caption: a caption ending in one was cut off.
const DANGLING_FUNCTION_WORDS: &[&str] = &[
    "a", "an", "the", "of", "and", "or", "to", "in", "on", "at", "with", "for", "from", "by", "as",
    "into", "onto", "near", "under", "over", "while", "are", "its", "their", "some", "this",
    "that", "these", "those", "but", "next", "is",
];

/// Settings of a [`BuiltinQualityScorer`].
#[derive(Debug, Clone, PartialEq)]
pub struct QualityConfig {
    /// The language model's order.
    pub order: usize,
    /// Captions scoring strictly above this are accepted.
    pub threshold: f64,
    /// One caption in `calibration_every` (by position) is held out of the calibration model
    /// and scored by it to learn what an unseen good caption's log-probability looks like.
    pub calibration_every: usize,
    /// Multiplier for each immediately repeated word ("a a dog").
    pub repetition_penalty: f64,
    /// Multiplier for a caption that ends in a function word ("a dog on the").
    pub dangling_penalty: f64,
    /// Multiplier for unbalanced brackets or quotes, or punctuation in a wrong place.
    pub structure_penalty: f64,
}

impl Default for QualityConfig {
    fn default() -> Self {
        QualityConfig {
            order: 3,
            threshold: DEFAULT_THRESHOLD,
            calibration_every: 5,
            repetition_penalty: 0.3,
            dangling_penalty: 0.3,
            structure_penalty: 0.5,
        }
    }
}

/// Captions of at least this many words are never judged too short.
const SHORTEST_PLAUSIBLE_WORDS: f64 = 4.0;

/// The minimum number of training captions: fewer cannot calibrate the fluency score.
pub const MIN_TRAINING_CAPTIONS: usize = 10;

/// A quality scorer built from the dataset's own original captions, no model needed.
///
/// The fluency part is the caption's mean per-token natural-log probability under a
/// Kneser-Ney model (`</s>` included, so a caption that stops early is penalised), mapped
/// through a logistic curve calibrated on held-out original captions: a caption as fluent as
/// the median held-out caption scores 0.9, one at the 10th percentile scores 0.5. Length is
/// judged the same way against the training captions' length distribution. The fluency score
/// is then multiplied by a penalty for each well-formedness check that fails.
#[derive(Debug, Clone)]
pub struct BuiltinQualityScorer {
    lm: NgramLm,
    config: QualityConfig,
    /// Maps SLOR (per-token log-probability gain over the unigram model) to `[0, 1]`.
    word_order: Calibration,
    /// Maps `ln P(</s> | last words)` to `[0, 1]`.
    ending: Calibration,
    /// Maps the two together (the log of their product) to `[0, 1]`.
    fluency: Calibration,
    /// Length (in tokens) below which a caption is implausibly short, and above which it is
    /// implausibly long.
    short_length: f64,
    long_length: f64,
}

impl BuiltinQualityScorer {
    /// Trains the scorer on tokenized original captions.
    ///
    /// Fails when there are fewer than [`MIN_TRAINING_CAPTIONS`] non-empty captions, or when
    /// the configuration is out of range.
    pub fn train(captions: &[Vec<String>], config: &QualityConfig) -> Result<Self> {
        validate(config)?;
        let captions: Vec<&[String]> = captions
            .iter()
            .map(Vec::as_slice)
            .filter(|c| !c.is_empty())
            .collect();
        if captions.len() < MIN_TRAINING_CAPTIONS {
            return Err(Error::invalid(
                "quality scorer training captions",
                format!(
                    "{} non-empty captions given, at least {MIN_TRAINING_CAPTIONS} are needed to \
                     calibrate the built-in scorer; give more captions or an external scorer",
                    captions.len()
                ),
            ));
        }
        let lm_config = LmConfig {
            order: config.order,
            ..LmConfig::default()
        };
        let is_held_out = |i: usize| i % config.calibration_every == config.calibration_every - 1;
        let calibration_lm = NgramLm::train_with(
            captions
                .iter()
                .enumerate()
                .filter(|&(i, _)| !is_held_out(i))
                .map(|(_, c)| *c),
            &lm_config,
        );
        let held_out: Vec<&[String]> = captions
            .iter()
            .enumerate()
            .filter(|&(i, _)| is_held_out(i))
            .map(|(_, c)| *c)
            .collect();
        let word_order = Calibration::fit(held_out.iter().map(|c| slor(&calibration_lm, c)));
        let ending = Calibration::fit(held_out.iter().map(|c| calibration_lm.end_log_prob(c)));
        let fluency = Calibration::fit(
            held_out
                .iter()
                .map(|c| fluency_evidence(&calibration_lm, word_order, ending, c)),
        );

        let mut lengths: Vec<f64> = captions.iter().map(|c| word_count(c) as f64).collect();
        lengths.sort_by(f64::total_cmp);
        // Focused captions (SSA's event captions) are shorter than whole-image captions by
        // design: only a fragment under four words is implausibly short, whatever the corpus.
        let short_length = quantile(&lengths, 0.02).clamp(1.0, SHORTEST_PLAUSIBLE_WORDS);
        let long_length = quantile(&lengths, 0.99) * 1.5;

        let lm = NgramLm::train_with(captions.iter().copied(), &lm_config);
        Ok(BuiltinQualityScorer {
            lm,
            config: config.clone(),
            word_order,
            ending,
            fluency,
            short_length,
            long_length,
        })
    }

    /// The fluency part of the score alone, in `[0, 1]`: word order judged by SLOR, and how
    /// plausible it is that the caption ends where it does.
    pub fn fluency(&self, caption_tokens: &[String]) -> f64 {
        let evidence = fluency_evidence(&self.lm, self.word_order, self.ending, caption_tokens);
        self.fluency.apply(evidence)
    }

    /// The product of the well-formedness penalties (1 when every check passes).
    pub fn well_formedness(&self, caption_tokens: &[String]) -> f64 {
        let words: Vec<&str> = caption_tokens.iter().map(String::as_str).collect();
        let mut factor = 1.0;
        let repeats = words
            .windows(2)
            .filter(|w| w[0] == w[1] && !is_punctuation(w[0]))
            .count();
        factor *= self.config.repetition_penalty.powi(repeats.min(64) as i32);
        let last_word = words.iter().rev().find(|w| !is_punctuation(w));
        if last_word.is_some_and(|w| DANGLING_FUNCTION_WORDS.contains(&w.to_lowercase().as_str())) {
            factor *= self.config.dangling_penalty;
        }
        if !balanced(&words) {
            factor *= self.config.structure_penalty;
        }
        factor * self.length_plausibility(word_count(caption_tokens))
    }

    /// 1 for a length the training captions commonly have, falling smoothly outside.
    fn length_plausibility(&self, words: usize) -> f64 {
        let n = words as f64;
        if n < self.short_length {
            (n / self.short_length).powi(2)
        } else if n > self.long_length {
            self.long_length / n
        } else {
            1.0
        }
    }

    /// The language model the scorer judges fluency with.
    pub fn language_model(&self) -> &NgramLm {
        &self.lm
    }
}

impl QualityScorer for BuiltinQualityScorer {
    fn score(&self, caption_tokens: &[String]) -> f64 {
        if caption_tokens.is_empty() {
            return 0.0;
        }
        let score = self.fluency(caption_tokens) * self.well_formedness(caption_tokens);
        if score.is_nan() {
            0.0
        } else {
            score.clamp(0.0, 1.0)
        }
    }

    fn threshold(&self) -> f64 {
        self.config.threshold
    }
}

fn validate(config: &QualityConfig) -> Result<()> {
    let bad = |reason: &str| Err(Error::invalid("quality scorer configuration", reason));
    if config.order == 0 {
        return bad("order must be at least 1");
    }
    if config.calibration_every < 2 {
        return bad("calibration_every must be at least 2");
    }
    if !(0.0..=1.0).contains(&config.threshold) {
        return bad("threshold must be in [0, 1]");
    }
    let penalties = [
        config.repetition_penalty,
        config.dangling_penalty,
        config.structure_penalty,
    ];
    if penalties.iter().any(|p| !(0.0..=1.0).contains(p)) {
        return bad("penalties must be in [0, 1]");
    }
    Ok(())
}

/// The number of tokens that are words, not punctuation.
fn word_count(tokens: &[String]) -> usize {
    tokens.iter().filter(|t| !is_punctuation(t)).count()
}

/// SLOR (Kann et al., 2018): per predicted token (`</s>` included), how much more likely the
/// language model finds the caption than the unigram model does. Rare words cost both models
/// alike, so a caption is not called disfluent for naming an unusual object.
fn slor(lm: &NgramLm, tokens: &[String]) -> f64 {
    (lm.log_prob(tokens) - lm.unigram_log_prob(tokens)) / (tokens.len() + 1) as f64
}

/// Word order and ending judged together: the log of the product of their calibrated scores,
/// so a caption must do well on both.
fn fluency_evidence(
    lm: &NgramLm,
    word_order: Calibration,
    ending: Calibration,
    tokens: &[String],
) -> f64 {
    word_order.log_apply(slor(lm, tokens)) + ending.log_apply(lm.end_log_prob(tokens))
}

/// A logistic map of a feature to `[0, 1]` fitted on held-out original captions: the feature's
/// 5th percentile maps to 0.5 and its median to 0.95, so a typical good caption scores about
/// 0.95 and only the poorest few in ten of the original captions fall under SSA's 0.7.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Calibration {
    centre: f64,
    scale: f64,
}

impl Calibration {
    fn fit(samples: impl Iterator<Item = f64>) -> Calibration {
        let mut sorted: Vec<f64> = samples.filter(|x| x.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let low = quantile(&sorted, 0.05);
        let median = quantile(&sorted, 0.50);
        // σ(ln 19) = 0.95.
        Calibration {
            centre: low,
            scale: ((median - low) / 19f64.ln()).max(1e-3),
        }
    }

    fn apply(&self, x: f64) -> f64 {
        self.log_apply(x).exp()
    }

    /// `ln σ((x - centre) / scale)`, finite for any finite `x` (no underflow to `ln 0`).
    fn log_apply(&self, x: f64) -> f64 {
        let t = (x - self.centre) / self.scale;
        if t > 0.0 {
            -(-t).exp().ln_1p()
        } else {
            t - t.exp().ln_1p()
        }
    }
}

/// Linear-interpolated quantile of sorted, non-empty `values`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let pos = q * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (pos - lo as f64) * (sorted[hi] - sorted[lo])
        }
    }
}

/// Brackets and double quotes close in order, and punctuation neither opens the caption
/// (other than an opening bracket or quote) nor doubles up (",,", ". .").
fn balanced(words: &[&str]) -> bool {
    let mut open: Vec<char> = Vec::new();
    let mut quotes = 0usize;
    for word in words {
        match *word {
            "(" | "[" | "{" => open.push(word.chars().next().unwrap_or('(')),
            ")" | "]" | "}" => {
                let expected = match *word {
                    ")" => '(',
                    "]" => '[',
                    _ => '{',
                };
                if open.pop() != Some(expected) {
                    return false;
                }
            }
            "\"" => quotes += 1,
            _ => {}
        }
    }
    if !open.is_empty() || quotes % 2 == 1 {
        return false;
    }
    let is_opener = |w: &str| matches!(w, "(" | "[" | "{" | "\"" | "'");
    let is_mark =
        |w: &str| is_punctuation(w) && !matches!(w, "(" | ")" | "[" | "]" | "{" | "}" | "\"" | "'");
    if words
        .first()
        .is_some_and(|w| is_punctuation(w) && !is_opener(w))
    {
        return false;
    }
    !words.windows(2).any(|w| is_mark(w[0]) && is_mark(w[1]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::tokenize::tokenize;

    fn corpus() -> Vec<Vec<String>> {
        let subjects = ["a man", "a woman", "a dog", "two children", "a young boy"];
        let verbs = ["runs", "sits", "plays", "stands", "walks"];
        let places = [
            "on the beach",
            "in a park",
            "near the water",
            "on the grass",
        ];
        let mut captions = Vec::new();
        for s in subjects {
            for v in verbs {
                for p in places {
                    captions.push(tokenize(&format!("{s} {v} {p} .")));
                }
            }
        }
        captions
    }

    #[test]
    fn good_captions_pass_and_broken_ones_fail() {
        let scorer = BuiltinQualityScorer::train(&corpus(), &QualityConfig::default()).unwrap();
        let good = tokenize("a woman walks on the beach .");
        assert!(scorer.accepts(&good), "{}", scorer.score(&good));
        for bad in [
            "beach the on walks woman a .",
            "a woman walks on the",
            "a woman woman walks on the beach .",
            "a woman walks ( on the beach .",
            ". a woman walks on the beach",
            "",
        ] {
            let tokens = tokenize(bad);
            assert!(
                !scorer.accepts(&tokens),
                "{bad:?}: {}",
                scorer.score(&tokens)
            );
        }
    }

    #[test]
    fn penalties_are_applied_per_check() {
        let scorer = BuiltinQualityScorer::train(&corpus(), &QualityConfig::default()).unwrap();
        let w = |s: &str| scorer.well_formedness(&tokenize(s));
        assert_eq!(w("a dog plays in a park ."), 1.0);
        assert!((w("a dog dog plays in a park .") - 0.3).abs() < 1e-12);
        assert!((w("a dog plays in a park of") - 0.3).abs() < 1e-12);
        assert!((w("a dog ( plays ) ] in a park .") - 0.5).abs() < 1e-12);
    }

    #[test]
    fn too_few_captions_or_bad_config_is_an_error() {
        let few: Vec<Vec<String>> = corpus().into_iter().take(3).collect();
        assert!(BuiltinQualityScorer::train(&few, &QualityConfig::default()).is_err());
        let config = QualityConfig {
            threshold: 1.5,
            ..QualityConfig::default()
        };
        assert!(BuiltinQualityScorer::train(&corpus(), &config).is_err());
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 0.1), 1.4);
        assert_eq!(quantile(&[7.0], 0.3), 7.0);
    }
}
