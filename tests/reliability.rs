//! Faults a data engineer meets: writers racing for one dataset, runs killed inside the commit,
//! and what the next run does about them. Each test reproduces a defect that once lost or
//! corrupted data.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use capflow::export::validate;

fn sample_spec() -> std::path::PathBuf {
    common::repo_root().join("dataflows/sample.toml")
}

/// Versions a dataset's manifest lists (0 when there is none).
fn version(dir: &Path) -> u64 {
    match std::fs::read(dir.join("manifest.json")) {
        Ok(bytes) => {
            let manifest: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            manifest["version"].as_u64().unwrap()
        }
        Err(_) => 0,
    }
}

/// Writers started together on one output directory: each one either commits a version or is
/// refused with exit 2 because another holds the lock; every committed dataset validates, and
/// the versions count the writers that succeeded.
#[test]
fn concurrent_writers_never_corrupt_a_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let mut committed = 0u64;
    for round in 0..4 {
        let children: Vec<_> = (0..6)
            .map(|_| {
                Command::new(common::capflow_bin())
                    .args(["run", sample_spec().to_str().unwrap(), "--out"])
                    .arg(&out)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            match output.status.code() {
                Some(0) => committed += 1,
                Some(2) => assert!(stderr.contains("being written by"), "{stderr}"),
                other => panic!("round {round}: exit {other:?}: {stderr}"),
            }
        }
        let report = validate(&out).unwrap();
        assert!(report.is_ok(), "round {round}: {:?}", report.problems);
        assert_eq!(version(&out), committed, "round {round}");
        assert!(!out.join(".capflow-lock").exists(), "round {round}");
    }
    assert!(committed >= 4, "at least one writer of each round commits");
}

/// The race that once let two writers both take the lock: the first writer stalls for 3 s at its
/// first write (once the lock file existed, before its process id was in it), the second stalls
/// 4 s at its third `mkdir` and takes an empty lock for a stale one. Both then committed into
/// one directory and `validate` found the manifest naming files that were not on disk.
#[test]
fn a_writer_stalled_inside_the_lock_keeps_it() {
    let Some(strace) = common::strace() else {
        eprintln!("skipped: strace is not installed");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let flickr = common::repo_root().join("examples/data/flickr30k_entities");
    let amr = common::repo_root().join("examples/data/amr/captions.amr");
    let writer = |inject: &str, input: &Path, format: &str| {
        Command::new(strace)
            .args(["-f", "-qq", "-o", "/dev/null", "-e", inject])
            .arg(common::capflow_bin())
            .args(["ingest", format])
            .arg(input)
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = writer(
        "inject=write:delay_enter=3000000:when=1",
        &flickr,
        "flickr30k-entities",
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let second = writer("inject=mkdir:delay_enter=4000000:when=3", &amr, "penman");
    let mut codes = Vec::new();
    for child in [first, second] {
        let output = child.wait_with_output().unwrap();
        codes.push((
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        ));
    }
    let committed = codes.iter().filter(|(code, _)| *code == Some(0)).count() as u64;
    for (code, stderr) in &codes {
        assert!(
            *code == Some(0) || (*code == Some(2) && stderr.contains("being written by")),
            "{codes:?}"
        );
    }
    assert!(committed >= 1, "{codes:?}");
    let report = validate(&out).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(version(&out), committed);
}

fn run_sample(out: &Path) -> std::process::Output {
    Command::new(common::capflow_bin())
        .args(["run", sample_spec().to_str().unwrap(), "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// A first commit killed after its changelog and version record were renamed into place but
/// before the manifest's rename: the same command used to refuse the directory ("holds no
/// capflow dataset (found \"changes\")"). It now completes the run, with a clean run's bytes.
#[test]
fn a_first_commit_killed_before_the_manifest_is_completed_by_the_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean");
    assert!(run_sample(&clean).status.success());
    let out = tmp.path().join("out");
    assert!(run_sample(&out).status.success());
    // The state the kill leaves: everything but the manifest.
    std::fs::remove_file(out.join("manifest.json")).unwrap();
    assert!(out.join("changes/v1.parquet").exists());
    let again = run_sample(&out);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(version(&out), 1);
    assert!(validate(&out).unwrap().is_ok());
    assert_eq!(common::data_files(&out), common::data_files(&clean));
    assert_eq!(
        std::fs::read(out.join("changes/v1.parquet")).unwrap(),
        std::fs::read(clean.join("changes/v1.parquet")).unwrap()
    );
    // A `changes` directory holding anything else is still not taken for a dataset's.
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir_all(foreign.join("changes")).unwrap();
    std::fs::write(foreign.join("changes/notes.txt"), b"mine").unwrap();
    let refused = run_sample(&foreign);
    assert_eq!(refused.status.code(), Some(2));
    assert!(foreign.join("changes/notes.txt").exists());
}

/// Rewrites the path of the manifest's first data file of `dir`; returns the old path.
fn repoint_first_file(dir: &Path, to: &str) -> String {
    let path = dir.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let file = &mut manifest["files"][0];
    let old = file["path"].as_str().unwrap().to_string();
    file["path"] = serde_json::Value::String(to.to_string());
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    old
}

/// Paths and checksums in a manifest are checked before anything is read or copied: a path
/// outside the dataset (`/etc/hostname`, `../../x.parquet`) and a shard whose bytes changed are
/// bad input (exit 3), and `capflow merge` writes nothing outside the dataset.
#[test]
fn manifest_paths_stay_inside_the_dataset_and_checksums_are_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let ingest = |dataset: &Path, out: &Path| {
        Command::new(common::capflow_bin())
            .args(["ingest", "capflow"])
            .arg(dataset)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    // A manifest naming a file outside the dataset.
    let outside = tmp.path().join("outside");
    assert!(run_sample(&outside).status.success());
    repoint_first_file(&outside, "/etc/hostname");
    let output = ingest(&outside, &tmp.path().join("o1"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("leaves the dataset directory"), "{stderr}");

    // A shard whose bytes changed after the commit.
    let tampered = tmp.path().join("tampered");
    assert!(run_sample(&tampered).status.success());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tampered.join("manifest.json")).unwrap()).unwrap();
    let shard = tampered.join(manifest["files"][0]["path"].as_str().unwrap());
    let mut bytes = std::fs::read(&shard).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&shard, bytes).unwrap();
    let output = ingest(&tampered, &tmp.path().join("o2"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("SHA-256"), "{stderr}");

    // `capflow merge` with a path that climbs out of the dataset.
    let merged = tmp.path().join("nested/merged");
    assert!(run_sample(&merged).status.success());
    // The process whose part it names holds the file under that path too.
    let old = repoint_first_file(&merged, "../../escaped.parquet");
    let other = tmp.path().join("a/b/other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(merged.join(&old), tmp.path().join("a/escaped.parquet")).unwrap();
    let output = Command::new(common::capflow_bin())
        .arg("merge")
        .arg(&merged)
        .arg("--from")
        .arg(&other)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("leaves the dataset directory"), "{stderr}");
    assert!(!tmp.path().join("escaped.parquet").exists());
}

/// One flipped byte in a shard, then a rerun with the same inputs and `--state`: the rerun used
/// to carry the damaged shard into a new version that failed `validate`. It now stops with exit
/// 3 naming the shard, and commits nothing.
#[test]
fn a_damaged_shard_is_never_carried_into_a_new_version() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let state = tmp.path().join("state");
    let rerun = || {
        Command::new(common::capflow_bin())
            .args(["run", sample_spec().to_str().unwrap(), "--out"])
            .arg(&out)
            .arg("--state")
            .arg(&state)
            .output()
            .unwrap()
    };
    assert!(rerun().status.success());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let name = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .find(|p| p.starts_with("data/captions"))
        .unwrap()
        .to_string();
    let shard = out.join(&name);
    let mut bytes = std::fs::read(&shard).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&shard, bytes).unwrap();
    let output = rerun();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(name.trim_start_matches("data/")),
        "{stderr}"
    );
    assert_eq!(version(&out), 1, "nothing is committed");
}

/// SHA-256 (hex) of a file's bytes.
fn sha256_of(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

/// The manifest's ledger shard of a dataset, as listed: (path, sha256).
fn ledger_entry(dir: &Path) -> (String, String) {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let ledger = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["table"] == "rejected")
        .unwrap();
    (
        ledger["path"].as_str().unwrap().to_string(),
        ledger["sha256"].as_str().unwrap().to_string(),
    )
}

/// `capflow ingest penman INPUT --out OUT`, optionally under `strace -f -qq ARGS`.
fn ingest_penman(
    input: &Path,
    out: &Path,
    strace: Option<(&str, &[&str])>,
) -> std::process::Output {
    let mut command = match strace {
        Some((strace, args)) => {
            let mut command = Command::new(strace);
            command
                .args(["-f", "-qq"])
                .args(args)
                .arg(common::capflow_bin());
            command
        }
        None => Command::new(common::capflow_bin()),
    };
    command
        .args(["ingest", "penman"])
        .arg(input)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// A commit killed at the rename of `rejected.parquet` once left the new manifest beside the
/// previous version's ledger (or, in a first commit, no ledger at all), and `validate` called the
/// dataset valid. The ledger now goes into place before the manifest, `validate` reports an alias
/// that is not the manifest's ledger, and the next writer puts the ledger back.
#[test]
fn a_commit_killed_at_the_ledger_leaves_a_true_ledger_and_validate_checks_it() {
    let Some(strace) = common::strace() else {
        eprintln!("skipped: strace is not installed");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let good = common::repo_root().join("examples/data/amr/captions.amr");
    // The same graphs and one that does not parse: a ledger with one row.
    let with_bad = tmp.path().join("with-bad.amr");
    let mut text = std::fs::read_to_string(&good).unwrap();
    text.push_str("\n# ::id broken.0\n# ::snt a broken graph\n(b / broken :ARG0 (\n");
    std::fs::write(&with_bad, text).unwrap();
    let out = tmp.path().join("ds");
    let alias = out.join("rejected.parquet");
    assert!(ingest_penman(&good, &out, None).status.success());
    let (_, first_ledger) = ledger_entry(&out);

    // Version 2 rejects a record; the run is killed at its rename onto `rejected.parquet`,
    // whose number a traced run of the same command on a copy of the dataset tells.
    let copy = tmp.path().join("copy");
    common::copy_dir(&out, &copy);
    let trace = tmp.path().join("trace");
    let traced = ingest_penman(
        &with_bad,
        &copy,
        Some((
            strace,
            &["-o", trace.to_str().unwrap(), "-e", "trace=rename"],
        )),
    );
    assert!(traced.status.success());
    let renames: Vec<String> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("rename("))
        .map(str::to_string)
        .collect();
    let k = 1 + renames
        .iter()
        .position(|l| l.contains("/rejected.parquet\")"))
        .unwrap_or_else(|| panic!("no rename onto rejected.parquet: {renames:?}"));
    let inject = format!("inject=rename:signal=SIGKILL:when={k}");
    let killed = ingest_penman(
        &with_bad,
        &out,
        Some((
            strace,
            &["-o", "/dev/null", "-e", "trace=rename", "-e", &inject],
        )),
    );
    assert!(!killed.status.success(), "the kill did not happen");
    // Whatever manifest is there, the alias is its ledger, byte for byte, and `validate` agrees.
    let (_, ledger_sha) = ledger_entry(&out);
    assert_eq!(
        ledger_sha, first_ledger,
        "the manifest moved before the ledger"
    );
    assert_eq!(sha256_of(&alias), ledger_sha);
    assert!(validate(&out).unwrap().is_ok());

    // The same command completes version 2, with its own ledger under the stable name.
    assert!(ingest_penman(&with_bad, &out, None).status.success());
    assert_eq!(version(&out), 2);
    let (ledger_path, ledger_sha) = ledger_entry(&out);
    assert_ne!(ledger_sha, first_ledger);
    assert_eq!(sha256_of(&alias), ledger_sha);
    assert_eq!(sha256_of(&out.join(ledger_path)), ledger_sha);
    assert!(validate(&out).unwrap().is_ok());

    // An alias that is stale or missing anyway: `validate` fails (exit 3) naming it...
    let validate_cli = || {
        Command::new(common::capflow_bin())
            .arg("validate")
            .arg(&out)
            .output()
            .unwrap()
    };
    std::fs::remove_file(&alias).unwrap();
    for damage in ["missing", "stale"] {
        if damage == "stale" {
            // Another version's ledger: readable Parquet, other rows.
            let other = tmp.path().join("other");
            assert!(ingest_penman(&good, &other, None).status.success());
            std::fs::copy(other.join("rejected.parquet"), &alias).unwrap();
        }
        let report = validate(&out).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.to_string().contains("rejected.parquet")),
            "{damage}: {report:?}"
        );
        let output = validate_cli();
        assert_eq!(output.status.code(), Some(3), "{damage}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("rejected.parquet"));
        // ...and the next writer repairs it as soon as it holds the lock, even when its own run
        // then fails (here on a missing input).
        let failed = ingest_penman(&tmp.path().join("no-such.amr"), &out, None);
        assert_eq!(failed.status.code(), Some(4));
        assert_eq!(sha256_of(&alias), ledger_sha, "{damage}");
        assert!(validate(&out).unwrap().is_ok(), "{damage}");
        if damage == "missing" {
            std::fs::remove_file(&alias).unwrap();
        }
    }
}
