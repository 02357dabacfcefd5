//! Stage `quality-filter`: keeps the realized sentences that pass the quality score, the
//! hallucination list, noun grounding, full grounding and de-duplication
//! ([`crate::augment::ssa::judge`]).

use std::collections::HashSet;
use std::sync::Arc;

use super::{Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::{is_duplicate, judge, CaptionContext, Drop};

pub fn quality_filter<'scope>(
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
            if state.texts.is_empty() {
                return ((), StageCount::default());
            }
            let context = CaptionContext::new(&state.image.captions);
            let mut seen = HashSet::new();
            let mut dropped = std::collections::BTreeMap::new();
            for (i, (event, text)) in state.events.iter().zip(&state.texts).enumerate() {
                let verdict =
                    judge(text, event, &context, &ctx.config, &ctx.models).and_then(|scores| {
                        if is_duplicate(text, &context, &mut seen) {
                            Err(Drop::Duplicate)
                        } else {
                            Ok(scores)
                        }
                    });
                match verdict {
                    Ok(scores) => state.kept.push((i, scores)),
                    Err(reason) => *dropped.entry(reason).or_insert(0u64) += 1,
                }
            }
            state.dropped = dropped.into_iter().collect();
            let total = state.texts.len();
            let kept = state.kept.len();
            ((), StageCount::new(total, kept, total - kept))
        });
        staged
    })
}
