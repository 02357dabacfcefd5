//! Reading a committed table back as RecordBatches, shard by shard.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::manifest::read_manifest;
use super::validate::safe_relative_path;
use crate::error::{Error, Result};
use crate::ingest::ParquetInput;
use crate::schema::{canonical_split, schema_fingerprint, TableKind};

/// Rows per batch handed out by [`TableReader`].
const READ_BATCH_ROWS: usize = 8192;

/// Batches of one table of a dataset, in manifest order; opens one shard at a time, so memory
/// stays bounded by a batch and a shard's footer.
pub struct TableReader {
    table: TableKind,
    /// Files still to read, each whole or `(offset, rows)` of it.
    files: VecDeque<(PathBuf, Option<(u64, u64)>)>,
    current: Option<(ParquetInput, ParquetRecordBatchReader)>,
    /// The open shard has an earlier capflow version's schema: its columns are cast.
    cast: bool,
}

/// Reads every split of `table` in the dataset at `dir`, as listed by its manifest.
pub fn read_table(dir: &Path, table: TableKind) -> Result<TableReader> {
    open(dir, table, None)
}

/// Reads one split of `table` (a sample split such as `train`, or the table name). Splits
/// match by their [`canonical_split`] names: `validation` also reads the `val` shards of a
/// dataset written by an earlier capflow version, and `val` reads `validation`.
pub fn read_split(dir: &Path, table: TableKind, split: &str) -> Result<TableReader> {
    open(dir, table, Some(split))
}

/// Reads every split of `table` as listed by `manifest` (the current one or an earlier version's,
/// see [`read_manifest_version`](super::read_manifest_version)).
pub fn read_table_of(
    dir: &Path,
    manifest: &super::Manifest,
    table: TableKind,
) -> Result<TableReader> {
    open_manifest(dir, manifest, table, None)
}

/// Reads `files` of `table`, in order (files of a manifest of the dataset at `dir`).
pub(crate) fn read_files(
    dir: &Path,
    table: TableKind,
    files: &[&super::FileEntry],
) -> Result<TableReader> {
    let mut paths = VecDeque::new();
    for file in files {
        paths.push_back((dataset_file_path(dir, file)?, None));
    }
    Ok(TableReader {
        table,
        files: paths,
        current: None,
        cast: false,
    })
}

fn open(dir: &Path, table: TableKind, split: Option<&str>) -> Result<TableReader> {
    let manifest = read_manifest(dir)?;
    open_manifest(dir, &manifest, table, split)
}

fn open_manifest(
    dir: &Path,
    manifest: &super::Manifest,
    table: TableKind,
    split: Option<&str>,
) -> Result<TableReader> {
    let mut files = VecDeque::new();
    for file in manifest.table_files(table) {
        if split.is_some_and(|s| canonical_split(s) != canonical_split(&file.split)) {
            continue;
        }
        let relative = safe_relative_path(&file.path).ok_or_else(|| {
            Error::invalid(
                format!("{}/manifest.json", dir.display()),
                format!("file path {:?} leaves the dataset directory", file.path),
            )
        })?;
        files.push_back((dir.join(relative), None));
    }
    Ok(TableReader {
        table,
        files,
        current: None,
        cast: false,
    })
}

/// The schema an earlier capflow version wrote `table` with, where it differs from today's by
/// types a cast converts: the samples' `provenance.seed` was UInt64 (now Int64, which Delta
/// Lake has; a seed is at most `i64::MAX`).
fn legacy_schema(table: TableKind) -> Option<Schema> {
    if table != TableKind::Samples {
        return None;
    }
    let schema = table.schema();
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Struct(inner) if field.name() == "provenance" => {
                let inner: Vec<Field> = inner
                    .iter()
                    .map(|f| match f.name().as_str() {
                        "seed" => Field::new("seed", DataType::UInt64, f.is_nullable()),
                        _ => f.as_ref().clone(),
                    })
                    .collect();
                Field::new(
                    field.name(),
                    DataType::Struct(inner.into()),
                    field.is_nullable(),
                )
            }
            _ => field.as_ref().clone(),
        })
        .collect();
    Some(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `batch`'s columns cast to `schema`'s types.
fn cast_columns(
    batch: &RecordBatch,
    schema: &Schema,
) -> std::result::Result<Vec<ArrayRef>, arrow::error::ArrowError> {
    batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| arrow::compute::cast(column, field.data_type()))
        .collect()
}

impl TableReader {
    fn open_next(&mut self) -> Result<bool> {
        let Some((path, range)) = self.files.pop_front() else {
            return Ok(false);
        };
        let input = ParquetInput::open(&path)?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(input.clone())
            .map_err(|e| input.parquet_error(e))?;
        let expected = schema_fingerprint(&self.table.schema());
        let found = schema_fingerprint(builder.schema());
        self.cast =
            legacy_schema(self.table).is_some_and(|legacy| found == schema_fingerprint(&legacy));
        if found != expected && !self.cast {
            return Err(Error::invalid(
                path.display().to_string(),
                format!(
                    "schema fingerprint {found} is not table {}'s {expected}; the file was \
                     written by another capflow version or is not part of this table",
                    self.table.name()
                ),
            ));
        }
        let builder = builder.with_batch_size(READ_BATCH_ROWS);
        let builder = match range {
            Some((offset, rows)) => builder
                .with_offset(offset as usize)
                .with_limit(rows as usize),
            None => builder,
        };
        let reader = builder.build().map_err(|e| input.parquet_error(e))?;
        self.current = Some((input, reader));
        Ok(true)
    }
}

impl Iterator for TableReader {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((input, reader)) = self.current.as_mut() {
                match reader.next() {
                    Some(Ok(batch)) => {
                        // Batches carry the code's schema (without the file's metadata) so
                        // that they concatenate with freshly built ones.
                        let schema = self.table.schema();
                        let columns = if self.cast {
                            match cast_columns(&batch, &schema) {
                                Ok(columns) => columns,
                                Err(e) => return Some(Err(input.arrow_error(e))),
                            }
                        } else {
                            batch.columns().to_vec()
                        };
                        return Some(
                            RecordBatch::try_new(schema, columns).map_err(|e| input.arrow_error(e)),
                        );
                    }
                    Some(Err(e)) => {
                        let error = input.arrow_error(e);
                        self.current = None;
                        self.files.clear();
                        return Some(Err(error));
                    }
                    None => self.current = None,
                }
            }
            match self.open_next() {
                Ok(true) => continue,
                Ok(false) => return None,
                Err(e) => {
                    self.files.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Every row of one file of a dataset (a [`FileEntry`](super::FileEntry) of its manifest).
pub fn read_file_rows<R: crate::schema::TableRow>(
    dir: &Path,
    file: &super::FileEntry,
) -> Result<Vec<R>> {
    read_rows(dir, file, None)
}

/// Rows `offset..offset + rows` of one file of a dataset: one bucket chunk of a compacted file
/// ([`ChunkPiece`](super::ChunkPiece)), or all of a chunk shard's.
pub fn read_file_rows_range<R: crate::schema::TableRow>(
    dir: &Path,
    file: &super::FileEntry,
    offset: u64,
    rows: u64,
) -> Result<Vec<R>> {
    let whole = offset == 0 && rows == file.rows;
    read_rows(dir, file, (!whole).then_some((offset, rows)))
}

/// The rows of one bucket chunk of a dataset's file as Arrow batches of its table's schema
/// (an earlier capflow version's columns cast), as a chunk shard of them holds them.
pub(crate) fn piece_batches(dir: &Path, piece: &super::ChunkPiece) -> Result<Vec<RecordBatch>> {
    let file = piece.file;
    let range = Some((piece.offset, piece.rows));
    TableReader {
        table: file.table,
        files: VecDeque::from([(dataset_file_path(dir, file)?, range)]),
        current: None,
        cast: false,
    }
    .collect()
}

/// The rows of `file`, or of `(offset, rows)` of them.
fn read_rows<R: crate::schema::TableRow>(
    dir: &Path,
    file: &super::FileEntry,
    range: Option<(u64, u64)>,
) -> Result<Vec<R>> {
    let path = dataset_file_path(dir, file)?;
    let input = ParquetInput::open(&path)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(input.clone())
        .and_then(|b| {
            let b = b.with_batch_size(READ_BATCH_ROWS);
            match range {
                Some((offset, rows)) => b.with_offset(offset as usize).with_limit(rows as usize),
                None => b,
            }
            .build()
        })
        .map_err(|e| input.parquet_error(e))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| input.arrow_error(e))?;
        rows.extend(crate::schema::batch_to_rows::<R>(&batch)?);
    }
    Ok(rows)
}

/// Where a manifest's file is, refusing paths that leave the dataset directory.
pub(crate) fn dataset_file_path(dir: &Path, file: &super::FileEntry) -> Result<PathBuf> {
    let relative = safe_relative_path(&file.path).ok_or_else(|| {
        Error::invalid(
            format!("{}/manifest.json", dir.display()),
            format!("file path {:?} leaves the dataset directory", file.path),
        )
    })?;
    Ok(dir.join(relative))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::schema::{rows_to_batch, Provenance, SampleRow};

    #[test]
    fn samples_written_with_an_unsigned_seed_read_as_todays_schema() {
        let sample = SampleRow {
            image: None,
            sample_id: "s0".into(),
            image_id: "img0".into(),
            split: "train".into(),
            method: "ssa".into(),
            text: "a dog runs".into(),
            control_boxes: Vec::new(),
            control_labels: vec!["dog".into()],
            coverage: 0.5,
            length_level: 1,
            word_count: 3,
            verbs: vec!["run".into()],
            quality: Vec::new(),
            provenance: Provenance {
                seed: 7,
                ..Provenance::default()
            },
        };
        let today = rows_to_batch(&[sample]).unwrap();
        let legacy = legacy_schema(TableKind::Samples).unwrap();
        assert_ne!(
            schema_fingerprint(&legacy),
            schema_fingerprint(&TableKind::Samples.schema())
        );
        // The batch as an earlier version wrote it: the same values, the seed as UInt64.
        let columns = cast_columns(&today, &legacy).unwrap();
        let seed_type =
            |schema: &Schema| match schema.field_with_name("provenance").unwrap().data_type() {
                DataType::Struct(fields) => fields.find("seed").unwrap().1.data_type().clone(),
                other => panic!("{other:?}"),
            };
        assert_eq!(seed_type(&legacy), DataType::UInt64);
        let written = RecordBatch::try_new(Arc::new(legacy), columns).unwrap();
        let back = cast_columns(&written, &TableKind::Samples.schema()).unwrap();
        assert_eq!(back, today.columns().to_vec());
        assert!(legacy_schema(TableKind::Captions).is_none());
    }
}
