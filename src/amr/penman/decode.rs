//! PENMAN text to [`Graph`]: a recursive-descent parser that emits triples directly in
//! penman 1.3.1's normal form (`penman.decode(text).triples` with the default model).
//!
//! The conventions, each checked against penman 1.3.1:
//! - a node `(x / c)` gives `(x, :instance, c)` first in its block of triples; a node without
//!   a concept (`(x :ARG0 y)` or `(x / :ARG0 y)`) gives `(x, :instance, "")` in the same place
//!   (penman's `None`), unless the node has an explicit `:instance` edge;
//! - a role is inverted when it ends in `-of` (the default model knows no roles, so
//!   `:consist-of` becomes `:consist` and `:domain-of` becomes `:domain`; `:mod` stays);
//!   an inverted edge to a nested node is always turned around, an inverted edge to an atomic
//!   target only when the target is a variable of the graph (anywhere in it);
//! - constants are kept as written, quoted strings with their quotes and escapes;
//! - alignment markers are removed from triples and kept in [`Graph::alignments`];
//! - an edge without a target (`:ARG0 :ARG1 x`, `:ARG0)`) gets the target `""`.
//!
//! Where penman is lenient with input that cannot be a graph, this parser reports an error
//! instead: an empty node `()`, content after the graph's closing parenthesis, and nesting
//! deeper than [`MAX_DEPTH`].

use super::lexer::{line_column, Kind, Lexer, Token};
use super::metadata::parse_comment;
use super::PenmanError;
use crate::amr::graph::{Alignment, Graph, Triple};

/// Deepest node nesting accepted; real AMRs stay far below (the deepest Bio AMR is ~20).
pub const MAX_DEPTH: usize = 512;

/// The tree layout of a parsed graph, for resolving the tree addresses used by
/// `# ::alignments` and `# ::node` metadata lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Nodes in document order; node 0 is the top.
    pub nodes: Vec<LayoutNode>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LayoutNode {
    /// The node's `:instance` triple (before placeholders are dropped: see `drop_placeholders`).
    pub instance: Option<usize>,
    pub children: Vec<LayoutChild>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LayoutChild {
    /// The edge's triple.
    pub triple: usize,
    pub target: LayoutTarget,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LayoutTarget {
    Node(usize),
    /// A symbol or string written in place; `reference` when it names a variable of the graph.
    Atomic {
        reference: bool,
    },
    Missing,
}

/// One triple as slices of the source text (penman's normal form never needs a string the
/// text does not hold: inverting a role only strips `-of`); `""` stands for penman's `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawTriple<'a> {
    pub source: &'a str,
    pub role: &'a str,
    pub target: &'a str,
}

/// An alignment marker as written: `prefix` (`e.`), indices in `indices[start..end]` of
/// [`RawGraph::indices`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawAlignment<'a> {
    pub triple: usize,
    pub on_role: bool,
    pub prefix: &'a str,
    pub start: usize,
    pub end: usize,
}

/// A parsed graph that borrows every string from the source text; [`RawGraph::into_graph`]
/// makes the owned [`Graph`], and Smatch reads its triples without that copy.
#[derive(Clone, Debug)]
pub(crate) struct RawGraph<'a> {
    pub top: &'a str,
    pub triples: Vec<RawTriple<'a>>,
    pub metadata: Vec<(String, String)>,
    pub alignments: Vec<RawAlignment<'a>>,
    pub indices: Vec<usize>,
}

impl RawGraph<'_> {
    pub(crate) fn into_graph(self) -> Graph {
        let indices = &self.indices;
        Graph {
            top: self.top.to_string(),
            triples: self
                .triples
                .iter()
                .map(|t| Triple::new(t.source, t.role, t.target))
                .collect(),
            metadata: self.metadata,
            alignments: self
                .alignments
                .iter()
                .map(|a| Alignment {
                    triple: a.triple,
                    on_role: a.on_role,
                    prefix: a.prefix.to_string(),
                    indices: indices[a.start..a.end].to_vec(),
                })
                .collect(),
        }
    }
}

struct Parser<'a> {
    lexer: Lexer<'a>,
    text: &'a str,
    triples: Vec<RawTriple<'a>>,
    alignments: Vec<RawAlignment<'a>>,
    indices: Vec<usize>,
    /// Variables of the graph; sorted once the whole tree is read (binary search).
    variables: Vec<&'a str>,
    /// Atomic edges with an inverted role: turned around at the end if the target is a variable.
    pending_inversions: Vec<usize>,
    /// Concept placeholders of nodes that turned out to have an explicit `:instance` edge.
    dropped_placeholders: Vec<usize>,
    layout: Option<Layout>,
    /// Keep metadata and alignments (else they are checked but not stored).
    keep_annotations: bool,
}

/// What [`decode_raw`] keeps besides the triples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Detail {
    /// Metadata and alignments.
    Annotations,
    /// Metadata, alignments and the tree layout.
    Layout,
    /// The triples alone (Smatch needs no more); the text is checked all the same.
    TriplesOnly,
}

/// Parses one graph with its leading comment and metadata lines; with `want_layout`, also
/// returns the tree layout.
pub(crate) fn decode(
    text: &str,
    want_layout: bool,
) -> Result<(Graph, Option<Layout>), PenmanError> {
    let detail = if want_layout {
        Detail::Layout
    } else {
        Detail::Annotations
    };
    decode_raw(text, detail).map(|(g, layout)| (g.into_graph(), layout))
}

/// [`decode`] without copying the strings out of `text`.
pub(crate) fn decode_raw(
    text: &str,
    detail: Detail,
) -> Result<(RawGraph<'_>, Option<Layout>), PenmanError> {
    let mut parser = Parser {
        lexer: Lexer::new(text),
        text,
        triples: Vec::with_capacity(text.len() / 24),
        alignments: Vec::new(),
        indices: Vec::new(),
        variables: Vec::new(),
        pending_inversions: Vec::new(),
        dropped_placeholders: Vec::new(),
        layout: (detail == Detail::Layout).then(Layout::default),
        keep_annotations: detail != Detail::TriplesOnly,
    };
    let mut metadata = Vec::new();
    loop {
        match parser.lexer.peek() {
            Some(t) if t.kind == Kind::Comment => {
                parser.lexer.next_token();
                if parser.keep_annotations {
                    parse_comment(parser.lexer.text(t), &mut metadata);
                }
            }
            Some(_) => break,
            None => return Err(parser.error_at_end("unexpected end of input: no graph")),
        }
    }
    let top = parser.node(0, None)?;
    while let Some(t) = parser.lexer.next_token() {
        if t.kind != Kind::Comment {
            return Err(parser.error_at(
                t,
                format!(
                    "unexpected {} `{}` after the end of the graph",
                    t.kind.describe(),
                    parser.lexer.text(t)
                ),
            ));
        }
    }
    parser.variables.sort_unstable();
    parser.resolve_references();
    parser.finish_inversions();
    parser.drop_placeholders();
    let graph = RawGraph {
        top,
        triples: parser.triples,
        metadata,
        alignments: parser.alignments,
        indices: parser.indices,
    };
    Ok((graph, parser.layout))
}

pub(crate) fn is_inverted(role: &str) -> bool {
    role.ends_with("-of")
}

/// penman's `Model.invert_role` for the default model, for a role that [`is_inverted`]: the
/// role without its `-of`.
fn deinvert_role(role: &str) -> &str {
    role.strip_suffix("-of").unwrap_or(role)
}

impl<'a> Parser<'a> {
    fn error_at(&self, token: Token, message: impl Into<String>) -> PenmanError {
        let (line, column) = line_column(self.text, token.start);
        PenmanError {
            line,
            column,
            message: message.into(),
        }
    }

    fn error_at_end(&self, message: impl Into<String>) -> PenmanError {
        let (line, column) = line_column(self.text, self.lexer.last_end);
        PenmanError {
            line,
            column,
            message: message.into(),
        }
    }

    fn unexpected(&self, token: Option<Token>, expected: &str) -> PenmanError {
        match token {
            Some(t) => self.error_at(
                t,
                format!(
                    "expected {expected}, found {} `{}`",
                    t.kind.describe(),
                    self.lexer.text(t)
                ),
            ),
            None => self.error_at_end(format!("expected {expected}, found the end of the input")),
        }
    }

    fn expect(&mut self, kind: Kind, expected: &str) -> Result<Token, PenmanError> {
        match self.lexer.peek() {
            Some(t) if t.kind == kind => {
                self.lexer.next_token();
                Ok(t)
            }
            other => Err(self.unexpected(other, expected)),
        }
    }

    fn peek_required(&mut self, expected: &str) -> Result<Token, PenmanError> {
        match self.lexer.peek() {
            Some(t) => Ok(t),
            None => Err(self.unexpected(None, expected)),
        }
    }

    /// Parses an alignment marker if one follows, attached to `triple`.
    fn alignment(&mut self, triple: usize, on_role: bool) -> Result<(), PenmanError> {
        if let Some(t) = self.lexer.accept(Kind::Alignment) {
            let marker = &self.lexer.text(t)[1..];
            let digits_at = marker.bytes().position(|b| b.is_ascii_digit()).unwrap_or(0);
            let (prefix, list) = marker.split_at(digits_at);
            let start = self.indices.len();
            // The lexer matched `[0-9]+(,[0-9]+)*`: only overflow can go wrong.
            for index in list.split(',') {
                let value = index.bytes().try_fold(0usize, |v, b| {
                    v.checked_mul(10)?.checked_add(usize::from(b - b'0'))
                });
                match value {
                    Some(i) => self.indices.push(i),
                    None => {
                        return Err(
                            self.error_at(t, format!("alignment index `{index}` is too large"))
                        )
                    }
                }
            }
            if !self.keep_annotations {
                self.indices.truncate(start);
                return Ok(());
            }
            self.alignments.push(RawAlignment {
                triple,
                on_role,
                prefix,
                start,
                end: self.indices.len(),
            });
        }
        Ok(())
    }

    /// `Node := '(' Variable ('/' Concept Alignment?)? Edge* ')'`; returns the variable.
    /// `edge` is the triple of the edge leading here (and whether it was inverted), whose
    /// open end is this node's variable.
    fn node(&mut self, depth: usize, edge: Option<(usize, bool)>) -> Result<&'a str, PenmanError> {
        if depth >= MAX_DEPTH {
            let message = format!("nodes nested deeper than {MAX_DEPTH}");
            return Err(match self.lexer.peek() {
                Some(t) => self.error_at(t, message),
                None => self.error_at_end(message),
            });
        }
        self.expect(Kind::LParen, "`(`")?;
        let var_token = match self.lexer.peek() {
            Some(t) if t.kind == Kind::Symbol => {
                self.lexer.next_token();
                t
            }
            Some(t) if t.kind == Kind::RParen => {
                return Err(self.error_at(t, "empty node: expected a variable after `(`"))
            }
            other => return Err(self.unexpected(other, "a variable")),
        };
        let var = self.lexer.text(var_token);
        self.variables.push(var);
        if let Some((edge_index, inverted)) = edge {
            let t = &mut self.triples[edge_index];
            if inverted {
                t.source = var;
            } else {
                t.target = var;
            }
        }
        let instance_index = self.triples.len();
        let layout_node = self.layout.as_mut().map(|layout| {
            layout.nodes.push(LayoutNode {
                instance: Some(instance_index),
                children: Vec::new(),
            });
            layout.nodes.len() - 1
        });
        let has_slash = self.lexer.accept(Kind::Slash).is_some();
        let concept = match self.lexer.peek() {
            Some(t) if has_slash && matches!(t.kind, Kind::Symbol | Kind::Str) => {
                self.lexer.next_token();
                Some(self.lexer.text(t))
            }
            _ => None,
        };
        self.triples.push(RawTriple {
            source: var,
            role: ":instance",
            target: concept.unwrap_or(""),
        });
        if concept.is_some() {
            self.alignment(instance_index, false)?;
        }
        let mut explicit_instance = false;
        loop {
            let t = self.peek_required("a role or `)`")?;
            if t.kind == Kind::RParen {
                self.lexer.next_token();
                break;
            }
            let child = self.edge(var, depth, &mut explicit_instance)?;
            if let (Some(layout), Some(node)) = (&mut self.layout, layout_node) {
                layout.nodes[node].children.push(child);
            }
        }
        if !has_slash && explicit_instance {
            self.dropped_placeholders.push(instance_index);
        }
        Ok(var)
    }

    /// `Edge := Role Alignment? (Constant Alignment? | Node)?`.
    fn edge(
        &mut self,
        var: &'a str,
        depth: usize,
        explicit_instance: &mut bool,
    ) -> Result<LayoutChild, PenmanError> {
        let role_token = self.expect(Kind::Role, "a role or `)`")?;
        let role = self.lexer.text(role_token);
        *explicit_instance |= role == ":instance";
        let index = self.triples.len();
        let inverted = is_inverted(role);
        self.triples.push(RawTriple {
            source: var,
            role,
            target: "",
        });
        self.alignment(index, true)?;
        let target = self.peek_required("a target after the role")?;
        let target = match target.kind {
            Kind::Symbol | Kind::Str => {
                self.lexer.next_token();
                self.triples[index].target = self.lexer.text(target);
                self.alignment(index, false)?;
                if inverted {
                    self.pending_inversions.push(index);
                }
                // Whether this names a variable is only known once the whole tree is read.
                LayoutTarget::Atomic {
                    reference: target.kind == Kind::Symbol,
                }
            }
            Kind::LParen => {
                if inverted {
                    let t = &mut self.triples[index];
                    t.role = deinvert_role(role);
                    t.target = var;
                }
                let node = self.layout.as_ref().map_or(0, |l| l.nodes.len());
                self.node(depth + 1, Some((index, inverted)))?;
                LayoutTarget::Node(node)
            }
            // An edge without a target; penman keeps it with a `None` target.
            Kind::Role | Kind::RParen => LayoutTarget::Missing,
            _ => return Err(self.unexpected(Some(target), "a constant, a string or `(`")),
        };
        Ok(LayoutChild {
            triple: index,
            target,
        })
    }

    /// Marks which atomic targets in the layout name a variable (known only after the whole
    /// tree is read); must run before the inversions rewrite the triples.
    fn resolve_references(&mut self) {
        let (Some(layout), triples, variables) = (&mut self.layout, &self.triples, &self.variables)
        else {
            return;
        };
        for node in &mut layout.nodes {
            for child in &mut node.children {
                if let LayoutTarget::Atomic { reference } = &mut child.target {
                    *reference = *reference
                        && variables
                            .binary_search(&triples[child.triple].target)
                            .is_ok();
                }
            }
        }
    }

    fn finish_inversions(&mut self) {
        if self.pending_inversions.is_empty() {
            return;
        }
        for &index in &self.pending_inversions {
            let t = &mut self.triples[index];
            if self.variables.binary_search(&t.target).is_ok() {
                *t = RawTriple {
                    source: t.target,
                    role: deinvert_role(t.role),
                    target: t.source,
                };
            }
        }
    }

    /// Removes concept placeholders of nodes with an explicit `:instance` edge and renumbers
    /// the triple indices that point past them.
    fn drop_placeholders(&mut self) {
        if self.dropped_placeholders.is_empty() {
            return;
        }
        let dropped = &self.dropped_placeholders;
        let shift = |i: usize| i - dropped.iter().filter(|&&d| d < i).count();
        for a in &mut self.alignments {
            a.triple = shift(a.triple);
        }
        if let Some(layout) = &mut self.layout {
            for node in &mut layout.nodes {
                node.instance = node.instance.filter(|i| !dropped.contains(i)).map(shift);
                for child in &mut node.children {
                    child.triple = shift(child.triple);
                }
            }
        }
        let mut index = 0;
        self.triples.retain(|_| {
            let keep = !dropped.contains(&index);
            index += 1;
            keep
        });
    }
}
