//! A run's rows on local disk, by bucket of the image key, as Arrow IPC.
//!
//! An image's rows come from several files (a Flickr30k caption file, its annotation file, an
//! AMR file holding every image's graphs), so none of an image's work can start before every
//! input is read. Rather than holding every row until then, the worker that owns a bucket
//! appends the bucket's rows to one Arrow IPC stream per table (batches of at most
//! [`SPILL_BATCH_ROWS`] rows, each row with its read position), and the bucket is later read
//! back in parts of bounded size ([`BucketSpill::parts`]): consecutive ranges of image ids that
//! end after a chunk's or a piece's last image ([`ends_chunk`], [`ends_piece`]), so every part
//! holds whole images, and a chunk larger than a part spreads over several.
//!
//! A run's changes (samples retracted and added) are spilled the same way, as runs sorted by
//! image id ([`write_changes`]), and merged into the changelog at the end ([`merge_changes`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use super::buckets::{ends_chunk, ends_piece};
use super::exchange::{image_ids, partition};
use super::runtime::KeyedRow;
use super::state::bucket_of;
use crate::error::{Error, Result};
use crate::export::changelog::{
    changelog_schema, changes_from_batch, changes_to_batch, BatchJoiner,
};
use crate::export::ChangelogWriter;
use crate::ingest::Row;
use crate::schema::{batch_to_rows, rows_to_batch, SampleRow, TableKind, TableRow};

/// Rows of one table buffered per bucket before they are written as one batch.
pub const SPILL_BATCH_ROWS: usize = 2048;

/// The read-position columns a spilled batch carries after its table's columns.
const UNIT_COLUMN: &str = "_capflow_unit";
const ORDINAL_COLUMN: &str = "_capflow_ordinal";

/// The schema of a spilled batch of `table`: the table's columns, then the read position.
fn spill_schema(table: TableKind) -> SchemaRef {
    let schema = table.schema();
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(UNIT_COLUMN, DataType::UInt32, false)));
    fields.push(Arc::new(Field::new(
        ORDINAL_COLUMN,
        DataType::UInt64,
        false,
    )));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Typed rows of one table as one spilled batch (read positions included).
pub(super) fn encode(table: TableKind, rows: Vec<KeyedRow>) -> Result<RecordBatch> {
    let units: ArrayRef = Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.unit)));
    let ordinals: ArrayRef = Arc::new(UInt64Array::from_iter_values(
        rows.iter().map(|r| r.ordinal),
    ));
    macro_rules! typed {
        ($variant:ident) => {{
            let typed: Vec<_> = rows
                .into_iter()
                .filter_map(|keyed| match keyed.row {
                    Row::$variant(row) => Some(row),
                    _ => None,
                })
                .collect();
            rows_to_batch(&typed)?
        }};
    }
    let batch = match table {
        TableKind::Images => typed!(Image),
        TableKind::Captions => typed!(Caption),
        TableKind::Groundings => typed!(Grounding),
        TableKind::Detections => typed!(Detection),
        TableKind::Amrs => typed!(Amr),
        TableKind::SceneGraphs => typed!(SceneGraph),
        TableKind::GbcGraphs => typed!(GbcGraph),
        TableKind::Samples => typed!(Sample),
        TableKind::Rejected => {
            return Err(Error::Usage("the rejected ledger is never spilled".into()))
        }
    };
    let mut columns = batch.columns().to_vec();
    columns.push(units);
    columns.push(ordinals);
    RecordBatch::try_new(spill_schema(table), columns)
        .map_err(|e| Error::arrow(format!("spilling {} rows", table.name()), e))
}

/// The rows of one spilled batch, with their read positions.
fn decode(table: TableKind, batch: &RecordBatch) -> Result<Vec<KeyedRow>> {
    let width = batch.num_columns();
    let column = |i: usize| batch.column(i).as_any();
    let (Some(units), Some(ordinals)) = (
        column(width - 2).downcast_ref::<UInt32Array>(),
        column(width - 1).downcast_ref::<UInt64Array>(),
    ) else {
        return Err(Error::invalid(
            format!("spilled {} batch", table.name()),
            "its read-position columns are missing",
        ));
    };
    let projection: Vec<usize> = (0..width - 2).collect();
    let rows = batch
        .project(&projection)
        .map_err(|e| Error::arrow(format!("reading spilled {} rows", table.name()), e))?;
    let rows = RecordBatch::try_new(table.schema(), rows.columns().to_vec())
        .map_err(|e| Error::arrow(format!("reading spilled {} rows", table.name()), e))?;
    fn typed<R: TableRow>(batch: &RecordBatch, wrap: fn(R) -> Row) -> Result<Vec<Row>> {
        Ok(batch_to_rows::<R>(batch)?.into_iter().map(wrap).collect())
    }
    let rows = match table {
        TableKind::Images => typed(&rows, Row::Image)?,
        TableKind::Captions => typed(&rows, Row::Caption)?,
        TableKind::Groundings => typed(&rows, Row::Grounding)?,
        TableKind::Detections => typed(&rows, Row::Detection)?,
        TableKind::Amrs => typed(&rows, Row::Amr)?,
        TableKind::SceneGraphs => typed(&rows, Row::SceneGraph)?,
        TableKind::GbcGraphs => typed(&rows, Row::GbcGraph)?,
        TableKind::Samples => typed(&rows, Row::Sample)?,
        TableKind::Rejected => Vec::new(),
    };
    Ok(rows
        .into_iter()
        .enumerate()
        .map(|(i, row)| KeyedRow {
            unit: units.value(i),
            ordinal: ordinals.value(i),
            row,
        })
        .collect())
}

/// One open Arrow IPC stream of spilled batches of one table.
pub(super) struct SpillFile {
    path: PathBuf,
    writer: StreamWriter<BufWriter<File>>,
}

impl SpillFile {
    pub(super) fn create(path: PathBuf, schema: &SchemaRef) -> Result<SpillFile> {
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let writer = StreamWriter::try_new(BufWriter::new(file), schema)
            .map_err(|e| Error::arrow(format!("creating {}", path.display()), e))?;
        Ok(SpillFile { path, writer })
    }

    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer
            .write(batch)
            .map_err(|e| Error::arrow(format!("writing {}", self.path.display()), e))
    }

    pub(super) fn finish(mut self) -> Result<PathBuf> {
        self.writer
            .finish()
            .map_err(|e| Error::arrow(format!("finishing {}", self.path.display()), e))?;
        Ok(self.path)
    }
}

/// Every batch of a spill file, one at a time.
pub(super) fn read_batches(
    path: &Path,
) -> Result<impl Iterator<Item = Result<RecordBatch>> + use<>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = StreamReader::try_new(BufReader::new(file), None)
        .map_err(|e| Error::arrow(format!("reading {}", path.display()), e))?;
    let what = path.display().to_string();
    Ok(reader.map(move |batch| batch.map_err(|e| Error::arrow(format!("reading {what}"), e))))
}

/// What is known of one bucket's spilled rows.
#[derive(Debug, Default)]
struct BucketFiles {
    /// The spill file of each table, open while rows arrive.
    open: BTreeMap<TableKind, SpillFile>,
    /// Rows waiting to be written, per table.
    pending: BTreeMap<TableKind, Pending>,
    /// Closed spill files, per table.
    files: BTreeMap<TableKind, PathBuf>,
    rows: u64,
    /// Encoded bytes written (the batches' Arrow memory size).
    bytes: u64,
    /// The image ids of the bucket a part may end after, each with whether it ends a chunk
    /// ([`ends_chunk`]) rather than only a piece ([`ends_piece`]).
    cuts: BTreeMap<String, bool>,
}

impl std::fmt::Debug for SpillFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillFile")
            .field("path", &self.path)
            .finish()
    }
}

/// Batches of one table of one bucket waiting to be written as one.
#[derive(Debug, Default)]
struct Pending {
    batches: Vec<RecordBatch>,
    rows: usize,
}

/// The rows of the buckets one worker owns, spilled to `dir`.
#[derive(Debug)]
pub struct BucketSpill {
    dir: PathBuf,
    chunk_images: usize,
    /// The run's bucket count.
    buckets: usize,
    files: BTreeMap<usize, BucketFiles>,
}

/// A part of a bucket: the rows of the images in `(after, through]` (either end open when
/// `None`), read back from the part's own spill files.
#[derive(Debug)]
pub struct BucketPart {
    pub bucket: usize,
    /// The part's index within its bucket, and how many parts the bucket has.
    pub index: usize,
    pub count: usize,
    /// The image ids the part covers: above `after`, up to and including `through`.
    pub after: Option<String>,
    pub through: Option<String>,
    files: BTreeMap<TableKind, PathBuf>,
    pub rows: u64,
}

impl BucketSpill {
    /// A spill into the existing directory `dir` for a run of `buckets` buckets whose chunks
    /// hold `chunk_images` images on average.
    pub fn new(dir: PathBuf, buckets: usize, chunk_images: usize) -> BucketSpill {
        BucketSpill {
            dir,
            chunk_images,
            buckets,
            files: BTreeMap::new(),
        }
    }

    /// Appends a batch of `table`'s rows in its spill schema ([`encode`]), each row to its
    /// bucket.
    pub fn push_batch(&mut self, table: TableKind, batch: &RecordBatch) -> Result<()> {
        let ids = image_ids(batch)?;
        let buckets: Vec<usize> = (0..ids.len())
            .map(|i| bucket_of(ids.value(i), self.buckets))
            .collect();
        for (i, bucket) in buckets.iter().enumerate() {
            let id = ids.value(i);
            let chunk_end = ends_chunk(id, self.chunk_images);
            if chunk_end || ends_piece(id, self.chunk_images) {
                let files = self.files.entry(*bucket).or_default();
                if !files.cuts.contains_key(id) {
                    files.cuts.insert(id.to_string(), chunk_end);
                }
            }
        }
        for (bucket, rows) in partition(batch, &buckets)? {
            let files = self.files.entry(bucket).or_default();
            files.rows += rows.num_rows() as u64;
            let pending = files.pending.entry(table).or_default();
            pending.rows += rows.num_rows();
            pending.batches.push(rows);
            if pending.rows >= SPILL_BATCH_ROWS {
                let pending = std::mem::take(pending);
                self.write(bucket, table, pending)?;
            }
        }
        Ok(())
    }

    fn write(&mut self, bucket: usize, table: TableKind, pending: Pending) -> Result<()> {
        let batch = arrow::compute::concat_batches(&spill_schema(table), &pending.batches)
            .map_err(|e| Error::arrow(format!("spilling {} rows", table.name()), e))?;
        let dir = self.dir.clone();
        let files = self.files.entry(bucket).or_default();
        files.bytes += batch.get_array_memory_size() as u64;
        let file = match files.open.entry(table) {
            std::collections::btree_map::Entry::Occupied(file) => file.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let path = dir.join(format!("b{bucket:05}-{}.arrows", table.name()));
                slot.insert(SpillFile::create(path, &spill_schema(table))?)
            }
        };
        file.write(&batch)
    }

    /// Writes what is pending and closes every spill file.
    pub fn finish(&mut self) -> Result<()> {
        let buckets: Vec<usize> = self.files.keys().copied().collect();
        for bucket in buckets {
            let pending = match self.files.get_mut(&bucket) {
                Some(files) => std::mem::take(&mut files.pending),
                None => continue,
            };
            for (table, rows) in pending {
                if rows.rows > 0 {
                    self.write(bucket, table, rows)?;
                }
            }
            if let Some(files) = self.files.get_mut(&bucket) {
                for (table, file) in std::mem::take(&mut files.open) {
                    files.files.insert(table, file.finish()?);
                }
            }
        }
        Ok(())
    }

    /// Rows spilled in all.
    pub fn rows(&self) -> u64 {
        self.files.values().map(|b| b.rows).sum()
    }

    /// Cuts bucket `bucket` into parts of at most about `part_bytes` encoded bytes each
    /// ([`split_points`]), and writes each part's spill files. A bucket that fits is one part
    /// and keeps its files; a bucket with no rows is one empty part. Call after
    /// [`BucketSpill::finish`].
    pub fn parts(&mut self, bucket: usize, part_bytes: u64) -> Result<Vec<BucketPart>> {
        let files = self.files.remove(&bucket).unwrap_or_default();
        let splits = if files.bytes > part_bytes && !files.cuts.is_empty() {
            let cuts: Vec<(String, bool)> = files.cuts.into_iter().collect();
            let sizes = cut_sizes(&files.files, &cuts)?;
            split_points(&cuts, &sizes, part_bytes)
        } else {
            Vec::new()
        };
        if splits.is_empty() {
            return Ok(vec![BucketPart {
                bucket,
                index: 0,
                count: 1,
                after: None,
                through: None,
                files: files.files,
                rows: files.rows,
            }]);
        }
        let count = splits.len() + 1;
        let mut parts: Vec<BucketPart> = (0..count)
            .map(|index| BucketPart {
                bucket,
                index,
                count,
                after: index.checked_sub(1).map(|i| splits[i].clone()),
                through: splits.get(index).cloned(),
                files: BTreeMap::new(),
                rows: 0,
            })
            .collect();
        for (table, path) in &files.files {
            let mut writers: Vec<Option<SpillFile>> = (0..count).map(|_| None).collect();
            for batch in read_batches(path)? {
                let batch = batch?;
                let part_of = part_indices(&batch, &splits)?;
                for (part, writer) in writers.iter_mut().enumerate() {
                    let mask = BooleanArray::from_iter(part_of.iter().map(|p| Some(*p == part)));
                    let rows = mask.true_count();
                    if rows == 0 {
                        continue;
                    }
                    let selected = arrow::compute::filter_record_batch(&batch, &mask)
                        .map_err(|e| Error::arrow(format!("cutting {}", path.display()), e))?;
                    if writer.is_none() {
                        let name = format!("b{bucket:05}-p{part:05}-{}.arrows", table.name());
                        let path = self.dir.join(name);
                        *writer = Some(SpillFile::create(path, &spill_schema(*table))?);
                    }
                    if let Some(file) = writer.as_mut() {
                        file.write(&selected)?;
                    }
                    parts[part].rows += rows as u64;
                }
            }
            for (part, writer) in writers.into_iter().enumerate() {
                if let Some(file) = writer {
                    parts[part].files.insert(*table, file.finish()?);
                }
            }
            std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
        }
        Ok(parts)
    }
}

/// Where to cut a bucket into parts of at most about `part_bytes`: the image ids that end
/// each part but the last, chosen from the bucket's `cuts` (in order, each with whether it ends
/// a chunk). `sizes[i]` is the bytes of the rows up to and including cut `i` and after the one
/// before; the last is those after the last cut. A part ends before the rows that would take it
/// over `part_bytes`: after the last chunk end it passed when that leaves it at least half
/// full, so that most chunks are written by the part that holds all of them, otherwise after
/// the cut before those rows. Rows between two cuts are never split, so a part is larger than
/// `part_bytes` only when such rows are.
fn split_points(cuts: &[(String, bool)], sizes: &[u64], part_bytes: u64) -> Vec<String> {
    let part_bytes = part_bytes.max(1);
    let mut splits = Vec::new();
    // Bytes in the part being planned, and its last chunk end with the bytes up to it.
    let mut held = 0;
    let mut chunk_end: Option<(usize, u64)> = None;
    for (i, &size) in sizes.iter().enumerate() {
        if held > 0 && held + size > part_bytes {
            match chunk_end.take() {
                Some((end, at)) if 2 * at >= part_bytes => {
                    splits.push(cuts[end].0.clone());
                    held -= at;
                }
                _ => {
                    splits.push(cuts[i - 1].0.clone());
                    held = 0;
                }
            }
        }
        held += size;
        if cuts.get(i).is_some_and(|(_, ends_chunk)| *ends_chunk) {
            chunk_end = Some((i, held));
        }
    }
    splits
}

/// The bytes of a bucket's spilled rows between each two of its `cuts` ([`split_points`]),
/// read from its spill files: each row counts as its batch's Arrow bytes shared over its rows.
fn cut_sizes(files: &BTreeMap<TableKind, PathBuf>, cuts: &[(String, bool)]) -> Result<Vec<u64>> {
    let ids: Vec<String> = cuts.iter().map(|(id, _)| id.clone()).collect();
    let mut sizes = vec![0u64; cuts.len() + 1];
    for path in files.values() {
        for batch in read_batches(path)? {
            let batch = batch?;
            let rows = batch.num_rows() as u64;
            // Batches read back share their message's buffers: count only their own bytes.
            let mut bytes = 0;
            for column in batch.columns() {
                let data = column.to_data();
                bytes += data
                    .get_slice_memory_size()
                    .map_err(|e| Error::arrow(format!("sizing {}", path.display()), e))?
                    as u64;
            }
            let mut counts = vec![0u64; sizes.len()];
            for between in part_indices(&batch, &ids)? {
                counts[between] += 1;
            }
            for (size, count) in sizes.iter_mut().zip(counts) {
                *size += (bytes * count).div_ceil(rows.max(1));
            }
        }
    }
    Ok(sizes)
}

/// The part of every row of a spilled batch: the number of split points below its image id.
fn part_indices(batch: &RecordBatch, splits: &[String]) -> Result<Vec<usize>> {
    let ids = image_ids(batch)?;
    Ok((0..ids.len())
        .map(|i| splits.partition_point(|split| split.as_str() < ids.value(i)))
        .collect())
}

impl BucketPart {
    /// Whether `image_id` falls in the part's range.
    pub fn covers(&self, image_id: &str) -> bool {
        self.after.as_deref().is_none_or(|after| image_id > after)
            && self
                .through
                .as_deref()
                .is_none_or(|through| image_id <= through)
    }

    /// The part's rows, each table's sorted by image id and then read position; removes its
    /// files.
    pub fn read(self) -> Result<PartRows> {
        let rows = self.peek()?;
        for path in self.files.values() {
            std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
        }
        Ok(rows)
    }

    /// [`read`](Self::read), keeping the files for a later read.
    pub fn peek(&self) -> Result<PartRows> {
        let mut tables = Vec::with_capacity(self.files.len());
        for (table, path) in &self.files {
            let batches = read_batches(path)?.collect::<Result<Vec<RecordBatch>>>()?;
            let what = || format!("sorting spilled {} rows", table.name());
            let batch = arrow::compute::concat_batches(&spill_schema(*table), &batches)
                .map_err(|e| Error::arrow(what(), e))?;
            drop(batches);
            let width = batch.num_columns();
            let ids: ArrayRef = Arc::new(image_ids(&batch)?.clone());
            let keys: Vec<arrow::compute::SortColumn> = [
                ids,
                batch.column(width - 2).clone(),
                batch.column(width - 1).clone(),
            ]
            .into_iter()
            .map(|values| arrow::compute::SortColumn {
                values,
                options: None,
            })
            .collect();
            let order = arrow::compute::lexsort_to_indices(&keys, None)
                .map_err(|e| Error::arrow(what(), e))?;
            let sorted = arrow::compute::take_record_batch(&batch, &order)
                .map_err(|e| Error::arrow(what(), e))?;
            tables.push((*table, sorted));
        }
        Ok(PartRows { tables })
    }
}

/// The rows of a bucket part: per table, one batch of its spill schema sorted by image id and
/// then read position (input unit, record).
#[derive(Debug, Default)]
pub struct PartRows {
    tables: Vec<(TableKind, RecordBatch)>,
}

impl PartRows {
    /// The part's image ids over all tables, in order.
    pub fn image_ids(&self) -> Result<Vec<String>> {
        let mut ids: BTreeSet<&str> = BTreeSet::new();
        for (_, batch) in &self.tables {
            let column = image_ids(batch)?;
            for i in 0..column.len() {
                if i == 0 || column.value(i - 1) != column.value(i) {
                    ids.insert(column.value(i));
                }
            }
        }
        Ok(ids.into_iter().map(str::to_string).collect())
    }

    /// The Arrow memory the part's rows take.
    pub fn bytes(&self) -> u64 {
        self.tables
            .iter()
            .map(|(_, batch)| batch.get_array_memory_size() as u64)
            .sum()
    }

    /// The tables the part has rows of.
    pub fn tables(&self) -> impl Iterator<Item = TableKind> + '_ {
        self.tables.iter().map(|(table, _)| *table)
    }

    /// Every table's rows as typed rows, in the order they are held.
    pub fn typed(&self) -> Result<Vec<(TableKind, Vec<KeyedRow>)>> {
        self.tables
            .iter()
            .map(|(table, batch)| Ok((*table, decode(*table, batch)?)))
            .collect()
    }

    /// The part's images cut into consecutive ranges `(first, last)` of whole images, as many
    /// as it takes for each to hold about `max_bytes` of the part's Arrow data at most (a range
    /// holds at least one image; a part without images has no range). A part's size is an
    /// estimate from the number of cut points it spans ([`split_points`]); ranges keep what the
    /// stages, which take a range at a time, hold within the budget when a part comes out larger.
    pub fn image_ranges(&self, max_bytes: u64) -> Result<Vec<(String, String)>> {
        let ids = self.image_ids()?;
        let count = self
            .bytes()
            .div_ceil(max_bytes.max(1))
            .clamp(1, ids.len().max(1) as u64) as usize;
        let ranges = (0..count)
            .map(|i| (i * ids.len() / count, (i + 1) * ids.len() / count))
            .filter(|(start, end)| start < end)
            .map(|(start, end)| (ids[start].clone(), ids[end - 1].clone()))
            .collect();
        Ok(ranges)
    }

    /// The rows of the images in `first..=last` of every table, as typed rows in the order
    /// they are held.
    pub fn typed_range(&self, first: &str, last: &str) -> Result<Vec<(TableKind, Vec<KeyedRow>)>> {
        let mut typed = Vec::with_capacity(self.tables.len());
        for (table, _) in &self.tables {
            if let Some(rows) = self.rows_between(*table, first, last)? {
                typed.push((*table, decode(*table, &rows)?));
            }
        }
        Ok(typed)
    }

    /// The rows of `table` whose image ids lie in `first..=last`, in `table`'s own schema
    /// (without the read positions); `None` when there are none.
    pub fn slice(&self, table: TableKind, first: &str, last: &str) -> Result<Option<RecordBatch>> {
        let Some(rows) = self.rows_between(table, first, last)? else {
            return Ok(None);
        };
        let columns = rows.columns()[..rows.num_columns() - 2].to_vec();
        RecordBatch::try_new(table.schema(), columns)
            .map(Some)
            .map_err(|e| Error::arrow(format!("writing {} rows", table.name()), e))
    }

    /// The rows of `table` whose image ids lie in `first..=last`, in the spill schema.
    fn rows_between(
        &self,
        table: TableKind,
        first: &str,
        last: &str,
    ) -> Result<Option<RecordBatch>> {
        let Some((_, batch)) = self.tables.iter().find(|(t, _)| *t == table) else {
            return Ok(None);
        };
        let ids = image_ids(batch)?;
        let bound = |below: &dyn Fn(&str) -> bool| {
            let (mut low, mut high) = (0, ids.len());
            while low < high {
                let middle = (low + high) / 2;
                if below(ids.value(middle)) {
                    low = middle + 1;
                } else {
                    high = middle;
                }
            }
            low
        };
        let start = bound(&|id| id < first);
        let end = bound(&|id| id <= last);
        Ok((start < end).then(|| batch.slice(start, end - start)))
    }
}

/// Changes written as one batch of a run: a merge holds one batch per run it reads.
const RUN_BATCH_ROWS: usize = 1024;

/// The most runs merged at once; more runs are first merged in groups of this many, so a merge
/// holds at most this many batches whatever the number of runs.
const MERGE_FAN_IN: usize = 64;

/// A run of changes being written: an Arrow IPC stream of the changelog's schema, the changes
/// appended in image-id order.
pub struct ChangesWriter {
    file: SpillFile,
    pending: Vec<(SampleRow, i8)>,
}

impl ChangesWriter {
    pub fn create(path: &Path) -> Result<ChangesWriter> {
        Ok(ChangesWriter {
            file: SpillFile::create(path.to_path_buf(), &changelog_schema())?,
            pending: Vec::new(),
        })
    }

    pub fn push(&mut self, sample: SampleRow, diff: i8) -> Result<()> {
        self.pending.push((sample, diff));
        if self.pending.len() >= RUN_BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            let batch = changes_to_batch(&self.pending)?;
            self.pending.clear();
            self.file.write(&batch)?;
        }
        Ok(())
    }

    /// Closes the run; returns its path.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.flush()?;
        self.file.finish()
    }
}

/// Writes `changes` (sorted by image id) as one run.
pub fn write_changes(path: &Path, changes: &[(SampleRow, i8)]) -> Result<()> {
    let mut run = ChangesWriter::create(path)?;
    for (sample, diff) in changes {
        run.push(sample.clone(), *diff)?;
    }
    run.finish()?;
    Ok(())
}

/// Every change of a run written by [`write_changes`], in its order.
pub fn read_changes(path: &Path) -> Result<Vec<(SampleRow, i8)>> {
    let what = path.display().to_string();
    let mut changes = Vec::new();
    for batch in read_batches(path)? {
        changes.extend(changes_from_batch(&batch?, &what)?);
    }
    Ok(changes)
}

/// Merged batches of changes in flight between the merge and the changelog's writer.
const MERGED_IN_FLIGHT: usize = 4;

/// Merges runs of changes, each sorted by image id and holding every change of its images,
/// into `into` by image id; removes the runs. The changes stay Arrow (slices of the runs'
/// batches, joined into batches of a run's size), and the runs are merged on a thread of their
/// own while `into` encodes the batches merged so far and joins them into the changelog's.
/// The batches that cross between the threads are small, which keeps the commit's peak below
/// the stages' (`docs/decisions/0003-typed-rows.md`). Beyond [`MERGE_FAN_IN`] runs, groups of
/// runs are merged into runs of their own first (next to the group's first run).
pub fn merge_changes(runs: &[PathBuf], into: &mut ChangelogWriter) -> Result<()> {
    let (merged, batches) = crossbeam_channel::bounded::<RecordBatch>(MERGED_IN_FLIGHT);
    std::thread::scope(|scope| {
        let merging = std::thread::Builder::new()
            .name("capflow-merge".into())
            .spawn_scoped(scope, move || {
                merge_all(runs, RUN_BATCH_ROWS, |batch| {
                    // Only when the writer stopped: its own error is the one returned.
                    merged.send(batch).map_err(|_| {
                        Error::invalid("the changelog", "its writer stopped before the merge")
                    })
                })
            })
            .map_err(|e| Error::Config(format!("starting the merge of the changes: {e}")))?;
        let written = batches.iter().try_for_each(|batch| into.push_batch(&batch));
        drop(batches);
        let merged = merging
            .join()
            .unwrap_or_else(|_| Err(Error::invalid("the changelog", "its merge panicked")));
        written.and(merged)
    })
}

/// Merges `runs` by image id into batches of `batch_rows` rows (the last one fewer) handed to
/// `emit`, in rounds of at most [`MERGE_FAN_IN`] runs; removes the runs.
fn merge_all(
    runs: &[PathBuf],
    batch_rows: usize,
    emit: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let mut runs = runs.to_vec();
    let mut round = 0;
    while runs.len() > MERGE_FAN_IN {
        let mut merged = Vec::new();
        for (group, paths) in runs.chunks(MERGE_FAN_IN).enumerate() {
            let path = paths[0].with_file_name(format!("merged-{round}-{group:06}.arrows"));
            let mut run = SpillFile::create(path, &changelog_schema())?;
            merge_runs(paths, RUN_BATCH_ROWS, |batch| run.write(&batch))?;
            merged.push(run.finish()?);
        }
        runs = merged;
        round += 1;
    }
    merge_runs(&runs, batch_rows, emit)
}

/// Merges `runs` by image id into batches of `batch_rows` rows (the last one fewer) handed to
/// `emit`; removes the runs.
fn merge_runs(
    runs: &[PathBuf],
    batch_rows: usize,
    mut emit: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let mut cursors: Vec<RunCursor> = runs
        .iter()
        .map(|path| RunCursor::open(path))
        .collect::<Result<_>>()?;
    let mut out = BatchJoiner::new(changelog_schema(), batch_rows);
    // Every image's changes are in one run, so taking rows in (image id, run) order keeps each
    // image's changes together and in their run's order: the run with the least head gives
    // every row that comes before the next run's head.
    while let Some((first, next)) = least_two(&cursors) {
        let bound = next.map(|next| (cursors[next].head().to_owned(), first < next));
        let bound = bound.as_ref().map(|(id, first)| (id.as_str(), *first));
        let slice = cursors[first].take_before(bound)?;
        out.push(slice, &mut emit)?;
    }
    out.finish(&mut emit)?;
    for path in runs {
        std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// The run with the least head, in (image id, run) order, and the run with the next one;
/// `None` when every run is read.
fn least_two(cursors: &[RunCursor]) -> Option<(usize, Option<usize>)> {
    let mut least: Option<(usize, Option<usize>)> = None;
    for (i, cursor) in cursors.iter().enumerate() {
        if cursor.is_done() {
            continue;
        }
        let id = cursor.head();
        least = Some(match least {
            None => (i, None),
            Some((first, _)) if id < cursors[first].head() => (i, Some(first)),
            Some((first, Some(next))) if id >= cursors[next].head() => (first, Some(next)),
            Some((first, _)) => (first, Some(i)),
        });
    }
    least
}

/// A run of changes read back a batch at a time, with the image ids of the batch being read.
struct RunCursor {
    what: String,
    batches: Box<dyn Iterator<Item = Result<RecordBatch>>>,
    /// The batch being read and its image ids; `None` once the run is read.
    current: Option<(RecordBatch, arrow::array::StringArray)>,
    /// The next row of the current batch.
    row: usize,
}

impl RunCursor {
    fn open(path: &Path) -> Result<RunCursor> {
        let mut cursor = RunCursor {
            what: path.display().to_string(),
            batches: Box::new(read_batches(path)?),
            current: None,
            row: 0,
        };
        cursor.read_on()?;
        Ok(cursor)
    }

    /// Moves to the run's next batch with rows, or to its end.
    fn read_on(&mut self) -> Result<()> {
        let schema = changelog_schema();
        self.current = None;
        self.row = 0;
        for batch in self.batches.by_ref() {
            let batch = batch?;
            if batch.schema().fields() != schema.fields() {
                return Err(Error::invalid(
                    &self.what,
                    "not a run of changes: its columns are not the changelog's",
                ));
            }
            if batch.num_rows() > 0 {
                let ids = image_ids(&batch)?.clone();
                self.current = Some((batch, ids));
                break;
            }
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.current.is_none()
    }

    /// The image id of the next row; the run must not be read to its end.
    fn head(&self) -> &str {
        let (_, ids) = self.current.as_ref().expect("a run with rows left");
        ids.value(self.row)
    }

    /// The next rows of the current batch whose image ids come before `bound` (an image id,
    /// and whether that id's own rows come before it too), at least the next row; reads on
    /// when they end the batch.
    fn take_before(&mut self, bound: Option<(&str, bool)>) -> Result<RecordBatch> {
        let (batch, ids) = self.current.as_ref().expect("a run with rows left");
        let before =
            |id: &str| bound.is_none_or(|(bound, ties)| id < bound || (ties && id == bound));
        let end = (self.row + 1..ids.len())
            .find(|&row| !before(ids.value(row)))
            .unwrap_or(ids.len());
        let slice = batch.slice(self.row, end - self.row);
        if end == ids.len() {
            self.read_on()?;
        } else {
            self.row = end;
        }
        Ok(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::CaptionRow;

    fn caption(image: &str, n: u64) -> KeyedRow {
        KeyedRow {
            unit: (n % 3) as u32,
            ordinal: n,
            row: Row::Caption(CaptionRow {
                caption_id: format!("{image}#{n}"),
                image_id: image.to_string(),
                dataset: "test".into(),
                split: "train".into(),
                caption_index: n as i32,
                text: format!("caption {n} of {image}"),
            }),
        }
    }

    use crate::export::changelog::test_sample as sample;

    #[test]
    fn more_runs_than_the_fan_in_merge_by_image_id() {
        let dir = tempfile::tempdir().unwrap();
        // 150 runs; run r holds images r, r + 150, ... with two changes each.
        let runs: Vec<PathBuf> = (0..150)
            .map(|r| {
                let path = dir.path().join(format!("run-{r}.arrows"));
                let changes: Vec<(SampleRow, i8)> = (0..20)
                    .flat_map(|k| {
                        let image = format!("img{:06}", r + 150 * k);
                        [(sample(&image, 0), -1), (sample(&image, 1), 1)]
                    })
                    .collect();
                write_changes(&path, &changes).unwrap();
                path
            })
            .collect();
        let mut merged = Vec::new();
        let mut batches = Vec::new();
        merge_all(&runs, 1000, |batch| {
            batches.push(batch.num_rows());
            for (sample, diff) in changes_from_batch(&batch, "merged").unwrap() {
                merged.push((sample.image_id, sample.text, diff));
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(merged.len(), 150 * 20 * 2);
        assert_eq!(batches, [1000; 6], "batches of the rows asked for");
        for (i, pair) in merged.chunks(2).enumerate() {
            let image = format!("img{i:06}");
            assert_eq!(pair[0], (image.clone(), format!("sample 0 of {image}"), -1));
            assert_eq!(pair[1], (image.clone(), format!("sample 1 of {image}"), 1));
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "runs left behind"
        );
    }

    /// Changes of images `images` in run order: image `i` gets `i % 7 + 1` changes, the first
    /// a retraction.
    fn changes_of(images: impl Iterator<Item = usize>) -> Vec<(SampleRow, i8)> {
        images
            .flat_map(|i| {
                let image = format!("img{i:06}");
                (0..i % 7 + 1).map(move |n| (sample(&image, n), if n == 0 { -1 } else { 1 }))
            })
            .collect()
    }

    #[test]
    fn merged_runs_write_the_changelog_their_changes_write_in_image_order() {
        let dir = tempfile::tempdir().unwrap();
        let settings = crate::export::shard::ShardSettings {
            config_hash: "test".into(),
            shard_bytes: 1 << 30,
            max_row_group_rows: 1 << 20,
            max_row_group_bytes: 1 << 30,
            zstd_level: 3,
        };
        // Runs of uneven sizes: run 0 holds a long stretch of images alone (whole batches of
        // it come before any other run's), runs 1–3 take turns image by image, and an image's
        // changes cross the runs' 1024-row batches.
        let assignment = |i: usize| match i {
            0..2000 => 0,
            _ => 1 + i % 3,
        };
        let mut runs = Vec::new();
        for run in 0..4 {
            let path = dir.path().join(format!("b{run:05}.arrows"));
            let images = (0..5000).filter(|&i| assignment(i) == run);
            write_changes(&path, &changes_of(images)).unwrap();
            runs.push(path);
        }
        let staged = |name: &str| {
            let staging = dir.path().join(name);
            std::fs::create_dir(&staging).unwrap();
            staging
        };
        let expected = staged("rows");
        let all = changes_of(0..5000);
        assert!(all.len() > 2 * crate::export::changelog::CHANGELOG_BATCH_ROWS);
        crate::export::changelog::stage_changelog(&expected, &settings, &all).unwrap();
        let merged = staged("merged");
        let mut writer = ChangelogWriter::create(&merged, &settings).unwrap();
        merge_changes(&runs, &mut writer).unwrap();
        let staged = writer.finish().unwrap();
        assert!(!staged.is_empty());
        let bytes = |dir: &Path| std::fs::read(dir.join("changelog.parquet")).unwrap();
        assert!(bytes(&merged) == bytes(&expected), "the changelogs differ");
        assert!(runs.iter().all(|run| !run.exists()), "runs left behind");
    }

    #[test]
    fn a_run_that_is_not_of_changes_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b00000.arrows");
        let mut file = SpillFile::create(path.clone(), &TableKind::Captions.schema()).unwrap();
        let captions = rows_to_batch(&[crate::schema::CaptionRow {
            caption_id: "a#0".into(),
            image_id: "a".into(),
            dataset: "test".into(),
            split: "train".into(),
            caption_index: 0,
            text: "a caption".into(),
        }])
        .unwrap();
        file.write(&captions).unwrap();
        file.finish().unwrap();
        let error = merge_all(std::slice::from_ref(&path), 10, |_| Ok(())).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("b00000.arrows"), "{message}");
        assert!(message.contains("not a run of changes"), "{message}");
    }

    #[test]
    fn parts_end_at_cuts_and_hold_every_row_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("spill")).unwrap();
        // One bucket, so that every row lands in bucket 0; batches of 100 rows, as readers send.
        let mut spill = BucketSpill::new(dir.path().join("spill"), 1, 64);
        let mut pushed = Vec::new();
        let mut rows = Vec::new();
        for n in 0..6000u64 {
            let image = format!("img{:05}", (n * 7919) % 1500);
            let row = caption(&image, n);
            pushed.push((image, row.unit, row.ordinal));
            rows.push(row);
            if rows.len() == 100 {
                let batch = encode(TableKind::Captions, std::mem::take(&mut rows)).unwrap();
                spill.push_batch(TableKind::Captions, &batch).unwrap();
            }
        }
        spill.finish().unwrap();
        let parts = spill.parts(0, 20_000).unwrap();
        assert!(parts.len() > 4, "{} parts", parts.len());
        let mut seen = Vec::new();
        let mut last_id: Option<String> = None;
        for part in parts {
            let (after, through) = (part.after.clone(), part.through.clone());
            let covered = |id: &str| {
                after.as_deref().is_none_or(|a| id > a)
                    && through.as_deref().is_none_or(|t| id <= t)
            };
            let read = part.read().unwrap();
            let ids = read.image_ids().unwrap();
            let (low, high) = (ids.first().unwrap(), ids.last().unwrap());
            let written = read.slice(TableKind::Captions, low, high).unwrap();
            let rows: Vec<KeyedRow> = read
                .typed()
                .unwrap()
                .into_iter()
                .flat_map(|(_, rows)| rows)
                .collect();
            assert_eq!(written.unwrap().num_rows(), rows.len());
            assert!(rows.iter().all(|r| covered(r.row.image_id())));
            // Parts are consecutive ranges of ids that end at a chunk's or a piece's end.
            let first = rows.first().unwrap().row.image_id().to_string();
            if let Some(last) = &last_id {
                assert!(*last < first);
                assert!(
                    ends_chunk(last, 64) || ends_piece(last, 64),
                    "{last} ends neither a chunk nor a piece"
                );
            }
            last_id = Some(rows.last().unwrap().row.image_id().to_string());
            for pair in rows.windows(2) {
                let key = |r: &KeyedRow| (r.row.image_id().to_string(), r.unit, r.ordinal);
                assert!(key(&pair[0]) < key(&pair[1]));
            }
            seen.extend(
                rows.iter()
                    .map(|r| (r.row.image_id().to_string(), r.unit, r.ordinal)),
            );
        }
        pushed.sort();
        assert_eq!(seen, pushed);
        assert_eq!(
            std::fs::read_dir(dir.path().join("spill")).unwrap().count(),
            0
        );
    }

    #[test]
    fn split_points_fill_parts_and_prefer_chunk_ends() {
        let cuts: Vec<(String, bool)> = [
            ("a", false),
            ("b", true),
            ("c", false),
            ("d", false),
            ("e", true),
            ("f", false),
        ]
        .iter()
        .map(|(id, end)| (id.to_string(), *end))
        .collect();
        let ids = |splits: Vec<String>| splits.join(",");
        // Rows up to a, up to b, ..., after f. Budget 10: a+b = 7; c would make 11, and b (a
        // chunk end) leaves the part at least half full, so the part ends at b. c+d+e = 9; f
        // would make 12: end at e. f + after = 8.
        let sizes = [3, 4, 4, 2, 3, 3, 5];
        assert_eq!(ids(split_points(&cuts, &sizes, 10)), "b,e");
        // Up to d the part holds 10, which fits; e would overflow it, and the chunk end b holds
        // 2 of 10, under half: the part ends at d. Then e + f + after = 10.
        let sizes = [1, 1, 1, 7, 4, 1, 5];
        assert_eq!(ids(split_points(&cuts, &sizes, 10)), "d");
        // Rows larger than the budget make a part of their own.
        let sizes = [30, 1, 1, 1, 1, 1, 1];
        assert_eq!(ids(split_points(&cuts, &sizes, 10)), "a");
        let sizes = [1, 1, 30, 1, 1, 1, 1];
        assert_eq!(ids(split_points(&cuts, &sizes, 10)), "b,c");
        // Everything fits: no split.
        assert_eq!(ids(split_points(&cuts, &[1; 7], 10)), "");
    }
}
