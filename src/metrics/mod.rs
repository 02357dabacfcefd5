//! Caption metrics: BLEU-1..4 and CIDEr-D as pycocoevalcap 1.2 computes them, self-CIDEr and
//! D-n diversity, and the control metrics of captions against a dataset's controls
//! ([`control_eval`], read from a captions file by [`generated`]).
//!
//! The corpus metrics take already tokenised captions ([`tokenize::Tokenizer`]) grouped per image
//! in an [`EvalImage`]. N-grams are kept in first-appearance order ([`NGramCounts`]) because the
//! reference implementation sums floating-point terms in that order; matching it keeps our scores
//! equal to the published ones to the last few bits, and run-to-run deterministic.
//!
//! ```
//! use capflow::metrics::{bleu, cider, EvalImage, Tokenizer};
//! let tok = |s: &str| Tokenizer::Whitespace.tokenize(s);
//! let images = vec![
//!     EvalImage::new("1", tok("a dog runs on grass"), vec![tok("a dog runs on the grass")]),
//!     EvalImage::new("2", tok("a red bus"), vec![tok("a red bus on a street")]),
//! ];
//! let b = bleu::corpus_bleu(&images).unwrap();
//! let c = cider::cider_d(&images).unwrap();
//! assert!(b.corpus[0] > 0.0 && c.corpus > 0.0);
//! ```

pub mod bleu;
pub mod cider;
pub mod control;
pub mod control_eval;
pub mod diversity;
pub mod generated;
pub mod tokenize;

use std::collections::HashMap;

pub use tokenize::Tokenizer;

use crate::error::{Error, Result};

/// The longest n-gram BLEU and CIDEr-D count.
pub const MAX_N: usize = 4;

/// One evaluated image: its tokenised hypothesis and tokenised reference captions.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalImage {
    pub image_id: String,
    pub hypothesis: Vec<String>,
    pub references: Vec<Vec<String>>,
}

impl EvalImage {
    pub fn new(
        image_id: impl Into<String>,
        hypothesis: Vec<String>,
        references: Vec<Vec<String>>,
    ) -> Self {
        EvalImage {
            image_id: image_id.into(),
            hypothesis,
            references,
        }
    }
}

/// Both corpus metrics are undefined without images, or for an image without references.
fn check_images(images: &[EvalImage], metric: &str) -> Result<()> {
    if images.is_empty() {
        return Err(Error::invalid(metric, "no images to evaluate"));
    }
    if let Some(image) = images.iter().find(|i| i.references.is_empty()) {
        return Err(Error::invalid(
            metric,
            format!("image {} has no reference captions", image.image_id),
        ));
    }
    Ok(())
}

/// Counts of all 1..=`n`-grams of a caption, in the order pycocoevalcap's `precook` creates them
/// (every unigram left to right, then every bigram, ...).
#[derive(Debug, Clone, Default)]
pub struct NGramCounts<'a> {
    entries: Vec<(&'a [String], u32)>,
    index: HashMap<&'a [String], usize>,
}

impl<'a> NGramCounts<'a> {
    pub fn new(words: &'a [String], n: usize) -> Self {
        let mut counts = NGramCounts::default();
        for k in 1..=n {
            for gram in words.windows(k) {
                match counts.index.get(gram) {
                    Some(&at) => counts.entries[at].1 += 1,
                    None => {
                        counts.index.insert(gram, counts.entries.len());
                        counts.entries.push((gram, 1));
                    }
                }
            }
        }
        counts
    }

    /// `(n-gram, count)` in creation order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [String], u32)> + '_ {
        self.entries.iter().copied()
    }

    pub fn get(&self, gram: &[String]) -> u32 {
        self.index.get(gram).map_or(0, |&at| self.entries[at].1)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn ngram_counts_follow_precook_order() {
        let w = words("a b a b");
        let counts = NGramCounts::new(&w, 2);
        let listed: Vec<(String, u32)> = counts.iter().map(|(g, c)| (g.join(" "), c)).collect();
        assert_eq!(
            listed,
            vec![
                ("a".to_string(), 2),
                ("b".to_string(), 2),
                ("a b".to_string(), 2),
                ("b a".to_string(), 1)
            ]
        );
        assert_eq!(counts.get(&words("b a")), 1);
        assert_eq!(counts.get(&words("a a")), 0);
    }
}
