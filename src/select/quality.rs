//! Caption quality scoring: the [`QualityScorer`] trait and a model-free built-in scorer.
//!
//! SSA keeps a generated caption only when its quality score is above a threshold (0.7 in the
//! paper, where the score comes from GRUEN, an external model). [`BuiltinQualityScorer`] gives
//! capflow a scorer that needs no model: a classifier trained on the run's own captions
//! against automatically corrupted versions of them ([`corrupt`]), reading the captions
//! through a Kneser-Ney word model and a word-class model, each left to right and right to
//! left, and well-formedness checks ([`features`]). Its score is the classifier's log-odds that a caption is a real one rather
//! than a corruption, placed so that 0.7 is the 5th percentile of the run's own captions: the
//! threshold means the same on any corpus (`docs/quality.md`).
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
//! let good = scorer.score(&tokenize("a man runs near the water ."));
//! assert!(good > scorer.score(&tokenize("water the near runs man a .")));
//! assert!(good > scorer.score(&tokenize("a man runs near the")));
//! # Ok::<(), capflow::Error>(())
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::parallel::parallel_map;
use crate::text::lm::{LmConfig, NgramCounts, NgramLm};
use crate::text::tokenize::is_punctuation;

pub mod corrupt;
pub mod features;
mod logistic;

use corrupt::TRAINING_CORRUPTIONS;
use features::{word_count, FeatureModels};
pub use features::{Features, FEATURES, FEATURE_NAMES};
use logistic::{Example, LogisticModel};

/// Scores how acceptable a caption is as fluent, well-formed caption text.
///
/// # What the score means
///
/// [`score`](QualityScorer::score) returns a number in `[0, 1]`: 1 is a caption as fluent and
/// well-formed as the best of the scorer's reference captions, 0 is text that is not a caption
/// at all (empty, word salad). The contract is that it is monotone in quality and comparable
/// with [`threshold`](QualityScorer::threshold) — a caption is kept when its score is strictly
/// above the threshold; the built-in scorer's score is a calibrated probability
/// ([`BuiltinQualityScorer`]).
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

/// Settings of a [`BuiltinQualityScorer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityConfig {
    /// The language model's order.
    pub order: usize,
    /// Captions scoring strictly above this are accepted.
    pub threshold: f64,
    /// One caption in `calibration_every` (by position) is held out: the classifier is
    /// trained on the held-out captions and their corruptions, each scored by models trained
    /// without it. 1 (the default) holds out every caption.
    pub calibration_every: usize,
    /// The most held-out captions the classifier is trained on. Beyond it, a sample of this
    /// many is kept ([`held_out_sample`]), the same whatever order the captions come in; the
    /// rest still count in the word model. 16,384 captions (and four corruptions of each)
    /// fit the classifier's few parameters many times over, and keep the fit's time and the
    /// statistics' memory the same from a few thousand images to millions.
    pub held_out_limit: usize,
}

impl Default for QualityConfig {
    fn default() -> Self {
        QualityConfig {
            order: 3,
            threshold: DEFAULT_THRESHOLD,
            calibration_every: 1,
            held_out_limit: DEFAULT_HELD_OUT_LIMIT,
        }
    }
}

/// The default [`QualityConfig::held_out_limit`].
pub const DEFAULT_HELD_OUT_LIMIT: usize = 1 << 14;

impl QualityConfig {
    /// Whether the caption numbered `index` (counting non-empty captions only, from 0) is held
    /// out of the calibration model: every `calibration_every`-th one, `index %
    /// calibration_every == calibration_every - 1`, the rule of [`BuiltinQualityScorer::train`].
    ///
    /// A streaming reader numbers the captions of each input unit (file) from 0 and flags
    /// them for [`QualityStats::add_caption`] with this. With one input unit that is exactly
    /// `train`'s rule over the captions in read order; with several, the held-out captions are
    /// chosen per unit while `train` numbers all captions together, so the two can hold out
    /// different captions and fit (slightly) different calibrations. A unit read image by
    /// image (a Flickr30k Entities directory) numbers the captions of each image instead and
    /// holds out caption `k` of image `i` when `(i + k) % calibration_every ==
    /// calibration_every - 1` ([`crate::augment::ssa::CaptionNumbering`]); with the default
    /// `calibration_every` of 1 every rule holds out every caption.
    pub fn holds_out(&self, index: u64) -> bool {
        let every = self.calibration_every as u64;
        every != 0 && index % every == every - 1
    }

    fn lm_config(&self) -> LmConfig {
        LmConfig {
            order: self.order,
            ..LmConfig::default()
        }
    }
}

/// Mergeable statistics of a caption corpus from which
/// [`BuiltinQualityScorer::from_stats`] fits the scorer that [`BuiltinQualityScorer::train`]
/// would train on the same captions.
///
/// # Execution model
///
/// Accumulate per worker, merge, fit once: each worker adds the captions it reads with
/// [`add_caption`](Self::add_caption), flagging the held-out ones
/// ([`QualityConfig::holds_out`]); the workers' statistics are combined with
/// [`merge`](Self::merge) in any order (serde carries them between processes); the total is
/// fitted once. Nothing fitted depends on the order captions were added or merged in: the
/// counts are integers, the length quantiles come from a histogram, and the calibrations sort
/// the held-out captions' scores before reading quantiles off them.
///
/// # What is kept, and memory
///
/// - The n-gram counts of all captions ([`NgramCounts`]): grows with the distinct n-grams.
///   The calibration model's counts (the captions that are not held out) are these minus the
///   held-out captions' n-grams, taken away at fit time (exact: integer counts).
/// - The held-out captions themselves (one in `calibration_every`, at most twice
///   [`QualityConfig::held_out_limit`] of them between two trims to the limit), as word ids
///   of the counts' word table (4 bytes a token plus 16 a caption): they are scored by the
///   calibration model, which exists only once every caption has been seen. Which of them
///   the calibrations read when there are more than the limit is [`held_out_sample`]'s
///   choice, which a trim keeps: the same captions whatever order they were added and
///   merged in.
/// - A histogram of the captions' word counts (one entry per distinct length).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QualityStats {
    counts: NgramCounts,
    /// The held-out captions, as ids of `counts`' word table.
    held_out: HeldOut,
    /// [`QualityConfig::held_out_limit`].
    held_out_limit: usize,
    /// Number of captions with each word count.
    lengths: BTreeMap<u64, u64>,
}

impl QualityStats {
    /// Empty statistics for a scorer of language-model order up to `order`
    /// ([`QualityConfig::order`]) with the default [`QualityConfig::held_out_limit`].
    pub fn new(order: usize) -> QualityStats {
        QualityStats::with_held_out_limit(order, DEFAULT_HELD_OUT_LIMIT)
    }

    /// Empty statistics for the scorers `config` describes.
    pub fn for_config(config: &QualityConfig) -> QualityStats {
        QualityStats::with_held_out_limit(config.order, config.held_out_limit)
    }

    fn with_held_out_limit(order: usize, held_out_limit: usize) -> QualityStats {
        QualityStats {
            counts: NgramCounts::new(order),
            held_out: HeldOut::default(),
            held_out_limit,
            lengths: BTreeMap::new(),
        }
    }

    /// Adds one tokenized caption; `held_out` says whether it is held out of the calibration
    /// model. An empty caption is skipped, as `train` skips it, so it must not take a number
    /// in the caller's [`QualityConfig::holds_out`] count either.
    ///
    /// `occurrence` names this caption among the corpus's captions, the same whichever worker
    /// reads it (its input unit and number in it, say): a held-out caption's chance to be in
    /// [`held_out_sample`] is a hash of it ([`sample_priority`]). `train` uses a caption's
    /// number among the non-empty captions.
    pub fn add_caption(&mut self, held_out: bool, occurrence: u64, tokens: &[String]) {
        if tokens.is_empty() {
            return;
        }
        let ids = self.counts.add_sentence_ids(tokens);
        if held_out {
            self.held_out.push(&ids, sample_priority(occurrence));
            self.trim_held_out(2 * self.held_out_limit.max(1));
        }
        *self.lengths.entry(word_count(tokens) as u64).or_default() += 1;
    }

    /// Adds `other`'s statistics to these.
    ///
    /// # Panics
    ///
    /// When the two were made for different orders or held-out limits.
    pub fn merge(&mut self, mut other: QualityStats) {
        assert_eq!(
            self.held_out_limit, other.held_out_limit,
            "quality statistics with different held-out limits cannot be merged"
        );
        if other.counts.distinct_ngrams() > self.counts.distinct_ngrams() {
            std::mem::swap(self, &mut other);
        }
        let remap = self.counts.absorb(other.counts);
        self.held_out.append_remapped(other.held_out, &remap);
        self.trim_held_out(2 * self.held_out_limit.max(1));
        for (length, count) in other.lengths {
            *self.lengths.entry(length).or_default() += count;
        }
    }

    /// Keeps [`held_out_sample`]'s choice of the held-out captions once there are more than
    /// `over`.
    fn trim_held_out(&mut self, over: usize) {
        if self.held_out.len() > over {
            let counts = &self.counts;
            self.held_out
                .keep_sample(self.held_out_limit, |id| counts.word(id));
        }
    }

    /// [`QualityConfig::held_out_limit`] of the statistics.
    pub fn held_out_limit(&self) -> usize {
        self.held_out_limit
    }

    /// The number of (non-empty) captions added.
    pub fn captions(&self) -> u64 {
        self.lengths.values().sum()
    }

    /// The number of held-out captions added.
    pub fn held_out_captions(&self) -> usize {
        self.held_out.len()
    }

    /// The highest language-model order these statistics can fit.
    pub fn order(&self) -> usize {
        self.counts.order()
    }

    /// Heap bytes held, roughly.
    pub fn approx_bytes(&self) -> usize {
        self.counts.approx_bytes() + self.held_out.approx_bytes() + self.lengths.len() * 48
    }
}

/// Captions as word ids, one after another in one buffer, with each caption's
/// [`sample_priority`] (4 bytes a token and 16 a caption, in three allocations however many
/// captions).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct HeldOut {
    tokens: Vec<u32>,
    /// Where each caption ends in `tokens`.
    ends: Vec<u64>,
    /// Each caption's [`sample_priority`].
    priorities: Vec<u64>,
}

impl HeldOut {
    fn push(&mut self, caption: &[u32], priority: u64) {
        self.tokens.extend_from_slice(caption);
        self.ends.push(self.tokens.len() as u64);
        self.priorities.push(priority);
    }

    /// Appends `other`'s captions with every word id `id` replaced by `remap[id]`.
    fn append_remapped(&mut self, other: HeldOut, remap: &[u32]) {
        let offset = self.tokens.len() as u64;
        self.tokens
            .extend(other.tokens.iter().map(|&id| remap[id as usize]));
        self.ends.extend(other.ends.iter().map(|&end| offset + end));
        self.priorities.extend(other.priorities);
    }

    /// Keeps only [`held_out_sample`]'s choice of `limit` captions; `word` gives a word id's
    /// text.
    fn keep_sample<'w>(&mut self, limit: usize, word: impl Fn(u32) -> &'w str) {
        let captions: Vec<&[u32]> = self.iter().collect();
        let words = |i: usize| captions[i].iter().map(|&id| word(id));
        let chosen = held_out_sample(&self.priorities, limit, |a, b| words(a).cmp(words(b)));
        let mut kept = HeldOut::default();
        for i in chosen {
            kept.push(captions[i], self.priorities[i]);
        }
        *self = kept;
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn iter(&self) -> impl Iterator<Item = &[u32]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.tokens[start as usize..end as usize])
    }

    fn approx_bytes(&self) -> usize {
        self.tokens.capacity() * std::mem::size_of::<u32>()
            + (self.ends.capacity() + self.priorities.capacity()) * std::mem::size_of::<u64>()
    }
}

/// Which of the held-out captions the calibrations read when there are more than `limit`:
/// the `limit` with the smallest priorities ([`sample_priority`] of their occurrence numbers),
/// ties (hash collisions) broken by `words_order` (comparing the two captions' words, so that
/// only identical captions tie and either may be kept). That is a uniform sample of the
/// held-out captions, each occurrence of a repeated caption on its own, that depends only on
/// which captions were held out under which numbers, not on the order they come in, so
/// statistics trimmed to it part by part and merged keep the sample all the captions together
/// give. Returns the chosen captions' indices
/// in ascending order; all of them when there are at most `limit`.
fn held_out_sample(
    priorities: &[u64],
    limit: usize,
    words_order: impl Fn(usize, usize) -> std::cmp::Ordering,
) -> Vec<usize> {
    let mut chosen: Vec<usize> = (0..priorities.len()).collect();
    if chosen.len() > limit {
        let order = |&a: &usize, &b: &usize| {
            priorities[a]
                .cmp(&priorities[b])
                .then_with(|| words_order(a, b))
        };
        if limit > 0 {
            chosen.select_nth_unstable_by(limit - 1, order);
        }
        chosen.truncate(limit);
        chosen.sort_unstable();
    }
    chosen
}

/// A caption's priority in [`held_out_sample`]: a 64-bit hash (XXH3) of its occurrence number
/// ([`QualityStats::add_caption`]), the same on every machine and in every run. A hash of the
/// words would take a repeated caption into the sample with all its repeats or with none, so
/// that the sample would hold fewer independent captions than its size.
fn sample_priority(occurrence: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&occurrence.to_le_bytes())
}

/// The minimum number of training captions: fewer cannot calibrate the scorer.
pub const MIN_TRAINING_CAPTIONS: usize = 10;

/// How many parts the calibration sample is cut into: each part's captions are scored by
/// models trained without them (cross-fitting), so that their features are those of captions
/// the models have not seen, as every caption the scorer judges later will be.
const FOLDS: u64 = 5;

/// How many corruptions of each sample caption the classifier is trained on; each weighs
/// `1 / CORRUPTIONS_PER_CAPTION`, so real and corrupted captions weigh the same in all.
const CORRUPTIONS_PER_CAPTION: usize = 4;

/// The share of the run's own captions (each scored by models that did not see it) that
/// scores at or below [`DEFAULT_THRESHOLD`]: the calibration's anchor.
const ANCHOR_QUANTILE: f64 = 0.05;

/// `ln(p / (1 - p))`.
fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

/// The order of the word-class language model.
const CLASS_ORDER: usize = 4;

/// A quality scorer trained on the dataset's own original captions, no model needed.
///
/// A logistic regression tells the run's captions from automatically corrupted versions of
/// them ([`corrupt`]: shuffled, words dropped or doubled, number disagreement, swapped roles,
/// fragments opened by a function word, verb forms in noun slots, stray words put in, words
/// moved out of place, captions cut off early) from [`features`] that generalise beyond those
/// corruptions: statistics of each token's probability under a Kneser-Ney word model trained
/// on the captions and under a model of their word classes, both also read right to left
/// (models of the reversed calibration sample), and well-formedness checks, every weight in
/// its feature's direction. The score is `σ(log-odds − z + logit 0.7)`, where the
/// log-odds are the classifier's (real and corrupted captions weighing the same) and `z` is the
/// 5th percentile of the run's own captions' log-odds, each scored by models that did not see
/// it: a score above 0.7 says the caption is at least as caption-like as all but the worst 5 %
/// of the run's captions. The calibration is documented in `docs/quality.md`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuiltinQualityScorer {
    lm: NgramLm,
    class_lm: NgramLm,
    backward_lm: NgramLm,
    backward_class_lm: NgramLm,
    config: QualityConfig,
    classifier: LogisticModel,
}

/// One caption of the calibration sample.
struct SampleCaption {
    priority: u64,
    ids: Vec<u32>,
    words: Vec<String>,
    classes: Vec<String>,
    backward_words: Vec<String>,
    backward_classes: Vec<String>,
}

impl BuiltinQualityScorer {
    /// Trains the scorer on tokenized original captions: the scorer
    /// [`from_stats`](Self::from_stats) fits from the statistics of the non-empty captions,
    /// numbered from 0 in the order given, the held-out ones chosen by
    /// [`QualityConfig::holds_out`].
    ///
    /// Fails when there are fewer than [`MIN_TRAINING_CAPTIONS`] non-empty captions, or when
    /// the configuration is out of range.
    pub fn train(captions: &[Vec<String>], config: &QualityConfig) -> Result<Self> {
        validate(config)?;
        let mut stats = QualityStats::for_config(config);
        for (index, caption) in captions.iter().filter(|c| !c.is_empty()).enumerate() {
            let index = index as u64;
            stats.add_caption(config.holds_out(index), index, caption);
        }
        BuiltinQualityScorer::from_stats(stats, config)
    }

    /// Fits the scorer from statistics gathered caption by caption (and merged): the same
    /// scorer, bit for bit, however the captions were split and merged, and the one
    /// [`train`](Self::train) gives when exactly the captions `train` holds out were flagged.
    ///
    /// The held-out captions (the calibration sample, at most
    /// [`QualityConfig::held_out_limit`]) are put in a canonical order, cut into parts by
    /// their sample priority, and each part is scored, with its corruptions, by models
    /// trained without it (the parts on as many threads as the machine has cores, their
    /// examples put together in part order); the classifier is fitted on those features. The
    /// scorer's own models are then trained on everything.
    ///
    /// Fails as `train` does (fewer than [`MIN_TRAINING_CAPTIONS`] captions, or fewer than
    /// that held out; a configuration out of range), when `config.order` is above the order
    /// the statistics were gathered for, or when the statistics are inconsistent (corrupt
    /// ones from elsewhere).
    pub fn from_stats(stats: QualityStats, config: &QualityConfig) -> Result<Self> {
        validate(config)?;
        let captions = stats.captions();
        let too_few = |what: &str, n: u64| {
            Error::invalid(
                "quality scorer training captions",
                format!(
                    "{n} {what} given, at least {MIN_TRAINING_CAPTIONS} are needed to calibrate \
                     the built-in scorer; give more captions or an external scorer"
                ),
            )
        };
        if captions < MIN_TRAINING_CAPTIONS as u64 {
            return Err(too_few("non-empty captions", captions));
        }
        let invalid = |reason: String| Error::invalid("quality scorer statistics", reason);
        if config.order > stats.order() {
            return Err(invalid(format!(
                "gathered for language-model order {}, cannot fit order {}",
                stats.order(),
                config.order
            )));
        }
        if config.held_out_limit != stats.held_out_limit {
            return Err(invalid(format!(
                "gathered for a held-out limit of {}, cannot fit one of {}",
                stats.held_out_limit, config.held_out_limit
            )));
        }
        let mut stats = stats;
        stats.trim_held_out(stats.held_out_limit);
        if stats.held_out.len() < MIN_TRAINING_CAPTIONS.min(stats.held_out_limit) {
            return Err(too_few(
                "held-out captions (one in calibration_every)",
                stats.held_out.len() as u64,
            ));
        }
        let lm_config = config.lm_config();
        let QualityStats {
            counts, held_out, ..
        } = stats;
        let sample = canonical_sample(&held_out, &counts);
        drop(held_out);
        let class_config = LmConfig {
            order: CLASS_ORDER,
            unk_max_count: 0,
            ..LmConfig::default()
        };

        // Each part's examples, from models without it; the parts are fitted on as many
        // threads as there are cores, and their examples put together in part order, so the
        // result is the same on any number of threads.
        let folds: Vec<u64> = (0..FOLDS)
            .filter(|&fold| sample.iter().any(|c| c.priority % FOLDS == fold))
            .collect();
        let fold_examples = |fold: u64| -> Result<Vec<Example>> {
            let in_fold = |c: &&SampleCaption| c.priority % FOLDS == fold;
            let part: Vec<&SampleCaption> = sample.iter().filter(in_fold).collect();
            let removed: Vec<&[u32]> = part.iter().map(|c| c.ids.as_slice()).collect();
            let words = NgramLm::from_counts_without(&counts, &removed, &lm_config)
                .map_err(|e| invalid(format!("a held-out caption: {e}")))?;
            // A model of one sequence of every caption outside the fold.
            let outside = |sequence: fn(&SampleCaption) -> &[String], config: &LmConfig| {
                NgramLm::train_with(sample.iter().filter(|c| !in_fold(c)).map(sequence), config)
            };
            let classes = outside(|c| c.classes.as_slice(), &class_config);
            let backward_words = outside(|c| c.backward_words.as_slice(), &lm_config);
            let backward_classes = outside(|c| c.backward_classes.as_slice(), &class_config);
            let models = FeatureModels {
                words: &words,
                classes: &classes,
                backward_words: &backward_words,
                backward_classes: &backward_classes,
            };
            let mut examples = Vec::with_capacity(part.len() * (1 + CORRUPTIONS_PER_CAPTION));
            for caption in part {
                examples.push(Example {
                    features: features::features(&models, &caption.words),
                    real: true,
                    weight: 1.0,
                });
                for corrupted in corruptions(caption, &sample) {
                    examples.push(Example {
                        features: features::features(&models, &corrupted),
                        real: false,
                        weight: 1.0 / CORRUPTIONS_PER_CAPTION as f64,
                    });
                }
            }
            Ok(examples)
        };
        // The parts' examples stay in their parts: the classifier reads them one part after
        // another, so they are held once.
        let parts: Vec<Vec<Example>> = parallel_map(&folds, fold_examples)
            .into_iter()
            .collect::<Result<_>>()?;
        let examples: Vec<&[Example]> = parts.iter().map(Vec::as_slice).collect();
        let mut classifier = LogisticModel::fit(&examples);
        // Anchor: the real captions' low quantile, each scored by models that did not see
        // it, goes to DEFAULT_THRESHOLD.
        let mut real: Vec<f64> = examples
            .iter()
            .flat_map(|part| part.iter())
            .filter(|e| e.real)
            .map(|e| classifier.log_odds(&e.features))
            .collect();
        real.sort_by(f64::total_cmp);
        let anchor = sorted_quantile(&real, ANCHOR_QUANTILE);
        classifier.bias += logit(DEFAULT_THRESHOLD) - anchor;
        let left_out: Vec<&str> = features::FEATURE_NAMES
            .iter()
            .zip(classifier.weights)
            .filter(|(_, weight)| *weight == 0.0)
            .map(|(name, _)| *name)
            .collect();
        tracing::debug!(
            calibration_captions = sample.len(),
            anchor,
            ?left_out,
            "quality scorer calibrated (features left out: their weight pointed against them)"
        );
        drop(examples);
        drop(parts);
        let lm = NgramLm::from_counts(&counts, &lm_config);
        drop(counts);
        let class_lm =
            NgramLm::train_with(sample.iter().map(|c| c.classes.as_slice()), &class_config);
        let backward_lm = NgramLm::train_with(
            sample.iter().map(|c| c.backward_words.as_slice()),
            &lm_config,
        );
        let backward_class_lm = NgramLm::train_with(
            sample.iter().map(|c| c.backward_classes.as_slice()),
            &class_config,
        );
        Ok(BuiltinQualityScorer {
            lm,
            class_lm,
            backward_lm,
            backward_class_lm,
            config: config.clone(),
            classifier,
        })
    }

    /// What the classifier reads off a caption (see [`FEATURE_NAMES`]).
    pub fn features(&self, caption_tokens: &[String]) -> Features {
        let models = FeatureModels {
            words: &self.lm,
            classes: &self.class_lm,
            backward_words: &self.backward_lm,
            backward_classes: &self.backward_class_lm,
        };
        features::features(&models, caption_tokens)
    }

    /// The classifier's weight of each feature (per standard deviation of the feature over
    /// its training examples), in [`FEATURE_NAMES`] order, and its bias.
    pub fn weights(&self) -> (Features, f64) {
        (self.classifier.weights, self.classifier.bias)
    }

    /// The language model the scorer judges word order with.
    pub fn language_model(&self) -> &NgramLm {
        &self.lm
    }
}

/// The held-out captions in an order that depends only on which captions they are: by sample
/// priority, then by their words.
fn canonical_sample(held_out: &HeldOut, counts: &NgramCounts) -> Vec<SampleCaption> {
    let mut sample: Vec<SampleCaption> = held_out
        .iter()
        .zip(&held_out.priorities)
        .map(|(ids, &priority)| {
            let words: Vec<String> = ids.iter().map(|&id| counts.word(id).to_string()).collect();
            let classes = features::class_sequence(&words);
            SampleCaption {
                priority,
                ids: ids.to_vec(),
                backward_words: words.iter().rev().cloned().collect(),
                backward_classes: classes.iter().rev().cloned().collect(),
                classes,
                words,
            }
        })
        .collect();
    sample.sort_by(|a, b| {
        a.priority
            .cmp(&b.priority)
            .then_with(|| a.words.cmp(&b.words))
    });
    sample
}

/// [`CORRUPTIONS_PER_CAPTION`] corruptions of different kinds of a sample caption, chosen and
/// made by a random stream seeded by its priority; another sample caption, drawn from the
/// same stream, lends words. Fewer when the caption is too short for them.
fn corruptions(caption: &SampleCaption, sample: &[SampleCaption]) -> Vec<Vec<String>> {
    let mut rng = ChaCha8Rng::seed_from_u64(caption.priority ^ 0x0063_6f72_7275_7074);
    let mut kinds = TRAINING_CORRUPTIONS;
    kinds.shuffle(&mut rng);
    let donor = &sample[rng.gen_range(0..sample.len())].words;
    kinds
        .iter()
        .filter_map(|&kind| corrupt::corrupt(kind, &caption.words, donor, &mut rng))
        .take(CORRUPTIONS_PER_CAPTION)
        .collect()
}

impl QualityScorer for BuiltinQualityScorer {
    fn score(&self, caption_tokens: &[String]) -> f64 {
        if caption_tokens.is_empty() || word_count(caption_tokens) == 0 {
            return 0.0;
        }
        let score = self.classifier.probability(&self.features(caption_tokens));
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
    if config.calibration_every == 0 {
        return bad("calibration_every must be at least 1");
    }
    if !(0.0..=1.0).contains(&config.threshold) {
        return bad("threshold must be in [0, 1]");
    }
    Ok(())
}

/// Linear-interpolated quantile of sorted, non-empty `values`.
fn sorted_quantile(sorted: &[f64], q: f64) -> f64 {
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
    fn too_few_captions_or_bad_config_is_an_error() {
        let few: Vec<Vec<String>> = corpus().into_iter().take(3).collect();
        assert!(BuiltinQualityScorer::train(&few, &QualityConfig::default()).is_err());
        let config = QualityConfig {
            threshold: 1.5,
            ..QualityConfig::default()
        };
        assert!(BuiltinQualityScorer::train(&corpus(), &config).is_err());
    }

    /// Asserts that the two scorers are the same, floats bit for bit.
    fn assert_same_scorer(a: &BuiltinQualityScorer, b: &BuiltinQualityScorer) {
        crate::text::lm::assert_same_model(&a.lm, &b.lm);
        crate::text::lm::assert_same_model(&a.class_lm, &b.class_lm);
        crate::text::lm::assert_same_model(&a.backward_lm, &b.backward_lm);
        crate::text::lm::assert_same_model(&a.backward_class_lm, &b.backward_class_lm);
        assert_eq!(a.config, b.config);
        let bits = |s: &BuiltinQualityScorer| {
            let c = &s.classifier;
            c.means
                .iter()
                .chain(&c.scales)
                .chain(&c.weights)
                .chain([&c.bias])
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(a), bits(b));
    }

    /// Statistics of `captions` numbered as one unit, split into parts by `part_of` and merged in
    /// `merge_order`.
    fn merged_stats(
        captions: &[Vec<String>],
        config: &QualityConfig,
        part_of: impl Fn(usize) -> usize,
        merge_order: &[usize],
    ) -> QualityStats {
        let mut parts: Vec<Option<QualityStats>> = (0..merge_order.len())
            .map(|_| Some(QualityStats::for_config(config)))
            .collect();
        let mut index = 0;
        for (i, caption) in captions.iter().enumerate() {
            let part = parts[part_of(i) % merge_order.len()].as_mut().unwrap();
            part.add_caption(config.holds_out(index), index, caption);
            if !caption.is_empty() {
                index += 1;
            }
        }
        let mut total = parts[merge_order[0]].take().unwrap();
        for &p in &merge_order[1..] {
            total.merge(parts[p].take().unwrap());
        }
        total
    }

    #[test]
    fn stats_fit_the_trained_scorer() {
        let mut captions = corpus();
        captions.insert(3, Vec::new());
        captions.insert(40, Vec::new());
        captions.push(tokenize(
            "a dog ( runs ) on the beach with a ball and a stick .",
        ));
        // Repeated captions: equal priorities in the held-out sample.
        let repeated: Vec<Vec<String>> = captions[5..25].to_vec();
        captions.extend(repeated);
        for calibration_every in [1, 2, 3, 5] {
            for (order, held_out_limit) in [(1, 10), (2, 13), (3, 16), (3, 1 << 16), (4, 12)] {
                let config = QualityConfig {
                    order,
                    calibration_every,
                    held_out_limit,
                    ..QualityConfig::default()
                };
                let trained = BuiltinQualityScorer::train(&captions, &config).unwrap();
                for (part_of, merge_order) in [
                    (Box::new(|_| 0usize) as Box<dyn Fn(usize) -> usize>, vec![0]),
                    (Box::new(|i| i % 2), vec![1, 0]),
                    (Box::new(|i| i * 7 % 4), vec![2, 0, 3, 1]),
                    (Box::new(|i| usize::from(i > 50)), vec![0, 1]),
                ] {
                    let stats = merged_stats(&captions, &config, part_of, &merge_order);
                    assert_eq!(stats.captions(), captions.len() as u64 - 2);
                    assert!(stats.held_out_captions() <= 2 * held_out_limit);
                    let fitted = BuiltinQualityScorer::from_stats(stats, &config).unwrap();
                    assert_same_scorer(&trained, &fitted);
                }
            }
        }
    }

    #[test]
    fn stats_fail_as_training_does() {
        let config = QualityConfig::default();
        let few: Vec<Vec<String>> = corpus().into_iter().take(9).collect();
        let stats = merged_stats(&few, &config, |_| 0, &[0]);
        let error = BuiltinQualityScorer::from_stats(stats, &config).unwrap_err();
        let trained = BuiltinQualityScorer::train(&few, &config).unwrap_err();
        assert_eq!(error.to_string(), trained.to_string());
        let stats = merged_stats(&corpus(), &config, |_| 0, &[0]);
        let higher = QualityConfig {
            order: 4,
            ..QualityConfig::default()
        };
        assert!(BuiltinQualityScorer::from_stats(stats, &higher).is_err());
        let stats = merged_stats(&corpus(), &config, |_| 0, &[0]);
        let other_limit = QualityConfig {
            held_out_limit: 10,
            ..QualityConfig::default()
        };
        assert!(BuiltinQualityScorer::from_stats(stats, &other_limit).is_err());
    }

    #[test]
    fn the_held_out_sample_is_bounded_and_chosen_by_occurrence() {
        // 100 distinct captions, 20 held out (one in five); the limit keeps 7 of them, and at
        // most twice as many are held while captions are added.
        let config = QualityConfig {
            held_out_limit: 7,
            calibration_every: 5,
            ..QualityConfig::default()
        };
        let captions = corpus();
        let forward = merged_stats(&captions, &config, |_| 0, &[0]);
        assert!(forward.held_out_captions() <= 14);
        let mut trimmed = forward.clone();
        trimmed.trim_held_out(config.held_out_limit);
        assert_eq!(trimmed.held_out_captions(), 7);
        // The same captions are kept when the held-out ones arrive in the opposite order.
        let mut backward = QualityStats::for_config(&config);
        let held: Vec<usize> = (0..captions.len())
            .filter(|&i| config.holds_out(i as u64))
            .collect();
        for &i in held.iter().rev() {
            backward.add_caption(true, i as u64, &captions[i]);
        }
        backward.trim_held_out(config.held_out_limit);
        let texts = |stats: &QualityStats| {
            let mut texts: Vec<String> = stats
                .held_out
                .iter()
                .map(|c| {
                    c.iter()
                        .map(|&id| stats.counts.word(id))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            texts.sort();
            texts
        };
        assert_eq!(texts(&trimmed), texts(&backward));
        assert_eq!(texts(&trimmed).len(), 7);
    }

    #[test]
    fn a_repeated_caption_enters_the_held_out_sample_occurrence_by_occurrence() {
        // 200 held-out occurrences of one caption and 200 distinct ones, 100 kept: each
        // occurrence is kept with probability 1/2, so the repeated caption fills about half of
        // the sample (a hash of the words would keep all its repeats or none of them).
        let config = QualityConfig {
            held_out_limit: 100,
            ..QualityConfig::default()
        };
        let repeated = tokenize("a dog runs on the beach .");
        let mut stats = QualityStats::for_config(&config);
        for i in 0..400u64 {
            let caption = if i % 2 == 0 {
                repeated.clone()
            } else {
                tokenize(&format!("a dog number {i} runs ."))
            };
            stats.add_caption(true, i, &caption);
        }
        stats.trim_held_out(config.held_out_limit);
        let kept = stats
            .held_out
            .iter()
            .filter(|c| {
                c.iter()
                    .map(|&id| stats.counts.word(id))
                    .eq(repeated.iter().map(String::as_str))
            })
            .count();
        assert_eq!(stats.held_out_captions(), 100);
        assert!(
            (30..=70).contains(&kept),
            "{kept} of 100 are the repeated caption"
        );
    }

    #[test]
    fn holds_out_is_the_training_rule() {
        let config = QualityConfig {
            calibration_every: 5,
            ..QualityConfig::default()
        };
        let held: Vec<u64> = (0..12).filter(|&i| config.holds_out(i)).collect();
        assert_eq!(held, [4, 9]);
    }

    #[test]
    fn stats_round_trip_through_serde() {
        let config = QualityConfig::default();
        let stats = merged_stats(&corpus(), &config, |i| i % 3, &[0, 2, 1]);
        let json = serde_json::to_string(&stats).unwrap();
        let back: QualityStats = serde_json::from_str(&json).unwrap();
        assert_eq!(back.held_out_captions(), stats.held_out_captions());
        assert!(stats.approx_bytes() > 0);
        assert_same_scorer(
            &BuiltinQualityScorer::from_stats(stats, &config).unwrap(),
            &BuiltinQualityScorer::from_stats(back, &config).unwrap(),
        );
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(sorted_quantile(&v, 0.5), 3.0);
        assert_eq!(sorted_quantile(&v, 0.1), 1.4);
        assert_eq!(sorted_quantile(&[7.0], 0.3), 7.0);
    }
}
