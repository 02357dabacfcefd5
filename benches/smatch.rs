//! Smatch on SSA-sized pairs: graphs of 5 to 25 nodes from The Little Prince AMR bank, each
//! scored against the next such graph (different sentences, like an image's five captions) and
//! against itself; and what SSA itself scores, every pair of one image's caption AMRs
//! (`examples/data/amr/captions.amr`, five captions per image, 10 pairs each).
//!
//! `CAPFLOW_FIXTURES=/path/to/shared/fixtures cargo bench --bench smatch`; skips when the
//! fixture is absent.

use std::path::PathBuf;

use capflow::amr::penman::parse_many;
use capflow::amr::smatch::{smatch, smatch_prepared, SmatchGraph, SmatchOptions};
use capflow::amr::Graph;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn small_graphs() -> Option<Vec<Graph>> {
    let dir = std::env::var_os("CAPFLOW_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    let text = std::fs::read_to_string(dir.join("amr/little_prince_v3.0.txt")).ok()?;
    Some(
        parse_many(&text)
            .into_iter()
            .filter_map(|b| b.graph.ok())
            .filter(|g| (5..=25).contains(&g.variables().len()))
            .take(401)
            .collect(),
    )
}

fn ssa_pairs(c: &mut Criterion) {
    let Some(graphs) = small_graphs() else {
        eprintln!("skipping: amr/little_prince_v3.0.txt not found (set CAPFLOW_FIXTURES)");
        return;
    };
    let prepared: Vec<SmatchGraph> = graphs.iter().map(SmatchGraph::new).collect();
    let options = SmatchOptions::default();
    let pairs = (prepared.len() - 1) as u64;
    let mut group = c.benchmark_group("smatch_ssa_5_to_25_nodes");
    group.throughput(Throughput::Elements(pairs));
    group.bench_function("different_graphs_prepared", |b| {
        b.iter(|| {
            prepared
                .windows(2)
                .map(|w| smatch_prepared(&w[0], &w[1], &options).matched)
                .sum::<usize>()
        })
    });
    group.bench_function("different_graphs_from_graph", |b| {
        b.iter(|| {
            graphs
                .windows(2)
                .map(|w| smatch(&w[0], &w[1], &options).matched)
                .sum::<usize>()
        })
    });
    group.bench_function("same_graph_prepared", |b| {
        b.iter(|| {
            prepared[1..]
                .iter()
                .map(|g| smatch_prepared(g, g, &options).matched)
                .sum::<usize>()
        })
    });
    group.finish();
}

/// Every pair within each image of the embedded caption AMRs, as SSA's clustering scores them.
fn caption_pairs(c: &mut Criterion) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/amr/captions.amr");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipping: {} not found", path.display());
        return;
    };
    let mut images: Vec<(String, Vec<SmatchGraph>)> = Vec::new();
    for block in parse_many(&text) {
        let Ok(graph) = block.graph else { continue };
        // `# ::id IMAGE.CAPTION`: captions of one image share the part before the dot.
        let id = graph
            .metadata
            .iter()
            .find(|(key, _)| key == "id")
            .map_or("", |(_, value)| value.as_str());
        let image = id.split('.').next().unwrap_or_default().to_owned();
        match images.last_mut() {
            Some((last, graphs)) if *last == image => graphs.push(SmatchGraph::new(&graph)),
            _ => images.push((image, vec![SmatchGraph::new(&graph)])),
        }
    }
    let pairs: Vec<(&SmatchGraph, &SmatchGraph)> = images
        .iter()
        .flat_map(|(_, graphs)| {
            graphs
                .iter()
                .enumerate()
                .flat_map(move |(a, x)| graphs[a + 1..].iter().map(move |y| (x, y)))
        })
        .collect();
    let options = SmatchOptions::default();
    let mut group = c.benchmark_group("smatch_caption_pairs_within_image");
    group.throughput(Throughput::Elements(pairs.len() as u64));
    group.bench_function(
        format!("{}_images_{}_pairs", images.len(), pairs.len()),
        |b| {
            b.iter(|| {
                pairs
                    .iter()
                    .map(|(x, y)| smatch_prepared(x, y, &options).matched)
                    .sum::<usize>()
            })
        },
    );
    group.finish();
}

criterion_group!(benches, ssa_pairs, caption_pairs);
criterion_main!(benches);
