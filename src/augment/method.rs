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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::ImageAnnotations;
use crate::error::{Error, Result};
use crate::schema::SampleRow;

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
}

/// Builds a method from its `[methods.<name>]` table.
pub type MethodFactory = fn(config: &toml::Value) -> Result<Arc<dyn Method>>;

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

fn registry() -> &'static Mutex<BTreeMap<String, MethodFactory>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<String, MethodFactory>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// Registers `factory` under `name`; registering the same factory again is a no-op, a different
/// one under a taken or reserved name is an error.
pub fn register(name: &str, factory: MethodFactory) -> Result<()> {
    if name.is_empty() || RESERVED.contains(&name) {
        return Err(Error::Usage(format!(
            "`{name}` cannot name a registered method: it is a built-in method or spec table"
        )));
    }
    let mut methods = registry()
        .lock()
        .map_err(|_| Error::Usage("the method registry is unusable".into()))?;
    match methods.get(name) {
        Some(existing) if *existing as usize != factory as usize => Err(Error::Usage(format!(
            "a different method is already registered as `{name}`"
        ))),
        _ => {
            methods.insert(name.to_string(), factory);
            Ok(())
        }
    }
}

/// The names of the registered methods, sorted.
pub fn registered() -> Vec<String> {
    registry()
        .lock()
        .map(|methods| methods.keys().cloned().collect())
        .unwrap_or_default()
}

/// The method registered as `name`, built from its table.
pub fn build(name: &str, config: &toml::Value) -> Result<Arc<dyn Method>> {
    let factory = registry()
        .lock()
        .ok()
        .and_then(|methods| methods.get(name).copied());
    match factory {
        Some(factory) => factory(config),
        None => {
            let known = registered();
            Err(Error::Config(format!(
                "[methods.{name}]: no method is registered as `{name}` ({})",
                if known.is_empty() {
                    "none is registered".to_string()
                } else {
                    format!("registered: {}", known.join(", "))
                }
            )))
        }
    }
}
