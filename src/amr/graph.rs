//! The AMR graph model shared by the PENMAN codec, Smatch, alignment, merging and sampling.
//!
//! A graph is a list of triples in the same normal form as `penman.decode(text).triples`
//! (penman 1.3.1): `(source, role, target)` with the role written with its colon, instance
//! triples as `(var, ":instance", concept)`, inverted roles (`:ARG0-of`) turned back into their
//! normal direction, constants kept as written (quoted strings keep their quotes).
//! Where penman has `None` (a node without a concept, an edge without a target) the triple
//! has the empty string, which no PENMAN token can be.

use std::collections::{BTreeMap, BTreeSet};

/// One edge, attribute or instance of an AMR graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Triple {
    pub source: String,
    /// The role with its leading colon: `:instance`, `:ARG0`, `:mod`, ...
    pub role: String,
    pub target: String,
}

impl Triple {
    pub fn new(
        source: impl Into<String>,
        role: impl Into<String>,
        target: impl Into<String>,
    ) -> Self {
        Triple {
            source: source.into(),
            role: role.into(),
            target: target.into(),
        }
    }

    pub fn is_instance(&self) -> bool {
        self.role == ":instance"
    }
}

/// Which surface alignment notation a graph used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlignmentFlavour {
    /// `~e.3`, `~e.1,2`
    Isi,
    /// `~3` on concepts/roles, or `# ::alignments` / `# ::node` / `# ::edge` metadata lines
    Jamr,
    None,
}

impl AlignmentFlavour {
    pub fn as_str(self) -> &'static str {
        match self {
            AlignmentFlavour::Isi => "isi",
            AlignmentFlavour::Jamr => "jamr",
            AlignmentFlavour::None => "none",
        }
    }
}

/// A surface alignment of one triple to token indices.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Alignment {
    /// Index into [`Graph::triples`].
    pub triple: usize,
    /// `true` for a role alignment (`:ARG1~e.2`), `false` for the target/concept (`gene~e.3`).
    pub on_role: bool,
    /// The prefix as written: `e.` for ISI, empty for JAMR-style `~3`.
    pub prefix: String,
    /// 0-based token indices.
    pub indices: Vec<usize>,
}

/// An AMR graph with its metadata and surface alignments.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Graph {
    /// The top variable (or constant, for a graph that is a bare constant).
    pub top: String,
    /// Triples in document order, penman normal form.
    pub triples: Vec<Triple>,
    /// Metadata lines `# ::key value`, in order.
    pub metadata: Vec<(String, String)>,
    pub alignments: Vec<Alignment>,
}

impl Graph {
    /// The value of the first `# ::key` metadata entry.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `# ::id`, when present.
    pub fn id(&self) -> Option<&str> {
        self.meta("id")
    }

    /// Instance triples as `var -> concept`.
    pub fn instances(&self) -> BTreeMap<&str, &str> {
        self.triples
            .iter()
            .filter(|t| t.is_instance())
            .map(|t| (t.source.as_str(), t.target.as_str()))
            .collect()
    }

    /// The graph's variables (sources of instance triples), in document order.
    pub fn variables(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.triples
            .iter()
            .filter(|t| t.is_instance())
            .map(|t| t.source.as_str())
            .filter(|v| seen.insert(*v))
            .collect()
    }

    /// Non-instance triples whose target is a variable (edges between nodes).
    pub fn edges(&self) -> impl Iterator<Item = &Triple> {
        let vars: BTreeSet<&str> = self.variables().into_iter().collect();
        self.triples
            .iter()
            .filter(move |t| !t.is_instance() && vars.contains(t.target.as_str()))
    }

    /// Non-instance triples whose target is a constant (attributes).
    pub fn attributes(&self) -> impl Iterator<Item = &Triple> {
        let vars: BTreeSet<&str> = self.variables().into_iter().collect();
        self.triples
            .iter()
            .filter(move |t| !t.is_instance() && !vars.contains(t.target.as_str()))
    }
}
