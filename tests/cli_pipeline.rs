//! capflow in a shell pipeline: a command whose stdout reader goes away stops quietly with exit
//! 0 (`capflow schema | head -1`), colour appears only on a terminal and never with `NO_COLOR`,
//! `--json` summaries parse and agree with what was written, `--quiet` and `-v` do what they
//! say, and the same failure gives the same exit code in every command (README, "Command line").

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

/// `capflow` with the caller's log and colour settings taken away.
fn capflow() -> Command {
    let mut command = Command::new(common::capflow_bin());
    command
        .current_dir(common::repo_root())
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR");
    command
}

fn run_capflow(args: &[String]) -> Output {
    capflow().args(args).output().unwrap()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn path(p: &Path) -> String {
    p.to_str().expect("UTF-8 temp path").to_string()
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn sample_amrs() -> PathBuf {
    common::repo_root().join("examples/data/amr/captions.amr")
}

const RECIPE: &str = "dataflows/ssa-flickr30k.toml";

/// Inputs for every command, written once into a temporary directory.
struct Inputs {
    tmp: tempfile::TempDir,
    /// A dataset with samples (the SSA recipe on the sample data).
    dataset: PathBuf,
    matrix: PathBuf,
    refs: PathBuf,
    hyps: PathBuf,
    captions: PathBuf,
}

impl Inputs {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dataset = tmp.path().join("ssa");
        let output = run_capflow(&strings(&["run", RECIPE, "--out", &path(&dataset)]));
        assert!(output.status.success(), "{}", stderr_of(&output));
        let matrix = tmp.path().join("matrix.tsv");
        std::fs::write(&matrix, "0\t1\t4\n1\t0\t3\n4\t3\t0\n").unwrap();
        let refs = tmp.path().join("refs.json");
        std::fs::write(&refs, r#"{"1": ["a dog runs on grass", "a brown dog"]}"#).unwrap();
        let hyps = tmp.path().join("hyps.json");
        std::fs::write(&hyps, r#"{"1": ["a dog runs"]}"#).unwrap();
        // One caption for the first sample of the dataset.
        let (sample_id, text) = first_sample(&dataset);
        let captions = tmp.path().join("captions.jsonl");
        std::fs::write(
            &captions,
            serde_json::json!({"sample_id": sample_id, "caption": text}).to_string() + "\n",
        )
        .unwrap();
        Inputs {
            tmp,
            dataset,
            matrix,
            refs,
            hyps,
            captions,
        }
    }

    fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// A path under the temporary directory that no other call returned (and that does not
    /// exist yet).
    fn fresh(&self, name: &str) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        path(&self.dir().join(format!("{name}-{k}")))
    }

    /// A copy of an ingested dataset with one shard moved into another directory: what
    /// `capflow merge` completes.
    fn dataset_missing_a_shard(&self) -> (String, String) {
        let dataset = self.fresh("merge-into");
        let from = self.fresh("merge-from");
        let output = run_capflow(&strings(&[
            "ingest",
            "penman",
            &path(&sample_amrs()),
            "--out",
            &dataset,
        ]));
        assert!(output.status.success(), "{}", stderr_of(&output));
        let manifest = manifest_json(Path::new(&dataset));
        let shard = manifest["files"][0]["path"].as_str().unwrap().to_string();
        let target = Path::new(&from).join(&shard);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::rename(Path::new(&dataset).join(&shard), &target).unwrap();
        (dataset, from)
    }
}

/// The sample id and text of the first row of a dataset's samples table.
fn first_sample(dir: &Path) -> (String, String) {
    use arrow::array::{Array, StringArray};
    let batch = capflow::export::read_table(dir, capflow::schema::TableKind::Samples)
        .unwrap()
        .next()
        .expect("a samples batch")
        .unwrap();
    let column = |name: &str| -> String {
        let column = batch.column_by_name(name).expect(name);
        let strings = column
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("a string column");
        assert!(strings.len() > 0);
        strings.value(0).to_string()
    };
    (column("sample_id"), column("text"))
}

/// `DIR/manifest.json`, parsed as plain JSON: what a reader other than capflow sees.
fn manifest_json(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// Every command that prints to stdout, with arguments that make it print.
fn printing_commands(inputs: &Inputs) -> Vec<Vec<String>> {
    let amr = path(&sample_amrs());
    let ds = path(&inputs.dataset);
    let matrix = path(&inputs.matrix);
    let (merge_into, merge_from) = inputs.dataset_missing_a_shard();
    let mut commands = vec![
        strings(&["schema"]),
        strings(&["--help"]),
        strings(&["--version"]),
        strings(&["inspect", &ds]),
        strings(&["inspect", &ds, "--json"]),
        strings(&["inspect", &ds, "--rows", "3"]),
        strings(&["validate", &ds]),
        strings(&["validate", &ds, "--json"]),
        strings(&["vacuum", &ds, "--dry-run"]),
        strings(&["vacuum", &ds, "--dry-run", "--json"]),
        strings(&["optimize", &ds, "--dry-run"]),
        strings(&["optimize", &ds, "--dry-run", "--json"]),
        strings(&["ingest", "penman", &amr, "--out", &inputs.fresh("ingest")]),
        strings(&[
            "ingest",
            "penman",
            &amr,
            "--out",
            &inputs.fresh("ingest"),
            "--json",
        ]),
        strings(&["run", RECIPE, "--out", &inputs.fresh("run"), "--json"]),
        strings(&[
            "synth",
            "--images",
            "2",
            "--out",
            &inputs.fresh("synth"),
            "--json",
        ]),
        strings(&["merge", &merge_into, "--from", &merge_from, "--json"]),
        strings(&["report", &ds, "--out", &inputs.fresh("report")]),
        strings(&["amr", "parse", &amr]),
        strings(&["amr", "parse", &amr, "--json"]),
        strings(&["amr", "align", &amr]),
        strings(&["amr", "smatch", &amr, &amr]),
        strings(&["amr", "merge", &amr]),
        strings(&["amr", "inspect", &amr, "--dot"]),
        strings(&["cluster", "upgma", &matrix]),
        strings(&["cluster", "labels", &matrix, "-k", "2"]),
        strings(&["cluster", "hungarian", &matrix]),
        strings(&[
            "eval",
            "captions",
            "--refs",
            &path(&inputs.refs),
            "--hyps",
            &path(&inputs.hyps),
        ]),
        strings(&[
            "eval",
            "controls",
            "--data",
            &ds,
            "--captions",
            &path(&inputs.captions),
        ]),
        strings(&[
            "eval",
            "controls",
            "--data",
            &ds,
            "--captions",
            &path(&inputs.captions),
            "--json",
        ]),
    ];
    if let Some(fixtures) = common::fixtures_dir() {
        let gbc = path(&fixtures.join("gbc/wiki__wiki_gbc_graphs.jsonl"));
        let related = fixtures.join("relatedness");
        let pairs = path(&related.join("data_train.tsv"));
        let file = |name: &str| path(&related.join(name));
        commands.extend([
            strings(&["gbc", "stats", &gbc]),
            strings(&["gbc", "stats", &gbc, "--json"]),
            strings(&["relatedness", "gender", "--input", &pairs]),
            strings(&["relatedness", "search", "--input", &pairs]),
            strings(&[
                "relatedness",
                "rerank",
                "--captions",
                &file("pre-trained_caption.txt"),
                "--visual",
                &file("pre-trained_visual-context_label.txt"),
                "--prob",
                &file("pre-trained_visual-context_prob.txt"),
            ]),
        ]);
    }
    commands
}

/// Runs `args` with stdout the write end of a pipe whose read end is already closed, as after
/// `| head -c0`: every write to it fails with EPIPE.
fn with_stdout_closed(args: &[String]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    capflow()
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn every_printing_command_stops_quietly_when_its_reader_goes_away() {
    let inputs = Inputs::new();
    // Twice the same commands, each writing to outputs of its own.
    for (args, again) in printing_commands(&inputs)
        .into_iter()
        .zip(printing_commands(&inputs))
    {
        // Each prints when stdout is open (or the closed pipe would prove nothing).
        let open = run_capflow(&args);
        assert!(open.status.success(), "{args:?}: {}", stderr_of(&open));
        assert!(!open.stdout.is_empty(), "{args:?} prints nothing on stdout");

        let closed = with_stdout_closed(&again);
        let args = again;
        let stderr = stderr_of(&closed);
        assert_eq!(closed.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert!(!stderr.contains("error"), "{args:?}: {stderr}");
    }
}

#[test]
fn work_is_committed_though_nobody_reads_the_summary() {
    let inputs = Inputs::new();
    let out = inputs.fresh("ingest");
    let closed = with_stdout_closed(&strings(&[
        "ingest",
        "penman",
        &path(&sample_amrs()),
        "--out",
        &out,
    ]));
    assert_eq!(closed.status.code(), Some(0), "{}", stderr_of(&closed));
    assert_eq!(manifest_json(Path::new(&out))["version"], 1);

    // A closed stderr stops neither a run nor its status lines' command, and a failure still
    // exits with its own code.
    let out = inputs.fresh("run");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = capflow()
        .args(["run", RECIPE, "--out", &out])
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(manifest_json(Path::new(&out))["version"], 1);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = capflow()
        .args(["inspect", &inputs.fresh("missing")])
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(4));
}

#[test]
fn a_stdout_that_cannot_be_written_is_an_io_error() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("skipping: no /dev/full");
        return;
    };
    let output = capflow()
        .arg("schema")
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("<stdout>"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Whether `bytes` hold an ANSI escape sequence.
fn has_escape(bytes: &[u8]) -> bool {
    bytes.windows(2).any(|w| w == b"\x1b[")
}

/// Whether `bytes` hold an ANSI colour (SGR) sequence, `ESC [ digits/semicolons m`.
fn has_colour(bytes: &[u8]) -> bool {
    bytes.windows(2).enumerate().any(|(i, w)| {
        w == b"\x1b["
            && bytes[i + 2..]
                .iter()
                .find(|b| !(b.is_ascii_digit() || **b == b';'))
                .is_some_and(|b| *b == b'm')
    })
}

#[test]
fn no_colour_off_a_terminal_or_with_no_color() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, no_color) in [None, Some("1")].into_iter().enumerate() {
        let mut command = capflow();
        command.env("RUST_LOG", "info").args([
            "ingest",
            "penman",
            &path(&sample_amrs()),
            "--out",
            &path(&tmp.path().join(format!("out-{k}"))),
        ]);
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{}", stderr_of(&output));
        // The commit is logged at info level: there is something that could be coloured.
        assert!(
            stderr_of(&output).contains("INFO"),
            "{}",
            stderr_of(&output)
        );
        assert!(!has_escape(&output.stderr), "{}", stderr_of(&output));
        assert!(!has_escape(&output.stdout));
        // A usage error (clap's message) is plain too.
        let mut command = capflow();
        command.arg("--no-such-flag");
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2));
        assert!(!has_escape(&output.stderr), "{}", stderr_of(&output));
    }
}

/// On a terminal (a pseudo-terminal from `script`), logs are coloured unless `NO_COLOR` is set
/// to a non-empty value.
#[test]
fn on_a_terminal_no_color_turns_colour_off() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipping: no `script` to give capflow a terminal");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let on_a_terminal = |k: usize, no_color: Option<&str>| -> Vec<u8> {
        let line = format!(
            "{} ingest penman {} --out {}",
            common::capflow_bin().display(),
            sample_amrs().display(),
            tmp.path().join(format!("out-{k}")).display()
        );
        let mut command = Command::new("script");
        command
            .args(["-qec", &line, "/dev/null"])
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("INFO"),
            "{output:?}"
        );
        output.stdout
    };
    assert!(
        has_colour(&on_a_terminal(0, None)),
        "a terminal gets colour"
    );
    assert!(
        has_colour(&on_a_terminal(1, Some(""))),
        "an empty NO_COLOR is unset"
    );
    assert!(!has_colour(&on_a_terminal(2, Some("1"))));
}

/// Parses stdout as one JSON object: nothing else is printed there.
fn json_of(output: &Output) -> Value {
    assert!(output.status.success(), "{}", stderr_of(output));
    let value: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    assert!(value.is_object(), "{value}");
    value
}

/// The summary fields a `--json` summary shares with the dataset's manifest.
fn assert_agrees_with_manifest(summary: &Value, dir: &Path) {
    let manifest = manifest_json(dir);
    assert_eq!(summary["out"], path(dir));
    assert_eq!(summary["version"], manifest["version"]);
    for count in ["read", "accepted", "rejected"] {
        assert_eq!(summary[count], manifest["counts"][count], "{count}");
    }
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(summary["files"].as_u64(), Some(files.len() as u64));
    let data_rows: u64 = files
        .iter()
        .filter(|f| f["table"] != "rejected")
        .map(|f| f["rows"].as_u64().unwrap())
        .sum();
    assert_eq!(summary["rows"].as_u64(), Some(data_rows));
    let tables = manifest["tables"].as_object().unwrap();
    assert_eq!(summary["tables"].as_object().unwrap().len(), tables.len());
    for (name, table) in tables {
        assert_eq!(summary["tables"][name], table["rows"], "{name}");
    }
    let changes = &manifest["changelog"];
    let (added, retracted) = if changes.is_null() {
        (0, 0)
    } else {
        (
            changes["added"].as_u64().unwrap(),
            changes["retracted"].as_u64().unwrap(),
        )
    };
    assert_eq!(summary["samples_added"].as_u64(), Some(added));
    assert_eq!(summary["samples_retracted"].as_u64(), Some(retracted));
    assert!(summary["elapsed_s"].as_f64().is_some_and(|s| s >= 0.0));
}

#[test]
fn json_summaries_parse_and_agree_with_what_was_written() {
    let tmp = tempfile::tempdir().unwrap();
    let amr_text = std::fs::read_to_string(sample_amrs()).unwrap();
    let graphs = amr_text.lines().filter(|l| l.starts_with("# ::id")).count() as u64;

    // ingest: every graph of the file is a record, each accepted; a second ingest is version 2.
    let ingested = tmp.path().join("ingested");
    for version in [1, 2] {
        let summary = json_of(&run_capflow(&strings(&[
            "ingest",
            "penman",
            &path(&sample_amrs()),
            "--out",
            &path(&ingested),
            "--json",
        ])));
        assert_agrees_with_manifest(&summary, &ingested);
        assert_eq!(summary["version"], version);
        assert_eq!(summary["format"], "penman");
        assert_eq!(summary["read"].as_u64(), Some(graphs));
        assert_eq!(summary["accepted"].as_u64(), Some(graphs));
        assert_eq!(summary["tables"]["amrs"].as_u64(), Some(graphs));
    }

    // run: the recipe's 100 captions, 100 AMRs and 20 images are read; every sample it wrote
    // was added by this first version.
    let ran = tmp.path().join("ran");
    let summary = json_of(&run_capflow(&strings(&[
        "run",
        RECIPE,
        "--out",
        &path(&ran),
        "--json",
    ])));
    assert_agrees_with_manifest(&summary, &ran);
    assert_eq!(summary["name"], "ssa-flickr30k");
    assert_eq!(summary["version"], 1);
    assert_eq!(summary["read"], 220);
    assert_eq!(summary["samples_added"], summary["tables"]["samples"]);
    assert_eq!(summary["samples_retracted"], 0);

    // validate: what was checked is every file the manifest names, with the bytes on disk.
    let summary = json_of(&run_capflow(&strings(&["validate", &path(&ran), "--json"])));
    let manifest = manifest_json(&ran);
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(summary["valid"], true);
    assert_eq!(summary["version"], 1);
    assert_eq!(summary["problems"], serde_json::json!([]));
    assert_eq!(summary["files_checked"].as_u64(), Some(files.len() as u64));
    let rows: u64 = files.iter().map(|f| f["rows"].as_u64().unwrap()).sum();
    assert_eq!(summary["rows_checked"].as_u64(), Some(rows));
    let bytes: u64 = files
        .iter()
        .map(|f| {
            let file = ran.join(f["path"].as_str().unwrap());
            std::fs::metadata(file).unwrap().len()
        })
        .sum();
    assert_eq!(summary["bytes_checked"].as_u64(), Some(bytes));

    // An invalid dataset: the JSON says so and the exit code is still 3.
    let shard = ran.join(files[0]["path"].as_str().unwrap());
    std::fs::write(&shard, b"not parquet").unwrap();
    let output = run_capflow(&strings(&["validate", &path(&ran), "--json"]));
    assert_eq!(output.status.code(), Some(3), "{}", stderr_of(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["valid"], false);
    assert!(!summary["problems"].as_array().unwrap().is_empty());

    // synth: the counts are those of the files written.
    let synth = tmp.path().join("synth");
    let summary = json_of(&run_capflow(&strings(&[
        "synth",
        "--images",
        "4",
        "--seed",
        "7",
        "--out",
        &path(&synth),
        "--json",
    ])));
    let flickr = synth.join("flickr30k_entities");
    let sentences: Vec<String> = std::fs::read_dir(flickr.join("Sentences"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let captions = sentences.iter().flat_map(|s| s.lines()).count();
    let phrases = sentences
        .iter()
        .map(|s| s.matches("[/EN#").count())
        .sum::<usize>();
    let boxes: usize = std::fs::read_dir(flickr.join("Annotations"))
        .unwrap()
        .map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap()
                .matches("<bndbox>")
                .count()
        })
        .sum();
    let instances: Value =
        serde_json::from_slice(&std::fs::read(synth.join("detections/instances.json")).unwrap())
            .unwrap();
    assert_eq!(summary["images"].as_u64(), Some(sentences.len() as u64));
    assert_eq!(summary["images"], 4);
    assert_eq!(summary["seed"], 7);
    assert_eq!(summary["out"], path(&synth));
    assert_eq!(summary["captions"].as_u64(), Some(captions as u64));
    assert_eq!(summary["phrases"].as_u64(), Some(phrases as u64));
    assert_eq!(summary["boxes"].as_u64(), Some(boxes as u64));
    assert_eq!(
        summary["detections"].as_u64(),
        Some(instances["annotations"].as_array().unwrap().len() as u64)
    );

    // merge: the one shard that was missing is copied back; every file checks out.
    let inputs = Inputs::new();
    let (dataset, from) = inputs.dataset_missing_a_shard();
    let summary = json_of(&run_capflow(&strings(&[
        "merge", &dataset, "--from", &from, "--json",
    ])));
    let manifest = manifest_json(Path::new(&dataset));
    assert_eq!(summary["dataset"], dataset);
    assert_eq!(summary["version"], manifest["version"]);
    assert_eq!(summary["copied"], 1);
    assert_eq!(
        summary["files"].as_u64(),
        Some(manifest["files"].as_array().unwrap().len() as u64)
    );
}

#[test]
fn quiet_leaves_out_status_lines_and_verbose_raises_the_log_level() {
    let tmp = tempfile::tempdir().unwrap();
    let out = |name: &str| path(&tmp.path().join(name));

    let loud = run_capflow(&strings(&["run", RECIPE, "--out", &out("loud")]));
    assert!(stderr_of(&loud).contains("capflow run ssa-flickr30k:"));
    let quiet = run_capflow(&strings(&["-q", "run", RECIPE, "--out", &out("quiet")]));
    assert!(quiet.status.success());
    assert_eq!(stderr_of(&quiet), "");
    assert!(quiet.stdout.is_empty());

    let amr = path(&sample_amrs());
    let loud = run_capflow(&strings(&["ingest", "penman", &amr, "--out", &out("i1")]));
    assert!(String::from_utf8_lossy(&loud.stdout).contains("ingested 100 records"));
    let quiet = run_capflow(&strings(&[
        "ingest",
        "penman",
        &amr,
        "--out",
        &out("i2"),
        "--quiet",
    ]));
    assert!(quiet.status.success());
    assert!(
        quiet.stdout.is_empty() && quiet.stderr.is_empty(),
        "{quiet:?}"
    );
    // --json still prints under --quiet: it is the command's output.
    let json = json_of(&run_capflow(&strings(&[
        "-q",
        "validate",
        &out("i2"),
        "--json",
    ])));
    assert_eq!(json["valid"], true);
    let quiet = run_capflow(&strings(&["-q", "validate", &out("i2")]));
    assert!(
        quiet.status.success() && quiet.stdout.is_empty(),
        "{quiet:?}"
    );
    let quiet = run_capflow(&strings(&[
        "-q",
        "synth",
        "--images",
        "1",
        "--out",
        &out("s"),
    ]));
    assert!(
        quiet.status.success() && quiet.stderr.is_empty(),
        "{quiet:?}"
    );

    // Errors print under --quiet.
    let failed = run_capflow(&strings(&["-q", "inspect", &out("missing")]));
    assert_eq!(failed.status.code(), Some(4));
    assert!(stderr_of(&failed).contains("capflow: error:"));

    // -v logs at info level, -vv at debug level; RUST_LOG wins over both.
    let plain = run_capflow(&strings(&["ingest", "penman", &amr, "--out", &out("v0")]));
    assert!(!stderr_of(&plain).contains("INFO"));
    let info = run_capflow(&strings(&[
        "-v",
        "ingest",
        "penman",
        &amr,
        "--out",
        &out("v1"),
    ]));
    assert!(stderr_of(&info).contains("INFO"), "{}", stderr_of(&info));
    assert!(!stderr_of(&info).contains("DEBUG"));
    let debug = run_capflow(&strings(&["-vv", "run", RECIPE, "--out", &out("v2")]));
    assert!(stderr_of(&debug).contains("DEBUG"), "{}", stderr_of(&debug));
    let overridden = capflow()
        .env("RUST_LOG", "error")
        .args(["-vv", "run", RECIPE, "--out", &out("v3")])
        .output()
        .unwrap();
    assert!(overridden.status.success());
    assert!(!stderr_of(&overridden).contains("DEBUG"));
    assert!(!stderr_of(&overridden).contains("INFO"));
    let overridden = capflow()
        .env("RUST_LOG", "info")
        .args(["-q", "ingest", "penman", &amr, "--out", &out("v4")])
        .output()
        .unwrap();
    assert!(stderr_of(&overridden).contains("INFO"));

    // Both at once is a usage error.
    let both = run_capflow(&strings(&["-q", "-v", "schema"]));
    assert_eq!(both.status.code(), Some(2));
}

/// One failure, the commands that can meet it, and the exit code each must give.
struct FailureClass {
    name: &'static str,
    code: i32,
    cases: Vec<Vec<String>>,
    /// Text every error message holds (the path at fault), if any.
    names: Option<String>,
}

/// The commands that read one file named `file` (each with its own flags).
fn file_reading_commands(file: &str, scratch: &Inputs) -> Vec<Vec<String>> {
    vec![
        strings(&["run", file]),
        strings(&["watch", file, "--input-dir", &path(scratch.dir())]),
        strings(&["ingest", "penman", file, "--out", &scratch.fresh("o")]),
        strings(&["amr", "parse", file]),
        strings(&["amr", "align", file]),
        strings(&["amr", "smatch", file, file]),
        strings(&["amr", "merge", file]),
        strings(&["amr", "inspect", file]),
        strings(&["cluster", "upgma", file]),
        strings(&["cluster", "labels", file, "-k", "2"]),
        strings(&["cluster", "hungarian", file]),
        strings(&["eval", "captions", "--refs", file, "--hyps", file]),
        strings(&["relatedness", "gender", "--input", file]),
        strings(&["relatedness", "search", "--input", file]),
        strings(&[
            "relatedness",
            "label",
            "--input",
            file,
            "--out",
            &scratch.fresh("o"),
        ]),
        strings(&[
            "relatedness",
            "rerank",
            "--captions",
            file,
            "--visual",
            file,
            "--prob",
            file,
        ]),
    ]
}

/// The commands that read a dataset directory `dir`.
fn dataset_reading_commands(dir: &str, inputs: &Inputs) -> Vec<Vec<String>> {
    vec![
        strings(&["inspect", dir]),
        strings(&["validate", dir]),
        strings(&["vacuum", dir, "--dry-run"]),
        strings(&["optimize", dir, "--dry-run"]),
        strings(&["merge", dir, "--from", &path(inputs.dir())]),
        strings(&["report", dir, "--out", &inputs.fresh("report")]),
        strings(&[
            "eval",
            "controls",
            "--data",
            dir,
            "--captions",
            &path(&inputs.captions),
        ]),
    ]
}

#[test]
fn the_same_failure_gives_the_same_exit_code_in_every_command() {
    let inputs = Inputs::new();
    let dir = inputs.dir();
    let missing = path(&dir.join("no-such-input"));
    let a_directory = dir.join("a-directory.amr");
    std::fs::create_dir(&a_directory).unwrap();
    let a_directory = path(&a_directory);
    let garbage = dir.join("garbage.parquet");
    std::fs::write(&garbage, "(not ( a graph\n\tnor a matrix\n{not json").unwrap();
    let garbage = path(&garbage);
    let bad_spec = dir.join("bad-spec.toml");
    std::fs::write(&bad_spec, "[[[ not toml").unwrap();
    let bad_spec = path(&bad_spec);
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let empty = path(&empty);
    let bad_manifest = dir.join("bad-manifest");
    std::fs::create_dir(&bad_manifest).unwrap();
    std::fs::write(bad_manifest.join("manifest.json"), "{not json").unwrap();
    let bad_manifest = path(&bad_manifest);
    let a_file = dir.join("a-file");
    std::fs::write(&a_file, "").unwrap();
    let a_file = path(&a_file);
    let occupied = dir.join("occupied");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("notes.txt"), "mine").unwrap();
    let occupied = path(&occupied);
    let amr = path(&sample_amrs());
    let ds = path(&inputs.dataset);

    let mut missing_cases = file_reading_commands(&missing, &inputs);
    missing_cases.extend(dataset_reading_commands(&missing, &inputs));
    missing_cases.extend([
        strings(&["watch", RECIPE, "--input-dir", &missing]),
        strings(&["ingest", "capflow", &missing, "--out", &inputs.fresh("o")]),
        strings(&["gbc", "stats", &missing]),
        strings(&["gbc", "convert", &missing, &inputs.fresh("o.jsonl")]),
        strings(&["eval", "controls", "--data", &ds, "--captions", &missing]),
    ]);
    let spec_missing_input = dir.join("missing-input.toml");
    std::fs::write(
        &spec_missing_input,
        format!("name = \"m\"\n[[inputs]]\nformat = \"penman\"\npaths = [\"{missing}\"]\n"),
    )
    .unwrap();
    missing_cases.push(strings(&[
        "run",
        &path(&spec_missing_input),
        "--out",
        &inputs.fresh("o"),
    ]));

    let mut malformed = file_reading_commands(&garbage, &inputs);
    // A spec is configuration: a malformed one is a configuration error (below).
    malformed.retain(|args| args[0] != "run" && args[0] != "watch");
    // Bad records never stop an ingest: they go to the rejected-record ledger.
    malformed.retain(|args| args[0] != "ingest");
    malformed.extend(dataset_reading_commands(&bad_manifest, &inputs));
    malformed.extend([
        strings(&["ingest", "capflow", &garbage, "--out", &inputs.fresh("o")]),
        strings(&["gbc", "stats", &garbage]),
        strings(&["gbc", "convert", &garbage, &inputs.fresh("o.jsonl")]),
    ]);

    let usage: Vec<Vec<String>> = [
        "run",
        "watch",
        "merge",
        "schema",
        "ingest",
        "inspect",
        "validate",
        "vacuum",
        "optimize",
        "gbc stats",
        "gbc convert",
        "amr parse",
        "amr align",
        "amr smatch",
        "amr merge",
        "amr inspect",
        "cluster upgma",
        "eval captions",
        "eval controls",
        "relatedness gender",
        "synth",
        "report",
    ]
    .iter()
    .map(|command| {
        let mut args: Vec<String> = command.split(' ').map(String::from).collect();
        args.push("--no-such-flag".into());
        args
    })
    .collect();

    let mut classes = vec![
        FailureClass {
            name: "an input that does not exist",
            code: 4,
            cases: missing_cases,
            names: Some(missing.clone()),
        },
        FailureClass {
            name: "a directory where an input file goes",
            code: 4,
            cases: file_reading_commands(&a_directory, &inputs),
            names: Some(a_directory.clone()),
        },
        FailureClass {
            name: "malformed input data",
            code: 3,
            cases: malformed,
            names: None,
        },
        FailureClass {
            name: "a directory that holds no dataset",
            code: 3,
            cases: dataset_reading_commands(&empty, &inputs),
            names: Some(empty.clone()),
        },
        FailureClass {
            name: "a malformed spec",
            code: 2,
            cases: vec![
                strings(&["run", &bad_spec]),
                strings(&["watch", &bad_spec, "--input-dir", &empty]),
            ],
            names: Some(bad_spec.clone()),
        },
        FailureClass {
            name: "an unknown flag",
            code: 2,
            cases: usage,
            names: Some("--no-such-flag".into()),
        },
        FailureClass {
            name: "a file where the output goes",
            code: 4,
            cases: vec![
                strings(&["run", RECIPE, "--out", &a_file]),
                strings(&["ingest", "penman", &amr, "--out", &a_file]),
                strings(&["synth", "--images", "1", "--out", &a_file]),
                strings(&["report", &ds, "--out", &a_file]),
                strings(&["schema", "--write", &a_file]),
                strings(&["amr", "align", &amr, "--out", &format!("{a_file}/x.amr")]),
            ],
            names: Some(a_file.clone()),
        },
        FailureClass {
            name: "an output directory that holds something other than a dataset",
            code: 2,
            cases: vec![
                strings(&["run", RECIPE, "--out", &occupied]),
                strings(&["ingest", "penman", &amr, "--out", &occupied]),
                strings(&["synth", "--images", "1", "--out", &occupied]),
            ],
            names: Some(occupied.clone()),
        },
    ];
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let locked = dir.join("locked.amr");
        std::fs::copy(sample_amrs(), &locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let locked = path(&locked);
        classes.push(FailureClass {
            name: "an input that may not be read",
            code: 4,
            cases: file_reading_commands(&locked, &inputs),
            names: Some(locked.clone()),
        });
    } else {
        eprintln!("running as root: unreadable files are read anyway; that class is left out");
    }

    let mut wrong = Vec::new();
    for class in &classes {
        for args in &class.cases {
            let output = run_capflow(args);
            let stderr = stderr_of(&output);
            if output.status.code() != Some(class.code) {
                wrong.push(format!(
                    "{}: `capflow {}` exits {:?}, not {}: {stderr}",
                    class.name,
                    args.join(" "),
                    output.status.code(),
                    class.code
                ));
            } else if let Some(name) = &class.names {
                if !stderr.contains(name.as_str()) {
                    wrong.push(format!(
                        "{}: `capflow {}` does not name {name}: {stderr}",
                        class.name,
                        args.join(" ")
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
