//! Stage `clid`: varying-length captions from the image's scene graphs
//! ([`crate::augment::clid::samples`]).

use std::sync::Arc;

use super::{per_image, Images, MethodContext, StageCount, StageMeter};
use crate::augment::clid::{samples, ClidConfig};

pub fn clid<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<ClidConfig>>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(images, ctx.failure.clone(), meter, move |_, state| {
        let new = samples(&state.image, &ctx.method, ctx.seed);
        let count = StageCount::new(state.image.scene_graphs.len(), new.len(), 0);
        state.samples.extend(new);
        count
    })
}
