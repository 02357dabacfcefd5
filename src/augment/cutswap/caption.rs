//! Object mentions and their attributes in a caption, without a tagger or parser.
//!
//! The thesis finds objects as tokens that are Visual Genome classes and attributes as tokens a
//! dependency parser attaches to the object and a POS tagger calls adjectives. capflow has
//! neither model, so it reads the same structure off the surface of English noun phrases:
//! - an *object* is a token (or multi-word class name) whose lemma is in the object vocabulary
//!   and that heads its noun phrase: the last word of a grounded phrase when the caption has
//!   groundings (Flickr30k Entities phrases are noun phrases), otherwise a word not followed by
//!   another noun (`bus` in `a bus stop` is a modifier, in `the bus arrives` an object);
//! - its *attributes* are the run of adjectives directly before it (adjectival modifiers
//!   precede the noun in English), joined by `and` or commas (`a black and white dog`), where an
//!   adjective is a word of the attribute lexicon and not a closed-class word.

use std::ops::Range;

use super::number::Number;
use super::vocabulary::ObjectVocabulary;
use crate::schema::GroundingRow;

/// One token of a caption with its place in the original text.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// Lower case.
    pub norm: String,
    /// Byte range in the caption text.
    pub span: Range<usize>,
    /// Index of the whitespace-separated word it belongs to (grounding spans count those).
    pub word: usize,
}

impl Token {
    pub fn is_word(&self) -> bool {
        is_word(&self.norm)
    }
}

/// Whether a token's lower-case text is a word (has a letter or digit), not punctuation.
pub fn is_word(norm: &str) -> bool {
    norm.chars().any(char::is_alphanumeric)
}

/// Splits a caption as [`crate::text::tokenize::tokenize`] does, keeping byte spans and the
/// whitespace word each token came from.
pub fn tokens(caption: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut word = 0usize;
    let mut current: Option<(usize, String)> = None;
    let chars: Vec<(usize, char)> = caption.char_indices().collect();
    let mut in_word = false;
    let flush =
        |current: &mut Option<(usize, String)>, end: usize, word: usize, out: &mut Vec<Token>| {
            if let Some((start, norm)) = current.take() {
                out.push(Token {
                    norm,
                    span: start..end,
                    word,
                });
            }
        };
    for (i, &(at, ch)) in chars.iter().enumerate() {
        if ch.is_whitespace() {
            flush(&mut current, at, word, &mut out);
            if in_word {
                word += 1;
                in_word = false;
            }
            continue;
        }
        in_word = true;
        if ch.is_alphanumeric() {
            current
                .get_or_insert_with(|| (at, String::new()))
                .1
                .extend(ch.to_lowercase());
            continue;
        }
        let joins = matches!(ch, '\'' | '-' | '\u{2019}')
            && current.is_some()
            && chars
                .get(i + 1)
                .is_some_and(|(_, next)| next.is_alphanumeric());
        if joins {
            if let Some((_, norm)) = current.as_mut() {
                norm.push(if ch == '\u{2019}' { '\'' } else { ch });
            }
            continue;
        }
        flush(&mut current, at, word, &mut out);
        out.push(Token {
            norm: ch.to_string(),
            span: at..at + ch.len_utf8(),
            word,
        });
    }
    flush(&mut current, caption.len(), word, &mut out);
    out
}

/// Closed-class words: never attributes, and they end a noun phrase.
const FUNCTION_WORDS: &[&str] = &[
    "a", "an", "the", "this", "that", "these", "those", "his", "her", "its", "their", "our", "my",
    "your", "some", "any", "each", "every", "all", "both", "either", "neither", "no", "another",
    "other", "such", "same", "many", "much", "several", "few", "more", "most", "less", "least",
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "very",
    "really", "quite", "too", "so", "rather", "just", "only", "also", "not", "almost", "nearly",
    "and", "or", "but", "nor", "of", "in", "on", "at", "by", "for", "with", "from", "to", "into",
    "onto", "over", "under", "above", "below", "near", "next", "beside", "behind", "between",
    "through", "across", "along", "around", "against", "toward", "towards", "inside", "outside",
    "up", "down", "off", "out", "while", "as", "is", "are", "was", "were", "be", "being", "been",
    "has", "have", "had", "does", "do", "did", "who", "which", "what", "where", "when", "there",
    "here", "it", "he", "she", "they", "them", "him", "we", "you", "i", "then", "than", "after",
    "before", "during", "without", "about", "like", "past", "nearby", "together", "back", "away",
    "forth",
];

/// Words after which an attribute may be inserted before a bare noun (`a dog` → `a brown
/// dog`): determiners, numbers, possessives and prepositions end the noun phrase's left edge.
fn opens_noun_phrase(token: Option<&Token>) -> bool {
    match token {
        None => true,
        Some(t) => !t.is_word() || FUNCTION_WORDS.contains(&t.norm.as_str()),
    }
}

pub fn is_function_word(word: &str) -> bool {
    FUNCTION_WORDS.contains(&word)
}

/// An object mentioned in a caption.
#[derive(Clone, Debug, PartialEq)]
pub struct Mention {
    pub lemma: String,
    pub number: Number,
    /// Token range of the object words (more than one for `traffic light`).
    pub object: Range<usize>,
    /// Token range of its attributes, ending where `object` starts (empty when there are none).
    pub attributes: Range<usize>,
    /// The attribute words in order, without the `and` and commas between them.
    pub attribute_words: Vec<String>,
    /// Index (in the caption's groundings) of the grounded phrase the object heads.
    pub grounding: Option<usize>,
}

impl Mention {
    /// Whether an attribute may be written in front of the object when it has none.
    pub fn accepts_inserted_attribute(&self, tokens: &[Token]) -> bool {
        self.attributes.is_empty()
            && opens_noun_phrase(self.object.start.checked_sub(1).map(|i| &tokens[i]))
    }
}

/// The object mentions of a caption, left to right.
///
/// `groundings` are the caption's own grounding rows; when there are any, only heads of
/// grounded phrases count as objects.
pub fn mentions(
    tokens: &[Token],
    groundings: &[&GroundingRow],
    vocabulary: &ObjectVocabulary,
    is_attribute: impl Fn(&str) -> bool,
) -> Vec<Mention> {
    let words: Vec<&str> = tokens.iter().map(|t| t.norm.as_str()).collect();
    let heads = (!groundings.is_empty()).then(|| phrase_heads(tokens, groundings));
    mentions_of_words(&words, heads.as_deref(), vocabulary, is_attribute)
}

/// The object mentions of a caption given as its tokens' lower-case texts ([`Token::norm`]),
/// left to right; what [`mentions`] finds, without the tokens' places in the text.
///
/// `heads` is `None` for a caption without grounding rows, otherwise the token index of each
/// grounded phrase's head ([`phrase_heads`]); then only those tokens count as objects, and
/// [`Mention::grounding`] is the index in `heads` of the first phrase the object heads.
pub fn mentions_of_words(
    words: &[&str],
    heads: Option<&[Option<usize>]>,
    vocabulary: &ObjectVocabulary,
    is_attribute: impl Fn(&str) -> bool,
) -> Vec<Mention> {
    let mut out: Vec<Mention> = Vec::new();
    for end in 0..words.len() {
        if !is_word(words[end]) {
            continue;
        }
        let grounding = match heads {
            None => None,
            Some(heads) => match heads.iter().position(|&h| h == Some(end)) {
                Some(g) => Some(g),
                None => continue,
            },
        };
        let Some((len, lemma, number)) = longest_object_ending_at(words, end, vocabulary) else {
            continue;
        };
        let start = end + 1 - len;
        if out.last().is_some_and(|m| m.object.end > start) {
            continue;
        }
        if grounding.is_none() && !ends_noun_phrase(words, end, vocabulary) {
            continue;
        }
        let attributes = attribute_run(words, start, &is_attribute);
        let attribute_words = words[attributes.clone()]
            .iter()
            .filter(|w| **w != "and" && is_word(w))
            .map(|w| w.to_string())
            .collect();
        out.push(Mention {
            lemma,
            number,
            object: start..end + 1,
            attributes,
            attribute_words,
            grounding,
        });
    }
    out
}

/// For each grounding, the token index of its phrase's last word (the head of a Flickr30k
/// Entities noun phrase), when the span lies inside the caption.
pub fn phrase_heads(tokens: &[Token], groundings: &[&GroundingRow]) -> Vec<Option<usize>> {
    groundings
        .iter()
        .map(|g| {
            let (start, end) = (g.token_start.max(0) as usize, g.token_end.max(0) as usize);
            tokens
                .iter()
                .rposition(|t| t.is_word() && t.word >= start && t.word < end)
        })
        .collect()
}

/// The longest vocabulary entry (words, lemma, number) whose last word is token `end`.
fn longest_object_ending_at(
    words: &[&str],
    end: usize,
    vocabulary: &ObjectVocabulary,
) -> Option<(usize, String, Number)> {
    for len in (1..=vocabulary.max_words().min(end + 1)).rev() {
        let phrase = &words[end + 1 - len..=end];
        if phrase.iter().any(|w| !is_word(w)) {
            continue;
        }
        if let Some((lemma, number)) = vocabulary.lookup(&phrase.join(" ")) {
            return Some((len, lemma.to_string(), number));
        }
    }
    None
}

/// Whether the word after `end` lets `end` head a noun phrase: the caption ends, punctuation or
/// a closed-class word follows, or a verb-like form (`-s`, `-ing`, `-ed`) that is not itself an
/// object.
fn ends_noun_phrase(words: &[&str], end: usize, vocabulary: &ObjectVocabulary) -> bool {
    let Some(&next) = words.get(end + 1) else {
        return true;
    };
    if !is_word(next) || is_function_word(next) {
        return true;
    }
    if vocabulary.lookup(next).is_some() {
        return false;
    }
    ["s", "ing", "ed"].iter().any(|end| next.ends_with(end))
}

/// The attribute tokens directly before token `object_start`.
fn attribute_run(
    words: &[&str],
    object_start: usize,
    is_attribute: &impl Fn(&str) -> bool,
) -> Range<usize> {
    let mut start = object_start;
    let mut i = object_start;
    while i > 0 {
        let t = words[i - 1];
        if is_attribute(t) && !is_function_word(t) {
            i -= 1;
            start = i;
            continue;
        }
        // `black and white`, `big, fluffy`: a joiner counts only with an adjective before it.
        let joiner = t == "and" || t == ",";
        let adjective_before =
            i >= 2 && is_attribute(words[i - 2]) && !is_function_word(words[i - 2]);
        if joiner && start < object_start && adjective_before {
            i -= 1;
            continue;
        }
        break;
    }
    start..object_start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keep_spans_and_words() {
        let text = "A man's T-shirt, red.";
        let toks = tokens(text);
        let norms: Vec<&str> = toks.iter().map(|t| t.norm.as_str()).collect();
        assert_eq!(norms, ["a", "man's", "t-shirt", ",", "red", "."]);
        assert_eq!(&text[toks[2].span.clone()], "T-shirt");
        let words: Vec<usize> = toks.iter().map(|t| t.word).collect();
        assert_eq!(words, [0, 1, 2, 2, 3, 3]);
        // The same tokens as the crate tokenizer.
        assert_eq!(norms, crate::text::tokenize::tokenize(text));
    }

    fn vocabulary() -> ObjectVocabulary {
        ObjectVocabulary::from_class_names(["dog", "bus", "traffic light", "cars", "man"])
    }

    fn adjective(word: &str) -> bool {
        ["black", "white", "red", "big", "small", "parked"].contains(&word)
    }

    fn summary(text: &str) -> Vec<(String, String, Vec<String>)> {
        let toks = tokens(text);
        mentions(&toks, &[], &vocabulary(), adjective)
            .into_iter()
            .map(|m| {
                let words: Vec<&str> = toks[m.object.clone()]
                    .iter()
                    .map(|t| t.norm.as_str())
                    .collect();
                (m.lemma, words.join(" "), m.attribute_words)
            })
            .collect()
    }

    #[test]
    fn objects_heads_and_attribute_runs() {
        let found = summary("A big black and white dog waits at a bus stop near parked cars .");
        assert_eq!(
            found,
            [
                (
                    "dog".to_string(),
                    "dog".to_string(),
                    vec!["big".to_string(), "black".to_string(), "white".to_string()]
                ),
                (
                    "car".to_string(),
                    "cars".to_string(),
                    vec!["parked".to_string()]
                ),
            ]
        );
        let found = summary("The red traffic light stops the bus .");
        assert_eq!(found[0].1, "traffic light");
        assert_eq!(found[0].2, ["red"]);
        assert_eq!(found[1].0, "bus");
        // A leading joiner is not an attribute: "and" belongs to the coordination.
        let found = summary("A man and dog .");
        assert!(found.iter().all(|(_, _, attrs)| attrs.is_empty()));
    }
}
