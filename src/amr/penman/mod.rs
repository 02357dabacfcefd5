//! PENMAN codec: AMR text with metadata and surface alignments to [`Graph`] and back.
//!
//! [`parse`] reads one graph into triples in exactly the normal form of penman 1.3.1's
//! `penman.decode(text).triples` (default model; see the conventions in the `decode` module),
//! keeping ISI (`~e.3`, `~e.1,2`) and JAMR/IBM (`~3`) alignment markers as
//! [`Graph::alignments`] and metadata lines (`# ::id x ::snt y`) as [`Graph::metadata`].
//! [`parse_many`] splits a whole file into [`GraphBlock`]s so that a broken graph never stops
//! the rest; [`encode`] writes a graph back so that `parse(&encode(&g)) == g`.
//!
//! ```
//! use capflow::amr::penman::{encode, parse};
//!
//! let g = parse("# ::id img.0\n(w / want-01~e.1 :ARG0 (b / boy) :ARG1-of (s / say-01))").unwrap();
//! assert_eq!(g.id(), Some("img.0"));
//! assert_eq!(g.triples[3].source, "s"); // `:ARG1-of` is turned into `(s, :ARG1, w)`
//! assert_eq!(g.triples[3].role, ":ARG1");
//! assert_eq!(parse(&encode(&g)).unwrap(), g);
//! ```

mod blocks;
pub(crate) mod decode;
mod encode;
mod lexer;
mod metadata;

use std::fmt;
use std::io::BufReader;
use std::path::Path;

use blocks::{split_lines, BlockSplitter, RawBlock};
pub use decode::MAX_DEPTH;
pub use encode::encode;
pub use metadata::{AlignmentMetadata, JamrEdge, MetadataAlignment, MetadataNotation};

use crate::amr::graph::{AlignmentFlavour, Graph};
use crate::error::{Error, Result};
use crate::ingest::lines::{read_line, skip_bom, LineEnd};
use crate::ingest::MAX_RECORD_BYTES;

/// Bytes of a line longer than [`MAX_RECORD_BYTES`] kept for its rejected record's excerpt.
const OVERSIZED_EXCERPT_BYTES: usize = 4096;

/// A syntax error in PENMAN text, located by 1-based line and column (in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PenmanError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for PenmanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

impl std::error::Error for PenmanError {}

/// One graph of a file, as split by [`parse_many`]; `G` is what the graph was parsed into
/// ([`Graph`] unless read with [`read_blocks_with`]).
#[derive(Clone, Debug, PartialEq)]
pub struct GraphBlock<G = Graph> {
    /// 1-based line of the block's first line (its first metadata line, if any).
    pub line: usize,
    /// Byte offset of the block in the file.
    pub byte_offset: usize,
    /// The raw block: metadata lines and graph, without the last line's terminator.
    pub text: String,
    /// The graph, or the error with its line counted from the start of the file.
    pub graph: Result<G, PenmanError>,
}

/// Parses one graph, with its metadata and comment lines.
///
/// Anything but comments after the graph's closing parenthesis is an error (penman ignores it,
/// which hides a graph run together with the next).
pub fn parse(text: &str) -> Result<Graph, PenmanError> {
    decode::decode(text, false).map(|(g, _)| g)
}

/// The `# ::id` a graph's text gives [`parse`] (the first `id` entry of the metadata lines
/// before the graph), read without parsing the graph: `None` when there is none.
///
/// ```
/// use capflow::amr::penman::{leading_id, parse};
///
/// let text = "# a comment\n# ::id img.3 ::snt a dog\n(d / dog)";
/// assert_eq!(leading_id(text).as_deref(), Some("img.3"));
/// assert_eq!(leading_id(text).as_deref(), parse(text).unwrap().id());
/// assert_eq!(leading_id("(d / dog)\n# ::id late"), None);
/// ```
pub fn leading_id(text: &str) -> Option<String> {
    let mut lexer = lexer::Lexer::new(text);
    let mut metadata = Vec::new();
    while let Some(token) = lexer.peek().filter(|t| t.kind == lexer::Kind::Comment) {
        lexer.next_token();
        metadata::parse_comment(lexer.text(token), &mut metadata);
        if let Some((_, id)) = metadata.iter().find(|(key, _)| key == "id") {
            return Some(id.clone());
        }
    }
    None
}

/// Splits a whole AMR file into graphs and parses each; a broken graph becomes an `Err` block
/// and parsing goes on at the next graph (see the `blocks` module for how blocks are found).
pub fn parse_many(text: &str) -> Vec<GraphBlock> {
    let mut splitter = BlockSplitter::default();
    let mut raw = Vec::new();
    let unmarked = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut offset = text.len() - unmarked.len();
    let text = unmarked;
    for (i, line) in split_lines(text).enumerate() {
        splitter.push_line(&line, i + 1, offset, true, &mut raw);
        offset += line.len();
    }
    raw.extend(splitter.finish());
    raw.into_iter().map(|b| parse_block(b, parse)).collect()
}

/// Parses one raw block with `parse`; errors are located in file lines.
fn parse_block<G>(
    block: RawBlock,
    parse: impl Fn(&str) -> Result<G, PenmanError>,
) -> GraphBlock<G> {
    let graph = match block.invalid_utf8 {
        _ if block.oversized => Err(PenmanError {
            line: block.line,
            column: 1,
            message: format!(
                "the graph is larger than the {} MiB record limit; it was skipped to its end",
                MAX_RECORD_BYTES >> 20
            ),
        }),
        Some(line) => Err(PenmanError {
            line,
            column: 1,
            message: "line is not valid UTF-8".to_string(),
        }),
        None => parse(&block.text).map_err(|e| PenmanError {
            line: e.line + block.line - 1,
            ..e
        }),
    };
    GraphBlock {
        line: block.line,
        byte_offset: block.byte_offset,
        text: block.text,
        graph,
    }
}

/// Parses one graph and reads its alignment metadata (`# ::alignments` in ISI tree-position or
/// JAMR span form, `# ::node`, `# ::edge`, `# ::root`), resolving tree addresses against the
/// tree exactly as written in `text`. An unreadable alignment entry is an error located at its
/// metadata line.
pub fn parse_with_alignment_metadata(
    text: &str,
) -> Result<(Graph, AlignmentMetadata), PenmanError> {
    let (graph, layout) = decode::decode(text, true)?;
    let layout = layout.unwrap_or_default();
    let (aligned, problems) = metadata::read_alignment_metadata(&graph, &layout);
    if let Some(problem) = problems.first() {
        let (key, _) = &graph.metadata[problem.entry];
        let needle = format!("::{key}");
        // Locate the line holding the n-th occurrence of this key.
        let nth = graph.metadata[..problem.entry]
            .iter()
            .filter(|(k, _)| k == key)
            .count();
        let line = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.trim_start().starts_with('#') && l.contains(&needle))
            .nth(nth)
            .map_or(1, |(i, _)| i + 1);
        return Err(PenmanError {
            line,
            column: 1,
            message: problem.message.clone(),
        });
    }
    Ok((graph, aligned))
}

/// The alignment notation a graph uses: ISI when an inline marker has a letter prefix (`~e.3`)
/// or `# ::alignments` holds tree positions; JAMR for bare `~3` markers, JAMR span alignments
/// or `# ::node` lines; none otherwise.
pub fn alignment_flavour(graph: &Graph) -> AlignmentFlavour {
    if !graph.alignments.is_empty() {
        return if graph.alignments.iter().any(|a| !a.prefix.is_empty()) {
            AlignmentFlavour::Isi
        } else {
            AlignmentFlavour::Jamr
        };
    }
    for (key, value) in &graph.metadata {
        match key.as_str() {
            "alignments" if value.contains('|') => return AlignmentFlavour::Jamr,
            "alignments" if !value.trim().is_empty() => return AlignmentFlavour::Isi,
            "node" => return AlignmentFlavour::Jamr,
            _ => {}
        }
    }
    AlignmentFlavour::None
}
/// Streams the AMR file at `path` block by block (never holding more than one graph) and
/// calls `visit` with each graph's ordinal (1-based) and block; an error from `visit` stops.
pub fn read_blocks(path: &Path, visit: impl FnMut(usize, GraphBlock) -> Result<()>) -> Result<()> {
    read_blocks_with(path, parse, visit)
}

/// [`read_blocks`] with another reading of each graph's text than [`parse`] (such as
/// [`crate::amr::smatch::SmatchGraph::parse`]); errors must be located within the block, as
/// [`parse`] locates them.
pub fn read_blocks_with<G>(
    path: &Path,
    parse: impl Fn(&str) -> Result<G, PenmanError>,
    visit: impl FnMut(usize, GraphBlock<G>) -> Result<()>,
) -> Result<()> {
    read_blocks_from(path, BlockCursor::default(), parse, visit).map(|_| ())
}

/// A position in an AMR file between blocks: where a read stopped, and where a read of what
/// was appended after it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockCursor {
    /// Bytes before the position.
    pub byte_offset: u64,
    /// Lines before the position.
    pub line: usize,
    /// Blocks before the position.
    pub ordinal: usize,
    /// Whether text appended at the position is read as a full read of the whole file would
    /// read it: the last line was complete and no block was open.
    pub resumable: bool,
}

/// [`read_blocks_with`] from `from` (a cursor an earlier read returned) to the end of the file;
/// lines, byte offsets and ordinals continue from the cursor. Returns the cursor at the end.
pub fn read_blocks_from<G>(
    path: &Path,
    from: BlockCursor,
    parse: impl Fn(&str) -> Result<G, PenmanError>,
    mut visit: impl FnMut(usize, GraphBlock<G>) -> Result<()>,
) -> Result<BlockCursor> {
    use std::io::{Seek, SeekFrom};
    let mut file = crate::ingest::open_input(path)?;
    if from.byte_offset > 0 {
        file.seek(SeekFrom::Start(from.byte_offset))
            .map_err(|e| Error::io(path, e))?;
    }
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut splitter = BlockSplitter::default();
    let mut ready: Vec<RawBlock> = Vec::new();
    let mut buffer = Vec::new();
    let (mut line_no, mut offset, mut ordinal) =
        (from.line, from.byte_offset as usize, from.ordinal);
    if from.byte_offset == 0 {
        offset += skip_bom(&mut reader).map_err(|e| Error::io(path, e))? as usize;
    }
    let mut line_complete = true;
    loop {
        let Some(line) = read_line(&mut reader, &mut buffer, MAX_RECORD_BYTES)
            .map_err(|e| Error::io(path, e))?
        else {
            break;
        };
        // A lone `\r` at the end may be the first half of a `\r\n` still being written: text
        // appended after it is not read alone.
        line_complete = matches!(line.end, LineEnd::Lf | LineEnd::CrLf);
        line_no += 1;
        if line.too_long {
            let kept = &buffer[..buffer.len().min(OVERSIZED_EXCERPT_BYTES)];
            splitter.push_oversized_line(
                &String::from_utf8_lossy(kept),
                line_no,
                offset,
                &mut ready,
            );
            // Give back the memory of the long line.
            buffer = Vec::new();
        } else {
            buffer.extend_from_slice(line.end.as_str().as_bytes());
            match std::str::from_utf8(&buffer) {
                Ok(text) => splitter.push_line(text, line_no, offset, true, &mut ready),
                Err(_) => {
                    let text = String::from_utf8_lossy(&buffer);
                    splitter.push_line(&text, line_no, offset, false, &mut ready);
                }
            }
        }
        offset += line.consumed as usize;
        for block in ready.drain(..) {
            ordinal += 1;
            visit(ordinal, parse_block(block, &parse))?;
        }
    }
    let resumable = line_complete && splitter.idle();
    if let Some(block) = splitter.finish() {
        ordinal += 1;
        visit(ordinal, parse_block(block, &parse))?;
    }
    Ok(BlockCursor {
        byte_offset: offset as u64,
        line: line_no,
        ordinal,
        resumable,
    })
}

#[cfg(test)]
mod tests;
