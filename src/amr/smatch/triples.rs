//! Smatch's own triple sets, rebuilt from a [`Graph`] in penman normal form.
//!
//! Smatch 1.0.4 (`amr.py`) does not read PENMAN the way penman does: it has its own character
//! scanner with quirks that change the triple counts, so matching its totals means replaying
//! those quirks on top of penman's normal form:
//!
//! * every node gets an instance triple, and the top node an attribute `TOP top`;
//! * a role ending in `-of` is inverted, except `consist-of`, `prep-out-of` and
//!   `prep-on-behalf-of`; penman inverts those three as well (`:consist-of` becomes
//!   `:consist`), so they are turned back here;
//! * `:mod` is stored as an inverted `:domain`; a `:mod` (or an inverted role) whose target is a
//!   constant is keyed under the constant and never reaches the triple lists, so it is dropped;
//! * a quoted constant loses its opening quote, its closing quote becomes `_`, and only its first
//!   whitespace-separated token survives (`"New York"` is read as `New`);
//! * labels compare lower-cased with trailing `_` removed (smatch's `normalize`).
//!
//! Alignments never reach the [`Graph`] triples, so they are ignored, as the oracle does after
//! stripping them from the text.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::amr::penman::decode::{decode_raw, Detail};
use crate::amr::penman::PenmanError;
use crate::amr::Graph;

/// Roles smatch keeps as written although they end in `-of`.
const NON_INVERTED_OF_ROLES: [&str; 3] = ["consist-of", "prep-out-of", "prep-on-behalf-of"];

/// A label (concept, role or constant) after smatch's `normalize`: a span of its graph's
/// label text, with a hash for quick rejection when two graphs are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Label {
    pub hash: u64,
    start: usize,
    end: usize,
}

/// FNV-1a: deterministic across runs and platforms, and good enough to reject unequal labels.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// FNV-1a as a [`Hasher`], for the variable index: variable names are short, and SipHash's
/// flood resistance buys nothing on one graph's names.
#[derive(Default)]
struct FnvHasher(u64);

impl Hasher for FnvHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325u64
        } else {
            self.0
        };
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = hash;
    }
}

/// An attribute triple `name(node, value)`, `TOP(top, top)` included.
#[derive(Clone, Debug)]
pub(crate) struct AttributeTriple {
    pub node: u16,
    pub name: Label,
    pub value: Label,
}

/// A relation triple `name(source, target)` between two nodes.
#[derive(Clone, Debug)]
pub(crate) struct RelationTriple {
    pub source: u16,
    pub name: Label,
    pub target: u16,
}

/// One AMR as smatch sees it: nodes with concepts, attributes and relations, node indices in
/// the order nodes are introduced.
///
/// Build it once per graph with [`SmatchGraph::new`] when the same graph is scored against many
/// others (SSA scores every pair of an image's captions), then call
/// [`super::smatch_prepared`].
#[derive(Clone, Debug, Default)]
pub struct SmatchGraph {
    pub(crate) concepts: Vec<Label>,
    pub(crate) attributes: Vec<AttributeTriple>,
    pub(crate) relations: Vec<RelationTriple>,
    /// The normalized text of every label, end to end: one allocation per graph instead of
    /// one per label.
    label_text: String,
}

impl SmatchGraph {
    /// Smatch's triples for `graph`.
    ///
    /// Graphs with more than 65,535 nodes are not AMRs anyone writes; nodes beyond that are
    /// dropped rather than indexed (smatch would take minutes on such a graph anyway).
    pub fn new(graph: &Graph) -> SmatchGraph {
        SmatchGraph::from_triples(
            &graph.top,
            graph
                .triples
                .iter()
                .map(|t| (t.source.as_str(), t.role.as_str(), t.target.as_str())),
        )
    }

    /// Smatch's triples for one PENMAN graph (what [`crate::amr::penman::parse`] accepts),
    /// read straight from the text without building a [`Graph`]:
    /// `SmatchGraph::parse(text)` equals `SmatchGraph::new(&parse(text)?)`.
    pub fn parse(text: &str) -> Result<SmatchGraph, PenmanError> {
        let (graph, _) = decode_raw(text, Detail::TriplesOnly)?;
        Ok(SmatchGraph::from_triples(
            graph.top,
            graph.triples.iter().map(|t| (t.source, t.role, t.target)),
        ))
    }

    /// Smatch's triples from penman-normal-form `(source, role, target)` triples.
    fn from_triples<'t, I>(top: &str, triples: I) -> SmatchGraph
    where
        I: Iterator<Item = (&'t str, &'t str, &'t str)> + Clone,
    {
        let mut graph = SmatchGraph::default();
        let mut node_index: HashMap<&str, u16, BuildHasherDefault<FnvHasher>> = HashMap::default();
        for (source, _, concept) in triples.clone().filter(|t| t.1 == ":instance") {
            // smatch only makes a node of `(v / concept)`; `(v)` leaves `v` a constant.
            if concept.is_empty() || node_index.contains_key(source) {
                continue;
            }
            let Ok(index) = u16::try_from(graph.concepts.len()) else {
                break;
            };
            node_index.insert(source, index);
            let label = graph.label(&concept_as_smatch_reads_it(concept));
            graph.concepts.push(label);
        }

        // smatch puts TOP on the first node it meets, which is penman's top.
        if let Some(&top) = node_index.get(top) {
            let (name, value) = (graph.label("TOP"), graph.label("top"));
            graph.attributes.push(AttributeTriple {
                node: top,
                name,
                value,
            });
        }
        for (source, role, target) in triples.filter(|t| t.1 != ":instance") {
            let role = role.strip_prefix(':').unwrap_or(role);
            let source = node_index.get(source).copied();
            let target_node = node_index.get(target).copied();
            match smatch_triple(role, source, target_node) {
                SmatchTriple::Relation(name, from, to) => {
                    let name = graph.label(&name);
                    graph.relations.push(RelationTriple {
                        source: from,
                        name,
                        target: to,
                    });
                }
                SmatchTriple::Attribute(name, node) => {
                    let name = graph.label(name);
                    let value = graph.label(&constant_as_smatch_reads_it(target));
                    graph.attributes.push(AttributeTriple { node, name, value });
                }
                SmatchTriple::Dropped => {}
            }
        }
        graph
    }

    /// Appends `raw` after smatch's `normalize` (lower case, trailing `_` removed) to the label
    /// text and returns its label.
    fn label(&mut self, raw: &str) -> Label {
        let start = self.label_text.len();
        // AMR labels are nearly always ASCII: lower-case them without Unicode tables.
        if raw.is_ascii() {
            self.label_text.push_str(raw);
            self.label_text[start..].make_ascii_lowercase();
        } else {
            self.label_text.push_str(&raw.to_lowercase());
        }
        let end = start + self.label_text[start..].trim_end_matches('_').len();
        self.label_text.truncate(end);
        Label {
            hash: fnv1a(&self.label_text.as_bytes()[start..]),
            start,
            end,
        }
    }

    /// The normalized text of one of this graph's labels.
    pub(crate) fn text(&self, label: Label) -> &str {
        &self.label_text[label.start..label.end]
    }

    /// Whether `label` of this graph and `other_label` of `other` are the same label.
    #[inline]
    pub(crate) fn same(&self, label: Label, other: &SmatchGraph, other_label: Label) -> bool {
        label.hash == other_label.hash && self.text(label) == other.text(other_label)
    }

    /// Number of nodes (instance triples).
    pub fn node_count(&self) -> usize {
        self.concepts.len()
    }

    /// Smatch's triple total: instances + attributes (TOP included) + relations.
    pub fn triple_count(&self) -> usize {
        self.concepts.len() + self.attributes.len() + self.relations.len()
    }
}

/// Where one penman triple lands in smatch's lists.
#[derive(Debug, PartialEq, Eq)]
enum SmatchTriple<'r> {
    Relation(Cow<'r, str>, u16, u16),
    Attribute(&'r str, u16),
    Dropped,
}

/// Smatch's reading of a non-instance penman triple `(source, role, target)`; `source` and
/// `target` are node indices when they are smatch nodes.
fn smatch_triple(role: &str, source: Option<u16>, target: Option<u16>) -> SmatchTriple<'_> {
    // penman deinverted `(t :consist-of s)` into `(s :consist t)`; smatch keeps `consist-of`.
    if let (Some(s), Some(t)) = (source, target) {
        if NON_INVERTED_OF_ROLES
            .iter()
            .any(|kept| kept.strip_suffix("-of") == Some(role))
        {
            return SmatchTriple::Relation(Cow::Owned(format!("{role}-of")), t, s);
        }
    }
    if role == "mod" {
        // `:mod` becomes an inverted `:domain`; towards a constant it is lost.
        return match (source, target) {
            (Some(s), Some(t)) => SmatchTriple::Relation(Cow::Borrowed("domain"), t, s),
            _ => SmatchTriple::Dropped,
        };
    }
    let inverted = role.ends_with("-of") && !NON_INVERTED_OF_ROLES.contains(&role);
    match (source, target) {
        (Some(s), Some(t)) => SmatchTriple::Relation(Cow::Borrowed(role), s, t),
        // penman leaves an inverted role to a constant as written; smatch files it under the
        // constant, which is no node, so the triple disappears.
        (Some(_), None) if inverted => SmatchTriple::Dropped,
        (Some(s), None) => SmatchTriple::Attribute(role, s),
        (None, _) => SmatchTriple::Dropped,
    }
}

/// A constant as smatch's scanner reads it after a role: spaces kept, quotes dropped with the
/// closing one turned into `_`, then only the first whitespace-separated token.
fn constant_as_smatch_reads_it(constant: &str) -> Cow<'_, str> {
    if !constant.is_empty() && !constant.chars().any(|c| c == '"' || c.is_whitespace()) {
        return Cow::Borrowed(constant);
    }
    let mut scanned = String::with_capacity(constant.len() + 1);
    let mut in_quote = false;
    for c in constant.chars() {
        if c == '"' {
            if in_quote {
                scanned.push('_');
            }
            in_quote = !in_quote;
        } else {
            scanned.push(c);
        }
    }
    Cow::Owned(
        scanned
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// A concept as smatch's scanner reads it after `/`: spaces dropped, quotes as for constants.
fn concept_as_smatch_reads_it(concept: &str) -> Cow<'_, str> {
    if !concept.contains(['"', ' ']) {
        return Cow::Borrowed(concept);
    }
    let mut scanned = String::with_capacity(concept.len() + 1);
    let mut in_quote = false;
    for c in concept.chars() {
        match c {
            ' ' => {}
            '"' => {
                if in_quote {
                    scanned.push('_');
                }
                in_quote = !in_quote;
            }
            _ => scanned.push(c),
        }
    }
    Cow::Owned(scanned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amr::Triple;

    fn graph(top: &str, triples: &[(&str, &str, &str)]) -> Graph {
        Graph {
            top: top.to_owned(),
            triples: triples
                .iter()
                .map(|(s, r, t)| Triple::new(*s, *r, *t))
                .collect(),
            ..Graph::default()
        }
    }

    #[test]
    fn quoted_constants_read_like_smatch() {
        // amr.py: `"Brown"` scans to `Brown_`, `"New York"` to `New` (split()[1]).
        assert_eq!(constant_as_smatch_reads_it("\"Brown\""), "Brown_");
        assert_eq!(constant_as_smatch_reads_it("\"New York\""), "New");
        assert_eq!(constant_as_smatch_reads_it("\"\""), "_");
        assert_eq!(constant_as_smatch_reads_it("-"), "-");
        assert_eq!(concept_as_smatch_reads_it("\"a b\""), "ab_");
    }

    #[test]
    fn labels_fold_case_and_trailing_underscores() {
        let (mut a, mut b) = (SmatchGraph::default(), SmatchGraph::default());
        let brown = a.label("Brown_");
        let browne = a.label("Browne");
        let other = b.label("brown");
        assert_eq!(a.text(brown), "brown");
        assert!(a.same(brown, &b, other));
        assert!(!a.same(browne, &b, other));
    }

    #[test]
    fn roles_follow_smatch_conventions() {
        // (w / want-01 :ARG0 (b / boy) :mod (g / good) :consist-of (c / cake)
        //    :polarity - :mod "x" :ARG1-of 5 :name "A B")
        // penman normal form of the above:
        let g = graph(
            "w",
            &[
                ("w", ":instance", "want-01"),
                ("w", ":ARG0", "b"),
                ("b", ":instance", "boy"),
                ("w", ":mod", "g"),
                ("g", ":instance", "good"),
                ("c", ":consist", "w"),
                ("c", ":instance", "cake"),
                ("w", ":polarity", "-"),
                ("w", ":mod", "\"x\""),
                ("w", ":ARG1-of", "5"),
                ("w", ":name", "\"A B\""),
            ],
        );
        let s = SmatchGraph::new(&g);
        // Hand-derived from amr.py: 4 instances; TOP, polarity, name attributes; ARG0,
        // domain(g, w), consist-of(w, c) relations; `:mod "x"` and `:ARG1-of 5` vanish.
        assert_eq!(s.node_count(), 4);
        assert_eq!(s.attributes.len(), 3);
        assert_eq!(s.relations.len(), 3);
        assert_eq!(s.triple_count(), 10);
        let rel: Vec<(u16, &str, u16)> = s
            .relations
            .iter()
            .map(|r| (r.source, s.text(r.name), r.target))
            .collect();
        assert_eq!(
            rel,
            vec![(0, "arg0", 1), (2, "domain", 0), (0, "consist-of", 3)]
        );
        let name = &s.attributes[2];
        assert_eq!((s.text(name.name), s.text(name.value)), ("name", "a"));
    }
}
