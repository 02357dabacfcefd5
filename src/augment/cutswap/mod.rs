//! CutSwap (METHODS.md §3, thesis §3.2): swap one object of a caption, and the image region
//! showing it, for a similar object seen elsewhere in the dataset.
//!
//! [`fit`] reads the whole dataset once: the object vocabulary (detection and scene-graph class
//! lemmas), the attributes bound to objects in captions (dropped below
//! [`Config::min_attribute_count`] occurrences), the surface forms of each object by number,
//! the object clusters (average-link agglomerative clustering of lemma word vectors by cosine
//! distance) and the patch index (boxes of every object in every image). The resulting
//! [`Model`] then turns one image at a time into samples:
//!
//! - [`Model::samples`]: text swaps ([`text`]), one object per swap, replaced by a member of
//!   the nearest cluster with the same grammatical number and an attribute seen with it;
//! - [`Model::image_samples`]: image swaps ([`image`]) pasting a patch of the new object from
//!   another image over the old object's boxes, re-ranked by an image-text score.
//!
//! The model can also be fitted without the images at hand: workers each gather
//! [`CutswapStats`] over their share of the images, the statistics are merged, and
//! [`from_stats`] fits the same model, bit for bit, whatever the split and order ([`stats`]).
//!
//! ```no_run
//! use capflow::augment::cutswap::{fit, Config};
//! # let images: Vec<capflow::augment::ImageAnnotations> = Vec::new();
//! let model = fit(&images, &Config::default())?;
//! for image in &images {
//!     let samples = model.samples(image, 0);
//! }
//! # Ok::<(), capflow::Error>(())
//! ```

pub mod caption;
pub mod clusters;
pub mod image;
pub mod number;
pub mod rerank;
pub mod stats;
pub mod text;
pub mod vocabulary;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::amr::align::ModifierLexicon;
use crate::augment::control::{coverage_percent, distinct_boxes, ssa_length_level, word_count};
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::models::ImageTextScorer;
use crate::schema::{BoxXyxy, Provenance, RejectedRow, SampleImage, SampleRow};
use crate::text::WordVectors;

pub use clusters::{ClusterCount, Clusters};
pub use image::{ImageSwap, ImageSwapConfig};
pub use number::Number;
pub use stats::{from_stats, from_stats_with, CutswapStats};
pub use text::TextSwap;
use vocabulary::{AttributeStatistics, ObjectVocabulary, SurfaceForms};

/// The method name written into every sample.
pub const METHOD: &str = "cutswap";

/// Layout of a word-vector file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VectorFileFormat {
    Glove,
    Word2vec,
    #[default]
    Detect,
}

/// Settings of CutSwap, read from the recipe table `[cutswap]`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Attributes bound to objects fewer times than this in all captions are dropped (thesis: 5,
    /// one image's five captions).
    pub min_attribute_count: usize,
    /// Number of object clusters: a number (thesis: 122) or `"silhouette"`.
    pub clusters: ClusterCount,
    /// Word vectors (GloVe or word2vec text) for the object lemmas; without a file, PPMI-SVD
    /// vectors are trained on the dataset's captions ([`crate::text::ppmi`]).
    pub vectors: Option<PathBuf>,
    pub vector_format: VectorFileFormat,
    /// Dimensions of the caption-trained vectors.
    pub ppmi_dims: usize,
    /// Distinct swaps drawn per caption (the thesis draws 32 captions per image, about six per
    /// caption of a five-caption image).
    pub swaps_per_caption: usize,
    /// Write the drawn attribute before an object that had none (`a dog` → `a brown cat`),
    /// where the noun phrase starts right before it.
    pub insert_attribute: bool,
    /// Let members never seen in the plural swap into plural objects with their regular plural.
    pub inflect_plurals: bool,
    /// Make a preceding `a`/`an` agree with the new words.
    pub fix_articles: bool,
    /// Image swaps (`[cutswap.image]`).
    pub image: ImageSwapConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_attribute_count: 5,
            clusters: ClusterCount::default(),
            vectors: None,
            vector_format: VectorFileFormat::Detect,
            ppmi_dims: 50,
            swaps_per_caption: 6,
            insert_attribute: true,
            inflect_plurals: true,
            fix_articles: true,
            image: ImageSwapConfig::default(),
        }
    }
}

impl Config {
    pub fn validate(&self) -> Result<()> {
        if self.ppmi_dims == 0 {
            return Err(Error::Config("cutswap.ppmi_dims must be at least 1".into()));
        }
        self.image.validate()
    }
}

/// One box of an object in an image, with the attributes it was described with.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectBox {
    pub image_id: String,
    pub bbox: BoxXyxy,
    /// Detector score; groundings and scene-graph objects count as 1.
    pub score: f64,
    pub attributes: BTreeSet<String>,
}

/// The dataset statistics CutSwap swaps by (see the module docs).
#[derive(Clone, Debug)]
pub struct Model {
    config: Config,
    vocabulary: ObjectVocabulary,
    /// Attribute words the dataset's scene graphs and detections use, added to WordNet's.
    dataset_attributes: BTreeSet<String>,
    forms: BTreeMap<String, SurfaceForms>,
    attributes: AttributeStatistics,
    /// The clustered lemmas (seen in captions and with a vector), alphabetically.
    lemmas: Vec<String>,
    lemma_index: HashMap<String, usize>,
    /// Unit vector of each clustered lemma.
    vectors: Vec<Vec<f32>>,
    clusters: Clusters,
    /// Boxes of each object lemma per image after NMS, by lemma then image.
    boxes: BTreeMap<String, BTreeMap<String, Vec<ObjectBox>>>,
    /// Image file name and size per image.
    image_files: BTreeMap<String, ImageFile>,
}

/// Where an image's pixels are and how big it is.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageFile {
    pub file_name: Option<String>,
    pub size: Option<(f64, f64)>,
}

/// Reads the dataset statistics (see the module docs): [`CutswapStats`] of every image, fitted
/// with [`from_stats`]. Independent of the order of `images`.
pub fn fit(images: &[ImageAnnotations], config: &Config) -> Result<Model> {
    let mut stats = CutswapStats::new(config);
    for image in images {
        stats.add_image(image);
    }
    from_stats(stats, config)
}

/// Detection and scene-graph boxes of an image: (label, box, score, attributes).
fn labelled_boxes(image: &ImageAnnotations) -> Vec<(&str, BoxXyxy, f64, &[String])> {
    let mut out = Vec::new();
    for d in &image.detections {
        out.push((
            d.label.as_str(),
            d.bbox,
            d.score.unwrap_or(1.0),
            d.attributes.as_slice(),
        ));
    }
    for graph in &image.scene_graphs {
        for object in &graph.objects {
            for name in &object.names {
                out.push((
                    name.as_str(),
                    object.bbox,
                    1.0,
                    object.attributes.as_slice(),
                ));
            }
        }
    }
    out
}

/// A lemma's unit vector: the normalised mean of the vectors of the lemma and of its surface
/// forms (a multi-word form averages its words), over those that have vectors.
fn lemma_vector(table: &WordVectors, lemma: &str, forms: &SurfaceForms) -> Option<Vec<f32>> {
    let mut phrases: BTreeSet<&str> = forms.all().collect();
    phrases.insert(lemma);
    let mut sum = vec![0f64; table.dim()];
    let mut found = 0usize;
    for phrase in phrases {
        let Some(words) = phrase
            .split(' ')
            .map(|w| table.get(w))
            .collect::<Option<Vec<&[f32]>>>()
        else {
            continue;
        };
        for word in &words {
            for (s, &x) in sum.iter_mut().zip(*word) {
                *s += f64::from(x) / words.len() as f64;
            }
        }
        found += 1;
    }
    let norm = sum.iter().map(|x| x * x).sum::<f64>().sqrt();
    if found == 0 || norm == 0.0 {
        return None;
    }
    Some(sum.iter().map(|x| (x / norm) as f32).collect())
}

impl Model {
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether `word` is an attribute word: an adjective of WordNet (the shipped modifier
    /// lexicon) or an attribute the dataset's scene graphs or detections use.
    pub fn is_attribute(&self, word: &str) -> bool {
        (ModifierLexicon::wordnet().is_modifier(word) || self.dataset_attributes.contains(word))
            && self.vocabulary.lookup(word).is_none()
    }

    pub fn vocabulary(&self) -> &ObjectVocabulary {
        &self.vocabulary
    }

    /// The clustered object lemmas, alphabetically; indices match [`Model::lemma_vectors`] and
    /// the cluster labels.
    pub fn lemmas(&self) -> &[String] {
        &self.lemmas
    }

    /// The unit vector of each clustered lemma.
    pub fn lemma_vectors(&self) -> &[Vec<f32>] {
        &self.vectors
    }

    pub fn clusters(&self) -> &Clusters {
        &self.clusters
    }

    /// The cluster of a lemma.
    pub fn cluster_of(&self, lemma: &str) -> Option<usize> {
        self.lemma_index
            .get(lemma)
            .map(|&i| self.clusters.labels[i])
    }

    /// The lemmas of cluster `c`.
    pub fn cluster_members(&self, c: usize) -> Vec<&str> {
        self.clusters
            .members
            .get(c)
            .map(|m| m.iter().map(|&i| self.lemmas[i].as_str()).collect())
            .unwrap_or_default()
    }

    /// The kept attributes seen with `lemma`.
    pub fn attributes_of(&self, lemma: &str) -> Vec<&str> {
        self.attributes.attributes_of(lemma)
    }

    /// The caption ids that show `lemma` with `attribute`.
    pub fn pair_captions(&self, lemma: &str, attribute: &str) -> Vec<&str> {
        self.attributes
            .pairs
            .get(lemma)
            .and_then(|a| a.get(attribute))
            .map(|ids| ids.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Boxes of `lemma` in `image_id` after NMS.
    pub fn object_boxes(&self, lemma: &str, image_id: &str) -> &[ObjectBox] {
        self.boxes
            .get(lemma)
            .and_then(|images| images.get(image_id))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Text-swap samples of one image (method `cutswap`).
    pub fn samples(&self, image: &ImageAnnotations, seed: u64) -> Vec<SampleRow> {
        let mut out = Vec::new();
        for row in &image.captions {
            let read = self.read_caption(image, row);
            for swap in self.caption_swaps(&image.image_id, &read, seed) {
                let (boxes, labels) = self.control_boxes(image, &read, &swap);
                out.push(self.sample_row(
                    image,
                    &swap,
                    SampleParts {
                        source: format!("{}#{}", swap.caption_id, swap.index),
                        boxes,
                        labels,
                        quality: Vec::new(),
                        detail: serde_json::json!({ "text": swap }),
                        image: None,
                        seed,
                    },
                ));
            }
        }
        out
    }

    /// Boxes of what the swapped caption talks about, with labels: the caption's grounded
    /// phrases (the swapped one labelled with the new object), or without groundings the
    /// boxes of the objects it mentions.
    fn control_boxes(
        &self,
        image: &ImageAnnotations,
        read: &text::ReadCaption<'_>,
        swap: &TextSwap,
    ) -> (Vec<BoxXyxy>, Vec<String>) {
        let mut boxes = Vec::new();
        let mut labels = Vec::new();
        if !read.groundings.is_empty() {
            for (g, grounding) in read.groundings.iter().enumerate() {
                if grounding.is_scene || grounding.not_visual {
                    continue;
                }
                let label = if swap.grounding == Some(g) {
                    swap.to_object.clone()
                } else {
                    grounding.phrase.clone()
                };
                for b in &grounding.boxes {
                    boxes.push(*b);
                    labels.push(label.clone());
                }
            }
            return (boxes, labels);
        }
        for mention in &read.mentions {
            let swapped = mention.lemma == swap.from_lemma
                && swap.replaced.end == read.tokens[mention.object.end - 1].span.end;
            let label = if swapped {
                &swap.to_object
            } else {
                &mention.lemma
            };
            for b in self.object_boxes(&mention.lemma, &image.image_id) {
                boxes.push(b.bbox);
                labels.push(label.clone());
            }
        }
        (boxes, labels)
    }

    fn sample_row(
        &self,
        image: &ImageAnnotations,
        swap: &TextSwap,
        parts: SampleParts,
    ) -> SampleRow {
        let distinct = distinct_boxes(&parts.boxes);
        let coverage = image
            .size()
            .map_or(0.0, |(w, h)| coverage_percent(&distinct, w, h));
        let words = word_count(&swap.text);
        let sample_id = sample_id(&image.image_id, &parts.source);
        SampleRow {
            image: parts.image.map(|bytes| SampleImage {
                bytes,
                path: format!("{sample_id}.png"),
            }),
            sample_id,
            image_id: image.image_id.clone(),
            split: image.split().to_string(),
            method: METHOD.to_string(),
            text: swap.text.clone(),
            control_boxes: parts.boxes,
            control_labels: parts.labels,
            coverage,
            length_level: ssa_length_level(words),
            word_count: words as i32,
            verbs: Vec::new(),
            quality: parts.quality,
            provenance: Provenance {
                source_caption_ids: vec![swap.caption_id.clone()],
                node_ids: vec![
                    format!("object:{}", swap.from_lemma),
                    format!("swap:{}", swap.to_lemma),
                    format!("cluster:{}", swap.cluster),
                ],
                subgraph: Some(parts.detail.to_string()),
                seed: parts.seed,
            },
        }
    }
}

/// The parts of a sample row that differ between text and image swaps.
struct SampleParts {
    /// What the sample was made from, unique within the image (`<caption>#<swap>[#<patch>]`).
    source: String,
    boxes: Vec<BoxXyxy>,
    labels: Vec<String>,
    quality: Vec<crate::schema::QualityScore>,
    /// The swap record written (as JSON) into the provenance's `subgraph`.
    detail: serde_json::Value,
    /// The swapped image (PNG) of an image swap.
    image: Option<Vec<u8>>,
    seed: u64,
}

/// `cutswap-` and 16 hex digits of SHA-256 over (method, image, source).
pub fn sample_id(image_id: &str, source: &str) -> String {
    let mut h = Sha256::new();
    for part in [METHOD, image_id, source] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    format!("{METHOD}-{}", &hex::encode(h.finalize())[..16])
}

/// CutSwap as a dataflow method (stage `cutswap`): every caption's text swaps, then, when
/// `[cutswap.image]` names the images, the image swaps, re-ranked by `scorer` (the recipe's
/// `[models.image_text_scorer]`; the built-in score without one).
pub struct CutswapMethod {
    pub model: Model,
    pub scorer: Option<Arc<dyn ImageTextScorer>>,
}

impl crate::augment::method::Method for CutswapMethod {
    fn stage(&self) -> &str {
        "cutswap"
    }

    fn samples(&self, image: &ImageAnnotations, seed: u64) -> Result<Vec<SampleRow>> {
        Ok(self.samples_and_rejected(image, seed)?.0)
    }

    fn samples_and_rejected(
        &self,
        image: &ImageAnnotations,
        seed: u64,
    ) -> Result<(Vec<SampleRow>, Vec<RejectedRow>)> {
        let mut samples = self.model.samples(image, seed);
        let (swapped, rejected) = self
            .model
            .image_samples(image, seed, self.scorer.as_deref())?;
        samples.extend(swapped);
        Ok((samples, rejected))
    }
}
