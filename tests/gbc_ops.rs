//! GBC graph operations against independent references: ml-gbc's own hardcode captions stored in
//! the fixtures, scipy's minimum spanning tree, and the filtering invariants (every out-edge text
//! occurs in a caption of its vertex; a graph disappears exactly when its image vertex does) on
//! the fixtures and on random graphs.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use capflow::graph::composition_mst::{
    choose_root, composition_entities, euclidean_mst, hardcode_captions, RootCriterion,
};
use capflow::graph::gbc_edit::{subgraph, SubgraphOptions, TraversalOrder};
use capflow::graph::gbc_filter::{filter_graph, mentions, GbcFilterConfig};
use capflow::ingest::{gbc, Row, VecSink};
use capflow::schema::{GbcBbox, GbcDesc, GbcEdge, GbcGraphRow, GbcVertex};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const FIXTURES: [&str; 4] = [
    "gbc/wiki__wiki_gbc_graphs.jsonl",
    "gbc/wiki_pixtral_gdino__wiki_gbc_graphs.jsonl",
    "gbc/wiki_with_clip_scores__wiki_gbc_graphs_with_clip.jsonl",
    "gbc/prompt_gen__library_turtle_frog_steamponk.json",
];

fn read_gbc(path: &Path) -> Vec<GbcGraphRow> {
    let mut sink = VecSink::default();
    gbc::read(path, &mut sink).unwrap();
    assert!(sink.rejected.is_empty());
    sink.rows
        .into_iter()
        .filter_map(|r| match r {
            Row::GbcGraph(g) => Some(g),
            _ => None,
        })
        .collect()
}

fn fixture_graphs() -> Option<Vec<GbcGraphRow>> {
    let dir = common::fixtures_dir()?;
    Some(
        FIXTURES
            .iter()
            .flat_map(|f| read_gbc(&dir.join(f)))
            .collect(),
    )
}

/// The two wordings of each diagonal, mapped to one.
fn canonical(text: &str) -> String {
    text.replace("to the bottom-right of", "below and to the right of")
        .replace("to the bottom-left of", "below and to the left of")
        .replace("to the top-left of", "above and to the left of")
        .replace("to the top-right of", "above and to the right of")
}

#[test]
fn hardcode_captions_reproduce_ml_gbc_output() {
    let Some(graphs) = fixture_graphs() else {
        return;
    };
    let (mut compositions, mut reproduced) = (0, 0);
    let mut failures = Vec::new();
    for row in &graphs {
        for (v, vertex) in row.vertices.iter().enumerate() {
            let stored: Vec<String> = vertex
                .descs
                .iter()
                .filter(|d| d.label == "hardcode")
                .map(|d| canonical(&d.text))
                .collect();
            if vertex.label != "composition" || stored.is_empty() {
                continue;
            }
            compositions += 1;
            let entities = composition_entities(row, v);
            let boxes: Vec<GbcBbox> = entities.iter().map(|e| e.bbox.clone()).collect();
            let found = RootCriterion::ALL.iter().any(|&criterion| {
                let root = choose_root(&boxes, criterion);
                let ours: Vec<String> = hardcode_captions(&entities, root, || false)
                    .iter()
                    .map(|t| canonical(t))
                    .collect();
                ours == stored
            });
            if found {
                reproduced += 1;
            } else {
                failures.push(format!("{} / {}", row.image_id, vertex.vertex_id));
            }
        }
    }
    eprintln!("hardcode captions: {reproduced} of {compositions} compositions reproduced");
    assert!(compositions >= 40, "{compositions}");
    assert_eq!(reproduced, compositions, "not reproduced: {failures:?}");
}

#[test]
fn mst_equals_scipy_on_random_points() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let mut rng_state = 0x2026_1121_u64;
    let mut next = || {
        rng_state = rng_state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng_state >> 11) as f64 / (1u64 << 53) as f64
    };
    let sets: Vec<Vec<(f64, f64)>> = (0..30)
        .map(|k| (0..(2 + k % 12)).map(|_| (next(), next())).collect())
        .collect();
    let script = r#"
import json, sys
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import cdist
out = []
for pts in json.load(sys.stdin):
    m = minimum_spanning_tree(csr_matrix(cdist(pts, pts))).toarray()
    out.append(sorted([int(min(i, j)), int(max(i, j))] for i, j in zip(*np.nonzero(m))))
print(json.dumps(out))
"#;
    let mut child = Command::new(python)
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&sets).unwrap().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "scipy oracle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected: Vec<Vec<(usize, usize)>> = serde_json::from_slice(&output.stdout).unwrap();
    for (points, edges) in sets.iter().zip(expected) {
        assert_eq!(euclidean_mst(points), edges, "{points:?}");
    }
}

/// The invariants a filtered graph must keep.
fn check_filtered(original: &GbcGraphRow, filtered: &GbcGraphRow) {
    let ids: Vec<&str> = filtered
        .vertices
        .iter()
        .map(|v| v.vertex_id.as_str())
        .collect();
    for vertex in &filtered.vertices {
        assert!(!vertex.descs.is_empty(), "{}: no caption", vertex.vertex_id);
        for edge in &vertex.out_edges {
            assert!(
                vertex.descs.iter().any(|d| mentions(&d.text, &edge.text)),
                "{} / {}: edge text {:?} is in no caption {:?}",
                original.image_id,
                vertex.vertex_id,
                edge.text,
                vertex.descs
            );
            assert!(ids.contains(&edge.target.as_str()));
            let target = filtered
                .vertices
                .iter()
                .find(|v| v.vertex_id == edge.target)
                .unwrap();
            assert!(target.in_edges.contains(edge));
        }
        for edge in &vertex.in_edges {
            assert!(ids.contains(&edge.source.as_str()));
        }
        assert!(original
            .vertices
            .iter()
            .any(|v| v.vertex_id == vertex.vertex_id));
    }
}

/// Whether the image vertex survives, computed from its own captions: it needs a short, detail
/// or original caption that passes the caption filter, and no short caption below `short-image`.
fn image_survives(row: &GbcGraphRow, config: &GbcFilterConfig) -> bool {
    let image = row.vertices.iter().find(|v| v.label == "image").unwrap();
    let short_floor = config.min_clip_scores.get("short-image");
    let sunk = image
        .descs
        .iter()
        .any(|d| d.label == "short" && short_floor.is_some_and(|&min| config.score(d) < min));
    !sunk
        && image.descs.iter().any(|d| {
            matches!(d.label.as_str(), "short" | "detail" | "original")
                && config.keeps_caption(d, "image", &mut ChaCha8Rng::seed_from_u64(0))
        })
}

fn thresholds(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn filtering_the_fixtures_keeps_edge_texts_alive() {
    let Some(graphs) = fixture_graphs() else {
        return;
    };
    let configs = [
        GbcFilterConfig::default(),
        GbcFilterConfig {
            min_clip_scores: thresholds(&[
                ("short-composition", 0.2),
                ("detail-entity", 0.22),
                ("relation", 0.25),
                ("composition", 0.3),
            ]),
            ..GbcFilterConfig::default()
        },
        GbcFilterConfig {
            exclude_labels: vec!["hardcode".into(), "short".into(), "relation".into()],
            ..GbcFilterConfig::default()
        },
        GbcFilterConfig {
            min_clip_scores: thresholds(&[("short-image", 0.29), ("detail", 0.3)]),
            ..GbcFilterConfig::default()
        },
    ];
    let (mut dropped_graphs, mut bags) = (0, 0);
    for config in &configs {
        for row in &graphs {
            let (filtered, report) = filter_graph(row, config, 0);
            assert_eq!(
                filtered.is_some(),
                image_survives(row, config),
                "{}",
                row.image_id
            );
            match filtered {
                Some(f) => check_filtered(row, &f),
                None => dropped_graphs += 1,
            }
            bags += report.bag_of_words_added;
        }
    }
    eprintln!("fixture filtering: {dropped_graphs} graphs dropped, {bags} bag-of-words captions");
    assert!(dropped_graphs > 0 && bags > 0, "{dropped_graphs} {bags}");
}

#[test]
fn subgraphs_of_the_fixtures_respect_their_limits() {
    let Some(graphs) = fixture_graphs() else {
        return;
    };
    for row in &graphs {
        for (max_vertices, max_depth, mode) in [
            (Some(5), None, TraversalOrder::Bfs),
            (None, Some(1), TraversalOrder::Dfs),
            (Some(8), Some(2), TraversalOrder::Random),
        ] {
            let options = SubgraphOptions {
                max_n_vertices: max_vertices,
                max_depth,
                mode,
                ..SubgraphOptions::default()
            };
            let sub = subgraph(row, &options, 3).unwrap();
            if let Some(max) = max_vertices {
                assert!(sub.vertices.len() <= max);
            }
            let ids: Vec<&str> = sub.vertices.iter().map(|v| v.vertex_id.as_str()).collect();
            assert!(
                ids.contains(
                    &row.vertices
                        .iter()
                        .find(|v| v.label == "image")
                        .unwrap()
                        .vertex_id
                        .as_str()
                ) || mode == TraversalOrder::Random
            );
            for v in &sub.vertices {
                for e in v.out_edges.iter().chain(&v.in_edges) {
                    assert!(ids.contains(&e.source.as_str()) && ids.contains(&e.target.as_str()));
                }
            }
            if max_depth == Some(1) {
                // The root and its children only: nobody below has a parent in the subgraph
                // that is not the root.
                let root = &sub.vertices[0];
                assert_eq!(root.label, "image");
                for v in &sub.vertices[1..] {
                    assert!(v.in_edges.iter().any(|e| e.source == root.vertex_id));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random graphs
// ---------------------------------------------------------------------------------------------

const WORDS: [&str; 8] = ["dog", "cat", "red hat", "tree", "man", "ball", "sky", "car"];
const DESC_LABELS: [&str; 6] = [
    "short",
    "detail",
    "original",
    "relation",
    "composition",
    "hardcode",
];

#[derive(Clone, Debug)]
struct Spec {
    /// Per non-root vertex: parent index (< own index), edge word, label index.
    vertices: Vec<(usize, usize, usize)>,
    /// Per vertex: captions as (label index, word indices, score).
    captions: Vec<Vec<(usize, Vec<usize>, f64)>>,
    extra_edges: Vec<(usize, usize, usize)>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (1usize..9).prop_flat_map(|n| {
        let vertices = (1..n)
            .map(|i| (0..i, 0..WORDS.len(), 0usize..3))
            .collect::<Vec<_>>();
        let caption = (
            0..DESC_LABELS.len(),
            prop::collection::vec(0..WORDS.len(), 0..4),
            0.0f64..0.4,
        );
        let captions = prop::collection::vec(prop::collection::vec(caption, 0..4), n);
        let extra = prop::collection::vec((0..n, 0..n, 0..WORDS.len()), 0..3);
        (vertices, captions, extra).prop_map(|(vertices, captions, extra_edges)| Spec {
            vertices,
            captions,
            extra_edges,
        })
    })
}

fn build(spec: &Spec) -> GbcGraphRow {
    let n = spec.captions.len();
    let id = |i: usize| {
        if i == 0 {
            String::new()
        } else {
            format!("v{i}")
        }
    };
    let label = |i: usize| match i {
        0 => "image",
        _ => ["entity", "composition", "relation"][spec.vertices[i - 1].2],
    };
    let mut edges: Vec<GbcEdge> = spec
        .vertices
        .iter()
        .enumerate()
        .map(|(k, &(parent, word, _))| GbcEdge {
            source: id(parent),
            text: WORDS[word].into(),
            target: id(k + 1),
        })
        .collect();
    for &(a, b, word) in &spec.extra_edges {
        // Forward edges only (from lower to higher index), never into the root: a DAG.
        if a < b && b != 0 {
            let e = GbcEdge {
                source: id(a),
                text: WORDS[word].into(),
                target: id(b),
            };
            if !edges.contains(&e) {
                edges.push(e);
            }
        }
    }
    let vertices = (0..n)
        .map(|i| GbcVertex {
            vertex_id: id(i),
            bbox: GbcBbox {
                left: 0.0,
                top: 0.0,
                right: 1.0,
                bottom: 1.0,
                confidence: None,
            },
            label: label(i).into(),
            descs: spec.captions[i]
                .iter()
                .map(|(l, words, score)| GbcDesc {
                    text: words.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" and a "),
                    label: DESC_LABELS[*l].into(),
                    extra_json: Some(
                        serde_json::json!({"clip_scores": {"scores": {"openai-l-patch14-336": score}, "truncation": false}})
                            .to_string(),
                    ),
                })
                .collect(),
            in_edges: edges.iter().filter(|e| e.target == id(i)).cloned().collect(),
            out_edges: edges.iter().filter(|e| e.source == id(i)).cloned().collect(),
            sub_masks: None,
            super_masks: None,
            extra_json: None,
        })
        .collect();
    GbcGraphRow {
        image_id: "random".into(),
        vertices,
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn filtering_keeps_edge_texts_and_drops_graphs_with_their_image(
        spec in spec(),
        short_image in prop::option::of(0.0f64..0.4),
        detail in prop::option::of(0.0f64..0.4),
        bag_of_words in any::<bool>(),
    ) {
        let row = build(&spec);
        let mut min_clip_scores = BTreeMap::new();
        if let Some(t) = short_image {
            min_clip_scores.insert("short-image".to_string(), t);
        }
        if let Some(t) = detail {
            min_clip_scores.insert("detail".to_string(), t);
        }
        let config = GbcFilterConfig {
            min_clip_scores,
            clip_names: vec!["openai-l-patch14-336".into()],
            add_bag_of_words: bag_of_words,
            ..GbcFilterConfig::default()
        };
        let (filtered, _) = filter_graph(&row, &config, 0);
        prop_assert_eq!(filtered.is_some(), image_survives(&row, &config));
        if let Some(f) = filtered {
            prop_assert!(f.vertices.iter().any(|v| v.label == "image"));
            check_filtered(&row, &f);
        }
    }
}
