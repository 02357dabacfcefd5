//! SSA's corpus-level models (the built-in quality scorer, the PPMI word vectors) fitted from
//! statistics gathered in a streaming pass over the run's captions.
//!
//! # Execution model
//!
//! Accumulate per worker, merge, fit once:
//!
//! 1. Each worker makes an [`SsaCorpusStats`] with the run's settings and adds every caption it
//!    reads with [`SsaCorpusStats::add_caption`], numbering the non-empty captions of each input
//!    unit (file) from 0 in read order.
//! 2. The workers' statistics are combined with [`SsaCorpusStats::merge`], in any order and
//!    grouping; they serialize with serde to cross process boundaries.
//! 3. [`SsaCorpusStats::fit`] fits both models once from the total.
//!
//! Everything gathered is exact (integer counts, a length histogram, the held-out captions
//! themselves), so the models do not depend on how the captions were split between workers
//! or on the merge order. With a single input unit they are the models that training on all
//! captions in read order gives ([`BuiltinQualityScorer::train`] and
//! [`train_ppmi_vectors`](crate::text::ppmi::train_ppmi_vectors)), bit for bit; with several
//! units the vectors still are, but the quality scorer's held-out captions are chosen per unit
//! (see [`QualityConfig::holds_out`]).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::select::quality::{BuiltinQualityScorer, QualityConfig, QualityStats};
use crate::text::ppmi::{PpmiConfig, PpmiStats, VectorPairs};
use crate::text::tokenize::tokenize;

/// Numbers captions as [`SsaCorpusStats::add_caption`] takes them, for captions that come in
/// read order with their record ordinals ([`KeyedRow`](crate::dataflow::runtime::KeyedRow)):
/// the non-empty captions of each input unit from 0, or, in a unit whose rows carry an image's
/// position `i` in their ordinals' high half (`i << 32 | k`, a Flickr30k Entities directory),
/// the non-empty captions of each image from `i << 32`. A caption's number then does not depend
/// on which worker read which image.
#[derive(Debug, Default)]
pub struct CaptionNumbering {
    /// The unit and the high half of the ordinals of the captions numbered last.
    at: Option<(u32, u64)>,
    /// The number of the next non-empty caption.
    next: u64,
}

impl CaptionNumbering {
    /// Adds `text`, a caption of input unit `unit` read as record `ordinal`, to `stats` under
    /// its number.
    pub fn add(&mut self, stats: &mut SsaCorpusStats, unit: u32, ordinal: u64, text: &str) {
        let image = ordinal >> 32;
        if self.at != Some((unit, image)) {
            self.at = Some((unit, image));
            self.next = image << 32;
        }
        if stats.add_caption(unit, self.next, text) {
            self.next += 1;
        }
    }
}

/// Mergeable statistics of a run's captions for SSA's corpus-level models: the quality scorer's
/// ([`QualityStats`]) and the word vectors' ([`PpmiStats`]).
///
/// Memory grows with the distinct n-grams of the captions (up to the scorer's order), the
/// distinct word pairs co-occurring within the vectors' window, the distinct words, and the
/// held-out captions' tokens (one caption in `calibration_every`, 4 bytes a token);
/// [`approx_bytes`](Self::approx_bytes) estimates it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SsaCorpusStats {
    /// [`QualityConfig::calibration_every`] the held-out captions were chosen with.
    calibration_every: usize,
    quality: QualityStats,
    vectors: PpmiStats,
}

impl SsaCorpusStats {
    /// Empty statistics for models fitted with these settings (the ones later given to
    /// [`fit`](Self::fit)).
    pub fn new(quality: &QualityConfig, ppmi: &PpmiConfig) -> SsaCorpusStats {
        SsaCorpusStats {
            calibration_every: quality.calibration_every,
            quality: QualityStats::for_config(quality),
            vectors: PpmiStats::new(ppmi.window),
        }
    }

    /// Adds one caption's text, tokenized with [`tokenize`] as the models see it.
    ///
    /// `unit` is the caption's input unit (its number in the run's inputs) and
    /// `index_in_unit` its number in the unit ([`CaptionNumbering`]): the non-empty captions of
    /// the unit from 0 in read order, or `i << 32 | k` for the `k`-th non-empty caption of the
    /// `i`-th image of a unit read image by image. The index decides whether the caption is held
    /// out of the quality scorer's calibration model ([`QualityConfig::holds_out`] of
    /// `i + k`, which is the index itself in a unit numbered from 0), and both name the caption
    /// in the scorer's sample of held-out captions. Returns whether the caption was
    /// non-empty, that is whether it took the number: the caller advances its count when it
    /// returns true. A caption is empty when its text is only whitespace
    /// (`text.trim().is_empty()`); it then counts for nothing (the quality scorer skips it, and
    /// the vectors see no token).
    pub fn add_caption(&mut self, unit: u32, index_in_unit: u64, text: &str) -> bool {
        let tokens = tokenize(text);
        if tokens.is_empty() {
            return false;
        }
        let (image, k) = (index_in_unit >> 32, index_in_unit & u64::from(u32::MAX));
        let every = self.calibration_every as u64;
        // `QualityConfig::holds_out`'s rule (a zero `calibration_every` fails at fit): of each
        // `every` consecutive captions of an image, one, a different one in the next image.
        let held_out = every != 0 && (image + k) % every == every - 1;
        // Unit 0 numbers its captions as `BuiltinQualityScorer::train` numbers a whole corpus;
        // an image's position spreads over all 64 bits, so that no two captions share a name.
        let occurrence = ((u64::from(unit) << 32) | k) ^ image.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.quality.add_caption(held_out, occurrence, &tokens);
        self.vectors.add_sentence(&tokens);
        true
    }

    /// Adds `other`'s statistics to these. Fails when the two were made with different
    /// settings.
    pub fn merge(&mut self, other: SsaCorpusStats) -> Result<()> {
        if (
            self.calibration_every,
            self.quality.order(),
            self.quality.held_out_limit(),
            self.vectors.window(),
        ) != (
            other.calibration_every,
            other.quality.order(),
            other.quality.held_out_limit(),
            other.vectors.window(),
        ) {
            return Err(Error::invalid(
                "ssa corpus statistics",
                "statistics gathered with different settings cannot be merged",
            ));
        }
        self.quality.merge(other.quality);
        self.vectors.merge(other.vectors);
        Ok(())
    }

    /// The number of non-empty captions added.
    pub fn captions(&self) -> u64 {
        self.quality.captions()
    }

    /// Heap bytes held, roughly (for memory accounting).
    pub fn approx_bytes(&self) -> usize {
        self.quality.approx_bytes() + self.vectors.approx_bytes()
    }

    /// Fits the quality scorer and the word vectors (`(word, vector)` pairs for
    /// [`WordVectors::from_pairs`](crate::text::WordVectors::from_pairs)).
    ///
    /// Fails as [`BuiltinQualityScorer::train`] does (too few captions, settings out of
    /// range), or when `quality` or `ppmi` differ from the settings the statistics were
    /// gathered with in what the gathering depends on (`calibration_every`, the vectors'
    /// window, an `order` above the gathered one).
    pub fn fit(
        self,
        quality: &QualityConfig,
        ppmi: &PpmiConfig,
    ) -> Result<(BuiltinQualityScorer, VectorPairs)> {
        let mismatch = |what: String| Err(Error::invalid("ssa corpus statistics", what));
        if quality.calibration_every != self.calibration_every {
            return mismatch(format!(
                "gathered with calibration_every {}, cannot fit calibration_every {}",
                self.calibration_every, quality.calibration_every
            ));
        }
        if ppmi.window.max(1) != self.vectors.window() {
            return mismatch(format!(
                "co-occurrences gathered within {} positions, cannot fit window {}",
                self.vectors.window(),
                ppmi.window
            ));
        }
        let scorer = BuiltinQualityScorer::from_stats(self.quality, quality)?;
        let vectors = self.vectors.fit(ppmi);
        Ok((scorer, vectors))
    }
}
