//! Stage `quality-filter`: keeps the realized sentences that pass the quality score, the
//! hallucination list, noun grounding, full grounding, having a control box and de-duplication
//! ([`crate::augment::ssa::filter_sentences`]).

use std::sync::Arc;

use super::{per_image, Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::filter_sentences;

pub fn quality_filter<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(images, ctx.failure.clone(), meter, move |_, state| {
        if state.texts.is_empty() {
            return StageCount::default();
        }
        let filtered = filter_sentences(
            &state.image,
            &state.events,
            &state.texts,
            &ctx.config,
            &ctx.models,
        );
        state.kept = filtered.kept;
        state.dropped.extend(filtered.dropped);
        let total = state.texts.len();
        let kept = state.kept.len();
        StageCount::new(total, kept, total - kept)
    })
}
