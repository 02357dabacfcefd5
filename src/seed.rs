//! Deterministic randomness that never changes with a dependency's version: SplitMix64
//! (Steele, Lea, Flood 2014), used where outputs must be reproducible byte for byte
//! (synthetic data, Smatch restarts).

/// The SplitMix64 output function: a well-mixed bijection of `z`.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The first output of a SplitMix64 generator started at `state`: a stateless hash of `state`.
#[inline]
pub fn splitmix64(state: u64) -> u64 {
    mix64(state.wrapping_add(GOLDEN_GAMMA))
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// A SplitMix64 generator.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        mix64(self.0)
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift.
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of the reference splitmix64.c seeded with 1234567.
        let mut rng = SplitMix64::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
        assert_eq!(splitmix64(1234567), 6457827717110365317);
    }
}
