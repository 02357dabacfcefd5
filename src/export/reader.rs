//! Reading a committed table back as RecordBatches, shard by shard.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::manifest::read_manifest;
use super::validate::safe_relative_path;
use crate::error::{Error, Result};
use crate::ingest::ParquetInput;
use crate::schema::{schema_fingerprint, TableKind};

/// Rows per batch handed out by [`TableReader`].
const READ_BATCH_ROWS: usize = 8192;

/// Batches of one table of a dataset, in manifest order; opens one shard at a time, so memory
/// stays bounded by a batch and a shard's footer.
pub struct TableReader {
    table: TableKind,
    files: VecDeque<PathBuf>,
    current: Option<(ParquetInput, ParquetRecordBatchReader)>,
}

/// Reads every split of `table` in the dataset at `dir`, as listed by its manifest.
pub fn read_table(dir: &Path, table: TableKind) -> Result<TableReader> {
    open(dir, table, None)
}

/// Reads one split of `table` (a sample split such as `train`, or the table name).
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
        if split.is_some_and(|s| s != file.split) {
            continue;
        }
        let relative = safe_relative_path(&file.path).ok_or_else(|| {
            Error::invalid(
                format!("{}/manifest.json", dir.display()),
                format!("file path {:?} leaves the dataset directory", file.path),
            )
        })?;
        files.push_back(dir.join(relative));
    }
    Ok(TableReader {
        table,
        files,
        current: None,
    })
}

impl TableReader {
    fn open_next(&mut self) -> Result<bool> {
        let Some(path) = self.files.pop_front() else {
            return Ok(false);
        };
        let input = ParquetInput::open(&path)?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(input.clone())
            .map_err(|e| input.parquet_error(e))?;
        let expected = schema_fingerprint(&self.table.schema());
        let found = schema_fingerprint(builder.schema());
        if found != expected {
            return Err(Error::invalid(
                path.display().to_string(),
                format!(
                    "schema fingerprint {found} is not table {}'s {expected}; the file was \
                     written by another capflow version or is not part of this table",
                    self.table.name()
                ),
            ));
        }
        let reader = builder
            .with_batch_size(READ_BATCH_ROWS)
            .build()
            .map_err(|e| input.parquet_error(e))?;
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
                        return Some(
                            RecordBatch::try_new(self.table.schema(), batch.columns().to_vec())
                                .map_err(|e| input.arrow_error(e)),
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
    let path = dataset_file_path(dir, file)?;
    let input = ParquetInput::open(&path)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(input.clone())
        .and_then(|b| b.with_batch_size(READ_BATCH_ROWS).build())
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
