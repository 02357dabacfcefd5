//! Model evaluation under controls (`capflow eval model`): greedy decoding of every evaluated
//! sample's control signal, then
//! - length control: LP (percent of captions in the asked length level) and L (mean absolute
//!   word-count error);
//! - content control: noun IoU and Hal against the control labels
//!   ([`crate::metrics::control`]);
//! - diversity: D-1, D-2 over all generated captions, self-CIDEr over each image's captions;
//! - quality: G, the built-in quality scorer trained on the data's original captions;
//! - CIDEr-D and BLEU-1..4 against the image's original captions;
//! - H, the harmonic mean of IoU, G and self-CIDEr;
//! - IoU, Hal and LP by coverage band, LP and L by length level.
//!
//! Caption nouns are found without a tagger: a caption word is a noun when it is the last word
//! of some control or detection label of the data (the noun lexicon), which is exactly the
//! vocabulary control nouns are drawn from.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tch::Device;

use super::batch::build_batch;
use super::data::{encode_sample, TrainingData};
use super::model::Captioner;
use super::trainer::{Trainer, VOCAB_FILE};
use super::vocab::{normalize_label, Vocabulary};
use crate::augment::control::word_count;
use crate::error::{Error, Result};
use crate::metrics::cider::DocumentFrequency;
use crate::metrics::control::{
    caption_nouns, content_match, coverage_band, coverage_band_label, harmonic_mean, length_hit,
    noun_similarity, COVERAGE_BANDS,
};
use crate::metrics::{bleu, cider, diversity, EvalImage};
use crate::schema::SampleRow;
use crate::select::quality::{BuiltinQualityScorer, QualityConfig, QualityScorer};
use crate::text::ppmi::{train_ppmi_vectors, PpmiConfig};
use crate::text::tokenize::tokenize;
use crate::text::{VectorFormat, WordVectors};

/// What to evaluate.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Sample splits to evaluate (empty: all).
    pub splits: Vec<String>,
    /// Sample methods to evaluate (empty: all).
    pub methods: Vec<String>,
    /// Evaluate at most this many samples (the first in data order).
    pub max_samples: Option<usize>,
    /// GloVe or word2vec text file for noun similarity; without one, PPMI vectors are trained
    /// on the data's captions ([`crate::text::ppmi`]).
    pub vectors: Option<PathBuf>,
    pub device: Device,
    /// Decoder tokens per decoding batch.
    pub token_budget: usize,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            splits: Vec::new(),
            methods: Vec::new(),
            max_samples: None,
            vectors: None,
            device: Device::Cpu,
            token_budget: 4096,
        }
    }
}

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

/// One generated caption.
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
    pub reference: String,
}

/// Everything `capflow eval model` reports.
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
    pub cider_d: Option<f64>,
    pub bleu: Option<[f64; 4]>,
    pub h: Option<f64>,
    pub by_coverage: Vec<GroupMetrics>,
    pub by_level: Vec<GroupMetrics>,
    pub word_vectors: String,
    pub predictions: Vec<Prediction>,
}

/// Loads the model in `checkpoint` (a `capflow train --out` directory) and evaluates it.
pub fn evaluate_checkpoint(
    checkpoint: &Path,
    data: &TrainingData,
    options: &EvalOptions,
) -> Result<EvalReport> {
    let vocab = Vocabulary::load(&checkpoint.join(VOCAB_FILE))?;
    let trainer = Trainer::load(checkpoint, &vocab, options.device)?;
    evaluate_model(&trainer.model, &trainer.config, &vocab, data, options)
}

fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The samples an evaluation covers.
pub fn eval_samples(data: &TrainingData, options: &EvalOptions) -> Vec<SampleRow> {
    let mut samples: Vec<SampleRow> = data
        .samples
        .iter()
        .filter(|s| options.splits.is_empty() || options.splits.contains(&s.split))
        .filter(|s| options.methods.is_empty() || options.methods.contains(&s.method))
        .cloned()
        .collect();
    if let Some(n) = options.max_samples {
        samples.truncate(n);
    }
    samples
}

/// Greedy captions for `samples` under their controls.
pub fn generate(
    model: &Captioner,
    config: &super::TrainConfig,
    vocab: &Vocabulary,
    data: &TrainingData,
    samples: &[SampleRow],
    token_budget: usize,
) -> Vec<Vec<String>> {
    let encoded: Vec<_> = samples
        .iter()
        .map(|s| encode_sample(s, &data.context, vocab, config))
        .collect();
    let per_batch = (token_budget / config.model.max_tokens.max(1)).max(1);
    let indices: Vec<usize> = (0..samples.len()).collect();
    let mut out = Vec::with_capacity(samples.len());
    for chunk in indices.chunks(per_batch) {
        let batch = build_batch(&encoded, chunk, config.model.feature_dim);
        let input = batch.input.to_device(model.device);
        out.extend(
            model
                .greedy_decode(&input)
                .iter()
                .map(|ids| vocab.decode(ids)),
        );
    }
    out
}

fn word_vectors(data: &TrainingData, options: &EvalOptions) -> Result<(WordVectors, String)> {
    if let Some(path) = &options.vectors {
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

fn head(label: &str) -> Option<String> {
    normalize_label(label)
        .split_whitespace()
        .last()
        .map(str::to_string)
}

/// Evaluates `model` on the samples `options` selects from `data`.
pub fn evaluate_model(
    model: &Captioner,
    config: &super::TrainConfig,
    vocab: &Vocabulary,
    data: &TrainingData,
    options: &EvalOptions,
) -> Result<EvalReport> {
    let samples = eval_samples(data, options);
    if samples.is_empty() {
        return Err(Error::invalid(
            "evaluation data",
            format!(
                "no samples of splits {:?} and methods {:?}",
                options.splits, options.methods
            ),
        ));
    }
    let captions = generate(model, config, vocab, data, &samples, options.token_budget);
    let (vectors, vector_source) = word_vectors(data, options)?;
    let lexicon: HashSet<String> = data
        .samples
        .iter()
        .flat_map(|s| s.control_labels.iter())
        .map(String::as_str)
        .chain(data.context.labels())
        .filter_map(head)
        .collect();
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
    for (sample, caption) in samples.iter().zip(&captions) {
        let control: Vec<String> = sample
            .control_labels
            .iter()
            .filter_map(|l| head(l))
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
        d1: diversity::distinct_n(&captions, 1),
        d2: diversity::distinct_n(&captions, 2),
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
