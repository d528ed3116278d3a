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
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
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
    fn same_compares_whole_values() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "xbc"));
        assert!(!same("abc", "abcd"));
        assert!(same("", ""));
    }
}
