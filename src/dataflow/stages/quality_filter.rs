//! Stage `quality-filter`: keeps the realized sentences that pass the quality score, the
//! hallucination list, noun grounding, full grounding, having a control box and de-duplication
//! ([`crate::augment::ssa::filter_sentences`]). With an external quality scorer
//! (`[models.quality_scorer]`), the stage takes the images of a batch together and sends the
//! sentences that pass the other checks first ([`to_score`]) to the scorer in one request.

use std::collections::HashMap;
use std::sync::Arc;

use super::{per_batch, per_image, Images, SsaImage, StageContext, StageCount, StageMeter};
use crate::augment::ssa::{
    filter_scored, filter_sentences, record, to_score, ExternalQuality, Filtered, SsaKept,
};
use crate::error::{Error, Result};
use crate::models::one_per_request;
use crate::schema::QualityScore;

pub fn quality_filter<'scope>(
    images: Images<'scope>,
    ctx: Arc<StageContext>,
    meter: StageMeter,
) -> Images<'scope> {
    let failure = ctx.failure.clone();
    match ctx.models.external_quality.clone() {
        None => per_image(images, failure, meter, move |_, state| {
            if ctx.records {
                state.record = Some(keep_record(state, &ctx));
            }
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
            keep(state, filtered)
        }),
        Some(scorer) => per_batch(images, failure, meter, "quality-filter", move |batch| {
            let asked: Vec<Vec<usize>> = batch
                .iter()
                .map(|s| {
                    let state = &s.value;
                    to_score(
                        &state.image,
                        &state.events,
                        &state.texts,
                        &ctx.config,
                        &ctx.models,
                    )
                })
                .collect();
            let sentences: Vec<String> = batch
                .iter()
                .zip(&asked)
                .flat_map(|(s, indices)| indices.iter().map(|&i| s.value.texts[i].clone()))
                .collect();
            let mut scores = score(&scorer, &sentences, batch.len())?.into_iter();
            let mut count = StageCount::default();
            for (staged, indices) in batch.iter_mut().zip(&asked) {
                let state = &mut staged.value;
                if state.texts.is_empty() {
                    continue;
                }
                let by_index: HashMap<usize, f64> = indices
                    .iter()
                    .map(|&i| (i, scores.next().unwrap_or(0.0)))
                    .collect();
                let filtered = filter_scored(
                    &state.image,
                    &state.events,
                    &state.texts,
                    &ctx.config,
                    &ctx.models,
                    &mut |index, _| QualityScore {
                        name: scorer.name.clone(),
                        value: by_index.get(&index).copied().unwrap_or(0.0),
                    },
                );
                let image = keep(state, filtered);
                count.rows_in += image.rows_in;
                count.rows_out += image.rows_out;
                count.rejected += image.rejected;
            }
            Ok(count)
        }),
    }
}

/// What a refit needs of the image ([`SsaKept`]), made before the filter counts its drops.
fn keep_record(state: &mut SsaImage, ctx: &StageContext) -> SsaKept {
    match (&state.meta, state.log.take()) {
        (Some(meta), Some(log)) => SsaKept::Record(Box::new(record(
            &state.image,
            meta,
            log,
            &state.events,
            &state.texts,
            &state.dropped,
            &ctx.config,
            &ctx.models,
            ctx.seed,
        ))),
        _ => SsaKept::unmerged(&ctx.config, &state.dropped),
    }
}

/// Keeps the filtered sentences in the image's state; what the stage did with the image.
fn keep(state: &mut SsaImage, filtered: Filtered) -> StageCount {
    state.kept = filtered.kept;
    state.dropped.extend(filtered.dropped);
    let total = state.texts.len();
    let kept = state.kept.len();
    StageCount::new(total, kept, total - kept)
}

/// The external scorer's scores of `sentences` (the sentences of `images` images), each in
/// [0, 1].
fn score(scorer: &ExternalQuality, sentences: &[String], images: usize) -> Result<Vec<f64>> {
    if sentences.is_empty() {
        return Ok(Vec::new());
    }
    let what = format!("the {} sentences of {images} images", sentences.len());
    let scores = scorer
        .model
        .score_sentences(sentences)
        .map_err(|e| e.on_batch(&scorer.name, &what))?;
    let scores = one_per_request(&scorer.name, &what, sentences.len(), scores, "scores")?;
    if let Some(bad) = scores.iter().find(|s| !(0.0..=1.0).contains(*s)) {
        return Err(Error::Adapter {
            adapter: scorer.name.clone(),
            batch: what,
            reason: format!("returned the score {bad}, outside [0, 1]"),
        });
    }
    Ok(scores)
}
