//! The extension point for what consumes a run's samples besides its dataset.
//!
//! A [`Sink`] is registered once under a name ([`register`]) and a spec turns it on with a
//! table of that name under `[sinks]`:
//!
//! ```toml
//! [sinks.trainer]
//! batch = 256         # the table is the sink's configuration, handed to its factory
//! ```
//!
//! Execution model: the run builds each sink once per process, on the main thread, from its
//! table, before any input is read (a bad table stops the run with exit 2). Every worker opens
//! one [`SinkWriter`] of every sink on the thread that writes its parts. A part's samples go to
//! the writers as one Arrow record batch in the `samples` table's schema
//! ([`crate::schema::TableKind::Samples`]), its images by id and each image's samples in the
//! dataset's order, right after the dataset's shards of that part are written: a sink sees the
//! samples while the run goes on, a part at a time, never the whole run at once. Parts of one
//! bucket come in image-id order; buckets are spread over the workers, so batches of different
//! workers interleave in no set order. A worker finishes its writers after its last part.
//! Then the dataset is committed, and every process calls [`Sink::committed`] with the new
//! version, or [`Sink::aborted`] when nothing was committed (the run failed, or no image changed
//! in a run with `--state`): a sink that must be all-or-nothing
//! (a checkpoint, a table of its own) stages what it writes and publishes it only there.
//!
//! An `Err` from a sink stops the run (nothing is committed) with that error's exit code. Each
//! sink is a stage `sink:<name>` in the manifest: rows in are the samples it was handed, rows
//! out what its writers report they kept, busy time the time spent in its writers.
//!
//! Runs that collect their rows first (`--state`, `[mix]`, several processes over an existing
//! dataset) hand their computed images' samples to one writer, opened as worker 0, in batches
//! of whole images.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::export::StageMetrics;
use crate::registry::{Factory, Registry};
use crate::schema::{rows_to_batch, SampleRow};

/// A consumer of a run's samples, built from its spec table.
pub trait Sink: Send + Sync {
    /// Opens the writer of worker `worker` (its index among all the run's workers).
    fn open(&self, worker: usize) -> Result<Box<dyn SinkWriter>>;
    /// The dataset was committed as `version` (on every process of the run).
    fn committed(&self, _version: u64) -> Result<()> {
        Ok(())
    }
    /// Nothing was committed: the run failed, or (with `--state`) no image changed; `error`
    /// says which.
    fn aborted(&self, _error: &Error) {}
}

/// One worker's writer of a [`Sink`].
pub trait SinkWriter: Send {
    /// Takes one part's samples; returns how many of them the sink kept.
    fn write(&mut self, samples: &RecordBatch) -> Result<u64>;
    /// After the worker's last part.
    fn finish(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Builds a sink from its `[sinks.<name>]` table.
pub type SinkFactory = Factory<Arc<dyn Sink>>;

static SINKS: Registry<Arc<dyn Sink>> = Registry::new("sink", "sinks");

/// Registers `factory` under `name`; registering the same factory again is a no-op, a different
/// one under a taken name is an error.
pub fn register(name: &str, factory: SinkFactory) -> Result<()> {
    if name.is_empty() || name.contains(':') {
        return Err(Error::Usage(format!(
            "`{name}` cannot name a sink: a sink's name is non-empty and has no `:`"
        )));
    }
    SINKS.register(name, factory)
}

/// The names of the registered sinks, sorted.
pub fn registered() -> Vec<String> {
    SINKS.names()
}

/// A sink of a run, with the name its spec table has.
#[derive(Clone)]
pub struct NamedSink {
    pub name: String,
    pub sink: Arc<dyn Sink>,
}

/// Builds the sinks of a spec's `[sinks]` tables, in name order.
pub fn build(tables: &BTreeMap<String, toml::Value>) -> Result<Vec<NamedSink>> {
    tables
        .iter()
        .map(|(name, config)| {
            Ok(NamedSink {
                name: name.clone(),
                sink: SINKS.build(name, config)?,
            })
        })
        .collect()
}

/// Tells every sink the dataset was committed as `version`.
pub fn committed(sinks: &[NamedSink], version: u64) -> Result<()> {
    for named in sinks {
        named.sink.committed(version).map_err(|err| Error::Stage {
            stage: format!("sink:{}", named.name),
            image: "(after the commit)".into(),
            source: Box::new(err),
        })?;
    }
    Ok(())
}

/// Tells every sink that nothing was committed, for the reason `error` gives.
pub fn aborted(sinks: &[NamedSink], error: &Error) {
    for named in sinks {
        named.sink.aborted(error);
    }
}

/// One worker's open writers of every sink, with what each was handed, kept and took.
pub struct SinkWriters {
    writers: Vec<(String, Box<dyn SinkWriter>, StageMetrics)>,
}

impl SinkWriters {
    /// Opens worker `worker`'s writer of every sink.
    pub fn open(sinks: &[NamedSink], worker: usize) -> Result<SinkWriters> {
        let writers = sinks
            .iter()
            .map(|named| {
                let stage = format!("sink:{}", named.name);
                let writer = named
                    .sink
                    .open(worker)
                    .map_err(|err| in_stage(&stage, err))?;
                let metrics = StageMetrics {
                    name: stage.clone(),
                    ..StageMetrics::default()
                };
                Ok((stage, writer, metrics))
            })
            .collect::<Result<_>>()?;
        Ok(SinkWriters { writers })
    }

    pub fn is_empty(&self) -> bool {
        self.writers.is_empty()
    }

    /// Hands `samples` (one part's, images by id) to every writer as one Arrow batch.
    pub fn write(&mut self, samples: &[SampleRow]) -> Result<()> {
        if self.writers.is_empty() || samples.is_empty() {
            return Ok(());
        }
        let batch = rows_to_batch(samples)?;
        for (stage, writer, metrics) in &mut self.writers {
            let started = Instant::now();
            let kept = writer.write(&batch).map_err(|err| in_stage(stage, err))?;
            metrics.rows_in += samples.len() as u64;
            metrics.rows_out += kept;
            metrics.elapsed_ms += elapsed_ms(started.elapsed());
        }
        Ok(())
    }

    /// Finishes every writer; returns each sink's metrics.
    pub fn finish(self) -> Result<Vec<StageMetrics>> {
        let mut all = Vec::with_capacity(self.writers.len());
        for (stage, writer, mut metrics) in self.writers {
            let started = Instant::now();
            writer.finish().map_err(|err| in_stage(&stage, err))?;
            metrics.elapsed_ms += elapsed_ms(started.elapsed());
            all.push(metrics);
        }
        Ok(all)
    }
}

/// Hands the samples of a run that collected its rows to one writer of every sink (worker 0),
/// `images` images per batch; returns the sinks' metrics.
pub fn feed_collected<'a>(
    sinks: &[NamedSink],
    samples: impl IntoIterator<Item = &'a [SampleRow]>,
    images: usize,
) -> Result<Vec<StageMetrics>> {
    if sinks.is_empty() {
        return Ok(Vec::new());
    }
    let mut writers = SinkWriters::open(sinks, 0)?;
    let mut batch: Vec<SampleRow> = Vec::new();
    let mut in_batch = 0;
    for image in samples {
        batch.extend_from_slice(image);
        in_batch += 1;
        if in_batch == images.max(1) {
            writers.write(&batch)?;
            batch.clear();
            in_batch = 0;
        }
    }
    writers.write(&batch)?;
    writers.finish()
}

fn in_stage(stage: &str, err: Error) -> Error {
    match err {
        // Already named by the stage it happened in.
        Error::Stage { .. } => err,
        other => Error::Stage {
            stage: stage.to_string(),
            image: "(a part's samples)".into(),
            source: Box::new(other),
        },
    }
}

fn elapsed_ms(elapsed: Duration) -> u64 {
    elapsed.as_millis() as u64
}

/// Adds `more` to `totals`, stage by stage by name.
pub fn add_metrics(totals: &mut Vec<StageMetrics>, more: Vec<StageMetrics>) {
    for metrics in more {
        match totals.iter_mut().find(|t| t.name == metrics.name) {
            Some(total) => {
                total.rows_in += metrics.rows_in;
                total.rows_out += metrics.rows_out;
                total.rejected += metrics.rejected;
                total.elapsed_ms += metrics.elapsed_ms;
            }
            None => totals.push(metrics),
        }
    }
}
