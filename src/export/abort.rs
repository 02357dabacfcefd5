//! What a process that has to stop at once leaves behind, and what it can truthfully say.
//!
//! A cluster process whose peer is lost ends itself with `std::process::exit` (exit code 6,
//! [`crate::dataflow::cluster`]): no destructor runs, so its writers cannot remove their staging
//! directories nor the dataset's lock file. Writers register those here while they hold them,
//! and [`abandon`] removes them before the process exits. It also reads the manifests of the
//! datasets this process writes: a peer can be lost after process 0 committed, and the message
//! must then say which version is committed instead of "nothing is committed".

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::manifest::read_manifest;

#[derive(Default)]
struct Held {
    staging: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
    /// Each dataset directory written, with its version when the writer opened it.
    datasets: BTreeMap<PathBuf, u64>,
}

fn held() -> std::sync::MutexGuard<'static, Held> {
    static HELD: OnceLock<Mutex<Held>> = OnceLock::new();
    HELD.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A staging directory this process created and removes when it stops.
pub(crate) fn hold_staging(dir: &Path) {
    held().staging.insert(dir.to_path_buf());
}

pub(crate) fn release_staging(dir: &Path) {
    held().staging.remove(dir);
}

/// A lock file this process holds.
pub(crate) fn hold_lock(path: &Path) {
    held().locks.insert(path.to_path_buf());
}

pub(crate) fn release_lock(path: &Path) {
    held().locks.remove(path);
}

/// A dataset directory this process writes, at `version` (0: none) when it started.
pub(crate) fn watch_dataset(dir: &Path, version: u64) {
    held().datasets.entry(dir.to_path_buf()).or_insert(version);
}

/// Removes the staging directories and lock files this process holds, for a process about to
/// exit without unwinding, and says what is committed: `version N of DIR is committed` for each
/// dataset whose manifest moved past the version it had when this process started, else
/// `nothing is committed`.
///
/// The lock files are removed while their locks are still held, as a writer releasing its lock
/// does; the kernel drops the locks when the process exits.
pub fn abandon() -> String {
    let mut held = held();
    for dir in std::mem::take(&mut held.staging) {
        let _ = std::fs::remove_dir_all(&dir);
    }
    for lock in std::mem::take(&mut held.locks) {
        let _ = std::fs::remove_file(&lock);
    }
    let committed: Vec<String> = held
        .datasets
        .iter()
        .filter_map(|(dir, before)| {
            let now = read_manifest(dir).ok()?.version;
            (now > *before).then(|| format!("version {now} of {} is committed", dir.display()))
        })
        .collect();
    if committed.is_empty() {
        "nothing is committed".to_string()
    } else {
        committed.join("; ")
    }
}
