//! Byte-sized Parquet shards of one split of one table.
//!
//! Rows reach the Parquet writer in fixed chunks of [`CHUNK_ROWS`] whatever batches the caller
//! hands in: row-group and shard boundaries then depend only on the sequence of rows, so the
//! same rows give byte-identical files however they were batched upstream.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use sha2::{Digest, Sha256};

use super::{KV_CONFIG_HASH, KV_ENGINE_VERSION, KV_SCHEMA_FINGERPRINT, KV_TABLE};
use crate::error::{Error, Result};
use crate::schema::{schema_fingerprint, TableKind};

/// Rows per write into the Parquet writer; also the granularity of shard roll-over.
pub(crate) const CHUNK_ROWS: usize = 1024;

/// Parquet settings shared by every shard of a dataset.
#[derive(Clone, Debug)]
pub(crate) struct ShardSettings {
    pub config_hash: String,
    /// Roll to the next shard once this many encoded bytes are written.
    pub shard_bytes: u64,
    pub max_row_group_rows: usize,
    /// Cap on a row group's estimated encoded size before compression.
    pub max_row_group_bytes: usize,
    pub zstd_level: i32,
}

impl ShardSettings {
    pub(crate) fn properties(&self, table: TableKind) -> Result<WriterProperties> {
        let level = ZstdLevel::try_new(self.zstd_level)
            .map_err(|e| Error::parquet(format!("zstd level {}", self.zstd_level), e))?;
        // A row group must close often enough for a shard to roll near its byte target.
        let row_group_bytes = self
            .max_row_group_bytes
            .min((self.shard_bytes / 4).try_into().unwrap_or(usize::MAX))
            .max(1);
        let metadata = vec![
            KeyValue::new(
                KV_ENGINE_VERSION.to_string(),
                crate::ENGINE_VERSION.to_string(),
            ),
            KeyValue::new(KV_CONFIG_HASH.to_string(), self.config_hash.clone()),
            KeyValue::new(KV_TABLE.to_string(), table.name().to_string()),
            KeyValue::new(
                KV_SCHEMA_FINGERPRINT.to_string(),
                schema_fingerprint(&table.schema()),
            ),
        ];
        Ok(WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_max_row_group_row_count(Some(self.max_row_group_rows.max(1)))
            .set_max_row_group_bytes(Some(row_group_bytes))
            .set_key_value_metadata(Some(metadata))
            .build())
    }
}

/// A file writer that hashes and counts what passes through it, so a shard's checksum is known
/// when it closes without reading it back.
struct HashingFile {
    file: File,
    hasher: Sha256,
    bytes: u64,
}

impl Write for HashingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// A closed, synced shard waiting in the staging directory for its final name.
#[derive(Clone, Debug)]
pub(crate) struct FinishedShard {
    pub table: TableKind,
    pub split: String,
    pub staged_path: PathBuf,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
    /// `(bucket, buckets)` for a shard of a bucketed split: its file is named by the bucket.
    pub bucket: Option<(usize, usize)>,
    /// The bucket chunk the shard holds (see [`FileEntry::chunk`](super::FileEntry)).
    pub chunk: Option<String>,
}

/// Finished shards kept until the commit, encoded one after another in one buffer. A long run
/// closes tens of thousands of shards while it works; as four or five small allocations each
/// they stay scattered over the allocator's pages among the run's short-lived objects, which
/// then cannot be given back (about 1 KB of resident memory a shard, measured), where one
/// buffer holds them in about 300 bytes each.
#[derive(Debug, Default)]
pub(crate) struct FinishedShards {
    /// JSON lines of [`EncodedShard`].
    encoded: Vec<u8>,
    staging: PathBuf,
}

/// A [`FinishedShard`] as [`FinishedShards`] keeps it: its file by name in the staging
/// directory (staged names are ASCII: table, split, bucket and numbers).
#[derive(serde::Serialize, serde::Deserialize)]
struct EncodedShard {
    table: TableKind,
    split: String,
    name: String,
    rows: u64,
    bytes: u64,
    sha256: String,
    bucket: Option<(usize, usize)>,
    chunk: Option<String>,
}

impl FinishedShards {
    /// An empty list of shards staged in `staging`.
    pub(crate) fn new(staging: &Path) -> FinishedShards {
        FinishedShards {
            encoded: Vec::new(),
            staging: staging.to_path_buf(),
        }
    }

    pub(crate) fn extend(&mut self, shards: Vec<FinishedShard>) -> Result<()> {
        for shard in shards {
            let name = match (shard.staged_path.parent(), shard.staged_path.file_name()) {
                (Some(dir), Some(name)) if dir == self.staging => name.to_str(),
                _ => None,
            };
            let Some(name) = name else {
                return Err(Error::invalid(
                    format!("staged shard {}", shard.staged_path.display()),
                    format!("not a file of {}", self.staging.display()),
                ));
            };
            let encoded = EncodedShard {
                table: shard.table,
                split: shard.split,
                name: name.to_string(),
                rows: shard.rows,
                bytes: shard.bytes,
                sha256: shard.sha256,
                bucket: shard.bucket,
                chunk: shard.chunk,
            };
            serde_json::to_writer(&mut self.encoded, &encoded)
                .map_err(|e| Error::invalid("a finished shard", e.to_string()))?;
            self.encoded.push(b'\n');
        }
        Ok(())
    }

    /// Every shard kept, in the order they were added, and empties the list.
    pub(crate) fn take(&mut self) -> Result<Vec<FinishedShard>> {
        let encoded = std::mem::take(&mut self.encoded);
        let mut shards = Vec::new();
        for line in encoded.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let shard: EncodedShard = serde_json::from_slice(line)
                .map_err(|e| Error::invalid("a finished shard read back", e.to_string()))?;
            shards.push(FinishedShard {
                table: shard.table,
                split: shard.split,
                staged_path: self.staging.join(shard.name),
                rows: shard.rows,
                bytes: shard.bytes,
                sha256: shard.sha256,
                bucket: shard.bucket,
                chunk: shard.chunk,
            });
        }
        Ok(shards)
    }
}

struct OpenShard {
    path: PathBuf,
    writer: ArrowWriter<HashingFile>,
    rows: u64,
}

/// Writes one split of one table as a sequence of shards in a staging directory.
pub(crate) struct SplitWriter {
    table: TableKind,
    split: String,
    staging: PathBuf,
    settings: ShardSettings,
    /// `None` for a split that is never divided (the rejected ledger).
    shard_bytes: Option<u64>,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    open: Option<OpenShard>,
    finished: Vec<FinishedShard>,
    bucket: Option<(usize, usize)>,
    chunk: Option<String>,
    /// Tells the staged files of a bucket's writers apart (their chunk key may change).
    serial: u64,
}

impl SplitWriter {
    pub(crate) fn new(
        table: TableKind,
        split: &str,
        staging: &Path,
        settings: ShardSettings,
        sharded: bool,
    ) -> SplitWriter {
        let shard_bytes = sharded.then_some(settings.shard_bytes.max(1));
        SplitWriter {
            table,
            split: split.to_string(),
            staging: staging.to_path_buf(),
            settings,
            shard_bytes,
            pending: Vec::new(),
            pending_rows: 0,
            open: None,
            finished: Vec::new(),
            bucket: None,
            chunk: None,
            serial: 0,
        }
    }

    /// A writer for one chunk of bucket `bucket` of `buckets` of a split: one shard, never
    /// divided, named by the bucket.
    pub(crate) fn bucket(
        table: TableKind,
        split: &str,
        staging: &Path,
        settings: ShardSettings,
        bucket: (usize, usize),
        chunk: &str,
        serial: u64,
    ) -> SplitWriter {
        let mut writer = SplitWriter::new(table, split, staging, settings, false);
        writer.bucket = Some(bucket);
        writer.chunk = Some(chunk.to_string());
        writer.serial = serial;
        writer
    }

    /// Gives the chunk the writer holds the key `chunk`, for its shards written and to come.
    pub(crate) fn set_chunk(&mut self, chunk: &str) {
        self.chunk = Some(chunk.to_string());
        for shard in &mut self.finished {
            shard.chunk = Some(chunk.to_string());
        }
    }

    /// Queues `batch` and writes every full chunk. Memory stays bounded by one chunk plus one
    /// row group per split.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.pending_rows += batch.num_rows();
        self.pending.push(batch.clone());
        if self.pending_rows < CHUNK_ROWS {
            return Ok(());
        }
        let all = self.take_pending()?;
        let mut offset = 0;
        while all.num_rows() - offset >= CHUNK_ROWS {
            self.write_chunk(&all.slice(offset, CHUNK_ROWS))?;
            offset += CHUNK_ROWS;
        }
        if offset < all.num_rows() {
            self.pending_rows = all.num_rows() - offset;
            self.pending.push(all.slice(offset, self.pending_rows));
        }
        Ok(())
    }

    fn take_pending(&mut self) -> Result<RecordBatch> {
        let schema = self.table.schema();
        let all = concat_batches(&schema, &self.pending)
            .map_err(|e| Error::arrow(format!("collecting {} rows", self.table.name()), e))?;
        self.pending.clear();
        self.pending_rows = 0;
        Ok(all)
    }

    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        if self.open.is_none() {
            self.open = Some(self.open_shard()?);
        }
        let Some(open) = self.open.as_mut() else {
            return Ok(()); // unreachable: opened just above
        };
        open.writer
            .write(chunk)
            .map_err(|e| Error::parquet(format!("writing {}", open.path.display()), e))?;
        open.rows += chunk.num_rows() as u64;
        let full = self
            .shard_bytes
            .is_some_and(|target| open.writer.bytes_written() as u64 >= target);
        if full {
            self.close_shard()?;
        }
        Ok(())
    }

    fn open_shard(&self) -> Result<OpenShard> {
        let index = self.finished.len();
        // Staged names only need to be unique within the staging directory.
        let bucket = match (self.bucket, &self.chunk) {
            (Some((b, _)), Some(_)) => format!("b{b:05}-w{:08}-", self.serial),
            (Some((b, _)), None) => format!("b{b:05}-"),
            _ => String::new(),
        };
        let path = self.staging.join(format!(
            "{}-{}-{bucket}{index:05}.parquet",
            self.table.name(),
            self.split
        ));
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let sink = HashingFile {
            file,
            hasher: Sha256::new(),
            bytes: 0,
        };
        let writer = ArrowWriter::try_new(
            sink,
            self.table.schema(),
            Some(self.settings.properties(self.table)?),
        )
        .map_err(|e| Error::parquet(format!("creating {}", path.display()), e))?;
        Ok(OpenShard {
            path,
            writer,
            rows: 0,
        })
    }

    fn close_shard(&mut self) -> Result<()> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let OpenShard {
            path,
            mut writer,
            rows,
        } = open;
        // `finish` writes the footer and flushes it, so a failed write (a full disk) stays the
        // I/O error it is; `into_inner` would turn a failed flush into text. The data must be
        // on disk before a manifest names it.
        writer
            .finish()
            .map_err(|e| Error::parquet(format!("finishing {}", path.display()), e))?;
        let sink = writer.inner();
        sink.file.sync_all().map_err(|e| Error::io(&path, e))?;
        self.finished.push(FinishedShard {
            table: self.table,
            split: self.split.clone(),
            staged_path: path,
            rows,
            bytes: sink.bytes,
            sha256: hex::encode(sink.hasher.clone().finalize()),
            bucket: self.bucket,
            chunk: self.chunk.clone(),
        });
        Ok(())
    }

    /// Writes what is queued, closes the last shard and returns every shard in order. A split
    /// with no rows yields one empty file only when `keep_empty` (the rejected ledger, which is
    /// always written).
    pub(crate) fn finish(mut self, keep_empty: bool) -> Result<Vec<FinishedShard>> {
        if self.pending_rows > 0 {
            let rest = self.take_pending()?;
            self.write_chunk(&rest)?;
        }
        if self.finished.is_empty() && self.open.is_none() && keep_empty {
            self.open = Some(self.open_shard()?);
        }
        self.close_shard()?;
        Ok(self.finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(staging: &Path, name: &str, chunk: Option<&str>) -> FinishedShard {
        FinishedShard {
            table: TableKind::Samples,
            split: "train".into(),
            staged_path: staging.join(name),
            rows: 7,
            bytes: 1234,
            sha256: "ab".repeat(32),
            bucket: Some((3, 8)),
            chunk: chunk.map(str::to_string),
        }
    }

    #[test]
    fn finished_shards_come_back_as_they_were_kept() {
        let staging = Path::new("/data/out/.capflow-tmp-1-x");
        let mut kept = FinishedShards::new(staging);
        let shards = vec![
            shard(
                staging,
                "samples-train-b00003-w00000001-00000.parquet",
                Some("img 7"),
            ),
            shard(
                staging,
                "samples-train-b00003-w00000002-00000.parquet",
                None,
            ),
        ];
        kept.extend(shards[..1].to_vec()).unwrap();
        kept.extend(shards[1..].to_vec()).unwrap();
        let back = kept.take().unwrap();
        assert_eq!(format!("{back:?}"), format!("{shards:?}"));
        assert!(kept.take().unwrap().is_empty());
        // A file outside the staging directory is refused, not kept under a wrong path.
        let elsewhere = shard(Path::new("/tmp"), "x.parquet", None);
        assert!(kept.extend(vec![elsewhere]).is_err());
    }
}
