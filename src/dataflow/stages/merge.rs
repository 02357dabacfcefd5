//! Stage `merge`: Smatch + UPGMA merge order + merge rules → the image's meta graph
//! ([`crate::augment::ssa::merge`]).

use std::sync::Arc;

use super::{per_image, Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::{merge as merge_graphs, merge_logged};
use crate::error::Error;

pub fn merge<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    per_image(
        images,
        ctx.failure.clone(),
        meter,
        move |image_id, state| {
            let vgamrs = std::mem::take(&mut state.vgamrs);
            let merged = match ctx.records {
                true => merge_logged(&vgamrs, &ctx.config, &ctx.models).map(|merged| {
                    merged.map(|(meta, log)| {
                        state.log = Some(log);
                        meta
                    })
                }),
                false => merge_graphs(&vgamrs, &ctx.config, &ctx.models),
            };
            match merged {
                Ok(meta) => {
                    let out = usize::from(meta.is_some());
                    state.meta = meta.map(Arc::new);
                    StageCount::new(vgamrs.len(), out, 0)
                }
                Err(e) => {
                    ctx.failure.set(Error::in_stage("merge", image_id, e));
                    StageCount::new(vgamrs.len(), 0, 0)
                }
            }
        },
    )
}
