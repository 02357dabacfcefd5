//! [`run`]: run a dataflow spec from its inputs to a committed dataset version, on one
//! process or as one process of a cluster. `capflow run` and `capflow watch` call it; a program
//! embedding capflow calls it the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::artifact::{ModelArtifact, MODELS_FILE};
use super::augment::{run_augment, AugmentRun};
use super::buckets::{BucketExport, Exported};
use super::engine::{run_streaming, streams, StreamState};
use super::inputs::{InputPlan, InputsState};
use super::models::{
    cache_parses, fit_methods_with, model_rows, models_digest, save_parses, FittedModels,
    ModelSource, ModelsFrom,
};
use super::refit::{self, BucketRecords};
use super::sink::{self, NamedSink};
use super::state::{self, bucket_of, image_digests, BucketState, Plan, StateDir};
use super::{run_collect, run_collect_sharing, ClusterOptions, CollectedRun, DataflowSpec};
use crate::augment::ssa::SsaKept;
use crate::error::{Error, Result};
use crate::export::{
    Committed, DatasetWriter, FileEntry, Manifest, ModelsSource, ModelsUsed, StageMetrics,
};
use crate::schema::{RejectedRow, SampleRow};
use crate::select::mix::{mix, MixConfig};

/// Images per batch handed to the sinks by a run that collected its rows.
const SINK_BATCH_IMAGES: usize = 1024;

/// How to run a spec.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Dataset directory to write (default: the spec's `output.dir`, else `out/<name>`).
    pub out: Option<PathBuf>,
    /// The incremental state directory (see docs/incremental.md).
    pub state: Option<PathBuf>,
    /// Memory budget of the run, in bytes ([`super::engine::DEFAULT_MEMORY_LIMIT`]).
    pub memory_limit: u64,
    /// With a state, commit nothing when no image changed ([`RunOutcome::Unchanged`]).
    pub skip_unchanged: bool,
    /// Fit the corpus-level models on the inputs even when the state holds fitted ones
    /// ([`super::artifact`]).
    pub refit: bool,
    /// Use the models stored in this state directory instead of fitting them.
    pub models: Option<PathBuf>,
    pub cluster: ClusterOptions,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            out: None,
            state: None,
            memory_limit: super::engine::DEFAULT_MEMORY_LIMIT,
            skip_unchanged: false,
            refit: false,
            models: None,
            cluster: ClusterOptions::default(),
        }
    }
}

/// What [`run`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The dataset's new version.
    Committed(u64),
    /// This process of a cluster run wrote its buckets; process 0 committed this version.
    Part(u64),
    /// With `--state`, no image changed and nothing was committed (asked for by `skip_unchanged`).
    Unchanged,
    /// The run's output equals this version's, the dataset's latest, so nothing was committed.
    Kept(u64),
}

/// Runs `spec` (its input paths resolved) and commits its dataset; see [`RunOptions`]. The
/// spec's sinks ([`super::sink`]) are built first, take the samples during the run and are told
/// how it ended.
pub fn run(spec: &DataflowSpec, options: &RunOptions) -> Result<RunOutcome> {
    let mut sinks = sink::build(&spec.sinks)?;
    if let Some(table) = &spec.train {
        sinks.push(training_sink(table, spec, options)?);
    }
    let outcome = run_with_sinks(spec, options, &sinks);
    match &outcome {
        // A kept version holds exactly the samples the sinks were handed.
        Ok(
            RunOutcome::Committed(version) | RunOutcome::Part(version) | RunOutcome::Kept(version),
        ) => sink::committed(&sinks, *version)?,
        // Nothing was committed: the sinks end as after a failed run.
        Ok(RunOutcome::Unchanged) => sink::aborted(
            &sinks,
            &Error::invalid("run", "no image changed; nothing was committed"),
        ),
        Err(error) => sink::aborted(&sinks, error),
    }
    outcome
}

/// The sink of a spec's `[train]` table (feature `train`).
fn training_sink(
    table: &toml::Value,
    spec: &DataflowSpec,
    options: &RunOptions,
) -> Result<NamedSink> {
    if options.cluster.processes > 1 {
        return Err(Error::Usage(
            "[train] trains in one process: run the cluster without it, then `capflow train \
             --data DIR` on the committed dataset"
                .into(),
        ));
    }
    let dataset = spec.output_dir(options.out.as_deref());
    start_training_sink(table, &dataset)
}

#[cfg(feature = "train")]
fn start_training_sink(table: &toml::Value, dataset: &std::path::Path) -> Result<NamedSink> {
    let sink = crate::train::TrainSink::start(table, dataset)?;
    Ok(NamedSink {
        name: "train".into(),
        sink: std::sync::Arc::new(sink),
    })
}

#[cfg(not(feature = "train"))]
fn start_training_sink(_table: &toml::Value, _dataset: &std::path::Path) -> Result<NamedSink> {
    Err(Error::Usage(
        "the spec has a [train] table, but this capflow was built without the training sink: \
         install libtorch with scripts/setup-torch.sh and build with `cargo build --release \
         --features train` (docs/train.md)"
            .into(),
    ))
}

fn run_with_sinks(
    spec: &DataflowSpec,
    options: &RunOptions,
    sinks: &[NamedSink],
) -> Result<RunOutcome> {
    let cluster = &options.cluster;
    cluster.timely_config()?;
    if cluster.processes > 1 {
        crate::dataflow::cluster::watch_peers(cluster.process);
    }
    let mut prelude = Prelude::open(spec, options)?;
    let rerun = prelude.rerun(spec, options)?;
    // A run streams unless it reads its inputs piece by piece against a state and collects the
    // rows of few pieces, or replays a refit. With a state it streams when the models learn
    // from the inputs (a new caption changes them, so every input is read), when every piece
    // would be read (the state's pieces cannot be reused), when the changed pieces are many, or
    // with several processes.
    if !rerun.collects_few && streamed_run(cluster, prelude.created.as_ref(), spec)? {
        // The plan's listing and record are not needed to read every input: let them go.
        drop(rerun);
        return prelude.stream(spec, options, sinks);
    }
    let collecting = Collecting { prelude, rerun };
    run_collected(spec, options, sinks, collecting)
}

/// What every run settles before it reads its inputs: where it writes, its state, and where its
/// models come from.
struct Prelude {
    out: PathBuf,
    state: Option<StateDir>,
    /// The state's header as every process read it before the read phase.
    header_before: Option<state::StateHeader>,
    /// Process 0's writer, which locked the output directory before the read phase.
    created: Option<DatasetWriter>,
    /// A single process with a state reads its inputs piece by piece, and only what changed
    /// when the state describes the dataset in the output directory and nothing else changed
    /// (the configuration, the engine, the models' corpus): see docs/incremental.md.
    piecewise: bool,
    /// The rows of the models' fixed corpus, and the models an earlier run fitted (`--models`,
    /// else the state's, unless `--refit`).
    corpus: Option<CollectedRun>,
    artifact: Option<ModelArtifact>,
    /// The models' digest, when it is known before the inputs are read.
    pinned_models: Option<Option<String>>,
}

/// How a run with a state uses the state's record of its input pieces.
struct Rerun {
    /// Whether the record describes the dataset in the output directory, read with these
    /// models: then only new and changed pieces need to be read.
    reusable: bool,
    /// The inputs listed against the record, when it is reusable.
    plan: Option<InputPlan>,
    /// A `--refit` that replays SSA's quality filter from the state's records.
    replaying: Option<refit::Replaying>,
    /// Whether the run collects the rows of the few pieces it reads (or replays a refit)
    /// instead of streaming every input.
    collects_few: bool,
}

impl Prelude {
    fn open(spec: &DataflowSpec, options: &RunOptions) -> Result<Prelude> {
        let cluster = &options.cluster;
        let out = spec.output_dir(options.out.as_deref());
        let state = options.state.as_deref().map(StateDir::open).transpose()?;
        // Every process reads the state's header before the read phase; the first process
        // removes it only after the read phase, which no process leaves before all have
        // joined it.
        let header_before = match &state {
            Some(state) => state.header()?,
            None => None,
        };
        // The first process locks the output directory before the read phase for the same
        // reason: the other processes stage their shards only after it.
        let mut created = match cluster.process {
            0 => Some(create_writer(spec, &out)?),
            _ => None,
        };
        let corpus = match spec.corpus_spec() {
            Some(corpus) => Some(run_collect(&corpus, &ClusterOptions::default())?),
            None => None,
        };
        let artifact = model_artifact(spec, options, state.as_ref())?;
        agree_on_models(cluster, artifact.as_ref())?;
        // When the models do not learn from the inputs (none, a fixed corpus, or fitted
        // before), their digest is known before the inputs are read.
        let pinned_models = match (&corpus, &artifact, model_rows(spec)) {
            (Some(corpus), _, _) => Some(models_digest(spec, corpus)?),
            (None, Some(artifact), _) => Some(Some(artifact.info.id.clone())),
            (None, None, None) => Some(None),
            (None, None, Some(_)) => None,
        };
        if let (Some(writer), Some(models)) = (
            created.as_mut(),
            models_used(&pinned_models, &artifact, &corpus),
        ) {
            writer.models(models);
        }
        Ok(Prelude {
            out,
            piecewise: state.is_some() && cluster.processes == 1,
            state,
            header_before,
            created,
            corpus,
            artifact,
            pinned_models,
        })
    }

    /// Whether the state's record of the input pieces can be reused, the inputs listed against
    /// it, and whether the few pieces that changed (or a replaying refit's images) can be
    /// collected within the memory budget.
    fn rerun(&mut self, spec: &DataflowSpec, options: &RunOptions) -> Result<Rerun> {
        let previous = self.created.as_ref().and_then(DatasetWriter::previous);
        // A `--refit` that replays SSA's quality filter from the state's records: the models
        // are fitted from a pass over the captions, and only new and changed pieces, and the
        // images whose merge the new models change, are read
        // (docs/decisions/refit-replay.md).
        let replays = match (&self.state, &self.header_before) {
            (Some(dir), Some(before)) => refit::replays(spec, options, dir, before, previous),
            _ => false,
        };
        let pieces_reusable = |models: &Option<String>| {
            spec.mix == MixConfig::All
                && self.header_before.as_ref()
                    == Some(&state::header(
                        spec.config_hash(),
                        models.clone(),
                        spec.output.buckets,
                        previous,
                    ))
        };
        let reusable =
            self.piecewise && (replays || self.pinned_models.as_ref().is_some_and(pieces_reusable));
        // When the state's pieces can be reused, the inputs are listed against its record: the
        // run reads only new and changed pieces, and collects their rows (and a replay's
        // images to compute again) when they are few enough for the memory budget.
        let plan = match &self.state {
            Some(dir) if reusable => Some(InputPlan::make(spec, dir.dir(), true)?),
            _ => None,
        };
        // A rerun that collects also holds what grows with its state, not with what changed.
        let states_held = match (&plan, &self.state) {
            (Some(_), Some(dir)) => {
                dir.held_bytes(&options.cluster.owned_buckets(spec.output.buckets))?
            }
            _ => 0,
        };
        let collects = |also: f64| {
            plan.as_ref().is_some_and(|plan| {
                !plan.reads_everything()
                    && plan.collected_bytes(also) + states_held <= options.memory_limit / 2
            })
        };
        let (replaying, replay_too_many) = match &self.state {
            Some(dir) if replays && collects(0.0) => self.replay(spec, options, dir, collects)?,
            _ => (None, None),
        };
        let collects_few = replaying.is_some() || (!replays && collects(0.0));
        if let (Some(plan), false) = (&plan, collects_few) {
            // Say so when the rows alone would fit, and the state's records make them too many.
            let beside_states = match replay_too_many {
                None if plan.collected_bytes(0.0) <= options.memory_limit / 2 => format!(
                    " beside the state's per-image records (about {})",
                    indicatif::HumanBytes(states_held)
                ),
                _ => String::new(),
            };
            let (listed, read) = plan.pieces();
            crate::cli::out::status!(
                "capflow run {}: {read} of {listed} input pieces are new or changed{}, too many \
                 to hold within --memory-limit{beside_states}: reading every input on the \
                 streaming engine",
                spec.name,
                replay_too_many.unwrap_or_default()
            );
        }
        if let Some(replaying) = &replaying {
            self.pinned_models = Some(Some(replaying.models_digest.clone()));
            if let Some(writer) = self.created.as_mut() {
                writer.models(ModelsUsed {
                    source: ModelsSource::Fitted,
                    id: Some(replaying.models_digest.clone()),
                });
            }
        }
        Ok(Rerun {
            reusable,
            plan,
            replaying,
            collects_few,
        })
    }

    /// A replaying refit: fits the models from a pass over the state's captions and finds the
    /// images to compute again. It is kept when they are few enough to collect (`collects` of
    /// their share of the state's images); else it says what they add.
    fn replay(
        &self,
        spec: &DataflowSpec,
        options: &RunOptions,
        dir: &StateDir,
        collects: impl Fn(f64) -> bool,
    ) -> Result<(Option<refit::Replaying>, Option<String>)> {
        let spill = match &self.created {
            Some(writer) => writer.scratch_dir("replays")?,
            None => return Err(Error::Usage("a refit replays on one process".into())),
        };
        let replaying = refit::prepare(spec, dir, options.cluster.workers, &spill)?;
        crate::cli::out::status!(
            "capflow run {}: fitted the models on {} captions; the merge of {} images holds \
             under them, {} of the state's images are computed again",
            spec.name,
            replaying.models_metrics.rows_in,
            replaying.replayable,
            replaying.recompute.len()
        );
        let again = replaying.recompute.len();
        let share = again as f64 / (again as f64 + replaying.replayable as f64).max(1.0);
        Ok(match collects(share) {
            true => (Some(replaying), None),
            false => (
                None,
                Some(format!(" and {again} images are computed again")),
            ),
        })
    }

    /// Runs on the streaming engine. With a state, the inputs are read whole; a single
    /// process's workers record their pieces as they read them, so that a rerun with the models
    /// kept reads only new and changed pieces.
    fn stream(
        self,
        spec: &DataflowSpec,
        options: &RunOptions,
        sinks: &[NamedSink],
    ) -> Result<RunOutcome> {
        let cluster = &options.cluster;
        let state = match self.state {
            Some(dir) => {
                let pieces = cluster.processes == 1;
                if !pieces {
                    InputsState::remove(dir.dir())?;
                }
                Some(StreamStateOf {
                    dir,
                    before: self.header_before,
                    models: self.pinned_models.flatten(),
                    pieces,
                })
            }
            None => None,
        };
        let models = match (self.corpus, self.artifact) {
            (Some(corpus), _) => ModelsFrom::Corpus(corpus),
            (None, Some(artifact)) => ModelsFrom::Artifact(Box::new(artifact.models)),
            (None, None) => ModelsFrom::Inputs,
        };
        let streamed = Streamed {
            models,
            memory_limit: options.memory_limit,
            state,
        };
        run_streamed(spec, cluster, self.created, streamed, &self.out, sinks)
    }
}

/// The first process's writer of the dataset at `out`, which locks it.
fn create_writer(spec: &DataflowSpec, out: &std::path::Path) -> Result<DatasetWriter> {
    let mut writer = DatasetWriter::create(out, &spec.config_hash(), spec.output.shard_bytes)?;
    writer.retain_versions(true);
    if !spec.description.is_empty() {
        writer.describe(spec.description.clone());
    }
    writer.card_metadata(spec.card_metadata());
    Ok(writer)
}

/// With several processes, checks that every process fits the same models: process 0's choice
/// of `artifact` (its id, or none) is checked by the others.
fn agree_on_models(cluster: &ClusterOptions, artifact: Option<&ModelArtifact>) -> Result<()> {
    if cluster.processes <= 1 {
        return Ok(());
    }
    let process = cluster.process;
    let id = artifact.map_or("none", |a| a.info.id.as_str());
    let first = (process == 0).then(|| id.to_string());
    let chosen = crate::dataflow::cluster::broadcast_from_first(cluster, first)?;
    if chosen != id {
        return Err(Error::Usage(format!(
            "process {process} would fit other models than process 0 (its state or --models \
             holds {id}, process 0's {chosen}): give every process the same --state or --models \
             on shared storage (docs/cluster.md)"
        )));
    }
    Ok(())
}

/// What a run that collects its rows decided before it reads its inputs.
struct Collecting {
    prelude: Prelude,
    rerun: Rerun,
}

/// A run that collects its rows (a rerun with a state that reads few pieces, a replaying
/// refit, or a dataset the streaming engine cannot extend): reads them, plans what to compute
/// against the state, runs the stages, writes the buckets, the states and the changelog, and
/// commits.
fn run_collected(
    spec: &DataflowSpec,
    options: &RunOptions,
    sinks: &[NamedSink],
    mut collecting: Collecting,
) -> Result<RunOutcome> {
    let cluster = &options.cluster;
    let first = cluster.process == 0;
    let (mut collected, read_inputs) = collecting.read(spec, cluster)?;
    if first {
        if let Some(state) = &collecting.prelude.state {
            state.invalidate()?;
        }
    }
    if collecting.prelude.corpus.is_none() && cluster.processes > 1 && !collected.shared.is_empty()
    {
        collecting.prelude.corpus = Some(CollectedRun {
            rows: std::mem::take(&mut collected.shared),
            ..CollectedRun::default()
        });
    }
    // A piecewise read left its record of the input pieces pending in the state.
    let pieces_pending = read_inputs.is_some();
    // The other processes write their buckets through a part of the dataset, staged only now.
    let mut writer = match collecting.prelude.created.take() {
        Some(writer) => writer,
        None => DatasetWriter::part(
            &collecting.prelude.out,
            &spec.config_hash(),
            cluster.process,
        )?,
    };
    let previous = writer
        .previous()
        .map(|(m, sha)| (m.clone(), sha.to_string()));
    let previous = previous.as_ref().map(|(m, sha)| (m, sha.as_str()));
    let read = (&collected, read_inputs.flatten());
    let Some(planned) = collecting.plan(spec, options, read, previous, pieces_pending)? else {
        return Ok(RunOutcome::Unchanged);
    };
    let mut computed = collecting.compute(spec, cluster, &collected, &planned)?;
    let export_started = std::time::Instant::now();
    // Each process hands on the samples of the buckets it writes.
    let buckets = spec.output.buckets;
    let sink_stages = sink::feed_collected(
        sinks,
        (computed.samples.iter())
            .filter(|(id, _)| planned.owned.contains(&bucket_of(id, buckets)))
            .map(|(_, samples)| samples.as_slice()),
        SINK_BATCH_IMAGES,
    )?;
    let exported = collecting.export(
        (spec, cluster),
        &mut writer,
        &collected,
        &planned,
        &mut computed,
        previous,
    )?;
    // The rows read and the samples computed are written: what follows holds the buckets'
    // states a bucket at a time, not them.
    drop(std::mem::take(&mut collected.rows));
    drop(std::mem::take(&mut computed.samples));
    let Computed {
        mut stages,
        mut rejected,
        mut records,
        mut dropped,
        fitted,
        ..
    } = computed;
    if let Some(replaying) = &collecting.rerun.replaying {
        for (reason, n) in drop_reasons(&replaying.dropped()) {
            *dropped.entry(reason).or_insert(0) += n;
        }
        stages.push(replaying.metrics());
    }
    let state = collecting.prelude.state.as_ref();
    let image_rejected = write_bucket_states(
        spec,
        state,
        &planned.plan,
        &planned.digests,
        &planned.owned,
        (&mut rejected, &mut records),
    )?;
    if let (Some(state), true) = (state, pieces_pending) {
        InputsState::commit_pending(state.dir())?;
    }
    stages.push(StageMetrics {
        name: "export".into(),
        rows_in: exported.rows_written,
        rows_out: exported.rows_written,
        rejected: 0,
        elapsed_ms: export_started.elapsed().as_millis() as u64,
    });
    stages.extend(sink_stages);
    let part = Part {
        process: cluster.process,
        files: Vec::new(),
        runs: Vec::new(),
        read_rejected: collected.rejected,
        image_rejected,
        changes: exported.changes,
        counts: collected.counts,
        stages,
        dropped,
    };
    let state = state.map(|dir| StateCommit {
        dir,
        header: planned.header,
        artifact: fitted,
        pieces: false,
    });
    commit_collected(spec, cluster, writer, part, state, &collecting.prelude.out)
}

/// What a collecting run plans against the state ([`Collecting::plan`]).
struct CollectedPlan {
    plan: Plan,
    /// Every image read, with its digest.
    digests: BTreeMap<String, String>,
    /// The state's header after this run.
    header: state::StateHeader,
    /// The buckets this process writes.
    owned: Vec<usize>,
    /// The images a replaying refit computes again whose input rows did not change: their
    /// chunks keep their input tables' files.
    recomputed: BTreeSet<String>,
    /// Whether the models are fitted on this run's inputs (and not pinned beforehand).
    fits_on_inputs: bool,
    metrics: StageMetrics,
}

/// What a collecting run's stages computed ([`Collecting::compute`]), by image id.
struct Computed {
    /// The metrics of the read, the plan and the stages.
    stages: Vec<StageMetrics>,
    samples: BTreeMap<String, Vec<SampleRow>>,
    rejected: BTreeMap<String, Vec<RejectedRow>>,
    /// SSA's records of the computed images, for the state.
    records: BTreeMap<String, SsaKept>,
    /// SSA's sentences dropped, by reason.
    dropped: BTreeMap<String, u64>,
    /// The models to keep in the state.
    fitted: Option<ModelArtifact>,
}

impl Collecting {
    /// Reads the rows: piece by piece against the state's record of the input pieces (a single
    /// process with a state), else every input whole. Returns them, and, for a piecewise read,
    /// the images of the pieces it read (`None` when it read every piece).
    fn read(
        &mut self,
        spec: &DataflowSpec,
        cluster: &ClusterOptions,
    ) -> Result<(CollectedRun, Option<Option<BTreeSet<String>>>)> {
        match (&self.prelude.state, &self.prelude.created) {
            (Some(state_dir), Some(_)) if self.prelude.piecewise => {
                let also = self.rerun.replaying.as_ref().map(|r| r.recompute.clone());
                let read = tracing::info_span!("read").in_scope(|| {
                    let plan = match self.rerun.plan.take() {
                        Some(plan) => plan,
                        None => InputPlan::make(spec, state_dir.dir(), self.rerun.reusable)?,
                    };
                    crate::dataflow::inputs::read_planned(
                        plan,
                        state_dir.dir(),
                        &also.unwrap_or_default(),
                    )
                })?;
                crate::cli::out::status!("capflow run {}: {}", spec.name, read.summary);
                Ok((read.collected, Some(read.touched)))
            }
            _ => {
                if let Some(state_dir) = &self.prelude.state {
                    // A cluster run reads whole inputs and leaves no piece state behind.
                    InputsState::remove(state_dir.dir())?;
                }
                // Without a fixed model corpus or fitted models, every process fits the models
                // on every process's rows.
                let share = match (spec.corpus_spec(), &self.prelude.artifact) {
                    (None, None) => model_rows(spec),
                    _ => None,
                };
                Ok((run_collect_sharing(spec, cluster, share)?, None))
            }
        }
    }

    /// Plans which images to compute: every one without a state, else those whose digests
    /// differ from the state's (and, for a replaying refit, those whose records do not hold).
    /// `read` is the rows and, for a piecewise read, the images of the pieces read. `None`
    /// when nothing changed and `--skip-unchanged` commits nothing: the state is then as it was.
    fn plan(
        &self,
        spec: &DataflowSpec,
        options: &RunOptions,
        (collected, touched): (&CollectedRun, Option<BTreeSet<String>>),
        previous: Option<(&Manifest, &str)>,
        pieces_pending: bool,
    ) -> Result<Option<CollectedPlan>> {
        let cluster = &options.cluster;
        let started = std::time::Instant::now();
        let digests = image_digests(&collected.rows)?;
        let fits_on_inputs = self.prelude.pinned_models.is_none();
        let models_digest = match &self.prelude.pinned_models {
            Some(digest) => digest.clone(),
            None => models_digest(spec, self.prelude.corpus.as_ref().unwrap_or(collected))?,
        };
        let buckets = spec.output.buckets;
        let header = state::header(spec.config_hash(), models_digest, buckets, previous);
        let owned = cluster.owned_buckets(buckets);
        // A replaying refit compares the images with the state as if the models were the same,
        // and computes the images whose records do not hold as well as the changed ones.
        let compared = match (&self.rerun.replaying, self.prelude.header_before.clone()) {
            (Some(_), Some(before)) => Some(state::StateHeader {
                models_digest: header.models_digest.clone(),
                ..before
            }),
            (_, before) => before,
        };
        let mut plan = match &self.prelude.state {
            Some(state) => state::plan(
                state,
                compared,
                &header,
                previous,
                &digests,
                touched.as_ref(),
                &owned,
            )?,
            None => Plan::full(&digests, "no --state"),
        };
        let mut recomputed = BTreeSet::new();
        if let Some(replaying) = &self.rerun.replaying {
            recomputed = (replaying.recompute.iter())
                .filter(|id| digests.contains_key(*id) && !plan.compute.contains(*id))
                .cloned()
                .collect();
            plan.unchanged -= recomputed.len().min(plan.unchanged);
            plan.compute.extend(recomputed.iter().cloned());
        }
        if plan.full.is_none() && spec.mix != MixConfig::All {
            plan = Plan::full(
                &digests,
                "[mix] selects over all samples, so a changed image can change any bucket",
            );
        }
        if plan.full.is_some() && touched.is_some() {
            return Err(Error::Config(format!(
                "the inputs were read in part, but every image must be computed ({}); rerun \
                 without --state",
                plan.describe()
            )));
        }
        if let Some(state) = &self.prelude.state {
            let nothing = plan.full.is_none() && plan.compute.is_empty() && plan.removed.is_empty();
            let single = cluster.processes == 1 && self.rerun.replaying.is_none();
            if options.skip_unchanged && nothing && single {
                // The header was set aside after the read phase; it is still true.
                if pieces_pending {
                    InputsState::commit_pending(state.dir())?;
                }
                if let Some(header) = &self.prelude.header_before {
                    state.write_header(header)?;
                }
                return Ok(None);
            }
            crate::cli::out::status!("capflow run {}: {}", spec.name, plan.describe());
        }
        let metrics = StageMetrics {
            name: "plan".into(),
            rows_in: digests.len() as u64 + plan.removed.len() as u64,
            rows_out: plan.compute.len() as u64,
            rejected: 0,
            elapsed_ms: started.elapsed().as_millis() as u64,
        };
        Ok(Some(CollectedPlan {
            plan,
            digests,
            header,
            owned,
            recomputed,
            fits_on_inputs,
            metrics,
        }))
    }

    /// Runs the stages on the images `planned` computes, with the models of the artifact,
    /// else the replaying refit's, else fitted on the models' corpus or the rows read (and,
    /// with a state and models that learn from the inputs, kept in the state).
    fn compute(
        &mut self,
        spec: &DataflowSpec,
        cluster: &ClusterOptions,
        collected: &CollectedRun,
        planned: &CollectedPlan,
    ) -> Result<Computed> {
        let mut computed = Computed {
            stages: collected.stages.clone(),
            samples: BTreeMap::new(),
            rejected: BTreeMap::new(),
            records: BTreeMap::new(),
            dropped: BTreeMap::new(),
            fitted: None,
        };
        computed.stages.push(planned.metrics.clone());
        if !spec.augments() && !spec.keeps_originals() {
            return Ok(computed);
        }
        let source = match (self.prelude.artifact.take(), &self.rerun.replaying) {
            (Some(artifact), _) => ModelSource::Fitted(Box::new(artifact.models)),
            (None, Some(replaying)) => ModelSource::Fitted(Box::new(replaying.fitted.clone())),
            (None, None) => ModelSource::Rows,
        };
        let keep = planned.fits_on_inputs && self.prelude.state.is_some();
        let fit = self.prelude.corpus.as_ref().unwrap_or(collected);
        let (mut run, kept) = run_augment_phase(
            spec,
            (collected, fit, source, keep),
            cluster,
            &planned.plan.compute,
            self.prelude.state.as_ref(),
        )?;
        let models_id = planned.header.models_digest.clone();
        computed.fitted =
            (kept.zip(models_id)).map(|(models, id)| ModelArtifact::new(spec, id, models));
        if let Some(replaying) = &self.rerun.replaying {
            computed.fitted = Some(ModelArtifact::new(
                spec,
                replaying.models_digest.clone(),
                replaying.fitted.clone(),
            ));
            run.stages[0] = replaying.models_metrics.clone();
        }
        computed.records.extend(std::mem::take(&mut run.records));
        print_augment_summary(spec, &run);
        warn_idle_methods(spec, &run.stages);
        computed.dropped = drop_reasons(&run.dropped);
        computed.stages.extend(run.stages.iter().cloned());
        for sample in run.samples {
            let image = computed.samples.entry(sample.image_id.clone()).or_default();
            image.push(sample);
        }
        for (image_id, rejected) in run.rejected {
            computed
                .rejected
                .entry(image_id)
                .or_default()
                .push(rejected);
        }
        Ok(computed)
    }

    /// Writes this process's buckets, with `computed`'s samples, and the changelog: on one
    /// process each bucket's changes go to a run on disk as the bucket is written, and the runs
    /// are merged into the changelog, so a rerun that changes every image's samples (a refit)
    /// does not hold its changelog; with several processes the changes come back for the
    /// commit.
    fn export(
        &self,
        (spec, cluster): (&DataflowSpec, &ClusterOptions),
        writer: &mut DatasetWriter,
        collected: &CollectedRun,
        planned: &CollectedPlan,
        computed: &mut Computed,
        previous: Option<(&Manifest, &str)>,
    ) -> Result<Exported> {
        let plan = &planned.plan;
        // A replay compares each image's record with the state of its bucket, read for it.
        let (replaying, state) = (&self.rerun.replaying, &self.prelude.state);
        let replay_bucket = |bucket: usize| match (replaying, state) {
            (Some(replaying), Some(dir)) => {
                let states = dir.read_bucket(bucket)?;
                replaying.replay_bucket(bucket, |id, digest| {
                    states.get(id).is_some_and(|s| s.digest == digest)
                        && !plan.compute.contains(id)
                        && !plan.removed.contains(id)
                })
            }
            _ => Ok(BTreeMap::new()),
        };
        let runs_dir = match cluster.processes {
            1 => Some(writer.scratch_dir("changes")?),
            _ => None,
        };
        let layout = BucketExport {
            buckets: spec.output.buckets,
            chunk_images: spec.output.chunk_images,
            plan,
            previous,
            dir: &self.prelude.out,
            replay: self.rerun.replaying.as_ref().map(|_| &replay_bucket as _),
            recomputed: self.rerun.replaying.as_ref().map(|_| &planned.recomputed),
            runs: runs_dir.as_deref(),
        };
        let exported = tracing::info_span!("export")
            .in_scope(|| layout.write(writer, collected, &planned.owned, &mut computed.samples))?;
        if !exported.runs.is_empty() {
            if !exported.changes.is_empty() {
                return Err(Error::Usage(
                    "an export left changes both in runs and in memory".into(),
                ));
            }
            let mut changelog = writer.changelog_writer()?;
            super::spill::merge_changes(&exported.runs, &mut changelog)?;
            writer.stage_changelog(changelog)?;
        }
        Ok(exported)
    }
}

/// The end of a collecting run: process 0 gathers every process's part and commits them;
/// another process hands its part (and its shards) to process 0 and waits for its commit,
/// succeeding only if the dataset was committed.
fn commit_collected(
    spec: &DataflowSpec,
    cluster: &ClusterOptions,
    writer: DatasetWriter,
    mut part: Part,
    state: Option<StateCommit<'_>>,
    out: &std::path::Path,
) -> Result<RunOutcome> {
    if cluster.process != 0 {
        part.files = writer.finish_part()?;
        return hand_over(cluster, &spec.name, &part);
    }
    let parts = match cluster.processes {
        1 => vec![part],
        _ => gather_parts(cluster, &part)?,
    };
    let committed = tracing::info_span!("commit")
        .in_scope(|| commit(writer, parts, cluster.processes, state, out, &spec.name));
    confirm_commit(cluster, &committed)?;
    committed
}

/// The per-image states of this process's buckets, a bucket at a time: the previous ones
/// (read again from the state), less the removed images, with this run's digests; the method
/// stages' rejections are this run's (taken from `new`'s first) for computed images and the
/// state's for carried ones. With a state, each bucket the plan touches gets its states, and
/// its computed images' SSA records (taken from `new`'s second), written there. Returns every
/// image's rejections, by image id, for the ledger.
fn write_bucket_states(
    spec: &DataflowSpec,
    state: Option<&StateDir>,
    plan: &Plan,
    digests: &BTreeMap<String, String>,
    owned: &[usize],
    new: (
        &mut BTreeMap<String, Vec<RejectedRow>>,
        &mut BTreeMap<String, SsaKept>,
    ),
) -> Result<Vec<(String, Vec<RejectedRow>)>> {
    let (new_rejected, new_records) = new;
    let buckets = spec.output.buckets;
    let mut digests_of: BTreeMap<usize, Vec<(&String, &String)>> = BTreeMap::new();
    for (id, digest) in digests {
        digests_of
            .entry(bucket_of(id, buckets))
            .or_default()
            .push((id, digest));
    }
    let mut image_rejected: Vec<(String, Vec<RejectedRow>)> = Vec::new();
    let with_states: BTreeSet<usize> = owned.iter().chain(digests_of.keys()).copied().collect();
    for bucket in with_states {
        let previous = match (state, &plan.full) {
            (Some(dir), None) if owned.contains(&bucket) => dir.read_bucket(bucket)?,
            _ => BucketState::new(),
        };
        let read = digests_of.get(&bucket).map_or(&[][..], Vec::as_slice);
        let states = plan.next_states(previous, read, new_rejected);
        image_rejected.extend(
            (states.iter())
                .filter(|(_, s)| !s.rejected.is_empty())
                .map(|(id, s)| (id.clone(), s.rejected.clone())),
        );
        let Some(state) = state else { continue };
        if owned.contains(&bucket) && plan.touches(bucket, buckets) {
            state.write_bucket(bucket, &states)?;
            if refit::keeps_records(spec) {
                let records = computed_records(&states, &plan.compute, new_records);
                match plan.full {
                    Some(_) => refit::write(state, bucket, &spec.config_hash(), records)?,
                    None => refit::append(state, bucket, &spec.config_hash(), records, &states)?,
                }
            }
        }
    }
    image_rejected.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(image_rejected)
}

/// The SSA records of the images of a bucket (whose new states are `states`) that the run
/// computed, taken from `new`.
fn computed_records(
    states: &BucketState,
    computed: &BTreeSet<String>,
    new: &mut BTreeMap<String, SsaKept>,
) -> BucketRecords {
    let mut records = BucketRecords::new();
    for (id, image) in states.iter().filter(|(id, _)| computed.contains(*id)) {
        if let Some(kept) = new.remove(id) {
            records.insert(id.clone(), (image.digest.clone(), kept));
        }
    }
    records
}

/// What the manifest says of the run's corpus-level models before they are fitted: kept from
/// an earlier fit or fitted on `[[models.corpus]]` (with their id), or fitted on the inputs
/// (their id known once a state keeps them, at the commit); `None` when the spec has none.
fn models_used(
    pinned: &Option<Option<String>>,
    artifact: &Option<ModelArtifact>,
    corpus: &Option<CollectedRun>,
) -> Option<ModelsUsed> {
    let (source, id) = match (artifact, corpus, pinned) {
        (Some(artifact), _, _) => (ModelsSource::Kept, Some(artifact.info.id.clone())),
        (None, Some(_), Some(id)) => (ModelsSource::Corpus, id.clone()),
        (None, None, None) => (ModelsSource::Fitted, None),
        (None, _, _) => return None,
    };
    Some(ModelsUsed { source, id })
}

/// Whether the streaming engine runs `spec` (without `--state`). The first process decides
/// from the dataset it writes; with several processes it tells the others, which stage their
/// shards only once it holds the output's lock.
fn streamed_run(
    cluster: &ClusterOptions,
    created: Option<&DatasetWriter>,
    spec: &DataflowSpec,
) -> Result<bool> {
    let decision = created.map(|writer| streams(spec, writer.previous().map(|(m, _)| m)));
    if cluster.processes <= 1 {
        return Ok(decision.unwrap_or(false));
    }
    let message = decision.map(|streams| if streams { "stream" } else { "collect" }.to_string());
    let decided = crate::dataflow::cluster::broadcast_from_first(cluster, message)?;
    Ok(decided == "stream")
}

/// The models of an earlier fit that this run uses instead of fitting them on its inputs:
/// those in `--models`, else those the state keeps (unless `--refit`, or they were fitted for
/// another configuration or engine: then the run fits them again and says why).
fn model_artifact(
    spec: &DataflowSpec,
    options: &RunOptions,
    state: Option<&StateDir>,
) -> Result<Option<ModelArtifact>> {
    let learns = model_rows(spec).is_some() && spec.corpus_spec().is_none();
    if let Some(dir) = &options.models {
        if options.refit {
            return Err(Error::Usage(
                "--models uses fitted models and --refit fits them again: give one of them".into(),
            ));
        }
        if !learns {
            return Err(Error::Usage(format!(
                "--models: the dataflow {} fits no models on its inputs (it has none, or a \
                 fixed [[models.corpus]])",
                spec.name
            )));
        }
        let artifact = ModelArtifact::load(dir)?.ok_or_else(|| {
            Error::Usage(format!(
                "--models {0}: no {MODELS_FILE} there; a run with --state {0} keeps its models \
                 in it",
                dir.display()
            ))
        })?;
        if let Some(why) = artifact.mismatch(spec) {
            return Err(Error::Usage(format!("--models {}: {why}", dir.display())));
        }
        return Ok(Some(artifact));
    }
    let (Some(state), false, true) = (state, options.refit, learns) else {
        return Ok(None);
    };
    let Some(artifact) = ModelArtifact::load(state.dir())? else {
        return Ok(None);
    };
    match artifact.mismatch(spec) {
        Some(why) => {
            crate::cli::out::status!(
                "capflow run {}: fitting the models on the inputs again ({why})",
                spec.name
            );
            Ok(None)
        }
        None => {
            tracing::info!(
                id = artifact.info.id,
                learned_from = artifact.info.learned_from,
                "the state's fitted models"
            );
            Ok(Some(artifact))
        }
    }
}

/// A process other than the first: hands its part to process 0 and waits for its commit.
fn hand_over(cluster: &ClusterOptions, name: &str, part: &Part) -> Result<RunOutcome> {
    gather_parts(cluster, part)?;
    await_commit(cluster, name, part.process)
}

/// A process other than the first: waits for process 0's commit; it succeeds only if the
/// dataset was committed.
fn await_commit(cluster: &ClusterOptions, name: &str, process: usize) -> Result<RunOutcome> {
    let confirmation = crate::dataflow::cluster::broadcast_from_first(cluster, None)?;
    match confirmation.strip_prefix("ok ") {
        Some(version) => {
            crate::cli::out::status!(
                "capflow run {name} process {process}: wrote its buckets; process 0 committed version {version}"
            );
            version
                .parse()
                .map(RunOutcome::Part)
                .map_err(|_| Error::Cluster {
                    process: 0,
                    reason: format!("sent a version that is not a number: {version}"),
                })
        }
        None => Err(Error::Cluster {
            process: 0,
            reason: format!("did not commit the dataset: {confirmation}"),
        }),
    }
}

/// The first process of a cluster run: tells the others how the commit went.
fn confirm_commit(cluster: &ClusterOptions, committed: &Result<RunOutcome>) -> Result<()> {
    if cluster.processes > 1 {
        let message = match committed {
            Ok(RunOutcome::Committed(version) | RunOutcome::Kept(version)) => {
                format!("ok {version}")
            }
            Ok(other) => format!("process 0 ended with {other:?}, not a commit"),
            Err(e) => e.to_string(),
        };
        crate::dataflow::cluster::broadcast_from_first(cluster, Some(message))?;
    }
    Ok(())
}

/// What a streamed run takes besides the spec: what the models are fitted from, the memory
/// budget, and with `--state` the state.
struct Streamed {
    models: ModelsFrom,
    memory_limit: u64,
    state: Option<StreamStateOf>,
}

/// A streamed run's state: its directory, its header as read before the run, and the models'
/// digest when it is known before the inputs are read.
struct StreamStateOf {
    dir: StateDir,
    before: Option<state::StateHeader>,
    models: Option<String>,
    /// Whether a single process records its input pieces as it reads them
    /// ([`crate::dataflow::inputs::PieceRecording`]), to wait in the state for the commit.
    pieces: bool,
}

/// A run on the streaming engine ([`crate::dataflow::engine`]): every process writes the
/// shards of its buckets while it runs and keeps its changes as sorted runs; then the first
/// process merges every process's runs into the changelog and commits the ledger and the
/// manifest, and with a state writes its header. `created` is the first process's writer.
fn run_streamed(
    spec: &DataflowSpec,
    cluster: &ClusterOptions,
    created: Option<DatasetWriter>,
    run: Streamed,
    out: &std::path::Path,
    sinks: &[NamedSink],
) -> Result<RunOutcome> {
    let process = cluster.process;
    // The other processes keep their spill files and change runs in a part of the dataset.
    let mut writer = match created {
        Some(writer) => writer,
        None => DatasetWriter::part(out, &spec.config_hash(), process)?,
    };
    let pieces = run.state.as_ref().is_some_and(|state| state.pieces);
    let state = (run.state).map(|state| stream_state(spec, &writer, state, process == 0));
    let state_dir = state.as_ref().map(|s| s.dir.clone());
    let streamed = run_streaming(
        spec,
        cluster,
        &mut writer,
        run.models,
        run.memory_limit,
        sinks,
        state,
    )?;
    let planned = streamed.state;
    if let Some(planned) = &planned {
        crate::cli::out::status!("capflow run {}: {}", spec.name, planned.describe());
    }
    if spec.augments() || spec.keeps_originals() {
        print_summary(
            spec,
            streamed.images,
            streamed.wall,
            &streamed.samples,
            &streamed.dropped,
        );
        warn_idle_methods(spec, &streamed.stages);
    }
    let part = Part {
        process,
        files: streamed.files,
        runs: relative_runs(&streamed.runs, out)?,
        read_rejected: streamed.read_rejected,
        image_rejected: streamed.image_rejected,
        changes: Vec::new(),
        counts: streamed.counts,
        stages: streamed.stages,
        dropped: drop_reasons(&streamed.dropped),
    };
    if process != 0 {
        // The part's runs stay in its scratch directory until process 0 has committed.
        gather_parts(cluster, &part)?;
        send_unseen_runs(cluster, process, &streamed.runs)?;
        let outcome = await_commit(cluster, &spec.name, process);
        drop(writer);
        return outcome;
    }
    let parts = if cluster.processes > 1 {
        let mut parts = gather_parts(cluster, &part)?;
        receive_unseen_runs(cluster, &writer, &mut parts, out)?;
        parts
    } else {
        vec![part]
    };
    let committed = {
        let _commit = tracing::info_span!("commit").entered();
        // With a state: its header as planned, and the models fitted from the statistics.
        let fitted = streamed.fitted;
        let state = (state_dir.as_ref())
            .zip(planned.map(|planned| planned.header))
            .map(|(dir, header)| StateCommit {
                artifact: (fitted.zip(header.models_digest.clone()))
                    .map(|(stats, id)| ModelArtifact::new(spec, id, stats)),
                dir,
                header,
                pieces,
            });
        merge_and_commit(writer, parts, (cluster.processes, out), state, &spec.name)
    };
    confirm_commit(cluster, &committed)?;
    committed
}

/// What the streaming engine takes of a run's state: its directory, its header as read before
/// the run and as this run will leave it (the previous version's manifest against the models),
/// and whether this process is the first.
fn stream_state(
    spec: &DataflowSpec,
    writer: &DatasetWriter,
    state: StreamStateOf,
    first: bool,
) -> StreamState {
    let previous = writer
        .previous()
        .map(|(manifest, sha)| (manifest.clone(), sha.to_string()));
    let previous_ref = previous.as_ref().map(|(m, sha)| (m, sha.as_str()));
    let now = state::header(
        spec.config_hash(),
        state.models,
        spec.output.buckets,
        previous_ref,
    );
    StreamState {
        dir: state.dir,
        before: state.before,
        now,
        previous,
        first,
        record_pieces: state.pieces,
    }
}

/// The paths of a process's runs of changes, relative to the output directory `out`.
fn relative_runs(runs: &[std::path::PathBuf], out: &std::path::Path) -> Result<Vec<String>> {
    let relative = |run: &std::path::PathBuf| {
        run.strip_prefix(out)
            .map(|relative| relative.to_string_lossy().into_owned())
            .map_err(|_| {
                Error::Config(format!(
                    "change run {} is outside the output directory",
                    run.display()
                ))
            })
    };
    runs.iter().map(relative).collect()
}

/// The first process's commit of a streamed run (of `processes`, into `out`): merges every
/// part's runs of changes into the changelog ([`commit_streamed`]), then commits the ledger,
/// the manifest and the state ([`commit`]).
fn merge_and_commit(
    mut writer: DatasetWriter,
    mut parts: Vec<Part>,
    (processes, out): (usize, &std::path::Path),
    state: Option<StateCommit<'_>>,
    name: &str,
) -> Result<RunOutcome> {
    let progress = crate::cli::progress::spinner("commit: merging the changes");
    let committed = commit_streamed(&mut writer, &mut parts, out).and_then(|()| {
        progress.set_message("commit: ledger, manifest, dataset card");
        commit(writer, parts, processes, state, out, name)
    });
    progress.finish_and_clear();
    committed
}

/// A process other than the first of a streamed run: sends the changes of its runs when process
/// 0 cannot see them (each process writes into a directory of its own, without shared storage).
fn send_unseen_runs(
    cluster: &ClusterOptions,
    process: usize,
    runs: &[std::path::PathBuf],
) -> Result<()> {
    let unseen = crate::dataflow::cluster::broadcast_from_first(cluster, None)?;
    let mut changes = Vec::new();
    if unseen.split(',').any(|p| p == process.to_string()) {
        for run in runs {
            changes.extend(super::spill::read_changes(run)?);
        }
    }
    let payload = serde_json::to_string(&changes)
        .map_err(|e| Error::invalid("cluster changes", e.to_string()))?;
    crate::dataflow::cluster::gather_to_first(cluster, payload)?;
    Ok(())
}

/// The first process of a streamed run: asks the processes whose runs it cannot see for their
/// changes and keeps them as runs of its own.
fn receive_unseen_runs(
    cluster: &ClusterOptions,
    writer: &DatasetWriter,
    parts: &mut [Part],
    out: &std::path::Path,
) -> Result<()> {
    let unseen: Vec<usize> = parts
        .iter()
        .filter(|part| part.runs.iter().any(|run| !out.join(run).exists()))
        .map(|part| part.process)
        .collect();
    let list: Vec<String> = unseen.iter().map(usize::to_string).collect();
    crate::dataflow::cluster::broadcast_from_first(cluster, Some(list.join(",")))?;
    let received = crate::dataflow::cluster::gather_to_first(cluster, "[]".into())?;
    if unseen.is_empty() {
        return Ok(());
    }
    let dir = writer.scratch_dir("received")?;
    for (part, text) in parts.iter_mut().zip(received) {
        if !unseen.contains(&part.process) {
            continue;
        }
        let changes: Vec<(SampleRow, i8)> = serde_json::from_str(&text)
            .map_err(|e| Error::invalid("cluster changes from a peer", e.to_string()))?;
        let path = dir.join(format!("p{}.arrows", part.process));
        super::spill::write_changes(&path, &changes)?;
        let relative = path.strip_prefix(out).unwrap_or(&path);
        part.runs = vec![relative.to_string_lossy().into_owned()];
    }
    Ok(())
}

/// Stages the changelog of a streamed run, every part's runs merged by image id, and counts its
/// time in the `export` stage.
fn commit_streamed(
    writer: &mut DatasetWriter,
    parts: &mut [Part],
    out: &std::path::Path,
) -> Result<()> {
    let started = std::time::Instant::now();
    let runs: Vec<std::path::PathBuf> = parts
        .iter()
        .flat_map(|part| part.runs.iter().map(|run| out.join(run)))
        .collect();
    let mut changelog = writer.changelog_writer()?;
    super::spill::merge_changes(&runs, &mut changelog)?;
    writer.stage_changelog(changelog)?;
    let elapsed = started.elapsed().as_millis() as u64;
    if let Some(export) = parts
        .first_mut()
        .and_then(|part| part.stages.iter_mut().find(|s| s.name == "export"))
    {
        export.elapsed_ms += elapsed;
    }
    Ok(())
}

/// Sends this process's part to process 0; returns every process's part there, none elsewhere.
fn gather_parts(cluster: &ClusterOptions, part: &Part) -> Result<Vec<Part>> {
    let payload =
        serde_json::to_string(part).map_err(|e| Error::invalid("cluster part", e.to_string()))?;
    crate::dataflow::cluster::gather_to_first(cluster, payload)?
        .iter()
        .map(|text| {
            serde_json::from_str(text)
                .map_err(|e| Error::invalid("cluster part from a peer", e.to_string()))
        })
        .collect()
}

/// What process 0 writes into the state after its commit: the header, and the models fitted
/// on the inputs ([`super::artifact`]) before it.
struct StateCommit<'a> {
    dir: &'a StateDir,
    header: state::StateHeader,
    artifact: Option<ModelArtifact>,
    /// Whether a streamed run's record of its input pieces waits to be committed (a collecting
    /// run writes its own before).
    pieces: bool,
}

/// Process 0's commit: every part into one manifest, the ledger, the changelog, then the
/// state's models and header; nothing when nothing changed
/// ([`DatasetWriter::commit_changes`]): then the outcome is [`RunOutcome::Kept`].
fn commit(
    mut writer: DatasetWriter,
    parts: Vec<Part>,
    processes: usize,
    state: Option<StateCommit<'_>>,
    out: &std::path::Path,
    name: &str,
) -> Result<RunOutcome> {
    let merged = Part::merge(parts, processes)?;
    for stage in &merged.stages {
        writer.stage(stage.clone());
    }
    writer.dropped("ssa", merged.dropped.clone());
    writer.adopt(merged.files)?;
    for (_, _, rejected) in merged.read_rejected {
        writer.reject(rejected)?;
    }
    let mut augment_rejected = 0u64;
    for (_, rows) in merged.image_rejected {
        for row in rows {
            writer.reject(row)?;
            augment_rejected += 1;
        }
    }
    if !writer.has_changelog() {
        writer.changelog(&merged.changes)?;
    }
    let mut counts = merged.counts;
    counts.read += augment_rejected;
    counts.rejected += augment_rejected;
    if let Some(artifact) = state.as_ref().and_then(|s| s.artifact.as_ref()) {
        writer.models(ModelsUsed {
            source: ModelsSource::Fitted,
            id: Some(artifact.info.id.clone()),
        });
    }
    let committed = writer.commit_changes(counts)?;
    let unchanged = matches!(committed, Committed::Unchanged(_));
    let manifest = committed.into_manifest();
    if let Some(StateCommit {
        dir: state,
        header: header_now,
        artifact,
        pieces,
    }) = state
    {
        if let Some(mut artifact) = artifact {
            artifact.save(state.dir())?;
        }
        if pieces {
            InputsState::commit_pending(state.dir())?;
        }
        let manifest_path = out.join(crate::export::MANIFEST_FILE);
        let text = std::fs::read(&manifest_path).map_err(|e| Error::io(&manifest_path, e))?;
        let mut header = header_now;
        let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&text));
        let data = manifest.data_version(&sha);
        header.dataset_version = data.version;
        header.manifest_sha256 = data.manifest_sha256;
        state.write_header(&header)?;
    }
    let result = if unchanged {
        format!(
            "nothing changed, so no new version: {} stays at version {}",
            out.display(),
            manifest.version
        )
    } else {
        let (added, retracted) = manifest
            .changelog
            .as_ref()
            .map_or((0, 0), |c| (c.added, c.retracted));
        format!(
            "{} files in {} (version {}; {added} samples added, {retracted} retracted)",
            manifest.files.len(),
            out.display(),
            manifest.version
        )
    };
    crate::cli::out::status!(
        "capflow run {}: {} read, {} accepted, {} rejected; {result}",
        name,
        merged.counts.read,
        merged.counts.accepted,
        merged.counts.rejected,
    );
    Ok(if unchanged {
        RunOutcome::Kept(manifest.version)
    } else {
        RunOutcome::Committed(manifest.version)
    })
}

/// What one process of a run hands to the commit: the files of its buckets, its rejections,
/// changes, counts and stage metrics.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Part {
    process: usize,
    /// Bucket shards written or carried by a process other than the first (the first process's
    /// own shards are already in its writer).
    files: Vec<FileEntry>,
    /// The process's changes as runs sorted by image id, relative to the output directory (a
    /// streamed run; [`super::spill::merge_changes`]).
    #[serde(default)]
    runs: Vec<String>,
    /// Records the readers of this process rejected, with their read position.
    read_rejected: Vec<(u32, u64, RejectedRow)>,
    /// Records the method stages rejected, by image id (sorted).
    image_rejected: Vec<(String, Vec<RejectedRow>)>,
    /// The changelog of this process's buckets, by image id.
    changes: Vec<(SampleRow, i8)>,
    counts: crate::ingest::IngestCounts,
    stages: Vec<StageMetrics>,
    /// SSA's sentences dropped by this process's stages, by reason.
    #[serde(default)]
    dropped: BTreeMap<String, u64>,
}

impl Part {
    /// Every process's part as one, in the order a single process would have produced:
    /// rejections by read position, then by image id; changes by image id.
    fn merge(mut parts: Vec<Part>, processes: usize) -> Result<Part> {
        parts.sort_by_key(|p| p.process);
        let got: Vec<usize> = parts.iter().map(|p| p.process).collect();
        if got != (0..processes).collect::<Vec<_>>() {
            return Err(Error::Config(format!(
                "the commit expected parts of processes 0..{processes} and got {got:?}"
            )));
        }
        let mut merged = Part {
            process: 0,
            files: Vec::new(),
            runs: Vec::new(),
            read_rejected: Vec::new(),
            image_rejected: Vec::new(),
            changes: Vec::new(),
            counts: Default::default(),
            stages: Vec::new(),
            dropped: BTreeMap::new(),
        };
        let mut stages: Vec<StageMetrics> = Vec::new();
        for part in parts {
            merged.files.extend(part.files);
            merged.runs.extend(part.runs);
            merged.read_rejected.extend(part.read_rejected);
            merged.image_rejected.extend(part.image_rejected);
            merged.changes.extend(part.changes);
            merged.counts.add(part.counts);
            for (reason, n) in part.dropped {
                *merged.dropped.entry(reason).or_default() += n;
            }
            for stage in part.stages {
                match stages.iter_mut().find(|s| s.name == stage.name) {
                    Some(total) => {
                        total.rows_in += stage.rows_in;
                        total.rows_out += stage.rows_out;
                        total.rejected += stage.rejected;
                        total.elapsed_ms = total.elapsed_ms.max(stage.elapsed_ms);
                    }
                    None => stages.push(stage),
                }
            }
        }
        merged.stages = stages;
        merged.read_rejected.sort_by_key(|r| (r.0, r.1));
        merged.image_rejected.sort_by(|a, b| a.0.cmp(&b.0));
        merged
            .changes
            .sort_by(|a, b| a.0.image_id.cmp(&b.0.image_id));
        Ok(merged)
    }
}

/// Warns about every method of `spec` whose first stage received nothing in the whole run
/// although images went through the stages (its count in the manifest is 0 in): a recipe whose
/// inputs lack what the method reads would otherwise write a dataset without its samples and
/// say nothing.
fn warn_idle_methods(spec: &DataflowSpec, stages: &[StageMetrics]) {
    let rows_in = |name: &str| {
        stages
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.rows_in)
            .sum::<u64>()
    };
    let images: u64 = stages
        .iter()
        .filter(|s| s.name == "gather")
        .map(|s| s.rows_out)
        .sum();
    if images == 0 {
        return;
    }
    let ssa_cause = match spec.ssa.as_ref().map(|ssa| ssa.parse_captions) {
        Some(crate::augment::ssa::ParseCaptions::Never) => {
            "the inputs hold no caption AMRs (the `amrs` table) and `[ssa] parse_captions = \"never\"`: add a `penman` input with the captions' AMRs, or let SSA parse the captions (docs/ssa.md)"
        }
        _ => {
            "the inputs hold no caption AMRs and no caption was parsed into one (the ledger names each caption the `text-to-amr` stage could not parse; docs/ssa.md)"
        }
    };
    let methods = [
        (spec.ssa.is_some(), "ssa", "amr-align", ssa_cause),
        (
            spec.clid.is_some(),
            "clid",
            "clid",
            "none of the images has the input rows it reads (docs/clid.md)",
        ),
        (
            spec.gbc.is_some(),
            "gbc",
            "gbc",
            "none of the images has the input rows it reads (docs/gbc.md)",
        ),
        (
            spec.relatedness.is_some(),
            "relatedness",
            "relatedness",
            "none of the images has the input rows it reads (docs/relatedness.md)",
        ),
        (
            spec.cutswap.is_some(),
            "cutswap",
            "cutswap",
            "none of the images has the input rows it reads (docs/cutswap.md)",
        ),
    ];
    for (configured, method, stage, cause) in methods {
        if configured && rows_in(stage) == 0 {
            crate::cli::out::diagnostic!(
                "warning: {method}: its first stage `{stage}` received nothing from the run's {images} images, so the dataset has no {method} samples: {cause}"
            );
        }
    }
}

/// SSA's drop reasons as the manifest names them (sentences dropped only: not the count of
/// caption AMRs the built-in aligner aligned).
fn drop_reasons(dropped: &BTreeMap<crate::augment::ssa::Drop, u64>) -> BTreeMap<String, u64> {
    dropped
        .iter()
        .filter(|(reason, _)| reason.is_drop())
        .map(|(reason, n)| (reason.as_str().to_string(), *n))
        .collect()
}

/// The augment phase's summary lines: images/s, samples per method, SSA's drop reasons.
fn print_augment_summary(spec: &DataflowSpec, run: &AugmentRun) {
    let mut methods: BTreeMap<String, u64> = BTreeMap::new();
    for sample in &run.samples {
        *methods.entry(sample.method.clone()).or_insert(0) += 1;
    }
    print_summary(spec, run.images, run.wall, &methods, &run.dropped);
}

fn print_summary(
    spec: &DataflowSpec,
    images: u64,
    wall: std::time::Duration,
    methods: &BTreeMap<String, u64>,
    dropped: &BTreeMap<crate::augment::ssa::Drop, u64>,
) {
    let seconds = wall.as_secs_f64();
    let samples: u64 = methods.values().sum();
    let methods: Vec<String> = methods.iter().map(|(m, n)| format!("{n} {m}")).collect();
    crate::cli::out::status!(
        "augment: {images} images in {seconds:.3} s ({:.0} images/s), {samples} samples ({})",
        images as f64 / seconds.max(1e-9),
        if methods.is_empty() {
            "none".to_string()
        } else {
            methods.join(", ")
        }
    );
    if spec.ssa.is_some() {
        let token_aligned = dropped
            .get(&crate::augment::ssa::Drop::TokenAligned)
            .copied()
            .unwrap_or(0);
        if token_aligned > 0 {
            crate::cli::out::status!(
                "ssa: {token_aligned} caption AMRs had no token alignments and were aligned by the built-in aligner"
            );
        }
        let dropped: Vec<String> = dropped
            .iter()
            .filter(|(reason, _)| reason.is_drop())
            .map(|(reason, n)| format!("{n} {}", reason.as_str()))
            .collect();
        crate::cli::out::status!(
            "ssa: quality filter dropped: {}",
            if dropped.is_empty() {
                "none".to_string()
            } else {
                dropped.join(", ")
            }
        );
    }
}

/// Fits the corpus-level models on the read rows and runs the spec's method stages.
/// `fit` holds the rows the corpus-level models learn from: `collected` itself, or the spec's
/// `[[models.corpus]]`. With a state, an external text-to-AMR model's answers are kept in it
/// ([`ParseCache`]), so that no caption is sent to the model twice.
fn run_augment_phase(
    spec: &DataflowSpec,
    (collected, fit, source, keep): (&CollectedRun, &CollectedRun, ModelSource, bool),
    cluster: &ClusterOptions,
    compute: &BTreeSet<String>,
    state: Option<&StateDir>,
) -> Result<(AugmentRun, Option<FittedModels>)> {
    let (mut methods, models_metrics, kept) = fit_methods_with(spec, fit, source, keep)?;
    methods.keep_records = state.is_some();
    let cache = cache_parses(spec, state, &mut methods)?;
    let run = run_augment(
        collected,
        spec.seed,
        methods,
        cluster,
        Some(compute),
        spec.output.buckets,
    );
    // The answers got before a failure are kept too.
    save_parses(cache)?;
    let mut run = run?;
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
    run.stages.insert(0, models_metrics);
    Ok((run, kept))
}
