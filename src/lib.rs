//! capflow: a streaming dataflow engine for multimodal caption-dataset augmentation.
//!
//! Captions, groundings, detections, AMR graphs, scene graphs and GBC graphs are read into Arrow
//! tables ([`schema`], [`ingest`]), flow through timely/differential dataflows ([`dataflow`]) that
//! run the augmentation methods ([`augment`], [`amr`]), and leave as Parquet datasets
//! ([`export`]).

pub mod amr;
pub mod augment;
pub mod cli;
pub mod cluster;
pub mod dataflow;
pub mod error;
pub mod export;
pub mod graph;
pub mod ingest;
pub mod metrics;
pub mod models;
pub(crate) mod parallel;
pub mod registry;
pub mod report;
pub mod schema;
pub mod seed;
pub mod select;
pub mod synth;
pub mod text;
#[cfg(feature = "train")]
pub mod train;

pub use error::{Error, Result};

/// The engine version written into every manifest and Parquet file.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");
