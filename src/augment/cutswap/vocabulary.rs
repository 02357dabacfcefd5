//! The object vocabulary (class lemmas from detections and scene graphs) and the attribute
//! statistics gathered from captions.

use std::collections::{BTreeMap, BTreeSet};

use super::number::{is_plurale_tantum, lemma_and_number, singular_candidates, Number};

/// Object class lemmas: singular class names, one entry per lemma (`tree` for `trees`).
#[derive(Clone, Debug, Default)]
pub struct ObjectVocabulary {
    lemmas: BTreeSet<String>,
    max_words: usize,
}

/// A class name as written in data: lower case, single spaces, no surrounding blanks.
pub fn normalize_name(name: &str) -> String {
    name.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

impl ObjectVocabulary {
    /// The vocabulary of the given class names (any case, singular or plural).
    ///
    /// A plural-looking name whose singular reading is also a class name maps to it (`trees`
    /// with `tree`); otherwise the most likely reading is taken (`trees` alone → `tree`).
    pub fn from_class_names<I, S>(names: I) -> ObjectVocabulary
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let raw: BTreeSet<String> = names
            .into_iter()
            .map(|n| normalize_name(n.as_ref()))
            .filter(|n| n.chars().any(char::is_alphabetic))
            .collect();
        let mut lemmas = BTreeSet::new();
        for name in &raw {
            let lemma = if is_plurale_tantum(name) {
                name.clone()
            } else {
                let candidates = singular_candidates(name);
                candidates
                    .iter()
                    .find(|c| raw.contains(*c))
                    .cloned()
                    .unwrap_or_else(|| lemma_and_number(name).0)
            };
            lemmas.insert(lemma);
        }
        let max_words = lemmas
            .iter()
            .map(|l| l.split(' ').count())
            .max()
            .unwrap_or(0);
        ObjectVocabulary { lemmas, max_words }
    }

    /// The lemma and number of a (possibly multi-word) lower-case phrase, if it names a class.
    pub fn lookup(&self, phrase: &str) -> Option<(&str, Number)> {
        if let Some(lemma) = self.lemmas.get(phrase) {
            let number = if is_plurale_tantum(phrase) {
                Number::Plural
            } else {
                Number::Singular
            };
            return Some((lemma.as_str(), number));
        }
        singular_candidates(phrase)
            .iter()
            .find_map(|c| self.lemmas.get(c))
            .map(|lemma| (lemma.as_str(), Number::Plural))
    }

    pub fn max_words(&self) -> usize {
        self.max_words
    }

    pub fn lemmas(&self) -> impl Iterator<Item = &str> {
        self.lemmas.iter().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.lemmas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lemmas.is_empty()
    }
}

/// Surface forms of one lemma seen in captions, by number, with counts.
#[derive(Clone, Debug, Default)]
pub struct SurfaceForms {
    pub singular: BTreeMap<String, usize>,
    pub plural: BTreeMap<String, usize>,
}

impl SurfaceForms {
    pub fn add(&mut self, surface: &str, number: Number) {
        let forms = match number {
            Number::Singular => &mut self.singular,
            Number::Plural => &mut self.plural,
        };
        *forms.entry(surface.to_string()).or_default() += 1;
    }

    /// The most frequent form of this number (ties: alphabetical first).
    pub fn most_frequent(&self, number: Number) -> Option<&str> {
        let forms = match number {
            Number::Singular => &self.singular,
            Number::Plural => &self.plural,
        };
        forms
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(form, _)| form.as_str())
    }

    /// Every form seen, both numbers.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        self.singular
            .keys()
            .chain(self.plural.keys())
            .map(String::as_str)
    }
}

/// Counts of attributes and of (object, attribute) pairs over a dataset's captions, with the
/// captions showing each pair.
#[derive(Clone, Debug, Default)]
pub struct AttributeStatistics {
    /// Occurrences of each attribute word bound to any object.
    pub counts: BTreeMap<String, usize>,
    /// For each object lemma, its attributes and the caption ids that show the pair.
    pub pairs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl AttributeStatistics {
    pub fn add(&mut self, lemma: &str, attribute: &str, caption_id: &str) {
        *self.counts.entry(attribute.to_string()).or_default() += 1;
        self.pairs
            .entry(lemma.to_string())
            .or_default()
            .entry(attribute.to_string())
            .or_default()
            .insert(caption_id.to_string());
    }

    /// Drops attributes seen fewer than `min_count` times in all.
    pub fn retain_frequent(&mut self, min_count: usize) {
        self.counts.retain(|_, c| *c >= min_count);
        let counts = &self.counts;
        for attributes in self.pairs.values_mut() {
            attributes.retain(|a, _| counts.contains_key(a));
        }
        self.pairs.retain(|_, attributes| !attributes.is_empty());
    }

    /// The kept attributes seen with `lemma`, alphabetically.
    pub fn attributes_of(&self, lemma: &str) -> Vec<&str> {
        self.pairs
            .get(lemma)
            .map(|a| a.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_become_lemmas() {
        let v = ObjectVocabulary::from_class_names([
            "Trees",
            "tree",
            "bus",
            "Traffic  Light",
            "shorts",
        ]);
        let lemmas: Vec<&str> = v.lemmas().collect();
        assert_eq!(lemmas, ["bus", "shorts", "traffic light", "tree"]);
        assert_eq!(v.max_words(), 2);
        assert_eq!(v.lookup("trees"), Some(("tree", Number::Plural)));
        assert_eq!(v.lookup("buses"), Some(("bus", Number::Plural)));
        assert_eq!(v.lookup("bus"), Some(("bus", Number::Singular)));
        assert_eq!(
            v.lookup("traffic lights"),
            Some(("traffic light", Number::Plural))
        );
        assert_eq!(v.lookup("shorts"), Some(("shorts", Number::Plural)));
        assert_eq!(v.lookup("dog"), None);
    }

    #[test]
    fn rare_attributes_are_dropped() {
        let mut stats = AttributeStatistics::default();
        for i in 0..5 {
            stats.add("dog", "black", &format!("c{i}"));
        }
        stats.add("cat", "black", "c9");
        stats.add("cat", "fluffy", "c9");
        stats.retain_frequent(5);
        assert_eq!(stats.attributes_of("dog"), ["black"]);
        assert_eq!(stats.attributes_of("cat"), ["black"]);
        assert_eq!(stats.counts.get("fluffy"), None);
    }
}
