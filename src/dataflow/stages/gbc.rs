//! Stage `gbc`: the captions of the image's GBC graphs as controlled samples
//! ([`crate::augment::gbc::samples`]).

use std::sync::Arc;

use super::{per_image, Images, MethodContext, StageCount, StageMeter};
use crate::augment::gbc::{samples, GbcSampleConfig};

pub fn gbc<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<GbcSampleConfig>>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(images, ctx.failure.clone(), meter, move |_, state| {
        let new = samples(&state.image, &ctx.method, ctx.seed);
        let count = StageCount::new(state.image.gbc_graphs.len(), new.len(), 0);
        state.samples.extend(new);
        count
    })
}
