//! A recorded SSA image ([`SsaRecord`]) replayed with refitted corpus-level models gives what
//! computing the image from its inputs with those models gives, whenever the merge's log holds
//! under the new word vectors; otherwise the replay refuses.
//!
//! On the embedded sample data: models fitted on the captions of 15 of the 20 images (A) and
//! on all of them (B). Both sides of every comparison run the SSA stages' own functions; the
//! replay shares only the last checks of the quality filter with them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use capflow::amr::align::ModifierLexicon;
use capflow::amr::Graph;
use capflow::augment::ssa::{
    align, builtin_realizer, filter_sentences, merge_logged, record, replay, sample, ssa_sample,
    Drop, SsaConfig, SsaModels, SsaRecord,
};
use capflow::augment::ImageAnnotations;
use capflow::dataflow::spec::ModelsSpec;
use capflow::dataflow::ssa::{fit_models, models_of_fitted, ssa_stats_of_rows};
use capflow::dataflow::{run_collect, ClusterOptions, DataflowSpec, KeyedRow};
use capflow::schema::SampleRow;

/// What computing one image from its inputs gives: its SSA samples and drops, and its record.
struct Computed {
    samples: Vec<SampleRow>,
    dropped: BTreeMap<Drop, u64>,
    record: SsaRecord,
}

fn models(config: &SsaConfig, rows: &[Arc<KeyedRow>]) -> SsaModels {
    let fitted = fit_models(config, ssa_stats_of_rows(config, rows)).expect("the models fit");
    models_of_fitted(config, fitted, &ModelsSpec::default(), builtin_realizer())
        .expect("the models assemble")
}

fn compute(
    image: &ImageAnnotations,
    config: &SsaConfig,
    models: &SsaModels,
    seed: u64,
) -> Option<Computed> {
    let aligned = align(image, ModifierLexicon::wordnet());
    let (meta, log) = merge_logged(&aligned.vgamrs, config, models).expect("the merge runs")?;
    let events = sample(&meta, &image.image_id, seed, config, models);
    let graphs: Vec<&Graph> = events.iter().map(|e| &e.graph).collect();
    let texts = models
        .realizer
        .realize_batch(&image.image_id, &graphs)
        .expect("the built-in realizer realizes");
    let filtered = filter_sentences(image, &events, &texts, config, models);
    let samples = (filtered.kept.iter())
        .map(|(i, quality)| {
            let text = texts[*i].clone();
            ssa_sample(image, &meta, *i, &events[*i], text, quality.clone(), seed)
        })
        .collect();
    let earlier: Vec<(Drop, u64)> = match aligned.token_aligned {
        0 => Vec::new(),
        n => vec![(Drop::TokenAligned, n as u64)],
    };
    let mut dropped: BTreeMap<Drop, u64> = BTreeMap::new();
    for (reason, n) in earlier.iter().chain(&filtered.dropped) {
        *dropped.entry(*reason).or_insert(0) += n;
    }
    let record = record(
        image, &meta, log, &events, &texts, &earlier, config, models, seed,
    );
    Some(Computed {
        samples,
        dropped,
        record,
    })
}

fn replayed(
    record: &SsaRecord,
    config: &SsaConfig,
    models: &SsaModels,
) -> Option<(Vec<SampleRow>, BTreeMap<Drop, u64>)> {
    let out = replay(record, config, models)?;
    Some((out.samples, out.dropped.into_iter().collect()))
}

#[test]
fn a_replayed_image_is_the_image_computed_with_the_new_models_when_its_merge_log_holds() {
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("dataflows/ssa-flickr30k.toml");
    let spec = DataflowSpec::from_file(&recipe).expect("the shipped recipe parses");
    let config = spec.ssa.clone().expect("the recipe configures ssa");
    let collected = run_collect(&spec, &ClusterOptions::default()).expect("the inputs read");
    let mut images: BTreeMap<String, Vec<Arc<KeyedRow>>> = BTreeMap::new();
    for row in &collected.rows {
        let id = row.row.image_id().to_string();
        images.entry(id).or_default().push(Arc::clone(row));
    }
    assert_eq!(images.len(), 20);
    let fewer: Vec<&str> = images.keys().take(15).map(String::as_str).collect();
    let some_rows: Vec<Arc<KeyedRow>> = (collected.rows.iter())
        .filter(|r| fewer.contains(&r.row.image_id()))
        .cloned()
        .collect();
    let (a, b) = (
        models(&config, &some_rows),
        models(&config, &collected.rows),
    );
    let seed = spec.seed;
    let (mut held, mut rescored, mut refused) = (0, 0, 0);
    for (id, rows) in &images {
        let image = ImageAnnotations::from_rows(id, rows.iter().map(|r| &r.row));
        let Some(with_a) = compute(&image, &config, &a, seed) else {
            continue;
        };
        let with_b = compute(&image, &config, &b, seed).expect("B merges what A merges");
        // The record survives its serialization as the state keeps it.
        let bytes = bincode::serialize(&with_a.record).expect("the record serializes");
        let record: SsaRecord = bincode::deserialize(&bytes).expect("the record reads back");
        assert_eq!(record, with_a.record);
        // With the models it was made with, the replay is the computation.
        let same = replayed(&record, &config, &a).expect("a log holds under its own vectors");
        assert_eq!(
            same,
            (with_a.samples.clone(), with_a.dropped.clone()),
            "{id}"
        );
        // Made with other settings, the record is not replayed.
        let other = SsaConfig {
            min_nodes: config.min_nodes + 1,
            ..config.clone()
        };
        assert!(replayed(&record, &other, &a).is_none());
        match replayed(&record, &config, &b) {
            Some(again) => {
                assert_eq!(again, (with_b.samples.clone(), with_b.dropped), "{id}");
                held += 1;
                rescored += usize::from(with_b.samples != with_a.samples);
            }
            None => {
                assert!(!record.merge.holds(b.similarity()));
                refused += 1;
            }
        }
    }
    println!("{held} images replayed ({rescored} with other samples than A's), {refused} refused");
    assert!(held >= 5, "{held} replayed, {refused} refused");
    assert!(
        rescored > 0,
        "the new models change no replayed image's samples"
    );
}
