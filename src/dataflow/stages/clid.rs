//! Stage `clid`: varying-length captions from the image's scene graphs
//! ([`crate::augment::clid::samples`]).

use std::sync::Arc;

use super::{Images, MethodContext, StageCount, StageMeter};
use crate::augment::clid::{samples, ClidConfig};

pub fn clid<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<ClidConfig>>,
    meter: StageMeter,
) -> Images<'scope> {
    images.map(move |mut staged| {
        if ctx.failure.is_set() {
            return staged;
        }
        meter.measure(|| {
            let state = &mut staged.value;
            let new = samples(&state.image, &ctx.method, ctx.seed);
            let count = StageCount::new(state.image.scene_graphs.len(), new.len(), 0);
            state.samples.extend(new);
            ((), count)
        });
        staged
    })
}
