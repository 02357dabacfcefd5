//! How many images a refit of SSA's word vectors leaves merged as they were.
//!
//! SSA's merge compares words through PPMI vectors fitted on the run's captions; a refit after
//! new captions arrive changes every vector a little. An image's [`MergeLog`] records every
//! decision its merge took through a similarity; when the refitted vectors give each the same
//! outcome, the merge (and everything after it up to the quality filter) is what it was.
//!
//! This bench reads a `capflow synth` directory with the shipped SSA recipe, fits the vectors on
//! the captions of the first 99% of its images (in id order) and on all of them, merges every
//! image of the first 99% under the first vectors with a log, and counts the images whose log
//! holds under the second; it times the merges and the checks.
//!
//! `MERGE_REPLAY_DATA=/tmp/synth/20000 cargo bench --bench merge_replay`

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capflow::amr::merge::{smatch_meta_graph, MergeContext, MergeLog};
use capflow::augment::ssa::align;
use capflow::augment::ImageAnnotations;
use capflow::dataflow::ssa::{fit_models, ssa_stats_of_rows};
use capflow::dataflow::{run_collect, ClusterOptions, DataflowSpec, KeyedRow};
use capflow::text::WordVectors;

fn vectors(rows: &[Arc<KeyedRow>], spec: &DataflowSpec) -> WordVectors {
    let config = spec.ssa.clone().expect("the recipe configures ssa");
    let stats = ssa_stats_of_rows(&config, rows);
    fit_models(&config, stats)
        .expect("the models fit")
        .vectors
        .expect("PPMI vectors")
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
    let (old, new) = (vectors(&before, &spec), vectors(&collected.rows, &spec));
    let config = spec.ssa.clone().expect("the recipe configures ssa");
    let lexicon = capflow::amr::align::ModifierLexicon::wordnet();
    let (mut merged, mut held, mut decisions) = (0usize, 0usize, 0usize);
    let (mut merging, mut checking) = (Duration::ZERO, Duration::ZERO);
    for id in &kept {
        let image = ImageAnnotations::from_rows(id, by_image[*id].iter().map(|r| &r.row));
        let aligned = align(&image, lexicon);
        if aligned.vgamrs.is_empty() {
            continue;
        }
        let log = RefCell::new(MergeLog::default());
        let ctx = MergeContext {
            rules: config.rules,
            similarity: &old,
            lexicon,
            log: Some(&log),
        };
        let started = Instant::now();
        smatch_meta_graph(&aligned.vgamrs, &config.smatch, &ctx).expect("the merge runs");
        merging += started.elapsed();
        let log = log.into_inner();
        let started = Instant::now();
        let holds = log.holds(&new);
        checking += started.elapsed();
        merged += 1;
        decisions += log.len();
        held += usize::from(holds);
    }
    println!(
        "{held} of {merged} merges hold under the refitted vectors ({:.2}%); {:.1} decisions an \
         image; merging {:.2} s, checking {:.3} s",
        100.0 * held as f64 / merged.max(1) as f64,
        decisions as f64 / merged.max(1) as f64,
        merging.as_secs_f64(),
        checking.as_secs_f64()
    );
}
