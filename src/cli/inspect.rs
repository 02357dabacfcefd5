//! `capflow inspect DIR` (what a dataset holds) and `capflow validate DIR` (whether it holds
//! exactly that).

use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;

use super::out::{self, diagnostic, out, outln};
use crate::error::{Error, Result};
use crate::export::{
    read_manifest, read_manifest_version, read_table_of, validate, Manifest, ModelsSource,
};
use crate::schema::TableKind;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Dataset directory.
    pub dir: PathBuf,
    /// Also print the first N rows of a table.
    #[arg(long, value_name = "N")]
    pub rows: Option<usize>,
    /// The table `--rows` shows (default: samples when present, else the first table with rows).
    #[arg(long)]
    pub table: Option<String>,
    /// Print the manifest as JSON instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Show this earlier version instead of the current one (`capflow run` keeps every
    /// version's manifest under `versions/` and the shards they name).
    #[arg(long)]
    pub version: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Dataset directory.
    pub dir: PathBuf,
    /// Print the result as one JSON object on stdout (valid, version, files, rows and bytes
    /// checked, problems, warnings) instead of a line of text; an invalid dataset still exits 3.
    #[arg(long)]
    pub json: bool,
}

pub fn run_inspect(args: InspectArgs) -> Result<()> {
    let mut manifest = read_manifest(&args.dir)?;
    if let Some(version) = args.version {
        manifest = read_manifest_version(&args.dir, version)?;
    }
    if args.json {
        let text = serde_json::to_string_pretty(&manifest)
            .map_err(|e| Error::invalid("manifest", e.to_string()))?;
        outln!("{text}")?;
    } else {
        out!("{}", summary(&args.dir, &manifest))?;
    }
    if let Some(limit) = args.rows {
        let table = match &args.table {
            Some(name) => TableKind::from_name(name).ok_or_else(|| {
                let names: Vec<&str> = TableKind::ALL.iter().map(|k| k.name()).collect();
                Error::Usage(format!(
                    "unknown table {name:?}; tables are {}",
                    names.join(", ")
                ))
            })?,
            None => default_table(&manifest),
        };
        let batches = first_rows(&args.dir, &manifest, table, limit)?;
        outln!("\nfirst {limit} rows of {}:", table.name())?;
        let shown = arrow::util::pretty::pretty_format_batches(&batches)
            .map_err(|e| Error::arrow(format!("printing {} rows", table.name()), e))?;
        outln!("{shown}")?;
    }
    Ok(())
}

fn default_table(manifest: &Manifest) -> TableKind {
    if manifest.table_rows(TableKind::Samples) > 0 {
        return TableKind::Samples;
    }
    TableKind::ALL
        .into_iter()
        .find(|k| manifest.table_rows(*k) > 0)
        .unwrap_or(TableKind::Rejected)
}

fn first_rows(
    dir: &Path,
    manifest: &Manifest,
    table: TableKind,
    limit: usize,
) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    let mut left = limit;
    for batch in read_table_of(dir, manifest, table)? {
        if left == 0 {
            break;
        }
        let batch = batch?;
        let take = left.min(batch.num_rows());
        batches.push(batch.slice(0, take));
        left -= take;
    }
    Ok(batches)
}

/// What a command that committed `manifest` into `dir` prints with `--json`: where, which
/// version, the records read, accepted and rejected, the rows of the data tables (the
/// rejected-record ledger left out) and the files the manifest names, rows per table, and the
/// samples the version added and retracted.
pub fn json_summary(dir: &Path, manifest: &Manifest) -> serde_json::Map<String, serde_json::Value> {
    let (added, retracted) = manifest
        .changelog
        .as_ref()
        .map_or((0, 0), |c| (c.added, c.retracted));
    let tables: serde_json::Map<String, serde_json::Value> = manifest
        .tables
        .iter()
        .map(|(name, table)| (name.clone(), table.rows.into()))
        .collect();
    let mut summary = serde_json::Map::new();
    summary.insert("out".into(), dir.display().to_string().into());
    summary.insert("version".into(), manifest.version.into());
    summary.insert("read".into(), manifest.counts.read.into());
    summary.insert("accepted".into(), manifest.counts.accepted.into());
    summary.insert("rejected".into(), manifest.counts.rejected.into());
    summary.insert("rows".into(), data_rows(manifest).into());
    summary.insert("files".into(), manifest.files.len().into());
    summary.insert("tables".into(), tables.into());
    summary.insert("samples_added".into(), added.into());
    summary.insert("samples_retracted".into(), retracted.into());
    summary
}

/// Rows of the data tables, the rejected-record ledger left out.
pub fn data_rows(manifest: &Manifest) -> u64 {
    manifest
        .files
        .iter()
        .filter(|f| f.table != TableKind::Rejected)
        .map(|f| f.rows)
        .sum()
}

/// The human-readable summary `inspect` prints.
pub fn summary(dir: &Path, manifest: &Manifest) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let c = manifest.counts;
    let _ = writeln!(out, "dataset {}", dir.display());
    let _ = writeln!(
        out,
        "  version {} (engine {}, config {}), committed {}",
        manifest.version,
        manifest.engine_version,
        manifest
            .config_hash
            .get(..16)
            .unwrap_or(&manifest.config_hash),
        manifest.created_at
    );
    if let Some(data) = &manifest.compacted_from {
        let _ = writeln!(
            out,
            "  compacted by capflow optimize: the rows of version {}, in fewer files",
            data.version
        );
    }
    if let Some(models) = &manifest.models {
        let source = models.source.as_str();
        let _ = match (&models.id, models.source) {
            (Some(id), ModelsSource::Corpus) => {
                writeln!(out, "  models: {source} (rows digest {id})")
            }
            (Some(id), _) => writeln!(out, "  models: {source} (models/{id}.bin in the state)"),
            (None, _) => writeln!(out, "  models: {source} (not kept: the run had no --state)"),
        };
    }
    let _ = writeln!(
        out,
        "  records: {} read, {} accepted, {} rejected",
        c.read, c.accepted, c.rejected
    );
    let total_bytes: u64 = manifest.files.iter().map(|f| f.bytes).sum();
    let _ = writeln!(
        out,
        "  files: {} ({} bytes)",
        manifest.files.len(),
        total_bytes
    );
    let _ = writeln!(out, "  tables:");
    for kind in TableKind::ALL {
        if let Some(table) = manifest.tables.get(kind.name()) {
            let splits: Vec<String> = table
                .splits
                .iter()
                .map(|(split, rows)| format!("{split}={rows}"))
                .collect();
            let _ = writeln!(
                out,
                "    {:<13} {:>10} rows in {:>3} files  [{}]",
                kind.name(),
                table.rows,
                table.files,
                splits.join(", ")
            );
        }
    }
    if !manifest.stages.is_empty() {
        let _ = writeln!(out, "  stages:");
        for stage in &manifest.stages {
            let _ = writeln!(
                out,
                "    {}: {} in, {} out, {} rejected, {} ms",
                stage.name, stage.rows_in, stage.rows_out, stage.rejected, stage.elapsed_ms
            );
        }
    }
    if let Some(changes) = &manifest.changelog {
        let _ = writeln!(
            out,
            "  changes: {} samples added, {} retracted ({})",
            changes.added, changes.retracted, changes.path
        );
    }
    if !manifest.history.is_empty() {
        let _ = writeln!(out, "  earlier versions:");
        for old in &manifest.history {
            let rows: u64 = old
                .rows
                .iter()
                .filter(|(name, _)| name.as_str() != TableKind::Rejected.name())
                .map(|(_, rows)| rows)
                .sum();
            let _ = writeln!(
                out,
                "    version {} committed {}: {} records read, {} rows",
                old.version, old.created_at, old.counts.read, rows
            );
        }
    }
    out
}

pub fn run_validate(args: ValidateArgs) -> Result<()> {
    let report = validate(&args.dir)?;
    for warning in &report.warnings {
        diagnostic!("capflow: warning: {warning}");
    }
    if args.json {
        let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
        out::json(&serde_json::json!({
            "dir": args.dir.display().to_string(),
            "valid": report.is_ok(),
            "version": report.version,
            "files_checked": report.files_checked,
            "rows_checked": report.rows_checked,
            "bytes_checked": report.bytes_checked,
            "problems": problems,
            "warnings": report.warnings,
        }))?;
    } else if report.is_ok() && !out::quiet() {
        outln!(
            "{}: valid (version {}): {} files, {} rows, {} bytes checked",
            args.dir.display(),
            report.version,
            report.files_checked,
            report.rows_checked,
            report.bytes_checked
        )?;
    }
    if report.is_ok() {
        return Ok(());
    }
    for problem in &report.problems {
        diagnostic!("capflow: {}: {problem}", args.dir.display());
    }
    Err(Error::invalid(
        format!("dataset {}", args.dir.display()),
        format!(
            "{} problem{} found (listed above)",
            report.problems.len(),
            if report.problems.len() == 1 { "" } else { "s" }
        ),
    ))
}
