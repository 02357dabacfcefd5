//! capflow exits with the code the README gives for what went wrong: 2 usage or configuration
//! (a malformed hostfile included), 3 bad input data (a truncated Parquet input included), 4 I/O
//! (an input that cannot be read, an output that cannot be written), 5 an external model that
//! fails; the error reaches the user typed, however many workers ran the stage that failed.

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

fn capflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capflow"))
        .args(args)
        .output()
        .unwrap()
}

/// `capflow args...` with files limited to `blocks` × 512 bytes (RLIMIT_FSIZE, SIGXFSZ ignored):
/// every write past the limit fails with EFBIG, as on a full disk, whichever writer makes it.
fn capflow_with_file_limit(blocks: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .args([
            "-c",
            "trap '' XFSZ; ulimit -f \"$1\"; shift; exec \"$@\"",
            "sh",
        ])
        .arg(blocks.to_string())
        .arg(env!("CARGO_BIN_EXE_capflow"))
        .args(args)
        .output()
        .unwrap()
}

/// `capflow ingest penman` of the sample's AMR file into `out`.
fn ingest_sample_amrs(out: &Path, file_limit: Option<u64>) -> Output {
    let amr = common::repo_root().join("examples/data/amr/captions.amr");
    let args = [
        "ingest",
        "penman",
        amr.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    match file_limit {
        Some(blocks) => capflow_with_file_limit(blocks, &args),
        None => capflow(&args),
    }
}

/// The Parquet shard of the `amrs` table in a dataset written by [`ingest_sample_amrs`].
fn amrs_shard(dataset: &Path) -> std::path::PathBuf {
    walk(dataset)
        .into_iter()
        .find(|p| {
            p.extension().is_some_and(|e| e == "parquet")
                && p.file_name().unwrap().to_string_lossy().starts_with("amrs")
        })
        .expect("an amrs shard")
}

#[test]
fn a_write_that_fails_for_lack_of_space_is_an_io_error() {
    let tmp = tempfile::tempdir().unwrap();
    // `capflow run` fails in its Arrow IPC spill files.
    let spec = write_spec(tmp.path(), &sample_inputs());
    for workers in ["1", "2"] {
        let out = tmp.path().join(format!("run-{workers}"));
        let output = capflow_with_file_limit(
            2,
            &[
                "run",
                spec.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "-w",
                workers,
            ],
        );
        assert_exit(&output, 4, out.to_str().unwrap());
        assert!(!out.join("manifest.json").exists(), "nothing is committed");
    }
    // `capflow ingest` fails in its Parquet shard writer: in the pages, and when only the
    // footer's last flush is past the limit.
    let whole = tmp.path().join("whole");
    let output = ingest_sample_amrs(&whole, None);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let shard_bytes = std::fs::metadata(amrs_shard(&whole)).unwrap().len();
    for blocks in [2, (shard_bytes - 1) / 512] {
        let out = tmp.path().join(format!("ingest-{blocks}"));
        let output = ingest_sample_amrs(&out, Some(blocks));
        assert_exit(&output, 4, out.to_str().unwrap());
        assert!(!out.join("manifest.json").exists(), "nothing is committed");
    }
}

#[test]
fn a_truncated_parquet_input_is_bad_input_data() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = tmp.path().join("dataset");
    let output = ingest_sample_amrs(&dataset, None);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let shard = amrs_shard(&dataset);
    let bytes = std::fs::read(&shard).unwrap();
    let truncated = tmp.path().join("truncated.parquet");
    // Cut in the middle, and just before the footer's length and magic.
    for cut in [bytes.len() / 2, bytes.len() - 8] {
        std::fs::write(&truncated, &bytes[..cut]).unwrap();
        let out = tmp.path().join(format!("out-{cut}"));
        let output = capflow(&[
            "ingest",
            "capflow",
            truncated.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_exit(&output, 3, "truncated.parquet");
        // The GBC tools read Parquet through their own reader.
        let output = capflow(&["gbc", "stats", truncated.to_str().unwrap()]);
        assert_exit(&output, 3, "truncated.parquet");
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn a_malformed_hostfile_line_is_a_configuration_error() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), &sample_inputs());
    let hostfile = tmp.path().join("hosts.txt");
    for bad in ["localhost", "localhost:http", ":2101", "127.0.0.1:70000"] {
        std::fs::write(
            &hostfile,
            format!("# two processes\n127.0.0.1:2101\n{bad}\n"),
        )
        .unwrap();
        let output = capflow(&[
            "run",
            spec.to_str().unwrap(),
            "--out",
            tmp.path().join("out").to_str().unwrap(),
            "-n",
            "2",
            "-p",
            "0",
            "--hostfile",
            hostfile.to_str().unwrap(),
        ]);
        assert_exit(&output, 2, "hosts.txt, line 3");
        assert_exit(&output, 2, bad);
    }
}

/// Without the `train` feature, a spec that asks for the training sink is refused before any
/// input is read, with the way to build it; with it, a `[train]` table with an unknown key is a
/// configuration error naming the table.
#[test]
fn a_train_table_needs_the_train_feature_and_valid_keys() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        dir.path(),
        &format!(
            "{}\n[ssa]\n\n[train]\nsteps = 5\nno_such_key = 1\n",
            sample_inputs()
        ),
    );
    let output = run(&spec, &dir.path().join("out"), "1");
    if cfg!(feature = "train") {
        assert_exit(&output, 2, "[train]: unknown field `no_such_key`");
    } else {
        assert_exit(&output, 2, "--features train");
    }
    assert!(!dir.path().join("out").exists(), "nothing was written");
}

/// strace, for the tests that inject I/O errors; CI installs it (`.ci/run`).
fn strace() -> Option<&'static str> {
    let found = Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found && std::env::var_os("CAPFLOW_REQUIRE_ORACLES").is_some() {
        panic!("strace is required (CAPFLOW_REQUIRE_ORACLES is set) but not installed");
    }
    found.then_some("strace")
}

/// `capflow args...` whose `K`-th and later reads of `file` fail with EIO, as on a failing disk.
fn capflow_with_read_errors(strace: &str, file: &Path, k: usize, args: &[&str]) -> Output {
    Command::new(strace)
        .args(["-f", "-qq", "-o", "/dev/null", "-P"])
        .arg(file)
        .args([
            "-e",
            "trace=read,pread64,readv,preadv",
            "-e",
            &format!("inject=read,pread64,readv,preadv:error=EIO:when={k}+"),
        ])
        .arg(env!("CARGO_BIN_EXE_capflow"))
        .args(args)
        .output()
        .unwrap()
}

/// How many reads of `file` `capflow args...` makes.
fn reads_of(strace: &str, file: &Path, args: &[&str]) -> usize {
    let trace = tempfile::NamedTempFile::new().unwrap();
    let output = Command::new(strace)
        .args(["-f", "-qq", "-o"])
        .arg(trace.path())
        .arg("-P")
        .arg(file)
        .args(["-e", "trace=read,pread64,readv,preadv"])
        .arg(env!("CARGO_BIN_EXE_capflow"))
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    std::fs::read_to_string(trace.path())
        .unwrap()
        .lines()
        .filter(|l| l.contains("read"))
        .count()
}

/// A disk that fails while an input is read is an I/O failure (exit 4) at every read, the first
/// one or one in the middle of the file, never bad input data: the Parquet reader used to report
/// an error in the middle of a file as corrupt input (exit 3), from its text alone.
#[test]
fn a_read_that_fails_in_the_middle_of_an_input_is_an_io_error() {
    let Some(strace) = strace() else {
        eprintln!("skipped: strace is not installed");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dataset = tmp.path().join("dataset");
    assert_eq!(ingest_sample_amrs(&dataset, None).status.code(), Some(0));
    let shard = amrs_shard(&dataset);
    let data = common::repo_root().join("examples/data");
    let gbc = data.join("gbc/sample_gbc.jsonl");
    let amr = data.join("amr/captions.amr");
    let coco = data.join("detections/instances.json");
    let inputs: [(&str, &Path); 4] = [
        ("capflow", &shard),
        ("gbc", &gbc),
        ("penman", &amr),
        ("coco-instances", &coco),
    ];
    for (format, file) in inputs {
        let out = tmp.path().join(format!("count-{format}"));
        let args = [
            "ingest",
            format,
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        let reads = reads_of(strace, file, &args);
        assert!(reads >= 2, "{format}: {reads} reads");
        for k in 1..=reads {
            let out = tmp.path().join(format!("out-{format}-{k}"));
            let args = [
                "ingest",
                format,
                file.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ];
            let output = capflow_with_read_errors(strace, file, k, &args);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(4),
                "{format}, read {k} of {reads}: {stderr}"
            );
            assert!(
                stderr.contains(file.file_name().unwrap().to_str().unwrap()),
                "{format}, read {k}: {stderr}"
            );
            assert!(!out.join("manifest.json").exists(), "{format}, read {k}");
        }
    }
}

/// A model that cannot be fitted fails with its cause's exit code, here an I/O error (exit 4)
/// for a word-vector file that cannot be read; fitting errors used to be configuration errors
/// (exit 2) whatever their cause.
#[test]
fn a_model_that_cannot_be_fitted_keeps_its_causes_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let vectors = tmp.path().join("no-such-vectors.txt");
    let spec = write_spec(
        tmp.path(),
        &format!(
            "{}\n[relatedness]\nvectors = \"{}\"\n",
            sample_inputs(),
            vectors.display()
        ),
    );
    let output = run(&spec, &tmp.path().join("out"), "1");
    assert_exit(&output, 4, "no-such-vectors.txt");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("fitting the model"),
        "{output:?}"
    );
}
