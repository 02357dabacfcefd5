//! CIDEr-D exactly as pycocoevalcap 1.2's `Cider` computes it.
//!
//! Each caption becomes, for n = 1..4, a TF-IDF vector over its n-grams, where the document
//! frequency of an n-gram is the number of images whose reference set contains it and the IDF
//! is `ln(#images) - ln(max(1, df))`. A hypothesis is compared with each reference by a cosine
//! whose numerator clips the hypothesis weight by the reference weight (the "-D" that stops
//! gaming by repetition), damped by a Gaussian penalty on the length difference (σ = 6); the
//! score averages n and references and is scaled by 10.
//!
//! Two quirks of the reference code are kept on purpose because published numbers include
//! them: the "length" in the Gaussian penalty is the caption's bigram count (`if n == 1` in
//! `counts2vec`), and n-grams that no reference contains get `df = 1`, i.e. the full IDF.

use std::collections::HashMap;

use super::{check_images, EvalImage, NGramCounts, MAX_N};
use crate::error::Result;

/// Standard deviation of the Gaussian length penalty.
pub const SIGMA: f64 = 6.0;

/// CIDEr-D of a corpus (mean over images) and of each image (in input order).
#[derive(Debug, Clone, PartialEq)]
pub struct CiderScores {
    pub corpus: f64,
    pub per_image: Vec<f64>,
}

/// Document frequencies of n-grams over a set of images' references, and the log of the number
/// of images: what the IDF of every caption vector is computed from.
#[derive(Debug, Clone, Default)]
pub struct DocumentFrequency {
    counts: HashMap<Vec<String>, f64>,
    log_images: f64,
}

impl DocumentFrequency {
    /// Counts, for each n-gram, the images whose references contain it.
    pub fn from_references<'r, I>(reference_sets: I) -> Self
    where
        I: IntoIterator<Item = &'r [Vec<String>]>,
    {
        let mut counts: HashMap<Vec<String>, f64> = HashMap::new();
        let mut images = 0usize;
        for references in reference_sets {
            images += 1;
            let mut seen: HashMap<&[String], ()> = HashMap::new();
            for reference in references {
                for (gram, _) in NGramCounts::new(reference, MAX_N).iter() {
                    seen.insert(gram, ());
                }
            }
            for gram in seen.into_keys() {
                *counts.entry(gram.to_vec()).or_insert(0.0) += 1.0;
            }
        }
        DocumentFrequency {
            counts,
            log_images: (images as f64).ln(),
        }
    }

    /// How many images' references contain `gram`.
    pub fn get(&self, gram: &[String]) -> f64 {
        self.counts.get(gram).copied().unwrap_or(0.0)
    }

    /// `ln` of the number of images the frequencies were counted over.
    pub fn log_images(&self) -> f64 {
        self.log_images
    }

    /// The TF-IDF vectors of one caption (`counts2vec`).
    pub fn vector<'a>(&self, caption: &'a [String]) -> TfIdf<'a> {
        let counts = NGramCounts::new(caption, MAX_N);
        let mut weights = Vec::with_capacity(counts.len());
        let mut norms = [0.0; MAX_N];
        let mut bigrams = 0u32;
        for (gram, term_freq) in counts.iter() {
            let log_df = self.get(gram).max(1.0).ln();
            let weight = f64::from(term_freq) * (self.log_images - log_df);
            let n = gram.len() - 1;
            norms[n] += weight.powi(2);
            if n == 1 {
                bigrams += term_freq;
            }
            weights.push(weight);
        }
        TfIdf {
            counts,
            weights,
            norms: norms.map(f64::sqrt),
            length: f64::from(bigrams),
        }
    }
}

/// A caption's TF-IDF weights for n = 1..4, their norms and its length as CIDEr-D counts it.
#[derive(Debug, Clone)]
pub struct TfIdf<'a> {
    counts: NGramCounts<'a>,
    weights: Vec<f64>,
    norms: [f64; MAX_N],
    length: f64,
}

impl TfIdf<'_> {
    fn weight(&self, gram: &[String]) -> f64 {
        self.counts
            .index
            .get(gram)
            .map_or(0.0, |&at| self.weights[at])
    }

    /// Per-n clipped cosine of a hypothesis (`self`) with one reference, length-penalised
    /// (`sim` in `cider_scorer.py`).
    fn similarity(&self, reference: &TfIdf) -> [f64; MAX_N] {
        let delta = self.length - reference.length;
        let penalty = std::f64::consts::E.powf(-(delta * delta) / (2.0 * SIGMA * SIGMA));
        let mut val = [0.0; MAX_N];
        for ((gram, _), &hyp_weight) in self.counts.iter().zip(&self.weights) {
            let ref_weight = reference.weight(gram);
            val[gram.len() - 1] += hyp_weight.min(ref_weight) * ref_weight;
        }
        for (n, v) in val.iter_mut().enumerate() {
            if self.norms[n] != 0.0 && reference.norms[n] != 0.0 {
                *v /= self.norms[n] * reference.norms[n];
            }
            *v *= penalty;
        }
        val
    }

    /// CIDEr-D of this hypothesis against pre-computed reference vectors.
    pub fn score_against(&self, references: &[TfIdf]) -> f64 {
        let mut total = [0.0; MAX_N];
        for reference in references {
            for (t, s) in total.iter_mut().zip(self.similarity(reference)) {
                *t += s;
            }
        }
        let mean = total.iter().sum::<f64>() / MAX_N as f64;
        mean / references.len() as f64 * 10.0
    }
}

/// CIDEr-D of `hypothesis` against `references` under the given document frequencies.
pub fn cider_d_one(
    df: &DocumentFrequency,
    hypothesis: &[String],
    references: &[Vec<String>],
) -> f64 {
    let refs: Vec<TfIdf> = references.iter().map(|r| df.vector(r)).collect();
    df.vector(hypothesis).score_against(&refs)
}

/// Corpus CIDEr-D, with document frequencies from the references of exactly these images.
pub fn cider_d(images: &[EvalImage]) -> Result<CiderScores> {
    check_images(images, "CIDEr-D input")?;
    let df = DocumentFrequency::from_references(images.iter().map(|i| i.references.as_slice()));
    let per_image: Vec<f64> = images
        .iter()
        .map(|i| cider_d_one(&df, &i.hypothesis, &i.references))
        .collect();
    let corpus = per_image.iter().sum::<f64>() / per_image.len() as f64;
    Ok(CiderScores { corpus, per_image })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn hand_computed_two_images() {
        // Image 1: hyp "a b" vs ref "a b"; image 2: hyp "c" vs ref "c d". ln 2 = L.
        // Unigrams a, b and bigram "a b" occur in one image each: weight L each.
        // Image 1: per n cos = 1 for n = 1, 2 (identical vectors), 0 for n = 3, 4; equal bigram
        // counts so no penalty: score = (1 + 1) / 4 * 10 = 5.
        // Image 2: unigram cos = L*L / (L * sqrt(2) L) = 1/sqrt(2); bigram: hyp has none.
        // Lengths (bigram counts) 0 and 1: penalty exp(-1/72). score = exp(-1/72)/sqrt(2)/4*10.
        let images = vec![
            EvalImage::new("1", words("a b"), vec![words("a b")]),
            EvalImage::new("2", words("c"), vec![words("c d")]),
        ];
        let scores = cider_d(&images).unwrap();
        let second = (-1.0f64 / 72.0).exp() / 2f64.sqrt() / 4.0 * 10.0;
        assert!((scores.per_image[0] - 5.0).abs() < 1e-12);
        assert!((scores.per_image[1] - second).abs() < 1e-12);
        assert!((scores.corpus - (5.0 + second) / 2.0).abs() < 1e-12);
    }

    #[test]
    fn one_image_corpus_scores_zero() {
        // ln(1) = 0 makes every IDF zero: the reference code scores a one-image corpus 0.
        let images = vec![EvalImage::new("1", words("a b"), vec![words("a b")])];
        assert_eq!(cider_d(&images).unwrap().corpus, 0.0);
    }

    #[test]
    fn repetition_is_clipped() {
        let images = [
            EvalImage::new("1", words("dog dog dog dog"), vec![words("a dog runs")]),
            EvalImage::new("2", words("x"), vec![words("y")]),
        ];
        let df = DocumentFrequency::from_references(images.iter().map(|i| i.references.as_slice()));
        let repeated = cider_d_one(&df, &words("dog dog dog dog"), &images[0].references);
        let once = cider_d_one(&df, &words("a dog runs"), &images[0].references);
        assert!(repeated < once);
    }
}
