//! `capflow vacuum`: removes the files only older versions need.
//!
//! Every version of a dataset stays readable after the next one is committed (the manifest
//! under `versions/v<N>.json`, each table's Delta Lake version): its shards stay in the
//! tables' directories until a vacuum. `vacuum` with `retain` N keeps the last N versions
//! readable and removes
//!
//! - every shard that none of them names (`data/<table>/` and, for datasets written before
//!   tables had directories, `data/`);
//! - the `samples` table's change data files of versions whose predecessor is not kept (the
//!   change data feed is kept between the kept versions; with `retain` 1 there is none);
//! - `versions/v<k>.json` and `changes/v<k>.parquet` of the versions no longer kept.
//!
//! The Delta logs stay as they are, as Delta Lake's own VACUUM leaves them: an earlier version
//! can still be listed, but its files are gone. Vacuum takes the dataset's lock, so it never
//! runs beside a writer, and first puts back what an interrupted commit left
//! ([`super::delta::roll_back_uncommitted`]).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::changelog::CHANGES_DIR;
use super::delta::{self, CHANGE_DATA};
use super::fsutil::{self, DatasetLock};
use super::manifest::read_manifest;
use super::writer::{files_of_versions, table_dir, unreferenced_shards};
use crate::error::{Error, Result};
use crate::schema::TableKind;

/// What a vacuum removed (or, dry, would remove).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VacuumReport {
    /// The dataset's current version.
    pub version: u64,
    /// The oldest version still readable.
    pub oldest_kept: u64,
    /// Removed files, relative to the dataset, in the order they were removed.
    pub removed: Vec<String>,
    pub removed_bytes: u64,
    pub dry_run: bool,
}

/// Removes from the dataset at `dir` the files that only versions older than the last
/// `retain` need; with `dry_run`, only says which.
pub fn vacuum(dir: &Path, retain: u64, dry_run: bool) -> Result<VacuumReport> {
    if retain == 0 {
        return Err(Error::Usage(
            "--retain must be at least 1: the current version is always kept".into(),
        ));
    }
    let manifest = read_manifest(dir)?;
    let _lock = DatasetLock::acquire(dir)?;
    // Read again under the lock: a writer may have committed in between.
    let manifest = read_manifest(dir).unwrap_or(manifest);
    if !dry_run {
        delta::roll_back_uncommitted(dir, Some(&manifest))?;
    }
    let oldest_kept = manifest.version.saturating_sub(retain - 1).max(1);
    let kept = files_of_versions(dir, &manifest, oldest_kept)?;
    let mut report = VacuumReport {
        version: manifest.version,
        oldest_kept,
        dry_run,
        ..VacuumReport::default()
    };
    let mut candidates = unreferenced_shards(dir, &kept)?;
    let change_data = format!("{}/{CHANGE_DATA}", table_dir(TableKind::Samples));
    for name in file_names(&dir.join(&change_data))? {
        // The changes of version k need version k - 1 to mean anything.
        if delta::change_data_version(&name).is_some_and(|k| k <= oldest_kept) {
            candidates.push(format!("{change_data}/{name}"));
        }
    }
    for version in 1..oldest_kept {
        for path in [
            format!("{}/v{version}.json", super::VERSIONS_DIR),
            format!("{CHANGES_DIR}/v{version}.parquet"),
        ] {
            if dir.join(&path).is_file() {
                candidates.push(path);
            }
        }
    }
    let mut touched: HashSet<PathBuf> = HashSet::new();
    for relative in candidates {
        let path = dir.join(&relative);
        let bytes = fs::metadata(&path).map_err(|e| Error::io(&path, e))?.len();
        if !dry_run {
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
            if let Some(parent) = path.parent() {
                touched.insert(parent.to_path_buf());
            }
        }
        report.removed_bytes += bytes;
        report.removed.push(relative);
    }
    for parent in touched {
        fsutil::sync_dir(&parent)?;
    }
    Ok(report)
}

/// The names of the regular files directly in `dir` (none when it does not exist), sorted.
fn file_names(dir: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}
