//! Stage `realize`: one sentence per event subgraph, all of an image's subgraphs in one batch
//! ([`crate::augment::ssa::EventRealizer`]: built-in realizer or external AMR-to-text model).

use std::sync::Arc;

use super::{per_image, Images, StageContext, StageCount, StageMeter};
use crate::amr::Graph;
use crate::error::Error;

pub fn realize<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(
        images,
        ctx.failure.clone(),
        meter,
        move |image_id, state| {
            if state.events.is_empty() {
                return StageCount::default();
            }
            let graphs: Vec<&Graph> = state.events.iter().map(|e| &e.graph).collect();
            match ctx.models.realizer.realize_batch(image_id, &graphs) {
                Ok(texts) => state.texts = texts,
                Err(e) => ctx.failure.set(Error::in_stage("realize", image_id, e)),
            }
            StageCount::new(graphs.len(), state.texts.len(), 0)
        },
    )
}
