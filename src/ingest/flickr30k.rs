//! Reader for Flickr30k Entities: `Sentences/<image>.txt` (captions with phrase markup) and
//! `Annotations/<image>.xml` (boxes per coreference chain).
//!
//! The input path is the dataset root (holding `Sentences/` and `Annotations/`), a directory of
//! sentence files (annotations are looked up in `../Annotations`), or a single `.txt` or `.xml`
//! file. Images are read one at a time in order of their ids, each image's annotation file
//! before its sentences, so every grounding leaves the reader with its boxes while memory holds
//! one image. When the root (the parent of `Sentences/`) holds the upstream split lists
//! `train.txt`, `val.txt` and `test.txt`, rows carry that split (`train`, `validation`, `test`),
//! else `unknown`.
//!
//! Records: one non-blank sentence line (a [`CaptionRow`] and one [`GroundingRow`] per
//! phrase), and one annotation file (an [`ImageRow`] with the image size). The upstream parser
//! (`flickr30k_entities_utils.py`) is followed for what the files mean; where it would crash or
//! silently misread (nested or unbalanced brackets, a phrase with no words, a missing size), the
//! record is rejected instead.
//!
//! Boxes: the annotation files hold 1-based inclusive pixel coordinates and upstream subtracts 1
//! from all four to get 0-based inclusive pixel indices. capflow boxes are 0-based with an
//! exclusive far edge, so `x1 = xmin - 1`, `y1 = ymin - 1`, `x2 = xmax`, `y2 = ymax`: the box
//! covers the same pixels and its width is `xmax - xmin + 1`.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use quick_xml::events::Event;

use super::ledger::{Locator, Source};
use super::lines::{read_line, skip_bom};
use super::listing::{DirFiles, IdMap};
use super::{FileMeta, RecordSink, Row};
use crate::error::{Error, Result};
use crate::schema::{BoxXyxy, CaptionRow, GroundingRow, ImageRow};

/// Format name, and `dataset` of every row.
pub const FORMAT: &str = "flickr30k-entities";

/// Longest sentence line kept; a longer line is rejected without being held in memory.
const MAX_LINE_BYTES: usize = 1 << 20;
/// Largest annotation file read; real ones are a few KB.
const MAX_XML_BYTES: u64 = 16 << 20;
/// Bytes an annotation file's buffer starts with: more than a real file holds.
const ANNOTATION_READ_BYTES: usize = 16 << 10;
/// Largest sentence file held whole while it is read (a larger one is read on from the file);
/// real ones are about a kilobyte.
const HELD_SENTENCE_BYTES: u64 = 1 << 20;
/// Bytes a sentence file's buffer starts with: more than a real file holds.
const SENTENCE_READ_BYTES: usize = 4 << 10;
/// Deepest element nesting read in an annotation file; real ones nest four levels
/// (`annotation/object/bndbox/xmin`).
pub const MAX_XML_DEPTH: usize = 64;

/// One annotated phrase of a caption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkedPhrase {
    /// The coreference chain id (`EN#<id>`); `0` for phrases marked `notvisual`.
    pub chain_id: String,
    /// The coarse types, in markup order (`people`, `clothing`, `notvisual`, ...).
    pub types: Vec<String>,
    /// Token span `[start, end)` over [`MarkedCaption::tokens`].
    pub start: usize,
    pub end: usize,
}

/// A caption line with its markup taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkedCaption {
    pub tokens: Vec<String>,
    pub phrases: Vec<MarkedPhrase>,
}

/// Parses one caption line, e.g. `[/EN#137644/people A group] playing [/EN#137645/other cards] .`
///
/// Tokens are the line's whitespace-separated words with the markup removed. A phrase opens
/// with a token `[/EN#<digits>/<type>[/<type>...]` and closes at the first following token
/// that ends in `]`.
pub fn parse_caption_markup(line: &str) -> std::result::Result<MarkedCaption, String> {
    let mut tokens: Vec<String> = Vec::new();
    let mut phrases = Vec::new();
    let mut open: Option<MarkedPhrase> = None;
    for token in line.split_whitespace() {
        if token.starts_with('[') {
            if let Some(phrase) = &open {
                return Err(format!(
                    "nested phrase `{token}` inside the open phrase [/EN#{}",
                    phrase.chain_id
                ));
            }
            open = Some(phrase_header(token, tokens.len())?);
            continue;
        }
        let Some(phrase) = open.as_mut() else {
            if token.ends_with(']') {
                return Err(format!("`{token}` closes a phrase that was never opened"));
            }
            tokens.push(token.to_string());
            continue;
        };
        match token.strip_suffix(']') {
            Some(word) => {
                if word.ends_with(']') {
                    return Err(format!("`{token}` closes more phrases than are open"));
                }
                if !word.is_empty() {
                    tokens.push(word.to_string());
                }
                phrase.end = tokens.len();
                if phrase.end == phrase.start {
                    return Err(format!("phrase [/EN#{} has no words", phrase.chain_id));
                }
                phrases.extend(open.take());
            }
            None => tokens.push(token.to_string()),
        }
    }
    if let Some(phrase) = open {
        return Err(format!(
            "phrase [/EN#{} is not closed by the end of the line (expected a word ending in `]`)",
            phrase.chain_id
        ));
    }
    if tokens.is_empty() {
        return Err("the caption has no words".into());
    }
    Ok(MarkedCaption { tokens, phrases })
}

fn phrase_header(token: &str, start: usize) -> std::result::Result<MarkedPhrase, String> {
    let Some(rest) = token.strip_prefix("[/EN#") else {
        return Err(format!(
            "`{token}` opens a bracket but is not phrase markup `[/EN#<id>/<type>`"
        ));
    };
    if rest.ends_with(']') {
        return Err(format!("phrase `{token}` has no words"));
    }
    let mut parts = rest.split('/');
    let chain_id = parts.next().unwrap_or_default();
    if chain_id.is_empty() || !chain_id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{token}` should carry a numeric chain id after `EN#`"
        ));
    }
    let types: Vec<String> = parts.map(str::to_string).collect();
    if types.is_empty() || types.iter().any(|t| t.is_empty() || t.contains(['[', ']'])) {
        return Err(format!(
            "`{token}` should name one or more phrase types (`/people`, `/bodyparts/people`)"
        ));
    }
    Ok(MarkedPhrase {
        chain_id: chain_id.to_string(),
        types,
        start,
        end: start,
    })
}

/// What one `Annotations/<image>.xml` file says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageAnnotation {
    pub file_name: Option<String>,
    pub width: Option<i32>,
    pub height: Option<i32>,
    /// Boxes per chain id in file order, already converted to 0-based exclusive corners.
    pub boxes: HashMap<String, Vec<BoxXyxy>>,
    /// Chain ids annotated as the whole scene (`<scene>1</scene>`).
    pub scene: HashSet<String>,
    /// Chain ids annotated as not visible (`<nobndbox>1</nobndbox>`).
    pub no_box: HashSet<String>,
}

#[derive(Default)]
struct XmlObject {
    names: Vec<String>,
    has_bndbox: bool,
    /// xmin, ymin, xmax, ymax
    corners: [Option<i64>; 4],
    nobndbox: Option<i64>,
    scene: Option<i64>,
}

fn xml_int(tag: &str, text: &str) -> std::result::Result<i64, String> {
    text.trim()
        .parse::<i64>()
        .map_err(|_| format!("<{tag}> should hold an integer, found `{}`", text.trim()))
}

/// Parses one annotation file the way the upstream `get_annotations` does: the children of the
/// root's `<size>` are the image size; every root `<object>` has one or more `<name>`s (chain
/// ids) and either a `<bndbox>` (one box for each name) or `<nobndbox>` and `<scene>` flags.
pub fn parse_annotation_xml(bytes: &[u8]) -> std::result::Result<ImageAnnotation, String> {
    let mut reader = quick_xml::Reader::from_reader(bytes);
    reader.config_mut().expand_empty_elements = true;
    let mut ann = ImageAnnotation::default();
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut object: Option<XmlObject> = None;
    let mut saw_size = false;
    let mut buf = Vec::new();
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("broken XML at byte {}: {e}", reader.error_position()))?;
        match event {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if path.len() == 1 && name == "object" {
                    object = Some(XmlObject::default());
                }
                if path.len() == 2 && path[1] == "object" && name == "bndbox" {
                    if let Some(o) = object.as_mut() {
                        o.has_bndbox = true;
                    }
                }
                if path.len() == 1 && name == "size" {
                    saw_size = true;
                }
                if path.len() >= MAX_XML_DEPTH {
                    return Err(format!(
                        "elements are nested deeper than {MAX_XML_DEPTH} levels (at byte {}); \
                         an annotation file nests four",
                        reader.buffer_position()
                    ));
                }
                path.push(name);
                text.clear();
            }
            Event::Text(t) => {
                let decoded = t.decode().map_err(|e| format!("undecodable text: {e}"))?;
                text.push_str(&decoded);
            }
            Event::CData(t) => {
                let decoded = t.decode().map_err(|e| format!("undecodable text: {e}"))?;
                text.push_str(&decoded);
            }
            Event::GeneralRef(r) => {
                if let Some(ch) = r
                    .resolve_char_ref()
                    .map_err(|e| format!("bad character reference: {e}"))?
                {
                    text.push(ch);
                } else {
                    let name = r.decode().map_err(|e| format!("undecodable entity: {e}"))?;
                    let resolved = quick_xml::escape::resolve_predefined_entity(&name)
                        .ok_or_else(|| format!("unknown entity `&{name};`"))?;
                    text.push_str(resolved);
                }
            }
            Event::End(_) => {
                end_element(&path, &text, &mut ann, &mut object)?;
                path.pop();
                text.clear();
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    if !path.is_empty() {
        return Err(format!("the file ends inside <{}>", path.join("><")));
    }
    if !saw_size {
        return Err("expected a <size> element with <width> and <height>".into());
    }
    Ok(ann)
}

fn end_element(
    path: &[String],
    text: &str,
    ann: &mut ImageAnnotation,
    object: &mut Option<XmlObject>,
) -> std::result::Result<(), String> {
    // Only paths up to four levels below the root mean anything.
    let mut below_root: [&str; 4] = [""; 4];
    let depth = path.len().saturating_sub(1);
    if depth > below_root.len() {
        return Ok(());
    }
    for (slot, name) in below_root.iter_mut().zip(path.iter().skip(1)) {
        *slot = name;
    }
    match &below_root[..depth] {
        ["filename"] => ann.file_name = Some(text.trim().to_string()),
        ["size", dim] => {
            let value = xml_int(dim, text)?;
            let value = i32::try_from(value)
                .ok()
                .filter(|v| *v >= 0)
                .ok_or_else(|| format!("<{dim}> is not a pixel size: {value}"));
            match *dim {
                "width" => ann.width = Some(value?),
                "height" => ann.height = Some(value?),
                // Upstream parses every child of <size> as an integer (depth too).
                _ => {
                    value?;
                }
            }
        }
        ["object", field] => {
            let Some(o) = object.as_mut() else {
                return Ok(());
            };
            match *field {
                "name" => {
                    let name = text.trim();
                    if name.is_empty() {
                        return Err("an <object> has an empty <name>".into());
                    }
                    o.names.push(name.to_string());
                }
                "nobndbox" => o.nobndbox = Some(xml_int(field, text)?),
                "scene" => o.scene = Some(xml_int(field, text)?),
                _ => {}
            }
        }
        ["object", "bndbox", corner] => {
            let slot = match *corner {
                "xmin" => 0,
                "ymin" => 1,
                "xmax" => 2,
                "ymax" => 3,
                _ => return Ok(()),
            };
            if let Some(o) = object.as_mut() {
                // Upstream takes the first of repeated corners.
                if o.corners[slot].is_none() {
                    o.corners[slot] = Some(xml_int(corner, text)?);
                }
            }
        }
        ["object"] => {
            if let Some(o) = object.take() {
                finish_object(o, ann)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn finish_object(o: XmlObject, ann: &mut ImageAnnotation) -> std::result::Result<(), String> {
    let names = o.names.join(", ");
    if o.has_bndbox {
        let [Some(xmin), Some(ymin), Some(xmax), Some(ymax)] = o.corners else {
            return Err(format!(
                "the <bndbox> of object {names} should have <xmin>, <ymin>, <xmax> and <ymax>"
            ));
        };
        if xmax < xmin - 1 || ymax < ymin - 1 {
            return Err(format!(
                "object {names} has an inverted box ({xmin}, {ymin}, {xmax}, {ymax})"
            ));
        }
        let bbox = BoxXyxy::new(
            (xmin - 1) as f64,
            (ymin - 1) as f64,
            xmax as f64,
            ymax as f64,
        );
        for name in o.names {
            ann.boxes.entry(name).or_default().push(bbox);
        }
        return Ok(());
    }
    let (Some(nobndbox), Some(scene)) = (o.nobndbox, o.scene) else {
        return Err(format!(
            "object {names} has no <bndbox>, so it should have <nobndbox> and <scene>"
        ));
    };
    for name in o.names {
        if nobndbox > 0 {
            ann.no_box.insert(name.clone());
        }
        if scene > 0 {
            ann.scene.insert(name);
        }
    }
    Ok(())
}

/// Where the files of one input path are.
struct Layout {
    sentences: Option<PathBuf>,
    annotations: Option<PathBuf>,
    /// Where `train.txt`, `val.txt` and `test.txt` may sit.
    root: Option<PathBuf>,
    /// A single file was named: read only that image.
    only: Option<(String, Option<PathBuf>, Option<PathBuf>)>,
}

fn dir_if_exists(path: PathBuf) -> Option<PathBuf> {
    path.is_dir().then_some(path)
}

fn layout(path: &Path) -> Result<Layout> {
    if path.is_dir() {
        let sentences = path.join("Sentences");
        let annotations = path.join("Annotations");
        if sentences.is_dir() || annotations.is_dir() {
            return Ok(Layout {
                sentences: dir_if_exists(sentences),
                annotations: dir_if_exists(annotations),
                root: Some(path.to_path_buf()),
                only: None,
            });
        }
        let parent = path.parent().map(Path::to_path_buf);
        return Ok(Layout {
            sentences: Some(path.to_path_buf()),
            annotations: parent
                .as_ref()
                .and_then(|p| dir_if_exists(p.join("Annotations"))),
            root: parent,
            only: None,
        });
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .ok_or_else(|| Error::Usage(format!("{}: not a file or directory", path.display())))?;
    let root = path.parent().and_then(Path::parent).map(Path::to_path_buf);
    let is_xml = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("xml"));
    let (sentence, annotation) = if is_xml {
        (None, Some(path.to_path_buf()))
    } else {
        let xml = root
            .as_ref()
            .map(|r| r.join("Annotations").join(format!("{stem}.xml")))
            .filter(|p| p.is_file());
        (Some(path.to_path_buf()), xml)
    };
    Ok(Layout {
        sentences: None,
        annotations: None,
        root,
        only: Some((stem, sentence, annotation)),
    })
}

/// A file of a Flickr30k Entities directory, with its size and modification time when it was
/// listed with them.
#[derive(Clone, Debug)]
pub struct ListedFile {
    pub path: PathBuf,
    pub meta: Option<FileMeta>,
    /// Why the entry cannot be read although its name says it is one of the dataset's files (a
    /// symbolic link to a missing file, a link loop, a FIFO); it becomes a rejected record.
    pub problem: Option<String>,
}

impl ListedFile {
    fn new(path: PathBuf, stamped: bool) -> Result<ListedFile> {
        let meta = match stamped {
            true => Some(FileMeta::read(&path).map_err(|e| Error::io(&path, e))?),
            false => None,
        };
        Ok(ListedFile {
            path,
            meta,
            problem: None,
        })
    }

    fn of(files: &DirFiles, i: usize) -> ListedFile {
        ListedFile {
            path: files.path(i),
            meta: files.meta(i),
            problem: files.problem(i).map(str::to_string),
        }
    }
}

/// The files of `dir` with `extension`, sorted by stem.
fn list(dir: Option<&Path>, extension: &str, stamped: bool) -> Result<DirFiles> {
    match dir {
        Some(dir) => DirFiles::list(dir, extension, stamped),
        None => Ok(DirFiles::default()),
    }
}

/// The upstream split lists' file stems and the splits they name, by their index in an
/// [`IdMap`].
const SPLIT_LISTS: [(&str, &str); 3] =
    [("train", "train"), ("val", "validation"), ("test", "test")];

/// The upstream split lists (`train.txt`, `val.txt`, `test.txt`: one image id per line); an id
/// in several lists gets the last.
fn split_lists(root: Option<&Path>) -> Result<IdMap<u8>> {
    let Some(root) = root else {
        return Ok(IdMap::default());
    };
    let mut lists = Vec::new();
    for (index, (stem, _)) in SPLIT_LISTS.iter().enumerate() {
        let path = root.join(format!("{stem}.txt"));
        if path.is_file() {
            let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
            lists.push((index as u8, String::from_utf8_lossy(bytes).into_owned()));
        }
    }
    IdMap::new(lists.iter().flat_map(|(index, text)| {
        text.split(['\n', '\r'])
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(|id| (id, *index))
    }))
}

/// One image of a Flickr30k Entities directory: its sentence and annotation files.
#[derive(Clone, Debug)]
pub struct ListedImage {
    pub id: String,
    pub sentence: Option<ListedFile>,
    pub annotation: Option<ListedFile>,
}

impl ListedImage {
    /// The image's files: its sentence file, then its annotation file.
    pub fn files(&self) -> impl Iterator<Item = &ListedFile> {
        self.sentence.iter().chain(&self.annotation)
    }
}

/// The bytes of an image's files as [`Listing::read_image`] read them, in
/// [`ListedImage::files`]' order: a file's whole bytes, or `None` for one not read whole (it
/// has a problem, or is larger than the reader holds at once). A caller that records what it
/// read hashes these rather than reading the files again.
pub type ImageBytes = Vec<FileBytes>;

/// A file's whole bytes as a reader read them, or `None` when it did not read it whole.
pub type FileBytes = Option<Vec<u8>>;

/// Where an image's files are in a [`Listing`] of a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageSlot {
    sentence: Option<usize>,
    annotation: Option<usize>,
}

/// The images of a Flickr30k Entities dataset root, sentence directory or single file, in the
/// order [`read`] reads them (by id), with the split lists' assignment of images to splits.
///
/// A directory's files are held as sorted names ([`DirFiles`]) and an image's paths are made
/// when it is visited, so a listing of a million images takes tens of megabytes.
pub struct Listing {
    sentences: DirFiles,
    annotations: DirFiles,
    /// A single file was named: only that image.
    only: Option<ListedImage>,
    splits: IdMap<u8>,
}

impl Listing {
    /// Lists the images at `path`; with `stamped`, every file's size and modification time too.
    pub fn of(path: &Path, stamped: bool) -> Result<Listing> {
        let layout = layout(path)?;
        let splits = split_lists(layout.root.as_deref())?;
        if let Some((stem, sentence, annotation)) = layout.only {
            let image = ListedImage {
                id: stem,
                sentence: sentence.map(|p| ListedFile::new(p, stamped)).transpose()?,
                annotation: annotation
                    .map(|p| ListedFile::new(p, stamped))
                    .transpose()?,
            };
            return Ok(Listing {
                sentences: DirFiles::default(),
                annotations: DirFiles::default(),
                only: Some(image),
                splits,
            });
        }
        // Listing a directory with metadata is mostly waiting on lookups: both at once.
        let (sentences, annotations) = std::thread::scope(|scope| {
            let annotations = scope.spawn(|| list(layout.annotations.as_deref(), "xml", stamped));
            let sentences = list(layout.sentences.as_deref(), "txt", stamped);
            let annotations = annotations
                .join()
                .unwrap_or_else(|_| Err(Error::Usage("listing annotations panicked".into())));
            (sentences, annotations)
        });
        Ok(Listing {
            sentences: sentences?,
            annotations: annotations?,
            only: None,
            splits,
        })
    }

    /// The images, by id: the sentence and annotation files with the same stem together.
    pub fn images(&self) -> impl Iterator<Item = ListedImage> + '_ {
        let listed = self.slots().map(|slot| self.image(slot));
        self.only.iter().cloned().chain(listed)
    }

    /// The images of [`images`](Self::images), in its order, as where their files are: `None`
    /// for the image of a single named file, else its slot. [`image_at`](Self::image_at) makes
    /// the image; a place is a few bytes where an image holds its files' paths.
    pub fn places(&self) -> impl Iterator<Item = Option<ImageSlot>> + '_ {
        let only = self.only.iter().map(|_| None);
        only.chain(self.slots().map(Some))
    }

    /// The image at a place of [`places`](Self::places).
    pub fn image_at(&self, place: Option<ImageSlot>) -> ListedImage {
        match (place, &self.only) {
            (Some(slot), _) => self.image(slot),
            (None, Some(only)) => only.clone(),
            (None, None) => ListedImage {
                id: String::new(),
                sentence: None,
                annotation: None,
            },
        }
    }

    /// The images of a listed directory, by id, as the positions of their files in the sentence
    /// and annotation listings ([`image`](Self::image) makes one): cheaper than
    /// [`images`](Self::images) where most images are skipped. None for a single file.
    pub fn slots(&self) -> impl Iterator<Item = ImageSlot> + '_ {
        let (mut s, mut a) = (0, 0);
        let (sentences, annotations) = (&self.sentences, &self.annotations);
        std::iter::from_fn(move || {
            let order = match (s < sentences.len(), a < annotations.len()) {
                (false, false) => return None,
                (true, false) => std::cmp::Ordering::Less,
                (false, true) => std::cmp::Ordering::Greater,
                (true, true) => sentences.stem(s).cmp(&annotations.stem(a)),
            };
            let slot = ImageSlot {
                sentence: order.is_le().then_some(s),
                annotation: order.is_ge().then_some(a),
            };
            s += usize::from(slot.sentence.is_some());
            a += usize::from(slot.annotation.is_some());
            Some(slot)
        })
    }

    /// The image at `slot` of [`slots`](Self::slots).
    pub fn image(&self, slot: ImageSlot) -> ListedImage {
        let id = match (slot.sentence, slot.annotation) {
            (Some(s), _) => self.sentences.stem(s).into_owned(),
            (None, Some(a)) => self.annotations.stem(a).into_owned(),
            (None, None) => String::new(),
        };
        ListedImage {
            id,
            sentence: slot.sentence.map(|s| ListedFile::of(&self.sentences, s)),
            annotation: slot
                .annotation
                .map(|a| ListedFile::of(&self.annotations, a)),
        }
    }

    /// The bytes of the files of the image at a place of [`places`](Self::places), as listed
    /// (0 for a file listed without its size): [`image_at`](Self::image_at)'s files' sizes,
    /// without making the image.
    pub fn bytes_at(&self, place: Option<ImageSlot>) -> u64 {
        let size = |meta: Option<FileMeta>| meta.map_or(0, |m| m.size);
        match (place, &self.only) {
            (Some(slot), _) => {
                slot.sentence.map_or(0, |s| size(self.sentences.meta(s)))
                    + slot
                        .annotation
                        .map_or(0, |a| size(self.annotations.meta(a)))
            }
            (None, Some(only)) => [&only.sentence, &only.annotation]
                .into_iter()
                .flatten()
                .map(|file| size(file.meta))
                .sum(),
            (None, None) => 0,
        }
    }

    /// The split the lists give an image (`unknown` when none does).
    pub fn split_of(&self, image_id: &str) -> &'static str {
        self.splits
            .get(image_id)
            .map_or("unknown", |i| SPLIT_LISTS[usize::from(i)].1)
    }

    /// Reads one listed image into `sink`, as [`read`] does; returns the bytes it read.
    pub fn read_image(&self, image: &ListedImage, sink: &mut dyn RecordSink) -> Result<ImageBytes> {
        let split = self.split_of(&image.id);
        let (sentence, annotation) = (image.sentence.as_ref(), image.annotation.as_ref());
        for (file, what) in [(annotation, "annotation file"), (sentence, "sentence file")] {
            if let Some(ListedFile {
                path,
                problem: Some(problem),
                ..
            }) = file
            {
                let at = Locator {
                    record: what.to_string(),
                    line: None,
                    byte_offset: None,
                };
                let reason = format!("the {what} is {problem}");
                Source::new(FORMAT, path).reject(sink, at, reason, "")?;
            }
        }
        fn readable(f: Option<&ListedFile>) -> Option<&Path> {
            f.filter(|f| f.problem.is_none()).map(|f| f.path.as_path())
        }
        let (sentence_bytes, annotation_bytes) = read_image(
            &image.id,
            split,
            readable(sentence),
            readable(annotation),
            sink,
        )?;
        let read = [(sentence, sentence_bytes), (annotation, annotation_bytes)];
        Ok((read.into_iter())
            .filter_map(|(file, bytes)| file.map(|_| bytes))
            .collect())
    }
}

impl Listing {
    /// Reads the records of one listed image's sentence file into `sink` as
    /// [`read_image`](Self::read_image) does, without reading its annotation file: the caption
    /// and grounding rows (the groundings without their boxes) and the sentences' rejections.
    /// When the image has an annotation file, `read_image` gives one record before them (the
    /// file's row, or its rejection): a caller numbering records counts it first.
    pub fn read_sentences(&self, image: &ListedImage, sink: &mut dyn RecordSink) -> Result<()> {
        let Some(file) = &image.sentence else {
            return Ok(());
        };
        if let Some(problem) = &file.problem {
            let at = Locator {
                record: "sentence file".to_string(),
                line: None,
                byte_offset: None,
            };
            let reason = format!("the sentence file is {problem}");
            return Source::new(FORMAT, &file.path).reject(sink, at, reason, "");
        }
        let reader = BufReader::new(super::open_input(&file.path)?);
        let source = Source::new(FORMAT, &file.path);
        let split = self.split_of(&image.id);
        read_sentences_from(reader, &image.id, split, None, &source, sink)
    }
}

/// Reads a Flickr30k Entities dataset root, sentence directory, or single file.
pub fn read(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    let listing = Listing::of(path, false)?;
    for image in listing.images() {
        listing.read_image(&image, sink)?;
    }
    Ok(())
}

/// Reads one image: its annotation file (if any) first, then its sentences. Returns the bytes
/// of its sentence file and of its annotation file, each when it was read whole.
fn read_image(
    image_id: &str,
    split: &str,
    sentence: Option<&Path>,
    annotation: Option<&Path>,
    sink: &mut dyn RecordSink,
) -> Result<(FileBytes, FileBytes)> {
    let (ann, annotation_bytes) = match annotation {
        Some(path) => {
            let source = Source::new(FORMAT, path);
            let mut file = super::open_input(path)?;
            let bytes = read_head(&mut file, path, MAX_XML_BYTES, ANNOTATION_READ_BYTES)?;
            let ann = annotation_record(&bytes, image_id, split, &source, sink)?;
            (ann, Some(bytes).filter(|b| b.len() as u64 <= MAX_XML_BYTES))
        }
        None => (None, None),
    };
    let sentence_bytes = match sentence {
        Some(path) => {
            let mut file = super::open_input(path)?;
            let bytes = read_head(&mut file, path, HELD_SENTENCE_BYTES, SENTENCE_READ_BYTES)?;
            let source = Source::new(FORMAT, path);
            let ann = ann.as_ref();
            if bytes.len() as u64 <= HELD_SENTENCE_BYTES {
                read_sentences_from(bytes.as_slice(), image_id, split, ann, &source, sink)?;
                Some(bytes)
            } else {
                let rest = BufReader::new(file);
                let reader = bytes.as_slice().chain(rest);
                read_sentences_from(reader, image_id, split, ann, &source, sink)?;
                None
            }
        }
        None => None,
    };
    Ok((sentence_bytes, annotation_bytes))
}

/// The first `held + 1` bytes of `file` (at `path`): all of it when it holds at most `held`;
/// the file is left where they end. The buffer starts with room for `room` bytes, so that a
/// file of a few KiB takes one read and one at its end, rather than the doubling reads of an
/// empty buffer, which start at 32 bytes.
fn read_head(file: &mut std::fs::File, path: &Path, held: u64, room: usize) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(room);
    (file.take(held + 1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

/// The record of an annotation file's bytes (at most one more than [`MAX_XML_BYTES`], to tell
/// a file that is too large): an [`ImageRow`] when it parses (the parsed annotation is returned
/// for the image's groundings), a rejected record when it does not.
fn annotation_record(
    bytes: &[u8],
    image_id: &str,
    split: &str,
    source: &Source,
    sink: &mut dyn RecordSink,
) -> Result<Option<ImageAnnotation>> {
    let parsed = if bytes.len() as u64 > MAX_XML_BYTES {
        Err(format!(
            "annotation file is larger than {} MiB",
            MAX_XML_BYTES >> 20
        ))
    } else {
        parse_annotation_xml(bytes)
    };
    match parsed {
        Ok(ann) => {
            sink.row(Row::Image(ImageRow {
                image_id: image_id.to_string(),
                dataset: FORMAT.into(),
                split: split.into(),
                file_name: ann.file_name.clone(),
                url: None,
                width: ann.width,
                height: ann.height,
            }))?;
            sink.accepted()?;
            Ok(Some(ann))
        }
        Err(reason) => {
            let at = Locator {
                record: "annotation file".into(),
                line: None,
                byte_offset: Some(0),
            };
            source.reject(
                sink,
                at,
                reason,
                &String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]),
            )?;
            Ok(None)
        }
    }
}

/// Reads one sentence file: every non-blank line is a caption record. `annotation` supplies
/// the boxes and flags of the image's chains. Lines end at `\n`, `\r\n` or a lone `\r`; a UTF-8
/// byte order mark at the start is skipped.
pub fn read_sentences_from(
    mut reader: impl BufRead,
    image_id: &str,
    split: &str,
    annotation: Option<&ImageAnnotation>,
    source: &Source,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    let io = |e| Error::io(&source.file, e);
    let mut line = Vec::new();
    let mut line_number = 0usize;
    let mut offset = skip_bom(&mut reader).map_err(io)?;
    let mut caption_index = 0i32;
    while let Some(read) = read_line(&mut reader, &mut line, MAX_LINE_BYTES).map_err(io)? {
        line_number += 1;
        let start = offset;
        offset += read.consumed;
        let at = Locator {
            byte_offset: Some(start),
            ..Locator::line(line_number)
        };
        let text = match std::str::from_utf8(&line) {
            _ if read.too_long => Err(format!("line is longer than {} KiB", MAX_LINE_BYTES >> 10)),
            Ok(t) => Ok(t),
            Err(e) => Err(format!("line is not UTF-8: {e}")),
        };
        let text = match text {
            Ok(t) if t.trim().is_empty() => continue,
            Ok(t) => t,
            Err(reason) => {
                source.reject(sink, at, reason, &String::from_utf8_lossy(&line))?;
                caption_index = caption_index.saturating_add(1);
                continue;
            }
        };
        match parse_caption_markup(text) {
            Ok(caption) => {
                for row in caption_rows(image_id, split, caption_index, &caption, annotation) {
                    sink.row(row)?;
                }
                sink.accepted()?;
            }
            Err(reason) => source.reject(sink, at, reason, text.trim_end())?,
        }
        caption_index = caption_index.saturating_add(1);
    }
    Ok(())
}

fn caption_rows(
    image_id: &str,
    split: &str,
    caption_index: i32,
    caption: &MarkedCaption,
    annotation: Option<&ImageAnnotation>,
) -> Vec<Row> {
    let caption_id = format!("{image_id}#{caption_index}");
    let mut rows = Vec::with_capacity(1 + caption.phrases.len());
    rows.push(Row::Caption(CaptionRow {
        image_id: image_id.to_string(),
        caption_id: caption_id.clone(),
        dataset: FORMAT.into(),
        split: split.into(),
        caption_index,
        text: caption.tokens.join(" "),
    }));
    for phrase in &caption.phrases {
        let id = phrase.chain_id.as_str();
        rows.push(Row::Grounding(GroundingRow {
            image_id: image_id.to_string(),
            caption_id: caption_id.clone(),
            phrase_id: phrase.chain_id.clone(),
            phrase: caption.tokens[phrase.start..phrase.end].join(" "),
            phrase_types: phrase.types.clone(),
            // A caption line is at most MAX_LINE_BYTES long, so token positions fit in i32.
            token_start: phrase.start as i32,
            token_end: phrase.end as i32,
            boxes: annotation
                .and_then(|a| a.boxes.get(id).cloned())
                .unwrap_or_default(),
            is_scene: annotation.is_some_and(|a| a.scene.contains(id)),
            no_box: annotation.is_some_and(|a| a.no_box.contains(id)),
            not_visual: phrase.types.iter().any(|t| t == "notvisual"),
        }));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_spans_and_types() {
        let c = parse_caption_markup(
            "[/EN#255543/people A woman] holds [/EN#255545/bodyparts/people a man 's arm] .",
        )
        .unwrap();
        assert_eq!(c.tokens.join(" "), "A woman holds a man 's arm .");
        assert_eq!(c.phrases.len(), 2);
        assert_eq!((c.phrases[1].start, c.phrases[1].end), (3, 7));
        assert_eq!(c.phrases[1].types, ["bodyparts", "people"]);
        assert_eq!(c.phrases[1].chain_id, "255545");
    }

    #[test]
    fn broken_markup_is_an_error() {
        for line in [
            "[/EN#1/people a [/EN#2/other b] c]",
            "[/EN#1/people a man",
            "a man]",
            "[/EN#1/people]",
            "[/EN#/people a]",
            "[/EN#1 a]",
            "[/EN#1/ a]",
            "[EN#1/people a]",
            "[/EN#1/people a]]",
        ] {
            assert!(parse_caption_markup(line).is_err(), "{line}");
        }
    }

    const XML: &str = r#"<annotation><filename>1.jpg</filename>
        <size><width>500</width><height>375</height><depth>3</depth></size>
        <object><name>10</name><name>11</name><bndbox><xmin>1</xmin><ymin>5</ymin><xmax>100</xmax><ymax>50</ymax></bndbox></object>
        <object><name>10</name><bndbox><xmin>20</xmin><ymin>30</ymin><xmax>40</xmax><ymax>60</ymax></bndbox></object>
        <object><name>12</name><nobndbox>1</nobndbox><scene>0</scene></object>
        <object><name>13</name><nobndbox>0</nobndbox><scene>1</scene></object>
        </annotation>"#;

    /// An image's read gives back its files' bytes in the image's file order (sentence file,
    /// then annotation file), so that a caller can hash what was read. A sentence file larger
    /// than the reader holds at once gives back none, and every caption of it is still read.
    #[test]
    fn an_image_read_gives_back_its_files_bytes_unless_too_large_to_hold() {
        let dir = tempfile::tempdir().unwrap();
        let (sentences, annotations) =
            (dir.path().join("Sentences"), dir.path().join("Annotations"));
        std::fs::create_dir_all(&sentences).unwrap();
        std::fs::create_dir_all(&annotations).unwrap();
        let caption = "[/EN#10/people A man] holds [/EN#11/other a kite] .\n";
        std::fs::write(sentences.join("1.txt"), caption.repeat(5)).unwrap();
        std::fs::write(annotations.join("1.xml"), XML).unwrap();
        let many = HELD_SENTENCE_BYTES as usize / caption.len() + 3;
        std::fs::write(sentences.join("2.txt"), caption.repeat(many)).unwrap();
        let listing = Listing::of(dir.path(), false).unwrap();
        let images: Vec<ListedImage> = listing.images().collect();
        assert_eq!(images.len(), 2);
        let read = |image: &ListedImage| {
            let mut sink = crate::ingest::VecSink::default();
            let bytes = listing.read_image(image, &mut sink).unwrap();
            (bytes, sink.accepted)
        };
        let (bytes, accepted) = read(&images[0]);
        let on_disk = |path: PathBuf| Some(std::fs::read(path).unwrap());
        assert_eq!(
            bytes,
            [
                on_disk(sentences.join("1.txt")),
                on_disk(annotations.join("1.xml"))
            ]
        );
        assert_eq!(accepted, 1 + 5);
        let (bytes, accepted) = read(&images[1]);
        assert_eq!(bytes, [None]);
        assert_eq!(accepted, many as u64);
    }

    #[test]
    fn annotation_follows_the_upstream_parser() {
        let ann = parse_annotation_xml(XML.as_bytes()).unwrap();
        assert_eq!((ann.width, ann.height), (Some(500), Some(375)));
        // Upstream gives [0, 4, 99, 49] (inclusive); the exclusive far edge adds one.
        assert_eq!(
            ann.boxes["10"],
            [
                BoxXyxy::new(0.0, 4.0, 100.0, 50.0),
                BoxXyxy::new(19.0, 29.0, 40.0, 60.0)
            ]
        );
        assert_eq!(ann.boxes["11"], [BoxXyxy::new(0.0, 4.0, 100.0, 50.0)]);
        assert!(ann.no_box.contains("12") && !ann.scene.contains("12"));
        assert!(ann.scene.contains("13") && !ann.no_box.contains("13"));
    }

    #[test]
    fn broken_annotations_are_errors() {
        for xml in [
            "<annotation><size><width>x</width></size></annotation>",
            "<annotation><object><name>1</name></object></annotation>",
            "<annotation><size><width>1</width></size><object><name>1</name><bndbox><xmin>1</xmin></bndbox></object></annotation>",
            "<annotation><size><width>1</width></size>",
            "<annotation><size><width>1</width></size><object><name>1</name><nobndbox>1</nobndbox></object></annotation>",
        ] {
            assert!(parse_annotation_xml(xml.as_bytes()).is_err(), "{xml}");
        }
    }
}
