//! Reader for capflow's own Parquet tables, so that an exported dataset (or any file written
//! with capflow's schemas) can be the input of another run.
//!
//! The input is a dataset directory, whose `manifest.json` lists the data files (without a
//! manifest every `*.parquet` under the directory is read, skipping hidden staging directories
//! such as `.capflow-tmp-*`), or a single Parquet file. A file's table comes from its
//! `capflow.table` key-value metadata, or else from matching its Arrow schema against
//! [`TableKind::schema`]. One record is one Parquet row; a row that does not convert to its
//! table's row type is rejected with its row number.
//!
//! The `rejected` table is the ledger of an earlier run, not input data: a dataset directory's
//! ledger is skipped, and naming a ledger file on its own is a usage error.
//!
//! Split names are read as capflow names them now ([`canonical_split`]): the `val` of a dataset
//! written by an earlier capflow version is `validation`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::ledger::{Locator, Source};
use super::{ParquetInput, RecordSink, Row};
use crate::error::{Error, Result};
use crate::schema::{batch_to_rows, canonical_split, TableKind, TableRow};

/// Format name.
pub const FORMAT: &str = "capflow";

/// Key-value metadata key naming a file's table.
pub const TABLE_KEY: &str = "capflow.table";

/// Rows decoded per batch.
const BATCH_ROWS: usize = 4096;

/// Reads a capflow dataset directory or Parquet file.
pub fn read(path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    if !path.is_dir() {
        return match read_file(path, sink)? {
            Some(TableKind::Rejected) => Err(Error::Usage(format!(
                "{}: this is a rejected-record ledger of an earlier run, not input records",
                path.display()
            ))),
            _ => Ok(()),
        };
    }
    for file in dataset_files(path)? {
        read_file(&file, sink)?;
    }
    Ok(())
}

#[derive(serde::Deserialize)]
struct ManifestFiles {
    files: Vec<ManifestFile>,
}

#[derive(serde::Deserialize)]
struct ManifestFile {
    path: String,
    #[serde(default)]
    table: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
}

/// The data files of a dataset directory: from `manifest.json`, else every `*.parquet` below.
fn dataset_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let manifest = dir.join("manifest.json");
    if manifest.is_file() {
        let bytes = std::fs::read(&manifest).map_err(|e| Error::io(&manifest, e))?;
        let listed: ManifestFiles = serde_json::from_slice(&bytes).map_err(|e| {
            Error::invalid(
                format!("manifest {}", manifest.display()),
                format!("expected {{\"files\": [{{\"path\": ...}}]}}: {e}"),
            )
        })?;
        // Only files inside the dataset, and only with the bytes the manifest recorded.
        let mut files = Vec::new();
        for file in listed.files {
            if file.table.as_deref() == Some(TableKind::Rejected.name()) {
                continue;
            }
            let relative = crate::export::safe_relative_path(&file.path).ok_or_else(|| {
                Error::record(
                    manifest.display().to_string(),
                    file.path.clone(),
                    "the file's path leaves the dataset directory",
                )
            })?;
            let path = dir.join(relative);
            if let Some(expected) = &file.sha256 {
                let (sha, _) = crate::export::fsutil::sha256_file(&path)?;
                if &sha != expected {
                    return Err(Error::record(
                        path.display().to_string(),
                        "sha256",
                        format!(
                            "the file's SHA-256 is {sha}, the manifest's {expected}: it changed \
                             after it was written"
                        ),
                    ));
                }
            }
            files.push(path);
        }
        return Ok(files);
    }
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let path = entry.map_err(|e| Error::io(&d, e))?.path();
            // Hidden files, and (as Spark and Delta Lake have them) `_`-prefixed ones: a Delta
            // table's log and change data files are not rows of the table.
            let hidden = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(['.', '_']));
            if hidden {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The table a file holds, from its metadata or its schema.
fn table_of(builder: &ParquetRecordBatchReaderBuilder<ParquetInput>) -> Option<TableKind> {
    let named = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == TABLE_KEY))
        .and_then(|e| e.value.as_deref())
        .and_then(TableKind::from_name);
    named.or_else(|| {
        let schema = builder.schema();
        TableKind::ALL.into_iter().find(|kind| {
            let expected = kind.schema();
            expected.fields().len() == schema.fields().len()
                && expected
                    .fields()
                    .iter()
                    .zip(schema.fields())
                    .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
        })
    })
}

/// Reads one Parquet file; returns its table (`Rejected` files are skipped).
fn read_file(path: &Path, sink: &mut dyn RecordSink) -> Result<Option<TableKind>> {
    read_file_range(path, None, sink)
}

/// Reads rows `offset..offset + rows` of one capflow table file (a span of a compacted file,
/// `crate::export::ChunkPiece`), as [`read`] reads a whole one.
pub(crate) fn read_range(
    path: &Path,
    offset: u64,
    rows: u64,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    read_file_range(path, Some((offset, rows)), sink).map(|_| ())
}

fn read_file_range(
    path: &Path,
    range: Option<(u64, u64)>,
    sink: &mut dyn RecordSink,
) -> Result<Option<TableKind>> {
    let input = ParquetInput::open(path)?;
    // The Parquet decoder is third-party code fed untrusted bytes; a panic in it must not take
    // the run down, so it becomes an error naming the file.
    let decoded = catch_unwind(AssertUnwindSafe(|| -> Result<Option<TableKind>> {
        let builder = ParquetRecordBatchReaderBuilder::try_new(input.clone())
            .map_err(|e| input.parquet_error(e))?;
        let Some(kind) = table_of(&builder) else {
            return Err(Error::invalid(
                format!("capflow table {}", path.display()),
                format!(
                    "no `{TABLE_KEY}` metadata and the schema matches none of capflow's tables"
                ),
            ));
        };
        if kind == TableKind::Rejected {
            tracing::info!("{}: skipping the rejected-record ledger", path.display());
            return Ok(Some(kind));
        }
        let builder = builder.with_batch_size(BATCH_ROWS);
        let builder = match range {
            Some((offset, rows)) => builder
                .with_offset(offset as usize)
                .with_limit(rows as usize),
            None => builder,
        };
        let reader = builder.build().map_err(|e| input.parquet_error(e))?;
        let source = Source::new(FORMAT, path);
        let mut first_row = range.map_or(0, |(offset, _)| offset as usize);
        for batch in reader {
            let batch = batch.map_err(|e| input.arrow_error(e))?;
            emit_batch(kind, &batch, first_row, &source, sink)?;
            first_row += batch.num_rows();
        }
        Ok(Some(kind))
    }));
    decoded.unwrap_or_else(|_| {
        Err(Error::invalid(
            format!("Parquet file {}", path.display()),
            "the decoder failed on corrupt data",
        ))
    })
}

/// Decodes `batch`, rows of `kind` read from the capflow table file `path` starting at its row
/// `first_row`, into `sink` as [`read`] decodes the file's batches.
pub(crate) fn decode_batch(
    kind: TableKind,
    batch: &RecordBatch,
    first_row: usize,
    path: &Path,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    emit_batch(kind, batch, first_row, &Source::new(FORMAT, path), sink)
}

fn emit_batch(
    kind: TableKind,
    batch: &RecordBatch,
    first_row: usize,
    source: &Source,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    match kind {
        TableKind::Images => emit_rows(batch, first_row, Row::Image, source, sink),
        TableKind::Captions => emit_rows(batch, first_row, Row::Caption, source, sink),
        TableKind::Groundings => emit_rows(batch, first_row, Row::Grounding, source, sink),
        TableKind::Detections => emit_rows(batch, first_row, Row::Detection, source, sink),
        TableKind::Amrs => emit_rows(batch, first_row, Row::Amr, source, sink),
        TableKind::SceneGraphs => emit_rows(batch, first_row, Row::SceneGraph, source, sink),
        TableKind::GbcGraphs => emit_rows(batch, first_row, Row::GbcGraph, source, sink),
        TableKind::Samples => emit_rows(batch, first_row, Row::Sample, source, sink),
        TableKind::Rejected => Ok(()),
    }
}

/// Converts a batch to rows; when the batch as a whole does not convert, each row is tried on
/// its own so that only the broken ones are rejected.
fn emit_rows<R: TableRow>(
    batch: &RecordBatch,
    first_row: usize,
    wrap: fn(R) -> Row,
    source: &Source,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    if let Ok(rows) = batch_to_rows::<R>(batch) {
        if rows.len() == batch.num_rows() {
            for row in rows {
                sink.row(with_canonical_split(wrap(row)))?;
                sink.accepted()?;
            }
            return Ok(());
        }
    }
    for i in 0..batch.num_rows() {
        let one = batch.slice(i, 1);
        match batch_to_rows::<R>(&one).map(|mut rows| rows.pop()) {
            Ok(Some(row)) => {
                sink.row(with_canonical_split(wrap(row)))?;
                sink.accepted()?;
            }
            outcome => {
                let reason = match outcome {
                    Err(e) => format!("row does not fit the {} table: {e}", R::KIND.name()),
                    _ => format!("row does not fit the {} table", R::KIND.name()),
                };
                let excerpt = arrow::util::pretty::pretty_format_batches(&[one])
                    .map(|t| t.to_string())
                    .unwrap_or_default();
                let row = first_row + i;
                let at = Locator {
                    record: format!("row {row}"),
                    line: None,
                    byte_offset: None,
                };
                source.reject(sink, at, reason, &excerpt)?;
            }
        }
    }
    Ok(())
}

/// `row` with its split, where it has one, under its [`canonical_split`] name.
fn with_canonical_split(mut row: Row) -> Row {
    let split = match &mut row {
        Row::Image(r) => &mut r.split,
        Row::Caption(r) => &mut r.split,
        Row::Sample(r) => &mut r.split,
        _ => return row,
    };
    let canonical = canonical_split(split);
    if canonical != split.as_str() {
        *split = canonical.to_string();
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::VecSink;
    use crate::schema::{rows_to_batch, CaptionRow};
    use parquet::arrow::ArrowWriter;
    use std::fs::File;

    fn caption(i: i32) -> CaptionRow {
        CaptionRow {
            image_id: format!("img{i}"),
            caption_id: format!("img{i}#0"),
            dataset: "coco".into(),
            split: "train".into(),
            caption_index: 0,
            text: format!("caption number {i}"),
        }
    }

    #[test]
    fn tables_are_found_by_schema_without_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<CaptionRow> = (0..5).map(caption).collect();
        let batch = rows_to_batch(&rows).unwrap();
        let path = dir
            .path()
            .join("data")
            .join("captions-00000-of-00001.parquet");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut writer =
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        // A hidden staging directory is never read.
        std::fs::create_dir_all(dir.path().join(".capflow-tmp-1")).unwrap();
        std::fs::copy(&path, dir.path().join(".capflow-tmp-1/x.parquet")).unwrap();

        let mut sink = VecSink::default();
        read(dir.path(), &mut sink).unwrap();
        assert_eq!(sink.accepted, 5);
        let back: Vec<CaptionRow> = sink
            .rows
            .into_iter()
            .filter_map(|r| match r {
                Row::Caption(c) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(back, rows);
    }

    #[test]
    fn an_earlier_versions_val_split_is_read_as_validation() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows: Vec<CaptionRow> = (0..3).map(caption).collect();
        rows[1].split = "val".into();
        rows[2].split = "test".into();
        let batch = rows_to_batch(&rows).unwrap();
        let path = dir.path().join("captions.parquet");
        let mut writer =
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();

        let mut sink = VecSink::default();
        read(&path, &mut sink).unwrap();
        let splits: Vec<String> = sink
            .rows
            .into_iter()
            .filter_map(|r| match r {
                Row::Caption(c) => Some(c.split),
                _ => None,
            })
            .collect();
        assert_eq!(splits, ["train", "validation", "test"]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        std::fs::write(&path, b"PAR1 not really parquet PAR1").unwrap();
        let mut sink = VecSink::default();
        assert!(read(&path, &mut sink).is_err());
    }
}
