//! Whole training jobs over a set of samples: plain training, or CLID's curriculum (two scoring
//! models, quality scores, iterations of weighted selection).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tch::Device;

use super::config::TrainConfig;
use super::data::{encode_sample, EncodedSample, RegionContext};
use super::pixels::ImageCrops;
use super::pool::CurriculumRows;
use super::source::SampleSource;
use super::trainer::{run_plan, score_samples, DataPlan, RunSummary, Segment, Trainer, VOCAB_FILE};
use super::vocab::Vocabulary;
use crate::error::{Error, Result};
use crate::schema::SampleRow;
use crate::select::curriculum::{
    balanced_level_weights, iteration_count, quality_score, select_iteration, write_scores,
    write_selections, IterationSelection, ScoreRecord,
};

/// Directory of the model trained on trusted + generated data (`M~`).
pub const EXTENDED_DIR: &str = "scoring-extended";
/// Directory of the model trained on trusted data (`M`).
pub const TRUSTED_DIR: &str = "scoring-trusted";
/// Directory of the curriculum's Parquet files.
pub const CURRICULUM_DIR: &str = "curriculum";

/// How a training job went.
#[derive(Clone, Debug, Serialize)]
pub struct TrainOutcome {
    pub out: PathBuf,
    pub samples: usize,
    pub trusted: usize,
    pub generated: usize,
    /// The final model's run (the checkpoint in `out`).
    pub run: RunSummary,
    /// Curriculum iterations carried out (0 without the curriculum).
    pub iterations: u32,
    pub scoring_runs: Vec<RunSummary>,
}

/// Options of a job that are not part of the model's configuration.
#[derive(Clone, Debug, Default)]
pub struct JobOptions {
    /// Continue from the checkpoints in the output directory.
    pub resume: bool,
    /// Stop the final run after this many steps (leaving a checkpoint to resume).
    pub stop_after: Option<u64>,
}

fn encode_all(
    samples: &[SampleRow],
    context: &RegionContext,
    vocab: &Vocabulary,
    config: &TrainConfig,
) -> Result<Arc<Vec<EncodedSample>>> {
    // Cutting crops is most of the work when the model sees pixels: it takes the cores, up to
    // `MAX_CROP_THREADS` (each thread keeps a few decoded images).
    let threads = match config.model.image_crop > 0 {
        true => std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_CROP_THREADS)),
        false => 1,
    };
    Ok(Arc::new(encode_samples(
        samples, context, vocab, config, threads,
    )?))
}

/// The most threads that cut crops at once: each holds up to eight decoded images.
const MAX_CROP_THREADS: usize = 8;

/// Every sample encoded ([`encode_sample`]), in order, by up to `threads` threads, each over a
/// contiguous share that ends where an image's samples end (so an image is decoded by one
/// thread, once while its samples follow each other). Fails when the model sees pixels and no
/// image could be read.
pub fn encode_samples(
    samples: &[SampleRow],
    context: &RegionContext,
    vocab: &Vocabulary,
    config: &TrainConfig,
    threads: usize,
) -> Result<Vec<EncodedSample>> {
    let share = samples.len().div_ceil(threads.max(1)).max(1);
    let mut shares = Vec::new();
    let mut start = 0;
    while start < samples.len() {
        let mut end = (start + share).min(samples.len());
        while end < samples.len() && samples[end].image_id == samples[end - 1].image_id {
            end += 1;
        }
        shares.push(&samples[start..end]);
        start = end;
    }
    let encoded: Vec<(Vec<EncodedSample>, Option<ImageCrops>)> = std::thread::scope(|scope| {
        let parts: Vec<_> = shares
            .into_iter()
            .map(|part| {
                scope.spawn(move || {
                    let images = ImageCrops::new(config);
                    let encoded = (part.iter())
                        .map(|s| encode_sample(s, context, vocab, config, images.as_ref()))
                        .collect();
                    (encoded, images)
                })
            })
            .collect();
        parts
            .into_iter()
            .map(|part| {
                part.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let images = ImageCrops::new(config);
    let mut out = Vec::with_capacity(samples.len());
    for (part, crops) in encoded {
        out.extend(part);
        if let (Some(images), Some(crops)) = (&images, crops) {
            images.absorb(crops);
        }
    }
    if let Some(images) = &images {
        images.check()?;
    }
    Ok(out)
}

fn plan(config: &TrainConfig, segments: Vec<Segment>, salt: u64) -> DataPlan {
    DataPlan {
        segments,
        seed: config.seed ^ salt,
        token_budget: config.batching.token_budget,
        max_batch_samples: config.batching.max_batch_samples,
    }
}

fn segment(pool: Vec<usize>, steps: u64, balanced: bool, samples: &CurriculumRows) -> Segment {
    let weights = balanced.then(|| {
        let levels: Vec<i32> = pool.iter().map(|&j| samples.length_level(j)).collect();
        balanced_level_weights(&levels)
    });
    Segment {
        pool,
        steps,
        weights,
    }
}

/// The vocabulary of a job: the one saved in `out` when resuming, else built from the samples.
pub fn job_vocabulary(
    out: &Path,
    samples: &[SampleRow],
    context: &RegionContext,
    resume: bool,
) -> Result<Vocabulary> {
    let saved = out.join(VOCAB_FILE);
    if resume && saved.is_file() {
        return Vocabulary::load(&saved);
    }
    Ok(Vocabulary::build(samples, context.labels()))
}

/// Trains on `samples`: plainly for `config.steps`, or with the curriculum when
/// `config.curriculum.enabled`. The final model's checkpoint is written to `out`.
pub fn train_samples(
    samples: &[SampleRow],
    context: &RegionContext,
    config: &TrainConfig,
    out: &Path,
    device: Device,
    options: &JobOptions,
) -> Result<TrainOutcome> {
    config.validate()?;
    if samples.is_empty() {
        return Err(Error::invalid(
            "training data",
            format!(
                "no samples of splits {:?} and methods {:?}",
                config.splits, config.methods
            ),
        ));
    }
    if config.threads > 0 {
        tch::set_num_threads(config.threads);
    }
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let vocab = job_vocabulary(out, samples, context, options.resume)?;
    let encoded = SampleSource::in_memory(encode_all(samples, context, &vocab, config)?)?;
    let rows = CurriculumRows::of_rows(samples)?;
    let (trusted, generated): (Vec<usize>, Vec<usize>) =
        (0..rows.len()).partition(|&j| config.curriculum.is_trusted(rows.method(j)));
    if !config.curriculum.enabled {
        let all: Vec<usize> = (0..samples.len()).collect();
        let steps = config.steps;
        let plan = plan(
            config,
            vec![segment(all, steps, config.curriculum.balanced, &rows)],
            0,
        );
        let run = run_plan(
            out,
            encoded,
            plan,
            config,
            &vocab,
            device,
            0,
            options.resume,
            options.stop_after,
        )?;
        return Ok(TrainOutcome {
            out: out.to_path_buf(),
            samples: samples.len(),
            trusted: trusted.len(),
            generated: generated.len(),
            run,
            iterations: 0,
            scoring_runs: Vec::new(),
        });
    }
    curriculum(
        &rows, &encoded, &vocab, config, out, device, options, &trusted, &generated,
    )
}

/// CLID's curriculum over `samples` (what it reads of each sample besides its encoding;
/// encoded as `encoded`, index for index): the two scoring
/// models, the quality scores, then the final model trained iteration by iteration on
/// trusted ∪ drawn samples. `trusted` and `generated` are indices into `samples`. Every batch
/// is fetched from `encoded` when it is built, so over a pool the curriculum holds what
/// [`SampleSource`] says, never the whole pool.
#[allow(clippy::too_many_arguments)]
pub fn curriculum(
    samples: &CurriculumRows,
    encoded: &SampleSource,
    vocab: &Vocabulary,
    config: &TrainConfig,
    out: &Path,
    device: Device,
    options: &JobOptions,
    trusted: &[usize],
    generated: &[usize],
) -> Result<TrainOutcome> {
    let cc = &config.curriculum;
    if encoded.len() != samples.len() {
        return Err(Error::invalid(
            "curriculum",
            format!(
                "{} samples but {} encoded ones: they must match index for index",
                samples.len(),
                encoded.len()
            ),
        ));
    }
    if trusted.is_empty() {
        return Err(Error::invalid(
            "curriculum",
            format!("no trusted samples (methods {:?})", cc.trusted_methods),
        ));
    }
    // M~ on trusted + generated, M on trusted: independent models (the paper's description;
    // the reference code fine-tunes M~ into M).
    let all: Vec<usize> = (0..samples.len()).collect();
    let scoring = |dir: &str, pool: Vec<usize>, salt: u64| -> Result<RunSummary> {
        run_plan(
            &out.join(dir),
            encoded.clone(),
            plan(
                config,
                vec![segment(pool, cc.scoring_steps, false, samples)],
                salt,
            ),
            config,
            vocab,
            device,
            salt,
            options.resume,
            None,
        )
    };
    let extended_run = scoring(EXTENDED_DIR, all, 0xe7)?;
    let trusted_run = scoring(TRUSTED_DIR, trusted.to_vec(), 0x7e)?;
    let extended = Trainer::load(&out.join(EXTENDED_DIR), vocab, device)?;
    let trusted_model = Trainer::load(&out.join(TRUSTED_DIR), vocab, device)?;
    let budget = config.batching.token_budget;
    let extended_ll = score_samples(&extended.model, encoded, generated, budget)?;
    let trusted_ll = score_samples(&trusted_model.model, encoded, generated, budget)?;
    drop((extended, trusted_model));
    let scores: Vec<f64> = trusted_ll
        .iter()
        .zip(&extended_ll)
        .map(|(&t, &e)| quality_score(t, e))
        .collect();
    let records: Vec<ScoreRecord> = generated
        .iter()
        .enumerate()
        .map(|(k, &j)| ScoreRecord {
            sample_id: samples.sample_id(j).to_string(),
            method: samples.method(j).to_string(),
            length_level: samples.length_level(j),
            coverage: samples.coverage(j),
            trusted_log_likelihood: trusted_ll[k],
            extended_log_likelihood: extended_ll[k],
            quality: scores[k],
        })
        .collect();
    let curriculum_dir = out.join(CURRICULUM_DIR);
    std::fs::create_dir_all(&curriculum_dir).map_err(|e| Error::io(&curriculum_dir, e))?;
    write_scores(&curriculum_dir.join("scores.parquet"), &records)?;
    let iterations = iteration_count(generated.len(), cc.c_percent);
    let selections: Vec<IterationSelection> = (1..=iterations)
        .map(|i| select_iteration(&scores, cc, i))
        .collect();
    let ids: Vec<String> = records.iter().map(|r| r.sample_id.clone()).collect();
    write_selections(
        &curriculum_dir.join("selections.parquet"),
        &ids,
        &scores,
        &selections,
    )?;
    // The final model starts from fresh weights and optimizer (as the reference's selection
    // stages); one segment of η steps per iteration on trusted ∪ drawn.
    let segments = selections
        .iter()
        .map(|s| {
            let mut pool = trusted.to_vec();
            pool.extend(s.chosen.iter().map(|&k| generated[k]));
            segment(pool, cc.steps_per_iteration, cc.balanced, samples)
        })
        .collect();
    let run = run_plan(
        out,
        encoded.clone(),
        plan(config, segments, 0xc1),
        config,
        vocab,
        device,
        0xc1,
        options.resume,
        options.stop_after,
    )?;
    Ok(TrainOutcome {
        out: out.to_path_buf(),
        samples: samples.len(),
        trusted: trusted.len(),
        generated: generated.len(),
        run,
        iterations,
        scoring_runs: vec![extended_run, trusted_run],
    })
}
