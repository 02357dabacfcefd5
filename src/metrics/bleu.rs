//! BLEU-1..4 exactly as pycocoevalcap 1.2's `Bleu(4)` computes it.
//!
//! This is not the textbook BLEU: pycocoevalcap (after David Chiang's `bleu_scorer.py`) adds
//! `TINY` to matched counts and `SMALL` to guessed counts so that a zero precision gives a tiny
//! score instead of a division by zero, takes the reference length "closest" to the hypothesis
//! (ties to the shorter reference) for the brevity penalty, and computes BLEU-n as the running
//! product of the 1..n precisions raised to 1/n. Published COCO numbers use these rules, so we do.

use super::{check_images, EvalImage, NGramCounts, MAX_N};
use crate::error::Result;

/// Added to matched n-gram counts (`tiny` in `bleu_scorer.py`).
const TINY: f64 = 1e-15;
/// Added to guessed n-gram counts (`small` in `bleu_scorer.py`).
const SMALL: f64 = 1e-9;

/// BLEU-1..4 of a corpus and of each image (in input order).
#[derive(Debug, Clone, PartialEq)]
pub struct BleuScores {
    pub corpus: [f64; MAX_N],
    pub per_image: Vec<[f64; MAX_N]>,
}

/// What one image contributes to corpus BLEU (`cook_test` plus the chosen reference length).
#[derive(Debug, Clone, Copy)]
struct ImageStats {
    hypothesis_len: usize,
    reference_len: usize,
    guessed: [usize; MAX_N],
    matched: [usize; MAX_N],
}

fn image_stats(image: &EvalImage) -> ImageStats {
    let hypothesis_len = image.hypothesis.len();
    let references: Vec<NGramCounts> = image
        .references
        .iter()
        .map(|r| NGramCounts::new(r, MAX_N))
        .collect();
    // "closest": minimise (|len - hyp_len|, len), so ties go to the shorter reference.
    let reference_len = image
        .references
        .iter()
        .map(|r| (r.len().abs_diff(hypothesis_len), r.len()))
        .min()
        .map_or(0, |(_, len)| len);
    let mut guessed = [0; MAX_N];
    for (k, g) in guessed.iter_mut().enumerate() {
        *g = (hypothesis_len + 1).saturating_sub(k + 1);
    }
    let mut matched = [0; MAX_N];
    for (gram, count) in NGramCounts::new(&image.hypothesis, MAX_N).iter() {
        let max_ref = references.iter().map(|r| r.get(gram)).max().unwrap_or(0);
        matched[gram.len() - 1] += count.min(max_ref) as usize;
    }
    ImageStats {
        hypothesis_len,
        reference_len,
        guessed,
        matched,
    }
}

/// BLEU-1..4 from matched/guessed counts and lengths, with pycocoevalcap's smoothing.
fn bleu_from_counts(
    matched: &[f64; MAX_N],
    guessed: &[f64; MAX_N],
    hypothesis_len: f64,
    reference_len: f64,
) -> [f64; MAX_N] {
    let mut scores = [0.0; MAX_N];
    let mut product = 1.0;
    for k in 0..MAX_N {
        product *= (matched[k] + TINY) / (guessed[k] + SMALL);
        scores[k] = product.powf(1.0 / (k + 1) as f64);
    }
    let ratio = (hypothesis_len + TINY) / (reference_len + SMALL);
    if ratio < 1.0 {
        let brevity = (1.0 - 1.0 / ratio).exp();
        for s in &mut scores {
            *s *= brevity;
        }
    }
    scores
}

/// Corpus BLEU-1..4 (sums of counts and lengths over all images) and per-image BLEU.
pub fn corpus_bleu(images: &[EvalImage]) -> Result<BleuScores> {
    check_images(images, "BLEU input")?;
    let mut matched = [0.0; MAX_N];
    let mut guessed = [0.0; MAX_N];
    let mut hypothesis_len = 0usize;
    let mut reference_len = 0usize;
    let mut per_image = Vec::with_capacity(images.len());
    for image in images {
        let stats = image_stats(image);
        let m = stats.matched.map(|c| c as f64);
        let g = stats.guessed.map(|c| c as f64);
        per_image.push(bleu_from_counts(
            &m,
            &g,
            stats.hypothesis_len as f64,
            stats.reference_len as f64,
        ));
        for k in 0..MAX_N {
            matched[k] += m[k];
            guessed[k] += g[k];
        }
        hypothesis_len += stats.hypothesis_len;
        reference_len += stats.reference_len;
    }
    let corpus = bleu_from_counts(
        &matched,
        &guessed,
        hypothesis_len as f64,
        reference_len as f64,
    );
    Ok(BleuScores { corpus, per_image })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn hand_computed_single_image() {
        // hyp "the cat sat" vs ref "the cat sat down": p1 = 3/3, p2 = 2/2, p3 = 1/1, p4 = 0/0.
        // Brevity penalty exp(1 - 4/3) with the smoothing constants.
        let images = vec![EvalImage::new(
            "1",
            words("the cat sat"),
            vec![words("the cat sat down")],
        )];
        let scores = corpus_bleu(&images).unwrap();
        let ratio = (3.0 + TINY) / (4.0 + SMALL);
        let bp = (1.0 - 1.0 / ratio).exp();
        let p = |m: f64, g: f64| (m + TINY) / (g + SMALL);
        let b1 = p(3.0, 3.0) * bp;
        let b4 = (p(3.0, 3.0) * p(2.0, 2.0) * p(1.0, 1.0) * p(0.0, 0.0)).powf(0.25) * bp;
        assert!((scores.corpus[0] - b1).abs() < 1e-15);
        assert!((scores.corpus[3] - b4).abs() < 1e-15);
        assert_eq!(scores.per_image[0], scores.corpus);
    }

    #[test]
    fn closest_reference_length_prefers_shorter_on_ties() {
        let image = EvalImage::new("1", words("a b c"), vec![words("a b c d"), words("a b")]);
        assert_eq!(image_stats(&image).reference_len, 2);
    }

    #[test]
    fn clipping_by_maximum_reference_count() {
        // "the the the" against refs with at most two "the": 2 matched unigrams.
        let image = EvalImage::new(
            "1",
            words("the the the"),
            vec![words("the cat the"), words("the")],
        );
        assert_eq!(image_stats(&image).matched[0], 2);
    }

    #[test]
    fn rejects_images_without_references() {
        assert!(corpus_bleu(&[]).is_err());
        assert!(corpus_bleu(&[EvalImage::new("1", words("a"), vec![])]).is_err());
    }
}
