//! [`DatasetSink`]: the bridge from the readers' [`RecordSink`] to a [`DatasetWriter`].

use std::collections::BTreeMap;

use super::writer::DatasetWriter;
use crate::error::Result;
use crate::ingest::{IngestCounts, RecordSink, Row};
use crate::schema::{
    AmrRow, CaptionRow, DetectionRow, GbcGraphRow, GroundingRow, ImageRow, RejectedRow, SampleRow,
    SceneGraphRow, TableKind, TableRow,
};

/// Rows buffered across all tables before they are handed to the writer.
pub const DEFAULT_FLUSH_ROWS: usize = 8192;

/// Buffers typed rows per table (bounded by `flush_rows` rows in all) and writes them to a
/// [`DatasetWriter`]; rejected records go straight to its ledger. Counts records as readers
/// report them, for the commit.
///
/// Input tables go to the split named after the table; samples go to their own `split`.
/// Call [`finish`](DatasetSink::finish) after the last reader to write what is buffered.
pub struct DatasetSink<'w> {
    writer: &'w mut DatasetWriter,
    flush_rows: usize,
    buffered: usize,
    images: Vec<ImageRow>,
    captions: Vec<CaptionRow>,
    groundings: Vec<GroundingRow>,
    detections: Vec<DetectionRow>,
    amrs: Vec<AmrRow>,
    scene_graphs: Vec<SceneGraphRow>,
    gbc_graphs: Vec<GbcGraphRow>,
    samples: BTreeMap<String, Vec<SampleRow>>,
    counts: IngestCounts,
    rows_out: u64,
    /// `((bucket, buckets), chunk)`: every row goes to that chunk of that bucket of its split.
    bucket: Option<((usize, usize), String)>,
}

impl<'w> DatasetSink<'w> {
    pub fn new(writer: &'w mut DatasetWriter) -> DatasetSink<'w> {
        DatasetSink::with_flush_rows(writer, DEFAULT_FLUSH_ROWS)
    }

    pub fn with_flush_rows(writer: &'w mut DatasetWriter, flush_rows: usize) -> DatasetSink<'w> {
        DatasetSink {
            writer,
            flush_rows: flush_rows.max(1),
            buffered: 0,
            images: Vec::new(),
            captions: Vec::new(),
            groundings: Vec::new(),
            detections: Vec::new(),
            amrs: Vec::new(),
            scene_graphs: Vec::new(),
            gbc_graphs: Vec::new(),
            samples: BTreeMap::new(),
            counts: IngestCounts::default(),
            rows_out: 0,
            bucket: None,
        }
    }

    /// A sink whose rows all go to chunk `chunk` of bucket `bucket` of `buckets` of their split
    /// (see [`DatasetWriter::write_bucket`]).
    pub fn bucket(
        writer: &'w mut DatasetWriter,
        bucket: (usize, usize),
        chunk: &str,
    ) -> DatasetSink<'w> {
        let mut sink = DatasetSink::new(writer);
        sink.bucket = Some((bucket, chunk.to_string()));
        sink
    }

    /// Records read, accepted and rejected so far.
    pub fn counts(&self) -> IngestCounts {
        self.counts
    }

    /// Rows produced so far (over all tables).
    pub fn rows_out(&self) -> u64 {
        self.rows_out
    }

    /// Writes every buffered row to the writer.
    pub fn flush(&mut self) -> Result<()> {
        let bucket = self.bucket.as_ref().map(|(b, c)| (*b, c.as_str()));
        flush_table(self.writer, bucket, None, &mut self.images)?;
        flush_table(self.writer, bucket, None, &mut self.captions)?;
        flush_table(self.writer, bucket, None, &mut self.groundings)?;
        flush_table(self.writer, bucket, None, &mut self.detections)?;
        flush_table(self.writer, bucket, None, &mut self.amrs)?;
        flush_table(self.writer, bucket, None, &mut self.scene_graphs)?;
        flush_table(self.writer, bucket, None, &mut self.gbc_graphs)?;
        for (split, rows) in &mut self.samples {
            flush_table(self.writer, bucket, Some(split), rows)?;
        }
        self.buffered = 0;
        Ok(())
    }

    /// Writes `batch`, rows of `table` for `split`, to the sink's bucket chunk after the rows
    /// buffered so far, so that rows and batches are written in the order they came.
    pub fn write_batch(
        &mut self,
        table: TableKind,
        split: &str,
        batch: &arrow::record_batch::RecordBatch,
    ) -> Result<()> {
        if self.buffered > 0 {
            self.flush()?;
        }
        let Some((bucket, chunk)) = &self.bucket else {
            return Err(crate::error::Error::Usage(
                "a batch can be written only to a bucket's chunk".into(),
            ));
        };
        (self.writer).write_bucket_batch(table, split, *bucket, chunk, batch)?;
        self.rows_out += batch.num_rows() as u64;
        Ok(())
    }

    /// Flushes and returns the final counts.
    pub fn finish(mut self) -> Result<IngestCounts> {
        self.flush()?;
        Ok(self.counts)
    }
}

/// Writes `rows` to `split` (default: the table's name), in a bucket's chunk when given.
fn flush_table<R: TableRow>(
    writer: &mut DatasetWriter,
    bucket: Option<((usize, usize), &str)>,
    split: Option<&str>,
    rows: &mut Vec<R>,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let split = split.unwrap_or(R::KIND.name());
    match bucket {
        Some((bucket, chunk)) => writer.write_bucket(split, bucket, chunk, rows)?,
        None => writer.write_rows(split, rows)?,
    }
    rows.clear();
    Ok(())
}

impl RecordSink for DatasetSink<'_> {
    fn row(&mut self, row: Row) -> Result<()> {
        match row {
            Row::Image(r) => self.images.push(r),
            Row::Caption(r) => self.captions.push(r),
            Row::Grounding(r) => self.groundings.push(r),
            Row::Detection(r) => self.detections.push(r),
            Row::Amr(r) => self.amrs.push(r),
            Row::SceneGraph(r) => self.scene_graphs.push(r),
            Row::GbcGraph(r) => self.gbc_graphs.push(r),
            Row::Sample(r) => self.samples.entry(r.split.clone()).or_default().push(r),
        }
        self.rows_out += 1;
        self.buffered += 1;
        if self.buffered >= self.flush_rows {
            self.flush()?;
        }
        Ok(())
    }

    fn reject(&mut self, rejected: RejectedRow) -> Result<()> {
        self.counts.read += 1;
        self.counts.rejected += 1;
        self.writer.reject(rejected)
    }

    fn accepted(&mut self) -> Result<()> {
        self.counts.read += 1;
        self.counts.accepted += 1;
        Ok(())
    }
}
