//! The subprocess adapter against deterministic Python adapters (`tests/adapters/`) that speak
//! the documented protocol with pyarrow: round trips for every model kind, restart on crash,
//! timeouts, garbage replies, and that every child process is reaped.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capflow::models::{
    AdapterConfig, AmrToText, Embedder, ExternalQualityScorer, ImageText, ImageTextScorer,
    ModelKind, SubprocessAdapter, TextToAmr,
};
use capflow::Error;

const ROWS: usize = 1000;
const BATCH: usize = 64;

fn deterministic(python: &Path, kind: ModelKind, extra: &[&str]) -> AdapterConfig {
    let script = common::repo_root().join("tests/adapters/deterministic.py");
    let mut command = vec![
        python.display().to_string(),
        script.display().to_string(),
        kind.name().to_string(),
    ];
    command.extend(extra.iter().map(|s| s.to_string()));
    let mut config = AdapterConfig::new(command);
    config.max_batch_size = BATCH;
    config.batch_timeout_secs = 30.0;
    config.startup_timeout_secs = 30.0;
    config
}

fn adapter(name: &str, kind: ModelKind, extra: &[&str]) -> Option<SubprocessAdapter> {
    let python = common::oracle_python()?;
    Some(SubprocessAdapter::new(name, kind, deterministic(&python, kind, extra)).unwrap())
}

/// Texts of varied length (some over 100 code points, some non-ASCII) and varied counts of 'a'.
fn texts() -> Vec<String> {
    (0..ROWS)
        .map(|i| {
            let filler = "a b".repeat(i % 53);
            format!("caption {i}: café {filler}")
        })
        .collect()
}

fn adapter_error(err: Error) -> (String, String, String) {
    match err {
        Error::Adapter {
            adapter,
            batch,
            reason,
        } => (adapter, batch, reason),
        other => panic!("expected Error::Adapter, got {other:?}"),
    }
}

/// The pids the deterministic adapter printed to stderr (and that the error quoted).
fn pids_in(message: &str) -> Vec<u32> {
    message
        .split("pid=")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// A reaped process has no `/proc` entry; a zombie child of ours would show state `Z`.
fn assert_reaped(pid: u32) {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return;
    };
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let (state, ppid) = (fields.first().copied(), fields.get(1).copied());
    assert!(
        !(state == Some("Z") && ppid == Some(std::process::id().to_string().as_str())),
        "child {pid} was left a zombie"
    );
}

#[test]
fn text_to_amr_round_trip() {
    let Some(parser) = adapter("stog", ModelKind::TextToAmr, &[]) else {
        return;
    };
    let captions = texts();
    let started = Instant::now();
    let graphs = parser.parse_captions(&captions).unwrap();
    eprintln!(
        "text_to_amr: {ROWS} rows in {:.3} s",
        started.elapsed().as_secs_f64()
    );
    let expected: Vec<String> = captions
        .iter()
        .map(|c| format!("(s / say-01 :ARG1 \"{}\")", c.to_uppercase()))
        .collect();
    assert_eq!(graphs, expected);
    assert_eq!(parser.restarts(), 0);
}

#[test]
fn amr_to_text_round_trip() {
    let Some(generator) = adapter("gtos", ModelKind::AmrToText, &[]) else {
        return;
    };
    let graphs: Vec<String> = (0..ROWS)
        .map(|i| format!("(d{i} / dog :mod (b / big) :quant {i})"))
        .collect();
    let sentences = generator.generate_sentences(&graphs).unwrap();
    let expected: Vec<String> = graphs.iter().map(|g| g.to_uppercase()).collect();
    assert_eq!(sentences, expected);
}

#[test]
fn quality_scorer_round_trip() {
    let Some(scorer) = adapter("fluency", ModelKind::QualityScorer, &[]) else {
        return;
    };
    let sentences = texts();
    let scores = scorer.score_sentences(&sentences).unwrap();
    assert_eq!(scores.len(), ROWS);
    let mut saturated = 0;
    for (sentence, score) in sentences.iter().zip(&scores) {
        let expected = (sentence.chars().count() as f64 / 100.0).min(1.0);
        saturated += usize::from(expected == 1.0);
        assert_eq!(*score, expected, "{sentence}");
    }
    assert!(
        saturated > 0 && saturated < ROWS,
        "inputs cover both regimes"
    );
}

#[test]
fn embedder_round_trip_keeps_batches_of_64() {
    let Some(embedder) = adapter("sbert", ModelKind::Embedder, &[]) else {
        return;
    };
    let sentences = texts();
    let vectors = embedder.embed(&sentences).unwrap();
    assert_eq!(vectors.len(), ROWS);
    for (i, (sentence, vector)) in sentences.iter().zip(&vectors).enumerate() {
        let expected = [
            sentence.chars().count() as f32,
            sentence.matches('a').count() as f32,
            (i % BATCH) as f32,
        ];
        assert_eq!(vector.as_slice(), expected.as_slice(), "row {i}");
    }
}

#[test]
fn image_text_scorer_round_trip() {
    let Some(scorer) = adapter("clip", ModelKind::ImageTextScorer, &[]) else {
        return;
    };
    let pairs: Vec<ImageText> = (0..ROWS)
        .map(|i| ImageText {
            image: PathBuf::from(format!("images/im{}.jpg", i % 7)),
            text: format!("a photo of im{} and more", i % 5),
        })
        .collect();
    let scores = scorer.score_pairs(&pairs).unwrap();
    let expected: Vec<f64> = (0..ROWS)
        .map(|i| if i % 7 == i % 5 { 1.0 } else { 0.0 })
        .collect();
    assert_eq!(scores, expected);
}

#[test]
fn calls_across_several_batches_and_calls_keep_order() {
    let Some(scorer) = adapter("fluency", ModelKind::QualityScorer, &[]) else {
        return;
    };
    for n in [0, 1, 63, 64, 65, 130] {
        let sentences: Vec<String> = (0..n).map(|i| "x".repeat(i)).collect();
        let scores = scorer.score_sentences(&sentences).unwrap();
        let expected: Vec<f64> = (0..n).map(|i| (i as f64 / 100.0).min(1.0)).collect();
        assert_eq!(scores, expected, "{n} rows");
    }
}

#[test]
fn crash_is_restarted_and_a_second_crash_on_the_batch_fails() {
    let Some(scorer) = adapter("fragile", ModelKind::QualityScorer, &["--crash-on", "BOOM"]) else {
        return;
    };
    let mut sentences: Vec<String> = (0..200).map(|i| format!("sentence {i}")).collect();
    sentences[150] = "BOOM goes the model".to_string();
    let err = scorer.score_sentences(&sentences).unwrap_err();
    eprintln!("{err}");
    let (adapter, batch, reason) = adapter_error(err);
    assert_eq!(adapter, "fragile");
    assert!(
        batch.contains("batch 2") && batch.contains("items 128..192"),
        "{batch}"
    );
    assert!(reason.contains("crashed again"), "{reason}");
    assert!(reason.contains("exit status: 3"), "{reason}");
    assert!(
        reason.contains("crashing on marker"),
        "stderr tail: {reason}"
    );
    assert_eq!(scorer.restarts(), 1);
    let pids = pids_in(&reason);
    assert!(!pids.is_empty(), "{reason}");
    pids.into_iter().for_each(assert_reaped);

    // The adapter stays usable: the next call starts a fresh process.
    let scores = scorer.score_sentences(&sentences[..3]).unwrap();
    assert_eq!(scores, vec![0.1, 0.1, 0.1]);
}

#[test]
fn crash_once_is_retried_on_a_fresh_process() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("crashed");
    let flag = flag.to_str().unwrap();
    let config = deterministic(
        &python,
        ModelKind::AmrToText,
        &["--crash-on", "BOOM", "--crash-once", flag],
    );
    let generator = SubprocessAdapter::new("flaky", ModelKind::AmrToText, config).unwrap();
    let graphs: Vec<String> = (0..100).map(|i| format!("(b{i} / BOOM-{i})")).collect();
    let sentences = generator.generate_sentences(&graphs).unwrap();
    let expected: Vec<String> = graphs.iter().map(|g| g.to_uppercase()).collect();
    assert_eq!(sentences, expected);
    assert_eq!(generator.restarts(), 1);
}

#[test]
fn no_restarts_left_fails_on_first_crash() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let mut config = deterministic(&python, ModelKind::Embedder, &["--crash-on", "BOOM"]);
    config.max_restarts = 0;
    let embedder = SubprocessAdapter::new("fragile", ModelKind::Embedder, config).unwrap();
    let err = embedder.embed(&["BOOM".to_string()]).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("no restarts are left"), "{message}");
    assert_eq!(err.exit_code(), 5);
}

#[test]
fn hanging_adapter_times_out_and_is_killed() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let mut config = deterministic(&python, ModelKind::TextToAmr, &["--hang-on", "SLEEP"]);
    config.batch_timeout_secs = 1.0;
    let parser = SubprocessAdapter::new("sleepy", ModelKind::TextToAmr, config).unwrap();
    // The first batch of a process also gets startup_timeout_secs; warm it up first.
    parser.parse_captions(&["warm up".to_string()]).unwrap();
    let pid = parser.child_id().unwrap();

    let mut captions: Vec<String> = (0..100).map(|i| format!("caption {i}")).collect();
    captions[70] = "SLEEP now".to_string();
    let started = Instant::now();
    let err = parser.parse_captions(&captions).unwrap_err();
    let elapsed = started.elapsed();
    let message = err.to_string();
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(4),
        "took {elapsed:?}"
    );
    let (adapter, batch, reason) = adapter_error(err);
    assert_eq!(adapter, "sleepy");
    assert!(
        batch.contains("batch 1") && batch.contains("items 64..100"),
        "{batch}"
    );
    assert!(reason.contains("no reply within 1.0 s"), "{reason}");
    assert!(
        reason.contains("hanging on marker"),
        "stderr tail: {message}"
    );
    assert_eq!(parser.restarts(), 0, "a timeout is not retried");
    assert_reaped(pid);
}

#[test]
fn garbage_on_stdout_is_a_clear_error() {
    let Some(scorer) = adapter("noisy", ModelKind::QualityScorer, &["--garbage"]) else {
        return;
    };
    let started = Instant::now();
    let (adapter, batch, reason) =
        adapter_error(scorer.score_sentences(&["hi".to_string()]).unwrap_err());
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(adapter, "noisy");
    assert!(batch.contains("batch 0"), "{batch}");
    assert!(reason.contains("not an Arrow IPC stream"), "{reason}");
    assert!(reason.contains("hello, this is not arrow"), "{reason}");
    assert_eq!(scorer.restarts(), 0);
    pids_in(&reason).into_iter().for_each(assert_reaped);
}

#[test]
fn text_on_stdout_after_a_reply_is_named_in_the_timeout() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let mut config = deterministic(
        &python,
        ModelKind::QualityScorer,
        &["--garbage-after-first"],
    );
    config.batch_timeout_secs = 1.0;
    let scorer = SubprocessAdapter::new("chatty", ModelKind::QualityScorer, config).unwrap();
    assert_eq!(
        scorer.score_sentences(&["abc".to_string()]).unwrap(),
        vec![0.03]
    );
    let (_, batch, reason) =
        adapter_error(scorer.score_sentences(&["abcd".to_string()]).unwrap_err());
    assert!(batch.contains("request ids 1..2"), "{batch}");
    assert!(
        reason.contains("bytes arrived on stdout without forming a reply"),
        "{reason}"
    );
}

#[test]
fn one_adapter_serves_concurrent_callers_in_order() {
    let Some(embedder) = adapter("sbert", ModelKind::Embedder, &[]) else {
        return;
    };
    let embedder = std::sync::Arc::new(embedder);
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let embedder = std::sync::Arc::clone(&embedder);
            std::thread::spawn(move || {
                let texts: Vec<String> = (0..150).map(|i| "a".repeat(worker * 1000 + i)).collect();
                let vectors = embedder.embed(&texts).unwrap();
                for (i, vector) in vectors.iter().enumerate() {
                    let n = (worker * 1000 + i) as f32;
                    assert_eq!(vector[..2], [n, n], "worker {worker} row {i}");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(embedder.restarts(), 0);
}

#[test]
fn adapter_serving_another_kind_exits_with_a_message() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    // The script serves embeddings but the adapter is configured as a quality scorer.
    let mut config = deterministic(&python, ModelKind::Embedder, &[]);
    config.max_restarts = 0;
    let scorer = SubprocessAdapter::new("mixed", ModelKind::QualityScorer, config).unwrap();
    let message = scorer
        .score_sentences(&["x".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("serves 'embedder' but capflow configured it as 'quality_scorer'"),
        "{message}"
    );
}

#[test]
fn wrong_trait_for_the_configured_kind_is_rejected() {
    let config = AdapterConfig::new(["/nonexistent/never-started"]);
    let adapter = SubprocessAdapter::new("sbert", ModelKind::Embedder, config).unwrap();
    let message = adapter
        .parse_captions(&["a dog".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("configured for kind `embedder` but was used as kind `text_to_amr`"),
        "{message}"
    );
}

#[test]
fn missing_program_names_the_command() {
    let config = AdapterConfig::new(["/nonexistent/amr-parser", "--fast"]);
    let adapter = SubprocessAdapter::new("stog", ModelKind::TextToAmr, config).unwrap();
    let message = adapter
        .parse_captions(&["a dog".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("external model `stog`")
            && message.contains("cannot start `/nonexistent/amr-parser --fast`"),
        "{message}"
    );
}

#[test]
fn dropping_the_adapter_reaps_its_process() {
    let Some(scorer) = adapter("fluency", ModelKind::QualityScorer, &[]) else {
        return;
    };
    scorer.start().unwrap();
    let pid = scorer.child_id().unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    let started = Instant::now();
    drop(scorer);
    // The request stream was closed, so the process exits by itself well before the kill.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_reaped(pid);
}

#[test]
fn models_section_of_a_spec_parses() {
    let spec = r#"
        [models.amr_to_text]
        command = ["python3", "examples/adapters/amrlib_generate.py"]
        env = { CUDA_VISIBLE_DEVICES = "0" }
        max_batch_size = 16

        [models.embedder]
        command = ["python3", "examples/adapters/sbert_embed.py"]
        working_dir = "/srv/models"
    "#;
    #[derive(serde::Deserialize)]
    struct Spec {
        models: BTreeMap<String, AdapterConfig>,
    }
    let spec: Spec = toml::from_str(spec).unwrap();
    let generate = &spec.models["amr_to_text"];
    assert_eq!(generate.max_batch_size, 16);
    assert_eq!(generate.env["CUDA_VISIBLE_DEVICES"], "0");
    assert_eq!(generate.max_restarts, 3);
    let embed = &spec.models["embedder"];
    assert_eq!(embed.working_dir.as_deref(), Some(Path::new("/srv/models")));
    assert_eq!(embed.max_batch_size, 64);
    for key in spec.models.keys() {
        key.parse::<ModelKind>().unwrap();
    }
    let bad = toml::from_str::<Spec>("[models.embedder]\ncommand = []\nbatch_size = 3\n");
    assert!(bad.is_err(), "unknown keys are rejected");
    let empty = AdapterConfig::new(Vec::<String>::new());
    let err = SubprocessAdapter::new("embedder", ModelKind::Embedder, empty).unwrap_err();
    assert!(err.to_string().contains("models.embedder"), "{err}");
}
