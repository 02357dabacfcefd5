//! The training sink: samples are pushed into it (by the dataflow, or by `capflow train` from a
//! dataset) over a bounded crossbeam channel and trained on by a trainer thread.
//!
//! # Execution model
//!
//! [`TrainingSink::spawn`] starts the trainer thread and returns at once. [`TrainingSink::push`]
//! hands one [`SampleRow`] to the thread; it blocks while the channel holds `capacity` rows, so a
//! fast producer never grows memory without bound. [`TrainingSink::finish`] closes the channel
//! and waits: the thread builds the vocabulary from everything it received (the batch plan of
//! every step depends on the whole pool, which keeps training deterministic), then trains
//! ([`train_samples`]) while its loader thread feeds batches through a second bounded channel
//! (`batching.queue_batches`). An error on the trainer thread is returned by `finish`, and by
//! `push` once the thread has stopped.

use std::path::PathBuf;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Sender};
use tch::Device;

use super::config::TrainConfig;
use super::data::RegionContext;
use super::run::{train_samples, JobOptions, TrainOutcome};
use crate::error::{Error, Result};
use crate::schema::SampleRow;

/// Rows the sink's input channel holds by default.
pub const DEFAULT_SINK_CAPACITY: usize = 1024;

/// A trainer thread fed with samples.
pub struct TrainingSink {
    rows: Option<Sender<SampleRow>>,
    handle: Option<JoinHandle<Result<TrainOutcome>>>,
    received: u64,
}

impl TrainingSink {
    /// Starts the trainer thread, which writes the model to `out`.
    pub fn spawn(
        config: TrainConfig,
        context: RegionContext,
        out: PathBuf,
        device: Device,
        options: JobOptions,
        capacity: usize,
    ) -> Result<TrainingSink> {
        config.validate()?;
        let (sender, receiver) = bounded::<SampleRow>(capacity.max(1));
        let handle = std::thread::Builder::new()
            .name("capflow-trainer".into())
            .spawn(move || {
                let samples: Vec<SampleRow> = receiver.iter().collect();
                train_samples(&samples, &context, &config, &out, device, &options)
            })
            .map_err(|e| Error::io("trainer thread", e))?;
        Ok(TrainingSink {
            rows: Some(sender),
            handle: Some(handle),
            received: 0,
        })
    }

    /// Sends one sample to the trainer; blocks while the channel is full.
    pub fn push(&mut self, row: SampleRow) -> Result<()> {
        let sender = self
            .rows
            .as_ref()
            .ok_or_else(|| Error::invalid("training sink", "already finished"))?;
        sender.send(row).map_err(|_| {
            Error::invalid(
                "training sink",
                "the trainer thread stopped; finish() returns its error",
            )
        })?;
        self.received += 1;
        Ok(())
    }

    /// Samples pushed so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Closes the input and waits for training to end.
    pub fn finish(mut self) -> Result<TrainOutcome> {
        drop(self.rows.take());
        let handle = self
            .handle
            .take()
            .ok_or_else(|| Error::invalid("training sink", "already finished"))?;
        handle
            .join()
            .map_err(|_| Error::invalid("training sink", "the trainer thread panicked"))?
    }
}
