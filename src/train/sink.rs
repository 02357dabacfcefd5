//! The training sink: samples are pushed into it as Arrow record batches (by the dataflow of a
//! run whose spec has a `[train]` table, or by `capflow train --stream` from a dataset) over a
//! bounded channel, and a model trains on them while they still arrive.
//!
//! # Execution model
//!
//! [`TrainingSink::spawn`] starts the pool and trainer threads ([`super::stream`]) and returns
//! at once. [`TrainingSink::push_batch`] hands one batch of sample rows to the pool thread; it
//! blocks while the channel holds [`SINK_QUEUE_BATCHES`] batches, which happens only while
//! the pool thread waits for the trainer (`stream.max_lag`) or spills a block.
//! [`TrainingSink::finish`] closes the input and waits for the remaining steps. An error on any
//! of the threads is returned by `finish`, and by `push_batch` once the pool thread has stopped.
//!
//! In a run, [`TrainSink`] is the dataflow [`Sink`] around it: every worker's writer sends its
//! parts' sample batches into the channel right after the dataset's shards of the part are
//! written, and the run's commit waits for training to end (`committed`), then writes
//! `train.json` (a [`StreamSummary`]) beside the checkpoint. A failed run stops the trainer
//! (`aborted`) and keeps the last checkpoint it wrote.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arrow::record_batch::RecordBatch;
use crossbeam_channel::{bounded, Sender};
use tch::Device;

use super::config::TrainConfig;
use super::stream::{self, Shared, StreamSummary};
use super::trainer::{select_device, Trainer};
use crate::dataflow::sink::{Sink, SinkWriter};
use crate::error::{Error, Result};
use crate::schema::{rows_to_batch, SampleRow};

/// Sample batches the sink's input channel holds.
pub const SINK_QUEUE_BATCHES: usize = 2;
/// Rows [`TrainingSink::push`] gathers into one batch.
const PUSH_ROWS: usize = 256;
/// The summary a run's training sink writes beside its checkpoint.
pub const SUMMARY_FILE: &str = "train.json";

/// Pool and trainer threads fed with sample batches.
pub struct TrainingSink {
    batches: Option<Sender<RecordBatch>>,
    pending: Vec<SampleRow>,
    shared: Arc<Shared>,
    pool: Option<JoinHandle<Result<()>>>,
    trainer: Option<JoinHandle<Result<StreamSummary>>>,
    received: u64,
}

fn thread_error(what: &str) -> Error {
    Error::invalid("training sink", format!("the {what} thread panicked"))
}

impl TrainingSink {
    /// Starts the threads; the model and its checkpoints go to `out`. With `resume`, training
    /// continues from the checkpoint in `out` (its step count and vocabulary).
    pub fn spawn(
        config: TrainConfig,
        out: PathBuf,
        device: Device,
        resume: bool,
    ) -> Result<TrainingSink> {
        config.validate()?;
        std::fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
        let vocab = stream::starting_vocabulary(&config, &out, resume)?;
        let resuming = resume && Trainer::has_checkpoint(&out);
        // (The curriculum's runs check their own checkpoints.)
        if resuming && !config.curriculum.enabled {
            Trainer::check_resume(&out, config.steps)?;
        }
        let shared = stream::shared(&config, &out, vocab);
        let (sender, receiver) = bounded::<RecordBatch>(SINK_QUEUE_BATCHES);
        let pool = {
            let config = config.clone();
            stream::spawn("capflow-train-pool", &shared, move |shared| {
                stream::receive(shared, &receiver, &config)
            })?
        };
        // The model is built on the trainer thread: libtorch's CPU thread pool belongs to the
        // thread that first runs a parallel operation, and a second pool on another thread
        // would leave the cores oversubscribed (its OpenMP threads then sleep between regions).
        let trainer = stream::spawn("capflow-trainer", &shared, move |shared| {
            // libtorch's intra-op thread count is set per thread.
            if config.threads > 0 {
                tch::set_num_threads(config.threads);
            }
            if config.curriculum.enabled {
                return stream::train_curriculum(shared, &config, &out, device, resume);
            }
            let vocab = shared.vocabulary();
            let trainer = if resuming {
                Trainer::load(&out, &vocab, device)?
            } else {
                Trainer::new(&config, &vocab, device, config.steps, 0)
            };
            stream::train(shared, trainer, &config, &out, device)
        })?;
        Ok(TrainingSink {
            batches: Some(sender),
            pending: Vec::new(),
            shared,
            pool: Some(pool),
            trainer: Some(trainer),
            received: 0,
        })
    }

    /// Another handle on the input channel (for a run's writers).
    pub fn sender(&self) -> Option<Sender<RecordBatch>> {
        self.batches.clone()
    }

    fn stopped(&self) -> Error {
        stopped(&self.shared)
    }

    /// Hands a batch of sample rows (the `samples` table's schema) to the pool thread; blocks
    /// while the channel is full.
    pub fn push_batch(&mut self, batch: RecordBatch) -> Result<()> {
        let sender = self
            .batches
            .as_ref()
            .ok_or_else(|| Error::invalid("training sink", "already finished"))?;
        let rows = batch.num_rows() as u64;
        sender.send(batch).map_err(|_| self.stopped())?;
        self.received += rows;
        Ok(())
    }

    /// Hands one sample to the sink (gathered into batches of 256 rows).
    pub fn push(&mut self, row: SampleRow) -> Result<()> {
        self.pending.push(row);
        if self.pending.len() >= PUSH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = rows_to_batch(&std::mem::take(&mut self.pending))?;
        self.push_batch(batch)
    }

    /// Sample rows handed to the sink so far (by this handle).
    pub fn received(&self) -> u64 {
        self.received + self.pending.len() as u64
    }

    /// Closes the input and waits for training to end.
    pub fn finish(mut self) -> Result<StreamSummary> {
        self.flush()?;
        drop(self.batches.take());
        let pool = self.pool.take().map(|h| h.join());
        let trainer = self.trainer.take().map(|h| h.join());
        if let Some(pool) = pool {
            pool.map_err(|_| thread_error("pool"))??;
        }
        match trainer {
            Some(trainer) => trainer.map_err(|_| thread_error("trainer"))?,
            None => Err(Error::invalid("training sink", "already finished")),
        }
    }

    /// Stops training (a failed run) and waits for the threads; the last checkpoint stays.
    pub fn abort(mut self, reason: &Error) {
        self.shared.fail(reason);
        drop(self.batches.take());
        if let Some(pool) = self.pool.take() {
            let _ = pool.join();
        }
        if let Some(trainer) = self.trainer.take() {
            let _ = trainer.join();
        }
    }
}

fn stopped(shared: &Shared) -> Error {
    Error::invalid(
        "training sink",
        format!(
            "the trainer stopped: {}",
            shared
                .failure()
                .unwrap_or_else(|| "its threads have ended".into())
        ),
    )
}

/// The `[train]` table of a dataflow spec: a training configuration (docs/train.md) with the
/// checkpoint directory and whether to resume from it.
#[derive(Clone, Debug)]
pub struct TrainSpec {
    pub config: TrainConfig,
    pub out: PathBuf,
    pub resume: bool,
}

impl TrainSpec {
    /// Reads `[train]`; `out` defaults to `<dataset directory>.model` beside the dataset.
    pub fn from_table(table: &toml::Value, dataset: &Path) -> Result<TrainSpec> {
        let bad = |reason: String| Error::Config(format!("[train]: {reason}"));
        let mut table = table
            .as_table()
            .cloned()
            .ok_or_else(|| bad("expected a table".into()))?;
        let out = match table.remove("out") {
            None => {
                let mut name = dataset.file_name().unwrap_or_default().to_os_string();
                name.push(".model");
                dataset.with_file_name(name)
            }
            Some(toml::Value::String(path)) => PathBuf::from(path),
            Some(other) => return Err(bad(format!("out must be a path, not {other}"))),
        };
        let resume = match table.remove("resume") {
            None => false,
            Some(toml::Value::Boolean(resume)) => resume,
            Some(other) => return Err(bad(format!("resume must be true or false, not {other}"))),
        };
        let config: TrainConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e| bad(e.to_string()))?;
        config.validate().map_err(|e| match e {
            Error::Config(reason) => bad(reason),
            other => other,
        })?;
        Ok(TrainSpec {
            config,
            out,
            resume,
        })
    }
}

/// A run's training sink ([`Sink`]): started when the run is set up, fed by every worker,
/// finished after the commit.
pub struct TrainSink {
    sink: Mutex<Option<TrainingSink>>,
    sender: Mutex<Option<Sender<RecordBatch>>>,
    shared: Arc<Shared>,
    out: PathBuf,
}

impl TrainSink {
    /// Starts training as `[train]` says, for a run writing its dataset to `dataset`.
    pub fn start(table: &toml::Value, dataset: &Path) -> Result<TrainSink> {
        let spec = TrainSpec::from_table(table, dataset)?;
        let device = select_device(&spec.config.device)?;
        let sink = TrainingSink::spawn(spec.config, spec.out.clone(), device, spec.resume)?;
        tracing::info!(
            out = %spec.out.display(),
            device = ?device,
            "training sink started"
        );
        Ok(TrainSink {
            sender: Mutex::new(sink.sender()),
            shared: sink.shared.clone(),
            sink: Mutex::new(Some(sink)),
            out: spec.out,
        })
    }

    fn take(&self) -> Option<TrainingSink> {
        drop(self.sender.lock().unwrap_or_else(|e| e.into_inner()).take());
        self.sink.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

struct TrainWriter {
    batches: Sender<RecordBatch>,
    shared: Arc<Shared>,
}

impl SinkWriter for TrainWriter {
    fn write(&mut self, samples: &RecordBatch) -> Result<u64> {
        self.batches
            .send(samples.clone())
            .map_err(|_| stopped(&self.shared))?;
        Ok(samples.num_rows() as u64)
    }
}

impl Sink for TrainSink {
    fn open(&self, _worker: usize) -> Result<Box<dyn SinkWriter>> {
        let batches = self
            .sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| Error::invalid("training sink", "already finished"))?;
        Ok(Box::new(TrainWriter {
            batches,
            shared: self.shared.clone(),
        }))
    }

    fn committed(&self, version: u64) -> Result<()> {
        let Some(sink) = self.take() else {
            return Ok(());
        };
        crate::cli::out::status!(
            "train: dataset version {version} committed; training on to the last step ({})",
            self.out.display()
        );
        let summary = sink.finish()?;
        let path = self.out.join(SUMMARY_FILE);
        let text = serde_json::to_string_pretty(&summary)
            .map_err(|e| Error::invalid("training summary", e.to_string()))?;
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        let overlap = match summary.first_step_pooled {
            Some(pooled) => format!(
                "{} while samples arrived; {pooled} of {} samples pooled at the first step",
                summary.streamed_steps, summary.pooled
            ),
            None => format!(
                "the curriculum's {} iterations on {} samples, after scoring models of {} steps",
                summary.curriculum_iterations, summary.pooled, summary.scoring_steps
            ),
        };
        crate::cli::out::status!(
            "train: {} steps ({overlap}), loss {} -> {}, {:.0} tokens/s on {}; summary in {}",
            summary.steps,
            summary.first_loss.map_or("-".into(), |l| format!("{l:.3}")),
            summary.final_loss.map_or("-".into(), |l| format!("{l:.3}")),
            summary.tokens_per_second,
            summary.device,
            path.display()
        );
        Ok(())
    }

    fn aborted(&self, error: &Error) {
        if let Some(sink) = self.take() {
            sink.abort(error);
        }
    }
}
