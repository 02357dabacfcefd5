//! `manifest.json`: what a committed dataset holds, with enough to check every byte of it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ingest::IngestCounts;
use crate::schema::TableKind;

/// The manifest's file name at the top of a dataset.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The value of [`Manifest::format`].
pub const MANIFEST_FORMAT: &str = "capflow-dataset";
/// The layout version this code writes and reads.
pub const MANIFEST_FORMAT_VERSION: u32 = 1;

/// One Parquet file of a dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the dataset directory, `/`-separated (`data/captions-00000-of-00001-….parquet`).
    pub path: String,
    pub table: TableKind,
    /// The shard group the file belongs to: the table name, or the sample split.
    pub split: String,
    pub rows: u64,
    pub bytes: u64,
    /// SHA-256 of the file's bytes, lowercase hex.
    pub sha256: String,
    /// For a shard of a `capflow run` bucket, the bucket chunk it holds: the chunk's last image
    /// id, or empty for the bucket's open last chunk (see `docs/incremental.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<String>,
    /// For a file `capflow optimize` compacted, the bucket chunks it holds, in row order: each
    /// chunk's rows are consecutive, the first chunk's at row 0 (see `docs/datasets.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<ChunkSpan>,
}

/// One bucket chunk inside a compacted file ([`FileEntry::spans`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSpan {
    /// The chunk's bucket, of `buckets`.
    pub bucket: usize,
    pub buckets: usize,
    /// The chunk's last image id, empty for the bucket's open last chunk.
    pub chunk: String,
    pub rows: u64,
}

/// The rows of one bucket chunk in one file: a whole chunk shard, or a span of a compacted
/// file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPiece<'a> {
    pub file: &'a FileEntry,
    pub bucket: usize,
    pub buckets: usize,
    pub chunk: &'a str,
    /// The piece's first row in the file.
    pub offset: u64,
    pub rows: u64,
}

impl FileEntry {
    /// The bucket chunks this file holds, in row order: one for a chunk shard of a `capflow
    /// run` (`<split>-<bucket>-of-<buckets>-…` with a `chunk`), one per span for a compacted
    /// file, none for a file of no bucket chunk (an ingest's shard, the ledger).
    pub fn chunk_pieces(&self) -> Vec<ChunkPiece<'_>> {
        if !self.spans.is_empty() {
            let mut offset = 0;
            return self
                .spans
                .iter()
                .map(|span| {
                    let piece = ChunkPiece {
                        file: self,
                        bucket: span.bucket,
                        buckets: span.buckets,
                        chunk: &span.chunk,
                        offset,
                        rows: span.rows,
                    };
                    offset += span.rows;
                    piece
                })
                .collect();
        }
        match (&self.chunk, super::writer::shard_index(&self.path)) {
            (Some(chunk), Some((bucket, buckets))) => vec![ChunkPiece {
                file: self,
                bucket,
                buckets,
                chunk,
                offset: 0,
                rows: self.rows,
            }],
            _ => Vec::new(),
        }
    }

    /// Whether every row of this file belongs to a bucket chunk of `buckets` buckets.
    pub fn in_chunks_of(&self, buckets: usize) -> bool {
        let pieces = self.chunk_pieces();
        !pieces.is_empty() && pieces.iter().all(|p| p.buckets == buckets)
    }
}

/// Rows in, rows out, rejections and time of one stage of the run that made the dataset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageMetrics {
    pub name: String,
    pub rows_in: u64,
    pub rows_out: u64,
    pub rejected: u64,
    pub elapsed_ms: u64,
}

/// Per-table totals and the schema fingerprint the table was written with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSummary {
    /// [`crate::schema::schema_fingerprint`] of the table's schema.
    pub schema_fingerprint: String,
    pub rows: u64,
    pub files: u64,
    /// Rows per split.
    pub splits: BTreeMap<String, u64>,
}

/// What remains of an earlier version in the manifests that replaced it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionSummary {
    pub version: u64,
    pub created_at: String,
    pub engine_version: String,
    pub config_hash: String,
    pub counts: IngestCounts,
    pub rows: BTreeMap<String, u64>,
    /// SHA-256 of that version's `manifest.json`, to recognise it if a copy turns up.
    pub manifest_sha256: String,
    /// The corpus-level models that version's samples were computed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<ModelsUsed>,
}

/// The corpus-level models a version's samples were computed with (SSA's quality scorer and
/// word vectors, the relatedness encoder, CutSwap's vocabulary and clusters); absent from a
/// manifest when the recipe has none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelsUsed {
    /// How the run had them.
    pub source: ModelsSource,
    /// The digest of the rows they were fitted on: for models fitted on the inputs or kept,
    /// their artifact's id, the name of `models/<id>.bin` in the state that keeps them (absent
    /// when no state keeps them: a run without `--state` fits them and lets them go); for
    /// `[[models.corpus]]`, the digest of the corpus's rows (the corpus, not an artifact, is
    /// what is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// [`ModelsUsed::source`], written in the manifest as [`as_str`](Self::as_str) says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModelsSource {
    /// Fitted on the run's own inputs.
    #[serde(rename = "fitted on the inputs")]
    Fitted,
    /// Fitted by an earlier run and kept in a state (`--state`, `--models`).
    #[serde(rename = "kept from an earlier fit")]
    Kept,
    /// Fitted on the spec's fixed `[[models.corpus]]`.
    #[serde(rename = "fitted on [[models.corpus]]")]
    Corpus,
}

impl ModelsSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelsSource::Fitted => "fitted on the inputs",
            ModelsSource::Kept => "kept from an earlier fit",
            ModelsSource::Corpus => "fitted on [[models.corpus]]",
        }
    }
}

/// The content of `manifest.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`MANIFEST_FORMAT`].
    pub format: String,
    /// The dataset layout version ([`MANIFEST_FORMAT_VERSION`]).
    pub format_version: u32,
    /// 1 for the first commit into a directory, +1 for each commit after it.
    pub version: u64,
    pub engine_version: String,
    pub config_hash: String,
    /// Wall-clock time of the commit (RFC 3339, UTC). Informational only.
    pub created_at: String,
    /// Input records read, accepted and rejected over the whole run.
    pub counts: IngestCounts,
    pub stages: Vec<StageMetrics>,
    /// What the method stages computed in this version and did not keep, by method and reason
    /// (`{"ssa": {"quality score at or below the threshold": 13, ...}}`); absent when nothing
    /// was dropped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped: BTreeMap<String, BTreeMap<String, u64>>,
    /// Keyed by table name.
    pub tables: BTreeMap<String, TableSummary>,
    pub files: Vec<FileEntry>,
    /// Earlier versions, oldest first.
    pub history: Vec<VersionSummary>,
    /// The samples this version added and retracted relative to the previous one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog: Option<ChangelogEntry>,
    /// The corpus-level models this version's samples were computed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<ModelsUsed>,
    /// Every table's version in its Delta Lake log (`data/<table>/_delta_log/`), by table
    /// name: what this version of the dataset is in Delta's terms (`docs/datasets.md`).
    /// Absent from datasets written before their tables were Delta tables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub delta_versions: BTreeMap<String, u64>,
    /// For a version `capflow optimize` committed: the version whose rows it holds in other
    /// files (the last version a run committed), which a state compares datasets by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted_from: Option<DataVersion>,
    /// What the dataset card says beyond the files (description, licence, languages, tasks,
    /// sources), so that a commit without the recipe (`capflow optimize`) keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<CardRecord>,
}

/// A committed version named by its number and its manifest's SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataVersion {
    pub version: u64,
    pub manifest_sha256: String,
}

/// [`Manifest::card`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    pub language: Vec<String>,
    pub task_categories: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_datasets: Vec<String>,
}

/// `changes/v<N>.parquet`: the sample rows a version added (`diff` = +1) and retracted (−1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogEntry {
    /// Relative to the dataset directory (`changes/v3.parquet`).
    pub path: String,
    pub added: u64,
    pub retracted: u64,
    pub bytes: u64,
    pub sha256: String,
}

impl Manifest {
    /// The files of one table, in shard order.
    pub fn table_files(&self, table: TableKind) -> impl Iterator<Item = &FileEntry> {
        self.files.iter().filter(move |f| f.table == table)
    }

    /// Total rows of one table (0 when absent).
    pub fn table_rows(&self, table: TableKind) -> u64 {
        self.tables.get(table.name()).map_or(0, |t| t.rows)
    }

    /// The version whose rows this one holds: itself, or for a version `capflow optimize`
    /// committed, the version it compacted (`manifest_sha256` is this manifest's).
    pub fn data_version(&self, manifest_sha256: &str) -> DataVersion {
        self.compacted_from.clone().unwrap_or_else(|| DataVersion {
            version: self.version,
            manifest_sha256: manifest_sha256.to_string(),
        })
    }

    /// This version as an entry of a later manifest's history.
    pub(crate) fn summary(&self, manifest_sha256: String) -> VersionSummary {
        VersionSummary {
            version: self.version,
            created_at: self.created_at.clone(),
            engine_version: self.engine_version.clone(),
            config_hash: self.config_hash.clone(),
            counts: self.counts,
            rows: self
                .tables
                .iter()
                .map(|(name, t)| (name.clone(), t.rows))
                .collect(),
            manifest_sha256,
            models: self.models.clone(),
        }
    }

    /// Pretty JSON with a trailing newline, as written to disk.
    pub(crate) fn to_json(&self) -> Result<String> {
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::invalid("manifest", e.to_string()))?;
        text.push('\n');
        Ok(text)
    }
}

/// Reads `DIR/manifest.json`. A directory that does not exist is an I/O "not found" error
/// naming it, as for any missing input (exit 4); a directory without a manifest holds no
/// committed dataset, which is bad input (exit 3).
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() => {
            return Err(Error::invalid(
                format!("dataset {}", dir.display()),
                "no manifest.json: not a committed capflow dataset (an interrupted write \
                 leaves none; run the command that writes it again)",
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Error::io(dir, e)),
        Err(e) => return Err(Error::io(&path, e)),
    };
    parse_manifest(&path, &text)
}

/// Reads the manifest of version `version` of the dataset in `dir`: the current one, or one
/// kept under `versions/`.
pub fn read_manifest_version(dir: &Path, version: u64) -> Result<Manifest> {
    let current = read_manifest(dir)?;
    if current.version == version {
        return Ok(current);
    }
    let path = super::version_manifest_path(dir, version);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let kept: Vec<String> = (1..current.version)
                .filter(|v| super::version_manifest_path(dir, *v).exists())
                .map(|v| v.to_string())
                .collect();
            return Err(Error::invalid(
                format!("{} version {version}", dir.display()),
                format!(
                    "not kept (current version {}; kept earlier versions: {})",
                    current.version,
                    if kept.is_empty() {
                        "none".to_string()
                    } else {
                        kept.join(", ")
                    }
                ),
            ));
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    parse_manifest(&path, &text)
}

pub(crate) fn parse_manifest(path: &Path, text: &[u8]) -> Result<Manifest> {
    let manifest: Manifest = serde_json::from_slice(text).map_err(|e| {
        Error::record(
            path.display().to_string(),
            format!("line {}", e.line()),
            format!("not a capflow manifest: {e}"),
        )
    })?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(Error::invalid(
            path.display().to_string(),
            format!(
                "`format` is {:?}, expected {MANIFEST_FORMAT:?}",
                manifest.format
            ),
        ));
    }
    if manifest.format_version > MANIFEST_FORMAT_VERSION {
        return Err(Error::invalid(
            path.display().to_string(),
            format!(
                "dataset layout version {} is newer than this capflow ({}) reads; upgrade capflow",
                manifest.format_version, MANIFEST_FORMAT_VERSION
            ),
        ));
    }
    Ok(manifest)
}
