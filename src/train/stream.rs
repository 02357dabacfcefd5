//! Training while the samples arrive: the threads behind [`super::sink::TrainingSink`].
//!
//! # Execution model
//!
//! Three threads share one [`Pool`] of encoded samples and the vocabulary under a mutex:
//!
//! - the **pool** thread takes the samples' Arrow batches from the sink's bounded channel,
//!   keeps the rows of the configured splits and methods, grows the vocabulary with their new
//!   words, encodes them and appends them to the pool (which spills blocks to disk beyond its
//!   memory budget). With `stream.max_lag > 0` it waits while more than that many received
//!   samples (or `stream.start_after`, when larger) are more than the trainer has trained on,
//!   and so holds the run back to the trainer's pace;
//! - the **planner** thread turns samples into batches on the training device, through a
//!   second bounded channel (`batching.queue_batches`). While samples arrive, it takes them in
//!   arrival order, a window of up to eight batches' worth at a time (the first once
//!   `stream.start_after` samples are in), and plans each window as `capflow train` plans an
//!   epoch (length-sorted batches within the token budget, in a seeded order). When the input
//!   has ended, the remaining steps run in epochs over the whole pool: blocks in a seeded order,
//!   read back in windows of at most half the memory budget, batches planned per window;
//! - the **trainer** thread (the sink's own) takes the batches and trains
//!   ([`Trainer::train_step`]), checkpoints every `checkpoint_every` steps and at the end, with
//!   the vocabulary as it stood.
//!
//! With the curriculum, the trainer thread takes no arrivals: once the input has ended it runs
//! CLID's curriculum over the pool as it stands ([`train_curriculum`]), each batch's samples
//! fetched from the blocks still in memory or, through a small cache, from the spilled ones
//! ([`SampleSource`]).
//!
//! The learning-rate schedule runs over `steps`. Steps taken from arrivals count against
//! them: when they are spent before the input ends, later samples are pooled but not trained
//! on (the summary says how many). Which samples a window holds depends on how far the run has
//! come when the planner takes it, so a run's training is not reproducible bit for bit;
//! `capflow train --data` over a committed dataset is.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use crossbeam_channel::{bounded, Receiver, Sender};
use serde::Serialize;
use tch::Device;

use super::batch::{build_batch, Batch};
use super::config::TrainConfig;
use super::data::{
    encode_sample, epoch_seed, plan_batches, shuffle, trains_on, EncodedSample, RegionContext,
};
use super::pixels::ImageCrops;
use super::pool::Pool;
use super::run::{curriculum, JobOptions};
use super::source::{CacheStats, SampleSource};
use super::trainer::{next_batch, DataWaits, Trainer, VOCAB_FILE};
use super::vocab::{Slots, Vocabulary};
use crate::error::{Error, Result};
use crate::schema::{batch_to_rows, SampleRow};
use crate::seed::SplitMix64;

/// Data segments of the planner's seeds: windows of arrivals, epochs over the pool.
const ARRIVALS: u64 = 0x5a;
const EPOCHS: u64 = 0xe9;

/// How a training sink's run went (`train.json` in its output directory).
#[derive(Clone, Debug, Default, Serialize)]
pub struct StreamSummary {
    pub out: PathBuf,
    pub device: String,
    /// Sample rows handed to the sink.
    pub offered: u64,
    /// Rows of the configured splits and methods with a text: the pool.
    pub pooled: usize,
    /// Pooled samples that came after the steps were spent, never trained on.
    pub arrived_after_last_step: usize,
    pub steps: u64,
    /// Steps trained on samples taken as they arrived, before the input ended.
    pub streamed_steps: u64,
    /// Samples pooled when the first step of this process ended, and seconds since the sink
    /// started.
    pub first_step_pooled: Option<usize>,
    pub first_step_seconds: Option<f64>,
    /// Seconds from the sink's start to the end of its input.
    pub input_seconds: Option<f64>,
    pub first_loss: Option<f64>,
    pub final_loss: Option<f64>,
    /// Target tokens trained on by this process, and the seconds from its first step to its last.
    pub tokens: u64,
    pub train_seconds: f64,
    pub tokens_per_second: f64,
    /// Steps whose batch was not ready when the trainer asked for it, and the time they waited
    /// (waiting for augmentation included).
    pub data_waits: u64,
    pub data_wait_seconds: f64,
    pub vocab_words: usize,
    /// Words, labels and verbs that found the vocabulary full (trained on as `<unk>`).
    pub vocab_overflow: u64,
    /// Most bytes the pool held in memory: its blocks not spilled and its index of every
    /// sample (token counts, and the curriculum's rows).
    pub pool_peak_memory_bytes: usize,
    /// Bytes of that index at the end: memory the pool holds whatever its budget.
    pub pool_index_bytes: usize,
    /// Most pooled samples not yet trained on, as the pool thread saw after each batch (with
    /// `stream.max_lag`, at most that lag, or `start_after`, plus one batch of samples).
    pub peak_backlog: usize,
    pub pool_spilled_blocks: usize,
    pub pool_spilled_bytes: u64,
    /// With the curriculum: its iterations, and the steps of its two scoring models together.
    pub curriculum_iterations: u32,
    pub scoring_steps: u64,
    /// With the curriculum: the cache in front of the pool's spilled blocks (its capacity, the
    /// most it held, pages read).
    pub curriculum_cache: Option<CacheStats>,
}

impl StreamSummary {
    fn new(out: &Path, device: Device) -> StreamSummary {
        StreamSummary {
            out: out.to_path_buf(),
            device: format!("{device:?}"),
            ..StreamSummary::default()
        }
    }
}

/// The error of a sink that pooled nothing to train on.
fn no_samples(config: &TrainConfig, offered: u64) -> Error {
    Error::invalid(
        "training sink",
        format!(
            "no samples of splits {:?} and methods {:?} with a text among the {offered} received",
            config.splits, config.methods
        ),
    )
}

struct State {
    pool: Pool,
    offered: u64,
    /// The input ended.
    closed: bool,
    /// The trainer finished or failed: later samples are counted, not pooled.
    finished: bool,
    /// A thread failed; the others stop.
    failed: Option<String>,
    /// Samples the planner has taken in arrival order.
    consumed: usize,
    /// The planner still takes arrivals.
    streaming: bool,
    /// The planner has gone on to epochs over the whole pool.
    epochs: bool,
    vocab_overflow: u64,
    peak_memory: usize,
    peak_backlog: usize,
    closed_at: Option<Duration>,
}

/// What the three threads share. The trainer touches only `trained` per step, and the pool
/// thread holds `state` only to append what it encoded under `vocab`: neither waits for the
/// other's work.
pub struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    vocab: Mutex<Vocabulary>,
    /// Samples in the batches trained on so far.
    trained: AtomicUsize,
    started: Instant,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    fn vocab(&self) -> MutexGuard<'_, Vocabulary> {
        self.vocab.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The vocabulary as it stands.
    pub fn vocabulary(&self) -> Vocabulary {
        self.vocab().clone()
    }

    /// Records a failure (the first one wins) and wakes every thread.
    pub fn fail(&self, error: &Error) {
        let mut state = self.lock();
        state.failed.get_or_insert_with(|| error.to_string());
        drop(state);
        self.changed.notify_all();
    }

    /// The failure that stopped a thread, if any.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }
}

/// Starts a named thread that runs `work`; an error it returns is recorded as the sink's
/// failure ([`Shared::fail`]), which stops the other threads.
pub fn spawn<T: Send + 'static>(
    name: &str,
    shared: &Arc<Shared>,
    work: impl FnOnce(&Arc<Shared>) -> Result<T> + Send + 'static,
) -> Result<std::thread::JoinHandle<Result<T>>> {
    let shared = shared.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let result = work(&shared);
            if let Err(error) = &result {
                shared.fail(error);
            }
            result
        })
        .map_err(|e| Error::io(format!("thread {name}"), e))
}

/// The vocabulary a sink starts from: the one saved in `out` when resuming, else an empty one
/// that grows to the configured sizes.
pub fn starting_vocabulary(config: &TrainConfig, out: &Path, resume: bool) -> Result<Vocabulary> {
    let saved = out.join(VOCAB_FILE);
    if resume && Trainer::has_checkpoint(out) && saved.is_file() {
        return Vocabulary::load(&saved);
    }
    let s = &config.stream;
    Ok(Vocabulary::growing(Slots {
        words: s.vocab_words,
        labels: s.vocab_labels,
        verbs: s.vocab_verbs,
    }))
}

/// Shared state for a sink that trains into `out`.
pub fn shared(config: &TrainConfig, out: &Path, vocab: Vocabulary) -> Arc<Shared> {
    let budget = pool_budget(config);
    Arc::new(Shared {
        state: Mutex::new(State {
            pool: Pool::new(config.stream.block_samples, budget, out.join("pool")),
            offered: 0,
            closed: false,
            finished: false,
            failed: None,
            consumed: 0,
            // The curriculum takes no arrivals: it starts when the input has ended.
            streaming: !config.curriculum.enabled,
            epochs: false,
            vocab_overflow: 0,
            peak_memory: 0,
            peak_backlog: 0,
            closed_at: None,
        }),
        changed: Condvar::new(),
        vocab: Mutex::new(vocab),
        trained: AtomicUsize::new(0),
        started: Instant::now(),
    })
}

/// The pool's memory budget in bytes.
fn pool_budget(config: &TrainConfig) -> usize {
    (config.stream.pool_memory_mb * (1 << 20) as f64) as usize
}

/// The pool thread: pools every batch that comes through `batches` until the channel closes.
pub fn receive(
    shared: &Shared,
    batches: &Receiver<RecordBatch>,
    config: &TrainConfig,
) -> Result<()> {
    let context = RegionContext::default();
    let images = ImageCrops::new(config);
    let lag = config.stream.max_lag;
    let hold = lag.max(config.stream.start_after);
    let mut index_over_budget = false;
    for batch in batches.iter() {
        let rows: Vec<SampleRow> = batch_to_rows(&batch)?;
        let mut overflow = 0;
        let encoded: Vec<(EncodedSample, &SampleRow)> = {
            let mut vocab = shared.vocab();
            rows.iter()
                .filter(|row| trains_on(config, row))
                .map(|row| {
                    overflow += vocab.grow(row) as u64;
                    let sample = encode_sample(row, &context, &vocab, config, images.as_ref());
                    (sample, row)
                })
                .collect()
        };
        let mut state = shared.lock();
        if state.failed.is_some() {
            break;
        }
        state.offered += rows.len() as u64;
        if state.finished {
            continue;
        }
        state.vocab_overflow += overflow;
        for (sample, row) in encoded {
            let consumed = state.consumed;
            // With the curriculum, the pool keeps what it reads of each sample's row.
            if config.curriculum.enabled {
                state.pool.push_with_row(sample, row, consumed)?;
            } else {
                state.pool.push(sample, consumed)?;
            }
            state.peak_memory = state.peak_memory.max(state.pool.memory());
        }
        if !index_over_budget && state.pool.index_bytes() > state.pool.budget() {
            index_over_budget = true;
            tracing::warn!(
                "the training pool's index of {} samples (token counts{}) takes {:.1} MiB, more \
                 than stream.pool_memory_mb ({:.1} MiB): every block is spilled to disk, and \
                 the pool holds its index whatever its budget",
                state.pool.len(),
                if config.curriculum.enabled {
                    " and the curriculum's rows"
                } else {
                    ""
                },
                state.pool.index_bytes() as f64 / (1 << 20) as f64,
                state.pool.budget() as f64 / (1 << 20) as f64
            );
        }
        let backlog = state
            .pool
            .len()
            .saturating_sub(shared.trained.load(Ordering::Acquire));
        state.peak_backlog = state.peak_backlog.max(backlog);
        shared.changed.notify_all();
        // The trainer does not take the lock to count what it trained: look again now and then.
        while lag > 0
            && state.streaming
            && !state.finished
            && state.failed.is_none()
            && state
                .pool
                .len()
                .saturating_sub(shared.trained.load(Ordering::Acquire))
                > hold
        {
            state = shared
                .changed
                .wait_timeout(state, Duration::from_millis(5))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    let mut state = shared.lock();
    state.closed = true;
    state.closed_at = Some(shared.started.elapsed());
    drop(state);
    shared.changed.notify_all();
    if let Some(report) = images.as_ref().and_then(ImageCrops::report) {
        crate::cli::out::status!("train: warning: {report}");
    }
    Ok(())
}

/// Samples of one window, with the vocabulary's word count when they were taken (every id in
/// them is below it).
struct Window {
    samples: Vec<EncodedSample>,
    words: i64,
}

/// Sends one batch to the trainer; `false` when the trainer has gone.
fn send(
    batches: &Sender<Batch>,
    window: &Window,
    indices: &[usize],
    config: &TrainConfig,
    device: Device,
) -> bool {
    let mut batch = build_batch(&window.samples, indices, (&config.model).into());
    batch.words = Some(window.words);
    let batch = if device == Device::Cpu {
        batch
    } else {
        batch.to_device(device)
    };
    batches.send(batch).is_ok()
}

fn lengths(samples: &[EncodedSample]) -> Vec<u32> {
    // The pool took each sample only with fewer than `u32::MAX` tokens.
    samples.iter().map(|s| s.tokens.len() as u32).collect()
}

/// Plans a window's batches and sends them until `planned` reaches `steps`; `false` when the
/// trainer has gone.
fn send_window(
    batches: &Sender<Batch>,
    window: &Window,
    seed: u64,
    planned: &mut u64,
    steps: u64,
    config: &TrainConfig,
    device: Device,
) -> bool {
    let all: Vec<usize> = (0..window.samples.len()).collect();
    let b = &config.batching;
    let lengths = lengths(&window.samples);
    for indices in plan_batches(&all, &lengths, b.token_budget, b.max_batch_samples, seed) {
        if *planned >= steps {
            break;
        }
        if !send(batches, window, &indices, config, device) {
            return false;
        }
        *planned += 1;
    }
    true
}

/// The planner thread: batches for steps `start..config.steps`; returns how many it took from
/// arrivals before the input ended.
pub fn plan(
    shared: &Shared,
    batches: Sender<Batch>,
    config: &TrainConfig,
    device: Device,
    start: u64,
) -> Result<u64> {
    let steps = config.steps;
    let stream = &config.stream;
    let b = &config.batching;
    let mut planned = start;
    let mut streamed = 0;
    let take_at_least = if stream.max_lag > 0 {
        b.max_batch_samples
            .min(stream.max_lag.max(stream.start_after))
    } else {
        b.max_batch_samples
    }
    .max(1);
    let window = 8 * b.max_batch_samples;
    let mut state = shared.lock();
    while state.pool.len() < stream.start_after.max(1) && !state.closed && state.failed.is_none() {
        state = shared.wait(state);
    }
    let mut window_index = 0u64;
    'arrivals: while planned < steps {
        loop {
            if state.failed.is_some() {
                return Ok(streamed);
            }
            let waiting = state.pool.len() - state.consumed;
            if waiting >= take_at_least || (state.closed && waiting > 0) {
                break;
            }
            if state.closed {
                break 'arrivals;
            }
            state = shared.wait(state);
        }
        let end = state.pool.len().min(state.consumed + window);
        let samples = state.pool.range(state.consumed, end)?;
        // Every id in the window was given before it was pooled.
        let taken = Window {
            samples,
            words: shared.vocab().words.len() as i64,
        };
        state.consumed = end;
        drop(state);
        shared.changed.notify_all();
        let before = planned;
        let seed = epoch_seed(config.seed, ARRIVALS, window_index);
        if !send_window(&batches, &taken, seed, &mut planned, steps, config, device) {
            return Ok(streamed);
        }
        streamed += planned - before;
        window_index += 1;
        state = shared.lock();
    }
    state.streaming = false;
    drop(state);
    shared.changed.notify_all();
    if planned >= steps {
        return Ok(streamed);
    }
    // The input has ended: epochs over the whole pool.
    let mut state = shared.lock();
    while !state.closed && state.failed.is_none() {
        state = shared.wait(state);
    }
    if state.failed.is_some() {
        return Ok(streamed);
    }
    state.pool.seal();
    state.epochs = true;
    if state.pool.is_empty() {
        return Err(no_samples(config, state.offered));
    }
    let blocks: Vec<(usize, usize)> = (0..state.pool.block_count())
        .map(|k| state.pool.block_size(k))
        .collect();
    drop(state);
    let words = shared.vocab().words.len() as i64;
    let window_bytes = (pool_budget(config) / 2).max(1);
    for epoch in 0u64.. {
        let seed = epoch_seed(config.seed, EPOCHS, epoch);
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        shuffle(&mut order, &mut SplitMix64::new(seed));
        let mut at = 0;
        let mut part = 0u64;
        while at < order.len() {
            let mut end = at + 1;
            let mut bytes = blocks[order[at]].1;
            while end < order.len() && bytes + blocks[order[end]].1 <= window_bytes {
                bytes += blocks[order[end]].1;
                end += 1;
            }
            let mut taken = Window {
                samples: Vec::new(),
                words,
            };
            {
                let state = shared.lock();
                for &k in &order[at..end] {
                    taken.samples.extend_from_slice(&state.pool.block(k)?);
                }
            }
            let seed = epoch_seed(seed, EPOCHS, part);
            if !send_window(&batches, &taken, seed, &mut planned, steps, config, device)
                || planned >= steps
            {
                return Ok(streamed);
            }
            at = end;
            part += 1;
        }
    }
    Ok(streamed)
}

/// Marks the trainer finished and returns what the pool and vocabulary came to.
fn finish_state(shared: &Shared, summary: &mut StreamSummary) -> Vocabulary {
    let mut state = shared.lock();
    state.finished = true;
    summary.offered = state.offered;
    summary.pooled = state.pool.len();
    // The epochs over the pool see every pooled sample; without them, the planner's last
    // window ends the samples trained on.
    summary.arrived_after_last_step = if state.epochs {
        0
    } else {
        state.pool.len() - state.consumed
    };
    summary.input_seconds = state.closed_at.map(|d| d.as_secs_f64());
    summary.vocab_overflow = state.vocab_overflow;
    summary.pool_peak_memory_bytes = state.peak_memory;
    summary.pool_index_bytes = state.pool.index_bytes();
    summary.peak_backlog = state.peak_backlog;
    (summary.pool_spilled_blocks, summary.pool_spilled_bytes) = state.pool.spilled();
    drop(state);
    shared.changed.notify_all();
    let vocab = shared.vocab().clone();
    summary.vocab_words = vocab.words.len();
    vocab
}

fn save(trainer: &Trainer, shared: &Shared, out: &Path) -> Result<()> {
    let vocab = shared.vocab().clone();
    vocab.save(&out.join(VOCAB_FILE))?;
    trainer.save(out)
}

/// The trainer thread: trains `trainer` on the planner's batches to `config.steps`, writing
/// checkpoints into `out`.
pub fn train(
    shared: &Arc<Shared>,
    mut trainer: Trainer,
    config: &TrainConfig,
    out: &Path,
    device: Device,
) -> Result<StreamSummary> {
    let mut summary = StreamSummary::new(out, device);
    let (sender, batches) = bounded::<Batch>(config.batching.queue_batches);
    let planner = {
        let config = config.clone();
        let start = trainer.step;
        spawn("capflow-train-planner", shared, move |shared| {
            plan(shared, sender, &config, device, start)
        })?
    };
    let tokens_before = trainer.tokens;
    let mut training_since: Option<Instant> = None;
    let mut waits = DataWaits::default();
    // The wait for the first batch is the time to the first window, not a stall.
    while let Some(batch) = next_batch(&batches, &mut waits, training_since.is_some()) {
        training_since.get_or_insert_with(Instant::now);
        let loss =
            trainer.checked_step(&batch, out, config.checkpoint_every, config.steps, |t| {
                save(t, shared, out)
            })?;
        shared
            .trained
            .fetch_add(batch.samples.len(), Ordering::Release);
        if summary.first_loss.is_none() {
            summary.first_step_pooled = Some(shared.lock().pool.len());
            summary.first_step_seconds = Some(shared.started.elapsed().as_secs_f64());
            summary.first_loss = Some(loss);
        }
    }
    drop(batches);
    let planned = planner
        .join()
        .map_err(|_| Error::invalid("training sink", "the planner thread panicked"))?;
    let vocab = finish_state(shared, &mut summary);
    if let Some(failure) = shared.failure() {
        return Err(planned
            .err()
            .unwrap_or_else(|| Error::invalid("training sink", format!("stopped: {failure}"))));
    }
    summary.streamed_steps = planned?;
    vocab.save(&out.join(VOCAB_FILE))?;
    trainer.save(out)?;
    summary.steps = trainer.step;
    summary.final_loss = trainer.losses.last().copied();
    summary.tokens = trainer.tokens - tokens_before;
    summary.train_seconds = training_since.map_or(0.0, |t| t.elapsed().as_secs_f64());
    summary.tokens_per_second = if summary.train_seconds > 0.0 {
        summary.tokens as f64 / summary.train_seconds
    } else {
        0.0
    };
    summary.data_waits = waits.steps;
    summary.data_wait_seconds = waits.time.as_secs_f64();
    Ok(summary)
}

/// The trainer thread with CLID's curriculum: waits for the input to end and runs the
/// curriculum over the pool as it stands ([`super::run::curriculum`]: the two scoring models,
/// the quality scores, then the final model iteration by iteration). The pool is not read back
/// whole: every batch fetches its samples ([`SampleSource::pooled`]), so the curriculum holds
/// the pool's budget and the source's cache, never the whole pool.
pub fn train_curriculum(
    shared: &Arc<Shared>,
    config: &TrainConfig,
    out: &Path,
    device: Device,
    resume: bool,
) -> Result<StreamSummary> {
    let mut summary = StreamSummary::new(out, device);
    let mut state = shared.lock();
    while !state.closed && state.failed.is_none() {
        state = shared.wait(state);
    }
    if let Some(failure) = &state.failed {
        return Err(Error::invalid(
            "training sink",
            format!("stopped: {failure}"),
        ));
    }
    state.pool.seal();
    // Every pooled sample takes part.
    state.epochs = true;
    drop(state);
    let vocab = finish_state(shared, &mut summary);
    // The pool thread has ended and pools nothing more (`finished`): the curriculum takes the
    // pool, leaving an empty one.
    let (pool, rows) = {
        let mut state = shared.lock();
        let empty = Pool::new(1, 0, out.join("pool"));
        let mut pool = std::mem::replace(&mut state.pool, empty);
        let rows = pool.take_rows();
        (pool, rows)
    };
    if rows.is_empty() {
        return Err(no_samples(config, summary.offered));
    }
    let (trusted, generated): (Vec<usize>, Vec<usize>) =
        (0..rows.len()).partition(|&j| config.curriculum.is_trusted(rows.method(j)));
    let options = JobOptions {
        resume,
        stop_after: None,
    };
    let encoded = SampleSource::pooled(pool);
    let outcome = curriculum(
        &rows, &encoded, &vocab, config, out, device, &options, &trusted, &generated,
    )?;
    let run = &outcome.run;
    summary.steps = run.steps;
    summary.first_loss = run.losses.first().copied();
    summary.final_loss = run.losses.last().copied();
    summary.tokens = run.tokens_this_process;
    summary.train_seconds = run.seconds;
    summary.tokens_per_second = run.tokens_per_second();
    summary.data_waits = run.data_waits;
    summary.data_wait_seconds = run.data_wait_seconds;
    summary.curriculum_iterations = outcome.iterations;
    summary.scoring_steps = outcome.scoring_runs.iter().map(|r| r.steps).sum();
    summary.curriculum_cache = encoded.cache_stats();
    Ok(summary)
}
