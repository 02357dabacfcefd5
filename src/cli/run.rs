//! `capflow run`: run a dataflow spec and commit its dataset.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::augment::cutswap;
use crate::augment::relatedness::RelatednessModel;
use crate::augment::ssa::builtin_realizer;
use crate::dataflow::augment::{group_images, run_augment, AugmentRun, Methods};
use crate::dataflow::buckets::BucketExport;
use crate::dataflow::ssa::build_models;
use crate::dataflow::state::{
    self, bucket_of, image_digests, rows_digest, BucketState, ImageState, Plan, StateDir,
};
use crate::dataflow::CollectedRun;
use crate::dataflow::{run_collect, ClusterOptions, DataflowSpec};
use crate::error::{Error, Result};
use crate::export::{DatasetWriter, StageMetrics};
use crate::ingest::Row;
use crate::schema::{RejectedRow, SampleRow};
use crate::select::mix::{mix, MixConfig};

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
    let state = args.state.as_deref().map(StateDir::open).transpose()?;

    let collected = run_collect(&spec, &args.cluster)?;
    let corpus = match spec.corpus_spec() {
        Some(corpus) => Some(run_collect(&corpus, &ClusterOptions::default())?),
        None => None,
    };
    let fit = corpus.as_ref().unwrap_or(&collected);
    let buckets = spec.output.buckets;
    // Taking the writer first locks the output directory for the whole run.
    let mut writer = DatasetWriter::create(&out, &spec.config_hash(), spec.output.shard_bytes)?;
    writer.retain_versions(true);
    if !spec.description.is_empty() {
        writer.describe(spec.description.clone());
    }
    let previous = writer
        .previous()
        .map(|(m, sha)| (m.clone(), sha.to_string()));
    let previous_ref = previous.as_ref().map(|(m, sha)| (m, sha.as_str()));

    let planned = std::time::Instant::now();
    let digests = image_digests(&collected.rows)?;
    let models_digest = models_digest(&spec, fit)?;
    let header_now = state::header(spec.config_hash(), models_digest, buckets, previous_ref);
    let owned: Vec<usize> = (0..buckets).collect();
    let mut plan = match &state {
        Some(state) => state::plan(state, &header_now, previous_ref, &digests, &owned)?,
        None => Plan::full(&digests, "no --state"),
    };
    if plan.full.is_none() && spec.mix != MixConfig::All && !plan.compute.is_empty() {
        plan = Plan::full(
            &digests,
            "[mix] selects over all samples, so a changed image can change any bucket",
        );
    }
    if state.is_some() {
        eprintln!("capflow run {}: {}", spec.name, plan.describe());
    }
    let plan_ms = planned.elapsed().as_millis() as u64;

    let augmented = if spec.augments() || spec.keeps_originals() {
        Some(run_augment_phase(
            &spec,
            &collected,
            fit,
            &args.cluster,
            &plan.compute,
        )?)
    } else {
        None
    };
    let export_started = std::time::Instant::now();
    for stage in &collected.stages {
        writer.stage(stage.clone());
    }
    writer.stage(StageMetrics {
        name: "plan".into(),
        rows_in: digests.len() as u64 + plan.removed.len() as u64,
        rows_out: plan.compute.len() as u64,
        rejected: 0,
        elapsed_ms: plan_ms,
    });
    let mut new_samples: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
    let mut new_rejected: BTreeMap<String, Vec<RejectedRow>> = BTreeMap::new();
    if let Some(run) = augmented {
        print_augment_summary(&spec, &run);
        for stage in &run.stages {
            writer.stage(stage.clone());
        }
        for sample in run.samples {
            new_samples
                .entry(sample.image_id.clone())
                .or_default()
                .push(sample);
        }
        for (image_id, rejected) in run.rejected {
            new_rejected.entry(image_id).or_default().push(rejected);
        }
    }

    let layout = BucketExport {
        buckets,
        plan: &plan,
        previous: previous_ref,
        dir: &out,
    };
    let exported = layout.write(&mut writer, &collected, &owned, &mut new_samples)?;
    for (_, _, rejected) in &collected.rejected {
        writer.reject(rejected.clone())?;
    }
    // The method stages' rejections, by image: this run's for computed images, the state's for
    // carried ones.
    let mut bucket_states: BTreeMap<usize, BucketState> = BTreeMap::new();
    for (id, digest) in &digests {
        let bucket = bucket_of(id, buckets);
        let rejected = if plan.compute.contains(id) {
            new_rejected.remove(id).unwrap_or_default()
        } else {
            plan.previous
                .get(&bucket)
                .and_then(|b| b.get(id))
                .map(|s| s.rejected.clone())
                .unwrap_or_default()
        };
        for row in &rejected {
            writer.reject(row.clone())?;
        }
        bucket_states.entry(bucket).or_default().insert(
            id.clone(),
            ImageState {
                digest: digest.clone(),
                rejected,
            },
        );
    }
    let augment_rejected: u64 = bucket_states
        .values()
        .flat_map(|b| b.values())
        .map(|s| s.rejected.len() as u64)
        .sum();
    writer.changelog(&exported.changes)?;
    writer.stage(StageMetrics {
        name: "export".into(),
        rows_in: exported.rows_written,
        rows_out: exported.rows_written,
        rejected: 0,
        elapsed_ms: export_started.elapsed().as_millis() as u64,
    });
    let mut counts = collected.counts;
    counts.read += augment_rejected;
    counts.rejected += augment_rejected;
    let manifest = writer.commit(counts)?;
    if let Some(state) = &state {
        let manifest_path = out.join(crate::export::MANIFEST_FILE);
        let text = std::fs::read(&manifest_path).map_err(|e| Error::io(&manifest_path, e))?;
        let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&text));
        state.invalidate()?;
        for bucket in &owned {
            if plan.touches(*bucket, buckets) {
                let empty = BucketState::new();
                state.write_bucket(*bucket, bucket_states.get(bucket).unwrap_or(&empty))?;
            }
        }
        let mut header = header_now;
        header.dataset_version = manifest.version;
        header.manifest_sha256 = sha;
        state.write_header(&header)?;
    }
    let (added, retracted) = manifest
        .changelog
        .as_ref()
        .map_or((0, 0), |c| (c.added, c.retracted));
    eprintln!(
        "capflow run {}: {} read, {} accepted, {} rejected; {} files in {} (version {}; {added} samples added, {retracted} retracted)",
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

/// The augment phase's summary lines: images/s, samples per method, SSA's drop reasons.
fn print_augment_summary(spec: &DataflowSpec, run: &AugmentRun) {
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
        let dropped: Vec<String> = run
            .dropped
            .iter()
            .map(|(reason, n)| format!("{n} {}", reason.as_str()))
            .collect();
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

/// The digest of the rows the spec's corpus-level models are fitted on, if it has such models:
/// SSA's scorer and vectors learn from the captions; the relatedness encoder and the CutSwap
/// vocabulary from every input row.
fn models_digest(spec: &DataflowSpec, collected: &CollectedRun) -> Result<Option<String>> {
    let inputs = collected
        .rows
        .iter()
        .filter(|r| !matches!(r.row, Row::Sample(_)));
    if spec.relatedness.is_some() || spec.cutswap.is_some() {
        return rows_digest(inputs).map(Some);
    }
    if spec.ssa.is_some() {
        return rows_digest(inputs.filter(|r| matches!(r.row, Row::Caption(_)))).map(Some);
    }
    Ok(None)
}

/// Fits the corpus-level models on the read rows and runs the spec's method stages.
/// `fit` holds the rows the corpus-level models learn from: `collected` itself, or the spec's
/// `[[models.corpus]]`.
fn run_augment_phase(
    spec: &DataflowSpec,
    collected: &CollectedRun,
    fit: &CollectedRun,
    cluster: &ClusterOptions,
    compute: &BTreeSet<String>,
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
            &fit.rows,
            spec.models.amr_to_text.as_ref(),
            builtin_realizer(),
        )?;
        methods.ssa = Some((config.clone(), models));
        fitted += 2;
    }
    if spec.relatedness.is_some() || spec.cutswap.is_some() {
        let images = group_images(fit);
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
    let mut run = run_augment(collected, spec.seed, methods, cluster, Some(compute))?;
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
    let captions = fit
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
