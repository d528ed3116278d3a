//! Secrets made and compared: values from the kernel's CSPRNG
//! (`/dev/urandom`, opened once), compared in constant time.

use std::fs::File;
use std::io::Read;
use std::sync::OnceLock;

static URANDOM: OnceLock<std::io::Result<File>> = OnceLock::new();

/// `bytes` random bytes from the kernel's CSPRNG as lowercase hex
/// (`2 * bytes` characters). Fails only where `/dev/urandom` cannot be
/// read: the error names it.
pub fn random_hex(bytes: usize) -> Result<String, std::io::Error> {
    let file = URANDOM
        .get_or_init(|| File::open("/dev/urandom"))
        .as_ref()
        .map_err(|e| std::io::Error::new(e.kind(), format!("/dev/urandom: {e}")))?;
    let mut buf = vec![0u8; bytes];
    // `&File` reads without a lock: callers on several threads share it.
    (&*file)
        .read_exact(&mut buf)
        .map_err(|e| std::io::Error::other(format!("/dev/urandom: {e}")))?;
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
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
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
