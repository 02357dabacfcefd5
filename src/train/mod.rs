//! The training sink (feature `train`): a controllable captioner in tch, trained on capflow
//! samples, with CLID's curriculum data selection (METHODS.md §2) and model evaluation under
//! controls.
//!
//! - [`config`]: the TOML configuration;
//! - [`vocab`], [`data`], [`batch`]: vocabularies from the data, samples and region tokens,
//!   batches by token budget;
//! - [`model`]: encoder over control and region tokens (with [`pixels`], each region's crop of
//!   its image through a small CNN), autoregressive transformer decoder;
//! - [`optim`]: AdamW, warm-up + cosine, gradient clipping;
//! - [`trainer`]: the loop, the loader thread, checkpoints and resume; [`source`]: where its
//!   batches' samples come from (memory, or the sink's pool through a small cache);
//! - [`run`]: plain and curriculum jobs; the selection math is in
//!   [`crate::select::curriculum`];
//! - [`sink`]: [`TrainingSink`], training on samples while they arrive, and [`TrainSink`], the
//!   dataflow sink of a spec's `[train]` table; [`stream`] and [`pool`] are its threads and its
//!   pool of samples (spilled to disk as Arrow IPC beyond a memory budget);
//! - [`eval`]: greedy decoding under controls and the controllability metrics;
//! - [`compare`]: one report over several training variants;
//! - [`bench`]: training throughput on a fixed synthetic batch.
//!
//! The default build has none of this and does not need libtorch.

pub mod batch;
pub mod bench;
pub mod compare;
pub mod config;
pub mod data;
pub mod eval;
pub mod model;
pub mod optim;
pub mod pixels;
pub mod pool;
pub mod run;
pub mod sink;
pub mod source;
pub mod stream;
pub mod trainer;
pub mod vocab;

pub use config::{Precision, TrainConfig};
pub use data::{RegionContext, TrainingData};
pub use run::{train_samples, JobOptions, TrainOutcome};
pub use sink::{TrainSink, TrainingSink};
pub use trainer::{select_device, Trainer};
