//! `capflow run` exits with the code the README gives for what went wrong: 2 usage or
//! configuration, 3 bad input data, 4 I/O (an input that cannot be read), 5 an external model
//! that fails; the error reaches the user typed, however many workers ran the stage that failed.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn run(spec: &Path, out: &Path, workers: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capflow"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["-w", workers])
        .output()
        .unwrap()
}

fn write_spec(dir: &Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("spec.toml");
    std::fs::write(&path, format!("name = \"exit-codes\"\n{body}")).unwrap();
    path
}

fn assert_exit(output: &Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
}

/// The embedded sample's Flickr30k Entities and AMR inputs, as absolute paths.
fn sample_inputs() -> String {
    let data = common::repo_root().join("examples/data");
    format!(
        "[[inputs]]\nformat = \"flickr30k-entities\"\npaths = [\"{}\"]\n\n\
         [[inputs]]\nformat = \"penman\"\npaths = [\"{}\"]\n",
        data.join("flickr30k_entities").display(),
        data.join("amr/captions.amr").display()
    )
}

#[test]
fn a_missing_or_unreadable_input_is_an_io_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = write_spec(
        tmp.path(),
        "[[inputs]]\nformat = \"penman\"\npaths = [\"no-such.amr\"]\n",
    );
    for workers in ["1", "2"] {
        let output = run(&missing, &tmp.path().join("out-missing"), workers);
        assert_exit(&output, 4, "no-such.amr");
    }
    // A directory where a PENMAN file is expected cannot be read.
    std::fs::create_dir(tmp.path().join("graphs.amr")).unwrap();
    let directory = write_spec(
        tmp.path(),
        "[[inputs]]\nformat = \"penman\"\npaths = [\"graphs.amr\"]\n",
    );
    for workers in ["1", "2"] {
        let output = run(&directory, &tmp.path().join("out-dir"), workers);
        assert_exit(&output, 4, "graphs.amr");
        assert!(!tmp.path().join("out-dir/manifest.json").exists());
    }
}

#[test]
fn a_crashing_adapter_in_a_recipe_is_an_external_model_failure() {
    let tmp = tempfile::tempdir().unwrap();
    // An AMR-to-text adapter that exits before it answers any batch.
    let spec = write_spec(
        tmp.path(),
        &format!(
            "{}\n[ssa]\nrules = \"flickr\"\n\n[models.amr_to_text]\n\
             command = [\"sh\", \"-c\", \"echo adapter gives up >&2; exit 3\"]\n\
             max_restarts = 1\nstartup_timeout_secs = 10\nbatch_timeout_secs = 10\n",
            sample_inputs()
        ),
    );
    for workers in ["1", "2"] {
        let out = tmp.path().join(format!("out-{workers}"));
        let output = run(&spec, &out, workers);
        assert_exit(&output, 5, "amr_to_text");
        assert!(!out.join("manifest.json").exists(), "nothing is committed");
    }
}

#[test]
fn too_few_captions_for_the_quality_scorer_is_bad_input_data() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("captions.json"),
        r#"{"images": [{"id": 1, "width": 4, "height": 3}],
            "annotations": [{"id": 10, "image_id": 1, "caption": "a dog runs"},
                            {"id": 11, "image_id": 1, "caption": "a brown dog"}]}"#,
    )
    .unwrap();
    let spec = write_spec(
        tmp.path(),
        "[[inputs]]\nformat = \"coco-captions\"\npaths = [\"captions.json\"]\n\n[ssa]\n",
    );
    let output = run(&spec, &tmp.path().join("out"), "1");
    assert_exit(&output, 3, "captions");
}

#[test]
fn an_unknown_spec_field_is_a_configuration_error() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "[[inputs]]\nformat = \"penman\"\npaths = [\"a.amr\"]\n\n[no_such_method]\nx = 1\n",
    );
    let output = run(&spec, &tmp.path().join("out"), "1");
    assert_exit(&output, 2, "no_such_method");
}
