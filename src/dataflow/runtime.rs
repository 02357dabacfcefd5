//! Builds and runs the timely dataflow of a spec.
//!
//! Execution model: every worker reads the input units assigned to it (unit `i` goes to worker
//! `i % peers`), then joins the others on the units they all read together (a Flickr30k
//! Entities directory, whose images are claimed in blocks: [`SharedUnit`]); it pushes each
//! record into the dataflow tagged with its read position, and the dataflow exchanges records
//! by image key. What leaves the dataflow is sent over a channel to
//! the calling thread, which sorts by read position so that the result is the same for any
//! number of workers.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::operators::vec::{Broadcast, Filter, Map};
use timely::dataflow::operators::{Exchange, Input, Probe};
use timely::dataflow::InputHandle;

use super::inputs::PieceTally;
use super::spec::DataflowSpec;
use super::state::bucket_of;
use super::ClusterOptions;
use crate::amr::penman::BlockCursor;
use crate::error::{Error, Result};
pub use crate::export::StageMetrics;
use crate::ingest::flickr30k::{ListedImage, Listing};
use crate::ingest::{read_input_to_end, Format, IngestCounts, RecordSink, Row};
use crate::schema::{RejectedRow, TableKind};

/// The dataflow's input handle: rows with their read position, timestamped by a round number.
pub(super) type RowInput = InputHandle<u64, CapacityContainerBuilder<Vec<KeyedRow>>>;

/// Where a worker's readers put their rows.
pub(super) trait RowFeed {
    /// One row, in read order.
    fn feed(&mut self, keyed: KeyedRow) -> Result<()>;
    /// Every row is fed: hand on what is held and close the input.
    fn finish(self) -> Result<()>;
    /// Whether the reader should let the dataflow drain before it reads on.
    fn held_back(&self) -> bool {
        false
    }
}

impl RowFeed for RowInput {
    fn feed(&mut self, keyed: KeyedRow) -> Result<()> {
        self.send(keyed);
        Ok(())
    }

    fn finish(self) -> Result<()> {
        self.close();
        Ok(())
    }
}

/// A row with the position it was read at: input unit, then record ordinal within the unit.
///
/// The rows of the `i`-th image of a Flickr30k Entities directory (a [`SharedUnit`]) have
/// ordinals `i << 32 | k`, `k` numbering the image's records: the order of the directory read
/// whole, whichever worker reads which image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyedRow {
    pub unit: u32,
    pub ordinal: u64,
    pub row: Row,
}

/// Caption `n` of `image`, the `n`-th row read, for unit tests.
#[cfg(test)]
pub(crate) fn test_caption(image: &str, n: u64) -> KeyedRow {
    KeyedRow {
        unit: 1,
        ordinal: n,
        row: Row::Caption(crate::schema::CaptionRow {
            image_id: image.to_string(),
            caption_id: format!("{image}#{n}"),
            dataset: "test".into(),
            split: "train".into(),
            caption_index: n as i32,
            text: format!("caption {n} of {image}"),
        }),
    }
}

/// Everything a run produced, in deterministic order.
///
/// With several processes, `rows` holds the rows of the buckets this process owns and
/// `rejected` the records its workers rejected; `shared` holds every process's rows of the kinds
/// asked for by [`run_collect_sharing`] (what the corpus-level models are fitted on).
#[derive(Debug, Default)]
pub struct CollectedRun {
    /// Shared with the augment phase's workers without copying.
    pub rows: Vec<Arc<KeyedRow>>,
    pub shared: Vec<Arc<KeyedRow>>,
    pub rejected: Vec<(u32, u64, RejectedRow)>,
    pub counts: IngestCounts,
    pub stages: Vec<StageMetrics>,
}

enum WorkerMessage {
    Row(KeyedRow),
    Shared(KeyedRow),
    Rejected(u32, u64, RejectedRow),
    UnitDone { counts: IngestCounts, rows: u64 },
    Failed(Error),
}

/// One path of one input, read whole by one worker.
#[derive(Clone, Debug)]
pub(super) struct InputUnit {
    pub format: Format,
    pub path: PathBuf,
    /// Tables whose rows are kept (`None`: all).
    pub tables: Option<Vec<TableKind>>,
}

/// The spec's input units in order (unit `i` is read by worker `i % peers`), each checked to
/// exist.
pub(super) fn input_units(spec: &DataflowSpec) -> Result<Vec<InputUnit>> {
    let units: Vec<InputUnit> = spec
        .inputs
        .iter()
        .flat_map(|input| {
            input.paths.iter().map(|path| InputUnit {
                format: input.format,
                path: path.clone(),
                tables: input.tables.clone(),
            })
        })
        .collect();
    for unit in &units {
        if !unit.path.exists() {
            return Err(Error::io(
                &unit.path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the {} input does not exist", unit.format.name()),
                ),
            ));
        }
    }
    Ok(units)
}

/// How a reader's records are numbered and counted, by the dataflow's reader and by the piece
/// reader of `--state` runs alike (the ledger's order and the rows' order within an image rest on
/// it): a kept row and a rejected record each take the next ordinal; a row of a table the input
/// does not keep takes none.
pub(super) struct RecordNumbering<'a> {
    /// The next record's ordinal.
    pub ordinal: u64,
    pub counts: IngestCounts,
    tables: Option<&'a [TableKind]>,
}

impl<'a> RecordNumbering<'a> {
    pub fn new(tables: Option<&'a [TableKind]>) -> RecordNumbering<'a> {
        RecordNumbering {
            ordinal: 0,
            counts: IngestCounts::default(),
            tables,
        }
    }

    /// The ordinal of `row`, or `None` when its table is not kept.
    pub fn row(&mut self, row: &Row) -> Option<u64> {
        if self.tables.is_some_and(|t| !t.contains(&row.table())) {
            return None;
        }
        self.ordinal += 1;
        Some(self.ordinal - 1)
    }

    /// Advances past a record passed over unread ([`RecordSink::passed_over`]) as a row of
    /// `table` would.
    pub fn pass(&mut self, table: TableKind) {
        if self.tables.is_none_or(|t| t.contains(&table)) {
            self.ordinal += 1;
        }
    }

    /// The ordinal of a rejected record.
    pub fn reject(&mut self) -> u64 {
        self.counts.read += 1;
        self.counts.rejected += 1;
        self.ordinal += 1;
        self.ordinal - 1
    }

    pub fn accepted(&mut self) {
        self.counts.read += 1;
        self.counts.accepted += 1;
    }
}

/// What a worker's readers hand on besides the rows they feed into the dataflow.
pub(super) trait ReadObserver {
    /// A row of unit `keyed.unit`, just before it enters the dataflow.
    fn row(&mut self, _keyed: &KeyedRow) -> Result<()> {
        Ok(())
    }
    /// A record the reader rejected, with its read position.
    fn rejected(&mut self, unit: u32, ordinal: u64, row: RejectedRow) -> Result<()>;
    /// A unit read to its end (its counts and the rows it fed in), or the error that stopped it.
    fn unit_read(&mut self, outcome: Result<(IngestCounts, u64)>);
    /// Whether the observer records what each piece of the inputs held
    /// ([`piece_read`](Self::piece_read)).
    fn records_pieces(&self) -> bool {
        false
    }
    /// A piece of unit `unit` read to its end, and what the reader saw of it; only when
    /// [`records_pieces`](Self::records_pieces).
    fn piece_read(&mut self, _unit: u32, _piece: ReadPiece<'_>, _tally: PieceTally) -> Result<()> {
        Ok(())
    }
}

/// A piece of an input a reader has read ([`ReadObserver::piece_read`], see
/// [`super::inputs`]).
pub(super) enum ReadPiece<'a> {
    /// A unit read whole; for a PENMAN file, where the read ended and the next record's ordinal.
    Whole { end: Option<(BlockCursor, u64)> },
    /// The image at `position` of a directory's listing, read alone.
    Image {
        listing: &'a Listing,
        image: &'a ListedImage,
        position: u64,
    },
}

/// An input unit that every worker reads a share of: a Flickr30k Entities directory, listed
/// once per process, whose images the process's workers claim in blocks of
/// [`IMAGES_PER_CLAIM`] as they go, so that no worker waits while another still reads. Blocks
/// go to the processes in turn. Which worker reads an image changes nothing downstream: its rows
/// carry the image's position ([`KeyedRow`]), and what is gathered from them merges exactly.
pub(super) struct SharedUnit {
    listing: Listing,
    /// The number of blocks this process's workers have claimed.
    claimed: AtomicU64,
    process: u64,
    processes: u64,
}

/// Images a worker claims of a [`SharedUnit`] at a time.
const IMAGES_PER_CLAIM: u64 = 16;

impl SharedUnit {
    /// The positions of the next block of images for this process.
    fn claim(&self) -> Range<u64> {
        let local = self.claimed.fetch_add(1, Ordering::Relaxed);
        let block = local * self.processes + self.process;
        block * IMAGES_PER_CLAIM..(block + 1) * IMAGES_PER_CLAIM
    }
}

/// The [`SharedUnit`]s of a run, by unit index (`None` for the units one worker reads whole).
/// Their listings are let go once every worker of the process has read its share: a listing
/// holds every image of its directory (tens of MB at a million images), which the stages
/// after the read no longer need.
pub(super) struct SharedUnits {
    units: Mutex<Option<Arc<Vec<Option<SharedUnit>>>>>,
    /// This process's workers that have not yet finished reading.
    reading: AtomicUsize,
}

impl SharedUnits {
    /// Lists the units of `units` that are read together: Flickr30k Entities directories.
    pub fn list(units: &[InputUnit], cluster: &ClusterOptions) -> Result<Arc<SharedUnits>> {
        let shared = units
            .iter()
            .map(|unit| {
                let together = unit.format == Format::Flickr30kEntities && unit.path.is_dir();
                together
                    .then(|| {
                        Ok(SharedUnit {
                            listing: Listing::of(&unit.path, false)?,
                            claimed: AtomicU64::new(0),
                            process: cluster.process as u64,
                            processes: cluster.processes.max(1) as u64,
                        })
                    })
                    .transpose()
            })
            .collect::<Result<_>>()?;
        Ok(Arc::new(SharedUnits {
            units: Mutex::new(Some(Arc::new(shared))),
            reading: AtomicUsize::new(cluster.workers.max(1)),
        }))
    }

    /// How many images each unit read together has (`None` for a unit one worker reads whole).
    pub fn images(&self) -> Vec<Option<u64>> {
        let units = self.listed();
        units
            .iter()
            .map(|unit| (unit.as_ref()).map(|u| u.listing.slots().count() as u64))
            .collect()
    }

    /// The units while their listings are held (none once every worker has read).
    fn listed(&self) -> Arc<Vec<Option<SharedUnit>>> {
        self.units
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// The units for a worker that starts reading; every worker of the process takes them
    /// once, before it finishes, and hands them back when it has read its share.
    fn start_reading(&self) -> Reading<'_> {
        Reading {
            units: self.listed(),
            shared: self,
        }
    }
}

/// A worker's hold on the [`SharedUnits`] while it reads; the last one dropped lets the
/// listings go.
struct Reading<'a> {
    units: Arc<Vec<Option<SharedUnit>>>,
    shared: &'a SharedUnits,
}

impl Reading<'_> {
    fn get(&self, unit: usize) -> Option<&SharedUnit> {
        self.units.get(unit).and_then(Option::as_ref)
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        if self.shared.reading.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared
                .units
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
        }
    }
}

/// Reads this worker's share of `units` into `input`, numbering records by
/// [`RecordNumbering`], and finishes the input: the units it reads whole (unit `i` on worker
/// `i % peers`), then its share of every [`SharedUnit`].
pub(super) fn read_units<F: RowFeed>(
    units: &[InputUnit],
    shared: &SharedUnits,
    worker: &mut timely::worker::Worker,
    mut input: F,
    observer: &mut dyn ReadObserver,
) -> Result<()> {
    let (index, peers) = (worker.index(), worker.peers());
    let shared = shared.start_reading();
    for (i, unit) in units.iter().enumerate() {
        if shared.get(i).is_some() || i % peers != index {
            continue;
        }
        let mut read = DataflowSink::new(i, unit, observer.records_pieces());
        let mut feeding = read.feeding(&mut input, worker, observer);
        // A PENMAN file's read says where it ended, which a record of its piece keeps.
        let outcome = read_input_to_end(unit.format, &unit.path, &mut feeding);
        let outcome = outcome.and_then(|end| match read.tally.take() {
            Some(tally) => {
                let end = end.map(|cursor| (cursor, read.numbering.ordinal));
                observer.piece_read(i as u32, ReadPiece::Whole { end }, tally)
            }
            None => Ok(()),
        });
        observer.unit_read(outcome.map(|()| (read.numbering.counts, read.rows)));
    }
    for (i, unit) in units.iter().enumerate() {
        let Some(together) = shared.get(i) else {
            continue;
        };
        let mut read = DataflowSink::new(i, unit, observer.records_pieces());
        let outcome = read_share(together, &mut read, &mut input, worker, observer);
        observer.unit_read(outcome.map(|()| (read.numbering.counts, read.rows)));
    }
    input.finish()
}

/// Reads the images of `unit` this worker claims, each numbered from its position.
fn read_share<F: RowFeed>(
    unit: &SharedUnit,
    read: &mut DataflowSink,
    input: &mut F,
    worker: &mut timely::worker::Worker,
    observer: &mut dyn ReadObserver,
) -> Result<()> {
    let mut claimed = unit.claim();
    for (position, slot) in unit.listing.slots().enumerate() {
        let position = position as u64;
        while position >= claimed.end {
            claimed = unit.claim();
        }
        if position < claimed.start {
            continue;
        }
        read.base = position << 32;
        read.numbering.ordinal = 0;
        let image = unit.listing.image(slot);
        if let Some(tally) = read.tally.as_mut() {
            tally.stamp(&image);
        }
        let bytes =
            (unit.listing).read_image(&image, &mut read.feeding(input, worker, observer))?;
        if let Some(mut tally) = read.tally.replace(PieceTally::default()) {
            // Every file the tally stamped has a size ([`PieceTally::stamp`]).
            tally.hash_read(&bytes, std::iter::repeat(true));
            let piece = ReadPiece::Image {
                listing: &unit.listing,
                image: &image,
                position,
            };
            observer.piece_read(read.unit, piece, tally)?;
        }
    }
    Ok(())
}

/// Where a unit's records are: its numbering and how many rows it fed.
struct DataflowSink<'a> {
    unit: u32,
    /// Added to every ordinal: an image's position in a [`SharedUnit`], shifted.
    base: u64,
    numbering: RecordNumbering<'a>,
    rows: u64,
    stepped: Instant,
    /// What the piece being read holds, when the pieces are recorded.
    tally: Option<PieceTally>,
}

impl<'a> DataflowSink<'a> {
    fn new(index: usize, unit: &'a InputUnit, tally: bool) -> DataflowSink<'a> {
        DataflowSink {
            unit: index as u32,
            base: 0,
            numbering: RecordNumbering::new(unit.tables.as_deref()),
            rows: 0,
            stepped: Instant::now(),
            tally: tally.then(PieceTally::default),
        }
    }

    /// The [`RecordSink`] that feeds this unit's records into `input` and shows them to
    /// `observer`.
    fn feeding<'s, F>(
        &'s mut self,
        input: &'s mut F,
        worker: &'s mut timely::worker::Worker,
        observer: &'s mut dyn ReadObserver,
    ) -> Feeding<'s, 'a, F> {
        Feeding {
            read: self,
            input,
            worker,
            observer,
        }
    }
}

/// Feeds one unit's records into the dataflow input and shows them to the observer.
struct Feeding<'s, 'a, F> {
    read: &'s mut DataflowSink<'a>,
    input: &'s mut F,
    worker: &'s mut timely::worker::Worker,
    observer: &'s mut dyn ReadObserver,
}

/// How often a reader lets the dataflow run: the batches other workers send it wait for that.
const STEP_EVERY: Duration = Duration::from_millis(2);

impl<F: RowFeed> RecordSink for Feeding<'_, '_, F> {
    fn row(&mut self, row: Row) -> Result<()> {
        let read = &mut *self.read;
        let Some(ordinal) = read.numbering.row(&row) else {
            return Ok(());
        };
        let keyed = KeyedRow {
            unit: read.unit,
            ordinal: read.base + ordinal,
            row,
        };
        if let Some(tally) = read.tally.as_mut() {
            tally.row(keyed.row.image_id());
        }
        self.observer.row(&keyed)?;
        self.input.feed(keyed)?;
        read.rows += 1;
        // Let the dataflow drain now and then, so that what this reader sends and what others
        // send it is spilled as it comes, and until the feed may go on.
        if read.rows.is_multiple_of(64) && read.stepped.elapsed() >= STEP_EVERY {
            self.worker.step();
            read.stepped = Instant::now();
        }
        while self.input.held_back() {
            self.worker.step_or_park(Some(Duration::from_millis(1)));
        }
        Ok(())
    }

    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        let ordinal = self.read.numbering.reject();
        if let Some(tally) = self.read.tally.as_mut() {
            tally.rejected(ordinal, rejected.clone());
        }
        self.observer
            .rejected(self.read.unit, self.read.base + ordinal, rejected)
    }

    fn accepted(&mut self) -> Result<()> {
        self.read.numbering.accepted();
        if let Some(tally) = self.read.tally.as_mut() {
            tally.accepted();
        }
        Ok(())
    }
}

/// The read phase's observer: rejections, unit counts and failures go to the calling thread.
struct ChannelObserver<'a>(&'a crossbeam_channel::Sender<WorkerMessage>);

impl ReadObserver for ChannelObserver<'_> {
    fn rejected(&mut self, unit: u32, ordinal: u64, row: RejectedRow) -> Result<()> {
        self.0
            .send(WorkerMessage::Rejected(unit, ordinal, row))
            .map_err(|_| Error::Usage("run was cancelled".into()))
    }

    fn unit_read(&mut self, outcome: Result<(IngestCounts, u64)>) {
        let message = match outcome {
            Ok((counts, rows)) => WorkerMessage::UnitDone { counts, rows },
            Err(err) => WorkerMessage::Failed(err),
        };
        let _ = self.0.send(message);
    }
}

/// Runs the read → exchange part of `spec` on the configured workers and collects the rows.
///
/// Records are exchanged by the bucket of their image key (`output.buckets`): bucket `b` goes to
/// worker `b % peers`, so every bucket's rows meet in one process.
pub fn run_collect(spec: &DataflowSpec, cluster: &ClusterOptions) -> Result<CollectedRun> {
    run_collect_sharing(spec, cluster, None)
}

/// [`run_collect`], and with several processes every row `share` accepts is also sent to every
/// process (into [`CollectedRun::shared`]).
pub fn run_collect_sharing(
    spec: &DataflowSpec,
    cluster: &ClusterOptions,
    share: Option<fn(&Row) -> bool>,
) -> Result<CollectedRun> {
    let config = cluster.timely_config()?;
    let buckets = spec.output.buckets;
    let share = share.filter(|_| cluster.processes > 1);
    let local_workers = cluster.workers;
    let units = input_units(spec)?;
    let shared = SharedUnits::list(&units, cluster)?;
    let (sender, receiver) = crossbeam_channel::bounded::<WorkerMessage>(16 * 1024);
    let started = Instant::now();
    let connecting = super::cluster::Connecting::start(cluster, "read phase");
    let guards = timely::execute(config, move |worker| {
        let index = worker.index();
        let messages = sender.clone();
        let mut input = RowInput::new();
        let out = messages.clone();
        let probe = ProbeHandle::new();
        let shared_out = messages.clone();
        // The first worker of each process hands the shared rows to its process.
        let first_local = index % local_workers == 0;
        worker.dataflow(|scope| {
            let rows = scope.input_from(&mut input).container::<Vec<KeyedRow>>();
            if let Some(share) = share {
                rows.clone()
                    .filter(move |keyed: &KeyedRow| share(&keyed.row))
                    .broadcast()
                    .flat_map(move |keyed: KeyedRow| {
                        if first_local {
                            let _ = shared_out.send(WorkerMessage::Shared(keyed));
                        }
                        None::<()>
                    })
                    .probe_with(&probe);
            }
            rows.exchange(move |keyed: &KeyedRow| bucket_of(keyed.row.image_id(), buckets) as u64)
                .flat_map(move |keyed: KeyedRow| {
                    let _ = out.send(WorkerMessage::Row(keyed));
                    None::<()>
                })
                .probe_with(&probe);
        });
        let observer = &mut ChannelObserver(&messages);
        if let Err(err) = read_units(&units, &shared, worker, input, observer) {
            let _ = messages.send(WorkerMessage::Failed(err));
        }
        while !probe.done() {
            worker.step();
        }
    })
    .map_err(|e| Error::Config(format!("starting workers: {e}")))?;
    drop(connecting);

    let mut run = CollectedRun::default();
    let mut failures = Vec::new();
    let mut rows_read = 0u64;
    let progress = if crate::cli::progress::enabled() {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::hidden()
    };
    progress.set_message("reading inputs");
    for message in receiver.iter() {
        match message {
            WorkerMessage::Row(row) => {
                run.rows.push(Arc::new(row));
                if run.rows.len() % 10_000 == 0 {
                    progress.set_message(format!("{} rows", run.rows.len()));
                    progress.tick();
                }
            }
            WorkerMessage::Shared(row) => run.shared.push(Arc::new(row)),
            WorkerMessage::Rejected(unit, ordinal, rejected) => {
                run.rejected.push((unit, ordinal, rejected))
            }
            WorkerMessage::UnitDone { counts, rows } => {
                run.counts.add(counts);
                rows_read += rows;
            }
            WorkerMessage::Failed(reason) => failures.push(reason),
        }
    }
    progress.finish_and_clear();
    let joined = guards.join();
    for (i, result) in joined.into_iter().enumerate() {
        if let Err(reason) = result {
            failures.push(Error::Config(format!("worker {i} panicked: {reason}")));
        }
    }
    if let Some(first) = failures.into_iter().next() {
        return Err(first);
    }
    run.rows.sort_by_key(|r| (r.unit, r.ordinal));
    run.shared.sort_by_key(|r| (r.unit, r.ordinal));
    run.rejected.sort_by_key(|r| (r.0, r.1));
    run.stages.push(StageMetrics {
        name: "read".into(),
        rows_in: run.counts.read,
        rows_out: rows_read,
        rejected: run.counts.rejected,
        elapsed_ms: started.elapsed().as_millis() as u64,
    });
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec reading `captions.json` beside it, with `extra` appended to its input.
    fn spec(dir: &std::path::Path, extra: &str) -> DataflowSpec {
        let path = dir.join(format!("spec{}.toml", extra.len()));
        let text = format!(
            "name = \"tables\"\n[[inputs]]\nformat = \"coco-captions\"\npaths = [\"captions.json\"]\n{extra}\n"
        );
        std::fs::write(&path, text).unwrap();
        DataflowSpec::from_file(&path).unwrap()
    }

    #[test]
    fn an_input_keeps_only_its_listed_tables_but_reads_every_record() {
        let dir = tempfile::tempdir().unwrap();
        // 2 images, 3 annotations (the last one broken): 5 records.
        std::fs::write(
            dir.path().join("captions.json"),
            r#"{"images": [{"id": 1, "width": 4, "height": 3}, {"id": 2}],
                "annotations": [{"id": 10, "image_id": 1, "caption": "a dog"},
                                {"id": 11, "image_id": 2, "caption": "a cat"},
                                {"id": 12, "image_id": 2}]}"#,
        )
        .unwrap();
        let cluster = ClusterOptions::default();
        let all = run_collect(&spec(dir.path(), ""), &cluster).unwrap();
        let images_only =
            run_collect(&spec(dir.path(), "tables = [\"images\"]"), &cluster).unwrap();
        let tables = |run: &CollectedRun| -> Vec<TableKind> {
            run.rows.iter().map(|r| r.row.table()).collect()
        };
        assert_eq!(
            tables(&all),
            [
                TableKind::Images,
                TableKind::Images,
                TableKind::Captions,
                TableKind::Captions
            ]
        );
        assert_eq!(tables(&images_only), [TableKind::Images, TableKind::Images]);
        for run in [&all, &images_only] {
            assert_eq!(
                (run.counts.read, run.counts.accepted, run.counts.rejected),
                (5, 4, 1)
            );
            assert_eq!(run.rejected.len(), 1);
        }
    }

    /// A Flickr30k Entities directory is read by every worker together: each image once,
    /// its rows numbered from its position, so the rows and counts are those of one worker.
    #[test]
    fn workers_share_a_flickr_directory_image_by_image() {
        let dir = tempfile::tempdir().unwrap();
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/data/flickr30k_entities");
        let path = dir.path().join("spec.toml");
        std::fs::write(
            &path,
            format!(
                "name = \"t\"\n[[inputs]]\nformat = \"flickr30k-entities\"\npaths = [{:?}]\n",
                data.display().to_string()
            ),
        )
        .unwrap();
        let spec = DataflowSpec::from_file(&path).unwrap();
        let read = |workers| {
            let cluster = ClusterOptions {
                workers,
                ..ClusterOptions::default()
            };
            run_collect(&spec, &cluster).unwrap()
        };
        let one = read(1);
        let images: Vec<String> = std::fs::read_dir(data.join("Sentences"))
            .unwrap()
            .map(|e| {
                e.unwrap()
                    .path()
                    .file_stem()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(images.len(), 20);
        // Image i's rows: ordinals i << 32 | 0, 1, 2, ... in the order of the sorted ids.
        let mut sorted = images.clone();
        sorted.sort();
        let mut next = std::collections::HashMap::new();
        for row in &one.rows {
            let position = sorted
                .iter()
                .position(|id| id == row.row.image_id())
                .unwrap();
            let k = next.entry(position).or_insert(0u64);
            assert_eq!(row.ordinal, (position as u64) << 32 | *k, "{row:?}");
            *k += 1;
        }
        for workers in [2, 3] {
            let shared = read(workers);
            assert_eq!(shared.rows, one.rows, "{workers} workers");
            assert_eq!(shared.counts, one.counts, "{workers} workers");
        }
    }

    #[test]
    fn an_empty_table_list_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spec.toml");
        std::fs::write(
            &path,
            "name = \"t\"\n[[inputs]]\nformat = \"coco-captions\"\npaths = [\"c.json\"]\ntables = []\n",
        )
        .unwrap();
        let err = DataflowSpec::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("keeps no tables"), "{err}");
    }
}
