//! CutSwap's corpus-level [`Model`] fitted from mergeable statistics of the images.
//!
//! # Execution model
//!
//! Accumulate per worker, merge, fit once:
//!
//! 1. Each worker makes a [`CutswapStats`] with the run's [`Config`] and adds every image it
//!    holds with [`CutswapStats::add_image`], each image once with all its rows.
//! 2. The workers' statistics are combined with [`CutswapStats::merge`], in any order and
//!    grouping; they serialize with serde (bincode included) to cross process boundaries.
//! 3. [`from_stats`] fits the model once from the total.
//!
//! [`fit`](super::fit) is exactly these three steps over one statistics object.
//!
//! # Independent of partition and order
//!
//! Everything gathered is exact and keyed: sets of names, integer co-occurrence counts
//! ([`PpmiStats`]), and each image's contribution under its image id. No float is computed
//! before [`from_stats`], which reads the images in image-id order, and each image's captions
//! and boxes in the image's own row order, just as `fit` always did after sorting the images by
//! id. So the model is bit for bit the same however the images were split between statistics
//! objects, and whatever order images were added and statistics merged in.
//!
//! An image id added more than once (the engine adds each image once) keeps every
//! contribution; [`from_stats`] reads them one after another in a canonical order (by their
//! serialized content), where `fit` on such input used to read them in input order.
//!
//! # Why captions are kept per image
//!
//! Which words of a caption are objects and attributes depends on the whole dataset: the object
//! vocabulary is the class names of every image's detections and scene graphs, and an attribute
//! word is one of WordNet's or of the dataset's scene graphs and detections, and no class name.
//! An image's captions therefore cannot be reduced to counts before every image has been seen.
//! The statistics keep what reading a caption needs and nothing more: its id, the lower-case
//! text of its tokens, and for grounded captions the head token and boxes of each grounded
//! phrase. Mentions, surface forms, attribute counts and the boxes' NMS are all computed in
//! [`from_stats`].
//!
//! # Memory
//!
//! - Per image: its id, image file name and size; per caption its id, its tokens' text (about
//!   the caption's length) and its grounded phrases' heads and boxes (about 32 bytes each plus
//!   32 per box); per detection or scene-graph object name its class name, box, score and
//!   attribute words. This is of the order of the image's caption, grounding and detection rows
//!   without their other columns; the fitted model keeps per-image data of the same order
//!   (image files, the boxes of each object per image as swap donors, caption ids per attribute
//!   pair).
//! - Per class: each distinct class name and dataset attribute word, once.
//! - Per word (only without a word-vector file): the PPMI counts, a count per distinct caption
//!   token and per distinct pair of tokens co-occurring within the window ([`PpmiStats`]).
//!
//! [`CutswapStats::approx_bytes`] estimates the total.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::mem::size_of;

use serde::{Deserialize, Serialize};

use super::caption::{self, mentions_of_words, phrase_heads};
use super::text::caption_groundings;
use super::vocabulary::{normalize_name, AttributeStatistics, ObjectVocabulary};
use super::{
    clusters, image, labelled_boxes, lemma_vector, ClusterCount, Config, ImageFile, Model,
    ObjectBox, VectorFileFormat,
};
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::models::Embedder;
use crate::schema::BoxXyxy;
use crate::text::ppmi::{PpmiConfig, PpmiStats};
use crate::text::tokenize::tokenize;
use crate::text::{VectorFormat, WordVectors};

/// Mergeable statistics of a dataset's images from which [`from_stats`] fits CutSwap's
/// [`Model`] (see the [module docs](self) for the execution model, why the result does not
/// depend on partition or order, and how the memory grows).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CutswapStats {
    /// Class names of detections and scene-graph objects, normalised ([`normalize_name`]).
    class_names: BTreeSet<String>,
    /// Attribute words of detections and scene-graph objects: normalised, single alphabetic
    /// words.
    dataset_attributes: BTreeSet<String>,
    /// Each image's contribution, by image id.
    images: BTreeMap<String, ImageStats>,
    /// Further contributions of image ids added more than once (every key is in `images`).
    repeated: BTreeMap<String, Vec<ImageStats>>,
    /// Token and co-occurrence counts of the captions for the PPMI word vectors; `None` when
    /// the config names a word-vector file.
    ppmi: Option<PpmiStats>,
    /// Images added.
    images_added: u64,
    /// Heap bytes of `images` and `repeated`, roughly.
    image_bytes: usize,
}

/// What one image contributes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ImageStats {
    file_name: Option<String>,
    size: Option<(f64, f64)>,
    captions: Vec<CaptionStats>,
    /// Detection and scene-graph boxes, in [`labelled_boxes`] order.
    boxes: Vec<LabelledBox>,
}

/// What reading one caption needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CaptionStats {
    caption_id: String,
    /// The lower-case text of the caption's tokens ([`caption::tokens`]), separated by single
    /// spaces (a token holds no whitespace).
    words: String,
    /// `None` when the caption has no grounding rows; otherwise, for each token that heads a
    /// grounded phrase, that token and the boxes of the first phrase it heads, in the order of
    /// the caption's grounding rows.
    groundings: Option<Vec<GroundedHead>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct GroundedHead {
    head: usize,
    boxes: Vec<BoxXyxy>,
}

/// A detection or a scene-graph object name with its box.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LabelledBox {
    /// The class name, normalised.
    label: String,
    bbox: BoxXyxy,
    score: f64,
    /// The attribute words, normalised.
    attributes: Vec<String>,
}

impl CaptionStats {
    fn words(&self) -> Vec<&str> {
        if self.words.is_empty() {
            Vec::new()
        } else {
            self.words.split(' ').collect()
        }
    }

    fn heap_bytes(&self) -> usize {
        self.caption_id.len()
            + self.words.len()
            + self.groundings.as_ref().map_or(0, |g| {
                g.iter()
                    .map(|h| size_of::<GroundedHead>() + h.boxes.len() * size_of::<BoxXyxy>())
                    .sum()
            })
    }
}

impl ImageStats {
    fn of(image: &ImageAnnotations) -> ImageStats {
        let captions = image
            .captions
            .iter()
            .map(|row| {
                let tokens = caption::tokens(&row.text);
                let groundings = caption_groundings(image, row);
                let grounded = (!groundings.is_empty()).then(|| {
                    let mut kept: Vec<GroundedHead> = Vec::new();
                    for (head, grounding) in phrase_heads(&tokens, &groundings)
                        .into_iter()
                        .zip(&groundings)
                    {
                        // Only the first phrase a token heads is ever looked up.
                        match head {
                            Some(head) if kept.iter().all(|k| k.head != head) => {
                                kept.push(GroundedHead {
                                    head,
                                    boxes: grounding.boxes.clone(),
                                });
                            }
                            _ => {}
                        }
                    }
                    kept
                });
                let words: Vec<&str> = tokens.iter().map(|t| t.norm.as_str()).collect();
                debug_assert!(words.iter().all(|w| !w.is_empty() && !w.contains(' ')));
                CaptionStats {
                    caption_id: row.caption_id.clone(),
                    words: words.join(" "),
                    groundings: grounded,
                }
            })
            .collect();
        let boxes = labelled_boxes(image)
            .into_iter()
            .map(|(label, bbox, score, attributes)| LabelledBox {
                label: normalize_name(label),
                bbox,
                score,
                attributes: attributes.iter().map(|a| normalize_name(a)).collect(),
            })
            .collect();
        ImageStats {
            file_name: image.image.as_ref().and_then(|i| i.file_name.clone()),
            size: image.size(),
            captions,
            boxes,
        }
    }

    /// Heap bytes held with its image id as a map entry, roughly.
    fn heap_bytes(&self, image_id: &str) -> usize {
        let captions: usize = self
            .captions
            .iter()
            .map(|c| size_of::<CaptionStats>() + c.heap_bytes())
            .sum();
        let boxes: usize = self
            .boxes
            .iter()
            .map(|b| {
                size_of::<LabelledBox>()
                    + b.label.len()
                    + b.attributes
                        .iter()
                        .map(|a| size_of::<String>() + a.len())
                        .sum::<usize>()
            })
            .sum();
        // A B-tree entry: the key and value, and a share of the node.
        size_of::<String>()
            + size_of::<ImageStats>()
            + 16
            + image_id.len()
            + self.file_name.as_ref().map_or(0, String::len)
            + captions
            + boxes
    }

    /// A total order of an image id's repeated contributions that depends on their content
    /// only.
    fn canonical_key(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The window of the caption co-occurrences CutSwap's PPMI vectors are trained with.
fn ppmi_config(config: &Config) -> PpmiConfig {
    PpmiConfig {
        dims: config.ppmi_dims,
        ..PpmiConfig::default()
    }
}

impl CutswapStats {
    /// Empty statistics for a model fitted with `config` (the one later given to
    /// [`from_stats`]). Caption co-occurrences for the PPMI vectors are counted only when
    /// `config` names no word-vector file.
    pub fn new(config: &Config) -> CutswapStats {
        CutswapStats {
            class_names: BTreeSet::new(),
            dataset_attributes: BTreeSet::new(),
            images: BTreeMap::new(),
            repeated: BTreeMap::new(),
            ppmi: config
                .vectors
                .is_none()
                .then(|| PpmiStats::new(ppmi_config(config).window)),
            images_added: 0,
            image_bytes: 0,
        }
    }

    /// Adds everything one image contributes: its detections' and scene-graph objects' class
    /// names, attribute words and boxes, its image file, its captions (to be read against the
    /// dataset's vocabulary in [`from_stats`]) and their word co-occurrences.
    ///
    /// Each image is meant to be added once, with all its rows (see the [module docs](self)
    /// for an image id added twice).
    pub fn add_image(&mut self, image: &ImageAnnotations) {
        for d in &image.detections {
            self.class_names.insert(normalize_name(&d.label));
            add_attributes(&mut self.dataset_attributes, &d.attributes);
        }
        for graph in &image.scene_graphs {
            for object in &graph.objects {
                for name in &object.names {
                    self.class_names.insert(normalize_name(name));
                }
                add_attributes(&mut self.dataset_attributes, &object.attributes);
            }
        }
        if let Some(ppmi) = &mut self.ppmi {
            for row in &image.captions {
                ppmi.add_sentence(&tokenize(&row.text));
            }
        }
        let contribution = ImageStats::of(image);
        self.image_bytes += contribution.heap_bytes(&image.image_id);
        self.insert_image(image.image_id.clone(), contribution);
        self.images_added += 1;
    }

    fn insert_image(&mut self, image_id: String, contribution: ImageStats) {
        match self.images.entry(image_id) {
            Entry::Vacant(slot) => {
                slot.insert(contribution);
            }
            Entry::Occupied(slot) => self
                .repeated
                .entry(slot.key().clone())
                .or_default()
                .push(contribution),
        }
    }

    /// Adds `other`'s statistics to these; the result does not depend on the order or grouping
    /// of merges.
    ///
    /// # Panics
    ///
    /// When one was made for a config with a word-vector file and the other without.
    pub fn merge(&mut self, mut other: CutswapStats) {
        match (&mut self.ppmi, other.ppmi.take()) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (None, None) => {}
            _ => panic!(
                "cutswap statistics gathered with and without a word-vector file cannot be merged"
            ),
        }
        if other.images.len() > self.images.len() {
            std::mem::swap(&mut self.images, &mut other.images);
            std::mem::swap(&mut self.repeated, &mut other.repeated);
        }
        for (image_id, contribution) in other.images {
            self.insert_image(image_id, contribution);
        }
        for (image_id, contributions) in other.repeated {
            self.repeated
                .entry(image_id)
                .or_default()
                .extend(contributions);
        }
        if other.class_names.len() > self.class_names.len() {
            std::mem::swap(&mut self.class_names, &mut other.class_names);
        }
        self.class_names.append(&mut other.class_names);
        if other.dataset_attributes.len() > self.dataset_attributes.len() {
            std::mem::swap(&mut self.dataset_attributes, &mut other.dataset_attributes);
        }
        self.dataset_attributes
            .append(&mut other.dataset_attributes);
        self.images_added += other.images_added;
        self.image_bytes += other.image_bytes;
    }

    /// The number of images added (over every merged statistics object).
    pub fn images(&self) -> u64 {
        self.images_added
    }

    /// Heap bytes held, roughly (for memory accounting).
    pub fn approx_bytes(&self) -> usize {
        let set_bytes = |set: &BTreeSet<String>| -> usize {
            set.iter().map(|s| size_of::<String>() + 8 + s.len()).sum()
        };
        self.image_bytes
            + self.repeated.len() * (size_of::<String>() + size_of::<Vec<ImageStats>>())
            + set_bytes(&self.class_names)
            + set_bytes(&self.dataset_attributes)
            + self.ppmi.as_ref().map_or(0, PpmiStats::approx_bytes)
    }
}

/// Adds the attribute words of a detection or scene-graph object that can be attributes in a
/// caption: single alphabetic words.
fn add_attributes(set: &mut BTreeSet<String>, attributes: &[String]) {
    for attribute in attributes {
        let attribute = normalize_name(attribute);
        if !attribute.contains(' ') && attribute.chars().all(char::is_alphabetic) {
            set.insert(attribute);
        }
    }
}

/// A model of the vocabulary of `class_names` and the attribute words, with nothing learned
/// from captions or boxes yet.
fn empty_model(
    config: &Config,
    class_names: &BTreeSet<String>,
    dataset_attributes: BTreeSet<String>,
) -> Result<Model> {
    Ok(Model {
        config: config.clone(),
        vocabulary: ObjectVocabulary::from_class_names(class_names),
        dataset_attributes,
        forms: BTreeMap::new(),
        attributes: AttributeStatistics::default(),
        lemmas: Vec::new(),
        lemma_index: Default::default(),
        vectors: Vec::new(),
        clusters: clusters::cluster(&[], ClusterCount::Silhouette)?,
        boxes: BTreeMap::new(),
        image_files: BTreeMap::new(),
    })
}

/// Fits the model from the statistics of every image of the dataset (see the module docs of
/// [`super`] for what it holds).
///
/// Fails when `config` is invalid, when the word-vector file cannot be read, when `config`
/// trains PPMI vectors but the statistics were gathered for a config with a vector file (no
/// caption co-occurrences), or when the statistics are malformed.
pub fn from_stats(stats: CutswapStats, config: &Config) -> Result<Model> {
    from_stats_with(stats, config, None)
}

/// [`from_stats`], with the object lemmas' vectors from `embedder` (the recipe's
/// `[models.embedder]`) when one is given, in place of a word-vector file or PPMI vectors.
pub fn from_stats_with(
    stats: CutswapStats,
    config: &Config,
    embedder: Option<&dyn Embedder>,
) -> Result<Model> {
    config.validate()?;
    let invalid = |reason: &str| Err(Error::invalid("cutswap statistics", reason));
    let CutswapStats {
        class_names,
        dataset_attributes,
        images,
        mut repeated,
        ppmi,
        ..
    } = stats;
    let ppmi = match (&config.vectors, ppmi) {
        _ if embedder.is_some() => None,
        (Some(_), _) => None,
        (None, Some(ppmi)) if ppmi.window() == ppmi_config(config).window.max(1) => Some(ppmi),
        (None, Some(_)) => return invalid("caption co-occurrences counted in another window"),
        (None, None) => {
            return invalid(
                "gathered for a word-vector file, without the caption co-occurrences that \
                 PPMI vectors are trained on",
            )
        }
    };
    if repeated.keys().any(|id| !images.contains_key(id)) {
        return invalid("a repeated image id has no first contribution");
    }

    let mut model = empty_model(config, &class_names, dataset_attributes)?;

    let mut raw_boxes: BTreeMap<(String, String), Vec<ObjectBox>> = BTreeMap::new();
    for (image_id, first) in images {
        match repeated.remove(&image_id) {
            None => model.read_image(&image_id, &first, &mut raw_boxes),
            Some(more) => {
                let mut all = vec![first];
                all.extend(more);
                all.sort_by_cached_key(ImageStats::canonical_key);
                for contribution in &all {
                    model.read_image(&image_id, contribution, &mut raw_boxes);
                }
            }
        }
    }
    model.attributes.retain_frequent(config.min_attribute_count);
    for ((lemma, image_id), boxes) in raw_boxes {
        let kept = image::nms(boxes, config.image.nms_iou);
        model.boxes.entry(lemma).or_default().insert(image_id, kept);
    }

    let table = match embedder {
        Some(embedder) => embedded_words(embedder, &model.forms)?,
        None => word_vectors(ppmi, config)?,
    };
    for lemma in model.forms.keys() {
        if let Some(vector) = lemma_vector(&table, lemma, &model.forms[lemma]) {
            model.lemma_index.insert(lemma.clone(), model.lemmas.len());
            model.lemmas.push(lemma.clone());
            model.vectors.push(vector);
        }
    }
    model.clusters = clusters::cluster(&model.vectors, config.clusters)?;
    Ok(model)
}

impl Model {
    /// Reads one image's contribution against the vocabulary: its file, the surface forms,
    /// attributes and grounded boxes of its captions' object mentions, and its detection and
    /// scene-graph boxes of vocabulary classes (added to `raw_boxes` by lemma and image).
    fn read_image(
        &mut self,
        image_id: &str,
        contribution: &ImageStats,
        raw_boxes: &mut BTreeMap<(String, String), Vec<ObjectBox>>,
    ) {
        self.image_files.insert(
            image_id.to_string(),
            ImageFile {
                file_name: contribution.file_name.clone(),
                size: contribution.size,
            },
        );
        for caption in &contribution.captions {
            let words = caption.words();
            let heads: Option<Vec<Option<usize>>> = caption
                .groundings
                .as_ref()
                .map(|g| g.iter().map(|h| Some(h.head)).collect());
            let mentions = mentions_of_words(&words, heads.as_deref(), &self.vocabulary, |w| {
                self.is_attribute(w)
            });
            for mention in &mentions {
                let surface = words[mention.object.clone()].join(" ");
                self.forms
                    .entry(mention.lemma.clone())
                    .or_default()
                    .add(&surface, mention.number);
                for attribute in &mention.attribute_words {
                    self.attributes
                        .add(&mention.lemma, attribute, &caption.caption_id);
                }
                let grounded = mention
                    .grounding
                    .and_then(|g| caption.groundings.as_ref().map(|all| &all[g]));
                for bbox in grounded.iter().flat_map(|g| &g.boxes) {
                    raw_boxes
                        .entry((mention.lemma.clone(), image_id.to_string()))
                        .or_default()
                        .push(ObjectBox {
                            image_id: image_id.to_string(),
                            bbox: *bbox,
                            score: 1.0,
                            attributes: mention.attribute_words.iter().cloned().collect(),
                        });
                }
            }
        }
        for b in &contribution.boxes {
            if let Some((lemma, _)) = self.vocabulary.lookup(&b.label) {
                raw_boxes
                    .entry((lemma.to_string(), image_id.to_string()))
                    .or_default()
                    .push(ObjectBox {
                        image_id: image_id.to_string(),
                        bbox: b.bbox,
                        score: b.score,
                        attributes: b.attributes.iter().cloned().collect(),
                    });
            }
        }
    }
}

/// The word vectors of the run: the configured file, or PPMI vectors of the captions' counts.
fn word_vectors(ppmi: Option<PpmiStats>, config: &Config) -> Result<WordVectors> {
    if let Some(path) = &config.vectors {
        let format = match config.vector_format {
            VectorFileFormat::Glove => VectorFormat::Glove,
            VectorFileFormat::Word2vec => VectorFormat::Word2VecText,
            VectorFileFormat::Detect => VectorFormat::Detect,
        };
        return WordVectors::read(path, format);
    }
    let pairs = ppmi
        .map(|p| p.fit(&ppmi_config(config)))
        .unwrap_or_default();
    if pairs.is_empty() {
        return Ok(WordVectors::default());
    }
    WordVectors::from_pairs(pairs)
}

/// Vectors from `embedder` for every word of the object lemmas and their surface forms: the
/// table [`super::lemma_vector`] averages, as it does a word-vector file's.
fn embedded_words(
    embedder: &dyn Embedder,
    forms: &BTreeMap<String, super::vocabulary::SurfaceForms>,
) -> Result<WordVectors> {
    let words: Vec<String> = forms
        .iter()
        .flat_map(|(lemma, forms)| std::iter::once(lemma.as_str()).chain(forms.all()))
        .flat_map(|phrase| phrase.split(' '))
        .filter(|w| !w.is_empty())
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .map(str::to_string)
        .collect();
    if words.is_empty() {
        return Ok(WordVectors::default());
    }
    let vectors = embedder
        .embed(&words)
        .map_err(|e| e.context("cutswap: embedding the object words"))?;
    let vectors = crate::models::one_per_request(
        "embedder",
        "cutswap object words",
        words.len(),
        vectors,
        "vectors",
    )?;
    WordVectors::from_pairs(words.iter().zip(vectors))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::super::fit;
    use super::*;
    use crate::ingest::{read_input, Format, VecSink};
    use crate::schema::DetectionRow;
    use crate::text::ppmi::train_ppmi_vectors;

    /// The embedded sample data the CutSwap tests use (Flickr30k Entities captions with
    /// groundings, COCO detections, Visual Genome scene graphs), plus, with `coco_captions`,
    /// the COCO captions of the same images (captions without groundings).
    fn sample_images(coco_captions: bool) -> Vec<ImageAnnotations> {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data");
        let mut inputs = vec![
            (Format::Flickr30kEntities, "flickr30k_entities"),
            (Format::CocoInstances, "detections/instances.json"),
            (Format::VisualGenome, "visual_genome/scene_graphs.json"),
        ];
        if coco_captions {
            inputs.push((Format::CocoCaptions, "coco/captions.json"));
        }
        let mut sink = VecSink::default();
        for (format, path) in inputs {
            read_input(format, &data.join(path), &mut sink).expect("read sample data");
        }
        assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
        ImageAnnotations::group(sink.rows).into_values().collect()
    }

    fn config() -> Config {
        Config {
            clusters: ClusterCount::Silhouette,
            ..Config::default()
        }
    }

    /// Every part of a model by name, floats written with their shortest round-trip digits
    /// (so two fingerprints are equal only when every value is bit for bit the same).
    fn fingerprint(model: &Model) -> Vec<(&'static str, String)> {
        let index: BTreeMap<&String, &usize> = model.lemma_index.iter().collect();
        vec![
            ("config", format!("{:?}", model.config)),
            ("vocabulary", format!("{:?}", model.vocabulary)),
            (
                "dataset attributes",
                format!("{:?}", model.dataset_attributes),
            ),
            ("surface forms", format!("{:?}", model.forms)),
            ("attribute counts", format!("{:?}", model.attributes.counts)),
            ("attribute pairs", format!("{:?}", model.attributes.pairs)),
            ("lemmas", format!("{:?}", model.lemmas)),
            ("lemma index", format!("{index:?}")),
            ("lemma vectors", format!("{:?}", model.vectors)),
            ("clusters", format!("{:?}", model.clusters)),
            ("object boxes", format!("{:?}", model.boxes)),
            ("image files", format!("{:?}", model.image_files)),
        ]
    }

    /// Asserts that two models are the same: equal fingerprints and the same samples for
    /// every image.
    fn assert_same_model(a: &Model, b: &Model, images: &[ImageAnnotations], what: &str) {
        for ((part, x), (_, y)) in fingerprint(a).into_iter().zip(fingerprint(b)) {
            if x != y {
                let at = x.bytes().zip(y.bytes()).take_while(|(p, q)| p == q).count();
                let from = at.saturating_sub(80);
                panic!(
                    "{what}: the {part} differ from byte {at}:\n  {}\n  {}",
                    x.get(from..(at + 160).min(x.len())).unwrap_or(&x),
                    y.get(from..(at + 160).min(y.len())).unwrap_or(&y),
                );
            }
        }
        for image in images {
            for seed in [0, 7] {
                assert_eq!(
                    a.samples(image, seed),
                    b.samples(image, seed),
                    "{what}: image {} seed {seed}",
                    image.image_id
                );
            }
        }
    }

    fn stats_of<'a>(
        images: impl IntoIterator<Item = &'a ImageAnnotations>,
        config: &Config,
    ) -> CutswapStats {
        let mut stats = CutswapStats::new(config);
        for image in images {
            stats.add_image(image);
        }
        stats
    }

    /// The model as fitted before the statistics existed: every image's rows read in image-id
    /// order against the vocabulary, PPMI vectors trained on every caption at once.
    fn rows_fit(images: &[ImageAnnotations], config: &Config) -> Model {
        let mut sorted: Vec<&ImageAnnotations> = images.iter().collect();
        sorted.sort_by(|a, b| a.image_id.cmp(&b.image_id));
        let mut class_names = BTreeSet::new();
        let mut dataset_attributes = BTreeSet::new();
        for image in &sorted {
            for d in &image.detections {
                class_names.insert(normalize_name(&d.label));
                dataset_attributes.extend(d.attributes.iter().map(|a| normalize_name(a)));
            }
            for graph in &image.scene_graphs {
                for object in &graph.objects {
                    class_names.extend(object.names.iter().map(|n| normalize_name(n)));
                    dataset_attributes.extend(object.attributes.iter().map(|a| normalize_name(a)));
                }
            }
        }
        dataset_attributes.retain(|a| !a.contains(' ') && a.chars().all(char::is_alphabetic));
        let mut model = empty_model(config, &class_names, dataset_attributes).unwrap();
        let mut raw_boxes: BTreeMap<(String, String), Vec<ObjectBox>> = BTreeMap::new();
        for image in &sorted {
            model.image_files.insert(
                image.image_id.clone(),
                ImageFile {
                    file_name: image.image.as_ref().and_then(|i| i.file_name.clone()),
                    size: image.size(),
                },
            );
            for row in &image.captions {
                let read = model.read_caption(image, row);
                for mention in &read.mentions {
                    let surface: Vec<&str> = read.tokens[mention.object.clone()]
                        .iter()
                        .map(|t| t.norm.as_str())
                        .collect();
                    model
                        .forms
                        .entry(mention.lemma.clone())
                        .or_default()
                        .add(&surface.join(" "), mention.number);
                    for attribute in &mention.attribute_words {
                        model
                            .attributes
                            .add(&mention.lemma, attribute, &row.caption_id);
                    }
                    let grounding = mention.grounding.map(|g| read.groundings[g]);
                    for bbox in grounding.iter().flat_map(|g| &g.boxes) {
                        raw_boxes
                            .entry((mention.lemma.clone(), image.image_id.clone()))
                            .or_default()
                            .push(ObjectBox {
                                image_id: image.image_id.clone(),
                                bbox: *bbox,
                                score: 1.0,
                                attributes: mention.attribute_words.iter().cloned().collect(),
                            });
                    }
                }
            }
            for (label, bbox, score, attributes) in labelled_boxes(image) {
                if let Some((lemma, _)) = model.vocabulary.lookup(&normalize_name(label)) {
                    raw_boxes
                        .entry((lemma.to_string(), image.image_id.clone()))
                        .or_default()
                        .push(ObjectBox {
                            image_id: image.image_id.clone(),
                            bbox,
                            score,
                            attributes: attributes.iter().map(|a| normalize_name(a)).collect(),
                        });
                }
            }
        }
        model.attributes.retain_frequent(config.min_attribute_count);
        for ((lemma, image_id), boxes) in raw_boxes {
            let kept = image::nms(boxes, config.image.nms_iou);
            model.boxes.entry(lemma).or_default().insert(image_id, kept);
        }
        let sentences: Vec<Vec<String>> = sorted
            .iter()
            .flat_map(|i| &i.captions)
            .map(|c| tokenize(&c.text))
            .collect();
        let pairs = train_ppmi_vectors(sentences.iter().map(Vec::as_slice), &ppmi_config(config));
        let table = WordVectors::from_pairs(pairs).unwrap();
        for lemma in model.forms.keys() {
            if let Some(vector) = lemma_vector(&table, lemma, &model.forms[lemma]) {
                model.lemma_index.insert(lemma.clone(), model.lemmas.len());
                model.lemmas.push(lemma.clone());
                model.vectors.push(vector);
            }
        }
        model.clusters = clusters::cluster(&model.vectors, config.clusters).unwrap();
        model
    }

    #[test]
    fn fit_reads_the_statistics_as_the_rows() {
        for coco_captions in [false, true] {
            let images = sample_images(coco_captions);
            let model = fit(&images, &config()).unwrap();
            // The data exercises every part of the model.
            assert!(model.lemmas.len() >= 20, "{:?}", model.lemmas);
            assert!(model.clusters.members.len() >= 2);
            assert!(!model.attributes.pairs.is_empty());
            assert!(model.boxes.values().map(BTreeMap::len).sum::<usize>() >= 20);
            let samples: usize = images.iter().map(|i| model.samples(i, 0).len()).sum();
            assert!(samples >= 20, "{samples} samples");
            assert_same_model(
                &model,
                &rows_fit(&images, &config()),
                &images,
                &format!("stats against rows, coco captions {coco_captions}"),
            );
        }
    }

    #[test]
    fn split_statistics_merge_to_the_same_model() {
        let config = config();
        for coco_captions in [false, true] {
            let images = sample_images(coco_captions);
            let whole = from_stats(stats_of(&images, &config), &config).unwrap();
            let n = images.len();

            // Two parts, interleaved, each added backwards; merged both ways round.
            let part = |k: usize, of: usize| -> CutswapStats {
                stats_of(
                    images
                        .iter()
                        .enumerate()
                        .rev()
                        .filter(|(i, _)| i % of == k)
                        .map(|(_, im)| im),
                    &config,
                )
            };
            let mut ab = part(0, 2);
            ab.merge(part(1, 2));
            let mut ba = part(1, 2);
            ba.merge(part(0, 2));
            assert_eq!(ab.images(), n as u64);
            for (merged, what) in [(ab, "halves a+b"), (ba, "halves b+a")] {
                let model = from_stats(merged, &config).unwrap();
                assert_same_model(&whole, &model, &images, what);
            }

            // Three parts of different sizes (a contiguous run, the rest interleaved), with an
            // empty one, merged in several orders and groupings.
            let first: Vec<&ImageAnnotations> = images[..n / 2].iter().collect();
            let rest: Vec<&ImageAnnotations> = images[n / 2..].iter().collect();
            let parts = || {
                [
                    stats_of(first.iter().rev().copied(), &config),
                    stats_of(rest.iter().step_by(2).copied(), &config),
                    stats_of(rest.iter().skip(1).step_by(2).rev().copied(), &config),
                ]
            };
            let [p0, p1, p2] = parts();
            let mut left = p2;
            left.merge(p0);
            left.merge(CutswapStats::new(&config));
            left.merge(p1);
            let [p0, p1, p2] = parts();
            let mut right = CutswapStats::new(&config);
            let mut inner = p1;
            inner.merge(p2);
            right.merge(inner);
            right.merge(p0);
            let [p0, p1, p2] = parts();
            let mut chain = p0;
            chain.merge(p1);
            chain.merge(p2);
            for (merged, what) in [
                (left, "thirds (c+a)+b"),
                (right, "thirds (b+c)+a"),
                (chain, "thirds (a+b)+c"),
            ] {
                assert_eq!(merged.images(), n as u64);
                let model = from_stats(merged, &config).unwrap();
                assert_same_model(&whole, &model, &images, what);
            }

            // One image per statistics object, merged from the last to the first.
            let mut singles = CutswapStats::new(&config);
            for image in images.iter().rev() {
                let mut one = stats_of([image], &config);
                one.merge(singles);
                singles = one;
            }
            let model = from_stats(singles, &config).unwrap();
            assert_same_model(&whole, &model, &images, "one image per statistics object");
        }
    }

    #[test]
    fn fingerprints_tell_models_apart() {
        // The comparison above would notice a model fitted on other data.
        let images = sample_images(false);
        let whole = fit(&images, &config()).unwrap();
        let fewer = fit(&images[1..], &config()).unwrap();
        assert_ne!(fingerprint(&whole), fingerprint(&fewer));
        let mut moved = images.clone();
        let boxes: Vec<DetectionRow> = moved.iter().flat_map(|i| i.detections.clone()).collect();
        let box_of = moved.iter().position(|i| !i.detections.is_empty()).unwrap();
        moved[box_of].detections[0].bbox.x1 += 0.5;
        assert!(!boxes.is_empty());
        let nudged = fit(&moved, &config()).unwrap();
        assert_ne!(fingerprint(&whole), fingerprint(&nudged));
    }

    #[test]
    fn statistics_round_trip_through_bincode() {
        let config = config();
        let images = sample_images(true);
        let whole = from_stats(stats_of(&images, &config), &config).unwrap();
        let stats = stats_of(&images, &config);
        let bytes = bincode::serialize(&stats).unwrap();
        let back: CutswapStats = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back.images(), stats.images());
        assert_eq!(back.image_bytes, stats.image_bytes);
        assert_eq!(bincode::serialize(&back).unwrap(), bytes);
        let model = from_stats(back, &config).unwrap();
        assert_same_model(&whole, &model, &images, "bincode round trip");

        // Parts that crossed a process boundary merge as well.
        let (a, b) = images.split_at(images.len() / 3);
        let ship = |s: CutswapStats| -> CutswapStats {
            bincode::deserialize(&bincode::serialize(&s).unwrap()).unwrap()
        };
        let mut merged = ship(stats_of(b, &config));
        merged.merge(ship(stats_of(a, &config)));
        let model = from_stats(ship(merged), &config).unwrap();
        assert_same_model(&whole, &model, &images, "bincode parts");
    }

    #[test]
    fn a_repeated_image_id_is_read_in_one_order() {
        let config = config();
        let images = sample_images(false);
        let base = images
            .iter()
            .find(|i| !i.captions.is_empty() && !i.detections.is_empty())
            .unwrap();
        let mut other = base.clone();
        other.captions.truncate(1);
        other.captions[0].text = "A brown dog sits next to a white cat .".into();
        // The same box moved by a pixel: NMS keeps whichever of the two it reads first.
        let mut moved = base.detections[0].clone();
        moved.bbox.x1 += 1.0;
        moved.bbox.x2 += 1.0;
        other.detections = vec![moved];
        // The image file of the contribution read last is kept.
        if let Some(row) = &mut other.image {
            row.file_name = Some("other.jpg".into());
        }
        // Added after the sample's image, before it, and merged in.
        let mut after = stats_of(&images, &config);
        after.add_image(&other);
        let before = stats_of(std::iter::once(&other).chain(images.iter().rev()), &config);
        let mut merged = stats_of([&other], &config);
        merged.merge(stats_of(images.iter().rev(), &config));
        let a = from_stats(after, &config).unwrap();
        assert_ne!(
            fingerprint(&a),
            fingerprint(&fit(&images, &config).unwrap())
        );
        for (stats, what) in [(before, "added first"), (merged, "merged")] {
            let b = from_stats(stats, &config).unwrap();
            assert_same_model(&a, &b, &images, what);
        }
    }

    #[test]
    fn memory_and_image_counts_add_up() {
        let config = config();
        let images = sample_images(false);
        let empty = CutswapStats::new(&config);
        let (a, b) = images.split_at(images.len() / 2);
        let (sa, sb) = (stats_of(a, &config), stats_of(b, &config));
        assert!(sa.approx_bytes() > empty.approx_bytes());
        assert_eq!((sa.images(), sb.images()), (a.len() as u64, b.len() as u64));
        let (bytes_a, bytes_b) = (sa.image_bytes, sb.image_bytes);
        let mut merged = sa;
        merged.merge(sb);
        assert_eq!(merged.image_bytes, bytes_a + bytes_b);
        assert_eq!(merged.images(), images.len() as u64);
    }

    #[test]
    fn vector_file_settings_must_agree() {
        let images = sample_images(false);
        let with_file = Config {
            vectors: Some("vectors.txt".into()),
            ..config()
        };
        // Gathered for a vector file: no co-occurrences to train PPMI vectors on.
        let stats = stats_of(&images, &with_file);
        assert!(stats.ppmi.is_none());
        let err = from_stats(stats, &config()).unwrap_err().to_string();
        assert!(err.contains("co-occurrences"), "{err}");
        let mixed = std::panic::catch_unwind(|| {
            let mut stats = CutswapStats::new(&config());
            stats.merge(CutswapStats::new(&with_file));
        });
        assert!(mixed.is_err());
    }
}
