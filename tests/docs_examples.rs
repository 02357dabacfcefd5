//! Every fenced block of `docs/**/*.md` and `README.md` is executed or checked against the real
//! thing by a test: `every_doc_block_is_executed_or_checked` walks the blocks and fails, naming
//! the file and line, for a block that no entry of `COVERAGE` claims; each entry names the test
//! that runs it (in this file, in `tests/train_docs.rs` for the `train` feature, or in the test
//! file of the method it documents), and that test reads the block from the document itself.
//!
//! Blocks run as shell scripts in a scratch directory that links the repository's `dataflows/`,
//! `examples/`, `tests/`, `scripts/` and `benches/`, with `capflow` on `PATH`; `/tmp/...` and
//! `/data/...` become directories of the scratch directory. Recipe fragments are merged into the
//! recipe they extend and read by `DataflowSpec::from_file`, the parser of `capflow run`. Model
//! tables run with the deterministic stand-in adapter (`tests/adapters/deterministic.py`) in
//! place of the real model's command, every other key as documented.

mod common;
mod doc_blocks;

use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::schema::SampleRow;

use doc_blocks::{
    assert_lines_shown, assert_synopsis, block, blocks_of, commands, covering, doc_blocks, matches,
    required_part, samples, with_stand_ins, Block, Scratch, COVERAGE,
};

#[test]
fn every_doc_block_is_executed_or_checked() {
    let root = common::repo_root();
    let blocks = doc_blocks();
    let unclaimed: Vec<String> = blocks
        .iter()
        .filter(|b| covering(b).is_none())
        .map(|b| {
            format!(
                "{} (```{}): {:?}",
                b.at(),
                b.info,
                b.text.lines().next().unwrap_or("")
            )
        })
        .collect();
    assert!(
        unclaimed.is_empty(),
        "doc blocks no test executes or checks (add a test that runs them and an entry to \
         COVERAGE in tests/doc_blocks/mod.rs, or remove them):\n{}",
        unclaimed.join("\n")
    );
    for (file, start, test_file, test) in COVERAGE {
        assert!(
            blocks
                .iter()
                .any(|b| &b.file == file && b.text.starts_with(start)),
            "COVERAGE names a block of {file} starting with {start:?} that is not there"
        );
        let source = std::fs::read_to_string(root.join(test_file)).unwrap();
        assert!(
            source.contains(&format!("#[test]\nfn {test}()")),
            "COVERAGE names {test_file}'s test {test}, which is not there"
        );
    }
}

/// Each `capflow ...` synopsis names a subcommand whose `--help` lists every option it shows;
/// those of the pages (not README's index) then run, with their required options alone and
/// with every option, placeholders filled in: `eval captions` on the pycocoevalcap debug corpus
/// gives the CIDEr-D the page quotes.
#[test]
fn documented_synopses_run() {
    let files = [
        "docs/metrics.md",
        "docs/parser.md",
        "docs/report.md",
        "README.md",
    ];
    let mut checked = 0;
    for file in files {
        for block in blocks_of(file, "documented_synopses_run") {
            for synopsis in block.text.split("capflow ").skip(1) {
                assert_synopsis(&block.at(), synopsis);
                checked += 1;
            }
        }
    }
    assert!(checked >= 25, "{checked} synopses");

    let Some(coco) = common::fixture("coco") else {
        return;
    };
    let scratch = Scratch::new();
    scratch.sh_ok(
        "a dataset",
        "capflow run dataflows/ssa-flickr30k.toml --out out/ds 2>/dev/null",
    );
    std::fs::write(
        scratch.path().join("captions.txt"),
        "A man rides a bike down the street .\nTwo dogs play in the snow .\n",
    )
    .unwrap();
    let glove = common::fixture("word_vectors/gensim_test_glove.txt").unwrap();
    let places: &[(&str, String)] = &[
        (
            "R.json",
            coco.join("tylin_debug_ref_imageid_to_captions.json")
                .display()
                .to_string(),
        ),
        (
            "H.json",
            coco.join("tylin_hypo_subset_for_debug_ref.json")
                .display()
                .to_string(),
        ),
        ("whitespace|ptb", "whitespace".into()),
        ("DATASET_DIR", "out/ds".into()),
        (
            "--captions FILE",
            "--captions examples/data/generated/test_captions.jsonl".into(),
        ),
        ("--split S", "--split test".into()),
        ("--method M", "--method original".into()),
        ("glove.txt", glove.display().to_string()),
        ("parse-text FILE", "parse-text captions.txt".into()),
        ("--out OUT", "--out parsed.amr".into()),
        ("report DIR", "report out/ds".into()),
        ("REPORT_DIR", "out/report".into()),
        ("SPEC", "dataflows/ssa-flickr30k.toml".into()),
        ("NAME=VALUE ...", "builtin-quality=0.7".into()),
    ];
    let mut ran = 0;
    for file in ["docs/metrics.md", "docs/parser.md", "docs/report.md"] {
        for block in blocks_of(file, "documented_synopses_run") {
            for command in commands(&block.text) {
                let full = command.replace(['[', ']'], "");
                for form in [required_part(&command), full] {
                    let mut form = form;
                    for (placeholder, value) in places {
                        form = form.replace(placeholder, value);
                    }
                    let (_, stdout) = scratch.sh_ok(&block.at(), &form);
                    if form.starts_with("capflow eval captions") && form.contains("whitespace") {
                        let scores: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                        let doc = std::fs::read_to_string(common::repo_root().join(file)).unwrap();
                        let cider = scores["CIDEr"].as_f64().unwrap();
                        let quoted = format!("CIDEr-D {cider}");
                        assert!(
                            doc.match_indices(&quoted).any(|(i, _)| {
                                !doc[i + quoted.len()..].starts_with(|c: char| c.is_ascii_digit())
                            }),
                            "{}: CIDEr-D {cider} is not the page's",
                            block.at()
                        );
                    }
                    ran += 1;
                }
            }
        }
    }
    assert_eq!(ran, 8);
    assert!(scratch.path().join("parsed.amr").is_file());
    assert!(scratch.path().join("out/report").is_dir());
}

/// The blocks that are commands to run as written: each runs in a scratch directory and
/// writes what the page says.
#[test]
fn documented_command_blocks_run() {
    // README: the main job, `cargo run --release --` being the built binary.
    let readme = block("README.md", "cargo run --release -- run");
    let scratch = Scratch::new();
    let script = readme.text.replace("cargo run --release --", "capflow");
    scratch.sh_ok(&readme.at(), &script);
    let out = scratch.path().join("out/ssa-flickr30k");
    assert!(
        samples(&out).iter().any(|s| s.method == "ssa"),
        "{}: no SSA samples in out/ssa-flickr30k",
        readme.at()
    );

    // docs/clid.md: the CLID recipe.
    let clid = block("docs/clid.md", "capflow run dataflows/clid-vg.toml");
    let scratch = Scratch::new();
    scratch.sh_ok(&clid.at(), &clid.text);
    let clid_samples = samples(&scratch.path().join("out/clid"));
    assert!(
        clid_samples.iter().any(|s| s.method == "clid"),
        "{}: no CLID samples",
        clid.at()
    );

    // docs/report.md: a dataset and its report.
    let report = block(
        "docs/report.md",
        "capflow run dataflows/ssa-flickr30k.toml --out out/ssa",
    );
    let scratch = Scratch::new();
    scratch.sh_ok(&report.at(), &report.text);
    for written in ["report.html", "report.json"] {
        assert!(
            scratch
                .path()
                .join("out/ssa/report")
                .join(written)
                .is_file(),
            "{}: no {written} in out/ssa/report (the default REPORT_DIR)",
            report.at()
        );
    }

    // docs/quality.md: the scorer fitted on the sample captions and on a dataset and a COCO
    // captions file, scoring a file of captions.
    let quality = block("docs/quality.md", "capflow quality score --fit");
    let scratch = Scratch::new();
    let lines = "A man rides a bike .\nbike a the the man\n\nA woman holds the rope .\n";
    std::fs::write(scratch.path().join("sentences.txt"), lines).unwrap();
    std::fs::write(scratch.path().join("FILE"), lines).unwrap();
    scratch.sh_ok(
        &quality.at(),
        "capflow run dataflows/ssa-flickr30k.toml --out out/ssa-flickr30k 2>/dev/null",
    );
    std::os::unix::fs::symlink(
        common::repo_root().join("examples/data/coco/captions.json"),
        scratch.path().join("captions_val2014.json"),
    )
    .unwrap();
    for command in commands(&quality.text) {
        let (_, stdout) = scratch.sh_ok(&quality.at(), &command);
        let scores: Vec<&str> = stdout.lines().collect();
        assert_eq!(scores.len(), 4, "{}: {command}: {stdout}", quality.at());
        if command.contains("--with-text") {
            for (score, line) in scores.iter().zip(lines.lines()) {
                assert!(
                    score.ends_with(&format!("\t{line}")),
                    "{}: {score:?}",
                    quality.at()
                );
            }
        }
        let value = |i: usize| -> f64 { scores[i].split('\t').next().unwrap().parse().unwrap() };
        assert_eq!(value(2), 0.0, "{}: an empty line scores 0", quality.at());
        assert!(value(0) > value(1), "{}: {command}: {stdout}", quality.at());
    }
}

/// A hostfile's documented ports replaced by free loopback ports.
fn free_ports(text: &str) -> String {
    let listeners: Vec<std::net::TcpListener> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let mut out = text.to_string();
    for (documented, listener) in ["127.0.0.1:7400", "127.0.0.1:7401"].iter().zip(&listeners) {
        assert!(out.contains(documented), "the hostfile lists {documented}");
        out = out.replace(
            documented,
            &format!("127.0.0.1:{}", listener.local_addr().unwrap().port()),
        );
    }
    out
}

/// docs/cluster.md's two processes on one host, with shared and with separate output
/// directories (then merged): the datasets validate and hold the bytes of a one-process run.
#[test]
fn documented_cluster_runs_run_on_loopback() {
    let blocks = blocks_of("docs/cluster.md", "documented_cluster_runs_run_on_loopback");
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    let single = Scratch::new();
    single.sh_ok(
        "one process",
        "capflow run dataflows/sample.toml --out out/one 2>/dev/null",
    );
    let expected = common::data_files(&single.path().join("out/one"));
    // The second block uses the first one's hostfile.
    let first = &blocks[0].text;
    let end = first.match_indices("HOSTS\n").nth(1).unwrap().0 + "HOSTS\n".len();
    let hostfile = &first[..end];
    for (block, dataset) in blocks.iter().zip(["out/ds", "out/host1"]) {
        let scratch = Scratch::new();
        let script = match block.text.starts_with("cat > hosts") {
            true => block.text.clone(),
            false => format!("{hostfile}{}", block.text),
        };
        scratch.sh_ok(&block.at(), &free_ports(&script));
        let dir = scratch.path().join(dataset);
        scratch.sh_ok(&block.at(), &format!("capflow validate {dataset}"));
        assert_eq!(
            common::data_files(&dir),
            expected,
            "{}: {dataset} differs from a one-process run",
            block.at()
        );
    }
}

/// The embedded Flickr30k Entities data and caption AMRs laid out as an `--input` directory,
/// without the files of image `held_back` (and its AMRs, the last of the PENMAN file) until
/// `land` is called.
struct FlickrInput {
    dir: PathBuf,
    held_back: &'static str,
}

impl FlickrInput {
    fn new(dir: PathBuf) -> FlickrInput {
        let input = FlickrInput {
            dir,
            held_back: "1000020",
        };
        let data = common::repo_root().join("examples/data");
        common::copy_dir(
            &data.join("flickr30k_entities"),
            &input.dir.join("flickr30k_entities"),
        );
        for sub in ["Sentences", "Annotations"] {
            let ext = if sub == "Sentences" { "txt" } else { "xml" };
            std::fs::remove_file(input.dir.join(format!(
                "flickr30k_entities/{sub}/{}.{ext}",
                input.held_back
            )))
            .unwrap();
        }
        let amrs = std::fs::read_to_string(data.join("amr/captions.amr")).unwrap();
        let cut = amrs.find(&format!("# ::id {}.", input.held_back)).unwrap();
        std::fs::create_dir_all(input.dir.join("amr")).unwrap();
        std::fs::write(input.dir.join("amr/captions.amr"), &amrs[..cut]).unwrap();
        // An hour old, as files that arrived long before the run: a file changed in the second
        // a run records it is read again by the next run.
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for path in common::files_under(&input.dir) {
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(past).unwrap();
        }
        input
    }

    /// The held-back image's files arrive and its AMRs are appended.
    fn land(&self) {
        let data = common::repo_root().join("examples/data");
        for (sub, ext) in [("Sentences", "txt"), ("Annotations", "xml")] {
            let name = format!("flickr30k_entities/{sub}/{}.{ext}", self.held_back);
            std::fs::copy(data.join(&name), self.dir.join(&name)).unwrap();
        }
        let amrs = std::fs::read_to_string(data.join("amr/captions.amr")).unwrap();
        std::fs::write(self.dir.join("amr/captions.amr"), amrs).unwrap();
    }
}

/// docs/incremental.md: the rerun after new files land prints the documented lines, the
/// documented `inspect` of an old version and the watcher run.
#[test]
fn documented_incremental_rerun_runs() {
    let scratch = Scratch::new();
    let input = FlickrInput::new(scratch.path().join("data/flickr"));
    let rerun = block(
        "docs/incremental.md",
        "capflow run dataflows/ssa-flickr30k.toml --input /data/flickr --out /data/ssa --state",
    );
    let lines: Vec<&str> = rerun.text.lines().collect();
    let (first, landing, second, printed) = (lines[0], lines[1], lines[2], &lines[3..]);
    assert_eq!(landing, "# ... new files land in /data/flickr ...");
    scratch.sh_ok(&rerun.at(), &scratch.localize(first));
    input.land();
    let (stderr, _) = scratch.sh_ok(&rerun.at(), &scratch.localize(second));
    assert_lines_shown(&rerun.at(), &printed.join("\n"), &stderr);
    let versions = capflow::export::read_manifest(&scratch.path().join("data/ssa"))
        .unwrap()
        .version;
    assert_eq!(versions, 2, "{}: two versions", rerun.at());

    // `capflow inspect` of the rerun's version names the models it kept.
    let summary = block("docs/incremental.md", "dataset /data/ssa");
    let (_, stdout) = scratch.sh_ok(
        &summary.at(),
        &scratch.localize("capflow inspect /data/ssa"),
    );
    let stdout = stdout.replace(&scratch.path().display().to_string(), "");
    assert_lines_shown(&summary.at(), &summary.text, &stdout);

    // The state's models file has the documented fields.
    let shown = block("docs/incremental.md", "{\n  \"format\": \"capflow-models\"");
    let fields: Vec<&str> = shown
        .text
        .lines()
        .filter_map(|line| line.trim().strip_prefix('"')?.split('"').next())
        .collect();
    let kept: serde_json::Value = serde_json::from_slice(
        &std::fs::read(scratch.path().join("data/ssa.state/models.json")).unwrap(),
    )
    .unwrap();
    let kept_fields: Vec<&str> = kept
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, kept_fields, "{}", shown.at());
    assert_eq!(kept["format"], "capflow-models", "{}", shown.at());

    // A fresh run with the models the state keeps writes the rerun's bytes.
    let check = block(
        "docs/incremental.md",
        "capflow run dataflows/ssa-flickr30k.toml --input /data/flickr --out /data/ssa-check",
    );
    scratch.sh_ok(&check.at(), &scratch.localize(check.text.trim()));
    assert_eq!(
        common::data_files(&scratch.path().join("data/ssa-check")),
        common::data_files(&scratch.path().join("data/ssa")),
        "{}: the fresh run with the kept models is the rerun",
        check.at()
    );
    let fresh = first.replace(
        "--out /data/ssa --state /data/ssa.state",
        "--out /data/ssa-fresh",
    );
    assert_ne!(fresh, first);
    scratch.sh_ok(&rerun.at(), &scratch.localize(&fresh));

    let inspect = block("docs/incremental.md", "capflow inspect /data/ssa");
    for command in commands(&inspect.text) {
        for form in [required_part(&command), command.replace(['[', ']'], "")] {
            let (_, stdout) = scratch.sh_ok(&inspect.at(), &scratch.localize(&form));
            assert!(
                stdout.contains("version 1"),
                "{}: {form}: {stdout}",
                inspect.at()
            );
        }
    }

    let watch = block("docs/incremental.md", "capflow watch");
    let command = &commands(&watch.text)[0];
    let command = command
        .replace("/data/ssa ", "/data/ssa-watch ")
        .replace("--state DIR", "--state /data/ssa-watch.state")
        .replace("--max-commits N", "--max-commits 1")
        .replace("-w N", "-w 2");
    // Every option once, so the watcher stops after its first commit.
    let form = command.replace(['[', ']'], "");
    scratch.sh_ok(&watch.at(), &scratch.localize(&form));
    // The watcher's first commit fits the models on every input, as a fresh run does.
    let watched = scratch.path().join("data/ssa-watch");
    assert_eq!(
        common::data_files(&watched),
        common::data_files(&scratch.path().join("data/ssa-fresh")),
        "{}: the watcher's dataset is a fresh run's",
        watch.at()
    );
}

/// The request batches a stand-in adapter logged (`--log`): rows per batch.
fn logged_batches(log: &Path) -> Vec<usize> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        // Multi-line inputs (PENMAN graphs) continue on lines without a count.
        .filter_map(|l| l.split_once('\t').and_then(|(n, _)| n.parse().ok()))
        .collect()
}

/// The `max_batch_size` a block's `[models.<kind>]` table sets.
fn max_batch_size(block: &Block, kind: &str) -> usize {
    let table: toml::Table = toml::from_str(&block.text).unwrap();
    table["models"][kind]["max_batch_size"]
        .as_integer()
        .unwrap() as usize
}

/// docs/adapters.md's two Python adapters (with and without the helper) as SSA's quality
/// scorer: every SSA sample carries the score they compute, min(1, characters / 100).
#[test]
fn documented_python_adapters_serve_the_quality_filter() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let blocks = blocks_of(
        "docs/adapters.md",
        "documented_python_adapters_serve_the_quality_filter",
    );
    assert_eq!(blocks.len(), 2);
    for (i, block) in blocks.iter().enumerate() {
        let scratch = Scratch::new();
        let script = scratch.path().join("adapter.py");
        std::fs::write(&script, &block.text).unwrap();
        let table = format!(
            "[models.quality_scorer]\ncommand = [{:?}, {:?}]\n",
            python.display().to_string(),
            script.display().to_string()
        );
        let recipe = scratch.recipe_with(
            &block.at(),
            "dataflows/ssa-flickr30k.toml",
            &table,
            &format!("adapter-{i}"),
            |t| {
                // Scores of short sentences: keep what scores above 0.2.
                t["ssa"]["quality_threshold"] = toml::Value::Float(0.2);
            },
        );
        scratch.sh_ok(
            &block.at(),
            &format!("capflow run {} --out out/ds", recipe.display()),
        );
        let ssa: Vec<SampleRow> = samples(&scratch.path().join("out/ds"))
            .into_iter()
            .filter(|s| s.method == "ssa")
            .collect();
        assert!(!ssa.is_empty(), "{}: no SSA sample passed", block.at());
        for sample in &ssa {
            let score = sample
                .quality
                .iter()
                .find(|q| q.name == "quality_scorer")
                .unwrap_or_else(|| panic!("{}: {sample:?} has no quality_scorer", block.at()))
                .value;
            let expected = (sample.text.chars().count() as f64 / 100.0).min(1.0);
            assert!(
                (score - expected).abs() < 1e-9,
                "{}: {:?} scored {score}, expected {expected}",
                block.at(),
                sample.text
            );
        }
    }
}

/// docs/adapters.md's and docs/relatedness.md's model tables, each in a recipe of the method
/// that calls it, with the stand-in adapter in place of the model: the runs succeed, call the
/// adapter, and send batches no larger than the table's `max_batch_size`.
#[test]
fn documented_model_tables_run_with_the_stand_in() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let amrs = common::repo_root().join("examples/data/amr/captions.amr");
    let amrs = amrs.display().to_string();
    let scratch = Scratch::new();
    let log = |kind: &str| scratch.path().join(format!("{kind}.log"));
    let log_arg = |kind: &str| log(kind).display().to_string();

    // SSA from captions: the parser and the quality scorer.
    let parse = block("docs/adapters.md", "[models.text_to_amr]");
    let score = block("docs/adapters.md", "[models.quality_scorer]");
    let (parse_log, score_log) = (log_arg("text_to_amr"), log_arg("quality_scorer"));
    let recipe = scratch.recipe_with(
        &parse.at(),
        "dataflows/ssa-flickr30k-text.toml",
        &format!("{}\n{}", parse.text, score.text),
        "text",
        |t| {
            with_stand_ins(
                t,
                &python,
                &[
                    ("text_to_amr", &["--amr-from", &amrs, "--log", &parse_log]),
                    ("quality_scorer", &["--log", &score_log]),
                ],
            )
        },
    );
    scratch.sh_ok(
        &parse.at(),
        &format!("capflow run {} --out out/text", recipe.display()),
    );
    let batches = logged_batches(&log("text_to_amr"));
    assert_eq!(
        batches.iter().sum::<usize>(),
        100,
        "{}: every caption parsed",
        parse.at()
    );
    let most = max_batch_size(&parse, "text_to_amr");
    assert!(
        batches.iter().all(|&n| n <= most),
        "{}: {batches:?}",
        parse.at()
    );
    assert!(
        !logged_batches(&log("quality_scorer")).is_empty(),
        "{}",
        score.at()
    );
    assert!(
        samples(&scratch.path().join("out/text"))
            .iter()
            .filter(|s| s.method == "ssa")
            .all(|s| s.quality.iter().any(|q| q.name == "quality_scorer")),
        "{}: SSA samples scored by the adapter",
        score.at()
    );

    // SSA and relatedness in one recipe: the generator and the embedder.
    let generate = block("docs/adapters.md", "[models.amr_to_text]");
    let (generate_log, embed_log) = (log_arg("amr_to_text"), log_arg("embedder"));
    let relatedness: toml::Table = toml::from_str(
        &std::fs::read_to_string(common::repo_root().join("dataflows/relatedness.toml")).unwrap(),
    )
    .unwrap();
    let recipe = scratch.recipe_with(
        &generate.at(),
        "dataflows/ssa-flickr30k.toml",
        &generate.text,
        "generate",
        |t| {
            t.insert("relatedness".into(), relatedness["relatedness"].clone());
            let detections = relatedness["inputs"].as_array().unwrap()[1].clone();
            t["inputs"].as_array_mut().unwrap().push(detections);
            with_stand_ins(
                t,
                &python,
                &[
                    ("amr_to_text", &["--log", &generate_log]),
                    ("embedder", &["--log", &embed_log]),
                ],
            )
        },
    );
    scratch.sh_ok(
        &generate.at(),
        &format!("capflow run {} --out out/generate", recipe.display()),
    );
    let batches = logged_batches(&log("amr_to_text"));
    let most = max_batch_size(&generate, "amr_to_text");
    assert!(
        !batches.is_empty(),
        "{}: the generator is called",
        generate.at()
    );
    assert!(
        batches.iter().all(|&n| n <= most),
        "{}: {batches:?}",
        generate.at()
    );
    assert!(
        !logged_batches(&log("embedder")).is_empty(),
        "{}",
        generate.at()
    );

    // docs/relatedness.md's encoder in the relatedness recipe.
    let encoder = block("docs/relatedness.md", "[models.embedder]");
    let relatedness_log = log_arg("relatedness-embedder");
    let recipe = scratch.recipe_with(
        &encoder.at(),
        "dataflows/relatedness.toml",
        &encoder.text,
        "relatedness",
        |t| with_stand_ins(t, &python, &[("embedder", &["--log", &relatedness_log])]),
    );
    scratch.sh_ok(
        &encoder.at(),
        &format!("capflow run {} --out out/relatedness", recipe.display()),
    );
    assert!(
        !logged_batches(&log("relatedness-embedder")).is_empty(),
        "{}: the encoder is called",
        encoder.at()
    );
}

/// docs/adapters.md's failure message is the one a crashing quality scorer gives.
#[test]
fn documented_adapter_failure_is_reported_as_shown() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let shown = block("docs/adapters.md", "capflow: error: stage `quality-filter`");
    let scratch = Scratch::new();
    let recipe = scratch.recipe_with(
        &shown.at(),
        "dataflows/ssa-flickr30k.toml",
        "[models.quality_scorer]\ncommand = [\"python3\"]\nmax_restarts = 0\n",
        "crash",
        |t| with_stand_ins(t, &python, &[("quality_scorer", &["--crash-on", " "])]),
    );
    let out = scratch.sh(&format!("capflow run {} --out out/ds", recipe.display()));
    assert_eq!(out.status.code(), Some(5), "{}: {out:?}", shown.at());
    assert_lines_shown(
        &shown.at(),
        &shown.text,
        &String::from_utf8_lossy(&out.stderr),
    );
}

/// Each install line of docs/adapters.md installs what the adapter of its section imports,
/// and every example adapter answers `--help` without its model library.
#[test]
fn documented_installs_are_what_the_adapters_import() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let doc = std::fs::read_to_string(common::repo_root().join("docs/adapters.md")).unwrap();
    // Packages by the name they are imported under.
    let imported_as = [
        ("transition-neural-parser", "transition_amr_parser"),
        ("amrlib", "amrlib"),
        ("sentence-transformers", "sentence_transformers"),
        ("open_clip_torch", "open_clip"),
        ("pillow", "PIL"),
        ("pyarrow", "pyarrow"),
        ("GRUEN/requirements.txt", "Main"),
    ];
    let blocks = blocks_of(
        "docs/adapters.md",
        "documented_installs_are_what_the_adapters_import",
    );
    assert_eq!(blocks.len(), 5);
    for block in blocks {
        // The section's heading names its adapters.
        let before = doc.lines().take(block.line).collect::<Vec<_>>();
        let heading = before.iter().rev().find(|l| l.starts_with("### ")).unwrap();
        let scripts: Vec<&str> = heading.split('`').skip(1).step_by(2).collect();
        assert!(!scripts.is_empty(), "{}: {heading}", block.at());
        let command = &commands(&block.text)[0];
        let packages: Vec<&str> = command
            .split_whitespace()
            .filter(|w| {
                !w.starts_with('-') && !["pip", "install", "git", "clone", "&&"].contains(w)
            })
            .filter(|w| !w.starts_with("https://"))
            .collect();
        for script in scripts {
            let path = common::repo_root().join("examples/adapters").join(script);
            let source = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {script}: {e}", block.at()));
            for package in &packages {
                let (_, module) = imported_as
                    .iter()
                    .find(|(p, _)| p == package)
                    .unwrap_or_else(|| panic!("{}: unknown package {package}", block.at()));
                let pyarrow_by_helper = *module == "pyarrow" && source.contains("capflow_adapter");
                assert!(
                    source.contains(&format!("import {module}"))
                        || source.contains(&format!("from {module}"))
                        || pyarrow_by_helper,
                    "{}: {script} does not import {module} ({package})",
                    block.at()
                );
            }
            let out = Command::new(&python)
                .arg(&path)
                .arg("--help")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {script} --help: {}",
                block.at(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The build and test commands the pages show name scripts, features and test targets that
/// exist (running them would run the whole build inside a test).
#[test]
fn documented_build_and_test_commands_name_real_targets() {
    let root = common::repo_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let mut checked = 0;
    for file in ["docs/adapters.md", "docs/train.md", "README.md"] {
        for block in blocks_of(file, "documented_build_and_test_commands_name_real_targets") {
            for command in commands(&block.text) {
                let words: Vec<&str> = command.split_whitespace().collect();
                for (i, word) in words.iter().enumerate() {
                    let next = words.get(i + 1).copied().unwrap_or("");
                    match *word {
                        "bash" => assert!(root.join(next).is_file(), "{}: {next}", block.at()),
                        "--test" => assert!(
                            root.join(format!("tests/{next}.rs")).is_file(),
                            "{}: no test {next}",
                            block.at()
                        ),
                        "--features" => assert!(
                            manifest.contains(&format!("\n{next} = [")),
                            "{}: no feature {next}",
                            block.at()
                        ),
                        w if w.starts_with("CAPFLOW_ORACLE_PYTHON=") => {
                            let common =
                                std::fs::read_to_string(root.join("tests/common/mod.rs")).unwrap();
                            assert!(common.contains("\"CAPFLOW_ORACLE_PYTHON\""));
                            assert_eq!(
                                &w["CAPFLOW_ORACLE_PYTHON=".len()..],
                                ".venv-oracles/bin/python",
                                "{}: the oracle venv of scripts/setup-oracles.sh",
                                block.at()
                            );
                        }
                        _ => {}
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 4, "{checked} commands");
}

/// The SSA recipe run into `out` (relative to the scratch directory) on the sample data less
/// one image, then again after that image's files arrived: a dataset of two versions.
fn two_versions(scratch: &Scratch, out: &str) -> PathBuf {
    let input = FlickrInput::new(scratch.path().join("data/flickr"));
    let run = format!(
        "capflow run dataflows/ssa-flickr30k.toml --input data/flickr --out {out} 2>/dev/null"
    );
    scratch.sh_ok("a run", &run);
    input.land();
    scratch.sh_ok("a rerun", &run);
    scratch.path().join(out)
}

/// docs/datasets.md's and README's directory layout and the card's header are those of a run
/// with two versions.
#[test]
fn documented_dataset_layout_and_card_are_a_runs() {
    let scratch = Scratch::new();
    let dir = two_versions(&scratch, "out/ds");
    let files: Vec<String> = common::files_under(&dir)
        .iter()
        .map(|path| format!("DIR/{}", path.strip_prefix(&dir).unwrap().display()))
        .collect();
    for file in ["docs/datasets.md", "README.md"] {
        let layout = block(file, "DIR/manifest.json");
        for line in layout.text.lines() {
            let pattern = line
                .split_whitespace()
                .next()
                .unwrap()
                .replace("NNNNN", "00000");
            assert!(
                files.iter().any(|f| matches(&pattern, f)),
                "{}: no file is {pattern}: {files:?}",
                layout.at()
            );
        }
    }

    let card = block("docs/datasets.md", "---");
    let written = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let header: String = written
        .split("---\n")
        .nth(1)
        .map(|h| format!("---\n{h}---\n"))
        .unwrap();
    for line in card.text.lines().filter(|l| l.trim() != "...") {
        // Shard names end in their content's hash.
        let line = match line.rfind('-') {
            Some(i) if line.ends_with(".parquet\"") => format!("{}-<hash>.parquet\"", &line[..i]),
            _ => line.to_string(),
        };
        assert!(
            header.lines().any(|h| matches(&line, h)),
            "{}: the card's header has no line {line:?}:\n{header}",
            card.at()
        );
    }
}

/// docs/datasets.md's Delta Lake example on a dataset of two versions (a run, then a rerun
/// after an image's files arrived), then its `capflow vacuum`: before it, a glob over the
/// samples' directory counts both versions' rows; after it, the manifest's. Then its `capflow
/// optimize`, after which the example reads the same rows.
#[test]
fn documented_delta_reads_and_vacuum_run() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let example = block("docs/datasets.md", "from deltalake import DeltaTable");
    let vacuum = block("docs/datasets.md", "capflow vacuum out/ssa --retain 1");
    let optimize = block("docs/datasets.md", "capflow optimize out/ssa");
    let scratch = Scratch::new();
    let dir = two_versions(&scratch, "out/ssa");
    let manifest = capflow::export::read_manifest(&dir).unwrap();
    assert_eq!(manifest.version, 2);
    let python_run = |script: &str| {
        let out = Command::new(&python)
            .arg("-c")
            .arg(script)
            .current_dir(scratch.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            example.at(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let printed = python_run(&format!(
        "{}\nprint(samples.to_pyarrow_table().num_rows)\n\
         print(pl.read_delta('out/ssa/data/captions').height)\n\
         import pyarrow as pa\n\
         print(pa.RecordBatchReader.from_stream(\
         samples.load_cdf(starting_version=1, ending_version=1)).read_all().num_rows)\n",
        example.text
    ));
    let lines: Vec<u64> = printed.lines().map(|l| l.parse().unwrap()).collect();
    let changes = manifest.changelog.as_ref().unwrap();
    assert_eq!(
        lines,
        [
            manifest.tables["samples"].rows,
            manifest.tables["captions"].rows,
            changes.added + changes.retracted
        ],
        "{}",
        example.at()
    );
    let glob = "import duckdb\nprint(duckdb.sql(\"select count(*) from \
                read_parquet('out/ssa/data/samples/**/*.parquet')\").fetchall()[0][0])";
    let before: u64 = python_run(glob).trim().parse().unwrap();
    assert!(before > manifest.tables["samples"].rows, "{before}");
    scratch.sh_ok(&vacuum.at(), &vacuum.text);
    let after: u64 = python_run(glob).trim().parse().unwrap();
    assert_eq!(after, manifest.tables["samples"].rows, "{}", vacuum.at());
    let report = capflow::export::validate(&dir).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);

    // Then its `capflow optimize`: a third version, the same rows in one file per table and
    // split, read by Delta's readers.
    scratch.sh_ok(&optimize.at(), &optimize.text);
    let optimized = capflow::export::read_manifest(&dir).unwrap();
    assert_eq!(optimized.version, 3, "{}", optimize.at());
    for (table, summary) in &optimized.tables {
        assert_eq!(summary.rows, manifest.tables[table].rows, "{table}");
        assert_eq!(summary.files, summary.splits.len() as u64, "{table}");
    }
    assert!(optimized.files.len() < manifest.files.len());
    // (The vacuum removed the first version's files: no time travel to it now.)
    let printed = python_run(
        "from deltalake import DeltaTable\nimport polars as pl\n\
         print(DeltaTable('out/ssa/data/samples').to_pyarrow_table().num_rows)\n\
         print(pl.read_delta('out/ssa/data/captions').height)\n",
    );
    let lines: Vec<u64> = printed.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(
        lines,
        [
            manifest.tables["samples"].rows,
            manifest.tables["captions"].rows
        ],
        "{}",
        optimize.at()
    );
    let report = capflow::export::validate(&dir).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

/// docs/datasets.md's `datasets` example, run as written on an SSA dataset at the path it
/// names.
#[test]
fn documented_datasets_loading_runs() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let example = block("docs/datasets.md", "import datasets");
    let scratch = Scratch::new();
    scratch.sh_ok(
        &example.at(),
        "capflow run dataflows/ssa-flickr30k.toml --out out/ssa-flickr30k 2>/dev/null",
    );
    let dir = scratch.path().join("out/ssa-flickr30k");
    let manifest = capflow::export::read_manifest(&dir).unwrap();
    let validation = capflow::export::read_table(&dir, capflow::schema::TableKind::Captions)
        .unwrap()
        .flat_map(|b| capflow::schema::batch_to_rows(&b.unwrap()).unwrap())
        .filter(|c: &capflow::schema::CaptionRow| c.split == "validation")
        .count();
    let script = format!(
        "{}\nprint(len(samples['train']) + len(samples['validation']) + len(samples['test']))\n\
         print(len(val_captions))\n\
         print(' '.join(sorted(datasets.get_dataset_config_names('out/ssa-flickr30k'))))\n",
        example.text
    );
    let out = common::hf_offline(Command::new(&python).arg("-c").arg(&script), scratch.path())
        .current_dir(scratch.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        example.at(),
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(
        lines[0].parse::<u64>().unwrap(),
        manifest.tables["samples"].rows,
        "{}",
        example.at()
    );
    assert_eq!(
        lines[1].parse::<usize>().unwrap(),
        validation,
        "{}",
        example.at()
    );
    let with_rows: Vec<&str> = manifest
        .tables
        .iter()
        .filter(|(_, t)| t.rows > 0)
        .map(|(name, _)| name.as_str())
        .filter(|name| *name != "rejected")
        .collect();
    assert_eq!(lines[2], with_rows.join(" "), "{}", example.at());
}

/// The recipe tables of docs/mixing.md, docs/relatedness.md, docs/cutswap.md,
/// docs/datasets.md and docs/incremental.md, each in the recipe it configures, run.
#[test]
fn documented_recipe_tables_run() {
    let scratch = Scratch::new();
    let run = |at: &str, recipe: &Path, out: &str| -> String {
        scratch
            .sh_ok(at, &format!("capflow run {} --out {out}", recipe.display()))
            .0
    };

    // [mix]: all, random 50 %, uniform coverage with a 30 % budget.
    let mixes = blocks_of("docs/mixing.md", "documented_recipe_tables_run");
    assert_eq!(mixes.len(), 3);
    let mut augmented = Vec::new();
    for (i, mix) in mixes.iter().enumerate() {
        let recipe = scratch.recipe_with(
            &mix.at(),
            "dataflows/ssa-flickr30k.toml",
            &mix.text,
            &format!("mix-{i}"),
            |_| {},
        );
        run(&mix.at(), &recipe, &format!("out/mix-{i}"));
        let rows = samples(&scratch.path().join(format!("out/mix-{i}")));
        let originals = rows.iter().filter(|s| s.method == "original").count();
        assert_eq!(originals, 100, "{}: every original sample kept", mix.at());
        augmented.push(rows.len() - originals);
    }
    let all = augmented[0];
    assert!(all >= 10, "{all} SSA samples");
    assert_eq!(
        augmented[1],
        (all as f64 * 0.5).round() as usize,
        "{}: 50 %",
        mixes[1].at()
    );
    assert!(
        augmented[2] <= (all as f64 * 0.3).ceil() as usize && augmented[2] > 0,
        "{}: at most 30 % of {all}: {}",
        mixes[2].at(),
        augmented[2]
    );

    // [relatedness]: the defaults, as the page says.
    let relatedness = block("docs/relatedness.md", "[relatedness]");
    let recipe = scratch.recipe_with(
        &relatedness.at(),
        "dataflows/relatedness.toml",
        &relatedness.text,
        "relatedness",
        |_| {},
    );
    let spec = capflow::dataflow::DataflowSpec::from_file(&recipe).unwrap();
    assert_eq!(
        spec.relatedness,
        Some(capflow::augment::relatedness::RelatednessConfig::default()),
        "{}: the table shows the defaults",
        relatedness.at()
    );
    run(&relatedness.at(), &recipe, "out/relatedness");
    assert!(samples(&scratch.path().join("out/relatedness"))
        .iter()
        .any(|s| s.method == "relatedness"));

    // [cutswap] and [cutswap.image].
    let cutswap = block("docs/cutswap.md", "[cutswap]");
    let recipe = scratch.recipe_with(
        &cutswap.at(),
        "dataflows/cutswap-images.toml",
        &cutswap.text,
        "cutswap",
        |_| {},
    );
    run(&cutswap.at(), &recipe, "out/cutswap");
    let swaps = samples(&scratch.path().join("out/cutswap"));
    assert!(
        swaps
            .iter()
            .any(|s| s.method == "cutswap" && s.image.is_none()),
        "{}: text swaps",
        cutswap.at()
    );

    // [output]: the card's licence.
    let output = block("docs/datasets.md", "[output]");
    let recipe = scratch.recipe_with(
        &output.at(),
        "dataflows/ssa-flickr30k.toml",
        &output.text,
        "output",
        |_| {},
    );
    scratch.sh_ok(
        &output.at(),
        &format!("capflow run {} 2>/dev/null", recipe.display()),
    );
    let card = std::fs::read_to_string(scratch.path().join("out/ssa-flickr30k/README.md")).unwrap();
    assert!(
        card.contains("license: \"cc-by-4.0\""),
        "{}: {card}",
        output.at()
    );

    // [[models.corpus]]: with a fixed corpus, new captions recompute only their image.
    let corpus = block("docs/incremental.md", "[[models.corpus]]");
    common::copy_dir(
        &common::repo_root().join("examples/data/flickr30k_entities"),
        &scratch.path().join("data/flickr-reference"),
    );
    let input = FlickrInput::new(scratch.path().join("data/flickr"));
    let recipe = scratch.recipe_with(
        &corpus.at(),
        "dataflows/ssa-flickr30k.toml",
        &scratch.localize(&corpus.text),
        "corpus",
        |_| {},
    );
    let rerun = format!(
        "capflow run {} --input data/flickr --out out/corpus --state out/corpus.state",
        recipe.display()
    );
    scratch.sh_ok(&corpus.at(), &rerun);
    input.land();
    let (stderr, _) = scratch.sh_ok(&corpus.at(), &rerun);
    let printed = block("docs/incremental.md", "capflow run ssa-flickr30k: read");
    assert_lines_shown(&printed.at(), &printed.text, &stderr);
    assert!(
        stderr.contains(
            "computing 1 new or changed images, retracting 0 removed, carrying 19 unchanged"
        ),
        "{}: {stderr}",
        printed.at()
    );
}

/// docs/relatedness.md's commands on the reference repository's files (the shared fixtures,
/// under the names the page gives them), each with its required options alone and with every
/// option.
#[test]
fn documented_relatedness_commands_run() {
    let Some(fixtures) = common::fixture("relatedness") else {
        return;
    };
    let shown = block("docs/relatedness.md", "# The pre-trained re-ranker");
    let scratch = Scratch::new();
    for (name, fixture) in [
        ("caption.txt", "pre-trained_caption.txt"),
        (
            "visual-context_label.txt",
            "pre-trained_visual-context_label.txt",
        ),
        (
            "visual-context_prob.txt",
            "pre-trained_visual-context_prob.txt",
        ),
        ("test.tsv", "data_test.tsv"),
        ("train.tsv", "data_train.tsv"),
    ] {
        std::os::unix::fs::symlink(fixtures.join(fixture), scratch.path().join(name)).unwrap();
    }
    // Similarities of the re-ranker's reference output: one per caption.
    let sim: String = std::fs::read_to_string(fixtures.join("pre-trained_Visual_re-ranker.txt"))
        .unwrap()
        .lines()
        .map(|l| format!("{}\n", l.rsplit(',').next().unwrap()))
        .collect();
    std::fs::write(scratch.path().join("sim.txt"), sim).unwrap();
    let vectors = common::fixture("word_vectors").unwrap();
    let glove = std::fs::read_dir(&vectors)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "txt"))
        .expect("a text word-vector fixture");
    std::os::unix::fs::symlink(glove, scratch.path().join("glove.txt")).unwrap();
    let mut ran = 0;
    for (i, command) in commands(&shown.text).iter().enumerate() {
        let full = command.replace(['[', ']'], "");
        for (j, form) in [required_part(command), full].into_iter().enumerate() {
            let form = form.replace("DIR", &format!("out/{i}-{j}"));
            scratch.sh_ok(&shown.at(), &format!("{form} > out-{i}-{j}.txt"));
            ran += 1;
        }
    }
    assert_eq!(ran, 10, "{}", shown.at());
    // The files the page lists.
    for listed in shown.text.lines().filter(|l| l.starts_with("#   DIR/")) {
        let name = listed["#   DIR/".len()..]
            .split_whitespace()
            .next()
            .unwrap();
        let found = std::fs::read_dir(scratch.path().join("out"))
            .unwrap()
            .any(|d| {
                let d = d.unwrap().path();
                std::fs::read_dir(&d).unwrap().any(|f| {
                    let f = f.unwrap().file_name().into_string().unwrap();
                    f == name
                })
            });
        assert!(found, "{}: no command wrote {name}", shown.at());
    }
}

/// docs/realizer.md's example: its imports, its graph and the sentence it asserts.
#[test]
fn documented_realizer_example_holds() {
    use capflow::amr::penman::parse;
    use capflow::amr::realize::Realizer;
    let example = block("docs/realizer.md", "use capflow::amr::penman::parse;");
    assert!(example
        .text
        .contains("use capflow::amr::penman::parse;\nuse capflow::amr::realize::Realizer;\n"));
    let quoted: Vec<&str> = example.text.split('"').skip(1).step_by(2).collect();
    assert_eq!(
        quoted.len(),
        2,
        "{}: the graph and the sentence",
        example.at()
    );
    let graph = parse(quoted[0]).unwrap();
    assert_eq!(
        Realizer::builtin().realize(&graph),
        quoted[1],
        "{}",
        example.at()
    );
}

/// docs/ssa.md: the stages of its diagram are those of a run's manifest, and the lines it
/// shows are those runs print: on the embedded data, with a parser that writes graphs without
/// alignments (the stand-in, as amrlib), and with nothing to parse.
#[test]
fn documented_ssa_stages_and_messages_are_a_runs() {
    let scratch = Scratch::new();
    scratch.sh_ok("ssa", "capflow run dataflows/ssa-coco.toml --out out/coco");
    let diagram = block("docs/ssa.md", "read ─ exchange by image");
    let manifest = capflow::export::read_manifest(&scratch.path().join("out/coco")).unwrap();
    let stages: Vec<&str> = manifest.stages.iter().map(|s| s.name.as_str()).collect();
    let words: Vec<&str> = diagram
        .text
        .split(|c: char| c.is_whitespace() || "─┐├:".contains(c))
        .collect();
    for stage in &stages {
        assert!(
            words.contains(stage),
            "{}: the diagram lacks stage {stage}",
            diagram.at()
        );
    }
    for word in words.iter().filter(|w| w.contains('-')) {
        assert!(
            stages.contains(word),
            "{}: {word} is no stage of {stages:?}",
            diagram.at()
        );
    }

    let printed = block("docs/ssa.md", "ssa: ");
    let (stderr, _) = scratch.sh_ok(
        &printed.at(),
        "capflow run dataflows/ssa-flickr30k.toml --out out/ssa",
    );
    let (first, second) = printed.text.split_once('\n').unwrap();
    assert_lines_shown(&printed.at(), second, &stderr);
    if let Some(python) = common::oracle_python() {
        let amrs = common::repo_root().join("examples/data/amr/captions.amr");
        let recipe = scratch.recipe_with(
            &printed.at(),
            "dataflows/ssa-flickr30k-text.toml",
            "[models.text_to_amr]\ncommand = []\n",
            "unaligned",
            |t| {
                let amrs = amrs.display().to_string();
                with_stand_ins(t, &python, &[("text_to_amr", &["--amr-from", &amrs])])
            },
        );
        let (stderr, _) = scratch.sh_ok(
            &printed.at(),
            &format!("capflow run {} --out out/unaligned", recipe.display()),
        );
        assert_lines_shown(&printed.at(), first, &stderr);
    }

    let warning = block("docs/ssa.md", "warning: ssa: its first stage");
    let recipe = scratch.recipe_with(
        &warning.at(),
        "dataflows/ssa-flickr30k-text.toml",
        "",
        "never",
        |t| {
            t["ssa"]["parse_captions"] = "never".into();
        },
    );
    let (stderr, _) = scratch.sh_ok(
        &warning.at(),
        &format!("capflow run {} --out out/never", recipe.display()),
    );
    assert_lines_shown(&warning.at(), &warning.text, &stderr);
}
