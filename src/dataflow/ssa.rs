//! SSA in the dataflow: its corpus-level models and its stages' names.
//!
//! ```text
//! gather → text-to-amr → amr-align → merge → event-sample → realize → quality-filter → control-signals
//! ```
//!
//! The corpus-level models (the quality scorer's language model, the word vectors) are fitted
//! from statistics of all of the run's captions, numbered per input unit, so they are the same
//! for any number of workers and processes; the stages run per image in
//! [`super::augment::run_augment`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::amr::align::ModifierLexicon;
use crate::augment::ssa::{
    CaptionNumbering, CaptionParser, EventRealizer, ExternalQuality, ExternalRealizer, SsaConfig,
    SsaCorpusStats, SsaModels,
};
use crate::error::{Error, Result};
use crate::ingest::Row;
use crate::models::{ModelKind, SubprocessAdapter};
use crate::select::quality::{BuiltinQualityScorer, QualityConfig, QualityScorer};
use crate::text::ppmi::PpmiConfig;
use crate::text::{VectorFormat, WordVectors};

use super::runtime::KeyedRow;
use super::spec::ModelsSpec;

/// SSA's stages after `gather`, in dataflow order, as named in the manifest.
pub const STAGES: [&str; 7] = [
    "text-to-amr",
    "amr-align",
    "merge",
    "event-sample",
    "realize",
    "quality-filter",
    "control-signals",
];

/// The quality scorer's settings for `config`.
fn quality_config(config: &SsaConfig) -> QualityConfig {
    QualityConfig {
        threshold: config.quality_threshold,
        ..QualityConfig::default()
    }
}

/// Too few captions for the built-in scorer is a property of the input data (exit code 3).
fn training_error(e: Error) -> Error {
    Error::invalid(
        "input for ssa",
        format!("the built-in quality scorer is trained on the run's captions: {e}"),
    )
}

/// Empty statistics for SSA's corpus-level models ([`fit_models`]).
pub fn corpus_stats(config: &SsaConfig) -> SsaCorpusStats {
    SsaCorpusStats::new(&quality_config(config), &PpmiConfig::default())
}

/// The statistics of the run's captions (`rows` in read order) that SSA's corpus-level models
/// are fitted from, numbered per input unit as the streaming engine's readers number them.
pub fn ssa_stats_of_rows(config: &SsaConfig, rows: &[Arc<KeyedRow>]) -> SsaCorpusStats {
    let mut stats = corpus_stats(config);
    let mut numbering = CaptionNumbering::default();
    for row in rows {
        if let Row::Caption(caption) = &row.row {
            numbering.add(&mut stats, row.unit, row.ordinal, &caption.text);
        }
    }
    stats
}

/// SSA's corpus-level models as fitted: the quality scorer and, unless the spec names a
/// vectors file, the word vectors. What a state keeps of SSA's models ([`super::artifact`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SsaFitted {
    pub quality: BuiltinQualityScorer,
    /// `None` when the vectors are read from `[ssa] vectors`.
    pub vectors: Option<WordVectors>,
}

/// Fits SSA's corpus-level models from the statistics of the run's captions.
pub fn fit_models(config: &SsaConfig, stats: SsaCorpusStats) -> Result<SsaFitted> {
    let (quality, pairs) = stats
        .fit(&quality_config(config), &PpmiConfig::default())
        .map_err(training_error)?;
    let vectors = match &config.vectors {
        Some(_) => None,
        None => Some(WordVectors::from_pairs(pairs)?),
    };
    Ok(SsaFitted { quality, vectors })
}

/// SSA's models from fitted ones, with the spec's adapters and files.
pub fn models_of_fitted(
    config: &SsaConfig,
    fitted: SsaFitted,
    adapters: &ModelsSpec,
    realizer: Arc<dyn EventRealizer>,
) -> Result<SsaModels> {
    let vectors = match (fitted.vectors, &config.vectors) {
        (Some(vectors), _) => vectors,
        (None, Some(path)) => WordVectors::read(path, VectorFormat::Detect)?,
        (None, None) => {
            return Err(Error::invalid(
                "ssa models",
                "the fitted models hold no word vectors and [ssa] names no vectors file",
            ))
        }
    };
    assemble(config, fitted.quality, vectors, adapters, realizer)
}

fn assemble(
    config: &SsaConfig,
    quality: BuiltinQualityScorer,
    vectors: WordVectors,
    adapters: &ModelsSpec,
    realizer: Arc<dyn EventRealizer>,
) -> Result<SsaModels> {
    let frames = match &config.frames {
        Some(path) => Some(crate::amr::sample::read_frames(path)?),
        None => None,
    };
    let realizer: Arc<dyn EventRealizer> = match &adapters.amr_to_text {
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
    let parser = match &adapters.text_to_amr {
        Some(adapter) => {
            let name = "text_to_amr".to_string();
            let model =
                SubprocessAdapter::new(name.clone(), ModelKind::TextToAmr, adapter.clone())?;
            CaptionParser::External {
                name,
                model: Arc::new(model),
            }
        }
        None => CaptionParser::Builtin,
    };
    let external_quality = match &adapters.quality_scorer {
        Some(adapter) => {
            let name = "quality_scorer".to_string();
            let model =
                SubprocessAdapter::new(name.clone(), ModelKind::QualityScorer, adapter.clone())?;
            Some(ExternalQuality {
                name,
                model: Arc::new(model),
            })
        }
        None => None,
    };
    Ok(SsaModels {
        lexicon: ModifierLexicon::wordnet(),
        vectors: (!vectors.is_empty()).then(|| Arc::new(vectors)),
        quality: Arc::new(quality) as Arc<dyn QualityScorer>,
        frames,
        realizer,
        parser,
        external_quality,
    })
}
