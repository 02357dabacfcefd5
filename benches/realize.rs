//! Built-in AMR realizer speed on the embedded caption AMRs (100 graphs, 5 captions × 20
//! images, 3-16 nodes each).
//!
//! `cargo bench --bench realize`

use capflow::amr::penman::parse_many;
use capflow::amr::realize::Realizer;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn realize(c: &mut Criterion) {
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
    let graphs: Vec<_> = parse_many(&text)
        .into_iter()
        .filter_map(|b| b.graph.ok())
        .collect();
    let realizer = Realizer::builtin();
    let mut group = c.benchmark_group("realize_caption_amrs");
    group.throughput(Throughput::Elements(graphs.len() as u64));
    group.bench_function("realize", |b| {
        b.iter(|| {
            graphs
                .iter()
                .map(|g| realizer.realize(g).len())
                .sum::<usize>()
        })
    });
    let mut buffer = String::with_capacity(256);
    group.bench_function("realize_into (reused buffer)", |b| {
        b.iter(|| {
            let mut total = 0;
            for g in &graphs {
                buffer.clear();
                realizer.realize_into(g, &mut buffer);
                total += buffer.len();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, realize);
criterion_main!(benches);
