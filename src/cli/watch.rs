//! `capflow watch SPEC --input-dir D`: keep a dataset up to date while input files arrive.
//!
//! The watcher polls `D` (every file under it: path, size, modification time). Once the files
//! have changed and then stayed the same for one poll (so that a file still being copied is not
//! read half-written), and `--commit-interval` has passed since the last commit, it runs the
//! spec incrementally with the watcher's state: only new, changed and removed images are
//! recomputed, and the commit is a new dataset version with its changelog. A run that fails
//! (bad input, a crashed model adapter) leaves the dataset at its last version; the watcher says
//! so and waits for the next change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::out::{diagnostic, status};
use super::run::{run_with, RunArgs, RunOutcome};
use crate::dataflow::ClusterOptions;
use crate::error::{Error, Result};

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The dataflow spec (a TOML file, e.g. dataflows/ssa-flickr30k.toml).
    pub spec: PathBuf,
    /// The directory to watch; every input is read from its subdirectory of it, as with
    /// `capflow run --input`.
    #[arg(long)]
    pub input_dir: PathBuf,
    /// Dataset directory to write (default: the spec's `output.dir`, else `out/<name>`).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// State directory (default: `<out>.state` beside the dataset).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Least time between two commits, e.g. `30s`, `5m`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub commit_interval: Duration,
    /// How often the input directory is scanned.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub poll: Duration,
    /// Stop after this many commits (default: run until interrupted).
    #[arg(long)]
    pub max_commits: Option<u64>,
    /// Worker threads.
    #[arg(short = 'w', long = "workers", default_value_t = 1)]
    pub workers: usize,
}

/// Parses `500ms`, `10s`, `5m`, `1h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 500ms, 10s, 5m or 1h"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown duration unit `{other}` (ms, s, m, h)")),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("`{text}` is not a duration"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Every file under `dir`: relative path → (size, modification time).
type Snapshot = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

fn snapshot(dir: &Path) -> Result<Snapshot> {
    let mut files = Snapshot::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries = std::fs::read_dir(&current).map_err(|e| Error::io(&current, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&current, e))?;
            let path = entry.path();
            let meta = entry.metadata().map_err(|e| Error::io(&path, e))?;
            if meta.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
                files.insert(relative, (meta.len(), meta.modified().ok()));
            }
        }
    }
    Ok(files)
}

pub fn run(args: WatchArgs) -> Result<()> {
    // A missing --input-dir, or a file in its place, is an input that cannot be read (exit 4).
    std::fs::read_dir(&args.input_dir).map_err(|e| Error::io(&args.input_dir, e))?;
    let spec = crate::dataflow::DataflowSpec::from_file(&args.spec)?;
    let out = spec.output_dir(args.out.as_deref());
    let state = args.state.clone().unwrap_or_else(|| {
        let mut name = out.file_name().unwrap_or_default().to_os_string();
        name.push(".state");
        out.with_file_name(name)
    });
    status!(
        "capflow watch {}: watching {} into {} (state {}), committing at most every {:?}",
        spec.name,
        args.input_dir.display(),
        out.display(),
        state.display(),
        args.commit_interval
    );
    let run_args = || RunArgs {
        spec: args.spec.clone(),
        out: Some(out.clone()),
        input: Some(args.input_dir.clone()),
        state: Some(state.clone()),
        memory_limit: crate::dataflow::engine::DEFAULT_MEMORY_LIMIT,
        refit: false,
        models: None,
        cluster: ClusterOptions {
            workers: args.workers,
            ..ClusterOptions::default()
        },
        json: false,
    };
    let mut commits = 0u64;
    let mut last_run: Option<Snapshot> = None;
    let mut last_commit: Option<Instant> = None;
    let mut previous_scan = snapshot(&args.input_dir)?;
    loop {
        std::thread::sleep(args.poll);
        // A directory being replaced can vanish between listing and reading: scan again later.
        let Ok(scan) = snapshot(&args.input_dir) else {
            continue;
        };
        // Wait until the directory holds still for one poll, then for the commit interval.
        let settled = scan == previous_scan;
        previous_scan = scan.clone();
        let changed = last_run.as_ref() != Some(&scan);
        let due = last_commit.is_none_or(|t| t.elapsed() >= args.commit_interval);
        if !(settled && changed && due) {
            continue;
        }
        last_run = Some(scan);
        match run_with(run_args(), true) {
            Ok(RunOutcome::Committed(version)) => {
                commits += 1;
                last_commit = Some(Instant::now());
                status!(
                    "capflow watch {}: committed version {version} of {}",
                    spec.name,
                    out.display()
                );
            }
            Ok(RunOutcome::Unchanged | RunOutcome::Kept(_) | RunOutcome::Part(_)) => {
                status!(
                    "capflow watch {}: the inputs changed but no image did; no new version",
                    spec.name
                );
            }
            Err(err) => diagnostic!(
                "capflow watch {}: this update failed and nothing was committed: {err}; \
                 waiting for the inputs to change",
                spec.name
            ),
        }
        if args.max_commits.is_some_and(|max| commits >= max) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 days").is_err());
    }
}
