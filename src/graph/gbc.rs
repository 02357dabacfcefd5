//! GBC (Graph-Based Captioning) graphs: the ml-gbc record model, its exact JSON form, mask
//! relations and graph statistics.
//!
//! A GBC record is apple/ml-gbc's `GbcGraph` (or `GbcGraphFull`) dumped by pydantic: a list of
//! vertices (`image`, `entity`, `composition`, `relation`), each with a relative bbox, captions
//! (`descs`) and the edges to its parents and children stored on both ends. capflow holds a record
//! as a [`GbcGraphRow`]; [`row_from_record`] and [`record_from_row`] convert between the row and the
//! JSON record so that every field survives: fields capflow does not model (`full_label`,
//! `clip_scores`, ...) ride along verbatim in the `extra_json` columns.
//!
//! The record is written back in ml-gbc's own field order (the declaration order of its pydantic
//! models, which is what `model_dump` produces) and in the text form of Python's `json.dumps`
//! ([`python_json`]), so that a file read and written again is byte for byte the file ml-gbc wrote.
//! What cannot be reproduced byte for byte is documented on [`record_from_row`].

mod parquet;
mod python_json;

pub use self::parquet::{read_parquet_records, record_batch_to_records, write_parquet};
pub use self::python_json::{python_float_repr, python_json, python_json_indented};

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::schema::{GbcBbox, GbcDesc, GbcEdge, GbcGraphRow, GbcVertex};

/// ml-gbc's default for `GbcGraphFull.mask_inside_threshold`.
pub const DEFAULT_MASK_INSIDE_THRESHOLD: f64 = 0.85;

/// The vertex labels ml-gbc's `GbcVertex.label` accepts.
pub const VERTEX_LABELS: [&str; 4] = ["image", "entity", "composition", "relation"];

/// The caption labels ml-gbc's `Description.label` accepts.
pub const DESC_LABELS: [&str; 7] = [
    "short",
    "relation",
    "composition",
    "detail",
    "original",
    "hardcode",
    "bagofwords",
];

/// Fields of ml-gbc's `Caption` (the full-form description) after `text` and `label`, in
/// declaration order. Parquet files written by pandas/pyarrow sort struct fields by name; the
/// Parquet reader puts these back in this order so a Parquet record dumps like the JSONL one.
pub(crate) const CAPTION_FIELD_ORDER: [&str; 6] = [
    "text",
    "label",
    "full_label",
    "statistics",
    "clip_scores",
    "toxicity_scores",
];
/// `CaptionStatistics` field order.
pub(crate) const CAPTION_STATISTICS_FIELD_ORDER: [&str; 2] = ["n_words", "n_tokens"];
/// `ClipScores` field order.
pub(crate) const CLIP_SCORES_FIELD_ORDER: [&str; 2] = ["scores", "truncation"];

// ---------------------------------------------------------------------------------------------
// JSON record -> row
// ---------------------------------------------------------------------------------------------

/// Converts one ml-gbc JSON record into a [`GbcGraphRow`], validating it the way ml-gbc's pydantic
/// models would (required fields, field types, label vocabularies) plus the graph invariants
/// capflow relies on: vertex ids are unique and exactly one vertex is labelled `image` (the root;
/// its id is `""` in captioned graphs and `"image"` in generated ones) and it has no parents.
///
/// `fallback_image_id` names the record when it has neither `img_path` nor `img_url`
/// (`<file>:<record index>`). The error is the reason the record is rejected.
pub fn row_from_record(
    record: Value,
    fallback_image_id: impl FnOnce() -> String,
) -> std::result::Result<GbcGraphRow, String> {
    let Value::Object(mut map) = record else {
        return Err(format!(
            "expected a JSON object (a GBC graph), found {}",
            json_kind(&record)
        ));
    };
    let vertices = match map.shift_remove("vertices") {
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| vertex_from_json(v).map_err(|e| format!("vertices[{i}]: {e}")))
            .collect::<std::result::Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(format!(
                "`vertices` must be a list, found {}",
                json_kind(&other)
            ))
        }
        None => return Err("missing field `vertices`".to_string()),
    };
    let img_url = take_opt_string(&mut map, "img_url")?;
    let img_path = take_opt_string(&mut map, "img_path")?;
    let original_caption = take_opt_string(&mut map, "original_caption")?;
    let short_caption = take_opt_string(&mut map, "short_caption")?;
    let detail_caption = take_opt_string(&mut map, "detail_caption")?;
    let img_size = match map.shift_remove("img_size") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| {
                    v.as_i64()
                        .ok_or_else(|| format!("`img_size` must hold integers, found {v}"))
                })
                .collect::<std::result::Result<Vec<_>, _>>()?,
        ),
        Some(other) => {
            return Err(format!(
                "`img_size` must be a [width, height] list or null, found {}",
                json_kind(&other)
            ))
        }
    };
    let mask_inside_threshold = match map.shift_remove("mask_inside_threshold") {
        None => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(other) => {
            return Err(format!(
                "`mask_inside_threshold` must be a number, found {}",
                json_kind(&other)
            ))
        }
    };
    check_graph(&vertices)?;
    let image_id = img_path
        .clone()
        .filter(|p| !p.is_empty())
        .or_else(|| img_url.clone().filter(|u| !u.is_empty()))
        .unwrap_or_else(fallback_image_id);
    Ok(GbcGraphRow {
        image_id,
        vertices,
        img_url,
        img_path,
        original_caption,
        short_caption,
        detail_caption,
        img_size,
        mask_inside_threshold,
        extra_json: extra_json(map),
    })
}

/// Vertex-id uniqueness and the single parentless `image` root.
fn check_graph(vertices: &[GbcVertex]) -> std::result::Result<(), String> {
    let mut seen = BTreeSet::new();
    for v in vertices {
        if !seen.insert(v.vertex_id.as_str()) {
            return Err(format!("duplicate vertex_id {:?}", v.vertex_id));
        }
    }
    let roots: Vec<&GbcVertex> = vertices.iter().filter(|v| v.label == "image").collect();
    match roots.as_slice() {
        [] => Err("no vertex labelled `image` (the graph root)".to_string()),
        [root] if !root.in_edges.is_empty() => Err(format!(
            "the image vertex {:?} has in_edges; the root must have no parents",
            root.vertex_id
        )),
        [_] => Ok(()),
        _ => Err(format!(
            "{} vertices labelled `image`; a GBC graph has exactly one root",
            roots.len()
        )),
    }
}

fn vertex_from_json(value: Value) -> std::result::Result<GbcVertex, String> {
    let Value::Object(mut map) = value else {
        return Err(format!("expected an object, found {}", json_kind(&value)));
    };
    let vertex_id = take_string(&mut map, "vertex_id")?;
    let bbox = match map.shift_remove("bbox") {
        Some(b) => bbox_from_json(b).map_err(|e| format!("bbox: {e}"))?,
        None => return Err("missing field `bbox`".to_string()),
    };
    let label = take_string(&mut map, "label")?;
    if !VERTEX_LABELS.contains(&label.as_str()) {
        return Err(format!(
            "vertex label {label:?} is not one of {}",
            VERTEX_LABELS.join("|")
        ));
    }
    let descs = match map.shift_remove("descs") {
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, d)| desc_from_json(d).map_err(|e| format!("descs[{i}]: {e}")))
            .collect::<std::result::Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(format!(
                "`descs` must be a list, found {}",
                json_kind(&other)
            ))
        }
        None => return Err("missing field `descs`".to_string()),
    };
    let in_edges = take_edges(&mut map, "in_edges")?;
    let out_edges = take_edges(&mut map, "out_edges")?;
    let sub_masks = take_opt_string_list(&mut map, "sub_masks")?;
    let super_masks = take_opt_string_list(&mut map, "super_masks")?;
    Ok(GbcVertex {
        vertex_id,
        bbox,
        label,
        descs,
        in_edges,
        out_edges,
        sub_masks,
        super_masks,
        extra_json: extra_json(map),
    })
}

fn bbox_from_json(value: Value) -> std::result::Result<GbcBbox, String> {
    let Value::Object(mut map) = value else {
        return Err(format!("expected an object, found {}", json_kind(&value)));
    };
    let mut coord = |name: &str| match map.shift_remove(name) {
        Some(Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| format!("`{name}` is not a finite number")),
        Some(other) => Err(format!(
            "`{name}` must be a number, found {}",
            json_kind(&other)
        )),
        None => Err(format!("missing field `{name}`")),
    };
    let left = coord("left")?;
    let top = coord("top")?;
    let right = coord("right")?;
    let bottom = coord("bottom")?;
    let confidence = match map.shift_remove("confidence") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(other) => {
            return Err(format!(
                "`confidence` must be a number or null, found {}",
                json_kind(&other)
            ))
        }
    };
    // The bbox has no `extra_json`; dropping a field silently would break the exact round trip.
    if let Some(key) = map.keys().next() {
        return Err(format!(
            "unexpected field `{key}` (a bbox has left, top, right, bottom, confidence)"
        ));
    }
    Ok(GbcBbox {
        left,
        top,
        right,
        bottom,
        confidence,
    })
}

fn desc_from_json(value: Value) -> std::result::Result<GbcDesc, String> {
    let Value::Object(mut map) = value else {
        return Err(format!("expected an object, found {}", json_kind(&value)));
    };
    let text = take_string(&mut map, "text")?;
    let label = take_string(&mut map, "label")?;
    if !DESC_LABELS.contains(&label.as_str()) {
        return Err(format!(
            "caption label {label:?} is not one of {}",
            DESC_LABELS.join("|")
        ));
    }
    Ok(GbcDesc {
        text,
        label,
        extra_json: extra_json(map),
    })
}

fn take_edges(
    map: &mut Map<String, Value>,
    key: &str,
) -> std::result::Result<Vec<GbcEdge>, String> {
    match map.shift_remove(key) {
        // pydantic's default for both edge lists is `[]`.
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, e)| edge_from_json(e).map_err(|err| format!("{key}[{i}]: {err}")))
            .collect(),
        Some(other) => Err(format!(
            "`{key}` must be a list, found {}",
            json_kind(&other)
        )),
    }
}

fn edge_from_json(value: Value) -> std::result::Result<GbcEdge, String> {
    let Value::Object(mut map) = value else {
        return Err(format!("expected an object, found {}", json_kind(&value)));
    };
    let source = take_string(&mut map, "source")?;
    let text = take_string(&mut map, "text")?;
    let target = take_string(&mut map, "target")?;
    if let Some(key) = map.keys().next() {
        return Err(format!(
            "unexpected field `{key}` (an edge has source, text, target)"
        ));
    }
    Ok(GbcEdge {
        source,
        text,
        target,
    })
}

fn take_string(map: &mut Map<String, Value>, key: &str) -> std::result::Result<String, String> {
    match map.shift_remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "`{key}` must be a string, found {}",
            json_kind(&other)
        )),
        None => Err(format!("missing field `{key}`")),
    }
}

fn take_opt_string(
    map: &mut Map<String, Value>,
    key: &str,
) -> std::result::Result<Option<String>, String> {
    match map.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!(
            "`{key}` must be a string or null, found {}",
            json_kind(&other)
        )),
    }
}

fn take_opt_string_list(
    map: &mut Map<String, Value>,
    key: &str,
) -> std::result::Result<Option<Vec<String>>, String> {
    match map.shift_remove(key) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(format!(
                    "`{key}` must hold vertex ids, found {}",
                    json_kind(&other)
                )),
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(format!(
            "`{key}` must be a list of vertex ids, found {}",
            json_kind(&other)
        )),
    }
}

/// The fields left after the modelled ones were taken, as a JSON object in source order.
fn extra_json(map: Map<String, Value>) -> Option<String> {
    if map.is_empty() {
        None
    } else {
        Some(Value::Object(map).to_string())
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// row -> JSON record
// ---------------------------------------------------------------------------------------------

/// Converts a row back into the ml-gbc JSON record, fields in ml-gbc's declaration order, the
/// `extra_json` fields after the modelled ones at each level, in their source order.
///
/// Like pydantic's `model_dump`, every field of the basic model is written even when it is null
/// (`img_url`, ..., `bbox.confidence`, `in_edges`, `out_edges`). The full-form fields are written
/// only when present: `sub_masks`/`super_masks` when the vertex has them, `mask_inside_threshold`
/// when the record has it, and `img_size` when it is set or the record is in full form (then as
/// `null` when unknown, as `GbcGraphFull` dumps it). So a record is reproduced exactly unless the
/// source spelled a field differently from any ml-gbc dump: an integer bbox coordinate comes back
/// as a float, a missing `confidence`/`img_url`/... comes back as `null`, and an unmodelled field
/// placed between modelled ones moves after them.
///
/// Errors when an `extra_json` column does not hold a JSON object or a float is not finite (JSON
/// has no NaN).
pub fn record_from_row(row: &GbcGraphRow) -> Result<Value> {
    let what = || format!("GBC graph {:?}", row.image_id);
    let mut map = Map::new();
    let mut vertices = Vec::with_capacity(row.vertices.len());
    for vertex in &row.vertices {
        vertices.push(vertex_to_json(vertex).map_err(|reason| Error::invalid(what(), reason))?);
    }
    map.insert("vertices".into(), Value::Array(vertices));
    map.insert("img_url".into(), opt_string(&row.img_url));
    map.insert("img_path".into(), opt_string(&row.img_path));
    map.insert("original_caption".into(), opt_string(&row.original_caption));
    map.insert("short_caption".into(), opt_string(&row.short_caption));
    map.insert("detail_caption".into(), opt_string(&row.detail_caption));
    if row.img_size.is_some() || row.mask_inside_threshold.is_some() {
        let size = match &row.img_size {
            Some(size) => Value::Array(size.iter().map(|&n| Value::from(n)).collect()),
            None => Value::Null,
        };
        map.insert("img_size".into(), size);
    }
    if let Some(threshold) = row.mask_inside_threshold {
        map.insert(
            "mask_inside_threshold".into(),
            finite(threshold, "mask_inside_threshold").map_err(|r| Error::invalid(what(), r))?,
        );
    }
    append_extra(&mut map, &row.extra_json, "record").map_err(|r| Error::invalid(what(), r))?;
    Ok(Value::Object(map))
}

fn vertex_to_json(vertex: &GbcVertex) -> std::result::Result<Value, String> {
    let at = |reason: String| format!("vertex {:?}: {reason}", vertex.vertex_id);
    let mut map = Map::new();
    map.insert("vertex_id".into(), Value::String(vertex.vertex_id.clone()));
    let b = &vertex.bbox;
    let mut bbox = Map::new();
    bbox.insert("left".into(), finite(b.left, "bbox.left").map_err(at)?);
    bbox.insert("top".into(), finite(b.top, "bbox.top").map_err(at)?);
    bbox.insert("right".into(), finite(b.right, "bbox.right").map_err(at)?);
    bbox.insert(
        "bottom".into(),
        finite(b.bottom, "bbox.bottom").map_err(at)?,
    );
    let confidence = match b.confidence {
        Some(c) => finite(c, "bbox.confidence").map_err(at)?,
        None => Value::Null,
    };
    bbox.insert("confidence".into(), confidence);
    map.insert("bbox".into(), Value::Object(bbox));
    map.insert("label".into(), Value::String(vertex.label.clone()));
    let mut descs = Vec::with_capacity(vertex.descs.len());
    for desc in &vertex.descs {
        let mut d = Map::new();
        d.insert("text".into(), Value::String(desc.text.clone()));
        d.insert("label".into(), Value::String(desc.label.clone()));
        append_extra(&mut d, &desc.extra_json, "caption").map_err(at)?;
        descs.push(Value::Object(d));
    }
    map.insert("descs".into(), Value::Array(descs));
    map.insert("in_edges".into(), edges_to_json(&vertex.in_edges));
    map.insert("out_edges".into(), edges_to_json(&vertex.out_edges));
    if let Some(ids) = &vertex.sub_masks {
        map.insert("sub_masks".into(), string_list(ids));
    }
    if let Some(ids) = &vertex.super_masks {
        map.insert("super_masks".into(), string_list(ids));
    }
    append_extra(&mut map, &vertex.extra_json, "vertex").map_err(at)?;
    Ok(Value::Object(map))
}

fn edges_to_json(edges: &[GbcEdge]) -> Value {
    Value::Array(
        edges
            .iter()
            .map(|e| {
                let mut m = Map::new();
                m.insert("source".into(), Value::String(e.source.clone()));
                m.insert("text".into(), Value::String(e.text.clone()));
                m.insert("target".into(), Value::String(e.target.clone()));
                Value::Object(m)
            })
            .collect(),
    )
}

fn string_list(items: &[String]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.clone())).collect())
}

fn opt_string(value: &Option<String>) -> Value {
    value.clone().map_or(Value::Null, Value::String)
}

fn finite(x: f64, name: &str) -> std::result::Result<Value, String> {
    serde_json::Number::from_f64(x)
        .map(Value::Number)
        .ok_or_else(|| format!("{name} is {x}, which JSON cannot hold"))
}

/// Appends the fields of an `extra_json` object after the modelled ones.
fn append_extra(
    map: &mut Map<String, Value>,
    extra: &Option<String>,
    level: &str,
) -> std::result::Result<(), String> {
    let Some(text) = extra else {
        return Ok(());
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => {
            for (key, value) in fields {
                if map.contains_key(&key) {
                    return Err(format!(
                        "{level} extra_json repeats the modelled field `{key}`"
                    ));
                }
                map.insert(key, value);
            }
            Ok(())
        }
        Ok(other) => Err(format!(
            "{level} extra_json must be a JSON object, found {}",
            json_kind(&other)
        )),
        Err(e) => Err(format!("{level} extra_json is not JSON: {e}")),
    }
}

/// Puts the fields of a record's captions back in ml-gbc's declaration order (`Caption`,
/// `CaptionStatistics`, `ClipScores`); fields ml-gbc does not declare keep their relative order
/// after the declared ones. Parquet files written through pandas/pyarrow carry struct fields
/// sorted by name, so this is what makes a Parquet record dump like its JSONL twin.
pub fn restore_caption_field_order(record: &mut Value) {
    let Some(vertices) = record.get_mut("vertices").and_then(Value::as_array_mut) else {
        return;
    };
    for vertex in vertices {
        let Some(descs) = vertex.get_mut("descs").and_then(Value::as_array_mut) else {
            continue;
        };
        for desc in descs {
            reorder(desc, &CAPTION_FIELD_ORDER);
            if let Some(stats) = desc.get_mut("statistics") {
                reorder(stats, &CAPTION_STATISTICS_FIELD_ORDER);
            }
            if let Some(clip) = desc.get_mut("clip_scores") {
                reorder(clip, &CLIP_SCORES_FIELD_ORDER);
            }
        }
    }
}

fn reorder(value: &mut Value, order: &[&str]) {
    let Value::Object(map) = value else {
        return;
    };
    let mut old = std::mem::take(map);
    for key in order {
        if let Some(v) = old.shift_remove(*key) {
            map.insert((*key).to_string(), v);
        }
    }
    map.extend(old);
}

// ---------------------------------------------------------------------------------------------
// Writers
// ---------------------------------------------------------------------------------------------

/// The file layouts ml-gbc's `save_list_to_file` / `load_list_from_file` use, chosen by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GbcFileFormat {
    /// One `json.dumps(record)` per line.
    Jsonl,
    /// `json.dump(records, f, indent=4)`.
    Json,
    /// `pd.DataFrame(records).to_parquet(path)`.
    Parquet,
}

impl GbcFileFormat {
    /// The format named by a path's extension (`.jsonl`, `.json`, `.parquet`).
    pub fn from_path(path: &Path) -> Option<GbcFileFormat> {
        match path.extension()?.to_str()? {
            "jsonl" => Some(GbcFileFormat::Jsonl),
            "json" => Some(GbcFileFormat::Json),
            "parquet" => Some(GbcFileFormat::Parquet),
            _ => None,
        }
    }
}

/// Writes rows as an ml-gbc file whose layout follows the path's extension. The file appears
/// atomically: it is written beside the target and renamed into place.
pub fn write_gbc_file(path: &Path, rows: &[GbcGraphRow]) -> Result<()> {
    let format = GbcFileFormat::from_path(path).ok_or_else(|| {
        Error::Usage(format!(
            "{}: unknown GBC file type (use .jsonl, .json or .parquet)",
            path.display()
        ))
    })?;
    let records = rows
        .iter()
        .map(record_from_row)
        .collect::<Result<Vec<_>>>()?;
    match format {
        GbcFileFormat::Jsonl => write_atomically(path, |out| {
            for record in &records {
                out.write_all(python_json(record).as_bytes())?;
                out.write_all(b"\n")?;
            }
            Ok(())
        }),
        GbcFileFormat::Json => write_atomically(path, |out| {
            out.write_all(python_json_indented(&Value::Array(records.clone()), 4).as_bytes())
        }),
        GbcFileFormat::Parquet => write_parquet(path, &records),
    }
}

/// Writes through a temporary file in the target's directory and renames it into place, so a
/// crash never leaves a half-written file under the final name.
pub(crate) fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let tmp = temp_path(path);
    let result = (|| {
        let file = std::fs::File::create(&tmp)?;
        let mut out = std::io::BufWriter::new(file);
        fill(&mut out)?;
        out.flush()?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()
    })();
    match result {
        Ok(()) => std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(Error::io(path, e))
        }
    }
}

pub(crate) fn temp_path(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

// ---------------------------------------------------------------------------------------------
// Mask relations
// ---------------------------------------------------------------------------------------------

/// ml-gbc's `Bbox.is_mostly_inside`: the share of `inner`'s area that overlaps `outer` exceeds
/// `threshold`. A box with no area counts as inside everything (ratio 1), as in ml-gbc.
pub fn is_mostly_inside(inner: &GbcBbox, outer: &GbcBbox, threshold: f64) -> bool {
    let area_inner = box_area(inner.left, inner.top, inner.right, inner.bottom);
    let overlap = box_area(
        inner.left.max(outer.left),
        inner.top.max(outer.top),
        inner.right.min(outer.right),
        inner.bottom.min(outer.bottom),
    );
    let ratio = if area_inner > 0.0 {
        overlap / area_inner
    } else {
        1.0
    };
    ratio > threshold
}

/// `Bbox.compute_area`, same operation order so results agree to the last bit.
fn box_area(left: f64, top: f64, right: f64, bottom: f64) -> f64 {
    (right - left).max(0.0) * (bottom - top).max(0.0)
}

/// The mask relations of one vertex.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MaskRelations {
    /// Vertices whose bbox is mostly inside this vertex's bbox.
    pub sub_masks: Vec<String>,
    /// Vertices whose bbox mostly contains this vertex's bbox.
    pub super_masks: Vec<String>,
}

/// Recomputes `sub_masks`/`super_masks` for every vertex (in vertex order) as
/// `GbcGraphFull.update_edges_and_masks` does: every vertex is compared with every other vertex of
/// the graph (the root included) by [`is_mostly_inside`] at the record's `mask_inside_threshold`
/// (0.85 when absent), and the ids in each list are sorted, because ml-gbc walks the vertices
/// sorted by id.
pub fn recompute_masks(row: &GbcGraphRow) -> Vec<MaskRelations> {
    let threshold = row
        .mask_inside_threshold
        .unwrap_or(DEFAULT_MASK_INSIDE_THRESHOLD);
    let mut sorted: Vec<&GbcVertex> = row.vertices.iter().collect();
    sorted.sort_by(|a, b| a.vertex_id.cmp(&b.vertex_id));
    row.vertices
        .iter()
        .map(|vertex| {
            let mut relations = MaskRelations::default();
            for other in &sorted {
                if other.vertex_id == vertex.vertex_id {
                    continue;
                }
                if is_mostly_inside(&other.bbox, &vertex.bbox, threshold) {
                    relations.sub_masks.push(other.vertex_id.clone());
                }
                if is_mostly_inside(&vertex.bbox, &other.bbox, threshold) {
                    relations.super_masks.push(other.vertex_id.clone());
                }
            }
            relations
        })
        .collect()
}

/// Sets every vertex's `sub_masks`/`super_masks` from [`recompute_masks`] (the full form).
pub fn apply_masks(row: &mut GbcGraphRow) {
    let masks = recompute_masks(row);
    for (vertex, relations) in row.vertices.iter_mut().zip(masks) {
        vertex.sub_masks = Some(relations.sub_masks);
        vertex.super_masks = Some(relations.super_masks);
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------------

/// The per-graph statistics of the GBC paper's dataset table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct GbcStatistics {
    /// `GbcGraphFull.n_vertices`.
    pub vertices: u64,
    /// `GbcGraphFull.n_edges`: the sum of the vertices' out-edge counts.
    pub edges: u64,
    /// `GbcGraphFull.n_captions`: the sum of the vertices' caption counts.
    pub captions: u64,
    /// The sum over all captions of `CaptionStatistics.n_words` (`len(text.split())`).
    pub words: u64,
    /// The longest shortest path, in edges, between two vertices of the graph taken as undirected
    /// (edges from both `in_edges` and `out_edges`; edges to vertices not in the graph and self
    /// loops are ignored; pairs in different components do not count).
    pub diameter: u64,
}

/// Computes [`GbcStatistics`] for one graph.
pub fn statistics(row: &GbcGraphRow) -> GbcStatistics {
    GbcStatistics {
        vertices: row.vertices.len() as u64,
        edges: row.vertices.iter().map(|v| v.out_edges.len() as u64).sum(),
        captions: row.vertices.iter().map(|v| v.descs.len() as u64).sum(),
        words: row
            .vertices
            .iter()
            .flat_map(|v| &v.descs)
            .map(|d| python_word_count(&d.text))
            .sum(),
        diameter: undirected_diameter(row),
    }
}

/// `len(text.split())` in Python: runs of characters Python's `str.isspace` accepts. That is
/// Unicode White_Space plus the ASCII separators U+001C..U+001F, which Rust's
/// `char::is_whitespace` leaves out.
pub fn python_word_count(text: &str) -> u64 {
    text.split(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
        .filter(|w| !w.is_empty())
        .count() as u64
}

fn undirected_diameter(row: &GbcGraphRow) -> u64 {
    let index: HashMap<&str, usize> = row
        .vertices
        .iter()
        .enumerate()
        .map(|(i, v)| (v.vertex_id.as_str(), i))
        .collect();
    let mut adjacency: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); row.vertices.len()];
    for vertex in &row.vertices {
        for edge in vertex.out_edges.iter().chain(&vertex.in_edges) {
            if let (Some(&a), Some(&b)) = (
                index.get(edge.source.as_str()),
                index.get(edge.target.as_str()),
            ) {
                if a != b {
                    adjacency[a].insert(b);
                    adjacency[b].insert(a);
                }
            }
        }
    }
    let mut diameter = 0;
    let mut distance = vec![u64::MAX; row.vertices.len()];
    let mut queue = VecDeque::new();
    for start in 0..row.vertices.len() {
        distance.iter_mut().for_each(|d| *d = u64::MAX);
        distance[start] = 0;
        queue.push_back(start);
        while let Some(at) = queue.pop_front() {
            diameter = diameter.max(distance[at]);
            for &next in &adjacency[at] {
                if distance[next] == u64::MAX {
                    distance[next] = distance[at] + 1;
                    queue.push_back(next);
                }
            }
        }
    }
    diameter
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bbox(left: f64, top: f64, right: f64, bottom: f64) -> GbcBbox {
        GbcBbox {
            left,
            top,
            right,
            bottom,
            confidence: None,
        }
    }

    #[test]
    fn mostly_inside_uses_the_inner_area() {
        // 0.5 x 0.5 box, 90% of it inside the outer one: 0.45 * 0.5 / 0.25 = 0.9 > 0.85.
        let inner = bbox(0.0, 0.0, 0.5, 0.5);
        let outer = bbox(0.05, 0.0, 1.0, 1.0);
        assert!(is_mostly_inside(&inner, &outer, 0.85));
        assert!(!is_mostly_inside(&outer, &inner, 0.85));
        // Exactly at the threshold is not inside (strict `>`).
        let half = bbox(0.5, 0.0, 1.0, 1.0);
        assert!(!is_mostly_inside(&bbox(0.0, 0.0, 1.0, 1.0), &half, 0.5));
        // A degenerate box is inside everything, as in ml-gbc.
        assert!(is_mostly_inside(&bbox(0.3, 0.3, 0.3, 0.9), &half, 0.85));
    }

    #[test]
    fn python_split_counts_ascii_separators() {
        assert_eq!(python_word_count("  a dog\tand\u{1f}a cat \u{3000}x "), 6);
        assert_eq!(python_word_count(""), 0);
        assert_eq!(python_word_count("a\u{200b}b"), 1);
    }

    #[test]
    fn record_without_root_is_rejected() {
        let record = serde_json::json!({"vertices": [{
            "vertex_id": "dog", "bbox": {"left": 0.0, "top": 0.0, "right": 1.0, "bottom": 1.0},
            "label": "entity", "descs": []}]});
        let err = row_from_record(record, || "x".into()).unwrap_err();
        assert!(err.contains("image"), "{err}");
    }

    #[test]
    fn image_id_prefers_path_then_url_then_position() {
        let root = serde_json::json!({"vertex_id": "", "bbox": {"left": 0.0, "top": 0.0,
            "right": 1.0, "bottom": 1.0, "confidence": null}, "label": "image", "descs": []});
        let with = |extra: Value| {
            let mut r = serde_json::json!({"vertices": [root.clone()]});
            for (k, v) in extra.as_object().into_iter().flatten() {
                r[k] = v.clone();
            }
            row_from_record(r, || "f.jsonl:3".into()).map(|row| row.image_id)
        };
        assert_eq!(
            with(serde_json::json!({"img_path": "a.jpg", "img_url": "u"})),
            Ok("a.jpg".into())
        );
        assert_eq!(with(serde_json::json!({"img_url": "u"})), Ok("u".into()));
        assert_eq!(with(serde_json::json!({})), Ok("f.jsonl:3".into()));
    }
}
