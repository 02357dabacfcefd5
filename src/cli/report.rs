//! `capflow report DIR`: one HTML page with SVG charts describing a dataset, the same as JSON,
//! and a text summary.

use std::path::PathBuf;

use super::out::{out, status};
use crate::dataflow::DataflowSpec;
use crate::error::Result;
use crate::report::quality::thresholds_from_spec;
use crate::report::{dataset_report, default_sections, ReportOptions, HTML_FILE};

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Dataset directory.
    pub dir: PathBuf,
    /// Directory to write report.html, report.json and the charts' SVG files into (default:
    /// DIR/report).
    #[arg(long, value_name = "REPORT_DIR")]
    pub out: Option<PathBuf>,
    /// The spec the dataset was made with: its quality thresholds (`ssa.quality_threshold`,
    /// `relatedness.thresholds`, `cutswap.image.threshold`) are marked on the quality charts.
    /// It is not checked against the dataset (whose config hash depends on how the spec's
    /// input paths were written).
    #[arg(long, value_name = "SPEC")]
    pub spec: Option<PathBuf>,
    /// A threshold to mark on the chart of quality score NAME (repeatable).
    #[arg(long, value_name = "NAME=VALUE", value_parser = parse_threshold)]
    pub threshold: Vec<(String, f64)>,
}

fn parse_threshold(text: &str) -> std::result::Result<(String, f64), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=VALUE"))?;
    let value: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} in {text:?} is not a number"))?;
    if name.trim().is_empty() || !value.is_finite() {
        return Err(format!("{text:?} needs a score name and a finite value"));
    }
    Ok((name.trim().to_string(), value))
}

pub fn run(args: ReportArgs) -> Result<()> {
    let out = args.out.unwrap_or_else(|| args.dir.join("report"));
    let mut options = ReportOptions::default();
    if let Some(path) = &args.spec {
        let spec = DataflowSpec::from_file(path)?;
        options.thresholds = thresholds_from_spec(&spec);
    }
    for (name, value) in args.threshold {
        options.thresholds.entry(name).or_default().push(value);
    }
    let report = dataset_report(&args.dir, default_sections(&options))?;
    report.write(&out)?;
    out!("{}", report.summary())?;
    status!("wrote {}", out.join(HTML_FILE).display());
    Ok(())
}
