//! Diversity of a set of captions: D-n (distinct n-grams per word), Div-n (D-n of each image's
//! captions, averaged over the images) and self-CIDEr.
//!
//! Self-CIDEr (Wang & Chan, "Describing like humans: on diversity in image captioning", CVPR
//! 2019) looks at the kernel matrix `K[i][j] = CIDEr-D(c_i, [c_j])` of one image's m captions.
//! If all captions say the same thing K has rank one; the more independent directions the
//! captions span, the flatter K's spectrum. With singular values `s` of K,
//! `r = max √s / Σ √s` and the diversity is `-ln(r) / ln(m)`: 0 for identical captions, 1 when
//! all m captions are mutually unrelated. The CIDEr-D document frequencies come from a reference
//! corpus ([`DocumentFrequency`]) as in the paper, because frequencies counted over the m
//! captions themselves would give every shared n-gram zero weight.

use std::collections::HashSet;

use super::cider::{DocumentFrequency, TfIdf};

/// Distinct n-grams over all `captions` divided by their total number of words (D-n); 0 when
/// there are no words.
pub fn distinct_n(captions: &[Vec<String>], n: usize) -> f64 {
    let words: usize = captions.iter().map(Vec::len).sum();
    if words == 0 || n == 0 {
        return 0.0;
    }
    let distinct: HashSet<&[String]> = captions.iter().flat_map(|c| c.windows(n)).collect();
    distinct.len() as f64 / words as f64
}

/// Div-n as diverse-captioning evaluations report it (the CutSwap thesis §4, after COS-CVAE):
/// D-n of each set of captions (one image's), averaged over the sets that hold at least two
/// captions; `None` when no set does. A set of one caption says nothing about diversity between
/// captions, so it is left out, as in [`self_cider`].
pub fn div_n<'a>(sets: impl IntoIterator<Item = &'a [Vec<String>]>, n: usize) -> Option<f64> {
    let (sum, count) = sets
        .into_iter()
        .filter(|set| set.len() >= 2)
        .fold((0.0, 0usize), |(sum, count), set| {
            (sum + distinct_n(set, n), count + 1)
        });
    (count > 0).then(|| sum / count as f64)
}

/// The self-CIDEr kernel `K[i][j] = CIDEr-D(c_i, [c_j])`, row-major.
pub fn self_cider_kernel(captions: &[Vec<String>], df: &DocumentFrequency) -> Vec<Vec<f64>> {
    let vectors: Vec<TfIdf> = captions.iter().map(|c| df.vector(c)).collect();
    vectors
        .iter()
        .map(|hyp| {
            vectors
                .iter()
                .map(|r| hyp.score_against(std::slice::from_ref(r)))
                .collect()
        })
        .collect()
}

/// Self-CIDEr diversity of one image's captions, or `None` when it is undefined: fewer than two
/// captions, or a kernel that is all zero (no caption shares a weighted n-gram even with itself,
/// e.g. empty captions).
pub fn self_cider(captions: &[Vec<String>], df: &DocumentFrequency) -> Option<f64> {
    let m = captions.len();
    if m < 2 {
        return None;
    }
    let singular = singular_values(self_cider_kernel(captions, df));
    let largest = singular.iter().copied().fold(0.0, f64::max);
    if largest <= 0.0 {
        return None;
    }
    // Rounding leaves singular values of order eps·max where the exact ones are zero; their
    // square roots would otherwise read as diversity.
    let cutoff = largest * m as f64 * f64::EPSILON;
    let roots: Vec<f64> = singular
        .iter()
        .map(|&s| if s > cutoff { s.sqrt() } else { 0.0 })
        .collect();
    let ratio = largest.sqrt() / roots.iter().sum::<f64>();
    Some((-ratio.ln() / (m as f64).ln()).max(0.0))
}

/// Singular values of a square matrix by one-sided Jacobi (Hestenes) rotations: columns are
/// rotated pairwise until orthogonal, and their norms are then the singular values. Accurate for
/// small singular values too, and needs no linear-algebra dependency for the m ≤ a few dozen
/// captions of one image.
pub fn singular_values(mut a: Vec<Vec<f64>>) -> Vec<f64> {
    let n = a.len();
    let column_dot =
        |a: &[Vec<f64>], p: usize, q: usize| -> f64 { a.iter().map(|row| row[p] * row[q]).sum() };
    for _sweep in 0..60 {
        let mut rotated = false;
        for p in 0..n {
            for q in p + 1..n {
                let alpha = column_dot(&a, p, p);
                let beta = column_dot(&a, q, q);
                let gamma = column_dot(&a, p, q);
                if gamma == 0.0 || gamma.abs() <= f64::EPSILON * (alpha * beta).sqrt() {
                    continue;
                }
                rotated = true;
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let t = if zeta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (1.0 + t * t).sqrt();
                let s = c * t;
                for row in a.iter_mut() {
                    let (x, y) = (row[p], row[q]);
                    row[p] = c * x - s * y;
                    row[q] = s * x + c * y;
                }
            }
        }
        if !rotated {
            break;
        }
    }
    (0..n).map(|j| column_dot(&a, j, j).sqrt()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn corpus_df() -> DocumentFrequency {
        let sets = [
            vec![words("a dog runs on the grass")],
            vec![words("a cat sleeps on a sofa")],
            vec![words("a red bus on the street")],
            vec![words("two birds in a tree")],
        ];
        DocumentFrequency::from_references(sets.iter().map(Vec::as_slice))
    }

    #[test]
    fn distinct_n_by_hand() {
        // 7 words; unigrams {a, dog, runs, cat} = 4; bigrams, counted within captions only,
        // {a dog, dog runs, a cat} = 3.
        let captions = vec![words("a dog runs"), words("a cat"), words("a dog")];
        assert_eq!(distinct_n(&captions, 1), 4.0 / 7.0);
        assert_eq!(distinct_n(&captions, 2), 3.0 / 7.0);
        assert_eq!(distinct_n(&[], 1), 0.0);
    }

    #[test]
    fn div_n_by_hand() {
        // Image 1: "a dog runs" + "a dog sits": 6 words, bigrams {a dog, dog runs, dog sits} = 3,
        // unigrams {a, dog, runs, sits} = 4. Image 2: "two cats" + "two cats": 4 words, bigrams
        // {two cats} = 1, unigrams {two, cats} = 2. Image 3 has one caption and is left out.
        let image1 = vec![words("a dog runs"), words("a dog sits")];
        let image2 = vec![words("two cats"), words("two cats")];
        let image3 = vec![words("a bird")];
        let sets = [image1.as_slice(), image2.as_slice(), image3.as_slice()];
        let div2 = div_n(sets, 2).unwrap();
        assert!(
            (div2 - (3.0 / 6.0 + 1.0 / 4.0) / 2.0).abs() < 1e-15,
            "{div2}"
        );
        let div1 = div_n(sets, 1).unwrap();
        assert!(
            (div1 - (4.0 / 6.0 + 2.0 / 4.0) / 2.0).abs() < 1e-15,
            "{div1}"
        );
        // Corpus D-2 over the same five captions differs: {a dog, dog runs, dog sits, two cats,
        // a bird} = 5 distinct bigrams over 12 words.
        let all: Vec<Vec<String>> = sets.iter().flat_map(|s| s.iter().cloned()).collect();
        assert_eq!(distinct_n(&all, 2), 5.0 / 12.0);
        assert_eq!(div_n([image3.as_slice()], 2), None);
    }

    #[test]
    fn identical_captions_have_zero_self_cider() {
        let df = corpus_df();
        let same = vec![words("a dog runs on the grass"); 5];
        let d = self_cider(&same, &df).unwrap();
        assert!(d.abs() < 1e-12, "{d}");
    }

    #[test]
    fn unrelated_captions_have_self_cider_one() {
        // No shared n-grams: K is diagonal, and each diagonal entry is (1 + 1 + 0 + 0) / 4 * 10
        // (identical unigram and bigram vectors, no trigrams): all singular values equal 5,
        // r = 1/m and the diversity is exactly 1.
        let df = corpus_df();
        let captions = vec![words("dog runs"), words("cat sleeps"), words("red bus")];
        let k = self_cider_kernel(&captions, &df);
        assert!(k[0][1] == 0.0 && k[1][2] == 0.0);
        let d = self_cider(&captions, &df).unwrap();
        assert!((0..3).all(|i| (k[i][i] - 5.0).abs() < 1e-12));
        assert!((d - 1.0).abs() < 1e-12, "{d}");
    }

    #[test]
    fn two_captions_hand_computed_spectrum() {
        // For a symmetric 2x2 [[x, y], [y, x]] the singular values are x + y and |x - y|.
        let s = singular_values(vec![vec![3.0, 1.0], vec![1.0, 3.0]]);
        let mut s = s;
        s.sort_by(f64::total_cmp);
        assert!((s[0] - 2.0).abs() < 1e-14 && (s[1] - 4.0).abs() < 1e-14);
        // Non-symmetric: [[0, 2], [0, 0]] has singular values 2 and 0.
        let mut s = singular_values(vec![vec![0.0, 2.0], vec![0.0, 0.0]]);
        s.sort_by(f64::total_cmp);
        assert_eq!(s, vec![0.0, 2.0]);
    }

    #[test]
    fn self_cider_undefined_cases() {
        let df = corpus_df();
        assert_eq!(self_cider(&[words("a dog")], &df), None);
        assert_eq!(self_cider(&[vec![], vec![]], &df), None);
    }
}
