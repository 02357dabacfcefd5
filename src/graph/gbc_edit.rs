//! Structural operations on GBC graphs, as apple/ml-gbc's `GbcGraphFull` does them: traversal
//! orders, edge reconciliation, dropping a vertex with shortcut edges, subgraph extraction and
//! caption concatenation (GBC-concat).
//!
//! Every operation that changes the vertex set ends like ml-gbc's `reset_cache`: edges are
//! reconciled ([`reconcile_edges`]) and, for graphs in the full form (vertices carrying
//! `sub_masks`/`super_masks`), the masks are recomputed.
//!
//! ```
//! use capflow::graph::gbc_edit::{caption_concat, ConcatOptions};
//! # let line = r#"{"vertices": [{"vertex_id": "", "bbox": {"left": 0.0, "top": 0.0, "right": 1.0, "bottom": 1.0, "confidence": null}, "label": "image", "descs": [{"text": "A dog.", "label": "short"}], "in_edges": [], "out_edges": [{"source": "", "text": "dog", "target": "dog"}]}, {"vertex_id": "dog", "bbox": {"left": 0.1, "top": 0.1, "right": 0.5, "bottom": 0.5, "confidence": 0.9}, "label": "entity", "descs": [{"text": "A brown dog.", "label": "detail"}], "in_edges": [{"source": "", "text": "dog", "target": "dog"}], "out_edges": []}]}"#;
//! let row = capflow::graph::gbc::row_from_record(serde_json::from_str(line).unwrap(), || "x".into()).unwrap();
//! assert_eq!(caption_concat(&row, &ConcatOptions::default(), 0), "A dog. A brown dog.");
//! ```

use std::collections::{HashMap, HashSet};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::gbc::apply_masks;
use crate::schema::{GbcEdge, GbcGraphRow};

/// Vertex order of a traversal (`GbcGraphFull.get_order`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TraversalOrder {
    /// Breadth-first from the roots.
    Bfs,
    /// Depth-first from the roots (a stack: the last root first, children in edge order).
    Dfs,
    /// The reverse of the order in which the depth-first walk finishes vertices (parents
    /// before children in an acyclic graph).
    Topological,
    /// A seeded random permutation of the breadth-first order.
    Random,
}

impl TraversalOrder {
    /// The name ml-gbc and capflow's options use (`bfs`, `dfs`, `topological`, `random`).
    pub fn name(self) -> &'static str {
        match self {
            TraversalOrder::Bfs => "bfs",
            TraversalOrder::Dfs => "dfs",
            TraversalOrder::Topological => "topological",
            TraversalOrder::Random => "random",
        }
    }
}

fn index_of(row: &GbcGraphRow) -> HashMap<&str, usize> {
    let mut index = HashMap::new();
    for (i, v) in row.vertices.iter().enumerate() {
        index.entry(v.vertex_id.as_str()).or_insert(i);
    }
    index
}

/// ml-gbc's `roots`: the image vertices, then every other vertex without parents.
pub fn roots(row: &GbcGraphRow) -> Vec<usize> {
    let image = row
        .vertices
        .iter()
        .enumerate()
        .filter(|(_, v)| v.label == "image");
    let others = row
        .vertices
        .iter()
        .enumerate()
        .filter(|(_, v)| v.label != "image" && v.in_edges.is_empty());
    image.chain(others).map(|(i, _)| i).collect()
}

/// Children of every vertex in out-edge order; edges to missing vertices are skipped.
fn children(row: &GbcGraphRow) -> Vec<Vec<usize>> {
    let index = index_of(row);
    row.vertices
        .iter()
        .map(|v| {
            v.out_edges
                .iter()
                .filter_map(|e| index.get(e.target.as_str()).copied())
                .collect()
        })
        .collect()
}

/// Breadth-first order from the roots and each reached vertex's depth (level of first visit).
pub fn bfs_order_and_depths(row: &GbcGraphRow) -> (Vec<usize>, Vec<Option<usize>>) {
    let children = children(row);
    let mut depth = vec![None; row.vertices.len()];
    let mut order = Vec::new();
    let mut level = roots(row);
    let mut d = 0;
    while !level.is_empty() {
        let mut next = Vec::new();
        for v in level {
            if depth[v].is_some() {
                continue;
            }
            depth[v] = Some(d);
            order.push(v);
            next.extend(children[v].iter().filter(|&&c| depth[c].is_none()));
        }
        level = next;
        d += 1;
    }
    (order, depth)
}

/// Depth-first order from the roots (ml-gbc's stack walk: the last root is popped first).
pub fn dfs_order(row: &GbcGraphRow) -> Vec<usize> {
    dfs_and_topological(row).0
}

/// ml-gbc's `_compute_dfs_and_topological`: the stack walk's entering order, and the reverse of
/// its finishing order. A vertex is entered at its first pop; its finishing mark is pushed under
/// its children, which are pushed in reverse edge order unless already entered.
fn dfs_and_topological(row: &GbcGraphRow) -> (Vec<usize>, Vec<usize>) {
    let children = children(row);
    let mut visited = vec![false; row.vertices.len()];
    let mut entered = Vec::new();
    let mut finished = Vec::new();
    let mut stack: Vec<(usize, bool)> = roots(row).into_iter().map(|r| (r, false)).collect();
    while let Some((v, done)) = stack.pop() {
        if done {
            finished.push(v);
            continue;
        }
        if visited[v] {
            continue;
        }
        visited[v] = true;
        entered.push(v);
        stack.push((v, true));
        stack.extend(
            children[v]
                .iter()
                .rev()
                .filter(|&&c| !visited[c])
                .map(|&c| (c, false)),
        );
    }
    finished.reverse();
    (entered, finished)
}

/// The vertex order of `mode`; `Random` shuffles the breadth-first order with a ChaCha8 stream
/// seeded by `seed` (not numpy's generator, so not the same permutation as ml-gbc's).
pub fn order(row: &GbcGraphRow, mode: TraversalOrder, seed: u64) -> Vec<usize> {
    match mode {
        TraversalOrder::Bfs => bfs_order_and_depths(row).0,
        TraversalOrder::Dfs => dfs_order(row),
        TraversalOrder::Topological => dfs_and_topological(row).1,
        TraversalOrder::Random => {
            let mut order = bfs_order_and_depths(row).0;
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
            order
        }
    }
}

/// Makes every edge stored on both of its ends and drops edges to vertices that are gone, as
/// ml-gbc's `update_edges_and_masks` (vertices taken in id order; out-edges first, then in-edges,
/// each missing twin appended to the other end).
pub fn reconcile_edges(row: &mut GbcGraphRow) {
    let index: HashMap<String, usize> = index_of(row)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut sorted: Vec<usize> = (0..row.vertices.len()).collect();
    sorted.sort_by(|&a, &b| row.vertices[a].vertex_id.cmp(&row.vertices[b].vertex_id));
    for v in sorted {
        let mut kept = Vec::new();
        for edge in row.vertices[v].out_edges.clone() {
            let Some(&child) = index.get(&edge.target) else {
                continue;
            };
            if !row.vertices[child].in_edges.contains(&edge) {
                row.vertices[child].in_edges.push(edge.clone());
            }
            kept.push(edge);
        }
        row.vertices[v].out_edges = kept;
        let mut kept = Vec::new();
        for edge in row.vertices[v].in_edges.clone() {
            let Some(&parent) = index.get(&edge.source) else {
                continue;
            };
            if !row.vertices[parent].out_edges.contains(&edge) {
                row.vertices[parent].out_edges.push(edge.clone());
            }
            kept.push(edge);
        }
        row.vertices[v].in_edges = kept;
    }
}

/// ml-gbc's `reset_cache` after a change: edges reconciled, masks recomputed in the full form.
pub fn refresh(row: &mut GbcGraphRow) {
    reconcile_edges(row);
    if row.vertices.iter().any(|v| v.sub_masks.is_some()) {
        apply_masks(row);
    }
}

/// Drops a vertex (`GbcGraphFull.drop_vertex`). Unless the vertex is a relation, its parents
/// get shortcut edges to its children labelled with the child edges' texts (`keep_out_edges`)
/// and its children get shortcut edges from its parents labelled with the parent edges' texts
/// (`keep_in_edges`); reconciliation then stores both on both ends. Returns false when no
/// vertex has that id.
pub fn drop_vertex(
    row: &mut GbcGraphRow,
    vertex_id: &str,
    keep_in_edges: bool,
    keep_out_edges: bool,
) -> bool {
    let Some(at) = row.vertices.iter().position(|v| v.vertex_id == vertex_id) else {
        return false;
    };
    let dropped = row.vertices.remove(at);
    let shortcut = dropped.label != "relation";
    let parents: HashSet<&str> = dropped.in_edges.iter().map(|e| e.source.as_str()).collect();
    let children: HashSet<&str> = dropped
        .out_edges
        .iter()
        .map(|e| e.target.as_str())
        .collect();
    for vertex in &mut row.vertices {
        if parents.contains(vertex.vertex_id.as_str()) {
            vertex.out_edges.retain(|e| e.target != vertex_id);
            if shortcut && keep_out_edges {
                for e in &dropped.out_edges {
                    let edge = GbcEdge {
                        source: vertex.vertex_id.clone(),
                        text: e.text.clone(),
                        target: e.target.clone(),
                    };
                    if !vertex.out_edges.contains(&edge) {
                        vertex.out_edges.push(edge);
                    }
                }
            }
        }
        if children.contains(vertex.vertex_id.as_str()) {
            vertex.in_edges.retain(|e| e.source != vertex_id);
            if shortcut && keep_in_edges {
                for e in &dropped.in_edges {
                    let edge = GbcEdge {
                        source: e.source.clone(),
                        text: e.text.clone(),
                        target: vertex.vertex_id.clone(),
                    };
                    if !vertex.in_edges.contains(&edge) {
                        vertex.in_edges.push(edge);
                    }
                }
            }
        }
    }
    refresh(row);
    true
}

/// How [`subgraph`] picks vertices (`GbcGraphFull.get_subgraph`'s arguments).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubgraphOptions {
    pub max_n_vertices: Option<usize>,
    /// Deepest level kept, counted from the roots (the root is level 0).
    pub max_depth: Option<usize>,
    pub mode: TraversalOrder,
    /// Start from this vertex instead of the roots (not with `Random`).
    pub root_id: Option<String>,
    /// Visit each vertex's children in a random order.
    pub edge_shuffling: bool,
}

impl Default for SubgraphOptions {
    fn default() -> Self {
        SubgraphOptions {
            max_n_vertices: None,
            max_depth: None,
            mode: TraversalOrder::Bfs,
            root_id: None,
            edge_shuffling: false,
        }
    }
}

/// `GbcGraphFull.get_subgraph`: the first `max_n_vertices` vertices of the traversal that lie no
/// deeper than `max_depth`, in traversal order, with edges to left-out vertices dropped. With a
/// `root` or edge shuffling the walk starts at that vertex (or the roots) and follows out-edges,
/// depths still counted from the graph's roots. Errors name what is wrong with the options.
pub fn subgraph(
    row: &GbcGraphRow,
    options: &SubgraphOptions,
    seed: u64,
) -> Result<GbcGraphRow, String> {
    let (_, depth) = bfs_order_and_depths(row);
    let deep_enough = |v: usize| match (options.max_depth, depth[v]) {
        (Some(max), Some(d)) => d <= max,
        (Some(_), None) => false,
        (None, _) => true,
    };
    let limit = options.max_n_vertices.unwrap_or(row.vertices.len());
    let picked: Vec<usize> = if options.root_id.is_none() && !options.edge_shuffling {
        order(row, options.mode, seed)
            .into_iter()
            .filter(|&v| deep_enough(v))
            .take(limit)
            .collect()
    } else {
        if options.mode == TraversalOrder::Random {
            return Err("random mode cannot start from a given root or shuffle edges".into());
        }
        let start = match &options.root_id {
            Some(id) => vec![row
                .vertices
                .iter()
                .position(|v| &v.vertex_id == id)
                .ok_or_else(|| format!("no vertex {id:?} to start the subgraph from"))?],
            None => roots(row),
        };
        walk_from(row, start, options, limit, &deep_enough, seed)
    };
    let mut sub = row.clone();
    sub.vertices = picked
        .into_iter()
        .map(|v| row.vertices[v].clone())
        .collect();
    refresh(&mut sub);
    Ok(sub)
}

/// `_get_subgraph_vertices`: a queue (BFS) or stack (DFS) walk from `start`.
fn walk_from(
    row: &GbcGraphRow,
    start: Vec<usize>,
    options: &SubgraphOptions,
    limit: usize,
    deep_enough: &dyn Fn(usize) -> bool,
    seed: u64,
) -> Vec<usize> {
    let children = children(row);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pending: std::collections::VecDeque<usize> = start.into();
    let mut visited = vec![false; row.vertices.len()];
    let mut picked = Vec::new();
    while picked.len() < limit {
        // ml-gbc walks a queue for `bfs` and a stack for every other mode.
        let next = match options.mode {
            TraversalOrder::Bfs => pending.pop_front(),
            _ => pending.pop_back(),
        };
        let Some(v) = next else {
            break;
        };
        if visited[v] {
            continue;
        }
        visited[v] = true;
        if !deep_enough(v) {
            continue;
        }
        picked.push(v);
        let mut edges = children[v].clone();
        if options.mode != TraversalOrder::Bfs {
            edges.reverse();
        }
        if options.edge_shuffling {
            edges.shuffle(&mut rng);
        }
        pending.extend(edges.into_iter().filter(|&c| !visited[c]));
    }
    picked
}

/// How [`caption_concat`] joins a graph's captions (`GbcGraphFull.get_caption_concat`'s
/// arguments, with its defaults).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConcatOptions {
    pub separator: String,
    pub mode: TraversalOrder,
    /// Cut each caption's repeated suffix ([`remove_repeated_suffix`]) first.
    pub remove_repeated_suffix: bool,
}

impl Default for ConcatOptions {
    fn default() -> Self {
        ConcatOptions {
            separator: " ".into(),
            mode: TraversalOrder::Bfs,
            remove_repeated_suffix: false,
        }
    }
}

/// GBC-concat: every caption of every vertex in traversal order, joined by the separator
/// (`GbcGraphFull.get_caption_concat`).
pub fn caption_concat(row: &GbcGraphRow, options: &ConcatOptions, seed: u64) -> String {
    order(row, options.mode, seed)
        .into_iter()
        .flat_map(|v| row.vertices[v].descs.iter().map(|d| d.text.as_str()))
        .map(|text| {
            if options.remove_repeated_suffix {
                remove_repeated_suffix(text)
            } else {
                text
            }
        })
        .collect::<Vec<_>>()
        .join(&options.separator)
}

/// ml-gbc's `remove_repeated_suffix` (`gbc.texts`): the longest `k` (at most half the text)
/// whose last `k` characters repeat the `k` before them; every consecutive copy of that suffix
/// but one is cut. Characters, not bytes, are compared, as Python compares code points (ml-gbc
/// compares rolling hashes of them).
pub fn remove_repeated_suffix(text: &str) -> &str {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let n = chars.len();
    let same = |a: usize, b: usize, k: usize| (0..k).all(|i| chars[a + i].1 == chars[b + i].1);
    let Some(k) = (1..=n / 2).rev().find(|&k| same(n - 2 * k, n - k, k)) else {
        return text;
    };
    let mut copies = 2;
    while k * (copies + 1) <= n && same(n - (copies + 1) * k, n - copies * k, k) {
        copies += 1;
    }
    let keep = n - (copies - 1) * k;
    &text[..chars[keep].0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{GbcBbox, GbcDesc, GbcVertex};

    fn vertex(id: &str, label: &str, parents: &[(&str, &str)], kids: &[(&str, &str)]) -> GbcVertex {
        let edge = |s: &str, t: &str, d: &str| GbcEdge {
            source: s.into(),
            text: t.into(),
            target: d.into(),
        };
        GbcVertex {
            vertex_id: id.into(),
            bbox: GbcBbox {
                left: 0.0,
                top: 0.0,
                right: 1.0,
                bottom: 1.0,
                confidence: None,
            },
            label: label.into(),
            descs: vec![GbcDesc {
                text: format!("caption of {id}"),
                label: "detail".into(),
                extra_json: None,
            }],
            in_edges: parents.iter().map(|(p, t)| edge(p, t, id)).collect(),
            out_edges: kids.iter().map(|(k, t)| edge(id, t, k)).collect(),
            sub_masks: None,
            super_masks: None,
            extra_json: None,
        }
    }

    /// image -> man -> hat, image -> dog, [dog|man] relation under both.
    fn sample() -> GbcGraphRow {
        GbcGraphRow {
            image_id: "img".into(),
            vertices: vec![
                vertex("", "image", &[], &[("man", "man"), ("dog", "dog")]),
                vertex(
                    "man",
                    "entity",
                    &[("", "man")],
                    &[("man_hat", "hat"), ("[dog|man]", "man")],
                ),
                vertex("dog", "entity", &[("", "dog")], &[("[dog|man]", "dog")]),
                vertex("man_hat", "entity", &[("man", "hat")], &[]),
                vertex(
                    "[dog|man]",
                    "relation",
                    &[("man", "man"), ("dog", "dog")],
                    &[],
                ),
            ],
            img_url: None,
            img_path: None,
            original_caption: None,
            short_caption: None,
            detail_caption: None,
            img_size: None,
            mask_inside_threshold: None,
            extra_json: None,
        }
    }

    fn ids(row: &GbcGraphRow, order: &[usize]) -> Vec<String> {
        order
            .iter()
            .map(|&v| row.vertices[v].vertex_id.clone())
            .collect()
    }

    #[test]
    fn orders_follow_ml_gbc() {
        let row = sample();
        let (bfs, depth) = bfs_order_and_depths(&row);
        assert_eq!(ids(&row, &bfs), ["", "man", "dog", "man_hat", "[dog|man]"]);
        assert_eq!(depth, vec![Some(0), Some(1), Some(1), Some(2), Some(2)]);
        assert_eq!(
            ids(&row, &dfs_order(&row)),
            ["", "man", "man_hat", "[dog|man]", "dog"]
        );
    }

    #[test]
    fn topological_order_reverses_the_finishing_order() {
        // Finishing order of the stack walk: man_hat, [dog|man], man, dog, "".
        let row = sample();
        assert_eq!(
            ids(&row, &order(&row, TraversalOrder::Topological, 0)),
            ["", "dog", "man", "[dog|man]", "man_hat"]
        );
    }

    #[test]
    fn repeated_suffixes_are_cut_to_one_copy() {
        assert_eq!(remove_repeated_suffix("abcabc"), "abc");
        assert_eq!(remove_repeated_suffix("123ababab"), "123ab");
        assert_eq!(remove_repeated_suffix("A dog.."), "A dog.");
        // As in ml-gbc, a doubled letter is a repeated suffix too.
        assert_eq!(remove_repeated_suffix("ball"), "bal");
        assert_eq!(remove_repeated_suffix("é é é "), "é ");
        assert_eq!(remove_repeated_suffix("dog"), "dog");
        assert_eq!(remove_repeated_suffix(""), "");
    }

    #[test]
    fn dropping_an_entity_adds_shortcut_edges_on_both_ends() {
        let mut row = sample();
        assert!(drop_vertex(&mut row, "man", true, true));
        let image = &row.vertices[0];
        // Parent side: the child edges' texts; child side: the dropped vertex's in-edge text.
        let out: Vec<(&str, &str)> = image
            .out_edges
            .iter()
            .map(|e| (e.text.as_str(), e.target.as_str()))
            .collect();
        assert_eq!(
            out,
            [
                ("dog", "dog"),
                ("hat", "man_hat"),
                ("man", "[dog|man]"),
                ("man", "man_hat"),
            ]
        );
        let hat = row
            .vertices
            .iter()
            .find(|v| v.vertex_id == "man_hat")
            .unwrap();
        let hat_in: Vec<(&str, &str)> = hat
            .in_edges
            .iter()
            .map(|e| (e.source.as_str(), e.text.as_str()))
            .collect();
        assert_eq!(hat_in, [("", "man"), ("", "hat")]);
        // Every edge is stored on both ends.
        for v in &row.vertices {
            for e in &v.out_edges {
                let t = row
                    .vertices
                    .iter()
                    .find(|w| w.vertex_id == e.target)
                    .unwrap();
                assert!(t.in_edges.contains(e), "{e:?}");
            }
        }
    }

    #[test]
    fn dropping_a_relation_leaves_no_shortcuts() {
        let mut row = sample();
        assert!(drop_vertex(&mut row, "[dog|man]", true, true));
        assert!(row
            .vertices
            .iter()
            .all(|v| v.out_edges.iter().all(|e| !e.target.starts_with('['))));
        assert_eq!(row.vertices[1].out_edges.len(), 1);
        assert!(!drop_vertex(&mut row, "nobody", true, true));
    }

    #[test]
    fn subgraphs_by_size_and_depth() {
        let row = sample();
        let first_three = subgraph(
            &row,
            &SubgraphOptions {
                max_n_vertices: Some(3),
                ..SubgraphOptions::default()
            },
            0,
        )
        .unwrap();
        let names: Vec<&str> = first_three
            .vertices
            .iter()
            .map(|v| v.vertex_id.as_str())
            .collect();
        assert_eq!(names, ["", "man", "dog"]);
        // The relation is gone, so no edge points at it any more.
        assert!(first_three
            .vertices
            .iter()
            .all(|v| v.out_edges.iter().all(|e| e.target != "[dog|man]")));
        let shallow = subgraph(
            &row,
            &SubgraphOptions {
                max_depth: Some(0),
                ..SubgraphOptions::default()
            },
            0,
        )
        .unwrap();
        assert_eq!(shallow.vertices.len(), 1);
        assert!(shallow.vertices[0].out_edges.is_empty());
        let from_man = subgraph(
            &row,
            &SubgraphOptions {
                root_id: Some("man".into()),
                mode: TraversalOrder::Dfs,
                ..SubgraphOptions::default()
            },
            0,
        )
        .unwrap();
        let names: Vec<&str> = from_man
            .vertices
            .iter()
            .map(|v| v.vertex_id.as_str())
            .collect();
        assert_eq!(names, ["man", "man_hat", "[dog|man]"]);
        assert!(subgraph(
            &row,
            &SubgraphOptions {
                root_id: Some("cat".into()),
                ..SubgraphOptions::default()
            },
            0
        )
        .is_err());
    }

    #[test]
    fn concat_in_bfs_order() {
        assert_eq!(
            caption_concat(
                &sample(),
                &ConcatOptions {
                    separator: " | ".into(),
                    ..ConcatOptions::default()
                },
                0
            ),
            "caption of  | caption of man | caption of dog | caption of man_hat | caption of [dog|man]"
        );
    }
}
