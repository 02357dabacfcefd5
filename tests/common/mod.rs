//! Shared helpers for integration tests: where the fixtures and the Python oracles are.
//!
//! `CAPFLOW_FIXTURES` points at `shared/fixtures` (CI sets it); without it, `../shared/fixtures`
//! beside the repository is used when present. `CAPFLOW_ORACLE_PYTHON` names the Python of the
//! oracle virtualenv (default `.venv-oracles/bin/python` in the repository). When
//! `CAPFLOW_REQUIRE_ORACLES=1` (CI), a missing fixture directory or oracle is a test failure;
//! otherwise tests that need them print why they skip.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn required() -> bool {
    std::env::var("CAPFLOW_REQUIRE_ORACLES").is_ok_and(|v| v == "1")
}

/// The fixtures directory, or `None` (after printing why) when it is absent and not required.
pub fn fixtures_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("CAPFLOW_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => repo_root().join("../shared/fixtures"),
    };
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        !required(),
        "fixtures directory {} is missing and CAPFLOW_REQUIRE_ORACLES=1",
        dir.display()
    );
    eprintln!("skipping: fixtures directory {} not found", dir.display());
    None
}

/// A fixture file under the fixtures directory.
pub fn fixture(relative: &str) -> Option<PathBuf> {
    fixtures_dir().map(|d| d.join(relative))
}

/// The oracle virtualenv's Python, or `None` (after printing why) when absent and not required.
pub fn oracle_python() -> Option<PathBuf> {
    let python = match std::env::var_os("CAPFLOW_ORACLE_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join(".venv-oracles/bin/python"),
    };
    if python.exists() {
        return Some(python);
    }
    assert!(
        !required(),
        "oracle python {} is missing and CAPFLOW_REQUIRE_ORACLES=1 (run scripts/setup-oracles.sh)",
        python.display()
    );
    eprintln!("skipping: oracle python {} not found", python.display());
    None
}

/// The oracle scripts directory (`shared/oracles`).
pub fn oracles_dir() -> Option<PathBuf> {
    fixtures_dir().map(|d| d.join("../oracles"))
}

/// The built `capflow` binary.
pub fn capflow_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_capflow"))
}

/// Every data file of a dataset's current version (as its manifest lists them), by path, with
/// its bytes.
pub fn data_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    capflow::export::read_manifest(dir)
        .unwrap()
        .files
        .iter()
        .map(|f| (f.path.clone(), std::fs::read(dir.join(&f.path)).unwrap()))
        .collect()
}

/// Every regular file under `dir`, at any depth.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// Runs Python's Hugging Face libraries offline, with their caches under `home`.
pub fn hf_offline<'a>(
    command: &'a mut std::process::Command,
    home: &Path,
) -> &'a mut std::process::Command {
    command
        .env("HF_HOME", home.join("hf"))
        .env("HF_DATASETS_CACHE", home.join("hf/datasets"))
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
}

/// Copies the directory tree `from` to `to` (created if missing).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// strace, for the tests that inject delays and faults into system calls; CI installs it
/// (`.ci/run`), and requires it like the oracles.
pub fn strace() -> Option<&'static str> {
    let found = std::process::Command::new("strace")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found && std::env::var_os("CAPFLOW_REQUIRE_ORACLES").is_some() {
        panic!("strace is required (CAPFLOW_REQUIRE_ORACLES is set) but not installed");
    }
    found.then_some("strace")
}

/// A command running the capflow binary, after `prefix` (a program such as strace and its
/// options) when it is not empty.
pub fn capflow_after(prefix: &[&str]) -> std::process::Command {
    match prefix.split_first() {
        Some((program, rest)) => {
            let mut command = std::process::Command::new(program);
            command.args(rest).arg(capflow_bin());
            command
        }
        None => std::process::Command::new(capflow_bin()),
    }
}

/// Probability that a score of `positives` is above one of `negatives`, ties counting one half
/// (ROC-AUC).
pub fn roc_auc(positives: &[f64], negatives: &[f64]) -> f64 {
    let mut wins = 0.0;
    for &p in positives {
        for &n in negatives {
            wins += if p > n {
                1.0
            } else if p == n {
                0.5
            } else {
                0.0
            };
        }
    }
    wins / (positives.len() * negatives.len()) as f64
}

/// The TOML array (`["python", ".../deterministic.py", ARGS...]`) that runs the deterministic
/// stand-in adapter of `tests/adapters/deterministic.py` with `python`, for a spec's
/// `[models.<kind>] command`.
pub fn stand_in(python: &Path, args: &[&str]) -> String {
    let script = repo_root().join("tests/adapters/deterministic.py");
    let mut command = vec![python.display().to_string(), script.display().to_string()];
    command.extend(args.iter().map(|a| a.to_string()));
    let quoted: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Copies the Flickr30k Entities files and caption AMRs of the embedded sample data to `dst`,
/// keeping the images below `below` (ids 1000001 … 1000020).
pub fn flickr_sample_inputs(dst: &Path, below: u64) {
    let src = repo_root().join("examples/data");
    let keep = |id: &str| id.trim().parse::<u64>().is_ok_and(|id| id < below);
    for sub in ["Sentences", "Annotations"] {
        let to = dst.join("flickr30k_entities").join(sub);
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(src.join("flickr30k_entities").join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if keep(path.file_stem().unwrap().to_str().unwrap()) {
                std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    for list in ["train.txt", "val.txt", "test.txt"] {
        let text = std::fs::read_to_string(src.join("flickr30k_entities").join(list)).unwrap();
        let kept: String = text
            .lines()
            .filter(|l| keep(l))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(dst.join("flickr30k_entities").join(list), kept).unwrap();
    }
    let text = std::fs::read_to_string(src.join("amr/captions.amr")).unwrap();
    let kept: Vec<&str> = text
        .split("\n\n")
        .filter(|block| {
            block
                .lines()
                .find_map(|l| l.strip_prefix("# ::id "))
                .is_none_or(|id| keep(id.split('.').next().unwrap_or_default()))
        })
        .collect();
    std::fs::create_dir_all(dst.join("amr")).unwrap();
    std::fs::write(dst.join("amr/captions.amr"), kept.join("\n\n")).unwrap();
}

/// The oracle Python when it imports `modules` (`"deltalake, polars"`); `None`, after saying
/// why, when it lacks one and `CAPFLOW_REQUIRE_ORACLES` is not 1 (it fails the test then).
pub fn oracle_python_with(modules: &str) -> Option<PathBuf> {
    let python = oracle_python()?;
    let found = std::process::Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(python);
    }
    assert!(
        std::env::var("CAPFLOW_REQUIRE_ORACLES").map_or(true, |v| v != "1"),
        "{} cannot import {modules} and CAPFLOW_REQUIRE_ORACLES=1 (run scripts/setup-oracles.sh)",
        python.display()
    );
    eprintln!("skipping: {} cannot import {modules}", python.display());
    None
}
