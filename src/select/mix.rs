//! Mixing original and augmented samples (METHODS.md §1.9): `D_mix = D ∪ sam(τ, p)`.
//!
//! Every original sample (method `original`) is kept; a [`MixConfig`] decides which augmented
//! samples (any other method) join them:
//!
//! - `all`: every augmented sample.
//! - `random`: exactly `round(p% · n)` of the `n` augmented samples (halves round up): those with
//!   the smallest [`sample_key`]. A sample's key depends only on (seed, sample id), so the chosen
//!   set does not depend on the input order or on how many workers produced the rows, and the
//!   samples chosen at 25% are also chosen at 50%.
//! - `uniform-coverage`: split coverage into `bins` equal bins over [0, 100] and add augmented
//!   samples to the bins the originals fill least, water-filling up to the tallest original bin,
//!   optionally within a budget of `p%` of the augmented samples (see [`uniform_coverage_plan`]).
//!   Within a bin the samples with the smallest [`sample_key`] go first.
//!
//! ```
//! use capflow::select::mix::{mix, MixConfig};
//! # use capflow::schema::{Provenance, SampleRow};
//! # fn row(id: &str, method: &str, coverage: f64) -> SampleRow {
//! #     SampleRow { sample_id: id.into(), image_id: "1".into(), split: "train".into(),
//! #         method: method.into(), text: "a dog".into(), control_boxes: vec![],
//! #         control_labels: vec![], coverage, length_level: 1, word_count: 2, verbs: vec![],
//! #         quality: vec![], provenance: Provenance::default(), image: None }
//! # }
//! let samples = vec![row("o1", "original", 35.0), row("s1", "ssa", 5.0), row("s2", "ssa", 38.0)];
//! let config: MixConfig = toml::from_str(r#"strategy = "uniform-coverage""#)?;
//! let mixed = mix(&samples, &config)?;
//! // The original fills bin [30, 40); the sample in [0, 10) raises that bin to the same height,
//! // the one in [30, 40) would make it taller and stays out.
//! let ids: Vec<&str> = mixed.iter().map(|s| s.sample_id.as_str()).collect();
//! assert_eq!(ids, ["o1", "s1"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::schema::SampleRow;

/// The method name of the samples that mixing always keeps.
pub const ORIGINAL_METHOD: &str = "original";

/// Coverage bins of `uniform-coverage` when the config names none: [0,10), [10,20) ... [90,100].
pub const DEFAULT_COVERAGE_BINS: usize = 10;

/// Most coverage bins a config may ask for.
pub const MAX_COVERAGE_BINS: usize = 1000;

/// How augmented samples are mixed with the originals: the `[mix]` table of a dataflow spec.
///
/// ```toml
/// [mix]
/// strategy = "random"          # or "all" (the default) or "uniform-coverage"
/// percent = 50                 # random: share of augmented samples kept, in [0, 100]
/// seed = 7                     # random and uniform-coverage: selection seed (default 0)
///
/// [mix]
/// strategy = "uniform-coverage"
/// bins = 10                    # default 10
/// percent = 30                 # optional: add at most 30% of the augmented samples
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "kebab-case", deny_unknown_fields)]
pub enum MixConfig {
    /// Keep every augmented sample.
    #[default]
    All,
    /// Keep `round(percent% · n)` augmented samples, chosen by seeded hash.
    Random {
        percent: f64,
        #[serde(default)]
        seed: u64,
    },
    /// Flatten the coverage histogram of the mixed set.
    UniformCoverage {
        #[serde(default = "default_bins")]
        bins: usize,
        /// Budget: add at most `round(percent% · n)` augmented samples; no budget when absent.
        #[serde(default)]
        percent: Option<f64>,
        #[serde(default)]
        seed: u64,
    },
}

fn default_bins() -> usize {
    DEFAULT_COVERAGE_BINS
}

impl MixConfig {
    /// Checks the numbers a config file can get wrong: a percent outside [0, 100], no bins.
    pub fn validate(&self) -> Result<()> {
        let check_percent = |percent: f64| {
            if percent.is_finite() && (0.0..=100.0).contains(&percent) {
                Ok(())
            } else {
                Err(Error::Config(format!(
                    "[mix] percent = {percent} is outside [0, 100]"
                )))
            }
        };
        match self {
            MixConfig::All => Ok(()),
            MixConfig::Random { percent, .. } => check_percent(*percent),
            MixConfig::UniformCoverage { bins, percent, .. } => {
                if !(1..=MAX_COVERAGE_BINS).contains(bins) {
                    return Err(Error::Config(format!(
                        "[mix] bins = {bins} is outside 1..={MAX_COVERAGE_BINS}"
                    )));
                }
                percent.map_or(Ok(()), check_percent)
            }
        }
    }
}

/// The seeded selection key of a sample: the first 8 bytes (big-endian) of
/// `SHA-256("capflow.mix" ‖ seed as 8 little-endian bytes ‖ sample_id)`.
///
/// A fixed cryptographic hash rather than a library RNG keeps selections identical across
/// capflow and dependency versions.
pub fn sample_key(seed: u64, sample_id: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(b"capflow.mix");
    hasher.update(seed.to_le_bytes());
    hasher.update(sample_id.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The bin of a coverage percent among `bins` equal bins of [0, 100]; the last bin is closed,
/// so 100 falls in it. Coverage outside [0, 100] is clamped.
pub fn coverage_bin(coverage: f64, bins: usize) -> usize {
    let bins = bins.max(1);
    let scaled = coverage.clamp(0.0, 100.0) * bins as f64 / 100.0;
    (scaled.floor() as usize).min(bins - 1)
}

/// Samples per coverage bin.
pub fn coverage_histogram<'a>(
    samples: impl IntoIterator<Item = &'a SampleRow>,
    bins: usize,
) -> Vec<u64> {
    let mut counts = vec![0u64; bins.max(1)];
    for sample in samples {
        counts[coverage_bin(sample.coverage, bins)] += 1;
    }
    counts
}

/// `round(percent% · n)`, halves rounded up.
pub fn percent_of(n: usize, percent: f64) -> usize {
    let exact = n as f64 * percent.clamp(0.0, 100.0) / 100.0;
    (exact.round() as usize).min(n)
}

/// Whether a sample is an original one (always kept by mixing).
pub fn is_original(sample: &SampleRow) -> bool {
    sample.method == ORIGINAL_METHOD
}

/// Indices into `samples` of the rows the mixed set keeps, ascending: every original and the
/// augmented samples `config` chooses.
///
/// Fails on an invalid config, on an augmented sample whose coverage is not a number (under
/// `uniform-coverage`), and on two augmented samples with the same id (their selection would
/// depend on which one came first).
pub fn select(samples: &[SampleRow], config: &MixConfig) -> Result<Vec<usize>> {
    config.validate()?;
    let augmented: Vec<usize> = (0..samples.len())
        .filter(|&i| !is_original(&samples[i]))
        .collect();
    check_unique_ids(samples, &augmented)?;
    let chosen: Vec<usize> = match config {
        MixConfig::All => augmented,
        MixConfig::Random { percent, seed } => {
            let mut ranked = ranked(samples, &augmented, *seed);
            ranked.truncate(percent_of(augmented.len(), *percent));
            ranked
        }
        MixConfig::UniformCoverage {
            bins,
            percent,
            seed,
        } => uniform_coverage(samples, &augmented, *bins, *percent, *seed)?,
    };
    let mut kept: Vec<usize> = (0..samples.len())
        .filter(|&i| is_original(&samples[i]))
        .chain(chosen)
        .collect();
    kept.sort_unstable();
    Ok(kept)
}

/// The mixed set: the rows [`select`] keeps, in input order.
pub fn mix(samples: &[SampleRow], config: &MixConfig) -> Result<Vec<SampleRow>> {
    Ok(select(samples, config)?
        .into_iter()
        .map(|i| samples[i].clone())
        .collect())
}

fn check_unique_ids(samples: &[SampleRow], augmented: &[usize]) -> Result<()> {
    let mut seen = HashSet::with_capacity(augmented.len());
    for &i in augmented {
        if !seen.insert(samples[i].sample_id.as_str()) {
            return Err(Error::invalid(
                format!("mix input, sample {:?}", samples[i].sample_id),
                "the sample id appears more than once among the augmented samples; sample ids \
                 must be unique for a seeded selection",
            ));
        }
    }
    Ok(())
}

/// `indices` sorted by (sample key, sample id): the order in which samples are chosen.
fn ranked(samples: &[SampleRow], indices: &[usize], seed: u64) -> Vec<usize> {
    let mut keyed: Vec<(u64, &str, usize)> = indices
        .iter()
        .map(|&i| {
            let id = samples[i].sample_id.as_str();
            (sample_key(seed, id), id, i)
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, _, i)| i).collect()
}

fn uniform_coverage(
    samples: &[SampleRow],
    augmented: &[usize],
    bins: usize,
    percent: Option<f64>,
    seed: u64,
) -> Result<Vec<usize>> {
    if let Some(&bad) = augmented.iter().find(|&&i| samples[i].coverage.is_nan()) {
        return Err(nan_coverage(&samples[bad].sample_id));
    }
    let originals = coverage_histogram(samples.iter().filter(|s| is_original(s)), bins);
    let mut candidates: Vec<Vec<(u64, &str, usize)>> = vec![Vec::new(); bins];
    for &i in augmented {
        let id = samples[i].sample_id.as_str();
        candidates[coverage_bin(samples[i].coverage, bins)].push((sample_key(seed, id), id, i));
    }
    for bin in &mut candidates {
        bin.sort_unstable();
    }
    let keys: Vec<Vec<u64>> = candidates
        .iter()
        .map(|bin| bin.iter().map(|c| c.0).collect())
        .collect();
    let budget = percent.map(|p| percent_of(augmented.len(), p));
    let plan = uniform_coverage_plan(&originals, &keys, budget);
    Ok(candidates
        .iter()
        .zip(plan)
        .flat_map(|(bin, take)| bin[..take].iter().map(|c| c.2))
        .collect())
}

/// How many augmented samples each coverage bin receives under `uniform-coverage`.
///
/// `originals[b]` is the number of original samples in bin b; `candidate_keys[b]` the keys of
/// the augmented samples in bin b, ascending (they are taken in that order). The plan is the
/// result of adding one sample at a time:
///
/// 1. among the bins that still have candidates and hold fewer samples than the tallest
///    original bin (`max originals`), take the one holding the fewest samples;
/// 2. on a tie, the bin whose next candidate has the smallest key (then the lower bin);
/// 3. stop when no bin qualifies or `budget` samples were added (no limit when `None`).
///
/// This is water-filling: every bin is raised toward a common level, and the resulting sorted
/// bin counts are the lexicographically largest (most even) that the candidates and the budget
/// allow without making any bin taller than the tallest original bin. With no originals nothing
/// is added: there is no histogram to flatten.
pub fn uniform_coverage_plan(
    originals: &[u64],
    candidate_keys: &[Vec<u64>],
    budget: Option<usize>,
) -> Vec<usize> {
    let level = originals.iter().copied().max().unwrap_or(0);
    let mut taken = vec![0usize; originals.len()];
    let mut left = budget.unwrap_or(usize::MAX);
    // Min-heap of (bin count, next candidate key, bin).
    let mut heap: BinaryHeap<Reverse<(u64, u64, usize)>> = BinaryHeap::new();
    for (bin, &count) in originals.iter().enumerate() {
        if let Some(&key) = candidate_keys.get(bin).and_then(|k| k.first()) {
            heap.push(Reverse((count, key, bin)));
        }
    }
    while left > 0 {
        let Some(Reverse((count, _, bin))) = heap.pop() else {
            break;
        };
        if count >= level {
            // The emptiest bin is as tall as the tallest original bin: all are.
            break;
        }
        taken[bin] += 1;
        left -= 1;
        if let Some(&key) = candidate_keys[bin].get(taken[bin]) {
            heap.push(Reverse((count + 1, key, bin)));
        }
    }
    taken
}

/// What a selection needs to know of the samples, gathered where they are made and merged:
/// the originals per coverage bin and the selection keys of the augmented samples per bin
/// (one bin unless the strategy is `uniform-coverage`). A worker tallies its own samples; the
/// tallies of every worker, [merged](MixTally::merge), give the [`MixPlan`] that [`select`]
/// would apply to all samples at once. Eight bytes per augmented sample: the samples
/// themselves stay where they are.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MixTally {
    pub originals: Vec<u64>,
    pub keys: Vec<Vec<u64>>,
}

impl MixTally {
    pub fn new(config: &MixConfig) -> Self {
        let bins = tally_bins(config);
        MixTally {
            originals: vec![0; bins],
            keys: vec![Vec::new(); bins],
        }
    }

    /// Adds one sample; fails where [`select`] would on it (a NaN coverage under
    /// `uniform-coverage`).
    pub fn add(&mut self, sample: &SampleRow, config: &MixConfig) -> Result<()> {
        let (seed, bins) = match config {
            MixConfig::All => (0, None),
            MixConfig::Random { seed, .. } => (*seed, None),
            MixConfig::UniformCoverage { bins, seed, .. } => (*seed, Some(*bins)),
        };
        let bin = match bins {
            Some(_) if !is_original(sample) && sample.coverage.is_nan() => {
                return Err(nan_coverage(&sample.sample_id))
            }
            Some(bins) => coverage_bin(sample.coverage, bins),
            None => 0,
        };
        if is_original(sample) {
            self.originals[bin] += 1;
        } else {
            self.keys[bin].push(sample_key(seed, &sample.sample_id));
        }
        Ok(())
    }

    pub fn merge(&mut self, other: MixTally) {
        for (mine, theirs) in self.originals.iter_mut().zip(other.originals) {
            *mine += theirs;
        }
        for (mine, theirs) in self.keys.iter_mut().zip(other.keys) {
            mine.extend(theirs);
        }
    }

    /// The selection [`select`] makes over the tallied samples, as a key threshold per bin.
    ///
    /// [`select`] orders candidates by (key, sample id); a plan knows only keys, so it fails
    /// (asking for another seed) in the one case where the ids would decide: two candidates of
    /// a bin with the same 64-bit key, one chosen and the other not.
    pub fn plan(mut self, config: &MixConfig) -> Result<MixPlan> {
        config.validate()?;
        for keys in &mut self.keys {
            keys.sort_unstable();
        }
        let augmented: usize = self.keys.iter().map(Vec::len).sum();
        let (seed, taken) = match config {
            MixConfig::All => {
                return Ok(MixPlan {
                    augmented: augmented as u64,
                    kept: augmented as u64,
                    ..MixPlan::all()
                })
            }
            MixConfig::Random { percent, seed } => (*seed, vec![percent_of(augmented, *percent)]),
            MixConfig::UniformCoverage { percent, seed, .. } => {
                let budget = percent.map(|p| percent_of(augmented, p));
                (
                    *seed,
                    uniform_coverage_plan(&self.originals, &self.keys, budget),
                )
            }
        };
        let mut thresholds = Vec::with_capacity(taken.len());
        for (bin, (keys, take)) in self.keys.iter().zip(taken).enumerate() {
            if take > 0 && take < keys.len() && keys[take - 1] == keys[take] {
                return Err(Error::Config(format!(
                    "[mix]: two augmented samples of coverage bin {bin} have the same selection \
                     key {} and only one of them is chosen; choose another [mix] seed",
                    keys[take]
                )));
            }
            thresholds.push(take.checked_sub(1).map(|last| keys[last]));
        }
        Ok(MixPlan {
            config: config.clone(),
            seed,
            kept: thresholds_kept(&self.keys, &thresholds),
            thresholds,
            augmented: augmented as u64,
        })
    }
}

/// Which samples a selection keeps: every original, and the augmented samples whose key is at
/// most their bin's threshold ([`MixTally::plan`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MixPlan {
    config: MixConfig,
    seed: u64,
    thresholds: Vec<Option<u64>>,
    /// Augmented samples tallied, and how many of them the plan keeps.
    pub augmented: u64,
    pub kept: u64,
}

impl MixPlan {
    /// The plan of `all`: every sample is kept.
    pub fn all() -> Self {
        MixPlan {
            config: MixConfig::All,
            seed: 0,
            thresholds: Vec::new(),
            augmented: 0,
            kept: 0,
        }
    }

    pub fn keeps(&self, sample: &SampleRow) -> bool {
        let bin = match &self.config {
            MixConfig::All => return true,
            _ if is_original(sample) => return true,
            MixConfig::Random { .. } => 0,
            MixConfig::UniformCoverage { bins, .. } => coverage_bin(sample.coverage, *bins),
        };
        self.thresholds[bin].is_some_and(|t| sample_key(self.seed, &sample.sample_id) <= t)
    }
}

fn tally_bins(config: &MixConfig) -> usize {
    match config {
        MixConfig::UniformCoverage { bins, .. } => (*bins).max(1),
        _ => 1,
    }
}

fn thresholds_kept(keys: &[Vec<u64>], thresholds: &[Option<u64>]) -> u64 {
    keys.iter()
        .zip(thresholds)
        .map(|(keys, t)| t.map_or(0, |t| keys.partition_point(|&k| k <= t)) as u64)
        .sum()
}

fn nan_coverage(sample_id: &str) -> Error {
    Error::invalid(
        format!("mix input, sample {sample_id:?}"),
        "coverage is NaN; uniform-coverage mixing needs every sample's coverage",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Provenance;
    use proptest::prelude::*;

    fn row(id: &str, method: &str, coverage: f64) -> SampleRow {
        SampleRow {
            image: None,
            sample_id: id.into(),
            image_id: "img".into(),
            split: "train".into(),
            method: method.into(),
            text: "a dog runs".into(),
            control_boxes: vec![],
            control_labels: vec![],
            coverage,
            length_level: 1,
            word_count: 3,
            verbs: vec![],
            quality: vec![],
            provenance: Provenance::default(),
        }
    }

    fn ids(samples: &[SampleRow], kept: &[usize]) -> Vec<String> {
        kept.iter().map(|&i| samples[i].sample_id.clone()).collect()
    }

    #[test]
    fn sample_key_is_the_documented_sha256_prefix() {
        // python3 -c "import hashlib,struct; d=hashlib.sha256(b'capflow.mix'
        //   + struct.pack('<Q', 7) + b'ssa:42:0').digest(); print(int.from_bytes(d[:8], 'big'))"
        assert_eq!(sample_key(7, "ssa:42:0"), 3_572_534_889_284_841_893);
        // ... and with seed 0 and id "x".
        assert_eq!(sample_key(0, "x"), 5_178_217_549_896_995_900);
    }

    #[test]
    fn bins_are_half_open_with_a_closed_last_bin() {
        let cases = [
            (0.0, 0),
            (9.999, 0),
            (10.0, 1),
            (55.0, 5),
            (90.0, 9),
            (100.0, 9),
            (-3.0, 0),
            (140.0, 9),
        ];
        for (coverage, bin) in cases {
            assert_eq!(coverage_bin(coverage, 10), bin, "{coverage}");
        }
        assert_eq!(coverage_bin(49.9, 2), 0);
        assert_eq!(coverage_bin(50.0, 2), 1);
    }

    #[test]
    fn percent_rounds_halves_up() {
        assert_eq!(percent_of(3, 50.0), 2); // 1.5
        assert_eq!(percent_of(4, 25.0), 1);
        assert_eq!(percent_of(10, 33.0), 3); // 3.3
        assert_eq!(percent_of(10, 35.0), 4); // 3.5
        assert_eq!(percent_of(7, 0.0), 0);
        assert_eq!(percent_of(7, 100.0), 7);
    }

    #[test]
    fn random_keeps_the_smallest_keys() {
        let samples: Vec<SampleRow> = ["o1", "a", "b", "c", "d", "o2"]
            .iter()
            .map(|id| {
                let method = if id.starts_with('o') {
                    "original"
                } else {
                    "ssa"
                };
                row(id, method, 10.0)
            })
            .collect();
        // Keys with seed 3 (python3 hashlib as in sample_key's test): b 991563828065978122,
        // c 3785352411319936934, d 6895850158234862498, a 13843287903076125196.
        let mut keyed: Vec<(u64, &str)> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| (sample_key(3, id), *id))
            .collect();
        keyed.sort();
        let order: Vec<&str> = keyed.iter().map(|k| k.1).collect();
        assert_eq!(order, ["b", "c", "d", "a"]);
        let expect = |percent: f64| -> Vec<&str> {
            let config = MixConfig::Random { percent, seed: 3 };
            let kept = select(&samples, &config).unwrap();
            kept.iter()
                .map(|&i| samples[i].sample_id.as_str())
                .collect()
        };
        assert_eq!(expect(0.0), ["o1", "o2"]);
        assert_eq!(expect(25.0), ["o1", "b", "o2"]);
        assert_eq!(expect(50.0), ["o1", "b", "c", "o2"]);
        assert_eq!(expect(75.0), ["o1", "b", "c", "d", "o2"]);
        assert_eq!(expect(100.0), ["o1", "a", "b", "c", "d", "o2"]);
    }

    #[test]
    fn water_filling_by_hand() {
        // Originals per bin [5, 1, 0, 3]; level 5. Unlimited: bin 1 takes 4, bin 2 can only
        // take its 2 candidates, bin 3 takes 2 of 9; bin 0 is at the level already.
        let keys = |n: usize| (0..n as u64).collect::<Vec<u64>>();
        let candidates = vec![keys(4), keys(6), keys(2), keys(9)];
        assert_eq!(
            uniform_coverage_plan(&[5, 1, 0, 3], &candidates, None),
            [0, 4, 2, 2]
        );
        // Budget 5, one sample at a time (count, next key) per bin, bin 0 being full:
        // 1. bin 2 (0) → [5,1,1,3]
        // 2. bin 1 (1, key 0) before bin 2 (1, key 1) → [5,2,1,3]
        // 3. bin 2 (1) → [5,2,2,3]; bin 2 has no candidate left
        // 4. bin 1 (2) → [5,3,2,3]
        // 5. bin 3 (3, key 0) before bin 1 (3, key 2) → [5,3,2,4]
        assert_eq!(
            uniform_coverage_plan(&[5, 1, 0, 3], &candidates, Some(5)),
            [0, 2, 2, 1]
        );
        // No originals: nothing to flatten.
        assert_eq!(
            uniform_coverage_plan(&[0, 0], &[keys(3), keys(3)], None),
            [0, 0]
        );
        // Already flat: nothing added.
        assert_eq!(
            uniform_coverage_plan(&[2, 2], &[keys(3), keys(3)], None),
            [0, 0]
        );
    }

    #[test]
    fn uniform_coverage_on_rows() {
        // Originals: two in [30,40), one in [50,60) → level 2. Augmented: three in [0,10),
        // one in [50,60), one at 100 (bin 9). Unlimited: bin 0 takes 2 of 3, bin 5 takes its
        // one, bin 9 takes its one.
        let samples = vec![
            row("o1", "original", 31.0),
            row("o2", "original", 39.9),
            row("o3", "original", 50.0),
            row("a1", "ssa", 0.5),
            row("a2", "ssa", 9.0),
            row("a3", "ssa", 3.0),
            row("a4", "ssa", 55.0),
            row("a5", "ssa", 100.0),
        ];
        let config = MixConfig::UniformCoverage {
            bins: 10,
            percent: None,
            seed: 1,
        };
        let kept_ids = ids(&samples, &select(&samples, &config).unwrap());
        // Within bin 0 the two smallest keys of seed 1 win (python3 hashlib): a3
        // 2370699323188526985, a1 10254528892594202572, a2 14056488543400778799.
        assert_eq!(kept_ids, ["o1", "o2", "o3", "a1", "a3", "a4", "a5"]);
        // Budget 40% of 5 = 2: the two emptiest bins at count 0 are 0 and 9; bin 5 (count 1)
        // waits. Bin 0 and bin 9 each take one.
        let budget = MixConfig::UniformCoverage {
            bins: 10,
            percent: Some(40.0),
            seed: 1,
        };
        let kept = select(&samples, &budget).unwrap();
        assert_eq!(ids(&samples, &kept), ["o1", "o2", "o3", "a3", "a5"]);
    }

    #[test]
    fn config_reads_from_toml() {
        #[derive(Deserialize)]
        struct Spec {
            #[serde(default)]
            mix: MixConfig,
        }
        let random: Spec =
            toml::from_str("[mix]\nstrategy = \"random\"\npercent = 50\nseed = 9").unwrap();
        assert_eq!(
            random.mix,
            MixConfig::Random {
                percent: 50.0,
                seed: 9
            }
        );
        let uniform: Spec = toml::from_str("[mix]\nstrategy = \"uniform-coverage\"").unwrap();
        assert_eq!(
            uniform.mix,
            MixConfig::UniformCoverage {
                bins: 10,
                percent: None,
                seed: 0
            }
        );
        let budget: Spec = toml::from_str(
            "[mix]\nstrategy = \"uniform-coverage\"\nbins = 5\npercent = 12.5\nseed = 2",
        )
        .unwrap();
        assert_eq!(
            budget.mix,
            MixConfig::UniformCoverage {
                bins: 5,
                percent: Some(12.5),
                seed: 2
            }
        );
        let default: Spec = toml::from_str("").unwrap();
        assert_eq!(default.mix, MixConfig::All);
        let all: Spec = toml::from_str("[mix]\nstrategy = \"all\"").unwrap();
        assert_eq!(all.mix, MixConfig::All);
        assert!(toml::from_str::<Spec>("[mix]\nstrategy = \"random\"\npercnt = 5").is_err());
        assert!(toml::from_str::<Spec>("[mix]\nstrategy = \"best\"").is_err());
        assert!(toml::from_str::<Spec>("[mix]\nstrategy = \"random\"").is_err());
    }

    #[test]
    fn bad_configs_and_inputs_are_errors() {
        let samples = vec![row("a", "ssa", 1.0), row("a", "clid", 2.0)];
        let err = select(&samples, &MixConfig::All).unwrap_err();
        assert!(err.to_string().contains("\"a\""), "{err}");
        let bad = MixConfig::Random {
            percent: 101.0,
            seed: 0,
        };
        assert!(matches!(select(&[], &bad), Err(Error::Config(_))));
        let no_bins = MixConfig::UniformCoverage {
            bins: 0,
            percent: None,
            seed: 0,
        };
        assert!(matches!(select(&[], &no_bins), Err(Error::Config(_))));
        let nan = vec![row("o", "original", 1.0), row("n", "ssa", f64::NAN)];
        let uniform = MixConfig::UniformCoverage {
            bins: 10,
            percent: None,
            seed: 0,
        };
        let err = select(&nan, &uniform).unwrap_err();
        assert!(err.to_string().contains("\"n\""), "{err}");
    }

    #[test]
    fn a_plan_refuses_a_key_shared_across_its_edge() {
        let config = MixConfig::Random {
            percent: 50.0,
            seed: 0,
        };
        // Four candidates, two chosen: keys 1, 5, 5, 9 put the edge between the two 5s, which
        // only the sample ids could order.
        let tally = MixTally {
            originals: vec![0],
            keys: vec![vec![5, 9, 1, 5]],
        };
        let err = tally.clone().plan(&config).unwrap_err();
        assert!(err.to_string().contains("another [mix] seed"), "{err}");
        // A shared key away from the edge is no matter: 75% takes 1, 5, 5.
        let config = MixConfig::Random {
            percent: 75.0,
            seed: 0,
        };
        let plan = tally.plan(&config).unwrap();
        assert_eq!((plan.augmented, plan.kept), (4, 3));
    }

    /// Samples with unique ids, a method (original or not) and a coverage.
    fn arb_samples() -> impl Strategy<Value = Vec<SampleRow>> {
        prop::collection::vec((any::<bool>(), 0u32..=1000), 0..60).prop_map(|rows| {
            rows.into_iter()
                .enumerate()
                .map(|(i, (original, coverage))| {
                    let method = if original { "original" } else { "ssa" };
                    row(&format!("s{i}"), method, coverage as f64 / 10.0)
                })
                .collect()
        })
    }

    fn arb_config() -> impl Strategy<Value = MixConfig> {
        prop_oneof![
            Just(MixConfig::All),
            (0u32..=100, any::<u64>()).prop_map(|(p, seed)| MixConfig::Random {
                percent: p as f64,
                seed
            }),
            (1usize..12, prop::option::of(0u32..=100), any::<u64>()).prop_map(|(bins, p, seed)| {
                MixConfig::UniformCoverage {
                    bins,
                    percent: p.map(f64::from),
                    seed,
                }
            }),
        ]
    }

    fn kept_ids(samples: &[SampleRow], config: &MixConfig) -> Vec<String> {
        let mut ids = ids(samples, &select(samples, config).unwrap());
        ids.sort();
        ids
    }

    /// Smallest count, second smallest, ...: larger is flatter (leximin order).
    fn sorted_counts(counts: &[u64]) -> Vec<u64> {
        let mut sorted = counts.to_vec();
        sorted.sort_unstable();
        sorted
    }

    proptest! {
        #[test]
        fn selection_ignores_input_order(
            samples in arb_samples(),
            config in arb_config(),
            shuffle_seed in any::<u64>(),
        ) {
            let mut shuffled = samples.clone();
            let mut rng = crate::seed::SplitMix64::new(shuffle_seed);
            for i in (1..shuffled.len()).rev() {
                shuffled.swap(i, rng.below(i + 1));
            }
            prop_assert_eq!(kept_ids(&samples, &config), kept_ids(&shuffled, &config));
        }

        #[test]
        fn a_plan_from_split_tallies_keeps_what_select_keeps(
            samples in arb_samples(),
            config in arb_config(),
            parts in 1usize..5,
        ) {
            // Each "worker" tallies every parts-th sample; the merged tallies' plan, applied
            // sample by sample, keeps exactly the samples `select` keeps of all of them.
            let mut tally = MixTally::new(&config);
            for part in 0..parts {
                let mut mine = MixTally::new(&config);
                for sample in samples.iter().skip(part).step_by(parts) {
                    mine.add(sample, &config).unwrap();
                }
                tally.merge(mine);
            }
            let plan = tally.plan(&config).unwrap();
            let kept: Vec<usize> = (0..samples.len()).filter(|&i| plan.keeps(&samples[i])).collect();
            let selected = select(&samples, &config).unwrap();
            prop_assert_eq!(&kept, &selected);
            let augmented = samples.iter().filter(|s| !is_original(s)).count();
            prop_assert_eq!(plan.augmented, augmented as u64);
            prop_assert_eq!(plan.kept as usize, selected.len() - (samples.len() - augmented));
        }

        #[test]
        fn selection_is_a_subset_keeping_every_original(
            samples in arb_samples(),
            config in arb_config(),
        ) {
            let kept = select(&samples, &config).unwrap();
            prop_assert!(kept.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(kept.iter().all(|&i| i < samples.len()));
            for (i, sample) in samples.iter().enumerate() {
                if is_original(sample) {
                    prop_assert!(kept.contains(&i));
                }
            }
            let augmented = samples.iter().filter(|s| !is_original(s)).count();
            let added = kept.len() - (samples.len() - augmented);
            match &config {
                MixConfig::All => prop_assert_eq!(added, augmented),
                MixConfig::Random { percent, .. } => {
                    prop_assert_eq!(added, percent_of(augmented, *percent))
                }
                MixConfig::UniformCoverage { percent: Some(p), .. } => {
                    prop_assert!(added <= percent_of(augmented, *p))
                }
                MixConfig::UniformCoverage { .. } => {}
            }
        }

        #[test]
        fn uniform_coverage_never_flattens_less_than_adding_nothing(
            samples in arb_samples(),
            bins in 1usize..12,
            percent in prop::option::of(1u32..=100),
        ) {
            let config = MixConfig::UniformCoverage {
                bins,
                percent: percent.map(f64::from),
                seed: 0,
            };
            let kept = select(&samples, &config).unwrap();
            let before = coverage_histogram(samples.iter().filter(|s| is_original(s)), bins);
            let after = coverage_histogram(kept.iter().map(|&i| &samples[i]), bins);
            let level = before.iter().copied().max().unwrap_or(0);
            // Never taller than the tallest original bin, never a bin lowered.
            prop_assert_eq!(after.iter().copied().max().unwrap_or(0), level);
            prop_assert!(before.iter().zip(&after).all(|(b, a)| a >= b));
            prop_assert!(sorted_counts(&after) >= sorted_counts(&before));
            // Strictly flatter when an under-filled bin has candidates and the budget allows one.
            let augmented: Vec<&SampleRow> =
                samples.iter().filter(|s| !is_original(s)).collect();
            let fillable = augmented
                .iter()
                .any(|s| before[coverage_bin(s.coverage, bins)] < level);
            let budget = percent.map_or(usize::MAX, |p| percent_of(augmented.len(), p as f64));
            if fillable && budget > 0 {
                prop_assert!(sorted_counts(&after) > sorted_counts(&before));
            }
        }

        #[test]
        fn water_filling_is_leximin_optimal(
            originals in prop::collection::vec(0u64..5, 1..5),
            available in prop::collection::vec(0usize..4, 4),
            budget in prop::option::of(0usize..8),
        ) {
            // Brute force over every allocation: none with the same limits (per-bin
            // candidates, total budget, no bin above the tallest original bin) has larger
            // sorted counts than the plan.
            let bins = originals.len();
            let keys: Vec<Vec<u64>> =
                (0..bins).map(|b| (0..available[b] as u64).collect()).collect();
            let plan = uniform_coverage_plan(&originals, &keys, budget);
            let level = originals.iter().copied().max().unwrap_or(0);
            let counts = |take: &[usize]| -> Vec<u64> {
                originals.iter().zip(take).map(|(&o, &t)| o + t as u64).collect()
            };
            let best = sorted_counts(&counts(&plan));
            prop_assert!(plan.iter().zip(&available).all(|(t, a)| t <= a));
            prop_assert!(plan.iter().sum::<usize>() <= budget.unwrap_or(usize::MAX));
            let mut take = vec![0usize; bins];
            loop {
                let total: usize = take.iter().sum();
                let c = counts(&take);
                if total <= budget.unwrap_or(usize::MAX) && c.iter().all(|&x| x <= level) {
                    prop_assert!(sorted_counts(&c) <= best, "{:?} beats {:?}", take, plan);
                }
                // Next allocation in mixed radix.
                let mut b = 0;
                while b < bins && take[b] == available[b] {
                    take[b] = 0;
                    b += 1;
                }
                if b == bins {
                    break;
                }
                take[b] += 1;
            }
        }
    }
}
