//! SIGKILL at chosen renames and writes of `capflow run` (strace
//! `-e inject=SYSCALL:signal=SIGKILL:when=K`), as a first run into an empty directory and as a
//! rerun over a committed version: after each kill the directory holds no manifest or a valid
//! one, and the same command then succeeds with a clean run's data files and ledger, byte for
//! byte. `scripts/fault-campaign.sh` does the same at every K.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use capflow::export::validate;

fn spec() -> std::path::PathBuf {
    common::repo_root().join("dataflows/sample.toml")
}

/// `capflow run sample.toml --out out`, after `prefix` (strace and its options) when given.
fn run(prefix: &[&str], out: &Path) -> std::process::Output {
    let mut command = common::capflow_after(prefix);
    command
        .args(["run", spec().to_str().unwrap(), "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// The data files the manifest lists and the ledger alias, by path, with their bytes.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = common::data_files(dir);
    files.insert(
        "rejected.parquet".into(),
        std::fs::read(dir.join("rejected.parquet")).unwrap(),
    );
    files
}

/// The most calls of `syscall` one thread makes in a run from `start` (strace counts the calls
/// of each thread apart).
fn calls_per_thread(strace: &str, syscall: &str, start: Option<&Path>, dir: &Path) -> usize {
    let out = dir.join(format!("count-{syscall}"));
    if let Some(start) = start {
        common::copy_dir(start, &out);
    }
    let trace = dir.join(format!("trace-{syscall}"));
    let trace_arg = trace.to_str().unwrap().to_string();
    let filter = format!("trace={syscall}");
    let output = run(
        &[strace, "-f", "-qq", "-o", &trace_arg, "-e", &filter],
        &out,
    );
    assert!(output.status.success(), "{output:?}");
    let mut per_thread: BTreeMap<String, usize> = BTreeMap::new();
    for line in std::fs::read_to_string(&trace).unwrap().lines() {
        if line.contains(&format!("{syscall}(")) {
            let thread = line.split_whitespace().next().unwrap_or_default();
            *per_thread.entry(thread.to_string()).or_default() += 1;
        }
    }
    per_thread.into_values().max().unwrap_or(0)
}

#[test]
fn a_run_killed_at_any_rename_or_write_is_completed_by_the_same_command() {
    let Some(strace) = common::strace() else {
        eprintln!("skipped: strace is not installed");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean");
    assert!(run(&[], &clean).status.success());
    let expected = contents(&clean);
    let mut trials = 0;
    let mut killed = 0;
    for first_run in [true, false] {
        let start = (!first_run).then_some(clean.as_path());
        for syscall in ["rename", "write"] {
            let n = calls_per_thread(strace, syscall, start, tmp.path());
            assert!(n >= 5, "{syscall}: {n} calls");
            // The first and middle calls, and for renames every one of the commit's last five
            // (changelog, version record, ledger alias, manifest, card).
            let mut ks = vec![1, n / 4, n / 2, 3 * n / 4];
            if syscall == "rename" {
                ks.extend(n - 4..=n);
            } else {
                ks.push(n);
            }
            ks.dedup();
            for k in ks {
                trials += 1;
                let context = format!(
                    "{} killed at {syscall} {k} of {n}",
                    if first_run { "run" } else { "rerun" }
                );
                let out = tmp.path().join(format!("ds-{first_run}-{syscall}-{k}"));
                if let Some(start) = start {
                    common::copy_dir(start, &out);
                }
                let inject = format!("inject={syscall}:signal=SIGKILL:when={k}");
                let filter = format!("trace={syscall}");
                let output = run(
                    &[
                        strace,
                        "-f",
                        "-qq",
                        "-o",
                        "/dev/null",
                        "-e",
                        &filter,
                        "-e",
                        &inject,
                    ],
                    &out,
                );
                if !output.status.success() {
                    killed += 1;
                }
                if out.join("manifest.json").exists() {
                    let report = validate(&out).unwrap();
                    assert!(report.is_ok(), "{context}: {:?}", report.problems);
                }
                let again = run(&[], &out);
                assert!(
                    again.status.success(),
                    "{context}: the same command failed: {}",
                    String::from_utf8_lossy(&again.stderr)
                );
                let report = validate(&out).unwrap();
                assert!(report.is_ok(), "{context}: {:?}", report.problems);
                assert!(contents(&out) == expected, "{context}: bytes differ");
                let leftovers: Vec<String> = std::fs::read_dir(&out)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| name.starts_with(".capflow-"))
                    .collect();
                assert!(leftovers.is_empty(), "{context}: {leftovers:?}");
                std::fs::remove_dir_all(&out).unwrap();
            }
        }
    }
    // Most trials are killed; a K past the calls of the thread that makes them runs to its end.
    assert!(killed * 10 >= trials * 8, "{killed} of {trials} killed");
}
