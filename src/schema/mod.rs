//! Arrow schemas of every table capflow reads and writes, typed rows, and schema JSON export.
//!
//! The code is the source of truth: `schemas/*.json` are generated from [`TableKind::schema`] by
//! `capflow schema --write schemas/` and a test fails when the two drift.
//!
//! Every table carries `image_id` (a string: COCO and Visual Genome ids are printed in decimal,
//! Flickr30k ids are file stems, GBC images are keyed by `img_path` or `img_url`) so that all
//! records about one image can be routed to one worker.
//!
//! Rows are plain `serde` structs; [`rows_to_batch`] turns a slice of them into a RecordBatch of the
//! table's schema and [`batch_to_rows`] reads them back.

mod json;

pub use json::{schema_fingerprint, schema_to_json};

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::{Error, Result};

/// The names of the splits capflow's rows carry, as Hugging Face `datasets` names them.
pub const SPLITS: [&str; 3] = ["train", "validation", "test"];

/// `split` under the name capflow gives it: `val`, `valid` and `dev` (other datasets' names for
/// the validation split, and what datasets written by earlier capflow versions hold) become
/// `validation`; every other name is kept.
pub fn canonical_split(split: &str) -> &str {
    match split {
        "val" | "valid" | "dev" => "validation",
        other => other,
    }
}

/// Whether a row of `split` is among the `selected` splits (empty: all), by their
/// [`canonical_split`] names: `val` selects `validation` and the other way round.
pub fn split_selected(selected: &[String], split: &str) -> bool {
    selected.is_empty()
        || selected
            .iter()
            .any(|s| canonical_split(s) == canonical_split(split))
}

/// The tables of a capflow dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableKind {
    Images,
    Captions,
    Groundings,
    Detections,
    Amrs,
    SceneGraphs,
    GbcGraphs,
    Samples,
    Rejected,
}

impl TableKind {
    /// Every table, in the order they are documented and exported.
    pub const ALL: [TableKind; 9] = [
        TableKind::Images,
        TableKind::Captions,
        TableKind::Groundings,
        TableKind::Detections,
        TableKind::Amrs,
        TableKind::SceneGraphs,
        TableKind::GbcGraphs,
        TableKind::Samples,
        TableKind::Rejected,
    ];

    /// The table's name as used in file names (`data/<name>-...parquet`, `schemas/<name>.json`).
    pub fn name(self) -> &'static str {
        match self {
            TableKind::Images => "images",
            TableKind::Captions => "captions",
            TableKind::Groundings => "groundings",
            TableKind::Detections => "detections",
            TableKind::Amrs => "amrs",
            TableKind::SceneGraphs => "scene_graphs",
            TableKind::GbcGraphs => "gbc_graphs",
            TableKind::Samples => "samples",
            TableKind::Rejected => "rejected",
        }
    }

    /// Parses a table name as written by [`TableKind::name`].
    pub fn from_name(name: &str) -> Option<TableKind> {
        TableKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The Arrow schema of this table.
    pub fn schema(self) -> SchemaRef {
        let schema = Schema::new(match self {
            TableKind::Images => images_fields(),
            TableKind::Captions => captions_fields(),
            TableKind::Groundings => groundings_fields(),
            TableKind::Detections => detections_fields(),
            TableKind::Amrs => amrs_fields(),
            TableKind::SceneGraphs => scene_graphs_fields(),
            TableKind::GbcGraphs => gbc_graphs_fields(),
            TableKind::Samples => samples_fields(),
            TableKind::Rejected => rejected_fields(),
        });
        Arc::new(match self {
            // Hugging Face `datasets` reads column feature types from this schema metadata
            // (Parquet keeps it): the samples' `image` column loads as images.
            TableKind::Samples => schema.with_metadata(std::collections::HashMap::from([(
                HF_METADATA_KEY.to_string(),
                SAMPLES_HF_FEATURES.to_string(),
            )])),
            _ => schema,
        })
    }
}

fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, false)
}

fn utf8_opt(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

fn list_of(name: &str, item: DataType, nullable: bool) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new("item", item, true))),
        nullable,
    )
}

/// A box in absolute pixel coordinates, `x1 <= x2`, `y1 <= y2`, 0-based (Flickr30k's 1-based
/// coordinates are shifted on read).
pub fn box_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("x1", DataType::Float64, false),
        Field::new("y1", DataType::Float64, false),
        Field::new("x2", DataType::Float64, false),
        Field::new("y2", DataType::Float64, false),
    ]))
}

fn images_fields() -> Vec<Field> {
    vec![
        utf8("image_id"),
        utf8("dataset"),
        utf8("split"),
        utf8_opt("file_name"),
        utf8_opt("url"),
        Field::new("width", DataType::Int32, true),
        Field::new("height", DataType::Int32, true),
    ]
}

fn captions_fields() -> Vec<Field> {
    vec![
        utf8("image_id"),
        utf8("caption_id"),
        utf8("dataset"),
        utf8("split"),
        Field::new("caption_index", DataType::Int32, false),
        utf8("text"),
    ]
}

fn groundings_fields() -> Vec<Field> {
    vec![
        utf8("image_id"),
        utf8("caption_id"),
        utf8("phrase_id"),
        utf8("phrase"),
        list_of("phrase_types", DataType::Utf8, false),
        Field::new("token_start", DataType::Int32, false),
        Field::new("token_end", DataType::Int32, false),
        list_of("boxes", box_type(), false),
        Field::new("is_scene", DataType::Boolean, false),
        Field::new("no_box", DataType::Boolean, false),
        Field::new("not_visual", DataType::Boolean, false),
    ]
}

fn detections_fields() -> Vec<Field> {
    vec![
        utf8("image_id"),
        utf8("detection_id"),
        utf8("source"),
        utf8("label"),
        Field::new("score", DataType::Float64, true),
        Field::new("box", box_type(), false),
        list_of("attributes", DataType::Utf8, false),
        list_of("feature", DataType::Float32, true),
    ]
}

fn amrs_fields() -> Vec<Field> {
    vec![
        utf8("image_id"),
        utf8("graph_id"),
        utf8_opt("caption_id"),
        utf8_opt("sentence"),
        list_of("tokens", DataType::Utf8, true),
        utf8("alignment_flavour"),
        list_of(
            "metadata",
            DataType::Struct(Fields::from(vec![utf8("key"), utf8("value")])),
            false,
        ),
        utf8("penman"),
    ]
}

fn scene_graphs_fields() -> Vec<Field> {
    let object = DataType::Struct(Fields::from(vec![
        Field::new("object_id", DataType::Int64, false),
        list_of("names", DataType::Utf8, false),
        Field::new("box", box_type(), false),
        list_of("attributes", DataType::Utf8, false),
        list_of("synsets", DataType::Utf8, false),
        Field::new("saliency", DataType::Float64, true),
    ]));
    let relationship = DataType::Struct(Fields::from(vec![
        Field::new("relationship_id", DataType::Int64, false),
        utf8("predicate"),
        Field::new("subject_id", DataType::Int64, false),
        Field::new("object_id", DataType::Int64, false),
        list_of("synsets", DataType::Utf8, false),
    ]));
    vec![
        utf8("image_id"),
        Field::new("width", DataType::Int32, true),
        Field::new("height", DataType::Int32, true),
        list_of("objects", object, false),
        list_of("relationships", relationship, false),
    ]
}

/// The ml-gbc record nesting (`GbcGraph` / `GbcGraphFull`), kept field for field. Fields that only
/// some variants of the format carry are nullable; anything outside the known nesting is kept
/// verbatim as JSON in `extra_json` (per record) and `extra_json` (per vertex and per description)
/// so that a round trip reproduces every field.
fn gbc_graphs_fields() -> Vec<Field> {
    let bbox = DataType::Struct(Fields::from(vec![
        Field::new("left", DataType::Float64, false),
        Field::new("top", DataType::Float64, false),
        Field::new("right", DataType::Float64, false),
        Field::new("bottom", DataType::Float64, false),
        Field::new("confidence", DataType::Float64, true),
    ]));
    let desc = DataType::Struct(Fields::from(vec![
        utf8("text"),
        utf8("label"),
        utf8_opt("extra_json"),
    ]));
    let edge = DataType::Struct(Fields::from(vec![
        utf8("source"),
        utf8("text"),
        utf8("target"),
    ]));
    let vertex = DataType::Struct(Fields::from(vec![
        utf8("vertex_id"),
        Field::new("bbox", bbox, false),
        utf8("label"),
        list_of("descs", desc, false),
        list_of("in_edges", edge.clone(), false),
        list_of("out_edges", edge, false),
        list_of("sub_masks", DataType::Utf8, true),
        list_of("super_masks", DataType::Utf8, true),
        utf8_opt("extra_json"),
    ]));
    vec![
        utf8("image_id"),
        list_of("vertices", vertex, false),
        utf8_opt("img_url"),
        utf8_opt("img_path"),
        utf8_opt("original_caption"),
        utf8_opt("short_caption"),
        utf8_opt("detail_caption"),
        list_of("img_size", DataType::Int64, true),
        Field::new("mask_inside_threshold", DataType::Float64, true),
        utf8_opt("extra_json"),
    ]
}

fn samples_fields() -> Vec<Field> {
    let quality = DataType::Struct(Fields::from(vec![
        utf8("name"),
        Field::new("value", DataType::Float64, false),
    ]));
    let provenance = DataType::Struct(Fields::from(vec![
        list_of("source_caption_ids", DataType::Utf8, false),
        list_of("node_ids", DataType::Utf8, false),
        utf8_opt("subgraph"),
        // Int64, not UInt64: Delta Lake, Spark and polars' Delta reader have no unsigned types.
        // A spec's seed is at most `i64::MAX`.
        Field::new("seed", DataType::Int64, false),
    ]));
    vec![
        utf8("sample_id"),
        utf8("image_id"),
        utf8("split"),
        utf8("method"),
        utf8("text"),
        list_of("control_boxes", box_type(), false),
        list_of("control_labels", DataType::Utf8, false),
        Field::new("coverage", DataType::Float64, false),
        Field::new("length_level", DataType::Int32, false),
        Field::new("word_count", DataType::Int32, false),
        list_of("verbs", DataType::Utf8, false),
        list_of("quality", quality, false),
        Field::new("provenance", provenance, false),
        Field::new("image", sample_image_type(), true),
    ]
}

/// Schema metadata key Hugging Face `datasets` reads column feature types from.
pub const HF_METADATA_KEY: &str = "huggingface";
/// The samples table's feature types for `datasets`: its `image` column is an `Image`.
pub const SAMPLES_HF_FEATURES: &str = r#"{"info":{"features":{"image":{"_type":"Image"}}}}"#;

/// A sample's own image: Hugging Face `datasets`' `Image` storage (`struct<bytes: binary,
/// path: string>`, both nullable), so that `datasets` loads the column as images.
pub fn sample_image_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]))
}

fn rejected_fields() -> Vec<Field> {
    vec![
        utf8("format"),
        utf8("source_file"),
        utf8("record"),
        Field::new("line", DataType::Int64, true),
        Field::new("byte_offset", DataType::Int64, true),
        utf8("reason"),
        utf8("excerpt"),
    ]
}

/// A box in absolute pixel coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct BoxXyxy {
    pub x1: f64,
    pub y1: f64,
    pub x2: f64,
    pub y2: f64,
}

impl BoxXyxy {
    pub fn new(x1: f64, y1: f64, x2: f64, y2: f64) -> Self {
        BoxXyxy { x1, y1, x2, y2 }
    }

    pub fn area(&self) -> f64 {
        (self.x2 - self.x1).max(0.0) * (self.y2 - self.y1).max(0.0)
    }

    pub fn intersection(&self, other: &BoxXyxy) -> f64 {
        let w = self.x2.min(other.x2) - self.x1.max(other.x1);
        let h = self.y2.min(other.y2) - self.y1.max(other.y1);
        w.max(0.0) * h.max(0.0)
    }

    pub fn iou(&self, other: &BoxXyxy) -> f64 {
        let inter = self.intersection(other);
        let union = self.area() + other.area() - inter;
        if union <= 0.0 {
            0.0
        } else {
            inter / union
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageRow {
    pub image_id: String,
    pub dataset: String,
    pub split: String,
    pub file_name: Option<String>,
    pub url: Option<String>,
    pub width: Option<i32>,
    pub height: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaptionRow {
    pub image_id: String,
    /// `<image_id>#<caption_index>` unless the source has its own id (COCO annotation ids).
    pub caption_id: String,
    pub dataset: String,
    pub split: String,
    pub caption_index: i32,
    /// The caption with any markup removed; tokens are separated by single spaces where the
    /// source was tokenized (Flickr30k Entities).
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroundingRow {
    pub image_id: String,
    pub caption_id: String,
    /// Flickr30k Entities chain id (`EN#<id>`'s id) or a COCO-Entities class.
    pub phrase_id: String,
    pub phrase: String,
    pub phrase_types: Vec<String>,
    /// Token span `[token_start, token_end)` over the caption's whitespace tokens.
    pub token_start: i32,
    pub token_end: i32,
    pub boxes: Vec<BoxXyxy>,
    pub is_scene: bool,
    pub no_box: bool,
    pub not_visual: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DetectionRow {
    pub image_id: String,
    pub detection_id: String,
    /// Where the detection came from: `coco-instances`, `coco-entities`, `visual-genome`, a
    /// detector name, ...
    pub source: String,
    pub label: String,
    pub score: Option<f64>,
    #[serde(rename = "box")]
    pub bbox: BoxXyxy,
    pub attributes: Vec<String>,
    pub feature: Option<Vec<f32>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetadataEntry {
    pub key: String,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AmrRow {
    pub image_id: String,
    pub graph_id: String,
    pub caption_id: Option<String>,
    pub sentence: Option<String>,
    pub tokens: Option<Vec<String>>,
    /// `isi` (`~e.N`), `jamr` (`~N` or `# ::alignments`/`# ::node` lines), or `none`.
    pub alignment_flavour: String,
    pub metadata: Vec<MetadataEntry>,
    /// The graph in PENMAN notation, metadata lines included, exactly as read.
    pub penman: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SceneObject {
    pub object_id: i64,
    pub names: Vec<String>,
    #[serde(rename = "box")]
    pub bbox: BoxXyxy,
    pub attributes: Vec<String>,
    pub synsets: Vec<String>,
    /// Object saliency in [0, 1] when a saliency input was given.
    pub saliency: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SceneRelationship {
    pub relationship_id: i64,
    pub predicate: String,
    pub subject_id: i64,
    pub object_id: i64,
    pub synsets: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SceneGraphRow {
    pub image_id: String,
    pub width: Option<i32>,
    pub height: Option<i32>,
    pub objects: Vec<SceneObject>,
    pub relationships: Vec<SceneRelationship>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GbcBbox {
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
    pub confidence: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GbcDesc {
    pub text: String,
    pub label: String,
    /// Fields of the description other than `text` and `label`, as a JSON object, in source order.
    pub extra_json: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GbcEdge {
    pub source: String,
    pub text: String,
    pub target: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GbcVertex {
    pub vertex_id: String,
    pub bbox: GbcBbox,
    pub label: String,
    pub descs: Vec<GbcDesc>,
    pub in_edges: Vec<GbcEdge>,
    pub out_edges: Vec<GbcEdge>,
    pub sub_masks: Option<Vec<String>>,
    pub super_masks: Option<Vec<String>>,
    pub extra_json: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GbcGraphRow {
    pub image_id: String,
    pub vertices: Vec<GbcVertex>,
    pub img_url: Option<String>,
    pub img_path: Option<String>,
    pub original_caption: Option<String>,
    pub short_caption: Option<String>,
    pub detail_caption: Option<String>,
    pub img_size: Option<Vec<i64>>,
    pub mask_inside_threshold: Option<f64>,
    pub extra_json: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualityScore {
    pub name: String,
    pub value: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Provenance {
    pub source_caption_ids: Vec<String>,
    pub node_ids: Vec<String>,
    /// The sampled subgraph (PENMAN for SSA, a vertex path for CLID and GBC), when there is one.
    pub subgraph: Option<String>,
    pub seed: u64,
}

/// One controlled caption sample: the output row of every augmentation method.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRow {
    pub sample_id: String,
    pub image_id: String,
    pub split: String,
    /// `original`, `ssa`, `clid`, `cutswap`, `relatedness`, `gbc`.
    pub method: String,
    pub text: String,
    pub control_boxes: Vec<BoxXyxy>,
    pub control_labels: Vec<String>,
    /// Percent of image pixels inside the union of the control boxes, in [0, 100].
    pub coverage: f64,
    pub length_level: i32,
    pub word_count: i32,
    pub verbs: Vec<String>,
    pub quality: Vec<QualityScore>,
    pub provenance: Provenance,
    /// An image made with the sample (CutSwap's swapped image); `None` for a sample of the
    /// dataset's own image.
    #[serde(default)]
    pub image: Option<SampleImage>,
}

/// An image made with a sample: the encoded file (PNG) and its file name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleImage {
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
    /// `<sample_id>.png`: where the image goes when the dataset's images are written as files.
    pub path: String,
}

/// A record that could not be read, with where it was and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RejectedRow {
    /// The reader's format name (`flickr30k-entities`, `penman`, ...).
    pub format: String,
    pub source_file: String,
    /// A human-readable locator: `line 12`, `annotations[3]`, `byte 1024`, ...
    pub record: String,
    pub line: Option<i64>,
    pub byte_offset: Option<i64>,
    pub reason: String,
    /// At most [`EXCERPT_LIMIT`] bytes of the raw record.
    pub excerpt: String,
}

/// Longest raw excerpt kept in a rejected record.
pub const EXCERPT_LIMIT: usize = 512;

/// Cuts `raw` to at most [`EXCERPT_LIMIT`] bytes on a character boundary.
pub fn excerpt(raw: &str) -> String {
    if raw.len() <= EXCERPT_LIMIT {
        return raw.to_string();
    }
    let mut end = EXCERPT_LIMIT;
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &raw[..end])
}

/// A row type that belongs to one table.
pub trait TableRow: Serialize + DeserializeOwned {
    const KIND: TableKind;
}

macro_rules! table_row {
    ($row:ty, $kind:expr) => {
        impl TableRow for $row {
            const KIND: TableKind = $kind;
        }
    };
}

table_row!(ImageRow, TableKind::Images);
table_row!(CaptionRow, TableKind::Captions);
table_row!(GroundingRow, TableKind::Groundings);
table_row!(DetectionRow, TableKind::Detections);
table_row!(AmrRow, TableKind::Amrs);
table_row!(SceneGraphRow, TableKind::SceneGraphs);
table_row!(GbcGraphRow, TableKind::GbcGraphs);
table_row!(SampleRow, TableKind::Samples);
table_row!(RejectedRow, TableKind::Rejected);

/// Builds one RecordBatch of `R`'s table from typed rows (serde_arrow: serde straight into
/// Arrow builders of the table's schema).
pub fn rows_to_batch<R: TableRow>(rows: &[R]) -> Result<RecordBatch> {
    let schema = R::KIND.schema();
    let context = || format!("encoding {} rows", R::KIND.name());
    let batch = serde_arrow::to_record_batch(schema.fields(), &rows).map_err(|e| {
        Error::arrow(
            context(),
            arrow::error::ArrowError::ExternalError(Box::new(e)),
        )
    })?;
    // The table's schema metadata ([`HF_METADATA_KEY`]) too.
    batch
        .with_schema(schema)
        .map_err(|e| Error::arrow(context(), e))
}

/// Reads typed rows back from a RecordBatch of `R`'s table (serde_arrow: straight from the
/// arrays).
pub fn batch_to_rows<R: TableRow>(batch: &RecordBatch) -> Result<Vec<R>> {
    serde_arrow::from_record_batch(batch).map_err(|e| Error::Invalid {
        what: format!("{} batch", R::KIND.name()),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_splits_go_by_one_name() {
        for (given, canonical) in [
            ("train", "train"),
            ("val", "validation"),
            ("valid", "validation"),
            ("dev", "validation"),
            ("validation", "validation"),
            ("test", "test"),
            ("unknown", "unknown"),
            ("captions", "captions"),
        ] {
            assert_eq!(canonical_split(given), canonical, "{given}");
        }
        let selected = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(split_selected(&[], "val"));
        assert!(split_selected(&selected(&["val"]), "validation"));
        assert!(split_selected(&selected(&["validation"]), "val"));
        assert!(split_selected(&selected(&["test", "dev"]), "validation"));
        assert!(!split_selected(&selected(&["train"]), "validation"));
        assert!(!split_selected(&selected(&["test"]), "val"));
    }
}
