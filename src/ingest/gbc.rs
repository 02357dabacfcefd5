//! Reader for the `gbc` input format: apple/ml-gbc graphs as `.jsonl` (one record per line),
//! `.json` (a list of records, or one record) or `.parquet` (ml-gbc's pandas layout), or a
//! directory of such files (read in name order).
//!
//! Every format streams: JSONL line by line, JSON list element by element (a small scanner finds
//! each element's extent, so one broken element is rejected on its own and the reader goes on),
//! Parquet by record batches. A record is one line, one list element or one Parquet row; each is
//! either accepted as a [`GbcGraphRow`](crate::schema::GbcGraphRow) or rejected with its file,
//! line/offset and the reason (see [`row_from_record`] for what is checked).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use serde_json::Value;

use super::lines::{read_line, skip_bom};
use super::{RecordSink, Row, MAX_RECORD_BYTES};
use crate::error::{Error, Result};
use crate::graph::gbc::{
    read_parquet_records, restore_caption_field_order, row_from_record, GbcFileFormat,
};
use crate::schema::{excerpt, RejectedRow};

/// The format name in rejected records.
pub const FORMAT_NAME: &str = "gbc";

/// Reads a GBC file, or every `.jsonl`/`.json`/`.parquet` file of a directory, into `sink`.
pub fn read(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    if path.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
            let file = entry.map_err(|e| Error::io(path, e))?.path();
            // Anything named like a GBC file but a directory is read, so that a FIFO or a
            // broken link is an error naming it rather than a file skipped without a word.
            if !file.is_dir() && GbcFileFormat::from_path(&file).is_some() {
                files.push(file);
            }
        }
        files.sort();
        for file in files {
            read_file(&file, sink)?;
        }
        return Ok(());
    }
    read_file(path, sink)
}

/// Reads one GBC file, its layout chosen by extension.
pub fn read_file(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    match GbcFileFormat::from_path(path) {
        Some(GbcFileFormat::Jsonl) => read_jsonl(path, sink),
        Some(GbcFileFormat::Json) => read_json(path, sink),
        Some(GbcFileFormat::Parquet) => read_parquet(path, sink),
        None => {
            // A missing file is missing whatever its name (exit 4, as for any input).
            std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
            Err(Error::Usage(format!(
                "{}: not a GBC file (expected a .jsonl, .json or .parquet extension)",
                path.display()
            )))
        }
    }
}

/// Where a record sits in its file.
struct Locator {
    record: String,
    line: Option<i64>,
    byte_offset: Option<i64>,
}

/// Turns one parsed record into a row or a rejection.
struct RecordIntake<'a> {
    file: String,
    sink: &'a mut dyn RecordSink,
    /// Ordinal of the next record in the file, for `<file>:<index>` image ids.
    index: usize,
}

impl<'a> RecordIntake<'a> {
    fn new(path: &Path, sink: &'a mut dyn RecordSink) -> Self {
        RecordIntake {
            file: path.display().to_string(),
            sink,
            index: 0,
        }
    }

    fn take(
        &mut self,
        parsed: std::result::Result<Value, String>,
        at: Locator,
        raw: &str,
    ) -> Result<()> {
        let index = self.index;
        self.index += 1;
        let file = &self.file;
        let row = parsed.and_then(|value| row_from_record(value, || format!("{file}:{index}")));
        match row {
            Ok(row) => {
                self.sink.row(Row::GbcGraph(row))?;
                self.sink.accepted()
            }
            Err(reason) => self.reject(at, reason, raw),
        }
    }

    /// Rejects a record that was not parsed, counting it like any other.
    fn skip(&mut self, at: Locator, reason: String, raw: &str) -> Result<()> {
        self.index += 1;
        self.reject(at, reason, raw)
    }

    fn reject(&mut self, at: Locator, reason: String, raw: &str) -> Result<()> {
        self.sink.reject(RejectedRow {
            format: FORMAT_NAME.to_string(),
            source_file: self.file.clone(),
            record: at.record,
            line: at.line,
            byte_offset: at.byte_offset,
            reason,
            excerpt: excerpt(raw),
        })
    }
}

fn parse_json(bytes: &[u8]) -> std::result::Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}"))
}

/// A record longer than [`MAX_RECORD_BYTES`] is rejected as too large.
fn too_large(what: &str) -> String {
    format!(
        "{what} is larger than the {} MiB record limit; it was skipped to its end",
        MAX_RECORD_BYTES >> 20
    )
}

/// Bytes of an oversized record kept for its excerpt.
const OVERSIZED_EXCERPT_BYTES: usize = 4096;

fn read_jsonl(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    let file = super::open_input(path)?;
    let io = |e| Error::io(path, e);
    let mut reader = BufReader::new(file);
    let mut intake = RecordIntake::new(path, sink);
    let mut buf = Vec::new();
    let mut line_no: i64 = 0;
    let mut offset = skip_bom(&mut reader).map_err(io)? as i64;
    while let Some(line) = read_line(&mut reader, &mut buf, MAX_RECORD_BYTES).map_err(io)? {
        line_no += 1;
        let start = offset;
        offset += line.consumed as i64;
        let at = Locator {
            record: format!("line {line_no}"),
            line: Some(line_no),
            byte_offset: Some(start),
        };
        if line.too_long {
            let kept = &buf[..buf.len().min(OVERSIZED_EXCERPT_BYTES)];
            intake.skip(at, too_large("the line"), &String::from_utf8_lossy(kept))?;
            // Give back the memory of the long line.
            buf = Vec::new();
            continue;
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        intake.take(parse_json(&buf), at, &String::from_utf8_lossy(&buf))?;
    }
    Ok(())
}

fn read_parquet(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    let mut intake = RecordIntake::new(path, sink);
    read_parquet_records(path, |row, record| {
        let raw = record.as_ref().map(Value::to_string).unwrap_or_default();
        let record = record.map(|mut value| {
            restore_caption_field_order(&mut value);
            value
        });
        let at = Locator {
            record: format!("row {row}"),
            line: None,
            byte_offset: None,
        };
        intake.take(record, at, &raw)
    })
}

/// A byte source that knows its line and offset.
struct Cursor<R: Read> {
    bytes: std::io::Bytes<BufReader<R>>,
    peeked: Option<u8>,
    line: i64,
    offset: i64,
}

impl<R: Read> Cursor<R> {
    fn new(reader: R) -> Self {
        Cursor {
            bytes: BufReader::new(reader).bytes(),
            peeked: None,
            line: 1,
            offset: 0,
        }
    }

    fn peek(&mut self) -> std::io::Result<Option<u8>> {
        if self.peeked.is_none() {
            self.peeked = self.bytes.next().transpose()?;
        }
        Ok(self.peeked)
    }

    fn next(&mut self) -> std::io::Result<Option<u8>> {
        let byte = self.peek()?;
        self.peeked = None;
        if let Some(b) = byte {
            self.offset += 1;
            if b == b'\n' {
                self.line += 1;
            }
        }
        Ok(byte)
    }

    /// Skips whitespace and returns the next significant byte without consuming it.
    fn skip_whitespace(&mut self) -> std::io::Result<Option<u8>> {
        while let Some(b) = self.peek()? {
            if !b.is_ascii_whitespace() {
                return Ok(Some(b));
            }
            self.next()?;
        }
        Ok(None)
    }
}

/// How a list element ended.
enum ElementEnd {
    /// A `,` follows: more elements.
    Comma,
    /// The closing `]` of the list.
    ListEnd,
    /// The file ended inside the element.
    Eof,
}

fn read_json(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    let file = super::open_input(path)?;
    let io = |e| Error::io(path, e);
    let mut cursor = Cursor::new(file);
    let mut intake = RecordIntake::new(path, sink);
    // A UTF-8 byte order mark is not JSON but editors write it.
    for bom in [0xEF, 0xBB, 0xBF] {
        if cursor.peek().map_err(io)? == Some(bom) {
            cursor.next().map_err(io)?;
        }
    }
    let locate = |cursor: &Cursor<File>, what: String| Locator {
        record: format!("{what} (line {})", cursor.line),
        line: Some(cursor.line),
        byte_offset: Some(cursor.offset),
    };
    match cursor.skip_whitespace().map_err(io)? {
        None => Ok(()),
        Some(b'[') => {
            cursor.next().map_err(io)?;
            let mut element = Vec::new();
            for index in 0usize.. {
                if index == 0 && cursor.skip_whitespace().map_err(io)? == Some(b']') {
                    break;
                }
                cursor.skip_whitespace().map_err(io)?;
                let at = locate(&cursor, format!("element {index}"));
                element.clear();
                let (end, fits) =
                    scan_element(&mut cursor, &mut element, MAX_RECORD_BYTES).map_err(io)?;
                if !fits {
                    let cut = &element[..element.len().min(OVERSIZED_EXCERPT_BYTES)];
                    let raw = String::from_utf8_lossy(cut);
                    intake.skip(at, too_large("the list element"), &raw)?;
                    element = Vec::new();
                    if matches!(end, ElementEnd::Comma) {
                        continue;
                    }
                    break;
                }
                let raw = String::from_utf8_lossy(&element).into_owned();
                if matches!(end, ElementEnd::Eof) {
                    let reason = "the file ends inside this list element".to_string();
                    if !raw.trim().is_empty() {
                        intake.reject(at, reason, &raw)?;
                    }
                    break;
                }
                if raw.trim().is_empty() {
                    intake.reject(at, "empty list element (a stray comma)".to_string(), &raw)?;
                } else {
                    intake.take(parse_json(&element), at, &raw)?;
                }
                if matches!(end, ElementEnd::ListEnd) {
                    break;
                }
            }
            if cursor.skip_whitespace().map_err(io)?.is_some() {
                tracing::warn!(
                    "{}: ignoring data after the closing `]` (line {})",
                    path.display(),
                    cursor.line
                );
            }
            Ok(())
        }
        Some(_) => {
            // One record: the whole file is the object.
            let at = locate(&cursor, "record 0".to_string());
            let mut all = Vec::new();
            let mut fits = true;
            while let Some(b) = cursor.next().map_err(io)? {
                if all.len() < MAX_RECORD_BYTES {
                    all.push(b);
                } else {
                    fits = false;
                }
            }
            if !fits {
                let raw = String::from_utf8_lossy(&all[..OVERSIZED_EXCERPT_BYTES]);
                return intake.skip(at, too_large("the record"), &raw);
            }
            let raw = String::from_utf8_lossy(&all).into_owned();
            let parsed = parse_json(&all).and_then(|value| match value {
                Value::Object(_) => Ok(value),
                _ => Err("expected a list of GBC graphs or one graph object".to_string()),
            });
            intake.take(parsed, at, &raw)
        }
    }
}

/// Collects one list element's bytes up to (not including) the `,` or `]` that ends it at the
/// list's own nesting level, skipping over strings. At most `limit` bytes are kept; the flag
/// says whether the whole element fit.
fn scan_element<R: Read>(
    cursor: &mut Cursor<R>,
    out: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<(ElementEnd, bool)> {
    let mut fits = true;
    let mut keep = |out: &mut Vec<u8>, b: u8| {
        if out.len() < limit {
            out.push(b);
        } else {
            fits = false;
        }
    };
    let end = scan_element_into(cursor, out, &mut keep)?;
    Ok((end, fits))
}

fn scan_element_into<R: Read>(
    cursor: &mut Cursor<R>,
    out: &mut Vec<u8>,
    keep: &mut impl FnMut(&mut Vec<u8>, u8),
) -> std::io::Result<ElementEnd> {
    let mut depth: usize = 0;
    let mut in_string = false;
    let mut escaped = false;
    while let Some(b) = cursor.next()? {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            keep(out, b);
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            b']' if depth == 0 => return Ok(ElementEnd::ListEnd),
            b']' => depth -= 1,
            b',' if depth == 0 => return Ok(ElementEnd::Comma),
            _ => {}
        }
        keep(out, b);
    }
    Ok(ElementEnd::Eof)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_elements_past_the_limit_are_cut_but_scanned_whole() {
        let mut cursor = Cursor::new(&br#"{"a": "]x,"}, 2]"#[..]);
        let mut out = Vec::new();
        let (end, fits) = scan_element(&mut cursor, &mut out, 4).unwrap();
        assert!(matches!(end, ElementEnd::Comma) && !fits);
        assert_eq!(out, br#"{"a""#);
        out.clear();
        let (end, fits) = scan_element(&mut cursor, &mut out, 4).unwrap();
        assert!(matches!(end, ElementEnd::ListEnd) && fits);
        assert_eq!(out, b" 2");
    }
}
