//! Persisted run state (`capflow run --state DIR`): what each image's outputs were computed
//! from, so that a rerun recomputes only new, changed and removed images.
//!
//! ```text
//! STATE/state.json            engine version, config hash, models digest, buckets, and the
//!                             dataset version (and manifest checksum) the state belongs to
//! STATE/buckets/b<NNNNN>.json per image of the bucket: the digest of its input rows and the
//!                             records its method stages rejected
//! STATE/inputs.json           every input piece's file stamps, images, counts and rejections
//!                             (see [`super::inputs`])
//! STATE/records/              per bucket, what SSA keeps of each image for a `--refit`
//!                             (see [`super::refit`])
//! ```
//!
//! An image's digest is the SHA-256 of its input rows (every column, in read order). A rerun
//! compares digests: a new or changed digest recomputes the image, a missing one retracts it.
//! Everything else about the run must be the same for the comparison to mean anything: the
//! engine version, the config hash (which covers the seed, the methods' settings and the bucket
//! count), and the digest of the rows the corpus-level models are fitted on. When one of them
//! differs, or the dataset is no longer the version the state was written for, every image is
//! recomputed; the reason is printed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::key::image_route;
use super::runtime::KeyedRow;
use crate::error::{Error, Result};
use crate::export::Manifest;
use crate::schema::RejectedRow;

/// The state file's name.
pub const STATE_FILE: &str = "state.json";
const STATE_FORMAT: &str = "capflow-state";
const STATE_FORMAT_VERSION: u32 = 1;
const BUCKETS_DIR: &str = "buckets";

/// The bucket of an image: its routing hash modulo the bucket count.
pub fn bucket_of(image_id: &str, buckets: usize) -> usize {
    (image_route(image_id) % buckets.max(1) as u64) as usize
}

/// What a state was written for; a rerun must match all of it to reuse the per-image digests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateHeader {
    pub format: String,
    pub format_version: u32,
    pub engine_version: String,
    pub config_hash: String,
    /// Digest of the rows the corpus-level models were fitted on (none without such models).
    pub models_digest: Option<String>,
    pub buckets: usize,
    /// The dataset version this state describes, and its manifest's checksum.
    pub dataset_version: u64,
    pub manifest_sha256: String,
}

/// One image's entry in a bucket's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageState {
    /// SHA-256 of the image's input rows, hex.
    pub digest: String,
    /// Records the method stages rejected for this image (carried into the ledger while the
    /// image is unchanged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<RejectedRow>,
}

/// The per-image states of one bucket, by image id.
pub type BucketState = BTreeMap<String, ImageState>;

/// Bytes a rerun that collects its rows holds per byte of the per-image states of its buckets,
/// besides what its rows take: the id of every image (the chunk layout of every bucket), the
/// states of one bucket at a time, and the rewriting of the chunks that hold changed images,
/// which grows with the dataset. Measured with the SSA recipe on `capflow synth` data: a rerun
/// that changed 1% of 1,010,000 images (89 MB of state files, rows estimated at 240 MB)
/// peaked at 977 MB; rounded up so that such a rerun stays within a budget of twice the sum.
pub const HELD_PER_STATE_BYTE: u64 = 3;

/// A `--state` directory.
#[derive(Clone, Debug)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Opens (creating when missing) a state directory.
    pub fn open(dir: &Path) -> Result<StateDir> {
        std::fs::create_dir_all(dir.join(BUCKETS_DIR)).map_err(|e| Error::io(dir, e))?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The header, or `None` for a state nothing was committed with yet.
    pub fn header(&self) -> Result<Option<StateHeader>> {
        let path = self.dir.join(STATE_FILE);
        let Some(header) = read_json::<StateHeader>(&path, "a capflow state file")? else {
            return Ok(None);
        };
        if header.format != STATE_FORMAT || header.format_version > STATE_FORMAT_VERSION {
            return Err(Error::invalid(
                path.display().to_string(),
                format!(
                    "state format {:?} version {} is not one this capflow reads",
                    header.format, header.format_version
                ),
            ));
        }
        Ok(Some(header))
    }

    fn bucket_path(&self, bucket: usize) -> PathBuf {
        self.dir
            .join(BUCKETS_DIR)
            .join(format!("b{bucket:05}.json"))
    }

    /// About how many bytes a rerun that collects its rows holds for the per-image states of
    /// `buckets`, besides its rows: their files' bytes, [`HELD_PER_STATE_BYTE`] times over.
    pub fn held_bytes(&self, buckets: &[usize]) -> Result<u64> {
        let mut bytes = 0;
        for &bucket in buckets {
            let path = self.bucket_path(bucket);
            match std::fs::metadata(&path) {
                Ok(meta) => bytes += meta.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        Ok(bytes * HELD_PER_STATE_BYTE)
    }

    /// The per-image states of one bucket (empty when the bucket has none).
    pub fn read_bucket(&self, bucket: usize) -> Result<BucketState> {
        let path = self.bucket_path(bucket);
        Ok(read_json(&path, "a capflow bucket state")?.unwrap_or_default())
    }

    /// Replaces one bucket's per-image states (written to a temporary file, then renamed).
    pub fn write_bucket(&self, bucket: usize, state: &BucketState) -> Result<()> {
        let path = self.bucket_path(bucket);
        let text = serde_json::to_vec(state)
            .map_err(|e| Error::invalid(path.display().to_string(), e.to_string()))?;
        write_replacing(&path, &text)
    }

    /// Writes the header last: it is what makes the bucket files valid for the next run.
    pub fn write_header(&self, header: &StateHeader) -> Result<()> {
        let path = self.dir.join(STATE_FILE);
        let mut text = serde_json::to_vec_pretty(header)
            .map_err(|e| Error::invalid(path.display().to_string(), e.to_string()))?;
        text.push(b'\n');
        write_replacing(&path, &text)
    }

    /// Removes the header, so that the bucket files count for nothing until a new one is
    /// written (called before bucket files are replaced).
    pub fn invalidate(&self) -> Result<()> {
        remove_if_present(&self.dir.join(STATE_FILE))
    }
}

/// Removes the file at `path` if there is one.
pub(crate) fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// The JSON file at `path` as a `T` (`what` it should be, for errors); `None` when it does not
/// exist.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
) -> Result<Option<T>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::record(
            path.display().to_string(),
            format!("line {}", e.line()),
            format!("not {what}: {e}"),
        )
    })
}

pub(crate) fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    write_replacing_with(path, |out| out.write_all(bytes))
}

/// Replaces `path` with what `write` writes, through a buffer, into a file beside it that is
/// synced and then renamed over it.
pub(crate) fn write_replacing_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    {
        let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let mut out = std::io::BufWriter::new(file);
        write(&mut out).map_err(|e| Error::io(&tmp, e))?;
        let file = out
            .into_inner()
            .map_err(|e| Error::io(&tmp, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// A writer that feeds a SHA-256.
struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Adds one row's content (not its read position) to a digest.
fn hash_row(hasher: &mut Sha256, keyed: &KeyedRow) -> Result<()> {
    serde_json::to_writer(HashWriter(hasher), &keyed.row)
        .map_err(|e| Error::invalid("digest of an input row", e.to_string()))?;
    hasher.update(b"\n");
    Ok(())
}

/// The digest of every image's rows ([`image_digest`]).
pub fn image_digests(rows: &[Arc<KeyedRow>]) -> Result<BTreeMap<String, String>> {
    let mut by_image: BTreeMap<&str, Vec<&KeyedRow>> = BTreeMap::new();
    for keyed in rows {
        by_image
            .entry(keyed.row.image_id())
            .or_default()
            .push(keyed);
    }
    by_image
        .into_iter()
        .map(|(id, mut rows)| Ok((id.to_string(), image_digest(&mut rows)?)))
        .collect()
}

/// The digest of one image's rows, given in any order: the SHA-256 of its rows in read order
/// (input unit, then ordinal). Both engines digest images with it, so a state written by one
/// compares with the other's runs.
pub fn image_digest(rows: &mut [&KeyedRow]) -> Result<String> {
    rows.sort_by_key(|keyed| (keyed.unit, keyed.ordinal));
    let mut hasher = Sha256::new();
    for keyed in rows.iter() {
        hash_row(&mut hasher, keyed)?;
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The digest of a list of rows with their read positions (the rows the corpus-level models
/// are fitted on): [`RowsDigest`], so the same whichever workers read them in which order.
pub fn rows_digest<'a>(rows: impl IntoIterator<Item = &'a Arc<KeyedRow>>) -> Result<String> {
    let mut digest = RowsDigest::default();
    for keyed in rows {
        digest.add(keyed)?;
    }
    Ok(digest.hex())
}

/// An order-independent digest of rows and their read positions: the number of rows and the
/// sum, modulo 2^256, of every row's SHA-256 over its input unit, ordinal and content. Two
/// lists of rows have the same digest exactly when they hold the same rows at the same
/// positions (but for SHA-256 collisions), whatever order they were added and merged in, so
/// each worker adds the rows it reads and the sums are merged.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowsDigest {
    rows: u64,
    /// Little-endian 64-bit limbs of the sum.
    sum: [u64; 4],
}

impl RowsDigest {
    /// Adds one row at its read position.
    pub fn add(&mut self, keyed: &KeyedRow) -> Result<()> {
        let mut hasher = Sha256::new();
        hasher.update(keyed.unit.to_le_bytes());
        hasher.update(keyed.ordinal.to_le_bytes());
        hash_row(&mut hasher, keyed)?;
        let hash = hasher.finalize();
        let mut limbs = [0u64; 4];
        for (limb, bytes) in limbs.iter_mut().zip(hash.chunks_exact(8)) {
            *limb = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        }
        self.add_sum(limbs, 1);
        Ok(())
    }

    /// Adds the rows of `other`.
    pub fn merge(&mut self, other: &RowsDigest) {
        self.add_sum(other.sum, other.rows);
    }

    fn add_sum(&mut self, limbs: [u64; 4], rows: u64) {
        let mut carry = false;
        for (sum, limb) in self.sum.iter_mut().zip(limbs) {
            let (partial, first) = sum.overflowing_add(limb);
            let (total, second) = partial.overflowing_add(u64::from(carry));
            *sum = total;
            carry = first || second;
        }
        self.rows += rows;
    }

    /// The digest as hex: the row count, then the sum.
    pub fn hex(&self) -> String {
        let mut bytes = self.rows.to_le_bytes().to_vec();
        for limb in self.sum {
            bytes.extend_from_slice(&limb.to_le_bytes());
        }
        hex::encode(bytes)
    }
}

/// Which images a run computes, and why.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Images whose outputs are computed in this run (new or changed, or every image).
    pub compute: BTreeSet<String>,
    /// Images of the previous version that are no longer in the inputs.
    pub removed: BTreeSet<String>,
    /// Images whose outputs are carried forward.
    pub unchanged: usize,
    /// Why every image is recomputed, when that is so.
    pub full: Option<String>,
    /// The ids of the previous version's images in each bucket this process owns, in id order
    /// (empty for a full run). Their states stay in the state directory, read a bucket at a
    /// time where they are needed ([`StateDir::read_bucket`]).
    pub previous_ids: BTreeMap<usize, Vec<Box<str>>>,
}

impl Plan {
    /// A run that computes every image.
    pub fn full(digests: &BTreeMap<String, String>, reason: impl Into<String>) -> Plan {
        Plan {
            compute: digests.keys().cloned().collect(),
            full: Some(reason.into()),
            ..Plan::default()
        }
    }

    /// A bucket's per-image states after this run: its `previous` states less the removed
    /// images, with the digests of the bucket's images this run read (`digests`). A computed
    /// image's method-stage rejections are taken from `rejected`; a carried one keeps its own.
    pub fn next_states(
        &self,
        mut previous: BucketState,
        digests: &[(&String, &String)],
        rejected: &mut BTreeMap<String, Vec<RejectedRow>>,
    ) -> BucketState {
        previous.retain(|id, _| !self.removed.contains(id));
        for &(id, digest) in digests {
            let rejected = match self.compute.contains(id) {
                true => rejected.remove(id).unwrap_or_default(),
                false => (previous.get(id))
                    .map(|s| s.rejected.clone())
                    .unwrap_or_default(),
            };
            previous.insert(
                id.clone(),
                ImageState {
                    digest: digest.clone(),
                    rejected,
                },
            );
        }
        previous
    }

    /// Whether bucket `b` holds an image that is computed or removed in this run.
    pub fn touches(&self, bucket: usize, buckets: usize) -> bool {
        self.full.is_some()
            || self
                .compute
                .iter()
                .chain(&self.removed)
                .any(|id| bucket_of(id, buckets) == bucket)
    }

    /// One line for the run's output.
    pub fn describe(&self) -> String {
        describe_plan(
            self.full.as_deref(),
            self.compute.len() as u64,
            self.removed.len() as u64,
            self.unchanged as u64,
        )
    }
}

/// The line a run with a state prints about its plan: why every image is computed (`full`),
/// or how many are computed, retracted and carried.
pub fn describe_plan(full: Option<&str>, computed: u64, removed: u64, carried: u64) -> String {
    match full {
        Some(reason) => format!("computing all {computed} images ({reason})"),
        None => format!(
            "computing {computed} new or changed images, retracting {removed} removed, carrying \
             {carried} unchanged"
        ),
    }
}

/// Compares this run's digests with a state's.
///
/// `current` is what this run would write into the state header (its `dataset_version` and
/// `manifest_sha256` are the previous dataset's, as found in the output directory); `owned`
/// lists the buckets this process computes.
///
/// `header` is the state's header as read before the run started: with several processes, the
/// first one removes it once every process has read it (see [`StateDir::invalidate`]).
///
/// `touched` lists the images whose rows were read when the inputs were read only in part
/// ([`super::inputs`]): `digests` then covers only them, and every other image of the state is
/// unchanged.
pub fn plan(
    state: &StateDir,
    header: Option<StateHeader>,
    current: &StateHeader,
    previous: Option<(&Manifest, &str)>,
    digests: &BTreeMap<String, String>,
    touched: Option<&BTreeSet<String>>,
    owned: &[usize],
) -> Result<Plan> {
    if let Some(reason) = stale(header.as_ref(), current, previous) {
        return Ok(Plan::full(digests, reason));
    }
    let mut plan = Plan::default();
    // A bucket at a time: only the ids of its images are kept, and the states of those read
    // until they are compared.
    let mut read_states = BucketState::new();
    for &bucket in owned {
        let states = state.read_bucket(bucket)?;
        let mut ids = Vec::with_capacity(states.len());
        for (id, image) in states {
            let read = touched.is_none_or(|t| t.contains(&id));
            if !read {
                plan.unchanged += 1;
            } else if !digests.contains_key(&id) {
                plan.removed.insert(id.clone());
            } else {
                read_states.insert(id.clone(), image);
            }
            ids.push(id.into_boxed_str());
        }
        plan.previous_ids.insert(bucket, ids);
    }
    for (id, digest) in digests {
        let old = read_states.get(id);
        if old.is_some_and(|o| &o.digest == digest) {
            plan.unchanged += 1;
        } else {
            plan.compute.insert(id.clone());
        }
    }
    Ok(plan)
}

/// Why a state's per-image digests cannot be compared with this run's, so that every image is
/// computed: no header (a new state, or a run that died before its commit), another engine,
/// configuration, bucket count or models digest, or a dataset in the output directory other
/// than the one the state describes. `None` when they can.
pub fn stale(
    header: Option<&StateHeader>,
    current: &StateHeader,
    previous: Option<(&Manifest, &str)>,
) -> Option<String> {
    let Some(header) = header else {
        return Some("the state is new".into());
    };
    let Some((manifest, manifest_sha)) = previous else {
        return Some("the output directory holds no dataset".into());
    };
    // A version `capflow optimize` committed holds the rows of the version it compacted.
    let data = manifest.data_version(manifest_sha);
    if header.engine_version != current.engine_version {
        Some(format!(
            "the state was written by capflow {}",
            header.engine_version
        ))
    } else if header.config_hash != current.config_hash {
        Some("the dataflow's configuration changed".to_string())
    } else if header.buckets != current.buckets {
        Some("the bucket count changed".to_string())
    } else if header.models_digest != current.models_digest {
        Some("the rows the corpus-level models are fitted on changed".to_string())
    } else if (header.dataset_version, header.manifest_sha256.as_str())
        != (data.version, data.manifest_sha256.as_str())
    {
        Some(format!(
            "the state describes dataset version {} but the output directory holds version {}",
            header.dataset_version, manifest.version
        ))
    } else {
        None
    }
}

/// Header fields for `format` and `format_version`.
pub fn header(
    config_hash: String,
    models_digest: Option<String>,
    buckets: usize,
    dataset: Option<(&Manifest, &str)>,
) -> StateHeader {
    let data = dataset.map(|(manifest, sha)| manifest.data_version(sha));
    StateHeader {
        format: STATE_FORMAT.to_string(),
        format_version: STATE_FORMAT_VERSION,
        engine_version: crate::ENGINE_VERSION.to_string(),
        config_hash,
        models_digest,
        buckets,
        dataset_version: data.as_ref().map_or(0, |d| d.version),
        manifest_sha256: data.map_or(String::new(), |d| d.manifest_sha256),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(digest: &str, reasons: &[&str]) -> ImageState {
        ImageState {
            digest: digest.into(),
            rejected: reasons.iter().map(|r| rejection(r)).collect(),
        }
    }

    fn rejection(reason: &str) -> RejectedRow {
        RejectedRow {
            format: "stage".into(),
            source_file: String::new(),
            record: "image".into(),
            line: None,
            byte_offset: None,
            reason: reason.into(),
            excerpt: String::new(),
        }
    }

    #[test]
    fn a_buckets_next_states_drop_the_removed_and_take_each_read_images_digest() {
        // a: carried unread; b: read, unchanged (keeps its rejection); c: read, changed (takes
        // the run's); d: removed; e: new.
        let previous: BucketState = [
            ("a", image("da", &["old a"])),
            ("b", image("db", &["old b"])),
            ("c", image("dc", &["old c"])),
            ("d", image("dd", &[])),
        ]
        .into_iter()
        .map(|(id, s)| (id.to_string(), s))
        .collect();
        let plan = Plan {
            compute: ["c".to_string(), "e".to_string()].into(),
            removed: ["d".to_string()].into(),
            ..Plan::default()
        };
        let ids = ["b", "c", "e"].map(String::from);
        let digests = ["db", "dc2", "de"].map(String::from);
        let read: Vec<(&String, &String)> = ids.iter().zip(&digests).collect();
        let mut rejected = BTreeMap::from([("c".to_string(), vec![rejection("new c")])]);
        let next = plan.next_states(previous, &read, &mut rejected);
        let expected: BucketState = [
            ("a", image("da", &["old a"])),
            ("b", image("db", &["old b"])),
            ("c", image("dc2", &["new c"])),
            ("e", image("de", &[])),
        ]
        .into_iter()
        .map(|(id, s)| (id.to_string(), s))
        .collect();
        assert_eq!(next, expected);
        assert!(rejected.is_empty(), "{rejected:?}");
    }

    #[test]
    fn buckets_spread_image_ids_and_never_leave_the_range() {
        let mut counts = [0usize; 8];
        for i in 0..8000 {
            counts[bucket_of(&format!("img{i}"), 8)] += 1;
        }
        // FNV-1a spreads sequential ids: every bucket gets 1000 ± 15%.
        assert!(
            counts.iter().all(|&c| (850..=1150).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(bucket_of("anything", 1), 0);
    }
}
