//! Stage `amr-align`: caption AMRs → vgAMRs ([`crate::augment::ssa::align`]). The AMRs it
//! token-aligned with the built-in aligner are counted in the image's SSA counts
//! ([`Drop::TokenAligned`]).

use std::sync::Arc;

use super::{per_image, Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::{align, Drop};

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
        if aligned.token_aligned > 0 {
            state
                .dropped
                .push((Drop::TokenAligned, aligned.token_aligned as u64));
        }
        count
    })
}
