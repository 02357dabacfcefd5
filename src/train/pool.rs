//! The training sink's pool: every encoded sample it received, in arrival order, in blocks of
//! `block_samples`. Blocks stay in memory up to a byte budget; beyond it, sealed blocks are
//! written to local disk as Arrow IPC files and read back when a window of training needs them
//! (blocks the trainer has already streamed through go first).
//!
//! A spilled block's file holds one record batch per page of [`PAGE_SAMPLES`] samples, so that
//! a reader after a few samples of it (the curriculum's draws, [`super::source`]) decodes one
//! page rather than the block.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, BooleanBuilder, Float32Array,
    Float32Builder, Int32Array, Int32Builder, Int64Array, Int64Builder, ListArray, ListBuilder,
};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;
use arrow::record_batch::RecordBatch;

use super::data::{EncodedSample, Region};
use crate::error::{Error, Result};

/// Samples per record batch of a spilled block's file: the unit [`Pool::read_page`] decodes.
pub const PAGE_SAMPLES: usize = 64;

/// One block of the pool.
struct Block {
    /// `None` once spilled.
    samples: Option<Arc<Vec<EncodedSample>>>,
    /// The block's IPC file once spilled.
    file: Option<PathBuf>,
    len: usize,
    bytes: usize,
}

/// Encoded samples in arrival order, partly on disk.
pub struct Pool {
    blocks: Vec<Block>,
    open: Vec<EncodedSample>,
    open_bytes: usize,
    block_samples: usize,
    budget: usize,
    dir: PathBuf,
    memory: usize,
    len: usize,
    spilled_blocks: usize,
    spilled_bytes: u64,
    /// Every sample's token count, in arrival order (what batch planning reads of a sample).
    token_lengths: Vec<usize>,
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
        }
    }

    /// Samples received.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of samples held in memory.
    pub fn memory(&self) -> usize {
        self.memory
    }

    /// The memory budget in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Every sample's token count, in arrival order.
    pub fn token_lengths(&self) -> &[usize] {
        &self.token_lengths
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
        self.token_lengths.push(sample.tokens.len());
        self.open.push(sample);
        self.open_bytes += bytes;
        self.memory += bytes;
        self.len += 1;
        if self.open.len() >= self.block_samples {
            self.seal();
        }
        self.spill_over_budget(consumed)
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
        while self.memory > self.budget {
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
        self.spilled_bytes += std::fs::metadata(&path).map_or(0, |m| m.len());
        self.spilled_blocks += 1;
        self.memory -= block.bytes;
        block.file = Some(path);
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
            (None, Some(file)) => Ok(Arc::new(read_block(file)?)),
            (None, None) => Err(Error::invalid(
                "training pool",
                format!("block {k} is lost"),
            )),
        }
    }

    /// The samples of sealed block `k` when it is in memory; `None` once spilled.
    pub fn resident(&self, k: usize) -> Option<Arc<Vec<EncodedSample>>> {
        self.blocks[k].samples.clone()
    }

    /// Page `page` of sealed block `k` (its samples `page * PAGE_SAMPLES..` up to the next
    /// page): decoded from the block's file alone when spilled, copied when in memory.
    pub fn read_page(&self, k: usize, page: usize) -> Result<Vec<EncodedSample>> {
        let block = &self.blocks[k];
        let start = page * PAGE_SAMPLES;
        let end = (start + PAGE_SAMPLES).min(block.len);
        match (&block.samples, &block.file) {
            (Some(samples), _) => Ok(samples.get(start..end).unwrap_or_default().to_vec()),
            (None, Some(file)) => read_block_page(file, page),
            (None, None) => Err(Error::invalid(
                "training pool",
                format!("block {k} is lost"),
            )),
        }
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

fn schema() -> Arc<Schema> {
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
        decode_page(&batch, path, &mut out)?;
    }
    Ok(out)
}

/// Reads page `page` (its record batch) of a block written by [`write_block`], and nothing
/// else of the file but its footer.
pub fn read_block_page(path: &Path, page: usize) -> Result<Vec<EncodedSample>> {
    let mut reader = open_block(path)?;
    if page >= reader.num_batches() {
        return Err(Error::record(
            path.display().to_string(),
            format!("page {page}"),
            format!(
                "the file has {} pages: not a training pool file of this pool",
                reader.num_batches()
            ),
        ));
    }
    reader.set_index(page).map_err(|e| arrow_error(path, e))?;
    let mut out = Vec::with_capacity(PAGE_SAMPLES);
    if let Some(batch) = reader.next() {
        let batch = batch.map_err(|e| arrow_error(path, e))?;
        decode_page(&batch, path, &mut out)?;
    }
    Ok(out)
}

/// Appends the samples of one record batch of a pool file to `out`.
fn decode_page(batch: &RecordBatch, path: &Path, out: &mut Vec<EncodedSample>) -> Result<()> {
    let tokens: &ListArray = column(batch, "tokens", path)?;
    let labels: &ListArray = column(batch, "region_labels", path)?;
    let geometry: &ListArray = column(batch, "region_geometry", path)?;
    let in_control: &ListArray = column(batch, "region_in_control", path)?;
    let feature_lengths: &ListArray = column(batch, "region_feature_lengths", path)?;
    let features: &ListArray = column(batch, "region_features", path)?;
    let pixels: &ListArray = column(batch, "region_pixels", path)?;
    let level: &Int64Array = column(batch, "length_level", path)?;
    let count: &Int64Array = column(batch, "word_count", path)?;
    let verb: &Int64Array = column(batch, "verb", path)?;
    let token_values: &Int64Array = values(tokens, path)?;
    let label_values: &Int64Array = values(labels, path)?;
    let geometry_values: &Float32Array = values(geometry, path)?;
    let control_values: &BooleanArray = values(in_control, path)?;
    let length_values: &Int32Array = values(feature_lengths, path)?;
    let feature_values: &Float32Array = values(features, path)?;
    let pixel_values: &BinaryArray = values(pixels, path)?;
    for row in 0..batch.num_rows() {
        let span = |list: &ListArray| {
            let offsets = list.value_offsets();
            (offsets[row] as usize, offsets[row + 1] as usize)
        };
        let (t0, t1) = span(tokens);
        let (r0, r1) = span(labels);
        let (g0, _) = span(geometry);
        let (f0, _) = span(features);
        let mut feature_at = f0;
        let mut regions = Vec::with_capacity(r1 - r0);
        for (k, r) in (r0..r1).enumerate() {
            let g = g0 + 5 * k;
            let mut geometry = [0f32; 5];
            for (i, v) in geometry.iter_mut().enumerate() {
                *v = geometry_values.value(g + i);
            }
            let length = length_values.value(r);
            let feature = (length >= 0).then(|| {
                let f = &feature_values.values()[feature_at..feature_at + length as usize];
                feature_at += length as usize;
                f.to_vec()
            });
            regions.push(Region {
                label: label_values.value(r),
                geometry,
                in_control: control_values.value(r),
                feature,
                pixels: pixel_values
                    .is_valid(r)
                    .then(|| pixel_values.value(r).to_vec()),
            });
        }
        out.push(EncodedSample {
            tokens: token_values.values()[t0..t1].to_vec(),
            regions,
            length_level: level.value(row),
            word_count: count.value(row),
            verb: verb.value(row),
        });
    }
    Ok(())
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
        assert_eq!(read_block_page(&path, 0).unwrap(), samples[..64]);
        assert_eq!(read_block_page(&path, 1).unwrap(), samples[64..128]);
        assert_eq!(read_block_page(&path, 2).unwrap(), samples[128..]);
        let err = read_block_page(&path, 3).unwrap_err().to_string();
        assert!(err.contains("3 pages"), "{err}");
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
        let lengths: Vec<usize> = samples.iter().map(|s| s.tokens.len()).collect();
        assert_eq!(pool.token_lengths(), lengths);
        // A page of a spilled block, and of one in memory.
        assert!(pool.resident(0).is_none());
        assert_eq!(pool.read_page(0, 0).unwrap(), samples[..4]);
        let mut roomy = Pool::new(4, usize::MAX, dir.path().join("roomy"));
        for s in &samples[..8] {
            roomy.push(s.clone(), 0).unwrap();
        }
        assert_eq!(roomy.resident(1).as_deref(), Some(&samples[4..8].to_vec()));
        assert_eq!(roomy.read_page(1, 0).unwrap(), samples[4..8]);
    }
}
