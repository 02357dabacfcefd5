//! A run's fitted corpus-level models kept in its state, so that reruns use the same models.
//!
//! The shipped recipes fit their models (SSA's quality scorer and word vectors, the relatedness
//! encoder, CutSwap's vocabulary and clusters) on the run's own inputs. Without an artifact, a
//! new caption changes what the models learn from, so a rerun with `--state` would recompute
//! every image. A run with a state that fits its models stores them as an artifact in the state
//! (`STATE/models/ID.bin`, named in `STATE/models.json`): SSA's scorer and word vectors as
//! fitted, the other models' statistics (their fit from them is exact and quick); later runs
//! with that state use the same models, bit for bit, so only new, changed and removed images
//! are computed. `capflow run --refit` fits them on the
//! inputs again (and stores the new artifact); `capflow run --models STATE` gives a run without
//! that state the same models.
//!
//! An artifact's id is the digest of the rows it was fitted on ([`super::state::RowsDigest`]):
//! fitting the same inputs again gives the same id, and the state's header names it as the
//! models' digest. The file's SHA-256 is checked when it is read.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::models::FittedModels;
use super::state::{read_json, write_replacing};
use super::DataflowSpec;
use crate::error::{Error, Result};

/// The state's file that names the models its runs use.
pub const MODELS_FILE: &str = "models.json";
/// The state's directory of model artifacts.
pub const MODELS_DIR: &str = "models";
const FORMAT: &str = "capflow-models";
const FORMAT_VERSION: u32 = 1;

/// What `models.json` says of an artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactInfo {
    pub format: String,
    pub format_version: u32,
    /// The digest of the rows the models were fitted on.
    pub id: String,
    /// The configuration hash of the spec they were fitted for.
    pub config_hash: String,
    /// The capflow engine that wrote them.
    pub engine_version: String,
    /// What the models learned from: captions with SSA, else images.
    pub learned_from: u64,
    /// The artifact's file, relative to the state directory, and its SHA-256.
    pub file: String,
    pub sha256: String,
}

/// Fitted models, and what `models.json` says of them.
#[derive(Clone, Debug)]
pub struct ModelArtifact {
    pub info: ArtifactInfo,
    pub models: FittedModels,
}

impl ModelArtifact {
    /// An artifact of `models`, fitted for `spec` on the rows of digest `id`.
    pub fn new(spec: &DataflowSpec, id: String, models: FittedModels) -> ModelArtifact {
        ModelArtifact {
            info: ArtifactInfo {
                format: FORMAT.to_string(),
                format_version: FORMAT_VERSION,
                file: format!("{MODELS_DIR}/{id}.bin"),
                id,
                config_hash: spec.config_hash(),
                engine_version: crate::ENGINE_VERSION.to_string(),
                learned_from: models.learned_from,
                sha256: String::new(),
            },
            models,
        }
    }

    /// Writes the artifact into the state directory `dir` and names it in `models.json`.
    /// Artifacts of earlier fits stay (each is named by its id).
    pub fn save(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join(&self.info.file);
        let bytes = bincode::serialize(&self.models)
            .map_err(|e| Error::invalid(path.display().to_string(), e.to_string()))?;
        let models_dir = dir.join(MODELS_DIR);
        std::fs::create_dir_all(&models_dir).map_err(|e| Error::io(&models_dir, e))?;
        write_replacing(&path, &bytes)?;
        self.info.sha256 = hex::encode(Sha256::digest(&bytes));
        let info_path = dir.join(MODELS_FILE);
        let mut text = serde_json::to_vec_pretty(&self.info)
            .map_err(|e| Error::invalid(info_path.display().to_string(), e.to_string()))?;
        text.push(b'\n');
        write_replacing(&info_path, &text)
    }

    /// The artifact `models.json` in the state directory `dir` names; `None` when there is
    /// none. Fails when the file it names is missing, damaged or not one this capflow reads.
    pub fn load(dir: &Path) -> Result<Option<ModelArtifact>> {
        let info_path = dir.join(MODELS_FILE);
        let Some(info) = read_json::<ArtifactInfo>(&info_path, "a capflow models file")? else {
            return Ok(None);
        };
        let invalid =
            |path: &Path, reason: String| Error::invalid(path.display().to_string(), reason);
        if info.format != FORMAT || info.format_version > FORMAT_VERSION {
            return Err(invalid(
                &info_path,
                format!(
                    "models format {:?} version {} is not one this capflow reads",
                    info.format, info.format_version
                ),
            ));
        }
        let path = artifact_path(dir, &info)?;
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let sha = hex::encode(Sha256::digest(&bytes));
        if sha != info.sha256 {
            return Err(invalid(
                &path,
                format!(
                    "the models file's SHA-256 is {sha}, {} says {}",
                    MODELS_FILE, info.sha256
                ),
            ));
        }
        let models = bincode::deserialize(&bytes).map_err(|e| invalid(&path, e.to_string()))?;
        Ok(Some(ModelArtifact { info, models }))
    }

    /// Why these models cannot serve a run of `spec` (fitted for another configuration or by
    /// another engine); `None` when they can.
    pub fn mismatch(&self, spec: &DataflowSpec) -> Option<String> {
        if self.info.engine_version != crate::ENGINE_VERSION {
            Some(format!(
                "the models were fitted by capflow {}",
                self.info.engine_version
            ))
        } else if self.info.config_hash != spec.config_hash() {
            Some("the models were fitted for another configuration of the dataflow".into())
        } else {
            None
        }
    }
}

/// The artifact's file in `dir`: a plain name under `models/`, never a path outside it.
fn artifact_path(dir: &Path, info: &ArtifactInfo) -> Result<PathBuf> {
    let name = info.file.strip_prefix(&format!("{MODELS_DIR}/"));
    match name {
        Some(name)
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
                && !name.starts_with('.') =>
        {
            Ok(dir.join(MODELS_DIR).join(name))
        }
        _ => Err(Error::invalid(
            dir.join(MODELS_FILE).display().to_string(),
            format!("{:?} is not a file under {MODELS_DIR}/", info.file),
        )),
    }
}
