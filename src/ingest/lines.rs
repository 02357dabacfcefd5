//! Line-by-line reading for the text formats (Flickr30k sentence files, GBC `.jsonl`, PENMAN),
//! with the two things `BufRead::read_until` does not give: every line ending in use is a line
//! end (`\n`, `\r\n`, and a lone `\r` as old Mac editors write it), and a line is kept only up to
//! a limit, the rest of a longer line being consumed without being held, so that a file with no
//! line end at all cannot grow memory without bound.

use std::io::{self, BufRead};

/// How a line ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineEnd {
    /// `\n`.
    Lf,
    /// `\r\n`.
    CrLf,
    /// A `\r` not followed by `\n`.
    Cr,
    /// The end of the file, without a line end.
    Eof,
}

impl LineEnd {
    /// The line end as written after a line of normalized text: `\r\n` kept, a lone `\r`
    /// written as `\n`.
    pub fn as_str(self) -> &'static str {
        match self {
            LineEnd::Lf | LineEnd::Cr => "\n",
            LineEnd::CrLf => "\r\n",
            LineEnd::Eof => "",
        }
    }
}

/// One line read by [`read_line`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// Bytes consumed from the reader: the whole line with its line end, kept or not.
    pub consumed: u64,
    pub end: LineEnd,
    /// The line was longer than the limit: only its first `limit` bytes were kept.
    pub too_long: bool,
}

/// Skips a UTF-8 byte order mark at the reader's position; returns the bytes skipped (0 or 3).
/// Call it at the start of a file only.
pub fn skip_bom(reader: &mut impl BufRead) -> io::Result<u64> {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    if fill(reader)?.starts_with(BOM) {
        reader.consume(BOM.len());
        return Ok(BOM.len() as u64);
    }
    Ok(0)
}

fn fill(reader: &mut impl BufRead) -> io::Result<&[u8]> {
    loop {
        match reader.fill_buf() {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    reader.fill_buf()
}

/// Reads the next line into `buf` (cleared first; the line end is not kept), keeping at most
/// `limit` bytes of it. `None` at the end of the file.
pub fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Option<Line>> {
    buf.clear();
    let mut consumed = 0u64;
    let mut too_long = false;
    loop {
        let available = fill(reader)?;
        if available.is_empty() {
            if consumed == 0 {
                return Ok(None);
            }
            return Ok(Some(Line {
                consumed,
                end: LineEnd::Eof,
                too_long,
            }));
        }
        let stop = available.iter().position(|&b| b == b'\n' || b == b'\r');
        let content = stop.unwrap_or(available.len());
        let keep = content.min(limit.saturating_sub(buf.len()));
        buf.extend_from_slice(&available[..keep]);
        too_long |= keep < content;
        let terminator = stop.map(|i| available[i]);
        let used = stop.map_or(content, |i| i + 1);
        reader.consume(used);
        consumed += used as u64;
        let end = match terminator {
            None => continue,
            Some(b'\n') => LineEnd::Lf,
            Some(_) => {
                if fill(reader)?.first() == Some(&b'\n') {
                    reader.consume(1);
                    consumed += 1;
                    LineEnd::CrLf
                } else {
                    LineEnd::Cr
                }
            }
        };
        return Ok(Some(Line {
            consumed,
            end,
            too_long,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(bytes: &[u8], limit: usize, chunk: usize) -> Vec<(String, LineEnd, bool, u64)> {
        // A small buffer puts line ends (and the two bytes of `\r\n`) across refills.
        let mut reader = io::BufReader::with_capacity(chunk, bytes);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut reader, &mut buf, limit).unwrap() {
            out.push((
                String::from_utf8(buf.clone()).unwrap(),
                line.end,
                line.too_long,
                line.consumed,
            ));
        }
        out
    }

    #[test]
    fn every_line_ending_ends_a_line() {
        for chunk in [1, 2, 3, 64] {
            let got = lines(b"a\nbc\r\nd\re\r\rf", 100, chunk);
            let expected = [
                ("a", LineEnd::Lf, 2),
                ("bc", LineEnd::CrLf, 4),
                ("d", LineEnd::Cr, 2),
                ("e", LineEnd::Cr, 2),
                ("", LineEnd::Cr, 1),
                ("f", LineEnd::Eof, 1),
            ];
            let got: Vec<(&str, LineEnd, u64)> = got
                .iter()
                .map(|(t, e, _, n)| (t.as_str(), *e, *n))
                .collect();
            assert_eq!(got, expected, "buffer of {chunk} bytes");
        }
    }

    #[test]
    fn long_lines_are_cut_but_consumed_whole() {
        for chunk in [1, 4, 64] {
            let got = lines(b"abcdefgh\nxy\n", 3, chunk);
            assert_eq!(
                got,
                [
                    ("abc".to_string(), LineEnd::Lf, true, 9),
                    ("xy".to_string(), LineEnd::Lf, false, 3)
                ]
            );
        }
    }

    #[test]
    fn a_byte_order_mark_is_skipped_once() {
        let mut reader = io::BufReader::new(&b"\xEF\xBB\xBFx\n"[..]);
        assert_eq!(skip_bom(&mut reader).unwrap(), 3);
        assert_eq!(skip_bom(&mut reader).unwrap(), 0);
        let mut buf = Vec::new();
        read_line(&mut reader, &mut buf, 10).unwrap();
        assert_eq!(buf, b"x");
    }
}
