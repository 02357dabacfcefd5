//! Stage `text-to-amr`: the captions of each image that `[ssa] parse_captions` selects
//! ([`captions_to_parse`]) parsed into AMR graphs, which become the image's AMRs for
//! `amr-align` ([`add_parsed`]). The stage takes the images of a batch together, so an external
//! model gets the captions of many images per request (up to its `max_batch_size`); the
//! built-in parser parses them one by one. A caption that gets no graph is rejected; an image
//! whose captions have no AMR when none may be parsed is rejected ([`no_amr`]).

use std::sync::Arc;

use super::{per_batch, Images, StageContext, StageCount, StageMeter};
use crate::augment::ssa::{add_parsed, captions_to_parse, no_amr, ParseCaptions};
use crate::error::Error;
use crate::schema::CaptionRow;

pub fn text_to_amr<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    let failure = ctx.failure.clone();
    per_batch(images, failure, meter, "text-to-amr", move |batch| {
        let mode = ctx.config.parse_captions;
        if mode == ParseCaptions::Never {
            for state in batch.iter_mut() {
                if let Some(row) = no_amr(&state.value.image) {
                    state.value.rejected.push(row);
                }
            }
            return Ok(StageCount::default());
        }
        // The selected captions of every image of the batch, parsed in one call.
        let selected: Vec<Vec<CaptionRow>> = batch
            .iter()
            .map(|state| {
                captions_to_parse(&state.value.image, mode)
                    .into_iter()
                    .cloned()
                    .collect()
            })
            .collect();
        let texts: Vec<&str> = selected.iter().flatten().map(|c| c.text.as_str()).collect();
        if texts.is_empty() {
            return Ok(StageCount::default());
        }
        let what = || {
            let first = batch.first().map_or("", |s| s.image_id.as_str());
            let last = batch.last().map_or("", |s| s.image_id.as_str());
            format!(
                "the {} captions of the {} images {first} to {last}",
                texts.len(),
                batch.len()
            )
        };
        let mut parsed = ctx.models.parser.parse(&texts, &what)?.into_iter();
        let mut count = StageCount::new(texts.len(), 0, 0);
        for (state, captions) in batch.iter_mut().zip(&selected) {
            if captions.is_empty() {
                continue;
            }
            let image_parsed: Vec<_> = parsed.by_ref().take(captions.len()).collect();
            let image = Arc::make_mut(&mut state.value.image);
            let before = state.value.rejected.len();
            let added = add_parsed(
                image,
                mode,
                captions,
                image_parsed,
                &mut state.value.rejected,
            );
            count.rows_out += added as u64;
            count.rejected += (state.value.rejected.len() - before) as u64;
        }
        Ok::<_, Error>(count)
    })
}
