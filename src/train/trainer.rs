//! The training loop: a loader thread builds batches into a bounded crossbeam channel, the
//! trainer thread takes them in step order, and checkpoints hold everything a resumed run needs
//! to continue bit for bit on the CPU.
//!
//! # Determinism
//!
//! The batch of step `s` is a function of `(seed, s)` and the pool ([`DataPlan`]); dropout is
//! seeded from `(seed, s)` before every step; the optimizer state is saved with the weights.
//! So a run resumed from the checkpoint of step `s` computes exactly what the uninterrupted run
//! computes (on the CPU; CUDA kernels need not be deterministic).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver};
use serde::{Deserialize, Serialize};
use tch::{Device, Reduction, Tensor};

use super::batch::{Batch, RegionInputs};
use super::config::TrainConfig;
use super::data::{epoch_seed, plan_batches, weighted_epoch};
use super::model::Captioner;
use super::optim::{learning_rate, AdamW, Gradients};
use super::source::SampleSource;
use super::vocab::{Vocabulary, PAD};
use crate::error::{Error, Result};
use crate::seed::splitmix64;

/// Tensor file of a checkpoint (weights and optimizer moments).
pub const CHECKPOINT_TENSORS: &str = "checkpoint.ot";
/// Metadata of a checkpoint (step, configuration, losses); written last.
pub const CHECKPOINT_META: &str = "checkpoint.json";
/// The vocabulary beside the checkpoint.
pub const VOCAB_FILE: &str = "vocab.json";

/// Picks the device: `auto` (the first GPU when CUDA is available), `cpu`, `cuda`, `cuda:N`.
pub fn select_device(spec: &str) -> Result<Device> {
    let cuda = |n: usize| {
        if tch::Cuda::is_available() && (n as i64) < tch::Cuda::device_count() {
            Ok(Device::Cuda(n))
        } else {
            Err(Error::Config(format!(
                "device {spec:?}: CUDA device {n} is not available (libtorch sees {} GPUs)",
                tch::Cuda::device_count()
            )))
        }
    };
    match spec {
        "auto" => Ok(Device::cuda_if_available()),
        "cpu" => Ok(Device::Cpu),
        "cuda" => cuda(0),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => cuda(n),
            _ => Err(Error::Config(format!(
                "device {other:?}: expected auto, cpu, cuda or cuda:N"
            ))),
        },
    }
}

/// A stretch of training on one pool of samples: all of a plain run, or one curriculum
/// iteration.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Indices into the encoded samples.
    pub pool: Vec<usize>,
    pub steps: u64,
    /// Per-pool-entry sampling weights (the `balanced` option); `None` for plain epochs.
    pub weights: Option<Vec<f64>>,
}

/// Which samples every step trains on.
#[derive(Clone, Debug)]
pub struct DataPlan {
    pub segments: Vec<Segment>,
    pub seed: u64,
    pub token_budget: usize,
    pub max_batch_samples: usize,
}

impl DataPlan {
    pub fn total_steps(&self) -> u64 {
        self.segments.iter().map(|s| s.steps).sum()
    }

    /// The sample indices of every step from `start` on, in order.
    pub fn batches_from<'a>(
        &'a self,
        lengths: &'a [u32],
        start: u64,
    ) -> impl Iterator<Item = Vec<usize>> + 'a {
        let mut offset = 0u64;
        self.segments
            .iter()
            .enumerate()
            .flat_map(move |(k, segment)| {
                let first = offset;
                offset += segment.steps;
                let skip = start.saturating_sub(first).min(segment.steps);
                self.segment_batches(k as u64, segment, lengths)
                    .take(segment.steps as usize)
                    .skip(skip as usize)
            })
    }

    fn segment_batches<'a>(
        &'a self,
        id: u64,
        segment: &'a Segment,
        lengths: &'a [u32],
    ) -> impl Iterator<Item = Vec<usize>> + 'a {
        let empty = segment.pool.is_empty();
        (0u64..).take_while(move |_| !empty).flat_map(move |epoch| {
            let seed = epoch_seed(self.seed, id, epoch);
            let order = match &segment.weights {
                Some(w) => weighted_epoch(&segment.pool, w, seed),
                None => segment.pool.clone(),
            };
            plan_batches(
                &order,
                lengths,
                self.token_budget,
                self.max_batch_samples,
                splitmix64(seed),
            )
        })
    }
}

/// Starts the loader thread: it builds the batches of steps `start..` and sends them, on
/// `device`, through a channel holding at most `capacity` batches. The thread ends when the plan
/// is done, the receiver is dropped, or `samples` cannot be read (its error is the thread's).
pub fn spawn_loader(
    samples: SampleSource,
    plan: DataPlan,
    start: u64,
    inputs: RegionInputs,
    device: Device,
    capacity: usize,
) -> (Receiver<Batch>, std::thread::JoinHandle<Result<()>>) {
    let (sender, receiver) = bounded(capacity);
    let handle = std::thread::spawn(move || {
        let total = plan.total_steps().saturating_sub(start) as usize;
        for indices in plan
            .batches_from(samples.token_lengths(), start)
            .take(total)
        {
            let batch = samples.batch(&indices, inputs)?;
            let batch = if device == Device::Cpu {
                batch
            } else {
                batch.to_device(device)
            };
            if sender.send(batch).is_err() {
                break;
            }
        }
        Ok(())
    });
    (receiver, handle)
}

/// What a checkpoint records besides the tensors.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub step: u64,
    pub total_steps: u64,
    pub optimizer_step: u64,
    pub config: TrainConfig,
    /// Loss of every step so far.
    pub losses: Vec<f64>,
    pub tokens: u64,
    pub engine_version: String,
}

/// A model with its optimizer, at some step of a run.
pub struct Trainer {
    pub model: Captioner,
    pub optimizer: AdamW,
    pub config: TrainConfig,
    pub step: u64,
    pub total_steps: u64,
    pub losses: Vec<f64>,
    pub tokens: u64,
    /// The flat gradients of the last step, written over by the next.
    gradients: Option<Tensor>,
}

impl Trainer {
    /// A fresh model (weights from `config.seed ^ init_salt`) and optimizer.
    pub fn new(
        config: &TrainConfig,
        vocab: &Vocabulary,
        device: Device,
        total_steps: u64,
        init_salt: u64,
    ) -> Trainer {
        let model = Captioner::new(
            &config.model,
            vocab,
            device,
            config.precision,
            splitmix64(config.seed ^ init_salt),
        );
        let optimizer = AdamW::new(&config.optimizer, &model.parameters);
        Trainer {
            model,
            optimizer,
            config: config.clone(),
            step: 0,
            total_steps,
            losses: Vec::new(),
            tokens: 0,
            gradients: None,
        }
    }

    /// One optimizer step on `batch`; returns the loss (label-smoothed cross-entropy per target
    /// token).
    pub fn train_step(&mut self, batch: &Batch) -> f64 {
        // Dropout masks depend on (seed, step) only.
        if let Some(words) = batch.words {
            self.model.output_words = words;
        }
        let rng = super::model::lock_rng();
        tch::manual_seed(splitmix64(self.config.seed ^ 0xd0_d0 ^ self.step) as i64 >> 1);
        let logits = self.model.forward(&batch.input, &batch.inputs, true);
        let vocab = logits.size()[2];
        let loss = logits.reshape([-1, vocab]).cross_entropy_loss::<Tensor>(
            &batch.targets.reshape([-1]),
            None,
            Reduction::Mean,
            PAD,
            self.config.optimizer.label_smoothing,
        );
        let buffer = self.gradients.take();
        let mut gradients = Gradients::of_into(&loss, &self.model.parameters, buffer);
        drop(rng);
        gradients.clip_norm(self.config.optimizer.clip_norm);
        let lr = learning_rate(&self.config.optimizer, self.step, self.total_steps);
        self.optimizer
            .step(&mut self.model.parameters, &gradients, lr);
        self.gradients = Some(gradients.into_flat());
        self.step += 1;
        self.tokens += batch.tokens as u64;
        let value = loss.double_value(&[]);
        self.losses.push(value);
        value
    }

    /// One step on `batch` ([`Self::train_step`]) that fails on a loss that is not finite,
    /// then writes a checkpoint with `save` every `checkpoint_every` steps before `end` and logs
    /// every 100 steps. `dir` names the run in the error.
    pub fn checked_step(
        &mut self,
        batch: &Batch,
        dir: &Path,
        checkpoint_every: u64,
        end: u64,
        save: impl FnOnce(&Trainer) -> Result<()>,
    ) -> Result<f64> {
        let loss = self.train_step(batch);
        if !loss.is_finite() {
            return Err(Error::invalid(
                format!("training run {}", dir.display()),
                format!("loss became {loss} at step {}", self.step),
            ));
        }
        if checkpoint_every > 0 && self.step.is_multiple_of(checkpoint_every) && self.step < end {
            save(self)?;
        }
        if self.step.is_multiple_of(100) {
            tracing::info!(step = self.step, loss, "training");
        }
        Ok(loss)
    }

    /// Writes `checkpoint.ot` then `checkpoint.json` into `dir`, each by an atomic rename.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let p = &self.model.parameters;
        let mut named: Vec<(String, &Tensor)> = Vec::with_capacity(3 * p.names.len());
        for (k, name) in p.names.iter().enumerate() {
            named.push((format!("param/{name}"), &p.tensors[k]));
            named.push((format!("exp_avg/{name}"), &self.optimizer.exp_avg[k]));
            named.push((format!("exp_avg_sq/{name}"), &self.optimizer.exp_avg_sq[k]));
        }
        let tensors = dir.join(CHECKPOINT_TENSORS);
        let tmp = dir.join(format!("{CHECKPOINT_TENSORS}.tmp"));
        Tensor::save_multi(&named, &tmp)
            .map_err(|e| Error::invalid(format!("checkpoint {}", tmp.display()), e.to_string()))?;
        std::fs::rename(&tmp, &tensors).map_err(|e| Error::io(&tensors, e))?;
        let meta = CheckpointMeta {
            step: self.step,
            total_steps: self.total_steps,
            optimizer_step: self.optimizer.step,
            config: self.config.clone(),
            losses: self.losses.clone(),
            tokens: self.tokens,
            engine_version: crate::ENGINE_VERSION.to_string(),
        };
        let text = serde_json::to_string(&meta)
            .map_err(|e| Error::invalid("checkpoint metadata", e.to_string()))?;
        let path = dir.join(CHECKPOINT_META);
        let tmp = dir.join(format!("{CHECKPOINT_META}.tmp"));
        std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))
    }

    /// Whether `dir` holds a complete checkpoint.
    pub fn has_checkpoint(dir: &Path) -> bool {
        dir.join(CHECKPOINT_META).is_file() && dir.join(CHECKPOINT_TENSORS).is_file()
    }

    /// Checks that the checkpoint in `dir` belongs to a run of `total` steps (without loading
    /// its tensors), as a resumed run must.
    pub fn check_resume(dir: &Path, total: u64) -> Result<()> {
        let steps = Self::checkpoint_meta(dir)?.total_steps;
        if steps != total {
            return Err(Error::Config(format!(
                "{}: the checkpoint belongs to a run of {steps} steps, this one has {total}; use \
                 another output directory or the same configuration and data",
                dir.display()
            )));
        }
        Ok(())
    }

    fn checkpoint_meta(dir: &Path) -> Result<CheckpointMeta> {
        let meta_path = dir.join(CHECKPOINT_META);
        let text = std::fs::read_to_string(&meta_path).map_err(|e| Error::io(&meta_path, e))?;
        serde_json::from_str(&text).map_err(|e| {
            Error::record(meta_path.display().to_string(), "checkpoint", e.to_string())
        })
    }

    /// Reads the checkpoint in `dir`: model, optimizer state, step and losses.
    pub fn load(dir: &Path, vocab: &Vocabulary, device: Device) -> Result<Trainer> {
        let meta = Self::checkpoint_meta(dir)?;
        let mut trainer = Trainer::new(&meta.config, vocab, device, meta.total_steps, 0);
        let path = dir.join(CHECKPOINT_TENSORS);
        let stored = Tensor::load_multi_with_device(&path, device)
            .map_err(|e| Error::invalid(format!("checkpoint {}", path.display()), e.to_string()))?;
        let mut by_name: std::collections::HashMap<String, Tensor> = stored.into_iter().collect();
        let mut take = |key: String| {
            by_name.remove(&key).ok_or_else(|| {
                Error::record(
                    path.display().to_string(),
                    key.clone(),
                    "tensor missing: the checkpoint was written for another model configuration",
                )
            })
        };
        let p = &mut trainer.model.parameters;
        for (k, name) in p.names.clone().iter().enumerate() {
            let value = take(format!("param/{name}"))?;
            if value.size() != p.tensors[k].size() {
                return Err(Error::record(
                    path.display().to_string(),
                    format!("param/{name}"),
                    format!(
                        "shape {:?} where the model has {:?} (another vocabulary or model size?)",
                        value.size(),
                        p.tensors[k].size()
                    ),
                ));
            }
            // In place: the parameters and moments are views of the flat tensors.
            tch::no_grad(|| p.tensors[k].copy_(&value));
            let avg = take(format!("exp_avg/{name}"))?;
            trainer.optimizer.exp_avg[k].copy_(&avg);
            let avg_sq = take(format!("exp_avg_sq/{name}"))?;
            trainer.optimizer.exp_avg_sq[k].copy_(&avg_sq);
        }
        trainer.step = meta.step;
        trainer.optimizer.step = meta.optimizer_step;
        trainer.losses = meta.losses;
        trainer.tokens = meta.tokens;
        Ok(trainer)
    }
}

/// Steps whose batch was not ready when the trainer asked for it, and the time they waited.
#[derive(Clone, Copy, Debug, Default)]
pub struct DataWaits {
    pub steps: u64,
    pub time: Duration,
}

/// The loader's next batch, or `None` once it has sent its last; a wait for it is counted in
/// `waits` when `count` holds.
pub fn next_batch(batches: &Receiver<Batch>, waits: &mut DataWaits, count: bool) -> Option<Batch> {
    match batches.try_recv() {
        Ok(batch) => Some(batch),
        Err(crossbeam_channel::TryRecvError::Disconnected) => None,
        Err(crossbeam_channel::TryRecvError::Empty) => {
            let waited = Instant::now();
            let batch = batches.recv().ok()?;
            if count {
                waits.steps += 1;
                waits.time += waited.elapsed();
            }
            Some(batch)
        }
    }
}

/// How one training run ended.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub dir: PathBuf,
    pub steps: u64,
    /// Loss of every step of the run (including steps before a resume).
    pub losses: Vec<f64>,
    /// Target tokens trained on in this process (not before a resume).
    pub tokens_this_process: u64,
    pub seconds: f64,
    pub device: String,
    /// Steps whose batch was not ready when the trainer asked for it, and the time they waited:
    /// how often the loader starved the device.
    pub data_waits: u64,
    pub data_wait_seconds: f64,
}

impl RunSummary {
    pub fn tokens_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.tokens_this_process as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Trains the steps of `plan` not yet done, checkpointing into `dir` every
/// `config.checkpoint_every` steps and at the end. With `resume`, starts from the checkpoint in
/// `dir` when there is one. `stop_after` ends the run early (after that many steps in total),
/// leaving a checkpoint to resume from.
#[allow(clippy::too_many_arguments)]
pub fn run_plan(
    dir: &Path,
    samples: SampleSource,
    plan: DataPlan,
    config: &TrainConfig,
    vocab: &Vocabulary,
    device: Device,
    init_salt: u64,
    resume: bool,
    stop_after: Option<u64>,
) -> Result<RunSummary> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    vocab.save(&dir.join(VOCAB_FILE))?;
    let total = plan.total_steps();
    let mut trainer = if resume && Trainer::has_checkpoint(dir) {
        Trainer::check_resume(dir, total)?;
        Trainer::load(dir, vocab, device)?
    } else {
        Trainer::new(config, vocab, device, total, init_salt)
    };
    let end = stop_after.map_or(total, |s| s.min(total));
    let started = Instant::now();
    let tokens_before = trainer.tokens;
    let mut waits = DataWaits::default();
    if trainer.step < end {
        let (batches, loader) = spawn_loader(
            samples,
            plan,
            trainer.step,
            RegionInputs::from(&config.model),
            device,
            config.batching.queue_batches,
        );
        while trainer.step < end {
            let Some(batch) = next_batch(&batches, &mut waits, true) else {
                // The loader's own error says why it stopped.
                join_loader(loader)?;
                return Err(Error::invalid(
                    "training data",
                    "the loader thread stopped early",
                ));
            };
            trainer.checked_step(&batch, dir, config.checkpoint_every, end, |t| t.save(dir))?;
        }
        drop(batches);
        join_loader(loader)?;
    }
    trainer.save(dir)?;
    Ok(RunSummary {
        dir: dir.to_path_buf(),
        steps: trainer.step,
        losses: trainer.losses.clone(),
        tokens_this_process: trainer.tokens - tokens_before,
        seconds: started.elapsed().as_secs_f64(),
        device: format!("{device:?}"),
        data_waits: waits.steps,
        data_wait_seconds: waits.time.as_secs_f64(),
    })
}

fn join_loader(loader: std::thread::JoinHandle<Result<()>>) -> Result<()> {
    loader
        .join()
        .map_err(|_| Error::invalid("training data", "the loader thread panicked"))?
}

/// Mean per-token log-likelihoods of `indices` under `model`, in order (eval batches by token
/// budget, no shuffling); an error when `samples` cannot be read.
pub fn score_samples(
    model: &Captioner,
    samples: &SampleSource,
    indices: &[usize],
    token_budget: usize,
) -> Result<Vec<f64>> {
    let lengths = samples.token_lengths();
    let mut out = Vec::with_capacity(indices.len());
    let mut start = 0;
    while start < indices.len() {
        let mut end = start;
        let mut longest = 0;
        while end < indices.len() {
            let len = lengths[indices[end]] as usize;
            if end > start && (end - start + 1) * longest.max(len) > token_budget {
                break;
            }
            longest = longest.max(len);
            end += 1;
        }
        let batch = samples
            .batch(&indices[start..end], (&model.config).into())?
            .to_device(model.device);
        out.extend(model.mean_log_likelihood(&batch.input, &batch.inputs, &batch.targets));
        start = end;
    }
    Ok(out)
}
