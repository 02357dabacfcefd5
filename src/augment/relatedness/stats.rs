//! The relatedness model's corpus statistics, gathered image by image and merged.
//!
//! # Execution model
//!
//! Accumulate per worker, merge, fit once:
//!
//! 1. Each worker makes a [`RelatednessStats`] with the run's [`RelatednessConfig`] and adds
//!    every image it holds with [`RelatednessStats::add_image`].
//! 2. The workers' statistics are combined with [`RelatednessStats::merge`], in any order and
//!    grouping; they serialize with serde (bincode) to cross process boundaries.
//! 3. [`RelatednessModel::from_stats`](super::RelatednessModel::from_stats) fits the model once
//!    from the total.
//!
//! Everything gathered is an integer count or an integer fixed-point sum, and every
//! floating-point sum of the fit runs in an order fixed by the words' text, so the model is the
//! same, bit for bit, however the images were split between statistics and in whatever order
//! they were added and merged. [`RelatednessModel::fit`](super::RelatednessModel::fit) is this
//! path over a list of images.
//!
//! # What the fit computes from them
//!
//! - Word vectors: read from `config.vectors`, else PPMI vectors trained on the captions and
//!   the detection label sentences, from merged [`PpmiStats`] (the vectors
//!   [`train_ppmi_vectors`](crate::text::ppmi::train_ppmi_vectors) gives on the same
//!   sentences, bit for bit).
//! - SIF weights, from the caption words' counts (the same bits as fitting on a caption list).
//! - The common sentence direction(s), the top eigenvectors of `Σ_s v_s v_sᵀ` over the caption
//!   vectors `v_s`, from the pair sums of [`SifStats`] (see [`super::sif`]).
//!
//! Only the last can differ from summing the caption vectors themselves, and only in the last
//! bits: that sum used to be taken caption after caption (images by id, captions in image
//! order), which depends on the order of the images, and is now
//! `Σ_{w,w'} M_{w,w'} a_w a_w' e_w e_w'ᵀ`, taken word after word in the order of their text,
//! with each caption's share of `M_{w,w'}` rounded to a multiple of 2^-80. The two are equal in
//! exact arithmetic but round differently, so the directions, and through them the sentence
//! vectors and similarities, may differ from the caption-by-caption sums by a few units in the
//! last place (at most 1.9e-16 on the embedded sample data's similarities, none of which
//! changes a rank or a binary label).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde::{Deserialize, Serialize};

use super::context::display_label;
use super::gender::GenderLexicon;
use super::sif::{content_tokens, SifEncoder, SifStats};
use super::RelatednessConfig;
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::text::ppmi::{PpmiConfig, PpmiStats};
use crate::text::{VectorFormat, WordVectors};

/// Mergeable statistics of a corpus of images for the relatedness model
/// ([`RelatednessModel::from_stats`](super::RelatednessModel::from_stats)).
///
/// # What they hold
///
/// - The settings the gathering depends on: `gender_neutral`, `vectors` and, without vectors,
///   `ppmi_window`. Statistics of other settings do not merge, and fit only with these.
/// - [`SifStats`] of the captions (gender-neutral when so configured): every word's count,
///   whether it has a vector, and for every two words with vectors that share a caption the
///   fixed-point sum `Σ_s c_{s,w} c_{s,w'} / n_s²`.
/// - Without `vectors`, [`PpmiStats`] of the captions and of each image's detection label
///   sentence (its detections' labels joined by spaces), from which the word vectors are
///   trained.
/// - The number of images added, and the first error met (the vector file could not be read,
///   statistics of other settings were merged), which the fit reports.
///
/// With `vectors`, the vector file is read on the first caption added, to know which words
/// have a vector (a sentence vector averages over those only); every statistics of the process
/// that gather for the same file share one table, which the fit then uses. It is not part of
/// the serialized statistics: deserialized ones read it again when they need it.
///
/// # Memory
///
/// Grows with the vocabulary, not with the number of images: the distinct caption words, the
/// distinct pairs of words with vectors that share a caption (about 28 bytes each, at most
/// `V (V + 1) / 2` for `V` such words) and, without `vectors`, the distinct word pairs within
/// `ppmi_window` positions of each other (about 20 bytes each) and the label words.
/// [`approx_bytes`](Self::approx_bytes) estimates it; the shared vector table (as large as the
/// file's vectors, once per process) is not counted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RelatednessStats {
    gender_neutral: bool,
    vectors: Option<PathBuf>,
    images: u64,
    sif: SifStats,
    /// Present when the word vectors are trained on the corpus (no `vectors`).
    ppmi: Option<PpmiStats>,
    /// The first error met, by text.
    error: Option<String>,
    #[serde(skip)]
    table: SharedTable,
    #[serde(skip)]
    lexicon: GenderLexicon,
}

/// The vector table of `config.vectors`, once read.
#[derive(Clone, Default)]
struct SharedTable(Option<Arc<WordVectors>>);

impl std::fmt::Debug for SharedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(table) => f
                .debug_struct("WordVectors")
                .field("words", &table.len())
                .field("dim", &table.dim())
                .finish(),
            None => f.write_str("None"),
        }
    }
}

impl RelatednessStats {
    /// Empty statistics for a model fitted with `config`.
    pub fn new(config: &RelatednessConfig) -> Self {
        RelatednessStats {
            gender_neutral: config.gender_neutral,
            vectors: config.vectors.clone(),
            images: 0,
            sif: SifStats::new(),
            ppmi: config
                .vectors
                .is_none()
                .then(|| PpmiStats::new(config.ppmi_window)),
            error: None,
            table: SharedTable::default(),
            lexicon: GenderLexicon::default(),
        }
    }

    /// Adds everything one image contributes: each caption (gender-neutral when so
    /// configured) and, for the trained word vectors, the sentence of its detections' labels
    /// (display form, gender-neutral when so configured, joined by spaces).
    pub fn add_image(&mut self, image: &ImageAnnotations) {
        self.images += 1;
        for caption in &image.captions {
            let text = self.prepared(&caption.text);
            self.add_caption(&text);
        }
        if self.ppmi.is_some() {
            let labels: Vec<String> = image
                .detections
                .iter()
                .map(|d| self.prepared(&display_label(&d.label)))
                .collect();
            self.add_label(&labels.join(" "));
        }
    }

    /// Adds a caption as given (no gender-neutral rewrite).
    pub(super) fn add_caption(&mut self, text: &str) {
        let tokens = content_tokens(text);
        if let Some(ppmi) = &mut self.ppmi {
            ppmi.add_sentence(&tokens);
            // The trained vectors cover every word of the corpus (`min_count` 1, no size
            // limit), so every caption word has one; the fit checks it.
            self.sif.add_sentence(&tokens, |_| true);
        } else if let Some(table) = self.table() {
            self.sif
                .add_sentence(&tokens, |word| table.get(word).is_some());
        }
    }

    /// Adds a label sentence as given, for the trained word vectors (nothing with `vectors`).
    pub(super) fn add_label(&mut self, text: &str) {
        if let Some(ppmi) = &mut self.ppmi {
            ppmi.add_sentence(&content_tokens(text));
        }
    }

    fn prepared(&self, text: &str) -> String {
        if self.gender_neutral {
            self.lexicon.neutral(text)
        } else {
            text.to_string()
        }
    }

    /// The table of `vectors`, read on first use; `None` (the error noted) when it cannot be.
    fn table(&mut self) -> Option<Arc<WordVectors>> {
        if let Some(table) = &self.table.0 {
            return Some(Arc::clone(table));
        }
        if self.error.is_some() {
            return None;
        }
        let path = self.vectors.as_ref()?;
        match shared_table(path) {
            Ok(table) => {
                self.table.0 = Some(Arc::clone(&table));
                Some(table)
            }
            Err(e) => {
                self.note_error(format!("reading the word vectors: {e}"));
                None
            }
        }
    }

    fn note_error(&mut self, reason: String) {
        if self.error.as_ref().is_none_or(|first| reason < *first) {
            self.error = Some(reason);
        }
    }

    /// The settings the gathering depends on.
    fn settings(&self) -> (bool, Option<&Path>, Option<usize>) {
        (
            self.gender_neutral,
            self.vectors.as_deref(),
            self.ppmi.as_ref().map(PpmiStats::window),
        )
    }

    /// Adds `other`'s statistics to these. Statistics gathered with other settings
    /// (`gender_neutral`, `vectors`, `ppmi_window`) are not added: the fit then fails.
    pub fn merge(&mut self, other: RelatednessStats) {
        self.images += other.images;
        if self.settings() != other.settings() {
            self.note_error(
                "statistics gathered with different gender_neutral, vectors or ppmi_window \
                 settings cannot be merged"
                    .to_string(),
            );
            return;
        }
        if let Some(reason) = other.error {
            self.note_error(reason);
        }
        self.sif.merge(other.sif);
        if let (Some(ours), Some(theirs)) = (&mut self.ppmi, other.ppmi) {
            ours.merge(theirs);
        }
        if self.table.0.is_none() {
            self.table = other.table;
        }
    }

    /// The number of images added.
    pub fn images(&self) -> u64 {
        self.images
    }

    /// Heap bytes held, roughly (for memory accounting); the shared vector table is not
    /// counted.
    pub fn approx_bytes(&self) -> usize {
        self.sif.approx_bytes()
            + self.ppmi.as_ref().map_or(0, PpmiStats::approx_bytes)
            + self.vectors.as_ref().map_or(0, |p| p.as_os_str().len())
            + self.error.as_ref().map_or(0, String::len)
    }

    /// The SIF encoder of `config` (whose gathering settings must be these statistics').
    pub(super) fn fit_sif(self, config: &RelatednessConfig) -> Result<SifEncoder> {
        let invalid = |reason: String| Error::invalid("relatedness statistics", reason);
        if (config.gender_neutral, config.vectors.as_deref())
            != (self.gender_neutral, self.vectors.as_deref())
        {
            return Err(invalid(format!(
                "gathered with gender_neutral = {} and vectors {:?}, cannot fit \
                 gender_neutral = {} and vectors {:?}",
                self.gender_neutral, self.vectors, config.gender_neutral, config.vectors
            )));
        }
        let vectors = match (&self.vectors, &self.ppmi) {
            (Some(path), _) => match self.table.0 {
                Some(table) => Arc::try_unwrap(table).unwrap_or_else(|shared| (*shared).clone()),
                // A file that could not be read while gathering fails here with its own error.
                None => WordVectors::read(path, VectorFormat::Detect)?,
            },
            (None, Some(ppmi)) => {
                if let Some(reason) = &self.error {
                    return Err(invalid(reason.clone()));
                }
                if config.ppmi_window.max(1) != ppmi.window() {
                    return Err(invalid(format!(
                        "co-occurrences gathered within {} positions, cannot fit ppmi_window {}",
                        ppmi.window(),
                        config.ppmi_window
                    )));
                }
                let ppmi_config = PpmiConfig {
                    dims: config.ppmi_dims,
                    window: config.ppmi_window,
                    ..PpmiConfig::default()
                };
                WordVectors::from_pairs(ppmi.fit(&ppmi_config))?
            }
            (None, None) => return Err(invalid("no word vectors were gathered".to_string())),
        };
        if let Some(reason) = &self.error {
            return Err(invalid(reason.clone()));
        }
        SifEncoder::from_stats(vectors, &self.sif, config.sif_a, config.remove_components)
    }
}

/// The table of a vector file, read once per process while some statistics hold it: workers
/// gathering at the same time wait for one read instead of each reading the file. Only weak
/// references are kept here, so the table is freed with the last statistics that hold it.
fn shared_table(path: &Path) -> Result<Arc<WordVectors>> {
    static TABLES: Mutex<Vec<(PathBuf, Weak<WordVectors>)>> = Mutex::new(Vec::new());
    let mut tables = TABLES.lock().unwrap_or_else(PoisonError::into_inner);
    tables.retain(|(_, table)| table.strong_count() > 0);
    if let Some(table) = tables
        .iter()
        .filter(|(p, _)| p == path)
        .find_map(|(_, table)| table.upgrade())
    {
        return Ok(table);
    }
    let table = Arc::new(WordVectors::read(path, VectorFormat::Detect)?);
    tables.push((path.to_path_buf(), Arc::downgrade(&table)));
    Ok(table)
}
