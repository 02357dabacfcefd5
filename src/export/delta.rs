//! Every table of a dataset is a Delta Lake table: `data/<table>/` holds the table's Parquet
//! shards and its transaction log, `data/<table>/_delta_log/`, written with delta-rs
//! (`deltalake-core`), so that Spark, DuckDB, polars and pandas (through `deltalake`) read each
//! table with its versions (time travel) and the `samples` table's change data feed.
//!
//! # How a version is committed
//!
//! capflow writes the shards itself (content-named, [`super::writer`]); delta-rs writes the
//! log. A capflow version commits, for every table whose files changed, one Delta version: an
//! `add` for each new shard, a `remove` for each shard the table no longer holds, and for the
//! `samples` table a `cdc` file (`_change_data/`) holding the version's changelog with Delta's
//! `_change_type` (`insert`, `delete`), so that Delta's change data feed between two versions is
//! capflow's changelog. A table whose files did not change gets no Delta version. Then the
//! manifest, which names every table's Delta version (`delta_versions`), is renamed into place:
//! that rename stays the one commit point of the dataset.
//!
//! Delta versions committed by a run that died before its manifest are rolled back by the next
//! writer, which holds the dataset's lock ([`roll_back_uncommitted`]): their log entries and
//! change data files are removed, so every table is again at the version the manifest names.
//! A Delta commit is a put-if-absent of its log entry: a second writer that reached the same
//! table version fails instead of overwriting it, whatever the lock did.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, Int8Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake_core::kernel::transaction::{CommitData, CommitProperties};
use deltalake_core::kernel::{Action, Add, AddCDCFile, Remove, StructType};
use deltalake_core::logstore::CommitOrBytes;
use deltalake_core::operations::create::CreateBuilder;
use deltalake_core::protocol::{DeltaOperation, SaveMode};
use deltalake_core::{DeltaTable, DeltaTableBuilder, TableProperty};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::fsutil;
use super::manifest::{FileEntry, Manifest};
use super::writer::table_dir;
use crate::error::{Error, Result};
use crate::schema::TableKind;

/// A Delta table's log directory, inside the table's directory.
pub const DELTA_LOG: &str = "_delta_log";
/// A Delta table's change data files, inside the table's directory.
pub const CHANGE_DATA: &str = "_change_data";
/// Delta's change data feed column.
const CHANGE_TYPE: &str = "_change_type";
/// The changelog's column that [`CHANGE_TYPE`] replaces.
const DIFF_COLUMN: &str = "diff";

/// Whether `name`, an entry of a table's directory, is Delta's rather than a shard.
pub fn is_delta_entry(name: &str) -> bool {
    name == DELTA_LOG || name == CHANGE_DATA
}

/// What a version's Delta commits need beyond the files: the changelog of the `samples`
/// table, as capflow wrote it (`changes/v<N>.parquet`).
pub(crate) struct DeltaVersion<'a> {
    pub dir: &'a Path,
    pub staging: &'a Path,
    /// The capflow version being committed.
    pub version: u64,
    pub previous: Option<&'a Manifest>,
    pub files: &'a [FileEntry],
    pub changelog: Option<PathBuf>,
    /// For a version that only rearranges the previous one's rows into other files
    /// (`capflow optimize`), the target file size it compacted to: its commits are Delta's
    /// `OPTIMIZE`, changing no data.
    pub rearranged: Option<u64>,
}

/// Commits one Delta version for every table whose files differ from the previous manifest's,
/// creating the tables that are new, and returns every table's Delta version (for the
/// manifest's `delta_versions`).
pub(crate) fn commit_tables(version: &DeltaVersion) -> Result<BTreeMap<String, u64>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io(version.dir, e))?;
    let mut versions = BTreeMap::new();
    for table in TableKind::ALL {
        let files: Vec<&FileEntry> = version.files.iter().filter(|f| f.table == table).collect();
        let previous = version.previous.and_then(|m| {
            let at = *m.delta_versions.get(table.name())?;
            let files: Vec<&FileEntry> = m.files.iter().filter(|f| f.table == table).collect();
            Some((at, files))
        });
        let committed = match previous {
            None if files.is_empty() => continue,
            None => runtime.block_on(create_table(version, table, &files))?,
            Some((at, old)) => {
                runtime.block_on(commit_changes(version, table, at, &old, &files))?
            }
        };
        versions.insert(table.name().to_string(), committed);
    }
    Ok(versions)
}

/// `data/<table>/` as the URL delta-rs opens.
fn table_url(dir: &Path, table: TableKind) -> Result<url::Url> {
    let path = dir.join(table_dir(table));
    fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
    let absolute = fs::canonicalize(&path).map_err(|e| Error::io(&path, e))?;
    url::Url::from_directory_path(&absolute).map_err(|()| {
        Error::invalid(
            format!("{}", absolute.display()),
            "not a path a Delta table can be opened at",
        )
    })
}

fn delta_error(dir: &Path, table: TableKind, e: impl std::fmt::Display) -> Error {
    Error::io(
        dir.join(table_dir(table)).join(DELTA_LOG),
        std::io::Error::other(format!("Delta Lake commit of table {}: {e}", table.name())),
    )
}

/// Commit properties of a table's creation (later versions are committed through the log
/// store, [`commit_changes`], with neither hook): no retry at another version (a concurrent
/// commit is an error, never merged), no checkpoint (a rolled-back version must be a log entry
/// and nothing else), no clean-up of old log entries (time travel stays possible).
fn commit_properties(version: u64) -> CommitProperties {
    CommitProperties::default()
        .with_metadata(app_metadata(version))
        .with_max_retries(0)
        .with_create_checkpoint(false)
        .with_cleanup_expired_logs(Some(false))
}

/// What every commit records of capflow in its `commitInfo`.
fn app_metadata(version: u64) -> HashMap<String, serde_json::Value> {
    let mut metadata = HashMap::new();
    metadata.insert(
        "capflowVersion".to_string(),
        serde_json::Value::from(version),
    );
    metadata.insert(
        "engineVersion".to_string(),
        serde_json::Value::from(crate::ENGINE_VERSION),
    );
    metadata
}

/// The name of `file` inside its table's directory.
fn file_name(file: &FileEntry) -> &str {
    file.path.rsplit('/').next().unwrap_or(&file.path)
}

fn add_action(dir: &Path, file: &FileEntry, data_change: bool) -> Action {
    // Without shared storage, another process's shards are on its own host until `capflow
    // merge` brings them: their time is the commit's.
    let modification_time = fs::metadata(dir.join(&file.path))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(now_ms, |d| d.as_millis() as i64);
    Action::Add(Add {
        path: file_name(file).to_string(),
        partition_values: HashMap::new(),
        size: file.bytes as i64,
        modification_time,
        data_change,
        stats: Some(format!("{{\"numRecords\":{}}}", file.rows)),
        ..Add::default()
    })
}

fn remove_action(file: &FileEntry, now_ms: i64, data_change: bool) -> Action {
    Action::Remove(Remove {
        path: file_name(file).to_string(),
        data_change,
        deletion_timestamp: Some(now_ms),
        extended_file_metadata: Some(true),
        partition_values: Some(HashMap::new()),
        size: Some(file.bytes as i64),
        ..Remove::default()
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The table's columns as Delta's schema.
fn delta_schema(table: TableKind) -> Result<StructType> {
    let schema = table.schema();
    schema.as_ref().try_into_kernel().map_err(|e| {
        Error::invalid(
            format!("table {}", table.name()),
            format!("its schema has no Delta Lake equivalent: {e}"),
        )
    })
}

async fn create_table(
    version: &DeltaVersion<'_>,
    table: TableKind,
    files: &[&FileEntry],
) -> Result<u64> {
    let url = table_url(version.dir, table)?;
    let log_store = DeltaTableBuilder::from_url(url)
        .and_then(|b| b.build_storage())
        .map_err(|e| delta_error(version.dir, table, e))?;
    let mut actions = Vec::with_capacity(files.len());
    for file in files {
        actions.push(add_action(version.dir, file, true));
    }
    let schema = delta_schema(table)?;
    let mut builder = CreateBuilder::new()
        .with_log_store(log_store)
        .with_table_name(table.name())
        .with_columns(schema.fields().cloned())
        .with_save_mode(SaveMode::ErrorIfExists)
        .with_actions(actions)
        .with_commit_properties(commit_properties(version.version));
    if table == TableKind::Samples {
        builder =
            builder.with_configuration_property(TableProperty::EnableChangeDataFeed, Some("true"));
    }
    let created: DeltaTable = builder
        .await
        .map_err(|e| delta_error(version.dir, table, e))?;
    delta_version(version.dir, table, &created)
}

fn delta_version(dir: &Path, table: TableKind, delta: &DeltaTable) -> Result<u64> {
    delta
        .version()
        .ok_or_else(|| delta_error(dir, table, "the table has no version after its commit"))
}

async fn commit_changes(
    version: &DeltaVersion<'_>,
    table: TableKind,
    at: u64,
    old: &[&FileEntry],
    files: &[&FileEntry],
) -> Result<u64> {
    let old_paths: HashSet<&str> = old.iter().map(|f| f.path.as_str()).collect();
    let new_paths: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let now = now_ms();
    // The samples' change data: this version's changelog. A samples version with an empty
    // changelog moved rows between files without changing any, as a compaction does; its files'
    // actions say so (`dataChange: false`), or Delta would read them as deletes and inserts.
    let mut cdc = None;
    let mut data_change = version.rearranged.is_none();
    if table == TableKind::Samples && data_change {
        if let Some(changelog) = &version.changelog {
            cdc = write_change_data(version, changelog)?;
            data_change = cdc.is_some();
        }
    }
    let mut actions = Vec::new();
    for file in old.iter().filter(|f| !new_paths.contains(f.path.as_str())) {
        actions.push(remove_action(file, now, data_change));
    }
    for file in files
        .iter()
        .filter(|f| !old_paths.contains(f.path.as_str()))
    {
        actions.push(add_action(version.dir, file, data_change));
    }
    actions.extend(cdc);
    if actions.is_empty() {
        return Ok(at);
    }
    // delta-rs's transaction builder refuses tables whose protocol includes the change data
    // feed unless delta-rs is built with DataFusion, because its own writers would not write
    // the change data; capflow writes it itself (`write_change_data`), so it commits the log
    // entry through delta-rs's log store: the same put-if-absent commit, at the version after
    // the manifest's.
    let url = table_url(version.dir, table)?;
    let log_store = DeltaTableBuilder::from_url(url)
        .and_then(|b| b.build_storage())
        .map_err(|e| delta_error(version.dir, table, e))?;
    let current = log_store
        .get_latest_version(at)
        .await
        .map_err(|e| delta_error(version.dir, table, e))?;
    if current != at {
        return Err(delta_error(
            version.dir,
            table,
            format!(
                "the table's log is at version {current}, the manifest names version {at}; \
                 another writer changed the table"
            ),
        ));
    }
    let operation = match version.rearranged {
        Some(target) => DeltaOperation::Optimize {
            predicate: None,
            target_size: i64::try_from(target).unwrap_or(i64::MAX),
        },
        None => DeltaOperation::Write {
            mode: SaveMode::Overwrite,
            partition_by: None,
            predicate: None,
        },
    };
    let bytes = CommitData::new(
        actions,
        operation,
        app_metadata(version.version),
        Vec::new(),
    )
    .get_bytes()
    .map_err(|e| delta_error(version.dir, table, e))?;
    let next = at + 1;
    log_store
        .write_commit_entry(next, CommitOrBytes::LogBytes(bytes), uuid::Uuid::new_v4())
        .await
        .map_err(|e| delta_error(version.dir, table, e))?;
    Ok(next)
}

/// Writes the changelog at `changelog` as a change data file of the `samples` table
/// (`_change_data/cdc-v<N>-<content>.parquet`): the samples' columns and `_change_type`,
/// `insert` for `diff` +1 and `delete` for −1, in the changelog's order. `None` for an empty
/// changelog.
fn write_change_data(version: &DeltaVersion, changelog: &Path) -> Result<Option<Action>> {
    let file = File::open(changelog).map_err(|e| Error::io(changelog, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| Error::invalid(format!("{}", changelog.display()), e.to_string()))?;
    let samples = TableKind::Samples.schema();
    let mut fields: Vec<Arc<Field>> = samples.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(CHANGE_TYPE, DataType::Utf8, false)));
    let schema = Arc::new(Schema::new_with_metadata(
        fields,
        samples.metadata().clone(),
    ));
    let staged = version.staging.join("change-data.parquet");
    let out = File::create(&staged).map_err(|e| Error::io(&staged, e))?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let parquet_error =
        |e: parquet::errors::ParquetError| Error::io(&staged, std::io::Error::other(e.to_string()));
    let mut writer =
        ArrowWriter::try_new(out, schema.clone(), Some(properties)).map_err(parquet_error)?;
    let mut rows = 0usize;
    for batch in reader {
        let batch =
            batch.map_err(|e| Error::invalid(format!("{}", changelog.display()), e.to_string()))?;
        let diff = batch
            .column_by_name(DIFF_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<Int8Array>())
            .ok_or_else(|| {
                Error::invalid(
                    format!("{}", changelog.display()),
                    "the changelog has no Int8 `diff` column",
                )
            })?;
        let change_type: StringArray = diff
            .iter()
            .map(|d| {
                Some(if d.unwrap_or(0) < 0 {
                    "delete"
                } else {
                    "insert"
                })
            })
            .collect();
        let mut columns: Vec<Arc<dyn Array>> = Vec::with_capacity(schema.fields().len());
        for field in samples.fields() {
            let column = batch.column_by_name(field.name()).ok_or_else(|| {
                Error::invalid(
                    format!("{}", changelog.display()),
                    format!("the changelog has no column {}", field.name()),
                )
            })?;
            columns.push(column.clone());
        }
        columns.push(Arc::new(change_type));
        let out = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| Error::invalid("change data", e.to_string()))?;
        rows += out.num_rows();
        writer.write(&out).map_err(parquet_error)?;
    }
    writer.close().map_err(parquet_error)?;
    if rows == 0 {
        fs::remove_file(&staged).map_err(|e| Error::io(&staged, e))?;
        return Ok(None);
    }
    File::open(&staged)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(&staged, e))?;
    let (sha, size) = fsutil::sha256_file(&staged)?;
    let name = format!("cdc-v{:05}-{}.parquet", version.version, &sha[..16]);
    let target_dir = version
        .dir
        .join(table_dir(TableKind::Samples))
        .join(CHANGE_DATA);
    fs::create_dir_all(&target_dir).map_err(|e| Error::io(&target_dir, e))?;
    fsutil::rename(&staged, &target_dir.join(&name))?;
    fsutil::sync_dir(&target_dir)?;
    Ok(Some(Action::Cdc(AddCDCFile {
        path: format!("{CHANGE_DATA}/{name}"),
        size: size as i64,
        partition_values: HashMap::new(),
        data_change: false,
        tags: None,
    })))
}

/// The version of a log entry's file name (`00000000000000000003.json`).
fn log_entry_version(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".json")?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// The capflow version of a change data file's name (`cdc-v00003-<content>.parquet`).
pub(crate) fn change_data_version(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("cdc-v")?;
    let (version, _) = rest.split_once('-')?;
    version.parse().ok()
}

/// Puts every table back at the Delta version `manifest` names (none without a manifest, or
/// for a table it does not name): log entries of later versions, left by a run that died
/// between its Delta commits and its manifest, are removed with their change data files and
/// delta-rs's unfinished commit files. Only the dataset's lock holder may call this.
pub(crate) fn roll_back_uncommitted(dir: &Path, manifest: Option<&Manifest>) -> Result<()> {
    let committed = manifest.map_or(0, |m| m.version);
    for table in TableKind::ALL {
        let table_path = dir.join(table_dir(table));
        let log = table_path.join(DELTA_LOG);
        let recorded = manifest.and_then(|m| m.delta_versions.get(table.name()).copied());
        if let Ok(entries) = fs::read_dir(&log) {
            let mut removed = false;
            for entry in entries {
                let entry = entry.map_err(|e| Error::io(&log, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let stale = match log_entry_version(&name) {
                    Some(v) => recorded.is_none_or(|r| v > r),
                    // delta-rs writes a commit under a temporary name first.
                    None => name.starts_with("_commit_") && name.ends_with(".tmp"),
                };
                if stale {
                    tracing::info!(
                        "{}: rolling back {name}, a Delta commit of a run that did not commit \
                         its manifest",
                        log.display()
                    );
                    let path = entry.path();
                    fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                    removed = true;
                }
            }
            if removed {
                fsutil::sync_dir(&log)?;
            }
        }
        let change_data = table_path.join(CHANGE_DATA);
        if let Ok(entries) = fs::read_dir(&change_data) {
            for entry in entries {
                let entry = entry.map_err(|e| Error::io(&change_data, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if change_data_version(&name).is_some_and(|v| v > committed) {
                    let path = entry.path();
                    fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                }
            }
        }
    }
    Ok(())
}

/// `validate`'s check of the Delta logs, replayed from their JSON entries (independently of
/// delta-rs): every table the manifest names is at the manifest's Delta version, whose live
/// files are the manifest's files of the table. A log entry after that version (a run died
/// between its Delta commits and its manifest) is a warning: the next writer rolls it back.
pub(crate) fn check_logs(
    dir: &Path,
    manifest: &Manifest,
    report: &mut super::validate::ValidationReport,
) {
    use super::validate::Problem;
    for table in TableKind::ALL {
        let log = dir.join(table_dir(table)).join(DELTA_LOG);
        let Some(&at) = manifest.delta_versions.get(table.name()) else {
            if log.is_dir() {
                report.warnings.push(format!(
                    "{}/{DELTA_LOG}: a Delta log the manifest does not name (an interrupted                      commit); the next run removes it",
                    table_dir(table)
                ));
            }
            continue;
        };
        let problem = |reason: String| Problem::DeltaLog {
            table: table.name().to_string(),
            reason,
        };
        let mut live: HashSet<String> = HashSet::new();
        for version in 0..=at {
            let path = log.join(format!("{version:020}.json"));
            let text = match fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) => {
                    report.problems.push(problem(format!(
                        "version {version} ({}) is unreadable: {e}",
                        path.display()
                    )));
                    break;
                }
            };
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let Ok(action) = serde_json::from_str::<serde_json::Value>(line) else {
                    report.problems.push(problem(format!(
                        "version {version} holds a line that is not JSON"
                    )));
                    continue;
                };
                if let Some(path) = action["add"]["path"].as_str() {
                    live.insert(path.to_string());
                }
                if let Some(path) = action["remove"]["path"].as_str() {
                    live.remove(path);
                }
            }
        }
        let named: HashSet<String> = manifest
            .table_files(table)
            .map(|f| file_name(f).to_string())
            .collect();
        if live != named {
            let mut missing: Vec<&String> = named.difference(&live).collect();
            let mut extra: Vec<&String> = live.difference(&named).collect();
            missing.sort();
            extra.sort();
            report.problems.push(problem(format!(
                "version {at} does not hold the manifest's files (missing {missing:?}, not in                  the manifest {extra:?})"
            )));
        }
        if log.join(format!("{:020}.json", at + 1)).exists() {
            report.warnings.push(format!(
                "{}/{DELTA_LOG}: version {} is not committed (a run died before its manifest);                  the next run rolls it back",
                table_dir(table),
                at + 1
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_entry_and_change_data_names() {
        assert_eq!(log_entry_version("00000000000000000003.json"), Some(3));
        assert_eq!(log_entry_version("00000000000000000003.crc"), None);
        assert_eq!(log_entry_version("_last_checkpoint"), None);
        assert_eq!(log_entry_version("3.json"), None);
        assert_eq!(
            change_data_version("cdc-v00012-0123456789abcdef.parquet"),
            Some(12)
        );
        assert_eq!(change_data_version("train-00000-of-00001-x.parquet"), None);
    }
}
