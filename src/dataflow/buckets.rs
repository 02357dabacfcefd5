//! A run's dataset in buckets and bucket chunks: every table split by a hash of the image key
//! into buckets, each bucket cut into chunks of consecutive image ids, one shard per chunk, rows
//! ordered by image id.
//!
//! A chunk ends after an image whose chunk hash is 0 modulo `output.chunk_images`: a property of
//! the image id alone, so adding or removing an image changes only the chunk it falls in, and
//! images with new, higher ids land in each bucket's open last chunk. A chunk's bytes depend only
//! on the rows of its images, so a chunk none of whose images changed is carried forward as the
//! same files (copy-on-write), and any number of workers or processes produce the same files.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use super::exchange::image_ids;
use super::resampled::ChunkSamples;
use super::runtime::{CollectedRun, KeyedRow};
use super::state::{bucket_of, Plan};
use crate::error::{Error, Result};
use crate::export::{
    dataset_file_path, piece_batches, read_file_rows, ChunkPiece, DatasetSink, DatasetWriter,
    Manifest,
};
use crate::ingest::{capflow_parquet, RecordSink, Row, VecSink};
use crate::schema::{SampleRow, TableKind};
use arrow::array::Array;
use arrow::record_batch::RecordBatch;

/// Seeds the chunk hash apart from the bucket hash.
const CHUNK_SEED: u64 = 0x6361_7066_6c6f_7721;

/// Whether `image_id` is the last image of its chunk.
pub fn ends_chunk(image_id: &str, chunk_images: usize) -> bool {
    let hash = xxhash_rust::xxh3::xxh3_64_with_seed(image_id.as_bytes(), CHUNK_SEED);
    hash.is_multiple_of(chunk_images.max(1) as u64)
}

/// Seeds the piece hash apart from the chunk and bucket hashes.
const PIECE_SEED: u64 = 0x7069_6563_6573_2121;

/// The most images between two piece ends on average ([`ends_piece`]).
const MAX_PIECE_IMAGES: usize = 32;

/// Whether `image_id` is the last image of a piece: a place inside a chunk after which a run
/// may stop holding the chunk's rows and go on with the next images, so that what a run holds
/// at once does not depend on how large the largest chunk is. Chunk sizes are geometric about
/// their mean, and the largest chunk of a bucket grows with the log of the bucket's size;
/// pieces hold about an eighth of a chunk's mean, and at most [`MAX_PIECE_IMAGES`] images on
/// average. Like a chunk end, a property of the image id alone.
pub fn ends_piece(image_id: &str, chunk_images: usize) -> bool {
    let piece_images = (chunk_images / 8).clamp(1, MAX_PIECE_IMAGES) as u64;
    let hash = xxhash_rust::xxh3::xxh3_64_with_seed(image_id.as_bytes(), PIECE_SEED);
    hash.is_multiple_of(piece_images)
}

/// One chunk of a bucket: its key (the last image id, empty for the open last chunk) and its
/// image ids in order.
#[derive(Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub key: &'a str,
    pub ids: &'a [&'a str],
}

/// Cuts a bucket's sorted image ids into chunks.
pub fn chunks<'a>(ids: &'a [&'a str], chunk_images: usize) -> Vec<Chunk<'a>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, id) in ids.iter().enumerate() {
        if ends_chunk(id, chunk_images) {
            out.push(Chunk {
                key: id,
                ids: &ids[start..=i],
            });
            start = i + 1;
        }
    }
    if start < ids.len() {
        out.push(Chunk {
            key: "",
            ids: &ids[start..],
        });
    }
    out
}

/// A bucket's chunks of `ids` by key.
fn chunk_ids<'a>(ids: &'a [&'a str], chunk_images: usize) -> HashMap<&'a str, &'a [&'a str]> {
    chunks(ids, chunk_images)
        .into_iter()
        .map(|c| (c.key, c.ids))
        .collect()
}

/// A bucket's replayed SSA samples, by image ([`BucketExport::replay`]).
pub type ReplayBucket<'a> = dyn Fn(usize) -> Result<BTreeMap<String, Vec<SampleRow>>> + Sync + 'a;

/// How a run's rows are written into buckets.
pub struct BucketExport<'a> {
    pub buckets: usize,
    /// The mean number of images of a bucket chunk (`output.chunk_images`).
    pub chunk_images: usize,
    pub plan: &'a Plan,
    /// The dataset version this run replaces, with its manifest's checksum.
    pub previous: Option<(&'a Manifest, &'a str)>,
    /// The dataset directory.
    pub dir: &'a Path,
    /// A refit that replays SSA ([`super::refit`]): every image the plan carries keeps its
    /// input rows, and its SSA samples are the ones this gives for its bucket, by image.
    pub replay: Option<&'a ReplayBucket<'a>>,
    /// With a replay: the images the plan computes whose input rows did not change (their
    /// merge did, under the new models), whose chunks keep their input tables' files.
    pub recomputed: Option<&'a BTreeSet<String>>,
    /// Where each bucket's changes go as a run sorted by image id once the bucket is written
    /// ([`Exported::runs`]), instead of being held until the end; not for a run that replaces
    /// the whole previous version (its retractions are read up front).
    pub runs: Option<&'a Path>,
}

/// What [`BucketExport::write`] did.
#[derive(Debug, Default)]
pub struct Exported {
    /// Samples added (+1) and retracted (−1) relative to the previous version, by image id
    /// (those not in `runs`).
    pub changes: Vec<(SampleRow, i8)>,
    /// With [`BucketExport::runs`], the buckets' changes: runs sorted by image id, each image's
    /// changes in one run ([`super::spill::merge_changes`]).
    pub runs: Vec<std::path::PathBuf>,
    /// Rows in this version's bucket files (written and carried).
    pub rows_written: u64,
    /// Bucket chunks written anew, and carried forward unchanged.
    pub written: usize,
    pub carried: usize,
}

/// How one bucket is written: its chunks before and after this run, and which are written
/// anew.
struct BucketWrite<'a> {
    bucket: usize,
    new_chunks: Vec<Chunk<'a>>,
    /// The chunks written anew, by index into `new_chunks`, each with whether its input rows
    /// are written too (else only its samples are: a resampled chunk).
    written: Vec<(usize, bool)>,
    /// Whether any of the bucket's previous chunks is read back: a chunk is written anew, or
    /// one is dropped.
    reads_back: bool,
    /// The written chunks in the groups they are read back in, in order.
    groups: Vec<ChunkGroup<'a>>,
}

/// Consecutive written chunks of a bucket that are read back together: with the previous
/// chunks any of them takes images from, so that an image's previous rows and its new chunk
/// meet in one group, and a run holds one group's previous rows at a time, not its bucket's.
struct ChunkGroup<'a> {
    /// Its chunks, as a range of [`BucketWrite::written`].
    written: std::ops::Range<usize>,
    /// The previous chunks read back for them, by key.
    old: HashSet<&'a str>,
}

impl<'a> ChunkGroup<'a> {
    /// Groups the `written` chunks of `new_chunks`: a chunk joins the group before it when they
    /// take images from a previous chunk in common (previous and new chunks are both ranges of
    /// image ids, so the chunks that share one are consecutive). The previous chunks no new
    /// chunk takes images from and that are not `kept` (all their images removed) make a last
    /// group of no chunks, read back for their retractions.
    fn of(
        written: &[(usize, bool)],
        new_chunks: &[Chunk<'a>],
        old_chunks: &HashMap<&'a str, &'a [&'a str]>,
        kept: &HashSet<&'a str>,
    ) -> Vec<ChunkGroup<'a>> {
        let old_of: HashMap<&str, &'a str> = (old_chunks.iter())
            .flat_map(|(key, ids)| ids.iter().map(move |id| (*id, *key)))
            .collect();
        let mut groups: Vec<ChunkGroup<'a>> = Vec::new();
        for (at, &(i, _)) in written.iter().enumerate() {
            let old: HashSet<&'a str> = (new_chunks[i].ids.iter())
                .filter_map(|id| old_of.get(id).copied())
                .collect();
            match groups.last_mut() {
                Some(group) if !group.old.is_disjoint(&old) => {
                    group.written.end = at + 1;
                    group.old.extend(old);
                }
                _ => groups.push(ChunkGroup {
                    written: at..at + 1,
                    old,
                }),
            }
        }
        let dropped: HashSet<&'a str> = (old_chunks.keys().copied())
            .filter(|key| !kept.contains(key) && !groups.iter().any(|g| g.old.contains(key)))
            .collect();
        if !dropped.is_empty() {
            groups.push(ChunkGroup {
                written: written.len()..written.len(),
                old: dropped,
            });
        }
        groups
    }
}

/// What a group of a bucket's rewritten chunks held before this run ([`BucketExport::write`]).
struct BucketBack {
    back: ReadBack,
    /// The samples of its computed and removed images.
    retracted: BTreeMap<String, Vec<SampleRow>>,
    /// With a replay, the changes to its replayed images' samples, by image.
    replayed: BTreeMap<String, Vec<(SampleRow, i8)>>,
}

/// The rows of a previous version's chunks that are rewritten, by image.
#[derive(Default)]
struct ReadBack {
    /// Input rows of the images this run did not read, in the batches they were read back in.
    inputs: ChunkBatches,
    /// The samples of the images the plan does not compute, in the batches they were read back
    /// in; with a replay, as rows in `samples` instead (their SSA samples are replaced).
    sample_batches: ChunkBatches,
    samples: HashMap<String, Vec<SampleRow>>,
    /// With a replay, the samples of the chunks whose images did not change, by chunk key:
    /// written from the batches they were read in.
    resampled: HashMap<String, ChunkSamples>,
}

/// Rows read back from a previous version's chunks, kept in the batches they were read in: an
/// image's rows are slices of them, written to the new chunk as they are, with no typed row in
/// between.
#[derive(Default)]
struct ChunkBatches {
    /// Each batch with its table and split.
    batches: Vec<(TableKind, String, RecordBatch)>,
    /// Each image's rows, as `(batch, offset, rows)` in the order they were read.
    images: HashMap<String, Vec<(usize, usize, usize)>>,
}

impl ChunkBatches {
    /// Reads `piece`, a chunk of a table, keeping the rows of the images `keeps` takes; each
    /// other image's rows go to `other`, as a slice of its batch with the offset of its first
    /// row in the piece.
    fn read(
        &mut self,
        dir: &Path,
        piece: &ChunkPiece,
        keeps: impl Fn(&str) -> bool,
        mut other: impl FnMut(&str, (&RecordBatch, usize)) -> Result<()>,
    ) -> Result<()> {
        let mut first_row = 0;
        for batch in piece_batches(dir, piece)? {
            let ids = image_ids(&batch)?;
            let (at, rows) = (self.batches.len(), ids.len());
            let (mut start, mut kept) = (0, false);
            while start < ids.len() {
                let id = ids.value(start);
                let end = (start + 1..ids.len())
                    .find(|&row| ids.value(row) != id)
                    .unwrap_or(ids.len());
                if keeps(id) {
                    let slices = self.images.entry(id.to_string()).or_default();
                    slices.push((at, start, end - start));
                    kept = true;
                } else {
                    other(id, (&batch.slice(start, end - start), first_row + start))?;
                }
                start = end;
            }
            if kept {
                let (table, split) = (piece.file.table, piece.file.split.clone());
                self.batches.push((table, split, batch));
            }
            first_row += rows;
        }
        Ok(())
    }
}

/// Slices of [`ChunkBatches`] on their way into a chunk: consecutive slices of one batch are
/// joined and written as one, each table and split's in the order they came.
struct SliceRuns<'b> {
    batches: &'b [(TableKind, String, RecordBatch)],
    /// The open run of each table and split: `(batch, offset, rows)`.
    open: Vec<(usize, usize, usize)>,
}

impl<'b> SliceRuns<'b> {
    fn new(batches: &'b [(TableKind, String, RecordBatch)]) -> SliceRuns<'b> {
        SliceRuns {
            batches,
            open: Vec::new(),
        }
    }

    /// Adds a slice, writing the open run of its table and split first unless it continues it.
    fn push(
        &mut self,
        sink: &mut DatasetSink,
        (at, offset, rows): (usize, usize, usize),
    ) -> Result<()> {
        let stream = |b: usize| (self.batches[b].0, self.batches[b].1.as_str());
        let same = self.open.iter().position(|run| stream(run.0) == stream(at));
        match same.map(|i| (i, self.open[i])) {
            Some((i, run)) if run.0 == at && run.1 + run.2 == offset => self.open[i].2 += rows,
            Some((i, run)) => {
                self.write(sink, run)?;
                self.open[i] = (at, offset, rows);
            }
            None => self.open.push((at, offset, rows)),
        }
        Ok(())
    }

    /// Writes `rows`, typed, after the open runs.
    fn rows(
        &mut self,
        sink: &mut DatasetSink,
        rows: impl ExactSizeIterator<Item = Row>,
    ) -> Result<()> {
        if rows.len() > 0 {
            self.flush(sink)?;
        }
        for row in rows {
            sink.row(row)?;
        }
        Ok(())
    }

    /// Writes every open run.
    fn flush(&mut self, sink: &mut DatasetSink) -> Result<()> {
        for run in std::mem::take(&mut self.open) {
            self.write(sink, run)?;
        }
        Ok(())
    }

    fn write(
        &self,
        sink: &mut DatasetSink,
        (at, offset, rows): (usize, usize, usize),
    ) -> Result<()> {
        let (table, split, batch) = &self.batches[at];
        sink.write_batch(*table, split, &batch.slice(offset, rows))
    }
}

impl BucketExport<'_> {
    /// Writes (or carries forward) every bucket in `owned`.
    ///
    /// `collected` holds the input rows of every image the plan computes (and, after a full
    /// read, of every image); the input rows of the other images of a rewritten chunk, and their
    /// samples, are read back from the previous version. The samples of computed images are
    /// taken from `new_samples`.
    pub fn write(
        &self,
        writer: &mut DatasetWriter,
        collected: &CollectedRun,
        owned: &[usize],
        new_samples: &mut BTreeMap<String, Vec<SampleRow>>,
    ) -> Result<Exported> {
        let buckets = self.buckets;
        let plan = self.plan;
        let mut by_bucket: Vec<BTreeMap<&str, Vec<&KeyedRow>>> = vec![BTreeMap::new(); buckets];
        for keyed in &collected.rows {
            let id = keyed.row.image_id();
            by_bucket[bucket_of(id, buckets)]
                .entry(id)
                .or_default()
                .push(keyed);
        }
        let mut retracted: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
        let mut added: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
        let previous = self.previous.map(|(m, _)| m);
        if let (Some(_), Some(manifest)) = (&plan.full, previous) {
            // A full run retracts the whole previous version.
            for file in manifest.table_files(TableKind::Samples) {
                for sample in read_file_rows::<SampleRow>(self.dir, file)? {
                    retracted
                        .entry(sample.image_id.clone())
                        .or_default()
                        .push(sample);
                }
            }
        }
        let mut exported = Exported::default();
        for rows in by_bucket.iter_mut() {
            for list in rows.values_mut() {
                list.sort_by_key(|k| (k.unit, k.ordinal));
            }
        }
        // The previous version's bucket chunks, by bucket: chunk shards, and the spans of files
        // `capflow optimize` compacted, which hold chunks of several buckets.
        let mut old_pieces: HashMap<usize, Vec<ChunkPiece>> = HashMap::new();
        for file in previous.iter().flat_map(|m| m.files.iter()) {
            if file.table == TableKind::Rejected {
                continue;
            }
            for piece in file.chunk_pieces() {
                if piece.buckets == buckets {
                    old_pieces.entry(piece.bucket).or_default().push(piece);
                }
            }
        }
        // Each bucket's images before and after this run, and its chunks of both.
        let mut layouts = Vec::with_capacity(owned.len());
        for &bucket in owned {
            let rows = &by_bucket[bucket];
            let old_ids: Vec<&str> = match (&plan.full, plan.previous_ids.get(&bucket)) {
                (None, Some(ids)) => ids.iter().map(|id| &**id).collect(),
                _ => Vec::new(),
            };
            let new_ids: Vec<&str> = old_ids
                .iter()
                .copied()
                .filter(|id| !plan.removed.contains(*id))
                .chain(rows.keys().copied())
                .collect::<BTreeSet<&str>>()
                .into_iter()
                .collect();
            layouts.push((bucket, old_ids, new_ids));
        }
        // A chunk none of whose images changed is kept: its files are carried forward, or, for a
        // chunk inside a compacted file that holds a changed chunk too (and so is replaced),
        // its rows there are copied into chunk files of its own.
        // With a replay, a chunk of carried images keeps its input tables' files and has its
        // samples written anew.
        let mut kept: HashMap<usize, HashSet<&str>> = HashMap::new();
        let mut inputs_kept: HashMap<usize, HashSet<&str>> = HashMap::new();
        let mut writes = Vec::with_capacity(layouts.len());
        for (bucket, old_ids, new_ids) in &layouts {
            let old_chunks = chunk_ids(old_ids, self.chunk_images);
            let new_chunks = chunks(new_ids, self.chunk_images);
            let unchanged: HashSet<&str> = (new_chunks.iter())
                .filter(|chunk| {
                    let changed = |id: &&str| {
                        plan.compute.contains(*id)
                            && self.recomputed.is_none_or(|same| !same.contains(*id))
                    };
                    plan.full.is_none()
                        && previous.is_some()
                        && old_chunks.get(chunk.key) == Some(&chunk.ids)
                        && !chunk.ids.iter().any(changed)
                })
                .map(|chunk| chunk.key)
                .collect();
            let samples_kept = match self.replay {
                None => unchanged.clone(),
                Some(_) => HashSet::new(),
            };
            let written: Vec<(usize, bool)> = (new_chunks.iter().enumerate())
                .filter(|(_, chunk)| !samples_kept.contains(chunk.key))
                .map(|(i, chunk)| (i, !unchanged.contains(chunk.key)))
                .collect();
            writes.push(BucketWrite {
                bucket: *bucket,
                reads_back: !written.is_empty() || samples_kept.len() != old_chunks.len(),
                groups: ChunkGroup::of(&written, &new_chunks, &old_chunks, &samples_kept),
                new_chunks,
                written,
            });
            kept.insert(*bucket, samples_kept);
            inputs_kept.insert(*bucket, unchanged);
        }
        let keeps = |bucket: usize, piece: &ChunkPiece| {
            let kept = match piece.file.table {
                TableKind::Samples => &kept[&bucket],
                _ => &inputs_kept[&bucket],
            };
            kept.contains(piece.chunk)
        };
        let replaced_files: HashSet<&str> = old_pieces
            .iter()
            .filter(|(bucket, _)| kept.contains_key(*bucket))
            .flat_map(|(bucket, pieces)| pieces.iter().filter(|p| !keeps(*bucket, p)))
            .map(|piece| piece.file.path.as_str())
            .collect();
        let pieces_of =
            |bucket: usize| -> &[ChunkPiece] { old_pieces.get(&bucket).map_or(&[], Vec::as_slice) };
        // What the rewritten chunks of the buckets hold before this run is read back on a
        // thread of its own, a group of chunks ahead of the writing: every previous chunk that
        // is not kept as it was, whose images' rows go into the new chunks and whose computed
        // and removed images' samples are retracted. With a replay, the bucket's replayed
        // samples are taken as its first group is read back.
        let read_back = |write: &BucketWrite,
                         group: &ChunkGroup,
                         replays: Option<&mut BTreeMap<String, Vec<SampleRow>>>|
         -> Result<BucketBack> {
            let bucket = write.bucket;
            let (kept, inputs_kept) = (&kept[&bucket], &inputs_kept[&bucket]);
            let mut retracted = BTreeMap::new();
            let mut back = match plan.full {
                Some(_) => ReadBack::default(),
                None => {
                    let replaced = pieces_of(bucket).iter().filter(|p| {
                        group.old.contains(p.chunk)
                            && !kept.contains(p.chunk)
                            && !(inputs_kept.contains(p.chunk)
                                && p.file.table != TableKind::Samples)
                    });
                    // With a replay, the samples of a chunk whose images did not change are
                    // kept as batches (only its SSA samples change).
                    let (resampled, rewritten): (Vec<&ChunkPiece>, Vec<&ChunkPiece>) = replaced
                        .partition(|p| self.replay.is_some() && inputs_kept.contains(p.chunk));
                    let mut back =
                        self.read_back(rewritten.into_iter(), &by_bucket[bucket], &mut retracted)?;
                    let mut by_chunk: BTreeMap<&str, Vec<&ChunkPiece>> = BTreeMap::new();
                    for piece in resampled {
                        by_chunk.entry(piece.chunk).or_default().push(piece);
                    }
                    for (chunk, pieces) in by_chunk {
                        let samples = ChunkSamples::read(self.dir, pieces, plan, &mut retracted)?;
                        back.resampled.insert(chunk.to_string(), samples);
                    }
                    back
                }
            };
            let replayed = match replays {
                Some(replays) => {
                    let ids = (write.written[group.written.clone()].iter())
                        .flat_map(|&(i, _)| write.new_chunks[i].ids.iter().copied());
                    self.replayed(replays, &mut back, ids)?
                }
                None => BTreeMap::new(),
            };
            Ok(BucketBack {
                back,
                retracted,
                replayed,
            })
        };
        let mut replay_changes: BTreeMap<String, Vec<(SampleRow, i8)>> = BTreeMap::new();
        std::thread::scope(|scope| -> Result<()> {
            let (send, receive) = std::sync::mpsc::sync_channel::<Result<BucketBack>>(1);
            let writes = &writes;
            scope.spawn(move || {
                for write in writes.iter().filter(|w| w.reads_back) {
                    let mut replays = match self.replay.map(|replay| replay(write.bucket)) {
                        Some(Ok(replays)) => Some(replays),
                        Some(Err(e)) => {
                            let _ = send.send(Err(e));
                            return;
                        }
                        None => None,
                    };
                    for group in &write.groups {
                        let back = read_back(write, group, replays.as_mut());
                        let failed = back.is_err();
                        if send.send(back).is_err() || failed {
                            return;
                        }
                    }
                }
            });
            let mut carried_files: HashSet<&str> = HashSet::new();
            for write in writes {
                let bucket = write.bucket;
                let rows = &by_bucket[bucket];
                let (kept, inputs_kept) = (&kept[&bucket], &inputs_kept[&bucket]);
                for chunk in &write.new_chunks {
                    let samples_kept = kept.contains(chunk.key);
                    if !samples_kept && !inputs_kept.contains(chunk.key) {
                        continue;
                    }
                    let mut copied = false;
                    let pieces = pieces_of(bucket).iter().filter(|p| {
                        p.chunk == chunk.key && (samples_kept || p.file.table != TableKind::Samples)
                    });
                    for piece in pieces {
                        let file = piece.file;
                        if replaced_files.contains(file.path.as_str()) {
                            let bucket_of = (bucket, buckets);
                            for batch in piece_batches(self.dir, piece)? {
                                writer.write_bucket_batch(
                                    file.table,
                                    &file.split,
                                    bucket_of,
                                    chunk.key,
                                    &batch,
                                )?;
                            }
                            exported.rows_written += piece.rows;
                            copied = true;
                        } else if carried_files.insert(file.path.as_str()) {
                            writer.carry(file)?;
                            exported.rows_written += file.rows;
                        }
                    }
                    // A resampled chunk is written with the others below.
                    if samples_kept && copied {
                        writer.finish_chunk(bucket, chunk.key)?;
                        exported.written += 1;
                    } else if samples_kept {
                        exported.carried += 1;
                    }
                }
                if !write.reads_back {
                    continue;
                }
                for group in &write.groups {
                    let BucketBack {
                        mut back,
                        retracted: bucket_retracted,
                        replayed,
                    } = receive.recv().map_err(|_| {
                        Error::Usage("reading back the previous version's chunks stopped".into())
                    })??;
                    for (id, samples) in bucket_retracted {
                        retracted.entry(id).or_default().extend(samples);
                    }
                    replay_changes.extend(replayed);
                    for &(i, with_inputs) in &write.written[group.written.clone()] {
                        let chunk = &write.new_chunks[i];
                        if let Some(samples) = back.resampled.remove(chunk.key) {
                            let others =
                                |id: &str| samples_of(id, plan, new_samples, &mut back, &mut added);
                            exported.rows_written +=
                                samples.write(writer, (bucket, buckets), chunk, others)?;
                            writer.finish_chunk(bucket, chunk.key)?;
                            exported.written += 1;
                            continue;
                        }
                        let mut sink = DatasetSink::bucket(writer, (bucket, buckets), chunk.key);
                        let inputs = std::mem::take(&mut back.inputs.batches);
                        let mut runs = SliceRuns::new(&inputs);
                        for id in chunk.ids.iter().filter(|_| with_inputs) {
                            match rows.get(id) {
                                Some(list) => {
                                    let list = list.iter().map(|keyed| keyed.row.clone());
                                    runs.rows(&mut sink, list)?;
                                }
                                None => {
                                    let slices =
                                        back.inputs.images.remove(*id).ok_or_else(|| {
                                            Error::invalid(
                                                self.dir.display().to_string(),
                                                format!(
                                            "the previous version holds no rows of image {id:?}, \
                                             which the state lists; rerun without --state"
                                        ),
                                            )
                                        })?;
                                    for slice in slices {
                                        runs.push(&mut sink, slice)?;
                                    }
                                }
                            }
                        }
                        runs.flush(&mut sink)?;
                        back.inputs.batches = inputs;
                        let batches = std::mem::take(&mut back.sample_batches.batches);
                        let mut runs = SliceRuns::new(&batches);
                        for id in chunk.ids {
                            let carried = (!plan.compute.contains(*id))
                                .then(|| back.sample_batches.images.remove(*id))
                                .flatten();
                            if let Some(slices) = carried {
                                for slice in slices {
                                    runs.push(&mut sink, slice)?;
                                }
                                continue;
                            }
                            let samples = samples_of(id, plan, new_samples, &mut back, &mut added);
                            runs.rows(&mut sink, samples.into_iter().map(Row::Sample))?;
                        }
                        runs.flush(&mut sink)?;
                        back.sample_batches.batches = batches;
                        exported.rows_written += sink.rows_out();
                        sink.finish()?;
                        // Its shards are closed at once: an open shard holds a compressor for each
                        // of its columns.
                        writer.finish_chunk(bucket, chunk.key)?;
                        exported.written += 1;
                    }
                }
                // Every change held so far is this bucket's: it goes to the bucket's run.
                if let (Some(dir), None) = (self.runs, &plan.full) {
                    let changes = image_changes(
                        std::mem::take(&mut replay_changes),
                        std::mem::take(&mut retracted),
                        std::mem::take(&mut added),
                    );
                    if !changes.is_empty() {
                        let path = dir.join(format!("b{bucket:05}.arrows"));
                        super::spill::write_changes(&path, &changes)?;
                        exported.runs.push(path);
                    }
                }
            }
            Ok(())
        })?;
        exported.changes = image_changes(replay_changes, retracted, added);
        Ok(exported)
    }
}

/// The changes of a set of images, in image id order: each image's replayed changes, then its
/// retracted and added samples' ([`changelog`]).
fn image_changes(
    replayed: BTreeMap<String, Vec<(SampleRow, i8)>>,
    retracted: BTreeMap<String, Vec<SampleRow>>,
    added: BTreeMap<String, Vec<SampleRow>>,
) -> Vec<(SampleRow, i8)> {
    let mut changes = replayed;
    for (sample, diff) in changelog(retracted, added) {
        changes
            .entry(sample.image_id.clone())
            .or_default()
            .push((sample, diff));
    }
    changes.into_values().flatten().collect()
}

impl BucketExport<'_> {
    /// Gives each image whose samples were read back (as rows, or in a resampled chunk's
    /// batches) its replayed SSA samples in place of its old ones, and the images of `ids`
    /// without samples before their replayed ones if they have any, taking them from
    /// `replayed`; returns the changes, by image. Each replayed image's changes are made at
    /// once: the group's samples are not held twice.
    fn replayed<'i>(
        &self,
        replayed: &mut BTreeMap<String, Vec<SampleRow>>,
        back: &mut ReadBack,
        ids: impl Iterator<Item = &'i str>,
    ) -> Result<BTreeMap<String, Vec<(SampleRow, i8)>>> {
        let no_replay = |id: &str| {
            Error::invalid(
                self.dir.display().to_string(),
                format!("no SSA record replays image {id:?}; rerun without --state"),
            )
        };
        let mut changes = BTreeMap::new();
        for chunk in back.resampled.values_mut() {
            let ids: Vec<String> = chunk.image_ids().cloned().collect();
            for id in ids {
                let ssa = replayed.remove(&id).ok_or_else(|| no_replay(&id))?;
                changes.insert(id.clone(), chunk.replay(&id, ssa));
            }
        }
        let samples = &mut back.samples;
        for (id, previous) in samples.iter_mut() {
            let ssa = replayed.remove(id).ok_or_else(|| no_replay(id))?;
            let new = with_ssa_samples(previous, ssa);
            let old = std::mem::replace(previous, new.clone());
            let changed = changelog([(id.clone(), old)].into(), [(id.clone(), new)].into());
            changes.insert(id.clone(), changed);
        }
        for id in ids {
            let Some(ssa) = replayed.remove(id).filter(|ssa| !ssa.is_empty()) else {
                continue;
            };
            changes.insert(id.to_string(), ssa.iter().map(|s| (s.clone(), 1)).collect());
            samples.insert(id.to_string(), ssa);
        }
        Ok(changes)
    }

    /// The rows of the previous version's `files` (of chunks being rewritten): the input rows
    /// of images not in `fresh` (whose rows this run read), as batches, and the samples of
    /// images the plan does not compute; the samples of computed and removed images go to
    /// `retracted`.
    fn read_back<'f>(
        &self,
        pieces: impl Iterator<Item = &'f ChunkPiece<'f>>,
        fresh: &BTreeMap<&str, Vec<&KeyedRow>>,
        retracted: &mut BTreeMap<String, Vec<SampleRow>>,
    ) -> Result<ReadBack> {
        let plan = self.plan;
        let mut back = ReadBack::default();
        let gone = |id: &str| plan.compute.contains(id) || plan.removed.contains(id);
        for piece in pieces {
            if piece.file.table != TableKind::Samples {
                let unread = |id: &str| !fresh.contains_key(id);
                back.inputs.read(self.dir, piece, unread, |_, _| Ok(()))?;
                continue;
            }
            if self.replay.is_none() {
                let retract = |id: &str, slice: (&RecordBatch, usize)| {
                    let samples = sample_rows(self.dir, piece, slice)?;
                    retracted.entry(id.to_string()).or_default().extend(samples);
                    Ok(())
                };
                back.sample_batches
                    .read(self.dir, piece, |id| !gone(id), retract)?;
                continue;
            }
            for row in read_piece_as_rows(self.dir, piece)? {
                let Row::Sample(sample) = row else {
                    continue;
                };
                let id = sample.image_id.clone();
                if gone(&id) {
                    retracted.entry(id).or_default().push(sample);
                } else {
                    back.samples.entry(id).or_default().push(sample);
                }
            }
        }
        Ok(back)
    }
}

/// The samples image `id` has in this version: a computed image's new ones (which are added),
/// the others' read back.
fn samples_of(
    id: &str,
    plan: &Plan,
    new_samples: &mut BTreeMap<String, Vec<SampleRow>>,
    back: &mut ReadBack,
    added: &mut BTreeMap<String, Vec<SampleRow>>,
) -> Vec<SampleRow> {
    if !plan.compute.contains(id) {
        return back.samples.remove(id).unwrap_or_default();
    }
    let new = new_samples.remove(id).unwrap_or_default();
    if !new.is_empty() {
        added.insert(id.to_string(), new.clone());
    }
    new
}

/// An image's samples with its SSA samples replaced by `ssa`: where the old ones were, else
/// after its original captions (the stages' order, [`super::augment`]).
fn with_ssa_samples(previous: &[SampleRow], ssa: Vec<SampleRow>) -> Vec<SampleRow> {
    let is_ssa = |s: &SampleRow| s.method == crate::augment::ssa::METHOD;
    let at = previous.iter().position(is_ssa).unwrap_or_else(|| {
        previous
            .iter()
            .rposition(|s| s.method == crate::augment::original::ORIGINAL_METHOD)
            .map_or(0, |i| i + 1)
    });
    let mut samples: Vec<SampleRow> = previous[..at]
        .iter()
        .filter(|s| !is_ssa(s))
        .cloned()
        .collect();
    samples.extend(ssa);
    samples.extend(previous[at..].iter().filter(|s| !is_ssa(s)).cloned());
    samples
}

/// The samples of `slice`, rows of `piece` of the previous version's samples from its row
/// `offset`, as [`read_piece_as_rows`] gives them.
fn sample_rows(
    dir: &Path,
    piece: &ChunkPiece,
    (slice, offset): (&RecordBatch, usize),
) -> Result<Vec<SampleRow>> {
    let path = dataset_file_path(dir, piece.file)?;
    let mut sink = VecSink::default();
    let first_row = piece.offset as usize + offset;
    capflow_parquet::decode_batch(TableKind::Samples, slice, first_row, &path, &mut sink)?;
    let rows = rows_read_back(&path, sink)?;
    Ok((rows.into_iter())
        .filter_map(|row| match row {
            Row::Sample(sample) => Some(sample),
            _ => None,
        })
        .collect())
}

/// Every row of one of the previous version's bucket chunks, typed by its table.
fn read_piece_as_rows(dir: &Path, piece: &ChunkPiece) -> Result<Vec<Row>> {
    let path = dataset_file_path(dir, piece.file)?;
    let mut sink = VecSink::default();
    capflow_parquet::read_range(&path, piece.offset, piece.rows, &mut sink)?;
    rows_read_back(&path, sink)
}

/// The rows decoded from the previous version's file `path` into `sink`; an error when one of
/// them did not decode.
fn rows_read_back(path: &Path, sink: VecSink) -> Result<Vec<Row>> {
    match sink.rejected.first() {
        Some(row) => Err(Error::invalid(
            path.display().to_string(),
            format!(
                "a row of the previous version does not read back: {}",
                row.reason
            ),
        )),
        None => Ok(sink.rows),
    }
}

/// Per image, in image id order: the retracted samples that are not added back unchanged (−1),
/// then the added samples that were not there before (+1).
pub(crate) fn changelog(
    mut retracted: BTreeMap<String, Vec<SampleRow>>,
    mut added: BTreeMap<String, Vec<SampleRow>>,
) -> Vec<(SampleRow, i8)> {
    let mut ids: Vec<String> = retracted.keys().chain(added.keys()).cloned().collect();
    ids.sort();
    ids.dedup();
    let mut changes = Vec::new();
    for id in ids {
        let mut old = retracted.remove(&id).unwrap_or_default();
        let new = added.remove(&id).unwrap_or_default();
        let mut fresh = Vec::new();
        for sample in new {
            match old.iter().position(|o| *o == sample) {
                Some(i) => {
                    old.remove(i);
                }
                None => fresh.push(sample),
            }
        }
        changes.extend(old.into_iter().map(|s| (s, -1)));
        changes.extend(fresh.into_iter().map(|s| (s, 1)));
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &str, image: &str, text: &str) -> SampleRow {
        SampleRow {
            image: None,
            sample_id: id.into(),
            image_id: image.into(),
            split: "train".into(),
            method: "ssa".into(),
            text: text.into(),
            control_boxes: Vec::new(),
            control_labels: Vec::new(),
            coverage: 0.0,
            length_level: 1,
            word_count: 2,
            verbs: Vec::new(),
            quality: Vec::new(),
            provenance: Default::default(),
        }
    }

    /// Written chunks are grouped with the previous chunks they take images from; chunks that
    /// share a previous chunk are read back together, and a previous chunk left with no image
    /// is read back alone, for its retractions.
    #[test]
    fn chunks_that_share_a_previous_chunk_are_read_back_together() {
        let old_ids = ["1", "2", "3", "4", "5", "6", "8"];
        let old_chunks: HashMap<&str, &[&str]> = HashMap::from([
            ("3", &old_ids[0..3]),
            ("5", &old_ids[3..5]),
            ("6", &old_ids[5..6]),
            ("8", &old_ids[6..7]),
        ]);
        // "4" now ends a chunk, so the old chunk "5" is split between "4" and "7"; "7" also
        // takes "6", and "8" is removed. "3" is unchanged and kept.
        let new_ids = ["1", "2", "3", "4", "5", "6", "7", "9"];
        let new_chunks = vec![
            Chunk {
                key: "3",
                ids: &new_ids[0..3],
            },
            Chunk {
                key: "4",
                ids: &new_ids[3..4],
            },
            Chunk {
                key: "7",
                ids: &new_ids[4..7],
            },
            Chunk {
                key: "",
                ids: &new_ids[7..8],
            },
        ];
        let written = [(1, true), (2, true), (3, true)];
        let kept = HashSet::from(["3"]);
        let groups = ChunkGroup::of(&written, &new_chunks, &old_chunks, &kept);
        let shown: Vec<(std::ops::Range<usize>, BTreeSet<&str>)> = groups
            .iter()
            .map(|g| (g.written.clone(), g.old.iter().copied().collect()))
            .collect();
        assert_eq!(
            shown,
            vec![
                (0..2, BTreeSet::from(["5", "6"])),
                (2..3, BTreeSet::new()),
                (3..3, BTreeSet::from(["8"])),
            ]
        );
    }

    #[test]
    fn an_insertion_changes_only_the_chunk_it_falls_in() {
        let ids: Vec<String> = (0..2000)
            .map(|i| format!("{:07}", 3_000_000 + 7 * i))
            .collect();
        let before: Vec<&str> = ids.iter().map(String::as_str).collect();
        let cut = chunks(&before, 16);
        // Every id is in exactly one chunk, in order; closed chunks end at a boundary id.
        assert_eq!(cut.iter().map(|c| c.ids.len()).sum::<usize>(), before.len());
        assert!(cut.len() > 60 && cut.len() < 250, "{} chunks", cut.len());
        for chunk in &cut {
            match chunk.key {
                "" => assert!(!ends_chunk(chunk.ids[chunk.ids.len() - 1], 16)),
                key => assert_eq!(chunk.ids.last(), Some(&key)),
            }
        }
        // An id inserted in the middle and one appended at the end: every other chunk stays.
        let mut grown = before.clone();
        grown.insert(1001, "3007000x");
        grown.push("9999999");
        let after = chunks(&grown, 16);
        let kept = after.iter().filter(|c| cut.contains(c)).count();
        assert!(kept + 2 >= cut.len(), "{kept} of {} chunks kept", cut.len());
        assert!(after.len() <= cut.len() + 2);
    }

    #[test]
    fn unchanged_samples_cancel_and_the_rest_is_signed() {
        let old = BTreeMap::from([
            (
                "a".to_string(),
                vec![sample("a1", "a", "x"), sample("a2", "a", "y")],
            ),
            ("gone".to_string(), vec![sample("g1", "gone", "z")]),
        ]);
        let new = BTreeMap::from([
            (
                "a".to_string(),
                vec![sample("a1", "a", "x"), sample("a3", "a", "w")],
            ),
            ("b".to_string(), vec![sample("b1", "b", "v")]),
        ]);
        let got: Vec<(String, i8)> = changelog(old, new)
            .into_iter()
            .map(|(s, d)| (s.sample_id, d))
            .collect();
        let want: Vec<(String, i8)> = [("a2", -1), ("a3", 1), ("b1", 1), ("g1", -1)]
            .iter()
            .map(|(s, d)| (s.to_string(), *d))
            .collect();
        assert_eq!(got, want);
    }
}
