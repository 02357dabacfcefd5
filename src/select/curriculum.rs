//! CLID curriculum data selection (METHODS.md §2, "Training with data selection"): per-sample
//! quality scores, the per-iteration threshold, the smooth-step weights and the weighted draw.
//!
//! The math is independent of any model: the training sink (`crate::train`, feature `train`)
//! computes the two log-likelihoods, and everything after that lives here so it can be tested
//! without libtorch.
//!
//! # Sign convention
//!
//! The quality of a generated sample is `u = log p(y|x; M) − log p(y|x; M~)`, where `M` was
//! trained on the trusted data only and `M~` on trusted + generated, and `log p` is the mean
//! per-token log-likelihood (paper Eq. 1-2). **Higher `u` is better**: the trusted model likes
//! the caption at least as much as the model that has seen it. (The reference code stores the
//! negative, "noise"; see [`noise_from_quality`].)
//!
//! # One iteration `i = 1, 2, ...`
//!
//! ```
//! use capflow::select::curriculum::{plan_iteration, CurriculumConfig};
//! let scores = [-2.0, -1.0, 0.0, 1.0, 2.0];
//! let plan = plan_iteration(&scores, &CurriculumConfig::default(), 1);
//! assert_eq!(plan.draw, 4); // int(5 · (1 − 0.02))
//! assert!((plan.threshold - (-1.92)).abs() < 1e-12); // the 2nd percentile, linear
//! ```
//!
//! - the threshold `T_i` is the `c·i`-th percentile of the generated samples' `u` (numpy's
//!   default linear interpolation, as the reference's `np.percentile`);
//! - every generated sample gets the weight `f(u) = 0.5 (1 + tanh((u − T_i) / s))`;
//! - `int(N_gen (1 − c·i))` generated samples are drawn without replacement with probabilities
//!   proportional to `f` (successive sampling: each draw picks among the samples not yet drawn
//!   with probability proportional to their weights);
//! - the model trains `η` steps on all trusted samples ∪ the drawn ones;
//! - iterations stop after the first one that draws nothing ([`iteration_count`]).

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, RecordBatch, StringArray, UInt32Array,
};
use arrow::datatypes::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::seed::{splitmix64, SplitMix64};

/// The curriculum's parameters; a `[curriculum]` table of the training config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CurriculumConfig {
    /// Whether training runs the curriculum at all (otherwise it trains on every sample).
    pub enabled: bool,
    /// `c` in percent: iteration `i` thresholds at the `c·i`-th percentile and keeps
    /// `1 − c·i/100` of the generated samples (paper: 2).
    pub c_percent: f64,
    /// `s`, the smoothness of the step function (paper: 1).
    pub smoothness: f64,
    /// `η`, training steps per iteration (paper: 1200; 200 for paragraphs).
    pub steps_per_iteration: u64,
    /// Steps of the two scoring models `M` (trusted) and `M~` (trusted + generated); the
    /// reference trains each for 100k steps.
    pub scoring_steps: u64,
    /// Within every iteration, sample training batches so that each length level is drawn
    /// equally often (the paper's "length-balanced" training) instead of uniformly.
    pub balanced: bool,
    /// Methods whose samples are trusted (everything else is generated).
    pub trusted_methods: Vec<String>,
    /// Seed of the weighted draws.
    pub seed: u64,
}

impl Default for CurriculumConfig {
    fn default() -> Self {
        CurriculumConfig {
            enabled: false,
            c_percent: 2.0,
            smoothness: 1.0,
            steps_per_iteration: 1200,
            scoring_steps: 2000,
            balanced: false,
            trusted_methods: vec!["original".to_string()],
            seed: 0,
        }
    }
}

impl CurriculumConfig {
    /// Checks the parameters; the error names the bad one.
    pub fn validate(&self) -> Result<()> {
        if !(self.c_percent > 0.0 && self.c_percent <= 100.0) {
            return Err(Error::Config(format!(
                "curriculum.c_percent must be in (0, 100], got {}",
                self.c_percent
            )));
        }
        if !(self.smoothness > 0.0 && self.smoothness.is_finite()) {
            return Err(Error::Config(format!(
                "curriculum.smoothness must be positive, got {}",
                self.smoothness
            )));
        }
        if self.trusted_methods.is_empty() {
            return Err(Error::Config(
                "curriculum.trusted_methods must name at least one method".into(),
            ));
        }
        Ok(())
    }

    pub fn is_trusted(&self, method: &str) -> bool {
        self.trusted_methods.iter().any(|m| m == method)
    }
}

/// `u = log p(y|x; M) − log p(y|x; M~)`: positive when the trusted model `M` likes the caption
/// more than the model trained with the generated data.
pub fn quality_score(trusted_log_likelihood: f64, extended_log_likelihood: f64) -> f64 {
    trusted_log_likelihood - extended_log_likelihood
}

/// The reference code's "noise" of a sample: `−u`.
pub fn noise_from_quality(u: f64) -> f64 {
    -u
}

/// The `q`-th percentile (`q` in [0, 100]) of `values` with linear interpolation between the
/// closest ranks, as numpy's `np.percentile(values, q)`. NaNs sort last. `None` when empty.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let q = q.clamp(0.0, 100.0);
    let position = q / 100.0 * (sorted.len() - 1) as f64;
    let below = position.floor() as usize;
    let above = (below + 1).min(sorted.len() - 1);
    let fraction = position - below as f64;
    // numpy's `_lerp`: a + (b − a)·t, written from the nearer end for t ≥ 0.5.
    let (a, b) = (sorted[below], sorted[above]);
    let diff = b - a;
    Some(if fraction >= 0.5 {
        b - diff * (1.0 - fraction)
    } else {
        a + diff * fraction
    })
}

/// `f(u; T, s) = 0.5 (1 + tanh((u − T) / s))`.
pub fn selection_weight(u: f64, threshold: f64, smoothness: f64) -> f64 {
    0.5 * (1.0 + ((u - threshold) / smoothness).tanh())
}

/// The fraction of generated samples iteration `i` keeps, `1 − c·i/100`, never negative. Written
/// as the reference writes it (`1 − (c·i)/100`) so that `int(N · fraction)` truncates alike.
pub fn kept_fraction(c_percent: f64, iteration: u32) -> f64 {
    (1.0 - (c_percent * f64::from(iteration)) / 100.0).max(0.0)
}

/// `int(N_gen · (1 − c·i))`, the number of generated samples iteration `i` draws.
pub fn draw_count(generated: usize, c_percent: f64, iteration: u32) -> usize {
    (generated as f64 * kept_fraction(c_percent, iteration)).floor() as usize
}

/// Number of curriculum iterations: `1..=n` where iteration `n` is the first that draws no
/// generated sample (it trains on the trusted data alone, as the reference's last stage).
pub fn iteration_count(generated: usize, c_percent: f64) -> u32 {
    let mut i = 1u32;
    while draw_count(generated, c_percent, i) > 0 && i < 1_000_000 {
        i += 1;
    }
    i
}

/// What iteration `i` does with the generated samples, before the random draw.
#[derive(Clone, Debug, PartialEq)]
pub struct IterationPlan {
    pub iteration: u32,
    /// `T_i`, the `c·i`-th percentile of `u`.
    pub threshold: f64,
    /// `f(u_j; T_i, s)` per generated sample, in input order.
    pub weights: Vec<f64>,
    /// How many generated samples are drawn.
    pub draw: usize,
}

/// Threshold, weights and draw count of iteration `i` (1-based) for the quality scores `u`.
pub fn plan_iteration(scores: &[f64], config: &CurriculumConfig, iteration: u32) -> IterationPlan {
    let q = (config.c_percent * f64::from(iteration)).min(100.0);
    let threshold = percentile(scores, q).unwrap_or(0.0);
    let weights = scores
        .iter()
        .map(|&u| selection_weight(u, threshold, config.smoothness))
        .collect();
    IterationPlan {
        iteration,
        threshold,
        weights,
        draw: draw_count(scores.len(), config.c_percent, iteration),
    }
}

/// Draws `k` distinct indices with probabilities proportional to `weights`, by successive
/// sampling (each draw picks among the remaining indices proportionally to their weights).
///
/// Implemented as Efraimidis & Spirakis's one-pass algorithm (2006): index `j` gets the key
/// `ln(U_j) / w_j` with `U_j` uniform in (0, 1), and the `k` largest keys win; the result has
/// exactly the distribution of successive sampling. Zero (or negative, or NaN) weights are
/// drawn only when the positive ones run out, in random order. The result is sorted ascending;
/// the uniforms come from SplitMix64 seeded with `seed`, so the draw is reproducible.
pub fn weighted_sample_without_replacement(weights: &[f64], k: usize, seed: u64) -> Vec<usize> {
    let k = k.min(weights.len());
    let mut rng = SplitMix64::new(seed);
    let mut keyed: Vec<(f64, f64, usize)> = weights
        .iter()
        .enumerate()
        .map(|(j, &w)| {
            // 53 random bits, shifted off zero: U in (0, 1).
            let uniform = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let key = if w > 0.0 {
                uniform.ln() / w
            } else {
                f64::NEG_INFINITY
            };
            (key, uniform, j)
        })
        .collect();
    // Largest key first; among zero weights, the uniform decides.
    keyed.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| b.1.total_cmp(&a.1))
            .then_with(|| a.2.cmp(&b.2))
    });
    let mut chosen: Vec<usize> = keyed.into_iter().take(k).map(|(_, _, j)| j).collect();
    chosen.sort_unstable();
    chosen
}

/// The seed of iteration `i`'s draw: a hash of the configured seed and `i`, so every iteration
/// draws independently and a resumed run draws the same samples.
pub fn iteration_seed(seed: u64, iteration: u32) -> u64 {
    splitmix64(splitmix64(seed) ^ u64::from(iteration))
}

/// Iteration `i` carried out: its plan and the drawn generated samples (indices into `scores`).
#[derive(Clone, Debug, PartialEq)]
pub struct IterationSelection {
    pub plan: IterationPlan,
    /// Sorted indices of the drawn generated samples.
    pub chosen: Vec<usize>,
}

/// Plans iteration `i` and draws its generated samples.
pub fn select_iteration(
    scores: &[f64],
    config: &CurriculumConfig,
    iteration: u32,
) -> IterationSelection {
    let plan = plan_iteration(scores, config, iteration);
    let chosen = weighted_sample_without_replacement(
        &plan.weights,
        plan.draw,
        iteration_seed(config.seed, iteration),
    );
    IterationSelection { plan, chosen }
}

/// Sampling weights that make every length level equally likely: `1 / count(level)`. Used by
/// the `balanced` option to draw training batches.
pub fn balanced_level_weights(levels: &[i32]) -> Vec<f64> {
    let mut counts: std::collections::HashMap<i32, usize> = std::collections::HashMap::new();
    for &level in levels {
        *counts.entry(level).or_default() += 1;
    }
    levels
        .iter()
        .map(|level| 1.0 / counts[level] as f64)
        .collect()
}

/// One generated sample's score, as written to `scores.parquet`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScoreRecord {
    pub sample_id: String,
    pub method: String,
    pub length_level: i32,
    pub coverage: f64,
    /// Mean per-token log-likelihood under `M` (trusted data).
    pub trusted_log_likelihood: f64,
    /// Mean per-token log-likelihood under `M~` (trusted + generated).
    pub extended_log_likelihood: f64,
    /// `u = trusted − extended`.
    pub quality: f64,
}

/// Writes the generated samples' scores to a Parquet file.
pub fn write_scores(path: &Path, records: &[ScoreRecord]) -> Result<()> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("sample_id", DataType::Utf8, false),
        Field::new("method", DataType::Utf8, false),
        Field::new("length_level", DataType::Int32, false),
        Field::new("coverage", DataType::Float64, false),
        Field::new("trusted_log_likelihood", DataType::Float64, false),
        Field::new("extended_log_likelihood", DataType::Float64, false),
        Field::new("quality", DataType::Float64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            records.iter().map(|r| r.sample_id.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            records.iter().map(|r| r.method.as_str()),
        )),
        Arc::new(Int32Array::from_iter_values(
            records.iter().map(|r| r.length_level),
        )),
        Arc::new(Float64Array::from_iter_values(
            records.iter().map(|r| r.coverage),
        )),
        Arc::new(Float64Array::from_iter_values(
            records.iter().map(|r| r.trusted_log_likelihood),
        )),
        Arc::new(Float64Array::from_iter_values(
            records.iter().map(|r| r.extended_log_likelihood),
        )),
        Arc::new(Float64Array::from_iter_values(
            records.iter().map(|r| r.quality),
        )),
    ];
    write_parquet(path, schema, columns)
}

/// Writes every iteration's plan and draw to a Parquet file: one row per (iteration, generated
/// sample) with its threshold, weight and whether it was drawn.
pub fn write_selections(
    path: &Path,
    sample_ids: &[String],
    scores: &[f64],
    iterations: &[IterationSelection],
) -> Result<()> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("iteration", DataType::UInt32, false),
        Field::new("sample_id", DataType::Utf8, false),
        Field::new("quality", DataType::Float64, false),
        Field::new("threshold", DataType::Float64, false),
        Field::new("weight", DataType::Float64, false),
        Field::new("selected", DataType::Boolean, false),
    ]));
    let rows = iterations.len() * sample_ids.len();
    let mut iteration = Vec::with_capacity(rows);
    let mut ids = Vec::with_capacity(rows);
    let mut quality = Vec::with_capacity(rows);
    let mut threshold = Vec::with_capacity(rows);
    let mut weight = Vec::with_capacity(rows);
    let mut selected = Vec::with_capacity(rows);
    for it in iterations {
        let mut drawn = vec![false; sample_ids.len()];
        for &j in &it.chosen {
            drawn[j] = true;
        }
        for (j, id) in sample_ids.iter().enumerate() {
            iteration.push(it.plan.iteration);
            ids.push(id.as_str());
            quality.push(scores[j]);
            threshold.push(it.plan.threshold);
            weight.push(it.plan.weights[j]);
            selected.push(drawn[j]);
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(iteration)),
        Arc::new(StringArray::from(ids)),
        Arc::new(Float64Array::from(quality)),
        Arc::new(Float64Array::from(threshold)),
        Arc::new(Float64Array::from(weight)),
        Arc::new(BooleanArray::from(selected)),
    ];
    write_parquet(path, schema, columns)
}

fn write_parquet(path: &Path, schema: Arc<Schema>, columns: Vec<ArrayRef>) -> Result<()> {
    let what = format!("writing {}", path.display());
    let batch =
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| Error::arrow(&what, e))?;
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema, Some(props))
        .map_err(|e| Error::parquet(&what, e))?;
    writer.write(&batch).map_err(|e| Error::parquet(&what, e))?;
    writer.close().map_err(|e| Error::parquet(&what, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_iteration() {
        // Ten generated samples, u = -4.5, -3.5, ..., 4.5 (given shuffled).
        let scores = [0.5, -4.5, 2.5, -0.5, 4.5, -2.5, 1.5, -3.5, 3.5, -1.5];
        let config = CurriculumConfig {
            c_percent: 10.0,
            ..CurriculumConfig::default()
        };
        // Iteration 3: 30th percentile. Sorted position 0.3 · 9 = 2.7 between -2.5 and -1.5:
        // T = -2.5 + 0.7 · 1 = -1.8.
        let plan = plan_iteration(&scores, &config, 3);
        assert!(
            (plan.threshold - (-1.8)).abs() < 1e-12,
            "{}",
            plan.threshold
        );
        // int(10 · (1 − 0.3)) = 7.
        assert_eq!(plan.draw, 7);
        // u = 0.5: f = 0.5 (1 + tanh(2.3)); tanh(2.3) = 0.980096...
        let expected = 0.5 * (1.0 + 0.980_096_396_266_191_f64);
        assert!((plan.weights[0] - expected).abs() < 1e-12);
        // u = -1.8 exactly at the threshold would weigh 1/2; u = -4.5: tanh(-2.7) = -0.991007...
        assert!((plan.weights[1] - 0.5 * (1.0 - 0.991_007_453_678_117_6)).abs() < 1e-12);
        // Ten generated samples at c = 10%: 10 · (1 − 90/100) is 0.999… in binary floating
        // point and int() truncates it to 0, as the reference's Python does (10 · (1 − 0.8)
        // gives 1 the same way), so iterations 1..=8 draw and the 9th draws nothing; with 100
        // samples the 10th is the first empty one.
        assert_eq!(draw_count(10, 10.0, 8), 1);
        assert_eq!(draw_count(10, 10.0, 9), 0);
        assert_eq!(iteration_count(10, 10.0), 9);
        assert_eq!(iteration_count(100, 10.0), 10);
        let selection = select_iteration(&scores, &config, 3);
        assert_eq!(selection.chosen.len(), 7);
    }

    #[test]
    fn paper_schedule_counts() {
        // c = 2%: the 5th iteration thresholds at the 10th percentile (paper's example) and
        // keeps 90%; 1000 generated samples are gone after 50 iterations.
        assert_eq!(draw_count(1000, 2.0, 5), 900);
        assert_eq!(draw_count(1000, 2.0, 1), 980);
        assert_eq!(draw_count(1000, 2.0, 49), 20);
        assert_eq!(iteration_count(1000, 2.0), 50);
        // int() truncates: 7 · 0.98 = 6.86.
        assert_eq!(draw_count(7, 2.0, 1), 6);
    }

    #[test]
    fn percentile_matches_numpy() {
        // np.percentile([1, 2, 3, 4], q) for q = 0, 25, 50, 90, 100.
        let v = [4.0, 1.0, 3.0, 2.0];
        for (q, want) in [
            (0.0, 1.0),
            (25.0, 1.75),
            (50.0, 2.5),
            (90.0, 3.7),
            (100.0, 4.0),
        ] {
            let got = percentile(&v, q).unwrap();
            assert!((got - want).abs() < 1e-12, "q={q}: {got}");
        }
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7.0], 2.0), Some(7.0));
    }

    #[test]
    fn sign_convention() {
        // The trusted model likes the caption more: positive quality, weight above 1/2 at T=0.
        let u = quality_score(-1.0, -3.0);
        assert_eq!(u, 2.0);
        assert_eq!(noise_from_quality(u), -2.0);
        assert!(selection_weight(u, 0.0, 1.0) > 0.5);
        assert_eq!(selection_weight(0.0, 0.0, 1.0), 0.5);
    }

    #[test]
    fn single_draw_frequencies_follow_the_weights() {
        // One draw at a time is categorical sampling: counts ∝ weights. Pearson's chi-square
        // with 4 degrees of freedom stays below 18.47 (p = 0.001) for a correct sampler.
        let weights = [0.05, 0.1, 0.2, 0.25, 0.4];
        let trials = 20_000u64;
        let mut counts = [0u64; 5];
        for t in 0..trials {
            let drawn = weighted_sample_without_replacement(&weights, 1, splitmix64(t));
            counts[drawn[0]] += 1;
        }
        let total: f64 = weights.iter().sum();
        let chi2: f64 = counts
            .iter()
            .zip(weights)
            .map(|(&c, w)| {
                let expected = trials as f64 * w / total;
                (c as f64 - expected).powi(2) / expected
            })
            .sum();
        assert!(chi2 < 18.47, "chi-square {chi2}, counts {counts:?}");
    }

    #[test]
    fn draws_without_replacement_match_successive_sampling() {
        // Inclusion probability of j in a draw of 2 by successive sampling:
        // P(j) = w_j/W + Σ_{i≠j} (w_i/W) · w_j/(W − w_i), computed here by hand from the weights.
        let weights = [1.0, 2.0, 3.0, 4.0];
        let total: f64 = weights.iter().sum();
        let inclusion: Vec<f64> = (0..4)
            .map(|j| {
                let first = weights[j] / total;
                let second: f64 = (0..4)
                    .filter(|&i| i != j)
                    .map(|i| weights[i] / total * weights[j] / (total - weights[i]))
                    .sum();
                first + second
            })
            .collect();
        let trials = 20_000u64;
        let mut counts = [0u64; 4];
        for t in 0..trials {
            let drawn = weighted_sample_without_replacement(&weights, 2, splitmix64(t ^ 0xabc));
            assert_eq!(drawn.len(), 2);
            assert_ne!(drawn[0], drawn[1]);
            for j in drawn {
                counts[j] += 1;
            }
        }
        // Each indicator is Bernoulli(P(j)); 4.5 standard errors is far beyond chance.
        for j in 0..4 {
            let p = inclusion[j];
            let freq = counts[j] as f64 / trials as f64;
            let se = (p * (1.0 - p) / trials as f64).sqrt();
            assert!(
                (freq - p).abs() < 4.5 * se,
                "index {j}: frequency {freq}, expected {p}"
            );
        }
    }

    #[test]
    fn curriculum_draws_favour_high_quality() {
        // 200 samples: the better half (u > T) is drawn far more often in an early iteration.
        let scores: Vec<f64> = (0..200).map(|j| (j as f64 - 100.0) / 20.0).collect();
        let config = CurriculumConfig {
            c_percent: 25.0,
            ..CurriculumConfig::default()
        };
        let selection = select_iteration(&scores, &config, 2);
        assert_eq!(selection.chosen.len(), 100);
        let low = selection.chosen.iter().filter(|&&j| j < 50).count();
        let high = selection.chosen.iter().filter(|&&j| j >= 150).count();
        assert!(high > 3 * low.max(1), "low {low}, high {high}");
        // Same seed and iteration, same draw.
        assert_eq!(select_iteration(&scores, &config, 2), selection);
    }

    #[test]
    fn zero_weights_come_last() {
        let weights = [0.0, 1.0, 0.0, 1.0];
        assert_eq!(
            weighted_sample_without_replacement(&weights, 2, 7),
            vec![1, 3]
        );
        assert_eq!(weighted_sample_without_replacement(&weights, 9, 7).len(), 4);
    }

    #[test]
    fn balanced_weights_equalise_levels() {
        let w = balanced_level_weights(&[1, 1, 1, 2, 3, 3]);
        assert_eq!(w, vec![1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 1.0, 0.5, 0.5]);
    }

    #[test]
    fn writes_parquet() {
        let dir = tempfile::tempdir().unwrap();
        let scores = [1.0, -1.0];
        let ids = vec!["a".to_string(), "b".to_string()];
        let config = CurriculumConfig::default();
        let its = vec![select_iteration(&scores, &config, 1)];
        let path = dir.path().join("selections.parquet");
        write_selections(&path, &ids, &scores, &its).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 2);
    }
}
