//! A run's dataset in buckets: every table split by a hash of the image key, one shard per
//! bucket, rows ordered by image id.
//!
//! A bucket's bytes depend only on the rows of its images, so a bucket none of whose images
//! changed is carried forward as the same file (copy-on-write), and any number of workers or
//! processes produce the same files.

use std::collections::BTreeMap;
use std::path::Path;

use super::runtime::{CollectedRun, KeyedRow};
use super::state::{bucket_of, Plan};
use crate::error::Result;
use crate::export::{read_file_rows, shard_index, DatasetSink, DatasetWriter, Manifest};
use crate::ingest::{RecordSink, Row};
use crate::schema::{SampleRow, TableKind};

/// How a run's rows are written into buckets.
pub struct BucketExport<'a> {
    pub buckets: usize,
    pub plan: &'a Plan,
    /// The dataset version this run replaces, with its manifest's checksum.
    pub previous: Option<(&'a Manifest, &'a str)>,
    /// The dataset directory.
    pub dir: &'a Path,
}

/// What [`BucketExport::write`] did.
#[derive(Debug, Default)]
pub struct Exported {
    /// Samples added (+1) and retracted (−1) relative to the previous version, by image id.
    pub changes: Vec<(SampleRow, i8)>,
    /// Rows in this version's bucket files (written and carried).
    pub rows_written: u64,
    /// Buckets written anew, and carried forward unchanged.
    pub written: usize,
    pub carried: usize,
}

impl BucketExport<'_> {
    /// Writes (or carries forward) every bucket in `owned`: the input rows of `collected`, the
    /// samples of the images the plan computed (taken from `new_samples`), and the previous
    /// version's samples of the images it did not.
    pub fn write(
        &self,
        writer: &mut DatasetWriter,
        collected: &CollectedRun,
        owned: &[usize],
        new_samples: &mut BTreeMap<String, Vec<SampleRow>>,
    ) -> Result<Exported> {
        let buckets = self.buckets;
        let plan = self.plan;
        let mut by_bucket: Vec<Vec<&KeyedRow>> = vec![Vec::new(); buckets];
        for keyed in &collected.rows {
            by_bucket[bucket_of(keyed.row.image_id(), buckets)].push(keyed);
        }
        let mut retracted: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
        let mut added: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
        if let (Some(_), Some((manifest, _))) = (&plan.full, self.previous) {
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
        for &bucket in owned {
            let previous_files = self.previous.map(|(m, _)| {
                m.files
                    .iter()
                    .filter(move |f| {
                        f.table != TableKind::Rejected
                            && shard_index(&f.path) == Some((bucket, buckets))
                    })
                    .collect::<Vec<_>>()
            });
            if let Some(files) = &previous_files {
                if !plan.touches(bucket, buckets) {
                    for file in files {
                        writer.carry(file)?;
                        exported.rows_written += file.rows;
                    }
                    exported.carried += 1;
                    continue;
                }
            }
            // The samples of this bucket, by image: the previous version's for images that stay
            // as they were, this run's for the images it computed.
            let mut samples: BTreeMap<String, Vec<SampleRow>> = BTreeMap::new();
            if plan.full.is_none() {
                for file in previous_files.iter().flatten() {
                    if file.table != TableKind::Samples {
                        continue;
                    }
                    for sample in read_file_rows::<SampleRow>(self.dir, file)? {
                        let id = sample.image_id.clone();
                        if plan.compute.contains(&id) || plan.removed.contains(&id) {
                            retracted.entry(id).or_default().push(sample);
                        } else {
                            samples.entry(id).or_default().push(sample);
                        }
                    }
                }
            }
            let computed = plan
                .compute
                .iter()
                .filter(|id| bucket_of(id, buckets) == bucket);
            for id in computed {
                if let Some(new) = new_samples.remove(id) {
                    added.insert(id.clone(), new.clone());
                    samples.insert(id.clone(), new);
                }
            }
            let rows = &mut by_bucket[bucket];
            rows.sort_by(|a, b| {
                (a.row.image_id(), a.unit, a.ordinal).cmp(&(b.row.image_id(), b.unit, b.ordinal))
            });
            let mut sink = DatasetSink::bucket(writer, bucket, buckets);
            for keyed in rows.iter() {
                sink.row(keyed.row.clone())?;
            }
            for sample in samples.into_values().flatten() {
                sink.row(Row::Sample(sample))?;
            }
            exported.rows_written += sink.rows_out();
            sink.finish()?;
            exported.written += 1;
        }
        exported.changes = changelog(retracted, added);
        Ok(exported)
    }
}

/// Per image, in image id order: the retracted samples that are not added back unchanged (−1),
/// then the added samples that were not there before (+1).
fn changelog(
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
