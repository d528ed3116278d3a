//! A unit's name as a map key, kept in the map's own table when short.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// Bytes a name kept in place may have: most units' names fit (`unit-12345`,
/// an agent's session id's first part), and the key is no larger than a
/// `String` (24 bytes).
const INLINE: usize = 22;

/// A unit's name as a map key: up to 22 bytes it is kept in the key itself,
/// so in a map's table beside its entry; a longer one is on the heap. A
/// lookup among 100,000 units reads a `String` key's bytes from a line of
/// their own, one cache miss more for every report (docs/performance.md
/// §38); kept in place, the line the entry is on has them. Hashes and
/// compares as the `str` it holds, so a map of them is looked up by `&str`.
#[derive(Clone)]
pub struct UnitKey(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl UnitKey {
    pub fn new(name: &str) -> Self {
        let b = name.as_bytes();
        Self(if b.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            Repr::Inline {
                len: b.len() as u8,
                bytes,
            }
        } else {
            Repr::Heap(name.into())
        })
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Made from a `str`, cut at its end: valid (checked again, as
            // this crate has no unsafe code; a short name's check is cheap).
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Heap(s) => s,
        }
    }
}

impl From<&str> for UnitKey {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<String> for UnitKey {
    fn from(name: String) -> Self {
        if name.len() <= INLINE {
            Self::new(&name)
        } else {
            Self(Repr::Heap(name.into_boxed_str()))
        }
    }
}

impl Borrow<str> for UnitKey {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Hash for UnitKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

impl PartialEq for UnitKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for UnitKey {}

impl std::fmt::Debug for UnitKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for UnitKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FnvMap;

    #[test]
    fn a_key_is_its_name_short_or_long_and_is_looked_up_by_it() {
        let long = "a-unit-whose-name-is-longer-than-fits-in-place";
        let names = [
            "",
            "u",
            "unit-12345",
            "twenty-two-bytes-long!",
            "twenty-three-bytes-long",
            long,
            "ünït-ß",
        ];
        let mut m: FnvMap<UnitKey, usize> = FnvMap::default();
        for (i, n) in names.iter().enumerate() {
            let k = UnitKey::from(*n);
            assert_eq!(k.as_str(), *n);
            assert_eq!(UnitKey::from(n.to_string()).as_str(), *n);
            assert_eq!(k, UnitKey::from(n.to_string()));
            assert_eq!(k.to_string(), *n);
            m.insert(k, i);
        }
        assert!(matches!(
            UnitKey::new("twenty-two-bytes-long!").0,
            Repr::Inline { len: 22, .. }
        ));
        assert!(matches!(UnitKey::new(long).0, Repr::Heap(_)));
        for (i, n) in names.iter().enumerate() {
            assert_eq!(m.get(*n), Some(&i), "{n}");
        }
        assert_eq!(m.get("unit-1234"), None);
        assert_eq!(m.get("unit-123456"), None);
        assert_eq!(
            std::mem::size_of::<UnitKey>(),
            std::mem::size_of::<String>()
        );
    }
}
