//! Dataflow specs: the TOML files under `dataflows/`.
//!
//! ```toml
//! name = "sample"
//! description = "The embedded sample data as capflow tables."
//! seed = 0
//!
//! [[inputs]]
//! format = "flickr30k-entities"
//! paths = ["../examples/data/flickr30k_entities"]   # relative to this file
//! # tables = ["images"]      # keep only these tables' rows from this input (default: all)
//!
//! [output]
//! dir = "out/sample"            # relative to the working directory; --out overrides
//! shard_bytes = 134217728
//! ```
//!
//! Input paths are resolved against the spec file's directory so a recipe runs from anywhere;
//! `capflow run SPEC --input DIR` replaces every input's paths by the matching subdirectory of
//! `DIR` (see [`DataflowSpec::with_input_root`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::augment::clid::ClidConfig;
use crate::augment::cutswap::Config as CutswapConfig;
use crate::augment::detections::DetectionFilter;
use crate::augment::gbc::GbcSampleConfig;
use crate::augment::relatedness::RelatednessConfig;
use crate::augment::ssa::SsaConfig;
use crate::error::{Error, Result};
use crate::export::CardMetadata;
use crate::ingest::Format;
use crate::models::AdapterConfig;
use crate::schema::TableKind;
use crate::select::mix::MixConfig;

/// One input of a dataflow: a format and the paths to read in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    pub format: Format,
    pub paths: Vec<PathBuf>,
    /// Subdirectory of `--input DIR` that replaces `paths` (defaults to the last component of the
    /// first path).
    #[serde(default)]
    pub input_subdir: Option<PathBuf>,
    /// Only these tables' rows are kept from this input (`tables = ["images"]` takes the image
    /// sizes of a COCO captions file whose captions come from another input); every record is
    /// still read and accounted for. Default: every table the reader produces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<Vec<TableKind>>,
}

impl InputSpec {
    /// Whether rows of `table` from this input enter the dataflow.
    pub fn keeps(&self, table: TableKind) -> bool {
        self.tables.as_ref().is_none_or(|t| t.contains(&table))
    }
}

/// Where and how the dataset is written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Used by `capflow ingest`-style writes; `capflow run` writes one shard per bucket chunk.
    #[serde(default = "default_shard_bytes")]
    pub shard_bytes: u64,
    /// Every table of a run's dataset is split into this many buckets by a hash of the image
    /// key (each cut into chunks, below): each process of a cluster writes the buckets it owns.
    /// Changing it recomputes everything.
    #[serde(default = "default_buckets")]
    pub buckets: usize,
    /// Each bucket is cut into chunks of about this many images (consecutive image ids), one
    /// shard per table each: a rerun rewrites only the chunks its new, changed and removed
    /// images fall in. Changing it recomputes everything.
    #[serde(default = "default_chunk_images")]
    pub chunk_images: usize,
    /// The dataset card's licence, an identifier from Hugging Face's list (`cc-by-4.0`,
    /// `apache-2.0`, `other`); the card says `unknown` without one. It does not change the
    /// data (not part of the configuration hash), nor do the card fields below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// The card's `language` (default `["en"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<Vec<String>>,
    /// The card's `task_categories` (default `["image-to-text"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_categories: Option<Vec<String>>,
    /// The card's `source_datasets` (default: the datasets the inputs' formats are the layout
    /// of, e.g. `flickr30k` for `flickr30k-entities`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_datasets: Option<Vec<String>>,
}

fn default_shard_bytes() -> u64 {
    128 * 1024 * 1024
}

/// The default bucket count: enough for 8 processes to write in parallel and for a 1% update to
/// rewrite a fraction of a large dataset, few enough that a small dataset is not scattered.
pub const DEFAULT_BUCKETS: usize = 8;

fn default_buckets() -> usize {
    DEFAULT_BUCKETS
}

/// The default mean bucket chunk size: a 1% update of new images rewrites one chunk per
/// bucket, a few percent of a large dataset, and a chunk's shards stay tens of kilobytes and up.
pub const DEFAULT_CHUNK_IMAGES: usize = 256;

fn default_chunk_images() -> usize {
    DEFAULT_CHUNK_IMAGES
}

impl Default for OutputSpec {
    fn default() -> Self {
        OutputSpec {
            dir: None,
            shard_bytes: default_shard_bytes(),
            buckets: default_buckets(),
            chunk_images: default_chunk_images(),
            license: None,
            language: None,
            task_categories: None,
            source_datasets: None,
        }
    }
}

/// A parsed dataflow spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataflowSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub seed: u64,
    pub inputs: Vec<InputSpec>,
    #[serde(default)]
    pub output: OutputSpec,
    /// SSA settings; present, the run augments with SSA (METHODS.md §1).
    #[serde(default)]
    pub ssa: Option<SsaConfig>,
    /// CLID varying-length captions from scene graphs (METHODS.md §2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clid: Option<ClidConfig>,
    /// GBC vertex captions as samples (METHODS.md §5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbc: Option<GbcSampleConfig>,
    /// GBC's detection post-processing, applied to every image's detections before the
    /// methods and their models read them (`[detections]`, docs/gbc.md); without it they read
    /// the detections as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detections: Option<DetectionFilter>,
    /// Captions scored by their relatedness to the image's visual context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relatedness: Option<RelatednessConfig>,
    /// CutSwap attribute/object text swaps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutswap: Option<CutswapConfig>,
    /// Keep the original captions as `original` samples (also on with `ssa.include_originals`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_originals: bool,
    /// How augmented samples are mixed with the originals (`[mix]`, default: keep all).
    #[serde(default)]
    pub mix: MixConfig,
    /// External models, one table per kind (`[models.amr_to_text]`, see docs/adapters.md).
    #[serde(default)]
    pub models: ModelsSpec,
    /// Registered methods to run, each with its configuration table (`[methods.<name>]`,
    /// [`crate::augment::method`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub methods: BTreeMap<String, toml::Value>,
    /// Registered sinks that take the run's samples besides the dataset, each with its
    /// configuration table (`[sinks.<name>]`, [`super::sink`]). They do not change the dataset.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sinks: BTreeMap<String, toml::Value>,
    /// Train a captioner on the samples while the run goes on (`[train]`, feature `train`;
    /// docs/train.md). It does not change the dataset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<toml::Value>,
}

/// External models of a spec; each is optional and replaces the built-in method of its kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsSpec {
    /// AMR-to-text generator used by SSA's `realize` stage instead of the built-in realizer.
    #[serde(default)]
    pub amr_to_text: Option<AdapterConfig>,
    /// Text-to-AMR parser used by SSA's `text-to-amr` stage instead of the built-in caption
    /// parser (its graphs are token-aligned by the built-in aligner when they have no
    /// alignments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_to_amr: Option<AdapterConfig>,
    /// Quality scorer (GRUEN in the SSA paper) used by SSA's `quality-filter` stage instead of
    /// the built-in scorer; a sentence is kept when it scores above `quality_threshold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality_scorer: Option<AdapterConfig>,
    /// Sentence encoder (Sentence-RoBERTa in the visual relatedness paper) used by the
    /// `relatedness` method for its soft label instead of SIF vectors fitted on the captions,
    /// and by CutSwap for its object words' vectors (the clusters) instead of word vectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedder: Option<AdapterConfig>,
    /// Image-text scorer (CLIP in the CutSwap thesis) that re-ranks CutSwap's image swaps
    /// instead of the built-in score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_text_scorer: Option<AdapterConfig>,
    /// Inputs the corpus-level models (SSA's quality scorer and word vectors, the relatedness
    /// encoder, the CutSwap vocabulary) are fitted on instead of the run's own inputs
    /// (`[[models.corpus]]`, same fields as `[[inputs]]`). A fixed corpus keeps the models, and
    /// so every unchanged image's samples, the same when new captions arrive: incremental reruns
    /// then recompute only the changed images (docs/incremental.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corpus: Vec<InputSpec>,
}

impl DataflowSpec {
    /// Reads a spec file; input paths become relative to the file's directory.
    pub fn from_file(path: &Path) -> Result<DataflowSpec> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut spec: DataflowSpec = toml::from_str(&text)
            .map_err(|e| Error::Config(format!("{}: {}", path.display(), e)))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for input in spec.inputs.iter_mut().chain(spec.models.corpus.iter_mut()) {
            for p in &mut input.paths {
                if p.is_relative() {
                    *p = base.join(&*p);
                }
            }
        }
        if let Some(ssa) = &mut spec.ssa {
            for p in [&mut ssa.frames, &mut ssa.vectors].into_iter().flatten() {
                if p.is_relative() {
                    *p = base.join(&*p);
                }
            }
        }
        let (cutswap_vectors, cutswap_images) = match spec.cutswap.as_mut() {
            Some(c) => (c.vectors.as_mut(), c.image.images_dir.as_mut()),
            None => (None, None),
        };
        let relative = [
            spec.relatedness.as_mut().and_then(|r| r.vectors.as_mut()),
            cutswap_vectors,
            cutswap_images,
        ];
        for p in relative.into_iter().flatten() {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        // `[train.images] dir`, like every input path, is relative to the spec.
        let train_images = spec
            .train
            .as_mut()
            .and_then(|t| t.get_mut("images"))
            .and_then(|i| i.get_mut("dir"));
        if let Some(toml::Value::String(dir)) = train_images {
            if Path::new(dir.as_str()).is_relative() {
                *dir = base.join(&*dir).to_string_lossy().into_owned();
            }
        }
        spec.validate()
            .map_err(|e| Error::Config(format!("{}: {}", path.display(), e)))?;
        Ok(spec)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("`name` must not be empty".into());
        }
        if self.inputs.is_empty() {
            return Err("at least one [[inputs]] entry is needed".into());
        }
        if i64::try_from(self.seed).is_err() {
            // Samples record it in an Int64 column: Delta Lake and Spark have no unsigned type.
            return Err(format!("`seed` must be at most {}", i64::MAX));
        }
        for (i, input) in self.inputs.iter().enumerate() {
            if input.paths.is_empty() {
                return Err(format!(
                    "inputs[{i}] ({}) lists no paths",
                    input.format.name()
                ));
            }
            if input.tables.as_ref().is_some_and(Vec::is_empty) {
                return Err(format!(
                    "inputs[{i}] ({}) keeps no tables: leave `tables` out to keep them all",
                    input.format.name()
                ));
            }
        }
        if let Some(ssa) = &self.ssa {
            if !(0.0..=1.0).contains(&ssa.quality_threshold) {
                return Err("ssa.quality_threshold must be in [0, 1]".into());
            }
            if ssa.min_nodes == 0 {
                return Err("ssa.min_nodes must be at least 1".into());
            }
        }
        if let Some(cutswap) = &self.cutswap {
            cutswap.validate().map_err(|e| e.to_string())?;
        }
        if let Some(gbc) = &self.gbc {
            gbc.validate()?;
        }
        // A model table without the method that calls it would be ignored without a word.
        let unused = [
            (
                "amr_to_text",
                self.models.amr_to_text.is_some(),
                self.ssa.is_some(),
                "[ssa]",
            ),
            (
                "text_to_amr",
                self.models.text_to_amr.is_some(),
                self.ssa.is_some(),
                "[ssa]",
            ),
            (
                "quality_scorer",
                self.models.quality_scorer.is_some(),
                self.ssa.is_some(),
                "[ssa]",
            ),
            (
                "embedder",
                self.models.embedder.is_some(),
                self.relatedness.is_some() || self.cutswap.is_some(),
                "[relatedness] and [cutswap]",
            ),
            (
                "image_text_scorer",
                self.models.image_text_scorer.is_some(),
                self.cutswap
                    .as_ref()
                    .is_some_and(|c| c.image.images_dir.is_some()),
                "CutSwap's image swaps ([cutswap.image] with images_dir)",
            ),
        ];
        for (kind, configured, used, method) in unused {
            if configured && !used {
                return Err(format!(
                    "[models.{kind}] is called only by {method}, which this spec does not have"
                ));
            }
        }
        if let Some(detections) = &self.detections {
            detections.validate()?;
        }
        self.mix.validate().map_err(|e| format!("[mix]: {e}"))?;
        if self.output.shard_bytes == 0 {
            return Err("output.shard_bytes must be positive".into());
        }
        if !(1..=99_999).contains(&self.output.buckets) {
            return Err("output.buckets must be between 1 and 99999".into());
        }
        if self.output.chunk_images == 0 {
            return Err("output.chunk_images must be positive".into());
        }
        Ok(())
    }

    /// Replaces every input's paths by `root/<input_subdir>`.
    pub fn with_input_root(mut self, root: &Path) -> DataflowSpec {
        for input in &mut self.inputs {
            let sub = input.input_subdir.clone().or_else(|| {
                input
                    .paths
                    .first()
                    .and_then(|p| p.file_name())
                    .map(PathBuf::from)
            });
            if let Some(sub) = sub {
                input.paths = vec![root.join(sub)];
            }
        }
        self
    }

    /// Whether the run keeps the original captions as `original` samples.
    pub fn keeps_originals(&self) -> bool {
        self.include_originals || self.ssa.as_ref().is_some_and(|s| s.include_originals)
    }

    /// The dataset directory a run writes: `chosen` (`--out`), else the spec's `output.dir`,
    /// else `out/<name>`.
    pub fn output_dir(&self, chosen: Option<&Path>) -> PathBuf {
        chosen
            .map(Path::to_path_buf)
            .or_else(|| self.output.dir.clone())
            .unwrap_or_else(|| PathBuf::from("out").join(&self.name))
    }

    /// The spec that reads the corpus the models are fitted on, when `[[models.corpus]]` names
    /// one.
    pub fn corpus_spec(&self) -> Option<DataflowSpec> {
        if self.models.corpus.is_empty() {
            return None;
        }
        let mut corpus = self.clone();
        corpus.inputs = self.models.corpus.clone();
        Some(corpus)
    }

    /// Whether any augmentation method is configured.
    pub fn augments(&self) -> bool {
        self.ssa.is_some()
            || self.clid.is_some()
            || self.gbc.is_some()
            || self.relatedness.is_some()
            || self.cutswap.is_some()
            || !self.methods.is_empty()
    }

    /// The dataset card's metadata: `[output]`'s card fields, with the sources derived from the
    /// inputs' formats when `source_datasets` is not given.
    pub fn card_metadata(&self) -> CardMetadata {
        let default = CardMetadata::default();
        let output = &self.output;
        let mut derived: Vec<String> = Vec::new();
        for input in &self.inputs {
            if let Some(source) = input.format.source_dataset() {
                if !derived.iter().any(|s| s == source) {
                    derived.push(source.to_string());
                }
            }
        }
        CardMetadata {
            license: output.license.clone(),
            language: output.language.clone().unwrap_or(default.language),
            task_categories: output
                .task_categories
                .clone()
                .unwrap_or(default.task_categories),
            source_datasets: output.source_datasets.clone().unwrap_or(derived),
        }
    }

    /// SHA-256 over everything in the spec that changes the output (not where it is written,
    /// nor the card's metadata).
    pub fn config_hash(&self) -> String {
        let mut hashed = self.clone();
        hashed.output.dir = None;
        hashed.output.license = None;
        hashed.output.language = None;
        hashed.output.task_categories = None;
        hashed.output.source_datasets = None;
        hashed.sinks.clear();
        hashed.train = None;
        for input in &mut hashed.inputs {
            input.input_subdir = None;
        }
        crate::export::config_hash(&serde_json::to_value(&hashed).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> DataflowSpec {
        toml::from_str(&format!(
            "name = \"t\"\n[[inputs]]\nformat = \"penman\"\npaths = [\"a.amr\"]\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn a_seed_must_fit_the_samples_int64_column() {
        // TOML's integers are Int64 already; a spec built in code is checked too.
        let seeded = |seed: u64| DataflowSpec { seed, ..spec("") };
        assert!(seeded(i64::MAX as u64).validate().is_ok());
        assert_eq!(
            seeded(i64::MAX as u64 + 1).validate().unwrap_err(),
            "`seed` must be at most 9223372036854775807"
        );
    }

    #[test]
    fn a_model_table_needs_the_method_that_calls_it() {
        let model = "command = [\"python3\", \"m.py\"]\n";
        let err = spec(&format!("[models.text_to_amr]\n{model}"))
            .validate()
            .unwrap_err();
        assert_eq!(
            err,
            "[models.text_to_amr] is called only by [ssa], which this spec does not have"
        );
        let err = spec(&format!("[models.embedder]\n{model}"))
            .validate()
            .unwrap_err();
        assert!(err.contains("only by [relatedness]"), "{err}");
        assert!(spec(&format!("[ssa]\n[models.quality_scorer]\n{model}"))
            .validate()
            .is_ok());
    }

    #[test]
    fn card_fields_come_from_output_and_do_not_change_the_configuration() {
        let plain = spec("");
        let flickr = |extra: &str| {
            spec(&format!(
                "[[inputs]]\nformat = \"flickr30k-entities\"\npaths = [\"f\"]\n\
                 [[inputs]]\nformat = \"coco-captions\"\npaths = [\"c\"]\n\
                 [[inputs]]\nformat = \"coco-instances\"\npaths = [\"i\"]\n{extra}"
            ))
        };
        // Penman alone names no source; the layouts of Flickr30k and COCO do, each once.
        let card = plain.card_metadata();
        assert_eq!(card, CardMetadata::default());
        assert_eq!(card.license, None);
        assert_eq!(card.language, ["en"]);
        assert_eq!(card.task_categories, ["image-to-text"]);
        assert!(card.source_datasets.is_empty());
        assert_eq!(
            flickr("").card_metadata().source_datasets,
            ["flickr30k", "coco"]
        );

        let given = flickr(
            "[output]\nlicense = \"cc-by-4.0\"\nlanguage = [\"en\", \"de\"]\n\
             task_categories = [\"image-to-text\", \"text-to-image\"]\n\
             source_datasets = [\"nlphuji/flickr30k\"]\n",
        );
        let card = given.card_metadata();
        assert_eq!(card.license.as_deref(), Some("cc-by-4.0"));
        assert_eq!(card.language, ["en", "de"]);
        assert_eq!(card.task_categories, ["image-to-text", "text-to-image"]);
        assert_eq!(card.source_datasets, ["nlphuji/flickr30k"]);
        assert_eq!(given.config_hash(), flickr("").config_hash());
        assert_ne!(plain.config_hash(), flickr("").config_hash());
    }
}
