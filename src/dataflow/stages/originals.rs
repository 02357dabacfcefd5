//! Stage `originals`: the image's original captions as `original` samples
//! ([`crate::augment::ssa::original_samples`]), first in the image's samples.

use std::sync::Arc;

use super::{per_image, Images, MethodContext, StageCount, StageMeter};
use crate::augment::ssa::original_samples;

pub fn originals<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<()>>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(images, ctx.failure.clone(), meter, move |_, state| {
        let samples = original_samples(&state.image, ctx.seed);
        let count = StageCount::new(state.image.captions.len(), samples.len(), 0);
        state.samples.extend(samples);
        count
    })
}
