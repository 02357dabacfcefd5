//! How many images a refit of SSA's word vectors leaves merged as they were.
//!
//! SSA's merge compares words through PPMI vectors fitted on the run's captions; a refit after
//! new captions arrive changes every vector a little. An image's [`MergeLog`] records every
//! decision its merge took through a similarity; when the refitted vectors give each the same
//! outcome, the merge (and everything after it up to the quality filter) is what it was.
//!
//! This bench reads a `capflow synth` directory with the shipped SSA recipe, fits the models on
//! the captions of the first 99% of its images (in id order) and on all of them, runs SSA's
//! stages on every image of the first 99% with the first models, keeping each image's record
//! ([`SsaRecord`]: the merge's log and the sentences before the quality filter), and replays
//! the records with the second models ([`replay`]): it counts the images whose log holds and
//! times the stages, the checks of the logs and the replays.
//!
//! `MERGE_REPLAY_DATA=/tmp/synth/20000 cargo bench --bench merge_replay`

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capflow::amr::Graph;
use capflow::augment::ssa::{
    align, builtin_realizer, filter_sentences, merge_logged, record, replay, sample, SsaModels,
    SsaRecord,
};
use capflow::augment::ImageAnnotations;
use capflow::dataflow::spec::ModelsSpec;
use capflow::dataflow::ssa::{fit_models, models_of_fitted, ssa_stats_of_rows};
use capflow::dataflow::{run_collect, ClusterOptions, DataflowSpec, KeyedRow};

fn models(rows: &[Arc<KeyedRow>], spec: &DataflowSpec) -> SsaModels {
    let config = spec.ssa.clone().expect("the recipe configures ssa");
    let fitted = fit_models(&config, ssa_stats_of_rows(&config, rows)).expect("the models fit");
    models_of_fitted(&config, fitted, &ModelsSpec::default(), builtin_realizer())
        .expect("the models assemble")
}

fn main() {
    let Some(data) = std::env::var_os("MERGE_REPLAY_DATA").map(PathBuf::from) else {
        eprintln!("skipping: set MERGE_REPLAY_DATA to a `capflow synth` directory");
        return;
    };
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("dataflows/ssa-flickr30k.toml");
    let spec = DataflowSpec::from_file(&recipe)
        .expect("the shipped recipe parses")
        .with_input_root(&data);
    let read = Instant::now();
    let collected = run_collect(&spec, &ClusterOptions::default()).expect("the inputs read");
    let mut by_image: BTreeMap<String, Vec<Arc<KeyedRow>>> = BTreeMap::new();
    for row in &collected.rows {
        by_image
            .entry(row.row.image_id().to_string())
            .or_default()
            .push(Arc::clone(row));
    }
    let ids: Vec<&String> = by_image.keys().collect();
    let kept: BTreeSet<&str> = ids[..ids.len() * 99 / 100]
        .iter()
        .map(|s| s.as_str())
        .collect();
    let before: Vec<Arc<KeyedRow>> = (collected.rows.iter())
        .filter(|r| kept.contains(r.row.image_id()))
        .cloned()
        .collect();
    println!(
        "{} images read in {:.1} s; vectors fitted on {} and on {} images",
        ids.len(),
        read.elapsed().as_secs_f64(),
        kept.len(),
        ids.len()
    );
    let (old, new) = (models(&before, &spec), models(&collected.rows, &spec));
    let config = spec.ssa.clone().expect("the recipe configures ssa");
    let lexicon = capflow::amr::align::ModifierLexicon::wordnet();
    let mut records: Vec<SsaRecord> = Vec::with_capacity(kept.len());
    let (mut merging, mut stages) = (Duration::ZERO, Duration::ZERO);
    for id in &kept {
        let image = ImageAnnotations::from_rows(id, by_image[*id].iter().map(|r| &r.row));
        let started = Instant::now();
        let aligned = align(&image, lexicon);
        let merge_started = Instant::now();
        let merged = merge_logged(&aligned.vgamrs, &config, &old).expect("the merge runs");
        merging += merge_started.elapsed();
        let Some((meta, log)) = merged else {
            continue;
        };
        let events = sample(&meta, id, spec.seed, &config, &old);
        let graphs: Vec<&Graph> = events.iter().map(|e| &e.graph).collect();
        let texts = (old.realizer.realize_batch(id, &graphs)).expect("the realizer realizes");
        filter_sentences(&image, &events, &texts, &config, &old);
        stages += started.elapsed();
        records.push(record(
            &image,
            &meta,
            log,
            &events,
            &texts,
            &[],
            &config,
            &old,
            spec.seed,
        ));
    }
    let started = Instant::now();
    let held = (records.iter())
        .filter(|r| r.merge.holds(new.similarity()))
        .count();
    let checking = started.elapsed();
    let started = Instant::now();
    let replayed: usize = (records.iter())
        .filter_map(|r| replay(r, &config, &new))
        .map(|r| r.samples.len())
        .sum();
    let replaying = started.elapsed();
    let bytes: usize = (records.iter())
        .map(|r| bincode::serialized_size(r).unwrap_or(0) as usize)
        .sum();
    let decisions: usize = records.iter().map(|r| r.merge.len()).sum();
    let merged = records.len().max(1);
    println!(
        "{held} of {merged} merges hold under the refitted vectors ({:.2}%); {:.1} decisions an \
         image",
        100.0 * held as f64 / merged as f64,
        decisions as f64 / merged as f64,
    );
    println!(
        "stages from amr-align to quality-filter {:.2} s (merge {:.2} s); checking the logs \
         {:.3} s; replaying them {:.2} s ({replayed} samples); records {:.0} bytes an image",
        stages.as_secs_f64(),
        merging.as_secs_f64(),
        checking.as_secs_f64(),
        replaying.as_secs_f64(),
        bytes as f64 / merged as f64,
    );
}
