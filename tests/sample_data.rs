//! Consistency of the embedded sample dataset in `examples/data/`.
//!
//! The README's main command runs on these files, so every cross-file promise the pipeline relies
//! on is checked here with plain parsers written from the format descriptions (the upstream
//! Flickr30k Entities parser, COCO instances, Visual Genome scene graphs, ml-gbc graphs): captions
//! and their AMRs agree token for token, every grounded phrase has a box or a flag, every box lies
//! inside its image, detections and scene graphs point at images that exist, and GBC graphs keep
//! both ends of every edge and ml-gbc's vertex naming. When the oracle Python is present, `penman`
//! reads every graph independently.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use quick_xml::events::Event;
use serde_json::Value;

const PHRASE_TYPES: [&str; 9] = [
    "people",
    "clothing",
    "bodyparts",
    "animals",
    "vehicles",
    "instruments",
    "scene",
    "other",
    "notvisual",
];

fn data_dir() -> PathBuf {
    common::repo_root().join("examples/data")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One `[/EN#chain/type... words]` phrase of a caption.
#[derive(Debug)]
struct Phrase {
    chain: String,
    types: Vec<String>,
    first_token: usize,
    words: Vec<String>,
}

#[derive(Debug)]
struct Caption {
    tokens: Vec<String>,
    phrases: Vec<Phrase>,
}

/// Parses Flickr30k Entities markup as upstream's `get_sentence_data` does, but refuses what it
/// would silently accept (nested or unclosed brackets, unknown types, empty chain ids).
fn parse_caption(line: &str, at: &str) -> Result<Caption, String> {
    let mut tokens = Vec::new();
    let mut phrases = Vec::new();
    let mut open: Option<Phrase> = None;
    for raw in line.split(' ') {
        if raw.is_empty() {
            return Err(format!("{at}: empty token (double or trailing space)"));
        }
        if let Some(phrase) = open.as_mut() {
            if raw.starts_with('[') {
                return Err(format!("{at}: phrase opened inside a phrase at {raw:?}"));
            }
            let (word, closes) = match raw.strip_suffix(']') {
                Some(word) => (word, true),
                None => (raw, false),
            };
            if word.is_empty() || word.contains(']') {
                return Err(format!("{at}: bad phrase word {raw:?}"));
            }
            phrase.words.push(word.to_string());
            tokens.push(word.to_string());
            if closes {
                phrases.extend(open.take());
            }
        } else if let Some(head) = raw.strip_prefix("[/EN#") {
            let mut parts = head.split('/');
            let chain = parts.next().unwrap_or_default().to_string();
            let types: Vec<String> = parts.map(str::to_string).collect();
            if chain.is_empty() || !chain.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{at}: bad chain id in {raw:?}"));
            }
            if types.is_empty() || types.iter().any(|t| !PHRASE_TYPES.contains(&t.as_str())) {
                return Err(format!("{at}: bad phrase types in {raw:?}"));
            }
            open = Some(Phrase {
                chain,
                types,
                first_token: tokens.len(),
                words: Vec::new(),
            });
        } else {
            if raw.contains('[') || raw.contains(']') {
                return Err(format!("{at}: stray bracket in {raw:?}"));
            }
            tokens.push(raw.to_string());
        }
    }
    if open.is_some() {
        return Err(format!("{at}: phrase not closed"));
    }
    Ok(Caption { tokens, phrases })
}

/// `(xmin, ymin, xmax, ymax)`, 1-based inclusive as in the Annotations XML.
type FlickrBox = (i64, i64, i64, i64);

#[derive(Debug, Default)]
struct Annotation {
    filename: String,
    width: i64,
    height: i64,
    boxes: BTreeMap<String, Vec<FlickrBox>>,
    scene: BTreeSet<String>,
    nobox: BTreeSet<String>,
}

/// Reads an Annotations XML file with the semantics of upstream's `get_annotations`: every
/// `<name>` of an `<object>` gets that object's box; an object without a box must say
/// `<nobndbox>` and `<scene>`.
fn parse_annotation(text: &str, at: &str) -> Result<Annotation, String> {
    let mut reader = quick_xml::Reader::from_str(text);
    reader.config_mut().trim_text(true);
    let mut out = Annotation::default();
    let mut path: Vec<String> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut coords: HashMap<String, i64> = HashMap::new();
    let mut flags: HashMap<String, i64> = HashMap::new();
    let mut has_box = false;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("{at}: XML error at byte {}: {e}", reader.buffer_position()))?;
        match event {
            Event::Start(e) => {
                let tag = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if tag == "object" {
                    names.clear();
                    coords.clear();
                    flags.clear();
                    has_box = false;
                }
                if tag == "bndbox" {
                    has_box = true;
                }
                path.push(tag);
            }
            Event::Text(t) => {
                let value = t.decode().map_err(|e| format!("{at}: {e}"))?.into_owned();
                let int = || {
                    value.parse::<i64>().map_err(|_| {
                        format!("{at}: {} is not an integer: {value:?}", path.join("/"))
                    })
                };
                match path
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .as_slice()
                {
                    ["annotation", "filename"] => out.filename = value.clone(),
                    ["annotation", "size", "width"] => out.width = int()?,
                    ["annotation", "size", "height"] => out.height = int()?,
                    ["annotation", "size", "depth"] => {
                        int()?;
                    }
                    ["annotation", "object", "name"] => names.push(value.clone()),
                    ["annotation", "object", "bndbox", corner] => {
                        coords.insert(corner.to_string(), int()?);
                    }
                    ["annotation", "object", flag @ ("nobndbox" | "scene")] => {
                        flags.insert(flag.to_string(), int()?);
                    }
                    other => return Err(format!("{at}: unexpected text in {other:?}")),
                }
            }
            Event::End(e) => {
                let tag = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if tag == "object" {
                    if names.is_empty() {
                        return Err(format!("{at}: object without <name>"));
                    }
                    if has_box {
                        let get = |k: &str| {
                            coords
                                .get(k)
                                .copied()
                                .ok_or(format!("{at}: bndbox of {names:?} lacks <{k}>"))
                        };
                        let b = (get("xmin")?, get("ymin")?, get("xmax")?, get("ymax")?);
                        for name in &names {
                            out.boxes.entry(name.clone()).or_default().push(b);
                        }
                    } else {
                        let (Some(&nobox), Some(&scene)) =
                            (flags.get("nobndbox"), flags.get("scene"))
                        else {
                            return Err(format!(
                                "{at}: {names:?} has no box and no nobndbox/scene pair"
                            ));
                        };
                        if nobox + scene == 0 {
                            return Err(format!("{at}: {names:?} has no box and no flag set"));
                        }
                        for name in &names {
                            if nobox > 0 {
                                out.nobox.insert(name.clone());
                            }
                            if scene > 0 {
                                out.scene.insert(name.clone());
                            }
                        }
                    }
                }
                path.pop();
            }
            Event::Eof => break,
            Event::Decl(_) | Event::Comment(_) => {}
            other => return Err(format!("{at}: unexpected XML event {other:?}")),
        }
    }
    Ok(out)
}

/// Everything about the 20 sample images, read once per test.
struct Sample {
    captions: BTreeMap<String, Vec<Caption>>,
    annotations: BTreeMap<String, Annotation>,
}

fn load_flickr(root: &Path) -> Result<Sample, String> {
    let sentences = root.join("flickr30k_entities/Sentences");
    let mut captions = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(&sentences)
        .map_err(|e| format!("{}: {e}", sentences.display()))?
        .map(|e| e.map(|e| e.path()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        let image = path
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or(format!("{}: bad file name", path.display()))?
            .to_string();
        let text = read(&path);
        if !text.ends_with('\n') {
            return Err(format!("{}: no final newline", path.display()));
        }
        let lines: Vec<&str> = text.lines().collect();
        let parsed = lines
            .iter()
            .enumerate()
            .map(|(k, line)| parse_caption(line, &format!("{image} line {}", k + 1)))
            .collect::<Result<Vec<_>, _>>()?;
        captions.insert(image.clone(), parsed);
        let xml = root.join(format!("flickr30k_entities/Annotations/{image}.xml"));
        annotations.insert(image.clone(), parse_annotation(&read(&xml), &image)?);
    }
    Ok(Sample {
        captions,
        annotations,
    })
}

fn sample() -> Sample {
    load_flickr(&data_dir()).unwrap_or_else(|e| panic!("{e}"))
}

fn expected_ids() -> Vec<String> {
    (1_000_001..=1_000_020)
        .map(|i: u32| i.to_string())
        .collect()
}

/// Checks the Flickr30k Entities part: 20 images × 5 captions, chains grounded in the XML, boxes
/// inside their images, splits that partition the set.
fn check_flickr(s: &Sample) -> Result<(), String> {
    let ids: Vec<String> = s.captions.keys().cloned().collect();
    if ids != expected_ids() {
        return Err(format!(
            "sentence files are {ids:?}, expected 1000001..1000020"
        ));
    }
    let xml_ids: Vec<String> = s.annotations.keys().cloned().collect();
    if xml_ids != ids {
        return Err(format!(
            "annotation files {xml_ids:?} differ from sentence files"
        ));
    }
    for (image, captions) in &s.captions {
        if captions.len() != 5 {
            return Err(format!("{image}: {} captions, expected 5", captions.len()));
        }
        let ann = &s.annotations[image];
        if ann.filename != format!("{image}.jpg") {
            return Err(format!("{image}: <filename> is {:?}", ann.filename));
        }
        if !(100..=1000).contains(&ann.width) || !(100..=1000).contains(&ann.height) {
            return Err(format!(
                "{image}: implausible size {}x{}",
                ann.width, ann.height
            ));
        }
        for (chain, boxes) in &ann.boxes {
            for &(x1, y1, x2, y2) in boxes {
                if !(1 <= x1
                    && x1 < x2
                    && x2 <= ann.width
                    && 1 <= y1
                    && y1 < y2
                    && y2 <= ann.height)
                {
                    return Err(format!(
                        "{image}: box {:?} of chain {chain} outside 1..={} x 1..={}",
                        (x1, y1, x2, y2),
                        ann.width,
                        ann.height
                    ));
                }
            }
        }
        let mut chain_types: HashMap<&str, &Vec<String>> = HashMap::new();
        let mut mentioned = BTreeSet::new();
        for (k, caption) in captions.iter().enumerate() {
            let n = caption.tokens.len();
            if !(5..=25).contains(&n) {
                return Err(format!("{image}#{k}: {n} tokens, expected 5..=25"));
            }
            if caption.phrases.is_empty() {
                return Err(format!("{image}#{k}: no phrase"));
            }
            for p in &caption.phrases {
                let span = &caption.tokens[p.first_token..p.first_token + p.words.len()];
                if span != p.words.as_slice() {
                    return Err(format!(
                        "{image}#{k}: phrase {:?} is not at its tokens",
                        p.words
                    ));
                }
                let not_visual = p.types.iter().any(|t| t == "notvisual");
                if not_visual != (p.chain == "0") {
                    return Err(format!(
                        "{image}#{k}: chain {} with types {:?}",
                        p.chain, p.types
                    ));
                }
                if not_visual {
                    continue;
                }
                if let Some(previous) = chain_types.insert(&p.chain, &p.types) {
                    if previous != &p.types {
                        return Err(format!(
                            "{image}: chain {} typed {previous:?} and {:?}",
                            p.chain, p.types
                        ));
                    }
                }
                mentioned.insert(p.chain.clone());
                let grounded = ann.boxes.contains_key(&p.chain)
                    || ann.scene.contains(&p.chain)
                    || ann.nobox.contains(&p.chain);
                if !grounded {
                    return Err(format!(
                        "{image}#{k}: chain {} ({:?}) has no box and no nobndbox/scene flag",
                        p.chain, p.words
                    ));
                }
            }
        }
        let annotated: BTreeSet<String> = ann
            .boxes
            .keys()
            .chain(&ann.scene)
            .chain(&ann.nobox)
            .cloned()
            .collect();
        let orphans: Vec<_> = annotated.difference(&mentioned).collect();
        if !orphans.is_empty() {
            return Err(format!("{image}: XML chains {orphans:?} are in no caption"));
        }
        // Chain ids are unique over the set, so no chain id may appear in two images.
        for other in s.annotations.iter().filter(|(id, _)| *id != image) {
            if let Some(shared) = mentioned.iter().find(|c| other.1.boxes.contains_key(*c)) {
                return Err(format!("chain {shared} used by {image} and {}", other.0));
            }
        }
    }
    let mut seen = BTreeSet::new();
    for split in ["train", "val", "test"] {
        let text = read(&data_dir().join(format!("flickr30k_entities/{split}.txt")));
        for id in text.lines() {
            if !s.captions.contains_key(id) {
                return Err(format!("{split}.txt lists unknown image {id}"));
            }
            if !seen.insert(id.to_string()) {
                return Err(format!("image {id} is in two splits"));
            }
        }
    }
    if seen.len() != s.captions.len() {
        return Err(format!(
            "splits cover {} of {} images",
            seen.len(),
            s.captions.len()
        ));
    }
    Ok(())
}

/// One graph of `amr/captions.amr`: its metadata and the graph text.
struct AmrBlock {
    line: usize,
    metadata: BTreeMap<String, String>,
    graph: String,
}

fn split_amr_file(text: &str) -> Vec<AmrBlock> {
    let mut blocks = Vec::new();
    let mut current: Option<AmrBlock> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            blocks.extend(current.take().filter(|b| !b.graph.is_empty()));
            continue;
        }
        let block = current.get_or_insert_with(|| AmrBlock {
            line: i + 1,
            metadata: BTreeMap::new(),
            graph: String::new(),
        });
        if let Some(meta) = line.strip_prefix("# ::") {
            let (key, value) = meta.split_once(' ').unwrap_or((meta, ""));
            block.metadata.insert(key.to_string(), value.to_string());
        } else if !line.starts_with('#') {
            block.graph.push_str(line);
            block.graph.push('\n');
        }
    }
    blocks.extend(current.filter(|b| !b.graph.is_empty()));
    blocks
}

/// Every `~e.N[,M...]` alignment in a graph, in order.
fn alignment_indices(graph: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for piece in graph.split("~e.").skip(1) {
        let digits: String = piece
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .collect();
        if digits.is_empty() {
            return Err(format!(
                "empty alignment before {:?}",
                &piece[..piece.len().min(20)]
            ));
        }
        for n in digits.split(',') {
            out.push(n.parse().map_err(|_| format!("bad alignment {digits:?}"))?);
        }
    }
    Ok(out)
}

/// Checks that every caption has exactly one AMR whose `::tok` are the caption's tokens and whose
/// alignments point inside them.
fn check_amrs(s: &Sample, text: &str) -> Result<usize, String> {
    let blocks = split_amr_file(text);
    let mut by_id: HashMap<String, &AmrBlock> = HashMap::new();
    for block in &blocks {
        let id = block
            .metadata
            .get("id")
            .ok_or(format!("graph at line {} has no ::id", block.line))?;
        if by_id.insert(id.clone(), block).is_some() {
            return Err(format!("::id {id} appears twice"));
        }
    }
    let mut aligned = 0;
    for (image, captions) in &s.captions {
        for (k, caption) in captions.iter().enumerate() {
            let id = format!("{image}.{k}");
            let block = by_id
                .remove(&id)
                .ok_or(format!("caption {id} has no AMR"))?;
            let joined = caption.tokens.join(" ");
            if block.metadata.get("tok") != Some(&joined) {
                return Err(format!(
                    "{id}: ::tok {:?} != caption {joined:?}",
                    block.metadata.get("tok")
                ));
            }
            if block.metadata.get("snt") != Some(&joined) {
                return Err(format!("{id}: ::snt differs from the caption"));
            }
            let depth = block.graph.chars().try_fold(0i64, |d, c| {
                let d = d + i64::from(c == '(') - i64::from(c == ')');
                (d >= 0).then_some(d)
            });
            if depth != Some(0) || !block.graph.trim_start().starts_with('(') {
                return Err(format!("{id}: unbalanced graph at line {}", block.line));
            }
            let indices = alignment_indices(&block.graph).map_err(|e| format!("{id}: {e}"))?;
            if indices.is_empty() {
                return Err(format!("{id}: no alignments"));
            }
            if let Some(bad) = indices.iter().find(|&&i| i >= caption.tokens.len()) {
                return Err(format!(
                    "{id}: alignment ~e.{bad} beyond {} tokens",
                    caption.tokens.len()
                ));
            }
            aligned += indices.len();
        }
    }
    if let Some(extra) = by_id.keys().next() {
        return Err(format!("AMR {extra} belongs to no caption"));
    }
    Ok(aligned)
}

/// Intersection over union of two `[x1, y1, x2, y2]` boxes.
fn iou(a: [f64; 4], b: [f64; 4]) -> f64 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = w * h;
    let area = |r: [f64; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    inter / (area(a) + area(b) - inter)
}

/// A Flickr box in capflow's 0-based pixel-edge coordinates.
fn flickr_to_xyxy(b: FlickrBox) -> [f64; 4] {
    [(b.0 - 1) as f64, (b.1 - 1) as f64, b.2 as f64, b.3 as f64]
}

fn number(v: &Value, at: &str) -> Result<f64, String> {
    v.as_f64().ok_or(format!("{at}: {v} is not a number"))
}

fn image_key(v: &Value, at: &str) -> Result<String, String> {
    v.as_u64()
        .map(|n| n.to_string())
        .ok_or(format!("{at}: image id {v} is not an integer"))
}

/// Checks the COCO-instances detections: images exist with the XML sizes, boxes lie inside them,
/// categories resolve, and every people/animal/vehicle box of the groundings was detected.
fn check_detections(s: &Sample, doc: &Value) -> Result<usize, String> {
    let mut sizes = HashMap::new();
    for (i, image) in doc["images"]
        .as_array()
        .ok_or("no images array")?
        .iter()
        .enumerate()
    {
        let at = format!("images[{i}]");
        let id = image_key(&image["id"], &at)?;
        let ann = s
            .annotations
            .get(&id)
            .ok_or(format!("{at}: unknown image {id}"))?;
        let size = (
            number(&image["width"], &at)?,
            number(&image["height"], &at)?,
        );
        if size != (ann.width as f64, ann.height as f64) {
            return Err(format!("{at}: size {size:?} differs from the XML"));
        }
        sizes.insert(id, size);
    }
    if sizes.len() != s.captions.len() {
        return Err(format!(
            "{} detection images, expected {}",
            sizes.len(),
            s.captions.len()
        ));
    }
    let categories: HashSet<u64> = doc["categories"]
        .as_array()
        .ok_or("no categories array")?
        .iter()
        .filter_map(|c| c["id"].as_u64())
        .collect();
    let mut per_image: HashMap<String, Vec<[f64; 4]>> = HashMap::new();
    let mut ids = HashSet::new();
    let annotations = doc["annotations"]
        .as_array()
        .ok_or("no annotations array")?;
    for (i, a) in annotations.iter().enumerate() {
        let at = format!("annotations[{i}]");
        let image = image_key(&a["image_id"], &at)?;
        let &(w, h) = sizes
            .get(&image)
            .ok_or(format!("{at}: image {image} is not in images"))?;
        if !ids.insert(a["id"].as_u64().ok_or(format!("{at}: no integer id"))?) {
            return Err(format!("{at}: duplicate id"));
        }
        let category = a["category_id"]
            .as_u64()
            .ok_or(format!("{at}: no category_id"))?;
        if !categories.contains(&category) {
            return Err(format!("{at}: category {category} is not in categories"));
        }
        let score = number(&a["score"], &at)?;
        if !(score > 0.0 && score <= 1.0) {
            return Err(format!("{at}: score {score}"));
        }
        let bbox = a["bbox"].as_array().ok_or(format!("{at}: no bbox"))?;
        let v = bbox
            .iter()
            .map(|x| number(x, &at))
            .collect::<Result<Vec<_>, _>>()?;
        let [x, y, bw, bh] = v[..] else {
            return Err(format!("{at}: bbox has {} numbers", v.len()));
        };
        if !(x >= 0.0 && y >= 0.0 && bw > 0.0 && bh > 0.0 && x + bw <= w && y + bh <= h) {
            return Err(format!("{at}: bbox {v:?} outside {w}x{h}"));
        }
        per_image
            .entry(image)
            .or_default()
            .push([x, y, x + bw, y + bh]);
    }
    for (image, captions) in &s.captions {
        let detected = per_image.get(image).map(Vec::as_slice).unwrap_or_default();
        if !(2..=8).contains(&detected.len()) {
            return Err(format!(
                "{image}: {} detections, expected 2..=8",
                detected.len()
            ));
        }
        let ann = &s.annotations[image];
        let detectable: BTreeSet<&str> = captions
            .iter()
            .flat_map(|c| &c.phrases)
            .filter(|p| {
                p.types
                    .iter()
                    .any(|t| matches!(t.as_str(), "people" | "animals" | "vehicles"))
            })
            .map(|p| p.chain.as_str())
            .collect();
        for chain in detectable {
            for &b in ann.boxes.get(chain).map(Vec::as_slice).unwrap_or_default() {
                let best = detected
                    .iter()
                    .map(|&d| iou(d, flickr_to_xyxy(b)))
                    .fold(0.0, f64::max);
                if best < 0.8 {
                    return Err(format!(
                        "{image}: box {b:?} of chain {chain} has no detection (best IoU {best:.2})"
                    ));
                }
            }
        }
    }
    Ok(annotations.len())
}

/// Checks the Visual Genome scene graphs: images known with the XML sizes, ids unique over the
/// file, relationships resolve inside their image, boxes inside the image.
fn check_visual_genome(s: &Sample, graphs: &Value, image_data: &Value) -> Result<usize, String> {
    let mut sizes = HashMap::new();
    for (i, d) in image_data
        .as_array()
        .ok_or("image_data is not a list")?
        .iter()
        .enumerate()
    {
        let at = format!("image_data[{i}]");
        let id = image_key(&d["image_id"], &at)?;
        let ann = s
            .annotations
            .get(&id)
            .ok_or(format!("{at}: unknown image {id}"))?;
        let size = (number(&d["width"], &at)?, number(&d["height"], &at)?);
        if size != (ann.width as f64, ann.height as f64) {
            return Err(format!("{at}: size {size:?} differs from the XML"));
        }
        sizes.insert(id, size);
    }
    let mut object_ids = HashSet::new();
    let mut relationship_ids = HashSet::new();
    let mut images = BTreeSet::new();
    for (i, g) in graphs
        .as_array()
        .ok_or("scene_graphs is not a list")?
        .iter()
        .enumerate()
    {
        let at = format!("scene_graphs[{i}]");
        let id = image_key(&g["image_id"], &at)?;
        let &(w, h) = sizes
            .get(&id)
            .ok_or(format!("{at}: image {id} missing from image_data"))?;
        images.insert(id.clone());
        let mut local = HashSet::new();
        for (j, o) in g["objects"]
            .as_array()
            .ok_or(format!("{at}: no objects"))?
            .iter()
            .enumerate()
        {
            let at = format!("{at}.objects[{j}]");
            let oid = o["object_id"]
                .as_u64()
                .ok_or(format!("{at}: no object_id"))?;
            if !object_ids.insert(oid) {
                return Err(format!("{at}: object_id {oid} used twice"));
            }
            local.insert(oid);
            let [x, y, bw, bh] = ["x", "y", "w", "h"].map(|k| o[k].as_f64().unwrap_or(-1.0));
            if !(x >= 0.0 && y >= 0.0 && bw > 0.0 && bh > 0.0 && x + bw <= w && y + bh <= h) {
                return Err(format!("{at}: box {:?} outside {w}x{h}", [x, y, bw, bh]));
            }
            let names = o["names"].as_array().ok_or(format!("{at}: no names"))?;
            if names.is_empty() || names.iter().any(|n| n.as_str().is_none_or(str::is_empty)) {
                return Err(format!("{at}: empty names"));
            }
        }
        for (j, r) in g["relationships"]
            .as_array()
            .ok_or(format!("{at}: no relationships"))?
            .iter()
            .enumerate()
        {
            let at = format!("{at}.relationships[{j}]");
            let rid = r["relationship_id"]
                .as_u64()
                .ok_or(format!("{at}: no relationship_id"))?;
            if !relationship_ids.insert(rid) {
                return Err(format!("{at}: relationship_id {rid} used twice"));
            }
            for end in ["subject_id", "object_id"] {
                let oid = r[end].as_u64().ok_or(format!("{at}: no {end}"))?;
                if !local.contains(&oid) {
                    return Err(format!("{at}: {end} {oid} is not an object of image {id}"));
                }
            }
            if r["predicate"].as_str().is_none_or(str::is_empty) {
                return Err(format!("{at}: empty predicate"));
            }
        }
    }
    if images.len() != sizes.len() {
        return Err(format!(
            "{} scene graphs for {} image_data entries",
            images.len(),
            sizes.len()
        ));
    }
    Ok(images.len())
}

fn edge_key(e: &Value) -> (String, String, String) {
    let field = |k: &str| e[k].as_str().unwrap_or("\u{0}missing").to_string();
    (field("source"), field("text"), field("target"))
}

/// Checks one ml-gbc record: unique ids, one `""` image root, both ends of every edge, the
/// vertex naming rules, and normalised boxes taken from the image's groundings.
fn check_gbc_record(s: &Sample, record: &Value, at: &str) -> Result<String, String> {
    let path = record["img_path"]
        .as_str()
        .ok_or(format!("{at}: no img_path"))?;
    let image = path
        .strip_suffix(".jpg")
        .ok_or(format!("{at}: img_path {path:?} is not <image>.jpg"))?;
    let ann = s
        .annotations
        .get(image)
        .ok_or(format!("{at}: unknown image {image}"))?;
    let size: Vec<i64> = record["img_size"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    if size != [ann.width, ann.height] {
        return Err(format!("{at}: img_size {size:?} differs from the XML"));
    }
    let vertices = record["vertices"]
        .as_array()
        .ok_or(format!("{at}: no vertices"))?;
    let mut by_id: HashMap<&str, &Value> = HashMap::new();
    for v in vertices {
        let id = v["vertex_id"]
            .as_str()
            .ok_or(format!("{at}: vertex without id"))?;
        if by_id.insert(id, v).is_some() {
            return Err(format!("{at}: vertex {id:?} twice"));
        }
    }
    let roots: Vec<&str> = vertices
        .iter()
        .filter(|v| v["label"] == "image")
        .filter_map(|v| v["vertex_id"].as_str())
        .collect();
    if roots != [""] {
        return Err(format!(
            "{at}: image roots {roots:?}, expected one with id \"\""
        ));
    }
    let grounded: Vec<[f64; 4]> = ann
        .boxes
        .values()
        .flatten()
        .map(|&b| flickr_to_xyxy(b))
        .collect();
    let (w, h) = (ann.width as f64, ann.height as f64);
    for v in vertices {
        let id = v["vertex_id"].as_str().unwrap_or_default();
        let label = v["label"].as_str().unwrap_or_default();
        let at = format!("{at} vertex {id:?}");
        if !matches!(label, "image" | "entity" | "composition" | "relation") {
            return Err(format!("{at}: label {label:?}"));
        }
        let descs = v["descs"].as_array().ok_or(format!("{at}: no descs"))?;
        if descs.is_empty()
            || descs
                .iter()
                .any(|d| d["text"].as_str().is_none_or(str::is_empty) || !d["label"].is_string())
        {
            return Err(format!("{at}: descs without text or label"));
        }
        let b = &v["bbox"];
        let [l, t, r, bo] =
            ["left", "top", "right", "bottom"].map(|k| b[k].as_f64().unwrap_or(-1.0));
        if !(0.0 <= l && l < r && r <= 1.0 && 0.0 <= t && t < bo && bo <= 1.0) {
            return Err(format!("{at}: bbox {b}"));
        }
        if label == "entity" {
            let pixels = [l * w, t * h, r * w, bo * h];
            let best = grounded.iter().map(|&g| iou(g, pixels)).fold(0.0, f64::max);
            if best < 0.99 {
                return Err(format!(
                    "{at}: bbox matches no grounded box (best IoU {best:.3})"
                ));
            }
        }
        for e in v["out_edges"]
            .as_array()
            .ok_or(format!("{at}: no out_edges"))?
        {
            let (source, text, target) = edge_key(e);
            if source != id {
                return Err(format!("{at}: out-edge from {source:?}"));
            }
            let other = by_id
                .get(target.as_str())
                .ok_or(format!("{at}: edge to missing {target:?}"))?;
            let back = other["in_edges"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| edge_key(x) == edge_key(e));
            if !back {
                return Err(format!("{at}: edge ({source:?}, {text:?}, {target:?}) missing from the target's in_edges"));
            }
            let target_label = other["label"].as_str().unwrap_or_default();
            let expected = match (label, target_label) {
                (_, "relation") => {
                    let members: Vec<String> = other["out_edges"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|x| edge_key(x).2)
                        .collect();
                    let mut sorted = members.clone();
                    sorted.sort();
                    if !members.contains(&text) || sorted != members {
                        return Err(format!("{at}: relation edge text {text:?} is not a sorted member of {members:?}"));
                    }
                    format!("[{}]", members.join("|"))
                }
                ("relation", _) => text.clone(),
                ("image", _) => text.clone(),
                ("composition", _) => {
                    let k = target.strip_prefix(&format!("{id}_")).unwrap_or_default();
                    if k.is_empty() || !k.bytes().all(|c| c.is_ascii_digit()) {
                        return Err(format!(
                            "{at}: composition child {target:?} is not {id}_<k>"
                        ));
                    }
                    target.clone()
                }
                _ => format!("{id}_{text}"),
            };
            if target != expected {
                return Err(format!(
                    "{at}: edge {text:?} leads to {target:?}, expected {expected:?}"
                ));
            }
        }
        for e in v["in_edges"]
            .as_array()
            .ok_or(format!("{at}: no in_edges"))?
        {
            let (source, _, target) = edge_key(e);
            if target != id {
                return Err(format!("{at}: in-edge to {target:?}"));
            }
            let other = by_id
                .get(source.as_str())
                .ok_or(format!("{at}: edge from missing {source:?}"))?;
            if !other["out_edges"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| edge_key(x) == edge_key(e))
            {
                return Err(format!(
                    "{at}: in-edge from {source:?} missing from its out_edges"
                ));
            }
        }
        if label == "composition" {
            let children: Vec<String> = v["out_edges"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| edge_key(x).2)
                .collect();
            let expected: Vec<String> = (0..children.len()).map(|k| format!("{id}_{k}")).collect();
            if children != expected {
                return Err(format!(
                    "{at}: composition children {children:?}, expected {expected:?}"
                ));
            }
        }
        if label != "image" && v["in_edges"].as_array().is_none_or(Vec::is_empty) {
            return Err(format!("{at}: unreachable vertex"));
        }
    }
    Ok(image.to_string())
}

#[test]
fn flickr30k_entities_captions_and_boxes_are_consistent() {
    check_flickr(&sample()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_caption_has_one_aligned_amr() {
    let s = sample();
    let text = read(&data_dir().join("amr/captions.amr"));
    let aligned = check_amrs(&s, &text).unwrap_or_else(|e| panic!("{e}"));
    assert!(aligned >= 500, "only {aligned} alignments over 100 graphs");
}

#[test]
fn detections_lie_inside_known_images_and_cover_the_groundings() {
    let s = sample();
    let doc = read_json(&data_dir().join("detections/instances.json"));
    let n = check_detections(&s, &doc).unwrap_or_else(|e| panic!("{e}"));
    assert!(n >= 40, "{n} detections");
}

#[test]
fn visual_genome_ids_resolve() {
    let s = sample();
    let graphs = read_json(&data_dir().join("visual_genome/scene_graphs.json"));
    let image_data = read_json(&data_dir().join("visual_genome/image_data.json"));
    let n = check_visual_genome(&s, &graphs, &image_data).unwrap_or_else(|e| panic!("{e}"));
    assert!((6..=10).contains(&n), "{n} scene graphs");
}

#[test]
fn gbc_graphs_keep_both_edge_ends_and_ml_gbc_naming() {
    let s = sample();
    let text = read(&data_dir().join("gbc/sample_gbc.jsonl"));
    let mut images = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("sample_gbc.jsonl line {}", i + 1);
        let record: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{at}: {e}"));
        let image = check_gbc_record(&s, &record, &at).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            images.insert(image.clone()),
            "{at}: second graph for {image}"
        );
    }
    assert!(
        (3..=4).contains(&images.len()),
        "{} GBC graphs",
        images.len()
    );
}

/// `penman` (the reference PENMAN library) reads every graph, and its own view of ids, tokens
/// and alignments agrees with the captions.
#[test]
fn penman_reads_every_graph_with_alignments_in_range() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let script = r#"
import json, sys, penman
from penman import surface
graphs = penman.load(sys.argv[1])
out = []
for g in graphs:
    n = len(g.metadata["tok"].split())
    indices = [i for a in surface.alignments(g).values() for i in a.indices]
    out.append({"id": g.metadata["id"], "tok": g.metadata["tok"], "max": max(indices), "n": n,
                "instances": len(g.instances()), "aligned": len(indices)})
print(json.dumps(out))
"#;
    let output = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(data_dir().join("amr/captions.amr"))
        .output()
        .expect("run the oracle python");
    assert!(
        output.status.success(),
        "penman failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let graphs: Vec<Value> =
        serde_json::from_slice(&output.stdout).expect("penman summary is JSON");
    let s = sample();
    assert_eq!(graphs.len(), 100);
    for g in &graphs {
        let id = g["id"].as_str().expect("id");
        let (image, k) = id.rsplit_once('.').expect("<image>.<k>");
        let caption = &s.captions[image][k.parse::<usize>().expect("numeric k")];
        assert_eq!(
            g["tok"].as_str(),
            Some(caption.tokens.join(" ").as_str()),
            "{id}"
        );
        assert!(
            g["max"].as_u64().expect("max") < g["n"].as_u64().expect("n"),
            "{id}: {g}"
        );
        assert!(
            g["aligned"].as_u64() >= Some(3),
            "{id}: too few alignments: {g}"
        );
    }
}

/// The checks above must be able to fail: each broken copy of a sample file is rejected.
#[test]
fn checks_reject_broken_sample_files() {
    let s = sample();
    // A caption whose chain has neither a box nor a flag.
    let mut broken = load_flickr(&data_dir()).unwrap_or_else(|e| panic!("{e}"));
    let caption = &mut broken.captions.get_mut("1000003").expect("1000003")[0];
    caption.phrases[0].chain = "3999".into();
    assert!(check_flickr(&broken).is_err_and(|e| e.contains("3999")));
    // A box past the image edge.
    let xml = read(&data_dir().join("flickr30k_entities/Annotations/1000002.xml"));
    let wide = xml.replacen("<xmax>331</xmax>", "<xmax>501</xmax>", 1);
    assert_ne!(xml, wide, "fixture box changed; update this test");
    let mut broken = load_flickr(&data_dir()).unwrap_or_else(|e| panic!("{e}"));
    broken.annotations.insert(
        "1000002".into(),
        parse_annotation(&wide, "1000002").expect("xml"),
    );
    assert!(check_flickr(&broken).is_err_and(|e| e.contains("outside")));
    // Markup errors.
    assert!(parse_caption("[/EN#1/people A man [/EN#2/other hat] .", "x").is_err());
    assert!(parse_caption("[/EN#1/person A man] .", "x").is_err());
    // AMR: a token out of range, a missing graph, a wrong ::tok.
    let amr = read(&data_dir().join("amr/captions.amr"));
    assert!(check_amrs(&s, &amr.replacen("~e.3", "~e.30", 1)).is_err_and(|e| e.contains("beyond")));
    assert!(check_amrs(&s, &amr.replacen("# ::id 1000020.4", "# ::id 1000020.9", 1)).is_err());
    assert!(check_amrs(
        &s,
        &amr.replacen("# ::tok A young man", "# ::tok A young  man", 1)
    )
    .is_err());
    // Detections: an unknown image, a box past the edge.
    let doc = read_json(&data_dir().join("detections/instances.json"));
    let mut bad = doc.clone();
    bad["annotations"][0]["image_id"] = 1_000_099.into();
    assert!(check_detections(&s, &bad).is_err_and(|e| e.contains("1000099")));
    let mut bad = doc.clone();
    bad["annotations"][0]["bbox"][2] = 900.0.into();
    assert!(check_detections(&s, &bad).is_err_and(|e| e.contains("outside")));
    // Visual Genome: a dangling relationship end.
    let graphs = read_json(&data_dir().join("visual_genome/scene_graphs.json"));
    let image_data = read_json(&data_dir().join("visual_genome/image_data.json"));
    let mut bad = graphs.clone();
    bad[0]["relationships"][0]["object_id"] = 1.into();
    assert!(check_visual_genome(&s, &bad, &image_data).is_err_and(|e| e.contains("not an object")));
    // GBC: an edge kept on one end only, a child that breaks the naming rule.
    let line = read(&data_dir().join("gbc/sample_gbc.jsonl"));
    let record: Value = serde_json::from_str(line.lines().next().expect("a record")).expect("json");
    let mut bad = record.clone();
    let root = &mut bad["vertices"][0];
    root["out_edges"].as_array_mut().expect("edges").pop();
    assert!(
        check_gbc_record(&s, &bad, "gbc").is_err_and(|e| e.contains("missing from its out_edges"))
    );
    let renamed = serde_json::to_string(&record)
        .expect("json")
        .replace("\"man_shorts\"", "\"shorts\"");
    let bad: Value = serde_json::from_str(&renamed).expect("json");
    assert!(check_gbc_record(&s, &bad, "gbc").is_err_and(|e| e.contains("expected \"man_shorts\"")));
}

/// The crate's own readers take the sample in without a single rejected record, and see what
/// the plain parsers above see.
#[test]
fn crate_readers_accept_the_whole_sample() {
    use capflow::ingest::{read_input, Format, Row, VecSink};

    let s = sample();
    let mut flickr = VecSink::default();
    read_input(
        Format::Flickr30kEntities,
        &data_dir().join("flickr30k_entities"),
        &mut flickr,
    )
    .expect("flickr30k reader");
    assert!(flickr.rejected.is_empty(), "{:?}", flickr.rejected);
    let phrases: usize = s.captions.values().flatten().map(|c| c.phrases.len()).sum();
    let (mut images, mut captions, mut groundings) = (0, 0, 0);
    let mut splits: BTreeMap<String, usize> = BTreeMap::new();
    for row in &flickr.rows {
        match row {
            Row::Image(r) => {
                images += 1;
                let ann = &s.annotations[&r.image_id];
                assert_eq!(
                    (r.width, r.height),
                    (Some(ann.width as i32), Some(ann.height as i32))
                );
            }
            Row::Caption(r) => {
                captions += 1;
                *splits.entry(r.split.clone()).or_default() += 1;
            }
            Row::Grounding(r) => {
                groundings += 1;
                let grounded = !r.boxes.is_empty() || r.is_scene || r.no_box;
                assert!(
                    r.not_visual || grounded,
                    "{} {}: ungrounded",
                    r.caption_id,
                    r.phrase_id
                );
            }
            other => panic!("unexpected row {other:?}"),
        }
    }
    assert_eq!((images, captions, groundings), (20, 100, phrases));
    assert_eq!(flickr.counts().accepted, 120);
    let expected: BTreeMap<String, usize> = [
        ("test".to_string(), 15),
        ("train".to_string(), 70),
        ("validation".to_string(), 15),
    ]
    .into();
    assert_eq!(splits, expected);

    let mut detections = VecSink::default();
    read_input(
        Format::CocoInstances,
        &data_dir().join("detections/instances.json"),
        &mut detections,
    )
    .expect("coco instances reader");
    assert!(detections.rejected.is_empty(), "{:?}", detections.rejected);
    // The instances reader keeps boxes and labels; the sample's detector `score`s are extra.
    let detected = detections
        .rows
        .iter()
        .filter(|r| matches!(r, Row::Detection(d) if s.captions.contains_key(&d.image_id)))
        .count();
    let listed = read_json(&data_dir().join("detections/instances.json"))["annotations"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(detected, listed);

    let mut scene_graphs = VecSink::default();
    read_input(
        Format::VisualGenome,
        &data_dir().join("visual_genome/scene_graphs.json"),
        &mut scene_graphs,
    )
    .expect("visual genome reader");
    assert!(
        scene_graphs.rejected.is_empty(),
        "{:?}",
        scene_graphs.rejected
    );
    let graphs: Vec<_> = scene_graphs
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::SceneGraph(g) => Some(g),
            _ => None,
        })
        .collect();
    assert_eq!(graphs.len(), 8);
    for g in graphs {
        let ann = &s.annotations[&g.image_id];
        assert_eq!(
            (g.width, g.height),
            (Some(ann.width as i32), Some(ann.height as i32)),
            "{}",
            g.image_id
        );
        assert!(!g.relationships.is_empty(), "{}", g.image_id);
    }
}
