//! GBC graphs as controlled samples: every entity, composition and relation caption of a GBC
//! graph becomes one sample with the box(es) it talks about and its length level, so GBC data
//! mixes, filters and trains like the other methods (METHODS.md §5).
//!
//! - an entity caption's control box is the entity's box, labelled by the text of the edge that
//!   leads to it (`dog`), or by its vertex id when it has no parent;
//! - a composition or relation caption's control boxes are its children's boxes (the members it
//!   relates), labelled by the edge texts (`tree 1`, `tree 2`); without children, its own box;
//! - boxes are in pixels when the image size is known (the record's `img_size`, else the image
//!   row), else in GBC's relative [0, 1] coordinates; coverage is exact either way;
//! - the length level uses 10-word bins like CLID's paragraph levels (1-9 words is level 1), with
//!   everything from 120 words in level 13, since GBC captions run to paragraphs.
//!
//! ```
//! use capflow::augment::gbc::{samples, GbcSampleConfig};
//! use capflow::augment::ImageAnnotations;
//! # let line = r#"{"vertices": [{"vertex_id": "", "bbox": {"left": 0.0, "top": 0.0, "right": 1.0, "bottom": 1.0, "confidence": null}, "label": "image", "descs": [{"text": "A dog.", "label": "short"}], "in_edges": [], "out_edges": [{"source": "", "text": "dog", "target": "dog"}]}, {"vertex_id": "dog", "bbox": {"left": 0.25, "top": 0.5, "right": 0.5, "bottom": 1.0, "confidence": 0.9}, "label": "entity", "descs": [{"text": "A brown dog lying on grass.", "label": "detail"}], "in_edges": [{"source": "", "text": "dog", "target": "dog"}], "out_edges": []}], "img_path": "dog.jpg", "img_size": [400, 200]}"#;
//! let row = capflow::graph::gbc::row_from_record(serde_json::from_str(line).unwrap(), || "x".into()).unwrap();
//! let mut image = ImageAnnotations::new("dog.jpg");
//! image.gbc_graphs.push(row);
//! let rows = samples(&image, &GbcSampleConfig::default(), 0);
//! assert_eq!(rows.len(), 1);
//! assert_eq!(rows[0].control_labels, ["dog"]);
//! assert_eq!((rows[0].control_boxes[0].x1, rows[0].control_boxes[0].y2), (100.0, 200.0));
//! assert_eq!(rows[0].coverage, 12.5);
//! ```

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::clid::PARAGRAPH_LEVELS;
use super::control::{coverage_percent, word_count};
use super::ImageAnnotations;
use crate::amr::sample::predicate_rng;
use crate::graph::gbc_edit::{
    caption_concat, order, subgraph, ConcatOptions, SubgraphOptions, TraversalOrder,
};
use crate::graph::gbc_filter::{filter_graph, GbcFilterConfig};
use crate::schema::{BoxXyxy, GbcBbox, GbcGraphRow, GbcVertex, Provenance, SampleRow};

/// The `method` of GBC samples.
pub const METHOD: &str = "gbc";

/// GBC sample settings, read from a recipe's `[gbc]` table.
///
/// Each graph is first filtered (`[gbc.filter]`, ml-gbc's `GbcClipFilter` options and defaults;
/// a graph whose image vertex goes gives no samples), then cut to a subgraph
/// (`[gbc.subgraph]`, `GbcGraphFull.get_subgraph`'s options), each only when its table is
/// given; the samples come from what is left.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GbcSampleConfig {
    /// Vertex labels whose captions become samples.
    pub vertex_labels: Vec<String>,
    /// Caption labels left out: template (`hardcode`) and word-list (`bagofwords`) captions
    /// (ml-gbc's own filter leaves out `hardcode` by default).
    pub exclude_caption_labels: Vec<String>,
    /// Also one GBC-concat sample per graph, with the boxes of every entity: `true` joins every
    /// caption in breadth-first order by a space; a `[gbc.concat]` table sets
    /// `GbcGraphFull.get_caption_concat`'s `separator`, `mode` and `remove_repeated_suffix`.
    pub concat: ConcatSetting,
    /// Caption filtering before the samples are taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<GbcFilterConfig>,
    /// Subgraph extraction after filtering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subgraph: Option<SubgraphOptions>,
}

impl Default for GbcSampleConfig {
    fn default() -> Self {
        GbcSampleConfig {
            vertex_labels: vec!["entity".into(), "composition".into(), "relation".into()],
            exclude_caption_labels: vec!["hardcode".into(), "bagofwords".into()],
            concat: ConcatSetting::On(false),
            filter: None,
            subgraph: None,
        }
    }
}

/// `concat = true|false`, or a `[gbc.concat]` table (which turns concatenation on).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ConcatSetting {
    On(bool),
    With(ConcatOptions),
}

impl ConcatSetting {
    /// The concatenation options when concatenation is on.
    pub fn options(&self) -> Option<ConcatOptions> {
        match self {
            ConcatSetting::On(false) => None,
            ConcatSetting::On(true) => Some(ConcatOptions::default()),
            ConcatSetting::With(options) => Some(options.clone()),
        }
    }
}

/// The stage names mixed into the seeds of filtering and subgraph extraction.
pub const FILTER_STAGE: &str = "gbc-filter";
pub const SUBGRAPH_STAGE: &str = "gbc-subgraph";
pub const CONCAT_STAGE: &str = "gbc-concat";

/// The seed of one stage's random choices on graph `g` (counted per image) of an image: from
/// (run seed, image, stage, graph index) only, so any number of workers, and `capflow gbc`
/// given the same seed, make the same choices.
pub fn graph_seed(seed: u64, image_id: &str, stage: &str, g: usize) -> u64 {
    predicate_rng(seed, image_id, stage, &g.to_string()).gen()
}

impl GbcSampleConfig {
    /// Graph `g` of `image` after the configured filter and subgraph extraction; `None` when
    /// filtering drops it or it has no vertex `root_id` to take the subgraph from. The seeds
    /// come from (seed, image, graph index).
    pub fn prepared(
        &self,
        image: &ImageAnnotations,
        g: usize,
        row: &GbcGraphRow,
        seed: u64,
    ) -> Option<GbcGraphRow> {
        let draw = |stage: &str| graph_seed(seed, &image.image_id, stage, g);
        let mut graph = match &self.filter {
            Some(filter) => filter_graph(row, filter, draw(FILTER_STAGE)).0?,
            None => row.clone(),
        };
        if let Some(options) = &self.subgraph {
            // The options are validated with the spec, so only a missing root is refused.
            graph = subgraph(&graph, options, draw(SUBGRAPH_STAGE)).ok()?;
        }
        Some(graph)
    }

    /// Whether the options can work on any graph (a subgraph from a named root cannot be taken
    /// in random mode).
    pub fn validate(&self) -> std::result::Result<(), String> {
        if let Some(options) = &self.subgraph {
            let walks = options.root_id.is_some() || options.edge_shuffling;
            if walks && options.mode == TraversalOrder::Random {
                return Err(
                    "[gbc.subgraph]: mode \"random\" cannot start from root_id or shuffle edges"
                        .into(),
                );
            }
        }
        if let Some(filter) = &self.filter {
            if let Some((key, p)) = filter
                .random_filtering_probs
                .iter()
                .find(|(_, p)| !(0.0..=1.0).contains(*p))
            {
                return Err(format!(
                    "[gbc.filter]: random_filtering_probs.{key} = {p} is not a probability"
                ));
            }
        }
        Ok(())
    }
}

/// Length level of a GBC caption: 10-word bins, the last (13) open-ended; 0 for no words.
pub fn length_level(words: usize) -> i32 {
    match words {
        0 => 0,
        n => ((n / 10) as i32 + 1).min(PARAGRAPH_LEVELS),
    }
}

/// Image size in pixels: the record's `img_size` (width, height) when set, else the image's.
fn image_size(row: &GbcGraphRow, image: &ImageAnnotations) -> Option<(f64, f64)> {
    match row.img_size.as_deref() {
        Some([w, h]) if *w > 0 && *h > 0 => Some((*w as f64, *h as f64)),
        _ => image.size(),
    }
}

fn to_box(b: &GbcBbox, size: Option<(f64, f64)>) -> BoxXyxy {
    let (w, h) = size.unwrap_or((1.0, 1.0));
    BoxXyxy::new(b.left * w, b.top * h, b.right * w, b.bottom * h)
}

/// The control boxes, labels and node ids of a vertex's captions (module docs).
fn controls(
    row: &GbcGraphRow,
    vertex: &GbcVertex,
    size: Option<(f64, f64)>,
) -> (Vec<BoxXyxy>, Vec<String>, Vec<String>) {
    let mut boxes = Vec::new();
    let mut labels = Vec::new();
    let mut ids = vec![vertex.vertex_id.clone()];
    if matches!(vertex.label.as_str(), "composition" | "relation") {
        for edge in &vertex.out_edges {
            if let Some(child) = row.vertices.iter().find(|v| v.vertex_id == edge.target) {
                boxes.push(to_box(&child.bbox, size));
                labels.push(edge.text.clone());
                ids.push(child.vertex_id.clone());
            }
        }
    }
    if boxes.is_empty() {
        boxes.push(to_box(&vertex.bbox, size));
        labels.push(
            vertex
                .in_edges
                .first()
                .map_or_else(|| vertex.vertex_id.clone(), |e| e.text.clone()),
        );
    }
    (boxes, labels, ids)
}

#[allow(clippy::too_many_arguments)]
fn sample(
    image: &ImageAnnotations,
    sample_id: String,
    text: String,
    (boxes, labels, node_ids): (Vec<BoxXyxy>, Vec<String>, Vec<String>),
    size: Option<(f64, f64)>,
    source: String,
    subgraph: Option<String>,
    seed: u64,
) -> SampleRow {
    let words = word_count(&text);
    let (w, h) = size.unwrap_or((1.0, 1.0));
    SampleRow {
        sample_id,
        image_id: image.image_id.clone(),
        split: image.split().to_string(),
        method: METHOD.to_string(),
        coverage: coverage_percent(&boxes, w, h),
        control_boxes: boxes,
        control_labels: labels,
        length_level: length_level(words),
        word_count: words as i32,
        verbs: Vec::new(),
        quality: Vec::new(),
        provenance: Provenance {
            source_caption_ids: vec![source],
            node_ids,
            subgraph,
            seed,
        },
        text,
    }
}

/// The GBC samples of one image: per graph, per vertex in stored order, per caption. Sample ids
/// are `gbc:<image>:<graph>:<vertex id>:<caption index>`; the source caption id is
/// `<vertex id>#<caption index>`. Graphs are filtered and cut first when so configured
/// ([`GbcSampleConfig::prepared`]); `seed` seeds their random choices and is recorded.
pub fn samples(image: &ImageAnnotations, config: &GbcSampleConfig, seed: u64) -> Vec<SampleRow> {
    let mut out = Vec::new();
    for (g, original) in image.gbc_graphs.iter().enumerate() {
        let Some(prepared) = config.prepared(image, g, original, seed) else {
            continue;
        };
        let row = &prepared;
        let size = image_size(row, image);
        for vertex in &row.vertices {
            if !config.vertex_labels.contains(&vertex.label) {
                continue;
            }
            for (k, desc) in vertex.descs.iter().enumerate() {
                if config.exclude_caption_labels.contains(&desc.label)
                    || word_count(&desc.text) == 0
                {
                    continue;
                }
                out.push(sample(
                    image,
                    format!("{METHOD}:{}:{g}:{}:{k}", image.image_id, vertex.vertex_id),
                    desc.text.clone(),
                    controls(row, vertex, size),
                    size,
                    format!("{}#{k}", vertex.vertex_id),
                    None,
                    seed,
                ));
            }
        }
        if let Some(options) = config.concat.options() {
            let concat_seed = graph_seed(seed, &image.image_id, CONCAT_STAGE, g);
            let text = caption_concat(row, &options, concat_seed);
            if word_count(&text) == 0 {
                continue;
            }
            let order = order(row, options.mode, concat_seed);
            let entities: Vec<&GbcVertex> = order
                .iter()
                .map(|&v| &row.vertices[v])
                .filter(|v| v.label == "entity")
                .collect();
            let controls = (
                entities.iter().map(|v| to_box(&v.bbox, size)).collect(),
                entities
                    .iter()
                    .map(|v| {
                        v.in_edges
                            .first()
                            .map_or_else(|| v.vertex_id.clone(), |e| e.text.clone())
                    })
                    .collect(),
                order
                    .iter()
                    .map(|&v| row.vertices[v].vertex_id.clone())
                    .collect(),
            );
            out.push(sample(
                image,
                format!("{METHOD}:{}:{g}:concat", image.image_id),
                text,
                controls,
                size,
                "concat".to_string(),
                Some(options.mode.name().to_string()),
                seed,
            ));
        }
    }
    out
}

impl super::method::Method for GbcSampleConfig {
    fn stage(&self) -> &str {
        "gbc"
    }

    fn rows_in(&self, image: &ImageAnnotations) -> usize {
        image.gbc_graphs.len()
    }

    fn samples(&self, image: &ImageAnnotations, seed: u64) -> crate::error::Result<Vec<SampleRow>> {
        Ok(samples(image, self, seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ten_word_bins_up_to_thirteen() {
        assert_eq!(length_level(0), 0);
        assert_eq!(length_level(9), 1);
        assert_eq!(length_level(10), 2);
        assert_eq!(length_level(129), 13);
        assert_eq!(length_level(500), 13);
    }
}
