//! The training configuration: a TOML file (`capflow train --config`), every field optional.
//!
//! ```toml
//! seed = 1
//! steps = 2000
//! device = "auto"          # "cpu", "cuda", "cuda:1"
//! precision = "auto"       # "f32", "bf16" (bf16 matmuls, f32 weights); auto = bf16 on CUDA
//! [model]
//! d_model = 256
//! [optimizer]
//! lr = 5e-4
//! [batching]
//! token_budget = 4096
//! [curriculum]
//! enabled = true
//! c_percent = 2.0
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::select::curriculum::CurriculumConfig;

/// Sizes of the captioner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub d_model: i64,
    pub heads: i64,
    pub encoder_layers: i64,
    pub decoder_layers: i64,
    pub ff_dim: i64,
    pub dropout: f64,
    /// Longest caption in tokens (`<bos>` and `<eos>` included); longer ones are cut.
    pub max_tokens: usize,
    /// Most region tokens per sample (control regions first, then detections by score).
    pub max_regions: usize,
    /// Word-count controls above this share the last embedding.
    pub max_word_count: i64,
    /// Length of the optional detection feature vectors (`detections.feature`); 0 ignores them.
    pub feature_dim: i64,
    /// Side of the square RGB crop each region is cut to from its image, read by a small
    /// convolutional encoder trained with the captioner; 0: the model sees no pixels. A positive
    /// value needs `[images] dir` and must be a multiple of 4.
    pub image_crop: i64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            d_model: 256,
            heads: 4,
            encoder_layers: 2,
            decoder_layers: 3,
            ff_dim: 1024,
            dropout: 0.1,
            max_tokens: 48,
            max_regions: 32,
            max_word_count: 64,
            feature_dim: 0,
            image_crop: 0,
        }
    }
}

/// AdamW with linear warm-up and cosine decay, gradient clipping, label smoothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub warmup_steps: u64,
    /// The learning rate at the end of the cosine, as a fraction of `lr`.
    pub min_lr_fraction: f64,
    /// Global L2 norm the gradients are clipped to (0 turns clipping off).
    pub clip_norm: f64,
    pub label_smoothing: f64,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            lr: 5e-4,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            warmup_steps: 100,
            min_lr_fraction: 0.0,
            clip_norm: 1.0,
            label_smoothing: 0.1,
        }
    }
}

/// How batches are formed and queued.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchingConfig {
    /// Most decoder tokens in a batch, padding included: batches of long captions hold fewer
    /// samples.
    pub token_budget: usize,
    /// Most samples in a batch whatever their length.
    pub max_batch_samples: usize,
    /// Batches the loader thread may build ahead of the trainer (the bounded queue).
    pub queue_batches: usize,
}

impl Default for BatchingConfig {
    fn default() -> Self {
        BatchingConfig {
            token_budget: 4096,
            max_batch_samples: 256,
            queue_batches: 8,
        }
    }
}

/// How the training sink of a run (`[train]` in a dataflow spec) takes samples while the
/// augmentation still runs (docs/train.md, "Training as a sink").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Samples received before the first step.
    pub start_after: usize,
    /// Memory the pool of received samples may take (MiB); older blocks beyond it wait on
    /// local disk as Arrow IPC files.
    pub pool_memory_mb: f64,
    /// Samples per block of the pool (the unit that is spilled and shuffled).
    pub block_samples: usize,
    /// Most received samples not yet trained on before the run waits for the trainer
    /// (0: the run never waits; the pool takes everything).
    pub max_lag: usize,
    /// Embedding rows reserved for words, region labels and verbs: the vocabulary grows as
    /// samples arrive, and a new item past these counts is `<unk>`.
    pub vocab_words: usize,
    pub vocab_labels: usize,
    pub vocab_verbs: usize,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            start_after: 1024,
            pool_memory_mb: 256.0,
            block_samples: 4096,
            max_lag: 0,
            vocab_words: 8_192,
            vocab_labels: 1_024,
            vocab_verbs: 256,
        }
    }
}

/// Where the images of the samples are (`[images]`), for a model with `image_crop > 0`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImagesConfig {
    /// The directory of the image files; relative to the configuration file (or to the
    /// dataflow spec, in its `[train.images]`).
    pub dir: Option<std::path::PathBuf>,
    /// An image's file under `dir`: `{image_id}`, or `{file_name}` / `{stem}` (the images
    /// table's file name, with or without its extension; not in a run's `[train]`, whose sink
    /// sees samples only). Default `{image_id}.png`.
    pub file_name: Option<String>,
}

impl ImagesConfig {
    /// The file-name template.
    pub fn template(&self) -> &str {
        self.file_name.as_deref().unwrap_or("{image_id}.png")
    }

    /// Makes a relative `dir` relative to `base`.
    pub fn resolve(&mut self, base: &Path) {
        if let Some(dir) = &mut self.dir {
            if dir.is_relative() {
                let joined = base.join(&*dir);
                *dir = std::path::absolute(&joined).unwrap_or(joined);
            }
        }
    }
}

/// Mixed precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// bf16 on CUDA, f32 on CPU.
    Auto,
    F32,
    /// Matrix products in bf16 with f32 weights, optimizer state, norms and loss (what
    /// `torch.autocast(dtype=torch.bfloat16)` does).
    Bf16,
}

/// The whole training configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    pub seed: u64,
    /// Training steps (without the curriculum; with it, see `curriculum`).
    pub steps: u64,
    /// `auto` (CUDA when available), `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    pub precision: Precision,
    /// Write a checkpoint every this many steps (0: only at the end).
    pub checkpoint_every: u64,
    /// libtorch intra-op threads on CPU (0: libtorch's default).
    pub threads: i32,
    /// Sample splits to train on.
    pub splits: Vec<String>,
    /// Sample methods to train on (empty: all).
    pub methods: Vec<String>,
    pub model: ModelConfig,
    pub optimizer: OptimizerConfig,
    pub batching: BatchingConfig,
    pub curriculum: CurriculumConfig,
    /// The training sink of a run (`[train.stream]`); `capflow train --data` ignores it.
    pub stream: StreamConfig,
    /// The images the model's regions are cut from (with `model.image_crop > 0`).
    pub images: ImagesConfig,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            seed: 0,
            steps: 2000,
            device: "auto".to_string(),
            precision: Precision::Auto,
            checkpoint_every: 500,
            threads: 0,
            splits: vec!["train".to_string()],
            methods: Vec::new(),
            model: ModelConfig::default(),
            optimizer: OptimizerConfig::default(),
            batching: BatchingConfig::default(),
            curriculum: CurriculumConfig::default(),
            stream: StreamConfig::default(),
            images: ImagesConfig::default(),
        }
    }
}

impl TrainConfig {
    /// Reads a TOML file; unknown keys are errors that name the file. A relative `[images] dir`
    /// is relative to the file.
    pub fn read(path: &Path) -> Result<TrainConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut config: TrainConfig =
            toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        config
            .images
            .resolve(path.parent().unwrap_or(Path::new(".")));
        config.validate()?;
        Ok(config)
    }

    /// Checks values a typo could break; errors name the key.
    pub fn validate(&self) -> Result<()> {
        let m = &self.model;
        if m.d_model <= 0 || m.heads <= 0 || m.d_model % m.heads != 0 {
            return Err(Error::Config(format!(
                "model.d_model ({}) must be a positive multiple of model.heads ({})",
                m.d_model, m.heads
            )));
        }
        if m.max_tokens < 3 || m.max_regions == 0 || m.max_word_count <= 0 {
            return Err(Error::Config(
                "model.max_tokens must be at least 3, model.max_regions and model.max_word_count positive"
                    .into(),
            ));
        }
        if !(0.0..1.0).contains(&m.dropout) || !(0.0..1.0).contains(&self.optimizer.label_smoothing)
        {
            return Err(Error::Config(
                "model.dropout and optimizer.label_smoothing must be in [0, 1)".into(),
            ));
        }
        if self.batching.token_budget < m.max_tokens || self.batching.max_batch_samples == 0 {
            return Err(Error::Config(format!(
                "batching.token_budget ({}) must hold one caption of model.max_tokens ({}) and \
                 batching.max_batch_samples must be positive",
                self.batching.token_budget, m.max_tokens
            )));
        }
        if self.batching.queue_batches == 0 {
            return Err(Error::Config(
                "batching.queue_batches must be positive".into(),
            ));
        }
        if m.image_crop < 0 || m.image_crop % 4 != 0 {
            return Err(Error::Config(format!(
                "model.image_crop ({}) must be 0 (no pixels) or a positive multiple of 4",
                m.image_crop
            )));
        }
        if m.image_crop > 0 && self.images.dir.is_none() {
            return Err(Error::Config(
                "model.image_crop > 0 reads the samples' images: set [images] dir (and file_name)"
                    .into(),
            ));
        }
        if self.optimizer.lr.is_nan() || self.optimizer.lr <= 0.0 {
            return Err(Error::Config("optimizer.lr must be positive".into()));
        }
        let stream = &self.stream;
        if stream.block_samples == 0
            || stream.pool_memory_mb.is_nan()
            || stream.pool_memory_mb <= 0.0
        {
            return Err(Error::Config(
                "stream.block_samples and stream.pool_memory_mb must be positive".into(),
            ));
        }
        if stream.vocab_words <= 4 || stream.vocab_labels <= 3 || stream.vocab_verbs <= 2 {
            return Err(Error::Config(
                "stream.vocab_words, stream.vocab_labels and stream.vocab_verbs must leave room \
                 past the special tokens"
                    .into(),
            ));
        }
        self.curriculum.validate()
    }
}
