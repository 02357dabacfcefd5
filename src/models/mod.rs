//! Traits for external models and the subprocess adapter that speaks to them.
//!
//! A model capflow does not implement itself (an AMR parser or generator, a sentence embedder, a
//! CLIP scorer, a learned quality scorer) is a program that reads Arrow IPC request batches on
//! stdin and writes reply batches on stdout ([`protocol`], `docs/adapters.md`). Stages depend on
//! the traits in [`traits`]; [`SubprocessAdapter`] implements all of them for a configured
//! [`ModelKind`], and tests can implement them in-process.
//!
//! ```no_run
//! use capflow::models::{AdapterConfig, AmrToText, ModelKind, SubprocessAdapter};
//!
//! let config = AdapterConfig::new(["python3", "examples/adapters/amrlib_generate.py"]);
//! let generator = SubprocessAdapter::new("amr_to_text", ModelKind::AmrToText, config)?;
//! let sentences = generator.generate_sentences(&["(d / dog)".to_string()])?;
//! assert_eq!(sentences.len(), 1);
//! # Ok::<(), capflow::Error>(())
//! ```

pub mod cache;
pub mod protocol;
pub mod subprocess;
pub mod traits;

pub use cache::{CachedTextToAmr, ParseCache};
pub use protocol::ModelKind;
pub use subprocess::{AdapterConfig, SubprocessAdapter};
/// `answers` of the external model `adapter` to the `asked` requests of the batch `what`, or an
/// adapter error when their number is not one per request (`noun` names them: `graphs`).
pub fn one_per_request<T>(
    adapter: &str,
    what: &str,
    asked: usize,
    answers: Vec<T>,
    noun: &str,
) -> crate::Result<Vec<T>> {
    if answers.len() == asked {
        return Ok(answers);
    }
    Err(crate::Error::Adapter {
        adapter: adapter.to_string(),
        batch: what.to_string(),
        reason: format!("returned {} {noun} for {asked} requests", answers.len()),
    })
}

pub use traits::{
    AmrToText, Embedder, ExternalQualityScorer, ImageText, ImageTextScorer, TextToAmr,
};
