//! Stage `relatedness`: the image's captions scored against its visual context
//! ([`crate::augment::relatedness::RelatednessModel::samples`]); the model is fitted on the whole
//! run before the dataflow starts.

use std::sync::Arc;

use super::{per_image, Images, MethodContext, StageCount, StageMeter};
use crate::augment::relatedness::RelatednessModel;
use crate::error::Error;

pub fn relatedness<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<RelatednessModel>>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(
        images,
        ctx.failure.clone(),
        meter,
        move |image_id, state| {
            let rows_in = state.image.captions.len();
            match ctx.method.samples(&state.image, ctx.seed) {
                Ok(new) => {
                    let count = StageCount::new(rows_in, new.len(), 0);
                    state.samples.extend(new);
                    count
                }
                Err(e) => {
                    ctx.failure.set(Error::in_stage("relatedness", image_id, e));
                    StageCount::new(rows_in, 0, 0)
                }
            }
        },
    )
}
