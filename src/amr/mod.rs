//! AMR: PENMAN codec with surface alignments, rule-based token alignment, Smatch, vgAMR grounding, meta-graph merging and
//! event sampling. Plain functions over [`Graph`], usable without any dataflow.

pub mod align;
pub mod dot;
pub mod graph;
pub mod merge;
pub mod parse;
pub mod penman;
pub mod realize;
pub mod sample;
pub mod smatch;
pub mod token_align;

pub use graph::{Alignment, AlignmentFlavour, Graph, Triple};
