//! Message headers: the pairs a service builds, the NATS client's own
//! map of a message read from NATS, or the header block as it came off the
//! wire ([`crate::wire`]), kept as they arrived.

/// Message headers, in order; names compare case-insensitively.
///
/// A message read from NATS keeps the client's own header map as it
/// arrived (no copy of each name and value on the report path); one
/// built here, or changed, is a list of pairs.
#[derive(Debug, Clone, Default)]
pub struct Headers(Repr);

#[derive(Debug, Clone)]
enum Repr {
    Pairs(Vec<(String, String)>),
    Nats(async_nats::HeaderMap),
    /// A NATS header block (`NATS/1.0\r\nName: value\r\n…\r\n`), read
    /// when asked: a slice of the read buffer, checked to be UTF-8.
    Block(bytes::Bytes),
}

impl Default for Repr {
    fn default() -> Self {
        Self::Pairs(Vec::new())
    }
}

impl Headers {
    pub fn new() -> Self {
        Self::default()
    }
    /// Headers of these pairs, in this order.
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        Self(Repr::Pairs(pairs))
    }
    /// The NATS client's header map, kept as it is.
    pub(crate) fn from_nats(map: async_nats::HeaderMap) -> Self {
        Self(Repr::Nats(map))
    }
    /// A NATS header block as it was read (`NATS/1.0`, then a
    /// `Name: value` line each, each line ended by CRLF), kept whole and
    /// read when asked; `None` when it is not UTF-8.
    pub(crate) fn from_block(block: bytes::Bytes) -> Option<Self> {
        std::str::from_utf8(&block).ok()?;
        Some(Self(Repr::Block(block)))
    }
    /// Headers that hold no part of a buffer shared with other messages
    /// (a block read off the wire is copied).
    pub(crate) fn detached(self) -> Self {
        match self.0 {
            Repr::Block(b) => Self(Repr::Block(bytes::Bytes::copy_from_slice(&b))),
            other => Self(other),
        }
    }
    /// The first value of `name`, in any case. A few names: compared in
    /// turn (a NATS map's lookup by hash would build a name, and may
    /// allocate, for each).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
    /// Sets a header, replacing any value it had (a NATS map becomes
    /// pairs first).
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        let mut pairs = std::mem::take(self).into_pairs();
        pairs.retain(|(k, _)| !k.eq_ignore_ascii_case(&name));
        pairs.push((name, value.into()));
        self.0 = Repr::Pairs(pairs);
    }
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Repr::Pairs(p) => p.is_empty(),
            Repr::Nats(m) => m.is_empty(),
            Repr::Block(_) => self.iter().next().is_none(),
        }
    }
    /// Every name and value, in order (a header with several values once
    /// for each).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let (pairs, map, block) = match &self.0 {
            Repr::Pairs(p) => (Some(p), None, None),
            Repr::Nats(m) => (None, Some(m), None),
            Repr::Block(b) => (None, None, Some(block_lines(b))),
        };
        let pairs = pairs
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        let map = map.into_iter().flat_map(|m| m.iter()).flat_map(|(k, vs)| {
            let k: &str = k.as_ref();
            vs.iter().map(move |v| (k, v.as_str()))
        });
        pairs.chain(map).chain(block.into_iter().flatten())
    }
    /// The pairs, in order, as owned strings.
    pub fn into_pairs(self) -> Vec<(String, String)> {
        match self.0 {
            Repr::Pairs(p) => p,
            Repr::Nats(_) | Repr::Block(_) => self
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }
}

/// A header block's names and values, in order: the lines after the
/// first (`NATS/1.0`, with a status if any) up to the empty one, each split
/// at its first colon and trimmed (a line without one is not a header).
fn block_lines(block: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    std::str::from_utf8(block)
        .unwrap_or("")
        .split("\r\n")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
}

/// Equal when they hold the same names (in any case) and values: a NATS
/// map does not keep the order its headers were sent in.
impl PartialEq for Headers {
    fn eq(&self, other: &Self) -> bool {
        fn sorted(h: &Headers) -> Vec<(String, &str)> {
            let mut v: Vec<(String, &str)> =
                h.iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect();
            v.sort_unstable();
            v
        }
        sorted(self) == sorted(other)
    }
}

impl Eq for Headers {}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_nats() -> Headers {
        let mut m = async_nats::HeaderMap::new();
        m.insert("Content-Type", "application/msgpack");
        m.append("X-Seen", "one");
        m.append("X-Seen", "two");
        Headers::from_nats(m)
    }

    #[test]
    fn a_nats_map_is_read_as_the_pairs_it_holds() {
        let h = from_nats();
        assert_eq!(h.get("content-type"), Some("application/msgpack"));
        assert_eq!(h.get("CONTENT-TYPE"), Some("application/msgpack"));
        assert_eq!(h.get("x-seen"), Some("one"), "the first of several values");
        assert_eq!(h.get("traceparent"), None);
        assert!(!h.is_empty());
        let mut pairs = h.clone().into_pairs();
        pairs.sort();
        assert_eq!(
            pairs,
            [
                (
                    "Content-Type".to_string(),
                    "application/msgpack".to_string()
                ),
                ("X-Seen".to_string(), "one".to_string()),
                ("X-Seen".to_string(), "two".to_string()),
            ]
        );
        assert_eq!(h.iter().count(), 3, "every value of a name");
        assert!(Headers::from_nats(async_nats::HeaderMap::new()).is_empty());
    }

    #[test]
    fn a_header_set_on_a_nats_map_replaces_its_values_and_keeps_the_rest() {
        let mut h = from_nats();
        h.insert("x-seen", "three");
        assert_eq!(h.get("X-Seen"), Some("three"));
        assert_eq!(
            h.iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("x-seen"))
                .count(),
            1
        );
        assert_eq!(h.get("Content-Type"), Some("application/msgpack"));
    }

    #[test]
    fn a_block_read_off_the_wire_is_read_as_its_lines_in_order() {
        let block = bytes::Bytes::from_static(
            b"NATS/1.0\r\nContent-Type: application/msgpack\r\nX-Seen:one\r\nX-Seen: two \r\nnot a header\r\n\r\n",
        );
        let h = Headers::from_block(block.clone()).unwrap();
        assert_eq!(h.get("content-type"), Some("application/msgpack"));
        assert_eq!(h.get("x-seen"), Some("one"), "the first of several values");
        assert_eq!(
            h.clone().into_pairs(),
            [
                (
                    "Content-Type".to_string(),
                    "application/msgpack".to_string()
                ),
                ("X-Seen".to_string(), "one".to_string()),
                ("X-Seen".to_string(), "two".to_string()),
            ],
            "in the order they came, a line with no colon left out"
        );
        assert_eq!(h, from_nats());
        // A status line alone (`NATS/1.0 503`) holds no headers.
        let status = Headers::from_block(bytes::Bytes::from_static(b"NATS/1.0 503\r\n\r\n"));
        assert!(status.unwrap().is_empty());
        assert!(
            Headers::from_block(bytes::Bytes::from_static(b"NATS/1.0\r\nX: \xff\r\n\r\n"))
                .is_none()
        );
        // Detached, it holds a copy of its own and reads the same.
        let d = h.clone().detached();
        assert_eq!(d, h);
        match (&d.0, &h.0) {
            (Repr::Block(a), Repr::Block(b)) => assert_ne!(a.as_ptr(), b.as_ptr()),
            _ => panic!("still a block"),
        }
        let mut h = h;
        h.insert("X-Seen", "three");
        assert_eq!(h.get("x-seen"), Some("three"));
        assert_eq!(h.get("content-type"), Some("application/msgpack"));
    }

    #[test]
    fn headers_are_equal_by_what_they_hold_in_any_order_and_case() {
        let pairs = Headers::from_pairs(vec![
            ("x-seen".into(), "two".into()),
            ("content-type".into(), "application/msgpack".into()),
            ("X-Seen".into(), "one".into()),
        ]);
        assert_eq!(from_nats(), pairs);
        let mut other = from_nats();
        other.insert("X-Seen", "one");
        assert_ne!(other, pairs, "a value fewer");
        // What NATS is given back is what was read.
        let back = crate::nats::to_nats_headers(&from_nats());
        assert_eq!(Headers::from_nats(back), from_nats());
    }
}
