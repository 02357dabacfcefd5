//! Caption filtering of GBC graphs by caption type and score thresholds, bottom-up, with
//! bag-of-words captions that keep edge labels alive (apple/ml-gbc `GbcClipFilter`).
//!
//! Vertices are filtered children first, starting from the roots:
//!
//! - a caption is dropped when it is empty, its label or full label (`<label>-<vertex label>`,
//!   e.g. `detail-entity`) is excluded, a seeded draw drops it (`random_filtering_probs`), it
//!   was truncated by the scorer, or its score (the mean of `clip_scores.scores` over the
//!   configured models) is below the threshold of its full label or of its label;
//! - an image vertex goes when a `short` caption scores below the `short-image` threshold, or when
//!   no `short`, `detail` or `original` caption (or a required label) is left; a graph goes exactly
//!   when its image vertex goes;
//! - out-edges to dropped children are removed; an out-edge whose text no longer occurs (as a
//!   whole word, any case) in a remaining caption of its vertex gets it back through one
//!   `bagofwords` caption listing those texts (`"man, dog"`);
//! - a vertex with no caption left (so also no child left) is dropped.
//!
//! Afterwards every out-edge text of a vertex occurs in one of its captions, and the edges and
//! masks are reconciled as ml-gbc does when it builds the filtered graph. The filtered graph lists
//! its vertices in the order they were filtered (children before parents), as ml-gbc writes it.
//!
//! With `max_n_vertices_per_graph`, the graph is cut to a subgraph after filtering (before, with
//! `filter_after_selection`). Random draws come from a ChaCha8 stream, not numpy's.
//!
//! Not implemented: ml-gbc's `max_n_tokens` splitting (needs the CLIP tokenizer).

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::gbc_edit::{refresh, roots, subgraph, SubgraphOptions, TraversalOrder};
use crate::schema::{GbcDesc, GbcGraphRow, GbcVertex};

/// Filter settings: the options of `capflow gbc filter` and a recipe's `[gbc.filter]` table.
/// Names and defaults are ml-gbc's `GbcClipFilter` class's (its `gbc_clip_filter` function
/// averages two CLIP models by default, the class three; capflow takes the class's). Note that
/// the default `short-global` key matches no caption (image vertices are labelled `image`, so
/// image short captions are `short-image`); it is kept for fidelity.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GbcFilterConfig {
    /// Caption labels or full labels to drop.
    pub exclude_labels: Vec<String>,
    /// Probability of dropping a caption, per caption label or full label (the full label's
    /// entry first), drawn from the graph's seeded generator in filtering order.
    pub random_filtering_probs: BTreeMap<String, f64>,
    /// The CLIP models averaged (keys of `clip_scores.scores`).
    pub clip_names: Vec<String>,
    /// Lowest score per caption label or full label.
    pub min_clip_scores: BTreeMap<String, f64>,
    /// Drop captions whose `clip_scores.truncation` is true.
    pub remove_truncation: bool,
    /// Add a bag-of-words caption for edge texts no caption mentions any more.
    pub add_bag_of_words: bool,
    /// Remove edges whose text no caption mentions (when no bag-of-words caption was added).
    pub remove_edge_with_no_corr: bool,
    /// Drop the image when a short image caption scores below `min_clip_scores["short-image"]`.
    pub filter_image_using_short_clip_scores: bool,
    /// Caption labels the image vertex must keep.
    pub must_include_labels: Vec<String>,
    /// Take the subgraph of `max_n_vertices_per_graph` vertices before filtering instead of
    /// after.
    pub filter_after_selection: bool,
    /// Keep at most this many vertices per graph ([`subgraph`]).
    pub max_n_vertices_per_graph: Option<usize>,
    /// The traversal the subgraph follows.
    pub node_selection_mode: TraversalOrder,
}

impl Default for GbcFilterConfig {
    fn default() -> Self {
        GbcFilterConfig {
            exclude_labels: vec!["hardcode".into()],
            random_filtering_probs: BTreeMap::new(),
            clip_names: vec![
                "dfn5b-fm-b-patch32-224".into(),
                "dfn5b-h-patch14-378".into(),
                "openai-l-patch14-336".into(),
            ],
            min_clip_scores: [
                ("short-global".to_string(), 0.2),
                ("detail-entity".to_string(), 0.2),
            ]
            .into_iter()
            .collect(),
            remove_truncation: true,
            add_bag_of_words: true,
            remove_edge_with_no_corr: true,
            filter_image_using_short_clip_scores: true,
            must_include_labels: Vec::new(),
            filter_after_selection: false,
            max_n_vertices_per_graph: None,
            node_selection_mode: TraversalOrder::Bfs,
        }
    }
}

/// What filtering did to one graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterReport {
    pub captions_dropped: usize,
    pub vertices_dropped: usize,
    pub bag_of_words_added: usize,
    pub graph_dropped: bool,
}

/// A caption's full label: the stored `full_label`, else `<label>-<vertex label>`.
pub fn full_label(desc: &GbcDesc, vertex_label: &str) -> String {
    extra(desc)
        .and_then(|e| {
            e.get("full_label")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .unwrap_or_else(|| format!("{}-{vertex_label}", desc.label))
}

fn extra(desc: &GbcDesc) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str(desc.extra_json.as_deref()?) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

impl GbcFilterConfig {
    /// The caption's score: the mean over the configured models of `clip_scores.scores`, or
    /// infinity (never filtered) when it has none.
    pub fn score(&self, desc: &GbcDesc) -> f64 {
        let Some(scores) = extra(desc).and_then(|e| {
            e.get("clip_scores")
                .and_then(|c| c.get("scores"))
                .and_then(Value::as_object)
                .cloned()
        }) else {
            return f64::INFINITY;
        };
        let values: Vec<f64> = scores
            .iter()
            .filter(|(name, _)| self.clip_names.contains(name))
            .filter_map(|(_, v)| v.as_f64())
            .collect();
        if values.is_empty() {
            f64::INFINITY
        } else {
            values.iter().sum::<f64>() / values.len() as f64
        }
    }

    /// Whether one caption survives (`GbcClipFilter.filter_caption`): not empty, not excluded,
    /// not dropped at random (one draw from `rng` when its full label or label has a
    /// probability), not truncated, and not below the threshold of its full label nor below
    /// that of its label.
    pub fn keeps_caption(&self, desc: &GbcDesc, vertex_label: &str, rng: &mut ChaCha8Rng) -> bool {
        if desc.text.trim().is_empty() {
            return false;
        }
        let full = full_label(desc, vertex_label);
        if self
            .exclude_labels
            .iter()
            .any(|l| *l == desc.label || *l == full)
        {
            return false;
        }
        let drop_probability = self
            .random_filtering_probs
            .get(&full)
            .or_else(|| self.random_filtering_probs.get(&desc.label));
        if let Some(&p) = drop_probability {
            if rng.gen::<f64>() < p {
                return false;
            }
        }
        let truncated = extra(desc)
            .and_then(|e| e.get("clip_scores")?.get("truncation")?.as_bool())
            .unwrap_or(false);
        if self.remove_truncation && truncated {
            return false;
        }
        let below = |key: &str| {
            self.min_clip_scores
                .get(key)
                .is_some_and(|&min| self.score(desc) < min)
        };
        !below(&full) && !below(&desc.label)
    }
}

/// Python's `re.search(r"\b" + re.escape(needle) + r"\b", text, re.IGNORECASE)` for one text:
/// `needle` occurs with a word boundary on both sides (a boundary lies between a word character,
/// letter, digit or `_`, and anything else), ignoring case.
pub fn mentions(text: &str, needle: &str) -> bool {
    fn fold(c: char) -> char {
        let mut lower = c.to_lowercase();
        match (lower.next(), lower.next()) {
            (Some(l), None) => l,
            _ => c,
        }
    }
    fn is_word(c: Option<&char>) -> bool {
        c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
    }
    let hay: Vec<char> = text.chars().map(fold).collect();
    let pin: Vec<char> = needle.chars().map(fold).collect();
    if pin.len() > hay.len() {
        return false;
    }
    (0..=hay.len() - pin.len()).any(|start| {
        let end = start + pin.len();
        if hay[start..end] != pin[..] {
            return false;
        }
        let before = start.checked_sub(1).and_then(|i| hay.get(i));
        let last = end.checked_sub(1).and_then(|i| hay.get(i));
        is_word(before) != is_word(hay.get(start)) && is_word(last) != is_word(hay.get(end))
    })
}

/// Filters one graph; `None` when its image vertex (and so the graph) is dropped.
pub fn filter_graph(
    row: &GbcGraphRow,
    config: &GbcFilterConfig,
    seed: u64,
) -> (Option<GbcGraphRow>, FilterReport) {
    let mut report = FilterReport::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let selection = config.max_n_vertices_per_graph.map(|max| SubgraphOptions {
        max_n_vertices: Some(max),
        mode: config.node_selection_mode,
        ..SubgraphOptions::default()
    });
    let selected;
    let row = match &selection {
        // These options always give a subgraph: only a root or edge shuffling can be refused.
        Some(options) if config.filter_after_selection => match subgraph(row, options, seed) {
            Ok(sub) => {
                selected = sub;
                &selected
            }
            Err(_) => row,
        },
        _ => row,
    };
    let index: BTreeMap<&str, usize> = row
        .vertices
        .iter()
        .enumerate()
        .rev()
        .map(|(i, v)| (v.vertex_id.as_str(), i))
        .collect();
    // Post-order over the out-edges from every root, each vertex once.
    let mut decided: Vec<Option<Option<GbcVertex>>> = vec![None; row.vertices.len()];
    let mut entered = vec![false; row.vertices.len()];
    let mut post_order = Vec::new();
    for root in roots(row) {
        let mut stack = vec![(root, 0usize)];
        while let Some((v, next)) = stack.pop() {
            if next == 0 {
                if entered[v] {
                    continue;
                }
                entered[v] = true;
            }
            let child = row.vertices[v]
                .out_edges
                .get(next)
                .and_then(|e| index.get(e.target.as_str()).copied());
            if next < row.vertices[v].out_edges.len() {
                stack.push((v, next + 1));
                if let Some(c) = child {
                    if !entered[c] {
                        stack.push((c, 0));
                    }
                }
                continue;
            }
            let filtered = filter_vertex(
                row,
                v,
                &index,
                &mut decided,
                (config, &mut rng),
                &mut report,
            );
            decided[v] = Some(filtered);
            post_order.push(v);
        }
    }
    let root_kept = row
        .vertices
        .iter()
        .position(|v| v.label == "image")
        .is_some_and(|r| matches!(decided[r], Some(Some(_))));
    if !root_kept {
        report.graph_dropped = true;
        return (None, report);
    }
    let mut out = row.clone();
    out.vertices = post_order
        .into_iter()
        .filter_map(|v| decided[v].take().flatten())
        .collect();
    report.vertices_dropped = row.vertices.len() - out.vertices.len();
    refresh(&mut out);
    if let Some(options) = selection.filter(|_| !config.filter_after_selection) {
        if let Ok(sub) = subgraph(&out, &options, seed) {
            out = sub;
        }
    }
    (Some(out), report)
}

/// `GbcClipFilter.filter_vertex`: the vertex with its surviving captions and edges, or `None`.
fn filter_vertex(
    row: &GbcGraphRow,
    v: usize,
    index: &BTreeMap<&str, usize>,
    decided: &mut [Option<Option<GbcVertex>>],
    (config, rng): (&GbcFilterConfig, &mut ChaCha8Rng),
    report: &mut FilterReport,
) -> Option<GbcVertex> {
    let vertex = &row.vertices[v];
    // An edge survives when its child survived, or is still being filtered (a cycle back to an
    // ancestor; reconciliation removes it later if that ancestor goes).
    let mut out_edges: Vec<_> = vertex
        .out_edges
        .iter()
        .filter(|e| match index.get(e.target.as_str()) {
            Some(&c) => !matches!(decided[c], Some(None)),
            None => false,
        })
        .cloned()
        .collect();
    let mut texts: Vec<String> = Vec::new();
    for e in &out_edges {
        if !texts.contains(&e.text) {
            texts.push(e.text.clone());
        }
    }

    let mut descs = Vec::new();
    for desc in &vertex.descs {
        if config.filter_image_using_short_clip_scores
            && desc.label == "short"
            && vertex.label == "image"
            && config
                .min_clip_scores
                .get("short-image")
                .is_some_and(|&min| config.score(desc) < min)
        {
            report.captions_dropped += vertex.descs.len();
            return None;
        }
        if config.keeps_caption(desc, &vertex.label, rng) {
            descs.push(desc.clone());
        } else {
            report.captions_dropped += 1;
        }
    }

    if vertex.label == "image" {
        let described = descs
            .iter()
            .any(|d| matches!(d.label.as_str(), "short" | "detail" | "original"));
        let complete = config
            .must_include_labels
            .iter()
            .all(|l| descs.iter().any(|d| &d.label == l));
        if !described || !complete {
            return None;
        }
    }

    let unmentioned: Vec<String> = texts
        .into_iter()
        .filter(|t| !descs.iter().any(|d| mentions(&d.text, t)))
        .collect();
    if !unmentioned.is_empty() {
        if config.add_bag_of_words {
            let full_form = vertex
                .descs
                .iter()
                .any(|d| extra(d).is_some_and(|e| e.contains_key("full_label")));
            descs.push(bag_of_words(&unmentioned, &vertex.label, full_form));
            report.bag_of_words_added += 1;
        } else if config.remove_edge_with_no_corr {
            out_edges.retain(|e| !unmentioned.contains(&e.text));
            // The children forget the edge too.
            for e in vertex
                .out_edges
                .iter()
                .filter(|e| unmentioned.contains(&e.text))
            {
                let Some(&c) = index.get(e.target.as_str()) else {
                    continue;
                };
                if let Some(Some(Some(child))) = decided.get_mut(c) {
                    child
                        .in_edges
                        .retain(|i| !(i.source == vertex.vertex_id && i.text == e.text));
                }
            }
        }
    }
    if descs.is_empty() {
        return None;
    }
    let mut kept = vertex.clone();
    kept.descs = descs;
    kept.out_edges = out_edges;
    Some(kept)
}

/// A `bagofwords` caption listing `texts` (`", "`-separated), in the full form (with
/// `full_label`, empty statistics and scores, as ml-gbc's `Caption` dumps) when the vertex's
/// captions are in the full form.
fn bag_of_words(texts: &[String], vertex_label: &str, full_form: bool) -> GbcDesc {
    let extra_json = full_form.then(|| {
        json!({
            "full_label": format!("bagofwords-{vertex_label}"),
            "statistics": null,
            "clip_scores": {"scores": null, "truncation": false},
            "toxicity_scores": null,
        })
        .to_string()
    });
    GbcDesc {
        text: texts.join(", "),
        label: "bagofwords".into(),
        extra_json,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_uses_word_boundaries_and_ignores_case() {
        assert!(mentions("A Man rides.", "man"));
        assert!(!mentions("A woman rides.", "man"));
        assert!(!mentions("mankind", "man"));
        assert!(mentions("the red car_door", "red"));
        assert!(!mentions("car_door", "car"));
        assert!(mentions("tree 1 is left", "tree 1"));
        assert!(!mentions("tree 12 is left", "tree 1"));
        // A needle ending in a non-word character needs a word character after it (`\b`).
        assert!(!mentions("see (a) here", "(a)"));
        assert!(mentions("see x(a)y here", "(a)"));
        assert!(mentions("ÉCOLE", "école"));
    }

    #[test]
    fn scores_are_the_mean_over_configured_models() {
        let desc = GbcDesc {
            text: "a dog".into(),
            label: "detail".into(),
            extra_json: Some(
                r#"{"full_label": "detail-entity", "clip_scores": {"scores": {"openai-l-patch14-336": 0.1, "dfn5b-h-patch14-378": 0.25, "other": 9.0}, "truncation": false}}"#
                    .into(),
            ),
        };
        let config = GbcFilterConfig::default();
        assert!((config.score(&desc) - 0.175).abs() < 1e-12);
        let rng = &mut ChaCha8Rng::seed_from_u64(0);
        assert!(!config.keeps_caption(&desc, "entity", rng));
        let lenient = GbcFilterConfig {
            min_clip_scores: [("detail-entity".to_string(), 0.15)].into_iter().collect(),
            ..GbcFilterConfig::default()
        };
        assert!(lenient.keeps_caption(&desc, "entity", rng));
        // A passing full label does not exempt the caption from its label's threshold.
        let both = GbcFilterConfig {
            min_clip_scores: [
                ("detail-entity".to_string(), 0.15),
                ("detail".to_string(), 0.18),
            ]
            .into_iter()
            .collect(),
            ..GbcFilterConfig::default()
        };
        assert!(!both.keeps_caption(&desc, "entity", rng));
        let dropped_at_random = GbcFilterConfig {
            random_filtering_probs: [("detail".to_string(), 1.0)].into_iter().collect(),
            ..lenient.clone()
        };
        assert!(!dropped_at_random.keeps_caption(&desc, "entity", rng));
        // Without scores a caption is never filtered by score.
        let bare = GbcDesc {
            extra_json: None,
            ..desc
        };
        assert!(config.keeps_caption(&bare, "entity", rng));
        assert_eq!(full_label(&bare, "entity"), "detail-entity");
    }
}
