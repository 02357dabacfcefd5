//! The examples of docs/train.md and README's training commands, run with the `train` feature
//! on the embedded sample data (`tests/docs_examples.rs` checks that every block of the
//! documents is claimed by a test; these are the blocks it assigns here). Step counts and data
//! sizes are cut so that each run takes seconds on a CPU; everything else is as documented.
#![cfg(feature = "train")]

mod common;
mod doc_blocks;

use doc_blocks::{
    assert_synopsis, block, blocks_of, commands, matches, optional_parts, required_part, Scratch,
};

/// docs/train.md's configuration with its step counts cut to 2 (and the curriculum to two
/// iterations of 1 step), as `train.toml`.
fn small_configuration(scratch: &Scratch) -> String {
    let configuration = block("docs/train.md", "seed = 0");
    let mut table: toml::Table = toml::from_str(&configuration.text)
        .unwrap_or_else(|e| panic!("{}: {e}", configuration.at()));
    table["steps"] = 2.into();
    table["checkpoint_every"] = 1.into();
    table["curriculum"]["scoring_steps"] = 2.into();
    table["curriculum"]["steps_per_iteration"] = 1.into();
    // Two curriculum iterations instead of fifty.
    table["curriculum"]["c_percent"] = 50.0.into();
    let text = toml::to_string(&table).unwrap();
    std::fs::write(scratch.path().join("train.toml"), &text).unwrap();
    configuration.at()
}

/// docs/train.md's commands (and README's), each a synopsis whose options `--help` lists, run
/// with their required options alone and with their optional ones (placeholders filled in), with
/// the documented configuration as `train.toml`.
#[test]
fn documented_train_commands_run() {
    for file in ["docs/train.md", "README.md"] {
        for block in blocks_of(file, "documented_train_commands_run") {
            for synopsis in block.text.split("capflow ").skip(1) {
                assert_synopsis(&block.at(), synopsis);
            }
        }
    }
    let shown = block(
        "docs/train.md",
        "capflow run dataflows/sample.toml --out out/sample",
    );
    let scratch = Scratch::new();
    let configuration = small_configuration(&scratch);
    scratch.sh_ok(
        &shown.at(),
        "capflow synth --images 10 --seed 1 --out tmp/synth-input > /dev/null && \
         capflow run dataflows/ssa-flickr30k.toml --input tmp/synth-input --out tmp/synth 2>/dev/null",
    );
    let glove = common::fixture("word_vectors/gensim_test_glove.txt")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "glove.txt".into());
    let fill = |command: &str| -> String {
        command
            .replace("--steps N", "--steps 2")
            .replace("--device cpu|cuda|cuda:N|auto", "--device cpu")
            .replace("--max-train N", "--max-train 50")
            .replace("--generated-percent P", "--generated-percent 20")
            .replace("--seeds 3", "--seeds 1")
            .replace("glove.txt", &glove)
    };
    let mut ran = 0;
    for command in commands(&shown.text) {
        // The required options, then each optional one with them (training), or all of them
        // at once (the comparisons and the benchmark, which train several models each).
        let required = required_part(&command);
        let mut forms = vec![required.clone()];
        if command.starts_with("capflow train --data") || command.starts_with("capflow eval") {
            for part in optional_parts(&fill(&command)) {
                forms.push(format!("{required} {part}"));
            }
        } else if command.contains('[') {
            forms.push(fill(&command).replace(['[', ']'], ""));
        }
        for form in forms {
            let form = scratch.localize(&form);
            // The default configuration trains 2,000 steps (and 2,000 more per scoring model):
            // every training command gets the documented one with its steps cut.
            let trains = form.starts_with("capflow train --data")
                || form.starts_with("capflow train compare");
            let form = match trains && !form.contains("--config") {
                true => format!("{form} --config train.toml"),
                false => form,
            };
            let form = form.replace("--out cmp", &format!("--out cmp{ran}"));
            // One seed and 20 evaluation samples per comparison and evaluation.
            let form = match form.starts_with("capflow train compare") {
                true if form.contains("--seeds") => format!("{form} --max-samples 20"),
                true => format!("{form} --seeds 1 --max-samples 20"),
                false if form.starts_with("capflow eval") => format!("{form} --max-samples 20"),
                false => form,
            };
            // `--resume` continues the run of the required options in `ckpt`; the other
            // variants train into directories of their own.
            let form = match form.starts_with("capflow train --data")
                && form != format!("{required} --config train.toml")
                && !form.contains("--resume")
            {
                true => form.replace("--out ckpt", &format!("--out ckpt{ran}")),
                false => form,
            };
            scratch.sh_ok(&format!("{} ({configuration})", shown.at()), &form);
            ran += 1;
        }
    }
    assert!(ran >= 15, "{ran} commands");
    let compared = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("cmp"))
        .filter(|e| e.path().join("compare.md").is_file())
        .count();
    assert!(compared >= 2, "{}: {compared} comparisons", shown.at());
    for written in ["ckpt/checkpoint.json", "eval.json"] {
        assert!(
            scratch.path().join(written).exists(),
            "{}: no {written}",
            shown.at()
        );
    }
}

/// docs/train.md's `[train]` table appended to the SSA recipe, on the CPU with 2 steps and the
/// checkpoint in the scratch directory: the run trains and leaves `train.json`.
#[test]
fn documented_train_table_trains_in_a_run() {
    let shown = block(
        "docs/train.md",
        "# appended to e.g. dataflows/ssa-flickr30k.toml",
    );
    let scratch = Scratch::new();
    let recipe = scratch.recipe_with(
        &shown.at(),
        "dataflows/ssa-flickr30k.toml",
        &shown.text,
        "train",
        |t| {
            t["train"]["steps"] = 2.into();
            t["train"]["device"] = "cpu".into();
        },
    );
    scratch.sh_ok(
        &shown.at(),
        &format!("capflow run {} --out out/ds", recipe.display()),
    );
    let model = scratch.path().join("out/ssa-flickr30k.model");
    assert!(
        model.join("train.json").is_file(),
        "{}: no train.json in {}",
        shown.at(),
        model.display()
    );
}

/// docs/train.md's `[train]` table that reads the embedded images, appended to the SSA recipe
/// as documented but with 2 steps: the run trains and leaves `train.json` beside the dataset.
#[test]
fn documented_pixel_table_trains_in_a_run() {
    let shown = block(
        "docs/train.md",
        "# appended to dataflows/ssa-flickr30k.toml: the sink trains on the embedded images",
    );
    let scratch = Scratch::new();
    let recipe = scratch.recipe_with(
        &shown.at(),
        "dataflows/ssa-flickr30k.toml",
        &shown.text,
        "pixels",
        |t| t["train"]["steps"] = 2.into(),
    );
    scratch.sh_ok(
        &shown.at(),
        &format!("capflow run {} --out out/ds", recipe.display()),
    );
    assert!(
        scratch.path().join("out/ds.model/train.json").is_file(),
        "{}: no train.json in out/ds.model",
        shown.at()
    );
}

/// docs/train.md's GPU command of the pixel benchmark sets variables
/// `benches/train_pixels.sh` reads.
#[test]
fn documented_pixel_bench_reads_its_settings() {
    let shown = block(
        "docs/train.md",
        "CAPFLOW=target/release/capflow IMAGES=5000",
    );
    let source =
        std::fs::read_to_string(common::repo_root().join("benches/train_pixels.sh")).unwrap();
    let command = &commands(&shown.text)[0];
    assert!(
        command.ends_with("benches/train_pixels.sh"),
        "{}",
        shown.at()
    );
    let mut names = 0;
    for word in command.split_whitespace().filter(|w| w.contains('=')) {
        let name = word.split('=').next().unwrap();
        if name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            assert!(
                source.contains(&format!("${{{name}:-")),
                "{}: benches/train_pixels.sh does not read {name}",
                shown.at()
            );
            names += 1;
        }
    }
    assert!(names >= 8, "{}: {names} settings", shown.at());
}

/// docs/train.md's first experiment, with 20 synthetic images, 2 steps and one seed.
#[test]
fn documented_first_experiment_runs_small() {
    let shown = block(
        "docs/train.md",
        "capflow run dataflows/ssa-flickr30k.toml --out /tmp/exp/emb",
    );
    let scratch = Scratch::new();
    let script = scratch
        .localize(&shown.text)
        .replace("--images 2000", "--images 20")
        .replace("steps = 300", "steps = 2")
        .replace("scoring_steps = 150", "scoring_steps = 2")
        .replace("--seeds 3", "--seeds 1");
    assert_ne!(script, scratch.localize(&shown.text));
    scratch.sh_ok(&shown.at(), &script);
    assert!(
        scratch.path().join("tmp/exp/cmp/compare.md").is_file(),
        "{}: no compare.md",
        shown.at()
    );
}

/// docs/train.md's experiment script, run with the documented CPU settings but 200 images,
/// 2 steps and one seed: it runs the commands the page lists (`OUT/commands.sh`), and reads the
/// variables of the GPU command.
#[test]
fn documented_experiment_script_runs_small() {
    let cpu = block("docs/train.md", "OUT=/tmp/train-experiments-cpu");
    let listed = block(
        "docs/train.md",
        "capflow synth --images 2000 --seed 1 --out OUT/data/synth",
    );
    let gpu = block("docs/train.md", "CAPFLOW=.gpu/capflow");
    let scratch = Scratch::new();
    let script = scratch
        .localize(&commands(&cpu.text)[0])
        .replace("IMAGES=2000", "IMAGES=200")
        .replace("STEPS=200", "STEPS=2 SEEDS=1");
    let capflow = common::capflow_bin().display().to_string();
    scratch.sh_ok(&cpu.at(), &format!("CAPFLOW={capflow} {script}"));
    let out = scratch.path().join("tmp/train-experiments-cpu");
    let ran = std::fs::read_to_string(out.join("commands.sh")).unwrap();
    let ran: Vec<String> = ran
        .lines()
        .map(|l| {
            // `printf %q` quoting: `original\,augmented`.
            l.replace(&capflow, "capflow")
                .replace(&out.display().to_string(), "OUT")
                .replace('\\', "")
                .trim_end()
                .to_string()
        })
        .collect();
    for command in commands(&listed.text) {
        assert!(
            ran.iter().any(|r| matches(&command, r)),
            "{}: the script did not run {command:?}:\n{}",
            listed.at(),
            ran.join("\n")
        );
    }
    let source =
        std::fs::read_to_string(common::repo_root().join("benches/train_experiments.sh")).unwrap();
    for command in commands(&gpu.text) {
        for word in command.split_whitespace().take_while(|w| w.contains('=')) {
            let name = word.split('=').next().unwrap();
            assert!(
                source.contains(&format!("{name}=\"${{{name}:-")),
                "{}: benches/train_experiments.sh does not read {name}",
                gpu.at()
            );
        }
    }
}
