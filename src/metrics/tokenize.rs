//! Caption tokenisation before scoring.
//!
//! Scores are only comparable when hypotheses and references are split into words the same way,
//! so both tokenisers here reproduce a Python pipeline that published numbers come from:
//! [`Tokenizer::Whitespace`] is lower-case plus a split on whitespace, and [`Tokenizer::Ptb`]
//! re-implements what pycocoevalcap's `PTBTokenizer` (Stanford CoreNLP 3.4.1 `PTBTokenizer
//! -preserveLines -lowerCase`, then removal of its punctuation list) leaves of a caption.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// How a caption becomes the words that n-grams are counted over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Tokenizer {
    /// Lower-case, then split on whitespace; punctuation stays attached to words.
    #[default]
    Whitespace,
    /// The PTB tokenisation and punctuation removal of the COCO caption evaluation code.
    Ptb,
}

impl Tokenizer {
    /// The words of `caption`.
    pub fn tokenize(self, caption: &str) -> Vec<String> {
        match self {
            Tokenizer::Whitespace => caption
                .split_whitespace()
                .map(|w| w.to_lowercase())
                .collect(),
            Tokenizer::Ptb => ptb_tokenize(caption),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Whitespace => "whitespace",
            Tokenizer::Ptb => "ptb",
        }
    }
}

impl fmt::Display for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Tokenizer {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "whitespace" => Ok(Tokenizer::Whitespace),
            "ptb" => Ok(Tokenizer::Ptb),
            other => Err(Error::Usage(format!(
                "unknown tokenizer `{other}` (expected `whitespace` or `ptb`)"
            ))),
        }
    }
}

/// Tokens that pycocoevalcap deletes after PTB tokenisation (`PUNCTUATIONS` in
/// `ptbtokenizer.py`). Its bracket escapes (`-LRB-`, ...) never match: `-lowerCase` has already
/// turned them into `-lrb-`, which therefore stay in the scored captions.
fn is_removed_punctuation(token: &str) -> bool {
    matches!(
        token,
        "''" | "'" | "``" | "`" | "." | "?" | "!" | "," | ":" | "-" | "--" | "..." | ";"
    )
}

/// Abbreviations whose final period the PTB lexer keeps inside the word.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "inc", "co", "ltd", "corp", "mt", "ft",
    "ave", "no", "jan", "feb", "mar", "apr", "aug", "sep", "sept", "oct", "nov", "dec",
];

/// Contractions split off the end of a word.
const CLITICS: &[&str] = &["n't", "'ll", "'re", "'ve", "'s", "'d", "'m"];

/// Words the PTB lexer splits in two as a whole.
const SPLIT_WORDS: &[(&str, &str, &str)] = &[
    ("cannot", "can", "not"),
    ("gonna", "gon", "na"),
    ("gotta", "got", "ta"),
    ("wanna", "wan", "na"),
    ("lemme", "lem", "me"),
    ("gimme", "gim", "me"),
];

fn ptb_tokenize(caption: &str) -> Vec<String> {
    let lower = caption.to_lowercase();
    let mut out = Vec::new();
    for chunk in lower.split_whitespace() {
        for token in split_chunk(&normalise_quotes(chunk)) {
            if !is_removed_punctuation(&token) {
                out.push(token);
            }
        }
    }
    out
}

/// Curly quotes and apostrophes behave like their ASCII forms in the PTB lexer.
fn normalise_quotes(chunk: &str) -> String {
    chunk
        .chars()
        .map(|c| match c {
            '\u{2018}' | '\u{2019}' => '\'',
            '\u{201c}' | '\u{201d}' => '"',
            other => other,
        })
        .collect()
}

/// Splits one whitespace-free chunk into PTB tokens.
fn split_chunk(chunk: &str) -> Vec<String> {
    let chars: Vec<char> = chunk.chars().collect();
    let mut tokens = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, tokens: &mut Vec<String>| {
        if !word.is_empty() {
            split_word(&std::mem::take(word), tokens);
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev_digit = i > 0 && chars[i - 1].is_ascii_digit();
        let next_digit = chars.get(i + 1).is_some_and(|d| d.is_ascii_digit());
        match c {
            // Numbers keep their separators (1,000 / 3:30), everywhere else these stand alone.
            ',' | ':' if prev_digit && next_digit => word.push(c),
            // `#1` is a sign and a number, `#hashtag` one word.
            '#' if !next_digit => word.push(c),
            ',' | ':' | ';' | '"' | '(' | ')' | '[' | ']' | '{' | '}' | '+' | '=' | '%' | '$'
            | '#' => {
                flush(&mut word, &mut tokens);
                tokens.push(symbol_token(c));
            }
            // Runs of `!`/`?` are one token; only a single one is on the removal list.
            '!' | '?' => {
                flush(&mut word, &mut tokens);
                let mut run = String::from(c);
                while let Some(&next @ ('!' | '?')) = chars.get(i + 1) {
                    run.push(next);
                    i += 1;
                }
                tokens.push(run);
            }
            '.' if chars.get(i + 1) == Some(&'.') => {
                let start = i;
                while chars.get(i + 1) == Some(&'.') {
                    i += 1;
                }
                if i - start == 1 && !word.is_empty() {
                    // `u.s..`: the first period belongs to the word (an abbreviation keeps
                    // it, any other word splits it off), the second stands alone.
                    word.push('.');
                    flush(&mut word, &mut tokens);
                    tokens.push(".".to_string());
                } else {
                    // Any longer run is an ellipsis.
                    flush(&mut word, &mut tokens);
                    tokens.push("...".to_string());
                }
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                flush(&mut word, &mut tokens);
                i += 1;
                tokens.push("--".to_string());
            }
            _ => word.push(c),
        }
        i += 1;
    }
    flush(&mut word, &mut tokens);
    tokens
}

/// The token of a character that always stands alone; brackets get the PTB escapes and double
/// quotes the closing-quote form (both are removed or kept exactly as pycocoevalcap does).
fn symbol_token(c: char) -> String {
    match c {
        '(' => "-lrb-".to_string(),
        ')' => "-rrb-".to_string(),
        '[' => "-lsb-".to_string(),
        ']' => "-rsb-".to_string(),
        '{' => "-lcb-".to_string(),
        '}' => "-rcb-".to_string(),
        '"' => "''".to_string(),
        other => other.to_string(),
    }
}

/// Splits quotes, a sentence-final period, a trailing slash and contractions off a word.
fn split_word(word: &str, tokens: &mut Vec<String>) {
    let mut rest = word;
    // An apostrophe before a digit is part of the word (`'90s`); otherwise it opens a quote.
    while let Some(stripped) = rest.strip_prefix(['\'', '`']) {
        if stripped.starts_with(|c: char| c.is_ascii_digit()) {
            break;
        }
        tokens.push("`".to_string());
        rest = stripped;
    }
    let mut trailing = Vec::new();
    loop {
        if let Some(stripped) = rest.strip_suffix('.') {
            if stripped.is_empty() || keeps_period(stripped) {
                break;
            }
            trailing.push(".".to_string());
            rest = stripped;
        } else if rest.len() > 1 && rest.ends_with('/') {
            // `w/` (with) is a word and a slash; `w/o` and `and/or` stay whole.
            trailing.push("/".to_string());
            rest = &rest[..rest.len() - 1];
        } else if rest.len() > 1 && rest.ends_with('\'') && !rest.ends_with("''") {
            // A plural possessive (`dogs'`) or a closing single quote.
            trailing.push("'".to_string());
            rest = &rest[..rest.len() - 1];
        } else {
            break;
        }
    }
    if let Some((_, first, second)) = SPLIT_WORDS.iter().find(|(w, _, _)| *w == rest) {
        tokens.push((*first).to_string());
        tokens.push((*second).to_string());
    } else if let Some(clitic) = CLITICS
        .iter()
        .find(|c| rest.len() > c.len() && rest.ends_with(*c))
    {
        let stem = &rest[..rest.len() - clitic.len()];
        tokens.push(stem.to_string());
        tokens.push((*clitic).to_string());
    } else if !rest.is_empty() {
        tokens.push(rest.to_string());
    }
    tokens.extend(trailing.into_iter().rev());
}

/// Whether `stem.` is an abbreviation (`mr.`, `u.s.`, `a.m.`) or an initial (`a.`) rather than
/// a word and a period.
fn keeps_period(stem: &str) -> bool {
    if ABBREVIATIONS.contains(&stem) {
        return true;
    }
    // Initials and letter-period sequences such as `u.s` (from `u.s.`).
    stem.split('.')
        .all(|p| p.chars().count() == 1 && p.chars().all(char::is_alphabetic))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptb(s: &str) -> String {
        Tokenizer::Ptb.tokenize(s).join(" ")
    }

    #[test]
    fn whitespace_lowercases_and_keeps_punctuation() {
        assert_eq!(
            Tokenizer::Whitespace.tokenize("  A Dog,  runs.\n"),
            vec!["a", "dog,", "runs."]
        );
    }

    #[test]
    fn ptb_removes_punctuation_and_splits_contractions() {
        assert_eq!(
            ptb("Two ducks floating in a green, grassy pond."),
            "two ducks floating in a green grassy pond"
        );
        assert_eq!(
            ptb("The dog's bone isn't here!"),
            "the dog 's bone is n't here"
        );
        assert_eq!(
            ptb("A \"big\" cat (orange) -- sleeping..."),
            "a big cat -lrb- orange -rrb- sleeping"
        );
        assert_eq!(
            ptb("At 3:30, 1,000 people in the U.S. cheer"),
            "at 3:30 1,000 people in the u.s. cheer"
        );
        assert_eq!(ptb("a t-shirt; a hat: red"), "a t-shirt a hat red");
        assert_eq!(
            ptb("wow!! really?! no! cannot"),
            "wow !! really ?! no can not"
        );
        assert_eq!(
            ptb("$5 off 100% of the '90s, w/ A."),
            "$ 5 off 100 % of the '90s w / a."
        );
    }

    #[test]
    fn tokenizer_names_round_trip() {
        for t in [Tokenizer::Whitespace, Tokenizer::Ptb] {
            assert_eq!(t.name().parse::<Tokenizer>().unwrap(), t);
        }
        assert!("spacy".parse::<Tokenizer>().is_err());
    }
}
