//! Values that flow through differential collections.
//!
//! Differential needs totally ordered data, and capflow's rows hold floats (boxes, scores). Every
//! record already has a unique, stable identity, though: input rows their read position, per-image
//! state its image key. These wrappers order by that identity alone.

use std::cmp::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::runtime::KeyedRow;

/// An input row ordered by its read position (input unit, then record ordinal).
///
/// The row is shared with the read phase's result rather than copied: the collection's batches
/// hold pointers, and only a record crossing to another process is serialized in full.
///
/// NB: two records are equal when their read positions are; a run never reads two rows at one
/// position, so the payload need not take part.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ImageRecord(pub Arc<KeyedRow>);

impl ImageRecord {
    fn position(&self) -> (u32, u64) {
        (self.0.unit, self.0.ordinal)
    }
}

impl PartialEq for ImageRecord {
    fn eq(&self, other: &Self) -> bool {
        self.position() == other.position()
    }
}

impl Eq for ImageRecord {}

impl PartialOrd for ImageRecord {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ImageRecord {
    fn cmp(&self, other: &Self) -> Ordering {
        self.position().cmp(&other.position())
    }
}

/// Per-image state between stages, ordered by its image key.
///
/// NB: a collection holds one state per image, so the key identifies it.
#[derive(Clone, Debug)]
pub struct Staged<T> {
    pub image_id: String,
    pub value: T,
}

impl<T> PartialEq for Staged<T> {
    fn eq(&self, other: &Self) -> bool {
        self.image_id == other.image_id
    }
}

impl<T> Eq for Staged<T> {}

impl<T> PartialOrd for Staged<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Staged<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.image_id.cmp(&other.image_id)
    }
}
