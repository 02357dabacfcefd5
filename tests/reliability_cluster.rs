//! Cluster faults on loopback: a process that stops with exit 6 leaves neither the dataset's lock
//! nor its staging directories behind, a peer lost after the commit does not make process 0 deny
//! the committed version, and a run that failed for lack of space leaves no orphaned shards in
//! the way of its retry.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capflow::export::validate;

const SPEC: &str = "dataflows/ssa-flickr30k.toml";

fn capflow() -> Command {
    let mut command = Command::new(common::capflow_bin());
    command.current_dir(common::repo_root());
    command
}

/// A hostfile of 2 free loopback ports.
fn hostfile(dir: &Path) -> PathBuf {
    let listeners: Vec<std::net::TcpListener> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let text: String = listeners
        .iter()
        .map(|l| format!("127.0.0.1:{}\n", l.local_addr().unwrap().port()))
        .collect();
    let path = dir.join(format!(
        "hosts-{}",
        listeners[0].local_addr().unwrap().port()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts process `i` of 2 with `args` after `run`, its standard error into `log`; `prefix`
/// (strace and its options) goes before the binary.
fn spawn(prefix: &[&str], args: &[&str], i: usize, hosts: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    let mut command = common::capflow_after(prefix);
    command
        .current_dir(common::repo_root())
        .arg("run")
        .args(args)
        .args(["-n", "2", "-p", &i.to_string(), "--hostfile"])
        .arg(hosts)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start capflow")
}

/// Names in `dir` that start with `prefix`.
fn entries(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `ready()` holds, at most 60 s.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "waited for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The exit code of `child`, which must end within 60 s.
fn exit_code(child: &mut Child) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "still running after 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn synth(dir: &Path, images: usize) -> PathBuf {
    let input = dir.join(format!("synth-{images}"));
    let output = capflow()
        .args([
            "synth",
            "--images",
            &images.to_string(),
            "--seed",
            "5",
            "--out",
        ])
        .arg(&input)
        .output()
        .unwrap();
    assert!(output.status.success());
    input
}

/// A process that loses its peer ends at once with exit 6 (`std::process::exit`, which runs no
/// destructor). It used to leave `.capflow-lock` and its staging directory in the dataset; it
/// now removes what it holds before it exits, whichever process is lost.
#[test]
fn a_process_that_exits_6_removes_its_lock_and_staging_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let input = synth(tmp.path(), 3000);
    for lost in [1usize, 0] {
        let survivor = 1 - lost;
        let out = tmp.path().join(format!("out-lost-{lost}"));
        let args = [
            SPEC,
            "--input",
            input.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        let hosts = hostfile(tmp.path());
        let logs = [
            tmp.path().join(format!("log-{lost}-0")),
            tmp.path().join(format!("log-{lost}-1")),
        ];
        let mut children = [
            spawn(&[], &args, 0, &hosts, &logs[0]),
            spawn(&[], &args, 1, &hosts, &logs[1]),
        ];
        // Both have joined the cluster once process 1 stages its workers' parts. The survivor
        // holds what it must clean up: process 0 the lock and its staging directory, process 1
        // the staging directories of its parts.
        wait_for("process 1's parts", || {
            !entries(&out, ".capflow-part-p1-").is_empty()
        });
        std::thread::sleep(Duration::from_millis(300));
        let held = if survivor == 0 {
            ".capflow-tmp-"
        } else {
            ".capflow-part-p1-"
        };
        assert!(!entries(&out, held).is_empty());
        if survivor == 0 {
            assert!(out.join(".capflow-lock").exists());
        }
        children[lost].kill().unwrap();
        let _ = children[lost].wait();
        let code = exit_code(&mut children[survivor]);
        let log = format!(
            "{}\n(process {lost}, killed:)\n{}",
            std::fs::read_to_string(&logs[survivor]).unwrap(),
            std::fs::read_to_string(&logs[lost]).unwrap()
        );
        assert_eq!(code, Some(6), "process {survivor}: {log}");
        // A peer lost once connected is named as lost; one lost between two rounds as not
        // connecting to the next (within 20 s).
        assert!(log.contains(&format!("process {lost}")), "{log}");
        assert!(log.contains("nothing is committed"), "{log}");
        assert_eq!(
            entries(&out, held),
            Vec::<String>::new(),
            "process {survivor}: {log}"
        );
        if survivor == 0 {
            assert!(!out.join(".capflow-lock").exists(), "{log}");
        }
        assert!(!out.join("manifest.json").exists());
    }
}

/// Process 1 dies once process 0 has committed version 1 but before process 0 has told it so.
/// Process 0 used to print "nothing is committed" though version 1 was committed and valid; its
/// message now names the committed version (the exit code stays 6: a process was lost).
#[test]
fn a_peer_lost_after_the_commit_does_not_hide_the_committed_version() {
    let Some(strace) = common::strace() else {
        eprintln!("skipped: strace is not installed");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let card = out.join("README.md");
    let card = card.to_str().unwrap();
    let args = [SPEC, "--out", out.to_str().unwrap()];
    let hosts = hostfile(tmp.path());
    let logs = [tmp.path().join("log-0"), tmp.path().join("log-1")];
    // Process 0 stalls 2 s at the card's rename, just after the manifest's.
    let mut first = spawn(
        &[
            strace,
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-P",
            card,
            "-e",
            "trace=rename,renameat,renameat2",
            "-e",
            "inject=rename,renameat,renameat2:delay_enter=2000000",
        ],
        &args,
        0,
        &hosts,
        &logs[0],
    );
    let mut second = spawn(&[], &args, 1, &hosts, &logs[1]);
    wait_for("the manifest", || out.join("manifest.json").exists());
    second.kill().unwrap();
    let _ = second.wait();
    let code = exit_code(&mut first);
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    assert_eq!(code, Some(6), "{log}");
    assert!(!log.contains("nothing is committed"), "{log}");
    assert!(
        log.contains(&format!("version 1 of {} is committed", out.display())),
        "{log}"
    );
    assert!(validate(&out).unwrap().is_ok());
    assert!(!out.join(".capflow-lock").exists(), "{log}");
    assert_eq!(entries(&out, ".capflow-tmp-"), Vec::<String>::new());
}

/// A tmpfs of its own, mounted in a mount namespace held by a sleeping process: only commands
/// made by [`Tmpfs::command`] see it. Needs root (CAP_SYS_ADMIN) and `unshare`/`nsenter`.
struct Tmpfs {
    holder: Child,
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path) -> Option<Tmpfs> {
        use std::io::BufRead;
        std::fs::create_dir_all(dir).unwrap();
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount -t tmpfs -o size=64m tmpfs \"$0\" && echo ready && exec sleep 600")
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut line = String::new();
        let stdout = holder.stdout.take().unwrap();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        if line.trim() != "ready" {
            let _ = holder.kill();
            let _ = holder.wait();
            return None;
        }
        Some(Tmpfs {
            holder,
            dir: dir.to_path_buf(),
        })
    }

    /// `program` run inside the namespace that sees the tmpfs.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .args(["-t", &self.holder.id().to_string(), "-m", "--"])
            .arg(program)
            .current_dir(common::repo_root());
        command
    }

    fn sh(&self, script: &str) -> String {
        let output = self.command("sh").arg("-c").arg(script).output().unwrap();
        assert!(output.status.success(), "{script}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    /// Bytes in use.
    fn used(&self) -> u64 {
        let text = self.sh(&format!("stat -f -c '%b %f %S' {}", self.dir.display()));
        let n: Vec<u64> = text
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        (n[0] - n[1]) * n[2]
    }

    fn resize(&self, bytes: u64) {
        self.sh(&format!(
            "mount -o remount,size={bytes} {}",
            self.dir.display()
        ));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// Runs `capflow run args...` as 2 processes inside `fs`'s namespace, process 0 after
/// `prefix`; returns both exit codes and the logs.
fn run_in(fs: &Tmpfs, dir: &Path, prefix: &[&str], args: &[&str]) -> ([Option<i32>; 2], String) {
    let hosts = hostfile(dir);
    let logs = [dir.join("run-log-0"), dir.join("run-log-1")];
    let mut children: Vec<Child> = (0..2)
        .map(|i| {
            let mut command = fs.command(if i == 0 && !prefix.is_empty() {
                prefix[0]
            } else {
                common::capflow_bin().to_str().unwrap()
            });
            if i == 0 && !prefix.is_empty() {
                command.args(&prefix[1..]).arg(common::capflow_bin());
            }
            command
                .arg("run")
                .args(args)
                .args(["-n", "2", "-p", &i.to_string(), "--hostfile"])
                .arg(&hosts)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&logs[i]).unwrap())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes = [exit_code(&mut children[0]), exit_code(&mut children[1])];
    let log = logs
        .iter()
        .map(|l| std::fs::read_to_string(l).unwrap())
        .collect::<Vec<_>>()
        .join("\n--- process 1:\n");
    (codes, log)
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A cluster run whose commit fails for lack of space leaves the shards both processes already
/// moved into `data/`. They used to stay until a later commit succeeded, so the retry, once
/// space was freed, ran out of it again (it needs room for the orphans and its own shards).
/// The next writer now removes them as soon as it holds the lock, and the retry completes.
#[test]
fn a_commit_that_ran_out_of_space_leaves_no_orphans_in_the_way_of_its_retry() {
    let Some(strace) = common::strace() else {
        eprintln!("skipped: strace is not installed");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(&tmp.path().join("mnt")) else {
        eprintln!("skipped: cannot mount a tmpfs in a mount namespace (unshare, nsenter, root)");
        return;
    };
    let input = synth(tmp.path(), 3000);
    let on_fs = |name: &str| fs.dir.join(name).to_str().unwrap().to_string();
    let state = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    // nsenter starts commands in the namespace's root directory: paths are absolute.
    // Every process moves its shards into `data/` before process 0 writes the manifest. A
    // `[mix]` selection (of every sample) holds each chunk's samples until all are made.
    let recipe = std::fs::read_to_string(common::repo_root().join(SPEC)).unwrap();
    assert!(recipe.contains("strategy = \"all\""));
    let spec = tmp.path().join("ssa-mix.toml");
    std::fs::write(
        &spec,
        recipe.replace("strategy = \"all\"", "strategy = \"random\"\npercent = 100"),
    )
    .unwrap();
    let args = |out: &str, state: &str| {
        [
            spec.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--out",
            out,
            "--state",
            state,
        ]
        .map(String::from)
    };

    // A clean run: its size, its data files to compare with, and the most room it took while
    // it ran (its spill of the inputs' rows is under the output directory), polled.
    let clean = args(&on_fs("clean"), &state("state-clean"));
    let peak = std::sync::atomic::AtomicU64::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    let (codes, log) = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                peak.fetch_max(fs.used(), std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        let ran = run_in(&fs, tmp.path(), &[], &as_strs(&clean));
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        ran
    });
    assert_eq!(codes, [Some(0), Some(0)], "{log}");
    let size = fs.used();
    let peak = peak.into_inner().max(size);
    let clean_copy = tmp.path().join("clean");
    fs.sh(&format!(
        "cp -a {} {} && rm -rf {}",
        on_fs("clean"),
        clean_copy.display(),
        on_fs("clean")
    ));

    // Which rename of process 0's main thread, which commits, puts `versions/v1.json` in place.
    // strace counts each thread's calls apart, and the writer threads rename too: only the
    // main thread is traced (no -f).
    let trace = tmp.path().join("trace");
    let traced = args(&on_fs("traced"), &state("state-traced"));
    let (codes, log) = run_in(
        &fs,
        tmp.path(),
        &[
            strace,
            "-qq",
            "-o",
            trace.to_str().unwrap(),
            "-e",
            "trace=rename",
        ],
        &as_strs(&traced),
    );
    assert_eq!(codes, [Some(0), Some(0)], "{log}");
    fs.sh(&format!("rm -rf {}", on_fs("traced")));
    let lines: Vec<String> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("rename("))
        .map(str::to_string)
        .collect();
    let k = 1 + lines
        .iter()
        .position(|l| l.contains("/versions/v1.json\")"))
        .expect("the main thread renames a file onto versions/v1.json");

    // The commit runs out of space there: every shard is in its table's directory, no manifest
    // names them.
    let out = on_fs("ds");
    let run = args(&out, &state("state"));
    let inject = format!("inject=rename:error=ENOSPC:when={k}");
    let (codes, log) = run_in(
        &fs,
        tmp.path(),
        &[
            strace,
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "trace=rename",
            "-e",
            &inject,
        ],
        &as_strs(&run),
    );
    assert_eq!(codes, [Some(4), Some(6)], "{log}");
    let orphans = fs.sh(&format!(
        "find {out}/data -name '*.parquet' | wc -l; test ! -e {out}/manifest.json"
    ));
    assert!(orphans.trim().parse::<u64>().unwrap() > 10, "{orphans}");
    let held = fs.used();
    assert!(held > size * 7 / 10, "orphans hold {held} of {size} bytes");

    // Space is freed, but less than the clean run's peak and the orphans: the retry must not
    // need room for the orphans too.
    fs.resize(peak + held * 9 / 10);
    let (codes, log) = run_in(&fs, tmp.path(), &[], &as_strs(&run));
    assert_eq!(codes, [Some(0), Some(0)], "the retry: {log}");
    let copy = tmp.path().join("ds");
    fs.sh(&format!("cp -a {out} {}", copy.display()));
    assert!(validate(&copy).unwrap().is_ok());
    assert!(
        common::data_files(&copy) == common::data_files(&clean_copy),
        "bytes differ"
    );
}
