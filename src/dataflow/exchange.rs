//! Rows between workers and processes as Arrow record batches.
//!
//! A worker's readers produce typed rows; [`TableBatcher`] gathers them per table, turns every
//! [`EXCHANGE_BATCH_ROWS`] rows into one record batch of the table's spill schema (the table's
//! columns, then each row's read position), and cuts the batch by the worker that owns each
//! row's bucket with Arrow's `take` kernel. Each piece travels as a [`TableBatch`]: between
//! workers of one process as the batch itself, between processes as an Arrow IPC stream
//! ([`TableBatch`]'s serde form, which is what timely writes to the wire), and the receiving
//! worker appends it to its buckets' spill files ([`super::spill::BucketSpill::push_batch`])
//! without decoding it into rows.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use arrow::array::{Array, RecordBatch, StringArray, UInt32Array};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::runtime::KeyedRow;
use super::spill::encode;
use super::state::bucket_of;
use crate::error::{Error, Result};
use crate::schema::TableKind;

/// Rows of one table a worker's readers gather before they are cut by worker and sent.
pub const EXCHANGE_BATCH_ROWS: usize = 1024;

/// A batch of one table's rows on its way to worker `to`, in the table's spill schema.
#[derive(Clone, Debug)]
pub struct TableBatch {
    pub to: usize,
    pub table: TableKind,
    pub batch: RecordBatch,
    /// The batch as an Arrow IPC stream, encoded once when the batch leaves its process.
    ipc: OnceLock<Vec<u8>>,
}

impl TableBatch {
    pub fn new(to: usize, table: TableKind, batch: RecordBatch) -> TableBatch {
        TableBatch {
            to,
            table,
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
    pub fn from_ipc(to: usize, table: TableKind, bytes: &[u8]) -> Result<TableBatch> {
        let what = || format!("decoding a {} batch from Arrow IPC", table.name());
        let reader = StreamReader::try_new(bytes, None).map_err(|e| Error::arrow(what(), e))?;
        let mut batches = reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::arrow(what(), e))?;
        match (batches.pop(), batches.is_empty()) {
            (Some(batch), true) => Ok(TableBatch::new(to, table, batch)),
            _ => Err(Error::invalid(
                what(),
                "the stream holds more or less than one batch",
            )),
        }
    }
}

/// What crosses a process boundary: the destination worker, the table, and the Arrow IPC stream.
#[derive(Serialize, Deserialize)]
struct Wire<'a> {
    to: u32,
    table: TableKind,
    #[serde(borrow, with = "serde_bytes")]
    ipc: std::borrow::Cow<'a, [u8]>,
}

impl Serialize for TableBatch {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let ipc = self.ipc().map_err(serde::ser::Error::custom)?;
        Wire {
            to: self.to as u32,
            table: self.table,
            ipc: std::borrow::Cow::Borrowed(ipc),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TableBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        TableBatch::from_ipc(wire.to as usize, wire.table, &wire.ipc)
            .map_err(serde::de::Error::custom)
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
    buckets: usize,
    peers: usize,
    pending: BTreeMap<TableKind, Vec<KeyedRow>>,
}

impl TableBatcher {
    pub fn new(buckets: usize, peers: usize) -> TableBatcher {
        TableBatcher {
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
            .map(|(to, batch)| TableBatch::new(to, table, batch))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::Row;
    use crate::schema::CaptionRow;
    use timely::dataflow::channels::ContainerBytes;

    fn caption(image: &str, n: u64) -> KeyedRow {
        KeyedRow {
            unit: 1,
            ordinal: n,
            row: Row::Caption(CaptionRow {
                image_id: image.to_string(),
                caption_id: format!("{image}#{n}"),
                dataset: "test".into(),
                split: "train".into(),
                caption_index: n as i32,
                text: format!("caption {n} of {image}"),
            }),
        }
    }

    fn batches(rows: usize, peers: usize) -> Vec<TableBatch> {
        let mut batcher = TableBatcher::new(16, peers);
        let mut sent = Vec::new();
        for n in 0..rows as u64 {
            sent.extend(batcher.push(caption(&format!("img{}", n % 37), n)).unwrap());
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
    /// container): a count, then per batch the destination, the table and an Arrow IPC stream
    /// that any Arrow reader decodes.
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
            assert_eq!((a.to, a.table, &a.batch), (b.to, b.table, &b.batch));
        }
    }
}
