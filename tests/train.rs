//! The training sink on the embedded sample data (feature `train`, CPU): a tiny model learns,
//! a checkpoint resumes bit for bit, the curriculum runs end to end, and the sink and the
//! command line work.
#![cfg(feature = "train")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use capflow::schema::SampleRow;
use capflow::train::compare::{compare, CompareOptions, TrainingLimits, Variant};
use capflow::train::data::{encode_sample, EncodedSample, TrainingData};
use capflow::train::eval::EvalOptions;
use capflow::train::pool::{sample_bytes, CurriculumRows, Pool};
use capflow::train::run::{curriculum, encode_samples, job_vocabulary, train_samples, JobOptions};
use capflow::train::source::{SampleSource, CACHED_BLOCKS};
use capflow::train::trainer::{Trainer, VOCAB_FILE};
use capflow::train::vocab::Vocabulary;
use capflow::train::{Precision, TrainConfig, TrainingSink};
use tch::Device;

/// `capflow run dataflows/sample.toml` into a temporary directory, once per test binary.
fn sample_dataset() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Under cargo's per-target scratch directory, replaced by the next run of this binary.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("train-sample-dataset");
        let _ = std::fs::remove_dir_all(&dir);
        let status = Command::new(common::capflow_bin())
            .arg("run")
            .arg(common::repo_root().join("dataflows/sample.toml"))
            .arg("--out")
            .arg(&dir)
            .status()
            .expect("capflow runs");
        assert!(status.success(), "capflow run failed");
        dir
    })
}

fn tiny_config() -> TrainConfig {
    let mut config = TrainConfig {
        seed: 7,
        steps: 200,
        device: "cpu".into(),
        precision: Precision::F32,
        checkpoint_every: 0,
        threads: 1,
        splits: Vec::new(),
        ..TrainConfig::default()
    };
    config.model.d_model = 64;
    config.model.heads = 4;
    config.model.encoder_layers = 1;
    config.model.decoder_layers = 2;
    config.model.ff_dim = 128;
    config.model.dropout = 0.1;
    config.optimizer.lr = 2e-3;
    config.optimizer.warmup_steps = 20;
    config.batching.token_budget = 512;
    config
}

/// Trains on the CPU with the default job options.
fn train_on_cpu(
    samples: &[SampleRow],
    context: &capflow::train::RegionContext,
    config: &TrainConfig,
    out: &Path,
) -> capflow::error::Result<capflow::train::TrainOutcome> {
    train_samples(
        samples,
        context,
        config,
        out,
        Device::Cpu,
        &JobOptions::default(),
    )
}

fn originals() -> (TrainingData, Vec<SampleRow>) {
    let data = TrainingData::load(&[sample_dataset().to_path_buf()]).unwrap();
    let samples = data.select(&tiny_config());
    (data, samples)
}

#[test]
fn original_samples_come_from_captions_and_groundings() {
    let (data, samples) = originals();
    // The embedded data has 100 captions of 20 images and no samples table.
    assert_eq!(samples.len(), 100);
    assert!(samples.iter().all(|s| s.method == "original"));
    assert!(
        samples
            .iter()
            .filter(|s| !s.control_boxes.is_empty())
            .count()
            > 80
    );
    assert!(data.context.detections.len() >= 10);
}

#[test]
fn tiny_model_loss_falls_by_half_in_200_steps() {
    let (data, samples) = originals();
    let out = tempfile::tempdir().unwrap();
    let outcome = train_on_cpu(&samples, &data.context, &tiny_config(), out.path()).unwrap();
    let losses = &outcome.run.losses;
    assert_eq!(losses.len(), 200);
    let first: f64 = losses[..10].iter().sum::<f64>() / 10.0;
    let last: f64 = losses[190..].iter().sum::<f64>() / 10.0;
    assert!(
        last <= 0.5 * first,
        "loss fell from {first:.3} to {last:.3} only"
    );
    assert!(Trainer::has_checkpoint(out.path()));
}

fn parameters(dir: &Path) -> Vec<(String, Vec<f32>)> {
    let vocab = Vocabulary::load(&dir.join(VOCAB_FILE)).unwrap();
    let trainer = Trainer::load(dir, &vocab, Device::Cpu).unwrap();
    let p = &trainer.model.parameters;
    p.names
        .iter()
        .zip(&p.tensors)
        .map(|(n, t)| (n.clone(), Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap()))
        .collect()
}

#[test]
fn resume_continues_bit_for_bit() {
    let (data, samples) = originals();
    let mut config = tiny_config();
    config.steps = 40;
    let straight = tempfile::tempdir().unwrap();
    let full = train_on_cpu(&samples, &data.context, &config, straight.path()).unwrap();
    let resumed = tempfile::tempdir().unwrap();
    let stopped = train_samples(
        &samples,
        &data.context,
        &config,
        resumed.path(),
        Device::Cpu,
        &JobOptions {
            resume: false,
            stop_after: Some(17),
        },
    )
    .unwrap();
    assert_eq!(stopped.run.steps, 17);
    let finished = train_samples(
        &samples,
        &data.context,
        &config,
        resumed.path(),
        Device::Cpu,
        &JobOptions {
            resume: true,
            stop_after: None,
        },
    )
    .unwrap();
    assert_eq!(finished.run.steps, 40);
    // Every loss and every weight equal to the last bit.
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&finished.run.losses), bits(&full.run.losses));
    let a = parameters(straight.path());
    let b = parameters(resumed.path());
    assert_eq!(a.len(), b.len());
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let xb: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
        let yb: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
        assert!(xb == yb, "parameter {name} differs after resume");
    }
}

/// Generated samples for the curriculum: half are another image's caption (bad), half are the
/// image's own caption with its last word dropped (plausible).
fn with_generated(samples: &[SampleRow]) -> Vec<SampleRow> {
    let mut all = samples.to_vec();
    for (k, s) in samples.iter().enumerate() {
        let mut g = s.clone();
        g.method = "synthetic".into();
        g.sample_id = format!("gen:{k}");
        if k % 2 == 0 {
            g.text = samples[(k + 37) % samples.len()].text.clone();
        } else {
            let words: Vec<&str> = s.text.split_whitespace().collect();
            g.text = words[..words.len().saturating_sub(1).max(1)].join(" ");
        }
        all.push(g);
    }
    all
}

/// The tiny model with CLID's curriculum: 30 scoring steps, 10 iterations of 2 steps.
fn curriculum_config() -> TrainConfig {
    let mut config = tiny_config();
    config.curriculum.enabled = true;
    config.curriculum.scoring_steps = 30;
    config.curriculum.steps_per_iteration = 2;
    config.curriculum.c_percent = 10.0;
    config.curriculum.balanced = true;
    config
}

#[test]
fn curriculum_scores_selects_and_trains() {
    let (data, samples) = originals();
    let samples = with_generated(&samples);
    let mut config = curriculum_config();
    let out = tempfile::tempdir().unwrap();
    let outcome = train_on_cpu(&samples, &data.context, &config, out.path()).unwrap();
    assert_eq!(outcome.generated, 100);
    assert_eq!(outcome.iterations, 10);
    assert_eq!(outcome.run.steps, 20);
    for file in ["curriculum/scores.parquet", "curriculum/selections.parquet"] {
        assert!(out.path().join(file).is_file(), "{file}");
    }
    let file = std::fs::File::open(out.path().join("curriculum/selections.parquet")).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 10 * 100);

    // The same curriculum inside the training sink, over a pool that spilled to disk.
    config.stream.block_samples = 16;
    config.stream.pool_memory_mb = 0.01;
    let out = tempfile::tempdir().unwrap();
    let mut sink =
        TrainingSink::spawn(config, out.path().to_path_buf(), Device::Cpu, false).unwrap();
    for s in samples {
        sink.push(s).unwrap();
    }
    let summary = sink.finish().unwrap();
    assert_eq!(summary.pooled, 200);
    assert!(summary.pool_spilled_blocks >= 5, "{summary:?}");
    assert_eq!(summary.curriculum_iterations, 10);
    assert_eq!(summary.steps, 20);
    assert_eq!(summary.scoring_steps, 2 * 30);
    let file = std::fs::File::open(out.path().join("curriculum/scores.parquet")).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 100, "one score per generated sample");
    // The curriculum read the spilled blocks back through its cache, a page at a time.
    let cache = summary.curriculum_cache.expect("the curriculum's cache");
    assert!(cache.page_reads > 0, "{cache:?}");
    assert!(cache.peak_bytes <= cache.capacity_bytes, "{cache:?}");
}

/// CLID's curriculum over a pool that spilled nearly all its blocks computes exactly what
/// `capflow train --curriculum` computes over the same samples in memory (every loss and weight
/// of the scoring models and of the final model, the same scores and draws), and holds no more
/// than the pool's budget and a cache of at most four blocks.
#[test]
fn curriculum_over_a_spilled_pool_matches_the_one_in_memory_within_its_bound() {
    let (data, samples) = originals();
    let samples = with_generated(&samples);
    let config = curriculum_config();
    let in_memory = tempfile::tempdir().unwrap();
    let expected = train_on_cpu(&samples, &data.context, &config, in_memory.path()).unwrap();

    // The same encoding, pooled in blocks of 8 under a 10 KiB budget.
    let pooled = tempfile::tempdir().unwrap();
    let vocab = job_vocabulary(pooled.path(), &samples, &data.context, false).unwrap();
    let encoded: Vec<EncodedSample> = samples
        .iter()
        .map(|s| encode_sample(s, &data.context, &vocab, &config, None))
        .collect();
    let (block, budget) = (8, 10 << 10);
    let mut pool = Pool::new(block, budget, pooled.path().join("pool"));
    for (k, (s, row)) in encoded.iter().zip(&samples).enumerate() {
        pool.push_with_row(s.clone(), row, k).unwrap();
    }
    // What the curriculum reads of each sample is kept in the pool, within its budget.
    let held = pool.memory();
    let rows = pool.take_rows();
    assert_eq!(rows, CurriculumRows::of_rows(&samples).unwrap());
    let block_bytes: Vec<usize> = encoded
        .chunks(block)
        .map(|c| c.iter().map(sample_bytes).sum())
        .collect();
    let largest = *block_bytes.iter().max().unwrap();
    let whole: usize = block_bytes.iter().sum();
    assert!(
        pool.spilled().0 + 3 >= block_bytes.len(),
        "{:?} of {} blocks spilled",
        pool.spilled(),
        block_bytes.len()
    );
    let source = SampleSource::pooled(pool);
    let (trusted, generated): (Vec<usize>, Vec<usize>) =
        (0..samples.len()).partition(|&j| config.curriculum.is_trusted(&samples[j].method));
    tch::set_num_threads(1);
    let outcome = curriculum(
        &rows,
        &source,
        &vocab,
        &config,
        pooled.path(),
        Device::Cpu,
        &JobOptions::default(),
        &trusted,
        &generated,
    )
    .unwrap();

    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(outcome.iterations, 10);
    assert_eq!(bits(&outcome.run.losses), bits(&expected.run.losses));
    assert_eq!(outcome.scoring_runs.len(), 2);
    for (run, expected) in outcome.scoring_runs.iter().zip(&expected.scoring_runs) {
        assert_eq!(bits(&run.losses), bits(&expected.losses), "{:?}", run.dir);
    }
    for dir in ["", "scoring-extended", "scoring-trusted"] {
        let (a, b) = (
            parameters(&in_memory.path().join(dir)),
            parameters(&pooled.path().join(dir)),
        );
        assert_eq!(a.len(), b.len());
        for ((name, x), (_, y)) in a.iter().zip(&b) {
            let xb: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
            let yb: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
            assert!(
                xb == yb,
                "parameter {name} of {dir:?} differs over the pool"
            );
        }
    }
    for file in ["curriculum/scores.parquet", "curriculum/selections.parquet"] {
        let read = |dir: &Path| std::fs::read(dir.join(file)).unwrap();
        assert!(
            read(in_memory.path()) == read(pooled.path()),
            "{file} differs"
        );
    }

    // Memory: the blocks left in memory (within the budget) and the cache (within four of the
    // largest blocks), together well under the whole pool.
    let cache = source.cache_stats().unwrap();
    assert!(held <= budget.max(largest), "{held} bytes held");
    let resident = source.pool().unwrap().memory();
    assert!(resident <= budget.max(largest), "{resident} bytes resident");
    assert!(cache.page_reads > 0, "{cache:?}");
    assert!(cache.peak_bytes <= CACHED_BLOCKS * largest, "{cache:?}");
    assert!(
        resident + cache.peak_bytes <= budget + CACHED_BLOCKS * largest,
        "{resident} + {cache:?}"
    );
    assert!(
        2 * (resident + cache.peak_bytes) < whole,
        "{resident} + {cache:?} of {whole} bytes"
    );
}

#[test]
fn sink_trains_on_pushed_samples() {
    let (_, samples) = originals();
    let mut config = tiny_config();
    config.steps = 5;
    config.stream.start_after = 1;
    let out = tempfile::tempdir().unwrap();
    let mut sink =
        TrainingSink::spawn(config, out.path().to_path_buf(), Device::Cpu, false).unwrap();
    for s in samples {
        sink.push(s).unwrap();
    }
    assert_eq!(sink.received(), 100);
    let summary = sink.finish().unwrap();
    assert_eq!(summary.steps, 5);
    assert_eq!(summary.offered, 100);
    assert_eq!(summary.pooled, 100);
    assert!(Trainer::has_checkpoint(out.path()));
    // The saved vocabulary holds the words that came, with the rows kept for more.
    let vocab = Vocabulary::load(&out.path().join(VOCAB_FILE)).unwrap();
    assert_eq!(vocab.words.len(), summary.vocab_words);
    assert!(vocab.words.len() > 50 && vocab.word_rows() == 8_192);
    // A resumed sink goes on from the checkpoint's step with its vocabulary.
    let mut config = tiny_config();
    config.steps = 8;
    let err = TrainingSink::spawn(config.clone(), out.path().to_path_buf(), Device::Cpu, true)
        .err()
        .expect("a checkpoint of another step count is refused");
    assert!(err.to_string().contains("5 steps"), "{err}");
}

/// `dataflows/ssa-flickr30k.toml` on the embedded data with a `[train]` table (a tiny model on
/// the CPU, the run held to the trainer's pace by `stream.max_lag`, a pool budget of 16 KiB);
/// `plain.toml` beside it is the same recipe without it.
fn train_spec(dir: &Path) -> PathBuf {
    let root = common::repo_root();
    let recipe = std::fs::read_to_string(root.join("dataflows/ssa-flickr30k.toml")).unwrap();
    let recipe = recipe.replace("\"../", &format!("\"{}/", root.display()));
    std::fs::write(dir.join("plain.toml"), &recipe).unwrap();
    let spec = dir.join("train.toml");
    std::fs::write(
        &spec,
        format!(
            "{recipe}\n[train]\nseed = 7\nsteps = 40\ndevice = \"cpu\"\nprecision = \"f32\"\n\
             checkpoint_every = 0\nthreads = 1\nsplits = []\nout = \"{}\"\n\
             [train.model]\nd_model = 64\nheads = 4\nencoder_layers = 1\ndecoder_layers = 2\n\
             ff_dim = 128\n[train.batching]\ntoken_budget = 512\n\
             [train.stream]\nstart_after = 16\nmax_lag = 16\nblock_samples = 16\n\
             pool_memory_mb = 0.015625\n",
            dir.join("model").display()
        ),
    )
    .unwrap();
    spec
}

/// Runs `command` to its end (killed after two minutes); returns its exit status (-1 when
/// killed) and peak resident set (bytes). The child is reaped by `wait4`, which also reports its
/// peak.
#[allow(clippy::zombie_processes)]
fn run_measured(command: &mut Command) -> (i32, u64) {
    let child = command.spawn().expect("capflow starts");
    let pid = child.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A run that waits for a trainer that never trains would hang the test: stop it instead.
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            for _ in 0..1200 {
                std::thread::sleep(std::time::Duration::from_millis(100));
                if done.load(std::sync::atomic::Ordering::Acquire) {
                    return;
                }
            }
            // SAFETY: signals our own child, which has not been reaped (`done` is unset).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        })
    };
    let mut status = 0;
    // SAFETY: `rusage` is plain data that wait4 fills in; the pid is our own child's.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    done.store(true, std::sync::atomic::Ordering::Release);
    watchdog.join().unwrap();
    assert_eq!(reaped, pid, "wait4 failed");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, usage.ru_maxrss as u64 * 1024)
}

#[test]
fn a_spec_with_train_trains_while_the_run_augments_within_its_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let spec = train_spec(dir.path());
    let budget: u64 = 1 << 30;
    let (code, peak) = run_measured(
        Command::new(common::capflow_bin())
            .arg("run")
            .arg(&spec)
            .arg("--out")
            .arg(dir.path().join("dataset"))
            .arg("--memory-limit")
            .arg(budget.to_string()),
    );
    assert_eq!(code, 0);
    assert!(
        peak <= budget,
        "peak RSS {peak} bytes over the {budget}-byte budget"
    );
    let text = std::fs::read_to_string(dir.path().join("model/train.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
    let number = |key: &str| {
        summary[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {text}"))
    };
    assert_eq!(number("steps"), 40.0);
    // Every sample of the run reached the sink: as many as the committed samples table holds
    // (the 100 original captions and the SSA samples).
    let manifest = capflow::export::read_manifest(&dir.path().join("dataset")).unwrap();
    let samples = manifest.tables["samples"].rows as f64;
    assert!(samples > 100.0, "{samples}");
    assert_eq!(number("offered"), samples);
    assert_eq!(number("pooled"), samples);
    // The first step ended when only the first parts had come: the run waits for the trainer
    // once 16 samples are untrained, so later images were augmented after it.
    assert!(number("first_step_pooled") < 100.0, "{text}");
    assert!(number("streamed_steps") >= 1.0, "{text}");
    // The run waited for the trainer: never more than the lag of 16 samples were untrained when
    // a part came, and a part brings fewer than 60 here (without the lag: 190).
    assert!(number("peak_backlog") <= 16.0 + 60.0, "{text}");
    // A pool of 16 KiB spilled blocks to disk as Arrow IPC and kept to its budget (plus the
    // block being filled).
    assert!(number("pool_spilled_blocks") >= 1.0, "{text}");
    assert!(number("pool_peak_memory_bytes") <= 2.0 * 16384.0, "{text}");
    // The pool's index of every sample, within that budget: a 4-byte token count each.
    assert_eq!(number("pool_index_bytes"), 4.0 * samples, "{text}");
    assert!(Trainer::has_checkpoint(&dir.path().join("model")));
    // The dataset is the recipe's own: [train] does not change what the run writes.
    let plain = dir.path().join("plain");
    let status = Command::new(common::capflow_bin())
        .arg("run")
        .arg(dir.path().join("plain.toml"))
        .arg("--out")
        .arg(&plain)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        common::data_files(&plain),
        common::data_files(&dir.path().join("dataset"))
    );
}

#[test]
fn bf16_matmuls_train_on_cpu() {
    let (data, samples) = originals();
    let mut config = tiny_config();
    config.steps = 3;
    config.precision = Precision::Bf16;
    let out = tempfile::tempdir().unwrap();
    let outcome = train_on_cpu(&samples, &data.context, &config, out.path()).unwrap();
    assert!(outcome.run.losses.iter().all(|l| l.is_finite()));
}

#[test]
fn cli_trains_and_evaluates() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(
        &config,
        "seed = 3\nsteps = 20\ndevice = \"cpu\"\nthreads = 1\nsplits = []\n\
         [model]\nd_model = 32\nheads = 2\nencoder_layers = 1\ndecoder_layers = 1\nff_dim = 64\n\
         [batching]\ntoken_budget = 512\n",
    )
    .unwrap();
    let ckpt = dir.path().join("ckpt");
    let output = Command::new(common::capflow_bin())
        .args(["train", "--data"])
        .arg(sample_dataset())
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(&ckpt)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["steps"], 20);
    let report = dir.path().join("eval.json");
    let output = Command::new(common::capflow_bin())
        .args(["eval", "model", "--device", "cpu", "--checkpoint"])
        .arg(&ckpt)
        .arg("--data")
        .arg(sample_dataset())
        .args(["--eval-split", "test", "--out"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(summary["samples"].as_u64().unwrap() > 0);
    assert_eq!(summary["by_coverage"].as_array().unwrap().len(), 10);
    let lp = summary["lp"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&lp));
    // The same dataset through the training sink (its samples table is empty: the originals are
    // built from the captions), and the sink's checkpoint, with its reserved vocabulary rows,
    // evaluated as any other.
    let streamed = dir.path().join("streamed");
    let output = Command::new(common::capflow_bin())
        .args(["train", "--stream", "--data"])
        .arg(sample_dataset())
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(&streamed)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["steps"], 20);
    assert_eq!(summary["offered"], 100);
    let output = Command::new(common::capflow_bin())
        .args(["eval", "model", "--device", "cpu", "--checkpoint"])
        .arg(&streamed)
        .arg("--data")
        .arg(sample_dataset())
        .args(["--eval-split", "test", "--out"])
        .arg(dir.path().join("eval-streamed.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(summary["samples"].as_u64().unwrap() > 0);
    // A bad config key is a usage error naming the file.
    std::fs::write(&config, "stepz = 3\n").unwrap();
    let output = Command::new(common::capflow_bin())
        .args(["train", "--data"])
        .arg(sample_dataset())
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(&ckpt)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("tiny.toml"));
}

/// `train compare` gives every variant's final model the same optimizer steps (the curriculum's
/// iterations share them) and reports mean ± standard deviation over its seeds.
#[test]
fn compare_gives_every_variant_the_same_steps_over_seeds() {
    let (mut data, samples) = originals();
    data.samples = with_generated(&samples);
    let mut config = tiny_config();
    config.steps = 20;
    config.curriculum.scoring_steps = 10;
    // 100 generated samples at 10% per iteration: 10 iterations of 2 steps.
    config.curriculum.c_percent = 10.0;
    let eval = EvalOptions {
        splits: Vec::new(),
        methods: vec!["original".into()],
        max_samples: Some(20),
        vectors: None,
        device: Device::Cpu,
        token_budget: 512,
    };
    let out = tempfile::tempdir().unwrap();
    let options = CompareOptions {
        seeds: 2,
        ..CompareOptions::default()
    };
    let reports = compare(&data, &config, &eval, out.path(), Device::Cpu, &options).unwrap();
    assert_eq!(reports.len(), 6, "three variants, two seeds");
    for r in &reports {
        assert_eq!(r.training.run.steps, 20, "{} seed {}", r.name, r.seed);
    }
    let curriculum: Vec<_> = reports.iter().filter(|r| r.name == "curriculum").collect();
    assert_eq!(curriculum[0].training.iterations, 10);
    assert_eq!(
        curriculum.iter().map(|r| r.seed).collect::<Vec<_>>(),
        [config.seed, config.seed + 1]
    );
    let scoring: u64 = curriculum[0]
        .training
        .scoring_runs
        .iter()
        .map(|r| r.steps)
        .sum();
    assert_eq!(scoring, 20);
    // Two seeds of one variant are two models: their losses differ.
    let losses: Vec<f64> = curriculum
        .iter()
        .map(|r| *r.training.run.losses.last().unwrap())
        .collect();
    assert_ne!(losses[0], losses[1]);
    let markdown = std::fs::read_to_string(out.path().join("compare.md")).unwrap();
    let row = markdown
        .lines()
        .find(|l| l.starts_with("| curriculum |"))
        .unwrap();
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // variant, seeds, images, trusted, generated, steps, scoring steps, iterations, final loss ...
    assert_eq!(&cells[2..9], ["2", "20", "100", "100", "20", "20", "10"]);
    let (mean, sd) = cells[9].split_once(" ± ").unwrap();
    let (mean, sd): (f64, f64) = (mean.parse().unwrap(), sd.parse().unwrap());
    // The sample standard deviation of two values is |a - b| / √2.
    let expected_sd = (losses[0] - losses[1]).abs() / 2f64.sqrt();
    assert!((mean - (losses[0] + losses[1]) / 2.0).abs() < 1e-3, "{row}");
    assert!((sd - expected_sd).abs() < 1e-3, "{row}");
}

/// `train compare` with chosen variants and small training sets: every seed trains on at most
/// `--max-train` trusted samples and the generated samples of their images, capped at a share of
/// them; both variants of a seed share the images; Div-2 is each image's distinct bigrams per
/// word, averaged over the images.
#[test]
fn compare_trains_chosen_variants_on_small_training_sets() {
    let (mut data, samples) = originals();
    data.samples = with_generated(&samples);
    let mut config = tiny_config();
    config.steps = 4;
    let eval = EvalOptions {
        splits: Vec::new(),
        methods: vec!["original".into()],
        max_samples: Some(30),
        vectors: None,
        device: Device::Cpu,
        token_budget: 512,
    };
    let options = CompareOptions {
        seeds: 2,
        variants: vec![Variant::Original, Variant::Augmented],
        generated_methods: vec!["synthetic".into()],
        limits: TrainingLimits {
            max_trusted: Some(23),
            generated_percent: Some(40.0),
        },
    };
    let out = tempfile::tempdir().unwrap();
    let reports = compare(&data, &config, &eval, out.path(), Device::Cpu, &options).unwrap();
    let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["original", "augmented", "original", "augmented"]);
    for pair in reports.chunks(2) {
        let (original, augmented) = (&pair[0], &pair[1]);
        assert_eq!(original.seed, augmented.seed);
        // 23 trusted samples of 5 images (5 captions each: 4 whole images and 3 of a fifth).
        assert_eq!(original.training.trusted, 23);
        assert_eq!((original.training.generated, original.train_images), (0, 5));
        assert_eq!(augmented.training.trusted, 23);
        // 40% of 23, rounded: 9 of the five images' 25 generated samples.
        assert_eq!(augmented.training.generated, 9);
        assert_eq!(augmented.train_images, 5);
        assert_eq!(augmented.training.run.steps, 4);
        // Div-2 from the captions by hand: per image, distinct bigrams over words.
        let mut per_image: std::collections::BTreeMap<&str, Vec<Vec<&str>>> = Default::default();
        for p in &augmented.evaluation.predictions {
            per_image
                .entry(p.image_id.as_str())
                .or_default()
                .push(p.caption.split_whitespace().collect());
        }
        let ratios: Vec<f64> = per_image
            .values()
            .filter(|captions| captions.len() >= 2)
            .map(|captions| {
                let words: usize = captions.iter().map(Vec::len).sum();
                let bigrams: std::collections::HashSet<(&str, &str)> = captions
                    .iter()
                    .flat_map(|c| c.windows(2).map(|w| (w[0], w[1])))
                    .collect();
                bigrams.len() as f64 / words as f64
            })
            .collect();
        let expected = ratios.iter().sum::<f64>() / ratios.len() as f64;
        let div2 = augmented.evaluation.div2.unwrap();
        assert!((div2 - expected).abs() < 1e-12, "{div2} vs {expected}");
    }
    let markdown = std::fs::read_to_string(out.path().join("compare.md")).unwrap();
    assert!(markdown.contains("at most 23 trusted samples per seed"));
    assert!(markdown.contains("| augmented − original |"));
    assert!(!markdown.contains("| curriculum |"));
}

/// Images of one colour, `side` × `side`, written as `<id>.png` under `dir`.
fn plain_images(dir: &Path, images: &[(&str, [u8; 3])], side: u32) {
    for (id, colour) in images {
        image::RgbImage::from_pixel(side, side, image::Rgb(*colour))
            .save(dir.join(format!("{id}.png")))
            .unwrap();
    }
}

/// Two kinds of images, red and blue, with one box each and the same label: only the pixels
/// tell which caption belongs to which. A model that reads its regions' crops learns the
/// colours and names them on shades it never saw; without pixels the two are the same input.
#[test]
fn a_model_that_reads_pixels_names_colours_its_labels_do_not_tell() {
    let images = tempfile::tempdir().unwrap();
    let reds = [[200, 30, 30], [170, 20, 40], [230, 60, 50], [150, 10, 10]];
    let blues = [[30, 40, 200], [20, 60, 170], [50, 80, 230], [10, 20, 150]];
    let mut files = Vec::new();
    for (k, (red, blue)) in reds.iter().zip(&blues).enumerate() {
        files.push((format!("r{k}"), *red));
        files.push((format!("b{k}"), *blue));
    }
    let named: Vec<(&str, [u8; 3])> = files.iter().map(|(id, c)| (id.as_str(), *c)).collect();
    plain_images(images.path(), &named, 32);
    let (_, originals) = originals();
    let template = originals[0].clone();
    let sample = |id: &str| {
        let mut s = template.clone();
        s.sample_id = format!("{id}#0");
        s.image_id = id.to_string();
        s.text = if id.starts_with('r') {
            "a red ball ."
        } else {
            "a blue ball ."
        }
        .into();
        s.control_boxes = vec![capflow::schema::BoxXyxy::new(4.0, 4.0, 28.0, 28.0)];
        s.control_labels = vec!["ball".into()];
        s.verbs = Vec::new();
        s
    };
    // Shades 0..3 train, shade 3 is held out.
    let train: Vec<SampleRow> = files[..6].iter().map(|(id, _)| sample(id)).collect();
    let held_out: Vec<SampleRow> = files[6..].iter().map(|(id, _)| sample(id)).collect();
    let mut config = tiny_config();
    config.steps = 80;
    config.model.dropout = 0.0;
    config.model.image_crop = 8;
    config.images.dir = Some(images.path().to_path_buf());
    let data = TrainingData::default();
    let out = tempfile::tempdir().unwrap();
    train_on_cpu(&train, &data.context, &config, out.path()).unwrap();
    let vocab = Vocabulary::load(&out.path().join(VOCAB_FILE)).unwrap();
    let trainer = Trainer::load(out.path(), &vocab, Device::Cpu).unwrap();
    let captions =
        capflow::train::eval::generate(&trainer.model, &config, &vocab, &data, &held_out, 4096);
    assert_eq!(
        captions,
        vec![
            vec!["a".to_string(), "red".into(), "ball".into(), ".".into()],
            vec!["a".to_string(), "blue".into(), "ball".into(), ".".into()],
        ]
    );
    // The checkpoint names the image encoder's parameters.
    let names = &trainer.model.parameters.names;
    assert!(names.iter().any(|n| n == "image.conv1.weight"), "{names:?}");
}

/// An image that cannot be read leaves its regions without pixels and is reported; when no
/// image at all can be read, training stops with an error naming the directory.
#[test]
fn unreadable_images_are_counted_and_a_wrong_directory_is_an_error() {
    let (data, samples) = originals();
    let mut config = tiny_config();
    config.steps = 2;
    config.model.image_crop = 8;
    let empty = tempfile::tempdir().unwrap();
    config.images.dir = Some(empty.path().to_path_buf());
    let out = tempfile::tempdir().unwrap();
    let err = train_on_cpu(&samples, &data.context, &config, out.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&empty.path().display().to_string()) && err.contains("could be read"),
        "{err}"
    );
    // The embedded images are there: every one of the 20 is read.
    config.images.dir = Some(common::repo_root().join("examples/data/images"));
    let crops = capflow::train::pixels::ImageCrops::new(&config).unwrap();
    let vocab = Vocabulary::build(&samples, data.context.labels());
    for s in &samples {
        capflow::train::data::encode_sample(s, &data.context, &vocab, &config, Some(&crops));
    }
    assert_eq!(crops.counts(), (20, 0, None));
}

/// Encoding on several threads (each cutting the crops of its share of the images) gives what
/// one thread gives, sample for sample, and the crops of every region of the embedded images.
#[test]
fn samples_encode_alike_on_one_thread_and_on_several() {
    let (data, samples) = originals();
    let mut config = tiny_config();
    config.model.image_crop = 8;
    config.images.dir = Some(common::repo_root().join("examples/data/images"));
    let vocab = Vocabulary::build(&samples, data.context.labels());
    let one = encode_samples(&samples, &data.context, &vocab, &config, 1).unwrap();
    assert_eq!(one.len(), samples.len());
    let regions = one.iter().flat_map(|s| &s.regions);
    let (cropped, all) = regions.fold((0, 0), |(c, a), r| {
        (c + usize::from(r.pixels.is_some()), a + 1)
    });
    assert!(
        all > 0 && cropped == all,
        "{cropped} of {all} regions have pixels"
    );
    for threads in [2, 3, 7] {
        let several = encode_samples(&samples, &data.context, &vocab, &config, threads).unwrap();
        assert!(several == one, "{threads} threads encode otherwise");
    }
}

/// The `[train]` example of docs/train.md's "Pixels" section, appended to the SSA recipe as it
/// says: the run's sink reads every embedded image and trains a model with the image encoder.
#[test]
fn the_documented_pixels_sink_reads_the_embedded_images() {
    let root = common::repo_root();
    let doc = std::fs::read_to_string(root.join("docs/train.md")).unwrap();
    let section = doc.split("### Pixels").nth(1).expect("a Pixels section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a toml block in the Pixels section");
    assert!(block.contains("dataflows/ssa-flickr30k.toml"), "{block}");
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    // The spec lives in the temporary directory: paths relative to dataflows/ become absolute.
    let recipe = std::fs::read_to_string(root.join("dataflows/ssa-flickr30k.toml")).unwrap();
    let spec = format!("{recipe}\n{block}")
        .replace("\"../", &format!("\"{}/", root.display()))
        .replace(
            "[train]\n",
            &format!("[train]\nout = \"{}\"\n", model.display()),
        );
    let path = dir.path().join("spec.toml");
    std::fs::write(&path, spec).unwrap();
    let out = Command::new(common::capflow_bin())
        .arg("run")
        .arg(&path)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("could not be read"), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("train.json")).unwrap()).unwrap();
    assert_eq!(summary["steps"], 50);
    let vocab = Vocabulary::load(&model.join(VOCAB_FILE)).unwrap();
    let trainer = Trainer::load(&model, &vocab, Device::Cpu).unwrap();
    assert_eq!(trainer.config.model.image_crop, 16);
    assert!(trainer
        .model
        .parameters
        .names
        .iter()
        .any(|n| n == "image.out.weight"));
}
