//! Pipeline specs (`dataflows/*.toml`) and the timely dataflows that run them.
//!
//! [`run`] is the entry point: `capflow run`, `capflow watch` and programs embedding capflow
//! call it with a spec and [`RunOptions`]. A run reads its inputs on the workers (each input
//! path is read whole by one worker, chosen round-robin) and exchanges every record by the
//! bucket of its image key (a stable hash), so that everything about one image meets on one
//! worker. The streaming engine ([`engine`]) spills each bucket's rows to local disk as Arrow
//! IPC ([`spill`]), fits the corpus-level models once ([`models`]), runs the spec's stages part
//! by part, in parts its memory budget sets ([`budget`]), and writes each part's bucket chunks
//! as it finishes: one shard per bucket chunk, rows by image id, each image's rows in read
//! order. Output never depends on the number of workers or processes. With `--state` ([`state`]), only new, changed and removed images go through the
//! stages, and models fitted on the inputs are kept in the state for later runs ([`artifact`]).
//! A single process with a state whose models do not learn from its inputs reads them piece by
//! piece ([`inputs`]) and collects their rows first ([`runtime`], [`augment`], [`buckets`]);
//! [`mixing`] holds each chunk's samples until a `[mix]` other than `all` has chosen among all
//! of them; [`cluster`] holds the multi-process plumbing.

pub mod artifact;
pub mod augment;
pub mod buckets;
pub mod budget;
pub mod cluster;
pub mod engine;
pub mod exchange;
pub mod inputs;
pub mod key;
pub mod mixing;
pub mod models;
pub mod record;
pub mod refit;
mod resampled;
pub mod run;
pub mod runtime;
pub mod sink;
pub mod spec;
pub mod spill;
pub mod ssa;
pub mod stages;
pub mod state;

pub use cluster::ClusterOptions;
pub use run::{run, RunOptions, RunOutcome};
pub use runtime::{run_collect, run_collect_sharing, CollectedRun, KeyedRow, StageMetrics};
pub use spec::{DataflowSpec, InputSpec};
