//! Secrets made and compared: values from the operating system's CSPRNG
//! (`getrandom`: the `getrandom(2)` call, no file to open, so it works in a
//! container without `/dev` and after confinement), compared in constant
//! time (`subtle`).

use subtle::ConstantTimeEq;

/// `bytes` random bytes from the operating system's CSPRNG as lowercase
/// hex (`2 * bytes` characters). Fails only where the system gives no
/// randomness; the error says so. Each call asks again: a failure is never
/// kept for the next one.
pub fn random_hex(bytes: usize) -> Result<String, std::io::Error> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| {
        std::io::Error::other(format!(
            "the system's random number generator (getrandom) failed: {e}"
        ))
    })?;
    Ok(hex(&buf))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// Compares two secrets without stopping at the first differing byte (the
/// time taken says nothing about how much of a guess was right; only the
/// length may show).
pub fn same(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_values_are_long_distinct_and_hex() {
        let a = random_hex(16).unwrap();
        let b = random_hex(16).unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn hex_is_two_lowercase_digits_a_byte_high_half_first() {
        // The audit chain's hashes are this text: a change breaks every
        // file written before it.
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff, 0x10]), "000fa5ff10");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn same_compares_whole_values() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "xbc"));
        assert!(!same("abc", "abcd"));
        assert!(same("", ""));
    }
}
