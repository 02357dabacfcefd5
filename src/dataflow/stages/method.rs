//! The stage of a single-stage method ([`crate::augment::method::Method`]: the original captions,
//! CLID, GBC, relatedness, CutSwap, and registered methods): its samples for one image, appended
//! to the image's samples.

use std::sync::Arc;

use super::{per_image, Images, MethodContext, StageCount, StageMeter};
use crate::augment::method::Method;
use crate::error::Error;

pub fn method<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<Arc<dyn Method>>>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(
        images,
        ctx.failure.clone(),
        meter,
        move |image_id, state| {
            let rows_in = ctx.method.rows_in(&state.image);
            match ctx.method.samples_and_rejected(&state.image, ctx.seed) {
                Ok((new, rejected)) => {
                    let count = StageCount::new(rows_in, new.len(), rejected.len());
                    state.samples.extend(new);
                    state.rejected.extend(rejected);
                    count
                }
                Err(e) => {
                    ctx.failure
                        .set(Error::in_stage(ctx.method.stage(), image_id, e));
                    StageCount::new(rows_in, 0, 0)
                }
            }
        },
    )
}
