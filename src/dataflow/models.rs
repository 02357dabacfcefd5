//! The corpus-level models of a run's methods: SSA's scorer and word vectors, the relatedness
//! encoder, the CutSwap vocabulary and clusters, fitted once per run and shared with every
//! worker. The streaming engine fits them from statistics its workers gather and merge
//! ([`CorpusStats`]); a run that collects its rows fits them from the rows they learn from
//! ([`model_rows`]), and both give the same models.

use crate::augment::cutswap::stats::{self as cutswap_stats, CutswapStats};
use crate::augment::cutswap::CutswapMethod;
use crate::augment::detections::{DetectionFilter, WithDetectionFilter};
use crate::augment::relatedness::sif::SentenceEncoder;
use crate::augment::relatedness::{RelatednessModel, RelatednessStats};
use crate::augment::ssa::CaptionParser;
use crate::augment::ImageAnnotations;
use crate::models::{
    CachedTextToAmr, Embedder, ImageTextScorer, ModelKind, ParseCache, SubprocessAdapter,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::augment::method::{self, Method};
use crate::augment::ssa::{builtin_realizer, OriginalCaptions};
use crate::error::Result;
use crate::export::StageMetrics;
use crate::ingest::Row;

use super::augment::{group_images, Methods};
use super::runtime::CollectedRun;
use super::ssa::{corpus_stats, fit_models, models_of_fitted, ssa_stats_of_rows, SsaFitted};
use super::state::rows_digest;
use super::DataflowSpec;
use crate::augment::ssa::SsaCorpusStats;

/// The rows the spec's corpus-level models learn from, if it has such models: SSA's scorer and
/// vectors learn from the captions; the relatedness encoder and the CutSwap vocabulary from every
/// input row.
pub fn model_rows(spec: &DataflowSpec) -> Option<fn(&Row) -> bool> {
    if spec.relatedness.is_some() || spec.cutswap.is_some() {
        Some(|row| !matches!(row, Row::Sample(_)))
    } else if spec.ssa.is_some() {
        Some(|row| matches!(row, Row::Caption(_)))
    } else {
        None
    }
}

/// The digest of the rows the spec's corpus-level models are fitted on ([`model_rows`]).
pub fn models_digest(spec: &DataflowSpec, fit: &CollectedRun) -> Result<Option<String>> {
    model_rows(spec)
        .map(|keep| rows_digest(fit.rows.iter().filter(|r| keep(&r.row))))
        .transpose()
}

/// What a run's corpus-level models are fitted from in place of rows: statistics each worker
/// gathers over its share of the data, merged in worker order ([`merge`](Self::merge)).
/// Every fit from them is independent of how the data were split among workers and
/// processes, so every process fits the same models.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CorpusStats {
    /// SSA's scorer and word vectors: gathered caption by caption as the inputs are read.
    pub ssa: Option<SsaCorpusStats>,
    /// The relatedness encoder's: gathered image by image ([`add_image`](Self::add_image)).
    pub relatedness: Option<RelatednessStats>,
    /// CutSwap's vocabulary, clusters and swap donors: gathered image by image.
    pub cutswap: Option<CutswapStats>,
    /// The spec's `[detections]` post-processing, applied to each image before it is added.
    pub detections: Option<DetectionFilter>,
}

impl CorpusStats {
    /// Empty statistics for the spec's corpus-level models; `None` when it has none.
    pub fn new(spec: &DataflowSpec) -> Option<CorpusStats> {
        let stats = CorpusStats {
            ssa: spec.ssa.as_ref().map(corpus_stats),
            relatedness: spec.relatedness.as_ref().map(RelatednessStats::new),
            cutswap: spec.cutswap.as_ref().map(CutswapStats::new),
            detections: spec.detections.clone(),
        };
        (stats.ssa.is_some() || stats.by_image()).then_some(stats)
    }

    /// Whether some of the statistics are gathered from whole images, which the engine has
    /// only once every input is read and its rows are grouped.
    pub fn by_image(&self) -> bool {
        self.relatedness.is_some() || self.cutswap.is_some()
    }

    /// Adds what one image (all its rows) contributes to the statistics gathered by image.
    pub fn add_image(&mut self, image: &ImageAnnotations) {
        let filtered = self
            .detections
            .as_ref()
            .filter(|_| !image.detections.is_empty())
            .map(|filter| filter.apply(image));
        let image = filtered.as_ref().unwrap_or(image);
        if let Some(stats) = &mut self.relatedness {
            stats.add_image(image);
        }
        if let Some(stats) = &mut self.cutswap {
            stats.add_image(image);
        }
    }

    /// Adds `other`'s statistics (another worker's, for the same spec) to these.
    pub fn merge(&mut self, other: CorpusStats) -> Result<()> {
        if let (Some(total), Some(more)) = (&mut self.ssa, other.ssa) {
            total.merge(more)?;
        }
        if let (Some(total), Some(more)) = (&mut self.relatedness, other.relatedness) {
            total.merge(more);
        }
        if let (Some(total), Some(more)) = (&mut self.cutswap, other.cutswap) {
            total.merge(more);
        }
        Ok(())
    }

    /// Heap bytes held, roughly.
    pub fn approx_bytes(&self) -> usize {
        self.ssa.as_ref().map_or(0, SsaCorpusStats::approx_bytes)
            + self
                .relatedness
                .as_ref()
                .map_or(0, RelatednessStats::approx_bytes)
            + self.cutswap.as_ref().map_or(0, CutswapStats::approx_bytes)
    }
}

/// Where a run's corpus-level models are fitted from.
pub enum ModelsFrom {
    /// The run's own inputs: statistics its workers gather as they read.
    Inputs,
    /// The rows of the spec's fixed `[[models.corpus]]`.
    Corpus(CollectedRun),
    /// The models a state keeps ([`super::artifact`]): those of the run that stored them.
    Artifact(Box<FittedModels>),
}

/// The corpus-level models a state keeps ([`super::artifact`]): SSA's as fitted, and the
/// statistics the others are fitted from (an exact, quick fit).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FittedModels {
    pub ssa: Option<SsaFitted>,
    /// The relatedness encoder's and CutSwap's statistics (no SSA statistics).
    pub stats: Option<CorpusStats>,
    /// What the models learned from: captions with SSA, else images.
    pub learned_from: u64,
}

/// What [`fit_methods_with`] fits the models from.
pub enum ModelSource {
    /// The rows of `fit`.
    Rows,
    /// Statistics gathered over the rows they learn from.
    Stats(Box<CorpusStats>),
    /// Models fitted before.
    Fitted(Box<FittedModels>),
}

/// Fits the spec's methods' models from `source` (with [`ModelSource::Rows`], on `fit`'s rows in
/// read order) and returns the methods with the `models` stage's metrics; with `keep`, also the
/// models as fitted, for the state to keep.
pub fn fit_methods_with(
    spec: &DataflowSpec,
    fit: &CollectedRun,
    source: ModelSource,
    keep: bool,
) -> Result<(Methods, StageMetrics, Option<FittedModels>)> {
    let started = std::time::Instant::now();
    let (mut fitted_ssa, mut stats, fitted_from) = match source {
        ModelSource::Rows => (None, None, None),
        ModelSource::Stats(stats) => (None, Some(*stats), None),
        ModelSource::Fitted(fitted) => {
            let fitted = *fitted;
            (fitted.ssa, fitted.stats, Some(fitted.learned_from))
        }
    };
    let mut kept_ssa = None;
    let mut methods = Methods {
        originals: spec
            .keeps_originals()
            .then(|| Arc::new(OriginalCaptions) as Arc<dyn Method>),
        ..Methods::default()
    };
    if let Some(config) = &spec.clid {
        methods.after_ssa.push(Arc::new(config.clone()));
    }
    if let Some(config) = &spec.gbc {
        methods.after_ssa.push(Arc::new(config.clone()));
    }
    let mut fitted = 0;
    // The `models` stage's rows in: the captions SSA learned from, else the images.
    let mut learned_from = fit
        .rows
        .iter()
        .filter(|r| matches!(r.row, Row::Caption(_)))
        .count() as u64;
    if let Some(config) = &spec.ssa {
        let ssa = match (fitted_ssa.take(), stats.as_mut().and_then(|s| s.ssa.take())) {
            (Some(ssa), _) => ssa,
            (None, Some(stats)) => {
                learned_from = stats.captions();
                fit_models(config, stats)?
            }
            (None, None) => fit_models(config, ssa_stats_of_rows(config, &fit.rows))?,
        };
        if keep {
            kept_ssa = Some(ssa.clone());
        }
        let models = models_of_fitted(config, ssa, &spec.models, builtin_realizer())?;
        methods.ssa = Some((config.clone(), models));
        fitted += 2;
    }
    let mut relatedness = stats.as_mut().and_then(|s| s.relatedness.take());
    let mut cutswap = stats.as_mut().and_then(|s| s.cutswap.take());
    let needs_rows = (spec.relatedness.is_some() && relatedness.is_none())
        || (spec.cutswap.is_some() && cutswap.is_none());
    if needs_rows {
        let mut images = group_images(fit);
        if let Some(filter) = &spec.detections {
            images = images.iter().map(|image| filter.apply(image)).collect();
        }
        if let Some(config) = &spec.relatedness {
            let mut stats = RelatednessStats::new(config);
            images.iter().for_each(|image| stats.add_image(image));
            relatedness = Some(stats);
        }
        if let Some(config) = &spec.cutswap {
            let mut stats = CutswapStats::new(config);
            images.iter().for_each(|image| stats.add_image(image));
            cutswap = Some(stats);
        }
    }
    // Without SSA, what the models learned from is counted in images.
    let images = relatedness
        .as_ref()
        .map(RelatednessStats::images)
        .or(cutswap.as_ref().map(CutswapStats::images));
    if let (None, Some(images)) = (&spec.ssa, images) {
        learned_from = images;
    }
    if let Some(from) = fitted_from {
        learned_from = from;
    }
    let kept = keep.then(|| FittedModels {
        ssa: kept_ssa,
        stats: (relatedness.is_some() || cutswap.is_some()).then(|| CorpusStats {
            ssa: None,
            relatedness: relatedness.clone(),
            cutswap: cutswap.clone(),
            detections: spec.detections.clone(),
        }),
        learned_from,
    });
    // One embedder process serves both methods that call it.
    let embedder: Option<Arc<dyn Embedder>> = match &spec.models.embedder {
        Some(adapter) => Some(Arc::new(SubprocessAdapter::new(
            "embedder",
            ModelKind::Embedder,
            adapter.clone(),
        )?)),
        None => None,
    };
    match (&spec.relatedness, &embedder, relatedness) {
        // An external sentence encoder replaces the SIF encoder fitted on the corpus.
        (Some(config), Some(embedder), _) => {
            let encoder = SentenceEncoder::External(Arc::clone(embedder));
            methods
                .after_ssa
                .push(Arc::new(RelatednessModel::with_encoder(config, encoder)));
        }
        (Some(config), None, Some(stats)) => {
            let model = RelatednessModel::from_stats(stats, config)
                .map_err(|e| e.context("relatedness: fitting the model"))?;
            methods.after_ssa.push(Arc::new(model));
            fitted += 1;
        }
        _ => {}
    }
    if let (Some(config), Some(stats)) = (&spec.cutswap, cutswap) {
        let model = cutswap_stats::from_stats_with(stats, config, embedder.as_deref())
            .map_err(|e| e.context("cutswap: fitting the model"))?;
        let scorer = spec
            .models
            .image_text_scorer
            .as_ref()
            .map(|a| {
                SubprocessAdapter::new("image_text_scorer", ModelKind::ImageTextScorer, a.clone())
            })
            .transpose()?
            .map(|s| Arc::new(s) as Arc<dyn ImageTextScorer>);
        methods
            .after_ssa
            .push(Arc::new(CutswapMethod { model, scorer }));
        fitted += 1;
    }
    for (name, config) in &spec.methods {
        methods.after_ssa.push(method::build(name, config)?);
    }
    if let Some(filter) = &spec.detections {
        for method in &mut methods.after_ssa {
            *method = Arc::new(WithDetectionFilter {
                filter: filter.clone(),
                method: method.clone(),
            });
        }
    }
    let metrics = StageMetrics {
        name: "models".into(),
        rows_in: learned_from,
        rows_out: fitted,
        rejected: 0,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    Ok((methods, metrics, kept))
}

/// With a state, an external text-to-AMR model's answers are kept in it: `methods`' SSA parser
/// is wrapped so that a caption's parse comes from the state's [`ParseCache`] when it is there
/// and is added to it otherwise. Returns the cache, which the caller saves once the run ends
/// (failed or not: the answers got before a failure are kept too).
pub fn cache_parses(
    spec: &DataflowSpec,
    state: Option<&super::state::StateDir>,
    methods: &mut Methods,
) -> Result<Option<Arc<ParseCache>>> {
    let (Some(state), Some(adapter), Some((_, models))) =
        (state, &spec.models.text_to_amr, methods.ssa.as_mut())
    else {
        return Ok(None);
    };
    let CaptionParser::External { name, model } = &models.parser else {
        return Ok(None);
    };
    let cache = Arc::new(ParseCache::open(state.dir(), adapter)?);
    models.parser = CaptionParser::External {
        name: name.clone(),
        model: Arc::new(CachedTextToAmr {
            cache: Arc::clone(&cache),
            model: Arc::clone(model),
        }),
    };
    Ok(Some(cache))
}

/// Saves the parses `cache` holds into the state ([`cache_parses`]).
pub fn save_parses(cache: Option<Arc<ParseCache>>) -> Result<()> {
    if let Some(cache) = cache {
        let kept = cache.save()?;
        tracing::info!(
            kept,
            cached = cache.len(),
            "text-to-AMR answers kept in the state"
        );
    }
    Ok(())
}
