//! Stage `cutswap`: attribute and object text swaps of the image's captions
//! ([`crate::augment::cutswap::Model::samples`]); the model is fitted on the whole run before
//! the dataflow starts.

use std::sync::Arc;

use super::{Images, MethodContext, StageCount, StageMeter};
use crate::augment::cutswap::Model;

pub fn cutswap<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<Model>>,
    meter: StageMeter,
) -> Images<'scope> {
    images.map(move |mut staged| {
        if ctx.failure.is_set() {
            return staged;
        }
        meter.measure(|| {
            let state = &mut staged.value;
            let new = ctx.method.samples(&state.image, ctx.seed);
            let count = StageCount::new(state.image.captions.len(), new.len(), 0);
            state.samples.extend(new);
            ((), count)
        });
        staged
    })
}
