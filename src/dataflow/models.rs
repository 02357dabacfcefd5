//! The corpus-level models of a run's methods: SSA's scorer and word vectors, the relatedness
//! encoder, the CutSwap vocabulary and clusters, fitted once per run from the rows they learn
//! from ([`model_rows`]) and shared with every worker.

use crate::augment::cutswap;
use crate::augment::relatedness::RelatednessModel;
use std::sync::Arc;

use crate::augment::method::{self, Method};
use crate::augment::ssa::{builtin_realizer, OriginalCaptions};
use crate::error::{Error, Result};
use crate::export::StageMetrics;
use crate::ingest::Row;

use super::augment::{group_images, Methods};
use super::runtime::CollectedRun;
use super::ssa::{build_models, build_models_from_stats};
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

/// Fits the spec's methods' models on `fit` (rows in read order) and returns the methods with
/// the `models` stage's metrics.
pub fn fit_methods(spec: &DataflowSpec, fit: &CollectedRun) -> Result<(Methods, StageMetrics)> {
    fit_methods_with(spec, fit, None)
}

/// Whether the spec's corpus-level models can be fitted from statistics gathered while reading
/// ([`fit_methods_with`]) instead of rows: SSA's can; the relatedness encoder and the CutSwap
/// vocabulary still learn from rows.
pub fn fits_from_stats(spec: &DataflowSpec) -> bool {
    spec.ssa.is_some() && spec.relatedness.is_none() && spec.cutswap.is_none()
}

/// [`fit_methods`], with SSA's models fitted from `ssa_stats` when given.
pub fn fit_methods_with(
    spec: &DataflowSpec,
    fit: &CollectedRun,
    ssa_stats: Option<SsaCorpusStats>,
) -> Result<(Methods, StageMetrics)> {
    let started = std::time::Instant::now();
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
    let mut captions = fit
        .rows
        .iter()
        .filter(|r| matches!(r.row, Row::Caption(_)))
        .count() as u64;
    if let Some(config) = &spec.ssa {
        let adapter = spec.models.amr_to_text.as_ref();
        let models = match ssa_stats {
            Some(stats) => {
                captions = stats.captions();
                build_models_from_stats(config, stats, adapter, builtin_realizer())?
            }
            None => build_models(config, &fit.rows, adapter, builtin_realizer())?,
        };
        methods.ssa = Some((config.clone(), models));
        fitted += 2;
    }
    if spec.relatedness.is_some() || spec.cutswap.is_some() {
        let images = group_images(fit);
        if let Some(config) = &spec.relatedness {
            let model = RelatednessModel::fit(&images, config)
                .map_err(|e| Error::Config(format!("relatedness: fitting the model: {e}")))?;
            methods.after_ssa.push(Arc::new(model));
            fitted += 1;
        }
        if let Some(config) = &spec.cutswap {
            let model = cutswap::fit(&images, config)
                .map_err(|e| Error::Config(format!("cutswap: fitting the model: {e}")))?;
            methods.after_ssa.push(Arc::new(model));
            fitted += 1;
        }
    }
    for (name, config) in &spec.methods {
        methods.after_ssa.push(method::build(name, config)?);
    }
    let metrics = StageMetrics {
        name: "models".into(),
        rows_in: captions,
        rows_out: fitted,
        rejected: 0,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    Ok((methods, metrics))
}
