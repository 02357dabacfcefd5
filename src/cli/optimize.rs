//! `capflow optimize DIR`: compacts each table's small files into files of about a target size.

use std::path::PathBuf;

use crate::error::Result;
use crate::export::{optimize, DEFAULT_TARGET_FILE_BYTES};

use super::ingest::parse_byte_size;
use super::out::{self, outln};

#[derive(Debug, clap::Args)]
pub struct OptimizeArgs {
    /// Dataset directory.
    pub dir: PathBuf,
    /// Largest size of a compacted file (e.g. 64MiB, 256MiB); files at or above it stay as
    /// they are.
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULT_TARGET_FILE_BYTES, value_parser = parse_byte_size)]
    pub target_size: u64,
    /// Say what would be compacted, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as one JSON object on stdout (version, whether it committed, files of
    /// each table before and after, files and bytes compacted) instead of a line of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: OptimizeArgs) -> Result<()> {
    let report = optimize(&args.dir, args.target_size, args.dry_run)?;
    if args.json {
        return out::json(&serde_json::to_value(&report).unwrap_or_default());
    }
    if out::quiet() {
        return Ok(());
    }
    let before: u64 = report.tables.values().map(|t| t.before).sum();
    let after: u64 = report.tables.values().map(|t| t.after).sum();
    let outcome = if report.dry_run {
        format!(
            "would compact {} files into {}",
            report.compacted_files, report.written_files
        )
    } else if report.committed {
        format!(
            "compacted {} files into {} (version {})",
            report.compacted_files, report.written_files, report.version
        )
    } else {
        format!(
            "nothing to compact below {} bytes, so no new version: it stays at version {}",
            report.target_file_bytes, report.version
        )
    };
    outln!(
        "{}: {outcome}; {before} files before, {after} after",
        args.dir.display()
    )
}
