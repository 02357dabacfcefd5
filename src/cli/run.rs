//! `capflow run`: run a dataflow spec and commit its dataset.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::augment::cutswap;
use crate::augment::relatedness::RelatednessModel;
use crate::augment::ssa::builtin_realizer;
use crate::dataflow::augment::{group_images, run_augment, AugmentRun, Methods};
use crate::dataflow::ssa::build_models;
use crate::dataflow::CollectedRun;
use crate::dataflow::{run_collect, ClusterOptions, DataflowSpec};
use crate::error::{Error, Result};
use crate::export::{DatasetSink, DatasetWriter, StageMetrics};
use crate::ingest::{RecordSink, Row};
use crate::select::mix::mix;

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
    /// Target size of each Parquet shard in bytes (default: the spec's `output.shard_bytes`).
    #[arg(long)]
    pub shard_bytes: Option<u64>,
    #[command(flatten)]
    pub cluster: ClusterOptions,
}

pub fn run(args: RunArgs) -> Result<()> {
    let mut spec = DataflowSpec::from_file(&args.spec)?;
    if let Some(root) = &args.input {
        spec = spec.with_input_root(root);
    }
    if args.cluster.processes > 1 {
        return Err(Error::Usage(
            "`capflow run` writes one dataset per run and does not take --processes > 1; use -w for threads".into(),
        ));
    }
    let out = args
        .out
        .clone()
        .or_else(|| spec.output.dir.clone())
        .unwrap_or_else(|| PathBuf::from("out").join(&spec.name));
    let shard_bytes = args.shard_bytes.unwrap_or(spec.output.shard_bytes);

    let collected = run_collect(&spec, &args.cluster)?;
    let augmented = if spec.augments() || spec.keeps_originals() {
        Some(run_augment_phase(&spec, &collected, &args.cluster)?)
    } else {
        None
    };
    let export_started = std::time::Instant::now();
    let mut writer = DatasetWriter::create(&out, &spec.config_hash(), shard_bytes)?;
    if !spec.description.is_empty() {
        writer.describe(spec.description.clone());
    }
    for stage in &collected.stages {
        writer.stage(stage.clone());
    }
    let mut rows_out = collected.rows.len() as u64;
    let mut augment_rejected = Vec::new();
    if let Some(run) = &augmented {
        for stage in &run.stages {
            writer.stage(stage.clone());
        }
        let dropped: Vec<String> = run
            .dropped
            .iter()
            .map(|(reason, n)| format!("{n} {}", reason.as_str()))
            .collect();
        let seconds = run.wall.as_secs_f64();
        let mut methods: BTreeMap<&str, usize> = BTreeMap::new();
        for sample in &run.samples {
            *methods.entry(sample.method.as_str()).or_insert(0) += 1;
        }
        let methods: Vec<String> = methods.iter().map(|(m, n)| format!("{n} {m}")).collect();
        eprintln!(
            "augment: {} images in {seconds:.3} s ({:.0} images/s), {} samples ({})",
            run.images,
            run.images as f64 / seconds.max(1e-9),
            run.samples.len(),
            if methods.is_empty() {
                "none".to_string()
            } else {
                methods.join(", ")
            }
        );
        if spec.ssa.is_some() {
            eprintln!(
                "ssa: quality filter dropped: {}",
                if dropped.is_empty() {
                    "none".to_string()
                } else {
                    dropped.join(", ")
                }
            );
        }
    }
    // The sink groups rows by table (samples by their split) and writes bounded batches.
    let mut sink = DatasetSink::new(&mut writer);
    for keyed in collected.rows {
        sink.row(keyed.row)?;
    }
    if let Some(run) = augmented {
        rows_out += run.samples.len() as u64;
        for sample in run.samples {
            sink.row(Row::Sample(sample))?;
        }
        augment_rejected = run.rejected;
    }
    sink.finish()?;
    for (_, _, rejected) in collected.rejected {
        writer.reject(rejected)?;
    }
    for rejected in augment_rejected {
        writer.reject(rejected)?;
    }
    writer.stage(StageMetrics {
        name: "export".into(),
        rows_in: rows_out,
        rows_out,
        rejected: 0,
        elapsed_ms: export_started.elapsed().as_millis() as u64,
    });
    let manifest = writer.commit(collected.counts)?;
    eprintln!(
        "capflow run {}: {} read, {} accepted, {} rejected; {} files in {} (version {})",
        spec.name,
        collected.counts.read,
        collected.counts.accepted,
        collected.counts.rejected,
        manifest.files.len(),
        out.display(),
        manifest.version,
    );
    Ok(())
}

/// Fits the corpus-level models on the read rows and runs the spec's method stages.
fn run_augment_phase(
    spec: &DataflowSpec,
    collected: &CollectedRun,
    cluster: &ClusterOptions,
) -> Result<AugmentRun> {
    let started = std::time::Instant::now();
    let mut methods = Methods {
        originals: spec.keeps_originals(),
        clid: spec.clid.clone(),
        gbc: spec.gbc.clone(),
        ..Methods::default()
    };
    let mut fitted = 0;
    if let Some(config) = &spec.ssa {
        let models = build_models(
            config,
            &collected.rows,
            spec.models.amr_to_text.as_ref(),
            builtin_realizer(),
        )?;
        methods.ssa = Some((config.clone(), models));
        fitted += 2;
    }
    if spec.relatedness.is_some() || spec.cutswap.is_some() {
        let images = group_images(collected);
        if let Some(config) = &spec.relatedness {
            let model = RelatednessModel::fit(&images, config)
                .map_err(|e| Error::Config(format!("relatedness: fitting the model: {e}")))?;
            methods.relatedness = Some(model);
            fitted += 1;
        }
        if let Some(config) = &spec.cutswap {
            let model = cutswap::fit(&images, config)
                .map_err(|e| Error::Config(format!("cutswap: fitting the model: {e}")))?;
            methods.cutswap = Some(model);
            fitted += 1;
        }
    }
    let models_ms = started.elapsed().as_millis() as u64;
    let mut run = run_augment(collected, spec.seed, methods, cluster)?;
    let mix_started = std::time::Instant::now();
    let before = run.samples.len();
    run.samples = mix(&run.samples, &spec.mix)?;
    run.stages.push(StageMetrics {
        name: "mix".into(),
        rows_in: before as u64,
        rows_out: run.samples.len() as u64,
        rejected: 0,
        elapsed_ms: mix_started.elapsed().as_millis() as u64,
    });
    let captions = collected
        .rows
        .iter()
        .filter(|r| matches!(r.row, Row::Caption(_)))
        .count() as u64;
    run.stages.insert(
        0,
        StageMetrics {
            name: "models".into(),
            rows_in: captions,
            rows_out: fitted,
            rejected: 0,
            elapsed_ms: models_ms,
        },
    );
    Ok(run)
}
