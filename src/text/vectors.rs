//! Word vectors from GloVe and word2vec text files, and the word similarity SSA merges nodes by.
//!
//! SSA compares AMR concept labels with GloVe: `sim = 1 - min(1, cosine_distance)`, and `-1`
//! when either word has no vector (the reference catches the `KeyError`). Vectors are
//! normalised once when loaded, so a similarity is one dot product, and lookups allocate
//! nothing.
//!
//! Files are read line by line (a 2 GB GloVe file never sits in memory as text). Accepted
//! layouts:
//! - GloVe: `word v1 ... vd` per line, no header; `d` is taken from the first line.
//! - word2vec text: a header `count dim`, then `word v1 ... vd` lines, trailing spaces allowed.
//!
//! The last `d` fields of a line are the vector, and everything before them is the word, so
//! tokens that contain spaces (some GloVe 840B entries) or punctuation (`''`, `(`) are kept
//! whole. A word listed twice keeps its first vector, as gensim does.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use crate::error::{Error, Result};

/// The similarity given when either word has no vector (SSA reference behaviour).
pub const OOV_SIMILARITY: f64 = -1.0;

/// The layout of a word-vector text file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorFormat {
    /// No header; the dimension is the number of fields on the first line minus one.
    Glove,
    /// A `count dim` header line.
    Word2VecText,
    /// word2vec if the first line is two unsigned integers, GloVe otherwise.
    Detect,
}

/// A table of unit-length word vectors.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct WordVectors {
    dim: usize,
    words: Vec<Box<str>>,
    index: HashMap<Box<str>, u32>,
    /// Row `i` (`dim` values) is the normalised vector of `words[i]`.
    unit: Vec<f32>,
}

/// Cosine of the angle between two vectors (0 when either is zero), accumulated in `f64`.
///
/// Panics if the lengths differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "cosine of vectors of different lengths");
    let (mut dot, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    dot / (aa.sqrt() * bb.sqrt())
}

/// `1 - min(1, 1 - cos)`, the SSA reference's clipped similarity (negative cosines become 0).
fn clipped_similarity(cos: f64) -> f64 {
    1.0 - (1.0 - cos).min(1.0)
}

impl WordVectors {
    /// Reads a GloVe or word2vec text file.
    pub fn read(path: impl AsRef<Path>, format: VectorFormat) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        Self::from_reader(
            std::io::BufReader::with_capacity(1 << 20, file),
            &path.display().to_string(),
            format,
        )
    }

    /// Reads vectors from `reader`; `source` names it in errors.
    pub fn from_reader(reader: impl BufRead, source: &str, format: VectorFormat) -> Result<Self> {
        VectorFileReader::new(reader, source, format).read()
    }

    /// A table from `(word, vector)` pairs (for vectors trained or computed in process).
    pub fn from_pairs<W, V>(pairs: impl IntoIterator<Item = (W, V)>) -> Result<Self>
    where
        W: AsRef<str>,
        V: AsRef<[f32]>,
    {
        let mut table = WordVectors::default();
        for (k, (word, vector)) in pairs.into_iter().enumerate() {
            let vector = vector.as_ref();
            if k == 0 {
                table.dim = vector.len();
            }
            if vector.len() != table.dim || table.dim == 0 {
                return Err(Error::invalid(
                    "word vectors",
                    format!(
                        "vector {k} (`{}`) has {} values, expected {}",
                        word.as_ref(),
                        vector.len(),
                        table.dim.max(1)
                    ),
                ));
            }
            if let Some(bad) = vector.iter().position(|v| !v.is_finite()) {
                return Err(Error::invalid(
                    "word vectors",
                    format!("value {bad} of `{}` is not finite", word.as_ref()),
                ));
            }
            table.insert(word.as_ref(), vector);
        }
        Ok(table)
    }

    /// Adds `word` with `vector` (already checked), unless it is already present.
    fn insert(&mut self, word: &str, vector: &[f32]) -> bool {
        if self.index.contains_key(word) {
            return false;
        }
        let norm = vector
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        // A zero vector stays zero: its cosine with anything is 0, which is what the SSA
        // reference's `1 - min(1, nan)` similarity comes to as well.
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        self.unit
            .extend(vector.iter().map(|&v| (f64::from(v) * scale) as f32));
        let id = self.words.len() as u32;
        self.words.push(word.into());
        self.index.insert(word.into(), id);
        true
    }

    /// The vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The number of words.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The words in file order.
    pub fn words(&self) -> impl Iterator<Item = &str> {
        self.words.iter().map(|w| &**w)
    }

    /// The row of `word`: as written, else lower-cased.
    pub fn index_of(&self, word: &str) -> Option<usize> {
        if let Some(&id) = self.index.get(word) {
            return Some(id as usize);
        }
        self.lowercase_index_of(word)
    }

    fn lowercase_index_of(&self, word: &str) -> Option<usize> {
        if word.is_ascii() {
            if !word.bytes().any(|b| b.is_ascii_uppercase()) {
                return None;
            }
            // Short ASCII words (nearly all) are lower-cased on the stack.
            let mut buffer = [0u8; 64];
            if let Some(slot) = buffer.get_mut(..word.len()) {
                slot.copy_from_slice(word.as_bytes());
                slot.make_ascii_lowercase();
                let lower = std::str::from_utf8(slot).ok()?;
                return self.index.get(lower).map(|&id| id as usize);
            }
        }
        let lower = word.to_lowercase();
        if lower == word {
            return None;
        }
        self.index.get(lower.as_str()).map(|&id| id as usize)
    }

    /// The unit-length vector of `word` (as written, else lower-cased).
    pub fn get(&self, word: &str) -> Option<&[f32]> {
        self.index_of(word).map(|i| self.row(i))
    }

    fn row(&self, i: usize) -> &[f32] {
        &self.unit[i * self.dim..(i + 1) * self.dim]
    }

    /// Cosine between two words, `None` if either has no vector.
    pub fn cosine(&self, a: &str, b: &str) -> Option<f64> {
        let (a, b) = (self.get(a)?, self.get(b)?);
        Some(dot(a, b))
    }

    /// SSA's word similarity: `1 - min(1, cosine_distance)`, or [`OOV_SIMILARITY`] (-1) when
    /// either word has no vector.
    pub fn similarity(&self, a: &str, b: &str) -> f64 {
        match self.cosine(a, b) {
            Some(cos) => clipped_similarity(cos),
            None => OOV_SIMILARITY,
        }
    }

    /// The `top` words nearest to `word` by cosine, best first, excluding `word` itself (as
    /// gensim's `most_similar`). Empty when `word` has no vector. Equal cosines keep file order.
    pub fn most_similar(&self, word: &str, top: usize) -> Vec<(&str, f64)> {
        let Some(target) = self.index_of(word) else {
            return Vec::new();
        };
        let query = self.row(target);
        let mut scored: Vec<(usize, f64)> = (0..self.len())
            .filter(|&i| i != target)
            .map(|i| (i, dot(query, self.row(i))))
            .collect();
        scored.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
        scored.truncate(top);
        scored
            .into_iter()
            .map(|(i, cos)| (&*self.words[i], cos))
            .collect()
    }
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// Streams a vector file, keeping the line number for errors.
struct VectorFileReader<'a, R> {
    reader: R,
    source: &'a str,
    format: VectorFormat,
    /// The current line, reused for every line of the file.
    line: String,
    line_no: usize,
    /// The current line's vector, reused likewise.
    values: Vec<f32>,
}

fn is_separator(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn trim_line(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r', ' ', '\t'])
}

impl<'a, R: BufRead> VectorFileReader<'a, R> {
    fn new(reader: R, source: &'a str, format: VectorFormat) -> Self {
        VectorFileReader {
            reader,
            source,
            format,
            line: String::new(),
            line_no: 0,
            values: Vec::new(),
        }
    }

    fn error(&self, reason: impl Into<String>) -> Error {
        Error::record(self.source, format!("line {}", self.line_no), reason)
    }

    /// Moves to the next non-blank line; false at the end of the file.
    fn advance(&mut self) -> Result<bool> {
        loop {
            self.line.clear();
            self.line_no += 1;
            match self.reader.read_line(&mut self.line) {
                Ok(0) => {
                    self.line_no -= 1;
                    return Ok(false);
                }
                Ok(_) if trim_line(&self.line).is_empty() => continue,
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Err(self.error("not UTF-8 text"))
                }
                Err(e) => return Err(Error::io(self.source, e)),
            }
        }
    }

    fn read(mut self) -> Result<WordVectors> {
        let mut table = WordVectors::default();
        if !self.advance()? {
            return Err(Error::record(
                self.source,
                "line 1",
                "the file holds no vectors",
            ));
        }
        let first = trim_line(&self.line);
        // With a header, the vectors start on the next line; without, on this one.
        let (promised, mut on_vector_line) = match (self.format, parse_header(first)) {
            (VectorFormat::Word2VecText | VectorFormat::Detect, Some((count, dim))) => {
                if dim == 0 {
                    return Err(self.error("the header gives dimension 0"));
                }
                table.dim = dim;
                (Some(count), false)
            }
            (VectorFormat::Word2VecText, None) => {
                return Err(self.error(format!(
                    "expected a word2vec header `count dim`, found `{}`",
                    preview(first)
                )))
            }
            (VectorFormat::Glove | VectorFormat::Detect, _) => {
                let fields = first.split(is_separator).filter(|f| !f.is_empty()).count();
                if fields < 2 {
                    return Err(self.error(format!(
                        "expected a word followed by its vector, found `{}`",
                        preview(first)
                    )));
                }
                table.dim = fields - 1;
                (None, true)
            }
        };

        let mut read = 0usize;
        let mut duplicates = 0usize;
        loop {
            if !on_vector_line && !self.advance()? {
                break;
            }
            on_vector_line = false;
            read += 1;
            if let Some(count) = promised {
                if read > count {
                    return Err(self.error(format!(
                        "the header promises {count} vectors but there are more"
                    )));
                }
            }
            let word = parse_vector_line(trim_line(&self.line), table.dim, &mut self.values)
                .map_err(|reason| {
                    Error::record(self.source, format!("line {}", self.line_no), reason)
                })?;
            if !table.insert(word, &self.values) {
                duplicates += 1;
            }
        }
        if let Some(count) = promised {
            if read != count {
                return Err(self.error(format!(
                    "the header promises {count} vectors but the file ends after {read}"
                )));
            }
        }
        if duplicates > 0 {
            tracing::warn!(
                source = self.source,
                duplicates,
                "words listed more than once keep their first vector"
            );
        }
        Ok(table)
    }
}

/// Splits `word v1 .. vd` from the right into `values` and returns the word: the last `dim`
/// fields are the vector and the rest, spaces included, is the word. The error is the reason.
fn parse_vector_line<'l>(
    line: &'l str,
    dim: usize,
    values: &mut Vec<f32>,
) -> std::result::Result<&'l str, String> {
    let field_count = || line.split(is_separator).filter(|f| !f.is_empty()).count();
    let wrong_count = || {
        format!(
            "expected a word and {dim} values, found {} fields",
            field_count()
        )
    };
    values.clear();
    values.resize(dim, 0.0);
    let mut rest = line;
    for k in (0..dim).rev() {
        let (head, field) = match rest.rfind(is_separator) {
            Some(at) => (rest[..at].trim_end_matches(is_separator), &rest[at + 1..]),
            None => ("", rest),
        };
        if head.is_empty() {
            return Err(wrong_count());
        }
        let value: f32 = field
            .parse()
            .map_err(|_| format!("value {} is `{}`, not a number", k + 1, preview(field)))?;
        if !value.is_finite() {
            return Err(format!("value {} is `{field}`, not finite", k + 1));
        }
        values[k] = value;
        rest = head;
    }
    // A word may contain spaces, but a numeric last word-field means too many values.
    if let Some(at) = rest.rfind(is_separator) {
        if rest[at + 1..].parse::<f64>().is_ok() {
            return Err(wrong_count());
        }
    }
    Ok(rest.trim_start_matches(is_separator))
}

/// `count dim` when the line is exactly two unsigned integers.
fn parse_header(line: &str) -> Option<(usize, usize)> {
    let mut fields = line.split(is_separator).filter(|f| !f.is_empty());
    let count = fields.next()?.parse().ok()?;
    let dim = fields.next()?.parse().ok()?;
    fields.next().is_none().then_some((count, dim))
}

/// The start of a field or line for an error message.
fn preview(text: &str) -> String {
    const MAX: usize = 40;
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, format: VectorFormat) -> Result<WordVectors> {
        WordVectors::from_reader(text.as_bytes(), "vectors.txt", format)
    }

    fn record_error(result: Result<WordVectors>) -> (String, String) {
        match result {
            Err(Error::Record {
                file,
                record,
                reason,
            }) => {
                assert_eq!(file, "vectors.txt");
                (record, reason)
            }
            other => panic!("expected a record error, got {other:?}"),
        }
    }

    #[test]
    fn glove_and_word2vec_layouts() {
        let glove = read("the 1 0 0\n'' 0 2 0\n( 3 4 0\n", VectorFormat::Glove).unwrap();
        assert_eq!((glove.len(), glove.dim()), (3, 3));
        assert_eq!(glove.get("''"), Some(&[0.0f32, 1.0, 0.0][..]));
        // (3, 4, 0) / 5 vs (1, 0, 0): cos = 0.6.
        assert!((glove.similarity("the", "(") - 0.6).abs() < 1e-7);

        let w2v = read("2 2 \nx 1 0 \ny 0 -1 \n", VectorFormat::Detect).unwrap();
        assert_eq!((w2v.len(), w2v.dim()), (2, 2));
        assert_eq!(w2v.cosine("x", "y"), Some(0.0));
    }

    #[test]
    fn similarity_is_clipped_and_oov_is_minus_one() {
        let v = read("up 1 0\ndown -1 0\nside 1 1\n", VectorFormat::Glove).unwrap();
        // cos(up, down) = -1: distance 2, clipped to 1, similarity 0.
        assert_eq!(v.similarity("up", "down"), 0.0);
        assert!((v.similarity("up", "side") - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-7);
        assert_eq!(v.similarity("up", "sideways"), OOV_SIMILARITY);
        assert_eq!(v.similarity("nowhere", "up"), OOV_SIMILARITY);
    }

    #[test]
    fn lookup_falls_back_to_lower_case() {
        let v = read("apple 1 0\nApple 0 1\nökonomie 1 1\n", VectorFormat::Glove).unwrap();
        assert_eq!(v.index_of("Apple"), Some(1));
        assert_eq!(v.index_of("APPLE"), Some(0));
        assert_eq!(v.index_of("ÖKONOMIE"), Some(2));
        assert_eq!(v.index_of("pear"), None);
        let long = "A".repeat(100);
        assert_eq!(v.index_of(&long), None);
    }

    #[test]
    fn words_with_spaces_and_duplicates() {
        // The dimension comes from the first line; later words may contain spaces, and a
        // numeric word is a word.
        let v = read(
            "one 1 2\na b 1 2\nx 3 4\nx 5 6\n2000 1 1\n",
            VectorFormat::Glove,
        )
        .unwrap();
        assert_eq!(v.dim(), 2);
        assert!(v.get("a b").is_some());
        assert!(v.get("2000").is_some());
        assert_eq!(v.len(), 4);
        assert_eq!(v.get("x"), Some(&[0.6f32, 0.8][..]));
    }

    #[test]
    fn most_similar_excludes_the_word() {
        let v = read("a 1 0\nb 0.9 0.1\nc 0 1\nd 1 0\n", VectorFormat::Glove).unwrap();
        let near: Vec<&str> = v.most_similar("a", 2).into_iter().map(|(w, _)| w).collect();
        assert_eq!(near, vec!["d", "b"]);
        assert!(v.most_similar("zzz", 3).is_empty());
    }

    #[test]
    fn cosine_of_raw_vectors() {
        assert!(
            (cosine(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]) - 32.0 / (14f64.sqrt() * 77f64.sqrt()))
                .abs()
                < 1e-12
        );
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }

    #[test]
    fn malformed_files_give_located_errors() {
        let (record, reason) = record_error(read("a 1 2\nb 1\n", VectorFormat::Glove));
        assert_eq!(record, "line 2");
        assert!(
            reason.contains("expected a word and 2 values, found 2 fields"),
            "{reason}"
        );

        let (record, reason) = record_error(read("a 1 2\nb 1 2 3\n", VectorFormat::Glove));
        assert_eq!(record, "line 2");
        assert!(reason.contains("found 4 fields"), "{reason}");

        let (record, reason) = record_error(read("a 1 2\n\nb 1 x2\n", VectorFormat::Glove));
        assert_eq!(record, "line 3");
        assert!(reason.contains("value 2 is `x2`, not a number"), "{reason}");

        let (record, reason) = record_error(read("a 1 nan\n", VectorFormat::Glove));
        assert_eq!(record, "line 1");
        assert!(reason.contains("not finite"), "{reason}");

        let (record, reason) = record_error(read("3 2\na 1 2\nb 1 2\n", VectorFormat::Detect));
        assert_eq!(record, "line 3");
        assert!(
            reason.contains("promises 3 vectors but the file ends after 2"),
            "{reason}"
        );

        let (record, reason) =
            record_error(read("1 2\na 1 2\nb 1 2\n", VectorFormat::Word2VecText));
        assert_eq!(record, "line 3");
        assert!(
            reason.contains("promises 1 vectors but there are more"),
            "{reason}"
        );

        let (record, reason) = record_error(read("a 1 2\n", VectorFormat::Word2VecText));
        assert_eq!(record, "line 1");
        assert!(reason.contains("expected a word2vec header"), "{reason}");

        let (record, _) = record_error(read("", VectorFormat::Glove));
        assert_eq!(record, "line 1");

        let bytes: &[u8] = b"a 1 2\n\xff 1 2\n";
        let (record, reason) = record_error(WordVectors::from_reader(
            bytes,
            "vectors.txt",
            VectorFormat::Glove,
        ));
        assert_eq!(record, "line 2");
        assert!(reason.contains("not UTF-8"), "{reason}");

        let (record, reason) = record_error(read("word\n", VectorFormat::Glove));
        assert_eq!(record, "line 1");
        assert!(
            reason.contains("expected a word followed by its vector"),
            "{reason}"
        );
    }

    #[test]
    fn pairs_are_checked() {
        let v = WordVectors::from_pairs([("a", vec![3.0f32, 4.0]), ("b", vec![1.0, 0.0])]).unwrap();
        assert_eq!(v.get("a"), Some(&[0.6f32, 0.8][..]));
        assert!(WordVectors::from_pairs([("a", vec![1.0f32]), ("b", vec![1.0, 0.0])]).is_err());
        assert!(WordVectors::from_pairs([("a", vec![f32::NAN])]).is_err());
    }
}
