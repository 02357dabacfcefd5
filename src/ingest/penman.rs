//! Reader for PENMAN AMR files: one [`AmrRow`] per graph, streamed block by block.
//!
//! The file is read line by line through a `BufReader`, so a corpus of millions of graphs never
//! sits in memory whole. A graph that does not parse becomes a [`RejectedRow`] with its line,
//! byte offset and the located reason; file headers and trailing comments are not records.
//!
//! Ids follow the SSA convention `# ::id <image>.<k>`: the image is the id before its last `.`,
//! and the caption is `<image>#<k>` when `k` is a number.

use std::collections::HashSet;
use std::path::Path;

use super::{RecordSink, Row};
use crate::amr::penman::{
    alignment_flavour, leading_id, parse, read_blocks_from, BlockCursor, GraphBlock,
};
use crate::amr::Graph;
use crate::error::Result;
use crate::schema::{AmrRow, MetadataEntry, RejectedRow, TableKind, EXCERPT_LIMIT};

/// Reads the PENMAN file at `path` into `sink`.
pub fn read(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    read_from(path, BlockCursor::default(), sink).map(|_| ())
}

/// Reads the PENMAN file at `path` from `from` (the cursor an earlier read of its first bytes
/// returned) to its end into `sink`; returns the cursor at the end.
pub fn read_from(path: &Path, from: BlockCursor, sink: &mut dyn RecordSink) -> Result<BlockCursor> {
    read_keeping(path, from, None, sink)
}

/// [`read_from`] keeping only the graphs of the images in `keep`: a graph whose `# ::id` names
/// another image is passed over unparsed ([`RecordSink::passed_over`]), in its place in the
/// numbering; a graph without an id is read as [`read_from`] reads it.
pub fn read_images_from(
    path: &Path,
    from: BlockCursor,
    keep: &HashSet<String>,
    sink: &mut dyn RecordSink,
) -> Result<BlockCursor> {
    read_keeping(path, from, Some(keep), sink)
}

fn read_keeping(
    path: &Path,
    from: BlockCursor,
    keep: Option<&HashSet<String>>,
    sink: &mut dyn RecordSink,
) -> Result<BlockCursor> {
    let file_name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let source_file = path.display().to_string();
    let kept = |text: &str| match (keep, leading_id(text).filter(|id| !id.is_empty())) {
        (Some(keep), Some(id)) => keep.contains(&GraphIds::new(Some(&id), &file_name, 0).image_id),
        _ => true,
    };
    let parse_kept = |text: &str| match kept(text) {
        true => parse(text).map(Some),
        false => Ok(None),
    };
    read_blocks_from(path, from, parse_kept, |ordinal, block| {
        let graph = match block.graph {
            Ok(Some(graph)) => Ok(graph),
            Ok(None) => return sink.passed_over(TableKind::Amrs),
            Err(error) => Err(error),
        };
        let block = GraphBlock {
            line: block.line,
            byte_offset: block.byte_offset,
            text: block.text,
            graph,
        };
        emit(block, ordinal, &file_name, &source_file, sink)
    })
}

fn emit(
    block: GraphBlock,
    ordinal: usize,
    file_name: &str,
    source_file: &str,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    let graph = match block.graph {
        Ok(graph) => graph,
        Err(error) => {
            return sink.reject(RejectedRow {
                format: "penman".to_string(),
                source_file: source_file.to_string(),
                record: format!("graph {ordinal} (line {})", block.line),
                line: Some(block.line as i64),
                byte_offset: Some(block.byte_offset as i64),
                reason: error.to_string(),
                excerpt: excerpt(&block.text),
            });
        }
    };
    let ids = GraphIds::new(graph.id(), file_name, ordinal);
    let row = amr_row(
        ids.image_id,
        ids.graph_id,
        ids.caption_id,
        &graph,
        block.text,
    );
    sink.row(Row::Amr(row))?;
    sink.accepted()
}

/// The row of `graph`, written as `penman`: its sentence, tokens and metadata lines from the
/// graph's metadata.
pub fn amr_row(
    image_id: String,
    graph_id: String,
    caption_id: Option<String>,
    graph: &Graph,
    penman: String,
) -> AmrRow {
    AmrRow {
        image_id,
        graph_id,
        caption_id,
        sentence: graph.meta("snt").map(str::to_string),
        tokens: graph
            .meta("tok")
            .map(|t| t.split(' ').map(str::to_string).collect()),
        alignment_flavour: alignment_flavour(graph).as_str().to_string(),
        metadata: graph
            .metadata
            .iter()
            .map(|(key, value)| MetadataEntry {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        penman,
    }
}

/// The first [`EXCERPT_LIMIT`] bytes of `text`, cut at a character boundary.
fn excerpt(text: &str) -> String {
    let mut end = text.len().min(EXCERPT_LIMIT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The image, graph and caption keys of one graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphIds {
    pub image_id: String,
    pub graph_id: String,
    pub caption_id: Option<String>,
}

impl GraphIds {
    /// Keys from `# ::id`, or `<file name>:<ordinal>` for a graph without one.
    pub fn new(id: Option<&str>, file_name: &str, ordinal: usize) -> GraphIds {
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            let key = format!("{file_name}:{ordinal}");
            return GraphIds {
                image_id: key.clone(),
                graph_id: key,
                caption_id: None,
            };
        };
        match id.rsplit_once('.') {
            Some((image, k)) => GraphIds {
                image_id: image.to_string(),
                graph_id: id.to_string(),
                caption_id: (!k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| format!("{image}#{k}")),
            },
            None => GraphIds {
                image_id: id.to_string(),
                graph_id: id.to_string(),
                caption_id: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::VecSink;

    #[test]
    fn ids_follow_the_ssa_convention() {
        let ids = GraphIds::new(Some("a_pmid_2488_5690.10"), "f.txt", 1);
        assert_eq!(ids.image_id, "a_pmid_2488_5690");
        assert_eq!(ids.caption_id.as_deref(), Some("a_pmid_2488_5690#10"));
        let ids = GraphIds::new(Some("img.v2.x"), "f.txt", 1);
        assert_eq!((ids.image_id.as_str(), ids.caption_id), ("img.v2", None));
        let ids = GraphIds::new(Some("plain"), "f.txt", 1);
        assert_eq!(ids.image_id, "plain");
        let ids = GraphIds::new(None, "f.txt", 3);
        assert_eq!(
            (ids.image_id.as_str(), ids.graph_id.as_str()),
            ("f.txt:3", "f.txt:3")
        );
    }

    #[test]
    fn reads_accepts_and_rejects() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.txt");
        let mut bytes = b"# release header\n\n# ::id im.0\n# ::snt A dog .\n# ::tok A dog .\n(d / dog~e.1)\n\n# ::id im.1\n(x / \n\n(y / yes :mod \xff)\n".to_vec();
        bytes.extend_from_slice(b"\n(z / zed)\n");
        std::fs::write(&path, bytes).unwrap();
        let mut sink = VecSink::default();
        read(&path, &mut sink).unwrap();
        assert_eq!(sink.accepted, 2);
        assert_eq!(sink.rejected.len(), 2);
        let Row::Amr(row) = &sink.rows[0] else {
            panic!("not an AMR row")
        };
        assert_eq!(row.caption_id.as_deref(), Some("im#0"));
        assert_eq!(row.tokens.as_deref().map(<[String]>::len), Some(3));
        assert_eq!(row.alignment_flavour, "isi");
        assert_eq!(
            row.penman,
            "# ::id im.0\n# ::snt A dog .\n# ::tok A dog .\n(d / dog~e.1)"
        );
        assert_eq!(sink.rejected[0].record, "graph 2 (line 8)");
        // 17 + 1 (header, blank) + 12 + 16 + 16 + 14 (graph 1) + 1 (blank) bytes before it.
        assert_eq!(sink.rejected[0].byte_offset, Some(77));
        assert!(
            sink.rejected[1].reason.contains("UTF-8"),
            "{}",
            sink.rejected[1].reason
        );
        let Row::Amr(row) = &sink.rows[1] else {
            panic!("not an AMR row")
        };
        assert_eq!(row.graph_id, "g.txt:4");
    }

    /// What a reader told a sink, in order.
    #[derive(Default)]
    struct Events(Vec<String>);

    impl RecordSink for Events {
        fn row(&mut self, row: Row) -> Result<()> {
            let Row::Amr(row) = row else {
                panic!("not an AMR row")
            };
            self.0.push(format!("row {}", row.graph_id));
            Ok(())
        }
        fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
            self.0.push(format!("reject {}", rejected.record));
            Ok(())
        }
        fn accepted(&mut self) -> Result<()> {
            Ok(())
        }
        fn passed_over(&mut self, table: TableKind) -> Result<()> {
            self.0.push(format!("passed over {}", table.name()));
            Ok(())
        }
    }

    #[test]
    fn a_read_that_keeps_some_images_passes_over_the_others_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.txt");
        let text = "# ::id a.0\n(d / dog)\n\n# ::snt x ::id b.0\n(c / cat)\n\n\
                    # ::id a.1\n(x / \n\n(y / yes)\n\n# ::id c.2\n(z / (\n\n# ::id b.1\n(e / eat-01)\n";
        std::fs::write(&path, text).unwrap();
        let mut all = Events::default();
        read(&path, &mut all).unwrap();
        assert_eq!(
            all.0,
            [
                "row a.0",
                "row b.0",
                "reject graph 3 (line 7)",
                "row g.txt:4",
                "reject graph 5 (line 12)",
                "row b.1"
            ]
        );
        let keep: HashSet<String> = ["b".to_string()].into();
        let mut kept = Events::default();
        read_images_from(&path, BlockCursor::default(), &keep, &mut kept).unwrap();
        // Image b's graphs, a graph without an id (read, as its image is only known from it),
        // and the others passed over where they stand.
        assert_eq!(
            kept.0,
            [
                "passed over amrs",
                "row b.0",
                "passed over amrs",
                "row g.txt:4",
                "passed over amrs",
                "row b.1"
            ]
        );
    }
}
