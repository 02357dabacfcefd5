//! Pipeline specs (`dataflows/*.toml`) and the timely dataflows that run them.
//!
//! A run reads its inputs on the workers (each input path is read whole by one worker, chosen
//! round-robin), exchanges every record by the bucket of its image key (a stable hash) so that
//! everything about one image meets on one worker, runs the spec's stages there, and hands the
//! results to the export ([`buckets`]): one shard per bucket chunk, rows by image id, each
//! image's rows in read order. Output never depends on the number of workers or processes. With
//! `--state` ([`state`]), a single process reads its inputs piece by piece ([`inputs`]) and only
//! new, changed and removed images go through the stages; [`cluster`] holds the multi-process
//! plumbing.

pub mod augment;
pub mod buckets;
pub mod cluster;
pub mod inputs;
pub mod key;
pub mod record;
pub mod runtime;
pub mod spec;
pub mod ssa;
pub mod stages;
pub mod state;

pub use cluster::ClusterOptions;
pub use runtime::{run_collect, run_collect_sharing, CollectedRun, KeyedRow, StageMetrics};
pub use spec::{DataflowSpec, InputSpec};
