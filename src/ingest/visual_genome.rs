//! Reader for Visual Genome JSON: `scene_graphs.json`, `relationships.json`,
//! `region_descriptions.json` and `image_data.json`.
//!
//! The input is one of those files or a directory holding them. Which file is which comes from
//! its name (`…scene_graphs…`, `…relationships…`, `…region_descriptions…`, `…image_data…`), or
//! else from the keys of its first element. A scene-graph or relationships file takes image sizes
//! from an `image_data` file beside it (or one given to [`read_with_image_data`]). A directory is
//! read as: image data (as [`ImageRow`]s), then scene graphs (relationships files only when there
//! are no scene-graph files, since they say the same), then region descriptions.
//!
//! Records:
//! - scene graphs and relationships: one image, one [`SceneGraphRow`]. A relationship that cannot
//!   be kept (its subject or object id is not among the image's objects, or it is malformed) is
//!   dropped from the image and rejected as a record of its own (`[3].relationships[7]`); the
//!   image is still accepted. So a file's records are its images plus its dropped relationships,
//!   and `accepted` counts images. A broken object rejects its whole image, since relationships
//!   may point at it.
//! - region descriptions: one region, one [`CaptionRow`] (`caption_id` = `region_id`).
//! - image data: one image, one [`ImageRow`].
//!
//! Boxes are VG's `x, y, w, h` (0-based pixels) turned into corners `x, y, x + w, y + h`.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::json_stream::{
    for_each_element, kind, Fields, JsonScanner, RawRecord, ScanError, ScanResult,
};
use super::ledger::{Locator, Source};
use super::{RecordSink, Row};
use crate::error::{Error, Result};
use crate::schema::{BoxXyxy, CaptionRow, ImageRow, SceneGraphRow, SceneObject, SceneRelationship};

/// Format name, and `dataset` of every row.
pub const FORMAT: &str = "visual-genome";

/// The Visual Genome files this reader understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum VgFile {
    ImageData,
    SceneGraphs,
    Relationships,
    RegionDescriptions,
}

impl VgFile {
    /// The kind named by a file name, if it names one.
    pub fn from_name(path: &Path) -> Option<VgFile> {
        let name = path.file_name()?.to_string_lossy().to_lowercase();
        [
            ("image_data", VgFile::ImageData),
            ("scene_graph", VgFile::SceneGraphs),
            ("relationships", VgFile::Relationships),
            ("region_description", VgFile::RegionDescriptions),
        ]
        .into_iter()
        .find(|(tag, _)| name.contains(tag))
        .map(|(_, kind)| kind)
    }

    /// The kind whose elements carry these keys.
    fn from_keys(obj: &Map<String, Value>) -> Option<VgFile> {
        if obj.contains_key("objects") {
            Some(VgFile::SceneGraphs)
        } else if obj.contains_key("relationships") {
            Some(VgFile::Relationships)
        } else if obj.contains_key("regions") {
            Some(VgFile::RegionDescriptions)
        } else if obj.contains_key("width") || obj.contains_key("url") {
            Some(VgFile::ImageData)
        } else {
            None
        }
    }
}

/// Image sizes by image id, from `image_data.json`, and what kept some of them from being read.
///
/// When the sizes file is sound, an image missing from it simply has no size (samples and
/// subsets list fewer images). When it is not (truncated, or with entries that do not read), an
/// image missing from it may be one whose entry was lost, so its scene graph is rejected with
/// the reason rather than kept with a size silently missing.
#[derive(Clone, Debug, Default)]
pub struct ImageSizes {
    sizes: HashMap<String, (Option<i32>, Option<i32>)>,
    /// Entries whose id was read but whose sizes were not, with the reason.
    broken: HashMap<String, String>,
    /// Why entries may be missing: the file's structure broke, or entries had no readable id.
    incomplete: Option<String>,
    file: String,
}

impl ImageSizes {
    pub fn new() -> ImageSizes {
        ImageSizes::default()
    }

    pub fn insert(&mut self, image_id: String, size: (Option<i32>, Option<i32>)) {
        self.sizes.insert(image_id, size);
    }

    /// The size of `image_id`: `Ok((None, None))` when the sizes file is sound and does not
    /// list the image, `Err` with the reason when the image's entry is broken or may have been
    /// lost with a broken part of the file.
    pub fn size_of(
        &self,
        image_id: &str,
    ) -> std::result::Result<(Option<i32>, Option<i32>), String> {
        if let Some(size) = self.sizes.get(image_id) {
            return Ok(*size);
        }
        if let Some(reason) = self.broken.get(image_id) {
            return Err(format!(
                "image {image_id}'s entry in the sizes file {} does not read: {reason}",
                self.file
            ));
        }
        match &self.incomplete {
            Some(why) => Err(format!(
                "image {image_id} has no size: the sizes file {} {why}, so its entry may be \
                 among those lost; repair or remove that file",
                self.file
            )),
            None => Ok((None, None)),
        }
    }
}

impl<const N: usize> From<[(String, (Option<i32>, Option<i32>)); N]> for ImageSizes {
    fn from(entries: [(String, (Option<i32>, Option<i32>)); N]) -> ImageSizes {
        ImageSizes {
            sizes: entries.into(),
            ..ImageSizes::default()
        }
    }
}

fn open(path: &Path) -> Result<File> {
    super::open_input(path)
}

/// Reads a Visual Genome file or directory.
pub fn read(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    if path.is_dir() {
        return read_dir(path, sink);
    }
    let sibling = match path.parent() {
        Some(dir) if file_kind(path)? != VgFile::ImageData => vg_files(dir)?
            .into_iter()
            .find(|(k, _)| *k == VgFile::ImageData),
        _ => None,
    };
    read_with_image_data(path, sibling.as_ref().map(|(_, p)| p.as_path()), sink)
}

/// Reads one Visual Genome file, taking image sizes from `image_data` when given.
pub fn read_with_image_data(
    path: &Path,
    image_data: Option<&Path>,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    let sizes = match image_data {
        Some(p) => load_sizes(p)?,
        None => ImageSizes::new(),
    };
    let kind = file_kind(path)?;
    read_file_from(open(path)?, kind, &sizes, &Source::new(FORMAT, path), sink)
}

fn read_dir(dir: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    let files = vg_files(dir)?;
    let sizes = match files.iter().find(|(k, _)| *k == VgFile::ImageData) {
        Some((_, p)) => load_sizes(p)?,
        None => ImageSizes::new(),
    };
    let has_scene_graphs = files.iter().any(|(k, _)| *k == VgFile::SceneGraphs);
    for (kind, path) in &files {
        if *kind == VgFile::Relationships && has_scene_graphs {
            continue;
        }
        read_file_from(open(path)?, *kind, &sizes, &Source::new(FORMAT, path), sink)?;
    }
    Ok(())
}

/// The VG files of a directory (by name), ordered image data first, then by kind and name.
fn vg_files(dir: &Path) -> Result<Vec<(VgFile, PathBuf)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        // Not only regular files: a FIFO or a broken link named like a VG file is an error
        // naming it when it is opened, not a file skipped without a word.
        if !path.is_dir() {
            if let Some(kind) = VgFile::from_name(&path) {
                files.push((kind, path));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// What kind of file `path` is: by name, else by the keys of its first element.
pub fn file_kind(path: &Path) -> Result<VgFile> {
    if let Some(kind) = VgFile::from_name(path) {
        return Ok(kind);
    }
    let mut scanner = JsonScanner::new(open(path)?);
    let mut first = None;
    let _ = scanner.skip_bom();
    let walked = for_each_element(&mut scanner, |rec| -> std::result::Result<(), ()> {
        first = rec.parse_object("a Visual Genome record").ok();
        Err(())
    });
    if let Ok(Err(super::json_stream::ScanError::Io(e))) = walked {
        return Err(Error::io(path, e));
    }
    first.as_ref().and_then(VgFile::from_keys).ok_or_else(|| {
        Error::Usage(format!(
            "{}: not a Visual Genome file: expected a name containing scene_graphs, \
                 relationships, region_descriptions or image_data, or a list of records with \
                 `objects`, `relationships`, `regions` or `width`",
            path.display()
        ))
    })
}

/// Loads image sizes from an `image_data` file. Entries that do not read are not rejected
/// here (they are records of that file, rejected when it is read as input, not of the file
/// being read), but they are remembered, and so is a break in the file's structure: see
/// [`ImageSizes::size_of`].
pub fn load_sizes(path: &Path) -> Result<ImageSizes> {
    let mut sizes = ImageSizes {
        file: path.display().to_string(),
        ..ImageSizes::default()
    };
    let mut scanner = JsonScanner::new(open(path)?);
    let mut unreadable = 0usize;
    let walked = (|| -> Result<ScanResult<()>> {
        if let Err(e) = scanner.skip_bom() {
            return Ok(Err(e));
        }
        let walked = for_each_element(&mut scanner, |rec| -> Result<()> {
            match rec
                .parse_object("an image")
                .map(|obj| (image_row(&obj), obj))
            {
                Ok((Ok(row), _)) => sizes.insert(row.image_id, (row.width, row.height)),
                Ok((Err(reason), obj)) => match image_id(&obj) {
                    Ok(id) => {
                        sizes.broken.insert(id, reason);
                    }
                    Err(_) => unreadable += 1,
                },
                Err(_) => unreadable += 1,
            }
            Ok(())
        })?;
        Ok(walked.and_then(|()| scanner.expect_end()))
    })()?;
    sizes.incomplete = match walked {
        Err(ScanError::Io(e)) => return Err(Error::io(path, e)),
        Err(ScanError::Syntax { offset, reason }) => {
            Some(format!("breaks off at byte {offset} ({reason})"))
        }
        Ok(()) if unreadable > 0 => Some(format!(
            "has {unreadable} entr{} without a readable image id",
            if unreadable == 1 { "y" } else { "ies" }
        )),
        Ok(()) => None,
    };
    Ok(sizes)
}

/// Reads one file of a known kind from any byte stream.
pub fn read_file_from(
    reader: impl Read,
    kind: VgFile,
    sizes: &ImageSizes,
    source: &Source,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    let mut scanner = JsonScanner::new(reader);
    let outcome = (|| -> Result<ScanResult<()>> {
        if let Err(e) = scanner.skip_bom() {
            return Ok(Err(e));
        }
        let walked = for_each_element(&mut scanner, |rec| match kind {
            VgFile::ImageData => image_record(source, sink, &rec),
            VgFile::SceneGraphs | VgFile::Relationships => {
                scene_graph_record(source, sink, &rec, kind, sizes)
            }
            VgFile::RegionDescriptions => region_record(source, sink, &rec),
        })?;
        Ok(walked.and_then(|()| scanner.expect_end()))
    })()?;
    source.scan_outcome(sink, outcome, || scanner.excerpt_here())
}

fn image_id(obj: &Map<String, Value>) -> std::result::Result<String, String> {
    if obj.contains_key("image_id") {
        obj.id("image_id")
    } else {
        obj.id("id")
            .map_err(|_| "missing field `image_id`".to_string())
    }
}

fn image_row(obj: &Map<String, Value>) -> std::result::Result<ImageRow, String> {
    Ok(ImageRow {
        image_id: image_id(obj)?,
        dataset: FORMAT.into(),
        split: "unknown".into(),
        file_name: None,
        url: obj.opt_str("url")?.map(str::to_string),
        width: obj.opt_dim("width")?,
        height: obj.opt_dim("height")?,
    })
}

fn image_record(source: &Source, sink: &mut dyn RecordSink, rec: &RawRecord<'_>) -> Result<()> {
    let parsed = rec
        .parse_object("an image {image_id, width, height, url}")
        .and_then(|obj| image_row(&obj));
    match parsed {
        Ok(row) => {
            sink.row(Row::Image(row))?;
            sink.accepted()
        }
        Err(reason) => source.reject(
            sink,
            Locator::at(format!("[{}]", rec.index), rec.offset),
            reason,
            &rec.excerpt(),
        ),
    }
}

fn int_field(obj: &Map<String, Value>, key: &str) -> std::result::Result<i64, String> {
    obj.int(key)
}

/// One VG object: `object_id`, `x, y, w, h`, `names` (or a single `name`), `synsets`,
/// `attributes`.
fn scene_object(value: &Value) -> std::result::Result<SceneObject, String> {
    let Value::Object(obj) = value else {
        return Err(format!("expected an object record, found {}", kind(value)));
    };
    let object_id = int_field(obj, "object_id")?;
    let names = match (obj.get("names"), obj.get("name")) {
        (Some(_), _) => obj.str_list("names")?,
        (None, Some(_)) => vec![obj.str("name")?.to_string()],
        (None, None) => return Err(format!("object {object_id} has neither `names` nor `name`")),
    };
    let (x, y, w, h) = (obj.num("x")?, obj.num("y")?, obj.num("w")?, obj.num("h")?);
    if w < 0.0 || h < 0.0 {
        return Err(format!(
            "object {object_id} has a negative size ({w} x {h})"
        ));
    }
    if !(x + w).is_finite() || !(y + h).is_finite() {
        return Err(format!(
            "object {object_id}'s box [{x}, {y}, {w}, {h}] reaches beyond the largest \
             representable coordinate"
        ));
    }
    Ok(SceneObject {
        object_id,
        names,
        bbox: BoxXyxy::new(x, y, x + w, y + h),
        attributes: obj.str_list("attributes")?,
        synsets: obj.str_list("synsets")?,
        saliency: None,
    })
}

/// A relationship of `scene_graphs.json` (`subject_id`, `object_id`) or of
/// `relationships.json` (`subject`, `object` embedded; returned for the image's object list).
fn relationship(
    value: &Value,
    embedded: bool,
) -> std::result::Result<(SceneRelationship, Vec<SceneObject>), String> {
    let Value::Object(obj) = value else {
        return Err(format!(
            "expected a relationship record, found {}",
            kind(value)
        ));
    };
    let relationship_id = int_field(obj, "relationship_id")?;
    let (subject_id, object_id, ends) = if embedded {
        let subject = scene_object(obj.get("subject").unwrap_or(&Value::Null))
            .map_err(|e| format!("`subject`: {e}"))?;
        let object = scene_object(obj.get("object").unwrap_or(&Value::Null))
            .map_err(|e| format!("`object`: {e}"))?;
        (subject.object_id, object.object_id, vec![subject, object])
    } else {
        (
            int_field(obj, "subject_id")?,
            int_field(obj, "object_id")?,
            Vec::new(),
        )
    };
    Ok((
        SceneRelationship {
            relationship_id,
            predicate: obj.str("predicate")?.to_string(),
            subject_id,
            object_id,
            synsets: obj.str_list("synsets")?,
        },
        ends,
    ))
}

fn scene_graph_record(
    source: &Source,
    sink: &mut dyn RecordSink,
    rec: &RawRecord<'_>,
    kind: VgFile,
    sizes: &ImageSizes,
) -> Result<()> {
    let at = |suffix: String| Locator::at(format!("[{}]{suffix}", rec.index), rec.offset);
    let obj = match rec.parse_object("an image's scene graph {image_id, objects, relationships}") {
        Ok(obj) => obj,
        Err(reason) => return source.reject(sink, at(String::new()), reason, &rec.excerpt()),
    };
    let graph = (|| -> std::result::Result<_, String> {
        let image_id = obj.id("image_id")?;
        let mut objects = Vec::new();
        if kind == VgFile::SceneGraphs {
            for (i, o) in obj.array("objects")?.iter().enumerate() {
                objects.push(scene_object(o).map_err(|e| format!("objects[{i}]: {e}"))?);
            }
        }
        Ok((image_id, objects, obj.array("relationships")?))
    })();
    let (image_id, mut objects, raw_relationships) = match graph {
        Ok(g) => g,
        Err(reason) => return source.reject(sink, at(String::new()), reason, &rec.excerpt()),
    };
    let embedded = kind == VgFile::Relationships;
    let mut known: HashSet<i64> = objects.iter().map(|o| o.object_id).collect();
    let mut relationships = Vec::new();
    let mut dropped = Vec::new();
    for (j, raw) in raw_relationships.iter().enumerate() {
        match relationship(raw, embedded) {
            Ok((rel, ends)) => {
                for end in ends {
                    if known.insert(end.object_id) {
                        objects.push(end);
                    }
                }
                let missing: Vec<i64> = [rel.subject_id, rel.object_id]
                    .into_iter()
                    .filter(|id| !known.contains(id))
                    .collect();
                if missing.is_empty() {
                    relationships.push(rel);
                } else {
                    dropped.push((
                        j,
                        format!(
                            "relationship {} points at object id(s) {missing:?} that are not among \
                             image {image_id}'s objects; dropped from the image",
                            rel.relationship_id
                        ),
                    ));
                }
            }
            Err(reason) => dropped.push((j, format!("{reason}; dropped from the image"))),
        }
    }
    let (width, height) = match sizes.size_of(&image_id) {
        Ok(size) => size,
        Err(reason) => return source.reject(sink, at(String::new()), reason, &rec.excerpt()),
    };
    sink.row(Row::SceneGraph(SceneGraphRow {
        image_id,
        width,
        height,
        objects,
        relationships,
    }))?;
    sink.accepted()?;
    for (j, reason) in dropped {
        source.reject(
            sink,
            at(format!(".relationships[{j}]")),
            reason,
            &raw_relationships[j].to_string(),
        )?;
    }
    Ok(())
}

fn region_record(source: &Source, sink: &mut dyn RecordSink, rec: &RawRecord<'_>) -> Result<()> {
    let element = rec
        .parse_object("an image's regions {id, regions}")
        .and_then(|obj| {
            let fallback = obj.id("id").or_else(|_| obj.id("image_id")).ok();
            Ok((fallback, obj.array("regions")?.clone()))
        });
    let (fallback_id, regions) = match element {
        Ok(e) => e,
        Err(reason) => {
            return source.reject(
                sink,
                Locator::at(format!("[{}]", rec.index), rec.offset),
                reason,
                &rec.excerpt(),
            )
        }
    };
    let mut next_index: HashMap<String, i32> = HashMap::new();
    for (j, region) in regions.iter().enumerate() {
        let parsed = match region {
            Value::Object(r) => (|| -> std::result::Result<CaptionRow, String> {
                let image_id = match (r.get("image_id"), &fallback_id) {
                    (None, Some(id)) => id.clone(),
                    _ => r.id("image_id")?,
                };
                let caption_id = r.id("region_id")?;
                let text = r.str("phrase")?.trim().to_string();
                let counter = next_index.entry(image_id.clone()).or_insert(0);
                let caption_index = *counter;
                *counter = counter.saturating_add(1);
                Ok(CaptionRow {
                    image_id,
                    caption_id,
                    dataset: FORMAT.into(),
                    split: "unknown".into(),
                    caption_index,
                    text,
                })
            })(),
            other => Err(format!("expected a region record, found {}", kind(other))),
        };
        match parsed {
            Ok(row) => {
                sink.row(Row::Caption(row))?;
                sink.accepted()?;
            }
            Err(reason) => source.reject(
                sink,
                Locator::at(format!("[{}].regions[{j}]", rec.index), rec.offset),
                reason,
                &region.to_string(),
            )?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::VecSink;

    fn read_str(doc: &str, kind: VgFile, sizes: &ImageSizes) -> VecSink {
        let mut sink = VecSink::default();
        let source = Source {
            format: FORMAT,
            file: "t.json".into(),
        };
        read_file_from(doc.as_bytes(), kind, sizes, &source, &mut sink).unwrap();
        sink
    }

    #[test]
    fn dangling_relationships_are_dropped_and_rejected() {
        let doc = r#"[{"image_id": 7, "objects": [
              {"object_id": 1, "x": 10, "y": 20, "w": 5, "h": 6, "names": ["man"], "synsets": ["man.n.01"]},
              {"object_id": 2, "x": 0, "y": 0, "w": 1, "h": 1, "name": "hat", "attributes": ["red"]}],
            "relationships": [
              {"relationship_id": 9, "predicate": "wears", "subject_id": 1, "object_id": 2, "synsets": []},
              {"relationship_id": 10, "predicate": "on", "subject_id": 1, "object_id": 3, "synsets": []},
              {"relationship_id": 11, "subject_id": 1, "object_id": 2}]}]"#;
        let sizes: ImageSizes = [("7".to_string(), (Some(800), Some(600)))].into();
        let sink = read_str(doc, VgFile::SceneGraphs, &sizes);
        assert_eq!(sink.accepted, 1);
        let records: Vec<&str> = sink.rejected.iter().map(|r| r.record.as_str()).collect();
        assert_eq!(records, ["[0].relationships[1]", "[0].relationships[2]"]);
        let Row::SceneGraph(g) = &sink.rows[0] else {
            panic!("expected a scene graph")
        };
        assert_eq!((g.width, g.height), (Some(800), Some(600)));
        assert_eq!(g.objects[0].bbox, BoxXyxy::new(10.0, 20.0, 15.0, 26.0));
        assert_eq!(g.objects[1].names, ["hat"]);
        assert_eq!(g.relationships.len(), 1);
    }

    #[test]
    fn embedded_relationships_collect_objects_once() {
        let doc = r#"[{"image_id": 1, "relationships": [
            {"relationship_id": 1, "predicate": "ON", "synsets": [],
             "subject": {"object_id": 5, "x": 1, "y": 1, "w": 1, "h": 1, "name": "shade"},
             "object": {"object_id": 6, "x": 2, "y": 2, "w": 2, "h": 2, "names": ["street"]}},
            {"relationship_id": 2, "predicate": "near", "synsets": [],
             "subject": {"object_id": 6, "x": 9, "y": 9, "w": 9, "h": 9, "names": ["street"]},
             "object": {"object_id": 5, "x": 1, "y": 1, "w": 1, "h": 1, "name": "shade"}}]}]"#;
        let sink = read_str(doc, VgFile::Relationships, &ImageSizes::new());
        assert!(sink.rejected.is_empty());
        let Row::SceneGraph(g) = &sink.rows[0] else {
            panic!("expected a scene graph")
        };
        let ids: Vec<i64> = g.objects.iter().map(|o| o.object_id).collect();
        assert_eq!(ids, [5, 6]);
        // The first mention of object 6 wins.
        assert_eq!(g.objects[1].bbox, BoxXyxy::new(2.0, 2.0, 4.0, 4.0));
        assert_eq!(g.relationships.len(), 2);
    }
}
