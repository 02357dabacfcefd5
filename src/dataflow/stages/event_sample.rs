//! Stage `event-sample`: the meta graph's event subgraphs ([`crate::augment::ssa::sample`]).

use std::sync::Arc;

use super::{per_image, Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::sample;

pub fn event_sample<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(
        images,
        ctx.failure.clone(),
        meter,
        move |image_id, state| {
            let Some(meta) = &state.meta else {
                return StageCount::default();
            };
            state.events = sample(meta, image_id, ctx.seed, &ctx.config, &ctx.models);
            StageCount::new(1, state.events.len(), 0)
        },
    )
}
