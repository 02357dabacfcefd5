//! A local word ↔ id table for the mergeable corpus statistics ([`super::lm::NgramCounts`],
//! [`super::ppmi::PpmiStats`]).
//!
//! Each statistics object numbers the words it has seen in the order it first saw them; the ids
//! mean nothing outside the object. Merging two objects maps the other's ids into this one's
//! ([`Interner::absorb`]), and fitting maps them to the model's own ids, which depend on the
//! words only, so the numbering never reaches a model.

use rustc_hash::FxHashMap as HashMap;

#[derive(Debug, Clone, Default)]
pub(crate) struct Interner {
    words: Vec<Box<str>>,
    ids: HashMap<Box<str>, u32>,
}

impl Interner {
    /// The id of `word`, given the next free id when it is new.
    pub(crate) fn intern(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.ids.get(word) {
            return id;
        }
        let id = u32::try_from(self.words.len()).expect("more than 2^32 distinct words");
        let word: Box<str> = word.into();
        self.words.push(word.clone());
        self.ids.insert(word, id);
        id
    }

    pub(crate) fn word(&self, id: u32) -> &str {
        &self.words[id as usize]
    }

    pub(crate) fn len(&self) -> usize {
        self.words.len()
    }

    pub(crate) fn words(&self) -> impl ExactSizeIterator<Item = &str> {
        self.words.iter().map(|w| &**w)
    }

    /// Interns every word of `other`; entry `i` of the result is the id here of `other`'s id `i`.
    pub(crate) fn absorb(&mut self, other: &Interner) -> Vec<u32> {
        other.words().map(|w| self.intern(w)).collect()
    }

    /// The table of a word list (ids by position), or an error naming a repeated word.
    pub(crate) fn from_words(words: Vec<String>) -> Result<Interner, String> {
        let mut interner = Interner::default();
        for word in words {
            let expected = interner.words.len() as u32;
            if interner.intern(&word) != expected {
                return Err(format!("word {word:?} is listed twice"));
            }
        }
        Ok(interner)
    }

    /// The words by id, for serialization.
    pub(crate) fn to_words(&self) -> Vec<String> {
        self.words().map(String::from).collect()
    }

    /// Heap bytes, roughly: each word is held twice (list and map), plus the tables.
    pub(crate) fn approx_bytes(&self) -> usize {
        let text: usize = self.words.iter().map(|w| w.len().max(8)).sum();
        2 * text
            + self.words.capacity() * std::mem::size_of::<Box<str>>()
            + map_bytes(self.ids.capacity(), std::mem::size_of::<(Box<str>, u32)>())
    }
}

/// Heap bytes of a hash table of `capacity` entries of `entry` bytes each (a control byte per
/// bucket and buckets up to 8/7 of the capacity).
pub(crate) fn map_bytes(capacity: usize, entry: usize) -> usize {
    capacity * 8 / 7 * (entry + 1)
}
