//! What the tests of documented examples share: the fenced blocks of the documents, which
//! test covers each (`COVERAGE`), and a scratch directory to run them in.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use capflow::schema::SampleRow;

use super::common;
/// (document, start of the block's first line, test file, test function): the test that runs or
/// checks the block.
pub const COVERAGE: &[(&str, &str, &str, &str)] = &[
    // docs/adapters.md
    (
        "docs/adapters.md",
        "capflow: error: stage `quality-filter`: external model",
        HERE,
        "documented_adapter_failure_is_reported_as_shown",
    ),
    (
        "docs/adapters.md",
        "import sys\nsys.path.insert",
        HERE,
        "documented_python_adapters_serve_the_quality_filter",
    ),
    (
        "docs/adapters.md",
        "import sys, pyarrow as pa",
        HERE,
        "documented_python_adapters_serve_the_quality_filter",
    ),
    (
        "docs/adapters.md",
        "[models.amr_to_text]",
        HERE,
        "documented_model_tables_run_with_the_stand_in",
    ),
    (
        "docs/adapters.md",
        "[models.text_to_amr]",
        HERE,
        "documented_model_tables_run_with_the_stand_in",
    ),
    (
        "docs/adapters.md",
        "[models.quality_scorer]",
        HERE,
        "documented_model_tables_run_with_the_stand_in",
    ),
    (
        "docs/adapters.md",
        "pip install",
        HERE,
        "documented_installs_are_what_the_adapters_import",
    ),
    (
        "docs/adapters.md",
        "git clone https://github.com/WanzhengZhu/GRUEN",
        HERE,
        "documented_installs_are_what_the_adapters_import",
    ),
    (
        "docs/adapters.md",
        "CAPFLOW_ORACLE_PYTHON=",
        HERE,
        "documented_build_and_test_commands_name_real_targets",
    ),
    // docs/clid.md
    (
        "docs/clid.md",
        "capflow run dataflows/clid-vg.toml",
        HERE,
        "documented_command_blocks_run",
    ),
    // docs/cluster.md
    (
        "docs/cluster.md",
        "cat > hosts",
        HERE,
        "documented_cluster_runs_run_on_loopback",
    ),
    (
        "docs/cluster.md",
        "capflow run dataflows/sample.toml --out out/host1",
        HERE,
        "documented_cluster_runs_run_on_loopback",
    ),
    // docs/cutswap.md
    (
        "docs/cutswap.md",
        "capflow run dataflows/cutswap-images.toml",
        "tests/cutswap.rs",
        "the_documented_image_swap_example_loads_pairs_with_datasets",
    ),
    (
        "docs/cutswap.md",
        "from datasets import load_dataset",
        "tests/cutswap.rs",
        "the_documented_image_swap_example_loads_pairs_with_datasets",
    ),
    (
        "docs/cutswap.md",
        "[cutswap]",
        HERE,
        "documented_recipe_tables_run",
    ),
    // docs/datasets.md
    (
        "docs/datasets.md",
        "DIR/manifest.json",
        HERE,
        "documented_dataset_layout_and_card_are_a_runs",
    ),
    (
        "docs/datasets.md",
        "---",
        HERE,
        "documented_dataset_layout_and_card_are_a_runs",
    ),
    (
        "docs/datasets.md",
        "[output]",
        HERE,
        "documented_recipe_tables_run",
    ),
    (
        "docs/datasets.md",
        "import datasets",
        HERE,
        "documented_datasets_loading_runs",
    ),
    (
        "docs/datasets.md",
        "from deltalake import DeltaTable",
        HERE,
        "documented_delta_reads_and_vacuum_run",
    ),
    (
        "docs/datasets.md",
        "capflow vacuum out/ssa --retain 1",
        HERE,
        "documented_delta_reads_and_vacuum_run",
    ),
    (
        "docs/datasets.md",
        "capflow optimize out/ssa",
        HERE,
        "documented_delta_reads_and_vacuum_run",
    ),
    // docs/gbc.md
    (
        "docs/gbc.md",
        "capflow gbc convert",
        "tests/gbc_cli.rs",
        "documented_gbc_commands_run",
    ),
    (
        "docs/gbc.md",
        "capflow gbc filter",
        "tests/gbc_cli.rs",
        "documented_gbc_commands_run",
    ),
    (
        "docs/gbc.md",
        "[detections]",
        "tests/recipes.rs",
        "documented_detections_table_is_the_papers_and_runs",
    ),
    (
        "docs/gbc.md",
        "[gbc.filter]",
        "tests/gbc_cli.rs",
        "documented_gbc_tables_are_the_recipes",
    ),
    (
        "docs/gbc.md",
        "capflow run dataflows/gbc.toml",
        "tests/gbc_cli.rs",
        "documented_gbc_commands_run",
    ),
    // docs/incremental.md
    (
        "docs/incremental.md",
        "capflow run dataflows/ssa-flickr30k.toml --input /data/flickr",
        HERE,
        "documented_incremental_rerun_runs",
    ),
    (
        "docs/incremental.md",
        "{\n  \"format\": \"capflow-models\"",
        HERE,
        "documented_incremental_rerun_runs",
    ),
    (
        "docs/incremental.md",
        "dataset /data/ssa",
        HERE,
        "documented_incremental_rerun_runs",
    ),
    (
        "docs/incremental.md",
        "[[models.corpus]]",
        HERE,
        "documented_recipe_tables_run",
    ),
    (
        "docs/incremental.md",
        "capflow run ssa-flickr30k: read",
        HERE,
        "documented_recipe_tables_run",
    ),
    (
        "docs/incremental.md",
        "capflow inspect /data/ssa",
        HERE,
        "documented_incremental_rerun_runs",
    ),
    (
        "docs/incremental.md",
        "capflow watch",
        HERE,
        "documented_incremental_rerun_runs",
    ),
    // docs/metrics.md
    (
        "docs/metrics.md",
        "capflow eval captions",
        HERE,
        "documented_synopses_run",
    ),
    (
        "docs/metrics.md",
        "capflow eval controls --data DATASET_DIR",
        HERE,
        "documented_synopses_run",
    ),
    (
        "docs/metrics.md",
        "capflow run dataflows/ssa-flickr30k.toml --out out/ssa-flickr30k",
        "tests/eval_controls.rs",
        "documented_example_runs",
    ),
    (
        "docs/metrics.md",
        "examples/data/generated/test_captions.jsonl: 15 of 15",
        "tests/eval_controls.rs",
        "documented_example_runs",
    ),
    // docs/mixing.md
    (
        "docs/mixing.md",
        "[mix]",
        HERE,
        "documented_recipe_tables_run",
    ),
    // docs/parser.md
    (
        "docs/parser.md",
        "capflow amr parse-text",
        HERE,
        "documented_synopses_run",
    ),
    // docs/quality.md
    (
        "docs/quality.md",
        "capflow quality score --fit",
        HERE,
        "documented_command_blocks_run",
    ),
    // docs/realizer.md
    (
        "docs/realizer.md",
        "use capflow::amr::penman::parse;",
        HERE,
        "documented_realizer_example_holds",
    ),
    // docs/relatedness.md
    (
        "docs/relatedness.md",
        "[relatedness]",
        HERE,
        "documented_recipe_tables_run",
    ),
    (
        "docs/relatedness.md",
        "[models.embedder]",
        HERE,
        "documented_model_tables_run_with_the_stand_in",
    ),
    (
        "docs/relatedness.md",
        "# The pre-trained re-ranker",
        HERE,
        "documented_relatedness_commands_run",
    ),
    // docs/report.md
    (
        "docs/report.md",
        "capflow report DIR",
        HERE,
        "documented_synopses_run",
    ),
    (
        "docs/report.md",
        "capflow run dataflows/ssa-flickr30k.toml --out out/ssa",
        HERE,
        "documented_command_blocks_run",
    ),
    // docs/ssa.md
    (
        "docs/ssa.md",
        "read ─ exchange by image",
        HERE,
        "documented_ssa_stages_and_messages_are_a_runs",
    ),
    (
        "docs/ssa.md",
        "ssa: ",
        HERE,
        "documented_ssa_stages_and_messages_are_a_runs",
    ),
    (
        "docs/ssa.md",
        "warning: ssa: its first stage",
        HERE,
        "documented_ssa_stages_and_messages_are_a_runs",
    ),
    // docs/train.md (the `train` feature)
    (
        "docs/train.md",
        "bash scripts/setup-torch.sh",
        HERE,
        "documented_build_and_test_commands_name_real_targets",
    ),
    (
        "docs/train.md",
        "capflow run dataflows/sample.toml --out out/sample",
        TRAIN,
        "documented_train_commands_run",
    ),
    (
        "docs/train.md",
        "seed = 0",
        TRAIN,
        "documented_train_commands_run",
    ),
    (
        "docs/train.md",
        "# appended to e.g. dataflows/ssa-flickr30k.toml",
        TRAIN,
        "documented_train_table_trains_in_a_run",
    ),
    (
        "docs/train.md",
        "# appended to dataflows/ssa-flickr30k.toml: the sink trains on the embedded images",
        TRAIN,
        "documented_pixel_table_trains_in_a_run",
    ),
    (
        "docs/train.md",
        "CAPFLOW=target/release/capflow IMAGES=5000",
        TRAIN,
        "documented_pixel_bench_reads_its_settings",
    ),
    (
        "docs/train.md",
        "capflow run dataflows/ssa-flickr30k.toml --out /tmp/exp/emb",
        TRAIN,
        "documented_first_experiment_runs_small",
    ),
    (
        "docs/train.md",
        "OUT=/tmp/train-experiments-cpu",
        TRAIN,
        "documented_experiment_script_runs_small",
    ),
    (
        "docs/train.md",
        "capflow synth --images 2000 --seed 1 --out OUT/data/synth",
        TRAIN,
        "documented_experiment_script_runs_small",
    ),
    (
        "docs/train.md",
        "CAPFLOW=.gpu/capflow",
        TRAIN,
        "documented_experiment_script_runs_small",
    ),
    // README.md
    (
        "README.md",
        "cargo run --release -- run dataflows/ssa-flickr30k.toml",
        HERE,
        "documented_command_blocks_run",
    ),
    (
        "README.md",
        "bash scripts/test.sh",
        HERE,
        "documented_build_and_test_commands_name_real_targets",
    ),
    (
        "README.md",
        "bash scripts/fuzz.sh",
        HERE,
        "documented_build_and_test_commands_name_real_targets",
    ),
    (
        "README.md",
        "DIR/manifest.json",
        HERE,
        "documented_dataset_layout_and_card_are_a_runs",
    ),
    (
        "README.md",
        "capflow [-q | -v | -vv] <command> ...",
        HERE,
        "documented_synopses_run",
    ),
    (
        "README.md",
        "capflow train --data out/sample",
        TRAIN,
        "documented_train_commands_run",
    ),
];

pub const HERE: &str = "tests/docs_examples.rs";
pub const TRAIN: &str = "tests/train_docs.rs";

/// One fenced block: where it is, its info string and its text.
#[derive(Debug, Clone)]
pub struct Block {
    pub file: String,
    pub line: usize,
    pub info: String,
    pub text: String,
}

impl Block {
    pub fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// Every fenced block of `docs/**/*.md` and `README.md`, in file order.
pub fn doc_blocks() -> Vec<Block> {
    let root = common::repo_root();
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut blocks = Vec::new();
    for path in files {
        let name = path.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut open: Option<Block> = None;
        for (i, line) in text.lines().enumerate() {
            match (&mut open, line.strip_prefix("```")) {
                (None, Some(info)) => {
                    open = Some(Block {
                        file: name.clone(),
                        line: i + 1,
                        info: info.trim().to_string(),
                        text: String::new(),
                    })
                }
                (Some(_), Some(_)) => blocks.push(open.take().unwrap()),
                (Some(block), None) => {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
                (None, None) => {}
            }
        }
        assert!(open.is_none(), "{name}: a code block is never closed");
    }
    blocks
}

/// The blocks of `file` that `COVERAGE` assigns to `test`.
pub fn blocks_of(file: &str, test: &str) -> Vec<Block> {
    let blocks: Vec<Block> = doc_blocks()
        .into_iter()
        .filter(|b| b.file == file && covering(b).is_some_and(|c| c.3 == test))
        .collect();
    assert!(!blocks.is_empty(), "{file} has no block for {test}");
    blocks
}

/// The one block of `file` whose text starts with `start`.
pub fn block(file: &str, start: &str) -> Block {
    let found: Vec<Block> = doc_blocks()
        .into_iter()
        .filter(|b| b.file == file && b.text.starts_with(start))
        .collect();
    assert_eq!(found.len(), 1, "{file}: blocks starting with {start:?}");
    found.into_iter().next().unwrap()
}

/// The coverage entry claiming `block`: the longest matching start.
pub fn covering(
    block: &Block,
) -> Option<&'static (&'static str, &'static str, &'static str, &'static str)> {
    COVERAGE
        .iter()
        .filter(|c| c.0 == block.file && block.text.starts_with(c.1))
        .max_by_key(|c| c.1.len())
}

/// A scratch directory to run documented commands in, as from the repository root.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = common::repo_root();
        for linked in ["dataflows", "examples", "tests", "scripts", "benches"] {
            std::os::unix::fs::symlink(root.join(linked), dir.path().join(linked)).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::os::unix::fs::symlink(common::capflow_bin(), dir.path().join("bin/capflow")).unwrap();
        for made in ["tmp", "data", "recipes"] {
            std::fs::create_dir_all(dir.path().join(made)).unwrap();
        }
        Scratch { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `text` with the absolute directories `/tmp/` and `/data/` moved into the scratch
    /// directory.
    pub fn localize(&self, text: &str) -> String {
        let mut out = text.to_string();
        for root in ["/tmp/", "/data/"] {
            let local = format!("{}{root}", self.path().display());
            let mut rewritten = String::new();
            let mut rest = out.as_str();
            while let Some(i) = rest.find(root) {
                let before = rest[..i].chars().last();
                rewritten.push_str(&rest[..i]);
                if before.is_none_or(|c| " =\"'([".contains(c)) {
                    rewritten.push_str(&local);
                } else {
                    rewritten.push_str(root);
                }
                rest = &rest[i + root.len()..];
            }
            rewritten.push_str(rest);
            out = rewritten;
        }
        out
    }

    /// Runs `script` with `sh -e` in the scratch directory, `capflow` on the `PATH`.
    pub fn sh(&self, script: &str) -> Output {
        let path = format!(
            "{}:{}",
            self.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new("sh")
            .args(["-e", "-c", script])
            .current_dir(self.path())
            .env("PATH", path)
            .output()
            .unwrap()
    }

    /// Runs `script` and returns its stderr and stdout, failing with `at` on an error.
    pub fn sh_ok(&self, at: &str, script: &str) -> (String, String) {
        let out = self.sh(script);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            out.status.success(),
            "{at}: {script}\nfailed with {}: {stderr}",
            out.status
        );
        (stderr, String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// Writes `recipe` with the tables of `fragment` in place of its own (`[models]` merged key
    /// by key) to `recipes/<name>.toml`, with `edit` applied to the merged table, and reads it with
    /// the parser of `capflow run`.
    pub fn recipe_with(
        &self,
        at: &str,
        recipe: &str,
        fragment: &str,
        name: &str,
        edit: impl FnOnce(&mut toml::Table),
    ) -> PathBuf {
        let text = std::fs::read_to_string(common::repo_root().join(recipe)).unwrap();
        let mut table: toml::Table = toml::from_str(&text).unwrap();
        let added: toml::Table =
            toml::from_str(fragment).unwrap_or_else(|e| panic!("{at}: not TOML: {e}"));
        for (key, value) in added {
            match (table.get_mut(&key), value) {
                (Some(toml::Value::Table(old)), toml::Value::Table(new)) if key == "models" => {
                    old.extend(new)
                }
                (_, value) => {
                    table.insert(key, value);
                }
            }
        }
        edit(&mut table);
        let path = self.path().join("recipes").join(format!("{name}.toml"));
        std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
        if let Err(e) = capflow::dataflow::DataflowSpec::from_file(&path) {
            panic!("{at}: {recipe} with the block is refused: {e}");
        }
        path
    }
}

/// Puts the stand-in adapter's command (for the table's kind, with `args`) in place of the
/// documented command of every model table, and the repository as the working directory where
/// the table names one.
pub fn with_stand_ins(table: &mut toml::Table, python: &Path, args: &[(&str, &[&str])]) {
    let Some(toml::Value::Table(models)) = table.get_mut("models") else {
        return;
    };
    for (kind, model) in models.iter_mut() {
        let Some(model) = model.as_table_mut() else {
            continue;
        };
        let mut words = vec![kind.as_str()];
        if let Some((_, extra)) = args.iter().find(|(k, _)| k == kind) {
            words.extend(extra.iter());
        }
        let command: toml::Value =
            toml::from_str::<toml::Table>(&format!("c = {}", common::stand_in(python, &words)))
                .unwrap()["c"]
                .clone();
        model.insert("command".into(), command);
        if model.contains_key("working_dir") {
            model.insert(
                "working_dir".into(),
                common::repo_root().display().to_string().into(),
            );
        }
    }
}

/// Whether `actual` is the documented line `pattern`, where every run of digits stands for any
/// run of digits, and `...` and a `<placeholder>` for any text.
pub fn matches(pattern: &str, actual: &str) -> bool {
    if let Some(rest) = pattern.strip_prefix("...") {
        return (0..=actual.len())
            .filter(|&i| actual.is_char_boundary(i))
            .any(|i| matches(rest, &actual[i..]));
    }
    if pattern.starts_with('<') {
        if let Some(end) = pattern.find('>') {
            return matches(&format!("...{}", &pattern[end + 1..]), actual);
        }
    }
    let Some(p) = pattern.chars().next() else {
        return actual.is_empty();
    };
    if p.is_ascii_digit() {
        let pattern_rest = pattern.trim_start_matches(|c: char| c.is_ascii_digit());
        let digits = actual.len()
            - actual
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .len();
        return digits > 0 && matches(pattern_rest, &actual[digits..]);
    }
    actual.starts_with(p) && matches(&pattern[p.len_utf8()..], &actual[p.len_utf8()..])
}

/// Fails unless each documented line (but `...` lines) matches a line of `output`.
pub fn assert_lines_shown(at: &str, documented: &str, output: &str) {
    for line in documented.lines().filter(|l| l.trim() != "...") {
        assert!(
            output
                .lines()
                .any(|o| matches(line.trim_end(), o.trim_end())),
            "{at}: the documented line\n{line}\nis not in the output:\n{output}"
        );
    }
}

/// The samples of a dataset.
pub fn samples(dir: &Path) -> Vec<SampleRow> {
    capflow::export::read_table(dir, capflow::schema::TableKind::Samples)
        .unwrap()
        .flat_map(|b| capflow::schema::batch_to_rows(&b.unwrap()).unwrap())
        .collect()
}

/// The commands of a block: `#` comment lines and trailing `  # ...` comments removed, lines
/// ending in `\` and indented lines (a synopsis's continuation) joined to the command before.
pub fn commands(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut continued = false;
    for line in text.lines() {
        let line = line.split("  #").next().unwrap().trim_end();
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (line, continues) = match line.strip_suffix('\\') {
            Some(head) => (head, true),
            None => (line, false),
        };
        match out.last_mut() {
            Some(last) if continued || line.starts_with(' ') => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => out.push(line.trim().to_string()),
        }
        continued = continues;
    }
    out.iter()
        .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// `command` without its `[optional]` parts.
pub fn required_part(command: &str) -> String {
    let mut depth = 0;
    let mut out = String::new();
    for c in command.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `[optional]` parts of `command` (outermost brackets), without their brackets.
pub fn optional_parts(command: &str) -> Vec<String> {
    let mut depth = 0;
    let mut parts = Vec::new();
    let mut current = String::new();
    for c in command.chars() {
        match c {
            '[' => {
                if depth > 0 {
                    current.push(c);
                }
                depth += 1;
            }
            ']' => {
                depth -= 1;
                if depth == 0 {
                    parts.push(std::mem::take(&mut current));
                } else {
                    current.push(c);
                }
            }
            c if depth > 0 => current.push(c),
            _ => {}
        }
    }
    parts
}

/// Checks one synopsis (the text after `capflow `) against `capflow <subcommand> --help`.
pub fn assert_synopsis(at: &str, synopsis: &str) {
    let words: Vec<&str> = synopsis.split_whitespace().collect();
    let subcommand: Vec<&str> = words
        .iter()
        .take_while(|w| {
            w.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !w.starts_with('-')
        })
        .copied()
        .collect();
    let out = Command::new(common::capflow_bin())
        .args(&subcommand)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{at}: `capflow {} --help` fails: {}",
        subcommand.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    for word in &words[subcommand.len()..] {
        let option = word.trim_matches(|c| "[]<>(),.".contains(c));
        let option = option.split('=').next().unwrap();
        // `-vv` is `-v` twice.
        let option = match option.strip_prefix('-') {
            Some(short) if short.len() > 1 && short.chars().all(|c| c == 'v') => "-v",
            _ => option,
        };
        if option.starts_with('-') && option.len() > 1 && option != "-" {
            assert!(
                help.contains(&format!("{option} "))
                    || help.contains(&format!("{option},"))
                    || help.contains(&format!("{option}\n"))
                    || help.contains(&format!("{option}=")),
                "{at}: `capflow {}` has no option {option}:\n{help}",
                subcommand.join(" ")
            );
        }
    }
}
