//! How a streaming run divides its memory budget (`--memory-limit`) among its workers.
//!
//! A process's resident memory is about `PROCESS_BYTES + workers · (WORKER_BYTES +
//! PART_EXPANSION · part)`: what the process holds whatever its workers do, what each worker
//! holds whatever its parts' size, and what a part costs once decoded. The part size is the one
//! knob of the three: it is chosen so that the sum fits the budget, between [`MIN_PART_BYTES`]
//! and [`MAX_PART_BYTES`]. A budget below the sum at the smallest parts cannot be kept by this
//! process; [`PartBudget::fits`] says so, and the run says it to the user.
//!
//! The three constants were measured on the shipped SSA recipe over 200,000 synthetic images
//! (peak RSS with parts of 4 KiB to 2 MiB and 1 to 8 workers: BENCHMARKS.md, "A budget divided
//! among the workers"), rounded up: at 20,000 images the same runs hold less. Other recipes hold
//! less per part (no AMR graphs) and have smaller models.

/// What a process holds whatever the number of its workers and the size of their parts: the
/// binary's pages (about 26 MB), the runtime, the fitted models and the main thread's buffers.
pub const PROCESS_BYTES: u64 = 104 << 20;

/// What a worker holds whatever the size of its parts: its share of the exchange and the spill
/// buffers, its writer thread's open Parquet writers (a compression context per column), and
/// the allocator's pages of its two threads.
pub const WORKER_BYTES: u64 = 24 << 20;

/// Resident bytes a worker holds per encoded byte of its part size: the part decoded into the
/// stages' typed rows and the samples they make, the part that waits for the writer, and the
/// one the writer writes.
pub const PART_EXPANSION: u64 = 12;

/// The smallest part: below it a part costs more in rounds of the stage dataflow than it saves.
pub const MIN_PART_BYTES: u64 = 4 << 10;

/// The largest part a worker reads back at once, in encoded (Arrow) bytes, and the most of a
/// part's Arrow data whose images go through the stages at once: about 300 images of a synth
/// run, a bucket chunk or so. Larger parts only hold more memory: each range is one round of
/// the stage dataflow, whose cost per round is small beside a range's images.
pub const MAX_PART_BYTES: u64 = 2 << 20;

/// A process's part size for its workers under a memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartBudget {
    /// The most encoded bytes of a worker's part.
    pub part_bytes: u64,
    /// Whether the budget holds the process at that part size; when not, parts are the
    /// smallest and the process may still pass the budget.
    pub fits: bool,
}

impl PartBudget {
    /// The part size of `workers` workers of one process under `memory_limit` bytes.
    pub fn divide(memory_limit: u64, workers: usize) -> PartBudget {
        let workers = workers.max(1) as u64;
        let spare = memory_limit.saturating_sub(Self::floor(workers));
        let part_bytes = spare / (workers * PART_EXPANSION);
        PartBudget {
            part_bytes: part_bytes.clamp(MIN_PART_BYTES, MAX_PART_BYTES),
            fits: part_bytes >= MIN_PART_BYTES,
        }
    }

    /// The least budget in which `workers` workers of one process fit, with the smallest parts.
    pub fn least_limit(workers: usize) -> u64 {
        let workers = workers.max(1) as u64;
        Self::floor(workers) + workers * PART_EXPANSION * MIN_PART_BYTES
    }

    /// What the process and its workers hold before any part.
    fn floor(workers: u64) -> u64 {
        PROCESS_BYTES + workers * WORKER_BYTES
    }

    /// A reader sends on while the batches it has sent to other workers and that they have not
    /// yet spilled stay under a few parts' worth; beyond that a slower worker would queue them.
    pub fn in_flight_window(&self) -> u64 {
        4 * self.part_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_default_budget_gives_the_largest_parts_up_to_many_workers() {
        // 1 GiB - 104 MiB - 16 workers · 24 MiB = 536 MiB; / (16 · 12) = 2.79 MiB: the ceiling.
        for workers in [1, 2, 4, 16] {
            let budget = PartBudget::divide(1024 * MIB, workers);
            assert_eq!(budget.part_bytes, 2 * MIB, "{workers} workers");
            assert!(budget.fits);
        }
        // 32 workers: 1024 - 104 - 768 = 152 MiB; / (32 · 12) = 152/384 MiB.
        let budget = PartBudget::divide(1024 * MIB, 32);
        assert_eq!(budget.part_bytes, 152 * MIB / 384);
        assert!(budget.fits);
    }

    #[test]
    fn a_small_budget_shrinks_the_parts_until_it_cannot_hold_the_workers() {
        // 256 MiB, 2 workers: 256 - 104 - 48 = 104 MiB; / (2 · 12) = 4.3 MiB: the ceiling.
        assert_eq!(PartBudget::divide(256 * MIB, 2).part_bytes, 2 * MIB);
        // 4 workers: 256 - 104 - 96 = 56 MiB; / (4 · 12) = 56/48 MiB.
        let budget = PartBudget::divide(256 * MIB, 4);
        assert_eq!(budget.part_bytes, 56 * MIB / 48);
        assert!(budget.fits);
        // 7 workers: 256 - 104 - 168 < 0: the smallest parts, and the budget does not hold.
        let budget = PartBudget::divide(256 * MIB, 7);
        assert_eq!(budget.part_bytes, MIN_PART_BYTES);
        assert!(!budget.fits);
        // Tiny budgets, as tests use to force many parts: the smallest parts.
        let budget = PartBudget::divide(64 << 10, 1);
        assert_eq!(budget.part_bytes, MIN_PART_BYTES);
        assert!(!budget.fits);
    }

    #[test]
    fn the_least_limit_is_where_a_budget_starts_to_fit() {
        for workers in [1, 3, 8, 40] {
            let least = PartBudget::least_limit(workers);
            assert!(PartBudget::divide(least, workers).fits, "{workers} workers");
            assert!(
                !PartBudget::divide(least - 1, workers).fits,
                "{workers} workers"
            );
        }
        // 104 MiB + 8 · 24 MiB + 8 · 12 · 4 KiB.
        assert_eq!(PartBudget::least_limit(8), 296 * MIB + 384 * 1024);
    }
}
