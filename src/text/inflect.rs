//! English inflection and lemmatization: regular rules here, irregular forms and word classes
//! from a lexicon derived from WordNet 3.0.
//!
//! The lexicon (`data/lexicon/wordnet-inflection.txt`, made by
//! `scripts/derive-inflection-lexicon.py`) holds irregular past participles and -ing forms
//! (`ride ridden`, `run run running`), irregular plurals (`child children`), and word classes:
//! intransitive verbs, adjectives, person, animal, group and mass nouns. Everything regular is
//! a rule below, so the file only lists what the rules get wrong.
//!
//! ```
//! use capflow::text::inflect::Lexicon;
//!
//! let lex = Lexicon::wordnet();
//! assert_eq!(lex.plural("child"), "children");
//! assert_eq!(lex.plural("box"), "boxes");
//! assert_eq!(lex.third_person("carry"), "carries");
//! assert_eq!(lex.present_participle("sit"), "sitting");
//! assert_eq!(lex.past_participle("throw"), "thrown");
//! assert!(lex.lemmas("children").any(|l| l == "child"));
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

static WORDNET_INFLECTION: &str = include_str!("../../data/lexicon/wordnet-inflection.txt");

/// FNV-1a: the lexicon's keys are short words, for which SipHash's setup dominates a lookup.
#[derive(Default)]
pub struct FnvHasher(u64);

impl Hasher for FnvHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = hash;
    }
}

pub type FnvMap<K, V> = HashMap<K, V, BuildHasherDefault<FnvHasher>>;

/// Word classes a lexicon entry can belong to.
pub mod class {
    pub const INTRANSITIVE: u8 = 1;
    pub const ADJECTIVE: u8 = 1 << 1;
    pub const PERSON: u8 = 1 << 2;
    pub const ANIMAL: u8 = 1 << 3;
    pub const GROUP: u8 = 1 << 4;
    pub const MASS: u8 = 1 << 5;
}

/// What the lexicon knows about one word.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    classes: u8,
    participle: Option<&'static str>,
    ing: Option<&'static str>,
    plural: Option<&'static str>,
}

/// Irregular forms and word classes, parsed once from the embedded WordNet-derived file.
pub struct Lexicon {
    entries: FnvMap<&'static str, Entry>,
    /// Irregular form → the lemmas it inflects.
    lemma_of: FnvMap<&'static str, Vec<&'static str>>,
}

impl Lexicon {
    /// The lexicon embedded in the binary, parsed on first use.
    pub fn wordnet() -> &'static Lexicon {
        static LEXICON: OnceLock<Lexicon> = OnceLock::new();
        LEXICON.get_or_init(|| Lexicon::parse(WORDNET_INFLECTION))
    }

    /// Parses the lexicon format (see `scripts/derive-inflection-lexicon.py`). Lines of an
    /// unknown section or with missing fields are skipped: the file is generated and embedded,
    /// so a malformed line can only lose that word's irregular form.
    pub fn parse(text: &'static str) -> Lexicon {
        let mut entries: FnvMap<&'static str, Entry> = FnvMap::default();
        let mut lemma_of: FnvMap<&'static str, Vec<&'static str>> = FnvMap::default();
        let mut section = "";
        for line in text.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name;
                continue;
            }
            let mut fields = line.split(' ');
            let Some(lemma) = fields.next() else { continue };
            let mut irregular = |form: &'static str| {
                if form != lemma {
                    lemma_of.entry(form).or_default().push(lemma);
                }
            };
            let entry = entries.entry(lemma).or_default();
            match section {
                "verb-forms" => {
                    let (Some(part), Some(ing)) = (fields.next(), fields.next()) else {
                        continue;
                    };
                    if part != "=" {
                        entry.participle = Some(part);
                        irregular(part);
                    }
                    if ing != "=" {
                        entry.ing = Some(ing);
                        irregular(ing);
                    }
                }
                "plurals" => {
                    if let Some(plural) = fields.next() {
                        entry.plural = Some(plural);
                        irregular(plural);
                    }
                }
                "intransitive" => entry.classes |= class::INTRANSITIVE,
                "adjectives" => entry.classes |= class::ADJECTIVE,
                "persons" => entry.classes |= class::PERSON,
                "animals" => entry.classes |= class::ANIMAL,
                "groups" => entry.classes |= class::GROUP,
                "mass" => entry.classes |= class::MASS,
                _ => {}
            }
        }
        Lexicon { entries, lemma_of }
    }

    fn entry(&self, word: &str) -> Option<&Entry> {
        self.entries.get(word)
    }

    /// Whether `word` belongs to every class in the mask `classes` (see [`class`]).
    pub fn is(&self, word: &str, classes: u8) -> bool {
        self.entry(word)
            .is_some_and(|e| e.classes & classes == classes)
    }

    /// The plural of a noun: irregular from the lexicon, else `-s`/`-es`/`-ies`/`-ves`.
    /// Only the last word of a hyphenated or spaced compound is inflected.
    pub fn plural<'a>(&self, noun: &'a str) -> Cow<'a, str> {
        let (head, last) = split_last_word(noun);
        if let Some(plural) = self.entry(last).and_then(|e| e.plural) {
            return Cow::Owned(format!("{head}{plural}"));
        }
        // WordNet leaves -man → -men to morphy's rules rather than its exception list.
        const NOT_MAN: &[&str] = &["human", "german", "shaman", "talisman", "caiman", "ottoman"];
        if let Some(stem) = noun.strip_suffix("man") {
            if !NOT_MAN.contains(&last) {
                return Cow::Owned(format!("{stem}men"));
            }
        }
        let b = last.as_bytes();
        let n = b.len();
        let suffix = if last.ends_with("ss")
            || last.ends_with("sh")
            || last.ends_with("ch")
            || last.ends_with('x')
            || last.ends_with('z')
            || last.ends_with('s')
        {
            "es"
        } else if n >= 2 && b[n - 1] == b'y' && !is_vowel(b[n - 2]) {
            return Cow::Owned(format!("{}ies", &noun[..noun.len() - 1]));
        } else {
            "s"
        };
        Cow::Owned(format!("{noun}{suffix}"))
    }

    /// Third person singular present: `rides`, `catches`, `carries`, `has`, `goes`.
    pub fn third_person<'a>(&self, verb: &'a str) -> Cow<'a, str> {
        match verb {
            "be" => return Cow::Borrowed("is"),
            "have" => return Cow::Borrowed("has"),
            _ => {}
        }
        let b = verb.as_bytes();
        let n = b.len();
        if n >= 2 && b[n - 1] == b'y' && !is_vowel(b[n - 2]) {
            return Cow::Owned(format!("{}ies", &verb[..n - 1]));
        }
        let sibilant = verb.ends_with('s')
            || verb.ends_with('x')
            || verb.ends_with('z')
            || verb.ends_with("sh")
            || verb.ends_with("ch");
        // "goes", "does", "echoes": a final o after a consonant.
        let final_o = n >= 2 && b[n - 1] == b'o' && !is_vowel(b[n - 2]);
        if sibilant || final_o {
            Cow::Owned(format!("{verb}es"))
        } else {
            Cow::Owned(format!("{verb}s"))
        }
    }

    /// The -ing form: irregular (doubling, `lying`) from the lexicon, else drop a silent `e`.
    pub fn present_participle<'a>(&self, verb: &'a str) -> Cow<'a, str> {
        if let Some(ing) = self.entry(verb).and_then(|e| e.ing) {
            return Cow::Borrowed(ing);
        }
        let b = verb.as_bytes();
        let n = b.len();
        // "make" → "making", but "see" → "seeing", "be" → "being".
        if n > 2 && b[n - 1] == b'e' && !is_vowel(b[n - 2]) {
            return Cow::Owned(format!("{}ing", &verb[..n - 1]));
        }
        Cow::Owned(format!("{verb}ing"))
    }

    /// The past participle: irregular from the lexicon, else `-ed`/`-d`/`-ied`.
    pub fn past_participle<'a>(&self, verb: &'a str) -> Cow<'a, str> {
        if let Some(part) = self.entry(verb).and_then(|e| e.participle) {
            return Cow::Borrowed(part);
        }
        let b = verb.as_bytes();
        let n = b.len();
        if n >= 1 && b[n - 1] == b'e' {
            return Cow::Owned(format!("{verb}d"));
        }
        if n >= 2 && b[n - 1] == b'y' && !is_vowel(b[n - 2]) {
            return Cow::Owned(format!("{}ied", &verb[..n - 1]));
        }
        Cow::Owned(format!("{verb}ed"))
    }

    /// Candidate lemmas of an inflected word, WordNet "morphy" style: the word itself, the
    /// lemmas the lexicon lists for it as an irregular form, and every suffix detachment of
    /// the noun, verb and adjective rules (`dogs` → `dog`, `riding` → `rid`, `ride`). Callers
    /// compare the candidates with the lemmas they look for; no candidate is checked against
    /// a dictionary.
    pub fn lemmas<'w>(&'w self, word: &'w str) -> impl Iterator<Item = Cow<'w, str>> + 'w {
        const DETACH: [(&str, &str); 18] = [
            ("s", ""),
            ("ses", "s"),
            ("xes", "x"),
            ("zes", "z"),
            ("ches", "ch"),
            ("shes", "sh"),
            ("men", "man"),
            ("ies", "y"),
            ("es", "e"),
            ("es", ""),
            ("ed", "e"),
            ("ed", ""),
            ("ing", "e"),
            ("ing", ""),
            ("er", ""),
            ("est", ""),
            // Adverbs from adjectives, which morphy leaves to WordNet's pertainym pointers.
            ("ily", "y"),
            ("ly", ""),
        ];
        let irregular = self
            .lemma_of
            .get(word)
            .into_iter()
            .flatten()
            .map(|l| Cow::Borrowed(*l));
        let detached = DETACH.iter().filter_map(move |(suffix, ending)| {
            let stem = word.strip_suffix(suffix)?;
            (!stem.is_empty()).then(|| Cow::Owned(format!("{stem}{ending}")))
        });
        std::iter::once(Cow::Borrowed(word))
            .chain(irregular)
            .chain(detached)
    }
}

fn is_vowel(b: u8) -> bool {
    matches!(b, b'a' | b'e' | b'i' | b'o' | b'u')
}

/// `("ice ", "cream")` for `ice cream`, `("double-", "decker")` for `double-decker`.
fn split_last_word(word: &str) -> (&str, &str) {
    match word.rfind([' ', '-']) {
        Some(i) => (&word[..=i], &word[i + 1..]),
        None => ("", word),
    }
}

/// "a" or "an" before `word`, by its first sound as spelled: vowels take "an", except a
/// "you" sound (`uniform`, `european`, `one`); a silent h (`hour`, `honest`) takes "an".
pub fn indefinite_article(word: &str) -> &'static str {
    let lower = word.as_bytes();
    let Some(&first) = lower.first() else {
        return "a";
    };
    let starts = |p: &str| word.starts_with(p);
    if starts("hour") || starts("honest") || starts("honor") || starts("heir") {
        return "an";
    }
    if !is_vowel(first.to_ascii_lowercase()) {
        return "a";
    }
    let you_sound = [
        "uni", "use", "usu", "uti", "ute", "ure", "eu", "one", "once",
    ]
    .iter()
    .any(|p| starts(p));
    if you_sound {
        "a"
    } else {
        "an"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_and_irregular_plurals() {
        let lex = Lexicon::wordnet();
        for (noun, plural) in [
            ("dog", "dogs"),
            ("bus", "buses"),
            ("dress", "dresses"),
            ("box", "boxes"),
            ("bench", "benches"),
            ("city", "cities"),
            ("boy", "boys"),
            ("child", "children"),
            ("man", "men"),
            ("woman", "women"),
            ("fisherman", "fishermen"),
            ("human", "humans"),
            ("person", "people"),
            ("knife", "knives"),
            ("foot", "feet"),
            ("double-decker", "double-deckers"),
        ] {
            assert_eq!(lex.plural(noun), plural, "{noun}");
        }
    }

    #[test]
    fn verb_forms() {
        let lex = Lexicon::wordnet();
        for (verb, third, ing, part) in [
            ("ride", "rides", "riding", "ridden"),
            ("catch", "catches", "catching", "caught"),
            ("carry", "carries", "carrying", "carried"),
            ("sit", "sits", "sitting", "sat"),
            ("run", "runs", "running", "run"),
            ("lie", "lies", "lying", "lain"),
            ("stop", "stops", "stopping", "stopped"),
            ("cut", "cuts", "cutting", "cut"),
            ("see", "sees", "seeing", "seen"),
            ("park", "parks", "parking", "parked"),
            ("go", "goes", "going", "gone"),
            ("wear", "wears", "wearing", "worn"),
            ("have", "has", "having", "had"),
            ("play", "plays", "playing", "played"),
        ] {
            assert_eq!(lex.third_person(verb), third, "{verb}");
            assert_eq!(lex.present_participle(verb), ing, "{verb}");
            assert_eq!(lex.past_participle(verb), part, "{verb}");
        }
    }

    #[test]
    fn word_classes_from_wordnet() {
        let lex = Lexicon::wordnet();
        assert!(lex.is("man", class::PERSON));
        assert!(lex.is("person", class::PERSON));
        assert!(lex.is("dog", class::ANIMAL));
        assert!(lex.is("crowd", class::GROUP));
        assert!(lex.is("water", class::MASS));
        assert!(lex.is("red", class::ADJECTIVE));
        assert!(lex.is("wait", class::INTRANSITIVE));
        assert!(!lex.is("throw", class::INTRANSITIVE));
        assert!(!lex.is("dog", class::PERSON));
    }

    #[test]
    fn articles() {
        for (word, article) in [
            ("apple", "an"),
            ("old", "an"),
            ("dog", "a"),
            ("uniform", "a"),
            ("umbrella", "an"),
            ("hour", "an"),
            ("one", "a"),
            ("outdoor", "an"),
            ("european", "a"),
        ] {
            assert_eq!(indefinite_article(word), article, "{word}");
        }
    }

    #[test]
    fn lemmatizes_inflected_forms() {
        let lex = Lexicon::wordnet();
        for (word, lemma) in [
            ("dogs", "dog"),
            ("children", "child"),
            ("riding", "ride"),
            ("ridden", "ride"),
            ("catches", "catch"),
            ("carries", "carry"),
            ("parked", "park"),
            ("sitting", "sit"),
            ("people", "person"),
            ("worn", "wear"),
        ] {
            assert!(lex.lemmas(word).any(|l| l == lemma), "{word} → {lemma}");
        }
    }
}
