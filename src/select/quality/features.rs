//! What the built-in quality scorer reads off a caption: statistics of its per-token
//! probabilities under a word language model and under a word-class language model, each
//! read left to right and right to left, and a few well-formedness checks, as one
//! fixed-length vector ([`Features`]).
//!
//! The word classes keep every function word as itself and map each content word to its
//! shape (an `-ing` form, an `-ed` form, an `-s` form, an adjective, a number, another word),
//! using the WordNet-derived lexicons of `data/lexicon` for irregular forms and adjectives.
//! A model over those classes learns the caption grammar's skeleton ("a ADJ WORD -ING on the
//! WORD ."), which generalises from a few hundred captions where word n-grams are still
//! sparse.

use crate::text::inflect::{class, Lexicon};
use crate::text::lm::NgramLm;
use crate::text::tokenize::is_punctuation;

/// The number of features.
pub const FEATURES: usize = 24;

/// The features' names, in vector order (for the calibration's documentation and debugging).
pub const FEATURE_NAMES: [&str; FEATURES] = [
    "word mean gain",
    "word negative gains",
    "word negative-gain share",
    "word log-prob spread",
    "word start gain",
    "word end log-prob",
    "class mean gain",
    "class min gain",
    "class negative gains",
    "class start log-prob",
    "class end log-prob",
    "joint negative mass",
    "joint start gain",
    "adjacent repeats",
    "dangling end",
    "unbalanced",
    "agreement errors",
    "repeated nouns",
    "joint min gain",
    "verb-form subject",
    "two-way negative mass",
    "two-way min gain",
    "two-way second-lowest gain",
    "two-way mean gain",
];

/// The direction each feature points in: +1 when a higher value is evidence of a real caption
/// (a more likely token), -1 when it is evidence of a broken one (a failed check, more
/// surprising tokens). The classifier gives no feature a weight against its direction.
pub const FEATURE_SIGNS: [f64; FEATURES] = [
    1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0,
    -1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0,
];

/// A caption's features, in [`FEATURE_NAMES`] order.
pub type Features = [f64; FEATURES];

/// Words kept as themselves by [`word_class`]: determiners, pronouns, prepositions,
/// conjunctions, auxiliaries and other closed-class words of caption English.
const FUNCTION_WORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "this",
    "that",
    "these",
    "those",
    "some",
    "several",
    "many",
    "each",
    "every",
    "another",
    "other",
    "both",
    "all",
    "no",
    "any",
    "few",
    "one",
    "its",
    "his",
    "her",
    "their",
    "our",
    "my",
    "your",
    "he",
    "she",
    "it",
    "they",
    "him",
    "them",
    "we",
    "you",
    "i",
    "someone",
    "something",
    "who",
    "which",
    "whose",
    "there",
    "here",
    "in",
    "on",
    "at",
    "with",
    "of",
    "for",
    "from",
    "by",
    "to",
    "into",
    "onto",
    "near",
    "under",
    "over",
    "behind",
    "beside",
    "next",
    "through",
    "across",
    "along",
    "around",
    "down",
    "up",
    "out",
    "off",
    "inside",
    "outside",
    "against",
    "between",
    "above",
    "below",
    "during",
    "toward",
    "towards",
    "among",
    "beneath",
    "upon",
    "past",
    "without",
    "within",
    "like",
    "about",
    "after",
    "before",
    "atop",
    "underneath",
    "and",
    "or",
    "but",
    "as",
    "while",
    "than",
    "so",
    "because",
    "if",
    "when",
    "where",
    "is",
    "are",
    "was",
    "were",
    "be",
    "being",
    "been",
    "has",
    "have",
    "had",
    "does",
    "do",
    "did",
    "can",
    "will",
    "not",
    "very",
    "too",
];

/// Determiners that want a singular noun.
const SINGULAR_DETERMINERS: &[&str] = &["a", "an", "one", "each", "every", "another", "this"];
/// Determiners that want a plural noun (numbers above one are [`NUMBER_CLASS`]).
const PLURAL_DETERMINERS: &[&str] = &["several", "many", "these", "those", "both", "few"];

/// Words that cannot end an English caption: a caption ending in one was cut off.
pub const DANGLING_FUNCTION_WORDS: &[&str] = &[
    "a", "an", "the", "of", "and", "or", "to", "in", "on", "at", "with", "for", "from", "by", "as",
    "into", "onto", "near", "under", "over", "while", "are", "its", "their", "some", "this",
    "that", "these", "those", "but", "next", "is",
];

const NUMBER_WORDS: &[&str] = &[
    "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "twenty", "dozen", "hundred",
];

/// The class of a number word or numeral above one.
pub const NUMBER_CLASS: &str = "#num";
const ING_CLASS: &str = "#ing";
const ED_CLASS: &str = "#ed";
const S_CLASS: &str = "#s";
const ADJECTIVE_CLASS: &str = "#adj";
const WORD_CLASS: &str = "#word";

/// The word class of a lower-case token: punctuation and function words are their own class;
/// a content word is classed by its form.
pub fn word_class(token: &str) -> &str {
    if is_punctuation(token) || FUNCTION_WORDS.contains(&token) {
        return token;
    }
    if NUMBER_WORDS.contains(&token) || token.chars().all(|c| c.is_ascii_digit()) {
        return NUMBER_CLASS;
    }
    let lexicon = Lexicon::wordnet();
    if token.len() > 4 && token.ends_with("ing") {
        return ING_CLASS;
    }
    if is_s_form(lexicon, token) {
        return S_CLASS;
    }
    if (token.len() > 3 && token.ends_with("ed")) || is_irregular_participle(lexicon, token) {
        return ED_CLASS;
    }
    if lexicon.is(token, class::ADJECTIVE) {
        return ADJECTIVE_CLASS;
    }
    WORD_CLASS
}

/// A plural noun or a third-person verb: the `-s` form of one of its candidate lemmas.
fn is_s_form(lexicon: &Lexicon, token: &str) -> bool {
    lexicon
        .lemmas(token)
        .skip(1)
        .any(|lemma| lemma != token && lexicon.plural(&lemma) == token)
}

fn is_irregular_participle(lexicon: &Lexicon, token: &str) -> bool {
    lexicon
        .lemmas(token)
        .skip(1)
        .any(|lemma| lemma != token && lexicon.past_participle(&lemma) == token)
}

/// The word classes of a caption's tokens.
pub fn class_sequence(tokens: &[String]) -> Vec<String> {
    tokens.iter().map(|t| word_class(t).to_string()).collect()
}

/// The number of tokens that are words, not punctuation.
pub fn word_count(tokens: &[String]) -> usize {
    tokens.iter().filter(|t| !is_punctuation(t)).count()
}

/// The models and corpus statistics the features are read with.
pub struct FeatureModels<'a> {
    /// The word language model.
    pub words: &'a NgramLm,
    /// The word-class language model (over [`class_sequence`]s).
    pub classes: &'a NgramLm,
    /// The word language model of the captions read right to left.
    pub backward_words: &'a NgramLm,
    /// The word-class language model of the captions read right to left.
    pub backward_classes: &'a NgramLm,
}

/// Each token's joint gain read both ways: its forward joint gain (`forward`, word gain +
/// class gain from the left context, `</s>` last) plus its joint gain under the right-to-left
/// models from the right context; the two sentence boundaries (`</s>` forward, `<s>`
/// backward) are the last two values. A word that fits neither of its neighbours shows
/// twice, where one of the two directions alone often forgives it (an unknown word makes the
/// next token's context unknown too, and the model backs off).
fn two_way_gains(
    models: &FeatureModels,
    tokens: &[String],
    classes: &[String],
    forward: &[f64],
) -> Vec<f64> {
    let reversed: Vec<String> = tokens.iter().rev().cloned().collect();
    let reversed_classes: Vec<String> = classes.iter().rev().cloned().collect();
    let (_, word) = gains(models.backward_words, &reversed);
    let (_, class) = gains(models.backward_classes, &reversed_classes);
    let n = tokens.len();
    let mut two_way: Vec<f64> = (0..n)
        .map(|i| forward[i] + word[n - 1 - i] + class[n - 1 - i])
        .collect();
    two_way.push(forward[n]);
    two_way.push(word[n] + class[n]);
    two_way
}

/// Natural-log unigram probability of each token and of `</s>` (add-one smoothed, as
/// [`NgramLm::unigram_log_prob`]).
fn unigram_log_probs(lm: &NgramLm, tokens: &[String]) -> Vec<f64> {
    let end = lm.unigram_log_prob(&[]);
    let mut log_probs: Vec<f64> = (lm.unigram_log_probs_each(tokens).into_iter())
        .map(|p| p - end)
        .collect();
    log_probs.push(end);
    log_probs
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn spread(values: &[f64]) -> f64 {
    let m = mean(values);
    (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / values.len().max(1) as f64).sqrt()
}

/// The two smallest values (the second is the first when there is one value).
fn two_lowest(values: &[f64]) -> (f64, f64) {
    let mut lowest = f64::INFINITY;
    let mut second = f64::INFINITY;
    for &v in values {
        if v < lowest {
            second = lowest;
            lowest = v;
        } else if v < second {
            second = v;
        }
    }
    (lowest, if second.is_finite() { second } else { lowest })
}

/// Per-token gains of `lm` over its unigram model: `ln P(token | context) - ln P(token)`, the
/// closing `</s>` included. A negative gain is a token its context makes less likely than it
/// is on its own: a transition the captions do not make.
fn gains(lm: &NgramLm, tokens: &[String]) -> (Vec<f64>, Vec<f64>) {
    let log_probs = lm.token_log_probs(tokens);
    let unigram = unigram_log_probs(lm, tokens);
    let gains = log_probs.iter().zip(&unigram).map(|(w, u)| w - u).collect();
    (log_probs, gains)
}

/// The features of a non-empty tokenized caption.
pub fn features(models: &FeatureModels, tokens: &[String]) -> Features {
    let (word_lp, word_gains) = gains(models.words, tokens);
    let word_negative = word_gains.iter().filter(|&&g| g < 0.0).count();
    let classes = class_sequence(tokens);
    let (class_lp, class_gains) = gains(models.classes, &classes);
    let (min_class, _) = two_lowest(&class_gains);
    let class_negative = class_gains.iter().filter(|&&g| g < 0.0).count();
    let joint: Vec<f64> = word_gains
        .iter()
        .zip(&class_gains)
        .map(|(w, c)| w + c)
        .collect();
    let two_way = two_way_gains(models, tokens, &classes, &joint);
    let two_way_negative_mass: f64 = two_way.iter().map(|g| g.min(0.0)).sum();
    let joint_negative_mass: f64 = joint.iter().map(|g| g.min(0.0)).sum();
    let words: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let repeats = words
        .windows(2)
        .filter(|w| w[0] == w[1] && !is_punctuation(w[0]))
        .count();
    let last_word = words.iter().rev().find(|w| !is_punctuation(w));
    let dangling = last_word.is_some_and(|w| DANGLING_FUNCTION_WORDS.contains(w));
    let flag = |b: bool| f64::from(u8::from(b));
    let (two_way_min, two_way_second) = two_lowest(&two_way);
    [
        mean(&word_gains),
        word_negative.min(4) as f64,
        word_negative as f64 / word_gains.len() as f64,
        spread(&word_lp),
        word_gains[0],
        word_lp[word_lp.len() - 1],
        mean(&class_gains),
        min_class,
        class_negative.min(4) as f64,
        class_lp[0],
        class_lp[class_lp.len() - 1],
        joint_negative_mass,
        joint[0],
        repeats.min(3) as f64,
        flag(dangling),
        flag(!super::balanced(&words)),
        agreement_errors(&classes, &words).min(3) as f64,
        repeated_nouns(&classes, &words).min(3) as f64,
        two_lowest(&joint).0,
        flag(verb_form_subject(&classes)),
        two_way_negative_mass,
        two_way_min,
        two_way_second,
        mean(&two_way),
    ]
}

/// Whether the caption opens with a bare `-ing` or `-ed` form followed by a verb or an
/// auxiliary ("running has a tree", "parked is a car"): a verb form standing as the subject,
/// which a caption's subject, a noun phrase, hardly ever is. An `-s` form after it counts as a
/// verb, which it usually is there; a plural noun ("running dogs play") trips the check too,
/// and the classifier weighs the check as evidence, not as a verdict.
fn verb_form_subject(classes: &[String]) -> bool {
    let mut words = classes.iter().filter(|c| !is_punctuation(c));
    matches!(words.next().map(String::as_str), Some(ING_CLASS | ED_CLASS))
        && words.next().is_some_and(|next| verb_like(next))
}

/// Determiner–noun number disagreements: a singular determiner before an `-s` form ("a
/// dogs"), or a plural one or a number before a bare noun ("two dog"), an adjective allowed
/// between them.
fn agreement_errors(classes: &[String], words: &[&str]) -> usize {
    let mut errors = 0;
    for (i, word) in words.iter().enumerate() {
        let singular = SINGULAR_DETERMINERS.contains(word);
        let plural = PLURAL_DETERMINERS.contains(word) || classes[i] == NUMBER_CLASS;
        if !singular && !plural {
            continue;
        }
        let mut j = i + 1;
        while classes.get(j).is_some_and(|c| c == ADJECTIVE_CLASS) {
            j += 1;
        }
        match classes.get(j).map(String::as_str) {
            Some(S_CLASS) if singular => errors += 1,
            // "two tennis players": a bare noun before a plural one is a compound's first part.
            Some(WORD_CLASS) if plural && classes.get(j + 1).is_none_or(|c| c != S_CLASS) => {
                errors += 1
            }
            _ => {}
        }
    }
    errors
}

/// Whether a token of this class or word can be a verb or an auxiliary.
fn verb_like(class: &str) -> bool {
    matches!(
        class,
        S_CLASS | ING_CLASS | ED_CLASS | "is" | "are" | "was" | "were" | "has" | "have"
    )
}

fn is_content(class: &str) -> bool {
    class.starts_with('#') && class != NUMBER_CLASS
}

/// The singular of a plural noun (the word itself otherwise).
pub fn singular(word: &str) -> String {
    let lexicon = Lexicon::wordnet();
    lexicon
        .lemmas(word)
        .skip(1)
        .find(|l| *l != word && lexicon.plural(l) == word)
        .map_or_else(|| word.to_string(), |l| l.into_owned())
}

/// Phrase heads (a content word not followed by another) whose lemma heads an earlier phrase
/// with no verb between the two ("two dogs with a dog"); "a dog chases another dog" repeats
/// across a verb and "a tennis player on a tennis court" repeats a modifier, neither counted.
fn repeated_nouns(classes: &[String], words: &[&str]) -> usize {
    // Lemmas of the heads seen since the last verb.
    let mut seen: Vec<String> = Vec::new();
    let mut repeated = 0;
    for (i, (word, class)) in words.iter().zip(classes).enumerate() {
        // An -s form after a determiner, number or adjective is a plural noun ("two dogs").
        let noun_phrase = i > 0
            && (classes[i - 1] == ADJECTIVE_CLASS
                || classes[i - 1] == NUMBER_CLASS
                || SINGULAR_DETERMINERS.contains(&words[i - 1])
                || PLURAL_DETERMINERS.contains(&words[i - 1])
                || matches!(
                    words[i - 1],
                    "the" | "his" | "her" | "their" | "its" | "some"
                ));
        if verb_like(class) && !(class == S_CLASS && noun_phrase) {
            seen.clear();
            continue;
        }
        let head = is_content(class) && classes.get(i + 1).is_none_or(|next| !is_content(next));
        if !head {
            continue;
        }
        let lemma = singular(word);
        if seen.contains(&lemma) {
            repeated += 1;
        } else {
            seen.push(lemma);
        }
    }
    repeated
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_classes_follow_form_and_lexicon() {
        let classes = |s: &str| {
            s.split(' ')
                .map(|w| word_class(w).to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            classes("a young man riding two bikes is tired ."),
            "a #adj #word #ing #num #s is #ed ."
        );
        assert_eq!(classes("the children ridden 3"), "the #s #ed #num");
    }

    #[test]
    fn agreement_errors_are_counted() {
        let count = |s: &str| {
            let words: Vec<&str> = s.split(' ').collect();
            let tokens: Vec<String> = words.iter().map(|w| w.to_string()).collect();
            agreement_errors(&class_sequence(&tokens), &words)
        };
        assert_eq!(count("a dog runs on the beach ."), 0);
        assert_eq!(count("two dogs run ."), 0);
        assert_eq!(count("a dogs run ."), 1);
        assert_eq!(count("a big dogs run ."), 1);
        assert_eq!(count("two dog run ."), 1);
        // A compound: "two tennis players".
        assert_eq!(count("two tennis players ."), 0);
    }

    #[test]
    fn repeated_nouns_match_lemmas_within_a_phrase() {
        let count = |s: &str| {
            let words: Vec<&str> = s.split(' ').collect();
            let tokens: Vec<String> = words.iter().map(|w| w.to_string()).collect();
            repeated_nouns(&class_sequence(&tokens), &words)
        };
        assert_eq!(count("two dogs with a dog are happy ."), 1);
        assert_eq!(count("a dog with a ball ."), 0);
        assert_eq!(count("a dog chases another dog ."), 0);
        assert_eq!(count("a tennis player on a tennis court ."), 0);
    }

    #[test]
    fn two_way_gains_add_each_token_s_gain_from_the_right() {
        let corpus: Vec<Vec<String>> = [
            "a dog runs on the grass .",
            "a man runs on the beach .",
            "two dogs play on the grass .",
            "a woman sits on the beach .",
        ]
        .iter()
        .map(|c| c.split(' ').map(String::from).collect())
        .collect();
        let reversed: Vec<Vec<String>> = corpus
            .iter()
            .map(|c| c.iter().rev().cloned().collect())
            .collect();
        let classes: Vec<Vec<String>> = corpus.iter().map(|c| class_sequence(c)).collect();
        let reversed_classes: Vec<Vec<String>> =
            reversed.iter().map(|c| class_sequence(c)).collect();
        let train = |s: &[Vec<String>]| NgramLm::train(s.iter().map(Vec::as_slice), 3);
        let (words, backward_words) = (train(&corpus), train(&reversed));
        let (class_lm, backward_classes) = (train(&classes), train(&reversed_classes));
        let models = FeatureModels {
            words: &words,
            classes: &class_lm,
            backward_words: &backward_words,
            backward_classes: &backward_classes,
        };
        let tokens: Vec<String> = "a dog sits on the beach"
            .split(' ')
            .map(String::from)
            .collect();
        let token_classes = class_sequence(&tokens);
        let forward = vec![0.5; tokens.len() + 1];
        let two_way = two_way_gains(&models, &tokens, &token_classes, &forward);
        assert_eq!(two_way.len(), tokens.len() + 2);
        // "sits" (index 2) read from its right: `<s> beach the on` → sits, in both models.
        let gain = |lm: &NgramLm, context: &[&str], token: &str| {
            lm.prob(context, token).ln() - lm.unigram_log_prob(&[token.to_string()])
                + lm.unigram_log_prob(&[])
        };
        let expected = 0.5
            + gain(&backward_words, &["<s>", "beach", "the", "on"], "sits")
            + gain(
                &backward_classes,
                &["<s>", "#word", "the", "on"],
                &token_classes[2],
            );
        assert!(
            (two_way[2] - expected).abs() < 1e-12,
            "{} {expected}",
            two_way[2]
        );
        // The last two values: `</s>` forward, then `<s>` read from the right (`</s>` after
        // "a" in the reversed caption).
        assert_eq!(two_way[tokens.len()], 0.5);
        let start = backward_words.prob(&["on", "dog", "a"], "</s>").ln()
            - backward_words.unigram_log_prob(&[])
            + backward_classes.prob(&["on", "#word", "a"], "</s>").ln()
            - backward_classes.unigram_log_prob(&[]);
        assert!((two_way[tokens.len() + 1] - start).abs() < 1e-12);
    }

    #[test]
    fn a_verb_form_subject_is_flagged() {
        let flagged = |s: &str| {
            let tokens: Vec<String> = s.split(' ').map(String::from).collect();
            verb_form_subject(&class_sequence(&tokens))
        };
        assert!(flagged("running has a tree ."));
        assert!(flagged("sitting is a dog ."));
        assert!(flagged("running rides a bike ."));
        assert!(!flagged("a man running has a hat ."));
        assert!(!flagged("smiling woman holds a cup ."));
    }
}
