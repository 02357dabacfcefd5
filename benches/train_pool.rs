//! Reading the training sink's spilled pool the way CLID's curriculum does (feature `train`).
//!
//! The curriculum runs over the sink's pool as it stands ([`SampleSource::pooled`]): its
//! weighted draws pick samples anywhere in the pool, and its scorers walk the generated samples
//! in order. This bench pools `POOL_SAMPLES` synthetic encoded samples (tokens, three regions with
//! 16 × 16 crops on average, the size of a pixels run's samples) in blocks of 4,096 under a
//! 32 MiB budget, so that most blocks are spilled, and times three ways of reading it:
//!
//! - `draws`: batches of 256 samples drawn uniformly with replacement (the weighted draws);
//! - `in order`: consecutive batches of 256 samples through the whole pool (the scorers);
//! - `draws, 2 threads`: the draws from two threads at once (a loader beside a scorer).
//!
//! For each: samples per second, and what the source's cache did (pages read from disk, pages
//! found in the cache, the most bytes it held).
//!
//! `cargo bench --features train --bench train_pool` (`POOL_SAMPLES=100000` by default)

use std::time::Instant;

use capflow::seed::SplitMix64;
use capflow::train::batch::RegionInputs;
use capflow::train::data::{EncodedSample, Region};
use capflow::train::pool::Pool;
use capflow::train::source::SampleSource;

const BLOCK: usize = 4096;
const BUDGET: usize = 32 << 20;
const BATCH: usize = 256;
const CROP: usize = 16;

fn sample(rng: &mut SplitMix64) -> EncodedSample {
    let words = 8 + rng.below(16);
    EncodedSample {
        tokens: (0..words as i64 + 2)
            .map(|t| 3 + (t * 7919) % 5000)
            .collect(),
        regions: (0..1 + rng.below(5))
            .map(|k| Region {
                label: 3 + rng.below(200) as i64,
                geometry: [0.1 * k as f32, 0.2, 0.3, 0.4, 0.05],
                in_control: k % 2 == 0,
                feature: None,
                pixels: Some((0..3 * CROP * CROP).map(|p| (p * 31 + k) as u8).collect()),
            })
            .collect(),
        length_level: rng.below(4) as i64,
        word_count: words as i64,
        verb: 1 + rng.below(40) as i64,
    }
}

/// Reads `batches` through `source` and returns samples per second.
fn read(source: &SampleSource, batches: &[Vec<usize>], inputs: RegionInputs) -> f64 {
    let started = Instant::now();
    let mut samples = 0;
    for indices in batches {
        let batch = source.batch(indices, inputs).expect("the pool reads back");
        samples += batch.samples.len();
    }
    samples as f64 / started.elapsed().as_secs_f64()
}

fn report(what: &str, per_second: f64, source: &SampleSource, before: (u64, u64)) {
    let stats = source.cache_stats().expect("a pooled source");
    println!(
        "{what:<18} {per_second:>10.0} samples/s  pages read {:>7}  cache hits {:>7}  cache peak {:>6.1} MiB",
        stats.page_reads - before.0,
        stats.page_hits - before.1,
        stats.peak_bytes as f64 / (1 << 20) as f64
    );
}

fn main() {
    let n: usize = std::env::var("POOL_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("a scratch directory");
    let mut rng = SplitMix64::new(7);
    let mut pool = Pool::new(BLOCK, BUDGET, dir.path().join("pool"));
    let started = Instant::now();
    for k in 0..n {
        pool.push(sample(&mut rng), k).expect("the pool spills");
    }
    let (spilled, bytes) = pool.spilled();
    println!(
        "pooled {n} samples in {:.1} s: {spilled} blocks spilled ({:.0} MiB on disk), {:.0} MiB in memory",
        started.elapsed().as_secs_f64(),
        bytes as f64 / (1 << 20) as f64,
        pool.memory() as f64 / (1 << 20) as f64
    );
    let source = SampleSource::pooled(pool);
    let inputs = RegionInputs {
        feature_dim: 0,
        image_crop: CROP as i64,
    };
    let draws: Vec<Vec<usize>> = (0..400)
        .map(|_| (0..BATCH).map(|_| rng.below(n)).collect())
        .collect();
    let in_order: Vec<Vec<usize>> = (0..n)
        .collect::<Vec<_>>()
        .chunks(BATCH)
        .map(<[usize]>::to_vec)
        .collect();
    let stats = |s: &SampleSource| {
        let c = s.cache_stats().expect("a pooled source");
        (c.page_reads, c.page_hits)
    };

    let before = stats(&source);
    let rate = read(&source, &draws, inputs);
    report("draws", rate, &source, before);

    let before = stats(&source);
    let rate = read(&source, &in_order, inputs);
    report("in order", rate, &source, before);

    let before = stats(&source);
    let started = Instant::now();
    let halves: Vec<Vec<Vec<usize>>> = draws.chunks(draws.len() / 2).map(<[_]>::to_vec).collect();
    std::thread::scope(|scope| {
        for half in &halves {
            let source = source.clone();
            scope.spawn(move || read(&source, half, inputs));
        }
    });
    let rate = (draws.len() * BATCH) as f64 / started.elapsed().as_secs_f64();
    report("draws, 2 threads", rate, &source, before);
}
