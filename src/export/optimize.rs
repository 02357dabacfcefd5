//! `capflow optimize`: compacts each table's small files into files of about a target size.
//!
//! `capflow run` writes one file per bucket chunk and table (a chunk holds about
//! `output.chunk_images` images), so that a rerun rewrites only the chunks its new, changed and
//! removed images fall in: many files of tens of kilobytes. `optimize` rewrites runs of them,
//! per table and split, into files of up to the target size (default
//! [`DEFAULT_TARGET_FILE_BYTES`]) and commits the result as a new version, as Delta Lake's
//! OPTIMIZE does: the same rows, in other files (every table's Delta commit is an `OPTIMIZE`
//! whose actions change no data, so the change data feed skips it).
//!
//! A compacted file lists the bucket chunks it holds, in row order ([`ChunkSpan`]), so the
//! reruns after it still address chunks: a rerun carries a compacted file none of whose chunks
//! changed, and replaces one that holds a changed chunk by chunk files (its unchanged chunks'
//! rows copied from it), which a later `optimize` compacts again. Files are compacted in bucket
//! and chunk order, and every bucket's open last chunk (where images with new, higher ids land)
//! into files of their own after them, so that a rerun adding images replaces those and carries
//! the rest. A state (`--state`) compares a compacted version as the version it compacted
//! ([`super::Manifest::compacted_from`]): reruns stay incremental.
//!
//! Files at or above the target are left as they are, as are compacted files (an optimize right
//! after an optimize commits nothing; the chunk files a rerun wrote are packed together, across
//! the compacted files between them) and the rejected-record ledger. Every
//! file is checked against its manifest's SHA-256 before it is read: a damaged shard is never
//! compacted into a new version. The previous version's files stay for time travel until
//! `capflow vacuum`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::fsutil;
use super::manifest::{read_manifest, ChunkSpan, FileEntry, Manifest};
use super::reader::read_files;
use super::shard::SplitWriter;
use super::writer::{check_committed, shard_file_name, table_dir, table_rank, DatasetWriter};
use super::DEFAULT_SHARD_BYTES;
use crate::error::{Error, Result};
use crate::schema::TableKind;

/// The default target size of a compacted file: tens of megabytes, as Parquet readers and
/// Hugging Face's loaders work best with, without holding more than a row group in memory.
pub const DEFAULT_TARGET_FILE_BYTES: u64 = 64 << 20;

/// What an optimize did (or, dry, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct OptimizeReport {
    /// The dataset's version after the optimize: a new one when it committed.
    pub version: u64,
    /// Whether a new version was committed (false when nothing was small enough to compact,
    /// and for a dry run).
    pub committed: bool,
    pub dry_run: bool,
    pub target_file_bytes: u64,
    /// Files of each table before and after.
    pub tables: BTreeMap<String, TableFiles>,
    /// Files read and rewritten into compacted ones, and their bytes.
    pub compacted_files: u64,
    pub compacted_bytes: u64,
    /// Compacted files written.
    pub written_files: u64,
}

/// [`OptimizeReport::tables`].
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct TableFiles {
    pub before: u64,
    pub after: u64,
}

/// Files of one table and split that become one compacted file.
struct Bin<'m> {
    table: TableKind,
    split: String,
    /// Its place among the split's compacted files, and their number.
    index: usize,
    count: usize,
    files: Vec<&'m FileEntry>,
}

/// Compacts the small files of the dataset at `dir` into files of up to `target_bytes` and
/// commits them as a new version; with `dry_run`, only says what it would do.
pub fn optimize(dir: &Path, target_bytes: u64, dry_run: bool) -> Result<OptimizeReport> {
    if target_bytes == 0 {
        return Err(Error::Usage(
            "the target file size must be at least 1 byte".into(),
        ));
    }
    let manifest = read_manifest(dir)?;
    if dry_run {
        let bins = plan(&manifest, target_bytes);
        return Ok(report(
            &manifest,
            &bins,
            target_bytes,
            manifest.version,
            false,
            true,
        ));
    }
    // The writer takes the dataset's lock and reads the manifest again under it.
    let mut writer = DatasetWriter::create(dir, &manifest.config_hash, DEFAULT_SHARD_BYTES)?;
    writer.retain_versions(true);
    let Some((previous, _)) = writer.previous() else {
        return Err(Error::invalid(
            dir.display().to_string(),
            "the dataset's manifest went away",
        ));
    };
    let previous = previous.clone();
    let bins = plan(&previous, target_bytes);
    if bins.is_empty() {
        return Ok(report(
            &previous,
            &bins,
            target_bytes,
            previous.version,
            false,
            false,
        ));
    }
    let mut compacted: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for bin in &bins {
        let file = compact(&writer, bin)?;
        writer.add_written(file)?;
        compacted.extend(bin.files.iter().map(|f| f.path.as_str()));
    }
    for file in &previous.files {
        if !compacted.contains(file.path.as_str()) {
            writer.carry(file)?;
        }
    }
    writer.rearrange_previous(target_bytes)?;
    let committed = writer.commit(previous.counts)?;
    Ok(report(
        &previous,
        &bins,
        target_bytes,
        committed.version,
        true,
        false,
    ))
}

/// The bins of `manifest`'s files: per table and split, files below `target_bytes` that no
/// optimize wrote, in chunk order (the open last chunks in bins of their own), packed while
/// they fit; only bins of two files or more.
fn plan(manifest: &Manifest, target_bytes: u64) -> Vec<Bin<'_>> {
    let mut groups: BTreeMap<(usize, &str, bool), Vec<&FileEntry>> = BTreeMap::new();
    for file in &manifest.files {
        if file.table == TableKind::Rejected {
            continue;
        }
        let chunked = !file.chunk_pieces().is_empty();
        groups
            .entry((table_rank(file.table), &file.split, chunked))
            .or_default()
            .push(file);
    }
    let mut bins: Vec<Bin> = Vec::new();
    for ((_, split, _), mut files) in groups {
        // Bucket and chunk order, every bucket's open last chunk after all closed ones.
        let open_last = |file: &FileEntry| {
            file.chunk_pieces()
                .first()
                .map(|p| (p.chunk.is_empty(), p.bucket, p.chunk.to_string()))
        };
        files.sort_by_cached_key(|file| (open_last(file), file.path.clone()));
        let mut packed: Vec<Vec<&FileEntry>> = Vec::new();
        let mut open: Vec<&FileEntry> = Vec::new();
        let mut open_bytes = 0u64;
        let mut in_open_chunks = false;
        for file in files {
            // A compacted file stays as it is, whatever its size: compacting again what an
            // earlier optimize packed (into fewer bytes than it read) would only move rows. It
            // does not end a bin: the chunk files a rerun wrote between compacted files are
            // packed together (their spans say where each chunk is).
            if file.bytes >= target_bytes || !file.spans.is_empty() {
                continue;
            }
            // The open last chunks, where a rerun's new images land, get files of their own.
            let open_chunk = open_last(file).is_some_and(|(open, _, _)| open);
            let enters_open = open_chunk && !std::mem::replace(&mut in_open_chunks, open_chunk);
            if enters_open || open_bytes.saturating_add(file.bytes) > target_bytes {
                packed.push(std::mem::take(&mut open));
                open_bytes = 0;
            }
            open_bytes += file.bytes;
            open.push(file);
        }
        packed.push(open);
        packed.retain(|files| files.len() >= 2);
        let count = packed.len();
        for (index, files) in packed.into_iter().enumerate() {
            bins.push(Bin {
                table: files[0].table,
                split: split.to_string(),
                index,
                count,
                files,
            });
        }
    }
    bins
}

/// Writes `bin`'s files, checked against their checksums, as one file in its table's
/// directory, and returns its entry.
fn compact(writer: &DatasetWriter, bin: &Bin) -> Result<FileEntry> {
    let dir = writer.dir();
    for file in &bin.files {
        check_committed(&dir.join(&file.path), file, "restore it before compacting")?;
    }
    let mut settings = writer.shard_settings().clone();
    settings.shard_bytes = u64::MAX;
    let mut out = SplitWriter::new(bin.table, &bin.split, writer.staging_dir(), settings, false);
    for batch in read_files(dir, bin.table, &bin.files)? {
        out.write(&batch?)?;
    }
    let shard = match out.finish(false)?.into_iter().next() {
        Some(shard) => shard,
        None => {
            return Err(Error::invalid(
                format!("table {} split {}", bin.table.name(), bin.split),
                "the files to compact hold no rows",
            ))
        }
    };
    let name = shard_file_name(&bin.split, bin.index, bin.count, &shard.sha256);
    let table_dir = table_dir(bin.table);
    fsutil::rename(&shard.staged_path, &dir.join(&table_dir).join(&name))?;
    fsutil::sync_dir(&dir.join(&table_dir))?;
    let spans = bin
        .files
        .iter()
        .flat_map(|file| file.chunk_pieces())
        .map(|piece| ChunkSpan {
            bucket: piece.bucket,
            buckets: piece.buckets,
            chunk: piece.chunk.to_string(),
            rows: piece.rows,
        })
        .collect();
    Ok(FileEntry {
        path: format!("{table_dir}/{name}"),
        table: bin.table,
        split: bin.split.clone(),
        rows: shard.rows,
        bytes: shard.bytes,
        sha256: shard.sha256,
        chunk: None,
        spans,
    })
}

fn report(
    manifest: &Manifest,
    bins: &[Bin],
    target_bytes: u64,
    version: u64,
    committed: bool,
    dry_run: bool,
) -> OptimizeReport {
    let mut tables: BTreeMap<String, TableFiles> = BTreeMap::new();
    for file in &manifest.files {
        let entry = tables.entry(file.table.name().to_string()).or_default();
        entry.before += 1;
        entry.after += 1;
    }
    let mut report = OptimizeReport {
        version,
        committed,
        dry_run,
        target_file_bytes: target_bytes,
        ..OptimizeReport::default()
    };
    for bin in bins {
        let entry = tables.entry(bin.table.name().to_string()).or_default();
        entry.after = entry.after + 1 - bin.files.len() as u64;
        report.compacted_files += bin.files.len() as u64;
        report.compacted_bytes += bin.files.iter().map(|f| f.bytes).sum::<u64>();
        report.written_files += 1;
    }
    report.tables = tables;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk shard of bucket `bucket` of 2 of the samples' train split, `bytes` long.
    fn shard(bucket: usize, chunk: &str, bytes: u64, hash: u64) -> serde_json::Value {
        serde_json::json!({
            "path": format!("data/samples/train-{bucket:05}-of-00002-{hash:016x}.parquet"),
            "table": "samples", "split": "train", "rows": 1, "bytes": bytes,
            "sha256": "", "chunk": chunk,
        })
    }

    fn manifest(files: Vec<serde_json::Value>) -> Manifest {
        serde_json::from_value(serde_json::json!({
            "format": "capflow-dataset", "format_version": 1, "version": 1,
            "engine_version": "0", "config_hash": "0", "created_at": "",
            "counts": {"read": 0, "accepted": 0, "rejected": 0},
            "stages": [], "tables": {}, "files": files, "history": [],
        }))
        .unwrap()
    }

    fn bins_of(manifest: &Manifest, target: u64) -> Vec<Vec<String>> {
        plan(manifest, target)
            .iter()
            .map(|bin| {
                let count = bin.count;
                assert!(bin.index < count);
                bin.files.iter().map(|f| f.chunk.clone().unwrap()).collect()
            })
            .collect()
    }

    #[test]
    fn files_are_packed_in_chunk_order_with_the_open_chunks_apart() {
        // Listed out of order: bucket 1's chunk "c" and both open chunks ("") among the
        // closed ones.
        let m = manifest(vec![
            shard(1, "", 10, 1),
            shard(0, "b", 10, 2),
            shard(1, "c", 10, 3),
            shard(0, "", 10, 4),
            shard(0, "a", 10, 5),
        ]);
        // Sorted a, b, c, then the open chunks of buckets 0 and 1: a + b fit 25 bytes, c would
        // not; c is alone until the open chunks begin a bin of their own.
        assert_eq!(bins_of(&m, 25), vec![vec!["a", "b"], vec!["", ""]]);
        // With room for everything, the closed chunks still end where the open ones begin.
        assert_eq!(bins_of(&m, 1000), vec![vec!["a", "b", "c"], vec!["", ""]]);
    }

    #[test]
    fn large_and_compacted_files_are_left_as_they_are() {
        let mut compacted = shard(0, "b", 10, 2);
        compacted["chunk"] = serde_json::Value::Null;
        compacted["spans"] =
            serde_json::json!([{"bucket": 0, "buckets": 2, "chunk": "b", "rows": 1}]);
        let m = manifest(vec![
            shard(0, "a", 10, 1),
            compacted,
            shard(0, "c", 10, 3),
            shard(0, "d", 100, 4),
            shard(0, "e", 10, 5),
            shard(0, "f", 10, 6),
        ]);
        let bins: Vec<Vec<&str>> = plan(&m, 50)
            .iter()
            .map(|bin| {
                bin.files
                    .iter()
                    .map(|f| f.chunk.as_deref().unwrap())
                    .collect()
            })
            .collect();
        // The compacted b and d, at the target, stay; a, c, e and f (40 bytes) pack into one.
        assert_eq!(bins, vec![vec!["a", "c", "e", "f"]]);
        // Nothing to compact: no bins.
        assert!(plan(&manifest(vec![shard(0, "a", 10, 1)]), 50).is_empty());
    }
}
