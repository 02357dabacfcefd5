//! Stage `merge`: Smatch + UPGMA merge order + merge rules → the image's meta graph
//! ([`crate::augment::ssa::merge`]).

use std::sync::Arc;

use super::{Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::merge as merge_graphs;

pub fn merge<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    images.map(move |mut staged| {
        if ctx.failure.is_set() {
            return staged;
        }
        meter.measure(|| {
            let state = &mut staged.value;
            let vgamrs = std::mem::take(&mut state.vgamrs);
            let count = match merge_graphs(&vgamrs, &ctx.config, &ctx.models) {
                Ok(meta) => {
                    let out = usize::from(meta.is_some());
                    state.meta = meta.map(Arc::new);
                    StageCount::new(vgamrs.len(), out, 0)
                }
                Err(e) => {
                    ctx.failure
                        .set(format!("merge, image {}: {e}", staged.image_id));
                    StageCount::new(vgamrs.len(), 0, 0)
                }
            };
            ((), count)
        });
        staged
    })
}
