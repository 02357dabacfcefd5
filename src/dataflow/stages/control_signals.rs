//! Stage `control-signals`: the sample rows of kept sentences (boxes, coverage, length level,
//! word count, verbs) ([`crate::augment::ssa::ssa_sample`]), after the image's samples so far
//! (the `originals` stage writes the original captions).

use std::sync::Arc;

use super::{per_image, Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::ssa_sample;

pub fn control_signals<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(images, ctx.failure.clone(), meter, move |_, state| {
        let kept = std::mem::take(&mut state.kept);
        let mut texts = std::mem::take(&mut state.texts);
        let rows_in = kept.len();
        let before = state.samples.len();
        if let Some(meta) = &state.meta {
            for (index, scores) in kept {
                let text = std::mem::take(&mut texts[index]);
                let event = &state.events[index];
                state.samples.push(ssa_sample(
                    &state.image,
                    meta,
                    index,
                    event,
                    text,
                    scores,
                    ctx.seed,
                ));
            }
        }
        state.events.clear();
        state.meta = None;
        StageCount::new(rows_in, state.samples.len() - before, 0)
    })
}
