//! Readers for COCO captions, COCO instances and COCO-Entities JSON.
//!
//! All three stream the file with [`super::json_stream`]: memory stays bounded by one record
//! (an image, an annotation, or one COCO-Entities image with its captions) plus small per-file
//! lookups (a caption counter per image id, the category names).
//!
//! Records, for the `accepted + rejected = read` accounting:
//! - captions: every element of `images` and of `annotations` (the results layout, a top-level
//!   array of `{image_id, caption}`, is read too: every element is a record);
//! - instances: every element of `images`, `annotations` and `categories` (a category gives no
//!   row, but a broken one is rejected like any other record);
//! - COCO-Entities: every caption of every image; an image entry that is not an object of
//!   captions is one rejected record.
//!
//! `info`, `licenses` and other top-level keys are skipped. Annotations whose `image_id` is not
//! among the file's `images` are accepted: the official files always have their images, and
//! truncated samples (the first N images and first N annotations kept independently) would lose
//! nearly every caption otherwise.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::{Map, Value};

use super::json_stream::{
    for_each_element, for_each_entry, kind, Captured, Fields, JsonScanner, RawRecord, ScanResult,
    MAX_RECORD_BYTES,
};
use super::ledger::{Locator, Source};
use super::{RecordSink, Row};
use crate::error::{Error, Result};
use crate::schema::{canonical_split, BoxXyxy, CaptionRow, DetectionRow, GroundingRow, ImageRow};

/// Format name of the COCO captions reader.
pub const CAPTIONS_FORMAT: &str = "coco-captions";
/// Format name of the COCO instances reader.
pub const INSTANCES_FORMAT: &str = "coco-instances";
/// Format name of the COCO-Entities reader.
pub const ENTITIES_FORMAT: &str = "coco-entities";
/// `dataset` of every COCO row.
pub const DATASET: &str = "coco";

fn open(path: &Path) -> Result<File> {
    super::open_input(path)
}

/// The split named by a COCO file name: `captions_train2014.json` → `train`,
/// `instances_val2017.json` → `validation`, `image_info_test-dev2015.json` → `test`; `unknown` when the
/// name carries none.
pub fn split_from_file_name(path: &Path) -> &'static str {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    for (tag, split) in [("train", "train"), ("val", "validation"), ("test", "test")] {
        for (at, _) in name.match_indices(tag) {
            let rest = name[at + tag.len()..].trim_start_matches("-dev");
            if rest.len() >= 4 && rest.as_bytes()[..4].iter().all(u8::is_ascii_digit) {
                return split;
            }
        }
    }
    "unknown"
}

/// Reads a COCO captions file (`captions_*.json`): `images` become [`ImageRow`]s and
/// `annotations` [`CaptionRow`]s, with the split taken from the file name.
pub fn read_captions(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    let source = Source::new(CAPTIONS_FORMAT, path);
    read_captions_from(open(path)?, &source, split_from_file_name(path), sink)
}

/// [`read_captions`] over any byte stream.
pub fn read_captions_from(
    reader: impl Read,
    source: &Source,
    split: &str,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    let mut scanner = JsonScanner::new(reader);
    let mut captions = CaptionCounter::default();
    let outcome = (|| -> Result<ScanResult<()>> {
        if let Err(e) = scanner.skip_bom() {
            return Ok(Err(e));
        }
        let walked = match scanner.skip_ws() {
            Ok(Some(b'[')) => for_each_element(&mut scanner, |rec| {
                caption_record(source, sink, &rec, &mut captions, split, true)
            })?,
            Ok(_) => for_each_entry(&mut scanner, |key, s| match key {
                "images" => {
                    for_each_element(s, |rec| image_record(source, sink, &rec, split, None))
                }
                "annotations" => for_each_element(s, |rec| {
                    caption_record(source, sink, &rec, &mut captions, split, false)
                }),
                _ => Ok(s.skip_value()),
            })?,
            Err(e) => Err(e.into()),
        };
        Ok(walked.and_then(|()| scanner.expect_end()))
    })()?;
    source.scan_outcome(sink, outcome, || scanner.excerpt_here())
}

/// Running caption index per image, in file order.
#[derive(Default)]
struct CaptionCounter {
    next_index: HashMap<String, i32>,
}

impl CaptionCounter {
    fn caption_row(
        &mut self,
        obj: &Map<String, Value>,
        split: &str,
        results_layout: bool,
    ) -> std::result::Result<CaptionRow, String> {
        let image_id = obj.id("image_id")?;
        let text = obj.str("caption")?.trim().to_string();
        let own_id = if results_layout {
            match obj.get("id") {
                None | Some(Value::Null) => None,
                Some(_) => Some(obj.id("id")?),
            }
        } else {
            Some(obj.id("id")?)
        };
        let counter = self.next_index.entry(image_id.clone()).or_insert(0);
        let caption_index = *counter;
        *counter = counter.saturating_add(1);
        Ok(CaptionRow {
            caption_id: own_id.unwrap_or_else(|| format!("{image_id}#{caption_index}")),
            image_id,
            dataset: DATASET.into(),
            split: split.into(),
            caption_index,
            text,
        })
    }
}

/// Emits the rows of an accepted record or rejects it.
fn emit(
    source: &Source,
    sink: &mut dyn RecordSink,
    at: Locator,
    rec: &RawRecord<'_>,
    parsed: std::result::Result<Vec<Row>, String>,
) -> Result<()> {
    match parsed {
        Ok(rows) => {
            for row in rows {
                sink.row(row)?;
            }
            sink.accepted()
        }
        Err(reason) => source.reject(sink, at, reason, &rec.excerpt()),
    }
}

/// One caption record: an element of a results list (`[{image_id, caption}]`) or of the
/// `annotations` array of a captions file.
fn caption_record(
    source: &Source,
    sink: &mut dyn RecordSink,
    rec: &RawRecord<'_>,
    captions: &mut CaptionCounter,
    split: &str,
    results_layout: bool,
) -> Result<()> {
    let (at, expected) = if results_layout {
        (
            format!("[{}]", rec.index),
            "a caption result {image_id, caption}",
        )
    } else {
        (
            format!("annotations[{}]", rec.index),
            "a caption annotation {id, image_id, caption}",
        )
    };
    let parsed = rec
        .parse_object(expected)
        .and_then(|obj| captions.caption_row(&obj, split, results_layout));
    emit(
        source,
        sink,
        Locator::at(at, rec.offset),
        rec,
        parsed.map(|r| vec![Row::Caption(r)]),
    )
}

fn image_record(
    source: &Source,
    sink: &mut dyn RecordSink,
    rec: &RawRecord<'_>,
    split: &str,
    sizes: Option<&mut ImageSizes>,
) -> Result<()> {
    let at = Locator::at(format!("images[{}]", rec.index), rec.offset);
    let parsed = rec
        .parse_object("an image {id, file_name, width, height}")
        .and_then(|obj| image_row(&obj, split));
    if let (Ok(row), Some(sizes)) = (&parsed, sizes) {
        if let (Some(w), Some(h)) = (row.width, row.height) {
            sizes.insert(row.image_id.clone(), (w, h));
        }
    }
    emit(
        source,
        sink,
        at,
        rec,
        parsed.map(|row| vec![Row::Image(row)]),
    )
}

/// Width and height of the images read so far, by image id, to check boxes against.
type ImageSizes = HashMap<String, (i32, i32)>;

fn image_row(obj: &Map<String, Value>, split: &str) -> std::result::Result<ImageRow, String> {
    let url = match obj.opt_str("coco_url")? {
        Some(u) => Some(u.to_string()),
        None => obj.opt_str("flickr_url")?.map(str::to_string),
    };
    Ok(ImageRow {
        image_id: obj.id("id")?,
        dataset: DATASET.into(),
        split: split.into(),
        file_name: obj.opt_str("file_name")?.map(str::to_string),
        url,
        width: obj.opt_dim("width")?,
        height: obj.opt_dim("height")?,
    })
}

/// Reads a COCO instances file (`instances_*.json`): `images` become [`ImageRow`]s and
/// `annotations` [`DetectionRow`]s labelled with their category's name.
///
/// The official files put `categories` after `annotations`. Rather than buffering every
/// annotation until the names are known, the reader makes a second pass over the file for the
/// annotations when it met them before the categories (only the category names are kept).
pub fn read_instances(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    let source = Source::new(INSTANCES_FORMAT, path);
    read_instances_from(open(path)?, &source, split_from_file_name(path), sink)
}

/// [`read_instances`] over any seekable byte stream.
pub fn read_instances_from<R: Read + Seek>(
    mut reader: R,
    source: &Source,
    split: &str,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    let mut categories: HashMap<String, String> = HashMap::new();
    let mut image_sizes = ImageSizes::new();
    let mut categories_seen = false;
    let mut deferred = false;
    {
        let mut scanner = JsonScanner::new(&mut reader);
        let outcome = (|| -> Result<ScanResult<()>> {
            if let Err(e) = scanner.skip_bom() {
                return Ok(Err(e));
            }
            let walked = for_each_entry(&mut scanner, |key, s| match key {
                "images" => for_each_element(s, |rec| {
                    image_record(source, sink, &rec, split, Some(&mut image_sizes))
                }),
                "categories" => {
                    categories_seen = true;
                    for_each_element(s, |rec| {
                        category_record(source, sink, &rec, &mut categories)
                    })
                }
                "annotations" if !categories_seen => {
                    deferred = true;
                    Ok(s.skip_value())
                }
                "annotations" => for_each_element(s, |rec| {
                    detection_record(source, sink, &rec, &categories, &image_sizes)
                }),
                _ => Ok(s.skip_value()),
            })?;
            Ok(walked.and_then(|()| scanner.expect_end()))
        })()?;
        source.scan_outcome(sink, outcome, || scanner.excerpt_here())?;
    }
    if !deferred {
        return Ok(());
    }
    reader
        .seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(&source.file, e))?;
    let mut scanner = JsonScanner::new(&mut reader);
    // The first pass already went past these annotations, so the structure up to their end is
    // sound; the second pass stops there and leaves the ledger of the rest to the first.
    let outcome = (|| -> Result<ScanResult<()>> {
        if let Err(e) = scanner.skip_bom() {
            return Ok(Err(e));
        }
        let mut done = false;
        for_each_entry(&mut scanner, |key, s| {
            if done {
                return Ok(s.skip_value());
            }
            match key {
                "annotations" => {
                    done = true;
                    for_each_element(s, |rec| {
                        detection_record(source, sink, &rec, &categories, &image_sizes)
                    })
                }
                _ => Ok(s.skip_value()),
            }
        })
    })()?;
    match outcome {
        Err(super::json_stream::ScanError::Io(e)) => Err(Error::io(&source.file, e)),
        _ => Ok(()),
    }
}

fn category_record(
    source: &Source,
    sink: &mut dyn RecordSink,
    rec: &RawRecord<'_>,
    categories: &mut HashMap<String, String>,
) -> Result<()> {
    let at = Locator::at(format!("categories[{}]", rec.index), rec.offset);
    let parsed = rec
        .parse_object("a category {id, name}")
        .and_then(|obj| Ok((obj.id("id")?, obj.str("name")?.to_string())));
    match parsed {
        Ok((id, name)) => {
            categories.insert(id, name);
            sink.accepted()
        }
        Err(reason) => source.reject(sink, at, reason, &rec.excerpt()),
    }
}

fn detection_record(
    source: &Source,
    sink: &mut dyn RecordSink,
    rec: &RawRecord<'_>,
    categories: &HashMap<String, String>,
    image_sizes: &ImageSizes,
) -> Result<()> {
    let at = Locator::at(format!("annotations[{}]", rec.index), rec.offset);
    let parsed = annotation_fields(rec)
        .and_then(|obj| detection_row(&obj, categories, image_sizes))
        .map(|row| vec![Row::Detection(row)]);
    emit(source, sink, at, rec, parsed)
}

/// The fields of an object annotation that capflow keeps, each as written (`null` included).
/// Reading a record into this rather than into a `serde_json::Value` passes over everything
/// else (`segmentation`: polygons or RLE counts, often most of an annotation's bytes, and
/// `area`) without building it in memory.
#[derive(serde::Deserialize)]
struct AnnotationFields {
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    image_id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    category_id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    bbox: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    iscrowd: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    score: Option<Value>,
}

/// A field that is present, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}

/// An object annotation's kept fields as a map. A record that is not a plain object of
/// distinct keys (an array, a repeated key, broken JSON) is read in full, so that it is
/// accepted or rejected exactly as any other record.
fn annotation_fields(rec: &RawRecord<'_>) -> std::result::Result<Map<String, Value>, String> {
    let expected = "an object annotation {id, image_id, category_id, bbox}";
    let is_object = rec.bytes.trim_ascii_start().first() == Some(&b'{');
    let fields = match rec.captured {
        Captured::Complete if is_object => {
            serde_json::from_slice::<AnnotationFields>(rec.bytes).ok()
        }
        _ => None,
    };
    let Some(f) = fields else {
        return rec.parse_object(expected);
    };
    let mut map = Map::new();
    for (key, value) in [
        ("id", f.id),
        ("image_id", f.image_id),
        ("category_id", f.category_id),
        ("bbox", f.bbox),
        ("iscrowd", f.iscrowd),
        ("score", f.score),
    ] {
        if let Some(value) = value {
            map.insert(key.to_string(), value);
        }
    }
    Ok(map)
}

fn detection_row(
    obj: &Map<String, Value>,
    categories: &HashMap<String, String>,
    image_sizes: &ImageSizes,
) -> std::result::Result<DetectionRow, String> {
    let category = obj.id("category_id")?;
    let label = categories
        .get(&category)
        .ok_or_else(|| format!("category_id {category} is not among the file's categories"))?;
    let image_id = obj.id("image_id")?;
    let bbox = xywh_box(obj.array("bbox")?)?;
    if let Some(&(width, height)) = image_sizes.get(&image_id) {
        check_on_image(&bbox, width, height)?;
    }
    let crowd = obj.opt_int("iscrowd")?.unwrap_or(0) != 0;
    // Detector output in the instances layout carries a confidence per annotation.
    let score = match obj.field("score") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(other) => return Err(format!("`score` must be a number, found {other}")),
    };
    Ok(DetectionRow {
        image_id,
        detection_id: obj.id("id")?,
        source: INSTANCES_FORMAT.into(),
        label: label.clone(),
        score,
        bbox,
        attributes: if crowd {
            vec!["crowd".into()]
        } else {
            Vec::new()
        },
        feature: None,
    })
}

/// A box must overlap its image (`width` x `height` pixels). Boxes that run past an edge are
/// kept as they are: COCO's own boxes overshoot by rounding.
fn check_on_image(bbox: &BoxXyxy, width: i32, height: i32) -> std::result::Result<(), String> {
    let (w, h) = (f64::from(width), f64::from(height));
    if bbox.x1 >= w || bbox.y1 >= h || bbox.x2 <= 0.0 || bbox.y2 <= 0.0 {
        return Err(format!(
            "`bbox` [{}, {}, {}, {}] (corners) lies outside the {width} x {height} image",
            bbox.x1, bbox.y1, bbox.x2, bbox.y2
        ));
    }
    Ok(())
}

fn numbers<const N: usize>(items: &[Value], what: &str) -> std::result::Result<[f64; N], String> {
    if items.len() != N {
        return Err(format!(
            "{what} should have {N} numbers, found {}",
            items.len()
        ));
    }
    let mut out = [0.0; N];
    for (slot, item) in out.iter_mut().zip(items) {
        *slot = item
            .as_f64()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("{what} should hold finite numbers, found {}", kind(item)))?;
    }
    Ok(out)
}

/// COCO's `[x, y, width, height]` (0-based, top-left corner) as a corner box.
fn xywh_box(items: &[Value]) -> std::result::Result<BoxXyxy, String> {
    let [x, y, w, h] = numbers::<4>(items, "`bbox` [x, y, width, height]")?;
    if w < 0.0 || h < 0.0 {
        return Err(format!("`bbox` has a negative size ({w} x {h})"));
    }
    if w == 0.0 || h == 0.0 {
        return Err(format!(
            "`bbox` [{x}, {y}, {w}, {h}] has zero width or height: it covers no pixels"
        ));
    }
    let (x2, y2) = (x + w, y + h);
    if !x2.is_finite() || !y2.is_finite() {
        return Err(format!(
            "`bbox` [{x}, {y}, {w}, {h}] reaches beyond the largest representable coordinate \
             (x + width or y + height is infinite)"
        ));
    }
    Ok(BoxXyxy::new(x, y, x2, y2))
}

/// Reads a COCO-Entities file: `{image_id: {caption: {det_sequences, noun_chunks, detections}}}`.
///
/// Each caption becomes a [`CaptionRow`] (`caption_id` = `<image_id>#<index>` in file order, the
/// text is the caption's whitespace tokens joined by single spaces), one [`GroundingRow`] per
/// maximal run of equal non-null `det_sequences` entries (`phrase_id` = the class, the boxes of
/// `detections[class]`; the class `_` marks a grounded phrase whose class is unknown and keeps
/// empty boxes, as does a class with no detections; `no_box` says the boxes are empty), and one
/// [`DetectionRow`] per detection id of the image, emitted with the first caption that lists it
/// (the captions of one image repeat the same detections). `noun_chunks` duplicates what the
/// runs say and is not kept. The split comes from a caption's `split` field when present.
pub fn read_entities(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    let source = Source::new(ENTITIES_FORMAT, path);
    read_entities_from(open(path)?, &source, sink)
}

/// [`read_entities`] over any byte stream.
pub fn read_entities_from(
    reader: impl Read,
    source: &Source,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    let mut scanner = JsonScanner::new(reader);
    let mut raw = Vec::new();
    let outcome = (|| -> Result<ScanResult<()>> {
        if let Err(e) = scanner.skip_bom() {
            return Ok(Err(e));
        }
        let walked = for_each_entry::<_, crate::error::Error>(&mut scanner, |image_id, s| {
            if let Err(e) = s.skip_ws() {
                return Ok(Err(e.into()));
            }
            let offset = s.offset();
            let captured = match s.capture_value(&mut raw, MAX_RECORD_BYTES) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            };
            let rec = RawRecord {
                index: 0,
                offset,
                bytes: &raw,
                captured,
            };
            entity_image(source, sink, image_id, &rec)?;
            Ok(Ok(()))
        })?;
        Ok(walked.and_then(|()| scanner.expect_end()))
    })()?;
    source.scan_outcome(sink, outcome, || scanner.excerpt_here())
}

fn entity_image(
    source: &Source,
    sink: &mut dyn RecordSink,
    image_id: &str,
    rec: &RawRecord<'_>,
) -> Result<()> {
    let captions = match rec.parse_object("an object of captions") {
        Ok(map) => map,
        Err(reason) => {
            return source.reject(
                sink,
                Locator::at(format!("image {image_id}"), rec.offset),
                reason,
                &rec.excerpt(),
            )
        }
    };
    let mut seen_detections = HashSet::new();
    for (index, (caption, info)) in captions.iter().enumerate() {
        let at = Locator::at(format!("image {image_id}, caption {index}"), rec.offset);
        match entity_caption(image_id, index, caption, info, &mut seen_detections) {
            Ok(rows) => {
                for row in rows {
                    sink.row(row)?;
                }
                sink.accepted()?;
            }
            Err(reason) => {
                let raw = format!("{}: {}", Value::String(caption.clone()), info);
                source.reject(sink, at, reason, &raw)?;
            }
        }
    }
    Ok(())
}

fn entity_caption(
    image_id: &str,
    index: usize,
    caption: &str,
    info: &Value,
    seen_detections: &mut HashSet<String>,
) -> std::result::Result<Vec<Row>, String> {
    let info = match info {
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "expected {{det_sequences, noun_chunks, detections}} for the caption, found {}",
                kind(other)
            ))
        }
    };
    let tokens: Vec<&str> = caption.split_whitespace().collect();
    let sequence = info.array("det_sequences")?;
    if sequence.len() != tokens.len() {
        return Err(format!(
            "`det_sequences` has {} entries but the caption has {} tokens",
            sequence.len(),
            tokens.len()
        ));
    }
    let classes: Vec<Option<&str>> = sequence
        .iter()
        .map(|v| match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.as_str())),
            other => Err(format!(
                "`det_sequences` entries should be class names or null, found {}",
                kind(other)
            )),
        })
        .collect::<std::result::Result<_, _>>()?;
    let detections = entity_detections(info)?;
    let caption_index =
        i32::try_from(index).map_err(|_| "too many captions for one image".to_string())?;
    let caption_id = format!("{image_id}#{caption_index}");
    let mut rows = vec![Row::Caption(CaptionRow {
        image_id: image_id.to_string(),
        caption_id: caption_id.clone(),
        dataset: DATASET.into(),
        split: canonical_split(info.opt_str("split")?.unwrap_or("unknown")).to_string(),
        caption_index,
        text: tokens.join(" "),
    })];
    let mut start = 0;
    while start < classes.len() {
        let Some(class) = classes[start] else {
            start += 1;
            continue;
        };
        let mut end = start + 1;
        while end < classes.len() && classes[end] == Some(class) {
            end += 1;
        }
        let boxes: Vec<BoxXyxy> = if class == "_" {
            Vec::new()
        } else {
            detections
                .iter()
                .filter(|d| d.0 == class)
                .map(|d| d.2)
                .collect()
        };
        rows.push(Row::Grounding(GroundingRow {
            image_id: image_id.to_string(),
            caption_id: caption_id.clone(),
            phrase_id: class.to_string(),
            phrase: tokens[start..end].join(" "),
            phrase_types: Vec::new(),
            token_start: start as i32,
            token_end: end as i32,
            no_box: boxes.is_empty(),
            boxes,
            is_scene: false,
            not_visual: false,
        }));
        start = end;
    }
    for (class, det_id, bbox) in detections {
        if seen_detections.insert(det_id.clone()) {
            rows.push(Row::Detection(DetectionRow {
                image_id: image_id.to_string(),
                detection_id: det_id,
                source: ENTITIES_FORMAT.into(),
                label: class.to_string(),
                score: None,
                bbox,
                attributes: Vec::new(),
                feature: None,
            }));
        }
    }
    Ok(rows)
}

/// `detections: {class: [[det_id, [x1, y1, x2, y2]], ...]}` as (class, id, box) in file order.
fn entity_detections(
    info: &Map<String, Value>,
) -> std::result::Result<Vec<(&str, String, BoxXyxy)>, String> {
    let map = match info.get("detections") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(format!(
                "`detections` should map classes to detections, found {}",
                kind(other)
            ))
        }
    };
    let mut out = Vec::new();
    for (class, list) in map {
        let Value::Array(list) = list else {
            return Err(format!(
                "`detections[{class}]` should be a list of [id, box], found {}",
                kind(list)
            ));
        };
        for det in list {
            let pair = match det {
                Value::Array(pair) if pair.len() == 2 => pair,
                _ => {
                    return Err(format!(
                    "`detections[{class}]` entries should be [id, [x1, y1, x2, y2]], found {det}"
                ))
                }
            };
            let id = match &pair[0] {
                Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
                other => {
                    return Err(format!(
                        "`detections[{class}]` ids should be integers, found {}",
                        kind(other)
                    ))
                }
            };
            let Value::Array(coords) = &pair[1] else {
                return Err(format!(
                    "`detections[{class}]` boxes should be [x1, y1, x2, y2], found {}",
                    kind(&pair[1])
                ));
            };
            let [x1, y1, x2, y2] = numbers::<4>(coords, "a detection box [x1, y1, x2, y2]")?;
            if x2 < x1 || y2 < y1 {
                return Err(format!(
                    "detection {id} has an inverted box [{x1}, {y1}, {x2}, {y2}]"
                ));
            }
            out.push((class.as_str(), id, BoxXyxy::new(x1, y1, x2, y2)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::VecSink;

    fn source(format: &'static str) -> Source {
        Source {
            format,
            file: "test.json".into(),
        }
    }

    #[test]
    fn splits_come_from_file_names() {
        assert_eq!(
            split_from_file_name(Path::new("captions_train2014.json")),
            "train"
        );
        assert_eq!(
            split_from_file_name(Path::new("minyus_captions_val2014.json_samples.json")),
            "validation"
        );
        assert_eq!(
            split_from_file_name(Path::new("image_info_test-dev2015.json")),
            "test"
        );
        assert_eq!(split_from_file_name(Path::new("captions.json")), "unknown");
        assert_eq!(split_from_file_name(Path::new("interval.json")), "unknown");
    }

    #[test]
    fn instances_boxes_and_categories_after_annotations() {
        let doc = r#"{"annotations": [
            {"id": 7, "image_id": 1, "category_id": 18, "bbox": [10.5, 20, 30, 40], "iscrowd": 1},
            {"id": 8, "image_id": 1, "category_id": 99, "bbox": [0, 0, 1, 1]},
            {"id": 9, "image_id": 1, "category_id": 18, "bbox": [0, 0, -1, 1]}],
            "categories": [{"id": 18, "name": "dog", "supercategory": "animal"}, {"id": 3}]}"#;
        let mut sink = VecSink::default();
        read_instances_from(
            std::io::Cursor::new(doc),
            &source(INSTANCES_FORMAT),
            "val",
            &mut sink,
        )
        .unwrap();
        assert_eq!(sink.counts().read, 5);
        assert_eq!(sink.accepted, 2);
        let Row::Detection(d) = &sink.rows[0] else {
            panic!("expected a detection")
        };
        // [x, y, w, h] = [10.5, 20, 30, 40] → x2 = 10.5 + 30, y2 = 20 + 40.
        assert_eq!(d.bbox, BoxXyxy::new(10.5, 20.0, 40.5, 60.0));
        assert_eq!(
            (d.label.as_str(), d.attributes.clone()),
            ("dog", vec!["crowd".to_string()])
        );
        let records: Vec<&str> = sink.rejected.iter().map(|r| r.record.as_str()).collect();
        assert_eq!(
            records,
            ["categories[1]", "annotations[1]", "annotations[2]"]
        );
        assert!(sink.rejected[1].reason.contains("category_id 99"));
    }

    #[test]
    fn entity_runs_become_groundings() {
        let doc = r#"{"5": {"a dog on a red mat": {
            "det_sequences": ["dog", "dog", null, "_", "mat", "mat"],
            "detections": {"dog": [[3, [1, 2, 3, 4]]], "mat": [[4, [0, 0, 9, 9]], [5, [1, 1, 2, 2]]]}},
            "a dog": {"det_sequences": [null, "dog"], "detections": {"dog": [[3, [1, 2, 3, 4]]]}}}}"#;
        let mut sink = VecSink::default();
        read_entities_from(doc.as_bytes(), &source(ENTITIES_FORMAT), &mut sink).unwrap();
        assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
        assert_eq!(sink.accepted, 2);
        let spans: Vec<(String, i32, i32, usize)> = sink
            .rows
            .iter()
            .filter_map(|r| match r {
                Row::Grounding(g) => Some((
                    g.phrase_id.clone(),
                    g.token_start,
                    g.token_end,
                    g.boxes.len(),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            spans,
            [
                ("dog".to_string(), 0, 2, 1),
                ("_".to_string(), 3, 4, 0),
                ("mat".to_string(), 4, 6, 2),
                ("dog".to_string(), 1, 2, 1)
            ]
        );
        let detections = sink
            .rows
            .iter()
            .filter(|r| matches!(r, Row::Detection(_)))
            .count();
        assert_eq!(
            detections, 3,
            "detection 3 is repeated by the second caption"
        );
    }
}
