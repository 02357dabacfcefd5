//! Stage `realize`: one sentence per event subgraph, all of an image's subgraphs in one batch
//! ([`crate::augment::ssa::EventRealizer`]: built-in realizer or external AMR-to-text model).

use std::sync::Arc;

use super::{Images, StageContext, StageCount, StageMeter};
use crate::amr::Graph;

pub fn realize<'scope>(
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
            if state.events.is_empty() {
                return ((), StageCount::default());
            }
            let graphs: Vec<&Graph> = state.events.iter().map(|e| &e.graph).collect();
            match ctx.models.realizer.realize_batch(&staged.image_id, &graphs) {
                Ok(texts) => state.texts = texts,
                Err(e) => ctx.failure.set(format!("realize: {e}")),
            }
            ((), StageCount::new(graphs.len(), state.texts.len(), 0))
        });
        staged
    })
}
