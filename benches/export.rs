//! Write, validate and read-back throughput of capflow datasets on the synthetic caption corpus
//! (20,000 images: 100,000 caption records, 218,970 rows over four tables).
//!
//! `cargo bench --bench export`

use std::path::Path;

use arrow::array::RecordBatch;
use capflow::export::{read_table, synthetic, validate, DatasetSink, DatasetWriter};
use capflow::ingest::{Row, VecSink};
use capflow::schema::{rows_to_batch, CaptionRow, TableKind};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const IMAGES: u64 = 20_000;

fn ingest(dir: &Path) {
    let mut writer = DatasetWriter::create(dir, "bench", 128 << 20).unwrap();
    let mut sink = DatasetSink::new(&mut writer);
    synthetic::generate(IMAGES, &mut sink).unwrap();
    let counts = sink.finish().unwrap();
    writer.commit(counts).unwrap();
}

fn caption_batches() -> Vec<RecordBatch> {
    let mut sink = VecSink::default();
    synthetic::generate(IMAGES, &mut sink).unwrap();
    let captions: Vec<CaptionRow> = sink
        .rows
        .into_iter()
        .filter_map(|row| match row {
            Row::Caption(c) => Some(c),
            _ => None,
        })
        .collect();
    captions
        .chunks(8192)
        .map(|chunk| rows_to_batch(chunk).unwrap())
        .collect()
}

fn bench_export(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("export");
    group.sample_size(10);

    // Typed rows through the sink: serde → Arrow → Parquet (ZSTD) → commit.
    group.throughput(Throughput::Elements(synthetic::record_count(IMAGES)));
    group.bench_function("ingest_synthetic_records", |b| {
        let dir = tmp.path().join("ingest");
        b.iter(|| ingest(&dir));
    });

    // Prebuilt RecordBatches: Parquet encoding, hashing and commit only.
    let batches = caption_batches();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    group.throughput(Throughput::Elements(rows as u64));
    group.bench_function("write_caption_batches", |b| {
        let dir = tmp.path().join("batches");
        b.iter(|| {
            let mut writer = DatasetWriter::create(&dir, "bench", 128 << 20).unwrap();
            for batch in &batches {
                writer
                    .write_batch(TableKind::Captions, "captions", batch)
                    .unwrap();
            }
            writer.commit(Default::default()).unwrap();
        });
    });

    let dir = tmp.path().join("ingest");
    ingest(&dir);
    let rows: u64 = capflow::export::read_manifest(&dir)
        .unwrap()
        .files
        .iter()
        .map(|f| f.rows)
        .sum();
    group.throughput(Throughput::Elements(rows));
    group.bench_function("validate", |b| {
        b.iter(|| assert!(validate(&dir).unwrap().is_ok()));
    });
    group.bench_function("read_table_captions", |b| {
        b.iter(|| {
            read_table(&dir, TableKind::Captions)
                .unwrap()
                .map(|batch| batch.unwrap().num_rows())
                .sum::<usize>()
        });
    });
    group.finish();
}

criterion_group!(benches, bench_export);
criterion_main!(benches);
