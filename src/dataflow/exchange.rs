//! Rows between workers and processes as Arrow record batches.
//!
//! A worker's readers produce typed rows; [`TableBatcher`] gathers them per table, turns every
//! [`EXCHANGE_BATCH_ROWS`] rows into one record batch of the table's spill schema (the table's
//! columns, then each row's read position), and cuts the batch by the worker that owns each
//! row's bucket with Arrow's `take` kernel. Each piece travels as a [`TableBatch`]: between
//! workers of one process as the batch itself, between processes as an Arrow IPC stream
//! ([`TableBatch`]'s serde form, which is what timely writes to the wire), and the receiving
//! worker appends it to its buckets' spill files ([`super::spill::BucketSpill::push_batch`])
//! without decoding it into rows. Each batch is a message of its own ([`EachBatch`]).

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::OnceLock;

use arrow::array::{Array, RecordBatch, StringArray, UInt32Array};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use timely::container::{
    CapacityContainerBuilder, ContainerBuilder, LengthPreservingContainerBuilder, PushInto,
};
use timely::dataflow::channels::pact::{Exchange, ExchangeCore};
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::Stream;
use timely::progress::Timestamp;

use super::runtime::KeyedRow;
use super::spill::encode;
use super::state::bucket_of;
use crate::error::{Error, Result};
use crate::schema::TableKind;

/// Rows of one table a worker's readers gather before they are cut by worker and sent.
pub const EXCHANGE_BATCH_ROWS: usize = 1024;

/// A batch of one table's rows on its way from worker `from` to worker `to`, in the table's
/// spill schema.
#[derive(Clone, Debug)]
pub struct TableBatch {
    pub from: usize,
    pub to: usize,
    pub table: TableKind,
    pub batch: RecordBatch,
    /// The batch's size in memory at its sender, which the sender counts as in flight
    /// ([`InFlight`]) until `to` has taken it.
    pub bytes: u64,
    /// The batch as an Arrow IPC stream, encoded once when the batch leaves its process.
    ipc: OnceLock<Vec<u8>>,
}

impl TableBatch {
    pub fn new(from: usize, to: usize, table: TableKind, batch: RecordBatch) -> TableBatch {
        TableBatch {
            from,
            to,
            table,
            bytes: batch.get_array_memory_size() as u64,
            batch,
            ipc: OnceLock::new(),
        }
    }

    /// The batch as an Arrow IPC stream (schema message, one record batch, end of stream).
    pub fn ipc(&self) -> Result<&[u8]> {
        if let Some(bytes) = self.ipc.get() {
            return Ok(bytes);
        }
        let what = || format!("encoding a {} batch as Arrow IPC", self.table.name());
        let mut bytes = Vec::new();
        let mut writer = StreamWriter::try_new(&mut bytes, &self.batch.schema())
            .map_err(|e| Error::arrow(what(), e))?;
        writer
            .write(&self.batch)
            .map_err(|e| Error::arrow(what(), e))?;
        writer.finish().map_err(|e| Error::arrow(what(), e))?;
        drop(writer);
        Ok(self.ipc.get_or_init(|| bytes))
    }

    /// The batch an Arrow IPC stream holds: exactly one record batch.
    fn from_wire(wire: Wire) -> Result<TableBatch> {
        let what = || format!("decoding a {} batch from Arrow IPC", wire.table.name());
        let reader =
            StreamReader::try_new(wire.ipc.as_ref(), None).map_err(|e| Error::arrow(what(), e))?;
        let mut batches = reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::arrow(what(), e))?;
        match (batches.pop(), batches.is_empty()) {
            (Some(batch), true) => Ok(TableBatch {
                from: wire.from as usize,
                to: wire.to as usize,
                table: wire.table,
                batch,
                bytes: wire.bytes,
                ipc: OnceLock::new(),
            }),
            _ => Err(Error::invalid(
                what(),
                "the stream holds more or less than one batch",
            )),
        }
    }
}

/// Builds the exchange's messages one [`TableBatch`] each. Timely's default builder gathers
/// records per destination worker until it holds a buffer's worth (8 KiB of them, about 80
/// batches) and ships them only then or when the epoch ends. A batch is already hundreds of rows,
/// so that was tens of megabytes of rows per destination that every worker held back while it
/// read: with two workers, more than the whole read phase of one.
#[derive(Default)]
pub struct EachBatch {
    ready: VecDeque<Vec<TableBatch>>,
    shipped: Vec<TableBatch>,
}

impl PushInto<TableBatch> for EachBatch {
    fn push_into(&mut self, batch: TableBatch) {
        self.ready.push_back(vec![batch]);
    }
}

impl ContainerBuilder for EachBatch {
    type Container = Vec<TableBatch>;

    fn extract(&mut self) -> Option<&mut Vec<TableBatch>> {
        self.shipped = self.ready.pop_front()?;
        Some(&mut self.shipped)
    }

    fn finish(&mut self) -> Option<&mut Vec<TableBatch>> {
        self.extract()
    }
}

impl LengthPreservingContainerBuilder for EachBatch {}

/// What a worker's reader has sent to other workers that they have not yet taken, in
/// [`TableBatch::bytes`]. Timely's channels have no bound: a reader that outruns a worker it
/// sends to (a worker reading a large file while another parses many small ones) would queue
/// its batches there, and between processes the receiving side's network buffers grow to the
/// largest such queue and stay that size. The reader waits while more than its window is in
/// flight ([`to_owners`] returns what was taken to the sender).
#[derive(Debug, Default)]
pub struct InFlight {
    sent: Cell<u64>,
    taken: Cell<u64>,
}

impl InFlight {
    /// Counts `batch` as in flight unless it stays with its sender.
    pub fn send(&self, batch: &TableBatch) {
        if batch.from != batch.to {
            self.sent.set(self.sent.get() + batch.bytes);
        }
    }

    /// Bytes sent and not yet taken.
    pub fn bytes(&self) -> u64 {
        self.sent.get() - self.taken.get()
    }

    fn taken(&self, bytes: u64) {
        self.taken.set(self.taken.get() + bytes);
    }
}

/// Sends each batch of `batches` to the worker it is addressed to, a message per batch
/// ([`EachBatch`]), and hands it to `receive` there; what each worker takes from another goes
/// back to the sender's `in_flight`. The stream it returns carries nothing; it is there to be
/// probed, and ends once every batch is taken and counted back.
pub fn to_owners<'scope, T: Timestamp>(
    batches: Stream<'scope, T, Vec<TableBatch>>,
    in_flight: Rc<InFlight>,
    mut receive: impl FnMut(TableBatch) + 'static,
) -> Stream<'scope, T, Vec<()>> {
    let pact = ExchangeCore::<EachBatch, _>::new_core(|batch: &TableBatch| batch.to as u64);
    batches
        .unary::<CapacityContainerBuilder<Vec<(usize, u64)>>, _, _, _>(pact, "ToOwners", |_, _| {
            move |input, output| {
                input.for_each(|time, batches| {
                    let mut taken = output.session(&time);
                    for batch in batches.drain(..) {
                        if batch.from != batch.to {
                            taken.give((batch.from, batch.bytes));
                        }
                        receive(batch);
                    }
                });
            }
        })
        .unary::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
            Exchange::new(|(from, _): &(usize, u64)| *from as u64),
            "Taken",
            |_, _| {
                move |input, _output| {
                    input.for_each(|_time, taken| {
                        for (_, bytes) in taken.drain(..) {
                            in_flight.taken(bytes);
                        }
                    });
                }
            },
        )
}

/// What crosses a process boundary: the destination and source workers, the size the sender
/// counts in flight, the table, and the Arrow IPC stream.
#[derive(Serialize, Deserialize)]
struct Wire<'a> {
    to: u32,
    from: u32,
    bytes: u64,
    table: TableKind,
    #[serde(borrow, with = "serde_bytes")]
    ipc: std::borrow::Cow<'a, [u8]>,
}

impl Serialize for TableBatch {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let ipc = self.ipc().map_err(serde::ser::Error::custom)?;
        Wire {
            to: self.to as u32,
            from: self.from as u32,
            bytes: self.bytes,
            table: self.table,
            ipc: std::borrow::Cow::Borrowed(ipc),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TableBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        TableBatch::from_wire(Wire::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// The worker owning each row's bucket: bucket `b` belongs to worker `b % peers`.
fn owners(batch: &RecordBatch, buckets: usize, peers: usize) -> Result<Vec<usize>> {
    let ids = image_ids(batch)?;
    Ok((0..ids.len())
        .map(|i| bucket_of(ids.value(i), buckets) % peers.max(1))
        .collect())
}

/// The `image_id` column of a batch of any table.
pub fn image_ids(batch: &RecordBatch) -> Result<&StringArray> {
    batch
        .column_by_name("image_id")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| Error::invalid("record batch", "it has no image_id column"))
}

/// `batch` cut by `keys` (one per row): the rows of each key, in their order in `batch`.
pub fn partition(batch: &RecordBatch, keys: &[usize]) -> Result<Vec<(usize, RecordBatch)>> {
    let mut rows: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for (row, key) in keys.iter().enumerate() {
        rows.entry(*key).or_default().push(row as u32);
    }
    if rows.len() == 1 {
        let key = keys[0];
        return Ok(vec![(key, batch.clone())]);
    }
    rows.into_iter()
        .map(|(key, indices)| {
            let taken = arrow::compute::take_record_batch(batch, &UInt32Array::from(indices))
                .map_err(|e| Error::arrow("cutting a batch by bucket", e))?;
            Ok((key, taken))
        })
        .collect()
}

/// A worker's readers' rows, gathered per table into batches cut by the worker that owns them.
pub struct TableBatcher {
    worker: usize,
    buckets: usize,
    peers: usize,
    pending: BTreeMap<TableKind, Vec<KeyedRow>>,
}

impl TableBatcher {
    pub fn new(worker: usize, buckets: usize, peers: usize) -> TableBatcher {
        TableBatcher {
            worker,
            buckets,
            peers,
            pending: BTreeMap::new(),
        }
    }

    /// Adds one row; returns the batches to send when its table has gathered a batch's worth.
    pub fn push(&mut self, keyed: KeyedRow) -> Result<Vec<TableBatch>> {
        let table = keyed.row.table();
        let pending = self.pending.entry(table).or_default();
        pending.push(keyed);
        if pending.len() < EXCHANGE_BATCH_ROWS {
            return Ok(Vec::new());
        }
        let rows = std::mem::take(pending);
        self.cut(table, rows)
    }

    /// The batches of every row still gathered.
    pub fn flush(&mut self) -> Result<Vec<TableBatch>> {
        let mut batches = Vec::new();
        for (table, rows) in std::mem::take(&mut self.pending) {
            if !rows.is_empty() {
                batches.extend(self.cut(table, rows)?);
            }
        }
        Ok(batches)
    }

    fn cut(&self, table: TableKind, rows: Vec<KeyedRow>) -> Result<Vec<TableBatch>> {
        let batch = encode(table, rows)?;
        let owners = owners(&batch, self.buckets, self.peers)?;
        Ok(partition(&batch, &owners)?
            .into_iter()
            .map(|(to, batch)| TableBatch::new(self.worker, to, table, batch))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::runtime::test_caption;
    use timely::dataflow::channels::ContainerBytes;

    fn batches(rows: usize, peers: usize) -> Vec<TableBatch> {
        let mut batcher = TableBatcher::new(0, 16, peers);
        let mut sent = Vec::new();
        for n in 0..rows as u64 {
            sent.extend(
                batcher
                    .push(test_caption(&format!("img{}", n % 37), n))
                    .unwrap(),
            );
        }
        sent.extend(batcher.flush().unwrap());
        sent
    }

    #[test]
    fn every_row_goes_to_the_worker_of_its_bucket_once() {
        let sent = batches(3000, 3);
        let mut seen = 0;
        for piece in &sent {
            let ids = image_ids(&piece.batch).unwrap();
            for i in 0..ids.len() {
                assert_eq!(bucket_of(ids.value(i), 16) % 3, piece.to);
            }
            seen += piece.batch.num_rows();
        }
        assert_eq!(seen, 3000);
    }

    /// What timely writes between processes for a container of batches (bincode of the
    /// container): a count, then per batch the destination and source workers, the bytes the
    /// sender counts in flight, the table and an Arrow IPC stream that any Arrow reader decodes.
    #[test]
    fn what_crosses_processes_is_arrow_ipc() {
        let sent = batches(1500, 2);
        let mut wire = Vec::new();
        sent.into_bytes(&mut wire);
        let mut at = 0usize;
        let mut take = |n: usize| {
            let bytes = &wire[at..at + n];
            at += n;
            bytes.to_vec()
        };
        let word = |bytes: Vec<u8>| u64::from_le_bytes(bytes.try_into().unwrap());
        let count = word(take(8)) as usize;
        assert_eq!(count, sent.len());
        let mut rows = 0;
        for piece in &sent {
            let to = u32::from_le_bytes(take(4).try_into().unwrap());
            assert_eq!(to as usize, piece.to);
            let from = u32::from_le_bytes(take(4).try_into().unwrap());
            assert_eq!(from as usize, piece.from);
            assert_eq!(word(take(8)), piece.bytes);
            let _table_tag = take(4);
            let length = word(take(8)) as usize;
            let ipc = take(length);
            let reader = StreamReader::try_new(ipc.as_slice(), None).unwrap();
            assert_eq!(
                reader.schema().field(0).name(),
                "image_id",
                "a captions batch starts with its image_id column"
            );
            for batch in reader {
                let batch = batch.unwrap();
                assert_eq!(batch, piece.batch);
                rows += batch.num_rows();
            }
        }
        assert_eq!(rows, 1500);
        let decoded =
            Vec::<TableBatch>::from_bytes(timely::bytes::arc::BytesMut::from(wire).freeze());
        assert_eq!(decoded.len(), sent.len());
        for (a, b) in decoded.iter().zip(&sent) {
            assert_eq!(
                (a.from, a.to, a.bytes, a.table, &a.batch),
                (b.from, b.to, b.bytes, b.table, &b.batch)
            );
        }
    }

    /// A batch reaches the worker it is addressed to while its epoch is still open (the
    /// exchange does not hold batches back until it has gathered a buffer's worth), and its
    /// sender counts it in flight until then.
    #[test]
    fn each_batch_reaches_its_worker_before_the_epoch_ends_and_is_counted_back() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        use timely::dataflow::operators::{Input, Probe};

        let sent = batches(3 * EXCHANGE_BATCH_ROWS, 1);
        assert_eq!(sent.len(), 3);
        let sent_bytes: u64 = sent
            .iter()
            .map(|b| b.batch.get_array_memory_size() as u64)
            .sum();
        let received = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&received);
        let outcomes = timely::execute(timely::Config::process(2), move |worker| {
            let index = worker.index();
            let mine = Arc::clone(&seen);
            let in_flight = Rc::new(InFlight::default());
            let mut input = timely::dataflow::InputHandle::<
                u64,
                CapacityContainerBuilder<Vec<TableBatch>>,
            >::new();
            let probe = worker.dataflow(|scope| {
                let batches = scope.input_from(&mut input);
                to_owners(batches, Rc::clone(&in_flight), move |batch: TableBatch| {
                    assert_eq!(batch.to, index);
                    mine.fetch_add(batch.batch.num_rows(), Ordering::SeqCst);
                })
                .probe()
                .0
            });
            if index == 0 {
                for batch in batches(3 * EXCHANGE_BATCH_ROWS, 1) {
                    let batch = TableBatch::new(0, 1, batch.table, batch.batch);
                    in_flight.send(&batch);
                    input.send(batch);
                }
                input.flush();
            }
            let after_sending = in_flight.bytes();
            // Both workers step, the epoch still open, until worker 1 has every row and
            // worker 0 has heard so.
            let started = std::time::Instant::now();
            let waited = std::time::Duration::from_secs(5);
            let done = |in_flight: &InFlight| {
                seen.load(Ordering::SeqCst) == 3 * EXCHANGE_BATCH_ROWS && in_flight.bytes() == 0
            };
            while !done(&in_flight) && started.elapsed() < waited {
                worker.step();
            }
            let outcome = (
                seen.load(Ordering::SeqCst),
                after_sending,
                in_flight.bytes(),
            );
            input.close();
            while !probe.done() {
                worker.step();
            }
            outcome
        })
        .unwrap()
        .join()
        .into_iter()
        .map(|outcome| outcome.unwrap())
        .collect::<Vec<_>>();
        assert_eq!(received.load(Ordering::SeqCst), 3 * EXCHANGE_BATCH_ROWS);
        let rows = 3 * EXCHANGE_BATCH_ROWS;
        assert_eq!(
            outcomes,
            [(rows, sent_bytes, 0), (rows, 0, 0)],
            "(rows at worker 1 while the epoch was open, bytes in flight after sending and \
             once taken) as each worker saw them"
        );
    }
}
