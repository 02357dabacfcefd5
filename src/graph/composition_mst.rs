//! GBC composition "hardcode" captions from a Euclidean minimum spanning tree over box centres
//! (apple/ml-gbc `captioning/mllm/composition_mst.py`).
//!
//! The entities of a composition vertex (its children, named by their edge texts such as
//! `tree 1`) are joined by the minimum spanning tree of their box centres. A root is picked among
//! the extremes (leftmost, rightmost, topmost, bottommost, middle in x, middle in y), and a
//! depth-first walk emits, for each node, where it sits in the composition (`"tree 2 is on the
//! left side of the composition"`, when it is at an extreme) and, for each tree edge, the
//! direction from parent to child in one of 8 sectors of 45° (`"tree 1 is to the right of tree
//! 2."`). Diagonal sectors have two wordings (`"to the bottom-right of"` with probability 0.4,
//! else `"below and to the right of"`).
//!
//! Like scipy's `minimum_spanning_tree`, a distance of exactly 0 is no edge, so entities with
//! the same centre end up in separate trees and only the root's tree is described. Ties between
//! equal distances go to the pair with the smaller indices (scipy leaves them to its sort).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::amr::sample::predicate_rng;
use crate::schema::{GbcBbox, GbcDesc, GbcGraphRow};

/// The stage name mixed into the seed of hardcode captions.
pub const STAGE: &str = "gbc-hardcode";

/// One entity of a composition.
#[derive(Clone, Debug, PartialEq)]
pub struct MstEntity {
    pub text: String,
    /// Box relative to the whole image (the MST and the edge directions use it).
    pub bbox: GbcBbox,
    /// Box relative to the composition's box (the "where in the composition" phrases use it).
    pub rel_bbox: GbcBbox,
}

/// How the MST root is chosen (`MSTNode.choose_root_node`, drawn uniformly); the names are
/// ml-gbc's criteria.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RootCriterion {
    Leftmost,
    Rightmost,
    Topmost,
    Bottommost,
    #[value(name = "middle_x")]
    MiddleX,
    #[value(name = "middle_y")]
    MiddleY,
}

impl RootCriterion {
    pub const ALL: [RootCriterion; 6] = [
        RootCriterion::Leftmost,
        RootCriterion::Rightmost,
        RootCriterion::Topmost,
        RootCriterion::Bottommost,
        RootCriterion::MiddleX,
        RootCriterion::MiddleY,
    ];

    /// ml-gbc's name of the criterion.
    pub fn name(self) -> &'static str {
        match self {
            RootCriterion::Leftmost => "leftmost",
            RootCriterion::Rightmost => "rightmost",
            RootCriterion::Topmost => "topmost",
            RootCriterion::Bottommost => "bottommost",
            RootCriterion::MiddleX => "middle_x",
            RootCriterion::MiddleY => "middle_y",
        }
    }
}

fn centre(b: &GbcBbox) -> (f64, f64) {
    ((b.left + b.right) / 2.0, (b.top + b.bottom) / 2.0)
}

/// Edges `(i, j)`, `i < j`, of the minimum spanning forest of the points under Euclidean
/// distance (Kruskal; pairs at distance 0 are not edges), sorted.
pub fn euclidean_mst(points: &[(f64, f64)]) -> Vec<(usize, usize)> {
    let n = points.len();
    let mut pairs: Vec<(f64, usize, usize)> = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            let d = (points[i].0 - points[j].0).hypot(points[i].1 - points[j].1);
            if d > 0.0 {
                pairs.push((d, i, j));
            }
        }
    }
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut edges = Vec::new();
    for (_, i, j) in pairs {
        let (a, b) = (find(&mut parent, i), find(&mut parent, j));
        if a != b {
            parent[a] = b;
            edges.push((i, j));
        }
    }
    edges.sort_unstable();
    edges
}

/// The root index for a criterion: first index of the minimum / maximum centre coordinate, or
/// the element at `n / 2` of the indices stably sorted by it.
pub fn choose_root(boxes: &[GbcBbox], criterion: RootCriterion) -> usize {
    let xs: Vec<f64> = boxes.iter().map(|b| centre(b).0).collect();
    let ys: Vec<f64> = boxes.iter().map(|b| centre(b).1).collect();
    let arg = |values: &[f64], better: fn(f64, f64) -> bool| {
        (0..values.len()).fold(0, |best, i| {
            if better(values[i], values[best]) {
                i
            } else {
                best
            }
        })
    };
    let middle = |values: &[f64]| {
        let mut order: Vec<usize> = (0..values.len()).collect();
        order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        order[values.len() / 2]
    };
    match criterion {
        RootCriterion::Leftmost => arg(&xs, |a, b| a < b),
        RootCriterion::Rightmost => arg(&xs, |a, b| a > b),
        RootCriterion::Topmost => arg(&ys, |a, b| a < b),
        RootCriterion::Bottommost => arg(&ys, |a, b| a > b),
        RootCriterion::MiddleX => middle(&xs),
        RootCriterion::MiddleY => middle(&ys),
    }
}

/// The hardcode captions of the tree rooted at `root`, in ml-gbc's order: a node's position
/// phrase, then for each child (by index) the edge phrase followed by the child's subtree.
/// `short_diagonal` is asked once per edge whether a diagonal uses the short wording.
pub fn hardcode_captions(
    entities: &[MstEntity],
    root: usize,
    mut short_diagonal: impl FnMut() -> bool,
) -> Vec<String> {
    if entities.is_empty() {
        return Vec::new();
    }
    let centres: Vec<(f64, f64)> = entities.iter().map(|e| centre(&e.bbox)).collect();
    let mut adjacent = vec![Vec::new(); entities.len()];
    for (i, j) in euclidean_mst(&centres) {
        adjacent[i].push(j);
        adjacent[j].push(i);
    }
    adjacent.iter_mut().for_each(|a| a.sort_unstable());
    // The tree as (node, children) in DFS order from the root, children by index.
    let mut children = vec![Vec::new(); entities.len()];
    let mut in_tree = vec![false; entities.len()];
    let mut stack = vec![root];
    in_tree[root] = true;
    let mut preorder = Vec::new();
    while let Some(v) = stack.pop() {
        preorder.push(v);
        // Recursive order: a child is claimed when its parent's loop reaches it, so claim all
        // unvisited neighbours in index order now; the tree is the same because it is a tree.
        for &w in &adjacent[v] {
            if !in_tree[w] {
                in_tree[w] = true;
                children[v].push(w);
            }
        }
        stack.extend(children[v].iter().rev());
    }
    let all_rel: Vec<GbcBbox> = preorder
        .iter()
        .map(|&v| entities[v].rel_bbox.clone())
        .collect();
    let mut out = Vec::new();
    describe(
        entities,
        &children,
        root,
        &all_rel,
        &mut short_diagonal,
        &mut out,
    );
    out
}

fn describe(
    entities: &[MstEntity],
    children: &[Vec<usize>],
    node: usize,
    all_rel: &[GbcBbox],
    short_diagonal: &mut dyn FnMut() -> bool,
    out: &mut Vec<String>,
) {
    if let Some(position) = position_phrase(&entities[node].rel_bbox, all_rel) {
        out.push(format!(
            "{} is {position} of the composition",
            entities[node].text
        ));
    }
    for &child in &children[node] {
        let direction = direction_phrase(
            &entities[node].bbox,
            &entities[child].bbox,
            short_diagonal(),
        );
        out.push(format!(
            "{} is {direction} {}.",
            entities[child].text, entities[node].text
        ));
        describe(entities, children, child, all_rel, short_diagonal, out);
    }
}

/// `MSTNode.get_node_description`: where a box sits among all boxes of its composition.
fn position_phrase(b: &GbcBbox, all: &[GbcBbox]) -> Option<&'static str> {
    const MARGIN: f64 = 0.1;
    let (cx, cy) = centre(b);
    let xs: Vec<f64> = all.iter().map(|o| centre(o).0).collect();
    let ys: Vec<f64> = all.iter().map(|o| centre(o).1).collect();
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let horizontal = if cx == min(&xs) && b.right < 0.5 {
        Some("leftmost")
    } else if cx == max(&xs) && b.left > 0.5 {
        Some("rightmost")
    } else if b.left < MARGIN && b.right < 0.5 {
        Some("left")
    } else if b.right > 1.0 - MARGIN && b.left > 0.5 {
        Some("right")
    } else if 0.4 < cx && cx < 0.6 {
        Some("center")
    } else {
        None
    };
    let vertical = if cy == min(&ys) && b.bottom < 0.5 {
        Some("topmost")
    } else if cy == max(&ys) && b.top > 0.5 {
        Some("bottommost")
    } else if b.top < MARGIN && b.bottom < 0.5 {
        Some("top")
    } else if b.bottom > 1.0 - MARGIN && b.top > 0.5 {
        Some("bottom")
    } else if 0.4 < cy && cy < 0.6 {
        Some("center")
    } else {
        None
    };
    Some(match (horizontal, vertical) {
        (Some("leftmost"), Some("topmost" | "top")) | (Some("left"), Some("topmost")) => {
            "in the top left corner"
        }
        (Some("rightmost"), Some("topmost" | "top")) | (Some("right"), Some("topmost")) => {
            "in the top right corner"
        }
        (Some("leftmost"), Some("bottommost" | "bottom")) | (Some("left"), Some("bottommost")) => {
            "in the bottom left corner"
        }
        (Some("rightmost"), Some("bottommost" | "bottom"))
        | (Some("right"), Some("bottommost")) => "in the bottom right corner",
        (Some("leftmost"), _) => "on the left side",
        (Some("rightmost"), _) => "on the right side",
        (_, Some("topmost")) => "at the top",
        (_, Some("bottommost")) => "at the bottom",
        (Some("center"), Some("center")) => "in the center",
        _ => return None,
    })
}

/// `MSTNode.get_edge_description`: the direction from `parent` to `child` in 8 sectors of 45°
/// (image y grows downwards, so 90° is "below").
fn direction_phrase(parent: &GbcBbox, child: &GbcBbox, short_diagonal: bool) -> &'static str {
    let (px, py) = centre(parent);
    let (cx, cy) = centre(child);
    let angle = ((cy - py).atan2(cx - px) * (180.0 / std::f64::consts::PI)).rem_euclid(360.0);
    let diagonal = |short, long| if short_diagonal { short } else { long };
    match angle {
        a if !(22.5..337.5).contains(&a) => "to the right of",
        a if a < 67.5 => diagonal("to the bottom-right of", "below and to the right of"),
        a if a < 112.5 => "below",
        a if a < 157.5 => diagonal("to the bottom-left of", "below and to the left of"),
        a if a < 202.5 => "to the left of",
        a if a < 247.5 => diagonal("to the top-left of", "above and to the left of"),
        a if a < 292.5 => "above",
        _ => diagonal("to the top-right of", "above and to the right of"),
    }
}

/// ml-gbc's `convert_to_relative_bbox`: `inner` in the coordinates of `outer` (unchanged when
/// `outer` has no width or height).
pub fn relative_to(outer: &GbcBbox, inner: &GbcBbox) -> GbcBbox {
    let (w, h) = (outer.right - outer.left, outer.bottom - outer.top);
    if w <= 0.0 || h <= 0.0 {
        return inner.clone();
    }
    GbcBbox {
        left: (inner.left - outer.left) / w,
        top: (inner.top - outer.top) / h,
        right: (inner.right - outer.left) / w,
        bottom: (inner.bottom - outer.top) / h,
        confidence: inner.confidence,
    }
}

/// The entities of a composition vertex: its children in out-edge order, named by edge text.
pub fn composition_entities(row: &GbcGraphRow, vertex: usize) -> Vec<MstEntity> {
    let composition = &row.vertices[vertex];
    composition
        .out_edges
        .iter()
        .filter_map(|e| {
            let child = row.vertices.iter().find(|v| v.vertex_id == e.target)?;
            Some(MstEntity {
                text: e.text.clone(),
                bbox: child.bbox.clone(),
                rel_bbox: relative_to(&composition.bbox, &child.bbox),
            })
        })
        .collect()
}

/// Hardcode captions for one composition vertex with a seeded root criterion and wording.
pub fn composition_captions(row: &GbcGraphRow, vertex: usize, rng: &mut ChaCha8Rng) -> Vec<String> {
    composition_hints(row, vertex, None, rng).map_or_else(Vec::new, |(_, hints)| hints)
}

/// The hints (hardcode captions) of one composition vertex and the root criterion they start
/// from: `criterion`, else one drawn from `rng`; diagonal wordings are drawn from `rng`. `None`
/// when the vertex has no entities.
pub fn composition_hints(
    row: &GbcGraphRow,
    vertex: usize,
    criterion: Option<RootCriterion>,
    rng: &mut ChaCha8Rng,
) -> Option<(RootCriterion, Vec<String>)> {
    let entities = composition_entities(row, vertex);
    if entities.is_empty() {
        return None;
    }
    let criterion =
        criterion.unwrap_or_else(|| RootCriterion::ALL[rng.gen_range(0..RootCriterion::ALL.len())]);
    let boxes: Vec<GbcBbox> = entities.iter().map(|e| e.bbox.clone()).collect();
    let root = choose_root(&boxes, criterion);
    let hints = hardcode_captions(&entities, root, || rng.gen::<f64>() < 0.4);
    Some((criterion, hints))
}

/// Replaces the `hardcode` captions of every composition vertex with freshly generated ones.
/// Randomness comes from (seed, image, vertex id).
pub fn add_hardcode_captions(row: &mut GbcGraphRow, seed: u64) {
    for v in 0..row.vertices.len() {
        if row.vertices[v].label != "composition" {
            continue;
        }
        let mut rng = predicate_rng(seed, &row.image_id, STAGE, &row.vertices[v].vertex_id);
        let captions = composition_captions(row, v, &mut rng);
        let vertex = &mut row.vertices[v];
        vertex.descs.retain(|d| d.label != "hardcode");
        vertex
            .descs
            .extend(captions.into_iter().map(|text| GbcDesc {
                text,
                label: "hardcode".into(),
                extra_json: None,
            }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(left: f64, top: f64, right: f64, bottom: f64) -> GbcBbox {
        GbcBbox {
            left,
            top,
            right,
            bottom,
            confidence: None,
        }
    }

    #[test]
    fn eight_sectors() {
        let origin = b(0.4, 0.4, 0.6, 0.6);
        let at = |dx: f64, dy: f64| b(0.4 + dx, 0.4 + dy, 0.6 + dx, 0.6 + dy);
        let cases = [
            ((0.3, 0.0), "to the right of"),
            ((0.3, 0.3), "below and to the right of"),
            ((0.0, 0.3), "below"),
            ((-0.3, 0.3), "below and to the left of"),
            ((-0.3, 0.0), "to the left of"),
            ((-0.3, -0.3), "above and to the left of"),
            ((0.0, -0.3), "above"),
            ((0.3, -0.3), "above and to the right of"),
            ((0.3, -0.01), "to the right of"),
        ];
        for ((dx, dy), phrase) in cases {
            assert_eq!(
                direction_phrase(&origin, &at(dx, dy), false),
                phrase,
                "{dx},{dy}"
            );
        }
        assert_eq!(
            direction_phrase(&origin, &at(0.3, 0.3), true),
            "to the bottom-right of"
        );
    }

    #[test]
    fn three_in_a_row_from_the_left() {
        let entity = |text: &str, x: f64| MstEntity {
            text: text.into(),
            bbox: b(x, 0.45, x + 0.1, 0.55),
            rel_bbox: b(x, 0.45, x + 0.1, 0.55),
        };
        // Centres at x = 0.05, 0.5, 0.95: the MST is the path 0 - 1 - 2.
        let entities = [
            entity("cup 1", 0.0),
            entity("cup 2", 0.45),
            entity("cup 3", 0.9),
        ];
        let root = choose_root(
            &entities.iter().map(|e| e.bbox.clone()).collect::<Vec<_>>(),
            RootCriterion::Leftmost,
        );
        assert_eq!(root, 0);
        assert_eq!(
            hardcode_captions(&entities, root, || false),
            [
                "cup 1 is on the left side of the composition",
                "cup 2 is to the right of cup 1.",
                "cup 2 is in the center of the composition",
                "cup 3 is to the right of cup 2.",
                "cup 3 is on the right side of the composition",
            ]
        );
        let middle = choose_root(
            &entities.iter().map(|e| e.bbox.clone()).collect::<Vec<_>>(),
            RootCriterion::MiddleX,
        );
        assert_eq!(middle, 1);
    }
}
