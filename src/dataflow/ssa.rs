//! The SSA dataflow: per-image state in differential collections, one operator per stage.
//!
//! ```text
//! records ─(image key, arrange)→ gather → amr-align → merge → event-sample → realize
//!         → quality-filter → control-signals → samples
//! ```
//!
//! A run has two phases. The read phase ([`super::run_collect`]) reads and exchanges every
//! record; the corpus-level models (the quality scorer's language model, the word vectors) are
//! trained on all of the run's captions in read order, so they are the same for any number of
//! workers. The SSA phase then feeds the records into a differential collection keyed by image;
//! its arrangement sends each image's records to one worker, where the stages run. Randomness
//! comes from (seed, image key, stage) only, and the samples are ordered by image (first read
//! position) and sample index, so the dataset is byte-identical for any `-w`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use differential_dataflow::input::Input;

use super::record::{ImageRecord, Staged};
use super::runtime::{CollectedRun, KeyedRow};
use super::stages::{
    amr_align::amr_align, control_signals::control_signals, event_sample::event_sample,
    gather::gather, merge::merge, quality_filter::quality_filter, realize::realize, Failure,
    SsaImage, StageContext, StageMeter,
};
use super::ClusterOptions;
use crate::amr::align::ModifierLexicon;
use crate::augment::ssa::{Drop, EventRealizer, ExternalRealizer, SsaConfig, SsaModels};
use crate::error::{Error, Result};
use crate::export::StageMetrics;
use crate::ingest::Row;
use crate::models::{AdapterConfig, ModelKind, SubprocessAdapter};
use crate::schema::{RejectedRow, SampleRow};
use crate::select::quality::{BuiltinQualityScorer, QualityConfig, QualityScorer};
use crate::text::ppmi::{train_ppmi_vectors, PpmiConfig};
use crate::text::tokenize::tokenize;
use crate::text::{VectorFormat, WordVectors};

/// The stages in dataflow order, as named in the manifest.
pub const STAGES: [&str; 7] = [
    "gather",
    "amr-align",
    "merge",
    "event-sample",
    "realize",
    "quality-filter",
    "control-signals",
];

/// What the SSA phase produced, in deterministic order.
#[derive(Debug, Default)]
pub struct SsaRun {
    pub samples: Vec<SampleRow>,
    pub rejected: Vec<RejectedRow>,
    pub stages: Vec<StageMetrics>,
    pub images: u64,
    /// Sentences the quality filter dropped, by reason.
    pub dropped: BTreeMap<Drop, u64>,
    /// Wall-clock time of the stages, from feeding the first record to the last image's output.
    pub wall: std::time::Duration,
}

/// Trains or loads the corpus-level models SSA needs, from the run's rows in read order.
pub fn build_models(
    config: &SsaConfig,
    rows: &[KeyedRow],
    amr_to_text: Option<&AdapterConfig>,
    realizer: Arc<dyn EventRealizer>,
) -> Result<SsaModels> {
    let captions: Vec<Vec<String>> = rows
        .iter()
        .filter_map(|r| match &r.row {
            Row::Caption(c) => Some(tokenize(&c.text)),
            _ => None,
        })
        .collect();
    let quality = BuiltinQualityScorer::train(
        &captions,
        &QualityConfig {
            threshold: config.quality_threshold,
            ..QualityConfig::default()
        },
    )
    .map_err(|e| {
        Error::Config(format!(
            "ssa: the built-in quality scorer is trained on the run's captions: {e}"
        ))
    })?;
    let vectors = match &config.vectors {
        Some(path) => WordVectors::read(path, VectorFormat::Detect)?,
        None => {
            let pairs =
                train_ppmi_vectors(captions.iter().map(Vec::as_slice), &PpmiConfig::default());
            WordVectors::from_pairs(pairs)?
        }
    };
    let frames = match &config.frames {
        Some(path) => Some(read_frames(path)?),
        None => None,
    };
    let realizer: Arc<dyn EventRealizer> = match amr_to_text {
        Some(adapter) => {
            let name = "amr_to_text".to_string();
            let model =
                SubprocessAdapter::new(name.clone(), ModelKind::AmrToText, adapter.clone())?;
            Arc::new(ExternalRealizer {
                name,
                model: Arc::new(model),
            })
        }
        None => realizer,
    };
    Ok(SsaModels {
        lexicon: ModifierLexicon::wordnet(),
        vectors: (!vectors.is_empty()).then(|| Arc::new(vectors)),
        quality: Arc::new(quality) as Arc<dyn QualityScorer>,
        frames,
        realizer,
    })
}

/// PropBank frame lemmas, one per line (`sit` or `sit.xml`); `#` starts a comment.
pub fn read_frames(path: &Path) -> Result<HashSet<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    Ok(text
        .lines()
        .map(|l| l.trim().trim_end_matches(".xml").to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect())
}

/// Runs the SSA stages over the records of a read phase.
pub fn run_ssa(
    collected: &CollectedRun,
    seed: u64,
    config: &SsaConfig,
    models: SsaModels,
    cluster: &ClusterOptions,
) -> Result<SsaRun> {
    let timely_config = cluster.timely_config()?;
    let rows: Arc<Vec<KeyedRow>> = Arc::new(
        collected
            .rows
            .iter()
            .filter(|r| !matches!(r.row, Row::Sample(_)))
            .cloned()
            .collect(),
    );
    // Images in the order their first record was read: the order of the output.
    let mut image_order: HashMap<String, usize> = HashMap::new();
    for r in rows.iter() {
        let next = image_order.len();
        image_order
            .entry(r.row.image_id().to_string())
            .or_insert(next);
    }
    let ctx = Arc::new(StageContext {
        seed,
        config: config.clone(),
        models,
        failure: Failure::default(),
    });
    let failure = ctx.failure.clone();
    let (sender, receiver) = crossbeam_channel::unbounded::<WorkerOutput>();
    let total_images = image_order.len() as u64;
    let progress = crate::cli::progress::items("ssa", total_images);
    let started = Instant::now();
    let guards = timely::execute(timely_config, move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let out = sender.clone();
        let ctx = Arc::clone(&ctx);
        let meters: Vec<StageMeter> = STAGES.iter().map(|s| StageMeter::new(s)).collect();
        let stage_meters = meters.clone();
        let (mut input, probe) = worker.dataflow::<u64, _, _>(move |scope| {
            let (input, records) = scope.new_collection::<(String, ImageRecord), isize>();
            let images = gather(records, stage_meters[0].clone());
            let images = amr_align(images, Arc::clone(&ctx), stage_meters[1].clone());
            let images = merge(images, Arc::clone(&ctx), stage_meters[2].clone());
            let images = event_sample(images, Arc::clone(&ctx), stage_meters[3].clone());
            let images = realize(images, Arc::clone(&ctx), stage_meters[4].clone());
            let images = quality_filter(images, Arc::clone(&ctx), stage_meters[5].clone());
            let images = control_signals(images, Arc::clone(&ctx), stage_meters[6].clone());
            let probe = images
                .inspect(
                    move |(staged, _time, diff): &(Staged<SsaImage>, u64, isize)| {
                        if *diff > 0 {
                            let state = &staged.value;
                            let _ = out.send(WorkerOutput::Image {
                                image_id: staged.image_id.clone(),
                                samples: state.samples.clone(),
                                rejected: state.rejected.clone(),
                                dropped: state.dropped.clone(),
                            });
                        }
                    },
                )
                .probe()
                .0;
            (input, probe)
        });
        for (i, keyed) in rows.iter().enumerate() {
            if i % peers == index {
                input.insert((keyed.row.image_id().to_string(), ImageRecord(keyed.clone())));
            }
        }
        input.advance_to(1);
        input.flush();
        while probe.less_than(input.time()) {
            worker.step();
        }
        let _ = sender.send(WorkerOutput::Meters(
            meters.iter().map(StageMeter::snapshot).collect(),
        ));
    })
    .map_err(|e| Error::Config(format!("starting workers: {e}")))?;

    let mut run = SsaRun::default();
    let mut per_image: Vec<(usize, Vec<SampleRow>, Vec<RejectedRow>)> = Vec::new();
    let mut stages: Vec<StageMetrics> = STAGES
        .iter()
        .map(|s| StageMetrics {
            name: s.to_string(),
            ..Default::default()
        })
        .collect();
    for message in receiver.iter() {
        match message {
            WorkerOutput::Image {
                image_id,
                samples,
                rejected,
                dropped,
            } => {
                for (reason, n) in dropped {
                    *run.dropped.entry(reason).or_insert(0) += n;
                }
                let position = image_order.get(&image_id).copied().unwrap_or(usize::MAX);
                per_image.push((position, samples, rejected));
                progress.inc(1);
            }
            WorkerOutput::Meters(meters) => {
                for (total, m) in stages.iter_mut().zip(meters) {
                    total.rows_in += m.rows_in;
                    total.rows_out += m.rows_out;
                    total.rejected += m.rejected;
                    total.elapsed_ms += m.elapsed_ms;
                }
            }
        }
    }
    progress.finish_and_clear();
    for (i, result) in guards.join().into_iter().enumerate() {
        if let Err(reason) = result {
            failure.set(format!("worker {i} panicked: {reason}"));
        }
    }
    if let Some(reason) = failure.take() {
        return Err(Error::Config(format!(
            "ssa run failed, nothing committed: {reason}"
        )));
    }
    per_image.sort_by_key(|(position, _, _)| *position);
    run.images = per_image.len() as u64;
    run.stages = stages;
    for (_, samples, rejected) in per_image {
        run.samples.extend(samples);
        run.rejected.extend(rejected);
    }
    run.wall = started.elapsed();
    Ok(run)
}

enum WorkerOutput {
    Image {
        image_id: String,
        samples: Vec<SampleRow>,
        rejected: Vec<RejectedRow>,
        dropped: Vec<(Drop, u64)>,
    },
    Meters(Vec<StageMetrics>),
}
