//! Reading a run's inputs piece by piece, so that a rerun with `--state` reads only what changed.
//!
//! Every input path is cut into **pieces** that can be read alone: one image (its sentence and
//! annotation files) of a Flickr30k Entities directory, or one whole file (or directory) of the
//! other formats. The state keeps, per piece, the size and modification time of its files, the
//! images it holds rows of, its record counts and its rejections (`STATE/inputs.json`). A rerun
//! lists the pieces again and reads:
//!
//! 1. every new or changed piece, whole, and for a PENMAN file that only grew, the graphs after
//!    the old end (once the old bytes are confirmed unchanged by their hash);
//! 2. then, filtered to the images step 1 touched (its images, and the images of changed and
//!    removed pieces), the unchanged pieces that hold other rows of those images.
//!
//! The rows of every other image are not read: their outputs are carried forward. Counts and
//! rejections of unread pieces come from the state, so the ledger and the manifest's counts are
//! those of a full read. Row positions: the rows of the `i`-th image of a Flickr30k Entities
//! directory get ordinals `i << 32 | k`, which keeps the order of a full read (where they are
//! numbered consecutively) without numbering the images not read.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use xxhash_rust::xxh3::Xxh3;

use serde::{Deserialize, Serialize};

use super::runtime::{CollectedRun, KeyedRow, RecordNumbering};
use super::spec::DataflowSpec;
use crate::amr::penman::BlockCursor;
use crate::error::{Error, Result};
use crate::export::StageMetrics;
use crate::ingest::flickr30k::{ImageSlot, Listing};
use crate::ingest::{read_input, FileMeta, Format, IngestCounts, RecordSink, Row};
use crate::schema::{RejectedRow, TableKind};

/// A file modified less than this long before a read started may change again within the same
/// timestamp tick without its stamp changing; its stamp is not kept (it is read again next time).
const RACY_NS: u64 = 2_000_000_000;

/// The file of the state directory that describes the inputs' pieces.
pub const INPUTS_FILE: &str = "inputs.json";
const INPUTS_FORMAT: &str = "capflow-inputs";
const INPUTS_FORMAT_VERSION: u32 = 1;

/// A file as a piece last saw it (absent files have no size). Stored as `[path, size,
/// modified_ns]`: a state holds one per input file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "(String, Option<u64>, Option<u64>)",
    into = "(String, Option<u64>, Option<u64>)"
)]
pub struct FileStamp {
    pub path: String,
    pub size: Option<u64>,
    /// Modification time, nanoseconds since the Unix epoch.
    pub modified_ns: Option<u64>,
}

impl FileStamp {
    /// The stamp of a file named relative to its unit's path (absent files have none).
    fn new(unit: &Path, path: &Path, meta: Option<FileMeta>) -> FileStamp {
        FileStamp {
            path: relative(unit, path),
            size: meta.map(|m| m.size),
            modified_ns: meta.and_then(|m| m.modified_ns),
        }
    }

    fn of(unit: &Path, path: &Path) -> Result<FileStamp> {
        let meta = match FileMeta::read(path) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(path, e)),
        };
        Ok(FileStamp::new(unit, path, meta))
    }
}

impl From<(String, Option<u64>, Option<u64>)> for FileStamp {
    fn from((path, size, modified_ns): (String, Option<u64>, Option<u64>)) -> FileStamp {
        FileStamp {
            path,
            size,
            modified_ns,
        }
    }
}

impl From<FileStamp> for (String, Option<u64>, Option<u64>) {
    fn from(stamp: FileStamp) -> Self {
        (stamp.path, stamp.size, stamp.modified_ns)
    }
}

/// `path` relative to `unit` (`/`-separated), or whole when it is not under it.
fn relative(unit: &Path, path: &Path) -> String {
    path.strip_prefix(unit)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Where the read of a PENMAN file ended, to read only what is appended to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PenmanEnd {
    pub cursor: BlockCursor,
    /// The next record ordinal of the piece.
    pub ordinal: u64,
    /// XXH3-128 of the file's first `cursor.byte_offset` bytes, hex.
    pub xxh3: String,
}

/// One piece of an input, as the last run read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PieceState {
    /// The image id of a Flickr30k Entities image; empty for a whole file.
    pub key: String,
    pub files: Vec<FileStamp>,
    /// What else the piece's rows depend on: a Flickr30k Entities image's split (from the
    /// split lists beside the directory).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
    /// The images the piece holds rows of, sorted.
    pub images: Vec<String>,
    pub counts: IngestCounts,
    /// Rejected records with their ordinal within the piece.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<(u64, RejectedRow)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<PenmanEnd>,
}

/// One input path of the spec and its pieces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnitState {
    pub format: Format,
    pub path: String,
    pub pieces: Vec<Box<PieceState>>,
}

/// `STATE/inputs.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputsState {
    pub format: String,
    pub format_version: u32,
    pub units: Vec<UnitState>,
}

impl InputsState {
    /// Reads `STATE/inputs.json`; `None` when missing or written by another layout.
    pub fn read(state_dir: &Path) -> Result<Option<InputsState>> {
        let path = state_dir.join(INPUTS_FILE);
        let Some(state) = super::state::read_json::<InputsState>(&path, "a capflow inputs state")?
        else {
            return Ok(None);
        };
        let current =
            state.format == INPUTS_FORMAT && state.format_version == INPUTS_FORMAT_VERSION;
        Ok(current.then_some(state))
    }

    /// Replaces `STATE/inputs.json`.
    pub fn write(&self, state_dir: &Path) -> Result<()> {
        // Written as it is encoded: the record is hundreds of bytes a piece.
        super::state::write_replacing_with(&state_dir.join(INPUTS_FILE), |out| {
            serde_json::to_writer(out, self).map_err(Into::into)
        })
    }

    /// Removes `STATE/inputs.json` (a run that does not read piece by piece leaves none), and
    /// a record [`stamp_inputs`] left.
    pub fn remove(state_dir: &Path) -> Result<()> {
        super::state::remove_if_present(&state_dir.join(INPUTS_FILE))?;
        super::state::remove_if_present(&state_dir.join(PENDING_INPUTS_FILE))
    }

    /// Makes the pending record the state's `inputs.json`.
    pub fn commit_pending(state_dir: &Path) -> Result<()> {
        let pending = state_dir.join(PENDING_INPUTS_FILE);
        std::fs::rename(&pending, state_dir.join(INPUTS_FILE)).map_err(|e| Error::io(&pending, e))
    }
}

/// Where a streamed run's record of its input pieces waits for the commit.
const PENDING_INPUTS_FILE: &str = "inputs.pending.json";

/// What [`read_inputs`] read.
#[derive(Debug)]
pub struct InputRead {
    /// The rows read (of the touched images only, after a partial read), every piece's counts
    /// and rejections, and the read stage's metrics.
    pub collected: CollectedRun,
    /// The images whose rows were read; `None` when every piece was read.
    pub touched: Option<BTreeSet<String>>,
    /// The inputs' state for the next run.
    pub state: InputsState,
    /// One line on what was read.
    pub summary: String,
}

/// A piece of an input as listed now.
struct Listed {
    key: String,
    files: Vec<FileStamp>,
    context: String,
    /// Its index in a Flickr30k Entities listing.
    image: Option<usize>,
}

/// One input path of the spec as listed now.
struct Unit {
    index: u32,
    format: Format,
    path: PathBuf,
    tables: Option<Vec<TableKind>>,
    pieces: Vec<Listed>,
    flickr: Option<Listing>,
    /// Where the images of a Flickr30k Entities listing are ([`Listing::places`]), by piece.
    images: Vec<Option<ImageSlot>>,
}

impl Unit {
    fn list(
        index: u32,
        format: Format,
        path: &Path,
        tables: Option<Vec<TableKind>>,
    ) -> Result<Unit> {
        if !path.exists() {
            return Err(Error::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the {} input does not exist", format.name()),
                ),
            ));
        }
        let flickr = match format {
            Format::Flickr30kEntities => Some(Listing::of(path, true)?),
            _ => None,
        };
        let images: Vec<Option<ImageSlot>> = flickr.iter().flat_map(Listing::places).collect();
        let pieces = match &flickr {
            Some(listing) => images
                .iter()
                .enumerate()
                .map(|(i, place)| {
                    let image = listing.image_at(*place);
                    Listed {
                        files: image
                            .sentence
                            .iter()
                            .chain(&image.annotation)
                            .map(|f| FileStamp::new(path, &f.path, f.meta))
                            .collect(),
                        context: listing.split_of(&image.id).to_string(),
                        key: image.id,
                        image: Some(i),
                    }
                })
                .collect(),
            None => {
                let mut paths = Vec::new();
                files_under(path, &mut paths)?;
                paths.sort();
                let files = paths
                    .iter()
                    .map(|p| FileStamp::of(path, p))
                    .collect::<Result<Vec<_>>>()?;
                vec![Listed {
                    key: String::new(),
                    files,
                    context: String::new(),
                    image: None,
                }]
            }
        };
        Ok(Unit {
            index,
            format,
            path: path.to_path_buf(),
            tables,
            pieces,
            flickr,
            images,
        })
    }

    /// The first row ordinal of piece `i`.
    fn base(&self, piece: &Listed) -> u64 {
        piece.image.map_or(0, |i| (i as u64) << 32)
    }

    /// Whether the piece is a single PENMAN file (whose appended graphs can be read alone).
    fn appendable(&self) -> bool {
        self.format == Format::Penman && self.path.is_file()
    }

    /// Reads piece `piece` (from `from` for the rest of a PENMAN file) into `sink`.
    fn read(&self, piece: &Listed, from: Option<&PenmanEnd>, sink: &mut PieceSink) -> Result<()> {
        let read = match (&self.flickr, piece.image) {
            (Some(listing), Some(i)) => listing.read_image(&listing.image_at(self.images[i]), sink),
            _ if self.appendable() => {
                sink.numbering.ordinal = from.map_or(0, |e| e.ordinal);
                let cursor = from.map(|e| e.cursor).unwrap_or_default();
                crate::ingest::penman::read_from(&self.path, cursor, sink)
                    .map(|end| sink.end = Some(end))
            }
            _ => read_input(self.format, &self.path, sink),
        };
        read.map_err(|e| {
            Error::Config(format!(
                "reading {} as {}: {e}",
                self.path.display(),
                self.format.name()
            ))
        })
    }
}

/// Every regular file at or under `path`.
fn files_under(path: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    if !path.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let entry = entry.map_err(|e| Error::io(path, e))?;
        files_under(&entry.path(), out)?;
    }
    Ok(())
}

/// Collects one piece's rows, counts and rejections, numbered as the dataflow's reader numbers
/// them.
struct PieceSink<'a> {
    unit: u32,
    /// The piece's first ordinal within its unit (ordinals in `numbering` are the piece's own).
    base: u64,
    numbering: RecordNumbering<'a>,
    /// Keep only the rows of these images (all when `None`).
    keep: Option<&'a HashSet<String>>,
    /// Keep no rows at all, only what the piece's state records ([`stamp_inputs`]).
    stamp_only: bool,
    rows: Vec<KeyedRow>,
    images: BTreeSet<String>,
    rejected: Vec<(u64, RejectedRow)>,
    end: Option<BlockCursor>,
}

impl<'a> PieceSink<'a> {
    fn new(unit: &'a Unit, piece: &Listed, keep: Option<&'a HashSet<String>>) -> PieceSink<'a> {
        PieceSink {
            unit: unit.index,
            base: unit.base(piece),
            numbering: RecordNumbering::new(unit.tables.as_deref()),
            keep,
            stamp_only: false,
            rows: Vec::new(),
            images: BTreeSet::new(),
            rejected: Vec::new(),
            end: None,
        }
    }
}

impl RecordSink for PieceSink<'_> {
    fn row(&mut self, row: Row) -> Result<()> {
        let Some(ordinal) = self.numbering.row(&row) else {
            return Ok(());
        };
        if self.keep.is_some_and(|k| !k.contains(row.image_id())) {
            return Ok(());
        }
        if !self.images.contains(row.image_id()) {
            self.images.insert(row.image_id().to_string());
        }
        if self.stamp_only {
            return Ok(());
        }
        self.rows.push(KeyedRow {
            unit: self.unit,
            ordinal: self.base + ordinal,
            row,
        });
        Ok(())
    }

    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        let ordinal = self.numbering.reject();
        self.rejected.push((ordinal, rejected));
        Ok(())
    }

    fn accepted(&mut self) -> Result<()> {
        self.numbering.accepted();
        Ok(())
    }
}

/// `hasher` fed bytes `from..to` of `path`; `None` when the file is shorter.
fn hash_range(path: &Path, mut hasher: Xxh3, from: u64, to: u64) -> Result<Option<Xxh3>> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    file.seek(SeekFrom::Start(from))
        .map_err(|e| Error::io(path, e))?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut left = to.saturating_sub(from);
    while left > 0 {
        let want = buffer.len().min(left as usize);
        let got = file
            .read(&mut buffer[..want])
            .map_err(|e| Error::io(path, e))?;
        if got == 0 {
            return Ok(None);
        }
        hasher.update(&buffer[..got]);
        left -= got as u64;
    }
    Ok(Some(hasher))
}

fn hex128(hasher: &Xxh3) -> String {
    format!("{:032x}", hasher.digest128())
}

/// What happens to one listed piece in a rerun.
enum Step {
    /// Unchanged: its state is carried; read again (filtered) only for touched images.
    Keep(Box<PieceState>),
    /// Read whole.
    Read,
    /// A PENMAN file that grew: read from the old end (the hash of the bytes before it).
    Append(Box<PieceState>, Box<Xxh3>),
}

/// One piece's outcome.
struct Outcome {
    state: PieceState,
    rows: Vec<KeyedRow>,
}

/// Reads the spec's inputs piece by piece. With `previous`, a state directory whose
/// [`INPUTS_FILE`] describes the inputs the last run read, only what changed is read (see the
/// module documentation); without it, or when it holds no such file, all.
pub fn read_inputs(spec: &DataflowSpec, previous: Option<&Path>) -> Result<InputRead> {
    let started = Instant::now();
    let started_ns = now_ns();
    // The state is loaded while the inputs are listed.
    let (units, previous) = std::thread::scope(|scope| {
        let loaded = previous.map(|dir| scope.spawn(move || InputsState::read(dir)));
        let units = list_units(spec)?;
        let loaded = loaded.map(|handle| {
            handle
                .join()
                .unwrap_or_else(|_| Err(Error::Usage("loading it panicked".into())))
        });
        // An unreadable inputs' state costs a full read, not the run.
        let previous = match loaded {
            Some(Ok(previous)) => previous,
            Some(Err(e)) => {
                crate::cli::out::diagnostic!(
                    "capflow run: reading every input: the inputs' state is unusable: {e}"
                );
                None
            }
            None => None,
        };
        Ok::<_, Error>((units, previous))
    })?;
    let listed: usize = units.iter().map(|u| u.pieces.len()).sum();
    // Step 1: plan each unit's pieces and read the new and changed ones.
    let mut touched: HashSet<String> = HashSet::new();
    let mut steps: Vec<Vec<Step>> = Vec::new();
    let everything = previous.is_none();
    let mut old_units: Vec<Option<UnitState>> = previous
        .map(|p| p.units.into_iter().map(Some).collect())
        .unwrap_or_default();
    for unit in &units {
        // The old pieces stay where they were parsed, found by key through their positions.
        let mut old_pieces: Vec<Option<Box<PieceState>>> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        if let Some(old) = old_units
            .get_mut(unit.index as usize)
            .and_then(Option::take)
        {
            if old.format == unit.format && old.path == unit.path.display().to_string() {
                by_key = (old.pieces.iter().enumerate())
                    .map(|(i, p)| (p.key.clone(), i))
                    .collect();
                old_pieces = old.pieces.into_iter().map(Some).collect();
            } else {
                // Not the input the state describes: what that one held is touched.
                for piece in old.pieces {
                    touched.extend(piece.images);
                }
            }
        }
        let mut unit_steps = Vec::with_capacity(unit.pieces.len());
        for piece in &unit.pieces {
            let found = by_key.remove(piece.key.as_str());
            let step = match found.and_then(|i| old_pieces[i].take()) {
                Some(o) if o.files == piece.files && o.context == piece.context => Step::Keep(o),
                Some(o) => match appended(unit, piece, &o)? {
                    Some(hasher) => Step::Append(o, Box::new(hasher)),
                    None => {
                        touched.extend(o.images);
                        Step::Read
                    }
                },
                None => Step::Read,
            };
            unit_steps.push(step);
        }
        // Pieces that are gone: their images lose rows.
        for gone in old_pieces.into_iter().flatten() {
            touched.extend(gone.images);
        }
        steps.push(unit_steps);
    }
    // Inputs the spec no longer has.
    for old in old_units.into_iter().flatten() {
        for piece in old.pieces {
            touched.extend(piece.images);
        }
    }
    let first = read_units(&units, &steps, None)?;
    for outcomes in &first {
        for outcome in outcomes.iter().flatten() {
            touched.extend(outcome.rows.iter().map(|r| r.row.image_id().to_string()));
        }
    }
    // Step 2: the unchanged pieces that hold other rows of the touched images.
    let second = if everything {
        Vec::new()
    } else {
        read_units(&units, &steps, Some(&touched))?
    };
    let mut collected = CollectedRun::default();
    let mut state = InputsState {
        format: INPUTS_FORMAT.to_string(),
        format_version: INPUTS_FORMAT_VERSION,
        units: Vec::new(),
    };
    let (mut read, mut appended_pieces) = (0usize, 0usize);
    let mut second = second.into_iter();
    for ((unit, unit_steps), firsts) in units.iter().zip(steps).zip(first) {
        let mut again = second.next().unwrap_or_default().into_iter();
        let mut pieces = Vec::with_capacity(unit.pieces.len());
        for ((piece, step), first) in unit.pieces.iter().zip(unit_steps).zip(firsts) {
            let again = again.next().flatten();
            let (state, rows) = match (step, first) {
                (Step::Keep(o), _) => (o, again.map(|a| a.rows)),
                (Step::Read, Some(outcome)) => {
                    read += 1;
                    (Box::new(outcome.state), Some(outcome.rows))
                }
                (Step::Append(..), Some(outcome)) => {
                    read += 1;
                    appended_pieces += 1;
                    // When the file is read again from its start for the touched images, those
                    // rows replace the appended part's.
                    let rows = again.map_or(outcome.rows, |a| a.rows);
                    (Box::new(outcome.state), Some(rows))
                }
                _ => {
                    return Err(Error::Config(format!(
                        "reading {}: a piece was planned and not read",
                        unit.path.display()
                    )))
                }
            };
            let mut state = state;
            forget_racy_stamps(&mut state, started_ns);
            let base = unit.base(piece);
            collected.counts.add(state.counts);
            for (ordinal, rejected) in &state.rejected {
                collected
                    .rejected
                    .push((unit.index, base + ordinal, rejected.clone()));
            }
            if let Some(rows) = rows {
                collected.rows.extend(rows.into_iter().map(Arc::new));
            }
            pieces.push(state);
        }
        state.units.push(UnitState {
            format: unit.format,
            path: unit.path.display().to_string(),
            pieces,
        });
    }
    collected.rows.sort_by_key(|r| (r.unit, r.ordinal));
    collected.rejected.sort_by_key(|r| (r.0, r.1));
    collected.stages.push(StageMetrics {
        name: "read".into(),
        rows_in: collected.counts.read,
        rows_out: collected.rows.len() as u64,
        rejected: collected.counts.rejected,
        elapsed_ms: started.elapsed().as_millis() as u64,
    });
    let summary = if everything {
        format!("read all {listed} input pieces")
    } else {
        let images = touched.len();
        format!(
            "read {read} new or changed of {listed} input pieces ({appended_pieces} appended to), \
             {} rows of {images} image{}",
            collected.rows.len(),
            if images == 1 { "" } else { "s" }
        )
    };
    let touched: Option<BTreeSet<String>> = (!everything).then(|| touched.into_iter().collect());
    Ok(InputRead {
        collected,
        touched,
        state,
        summary,
    })
}

/// Writes the inputs' state a piece-by-piece read of every input would leave ([`read_inputs`]
/// with no previous state) to `STATE/inputs.pending.json`, where it waits for the run's commit
/// ([`InputsState::commit_pending`]): what a run that read its inputs on the streaming engine
/// leaves, so that the next run with the same models reads only new and changed pieces. Every
/// piece is read without keeping any row, and its state goes to the file as it is made, so the
/// record is never held in memory (it is hundreds of bytes a piece). Called before the run reads
/// its inputs, so that a file changed while the run reads it has a stamp older than what the
/// run read and is read again next time.
pub fn stamp_inputs(spec: &DataflowSpec, state_dir: &Path) -> Result<()> {
    let started_ns = now_ns();
    let units = list_units(spec)?;
    // One thread per unit writes its pieces, comma-separated, to a file of its own; the record
    // is put together from them in unit order, in the layout of `InputsState` and `UnitState`
    // (which `InputsState::read` reads back).
    let part = |unit: &Unit| state_dir.join(format!("{PENDING_INPUTS_FILE}.{}", unit.index));
    let written: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = units
            .iter()
            .map(|unit| {
                let path = part(unit);
                scope.spawn(move || {
                    let mut out = JsonFile::create(&path)?;
                    for (i, piece) in unit.pieces.iter().enumerate() {
                        let mut sink = PieceSink::new(unit, piece, None);
                        sink.stamp_only = true;
                        let mut state = read_piece_into(unit, piece, None, sink)?.state;
                        forget_racy_stamps(&mut state, started_ns);
                        if i > 0 {
                            out.raw(b",")?;
                        }
                        out.value(&state)?;
                    }
                    out.finish()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Config("an input reader panicked".into())))
            })
            .collect()
    });
    let assembled = written.into_iter().collect::<Result<()>>().and_then(|()| {
        let mut out = JsonFile::create(&state_dir.join(PENDING_INPUTS_FILE))?;
        out.raw(b"{\"format\":")?;
        out.value(INPUTS_FORMAT)?;
        out.raw(b",\"format_version\":")?;
        out.value(&INPUTS_FORMAT_VERSION)?;
        out.raw(b",\"units\":[")?;
        for (i, unit) in units.iter().enumerate() {
            if i > 0 {
                out.raw(b",")?;
            }
            out.raw(b"{\"format\":")?;
            out.value(&unit.format)?;
            out.raw(b",\"path\":")?;
            out.value(&unit.path.display().to_string())?;
            out.raw(b",\"pieces\":[")?;
            out.copy(&part(unit))?;
            out.raw(b"]}")?;
        }
        out.raw(b"]}")?;
        out.finish()
    });
    for unit in &units {
        super::state::remove_if_present(&part(unit))?;
    }
    assembled
}

/// A JSON file written piece by piece through a buffer, and synced.
struct JsonFile {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
}

impl JsonFile {
    fn create(path: &Path) -> Result<JsonFile> {
        let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
        Ok(JsonFile {
            path: path.to_path_buf(),
            out: std::io::BufWriter::new(file),
        })
    }

    fn raw(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(&self.path, e))
    }

    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        serde_json::to_writer(&mut self.out, value)
            .map_err(|e| Error::invalid(self.path.display().to_string(), e.to_string()))
    }

    /// Appends the bytes of the file `from`.
    fn copy(&mut self, from: &Path) -> Result<()> {
        let mut file = std::fs::File::open(from).map_err(|e| Error::io(from, e))?;
        std::io::copy(&mut file, &mut self.out).map_err(|e| Error::io(&self.path, e))?;
        Ok(())
    }

    fn finish(self) -> Result<()> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(&self.path, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&self.path, e))
    }
}

/// Every input path of the spec, listed into its pieces.
fn list_units(spec: &DataflowSpec) -> Result<Vec<Unit>> {
    let mut units = Vec::new();
    for input in &spec.inputs {
        for path in &input.paths {
            units.push(Unit::list(
                units.len() as u32,
                input.format,
                path,
                input.tables.clone(),
            )?);
        }
    }
    Ok(units)
}

/// Nanoseconds since the Unix epoch.
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Drops the modification times of the piece's files too close to `started_ns` (when a read
/// started) to be trusted: such a file is read again next time.
fn forget_racy_stamps(state: &mut PieceState, started_ns: u64) {
    for stamp in &mut state.files {
        stamp.modified_ns = stamp
            .modified_ns
            .filter(|m| m.saturating_add(RACY_NS) < started_ns);
    }
}

/// Whether `piece` is `old` with graphs appended: a PENMAN file whose first bytes are the ones
/// the last run read to a resumable end. Returns the hash of those bytes.
fn appended(unit: &Unit, piece: &Listed, old: &PieceState) -> Result<Option<Xxh3>> {
    let (Some(end), [now], [before]) = (&old.end, piece.files.as_slice(), old.files.as_slice())
    else {
        return Ok(None);
    };
    let length = end.cursor.byte_offset;
    let grew = matches!((now.size, before.size), (Some(n), Some(b)) if n > b && b == length);
    if !unit.appendable() || !end.cursor.resumable || now.path != before.path || !grew {
        return Ok(None);
    }
    let hasher = hash_range(&unit.path, Xxh3::new(), 0, length)?;
    Ok(hasher.filter(|h| hex128(h) == end.xxh3))
}

/// Each piece's outcome, boxed: most pieces of a rerun are not read.
type UnitOutcomes = Vec<Option<Box<Outcome>>>;

/// Reads the pieces of every unit that `steps` asks for, one thread per unit: without `keep`,
/// the new, changed and appended pieces (step 1); with it, the kept and appended pieces that
/// hold rows of the images in `keep`, filtered to them (step 2).
fn read_units(
    units: &[Unit],
    steps: &[Vec<Step>],
    keep: Option<&HashSet<String>>,
) -> Result<Vec<UnitOutcomes>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = units
            .iter()
            .zip(steps)
            .map(|(unit, unit_steps)| scope.spawn(move || read_unit(unit, unit_steps, keep)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Config("an input reader panicked".into())))
            })
            .collect()
    })
}

fn read_unit(unit: &Unit, steps: &[Step], keep: Option<&HashSet<String>>) -> Result<UnitOutcomes> {
    let mut out = Vec::with_capacity(steps.len());
    for (piece, step) in unit.pieces.iter().zip(steps) {
        let outcome = match (keep, step) {
            (None, Step::Keep(_)) => None,
            (None, Step::Read) => Some(read_piece(unit, piece, None, None)?),
            (None, Step::Append(old, head)) => {
                Some(read_piece(unit, piece, Some((old.as_ref(), head)), None)?)
            }
            (Some(keep), Step::Keep(old) | Step::Append(old, _)) => {
                if old.images.iter().any(|i| keep.contains(i)) {
                    Some(read_piece(unit, piece, None, Some(keep))?)
                } else {
                    None
                }
            }
            (Some(_), Step::Read) => None,
        };
        out.push(outcome.map(Box::new));
    }
    Ok(out)
}

/// Reads one piece: whole, from an old end (`old`, with the hash of the bytes before it), or
/// filtered to `keep`.
fn read_piece(
    unit: &Unit,
    piece: &Listed,
    old: Option<(&PieceState, &Xxh3)>,
    keep: Option<&HashSet<String>>,
) -> Result<Outcome> {
    read_piece_into(unit, piece, old, PieceSink::new(unit, piece, keep))
}

/// [`read_piece`] into `sink`.
fn read_piece_into(
    unit: &Unit,
    piece: &Listed,
    old: Option<(&PieceState, &Xxh3)>,
    mut sink: PieceSink<'_>,
) -> Result<Outcome> {
    let keep = sink.keep;
    let old_end = old.and_then(|(o, _)| o.end.as_ref());
    unit.read(piece, old_end, &mut sink)?;
    let end = match sink.end {
        Some(cursor) if keep.is_none() => {
            let (head, from) = match (old, old_end) {
                (Some((_, head)), Some(e)) => (head.clone(), e.cursor.byte_offset),
                _ => (Xxh3::new(), 0),
            };
            let hasher = hash_range(&unit.path, head, from, cursor.byte_offset)?;
            Some(PenmanEnd {
                cursor,
                ordinal: sink.numbering.ordinal,
                xxh3: hasher.map(|h| hex128(&h)).unwrap_or_default(),
            })
        }
        _ => None,
    };
    let old = old.map(|(o, _)| o);
    let mut state = match old {
        // The appended part adds to what the old end described.
        Some(o) => {
            let mut s = o.clone();
            s.files = piece.files.clone();
            s.context = piece.context.clone();
            s.counts.add(sink.numbering.counts);
            s.rejected.extend(sink.rejected);
            let mut images: BTreeSet<String> = s.images.into_iter().collect();
            images.extend(sink.images.iter().cloned());
            s.images = images.into_iter().collect();
            s
        }
        None => PieceState {
            key: piece.key.clone(),
            files: piece.files.clone(),
            context: piece.context.clone(),
            images: sink.images.iter().cloned().collect(),
            counts: sink.numbering.counts,
            rejected: sink.rejected,
            end: None,
        },
    };
    state.end = end;
    Ok(Outcome {
        state,
        rows: sink.rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn graph(image: u32, animal: &str) -> String {
        format!(
            "# ::id {image}.0\n# ::snt a {animal} runs\n(r / run-02\n   :ARG0 (a / {animal}))\n"
        )
    }

    fn spec(dir: &Path) -> DataflowSpec {
        let path = dir.join("spec.toml");
        let text = "name = \"amr\"\n[[inputs]]\nformat = \"penman\"\npaths = [\"graphs.amr\"]\n";
        std::fs::write(&path, text).unwrap();
        DataflowSpec::from_file(&path).unwrap()
    }

    fn images(read: &InputRead) -> BTreeSet<String> {
        read.collected
            .rows
            .iter()
            .map(|r| r.row.image_id().to_string())
            .collect()
    }

    fn append(path: &Path, text: &str) {
        let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        file.write_all(text.as_bytes()).unwrap();
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_grown_penman_file_is_read_from_its_old_end_and_a_rewritten_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let amr = dir.path().join("graphs.amr");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(&amr, format!("{}\n{}", graph(1, "dog"), graph(2, "cat"))).unwrap();
        let spec = spec(dir.path());
        let first = read_inputs(&spec, None).unwrap();
        assert_eq!(images(&first), set(&["1", "2"]));
        assert!(first.touched.is_none());
        first.state.write(&state).unwrap();
        // Graphs appended: only they are read; ordinals, counts and the end continue.
        append(&amr, &format!("\n{}\n(x / broken", graph(3, "cow")));
        let grown = read_inputs(&spec, Some(&state)).unwrap();
        assert!(
            grown.summary.contains("(1 appended to)"),
            "{}",
            grown.summary
        );
        assert_eq!(images(&grown), set(&["3"]));
        assert_eq!(grown.touched, Some(set(&["3"])));
        let whole = read_inputs(&spec, None).unwrap();
        assert_eq!(grown.collected.counts, whole.collected.counts);
        assert_eq!(grown.collected.rejected, whole.collected.rejected);
        assert_eq!(grown.collected.rejected.len(), 1);
        let last = |r: &InputRead| r.collected.rows.last().map(|k| (k.ordinal, k.row.clone()));
        assert_eq!(last(&grown), last(&whole));
        let end = |r: &InputRead| r.state.units[0].pieces[0].end.clone();
        assert_eq!(end(&grown), end(&whole));
        // The broken graph at the end leaves a block open: what follows must be read whole.
        assert!(end(&grown).is_some_and(|e| !e.cursor.resumable));
        grown.state.write(&state).unwrap();
        append(&amr, ")\n");
        let closed = read_inputs(&spec, Some(&state)).unwrap();
        assert!(
            closed.summary.contains("(0 appended to)"),
            "{}",
            closed.summary
        );
        closed.state.write(&state).unwrap();
        // Rewritten in place at the same length: the whole file is read again, and every image
        // it held is touched.
        let text = std::fs::read_to_string(&amr).unwrap().replace("dog", "pig");
        std::fs::write(&amr, text).unwrap();
        let rewritten = read_inputs(&spec, Some(&state)).unwrap();
        assert!(
            rewritten.summary.contains("(0 appended to)"),
            "{}",
            rewritten.summary
        );
        let all = images(&rewritten);
        assert!(all.is_superset(&set(&["1", "2", "3"])), "{all:?}");
        assert_eq!(rewritten.touched, Some(all));
    }

    #[test]
    fn an_unreadable_inputs_state_reads_everything() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("graphs.amr"), graph(1, "dog")).unwrap();
        std::fs::write(dir.path().join(INPUTS_FILE), "{ not json").unwrap();
        let read = read_inputs(&spec(dir.path()), Some(dir.path())).unwrap();
        assert!(read.touched.is_none());
        assert_eq!(images(&read), set(&["1"]));
    }
}
