//! CLID self-generated varying-length captions from scene graphs (METHODS.md §2, the CLID paper
//! §3.1).
//!
//! One caption is one saliency-guided walk over a scene graph:
//!
//! 1. the first object is drawn from the saliency distribution;
//! 2. depth-first search from it, where each object visits up to `k` of its children (objects it
//!    has a relationship to), drawn without replacement by their renormalised saliency; a child
//!    that was already visited is mentioned again ("the boy") but not walked through, so there are
//!    no loops;
//! 3. when a branch ends and less than `T_sal` of the total saliency has been explored, the walk
//!    jumps to an unvisited object drawn by saliency (an "and" in captions, a new sentence in
//!    paragraphs);
//! 4. every object gets its noun and a random number (up to `n_a`) of its attributes on its first
//!    mention, every relationship its predicate;
//! 5. a random number of the last visited objects is cut off.
//!
//! The caption's control signal is its length level (10-word bins: 1-9, 10-19, … 60-69 for
//! captions, 13 bins up to 129 for paragraphs) and the boxes of every object it mentions.
//!
//! Saliency is the scene graph's per-object `saliency` when every object has one; otherwise a
//! proxy ([`SaliencyProxy`]). The paper sums a saliency map inside each box; with a uniform map
//! that sum is the box area, which is the default proxy.
//!
//! # Determinism
//!
//! Each sample draws from its own stream, [`predicate_rng`]`(seed, image, "clid",
//! "<graph>/<sample>")`, and objects and relationships are walked in id order, so a sample
//! depends only on (seed, image, graph, sample index) and the graph's content.
//!
//! ```
//! use capflow::augment::clid::{generate, ClidConfig};
//! use capflow::schema::{BoxXyxy, SceneGraphRow, SceneObject, SceneRelationship};
//!
//! let object = |id, name: &str| SceneObject {
//!     object_id: id, names: vec![name.into()], bbox: BoxXyxy::new(0.0, 0.0, 10.0, 10.0),
//!     attributes: vec![], synsets: vec![], saliency: Some(if id == 1 { 1.0 } else { 0.0 }),
//! };
//! let graph = SceneGraphRow {
//!     image_id: "1".into(), width: None, height: None,
//!     objects: vec![object(1, "boy"), object(2, "dog")],
//!     relationships: vec![SceneRelationship {
//!         relationship_id: 1, predicate: "feeding".into(), subject_id: 1, object_id: 2,
//!         synsets: vec![],
//!     }],
//! };
//! let config = ClidConfig { cut_last_objects: false, ..ClidConfig::default() };
//! let mut rng = capflow::amr::sample::predicate_rng(7, "1", "clid", "0/0");
//! let caption = generate(&graph, &config, &mut rng).unwrap();
//! assert_eq!(caption.text, "a boy feeding a dog.");
//! ```

use std::collections::BTreeMap;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use super::control::{coverage_percent, word_count};
use super::detections::looks_plural;
use super::ImageAnnotations;
use crate::amr::sample::predicate_rng;
use crate::schema::{BoxXyxy, Provenance, SampleRow, SceneGraphRow};

/// The `method` of CLID samples.
pub const METHOD: &str = "clid";
/// The stage name mixed into the sampling seed.
pub const STAGE: &str = "clid";
/// Caption levels: 7 bins of 10 words, the last one 60-69 (the paper's Table 1).
pub const CAPTION_LEVELS: i32 = 7;
/// Paragraph levels: 13 uniform bins up to 129 words (the paper's §4, Stanford paragraphs).
pub const PARAGRAPH_LEVELS: i32 = 13;

/// How object saliency is estimated when the scene graph carries none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SaliencyProxy {
    /// Box area: the paper's sum of pixel saliency inside the box for a uniform saliency map.
    Area,
    /// Box area × (1 + number of relationships the object takes part in): favours objects the
    /// graph says something about.
    AreaDegree,
}

/// CLID generator settings, read from a recipe's `[clid]` table. Defaults are the paper's
/// (`T_sal` = 80 %, k = 2, `n_a` = 4).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClidConfig {
    /// k: children visited per object.
    pub children: usize,
    /// `T_sal`: share of the total saliency to explore before the walk may end, in [0, 1].
    pub saliency_threshold: f64,
    /// `n_a`: most attributes given to one object.
    pub max_attributes: usize,
    /// Captions generated per scene graph (identical texts are kept once).
    pub samples_per_graph: usize,
    /// Paragraph mode: jumps start a new sentence; 13 length levels up to 129 words.
    pub paragraph: bool,
    /// Cut a random number of the last visited objects.
    pub cut_last_objects: bool,
    /// Saliency estimate for graphs without per-object saliency.
    pub saliency_proxy: SaliencyProxy,
}

impl Default for ClidConfig {
    fn default() -> Self {
        ClidConfig {
            children: 2,
            saliency_threshold: 0.8,
            max_attributes: 4,
            samples_per_graph: 5,
            paragraph: false,
            cut_last_objects: true,
            saliency_proxy: SaliencyProxy::Area,
        }
    }
}

/// CLID's length level of a caption of `words` words: `words / 10 + 1`, or `None` when the
/// caption is empty or longer than the last level (69 words for captions, 129 for paragraphs).
pub fn length_level(words: usize, paragraph: bool) -> Option<i32> {
    let levels = if paragraph {
        PARAGRAPH_LEVELS
    } else {
        CAPTION_LEVELS
    };
    let level = (words / 10) as i32 + 1;
    (words > 0 && level <= levels).then_some(level)
}

/// The most words a caption of the given mode may have.
fn max_words(paragraph: bool) -> usize {
    let levels = if paragraph {
        PARAGRAPH_LEVELS
    } else {
        CAPTION_LEVELS
    };
    levels as usize * 10 - 1
}

/// One generated caption before it becomes a sample.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratedCaption {
    pub text: String,
    /// Indices (into the graph's `objects`) of the mentioned objects, in first-mention order.
    pub objects: Vec<usize>,
    /// Predicates of the relationships the caption uses, in order, without repeats.
    pub predicates: Vec<String>,
    /// The walk: `id` for a start, `subject -[predicate]-> object` for an edge, `;` between jumps.
    pub path: String,
}

/// How a step is joined to the text before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Joint {
    /// The first step, or the first child of an object.
    Plain,
    /// A later child of the same object: "and".
    Sibling,
    /// A jump to a new part of the graph: "and", or a new sentence in paragraphs.
    Jump,
}

/// One mention of an object in walk order: the start of a component or an edge to a child.
#[derive(Clone, Copy, Debug)]
struct Step {
    joint: Joint,
    /// (relationship index, subject object index) for an edge step.
    edge: Option<(usize, usize)>,
    object: usize,
    first_mention: bool,
}

/// The scene graph in id order with its adjacency.
struct Walkable<'a> {
    graph: &'a SceneGraphRow,
    /// Object indices sorted by object id.
    saliency: Vec<f64>,
    /// Per object: children (object index) with the relationships leading to each, children in
    /// order of their first relationship id.
    children: Vec<Vec<(usize, Vec<usize>)>>,
}

impl<'a> Walkable<'a> {
    fn new(graph: &'a SceneGraphRow, proxy: SaliencyProxy) -> Self {
        let index: BTreeMap<i64, usize> = graph
            .objects
            .iter()
            .enumerate()
            .rev() // the first object with an id wins
            .map(|(i, o)| (o.object_id, i))
            .collect();
        let mut relationships: Vec<usize> = (0..graph.relationships.len()).collect();
        relationships.sort_by_key(|&r| graph.relationships[r].relationship_id);
        let mut children: Vec<Vec<(usize, Vec<usize>)>> = vec![Vec::new(); graph.objects.len()];
        let mut degree = vec![0usize; graph.objects.len()];
        for r in relationships {
            let rel = &graph.relationships[r];
            let (Some(&s), Some(&o)) = (index.get(&rel.subject_id), index.get(&rel.object_id))
            else {
                continue;
            };
            if s == o {
                continue;
            }
            degree[s] += 1;
            degree[o] += 1;
            match children[s].iter_mut().find(|(child, _)| *child == o) {
                Some((_, rels)) => rels.push(r),
                None => children[s].push((o, vec![r])),
            }
        }
        let saliency = normalised_saliency(graph, proxy, &degree);
        Walkable {
            graph,
            saliency,
            children,
        }
    }

    /// Object indices in object-id order (the order every draw walks candidates in).
    fn id_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.graph.objects.len()).collect();
        order.sort_by_key(|&i| (self.graph.objects[i].object_id, i));
        order
    }
}

/// Per-object saliency summing to 1: the given saliency when every object has a usable one,
/// else the proxy; uniform when everything is zero.
fn normalised_saliency(graph: &SceneGraphRow, proxy: SaliencyProxy, degree: &[usize]) -> Vec<f64> {
    let given: Option<Vec<f64>> = graph
        .objects
        .iter()
        .map(|o| o.saliency.filter(|s| s.is_finite() && *s >= 0.0))
        .collect();
    let raw = given.unwrap_or_else(|| {
        graph
            .objects
            .iter()
            .zip(degree)
            .map(|(o, &d)| match proxy {
                SaliencyProxy::Area => o.bbox.area(),
                SaliencyProxy::AreaDegree => o.bbox.area() * (1 + d) as f64,
            })
            .collect()
    });
    let total: f64 = raw.iter().sum();
    if total > 0.0 && total.is_finite() {
        raw.iter().map(|s| s / total).collect()
    } else {
        vec![1.0 / raw.len().max(1) as f64; raw.len()]
    }
}

/// Draws one of `candidates` with probability proportional to `weight`, uniformly when all
/// weights are zero. `candidates` must not be empty.
fn draw(rng: &mut ChaCha8Rng, candidates: &[usize], weight: impl Fn(usize) -> f64) -> usize {
    let total: f64 = candidates.iter().map(|&c| weight(c)).sum();
    if total <= 0.0 || !total.is_finite() {
        return rng.gen_range(0..candidates.len());
    }
    let target = rng.gen::<f64>() * total;
    let mut cumulative = 0.0;
    for (i, &c) in candidates.iter().enumerate() {
        cumulative += weight(c);
        if target < cumulative && weight(c) > 0.0 {
            return i;
        }
    }
    // Rounding left the target at the very end: the last candidate with weight.
    candidates
        .iter()
        .rposition(|&c| weight(c) > 0.0)
        .unwrap_or(candidates.len() - 1)
}

/// Generates one caption from a scene graph, or `None` when the graph has no objects or no
/// caption fits the longest length level.
pub fn generate(
    graph: &SceneGraphRow,
    config: &ClidConfig,
    rng: &mut ChaCha8Rng,
) -> Option<GeneratedCaption> {
    if graph.objects.is_empty() {
        return None;
    }
    let walkable = Walkable::new(graph, config.saliency_proxy);
    let steps = walk(&walkable, config, rng);
    let attributes = choose_attributes(graph, &steps, config.max_attributes, rng);
    let mut keep = steps.len();
    if config.cut_last_objects && steps.len() > 1 {
        keep -= rng.gen_range(0..steps.len());
    }
    let limit = max_words(config.paragraph);
    while keep > 0 {
        let caption = render(graph, &steps[..keep], &attributes, config.paragraph);
        if word_count(&caption.text) <= limit {
            return Some(caption);
        }
        keep -= 1;
    }
    None
}

/// The saliency-guided depth-first walk with jumps (module docs, steps 1-3).
fn walk(walkable: &Walkable, config: &ClidConfig, rng: &mut ChaCha8Rng) -> Vec<Step> {
    let n = walkable.graph.objects.len();
    let order = walkable.id_order();
    let saliency = &walkable.saliency;
    let mut visited = vec![false; n];
    let mut explored = 0.0;
    let mut steps = Vec::new();
    loop {
        let unvisited: Vec<usize> = order.iter().copied().filter(|&i| !visited[i]).collect();
        if unvisited.is_empty() {
            break;
        }
        let start = unvisited[draw(rng, &unvisited, |i| saliency[i])];
        steps.push(Step {
            joint: if steps.is_empty() {
                Joint::Plain
            } else {
                Joint::Jump
            },
            edge: None,
            object: start,
            first_mention: true,
        });
        visited[start] = true;
        explored += saliency[start];
        // Explicit stack: (object, its chosen (child, relationship) pairs, next to visit).
        let mut stack = vec![(
            start,
            choose_children(walkable, start, config.children, rng),
            0,
        )];
        while let Some((subject, chosen, next)) = stack.last_mut() {
            let Some(&(child, relationship)) = chosen.get(*next) else {
                stack.pop();
                continue;
            };
            let subject = *subject;
            let joint = if *next == 0 {
                Joint::Plain
            } else {
                Joint::Sibling
            };
            *next += 1;
            let first_mention = !visited[child];
            steps.push(Step {
                joint,
                edge: Some((relationship, subject)),
                object: child,
                first_mention,
            });
            if first_mention {
                visited[child] = true;
                explored += saliency[child];
                let grandchildren = choose_children(walkable, child, config.children, rng);
                stack.push((child, grandchildren, 0));
            }
        }
        if explored >= config.saliency_threshold {
            break;
        }
    }
    steps
}

/// Up to `k` children of `object` drawn without replacement by renormalised saliency, each with
/// one of the relationships leading to it (uniformly when there are several).
fn choose_children(
    walkable: &Walkable,
    object: usize,
    k: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<(usize, usize)> {
    let mut candidates: Vec<usize> = (0..walkable.children[object].len()).collect();
    let mut chosen = Vec::new();
    while chosen.len() < k && !candidates.is_empty() {
        let pick = draw(rng, &candidates, |c| {
            walkable.saliency[walkable.children[object][c].0]
        });
        let (child, relationships) = &walkable.children[object][candidates.remove(pick)];
        let relationship = relationships[rng.gen_range(0..relationships.len())];
        chosen.push((*child, relationship));
    }
    chosen
}

/// For every first-mentioned object, a random number (0..=`n_a`) of its distinct attributes, in
/// their stored order.
fn choose_attributes(
    graph: &SceneGraphRow,
    steps: &[Step],
    max_attributes: usize,
    rng: &mut ChaCha8Rng,
) -> BTreeMap<usize, Vec<String>> {
    let mut chosen = BTreeMap::new();
    for step in steps.iter().filter(|s| s.first_mention) {
        let object = &graph.objects[step.object];
        let noun = noun(object);
        let mut available: Vec<String> = Vec::new();
        for attribute in &object.attributes {
            let a = clean(attribute);
            if !a.is_empty() && a != noun && !available.contains(&a) {
                available.push(a);
            }
        }
        let count = rng.gen_range(0..=max_attributes.min(available.len()));
        let mut picked: Vec<usize> =
            rand::seq::index::sample(rng, available.len(), count).into_vec();
        picked.sort_unstable();
        chosen.insert(
            step.object,
            picked.into_iter().map(|i| available[i].clone()).collect(),
        );
    }
    chosen
}

/// Lower case, single spaces, letters, digits, hyphens and apostrophes only: VG names such as
/// `trees on roadside.` must not end a sentence inside a caption.
fn clean(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '\'' {
                c
            } else {
                ' '
            }
        })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn noun(object: &crate::schema::SceneObject) -> String {
    object
        .names
        .iter()
        .map(|n| clean(n))
        .find(|n| !n.is_empty())
        .unwrap_or_else(|| "object".to_string())
}

/// "a young man", "an apple", "trees", or "the man" on a re-mention.
fn noun_phrase(
    graph: &SceneGraphRow,
    step: &Step,
    attributes: &BTreeMap<usize, Vec<String>>,
) -> String {
    let noun = noun(&graph.objects[step.object]);
    if !step.first_mention {
        return format!("the {noun}");
    }
    let mut words: Vec<&str> = attributes
        .get(&step.object)
        .map(|a| a.iter().map(String::as_str).collect())
        .unwrap_or_default();
    words.push(&noun);
    let phrase = words.join(" ");
    if looks_plural(&noun) {
        return phrase;
    }
    let vowel = phrase
        .chars()
        .next()
        .is_some_and(|c| matches!(c, 'a' | 'e' | 'i' | 'o' | 'u'));
    format!("{} {phrase}", if vowel { "an" } else { "a" })
}

/// The caption text of a walk prefix.
fn render(
    graph: &SceneGraphRow,
    steps: &[Step],
    attributes: &BTreeMap<usize, Vec<String>>,
    paragraph: bool,
) -> GeneratedCaption {
    let mut sentences: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut objects: Vec<usize> = Vec::new();
    let mut predicates: Vec<String> = Vec::new();
    let mut path: Vec<String> = Vec::new();
    for step in steps {
        match step.joint {
            Joint::Plain => {}
            Joint::Sibling => words.push("and".into()),
            Joint::Jump if paragraph => sentences.push(std::mem::take(&mut words)),
            Joint::Jump => words.push("and".into()),
        }
        let id = graph.objects[step.object].object_id;
        match step.edge {
            Some((relationship, subject)) => {
                let predicate = clean(&graph.relationships[relationship].predicate);
                let predicate = if predicate.is_empty() {
                    "with".to_string()
                } else {
                    predicate
                };
                words.push(predicate.clone());
                path.push(format!(
                    "{} -[{predicate}]-> {id}",
                    graph.objects[subject].object_id
                ));
                if !predicates.contains(&predicate) {
                    predicates.push(predicate);
                }
            }
            None => {
                if !path.is_empty() {
                    path.push(";".into());
                }
                path.push(id.to_string());
            }
        }
        words.push(noun_phrase(graph, step, attributes));
        if !objects.contains(&step.object) {
            objects.push(step.object);
        }
    }
    sentences.push(words);
    let text = sentences
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| {
            let sentence = s.join(" ");
            if paragraph {
                capitalise(&sentence) + "."
            } else {
                sentence + "."
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    GeneratedCaption {
        text,
        objects,
        predicates,
        path: path.join(" "),
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The CLID samples of one image: `samples_per_graph` captions per scene graph, identical texts
/// kept once, in (graph, sample) order. Control boxes and labels are the mentioned objects' boxes
/// and nouns in first-mention order; coverage uses the image size from the image row or the scene
/// graph (0 when neither knows it).
pub fn samples(image: &ImageAnnotations, config: &ClidConfig, seed: u64) -> Vec<SampleRow> {
    let mut out: Vec<SampleRow> = Vec::new();
    for (g, graph) in image.scene_graphs.iter().enumerate() {
        let size = image.size().or(match (graph.width, graph.height) {
            (Some(w), Some(h)) if w > 0 && h > 0 => Some((w as f64, h as f64)),
            _ => None,
        });
        for s in 0..config.samples_per_graph {
            let mut rng = predicate_rng(seed, &image.image_id, STAGE, &format!("{g}/{s}"));
            let Some(caption) = generate(graph, config, &mut rng) else {
                continue;
            };
            if out.iter().any(|row| row.text == caption.text) {
                continue;
            }
            let words = word_count(&caption.text);
            let Some(level) = length_level(words, config.paragraph) else {
                continue;
            };
            let boxes: Vec<BoxXyxy> = caption
                .objects
                .iter()
                .map(|&i| graph.objects[i].bbox)
                .collect();
            out.push(SampleRow {
                image: None,
                sample_id: format!("{METHOD}:{}:{g}:{s}", image.image_id),
                image_id: image.image_id.clone(),
                split: image.split().to_string(),
                method: METHOD.to_string(),
                coverage: size.map_or(0.0, |(w, h)| coverage_percent(&boxes, w, h)),
                control_labels: caption
                    .objects
                    .iter()
                    .map(|&i| noun(&graph.objects[i]))
                    .collect(),
                control_boxes: boxes,
                length_level: level,
                word_count: words as i32,
                verbs: caption.predicates,
                quality: Vec::new(),
                provenance: Provenance {
                    source_caption_ids: Vec::new(),
                    node_ids: caption
                        .objects
                        .iter()
                        .map(|&i| graph.objects[i].object_id.to_string())
                        .collect(),
                    subgraph: Some(caption.path),
                    seed,
                },
                text: caption.text,
            });
        }
    }
    out
}

impl super::method::Method for ClidConfig {
    fn stage(&self) -> &str {
        "clid"
    }

    fn rows_in(&self, image: &ImageAnnotations) -> usize {
        image.scene_graphs.len()
    }

    fn samples(&self, image: &ImageAnnotations, seed: u64) -> crate::error::Result<Vec<SampleRow>> {
        Ok(samples(image, self, seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{SceneObject, SceneRelationship};

    fn object(id: i64, name: &str, saliency: f64) -> SceneObject {
        SceneObject {
            object_id: id,
            names: vec![name.into()],
            bbox: BoxXyxy::new(id as f64, 0.0, id as f64 + 10.0, 10.0),
            attributes: vec![],
            synsets: vec![],
            saliency: Some(saliency),
        }
    }

    fn relationship(id: i64, subject: i64, predicate: &str, object: i64) -> SceneRelationship {
        SceneRelationship {
            relationship_id: id,
            predicate: predicate.into(),
            subject_id: subject,
            object_id: object,
            synsets: vec![],
        }
    }

    fn graph(objects: Vec<SceneObject>, relationships: Vec<SceneRelationship>) -> SceneGraphRow {
        SceneGraphRow {
            image_id: "img".into(),
            width: Some(100),
            height: Some(100),
            objects,
            relationships,
        }
    }

    fn exact() -> ClidConfig {
        ClidConfig {
            cut_last_objects: false,
            max_attributes: 0,
            saliency_threshold: 1.0,
            ..ClidConfig::default()
        }
    }

    #[test]
    fn levels_are_ten_word_bins() {
        assert_eq!(length_level(0, false), None);
        assert_eq!(length_level(1, false), Some(1));
        assert_eq!(length_level(9, false), Some(1));
        assert_eq!(length_level(10, false), Some(2));
        assert_eq!(length_level(69, false), Some(7));
        assert_eq!(length_level(70, false), None);
        assert_eq!(length_level(129, true), Some(13));
        assert_eq!(length_level(130, true), None);
    }

    #[test]
    fn revisits_say_the_and_do_not_loop() {
        // man -> bike -> street -> man is a cycle; the man is the only possible start.
        let g = graph(
            vec![
                object(1, "man", 1.0),
                object(2, "bike", 0.0),
                object(3, "helmet", 0.0),
                object(4, "street", 0.0),
            ],
            vec![
                relationship(10, 1, "riding", 2),
                relationship(11, 1, "wearing", 3),
                relationship(12, 2, "on", 4),
                relationship(13, 4, "near", 1),
            ],
        );
        let expected = [
            "a man riding a bike on a street near the man and wearing a helmet.",
            "a man wearing a helmet and riding a bike on a street near the man.",
        ];
        let mut seen = std::collections::BTreeSet::new();
        for s in 0..40 {
            let mut rng = predicate_rng(1, "img", STAGE, &s.to_string());
            let caption = generate(&g, &exact(), &mut rng).unwrap();
            assert!(
                expected.contains(&caption.text.as_str()),
                "{}",
                caption.text
            );
            assert_eq!(caption.objects.len(), 4);
            seen.insert(caption.text);
        }
        assert_eq!(seen.len(), 2, "both child orders occur");
    }

    #[test]
    fn jumps_until_the_saliency_threshold() {
        // Three unconnected objects; T_sal = 0.8 needs two or three of them.
        let g = graph(
            vec![
                object(1, "a", 0.5),
                object(2, "b", 0.3),
                object(3, "c", 0.2),
            ],
            vec![],
        );
        let config = ClidConfig {
            saliency_threshold: 0.8,
            ..exact()
        };
        let saliency = |name: &str| match name {
            "a" => 0.5,
            "b" => 0.3,
            _ => 0.2,
        };
        for s in 0..60 {
            let mut rng = predicate_rng(3, "img", STAGE, &s.to_string());
            let caption = generate(&g, &config, &mut rng).unwrap();
            let nouns: Vec<&str> = caption
                .text
                .trim_end_matches('.')
                .split(" and ")
                .map(|np| np.trim_start_matches("an ").trim_start_matches("a "))
                .collect();
            let explored: Vec<f64> = nouns.iter().map(|n| saliency(n)).collect();
            let total: f64 = explored.iter().sum();
            let before_last: f64 = explored[..explored.len() - 1].iter().sum();
            assert!(total >= 0.8 - 1e-12, "{}", caption.text);
            assert!(before_last < 0.8 - 1e-12, "{}", caption.text);
        }
    }

    #[test]
    fn paragraphs_start_a_sentence_at_each_jump() {
        let g = graph(vec![object(1, "dog", 0.5), object(2, "cat", 0.5)], vec![]);
        let config = ClidConfig {
            paragraph: true,
            ..exact()
        };
        let mut rng = predicate_rng(0, "img", STAGE, "0");
        let text = generate(&g, &config, &mut rng).unwrap().text;
        assert!(text == "A dog. A cat." || text == "A cat. A dog.", "{text}");
    }

    #[test]
    fn attributes_and_articles() {
        let mut apple = object(1, "apple", 1.0);
        apple.attributes = vec!["red".into(), "Shiny".into(), "red".into(), "apple".into()];
        let g = graph(
            vec![apple, object(2, "leaves", 0.0)],
            vec![relationship(5, 1, "has", 2)],
        );
        let config = ClidConfig {
            max_attributes: 4,
            ..exact()
        };
        let mut texts = std::collections::BTreeSet::new();
        for s in 0..60 {
            let mut rng = predicate_rng(9, "img", STAGE, &s.to_string());
            texts.insert(generate(&g, &config, &mut rng).unwrap().text);
        }
        let expected: std::collections::BTreeSet<String> = [
            "an apple has leaves.",
            "a red apple has leaves.",
            "a shiny apple has leaves.",
            "a red shiny apple has leaves.",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(texts, expected);
    }

    #[test]
    fn cuts_keep_a_prefix_of_the_walk() {
        let g = graph(
            vec![
                object(1, "man", 1.0),
                object(2, "dog", 0.0),
                object(3, "ball", 0.0),
            ],
            vec![
                relationship(1, 1, "walking", 2),
                relationship(2, 2, "chasing", 3),
            ],
        );
        let config = ClidConfig {
            cut_last_objects: true,
            ..exact()
        };
        let mut texts = std::collections::BTreeSet::new();
        for s in 0..60 {
            let mut rng = predicate_rng(5, "img", STAGE, &s.to_string());
            texts.insert(generate(&g, &config, &mut rng).unwrap().text);
        }
        let expected: std::collections::BTreeSet<String> = [
            "a man.",
            "a man walking a dog.",
            "a man walking a dog chasing a ball.",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(texts, expected);
    }

    #[test]
    fn proxy_saliency_is_normalised_box_area() {
        let mut big = object(1, "sky", 0.0);
        big.saliency = None;
        big.bbox = BoxXyxy::new(0.0, 0.0, 30.0, 10.0);
        let mut small = object(2, "bird", 0.0);
        small.saliency = None;
        small.bbox = BoxXyxy::new(0.0, 0.0, 10.0, 10.0);
        let g = graph(vec![big, small], vec![relationship(1, 2, "in", 1)]);
        assert_eq!(
            normalised_saliency(&g, SaliencyProxy::Area, &[1, 1]),
            vec![0.75, 0.25]
        );
        // Area x (1 + degree): 300 * 2 and 100 * 3.
        let w = normalised_saliency(&g, SaliencyProxy::AreaDegree, &[1, 2]);
        assert!((w[0] - 600.0 / 900.0).abs() < 1e-15 && (w[1] - 300.0 / 900.0).abs() < 1e-15);
    }
}
