//! A method that lives only in this test, registered through `capflow::augment::method`, runs
//! through a spec end to end: its samples land in the dataset after the built-in methods', its
//! stage is in the manifest, its errors stop the run with their exit code, and the bytes do not
//! depend on the number of workers. A sink that lives only in this test, registered through
//! `capflow::dataflow::sink`, receives every sample the dataset gets, as Arrow batches, and is
//! told how the run ended.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use arrow::record_batch::RecordBatch;

use capflow::augment::method::{register, Method};
use capflow::augment::ImageAnnotations;
use capflow::dataflow::sink::{self, Sink, SinkWriter};
use capflow::dataflow::{run, ClusterOptions, DataflowSpec, RunOptions, RunOutcome};
use capflow::error::{Error, Result};
use capflow::export::read_table;
use capflow::schema::{batch_to_rows, Provenance, SampleRow, TableKind};

/// Every caption shouted: upper case, with the configured suffix.
struct Shout {
    suffix: String,
}

impl Method for Shout {
    fn stage(&self) -> &str {
        "shout"
    }

    fn samples(&self, image: &ImageAnnotations, seed: u64) -> Result<Vec<SampleRow>> {
        if image.captions.iter().any(|c| c.text.contains("FAIL-HERE")) {
            return Err(Error::invalid("shout", "a caption asks to fail"));
        }
        Ok(image
            .captions
            .iter()
            .map(|caption| SampleRow {
                image: None,
                sample_id: format!("{}#shout", caption.caption_id),
                image_id: caption.image_id.clone(),
                split: caption.split.clone(),
                method: "shout".into(),
                text: format!("{}{}", caption.text.to_uppercase(), self.suffix),
                control_boxes: Vec::new(),
                control_labels: Vec::new(),
                coverage: 0.0,
                length_level: 0,
                word_count: caption.text.split_whitespace().count() as i32,
                verbs: Vec::new(),
                quality: Vec::new(),
                provenance: Provenance {
                    source_caption_ids: vec![caption.caption_id.clone()],
                    seed,
                    ..Provenance::default()
                },
            })
            .collect())
    }
}

fn shout(config: &toml::Value) -> Result<Arc<dyn Method>> {
    let suffix = config
        .get("suffix")
        .and_then(toml::Value::as_str)
        .unwrap_or("!")
        .to_string();
    Ok(Arc::new(Shout { suffix }))
}

fn spec(dir: &Path, flickr: &Path) -> DataflowSpec {
    let path = dir.join("shout.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"shout\"\ninclude_originals = true\n\n[[inputs]]\n\
             format = \"flickr30k-entities\"\npaths = [\"{}\"]\n\n\
             [methods.shout]\nsuffix = \" !!\"\n",
            flickr.display()
        ),
    )
    .unwrap();
    DataflowSpec::from_file(&path).unwrap()
}

fn options(out: PathBuf, workers: usize) -> RunOptions {
    RunOptions {
        out: Some(out),
        cluster: ClusterOptions {
            workers,
            ..ClusterOptions::default()
        },
        ..RunOptions::default()
    }
}

#[test]
fn a_method_registered_in_a_test_runs_through_a_spec() {
    register("shout", shout).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let flickr = common::repo_root().join("examples/data/flickr30k_entities");
    let spec = spec(tmp.path(), &flickr);
    let one = tmp.path().join("w1");
    let two = tmp.path().join("w2");
    run(&spec, &options(one.clone(), 1)).unwrap();
    run(&spec, &options(two.clone(), 2)).unwrap();
    assert_eq!(common::data_files(&one), common::data_files(&two));

    let samples: Vec<SampleRow> = read_table(&one, TableKind::Samples)
        .unwrap()
        .flat_map(|batch| batch_to_rows::<SampleRow>(&batch.unwrap()).unwrap())
        .collect();
    let originals: Vec<&SampleRow> = samples.iter().filter(|s| s.method == "original").collect();
    let shouted: Vec<&SampleRow> = samples.iter().filter(|s| s.method == "shout").collect();
    assert_eq!(originals.len(), 100, "the sample data has 100 captions");
    assert_eq!(shouted.len(), originals.len());
    for (original, shouted) in originals.iter().zip(&shouted) {
        assert_eq!(shouted.text, format!("{} !!", original.text.to_uppercase()));
        assert_eq!(shouted.image_id, original.image_id);
    }
    // Each image's samples: its originals, then the registered method's.
    let mut last_method: BTreeMap<&str, &str> = BTreeMap::new();
    for sample in &samples {
        let before = last_method.insert(&sample.image_id, &sample.method);
        assert!(!(before == Some("shout") && sample.method == "original"));
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(one.join("manifest.json")).unwrap()).unwrap();
    let stage = manifest["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "shout")
        .expect("the method's stage is in the manifest");
    assert_eq!(stage["rows_in"], 100);
    assert_eq!(stage["rows_out"], 100);
}

#[test]
fn a_failing_registered_method_stops_the_run_with_its_error() {
    register("shout", shout).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // A copy of the sample data with one caption asking the method to fail.
    let flickr = tmp.path().join("flickr");
    common::copy_dir(
        &common::repo_root().join("examples/data/flickr30k_entities"),
        &flickr,
    );
    let sentences = flickr.join("Sentences");
    let first = std::fs::read_dir(&sentences)
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let text = std::fs::read_to_string(&first).unwrap();
    std::fs::write(&first, format!("FAIL-HERE {text}")).unwrap();
    let spec = spec(tmp.path(), &flickr);
    let out = tmp.path().join("out");
    let err = run(&spec, &options(out.clone(), 2)).unwrap_err();
    assert_eq!(err.exit_code(), 3, "{err}");
    assert!(err.to_string().contains("shout"), "{err}");
    assert!(!out.join("manifest.json").exists());
    // An unknown method is a configuration error.
    let mut unknown = spec.clone();
    unknown
        .methods
        .insert("whisper".into(), toml::Value::Table(Default::default()));
    let err = run(&unknown, &options(tmp.path().join("unknown"), 1)).unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    assert!(err.to_string().contains("whisper"), "{err}");
}

/// What the test sink saw in one run (by the `tag` of its table).
#[derive(Default)]
struct Seen {
    opened: Vec<usize>,
    finished: usize,
    batches: usize,
    samples: Vec<SampleRow>,
    committed: Option<u64>,
    aborted: Option<String>,
}

fn seen() -> &'static Mutex<BTreeMap<String, Seen>> {
    static SEEN: OnceLock<Mutex<BTreeMap<String, Seen>>> = OnceLock::new();
    SEEN.get_or_init(Mutex::default)
}

/// Decodes every batch it is handed; with `fail = true`, its first write fails as an adapter.
struct Collect {
    tag: String,
    fail: bool,
}

struct CollectWriter {
    tag: String,
    fail: bool,
}

impl Sink for Collect {
    fn open(&self, worker: usize) -> Result<Box<dyn SinkWriter>> {
        let mut seen = seen().lock().unwrap();
        seen.entry(self.tag.clone())
            .or_default()
            .opened
            .push(worker);
        Ok(Box::new(CollectWriter {
            tag: self.tag.clone(),
            fail: self.fail,
        }))
    }

    fn committed(&self, version: u64) -> Result<()> {
        seen().lock().unwrap().get_mut(&self.tag).unwrap().committed = Some(version);
        Ok(())
    }

    fn aborted(&self, error: &Error) {
        let mut seen = seen().lock().unwrap();
        seen.entry(self.tag.clone()).or_default().aborted = Some(error.to_string());
    }
}

impl SinkWriter for CollectWriter {
    fn write(&mut self, samples: &RecordBatch) -> Result<u64> {
        if self.fail {
            return Err(Error::Adapter {
                adapter: "collect".into(),
                batch: format!("{} samples", samples.num_rows()),
                reason: "the sink was told to fail".into(),
            });
        }
        let rows = batch_to_rows::<SampleRow>(samples)?;
        let mut seen = seen().lock().unwrap();
        let seen = seen.get_mut(&self.tag).unwrap();
        seen.batches += 1;
        seen.samples.extend(rows);
        Ok(samples.num_rows() as u64)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        seen().lock().unwrap().get_mut(&self.tag).unwrap().finished += 1;
        Ok(())
    }
}

fn collect(config: &toml::Value) -> Result<Arc<dyn Sink>> {
    let tag = config
        .get("tag")
        .and_then(toml::Value::as_str)
        .ok_or_else(|| Error::Config("`tag` is required".into()))?;
    Ok(Arc::new(Collect {
        tag: tag.to_string(),
        fail: config
            .get("fail")
            .and_then(toml::Value::as_bool)
            .unwrap_or(false),
    }))
}

fn with_sink(spec: &DataflowSpec, table: &str) -> DataflowSpec {
    let mut spec = spec.clone();
    spec.sinks
        .insert("collect".into(), toml::from_str(table).unwrap());
    spec
}

fn dataset_samples(dir: &Path) -> Vec<SampleRow> {
    read_table(dir, TableKind::Samples)
        .unwrap()
        .flat_map(|batch| batch_to_rows::<SampleRow>(&batch.unwrap()).unwrap())
        .collect()
}

fn by_id(mut samples: Vec<SampleRow>) -> Vec<SampleRow> {
    samples.sort_by(|a, b| a.sample_id.cmp(&b.sample_id));
    samples
}

#[test]
fn a_sink_registered_in_a_test_takes_every_sample_of_the_dataset() {
    register("shout", shout).unwrap();
    sink::register("collect", collect).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let flickr = common::repo_root().join("examples/data/flickr30k_entities");
    let plain = spec(tmp.path(), &flickr);
    for workers in [1, 2] {
        let tag = format!("stream-w{workers}");
        let spec = with_sink(&plain, &format!("tag = \"{tag}\""));
        assert_eq!(
            spec.config_hash(),
            plain.config_hash(),
            "a sink does not change the dataset"
        );
        let out = tmp.path().join(&tag);
        let outcome = run(&spec, &options(out.clone(), workers)).unwrap();
        assert_eq!(outcome, RunOutcome::Committed(1));
        let seen = seen().lock().unwrap().remove(&tag).unwrap();
        let mut opened = seen.opened.clone();
        opened.sort();
        assert_eq!(
            opened,
            (0..workers).collect::<Vec<_>>(),
            "one writer per worker"
        );
        assert_eq!(seen.finished, workers);
        assert_eq!(seen.committed, Some(1));
        assert_eq!(seen.aborted, None);
        let written = dataset_samples(&out);
        assert_eq!(written.len(), 200, "100 originals and 100 shouted");
        assert_eq!(by_id(seen.samples), by_id(written));
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
        let stage = manifest["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "sink:collect")
            .expect("the sink's stage is in the manifest");
        assert_eq!(stage["rows_in"], 200);
        assert_eq!(stage["rows_out"], 200);
        // The dataset is the one a run without the sink writes.
        if workers == 1 {
            let without = tmp.path().join("without");
            run(&plain, &options(without.clone(), 1)).unwrap();
            assert_eq!(common::data_files(&out), common::data_files(&without));
        }
    }

    // A first run with --state streams too: a writer per worker, every sample.
    let copy = tmp.path().join("flickr");
    for sub in ["Sentences", "Annotations"] {
        std::fs::create_dir_all(copy.join(sub)).unwrap();
        for entry in std::fs::read_dir(flickr.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, copy.join(sub).join(path.file_name().unwrap())).unwrap();
        }
    }
    let plain = spec(tmp.path(), &copy);
    let out = tmp.path().join("state");
    let options = |tag: &str| {
        let spec = with_sink(&plain, &format!("tag = \"{tag}\""));
        let options = RunOptions {
            state: Some(tmp.path().join("incremental-state")),
            ..options(out.clone(), 2)
        };
        (spec, options)
    };
    let (spec, first) = options("state");
    run(&spec, &first).unwrap();
    let first_seen = seen().lock().unwrap().remove("state").unwrap();
    let mut opened = first_seen.opened.clone();
    opened.sort();
    assert_eq!(opened, vec![0, 1], "one writer per worker");
    assert_eq!(first_seen.committed, Some(1));
    assert_eq!(by_id(first_seen.samples), by_id(dataset_samples(&out)));
    // A rerun that reads a few changed pieces collects their rows; the sink gets the samples
    // of the image it computes, from one writer.
    let sentences = copy.join("Sentences/1000001.txt");
    let mut text = std::fs::read_to_string(&sentences).unwrap();
    text.push_str("[/EN#1001/people A young cyclist] rides [/EN#1002/vehicles a bike] .\n");
    std::fs::write(&sentences, text).unwrap();
    let (spec, rerun) = options("rerun");
    assert_eq!(run(&spec, &rerun).unwrap(), RunOutcome::Committed(2));
    let rerun_seen = seen().lock().unwrap().remove("rerun").unwrap();
    assert_eq!(rerun_seen.opened, vec![0]);
    assert_eq!(rerun_seen.committed, Some(2));
    let computed: Vec<SampleRow> = dataset_samples(&out)
        .into_iter()
        .filter(|s| s.image_id == "1000001")
        .collect();
    assert_eq!(computed.len(), 12, "6 originals and 6 shouted");
    assert_eq!(by_id(rerun_seen.samples), by_id(computed));
}

#[test]
fn a_failing_sink_stops_the_run_and_nothing_is_committed() {
    register("shout", shout).unwrap();
    sink::register("collect", collect).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let flickr = common::repo_root().join("examples/data/flickr30k_entities");
    let plain = spec(tmp.path(), &flickr);
    let spec = with_sink(&plain, "tag = \"fails\"\nfail = true");
    let out = tmp.path().join("out");
    let err = run(&spec, &options(out.clone(), 2)).unwrap_err();
    assert_eq!(
        err.exit_code(),
        5,
        "an adapter's failure keeps its exit code: {err}"
    );
    assert!(err.to_string().contains("sink:collect"), "{err}");
    assert!(!out.join("manifest.json").exists());
    let seen = seen().lock().unwrap().remove("fails").unwrap();
    assert_eq!(seen.committed, None);
    assert!(seen.aborted.unwrap().contains("told to fail"));

    // An unknown sink, or a bad table, is a configuration error before anything is read.
    let mut unknown = plain.clone();
    unknown
        .sinks
        .insert("nowhere".into(), toml::Value::Table(Default::default()));
    let err = run(&unknown, &options(tmp.path().join("unknown"), 1)).unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    assert!(err.to_string().contains("[sinks.nowhere]"), "{err}");
    let untagged = with_sink(&plain, "fail = true");
    let err = run(&untagged, &options(tmp.path().join("untagged"), 1)).unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    assert!(err.to_string().contains("[sinks.collect]: `tag`"), "{err}");
    assert!(!tmp.path().join("untagged/manifest.json").exists());
}
