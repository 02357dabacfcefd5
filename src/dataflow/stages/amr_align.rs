//! Stage `amr-align`: caption AMRs → vgAMRs ([`crate::augment::ssa::align`]).

use std::sync::Arc;

use super::{Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::align;

pub fn amr_align<'scope>(
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
            let aligned = align(&state.image, ctx.models.lexicon);
            let count = StageCount::new(
                state.image.amrs.len(),
                aligned.vgamrs.len(),
                aligned.rejected.len(),
            );
            state.vgamrs = aligned.vgamrs;
            state.rejected.extend(aligned.rejected);
            ((), count)
        });
        staged
    })
}
