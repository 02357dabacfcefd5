//! [`DatasetWriter`]: stage shards in a private directory, then commit them atomically.
//!
//! Commit protocol (the manifest rename is the commit point; see
//! `docs/decisions/dataset-commit.md`):
//!
//! 1. every shard is written and fsynced in `DIR/.capflow-tmp-<pid>-<random>/`;
//! 2. shards move into `DIR/data/` under content-derived names, which no file of the current
//!    version can have unless it holds the same bytes, so the current manifest stays valid;
//! 3. `DIR/rejected.parquet`, a hard link to the new ledger shard, is renamed into place;
//! 4. the new manifest is written and fsynced in the staging directory, renamed over
//!    `DIR/manifest.json`, and `DIR` is fsynced;
//! 5. the dataset card `DIR/README.md` follows;
//! 6. shards no manifest names any more, and the staging directory, are removed.
//!
//! A crash before step 4 leaves the old dataset (or none) plus unreferenced files; a crash
//! after it leaves the new dataset with, at worst, a stale card that `validate` reports as a
//! warning. A crash between steps 3 and 4 of a version whose ledger differs from the previous
//! one's leaves the previous manifest beside the new ledger alias, which `validate` reports as a
//! problem. The next writer, once it holds the lock, repairs both: it removes the staging
//! directories and unreferenced shards of interrupted runs (a full disk frees up before the
//! retry writes anything) and puts the manifest's ledger back under `rejected.parquet`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use arrow::array::RecordBatch;

use super::card::{render_card, CardMetadata};
use super::changelog::{
    publish_changelog, stage_changelog, ChangelogWriter, StagedChangelog, CHANGES_DIR,
};
use super::fsutil::{self, DatasetLock, TMP_PREFIX};
use super::manifest::{
    parse_manifest, CardRecord, DataVersion, FileEntry, Manifest, ModelsUsed, StageMetrics,
    TableSummary, MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_FORMAT_VERSION,
};
use super::shard::{FinishedShard, FinishedShards, ShardSettings, SplitWriter};
use super::{
    is_valid_split_name, version_manifest_path, CARD_FILE, DATA_DIR, REJECTED_FILE, VERSIONS_DIR,
};
use crate::error::{Error, Result};
use crate::ingest::IngestCounts;
use crate::schema::{
    rows_to_batch, schema_fingerprint, RejectedRow, SampleRow, TableKind, TableRow,
};

/// Default shard size target: 128 MiB of encoded Parquet.
pub const DEFAULT_SHARD_BYTES: u64 = 128 * 1024 * 1024;

/// Rejected rows are buffered and written to the ledger in batches of this many.
const REJECT_FLUSH_ROWS: usize = 8192;

/// How shards and row groups are sized and compressed.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// A shard is closed once its encoded size reaches this many bytes (the last row group
    /// may overshoot it); the next rows open the next shard.
    pub shard_bytes: u64,
    /// Most rows in one row group.
    pub max_row_group_rows: usize,
    /// Most estimated bytes (before compression) in one row group; never more than a quarter of
    /// `shard_bytes`, so that a shard holds several row groups and rolls near its target.
    pub max_row_group_bytes: usize,
    /// ZSTD level (1–22).
    pub zstd_level: i32,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            shard_bytes: DEFAULT_SHARD_BYTES,
            max_row_group_rows: 128 * 1024,
            max_row_group_bytes: 64 * 1024 * 1024,
            zstd_level: 3,
        }
    }
}

/// Writes one version of a dataset directory; nothing becomes visible until [`commit`].
///
/// Rows stream in per table and split ([`write_rows`], [`write_batch`]) and rejected records
/// per record ([`reject`]); memory stays bounded by a chunk and a row group per open split.
/// Dropping the writer without committing removes its staging directory and leaves the
/// dataset as it was.
///
/// [`commit`]: DatasetWriter::commit
/// [`write_rows`]: DatasetWriter::write_rows
/// [`write_batch`]: DatasetWriter::write_batch
/// [`reject`]: DatasetWriter::reject
pub struct DatasetWriter {
    dir: PathBuf,
    staging: PathBuf,
    settings: ShardSettings,
    splits: BTreeMap<(TableKind, String), SplitWriter>,
    /// Splits partitioned by image-key bucket and bucket chunk: one shard per (table, split,
    /// bucket, chunk).
    bucketed: BTreeMap<(TableKind, String, usize, String), SplitWriter>,
    /// Bucket writers made so far: each one's number in its staged file names.
    bucket_writers: u64,
    /// Bucket chunks closed before the commit ([`DatasetWriter::finish_chunk`]).
    finished_bucketed: FinishedShards,
    /// Files of the previous version that this version keeps as they are.
    carried: Vec<FileEntry>,
    /// The carried files whose bytes are still to be checked against the previous manifest
    /// ([`DatasetWriter::carry`]), by their index in `carried`.
    unchecked: Vec<usize>,
    /// The changelog of this version, staged.
    changelog: Option<StagedChangelog>,
    /// Keep every version's manifest under `versions/` and the shards they name.
    retain_versions: bool,
    /// Which table each split name belongs to: shard names carry only the split.
    split_tables: HashMap<String, TableKind>,
    rejected: Vec<RejectedRow>,
    stages: Vec<StageMetrics>,
    dropped: BTreeMap<String, BTreeMap<String, u64>>,
    models: Option<ModelsUsed>,
    description: Option<String>,
    card_metadata: CardMetadata,
    previous: Option<(Manifest, String)>,
    /// Set by `capflow optimize`: the version whose rows this one rearranges, and the target
    /// file size it compacted to.
    compacted_from: Option<DataVersion>,
    compaction_target: Option<u64>,
    // Declared last: the lock is released after the staging directory is gone.
    lock: Option<DatasetLock>,
}

/// A new staging directory `DIR/<prefix><pid>-<random>` of this process.
fn create_staging(dir: &Path, prefix: &str) -> Result<PathBuf> {
    let staging = dir.join(format!(
        "{prefix}{}-{}",
        std::process::id(),
        fsutil::random_token()
    ));
    fs::create_dir(&staging).map_err(|e| Error::io(&staging, e))?;
    super::abort::hold_staging(&staging);
    Ok(staging)
}

impl DatasetWriter {
    /// Starts a new version of the dataset in `dir` (created when missing) with default options
    /// and the given shard size target.
    pub fn create(dir: &Path, config_hash: &str, shard_bytes: u64) -> Result<DatasetWriter> {
        let options = WriterOptions {
            shard_bytes,
            ..WriterOptions::default()
        };
        DatasetWriter::with_options(dir, config_hash, options)
    }

    /// Starts a new version of the dataset in `dir` with explicit options.
    ///
    /// Fails when another live process is writing the same directory, when `dir` holds
    /// something other than a capflow dataset, or when its manifest cannot be read.
    pub fn with_options(
        dir: &Path,
        config_hash: &str,
        options: WriterOptions,
    ) -> Result<DatasetWriter> {
        if options.shard_bytes == 0 {
            return Err(Error::Usage("shard size must be at least 1 byte".into()));
        }
        if !(1..=22).contains(&options.zstd_level) {
            return Err(Error::Usage(format!(
                "zstd level {} is outside 1..=22",
                options.zstd_level
            )));
        }
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let lock = DatasetLock::acquire(dir)?;
        check_is_dataset_dir(dir)?;
        fsutil::remove_stale_staging(dir)?;
        let previous = read_previous(dir)?;
        super::abort::watch_dataset(dir, previous.as_ref().map_or(0, |(m, _)| m.version));
        super::delta::roll_back_uncommitted(dir, previous.as_ref().map(|(m, _)| m))?;
        remove_unreferenced_shards(dir, previous.as_ref().map(|(m, _)| m), true)?;
        let staging = create_staging(dir, TMP_PREFIX)?;
        if let Some((manifest, _)) = &previous {
            repair_ledger_alias(dir, &staging, manifest)?;
        }
        Ok(DatasetWriter::assemble(
            dir,
            staging,
            config_hash,
            &options,
            previous,
            Some(lock),
        ))
    }

    /// A writer over a created staging directory.
    fn assemble(
        dir: &Path,
        staging: PathBuf,
        config_hash: &str,
        options: &WriterOptions,
        previous: Option<(Manifest, String)>,
        lock: Option<DatasetLock>,
    ) -> DatasetWriter {
        let mut split_tables = HashMap::new();
        split_tables.insert(TableKind::Rejected.name().to_string(), TableKind::Rejected);
        let finished_bucketed = FinishedShards::new(&staging);
        DatasetWriter {
            dir: dir.to_path_buf(),
            staging,
            settings: ShardSettings {
                config_hash: config_hash.to_string(),
                shard_bytes: options.shard_bytes,
                max_row_group_rows: options.max_row_group_rows,
                max_row_group_bytes: options.max_row_group_bytes,
                zstd_level: options.zstd_level,
            },
            splits: BTreeMap::new(),
            bucketed: BTreeMap::new(),
            bucket_writers: 0,
            finished_bucketed,
            carried: Vec::new(),
            unchecked: Vec::new(),
            changelog: None,
            retain_versions: false,
            split_tables,
            rejected: Vec::new(),
            stages: Vec::new(),
            dropped: BTreeMap::new(),
            models: None,
            description: None,
            card_metadata: CardMetadata::default(),
            previous,
            compacted_from: None,
            compaction_target: None,
            lock,
        }
    }

    /// A writer for one process of a cluster run other than the first (`--process` > 0): it
    /// writes the shards of the buckets its process owns into `DIR/data/` under their content
    /// names and hands their entries to the first process ([`finish_part`]), which commits the
    /// one manifest ([`adopt`]). It takes no lock (the first process holds it) and removes
    /// nothing but its own staging directory.
    ///
    /// [`finish_part`]: DatasetWriter::finish_part
    /// [`adopt`]: DatasetWriter::adopt
    pub fn part(dir: &Path, config_hash: &str, process: usize) -> Result<DatasetWriter> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let previous = read_previous(dir)?;
        super::abort::watch_dataset(dir, previous.as_ref().map_or(0, |(m, _)| m.version));
        let staging = create_staging(dir, &format!("{}p{process}-", fsutil::PART_PREFIX))?;
        Ok(DatasetWriter::assemble(
            dir,
            staging,
            config_hash,
            &WriterOptions::default(),
            previous,
            None,
        ))
    }

    /// Moves a part's shards into `DIR/data/` and returns the entries of every file of the part,
    /// written and carried, for the first process to [`adopt`](DatasetWriter::adopt).
    pub fn finish_part(mut self) -> Result<Vec<FileEntry>> {
        self.check_carried()?;
        if !self.rejected.is_empty() || !self.splits.is_empty() || self.changelog.is_some() {
            return Err(Error::Usage(
                "a cluster part holds bucketed shards only; the first process writes the ledger \
                 and the changelog"
                    .into(),
            ));
        }
        // Bucketed shards are named by their bucket, so how they are grouped does not matter.
        let mut shards: Vec<Vec<FinishedShard>> = vec![self.finished_bucketed.take()?];
        for (_, writer) in std::mem::take(&mut self.bucketed) {
            shards.push(writer.finish(false)?);
        }
        let mut files = self.publish_shards(&shards)?;
        files.append(&mut self.carried);
        fs::remove_dir_all(&self.staging).map_err(|e| Error::io(&self.staging, e))?;
        super::abort::release_staging(&self.staging);
        Ok(files)
    }

    /// Takes files another process of the run wrote (or carried) into this version.
    pub fn adopt(&mut self, files: Vec<FileEntry>) -> Result<()> {
        for file in &files {
            if !file.path.starts_with(&format!("{DATA_DIR}/")) || file.table == TableKind::Rejected
            {
                return Err(Error::invalid(
                    format!("cluster part file {}", file.path),
                    "not a bucket shard of data/",
                ));
            }
            self.register_split(file.table, &file.split)?;
        }
        self.carried.extend(files);
        Ok(())
    }

    /// The dataset directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Text for the dataset card's description section.
    pub fn describe(&mut self, description: impl Into<String>) {
        self.description = Some(description.into());
    }

    /// The dataset card's metadata (licence, language, tasks, sources); without it the card
    /// has [`CardMetadata::default`]'s.
    pub fn card_metadata(&mut self, metadata: CardMetadata) {
        self.card_metadata = metadata;
    }

    /// Appends typed rows of `R`'s table to `split`.
    pub fn write_rows<R: TableRow>(&mut self, split: &str, rows: &[R]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        if R::KIND == TableKind::Rejected {
            return Err(Error::Usage(
                "rejected records go through DatasetWriter::reject".into(),
            ));
        }
        let batch = rows_to_batch(rows)?;
        self.write_batch(R::KIND, split, &batch)
    }

    /// Appends a RecordBatch of `table`'s schema to `split`.
    ///
    /// A split name belongs to one table (shards are named by split only); the names follow
    /// the Hugging Face split rule (see [`is_valid_split_name`](super::is_valid_split_name)).
    pub fn write_batch(
        &mut self,
        table: TableKind,
        split: &str,
        batch: &RecordBatch,
    ) -> Result<()> {
        if table == TableKind::Rejected {
            return Err(Error::Usage(
                "rejected records go through DatasetWriter::reject".into(),
            ));
        }
        check_batch_schema(table, batch)?;
        let key = (table, split.to_string());
        if !self.splits.contains_key(&key) {
            self.register_split(table, split)?;
            let writer = SplitWriter::new(table, split, &self.staging, self.settings.clone(), true);
            self.splits.insert(key.clone(), writer);
        }
        match self.splits.get_mut(&key) {
            Some(writer) => writer.write(batch),
            None => Ok(()), // unreachable: inserted above
        }
    }

    fn register_split(&mut self, table: TableKind, split: &str) -> Result<()> {
        if !is_valid_split_name(split) {
            return Err(Error::invalid(
                format!("split name {split:?} of table {}", table.name()),
                "use ASCII letters, digits and `_`, in `.`-separated parts",
            ));
        }
        match self.split_tables.get(split) {
            Some(owner) if *owner != table => Err(Error::invalid(
                format!("split name {split:?} of table {}", table.name()),
                format!(
                    "already used by table {}; shard file names must tell tables apart",
                    owner.name()
                ),
            )),
            _ => {
                self.split_tables.insert(split.to_string(), table);
                Ok(())
            }
        }
    }

    /// The manifest of the version this writer replaces, if the directory holds one.
    /// With the SHA-256 of its `manifest.json`.
    pub fn previous(&self) -> Option<(&Manifest, &str)> {
        self.previous.as_ref().map(|(m, sha)| (m, sha.as_str()))
    }

    /// Keeps every committed version readable: each manifest is also written to
    /// `versions/v<N>.json`, and shards stay while any kept manifest names them.
    pub fn retain_versions(&mut self, retain: bool) {
        self.retain_versions = retain;
    }

    /// Appends typed rows of `R`'s table to chunk `chunk` of bucket `bucket` of `buckets` of
    /// `split`. Every chunk of a bucket of a split is one shard named
    /// `<split>-<bucket>-of-<buckets>-<content>.parquet`, its chunk recorded in the manifest.
    pub fn write_bucket<R: TableRow>(
        &mut self,
        split: &str,
        bucket: (usize, usize),
        chunk: &str,
        rows: &[R],
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let batch = rows_to_batch(rows)?;
        self.write_bucket_batch(R::KIND, split, bucket, chunk, &batch)
    }

    /// [`DatasetWriter::write_bucket`] for a RecordBatch of `table`'s schema.
    pub fn write_bucket_batch(
        &mut self,
        table: TableKind,
        split: &str,
        (bucket, buckets): (usize, usize),
        chunk: &str,
        batch: &RecordBatch,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if table == TableKind::Rejected || bucket >= buckets {
            return Err(Error::Usage(format!(
                "bucket {bucket} of {buckets} of table {} cannot be written",
                table.name()
            )));
        }
        check_batch_schema(table, batch)?;
        let key = (table, split.to_string(), bucket, chunk.to_string());
        if !self.bucketed.contains_key(&key) {
            self.register_split(table, split)?;
            self.bucket_writers += 1;
            let writer = SplitWriter::bucket(
                table,
                split,
                &self.staging,
                self.settings.clone(),
                (bucket, buckets),
                chunk,
                self.bucket_writers,
            );
            self.bucketed.insert(key.clone(), writer);
        }
        match self.bucketed.get_mut(&key) {
            Some(writer) => writer.write(batch),
            None => Ok(()), // unreachable: inserted above
        }
    }

    /// Gives the open shards of chunk `from` of bucket `bucket` (all tables and splits) the
    /// chunk key `to`: a chunk can be written before its key, its last image id, is known.
    pub fn rekey_chunk(&mut self, bucket: usize, from: &str, to: &str) {
        for ((table, split), mut writer) in self.take_chunk(bucket, from) {
            writer.set_chunk(to);
            self.bucketed
                .insert((table, split, bucket, to.to_string()), writer);
        }
    }

    /// Closes every shard of chunk `chunk` of bucket `bucket` (all tables and splits): its rows
    /// are written out now instead of at the commit, so a run that writes its chunks one after
    /// another holds only the open ones. Nothing more may be written to that chunk.
    pub fn finish_chunk(&mut self, bucket: usize, chunk: &str) -> Result<()> {
        for (_, writer) in self.take_chunk(bucket, chunk) {
            self.finished_bucketed.extend(writer.finish(false)?)?;
        }
        Ok(())
    }

    /// Takes the open writers of chunk `chunk` of bucket `bucket`, by table and split.
    fn take_chunk(
        &mut self,
        bucket: usize,
        chunk: &str,
    ) -> Vec<((TableKind, String), SplitWriter)> {
        let keys: Vec<(TableKind, String, usize, String)> = self
            .bucketed
            .keys()
            .filter(|(_, _, b, c)| *b == bucket && c == chunk)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|key| {
                let writer = self.bucketed.remove(&key)?;
                let (table, split, _, _) = key;
                Some(((table, split), writer))
            })
            .collect()
    }

    /// A new directory for a run's temporary files inside this version's staging directory: it
    /// goes with the staging directory, at the commit or when the run is abandoned.
    pub fn scratch_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.staging.join(name);
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(dir)
    }

    /// A changelog writer for this version, for changes that arrive in order; hand it back with
    /// [`DatasetWriter::stage_changelog`].
    pub fn changelog_writer(&self) -> Result<ChangelogWriter> {
        ChangelogWriter::create(&self.staging, &self.settings)
    }

    /// Whether this version's changelog is staged.
    pub fn has_changelog(&self) -> bool {
        self.changelog.is_some()
    }

    /// Stages the changelog a [`ChangelogWriter`] wrote.
    pub fn stage_changelog(&mut self, changes: ChangelogWriter) -> Result<()> {
        self.changelog = Some(changes.finish()?);
        Ok(())
    }

    /// Keeps a file of the previous version, unchanged, in this version. Its bytes are checked
    /// against the previous manifest's SHA-256 before the version is published (all carried
    /// files at once, on every core): a damaged shard is never carried into a new version.
    pub fn carry(&mut self, file: &FileEntry) -> Result<()> {
        let path = self.dir.join(&file.path);
        let inside = super::validate::safe_relative_path(&file.path).is_some();
        if !inside || !file.path.starts_with(&format!("{DATA_DIR}/")) || !path.is_file() {
            return Err(Error::invalid(
                format!("{}", path.display()),
                "a carried-forward shard is missing from the dataset",
            ));
        }
        if !in_table_dir(&file.path, file.table) {
            // A shard of a dataset written before tables had directories of their own
            // (`data/<name>`) joins its table's directory under the same name.
            check_committed(&path, file, CARRY_REMEDY)?;
            return self.carry_into_table_dir(file, &path);
        }
        self.register_split(file.table, &file.split)?;
        self.unchecked.push(self.carried.len());
        self.carried.push(file.clone());
        Ok(())
    }

    /// Checks the bytes of every carried file not checked yet, on every core; the first
    /// damaged one (in the order they were carried) is the error.
    fn check_carried(&mut self) -> Result<()> {
        let unchecked: Vec<&FileEntry> = (std::mem::take(&mut self.unchecked).into_iter())
            .map(|i| &self.carried[i])
            .collect();
        let checked = crate::parallel::parallel_map(&unchecked, |file| {
            check_committed(&self.dir.join(&file.path), file, CARRY_REMEDY)
        });
        checked.into_iter().collect()
    }

    /// [`carry`](DatasetWriter::carry) for a checked shard outside its table's directory: it
    /// is linked (copied where links are not supported) into the directory under its name.
    fn carry_into_table_dir(&mut self, file: &FileEntry, path: &Path) -> Result<()> {
        let name = file.path.rsplit('/').next().unwrap_or(&file.path);
        let table_dir = table_dir(file.table);
        let target_dir = self.dir.join(&table_dir);
        fs::create_dir_all(&target_dir).map_err(|e| Error::io(&target_dir, e))?;
        let target = target_dir.join(name);
        if !target.is_file() {
            let staged = self.staging.join(name);
            if fs::hard_link(path, &staged).is_err() {
                fs::copy(path, &staged).map_err(|e| Error::io(&staged, e))?;
            }
            fsutil::rename(&staged, &target)?;
            fsutil::sync_dir(&target_dir)?;
        }
        self.register_split(file.table, &file.split)?;
        self.carried.push(FileEntry {
            path: format!("{table_dir}/{name}"),
            ..file.clone()
        });
        Ok(())
    }

    /// Stages this version's changelog: sample rows with `diff` +1 (added) or −1 (retracted).
    pub fn changelog(&mut self, changes: &[(SampleRow, i8)]) -> Result<()> {
        self.changelog = Some(stage_changelog(&self.staging, &self.settings, changes)?);
        Ok(())
    }

    /// Records a rejected input record in the ledger.
    pub fn reject(&mut self, row: RejectedRow) -> Result<()> {
        self.rejected.push(row);
        if self.rejected.len() >= REJECT_FLUSH_ROWS {
            self.flush_rejected()?;
        }
        Ok(())
    }

    fn flush_rejected(&mut self) -> Result<()> {
        if self.rejected.is_empty() {
            return Ok(());
        }
        let batch = rows_to_batch(&self.rejected)?;
        self.rejected.clear();
        let key = (TableKind::Rejected, TableKind::Rejected.name().to_string());
        let writer = self.splits.entry(key).or_insert_with(|| {
            SplitWriter::new(
                TableKind::Rejected,
                TableKind::Rejected.name(),
                &self.staging,
                self.settings.clone(),
                false,
            )
        });
        writer.write(&batch)
    }

    /// Records the metrics of one stage of the run.
    pub fn stage(&mut self, metrics: StageMetrics) {
        self.stages.push(metrics);
    }

    /// Records what method `method`'s stages dropped, by reason, for the manifest.
    pub fn dropped(&mut self, method: &str, reasons: BTreeMap<String, u64>) {
        if !reasons.is_empty() {
            self.dropped.insert(method.to_string(), reasons);
        }
    }

    /// Makes this version a rearrangement of the previous one's rows (`capflow optimize`): its
    /// Delta commits change no data, and a state compares it as the version it compacted. The
    /// manifest keeps the previous version's counts, stages, drops, models and card.
    pub(crate) fn rearrange_previous(&mut self, target_bytes: u64) -> Result<()> {
        let Some((previous, sha)) = &self.previous else {
            return Err(Error::Usage(format!(
                "{} holds no committed dataset to rearrange",
                self.dir.display()
            )));
        };
        self.compacted_from = Some(previous.data_version(sha));
        self.compaction_target = Some(target_bytes);
        self.stages = previous.stages.clone();
        self.dropped = previous.dropped.clone();
        self.models = previous.models.clone();
        match &previous.card {
            Some(card) => {
                self.description = card.description.clone();
                self.card_metadata = CardMetadata::from(card);
            }
            None => tracing::warn!(
                "{}: version {} was written before manifests kept the dataset card's \
                 description and metadata; the card gets the defaults until the next run",
                self.dir.display(),
                previous.version
            ),
        }
        Ok(())
    }

    /// Adds a file written into its table's directory under its final name (a compacted file of
    /// `capflow optimize`) to this version.
    pub(crate) fn add_written(&mut self, file: FileEntry) -> Result<()> {
        self.register_split(file.table, &file.split)?;
        self.carried.push(file);
        Ok(())
    }

    /// The settings shards are written with (row groups, compression, metadata).
    pub(crate) fn shard_settings(&self) -> &ShardSettings {
        &self.settings
    }

    /// Where this version's files are staged before they take their names.
    pub(crate) fn staging_dir(&self) -> &Path {
        &self.staging
    }

    /// Names the corpus-level models this version's samples are computed with.
    pub fn models(&mut self, models: ModelsUsed) {
        self.models = Some(models);
    }

    /// Publishes everything written as the dataset's next version and returns its manifest.
    ///
    /// `counts` are the run's input records; `read == accepted + rejected` must hold and
    /// `rejected` must equal the rows given to [`reject`](DatasetWriter::reject).
    pub fn commit(self, counts: IngestCounts) -> Result<Manifest> {
        Ok(self.publish(counts, false)?.into_manifest())
    }

    /// [`commit`](DatasetWriter::commit), unless nothing changed: when every file written or
    /// carried is one of the previous version's (same path, so the same bytes) and the
    /// changelog is empty, no version is committed and the previous version stays.
    pub fn commit_changes(self, counts: IngestCounts) -> Result<Committed> {
        self.publish(counts, true)
    }

    fn publish(mut self, counts: IngestCounts, skip_unchanged: bool) -> Result<Committed> {
        let started = Instant::now();
        self.check_carried()?;
        self.flush_rejected()?;
        let ledger_carried = self.carried.iter().any(|f| f.table == TableKind::Rejected);
        if !ledger_carried
            && !self
                .splits
                .contains_key(&(TableKind::Rejected, TableKind::Rejected.name().to_string()))
        {
            let writer = SplitWriter::new(
                TableKind::Rejected,
                TableKind::Rejected.name(),
                &self.staging,
                self.settings.clone(),
                false,
            );
            self.splits.insert(
                (TableKind::Rejected, TableKind::Rejected.name().to_string()),
                writer,
            );
        }
        let mut shards: Vec<Vec<FinishedShard>> = Vec::new();
        for (_, writer) in std::mem::take(&mut self.splits) {
            shards.push(writer.finish(true)?);
        }
        shards.push(self.finished_bucketed.take()?);
        for (_, writer) in std::mem::take(&mut self.bucketed) {
            shards.push(writer.finish(false)?);
        }
        let rejected_rows: u64 = shards
            .iter()
            .flatten()
            .filter(|s| s.table == TableKind::Rejected)
            .map(|s| s.rows)
            .chain(
                self.carried
                    .iter()
                    .filter(|f| f.table == TableKind::Rejected)
                    .map(|f| f.rows),
            )
            .sum();
        check_counts(counts, rejected_rows)?;

        let mut files = self.publish_shards(&shards)?;
        files.extend(self.carried.iter().cloned());
        files.sort_by(|a, b| {
            (table_rank(a.table), &a.split, &a.path).cmp(&(table_rank(b.table), &b.split, &b.path))
        });
        if skip_unchanged {
            if let Some(previous) = self.unchanged(&files) {
                // The shards just published have the names, so the bytes, of files the previous
                // version already holds: nothing is left to clean up but the staging directory.
                fs::remove_dir_all(&self.staging).map_err(|e| Error::io(&self.staging, e))?;
                super::abort::release_staging(&self.staging);
                return Ok(Committed::Unchanged(previous));
            }
        }
        let mut manifest = self.build_manifest(counts, files);
        if let Some(staged) = self.changelog.take() {
            manifest.changelog = Some(publish_changelog(&self.dir, manifest.version, staged)?);
        }
        manifest.delta_versions = super::delta::commit_tables(&super::delta::DeltaVersion {
            dir: &self.dir,
            staging: &self.staging,
            version: manifest.version,
            previous: self.previous.as_ref().map(|(m, _)| m),
            files: &manifest.files,
            changelog: manifest.changelog.as_ref().map(|c| self.dir.join(&c.path)),
            rearranged: self.compaction_target,
        })?;
        let manifest_text = manifest.to_json()?;
        link_ledger_alias(&self.dir, &self.staging, &manifest)?;
        if self.retain_versions {
            let versions = self.dir.join(VERSIONS_DIR);
            fs::create_dir_all(&versions).map_err(|e| Error::io(&versions, e))?;
            let staged = self.staging.join("version.json");
            fsutil::write_synced(&staged, manifest_text.as_bytes())?;
            fsutil::rename(&staged, &version_manifest_path(&self.dir, manifest.version))?;
            fsutil::sync_dir(&versions)?;
        }
        let staged_manifest = self.staging.join(MANIFEST_FILE);
        fsutil::write_synced(&staged_manifest, manifest_text.as_bytes())?;
        fsutil::rename(&staged_manifest, &self.dir.join(MANIFEST_FILE))?;
        fsutil::sync_dir(&self.dir)?;
        tracing::info!(
            "committed {} version {} ({} files) in {} ms",
            self.dir.display(),
            manifest.version,
            manifest.files.len(),
            started.elapsed().as_millis()
        );

        self.refresh_card(&manifest)?;
        remove_unreferenced_shards(&self.dir, Some(&manifest), self.retain_versions)?;
        fs::remove_dir_all(&self.staging).map_err(|e| Error::io(&self.staging, e))?;
        super::abort::release_staging(&self.staging);
        Ok(Committed::Version(manifest))
    }

    /// The previous version's manifest when `files` are exactly its files and the staged
    /// changelog (if any) holds no change.
    fn unchanged(&self, files: &[FileEntry]) -> Option<Manifest> {
        let (previous, _) = self.previous.as_ref()?;
        let no_changes = self
            .changelog
            .as_ref()
            .is_none_or(StagedChangelog::is_empty);
        let same = |a: &[FileEntry], b: &[FileEntry]| {
            let key = |f: &FileEntry| (f.path.clone(), f.sha256.clone(), f.rows, f.chunk.clone());
            let mut a: Vec<_> = a.iter().map(key).collect();
            let mut b: Vec<_> = b.iter().map(key).collect();
            a.sort();
            b.sort();
            a == b
        };
        (no_changes && same(files, &previous.files)).then(|| previous.clone())
    }

    /// Moves staged shards to their final names in `DIR/data/<table>/` and describes them.
    fn publish_shards(&self, splits: &[Vec<FinishedShard>]) -> Result<Vec<FileEntry>> {
        let mut table_dirs = BTreeSet::new();
        let mut files = Vec::new();
        for shards in splits {
            let count = shards.len();
            for (index, shard) in shards.iter().enumerate() {
                let (index, count) = shard.bucket.unwrap_or((index, count));
                let name = shard_file_name(&shard.split, index, count, &shard.sha256);
                let table_dir = table_dir(shard.table);
                let target = self.dir.join(&table_dir);
                if table_dirs.insert(shard.table) {
                    fs::create_dir_all(&target).map_err(|e| Error::io(&target, e))?;
                }
                fsutil::rename(&shard.staged_path, &target.join(&name))?;
                files.push(FileEntry {
                    path: format!("{table_dir}/{name}"),
                    table: shard.table,
                    split: shard.split.clone(),
                    rows: shard.rows,
                    bytes: shard.bytes,
                    sha256: shard.sha256.clone(),
                    chunk: shard.chunk.clone(),
                    spans: Vec::new(),
                });
            }
        }
        for table in table_dirs {
            fsutil::sync_dir(&self.dir.join(table_dir(table)))?;
        }
        // Tables in their documented order, then split name, then shard index.
        files.sort_by(|a, b| {
            (table_rank(a.table), &a.split, &a.path).cmp(&(table_rank(b.table), &b.split, &b.path))
        });
        Ok(files)
    }

    fn build_manifest(&self, counts: IngestCounts, files: Vec<FileEntry>) -> Manifest {
        let mut tables: BTreeMap<String, TableSummary> = BTreeMap::new();
        for file in &files {
            let summary = tables
                .entry(file.table.name().to_string())
                .or_insert_with(|| TableSummary {
                    schema_fingerprint: schema_fingerprint(&file.table.schema()),
                    rows: 0,
                    files: 0,
                    splits: BTreeMap::new(),
                });
            summary.rows += file.rows;
            summary.files += 1;
            *summary.splits.entry(file.split.clone()).or_insert(0) += file.rows;
        }
        let (version, history) = match &self.previous {
            Some((previous, sha)) => {
                let mut history = previous.history.clone();
                history.push(previous.summary(sha.clone()));
                (previous.version + 1, history)
            }
            None => (1, Vec::new()),
        };
        Manifest {
            format: MANIFEST_FORMAT.to_string(),
            format_version: MANIFEST_FORMAT_VERSION,
            version,
            engine_version: crate::ENGINE_VERSION.to_string(),
            config_hash: self.settings.config_hash.clone(),
            created_at: fsutil::utc_now_rfc3339(),
            counts,
            dropped: self.dropped.clone(),
            stages: self.stages.clone(),
            tables,
            files,
            history,
            changelog: None,
            models: self.models.clone(),
            delta_versions: BTreeMap::new(),
            compacted_from: self.compacted_from.clone(),
            card: Some(CardRecord::new(
                self.description.clone(),
                &self.card_metadata,
            )),
        }
    }

    /// Replaces `README.md`, which is derived from the manifest.
    fn refresh_card(&self, manifest: &Manifest) -> Result<()> {
        let staged_card = self.staging.join(CARD_FILE);
        fsutil::write_synced(
            &staged_card,
            render_card(manifest, self.description.as_deref(), &self.card_metadata).as_bytes(),
        )?;
        fsutil::rename(&staged_card, &self.dir.join(CARD_FILE))?;
        fsutil::sync_dir(&self.dir)
    }
}

/// What to do about a carried shard whose bytes changed.
const CARRY_REMEDY: &str = "restore it, or rerun without --state into a new directory";

/// Checks that the file at `path` still has the bytes `file`'s manifest entry says it was
/// committed with: a damaged shard is never carried or compacted into a new version. `remedy`
/// says what to do otherwise.
pub(crate) fn check_committed(path: &Path, file: &FileEntry, remedy: &str) -> Result<()> {
    let (sha, len) = fsutil::sha256_file(path)?;
    if sha == file.sha256 && len == file.bytes {
        return Ok(());
    }
    Err(Error::invalid(
        format!("{}", path.display()),
        format!(
            "the shard changed after it was committed (SHA-256 {sha}, {len} bytes; the \
             manifest says {}, {} bytes); {remedy}",
            file.sha256, file.bytes
        ),
    ))
}

/// What [`DatasetWriter::commit_changes`] did.
#[derive(Debug)]
pub enum Committed {
    /// A new version, with its manifest.
    Version(Manifest),
    /// Nothing changed: no version was committed; the manifest is the previous version's.
    Unchanged(Manifest),
}

impl Committed {
    pub fn manifest(&self) -> &Manifest {
        match self {
            Committed::Version(m) | Committed::Unchanged(m) => m,
        }
    }

    pub fn into_manifest(self) -> Manifest {
        match self {
            Committed::Version(m) | Committed::Unchanged(m) => m,
        }
    }
}

/// Puts the ledger shard of `manifest` under `DIR/rejected.parquet`, through `staging`.
fn link_ledger_alias(dir: &Path, staging: &Path, manifest: &Manifest) -> Result<()> {
    let Some(ledger) = manifest.table_files(TableKind::Rejected).next() else {
        return Ok(());
    };
    let source = dir.join(&ledger.path);
    let staged = staging.join(REJECTED_FILE);
    // A hard link costs no space and shares the ledger's bytes; file systems without hard
    // links get a copy.
    if fs::hard_link(&source, &staged).is_err() {
        fs::copy(&source, &staged).map_err(|e| Error::io(&staged, e))?;
        fs::File::open(&staged)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(&staged, e))?;
    }
    fsutil::rename(&staged, &dir.join(REJECTED_FILE))?;
    fsutil::sync_dir(dir)
}

/// Completes a commit interrupted after its manifest's rename, or repairs a damaged alias:
/// when `DIR/rejected.parquet` is not the committed ledger (stale, missing), the ledger shard,
/// once its bytes are checked against the manifest, is put back under that name.
fn repair_ledger_alias(dir: &Path, staging: &Path, manifest: &Manifest) -> Result<()> {
    let Some(ledger) = manifest.table_files(TableKind::Rejected).next() else {
        return Ok(());
    };
    let current = |path: &Path| {
        fsutil::sha256_file(path)
            .is_ok_and(|(sha, len)| sha == ledger.sha256 && len == ledger.bytes)
    };
    let alias = dir.join(REJECTED_FILE);
    if current(&alias) {
        return Ok(());
    }
    // A damaged ledger shard is left for `validate` to report; it is never linked.
    let source = super::validate::safe_relative_path(&ledger.path).map(|p| dir.join(p));
    if !source.as_deref().is_some_and(current) {
        return Ok(());
    }
    tracing::info!(
        "{}: repairing {REJECTED_FILE}, left stale by an interrupted commit",
        dir.display()
    );
    link_ledger_alias(dir, staging, manifest)
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        // After a commit the staging directory is already gone; otherwise this run is
        // abandoned and its staged files must not outlive it.
        if self.staging.exists() {
            let _ = fs::remove_dir_all(&self.staging);
        }
        super::abort::release_staging(&self.staging);
        self.lock.take();
    }
}

pub(crate) fn table_rank(table: TableKind) -> usize {
    TableKind::ALL
        .iter()
        .position(|t| *t == table)
        .unwrap_or(usize::MAX)
}

/// The `(index, count)` of a shard path named by [`shard_file_name`]: for a bucketed split,
/// its bucket and the bucket count.
pub fn shard_index(path: &str) -> Option<(usize, usize)> {
    let name = path.rsplit('/').next()?;
    if !is_shard_file_name(name) {
        return None;
    }
    let stem = name.strip_suffix(".parquet")?;
    let (rest, _content) = stem.rsplit_once('-')?;
    let (rest, count) = rest.rsplit_once("-of-")?;
    let (_split, index) = rest.rsplit_once('-')?;
    Some((index.parse().ok()?, count.parse().ok()?))
}

/// The directory of `table`'s files inside a dataset, relative to it: `data/<table>`.
pub fn table_dir(table: TableKind) -> String {
    format!("{DATA_DIR}/{}", table.name())
}

/// Whether the dataset-relative `path` is a file directly inside `table`'s directory.
pub(crate) fn in_table_dir(path: &str, table: TableKind) -> bool {
    path.strip_prefix(&table_dir(table))
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// `<split>-NNNNN-of-NNNNN-<first 16 hex digits of sha256>.parquet`.
pub(crate) fn shard_file_name(split: &str, index: usize, count: usize, sha256: &str) -> String {
    let content = sha256.get(..16).unwrap_or(sha256);
    format!("{split}-{index:05}-of-{count:05}-{content}.parquet")
}

/// Whether a file name in `data/` has the shape of [`shard_file_name`]: only such files are
/// ever removed from a dataset.
pub(crate) fn is_shard_file_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".parquet") else {
        return false;
    };
    let Some((rest, content)) = stem.rsplit_once('-') else {
        return false;
    };
    let Some((rest, count)) = rest.rsplit_once("-of-") else {
        return false;
    };
    let Some((split, index)) = rest.rsplit_once('-') else {
        return false;
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    is_valid_split_name(split)
        && digits(index, 5)
        && digits(count, 5)
        && content.len() == 16
        && content
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn check_batch_schema(table: TableKind, batch: &RecordBatch) -> Result<()> {
    let expected = table.schema();
    if batch.schema().fields() != expected.fields() {
        return Err(Error::invalid(
            format!("batch for table {}", table.name()),
            format!(
                "schema differs from the table's (fingerprint {} instead of {})",
                schema_fingerprint(&batch.schema()),
                schema_fingerprint(&expected)
            ),
        ));
    }
    Ok(())
}

fn check_counts(counts: IngestCounts, rejected_rows: u64) -> Result<()> {
    if counts.read != counts.accepted + counts.rejected {
        return Err(Error::invalid(
            "run counts",
            format!(
                "read {} != accepted {} + rejected {}",
                counts.read, counts.accepted, counts.rejected
            ),
        ));
    }
    if counts.rejected != rejected_rows {
        return Err(Error::invalid(
            "run counts",
            format!(
                "{} records counted as rejected but the ledger holds {rejected_rows}",
                counts.rejected
            ),
        ));
    }
    Ok(())
}

/// Refuses to write into a non-empty directory that is not a capflow dataset, so that the
/// clean-up of unreferenced files can never touch someone else's data.
fn check_is_dataset_dir(dir: &Path) -> Result<()> {
    if dir.join(MANIFEST_FILE).exists() {
        return Ok(());
    }
    let entries = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // `changes/` and `versions/` are what a first commit killed before its manifest's
        // rename leaves; they are ours only when they hold nothing but version files.
        let ours = name.starts_with(".capflow-")
            || name == DATA_DIR
            || name == REJECTED_FILE
            || name == CARD_FILE
            || (name == CHANGES_DIR && holds_only_versions(&entry.path(), "parquet")?)
            || (name == VERSIONS_DIR && holds_only_versions(&entry.path(), "json")?);
        if !ours {
            return Err(Error::Usage(format!(
                "{}: directory is not empty and holds no capflow dataset (found {name:?}); \
                 choose an empty or new output directory",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Whether `dir` is a directory holding only `v<N>.<extension>` files (and capflow's own
/// temporary files, whose names start with `.`).
fn holds_only_versions(dir: &Path, extension: &str) -> Result<bool> {
    if !dir.is_dir() {
        return Ok(false);
    }
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let version = name
            .strip_prefix('v')
            .and_then(|rest| rest.strip_suffix(extension))
            .and_then(|rest| rest.strip_suffix('.'));
        let is_version =
            version.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !(is_version || name.starts_with('.')) || !entry.path().is_file() {
            return Ok(false);
        }
    }
    Ok(true)
}

fn read_previous(dir: &Path) -> Result<Option<(Manifest, String)>> {
    let path = dir.join(MANIFEST_FILE);
    let text = match fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let manifest = parse_manifest(&path, &text)?;
    let sha = {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(&text))
    };
    Ok(Some((manifest, sha)))
}

/// Removes shards in `data/` that the committed manifest (`None`: there is none yet) does not
/// name: the previous version's and those of runs that crashed or failed (a full disk) between
/// moving shards and committing.
///
/// With `retain_versions`, shards named by any earlier version's manifest under `versions/`
/// stay too.
fn remove_unreferenced_shards(
    dir: &Path,
    manifest: Option<&Manifest>,
    retain_versions: bool,
) -> Result<()> {
    let referenced = match manifest {
        Some(m) if retain_versions => files_of_versions(dir, m, 1)?,
        Some(m) => m.files.iter().map(|f| f.path.clone()).collect(),
        None => HashSet::new(),
    };
    let unreferenced = unreferenced_shards(dir, &referenced)?;
    let mut touched = BTreeSet::new();
    for relative in &unreferenced {
        let path = dir.join(relative);
        fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        if let Some(parent) = path.parent() {
            touched.insert(parent.to_path_buf());
        }
    }
    for parent in touched {
        fsutil::sync_dir(&parent)?;
    }
    Ok(())
}

/// The files `manifest` names and those named by the earlier versions from `oldest` on that
/// `versions/` still holds (versions committed before retention was asked for, or vacuumed,
/// are gone), by dataset-relative path.
pub(crate) fn files_of_versions(
    dir: &Path,
    manifest: &Manifest,
    oldest: u64,
) -> Result<HashSet<String>> {
    let mut files: HashSet<String> = manifest.files.iter().map(|f| f.path.clone()).collect();
    for version in oldest..manifest.version {
        let path = version_manifest_path(dir, version);
        match fs::read(&path) {
            Ok(text) => {
                let old = parse_manifest(&path, &text)?;
                files.extend(old.files.into_iter().map(|f| f.path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, e)),
        }
    }
    Ok(files)
}

/// The shard-named files of the dataset at `dir` that `referenced` does not name, by
/// dataset-relative path, sorted: in the tables' directories and, for a dataset written before
/// tables had directories of their own, in `data/` itself.
pub(crate) fn unreferenced_shards(dir: &Path, referenced: &HashSet<String>) -> Result<Vec<String>> {
    let mut relatives = vec![DATA_DIR.to_string()];
    relatives.extend(TableKind::ALL.into_iter().map(table_dir));
    let mut found = Vec::new();
    for relative in relatives {
        let path = dir.join(&relative);
        let entries = match fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&path, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&path, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let file = format!("{relative}/{name}");
            if is_shard_file_name(&name) && !referenced.contains(&file) {
                found.push(file);
            }
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_round_trip_through_the_pattern() {
        let sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let name = shard_file_name("captions", 3, 12, sha);
        assert_eq!(name, "captions-00003-of-00012-0123456789abcdef.parquet");
        assert!(is_shard_file_name(&name));
        assert!(is_shard_file_name(
            "train.en-00000-of-00001-ffffffffffffffff.parquet"
        ));
        for other in [
            "captions-00000-of-00001.parquet",
            "captions-0000-of-00001-0123456789abcdef.parquet",
            "captions-00000-of-00001-0123456789ABCDEF.parquet",
            "notes.txt",
            "my-data-00000-of-00001-0123456789abcdef.parquet",
        ] {
            assert!(!is_shard_file_name(other), "{other}");
        }
    }
}
