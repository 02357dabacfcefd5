//! `capflow vacuum DIR --retain N`: removes the files only versions older than the last N need.

use std::path::PathBuf;

use crate::error::Result;
use crate::export::vacuum;

use super::out::{self, outln};

#[derive(Debug, clap::Args)]
pub struct VacuumArgs {
    /// Dataset directory.
    pub dir: PathBuf,
    /// How many versions stay readable, the current one included.
    #[arg(long, default_value_t = 1)]
    pub retain: u64,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as one JSON object on stdout (version, oldest kept, removed files and
    /// bytes) instead of a line of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: VacuumArgs) -> Result<()> {
    let report = vacuum(&args.dir, args.retain, args.dry_run)?;
    if args.json {
        return out::json(&serde_json::to_value(&report).unwrap_or_default());
    }
    if out::quiet() {
        return Ok(());
    }
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    outln!(
        "{}: {verb} {} files ({} bytes); versions {}..={} stay readable",
        args.dir.display(),
        report.removed.len(),
        report.removed_bytes,
        report.oldest_kept,
        report.version
    )
}
