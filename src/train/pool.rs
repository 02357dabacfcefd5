//! The training sink's pool: every encoded sample it received, in arrival order, in blocks of
//! `block_samples`. Blocks stay in memory up to a byte budget; beyond it, sealed blocks are
//! written to local disk as Arrow IPC files and read back when a window of training needs them
//! (blocks the trainer has already streamed through go first).
//!
//! A spilled block's file holds one record batch per page of [`PAGE_SAMPLES`] samples. The pool
//! reads the file's footer once, when it spills the block, and keeps where each page lies: a
//! reader after a few samples of a block (the curriculum's draws, [`super::source`]) reads one
//! page's bytes and decodes the samples it wants of it ([`PageColumns`]), not the block.
//!
//! Besides the blocks, the pool keeps an index of every sample in memory, spilled or not: its
//! token count (what batch planning reads) and, for CLID's curriculum, what the curriculum reads
//! of it ([`CurriculumRows`]). The index counts against the budget too.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, BooleanBuilder, Float32Array,
    Float32Builder, Int32Array, Int32Builder, Int64Array, Int64Builder, ListArray, ListBuilder,
};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::{read_footer_length, FileDecoder, FileReader};
use arrow::ipc::writer::FileWriter;
use arrow::ipc::MetadataVersion;
use arrow::record_batch::RecordBatch;

use super::data::{EncodedSample, Region};
use crate::error::{Error, Result};
use crate::schema::SampleRow;

/// Samples per record batch of a spilled block's file: the unit [`Pool::read_spilled_page`]
/// reads.
pub const PAGE_SAMPLES: usize = 64;

/// One block of the pool.
struct Block {
    /// `None` once spilled.
    samples: Option<Arc<Vec<EncodedSample>>>,
    /// The block's IPC file once spilled.
    file: Option<SpilledFile>,
    len: usize,
    bytes: usize,
}

/// A spilled block's Arrow IPC file and where its pages lie in it (from its footer).
struct SpilledFile {
    path: PathBuf,
    /// Each page's record batch: offset, metadata and body lengths.
    pages: Vec<arrow::ipc::Block>,
    version: MetadataVersion,
}

/// What CLID's curriculum reads of each pooled sample besides its encoding (the sample's id,
/// method, length level and coverage), in columns: a few dozen bytes a sample where the rows
/// themselves take hundreds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CurriculumRows {
    /// Every sample id, one after another; `id_ends[j]` is where sample `j`'s ends.
    ids: String,
    id_ends: Vec<usize>,
    /// The methods met, and each sample's index into them.
    methods: Vec<String>,
    method_of: Vec<u16>,
    length_levels: Vec<i32>,
    coverage: Vec<f64>,
}

impl CurriculumRows {
    /// The columns of `rows`, in order.
    pub fn of_rows(rows: &[SampleRow]) -> Result<CurriculumRows> {
        let mut out = CurriculumRows::default();
        for row in rows {
            out.push(row)?;
        }
        Ok(out)
    }

    /// Appends what the curriculum reads of `row`; an error past 65,536 distinct methods.
    pub fn push(&mut self, row: &SampleRow) -> Result<()> {
        let method = match self.methods.iter().position(|m| *m == row.method) {
            Some(k) => k,
            None => {
                self.methods.push(row.method.clone());
                self.methods.len() - 1
            }
        };
        let method = u16::try_from(method).map_err(|_| {
            Error::invalid(
                "training pool",
                format!("more than 65,536 methods (at {:?})", row.method),
            )
        })?;
        self.ids.push_str(&row.sample_id);
        self.id_ends.push(self.ids.len());
        self.method_of.push(method);
        self.length_levels.push(row.length_level);
        self.coverage.push(row.coverage);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.id_ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.id_ends.is_empty()
    }

    pub fn sample_id(&self, j: usize) -> &str {
        let start = if j == 0 { 0 } else { self.id_ends[j - 1] };
        &self.ids[start..self.id_ends[j]]
    }

    pub fn method(&self, j: usize) -> &str {
        &self.methods[usize::from(self.method_of[j])]
    }

    pub fn length_level(&self, j: usize) -> i32 {
        self.length_levels[j]
    }

    pub fn coverage(&self, j: usize) -> f64 {
        self.coverage[j]
    }

    /// Bytes the columns take (their contents).
    pub fn bytes(&self) -> usize {
        self.ids.len()
            + self.methods.iter().map(String::len).sum::<usize>()
            + self.len()
                * (std::mem::size_of::<usize>()
                    + std::mem::size_of::<u16>()
                    + std::mem::size_of::<i32>()
                    + std::mem::size_of::<f64>())
    }
}

/// Encoded samples in arrival order, partly on disk.
pub struct Pool {
    blocks: Vec<Block>,
    open: Vec<EncodedSample>,
    open_bytes: usize,
    block_samples: usize,
    budget: usize,
    dir: PathBuf,
    /// Bytes of the blocks held in memory (open or sealed).
    memory: usize,
    len: usize,
    spilled_blocks: usize,
    spilled_bytes: u64,
    /// Every sample's token count, in arrival order (what batch planning reads of a sample).
    token_lengths: Vec<u32>,
    /// With the curriculum, what it reads of every sample, in arrival order.
    rows: CurriculumRows,
}

/// Bytes a sample takes in memory (its vectors' contents and headers).
pub fn sample_bytes(sample: &EncodedSample) -> usize {
    std::mem::size_of::<EncodedSample>()
        + sample.tokens.len() * 8
        + sample
            .regions
            .iter()
            .map(|r| {
                std::mem::size_of::<Region>()
                    + r.feature.as_ref().map_or(0, |f| f.len() * 4)
                    + r.pixels.as_ref().map_or(0, Vec::len)
            })
            .sum::<usize>()
}

/// A sample's token count as batch planning keeps it; an error past `u32::MAX` tokens.
pub fn token_count(sample: &EncodedSample) -> Result<u32> {
    u32::try_from(sample.tokens.len()).map_err(|_| {
        Error::invalid(
            "training samples",
            format!("a sample of {} tokens", sample.tokens.len()),
        )
    })
}

impl Pool {
    /// An empty pool that keeps at most `budget` bytes of samples in memory and spills into
    /// `dir` (created when the first block is spilled).
    pub fn new(block_samples: usize, budget: usize, dir: PathBuf) -> Pool {
        Pool {
            blocks: Vec::new(),
            open: Vec::new(),
            open_bytes: 0,
            block_samples: block_samples.max(1),
            budget,
            dir,
            memory: 0,
            len: 0,
            spilled_blocks: 0,
            spilled_bytes: 0,
            token_lengths: Vec::new(),
            rows: CurriculumRows::default(),
        }
    }

    /// Samples received.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held in memory: the samples of the blocks not spilled, and the index of every
    /// sample (token counts, and the curriculum's rows when it keeps them).
    pub fn memory(&self) -> usize {
        self.memory + self.index_bytes()
    }

    /// Bytes of the index kept of every sample, spilled or not.
    pub fn index_bytes(&self) -> usize {
        self.token_lengths.len() * std::mem::size_of::<u32>() + self.rows.bytes()
    }

    /// The memory budget in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Every sample's token count, in arrival order.
    pub fn token_lengths(&self) -> &[u32] {
        &self.token_lengths
    }

    /// What the curriculum reads of every sample pushed with [`Pool::push_with_row`].
    pub fn rows(&self) -> &CurriculumRows {
        &self.rows
    }

    /// Takes the curriculum's rows out of the pool (once it is sealed and takes no more).
    pub fn take_rows(&mut self) -> CurriculumRows {
        std::mem::take(&mut self.rows)
    }

    /// Blocks written to disk so far, and their bytes on disk.
    pub fn spilled(&self) -> (usize, u64) {
        (self.spilled_blocks, self.spilled_bytes)
    }

    /// Appends `sample`; a full block is sealed, and sealed blocks are spilled while the pool
    /// holds more than its budget in memory, first those wholly before `consumed` (the samples
    /// the trainer has streamed through), then the oldest.
    pub fn push(&mut self, sample: EncodedSample, consumed: usize) -> Result<()> {
        let bytes = sample_bytes(&sample);
        self.token_lengths.push(token_count(&sample)?);
        self.open.push(sample);
        self.open_bytes += bytes;
        self.memory += bytes;
        self.len += 1;
        if self.open.len() >= self.block_samples {
            self.seal();
        }
        self.spill_over_budget(consumed)
    }

    /// [`Pool::push`], keeping what the curriculum reads of the sample's row: a pool takes
    /// every sample this way, or none.
    pub fn push_with_row(
        &mut self,
        sample: EncodedSample,
        row: &SampleRow,
        consumed: usize,
    ) -> Result<()> {
        if self.rows.len() != self.len {
            return Err(Error::invalid(
                "training pool",
                "a row pushed after samples without one",
            ));
        }
        self.rows.push(row)?;
        self.push(sample, consumed)
    }

    /// Seals the open block (when it holds samples).
    pub fn seal(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let samples = std::mem::take(&mut self.open);
        self.blocks.push(Block {
            len: samples.len(),
            bytes: self.open_bytes,
            samples: Some(Arc::new(samples)),
            file: None,
        });
        self.open_bytes = 0;
    }

    fn spill_over_budget(&mut self, consumed: usize) -> Result<()> {
        while self.memory() > self.budget {
            let mut start = 0;
            let mut trained = None;
            let mut oldest = None;
            for (k, block) in self.blocks.iter().enumerate() {
                if block.samples.is_some() {
                    if start + block.len <= consumed && trained.is_none() {
                        trained = Some(k);
                    }
                    if oldest.is_none() {
                        oldest = Some(k);
                    }
                }
                start += block.len;
            }
            match trained.or(oldest) {
                Some(k) => self.spill(k)?,
                None => return Ok(()),
            }
        }
        Ok(())
    }

    fn spill(&mut self, k: usize) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let path = self.dir.join(format!("block-{k:06}.arrow"));
        let block = &mut self.blocks[k];
        let samples = block.samples.take().unwrap_or_default();
        write_block(&path, &samples)?;
        let (pages, version) = page_spans(&path)?;
        self.spilled_bytes += std::fs::metadata(&path).map_or(0, |m| m.len());
        self.spilled_blocks += 1;
        self.memory -= block.bytes;
        block.file = Some(SpilledFile {
            path,
            pages,
            version,
        });
        Ok(())
    }

    /// Sealed blocks.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Samples and in-memory bytes of sealed block `k`.
    pub fn block_size(&self, k: usize) -> (usize, usize) {
        (self.blocks[k].len, self.blocks[k].bytes)
    }

    /// The samples of sealed block `k`, read back from disk when spilled.
    pub fn block(&self, k: usize) -> Result<Arc<Vec<EncodedSample>>> {
        let block = &self.blocks[k];
        match (&block.samples, &block.file) {
            (Some(samples), _) => Ok(samples.clone()),
            (None, Some(file)) => Ok(Arc::new(read_block(&file.path)?)),
            (None, None) => Err(lost(k)),
        }
    }

    /// The samples of sealed block `k` when it is in memory; `None` once spilled.
    pub fn resident(&self, k: usize) -> Option<Arc<Vec<EncodedSample>>> {
        self.blocks[k].samples.clone()
    }

    /// Page `page` of spilled block `k` as it is in the block's file (one record batch of the
    /// pool's schema, to be read with [`PageColumns`]), with the bytes read for it: one read
    /// of the page's bytes, nothing else of the file. An error when the block is in memory.
    pub fn read_spilled_page(&self, k: usize, page: usize) -> Result<(RecordBatch, usize)> {
        match &self.blocks[k].file {
            Some(file) => read_spilled_page(file, page),
            None if self.blocks[k].samples.is_some() => Err(Error::invalid(
                "training pool",
                format!("block {k} is in memory, not spilled"),
            )),
            None => Err(lost(k)),
        }
    }

    /// The file of spilled block `k`.
    pub fn spilled_path(&self, k: usize) -> Option<&Path> {
        self.blocks[k].file.as_ref().map(|f| f.path.as_path())
    }

    /// Samples `start..end` in arrival order (copies).
    pub fn range(&self, start: usize, end: usize) -> Result<Vec<EncodedSample>> {
        let mut out = Vec::with_capacity(end.saturating_sub(start));
        let mut first = 0;
        for k in 0..self.blocks.len() {
            let len = self.blocks[k].len;
            let (lo, hi) = (start.max(first), end.min(first + len));
            if lo < hi {
                let block = self.block(k)?;
                out.extend_from_slice(&block[lo - first..hi - first]);
            }
            first += len;
        }
        let (lo, hi) = (start.max(first), end.min(first + self.open.len()));
        if lo < hi {
            out.extend_from_slice(&self.open[lo - first..hi - first]);
        }
        Ok(out)
    }
}

fn lost(k: usize) -> Error {
    Error::invalid("training pool", format!("block {k} is lost"))
}

/// The schema of a spilled block's file.
fn schema() -> SchemaRef {
    static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(pool_schema);
    SCHEMA.clone()
}

fn pool_schema() -> SchemaRef {
    let list = |name: &str, item: DataType| {
        Field::new(
            name,
            DataType::List(Arc::new(Field::new("item", item, true))),
            false,
        )
    };
    Arc::new(Schema::new(vec![
        list("tokens", DataType::Int64),
        list("region_labels", DataType::Int64),
        // Five numbers per region.
        list("region_geometry", DataType::Float32),
        list("region_in_control", DataType::Boolean),
        // Feature length per region (-1: none), then all regions' features one after another.
        list("region_feature_lengths", DataType::Int32),
        list("region_features", DataType::Float32),
        // Each region's crop of its image (null: none).
        list("region_pixels", DataType::Binary),
        Field::new("length_level", DataType::Int64, false),
        Field::new("word_count", DataType::Int64, false),
        Field::new("verb", DataType::Int64, false),
    ]))
}

fn arrow_error(path: &Path, e: arrow::error::ArrowError) -> Error {
    Error::invalid(
        format!("training pool file {}", path.display()),
        e.to_string(),
    )
}

/// Writes `samples` as one Arrow IPC file, one record batch per [`PAGE_SAMPLES`] samples
/// (written beside, then renamed).
pub fn write_block(path: &Path, samples: &[EncodedSample]) -> Result<()> {
    let schema = schema();
    let tmp = path.with_extension("arrow.tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let mut writer = FileWriter::try_new(std::io::BufWriter::new(file), &schema)
        .map_err(|e| arrow_error(&tmp, e))?;
    for page in samples.chunks(PAGE_SAMPLES) {
        let batch = page_batch(&schema, page).map_err(|e| arrow_error(path, e))?;
        writer.write(&batch).map_err(|e| arrow_error(&tmp, e))?;
    }
    writer.finish().map_err(|e| arrow_error(&tmp, e))?;
    drop(writer);
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// One page of samples as a record batch of the pool's schema.
fn page_batch(
    schema: &Arc<Schema>,
    samples: &[EncodedSample],
) -> std::result::Result<RecordBatch, arrow::error::ArrowError> {
    let mut tokens = ListBuilder::new(Int64Builder::new());
    let mut labels = ListBuilder::new(Int64Builder::new());
    let mut geometry = ListBuilder::new(Float32Builder::new());
    let mut in_control = ListBuilder::new(BooleanBuilder::new());
    let mut feature_lengths = ListBuilder::new(Int32Builder::new());
    let mut features = ListBuilder::new(Float32Builder::new());
    let mut pixels = ListBuilder::new(BinaryBuilder::new());
    let (mut level, mut count, mut verb) = (
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    for s in samples {
        tokens.values().append_slice(&s.tokens);
        tokens.append(true);
        for r in &s.regions {
            labels.values().append_value(r.label);
            geometry.values().append_slice(&r.geometry);
            in_control.values().append_value(r.in_control);
            match &r.feature {
                Some(f) => {
                    feature_lengths.values().append_value(f.len() as i32);
                    features.values().append_slice(f);
                }
                None => feature_lengths.values().append_value(-1),
            }
            pixels.values().append_option(r.pixels.as_deref());
        }
        labels.append(true);
        geometry.append(true);
        in_control.append(true);
        feature_lengths.append(true);
        features.append(true);
        pixels.append(true);
        level.append_value(s.length_level);
        count.append_value(s.word_count);
        verb.append_value(s.verb);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(tokens.finish()),
        Arc::new(labels.finish()),
        Arc::new(geometry.finish()),
        Arc::new(in_control.finish()),
        Arc::new(feature_lengths.finish()),
        Arc::new(features.finish()),
        Arc::new(pixels.finish()),
        Arc::new(level.finish()),
        Arc::new(count.finish()),
        Arc::new(verb.finish()),
    ];
    RecordBatch::try_new(schema.clone(), columns)
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str, path: &Path) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| {
            Error::record(
                path.display().to_string(),
                name,
                "missing or of another type: not a training pool file",
            )
        })
}

fn values<'a, T: 'static>(list: &'a ListArray, path: &Path) -> Result<&'a T> {
    list.values().as_any().downcast_ref::<T>().ok_or_else(|| {
        Error::record(
            path.display().to_string(),
            "list values",
            "of another type: not a training pool file",
        )
    })
}

fn open_block(path: &Path) -> Result<FileReader<std::io::BufReader<std::fs::File>>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    FileReader::try_new(std::io::BufReader::new(file), None).map_err(|e| arrow_error(path, e))
}

/// Reads a block written by [`write_block`].
pub fn read_block(path: &Path) -> Result<Vec<EncodedSample>> {
    let mut out = Vec::new();
    for batch in open_block(path)? {
        let batch = batch.map_err(|e| arrow_error(path, e))?;
        let columns = PageColumns::new(&batch, path)?;
        out.extend((0..columns.len()).map(|row| columns.sample(row)));
    }
    Ok(out)
}

/// Where each page of a block file written by [`write_block`] lies, from the file's footer.
fn page_spans(path: &Path) -> Result<(Vec<arrow::ipc::Block>, MetadataVersion)> {
    let not_pool = |reason: String| Error::record(path.display().to_string(), "footer", reason);
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if size < 10 {
        return Err(not_pool(format!("{size} bytes: not an Arrow IPC file")));
    }
    let mut tail = [0u8; 10];
    file.seek(SeekFrom::End(-10))
        .and_then(|_| file.read_exact(&mut tail))
        .map_err(|e| Error::io(path, e))?;
    let footer_len = read_footer_length(tail).map_err(|e| arrow_error(path, e))?;
    if footer_len as u64 + 10 > size {
        return Err(not_pool(format!(
            "a footer of {footer_len} bytes in a file of {size}"
        )));
    }
    let mut footer = vec![0u8; footer_len];
    file.seek(SeekFrom::End(-10 - footer_len as i64))
        .and_then(|_| file.read_exact(&mut footer))
        .map_err(|e| Error::io(path, e))?;
    let footer = arrow::ipc::root_as_footer(&footer)
        .map_err(|e| not_pool(format!("unreadable footer: {e}")))?;
    let pages = footer
        .recordBatches()
        .map(|blocks| blocks.iter().copied().collect())
        .unwrap_or_default();
    Ok((pages, footer.version()))
}

/// Reads page `page` of a spilled block: the page's bytes alone, decoded as one record batch.
fn read_spilled_page(file: &SpilledFile, page: usize) -> Result<(RecordBatch, usize)> {
    let path = &file.path;
    let span = file.pages.get(page).ok_or_else(|| {
        Error::record(
            path.display().to_string(),
            format!("page {page}"),
            format!(
                "the file has {} pages: not a training pool file of this pool",
                file.pages.len()
            ),
        )
    })?;
    let bad_span = || {
        Error::record(
            path.display().to_string(),
            format!("page {page}"),
            "a page at a negative offset or of a negative length: not a training pool file",
        )
    };
    let offset = u64::try_from(span.offset()).map_err(|_| bad_span())?;
    let len = usize::try_from(span.metaDataLength())
        .ok()
        .zip(usize::try_from(span.bodyLength()).ok())
        .map(|(meta, body)| meta + body)
        .ok_or_else(bad_span)?;
    let mut handle = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut bytes = Vec::with_capacity(len);
    handle
        .seek(SeekFrom::Start(offset))
        .and_then(|_| (&mut handle).take(len as u64).read_to_end(&mut bytes))
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() < len {
        return Err(Error::record(
            path.display().to_string(),
            format!("page {page}"),
            format!("{} of its {len} bytes: the file is cut short", bytes.len()),
        ));
    }
    // The decoded arrays use these bytes as they are where they are aligned (the allocator's
    // alignment, and the IPC format's 8-byte padding within the page), else a copy.
    let batch = FileDecoder::new(schema(), file.version)
        .read_record_batch(span, &Buffer::from_vec(bytes))
        .map_err(|e| arrow_error(path, e))?
        .ok_or_else(|| {
            Error::record(
                path.display().to_string(),
                format!("page {page}"),
                "not a record batch: not a training pool file",
            )
        })?;
    Ok((batch, len))
}

/// The columns of one page of a pool file (a record batch of the pool's schema), from which
/// samples are decoded one at a time.
pub struct PageColumns<'a> {
    rows: usize,
    tokens: &'a ListArray,
    labels: &'a ListArray,
    geometry: &'a ListArray,
    features: &'a ListArray,
    level: &'a Int64Array,
    count: &'a Int64Array,
    verb: &'a Int64Array,
    token_values: &'a Int64Array,
    label_values: &'a Int64Array,
    geometry_values: &'a Float32Array,
    control_values: &'a BooleanArray,
    length_values: &'a Int32Array,
    feature_values: &'a Float32Array,
    pixel_values: &'a BinaryArray,
}

impl<'a> PageColumns<'a> {
    /// The columns of `batch`, read from the pool file `path`; an error naming the file when
    /// the batch is not of the pool's schema.
    pub fn new(batch: &'a RecordBatch, path: &Path) -> Result<PageColumns<'a>> {
        let tokens: &ListArray = column(batch, "tokens", path)?;
        let labels: &ListArray = column(batch, "region_labels", path)?;
        let geometry: &ListArray = column(batch, "region_geometry", path)?;
        let in_control: &ListArray = column(batch, "region_in_control", path)?;
        let feature_lengths: &ListArray = column(batch, "region_feature_lengths", path)?;
        let features: &ListArray = column(batch, "region_features", path)?;
        let pixels: &ListArray = column(batch, "region_pixels", path)?;
        Ok(PageColumns {
            rows: batch.num_rows(),
            tokens,
            labels,
            geometry,
            features,
            level: column(batch, "length_level", path)?,
            count: column(batch, "word_count", path)?,
            verb: column(batch, "verb", path)?,
            token_values: values(tokens, path)?,
            label_values: values(labels, path)?,
            geometry_values: values(geometry, path)?,
            control_values: values(in_control, path)?,
            length_values: values(feature_lengths, path)?,
            feature_values: values(features, path)?,
            pixel_values: values(pixels, path)?,
        })
    }

    /// Samples in the page.
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The sample in row `row` (< [`PageColumns::len`]).
    pub fn sample(&self, row: usize) -> EncodedSample {
        let span = |list: &ListArray| {
            let offsets = list.value_offsets();
            (offsets[row] as usize, offsets[row + 1] as usize)
        };
        let (t0, t1) = span(self.tokens);
        let (r0, r1) = span(self.labels);
        let (g0, _) = span(self.geometry);
        let (f0, _) = span(self.features);
        let mut feature_at = f0;
        let mut regions = Vec::with_capacity(r1 - r0);
        for (k, r) in (r0..r1).enumerate() {
            let g = g0 + 5 * k;
            let mut geometry = [0f32; 5];
            for (i, v) in geometry.iter_mut().enumerate() {
                *v = self.geometry_values.value(g + i);
            }
            let length = self.length_values.value(r);
            let feature = (length >= 0).then(|| {
                let f = &self.feature_values.values()[feature_at..feature_at + length as usize];
                feature_at += length as usize;
                f.to_vec()
            });
            regions.push(Region {
                label: self.label_values.value(r),
                geometry,
                in_control: self.control_values.value(r),
                feature,
                pixels: self
                    .pixel_values
                    .is_valid(r)
                    .then(|| self.pixel_values.value(r).to_vec()),
            });
        }
        EncodedSample {
            tokens: self.token_values.values()[t0..t1].to_vec(),
            regions,
            length_level: self.level.value(row),
            word_count: self.count.value(row),
            verb: self.verb.value(row),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: i64) -> EncodedSample {
        EncodedSample {
            tokens: (0..n + 2).collect(),
            regions: (0..n)
                .map(|k| Region {
                    label: 3 + k,
                    geometry: [0.1 * k as f32, 0.2, 0.3, 0.4, 0.05],
                    in_control: k % 2 == 0,
                    feature: (k == 1).then(|| vec![1.5, -2.0, 0.25]),
                    pixels: (k == 2).then(|| vec![0, 7, 255]),
                })
                .collect(),
            length_level: n % 4,
            word_count: n,
            verb: 1 + n % 3,
        }
    }

    #[test]
    fn a_spilled_block_reads_back_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<EncodedSample> = (0..7).map(sample).collect();
        let path = dir.path().join("b.arrow");
        write_block(&path, &samples).unwrap();
        assert_eq!(read_block(&path).unwrap(), samples);
    }

    #[test]
    fn a_page_of_a_spilled_block_reads_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<EncodedSample> = (0..150).map(|k| sample(k % 6)).collect();
        let path = dir.path().join("b.arrow");
        write_block(&path, &samples).unwrap();
        assert_eq!(read_block(&path).unwrap(), samples);
        let (pages, version) = page_spans(&path).unwrap();
        assert_eq!(pages.len(), 3);
        let file = SpilledFile {
            path: path.clone(),
            pages,
            version,
        };
        let size = std::fs::metadata(&path).unwrap().len() as usize;
        let page = |p: usize| {
            let (batch, bytes) = read_spilled_page(&file, p).unwrap();
            // The page's bytes alone, not the file's.
            assert!(bytes < size / 2, "{bytes} bytes read of a {size}-byte file");
            let columns = PageColumns::new(&batch, &path).unwrap();
            (0..columns.len())
                .map(|row| columns.sample(row))
                .collect::<Vec<_>>()
        };
        assert_eq!(page(0), samples[..64]);
        assert_eq!(page(1), samples[64..128]);
        assert_eq!(page(2), samples[128..]);
        // Rows decode alone, in any order.
        let (batch, _) = read_spilled_page(&file, 1).unwrap();
        let columns = PageColumns::new(&batch, &path).unwrap();
        assert_eq!(columns.sample(37), samples[64 + 37]);
        assert_eq!(columns.sample(2), samples[66]);
        let err = read_spilled_page(&file, 3).unwrap_err().to_string();
        assert!(err.contains("3 pages"), "{err}");
    }

    #[test]
    fn a_damaged_pool_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<EncodedSample> = (0..150).map(|k| sample(k % 6)).collect();
        let path = dir.path().join("b.arrow");
        write_block(&path, &samples).unwrap();
        let (pages, version) = page_spans(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        // A page's bytes overwritten: decoding it fails, it does not panic.
        let mut damaged = bytes.clone();
        let at = pages[1].offset() as usize;
        for b in &mut damaged[at..at + 64] {
            *b = 0xff;
        }
        std::fs::write(&path, &damaged).unwrap();
        let file = SpilledFile {
            path: path.clone(),
            pages,
            version,
        };
        assert!(read_spilled_page(&file, 0).is_ok());
        let err = read_spilled_page(&file, 1).unwrap_err().to_string();
        assert!(err.contains("b.arrow"), "{err}");
        // A truncated file has no footer to read.
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        let err = page_spans(&path).unwrap_err().to_string();
        assert!(err.contains("b.arrow"), "{err}");
    }

    fn row(id: &str, method: &str, level: i32, coverage: f64) -> SampleRow {
        SampleRow {
            sample_id: id.into(),
            image_id: "1".into(),
            split: "train".into(),
            method: method.into(),
            text: "a dog .".into(),
            control_boxes: Vec::new(),
            control_labels: Vec::new(),
            coverage,
            length_level: level,
            word_count: 2,
            verbs: Vec::new(),
            quality: Vec::new(),
            provenance: Default::default(),
            image: None,
        }
    }

    #[test]
    fn the_curriculum_rows_read_back_as_pushed() {
        let rows = vec![
            row("1-original-0", "original", 1, 0.5),
            row("1-ssa-0", "ssa", 3, 0.25),
            row("", "ssa", 0, 1.0),
            row("22-original-4", "original", 2, 0.0),
        ];
        let columns = CurriculumRows::of_rows(&rows).unwrap();
        assert_eq!(columns.len(), 4);
        for (j, r) in rows.iter().enumerate() {
            assert_eq!(columns.sample_id(j), r.sample_id);
            assert_eq!(columns.method(j), r.method);
            assert_eq!(columns.length_level(j), r.length_level);
            assert_eq!(columns.coverage(j).to_bits(), r.coverage.to_bits());
        }
        // The ids' characters (12 + 7 + 13), the two methods' (8 + 3), and 22 bytes a sample.
        assert_eq!(columns.bytes(), 32 + 11 + 4 * 22);
    }

    #[test]
    fn the_index_of_every_sample_counts_against_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<EncodedSample> = (0..64).map(|k| sample(k % 5)).collect();
        let budget: usize = samples.iter().map(sample_bytes).sum::<usize>() + 64 * 4;
        let mut plain = Pool::new(8, budget, dir.path().join("plain"));
        let mut with_rows = Pool::new(8, budget, dir.path().join("rows"));
        for (k, s) in samples.iter().enumerate() {
            plain.push(s.clone(), 0).unwrap();
            let r = row(&format!("sample-{k:04}"), "ssa", 1, 0.5);
            with_rows.push_with_row(s.clone(), &r, 0).unwrap();
        }
        // Without rows, the samples and their token counts fit the budget exactly.
        assert_eq!(plain.spilled().0, 0);
        assert_eq!(plain.index_bytes(), 64 * 4);
        assert_eq!(plain.memory(), budget);
        // The rows' bytes push blocks out to disk.
        assert_eq!(with_rows.index_bytes(), 64 * 4 + with_rows.rows().bytes());
        assert!(with_rows.spilled().0 >= 1, "{:?}", with_rows.spilled());
        assert!(with_rows.memory() <= budget);
        assert_eq!(with_rows.rows().sample_id(63), "sample-0063");
        assert_eq!(with_rows.range(0, 64).unwrap(), samples);
        let err = plain.push_with_row(sample(1), &row("x", "ssa", 0, 0.0), 0);
        assert!(err.unwrap_err().to_string().contains("without one"));
    }

    #[test]
    fn over_its_budget_the_pool_spills_blocks_already_trained_on_first() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<EncodedSample> = (0..40).map(|k| sample(k % 5)).collect();
        let one = sample_bytes(&samples[0]);
        // Room for about two blocks of four samples.
        let mut pool = Pool::new(4, 9 * one, dir.path().join("pool"));
        for (k, s) in samples.iter().enumerate() {
            // The trainer has streamed through the first 20 samples.
            pool.push(s.clone(), 20.min(k)).unwrap();
        }
        assert!(pool.memory() <= 9 * one + 4 * sample_bytes(&sample(4)));
        let (spilled, bytes) = pool.spilled();
        assert!(spilled >= 5, "{spilled} blocks spilled");
        assert!(bytes > 0);
        // Blocks 0..5 (samples 0..20) went first.
        for k in 0..5 {
            assert!(dir
                .path()
                .join(format!("pool/block-{k:06}.arrow"))
                .is_file());
        }
        assert_eq!(pool.range(0, 40).unwrap(), samples);
        assert_eq!(pool.range(13, 27).unwrap(), samples[13..27]);
        assert_eq!(pool.len(), 40);
        let lengths: Vec<u32> = samples.iter().map(|s| s.tokens.len() as u32).collect();
        assert_eq!(pool.token_lengths(), lengths);
        // A page of a spilled block, and a block in memory (not read from disk).
        assert!(pool.resident(0).is_none());
        let (batch, _) = pool.read_spilled_page(0, 0).unwrap();
        let columns = PageColumns::new(&batch, pool.spilled_path(0).unwrap()).unwrap();
        let page: Vec<EncodedSample> = (0..columns.len()).map(|r| columns.sample(r)).collect();
        assert_eq!(page, samples[..4]);
        let mut roomy = Pool::new(4, usize::MAX, dir.path().join("roomy"));
        for s in &samples[..8] {
            roomy.push(s.clone(), 0).unwrap();
        }
        assert_eq!(roomy.resident(1).as_deref(), Some(&samples[4..8].to_vec()));
        assert!(roomy.read_spilled_page(1, 0).is_err());
    }
}
