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
//!
//! # Fitting from merged statistics
//!
//! The weights and the common directions are fitted from [`SifStats`], gathered one sentence at
//! a time, merged in any order and fitted once ([`SifEncoder::from_stats`]);
//! [`SifEncoder::fit`] is that path over a sentence list. A sentence vector is
//! `v_s = Σ_w c_{s,w} a_w e_w / n_s` over the words `w` that have a vector (`c_{s,w}` occurrences
//! of `w` in `s`, `a_w` its weight, `e_w` its unit vector, `n_s = Σ_w c_{s,w}` the sentence's
//! tokens that have a vector; a sentence without one is the zero vector and adds nothing), so
//! the matrix whose eigenvectors are the common directions is
//!
//! ```text
//! Σ_s v_s v_sᵀ = Σ_{w,w'} M_{w,w'} a_w a_w' e_w e_w'ᵀ,   M_{w,w'} = Σ_s c_{s,w} c_{s,w'} / n_s²
//! ```
//!
//! and `M` is known before the weights and vectors are: it is what [`SifStats`] keeps, with the
//! word counts that give the weights.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::models::Embedder;
use crate::text::interner::{map_bytes, Interner};
use crate::text::ppmi::{pair_key, pair_of_key, symmetric_eigen};
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
    /// Fits word weights and common components on `corpus` (tokenized sentences; punctuation
    /// tokens are skipped): the [`SifStats`] of the corpus, fitted with
    /// [`from_stats`](Self::from_stats). The order of the sentences does not matter.
    ///
    /// `a` is SIF's smoothing weight (1e-3 in the paper); `remove` is how many principal
    /// components to remove (1 in the paper, 0 for plain weighted averages).
    pub fn fit(vectors: WordVectors, corpus: &[Vec<String>], a: f64, remove: usize) -> Self {
        let mut stats = SifStats::new();
        for sentence in corpus {
            stats.add_sentence(sentence, |word| vectors.get(word).is_some());
        }
        Self::from_stats(vectors, &stats, a, remove)
            .expect("statistics gathered with these vectors fit them")
    }

    /// Fits word weights `a / (a + p(w))` (`p(w)` the word's share of the counted tokens) and
    /// the top `remove` principal directions of the counted sentences' vectors.
    ///
    /// The result depends on the statistics' counts only, not on how the sentences were split
    /// or ordered: the weights come from integer counts, and the directions are the
    /// eigenvectors of `Σ_s v_s v_sᵀ` computed from the merged `M` (see the module
    /// documentation) in one fixed order, words sorted by their text.
    ///
    /// Fails when the statistics counted a word as having a vector that `vectors` does not
    /// have, or the reverse (they were gathered with other vectors), or when merged statistics
    /// disagreed about a word.
    pub fn from_stats(
        vectors: WordVectors,
        stats: &SifStats,
        a: f64,
        remove: usize,
    ) -> Result<Self> {
        stats.check_vectors(&vectors)?;
        let total: u64 = stats.token_counts.iter().sum();
        let by_id: Vec<f64> = stats
            .token_counts
            .iter()
            .map(|&count| {
                let p = count as f64 / total as f64;
                a / (a + p)
            })
            .collect();
        let weights = stats
            .words
            .words()
            .zip(&by_id)
            .map(|(word, &weight)| (word.to_string(), weight))
            .collect();
        let components = if remove == 0 || vectors.dim() == 0 {
            Vec::new()
        } else {
            top_directions(stats.second_moment(&vectors, &by_id), remove)
        };
        Ok(SifEncoder {
            vectors,
            weights,
            components,
        })
    }

    /// The word vectors the encoder averages.
    pub fn vectors(&self) -> &WordVectors {
        &self.vectors
    }

    /// The SIF weight of a (lower-case) word.
    pub fn weight(&self, word: &str) -> f64 {
        self.weights.get(word).copied().unwrap_or(1.0)
    }

    /// Every word of the fitting corpus with its SIF weight.
    pub fn weights(&self) -> &HashMap<String, f64> {
        &self.weights
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

/// The top `count` eigenvectors of `XᵀX` for sentence rows `X`, computed directly from the
/// rows (the check of [`SifStats`]'s computation of the same matrix).
#[cfg(test)]
fn principal_directions(rows: &[Vec<f64>], dim: usize, count: usize) -> Vec<Vec<f64>> {
    if count == 0 || dim == 0 || rows.is_empty() {
        return Vec::new();
    }
    top_directions(gram_of_rows(rows, dim), count)
}

/// `XᵀX` for rows `X`, summed in row order.
#[cfg(test)]
fn gram_of_rows(rows: &[Vec<f64>], dim: usize) -> Vec<Vec<f64>> {
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
    gram
}

/// The top `count` eigenvectors of the symmetric matrix `gram` (for `XᵀX` with sentence rows
/// `X`: the right singular vectors of `X`, uncentred, as SIF's TruncatedSVD takes them),
/// largest first, each with a non-negative largest entry so the result does not depend on the
/// eigensolver's sign choice. Directions of eigenvalue 0 are left out.
fn top_directions(gram: Vec<Vec<f64>>, count: usize) -> Vec<Vec<f64>> {
    let dim = gram.len();
    if count == 0 || dim == 0 {
        return Vec::new();
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

/// Fractional bits of the fixed-point sums `M_{w,w'}` in [`SifStats`].
const FRACTION_BITS: u32 = 80;

/// `num / den` (at most 1) in fixed point with [`FRACTION_BITS`] fractional bits, rounded to
/// nearest (halves up), by integer arithmetic only.
fn fixed_ratio(num: u64, den: u64) -> u128 {
    debug_assert!(num <= den && den > 0);
    let (num, den) = (u128::from(num), u128::from(den));
    // Long division in two steps of 40 bits: the remainders stay below `den` < 2^64.
    let whole = num / den;
    let rest = num % den;
    let high = (rest << 40) / den;
    let rest = (rest << 40) % den;
    let low = ((rest << 40) + den / 2) / den;
    (whole << FRACTION_BITS) + (high << 40) + low
}

fn fixed_of(halves: [u64; 2]) -> u128 {
    (u128::from(halves[0]) << 64) | u128::from(halves[1])
}

fn halves_of(value: u128) -> [u64; 2] {
    [(value >> 64) as u64, value as u64]
}

/// Adds `value` to a fixed-point sum kept as (high, low) halves. A sum of 2^48 sentences'
/// shares (each at most 1) would saturate; no corpus comes near.
fn add_fixed(sum: &mut [u64; 2], value: u128) {
    *sum = halves_of(fixed_of(*sum).saturating_add(value));
}

/// Mergeable statistics of a sentence corpus, from which [`SifEncoder::from_stats`] fits SIF's
/// word weights and common directions once the word vectors are known.
///
/// # What is counted
///
/// - Every word's occurrences (punctuation tokens are skipped, as sentence vectors skip them):
///   the weights `a / (a + p(w))`.
/// - Whether each word has a vector, as the caller's `has_vector` said when the word was first
///   seen: `n_s`, the denominator of a sentence vector, counts the words that have one. The
///   vectors given to the fit must agree, word for word.
/// - For every two words `w`, `w'` with vectors that share a sentence (a word with itself
///   included), `M_{w,w'} = Σ_s c_{s,w} c_{s,w'} / n_s²`. Each sentence's share is rounded
///   once to a multiple of 2^-80 by integer arithmetic and the shares are summed as integers,
///   so `M` is the same whatever the split and order of the sentences, and within 2^-81 per
///   sentence of the exact value (far below `f64` precision of a share, which is at least
///   `1/n_s²`).
///
/// # Memory
///
/// Grows with the distinct words (their text twice, 9 bytes of counts each) and the distinct
/// unordered pairs of words with vectors that share a sentence (about 28 bytes each with the
/// hash table's overhead), bounded by the vocabulary: at most `V (V + 1) / 2` pairs for `V`
/// words with vectors, however many sentences are added. A sentence of `k` distinct words adds
/// up to `k (k + 1) / 2` pairs, so long sentences reach the bound sooner.
/// [`approx_bytes`](Self::approx_bytes) estimates it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(try_from = "SifStatsWire")]
pub struct SifStats {
    words: Interner,
    /// Occurrences by local id.
    token_counts: Vec<u64>,
    /// Whether the word was counted as having a vector, by local id.
    has_vector: Vec<bool>,
    /// `M` by unordered pair of local ids ([`pair_key`]), in fixed point with
    /// [`FRACTION_BITS`] fractional bits, as (high, low) halves.
    moments: HashMap<u64, [u64; 2]>,
    /// The first (by text) word that merged statistics counted both with and without a vector.
    conflict: Option<String>,
}

impl SifStats {
    /// Empty statistics.
    pub fn new() -> SifStats {
        SifStats::default()
    }

    /// The number of tokens counted.
    pub fn tokens(&self) -> u64 {
        self.token_counts.iter().sum()
    }

    /// The number of distinct pairs of words with vectors that shared a sentence.
    pub fn distinct_pairs(&self) -> usize {
        self.moments.len()
    }

    /// Counts one tokenized sentence. `has_vector` tells whether a word has a vector in the
    /// table the statistics will be fitted with; it is asked once per new word.
    ///
    /// # Panics
    ///
    /// When the sentence has 2^32 words with vectors or more.
    pub fn add_sentence<S: AsRef<str>>(&mut self, tokens: &[S], has_vector: impl Fn(&str) -> bool) {
        let mut known: Vec<u32> = Vec::with_capacity(tokens.len());
        for token in tokens.iter().map(AsRef::as_ref) {
            if is_punctuation(token) {
                continue;
            }
            let id = self.words.intern(token);
            if id as usize == self.token_counts.len() {
                self.token_counts.push(0);
                self.has_vector.push(has_vector(token));
            }
            self.token_counts[id as usize] += 1;
            if self.has_vector[id as usize] {
                known.push(id);
            }
        }
        if known.is_empty() {
            return;
        }
        let n = u64::try_from(known.len())
            .ok()
            .filter(|&n| n <= u64::from(u32::MAX))
            .expect("a sentence of fewer than 2^32 words");
        let squared = n * n;
        known.sort_unstable();
        let mut counts: Vec<(u32, u64)> = Vec::new();
        for id in known {
            match counts.last_mut() {
                Some((last, count)) if *last == id => *count += 1,
                _ => counts.push((id, 1)),
            }
        }
        for (i, &(a, count_a)) in counts.iter().enumerate() {
            for &(b, count_b) in &counts[i..] {
                let share = fixed_ratio(count_a * count_b, squared);
                add_fixed(self.moments.entry(pair_key(a, b)).or_default(), share);
            }
        }
    }

    /// Adds `other`'s counts to these. A word that one counted with a vector and the other
    /// without makes [`SifEncoder::from_stats`] fail.
    pub fn merge(&mut self, mut other: SifStats) {
        if other.moments.len() > self.moments.len() {
            std::mem::swap(self, &mut other);
        }
        if let Some(word) = other.conflict.take() {
            self.note_conflict(word);
        }
        let before = self.words.len();
        let remap = self.words.absorb(&other.words);
        self.token_counts.resize(self.words.len(), 0);
        self.has_vector.resize(self.words.len(), false);
        for (i, &id) in remap.iter().enumerate() {
            let id = id as usize;
            self.token_counts[id] += other.token_counts[i];
            if id >= before {
                self.has_vector[id] = other.has_vector[i];
            } else if self.has_vector[id] != other.has_vector[i] {
                let word = self.words.word(id as u32).to_string();
                self.note_conflict(word);
            }
        }
        for (key, sum) in other.moments {
            let (a, b) = pair_of_key(key);
            let key = pair_key(remap[a as usize], remap[b as usize]);
            add_fixed(self.moments.entry(key).or_default(), fixed_of(sum));
        }
    }

    fn note_conflict(&mut self, word: String) {
        if self.conflict.as_ref().is_none_or(|first| word < *first) {
            self.conflict = Some(word);
        }
    }

    /// Heap bytes held, roughly.
    pub fn approx_bytes(&self) -> usize {
        self.words.approx_bytes()
            + self.token_counts.capacity() * 8
            + self.has_vector.capacity()
            + map_bytes(self.moments.capacity(), 24)
    }

    /// Whether `vectors` has a vector for exactly the words counted as having one.
    fn check_vectors(&self, vectors: &WordVectors) -> Result<()> {
        let invalid = |reason: String| Err(Error::invalid("SIF statistics", reason));
        if let Some(word) = &self.conflict {
            return invalid(format!(
                "`{word}` was counted with a word vector in some statistics and without one in \
                 others: they were gathered with different vectors"
            ));
        }
        let mismatch = self
            .words
            .words()
            .zip(&self.has_vector)
            .filter(|&(word, &has)| vectors.get(word).is_some() != has)
            .min_by_key(|&(word, _)| word);
        match mismatch {
            Some((word, &has)) => invalid(format!(
                "`{word}` was counted {} a word vector, but the vectors given {} one: the \
                 statistics were gathered with other vectors",
                if has { "with" } else { "without" },
                if has { "have no" } else { "have" },
            )),
            None => Ok(()),
        }
    }

    /// `Σ_s v_s v_sᵀ` (`dim × dim`) from `M`, the weights (by local id) and the vectors:
    /// `Σ_w a_w e_w f_wᵀ` with `f_w = Σ_w' M_{w,w'} a_w' e_w'`, words taken in the order of
    /// their text, so the floating-point sums do not depend on the statistics' local ids.
    /// Computed as the upper triangle and mirrored, so the result is exactly symmetric.
    fn second_moment(&self, vectors: &WordVectors, weights: &[f64]) -> Vec<Vec<f64>> {
        let dim = vectors.dim();
        let mut gram = vec![vec![0.0f64; dim]; dim];
        // Words with vectors, by text; `rank[id]` is a word's place among them.
        let mut order: Vec<u32> = (0..self.words.len() as u32)
            .filter(|&id| self.has_vector[id as usize])
            .collect();
        order.sort_unstable_by(|&a, &b| self.words.word(a).cmp(self.words.word(b)));
        let mut rank = vec![u32::MAX; self.words.len()];
        for (r, &id) in order.iter().enumerate() {
            rank[id as usize] = r as u32;
        }
        let rows: Vec<&[f32]> = order
            .iter()
            .map(|&id| {
                vectors
                    .get(self.words.word(id))
                    .expect("checked: every counted word with a vector has one")
            })
            .collect();
        // M as compressed rows over ranks, both halves of every pair, each row by column.
        let mut starts = vec![0usize; order.len() + 1];
        for &key in self.moments.keys() {
            let (a, b) = pair_of_key(key);
            starts[rank[a as usize] as usize + 1] += 1;
            if a != b {
                starts[rank[b as usize] as usize + 1] += 1;
            }
        }
        for r in 0..order.len() {
            starts[r + 1] += starts[r];
        }
        let scale = 1.0 / (1u128 << FRACTION_BITS) as f64;
        let mut entries = vec![(0u32, 0.0f64); starts[order.len()]];
        let mut next = starts.clone();
        for (&key, &sum) in &self.moments {
            let (a, b) = pair_of_key(key);
            let (a, b) = (rank[a as usize], rank[b as usize]);
            let value = fixed_of(sum) as f64 * scale;
            entries[next[a as usize]] = (b, value);
            next[a as usize] += 1;
            if a != b {
                entries[next[b as usize]] = (a, value);
                next[b as usize] += 1;
            }
        }
        let mut f = vec![0.0f64; dim];
        for (r, &id) in order.iter().enumerate() {
            let row = &mut entries[starts[r]..starts[r + 1]];
            row.sort_unstable_by_key(|&(column, _)| column);
            f.iter_mut().for_each(|x| *x = 0.0);
            for &(column, m) in row.iter() {
                let s = m * weights[order[column as usize] as usize];
                for (x, &e) in f.iter_mut().zip(rows[column as usize]) {
                    *x += s * f64::from(e);
                }
            }
            let a = weights[id as usize];
            for (i, &e) in rows[r].iter().enumerate() {
                let x = a * f64::from(e);
                if x == 0.0 {
                    continue;
                }
                for (g, &y) in gram[i][i..].iter_mut().zip(&f[i..]) {
                    *g += x * y;
                }
            }
        }
        for i in 1..dim {
            let (above, below) = gram.split_at_mut(i);
            for (j, row) in above.iter().enumerate() {
                below[0][j] = row[i];
            }
        }
        gram
    }
}

/// [`SifStats`] as serialized: the word table, counts and vector flags by local id, and the
/// pairs' ids (two per pair, sorted) beside their sums' (high, low) halves.
#[derive(Serialize, Deserialize)]
struct SifStatsWire {
    words: Vec<String>,
    token_counts: Vec<u64>,
    has_vector: Vec<bool>,
    pairs: Vec<u32>,
    moments: Vec<[u64; 2]>,
    conflict: Option<String>,
}

impl Serialize for SifStats {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut moments: Vec<(u64, [u64; 2])> =
            self.moments.iter().map(|(&k, &m)| (k, m)).collect();
        moments.sort_unstable();
        SifStatsWire {
            words: self.words.to_words(),
            token_counts: self.token_counts.clone(),
            has_vector: self.has_vector.clone(),
            pairs: moments
                .iter()
                .flat_map(|&(key, _)| {
                    let (a, b) = pair_of_key(key);
                    [a, b]
                })
                .collect(),
            moments: moments.iter().map(|&(_, m)| m).collect(),
            conflict: self.conflict.clone(),
        }
        .serialize(serializer)
    }
}

impl TryFrom<SifStatsWire> for SifStats {
    type Error = String;

    fn try_from(wire: SifStatsWire) -> Result<SifStats, String> {
        let bad = |reason: &str| Err(format!("SIF statistics: {reason}"));
        let words = Interner::from_words(wire.words).map_err(|e| format!("SIF statistics: {e}"))?;
        if wire.token_counts.len() != words.len() || wire.has_vector.len() != words.len() {
            return bad("the number of counts or vector flags is not the number of words");
        }
        if wire.token_counts.contains(&0) {
            return bad("a word is listed with count 0");
        }
        if wire.pairs.len() != 2 * wire.moments.len() {
            return bad("the pairs and their sums disagree");
        }
        let mut moments = HashMap::with_capacity(wire.moments.len());
        for (pair, sum) in wire.pairs.chunks_exact(2).zip(wire.moments) {
            if !pair
                .iter()
                .all(|&id| wire.has_vector.get(id as usize) == Some(&true))
            {
                return bad("a pair names a word out of range or without a vector");
            }
            if fixed_of(sum) == 0 || moments.insert(pair_key(pair[0], pair[1]), sum).is_some() {
                return bad("a pair is listed twice or with sum 0");
            }
        }
        Ok(SifStats {
            words,
            token_counts: wire.token_counts,
            has_vector: wire.has_vector,
            moments,
            conflict: wire.conflict,
        })
    }
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

    /// A small corpus with repeated words, words without vectors, punctuation, a sentence
    /// with no known word and an empty one, over 4-dimensional vectors.
    fn hand_corpus() -> (WordVectors, Vec<Vec<String>>) {
        let vectors = WordVectors::from_pairs(
            [
                ("the", [1.0f32, 0.2, 0.0, 0.1]),
                ("dog", [0.3, 1.0, 0.1, 0.0]),
                ("cat", [0.2, 0.9, -0.4, 0.3]),
                ("runs", [0.0, -0.2, 1.0, 0.5]),
                ("on", [0.7, 0.0, 0.3, -0.6]),
                ("grass", [-0.1, 0.4, 0.2, 1.0]),
                ("red", [0.5, -0.5, 0.5, 0.5]),
            ]
            .iter()
            .map(|(w, v)| (*w, v.to_vec())),
        )
        .expect("valid table");
        let corpus = [
            "the dog runs on the grass",
            "the cat , the cat and the dog !",
            "a red red red dog",
            "zebra xylophone",
            "",
            "the the the",
            "grass on grass runs",
            "the red cat sleeps on the red grass",
        ]
        .iter()
        .map(|t| {
            t.split(' ')
                .filter(|w| !w.is_empty())
                .map(String::from)
                .collect()
        })
        .collect();
        (vectors, corpus)
    }

    #[test]
    fn fixed_ratio_rounds_exactly() {
        let one = 1u128 << FRACTION_BITS;
        assert_eq!(fixed_ratio(1, 1), one);
        assert_eq!(fixed_ratio(7, 7), one);
        assert_eq!(fixed_ratio(1, 4), one / 4);
        assert_eq!(fixed_ratio(0, 9), 0);
        // 2^80 = 1 (mod 3): 2^80 / 3 rounds down, 2^81 / 3 up; 2^80 = 4 (mod 9): 2^80 / 9 rounds
        // down, 2^81 / 9 up.
        assert_eq!(fixed_ratio(1, 3), one / 3);
        assert_eq!(fixed_ratio(2, 3), 2 * one / 3 + 1);
        assert_eq!(fixed_ratio(1, 9), one / 9);
        assert_eq!(fixed_ratio(2, 9), 2 * one / 9 + 1);
        for den in 1..200u64 {
            for num in 0..=den {
                let rounded =
                    ((u128::from(num) << FRACTION_BITS) + u128::from(den / 2)) / u128::from(den);
                assert_eq!(fixed_ratio(num, den), rounded, "{num}/{den}");
            }
        }
        // A large denominator (a sentence of 2^32 - 1 words).
        let n = u64::from(u32::MAX);
        let exact = (one * 3 * 2 + n as u128 * n as u128) / (2 * n as u128 * n as u128);
        assert_eq!(fixed_ratio(3, n * n), exact);
        let mut sum = [0u64; 2];
        add_fixed(&mut sum, one);
        add_fixed(&mut sum, u128::MAX);
        assert_eq!(fixed_of(sum), u128::MAX);
    }

    #[test]
    fn stats_give_the_gram_matrix_and_directions_of_the_sentence_vectors() {
        let (vectors, corpus) = hand_corpus();
        for (a, remove) in [(0.1, 2usize), (1e-3, 1), (1.0, 3)] {
            let sif = SifEncoder::fit(vectors.clone(), &corpus, a, remove);
            // Directly: every sentence vector, summed sentence after sentence.
            let rows: Vec<Vec<f64>> = corpus.iter().map(|s| sif.average(s)).collect();
            assert!(rows.iter().any(|r| r.iter().all(|&x| x == 0.0)));
            let direct = gram_of_rows(&rows, 4);
            let mut stats = SifStats::new();
            for sentence in &corpus {
                stats.add_sentence(sentence, |w| vectors.get(w).is_some());
            }
            let by_id: Vec<f64> = stats.words.words().map(|w| sif.weight(w)).collect();
            let from_stats = stats.second_moment(&vectors, &by_id);
            let scale = direct.iter().flatten().fold(0.0f64, |m, x| m.max(x.abs()));
            assert!(scale > 0.0);
            for (x, y) in direct.iter().flatten().zip(from_stats.iter().flatten()) {
                assert!(
                    (x - y).abs() <= 1e-13 * scale,
                    "{direct:?} vs {from_stats:?}"
                );
            }
            // The directions, each sign made canonical by both.
            let expected = principal_directions(&rows, 4, remove);
            assert_eq!(sif.components().len(), remove);
            assert_eq!(expected.len(), remove);
            for (u, v) in sif.components().iter().zip(&expected) {
                for (x, y) in u.iter().zip(v) {
                    assert!((x - y).abs() < 1e-9, "a={a}: {u:?} vs {v:?}");
                }
            }
        }
    }

    /// Bits of everything an encoder fitted: weights by word, components.
    fn fitted_bits(sif: &SifEncoder) -> (Vec<(String, u64)>, Vec<Vec<u64>>) {
        let mut weights: Vec<(String, u64)> = sif
            .weights()
            .iter()
            .map(|(w, x)| (w.clone(), x.to_bits()))
            .collect();
        weights.sort();
        let components = sif
            .components()
            .iter()
            .map(|u| u.iter().map(|x| x.to_bits()).collect())
            .collect();
        (weights, components)
    }

    #[test]
    fn split_stats_merged_in_any_order_fit_the_same_encoder() {
        let (vectors, corpus) = hand_corpus();
        let has = |w: &str| vectors.get(w).is_some();
        let whole = SifEncoder::fit(vectors.clone(), &corpus, 0.1, 2);
        let mut reversed = corpus.clone();
        reversed.reverse();
        assert_eq!(
            fitted_bits(&whole),
            fitted_bits(&SifEncoder::fit(vectors.clone(), &reversed, 0.1, 2))
        );
        for parts in [2usize, 3, 5] {
            let mut stats: Vec<SifStats> = (0..parts).map(|_| SifStats::new()).collect();
            for (i, sentence) in corpus.iter().enumerate().rev() {
                stats[i * 7 % parts].add_sentence(sentence, has);
            }
            // Through serde on the way, merged last part first.
            let mut total = SifStats::new();
            for part in stats.into_iter().rev() {
                let bytes = bincode::serialize(&part).expect("serialize");
                let back: SifStats = bincode::deserialize(&bytes).expect("deserialize");
                assert_eq!(bincode::serialize(&back).expect("serialize"), bytes);
                total.merge(back);
            }
            assert_eq!(
                total.tokens(),
                corpus
                    .iter()
                    .flatten()
                    .filter(|t| !is_punctuation(t))
                    .count() as u64
            );
            let merged = SifEncoder::from_stats(vectors.clone(), &total, 0.1, 2).expect("fit");
            assert_eq!(fitted_bits(&whole), fitted_bits(&merged), "{parts} parts");
            assert!(total.approx_bytes() > 0 && total.distinct_pairs() > 0);
        }
    }

    #[test]
    fn stats_of_other_vectors_are_refused() {
        let (vectors, corpus) = hand_corpus();
        let mut with = SifStats::new();
        with.add_sentence(&corpus[0], |w| vectors.get(w).is_some());
        // Gathered as if "dog" had no vector.
        let mut without = SifStats::new();
        without.add_sentence(&corpus[0], |w| w != "dog" && vectors.get(w).is_some());
        let error = SifEncoder::from_stats(vectors.clone(), &without, 0.1, 1).unwrap_err();
        assert!(error.to_string().contains("`dog`"), "{error}");
        with.merge(without);
        let error = SifEncoder::from_stats(vectors.clone(), &with, 0.1, 1).unwrap_err();
        assert!(error.to_string().contains("`dog`"), "{error}");
        // A corrupted serialization is refused.
        let mut wire: serde_json::Value = serde_json::to_value(&with).expect("json");
        wire["token_counts"][0] = 0.into();
        assert!(serde_json::from_value::<SifStats>(wire).is_err());
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
