//! `validate`: does a dataset directory hold exactly what its manifest says?

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs::{self, File};
use std::path::{Component, Path, PathBuf};

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::fsutil::sha256_file;
use super::manifest::{read_manifest, Manifest};
use super::writer::is_shard_file_name;
use super::{CARD_FILE, DATA_DIR, KV_SCHEMA_FINGERPRINT, KV_TABLE, REJECTED_FILE};
use crate::error::{Error, Result};
use crate::schema::{schema_fingerprint, TableKind};

/// One way a dataset differs from its manifest or from the code's schemas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A manifest path is absolute or climbs out of the dataset directory.
    UnsafePath {
        path: String,
    },
    MissingFile {
        path: String,
    },
    SizeMismatch {
        path: String,
        manifest: u64,
        actual: u64,
    },
    ChecksumMismatch {
        path: String,
        manifest: String,
        actual: String,
    },
    /// The file is not readable Parquet.
    Unreadable {
        path: String,
        reason: String,
    },
    RowCountMismatch {
        path: String,
        manifest: u64,
        actual: u64,
    },
    /// The file's `capflow.table` metadata or schema is not the manifest's table's.
    WrongTable {
        path: String,
        manifest: String,
        found: String,
    },
    SchemaMismatch {
        what: String,
        expected: String,
        found: String,
    },
    /// A manifest table summary disagrees with the sum over its files.
    TableSummaryMismatch {
        table: String,
        reason: String,
    },
    CountsMismatch {
        reason: String,
    },
    /// `rejected.parquet` is missing or is not the manifest's ledger (a commit was interrupted
    /// between the two): whoever reads it would read another version's rejections.
    LedgerAlias {
        reason: String,
    },
    /// A table's Delta Lake log does not hold the version the manifest names, or that version's
    /// files are not the manifest's.
    DeltaLog {
        table: String,
        reason: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::UnsafePath { path } => {
                write!(f, "{path}: path leaves the dataset directory")
            }
            Problem::MissingFile { path } => write!(f, "{path}: file is missing"),
            Problem::SizeMismatch {
                path,
                manifest,
                actual,
            } => write!(f, "{path}: {actual} bytes, manifest says {manifest}"),
            Problem::ChecksumMismatch {
                path,
                manifest,
                actual,
            } => write!(f, "{path}: sha256 {actual}, manifest says {manifest}"),
            Problem::Unreadable { path, reason } => {
                write!(f, "{path}: not readable Parquet: {reason}")
            }
            Problem::RowCountMismatch {
                path,
                manifest,
                actual,
            } => write!(f, "{path}: {actual} rows, manifest says {manifest}"),
            Problem::WrongTable {
                path,
                manifest,
                found,
            } => write!(
                f,
                "{path}: holds table {found:?}, manifest says {manifest:?}"
            ),
            Problem::SchemaMismatch {
                what,
                expected,
                found,
            } => write!(
                f,
                "{what}: schema fingerprint {found}, this capflow's is {expected}"
            ),
            Problem::TableSummaryMismatch { table, reason } => {
                write!(f, "table {table}: {reason}")
            }
            Problem::CountsMismatch { reason } => write!(f, "counts: {reason}"),
            Problem::DeltaLog { table, reason } => {
                write!(f, "data/{table}/_delta_log: {reason}")
            }
            Problem::LedgerAlias { reason } => write!(
                f,
                "{REJECTED_FILE}: {reason} (an interrupted commit); rerun the command that wrote \
                 the dataset, whose writer repairs it"
            ),
        }
    }
}

/// What [`validate`] found.
#[derive(Clone, Debug, Default)]
pub struct ValidationReport {
    pub dir: PathBuf,
    pub version: u64,
    pub files_checked: usize,
    pub rows_checked: u64,
    pub bytes_checked: u64,
    /// Anything here makes the dataset invalid.
    pub problems: Vec<Problem>,
    /// Leftovers that do not make the dataset wrong: unreferenced shards of an interrupted
    /// commit, a stale `README.md`. The next write clears them.
    pub warnings: Vec<String>,
}

impl ValidationReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// A manifest path as a relative path inside the dataset, or `None` when it is absolute or
/// has `..`, so that a hostile manifest cannot point capflow at files elsewhere.
pub(crate) fn safe_relative_path(path: &str) -> Option<PathBuf> {
    let relative = Path::new(path);
    let normal = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    (normal && !path.is_empty()).then(|| relative.to_path_buf())
}

/// Checks that every file the manifest names exists with its size, SHA-256, row count, table
/// and schema; that the manifest's schema fingerprints are this code's; and that the counts
/// add up (`read = accepted + rejected`, `rejected` = ledger rows, table totals = file sums).
///
/// Errors only when there is no readable manifest; everything else is a [`Problem`] in the
/// report.
pub fn validate(dir: &Path) -> Result<ValidationReport> {
    let manifest = read_manifest(dir)?;
    let mut report = ValidationReport {
        dir: dir.to_path_buf(),
        version: manifest.version,
        ..ValidationReport::default()
    };
    for file in &manifest.files {
        check_file(dir, file, &mut report);
    }
    check_tables(&manifest, &mut report);
    check_counts(&manifest, &mut report);
    check_leftovers(dir, &manifest, &mut report);
    super::delta::check_logs(dir, &manifest, &mut report);
    Ok(report)
}

fn check_file(dir: &Path, file: &super::FileEntry, report: &mut ValidationReport) {
    let path = file.path.clone();
    let Some(relative) = safe_relative_path(&file.path) else {
        report.problems.push(Problem::UnsafePath { path });
        return;
    };
    let full = dir.join(relative);
    if !full.is_file() {
        report.problems.push(Problem::MissingFile { path });
        return;
    }
    report.files_checked += 1;
    let (sha, bytes) = match sha256_file(&full) {
        Ok(found) => found,
        Err(e) => {
            report.problems.push(Problem::Unreadable {
                path,
                reason: e.to_string(),
            });
            return;
        }
    };
    report.bytes_checked += bytes;
    if bytes != file.bytes {
        report.problems.push(Problem::SizeMismatch {
            path: path.clone(),
            manifest: file.bytes,
            actual: bytes,
        });
    }
    if sha != file.sha256 {
        report.problems.push(Problem::ChecksumMismatch {
            path: path.clone(),
            manifest: file.sha256.clone(),
            actual: sha,
        });
    }
    let builder = match File::open(&full)
        .map_err(|e| e.to_string())
        .and_then(|f| ParquetRecordBatchReaderBuilder::try_new(f).map_err(|e| e.to_string()))
    {
        Ok(builder) => builder,
        Err(reason) => {
            report.problems.push(Problem::Unreadable { path, reason });
            return;
        }
    };
    let metadata = builder.metadata().file_metadata();
    let rows = u64::try_from(metadata.num_rows()).unwrap_or(0);
    report.rows_checked += rows;
    if rows != file.rows {
        report.problems.push(Problem::RowCountMismatch {
            path: path.clone(),
            manifest: file.rows,
            actual: rows,
        });
    }
    let kv = |key: &str| {
        metadata
            .key_value_metadata()
            .and_then(|kvs| kvs.iter().find(|kv| kv.key == key))
            .and_then(|kv| kv.value.clone())
    };
    let table = kv(KV_TABLE).unwrap_or_default();
    if table != file.table.name() {
        report.problems.push(Problem::WrongTable {
            path: path.clone(),
            manifest: file.table.name().to_string(),
            found: table,
        });
    }
    let expected = schema_fingerprint(&file.table.schema());
    let found = schema_fingerprint(builder.schema());
    let declared = kv(KV_SCHEMA_FINGERPRINT).unwrap_or_default();
    if found != expected || declared != expected {
        let found = if found != expected { found } else { declared };
        report.problems.push(Problem::SchemaMismatch {
            what: path,
            expected,
            found,
        });
    }
}

fn check_tables(manifest: &Manifest, report: &mut ValidationReport) {
    let mut sums: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for file in &manifest.files {
        let entry = sums.entry(file.table.name()).or_default();
        entry.0 += file.rows;
        entry.1 += 1;
    }
    for (name, summary) in &manifest.tables {
        let Some(kind) = TableKind::from_name(name) else {
            report.problems.push(Problem::TableSummaryMismatch {
                table: name.clone(),
                reason: "not a capflow table".into(),
            });
            continue;
        };
        let expected = schema_fingerprint(&kind.schema());
        if summary.schema_fingerprint != expected {
            report.problems.push(Problem::SchemaMismatch {
                what: format!("manifest table {name}"),
                expected,
                found: summary.schema_fingerprint.clone(),
            });
        }
        let (rows, files) = sums.get(name.as_str()).copied().unwrap_or_default();
        let split_rows: u64 = summary.splits.values().sum();
        if rows != summary.rows || files != summary.files || split_rows != summary.rows {
            report.problems.push(Problem::TableSummaryMismatch {
                table: name.clone(),
                reason: format!(
                    "summary says {} rows in {} files ({split_rows} over its splits), \
                     the files hold {rows} rows in {files} files",
                    summary.rows, summary.files
                ),
            });
        }
    }
    for name in sums.keys() {
        if !manifest.tables.contains_key(*name) {
            report.problems.push(Problem::TableSummaryMismatch {
                table: name.to_string(),
                reason: "files listed but no table summary".into(),
            });
        }
    }
}

fn check_counts(manifest: &Manifest, report: &mut ValidationReport) {
    let c = manifest.counts;
    if c.read != c.accepted + c.rejected {
        report.problems.push(Problem::CountsMismatch {
            reason: format!(
                "read {} != accepted {} + rejected {}",
                c.read, c.accepted, c.rejected
            ),
        });
    }
    let ledgers = manifest.table_files(TableKind::Rejected).count();
    if ledgers != 1 {
        report.problems.push(Problem::CountsMismatch {
            reason: format!("{ledgers} rejected ledgers listed, expected exactly 1"),
        });
    }
    let ledger_rows: u64 = manifest
        .table_files(TableKind::Rejected)
        .map(|f| f.rows)
        .sum();
    if ledger_rows != c.rejected {
        report.problems.push(Problem::CountsMismatch {
            reason: format!(
                "{} records counted as rejected, the ledger holds {ledger_rows}",
                c.rejected
            ),
        });
    }
}

fn check_leftovers(dir: &Path, manifest: &Manifest, report: &mut ValidationReport) {
    // The earlier versions' shards stay for time travel until `capflow vacuum`: only files no
    // kept version names are leftovers. (An unreadable `versions/` leaves the current files.)
    let kept = super::writer::files_of_versions(dir, manifest, 1)
        .unwrap_or_else(|_| manifest.files.iter().map(|f| f.path.clone()).collect());
    let referenced: HashSet<&str> = kept.iter().map(String::as_str).collect();
    let tables: HashSet<&str> = TableKind::ALL.iter().map(|t| t.name()).collect();
    let mut leftovers = |relative: String, is_dir: bool| {
        if referenced.contains(relative.as_str()) {
            return;
        }
        let name = relative.rsplit('/').next().unwrap_or_default();
        let why = if !is_dir && is_shard_file_name(name) {
            "shard of an interrupted or earlier commit"
        } else {
            "not written by capflow"
        };
        report
            .warnings
            .push(format!("{relative}: not in the manifest ({why})"));
    };
    let Ok(entries) = fs::read_dir(dir.join(DATA_DIR)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.path().is_dir();
        if !(is_dir && tables.contains(name.as_str())) {
            leftovers(format!("{DATA_DIR}/{name}"), is_dir);
            continue;
        }
        // A table's directory: its shards, and its Delta Lake log and change data.
        for file in fs::read_dir(entry.path()).into_iter().flatten().flatten() {
            let file_name = file.file_name().to_string_lossy().into_owned();
            if super::delta::is_delta_entry(&file_name) {
                continue;
            }
            leftovers(
                format!("{DATA_DIR}/{name}/{file_name}"),
                file.path().is_dir(),
            );
        }
    }
    if let Some(ledger) = manifest.table_files(TableKind::Rejected).next() {
        let alias = dir.join(REJECTED_FILE);
        let reason = match sha256_file(&alias) {
            Ok((sha, _)) if sha == ledger.sha256 => None,
            Ok(_) => Some(format!("differs from the ledger {}", ledger.path)),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Some("is missing".to_string())
            }
            Err(e) => Some(format!("cannot be read ({e})")),
        };
        if let Some(reason) = reason {
            report.problems.push(Problem::LedgerAlias { reason });
        }
    }
    match fs::read_to_string(dir.join(CARD_FILE)) {
        Ok(card) => {
            // The card lists every file with rows (files without rows are left out).
            let unlisted = manifest
                .files
                .iter()
                .find(|f| f.rows > 0 && !card.contains(&f.path));
            if let Some(file) = unlisted {
                report.warnings.push(format!(
                    "{CARD_FILE} does not list {} (stale card of an interrupted commit)",
                    file.path
                ));
            }
        }
        Err(_) => report
            .warnings
            .push(format!("{CARD_FILE} is missing (interrupted commit)")),
    }
}
