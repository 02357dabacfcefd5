//! Visual-context caption search (exact inner product over every caption) at Karpathy-test size
//! (25,000 captions) with 50- and 300-dimensional vectors, and SIF sentence vectors for captions.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use capflow::augment::relatedness::search::CaptionIndex;
use capflow::augment::relatedness::sif::{content_tokens, SifEncoder};
use capflow::text::WordVectors;

fn random_vectors(n: usize, dim: usize, rng: &mut ChaCha8Rng) -> Vec<Vec<f64>> {
    (0..n)
        .map(|_| (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect())
        .collect()
}

fn bench_search(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for dim in [50usize, 300] {
        let captions = random_vectors(25_000, dim, &mut rng);
        let index = CaptionIndex::new(&captions).expect("random vectors are finite");
        let query = random_vectors(1, dim, &mut rng).remove(0);
        c.bench_function(&format!("search 25k captions dim={dim} top-15"), |b| {
            b.iter(|| index.search(black_box(&query), 15).expect("same dimension"))
        });
    }
}

fn bench_sif(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let words: Vec<String> = (0..2_000).map(|i| format!("w{i}")).collect();
    let vectors = WordVectors::from_pairs(words.iter().map(|w| {
        let v: Vec<f32> = (0..300).map(|_| rng.gen_range(-1.0..1.0)).collect();
        (w.clone(), v)
    }))
    .expect("random table");
    let captions: Vec<String> = (0..1_000)
        .map(|_| {
            let len = rng.gen_range(8..14);
            (0..len)
                .map(|_| words[rng.gen_range(0..words.len())].as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let corpus: Vec<Vec<String>> = captions.iter().map(|c| content_tokens(c)).collect();
    let sif = SifEncoder::fit(vectors.clone(), &corpus, 1e-3, 1);
    c.bench_function("sif embed 1k captions dim=300", |b| {
        b.iter(|| {
            captions
                .iter()
                .map(|c| sif.embed(black_box(c)).len())
                .sum::<usize>()
        })
    });
    c.bench_function("sif fit 1k captions dim=300", |b| {
        b.iter(|| SifEncoder::fit(vectors.clone(), black_box(&corpus), 1e-3, 1))
    });
}

criterion_group!(benches, bench_search, bench_sif);
criterion_main!(benches);
