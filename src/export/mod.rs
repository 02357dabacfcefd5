//! Parquet datasets: byte-sized shards, the manifest, the atomic commit and the dataset card.
//!
//! A capflow dataset is a directory:
//!
//! ```text
//! DIR/manifest.json                                           the commit point: files, rows, checksums, counts
//! DIR/README.md                                               dataset card (Hugging Face metadata and `configs:`)
//! DIR/rejected.parquet                                        the rejected-record ledger (always present)
//! DIR/data/<table>/<split>-NNNNN-of-NNNNN-<content>.parquet   a table's shards, grouped by split name
//! DIR/data/<table>/_delta_log/                                the table's Delta Lake log ([`delta`])
//! ```
//!
//! Every table has a directory of its own, a Delta Lake table. `<split>` is the table name for
//! capflow's input tables (`data/captions/captions-00000-of-00002-….parquet`) and the sample
//! split for the `samples` table (`data/samples/train-00000-of-00001-….parquet`,
//! `validation-…`, `test-…`; see [`crate::schema::canonical_split`]). `<content>`
//! is the first 16 hex digits of the shard's SHA-256: shard names are unique per content, so a
//! new version is written beside the old one and the old manifest stays valid until the new one
//! is renamed over it (see `docs/decisions/dataset-commit.md`).
//!
//! Writing goes through a [`DatasetWriter`]; reading back through [`read_manifest`],
//! [`read_table`] and [`validate`]. [`DatasetSink`] adapts the writer to the readers'
//! [`RecordSink`](crate::ingest::RecordSink).

pub(crate) mod abort;
mod card;
pub(crate) mod changelog;
pub(crate) mod delta;
pub(crate) mod fsutil;
mod manifest;
mod optimize;
mod reader;
pub mod samples;
pub(crate) mod shard;
mod sink;
pub mod synthetic;
mod vacuum;
mod validate;
mod writer;

pub use card::{render_card, size_category, CardMetadata};
pub use changelog::{read_changelog, ChangelogWriter, CHANGES_DIR};
pub use manifest::{
    read_manifest, read_manifest_version, CardRecord, ChangelogEntry, ChunkPiece, ChunkSpan,
    DataVersion, FileEntry, Manifest, ModelsSource, ModelsUsed, StageMetrics, TableSummary,
    VersionSummary, MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_FORMAT_VERSION,
};
pub use optimize::{optimize, OptimizeReport, TableFiles, DEFAULT_TARGET_FILE_BYTES};
pub(crate) use reader::{dataset_file_path, piece_batches};
pub use reader::{
    read_file_rows, read_file_rows_range, read_split, read_table, read_table_of, TableReader,
};
pub use sink::{DatasetSink, DEFAULT_FLUSH_ROWS};
pub use vacuum::{vacuum, VacuumReport};
pub(crate) use validate::safe_relative_path;
pub use validate::{validate, Problem, ValidationReport};
pub use writer::{shard_index, Committed, DatasetWriter, WriterOptions, DEFAULT_SHARD_BYTES};

use sha2::{Digest, Sha256};

/// Key-value metadata key holding [`crate::ENGINE_VERSION`] in every Parquet file.
pub const KV_ENGINE_VERSION: &str = "capflow.engine_version";
/// Key-value metadata key holding the run's configuration hash.
pub const KV_CONFIG_HASH: &str = "capflow.config_hash";
/// Key-value metadata key holding the table name ([`crate::schema::TableKind::name`]).
pub const KV_TABLE: &str = "capflow.table";
/// Key-value metadata key holding [`crate::schema::schema_fingerprint`] of the table's schema.
pub const KV_SCHEMA_FINGERPRINT: &str = "capflow.schema_fingerprint";

/// Directory of the shards inside a dataset.
pub const DATA_DIR: &str = "data";
/// The rejected-record ledger's stable name at the top of a dataset.
pub const REJECTED_FILE: &str = "rejected.parquet";
/// The dataset card's name.
pub const CARD_FILE: &str = "README.md";
/// Directory of every committed version's manifest, when versions are retained.
pub const VERSIONS_DIR: &str = "versions";

/// `DIR/versions/v<N>.json`: the manifest of version `N`.
pub fn version_manifest_path(dir: &std::path::Path, version: u64) -> std::path::PathBuf {
    dir.join(VERSIONS_DIR).join(format!("v{version}.json"))
}

/// The configuration hash of a run: SHA-256 of the configuration's compact JSON.
///
/// Callers pass what determines the output (a dataflow spec, an ingest format), never paths to
/// temporary files or times, so that the same configuration always hashes the same.
pub fn config_hash(config: &serde_json::Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(config.to_string().as_bytes());
    hex::encode(hasher.finalize())
}

/// Whether `split` can name a group of shards: ASCII letters, digits and `_`, optionally in
/// dot-separated parts. This is the split-name rule of Hugging Face datasets (`\w+(\.\w+)*`,
/// ASCII only) and keeps `-` free as the separator of `<split>-NNNNN-of-NNNNN`.
pub fn is_valid_split_name(split: &str) -> bool {
    !split.is_empty()
        && split.len() <= 128
        && split.split('.').all(|part| {
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names_follow_the_hugging_face_rule() {
        for ok in ["train", "captions", "scene_graphs", "train.en", "v2"] {
            assert!(is_valid_split_name(ok), "{ok}");
        }
        for bad in ["", "a-b", ".train", "train.", "a..b", "tr ain", "ü", "../x"] {
            assert!(!is_valid_split_name(bad), "{bad}");
        }
    }

    #[test]
    fn config_hash_is_sha256_of_compact_json() {
        // sha256 of the 2 bytes `{}`, computed independently with `printf '{}' | sha256sum`.
        assert_eq!(
            config_hash(&serde_json::json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
