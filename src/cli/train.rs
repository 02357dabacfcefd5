//! `capflow train` (train a controllable captioner on capflow datasets, optionally with the CLID
//! curriculum), `capflow train compare`, `capflow train bench`, and `capflow eval model`.
//! Feature `train`.

use std::path::PathBuf;

use crate::augment::original::ORIGINAL_METHOD;
use crate::error::{Error, Result};
use crate::export::{read_manifest, read_table};
use crate::schema::TableKind;
use crate::train::bench::{run_bench, BenchShape};
use crate::train::compare::{compare, CompareOptions, TrainingLimits, Variant};
use crate::train::eval::{evaluate_checkpoint, EvalOptions};
use crate::train::{
    select_device, train_samples, JobOptions, TrainConfig, TrainingData, TrainingSink,
};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TrainArgs {
    #[command(subcommand)]
    pub command: Option<TrainCommand>,
    #[command(flatten)]
    pub train: TrainRunArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum TrainCommand {
    /// Train and evaluate variants (original only, + generated, + curriculum) over several seeds
    /// and write compare.json and compare.md.
    Compare(Box<CompareArgs>),
    /// Training throughput (tokens/s) on a fixed synthetic batch.
    Bench(BenchArgs),
}

#[derive(Debug, clap::Args)]
pub struct TrainRunArgs {
    /// capflow dataset directories to train on (repeatable).
    #[arg(long = "data")]
    pub data: Vec<PathBuf>,
    /// Training configuration (TOML; see docs/train.md). Defaults apply without one.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Checkpoint directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue from the checkpoints in --out.
    #[arg(long)]
    pub resume: bool,
    /// Override the configuration's number of steps (plain training).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Override the configuration's device (auto, cpu, cuda, cuda:N).
    #[arg(long)]
    pub device: Option<String>,
    /// Turn the CLID curriculum on.
    #[arg(long)]
    pub curriculum: bool,
    /// Feed the samples through the training sink a run's `[train]` table uses, a shard's
    /// batch at a time as they are read (a growing vocabulary, the pool and its `[stream]`
    /// settings), instead of loading them and training on them as one set.
    #[arg(long)]
    pub stream: bool,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub train: TrainRunArgs,
    #[command(flatten)]
    pub eval: EvalSelection,
    /// Seeds per variant (the configuration's seed and the next ones); the report gives the
    /// mean ± standard deviation over them.
    #[arg(long, default_value_t = 3)]
    pub seeds: u32,
    /// The variants to train, in report order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "original,augmented,curriculum"
    )]
    pub variants: Vec<Variant>,
    /// The generated methods the augmented and curriculum variants add to the trusted ones
    /// (comma-separated; default: every method in the data).
    #[arg(long = "methods", value_delimiter = ',')]
    pub generated_methods: Vec<String>,
    /// Train on at most this many trusted samples per seed (whole images in a seeded order; the
    /// generated samples of the same images).
    #[arg(long)]
    pub max_train: Option<usize>,
    /// Generated samples at most this percent of the trusted ones, drawn by seed.
    #[arg(long)]
    pub generated_percent: Option<f64>,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Training configuration (model sizes, threads, precision).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(long, default_value_t = 32)]
    pub batch: i64,
    /// Decoder tokens per caption.
    #[arg(long, default_value_t = 24)]
    pub tokens: i64,
    #[arg(long, default_value_t = 16)]
    pub regions: i64,
    #[arg(long, default_value_t = 8000)]
    pub vocab: i64,
    #[arg(long, default_value_t = 100)]
    pub labels: i64,
    #[arg(long, default_value_t = 5)]
    pub warmup: u64,
    #[arg(long, default_value_t = 30)]
    pub steps: u64,
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// Which samples an evaluation covers.
#[derive(Debug, clap::Args)]
pub struct EvalSelection {
    /// Sample splits to evaluate (repeatable; default: all).
    #[arg(long = "eval-split")]
    pub splits: Vec<String>,
    /// Sample methods to evaluate (repeatable; default: all).
    #[arg(long = "eval-method")]
    pub methods: Vec<String>,
    /// Evaluate at most this many samples.
    #[arg(long)]
    pub max_samples: Option<usize>,
    /// GloVe/word2vec text file for noun similarity (default: PPMI vectors from the data).
    #[arg(long)]
    pub vectors: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct EvalModelArgs {
    /// The `capflow train --out` directory.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// capflow dataset directories to evaluate on (repeatable).
    #[arg(long = "data", required = true)]
    pub data: Vec<PathBuf>,
    #[command(flatten)]
    pub selection: EvalSelection,
    /// Device (auto, cpu, cuda, cuda:N).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Also write the report (with every generated caption) to this JSON file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn load_config(args: &TrainRunArgs) -> Result<TrainConfig> {
    let mut config = match &args.config {
        Some(path) => TrainConfig::read(path)?,
        None => TrainConfig::default(),
    };
    if let Some(steps) = args.steps {
        config.steps = steps;
    }
    if let Some(device) = &args.device {
        config.device = device.clone();
    }
    if args.curriculum {
        config.curriculum.enabled = true;
    }
    config.validate()?;
    Ok(config)
}

fn required<'a, T>(value: &'a Option<T>, flag: &str) -> Result<&'a T> {
    value
        .as_ref()
        .ok_or_else(|| Error::Usage(format!("capflow train needs {flag}")))
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    let text =
        serde_json::to_string_pretty(value).map_err(|e| Error::invalid("report", e.to_string()))?;
    super::out::outln!("{text}")
}

pub fn run(args: TrainArgs) -> Result<()> {
    match args.command {
        Some(TrainCommand::Compare(args)) => run_compare(*args),
        Some(TrainCommand::Bench(args)) => run_bench_command(args),
        None => run_train(args.train),
    }
}

/// Feeds the datasets' samples to `sink` a shard's batch at a time, as they are read. A dataset
/// with no `original` samples also gets them built from its captions and groundings, as
/// `capflow train` does ([`TrainingData::load`]).
fn feed_datasets(sink: &mut TrainingSink, dirs: &[PathBuf]) -> Result<()> {
    for dir in dirs {
        let mut originals = false;
        if read_manifest(dir)?.table_rows(TableKind::Samples) > 0 {
            for batch in read_table(dir, TableKind::Samples)? {
                let batch = batch?;
                originals = originals || holds_method(&batch, ORIGINAL_METHOD);
                sink.push_batch(batch)?;
            }
        }
        if !originals {
            let data = TrainingData::load(std::slice::from_ref(dir))?;
            for sample in data.samples {
                if sample.method == ORIGINAL_METHOD {
                    sink.push(sample)?;
                }
            }
        }
    }
    Ok(())
}

fn holds_method(batch: &arrow::record_batch::RecordBatch, method: &str) -> bool {
    use arrow::array::AsArray;
    batch
        .column_by_name("method")
        .and_then(|c| c.as_string_opt::<i32>())
        .is_some_and(|methods| methods.iter().any(|m| m == Some(method)))
}

fn run_train(args: TrainRunArgs) -> Result<()> {
    if args.data.is_empty() {
        return Err(Error::Usage("capflow train needs --data DIR".into()));
    }
    let out = required(&args.out, "--out DIR")?;
    let config = load_config(&args)?;
    let device = select_device(&config.device)?;
    if args.stream {
        let mut sink = TrainingSink::spawn(config, out.clone(), device, args.resume)?;
        feed_datasets(&mut sink, &args.data)?;
        return print_json(&sink.finish()?);
    }
    let data = TrainingData::load(&args.data)?;
    let samples = data.select(&config);
    let options = JobOptions {
        resume: args.resume,
        stop_after: None,
    };
    let outcome = train_samples(&samples, &data.context, &config, out, device, &options)?;
    let losses = &outcome.run.losses;
    print_json(&serde_json::json!({
        "out": outcome.out,
        "device": outcome.run.device,
        "samples": outcome.samples,
        "trusted": outcome.trusted,
        "generated": outcome.generated,
        "steps": outcome.run.steps,
        "curriculum_iterations": outcome.iterations,
        "first_loss": losses.first(),
        "final_loss": losses.last(),
        "tokens_per_second": outcome.run.tokens_per_second(),
        "seconds": outcome.run.seconds,
        "data_waits": outcome.run.data_waits,
        "data_wait_seconds": outcome.run.data_wait_seconds,
        "scoring_runs": outcome.scoring_runs.iter().map(|run| serde_json::json!({
            "steps": run.steps,
            "final_loss": run.losses.last(),
            "seconds": run.seconds,
            "tokens_per_second": run.tokens_per_second(),
            "data_waits": run.data_waits,
        })).collect::<Vec<_>>(),
    }))
}

fn eval_options(selection: &EvalSelection, device: tch::Device) -> EvalOptions {
    EvalOptions {
        splits: selection.splits.clone(),
        methods: selection.methods.clone(),
        max_samples: selection.max_samples,
        vectors: selection.vectors.clone(),
        device,
        ..EvalOptions::default()
    }
}

fn run_compare(args: CompareArgs) -> Result<()> {
    if args.train.data.is_empty() {
        return Err(Error::Usage(
            "capflow train compare needs --data DIR".into(),
        ));
    }
    let out = required(&args.train.out, "--out DIR")?;
    let config = load_config(&args.train)?;
    let device = select_device(&config.device)?;
    let data = TrainingData::load(&args.train.data)?;
    compare(
        &data,
        &config,
        &eval_options(&args.eval, device),
        out,
        device,
        &CompareOptions {
            seeds: args.seeds,
            variants: args.variants,
            generated_methods: args.generated_methods,
            limits: TrainingLimits {
                max_trusted: args.max_train,
                generated_percent: args.generated_percent,
            },
        },
    )?;
    let path = out.join("compare.md");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    super::out::out!("{text}")
}

fn run_bench_command(args: BenchArgs) -> Result<()> {
    let config = match &args.config {
        Some(path) => TrainConfig::read(path)?,
        None => TrainConfig::default(),
    };
    let device = select_device(&args.device)?;
    let shape = BenchShape {
        batch: args.batch,
        tokens: args.tokens,
        regions: args.regions,
        vocab: args.vocab,
        labels: args.labels,
    };
    print_json(&run_bench(&config, shape, device, args.warmup, args.steps))
}

/// `capflow eval model`.
pub fn run_eval_model(args: EvalModelArgs) -> Result<()> {
    let device = select_device(&args.device)?;
    let data = TrainingData::load(&args.data)?;
    let report = evaluate_checkpoint(
        &args.checkpoint,
        &data,
        &eval_options(&args.selection, device),
    )?;
    if let Some(path) = &args.out {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Error::invalid("report", e.to_string()))?;
        std::fs::write(path, text).map_err(|e| Error::io(path, e))?;
    }
    let mut summary =
        serde_json::to_value(&report).map_err(|e| Error::invalid("report", e.to_string()))?;
    if let Some(map) = summary.as_object_mut() {
        map.remove("predictions");
    }
    print_json(&summary)
}
