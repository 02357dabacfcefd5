//! Builds and runs the timely dataflow of a spec.
//!
//! Execution model: every worker reads the input units assigned to it (unit `i` goes to worker
//! `i % peers`), pushes each record into the dataflow tagged with its read position, and the
//! dataflow exchanges records by image key. What leaves the dataflow is sent over a channel to
//! the calling thread, which sorts by read position so that the result is the same for any
//! number of workers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::operators::vec::{Broadcast, Filter, Map};
use timely::dataflow::operators::{Exchange, Input, Probe};
use timely::dataflow::InputHandle;

use super::spec::DataflowSpec;
use super::state::bucket_of;
use super::ClusterOptions;
use crate::error::{Error, Result};
pub use crate::export::StageMetrics;
use crate::ingest::{read_input, Format, IngestCounts, RecordSink, Row};
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyedRow {
    pub unit: u32,
    pub ordinal: u64,
    pub row: Row,
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
}

/// Reads this worker's share of `units` (unit `i` on worker `i % peers`) into `input`, numbering
/// records by [`RecordNumbering`], and finishes the input.
pub(super) fn read_units<F: RowFeed>(
    units: &[InputUnit],
    worker: &mut timely::worker::Worker,
    mut input: F,
    observer: &mut dyn ReadObserver,
) -> Result<()> {
    let (index, peers) = (worker.index(), worker.peers());
    for (i, unit) in units.iter().enumerate() {
        if i % peers != index {
            continue;
        }
        let mut sink = DataflowSink {
            input: &mut input,
            worker: &mut *worker,
            observer: &mut *observer,
            unit: i as u32,
            numbering: RecordNumbering::new(unit.tables.as_deref()),
            rows: 0,
            stepped: Instant::now(),
        };
        let outcome = read_input(unit.format, &unit.path, &mut sink);
        let read = (sink.numbering.counts, sink.rows);
        observer.unit_read(outcome.map(|()| read));
    }
    input.finish()
}

/// Feeds one unit's records into the dataflow input and shows them to the observer.
struct DataflowSink<'a, F> {
    input: &'a mut F,
    worker: &'a mut timely::worker::Worker,
    observer: &'a mut dyn ReadObserver,
    unit: u32,
    numbering: RecordNumbering<'a>,
    rows: u64,
    stepped: Instant,
}

/// How often a reader lets the dataflow run: the batches other workers send it wait for that.
const STEP_EVERY: Duration = Duration::from_millis(2);

impl<F: RowFeed> RecordSink for DataflowSink<'_, F> {
    fn row(&mut self, row: Row) -> Result<()> {
        let Some(ordinal) = self.numbering.row(&row) else {
            return Ok(());
        };
        let keyed = KeyedRow {
            unit: self.unit,
            ordinal,
            row,
        };
        self.observer.row(&keyed)?;
        self.input.feed(keyed)?;
        self.rows += 1;
        // Let the dataflow drain now and then, so that what this reader sends and what others
        // send it is spilled as it comes, and until the feed may go on.
        if self.rows.is_multiple_of(64) && self.stepped.elapsed() >= STEP_EVERY {
            self.worker.step();
            self.stepped = Instant::now();
        }
        while self.input.held_back() {
            self.worker.step_or_park(Some(Duration::from_millis(1)));
        }
        Ok(())
    }

    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        let ordinal = self.numbering.reject();
        self.observer.rejected(self.unit, ordinal, rejected)
    }

    fn accepted(&mut self) -> Result<()> {
        self.numbering.accepted();
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
        if let Err(err) = read_units(&units, worker, input, &mut ChannelObserver(&messages)) {
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
