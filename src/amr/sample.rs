//! Event sampling: focused subgraphs of a meta-vgAMR rooted at its predicates (METHODS.md §1.5).
//!
//! Every predicate node (a label with a sense suffix `-NN`, at least one `:ARG0`..`:ARG5` child,
//! and, when a frame list is given, a PropBank frame for its lemma) yields:
//! - [`EventVariant::Arguments`] with `highest = 2`: the predicate and one child per role
//!   `:ARG0`..`:ARG2`;
//! - one more `Arguments` variant for each of `:ARG3`, `:ARG4`, `:ARG5` the predicate has,
//!   allowing roles up to that one;
//! - [`EventVariant::Full`]: a breadth-first traversal over every outgoing edge down to the
//!   leaves.
//!
//! Like the reference, every node keeps at most one child per role: where merging gave a node
//! several children with the same role (two captions' `:ARG0`), one is drawn at random, which is
//! where the meta graph's combinations come from. Edges between nodes already in the subgraph are
//! kept (one per node and role), `:quant` children and `:polarity` of the chosen nodes come along,
//! and subgraphs with fewer than 3 nodes are dropped. Synonym lists are resolved to one label.
//!
//! # Determinism
//!
//! All random choices of one predicate come from one `ChaCha8Rng` seeded with the SHA-256 of
//! (global seed, image key, stage, the predicate's provenance), and they are drawn in an order
//! fixed by provenance keys (caption id and variable of the nodes' origins) and role names,
//! never by storage or hash-map order. The same meta graph with its nodes or edges stored in
//! another order gives the same subgraphs.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

use crate::amr::align::{is_predicate, strip_sense};
use crate::amr::graph::{Graph, Triple};
use crate::amr::merge::{tree_order, MetaGraph};
use crate::schema::BoxXyxy;

/// The stage name mixed into the sampling seed.
pub const STAGE: &str = "event-sample";

/// Which traversal produced a subgraph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventVariant {
    /// The predicate's own arguments `:ARG0` ..= `:ARG<highest>`.
    Arguments { highest: u8 },
    /// Every outgoing edge, down to the leaves.
    Full,
}

impl EventVariant {
    pub fn name(self) -> String {
        match self {
            EventVariant::Arguments { highest } => format!("arg0-{highest}"),
            EventVariant::Full => "full".to_string(),
        }
    }
}

/// One sampled event subgraph.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EventSubgraph {
    /// The predicate's variable in the meta graph.
    pub predicate: String,
    /// Meta-graph variables of the subgraph's nodes, predicate first, in traversal order.
    pub nodes: Vec<String>,
    /// The subgraph with one label per node, rooted at the predicate; encodable as PENMAN.
    pub graph: Graph,
    /// Union of the grounded nodes' boxes, in node order, without repeats.
    pub boxes: Vec<BoxXyxy>,
    /// Some node is grounded to an unknown region: the sample is not fully grounded.
    pub unknown: bool,
    pub variant: EventVariant,
}

/// PropBank frame lemmas for [`SamplingConfig::frames`], one per line (`sit` or the frame file
/// name `sit.xml`); blank lines and `#` comments are skipped.
pub fn read_frames(path: &std::path::Path) -> crate::Result<HashSet<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::Error::io(path, e))?;
    Ok(text
        .lines()
        .map(|l| l.trim().trim_end_matches(".xml").to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect())
}

/// Sampling parameters.
#[derive(Clone, Debug)]
pub struct SamplingConfig<'a> {
    pub seed: u64,
    pub image_key: &'a str,
    /// Lemmas with a PropBank frame (`sit`, `ride`); `None` accepts every predicate.
    pub frames: Option<&'a HashSet<String>>,
    /// Subgraphs with fewer nodes are dropped (3 in the reference).
    pub min_nodes: usize,
}

impl<'a> SamplingConfig<'a> {
    pub fn new(seed: u64, image_key: &'a str) -> Self {
        SamplingConfig {
            seed,
            image_key,
            frames: None,
            min_nodes: 3,
        }
    }
}

const ARG_ROLES: [&str; 6] = [":ARG0", ":ARG1", ":ARG2", ":ARG3", ":ARG4", ":ARG5"];

/// A stable identity of a meta node: its smallest origin, else its labels.
fn node_key(meta: &MetaGraph, node: usize) -> String {
    let n = &meta.nodes[node];
    match n.origins.iter().min() {
        Some(o) => format!("{}\u{1f}{}", o.caption_id, o.var),
        None => {
            // Nodes made by merging (`multi-sentence`): identify them by what they link.
            let mut children: Vec<String> = meta
                .edges
                .iter()
                .filter(|e| e.source == node)
                .filter_map(|e| meta.nodes[e.target].origins.iter().min())
                .map(|o| format!("{}/{}", o.caption_id, o.var))
                .collect();
            children.sort();
            format!("{}\u{1f}{}", n.joined_label(), children.join(","))
        }
    }
}

/// The random stream of one predicate.
pub fn predicate_rng(seed: u64, image_key: &str, stage: &str, predicate_key: &str) -> ChaCha8Rng {
    let mut h = Sha256::new();
    h.update(b"capflow\0");
    h.update(seed.to_le_bytes());
    for part in [image_key, stage, predicate_key] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    ChaCha8Rng::from_seed(h.finalize().into())
}

/// Whether node `i` is a predicate that events are sampled from.
fn is_event_predicate(meta: &MetaGraph, i: usize, frames: Option<&HashSet<String>>) -> bool {
    let node = &meta.nodes[i];
    let labels: Vec<&String> = node.labels.iter().filter(|l| is_predicate(l)).collect();
    if labels.is_empty() || node.labels.iter().any(|l| l == "include-91") {
        return false;
    }
    if let Some(frames) = frames {
        if !labels.iter().any(|l| frames.contains(strip_sense(l))) {
            return false;
        }
    }
    meta.edges
        .iter()
        .any(|e| e.source == i && ARG_ROLES.contains(&e.role.as_str()))
}

/// Samples the event subgraphs of every predicate of a meta graph.
pub fn event_subgraphs(meta: &MetaGraph, config: &SamplingConfig) -> Vec<EventSubgraph> {
    let keys: Vec<String> = (0..meta.nodes.len()).map(|i| node_key(meta, i)).collect();
    // Out edges by node, in a canonical order: role, then target key.
    let mut out: Vec<Vec<(String, usize)>> = vec![Vec::new(); meta.nodes.len()];
    for e in &meta.edges {
        if e.source < out.len() && e.target < out.len() {
            out[e.source].push((e.role.clone(), e.target));
        }
    }
    for edges in &mut out {
        edges.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| keys[a.1].cmp(&keys[b.1])));
        edges.dedup();
    }
    let mut predicates: Vec<usize> = (0..meta.nodes.len())
        .filter(|&i| is_event_predicate(meta, i, config.frames))
        .collect();
    predicates.sort_by(|&a, &b| keys[a].cmp(&keys[b]));

    let mut samples = Vec::new();
    for p in predicates {
        let mut rng = predicate_rng(config.seed, config.image_key, STAGE, &keys[p]);
        let mut variants = vec![EventVariant::Arguments { highest: 2 }];
        for (k, role) in ARG_ROLES.iter().enumerate().skip(3) {
            if out[p].iter().any(|(r, _)| r == role) {
                variants.push(EventVariant::Arguments { highest: k as u8 });
            }
        }
        variants.push(EventVariant::Full);
        for variant in variants {
            let sample = sample_one(meta, &out, &keys, p, variant, &mut rng);
            if sample.nodes.len() >= config.min_nodes {
                samples.push(sample);
            }
        }
    }
    samples
}

/// Picks one child per role from canonically ordered `(role, target)` edges.
fn one_per_role(
    edges: &[(String, usize)],
    allowed: &dyn Fn(&str) -> bool,
    rng: &mut ChaCha8Rng,
) -> Vec<(String, usize)> {
    let mut by_role: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (role, target) in edges {
        if allowed(role) {
            by_role.entry(role.as_str()).or_default().push(*target);
        }
    }
    by_role
        .into_iter()
        .map(|(role, targets)| {
            let pick = if targets.len() == 1 {
                targets[0]
            } else {
                targets[rng.gen_range(0..targets.len())]
            };
            (role.to_string(), pick)
        })
        .collect()
}

fn sample_one(
    meta: &MetaGraph,
    out: &[Vec<(String, usize)>],
    keys: &[String],
    predicate: usize,
    variant: EventVariant,
    rng: &mut ChaCha8Rng,
) -> EventSubgraph {
    let mut order = vec![predicate];
    let mut in_subgraph: BTreeSet<usize> = [predicate].into();
    // (source, role) -> target
    let mut chosen: BTreeMap<(usize, String), usize> = BTreeMap::new();
    match variant {
        EventVariant::Arguments { highest } => {
            let allowed = |role: &str| ARG_ROLES[..=usize::from(highest).min(5)].contains(&role);
            for (role, target) in one_per_role(&out[predicate], &allowed, rng) {
                chosen.insert((predicate, role), target);
                if in_subgraph.insert(target) {
                    order.push(target);
                }
            }
        }
        EventVariant::Full => {
            let mut frontier = vec![predicate];
            while !frontier.is_empty() {
                frontier.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
                let mut next = Vec::new();
                for node in frontier {
                    for (role, target) in one_per_role(&out[node], &|_| true, rng) {
                        chosen.insert((node, role), target);
                        if in_subgraph.insert(target) {
                            order.push(target);
                            next.push(target);
                        }
                    }
                }
                frontier = next;
            }
        }
    }
    // `:quant` children of the chosen nodes.
    for node in order.clone() {
        if chosen.contains_key(&(node, ":quant".to_string())) {
            continue;
        }
        let quant = one_per_role(&out[node], &|r| r == ":quant", rng);
        for (role, target) in quant {
            chosen.insert((node, role), target);
            if in_subgraph.insert(target) {
                order.push(target);
            }
        }
    }
    // Edges between nodes already in the subgraph, one per node and role.
    for &node in &order {
        for (role, target) in &out[node] {
            if in_subgraph.contains(target) && !chosen.contains_key(&(node, role.clone())) {
                chosen.insert((node, role.clone()), *target);
            }
        }
    }
    build_subgraph(meta, keys, predicate, variant, &order, &chosen, rng)
}

fn build_subgraph(
    meta: &MetaGraph,
    keys: &[String],
    predicate: usize,
    variant: EventVariant,
    order: &[usize],
    chosen: &BTreeMap<(usize, String), usize>,
    rng: &mut ChaCha8Rng,
) -> EventSubgraph {
    // Labels are drawn in key order so that storage order cannot change them.
    let mut by_key: Vec<usize> = order.to_vec();
    by_key.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    let mut label: BTreeMap<usize, String> = BTreeMap::new();
    for node in by_key {
        let labels = &meta.nodes[node].labels;
        let pick = match labels.len() {
            0 => String::new(),
            1 => labels[0].clone(),
            n => labels[rng.gen_range(0..n)].clone(),
        };
        label.insert(node, pick);
    }
    let mut triples = Vec::new();
    let mut boxes: Vec<BoxXyxy> = Vec::new();
    let mut unknown = false;
    for &node in order {
        let var = meta.var(node);
        triples.push(Triple::new(
            var.clone(),
            ":instance",
            label.get(&node).cloned().unwrap_or_default(),
        ));
        for a in meta.attributes.iter().filter(|a| a.node == node) {
            let keep = match variant {
                EventVariant::Full => true,
                EventVariant::Arguments { .. } => a.role == ":quant" || a.role == ":polarity",
            };
            if keep {
                triples.push(Triple::new(var.clone(), a.role.clone(), a.value.clone()));
            }
        }
        for ((source, role), target) in chosen.range((node, String::new())..) {
            if *source != node {
                break;
            }
            triples.push(Triple::new(var.clone(), role.clone(), meta.var(*target)));
        }
        if let Some(g) = &meta.nodes[node].grounding {
            unknown |= g.unknown;
            for b in &g.boxes {
                if !boxes.contains(b) {
                    boxes.push(*b);
                }
            }
        }
    }
    EventSubgraph {
        predicate: meta.var(predicate),
        nodes: order.iter().map(|&n| meta.var(n)).collect(),
        graph: Graph {
            top: meta.var(predicate),
            triples: tree_order(&meta.var(predicate), triples),
            metadata: vec![("snt-type".to_string(), variant.name())],
            alignments: Vec::new(),
        },
        boxes,
        unknown,
        variant,
    }
}
