//! Where a training run's samples come from: memory, or the training sink's pool.
//!
//! The loader ([`super::trainer::spawn_loader`]), the scorers
//! ([`super::trainer::score_samples`]) and the curriculum's weighted draws address samples by
//! index; a [`SampleSource`] hands them the samples of one batch. `capflow train --data` keeps
//! its encoded samples in memory ([`SampleSource::in_memory`]). The training sink's curriculum
//! runs over its pool as it is ([`SampleSource::pooled`]): blocks still in memory are read in
//! place; of a spilled block, the pages ([`PAGE_SAMPLES`] samples) holding the samples asked
//! for are read from its file, kept in a small cache as Arrow record batches, and only the
//! samples asked for are decoded ([`PageColumns`]). Which samples a batch holds does not
//! depend on where they come from, so a run over the pool trains exactly as the same run over
//! the same samples in memory.
//!
//! # Memory
//!
//! Over a pool, the samples held are the pool's blocks still in memory (at most its budget, or
//! one block when a block is larger than the budget), the cache, and the batches being built or
//! queued for the trainer. The cache holds pages up to [`CACHED_BLOCKS`] times the bytes of the
//! pool's largest block ([`super::pool::sample_bytes`] accounting), each page counted by the
//! bytes read for it (its record batch in the file, which its arrays use as they are), and
//! evicts the least recently used page first. The token counts are the pool's index (within
//! its budget), read in place.
//!
//! # Threads
//!
//! Clones share the pool and its cache. A page is read from disk without the cache's lock held,
//! so threads fetching samples at once (the loader beside a scorer) wait on each other only to
//! look a page up or to add one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use arrow::record_batch::RecordBatch;
use serde::Serialize;

use super::batch::{batch_of, build_batch, Batch, RegionInputs};
use super::data::EncodedSample;
use super::pool::{token_count, PageColumns, Pool, PAGE_SAMPLES};
use crate::error::{Error, Result};

/// The cache of a pooled source holds at most this many times the bytes of the pool's largest
/// block.
pub const CACHED_BLOCKS: usize = 4;

/// Encoded samples addressed by index: in memory, or in a sealed pool. Clones share the samples
/// (and the pool's cache).
#[derive(Clone)]
pub struct SampleSource {
    store: Store,
}

#[derive(Clone)]
enum Store {
    Memory {
        samples: Arc<Vec<EncodedSample>>,
        /// Every sample's token count (what batch planning reads of a sample).
        lengths: Arc<[u32]>,
    },
    Pool(Arc<PooledSamples>),
}

/// A sealed pool with the cache in front of its spilled blocks.
struct PooledSamples {
    pool: Pool,
    /// Index of each block's first sample.
    starts: Vec<usize>,
    cache: Mutex<PageCache>,
}

/// What the cache of a pooled source did, in bytes of the pages it held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Most bytes the cache may hold: [`CACHED_BLOCKS`] times the pool's largest block.
    pub capacity_bytes: usize,
    /// Most bytes, and most pages, it held at once.
    pub peak_bytes: usize,
    pub peak_pages: usize,
    /// Pages read from disk, and pages found in the cache.
    pub page_reads: u64,
    pub page_hits: u64,
    /// Bytes read from disk for the pages.
    pub bytes_read: u64,
}

/// Pages of spilled blocks as read from their files, the least recently used first.
struct PageCache {
    pages: VecDeque<CachedPage>,
    bytes: usize,
    stats: CacheStats,
}

struct CachedPage {
    block: usize,
    page: usize,
    batch: RecordBatch,
    bytes: usize,
}

impl PageCache {
    fn get(&mut self, block: usize, page: usize) -> Option<RecordBatch> {
        let at = self
            .pages
            .iter()
            .position(|p| p.block == block && p.page == page)?;
        let hit = self.pages.remove(at)?;
        let batch = hit.batch.clone();
        self.pages.push_back(hit);
        self.stats.page_hits += 1;
        Some(batch)
    }

    /// Adds a page read from disk (`bytes` of it), unless another thread added it meanwhile.
    fn insert(&mut self, block: usize, page: usize, batch: RecordBatch, bytes: usize) {
        self.stats.page_reads += 1;
        self.stats.bytes_read += bytes as u64;
        if self
            .pages
            .iter()
            .any(|p| p.block == block && p.page == page)
        {
            return;
        }
        while !self.pages.is_empty() && self.bytes + bytes > self.stats.capacity_bytes {
            if let Some(old) = self.pages.pop_front() {
                self.bytes -= old.bytes;
            }
        }
        self.pages.push_back(CachedPage {
            block,
            page,
            batch,
            bytes,
        });
        self.bytes += bytes;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.bytes);
        self.stats.peak_pages = self.stats.peak_pages.max(self.pages.len());
    }
}

impl PooledSamples {
    fn cache(&self) -> std::sync::MutexGuard<'_, PageCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Block of sample `j` and its offset in the block.
    fn locate(&self, j: usize) -> Result<(usize, usize)> {
        if j >= self.pool.len() {
            return Err(Error::invalid(
                "training pool",
                format!("sample {j} asked of a pool of {}", self.pool.len()),
            ));
        }
        let k = self.starts.partition_point(|&start| start <= j) - 1;
        Ok((k, j - self.starts[k]))
    }

    /// Page `page` of spilled block `k`, from the cache or its file (read without the cache's
    /// lock held).
    fn spilled_page(&self, k: usize, page: usize) -> Result<RecordBatch> {
        if let Some(batch) = self.cache().get(k, page) {
            return Ok(batch);
        }
        let (batch, bytes) = self.pool.read_spilled_page(k, page)?;
        self.cache().insert(k, page, batch.clone(), bytes);
        Ok(batch)
    }

    /// Copies of samples `indices`, in that order. Each block in memory is looked at in
    /// place; each page of a spilled block is fetched once, and each sample asked for decoded
    /// once, however many times it is asked for.
    fn fetch(&self, indices: &[usize]) -> Result<Vec<EncodedSample>> {
        let mut wanted = Vec::with_capacity(indices.len());
        for (row, &j) in indices.iter().enumerate() {
            let (k, offset) = self.locate(j)?;
            wanted.push((k, offset, row));
        }
        wanted.sort_unstable();
        let mut rows: Vec<Option<EncodedSample>> = vec![None; indices.len()];
        let mut at = 0;
        while at < wanted.len() {
            let (k, offset, _) = wanted[at];
            if let Some(block) = self.pool.resident(k) {
                while at < wanted.len() && wanted[at].0 == k {
                    let (_, offset, row) = wanted[at];
                    rows[row] = block.get(offset).cloned();
                    at += 1;
                }
                continue;
            }
            let page = offset / PAGE_SAMPLES;
            let batch = self.spilled_page(k, page)?;
            let path = self
                .pool
                .spilled_path(k)
                .unwrap_or(std::path::Path::new(""));
            let columns = PageColumns::new(&batch, path)?;
            let first = page * PAGE_SAMPLES;
            let mut last: Option<(usize, usize)> = None;
            while at < wanted.len() && (wanted[at].0, wanted[at].1 / PAGE_SAMPLES) == (k, page) {
                let (_, offset, row) = wanted[at];
                rows[row] = match last {
                    // The same sample again: a copy of the one decoded.
                    Some((o, r)) if o == offset => rows[r].clone(),
                    _ => (offset - first < columns.len()).then(|| columns.sample(offset - first)),
                };
                last = Some((offset, row));
                at += 1;
            }
        }
        rows.into_iter()
            .zip(indices)
            .map(|(row, j)| {
                row.ok_or_else(|| {
                    Error::invalid(
                        "training pool",
                        format!("sample {j} is missing from its block"),
                    )
                })
            })
            .collect()
    }
}

impl SampleSource {
    /// Samples held in memory; an error when one has more than `u32::MAX` tokens.
    pub fn in_memory(samples: Arc<Vec<EncodedSample>>) -> Result<SampleSource> {
        let lengths = samples
            .iter()
            .map(token_count)
            .collect::<Result<Arc<[u32]>>>()?;
        Ok(SampleSource {
            store: Store::Memory { samples, lengths },
        })
    }

    /// The samples of `pool` (sealed here), read where they are.
    pub fn pooled(mut pool: Pool) -> SampleSource {
        pool.seal();
        let mut starts = Vec::with_capacity(pool.block_count());
        let mut start = 0;
        let mut largest = 0;
        for k in 0..pool.block_count() {
            let (len, bytes) = pool.block_size(k);
            starts.push(start);
            start += len;
            largest = largest.max(bytes);
        }
        let cache = PageCache {
            pages: VecDeque::new(),
            bytes: 0,
            stats: CacheStats {
                capacity_bytes: CACHED_BLOCKS * largest,
                ..CacheStats::default()
            },
        };
        SampleSource {
            store: Store::Pool(Arc::new(PooledSamples {
                pool,
                starts,
                cache: Mutex::new(cache),
            })),
        }
    }

    pub fn len(&self) -> usize {
        self.token_lengths().len()
    }

    pub fn is_empty(&self) -> bool {
        self.token_lengths().is_empty()
    }

    /// Every sample's token count, by index.
    pub fn token_lengths(&self) -> &[u32] {
        match &self.store {
            Store::Memory { lengths, .. } => lengths,
            Store::Pool(pooled) => pooled.pool.token_lengths(),
        }
    }

    /// The batch of samples `indices` ([`build_batch`]); an error when a spilled block cannot
    /// be read back.
    pub fn batch(&self, indices: &[usize], inputs: RegionInputs) -> Result<Batch> {
        match &self.store {
            Store::Memory { samples, .. } => Ok(build_batch(samples, indices, inputs)),
            Store::Pool(pooled) => {
                let fetched = pooled.fetch(indices)?;
                let rows: Vec<&EncodedSample> = fetched.iter().collect();
                Ok(batch_of(&rows, indices, inputs))
            }
        }
    }

    /// The pool the samples are read from, if any.
    pub fn pool(&self) -> Option<&Pool> {
        match &self.store {
            Store::Memory { .. } => None,
            Store::Pool(pooled) => Some(&pooled.pool),
        }
    }

    /// What the cache in front of the pool's spilled blocks did so far, if there is a pool.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        match &self.store {
            Store::Memory { .. } => None,
            Store::Pool(pooled) => Some(pooled.cache().stats),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::SplitMix64;
    use crate::train::data::Region;
    use crate::train::pool::sample_bytes;
    use tch::Tensor;

    fn sample(n: usize) -> EncodedSample {
        let n = n as i64;
        EncodedSample {
            tokens: (0..2 + n % 9).collect(),
            regions: (0..n % 4)
                .map(|k| Region {
                    label: 3 + k,
                    geometry: [0.1 * k as f32, 0.2, 0.3, 0.4, 0.05 * n as f32],
                    in_control: (n + k) % 2 == 0,
                    feature: (k == 1).then(|| vec![1.5, -2.0, n as f32]),
                    pixels: (k == 2).then(|| vec![0, 7, n as u8]),
                })
                .collect(),
            length_level: n % 4,
            word_count: n,
            verb: 1 + n % 3,
        }
    }

    fn same(a: &Tensor, b: &Tensor) {
        assert!(a.equal(b), "{a:?} against {b:?}");
    }

    #[test]
    fn a_spilled_pool_gives_the_batches_of_its_samples_in_memory_within_its_cache() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<EncodedSample> = (0..1000).map(sample).collect();
        let block = 100;
        let block_bytes: Vec<usize> = samples
            .chunks(block)
            .map(|c| c.iter().map(sample_bytes).sum())
            .collect();
        let largest = block_bytes.iter().copied().max().unwrap();
        // Room for one block and the token counts (4 bytes a sample).
        let mut pool = Pool::new(block, largest + 1 + 4 * 1000, dir.path().join("pool"));
        for (k, s) in samples.iter().enumerate() {
            pool.push(s.clone(), k).unwrap();
        }
        assert_eq!(pool.spilled().0, 9);
        let pooled = SampleSource::pooled(pool);
        let memory = SampleSource::in_memory(Arc::new(samples.clone())).unwrap();
        assert_eq!(pooled.token_lengths(), memory.token_lengths());
        let inputs = RegionInputs {
            feature_dim: 3,
            image_crop: 1,
        };
        let mut rng = SplitMix64::new(11);
        for _ in 0..40 {
            // Draws with replacement, in no order, across blocks and pages.
            let indices: Vec<usize> = (0..1 + rng.below(48)).map(|_| rng.below(1000)).collect();
            let (a, b) = (
                pooled.batch(&indices, inputs).unwrap(),
                memory.batch(&indices, inputs).unwrap(),
            );
            same(&a.inputs, &b.inputs);
            same(&a.targets, &b.targets);
            same(&a.input.controls, &b.input.controls);
            same(&a.input.region_labels, &b.input.region_labels);
            same(&a.input.region_geometry, &b.input.region_geometry);
            same(&a.input.region_flags, &b.input.region_flags);
            same(
                a.input.region_features.as_ref().unwrap(),
                b.input.region_features.as_ref().unwrap(),
            );
            same(
                a.input.region_pixels.as_ref().unwrap(),
                b.input.region_pixels.as_ref().unwrap(),
            );
            assert_eq!((a.tokens, &a.samples), (b.tokens, &indices));
        }
        let stats = pooled.cache_stats().unwrap();
        assert_eq!(stats.capacity_bytes, CACHED_BLOCKS * largest);
        assert!(stats.peak_bytes <= CACHED_BLOCKS * largest, "{stats:?}");
        assert!(stats.page_reads > 0 && stats.page_hits > 0, "{stats:?}");
        // Most of the spilled samples were asked for, fewer were ever held at once.
        let pool = pooled.pool().unwrap();
        let spilled: usize =
            block_bytes.iter().sum::<usize>() - (pool.memory() - pool.index_bytes());
        assert!(stats.peak_bytes < spilled / 2, "{stats:?} of {spilled}");
        // Two threads fetching at once (each page read without the cache's lock) get the
        // same batches.
        std::thread::scope(|scope| {
            for t in 0..2 {
                let (pooled, memory) = (pooled.clone(), memory.clone());
                scope.spawn(move || {
                    let mut rng = SplitMix64::new(100 + t);
                    for _ in 0..20 {
                        let indices: Vec<usize> = (0..32).map(|_| rng.below(1000)).collect();
                        let a = pooled.batch(&indices, inputs).unwrap();
                        let b = memory.batch(&indices, inputs).unwrap();
                        same(&a.inputs, &b.inputs);
                        same(
                            a.input.region_pixels.as_ref().unwrap(),
                            b.input.region_pixels.as_ref().unwrap(),
                        );
                    }
                });
            }
        });
        let after = pooled.cache_stats().unwrap();
        assert!(after.page_reads > stats.page_reads, "{after:?}");
        assert!(after.peak_bytes <= CACHED_BLOCKS * largest, "{after:?}");
        let err = pooled.batch(&[3, 1000], inputs).unwrap_err().to_string();
        assert!(err.contains("sample 1000"), "{err}");
    }
}
