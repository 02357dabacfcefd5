//! `capflow run`: run a dataflow spec and commit its dataset.

use std::path::PathBuf;
use std::time::Instant;

use super::inspect::json_summary;
use super::out;
pub use crate::dataflow::RunOutcome;
use crate::dataflow::{ClusterOptions, DataflowSpec, RunOptions};
use crate::error::Result;
use crate::export::read_manifest;

/// Run a dataflow spec: read its inputs, run its stages on the workers, write the dataset.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The dataflow spec (a TOML file, e.g. dataflows/sample.toml).
    pub spec: PathBuf,
    /// Dataset directory to write (default: the spec's `output.dir`, else `out/<name>`).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Read every input from this directory instead of the spec's paths (each input from the
    /// subdirectory named like its default path, e.g. the output of `capflow synth`).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Keep what each image's outputs were computed from in this directory; a rerun with the
    /// same state recomputes only new, changed and removed images (see docs/incremental.md).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Memory budget of each process of the run (e.g. 512MiB, 2GiB): rows wait for the other
    /// inputs on local disk and are processed in parts sized so that the workers fit it; a
    /// budget too small for the workers is reported.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    pub memory_limit: u64,
    /// Fit the corpus-level models on the inputs again, even when the state holds the models
    /// an earlier run fitted (a rerun with a state uses those, so that only new and changed
    /// images are computed; see docs/incremental.md).
    #[arg(long)]
    pub refit: bool,
    /// Use the models a run with `--state DIR` fitted and kept there instead of fitting them on
    /// the inputs (a fresh run then writes what a rerun with that state writes).
    #[arg(long, value_name = "DIR")]
    pub models: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterOptions,
    /// Also print the summary as one JSON object on stdout: the dataset directory, version,
    /// records read, accepted and rejected, rows and files, rows per table, samples added and
    /// retracted, elapsed seconds (a process other than the first: the version process 0
    /// committed).
    #[arg(long)]
    pub json: bool,
}

/// A size in bytes: a number with an optional unit (B, KiB, MiB, GiB, TiB; K, M, G, T and
/// KB, MB, GB, TB are read as powers of 1024 too).
fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 512MiB or 2GiB"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use B, KiB, MiB, GiB or TiB)"
            ))
        }
    };
    let bytes = number * scale as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("`{text}` is not a positive size"));
    }
    Ok(bytes as u64)
}

pub fn run(args: RunArgs) -> Result<()> {
    let started = Instant::now();
    let spec = spec_of(&args)?;
    let dir = spec.output_dir(args.out.as_deref());
    let (json, process) = (args.json, args.cluster.process);
    let outcome = run_spec(&spec, args, false)?;
    if !json {
        return Ok(());
    }
    let mut summary = match outcome {
        // The manifest this run committed is what it did; read back, it is also what a
        // reader of the dataset sees.
        RunOutcome::Committed(_) => {
            let mut summary = json_summary(&dir, &read_manifest(&dir)?);
            summary.insert("committed".into(), true.into());
            summary
        }
        // A process other than the first wrote its buckets; process 0 holds the manifest of
        // the version it committed.
        RunOutcome::Part(version) => {
            let mut part = serde_json::Map::new();
            part.insert("out".into(), dir.display().to_string().into());
            part.insert("version".into(), version.into());
            part.insert("process".into(), process.into());
            part
        }
        // Nothing changed: the dataset stays at its previous version.
        RunOutcome::Unchanged | RunOutcome::Kept(_) => {
            let mut summary = json_summary(&dir, &read_manifest(&dir)?);
            summary.insert("committed".into(), false.into());
            summary
        }
    };
    summary.insert("name".into(), spec.name.clone().into());
    summary.insert("elapsed_s".into(), started.elapsed().as_secs_f64().into());
    out::json(&summary.into())
}

/// Runs a spec; with `skip_unchanged`, a state-backed run in which no image changed commits
/// nothing.
pub fn run_with(args: RunArgs, skip_unchanged: bool) -> Result<RunOutcome> {
    let spec = spec_of(&args)?;
    run_spec(&spec, args, skip_unchanged)
}

/// The spec `args` name, reading its inputs from `--input` when given.
fn spec_of(args: &RunArgs) -> Result<DataflowSpec> {
    let spec = DataflowSpec::from_file(&args.spec)?;
    Ok(match &args.input {
        Some(root) => spec.with_input_root(root),
        None => spec,
    })
}

fn run_spec(spec: &DataflowSpec, args: RunArgs, skip_unchanged: bool) -> Result<RunOutcome> {
    let options = RunOptions {
        out: args.out,
        state: args.state,
        memory_limit: args.memory_limit,
        skip_unchanged,
        refit: args.refit,
        models: args.models,
        cluster: args.cluster,
    };
    crate::dataflow::run(spec, &options)
}
