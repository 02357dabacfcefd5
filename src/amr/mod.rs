//! AMR: PENMAN codec with surface alignments, Smatch, vgAMR grounding, meta-graph merging and
//! event sampling. Plain functions over [`Graph`], usable without any dataflow.

pub mod graph;
pub mod penman;

pub use graph::{Alignment, AlignmentFlavour, Graph, Triple};
