//! Interpolated modified Kneser-Ney n-gram language model (Chen & Goodman, 1998).
//!
//! The model is small and exact: every n-gram of the training captions is kept in hash maps,
//! which suits caption corpora (short sentences, a few million tokens at most). Sentences are
//! padded with one `<s>` on the left and one `</s>` on the right, so the first word is predicted
//! from a bigram context `<s>` and the model scores how a caption ends as well as its words.
//!
//! Counts follow KenLM's convention: the highest order uses raw counts; a lower-order n-gram
//! uses its continuation count (the number of distinct words seen to its left) unless it starts
//! with `<s>`, which nothing can precede, in which case its raw count is kept. Each order has its
//! own three discounts D1, D2, D3+ estimated from that order's count-of-counts.
//!
//! Words seen at most `unk_max_count` times in training are replaced by `<unk>`, so the model
//! has learned how often rare words occur; at query time every word outside the vocabulary
//! reads as `<unk>`.

use std::collections::{HashMap, HashSet};

/// Sentence-start padding token (never predicted).
pub const BOS: &str = "<s>";
/// Sentence-end token (predicted after the last word).
pub const EOS: &str = "</s>";
/// The class of rare and unseen words.
pub const UNK: &str = "<unk>";

const BOS_ID: u32 = 0;
const EOS_ID: u32 = 1;
const UNK_ID: u32 = 2;

/// Training settings of an [`NgramLm`].
#[derive(Debug, Clone, PartialEq)]
pub struct LmConfig {
    /// The n of the n-grams (at least 1).
    pub order: usize,
    /// Words seen this many times or fewer become `<unk>` (0 keeps every word).
    pub unk_max_count: u64,
    /// Fixed discounts `[D1, D2, D3+]` for every order instead of the count-of-counts estimate.
    pub fixed_discounts: Option<[f64; 3]>,
}

impl Default for LmConfig {
    fn default() -> Self {
        LmConfig {
            order: 3,
            unk_max_count: 1,
            fixed_discounts: None,
        }
    }
}

/// The modified Kneser-Ney discounts `[D1, D2, D3+]` from the count-of-counts `[n1, n2, n3, n4]`
/// (the number of n-grams seen exactly 1, 2, 3, 4 times), as Chen & Goodman:
/// `Y = n1 / (n1 + 2 n2)`, `D1 = 1 - 2Y n2/n1`, `D2 = 2 - 3Y n3/n2`, `D3+ = 3 - 4Y n4/n3`.
///
/// Small corpora can leave a count-of-count at zero; an estimate that is then undefined falls
/// back to `[0.5, 1.0, 1.5]`, and every discount is kept inside `(0, k]` so that an n-gram seen
/// k times never gets negative mass and every context keeps some mass for lower orders.
pub fn modified_kn_discounts(count_of_counts: [u64; 4]) -> [f64; 3] {
    const FALLBACK: [f64; 3] = [0.5, 1.0, 1.5];
    let [n1, n2, n3, n4] = count_of_counts.map(|n| n as f64);
    let y = n1 / (n1 + 2.0 * n2);
    let estimates = [
        1.0 - 2.0 * y * n2 / n1,
        2.0 - 3.0 * y * n3 / n2,
        3.0 - 4.0 * y * n4 / n3,
    ];
    let mut discounts = [0.0; 3];
    for (k, (d, estimate)) in discounts.iter_mut().zip(estimates).enumerate() {
        let value = if estimate.is_finite() {
            estimate
        } else {
            FALLBACK[k]
        };
        *d = value.clamp(0.01, (k + 1) as f64);
    }
    discounts
}

/// What the model keeps about one context at one order.
#[derive(Debug, Clone, Default)]
struct ContextStats {
    /// Sum of the (adjusted) counts of the words seen after the context.
    total: u64,
    /// How many distinct followers have adjusted count 1, 2 and 3 or more.
    n1: u64,
    n2: u64,
    n3_plus: u64,
}

/// One order k: adjusted counts of k-grams, and statistics of their (k-1)-word contexts.
#[derive(Debug, Clone, Default)]
struct OrderTable {
    counts: HashMap<Vec<u32>, u64>,
    contexts: HashMap<Vec<u32>, ContextStats>,
    discounts: [f64; 3],
}

impl OrderTable {
    fn discount(&self, count: u64) -> f64 {
        match count {
            0 => 0.0,
            1 => self.discounts[0],
            2 => self.discounts[1],
            _ => self.discounts[2],
        }
    }
}

/// An interpolated modified Kneser-Ney n-gram language model over caption tokens.
#[derive(Debug, Clone)]
pub struct NgramLm {
    order: usize,
    ids: HashMap<String, u32>,
    words: Vec<String>,
    /// `tables[k - 1]` holds order k.
    tables: Vec<OrderTable>,
    /// Raw training count of each id (`<unk>` gathers the rare words, `</s>` one per sentence).
    unigram_counts: Vec<u64>,
}

impl NgramLm {
    /// Trains a model of the given order (at least 1) with the default settings.
    pub fn train<'a>(sentences: impl Iterator<Item = &'a [String]>, order: usize) -> NgramLm {
        let config = LmConfig {
            order,
            ..LmConfig::default()
        };
        NgramLm::train_with(sentences, &config)
    }

    /// Trains a model with explicit settings.
    pub fn train_with<'a>(
        sentences: impl Iterator<Item = &'a [String]>,
        config: &LmConfig,
    ) -> NgramLm {
        let order = config.order.max(1);
        let sentences: Vec<&[String]> = sentences.collect();
        let mut word_counts: HashMap<&str, u64> = HashMap::new();
        for sentence in &sentences {
            for token in sentence.iter() {
                *word_counts.entry(token.as_str()).or_default() += 1;
            }
        }
        let mut kept: Vec<&str> = word_counts
            .iter()
            .filter(|&(word, &count)| count > config.unk_max_count && !is_reserved(word))
            .map(|(word, _)| *word)
            .collect();
        // Sorted so that ids, and so every float sum, do not depend on hash order.
        kept.sort_unstable();
        let mut words: Vec<String> = vec![BOS.into(), EOS.into(), UNK.into()];
        words.extend(kept.iter().map(|w| w.to_string()));
        let ids: HashMap<String, u32> = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i as u32))
            .collect();

        let mut lm = NgramLm {
            order,
            ids,
            words,
            tables: vec![OrderTable::default(); order],
            unigram_counts: Vec::new(),
        };
        let encoded: Vec<Vec<u32>> = sentences.iter().map(|s| lm.encode(s)).collect();
        lm.unigram_counts = vec![0; lm.words.len()];
        for id in encoded.iter().flat_map(|s| s.iter().skip(1)) {
            lm.unigram_counts[*id as usize] += 1;
        }
        lm.count(&encoded);
        for table in &mut lm.tables {
            table.discounts = match config.fixed_discounts {
                Some(fixed) => fixed,
                None => modified_kn_discounts(count_of_counts(&table.counts)),
            };
        }
        lm
    }

    /// The n of the model.
    pub fn order(&self) -> usize {
        self.order
    }

    /// The predicted vocabulary: every kept word, `<unk>` and `</s>` (not `<s>`).
    pub fn vocabulary_size(&self) -> usize {
        self.words.len() - 1
    }

    /// The predicted vocabulary's tokens, `</s>` and `<unk>` included.
    pub fn vocabulary(&self) -> impl Iterator<Item = &str> {
        self.words.iter().skip(1).map(String::as_str)
    }

    /// Natural-log probability of `tokens` as a whole sentence, `</s>` included.
    pub fn log_prob(&self, tokens: &[String]) -> f64 {
        let encoded = self.encode(tokens);
        let mut total = 0.0;
        for i in 1..encoded.len() {
            let start = (i + 1).saturating_sub(self.order);
            total += self.prob_ids(&encoded[start..i], encoded[i]).ln();
        }
        total
    }

    /// Natural-log probability of `tokens` and `</s>` under the add-one smoothed unigram
    /// distribution of the training tokens: what the sentence costs when word order is ignored.
    ///
    /// Subtracting it from [`log_prob`](Self::log_prob) gives SLOR (Kann et al., 2018), a
    /// fluency measure that does not punish a sentence for using rare words.
    pub fn unigram_log_prob(&self, tokens: &[String]) -> f64 {
        let total: u64 = self.unigram_counts.iter().sum();
        let denominator = (total + self.vocabulary_size() as u64) as f64;
        self.encode(tokens)
            .iter()
            .skip(1)
            .map(|&id| ((self.unigram_counts[id as usize] + 1) as f64 / denominator).ln())
            .sum()
    }

    /// Natural-log probability that the sentence ends after `tokens`: `ln P(</s> | last words)`.
    pub fn end_log_prob(&self, tokens: &[String]) -> f64 {
        let encoded = self.encode(tokens);
        let end = encoded.len() - 1;
        let start = (end + 1).saturating_sub(self.order);
        self.prob_ids(&encoded[start..end], EOS_ID).ln()
    }

    /// Perplexity of `tokens` as a sentence: `exp(-log_prob / (len + 1))`, `</s>` counted.
    pub fn perplexity(&self, tokens: &[String]) -> f64 {
        (-self.log_prob(tokens) / (tokens.len() + 1) as f64).exp()
    }

    /// `P(word | context)`, where `context` holds the preceding tokens (only the last
    /// `order - 1` are used; a leading `<s>` marks the sentence start). Unknown words read as
    /// `<unk>`.
    pub fn prob(&self, context: &[&str], word: &str) -> f64 {
        let context: Vec<u32> = context.iter().map(|w| self.id(w)).collect();
        let start = (context.len() + 1).saturating_sub(self.order);
        self.prob_ids(&context[start..], self.id(word))
    }

    fn id(&self, word: &str) -> u32 {
        self.ids.get(word).copied().unwrap_or(UNK_ID)
    }

    /// `<s>` followed by the token ids and `</s>`.
    fn encode(&self, tokens: &[String]) -> Vec<u32> {
        let mut encoded = Vec::with_capacity(tokens.len() + 2);
        encoded.push(BOS_ID);
        encoded.extend(tokens.iter().map(|t| self.id(t)));
        encoded.push(EOS_ID);
        encoded
    }

    fn count(&mut self, sentences: &[Vec<u32>]) {
        let order = self.order;
        // Highest order: raw counts.
        let mut raw: HashMap<Vec<u32>, u64> = HashMap::new();
        // Lower orders: distinct left extensions, and raw counts of the `<s>`-initial ones.
        let mut left_extensions: Vec<HashMap<Vec<u32>, HashSet<u32>>> = vec![HashMap::new(); order];
        let mut bos_raw: Vec<HashMap<Vec<u32>, u64>> = vec![HashMap::new(); order];
        for sentence in sentences {
            for end in 1..sentence.len() {
                for k in 1..=order.min(end + 1) {
                    let gram = &sentence[end + 1 - k..=end];
                    if k == order {
                        *raw.entry(gram.to_vec()).or_default() += 1;
                    } else if gram[0] == BOS_ID {
                        *bos_raw[k - 1].entry(gram.to_vec()).or_default() += 1;
                    } else if end + 1 > k {
                        left_extensions[k - 1]
                            .entry(gram.to_vec())
                            .or_default()
                            .insert(sentence[end - k]);
                    }
                }
            }
        }
        for k in 1..=order {
            let counts: HashMap<Vec<u32>, u64> = if k == order {
                std::mem::take(&mut raw)
            } else {
                let mut counts = std::mem::take(&mut bos_raw[k - 1]);
                for (gram, lefts) in std::mem::take(&mut left_extensions[k - 1]) {
                    counts.insert(gram, lefts.len() as u64);
                }
                counts
            };
            let mut contexts: HashMap<Vec<u32>, ContextStats> = HashMap::new();
            for (gram, &count) in &counts {
                let stats = contexts.entry(gram[..k - 1].to_vec()).or_default();
                stats.total += count;
                match count {
                    1 => stats.n1 += 1,
                    2 => stats.n2 += 1,
                    _ => stats.n3_plus += 1,
                }
            }
            self.tables[k - 1] = OrderTable {
                counts,
                contexts,
                discounts: [0.0; 3],
            };
        }
    }

    /// Interpolated probability of `word` after `context` (at most `order - 1` ids).
    fn prob_ids(&self, context: &[u32], word: u32) -> f64 {
        // Start from the uniform distribution over the predicted vocabulary and climb the
        // orders from unigrams up to the full context.
        let mut p = 1.0 / self.vocabulary_size() as f64;
        let mut gram: Vec<u32> = Vec::with_capacity(context.len() + 1);
        for k in 1..=context.len() + 1 {
            let history = &context[context.len() + 1 - k..];
            let table = &self.tables[k - 1];
            let Some(stats) = table.contexts.get(history) else {
                continue;
            };
            gram.clear();
            gram.extend_from_slice(history);
            gram.push(word);
            let count = table.counts.get(gram.as_slice()).copied().unwrap_or(0);
            let total = stats.total as f64;
            let kept = (count as f64 - table.discount(count)).max(0.0) / total;
            let backoff = (table.discounts[0] * stats.n1 as f64
                + table.discounts[1] * stats.n2 as f64
                + table.discounts[2] * stats.n3_plus as f64)
                / total;
            p = kept + backoff * p;
        }
        p
    }
}

fn is_reserved(word: &str) -> bool {
    word == BOS || word == EOS || word == UNK
}

/// `[n1, n2, n3, n4]`: how many n-grams have (adjusted) count 1, 2, 3, 4.
fn count_of_counts(counts: &HashMap<Vec<u32>, u64>) -> [u64; 4] {
    let mut n = [0u64; 4];
    for &count in counts.values() {
        if (1..=4).contains(&count) {
            n[count as usize - 1] += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentences(text: &[&str]) -> Vec<Vec<String>> {
        text.iter()
            .map(|s| s.split_whitespace().map(String::from).collect())
            .collect()
    }

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn discounts_follow_chen_goodman() {
        // n = [10, 5, 3, 2]: Y = 10 / 20 = 0.5; D1 = 1 - 2(0.5)(5/10) = 0.5;
        // D2 = 2 - 3(0.5)(3/5) = 1.1; D3+ = 3 - 4(0.5)(2/3) = 5/3.
        let d = modified_kn_discounts([10, 5, 3, 2]);
        assert!((d[0] - 0.5).abs() < 1e-12);
        assert!((d[1] - 1.1).abs() < 1e-12);
        assert!((d[2] - 5.0 / 3.0).abs() < 1e-12);
        // Undefined estimates fall back and stay positive.
        let d = modified_kn_discounts([0, 0, 0, 0]);
        assert_eq!(d, [0.5, 1.0, 1.5]);
    }

    /// Bigram model on "a b", "a b", "b" with D = [0.5, 1.0, 1.5], worked by hand.
    ///
    /// Bigram raw counts: (<s> a) 2, (a b) 2, (b </s>) 3, (<s> b) 1.
    /// Unigram continuation counts: a 1 ({<s>}), b 2 ({<s>, a}), </s> 1 ({b}); total 4.
    /// Vocabulary {a, b, </s>, <unk>}: uniform 1/4.
    /// Unigram backoff = (0.5·2 + 1.0·1) / 4 = 0.5, so
    /// p(a) = 0.5/4 + 0.5/4 = 0.25, p(b) = 1/4 + 0.125 = 0.375, p(</s>) = 0.25, p(<unk>) = 0.125.
    /// Context <s>: total 3, backoff (0.5·1 + 1.0·1) / 3 = 0.5,
    /// p(a | <s>) = 1/3 + 0.5·0.25 = 11/24. Context a: p(b | a) = 1/2 + 0.5·0.375 = 0.6875.
    /// Context b: total 3, backoff 1.5/3, p(</s> | b) = 1.5/3 + 0.5·0.25 = 0.625.
    #[test]
    fn hand_computed_bigram_example() {
        let corpus = sentences(&["a b", "a b", "b"]);
        let config = LmConfig {
            order: 2,
            unk_max_count: 0,
            fixed_discounts: Some([0.5, 1.0, 1.5]),
        };
        let lm = NgramLm::train_with(corpus.iter().map(Vec::as_slice), &config);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(lm.prob(&[], "a"), 0.25));
        assert!(close(lm.prob(&[], "b"), 0.375));
        assert!(close(lm.prob(&[], EOS), 0.25));
        assert!(close(lm.prob(&[], "zebra"), 0.125));
        assert!(close(lm.prob(&[BOS], "a"), 11.0 / 24.0));
        assert!(close(lm.prob(&[BOS], "b"), 1.0 / 6.0 + 0.1875));
        assert!(close(lm.prob(&["a"], "b"), 0.6875));
        assert!(close(lm.prob(&["b"], EOS), 0.625));
        let expected = (11.0f64 / 24.0).ln() + 0.6875f64.ln() + 0.625f64.ln();
        assert!(close(lm.log_prob(&toks("a b")), expected));
        assert!(close(lm.perplexity(&toks("a b")), (-expected / 3.0).exp()));
        assert!(close(lm.end_log_prob(&toks("a b")), 0.625f64.ln()));
        // Unigram counts a 2, b 3, </s> 3, <unk> 0; add-one over 4 words: denominator 8 + 4.
        let unigram = (3.0f64 / 12.0).ln() + (4.0f64 / 12.0).ln() + (4.0f64 / 12.0).ln();
        assert!(close(lm.unigram_log_prob(&toks("a b")), unigram));
    }

    fn assert_contexts_normalised(lm: &NgramLm, contexts: &[Vec<&str>]) {
        let vocabulary: Vec<String> = lm.vocabulary().map(String::from).collect();
        for context in contexts {
            let sum: f64 = vocabulary.iter().map(|w| lm.prob(context, w)).sum();
            assert!(
                (sum - 1.0).abs() < 1e-9,
                "context {context:?} sums to {sum}"
            );
        }
    }

    #[test]
    fn every_context_sums_to_one() {
        let corpus = sentences(&[
            "a man rides a horse on the beach",
            "a man rides a bike on the street",
            "a woman rides a horse in a field",
            "two dogs play on the beach",
            "a dog plays with a ball on the grass",
            "the man is riding a red bike",
            "a horse stands in a field",
            "a man walks a dog on the beach",
        ]);
        for order in 1..=4 {
            let lm = NgramLm::train(corpus.iter().map(Vec::as_slice), order);
            let mut contexts: Vec<Vec<&str>> = vec![vec![], vec![BOS], vec!["unseen"]];
            for sentence in &corpus {
                let padded: Vec<&str> = std::iter::once(BOS)
                    .chain(sentence.iter().map(String::as_str))
                    .collect();
                for end in 0..padded.len() {
                    for start in end.saturating_sub(order)..=end {
                        contexts.push(padded[start..end].to_vec());
                    }
                }
            }
            contexts.push(vec!["a", "zebra"]);
            contexts.push(vec!["zebra", "a"]);
            assert_contexts_normalised(&lm, &contexts);
        }
    }

    proptest::proptest! {
        /// Any corpus over a small alphabet, any order: every context seen in it (and some
        /// unseen ones) defines a distribution over the vocabulary and `</s>`.
        #[test]
        fn random_corpora_are_normalised(
            corpus in proptest::collection::vec(
                proptest::collection::vec(proptest::sample::select(vec!["a", "b", "c", "d", "e"]), 0..8),
                1..12,
            ),
            order in 1usize..5,
            unk_max_count in 0u64..3,
        ) {
            let corpus: Vec<Vec<String>> = corpus
                .iter()
                .map(|s| s.iter().map(|w| w.to_string()).collect())
                .collect();
            let config = LmConfig { order, unk_max_count, fixed_discounts: None };
            let lm = NgramLm::train_with(corpus.iter().map(Vec::as_slice), &config);
            let mut contexts: Vec<Vec<&str>> = vec![vec![], vec![BOS], vec!["z", "a"]];
            for sentence in &corpus {
                let padded: Vec<&str> = std::iter::once(BOS)
                    .chain(sentence.iter().map(String::as_str))
                    .collect();
                for end in 0..padded.len() {
                    contexts.push(padded[end.saturating_sub(order)..end].to_vec());
                }
            }
            assert_contexts_normalised(&lm, &contexts);
        }
    }

    #[test]
    fn singletons_become_unknown_and_unseen_words_score() {
        let corpus = sentences(&["a dog runs", "a dog sits", "a cat runs"]);
        let lm = NgramLm::train(corpus.iter().map(Vec::as_slice), 3);
        // "sits" and "cat" are singletons: they share <unk>'s probability with unseen words.
        assert_eq!(lm.prob(&[BOS, "a"], "cat"), lm.prob(&[BOS, "a"], "zebra"));
        assert!(lm.vocabulary().all(|w| w != "cat"));
        let fluent = lm.log_prob(&toks("a dog runs"));
        let scrambled = lm.log_prob(&toks("runs dog a"));
        assert!(fluent > scrambled);
        assert!(lm.log_prob(&[]).is_finite());
    }

    #[test]
    fn empty_corpus_gives_a_uniform_model() {
        let lm = NgramLm::train(std::iter::empty(), 3);
        // Vocabulary {</s>, <unk>}.
        assert_eq!(lm.vocabulary_size(), 2);
        assert!((lm.prob(&[], "anything") - 0.5).abs() < 1e-12);
        assert!((lm.log_prob(&toks("x y")) - 3.0 * 0.5f64.ln()).abs() < 1e-12);
    }
}
