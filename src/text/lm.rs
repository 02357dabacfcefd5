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
//!
//! # Training from merged counts
//!
//! [`NgramLm::train_with`] needs every sentence at once. [`NgramCounts`] gathers what it needs
//! one sentence at a time, over the raw tokens (the vocabulary, and so the `<unk>` mapping, is
//! only known once every sentence has been seen): each worker of a streaming pass fills its own
//! `NgramCounts`, the workers' counts are [merged](NgramCounts::merge) (in any order, any
//! grouping), and [`NgramLm::from_counts`] fits the model once from the total, identical to
//! `train_with` on the same sentences in any order.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use serde::{Deserialize, Serialize};

use super::gram::Gram;
use super::interner::{map_bytes, Interner};

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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ContextStats {
    /// Sum of the (adjusted) counts of the words seen after the context.
    total: u64,
    /// How many distinct followers have adjusted count 1, 2 and 3 or more.
    n1: u64,
    n2: u64,
    n3_plus: u64,
}

/// One order k: adjusted counts of k-grams, and statistics of their (k-1)-word contexts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct OrderTable {
    counts: HashMap<Gram, u64>,
    contexts: HashMap<Gram, ContextStats>,
    discounts: [f64; 3],
}

impl OrderTable {
    /// The table of order `k` with these (adjusted) counts; discounts still to set.
    fn of_counts(counts: HashMap<Gram, u64>) -> OrderTable {
        let mut contexts: HashMap<Gram, ContextStats> = HashMap::default();
        for (gram, &count) in &counts {
            let stats = contexts.entry(gram.context()).or_default();
            stats.total += count;
            match count {
                1 => stats.n1 += 1,
                2 => stats.n2 += 1,
                _ => stats.n3_plus += 1,
            }
        }
        OrderTable {
            counts,
            contexts,
            discounts: [0.0; 3],
        }
    }

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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
        let mut word_counts: HashMap<&str, u64> = HashMap::default();
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

    /// Fits the model from counts gathered sentence by sentence (and merged): the same model,
    /// bit for bit, as [`train_with`](Self::train_with) on the counted sentences, whatever
    /// order they were counted and merged in.
    ///
    /// # Panics
    ///
    /// When `counts` were gathered for a lower order than `config.order` (a higher one is
    /// fine: a model of order n only reads the counts of n-grams up to n).
    pub fn from_counts(counts: &NgramCounts, config: &LmConfig) -> NgramLm {
        NgramLm::from_counts_less(counts, &[], config)
    }

    /// The model [`from_counts`](Self::from_counts) fits from `counts` with the sentences
    /// `removed` taken out (given by their tokens' local ids, as
    /// [`NgramCounts::add_sentence_ids`] returned them), leaving `counts` as they are: the same
    /// model, bit for bit, as one trained without those sentences. Several such models of one
    /// set of counts can be fitted at once, from several threads.
    ///
    /// Fails when a removed sentence was not counted (or not as often as it is removed).
    ///
    /// # Panics
    ///
    /// As `from_counts` does.
    pub(crate) fn from_counts_without(
        counts: &NgramCounts,
        removed: &[&[u32]],
        config: &LmConfig,
    ) -> Result<NgramLm, String> {
        let mut less: Vec<HashMap<Box<[u32]>, u64>> = vec![HashMap::default(); counts.order];
        let mut padded = Vec::new();
        for tokens in removed {
            if tokens.iter().any(|&id| id as usize >= counts.words.len()) {
                return Err("a word id is out of range".into());
            }
            padded.clear();
            padded.push(PAD_BOS);
            padded.extend_from_slice(tokens);
            padded.push(PAD_EOS);
            for_each_gram(&padded, counts.order, |m, gram| {
                add_count(&mut less[m - 1], gram, 1)
            });
        }
        for (table, minus) in counts.grams.iter().zip(&less) {
            if minus
                .iter()
                .any(|(gram, &n)| table.get(gram).is_none_or(|&count| count < n))
            {
                return Err("the sentence was not counted".into());
            }
        }
        Ok(NgramLm::from_counts_less(counts, &less, config))
    }

    /// [`from_counts`](Self::from_counts) of `counts` less the counts `less` (`less[m - 1]`
    /// of the m-grams; none when empty), each at most the count it is taken from.
    fn from_counts_less(
        counts: &NgramCounts,
        less: &[HashMap<Box<[u32]>, u64>],
        config: &LmConfig,
    ) -> NgramLm {
        // The count of an m-gram left once `less` is taken away: 0 for one no longer counted.
        let left = |m: usize, gram: &[u32], count: u64| {
            count
                - less
                    .get(m - 1)
                    .and_then(|t| t.get(gram))
                    .copied()
                    .unwrap_or(0)
        };
        let order = config.order.max(1);
        assert!(
            counts.order >= order,
            "n-gram counts of order {} cannot fit a model of order {order}",
            counts.order
        );
        // A raw word's unigram count is its number of occurrences as a token (the padding
        // `</s>` is counted too, but reserved words never enter the vocabulary).
        let mut kept: Vec<&str> = counts.grams[0]
            .iter()
            .map(|(gram, &count)| (counts.words.word(gram[0]), left(1, gram, count)))
            .filter(|&(word, count)| count > config.unk_max_count && !is_reserved(word))
            .map(|(word, _)| word)
            .collect();
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
        // The padding has local ids of `<s>` and `</s>`, which map to BOS_ID and EOS_ID as
        // literal `<s>` and `</s>` tokens do in `train_with`'s encoding.
        let to_model: Vec<u32> = counts.words.words().map(|w| lm.id(w)).collect();
        lm.unigram_counts = vec![0; lm.words.len()];
        for (gram, &count) in &counts.grams[0] {
            lm.unigram_counts[to_model[gram[0] as usize] as usize] += left(1, gram, count);
        }
        let mut key: Vec<u32> = Vec::with_capacity(order);
        let add = |table: &mut HashMap<Gram, u64>, key: Gram, count: u64| {
            *table.entry(key).or_default() += count;
        };
        // From the highest order down: order k < n reads the (k+1)-grams of the table above,
        // whose keys are exactly the distinct (k+1)-grams of the encoded sentences.
        for k in (1..=order).rev() {
            let mut table: HashMap<Gram, u64> = HashMap::default();
            for (gram, &count) in &counts.grams[k - 1] {
                let count = left(k, gram, count);
                // The highest order keeps raw counts, and so does a lower-order `<s>`-initial
                // k-gram; only those are needed from the raw k-grams below the top.
                if count > 0 && (k == order || to_model[gram[0] as usize] == BOS_ID) {
                    key.clear();
                    key.extend(gram.iter().map(|&id| to_model[id as usize]));
                    add(&mut table, Gram::new(&key), count);
                }
            }
            if k < order {
                // A k-gram not starting with `<s>` always has a word on its left (position 0
                // is `<s>`): its continuation count is the number of distinct encoded
                // (k+1)-grams it ends.
                for gram in lm.tables[k].counts.keys() {
                    if gram.id(1) != BOS_ID {
                        add(&mut table, gram.rest(), 1);
                    }
                }
            }
            lm.tables[k - 1] = OrderTable::of_counts(table);
        }
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

    /// [`unigram_log_prob`](Self::unigram_log_prob) of each token of `tokens` alone, the
    /// corpus size summed once.
    pub fn unigram_log_probs_each(&self, tokens: &[String]) -> Vec<f64> {
        let total: u64 = self.unigram_counts.iter().sum();
        let denominator = (total + self.vocabulary_size() as u64) as f64;
        let log_prob = |id: u32| ((self.unigram_counts[id as usize] + 1) as f64 / denominator).ln();
        let end = log_prob(EOS_ID);
        tokens
            .iter()
            .map(|t| [log_prob(self.id(t)), end].into_iter().sum())
            .collect()
    }

    /// `ln P(token | the tokens before it)` for each token of `tokens` after `<s>`, then
    /// `ln P(</s> | …)`: [`prob`](Self::prob) of each with the tokens before it as context,
    /// the sentence's words looked up once.
    pub fn token_log_probs(&self, tokens: &[String]) -> Vec<f64> {
        let encoded = self.encode(tokens);
        (1..encoded.len())
            .map(|end| {
                let start = end.saturating_sub(self.order.saturating_sub(1));
                self.prob_ids(&encoded[start..end], encoded[end]).ln()
            })
            .collect()
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
        let mut raw: HashMap<Gram, u64> = HashMap::default();
        // Lower orders: distinct left extensions, and raw counts of the `<s>`-initial ones.
        let mut left_extensions: Vec<HashMap<Gram, HashSet<u32>>> = vec![HashMap::default(); order];
        let mut bos_raw: Vec<HashMap<Gram, u64>> = vec![HashMap::default(); order];
        for sentence in sentences {
            for end in 1..sentence.len() {
                for k in 1..=order.min(end + 1) {
                    let gram = &sentence[end + 1 - k..=end];
                    if k == order {
                        *raw.entry(Gram::new(gram)).or_default() += 1;
                    } else if gram[0] == BOS_ID {
                        *bos_raw[k - 1].entry(Gram::new(gram)).or_default() += 1;
                    } else if end + 1 > k {
                        left_extensions[k - 1]
                            .entry(Gram::new(gram))
                            .or_default()
                            .insert(sentence[end - k]);
                    }
                }
            }
        }
        for k in 1..=order {
            let counts: HashMap<Gram, u64> = if k == order {
                std::mem::take(&mut raw)
            } else {
                let mut counts = std::mem::take(&mut bos_raw[k - 1]);
                for (gram, lefts) in std::mem::take(&mut left_extensions[k - 1]) {
                    counts.insert(gram, lefts.len() as u64);
                }
                counts
            };
            self.tables[k - 1] = OrderTable::of_counts(counts);
        }
    }

    /// Interpolated probability of `word` after `context` (at most `order - 1` ids).
    fn prob_ids(&self, context: &[u32], word: u32) -> f64 {
        // Start from the uniform distribution over the predicted vocabulary and climb the
        // orders from unigrams up to the full context.
        let mut p = 1.0 / self.vocabulary_size() as f64;
        for k in 1..=context.len() + 1 {
            let history = &context[context.len() + 1 - k..];
            let table = &self.tables[k - 1];
            let Some(stats) = table.contexts.get(&Gram::new(history)) else {
                continue;
            };
            let count = (table.counts.get(&Gram::followed(history, word)))
                .copied()
                .unwrap_or(0);
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

/// Local ids of the padding in [`NgramCounts`] (interned first).
const PAD_BOS: u32 = 0;
const PAD_EOS: u32 = 1;

/// Mergeable n-gram statistics of a corpus, from which [`NgramLm::from_counts`] fits the model
/// that [`NgramLm::train_with`] would train on the same sentences.
///
/// # Execution model
///
/// Accumulate per worker, merge, fit once: each worker counts the sentences it reads with
/// [`add_sentence`](Self::add_sentence); the workers' counts are combined with
/// [`merge`](Self::merge) (serialized between processes with serde if need be) in any order;
/// the total fits one model. Counting, merging and fitting are exact (integer counts), so the
/// model does not depend on how the sentences were split or in which order they came.
///
/// # What is counted
///
/// Each sentence is padded as the model pads it, `<s> w1 … wn </s>`, and every m-gram of it
/// for m = 1 ..= order that ends after `<s>` is counted, over the raw tokens: which words
/// become `<unk>` is only known from the total, and the model's counts are sums (raw counts)
/// and distinct-left-word counts (continuation counts) of the raw n-grams' images under that
/// mapping. Words are interned in a local table, n-grams are keyed by local ids.
///
/// # Memory
///
/// Grows with the number of distinct m-grams (m ≤ order) of the counted sentences, plus the
/// distinct words: about `16 + 4m` bytes of key, 8 of count and hash-table overhead per
/// distinct m-gram (roughly what training needs anyway). [`approx_bytes`](Self::approx_bytes)
/// estimates it.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "NgramCountsWire")]
pub struct NgramCounts {
    order: usize,
    sentences: u64,
    words: Interner,
    /// `grams[m - 1]`: count of each m-gram of the padded sentences (local ids).
    grams: Vec<HashMap<Box<[u32]>, u64>>,
}

impl NgramCounts {
    /// Empty counts for models of order up to `order` (at least 1).
    pub fn new(order: usize) -> NgramCounts {
        let order = order.max(1);
        let mut words = Interner::default();
        let bos = words.intern(BOS);
        let eos = words.intern(EOS);
        debug_assert_eq!((bos, eos), (PAD_BOS, PAD_EOS));
        NgramCounts {
            order,
            sentences: 0,
            words,
            grams: vec![HashMap::default(); order],
        }
    }

    /// The highest n counted.
    pub fn order(&self) -> usize {
        self.order
    }

    /// The number of sentences counted.
    pub fn sentences(&self) -> u64 {
        self.sentences
    }

    /// The number of distinct m-grams counted, all m together.
    pub fn distinct_ngrams(&self) -> usize {
        self.grams.iter().map(HashMap::len).sum()
    }

    /// Counts one sentence (its tokens, without padding).
    pub fn add_sentence<S: AsRef<str>>(&mut self, tokens: &[S]) {
        self.add_sentence_ids(tokens);
    }

    /// Counts one sentence and returns its tokens' local ids.
    pub(crate) fn add_sentence_ids<S: AsRef<str>>(&mut self, tokens: &[S]) -> Vec<u32> {
        let mut padded = Vec::with_capacity(tokens.len() + 2);
        padded.push(PAD_BOS);
        padded.extend(tokens.iter().map(|t| self.words.intern(t.as_ref())));
        padded.push(PAD_EOS);
        self.sentences += 1;
        for_each_gram(&padded, self.order, |m, gram| {
            add_count(&mut self.grams[m - 1], gram, 1)
        });
        padded.pop();
        padded.remove(0);
        padded
    }

    /// The word of a local id.
    pub(crate) fn word(&self, id: u32) -> &str {
        self.words.word(id)
    }

    /// Adds `other`'s counts to these.
    ///
    /// # Panics
    ///
    /// When the two were made for different orders.
    pub fn merge(&mut self, mut other: NgramCounts) {
        if other.distinct_ngrams() > self.distinct_ngrams() {
            std::mem::swap(self, &mut other);
        }
        self.absorb(other);
    }

    /// Adds `other`'s counts to these (in this one's ids) and returns the map of `other`'s local
    /// ids to these.
    pub(crate) fn absorb(&mut self, other: NgramCounts) -> Vec<u32> {
        assert_eq!(
            self.order, other.order,
            "n-gram counts of different orders cannot be merged"
        );
        let remap = self.words.absorb(&other.words);
        self.sentences += other.sentences;
        let mut key: Vec<u32> = Vec::with_capacity(self.order);
        for (mine, theirs) in self.grams.iter_mut().zip(other.grams) {
            for (gram, count) in theirs {
                key.clear();
                key.extend(gram.iter().map(|&id| remap[id as usize]));
                add_count(mine, &key, count);
            }
        }
        remap
    }

    /// Heap bytes held, roughly.
    pub fn approx_bytes(&self) -> usize {
        let mut bytes = self.words.approx_bytes();
        for (m, table) in (1usize..).zip(&self.grams) {
            let key = (4 * m).div_ceil(8) * 8;
            bytes += map_bytes(table.capacity(), std::mem::size_of::<(Box<[u32]>, u64)>())
                + table.len() * key.max(16);
        }
        bytes
    }

    fn to_wire(&self) -> NgramCountsWire {
        let mut grams = Vec::with_capacity(self.order);
        let mut counts = Vec::with_capacity(self.order);
        for table in &self.grams {
            let mut entries: Vec<(&[u32], u64)> = table.iter().map(|(g, &c)| (&**g, c)).collect();
            // Sorted, so that the same counts always serialize to the same bytes.
            entries.sort_unstable();
            grams.push(
                entries
                    .iter()
                    .flat_map(|(g, _)| g.iter().copied())
                    .collect(),
            );
            counts.push(entries.iter().map(|&(_, c)| c).collect());
        }
        NgramCountsWire {
            order: self.order,
            sentences: self.sentences,
            words: self.words.to_words(),
            grams,
            counts,
        }
    }
}

/// Calls `f(m, gram)` for every m-gram (m ≤ `order`) of a padded sentence that ends after the
/// leading `<s>`: the n-grams the model counts.
fn for_each_gram(padded: &[u32], order: usize, mut f: impl FnMut(usize, &[u32])) {
    for end in 1..padded.len() {
        for m in 1..=order.min(end + 1) {
            f(m, &padded[end + 1 - m..=end]);
        }
    }
}

fn add_count(table: &mut HashMap<Box<[u32]>, u64>, gram: &[u32], count: u64) {
    match table.get_mut(gram) {
        Some(total) => *total += count,
        None => {
            table.insert(gram.into(), count);
        }
    }
}

/// [`NgramCounts`] as serialized: its word table, and per m the m-grams' local ids
/// concatenated (m per gram, sorted) beside their counts.
#[derive(Serialize, Deserialize)]
struct NgramCountsWire {
    order: usize,
    sentences: u64,
    words: Vec<String>,
    grams: Vec<Vec<u32>>,
    counts: Vec<Vec<u64>>,
}

impl Serialize for NgramCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_wire().serialize(serializer)
    }
}

impl TryFrom<NgramCountsWire> for NgramCounts {
    type Error = String;

    fn try_from(wire: NgramCountsWire) -> Result<NgramCounts, String> {
        let bad = |reason: &str| Err(format!("n-gram counts: {reason}"));
        if wire.order == 0 || wire.grams.len() != wire.order || wire.counts.len() != wire.order {
            return bad("the order and the number of tables disagree");
        }
        let words = Interner::from_words(wire.words).map_err(|e| format!("n-gram counts: {e}"))?;
        if words.len() < 2 || words.word(PAD_BOS) != BOS || words.word(PAD_EOS) != EOS {
            return bad("the word table does not start with the padding");
        }
        let mut grams = Vec::with_capacity(wire.order);
        for (m, (ids, counts)) in (1..).zip(wire.grams.into_iter().zip(wire.counts)) {
            if ids.len() != m * counts.len() {
                return bad("a table's ids and counts disagree");
            }
            if ids.iter().any(|&id| id as usize >= words.len()) {
                return bad("a word id is out of range");
            }
            let mut table: HashMap<Box<[u32]>, u64> =
                HashMap::with_capacity_and_hasher(counts.len(), Default::default());
            for (gram, count) in ids.chunks_exact(m).zip(counts) {
                if count == 0 || table.insert(gram.into(), count).is_some() {
                    return bad("an n-gram is listed twice or with count 0");
                }
            }
            grams.push(table);
        }
        Ok(NgramCounts {
            order: wire.order,
            sentences: wire.sentences,
            words,
            grams,
        })
    }
}

fn is_reserved(word: &str) -> bool {
    word == BOS || word == EOS || word == UNK
}

/// `[n1, n2, n3, n4]`: how many n-grams have (adjusted) count 1, 2, 3, 4.
fn count_of_counts(counts: &HashMap<Gram, u64>) -> [u64; 4] {
    let mut n = [0u64; 4];
    for &count in counts.values() {
        if (1..=4).contains(&count) {
            n[count as usize - 1] += 1;
        }
    }
    n
}

/// Asserts that every part of the two models is the same, floats bit for bit.
#[cfg(test)]
pub(crate) fn assert_same_model(a: &NgramLm, b: &NgramLm) {
    assert_eq!(a.order, b.order);
    assert_eq!(a.words, b.words);
    assert_eq!(a.ids, b.ids);
    assert_eq!(a.unigram_counts, b.unigram_counts);
    assert_eq!(a.tables.len(), b.tables.len());
    for (k, (x, y)) in a.tables.iter().zip(&b.tables).enumerate() {
        assert_eq!(x.counts, y.counts, "counts of order {}", k + 1);
        assert_eq!(x.contexts, y.contexts, "contexts of order {}", k + 1);
        assert_eq!(
            x.discounts.map(f64::to_bits),
            y.discounts.map(f64::to_bits),
            "discounts of order {}",
            k + 1
        );
    }
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
    fn hand_computed_bigram() -> NgramLm {
        let corpus = sentences(&["a b", "a b", "b"]);
        let config = LmConfig {
            order: 2,
            unk_max_count: 0,
            fixed_discounts: Some([0.5, 1.0, 1.5]),
        };
        NgramLm::train_with(corpus.iter().map(Vec::as_slice), &config)
    }

    #[test]
    fn hand_computed_bigram_example() {
        let lm = hand_computed_bigram();
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

    #[test]
    fn a_sentence_s_token_probabilities_are_those_of_each_token_after_the_ones_before_it() {
        let lm = hand_computed_bigram();
        // The hand-computed values of `hand_computed_bigram_example`.
        let expected = [11.0f64 / 24.0, 0.6875, 0.625].map(f64::ln);
        let got = lm.token_log_probs(&toks("a b"));
        assert!(got.iter().zip(expected).all(|(g, e)| (g - e).abs() < 1e-12));
        assert_eq!(got.len(), 3);
        let unigram = [(3.0f64 / 12.0).ln() + (4.0f64 / 12.0).ln()];
        assert!((lm.unigram_log_probs_each(&toks("a"))[0] - unigram[0]).abs() < 1e-12);
        // A trigram model, unknown and reserved words: exactly `prob` and `unigram_log_prob`
        // of each token with the tokens before it.
        let corpus = sentences(&["a b c d", "b c d a", "a c b d", "d d a b"]);
        let lm = NgramLm::train(corpus.iter().map(Vec::as_slice), 3);
        let sentence = toks("a b zebra c <s> d a </s> b");
        let mut context = vec![BOS];
        let mut by_prob = Vec::new();
        for token in &sentence {
            by_prob.push(lm.prob(&context, token).ln());
            context.push(token);
        }
        by_prob.push(lm.prob(&context, EOS).ln());
        assert_eq!(lm.token_log_probs(&sentence), by_prob);
        let each: Vec<f64> = (sentence.iter())
            .map(|t| lm.unigram_log_prob(std::slice::from_ref(t)))
            .collect();
        assert_eq!(lm.unigram_log_probs_each(&sentence), each);
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

    /// The public outputs of the two models on `probes` are the same bits.
    fn assert_same_outputs(a: &NgramLm, b: &NgramLm, probes: &[Vec<String>]) {
        assert!(a.vocabulary().eq(b.vocabulary()));
        assert_eq!(a.vocabulary_size(), b.vocabulary_size());
        for probe in probes {
            let bits = |lm: &NgramLm| {
                [
                    lm.log_prob(probe),
                    lm.perplexity(probe),
                    lm.unigram_log_prob(probe),
                    lm.end_log_prob(probe),
                ]
                .map(f64::to_bits)
            };
            assert_eq!(bits(a), bits(b), "{probe:?}");
            let words: Vec<&str> = std::iter::once(BOS)
                .chain(probe.iter().map(String::as_str))
                .collect();
            for end in 0..words.len() {
                for word in [EOS, UNK, "zebra", words[end]] {
                    let context = &words[end.saturating_sub(a.order)..end];
                    assert_eq!(
                        a.prob(context, word).to_bits(),
                        b.prob(context, word).to_bits()
                    );
                }
            }
        }
    }

    /// Counts of `corpus` split into the parts that `part_of` assigns (sentence index → part),
    /// merged in `merge_order`.
    fn merged_counts(
        corpus: &[Vec<String>],
        order: usize,
        part_of: impl Fn(usize) -> usize,
        merge_order: &[usize],
    ) -> NgramCounts {
        let mut parts: Vec<NgramCounts> = (0..merge_order.len())
            .map(|_| NgramCounts::new(order))
            .collect();
        for (i, sentence) in corpus.iter().enumerate() {
            parts[part_of(i) % merge_order.len()].add_sentence(sentence);
        }
        let mut parts: Vec<Option<NgramCounts>> = parts.into_iter().map(Some).collect();
        let mut total = parts[merge_order[0]].take().unwrap();
        for &p in &merge_order[1..] {
            total.merge(parts[p].take().unwrap());
        }
        total
    }

    #[test]
    fn counts_fit_the_trained_model() {
        let corpus = sentences(&[
            "a man rides a horse on the beach",
            "a man rides a bike on the street",
            "a woman rides a horse in a field",
            "",
            "two dogs play on the beach",
            "a dog plays with a ball on the grass",
            "the man is riding a red bike",
            "a horse stands in a field <s> </s> <unk>",
            "<s> a man walks a dog on the beach </s>",
        ]);
        let probes = sentences(&[
            "a man rides a horse",
            "a zebra rides the beach",
            "",
            "<s> the </s> dog <unk>",
            "field a in stands horse",
        ]);
        for order in 1..=5 {
            for unk_max_count in 0..3 {
                let config = LmConfig {
                    order,
                    unk_max_count,
                    fixed_discounts: None,
                };
                let trained = NgramLm::train_with(corpus.iter().map(Vec::as_slice), &config);
                let counts = merged_counts(&corpus, order, |i| i * 7 % 3, &[2, 0, 1]);
                assert_eq!(counts.sentences(), corpus.len() as u64);
                let fitted = NgramLm::from_counts(&counts, &config);
                assert_same_model(&trained, &fitted);
                assert_same_outputs(&trained, &fitted, &probes);
                // Counts of a higher order fit a lower-order model too.
                let higher = merged_counts(&corpus, order + 2, |i| i, &[0]);
                assert_same_model(&trained, &NgramLm::from_counts(&higher, &config));
            }
        }
    }

    #[test]
    fn a_model_without_some_sentences_is_the_model_trained_without_them() {
        let corpus = sentences(&["a b c", "a b", "c b a", "a b c", "d e"]);
        let config = LmConfig::default();
        let mut counts = NgramCounts::new(3);
        let mut ids = Vec::new();
        for sentence in &corpus {
            ids.push(counts.add_sentence_ids(sentence));
        }
        let without =
            NgramLm::from_counts_without(&counts, &[&ids[1], &ids[3], &ids[4]], &config).unwrap();
        let kept = [&corpus[0], &corpus[2]];
        let trained = NgramLm::train_with(kept.iter().map(|s| s.as_slice()), &config);
        assert_same_model(&trained, &without);
        // The counts are left as they were.
        assert_same_model(
            &NgramLm::train_with(corpus.iter().map(|s| s.as_slice()), &config),
            &NgramLm::from_counts(&counts, &config),
        );
        // "a b" was counted once: it cannot be taken out twice.
        assert!(NgramLm::from_counts_without(&counts, &[&ids[1], &ids[1]], &config).is_err());
        assert!(NgramLm::from_counts_without(&counts, &[&[99]], &config).is_err());
    }

    #[test]
    fn counts_round_trip_through_serde() {
        let corpus = sentences(&["a dog runs", "a dog sits", "a cat runs", ""]);
        let mut counts = NgramCounts::new(3);
        for sentence in &corpus {
            counts.add_sentence(sentence);
        }
        let json = serde_json::to_string(&counts).unwrap();
        let back: NgramCounts = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        let config = LmConfig::default();
        assert_same_model(
            &NgramLm::from_counts(&counts, &config),
            &NgramLm::from_counts(&back, &config),
        );
        assert!(counts.approx_bytes() > 0);
        // A corrupt table is refused.
        let corrupt = json.replace("\"order\":3", "\"order\":2");
        assert!(serde_json::from_str::<NgramCounts>(&corrupt).is_err());
    }

    #[test]
    fn empty_counts_give_the_empty_model() {
        let config = LmConfig::default();
        let trained = NgramLm::train_with(std::iter::empty(), &config);
        let fitted = NgramLm::from_counts(&NgramCounts::new(3), &config);
        assert_same_model(&trained, &fitted);
    }

    proptest::proptest! {
        /// Any corpus split over 1 to 4 counts merged in any order fits the trained model.
        #[test]
        fn merged_counts_fit_the_trained_model(
            corpus in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec!["a", "b", "c", "d", "e", "f", "<s>", "</s>"]),
                    0..9,
                ),
                0..14,
            ),
            order in 1usize..5,
            unk_max_count in 0u64..3,
            parts in proptest::collection::vec(0usize..4, 14),
            merge_order in proptest::sample::select(vec![
                vec![0], vec![1, 0], vec![0, 2, 1], vec![3, 1, 0, 2], vec![2, 3, 0, 1],
            ]),
        ) {
            let corpus: Vec<Vec<String>> = corpus
                .iter()
                .map(|s| s.iter().map(|w| w.to_string()).collect())
                .collect();
            let config = LmConfig { order, unk_max_count, fixed_discounts: None };
            let trained = NgramLm::train_with(corpus.iter().map(Vec::as_slice), &config);
            let counts = merged_counts(&corpus, order, |i| parts[i], &merge_order);
            let fitted = NgramLm::from_counts(&counts, &config);
            assert_same_model(&trained, &fitted);
            let mut probes = corpus.clone();
            probes.push(toks("a z b q"));
            assert_same_outputs(&trained, &fitted, &probes);
        }
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
