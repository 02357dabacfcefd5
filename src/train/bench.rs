//! Training throughput on a fixed synthetic batch (`capflow train bench`), the Rust side of
//! `benches/train_vs_pytorch.py`: same model sizes, same batch shapes, same optimizer.

use std::time::Instant;

use serde::Serialize;
use tch::{Device, Kind, Tensor};

use super::batch::Batch;
use super::config::TrainConfig;
use super::model::{ModelInput, CONTROL_TOKENS, GEOMETRY_DIM};
use super::trainer::Trainer;
use super::vocab::{Table, Vocabulary};

/// Shapes of the synthetic batch.
#[derive(Clone, Debug, Serialize)]
pub struct BenchShape {
    pub batch: i64,
    pub tokens: i64,
    pub regions: i64,
    pub vocab: i64,
    pub labels: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub shape: BenchShape,
    pub steps: u64,
    pub seconds: f64,
    pub tokens_per_second: f64,
    pub device: String,
    pub bf16: bool,
    pub threads: i32,
    pub parameters: i64,
}

fn table(prefix: &str, n: i64) -> Table {
    Table::from_items((0..n).map(|i| format!("{prefix}{i}")).collect())
}

/// A vocabulary of `words` words and `labels` labels (names are placeholders).
pub fn synthetic_vocabulary(words: i64, labels: i64) -> Vocabulary {
    Vocabulary {
        words: table("w", words),
        labels: table("l", labels),
        verbs: table("v", 2),
        slots: Default::default(),
    }
}

/// The synthetic batch: every token and label id drawn uniformly (seeded), every caption full
/// length, every region present.
pub fn synthetic_batch(shape: &BenchShape, device: Device) -> Batch {
    let _rng = super::model::lock_rng();
    tch::manual_seed(1234);
    let (b, t, r) = (shape.batch, shape.tokens, shape.regions);
    let options = (Kind::Int64, Device::Cpu);
    let tokens = Tensor::randint_low(4, shape.vocab, [b, t + 1], options);
    let batch = Batch {
        input: ModelInput {
            controls: Tensor::stack(
                &[
                    Tensor::randint_low(1, 6, [b], options),
                    Tensor::randint_low(1, 40, [b], options),
                    Tensor::zeros([b], options),
                ],
                1,
            ),
            region_labels: Tensor::randint_low(3, shape.labels, [b, r], options),
            region_geometry: Tensor::rand([b, r, GEOMETRY_DIM], (Kind::Float, Device::Cpu)),
            region_flags: Tensor::randint(2, [b, r], options),
            region_features: None,
            region_pixels: None,
            memory_mask: Tensor::ones([b, 1, 1, CONTROL_TOKENS + r], (Kind::Bool, Device::Cpu)),
        },
        inputs: tokens.narrow(1, 0, t).contiguous(),
        targets: tokens.narrow(1, 1, t).contiguous(),
        tokens: (b * t) as usize,
        samples: Vec::new(),
        words: None,
    };
    batch.to_device(device)
}

/// Trains `warmup` untimed steps, then `steps` timed steps on the same batch.
pub fn run_bench(
    config: &TrainConfig,
    shape: BenchShape,
    device: Device,
    warmup: u64,
    steps: u64,
) -> BenchResult {
    if config.threads > 0 {
        tch::set_num_threads(config.threads);
    }
    let vocab = synthetic_vocabulary(shape.vocab, shape.labels);
    let mut trainer = Trainer::new(config, &vocab, device, warmup + steps, 0);
    let batch = synthetic_batch(&shape, device);
    for _ in 0..warmup {
        trainer.train_step(&batch);
    }
    let started = Instant::now();
    for _ in 0..steps {
        trainer.train_step(&batch);
    }
    if let Device::Cuda(_) = device {
        tch::Cuda::synchronize(0);
    }
    let seconds = started.elapsed().as_secs_f64();
    BenchResult {
        tokens_per_second: (shape.batch * shape.tokens) as f64 * steps as f64 / seconds,
        parameters: trainer.model.parameters.count(),
        bf16: trainer.model.is_bf16(),
        threads: tch::get_num_threads(),
        device: format!("{device:?}"),
        shape,
        steps,
        seconds,
    }
}
