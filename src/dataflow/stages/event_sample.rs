//! Stage `event-sample`: the meta graph's event subgraphs ([`crate::augment::ssa::sample`]).

use std::sync::Arc;

use super::{Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::sample;

pub fn event_sample<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    images.map(move |mut staged| {
        if ctx.failure.is_set() {
            return staged;
        }
        meter.measure(|| {
            let state = &mut staged.value;
            let Some(meta) = &state.meta else {
                return ((), StageCount::default());
            };
            state.events = sample(meta, &staged.image_id, ctx.seed, &ctx.config, &ctx.models);
            ((), StageCount::new(1, state.events.len(), 0))
        });
        staged
    })
}
