//! Multi-process runs on loopback: 1, 2 and 3 processes write the same bytes; a killed process
//! fails the whole run without a manifest, and a rerun with the same state completes it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capflow::export::read_manifest;

mod common;

use common::data_files;

fn capflow() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_capflow"));
    command.current_dir(common::repo_root());
    command
}

/// A hostfile of `n` free loopback ports.
fn hostfile(dir: &Path, n: usize) -> PathBuf {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let text: String = listeners
        .iter()
        .map(|l| format!("127.0.0.1:{}\n", l.local_addr().unwrap().port()))
        .collect();
    let path = dir.join(format!("hosts-{n}-{}", text.len()));
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts process `i` of `n`.
fn spawn(args: &[&str], n: usize, i: usize, hosts: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    capflow()
        .arg("run")
        .args(args)
        .args(["-n", &n.to_string(), "-p", &i.to_string(), "--hostfile"])
        .arg(hosts)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start capflow")
}

/// Runs `n` processes to completion and asserts they all succeed.
fn run_cluster(dir: &Path, args: &[&str], n: usize, workers: usize) {
    let hosts = hostfile(dir, n);
    let workers = workers.to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-w", &workers]);
    let children: Vec<(Child, PathBuf)> = (0..n)
        .map(|i| {
            let log = dir.join(format!("log-{n}-{i}"));
            (spawn(&all, n, i, &hosts, &log), log)
        })
        .collect();
    for (i, (mut child, log)) in children.into_iter().enumerate() {
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "process {i} of {n} failed:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

/// The logs of the last [`run_cluster`] of `n` processes in `dir`, one after the other.
fn logs_of(dir: &Path, n: usize) -> String {
    (0..n)
        .map(|i| std::fs::read_to_string(dir.join(format!("log-{n}-{i}"))).unwrap())
        .collect()
}

fn run_single(args: &[&str]) {
    let out = capflow().arg("run").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn one_two_and_three_processes_write_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    for recipe in ["ssa-flickr30k", "clid-vg", "relatedness"] {
        let spec = format!("dataflows/{recipe}.toml");
        let single = tmp.path().join(format!("{recipe}-1"));
        run_single(&[&spec, "--out", single.to_str().unwrap()]);
        let expected = data_files(&single);
        for (n, workers) in [(2, 1), (3, 1), (2, 2)] {
            let out = tmp.path().join(format!("{recipe}-{n}x{workers}"));
            run_cluster(
                tmp.path(),
                &[&spec, "--out", out.to_str().unwrap()],
                n,
                workers,
            );
            let got = data_files(&out);
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                expected.keys().collect::<Vec<_>>(),
                "{recipe}, {n} processes × {workers} workers: file lists differ"
            );
            assert!(
                got == expected,
                "{recipe}, {n} processes × {workers} workers: bytes differ"
            );
            let manifest = read_manifest(&out).unwrap();
            assert_eq!(manifest.counts, read_manifest(&single).unwrap().counts);
        }
    }
}

#[test]
fn killing_a_process_fails_the_run_and_a_rerun_completes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("synth");
    let synth = capflow()
        .args(["synth", "--images", "3000", "--seed", "5", "--out"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(synth.status.success());
    let out = tmp.path().join("out");
    let state = tmp.path().join("state");
    let args = [
        "dataflows/ssa-flickr30k.toml",
        "--input",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ];
    let hosts = hostfile(tmp.path(), 2);
    let logs = [tmp.path().join("kill-0"), tmp.path().join("kill-1")];
    let mut first = spawn(&args, 2, 0, &hosts, &logs[0]);
    let mut second = spawn(&args, 2, 1, &hosts, &logs[1]);
    // Let both join the cluster and start reading, then kill process 1.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        first.try_wait().unwrap().is_none(),
        "the run ended before the kill"
    );
    second.kill().unwrap();
    let killed_at = Instant::now();
    assert!(!second.wait().unwrap().success());
    let status = loop {
        if let Some(status) = first.try_wait().unwrap() {
            break status;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "process 0 still runs 30 s after process 1 was killed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        !status.success(),
        "process 0 exited 0 after losing process 1"
    );
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(log.contains("process 1"), "{log}");
    assert!(
        !out.join("manifest.json").exists(),
        "a manifest was committed"
    );

    // The rerun with the same state completes and equals a fresh single-process run.
    run_cluster(tmp.path(), &args, 2, 1);
    let fresh = tmp.path().join("fresh");
    run_single(&[
        "dataflows/ssa-flickr30k.toml",
        "--input",
        input.to_str().unwrap(),
        "--out",
        fresh.to_str().unwrap(),
    ]);
    assert!(data_files(&out) == data_files(&fresh), "bytes differ");
}

#[test]
fn without_shared_storage_merge_completes_the_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = "dataflows/ssa-flickr30k.toml";
    let single = tmp.path().join("single");
    run_single(&[spec, "--out", single.to_str().unwrap()]);
    // Each process writes into its own directory, as on hosts without shared storage.
    let hosts = hostfile(tmp.path(), 2);
    let outs = [tmp.path().join("host0"), tmp.path().join("host1")];
    let mut children: Vec<Child> = (0..2)
        .map(|i| {
            let log = tmp.path().join(format!("merge-log-{i}"));
            spawn(
                &[spec, "--out", outs[i].to_str().unwrap()],
                2,
                i,
                &hosts,
                &log,
            )
        })
        .collect();
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    assert!(!outs[1].join("manifest.json").exists());
    let manifest = read_manifest(&outs[0]).unwrap();
    let absent = manifest
        .files
        .iter()
        .filter(|f| !outs[0].join(&f.path).exists())
        .count();
    assert!(absent > 0, "process 1 wrote nothing of its own");
    let merged = capflow()
        .args(["merge"])
        .arg(&outs[0])
        .arg("--from")
        .arg(&outs[1])
        .output()
        .unwrap();
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    assert!(data_files(&outs[0]) == data_files(&single), "bytes differ");
    // A corrupted copy is refused.
    let victim = manifest
        .files
        .iter()
        .find(|f| outs[1].join(&f.path).exists())
        .unwrap();
    std::fs::remove_file(outs[0].join(&victim.path)).unwrap();
    std::fs::write(outs[1].join(&victim.path), b"not parquet").unwrap();
    let refused = capflow()
        .args(["merge"])
        .arg(&outs[0])
        .arg("--from")
        .arg(&outs[1])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("SHA-256"));
}

#[test]
fn an_incremental_rerun_on_two_processes_equals_a_fresh_run() {
    let tmp = tempfile::tempdir().unwrap();
    let synth = |n: usize, dir: &Path| {
        let out = capflow()
            .args(["synth", "--images", &n.to_string(), "--seed", "3", "--out"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success());
    };
    let (small, large) = (tmp.path().join("s300"), tmp.path().join("s330"));
    synth(300, &small);
    synth(330, &large);
    // The input path stays the same; only what it points to grows.
    let input = tmp.path().join("input");
    std::os::unix::fs::symlink(&small, &input).unwrap();
    let (out, state, fresh) = (
        tmp.path().join("out"),
        tmp.path().join("state"),
        tmp.path().join("fresh"),
    );
    let args = [
        "dataflows/clid-vg.toml",
        "--input",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ];
    run_cluster(tmp.path(), &args, 2, 1);
    std::fs::remove_file(&input).unwrap();
    std::os::unix::fs::symlink(&large, &input).unwrap();
    run_cluster(tmp.path(), &args, 2, 1);
    let logs = logs_of(tmp.path(), 2);
    assert!(logs.contains("carrying"), "{logs}");
    assert!(!logs.contains("computing all"), "{logs}");
    run_single(&[
        "dataflows/clid-vg.toml",
        "--input",
        input.to_str().unwrap(),
        "--out",
        fresh.to_str().unwrap(),
    ]);
    assert!(data_files(&out) == data_files(&fresh), "bytes differ");
    assert_eq!(read_manifest(&out).unwrap().version, 2);
}

/// The SSA recipe fits its models on its inputs; on two processes with one shared state the
/// first run keeps them there, a rerun after one added caption computes that image alone on the
/// process owning it, and the dataset is what one process writes with the same models
/// (`--models`). A process whose state holds other models than process 0's refuses to run.
#[test]
fn a_cluster_rerun_uses_the_models_kept_in_the_shared_state() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    for sub in ["flickr30k_entities", "amr"] {
        common::copy_dir(
            &common::repo_root().join("examples/data").join(sub),
            &input.join(sub),
        );
    }
    let (out, state, fresh) = (
        tmp.path().join("out"),
        tmp.path().join("state"),
        tmp.path().join("fresh"),
    );
    let args = [
        "dataflows/ssa-flickr30k.toml",
        "--input",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ];
    run_cluster(tmp.path(), &args, 2, 1);
    assert!(state.join("models.json").exists());
    let sentences = input.join("flickr30k_entities/Sentences/1000001.txt");
    let mut text = std::fs::read_to_string(&sentences).unwrap();
    text.push_str("[/EN#1001/people A young cyclist] rides [/EN#1002/vehicles a black bicycle] in the sun .\n");
    std::fs::write(&sentences, text).unwrap();
    run_cluster(tmp.path(), &args, 2, 1);
    let logs = logs_of(tmp.path(), 2);
    assert!(logs.contains("computing 1 new or changed images"), "{logs}");
    assert!(!logs.contains("computing all"), "{logs}");
    run_single(&[
        "dataflows/ssa-flickr30k.toml",
        "--input",
        input.to_str().unwrap(),
        "--out",
        fresh.to_str().unwrap(),
        "--models",
        state.to_str().unwrap(),
    ]);
    assert!(data_files(&out) == data_files(&fresh), "bytes differ");

    // Process 1 with a state of its own (no models): it stops with a usage error.
    let hosts = hostfile(tmp.path(), 2);
    let other = tmp.path().join("other-state");
    let mut first = spawn(&args, 2, 0, &hosts, &tmp.path().join("mismatch-0"));
    let mut second_args = args.to_vec();
    second_args[6] = other.to_str().unwrap();
    let mut second = spawn(&second_args, 2, 1, &hosts, &tmp.path().join("mismatch-1"));
    let status = second.wait().unwrap();
    let log = std::fs::read_to_string(tmp.path().join("mismatch-1")).unwrap();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("would fit other models than process 0"),
        "{log}"
    );
    assert!(!first.wait().unwrap().success());
    assert_eq!(read_manifest(&out).unwrap().version, 2);
}
