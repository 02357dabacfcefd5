//! Word vectors from the captions themselves: PPMI co-occurrence matrix + truncated SVD.
//!
//! When no pretrained vectors (GloVe) are given, CLID and the visual-relatedness stages still
//! need word similarity. Levy, Goldberg & Dagan (2015) showed that a positive pointwise mutual
//! information matrix with context-distribution smoothing (α = 0.75), factorised by a truncated
//! SVD with the singular values raised to 0.5, is as good as word2vec on small corpora, and it
//! is deterministic. The SVD is a randomized range finder with power iterations (Halko,
//! Martinsson & Tropp, 2011) over the sparse matrix, finished by a Jacobi eigensolver on a small
//! dense matrix; everything is seeded, so the same captions and seed give the same vectors.
//!
//! # Training from merged counts
//!
//! [`train_ppmi_vectors`] needs every sentence at once. [`PpmiStats`] gathers the token counts
//! and windowed co-occurrence counts one sentence at a time; workers each fill their own, the
//! totals are [merged](PpmiStats::merge) in any order, and [`PpmiStats::fit`] gives the same
//! vectors, bit for bit, as `train_ppmi_vectors` on the same sentences.

use rustc_hash::FxHashMap as HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::interner::{map_bytes, Interner};

/// `(word, vector)` pairs, as [`train_ppmi_vectors`] and [`PpmiStats::fit`] give them.
pub type VectorPairs = Vec<(String, Vec<f32>)>;

/// Settings of [`train_ppmi_vectors`].
#[derive(Debug, Clone, PartialEq)]
pub struct PpmiConfig {
    /// Words up to this many positions away on either side are contexts (at least 1; 2 to 5
    /// suits captions).
    pub window: usize,
    /// Context-distribution smoothing exponent: context counts are raised to it before
    /// normalising, which stops rare contexts from getting inflated PMI.
    pub alpha: f64,
    /// Dimensions of the vectors (fewer when the vocabulary is smaller).
    pub dims: usize,
    /// Words seen fewer times get no vector and are not contexts.
    pub min_count: u64,
    /// Keep at most this many of the most frequent words.
    pub max_vocabulary: Option<usize>,
    /// Exponent of the singular values in the vectors (0.5 per Levy et al.; 1 is plain `UΣ`).
    pub singular_value_power: f64,
    /// Extra random directions sampled beyond `dims`, for accuracy of the randomized SVD.
    pub oversampling: usize,
    /// Power iterations of the randomized SVD (sharper for slowly decaying spectra).
    pub power_iterations: usize,
    /// Seed of the random projection.
    pub seed: u64,
}

impl Default for PpmiConfig {
    fn default() -> Self {
        PpmiConfig {
            window: 2,
            alpha: 0.75,
            dims: 50,
            min_count: 1,
            max_vocabulary: None,
            singular_value_power: 0.5,
            oversampling: 10,
            power_iterations: 4,
            seed: 0x5eed,
        }
    }
}

/// Trains word vectors on tokenized captions: one `(word, vector)` per vocabulary word, most
/// frequent first (ties by word), each vector `min(dims, vocabulary size)` long.
///
/// An empty corpus gives an empty table; a word whose every co-occurrence has non-positive PMI
/// gets the zero vector.
///
/// Every vector has the same length and finite values, so the table goes straight into
/// [`WordVectors::from_pairs`](crate::text::vectors::WordVectors::from_pairs).
pub fn train_ppmi_vectors<'a>(
    sentences: impl Iterator<Item = &'a [String]>,
    config: &PpmiConfig,
) -> Vec<(String, Vec<f32>)> {
    let sentences: Vec<&[String]> = sentences.collect();
    let vocabulary = vocabulary(&sentences, config);
    if vocabulary.is_empty() {
        return Vec::new();
    }
    let matrix = ppmi_matrix(&sentences, &vocabulary, config);
    vectors_of(vocabulary, &matrix, config)
}

/// The vectors of the vocabulary's words (the matrix's rows, in order).
fn vectors_of(
    vocabulary: Vec<String>,
    matrix: &SparseMatrix,
    config: &PpmiConfig,
) -> Vec<(String, Vec<f32>)> {
    let dims = config.dims.max(1).min(vocabulary.len());
    let (left, singular_values) = truncated_svd(matrix, dims, config);
    let weights: Vec<f64> = singular_values
        .iter()
        .map(|s| s.powf(config.singular_value_power))
        .collect();
    vocabulary
        .into_iter()
        .enumerate()
        .map(|(row, word)| {
            let vector = left
                .iter()
                .zip(&weights)
                .map(|(column, w)| (column[row] * w) as f32)
                .collect();
            (word, vector)
        })
        .collect()
}

/// Words with at least `min_count` occurrences, most frequent first, ties by word.
fn vocabulary(sentences: &[&[String]], config: &PpmiConfig) -> Vec<String> {
    let mut counts: HashMap<&str, u64> = HashMap::default();
    for token in sentences.iter().flat_map(|s| s.iter()) {
        *counts.entry(token.as_str()).or_default() += 1;
    }
    ranked_vocabulary(counts, config)
}

/// The vocabulary from each seen word's count (in any order).
fn ranked_vocabulary<'a>(
    counts: impl IntoIterator<Item = (&'a str, u64)>,
    config: &PpmiConfig,
) -> Vec<String> {
    let mut words: Vec<(&str, u64)> = counts
        .into_iter()
        .filter(|&(_, c)| c >= config.min_count)
        .collect();
    words.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if let Some(max) = config.max_vocabulary {
        words.truncate(max);
    }
    words.into_iter().map(|(w, _)| w.to_string()).collect()
}

/// Mergeable co-occurrence statistics of a corpus, from which [`PpmiStats::fit`] gives the
/// vectors [`train_ppmi_vectors`] would train on the same sentences.
///
/// # Execution model
///
/// Accumulate per worker, merge, fit once: each worker counts the sentences it reads with
/// [`add_sentence`](Self::add_sentence); the workers' statistics are combined with
/// [`merge`](Self::merge) (serialized with serde between processes if need be) in any order;
/// the total is fitted once. Everything counted is an integer, so the vectors do not depend on
/// how the sentences were split or ordered.
///
/// # What is counted
///
/// Every token's count, and for every two positions at most `window` apart in a sentence the
/// pair of their raw tokens (unordered). The vocabulary (`min_count`, `max_vocabulary`) is
/// only known from the total; since out-of-vocabulary words keep their positions in
/// [`train_ppmi_vectors`]'s windows, its counts are the raw pairs' counts restricted to the
/// vocabulary.
///
/// # Memory
///
/// Grows with the distinct words (their text, a count each) and the distinct co-occurring
/// word pairs (about 20 bytes each with the hash table's overhead).
/// [`approx_bytes`](Self::approx_bytes) estimates it.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "PpmiStatsWire")]
pub struct PpmiStats {
    window: usize,
    words: Interner,
    /// By local id.
    token_counts: Vec<u64>,
    /// Co-occurrences of two local ids, either order, keyed by [`pair_key`].
    pairs: HashMap<u64, u64>,
}

/// The key of the unordered pair of local ids `a`, `b`: the smaller in the high half.
pub(crate) fn pair_key(a: u32, b: u32) -> u64 {
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    (u64::from(low) << 32) | u64::from(high)
}

/// The two local ids of a [`pair_key`], the smaller first.
pub(crate) fn pair_of_key(key: u64) -> (u32, u32) {
    ((key >> 32) as u32, key as u32)
}

impl PpmiStats {
    /// Empty statistics for a context window of `window` positions on either side (at least 1;
    /// [`PpmiConfig::window`]).
    pub fn new(window: usize) -> PpmiStats {
        PpmiStats {
            window: window.max(1),
            words: Interner::default(),
            token_counts: Vec::new(),
            pairs: HashMap::default(),
        }
    }

    /// The context window counted.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The number of tokens counted.
    pub fn tokens(&self) -> u64 {
        self.token_counts.iter().sum()
    }

    /// The number of distinct co-occurring word pairs counted.
    pub fn distinct_pairs(&self) -> usize {
        self.pairs.len()
    }

    /// Counts one tokenized sentence.
    pub fn add_sentence<S: AsRef<str>>(&mut self, tokens: &[S]) {
        let ids: Vec<u32> = tokens
            .iter()
            .map(|t| self.words.intern(t.as_ref()))
            .collect();
        self.token_counts.resize(self.words.len(), 0);
        for (i, &word) in ids.iter().enumerate() {
            self.token_counts[word as usize] += 1;
            let end = (i + self.window + 1).min(ids.len());
            for &context in &ids[i + 1..end] {
                *self.pairs.entry(pair_key(word, context)).or_default() += 1;
            }
        }
    }

    /// Adds `other`'s counts to these.
    ///
    /// # Panics
    ///
    /// When the two count different windows.
    pub fn merge(&mut self, mut other: PpmiStats) {
        assert_eq!(
            self.window, other.window,
            "co-occurrence counts of different windows cannot be merged"
        );
        if other.pairs.len() > self.pairs.len() {
            std::mem::swap(self, &mut other);
        }
        let remap = self.words.absorb(&other.words);
        self.token_counts.resize(self.words.len(), 0);
        for (&id, &count) in remap.iter().zip(&other.token_counts) {
            self.token_counts[id as usize] += count;
        }
        for (key, count) in other.pairs {
            let (a, b) = pair_of_key(key);
            let key = pair_key(remap[a as usize], remap[b as usize]);
            *self.pairs.entry(key).or_default() += count;
        }
    }

    /// The word vectors, identical to [`train_ppmi_vectors`] with `config` on the counted
    /// sentences.
    ///
    /// # Panics
    ///
    /// When `config.window` is not the window counted.
    pub fn fit(&self, config: &PpmiConfig) -> Vec<(String, Vec<f32>)> {
        assert_eq!(
            config.window.max(1),
            self.window,
            "co-occurrences counted within {} positions cannot fit vectors of window {}",
            self.window,
            config.window
        );
        let counts = self
            .words
            .words()
            .zip(self.token_counts.iter().copied())
            .filter(|&(_, count)| count > 0);
        let vocabulary = ranked_vocabulary(counts, config);
        if vocabulary.is_empty() {
            return Vec::new();
        }
        let ids: HashMap<&str, u32> = vocabulary
            .iter()
            .enumerate()
            .map(|(i, w)| (w.as_str(), i as u32))
            .collect();
        let to_vocabulary: Vec<Option<u32>> =
            self.words.words().map(|w| ids.get(w).copied()).collect();
        let mut pairs: HashMap<(u32, u32), f64> = HashMap::default();
        for (&key, &count) in &self.pairs {
            let (a, b) = pair_of_key(key);
            if let (Some(a), Some(b)) = (to_vocabulary[a as usize], to_vocabulary[b as usize]) {
                // Whole numbers below 2^53: exact in any order of addition.
                let count = count as f64;
                *pairs.entry((a, b)).or_default() += count;
                *pairs.entry((b, a)).or_default() += count;
            }
        }
        let matrix = ppmi_of_pairs(&pairs, vocabulary.len(), config);
        vectors_of(vocabulary, &matrix, config)
    }

    /// Heap bytes held, roughly.
    pub fn approx_bytes(&self) -> usize {
        self.words.approx_bytes()
            + self.token_counts.capacity() * 8
            + map_bytes(self.pairs.capacity(), 16)
    }
}

/// [`PpmiStats`] as serialized: the word table, token counts by local id, and the pairs' ids
/// (two per pair, sorted) beside their counts.
#[derive(Serialize, Deserialize)]
struct PpmiStatsWire {
    window: usize,
    words: Vec<String>,
    token_counts: Vec<u64>,
    pairs: Vec<u32>,
    pair_counts: Vec<u64>,
}

impl Serialize for PpmiStats {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut pairs: Vec<(u64, u64)> = self.pairs.iter().map(|(&k, &c)| (k, c)).collect();
        pairs.sort_unstable();
        PpmiStatsWire {
            window: self.window,
            words: self.words.to_words(),
            token_counts: self.token_counts.clone(),
            pairs: pairs
                .iter()
                .flat_map(|&(key, _)| {
                    let (a, b) = pair_of_key(key);
                    [a, b]
                })
                .collect(),
            pair_counts: pairs.iter().map(|&(_, c)| c).collect(),
        }
        .serialize(serializer)
    }
}

impl TryFrom<PpmiStatsWire> for PpmiStats {
    type Error = String;

    fn try_from(wire: PpmiStatsWire) -> Result<PpmiStats, String> {
        let bad = |reason: &str| Err(format!("co-occurrence counts: {reason}"));
        let words =
            Interner::from_words(wire.words).map_err(|e| format!("co-occurrence counts: {e}"))?;
        if wire.window == 0 || wire.token_counts.len() != words.len() {
            return bad("the window or the number of token counts is wrong");
        }
        if wire.pairs.len() != 2 * wire.pair_counts.len() {
            return bad("the pairs and their counts disagree");
        }
        let mut pairs =
            HashMap::with_capacity_and_hasher(wire.pair_counts.len(), Default::default());
        for (pair, count) in wire.pairs.chunks_exact(2).zip(wire.pair_counts) {
            if pair.iter().any(|&id| id as usize >= words.len()) {
                return bad("a word id is out of range");
            }
            if count == 0 || pairs.insert(pair_key(pair[0], pair[1]), count).is_some() {
                return bad("a pair is listed twice or with count 0");
            }
        }
        Ok(PpmiStats {
            window: wire.window,
            words,
            token_counts: wire.token_counts,
            pairs,
        })
    }
}

/// A sparse matrix in compressed rows: `rows[i]` lists `(column, value)` sorted by column.
#[derive(Debug, Clone)]
struct SparseMatrix {
    columns: usize,
    rows: Vec<Vec<(u32, f64)>>,
}

impl SparseMatrix {
    /// `A x` for a dense column `x` of length `columns`.
    fn times(&self, x: &[f64]) -> Vec<f64> {
        self.rows
            .iter()
            .map(|row| row.iter().map(|&(c, v)| v * x[c as usize]).sum())
            .collect()
    }

    /// `Aᵀ y` for a dense column `y` of length `rows`.
    fn transpose_times(&self, y: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.columns];
        for (row, &scale) in self.rows.iter().zip(y) {
            for &(c, v) in row {
                out[c as usize] += v * scale;
            }
        }
        out
    }
}

/// The word × context PPMI matrix: `max(0, ln(#(w,c) / (#(w) · P_α(c))))`, where `#(w,c)`
/// counts `c` within `window` positions of `w`, `#(w) = Σ_c #(w,c)`, and
/// `P_α(c) = #(c)^α / Σ_c' #(c')^α`.
fn ppmi_matrix(
    sentences: &[&[String]],
    vocabulary: &[String],
    config: &PpmiConfig,
) -> SparseMatrix {
    let ids: HashMap<&str, u32> = vocabulary
        .iter()
        .enumerate()
        .map(|(i, w)| (w.as_str(), i as u32))
        .collect();
    let window = config.window.max(1);
    let mut pairs: HashMap<(u32, u32), f64> = HashMap::default();
    for sentence in sentences {
        // Out-of-vocabulary words keep their positions, so the window spans the real text.
        let encoded: Vec<Option<u32>> = sentence
            .iter()
            .map(|t| ids.get(t.as_str()).copied())
            .collect();
        for (i, word) in encoded.iter().enumerate() {
            let Some(word) = *word else { continue };
            let end = (i + window + 1).min(encoded.len());
            for context in encoded[i + 1..end].iter().flatten() {
                *pairs.entry((word, *context)).or_default() += 1.0;
                *pairs.entry((*context, word)).or_default() += 1.0;
            }
        }
    }
    ppmi_of_pairs(&pairs, vocabulary.len(), config)
}

/// The PPMI matrix of `n` words from their co-occurrence counts `#(w,c)` (integers, so that
/// their sums are exact and do not depend on the map's order).
fn ppmi_of_pairs(pairs: &HashMap<(u32, u32), f64>, n: usize, config: &PpmiConfig) -> SparseMatrix {
    let mut word_totals = vec![0.0; n];
    let mut context_totals = vec![0.0; n];
    for (&(w, c), &count) in pairs {
        word_totals[w as usize] += count;
        context_totals[c as usize] += count;
    }
    let smoothed: Vec<f64> = context_totals
        .iter()
        .map(|c: &f64| c.powf(config.alpha))
        .collect();
    let smoothed_total: f64 = smoothed.iter().sum();
    let mut rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
    for (&(w, c), &count) in pairs {
        let context_probability = smoothed[c as usize] / smoothed_total;
        let pmi = (count / (word_totals[w as usize] * context_probability)).ln();
        if pmi > 0.0 {
            rows[w as usize].push((c, pmi));
        }
    }
    for row in &mut rows {
        row.sort_unstable_by_key(|&(c, _)| c);
    }
    SparseMatrix { columns: n, rows }
}

/// The top `k` left singular vectors (as columns) and singular values of `matrix`, largest
/// first. Each vector's largest-magnitude entry is made positive, so signs do not flip between
/// runs that differ only in rounding.
fn truncated_svd(
    matrix: &SparseMatrix,
    k: usize,
    config: &PpmiConfig,
) -> (Vec<Vec<f64>>, Vec<f64>) {
    let n_rows = matrix.rows.len();
    let sample = (k + config.oversampling)
        .min(n_rows)
        .min(matrix.columns)
        .max(k);
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let omega: Vec<Vec<f64>> = (0..sample)
        .map(|_| {
            (0..matrix.columns)
                .map(|_| standard_normal(&mut rng))
                .collect()
        })
        .collect();
    // Range finder: Q spans A Ω, sharpened by (A Aᵀ)^q.
    let mut q: Vec<Vec<f64>> = omega.iter().map(|x| matrix.times(x)).collect();
    orthonormalize(&mut q);
    for _ in 0..config.power_iterations {
        let mut z: Vec<Vec<f64>> = q.iter().map(|y| matrix.transpose_times(y)).collect();
        orthonormalize(&mut z);
        q = z.iter().map(|x| matrix.times(x)).collect();
        orthonormalize(&mut q);
    }
    // B = Qᵀ A; its Gram matrix B Bᵀ = (Aᵀ Q)ᵀ (Aᵀ Q) has eigenvalues σ² and eigenvectors W,
    // and A's left singular vectors are Q W.
    let bt: Vec<Vec<f64>> = q.iter().map(|y| matrix.transpose_times(y)).collect();
    let gram: Vec<Vec<f64>> = bt
        .iter()
        .map(|a| bt.iter().map(|b| dot(a, b)).collect())
        .collect();
    let (eigenvalues, eigenvectors) = symmetric_eigen(gram);
    let mut order: Vec<usize> = (0..eigenvalues.len()).collect();
    order.sort_by(|&a, &b| eigenvalues[b].total_cmp(&eigenvalues[a]));
    let mut left = Vec::with_capacity(k);
    let mut singular_values = Vec::with_capacity(k);
    for &j in order.iter().take(k) {
        let mut u = vec![0.0; n_rows];
        for (qi, column) in q.iter().enumerate() {
            let weight = eigenvectors[qi][j];
            for (ui, &x) in u.iter_mut().zip(column) {
                *ui += weight * x;
            }
        }
        let largest = u
            .iter()
            .copied()
            .fold(0.0f64, |m, x| if x.abs() > m.abs() { x } else { m });
        if largest < 0.0 {
            u.iter_mut().for_each(|x| *x = -*x);
        }
        left.push(u);
        singular_values.push(eigenvalues[j].max(0.0).sqrt());
    }
    (left, singular_values)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Modified Gram-Schmidt, applied twice for accuracy; a column that is numerically dependent
/// on the earlier ones becomes zero (it then contributes a zero singular value).
fn orthonormalize(columns: &mut [Vec<f64>]) {
    for _ in 0..2 {
        for i in 0..columns.len() {
            let (done, rest) = columns.split_at_mut(i);
            let column = &mut rest[0];
            for previous in done.iter() {
                let projection = dot(previous, column);
                for (x, p) in column.iter_mut().zip(previous) {
                    *x -= projection * p;
                }
            }
            let norm = dot(column, column).sqrt();
            if norm > 1e-10 {
                column.iter_mut().for_each(|x| *x /= norm);
            } else {
                column.iter_mut().for_each(|x| *x = 0.0);
            }
        }
    }
}

/// Eigenvalues and eigenvectors (`vectors[row][j]` is entry `row` of eigenvector `j`) of a
/// small symmetric matrix by cyclic Jacobi rotations.
pub(crate) fn symmetric_eigen(mut a: Vec<Vec<f64>>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let n = a.len();
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    let scale: f64 = a.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum::<f64>()
            .sqrt();
        if off <= 1e-14 * scale.max(f64::MIN_POSITIVE) {
            break;
        }
        for p in 0..n {
            for r in p + 1..n {
                if a[p][r].abs() <= f64::MIN_POSITIVE {
                    continue;
                }
                let theta = (a[r][r] - a[p][p]) / (2.0 * a[p][r]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for row in a.iter_mut() {
                    let (x, y) = (row[p], row[r]);
                    row[p] = c * x - s * y;
                    row[r] = s * x + c * y;
                }
                let (upper, lower) = a.split_at_mut(r);
                for (x, y) in upper[p].iter_mut().zip(lower[0].iter_mut()) {
                    let (xp, yr) = (*x, *y);
                    *x = c * xp - s * yr;
                    *y = s * xp + c * yr;
                }
                for row in v.iter_mut() {
                    let (x, y) = (row[p], row[r]);
                    row[p] = c * x - s * y;
                    row[r] = s * x + c * y;
                }
            }
        }
    }
    ((0..n).map(|i| a[i][i]).collect(), v)
}

/// A standard normal draw (Box-Muller).
fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // in (0, 1], so ln is finite
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::vectors::WordVectors;

    fn sentences(text: &[&str]) -> Vec<Vec<String>> {
        text.iter()
            .map(|s| s.split_whitespace().map(String::from).collect())
            .collect()
    }

    #[test]
    fn ppmi_matches_hand_computation() {
        // "a b c", window 1: #(a,b) = #(b,a) = #(b,c) = #(c,b) = 1; #(a) = #(c) = 1, #(b) = 2.
        // α = 0.75: P_α(b) = 2^0.75 / (2 + 2^0.75), P_α(a) = 1 / (2 + 2^0.75).
        let corpus = sentences(&["a b c"]);
        let refs: Vec<&[String]> = corpus.iter().map(Vec::as_slice).collect();
        let config = PpmiConfig {
            window: 1,
            ..PpmiConfig::default()
        };
        let vocabulary = vocabulary(&refs, &config);
        assert_eq!(vocabulary, ["a", "b", "c"]);
        let matrix = ppmi_matrix(&refs, &vocabulary, &config);
        let z = 2.0 + 2f64.powf(0.75);
        let pmi_a_b = (1.0 / (1.0 * 2f64.powf(0.75) / z)).ln();
        let pmi_b_a = (1.0 / (2.0 * 1.0 / z)).ln();
        // Rows and columns: a = 0, b = 1, c = 2.
        assert_eq!(matrix.rows[0].len(), 1);
        assert!((matrix.rows[0][0].1 - pmi_a_b).abs() < 1e-12);
        assert_eq!(matrix.rows[1].len(), 2);
        assert_eq!(matrix.rows[1][0].0, 0);
        assert!((matrix.rows[1][0].1 - pmi_b_a).abs() < 1e-12);
        assert_eq!(matrix.rows[2], [(1, pmi_a_b)]);
    }

    #[test]
    fn svd_recovers_known_singular_values() {
        // Columns are scaled unit vectors: singular values 3, 2, 1.
        let matrix = SparseMatrix {
            columns: 3,
            rows: vec![vec![(0, 3.0)], vec![(2, -2.0)], vec![(1, 1.0)], vec![]],
        };
        let (left, sigma) = truncated_svd(&matrix, 2, &PpmiConfig::default());
        assert!(
            (sigma[0] - 3.0).abs() < 1e-9 && (sigma[1] - 2.0).abs() < 1e-9,
            "{sigma:?}"
        );
        assert!((left[0][0] - 1.0).abs() < 1e-9);
        assert!((left[1][1] - 1.0).abs() < 1e-9);

        // Rank one u vᵀ with u = (1, 2, 2), v = (3, 4): σ = |u| |v| = 3 · 5.
        let matrix = SparseMatrix {
            columns: 2,
            rows: vec![
                vec![(0, 3.0), (1, 4.0)],
                vec![(0, 6.0), (1, 8.0)],
                vec![(0, 6.0), (1, 8.0)],
            ],
        };
        let (left, sigma) = truncated_svd(&matrix, 2, &PpmiConfig::default());
        assert!(
            (sigma[0] - 15.0).abs() < 1e-9 && sigma[1].abs() < 1e-6,
            "{sigma:?}"
        );
        for (x, expected) in left[0].iter().zip([1.0, 2.0, 2.0]) {
            assert!((x - expected / 3.0).abs() < 1e-9);
        }
    }

    #[test]
    fn jacobi_diagonalises_a_symmetric_matrix() {
        // [[2, 1], [1, 2]] has eigenvalues 1 and 3.
        let (mut values, _) = symmetric_eigen(vec![vec![2.0, 1.0], vec![1.0, 2.0]]);
        values.sort_by(f64::total_cmp);
        assert!((values[0] - 1.0).abs() < 1e-12 && (values[1] - 3.0).abs() < 1e-12);
    }

    #[test]
    fn words_sharing_contexts_are_closer() {
        let corpus = sentences(&[
            "the cat eats its food in the kitchen",
            "the dog eats its food in the kitchen",
            "a small cat sleeps on the warm sofa",
            "a small dog sleeps on the warm sofa",
            "the cat chases a ball",
            "the dog chases a ball",
            "a red car drives down the busy road",
            "the car parks near the busy road",
            "a fast car drives on the highway",
        ]);
        let config = PpmiConfig {
            dims: 8,
            ..PpmiConfig::default()
        };
        let vectors = train_ppmi_vectors(corpus.iter().map(Vec::as_slice), &config);
        let table = WordVectors::from_pairs(vectors.iter().map(|(w, v)| (w, v))).unwrap();
        assert_eq!(table.dim(), 8);
        let cat_dog = table.cosine("cat", "dog").unwrap();
        let cat_car = table.cosine("cat", "car").unwrap();
        assert!(cat_dog > cat_car, "cat-dog {cat_dog} cat-car {cat_car}");
        // Same seed, same vectors.
        let again = train_ppmi_vectors(corpus.iter().map(Vec::as_slice), &config);
        assert_eq!(vectors, again);
    }

    #[test]
    fn vocabulary_respects_min_count_and_size() {
        let corpus = sentences(&["b a b c a b", "d"]);
        let refs: Vec<&[String]> = corpus.iter().map(Vec::as_slice).collect();
        let config = PpmiConfig {
            min_count: 2,
            ..PpmiConfig::default()
        };
        assert_eq!(vocabulary(&refs, &config), ["b", "a"]);
        let config = PpmiConfig {
            max_vocabulary: Some(1),
            ..PpmiConfig::default()
        };
        assert_eq!(vocabulary(&refs, &config), ["b"]);
        let vectors = train_ppmi_vectors(refs.iter().copied(), &config);
        assert_eq!(vectors.len(), 1);
    }

    /// Vectors as bits, so that the comparison is exact (and NaN-safe).
    fn bits(vectors: &[(String, Vec<f32>)]) -> Vec<(String, Vec<u32>)> {
        vectors
            .iter()
            .map(|(w, v)| (w.clone(), v.iter().map(|x| x.to_bits()).collect()))
            .collect()
    }

    /// Statistics of `corpus` split into the parts `part_of` assigns, merged in `merge_order`.
    fn merged_stats(
        corpus: &[Vec<String>],
        window: usize,
        part_of: impl Fn(usize) -> usize,
        merge_order: &[usize],
    ) -> PpmiStats {
        let mut parts: Vec<Option<PpmiStats>> = (0..merge_order.len())
            .map(|_| Some(PpmiStats::new(window)))
            .collect();
        for (i, sentence) in corpus.iter().enumerate() {
            let part = part_of(i) % merge_order.len();
            parts[part].as_mut().unwrap().add_sentence(sentence);
        }
        let mut total = parts[merge_order[0]].take().unwrap();
        for &p in &merge_order[1..] {
            total.merge(parts[p].take().unwrap());
        }
        total
    }

    #[test]
    fn merged_stats_fit_the_trained_vectors() {
        let corpus = sentences(&[
            "the cat eats its food in the kitchen",
            "the dog eats its food in the kitchen",
            "",
            "a small cat sleeps on the warm sofa",
            "a small dog sleeps on the warm sofa",
            "the cat chases a ball the cat",
            "the dog chases a ball",
            "a red car drives down the busy road",
            "the car parks near the busy road",
            "a fast car drives on the highway",
        ]);
        for window in 1..5 {
            for (min_count, max_vocabulary) in [(1, None), (2, None), (1, Some(7)), (3, Some(4))] {
                let config = PpmiConfig {
                    window,
                    dims: 6,
                    min_count,
                    max_vocabulary,
                    ..PpmiConfig::default()
                };
                let trained = train_ppmi_vectors(corpus.iter().map(Vec::as_slice), &config);
                let stats = merged_stats(&corpus, window, |i| i * 5 % 3, &[1, 2, 0]);
                assert_eq!(
                    stats.tokens(),
                    corpus.iter().map(Vec::len).sum::<usize>() as u64
                );
                assert_eq!(bits(&trained), bits(&stats.fit(&config)));
            }
        }
    }

    #[test]
    fn stats_round_trip_through_serde() {
        let corpus = sentences(&["b a b c a b", "d", "a c d b"]);
        let stats = merged_stats(&corpus, 2, |i| i, &[0, 1]);
        let json = serde_json::to_string(&stats).unwrap();
        let back: PpmiStats = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        let config = PpmiConfig::default();
        assert_eq!(bits(&stats.fit(&config)), bits(&back.fit(&config)));
        assert!(stats.approx_bytes() > 0);
        assert!(PpmiStats::new(2).fit(&config).is_empty());
    }

    proptest::proptest! {
        /// Any corpus split over 1 to 4 statistics merged in any order gives the same vectors.
        #[test]
        fn random_corpora_fit_the_trained_vectors(
            corpus in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec!["a", "b", "c", "d", "e", "f", "g"]),
                    0..10,
                ),
                0..12,
            ),
            window in 1usize..4,
            min_count in 1u64..3,
            max_vocabulary in proptest::option::of(1usize..6),
            parts in proptest::collection::vec(0usize..4, 12),
            merge_order in proptest::sample::select(vec![
                vec![0], vec![1, 0], vec![0, 2, 1], vec![3, 1, 0, 2], vec![2, 3, 0, 1],
            ]),
        ) {
            let corpus: Vec<Vec<String>> = corpus
                .iter()
                .map(|s| s.iter().map(|w| w.to_string()).collect())
                .collect();
            let config = PpmiConfig {
                window,
                dims: 4,
                min_count,
                max_vocabulary,
                ..PpmiConfig::default()
            };
            let trained = train_ppmi_vectors(corpus.iter().map(Vec::as_slice), &config);
            let stats = merged_stats(&corpus, window, |i| parts[i], &merge_order);
            proptest::prop_assert_eq!(bits(&trained), bits(&stats.fit(&config)));
        }
    }

    #[test]
    fn empty_and_tiny_corpora() {
        assert!(train_ppmi_vectors(std::iter::empty(), &PpmiConfig::default()).is_empty());
        let corpus = sentences(&["alone"]);
        let vectors = train_ppmi_vectors(corpus.iter().map(Vec::as_slice), &PpmiConfig::default());
        assert_eq!(vectors, vec![("alone".to_string(), vec![0.0f32])]);
    }
}
