//! Sentence tokenization in the style of the ISI AMR alignment releases (`# ::tok` lines),
//! so that `~e.N` token indices mean the same token as in files aligned by ISI.
//!
//! The conventions, read off the Bio AMR release (`bio_v0.8_*_isi_aligned.txt`):
//! - punctuation is split off (`factors.` → `factors .`), but not the comma or period inside a
//!   number (`32,000`, `0.5`) nor the period of a word that is not last (`Fig.`, `al.`);
//! - a hyphen, slash or colon between two ASCII letters or digits becomes its own token marked
//!   with `@` on the sides it was attached (`B-Raf` → `B @-@ Raf`, `1/2` → `1 @/@ 2`); a hyphen
//!   at the start or end of a word is `-@` or `@-` (`mono- and` → `mono @- and`);
//! - `%` is a token, `'s` and `n't` are split off (`dog's` → `dog 's`, `don't` → `do n't`);
//! - markup tags (`<i>`, `<xref ref-type="bibr" rid="B14">`) are single tokens, spaces
//!   included; a tag written against the text before it is marked `@<tag>`, a closing tag
//!   written against the text after it `</tag>@` (except before a comma or `)`).

/// Splits a sentence (`# ::snt`) into ISI-style tokens.
///
/// ```
/// use capflow::amr::token_align::tokenize;
/// assert_eq!(
///     tokenize("Mutant <i>BRAF</i> (B-Raf) inhibits 5% of Erk 1/2 and doesn't stop."),
///     ["Mutant", "<i>", "BRAF", "</i>", "(", "B", "@-@", "Raf", ")", "inhibits", "5", "%",
///      "of", "Erk", "1", "@/@", "2", "and", "does", "n't", "stop", "."]
/// );
/// ```
pub fn tokenize(sentence: &str) -> Vec<String> {
    let pieces = pieces(sentence);
    let mut tokens = Vec::new();
    let last_text = pieces.iter().rposition(|p| !p.tag);
    for (i, piece) in pieces.iter().enumerate() {
        if piece.tag {
            tokens.push(tag_token(&pieces, i));
        } else {
            split_word(
                piece.text,
                Some(i) == last_text && i + 1 == pieces.len(),
                &mut tokens,
            );
        }
    }
    tokens
}

/// Splits a `# ::tok` line into its tokens: on whitespace, except inside a markup tag, which
/// the ISI releases count as one token (`<xref ref-type="bibr" rid="B21">`).
///
/// ```
/// use capflow::amr::token_align::split_tokenized;
/// assert_eq!(
///     split_tokenized("cancer [ @<xref ref-type=\"bibr\" rid=\"B21\"> 21 </xref>@ ] ."),
///     ["cancer", "[", "@<xref ref-type=\"bibr\" rid=\"B21\">", "21", "</xref>@", "]", "."]
/// );
/// ```
pub fn split_tokenized(line: &str) -> Vec<String> {
    let mut tokens: Vec<String> = Vec::new();
    let mut open_tag = false;
    for word in line.split_whitespace() {
        if open_tag {
            if let Some(last) = tokens.last_mut() {
                last.push(' ');
                last.push_str(word);
            }
        } else {
            tokens.push(word.to_string());
        }
        let starts_tag = !open_tag && (word.starts_with('<') || word.starts_with("@<"));
        if starts_tag || open_tag {
            open_tag = !word.contains('>');
        }
    }
    tokens
}

/// A markup tag or a run of other non-space characters, and whether whitespace separates it
/// from its neighbours.
struct Piece<'s> {
    text: &'s str,
    tag: bool,
    space_before: bool,
    space_after: bool,
}

fn pieces<'s>(sentence: &'s str) -> Vec<Piece<'s>> {
    let mut out: Vec<Piece> = Vec::new();
    let mut rest_start = 0;
    let bytes = sentence.as_bytes();
    let mut i = 0;
    let mut space_before = true;
    let flush = |out: &mut Vec<Piece<'s>>, start: usize, end: usize, space_before: bool| {
        if start < end {
            out.push(Piece {
                text: &sentence[start..end],
                tag: false,
                space_before,
                space_after: false,
            });
        }
    };
    while i < bytes.len() {
        let c = sentence[i..].chars().next().unwrap_or(' ');
        if c.is_whitespace() {
            flush(&mut out, rest_start, i, space_before);
            if let Some(last) = out.last_mut() {
                last.space_after = true;
            }
            space_before = true;
            i += c.len_utf8();
            rest_start = i;
            continue;
        }
        if c == '<' {
            if let Some(len) = tag_length(&sentence[i..]) {
                let glued_text = rest_start < i;
                flush(&mut out, rest_start, i, space_before);
                out.push(Piece {
                    text: &sentence[i..i + len],
                    tag: true,
                    space_before: space_before && !glued_text,
                    space_after: false,
                });
                i += len;
                rest_start = i;
                space_before = false;
                continue;
            }
        }
        i += c.len_utf8();
    }
    flush(&mut out, rest_start, bytes.len(), space_before);
    if let Some(last) = out.last_mut() {
        last.space_after = true;
    }
    out
}

/// The length in bytes of the markup tag at the start of `text` (`<i>`, `</sup>`,
/// `<xref ref-type="fig" rid="F1">`), or `None` when `<` does not open one (`p < 0.05`).
fn tag_length(text: &str) -> Option<usize> {
    let rest = &text[1..];
    let name_start = rest.strip_prefix('/').unwrap_or(rest);
    if !name_start.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let end = text.find('>')?;
    let inner = &text[1..end];
    // A tag name is letters and digits; attributes follow after a space.
    let name: &str = inner
        .trim_start_matches('/')
        .split(' ')
        .next()
        .unwrap_or("");
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()) && !inner.contains('<'))
        .then_some(end + 1)
}

fn tag_token(pieces: &[Piece], i: usize) -> String {
    let piece = &pieces[i];
    let closing = piece.text.starts_with("</");
    let prev = i.checked_sub(1).map(|k| &pieces[k]);
    let next = pieces.get(i + 1);
    let glued_before = !piece.space_before && prev.is_some_and(|p| !p.tag && p.text != ",");
    let glued_after = !piece.space_after && next.is_some_and(|n| !n.text.starts_with([',', ')']));
    let mut token = String::with_capacity(piece.text.len() + 1);
    if !closing && glued_before {
        token.push('@');
    }
    token.push_str(piece.text);
    if closing && glued_after {
        token.push('@');
    }
    token
}

/// Whether the word before a final period keeps it: an abbreviation (`al.`, `e.g.`), an
/// initial (`M.`), or a word with a period inside (`U.S.`).
fn keeps_period(word: &[char]) -> bool {
    const ABBREVIATIONS: &[&str] = &[
        "al", "e.g", "i.e", "etc", "vs", "cf", "approx", "ca", "Dr", "Mr", "Mrs", "Ms", "St", "Jr",
        "Inc", "Ltd", "Co", "No", "Nos", "resp",
    ];
    let text: String = word.iter().collect();
    let bare = text.trim_start_matches(['(', '[', '"']);
    ABBREVIATIONS.contains(&bare)
        || bare.contains('.')
        || (bare.chars().count() == 1 && bare.chars().all(|c| c.is_alphabetic()))
}

/// Whether the single slash at `at` splits its word (`MKK/MEK`, `1/2`, `Chk2/Cds1`); two
/// lower-case words (`serine/threonine`, `and/or`) and a name with a number (`DBA/2`) stay
/// whole.
fn splits_slash(word: &[char], at: usize) -> bool {
    let left: Vec<char> = word[..at]
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric())
        .copied()
        .collect();
    let right: Vec<char> = word[at + 1..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric())
        .copied()
        .collect();
    let lower_word = |w: &[char]| w.iter().all(|c| c.is_ascii_lowercase());
    let digits = |w: &[char]| w.iter().all(|c| c.is_ascii_digit());
    let both_lower = lower_word(&left) && lower_word(&right);
    let name_number = left.first().is_some_and(|c| c.is_ascii_alphabetic()) && digits(&right);
    !both_lower && !name_number
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// Characters that are always a token of their own.
fn is_split_char(c: char) -> bool {
    matches!(
        c,
        '(' | ')'
            | '['
            | ']'
            | '{'
            | '}'
            | ';'
            | '"'
            | '\u{201c}'
            | '\u{201d}'
            | '?'
            | '!'
            | '%'
            | '='
            | '<'
            | '>'
            | '~'
    )
}

/// Splits one whitespace-free run of text into tokens; `last` when it ends the sentence, so
/// that a final period is split off.
fn split_word(text: &str, last: bool, tokens: &mut Vec<String>) {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    // A final period (after any closing brackets or quotes are set aside) ends the sentence.
    let mut end = n;
    let mut tail: Vec<String> = Vec::new();
    if !last && n > 1 && chars[n - 1] == '.' && !keeps_period(&chars[..n - 1]) {
        end = n - 1;
        tail.push(".".to_string());
    }
    if last {
        let mut k = n;
        while k > 0 && matches!(chars[k - 1], ')' | ']' | '"' | '\u{201d}' | '\'') {
            k -= 1;
        }
        if k > 0 && chars[k - 1] == '.' && !(k > 1 && chars[k - 2] == '.') {
            end = k - 1;
            tail.push(".".to_string());
            for &c in &chars[k..] {
                tail.push(c.to_string());
            }
        }
    }
    let slashes = text.matches('/').count();
    let single_slash = slashes == 1 && !text.contains('-');
    let mut word = String::new();
    let flush = |word: &mut String, tokens: &mut Vec<String>| {
        if !word.is_empty() {
            tokens.push(std::mem::take(word));
        }
    };
    let mut i = 0;
    while i < end {
        let c = chars[i];
        let prev = (i > 0).then(|| chars[i - 1]);
        let next = (i + 1 < end).then(|| chars[i + 1]);
        let word_before = prev.is_some_and(is_word_char) && !word.is_empty();
        let word_after = next.is_some_and(is_word_char);
        match c {
            // Several slashes make one word (`Grb2/FRS2/Shp2`, `onc/wt/-`).
            '/' if !word.is_empty() && slashes > 1 => word.push(c),
            '/' if word_before
                && word_after
                && !(single_slash && splits_slash(&chars[..end], i)) =>
            {
                word.push(c);
            }
            '-' | '/' | ':' if word_before && word_after => {
                // `:` joins only digits (`1:500`), `-` and `/` letters and digits.
                if c == ':'
                    && !(prev.is_some_and(|p| p.is_ascii_digit())
                        && next.is_some_and(|x| x.is_ascii_digit()))
                {
                    flush(&mut word, tokens);
                    tokens.push(":".to_string());
                } else {
                    flush(&mut word, tokens);
                    tokens.push(format!("@{c}@"));
                }
            }
            '-' if word.is_empty() && word_after => {
                tokens.push("-@".to_string());
            }
            '-' if word_before && next.is_none() => {
                flush(&mut word, tokens);
                tokens.push("@-".to_string());
            }
            ',' | '.'
                if word_before
                    && next.is_some_and(|x| x.is_ascii_digit())
                    && prev.is_some_and(|p| p.is_ascii_digit()) =>
            {
                word.push(c);
            }
            ',' | ':' | '/' => {
                flush(&mut word, tokens);
                tokens.push(c.to_string());
            }
            '\'' | '\u{2019}' if !word.is_empty() => {
                let rest: String = chars[i + 1..end].iter().collect();
                if (rest == "s" || rest == "S") && i + 2 == end {
                    flush(&mut word, tokens);
                    tokens.push(format!("'{rest}"));
                    i = end;
                    continue;
                }
                if (rest == "t" || rest == "T") && word.ends_with(['n', 'N']) {
                    let stem_len = word.len() - 1;
                    let n_char = word[stem_len..].to_string();
                    word.truncate(stem_len);
                    flush(&mut word, tokens);
                    tokens.push(format!("{n_char}'{rest}"));
                    i = end;
                    continue;
                }
                if word_after {
                    word.push(c);
                } else {
                    flush(&mut word, tokens);
                    tokens.push(c.to_string());
                }
            }
            '\'' | '\u{2018}' | '\u{2019}' => {
                flush(&mut word, tokens);
                tokens.push(c.to_string());
            }
            // An opening parenthesis right after a word stays on it (`p34(Cdc2)`).
            '(' if word_before => {
                word.push(c);
                flush(&mut word, tokens);
            }
            // A closing parenthesis right after another or after `%` joins it (`))`, `%)`).
            ')' if word.is_empty() && matches!(prev, Some(')' | '%')) && !tokens.is_empty() => {
                if let Some(last) = tokens.last_mut() {
                    last.push(c);
                }
            }
            c if is_split_char(c) => {
                flush(&mut word, tokens);
                tokens.push(c.to_string());
            }
            c => word.push(c),
        }
        i += 1;
    }
    flush(&mut word, tokens);
    tokens.extend(tail);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sentences and their `# ::tok` lines from the Bio AMR release (ISI alignments).
    #[test]
    fn matches_isi_release_tokenization() {
        for (snt, tok) in [
            (
                "Genetic targeting of mutant <i>BRAF</i> resulted in restoration of sensitivity to serum starvation-induced apoptosis.",
                "Genetic targeting of mutant <i> BRAF </i> resulted in restoration of sensitivity to serum starvation @-@ induced apoptosis .",
            ),
            (
                "It has been shown that B-Raf<sup>V600E</sup> is sufficient [<xref ref-type=\"bibr\" rid=\"B14\">14</xref>-<xref ref-type=\"bibr\" rid=\"B16\">16</xref>].",
                "It has been shown that B @-@ Raf @<sup> V600E </sup> is sufficient [ @<xref ref-type=\"bibr\" rid=\"B14\"> 14 </xref>@ - @<xref ref-type=\"bibr\" rid=\"B16\"> 16 </xref>@ ] .",
            ),
            (
                "yielding six <i>BRAF</i>-mutant and one wild-type clone from approximately 10<sup>4</sup> screened colonies.",
                "yielding six <i> BRAF </i>@ -@ mutant and one wild @-@ type clone from approximately 10 @<sup> 4 </sup> screened colonies .",
            ),
            (
                "(RKO-derived <i>BRAF</i><sup>onc/wt/-</sup>).",
                "( RKO @-@ derived <i> BRAF </i>@ <sup> onc/wt/- </sup> ) .",
            ),
            (
                "colorectal cancer [<xref ref-type=\"bibr\" rid=\"B21\">21</xref>,<xref ref-type=\"bibr\" rid=\"B22\">22</xref>].",
                "colorectal cancer [ @<xref ref-type=\"bibr\" rid=\"B21\"> 21 </xref> , <xref ref-type=\"bibr\" rid=\"B22\"> 22 </xref>@ ] .",
            ),
            (
                "in less than 5% of cells (Figure <xref ref-type=\"fig\" rid=\"F2\">2</xref>D-E), indicating",
                "in less than 5 % of cells ( Figure <xref ref-type=\"fig\" rid=\"F2\"> 2 </xref>@ D @-@ E ) , indicating",
            ),
            (
                "At the end of 1922, Jaffa had 32,000 residents and 0.5 mM, et al. found.",
                "At the end of 1922 , Jaffa had 32,000 residents and 0.5 mM , et al. found .",
            ),
        ] {
            let expected: Vec<String> = split_tokenized(tok);
            assert_eq!(tokenize(snt), expected, "{snt}");
        }
    }

    #[test]
    fn tokenized_lines_keep_tags_whole() {
        assert_eq!(
            split_tokenized("a <xref ref-type=\"fig\" rid=\"F1\"> 1 </xref>@ B"),
            [
                "a",
                "<xref ref-type=\"fig\" rid=\"F1\">",
                "1",
                "</xref>@",
                "B"
            ]
        );
    }
}
