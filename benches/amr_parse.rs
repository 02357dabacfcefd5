//! Built-in caption parser speed: the 100 embedded captions (`examples/data/amr/captions.amr`,
//! 6–23 tokens) parsed to aligned AMR graphs, one thread.
//!
//! `cargo bench --bench amr_parse`

use capflow::amr::parse::parse_caption;
use capflow::amr::penman::{encode, parse_many};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn parse(c: &mut Criterion) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/data/amr/captions.amr"
    );
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("skipping: {path}: {e}");
            return;
        }
    };
    let captions: Vec<String> = parse_many(&text)
        .into_iter()
        .filter_map(|b| b.graph.ok())
        .filter_map(|g| g.meta("snt").map(str::to_string))
        .collect();
    // The lexicons are parsed once per process; keep that out of the measurement.
    parse_caption(&captions[0]);
    let mut group = c.benchmark_group("parse_captions");
    group.throughput(Throughput::Elements(captions.len() as u64));
    group.bench_function("parse_caption", |b| {
        b.iter(|| {
            captions
                .iter()
                .map(|c| parse_caption(c).triples.len())
                .sum::<usize>()
        })
    });
    group.bench_function("parse_caption + encode (as parse-text writes)", |b| {
        b.iter(|| {
            captions
                .iter()
                .map(|c| encode(&parse_caption(c)).len())
                .sum::<usize>()
        })
    });
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
