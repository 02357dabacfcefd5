//! Stage `amr-align`: caption AMRs → vgAMRs ([`crate::augment::ssa::align`]).

use std::sync::Arc;

use super::{per_image, Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::align;

pub fn amr_align<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(images, ctx.failure.clone(), meter, move |_, state| {
        let aligned = align(&state.image, ctx.models.lexicon);
        let count = StageCount::new(
            state.image.amrs.len(),
            aligned.vgamrs.len(),
            aligned.rejected.len(),
        );
        state.vgamrs = aligned.vgamrs;
        state.rejected.extend(aligned.rejected);
        count
    })
}
