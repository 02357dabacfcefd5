//! Splitting an AMR file into graph blocks, line by line, so a reader can stream a corpus of any
//! size and one broken graph never hides the rest.
//!
//! A block is a graph's comment and metadata lines followed by the graph, up to the line where
//! its parentheses balance. Recovery from a broken graph: a graph that is still open ends at a
//! comment line (penman allows no comments inside a graph) or at a blank line followed by a
//! line starting with `(` in the first column. Comment lines separated by a blank line from
//! more comment lines (a file header such as `# AMR-English alignment release ...`) belong to
//! no graph; nor do comments after the last graph.
//!
//! A block is held in memory up to a limit ([`MAX_RECORD_BYTES`]); past it, the block's
//! structure is still followed to find where it ends, but its text is no longer kept and the
//! block is marked `oversized`, to be rejected.

use std::borrow::Cow;

use super::lexer::{Kind, Lexer};
use crate::ingest::MAX_RECORD_BYTES;

/// One block of raw text, as found in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawBlock {
    /// 1-based line of the block's first line.
    pub line: usize,
    pub byte_offset: usize,
    /// The block's lines, without the last line's terminator.
    pub text: String,
    /// First line (1-based) that was not valid UTF-8, shown with replacement characters.
    pub invalid_utf8: Option<usize>,
    /// The block was longer than the limit: `text` holds its first lines only.
    pub oversized: bool,
}

struct Pending {
    block: RawBlock,
    /// A `(` has been seen.
    opened: bool,
    depth: i64,
    /// A line that is neither a comment nor part of a graph came before any `(`.
    stray: bool,
    /// Blank lines after the last line of the block, kept in case the block goes on.
    held: String,
    /// Blank lines that did not fit the limit were not kept in `held`.
    held_overflow: bool,
}

impl Pending {
    fn new(line: &str, line_no: usize, byte_offset: usize, limit: usize) -> Pending {
        let oversized = line.len() > limit;
        Pending {
            block: RawBlock {
                line: line_no,
                byte_offset,
                text: if oversized {
                    String::new()
                } else {
                    line.to_string()
                },
                invalid_utf8: None,
                oversized,
            },
            opened: false,
            depth: 0,
            stray: false,
            held: String::new(),
            held_overflow: false,
        }
    }

    /// Appends the held blank lines and `line` to the block's text, within `limit`.
    fn append(&mut self, line: &str, limit: usize) {
        let held = std::mem::take(&mut self.held);
        let overflow = std::mem::take(&mut self.held_overflow);
        let text = &mut self.block.text;
        if overflow || text.len() + held.len() + line.len() > limit {
            self.block.oversized = true;
        }
        if !self.block.oversized {
            text.push_str(&held);
            text.push_str(line);
        }
    }

    fn hold(&mut self, blank: &str, limit: usize) {
        if self.held.len() + blank.len() > limit {
            self.held_overflow = true;
        } else {
            self.held.push_str(blank);
        }
    }
}

pub(crate) struct BlockSplitter {
    pending: Option<Pending>,
    /// Largest block text kept.
    limit: usize,
}

impl Default for BlockSplitter {
    fn default() -> Self {
        BlockSplitter {
            pending: None,
            limit: MAX_RECORD_BYTES,
        }
    }
}

/// The lines of `text` with their line ends: `\n`, `\r\n`, or a lone `\r`, which is given as
/// `\n` (the same length, so byte offsets still add up).
pub(crate) fn split_lines(text: &str) -> impl Iterator<Item = Cow<'_, str>> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (line, next) = match rest.find(['\n', '\r']) {
            None => (Cow::Borrowed(rest), ""),
            Some(i) if rest[i..].starts_with("\r\n") => {
                (Cow::Borrowed(&rest[..i + 2]), &rest[i + 2..])
            }
            Some(i) if rest.as_bytes()[i] == b'\n' => {
                (Cow::Borrowed(&rest[..i + 1]), &rest[i + 1..])
            }
            Some(i) => (Cow::Owned(format!("{}\n", &rest[..i])), &rest[i + 1..]),
        };
        rest = next;
        Some(line)
    })
}

fn trim_terminator(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r'])
}

fn trim_block(mut text: String) -> String {
    let kept = trim_terminator(&text).len();
    text.truncate(kept);
    text
}

impl BlockSplitter {
    /// Feeds one line (with its terminator); completed blocks are pushed onto `out`.
    pub(crate) fn push_line(
        &mut self,
        line: &str,
        line_no: usize,
        byte_offset: usize,
        valid_utf8: bool,
        out: &mut Vec<RawBlock>,
    ) {
        let content = trim_terminator(line);
        let trimmed = content.trim_start();
        let blank = trimmed.is_empty();
        let comment = trimmed.starts_with('#');
        let paren_at_start = content.starts_with('(');
        if let Some(p) = &mut self.pending {
            if blank {
                p.hold(line, self.limit);
                return;
            }
            let after_blank = !p.held.is_empty() || p.held_overflow;
            if p.opened {
                if comment || (after_blank && paren_at_start) {
                    self.emit_pending(out);
                }
            } else if p.stray {
                if after_blank && (comment || paren_at_start) {
                    self.emit_pending(out);
                }
            } else if after_blank && comment {
                // A comment group cut off by a blank line from more comments is a header.
                self.pending = None;
            }
        }
        match &mut self.pending {
            Some(p) => p.append(line, self.limit),
            None if blank => return,
            None => self.pending = Some(Pending::new(line, line_no, byte_offset, self.limit)),
        }
        let Some(p) = &mut self.pending else { return };
        if !valid_utf8 && p.block.invalid_utf8.is_none() {
            p.block.invalid_utf8 = Some(line_no);
        }
        if !comment {
            let mut lexer = Lexer::new(content);
            while let Some(t) = lexer.next_token() {
                match t.kind {
                    Kind::LParen => {
                        p.opened = true;
                        p.depth += 1;
                    }
                    Kind::RParen => p.depth -= 1,
                    Kind::Comment => {}
                    _ if !p.opened => p.stray = true,
                    _ => {}
                }
            }
        }
        if p.opened && p.depth <= 0 {
            self.emit_pending(out);
        }
    }

    /// Feeds a line longer than the limit, of which only `kept` (its first bytes) was kept:
    /// the structure of what follows cannot be trusted, so the block it belongs to (or a block
    /// of its own) ends here, oversized.
    pub(crate) fn push_oversized_line(
        &mut self,
        kept: &str,
        line_no: usize,
        byte_offset: usize,
        out: &mut Vec<RawBlock>,
    ) {
        let p = self
            .pending
            .get_or_insert_with(|| Pending::new(kept, line_no, byte_offset, usize::MAX));
        p.block.oversized = true;
        self.emit_pending(out);
    }

    #[cfg(test)]
    pub(crate) fn with_limit(limit: usize) -> BlockSplitter {
        BlockSplitter {
            pending: None,
            limit,
        }
    }

    fn emit_pending(&mut self, out: &mut Vec<RawBlock>) {
        if let Some(p) = self.pending.take() {
            out.push(RawBlock {
                text: trim_block(p.block.text),
                ..p.block
            });
        }
    }

    /// No block is open: text after this point starts afresh.
    pub(crate) fn idle(&self) -> bool {
        self.pending.is_none()
    }

    /// Ends the input: an unfinished graph (or stray text) is the last block; trailing
    /// comments are not a block.
    pub(crate) fn finish(&mut self) -> Option<RawBlock> {
        let p = self.pending.take()?;
        (p.opened || p.stray).then(|| RawBlock {
            text: trim_block(p.block.text),
            ..p.block
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<(usize, usize, String)> {
        let mut splitter = BlockSplitter::default();
        let mut out = Vec::new();
        let mut offset = 0;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            splitter.push_line(line, i + 1, offset, true, &mut out);
            offset += line.len();
        }
        out.extend(splitter.finish());
        out.into_iter()
            .map(|b| (b.line, b.byte_offset, b.text))
            .collect()
    }

    #[test]
    fn header_is_dropped_and_metadata_attached() {
        let text = "# release v3\n# generated\n\n# ::id a.1\n(a / b\n   :ARG0 (c / d))\n\n# ::id a.2\n(e / f)\n# trailing\n";
        assert_eq!(
            split(text),
            vec![
                (4, 26, "# ::id a.1\n(a / b\n   :ARG0 (c / d))".to_string()),
                (8, 63, "# ::id a.2\n(e / f)".to_string()),
            ]
        );
    }

    #[test]
    fn broken_graph_ends_at_next_graph() {
        let text =
            "# ::id 1\n(a / b\n   :ARG0 (c / d)\n\n# ::id 2\n(e / f)\n(g / h :ARG0 \"x)\")\n";
        let blocks = split(text);
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0].2, "# ::id 1\n(a / b\n   :ARG0 (c / d)");
        assert_eq!(blocks[1].0, 5);
        assert_eq!(blocks[2].2, "(g / h :ARG0 \"x)\")");
    }

    #[test]
    fn blank_line_inside_an_indented_graph_is_kept() {
        let text = "(a / b\n\n   :ARG0 (c / d))\n";
        assert_eq!(
            split(text),
            vec![(1, 0, "(a / b\n\n   :ARG0 (c / d))".to_string())]
        );
    }

    #[test]
    fn blocks_past_the_limit_are_cut_and_marked() {
        // An unclosed graph that keeps going, then a graph of its own after a blank line.
        let text = "(a / b\n:ARG0 (c / d\n:ARG1 (e / f\n\n(g / h)\n";
        let mut splitter = BlockSplitter::with_limit(16);
        let mut out = Vec::new();
        let mut offset = 0;
        for (i, line) in split_lines(text).enumerate() {
            splitter.push_line(&line, i + 1, offset, true, &mut out);
            offset += line.len();
        }
        out.extend(splitter.finish());
        let blocks: Vec<(usize, bool, &str)> = out
            .iter()
            .map(|b| (b.line, b.oversized, b.text.as_str()))
            .collect();
        assert_eq!(
            blocks,
            // 7 bytes of the first line fit in 16; with the second line's 13 they would not.
            [(1, true, "(a / b"), (5, false, "(g / h)")]
        );
        let mut splitter = BlockSplitter::default();
        let mut out = Vec::new();
        splitter.push_oversized_line("(x", 1, 0, &mut out);
        splitter.push_line("(y / z)\n", 2, 99, true, &mut out);
        let lines: Vec<(usize, bool)> = out.iter().map(|b| (b.line, b.oversized)).collect();
        assert_eq!(lines, [(1, true), (2, false)]);
    }

    #[test]
    fn lone_carriage_returns_end_lines() {
        let lines: Vec<String> = split_lines("a\rb\r\nc\nd")
            .map(|l| l.into_owned())
            .collect();
        assert_eq!(lines, ["a\n", "b\r\n", "c\n", "d"]);
    }

    #[test]
    fn stray_text_is_its_own_block() {
        let text = "hello world\n\n(a / b)\n";
        let blocks = split(text);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].2, "hello world");
        assert_eq!(blocks[1].2, "(a / b)");
    }
}
