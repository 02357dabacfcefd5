//! Automatic corruptions of real captions: the negative examples the built-in quality scorer
//! is trained to tell from the captions themselves.
//!
//! Each corruption breaks a caption the way a generator or a bad parse breaks text: word order
//! ([`Corruption::Shuffle`]), missing or doubled words, number agreement, swapped roles,
//! a fragment that starts with a function word, a noun slot filled with a verb form, a stray
//! word put in, a word moved out of place, a caption cut off early. All are
//! seeded by the caller's random stream, so the same caption with the same seed gives the same
//! corruption on every machine.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::features::{singular, word_class, NUMBER_CLASS};
use crate::text::inflect::Lexicon;
use crate::text::tokenize::is_punctuation;

/// A kind of corruption the scorer is trained on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// The words in a random order (punctuation stays where it was).
    Shuffle,
    /// One or two words left out.
    Drop,
    /// A word doubled in place, a short phrase copied elsewhere, or a noun repeated in a
    /// phrase attached to it ("two dogs with a dog").
    Repeat,
    /// A determiner and its noun, or a subject and its verb, made to disagree in number.
    Agreement,
    /// Two nouns of different phrases swapped ("a grass kicks a ball").
    RoleSwap,
    /// The caption's opening cut and a conjunction or preposition put before the rest ("and
    /// eat a lunch").
    FunctionWordStart,
    /// A noun replaced by a verb form taken from another caption ("running has a tree").
    NounVerb,
    /// A word of another caption put in at a random word boundary ("a man in rides a bike").
    Insert,
    /// One word moved to a word boundary at least two words away ("a man rides on a bike the
    /// street").
    Move,
    /// The caption cut off after one of its words, as a generator that stops early leaves it
    /// ("a man rides a bike on the"), its closing punctuation kept or left off.
    Cut,
}

/// Every corruption the scorer is trained on, in a fixed order.
pub const TRAINING_CORRUPTIONS: [Corruption; 10] = [
    Corruption::Shuffle,
    Corruption::Drop,
    Corruption::Repeat,
    Corruption::Agreement,
    Corruption::RoleSwap,
    Corruption::FunctionWordStart,
    Corruption::NounVerb,
    Corruption::Insert,
    Corruption::Move,
    Corruption::Cut,
];

const OPENERS: &[&str] = &["and", "but", "or", "with", "of", "to", "while", "as"];

/// Positions of the word (non-punctuation) tokens.
fn word_positions(tokens: &[String]) -> Vec<usize> {
    (0..tokens.len())
        .filter(|&i| !is_punctuation(&tokens[i]))
        .collect()
}

fn is_nounish(token: &str) -> bool {
    matches!(word_class(token), "#word" | "#s")
}

/// `tokens` broken by `kind`, or `None` when the caption is too short for it or it would
/// leave the caption as it is. `donor` is another caption, a source of words.
pub fn corrupt(
    kind: Corruption,
    tokens: &[String],
    donor: &[String],
    rng: &mut ChaCha8Rng,
) -> Option<Vec<String>> {
    let words = word_positions(tokens);
    if words.len() < 3 {
        return None;
    }
    let corrupted = match kind {
        Corruption::Shuffle => shuffle(tokens, &words, rng),
        Corruption::Drop => drop_words(tokens, &words, rng),
        Corruption::Repeat => repeat(tokens, &words, rng),
        Corruption::Agreement => disagree(tokens, &words, rng),
        Corruption::RoleSwap => swap_roles(tokens, &words, rng),
        Corruption::FunctionWordStart => function_word_start(tokens, &words, rng),
        Corruption::NounVerb => noun_to_verb(tokens, &words, donor, rng),
        Corruption::Insert => insert(tokens, &words, donor, rng),
        Corruption::Move => move_word(tokens, &words, rng),
        Corruption::Cut => cut(tokens, &words, rng),
    }?;
    (corrupted != tokens && !corrupted.is_empty()).then_some(corrupted)
}

fn shuffle(tokens: &[String], words: &[usize], rng: &mut ChaCha8Rng) -> Option<Vec<String>> {
    let mut order: Vec<usize> = words.to_vec();
    for _ in 0..8 {
        order.shuffle(rng);
        let mut out = tokens.to_vec();
        for (&to, &from) in words.iter().zip(&order) {
            out[to] = tokens[from].clone();
        }
        if out != tokens {
            return Some(out);
        }
    }
    None
}

fn drop_words(tokens: &[String], words: &[usize], rng: &mut ChaCha8Rng) -> Option<Vec<String>> {
    // Leaving out an adjective keeps a caption whole ("a red car" → "a car").
    let mut candidates: Vec<usize> = words
        .iter()
        .copied()
        .filter(|&i| word_class(&tokens[i]) != "#adj")
        .collect();
    candidates.shuffle(rng);
    let drop = if words.len() >= 6 { 2 } else { 1 };
    let dropped = &candidates[..drop.min(candidates.len())];
    Some(
        (0..tokens.len())
            .filter(|i| !dropped.contains(i))
            .map(|i| tokens[i].clone())
            .collect(),
    )
}

fn repeat(tokens: &[String], words: &[usize], rng: &mut ChaCha8Rng) -> Option<Vec<String>> {
    let mut out = tokens.to_vec();
    match rng.gen_range(0..3) {
        0 => {
            let i = words[rng.gen_range(0..words.len())];
            out.insert(i, tokens[i].clone());
        }
        1 => {
            // A determiner and what follows it, copied to another word boundary.
            let starts: Vec<usize> = words
                .iter()
                .copied()
                .filter(|&i| {
                    matches!(tokens[i].as_str(), "a" | "an" | "the") && i + 1 < tokens.len()
                })
                .collect();
            let start = *starts.choose(rng).unwrap_or(&words[0]);
            let end = (start + 2).min(tokens.len());
            let phrase = tokens[start..end].to_vec();
            let at = words[rng.gen_range(0..words.len())];
            if at >= start && at <= end {
                return None;
            }
            out.splice(at..at, phrase);
        }
        _ => {
            // A noun, then a preposition and the same noun again.
            let nouns: Vec<usize> = words
                .iter()
                .copied()
                .filter(|&i| is_nounish(&tokens[i]))
                .filter(|&i| tokens.get(i + 1).is_none_or(|next| !is_nounish(next)))
                .collect();
            let &i = nouns.choose(rng)?;
            let phrase = [
                ["with", "of", "near", "on"].choose(rng)?.to_string(),
                ["a", "the"].choose(rng)?.to_string(),
                singular(&tokens[i]),
            ];
            out.splice(i + 1..i + 1, phrase);
        }
    }
    Some(out)
}

fn disagree(tokens: &[String], words: &[usize], rng: &mut ChaCha8Rng) -> Option<Vec<String>> {
    let lexicon = Lexicon::wordnet();
    let mut options: Vec<(usize, String)> = Vec::new();
    for &i in words {
        let word = tokens[i].as_str();
        match word {
            "is" => options.push((i, "are".into())),
            "are" => options.push((i, "is".into())),
            "a" | "an" => options.push((i, "two".into())),
            _ => {}
        }
        let class = word_class(word);
        if class == "#s" {
            if let Some(lemma) = lexicon
                .lemmas(word)
                .skip(1)
                .find(|l| lexicon.plural(l) == word)
            {
                options.push((i, lemma.into_owned()));
            }
        } else if class == "#word" && i > 0 && matches!(tokens[i - 1].as_str(), "a" | "an") {
            options.push((i, lexicon.plural(word).into_owned()));
        } else if class == NUMBER_CLASS {
            options.push((i, "a".into()));
        }
    }
    let (i, replacement) = options.choose(rng)?.clone();
    let mut out = tokens.to_vec();
    out[i] = replacement;
    Some(out)
}

fn swap_roles(tokens: &[String], words: &[usize], rng: &mut ChaCha8Rng) -> Option<Vec<String>> {
    let nouns: Vec<usize> = words
        .iter()
        .copied()
        .filter(|&i| is_nounish(&tokens[i]))
        .collect();
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (k, &i) in nouns.iter().enumerate() {
        for &j in &nouns[k + 1..] {
            // Nouns of one phrase, or two coordinated ones, swap into a caption as good.
            let coordinated = matches!(tokens[j - 1].as_str(), "and" | "or");
            if j > i + 1 && tokens[i] != tokens[j] && !coordinated {
                pairs.push((i, j));
            }
        }
    }
    let &(i, j) = pairs.choose(rng)?;
    let mut out = tokens.to_vec();
    out.swap(i, j);
    Some(out)
}

fn function_word_start(
    tokens: &[String],
    words: &[usize],
    rng: &mut ChaCha8Rng,
) -> Option<Vec<String>> {
    let cut = rng.gen_range(1..=(words.len() - 2).min(3));
    let mut out = vec![OPENERS.choose(rng)?.to_string()];
    out.extend_from_slice(&tokens[words[cut]..]);
    Some(out)
}

fn noun_to_verb(
    tokens: &[String],
    words: &[usize],
    donor: &[String],
    rng: &mut ChaCha8Rng,
) -> Option<Vec<String>> {
    let verbs: Vec<&String> = donor
        .iter()
        .chain(tokens)
        .filter(|t| word_class(t) == "#ing")
        .collect();
    let slots: Vec<usize> = words
        .iter()
        .copied()
        .filter(|&i| is_nounish(&tokens[i]))
        .collect();
    let verb = (*verbs.choose(rng)?).clone();
    let slot = *slots.choose(rng)?;
    let mut out = tokens.to_vec();
    // At the start, the noun phrase goes and the verb form becomes the subject.
    if slot == words[1] && words[0] == 0 {
        out.splice(0..=slot, [verb]);
    } else {
        out[slot] = verb;
    }
    Some(out)
}

fn insert(
    tokens: &[String],
    words: &[usize],
    donor: &[String],
    rng: &mut ChaCha8Rng,
) -> Option<Vec<String>> {
    let donor_words: Vec<&String> = donor.iter().filter(|t| !is_punctuation(t)).collect();
    let word = (*donor_words.choose(rng)?).clone();
    // Before a word, or after the last one.
    let at = match rng.gen_range(0..=words.len()) {
        k if k == words.len() => words[k - 1] + 1,
        k => words[k],
    };
    // Next to the same word it would only double it (Repeat's part).
    if tokens.get(at) == Some(&word) || (at > 0 && tokens[at - 1] == word) {
        return None;
    }
    let mut out = tokens.to_vec();
    out.insert(at, word);
    Some(out)
}

fn move_word(tokens: &[String], words: &[usize], rng: &mut ChaCha8Rng) -> Option<Vec<String>> {
    let from = rng.gen_range(0..words.len());
    // Word boundaries k (before the k-th word, or after the last) at least two words away.
    let targets: Vec<usize> = (0..=words.len())
        .filter(|&k| k + 1 < from || k > from + 2)
        .collect();
    let to = *targets.choose(rng)?;
    let mut out = tokens.to_vec();
    let word = out.remove(words[from]);
    let at = if to == words.len() {
        words[to - 1] + 1
    } else {
        words[to]
    };
    // Removing the word shifted every later position left by one.
    out.insert(if at > words[from] { at - 1 } else { at }, word);
    Some(out)
}

fn cut(tokens: &[String], words: &[usize], rng: &mut ChaCha8Rng) -> Option<Vec<String>> {
    // After the second word at the earliest, before the last word at the latest.
    let last = words[rng.gen_range(1..words.len() - 1)];
    let mut out = tokens[..=last].to_vec();
    let closing = tokens
        .last()
        .filter(|t| is_punctuation(t) && t.as_str() != ")");
    if let Some(closing) = closing.filter(|_| rng.gen_bool(0.5)) {
        out.push(closing.clone());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::tokenize::tokenize;
    use rand::SeedableRng;

    #[test]
    fn each_corruption_changes_the_caption_as_described() {
        let caption = tokenize("a man rides a bike on the street .");
        let donor = tokenize("a boy running on the grass .");
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for kind in TRAINING_CORRUPTIONS {
            let out = corrupt(kind, &caption, &donor, &mut rng).unwrap();
            assert_ne!(out, caption, "{kind:?}");
            match kind {
                Corruption::Shuffle => {
                    let (mut a, mut b) = (out.clone(), caption.clone());
                    a.sort();
                    b.sort();
                    assert_eq!(a, b);
                    assert_eq!(out.last().unwrap(), ".");
                }
                Corruption::Drop => assert_eq!(out.len(), caption.len() - 2),
                Corruption::Repeat => assert!(out.len() > caption.len()),
                Corruption::Agreement | Corruption::RoleSwap => {
                    assert_eq!(out.len(), caption.len())
                }
                Corruption::FunctionWordStart => assert!(OPENERS.contains(&out[0].as_str())),
                Corruption::NounVerb => assert!(out.iter().any(|t| t == "running")),
                Corruption::Move => {
                    let (mut a, mut b) = (out.clone(), caption.clone());
                    a.sort();
                    b.sort();
                    assert_eq!(a, b);
                }
                Corruption::Cut => {
                    let words = out.iter().filter(|t| !is_punctuation(t)).count();
                    assert!((2..8).contains(&words), "{out:?}");
                    assert_eq!(out[..words], caption[..words]);
                }
                Corruption::Insert => {
                    // The caption with one word of the donor put in.
                    assert!((0..out.len()).any(|i| {
                        let mut rest = out.clone();
                        let word = rest.remove(i);
                        rest == caption && donor.contains(&word)
                    }));
                }
            }
        }
        assert_eq!(
            corrupt(Corruption::Shuffle, &tokenize("a dog ."), &donor, &mut rng),
            None
        );
    }
}
