//! `capflow merge DATASET --from DIR...`: complete a cluster run's dataset from per-host outputs.
//!
//! Without shared storage, each process of `capflow run -n N` writes the shards of its buckets
//! into its own host's output directory, and process 0 commits the manifest naming all of them.
//! Once the other hosts' output directories are reachable (copied, mounted), `merge` copies every
//! shard the manifest names but the dataset lacks from them, checks each copy's SHA-256 against
//! the manifest, and validates the result.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::out::{self, status};
use crate::error::{Error, Result};
use crate::export::{fsutil, read_manifest, validate};

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The dataset directory holding process 0's manifest.
    pub dataset: PathBuf,
    /// Output directories of the other processes (any order).
    #[arg(long, required = true, num_args = 1..)]
    pub from: Vec<PathBuf>,
    /// Print the result as one JSON object on stdout (dataset, version, shards copied, files
    /// checked) instead of a line of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: MergeArgs) -> Result<()> {
    let manifest = read_manifest(&args.dataset)?;
    // Every path is checked before anything is copied: none may leave the dataset.
    if let Some(file) = manifest
        .files
        .iter()
        .find(|file| crate::export::safe_relative_path(&file.path).is_none())
    {
        return Err(Error::record(
            args.dataset.join("manifest.json").display().to_string(),
            file.path.clone(),
            "the file's path leaves the dataset directory",
        ));
    }
    let mut copied = 0usize;
    let mut missing = Vec::new();
    for file in &manifest.files {
        let target = args.dataset.join(&file.path);
        if target.is_file() {
            continue;
        }
        let source = args
            .from
            .iter()
            .map(|dir| dir.join(&file.path))
            .find(|p| p.is_file());
        let Some(source) = source else {
            missing.push(file.path.clone());
            continue;
        };
        let bytes = std::fs::read(&source).map_err(|e| Error::io(&source, e))?;
        let sha = hex::encode(Sha256::digest(&bytes));
        if sha != file.sha256 {
            return Err(Error::invalid(
                source.display().to_string(),
                format!(
                    "SHA-256 {sha} differs from the manifest's {} for {}",
                    file.sha256, file.path
                ),
            ));
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        // Written beside its final name and renamed, as the dataset writer commits a shard.
        let staged = target.with_extension("parquet.partial");
        fsutil::write_synced(&staged, &bytes)?;
        fsutil::rename(&staged, &target)?;
        if let Some(parent) = target.parent() {
            fsutil::sync_dir(parent)?;
        }
        copied += 1;
    }
    if !missing.is_empty() {
        return Err(Error::invalid(
            format!("dataset {}", args.dataset.display()),
            format!(
                "{} file(s) of the manifest are in none of the --from directories, e.g. {}",
                missing.len(),
                missing[0]
            ),
        ));
    }
    let report = validate(&args.dataset)?;
    if !report.is_ok() {
        return Err(Error::invalid(
            format!("dataset {}", args.dataset.display()),
            format!("does not validate after the merge: {report:?}"),
        ));
    }
    status!(
        "capflow merge: copied {copied} shard(s) into {}; all {} files of version {} check out",
        args.dataset.display(),
        manifest.files.len(),
        manifest.version
    );
    if args.json {
        out::json(&serde_json::json!({
            "dataset": args.dataset.display().to_string(),
            "version": manifest.version,
            "copied": copied,
            "files": manifest.files.len(),
        }))?;
    }
    Ok(())
}
