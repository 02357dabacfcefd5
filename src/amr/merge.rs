//! Meta-vgAMR: merge an image's caption vgAMRs into one graph (METHODS.md §1.3–1.4).
//!
//! The captions are merged pairwise in UPGMA order over `D = 1 - Smatch F` ([`merge_order`]);
//! each pairwise merge ([`merge_pair`]) decides which node of graph 2 is the same concept as a
//! node of graph 1, folds it into that node (keeping both labels as synonyms), and brings the
//! rest of graph 2 over. Graph 1 is the larger graph by node count; its root stays the root.
//!
//! # Node rules
//!
//! First the paper's criterion 1 (§4, footnote 5): visually grounded entity nodes that point to
//! the same image boxes merge whatever their words ("A male" / "A person" become one node
//! `male#^#person`). The same boxes: COCO the same box list; Flickr the same phrase chain, or as
//! many boxes each with a partner of IoU > 0.9 both ways. Each node pairs with at most one node of
//! the other graph, identical labels first, then the most similar, then the first in order.
//!
//! Then rules are tried in this order for every remaining node pair (graph-1 node, graph-2 node)
//! and the first that applies decides. `sim` is [`label_similarity`]: the best word similarity
//! over the two nodes' synonym pairs, sense suffixes stripped, `-1` out of vocabulary.
//!
//! 0. `include-91` and `multi-sentence` nodes never merge.
//! 1. `and`/`or` merge with a node of the same kind when either is its graph's root, else when
//!    some pair of their entity neighbours within 2 hops (coordinations excluded) has
//!    `sim >= 0.5`; they never merge with anything else.
//! 2. Both grounded with boxes: decided by criterion 1, nothing else merges them. Both grounded
//!    to an unknown region: COCO `sim > 0.5`; Flickr the same phrase id and label.
//! 3. One grounded, the other not: no merge.
//! 4. Identical labels (after stripping senses) of the same kind: a noun never merges with a
//!    predicate (`hold` / `hold-01`). Non-predicates merge (Flickr: unless an adjective, the
//!    lexicon's adjectives, not its adverbs and prepositions); predicates merge when they have no
//!    neighbours on one side or some neighbour pair has `sim >= 0.5`. A predicate's neighbours
//!    are its parents and `:ARGn` children, entities and `and`/`or` nodes (which are only similar
//!    to a coordination of the same kind), so "a lady and a man run" keeps its `run-02` apart
//!    from "a lady runs".
//! 5. Nodes of the same kind with `sim >= 0.7` (Flickr `>= 0.5`) and neither node's labels in the
//!    other graph: merge, COCO with the neighbour check of rule 4, Flickr unless an adjective.
//! 6. Predicates whose `:ARG0` children are the same meta node merge when their `:ARG1` children
//!    are the same too and their `:ARG2` children are the same or `sim > 0.7`, or when `:ARG1`
//!    or `:ARG2` is missing on one side and `sim > 0.8` (Flickr 0.3 / 0.31 / 0.32). "The same"
//!    needs the correspondences of rules 1–5, so rule 6 runs as a second pass after them.
//!
//! With no common node, a `multi-sentence` root joins the two graphs (`:snt1`, `:snt2`; a graph
//! 1 that already has a `multi-sentence` root gets the next `:sntN`). Grounded nodes with
//! different box lists that share a box exactly (IoU 1) and have `sim > 0.34` are linked by
//! `:subset` from the node with more boxes. Finally self-loops and directed cycles are removed.
//!
//! Where this differs from the reference code (`SamsungLabs/CIC-BART-SSA`, `ssa-*/ssa.py`) see
//! `docs/decisions/ssa-reference-deviations.md`.

use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::amr::align::{is_predicate, strip_sense, Grounding, ModifierLexicon, VgAmr};
use crate::amr::graph::{Graph, Triple};
use crate::amr::smatch::{smatch_prepared, SmatchGraph, SmatchOptions};
use crate::cluster::{upgma, DistanceMatrix};
use crate::error::{Error, Result};
use crate::text::WordVectors;

/// Separator of synonym labels in the reference's PENMAN output (`man#^#person`).
pub const SYNONYM_SEPARATOR: &str = "#^#";

/// Similarity of two words: `1 - min(1, cosine distance)` of their vectors, `-1` when either is
/// out of vocabulary.
pub trait WordSimilarity {
    fn word_similarity(&self, a: &str, b: &str) -> f64;
}

/// A fixed table of word-pair similarities (symmetric; unknown pairs `-1`, a word with itself 1).
///
/// For worked examples, and for callers that computed similarities elsewhere.
#[derive(Clone, Debug, Default)]
pub struct SimilarityTable {
    pairs: BTreeMap<(String, String), f64>,
}

impl SimilarityTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `sim(a, b) = sim(b, a) = value`.
    pub fn with(mut self, a: &str, b: &str, value: f64) -> Self {
        self.pairs.insert((a.to_string(), b.to_string()), value);
        self.pairs.insert((b.to_string(), a.to_string()), value);
        self
    }
}

impl WordSimilarity for SimilarityTable {
    fn word_similarity(&self, a: &str, b: &str) -> f64 {
        if a == b {
            return 1.0;
        }
        self.pairs
            .get(&(a.to_string(), b.to_string()))
            .copied()
            .unwrap_or(-1.0)
    }
}

impl WordSimilarity for WordVectors {
    fn word_similarity(&self, a: &str, b: &str) -> f64 {
        self.similarity(a, b)
    }
}

/// Word similarity without vectors: equal words 1, anything else out of vocabulary (-1). With
/// it only identical labels, groundings and argument structure merge nodes.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExactWords;

impl WordSimilarity for ExactWords {
    fn word_similarity(&self, a: &str, b: &str) -> f64 {
        if a == b {
            1.0
        } else {
            -1.0
        }
    }
}

/// Which dataset's rule set to merge with.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum RuleSet {
    /// `ssa-coco/ssa.py`: COCO Entities class groundings.
    #[default]
    Coco,
    /// `SSA-FLICKR/ssa.py`: Flickr30k Entities phrase-chain groundings.
    Flickr,
}

impl RuleSet {
    fn same_meaning_threshold(self) -> f64 {
        match self {
            RuleSet::Coco => 0.7,
            RuleSet::Flickr => 0.5,
        }
    }

    /// Thresholds of rule 6: different `:ARG2`, missing `:ARG2`, missing `:ARG1`.
    fn predicate_thresholds(self) -> (f64, f64, f64) {
        match self {
            RuleSet::Coco => (0.7, 0.8, 0.8),
            RuleSet::Flickr => (0.3, 0.31, 0.32),
        }
    }
}

/// Which nodes count as neighbours in a neighbour check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Neighbours {
    /// Entities only: the 2-hop check of `and`/`or` nodes, whose reference skips `and` parents.
    Entities,
    /// Entities and `and`/`or` nodes: the check of identical and similar labels, where the
    /// reference keeps a coordination among a predicate's neighbours.
    WithCoordinations,
}

/// Threshold of the neighbour checks (the reference's `glove_threshold`).
const NEIGHBOUR_THRESHOLD: f64 = 0.5;
/// Similarity a `:subset` pair needs.
const SUBSET_THRESHOLD: f64 = 0.34;

/// A comparison of a label similarity with a threshold: `> value` when `strict`, else `>=`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Threshold {
    value: f64,
    strict: bool,
}

impl Threshold {
    fn above(value: f64) -> Threshold {
        Threshold {
            value,
            strict: true,
        }
    }

    fn at_least(value: f64) -> Threshold {
        Threshold {
            value,
            strict: false,
        }
    }

    fn passes(self, sim: f64) -> bool {
        if self.strict {
            sim > self.value
        } else {
            sim >= self.value
        }
    }
}

/// What a merge decided through word similarities: every comparison of two nodes' label
/// similarity with a threshold, and the order in which criterion 1 took its candidates.
///
/// Word similarities enter the merge only through these decisions; everything else it does
/// depends on the graphs alone. So when other word vectors give every recorded decision the
/// same outcome ([`holds`](Self::holds)), the merge under them takes the same path and builds
/// the same meta graph, bit for bit: a refit of the word vectors need not merge such an
/// image again.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MergeLog {
    decisions: Vec<Decision>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum Decision {
    /// `label_similarity(a, b)` compared with `threshold`, which it passed or not.
    Threshold {
        a: Vec<String>,
        b: Vec<String>,
        threshold: Threshold,
        passes: bool,
    },
    /// Criterion 1's candidates in the order they were found (whether their labels are
    /// identical, the two nodes' labels) and the order it took them in.
    Order {
        candidates: Vec<(bool, Vec<String>, Vec<String>)>,
        taken: Vec<u32>,
    },
}

impl MergeLog {
    /// Whether `similarity` gives every recorded decision the outcome it had.
    pub fn holds(&self, similarity: &dyn WordSimilarity) -> bool {
        self.decisions.iter().all(|decision| match decision {
            Decision::Threshold {
                a,
                b,
                threshold,
                passes,
            } => threshold.passes(label_similarity(a, b, similarity)) == *passes,
            Decision::Order { candidates, taken } => {
                let sims: Vec<(bool, f64)> = candidates
                    .iter()
                    .map(|(identical, a, b)| (*identical, label_similarity(a, b, similarity)))
                    .collect();
                candidate_order(&sims) == *taken
            }
        })
    }

    /// How many decisions were recorded.
    pub fn len(&self) -> usize {
        self.decisions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.decisions.is_empty()
    }
}

/// Criterion 1's order of its candidates, given as (identical labels, label similarity) in the
/// order they were found (graph-1 then graph-2 node order): identical labels first, then the
/// most similar, then the order found.
fn candidate_order(candidates: &[(bool, f64)]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..candidates.len() as u32).collect();
    order.sort_by(|&x, &y| {
        let (cx, cy) = (candidates[x as usize], candidates[y as usize]);
        cy.0.cmp(&cx.0).then(cy.1.total_cmp(&cx.1)).then(x.cmp(&y))
    });
    order
}

/// Where a meta node came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct NodeOrigin {
    pub caption_id: String,
    pub var: String,
}

/// A node of the meta graph.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MetaNode {
    /// Synonym labels, the first one from the earliest graph it came from.
    pub labels: Vec<String>,
    pub grounding: Option<Grounding>,
    pub origins: Vec<NodeOrigin>,
}

impl MetaNode {
    pub fn is_predicate(&self) -> bool {
        self.labels.iter().any(|l| is_predicate(l))
    }

    fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }

    /// The labels joined as the reference writes them (`man#^#person`).
    pub fn joined_label(&self) -> String {
        self.labels.join(SYNONYM_SEPARATOR)
    }
}

/// An edge between two meta nodes (indices into [`MetaGraph::nodes`]), in PENMAN normal form.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct MetaEdge {
    pub source: usize,
    pub role: String,
    pub target: usize,
}

/// A constant-valued attribute of a meta node (`:quant 2`, `:polarity -`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct MetaAttribute {
    pub node: usize,
    pub role: String,
    pub value: String,
}

/// A merged graph: nodes with synonym lists, groundings and provenance.
///
/// Nodes are addressed by index; [`MetaGraph::var`] names node `i` `z<i>` in the PENMAN graph
/// that [`MetaGraph::graph`] builds.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct MetaGraph {
    pub nodes: Vec<MetaNode>,
    pub edges: Vec<MetaEdge>,
    pub attributes: Vec<MetaAttribute>,
    pub root: usize,
    /// The captions merged into this graph, in merge order.
    pub captions: Vec<String>,
}

impl MetaGraph {
    /// The meta graph of a single vgAMR.
    pub fn from_vgamr(vg: &VgAmr) -> MetaGraph {
        let vars = vg.graph.variables();
        let index: BTreeMap<&str, usize> = vars.iter().enumerate().map(|(i, v)| (*v, i)).collect();
        let instances = vg.graph.instances();
        let nodes = vars
            .iter()
            .map(|v| MetaNode {
                labels: vec![instances.get(v).copied().unwrap_or_default().to_string()],
                grounding: vg.node_groundings.get(*v).cloned(),
                origins: vec![NodeOrigin {
                    caption_id: vg.caption_id.clone(),
                    var: v.to_string(),
                }],
            })
            .collect();
        let mut graph = MetaGraph {
            nodes,
            edges: Vec::new(),
            attributes: Vec::new(),
            root: index.get(vg.graph.top.as_str()).copied().unwrap_or(0),
            captions: vec![vg.caption_id.clone()],
        };
        for t in &vg.graph.triples {
            if t.is_instance() {
                continue;
            }
            let Some(&source) = index.get(t.source.as_str()) else {
                continue;
            };
            match index.get(t.target.as_str()) {
                Some(&target) => graph.add_edge(source, &t.role, target),
                None => graph.add_attribute(source, &t.role, &t.target),
            }
        }
        remove_cycles(&mut graph);
        graph
    }

    /// The PENMAN variable of node `i`.
    pub fn var(&self, i: usize) -> String {
        format!("z{i}")
    }

    /// The node index of a variable written by [`MetaGraph::var`].
    pub fn index_of(&self, var: &str) -> Option<usize> {
        let i: usize = var.strip_prefix('z')?.parse().ok()?;
        (i < self.nodes.len()).then_some(i)
    }

    /// The meta graph as a PENMAN graph; synonym lists are written `a#^#b` as in the reference.
    /// Triples are in the depth-first document order of a PENMAN tree rooted at the root.
    pub fn graph(&self) -> Graph {
        let mut triples = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            triples.push(Triple::new(self.var(i), ":instance", node.joined_label()));
        }
        for a in &self.attributes {
            triples.push(Triple::new(
                self.var(a.node),
                a.role.clone(),
                a.value.clone(),
            ));
        }
        for e in &self.edges {
            triples.push(Triple::new(
                self.var(e.source),
                e.role.clone(),
                self.var(e.target),
            ));
        }
        let top = if self.nodes.is_empty() {
            String::new()
        } else {
            self.var(self.root)
        };
        Graph {
            triples: tree_order(&top, triples),
            top,
            metadata: vec![("snt-type".to_string(), "amr-merge".to_string())],
            alignments: Vec::new(),
        }
    }

    /// Adds an edge unless it is a self-loop or the two nodes are already linked by an edge in
    /// the same direction (the reference keeps one role per ordered node pair).
    fn add_edge(&mut self, source: usize, role: &str, target: usize) {
        if !self.has_edge_slot(source, target) {
            return;
        }
        self.edges.push(MetaEdge {
            source,
            role: role.to_string(),
            target,
        });
    }

    /// [`MetaGraph::add_edge`] for an edge already built.
    fn push_edge(&mut self, edge: MetaEdge) {
        if self.has_edge_slot(edge.source, edge.target) {
            self.edges.push(edge);
        }
    }

    /// Whether an edge `source -> target` may be added: no self-loop, none there yet.
    fn has_edge_slot(&self, source: usize, target: usize) -> bool {
        source != target
            && !self
                .edges
                .iter()
                .any(|e| e.source == source && e.target == target)
    }

    /// Adds an attribute unless the node already has one with that role.
    fn add_attribute(&mut self, node: usize, role: &str, value: &str) {
        if self.has_attribute(node, role) {
            return;
        }
        self.attributes.push(MetaAttribute {
            node,
            role: role.to_string(),
            value: value.to_string(),
        });
    }

    /// [`MetaGraph::add_attribute`] for an attribute already built.
    fn push_attribute(&mut self, attribute: MetaAttribute) {
        if !self.has_attribute(attribute.node, &attribute.role) {
            self.attributes.push(attribute);
        }
    }

    fn has_attribute(&self, node: usize, role: &str) -> bool {
        self.attributes
            .iter()
            .any(|a| a.node == node && a.role == role)
    }

    fn out_edges(&self, node: usize) -> impl Iterator<Item = &MetaEdge> {
        self.edges.iter().filter(move |e| e.source == node)
    }

    /// Entity neighbours of a node within `depth` hops: its parents, and the `:ARGn` children of
    /// predicates on the way, predicates and AMR constructs excluded, `and`/`or` kept when
    /// `coordinations` (the reference's `get_entity_parents`, which drops only labels with a
    /// `-`).
    fn entity_neighbours(
        &self,
        node: usize,
        depth: usize,
        coordinations: Neighbours,
    ) -> BTreeSet<usize> {
        let mut frontier: BTreeSet<usize> = [node].into();
        let mut found = BTreeSet::new();
        for _ in 0..depth {
            let mut next = BTreeSet::new();
            for e in &self.edges {
                if frontier.contains(&e.target) {
                    next.insert(e.source);
                }
                if frontier.contains(&e.source)
                    && e.role.starts_with(":ARG")
                    && self.nodes[e.source].is_predicate()
                {
                    next.insert(e.target);
                }
            }
            found.extend(next.iter().copied());
            frontier = next;
        }
        found.remove(&node);
        found
            .into_iter()
            .filter(|&n| {
                let node = &self.nodes[n];
                let kept_coordination = coordinations == Neighbours::WithCoordinations
                    && is_coordination(node).is_some();
                !node.is_predicate()
                    && (kept_coordination || !node.labels.iter().any(|l| is_construct(l)))
            })
            .collect()
    }

    /// Children by `:ARGn` role.
    fn arg_children(&self, node: usize, role: &str) -> Vec<usize> {
        self.out_edges(node)
            .filter(|e| e.role == role)
            .map(|e| e.target)
            .collect()
    }

    fn labels(&self) -> HashSet<&str> {
        self.nodes
            .iter()
            .flat_map(|n| n.labels.iter().map(String::as_str))
            .collect()
    }
}

/// Puts triples in the document order of a PENMAN tree rooted at `top`: depth first, every node's
/// `:instance` right where the node is entered, its attributes and outgoing edges next, then
/// incoming edges from nodes not yet entered (written inverted, `:role-of`). Triples not
/// connected to `top` come last. Iterative, so deep graphs cannot overflow the stack.
pub fn tree_order(top: &str, triples: Vec<Triple>) -> Vec<Triple> {
    let mut instance: BTreeMap<&str, usize> = BTreeMap::new();
    for (k, t) in triples.iter().enumerate() {
        if t.is_instance() {
            instance.entry(t.source.as_str()).or_insert(k);
        }
    }
    let mut outgoing: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut incoming: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (k, t) in triples.iter().enumerate() {
        if t.is_instance() {
            continue;
        }
        outgoing.entry(t.source.as_str()).or_default().push(k);
        if instance.contains_key(t.target.as_str()) {
            incoming.entry(t.target.as_str()).or_default().push(k);
        }
    }
    let none: Vec<usize> = Vec::new();
    let mut emitted = vec![false; triples.len()];
    let mut order: Vec<usize> = Vec::with_capacity(triples.len());
    let mut entered: HashSet<&str> = HashSet::new();
    fn emit(k: usize, emitted: &mut [bool], order: &mut Vec<usize>) {
        if !emitted[k] {
            emitted[k] = true;
            order.push(k);
        }
    }
    // (node, next outgoing position, next incoming position)
    let mut stack: Vec<(&str, usize, usize)> = Vec::new();
    if let Some(&k) = instance.get(top) {
        entered.insert(top);
        emit(k, &mut emitted, &mut order);
        stack.push((top, 0, 0));
    }
    while let Some(frame) = stack.last_mut() {
        let (node, out_pos, in_pos) = *frame;
        let outs = outgoing.get(node).unwrap_or(&none);
        if let Some(&k) = outs.get(out_pos) {
            frame.1 += 1;
            emit(k, &mut emitted, &mut order);
            let target = triples[k].target.as_str();
            if let Some(&inst) = instance.get(target) {
                if entered.insert(target) {
                    emit(inst, &mut emitted, &mut order);
                    stack.push((target, 0, 0));
                }
            }
            continue;
        }
        let ins = incoming.get(node).unwrap_or(&none);
        if let Some(&k) = ins.get(in_pos) {
            frame.2 += 1;
            let source = triples[k].source.as_str();
            if !emitted[k] && !entered.contains(source) {
                emit(k, &mut emitted, &mut order);
                entered.insert(source);
                if let Some(&inst) = instance.get(source) {
                    emit(inst, &mut emitted, &mut order);
                }
                stack.push((source, 0, 0));
            }
            continue;
        }
        stack.pop();
    }
    for k in 0..triples.len() {
        emit(k, &mut emitted, &mut order);
    }
    let mut slots: Vec<Option<Triple>> = triples.into_iter().map(Some).collect();
    order.into_iter().filter_map(|k| slots[k].take()).collect()
}

fn is_construct(label: &str) -> bool {
    matches!(label, "and" | "or" | "multi-sentence" | "include-91")
}

fn is_coordination(node: &MetaNode) -> Option<&'static str> {
    if node.has_label("and") {
        Some("and")
    } else if node.has_label("or") {
        Some("or")
    } else {
        None
    }
}

/// Best similarity over the label pairs of two nodes: 1 for labels equal once their sense
/// suffixes are stripped, else the word similarity of the stripped labels; `and`, `or` and
/// `multi-sentence` labels are skipped; `-1` when nothing compares.
pub fn label_similarity(a: &[String], b: &[String], sim: &dyn WordSimilarity) -> f64 {
    let mut best = -1.0f64;
    for la in a {
        for lb in b {
            if is_construct(la) || is_construct(lb) {
                continue;
            }
            let (sa, sb) = (strip_sense(la), strip_sense(lb));
            let s = if sa == sb {
                1.0
            } else {
                sim.word_similarity(sa, sb)
            };
            best = best.max(s);
        }
    }
    best
}

/// What the merge rules need besides the two graphs.
pub struct MergeContext<'a> {
    pub rules: RuleSet,
    pub similarity: &'a dyn WordSimilarity,
    pub lexicon: &'a ModifierLexicon,
    /// Where the merge records what it decided through word similarities, when given.
    pub log: Option<&'a RefCell<MergeLog>>,
}

impl MergeContext<'_> {
    fn sim(&self, a: &MetaNode, b: &MetaNode) -> f64 {
        label_similarity(&a.labels, &b.labels, self.similarity)
    }

    /// Runs `merge` with this context recording every decision it takes through word
    /// similarities; its result, and the log.
    pub fn logged<T>(&self, merge: impl FnOnce(&MergeContext) -> T) -> (T, MergeLog) {
        let log = RefCell::new(MergeLog::default());
        let logging = MergeContext {
            rules: self.rules,
            similarity: self.similarity,
            lexicon: self.lexicon,
            log: Some(&log),
        };
        let out = merge(&logging);
        (out, log.into_inner())
    }

    /// Whether the label similarity of `a` and `b` exceeds `threshold` (`strict`) or reaches
    /// it, recorded in the log.
    fn sim_passes(&self, a: &MetaNode, b: &MetaNode, threshold: Threshold) -> bool {
        let passes = threshold.passes(self.sim(a, b));
        if let Some(log) = self.log {
            log.borrow_mut().decisions.push(Decision::Threshold {
                a: a.labels.clone(),
                b: b.labels.clone(),
                threshold,
                passes,
            });
        }
        passes
    }

    fn is_adjective(&self, node: &MetaNode) -> bool {
        !node.is_predicate() && node.labels.iter().any(|l| self.lexicon.is_adjective(l))
    }
}

/// One step of the merge order: merge the clusters `left` and `right` into cluster `N + step`.
/// Ids below N are captions (positions in the input), ids from N on are earlier merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MergeStep {
    pub left: usize,
    pub right: usize,
}

/// The distance matrix `D = 1 - F`, rounded to 4 decimals as the reference does, from a
/// pairwise Smatch F function. The diagonal is 0.
pub fn smatch_distances(
    graphs: &[&Graph],
    f_score: &dyn Fn(&Graph, &Graph) -> f64,
) -> Vec<Vec<f64>> {
    distances(graphs.len(), |i, j| f_score(graphs[i], graphs[j]))
}

/// [`smatch_distances`] with [`smatch`](crate::amr::smatch::smatch) F under `options`, each
/// graph's Smatch triples built once instead of once per pair.
pub fn smatch_f_distances(graphs: &[&Graph], options: &SmatchOptions) -> Vec<Vec<f64>> {
    let prepared: Vec<SmatchGraph> = graphs.iter().map(|g| SmatchGraph::new(g)).collect();
    distances(graphs.len(), |i, j| {
        smatch_prepared(&prepared[i], &prepared[j], options).f1()
    })
}

/// `D = 1 - F` for every pair `i < j`, F clamped to [0, 1] and D rounded to 4 decimals.
fn distances(n: usize, f_score: impl Fn(usize, usize) -> f64) -> Vec<Vec<f64>> {
    let mut d = vec![vec![0.0; n]; n];
    for (i, j) in (0..n).flat_map(|i| ((i + 1)..n).map(move |j| (i, j))) {
        let f = f_score(i, j);
        let f = if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let v = ((1.0 - f) * 10_000.0).round() / 10_000.0;
        d[i][j] = v;
        d[j][i] = v;
    }
    d
}

/// The merge order of an image's captions: UPGMA (scipy average linkage) over
/// [`smatch_distances`]. Empty for fewer than two graphs.
pub fn merge_order(
    graphs: &[&Graph],
    f_score: &dyn Fn(&Graph, &Graph) -> f64,
) -> Result<Vec<MergeStep>> {
    if graphs.len() < 2 {
        return Ok(Vec::new());
    }
    upgma_order(&smatch_distances(graphs, f_score))
}

/// UPGMA merge steps over a distance matrix of at least two graphs.
fn upgma_order(d: &[Vec<f64>]) -> Result<Vec<MergeStep>> {
    let matrix = DistanceMatrix::from_fn(d.len(), |i, j| d[i][j])
        .map_err(|e| Error::invalid("Smatch distance matrix", e.to_string()))?;
    Ok(upgma(&matrix)
        .steps
        .iter()
        .map(|s| MergeStep {
            left: s.a,
            right: s.b,
        })
        .collect())
}

/// Merges an image's vgAMRs: the merge order from pairwise Smatch F and UPGMA, then the pairwise
/// merges in that order. Returns the order and the meta graph.
pub fn meta_graph(
    vgamrs: &[VgAmr],
    f_score: &dyn Fn(&Graph, &Graph) -> f64,
    ctx: &MergeContext,
) -> Result<(Vec<MergeStep>, MetaGraph)> {
    let graphs: Vec<&Graph> = vgamrs.iter().map(|v| &v.graph).collect();
    let order = merge_order(&graphs, f_score)?;
    let meta = merge_in_order(vgamrs, &order, ctx)?;
    Ok((order, meta))
}

/// [`meta_graph`] with Smatch F under `options` as the pairwise score (SSA's merge), each
/// graph's Smatch triples built once.
pub fn smatch_meta_graph(
    vgamrs: &[VgAmr],
    options: &SmatchOptions,
    ctx: &MergeContext,
) -> Result<(Vec<MergeStep>, MetaGraph)> {
    let order = if vgamrs.len() < 2 {
        Vec::new()
    } else {
        let graphs: Vec<&Graph> = vgamrs.iter().map(|v| &v.graph).collect();
        upgma_order(&smatch_f_distances(&graphs, options))?
    };
    let meta = merge_in_order(vgamrs, &order, ctx)?;
    Ok((order, meta))
}

/// Checks a merge order against the number of captions: N-1 steps, each id either a caption or
/// an earlier merge, every cluster used once.
pub fn validate_order(n: usize, steps: &[MergeStep]) -> Result<()> {
    if n == 0 {
        return if steps.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(
                "merge order",
                "steps given for zero captions",
            ))
        };
    }
    if steps.len() != n - 1 {
        return Err(Error::invalid(
            "merge order",
            format!(
                "{} captions need {} merge steps, got {}",
                n,
                n - 1,
                steps.len()
            ),
        ));
    }
    let mut used = vec![false; 2 * n - 1];
    for (k, s) in steps.iter().enumerate() {
        for id in [s.left, s.right] {
            if id >= n + k || used[id] || s.left == s.right {
                return Err(Error::invalid(
                    "merge order",
                    format!("step {k} merges cluster {id}, which is not available then"),
                ));
            }
            used[id] = true;
        }
    }
    Ok(())
}

/// Merges an image's vgAMRs following `steps` (from [`merge_order`]); returns the meta graph
/// (the last merge) or, for one caption, that caption's graph.
pub fn merge_in_order(
    vgamrs: &[VgAmr],
    steps: &[MergeStep],
    ctx: &MergeContext,
) -> Result<MetaGraph> {
    validate_order(vgamrs.len(), steps)?;
    let mut clusters: Vec<Option<MetaGraph>> = vgamrs
        .iter()
        .map(|v| Some(MetaGraph::from_vgamr(v)))
        .collect();
    for step in steps {
        let (a, b) = match (
            clusters.get_mut(step.left).and_then(Option::take),
            clusters.get_mut(step.right).and_then(Option::take),
        ) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err(Error::invalid("merge order", "a cluster was used twice")),
        };
        // The larger graph by node count is graph 1 (ties: the left cluster).
        let merged = if a.nodes.len() >= b.nodes.len() {
            merge_owned(a, b, ctx)
        } else {
            merge_owned(b, a, ctx)
        };
        clusters.push(Some(merged));
    }
    clusters
        .pop()
        .flatten()
        .ok_or_else(|| Error::invalid("merge order", "no captions to merge"))
}

/// Merges graph 2 into graph 1.
pub fn merge_pair(g1: &MetaGraph, g2: &MetaGraph, ctx: &MergeContext) -> MetaGraph {
    if g2.nodes.is_empty() {
        return g1.clone();
    }
    if g1.nodes.is_empty() {
        return g2.clone();
    }
    let matched = correspondence(g1, g2, ctx);
    combine(g1.clone(), g2.clone(), &matched, ctx)
}

/// [`merge_pair`] on graphs the caller hands over, so nothing is copied.
fn merge_owned(g1: MetaGraph, g2: MetaGraph, ctx: &MergeContext) -> MetaGraph {
    if g2.nodes.is_empty() {
        return g1;
    }
    if g1.nodes.is_empty() {
        return g2;
    }
    let matched = correspondence(&g1, &g2, ctx);
    combine(g1, g2, &matched, ctx)
}

/// Which node of graph 1 each matched node of graph 2 folds into: rules 0-5, then rule 6.
fn correspondence(g1: &MetaGraph, g2: &MetaGraph, ctx: &MergeContext) -> BTreeMap<usize, usize> {
    // node of graph 2 -> node of graph 1 it folds into
    let mut matched = same_box_pairs(g1, g2, ctx);
    // Only rule 5 asks which labels a graph has; most merges never get there.
    let labels1 = OnceCell::new();
    let labels2 = OnceCell::new();
    let labels = LabelSets {
        g1: || labels1.get_or_init(|| g1.labels()),
        g2: || labels2.get_or_init(|| g2.labels()),
    };
    for (i, n1) in g1.nodes.iter().enumerate() {
        for (j, n2) in g2.nodes.iter().enumerate() {
            if matched.contains_key(&j) {
                continue;
            }
            if first_pass_rule(g1, i, n1, g2, j, n2, &labels, ctx) {
                matched.insert(j, i);
            }
        }
    }
    // Rule 6 needs to know which children correspond, so it runs after rules 1-5.
    let first_pass = matched.clone();
    for (i, n1) in g1.nodes.iter().enumerate() {
        if !n1.is_predicate() || n1.has_label("include-91") {
            continue;
        }
        for (j, n2) in g2.nodes.iter().enumerate() {
            if matched.contains_key(&j) || !n2.is_predicate() || n2.has_label("include-91") {
                continue;
            }
            if same_argument_structure(g1, i, g2, j, &first_pass, ctx) {
                matched.insert(j, i);
            }
        }
    }
    matched
}

/// The label sets of the two graphs of a merge, built on first use.
struct LabelSets<F1, F2> {
    g1: F1,
    g2: F2,
}

/// Rules 0–5 for one node pair.
#[allow(clippy::too_many_arguments)]
fn first_pass_rule<'g>(
    g1: &MetaGraph,
    i: usize,
    n1: &MetaNode,
    g2: &MetaGraph,
    j: usize,
    n2: &MetaNode,
    labels: &LabelSets<impl Fn() -> &'g HashSet<&'g str>, impl Fn() -> &'g HashSet<&'g str>>,
    ctx: &MergeContext,
) -> bool {
    // Rule 0.
    for never in ["include-91", "multi-sentence"] {
        if n1.has_label(never) || n2.has_label(never) {
            return false;
        }
    }
    // Rule 1.
    match (is_coordination(n1), is_coordination(n2)) {
        (Some(k1), Some(k2)) if k1 == k2 => {
            if g1.root == i || g2.root == j {
                return true;
            }
            return neighbours_similar(g1, i, g2, j, 2, Neighbours::Entities, ctx).unwrap_or(false);
        }
        (None, None) => {}
        _ => return false,
    }
    // Rules 2 and 3.
    match (&n1.grounding, &n2.grounding) {
        (Some(a), Some(b)) => return unknown_regions_rule(a, b, n1, n2, ctx),
        (Some(_), None) | (None, Some(_)) => return false,
        (None, None) => {}
    }
    // A noun and a frame are different concepts, whatever their lemmas (`hold` / `hold-01`).
    if n1.is_predicate() != n2.is_predicate() {
        return false;
    }
    // Rule 4.
    let identical = n1.labels.iter().any(|a| {
        n2.labels
            .iter()
            .any(|b| strip_sense(a) == strip_sense(b) && !is_construct(a))
    });
    if identical {
        if n1.is_predicate() {
            return neighbours_similar(g1, i, g2, j, 1, Neighbours::WithCoordinations, ctx)
                .unwrap_or(true);
        }
        return !(ctx.rules == RuleSet::Flickr && ctx.is_adjective(n1));
    }
    // Rule 5.
    if ctx.sim_passes(
        n1,
        n2,
        Threshold::at_least(ctx.rules.same_meaning_threshold()),
    ) {
        let elsewhere = n2.labels.iter().any(|l| (labels.g1)().contains(l.as_str()))
            || n1.labels.iter().any(|l| (labels.g2)().contains(l.as_str()));
        if !elsewhere {
            return match ctx.rules {
                RuleSet::Coco => {
                    neighbours_similar(g1, i, g2, j, 1, Neighbours::WithCoordinations, ctx)
                        .unwrap_or(true)
                }
                RuleSet::Flickr => !ctx.is_adjective(n1),
            };
        }
    }
    false
}

/// Whether a grounding points to boxes (not an unknown region).
fn has_boxes(g: &Grounding) -> bool {
    !g.unknown && !g.boxes.is_empty()
}

/// Criterion 1's "the same image boxes" for two groundings with boxes.
fn same_boxes(a: &Grounding, b: &Grounding, rules: RuleSet) -> bool {
    match rules {
        RuleSet::Coco => a.boxes == b.boxes,
        RuleSet::Flickr => {
            let covered = |x: &Grounding, y: &Grounding| {
                x.boxes
                    .iter()
                    .all(|p| y.boxes.iter().any(|q| p.iou(q) > 0.9))
            };
            a.phrase_id == b.phrase_id
                || (a.boxes.len() == b.boxes.len() && covered(a, b) && covered(b, a))
        }
    }
}

/// Criterion 1: pairs of grounded nodes on the same boxes, graph-2 node to graph-1 node, one to
/// one. Candidates are taken best first: identical labels, then label similarity, then graph-1
/// and graph-2 order.
fn same_box_pairs(g1: &MetaGraph, g2: &MetaGraph, ctx: &MergeContext) -> BTreeMap<usize, usize> {
    // Found in graph-1 then graph-2 node order, which breaks the order's ties.
    let mut found: Vec<(usize, usize)> = Vec::new();
    let mut keys: Vec<(bool, f64)> = Vec::new();
    for (i, n1) in g1.nodes.iter().enumerate() {
        let Some(a) = n1.grounding.as_ref().filter(|a| has_boxes(a)) else {
            continue;
        };
        for (j, n2) in g2.nodes.iter().enumerate() {
            let Some(b) = n2.grounding.as_ref().filter(|b| has_boxes(b)) else {
                continue;
            };
            if same_boxes(a, b, ctx.rules) {
                let identical = n1.labels.iter().any(|l| n2.has_label(l));
                found.push((i, j));
                keys.push((identical, ctx.sim(n1, n2)));
            }
        }
    }
    let order = candidate_order(&keys);
    if let (Some(log), true) = (ctx.log, found.len() > 1) {
        let candidates = found
            .iter()
            .zip(&keys)
            .map(|(&(i, j), &(identical, _))| {
                (
                    identical,
                    g1.nodes[i].labels.clone(),
                    g2.nodes[j].labels.clone(),
                )
            })
            .collect();
        log.borrow_mut().decisions.push(Decision::Order {
            candidates,
            taken: order.clone(),
        });
    }
    let mut taken = BTreeSet::new();
    let mut pairs = BTreeMap::new();
    for k in order {
        let (i, j) = found[k as usize];
        if !pairs.contains_key(&j) && !taken.contains(&i) {
            taken.insert(i);
            pairs.insert(j, i);
        }
    }
    pairs
}

/// Rule 2 for grounded nodes: pairs with boxes were settled by criterion 1; two unknown regions
/// merge by label (COCO `sim > 0.5`, Flickr the same phrase id and label).
fn unknown_regions_rule(
    a: &Grounding,
    b: &Grounding,
    n1: &MetaNode,
    n2: &MetaNode,
    ctx: &MergeContext,
) -> bool {
    if has_boxes(a) || has_boxes(b) {
        return false;
    }
    match ctx.rules {
        RuleSet::Coco => a.unknown && b.unknown && ctx.sim_passes(n1, n2, Threshold::above(0.5)),
        RuleSet::Flickr => a.phrase_id == b.phrase_id && n1.labels.iter().any(|l| n2.has_label(l)),
    }
}

/// `None` when one of the nodes has no entity neighbours, else whether some neighbour pair is
/// similar (`sim >= 0.5`) without one neighbour just repeating the other node's label.
fn neighbours_similar(
    g1: &MetaGraph,
    i: usize,
    g2: &MetaGraph,
    j: usize,
    depth: usize,
    kind: Neighbours,
    ctx: &MergeContext,
) -> Option<bool> {
    let p1 = g1.entity_neighbours(i, depth, kind);
    let p2 = g2.entity_neighbours(j, depth, kind);
    if p1.is_empty() || p2.is_empty() {
        return None;
    }
    let (n1, n2) = (&g1.nodes[i], &g2.nodes[j]);
    let repeats = |neighbour: &MetaNode, other: &MetaNode| {
        other
            .labels
            .iter()
            .any(|l| neighbour.joined_label().contains(l.as_str()))
    };
    Some(p1.iter().any(|&a| {
        p2.iter().any(|&b| {
            let (pa, pb) = (&g1.nodes[a], &g2.nodes[b]);
            // GloVe has a vector for `and`: two coordinations of one kind are similar (1), a
            // coordination and an entity are not.
            let similar = match (is_coordination(pa), is_coordination(pb)) {
                (Some(x), Some(y)) => x == y,
                (None, None) => ctx.sim_passes(pa, pb, Threshold::at_least(NEIGHBOUR_THRESHOLD)),
                _ => false,
            };
            similar && !repeats(pa, n2) && !repeats(pb, n1)
        })
    }))
}

/// Rule 6.
fn same_argument_structure(
    g1: &MetaGraph,
    i: usize,
    g2: &MetaGraph,
    j: usize,
    correspondence: &BTreeMap<usize, usize>,
    ctx: &MergeContext,
) -> bool {
    // Whether the two predicates' `role` children include a corresponding pair; `None` when
    // one of them has no such child.
    let same = |role: &str| -> Option<bool> {
        let c1 = g1.arg_children(i, role);
        let c2 = g2.arg_children(j, role);
        if c1.is_empty() || c2.is_empty() {
            return None;
        }
        Some(
            c2.iter()
                .any(|b| correspondence.get(b).is_some_and(|a| c1.contains(a))),
        )
    };
    let sim_above = |t: f64| ctx.sim_passes(&g1.nodes[i], &g2.nodes[j], Threshold::above(t));
    let (different_arg2, missing_arg2, missing_arg1) = ctx.rules.predicate_thresholds();
    if same(":ARG0") != Some(true) {
        return false;
    }
    match same(":ARG1") {
        Some(true) => match same(":ARG2") {
            Some(true) => true,
            Some(false) => sim_above(different_arg2),
            None => sim_above(missing_arg2),
        },
        Some(false) => false,
        None => sim_above(missing_arg1),
    }
}

/// Builds the merged graph from graph 1, graph 2 and the node correspondence.
fn combine(
    g1: MetaGraph,
    g2: MetaGraph,
    matched: &BTreeMap<usize, usize>,
    ctx: &MergeContext,
) -> MetaGraph {
    let MetaGraph {
        nodes,
        edges: edges1,
        attributes: attributes1,
        root: root1,
        mut captions,
    } = g1;
    captions.extend(g2.captions);
    let mut out = MetaGraph {
        nodes,
        edges: Vec::with_capacity(edges1.len() + g2.edges.len()),
        attributes: Vec::with_capacity(attributes1.len() + g2.attributes.len()),
        root: root1,
        captions,
    };
    let root2 = g2.root.min(g2.nodes.len() - 1);
    let mut map2 = vec![0usize; g2.nodes.len()];
    for (j, n2) in g2.nodes.into_iter().enumerate() {
        match matched.get(&j) {
            Some(&i) => {
                let target = &mut out.nodes[i];
                for l in n2.labels {
                    if !target.has_label(&l) {
                        target.labels.push(l);
                    }
                }
                target.origins.extend(n2.origins);
                if target.grounding.is_none() {
                    target.grounding = n2.grounding;
                }
                map2[j] = i;
            }
            None => {
                map2[j] = out.nodes.len();
                out.nodes.push(n2);
            }
        }
    }
    for e in edges1 {
        out.push_edge(e);
    }
    for e in g2.edges {
        out.push_edge(MetaEdge {
            source: map2[e.source],
            target: map2[e.target],
            ..e
        });
    }
    for a in attributes1 {
        out.push_attribute(a);
    }
    for a in g2.attributes {
        out.push_attribute(MetaAttribute {
            node: map2[a.node],
            ..a
        });
    }
    if matched.is_empty() {
        join_with_multi_sentence(&mut out, root1, map2[root2]);
    }
    add_subset_edges(&mut out, ctx);
    remove_cycles(&mut out);
    out
}

/// Joins two disjoint graphs under a `multi-sentence` root.
fn join_with_multi_sentence(g: &mut MetaGraph, root1: usize, root2: usize) {
    if g.nodes[root1].has_label("multi-sentence") {
        let next = g
            .out_edges(root1)
            .filter_map(|e| {
                e.role
                    .strip_prefix(":snt")
                    .and_then(|k| k.parse::<usize>().ok())
            })
            .max()
            .unwrap_or(0)
            + 1;
        g.add_edge(root1, &format!(":snt{next}"), root2);
        return;
    }
    let root = g.nodes.len();
    g.nodes.push(MetaNode {
        labels: vec!["multi-sentence".to_string()],
        grounding: None,
        origins: Vec::new(),
    });
    g.add_edge(root, ":snt1", root1);
    g.add_edge(root, ":snt2", root2);
    g.root = root;
}

/// `:subset` edges between grounded nodes whose box lists differ but share a box exactly.
pub fn add_subset_edges(g: &mut MetaGraph, ctx: &MergeContext) {
    let n = g.nodes.len();
    let mut new_edges = Vec::new();
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            let (Some(ga), Some(gb)) = (&g.nodes[a].grounding, &g.nodes[b].grounding) else {
                continue;
            };
            if ga.unknown || gb.unknown || ga.boxes == gb.boxes || ga.boxes.len() <= gb.boxes.len()
            {
                continue;
            }
            let shares_box = ga
                .boxes
                .iter()
                .any(|x| gb.boxes.iter().any(|y| x == y || x.iou(y) >= 1.0));
            if shares_box
                && ctx.sim_passes(&g.nodes[a], &g.nodes[b], Threshold::above(SUBSET_THRESHOLD))
            {
                new_edges.push((a, b));
            }
        }
    }
    for (a, b) in new_edges {
        let linked = g
            .edges
            .iter()
            .any(|e| (e.source == a && e.target == b) || (e.source == b && e.target == a));
        if !linked {
            g.add_edge(a, ":subset", b);
        }
    }
}

/// Removes self-loops and the edges that close directed cycles: a depth-first search from the
/// root (then from every node not yet reached, in index order) drops every edge that points
/// back into the current search path.
pub fn remove_cycles(g: &mut MetaGraph) {
    g.edges
        .retain(|e| e.source != e.target && e.source < g.nodes.len() && e.target < g.nodes.len());
    let n = g.nodes.len();
    if n == 0 {
        return;
    }
    let mut adjacency: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (k, e) in g.edges.iter().enumerate() {
        adjacency[e.source].push(k);
    }
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        OnPath,
        Done,
    }
    let mut state = vec![State::New; n];
    let mut back_edges = BTreeSet::new();
    let starts = std::iter::once(g.root.min(n - 1)).chain(0..n);
    for start in starts {
        if state[start] != State::New {
            continue;
        }
        // Iterative DFS: (node, next edge position).
        let mut stack = vec![(start, 0usize)];
        state[start] = State::OnPath;
        while let Some(top) = stack.last_mut() {
            let (node, pos) = *top;
            if let Some(&k) = adjacency[node].get(pos) {
                top.1 += 1;
                let target = g.edges[k].target;
                match state[target] {
                    State::New => {
                        state[target] = State::OnPath;
                        stack.push((target, 0));
                    }
                    State::OnPath => {
                        back_edges.insert(k);
                    }
                    State::Done => {}
                }
            } else {
                state[node] = State::Done;
                stack.pop();
            }
        }
    }
    let mut k = 0;
    g.edges.retain(|_| {
        let keep = !back_edges.contains(&k);
        k += 1;
        keep
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::BoxXyxy;

    /// A vgAMR from `(var, concept)` nodes (the first is the top), edges and groundings.
    fn vg(
        caption: &str,
        nodes: &[(&str, &str)],
        edges: &[(&str, &str, &str)],
        grounded: &[(&str, Grounding)],
    ) -> VgAmr {
        let mut triples: Vec<Triple> = nodes
            .iter()
            .map(|(v, c)| Triple::new(*v, ":instance", *c))
            .collect();
        triples.extend(edges.iter().map(|(s, r, t)| Triple::new(*s, *r, *t)));
        VgAmr {
            caption_id: caption.to_string(),
            graph: Graph {
                top: nodes[0].0.to_string(),
                triples,
                metadata: vec![],
                alignments: vec![],
            },
            node_groundings: grounded
                .iter()
                .map(|(v, g)| (v.to_string(), g.clone()))
                .collect(),
        }
    }

    fn boxed(id: &str, boxes: &[BoxXyxy]) -> Grounding {
        Grounding {
            phrase_id: id.into(),
            label: id.into(),
            boxes: boxes.to_vec(),
            unknown: false,
        }
    }

    fn unknown() -> Grounding {
        Grounding {
            phrase_id: "_".into(),
            label: "_".into(),
            boxes: vec![],
            unknown: true,
        }
    }

    const A: BoxXyxy = BoxXyxy {
        x1: 0.0,
        y1: 0.0,
        x2: 10.0,
        y2: 10.0,
    };
    const B: BoxXyxy = BoxXyxy {
        x1: 20.0,
        y1: 20.0,
        x2: 40.0,
        y2: 40.0,
    };

    /// Merges two vgAMRs and returns the merged node pairs as `var1+var2`.
    fn merge_with(
        rules: RuleSet,
        sim: &SimilarityTable,
        a: &VgAmr,
        b: &VgAmr,
    ) -> (MetaGraph, BTreeSet<String>) {
        let lexicon = ModifierLexicon::wordnet();
        let ctx = MergeContext {
            rules,
            similarity: sim,
            lexicon,
            log: None,
        };
        let meta = merge_pair(&MetaGraph::from_vgamr(a), &MetaGraph::from_vgamr(b), &ctx);
        let pairs = meta
            .nodes
            .iter()
            .filter(|n| n.origins.len() > 1)
            .map(|n| {
                n.origins
                    .iter()
                    .map(|o| o.var.as_str())
                    .collect::<Vec<_>>()
                    .join("+")
            })
            .collect();
        (meta, pairs)
    }

    fn merged(a: &VgAmr, b: &VgAmr, sim: &SimilarityTable) -> BTreeSet<String> {
        merge_with(RuleSet::Coco, sim, a, b).1
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn coordination(parent2: &str) -> (VgAmr, VgAmr) {
        let a = vg(
            "c1",
            &[
                ("s", "sit-01"),
                ("a", "and"),
                ("m", "man"),
                ("w", "woman"),
                ("d", "dock"),
            ],
            &[
                ("s", ":ARG0", "a"),
                ("a", ":op1", "m"),
                ("a", ":op2", "w"),
                ("s", ":ARG1", "d"),
            ],
            &[],
        );
        let b = vg(
            "c2",
            &[
                ("t", "stand-01"),
                ("x", "and"),
                ("y", "boy"),
                ("z", "girl"),
                ("p", parent2),
            ],
            &[
                ("t", ":ARG0", "x"),
                ("x", ":op1", "y"),
                ("x", ":op2", "z"),
                ("t", ":ARG1", "p"),
            ],
            &[],
        );
        (a, b)
    }

    #[test]
    fn rule1_and_nodes_merge_when_two_hop_neighbours_are_similar() {
        let (a, b) = coordination("pier");
        let sim = SimilarityTable::new().with("dock", "pier", 0.6);
        assert_eq!(merged(&a, &b, &sim), set(&["a+x"]));
    }

    #[test]
    fn rule1_and_nodes_stay_apart_when_neighbours_differ() {
        let (a, b) = coordination("pier");
        let sim = SimilarityTable::new().with("dock", "pier", 0.2);
        assert!(merged(&a, &b, &sim).is_empty());
    }

    #[test]
    fn rule1_and_roots_merge_and_never_merge_with_other_nodes() {
        let a = vg(
            "c1",
            &[("a", "and"), ("m", "man"), ("w", "woman")],
            &[("a", ":op1", "m"), ("a", ":op2", "w")],
            &[],
        );
        let b = vg(
            "c2",
            &[("x", "and"), ("d", "dog")],
            &[("x", ":op1", "d")],
            &[],
        );
        let sim = SimilarityTable::new();
        assert_eq!(merged(&a, &b, &sim), set(&["a+x"]));
        // `and` vs `or`: different constructs never merge.
        let c = vg(
            "c3",
            &[("x", "or"), ("d", "dog")],
            &[("x", ":op1", "d")],
            &[],
        );
        assert!(merged(&a, &c, &sim).is_empty());
    }

    #[test]
    fn criterion1_coco_grounded_nodes_merge_on_same_boxes() {
        let a = vg("c1", &[("m", "man")], &[], &[("m", boxed("person", &[A]))]);
        let b = vg(
            "c2",
            &[("p", "person")],
            &[],
            &[("p", boxed("person", &[A]))],
        );
        let close = SimilarityTable::new().with("man", "person", 0.4);
        assert_eq!(merged(&a, &b, &close), set(&["m+p"]));
        // The paper's criterion 1 asks for the same boxes only: dissimilar or out-of-vocabulary
        // words on one box still merge, keeping both names (footnote 5).
        let far = SimilarityTable::new().with("man", "person", 0.25);
        let (meta, pairs) = merge_with(RuleSet::Coco, &far, &a, &b);
        assert_eq!(pairs, set(&["m+p"]));
        assert_eq!(meta.nodes[0].labels, ["man", "person"]);
        assert_eq!(merged(&a, &b, &SimilarityTable::new()), set(&["m+p"]));
        // Different boxes: no merge even with the same label.
        let c = vg("c3", &[("m", "man")], &[], &[("m", boxed("person", &[B]))]);
        assert!(merged(&a, &c, &close).is_empty());
    }

    #[test]
    fn criterion1_pairs_one_to_one_identical_labels_first() {
        // COCO grounds by class: "a man and a woman" puts both on the person boxes [A, B].
        let couple = |c: &str| {
            vg(
                c,
                &[("a", "and"), ("m", "man"), ("w", "woman")],
                &[("a", ":op1", "m"), ("a", ":op2", "w")],
                &[
                    ("m", boxed("person", &[A, B])),
                    ("w", boxed("person", &[A, B])),
                ],
            )
        };
        let woman = vg(
            "c2",
            &[("w", "woman")],
            &[],
            &[("w", boxed("person", &[A, B]))],
        );
        let sim = SimilarityTable::new().with("man", "woman", 0.7);
        // `woman` pairs with `woman` although `man` comes first in graph 1.
        assert_eq!(merged(&couple("c1"), &woman, &sim), set(&["w+w"]));
        // Two such captions pair man with man and woman with woman, not both with `man`.
        assert_eq!(
            merged(&couple("c1"), &couple("c2"), &sim),
            set(&["a+a", "m+m", "w+w"])
        );
    }

    #[test]
    fn rule2_coco_unknown_groundings_need_higher_similarity() {
        let a = vg("c1", &[("g", "grass")], &[], &[("g", unknown())]);
        let b = vg("c2", &[("l", "lawn")], &[], &[("l", unknown())]);
        let close = SimilarityTable::new().with("grass", "lawn", 0.55);
        assert_eq!(merged(&a, &b, &close), set(&["g+l"]));
        let middling = SimilarityTable::new().with("grass", "lawn", 0.45);
        assert!(merged(&a, &b, &middling).is_empty());
    }

    #[test]
    fn rule2_flickr_same_phrase_needs_same_label_or_matching_boxes() {
        let a = vg("c1", &[("m", "man")], &[], &[("m", boxed("7", &[A]))]);
        let same = vg("c2", &[("m", "man")], &[], &[("m", boxed("7", &[A]))]);
        let other_label = vg("c2", &[("p", "person")], &[], &[("p", boxed("7", &[A]))]);
        let sim = SimilarityTable::new().with("man", "person", 0.9);
        assert_eq!(
            merge_with(RuleSet::Flickr, &sim, &a, &same).1,
            set(&["m+m"])
        );
        // One chain is one set of boxes: criterion 1 merges "man" and "person" whatever their
        // similarity (the reference asked for the same label).
        let (meta, pairs) = merge_with(RuleSet::Flickr, &SimilarityTable::new(), &a, &other_label);
        assert_eq!(pairs, set(&["m+p"]));
        assert_eq!(meta.nodes[0].labels, ["man", "person"]);
        // Another chain with boxes that overlap (IoU > 0.9) is the same boxes too.
        let a2 = BoxXyxy::new(0.0, 0.0, 10.0, 10.2);
        let other_chain = vg("c3", &[("p", "person")], &[], &[("p", boxed("8", &[a2]))]);
        assert_eq!(
            merge_with(RuleSet::Flickr, &SimilarityTable::new(), &a, &other_chain).1,
            set(&["m+p"])
        );
        let far_box = vg("c3", &[("p", "person")], &[], &[("p", boxed("8", &[B]))]);
        assert!(merge_with(RuleSet::Flickr, &sim, &a, &far_box).1.is_empty());
    }

    #[test]
    fn rule3_grounded_never_merges_with_ungrounded() {
        let a = vg("c1", &[("b", "boat")], &[], &[("b", boxed("boat", &[A]))]);
        let b = vg("c2", &[("b", "boat")], &[], &[]);
        assert!(merged(&a, &b, &SimilarityTable::new()).is_empty());
    }

    #[test]
    fn rule4_identical_labels() {
        // Non-predicates with the same label merge.
        let a = vg("c1", &[("w", "white")], &[], &[]);
        let b = vg("c2", &[("v", "white")], &[], &[]);
        assert_eq!(merged(&a, &b, &SimilarityTable::new()), set(&["w+v"]));
        // Predicates need similar entity neighbours (or none on one side).
        let sit = |c: &str, thing: &str| {
            vg(
                c,
                &[("s", "sit-01"), ("x", thing)],
                &[("s", ":ARG1", "x")],
                &[],
            )
        };
        let sim = SimilarityTable::new()
            .with("dock", "pier", 0.6)
            .with("dock", "sofa", 0.1);
        assert_eq!(
            merged(&sit("c1", "dock"), &sit("c2", "pier"), &sim),
            set(&["s+s"])
        );
        assert!(merged(&sit("c1", "dock"), &sit("c2", "sofa"), &sim).is_empty());
        let bare = vg("c3", &[("s", "sit-01")], &[], &[]);
        assert_eq!(merged(&sit("c1", "dock"), &bare, &sim), set(&["s+s"]));
    }

    #[test]
    fn rule4_flickr_never_merges_adjectives() {
        let a = vg("c1", &[("y", "young")], &[], &[]);
        let b = vg("c2", &[("y", "young")], &[], &[]);
        let sim = SimilarityTable::new();
        assert_eq!(merge_with(RuleSet::Coco, &sim, &a, &b).1, set(&["y+y"]));
        assert!(merge_with(RuleSet::Flickr, &sim, &a, &b).1.is_empty());
        // Prepositions and adverbs of the modifier list are not adjectives: they merge.
        for word in ["above", "across", "back"] {
            let a = vg("c1", &[("x", word)], &[], &[]);
            let b = vg("c2", &[("x", word)], &[], &[]);
            assert_eq!(merge_with(RuleSet::Flickr, &sim, &a, &b).1, set(&["x+x"]));
        }
    }

    #[test]
    fn a_noun_never_merges_with_a_predicate_of_its_lemma() {
        let noun = vg("c1", &[("h", "hold")], &[], &[]);
        let frame = vg("c2", &[("h", "hold-01")], &[], &[]);
        for rules in [RuleSet::Coco, RuleSet::Flickr] {
            // Rule 4 (identical once the sense is stripped) and rule 5 (similarity 1, `hold`
            // absent from graph 2) both stay out.
            let (meta, pairs) = merge_with(rules, &SimilarityTable::new(), &noun, &frame);
            assert!(pairs.is_empty(), "{rules:?}");
            assert_eq!(meta.nodes.len(), 3, "{rules:?}");
        }
    }

    #[test]
    fn rule5_similar_labels_absent_from_the_other_graph() {
        let a = vg(
            "c1",
            &[("b", "boat"), ("l", "large")],
            &[("b", ":mod", "l")],
            &[],
        );
        let b = vg(
            "c2",
            &[("s", "ship"), ("g", "big")],
            &[("s", ":mod", "g")],
            &[],
        );
        let sim = SimilarityTable::new()
            .with("boat", "ship", 0.8)
            .with("large", "big", 0.9);
        assert_eq!(merged(&a, &b, &sim), set(&["b+s", "l+g"]));
        // Below 0.7 COCO keeps them apart; Flickr's threshold is 0.5.
        let weaker = SimilarityTable::new().with("boat", "ship", 0.6);
        let a1 = vg("c1", &[("b", "boat")], &[], &[]);
        let b1 = vg("c2", &[("s", "ship")], &[], &[]);
        assert!(merged(&a1, &b1, &weaker).is_empty());
        assert_eq!(
            merge_with(RuleSet::Flickr, &weaker, &a1, &b1).1,
            set(&["b+s"])
        );
        // A label that also occurs in the other graph blocks the merge.
        let b2 = vg(
            "c2",
            &[("s", "ship"), ("o", "boat")],
            &[("s", ":part", "o")],
            &[],
        );
        let merged_pairs = merged(&a1, &b2, &sim);
        assert_eq!(merged_pairs, set(&["b+o"]));
    }

    #[test]
    fn rule6_predicates_with_the_same_arguments() {
        let ride = |c: &str, pred: &str, arg1: &str| {
            vg(
                c,
                &[("r", pred), ("m", "man"), ("h", arg1), ("f", "field")],
                &[
                    ("r", ":ARG0", "m"),
                    ("r", ":ARG1", "h"),
                    ("r", ":ARG2", "f"),
                ],
                &[],
            )
        };
        let sim = SimilarityTable::new();
        // ride-01 and mount-01 are out of vocabulary, but their ARG0/1/2 children merged.
        assert_eq!(
            merged(
                &ride("c1", "ride-01", "horse"),
                &ride("c2", "mount-01", "horse"),
                &sim
            ),
            set(&["m+m", "h+h", "f+f", "r+r"])
        );
        // A different ARG1 keeps the predicates apart.
        assert_eq!(
            merged(
                &ride("c1", "ride-01", "horse"),
                &ride("c2", "mount-01", "bike"),
                &sim
            ),
            set(&["m+m", "f+f"])
        );
    }

    #[test]
    fn rule6_different_arg2_thresholds_per_rule_set() {
        let pred = |c: &str, p: &str, arg2: &str| {
            vg(
                c,
                &[("r", p), ("m", "man"), ("h", "horse"), ("f", arg2)],
                &[
                    ("r", ":ARG0", "m"),
                    ("r", ":ARG1", "h"),
                    ("r", ":ARG2", "f"),
                ],
                &[],
            )
        };
        let sim = SimilarityTable::new().with("ride", "mount", 0.35);
        let (a, b) = (
            pred("c1", "ride-01", "field"),
            pred("c2", "mount-01", "beach"),
        );
        assert!(!merged(&a, &b, &sim).contains("r+r"));
        assert!(merge_with(RuleSet::Flickr, &sim, &a, &b).1.contains("r+r"));
    }

    #[test]
    fn rule0_include_91_never_merges() {
        let a = vg("c1", &[("i", "include-91")], &[], &[]);
        let b = vg("c2", &[("i", "include-91")], &[], &[]);
        assert!(merged(&a, &b, &SimilarityTable::new()).is_empty());
    }

    #[test]
    fn disjoint_graphs_get_a_multi_sentence_root() {
        let a = vg(
            "c1",
            &[("b", "boat"), ("w", "white")],
            &[("b", ":mod", "w")],
            &[],
        );
        let b = vg("c2", &[("h", "house")], &[], &[]);
        let sim = SimilarityTable::new();
        let (meta, pairs) = merge_with(RuleSet::Coco, &sim, &a, &b);
        assert!(pairs.is_empty());
        assert_eq!(
            meta.nodes[meta.root].labels,
            vec!["multi-sentence".to_string()]
        );
        let roles: BTreeSet<(String, String)> = meta
            .edges
            .iter()
            .filter(|e| e.source == meta.root)
            .map(|e| (e.role.clone(), meta.nodes[e.target].labels[0].clone()))
            .collect();
        assert_eq!(
            roles,
            [
                (":snt1".to_string(), "boat".to_string()),
                (":snt2".to_string(), "house".to_string())
            ]
            .into()
        );
        // A third disjoint graph becomes :snt3 of the same root.
        let c = vg("c3", &[("d", "dog")], &[], &[]);
        let ctx = MergeContext {
            rules: RuleSet::Coco,
            similarity: &sim,
            lexicon: ModifierLexicon::wordnet(),
            log: None,
        };
        let meta3 = merge_pair(&meta, &MetaGraph::from_vgamr(&c), &ctx);
        assert_eq!(meta3.nodes.len(), 5);
        assert!(meta3.edges.iter().any(|e| e.source == meta3.root
            && e.role == ":snt3"
            && meta3.nodes[e.target].labels[0] == "dog"));
    }

    #[test]
    fn subset_edge_from_the_node_with_more_boxes() {
        let a = vg(
            "c1",
            &[("p", "people")],
            &[],
            &[("p", boxed("people", &[A, B]))],
        );
        let b = vg("c2", &[("m", "man")], &[], &[("m", boxed("man", &[A]))]);
        let close = SimilarityTable::new().with("people", "man", 0.5);
        let (meta, _) = merge_with(RuleSet::Coco, &close, &a, &b);
        let subset: Vec<(String, String)> = meta
            .edges
            .iter()
            .filter(|e| e.role == ":subset")
            .map(|e| {
                (
                    meta.nodes[e.source].labels[0].clone(),
                    meta.nodes[e.target].labels[0].clone(),
                )
            })
            .collect();
        assert_eq!(subset, vec![("people".to_string(), "man".to_string())]);
        let far = SimilarityTable::new().with("people", "man", 0.3);
        let (meta, _) = merge_with(RuleSet::Coco, &far, &a, &b);
        assert!(meta.edges.iter().all(|e| e.role != ":subset"));
    }

    #[test]
    fn cycles_from_merging_are_removed() {
        // Caption 1: the man holds the dog; caption 2: the dog follows the man.
        let a = vg(
            "c1",
            &[("m", "man"), ("d", "dog")],
            &[("m", ":poss", "d")],
            &[],
        );
        let b = vg(
            "c2",
            &[("d", "dog"), ("m", "man")],
            &[("d", ":accompanier", "m")],
            &[],
        );
        let (meta, pairs) = merge_with(RuleSet::Coco, &SimilarityTable::new(), &a, &b);
        assert_eq!(pairs, set(&["m+m", "d+d"]));
        assert_eq!(meta.edges.len(), 1);
        assert_eq!(meta.edges[0].role, ":poss");
    }

    #[test]
    fn remove_cycles_drops_back_edges_and_self_loops() {
        let node = |l: &str| MetaNode {
            labels: vec![l.into()],
            grounding: None,
            origins: vec![],
        };
        let edge = |s, r: &str, t| MetaEdge {
            source: s,
            role: r.into(),
            target: t,
        };
        let mut g = MetaGraph {
            nodes: vec![node("a"), node("b"), node("c")],
            edges: vec![
                edge(0, ":x", 1),
                edge(1, ":y", 2),
                edge(2, ":z", 0),
                edge(1, ":self", 1),
            ],
            attributes: vec![],
            root: 0,
            captions: vec![],
        };
        remove_cycles(&mut g);
        assert_eq!(g.edges, vec![edge(0, ":x", 1), edge(1, ":y", 2)]);
    }

    #[test]
    fn label_similarity_strips_senses_and_takes_the_best_pair() {
        let sim = SimilarityTable::new()
            .with("man", "guy", 0.6)
            .with("person", "guy", 0.7);
        let labels = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            label_similarity(&labels(&["sit-01"]), &labels(&["sit-02"]), &sim),
            1.0
        );
        assert_eq!(
            label_similarity(&labels(&["man", "person"]), &labels(&["guy"]), &sim),
            0.7
        );
        assert_eq!(
            label_similarity(&labels(&["and"]), &labels(&["and"]), &sim),
            -1.0
        );
        assert_eq!(
            label_similarity(&labels(&["cat"]), &labels(&["dog"]), &sim),
            -1.0
        );
    }

    #[test]
    fn smatch_distances_round_to_four_decimals() {
        let g = Graph::default();
        let graphs = [&g, &g, &g];
        let d = smatch_distances(&graphs, &|_, _| 0.123_456);
        assert_eq!(d[0][1], 0.8765);
        assert_eq!(d[2][1], 0.8765);
        assert_eq!(d[1][1], 0.0);
    }

    #[test]
    fn merge_order_is_validated() {
        assert!(validate_order(
            3,
            &[
                MergeStep { left: 0, right: 1 },
                MergeStep { left: 2, right: 3 }
            ]
        )
        .is_ok());
        assert!(validate_order(
            3,
            &[
                MergeStep { left: 0, right: 1 },
                MergeStep { left: 1, right: 2 }
            ]
        )
        .is_err());
        assert!(validate_order(
            3,
            &[
                MergeStep { left: 0, right: 4 },
                MergeStep { left: 1, right: 2 }
            ]
        )
        .is_err());
        assert!(validate_order(3, &[MergeStep { left: 0, right: 1 }]).is_err());
    }
}
