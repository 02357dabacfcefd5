//! The augmentation stages as dataflow operators. Each file wires one stage; the work is a plain
//! function in [`crate::augment`] (SSA's in [`crate::augment::ssa`]).
//!
//! Per-image state ([`SsaImage`]) moves through the stages in a differential collection keyed by
//! image: `gather` builds it from the image's records, every later stage fills in its part; the
//! method stages (`originals`, SSA's `control-signals`, `clid`, `gbc`, `relatedness`, `cutswap`,
//! then registered methods) append their samples in that order. Every single-stage method is wired
//! by [`method`] through [`crate::augment::method::Method`]; SSA has a file per stage.
//! Every stage reports rows in / rows out / rejected / time to its [`StageMeter`].

pub mod amr_align;
pub mod control_signals;
pub mod event_sample;
pub mod gather;
pub mod merge;
pub mod method;
pub mod quality_filter;
pub mod realize;
pub mod text_to_amr;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use differential_dataflow::{AsCollection, VecCollection};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::Operator;

use super::record::Staged;
use crate::amr::align::VgAmr;
use crate::amr::merge::{MergeLog, MetaGraph};
use crate::amr::sample::EventSubgraph;
use crate::augment::ssa::{Drop, SsaConfig, SsaKept, SsaModels};
use crate::augment::ImageAnnotations;
use crate::error::{Error, Result};
use crate::export::StageMetrics;
use crate::schema::{QualityScore, RejectedRow, SampleRow};

/// One image's state: its annotations, SSA's intermediate results, and the samples of every
/// method so far.
#[derive(Clone, Debug, Default)]
pub struct SsaImage {
    pub image: Arc<ImageAnnotations>,
    pub vgamrs: Vec<VgAmr>,
    pub meta: Option<Arc<MetaGraph>>,
    /// With [`StageContext::records`]: the merge's log of its similarity decisions.
    pub log: Option<MergeLog>,
    pub events: Vec<EventSubgraph>,
    pub texts: Vec<String>,
    /// Events that passed the quality filter, with their scores.
    pub kept: Vec<(usize, Vec<QualityScore>)>,
    /// How many sentences the quality filter dropped, by reason, and how many AMRs `amr-align`
    /// token-aligned ([`Drop::TokenAligned`]).
    pub dropped: Vec<(Drop, u64)>,
    pub samples: Vec<SampleRow>,
    pub rejected: Vec<RejectedRow>,
    /// With [`StageContext::records`]: what a refit needs of the image's SSA, made by
    /// `quality-filter`.
    pub record: Option<SsaKept>,
}

/// The per-image collection the stages pass along.
pub type Images<'scope> = VecCollection<'scope, u64, Staged<SsaImage>, isize>;

/// What every stage of one worker shares: configuration, models, meters, the run's failure slot.
pub struct StageContext {
    pub seed: u64,
    pub config: SsaConfig,
    pub models: SsaModels,
    pub failure: Failure,
    /// Whether the stages keep each image's [`SsaKept`] for the state (a run with `--state`
    /// and the built-in quality scorer): `merge` logs its decisions, `quality-filter` makes it.
    pub records: bool,
}

/// What a non-SSA method stage shares: the seed, the method's configuration or fitted model, the
/// run's failure slot.
pub struct MethodContext<M> {
    pub seed: u64,
    pub method: M,
    pub failure: Failure,
}

/// The first error of a run. A stage that fails records it and passes its image on untouched;
/// the run then ends with the error, typed as it was raised (an adapter's failure keeps its exit
/// code), and commits nothing.
#[derive(Clone, Default)]
pub struct Failure(Arc<Mutex<Option<Error>>>);

impl Failure {
    pub fn set(&self, error: Error) {
        if let Ok(mut slot) = self.0.lock() {
            slot.get_or_insert(error);
        }
    }

    pub fn is_set(&self) -> bool {
        self.0.lock().map(|s| s.is_some()).unwrap_or(true)
    }

    pub fn take(&self) -> Option<Error> {
        self.0.lock().ok().and_then(|mut s| s.take())
    }
}

/// Wires one per-image stage: `work` fills in its part of the image's state and says what it
/// did. After a failure anywhere in the run, images pass through untouched.
pub fn per_image<'scope>(
    images: Images<'scope>,
    failure: Failure,
    meter: StageMeter,
    mut work: impl FnMut(&str, &mut SsaImage) -> StageCount + 'static,
) -> Images<'scope> {
    images.map(move |mut staged| {
        if !failure.is_set() {
            meter.measure(|| ((), work(&staged.image_id, &mut staged.value)));
        }
        staged
    })
}

/// Wires a stage that works on the images of a batch together (the images of one timely
/// message, as they arrive), for work that costs less in batches, such as a request to an
/// external model. An error fails the run; after a failure anywhere in the run, images pass
/// through untouched.
pub fn per_batch<'scope>(
    images: Images<'scope>,
    failure: Failure,
    meter: StageMeter,
    name: &'static str,
    mut work: impl FnMut(&mut [&mut Staged<SsaImage>]) -> Result<StageCount> + 'static,
) -> Images<'scope> {
    images
        .inner
        .unary::<CapacityContainerBuilder<Vec<(Staged<SsaImage>, u64, isize)>>, _, _, _>(
            Pipeline,
            name,
            move |_, _| {
                move |input, output| {
                    input.for_each(|time, data| {
                        if !failure.is_set() {
                            let mut batch: Vec<&mut Staged<SsaImage>> = data
                                .iter_mut()
                                .filter(|(_, _, diff)| *diff > 0)
                                .map(|(staged, _, _)| staged)
                                .collect();
                            if !batch.is_empty() {
                                let result = meter.measure(|| match work(&mut batch) {
                                    Ok(count) => (Ok(()), count),
                                    Err(e) => (Err(e), StageCount::default()),
                                });
                                if let Err(e) = result {
                                    failure.set(e.context(format!("stage `{name}`")));
                                }
                            }
                        }
                        output.session(&time).give_iterator(data.drain(..));
                    });
                }
            },
        )
        .as_collection()
}

/// Rows in / out / rejected and busy time of one stage on one worker.
#[derive(Clone, Debug, Default)]
pub struct StageMeter(Rc<RefCell<(StageMetrics, Duration)>>);

impl StageMeter {
    pub fn new(name: &str) -> Self {
        let metrics = StageMetrics {
            name: name.to_string(),
            ..Default::default()
        };
        StageMeter(Rc::new(RefCell::new((metrics, Duration::ZERO))))
    }

    /// Runs `work` on one image and records its counts and time.
    pub fn measure<T>(&self, work: impl FnOnce() -> (T, StageCount)) -> T {
        let started = Instant::now();
        let (value, count) = work();
        let mut state = self.0.borrow_mut();
        state.0.rows_in += count.rows_in;
        state.0.rows_out += count.rows_out;
        state.0.rejected += count.rejected;
        state.1 += started.elapsed();
        value
    }

    /// The stage's totals on this worker.
    pub fn snapshot(&self) -> StageMetrics {
        let state = self.0.borrow();
        StageMetrics {
            elapsed_ms: state.1.as_millis() as u64,
            ..state.0.clone()
        }
    }
}

/// What one stage did with one image.
#[derive(Clone, Copy, Debug, Default)]
pub struct StageCount {
    pub rows_in: u64,
    pub rows_out: u64,
    pub rejected: u64,
}

impl StageCount {
    pub fn new(rows_in: usize, rows_out: usize, rejected: usize) -> Self {
        StageCount {
            rows_in: rows_in as u64,
            rows_out: rows_out as u64,
            rejected: rejected as u64,
        }
    }
}
