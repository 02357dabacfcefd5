//! Stable routing keys: hashes that never depend on the platform, the Rust version, the worker
//! count or arrival order.

/// 64-bit FNV-1a of `bytes`. Used to route records by image key; unlike `std`'s hasher its
/// values are fixed forever, so routing (and anything derived from it) is reproducible.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The routing hash of an image key.
pub fn image_route(image_id: &str) -> u64 {
    fnv1a64(image_id.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_published_test_vectors() {
        // Test vectors from the FNV reference (draft-eastlake-fnv).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }
}
