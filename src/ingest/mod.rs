//! Readers for every input format. Each reader streams one file (or one directory for
//! formats that span several files) into a [`RecordSink`] as typed rows, in bounded batches,
//! and reports every record it could not read as a [`RejectedRow`]. Readers never panic on bad
//! input: a broken record is rejected and the reader goes on; only an unreadable file (I/O error)
//! stops it.
//!
//! Accounting: for every reader, `accepted + rejected == read`, where a *record* is the unit the
//! format is made of (a caption line, a JSON array element, a PENMAN graph, a JSONL line, a
//! Parquet row).

use crate::error::Result;
use crate::schema::{
    AmrRow, CaptionRow, DetectionRow, GbcGraphRow, GroundingRow, ImageRow, RejectedRow, SampleRow,
    SceneGraphRow, TableKind,
};

/// An input file's size and modification time, as a rerun compares them (see
/// [`crate::dataflow::inputs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMeta {
    pub size: u64,
    /// Nanoseconds since the Unix epoch.
    pub modified_ns: Option<u64>,
}

impl FileMeta {
    pub fn of(meta: &std::fs::Metadata) -> FileMeta {
        FileMeta {
            size: meta.len(),
            modified_ns: meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos() as u64),
        }
    }

    /// The metadata of the file at `path` (following links).
    pub fn read(path: &Path) -> std::io::Result<FileMeta> {
        std::fs::metadata(path).map(|m| FileMeta::of(&m))
    }
}

/// Largest single record (a JSON array element, a JSONL line, a PENMAN graph) any reader keeps
/// in memory. A larger record is skipped to its end without being kept and rejected, so that a
/// file with no record boundary (a stream of zero bytes) cannot grow memory without bound.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// Opens an input file for reading, refusing anything but a regular file (after following
/// links) with an I/O error that says so: a FIFO would block the read until some writer shows
/// up, and a device such as `/dev/zero` never ends.
///
/// The file is opened with `O_NONBLOCK` so that the open itself cannot wait on a FIFO, and its
/// type is checked on the open descriptor, so a file swapped for a FIFO after a directory
/// listing is caught too. `O_NONBLOCK` has no effect on reads of a regular file.
pub fn open_input(path: &Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options
        .open(path)
        .map_err(|e| crate::error::Error::io(path, e))?;
    let file_type = file
        .metadata()
        .map_err(|e| crate::error::Error::io(path, e))?
        .file_type();
    if !file_type.is_file() {
        return Err(crate::error::Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "not a regular file ({}); capflow reads inputs from regular files only",
                    describe_file_type(&file_type)
                ),
            ),
        ));
    }
    Ok(file)
}

/// Names a kind of file for an error message: `a FIFO`, `a directory`, ...
pub fn describe_file_type(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Counts of one reader run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IngestCounts {
    pub read: u64,
    pub accepted: u64,
    pub rejected: u64,
}

impl IngestCounts {
    pub fn add(&mut self, other: IngestCounts) {
        self.read += other.read;
        self.accepted += other.accepted;
        self.rejected += other.rejected;
    }
}

/// One typed row of any capflow table.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Row {
    Image(ImageRow),
    Caption(CaptionRow),
    Grounding(GroundingRow),
    Detection(DetectionRow),
    Amr(AmrRow),
    SceneGraph(SceneGraphRow),
    GbcGraph(GbcGraphRow),
    Sample(SampleRow),
}

impl Row {
    pub fn image_id(&self) -> &str {
        match self {
            Row::Image(r) => &r.image_id,
            Row::Caption(r) => &r.image_id,
            Row::Grounding(r) => &r.image_id,
            Row::Detection(r) => &r.image_id,
            Row::Amr(r) => &r.image_id,
            Row::SceneGraph(r) => &r.image_id,
            Row::GbcGraph(r) => &r.image_id,
            Row::Sample(r) => &r.image_id,
        }
    }

    /// The table this row belongs to.
    pub fn table(&self) -> TableKind {
        match self {
            Row::Image(_) => TableKind::Images,
            Row::Caption(_) => TableKind::Captions,
            Row::Grounding(_) => TableKind::Groundings,
            Row::Detection(_) => TableKind::Detections,
            Row::Amr(_) => TableKind::Amrs,
            Row::SceneGraph(_) => TableKind::SceneGraphs,
            Row::GbcGraph(_) => TableKind::GbcGraphs,
            Row::Sample(_) => TableKind::Samples,
        }
    }
}

/// Where readers put what they read.
///
/// A reader calls [`RecordSink::row`] for every row it produces and [`RecordSink::reject`] for
/// every record it cannot read; a record may produce several rows (a Flickr30k caption line gives
/// one caption row and one grounding row per phrase), and counts as one accepted record
/// ([`RecordSink::accepted`]). An error returned by the sink (a full disk) stops the reader.
pub trait RecordSink {
    fn row(&mut self, row: Row) -> Result<()>;
    fn reject(&mut self, rejected: RejectedRow) -> Result<()>;
    /// Called once per accepted record, after its rows.
    fn accepted(&mut self) -> Result<()>;
    /// A record of an image the sink does not keep, passed over unread (a reader that is
    /// given the images to keep, [`penman::read_images_from`]): it takes its place in the
    /// numbering of the records after it as one row of `table` would. Neither accepted nor
    /// rejected, as it was not read. Sinks that number no records need not take it.
    fn passed_over(&mut self, table: TableKind) -> Result<()> {
        Err(crate::error::Error::Usage(format!(
            "a record of table {} was passed over, and this sink numbers every record",
            table.name()
        )))
    }
}

/// A sink that keeps everything in memory: for tests and small inputs.
#[derive(Debug, Default)]
pub struct VecSink {
    pub rows: Vec<Row>,
    pub rejected: Vec<RejectedRow>,
    pub accepted: u64,
}

impl VecSink {
    pub fn counts(&self) -> IngestCounts {
        IngestCounts {
            read: self.accepted + self.rejected.len() as u64,
            accepted: self.accepted,
            rejected: self.rejected.len() as u64,
        }
    }
}

impl RecordSink for VecSink {
    fn row(&mut self, row: Row) -> Result<()> {
        self.rows.push(row);
        Ok(())
    }
    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        self.rejected.push(rejected);
        Ok(())
    }
    fn accepted(&mut self) -> Result<()> {
        self.accepted += 1;
        Ok(())
    }
}

pub mod capflow_parquet;
pub mod coco;
pub mod flickr30k;
pub mod gbc;
pub mod json_stream;
pub mod ledger;
pub mod lines;
pub mod listing;
mod parquet_input;
pub mod penman;
pub mod visual_genome;

pub use parquet_input::ParquetInput;

use std::path::Path;

/// The input formats `capflow ingest` understands.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Flickr30k Entities: `Sentences/<image>.txt` markup and `Annotations/<image>.xml` boxes.
    Flickr30kEntities,
    /// COCO captions JSON (`captions_*.json`).
    CocoCaptions,
    /// COCO instances JSON (`instances_*.json`), read as detections.
    CocoInstances,
    /// COCO Entities JSON (`{image: {caption: {det_sequences, noun_chunks, detections}}}`).
    CocoEntities,
    /// Visual Genome `scene_graphs.json` (with `image_data.json` beside it when present).
    VisualGenome,
    /// apple ml-gbc graphs: `.jsonl`, `.json` or `.parquet`.
    Gbc,
    /// PENMAN AMR files with metadata and alignment lines.
    Penman,
    /// capflow's own Parquet tables.
    Capflow,
}

impl Format {
    /// The name used on the command line and in dataflow specs.
    pub fn name(self) -> &'static str {
        match self {
            Format::Flickr30kEntities => "flickr30k-entities",
            Format::CocoCaptions => "coco-captions",
            Format::CocoInstances => "coco-instances",
            Format::CocoEntities => "coco-entities",
            Format::VisualGenome => "visual-genome",
            Format::Gbc => "gbc",
            Format::Penman => "penman",
            Format::Capflow => "capflow",
        }
    }

    /// The dataset this format is the layout of, as the dataset card's `source_datasets` names
    /// it; `None` for formats several datasets share (GBC graphs, PENMAN, capflow's tables).
    pub fn source_dataset(self) -> Option<&'static str> {
        match self {
            Format::Flickr30kEntities => Some("flickr30k"),
            Format::CocoCaptions | Format::CocoInstances | Format::CocoEntities => Some("coco"),
            Format::VisualGenome => Some("visual_genome"),
            Format::Gbc | Format::Penman | Format::Capflow => None,
        }
    }
}

/// Reads one input path of `format` into `sink` as [`read_input`] does; for a PENMAN file,
/// returns where the read ended, from which a later read of what is appended to it starts
/// ([`penman::read_from`]).
pub fn read_input_to_end(
    format: Format,
    path: &Path,
    sink: &mut dyn RecordSink,
) -> Result<Option<crate::amr::penman::BlockCursor>> {
    match format {
        Format::Penman if path.is_file() => {
            penman::read_from(path, Default::default(), sink).map(Some)
        }
        _ => read_input(format, path, sink).map(|()| None),
    }
}

/// Reads one input path of `format` into `sink`.
pub fn read_input(format: Format, path: &Path, sink: &mut dyn RecordSink) -> Result<()> {
    match format {
        Format::Flickr30kEntities => flickr30k::read(path, sink),
        Format::CocoCaptions => coco::read_captions(path, sink),
        Format::CocoInstances => coco::read_instances(path, sink),
        Format::CocoEntities => coco::read_entities(path, sink),
        Format::VisualGenome => visual_genome::read(path, sink),
        Format::Gbc => gbc::read(path, sink),
        Format::Penman => penman::read(path, sink),
        Format::Capflow => capflow_parquet::read(path, sink),
    }
}
