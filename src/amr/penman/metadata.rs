//! Metadata comment lines and the alignment notations they carry.
//!
//! Keys follow penman 1.3.1: every `::` in a comment starts a key, so
//! `# ::id a_pmid_2488_5690.10 ::amr-annotator SDL-AMR-09 ::preferred` holds three entries;
//! text before the first `::` (a plain comment) is not metadata. The key ends at the first
//! space or tab, the value is the rest without trailing whitespace (penman splits only at a
//! space, which would turn JAMR's tab-separated `::node` lines into one long key).
//!
//! Alignment lines are kept verbatim in [`Graph::metadata`] and read into
//! [`MetadataAlignment`]s on demand, resolved against the exact tree layout of the text.

use std::collections::HashMap;

use super::decode::{Layout, LayoutTarget};
use crate::amr::graph::Graph;

/// Appends the metadata entries of one comment token (`# ...`) to `metadata`.
pub(crate) fn parse_comment(comment: &str, metadata: &mut Vec<(String, String)>) {
    let mut pieces = comment.split("::");
    pieces.next(); // before the first `::`: a plain comment
    for piece in pieces {
        let (key, value) = match piece.find([' ', '\t']) {
            Some(at) => (&piece[..at], &piece[at + 1..]),
            None => (piece, ""),
        };
        metadata.push((key.to_string(), value.trim_end().to_string()));
    }
}

/// Which notation a metadata alignment was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetadataNotation {
    /// ISI tree positions in `# ::alignments`: `3-1.1.1.1` (a concept or constant) and
    /// `2-1.1.1.1.r` (the role leading to it); one 0-based token; addresses are 1-based and
    /// count every edge of a node.
    IsiTree,
    /// JAMR `# ::alignments` entries `0-1|0.1+0.2`: a token span `[start, end)` and `+`-joined
    /// 0-based addresses that count only nested nodes and constants.
    JamrSpan,
    /// JAMR `# ::node<TAB>address<TAB>concept<TAB>start-end` lines.
    JamrNode,
}

/// One alignment from a metadata line, resolved to a triple of the graph where possible.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MetadataAlignment {
    pub notation: MetadataNotation,
    /// 0-based token indices.
    pub tokens: Vec<usize>,
    /// The tree address as written (`1.1.2` is `[1, 1, 2]`).
    pub address: Vec<usize>,
    /// `true` for an ISI role alignment (`.r`).
    pub on_role: bool,
    /// Index into [`Graph::triples`] of the aligned concept (its `:instance` triple), constant
    /// or role; `None` when the address names nothing in the graph.
    pub triple: Option<usize>,
}

/// A JAMR `# ::edge` line: `source-concept role target-concept source-address target-address`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct JamrEdge {
    pub role: String,
    pub source_address: Vec<usize>,
    pub target_address: Vec<usize>,
    /// The edge's triple, when the target address is a child of the source address.
    pub triple: Option<usize>,
}

/// The structured alignment metadata of a graph.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AlignmentMetadata {
    pub alignments: Vec<MetadataAlignment>,
    pub edges: Vec<JamrEdge>,
    /// `# ::root<TAB>address<TAB>concept`, resolved to the top's `:instance` triple.
    pub root: Option<(Vec<usize>, Option<usize>)>,
}

/// Why an alignment metadata line could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LineProblem {
    /// Index into `Graph::metadata`.
    pub entry: usize,
    pub message: String,
}

fn parse_address(text: &str) -> Option<Vec<usize>> {
    text.split('.').map(|p| p.parse().ok()).collect()
}

fn parse_span(text: &str) -> Option<(usize, usize)> {
    let (start, end) = text.split_once('-')?;
    Some((start.parse().ok()?, end.parse().ok()?))
}

/// Address tables of a layout: ISI `(address, on_role) -> triple` and JAMR `address -> triple`.
struct AddressTables {
    isi: HashMap<(Vec<usize>, bool), usize>,
    jamr: HashMap<Vec<usize>, usize>,
    /// JAMR `(source address, target address) -> edge triple`.
    jamr_edges: HashMap<(Vec<usize>, Vec<usize>), usize>,
}

fn address_tables(layout: &Layout) -> AddressTables {
    let mut tables = AddressTables {
        isi: HashMap::new(),
        jamr: HashMap::new(),
        jamr_edges: HashMap::new(),
    };
    if layout.nodes.is_empty() {
        return tables;
    }
    // (node, isi address, jamr address); iterative so deep graphs cannot overflow the stack.
    let mut stack = vec![(0usize, vec![1usize], vec![0usize])];
    while let Some((node_id, isi, jamr)) = stack.pop() {
        let Some(node) = layout.nodes.get(node_id) else {
            continue;
        };
        if let Some(instance) = node.instance {
            tables.isi.insert((isi.clone(), false), instance);
            tables.jamr.insert(jamr.clone(), instance);
        }
        let mut jamr_child = 0;
        for (i, child) in node.children.iter().enumerate() {
            let mut child_isi = isi.clone();
            child_isi.push(i + 1);
            tables.isi.insert((child_isi.clone(), true), child.triple);
            let jamr_counted = match child.target {
                LayoutTarget::Node(_) | LayoutTarget::Atomic { reference: false } => true,
                LayoutTarget::Atomic { reference: true } | LayoutTarget::Missing => false,
            };
            let mut child_jamr = jamr.clone();
            child_jamr.push(jamr_child);
            if jamr_counted {
                jamr_child += 1;
                tables
                    .jamr_edges
                    .insert((jamr.clone(), child_jamr.clone()), child.triple);
            }
            match child.target {
                LayoutTarget::Node(id) => stack.push((id, child_isi, child_jamr)),
                LayoutTarget::Atomic { .. } => {
                    tables.isi.insert((child_isi, false), child.triple);
                    if jamr_counted {
                        tables.jamr.insert(child_jamr, child.triple);
                    }
                }
                LayoutTarget::Missing => {}
            }
        }
    }
    tables
}

/// Reads every alignment metadata line of `graph` against `layout`. Entries that cannot be
/// read are reported, the rest still returned.
pub(crate) fn read_alignment_metadata(
    graph: &Graph,
    layout: &Layout,
) -> (AlignmentMetadata, Vec<LineProblem>) {
    let tables = address_tables(layout);
    let mut out = AlignmentMetadata::default();
    let mut problems = Vec::new();
    for (entry, (key, value)) in graph.metadata.iter().enumerate() {
        let mut problem = |message: String| problems.push(LineProblem { entry, message });
        match key.as_str() {
            "alignments" => {
                for item in value.split_whitespace() {
                    match read_alignment_item(item, &tables) {
                        Some(a) => out.alignments.extend(a),
                        None => problem(format!("unreadable alignment `{item}`")),
                    }
                }
            }
            "node" => {
                let fields: Vec<&str> = value.split('\t').collect();
                let address = fields.first().and_then(|a| parse_address(a));
                match (address, fields.get(2)) {
                    (Some(address), Some(span)) if !span.is_empty() => match parse_span(span) {
                        Some((start, end)) => out.alignments.push(MetadataAlignment {
                            notation: MetadataNotation::JamrNode,
                            tokens: (start..end).collect(),
                            triple: tables.jamr.get(&address).copied(),
                            address,
                            on_role: false,
                        }),
                        None => problem(format!("unreadable span in `::node {value}`")),
                    },
                    (Some(_), _) => {}
                    (None, _) => problem(format!("unreadable address in `::node {value}`")),
                }
            }
            "edge" => {
                let fields: Vec<&str> = value.split('\t').collect();
                match (
                    fields.get(1),
                    fields.get(3).and_then(|a| parse_address(a)),
                    fields.get(4).and_then(|a| parse_address(a)),
                ) {
                    (Some(role), Some(source_address), Some(target_address)) => {
                        let triple = tables
                            .jamr_edges
                            .get(&(source_address.clone(), target_address.clone()))
                            .copied();
                        out.edges.push(JamrEdge {
                            role: format!(":{role}"),
                            source_address,
                            target_address,
                            triple,
                        });
                    }
                    _ => problem(format!("unreadable `::edge {value}`")),
                }
            }
            "root" => match value.split('\t').next().and_then(parse_address) {
                Some(address) => {
                    let triple = tables.jamr.get(&address).copied();
                    out.root = Some((address, triple));
                }
                None => problem(format!("unreadable `::root {value}`")),
            },
            _ => {}
        }
    }
    (out, problems)
}

fn read_alignment_item(item: &str, tables: &AddressTables) -> Option<Vec<MetadataAlignment>> {
    if let Some((span, addresses)) = item.split_once('|') {
        let (start, end) = parse_span(span)?;
        addresses
            .split('+')
            .map(|a| {
                let address = parse_address(a)?;
                Some(MetadataAlignment {
                    notation: MetadataNotation::JamrSpan,
                    tokens: (start..end).collect(),
                    triple: tables.jamr.get(&address).copied(),
                    address,
                    on_role: false,
                })
            })
            .collect()
    } else {
        let (token, address) = item.split_once('-')?;
        let token: usize = token.parse().ok()?;
        let (address, on_role) = match address.strip_suffix(".r") {
            Some(a) => (a, true),
            None => (address, false),
        };
        let address = parse_address(address)?;
        Some(vec![MetadataAlignment {
            notation: MetadataNotation::IsiTree,
            tokens: vec![token],
            triple: tables.isi.get(&(address.clone(), on_role)).copied(),
            address,
            on_role,
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(comment: &str) -> Vec<(String, String)> {
        let mut m = Vec::new();
        parse_comment(comment, &mut m);
        m
    }

    #[test]
    fn several_keys_share_a_line() {
        assert_eq!(
            meta("# ::id a_pmid_2488_5690.10 ::amr-annotator SDL-AMR-09 ::preferred"),
            vec![
                ("id".to_string(), "a_pmid_2488_5690.10".to_string()),
                ("amr-annotator".to_string(), "SDL-AMR-09".to_string()),
                ("preferred".to_string(), String::new()),
            ]
        );
    }

    #[test]
    fn plain_comments_and_tab_separated_values() {
        assert!(meta("# AMR release (generated at 23:18:32)").is_empty());
        assert_eq!(
            meta("# ::node\t0.1\tdate-entity\t4-5"),
            vec![("node".to_string(), "0.1\tdate-entity\t4-5".to_string())]
        );
    }
}
