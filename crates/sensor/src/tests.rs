//! The hashes of texts: stable across versions, and apart.

use super::short_hash;

#[test]
fn hashes_are_stable_and_tell_texts_apart() {
    // Pinned: reports recorded by one version compare with the next.
    assert_eq!(short_hash(""), short_hash(""));
    assert_eq!(short_hash("make build").len(), 12);
    let pinned = short_hash("{\"command\":\"make build\"}");
    assert_eq!(pinned, "a3ed2a365b10");
    let mut seen = std::collections::HashSet::new();
    for i in 0..100_000 {
        assert!(seen.insert(short_hash(&format!("{{\"file_path\":\"src/f{i}.rs\"}}"))));
    }
    assert_ne!(short_hash("abcdefgh1"), short_hash("abcdefgh2"));
    assert_ne!(short_hash("a"), short_hash("a\0"));
}

/// The hash is the one first written (the tail copied into a zeroed
/// word): every length up to five words, every kind of last byte.
#[test]
fn the_hash_is_the_first_one() {
    fn reference(b: &[u8]) -> String {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ b.len() as u64;
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = (h.rotate_left(5) ^ v).wrapping_mul(K);
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        h = (h.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        format!("{:012x}", h >> 16)
    }
    for len in 0..40u8 {
        for last in ["a", "z", "\u{7f}", "é", "\0"] {
            let mut text: String = (0..len).map(|i| char::from(b'a' + i % 26)).collect();
            text.push_str(last);
            assert_eq!(short_hash(&text), reference(text.as_bytes()), "{text:?}");
        }
    }
}
