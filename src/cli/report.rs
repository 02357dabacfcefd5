//! `capflow report DIR`: HTML, JSON and PNG charts describing a dataset, and a text summary.

use std::path::PathBuf;

use super::out::{out, status};
use crate::error::Result;
use crate::report::{dataset_report, default_sections, HTML_FILE};

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Dataset directory.
    pub dir: PathBuf,
    /// Directory to write report.html, report.json and the charts into (default: DIR/report).
    #[arg(long, value_name = "REPORT_DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(args: ReportArgs) -> Result<()> {
    let out = args.out.unwrap_or_else(|| args.dir.join("report"));
    let report = dataset_report(&args.dir, default_sections())?;
    report.write(&out)?;
    out!("{}", report.summary())?;
    status!("wrote {}", out.join(HTML_FILE).display());
    Ok(())
}
