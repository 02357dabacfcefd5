//! Word vectors from the captions themselves: PPMI co-occurrence matrix + truncated SVD.
//!
//! When no pretrained vectors (GloVe) are given, CLID and the visual-relatedness stages still
//! need word similarity. Levy, Goldberg & Dagan (2015) showed that a positive pointwise mutual
//! information matrix with context-distribution smoothing (α = 0.75), factorised by a truncated
//! SVD with the singular values raised to 0.5, is as good as word2vec on small corpora, and it
//! is deterministic. The SVD is a randomized range finder with power iterations (Halko,
//! Martinsson & Tropp, 2011) over the sparse matrix, finished by a Jacobi eigensolver on a small
//! dense matrix; everything is seeded, so the same captions and seed give the same vectors.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
    let dims = config.dims.max(1).min(vocabulary.len());
    let (left, singular_values) = truncated_svd(&matrix, dims, config);
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
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for token in sentences.iter().flat_map(|s| s.iter()) {
        *counts.entry(token.as_str()).or_default() += 1;
    }
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
    let mut pairs: HashMap<(u32, u32), f64> = HashMap::new();
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
    let n = vocabulary.len();
    let mut word_totals = vec![0.0; n];
    let mut context_totals = vec![0.0; n];
    for (&(w, c), &count) in &pairs {
        word_totals[w as usize] += count;
        context_totals[c as usize] += count;
    }
    let smoothed: Vec<f64> = context_totals
        .iter()
        .map(|c: &f64| c.powf(config.alpha))
        .collect();
    let smoothed_total: f64 = smoothed.iter().sum();
    let mut rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
    for (&(w, c), &count) in &pairs {
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

    #[test]
    fn empty_and_tiny_corpora() {
        assert!(train_ppmi_vectors(std::iter::empty(), &PpmiConfig::default()).is_empty());
        let corpus = sentences(&["alone"]);
        let vectors = train_ppmi_vectors(corpus.iter().map(Vec::as_slice), &PpmiConfig::default());
        assert_eq!(vectors, vec![("alone".to_string(), vec![0.0f32])]);
    }
}
