//! The augmentation dataflow: per-image state in a differential collection, one operator per
//! stage, the stages of every configured method in a fixed order.
//!
//! ```text
//! records ─(image key, arrange)→ gather → [originals] → [SSA: text-to-amr → amr-align → merge → event-sample
//!         → realize → quality-filter → control-signals] → [clid] → [gbc] → [relatedness]
//!         → [cutswap] → samples
//! ```
//!
//! A run has two phases. The read phase ([`super::run_collect`]) reads and exchanges every
//! record; the corpus-level models (SSA's scorer and vectors, the relatedness encoder, the CutSwap
//! vocabulary and clusters) are fitted on the main thread on all of the run's records, so they are
//! the same for any number of workers, and shared with the workers by `Arc`. The augment phase
//! then feeds the records into a differential collection keyed by image; its arrangement sends
//! each image's records to one worker, where the stages run. On a single process the images go
//! through in rounds of [`ROUND_IMAGES`], each a dataflow of its own, so that the stages hold a
//! round's images at a time. Randomness comes from (seed, image key, stage) only, and the
//! samples are ordered by image id, then method (the order above), then sample index, so the
//! dataset is byte-identical for any `-w`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use differential_dataflow::input::Input;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Exchange, Probe};

use super::state::bucket_of;

use super::record::{ImageRecord, Staged};
use super::runtime::{CollectedRun, KeyedRow};
use super::ssa::STAGES as SSA_STAGES;
use super::stages::{
    amr_align::amr_align, control_signals::control_signals, event_sample::event_sample,
    gather::gather, merge::merge, method::method, quality_filter::quality_filter, realize::realize,
    text_to_amr::text_to_amr, Failure, Images, MethodContext, SsaImage, StageContext, StageMeter,
};
use super::ClusterOptions;
use crate::augment::method::Method;
use crate::augment::ssa::{Drop, SsaConfig, SsaKept, SsaModels};
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::export::StageMetrics;
use crate::ingest::Row;
use crate::schema::{RejectedRow, SampleRow};

/// The methods of a run, with their configurations and fitted corpus-level models.
#[derive(Default)]
pub struct Methods {
    /// The original captions as `original` samples, before every other method's.
    pub originals: Option<Arc<dyn Method>>,
    pub ssa: Option<(SsaConfig, SsaModels)>,
    /// The single-stage methods after SSA, in dataflow order: CLID, GBC, relatedness, CutSwap,
    /// then the registered ones ([`crate::augment::method`]).
    pub after_ssa: Vec<Arc<dyn Method>>,
    /// Whether SSA's stages keep each image's record for the state ([`SsaKept`]); ignored
    /// with an external quality scorer, whose scores a record cannot replay.
    pub keep_records: bool,
}

impl Methods {
    /// The stages these methods run, in dataflow order, as named in the manifest.
    pub fn stage_names(&self) -> Vec<String> {
        let mut names = vec!["gather".to_string()];
        names.extend(self.originals.iter().map(|m| m.stage().to_string()));
        if self.ssa.is_some() {
            names.extend(SSA_STAGES.map(str::to_string));
        }
        names.extend(self.after_ssa.iter().map(|m| m.stage().to_string()));
        names
    }
}

/// What the augment phase produced, in deterministic order.
#[derive(Debug, Default)]
pub struct AugmentRun {
    pub samples: Vec<SampleRow>,
    /// Records the stages rejected, with the image they belong to.
    pub rejected: Vec<(String, RejectedRow)>,
    pub stages: Vec<StageMetrics>,
    pub images: u64,
    /// Sentences SSA's quality filter dropped, by reason, and the caption AMRs `amr-align`
    /// token-aligned ([`Drop::TokenAligned`]).
    pub dropped: BTreeMap<Drop, u64>,
    /// Wall-clock time of the stages, from feeding the first record to the last image's output.
    pub wall: std::time::Duration,
    /// What the state keeps of each image's SSA ([`Methods::keep_records`]), by image id.
    pub records: Vec<(String, SsaKept)>,
}

/// The rows the stages work on: every read row but existing samples, in read order; only the
/// images in `only` when given.
fn input_rows(collected: &CollectedRun, only: Option<&BTreeSet<String>>) -> Vec<Arc<KeyedRow>> {
    collected
        .rows
        .iter()
        .filter(|r| !matches!(r.row, Row::Sample(_)))
        .filter(|r| only.is_none_or(|ids| ids.contains(r.row.image_id())))
        .cloned()
        .collect()
}

/// The run's images as the corpus-level fits see them: every image's rows in read order, images
/// sorted by id (the same grouping `gather` makes on the workers).
pub fn group_images(collected: &CollectedRun) -> Vec<ImageAnnotations> {
    let mut rows = input_rows(collected, None);
    rows.sort_by_key(|r| (r.unit, r.ordinal));
    ImageAnnotations::group(rows.into_iter().map(|keyed| keyed.row.clone()))
        .into_values()
        .collect()
}

/// The images one round of the augment phase computes on a single process: each round is a
/// dataflow of its own, which ends before the next one starts, so that what the stages hold
/// between them (an image's rows, graphs, merges and samples: about 50 KB an image with the
/// shipped SSA recipe) is a round's, not every computed image's.
pub const ROUND_IMAGES: usize = 512;

/// The rounds of the augment phase (the indices of their rows in `rows`, in read order), and
/// the number of images. Every row of an image is in one round; images are put in rounds of
/// [`ROUND_IMAGES`] in id order. With several processes, whose rows of an image may be read by
/// more than one of them, every row is in one round.
fn rounds(rows: &[Arc<KeyedRow>], processes: usize) -> (Vec<Vec<usize>>, u64) {
    let ids: BTreeSet<&str> = rows.iter().map(|r| r.row.image_id()).collect();
    let images = ids.len() as u64;
    if processes > 1 {
        return (vec![(0..rows.len()).collect()], images);
    }
    let round_of: HashMap<&str, usize> = (ids.into_iter().enumerate())
        .map(|(i, id)| (id, i / ROUND_IMAGES))
        .collect();
    let mut rounds = vec![Vec::new(); (images as usize).div_ceil(ROUND_IMAGES).max(1)];
    for (i, keyed) in rows.iter().enumerate() {
        rounds[round_of[keyed.row.image_id()]].push(i);
    }
    (rounds, images)
}

/// Runs the stages of `methods` over the records of a read phase (of the images in `only`, when
/// given). Samples come out ordered by image id, then method, then sample index.
pub fn run_augment(
    collected: &CollectedRun,
    seed: u64,
    methods: Methods,
    cluster: &ClusterOptions,
    only: Option<&BTreeSet<String>>,
    buckets: usize,
) -> Result<AugmentRun> {
    let local_workers = cluster.workers.max(1);
    let timely_config = cluster.timely_config()?;
    let names = methods.stage_names();
    let rows: Arc<Vec<Arc<KeyedRow>>> = Arc::new(input_rows(collected, only));
    let (rounds, total_images) = rounds(&rows, cluster.processes);
    let rounds = Arc::new(rounds);
    let failure = Failure::default();
    let contexts = StageContexts::new(methods, seed, &failure);
    let (sender, receiver) = crossbeam_channel::unbounded::<WorkerOutput>();
    let progress = crate::cli::progress::items("augment", total_images);
    let started = Instant::now();
    let worker_names = names.clone();
    let connecting = super::cluster::Connecting::start(cluster, "method stages");
    let guards = timely::execute(timely_config, move |worker| {
        let index = worker.index();
        let out = sender.clone();
        let meters: Vec<StageMeter> = worker_names.iter().map(|s| StageMeter::new(s)).collect();
        let stage_meters = meters.clone();
        let local = index % local_workers;
        for round in rounds.iter() {
            let out = out.clone();
            let contexts = contexts.clone();
            let stage_meters = stage_meters.clone();
            let (mut input, probe) = worker.dataflow::<u64, _, _>(move |scope| {
                // Meters in the order of `names`: every stage wired below takes the next one.
                let mut meters = stage_meters.into_iter();
                let mut next = || meters.next().unwrap_or_else(|| StageMeter::new("unnamed"));
                let (input, records) = scope.new_collection::<(String, ImageRecord), isize>();
                let images = gather(records, next());
                let images = contexts.wire(images, &mut next);
                // Each image's outputs go to the worker that owns its bucket, so that with
                // several processes every process receives exactly the images of the buckets
                // it writes.
                let probe = images
                    .inner
                    .flat_map(ImageOutput::of_update)
                    .exchange(move |output: &ImageOutput| {
                        bucket_of(&output.image_id, buckets) as u64
                    })
                    .flat_map(move |output: ImageOutput| {
                        let _ = out.send(WorkerOutput::Image(output));
                        None::<()>
                    })
                    .probe()
                    .0;
                (input, probe)
            });
            // This process's rows of the round, spread over its own workers.
            for &i in round.iter().filter(|&&i| i % local_workers == local) {
                let keyed = &rows[i];
                input.insert((
                    keyed.row.image_id().to_string(),
                    ImageRecord(Arc::clone(keyed)),
                ));
            }
            // The round's dataflow ends before the next one starts, and with it what its
            // stages held.
            input.close();
            while !probe.done() {
                worker.step();
            }
        }
        let _ = sender.send(WorkerOutput::Meters(
            meters.iter().map(StageMeter::snapshot).collect(),
        ));
    })
    .map_err(|e| Error::Config(format!("starting workers: {e}")))?;
    drop(connecting);

    let mut run = AugmentRun::default();
    let mut per_image: Vec<(String, Vec<SampleRow>, Vec<RejectedRow>)> = Vec::new();
    let mut stages: Vec<StageMetrics> = names
        .iter()
        .map(|s| StageMetrics {
            name: s.to_string(),
            ..Default::default()
        })
        .collect();
    for message in receiver.iter() {
        match message {
            WorkerOutput::Image(ImageOutput {
                image_id,
                samples,
                rejected,
                dropped,
                record,
            }) => {
                for (reason, n) in dropped {
                    *run.dropped.entry(reason).or_insert(0) += n;
                }
                if let Some(record) = record {
                    run.records.push((image_id.clone(), record));
                }
                per_image.push((image_id, samples, rejected));
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
            failure.set(Error::Config(format!("worker {i} panicked: {reason}")));
        }
    }
    if let Some(error) = failure.take() {
        return Err(error);
    }
    per_image.sort_by(|a, b| a.0.cmp(&b.0));
    run.records.sort_by(|a, b| a.0.cmp(&b.0));
    run.images = per_image.len() as u64;
    run.stages = stages;
    for (image_id, samples, rejected) in per_image {
        run.samples.extend(samples);
        run.rejected
            .extend(rejected.into_iter().map(|r| (image_id.clone(), r)));
    }
    run.wall = started.elapsed();
    Ok(run)
}

/// What the method stages of one run share, ready to be wired on every worker: each configured
/// method's configuration and fitted models, with the run's seed and failure slot.
#[derive(Clone, Default)]
pub struct StageContexts {
    originals: Option<Arc<MethodContext<Arc<dyn Method>>>>,
    ssa: Option<Arc<StageContext>>,
    after_ssa: Vec<Arc<MethodContext<Arc<dyn Method>>>>,
}

impl StageContexts {
    pub fn new(methods: Methods, seed: u64, failure: &Failure) -> StageContexts {
        let records = methods.keep_records;
        StageContexts {
            originals: methods.originals.map(|m| method_context(seed, m, failure)),
            ssa: methods.ssa.map(|(config, models)| {
                Arc::new(StageContext {
                    seed,
                    records: records && models.external_quality.is_none(),
                    config,
                    models,
                    failure: failure.clone(),
                })
            }),
            after_ssa: methods
                .after_ssa
                .into_iter()
                .map(|m| method_context(seed, m, failure))
                .collect(),
        }
    }

    /// Wires the stages after `gather`, in the order of [`Methods::stage_names`]; every stage
    /// takes the next meter from `next`.
    pub fn wire<'scope>(
        &self,
        mut images: Images<'scope>,
        next: &mut dyn FnMut() -> StageMeter,
    ) -> Images<'scope> {
        if let Some(ctx) = &self.originals {
            images = method(images, Arc::clone(ctx), next());
        }
        if let Some(ctx) = &self.ssa {
            images = text_to_amr(images, Arc::clone(ctx), next());
            images = amr_align(images, Arc::clone(ctx), next());
            images = merge(images, Arc::clone(ctx), next());
            images = event_sample(images, Arc::clone(ctx), next());
            images = realize(images, Arc::clone(ctx), next());
            images = quality_filter(images, Arc::clone(ctx), next());
            images = control_signals(images, Arc::clone(ctx), next());
        }
        for ctx in &self.after_ssa {
            images = method(images, Arc::clone(ctx), next());
        }
        images
    }
}

fn method_context<M>(seed: u64, method: M, failure: &Failure) -> Arc<MethodContext<M>> {
    Arc::new(MethodContext {
        seed,
        method,
        failure: failure.clone(),
    })
}

/// What the stages made of one image; crosses process boundaries to the bucket's owner.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ImageOutput {
    pub image_id: String,
    pub samples: Vec<SampleRow>,
    pub rejected: Vec<RejectedRow>,
    pub dropped: Vec<(Drop, u64)>,
    /// What the state keeps of the image's SSA ([`Methods::keep_records`]).
    pub record: Option<SsaKept>,
}

impl ImageOutput {
    /// What an update of the stages' collection of images holds, when it adds the image.
    pub(crate) fn of_update(
        (staged, _time, diff): (Staged<SsaImage>, u64, isize),
    ) -> Option<ImageOutput> {
        (diff > 0).then_some(ImageOutput {
            image_id: staged.image_id,
            samples: staged.value.samples,
            rejected: staged.value.rejected,
            dropped: staged.value.dropped,
            record: staged.value.record,
        })
    }
}

enum WorkerOutput {
    Image(ImageOutput),
    Meters(Vec<StageMetrics>),
}

#[cfg(test)]
mod tests {
    use super::super::runtime::test_caption;
    use super::*;

    fn caption(image: &str, n: u64) -> Arc<KeyedRow> {
        Arc::new(test_caption(image, n))
    }

    /// The image of each row of a round, in the round's order.
    fn images_of(rows: &[Arc<KeyedRow>], round: &[usize]) -> Vec<String> {
        (round.iter())
            .map(|&i| rows[i].row.image_id().to_string())
            .collect()
    }

    #[test]
    fn an_images_rows_go_through_in_one_round_of_images_in_id_order() {
        // 1,100 images, two rows each, the second rows read after all the first ones, in
        // descending id order: ids "i0000" .. "i1099".
        let ids: Vec<String> = (0..1100).rev().map(|n| format!("i{n:04}")).collect();
        let rows: Vec<Arc<KeyedRow>> = (ids.iter().map(|id| caption(id, 0)))
            .chain(ids.iter().map(|id| caption(id, 1)))
            .collect();
        let (rounds, images) = rounds(&rows, 1);
        assert_eq!(images, 1100);
        // 512 + 512 + 76 images, in id order.
        assert_eq!(rounds.len(), 3);
        let first = images_of(&rows, &rounds[0]);
        assert_eq!(first.len(), 2 * 512);
        assert!(first.iter().all(|id| id.as_str() < "i0512"));
        let second = images_of(&rows, &rounds[1]);
        assert!(second
            .iter()
            .all(|id| ("i0512".."i1024").contains(&id.as_str())));
        assert_eq!(rounds[2].len(), 2 * 76);
        // Every row once, each round in read order: image i1099's first row is row 0.
        let mut all: Vec<usize> = rounds.concat();
        assert!(rounds.iter().all(|r| r.windows(2).all(|w| w[0] < w[1])));
        all.sort_unstable();
        assert_eq!(all, (0..2200).collect::<Vec<_>>());
        assert_eq!(rounds[2][0], 0);
        assert_eq!(rows[rounds[2][0]].row.image_id(), "i1099");
    }

    #[test]
    fn several_processes_take_every_row_in_one_round() {
        let rows: Vec<Arc<KeyedRow>> = (0..1500).map(|n| caption(&format!("i{n}"), 0)).collect();
        let (rounds, images) = rounds(&rows, 2);
        assert_eq!(images, 1500);
        assert_eq!(rounds, vec![(0..1500).collect::<Vec<_>>()]);
        assert_eq!(super::rounds(&[], 1), (vec![Vec::new()], 0));
    }
}
