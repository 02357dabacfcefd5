//! Vocabularies built from the training data: caption words, region labels, verbs.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::schema::SampleRow;
use crate::text::tokenize::tokenize;

pub const PAD: i64 = 0;
pub const BOS: i64 = 1;
pub const EOS: i64 = 2;
pub const UNK: i64 = 3;
const WORD_SPECIALS: [&str; 4] = ["<pad>", "<bos>", "<eos>", "<unk>"];

/// Region label ids: 0 padding, 1 unknown label, 2 a control box no detection covers.
pub const LABEL_UNK: i64 = 1;
pub const LABEL_CONTROL: i64 = 2;
const LABEL_SPECIALS: [&str; 3] = ["<pad>", "<unk>", "<control>"];

/// Verb ids: 0 no verb asked, 1 unknown verb.
pub const VERB_NONE: i64 = 0;
pub const VERB_UNK: i64 = 1;
const VERB_SPECIALS: [&str; 2] = ["<none>", "<unk>"];

/// A list of strings with ids, specials first, then by decreasing count and alphabetically.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Table {
    pub items: Vec<String>,
    #[serde(skip)]
    index: HashMap<String, i64>,
}

impl Table {
    fn build(specials: &[&str], counts: BTreeMap<String, u64>) -> Table {
        let mut ranked: Vec<(String, u64)> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let items: Vec<String> = specials
            .iter()
            .map(|s| s.to_string())
            .chain(
                ranked
                    .into_iter()
                    .map(|(w, _)| w)
                    .filter(|w| !specials.contains(&w.as_str())),
            )
            .collect();
        Table::from_items(items)
    }

    pub fn from_items(items: Vec<String>) -> Table {
        let index = items
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i as i64))
            .collect();
        Table { items, index }
    }

    pub fn get(&self, item: &str) -> Option<i64> {
        self.index.get(item).copied()
    }

    /// The id of `item`, added at the end when it is new and the table holds fewer than
    /// `capacity` items; `None` when it is new and the table is full.
    pub fn get_or_add(&mut self, item: &str, capacity: usize) -> Option<i64> {
        if let Some(id) = self.get(item) {
            return Some(id);
        }
        if self.items.len() >= capacity {
            return None;
        }
        let id = self.items.len() as i64;
        self.items.push(item.to_string());
        self.index.insert(item.to_string(), id);
        Some(id)
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The three vocabularies of a model, saved beside its checkpoints as `vocab.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Vocabulary {
    pub words: Table,
    pub labels: Table,
    pub verbs: Table,
    /// Embedding rows the model keeps per table; more than the tables hold when the
    /// vocabulary grows while training runs ([`Vocabulary::growing`]).
    #[serde(default, skip_serializing_if = "Slots::is_zero")]
    pub slots: Slots,
}

/// Rows reserved for each table of a growing vocabulary (0: as many as the table holds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slots {
    pub words: usize,
    pub labels: usize,
    pub verbs: usize,
}

impl Slots {
    fn is_zero(&self) -> bool {
        *self == Slots::default()
    }
}

/// The normal form of a region or control label: lower case, single spaces.
pub fn normalize_label(label: &str) -> String {
    label
        .split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Vocabulary {
    /// Builds the vocabularies from the samples' texts, control labels and verbs, and the
    /// detection labels of their images.
    pub fn build<'a>(
        samples: impl IntoIterator<Item = &'a SampleRow>,
        detection_labels: impl IntoIterator<Item = &'a str>,
    ) -> Vocabulary {
        let mut words: BTreeMap<String, u64> = BTreeMap::new();
        let mut labels: BTreeMap<String, u64> = BTreeMap::new();
        let mut verbs: BTreeMap<String, u64> = BTreeMap::new();
        for sample in samples {
            for token in tokenize(&sample.text) {
                *words.entry(token).or_default() += 1;
            }
            for label in &sample.control_labels {
                *labels.entry(normalize_label(label)).or_default() += 1;
            }
            for verb in &sample.verbs {
                *verbs.entry(verb.to_lowercase()).or_default() += 1;
            }
        }
        for label in detection_labels {
            *labels.entry(normalize_label(label)).or_default() += 1;
        }
        Vocabulary {
            words: Table::build(&WORD_SPECIALS, words),
            labels: Table::build(&LABEL_SPECIALS, labels),
            verbs: Table::build(&VERB_SPECIALS, verbs),
            slots: Slots::default(),
        }
    }

    /// An empty vocabulary (specials only) that grows as samples arrive ([`Self::grow`]), up
    /// to `slots` items per table: a model can be built from it before the data is known.
    pub fn growing(slots: Slots) -> Vocabulary {
        let table =
            |specials: &[&str]| Table::from_items(specials.iter().map(|s| s.to_string()).collect());
        Vocabulary {
            words: table(&WORD_SPECIALS),
            labels: table(&LABEL_SPECIALS),
            verbs: table(&VERB_SPECIALS),
            slots,
        }
    }

    /// Adds the words, control labels and first verb of `sample` that are new, in the order
    /// they come, while their table has room; returns how many were new but found no room.
    pub fn grow(&mut self, sample: &SampleRow) -> usize {
        let mut full = 0;
        for token in tokenize(&sample.text) {
            full += usize::from(self.words.get_or_add(&token, self.slots.words).is_none());
        }
        for label in &sample.control_labels {
            let label = normalize_label(label);
            full += usize::from(self.labels.get_or_add(&label, self.slots.labels).is_none());
        }
        if let Some(verb) = sample.verbs.first() {
            let verb = verb.to_lowercase();
            full += usize::from(self.verbs.get_or_add(&verb, self.slots.verbs).is_none());
        }
        full
    }

    /// Embedding rows of the words table (at least as many as it holds).
    pub fn word_rows(&self) -> i64 {
        self.words.len().max(self.slots.words) as i64
    }

    /// Embedding rows of the labels table.
    pub fn label_rows(&self) -> i64 {
        self.labels.len().max(self.slots.labels) as i64
    }

    /// Embedding rows of the verbs table.
    pub fn verb_rows(&self) -> i64 {
        self.verbs.len().max(self.slots.verbs) as i64
    }

    /// `<bos> w1 ... wn <eos>`, cut to `max_tokens` (the cut keeps `<eos>`).
    pub fn encode_text(&self, text: &str, max_tokens: usize) -> Vec<i64> {
        let mut ids = vec![BOS];
        ids.extend(
            tokenize(text)
                .iter()
                .map(|t| self.words.get(t).unwrap_or(UNK)),
        );
        ids.truncate(max_tokens.saturating_sub(1).max(1));
        ids.push(EOS);
        ids
    }

    /// Words of generated ids, stopping at `<eos>`, specials dropped.
    pub fn decode(&self, ids: &[i64]) -> Vec<String> {
        ids.iter()
            .take_while(|&&id| id != EOS)
            .filter(|&&id| id > UNK)
            .filter_map(|&id| self.words.items.get(id as usize).cloned())
            .collect()
    }

    pub fn label_id(&self, label: &str) -> i64 {
        self.labels
            .get(&normalize_label(label))
            .unwrap_or(LABEL_UNK)
    }

    pub fn verb_id(&self, verbs: &[String]) -> i64 {
        match verbs.first() {
            None => VERB_NONE,
            Some(v) => self.verbs.get(&v.to_lowercase()).unwrap_or(VERB_UNK),
        }
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::invalid("vocabulary", e.to_string()))?;
        std::fs::write(path, text).map_err(|e| Error::io(path, e))
    }

    pub fn load(path: &Path) -> Result<Vocabulary> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let raw: Vocabulary = serde_json::from_str(&text)
            .map_err(|e| Error::record(path.display().to_string(), "vocabulary", e.to_string()))?;
        Ok(Vocabulary {
            words: Table::from_items(raw.words.items),
            labels: Table::from_items(raw.labels.items),
            verbs: Table::from_items(raw.verbs.items),
            slots: raw.slots,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes() {
        let sample = SampleRow {
            image: None,
            sample_id: "s".into(),
            image_id: "i".into(),
            split: "train".into(),
            method: "original".into(),
            text: "A dog runs. A dog".into(),
            control_boxes: vec![],
            control_labels: vec!["Dog".into()],
            coverage: 0.0,
            length_level: 1,
            word_count: 5,
            verbs: vec!["run".into()],
            quality: vec![],
            provenance: Default::default(),
        };
        let v = Vocabulary::build([&sample], ["person"]);
        // Specials, then by count: a (2), dog (2), then . and runs (1 each, alphabetical).
        assert_eq!(v.words.items[4..], ["a", "dog", ".", "runs"]);
        let ids = v.encode_text("a dog flies", 48);
        assert_eq!(ids, vec![BOS, 4, 5, UNK, EOS]);
        assert_eq!(v.decode(&ids[1..]), ["a", "dog"]);
        assert_eq!(v.encode_text("a dog runs .", 4), vec![BOS, 4, 5, EOS]);
        assert_eq!(v.label_id("dog"), 3);
        assert_eq!(v.label_id("cat"), LABEL_UNK);
        assert_eq!(v.verb_id(&[]), VERB_NONE);
        assert_eq!(v.verb_id(&["run".into()]), 2);
    }
}
