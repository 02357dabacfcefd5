//! File-system steps of the atomic commit: durable writes, durable renames, the writer lock and
//! the clean-up of what crashed runs leave behind.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Prefix of the per-run staging directory inside a dataset directory.
pub(crate) const TMP_PREFIX: &str = ".capflow-tmp-";
/// Prefix of the staging directories of the other processes of a cluster run.
pub(crate) const PART_PREFIX: &str = ".capflow-part-";
/// The writer lock file inside a dataset directory.
pub(crate) const LOCK_FILE: &str = ".capflow-lock";

/// Flushes a directory's entries (new names, renames, removals) to disk.
///
/// POSIX only makes a rename durable once the directory holding it is synced. Elsewhere
/// directories cannot be opened for syncing, and the rename itself is the best there is.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Writes `bytes` to `path` and syncs the file.
pub(crate) fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = File::create(path).map_err(|e| Error::io(path, e))?;
    file.write_all(bytes).map_err(|e| Error::io(path, e))?;
    file.sync_all().map_err(|e| Error::io(path, e))
}

/// Renames `from` over `to` (atomic on one file system).
pub(crate) fn rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(|e| Error::io(to, e))
}

/// SHA-256 (hex) and length of a file's bytes.
pub(crate) fn sha256_file(path: &Path) -> Result<(String, u64)> {
    // A manifest names the file; a FIFO at that path must not stall the check.
    let mut file = crate::ingest::open_input(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), len))
}

/// A random lowercase hex token for temporary names.
pub(crate) fn random_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// The single-writer lock of a dataset directory: an exclusive `flock` on `.capflow-lock`,
/// which also holds the writer's process id for the error a second writer gets.
///
/// The kernel releases the lock when its process ends, however it ends, so a killed run leaves
/// no lock to take over, and taking the lock is one atomic step: there is no moment at which two
/// writers can both believe they hold it. The holder removes the file while it still holds the
/// lock; a writer that locked the file just removed finds that it is no longer the file at the
/// path and tries again.
///
/// Only one writer may stage files in a dataset at a time, because the next writer removes the
/// staging directories and unreferenced shards it finds. Within one process the directories
/// held are also kept in a process-wide set (a second writer there is refused before it opens
/// the file).
#[derive(Debug)]
pub(crate) struct DatasetLock {
    path: PathBuf,
    held: PathBuf,
    /// The locked file; closing it releases the lock.
    _file: File,
}

fn held_in_process() -> &'static std::sync::Mutex<std::collections::HashSet<PathBuf>> {
    static HELD: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> =
        std::sync::OnceLock::new();
    HELD.get_or_init(Default::default)
}

impl DatasetLock {
    pub(crate) fn acquire(dir: &Path) -> Result<DatasetLock> {
        let held = fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
        {
            // A poisoned set only means another writer panicked; the set itself is intact.
            let mut set = held_in_process()
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if !set.insert(held.clone()) {
                return Err(Error::Usage(format!(
                    "{}: dataset is already being written by this process",
                    dir.display()
                )));
            }
        }
        match DatasetLock::acquire_file(dir) {
            Ok((path, file)) => {
                super::abort::hold_lock(&path);
                Ok(DatasetLock {
                    path,
                    held,
                    _file: file,
                })
            }
            Err(e) => {
                release_in_process(&held);
                Err(e)
            }
        }
    }

    fn acquire_file(dir: &Path) -> Result<(PathBuf, File)> {
        let path = dir.join(LOCK_FILE);
        // Each retry follows a holder's removal of the file between our open and our lock.
        for _ in 0..16 {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| Error::io(&path, e))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let holder = fs::read_to_string(&path)
                        .ok()
                        .and_then(|text| text.trim().parse::<u32>().ok())
                        .map_or_else(
                            || "another process".to_string(),
                            |pid| format!("process {pid}"),
                        );
                    return Err(Error::Usage(format!(
                        "{}: dataset is being written by {holder}; wait for it to finish",
                        dir.display()
                    )));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
            }
            if !is_same_file(&file, &path) {
                continue;
            }
            let me = std::process::id().to_string();
            file.set_len(0)
                .and_then(|()| file.write_all(me.as_bytes()))
                .and_then(|()| file.sync_all())
                .map_err(|e| Error::io(&path, e))?;
            return Ok((path, file));
        }
        Err(Error::Usage(format!(
            "{}: other writers kept taking the dataset lock {}; try again",
            dir.display(),
            path.display()
        )))
    }
}

/// Whether the open `file` is the file now at `path` (not one removed since it was opened).
fn is_same_file(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), fs::metadata(path)) {
            (Ok(open), Ok(now)) => open.dev() == now.dev() && open.ino() == now.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        path.exists()
    }
}

fn release_in_process(held: &Path) {
    let mut set = held_in_process()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    set.remove(held);
}

impl Drop for DatasetLock {
    fn drop(&mut self) {
        // Removed while still locked; the lock goes with the file handle right after.
        let _ = fs::remove_file(&self.path);
        super::abort::release_lock(&self.path);
        release_in_process(&self.held);
    }
}

/// Removes staging directories that crashed runs left in `dir`. Must only be called while
/// holding the [`DatasetLock`], so that no live writer's staging directory is touched.
pub(crate) fn remove_stale_staging(dir: &Path) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(TMP_PREFIX) || name.starts_with(PART_PREFIX) {
            let path = entry.path();
            tracing::info!(
                "removing staging directory of an interrupted run: {}",
                path.display()
            );
            fs::remove_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}

/// The current UTC time as RFC 3339 (`2024-05-01T12:00:00Z`). Only the manifest's
/// `created_at` carries it; nothing that is hashed or compared does.
pub(crate) fn utc_now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339_from_unix(secs)
}

/// Converts seconds since 1970 to RFC 3339 UTC with the civil-from-days algorithm of Howard
/// Hinnant (`chrono`-compatible for every date after 1970).
pub(crate) fn rfc3339_from_unix(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        // Values from `date -u -d @<secs> +%Y-%m-%dT%H:%M:%SZ`.
        assert_eq!(rfc3339_from_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_from_unix(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_from_unix(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn lock_is_exclusive_and_stale_locks_are_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DatasetLock::acquire(dir.path()).unwrap();
        // A second writer in the same process is refused too.
        let err = DatasetLock::acquire(dir.path()).unwrap_err();
        assert!(err.to_string().contains("this process"), "{err}");
        drop(lock);
        assert!(!dir.path().join(LOCK_FILE).exists());
        // What a killed writer leaves: the file with its process id, but no lock on it.
        fs::write(dir.path().join(LOCK_FILE), u32::MAX.to_string()).unwrap();
        let lock = DatasetLock::acquire(dir.path()).unwrap();
        let holder = fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(holder, std::process::id().to_string());
        drop(lock);
        // A file locked through another open file description, as another process would: refused.
        let path = dir.path().join(LOCK_FILE);
        let other = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        other.try_lock().unwrap();
        fs::write(&path, "1").unwrap();
        let err = DatasetLock::acquire(dir.path()).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");
        assert!(err.to_string().contains("process 1"), "{err}");
        drop(other);
        drop(DatasetLock::acquire(dir.path()).unwrap());
    }
}
