//! The streaming engine: one timely computation per run, from the readers to the dataset's
//! shards, in memory bounded by the size of a bucket part rather than by the dataset.
//!
//! ```text
//! readers ─ Arrow batches per table, cut by owner (exchange) → spill (Arrow IPC per bucket) ┐ read
//!         └─ statistics by caption ─────────────────────────────┐                          │
//! spill ─ part by part → statistics by image ───────────────────┴→ main thread: fit once ──┘
//! spill ─ part by part (≤ part budget) → gather → method stages
//!       → the worker's writer thread writes the part's chunks, its changes as a sorted run
//! runs ─ merged by image id → changelog; ledger, manifest → commit
//! ```
//!
//! Every worker reads its share of the inputs (input path `i` goes to worker `i % peers`) and
//! sends its rows, as Arrow record batches cut by the worker owning each row's bucket
//! (`bucket % peers`, [`super::exchange`]), to that worker, which appends them to the bucket's
//! spill files. Once every input is read, each worker gathers the statistics that need whole
//! images from its spilled parts, and the main thread fits the corpus-level models from every
//! worker's statistics ([`super::models::CorpusStats`], merged in worker order), so the models
//! are the same for any number of workers and processes, and hands them to the workers. Each
//! worker then reads its buckets back in parts: consecutive ranges of image ids of about the
//! part budget that end at a chunk's or a piece's end ([`super::spill::BucketSpill::parts`]),
//! so a part holds whole images, and a chunk larger than the budget spreads over several parts.
//! A part's images go through the method stages on the worker that read it, and the worker's
//! writer thread writes the chunks that end in the part into shards of the worker's own (the
//! input tables as slices of the part's Arrow batches) and closes them at once; the rows of a
//! chunk that goes on into the next part wait, copied, until the part that ends it, so each
//! chunk's shards are written in one piece whatever the parts. The writer keeps the part's
//! changes as a run sorted by image id in the scratch directory. At the end the
//! commit adopts every worker's shards, the runs are merged into the changelog and the
//! dataset is committed. The bytes are those of [`super::buckets`]'s export: each chunk holds
//! its images' rows in read order, then their samples, images by id.
//!
//! A `[mix]` other than `all` chooses among every sample of the run, so a chunk's samples
//! wait: the writer closes the chunk's other shards and holds its samples in the scratch
//! directory ([`super::mixing`]), tallying their selection keys. Once every part is written,
//! every worker's tally goes to every process's main thread, which makes the one plan and
//! hands it back, and the writers write the samples shards, the changes and the sinks' rows
//! from what they hold.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use differential_dataflow::input::Input as _;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Exchange, Input, Probe};

use super::augment::{ImageOutput, StageContexts};
use super::buckets::{changelog as image_changes, chunks, Chunk};
use super::budget::PartBudget;
use super::exchange::{to_owners, InFlight, TableBatch, TableBatcher};
use super::inputs::{PieceLines, PieceRecording, PieceTally};
use super::mixing::HeldSamples;
use super::models::{fit_methods_with, CorpusStats, FittedModels, ModelSource, ModelsFrom};
use super::record::Staged;
use super::refit::{BucketRecords, RecordsCursor, RecordsSpill};
use super::runtime::{
    input_units, read_units, CollectedRun, InputUnit, KeyedRow, ReadObserver, ReadPiece, RowFeed,
    SharedUnits,
};
use super::sink::{add_metrics, NamedSink, SinkWriters};
use super::spill::{BucketPart, BucketSpill, ChangesWriter, PartRows};
use super::stages::{Failure, SsaImage, StageMeter};
use super::state::{
    describe_plan, image_digest, stale, BucketState, ImageState, RowsDigest, StateDir, StateHeader,
};
use super::{ClusterOptions, DataflowSpec};
use crate::augment::ssa::{CaptionNumbering, Drop as SsaDrop};
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::export::{
    read_file_rows_range, DatasetSink, DatasetWriter, FileEntry, Manifest, StageMetrics,
};
use crate::ingest::{IngestCounts, RecordSink, Row};
use crate::models::ParseCache;
use crate::schema::{rows_to_batch, RejectedRow, SampleRow, TableKind};
use crate::select::mix::{MixConfig, MixPlan, MixTally};

/// The default memory budget of a run.
pub const DEFAULT_MEMORY_LIMIT: u64 = 1 << 30;

/// What the streaming engine did, for the commit and the run's summary.
#[derive(Default)]
pub struct StreamedRun {
    /// Records the readers rejected, with their read position, in read order.
    pub read_rejected: Vec<(u32, u64, RejectedRow)>,
    /// Records the method stages rejected, by image id.
    pub image_rejected: Vec<(String, Vec<RejectedRow>)>,
    pub counts: IngestCounts,
    pub stages: Vec<StageMetrics>,
    /// The shards the workers wrote, for the commit to adopt.
    pub files: Vec<FileEntry>,
    /// The changes, as runs sorted by image id ([`super::spill::merge_changes`]).
    pub runs: Vec<PathBuf>,
    /// Images that went through the stages, samples by method, SSA's drops by reason.
    pub images: u64,
    pub samples: BTreeMap<String, u64>,
    pub dropped: BTreeMap<SsaDrop, u64>,
    /// Wall-clock time of the method stages.
    pub wall: Duration,
    /// With `--state`: what the run computed and carried, and the header to write.
    pub state: Option<StatePlanned>,
    /// With `--state`, the models when they were fitted on the inputs: the artifact the state
    /// keeps for later runs ([`super::artifact`]).
    pub fitted: Option<FittedModels>,
}

/// A run with `--state` ([`super::state`]): the state it compares each image with and what it
/// writes back there.
pub struct StreamState {
    pub dir: StateDir,
    /// The state's header as read before the run started.
    pub before: Option<StateHeader>,
    /// The header this run writes after its commit. When the corpus-level models learn from
    /// the inputs, its models digest is filled in once they are read (a [`RowsDigest`] of the
    /// rows `model_rows` selects, gathered by the workers).
    pub now: StateHeader,
    /// The dataset in the output directory: its manifest and the manifest's SHA-256.
    pub previous: Option<(Manifest, String)>,
    /// Whether this process removes the header before the bucket states change (the first).
    pub first: bool,
    /// Whether the workers record the input pieces as they read them
    /// ([`super::inputs::PieceRecording`]), so that a rerun with the models kept reads only
    /// new and changed pieces (a single process).
    pub record_pieces: bool,
}

/// What a run with `--state` decided and did.
pub struct StatePlanned {
    /// Why every image was computed, when that is so.
    pub full: Option<String>,
    /// The header to write once the dataset is committed.
    pub header: StateHeader,
    /// Images computed, carried forward unchanged, and retracted (of the state, not read).
    pub computed: u64,
    pub carried: u64,
    pub removed: u64,
    /// Chunks written, and chunks whose files were kept as the previous version holds them.
    pub chunks_written: u64,
    pub chunks_kept: u64,
}

impl StatePlanned {
    /// One line for the run's output ([`describe_plan`]), with the chunks kept as they were.
    pub fn describe(&self) -> String {
        let plan = describe_plan(
            self.full.as_deref(),
            self.computed,
            self.removed,
            self.carried,
        );
        match self.full {
            Some(_) => plan,
            None => format!(
                "{plan}; kept {} of {} chunks as they were",
                self.chunks_kept,
                self.chunks_kept + self.chunks_written
            ),
        }
    }
}

/// What a worker needs of the state: where it is, and whether every image is computed.
struct WorkerState {
    dir: StateDir,
    full: bool,
}

/// One image of a part with `--state`: its digest, and the method stages' rejections of the
/// previous run when it is carried forward rather than computed.
struct ImageRecord {
    image_id: String,
    digest: String,
    carried: Option<Vec<RejectedRow>>,
}

/// A part's results, sent by the worker that ran its stages to its writer thread.
struct PartOutput {
    bucket: usize,
    /// The image ids the part covers ([`super::spill::BucketPart::covers`]).
    after: Option<String>,
    through: Option<String>,
    /// Whether the part is its bucket's last: the chunk its last images belong to ends here.
    ends_bucket: bool,
    /// The part's rows, each table's by image id and then in read order.
    rows: PartRows,
    /// The part's rows of the samples table (a capflow dataset as input), typed.
    input_samples: Vec<KeyedRow>,
    /// The stages' outputs, by image id.
    outputs: Vec<ImageOutput>,
    /// With `--state`: every image of the part, and (in the bucket's last part) how many
    /// images of the bucket's state were not read.
    images: Vec<ImageRecord>,
    removed: u64,
    /// With `--state`: the chunks of the part that hold the previous version's images and no
    /// others, every one carried forward ([`unchanged_chunks`]), and the chunk it leaves open
    /// when that may still be one.
    unchanged: Vec<UnchangedChunk>,
    open_carried: Option<CarriedOpen>,
}

/// The chunk a part leaves open for the next part of its bucket, when it may still hold
/// exactly a chunk of the previous version: every one of its images so far was carried forward
/// and no image of the state in its range so far went unread. `after` is the key of the chunk
/// before it (`None` at the bucket's start).
#[derive(Debug, Clone, PartialEq, Eq)]
struct CarriedOpen {
    after: Option<String>,
}

/// A chunk of a part whose images are the previous version's chunk of the same key, each
/// carried forward: the key of the chunk before it (`None` at the bucket's start) and its own
/// key (empty for the bucket's open last chunk).
#[derive(Debug, PartialEq, Eq)]
struct UnchangedChunk {
    after: Option<String>,
    key: String,
}

enum Message {
    Rejected(u32, u64, RejectedRow),
    UnitDone {
        counts: IngestCounts,
        rows: u64,
    },
    /// What one worker gathered for the corpus-level models.
    Stats(WorkerStats),
    ReadDone,
    /// Rows read since the last such message, for the progress display.
    Read(u64),
    /// The number of parts one worker will take through the stages, once it has read.
    Planned(u64),
    /// Images of a part just written, for the progress display.
    Progress(u64),
    /// What one worker wrote, once all its parts are written.
    Written(Box<WrittenParts>),
    /// One worker's tally of its samples for `[mix]`.
    Tally(WorkerTally),
    Meters(Vec<StageMetrics>),
    Failed(Error),
}

/// Whether the streaming engine runs `spec` (a run without `--state`): one writing a new
/// dataset or a new version of one whose samples are in bucket chunks of the same bucket count.
pub fn streams(spec: &DataflowSpec, previous: Option<&Manifest>) -> bool {
    let buckets = spec.output.buckets;
    let bucketed = previous.is_none_or(|manifest| {
        manifest
            .table_files(TableKind::Samples)
            .all(|file| file.in_chunks_of(buckets))
    });
    bucketed
}

/// Runs this process's share of `spec` with the streaming engine: its workers write the shards
/// of their buckets, and the changes go to runs in `writer`'s scratch directory. Returns what
/// the commit needs. `models` says what the corpus-level models are fitted from.
/// Every part's samples also go to `sinks` ([`super::sink`]) once the part is written.
///
/// With `state`, each image's rows are digested as its part is read back; an image whose
/// digest is the state's is carried forward (its samples read back from the previous version,
/// its rejections from the state) instead of going through the stages, unless the state
/// cannot be compared with this run ([`stale`]), and each bucket's new states are written
/// once its last part is. A chunk whose images are all carried and that lost none keeps the
/// previous version's files ([`unchanged_chunks`]); one that spans parts waits for the part
/// that ends it ([`DeferredChunk`]).
///
/// The workers run [`run_worker`]; the main thread answers their messages ([`Coordinator`]):
/// it fits the models once every worker has read, plans a selecting `[mix]` once every worker
/// has tallied its samples, and gathers what the commit needs.
pub fn run_streaming(
    spec: &DataflowSpec,
    cluster: &ClusterOptions,
    writer: &mut DatasetWriter,
    models: ModelsFrom,
    memory_limit: u64,
    sinks: &[NamedSink],
    state: Option<StreamState>,
) -> Result<StreamedRun> {
    let config = cluster.timely_config()?;
    let local_workers = cluster.workers.max(1);
    let units = input_units(spec)?;
    // With a record of the input pieces, its clock starts before the inputs are listed; the
    // files of an image read alone are stamped just before they are read.
    let mut recording = match state.as_ref().filter(|s| s.record_pieces) {
        Some(_) => Some(PieceRecording::start(writer.scratch_dir("pieces")?)),
        None => None,
    };
    let listed = SharedUnits::list(&units, cluster)?;
    if let Some(recording) = recording.as_mut() {
        let images = listed.images();
        recording.list(spec, |unit| images.get(unit).copied().flatten())?;
    }
    let recording = recording.map(Arc::new);
    let budget = PartBudget::divide(memory_limit, local_workers);
    if !budget.fits && cluster.process == 0 {
        crate::cli::out::status!(
            "capflow run {}: --memory-limit {} is less than a process with {local_workers} \
             worker{} holds at least (about {}): the run goes on with the smallest parts and may \
             pass the limit; fewer workers (-w) or a larger limit keep it",
            spec.name,
            indicatif::HumanBytes(memory_limit),
            if local_workers == 1 { "" } else { "s" },
            indicatif::HumanBytes(PartBudget::least_limit(local_workers)),
        );
    }
    // The models are fitted from statistics the workers gather (unless the spec names a fixed
    // corpus): SSA's while reading, the others' from the spilled images once all is read.
    let corpus_stats = match &models {
        ModelsFrom::Inputs => CorpusStats::new(spec),
        ModelsFrom::Corpus(_) | ModelsFrom::Artifact(_) => None,
    };
    // With a state, the digest of the rows the models learn from, gathered with the statistics.
    let digest_rows = match (&state, &corpus_stats) {
        (Some(_), Some(_)) => super::models::model_rows(spec),
        _ => None,
    };
    let config_hash = spec.config_hash();
    // With a state, each image's SSA record is kept for a refit ([`super::refit`]).
    let keep_records =
        (state.is_some() && super::refit::keeps_records(spec)).then(|| config_hash.clone());
    let (messages, received) = crossbeam_channel::bounded::<Message>(4 * 1024);
    let (models_out, models_in) = crossbeam_channel::unbounded::<Option<FittedStages>>();
    let (mix_out, mix_in) = crossbeam_channel::unbounded::<Option<Arc<MixPlan>>>();
    let shared = WorkerShared {
        buckets: spec.output.buckets,
        chunk_images: spec.output.chunk_images,
        local_workers,
        part_bytes: budget.part_bytes,
        in_flight_window: budget.in_flight_window(),
        units,
        listed,
        scratch: writer.scratch_dir("spill")?,
        runs_dir: writer.scratch_dir("changes")?,
        out: writer.dir().to_path_buf(),
        config_hash,
        corpus_stats,
        digest_rows,
        keep_records,
        // `[mix]` other than `all` chooses among all samples once every part is written.
        mix_config: (spec.mix != MixConfig::All).then(|| spec.mix.clone()),
        mix_dir: writer.scratch_dir("mix")?,
        mix_in,
        models_in,
        sinks: sinks.to_vec(),
        recording: recording.clone(),
        messages,
    };
    // Every worker of this process spills into its own directory.
    let first_worker = cluster.process * local_workers;
    for index in first_worker..first_worker + local_workers {
        let dir = spill_dir(&shared.scratch, index);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    let outlets = (models_out, mix_out, recording);
    let mut coordinator = Coordinator::new(spec, cluster, (models, state), outlets);
    // A peer that dies before it connects would leave the others waiting for it forever.
    let connecting = super::cluster::Connecting::start(cluster, "streaming run");
    let guards = timely::execute(config, move |worker| run_worker(worker, &shared))
        .map_err(|e| Error::Config(format!("starting workers: {e}")))?;
    drop(connecting);
    for message in received.iter() {
        coordinator.handle(message);
    }
    coordinator.finish(guards.join())
}

/// What every worker of a run shares: the run's settings, its inputs, and the channels to and
/// from the main thread.
struct WorkerShared {
    buckets: usize,
    chunk_images: usize,
    local_workers: usize,
    /// The most bytes of a part, and of the rows in flight to other workers.
    part_bytes: u64,
    in_flight_window: u64,
    units: Vec<InputUnit>,
    listed: Arc<SharedUnits>,
    /// The scratch directories of the spilled rows and of the runs of changes.
    scratch: PathBuf,
    runs_dir: PathBuf,
    /// The dataset directory.
    out: PathBuf,
    config_hash: String,
    /// What the models learn from, as each worker starts gathering it.
    corpus_stats: Option<CorpusStats>,
    /// With `--state`: which rows the models learn from, for their digest.
    digest_rows: Option<ModelRows>,
    /// With `--state` and SSA: each image's SSA record is kept, under this configuration.
    keep_records: Option<String>,
    /// A `[mix]` that selects, its scratch directory and the plans from the main thread.
    mix_config: Option<MixConfig>,
    mix_dir: PathBuf,
    mix_in: crossbeam_channel::Receiver<Option<Arc<MixPlan>>>,
    /// The models from the main thread; `None` when the run failed before they were fitted.
    models_in: crossbeam_channel::Receiver<Option<FittedStages>>,
    sinks: Vec<NamedSink>,
    recording: Option<Arc<PieceRecording>>,
    messages: crossbeam_channel::Sender<Message>,
}

impl WorkerShared {
    /// Hands a worker's failure to the main thread, whose first error is the run's.
    fn fail(&self, err: Error) {
        let _ = self.messages.send(Message::Failed(err));
    }
}

/// One worker of the run: its read phase, then, with the models the main thread fitted, its
/// parts through the stages. A worker that fails tells the main thread and goes on as far as
/// the other workers need it to: every worker takes part in every exchange.
fn run_worker(worker: &mut timely::worker::Worker, shared: &WorkerShared) {
    let index = worker.index();
    // Spans per worker and phase: `RUST_LOG=capflow=info` logs each one's time as it closes.
    let _worker_span = tracing::info_span!("worker", index).entered();
    let (planned, mix_exchange) = read_phase(worker, shared);
    // The models, fitted by the main thread once every worker has read its inputs.
    let fitting = tracing::info_span!("await-models").entered();
    let Ok(Some(fitted)) = shared.models_in.recv() else {
        return;
    };
    drop(fitting);
    let _stages_span = tracing::info_span!("stages").entered();
    stages_phase(worker, shared, fitted, planned, mix_exchange);
}

/// A worker's read phase: it reads its share of the inputs, sending the rows as Arrow batches
/// to the worker owning their bucket, which spills them; cuts its own buckets into the parts
/// the stages will take; and sends what the models learn from to the main threads. Returns
/// the parts, and the worker's part in planning a selecting `[mix]`.
fn read_phase(
    worker: &mut timely::worker::Worker,
    shared: &WorkerShared,
) -> (Vec<BucketPart>, Option<MixExchange>) {
    let index = worker.index();
    let _read_span = tracing::info_span!("read").entered();
    let (input, spilling) = SpillingRead::build(worker, shared);
    // What the models learn from: to the first worker of every process, which hands it to
    // its main thread, so that every process fits the same models.
    let (mut to_models, models_probe) = to_main_threads(worker, &shared.messages, Message::Stats);
    // With `[mix]` other than `all`: each worker's tally of its samples, likewise, for the
    // plan.
    let mix_exchange = (shared.mix_config.as_ref()).map(|_| MixExchange::start(worker, shared));
    let mut observer = SpillObserver {
        messages: &shared.messages,
        stats: shared.corpus_stats.clone(),
        numbering: CaptionNumbering::default(),
        unreported: 0,
        model_rows: shared.digest_rows.map(|keep| (keep, RowsDigest::default())),
        pieces: (shared.recording.as_ref())
            .and_then(|recording| recording.lines(index).map_err(|e| shared.fail(e)).ok()),
    };
    if let Err(err) = read_units(&shared.units, &shared.listed, worker, input, &mut observer) {
        shared.fail(err);
    }
    if let Some(Err(err)) = observer.pieces.take().map(PieceLines::finish) {
        shared.fail(err);
    }
    observer.report_read();
    let planned = spilling.finish(worker, shared);
    let _ = shared.messages.send(Message::Planned(planned.len() as u64));
    if let Some(mut stats) = observer.stats.take() {
        if stats.by_image() {
            if let Err(err) = add_images(&planned, &mut stats) {
                shared.fail(err);
            }
        }
        let stats = WorkerStats {
            from: index,
            stats: Box::new(stats),
            rows: observer.model_rows.take().map(|(_, rows)| rows),
        };
        let to = first_workers(worker.peers(), shared.local_workers);
        send_to_first_workers(&mut to_models, &to, stats);
    }
    to_models.close();
    while !models_probe.done() {
        worker.step();
    }
    let _ = shared.messages.send(Message::ReadDone);
    (planned, mix_exchange)
}

/// The read phase's dataflow: the rows a worker reads go as Arrow batches to the worker owning
/// their bucket, which spills them.
struct SpillingRead {
    spill: Rc<RefCell<BucketSpill>>,
    /// The spill's first error: it spills inside the dataflow, which cannot return one.
    error: Rc<RefCell<Option<Error>>>,
    probe: ProbeHandle<u64>,
}

impl SpillingRead {
    /// The dataflow, and the feed the worker's readers send their rows into.
    fn build(
        worker: &mut timely::worker::Worker,
        shared: &WorkerShared,
    ) -> (BatchFeed, SpillingRead) {
        let (index, peers) = (worker.index(), worker.peers());
        let spill_to = spill_dir(&shared.scratch, index);
        let spill = BucketSpill::new(spill_to, shared.buckets, shared.chunk_images);
        let read = SpillingRead {
            spill: Rc::new(RefCell::new(spill)),
            error: Rc::default(),
            probe: ProbeHandle::new(),
        };
        let mut input = BatchInput::new();
        let in_flight = Rc::new(InFlight::default());
        let (spill, error) = (Rc::clone(&read.spill), Rc::clone(&read.error));
        worker.dataflow(|scope| {
            let batches = scope.input_from(&mut input).container::<Vec<TableBatch>>();
            to_owners(batches, Rc::clone(&in_flight), move |piece: TableBatch| {
                if let Err(err) = spill.borrow_mut().push_batch(piece.table, &piece.batch) {
                    error.borrow_mut().get_or_insert(err);
                }
            })
            .probe_with(&read.probe);
        });
        let feed = BatchFeed {
            input,
            batcher: TableBatcher::new(index, shared.buckets, peers),
            in_flight,
            window: shared.in_flight_window,
        };
        (feed, read)
    }

    /// Once the worker has read its share: waits for every row sent to it, and cuts its own
    /// buckets into the parts the stages will take.
    fn finish(self, worker: &mut timely::worker::Worker, shared: &WorkerShared) -> Vec<BucketPart> {
        while !self.probe.done() {
            worker.step();
        }
        if let Some(err) = self.error.borrow_mut().take() {
            shared.fail(err);
        }
        let mut spill = self.spill.borrow_mut();
        if let Err(err) = spill.finish() {
            shared.fail(err);
        }
        plan_parts(&mut spill, shared, worker.index(), worker.peers())
    }
}

/// Sends `item` to the first worker of every process (`to`): a copy to each but the last, which
/// takes `item` itself (a worker's statistics can be as large as the held-out captions of its
/// whole share).
fn send_to_first_workers<T: timely::ExchangeData + Clone>(
    input: &mut ToMainThreads<T>,
    to: &[usize],
    item: T,
) {
    let Some((&last, others)) = to.split_last() else {
        return;
    };
    for &to in others {
        input.send((to, item.clone()));
    }
    input.send((last, item));
}

/// The worker's buckets, cut into the parts the stages will take one at a time.
fn plan_parts(
    spill: &mut BucketSpill,
    shared: &WorkerShared,
    index: usize,
    peers: usize,
) -> Vec<BucketPart> {
    let part_bytes = shared.part_bytes;
    let mut planned = Vec::new();
    for bucket in (0..shared.buckets).filter(|b| b % peers == index) {
        match spill.parts(bucket, part_bytes) {
            Ok(parts) => {
                tracing::debug!(
                    "worker {index}: bucket {bucket} in {} parts of at most {part_bytes} bytes",
                    parts.len()
                );
                planned.extend(parts);
            }
            Err(err) => shared.fail(err),
        }
    }
    planned
}

/// A worker's stages: one dataflow for the run, a timestamp per part (parts never leave the
/// worker), and a writer thread of the worker's own that writes each part's chunks while the
/// worker runs the next part's stages.
fn stages_phase(
    worker: &mut timely::worker::Worker,
    shared: &WorkerShared,
    fitted: FittedStages,
    planned: Vec<BucketPart>,
    mix_exchange: Option<MixExchange>,
) {
    let index = worker.index();
    let FittedStages {
        contexts,
        names,
        state,
    } = fitted;
    let stages = StagesDataflow::build(worker, contexts, &names);
    let (writer_mix, worker_mix) = match (mix_exchange, &shared.mix_config) {
        (Some(exchange), Some(mix_config)) => {
            let held = HeldSamples::new(shared.mix_dir.join(format!("w{index:03}")), mix_config);
            let (writer_mix, worker_mix) = WorkerMix::channels(exchange);
            (Some((held, writer_mix)), Some(worker_mix))
        }
        _ => (None, None),
    };
    let (to_writer, writing) = match start_writer(worker, shared, state.as_deref(), writer_mix) {
        Ok(writer) => writer,
        Err(err) => {
            shared.fail(err);
            if let Some(mix) = worker_mix {
                mix.exchange.share(worker, index, None);
            }
            return;
        }
    };
    let mut parts = PartRunner {
        index,
        part_bytes: shared.part_bytes,
        chunk_images: shared.chunk_images,
        state,
        gather_meter: stages.meters.first().cloned(),
        images_in: stages.input,
        outputs: stages.outputs,
        round: 0,
        unseen: None,
        carried_open: None,
    };
    let ran = match parts.run_all(worker, planned, to_writer) {
        Ok(()) => true,
        Err(err) => {
            shared.fail(err);
            false
        }
    };
    if let Some(mix) = worker_mix {
        mix.plan(worker, index, ran);
    }
    match writing.join() {
        Ok(Ok(written)) => {
            let _ = shared.messages.send(Message::Written(Box::new(written)));
        }
        Ok(Err(err)) => return shared.fail(err),
        Err(_) => {
            let panicked = format!("the writer of worker {index} panicked");
            return shared.fail(Error::Config(panicked));
        }
    }
    if !ran {
        return;
    }
    // No part comes after the last: the stages' input closes.
    drop(parts);
    while !stages.probe.done() {
        worker.step();
    }
    let meters: Vec<StageMetrics> = stages.meters.iter().map(StageMeter::snapshot).collect();
    for stage in &meters {
        tracing::info!(
            stage = stage.name,
            rows_in = stage.rows_in,
            rows_out = stage.rows_out,
            rejected = stage.rejected,
            busy_ms = stage.elapsed_ms,
            "stage totals"
        );
    }
    let _ = shared.messages.send(Message::Meters(meters));
}

/// A worker's dataflow of the stages: its input of staged images, the stages' outputs of the
/// range in the stages, their meters (the first, `gather`'s, is the part reader's) and a probe.
struct StagesDataflow {
    input: ImagesIn,
    outputs: Rc<RefCell<Vec<ImageOutput>>>,
    meters: Vec<StageMeter>,
    probe: ProbeHandle<u64>,
}

impl StagesDataflow {
    fn build(
        worker: &mut timely::worker::Worker,
        contexts: StageContexts,
        names: &[String],
    ) -> StagesDataflow {
        let meters: Vec<StageMeter> = names.iter().map(|name| StageMeter::new(name)).collect();
        let wired = meters.clone();
        let outputs: Rc<RefCell<Vec<ImageOutput>>> = Rc::default();
        let sink_outputs = Rc::clone(&outputs);
        let (input, probe) = worker.dataflow::<u64, _, _>(move |scope| {
            // `gather` is done by the part reader; the meters start after it.
            let mut meters = wired.into_iter().skip(1);
            let mut next = || meters.next().unwrap_or_else(|| StageMeter::new("unnamed"));
            let (input, images) = scope.new_collection::<Staged<SsaImage>, isize>();
            let images = contexts.wire(images, &mut next);
            let probe = images
                .inner
                .flat_map(ImageOutput::of_update)
                .flat_map(move |output: ImageOutput| {
                    sink_outputs.borrow_mut().push(output);
                    None::<()>
                })
                .probe()
                .0;
            (input, probe)
        });
        StagesDataflow {
            input,
            outputs,
            meters,
            probe,
        }
    }
}

/// A worker's side of a selecting `[mix]`: its exchange with the other workers, its writer's
/// tally and the plan for its writer.
struct WorkerMix {
    exchange: MixExchange,
    tally: crossbeam_channel::Receiver<MixTally>,
    plan: crossbeam_channel::Sender<Arc<MixPlan>>,
}

impl WorkerMix {
    /// The writer's side and the worker's, joined by channels.
    fn channels(exchange: MixExchange) -> (WriterMix, WorkerMix) {
        let (tally_out, tally_in) = crossbeam_channel::bounded(1);
        let (plan_out, plan_in) = crossbeam_channel::bounded(1);
        let writer = WriterMix {
            tally: tally_out,
            plan: plan_in,
        };
        let worker = WorkerMix {
            exchange,
            tally: tally_in,
            plan: plan_out,
        };
        (writer, worker)
    }

    /// Shares the writer's tally once it has written every part (none if this worker or its
    /// writer failed: `ran` is whether its parts ran), and hands the run's plan to the writer.
    fn plan(self, worker: &mut timely::worker::Worker, index: usize, ran: bool) {
        let tally = self.tally.recv().ok().filter(|_| ran);
        if let Some(plan) = self.exchange.share(worker, index, tally) {
            let _ = self.plan.send(plan);
        }
    }
}

/// Starts the writer thread of a worker: its parts go to shards of its own, which the commit
/// adopts.
fn start_writer(
    worker: &timely::worker::Worker,
    shared: &WorkerShared,
    state: Option<&WorkerState>,
    mix: Option<(HeldSamples, WriterMix)>,
) -> Result<(
    crossbeam_channel::Sender<PartOutput>,
    std::thread::JoinHandle<Result<WrittenParts>>,
)> {
    let (index, peers) = (worker.index(), worker.peers());
    let (held, mix) = mix.unzip();
    let writer = DatasetWriter::part(&shared.out, &shared.config_hash, index)?;
    let part_writer = PartWriter::new(
        writer,
        (shared.buckets, move |bucket: usize| bucket % peers == index),
        shared.chunk_images,
        shared.runs_dir.join(format!("w{index:03}")),
        state.map(|s| s.dir.clone()),
        held,
    )
    .keeping_records(shared.keep_records.clone());
    let messages = shared.messages.clone();
    spawn_writer(index, part_writer, shared.sinks.clone(), messages, mix)
}

/// The stages' input session of a worker: each image of a part, at the part's round.
type ImagesIn = differential_dataflow::input::InputSession<u64, Staged<SsaImage>, isize>;

/// A worker's parts through the stages, one at a time: each part's images go in a range at a
/// time, each range at a round of its own, and come out as the images' outputs.
struct PartRunner {
    index: usize,
    part_bytes: u64,
    chunk_images: usize,
    /// With `--state`.
    state: Option<Arc<WorkerState>>,
    /// The `gather` stage's meter: the part reader gathers each image's rows.
    gather_meter: Option<StageMeter>,
    images_in: ImagesIn,
    /// The stages' outputs of the range in the stages.
    outputs: Rc<RefCell<Vec<ImageOutput>>>,
    round: u64,
    /// With a state: the previous states of the bucket being run, less the images seen.
    unseen: Option<(usize, BucketState)>,
    /// With a state: the chunk the last part left open, when it may still be unchanged.
    carried_open: Option<(usize, CarriedOpen)>,
}

impl PartRunner {
    /// Takes the worker's parts through the stages one at a time, handing each to its writer:
    /// an error when a part failed; when the writer stopped taking them, its own error is the
    /// one its thread returns.
    fn run_all(
        &mut self,
        worker: &mut timely::worker::Worker,
        planned: Vec<BucketPart>,
        to_writer: crossbeam_channel::Sender<PartOutput>,
    ) -> Result<()> {
        for part in planned {
            if to_writer.send(self.run(worker, part)?).is_err() {
                break;
            }
        }
        Ok(())
    }

    /// Takes `part` through the stages; returns what its writer needs.
    fn run(&mut self, worker: &mut timely::worker::Worker, part: BucketPart) -> Result<PartOutput> {
        let (bucket, after, through) = (part.bucket, part.after.clone(), part.through.clone());
        let ends_bucket = part.index + 1 == part.count;
        let (part_index, part_count, part_rows) = (part.index, part.count, part.rows);
        let _part_span =
            tracing::debug_span!("part", bucket, part = part_index + 1, of = part_count).entered();
        let rows = part.read()?;
        let ranges = rows.image_ranges(self.part_bytes)?;
        tracing::debug!(
            "worker {}: bucket {bucket} part {} of {}: {} rows, {} bytes, {} ranges",
            self.index,
            part_index + 1,
            part_count,
            part_rows,
            rows.bytes(),
            ranges.len()
        );
        if let Some(state) = &self.state {
            if self.unseen.as_ref().is_none_or(|(b, _)| *b != bucket) {
                let previous = match state.full {
                    true => BucketState::new(),
                    false => state.dir.read_bucket(bucket)?,
                };
                self.unseen = Some((bucket, previous));
            }
        }
        // The part's images go through the stages a range at a time.
        let mut input_samples = Vec::new();
        let mut part_outputs = Vec::new();
        let mut images = Vec::new();
        for (first, last) in &ranges {
            let mut typed = rows.typed_range(first, last)?;
            if let (Some(state), Some((_, previous))) = (&self.state, self.unseen.as_mut()) {
                plan_range(&mut typed, state.full, previous, &mut images)?;
            }
            let (staged, samples) = gather_part(typed, self.gather_meter.as_ref());
            input_samples.extend(samples);
            let expected = staged.len();
            for image in staged {
                self.images_in.insert(image);
            }
            self.round += 1;
            self.images_in.advance_to(self.round);
            self.images_in.flush();
            while self.outputs.borrow().len() < expected {
                worker.step();
            }
            part_outputs.append(&mut self.outputs.borrow_mut());
        }
        part_outputs.sort_by(|a, b| a.image_id.cmp(&b.image_id));
        let (unchanged, open_carried) = match (&self.state, &self.unseen) {
            (Some(state), Some((_, left))) if !state.full => {
                let open = self.carried_open.take().filter(|(b, _)| *b == bucket);
                let begins = (after.as_deref(), open.as_ref().map(|(_, open)| open));
                unchanged_chunks(begins, &images, left, self.chunk_images, ends_bucket)
            }
            _ => (Vec::new(), None),
        };
        self.carried_open = open_carried.clone().map(|open| (bucket, open));
        // The images of the bucket's state that no part held are retracted.
        let removed = match ends_bucket {
            true => self.unseen.take().map_or(0, |(_, left)| left.len() as u64),
            false => 0,
        };
        Ok(PartOutput {
            bucket,
            after,
            through,
            ends_bucket,
            rows,
            input_samples,
            outputs: part_outputs,
            images,
            removed,
            unchanged,
            open_carried,
        })
    }
}

/// Where a [`Coordinator`] sends the workers their models and `[mix]` plans, and the record
/// of the input pieces it assembles, if any.
type CoordinatorOutlets = (
    crossbeam_channel::Sender<Option<FittedStages>>,
    crossbeam_channel::Sender<Option<Arc<MixPlan>>>,
    Option<Arc<PieceRecording>>,
);

/// The main thread of a streaming run: it answers the workers' messages while they work, and
/// gathers what the commit needs.
struct Coordinator<'a> {
    spec: &'a DataflowSpec,
    cluster: &'a ClusterOptions,
    local_workers: usize,
    augments: bool,
    /// What the models are fitted from, until they are.
    models: Option<ModelsFrom>,
    state: Option<StreamState>,
    state_dir: Option<StateDir>,
    /// Where the fitted models go to this process's workers, and a selecting `[mix]`'s plan.
    models_out: crossbeam_channel::Sender<Option<FittedStages>>,
    mix_out: crossbeam_channel::Sender<Option<Arc<MixPlan>>>,
    /// The record of the input pieces, when the workers make one, and its assembly, started
    /// once every worker has read.
    recording: Option<Arc<PieceRecording>>,
    assembling: Option<std::thread::JoinHandle<Result<()>>>,
    /// The stages' failures, which the workers' contexts share.
    failure: Failure,
    first_error: Option<Error>,
    run: StreamedRun,
    started: Instant,
    read_elapsed: Duration,
    augment_started: Option<Instant>,
    /// What the workers gathered for the models, and how many have read.
    gathered: Vec<WorkerStats>,
    reads_done: usize,
    rows_read: u64,
    models_metrics: Option<StageMetrics>,
    /// With a state, the external parser's answers, saved once the run ends.
    parse_cache: Option<Arc<ParseCache>>,
    state_planned: Option<StatePlanned>,
    /// With `[mix]`: every worker's tally, and the samples the plan took in and kept.
    tallies: Vec<WorkerTally>,
    mixed: Option<StageMetrics>,
    stage_totals: Vec<StageMetrics>,
    written: WrittenParts,
    parts_planned: u64,
    images_done: u64,
    /// Rows while reading; then the parts through the stages, with the images written.
    progress: indicatif::ProgressBar,
}

impl<'a> Coordinator<'a> {
    /// A coordinator of a run of `spec` whose models come from `models`, that hands the
    /// workers their models and `[mix]` plans through `models_out` and `mix_out`, and assembles
    /// the record of the input pieces of `recording`.
    fn new(
        spec: &'a DataflowSpec,
        cluster: &'a ClusterOptions,
        (models, state): (ModelsFrom, Option<StreamState>),
        (models_out, mix_out, recording): CoordinatorOutlets,
    ) -> Coordinator<'a> {
        Coordinator {
            spec,
            cluster,
            local_workers: cluster.workers.max(1),
            augments: spec.augments() || spec.keeps_originals(),
            models: Some(models),
            state_dir: state.as_ref().map(|s| s.dir.clone()),
            state,
            models_out,
            mix_out,
            recording,
            assembling: None,
            failure: Failure::default(),
            first_error: None,
            run: StreamedRun::default(),
            started: Instant::now(),
            read_elapsed: Duration::ZERO,
            augment_started: None,
            gathered: Vec::new(),
            reads_done: 0,
            rows_read: 0,
            models_metrics: None,
            parse_cache: None,
            state_planned: None,
            tallies: Vec::new(),
            mixed: None,
            stage_totals: Vec::new(),
            written: WrittenParts::default(),
            parts_planned: 0,
            images_done: 0,
            progress: crate::cli::progress::records("read"),
        }
    }

    fn handle(&mut self, message: Message) {
        match message {
            Message::Rejected(unit, ordinal, row) => {
                self.run.read_rejected.push((unit, ordinal, row));
            }
            Message::UnitDone { counts, rows } => {
                self.run.counts.add(counts);
                self.rows_read += rows;
            }
            Message::Stats(stats) => self.gathered.push(stats),
            Message::ReadDone => {
                self.reads_done += 1;
                if self.reads_done == self.local_workers {
                    self.all_read();
                }
            }
            Message::Read(rows) => self.progress.inc(rows),
            Message::Planned(parts) => self.parts_planned += parts,
            Message::Progress(images) => {
                self.images_done += images;
                self.progress.inc(1);
                self.progress.set_message(format!(
                    "augment: {} images written; parts",
                    indicatif::HumanCount(self.images_done)
                ));
            }
            Message::Written(part) => self.written.add(*part),
            Message::Tally(tally) => {
                self.tallies.push(tally);
                if self.tallies.len() == self.cluster.processes.max(1) * self.local_workers {
                    self.all_tallied();
                }
            }
            Message::Meters(meters) => add_metrics(&mut self.stage_totals, meters),
            Message::Failed(err) => self.failed(err),
        }
    }

    fn failed(&mut self, err: Error) {
        self.first_error.get_or_insert(err);
    }

    /// Every worker of this process has read: the record of the input pieces is assembled
    /// aside, and the models are fitted and handed to the workers (none after a failure).
    fn all_read(&mut self) {
        self.progress.finish_and_clear();
        self.progress = crate::cli::progress::items("augment: parts", self.parts_planned);
        self.read_elapsed = self.started.elapsed();
        if let (Some(recording), Some(dir), None) =
            (&self.recording, &self.state_dir, &self.first_error)
        {
            let first_worker = self.cluster.process * self.local_workers;
            let workers = first_worker..first_worker + self.local_workers;
            let dir = dir.dir().to_path_buf();
            self.assembling = Some(recording.assemble_aside(workers, dir));
        }
        self.augment_started = Some(Instant::now());
        let fitted = match self.first_error {
            Some(_) => None,
            None => {
                let _fit = tracing::info_span!("fit").entered();
                self.fit().map_err(|err| self.failed(err)).ok()
            }
        };
        for _ in 0..self.local_workers {
            let _ = self.models_out.send(fitted.clone());
        }
    }

    /// The models the workers' stages use: fitted on every worker's statistics (or on a
    /// corpus, or an earlier run's); with a state, the plan of what the run computes.
    fn fit(&mut self) -> Result<FittedStages> {
        let spec = self.spec;
        let rows = self.gathered.iter().fold(None, |total, worker| {
            let mut total: RowsDigest = total.unwrap_or_default();
            total.merge(worker.rows.as_ref()?);
            Some(total)
        });
        let (fit, source) = match self.models.take() {
            Some(ModelsFrom::Corpus(rows)) => (rows, ModelSource::Rows),
            Some(ModelsFrom::Artifact(fitted)) => {
                (CollectedRun::default(), ModelSource::Fitted(fitted))
            }
            Some(ModelsFrom::Inputs) | None => {
                let stats = merged_stats(std::mem::take(&mut self.gathered))?;
                let source = stats.map_or(ModelSource::Rows, |stats| {
                    ModelSource::Stats(Box::new(stats))
                });
                (CollectedRun::default(), source)
            }
        };
        // With a state, models fitted on the inputs are kept there.
        let keep = self.state.is_some() && matches!(source, ModelSource::Stats(_));
        let planned = (self.state.as_mut())
            .map(|state| plan_state(state, rows.as_ref(), &spec.mix))
            .transpose()?;
        let (mut fitted, metrics, cache, kept) = fitted_contexts(
            spec,
            &fit,
            (source, keep),
            self.augments,
            &self.failure,
            self.state_dir.as_ref(),
        )?;
        self.run.fitted = kept;
        self.models_metrics = metrics;
        self.parse_cache = cache;
        if let (Some((full, header)), Some(dir)) = (planned, &self.state_dir) {
            fitted.state = Some(Arc::new(WorkerState {
                dir: dir.clone(),
                full: full.is_some(),
            }));
            self.state_planned = Some(StatePlanned {
                full,
                header,
                computed: 0,
                carried: 0,
                removed: 0,
                chunks_written: 0,
                chunks_kept: 0,
            });
        }
        Ok(fitted)
    }

    /// Every worker of the run has tallied its samples: the plan of the selecting `[mix]`
    /// goes to this process's workers (none after a failure).
    fn all_tallied(&mut self) {
        let planned = match &self.first_error {
            None => plan_mix(
                std::mem::take(&mut self.tallies),
                &self.spec.mix,
                self.cluster,
            ),
            Some(_) => Ok(None),
        };
        let plan = match planned {
            Ok(Some((plan, metrics))) => {
                self.mixed = Some(metrics);
                Some(Arc::new(plan))
            }
            Ok(None) => None,
            Err(err) => {
                self.failed(err);
                None
            }
        };
        for _ in 0..self.local_workers {
            let _ = self.mix_out.send(plan.clone());
        }
    }

    /// Once every worker has ended (`joined`, each worker's end): the run's first error, or
    /// what it did.
    fn finish(mut self, joined: Vec<std::result::Result<(), String>>) -> Result<StreamedRun> {
        self.progress.finish_and_clear();
        for (i, result) in joined.into_iter().enumerate() {
            if let Err(reason) = result {
                self.failed(Error::Config(format!("worker {i} panicked: {reason}")));
            }
        }
        let assembled = self.assembling.take().map(|handle| {
            handle.join().unwrap_or_else(|_| {
                Err(Error::Config("recording the input pieces panicked".into()))
            })
        });
        if let Some(Err(error)) = assembled {
            self.failed(error);
        }
        if let Some(error) = self.failure.take() {
            self.failed(error);
        }
        // The answers got before a failure are kept too.
        if let Err(error) = super::models::save_parses(self.parse_cache.take()) {
            self.failed(error);
        }
        if let Some(err) = self.first_error.take() {
            return Err(err);
        }
        let mut run = std::mem::take(&mut self.run);
        let written = &mut self.written;
        run.wall = self.augment_started.map_or(Duration::ZERO, |s| s.elapsed());
        run.files = std::mem::take(&mut written.files);
        run.runs = std::mem::take(&mut written.runs);
        run.images = written.stage_images;
        run.samples = std::mem::take(&mut written.samples);
        run.dropped = std::mem::take(&mut written.dropped);
        run.image_rejected = std::mem::take(&mut written.image_rejected);
        run.read_rejected.sort_by_key(|r| (r.0, r.1));
        run.image_rejected.sort_by(|a, b| a.0.cmp(&b.0));
        run.state = self.state_planned.take().map(|planned| StatePlanned {
            computed: written.stage_images,
            carried: written.carried,
            removed: written.removed,
            chunks_written: written.chunks_written,
            chunks_kept: written.chunks_kept,
            ..planned
        });
        run.stages = self.stage_metrics(&run);
        Ok(run)
    }

    /// The run's stages in order, each with its metrics: `read`, `plan`, the method stages'
    /// (with the `models` fit and the `mix`), `export`, and the sinks'.
    fn stage_metrics(&mut self, run: &StreamedRun) -> Vec<StageMetrics> {
        let written = &mut self.written;
        let mut stages = vec![
            StageMetrics {
                name: "read".into(),
                rows_in: run.counts.read,
                rows_out: self.rows_read,
                rejected: run.counts.rejected,
                elapsed_ms: self.read_elapsed.as_millis() as u64,
            },
            StageMetrics {
                name: "plan".into(),
                rows_in: written.images,
                rows_out: written.images,
                rejected: 0,
                elapsed_ms: 0,
            },
        ];
        if self.augments {
            // Every process fits the same models; the first one reports the fit.
            if self.cluster.process == 0 {
                stages.extend(self.models_metrics.take());
            }
            stages.append(&mut self.stage_totals);
            let samples: u64 = run.samples.values().sum();
            let all = StageMetrics {
                name: "mix".into(),
                rows_in: samples,
                rows_out: samples,
                rejected: 0,
                elapsed_ms: 0,
            };
            // A selecting mix's plan counts the samples of every process; the first one
            // reports it.
            stages.push(match self.mixed.take() {
                Some(plan) if self.cluster.process == 0 => plan,
                Some(_) => StageMetrics {
                    rows_in: 0,
                    rows_out: 0,
                    ..all
                },
                None => all,
            });
        }
        stages.push(StageMetrics {
            name: "export".into(),
            rows_in: written.rows_written,
            rows_out: written.rows_written,
            rejected: 0,
            elapsed_ms: written.elapsed.as_millis() as u64,
        });
        stages.append(&mut written.sinks);
        stages
    }
}

/// The plan of `[mix]` from every worker's tally, merged in worker order, with the `mix`
/// stage's metrics (the stages' samples in, those kept out). `None` when a worker of this
/// process failed (its error is the run's); a worker of another process that failed is this
/// process's error.
fn plan_mix(
    mut tallies: Vec<WorkerTally>,
    config: &MixConfig,
    cluster: &ClusterOptions,
) -> Result<Option<(MixPlan, StageMetrics)>> {
    let started = Instant::now();
    tallies.sort_by_key(|t| t.from);
    let mut merged = MixTally::new(config);
    for tally in tallies {
        match tally.tally {
            Some(tally) => merged.merge(tally),
            None => {
                let process = tally.from / cluster.workers.max(1);
                if process == cluster.process {
                    return Ok(None);
                }
                return Err(Error::Cluster {
                    process,
                    reason: format!(
                        "its worker {} failed before [mix] could choose the samples",
                        tally.from
                    ),
                });
            }
        }
    }
    let originals: u64 = merged.originals.iter().sum();
    let plan = merged.plan(config)?;
    let metrics = StageMetrics {
        name: "mix".into(),
        rows_in: originals + plan.augmented,
        rows_out: originals + plan.kept,
        rejected: 0,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    Ok(Some((plan, metrics)))
}

/// The stage contexts of the spec's methods with their models fitted on `fit`, the names of
/// the stages, the `models` stage's metrics, and with a `state` the cache of an external
/// parser's answers kept there ([`super::models::cache_parses`]).
#[allow(clippy::type_complexity)]
fn fitted_contexts(
    spec: &DataflowSpec,
    fit: &CollectedRun,
    (source, keep): (ModelSource, bool),
    augments: bool,
    failure: &Failure,
    state: Option<&StateDir>,
) -> Result<(
    FittedStages,
    Option<StageMetrics>,
    Option<Arc<ParseCache>>,
    Option<FittedModels>,
)> {
    if !augments {
        let fitted = FittedStages {
            contexts: StageContexts::default(),
            names: vec!["gather".to_string()],
            state: None,
        };
        return Ok((fitted, None, None, None));
    }
    let (mut methods, metrics, kept) = fit_methods_with(spec, fit, source, keep)?;
    methods.keep_records = state.is_some();
    let cache = super::models::cache_parses(spec, state, &mut methods)?;
    let names = methods.stage_names();
    let fitted = FittedStages {
        contexts: StageContexts::new(methods, spec.seed, failure),
        names,
        state: None,
    };
    Ok((fitted, Some(metrics), cache, kept))
}

/// What the main thread hands every worker once the models are fitted.
#[derive(Clone)]
struct FittedStages {
    contexts: StageContexts,
    /// The stages' names in dataflow order, `gather` first.
    names: Vec<String>,
    /// With `--state`.
    state: Option<Arc<WorkerState>>,
}

/// What a worker sends the models' fitting: the statistics it gathered, with its index.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct WorkerStats {
    from: usize,
    stats: Box<CorpusStats>,
    /// With `--state`, the digest of the rows the models learn from that the worker read.
    rows: Option<RowsDigest>,
}

/// The model inputs' dataflow input: `(worker to deliver to, statistics)`.
/// The input of a dataflow to the processes' main threads: `(worker to deliver to, item)`.
type ToMainThreads<T> =
    timely::dataflow::InputHandle<u64, CapacityContainerBuilder<Vec<(usize, T)>>>;

/// A dataflow that delivers each `(worker, item)` sent into its input to that worker (the first
/// worker of a process), which hands the item to its process's main thread as `message(item)`.
fn to_main_threads<T: timely::ExchangeData + Clone>(
    worker: &mut timely::worker::Worker,
    messages: &crossbeam_channel::Sender<Message>,
    message: fn(T) -> Message,
) -> (ToMainThreads<T>, ProbeHandle<u64>) {
    let messages = messages.clone();
    let mut input = ToMainThreads::new();
    let probe = worker.dataflow(|scope| {
        scope
            .input_from(&mut input)
            .container::<Vec<(usize, T)>>()
            .exchange(|(to, _): &(usize, T)| *to as u64)
            .flat_map(move |(_, item): (usize, T)| {
                let _ = messages.send(message(item));
                None::<()>
            })
            .probe()
            .0
    });
    (input, probe)
}

/// The first worker of every process, which hands what the others send it to its main thread.
fn first_workers(peers: usize, local_workers: usize) -> Vec<usize> {
    (0..peers / local_workers)
        .map(|process| process * local_workers)
        .collect()
}

/// Every worker's statistics merged in worker order, so that the models are the same on every
/// process and in every run.
fn merged_stats(mut gathered: Vec<WorkerStats>) -> Result<Option<CorpusStats>> {
    gathered.sort_by_key(|worker| worker.from);
    let mut merged: Option<CorpusStats> = None;
    for worker in gathered {
        match &mut merged {
            Some(total) => total.merge(*worker.stats)?,
            None => merged = Some(*worker.stats),
        }
    }
    if let Some(stats) = &merged {
        tracing::debug!("corpus statistics: about {} bytes", stats.approx_bytes());
    }
    Ok(merged)
}

/// Adds the images of `parts` to the statistics gathered by image, a part at a time; the parts'
/// files stay for the stages.
fn add_images(parts: &[BucketPart], stats: &mut CorpusStats) -> Result<()> {
    for part in parts {
        let rows = part.peek()?.typed()?;
        let inputs = rows
            .into_iter()
            .filter(|(table, _)| *table != TableKind::Samples)
            .flat_map(|(_, keyed)| keyed.into_iter().map(|keyed| keyed.row));
        for image in ImageAnnotations::group(inputs).values() {
            stats.add_image(image);
        }
    }
    Ok(())
}

/// Decides, once the inputs are read, whether the state can be compared with this run
/// ([`stale`]): fills in the header's models digest from the workers' `rows` when the models
/// learn from the inputs, and removes the state's header (the first process) before any
/// bucket state changes. Returns why every image is computed, if so, and the header to write.
fn plan_state(
    state: &mut StreamState,
    rows: Option<&RowsDigest>,
    mix: &MixConfig,
) -> Result<(Option<String>, StateHeader)> {
    if let Some(rows) = rows {
        state.now.models_digest = Some(rows.hex());
    }
    let previous = state.previous.as_ref().map(|(m, sha)| (m, sha.as_str()));
    let full = stale(state.before.as_ref(), &state.now, previous).or_else(|| {
        (*mix != MixConfig::All).then(|| {
            "[mix] selects over all samples, so a changed image can change any bucket".into()
        })
    });
    if state.first {
        state.dir.invalidate()?;
    }
    Ok((full, state.now.clone()))
}

/// With `--state`: digests every image of a range of a part and records it in `images`; an
/// image whose digest is its state's in `previous` (unless `full`) is carried forward, and its
/// input rows are taken out of `typed` so that it skips the stages. Every image seen is taken
/// out of `previous`, which ends holding the bucket's images that were not read.
fn plan_range(
    typed: &mut [(TableKind, Vec<KeyedRow>)],
    full: bool,
    previous: &mut BucketState,
    images: &mut Vec<ImageRecord>,
) -> Result<()> {
    let mut by_image: BTreeMap<&str, Vec<&KeyedRow>> = BTreeMap::new();
    for (_, rows) in typed.iter() {
        for keyed in rows {
            by_image
                .entry(keyed.row.image_id())
                .or_default()
                .push(keyed);
        }
    }
    let mut carried: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for (image_id, mut rows) in by_image {
        let digest = image_digest(&mut rows)?;
        let old = previous.remove(image_id);
        let carry = match old {
            Some(old) if !full && old.digest == digest => Some(old.rejected),
            _ => None,
        };
        if carry.is_some() {
            carried.insert(image_id.to_string());
        }
        images.push(ImageRecord {
            image_id: image_id.to_string(),
            digest,
            carried: carry,
        });
    }
    if !carried.is_empty() {
        for (table, rows) in typed.iter_mut() {
            if *table != TableKind::Samples {
                rows.retain(|keyed| !carried.contains(keyed.row.image_id()));
            }
        }
    }
    Ok(())
}

/// With `--state`: the chunks of a part (its `images`, in id order, covering the ids above
/// `after`) that hold exactly the images of the previous version's chunk of the same key, all
/// carried forward, and the chunk the part leaves open for the next when it may still be one
/// ([`CarriedOpen`]). A chunk qualifies when each of its images is carried, in this part and,
/// for the chunk the part begins inside (unless `after` ends a chunk), in the earlier parts
/// (`open`, what the part before left open), and no image of the state in its range went
/// unread (`unseen`: the bucket's previous states less the images of this and earlier parts);
/// the open last chunk only in the bucket's last part. The previous chunk of the key must also
/// begin after the same key, which the writer checks against the previous version's files.
fn unchanged_chunks(
    (after, open): (Option<&str>, Option<&CarriedOpen>),
    images: &[ImageRecord],
    unseen: &BucketState,
    chunk_images: usize,
    ends_bucket: bool,
) -> (Vec<UnchangedChunk>, Option<CarriedOpen>) {
    use std::ops::Bound;
    let ids: Vec<&str> = images.iter().map(|image| image.image_id.as_str()).collect();
    let mut unchanged = Vec::new();
    let mut left_open = None;
    let mut before = after;
    let mut whole = after.is_none_or(|id| super::buckets::ends_chunk(id, chunk_images));
    if let (false, Some(open)) = (whole, open) {
        (before, whole) = (open.after.as_deref(), true);
    }
    let mut offset = 0;
    for chunk in chunks(&ids, chunk_images) {
        let of_chunk = &images[offset..offset + chunk.ids.len()];
        offset += chunk.ids.len();
        let closed = !chunk.key.is_empty() || ends_bucket;
        let lower = before.map_or(Bound::Unbounded, Bound::Excluded);
        let upper = match (chunk.key, closed) {
            ("", true) => Bound::Unbounded,
            ("", false) => chunk
                .ids
                .last()
                .map_or(Bound::Unbounded, |id| Bound::Included(*id)),
            (key, _) => Bound::Included(key),
        };
        let removed = unseen.range::<str, _>((lower, upper)).next().is_some();
        if whole && !removed && of_chunk.iter().all(|i| i.carried.is_some()) {
            let after = before.map(str::to_string);
            match closed {
                true => unchanged.push(UnchangedChunk {
                    after,
                    key: chunk.key.to_string(),
                }),
                false => left_open = Some(CarriedOpen { after }),
            }
        }
        before = Some(chunk.key);
        whole = true;
    }
    (unchanged, left_open)
}

/// The spill directory of worker `index`.
fn spill_dir(scratch: &Path, index: usize) -> PathBuf {
    scratch.join(format!("w{index:03}"))
}

/// A part's rows as per-image states for the stages, images by id; counted by `gather`.
fn gather_part(
    tables: Vec<(TableKind, Vec<KeyedRow>)>,
    meter: Option<&StageMeter>,
) -> (Vec<Staged<SsaImage>>, Vec<KeyedRow>) {
    let mut samples = Vec::new();
    let build = || {
        let mut inputs = Vec::new();
        for (table, keyed) in tables {
            match table {
                TableKind::Samples => samples = keyed,
                _ => inputs.extend(keyed.into_iter().map(|keyed| keyed.row)),
            }
        }
        let rows = inputs.len();
        let images = ImageAnnotations::group(inputs);
        let count = super::stages::StageCount::new(rows, images.len(), 0);
        (images, count)
    };
    let images = match meter {
        Some(meter) => meter.measure(build),
        None => build().0,
    };
    let staged = images
        .into_iter()
        .map(|(image_id, image)| Staged {
            image_id,
            value: SsaImage {
                image: Arc::new(image),
                ..Default::default()
            },
        })
        .collect();
    (staged, samples)
}

/// Starts the thread that writes a worker's parts, one at a time, in the order they are sent,
/// and hands each part's samples to the worker's writers of `sinks`; at most one part waits for
/// it. Joining it gives what it wrote, or its first error.
fn spawn_writer(
    index: usize,
    mut writer: PartWriter,
    sinks: Vec<NamedSink>,
    messages: crossbeam_channel::Sender<Message>,
    mixing: Option<WriterMix>,
) -> Result<(
    crossbeam_channel::Sender<PartOutput>,
    std::thread::JoinHandle<Result<WrittenParts>>,
)> {
    let (parts, received) = crossbeam_channel::bounded::<PartOutput>(1);
    let handle = std::thread::Builder::new()
        .name(format!("capflow-writer-{index}"))
        .spawn(move || {
            let _span = tracing::info_span!("writer", index).entered();
            let mut sinks = SinkWriters::open(&sinks, index)?;
            for part in received {
                let images = part.outputs.len() as u64;
                writer.write(part, &mut sinks)?;
                let _ = messages.send(Message::Progress(images));
            }
            if let (Some(mix), Some(tally)) = (mixing, writer.take_tally()) {
                // The worker hands the tally on and brings back the run's plan.
                let _ = mix.tally.send(tally);
                let plan = mix.plan.recv().map_err(|_| {
                    Error::Config(format!("worker {index}: the [mix] selection was abandoned"))
                })?;
                writer.write_held(&plan, &mut sinks)?;
            }
            let sinks = sinks.finish()?;
            let mut written = writer.finish()?;
            written.sinks = sinks;
            Ok(written)
        })
        .map_err(|e| Error::Config(format!("starting the writer of worker {index}: {e}")))?;
    Ok((parts, handle))
}

/// A writer's side of `[mix]`: its tally goes to the worker, the run's plan comes back.
struct WriterMix {
    tally: crossbeam_channel::Sender<MixTally>,
    plan: crossbeam_channel::Receiver<Arc<MixPlan>>,
}

/// What a worker sends the mix's planning: its tally, or `None` when it failed (then no
/// process writes a mixed sample).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct WorkerTally {
    from: usize,
    tally: Option<MixTally>,
}

/// A worker's part in planning `[mix]`: it sends its tally to the first worker of every
/// process, whose main thread plans once it has every worker's, and waits for the plan.
struct MixExchange {
    input: ToMainThreads<WorkerTally>,
    probe: ProbeHandle<u64>,
    plans: crossbeam_channel::Receiver<Option<Arc<MixPlan>>>,
    first_workers: Vec<usize>,
}

impl MixExchange {
    /// Starts the worker's dataflow that sends its tally to the first worker of every process.
    fn start(worker: &mut timely::worker::Worker, shared: &WorkerShared) -> MixExchange {
        let (input, probe) = to_main_threads(worker, &shared.messages, Message::Tally);
        MixExchange {
            input,
            probe,
            plans: shared.mix_in.clone(),
            first_workers: first_workers(worker.peers(), shared.local_workers),
        }
    }

    /// Sends `tally` (`None`: this worker failed) and returns the plan, or `None` when a
    /// worker of the run failed or the plan could not be made. Every worker must come here
    /// once, whatever happened to it, or the others wait for its tally.
    fn share(
        mut self,
        worker: &mut timely::worker::Worker,
        from: usize,
        tally: Option<MixTally>,
    ) -> Option<Arc<MixPlan>> {
        let tally = WorkerTally { from, tally };
        send_to_first_workers(&mut self.input, &self.first_workers, tally);
        self.input.close();
        while !self.probe.done() {
            worker.step();
        }
        self.plans.recv().ok().flatten()
    }
}

/// The read dataflow's input: the readers' rows as Arrow batches, cut by the worker they go to.
type BatchInput = timely::dataflow::InputHandle<u64, CapacityContainerBuilder<Vec<TableBatch>>>;

struct BatchFeed {
    input: BatchInput,
    batcher: TableBatcher,
    in_flight: Rc<InFlight>,
    /// The most bytes in flight to other workers before the reader waits for them.
    window: u64,
}

impl BatchFeed {
    /// Sends `batches` on at once rather than when the input's buffer fills.
    fn send(&mut self, batches: Vec<TableBatch>) {
        if batches.is_empty() {
            return;
        }
        for batch in batches {
            self.in_flight.send(&batch);
            self.input.send(batch);
        }
        self.input.flush();
    }
}

impl RowFeed for BatchFeed {
    fn feed(&mut self, keyed: KeyedRow) -> Result<()> {
        let batches = self.batcher.push(keyed)?;
        self.send(batches);
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        let batches = self.batcher.flush()?;
        self.send(batches);
        self.input.close();
        Ok(())
    }

    fn held_back(&self) -> bool {
        self.in_flight.bytes() > self.window
    }
}

/// What a worker's readers hand on besides the rows: rejections and unit counts to the main
/// thread; the captions go into SSA's corpus statistics.
struct SpillObserver<'a> {
    messages: &'a crossbeam_channel::Sender<Message>,
    stats: Option<CorpusStats>,
    numbering: CaptionNumbering,
    /// Rows read and not yet counted on the progress display.
    unreported: u64,
    /// With `--state`: which rows the models learn from, and their digest so far.
    model_rows: Option<(ModelRows, RowsDigest)>,
    /// The worker's lines of the record of the input pieces, when the run makes one.
    pieces: Option<PieceLines>,
}

/// Which rows the corpus-level models learn from ([`super::models::model_rows`]).
type ModelRows = fn(&Row) -> bool;

/// Rows a reader reads between two updates of the progress display.
const READ_REPORT_ROWS: u64 = 8192;

impl SpillObserver<'_> {
    /// Counts the rows read so far on the progress display.
    fn report_read(&mut self) {
        if self.unreported > 0 {
            let _ = self.messages.send(Message::Read(self.unreported));
            self.unreported = 0;
        }
    }

    fn send(&self, message: Message) -> Result<()> {
        self.messages
            .send(message)
            .map_err(|_| Error::Usage("run was cancelled".into()))
    }
}

impl ReadObserver for SpillObserver<'_> {
    fn row(&mut self, keyed: &KeyedRow) -> Result<()> {
        self.unreported += 1;
        if self.unreported >= READ_REPORT_ROWS {
            self.report_read();
        }
        let ssa = self.stats.as_mut().and_then(|stats| stats.ssa.as_mut());
        if let (Some(stats), Row::Caption(caption)) = (ssa, &keyed.row) {
            self.numbering
                .add(stats, keyed.unit, keyed.ordinal, &caption.text);
        }
        if let Some((keep, digest)) = &mut self.model_rows {
            if keep(&keyed.row) {
                digest.add(keyed)?;
            }
        }
        Ok(())
    }

    fn rejected(&mut self, unit: u32, ordinal: u64, row: RejectedRow) -> Result<()> {
        self.send(Message::Rejected(unit, ordinal, row))
    }

    fn unit_read(&mut self, outcome: Result<(IngestCounts, u64)>) {
        let message = match outcome {
            Ok((counts, rows)) => Message::UnitDone { counts, rows },
            Err(err) => Message::Failed(err),
        };
        let _ = self.messages.send(message);
    }

    fn records_pieces(&self) -> bool {
        self.pieces.is_some()
    }

    fn piece_read(&mut self, unit: u32, piece: ReadPiece<'_>, tally: PieceTally) -> Result<()> {
        let Some(lines) = self.pieces.as_mut() else {
            return Ok(());
        };
        match piece {
            ReadPiece::Whole { end } => lines.whole(unit, tally, end),
            ReadPiece::Image {
                listing,
                image,
                position,
            } => lines.image(unit, listing, image, position, tally),
        }
    }
}

/// What one worker wrote: its shards, its changes as runs sorted by image id, and what it
/// counted on the way.
#[derive(Default)]
struct WrittenParts {
    files: Vec<FileEntry>,
    runs: Vec<PathBuf>,
    /// Images written, and images that went through the stages.
    images: u64,
    stage_images: u64,
    rows_written: u64,
    samples: BTreeMap<String, u64>,
    dropped: BTreeMap<SsaDrop, u64>,
    image_rejected: Vec<(String, Vec<RejectedRow>)>,
    /// With `--state`: images carried forward, and images of the state not read.
    carried: u64,
    removed: u64,
    /// Chunks written, and chunks whose files were kept as the previous version holds them.
    chunks_written: u64,
    chunks_kept: u64,
    elapsed: Duration,
    /// The metrics of the worker's sink writers.
    sinks: Vec<StageMetrics>,
}

impl WrittenParts {
    fn add(&mut self, other: WrittenParts) {
        self.files.extend(other.files);
        self.runs.extend(other.runs);
        self.images += other.images;
        self.stage_images += other.stage_images;
        self.rows_written += other.rows_written;
        for (method, n) in other.samples {
            *self.samples.entry(method).or_insert(0) += n;
        }
        for (reason, n) in other.dropped {
            *self.dropped.entry(reason).or_insert(0) += n;
        }
        self.image_rejected.extend(other.image_rejected);
        self.carried += other.carried;
        self.removed += other.removed;
        self.chunks_written += other.chunks_written;
        self.chunks_kept += other.chunks_kept;
        self.elapsed = self.elapsed.max(other.elapsed);
        add_metrics(&mut self.sinks, other.sinks);
    }
}

/// Writes one worker's parts as they are done: each part's chunks into the worker's part of
/// the dataset (closed at once), its changes into a run sorted by image id.
struct PartWriter {
    writer: DatasetWriter,
    buckets: usize,
    chunk_images: usize,
    runs_dir: PathBuf,
    /// The previous version's chunks of the buckets written: their samples, read back for
    /// the changes and for images carried forward, and their files, for chunks kept as they
    /// were.
    previous: PreviousChunks,
    /// The run of the bucket being written.
    run: Option<(usize, ChangesWriter)>,
    /// The chunk that the last part began or went on with and a later part ends, being
    /// written, or waiting while it may still be kept as it was.
    open: Option<OpenChunk>,
    deferred: Option<DeferredChunk>,
    written: WrittenParts,
    /// With `--state`: where the buckets' states go, and the states of the bucket being
    /// written so far.
    state: Option<StateDir>,
    bucket_state: BucketState,
    /// With `[mix]` other than `all`: the chunks whose samples wait for the run's plan.
    held: Option<HeldSamples>,
    /// With a state and SSA's built-in scorer: the records of the bucket being written.
    records: Option<KeptRecords>,
}

/// The SSA records of the bucket a [`PartWriter`] writes ([`super::refit`]).
struct KeptRecords {
    config_hash: String,
    /// The previous run's records of the bucket, for the images carried forward (taken in
    /// id order, as the bucket's images are written).
    previous: Option<RecordsCursor>,
    /// The bucket's records so far, spilled to the state's directory as they come.
    bucket: Option<(usize, RecordsSpill)>,
}

/// The chunk being written, which a later part ends. Its input tables' rows go to its shards
/// as they come, under the key "" until its last image id, its key, is known
/// ([`DatasetWriter::rekey_chunk`]); its shards' bytes depend only on the sequence of their rows
/// (the shard writer passes rows on in fixed batches), so not on where parts end. The stages'
/// samples follow the rows of the samples table among the inputs in a chunk, so they wait
/// for the chunk's end.
struct OpenChunk {
    bucket: usize,
    /// The stages' samples so far, by split, image by image.
    samples: BTreeMap<String, Vec<RecordBatch>>,
    /// With `[mix]`: the rows of the samples table among the inputs so far, by split, which
    /// wait with the stages' samples.
    inputs: BTreeMap<String, Vec<SampleRow>>,
}

impl OpenChunk {
    /// Adds `samples`, in image id order, to the chunk's stages' samples, each split's as a
    /// batch.
    fn add_samples<'s>(&mut self, samples: impl Iterator<Item = &'s SampleRow>) -> Result<()> {
        let mut by_split: BTreeMap<&str, Vec<SampleRow>> = BTreeMap::new();
        for sample in samples {
            let split = by_split.entry(sample.split.as_str()).or_default();
            split.push(sample.clone());
        }
        for (split, rows) in by_split {
            let batch = rows_to_batch(&rows)?;
            let batches = self.samples.entry(split.to_string()).or_default();
            batches.push(batch);
        }
        Ok(())
    }
}

/// A chunk that a later part ends, whose rows so far wait instead of being written, because
/// every one of its images so far was carried forward: when the part that ends it finds it
/// unchanged, the previous version's files are kept and its rows never written; otherwise they
/// are written then ([`PartWriter::undefer`]).
struct DeferredChunk {
    bucket: usize,
    /// The key of the chunk before it (`None` at the bucket's start).
    after: Option<String>,
    /// Its last image so far.
    through: String,
    /// Its input tables' rows so far, as slices of its parts' batches, in order.
    inputs: Vec<(TableKind, RecordBatch)>,
    /// Its rows of the samples table among the inputs so far.
    input_samples: Vec<Row>,
    /// The parts it took rows from.
    parts: usize,
}

/// A part being written, what its pieces are written from: its rows, its input tables but
/// the samples table (whose rows come typed), its images' samples
/// ([`PartWriter::part_samples`]), whether they go to sinks, and whether it ends its bucket.
struct PartSource<'p> {
    bucket: usize,
    rows: &'p PartRows,
    tables: Vec<TableKind>,
    samples: BTreeMap<&'p str, &'p [SampleRow]>,
    hand: bool,
    ends_bucket: bool,
}

/// The samples of the pieces of a part written so far: the images' samples added, by image,
/// for the changes, and the samples handed to the sinks.
#[derive(Default)]
struct PartSamples {
    added: BTreeMap<String, Vec<SampleRow>>,
    handed: Vec<SampleRow>,
}

/// The most parts a [`DeferredChunk`] takes rows from: it holds their Arrow batches (a part's
/// encoded bytes each, beside the dozen times that which a part takes through the stages), and
/// a chunk larger than that is written as it comes.
const DEFERRED_PARTS: usize = 2;

/// The previous version's chunks of the buckets a [`PartWriter`] writes, by bucket, each
/// bucket's in chunk order: closed chunks by their last image id, then the bucket's open last
/// chunk (key "", [`OPEN_CHUNK`]).
struct PreviousChunks(BTreeMap<usize, Vec<PreviousChunk>>);

/// One chunk of the previous version.
struct PreviousChunk {
    /// Its last image id ("" for the bucket's open last chunk), and the key of the chunk before
    /// it (`None` for the bucket's first): it covers the image ids `(after, key]`.
    key: String,
    after: Option<String>,
    /// Its rows in each samples file: all of a chunk shard's, a span of a compacted file's.
    samples: Vec<FileSpan>,
    /// Its files, every table's, unless one of them also holds other chunks (a file `capflow
    /// optimize` compacted): such a chunk is written again rather than kept.
    files: Option<Vec<Arc<FileEntry>>>,
}

/// The rows `offset..offset + rows` of a file of the dataset.
struct FileSpan {
    file: Arc<FileEntry>,
    offset: u64,
    rows: u64,
}

impl PreviousChunk {
    /// Its last image id, unless it is the bucket's open last chunk.
    fn through(&self) -> Option<&str> {
        (self.key != OPEN_CHUNK).then_some(self.key.as_str())
    }
}

impl PreviousChunks {
    /// The chunks of `manifest` (of `buckets` buckets) in the buckets that `owns` takes.
    fn of(manifest: Option<&Manifest>, buckets: usize, owns: &impl Fn(usize) -> bool) -> Self {
        let mut by_bucket: BTreeMap<usize, BTreeMap<(bool, String), PreviousChunk>> =
            BTreeMap::new();
        for file in manifest.iter().flat_map(|m| m.files.iter()) {
            let pieces = file.chunk_pieces();
            let shared = Arc::new(file.clone());
            let whole = pieces.len() == 1;
            for piece in (pieces.iter()).filter(|p| p.buckets == buckets && owns(p.bucket)) {
                let key = piece.chunk.to_string();
                let chunks = by_bucket.entry(piece.bucket).or_default();
                let chunk = chunks
                    .entry((key == OPEN_CHUNK, key.clone()))
                    .or_insert_with(|| PreviousChunk {
                        key,
                        after: None,
                        samples: Vec::new(),
                        files: Some(Vec::new()),
                    });
                if file.table == TableKind::Samples {
                    chunk.samples.push(FileSpan {
                        file: Arc::clone(&shared),
                        offset: piece.offset,
                        rows: piece.rows,
                    });
                }
                match (&mut chunk.files, whole) {
                    (Some(files), true) => files.push(Arc::clone(&shared)),
                    (files, _) => *files = None,
                }
            }
        }
        let in_order = |chunks: BTreeMap<(bool, String), PreviousChunk>| {
            let mut after: Option<String> = None;
            let mut out = Vec::with_capacity(chunks.len());
            for mut chunk in chunks.into_values() {
                chunk.after = after.replace(chunk.key.clone());
                out.push(chunk);
            }
            out
        };
        let by_bucket = by_bucket.into_iter();
        PreviousChunks(by_bucket.map(|(b, chunks)| (b, in_order(chunks))).collect())
    }

    /// The chunks of `bucket`, in chunk order.
    fn bucket(&self, bucket: usize) -> &[PreviousChunk] {
        self.0.get(&bucket).map_or(&[], Vec::as_slice)
    }

    /// The chunk of `bucket` whose key is `key`.
    fn chunk(&self, bucket: usize, key: &str) -> Option<&PreviousChunk> {
        let chunks = self.bucket(bucket);
        fn order(key: &str) -> (bool, &str) {
            (key == OPEN_CHUNK, key)
        }
        (chunks.binary_search_by(|chunk| order(&chunk.key).cmp(&order(key))))
            .ok()
            .map(|at| &chunks[at])
    }
}

/// The chunks a part keeps as the previous version holds them, by key, with their files.
type KeptChunks = BTreeMap<String, Vec<Arc<FileEntry>>>;

/// The key of a chunk whose last image is not known yet: the bucket's open last chunk, or a
/// chunk that a later part ends.
const OPEN_CHUNK: &str = "";

impl PartWriter {
    /// A writer of the buckets (of `buckets`) that `owns` takes.
    fn new(
        writer: DatasetWriter,
        (buckets, owns): (usize, impl Fn(usize) -> bool),
        chunk_images: usize,
        runs_dir: PathBuf,
        state: Option<StateDir>,
        held: Option<HeldSamples>,
    ) -> Self {
        let previous = PreviousChunks::of(writer.previous().map(|(m, _)| m), buckets, &owns);
        PartWriter {
            writer,
            buckets,
            chunk_images,
            runs_dir,
            previous,
            run: None,
            open: None,
            deferred: None,
            written: WrittenParts::default(),
            state,
            bucket_state: BucketState::new(),
            held,
            records: None,
        }
    }

    /// With a state, keeps each image's SSA record in it, under `config_hash`
    /// ([`super::refit`]).
    fn keeping_records(mut self, config_hash: Option<String>) -> PartWriter {
        self.records = config_hash
            .filter(|_| self.state.is_some())
            .map(|config_hash| KeptRecords {
                config_hash,
                previous: None,
                bucket: None,
            });
        self
    }

    /// The previous version's samples of the images in `(after, through]` of `bucket`, by image,
    /// but for those of the chunks `kept` (by key) as they were.
    fn previous_samples(
        &self,
        bucket: usize,
        (after, through): (Option<&str>, Option<&str>),
        kept: &KeptChunks,
    ) -> Result<BTreeMap<String, Vec<SampleRow>>> {
        let mut samples: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
        let in_range = |id: &str| after.is_none_or(|a| id > a) && through.is_none_or(|t| id <= t);
        for chunk in self.previous.bucket(bucket) {
            let below = through.is_some_and(|t| chunk.after.as_deref().is_some_and(|a| a >= t));
            let above = after.is_some_and(|a| chunk.through().is_some_and(|t| t <= a));
            if below || above || kept.contains_key(&chunk.key) {
                continue;
            }
            for span in &chunk.samples {
                let dir = self.writer.dir();
                let read =
                    read_file_rows_range::<SampleRow>(dir, &span.file, span.offset, span.rows);
                for sample in read?.into_iter().filter(|s| in_range(&s.image_id)) {
                    samples
                        .entry(sample.image_id.clone())
                        .or_default()
                        .push(sample);
                }
            }
        }
        Ok(samples)
    }

    /// Writes the chunks that end in `part` and the part's changes, then hands its samples, as
    /// the dataset holds them, to `sinks`.
    fn write(&mut self, part: PartOutput, sinks: &mut SinkWriters) -> Result<()> {
        let started = Instant::now();
        let PartOutput {
            bucket,
            after,
            through,
            ends_bucket,
            rows,
            input_samples,
            outputs,
            images,
            removed,
            unchanged,
            open_carried,
        } = part;
        if self.deferred.as_ref().is_some_and(|d| d.bucket != bucket) {
            return Err(left_open(bucket));
        }
        // With `[mix]`, the samples go to the sinks once the plan has chosen.
        let hand = !sinks.is_empty() && self.held.is_none();
        let mut kept = self.kept_chunks(bucket, &unchanged, hand);
        let ids = rows.image_ids()?;
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        // Cut at the chunk ends in the part; the last piece has the key "" ([`OPEN_CHUNK`])
        // when no chunk end closes it here: the bucket's open last chunk, or a chunk a later
        // part ends.
        let pieces = chunks(&ids, self.chunk_images);
        if let (Some(_), Some(first)) = (&self.open, pieces.first()) {
            // A chunk whose shards earlier parts began is written to its end.
            kept.remove(first.key);
        }
        let defers = self.defers(bucket, &pieces, open_carried.as_ref(), ends_bucket, hand);
        // The previous samples of the part's images, but for a deferred chunk's.
        let covers = match (defers, pieces.len()) {
            (false, _) => Some((after.as_deref(), through.as_deref())),
            (true, 1) => None,
            (true, n) => Some((after.as_deref(), Some(pieces[n - 2].key))),
        };
        let retracted = match covers {
            Some(covers) => self.previous_samples(bucket, covers, &kept)?,
            None => BTreeMap::new(),
        };
        self.record_states(&images, &outputs, removed);
        self.keep_records(bucket, &images, &outputs)?;
        self.written.images += ids.len() as u64;
        let source = PartSource {
            bucket,
            rows: &rows,
            tables: rows.tables().filter(|t| *t != TableKind::Samples).collect(),
            samples: self.part_samples(&images, &outputs, &retracted)?,
            hand,
            ends_bucket,
        };
        let mut input_samples = input_samples.into_iter().peekable();
        let mut written = PartSamples::default();
        let count = pieces.len();
        for (at, piece) in pieces.iter().enumerate() {
            let Some(last) = piece.ids.last() else {
                continue;
            };
            let next = || input_samples.next_if(|k| k.row.image_id() <= *last);
            let inputs: Vec<Row> = std::iter::from_fn(next).map(|k| k.row).collect();
            if defers && at + 1 == count {
                // Its rows wait, as they are, for the part that ends it.
                let after = open_carried.as_ref().and_then(|open| open.after.clone());
                self.defer_piece(&source, piece, after, inputs)?;
            } else if let Some(files) = kept.get(piece.key) {
                self.keep_piece(bucket, at == 0, piece.key, files)?;
            } else {
                self.write_piece(&source, piece, inputs, &mut written)?;
            }
        }
        if ends_bucket {
            self.end_bucket(bucket)?;
        }
        if self.held.is_none() {
            self.push_changes(bucket, image_changes(retracted, written.added))?;
        }
        self.written.elapsed += started.elapsed();
        sinks.write(&written.handed)
    }

    /// The samples of a part's images as the dataset is to hold them: an image carried forward
    /// keeps those the previous version holds of it (`retracted`), a computed image gets its
    /// outputs'. Counts the outputs' samples (once the plan has chosen, with `[mix]`), drops
    /// and rejections.
    fn part_samples<'p>(
        &mut self,
        images: &'p [ImageRecord],
        outputs: &'p [ImageOutput],
        retracted: &'p BTreeMap<String, Vec<SampleRow>>,
    ) -> Result<BTreeMap<&'p str, &'p [SampleRow]>> {
        let written = &mut self.written;
        let mut samples: BTreeMap<&str, &[SampleRow]> = BTreeMap::new();
        for image in images.iter().filter(|image| image.carried.is_some()) {
            if let Some(previous) = retracted.get(&image.image_id) {
                samples.insert(&image.image_id, previous);
            }
        }
        for output in outputs {
            samples.insert(&output.image_id, &output.samples);
            for sample in &output.samples {
                match &mut self.held {
                    Some(held) => held.tally(sample)?,
                    None => *written.samples.entry(sample.method.clone()).or_insert(0) += 1,
                }
            }
            for (reason, n) in &output.dropped {
                *written.dropped.entry(*reason).or_insert(0) += n;
            }
            if !output.rejected.is_empty() {
                written
                    .image_rejected
                    .push((output.image_id.clone(), output.rejected.clone()));
            }
        }
        written.stage_images += outputs.len() as u64;
        Ok(samples)
    }

    /// Holds the rows of `piece`, the last of its part and a chunk a later part ends, as they
    /// are, with `inputs`, its rows of the samples table among the inputs ([`DeferredChunk`]).
    /// `after` is the key of the chunk before it.
    fn defer_piece(
        &mut self,
        source: &PartSource,
        piece: &Chunk,
        after: Option<String>,
        inputs: Vec<Row>,
    ) -> Result<()> {
        let (Some(first), Some(last)) = (piece.ids.first(), piece.ids.last()) else {
            return Ok(());
        };
        let deferred = self.deferred.get_or_insert_with(|| DeferredChunk {
            bucket: source.bucket,
            after,
            through: String::new(),
            inputs: Vec::new(),
            input_samples: Vec::new(),
            parts: 0,
        });
        deferred.through = last.to_string();
        deferred.parts += 1;
        for &table in &source.tables {
            if let Some(batch) = source.rows.slice(table, first, last)? {
                deferred.inputs.push((table, batch));
            }
        }
        deferred.input_samples.extend(inputs);
        Ok(())
    }

    /// Carries forward `files`, those of the chunk `key` of `bucket`, which hold exactly its
    /// rows and samples; and so, when it is its part's `first` piece, the rows of it that
    /// earlier parts deferred.
    fn keep_piece(
        &mut self,
        bucket: usize,
        first: bool,
        key: &str,
        files: &[Arc<FileEntry>],
    ) -> Result<()> {
        if first {
            self.deferred = None;
        }
        if self.open.is_some() || self.deferred.is_some() {
            return Err(Error::Usage(format!(
                "bucket {bucket}: chunk {key:?} was to be kept as it was, but a chunk before it \
                 was left open"
            )));
        }
        for file in files {
            self.writer.carry(file)?;
            self.written.rows_written += file.rows;
        }
        self.written.chunks_kept += 1;
        Ok(())
    }

    /// Writes `piece` of a part to its chunk's shards: the input tables' rows as the Arrow
    /// batches they were read back as, `inputs` (its rows of the samples table among the
    /// inputs), and its images' samples, which wait for the chunk's end. Closes the chunk when
    /// the piece ends it, else leaves it open for the next part.
    fn write_piece(
        &mut self,
        source: &PartSource,
        piece: &Chunk,
        inputs: Vec<Row>,
        written: &mut PartSamples,
    ) -> Result<()> {
        let bucket = source.bucket;
        let (Some(first), Some(last)) = (piece.ids.first(), piece.ids.last()) else {
            return Ok(());
        };
        if let Some(deferred) = self.deferred.take() {
            // The chunk the earlier parts deferred changed: it is written after all.
            let open = self.undefer(deferred)?;
            self.open = Some(open);
        }
        let mut chunk = match self.open.take() {
            Some(open) if open.bucket == bucket => open,
            Some(open) => return Err(left_open(open.bucket)),
            None => OpenChunk {
                bucket,
                samples: BTreeMap::new(),
                inputs: BTreeMap::new(),
            },
        };
        for &table in &source.tables {
            if let Some(batch) = source.rows.slice(table, first, last)? {
                self.write_open(bucket, table, table.name(), &batch)?;
            }
        }
        let bucket_of = (bucket, self.buckets);
        let mut sink = DatasetSink::bucket(&mut self.writer, bucket_of, OPEN_CHUNK);
        for row in inputs {
            match (row, self.held.is_some()) {
                (Row::Sample(sample), true) => {
                    let split = chunk.inputs.entry(sample.split.clone()).or_default();
                    split.push(sample);
                }
                (row, _) => {
                    if let (true, Row::Sample(sample)) = (source.hand, &row) {
                        written.handed.push(sample.clone());
                    }
                    sink.row(row)?;
                }
            }
        }
        self.written.rows_written += sink.rows_out();
        sink.finish()?;
        for id in piece.ids {
            let new = source.samples.get(id).copied().unwrap_or_default();
            if source.hand {
                written.handed.extend_from_slice(new);
            }
            if !new.is_empty() {
                written.added.insert(id.to_string(), new.to_vec());
            }
        }
        let piece_samples = piece
            .ids
            .iter()
            .flat_map(|id| source.samples.get(id).copied());
        chunk.add_samples(piece_samples.flatten())?;
        if !piece.key.is_empty() || source.ends_bucket {
            self.close_chunk(piece.key, chunk)
        } else {
            self.open = Some(chunk);
            Ok(())
        }
    }

    /// Ends `bucket` after its last part: closes its last chunk, and with a state writes the
    /// bucket's states and SSA records.
    fn end_bucket(&mut self, bucket: usize) -> Result<()> {
        // A last part with no images of its own ends the chunk the previous part left open.
        if let Some(deferred) = self.deferred.take() {
            let chunk = self.undefer(deferred)?;
            self.close_chunk(OPEN_CHUNK, chunk)?;
        }
        if let Some(chunk) = self.open.take() {
            self.close_chunk(OPEN_CHUNK, chunk)?;
        }
        if let Some(held) = &mut self.held {
            held.end_bucket(bucket);
        }
        let Some(state) = &self.state else {
            return Ok(());
        };
        state.write_bucket(bucket, &std::mem::take(&mut self.bucket_state))?;
        if let Some(records) = &mut self.records {
            let hash = &records.config_hash;
            match records.bucket.take() {
                Some((b, spill)) if b == bucket => spill.finish(state, bucket, hash)?,
                // No image of the bucket kept a record.
                _ => super::refit::write(state, bucket, hash, BucketRecords::new())?,
            }
        }
        Ok(())
    }

    /// Whether the last of a part's `pieces`, a chunk that a later part ends, waits for it
    /// ([`DeferredChunk`]) instead of being written: when every one of its images so far was
    /// carried forward (`open`), it begins in this part or goes on with the chunk deferred so
    /// far (for at most [`DEFERRED_PARTS`] parts), and its files could be kept (a rerun whose
    /// samples go to no sink and wait for no `[mix]`).
    fn defers(
        &self,
        bucket: usize,
        pieces: &[Chunk],
        open: Option<&CarriedOpen>,
        ends_bucket: bool,
        hand: bool,
    ) -> bool {
        let Some(open) = open else {
            return false;
        };
        let trailing = pieces.last().is_some_and(|piece| piece.key == OPEN_CHUNK);
        if !trailing || ends_bucket || hand || self.held.is_some() {
            return false;
        }
        if self.previous.bucket(bucket).is_empty() {
            return false;
        }
        match (&self.deferred, pieces.len()) {
            (Some(deferred), 1) => deferred.after == open.after && deferred.parts < DEFERRED_PARTS,
            // A part's only piece that goes on with a chunk being written is written too.
            (None, 1) => self.open.is_none(),
            _ => true,
        }
    }

    /// Writes the rows `deferred` holds to its chunk's shards and gives the chunk as being
    /// written, with its images' samples as the previous version holds them (each of its
    /// images was carried forward, so its changes cancel).
    fn undefer(&mut self, deferred: DeferredChunk) -> Result<OpenChunk> {
        let DeferredChunk {
            bucket,
            after,
            through,
            inputs,
            input_samples,
            ..
        } = deferred;
        for (table, batch) in &inputs {
            self.write_open(bucket, *table, table.name(), batch)?;
        }
        let bucket_of = (bucket, self.buckets);
        let mut sink = DatasetSink::bucket(&mut self.writer, bucket_of, OPEN_CHUNK);
        for row in input_samples {
            sink.row(row)?;
        }
        self.written.rows_written += sink.rows_out();
        sink.finish()?;
        let covers = (after.as_deref(), Some(through.as_str()));
        let previous = self.previous_samples(bucket, covers, &KeptChunks::new())?;
        let mut chunk = OpenChunk {
            bucket,
            samples: BTreeMap::new(),
            inputs: BTreeMap::new(),
        };
        chunk.add_samples(previous.values().flatten())?;
        Ok(chunk)
    }

    /// Writes `batch`, rows of `table` for `split`, to the open chunk of `bucket`.
    fn write_open(
        &mut self,
        bucket: usize,
        table: TableKind,
        split: &str,
        batch: &RecordBatch,
    ) -> Result<()> {
        let bucket_of = (bucket, self.buckets);
        (self.writer).write_bucket_batch(table, split, bucket_of, OPEN_CHUNK, batch)?;
        self.written.rows_written += batch.num_rows() as u64;
        Ok(())
    }

    /// The chunks of `unchanged` whose files the previous version holds as they would be
    /// written again (the previous chunk of the key begins after the same key, and no file of
    /// it holds other chunks), by key. None when the samples go to sinks or wait for `[mix]`:
    /// those need the samples themselves.
    fn kept_chunks(&self, bucket: usize, unchanged: &[UnchangedChunk], hand: bool) -> KeptChunks {
        if hand || self.held.is_some() {
            return BTreeMap::new();
        }
        (unchanged.iter())
            .filter_map(|chunk| {
                let previous = self.previous.chunk(bucket, &chunk.key)?;
                let files = (previous.files.as_ref()).filter(|_| previous.after == chunk.after)?;
                Some((chunk.key.clone(), files.clone()))
            })
            .collect()
    }

    fn push_changes(&mut self, bucket: usize, changes: Vec<(SampleRow, i8)>) -> Result<()> {
        if !changes.is_empty() {
            let run = self.run_of(bucket)?;
            for (sample, diff) in changes {
                run.push(sample, diff)?;
            }
        }
        Ok(())
    }

    /// With `[mix]`: the tally of the stages' samples of every part written so far.
    fn take_tally(&mut self) -> Option<MixTally> {
        self.held.as_mut().map(HeldSamples::take_tally)
    }

    /// With `[mix]`: writes the samples shards of the held chunks, each chunk's rows of the
    /// samples table among the inputs and then the stages' samples that `plan` keeps, with
    /// their changes, and hands them to `sinks`.
    fn write_held(&mut self, plan: &MixPlan, sinks: &mut SinkWriters) -> Result<()> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        let hand = !sinks.is_empty();
        for chunk in held.into_chunks() {
            let started = Instant::now();
            let (bucket, after, through) = (chunk.bucket, &chunk.after, &chunk.through);
            let covers = (after.as_deref(), through.as_deref());
            let retracted = self.previous_samples(bucket, covers, &BTreeMap::new())?;
            let mut added: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
            let mut handed = Vec::new();
            for (split, made, mut rows) in chunk.samples()? {
                if made {
                    rows.retain(|sample| plan.keeps(sample));
                    for sample in &rows {
                        *self
                            .written
                            .samples
                            .entry(sample.method.clone())
                            .or_insert(0) += 1;
                        let image = added.entry(sample.image_id.clone()).or_default();
                        image.push(sample.clone());
                    }
                }
                if hand {
                    handed.extend_from_slice(&rows);
                }
                let batch = rows_to_batch(&rows)?;
                let bucket_of = (bucket, self.buckets);
                self.writer.write_bucket_batch(
                    TableKind::Samples,
                    &split,
                    bucket_of,
                    &chunk.key,
                    &batch,
                )?;
                self.written.rows_written += batch.num_rows() as u64;
            }
            self.writer.finish_chunk(bucket, &chunk.key)?;
            self.push_changes(bucket, image_changes(retracted, added))?;
            self.written.elapsed += started.elapsed();
            sinks.write(&handed)?;
        }
        Ok(())
    }

    /// With records kept: adds the part's images' records to its bucket's, a computed image's
    /// from the stages, a carried one's from the previous run's.
    fn keep_records(
        &mut self,
        bucket: usize,
        images: &[ImageRecord],
        outputs: &[ImageOutput],
    ) -> Result<()> {
        let (Some(records), Some(state)) = (&mut self.records, &self.state) else {
            return Ok(());
        };
        for image in images {
            let kept = match &image.carried {
                Some(_) => {
                    let previous = match &mut records.previous {
                        Some(cursor) if cursor.bucket() == bucket => cursor,
                        slot => {
                            slot.insert(RecordsCursor::open(state, bucket, &records.config_hash)?)
                        }
                    };
                    previous
                        .take(state, &image.image_id)?
                        .filter(|(digest, _)| *digest == image.digest)
                        .map(|(_, kept)| kept)
                }
                None => outputs
                    .binary_search_by(|o| o.image_id.as_str().cmp(&image.image_id))
                    .ok()
                    .and_then(|i| outputs[i].record.clone()),
            };
            if let Some(kept) = kept {
                let spill = match &mut records.bucket {
                    Some((b, spill)) if *b == bucket => spill,
                    slot => &mut slot.insert((bucket, RecordsSpill::new(state, bucket)?)).1,
                };
                spill.push(&image.image_id, &image.digest, &kept)?;
            }
        }
        Ok(())
    }

    /// With `--state`: adds the part's images to its bucket's new states (a computed image
    /// with the stages' rejections, a carried one with the previous run's, which go to the
    /// ledger again) and counts them.
    fn record_states(&mut self, images: &[ImageRecord], outputs: &[ImageOutput], removed: u64) {
        let written = &mut self.written;
        written.removed += removed;
        for image in images {
            let rejected = match &image.carried {
                Some(rejected) => {
                    written.carried += 1;
                    if !rejected.is_empty() {
                        written
                            .image_rejected
                            .push((image.image_id.clone(), rejected.clone()));
                    }
                    rejected.clone()
                }
                None => outputs
                    .binary_search_by(|o| o.image_id.as_str().cmp(&image.image_id))
                    .map(|i| outputs[i].rejected.clone())
                    .unwrap_or_default(),
            };
            self.bucket_state.insert(
                image.image_id.clone(),
                ImageState {
                    digest: image.digest.clone(),
                    rejected,
                },
            );
        }
    }

    /// Writes the samples of the chunk being written, gives it its key `key` and closes its
    /// shards.
    fn close_chunk(&mut self, key: &str, chunk: OpenChunk) -> Result<()> {
        self.written.chunks_written += 1;
        if let Some(held) = &mut self.held {
            // The samples shards wait for the plan; the other tables' close now.
            held.hold(chunk.bucket, key, chunk.inputs, chunk.samples)?;
            self.writer.rekey_chunk(chunk.bucket, OPEN_CHUNK, key);
            return self.writer.finish_chunk(chunk.bucket, key);
        }
        for (split, batches) in chunk.samples {
            for batch in batches {
                self.write_open(chunk.bucket, TableKind::Samples, &split, &batch)?;
            }
        }
        self.writer.rekey_chunk(chunk.bucket, OPEN_CHUNK, key);
        self.writer.finish_chunk(chunk.bucket, key)
    }

    /// The run of `bucket`'s changes: a bucket's parts come in image-id order, so each bucket's
    /// changes make one run.
    fn run_of(&mut self, bucket: usize) -> Result<&mut ChangesWriter> {
        let run = match self.run.take() {
            Some((open, run)) if open == bucket => run,
            other => {
                if let Some((_, run)) = other {
                    self.written.runs.push(run.finish()?);
                }
                std::fs::create_dir_all(&self.runs_dir)
                    .map_err(|e| Error::io(&self.runs_dir, e))?;
                ChangesWriter::create(&self.runs_dir.join(format!("b{bucket:05}.arrows")))?
            }
        };
        Ok(&mut self.run.insert((bucket, run)).1)
    }

    fn finish_run(&mut self) -> Result<()> {
        if let Some((_, run)) = self.run.take() {
            self.written.runs.push(run.finish()?);
        }
        Ok(())
    }

    /// Moves the worker's shards into the dataset's `data/` for the commit to adopt.
    fn finish(mut self) -> Result<WrittenParts> {
        if let Some(open) = &self.open {
            return Err(left_open(open.bucket));
        }
        self.finish_run()?;
        let mut written = self.written;
        written.files = self.writer.finish_part()?;
        Ok(written)
    }
}

/// A chunk left open when its bucket's last part has been written: parts came out of order.
fn left_open(bucket: usize) -> Error {
    Error::Usage(format!(
        "bucket {bucket}'s last chunk was never closed: its parts were written out of order"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::buckets::ends_chunk;
    use super::*;

    const CHUNK_IMAGES: usize = 4;

    /// An image id that sorts at `position` and ends a chunk (of [`CHUNK_IMAGES`]) or not.
    fn id(position: usize, ends: bool) -> String {
        (0..)
            .map(|k| format!("{position:02}-{k}"))
            .find(|id| ends_chunk(id, CHUNK_IMAGES) == ends)
            .unwrap()
    }

    fn image(position: usize, ends: bool, carried: bool) -> ImageRecord {
        ImageRecord {
            image_id: id(position, ends),
            digest: format!("d{position}"),
            carried: carried.then(Vec::new),
        }
    }

    fn state(ids: &[String]) -> BucketState {
        let state = |id: &String| {
            let image = ImageState {
                digest: "d".into(),
                rejected: Vec::new(),
            };
            (id.clone(), image)
        };
        ids.iter().map(state).collect()
    }

    fn unchanged(after: Option<&str>, key: &str) -> UnchangedChunk {
        UnchangedChunk {
            after: after.map(str::to_string),
            key: key.to_string(),
        }
    }

    /// A chunk over two parts: (2, 5], the first part ending at image 3, the second beginning
    /// after it. It is unchanged when each of its images in both parts is carried and the state
    /// lost none in its range.
    #[test]
    fn a_chunk_over_two_parts_is_unchanged_when_both_parts_carry_all_of_it() {
        let (two, three, five) = (id(2, true), id(3, false), id(5, true));
        let first = [
            image(1, false, true),
            image(2, true, true),
            image(3, false, true),
        ];
        let none = BucketState::new();
        let carried_open = |after: &str| {
            Some(CarriedOpen {
                after: Some(after.to_string()),
            })
        };
        let (closed, open) = unchanged_chunks((None, None), &first, &none, CHUNK_IMAGES, false);
        assert_eq!(closed, vec![unchanged(None, &two)]);
        assert_eq!(open, carried_open(&two));
        // An image of the state that no part read, in the open chunk before the part's end.
        let lost = state(&[id(3, false).replace("03-", "02-z")]);
        assert!(lost
            .keys()
            .all(|k| k.as_str() > two.as_str() && k.as_str() < three.as_str()));
        let (_, open) = unchanged_chunks((None, None), &first, &lost, CHUNK_IMAGES, false);
        assert_eq!(open, None);
        // A computed image in it.
        let computed = [
            image(1, false, true),
            image(2, true, true),
            image(3, false, false),
        ];
        let (_, open) = unchanged_chunks((None, None), &computed, &none, CHUNK_IMAGES, false);
        assert_eq!(open, None);

        let second = [image(4, false, true), image(5, true, true)];
        let carried = carried_open(&two);
        let begins = (Some(three.as_str()), carried.as_ref());
        let (closed, open) = unchanged_chunks(begins, &second, &none, CHUNK_IMAGES, false);
        assert_eq!(closed, vec![unchanged(Some(&two), &five)]);
        assert_eq!(open, None);
        // Not when the first part held a changed image of it.
        let begins = (Some(three.as_str()), None);
        let (closed, _) = unchanged_chunks(begins, &second, &none, CHUNK_IMAGES, false);
        assert_eq!(closed, Vec::new());
        // Nor when the state lost an image of it in the second part's range.
        let lost = state(&[id(4, false).replace("04-", "03-z")]);
        let begins = (Some(three.as_str()), carried.as_ref());
        let (closed, _) = unchanged_chunks(begins, &second, &lost, CHUNK_IMAGES, false);
        assert_eq!(closed, Vec::new());
    }

    /// Chunks A = (.., 2], B = (2, 4], C = (4, 6], D = (6, 9] and the open last chunk E after 9,
    /// by the positions of their ids. B's images are all carried; C holds a computed image; D
    /// has lost image 8, which its state held and no part read; E's image is carried.
    #[test]
    fn a_parts_unchanged_chunks_are_whole_all_carried_and_lost_no_image() {
        let images = vec![
            image(1, false, true),
            image(2, true, true),
            image(3, false, true),
            image(4, true, true),
            image(5, false, false),
            image(6, true, true),
            image(7, false, true),
            image(9, true, true),
            image(10, false, true),
        ];
        let (two, four, six, nine) = (id(2, true), id(4, true), id(6, true), id(9, true));
        let lost = state(&[id(8, false)]);
        // The part begins inside chunk A, after image 0: A is not whole, E goes on into the
        // next part.
        let inside = id(0, false);
        assert_eq!(
            unchanged_chunks((Some(&inside), None), &images, &lost, CHUNK_IMAGES, false).0,
            vec![unchanged(Some(&two), &four)]
        );
        // In the bucket's last part, the open last chunk ends there.
        assert_eq!(
            unchanged_chunks((Some(&inside), None), &images, &lost, CHUNK_IMAGES, true).0,
            vec![unchanged(Some(&two), &four), unchanged(Some(&nine), "")]
        );
        // A part that begins after a chunk's end, or the bucket's first part, holds A whole.
        let after_end = id(0, true);
        assert_eq!(
            unchanged_chunks(
                (Some(&after_end), None),
                &images,
                &lost,
                CHUNK_IMAGES,
                false
            )
            .0,
            vec![
                unchanged(Some(&after_end), &two),
                unchanged(Some(&two), &four)
            ]
        );
        assert_eq!(
            unchanged_chunks((None, None), &images, &lost, CHUNK_IMAGES, false).0[0],
            unchanged(None, &two)
        );
        // An image of the state after the last one read is lost from the open last chunk.
        let lost_last = state(&[id(8, false), id(11, false)]);
        assert_eq!(
            unchanged_chunks((None, None), &images, &lost_last, CHUNK_IMAGES, true).0,
            vec![unchanged(None, &two), unchanged(Some(&two), &four)]
        );
        // With no image lost and C's image carried, every closed chunk is unchanged.
        let mut all_carried = images;
        all_carried[4].carried = Some(Vec::new());
        assert_eq!(
            unchanged_chunks(
                (None, None),
                &all_carried,
                &BucketState::new(),
                CHUNK_IMAGES,
                false
            )
            .0,
            vec![
                unchanged(None, &two),
                unchanged(Some(&two), &four),
                unchanged(Some(&four), &six),
                unchanged(Some(&six), &nine),
            ]
        );
    }
}
