//! Captions scored against the controls they were asked for (CIC-BART-SSA App. C.1, CLID §4):
//! what `capflow eval controls` reports for a captions file and `capflow eval model` for a
//! trained model's greedy captions (feature `train`). Both score through [`evaluate_captions`].
//!
//! Per caption, against its sample's control signal:
//! - length: LP (percent of captions in the asked length level) and L (absolute error between
//!   the asked and the produced word count);
//! - content: noun IoU and Hal against the control labels ([`super::control`]).
//!
//! Over the evaluated captions: D-1, D-2; Div-1, Div-2 and self-CIDEr over each image's captions
//! (mean over the images with at least two); G, the built-in quality scorer trained on the data's original
//! captions (standing in for GRUEN); CIDEr-D and BLEU-1..4 against the image's original captions;
//! H, the harmonic mean of IoU, G and self-CIDEr; IoU, Hal, LP and L by coverage band and by
//! length level.
//!
//! Caption nouns are found without a tagger: a caption word is a noun when it is the last word
//! of some control or detection label of the data (the noun lexicon), which is exactly the
//! vocabulary control nouns are drawn from. Word counts leave punctuation tokens out
//! ([`word_count`]).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::Serialize;

use super::cider::DocumentFrequency;
use super::control::{
    caption_nouns, content_match, coverage_band, coverage_band_label, harmonic_mean, length_hit,
    noun_similarity, COVERAGE_BANDS,
};
use super::{bleu, cider, diversity, EvalImage};
use crate::augment::control::word_count;
use crate::error::{Error, Result};
use crate::export::samples::SampleData;
use crate::schema::SampleRow;
use crate::select::quality::{BuiltinQualityScorer, QualityConfig, QualityScorer};
use crate::text::ppmi::{train_ppmi_vectors, PpmiConfig};
use crate::text::tokenize::tokenize;
use crate::text::{VectorFormat, WordVectors};

/// Metrics over one group of samples (a coverage band or a length level).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GroupMetrics {
    pub group: String,
    pub samples: usize,
    pub iou: Option<f64>,
    pub hal: Option<f64>,
    pub lp: Option<f64>,
    pub l: Option<f64>,
}

/// The per-caption controllability numbers groups are averaged from.
#[derive(Clone, Copy, Debug)]
struct SampleScore {
    iou: f64,
    hal: Option<f64>,
    in_level: bool,
    length_error: f64,
}

/// One scored caption with the controls it was scored against.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    pub sample_id: String,
    pub image_id: String,
    pub method: String,
    pub asked_level: i32,
    pub asked_words: i32,
    pub coverage: f64,
    pub control_labels: Vec<String>,
    pub caption: String,
    /// The sample's own text (the caption the controls were taken from).
    pub reference: String,
}

/// Everything the evaluation reports.
#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    pub samples: usize,
    pub images: usize,
    /// Percent of captions in the asked length level.
    pub lp: f64,
    /// Mean absolute word-count error.
    pub l: f64,
    pub iou: f64,
    pub hal: Option<f64>,
    pub g: Option<f64>,
    pub self_cider: Option<f64>,
    pub d1: f64,
    pub d2: f64,
    /// D-1 and D-2 of each image's captions, averaged over the images with at least two
    /// ([`diversity::div_n`]).
    pub div1: Option<f64>,
    pub div2: Option<f64>,
    pub cider_d: Option<f64>,
    pub bleu: Option<[f64; 4]>,
    pub h: Option<f64>,
    pub by_coverage: Vec<GroupMetrics>,
    pub by_level: Vec<GroupMetrics>,
    pub word_vectors: String,
    pub predictions: Vec<Prediction>,
}

fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The samples of `data` in the given splits and methods (empty: all), in data order.
pub fn select_samples(data: &SampleData, splits: &[String], methods: &[String]) -> Vec<SampleRow> {
    data.samples
        .iter()
        .filter(|s| crate::schema::split_selected(splits, &s.split))
        .filter(|s| methods.is_empty() || methods.contains(&s.method))
        .cloned()
        .collect()
}

/// The word vectors noun similarity uses and a description of where they came from: the GloVe or
/// word2vec text file `vectors`, else PPMI vectors trained on the data's captions
/// ([`crate::text::ppmi`]).
pub fn word_vectors(data: &SampleData, vectors: Option<&Path>) -> Result<(WordVectors, String)> {
    if let Some(path) = vectors {
        return Ok((
            WordVectors::read(path, VectorFormat::Detect)?,
            path.display().to_string(),
        ));
    }
    let sentences: Vec<Vec<String>> = data
        .references
        .values()
        .flatten()
        .chain(data.samples.iter().map(|s| &s.text))
        .map(|t| tokenize(t))
        .collect();
    let pairs = train_ppmi_vectors(sentences.iter().map(Vec::as_slice), &PpmiConfig::default());
    Ok((
        WordVectors::from_pairs(pairs)?,
        "ppmi (trained on the evaluated data's captions)".to_string(),
    ))
}

/// The noun a label names: its last word, lower-cased (`"Red Shirt"` → `shirt`).
pub fn label_head(label: &str) -> Option<String> {
    label.split_whitespace().last().map(str::to_lowercase)
}

/// The noun lexicon: the head of every control label of the data's samples and of every
/// detection label.
pub fn noun_lexicon(data: &SampleData) -> HashSet<String> {
    data.samples
        .iter()
        .flat_map(|s| s.control_labels.iter())
        .map(String::as_str)
        .chain(data.context.labels())
        .filter_map(label_head)
        .collect()
}

/// Scores `captions[k]` (tokenised) against the controls of `samples[k]`; `vectors` as in
/// [`word_vectors`].
pub fn evaluate_captions(
    data: &SampleData,
    samples: &[SampleRow],
    captions: &[Vec<String>],
    vectors: Option<&Path>,
) -> Result<EvalReport> {
    if samples.is_empty() {
        return Err(Error::invalid("evaluation", "no captions to evaluate"));
    }
    if samples.len() != captions.len() {
        return Err(Error::invalid(
            "evaluation",
            format!("{} samples but {} captions", samples.len(), captions.len()),
        ));
    }
    let (vectors, vector_source) = word_vectors(data, vectors)?;
    let lexicon = noun_lexicon(data);
    let references: Vec<Vec<String>> = data
        .references
        .values()
        .flatten()
        .map(|t| tokenize(t))
        .collect();
    let quality = BuiltinQualityScorer::train(&references, &QualityConfig::default()).ok();

    let mut bands: Vec<Vec<SampleScore>> = vec![Vec::new(); COVERAGE_BANDS];
    let mut levels: BTreeMap<i32, Vec<SampleScore>> = BTreeMap::new();
    let mut per_image: BTreeMap<&str, Vec<Vec<String>>> = BTreeMap::new();
    let mut eval_images = Vec::new();
    let mut predictions = Vec::with_capacity(samples.len());
    let mut g_scores = Vec::new();
    for (sample, caption) in samples.iter().zip(captions) {
        let control: Vec<String> = sample
            .control_labels
            .iter()
            .filter_map(|l| label_head(l))
            .collect();
        let nouns = caption_nouns(caption, &lexicon);
        let content = content_match(&control, &nouns, |a, b| {
            noun_similarity(Some(&vectors), a, b)
        });
        let (hit, error) = length_hit(
            sample.length_level,
            sample.word_count,
            word_count(&caption.join(" ")),
        );
        let row = SampleScore {
            iou: content.iou,
            hal: content.hallucination,
            in_level: hit,
            length_error: error,
        };
        bands[coverage_band(sample.coverage)].push(row);
        levels.entry(sample.length_level).or_default().push(row);
        per_image
            .entry(sample.image_id.as_str())
            .or_default()
            .push(caption.clone());
        if let Some(q) = &quality {
            g_scores.push(q.score(caption));
        }
        if let Some(refs) = data.references.get(&sample.image_id) {
            eval_images.push(EvalImage::new(
                sample.sample_id.clone(),
                caption.clone(),
                refs.iter().map(|r| tokenize(r)).collect(),
            ));
        }
        predictions.push(Prediction {
            sample_id: sample.sample_id.clone(),
            image_id: sample.image_id.clone(),
            method: sample.method.clone(),
            asked_level: sample.length_level,
            asked_words: sample.word_count,
            coverage: sample.coverage,
            control_labels: sample.control_labels.clone(),
            caption: caption.join(" "),
            reference: sample.text.clone(),
        });
    }
    let group = |name: String, rows: &[SampleScore]| GroupMetrics {
        group: name,
        samples: rows.len(),
        iou: mean(rows.iter().map(|r| r.iou)),
        hal: mean(rows.iter().filter_map(|r| r.hal)),
        lp: mean(rows.iter().map(|r| if r.in_level { 100.0 } else { 0.0 })),
        l: mean(rows.iter().map(|r| r.length_error)),
    };
    let all: Vec<_> = bands.iter().flatten().copied().collect();
    let overall = group("all".into(), &all);
    let df =
        DocumentFrequency::from_references(eval_images.iter().map(|i| i.references.as_slice()));
    let self_cider = mean(
        per_image
            .values()
            .filter_map(|caps| diversity::self_cider(caps, &df)),
    );
    let (cider_d, bleu) = if eval_images.len() >= 2 {
        (
            Some(cider::cider_d(&eval_images)?.corpus),
            Some(bleu::corpus_bleu(&eval_images)?.corpus),
        )
    } else {
        (None, None)
    };
    let g = mean(g_scores);
    let iou = overall.iou.unwrap_or(0.0);
    let h = match (g, self_cider) {
        (Some(g), Some(sc)) => harmonic_mean(&[iou, g, sc]),
        _ => None,
    };
    Ok(EvalReport {
        samples: samples.len(),
        images: per_image.len(),
        lp: overall.lp.unwrap_or(0.0),
        l: overall.l.unwrap_or(0.0),
        iou,
        hal: overall.hal,
        g,
        self_cider,
        d1: diversity::distinct_n(captions, 1),
        d2: diversity::distinct_n(captions, 2),
        div1: diversity::div_n(per_image.values().map(Vec::as_slice), 1),
        div2: diversity::div_n(per_image.values().map(Vec::as_slice), 2),
        cider_d,
        bleu,
        h,
        by_coverage: bands
            .iter()
            .enumerate()
            .map(|(b, rows)| group(coverage_band_label(b), rows))
            .collect(),
        by_level: levels
            .iter()
            .map(|(level, rows)| group(format!("L{level}"), rows))
            .collect(),
        word_vectors: vector_source,
        predictions,
    })
}
