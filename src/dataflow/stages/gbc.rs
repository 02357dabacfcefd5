//! Stage `gbc`: the captions of the image's GBC graphs as controlled samples
//! ([`crate::augment::gbc::samples`]).

use std::sync::Arc;

use super::{Images, MethodContext, StageCount, StageMeter};
use crate::augment::gbc::{samples, GbcSampleConfig};

pub fn gbc<'scope>(
    images: Images<'scope>,
    ctx: Arc<MethodContext<GbcSampleConfig>>,
    meter: StageMeter,
) -> Images<'scope> {
    images.map(move |mut staged| {
        if ctx.failure.is_set() {
            return staged;
        }
        meter.measure(|| {
            let state = &mut staged.value;
            let new = samples(&state.image, &ctx.method, ctx.seed);
            let count = StageCount::new(state.image.gbc_graphs.len(), new.len(), 0);
            state.samples.extend(new);
            ((), count)
        });
        staged
    })
}
