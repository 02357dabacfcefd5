//! What a `--refit` keeps of SSA: every run with `--state` keeps, per bucket, each image's
//! [`SsaKept`] (its merge's log and its sentences before the quality filter,
//! [`crate::augment::ssa::SsaRecord`]), so that a refit that leaves an image's merge as it was
//! replays its quality filter with the new models instead of computing the image again
//! (`docs/decisions/refit-replay.md`).
//!
//! ```text
//! STATE/records/r<NNNNN>.bin    zstd-compressed bincode: the config hash of the run that wrote
//!                               it, then per image its id, its digest and what SSA keeps
//! STATE/records/r<NNNNN>-<k>.bin  the same, for the images a later rerun computed again
//! ```
//!
//! A bucket's records are written with its image states: whole by a run that computes the
//! bucket (the streaming engine), appended to by a rerun that computes some of its images, so
//! that a rerun does not rewrite every bucket's records; a bucket with more than a few appended
//! files is rewritten as one. An image's record counts only while its digest is the one the
//! bucket's state holds and the file was written under the spec's configuration (a run that
//! keeps no records leaves older files behind, which those checks refuse).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::inputs::InputsState;
use super::models::{fit_methods_with, CorpusStats, FittedModels, ModelSource};
use super::runtime::{input_units, CollectedRun, KeyedRow, RecordNumbering};
use super::state::{
    remove_if_present, write_replacing_with, BucketState, RowsDigest, StateDir, StateHeader,
};
use super::DataflowSpec;
use crate::augment::ssa::{CaptionNumbering, Drop, Replayed, SsaConfig, SsaKept, SsaModels};
use crate::error::{Error, Result};
use crate::export::{Manifest, StageMetrics};
use crate::ingest::flickr30k::{ImageSlot, Listing};
use crate::ingest::{read_input, Format, RecordSink, Row};
use crate::schema::{RejectedRow, SampleRow, TableKind};
use crate::select::mix::MixConfig;

const RECORDS_DIR: &str = "records";

/// A bucket's records: per image id, the image's digest and what SSA keeps of it.
pub type BucketRecords = BTreeMap<String, (String, SsaKept)>;

/// The layout of a records file, which earlier versions wrote and read whole; the writer and
/// the reader now stream it entry by entry, and tests check them against it.
#[cfg(test)]
#[derive(serde::Serialize, serde::Deserialize)]
struct RecordsFile {
    config_hash: String,
    images: BucketRecords,
}

/// The most record files a bucket has beside its base before an append compacts them.
const MAX_DELTAS: usize = 8;

/// A bucket's base records file (`delta` 0) or the `delta`-th appended to it.
fn records_path(state: &StateDir, bucket: usize, delta: usize) -> PathBuf {
    let name = match delta {
        0 => format!("r{bucket:05}.bin"),
        n => format!("r{bucket:05}-{n}.bin"),
    };
    state.dir().join(RECORDS_DIR).join(name)
}

/// Whether a run of `spec` with a state keeps records: it runs SSA with the built-in quality
/// scorer.
pub fn keeps_records(spec: &DataflowSpec) -> bool {
    spec.ssa.is_some() && spec.models.quality_scorer.is_none()
}

/// Whether the state keeps records at all (a run with `--state` and SSA with its built-in
/// scorer wrote them).
pub fn kept(state: &StateDir) -> bool {
    state.dir().join(RECORDS_DIR).is_dir()
}

/// Calls `each` with every record of `bucket` written under `config_hash`, in id order,
/// without holding them: its base file's and each appended file's, a later record of an image
/// replacing an earlier one. Records of images the bucket no longer holds, or holds with another
/// digest, are among them: the caller compares. The base file is decoded one record at a time,
/// and only the appended files' records (those of the images later reruns computed again) are
/// held, to replace the base file's.
pub fn for_each_record(
    state: &StateDir,
    bucket: usize,
    config_hash: &str,
    each: impl FnMut(String, String, SsaKept) -> Result<()>,
) -> Result<()> {
    let appended = appended_records(state, bucket, config_hash)?;
    merge_records(state, bucket, config_hash, appended, each)
}

/// Calls `each` with the records of `bucket`'s base file written under `config_hash` and those
/// of `newer`, in id order, a record of `newer` replacing the base file's of the same image.
/// The base file is decoded one record at a time.
fn merge_records(
    state: &StateDir,
    bucket: usize,
    config_hash: &str,
    newer: BucketRecords,
    mut each: impl FnMut(String, String, SsaKept) -> Result<()>,
) -> Result<()> {
    let mut newer = newer.into_iter().peekable();
    let mut visit = |(id, (digest, kept)): (String, (String, SsaKept))| each(id, digest, kept);
    if let Some(mut base) = base_records(state, bucket, config_hash)? {
        while let Some((id, record)) = base.next_record()? {
            while let Some(earlier) = newer.next_if(|(newer, _)| *newer < id) {
                visit(earlier)?;
            }
            visit(
                newer
                    .next_if(|(newer, _)| *newer == id)
                    .unwrap_or((id, record)),
            )?;
        }
    }
    newer.try_for_each(visit)
}

/// The records of `bucket`'s appended files written under `config_hash`, a later file's
/// record of an image replacing an earlier one's.
fn appended_records(state: &StateDir, bucket: usize, config_hash: &str) -> Result<BucketRecords> {
    let mut appended = BucketRecords::new();
    for delta in 1.. {
        let Some(mut file) = RecordsStream::open(records_path(state, bucket, delta))? else {
            break;
        };
        if file.config_hash == config_hash {
            while let Some((id, record)) = file.next_record()? {
                appended.insert(id, record);
            }
        }
    }
    Ok(appended)
}

/// `bucket`'s base records file when it was written under `config_hash`.
fn base_records(
    state: &StateDir,
    bucket: usize,
    config_hash: &str,
) -> Result<Option<RecordsStream>> {
    Ok(RecordsStream::open(records_path(state, bucket, 0))?
        .filter(|base| base.config_hash == config_hash))
}

/// A bucket's records taken by image id in increasing order, as a run writes a bucket's
/// images, without holding them: the base file is decoded as far as the id asked for, and the
/// appended files' records are held to replace the base file's ([`for_each_record`]'s records).
pub struct RecordsCursor {
    bucket: usize,
    config_hash: String,
    appended: BucketRecords,
    base: Option<RecordsStream>,
    /// The base file's next record not yet passed over.
    head: Option<(String, (String, SsaKept))>,
    /// The last id asked for.
    last: Option<String>,
}

impl RecordsCursor {
    /// The records of `bucket` written under `config_hash`.
    pub fn open(state: &StateDir, bucket: usize, config_hash: &str) -> Result<RecordsCursor> {
        let mut cursor = RecordsCursor {
            bucket,
            config_hash: config_hash.to_string(),
            appended: appended_records(state, bucket, config_hash)?,
            base: base_records(state, bucket, config_hash)?,
            head: None,
            last: None,
        };
        cursor.advance()?;
        Ok(cursor)
    }

    /// The bucket this cursor reads.
    pub fn bucket(&self) -> usize {
        self.bucket
    }

    /// The record of image `id`: its digest and what SSA kept. Records of smaller ids are
    /// passed over; an id smaller than the last one asked for reads the files again from the
    /// start.
    pub fn take(&mut self, state: &StateDir, id: &str) -> Result<Option<(String, SsaKept)>> {
        if self.last.as_deref().is_some_and(|last| id <= last) {
            *self = RecordsCursor::open(state, self.bucket, &self.config_hash)?;
        }
        self.last = Some(id.to_string());
        while self
            .head
            .as_ref()
            .is_some_and(|(head, _)| head.as_str() < id)
        {
            self.advance()?;
        }
        let from_base = match &self.head {
            Some((head, _)) if head == id => {
                let taken = self.head.take().map(|(_, record)| record);
                self.advance()?;
                taken
            }
            _ => None,
        };
        Ok(self.appended.remove(id).or(from_base))
    }

    fn advance(&mut self) -> Result<()> {
        self.head = match &mut self.base {
            Some(base) => base.next_record()?,
            None => None,
        };
        Ok(())
    }
}

/// A records file read one record at a time: after zstd, its bincode is the config hash, the
/// number of images, then each image's `(id, (digest, kept))`.
struct RecordsStream {
    path: PathBuf,
    input:
        std::io::BufReader<zstd::stream::read::Decoder<'static, std::io::BufReader<std::fs::File>>>,
    config_hash: String,
    left: u64,
}

impl RecordsStream {
    /// The file at `path` with its header read, or `None` when there is none.
    fn open(path: PathBuf) -> Result<Option<RecordsStream>> {
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let decoder = zstd::stream::read::Decoder::new(file).map_err(|e| Error::io(&path, e))?;
        let mut input = std::io::BufReader::with_capacity(64 << 10, decoder);
        let header: Result<(String, u64)> = bincode::deserialize_from(&mut input)
            .and_then(|hash| Ok((hash, bincode::deserialize_from(&mut input)?)))
            .map_err(|e| not_records(&path, &e));
        let (config_hash, left) = header?;
        Ok(Some(RecordsStream {
            path,
            input,
            config_hash,
            left,
        }))
    }

    /// The next image's record, or `None` after the last.
    fn next_record(&mut self) -> Result<Option<(String, (String, SsaKept))>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        bincode::deserialize_from(&mut self.input)
            .map(Some)
            .map_err(|e| not_records(&self.path, &e))
    }
}

fn not_records(path: &Path, e: &bincode::Error) -> Error {
    Error::invalid(
        path.display().to_string(),
        format!("not a capflow records file: {e}"),
    )
}

/// Replaces the records of `bucket` with `images` (removes them when there are none).
pub fn write(
    state: &StateDir,
    bucket: usize,
    config_hash: &str,
    images: BucketRecords,
) -> Result<()> {
    remove_deltas(state, bucket)?;
    let path = records_path(state, bucket, 0);
    match images.is_empty() {
        true => remove_if_present(&path),
        false => write_file(state, &path, config_hash, images),
    }
}

/// Adds the records of `images` (computed again) to those of `bucket`, in a file of their
/// own; after [`MAX_DELTAS`] such files, rewrites the bucket's records as one, keeping those
/// of the images in `live` with their digest there.
pub fn append(
    state: &StateDir,
    bucket: usize,
    config_hash: &str,
    images: BucketRecords,
    live: &BucketState,
) -> Result<()> {
    let next = (1..)
        .find(|&delta| !records_path(state, bucket, delta).is_file())
        .unwrap_or(1);
    if next > MAX_DELTAS || !records_path(state, bucket, 0).is_file() {
        return compact(state, bucket, config_hash, images, live);
    }
    if images.is_empty() {
        return Ok(());
    }
    write_file(
        state,
        &records_path(state, bucket, next),
        config_hash,
        images,
    )
}

/// Rewrites the records of `bucket` as one file: its base file's, its appended files' and
/// `images`', a later record of an image replacing an earlier one, keeping those of the images
/// in `live` with their digest there. The base file is decoded one record at a time and merged
/// in id order with the others, so only the appended records and `images` are held, not the
/// bucket's (kilobytes an image in memory).
fn compact(
    state: &StateDir,
    bucket: usize,
    config_hash: &str,
    images: BucketRecords,
    live: &BucketState,
) -> Result<()> {
    let mut newer = appended_records(state, bucket, config_hash)?;
    newer.extend(images);
    let mut spill = RecordsSpill::new(state, bucket)?;
    // The base file is read to its end, and closed, before the new one takes its place.
    merge_records(
        state,
        bucket,
        config_hash,
        newer,
        |id, digest, kept| match live.get(&id) {
            Some(image) if image.digest == digest => spill.push(&id, &digest, &kept),
            _ => Ok(()),
        },
    )?;
    spill.finish(state, bucket, config_hash)
}

/// A bucket's records as the streaming engine keeps them, image by image, without holding
/// them in memory: each image's entry goes to a scratch file in the state's records directory
/// as its part is written, and [`RecordsSpill::finish`] writes the bucket's records file from
/// it at the bucket's end. The file is the one [`write`] gives for the same images pushed in
/// id order (bincode writes a map as its length, then its entries).
pub struct RecordsSpill {
    scratch: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    count: u64,
}

impl RecordsSpill {
    /// An empty spill for `bucket`'s records (a scratch file left by a failed run is replaced).
    pub fn new(state: &StateDir, bucket: usize) -> Result<RecordsSpill> {
        let dir = state.dir().join(RECORDS_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let scratch = dir.join(format!("r{bucket:05}.entries.tmp"));
        let file = std::fs::File::create(&scratch).map_err(|e| Error::io(&scratch, e))?;
        Ok(RecordsSpill {
            scratch,
            out: std::io::BufWriter::new(file),
            count: 0,
        })
    }

    /// Appends one image's record.
    pub fn push(&mut self, image_id: &str, digest: &str, kept: &SsaKept) -> Result<()> {
        bincode::serialize_into(&mut self.out, &(image_id, (digest, kept)))
            .map_err(|e| Error::invalid(self.scratch.display().to_string(), e.to_string()))?;
        self.count += 1;
        Ok(())
    }

    /// Replaces the records of `bucket` with those pushed (removes them when there are none),
    /// and removes the scratch file.
    pub fn finish(self, state: &StateDir, bucket: usize, config_hash: &str) -> Result<()> {
        let RecordsSpill {
            scratch,
            out,
            count,
        } = self;
        out.into_inner()
            .map_err(|e| Error::io(&scratch, e.into_error()))?;
        let written = if count == 0 {
            write(state, bucket, config_hash, BucketRecords::new())
        } else {
            remove_deltas(state, bucket)?;
            let path = records_path(state, bucket, 0);
            let mut entries = std::fs::File::open(&scratch).map_err(|e| Error::io(&scratch, e))?;
            write_records(&path, config_hash, count, |out| {
                std::io::copy(&mut entries, out).map(|_| ())
            })
        };
        remove_if_present(&scratch)?;
        written
    }
}

fn remove_deltas(state: &StateDir, bucket: usize) -> Result<()> {
    let deltas = (1..)
        .map(|delta| records_path(state, bucket, delta))
        .take_while(|path| path.is_file());
    for path in deltas.collect::<Vec<_>>() {
        remove_if_present(&path)?;
    }
    Ok(())
}

fn write_file(
    state: &StateDir,
    path: &std::path::Path,
    config_hash: &str,
    images: BucketRecords,
) -> Result<()> {
    let dir = state.dir().join(RECORDS_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    write_records(path, config_hash, images.len() as u64, |out| {
        for entry in &images {
            bincode::serialize_into(&mut *out, &entry).map_err(std::io::Error::other)?;
        }
        Ok(())
    })
}

/// Writes a records file: the bincode of the config hash and of `count` images, zstd-compressed,
/// the images' entries written by `entries` (each a bincode `(id, (digest, kept))`).
fn write_records(
    path: &std::path::Path,
    config_hash: &str,
    count: u64,
    entries: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    write_replacing_with(path, |out| {
        let mut encoder = zstd::stream::write::Encoder::new(out, 1)?;
        bincode::serialize_into(&mut encoder, config_hash).map_err(std::io::Error::other)?;
        encoder.write_all(&count.to_le_bytes())?;
        entries(&mut encoder)?;
        encoder.finish()?;
        Ok(())
    })
}

/// The statistics SSA's corpus-level models are fitted from and the digest of the caption rows
/// they learn from ([`super::models::model_rows`]), as the streaming engine gathers them while
/// it reads every input ([`CaptionNumbering`], [`RowsDigest`]), from a pass that reads only
/// the inputs that hold captions: a PENMAN file's graphs are not parsed. The images of a
/// Flickr30k Entities directory are read on `threads` threads; what each gathers merges
/// exactly.
pub fn caption_stats(spec: &DataflowSpec, threads: usize) -> Result<(CorpusStats, RowsDigest)> {
    let mut total = CorpusStats::new(spec).ok_or_else(|| {
        Error::Usage(format!(
            "the dataflow {} fits no corpus-level models",
            spec.name
        ))
    })?;
    let mut rows = RowsDigest::default();
    for (index, unit) in input_units(spec)?.iter().enumerate() {
        if unit.format == Format::Penman {
            continue;
        }
        let unit_index = index as u32;
        let tables = unit.tables.as_deref();
        if unit.format == Format::Flickr30kEntities && unit.path.is_dir() {
            let listing = Listing::of(&unit.path, false)?;
            let images_kept = tables.is_none_or(|t| t.contains(&TableKind::Images));
            let slots: Vec<ImageSlot> = listing.slots().collect();
            let threads = threads.clamp(1, slots.len().max(1));
            let share = slots.len().div_ceil(threads).max(1);
            let gathered: Vec<Result<(CorpusStats, RowsDigest)>> = std::thread::scope(|scope| {
                let handles: Vec<_> = slots
                    .chunks(share)
                    .enumerate()
                    .map(|(n, slots)| {
                        let (listing, spec) = (&listing, spec);
                        scope.spawn(move || {
                            // A thread of its own reads the images' files for the gathering.
                            std::thread::scope(|reading| {
                                let (send, received) = std::sync::mpsc::sync_channel(4);
                                reading.spawn(move || {
                                    for block in slots.chunks(IMAGES_PER_MESSAGE) {
                                        let read = block
                                            .iter()
                                            .map(|slot| {
                                                read_caption_records(listing, *slot, images_kept)
                                            })
                                            .collect::<Result<Vec<_>>>();
                                        let failed = read.is_err();
                                        if send.send(read).is_err() || failed {
                                            break;
                                        }
                                    }
                                });
                                let mut gather = Gather::new(spec, unit_index, tables);
                                let mut i = 0;
                                for block in received {
                                    for (first, told) in block? {
                                        gather.base = ((n * share + i) as u64) << 32;
                                        gather.numbering.ordinal = first;
                                        told.replay(&mut gather)?;
                                        i += 1;
                                    }
                                }
                                Ok((gather.stats, gather.rows))
                            })
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::Usage("gathering caption statistics panicked".into()))
                        })
                    })
                    .collect()
            });
            for part in gathered {
                let (stats, digest) = part?;
                total.merge(stats)?;
                rows.merge(&digest);
            }
        } else {
            let mut gather = Gather::new(spec, unit_index, tables);
            read_input(unit.format, &unit.path, &mut gather)?;
            total.merge(gather.stats)?;
            rows.merge(&gather.rows);
        }
    }
    Ok((total, rows))
}

/// Images a caption pass's reading thread hands on at a time.
const IMAGES_PER_MESSAGE: usize = 64;

/// What the caption pass reads of the image in `slot`: the ordinal its sentences' records start
/// at, and what the reader told its sink. The annotation file's record takes one number whether
/// it parses or not, so it need not be parsed, unless its row is not kept (then only a
/// rejection takes one).
fn read_caption_records(
    listing: &Listing,
    slot: ImageSlot,
    images_kept: bool,
) -> Result<(u64, Told)> {
    let image = listing.image(slot);
    let mut told = Told::default();
    match images_kept {
        true => {
            listing.read_sentences(&image, &mut told)?;
            Ok((u64::from(image.annotation.is_some()), told))
        }
        false => {
            listing.read_image(&image, &mut told)?;
            Ok((0, told))
        }
    }
}

/// What a reader told its sink, in order, to be told to another sink on another thread.
#[derive(Default)]
struct Told(Vec<Telling>);

// Nearly every telling is a row: boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum Telling {
    Row(Row),
    Reject(RejectedRow),
    Accepted,
}

impl Told {
    fn replay(self, sink: &mut dyn RecordSink) -> Result<()> {
        for telling in self.0 {
            match telling {
                Telling::Row(row) => sink.row(row)?,
                Telling::Reject(rejected) => sink.reject(rejected)?,
                Telling::Accepted => sink.accepted()?,
            }
        }
        Ok(())
    }
}

impl RecordSink for Told {
    fn row(&mut self, row: Row) -> Result<()> {
        self.0.push(Telling::Row(row));
        Ok(())
    }

    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        self.0.push(Telling::Reject(rejected));
        Ok(())
    }

    fn accepted(&mut self) -> Result<()> {
        self.0.push(Telling::Accepted);
        Ok(())
    }
}

/// A reader's sink that numbers records as the engine's readers do and gathers the captions.
struct Gather<'a> {
    unit: u32,
    base: u64,
    numbering: RecordNumbering<'a>,
    captions: CaptionNumbering,
    stats: CorpusStats,
    rows: RowsDigest,
}

impl<'a> Gather<'a> {
    fn new(spec: &DataflowSpec, unit: u32, tables: Option<&'a [TableKind]>) -> Gather<'a> {
        Gather {
            unit,
            base: 0,
            numbering: RecordNumbering::new(tables),
            captions: CaptionNumbering::default(),
            stats: CorpusStats::new(spec).unwrap_or(CorpusStats {
                ssa: None,
                relatedness: None,
                cutswap: None,
                detections: None,
            }),
            rows: RowsDigest::default(),
        }
    }
}

impl RecordSink for Gather<'_> {
    fn row(&mut self, row: Row) -> Result<()> {
        let Some(ordinal) = self.numbering.row(&row) else {
            return Ok(());
        };
        if let Row::Caption(caption) = &row {
            let ordinal = self.base + ordinal;
            if let Some(stats) = self.stats.ssa.as_mut() {
                self.captions.add(stats, self.unit, ordinal, &caption.text);
            }
            self.rows.add(&KeyedRow {
                unit: self.unit,
                ordinal,
                row,
            })?;
        }
        Ok(())
    }

    fn reject(&mut self, _rejected: RejectedRow) -> Result<()> {
        self.numbering.reject();
        Ok(())
    }

    fn accepted(&mut self) -> Result<()> {
        self.numbering.accepted();
        Ok(())
    }
}

/// Whether a `--refit` of `spec` can replay SSA from the state's records instead of computing
/// every image: one process, SSA the only method with corpus-level models (fitted on the
/// inputs, with the built-in scorer), `[mix] all`, and a state that describes the dataset in the
/// output directory (`before` as this run would write it, but for the models) with its input
/// pieces and records.
pub fn replays(
    spec: &DataflowSpec,
    options: &super::RunOptions,
    state: &StateDir,
    before: &StateHeader,
    previous: Option<(&Manifest, &str)>,
) -> bool {
    let same_run = before.models_digest.is_some()
        && *before
            == super::state::header(
                spec.config_hash(),
                before.models_digest.clone(),
                spec.output.buckets,
                previous,
            );
    options.refit
        && options.models.is_none()
        && options.cluster.processes <= 1
        && spec.mix == MixConfig::All
        && spec.corpus_spec().is_none()
        && spec.relatedness.is_none()
        && spec.cutswap.is_none()
        && keeps_records(spec)
        && same_run
        && kept(state)
        && InputsState::kept(state.dir())
}

/// A `--refit` that replays SSA ([`replays`]): the models fitted anew, the images whose records
/// do not hold under them, and the others' replays.
pub struct Replaying {
    /// The digest of the caption rows the models were fitted on (the state's models digest).
    pub models_digest: String,
    pub fitted: FittedModels,
    /// The `models` stage: the pass over the captions and the fit.
    pub models_metrics: StageMetrics,
    /// The state's images whose record is missing or does not hold: computed again.
    pub recompute: BTreeSet<String>,
    /// The state's images whose records hold.
    pub replayable: u64,
    /// Where each bucket's replays wait for the export ([`BucketReplays`], one file a bucket,
    /// removed as it is taken).
    spill: PathBuf,
    replayed: Mutex<ReplayTally>,
}

/// What the replays taken so far gave.
#[derive(Default)]
struct ReplayTally {
    images: u64,
    samples: u64,
    dropped: BTreeMap<Drop, u64>,
    elapsed: Duration,
}

/// What one thread of [`prepare`] made of its buckets.
#[derive(Default)]
struct Checked {
    recompute: BTreeSet<String>,
    replayable: u64,
}

/// A bucket's replays, by image: its digest and what the replay gave. Spilled as bincode to a
/// file of the bucket ([`replays_file`]).
type BucketReplays = BTreeMap<String, (String, Replayed)>;

/// The file of `bucket`'s replays in `spill`.
fn replays_file(spill: &Path, bucket: usize) -> PathBuf {
    spill.join(format!("b{bucket:05}.bin"))
}

/// Fits the models from a pass over the captions ([`caption_stats`]) and replays every record
/// of the state that holds under them, on `threads` threads. The replays (an image's SSA
/// samples, a few hundred bytes an image) wait in files of `spill`, one a bucket, until the
/// export takes them a bucket at a time.
pub fn prepare(
    spec: &DataflowSpec,
    state: &StateDir,
    threads: usize,
    spill: &Path,
) -> Result<Replaying> {
    let started = Instant::now();
    let (stats, rows) =
        tracing::info_span!("caption-stats").in_scope(|| caption_stats(spec, threads))?;
    let source = ModelSource::Stats(Box::new(stats));
    let (methods, mut models_metrics, fitted) = tracing::info_span!("fit")
        .in_scope(|| fit_methods_with(spec, &CollectedRun::default(), source, true))?;
    models_metrics.elapsed_ms = started.elapsed().as_millis() as u64;
    let (Some((config, models)), Some(fitted)) = (methods.ssa, fitted) else {
        return Err(Error::Usage(format!(
            "the dataflow {} has no SSA models to refit",
            spec.name
        )));
    };
    let replay_started = Instant::now();
    let _replay = tracing::info_span!("replay").entered();
    let config_hash = spec.config_hash();
    let buckets: Vec<usize> = (0..spec.output.buckets).collect();
    let threads = threads.clamp(1, buckets.len().max(1));
    let checked: Vec<Result<Checked>> = std::thread::scope(|scope| {
        let handles: Vec<_> = buckets
            .chunks(buckets.len().div_ceil(threads))
            .map(|share| {
                let (config, models, config_hash) = (&config, &models, &config_hash);
                scope
                    .spawn(move || replay_share(state, share, config_hash, (config, models), spill))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Usage("replaying SSA records panicked".into())))
            })
            .collect()
    });
    let (mut recompute, mut replayable) = (BTreeSet::new(), 0);
    for share in checked {
        let share = share?;
        recompute.extend(share.recompute);
        replayable += share.replayable;
    }
    Ok(Replaying {
        models_digest: rows.hex(),
        fitted,
        models_metrics,
        recompute,
        replayable,
        spill: spill.to_path_buf(),
        replayed: Mutex::new(ReplayTally {
            elapsed: replay_started.elapsed(),
            ..ReplayTally::default()
        }),
    })
}

/// Replays the records of the buckets of `share` as they are decoded: an image's record counts
/// when it has the digest the bucket's state holds for the image, and is replayed unless its
/// merge does not hold under `models`; the state's other images are computed again.
fn replay_share(
    state: &StateDir,
    share: &[usize],
    config_hash: &str,
    (config, models): (&SsaConfig, &SsaModels),
    spill: &Path,
) -> Result<Checked> {
    let mut checked = Checked::default();
    for &bucket in share {
        let states = state.read_bucket(bucket)?;
        let mut replays = BucketReplays::new();
        for_each_record(state, bucket, config_hash, |id, digest, kept| {
            let holds = states.get(&id).is_some_and(|image| image.digest == digest);
            if let Some(replayed) = holds.then(|| kept.replay(config, models)).flatten() {
                replays.insert(id, (digest, replayed));
            }
            Ok(())
        })?;
        let unreplayed = states.into_keys().filter(|id| !replays.contains_key(id));
        checked.recompute.extend(unreplayed);
        checked.replayable += replays.len() as u64;
        let path = replays_file(spill, bucket);
        let file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
        let mut out = std::io::BufWriter::new(file);
        bincode::serialize_into(&mut out, &replays)
            .map_err(|e| Error::invalid(path.display().to_string(), e.to_string()))?;
        std::io::Write::flush(&mut out).map_err(|e| Error::io(&path, e))?;
    }
    Ok(checked)
}

impl Replaying {
    /// The SSA samples of the images of `bucket` that the run carries (`carried` by id and
    /// digest), by image, as their records replayed them.
    pub fn replay_bucket(
        &self,
        bucket: usize,
        carried: impl Fn(&str, &str) -> bool,
    ) -> Result<BTreeMap<String, Vec<SampleRow>>> {
        let path = replays_file(&self.spill, bucket);
        let replays: BucketReplays = match std::fs::File::open(&path) {
            Ok(file) => bincode::deserialize_from(std::io::BufReader::new(file))
                .map_err(|e| Error::invalid(path.display().to_string(), e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BucketReplays::new(),
            Err(e) => return Err(Error::io(&path, e)),
        };
        super::state::remove_if_present(&path)?;
        let mut tally = lock(&self.replayed);
        let mut out = BTreeMap::new();
        for (id, (digest, replayed)) in replays {
            if !carried(&id, &digest) {
                continue;
            }
            tally.images += 1;
            tally.samples += replayed.samples.len() as u64;
            for (reason, n) in replayed.dropped {
                *tally.dropped.entry(reason).or_insert(0) += n;
            }
            out.insert(id, replayed.samples);
        }
        Ok(out)
    }

    /// SSA's drops of the replayed images, by reason.
    pub fn dropped(&self) -> BTreeMap<Drop, u64> {
        lock(&self.replayed).dropped.clone()
    }

    /// The `replay` stage: images replayed, their SSA samples, the time it took.
    pub fn metrics(&self) -> StageMetrics {
        let tally = lock(&self.replayed);
        StageMetrics {
            name: "replay".into(),
            rows_in: tally.images,
            rows_out: tally.samples,
            rejected: 0,
            elapsed_ms: tally.elapsed.as_millis() as u64,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::ssa::SsaConfig;
    use crate::dataflow::state::ImageState;

    fn kept(n: u64) -> SsaKept {
        SsaKept::unmerged(&SsaConfig::default(), &[(Drop::TokenAligned, n)])
    }

    fn states(images: &[(&str, &str)]) -> BucketState {
        images
            .iter()
            .map(|(id, digest)| {
                let state = ImageState {
                    digest: digest.to_string(),
                    rejected: Vec::new(),
                };
                (id.to_string(), state)
            })
            .collect()
    }

    fn records<S: AsRef<str>>(images: &[(S, &str, u64)]) -> BucketRecords {
        images
            .iter()
            .map(|(id, digest, n)| (id.as_ref().to_string(), (digest.to_string(), kept(*n))))
            .collect()
    }

    /// Every record [`for_each_record`] visits, by image.
    fn read(state: &StateDir, bucket: usize, config_hash: &str) -> Result<BucketRecords> {
        let mut records = BucketRecords::new();
        for_each_record(state, bucket, config_hash, |id, digest, kept| {
            records.insert(id, (digest, kept));
            Ok(())
        })?;
        Ok(records)
    }

    fn files(state: &StateDir) -> usize {
        std::fs::read_dir(state.dir().join(RECORDS_DIR)).map_or(0, |dir| dir.count())
    }

    /// Appended records replace earlier ones of the same image; after `MAX_DELTAS` appended
    /// files the bucket is rewritten as one, keeping only the records of the images the bucket
    /// holds with their digest; records of another configuration are not read.
    #[test]
    fn appended_records_replace_earlier_ones_and_are_compacted_with_the_live_images() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        write(&state, 3, "c1", records(&[("a", "d1", 1), ("b", "d1", 1)])).unwrap();
        append(
            &state,
            3,
            "c1",
            records(&[("b", "d2", 2)]),
            &BucketState::new(),
        )
        .unwrap();
        let read_back = read(&state, 3, "c1").unwrap();
        assert_eq!(read_back, records(&[("a", "d1", 1), ("b", "d2", 2)]));
        assert!(read(&state, 3, "c2").unwrap().is_empty());
        assert!(read(&state, 4, "c1").unwrap().is_empty());
        assert_eq!(files(&state), 2);
        // `b` changed again and `a` is gone: the appends go on until there are too many.
        let live = states(&[("b", "d9"), ("c", "d1")]);
        for n in 2..=MAX_DELTAS as u64 {
            append(&state, 3, "c1", records(&[("b", "d9", n)]), &live).unwrap();
        }
        assert_eq!(files(&state), 1 + MAX_DELTAS);
        append(&state, 3, "c1", records(&[("c", "d1", 7)]), &live).unwrap();
        assert_eq!(files(&state), 1);
        let compacted = read(&state, 3, "c1").unwrap();
        assert_eq!(
            compacted,
            records(&[("b", "d9", MAX_DELTAS as u64), ("c", "d1", 7)])
        );
        // A whole write removes the appended files; an empty one the bucket's records.
        append(&state, 3, "c1", records(&[("c", "d1", 8)]), &live).unwrap();
        write(&state, 3, "c1", records(&[("c", "d1", 9)])).unwrap();
        assert_eq!(read(&state, 3, "c1").unwrap(), records(&[("c", "d1", 9)]));
        assert_eq!(files(&state), 1);
        write(&state, 3, "c1", BucketRecords::new()).unwrap();
        assert_eq!(files(&state), 0);
    }

    /// A compaction merges the base file, decoded a record at a time, with the appended
    /// files and the new records in id order: the file is the one a whole write of the
    /// records `read` gives, kept for the live images with their digest, makes.
    #[test]
    fn a_compaction_merges_the_base_file_in_id_order_into_the_file_a_whole_write_makes() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let id = |k: u64| format!("{:07}", 2_000_000 + k);
        // The base holds the even images 0..600; each append changes an image of the base,
        // adds one between two of them and one after the last.
        let base: Vec<(String, &str, u64)> = (0..300).map(|k| (id(2 * k), "d1", k % 5)).collect();
        write(&state, 1, "c1", records(&base)).unwrap();
        let mut expected = records(&base);
        for n in 1..=MAX_DELTAS as u64 {
            let delta = records(&[
                (id(10 * n), "d2", n),
                (id(10 * n + 1), "d1", n),
                (id(700 + n), "d1", n),
            ]);
            append(&state, 1, "c1", delta.clone(), &BucketState::new()).unwrap();
            expected.extend(delta);
        }
        assert_eq!(files(&state), 1 + MAX_DELTAS);
        let last = records(&[(id(0), "d3", 9), (id(3), "d1", 9), (id(998), "d1", 9)]);
        expected.extend(last.clone());
        // Live: every image but the multiples of 7, and image 20 with another digest.
        let live: BucketState = expected
            .iter()
            .filter(|(id, _)| id.parse::<u64>().unwrap() % 7 != 0)
            .map(|(id, (digest, _))| {
                let digest = if id == "2000020" { "d9" } else { digest };
                let state = ImageState {
                    digest: digest.to_string(),
                    rejected: Vec::new(),
                };
                (id.clone(), state)
            })
            .collect();
        append(&state, 1, "c1", last, &live).unwrap();
        assert_eq!(files(&state), 1);
        expected.retain(|id, (digest, _)| live.get(id).is_some_and(|s| s.digest == *digest));
        assert!(expected.contains_key("2000003") && expected.contains_key("2000998"));
        assert!(!expected.contains_key("2000020") && !expected.contains_key("2000012"));
        assert_eq!(read(&state, 1, "c1").unwrap(), expected);
        write(&state, 2, "c1", expected).unwrap();
        let bytes = |bucket: usize| std::fs::read(records_path(&state, bucket, 0)).unwrap();
        assert_eq!(bytes(1), bytes(2));
    }

    /// The records are visited one by one as `read` gives them: an appended file's record of
    /// an image instead of the base file's, a file of another configuration not at all; a file
    /// cut short is an error naming it, not records left out.
    #[test]
    fn records_are_visited_once_each_and_a_cut_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let base: Vec<(String, &str, u64)> = (0..500)
            .map(|k| (format!("{:07}", 2_000_000 + k), "d1", k % 7))
            .collect();
        let base = records(&base);
        write(&state, 2, "c1", base.clone()).unwrap();
        let changed = records(&[("2000007", "d2", 3), ("2000600", "d1", 4)]);
        append(&state, 2, "c1", changed.clone(), &BucketState::new()).unwrap();
        // A file of another configuration among the appended ones is passed over.
        write_file(
            &state,
            &records_path(&state, 2, 2),
            "c0",
            records(&[("2000008", "d5", 5)]),
        )
        .unwrap();
        let mut visited = Vec::new();
        for_each_record(&state, 2, "c1", |id, digest, kept| {
            visited.push((id, (digest, kept)));
            Ok(())
        })
        .unwrap();
        let mut expected = base;
        expected.extend(changed);
        assert_eq!(visited.len(), expected.len());
        assert_eq!(visited.into_iter().collect::<BucketRecords>(), expected);

        let path = records_path(&state, 2, 0);
        let bytes = zstd::decode_all(&std::fs::read(&path).unwrap()[..]).unwrap();
        let cut = zstd::encode_all(&bytes[..bytes.len() / 2], 1).unwrap();
        std::fs::write(&path, cut).unwrap();
        let err = for_each_record(&state, 2, "c1", |_, _, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("r00002.bin"), "{err}");
        assert!(read(&state, 2, "c1").is_err());
    }

    /// A cursor gives each image's record as `read` does, asked in id order: an appended
    /// record before the base file's, nothing for an image without one; an id asked out of
    /// order reads the files again rather than missing its record.
    #[test]
    fn a_cursor_takes_the_records_read_gives_in_id_order() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let base: BucketRecords = (0..400u64)
            .map(|k| {
                let id = format!("{:07}", 2_000_000 + 2 * k);
                (id, ("d1".to_string(), kept(k % 5)))
            })
            .collect();
        write(&state, 4, "c1", base).unwrap();
        let changed = records(&[("2000010", "d2", 3), ("2000011", "d1", 4)]);
        append(&state, 4, "c1", changed, &BucketState::new()).unwrap();
        let expected = read(&state, 4, "c1").unwrap();
        let mut cursor = RecordsCursor::open(&state, 4, "c1").unwrap();
        assert_eq!(cursor.bucket(), 4);
        for k in 0..820u64 {
            let id = format!("{:07}", 2_000_000 + k);
            assert_eq!(
                cursor.take(&state, &id).unwrap(),
                expected.get(&id).cloned(),
                "{id}"
            );
        }
        let early = "2000010".to_string();
        assert_eq!(
            cursor.take(&state, &early).unwrap(),
            expected.get(&early).cloned()
        );
        assert!(expected.contains_key(&early));
        let mut other = RecordsCursor::open(&state, 4, "c0").unwrap();
        assert_eq!(other.take(&state, "2000010").unwrap(), None);
    }

    /// A bucket's records spilled image by image make the file a whole write of the same
    /// records makes, byte for byte, replace the bucket's appended files, and leave no scratch
    /// file; a spill of no records removes the bucket's records.
    #[test]
    fn spilled_records_are_the_file_a_whole_write_makes() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let images: Vec<(String, &str, u64)> = (0..300)
            .map(|k| {
                (
                    format!("{:07}", 2_000_000 + k),
                    if k % 3 == 0 { "d1" } else { "d2" },
                    k % 5,
                )
            })
            .collect();
        let whole = records(&images);
        write(&state, 5, "c1", whole.clone()).unwrap();
        let path = records_path(&state, 5, 0);
        let expected = std::fs::read(&path).unwrap();
        // A whole write is the bincode of the file's struct, as every earlier version wrote it.
        let file = RecordsFile {
            config_hash: "c1".into(),
            images: whole.clone(),
        };
        assert_eq!(
            zstd::decode_all(&expected[..]).unwrap(),
            bincode::serialize(&file).unwrap()
        );
        append(
            &state,
            5,
            "c1",
            records(&[("x", "d1", 1)]),
            &BucketState::new(),
        )
        .unwrap();
        assert_eq!(files(&state), 2);

        let mut spill = RecordsSpill::new(&state, 5).unwrap();
        for (id, digest, n) in &images {
            spill.push(id, digest, &kept(*n)).unwrap();
        }
        spill.finish(&state, 5, "c1").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(read(&state, 5, "c1").unwrap(), whole);
        // The appended file is gone, and so is the scratch file.
        assert_eq!(files(&state), 1);

        RecordsSpill::new(&state, 5)
            .unwrap()
            .finish(&state, 5, "c1")
            .unwrap();
        assert_eq!(files(&state), 0);
    }
}
