//! PENMAN parse and encode speed on The Little Prince AMR bank (1,562 graphs).
//!
//! `CAPFLOW_FIXTURES=/path/to/shared/fixtures cargo bench --bench amr_penman`; skips when the
//! fixture is absent.

use std::path::PathBuf;

use capflow::amr::penman::{encode, parse_many};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn fixture() -> Option<String> {
    let dir = std::env::var_os("CAPFLOW_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    std::fs::read_to_string(dir.join("amr/little_prince_v3.0.txt")).ok()
}

fn penman(c: &mut Criterion) {
    let Some(text) = fixture() else {
        eprintln!("skipping: amr/little_prince_v3.0.txt not found (set CAPFLOW_FIXTURES)");
        return;
    };
    let graphs: Vec<_> = parse_many(&text)
        .into_iter()
        .filter_map(|b| b.graph.ok())
        .collect();
    let mut group = c.benchmark_group("penman_little_prince");
    group.throughput(Throughput::Elements(graphs.len() as u64));
    group.bench_function("parse_many", |b| b.iter(|| parse_many(&text).len()));
    group.bench_function("encode", |b| {
        b.iter(|| graphs.iter().map(|g| encode(g).len()).sum::<usize>())
    });
    group.finish();
}

criterion_group!(benches, penman);
criterion_main!(benches);
