//! Model evaluation under controls (`capflow eval model`): greedy decoding of every evaluated
//! sample's control signal, scored by [`crate::metrics::control_eval`], the same code
//! `capflow eval controls` scores any captions file with.

use std::path::{Path, PathBuf};

use tch::Device;

use super::batch::build_batch;
use super::data::{encode_sample, TrainingData};
use super::model::Captioner;
use super::pixels::ImageCrops;
use super::trainer::{Trainer, VOCAB_FILE};
use super::vocab::Vocabulary;
use crate::error::{Error, Result};
use crate::metrics::control_eval::{evaluate_captions, select_samples};
pub use crate::metrics::control_eval::{EvalReport, GroupMetrics, Prediction};
use crate::schema::SampleRow;

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

/// The samples an evaluation covers.
pub fn eval_samples(data: &TrainingData, options: &EvalOptions) -> Vec<SampleRow> {
    let mut samples = select_samples(data, &options.splits, &options.methods);
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
    let images = ImageCrops::new(config);
    let encoded: Vec<_> = samples
        .iter()
        .map(|s| encode_sample(s, &data.context, vocab, config, images.as_ref()))
        .collect();
    if let Some(report) = images.as_ref().and_then(ImageCrops::report) {
        crate::cli::out::status!("warning: {report}");
    }
    let per_batch = (token_budget / config.model.max_tokens.max(1)).max(1);
    let indices: Vec<usize> = (0..samples.len()).collect();
    let mut out = Vec::with_capacity(samples.len());
    for chunk in indices.chunks(per_batch) {
        let batch = build_batch(&encoded, chunk, (&config.model).into());
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
    evaluate_captions(data, &samples, &captions, options.vectors.as_deref())
}
