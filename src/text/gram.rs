//! [`Gram`]: an n-gram of word ids as a hash-table key.
//!
//! A language model looks its n-grams up several times for every token it scores. Kept as
//! `Vec<u32>`, each lookup hashes a slice and compares it with `memcmp`; the n-grams of caption
//! models are at most four words long (trigram words, 4-gram classes), so a `Gram` holds up to
//! four ids packed in two `u64`s, hashed and compared as two integers (not one `u128`, whose
//! 16-byte alignment would pad every table entry). Longer ones are kept as they are. It
//! serializes as the sequence of its ids, as a `Vec<u32>` does.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most ids a packed [`Gram`] holds.
const PACKED: usize = 4;

/// An n-gram of word ids.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(super) enum Gram {
    /// Up to [`PACKED`] ids, the i-th in bits `32 i ..32 (i + 1)` of the two words read as
    /// one 128-bit number (low word first), the rest zero.
    Packed { ids: [u64; 2], len: u8 },
    /// More than [`PACKED`] ids.
    Long(Box<[u32]>),
}

impl Gram {
    pub(super) fn new(ids: &[u32]) -> Gram {
        match ids.len() <= PACKED {
            true => Gram::Packed {
                ids: split(pack(ids)),
                len: ids.len() as u8,
            },
            false => Gram::Long(ids.into()),
        }
    }

    /// The n-gram `context` followed by `next`.
    pub(super) fn followed(context: &[u32], next: u32) -> Gram {
        match context.len() < PACKED {
            true => Gram::Packed {
                ids: split(pack(context) | u128::from(next) << (32 * context.len())),
                len: context.len() as u8 + 1,
            },
            false => Gram::Long(context.iter().copied().chain([next]).collect()),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Gram::Packed { len, .. } => usize::from(*len),
            Gram::Long(ids) => ids.len(),
        }
    }

    /// The id at `i` (`i < len`).
    pub(super) fn id(&self, i: usize) -> u32 {
        match self {
            Gram::Packed { ids, .. } => (join(*ids) >> (32 * i)) as u32,
            Gram::Long(ids) => ids[i],
        }
    }

    /// Its ids in order.
    pub(super) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).map(|i| self.id(i))
    }

    /// All its ids but the last.
    pub(super) fn context(&self) -> Gram {
        match self {
            Gram::Packed { ids, len } => {
                let len = len.saturating_sub(1);
                Gram::Packed {
                    ids: split(join(*ids) & low_bits(32 * u32::from(len))),
                    len,
                }
            }
            Gram::Long(ids) => Gram::new(&ids[..ids.len() - 1]),
        }
    }

    /// All its ids but the first.
    pub(super) fn rest(&self) -> Gram {
        match self {
            Gram::Packed { ids, len } => Gram::Packed {
                ids: split(join(*ids) >> 32),
                len: len.saturating_sub(1),
            },
            Gram::Long(ids) => Gram::new(&ids[1..]),
        }
    }
}

fn pack(ids: &[u32]) -> u128 {
    (ids.iter().enumerate()).fold(0, |packed, (i, &id)| packed | u128::from(id) << (32 * i))
}

/// A 128-bit number as its low and high words.
fn split(n: u128) -> [u64; 2] {
    [n as u64, (n >> 64) as u64]
}

fn join([low, high]: [u64; 2]) -> u128 {
    u128::from(low) | u128::from(high) << 64
}

/// A mask of the lowest `bits` bits.
fn low_bits(bits: u32) -> u128 {
    match bits {
        128.. => u128::MAX,
        _ => (1u128 << bits) - 1,
    }
}

impl Serialize for Gram {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.ids())
    }
}

impl<'de> Deserialize<'de> for Gram {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Gram, D::Error> {
        Vec::<u32>::deserialize(deserializer).map(|ids| Gram::new(&ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gram_keeps_its_ids_and_their_order() {
        for ids in [
            vec![],
            vec![7],
            vec![0, 0],
            vec![u32::MAX, 3, 0],
            vec![1, 2, 3, u32::MAX],
            vec![5, 4, 3, 2, 1],
        ] {
            let gram = Gram::new(&ids);
            assert_eq!(gram.ids().collect::<Vec<_>>(), ids);
            assert_eq!(gram.len(), ids.len());
            if let Some((last, context)) = ids.split_last() {
                assert_eq!(gram.context(), Gram::new(context));
                assert_eq!(Gram::followed(context, *last), gram);
                assert_eq!(gram.rest(), Gram::new(&ids[1..]));
            }
            let json = serde_json::to_string(&gram).unwrap();
            assert_eq!(json, serde_json::to_string(&ids).unwrap());
            assert_eq!(serde_json::from_str::<Gram>(&json).unwrap(), gram);
        }
        // Grams of different lengths or orders differ, zeros included.
        assert_ne!(Gram::new(&[0]), Gram::new(&[0, 0]));
        assert_ne!(Gram::new(&[1, 2]), Gram::new(&[2, 1]));
        assert_ne!(Gram::new(&[1, 2, 3, 4, 5]), Gram::new(&[1, 2, 3, 4]));
        // A table entry keyed by a gram is no larger than one keyed by a `Vec<u32>`.
        assert!(std::mem::size_of::<Gram>() <= std::mem::size_of::<Vec<u32>>());
    }
}
