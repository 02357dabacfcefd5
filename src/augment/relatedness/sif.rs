//! Sentence vectors and sentence similarity for visual relatedness.
//!
//! The paper scores a caption against its visual context with the cosine of Sentence-RoBERTa
//! embeddings. Without a neural model in process, capflow builds sentence vectors the SIF way
//! (Arora, Liang & Ma, "A simple but tough-to-beat baseline for sentence embeddings", 2017):
//! each word vector is weighted by `a / (a + p(w))`, with `p(w)` the word's relative frequency in
//! the dataset's captions, the weighted vectors are averaged, and the projection onto the first
//! principal component(s) of the corpus's sentence vectors (the direction every sentence shares)
//! is removed. Word vectors are unit length (as [`WordVectors`] keeps them), so GloVe's
//! frequency-dependent norms do not count twice. An external embedder (sentence-transformers
//! behind [`Embedder`]) replaces all of this when configured.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;
use crate::models::Embedder;
use crate::text::ppmi::symmetric_eigen;
use crate::text::tokenize::{is_punctuation, tokenize};
use crate::text::WordVectors;

/// The words of a text that carry meaning: lower-case tokens without punctuation.
pub fn content_tokens(text: &str) -> Vec<String> {
    tokenize(text)
        .into_iter()
        .filter(|t| !is_punctuation(t))
        .collect()
}

/// SIF sentence vectors over a table of word vectors.
#[derive(Clone, Debug)]
pub struct SifEncoder {
    vectors: WordVectors,
    /// `a / (a + p(w))` for every word of the fitting corpus; other words weigh 1 (`p = 0`).
    weights: HashMap<String, f64>,
    /// Unit principal directions removed from every sentence vector.
    components: Vec<Vec<f64>>,
}

impl SifEncoder {
    /// Fits word weights and common components on `corpus` (tokenized sentences, in a fixed
    /// order: the sums below are taken in it).
    ///
    /// `a` is SIF's smoothing weight (1e-3 in the paper); `remove` is how many principal
    /// components to remove (1 in the paper, 0 for plain weighted averages).
    pub fn fit(vectors: WordVectors, corpus: &[Vec<String>], a: f64, remove: usize) -> Self {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        let mut total = 0u64;
        for token in corpus.iter().flatten().filter(|t| !is_punctuation(t)) {
            *counts.entry(token.as_str()).or_default() += 1;
            total += 1;
        }
        let weights = counts
            .into_iter()
            .map(|(word, count)| {
                let p = count as f64 / total as f64;
                (word.to_string(), a / (a + p))
            })
            .collect();
        let mut encoder = SifEncoder {
            vectors,
            weights,
            components: Vec::new(),
        };
        let sentences: Vec<Vec<f64>> = corpus.iter().map(|s| encoder.average(s)).collect();
        encoder.components = principal_directions(&sentences, encoder.vectors.dim(), remove);
        encoder
    }

    /// The word vectors the encoder averages.
    pub fn vectors(&self) -> &WordVectors {
        &self.vectors
    }

    /// The SIF weight of a (lower-case) word.
    pub fn weight(&self, word: &str) -> f64 {
        self.weights.get(word).copied().unwrap_or(1.0)
    }

    /// The principal directions removed from sentence vectors.
    pub fn components(&self) -> &[Vec<f64>] {
        &self.components
    }

    /// The weighted average of the tokens' vectors (tokens without a vector are skipped; no
    /// known token gives the zero vector).
    fn average(&self, tokens: &[String]) -> Vec<f64> {
        let mut sum = vec![0.0f64; self.vectors.dim()];
        let mut known = 0usize;
        for token in tokens.iter().filter(|t| !is_punctuation(t)) {
            if let Some(vector) = self.vectors.get(token) {
                let w = self.weight(token);
                for (s, &x) in sum.iter_mut().zip(vector) {
                    *s += w * f64::from(x);
                }
                known += 1;
            }
        }
        if known > 0 {
            sum.iter_mut().for_each(|s| *s /= known as f64);
        }
        sum
    }

    /// The SIF vector of `text`.
    pub fn embed(&self, text: &str) -> Vec<f64> {
        let mut vector = self.average(&content_tokens(text));
        for component in &self.components {
            let projection: f64 = vector.iter().zip(component).map(|(x, u)| x * u).sum();
            for (x, u) in vector.iter_mut().zip(component) {
                *x -= projection * u;
            }
        }
        vector
    }

    /// The plain sum of a short label's word vectors (no SIF weights, no component removal:
    /// labels are compared with labels, not with the caption corpus); `None` when no word of
    /// the label has a vector.
    pub fn label_vector(&self, label: &str) -> Option<Vec<f64>> {
        let rows: Vec<&[f32]> = content_tokens(label)
            .iter()
            .filter_map(|t| self.vectors.get(t))
            .collect();
        if rows.is_empty() {
            return None;
        }
        let mut sum = vec![0.0f64; self.vectors.dim()];
        for row in rows {
            for (s, &x) in sum.iter_mut().zip(row) {
                *s += f64::from(x);
            }
        }
        Some(sum)
    }
}

/// The top `count` eigenvectors of `XᵀX` for sentence rows `X` (the right singular vectors of
/// `X`, uncentred, as SIF's TruncatedSVD takes them), largest first, each with a non-negative
/// largest entry so the result does not depend on the eigensolver's sign choice.
fn principal_directions(rows: &[Vec<f64>], dim: usize, count: usize) -> Vec<Vec<f64>> {
    if count == 0 || dim == 0 || rows.is_empty() {
        return Vec::new();
    }
    let mut gram = vec![vec![0.0f64; dim]; dim];
    for row in rows {
        for (i, &x) in row.iter().enumerate() {
            if x == 0.0 {
                continue;
            }
            for (g, &y) in gram[i].iter_mut().zip(row) {
                *g += x * y;
            }
        }
    }
    let (values, vectors) = symmetric_eigen(gram);
    let mut order: Vec<usize> = (0..dim).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .take(count)
        .filter(|&j| values[j] > 0.0)
        .map(|j| {
            let mut u: Vec<f64> = vectors.iter().map(|row| row[j]).collect();
            let norm = u.iter().map(|x| x * x).sum::<f64>().sqrt();
            let largest = u
                .iter()
                .copied()
                .max_by(|a, b| a.abs().total_cmp(&b.abs()))
                .unwrap_or(0.0);
            let sign = if largest < 0.0 { -1.0 } else { 1.0 };
            u.iter_mut().for_each(|x| *x *= sign / norm);
            u
        })
        .collect()
}

/// Cosine of two `f64` vectors, 0 when either is zero.
pub fn cosine64(a: &[f64], b: &[f64]) -> f64 {
    let (mut dot, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    dot / (aa.sqrt() * bb.sqrt())
}

/// What turns texts into sentence vectors: built-in SIF or an external model.
#[derive(Clone)]
pub enum SentenceEncoder {
    Sif(SifEncoder),
    External(Arc<dyn Embedder>),
}

impl std::fmt::Debug for SentenceEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SentenceEncoder::Sif(sif) => f
                .debug_struct("Sif")
                .field("words", &sif.vectors.len())
                .field("dim", &sif.vectors.dim())
                .finish(),
            SentenceEncoder::External(_) => f.write_str("External"),
        }
    }
}

impl SentenceEncoder {
    /// One vector per text, in order.
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f64>>> {
        match self {
            SentenceEncoder::Sif(sif) => Ok(texts.iter().map(|t| sif.embed(t)).collect()),
            SentenceEncoder::External(model) => Ok(model
                .embed(texts)?
                .into_iter()
                .map(|v| v.into_iter().map(f64::from).collect())
                .collect()),
        }
    }

    /// Cosine similarity of every text to `anchor` (the soft label when `anchor` is a visual
    /// context and the texts are captions).
    pub fn similarities_to(&self, anchor: &str, texts: &[String]) -> Result<Vec<f64>> {
        let mut batch = Vec::with_capacity(texts.len() + 1);
        batch.push(anchor.to_string());
        batch.extend(texts.iter().cloned());
        let vectors = self.embed(&batch)?;
        let (anchor, rest) = vectors
            .split_first()
            .ok_or_else(|| crate::Error::invalid("sentence embeddings", "no vector returned"))?;
        Ok(rest.iter().map(|v| cosine64(anchor, v)).collect())
    }

    /// Vectors of class labels for duplicate removal, one per label (`None` where the built-in
    /// encoder knows no word of it), from one call to an external model.
    pub fn label_vectors(&self, labels: &[String]) -> Result<Vec<Option<Vec<f64>>>> {
        match self {
            SentenceEncoder::Sif(sif) => Ok(labels.iter().map(|l| sif.label_vector(l)).collect()),
            SentenceEncoder::External(_) => Ok(self.embed(labels)?.into_iter().map(Some).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[(&str, [f32; 3])]) -> WordVectors {
        WordVectors::from_pairs(rows.iter().map(|(w, v)| (*w, v.to_vec()))).expect("valid table")
    }

    #[test]
    fn weights_follow_word_frequency() {
        let vectors = table(&[("dog", [1.0, 0.0, 0.0]), ("a", [0.0, 1.0, 0.0])]);
        let corpus = vec![content_tokens("a dog ."), content_tokens("a a")];
        let sif = SifEncoder::fit(vectors, &corpus, 0.5, 0);
        // p(a) = 3/4, p(dog) = 1/4; "." is not a word.
        assert!((sif.weight("a") - 0.5 / 1.25).abs() < 1e-15);
        assert!((sif.weight("dog") - 0.5 / 0.75).abs() < 1e-15);
        assert_eq!(sif.weight("cat"), 1.0);
        // "a dog": (0.4 * e2 + 2/3 * e1) / 2
        let v = sif.embed("A dog!");
        assert!((v[0] - 1.0 / 3.0).abs() < 1e-15 && (v[1] - 0.2).abs() < 1e-15);
    }

    #[test]
    fn removing_the_common_direction_leaves_the_orthogonal_part() {
        // Every sentence shares e1; the first principal direction is e1 and is removed.
        let vectors = table(&[
            ("the", [1.0, 0.0, 0.0]),
            ("dog", [1.0, 1.0, 0.0]),
            ("cat", [1.0, 0.0, 1.0]),
        ]);
        let corpus = vec![
            content_tokens("the dog"),
            content_tokens("the cat"),
            content_tokens("the"),
        ];
        let sif = SifEncoder::fit(vectors, &corpus, 1.0, 1);
        let u = &sif.components()[0];
        assert!(u[0] > 0.9, "first direction {u:?}");
        let v = sif.embed("the");
        let w = sif.embed("dog");
        let dot: f64 = v.iter().zip(u).map(|(x, y)| x * y).sum();
        assert!(dot.abs() < 1e-12);
        assert!(cosine64(&w, &sif.embed("cat")) < cosine64(&w, &sif.embed("dog")));
    }

    #[test]
    fn unknown_words_give_zero_similarity() {
        let vectors = table(&[("dog", [1.0, 0.0, 0.0])]);
        let sif = SifEncoder::fit(vectors, &[], 1e-3, 1);
        assert!(sif.components().is_empty());
        let encoder = SentenceEncoder::Sif(sif);
        let sims = encoder
            .similarities_to("dog", &["zebra".to_string(), "a dog".to_string()])
            .expect("built-in encoder");
        assert_eq!(sims, [0.0, 1.0]);
        let labels = encoder
            .label_vectors(&["dog".to_string(), "zebra".to_string()])
            .expect("built-in encoder");
        assert_eq!(labels, [Some(vec![1.0, 0.0, 0.0]), None]);
    }
}
