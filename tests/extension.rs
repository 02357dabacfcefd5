//! A method that lives only in this test, registered through `capflow::augment::method`, runs
//! through a spec end to end: its samples land in the dataset after the built-in methods', its
//! stage is in the manifest, its errors stop the run with their exit code, and the bytes do not
//! depend on the number of workers.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use capflow::augment::method::{register, Method};
use capflow::augment::ImageAnnotations;
use capflow::dataflow::{run, ClusterOptions, DataflowSpec, RunOptions};
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

fn data_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir.join("data")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        files.insert(name, std::fs::read(&path).unwrap());
    }
    files
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
    assert_eq!(data_files(&one), data_files(&two));

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
