//! FNV-1a 64, the payload checksum of the format.

pub const FNV_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

pub fn fnv1a_64(data: &[u8]) -> u64 {
    fnv1a_64_update(FNV_BASIS, data)
}

/// Continue a running hash, for payloads written or read in pieces.
pub fn fnv1a_64_update(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h = (h ^ b as u64).wrapping_mul(FNV_PRIME);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a_64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x85944171f73967e8);
        assert_eq!(fnv1a_64_update(fnv1a_64(b"foo"), b"bar"), fnv1a_64(b"foobar"));
    }
}
