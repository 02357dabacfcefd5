//! Where a training run's samples come from: memory, or the training sink's pool.
//!
//! The loader ([`super::trainer::spawn_loader`]), the scorers
//! ([`super::trainer::score_samples`]) and the curriculum's weighted draws address samples by
//! index; a [`SampleSource`] hands them the samples of one batch. `capflow train --data` keeps
//! its encoded samples in memory ([`SampleSource::in_memory`]). The training sink's curriculum
//! runs over its pool as it is ([`SampleSource::pooled`]): blocks still in memory are read in
//! place, spilled blocks a page ([`PAGE_SAMPLES`] samples) at a time through a small cache of
//! decoded pages. Which samples a batch holds does not depend on where they come from, so a run
//! over the pool trains exactly as the same run over the same samples in memory.
//!
//! # Memory
//!
//! Over a pool, the samples held are the pool's blocks still in memory (at most its budget, or
//! one block when a block is larger than the budget), the cache, and the batches being built or
//! queued for the trainer. The cache holds at most [`CACHED_BLOCKS`] times the bytes of the
//! pool's largest block ([`sample_bytes`] accounting), evicting the least recently used page
//! first. Besides, the source keeps every sample's token count (one `usize` each) and where each
//! block starts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::batch::{batch_of, build_batch, Batch, RegionInputs};
use super::data::EncodedSample;
use super::pool::{sample_bytes, Pool, PAGE_SAMPLES};
use crate::error::{Error, Result};

/// The cache of a pooled source holds at most this many times the bytes of the pool's largest
/// block.
pub const CACHED_BLOCKS: usize = 4;

/// Encoded samples addressed by index: in memory, or in a sealed pool. Clones share the samples
/// (and the pool's cache).
#[derive(Clone)]
pub struct SampleSource {
    /// Every sample's token count (what batch planning reads of a sample).
    lengths: Arc<[usize]>,
    store: Store,
}

#[derive(Clone)]
enum Store {
    Memory(Arc<Vec<EncodedSample>>),
    Pool(Arc<PooledSamples>),
}

/// A sealed pool with the cache in front of its spilled blocks.
struct PooledSamples {
    pool: Pool,
    /// Index of each block's first sample.
    starts: Vec<usize>,
    cache: Mutex<PageCache>,
}

/// What the cache of a pooled source did, in [`sample_bytes`] accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Most bytes the cache may hold: [`CACHED_BLOCKS`] times the pool's largest block.
    pub capacity_bytes: usize,
    /// Most bytes, and most pages, it held at once.
    pub peak_bytes: usize,
    pub peak_pages: usize,
    /// Pages decoded from disk, and pages found in the cache.
    pub page_reads: u64,
    pub page_hits: u64,
}

/// Decoded pages of spilled blocks, the least recently used first.
struct PageCache {
    pages: VecDeque<CachedPage>,
    bytes: usize,
    stats: CacheStats,
}

struct CachedPage {
    block: usize,
    page: usize,
    samples: Arc<Vec<EncodedSample>>,
    bytes: usize,
}

impl PageCache {
    fn get(&mut self, block: usize, page: usize) -> Option<Arc<Vec<EncodedSample>>> {
        let at = self
            .pages
            .iter()
            .position(|p| p.block == block && p.page == page)?;
        let hit = self.pages.remove(at)?;
        let samples = hit.samples.clone();
        self.pages.push_back(hit);
        self.stats.page_hits += 1;
        Some(samples)
    }

    fn insert(&mut self, block: usize, page: usize, samples: Arc<Vec<EncodedSample>>) {
        let bytes: usize = samples.iter().map(sample_bytes).sum();
        while !self.pages.is_empty() && self.bytes + bytes > self.stats.capacity_bytes {
            if let Some(old) = self.pages.pop_front() {
                self.bytes -= old.bytes;
            }
        }
        self.pages.push_back(CachedPage {
            block,
            page,
            samples,
            bytes,
        });
        self.bytes += bytes;
        self.stats.page_reads += 1;
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

    /// The samples of page `page` of block `k`, with the offset in the block of the first of
    /// them: the whole block when it is in memory, else the page from the cache or its file.
    fn page(&self, k: usize, page: usize) -> Result<(Arc<Vec<EncodedSample>>, usize)> {
        if let Some(block) = self.pool.resident(k) {
            return Ok((block, 0));
        }
        let mut cache = self.cache();
        if let Some(samples) = cache.get(k, page) {
            return Ok((samples, page * PAGE_SAMPLES));
        }
        let samples = Arc::new(self.pool.read_page(k, page)?);
        cache.insert(k, page, samples.clone());
        Ok((samples, page * PAGE_SAMPLES))
    }

    /// Copies of samples `indices`, in that order; each page they need is fetched once.
    fn fetch(&self, indices: &[usize]) -> Result<Vec<EncodedSample>> {
        let mut wanted = Vec::with_capacity(indices.len());
        for (row, &j) in indices.iter().enumerate() {
            let (k, offset) = self.locate(j)?;
            wanted.push((k, offset, row));
        }
        wanted.sort_unstable();
        let mut rows: Vec<Option<EncodedSample>> = vec![None; indices.len()];
        let mut current: Option<(usize, usize, Arc<Vec<EncodedSample>>, usize)> = None;
        for (k, offset, row) in wanted {
            let page = offset / PAGE_SAMPLES;
            let (samples, first) = match current.take() {
                Some((ck, cp, samples, first)) if (ck, cp) == (k, page) => (samples, first),
                _ => self.page(k, page)?,
            };
            rows[row] = samples.get(offset - first).cloned();
            current = Some((k, page, samples, first));
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
    /// Samples held in memory.
    pub fn in_memory(samples: Arc<Vec<EncodedSample>>) -> SampleSource {
        SampleSource {
            lengths: samples.iter().map(|s| s.tokens.len()).collect(),
            store: Store::Memory(samples),
        }
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
            lengths: pool.token_lengths().into(),
            store: Store::Pool(Arc::new(PooledSamples {
                pool,
                starts,
                cache: Mutex::new(cache),
            })),
        }
    }

    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Every sample's token count, by index.
    pub fn token_lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// The batch of samples `indices` ([`build_batch`]); an error when a spilled block cannot
    /// be read back.
    pub fn batch(&self, indices: &[usize], inputs: RegionInputs) -> Result<Batch> {
        match &self.store {
            Store::Memory(samples) => Ok(build_batch(samples, indices, inputs)),
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
            Store::Memory(_) => None,
            Store::Pool(pooled) => Some(&pooled.pool),
        }
    }

    /// What the cache in front of the pool's spilled blocks did so far, if there is a pool.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        match &self.store {
            Store::Memory(_) => None,
            Store::Pool(pooled) => Some(pooled.cache().stats),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::SplitMix64;
    use crate::train::data::Region;
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
        // Room for one block in memory: nine of ten are spilled.
        let block_bytes: Vec<usize> = samples
            .chunks(block)
            .map(|c| c.iter().map(sample_bytes).sum())
            .collect();
        let largest = block_bytes.iter().copied().max().unwrap();
        let mut pool = Pool::new(block, largest + 1, dir.path().join("pool"));
        for (k, s) in samples.iter().enumerate() {
            pool.push(s.clone(), k).unwrap();
        }
        assert_eq!(pool.spilled().0, 9);
        let pooled = SampleSource::pooled(pool);
        let memory = SampleSource::in_memory(Arc::new(samples.clone()));
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
        let spilled: usize = block_bytes.iter().sum::<usize>() - pooled.pool().unwrap().memory();
        assert!(stats.peak_bytes < spilled / 2, "{stats:?} of {spilled}");
        let err = pooled.batch(&[3, 1000], inputs).unwrap_err().to_string();
        assert!(err.contains("sample 1000"), "{err}");
    }
}
