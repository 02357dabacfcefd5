//! One trait per kind of external model capflow can call.
//!
//! # Execution model
//!
//! All five traits are *pull*, batch-at-a-time and synchronous: a dataflow stage collects a
//! batch of inputs, calls the trait method once and blocks until every answer is back. The
//! returned `Vec` has exactly one element per input, in input order; an implementation that
//! cannot keep that promise must return an error rather than pad or truncate. Implementations
//! may split a large batch into smaller ones (the [`SubprocessAdapter`] does, by its configured
//! maximum batch size), so callers should pass whatever is convenient, typically one timely
//! batch.
//!
//! Methods take `&self` and the traits require `Send + Sync`, so one model can be shared by the
//! workers of a process behind an `Arc`; an implementation serialises access internally if the
//! model itself is single-threaded.
//!
//! # Errors
//!
//! An `Err` fails the whole call: no partial results are returned, because a stage cannot tell
//! which of its records would be affected. The error reaches the run as
//! [`crate::Error::Adapter`] naming the model and the batch, and stops the run with exit code 5;
//! restarting crashed model processes and retrying is the implementation's business and has
//! already happened by the time an error is returned.
//!
//! [`SubprocessAdapter`]: super::SubprocessAdapter

use std::path::PathBuf;

use crate::Result;

/// Parses captions into AMR graphs written in PENMAN notation (amrlib's `parse_sents`).
///
/// Required: [`TextToAmr::parse_captions`]. Each returned string is one PENMAN graph for the
/// caption at the same index; graphs are parsed by `crate::amr` afterwards, so a graph the model
/// produced but capflow cannot parse is a record-level rejection, not an error here.
pub trait TextToAmr: Send + Sync {
    /// One PENMAN graph per caption, in order.
    fn parse_captions(&self, captions: &[String]) -> Result<Vec<String>>;
}

/// Generates a sentence from an AMR graph in PENMAN notation (amrlib's `generate`).
///
/// Required: [`AmrToText::generate_sentences`]. This is the neural realizer for SSA's sampled
/// event graphs; one sentence per graph, in order.
pub trait AmrToText: Send + Sync {
    /// One sentence per PENMAN graph, in order.
    fn generate_sentences(&self, graphs: &[String]) -> Result<Vec<String>>;
}

/// Scores the fluency/quality of sentences with an external model.
///
/// Required: [`ExternalQualityScorer::score_sentences`]. Scores lie in [0, 1], higher is
/// better, and are comparable across batches of one run (the quality filter thresholds them).
/// capflow's built-in scorer lives in `crate::select`; this trait is for models outside the
/// process.
pub trait ExternalQualityScorer: Send + Sync {
    /// One score in [0, 1] per sentence, in order.
    fn score_sentences(&self, sentences: &[String]) -> Result<Vec<f64>>;
}

/// Embeds texts as dense vectors (e.g. sentence-transformers), used for visual relatedness and
/// caption clustering.
///
/// Required: [`Embedder::embed`]. Every vector of a run has the same dimension; an
/// implementation whose model changes dimension mid-run must return an error.
pub trait Embedder: Send + Sync {
    /// One vector per text, in order, all of one dimension.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

/// One image–text pair to score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageText {
    /// Path of the image file as the model's process will open it.
    pub image: PathBuf,
    /// The caption to score against the image.
    pub text: String,
}

/// Scores how well a text describes an image (e.g. CLIP similarity rescaled to [0, 1]).
///
/// Required: [`ImageTextScorer::score_pairs`]. Images are passed by path, not by pixels, so the
/// model's process reads (and may cache) them itself; paths must be valid UTF-8.
pub trait ImageTextScorer: Send + Sync {
    /// One score in [0, 1] per pair, in order.
    fn score_pairs(&self, pairs: &[ImageText]) -> Result<Vec<f64>>;
}
