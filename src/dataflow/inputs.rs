//! Reading a run's inputs piece by piece, so that a rerun with `--state` reads only what changed.
//!
//! Every input path is cut into **pieces** that can be read alone: one image (its sentence and
//! annotation files) of a Flickr30k Entities directory, or one whole file (or directory) of the
//! other formats. The state keeps, per piece, the size and modification time of its files, the
//! images it holds rows of, its record counts and its rejections (`STATE/inputs.json`). A rerun
//! lists the pieces again and reads:
//!
//! 1. every new or changed piece, whole, and for a PENMAN file that only grew, the graphs after
//!    the old end (once the old bytes are confirmed unchanged by their hash). A piece whose
//!    stamps changed but whose files hold the bytes they held when it was read (a copy or a sync
//!    tool that does not keep modification times) is not read: the state keeps the XXH3-128 of
//!    the bytes a piece was read from, and only the piece's stamps are recorded anew;
//! 2. then, filtered to the images step 1 touched (its images, and the images of changed and
//!    removed pieces), the unchanged pieces that hold other rows of those images.
//!
//! The rows of every other image are not read: their outputs are carried forward. Counts and
//! rejections of unread pieces come from the state, so the ledger and the manifest's counts are
//! those of a full read. The record is JSON lines, one piece a line, and a rerun streams it:
//! it holds a few dozen bytes a piece besides the listing, and copies the lines of unchanged
//! pieces into the new record as they are. Row positions: the rows of the `i`-th image of a Flickr30k Entities
//! directory get ordinals `i << 32 | k`, which keeps the order of a full read (where they are
//! numbered consecutively) without numbering the images not read.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use serde::{Deserialize, Serialize};

use super::runtime::{CollectedRun, KeyedRow, RecordNumbering};
use super::spec::DataflowSpec;
use crate::amr::penman::BlockCursor;
use crate::error::{Error, Result};
use crate::export::StageMetrics;
use crate::ingest::flickr30k::{ImageBytes, ImageSlot, ListedFile, ListedImage, Listing};
use crate::ingest::{read_input, FileMeta, Format, IngestCounts, RecordSink, Row};
use crate::schema::{RejectedRow, TableKind};

/// A file modified less than this long before a read started may change again within the same
/// timestamp tick without its stamp changing; its stamp is not kept (it is read again next time).
const RACY_NS: u64 = 2_000_000_000;

/// The file of the state directory that describes the inputs' pieces.
pub const INPUTS_FILE: &str = "inputs.json";
const INPUTS_FORMAT: &str = "capflow-inputs";
/// 2: JSON lines, streamed ([`Record`]); 1 was one JSON document.
const INPUTS_FORMAT_VERSION: u32 = 2;

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
    /// XXH3-128 (hex) of the bytes of the piece's files when it was read ([`content_hash`]);
    /// absent when they may have changed during the read (a stamp too recent to trust, or one
    /// that changed while the piece was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// One input path of the spec and its pieces.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitState {
    pub format: Format,
    pub path: String,
    pub pieces: Vec<Box<PieceState>>,
}

/// `STATE/inputs.json` read whole, as tests look at it; a run never holds it so, it streams the
/// file ([`Record`]).
#[derive(Clone, Debug, PartialEq)]
pub struct InputsState {
    pub units: Vec<UnitState>,
}

/// The record's first line.
#[derive(Serialize, Deserialize)]
struct RecordHeader {
    format: String,
    format_version: u32,
}

/// The line before an input path's pieces.
#[derive(Serialize, Deserialize)]
struct UnitLine {
    unit: UnitHead,
}

impl RecordHeader {
    fn current() -> RecordHeader {
        RecordHeader {
            format: INPUTS_FORMAT.to_string(),
            format_version: INPUTS_FORMAT_VERSION,
        }
    }
}

impl UnitLine {
    fn new(format: Format, path: &Path, pieces: u64) -> UnitLine {
        UnitLine {
            unit: UnitHead {
                format,
                path: path.display().to_string(),
                pieces,
            },
        }
    }

    fn of(unit: &Unit) -> UnitLine {
        UnitLine::new(unit.format, &unit.path, unit.len() as u64)
    }
}

#[derive(Serialize, Deserialize)]
struct UnitHead {
    format: Format,
    path: String,
    /// How many piece lines follow.
    pieces: u64,
}

impl InputsState {
    /// Reads a record whole; `None` when missing or written by another layout.
    #[cfg(test)]
    fn read_file(path: &Path) -> Result<Option<InputsState>> {
        let Some(mut record) = Record::open(path)? else {
            return Ok(None);
        };
        let mut units = Vec::new();
        while let Some(head) = record.next_unit()? {
            let mut pieces = Vec::new();
            for _ in 0..head.pieces {
                let (_, line) = record.next_piece()?;
                pieces.push(Box::new(record.parse(&line, "an input piece")?));
            }
            units.push(UnitState {
                format: head.format,
                path: head.path,
                pieces,
            });
        }
        Ok(Some(InputsState { units }))
    }

    /// Whether the state holds a record of the input pieces in the current layout (a rerun
    /// with the models kept then reads only new and changed pieces).
    pub fn kept(state_dir: &Path) -> bool {
        matches!(Record::open(&state_dir.join(INPUTS_FILE)), Ok(Some(_)))
    }

    /// Removes `STATE/inputs.json` (a run that does not read piece by piece leaves none), and
    /// a pending record.
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

/// Where a run's record of its input pieces waits for the commit.
const PENDING_INPUTS_FILE: &str = "inputs.pending.json";

/// A record of input pieces ([`INPUTS_FILE`]'s layout: JSON lines, a header, then per input
/// path a [`UnitLine`] and one [`PieceState`] a line), read line by line.
struct Record {
    path: PathBuf,
    reader: std::io::BufReader<std::fs::File>,
    /// The byte offset and number of the next line.
    offset: u64,
    line: u64,
}

impl Record {
    /// Opens the record at `path` and reads its header; `None` when there is none, or it was
    /// written in another layout.
    fn open(path: &Path) -> Result<Option<Record>> {
        let mut record = match Record::at(path) {
            Ok(record) => record,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let Some((_, first)) = record.next_line()? else {
            return Ok(None);
        };
        let header: RecordHeader = record.parse(&first, "a capflow inputs record")?;
        let current =
            header.format == INPUTS_FORMAT && header.format_version == INPUTS_FORMAT_VERSION;
        Ok(current.then_some(record))
    }

    /// The record at `path`, at its start, for [`line_at`](Self::line_at) (a record that
    /// [`open`](Self::open) read).
    fn at(path: &Path) -> Result<Record> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(Record {
            path: path.to_path_buf(),
            reader: std::io::BufReader::with_capacity(1 << 16, file),
            offset: 0,
            line: 0,
        })
    }

    /// The next line and its byte offset, without its line feed.
    fn next_line(&mut self) -> Result<Option<(u64, String)>> {
        use std::io::BufRead;
        let at = self.offset;
        let mut line = String::new();
        let n = (self.reader)
            .read_line(&mut line)
            .map_err(|e| Error::io(&self.path, e))?;
        if n == 0 {
            return Ok(None);
        }
        self.offset += n as u64;
        self.line += 1;
        if line.ends_with('\n') {
            line.pop();
        }
        Ok(Some((at, line)))
    }

    /// The next input path's head; `None` at the end.
    fn next_unit(&mut self) -> Result<Option<UnitHead>> {
        match self.next_line()? {
            Some((_, line)) => Ok(Some(self.parse::<UnitLine>(&line, "an input's line")?.unit)),
            None => Ok(None),
        }
    }

    /// The next piece's line and its offset.
    fn next_piece(&mut self) -> Result<(u64, String)> {
        self.next_line()?
            .ok_or_else(|| self.invalid("ends before the pieces its input line counts"))
    }

    /// The line at byte offset `offset` (of a piece [`next_piece`](Self::next_piece) read).
    fn line_at(&mut self, offset: u64) -> Result<String> {
        if offset != self.offset {
            // Relative, so that a line still in the buffer is not read again.
            (self.reader)
                .seek_relative(offset as i64 - self.offset as i64)
                .map_err(|e| Error::io(&self.path, e))?;
            self.offset = offset;
        }
        Ok(self.next_piece()?.1)
    }

    /// The piece whose line is at byte offset `offset`.
    fn piece_at(&mut self, offset: u64) -> Result<PieceState> {
        let line = self.line_at(offset)?;
        self.parse(&line, "an input piece")
    }

    fn parse<T: serde::de::DeserializeOwned>(&self, line: &str, what: &str) -> Result<T> {
        serde_json::from_str(line).map_err(|e| self.invalid(&format!("not {what}: {e}")))
    }

    fn invalid(&self, reason: &str) -> Error {
        Error::record(
            self.path.display().to_string(),
            format!("line {}", self.line),
            reason.to_string(),
        )
    }
}

/// What [`read_inputs`] read.
#[derive(Debug)]
pub struct InputRead {
    /// The rows read (of the touched images only, after a partial read), every piece's counts
    /// and rejections, and the read stage's metrics.
    pub collected: CollectedRun,
    /// The images whose rows were read; `None` when every piece was read.
    pub touched: Option<BTreeSet<String>>,
    /// One line on what was read.
    pub summary: String,
}

/// A piece of an input as listed now.
#[derive(Clone, Debug)]
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
    /// The one piece of an input other than a Flickr30k Entities listing.
    whole: Option<Listed>,
    flickr: Option<Listing>,
    /// Where the images of a Flickr30k Entities listing are ([`Listing::places`]), by piece:
    /// a piece is made when it is visited ([`Unit::piece`]).
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
        let whole = match &flickr {
            Some(_) => None,
            None => {
                let mut paths = Vec::new();
                files_under(path, &mut paths)?;
                paths.sort();
                let files = paths
                    .iter()
                    .map(|p| FileStamp::of(path, p))
                    .collect::<Result<Vec<_>>>()?;
                Some(Listed {
                    key: String::new(),
                    files,
                    context: String::new(),
                    image: None,
                })
            }
        };
        Ok(Unit {
            index,
            format,
            path: path.to_path_buf(),
            tables,
            whole,
            flickr,
            images,
        })
    }

    /// How many pieces the unit has.
    fn len(&self) -> usize {
        match &self.whole {
            Some(_) => 1,
            None => self.images.len(),
        }
    }

    /// Piece `i` (of [`len`](Self::len)).
    fn piece(&self, i: usize) -> Cow<'_, Listed> {
        match (&self.whole, &self.flickr) {
            (Some(whole), _) => Cow::Borrowed(whole),
            (None, listing) => {
                let image = listing
                    .as_ref()
                    .map(|l| l.image_at(self.images[i]))
                    .unwrap_or_else(|| ListedImage {
                        id: String::new(),
                        sentence: None,
                        annotation: None,
                    });
                let context = listing.as_ref().map_or("", |l| l.split_of(&image.id));
                Cow::Owned(Listed {
                    files: (image.files())
                        .map(|f| FileStamp::new(&self.path, &f.path, f.meta))
                        .collect(),
                    context: context.to_string(),
                    key: image.id,
                    image: Some(i),
                })
            }
        }
    }

    /// Where each piece's key is: by the XXH3 of the key (a key that shares another's hash is
    /// not found, and its piece is read as new).
    fn key_index(&self) -> HashMap<u64, u32> {
        match (&self.whole, &self.flickr) {
            (Some(_), _) => HashMap::from([(xxh3_64(b""), 0)]),
            (None, Some(listing)) => (self.images.iter().enumerate())
                .map(|(i, place)| (xxh3_64(listing.image_at(*place).id.as_bytes()), i as u32))
                .collect(),
            (None, None) => HashMap::new(),
        }
    }

    /// The first row ordinal of a piece.
    fn base(&self, piece: &Listed) -> u64 {
        piece.image.map_or(0, |i| self.base_of(i))
    }

    /// The first row ordinal of piece `i` ([`base`](Self::base)).
    fn base_of(&self, i: usize) -> u64 {
        match &self.whole {
            Some(_) => 0,
            None => (i as u64) << 32,
        }
    }

    /// Whether the piece is a single PENMAN file (whose appended graphs can be read alone).
    fn appendable(&self) -> bool {
        self.format == Format::Penman && self.path.is_file()
    }

    /// Reads piece `piece` (from `from` for the rest of a PENMAN file) into `sink`.
    fn read(&self, piece: &Listed, from: Option<&PenmanEnd>, sink: &mut PieceSink) -> Result<()> {
        let read = match (&self.flickr, piece.image) {
            (Some(listing), Some(i)) => {
                let image = listing.image_at(self.images[i]);
                listing.read_image(&image, sink).map(|read| {
                    let sized = piece.files.iter().map(|f| f.size.is_some());
                    sink.tally.hash_read(&read, sized);
                })
            }
            _ if self.appendable() => {
                sink.numbering.ordinal = from.map_or(0, |e| e.ordinal);
                let cursor = from.map(|e| e.cursor).unwrap_or_default();
                let read = match sink.keep {
                    Some(keep) => {
                        crate::ingest::penman::read_images_from(&self.path, cursor, keep, sink)
                    }
                    None => crate::ingest::penman::read_from(&self.path, cursor, sink),
                };
                read.map(|end| sink.end = Some(end))
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
    rows: Vec<KeyedRow>,
    /// The images, counts and rejections of the piece.
    tally: PieceTally,
    end: Option<BlockCursor>,
}

impl<'a> PieceSink<'a> {
    fn new(unit: &'a Unit, piece: &Listed, keep: Option<&'a HashSet<String>>) -> PieceSink<'a> {
        PieceSink {
            unit: unit.index,
            base: unit.base(piece),
            numbering: RecordNumbering::new(unit.tables.as_deref()),
            keep,
            rows: Vec::new(),
            tally: PieceTally::default(),
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
        self.tally.row(row.image_id());
        self.rows.push(KeyedRow {
            unit: self.unit,
            ordinal: self.base + ordinal,
            row,
        });
        Ok(())
    }

    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        let ordinal = self.numbering.reject();
        self.tally.rejected(ordinal, rejected);
        Ok(())
    }

    fn accepted(&mut self) -> Result<()> {
        self.numbering.accepted();
        self.tally.accepted();
        Ok(())
    }

    fn passed_over(&mut self, table: TableKind) -> Result<()> {
        self.numbering.pass(table);
        Ok(())
    }
}

/// `hasher` fed bytes `from..to` of `path`; `None` when the file is shorter.
fn hash_range(path: &Path, mut hasher: Xxh3, from: u64, to: u64) -> Result<Option<Xxh3>> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    file.seek(SeekFrom::Start(from))
        .map_err(|e| Error::io(path, e))?;
    let want = to.saturating_sub(from);
    let read = feed(&mut file, &mut hasher, want).map_err(|e| Error::io(path, e))?;
    Ok((read == want).then_some(hasher))
}

/// Feeds `hasher` the bytes of `reader`, at most `limit` of them; returns how many it read.
fn feed(reader: &mut impl Read, hasher: &mut Xxh3, limit: u64) -> std::io::Result<u64> {
    let mut buffer = [0u8; 1 << 16];
    let mut read = 0u64;
    while read < limit {
        let want = (limit - read).min(buffer.len() as u64) as usize;
        let got = reader.read(&mut buffer[..want])?;
        if got == 0 {
            break;
        }
        hasher.update(&buffer[..got]);
        read += got as u64;
    }
    Ok(read)
}

fn hex128(hasher: &Xxh3) -> String {
    format!("{:032x}", hasher.digest128())
}

/// Where the file of a piece's stamp is: its path is relative to the unit's path (empty for the
/// unit's path itself), or whole when the file is not under it ([`relative`]).
fn stamped_path(unit: &Path, stamp: &FileStamp) -> PathBuf {
    match stamp.path.as_str() {
        "" => unit.to_path_buf(),
        path => unit.join(path),
    }
}

/// XXH3-128 of the bytes of a piece's files, in order (each followed by its length; an absent
/// file counts as absent), as hex; `None` when a file the stamps name cannot be read as a
/// regular file now (it is then read as changed, and its reader says what is wrong).
fn content_hash(unit: &Path, files: &[FileStamp]) -> Option<String> {
    let mut hasher = Xxh3::new();
    for stamp in files {
        if stamp.size.is_none() {
            hasher.update(&[0]);
            continue;
        }
        let mut file = crate::ingest::open_input(&stamped_path(unit, stamp)).ok()?;
        let length = feed(&mut file, &mut hasher, u64::MAX).ok()?;
        end_file(&mut hasher, length);
    }
    Some(hex128(&hasher))
}

/// What [`content_hash`] feeds its hasher after a file's bytes.
fn end_file(hasher: &mut Xxh3, length: u64) {
    hasher.update(&[1]);
    hasher.update(&length.to_le_bytes());
}

/// The [`content_hash`] of the bytes a reader read of an image's files ([`ImageBytes`]), so
/// that the files need not be read again: `sized` says of each file whether the piece's stamp
/// has a size (one without counts as absent). `None` when a file with a size was not read whole.
fn read_hash(read: &ImageBytes, sized: impl Iterator<Item = bool>) -> Option<u128> {
    let mut hasher = Xxh3::new();
    for (bytes, sized) in read.iter().zip(sized) {
        if !sized {
            hasher.update(&[0]);
            continue;
        }
        let bytes = bytes.as_deref()?;
        hasher.update(bytes);
        end_file(&mut hasher, bytes.len() as u64);
    }
    Some(hasher.digest128())
}

/// The [`content_hash`] of a piece just read, for its state: only when every file's stamp is old
/// enough to trust ([`RACY_NS`] before `started_ns`) and is still the one listed before the read,
/// so that the bytes hashed are the bytes that were read. `read` is the hash of the bytes its
/// reader read ([`read_hash`]), when it took one; else the files are read again.
fn read_content(
    unit: &Path,
    files: &[FileStamp],
    started_ns: u64,
    read: Option<u128>,
) -> Option<String> {
    let trusted = |stamp: &FileStamp| {
        stamp.size.is_none()
            || (stamp.modified_ns).is_some_and(|m| m.saturating_add(RACY_NS) < started_ns)
    };
    if !files.iter().all(trusted) {
        return None;
    }
    let content = match read {
        Some(hash) => format!("{hash:032x}"),
        None => content_hash(unit, files)?,
    };
    let unchanged = |stamp: &FileStamp| {
        FileStamp::of(unit, &stamped_path(unit, stamp)).is_ok_and(|now| now == *stamp)
    };
    files.iter().all(unchanged).then_some(content)
}

/// Whether the listed piece holds the bytes the old record's piece was read from, under new
/// stamps: the same files (by path and size), the same context and the same [`content_hash`].
fn same_bytes(unit: &Unit, listed: &Listed, old: &PieceState) -> bool {
    let Some(content) = &old.content else {
        return false;
    };
    let same_files = old.files.len() == listed.files.len()
        && (old.files.iter().zip(&listed.files)).all(|(o, n)| o.path == n.path && o.size == n.size);
    same_files
        && old.context == listed.context
        && content_hash(&unit.path, &listed.files).as_ref() == Some(content)
}

/// What happens to one listed piece in a rerun.
enum Step {
    /// New, or changed: read whole.
    Read,
    /// Unchanged: its record (the line at this offset of the old record) is carried; read
    /// again, filtered, only for touched images.
    Keep(u64),
    /// Its files' stamps changed, not their bytes ([`same_bytes`]): kept as [`Step::Keep`], its
    /// record carried with the stamps listed now.
    Restamp(u64),
    /// A PENMAN file that grew: read from the old end (the hash of the bytes before it).
    Append(Box<PieceState>, Box<Xxh3>),
}

/// One piece's outcome.
struct Outcome {
    state: PieceState,
    rows: Vec<KeyedRow>,
}

/// A piece of the old record, as far as planning needs it.
struct OldPiece {
    key: u64,
    /// [`fingerprint`] of its files and context.
    fingerprint: u128,
    offset: u64,
    /// The whole record of a piece with an end (a PENMAN file that may have grown).
    ended: Option<Box<PieceState>>,
}

/// An input path of the old record.
struct OldUnit {
    format: Format,
    path: String,
    pieces: Vec<OldPiece>,
}

/// What a piece's record depends on besides its rows: its files' stamps and its context, as one
/// XXH3-128.
fn fingerprint(files: &[FileStamp], context: &str) -> u128 {
    let mut hasher = Xxh3::new();
    for file in files {
        hasher.update(file.path.as_bytes());
        for value in [file.size, file.modified_ns] {
            match value {
                Some(v) => {
                    hasher.update(&[1]);
                    hasher.update(&v.to_le_bytes());
                }
                None => hasher.update(&[0]),
            }
        }
        hasher.update(&[0xff]);
    }
    hasher.update(context.as_bytes());
    hasher.digest128()
}

/// Reads the old record's pieces compactly (key hash, fingerprint, line offset), so that the
/// record itself is never held.
fn read_old_units(record: &mut Record) -> Result<Vec<OldUnit>> {
    let mut units = Vec::new();
    while let Some(head) = record.next_unit()? {
        let mut pieces = Vec::with_capacity(head.pieces.min(1 << 24) as usize);
        for _ in 0..head.pieces {
            let (offset, line) = record.next_piece()?;
            let piece: PieceState = record.parse(&line, "an input piece")?;
            pieces.push(OldPiece {
                key: xxh3_64(piece.key.as_bytes()),
                fingerprint: fingerprint(&piece.files, &piece.context),
                offset,
                ended: piece.end.is_some().then(|| Box::new(piece)),
            });
        }
        units.push(OldUnit {
            format: head.format,
            path: head.path,
            pieces,
        });
    }
    Ok(units)
}

/// Every piece read whole: the steps without an old record.
fn read_all(units: &[Unit]) -> Vec<Vec<Step>> {
    (units.iter())
        .map(|u| (0..u.len()).map(|_| Step::Read).collect())
        .collect()
}

/// Each listed piece's step against the old record, and the line offsets of the old pieces
/// that are changed or gone (whose images are touched).
fn plan_steps(
    units: &[Unit],
    old_units: Vec<OldUnit>,
    record: &mut Record,
) -> Result<(Vec<Vec<Step>>, Vec<u64>)> {
    let mut gone = Vec::new();
    let mut steps = Vec::with_capacity(units.len());
    let mut old_units = old_units.into_iter();
    for unit in units {
        let mut unit_steps: Vec<Step> = (0..unit.len()).map(|_| Step::Read).collect();
        let Some(old) = old_units.next() else {
            steps.push(unit_steps);
            continue;
        };
        if old.format != unit.format || old.path != unit.path.display().to_string() {
            // Not the input the state describes: what that one held is touched.
            gone.extend(old.pieces.iter().map(|p| p.offset));
            steps.push(unit_steps);
            continue;
        }
        let index = unit.key_index();
        let mut matched = vec![false; unit.len()];
        for piece in old.pieces {
            let Some(i) = index.get(&piece.key).map(|&i| i as usize) else {
                gone.push(piece.offset);
                continue;
            };
            if std::mem::replace(&mut matched[i], true) {
                gone.push(piece.offset);
                continue;
            }
            let listed = unit.piece(i);
            unit_steps[i] = if fingerprint(&listed.files, &listed.context) == piece.fingerprint {
                Step::Keep(piece.offset)
            } else if same_bytes(unit, &listed, &record.piece_at(piece.offset)?) {
                Step::Restamp(piece.offset)
            } else {
                let grown = match piece.ended {
                    Some(old) => appended(unit, &listed, &old)?.map(|h| (old, h)),
                    None => None,
                };
                match grown {
                    Some((old, hasher)) => Step::Append(old, Box::new(hasher)),
                    None => {
                        gone.push(piece.offset);
                        Step::Read
                    }
                }
            };
        }
        steps.push(unit_steps);
    }
    // Inputs the spec no longer has.
    for old in old_units {
        gone.extend(old.pieces.iter().map(|p| p.offset));
    }
    gone.sort_unstable();
    Ok((steps, gone))
}

/// The inputs as listed now, and what a run reads of them piece by piece against the state's
/// record of the last run's pieces: the plan that [`read_planned`] carries out. Making it lists
/// every input (the files' sizes and modification times) and streams the old record, holding a
/// few dozen bytes a piece; no input file is read.
pub struct InputPlan {
    started: Instant,
    /// When the listing started: a file modified after it may change again unseen.
    started_ns: u64,
    units: Vec<Unit>,
    /// The old record, when the plan reuses it; `None` when every piece is read.
    record: Option<Record>,
    /// Per unit, each listed piece's step.
    steps: Vec<Vec<Step>>,
    /// The line offsets of the old record's changed and removed pieces (their images are
    /// touched).
    gone: Vec<u64>,
}

impl InputPlan {
    /// Lists `spec`'s inputs and, with `reuse`, plans against the state's [`INPUTS_FILE`]: only
    /// new and changed pieces are read. Without `reuse`, or when the state holds no usable
    /// record (which is said, and costs a full read, not the run), every piece is read.
    pub fn make(spec: &DataflowSpec, state_dir: &Path, reuse: bool) -> Result<InputPlan> {
        let started = Instant::now();
        let started_ns = now_ns();
        let record_path = state_dir.join(INPUTS_FILE);
        // The old record is read while the inputs are listed.
        let (units, old) = std::thread::scope(|scope| {
            let loaded = reuse.then(|| {
                scope.spawn(|| {
                    let Some(mut record) = Record::open(&record_path)? else {
                        return Ok(None);
                    };
                    let old = read_old_units(&mut record)?;
                    Ok::<_, Error>(Some((record, old)))
                })
            });
            let units = list_units(spec)?;
            let loaded = loaded.map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(Error::Usage("loading it panicked".into())))
            });
            Ok::<_, Error>((units, loaded))
        })?;
        let planned = match old {
            Some(Ok(Some((mut record, old)))) => match plan_steps(&units, old, &mut record) {
                Ok((steps, gone)) => Some((record, steps, gone)),
                Err(e) => {
                    unusable(&e);
                    None
                }
            },
            Some(Err(e)) => {
                unusable(&e);
                None
            }
            _ => None,
        };
        let (record, steps, gone) = match planned {
            Some((record, steps, gone)) => (Some(record), steps, gone),
            None => (None, read_all(&units), Vec::new()),
        };
        Ok(InputPlan {
            started,
            started_ns,
            units,
            record,
            steps,
            gone,
        })
    }

    /// Whether every piece is read (there is no old record to keep pieces from).
    pub fn reads_everything(&self) -> bool {
        self.record.is_none()
    }

    /// How many pieces are listed, and how many of them are read (new, changed or grown).
    pub fn pieces(&self) -> (usize, usize) {
        let listed = self.steps.iter().map(Vec::len).sum();
        let read = (self.steps.iter().flatten())
            .filter(|step| !matches!(step, Step::Keep(_) | Step::Restamp(_)))
            .count();
        (listed, read)
    }

    /// About how many bytes a run that collects the rows the plan reads holds, with the rows of
    /// a share `also` of the images besides: the share of the images it touches, taken as the
    /// largest share of an input's bytes that it reads (every image of a changed whole file is
    /// touched, and a touched image's rows are read from every input) or `also`, of every
    /// input's bytes, [`HELD_PER_INPUT_BYTE`] times over.
    pub fn collected_bytes(&self, also: f64) -> u64 {
        let size = |files: &[FileStamp]| -> u64 { files.iter().map(|f| f.size.unwrap_or(0)).sum() };
        let (mut all, mut share) = (0u64, also);
        for (unit, steps) in self.units.iter().zip(&self.steps) {
            let (mut listed, mut read) = (0u64, 0u64);
            for (i, step) in steps.iter().enumerate() {
                let bytes = match (&unit.whole, &unit.flickr) {
                    (Some(whole), _) => size(&whole.files),
                    (None, Some(listing)) => listing.bytes_at(unit.images[i]),
                    (None, None) => 0,
                };
                listed += bytes;
                read += match step {
                    Step::Keep(_) | Step::Restamp(_) => 0,
                    Step::Read => bytes,
                    Step::Append(old, _) => bytes.saturating_sub(size(&old.files)),
                };
            }
            all += listed;
            if listed > 0 {
                share = share.max(read as f64 / listed as f64);
            }
        }
        (HELD_PER_INPUT_BYTE as f64 * share * all as f64) as u64
    }
}

/// Bytes a collected run holds per byte of input it read: the typed rows, their keys and the
/// per-image state built from them. Measured on `capflow synth` data with the SSA recipe (a
/// rerun that read every piece of 60 MB of inputs held about 410 MB above the process's base),
/// rounded up.
pub const HELD_PER_INPUT_BYTE: u64 = 8;

/// Reads the spec's inputs piece by piece, and writes the record of every piece to
/// `STATE/inputs.pending.json`, where it waits for the run's commit
/// ([`InputsState::commit_pending`]). With `reuse`, the state's [`INPUTS_FILE`] describes the
/// inputs the last run read, and only what changed is read (see the module documentation);
/// otherwise, or when the state holds no usable record, all.
///
/// The old record is streamed: the run holds, per piece, a few dozen bytes (its key's hash,
/// its stamps' fingerprint, where its line is) and the listing, never the record, whose unchanged
/// pieces' lines are copied into the new one as they are.
pub fn read_inputs(spec: &DataflowSpec, state_dir: &Path, reuse: bool) -> Result<InputRead> {
    read_planned(
        InputPlan::make(spec, state_dir, reuse)?,
        state_dir,
        &BTreeSet::new(),
    )
}

/// Carries out `plan` as [`read_inputs`] does, reading the rows of the images in `also` too
/// (from unchanged pieces, as those of touched images are).
pub fn read_planned(
    plan: InputPlan,
    state_dir: &Path,
    also: &BTreeSet<String>,
) -> Result<InputRead> {
    let InputPlan {
        started,
        started_ns,
        units,
        mut record,
        steps,
        gone,
    } = plan;
    let everything = record.is_none();
    let listed: usize = units.iter().map(Unit::len).sum();
    // Step 1: the images of changed and removed pieces, then the new and changed pieces.
    let mut touched: HashSet<String> = also.iter().cloned().collect();
    if let Some(record) = record.as_mut() {
        for offset in gone {
            let line = record.line_at(offset)?;
            let piece: PieceState = record.parse(&line, "an input piece")?;
            touched.extend(piece.images);
        }
    }
    let mut first = read_units(&units, started_ns, |unit, i| match &steps[unit][i] {
        Step::Read => Some(PieceRead::Whole),
        Step::Append(old, head) => Some(PieceRead::From(old, head)),
        Step::Keep(_) | Step::Restamp(_) => None,
    })?;
    for outcomes in &first {
        for (_, outcome) in outcomes {
            touched.extend(outcome.rows.iter().map(|r| r.row.image_id().to_string()));
        }
    }
    // The new record, in listing order: the old lines of unchanged pieces, the new records of
    // the pieces read; and the unchanged pieces (and grown files) that hold rows of touched
    // images, to be read again for them.
    let mut collected = CollectedRun::default();
    let mut again: Vec<HashSet<usize>> = vec![HashSet::new(); units.len()];
    let (mut read, mut appended_pieces, mut restamped) = (0usize, 0usize, 0usize);
    let mut out = JsonFile::create(&state_dir.join(PENDING_INPUTS_FILE))?;
    out.line(&RecordHeader::current())?;
    for ((unit, unit_steps), outcomes) in units.iter().zip(&steps).zip(&mut first) {
        out.line(&UnitLine::of(unit))?;
        let mut outcomes = std::mem::take(outcomes).into_iter().peekable();
        for (i, step) in unit_steps.iter().enumerate() {
            let base = unit.base_of(i);
            let outcome = outcomes.next_if(|(at, _)| *at == i).map(|(_, o)| o);
            let touches = |images: &[String]| images.iter().any(|id| touched.contains(id));
            let state = match (step, outcome) {
                (Step::Keep(offset) | Step::Restamp(offset), _) => {
                    let record = record.as_mut().ok_or_else(|| planned_unread(unit))?;
                    let line = record.line_at(*offset)?;
                    let mut state: PieceState = record.parse(&line, "an input piece")?;
                    if let Step::Restamp(_) = step {
                        restamped += 1;
                        restamp(&mut state, &unit.piece(i), started_ns);
                        out.line(&state)?;
                    } else {
                        out.raw(line.as_bytes())?;
                        out.raw(b"\n")?;
                    }
                    if touches(&state.images) {
                        again[unit.index as usize].insert(i);
                    }
                    state
                }
                (Step::Read | Step::Append(..), Some(outcome)) => {
                    read += 1;
                    let Outcome { mut state, rows } = outcome;
                    // When a grown file is read again from its start for the touched images,
                    // those rows replace the appended part's.
                    let grown = match step {
                        Step::Append(old, _) => {
                            appended_pieces += 1;
                            touches(&old.images)
                        }
                        _ => false,
                    };
                    if grown {
                        again[unit.index as usize].insert(i);
                    } else {
                        collected.rows.extend(rows.into_iter().map(Arc::new));
                    }
                    forget_racy_stamps(&mut state, started_ns);
                    out.line(&state)?;
                    state
                }
                (_, None) => return Err(planned_unread(unit)),
            };
            collected.counts.add(state.counts);
            for (ordinal, rejected) in state.rejected {
                collected
                    .rejected
                    .push((unit.index, base + ordinal, rejected));
            }
        }
    }
    out.finish()?;
    drop(first);
    // Step 2: the unchanged pieces that hold other rows of the touched images.
    if !everything {
        let keep = &touched;
        let second = read_units(&units, started_ns, |unit, i| {
            again[unit]
                .contains(&i)
                .then_some(PieceRead::Filtered(keep))
        })?;
        for outcomes in second {
            for (_, outcome) in outcomes {
                collected
                    .rows
                    .extend(outcome.rows.into_iter().map(Arc::new));
            }
        }
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
        let restamped = match restamped {
            0 => String::new(),
            n => format!("; {n} with new timestamps and the same bytes"),
        };
        format!(
            "read {read} new or changed of {listed} input pieces ({appended_pieces} appended \
             to{restamped}), {} rows of {images} image{}",
            collected.rows.len(),
            if images == 1 { "" } else { "s" }
        )
    };
    let touched: Option<BTreeSet<String>> = (!everything).then(|| touched.into_iter().collect());
    Ok(InputRead {
        collected,
        touched,
        summary,
    })
}

fn unusable(e: &Error) {
    crate::cli::out::diagnostic!(
        "capflow run: reading every input: the inputs' state is unusable: {e}"
    );
}

fn planned_unread(unit: &Unit) -> Error {
    Error::Config(format!(
        "reading {}: a piece was planned and not read",
        unit.path.display()
    ))
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

    /// `value` as one line of JSON.
    fn line<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        serde_json::to_writer(&mut self.out, value)
            .map_err(|e| Error::invalid(self.path.display().to_string(), e.to_string()))?;
        self.raw(b"\n")
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

/// An unchanged piece's record `state` under the stamps its files have now (`piece`, as listed).
fn restamp(state: &mut PieceState, piece: &Listed, started_ns: u64) {
    state.files = piece.files.clone();
    forget_racy_stamps(state, started_ns);
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

/// How a piece is read.
enum PieceRead<'a> {
    Whole,
    /// The rest of a PENMAN file after its old end (with the hash of the bytes before it).
    From(&'a PieceState, &'a Xxh3),
    /// Whole, keeping only the rows of these images.
    Filtered(&'a HashSet<String>),
}

/// Reads the pieces `how` names (by unit and piece index), one thread per unit: each unit's
/// outcomes with their piece indices, in piece order.
fn read_units<'a>(
    units: &[Unit],
    started_ns: u64,
    how: impl Fn(usize, usize) -> Option<PieceRead<'a>> + Sync,
) -> Result<Vec<Vec<(usize, Outcome)>>> {
    let how = &how;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (units.iter().enumerate())
            .map(|(u, unit)| {
                scope.spawn(move || {
                    let mut outcomes = Vec::new();
                    for i in 0..unit.len() {
                        if let Some(read) = how(u, i) {
                            let piece = unit.piece(i);
                            outcomes.push((i, read_piece(unit, &piece, read, started_ns)?));
                        }
                    }
                    Ok(outcomes)
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
    })
}

/// Reads one piece: whole, from an old end, or filtered (`started_ns`: when the run's listing
/// started).
fn read_piece(unit: &Unit, piece: &Listed, read: PieceRead, started_ns: u64) -> Result<Outcome> {
    let (old, keep) = match read {
        PieceRead::Whole => (None, None),
        PieceRead::From(old, head) => (Some((old, head)), None),
        PieceRead::Filtered(keep) => (None, Some(keep)),
    };
    let sink = PieceSink::new(unit, piece, keep);
    read_piece_into(unit, piece, old, sink, started_ns)
}

/// [`read_piece`] into `sink`.
fn read_piece_into(
    unit: &Unit,
    piece: &Listed,
    old: Option<(&PieceState, &Xxh3)>,
    mut sink: PieceSink<'_>,
    started_ns: u64,
) -> Result<Outcome> {
    let keep = sink.keep;
    let old_end = old.and_then(|(o, _)| o.end.as_ref());
    unit.read(piece, old_end, &mut sink)?;
    let end = match sink.end {
        Some(cursor) if keep.is_none() => {
            let head = match (old, old_end) {
                (Some((_, head)), Some(e)) => Some((head, e.cursor.byte_offset)),
                _ => None,
            };
            Some(penman_end(
                &unit.path,
                head,
                cursor,
                sink.numbering.ordinal,
            )?)
        }
        _ => None,
    };
    let tally = sink.tally;
    let read_hash = tally.content;
    let mut state = match old.map(|(o, _)| o) {
        // The appended part adds to what the old end described.
        Some(o) => {
            let mut s = o.clone();
            s.files = piece.files.clone();
            s.context = piece.context.clone();
            s.counts.add(tally.counts);
            s.rejected.extend(tally.rejected);
            let mut images: BTreeSet<String> = s.images.into_iter().collect();
            images.extend(tally.images);
            s.images = images.into_iter().collect();
            s
        }
        None => tally.into_state(piece),
    };
    state.end = end;
    if keep.is_none() {
        state.content = read_content(&unit.path, &piece.files, started_ns, read_hash);
    }
    Ok(Outcome {
        state,
        rows: sink.rows,
    })
}

/// Where the read of the PENMAN file at `path` ended (at `cursor`, with `ordinal` the next
/// record's), with the hash of its bytes before the end: `head`, the hash of the bytes up to an
/// offset, fed the rest, or the bytes hashed from the start.
fn penman_end(
    path: &Path,
    head: Option<(&Xxh3, u64)>,
    cursor: BlockCursor,
    ordinal: u64,
) -> Result<PenmanEnd> {
    let (head, from) = head.map_or((Xxh3::new(), 0), |(head, from)| (head.clone(), from));
    let hasher = hash_range(path, head, from, cursor.byte_offset)?;
    Ok(PenmanEnd {
        cursor,
        ordinal,
        xxh3: hasher.map(|h| hex128(&h)).unwrap_or_default(),
    })
}

/// What a reader saw of one piece: the images it holds rows of, its record counts and its
/// rejections, numbered from the piece's first record.
#[derive(Debug, Default)]
pub struct PieceTally {
    images: BTreeSet<String>,
    counts: IngestCounts,
    rejected: Vec<(u64, RejectedRow)>,
    /// An image's files' stamps, taken before they were read ([`stamp`](Self::stamp)).
    stamps: Vec<FileMeta>,
    /// The [`content_hash`] of an image's files, of the bytes its reader read
    /// ([`hash_read`](Self::hash_read)).
    content: Option<u128>,
}

impl PieceTally {
    /// Takes the stamps of `image`'s files, before they are read: a file that cannot be read as
    /// one has no modification time (it is read again next time), as a stamped listing gives it.
    pub fn stamp(&mut self, image: &ListedImage) {
        let unknown = FileMeta {
            size: 0,
            modified_ns: None,
        };
        let stamp = |file: &ListedFile| match (file.meta, &file.problem) {
            (Some(meta), _) => meta,
            (None, Some(_)) => unknown,
            (None, None) => FileMeta::read(&file.path).unwrap_or(unknown),
        };
        self.stamps = image.files().map(stamp).collect();
    }

    /// Hashes the bytes the reader read of an image's files as [`content_hash`] hashes the
    /// files, `sized` saying of each whether the piece's stamp has a size ([`read_hash`]).
    pub fn hash_read(&mut self, read: &ImageBytes, sized: impl Iterator<Item = bool>) {
        self.content = read_hash(read, sized);
    }

    /// A row of image `image` (of a table the input keeps).
    pub fn row(&mut self, image: &str) {
        if !self.images.contains(image) {
            self.images.insert(image.to_string());
        }
    }

    /// An accepted record.
    pub fn accepted(&mut self) {
        self.counts.read += 1;
        self.counts.accepted += 1;
    }

    /// A rejected record, `ordinal` the piece's.
    pub fn rejected(&mut self, ordinal: u64, row: RejectedRow) {
        self.counts.read += 1;
        self.counts.rejected += 1;
        self.rejected.push((ordinal, row));
    }

    /// The record of `piece`, read whole as the tally says (without its end or content hash).
    fn into_state(self, piece: &Listed) -> PieceState {
        PieceState {
            key: piece.key.clone(),
            files: piece.files.clone(),
            context: piece.context.clone(),
            images: self.images.into_iter().collect(),
            counts: self.counts,
            rejected: self.rejected,
            end: None,
            content: None,
        }
    }
}

/// The record of the input pieces that a run on the streaming engine makes as its workers read
/// them, so that the next run with the same models reads only new and changed pieces. Each
/// worker writes a line for every piece it reads, with the piece's position, to a file per input
/// path ([`PieceLines`]); [`assemble`](Self::assemble) merges them in input and piece order
/// into `STATE/inputs.pending.json` ([`Record`]'s layout), where the record waits for the run's
/// commit ([`InputsState::commit_pending`]). A piece's line is the one a piece-by-piece read of
/// every input leaves ([`read_inputs`] with no previous record): the stamps are taken before the
/// piece is read, so a file changed while the run reads it is read again next time.
#[derive(Debug)]
pub struct PieceRecording {
    /// Where the workers' files are (a scratch directory of the run).
    dir: PathBuf,
    /// When the run started listing its inputs.
    started_ns: u64,
    units: Vec<RecordedUnit>,
}

/// An input path of a [`PieceRecording`].
#[derive(Debug)]
struct RecordedUnit {
    format: Format,
    path: PathBuf,
    /// How many pieces it has.
    pieces: u64,
    /// The one piece of a path read whole, as listed before the read; `None` for a path read
    /// image by image.
    whole: Option<Listed>,
}

impl PieceRecording {
    /// Starts a recording whose workers' files go to `dir`: the clock of its stamps starts now,
    /// before the inputs are listed.
    pub fn start(dir: PathBuf) -> PieceRecording {
        PieceRecording {
            dir,
            started_ns: now_ns(),
            units: Vec::new(),
        }
    }

    /// Lists `spec`'s input paths: `images(i)` is the number of images of path `i` when its
    /// workers read it image by image from a listing of its own (made after
    /// [`start`](Self::start); each image's files are stamped just before they are read,
    /// [`PieceTally::stamp`]), `None` when one worker reads it whole: its files' stamps are
    /// taken now.
    pub fn list(
        &mut self,
        spec: &DataflowSpec,
        images: impl Fn(usize) -> Option<u64>,
    ) -> Result<()> {
        let paths = (spec.inputs.iter())
            .flat_map(|input| input.paths.iter().map(move |path| (input, path)));
        for (index, (input, path)) in paths.enumerate() {
            let (pieces, whole) = match images(index) {
                Some(images) => (images, None),
                None => {
                    let unit = Unit::list(index as u32, input.format, path, input.tables.clone())?;
                    (unit.len() as u64, Some(unit.piece(0).into_owned()))
                }
            };
            self.units.push(RecordedUnit {
                format: input.format,
                path: path.clone(),
                pieces,
                whole,
            });
        }
        Ok(())
    }

    fn worker_file(&self, unit: usize, worker: usize) -> PathBuf {
        self.dir.join(format!("{unit}.w{worker:03}"))
    }

    /// [`assemble`](Self::assemble) on a thread of its own, while the stages run.
    pub fn assemble_aside(
        self: &Arc<Self>,
        workers: std::ops::Range<usize>,
        state_dir: PathBuf,
    ) -> std::thread::JoinHandle<Result<()>> {
        let recording = Arc::clone(self);
        std::thread::spawn(move || recording.assemble(workers, &state_dir))
    }

    /// Merges the lines of `workers` into `STATE/inputs.pending.json`, checking that every
    /// piece has its line.
    pub fn assemble(&self, workers: std::ops::Range<usize>, state_dir: &Path) -> Result<()> {
        use std::io::BufRead;
        let mut out = JsonFile::create(&state_dir.join(PENDING_INPUTS_FILE))?;
        out.line(&RecordHeader::current())?;
        for (index, unit) in self.units.iter().enumerate() {
            out.line(&UnitLine::new(unit.format, &unit.path, unit.pieces))?;
            // Each worker's lines are in piece order: the next line of each, by position.
            let mut heads = Vec::new();
            for worker in workers.clone() {
                let path = self.worker_file(index, worker);
                let file = match std::fs::File::open(&path) {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(Error::io(&path, e)),
                };
                let mut lines = std::io::BufReader::new(file).lines();
                if let Some(head) = next_positioned(&mut lines, &path)? {
                    heads.push((head, lines, path));
                }
            }
            let mut written = 0u64;
            while let Some(next) = (0..heads.len()).min_by_key(|&i| heads[i].0 .0) {
                let ((_, line), lines, path) = &mut heads[next];
                out.raw(line.as_bytes())?;
                out.raw(b"\n")?;
                written += 1;
                match next_positioned(lines, path)? {
                    Some(head) => heads[next].0 = head,
                    None => {
                        heads.swap_remove(next);
                    }
                }
            }
            if written != unit.pieces {
                return Err(Error::Config(format!(
                    "recording the pieces of {}: {written} of its {} pieces were read",
                    unit.path.display(),
                    unit.pieces
                )));
            }
        }
        out.finish()
    }
}

/// The next line of a worker's piece lines, as its position and the piece's record.
fn next_positioned(
    lines: &mut std::io::Lines<std::io::BufReader<std::fs::File>>,
    path: &Path,
) -> Result<Option<(u64, String)>> {
    let Some(line) = lines.next() else {
        return Ok(None);
    };
    let line = line.map_err(|e| Error::io(path, e))?;
    let parsed = line
        .split_once(' ')
        .and_then(|(at, record)| Some((at.parse().ok()?, record.to_string())));
    parsed.map(Some).ok_or_else(|| {
        Error::Config(format!(
            "{}: a piece line without its position",
            path.display()
        ))
    })
}

/// One worker's lines of a [`PieceRecording`]: a file per input path, a line per piece read, in
/// the order the worker reads them (which is piece order). A thread of the worker's own hashes
/// each piece's bytes and writes its line while the worker reads on.
pub struct PieceLines {
    recording: Arc<PieceRecording>,
    to_writer: Option<crossbeam_channel::Sender<ReadPieceState>>,
    writer: Option<std::thread::JoinHandle<Result<()>>>,
}

/// A piece as a worker read it, for the thread that writes its line.
struct ReadPieceState {
    unit: u32,
    position: u64,
    files: Vec<FileStamp>,
    state: PieceState,
    /// Where the read of a PENMAN file ended, and the next record's ordinal.
    end: Option<(BlockCursor, u64)>,
    /// The hash of the bytes the reader read ([`PieceTally::hash_read`]).
    read_hash: Option<u128>,
}

/// Pieces a worker may have read ahead of its [`PieceLines`] thread.
const PIECES_AHEAD: usize = 1024;

impl PieceRecording {
    /// Worker `worker`'s writer of piece lines.
    pub fn lines(self: &Arc<Self>, worker: usize) -> Result<PieceLines> {
        let (to_writer, pieces) = crossbeam_channel::bounded(PIECES_AHEAD);
        let recording = Arc::clone(self);
        let writer = std::thread::Builder::new()
            .name(format!("capflow-pieces-{worker}"))
            .spawn(move || recording.write_lines(worker, pieces))
            .map_err(|e| Error::io(&self.dir, e))?;
        Ok(PieceLines {
            recording: Arc::clone(self),
            to_writer: Some(to_writer),
            writer: Some(writer),
        })
    }

    /// Writes the line of every piece worker `worker` read, in the order it read them: the
    /// piece's end and content hash are taken here ([`read_content`]).
    fn write_lines(
        &self,
        worker: usize,
        pieces: crossbeam_channel::Receiver<ReadPieceState>,
    ) -> Result<()> {
        let mut out: HashMap<u32, JsonFile> = HashMap::new();
        for read in pieces {
            let ReadPieceState {
                unit,
                position,
                files,
                mut state,
                end,
                read_hash,
            } = read;
            let path = &self.units[unit as usize].path;
            if let Some((cursor, ordinal)) = end {
                state.end = Some(penman_end(path, None, cursor, ordinal)?);
            }
            state.content = read_content(path, &files, self.started_ns, read_hash);
            forget_racy_stamps(&mut state, self.started_ns);
            let file = match out.entry(unit) {
                std::collections::hash_map::Entry::Occupied(file) => file.into_mut(),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(JsonFile::create(&self.worker_file(unit as usize, worker))?)
                }
            };
            file.raw(format!("{position} ").as_bytes())?;
            file.line(&state)?;
        }
        out.into_values().try_for_each(JsonFile::finish)
    }
}

impl PieceLines {
    /// Records the image at `position` of input path `unit`, which a worker read alone from
    /// `listing` as `tally` says.
    pub fn image(
        &mut self,
        unit: u32,
        listing: &Listing,
        image: &ListedImage,
        position: u64,
        tally: PieceTally,
    ) -> Result<()> {
        let path = &self.unit(unit)?.path;
        let piece = Listed {
            files: (image.files().zip(&tally.stamps))
                .map(|(f, meta)| FileStamp::new(path, &f.path, Some(*meta)))
                .collect(),
            context: listing.split_of(&image.id).to_string(),
            key: image.id.clone(),
            image: Some(position as usize),
        };
        let read_hash = tally.content;
        let state = tally.into_state(&piece);
        self.send(ReadPieceState {
            unit,
            position,
            files: piece.files,
            state,
            end: None,
            read_hash,
        })
    }

    /// Records the one piece of input path `unit`, which a worker read whole as `tally` says,
    /// for a PENMAN file to `end` (its cursor and the next record's ordinal).
    pub fn whole(
        &mut self,
        unit: u32,
        tally: PieceTally,
        end: Option<(BlockCursor, u64)>,
    ) -> Result<()> {
        let recorded = self.unit(unit)?;
        let piece = (recorded.whole.clone()).ok_or_else(|| not_recorded(&recorded.path))?;
        let state = tally.into_state(&piece);
        self.send(ReadPieceState {
            unit,
            position: 0,
            files: piece.files,
            state,
            end,
            read_hash: None,
        })
    }

    fn unit(&self, unit: u32) -> Result<&RecordedUnit> {
        (self.recording.units.get(unit as usize)).ok_or_else(|| {
            Error::Config(format!(
                "recording the pieces of input {unit}: no such input"
            ))
        })
    }

    fn send(&mut self, piece: ReadPieceState) -> Result<()> {
        match &self.to_writer {
            Some(to_writer) if to_writer.send(piece).is_ok() => Ok(()),
            // The thread stopped: its error says why.
            _ => Err(self
                .stop()
                .err()
                .unwrap_or_else(|| Error::Config("the record of the input pieces stopped".into()))),
        }
    }

    /// Waits for the thread to write every line, and flush and sync its files.
    fn stop(&mut self) -> Result<()> {
        self.to_writer = None;
        match self.writer.take().map(std::thread::JoinHandle::join) {
            Some(Ok(written)) => written,
            Some(Err(_)) => Err(Error::Config(
                "the record of the input pieces panicked".into(),
            )),
            None => Ok(()),
        }
    }

    /// Every line written, flushed and synced.
    pub fn finish(mut self) -> Result<()> {
        self.stop()
    }
}

fn not_recorded(path: &Path) -> Error {
    Error::Config(format!(
        "recording the pieces of {}: it was listed to be read image by image",
        path.display()
    ))
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

    /// The record a read left pending in `state`.
    fn pending(state: &Path) -> InputsState {
        InputsState::read_file(&state.join(PENDING_INPUTS_FILE))
            .unwrap()
            .unwrap()
    }

    /// The plan's estimate of what collecting its reads holds, by hand: 8 bytes a byte of input
    /// times the largest share of an input read (or the share asked for) times all inputs.
    #[test]
    fn a_plan_estimates_what_it_collects_from_the_share_of_the_inputs_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let amr = dir.path().join("graphs.amr");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let first = format!("{}\n{}", graph(1, "dog"), graph(2, "cat"));
        std::fs::write(&amr, &first).unwrap();
        // A file modified within the last seconds is read again whatever its stamp: age it.
        let age = |secs: u64| {
            let then = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            let file = std::fs::File::options().write(true).open(&amr).unwrap();
            file.set_modified(then).unwrap();
        };
        age(1_700_000_000);
        let spec = spec(dir.path());
        let fresh = InputPlan::make(&spec, &state, true).unwrap();
        assert!(fresh.reads_everything());
        assert_eq!(fresh.pieces(), (1, 1));
        let size = first.len() as u64;
        assert_eq!(fresh.collected_bytes(0.0), 8 * size);
        read_planned(fresh, &state, &BTreeSet::new()).unwrap();
        InputsState::commit_pending(&state).unwrap();
        // Unchanged: nothing read, unless a share of the images is asked for besides.
        let same = InputPlan::make(&spec, &state, true).unwrap();
        assert!(!same.reads_everything());
        assert_eq!(same.pieces(), (1, 0));
        assert_eq!(same.collected_bytes(0.0), 0);
        assert_eq!(same.collected_bytes(0.5), 4 * size);
        // Grown: the appended bytes.
        let more = format!("\n{}", graph(3, "cow"));
        append(&amr, &more);
        age(1_700_000_100);
        let grown = InputPlan::make(&spec, &state, true).unwrap();
        assert_eq!(grown.pieces(), (1, 1));
        let appended = more.len() as u64;
        let all = size + appended;
        let expected = 8.0 * (appended as f64 / all as f64) * all as f64;
        assert!(
            grown.collected_bytes(0.0).abs_diff(expected as u64) <= 1,
            "{} against {expected}",
            grown.collected_bytes(0.0)
        );
        assert_eq!(grown.collected_bytes(1.0), 8 * all);
    }

    #[test]
    fn a_grown_penman_file_is_read_from_its_old_end_and_a_rewritten_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let amr = dir.path().join("graphs.amr");
        let state = dir.path().join("state");
        let whole_state = dir.path().join("whole");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(&whole_state).unwrap();
        std::fs::write(&amr, format!("{}\n{}", graph(1, "dog"), graph(2, "cat"))).unwrap();
        let spec = spec(dir.path());
        let first = read_inputs(&spec, &state, false).unwrap();
        assert_eq!(images(&first), set(&["1", "2"]));
        assert!(first.touched.is_none());
        InputsState::commit_pending(&state).unwrap();
        // Graphs appended: only they are read; ordinals, counts and the end continue.
        append(&amr, &format!("\n{}\n(x / broken", graph(3, "cow")));
        let grown = read_inputs(&spec, &state, true).unwrap();
        assert!(
            grown.summary.contains("(1 appended to)"),
            "{}",
            grown.summary
        );
        assert_eq!(images(&grown), set(&["3"]));
        assert_eq!(grown.touched, Some(set(&["3"])));
        let whole = read_inputs(&spec, &whole_state, false).unwrap();
        assert_eq!(grown.collected.counts, whole.collected.counts);
        assert_eq!(grown.collected.rejected, whole.collected.rejected);
        assert_eq!(grown.collected.rejected.len(), 1);
        let last = |r: &InputRead| r.collected.rows.last().map(|k| (k.ordinal, k.row.clone()));
        assert_eq!(last(&grown), last(&whole));
        let end = |dir: &Path| pending(dir).units[0].pieces[0].end.clone();
        assert_eq!(end(&state), end(&whole_state));
        // The broken graph at the end leaves a block open: what follows must be read whole.
        assert!(end(&state).is_some_and(|e| !e.cursor.resumable));
        InputsState::commit_pending(&state).unwrap();
        append(&amr, ")\n");
        let closed = read_inputs(&spec, &state, true).unwrap();
        assert!(
            closed.summary.contains("(0 appended to)"),
            "{}",
            closed.summary
        );
        InputsState::commit_pending(&state).unwrap();
        // Rewritten in place at the same length: the whole file is read again, and every image
        // it held is touched.
        let text = std::fs::read_to_string(&amr).unwrap().replace("dog", "pig");
        std::fs::write(&amr, text).unwrap();
        let rewritten = read_inputs(&spec, &state, true).unwrap();
        let all = images(&rewritten);
        assert!(all.is_superset(&set(&["1", "2", "3"])), "{all:?}");
        assert_eq!(rewritten.touched, Some(all));
    }

    fn set_modified(path: &Path, time: std::time::SystemTime) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(time).unwrap();
    }

    fn half_a_minute_ago() -> std::time::SystemTime {
        std::time::SystemTime::now() - std::time::Duration::from_secs(30)
    }

    /// Copies the files under `from` to `to`, each modified a minute ago (so that no stamp is
    /// too recent to keep).
    fn copy_tree(from: &Path, to: &Path) {
        let minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                std::fs::create_dir_all(&target).unwrap();
                copy_tree(&path, &target);
            } else {
                std::fs::copy(&path, &target).unwrap();
                set_modified(&target, minute_ago);
            }
        }
    }

    /// A copy of the embedded Flickr30k Entities directory (`flickr`), a spec that reads it, and
    /// two state directories (`state`, `whole`).
    fn flickr_copy() -> (tempfile::TempDir, DataflowSpec) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("flickr");
        std::fs::create_dir_all(&data).unwrap();
        let embedded =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/flickr30k_entities");
        copy_tree(&embedded, &data);
        let path = dir.path().join("spec.toml");
        let text =
            "name = \"f\"\n[[inputs]]\nformat = \"flickr30k-entities\"\npaths = [\"flickr\"]\n";
        std::fs::write(&path, text).unwrap();
        for state in ["state", "whole"] {
            std::fs::create_dir_all(dir.path().join(state)).unwrap();
        }
        (dir, DataflowSpec::from_file(&path).unwrap())
    }

    #[test]
    fn a_rerun_reads_the_changed_flickr_image_and_leaves_the_record_a_full_read_leaves() {
        let (dir, spec) = flickr_copy();
        let data = dir.path().join("flickr");
        let (state, whole_state) = (dir.path().join("state"), dir.path().join("whole"));
        let first = read_inputs(&spec, &state, true).unwrap();
        assert_eq!(first.summary, "read all 20 input pieces");
        InputsState::commit_pending(&state).unwrap();
        // Nothing changed: nothing is read, and the record is carried line for line.
        let before = std::fs::read(state.join(INPUTS_FILE)).unwrap();
        let same = read_inputs(&spec, &state, true).unwrap();
        assert_eq!(same.touched, Some(BTreeSet::new()), "{}", same.summary);
        assert!(same.collected.rows.is_empty());
        assert_eq!(same.collected.counts, first.collected.counts);
        assert_eq!(
            std::fs::read(state.join(PENDING_INPUTS_FILE)).unwrap(),
            before
        );
        InputsState::commit_pending(&state).unwrap();
        // One sentence file rewritten, one image's files removed.
        let sentences = data.join("Sentences");
        let changed = sentences.join("1000003.txt");
        let text = std::fs::read_to_string(&changed).unwrap();
        std::fs::write(&changed, text.replacen(" a ", " one ", 1)).unwrap();
        set_modified(&changed, half_a_minute_ago());
        std::fs::remove_file(sentences.join("1000007.txt")).unwrap();
        std::fs::remove_file(data.join("Annotations/1000007.xml")).unwrap();
        let rerun = read_inputs(&spec, &state, true).unwrap();
        assert_eq!(rerun.touched, Some(set(&["1000003", "1000007"])));
        assert_eq!(images(&rerun), set(&["1000003"]));
        let whole = read_inputs(&spec, &whole_state, false).unwrap();
        assert_eq!(rerun.collected.counts, whole.collected.counts);
        assert_eq!(rerun.collected.rejected, whole.collected.rejected);
        let of_image = |r: &InputRead, id: &str| -> Vec<KeyedRow> {
            (r.collected.rows.iter())
                .filter(|k| k.row.image_id() == id)
                .map(|k| (**k).clone())
                .collect()
        };
        assert_eq!(of_image(&rerun, "1000003"), of_image(&whole, "1000003"));
        assert_eq!(pending(&state), pending(&whole_state));
    }

    /// A piece whose files were rewritten with the bytes they held (new modification times, as
    /// a copy or a sync tool leaves them) is not read: its record is carried with the new stamps,
    /// and the record is what a full read leaves. A file rewritten at the same size with other
    /// bytes is read, and a file modified too recently to trust its stamp gets no content hash.
    #[test]
    fn a_piece_rewritten_with_the_same_bytes_is_not_read_again() {
        let (dir, spec) = flickr_copy();
        let data = dir.path().join("flickr");
        let (state, whole_state) = (dir.path().join("state"), dir.path().join("whole"));
        read_inputs(&spec, &state, true).unwrap();
        InputsState::commit_pending(&state).unwrap();
        let record = InputsState::read_file(&state.join(INPUTS_FILE))
            .unwrap()
            .unwrap();
        assert!(record.units[0].pieces.iter().all(|p| p.content.is_some()));
        let rewrite = |path: &Path, bytes: &[u8]| {
            std::fs::write(path, bytes).unwrap();
            set_modified(path, half_a_minute_ago());
        };
        for id in ["1000002", "1000004", "1000006"] {
            let path = data.join(format!("Sentences/{id}.txt"));
            rewrite(&path, &std::fs::read(&path).unwrap());
        }
        let other = data.join("Sentences/1000008.txt");
        let text = std::fs::read_to_string(&other).unwrap();
        assert!(text.contains(" a "));
        rewrite(&other, text.replacen(" a ", " A ", 1).as_bytes());
        let rerun = read_inputs(&spec, &state, true).unwrap();
        assert!(
            rerun.summary.starts_with(
                "read 1 new or changed of 20 input pieces (0 appended to; 3 with new \
                 timestamps and the same bytes)"
            ),
            "{}",
            rerun.summary
        );
        assert_eq!(rerun.touched, Some(set(&["1000008"])));
        read_inputs(&spec, &whole_state, false).unwrap();
        assert_eq!(pending(&state), pending(&whole_state));
        // Modified just now: the stamp is not kept, nor a hash of bytes that may still change.
        InputsState::commit_pending(&state).unwrap();
        std::fs::write(&other, text.as_bytes()).unwrap();
        read_inputs(&spec, &state, true).unwrap();
        let piece = &pending(&state).units[0].pieces[7];
        assert_eq!(piece.key, "1000008");
        assert_eq!(piece.content, None);
        assert_eq!(piece.files[0].modified_ns, None);
    }

    #[test]
    fn a_cut_or_garbled_record_reads_everything_and_is_replaced() {
        let (dir, spec) = flickr_copy();
        let state = dir.path().join("state");
        read_inputs(&spec, &state, true).unwrap();
        InputsState::commit_pending(&state).unwrap();
        let record = std::fs::read_to_string(state.join(INPUTS_FILE)).unwrap();
        let lines: Vec<&str> = record.lines().collect();
        assert_eq!(lines.len(), 2 + 20, "a header, an input's line, 20 pieces");
        let garbled = lines[..12].join("\n") + "\n{\"key\": 7}\n";
        for broken in [lines[..12].join("\n") + "\n", garbled] {
            std::fs::write(state.join(INPUTS_FILE), broken).unwrap();
            let read = read_inputs(&spec, &state, true).unwrap();
            assert_eq!(read.summary, "read all 20 input pieces");
            assert!(read.touched.is_none());
            assert_eq!(pending(&state).units[0].pieces.len(), 20);
        }
    }

    #[test]
    fn an_unreadable_inputs_state_reads_everything() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("graphs.amr"), graph(1, "dog")).unwrap();
        std::fs::write(dir.path().join(INPUTS_FILE), "{ not json").unwrap();
        let read = read_inputs(&spec(dir.path()), dir.path(), true).unwrap();
        assert!(read.touched.is_none());
        assert_eq!(images(&read), set(&["1"]));
    }
}
