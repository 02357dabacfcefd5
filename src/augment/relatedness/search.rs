//! Visual-context caption search: exact inner product on normalised vectors, and Recall@K.
//!
//! The paper's application (§6) embeds every caption, uses an image's visual context as the
//! query and retrieves captions with FAISS's exact search (`IndexFlatIP` over unit vectors, i.e.
//! cosine). This is the same brute-force search: every caption is scored, the `k` best are kept,
//! equal scores are ordered by caption position, so results never depend on threads or input
//! layout. A query is a hit at `K` when one of its relevant captions (those of its own image)
//! is among the first `K`; Recall@K is the fraction of queries that are hits.

use std::collections::BTreeSet;

use crate::error::{Error, Result};

/// Unit-length caption vectors, row after row.
#[derive(Clone, Debug, Default)]
pub struct CaptionIndex {
    dim: usize,
    rows: Vec<f32>,
}

/// Scales `vector` to unit length in `f64` (a zero vector stays zero and matches nothing).
pub fn normalised(vector: &[f64]) -> Vec<f64> {
    let norm = vector.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 {
        return vector.to_vec();
    }
    vector.iter().map(|x| x / norm).collect()
}

impl CaptionIndex {
    /// An index of `vectors` (one per caption, all of one dimension).
    pub fn new(vectors: &[Vec<f64>]) -> Result<Self> {
        let dim = vectors.first().map_or(0, Vec::len);
        let mut rows = Vec::with_capacity(vectors.len() * dim);
        for (i, vector) in vectors.iter().enumerate() {
            if vector.len() != dim {
                return Err(Error::invalid(
                    "caption vectors",
                    format!("vector {i} has {} values, expected {dim}", vector.len()),
                ));
            }
            if vector.iter().any(|x| !x.is_finite()) {
                return Err(Error::invalid(
                    "caption vectors",
                    format!("vector {i} has a value that is not finite"),
                ));
            }
            rows.extend(normalised(vector).into_iter().map(|x| x as f32));
        }
        Ok(CaptionIndex { dim, rows })
    }

    /// The number of captions.
    pub fn len(&self) -> usize {
        self.rows.len().checked_div(self.dim).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The `k` captions with the largest inner product with the normalised `query`, best first,
    /// as `(caption position, cosine)`; equal scores by position.
    pub fn search(&self, query: &[f64], k: usize) -> Result<Vec<(usize, f64)>> {
        if query.len() != self.dim && !self.is_empty() {
            return Err(Error::invalid(
                "search query",
                format!(
                    "the query has {} values, the index {}",
                    query.len(),
                    self.dim
                ),
            ));
        }
        let query = normalised(query);
        let mut scored: Vec<(usize, f64)> = self
            .rows
            .chunks_exact(self.dim.max(1))
            .enumerate()
            .map(|(i, row)| {
                let dot = row
                    .iter()
                    .zip(&query)
                    .map(|(&x, &q)| f64::from(x) * q)
                    .sum::<f64>();
                (i, dot)
            })
            .collect();
        let order = |a: &(usize, f64), b: &(usize, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = k.min(scored.len());
        if k == 0 {
            return Ok(Vec::new());
        }
        if k < scored.len() {
            scored.select_nth_unstable_by(k - 1, order);
            scored.truncate(k);
        }
        scored.sort_by(order);
        Ok(scored)
    }
}

/// Recall@K over queries: the fraction whose `relevant` set meets the first `k` of their
/// `ranking` (0 without queries).
pub fn recall_at_k(rankings: &[Vec<usize>], relevant: &[BTreeSet<usize>], k: usize) -> f64 {
    if rankings.is_empty() {
        return 0.0;
    }
    let hits = rankings
        .iter()
        .zip(relevant)
        .filter(|(ranking, relevant)| ranking.iter().take(k).any(|i| relevant.contains(i)))
        .count();
    hits as f64 / rankings.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_ranks_by_cosine_and_breaks_ties_by_position() {
        let index = CaptionIndex::new(&[
            vec![1.0, 0.0],
            vec![0.0, 2.0],
            vec![3.0, 3.0],
            vec![2.0, 0.0],
            vec![0.0, 0.0],
        ])
        .expect("valid vectors");
        assert_eq!(index.len(), 5);
        let hits = index.search(&[5.0, 0.0], 3).expect("same dimension");
        let order: Vec<usize> = hits.iter().map(|h| h.0).collect();
        assert_eq!(order, [0, 3, 2]);
        assert!((hits[2].1 - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-7);
        assert_eq!(index.search(&[1.0, 0.0], 0).expect("k = 0"), []);
        assert_eq!(index.search(&[1.0, 0.0], 99).expect("k > n").len(), 5);
        assert!(index.search(&[1.0], 1).is_err());
    }

    #[test]
    fn recall_counts_queries_with_a_relevant_hit() {
        let rankings = vec![vec![3, 1, 2], vec![0, 2, 1], vec![2, 0, 1]];
        let relevant = vec![
            BTreeSet::from([1]),
            BTreeSet::from([0, 1]),
            BTreeSet::from([5]),
        ];
        assert_eq!(recall_at_k(&rankings, &relevant, 1), 1.0 / 3.0);
        assert_eq!(recall_at_k(&rankings, &relevant, 2), 2.0 / 3.0);
        assert_eq!(recall_at_k(&[], &[], 5), 0.0);
    }
}
