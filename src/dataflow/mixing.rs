//! `[mix]` other than `all` in the streaming engine ([`super::engine`]).
//!
//! Such a mix chooses among every augmented sample of the run at once
//! ([`crate::select::mix`]), so a chunk's samples cannot be written when its images are done.
//! A worker's writer writes each chunk's input tables as it always does, and holds the chunk's
//! samples (those read from the inputs, then the stages') in an Arrow IPC stream in the run's
//! scratch directory, tallying the stages' samples as they pass ([`MixTally`]: eight bytes per
//! augmented sample). Once every worker has written its parts, each process's main thread
//! merges the tallies of every worker of every process into one [`MixPlan`], the same on every
//! process, and hands it back; each writer then writes its held chunks' samples shards from
//! their streams, keeping what the plan keeps, and their changes and sinks' rows with them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use arrow::array::RecordBatch;

use super::spill::{read_batches, SpillFile};
use crate::error::{Error, Result};
use crate::schema::{batch_to_rows, rows_to_batch, SampleRow, TableKind};
use crate::select::mix::{MixConfig, MixTally};

/// One worker's chunks whose samples wait for the plan, and its tally.
pub(super) struct HeldSamples {
    config: MixConfig,
    dir: PathBuf,
    tally: MixTally,
    chunks: Vec<HeldChunk>,
}

/// A chunk whose samples wait for the plan.
pub(super) struct HeldChunk {
    pub bucket: usize,
    /// The chunk's key, as its other tables' shards were closed under it.
    pub key: String,
    /// The image ids the chunk covers, `(after, through]`; a bucket's last chunk goes on to
    /// the bucket's end (`through` is `None`).
    pub after: Option<String>,
    pub through: Option<String>,
    /// Its samples' stream, and each batch's split and whether the stages made it.
    file: Option<PathBuf>,
    batches: Vec<(String, bool)>,
}

impl HeldSamples {
    pub fn new(dir: PathBuf, config: &MixConfig) -> Self {
        HeldSamples {
            config: config.clone(),
            dir,
            tally: MixTally::new(config),
            chunks: Vec::new(),
        }
    }

    /// Counts one of the stages' samples in the tally.
    pub fn tally(&mut self, sample: &SampleRow) -> Result<()> {
        self.tally.add(sample, &self.config)
    }

    /// Holds the samples of chunk `key` of `bucket`: `inputs` (read from the inputs) then
    /// `made` (the stages'), each by split.
    pub fn hold(
        &mut self,
        bucket: usize,
        key: &str,
        inputs: BTreeMap<String, Vec<SampleRow>>,
        made: BTreeMap<String, Vec<RecordBatch>>,
    ) -> Result<()> {
        let after = match self.chunks.last() {
            Some(last) if last.bucket == bucket => last.through.clone(),
            _ => None,
        };
        let mut chunk = HeldChunk {
            bucket,
            key: key.to_string(),
            after,
            through: (!key.is_empty()).then(|| key.to_string()),
            file: None,
            batches: Vec::new(),
        };
        let mut batches = Vec::new();
        for (split, rows) in inputs {
            batches.push((split, false, rows_to_batch(&rows)?));
        }
        for (split, list) in made {
            batches.extend(list.into_iter().map(|batch| (split.clone(), true, batch)));
        }
        batches.retain(|(_, _, batch)| batch.num_rows() > 0);
        if !batches.is_empty() {
            std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
            let path = self.dir.join(format!("c{:08}.arrows", self.chunks.len()));
            let mut file = SpillFile::create(path, &TableKind::Samples.schema())?;
            for (split, made, batch) in batches {
                file.write(&batch)?;
                chunk.batches.push((split, made));
            }
            chunk.file = Some(file.finish()?);
        }
        self.chunks.push(chunk);
        Ok(())
    }

    /// Ends `bucket`: its last held chunk covers the image ids up to the bucket's end, so that
    /// the previous version's samples of images after its key are retracted with it. A bucket
    /// with no chunk held gets one without samples for that.
    pub fn end_bucket(&mut self, bucket: usize) {
        match self.chunks.last_mut() {
            Some(last) if last.bucket == bucket => last.through = None,
            _ => self.chunks.push(HeldChunk {
                bucket,
                key: String::new(),
                after: None,
                through: None,
                file: None,
                batches: Vec::new(),
            }),
        }
    }

    pub fn take_tally(&mut self) -> MixTally {
        std::mem::take(&mut self.tally)
    }

    pub fn into_chunks(self) -> Vec<HeldChunk> {
        self.chunks
    }
}

impl HeldChunk {
    /// The chunk's samples, batch by batch: split, whether the stages made them, rows.
    pub fn samples(&self) -> Result<Vec<(String, bool, Vec<SampleRow>)>> {
        let Some(path) = &self.file else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(self.batches.len());
        let mut batches = read_batches(path)?;
        for (split, made) in &self.batches {
            let batch = batches.next().ok_or_else(|| {
                Error::invalid(path.display().to_string(), "the stream ends early")
            })??;
            out.push((split.clone(), *made, batch_to_rows(&batch)?));
        }
        std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
        Ok(out)
    }
}
