//! The `capflow` command line.
//!
//! Each subcommand lives in its own file and is a thin layer over library functions; what they
//! print goes through [`out`]. Exit codes: 0 success (a closed standard output included),
//! 1 internal error, 2 usage or configuration error, 3 bad input data, 4 I/O error, 5 external
//! model failure, 6 cluster failure.

pub mod amr;
pub mod amr_merge;
pub mod amr_smatch;
pub mod cluster;
pub mod eval;
pub mod gbc;
pub mod ingest;
pub mod inspect;
pub mod merge;
pub mod optimize;
pub mod out;
pub mod progress;
pub mod quality;
pub mod relatedness;
pub mod report;
pub mod run;
pub mod synth;
#[cfg(feature = "train")]
pub mod train;
pub mod vacuum;
pub mod watch;

use clap::{Parser, Subcommand};

use crate::error::Error;

/// capflow: augment image-caption datasets with grounded, controlled captions.
#[derive(Debug, Parser)]
#[command(name = "capflow", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Leave out status and summary lines and progress, and log only errors unless RUST_LOG
    /// says otherwise; warnings, errors, each command's output and --json still print.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a dataflow spec (`dataflows/*.toml`) and write its dataset.
    Run(run::RunArgs),
    /// Keep a dataset up to date: rerun a spec incrementally as files arrive in a directory.
    Watch(watch::WatchArgs),
    /// Gather a cluster run's shards from per-host output directories into one dataset.
    Merge(merge::MergeArgs),
    /// Print the Arrow schemas of capflow's tables as JSON, or write them to a directory.
    Schema(SchemaArgs),
    /// Read input files of one format into a Parquet dataset directory.
    Ingest(ingest::IngestArgs),
    /// Summarise a dataset directory (tables, rows, files, counts, stages, versions).
    Inspect(inspect::InspectArgs),
    /// Check that a dataset directory holds exactly what its manifest says.
    Validate(inspect::ValidateArgs),
    /// Remove the files only versions older than the last N need (`--retain N`, default 1).
    Vacuum(vacuum::VacuumArgs),
    /// Compact each table's small files into files of about a target size (`--target-size`,
    /// default 64MiB), as a new version holding the same rows.
    Optimize(optimize::OptimizeArgs),
    /// Convert and summarize apple/ml-gbc graph files.
    Gbc(gbc::GbcArgs),
    /// Work with AMR graphs: parse, score with Smatch, merge, inspect.
    #[command(subcommand)]
    Amr(amr::AmrCommand),
    /// Clustering and matching on tab-separated matrices (UPGMA, flat clusters, Hungarian).
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Evaluate outputs (`eval captions`: BLEU, CIDEr-D, D-n of captions against references;
    /// `eval controls`: control metrics of captions against a dataset's controls).
    Eval(eval::EvalArgs),
    /// Visual relatedness: re-rank captions by sim^P(c), label (visual, caption) pairs, gender
    /// ratios, visual-context caption search.
    #[command(subcommand)]
    Relatedness(relatedness::RelatednessCommand),
    /// The built-in caption quality scorer (`quality score --fit CORPUS FILE`).
    #[command(subcommand)]
    Quality(quality::QualityCommand),
    /// Write a synthetic Flickr30k-Entities-like dataset (captions, boxes, AMRs, detections).
    Synth(synth::SynthArgs),
    /// Write an HTML report with charts of a dataset (stages, methods, coverage, length, D-n).
    Report(report::ReportArgs),
    /// Train a controllable captioner on capflow datasets (feature `train`).
    #[cfg(feature = "train")]
    Train(train::TrainArgs),
}

#[derive(Debug, clap::Args)]
pub struct SchemaArgs {
    /// Write `<table>.json` files into this directory instead of printing.
    #[arg(long)]
    pub write: Option<std::path::PathBuf>,
}

/// Logs to stderr at the level `RUST_LOG` asks for, else at the one `-q`/`-v` ask for (warnings
/// by default), coloured only where [`out::colour_on_stderr`] allows.
fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, _) => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .with_ansi(out::colour_on_stderr())
        .try_init();
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    out::set_quiet(cli.quiet);
    init_logging(cli.verbose, cli.quiet);
    match run(cli) {
        Ok(()) | Err(Error::OutputClosed) => 0,
        Err(err) => {
            out::diagnostic!("capflow: error: {err}");
            err.exit_code()
        }
    }
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Schema(args) => schema_command(args),
        Command::Run(args) => run::run(args),
        Command::Watch(args) => watch::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Ingest(args) => ingest::run(args),
        Command::Inspect(args) => inspect::run_inspect(args),
        Command::Validate(args) => inspect::run_validate(args),
        Command::Vacuum(args) => vacuum::run(args),
        Command::Optimize(args) => optimize::run(args),
        Command::Gbc(args) => gbc::run(args),
        Command::Amr(cmd) => amr::run(cmd),
        Command::Cluster(cmd) => cluster::run(cmd),
        Command::Eval(args) => eval::run(args),
        Command::Quality(cmd) => quality::run(cmd),
        Command::Synth(args) => synth::run(args),
        Command::Report(args) => report::run(args),
        Command::Relatedness(cmd) => relatedness::run(cmd),
        #[cfg(feature = "train")]
        Command::Train(args) => train::run(args),
    }
}

fn schema_command(args: SchemaArgs) -> Result<(), Error> {
    use crate::schema::{schema_to_json, TableKind};
    match args.write {
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            for kind in TableKind::ALL {
                let path = dir.join(format!("{}.json", kind.name()));
                std::fs::write(&path, schema_to_json(kind.name(), &kind.schema()))
                    .map_err(|e| Error::io(&path, e))?;
            }
        }
        None => {
            for kind in TableKind::ALL {
                out::out!("{}", schema_to_json(kind.name(), &kind.schema()))?;
            }
        }
    }
    Ok(())
}
