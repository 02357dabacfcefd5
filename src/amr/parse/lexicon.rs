//! The parser's word knowledge: verbs with their noun/verb sense counts, agentive nouns and
//! clothing from WordNet (`data/lexicon/wordnet-parse.txt`), PropBank frames with the role of
//! their subject from public AMR releases (`data/lexicon/amr-frames.txt`), and the irregular
//! forms of the shared inflection lexicon. Both files are made by
//! `scripts/derive-parse-lexicon.py` and embedded in the binary.

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::text::inflect::{class, FnvMap, Lexicon};

static WORDNET_PARSE: &str = include_str!("../../../data/lexicon/wordnet-parse.txt");
static AMR_FRAMES: &str = include_str!("../../../data/lexicon/amr-frames.txt");

/// The role a frame gives its grammatical subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    Arg0,
    Arg1,
}

impl Subject {
    pub fn role(self) -> &'static str {
        match self {
            Subject::Arg0 => ":ARG0",
            Subject::Arg1 => ":ARG1",
        }
    }
}

/// How a verb form was inflected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbForm {
    /// `ride`, `run`: the plain form (also the present of a plural subject).
    Base,
    /// `rides`
    Third,
    /// `riding`
    Ing,
    /// `rode`, `ridden`, `parked`: past tense or past participle.
    Past,
}

/// A frame: its concept and the role of its subject.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    pub concept: &'static str,
    pub subject: Subject,
    /// How often the releases used the frame, and the bare word as a concept.
    pub count: u32,
    pub bare: u32,
}

pub struct ParseLexicon {
    /// Verb lemma → (noun senses tagged, verb senses tagged), each plus one for being listed.
    verbs: FnvMap<&'static str, (u32, u32)>,
    agentive: FnvMap<&'static str, &'static str>,
    clothing: FnvMap<&'static str, ()>,
    frames: FnvMap<&'static str, Frame>,
    pub inflect: &'static Lexicon,
}

impl ParseLexicon {
    /// The embedded lexicons, parsed on first use.
    pub fn embedded() -> &'static ParseLexicon {
        static LEXICON: OnceLock<ParseLexicon> = OnceLock::new();
        LEXICON.get_or_init(|| ParseLexicon::parse(WORDNET_PARSE, AMR_FRAMES))
    }

    /// Parses the two files (format in `scripts/derive-parse-lexicon.py`); a line with missing
    /// fields is skipped, as the files are generated and embedded.
    fn parse(wordnet: &'static str, frames_text: &'static str) -> ParseLexicon {
        let mut lexicon = ParseLexicon {
            verbs: FnvMap::default(),
            agentive: FnvMap::default(),
            clothing: FnvMap::default(),
            frames: FnvMap::default(),
            inflect: Lexicon::wordnet(),
        };
        let mut section = "";
        for line in wordnet.lines().chain(frames_text.lines()) {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name;
                continue;
            }
            let fields: Vec<&'static str> = line.split(' ').collect();
            match (section, fields.as_slice()) {
                ("verbs", [lemma, noun, verb]) => {
                    let count = |s: &str| s.parse::<u32>().unwrap_or(0);
                    lexicon.verbs.insert(lemma, (count(noun), count(verb)));
                }
                ("agentive", [noun, verb]) => {
                    lexicon.agentive.insert(noun, verb);
                }
                ("clothing", [noun]) => {
                    lexicon.clothing.insert(noun, ());
                }
                ("frames", [lemma, concept, count, subject, bare]) => {
                    let subject = if *subject == "ARG1" {
                        Subject::Arg1
                    } else {
                        Subject::Arg0
                    };
                    let (count, bare) = (count.parse().unwrap_or(0), bare.parse().unwrap_or(0));
                    let frame = Frame {
                        concept,
                        subject,
                        count,
                        bare,
                    };
                    lexicon.frames.insert(lemma, frame);
                }
                _ => {}
            }
        }
        lexicon
    }

    /// The verb lemma and form of `word`, when it can be a verb: a candidate lemma counts only
    /// when inflecting it gives the word back (`men` is no form of `man`, `rider` none of `rid`).
    pub fn verb(&self, word: &str) -> Option<(String, VerbForm)> {
        let irregular = match word {
            "has" | "does" | "goes" => Some(VerbForm::Third),
            "had" | "did" | "went" | "was" | "were" => Some(VerbForm::Past),
            _ => None,
        };
        if let Some(form) = irregular {
            let lemma = match word {
                "has" | "had" => "have",
                "does" | "did" => "do",
                "was" | "were" => "be",
                _ => "go",
            };
            return Some((lemma.to_string(), form));
        }
        if self.verbs.contains_key(word) {
            return Some((word.to_string(), VerbForm::Base));
        }
        let inflect = self.inflect;
        for lemma in inflect.lemmas(word).skip(1) {
            if !self.verbs.contains_key(lemma.as_ref()) {
                continue;
            }
            let form = if inflect.present_participle(&lemma) == word {
                VerbForm::Ing
            } else if inflect.past_participle(&lemma) == word || regular_past(&lemma) == word {
                VerbForm::Past
            } else if inflect.third_person(&lemma) == word {
                VerbForm::Third
            } else {
                continue;
            };
            return Some((lemma.into_owned(), form));
        }
        None
    }

    /// How strongly a verb lemma is a verb rather than a noun: verb senses over noun senses.
    pub fn verb_weight(&self, lemma: &str) -> (u32, u32) {
        self.verbs.get(lemma).copied().unwrap_or((0, 0))
    }

    pub fn is_adjective(&self, word: &str) -> bool {
        self.inflect.is(word, class::ADJECTIVE)
    }

    pub fn is_person(&self, lemma: &str) -> bool {
        self.inflect.is(lemma, class::PERSON) || self.agentive.contains_key(lemma)
    }

    pub fn is_animate(&self, lemma: &str) -> bool {
        self.is_person(lemma)
            || self.inflect.is(lemma, class::ANIMAL)
            || self.inflect.is(lemma, class::GROUP)
    }

    pub fn is_clothing(&self, lemma: &str) -> bool {
        self.clothing.contains_key(lemma)
    }

    /// The verb an agentive noun is made from: `teacher` → `teach`.
    pub fn agentive(&self, lemma: &str) -> Option<&'static str> {
        self.agentive.get(lemma).copied()
    }

    /// The role the subject of a verb takes: from the AMR releases, else `:ARG0`.
    pub fn subject(&self, lemma: &str) -> Subject {
        self.frames.get(lemma).map_or(Subject::Arg0, |f| f.subject)
    }

    /// The frame AMR writes for this adjective (`happy-01`, `red-02`), when the releases
    /// use it more often than the bare word (`fresh`, `hot` stay words).
    pub fn adjective_frame(&self, lemma: &str) -> Option<&'static str> {
        self.frames
            .get(lemma)
            .filter(|f| f.count > f.bare)
            .map(|f| f.concept)
    }

    /// The concept of a verb lemma: its frame, else `lemma-01`.
    pub fn frame_concept(&self, lemma: &str) -> Cow<'static, str> {
        match self.frames.get(lemma) {
            Some(f) => Cow::Borrowed(f.concept),
            None => Cow::Owned(format!("{lemma}-01")),
        }
    }

    /// The singular of a noun: irregular plurals from the lexicon, else the regular rules;
    /// with whether the word was plural.
    pub fn noun_lemma<'w>(&self, word: &'w str) -> (Cow<'w, str>, bool) {
        if PLURALIA.contains(&word) {
            return (Cow::Borrowed(word), true);
        }
        if word.ends_with("ss") || word.ends_with("us") || word.ends_with("is") {
            return (Cow::Borrowed(word), false);
        }
        let candidates: Vec<Cow<'w, str>> = self
            .inflect
            .lemmas(word)
            .skip(1)
            .filter(|c| c.len() >= 3 && self.inflect.plural(c) == word)
            .collect();
        // An irregular plural first (`knives` → knife, not `knive`), then the regular rule
        // that fits the ending (`sandwiches` → sandwich, `horses` → horse).
        let regular = |c: &str| {
            word.strip_prefix(c)
                .is_some_and(|rest| rest == "s" || rest == "es")
                || c.strip_suffix('y')
                    .is_some_and(|stem| word.strip_prefix(stem) == Some("ies"))
        };
        if let Some(c) = candidates.iter().find(|c| !regular(c)) {
            return (c.clone(), true);
        }
        let sibilant = ["ches", "shes", "xes", "zes", "sses"]
            .iter()
            .any(|e| word.ends_with(e));
        let preferred = if word.ends_with("ies") {
            candidates.iter().find(|c| c.ends_with('y'))
        } else if sibilant {
            candidates.iter().find(|c| word.len() == c.len() + 2)
        } else {
            candidates.iter().find(|c| word.len() == c.len() + 1)
        };
        match preferred.or(candidates.first()) {
            Some(c) => (c.clone(), true),
            None => (Cow::Borrowed(word), false),
        }
    }
}

/// Nouns that are plural in form and AMR keeps as they are.
const PLURALIA: &[&str] = &[
    "glasses",
    "shorts",
    "pants",
    "jeans",
    "trousers",
    "clothes",
    "sunglasses",
    "goggles",
    "scissors",
    "stairs",
    "news",
    "headphones",
    "overalls",
];

/// The regular past of a verb whose participle is irregular (`dived` beside `dove`).
fn regular_past(lemma: &str) -> String {
    match lemma.strip_suffix('e') {
        Some(_) => format!("{lemma}d"),
        None => format!("{lemma}ed"),
    }
}
