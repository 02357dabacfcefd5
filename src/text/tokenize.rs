//! Caption tokenization: lower-case words, punctuation split into its own tokens.
//!
//! Captions are short, informal English sentences; the language model, the quality scorer and
//! the word vectors need the same token stream from them, so this is the one place that
//! decides what a token is. A word is a run of letters and digits, which may contain an
//! apostrophe or hyphen between two word characters (`don't`, `t-shirt`); every other
//! non-space character (`.`, `,`, `(`, `"`) is a token of its own.

/// Splits `caption` into lower-case tokens.
///
/// ```
/// use capflow::text::tokenize::tokenize;
/// assert_eq!(tokenize("A man's T-shirt, (red)."), ["a", "man's", "t-shirt", ",", "(", "red", ")", "."]);
/// ```
pub fn tokenize(caption: &str) -> Vec<String> {
    let chars: Vec<char> = caption.chars().collect();
    let mut tokens = Vec::new();
    let mut word = String::new();
    for (i, &ch) in chars.iter().enumerate() {
        if ch.is_alphanumeric() {
            word.extend(ch.to_lowercase());
            continue;
        }
        // An apostrophe or hyphen joins two word characters: "don't", "t-shirt".
        let joins = matches!(ch, '\'' | '-' | '\u{2019}')
            && !word.is_empty()
            && chars.get(i + 1).is_some_and(|next| next.is_alphanumeric());
        if joins {
            word.push(if ch == '\u{2019}' { '\'' } else { ch });
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if !ch.is_whitespace() {
            tokens.push(ch.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

/// Whether `token` is punctuation (no letter or digit in it).
pub fn is_punctuation(token: &str) -> bool {
    !token.is_empty() && !token.chars().any(char::is_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_punctuation_and_lowercases() {
        assert_eq!(
            tokenize("Two dogs play on the beach ."),
            ["two", "dogs", "play", "on", "the", "beach", "."]
        );
        assert_eq!(tokenize("Hello,world!"), ["hello", ",", "world", "!"]);
        assert_eq!(tokenize("  "), Vec::<String>::new());
        assert_eq!(tokenize("'quoted'"), ["'", "quoted", "'"]);
        assert_eq!(tokenize("a - b"), ["a", "-", "b"]);
    }

    #[test]
    fn punctuation_tokens() {
        assert!(is_punctuation("."));
        assert!(is_punctuation("\""));
        assert!(!is_punctuation("t-shirt"));
        assert!(!is_punctuation(""));
    }
}
