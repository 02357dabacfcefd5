//! Visual semantic relatedness (METHODS.md §4; Sabir et al., "Visual Semantic Relatedness
//! Dataset for Image Captioning"): how well each caption fits the objects detected in its image.
//!
//! Per image, the visual context is the top-3 detected classes with probability ≥ 0.2, near
//! duplicates removed ([`context`]). Each caption's soft label is the cosine between the sentence
//! vectors of the caption and of the context string ([`sif`]: SIF-weighted word vectors, or an
//! external embedder); binary labels follow at 0.2 / 0.3 / 0.4 and can be written in the released
//! TSV layout ([`tsv`]). Captions are re-ranked by `sim ^ P(c)` with `P(c)` the context's mean
//! confidence ([`rerank`]). Corpus tools: gender co-occurrence ratios and the gender-neutral
//! rewrite ([`gender`]), and visual-context caption search with Recall@K ([`search`]).
//!
//! [`RelatednessModel::fit`] learns the corpus statistics (word frequencies for SIF weights, the
//! common sentence direction, and word vectors from the captions when no vector file is given);
//! [`RelatednessModel::samples`] then scores one image at a time. The statistics are gathered
//! image by image into a mergeable [`RelatednessStats`] ([`stats`]), so workers can each gather
//! over their share of the images and the model is fitted once from the merged total
//! ([`RelatednessModel::from_stats`]); `fit` is that path over a list of images.
//!
//! ```
//! use capflow::augment::relatedness::rerank::rerank_score;
//! // A caption with cosine 0.81 to a context of mean confidence 0.5 scores 0.81^0.5.
//! assert_eq!(rerank_score(0.81, 0.5), 0.9);
//! ```

pub mod context;
pub mod gender;
pub mod rerank;
pub mod search;
pub mod sif;
pub mod stats;
pub mod tsv;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use crate::augment::control::{coverage_percent, ssa_length_level, word_count};
use crate::augment::ImageAnnotations;
use crate::error::Result;
use crate::schema::{Provenance, QualityScore, SampleRow};

use context::{display_label, visual_context, ContextRule, VisualContext};
use gender::{gender_cooccurrence, GenderCounts, GenderLexicon};
use search::{recall_at_k, CaptionIndex};
use sif::{cosine64, SentenceEncoder, SifEncoder};
pub use stats::RelatednessStats;
use tsv::{binary_label, TrainRow};

/// The method name written into every sample.
pub const METHOD: &str = "relatedness";

/// Settings of the `[relatedness]` table of a recipe.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelatednessConfig {
    /// Classes kept in a visual context (paper: 3).
    pub top_k: usize,
    /// Detections less probable than this are ignored (paper: 0.2).
    pub min_probability: f64,
    /// Two classes at least this similar are duplicates; the less probable one is dropped.
    pub duplicate_similarity: f64,
    /// Detection sources that make up the context; empty means every source.
    pub sources: Vec<String>,
    /// Binary label thresholds on the soft label (paper: 0.2, 0.3, 0.4).
    pub thresholds: Vec<f64>,
    /// A GloVe or word2vec text file; without one, PPMI vectors are trained on the captions.
    pub vectors: Option<PathBuf>,
    /// SIF's smoothing weight `a` in `a / (a + p(w))` (paper: 1e-3).
    pub sif_a: f64,
    /// Principal components removed from sentence vectors (SIF: 1).
    pub remove_components: usize,
    /// Dimensions of the caption-trained PPMI vectors.
    pub ppmi_dims: usize,
    /// Context window of the caption-trained PPMI vectors.
    pub ppmi_window: usize,
    /// Rewrite gendered nouns in captions and contexts to `person`/`people` before scoring
    /// (the paper's "Visual G-N + Caption G-N" setting).
    pub gender_neutral: bool,
    /// The K of the Recall@K report of visual-context search.
    pub recall_at: Vec<usize>,
}

impl Default for RelatednessConfig {
    fn default() -> Self {
        let rule = ContextRule::default();
        RelatednessConfig {
            top_k: rule.top_k,
            min_probability: rule.min_probability,
            duplicate_similarity: rule.duplicate_similarity,
            sources: rule.sources,
            thresholds: vec![0.2, 0.3, 0.4],
            vectors: None,
            sif_a: 1e-3,
            remove_components: 1,
            ppmi_dims: 50,
            ppmi_window: 2,
            gender_neutral: false,
            recall_at: vec![1, 5, 10, 15],
        }
    }
}

impl RelatednessConfig {
    fn context_rule(&self) -> ContextRule {
        ContextRule {
            top_k: self.top_k,
            min_probability: self.min_probability,
            duplicate_similarity: self.duplicate_similarity,
            sources: self.sources.clone(),
        }
    }
}

/// How one caption relates to its image's visual context.
#[derive(Clone, Debug, PartialEq)]
pub struct CaptionRelatedness {
    pub caption_id: String,
    /// The caption as scored (gender-neutral when so configured).
    pub text: String,
    /// Soft label: cosine between caption and context sentence vectors.
    pub similarity: f64,
    /// `similarity ^ P(c)`.
    pub score: f64,
}

/// One image's visual context and its captions, best `score` first (equal scores in caption
/// order).
#[derive(Clone, Debug, PartialEq)]
pub struct ImageRelatedness {
    pub context: VisualContext,
    pub captions: Vec<CaptionRelatedness>,
}

/// Recall@K of visual-context caption search over a corpus.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchReport {
    /// Images with a visual context and at least one caption (the queries).
    pub queries: usize,
    /// Captions searched.
    pub captions: usize,
    /// `(K, Recall@K)` in the configured order.
    pub recall: Vec<(usize, f64)>,
}

/// Corpus statistics and the sentence encoder for relatedness scoring.
#[derive(Clone, Debug)]
pub struct RelatednessModel {
    config: RelatednessConfig,
    encoder: SentenceEncoder,
    lexicon: GenderLexicon,
}

/// A SIF encoder for `captions` (the corpus; their order does not matter): word vectors from
/// `config.vectors`, else PPMI vectors trained on the captions and `labels` (visual context or
/// class-name strings, which give class names vectors even when no caption uses them).
///
/// The texts are taken as given (no gender-neutral rewrite). The encoder is fitted from
/// [`RelatednessStats`] of the texts, as [`RelatednessModel::from_stats`] fits it.
pub fn fit_sif(
    captions: &[String],
    labels: &[String],
    config: &RelatednessConfig,
) -> Result<SifEncoder> {
    let mut stats = RelatednessStats::new(config);
    for caption in captions {
        stats.add_caption(caption);
    }
    for label in labels {
        stats.add_label(label);
    }
    stats.fit_sif(config)
}

/// Images sorted by id, so fitting does not depend on arrival order.
fn sorted(images: &[ImageAnnotations]) -> Vec<&ImageAnnotations> {
    let mut sorted: Vec<&ImageAnnotations> = images.iter().collect();
    sorted.sort_by(|a, b| a.image_id.cmp(&b.image_id));
    sorted
}

impl RelatednessModel {
    /// Fits the built-in SIF encoder on the images' captions: word vectors from
    /// `config.vectors` (else PPMI vectors trained on the captions and the detected class
    /// names), word frequencies and the common sentence direction from the captions.
    ///
    /// This is [`RelatednessStats`] of the images fitted with [`from_stats`](Self::from_stats),
    /// so the model does not depend on the images' order.
    pub fn fit(images: &[ImageAnnotations], config: &RelatednessConfig) -> Result<Self> {
        let mut stats = RelatednessStats::new(config);
        for image in images {
            stats.add_image(image);
        }
        Self::from_stats(stats, config)
    }

    /// Fits the built-in SIF encoder from merged statistics (see [`stats`] for what is
    /// computed from what). The model is the same, bit for bit, however the images were split
    /// between statistics and in whatever order they were added and merged.
    ///
    /// Fails when `config` differs from the statistics' settings in what the gathering
    /// depends on (`gender_neutral`, `vectors`, `ppmi_window`), when the statistics noted an
    /// error (an unreadable vector file, statistics of other settings merged), or when the
    /// vector file cannot be read.
    pub fn from_stats(stats: RelatednessStats, config: &RelatednessConfig) -> Result<Self> {
        let sif = stats.fit_sif(config)?;
        Ok(Self::with_encoder(config, SentenceEncoder::Sif(sif)))
    }

    /// A model that scores with `encoder` (an external embedder, or a SIF encoder fitted
    /// elsewhere).
    pub fn with_encoder(config: &RelatednessConfig, encoder: SentenceEncoder) -> Self {
        RelatednessModel {
            config: config.clone(),
            encoder,
            lexicon: GenderLexicon::default(),
        }
    }

    pub fn config(&self) -> &RelatednessConfig {
        &self.config
    }

    pub fn encoder(&self) -> &SentenceEncoder {
        &self.encoder
    }

    pub fn lexicon(&self) -> &GenderLexicon {
        &self.lexicon
    }

    fn prepared(&self, text: &str) -> String {
        if self.config.gender_neutral {
            self.lexicon.neutral(text)
        } else {
            text.to_string()
        }
    }

    /// The image's visual context (labels gender-neutral when so configured).
    pub fn context(&self, image: &ImageAnnotations) -> Result<VisualContext> {
        let mut detections = image.detections.clone();
        for d in &mut detections {
            d.label = self.prepared(&display_label(&d.label));
        }
        let labels: Vec<String> = detections
            .iter()
            .map(|d| d.label.clone())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect();
        let vectors: HashMap<String, Option<Vec<f64>>> = labels
            .iter()
            .cloned()
            .zip(self.encoder.label_vectors(&labels)?)
            .collect();
        let similarity = |a: &str, b: &str| -> Option<f64> {
            let a = vectors.get(a)?.as_ref()?;
            let b = vectors.get(b)?.as_ref()?;
            Some(cosine64(a, b))
        };
        Ok(visual_context(
            &detections,
            &self.config.context_rule(),
            &similarity,
        ))
    }

    /// Scores every caption of `image` against its visual context; `None` when the image has
    /// no confident detection or no caption.
    pub fn score_image(&self, image: &ImageAnnotations) -> Result<Option<ImageRelatedness>> {
        let context = self.context(image)?;
        if context.is_empty() || image.captions.is_empty() {
            return Ok(None);
        }
        let texts: Vec<String> = image
            .captions
            .iter()
            .map(|c| self.prepared(&c.text))
            .collect();
        let similarities = self.encoder.similarities_to(&context.text(), &texts)?;
        let confidence = context.confidence();
        let mut captions: Vec<CaptionRelatedness> = image
            .captions
            .iter()
            .zip(texts)
            .zip(similarities)
            .map(|((caption, text), similarity)| CaptionRelatedness {
                caption_id: caption.caption_id.clone(),
                text,
                similarity,
                score: rerank::rerank_score(similarity, confidence),
            })
            .collect();
        captions.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(Some(ImageRelatedness { context, captions }))
    }

    /// One sample per caption, best re-ranking score first: the caption (gender-neutral when so
    /// configured) with the context's labels and boxes as controls and its scores as quality:
    /// `relatedness` (soft label), `relatedness_rerank` (`sim ^ P(c)`), `visual_confidence`
    /// (`P(c)`), `relatedness_rank` (1 = best of the image) and `related@<th>` (0 or 1 per
    /// threshold). Images without a visual context give no samples. `seed` is recorded in the
    /// provenance; scoring draws nothing at random.
    pub fn samples(&self, image: &ImageAnnotations, seed: u64) -> Result<Vec<SampleRow>> {
        let Some(scored) = self.score_image(image)? else {
            return Ok(Vec::new());
        };
        let context = &scored.context;
        let coverage = image
            .size()
            .map_or(0.0, |(w, h)| coverage_percent(&context.boxes, w, h));
        let confidence = context.confidence();
        Ok(scored
            .captions
            .iter()
            .enumerate()
            .map(|(rank, caption)| {
                let words = word_count(&caption.text);
                let mut quality = vec![
                    QualityScore {
                        name: "relatedness".into(),
                        value: caption.similarity,
                    },
                    QualityScore {
                        name: "relatedness_rerank".into(),
                        value: caption.score,
                    },
                    QualityScore {
                        name: "visual_confidence".into(),
                        value: confidence,
                    },
                    QualityScore {
                        name: "relatedness_rank".into(),
                        value: (rank + 1) as f64,
                    },
                ];
                quality.extend(self.config.thresholds.iter().map(|&th| QualityScore {
                    name: format!("related@{th}"),
                    value: f64::from(binary_label(caption.similarity, th)),
                }));
                SampleRow {
                    image: None,
                    sample_id: format!("{METHOD}:{}:{}:0", image.image_id, caption.caption_id),
                    image_id: image.image_id.clone(),
                    split: image.split().to_string(),
                    method: METHOD.to_string(),
                    text: caption.text.clone(),
                    control_boxes: context.boxes.clone(),
                    control_labels: context.labels.clone(),
                    coverage,
                    length_level: ssa_length_level(words),
                    word_count: words as i32,
                    verbs: Vec::new(),
                    quality,
                    provenance: Provenance {
                        source_caption_ids: vec![caption.caption_id.clone()],
                        node_ids: context.detection_ids.clone(),
                        subgraph: None,
                        seed,
                    },
                }
            })
            .collect())
    }

    /// Rows of the released training layout at `threshold`: one per caption of every image
    /// with a visual context, images by id, captions in image order.
    pub fn train_rows(&self, images: &[ImageAnnotations], threshold: f64) -> Result<Vec<TrainRow>> {
        let mut rows = Vec::new();
        for image in sorted(images) {
            let Some(scored) = self.score_image(image)? else {
                continue;
            };
            let visual = scored.context.text();
            let by_id: HashMap<&str, &CaptionRelatedness> = scored
                .captions
                .iter()
                .map(|c| (c.caption_id.as_str(), c))
                .collect();
            for caption in &image.captions {
                if let Some(scored) = by_id.get(caption.caption_id.as_str()) {
                    let k = rows.len() as u64;
                    let label = binary_label(scored.similarity, threshold);
                    rows.push(TrainRow::numbered(k, &visual, &scored.text, label));
                }
            }
        }
        Ok(rows)
    }

    /// Per visual context object, how many of its images' captions mention a man, a woman or a
    /// person.
    pub fn gender_table(
        &self,
        images: &[ImageAnnotations],
    ) -> Result<BTreeMap<String, GenderCounts>> {
        let mut pairs: Vec<(Vec<String>, String)> = Vec::new();
        for image in sorted(images) {
            let context = self.context(image)?;
            if context.is_empty() {
                continue;
            }
            for caption in &image.captions {
                pairs.push((context.labels.clone(), caption.text.clone()));
            }
        }
        Ok(gender_cooccurrence(
            pairs
                .iter()
                .map(|(labels, caption)| (labels.iter().map(String::as_str), caption.as_str())),
            &self.lexicon,
        ))
    }

    /// Visual-context caption search over the images' captions: every image with a context is a
    /// query, its own captions are the relevant ones, and Recall@K is reported for each
    /// configured K.
    pub fn search_recall(&self, images: &[ImageAnnotations]) -> Result<SearchReport> {
        let images = sorted(images);
        let mut texts = Vec::new();
        // Captions are indexed image after image, so an image's captions are one range.
        let mut ranges = Vec::with_capacity(images.len());
        for image in &images {
            let start = texts.len();
            texts.extend(image.captions.iter().map(|c| self.prepared(&c.text)));
            ranges.push(start..texts.len());
        }
        let index = CaptionIndex::new(&self.encoder.embed(&texts)?)?;
        let mut queries = Vec::new();
        let mut relevant: Vec<BTreeSet<usize>> = Vec::new();
        for (image, range) in images.iter().zip(ranges) {
            let context = self.context(image)?;
            if !context.is_empty() && !range.is_empty() {
                queries.push(context.text());
                relevant.push(range.collect());
            }
        }
        let deepest = self.config.recall_at.iter().copied().max().unwrap_or(0);
        let rankings = self
            .encoder
            .embed(&queries)?
            .iter()
            .map(|query| {
                let hits = index.search(query, deepest)?;
                Ok(hits.into_iter().map(|(position, _)| position).collect())
            })
            .collect::<Result<Vec<Vec<usize>>>>()?;
        Ok(SearchReport {
            queries: rankings.len(),
            captions: index.len(),
            recall: self
                .config
                .recall_at
                .iter()
                .map(|&k| (k, recall_at_k(&rankings, &relevant, k)))
                .collect(),
        })
    }
}

impl crate::augment::method::Method for RelatednessModel {
    fn stage(&self) -> &str {
        "relatedness"
    }

    fn samples(&self, image: &ImageAnnotations, seed: u64) -> Result<Vec<SampleRow>> {
        RelatednessModel::samples(self, image, seed)
    }
}
