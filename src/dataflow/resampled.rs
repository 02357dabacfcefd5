//! A refit's resampled chunks, written from the previous version's Arrow batches.
//!
//! A refit that replays SSA ([`super::refit`]) writes every chunk's samples anew, but in a
//! chunk whose images did not change only the SSA samples do: the original captions and the
//! other methods' samples stay as they were. Those are taken from the previous version's
//! batches as they are read (`interleave`), and only the SSA samples are decoded (the ones
//! retracted) and encoded (the replayed ones). Each split's rows reach the writer in the order
//! a [`DatasetSink`](crate::export::DatasetSink) of the replayed rows would give them, so the
//! files are the same bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::compute::{filter_record_batch, interleave_record_batch};

use super::buckets::Chunk;
use super::state::Plan;
use crate::augment::original::ORIGINAL_METHOD;
use crate::augment::ssa::METHOD as SSA_METHOD;
use crate::error::{Error, Result};
use crate::export::{piece_batches, ChunkPiece, DatasetWriter, DEFAULT_FLUSH_ROWS};
use crate::schema::{batch_to_rows, rows_to_batch, SampleRow, TableKind};

/// Which of the stages made a sample, as far as the replay tells them apart.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Made {
    Original,
    Ssa,
    Other,
}

/// Where one of the previous version's samples is: its batch and row.
#[derive(Clone, Copy, Debug)]
struct OldSample {
    batch: usize,
    row: usize,
    made: Made,
}

/// Where a sample of the chunk being written comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Row `row` of the previous version's batch `batch`.
    Old { batch: usize, row: usize },
    /// The `n`th sample written anew.
    New(usize),
}

/// One resampled chunk's previous samples: the batches they were read in, and each image's
/// samples there.
#[derive(Default)]
pub(super) struct ChunkSamples {
    /// The previous version's sample batches of the chunk, each with its split.
    batches: Vec<(String, RecordBatch)>,
    /// Each image's previous samples in the order they were read (the images the plan
    /// computes or removes are not here: their samples are retracted).
    images: HashMap<String, Vec<OldSample>>,
    /// Each image's previous SSA samples, decoded: what its replay retracts.
    ssa: HashMap<String, Vec<SampleRow>>,
    /// Each image's replayed SSA samples ([`ChunkSamples::replay`]).
    replayed: HashMap<String, Vec<SampleRow>>,
}

impl ChunkSamples {
    /// Reads the samples of one chunk (its `pieces`, in the order a read back of rows takes
    /// them); the samples of images the plan computes or removes go to `retracted`.
    pub(super) fn read<'f>(
        dir: &Path,
        pieces: impl IntoIterator<Item = &'f ChunkPiece<'f>>,
        plan: &Plan,
        retracted: &mut BTreeMap<String, Vec<SampleRow>>,
    ) -> Result<ChunkSamples> {
        let mut chunk = ChunkSamples::default();
        for piece in pieces {
            for batch in piece_batches(dir, piece)? {
                chunk.index(batch, &piece.file.split, plan, retracted)?;
            }
        }
        Ok(chunk)
    }

    /// Adds one batch: where each image's samples are, and the decoded samples the replay
    /// retracts.
    fn index(
        &mut self,
        batch: RecordBatch,
        split: &str,
        plan: &Plan,
        retracted: &mut BTreeMap<String, Vec<SampleRow>>,
    ) -> Result<()> {
        let image_ids = string_column(&batch, "image_id")?;
        let methods = string_column(&batch, "method")?;
        let at = self.batches.len();
        let mut decoded = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let id = image_ids.value(row);
            let made = match methods.value(row) {
                ORIGINAL_METHOD => Made::Original,
                SSA_METHOD => Made::Ssa,
                _ => Made::Other,
            };
            let gone = plan.compute.contains(id) || plan.removed.contains(id);
            decoded.push(gone || made == Made::Ssa);
            if !gone {
                let sample = OldSample {
                    batch: at,
                    row,
                    made,
                };
                match self.images.get_mut(id) {
                    Some(samples) => samples.push(sample),
                    None => {
                        self.images.insert(id.to_string(), vec![sample]);
                    }
                }
            }
        }
        let kept = filter_record_batch(&batch, &BooleanArray::from(decoded))
            .map_err(|e| Error::arrow("reading back a chunk's samples", e))?;
        for sample in batch_to_rows::<SampleRow>(&kept)? {
            let id = sample.image_id.as_str();
            let to = match plan.compute.contains(id) || plan.removed.contains(id) {
                true => retracted.entry(sample.image_id.clone()).or_default(),
                false => self.ssa.entry(sample.image_id.clone()).or_default(),
            };
            to.push(sample);
        }
        self.batches.push((split.to_string(), batch));
        Ok(())
    }

    /// The images whose previous samples are here.
    pub(super) fn image_ids(&self) -> impl Iterator<Item = &String> {
        self.images.keys()
    }

    /// Gives image `id` its replayed SSA samples in place of its previous ones; returns the
    /// change ([`super::buckets::changelog`]).
    pub(super) fn replay(&mut self, id: &str, ssa: Vec<SampleRow>) -> Vec<(SampleRow, i8)> {
        let old = self.ssa.remove(id).unwrap_or_default();
        let changes = super::buckets::changelog(
            [(id.to_string(), old)].into(),
            [(id.to_string(), ssa.clone())].into(),
        );
        self.replayed.insert(id.to_string(), ssa);
        changes
    }

    /// Writes the chunk's samples: each image's previous ones with its SSA samples replayed
    /// where the old ones were (else after its original captions, as
    /// [`super::buckets::with_ssa_samples`] places them), and for an image without previous
    /// samples here, `others(id)`. Returns the rows written.
    pub(super) fn write(
        mut self,
        writer: &mut DatasetWriter,
        bucket: (usize, usize),
        chunk: &Chunk,
        mut others: impl FnMut(&str) -> Vec<SampleRow>,
    ) -> Result<u64> {
        let mut fresh: Vec<SampleRow> = Vec::new();
        let mut order: Vec<Source> = Vec::new();
        for id in chunk.ids {
            let Some(old) = self.images.remove(*id) else {
                for sample in others(id) {
                    order.push(Source::New(fresh.len()));
                    fresh.push(sample);
                }
                continue;
            };
            let at = old
                .iter()
                .position(|s| s.made == Made::Ssa)
                .unwrap_or_else(|| {
                    old.iter()
                        .rposition(|s| s.made == Made::Original)
                        .map_or(0, |i| i + 1)
                });
            let kept = |samples: &[OldSample]| -> Vec<Source> {
                (samples.iter())
                    .filter(|s| s.made != Made::Ssa)
                    .map(|s| Source::Old {
                        batch: s.batch,
                        row: s.row,
                    })
                    .collect()
            };
            order.extend(kept(&old[..at]));
            for sample in self.replayed.remove(*id).unwrap_or_default() {
                order.push(Source::New(fresh.len()));
                fresh.push(sample);
            }
            order.extend(kept(&old[at..]));
        }
        self.write_in_order(writer, bucket, chunk.key, &fresh, &order)?;
        Ok(order.len() as u64)
    }

    /// Hands the samples of `order` to the writer, split by split, in batches of at most
    /// [`DEFAULT_FLUSH_ROWS`] rows (the writer cuts its row groups by rows, not by batches).
    fn write_in_order(
        &self,
        writer: &mut DatasetWriter,
        bucket: (usize, usize),
        chunk: &str,
        fresh: &[SampleRow],
        order: &[Source],
    ) -> Result<()> {
        let fresh_batch = match fresh.is_empty() {
            true => None,
            false => Some(rows_to_batch(fresh)?),
        };
        let mut batches: Vec<&RecordBatch> = self.batches.iter().map(|(_, b)| b).collect();
        batches.extend(fresh_batch.as_ref());
        let new_at = self.batches.len();
        let mut by_split: BTreeMap<&str, Vec<(usize, usize)>> = BTreeMap::new();
        for source in order {
            let (split, at) = match *source {
                Source::Old { batch, row } => (self.batches[batch].0.as_str(), (batch, row)),
                Source::New(i) => (fresh[i].split.as_str(), (new_at, i)),
            };
            by_split.entry(split).or_default().push(at);
        }
        for (split, rows) in by_split {
            for part in rows.chunks(DEFAULT_FLUSH_ROWS) {
                let batch = interleave_record_batch(&batches, part)
                    .map_err(|e| Error::arrow("writing a chunk's samples", e))?;
                writer.write_bucket_batch(TableKind::Samples, split, bucket, chunk, &batch)?;
            }
        }
        Ok(())
    }
}

/// Column `name` of a samples batch, as strings.
fn string_column<'b>(batch: &'b RecordBatch, name: &str) -> Result<&'b arrow::array::StringArray> {
    batch
        .column_by_name(name)
        .and_then(|column| column.as_string_opt::<i32>())
        .filter(|column| column.null_count() == 0)
        .ok_or_else(|| {
            Error::invalid(
                "a chunk's samples read back",
                format!("no `{name}` column of strings"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::DatasetSink;
    use crate::ingest::{IngestCounts, RecordSink, Row};
    use crate::schema::{BoxXyxy, QualityScore};

    fn sample(image: &str, method: &str, n: usize, split: &str) -> SampleRow {
        SampleRow {
            sample_id: format!("{method}:{image}:{n}"),
            image_id: image.into(),
            split: split.into(),
            method: method.into(),
            text: format!("a {method} caption number {n} of image {image}"),
            control_boxes: (0..n % 3)
                .map(|i| BoxXyxy::new(i as f64, 1.0, 2.0 + n as f64, 3.5))
                .collect(),
            control_labels: (0..n % 3).map(|i| format!("label {i}")).collect(),
            coverage: n as f64 * 1.5,
            length_level: (n % 4) as i32,
            word_count: 7 + n as i32,
            verbs: vec!["walk".into(); n % 2],
            quality: (0..n % 2)
                .map(|_| QualityScore {
                    name: "lm".into(),
                    value: -(n as f64) / 7.0,
                })
                .collect(),
            provenance: Default::default(),
            image: None,
        }
    }

    /// Every image of the chunk, with its previous samples and what it has after the replay,
    /// placed by hand: the replayed SSA samples where the old ones were, else after the
    /// original captions, else first.
    struct Case {
        ids: Vec<String>,
        before: Vec<SampleRow>,
        replays: BTreeMap<String, Vec<SampleRow>>,
        after: Vec<SampleRow>,
        /// The samples a computed image has anew, and the image.
        computed: (String, Vec<SampleRow>),
    }

    fn case() -> Case {
        let splits = ["train", "validation", "test"];
        let mut case = Case {
            ids: Vec::new(),
            before: Vec::new(),
            replays: BTreeMap::new(),
            after: Vec::new(),
            computed: Default::default(),
        };
        for i in 0..4000 {
            let id = format!("{i:06}");
            let split = splits[i % 3];
            let originals: Vec<SampleRow> = (0..(i % 4))
                .map(|n| sample(&id, ORIGINAL_METHOD, n, split))
                .collect();
            let old_ssa: Vec<SampleRow> = (0..(i % 3))
                .map(|n| sample(&id, SSA_METHOD, n, split))
                .collect();
            let new_ssa: Vec<SampleRow> = (0..(i % 5))
                .map(|n| sample(&id, SSA_METHOD, 10 + n, split))
                .collect();
            let others: Vec<SampleRow> = (0..(i % 2 + 1))
                .map(|n| sample(&id, "cutswap", n, split))
                .collect();
            case.ids.push(id.clone());
            if i == 77 {
                // Computed anew: its old samples are retracted, its new ones written.
                case.before.extend(originals.iter().cloned());
                let new = vec![sample(&id, "clid", 1, split)];
                case.after.extend(new.iter().cloned());
                case.computed = (id, new);
                continue;
            }
            case.before.extend(originals.iter().cloned());
            case.before.extend(old_ssa.iter().cloned());
            case.before.extend(others.iter().cloned());
            case.after.extend(originals.iter().cloned());
            case.after.extend(new_ssa.iter().cloned());
            case.after.extend(others.iter().cloned());
            case.replays.insert(id, new_ssa);
        }
        case
    }

    /// The sha256 of each of a committed dataset's files, by split.
    fn committed(dir: &Path, writer: DatasetWriter) -> Vec<(String, String)> {
        let manifest = writer.commit(IngestCounts::default()).unwrap();
        let mut files: Vec<(String, String)> = (manifest.files.iter())
            .map(|f| (f.split.clone(), f.sha256.clone()))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}", dir.display());
        files
    }

    #[test]
    fn a_resampled_chunk_is_the_bytes_a_sink_of_its_rows_writes() {
        let case = case();
        assert!(
            case.after.len() > 2 * DEFAULT_FLUSH_ROWS,
            "{}",
            case.after.len()
        );
        let ids: Vec<&str> = case.ids.iter().map(String::as_str).collect();
        let chunk = Chunk { key: "", ids: &ids };
        let tmp = tempfile::tempdir().unwrap();

        // What the rows of the replayed samples, handed to a sink one by one, give.
        let by_rows = tmp.path().join("rows");
        let mut writer = DatasetWriter::create(&by_rows, "cfg", 1 << 30).unwrap();
        let mut sink = DatasetSink::bucket(&mut writer, (3, 8), chunk.key);
        for sample in &case.after {
            sink.row(Row::Sample(sample.clone())).unwrap();
        }
        sink.finish().unwrap();
        writer.finish_chunk(3, chunk.key).unwrap();
        let expected = committed(&by_rows, writer);

        // The previous samples as a read back gives them: each split's file in batches.
        let plan = Plan {
            compute: [case.computed.0.clone()].into(),
            ..Plan::default()
        };
        let mut retracted = BTreeMap::new();
        let mut samples = ChunkSamples::default();
        for split in ["test", "train", "validation"] {
            let rows: Vec<SampleRow> = (case.before.iter())
                .filter(|s| s.split == split)
                .cloned()
                .collect();
            for part in rows.chunks(1000) {
                let batch = rows_to_batch(part).unwrap();
                samples.index(batch, split, &plan, &mut retracted).unwrap();
            }
        }
        let computed_before: Vec<&SampleRow> = (case.before.iter())
            .filter(|s| s.image_id == case.computed.0)
            .collect();
        assert_eq!(retracted.len(), 1);
        assert_eq!(
            retracted[&case.computed.0].iter().collect::<Vec<_>>(),
            computed_before
        );
        let mut ids_here: Vec<&String> = samples.image_ids().collect();
        ids_here.sort();
        assert_eq!(ids_here.len(), case.ids.len() - 1);
        for (id, ssa) in &case.replays {
            let changes = samples.replay(id, ssa.clone());
            let old = (case.before.iter()).filter(|s| s.image_id == *id && s.method == SSA_METHOD);
            let expected: Vec<(SampleRow, i8)> = (old.map(|s| (s.clone(), -1)))
                .chain(ssa.iter().map(|s| (s.clone(), 1)))
                .collect();
            assert_eq!(changes, expected, "image {id}");
        }
        let by_batches = tmp.path().join("batches");
        let mut writer = DatasetWriter::create(&by_batches, "cfg", 1 << 30).unwrap();
        let computed = &case.computed;
        let others = |id: &str| match id == computed.0 {
            true => computed.1.clone(),
            false => Vec::new(),
        };
        let rows = samples.write(&mut writer, (3, 8), &chunk, others).unwrap();
        assert_eq!(rows, case.after.len() as u64);
        writer.finish_chunk(3, chunk.key).unwrap();
        assert_eq!(committed(&by_batches, writer), expected);
    }
}
