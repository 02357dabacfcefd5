//! Throughput of corpus BLEU-1..4 and CIDEr-D, PTB tokenisation and self-CIDEr on a synthetic
//! COCO-sized validation split (5,000 images, 5 references and 1 hypothesis each).
//!
//! `cargo bench --bench metrics`

use capflow::metrics::cider::DocumentFrequency;
use capflow::metrics::{bleu, cider, diversity, EvalImage, Tokenizer};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const IMAGES: usize = 5_000;

const VOCABULARY: &[&str] = &[
    "a", "the", "man", "woman", "dog", "cat", "sitting", "standing", "on", "in", "of", "with",
    "red", "white", "black", "table", "street", "bench", "field", "grass", "riding", "bike",
    "holding", "next", "to", "two", "people", "group", "train", "plate", "food", "pizza",
];

fn caption(rng: &mut impl Rng) -> String {
    let len = rng.gen_range(7..=14);
    let words: Vec<&str> = (0..len).map(|_| *VOCABULARY.choose(rng).unwrap()).collect();
    format!("{}.", words.join(" "))
}

fn corpus() -> (Vec<String>, Vec<EvalImage>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut raw = Vec::new();
    let images = (0..IMAGES)
        .map(|i| {
            let hypothesis = caption(&mut rng);
            let references: Vec<String> = (0..5).map(|_| caption(&mut rng)).collect();
            raw.push(hypothesis.clone());
            raw.extend(references.iter().cloned());
            EvalImage::new(
                i.to_string(),
                Tokenizer::Whitespace.tokenize(&hypothesis),
                references
                    .iter()
                    .map(|r| Tokenizer::Whitespace.tokenize(r))
                    .collect(),
            )
        })
        .collect();
    (raw, images)
}

fn metrics(c: &mut Criterion) {
    let (raw, images) = corpus();
    let mut group = c.benchmark_group("caption_metrics");
    group.sample_size(10);
    group.throughput(Throughput::Elements(IMAGES as u64));
    group.bench_function("bleu_5k_images", |b| {
        b.iter(|| bleu::corpus_bleu(&images).unwrap())
    });
    group.bench_function("cider_d_5k_images", |b| {
        b.iter(|| cider::cider_d(&images).unwrap())
    });
    group.throughput(Throughput::Elements(raw.len() as u64));
    group.bench_function("ptb_tokenize_30k_captions", |b| {
        b.iter(|| {
            raw.iter()
                .map(|c| Tokenizer::Ptb.tokenize(c).len())
                .sum::<usize>()
        })
    });
    let df = DocumentFrequency::from_references(images.iter().map(|i| i.references.as_slice()));
    group.throughput(Throughput::Elements(100));
    group.bench_function("self_cider_100_images_of_5", |b| {
        b.iter(|| {
            images[..100]
                .iter()
                .filter_map(|i| diversity::self_cider(&i.references, &df))
                .sum::<f64>()
        })
    });
    group.finish();
}

criterion_group!(benches, metrics);
criterion_main!(benches);
