//! `capflow ingest <format> <paths...> --out DIR`: read inputs into a committed dataset.

use std::path::PathBuf;
use std::time::Instant;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::ValueEnum;
use indicatif::ProgressBar;

use super::inspect::json_summary;
use super::out::{self, outln};
use super::progress;
use crate::error::{Error, Result};
use crate::export::{
    config_hash, synthetic, CardMetadata, DatasetSink, DatasetWriter, StageMetrics,
    DEFAULT_SHARD_BYTES,
};
use crate::ingest::{read_input, Format, RecordSink, Row};
use crate::schema::RejectedRow;

#[derive(Debug, clap::Args)]
pub struct IngestArgs {
    /// Input format.
    #[arg(value_parser = input_format_parser())]
    pub format: InputFormat,
    /// Input files or directories, read in the order given.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Dataset directory to write (created when missing; a new version when it holds one).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Target size of each Parquet shard: bytes, or with a suffix K/KiB, M/MiB, G/GiB
    /// (powers of 1024) or KB, MB, GB (powers of 1000).
    #[arg(long, default_value = "128MiB", value_parser = parse_byte_size)]
    pub shard_bytes: u64,
    /// Print the summary as one JSON object on stdout (records read, accepted and rejected,
    /// version, rows and files per table, elapsed seconds) instead of a line of text.
    #[arg(long)]
    pub json: bool,
}

/// What `ingest` reads: one of the reader formats, or the synthetic load-test corpus (hidden;
/// its "paths" are image counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputFormat {
    Reader(Format),
    SyntheticCaptions,
}

impl InputFormat {
    pub fn name(self) -> &'static str {
        match self {
            InputFormat::Reader(format) => format.name(),
            InputFormat::SyntheticCaptions => synthetic::FORMAT_NAME,
        }
    }
}

fn input_format_parser() -> impl TypedValueParser<Value = InputFormat> {
    let values = Format::value_variants()
        .iter()
        .filter_map(ValueEnum::to_possible_value)
        .chain([PossibleValue::new(synthetic::FORMAT_NAME).hide(true)]);
    PossibleValuesParser::new(values).map(|name: String| {
        match Format::from_str(&name, false) {
            Ok(format) => InputFormat::Reader(format),
            // PossibleValuesParser admits only the listed names; the one left is synthetic.
            Err(_) => InputFormat::SyntheticCaptions,
        }
    })
}

/// Parses `128MiB`, `64M`, `1GB`, `4096`.
pub fn parse_byte_size(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a byte size such as 4096, 64MiB or 1GB"))?;
    let unit: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("unknown size unit {other:?} in {text:?}")),
    };
    let bytes = number
        .checked_mul(unit)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if bytes == 0 {
        return Err("the shard size must be at least 1 byte".to_string());
    }
    Ok(bytes)
}

/// Ticks a progress bar per record on its way to the dataset sink.
struct ProgressSink<'a, 'w> {
    inner: &'a mut DatasetSink<'w>,
    bar: &'a ProgressBar,
}

impl RecordSink for ProgressSink<'_, '_> {
    fn row(&mut self, row: Row) -> Result<()> {
        self.inner.row(row)
    }
    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        self.bar.inc(1);
        self.inner.reject(rejected)
    }
    fn accepted(&mut self) -> Result<()> {
        self.bar.inc(1);
        self.inner.accepted()
    }
}

pub fn run(args: IngestArgs) -> Result<()> {
    let started = Instant::now();
    // The configuration is what decides the rows: the format (paths are inputs, not config).
    let config = serde_json::json!({ "command": "ingest", "format": args.format.name() });
    let mut writer = DatasetWriter::create(&args.out, &config_hash(&config), args.shard_bytes)?;
    writer.describe(format!(
        "Records read from `{}` input by `capflow ingest` ({} input path{}).",
        args.format.name(),
        args.paths.len(),
        if args.paths.len() == 1 { "" } else { "s" }
    ));
    writer.card_metadata(CardMetadata {
        source_datasets: match args.format {
            InputFormat::Reader(format) => format.source_dataset().map(str::to_string),
            InputFormat::SyntheticCaptions => None,
        }
        .into_iter()
        .collect(),
        ..CardMetadata::default()
    });
    let mut stages = Vec::new();
    let mut sink = DatasetSink::new(&mut writer);
    for path in &args.paths {
        let before = sink.counts();
        let rows_before = sink.rows_out();
        let stage_started = Instant::now();
        let bar = progress::records(&path.display().to_string());
        let mut ticking = ProgressSink {
            inner: &mut sink,
            bar: &bar,
        };
        match args.format {
            InputFormat::Reader(format) => read_input(format, path, &mut ticking)?,
            InputFormat::SyntheticCaptions => {
                let images = path.to_string_lossy().parse::<u64>().map_err(|_| {
                    Error::Usage(format!(
                        "{}: the synthetic-captions input is an image count, not a path",
                        path.display()
                    ))
                })?;
                synthetic::generate(images, &mut ticking)?;
            }
        }
        bar.finish_and_clear();
        let after = sink.counts();
        stages.push(StageMetrics {
            name: format!("ingest {} {}", args.format.name(), path.display()),
            rows_in: after.read - before.read,
            rows_out: sink.rows_out() - rows_before,
            rejected: after.rejected - before.rejected,
            elapsed_ms: stage_started.elapsed().as_millis() as u64,
        });
    }
    let counts = sink.finish()?;
    for stage in stages {
        writer.stage(stage);
    }
    let manifest = writer.commit(counts)?;
    let elapsed = started.elapsed().as_secs_f64();
    if args.json {
        let mut summary = json_summary(&args.out, &manifest);
        summary.insert("format".into(), args.format.name().into());
        summary.insert("elapsed_s".into(), elapsed.into());
        return out::json(&summary.into());
    }
    if out::quiet() {
        return Ok(());
    }
    outln!(
        "ingested {} records ({} accepted, {} rejected) into {} version {}: {} rows in {} files, {:.1}s",
        counts.read,
        counts.accepted,
        counts.rejected,
        args.out.display(),
        manifest.version,
        super::inspect::data_rows(&manifest),
        manifest.files.len(),
        elapsed
    )
}

/// The default of `--shard-bytes`, kept in step with the library's.
const _: () = assert!(DEFAULT_SHARD_BYTES == 128 * 1024 * 1024);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("128MiB"), Ok(134_217_728));
        assert_eq!(parse_byte_size("64M"), Ok(67_108_864));
        assert_eq!(parse_byte_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_byte_size("2 KiB"), Ok(2048));
        assert!(parse_byte_size("0").is_err());
        assert!(parse_byte_size("12 parsecs").is_err());
        assert!(parse_byte_size("MiB").is_err());
        assert!(parse_byte_size("99999999999999G").is_err());
    }
}
