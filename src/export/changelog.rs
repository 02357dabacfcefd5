//! `changes/v<N>.parquet`: what a version added and retracted.
//!
//! A changelog file holds the `samples` table's columns plus `diff` (Int8): +1 for a sample the
//! version added, −1 for one it retracted. Applying every changelog from version 1 on, in order,
//! gives the version's samples as a multiset; a sample that was retracted and added again with
//! the same content cancels out and is not listed.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int8Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

use super::fsutil;
use super::manifest::ChangelogEntry;
use super::shard::ShardSettings;
use crate::error::{Error, Result};
use crate::schema::{batch_to_rows, rows_to_batch, SampleRow, TableKind};

/// Directory of the changelogs inside a dataset.
pub const CHANGES_DIR: &str = "changes";

/// The changelog's extra column.
const DIFF_COLUMN: &str = "diff";

/// A changelog written in the staging directory, waiting for its version number.
pub(crate) struct StagedChangelog {
    path: PathBuf,
    added: u64,
    retracted: u64,
}

impl StagedChangelog {
    /// Whether the changelog holds no change.
    pub(crate) fn is_empty(&self) -> bool {
        self.added == 0 && self.retracted == 0
    }
}

pub(crate) fn changelog_schema() -> Arc<Schema> {
    let samples = TableKind::Samples.schema();
    let mut fields: Vec<Arc<Field>> = samples.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(DIFF_COLUMN, DataType::Int8, false)));
    Arc::new(Schema::new_with_metadata(
        fields,
        samples.metadata().clone(),
    ))
}

/// Writes `changes` (sample, diff) in the given order to the staging directory.
pub(crate) fn stage_changelog(
    staging: &Path,
    settings: &ShardSettings,
    changes: &[(SampleRow, i8)],
) -> Result<StagedChangelog> {
    let mut writer = ChangelogWriter::create(staging, settings)?;
    for (sample, diff) in changes {
        writer.push(sample.clone(), *diff)?;
    }
    writer.finish()
}

/// Rows of a changelog handed to the Parquet writer at a time.
pub(crate) const CHANGELOG_BATCH_ROWS: usize = 8192;

/// Writes a changelog as its changes arrive, in that order, holding at most
/// [`CHANGELOG_BATCH_ROWS`] of them: a run's changelog can be as large as its dataset.
pub struct ChangelogWriter {
    path: PathBuf,
    writer: ArrowWriter<File>,
    /// Changes pushed one at a time, not yet in a batch.
    pending: Vec<(SampleRow, i8)>,
    /// Every change, in batches of [`CHANGELOG_BATCH_ROWS`] for the writer: the file's bytes
    /// depend on the changes, not on how they were handed in.
    joined: BatchJoiner,
    added: u64,
    retracted: u64,
}

impl ChangelogWriter {
    pub(crate) fn create(staging: &Path, settings: &ShardSettings) -> Result<ChangelogWriter> {
        let path = staging.join("changelog.parquet");
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let properties = settings.properties(TableKind::Samples)?;
        let writer = ArrowWriter::try_new(file, changelog_schema(), Some(properties))
            .map_err(|e| Error::parquet(format!("creating {}", path.display()), e))?;
        Ok(ChangelogWriter {
            path,
            writer,
            pending: Vec::new(),
            joined: BatchJoiner::new(changelog_schema(), CHANGELOG_BATCH_ROWS),
            added: 0,
            retracted: 0,
        })
    }

    /// Appends one change: `diff` +1 for an added sample, −1 for a retracted one.
    pub fn push(&mut self, sample: SampleRow, diff: i8) -> Result<()> {
        if diff > 0 {
            self.added += 1;
        } else {
            self.retracted += 1;
        }
        self.pending.push((sample, diff));
        if self.pending.len() >= CHANGELOG_BATCH_ROWS {
            self.flush_pending()?;
        }
        Ok(())
    }

    /// Appends a batch of changes in the changelog's schema (the samples' columns, then
    /// `diff`), of any number of rows, after the changes pushed before it.
    pub fn push_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        self.flush_pending()?;
        let batch = RecordBatch::try_new(changelog_schema(), batch.columns().to_vec())
            .map_err(|e| Error::arrow("building the changelog", e))?;
        let diffs = diff_column(&batch, &self.path.display().to_string())?;
        for diff in diffs.values() {
            if *diff > 0 {
                self.added += 1;
            } else {
                self.retracted += 1;
            }
        }
        self.write_joined(batch)
    }

    /// The changes pushed one at a time so far, as a batch to write.
    fn flush_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = changes_to_batch(&std::mem::take(&mut self.pending))?;
        self.write_joined(batch)
    }

    fn write_joined(&mut self, batch: RecordBatch) -> Result<()> {
        let (writer, path) = (&mut self.writer, &self.path);
        self.joined
            .push(batch, &mut |joined| write_batch(writer, path, &joined))
    }

    /// Writes what is pending and the file's footer, and syncs it.
    pub(crate) fn finish(mut self) -> Result<StagedChangelog> {
        self.flush_pending()?;
        let (writer, path) = (&mut self.writer, &self.path);
        self.joined
            .finish(&mut |joined| write_batch(writer, path, &joined))?;
        // `finish` (not `into_inner`, which reports a failed flush as text) keeps a failed
        // write the I/O error it is.
        self.writer
            .finish()
            .map_err(|e| Error::parquet(format!("finishing {}", self.path.display()), e))?;
        self.writer
            .inner()
            .sync_all()
            .map_err(|e| Error::io(&self.path, e))?;
        Ok(StagedChangelog {
            path: self.path,
            added: self.added,
            retracted: self.retracted,
        })
    }
}

fn write_batch(writer: &mut ArrowWriter<File>, path: &Path, batch: &RecordBatch) -> Result<()> {
    (writer.write(batch)).map_err(|e| Error::parquet(format!("writing {}", path.display()), e))
}

/// Batches joined into batches of a fixed number of rows (the last one fewer): a Parquet
/// file's bytes depend on the batches its writer is handed, not only on their rows.
pub(crate) struct BatchJoiner {
    schema: SchemaRef,
    rows: usize,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
}

impl BatchJoiner {
    pub(crate) fn new(schema: SchemaRef, rows: usize) -> BatchJoiner {
        BatchJoiner {
            schema,
            rows: rows.max(1),
            pending: Vec::new(),
            pending_rows: 0,
        }
    }

    /// Adds `batch`'s rows; hands every batch of the fixed size they complete to `emit`.
    pub(crate) fn push(
        &mut self,
        mut batch: RecordBatch,
        emit: &mut impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        // Batches of the size, or larger, that nothing waits before pass on without a copy.
        while self.pending.is_empty() && batch.num_rows() >= self.rows {
            emit(batch.slice(0, self.rows))?;
            batch = batch.slice(self.rows, batch.num_rows() - self.rows);
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.pending_rows += batch.num_rows();
        self.pending.push(batch);
        while self.pending_rows >= self.rows {
            let joined = self.join()?;
            let rest = joined.slice(self.rows, joined.num_rows() - self.rows);
            emit(joined.slice(0, self.rows))?;
            self.pending_rows = rest.num_rows();
            if rest.num_rows() > 0 {
                self.pending.push(rest);
            }
        }
        Ok(())
    }

    /// Hands the rows left, fewer than the fixed size, to `emit` as one batch.
    pub(crate) fn finish(
        &mut self,
        emit: &mut impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        if self.pending_rows > 0 {
            self.pending_rows = 0;
            emit(self.join()?)?;
        }
        Ok(())
    }

    /// Every pending slice as one batch; none is left pending.
    fn join(&mut self) -> Result<RecordBatch> {
        let joined = arrow::compute::concat_batches(&self.schema, &self.pending)
            .map_err(|e| Error::arrow("joining batches", e));
        self.pending.clear();
        joined
    }
}

/// Moves a staged changelog to `DIR/changes/v<version>.parquet`.
pub(crate) fn publish_changelog(
    dir: &Path,
    version: u64,
    staged: StagedChangelog,
) -> Result<ChangelogEntry> {
    let changes = dir.join(CHANGES_DIR);
    fs::create_dir_all(&changes).map_err(|e| Error::io(&changes, e))?;
    // Read in blocks: a run's changelog can be as large as its dataset.
    let (sha256, bytes) = fsutil::sha256_file(&staged.path)?;
    let relative = format!("{CHANGES_DIR}/v{version}.parquet");
    fsutil::rename(&staged.path, &dir.join(&relative))?;
    fsutil::sync_dir(&changes)?;
    Ok(ChangelogEntry {
        path: relative,
        added: staged.added,
        retracted: staged.retracted,
        bytes,
        sha256,
    })
}

/// Changes as one batch of the changelog's schema: the samples' columns, then `diff`.
pub(crate) fn changes_to_batch(changes: &[(SampleRow, i8)]) -> Result<RecordBatch> {
    let diffs: ArrayRef = Arc::new(Int8Array::from_iter_values(changes.iter().map(|c| c.1)));
    let rows: Vec<SampleRow> = changes.iter().map(|(s, _)| s.clone()).collect();
    let samples = rows_to_batch(&rows)?;
    let mut columns: Vec<ArrayRef> = samples.columns().to_vec();
    columns.push(diffs);
    RecordBatch::try_new(changelog_schema(), columns)
        .map_err(|e| Error::arrow("building the changelog", e))
}

/// The changes of one batch of the changelog's schema; `what` names its file in errors.
pub(crate) fn changes_from_batch(batch: &RecordBatch, what: &str) -> Result<Vec<(SampleRow, i8)>> {
    let diffs = diff_column(batch, what)?;
    let samples = TableKind::Samples.schema();
    let columns: Vec<ArrayRef> = (0..samples.fields().len())
        .map(|i| batch.column(i).clone())
        .collect();
    let rows = RecordBatch::try_new(samples, columns)
        .map_err(|e| Error::arrow(format!("reading {what}"), e))?;
    let rows: Vec<SampleRow> = batch_to_rows(&rows)?;
    Ok(rows
        .into_iter()
        .zip(diffs.values().iter().copied())
        .collect())
}

/// The `diff` column of a batch of the changelog's schema; `what` names its file in errors.
fn diff_column<'a>(batch: &'a RecordBatch, what: &str) -> Result<&'a Int8Array> {
    batch
        .column_by_name(DIFF_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<Int8Array>())
        .ok_or_else(|| Error::invalid(what, "not a capflow changelog: no Int8 `diff` column"))
}

/// Reads a changelog file back as (sample, diff) pairs in file order.
pub fn read_changelog(path: &Path) -> Result<Vec<(SampleRow, i8)>> {
    let input = crate::ingest::ParquetInput::open(path)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(input.clone())
        .and_then(|b| b.build())
        .map_err(|e| input.parquet_error(e))?;
    let what = path.display().to_string();
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| input.arrow_error(e))?;
        out.extend(changes_from_batch(&batch, &what)?);
    }
    Ok(out)
}

/// The `n`-th sample of `image`, with its ids and text set, for tests.
#[cfg(test)]
pub(crate) fn test_sample(image: &str, n: usize) -> SampleRow {
    SampleRow {
        image: None,
        sample_id: format!("{image}-{n}"),
        image_id: image.into(),
        split: "train".into(),
        method: "ssa".into(),
        text: format!("sample {n} of {image}"),
        control_boxes: Vec::new(),
        control_labels: Vec::new(),
        coverage: 0.0,
        length_level: 1,
        word_count: 4,
        verbs: Vec::new(),
        quality: Vec::new(),
        provenance: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(i: usize) -> (SampleRow, i8) {
        let sample = test_sample(&format!("img{:06}", i / 3), i);
        (sample, if i.is_multiple_of(4) { -1 } else { 1 })
    }

    #[test]
    fn a_changelog_handed_batches_of_any_size_has_the_bytes_of_one_written_change_by_change() {
        let dir = tempfile::tempdir().unwrap();
        let settings = ShardSettings {
            config_hash: "test".into(),
            shard_bytes: 1 << 30,
            max_row_group_rows: 1 << 20,
            max_row_group_bytes: 1 << 30,
            zstd_level: 3,
        };
        let changes: Vec<(SampleRow, i8)> = (0..40_000).map(change).collect();
        let staging = |name: &str| {
            let path = dir.path().join(name);
            fs::create_dir(&path).unwrap();
            path
        };
        let by_change = staging("by-change");
        stage_changelog(&by_change, &settings, &changes).unwrap();
        // Batches smaller than, as large as and larger than the writer's, and changes pushed one
        // at a time between them.
        let by_batch = staging("by-batch");
        let mut writer = ChangelogWriter::create(&by_batch, &settings).unwrap();
        let mut at = 0;
        for size in [1, 8191, 3, 8192, 20_000, 5] {
            let batch = changes_to_batch(&changes[at..at + size]).unwrap();
            writer.push_batch(&batch).unwrap();
            at += size;
        }
        for (sample, diff) in &changes[at..at + 100] {
            writer.push(sample.clone(), *diff).unwrap();
        }
        at += 100;
        writer
            .push_batch(&changes_to_batch(&changes[at..]).unwrap())
            .unwrap();
        let staged = writer.finish().unwrap();
        assert_eq!((staged.added, staged.retracted), (30_000, 10_000));
        let bytes = |dir: &Path| fs::read(dir.join("changelog.parquet")).unwrap();
        assert!(
            bytes(&by_batch) == bytes(&by_change),
            "the changelogs differ"
        );
    }
}
