//! The streaming engine: one timely computation per run, from the readers to the dataset's
//! shards, in memory bounded by the size of a bucket part rather than by the dataset.
//!
//! ```text
//! readers ─(bucket of image key)→ spill (Arrow IPC per bucket and table)      ┐ read
//!         └─ rows the models learn from → main thread: fit once ─────────────┘
//! spill ─ part by part (whole chunks, ≤ part budget) → gather → method stages → part outputs
//!       → main thread: the part's chunks written and closed, its changes as a sorted run
//! runs ─ merged by image id → changelog; ledger, manifest → commit
//! ```
//!
//! Every worker reads its share of the inputs (input path `i` goes to worker `i % peers`) and
//! sends each row to the worker owning its bucket (`bucket % peers`), which appends it to that
//! bucket's spill files. Once every input is read, the main thread fits the corpus-level models
//! from the rows they learn from (in read order, so they are the same for any number of
//! workers) and hands them to the workers. Each worker then reads its buckets back in parts:
//! consecutive ranges of image ids that end at bucket-chunk boundaries
//! ([`super::spill::BucketSpill::parts`]), so a part holds whole images and whole chunks. A
//! part's images go through the method stages on the worker that read it; the main thread
//! writes the part's chunks and closes them at once, and keeps the part's changes as a run
//! sorted by image id in the scratch directory. At the end the runs are merged into the
//! changelog and the dataset is committed. The bytes are those of [`super::buckets`]'s export:
//! each chunk holds its images' rows in read order, then their samples, images by id.

use std::cell::RefCell;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int8Array, RecordBatch};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use differential_dataflow::input::Input as _;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Exchange, Input, Probe};
use timely::dataflow::InputHandle;

use super::augment::{ImageOutput, StageContexts};
use super::buckets::{changelog as image_changes, chunks};
use super::models::{fit_methods_with, fits_from_stats, model_rows};
use super::record::Staged;
use super::runtime::{input_units, CollectedRun, KeyedRow, RecordNumbering};
use super::spill::BucketSpill;
use super::ssa::corpus_stats;
use super::stages::{Failure, SsaImage, StageMeter};
use super::state::bucket_of;
use super::{ClusterOptions, DataflowSpec};
use crate::augment::ssa::{Drop as SsaDrop, SsaCorpusStats};
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::export::{
    read_file_rows, shard_index, ChangelogWriter, DatasetSink, DatasetWriter, FileEntry, Manifest,
    StageMetrics,
};
use crate::ingest::{read_input, IngestCounts, RecordSink, Row};
use crate::schema::{batch_to_rows, rows_to_batch, RejectedRow, SampleRow, TableKind};

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
    /// The changelog, written and ready to stage.
    pub changelog: Option<ChangelogWriter>,
    /// Images that went through the stages, samples by method, SSA's drops by reason.
    pub images: u64,
    pub samples: BTreeMap<String, u64>,
    pub dropped: BTreeMap<SsaDrop, u64>,
    /// Wall-clock time of the method stages.
    pub wall: Duration,
}

/// A part's results, sent by the worker that ran its stages to the writing thread.
struct PartOutput {
    bucket: usize,
    /// The image ids the part covers ([`super::spill::BucketPart::covers`]).
    after: Option<String>,
    through: Option<String>,
    /// The part's rows, images by id, every image's rows in read order.
    rows: Vec<KeyedRow>,
    /// The stages' outputs, by image id.
    outputs: Vec<ImageOutput>,
}

enum Message {
    Rejected(u32, u64, RejectedRow),
    UnitDone {
        counts: IngestCounts,
        rows: u64,
    },
    ModelRow(KeyedRow),
    /// What one worker gathered for SSA's corpus-level models.
    SsaStats(Box<SsaCorpusStats>),
    ReadDone,
    /// Images of a part just written, for the progress display.
    Progress(u64),
    /// What one worker wrote, once all its parts are written.
    Written(Box<WrittenParts>),
    Meters(Vec<StageMetrics>),
    Failed(Error),
}

/// Whether the streaming engine runs `spec`: a single process without `--state`, whose
/// samples are all kept (`[mix]` selects over all samples at once), writing a new dataset or a
/// new version of one whose samples are in bucket chunks of the same bucket count.
pub fn streams(spec: &DataflowSpec, cluster: &ClusterOptions, previous: Option<&Manifest>) -> bool {
    let buckets = spec.output.buckets;
    let bucketed = previous.is_none_or(|manifest| {
        manifest.table_files(TableKind::Samples).all(|file| {
            file.chunk.is_some() && shard_index(&file.path).is_some_and(|(_, n)| n == buckets)
        })
    });
    cluster.processes <= 1 && bucketed && spec.mix == crate::select::mix::MixConfig::All
}

/// Runs `spec` with the streaming engine, writing its buckets into `writer`; returns what the
/// commit needs. `corpus` holds the rows of the spec's fixed model corpus, when it has one.
pub fn run_streaming(
    spec: &DataflowSpec,
    cluster: &ClusterOptions,
    writer: &mut DatasetWriter,
    mut corpus: Option<CollectedRun>,
    memory_limit: u64,
) -> Result<StreamedRun> {
    let config = cluster.timely_config()?;
    let buckets = spec.output.buckets;
    let chunk_images = spec.output.chunk_images;
    let local_workers = cluster.workers.max(1);
    let units = input_units(spec)?;
    let scratch = writer.scratch_dir("spill")?;
    let runs_dir = writer.scratch_dir("changes")?;
    let out = writer.dir().to_path_buf();
    let config_hash = spec.config_hash();
    // A part's rows are decoded into typed rows and per-image state several times their encoded
    // size; each worker holds one part at a time, and the writer one more.
    let part_bytes = (memory_limit / (4 * (local_workers as u64 + 1))).max(4 << 10);
    // SSA's models are fitted from statistics the readers gather; other models from rows.
    let ssa_stats = match (&corpus, &spec.ssa) {
        (None, Some(config)) if fits_from_stats(spec) => Some(corpus_stats(config)),
        _ => None,
    };
    let keep = match &corpus {
        Some(_) => None,
        None if ssa_stats.is_some() => None,
        None => model_rows(spec),
    };
    let augments = spec.augments() || spec.keeps_originals();
    let (sender, receiver) = crossbeam_channel::bounded::<Message>(4 * 1024);
    let (models_out, models_in) = crossbeam_channel::unbounded::<Option<FittedStages>>();
    // Every worker of this process spills into its own directory.
    let first_worker = cluster.process * local_workers;
    for index in first_worker..first_worker + local_workers {
        let dir = spill_dir(&scratch, index);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    let started = Instant::now();
    let guards = timely::execute(config, move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let messages = sender.clone();
        let fail = |err: Error| {
            let _ = messages.send(Message::Failed(err));
        };
        let spill = Rc::new(RefCell::new(BucketSpill::new(
            spill_dir(&scratch, index),
            chunk_images,
        )));
        let spill_error: Rc<RefCell<Option<Error>>> = Rc::default();
        // Read: rows to the worker owning their bucket, which spills them.
        let mut input = InputHandle::<u64, CapacityContainerBuilder<Vec<KeyedRow>>>::new();
        let probe = ProbeHandle::new();
        {
            let spill = Rc::clone(&spill);
            let spill_error = Rc::clone(&spill_error);
            worker.dataflow(|scope| {
                scope
                    .input_from(&mut input)
                    .container::<Vec<KeyedRow>>()
                    .exchange(move |keyed: &KeyedRow| {
                        bucket_of(keyed.row.image_id(), buckets) as u64
                    })
                    .flat_map(move |keyed: KeyedRow| {
                        let bucket = bucket_of(keyed.row.image_id(), buckets);
                        if let Err(err) = spill.borrow_mut().push(bucket, keyed) {
                            spill_error.borrow_mut().get_or_insert(err);
                        }
                        None::<()>
                    })
                    .probe_with(&probe);
            });
        }
        let mut stats = ssa_stats.clone();
        for (i, unit) in units.iter().enumerate() {
            if i % peers != index {
                continue;
            }
            let mut sink = SpillingSink {
                stats: stats.as_mut(),
                captions: 0,
                input: &mut input,
                worker: &mut *worker,
                messages: &messages,
                unit: i as u32,
                numbering: RecordNumbering::new(unit.tables.as_deref()),
                rows: 0,
                keep,
            };
            let outcome = read_input(unit.format, &unit.path, &mut sink);
            let (counts, rows) = (sink.numbering.counts, sink.rows);
            match outcome {
                Ok(()) => {
                    let _ = messages.send(Message::UnitDone { counts, rows });
                }
                Err(err) => fail(err),
            }
        }
        input.close();
        while !probe.done() {
            worker.step();
        }
        if let Some(err) = spill_error.borrow_mut().take() {
            fail(err);
        }
        if let Err(err) = spill.borrow_mut().finish() {
            fail(err);
        }
        if let Some(stats) = stats.take() {
            let _ = messages.send(Message::SsaStats(Box::new(stats)));
        }
        let _ = messages.send(Message::ReadDone);
        // The models, fitted by the main thread once every worker has read its inputs.
        let FittedStages { contexts, names } = match models_in.recv() {
            Ok(Some(fitted)) => fitted,
            _ => return,
        };
        // Stages: one dataflow for the run, a timestamp per part; parts never leave the worker.
        let stage_meters: Vec<StageMeter> =
            names.iter().map(|name| StageMeter::new(name)).collect();
        let wired = stage_meters.clone();
        let outputs: Rc<RefCell<Vec<ImageOutput>>> = Rc::default();
        let sink_outputs = Rc::clone(&outputs);
        let (mut images_in, stage_probe) = worker.dataflow::<u64, _, _>(move |scope| {
            // `gather` is done by the part reader; the meters start after it.
            let mut meters = wired.into_iter().skip(1);
            let mut next = || meters.next().unwrap_or_else(|| StageMeter::new("unnamed"));
            let (input, images) = scope.new_collection::<Staged<SsaImage>, isize>();
            let images = contexts.wire(images, &mut next);
            let probe = images
                .inner
                .flat_map(|(staged, _time, diff): (Staged<SsaImage>, u64, isize)| {
                    (diff > 0).then_some(ImageOutput {
                        image_id: staged.image_id,
                        samples: staged.value.samples,
                        rejected: staged.value.rejected,
                        dropped: staged.value.dropped,
                    })
                })
                .flat_map(move |output: ImageOutput| {
                    sink_outputs.borrow_mut().push(output);
                    None::<()>
                })
                .probe()
                .0;
            (input, probe)
        });
        let gather_meter = stage_meters.first().cloned();
        // This worker's parts go to shards of its own, which the commit adopts.
        let mut part_writer = match DatasetWriter::part(&out, &config_hash, index) {
            Ok(writer) => PartWriter::new(
                writer,
                buckets,
                chunk_images,
                runs_dir.join(format!("w{index:03}")),
            ),
            Err(err) => return fail(err),
        };
        let mut round = 0u64;
        let mut owned = spill.borrow_mut();
        for bucket in (0..buckets).filter(|b| b % peers == index) {
            let parts = match owned.parts(bucket, part_bytes) {
                Ok(parts) => parts,
                Err(err) => return fail(err),
            };
            tracing::debug!(
                "worker {index}: bucket {bucket} in {} parts of at most {part_bytes} bytes",
                parts.len()
            );
            for part in parts {
                let (after, through) = (part.after.clone(), part.through.clone());
                let rows = match part.read() {
                    Ok(rows) => rows,
                    Err(err) => return fail(err),
                };
                let staged = gather_part(&rows, gather_meter.as_ref());
                let expected = staged.len();
                for image in staged {
                    images_in.insert(image);
                }
                round += 1;
                images_in.advance_to(round);
                images_in.flush();
                while outputs.borrow().len() < expected {
                    worker.step();
                }
                let mut part_outputs = std::mem::take(&mut *outputs.borrow_mut());
                part_outputs.sort_by(|a, b| a.image_id.cmp(&b.image_id));
                let output = PartOutput {
                    bucket,
                    after,
                    through,
                    rows,
                    outputs: part_outputs,
                };
                if let Err(err) = part_writer.write(output) {
                    return fail(err);
                }
                let _ = messages.send(Message::Progress(expected as u64));
            }
        }
        match part_writer.finish() {
            Ok(written) => {
                let _ = messages.send(Message::Written(Box::new(written)));
            }
            Err(err) => return fail(err),
        }
        drop(owned);
        drop(images_in);
        while !stage_probe.done() {
            worker.step();
        }
        let _ = messages.send(Message::Meters(
            stage_meters.iter().map(StageMeter::snapshot).collect(),
        ));
    })
    .map_err(|e| Error::Config(format!("starting workers: {e}")))?;

    let mut run = StreamedRun::default();
    let failure = Failure::default();
    let mut first_error: Option<Error> = None;
    let mut model_rows_read: Vec<Arc<KeyedRow>> = Vec::new();
    let mut gathered: Option<SsaCorpusStats> = None;
    let mut reads_done = 0;
    let mut rows_read = 0u64;
    let mut stage_totals: Vec<StageMetrics> = Vec::new();
    let mut models_metrics = None;
    let mut augment_started = None;
    let mut written = WrittenParts::default();
    let mut images_done = 0u64;
    let progress = crate::cli::progress::records("capflow run");
    for message in receiver.iter() {
        match message {
            Message::Rejected(unit, ordinal, row) => run.read_rejected.push((unit, ordinal, row)),
            Message::UnitDone { counts, rows } => {
                run.counts.add(counts);
                rows_read += rows;
            }
            Message::ModelRow(row) => model_rows_read.push(Arc::new(row)),
            Message::SsaStats(stats) => {
                let merged = match gathered.take() {
                    Some(mut total) => total.merge(*stats).map(|()| total),
                    None => Ok(*stats),
                };
                match merged {
                    Ok(total) => gathered = Some(total),
                    Err(err) => {
                        first_error.get_or_insert(err);
                    }
                }
            }
            Message::ReadDone => {
                reads_done += 1;
                if reads_done < local_workers {
                    continue;
                }
                progress.set_message("augment");
                augment_started = Some(Instant::now());
                let contexts = match first_error {
                    Some(_) => None,
                    None => {
                        let fit = match corpus.take() {
                            Some(corpus) => corpus,
                            None => {
                                model_rows_read.sort_by_key(|r| (r.unit, r.ordinal));
                                CollectedRun {
                                    rows: std::mem::take(&mut model_rows_read),
                                    ..CollectedRun::default()
                                }
                            }
                        };
                        match fitted_contexts(spec, &fit, gathered.take(), augments, &failure) {
                            Ok((fitted, metrics)) => {
                                models_metrics = metrics;
                                Some(fitted)
                            }
                            Err(err) => {
                                first_error.get_or_insert(err);
                                None
                            }
                        }
                    }
                };
                for _ in 0..local_workers {
                    let _ = models_out.send(contexts.clone());
                }
            }
            Message::Progress(images) => {
                images_done += images;
                progress.set_position(images_done);
            }
            Message::Written(part) => written.add(*part),
            Message::Meters(meters) => {
                for meter in meters {
                    match stage_totals.iter_mut().find(|s| s.name == meter.name) {
                        Some(total) => {
                            total.rows_in += meter.rows_in;
                            total.rows_out += meter.rows_out;
                            total.rejected += meter.rejected;
                            total.elapsed_ms += meter.elapsed_ms;
                        }
                        None => stage_totals.push(meter),
                    }
                }
            }
            Message::Failed(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    progress.finish_and_clear();
    drop(models_out);
    for (i, result) in guards.join().into_iter().enumerate() {
        if let Err(reason) = result {
            first_error.get_or_insert(Error::Config(format!("worker {i} panicked: {reason}")));
        }
    }
    if let Some(error) = failure.take() {
        first_error.get_or_insert(error);
    }
    if let Some(err) = first_error {
        return Err(err);
    }
    run.wall = augment_started.map_or(Duration::ZERO, |s| s.elapsed());
    writer.adopt(std::mem::take(&mut written.files))?;
    run.images = written.stage_images;
    run.samples = std::mem::take(&mut written.samples);
    run.dropped = std::mem::take(&mut written.dropped);
    run.image_rejected = std::mem::take(&mut written.image_rejected);
    run.read_rejected.sort_by_key(|r| (r.0, r.1));
    run.image_rejected.sort_by(|a, b| a.0.cmp(&b.0));
    let read_ms = started.elapsed().as_millis() as u64;
    run.stages.push(StageMetrics {
        name: "read".into(),
        rows_in: run.counts.read,
        rows_out: rows_read,
        rejected: run.counts.rejected,
        elapsed_ms: read_ms,
    });
    run.stages.push(StageMetrics {
        name: "plan".into(),
        rows_in: written.images,
        rows_out: written.images,
        rejected: 0,
        elapsed_ms: 0,
    });
    if augments {
        run.stages.extend(models_metrics);
        run.stages.extend(stage_totals);
        let samples: u64 = run.samples.values().sum();
        run.stages.push(StageMetrics {
            name: "mix".into(),
            rows_in: samples,
            rows_out: samples,
            rejected: 0,
            elapsed_ms: 0,
        });
    }
    let export_started = Instant::now();
    let rows_written = written.rows_written;
    let writing = written.elapsed;
    run.changelog = Some(changelog(writer, &written.runs)?);
    run.stages.push(StageMetrics {
        name: "export".into(),
        rows_in: rows_written,
        rows_out: rows_written,
        rejected: 0,
        elapsed_ms: writing.as_millis() as u64 + export_started.elapsed().as_millis() as u64,
    });
    Ok(run)
}

/// The stage contexts of the spec's methods with their models fitted on `fit`, the names of
/// the stages, and the `models` stage's metrics.
fn fitted_contexts(
    spec: &DataflowSpec,
    fit: &CollectedRun,
    ssa_stats: Option<SsaCorpusStats>,
    augments: bool,
    failure: &Failure,
) -> Result<(FittedStages, Option<StageMetrics>)> {
    if !augments {
        let fitted = FittedStages {
            contexts: StageContexts::default(),
            names: vec!["gather".to_string()],
        };
        return Ok((fitted, None));
    }
    let (methods, metrics) = fit_methods_with(spec, fit, ssa_stats)?;
    let names = methods.stage_names();
    let fitted = FittedStages {
        contexts: StageContexts::new(methods, spec.seed, failure),
        names,
    };
    Ok((fitted, Some(metrics)))
}

/// What the main thread hands every worker once the models are fitted.
#[derive(Clone)]
struct FittedStages {
    contexts: StageContexts,
    /// The stages' names in dataflow order, `gather` first.
    names: Vec<String>,
}

/// The spill directory of worker `index`.
fn spill_dir(scratch: &Path, index: usize) -> PathBuf {
    scratch.join(format!("w{index:03}"))
}

/// A part's rows as per-image states for the stages, images by id; counted by `gather`.
fn gather_part(rows: &[KeyedRow], meter: Option<&StageMeter>) -> Vec<Staged<SsaImage>> {
    let mut images: Vec<Staged<SsaImage>> = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let id = rows[start].row.image_id();
        let end = start + rows[start..].partition_point(|r| r.row.image_id() == id);
        let records: Vec<&KeyedRow> = rows[start..end]
            .iter()
            .filter(|r| !matches!(r.row, Row::Sample(_)))
            .collect();
        start = end;
        if records.is_empty() {
            continue;
        }
        let build = || {
            let mut image = ImageAnnotations::new(id);
            for record in &records {
                image.push(record.row.clone());
            }
            let count = super::stages::StageCount::new(records.len(), 1, 0);
            (image, count)
        };
        let image = match meter {
            Some(meter) => meter.measure(build),
            None => build().0,
        };
        images.push(Staged {
            image_id: id.to_string(),
            value: SsaImage {
                image: Arc::new(image),
                ..Default::default()
            },
        });
    }
    images
}

/// Feeds one worker's input units into the read dataflow; rejections and the rows the models
/// learn from go to the main thread.
struct SpillingSink<'a> {
    input: &'a mut InputHandle<u64, CapacityContainerBuilder<Vec<KeyedRow>>>,
    worker: &'a mut timely::worker::Worker,
    messages: &'a crossbeam_channel::Sender<Message>,
    unit: u32,
    numbering: RecordNumbering<'a>,
    rows: u64,
    keep: Option<fn(&Row) -> bool>,
    /// SSA's corpus statistics, when its models are fitted from them, and the number of
    /// non-empty captions of this unit so far.
    stats: Option<&'a mut SsaCorpusStats>,
    captions: u64,
}

impl RecordSink for SpillingSink<'_> {
    fn row(&mut self, row: Row) -> Result<()> {
        let Some(ordinal) = self.numbering.row(&row) else {
            return Ok(());
        };
        let keyed = KeyedRow {
            unit: self.unit,
            ordinal,
            row,
        };
        if let (Some(stats), Row::Caption(caption)) = (self.stats.as_deref_mut(), &keyed.row) {
            if stats.add_caption(self.captions, &caption.text) {
                self.captions += 1;
            }
        }
        if self.keep.is_some_and(|keep| keep(&keyed.row)) {
            self.messages
                .send(Message::ModelRow(keyed.clone()))
                .map_err(|_| Error::Usage("run was cancelled".into()))?;
        }
        self.input.send(keyed);
        self.rows += 1;
        // Let the dataflow drain now and then so memory stays bounded by the batch, not the file.
        if self.rows.is_multiple_of(4096) {
            self.worker.step();
        }
        Ok(())
    }

    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        let message = Message::Rejected(self.unit, self.numbering.reject(), rejected);
        self.messages
            .send(message)
            .map_err(|_| Error::Usage("run was cancelled".into()))
    }

    fn accepted(&mut self) -> Result<()> {
        self.numbering.accepted();
        Ok(())
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
    elapsed: Duration,
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
        self.elapsed = self.elapsed.max(other.elapsed);
    }
}

/// Writes one worker's parts as they are done: each part's chunks into the worker's part of
/// the dataset (closed at once), its changes into a run sorted by image id.
struct PartWriter {
    writer: DatasetWriter,
    buckets: usize,
    chunk_images: usize,
    runs_dir: PathBuf,
    /// The previous version's sample files, by bucket, in chunk order: each with the image ids
    /// it covers, `(after, through]`.
    previous: BTreeMap<usize, Vec<PreviousChunk>>,
    written: WrittenParts,
}

/// A sample file of the previous version and the image ids of its chunk.
struct PreviousChunk {
    file: FileEntry,
    after: Option<String>,
    through: Option<String>,
}

impl PartWriter {
    fn new(writer: DatasetWriter, buckets: usize, chunk_images: usize, runs_dir: PathBuf) -> Self {
        let mut previous: BTreeMap<usize, Vec<(String, FileEntry)>> = BTreeMap::new();
        if let Some((manifest, _)) = writer.previous() {
            for file in manifest.table_files(TableKind::Samples) {
                if let (Some((bucket, _)), Some(chunk)) = (shard_index(&file.path), &file.chunk) {
                    previous
                        .entry(bucket)
                        .or_default()
                        .push((chunk.clone(), file.clone()));
                }
            }
        }
        let previous = previous
            .into_iter()
            .map(|(bucket, mut files)| {
                // Closed chunks by their last id, the open last chunk (key "") after them.
                files.sort_by(|a, b| (a.0.is_empty(), &a.0).cmp(&(b.0.is_empty(), &b.0)));
                let mut after: Option<String> = None;
                let mut chunks = Vec::new();
                for (key, file) in files {
                    let through = (!key.is_empty()).then(|| key.clone());
                    chunks.push(PreviousChunk {
                        file,
                        after: after.clone(),
                        through: through.clone(),
                    });
                    if through.is_some() {
                        after = through;
                    }
                }
                (bucket, chunks)
            })
            .collect();
        PartWriter {
            writer,
            buckets,
            chunk_images,
            runs_dir,
            previous,
            written: WrittenParts::default(),
        }
    }

    /// The previous version's samples of the images in `(after, through]` of `bucket`, by image.
    fn previous_samples(
        &self,
        bucket: usize,
        after: Option<&str>,
        through: Option<&str>,
    ) -> Result<BTreeMap<String, Vec<SampleRow>>> {
        let mut samples: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
        let in_range = |id: &str| after.is_none_or(|a| id > a) && through.is_none_or(|t| id <= t);
        for chunk in self.previous.get(&bucket).into_iter().flatten() {
            let below = through.is_some_and(|t| chunk.after.as_deref().is_some_and(|a| a >= t));
            let above = after.is_some_and(|a| chunk.through.as_deref().is_some_and(|t| t <= a));
            if below || above {
                continue;
            }
            for sample in read_file_rows::<SampleRow>(self.writer.dir(), &chunk.file)? {
                if in_range(&sample.image_id) {
                    samples
                        .entry(sample.image_id.clone())
                        .or_default()
                        .push(sample);
                }
            }
        }
        Ok(samples)
    }

    fn write(&mut self, part: PartOutput) -> Result<()> {
        let started = Instant::now();
        let PartOutput {
            bucket,
            after,
            through,
            rows,
            outputs,
        } = part;
        let retracted = self.previous_samples(bucket, after.as_deref(), through.as_deref())?;
        let written = &mut self.written;
        let mut samples: BTreeMap<&str, &[SampleRow]> = BTreeMap::new();
        for output in &outputs {
            samples.insert(&output.image_id, &output.samples);
            for sample in &output.samples {
                *written.samples.entry(sample.method.clone()).or_insert(0) += 1;
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
        // The part's images and the range of rows of each.
        let mut ids: Vec<&str> = Vec::new();
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut start = 0;
        while start < rows.len() {
            let id = rows[start].row.image_id();
            let end = start + rows[start..].partition_point(|r| r.row.image_id() == id);
            ids.push(id);
            ranges.push((start, end));
            start = end;
        }
        written.images += ids.len() as u64;
        let mut added: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
        let mut position = 0;
        for chunk in chunks(&ids, self.chunk_images) {
            let first = position;
            position += chunk.ids.len();
            let mut sink = DatasetSink::bucket(&mut self.writer, (bucket, self.buckets), chunk.key);
            for &(from, to) in &ranges[first..position] {
                for keyed in &rows[from..to] {
                    sink.row(keyed.row.clone())?;
                }
            }
            for id in chunk.ids {
                let new = samples.get(id).copied().unwrap_or_default();
                for sample in new {
                    sink.row(Row::Sample(sample.clone()))?;
                }
                if !new.is_empty() {
                    added.insert(id.to_string(), new.to_vec());
                }
            }
            written.rows_written += sink.rows_out();
            sink.finish()?;
            self.writer.finish_chunk(bucket, chunk.key)?;
        }
        let changes = image_changes(retracted, added);
        if !changes.is_empty() {
            if written.runs.is_empty() {
                std::fs::create_dir_all(&self.runs_dir)
                    .map_err(|e| Error::io(&self.runs_dir, e))?;
            }
            let path = self
                .runs_dir
                .join(format!("run-{:06}.arrows", written.runs.len()));
            write_run(&path, &changes)?;
            written.runs.push(path);
        }
        written.elapsed += started.elapsed();
        Ok(())
    }

    /// Moves the worker's shards into the dataset's `data/` for the commit to adopt.
    fn finish(self) -> Result<WrittenParts> {
        let mut written = self.written;
        written.files = self.writer.finish_part()?;
        Ok(written)
    }
}

/// The changelog: the runs merged by image id.
fn changelog(writer: &DatasetWriter, runs: &[PathBuf]) -> Result<ChangelogWriter> {
    let mut changelog = writer.changelog_writer()?;
    let mut readers: Vec<RunReader> = runs
        .iter()
        .map(|path| RunReader::open(path))
        .collect::<Result<_>>()?;
    // Every image's changes are in one run, so ordering heads by (image id, run) keeps each
    // image's changes together and in their run's order.
    let mut heads: BinaryHeap<std::cmp::Reverse<(String, usize)>> = BinaryHeap::new();
    for (i, reader) in readers.iter_mut().enumerate() {
        if let Some(id) = reader.peek_id()? {
            heads.push(std::cmp::Reverse((id, i)));
        }
    }
    while let Some(std::cmp::Reverse((_, i))) = heads.pop() {
        let reader = &mut readers[i];
        if let Some((sample, diff)) = reader.next_change()? {
            changelog.push(sample, diff)?;
        }
        if let Some(id) = reader.peek_id()? {
            heads.push(std::cmp::Reverse((id, i)));
        }
    }
    for path in runs {
        std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
    }
    Ok(changelog)
}

/// Rows of a run written as one batch.
const RUN_BATCH_ROWS: usize = 4096;

/// Writes `changes` (sorted by image id) as an Arrow IPC stream: the samples' columns and
/// `diff`.
fn write_run(path: &Path, changes: &[(SampleRow, i8)]) -> Result<()> {
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut writer: Option<StreamWriter<BufWriter<File>>> = None;
    let mut file = Some(BufWriter::new(file));
    for batch in changes.chunks(RUN_BATCH_ROWS) {
        let rows: Vec<SampleRow> = batch.iter().map(|(s, _)| s.clone()).collect();
        let samples = rows_to_batch(&rows)?;
        let diffs: ArrayRef = Arc::new(Int8Array::from_iter_values(batch.iter().map(|c| c.1)));
        let mut columns = samples.columns().to_vec();
        columns.push(diffs);
        let schema = run_schema();
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)
            .map_err(|e| Error::arrow(format!("writing {}", path.display()), e))?;
        if writer.is_none() {
            if let Some(file) = file.take() {
                writer = Some(
                    StreamWriter::try_new(file, &schema)
                        .map_err(|e| Error::arrow(format!("writing {}", path.display()), e))?,
                );
            }
        }
        if let Some(writer) = writer.as_mut() {
            writer
                .write(&batch)
                .map_err(|e| Error::arrow(format!("writing {}", path.display()), e))?;
        }
    }
    if let Some(mut writer) = writer {
        writer
            .finish()
            .map_err(|e| Error::arrow(format!("writing {}", path.display()), e))?;
    }
    Ok(())
}

fn run_schema() -> arrow::datatypes::SchemaRef {
    let samples = TableKind::Samples.schema();
    let mut fields: Vec<Arc<arrow::datatypes::Field>> = samples.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new(
        "diff",
        arrow::datatypes::DataType::Int8,
        false,
    )));
    Arc::new(arrow::datatypes::Schema::new(fields))
}

/// Reads a run back one batch at a time.
struct RunReader {
    path: PathBuf,
    reader: Option<StreamReader<BufReader<File>>>,
    batch: std::vec::IntoIter<(SampleRow, i8)>,
    head: Option<(SampleRow, i8)>,
}

impl RunReader {
    fn open(path: &Path) -> Result<RunReader> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let reader = StreamReader::try_new(BufReader::new(file), None)
            .map_err(|e| Error::arrow(format!("reading {}", path.display()), e))?;
        Ok(RunReader {
            path: path.to_path_buf(),
            reader: Some(reader),
            batch: Vec::new().into_iter(),
            head: None,
        })
    }

    fn fill(&mut self) -> Result<()> {
        while self.head.is_none() {
            if let Some(change) = self.batch.next() {
                self.head = Some(change);
                return Ok(());
            }
            let Some(reader) = self.reader.as_mut() else {
                return Ok(());
            };
            let Some(batch) = reader.next() else {
                self.reader = None;
                return Ok(());
            };
            let batch =
                batch.map_err(|e| Error::arrow(format!("reading {}", self.path.display()), e))?;
            let width = batch.num_columns();
            let diffs = batch
                .column(width - 1)
                .as_any()
                .downcast_ref::<Int8Array>()
                .ok_or_else(|| Error::invalid(self.path.display().to_string(), "no diff column"))?
                .values()
                .to_vec();
            let projection: Vec<usize> = (0..width - 1).collect();
            let samples = batch
                .project(&projection)
                .map_err(|e| Error::arrow(format!("reading {}", self.path.display()), e))?;
            let samples =
                RecordBatch::try_new(TableKind::Samples.schema(), samples.columns().to_vec())
                    .map_err(|e| Error::arrow(format!("reading {}", self.path.display()), e))?;
            let rows = batch_to_rows::<SampleRow>(&samples)?;
            self.batch = rows.into_iter().zip(diffs).collect::<Vec<_>>().into_iter();
        }
        Ok(())
    }

    fn peek_id(&mut self) -> Result<Option<String>> {
        self.fill()?;
        Ok(self.head.as_ref().map(|(s, _)| s.image_id.clone()))
    }

    fn next_change(&mut self) -> Result<Option<(SampleRow, i8)>> {
        self.fill()?;
        Ok(self.head.take())
    }
}
