//! The extension point for augmentation methods beyond the built-in five.
//!
//! A [`Method`] turns one image's annotations into samples; it is registered once under a name
//! ([`register`]) and a spec turns it on with a table of that name under `[methods]`:
//!
//! ```toml
//! [methods.shout]
//! suffix = "!"        # the table is the method's configuration, handed to its factory
//! ```
//!
//! Execution model: the run calls the method's factory once, on the main thread, with its
//! table; the method it returns is shared by every worker (`Send + Sync`) and called once per
//! image, after the built-in methods' stages, in the order of the spec's `[methods]` tables
//! (sorted by name). Its samples are appended to the image's samples; randomness must come from
//! the seed it is given and the image key alone, so the output is the same for any number of
//! workers. An `Err` from [`Method::samples`] stops the run (nothing is committed) with that
//! error, its exit code kept and the stage and image named. The method's stage reports rows in
//! (the image's captions), rows out (its samples) and busy time in the manifest like every other
//! stage.

use std::sync::Arc;

use super::ImageAnnotations;
use crate::error::{Error, Result};
use crate::registry::{Factory, Registry};
use crate::schema::{RejectedRow, SampleRow};

/// An augmentation method: one image's annotations in, samples out.
///
/// The single-stage built-in methods (the original captions, CLID, GBC, relatedness, CutSwap)
/// implement it too and run through the same stage; SSA, whose work is split over six stages,
/// does not.
pub trait Method: Send + Sync {
    /// The stage's name in the manifest and the progress display.
    fn stage(&self) -> &str;
    /// What the stage counts as its rows in for one image (default: its captions).
    fn rows_in(&self, image: &ImageAnnotations) -> usize {
        image.captions.len()
    }
    /// The image's samples; `seed` is the run's seed.
    fn samples(&self, image: &ImageAnnotations, seed: u64) -> Result<Vec<SampleRow>>;
    /// The image's samples and the records the method could not use (an unreadable image
    /// file), which go to the rejected ledger; the stage calls this one. Default:
    /// [`Method::samples`] and nothing rejected.
    fn samples_and_rejected(
        &self,
        image: &ImageAnnotations,
        seed: u64,
    ) -> Result<(Vec<SampleRow>, Vec<RejectedRow>)> {
        Ok((self.samples(image, seed)?, Vec::new()))
    }
}

/// Builds a method from its `[methods.<name>]` table.
pub type MethodFactory = Factory<Arc<dyn Method>>;

/// Names a spec already uses for the built-in methods and other tables.
const RESERVED: [&str; 9] = [
    "ssa",
    "clid",
    "gbc",
    "relatedness",
    "cutswap",
    "original",
    "originals",
    "mix",
    "models",
];

static METHODS: Registry<Arc<dyn Method>> = Registry::new("method", "methods");

/// Registers `factory` under `name`; registering the same factory again is a no-op, a different
/// one under a taken or reserved name is an error.
pub fn register(name: &str, factory: MethodFactory) -> Result<()> {
    if name.is_empty() || RESERVED.contains(&name) {
        return Err(Error::Usage(format!(
            "`{name}` cannot name a registered method: it is a built-in method or spec table"
        )));
    }
    METHODS.register(name, factory)
}

/// The names of the registered methods, sorted.
pub fn registered() -> Vec<String> {
    METHODS.names()
}

/// The method registered as `name`, built from its table.
pub fn build(name: &str, config: &toml::Value) -> Result<Arc<dyn Method>> {
    METHODS.build(name, config)
}
