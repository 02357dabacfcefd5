//! UPGMA at SSA's size (5 captions per image) and at a few dozen points, and a 10 x 10
//! assignment (content IoU's noun matching).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use capflow::cluster::{
    linear_sum_assignment, upgma, AssignmentWorkspace, DistanceMatrix, Linkage, UpgmaWorkspace,
};

fn random_distances(n: usize, seed: u64) -> DistanceMatrix {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    DistanceMatrix::from_fn(n, |_, _| rng.gen::<f64>()).expect("random distances are valid")
}

fn bench_upgma(c: &mut Criterion) {
    for n in [5usize, 60] {
        let d = random_distances(n, n as u64);
        c.bench_function(&format!("upgma n={n}"), |b| b.iter(|| upgma(black_box(&d))));
        let mut workspace = UpgmaWorkspace::new();
        let mut out = Linkage::default();
        c.bench_function(&format!("upgma n={n} (reused workspace)"), |b| {
            b.iter(|| {
                workspace.linkage_into(black_box(&d), &mut out);
                out.steps.len()
            })
        });
    }
}

fn bench_hungarian(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let cost: Vec<f64> = (0..100).map(|_| rng.gen::<f64>()).collect();
    c.bench_function("hungarian 10x10", |b| {
        b.iter(|| linear_sum_assignment(black_box(&cost), 10, 10, false))
    });
    let mut workspace = AssignmentWorkspace::new();
    c.bench_function("hungarian 10x10 (reused workspace)", |b| {
        b.iter(|| workspace.solve(black_box(&cost), 10, 10, false))
    });
}

criterion_group!(benches, bench_upgma, bench_hungarian);
criterion_main!(benches);
