//! Stage `relatedness`: the image's captions scored against its visual context
//! ([`crate::augment::relatedness::RelatednessModel::samples`]); the model is fitted on the whole
//! run before the dataflow starts.

use std::sync::Arc;

use super::{Images, MethodContext, StageCount, StageMeter};
use crate::augment::relatedness::RelatednessModel;

pub fn relatedness<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<RelatednessModel>>,
    meter: StageMeter,
) -> Images<'scope> {
    images.map(move |mut staged| {
        if ctx.failure.is_set() {
            return staged;
        }
        meter.measure(|| {
            let state = &mut staged.value;
            let rows_in = state.image.captions.len();
            match ctx.method.samples(&state.image, ctx.seed) {
                Ok(new) => {
                    let count = StageCount::new(rows_in, new.len(), 0);
                    state.samples.extend(new);
                    ((), count)
                }
                Err(e) => {
                    ctx.failure
                        .set(format!("relatedness: image {}: {e}", staged.image_id));
                    ((), StageCount::new(rows_in, 0, 0))
                }
            }
        });
        staged
    })
}
