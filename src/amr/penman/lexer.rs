//! PENMAN tokens, matched exactly as penman 1.3.1's `PENMAN_RE` matches them.
//!
//! penman splits its input with Python's `str.splitlines` and lexes each line with one regular
//! expression; this lexer does the same work in one pass over the bytes without allocating.
//! Line terminators of `splitlines` (`\n`, `\r`, `\v`, `\f`, `\x1c`-`\x1e`, U+0085, U+2028,
//! U+2029) end comments and tokens; only `\n` advances the line number reported in errors.

/// What kind of token a span of the source is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `# ...` up to the end of the line.
    Comment,
    /// `"..."` with backslash escapes, quotes included.
    Str,
    LParen,
    RParen,
    Slash,
    /// `:` followed by any symbol characters (possibly none).
    Role,
    Symbol,
    /// `~e.3`, `~e3`, `~3`, `~e.1,2`.
    Alignment,
    /// A character no other token starts with: an unterminated `"` or a stray `~`.
    Unexpected,
}

impl Kind {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Kind::Comment => "a comment",
            Kind::Str => "a string",
            Kind::LParen => "`(`",
            Kind::RParen => "`)`",
            Kind::Slash => "`/`",
            Kind::Role => "a role",
            Kind::Symbol => "a symbol",
            Kind::Alignment => "an alignment",
            Kind::Unexpected => "an unexpected character",
        }
    }
}

/// One token: its kind and byte span in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

/// What a byte can be the start of, looked up in [`CLASS`].
const SYMBOL: u8 = 0;
/// Space or tab.
const BLANK: u8 = 1;
/// A one-byte line terminator: `\n`, `\r`, `\v`, `\f`, `\x1c`-`\x1e`.
const TERMINATOR: u8 = 2;
/// The first byte of U+0085 (`\xc2\x85`) or of U+2028/U+2029 (`\xe2\x80\xa8`/`\xa9`); the
/// bytes after it decide.
const MAYBE_TERMINATOR: u8 = 3;
/// `"()/:~`, which end symbols and roles.
const PUNCTUATION: u8 = 4;

/// Byte classes, so the hot loops test one table entry per byte.
static CLASS: [u8; 256] = {
    let mut class = [SYMBOL; 256];
    class[b' ' as usize] = BLANK;
    class[b'\t' as usize] = BLANK;
    let terminators = [b'\n', b'\r', 0x0b, 0x0c, 0x1c, 0x1d, 0x1e];
    let mut k = 0;
    while k < terminators.len() {
        class[terminators[k] as usize] = TERMINATOR;
        k += 1;
    }
    class[0xc2] = MAYBE_TERMINATOR;
    class[0xe2] = MAYBE_TERMINATOR;
    let punctuation = *b"\"()/:~";
    let mut k = 0;
    while k < punctuation.len() {
        class[punctuation[k] as usize] = PUNCTUATION;
        k += 1;
    }
    class
};

/// Length of the multi-byte `splitlines` terminator starting at `i` (U+0085, U+2028, U+2029),
/// or 0.
#[inline]
fn multibyte_terminator_len(bytes: &[u8], i: usize) -> usize {
    match bytes[i] {
        0xc2 if bytes.get(i + 1) == Some(&0x85) => 2,
        0xe2 if bytes.get(i + 1) == Some(&0x80)
            && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9)) =>
        {
            3
        }
        _ => 0,
    }
}

/// Length in bytes of the `splitlines` terminator starting at `i`, or 0.
#[inline]
fn terminator_len(bytes: &[u8], i: usize) -> usize {
    match CLASS[usize::from(bytes[i])] {
        TERMINATOR => 1,
        MAYBE_TERMINATOR => multibyte_terminator_len(bytes, i),
        _ => 0,
    }
}

/// End of the run of symbol bytes (anything but separators and `"()/:~`) starting at `i`.
#[inline]
fn symbol_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() {
        match CLASS[usize::from(bytes[i])] {
            SYMBOL => i += 1,
            MAYBE_TERMINATOR if multibyte_terminator_len(bytes, i) == 0 => i += 1,
            _ => break,
        }
    }
    i
}

/// The 8 bytes at `i` as one word, when there are 8.
#[inline]
fn word_at(bytes: &[u8], i: usize) -> Option<u64> {
    let chunk: [u8; 8] = bytes.get(i..i + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(chunk))
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// End of the line that `i` lies on: the position of its terminator, or the end of the text.
#[inline]
fn line_end(bytes: &[u8], mut i: usize) -> usize {
    // Comment lines are long and printable ASCII; every terminator has a byte below 0x20 or
    // above 0x7f, so words without such bytes are skipped whole.
    while let Some(word) = word_at(bytes, i) {
        let below_space = word.wrapping_sub(ONES * 0x20) & !word;
        if (below_space | word) & HIGH_BITS != 0 {
            break;
        }
        i += 8;
    }
    while i < bytes.len() {
        match CLASS[usize::from(bytes[i])] {
            TERMINATOR => break,
            MAYBE_TERMINATOR if multibyte_terminator_len(bytes, i) > 0 => break,
            _ => i += 1,
        }
    }
    i
}

/// Start of the next token at or after `i`: separators (blanks and terminators) skipped.
#[inline]
fn skip_separators(bytes: &[u8], mut i: usize) -> usize {
    // Indentation comes in long runs of spaces.
    while word_at(bytes, i) == Some(ONES * u64::from(b' ')) {
        i += 8;
    }
    while i < bytes.len() {
        match CLASS[usize::from(bytes[i])] {
            BLANK | TERMINATOR => i += 1,
            MAYBE_TERMINATOR => match multibyte_terminator_len(bytes, i) {
                0 => break,
                len => i += len,
            },
            _ => break,
        }
    }
    i
}

/// Tokens of a PENMAN text, with one token of lookahead.
pub(crate) struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    peeked: Option<Option<Token>>,
    /// End of the last token handed out, for "unexpected end of input" positions.
    pub last_end: usize,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Lexer {
            text,
            pos: 0,
            peeked: None,
            last_end: 0,
        }
    }

    pub(crate) fn text(&self, token: Token) -> &'a str {
        &self.text[token.start..token.end]
    }

    pub(crate) fn peek(&mut self) -> Option<Token> {
        if let Some(t) = self.peeked {
            return t;
        }
        let t = self.scan();
        self.peeked = Some(t);
        t
    }

    pub(crate) fn next_token(&mut self) -> Option<Token> {
        let t = match self.peeked.take() {
            Some(t) => t,
            None => self.scan(),
        };
        if let Some(t) = t {
            self.last_end = t.end;
        }
        t
    }

    /// Consumes the next token when it has `kind`.
    pub(crate) fn accept(&mut self, kind: Kind) -> Option<Token> {
        match self.peek() {
            Some(t) if t.kind == kind => self.next_token(),
            _ => None,
        }
    }

    fn scan(&mut self) -> Option<Token> {
        let bytes = self.text.as_bytes();
        let n = bytes.len();
        let i = skip_separators(bytes, self.pos);
        if i >= n {
            self.pos = n;
            return None;
        }
        let start = i;
        let (kind, end) = match bytes[i] {
            b'#' => (Kind::Comment, line_end(bytes, i + 1)),
            b'"' => match scan_string(bytes, i) {
                Some(end) => (Kind::Str, end),
                None => (Kind::Unexpected, i + 1),
            },
            b'(' => (Kind::LParen, i + 1),
            b')' => (Kind::RParen, i + 1),
            b'/' => (Kind::Slash, i + 1),
            b':' => (Kind::Role, symbol_end(bytes, i + 1)),
            b'~' => match scan_alignment(bytes, i) {
                Some(end) => (Kind::Alignment, end),
                None => (Kind::Unexpected, i + 1),
            },
            _ => (Kind::Symbol, symbol_end(bytes, i + 1)),
        };
        // Symbols stop only at ASCII bytes or at a complete terminator, so `end` always lies on
        // a character boundary.
        self.pos = end;
        Some(Token { kind, start, end })
    }
}

/// `"[^"\\]*(?:\\.[^"\\]*)*"` within one line: the end of the string, or `None` when the line
/// ends first.
fn scan_string(bytes: &[u8], start: usize) -> Option<usize> {
    let n = bytes.len();
    let mut j = start + 1;
    while j < n {
        if terminator_len(bytes, j) > 0 {
            return None;
        }
        match bytes[j] {
            b'"' => return Some(j + 1),
            b'\\' => {
                j += 1;
                if j >= n || terminator_len(bytes, j) > 0 {
                    return None;
                }
                // Step over the whole escaped character (it may be multi-byte).
                j += utf8_len(bytes[j]);
            }
            _ => j += 1,
        }
    }
    None
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

/// `~(?:[a-z]\.?)?[0-9]+(?:,[0-9]+)*`: the end of the marker, or `None`.
fn scan_alignment(bytes: &[u8], start: usize) -> Option<usize> {
    let n = bytes.len();
    let digit = |k: usize| k < n && bytes[k].is_ascii_digit();
    let mut j = start + 1;
    if j < n && bytes[j].is_ascii_lowercase() {
        if j + 1 < n && bytes[j + 1] == b'.' && digit(j + 2) {
            j += 2;
        } else if digit(j + 1) {
            j += 1;
        } else {
            return None;
        }
    }
    if !digit(j) {
        return None;
    }
    while digit(j) {
        j += 1;
    }
    while j + 1 < n && bytes[j] == b',' && digit(j + 1) {
        j += 1;
        while digit(j) {
            j += 1;
        }
    }
    Some(j)
}

/// 1-based line and column (in characters) of byte offset `pos` in `text`.
pub(crate) fn line_column(text: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(text.len());
    let before = &text.as_bytes()[..pos];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    // `pos` is always a token boundary, hence a character boundary; fall back to bytes if not.
    let column = text
        .get(line_start..pos)
        .map_or(pos - line_start, |s| s.chars().count())
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(text: &str) -> Vec<(Kind, &str)> {
        let mut lexer = Lexer::new(text);
        let mut out = Vec::new();
        while let Some(t) = lexer.next_token() {
            out.push((t.kind, lexer.text(t)));
        }
        out
    }

    #[test]
    fn lexes_roles_alignments_and_strings() {
        assert_eq!(
            lex(r#"(a / b~e.3 :ARG0~e.1,2 "x\"y"~4 :polarity -)"#),
            vec![
                (Kind::LParen, "("),
                (Kind::Symbol, "a"),
                (Kind::Slash, "/"),
                (Kind::Symbol, "b"),
                (Kind::Alignment, "~e.3"),
                (Kind::Role, ":ARG0"),
                (Kind::Alignment, "~e.1,2"),
                (Kind::Str, r#""x\"y""#),
                (Kind::Alignment, "~4"),
                (Kind::Role, ":polarity"),
                (Kind::Symbol, "-"),
                (Kind::RParen, ")"),
            ]
        );
    }

    #[test]
    fn comment_only_at_token_start_and_ends_at_line_end() {
        assert_eq!(
            lex("a#b # c d\ne"),
            vec![
                (Kind::Symbol, "a#b"),
                (Kind::Comment, "# c d"),
                (Kind::Symbol, "e")
            ]
        );
    }

    #[test]
    fn malformed_markers_are_unexpected() {
        assert_eq!(
            lex("~e. \"ab\ncd\""),
            vec![
                (Kind::Unexpected, "~"),
                (Kind::Symbol, "e."),
                (Kind::Unexpected, "\""),
                (Kind::Symbol, "ab"),
                (Kind::Symbol, "cd"),
                (Kind::Unexpected, "\""),
            ]
        );
        // A trailing comma is not part of the marker (the regex needs a digit after it).
        assert_eq!(
            lex("~e3,"),
            vec![(Kind::Alignment, "~e3"), (Kind::Symbol, ",")]
        );
    }

    #[test]
    fn unicode_line_separators_split_symbols() {
        assert_eq!(
            lex("ab\u{2028}cd é"),
            vec![
                (Kind::Symbol, "ab"),
                (Kind::Symbol, "cd"),
                (Kind::Symbol, "é")
            ]
        );
    }

    #[test]
    fn line_column_counts_characters() {
        let text = "ab\né x";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, text.find('x').unwrap()), (2, 3));
    }
}
