//! Stage `cutswap`: attribute and object text swaps of the image's captions
//! ([`crate::augment::cutswap::Model::samples`]); the model is fitted on the whole run before
//! the dataflow starts.

use std::sync::Arc;

use super::{per_image, Images, MethodContext, StageCount, StageMeter};
use crate::augment::cutswap::Model;

pub fn cutswap<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<Model>>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(images, ctx.failure.clone(), meter, move |_, state| {
        let new = ctx.method.samples(&state.image, ctx.seed);
        let count = StageCount::new(state.image.captions.len(), new.len(), 0);
        state.samples.extend(new);
        count
    })
}
