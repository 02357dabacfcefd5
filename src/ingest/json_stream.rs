//! Streaming walk over large JSON files, one record at a time.
//!
//! COCO, COCO-Entities and Visual Genome ship as single JSON documents of up to several GB whose
//! records sit in one top-level array (`[{...}, {...}]`) or under the keys of a top-level object
//! (`{"images": [...], "annotations": [...]}`, `{"<image id>": {...}}`). Loading such a document
//! into a `serde_json::Value` would need memory proportional to the file, so the readers use this
//! module instead: a [`JsonScanner`] tracks only the JSON *structure* (strings, brackets, commas)
//! and hands each record to the caller as its raw bytes, which the reader then parses on its own
//! with `serde_json`. Memory is bounded by the largest record ([`MAX_RECORD_BYTES`]).
//!
//! Working on raw record bytes rather than a `serde` visitor gives three things the readers need
//! for their rejected-record ledger: the byte offset where each record starts, an excerpt of a
//! broken record, and recovery: a record that is well-bracketed but not what the reader expected
//! (a missing field, a string where a number belongs, even invalid JSON inside balanced brackets)
//! is rejected on its own and the walk goes on with the next one. Only a break of the structure
//! itself (an unterminated string, mismatched brackets, a truncated file) ends the walk, because
//! nothing after it can be located reliably; the caller then rejects the rest of the file as one
//! record.

use std::io::{self, Read};

use serde_json::{Map, Value};

/// Largest single record kept in memory. A larger record is skipped (scanned to its end without
/// being kept) and rejected.
pub use super::MAX_RECORD_BYTES;

/// Deepest bracket nesting accepted inside one record; deeper input is treated as broken
/// structure. Real records nest a handful of levels; the limit keeps hostile input from growing
/// the bracket stack without bound.
const MAX_DEPTH: usize = 4096;

/// Why a walk stopped.
#[derive(Debug)]
pub enum ScanError {
    /// The file could not be read.
    Io(io::Error),
    /// The JSON structure is broken at `offset`; nothing after it can be located.
    Syntax { offset: u64, reason: String },
}

impl From<io::Error> for ScanError {
    fn from(e: io::Error) -> Self {
        ScanError::Io(e)
    }
}

/// Result of the structural walk.
pub type ScanResult<T> = std::result::Result<T, ScanError>;

/// How a captured value ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Captured {
    /// The whole value is in the buffer.
    Complete,
    /// The value was longer than the limit: the buffer holds its first bytes only, and the
    /// scanner stands after the value's end.
    TooLarge,
}

/// A byte-level cursor over a JSON document that understands only its structure.
pub struct JsonScanner<R> {
    reader: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    /// Bytes consumed before `buf[0]`.
    base: u64,
}

impl<R: Read> JsonScanner<R> {
    pub fn new(reader: R) -> Self {
        JsonScanner {
            reader,
            buf: vec![0; 64 << 10].into_boxed_slice(),
            pos: 0,
            len: 0,
            base: 0,
        }
    }

    /// Offset of the next unread byte from the start of the document.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn fill(&mut self) -> io::Result<bool> {
        if self.pos < self.len {
            return Ok(true);
        }
        self.base += self.len as u64;
        self.pos = 0;
        self.len = 0;
        loop {
            match self.reader.read(&mut self.buf) {
                Ok(n) => {
                    self.len = n;
                    return Ok(n > 0);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The next byte without consuming it; `None` at the end of the document.
    pub fn peek(&mut self) -> io::Result<Option<u8>> {
        if self.fill()? {
            Ok(Some(self.buf[self.pos]))
        } else {
            Ok(None)
        }
    }

    fn bump(&mut self) {
        self.pos += 1;
    }

    fn next(&mut self) -> io::Result<Option<u8>> {
        let b = self.peek()?;
        if b.is_some() {
            self.bump();
        }
        Ok(b)
    }

    /// Skips a UTF-8 byte order mark at the start of the document, if there is one.
    pub fn skip_bom(&mut self) -> ScanResult<()> {
        if self.offset() != 0 || self.peek()? != Some(0xEF) {
            return Ok(());
        }
        self.bump();
        for expected in [0xBB, 0xBF] {
            let found = self.next()?;
            if found != Some(expected) {
                return self.syntax("a UTF-8 byte order mark (EF BB BF)", found);
            }
        }
        Ok(())
    }

    /// Skips whitespace and peeks at the next byte.
    pub fn skip_ws(&mut self) -> io::Result<Option<u8>> {
        loop {
            match self.peek()? {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.bump(),
                other => return Ok(other),
            }
        }
    }

    /// Up to a few hundred bytes of the input around the scanner's position, for the excerpt
    /// of a rejected record when the structure broke.
    pub fn excerpt_here(&self) -> String {
        let from = self.pos.saturating_sub(128);
        let to = (self.pos + 384).min(self.len);
        excerpt_bytes(&self.buf[from..to])
    }

    fn syntax<T>(&self, expected: &str, found: Option<u8>) -> ScanResult<T> {
        Err(ScanError::Syntax {
            offset: self.offset(),
            reason: format!("expected {expected}, found {}", describe(found)),
        })
    }

    /// Consumes `byte` after optional whitespace, or fails saying it was expected.
    pub fn expect(&mut self, byte: u8, expected: &str) -> ScanResult<()> {
        match self.skip_ws()? {
            Some(b) if b == byte => {
                self.bump();
                Ok(())
            }
            other => self.syntax(expected, other),
        }
    }

    /// Checks that only whitespace is left.
    pub fn expect_end(&mut self) -> ScanResult<()> {
        match self.skip_ws()? {
            None => Ok(()),
            other => self.syntax("the end of the document", other),
        }
    }

    /// Reads an object key (a JSON string) and the `:` after it.
    pub fn read_key(&mut self) -> ScanResult<String> {
        let start = self.offset();
        if self.skip_ws()? != Some(b'"') {
            let found = self.peek()?;
            return self.syntax("an object key (a string)", found);
        }
        let mut raw = Vec::new();
        if self.capture_value(&mut raw, MAX_RECORD_BYTES)? == Captured::TooLarge {
            return Err(ScanError::Syntax {
                offset: start,
                reason: "an object key longer than the record limit".into(),
            });
        }
        let key: String = serde_json::from_slice(&raw).map_err(|e| ScanError::Syntax {
            offset: start,
            reason: format!("object key is not a valid JSON string: {e}"),
        })?;
        self.expect(b':', "':' after an object key")?;
        Ok(key)
    }

    /// Copies the next value (after whitespace) into `out`, keeping at most `limit` bytes.
    ///
    /// Strings and brackets are matched so that the scanner stops exactly after the value;
    /// scalars (numbers, `true`, `null`, ...) run to the next delimiter and are checked later by
    /// whoever parses the bytes.
    pub fn capture_value(&mut self, out: &mut Vec<u8>, limit: usize) -> ScanResult<Captured> {
        out.clear();
        let mut too_large = false;
        let mut keep = |out: &mut Vec<u8>, b: u8| {
            if out.len() < limit {
                out.push(b);
            } else {
                too_large = true;
            }
        };
        let first = match self.skip_ws()? {
            Some(b) => b,
            None => return self.syntax("a value", None),
        };
        match first {
            b'"' => {
                self.bump();
                keep(out, first);
                self.string_tail(out, &mut keep)?;
            }
            b'{' | b'[' => {
                let mut closers: Vec<u8> = Vec::new();
                loop {
                    let b = match self.next()? {
                        Some(b) => b,
                        None => return self.syntax("the rest of the value", None),
                    };
                    keep(out, b);
                    match b {
                        b'"' => self.string_tail(out, &mut keep)?,
                        b'{' | b'[' => {
                            if closers.len() >= MAX_DEPTH {
                                return self.syntax("less deeply nested brackets", Some(b));
                            }
                            closers.push(if b == b'{' { b'}' } else { b']' });
                        }
                        b'}' | b']' => {
                            if closers.pop() != Some(b) {
                                return Err(ScanError::Syntax {
                                    offset: self.offset() - 1,
                                    reason: format!("mismatched bracket {}", describe(Some(b))),
                                });
                            }
                            if closers.is_empty() {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            b',' | b':' | b'}' | b']' => return self.syntax("a value", Some(first)),
            _ => {
                while let Some(b) = self.peek()? {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    keep(out, b);
                    self.bump();
                }
            }
        }
        Ok(if too_large {
            Captured::TooLarge
        } else {
            Captured::Complete
        })
    }

    /// Consumes the rest of a string whose opening quote was already consumed.
    fn string_tail(
        &mut self,
        out: &mut Vec<u8>,
        keep: &mut impl FnMut(&mut Vec<u8>, u8),
    ) -> ScanResult<()> {
        loop {
            let b = match self.next()? {
                Some(b) => b,
                None => return self.syntax("the closing quote of a string", None),
            };
            keep(out, b);
            match b {
                b'"' => return Ok(()),
                b'\\' => match self.next()? {
                    Some(e) => keep(out, e),
                    None => return self.syntax("an escaped character", None),
                },
                _ => {}
            }
        }
    }

    /// Skips the next value without keeping it.
    pub fn skip_value(&mut self) -> ScanResult<()> {
        let mut sink = Vec::new();
        self.capture_value(&mut sink, 0).map(|_| ())
    }

    /// After an array element or object entry: consumes `,` (returns `true`, more follow) or
    /// the closing bracket (returns `false`).
    pub fn after_item(&mut self, close: u8) -> ScanResult<bool> {
        match self.skip_ws()? {
            Some(b',') => {
                self.bump();
                Ok(true)
            }
            Some(b) if b == close => {
                self.bump();
                Ok(false)
            }
            other => {
                let expected = if close == b']' {
                    "',' or ']' after an array element"
                } else {
                    "',' or '}' after an object entry"
                };
                self.syntax(expected, other)
            }
        }
    }

    /// Consumes the opening bracket and says whether the container is empty (closing bracket
    /// consumed too).
    pub fn open(&mut self, open: u8, close: u8, expected: &str) -> ScanResult<bool> {
        self.expect(open, expected)?;
        if self.skip_ws()? == Some(close) {
            self.bump();
            return Ok(true);
        }
        Ok(false)
    }
}

/// One element of a streamed array, as raw bytes.
pub struct RawRecord<'a> {
    /// Position in the array.
    pub index: usize,
    /// Byte offset of the element's first byte in the document.
    pub offset: u64,
    pub bytes: &'a [u8],
    pub captured: Captured,
}

impl RawRecord<'_> {
    /// The record's bytes as text for a rejected-record excerpt.
    pub fn excerpt(&self) -> String {
        excerpt_bytes(self.bytes)
    }

    /// Parses the record as a JSON object.
    pub fn parse_object(&self, what: &str) -> Result<Map<String, Value>, String> {
        if self.captured == Captured::TooLarge {
            return Err(format!(
                "{what} is larger than the {} MiB record limit",
                MAX_RECORD_BYTES >> 20
            ));
        }
        match serde_json::from_slice::<Value>(self.bytes) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(other) => Err(format!(
                "expected {what} (a JSON object), found {}",
                kind(&other)
            )),
            Err(e) => Err(format!("expected {what}, found invalid JSON: {e}")),
        }
    }
}

/// Walks the elements of the array the scanner stands before, calling `each` per element.
/// `each` may stop the walk by returning an error of its own type.
pub fn for_each_element<R: Read, E>(
    scanner: &mut JsonScanner<R>,
    mut each: impl FnMut(RawRecord<'_>) -> Result<(), E>,
) -> Result<ScanResult<()>, E> {
    let mut buf = Vec::new();
    let walk = (|| -> ScanResult<Option<E>> {
        if scanner.open(b'[', b']', "'[' (an array)")? {
            return Ok(None);
        }
        let mut index = 0;
        loop {
            scanner.skip_ws()?;
            let offset = scanner.offset();
            let captured = scanner.capture_value(&mut buf, MAX_RECORD_BYTES)?;
            let record = RawRecord {
                index,
                offset,
                bytes: &buf,
                captured,
            };
            if let Err(e) = each(record) {
                return Ok(Some(e));
            }
            index += 1;
            if !scanner.after_item(b']')? {
                return Ok(None);
            }
        }
    })();
    match walk {
        Ok(None) => Ok(Ok(())),
        Ok(Some(e)) => Err(e),
        Err(scan) => Ok(Err(scan)),
    }
}

/// Walks the entries of the object the scanner stands before: `each` gets the key and the
/// scanner positioned before the value, and must consume the value (read, capture or skip it).
pub fn for_each_entry<R: Read, E>(
    scanner: &mut JsonScanner<R>,
    mut each: impl FnMut(&str, &mut JsonScanner<R>) -> Result<ScanResult<()>, E>,
) -> Result<ScanResult<()>, E> {
    match scanner.open(b'{', b'}', "'{' (an object)") {
        Ok(true) => return Ok(Ok(())),
        Ok(false) => {}
        Err(e) => return Ok(Err(e)),
    }
    loop {
        let key = match scanner.read_key() {
            Ok(k) => k,
            Err(e) => return Ok(Err(e)),
        };
        if let Err(e) = each(&key, scanner)? {
            return Ok(Err(e));
        }
        match scanner.after_item(b'}') {
            Ok(true) => {}
            Ok(false) => return Ok(Ok(())),
            Err(e) => return Ok(Err(e)),
        }
    }
}

/// At most [`crate::schema::EXCERPT_LIMIT`] bytes of raw input as text.
pub fn excerpt_bytes(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(crate::schema::EXCERPT_LIMIT + 4)];
    crate::schema::excerpt(&String::from_utf8_lossy(cut))
}

/// Names a byte for an error message.
pub fn describe(found: Option<u8>) -> String {
    match found {
        None => "the end of the file".into(),
        Some(b) if b.is_ascii_graphic() => format!("'{}'", b as char),
        Some(b) => format!("byte 0x{b:02x}"),
    }
}

/// Names the kind of a JSON value for an error message.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Typed access to the fields of one JSON record, with messages that say what was expected.
pub trait Fields {
    fn field(&self, key: &str) -> Option<&Value>;

    /// An identifier: a non-negative or negative integer, or a string, printed in decimal.
    fn id(&self, key: &str) -> Result<String, String> {
        match self.field(key) {
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(other) => Err(format!(
                "field `{key}` should be an integer id, found {}",
                kind(other)
            )),
            None => Err(format!("missing field `{key}`")),
        }
    }

    fn int(&self, key: &str) -> Result<i64, String> {
        match self.field(key) {
            Some(Value::Number(n)) => n
                .as_i64()
                .ok_or_else(|| format!("field `{key}` should be an integer, found {n}")),
            Some(other) => Err(format!(
                "field `{key}` should be an integer, found {}",
                kind(other)
            )),
            None => Err(format!("missing field `{key}`")),
        }
    }

    fn opt_int(&self, key: &str) -> Result<Option<i64>, String> {
        match self.field(key) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.int(key).map(Some),
        }
    }

    /// A dimension (width, height) that fits Arrow's Int32 and is not negative.
    fn opt_dim(&self, key: &str) -> Result<Option<i32>, String> {
        match self.opt_int(key)? {
            None => Ok(None),
            Some(v) => i32::try_from(v)
                .ok()
                .filter(|v| *v >= 0)
                .map(Some)
                .ok_or_else(|| format!("field `{key}` should be a pixel size, found {v}")),
        }
    }

    fn num(&self, key: &str) -> Result<f64, String> {
        match self.field(key) {
            Some(Value::Number(n)) => n
                .as_f64()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("field `{key}` should be a finite number, found {n}")),
            Some(other) => Err(format!(
                "field `{key}` should be a number, found {}",
                kind(other)
            )),
            None => Err(format!("missing field `{key}`")),
        }
    }

    fn str(&self, key: &str) -> Result<&str, String> {
        match self.field(key) {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(format!(
                "field `{key}` should be a string, found {}",
                kind(other)
            )),
            None => Err(format!("missing field `{key}`")),
        }
    }

    fn opt_str(&self, key: &str) -> Result<Option<&str>, String> {
        match self.field(key) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.str(key).map(Some),
        }
    }

    /// A list of strings; absent or `null` is an empty list.
    fn str_list(&self, key: &str) -> Result<Vec<String>, String> {
        match self.field(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(format!(
                        "field `{key}` should list strings, found {}",
                        kind(other)
                    )),
                })
                .collect(),
            Some(other) => Err(format!(
                "field `{key}` should be a list of strings, found {}",
                kind(other)
            )),
        }
    }

    fn array(&self, key: &str) -> Result<&Vec<Value>, String> {
        match self.field(key) {
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(format!(
                "field `{key}` should be an array, found {}",
                kind(other)
            )),
            None => Err(format!("missing field `{key}`")),
        }
    }
}

impl Fields for Map<String, Value> {
    fn field(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elements(doc: &str) -> (Vec<(usize, u64, String)>, Option<String>) {
        let mut scanner = JsonScanner::new(doc.as_bytes());
        let mut seen = Vec::new();
        let res = for_each_element(&mut scanner, |r| -> Result<(), ()> {
            seen.push((
                r.index,
                r.offset,
                String::from_utf8(r.bytes.to_vec()).unwrap(),
            ));
            Ok(())
        })
        .unwrap();
        let err = match res {
            Ok(()) => None,
            Err(ScanError::Syntax { offset, reason }) => Some(format!("{offset}: {reason}")),
            Err(ScanError::Io(e)) => Some(e.to_string()),
        };
        (seen, err)
    }

    #[test]
    fn elements_come_with_offsets_and_raw_bytes() {
        let doc = r#" [ {"a": "x]\"}"}, 12 , [1,[2]], "s" ]"#;
        let (seen, err) = elements(doc);
        assert_eq!(err, None);
        let raws: Vec<&str> = seen.iter().map(|s| s.2.as_str()).collect();
        assert_eq!(raws, [r#"{"a": "x]\"}"}"#, "12", "[1,[2]]", r#""s""#]);
        for (_, offset, raw) in &seen {
            assert_eq!(&doc[*offset as usize..*offset as usize + raw.len()], raw);
        }
    }

    #[test]
    fn broken_structure_stops_with_the_offset() {
        let (seen, err) = elements(r#"[{"a": 1}, {"b": [1}]"#);
        assert_eq!(seen.len(), 1);
        assert_eq!(err.as_deref(), Some("19: mismatched bracket '}'"));
        let (_, err) = elements(r#"[{"a": "unterminated}]"#);
        assert!(err.unwrap().contains("closing quote"));
        let (seen, err) = elements("[1, 2");
        assert_eq!(seen.len(), 2);
        assert!(err.unwrap().contains("end of the file"));
        let (_, err) = elements("[1,,2]");
        assert!(err.unwrap().contains("expected a value, found ','"));
    }

    #[test]
    fn object_entries_are_walked_in_order() {
        let doc = r#"{"info": {"x": [1, 2]}, "images": [1, 2, 3], "n": null}"#;
        let mut scanner = JsonScanner::new(doc.as_bytes());
        let mut keys = Vec::new();
        let mut count = 0;
        let res = for_each_entry(&mut scanner, |key, s| -> Result<_, ()> {
            keys.push(key.to_string());
            if key == "images" {
                let r = for_each_element(s, |_| -> Result<(), ()> {
                    count += 1;
                    Ok(())
                })?;
                return Ok(r);
            }
            Ok(s.skip_value())
        })
        .unwrap();
        assert!(res.is_ok());
        assert!(scanner.expect_end().is_ok());
        assert_eq!(keys, ["info", "images", "n"]);
        assert_eq!(count, 3);
    }

    #[test]
    fn oversized_records_are_cut_but_skipped_whole() {
        let mut scanner = JsonScanner::new(&b"[\"abcdef\", 1]"[..]);
        scanner.expect(b'[', "[").unwrap();
        let mut out = Vec::new();
        assert_eq!(
            scanner.capture_value(&mut out, 3).unwrap(),
            Captured::TooLarge
        );
        assert_eq!(out, b"\"ab");
        assert!(scanner.after_item(b']').unwrap());
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let doc = "\u{feff}[1]";
        let mut scanner = JsonScanner::new(doc.as_bytes());
        scanner.skip_bom().unwrap();
        let mut seen = 0;
        let err = for_each_element(&mut scanner, |_| -> Result<(), ()> {
            seen += 1;
            Ok(())
        })
        .unwrap()
        .err();
        assert_eq!(seen, 1);
        assert!(err.is_none());
        let mut broken = JsonScanner::new(&b"\xef\xbb[1]"[..]);
        assert!(broken.skip_bom().is_err());
    }
}
