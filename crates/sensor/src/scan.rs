//! A JSON object's members found without building it: the few fields a
//! sensor reads, as the slices of the line that hold them.
//!
//! Most of an agent's stream is a handful of line shapes (a command's end,
//! a message), and a sensor reads three to seven of their fields. Building
//! the line (into `serde_json::Value`, or a borrowing struct through serde)
//! costs more than everything the sensor then does with it; this reader
//! walks the line once, checking that it is JSON as it goes (the grammar of
//! RFC 8259: strings without raw control characters and with valid escapes,
//! numbers, literals, nesting at most 127 deep, nothing after the object but
//! white space), and hands back the raw text of the members it was asked
//! for. It never decides a line is bad: whatever it cannot take plainly
//! (invalid JSON, a wanted member twice, a key written with escapes) is
//! `None`, and the caller reads that line the general way, which says what
//! was wrong with it.

use std::borrow::Cow;

/// The most levels of nesting: serde_json refuses a 128th, so that what
/// this reader passes over, the general one would have read.
const MAX_DEPTH: usize = 127;

/// What to take from an object: the raw text of some members (each into
/// a slot of the whole read's [`Found`]), some members read as objects of
/// their own (or `null`), and perhaps its first member (its name into a
/// slot, its value an object read as well). A member named twice, a key
/// with an escape where something is wanted, an entered member that is
/// neither object nor `null`: the whole read is `None`.
#[derive(Clone, Copy)]
pub(crate) struct Want<'w> {
    pub take: &'w [(&'w str, usize)],
    pub enter: &'w [(&'w str, Want<'w>)],
    pub first: Option<(usize, &'w Want<'w>)>,
}

impl Want<'_> {
    /// Members' raw text and nothing more.
    pub(crate) const fn take<'w>(take: &'w [(&'w str, usize)]) -> Want<'w> {
        Want {
            take,
            enter: &[],
            first: None,
        }
    }
}

/// The slots `want` names, filled from the object `text`, in one pass that
/// checks the whole line is one JSON object. `None` for a line that is not,
/// or that breaks a rule of [`Want`]: the general reader reads it.
pub(crate) fn read<'a, const N: usize>(text: &'a str, want: &Want<'_>) -> Option<Found<'a, N>> {
    let mut r = Reader::new(text);
    let mut found = [None; N];
    r.ws();
    r.object(0, Some(want), &mut found)?;
    r.ws();
    (r.i == r.s.len()).then_some(found)
}

/// The raw text of the members of the object `text` named in `names` (in
/// their order; `None` where absent).
#[cfg(test)]
pub(crate) fn members<'a, const N: usize>(text: &'a str, names: [&str; N]) -> Option<Found<'a, N>> {
    let take: [(&str, usize); N] = std::array::from_fn(|k| (names[k], k));
    read(text, &Want::take(&take))
}

/// `line` with each of its bytes changed in turn to each of `to` (those
/// that are still UTF-8): the variants a reader is tested on.
#[cfg(test)]
pub(crate) fn every_changed_byte(line: &str, to: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for at in 0..line.len() {
        for &b in to {
            let mut bytes = line.as_bytes().to_vec();
            bytes[at] = b;
            out.extend(String::from_utf8(bytes).ok());
        }
    }
    out
}

/// Reads every line the scanner takes (`scanned`) with the general reader
/// too (`general`, which must not refuse it) and holds the two readings
/// equal; how many lines the scanner took. Each format's test of its
/// scanner goes through here.
#[cfg(test)]
pub(crate) fn taken_as_serde_reads<'a, T: PartialEq + std::fmt::Debug>(
    lines: &'a [String],
    scanned: impl Fn(&'a str) -> Option<T>,
    general: impl Fn(&'a str) -> Result<T, crate::SensorError>,
) -> usize {
    let mut taken = 0;
    for l in lines {
        let Some(ours) = scanned(l) else { continue };
        taken += 1;
        let theirs =
            general(l).unwrap_or_else(|e| panic!("scanned, but serde refuses it ({e}): {l}"));
        assert_eq!(ours, theirs, "{l}");
    }
    taken
}

/// The raw text of each wanted member, where it was found.
pub(crate) type Found<'a, const N: usize> = [Option<&'a str>; N];

/// The members of the object `raw` (read and checked by [`read`]) as they
/// come: each key's text and its value's raw text. `None` if a key has an
/// escape (serde's key would be its unescaped text) or `raw` is no object.
pub(crate) fn entries(raw: &str) -> Option<Vec<(Cow<'_, str>, &str)>> {
    let mut r = Reader::new(raw);
    let mut out = Vec::with_capacity(8);
    r.eat(b'{')?;
    r.ws();
    if r.eat(b'}').is_some() {
        return Some(out);
    }
    loop {
        r.ws();
        let start = r.i;
        if r.string()? {
            return None;
        }
        let key = r.t.get(start + 1..r.i - 1)?;
        r.ws();
        r.eat(b':')?;
        r.ws();
        let at = r.i;
        r.value(1)?;
        out.push((Cow::Borrowed(key), r.t.get(at..r.i)?));
        if !r.next_member()? {
            return Some(out);
        }
    }
}

/// The elements of the array `raw` (read and checked by [`read`]), each
/// an object read with `want`; `None` if `raw` is no array, an element is
/// no object, or one breaks a rule of [`Want`].
pub(crate) fn each<'a, const N: usize>(raw: &'a str, want: &Want<'_>) -> Option<Vec<Found<'a, N>>> {
    let mut r = Reader::new(raw);
    let mut out = Vec::new();
    r.elements(0, |r| {
        let mut found = [None; N];
        r.object(1, Some(want), &mut found)?;
        out.push(found);
        Some(())
    })?;
    (r.i == r.s.len()).then_some(out)
}

/// A string member's text: borrowed when it has no escape, unescaped
/// otherwise. `None` for `null`; `Err` for any other kind of value.
pub(crate) fn string(raw: Option<&str>) -> Result<Option<Cow<'_, str>>, ()> {
    let Some(raw) = raw else { return Ok(None) };
    match raw.as_bytes().first() {
        Some(b'"') => {
            let inner = raw
                .strip_prefix('"')
                .and_then(|r| r.strip_suffix('"'))
                .ok_or(())?;
            if !inner.contains('\\') {
                return Ok(Some(Cow::Borrowed(inner)));
            }
            match unescape(inner) {
                Some(text) => Ok(Some(Cow::Owned(text))),
                // `\u` escapes (and their surrogate pairs) as serde reads them.
                None => serde_json::from_str::<String>(raw)
                    .map(|s| Some(Cow::Owned(s)))
                    .map_err(|_| ()),
            }
        }
        Some(b'n') => Ok(None),
        _ => Err(()),
    }
}

/// A string's text with its one-character escapes read (the reader has
/// checked each); `None` at a `\\u` escape, which serde reads.
fn unescape(inner: &str) -> Option<String> {
    let mut out = String::with_capacity(inner.len());
    let mut parts = inner.split('\\');
    out.push_str(parts.next().unwrap_or_default());
    let mut pending_slash = false;
    for part in parts {
        if pending_slash {
            // `\\\\`: the second backslash of the pair began this part.
            out.push('\\');
            out.push_str(part);
            pending_slash = false;
            continue;
        }
        let Some(c) = part.chars().next() else {
            // An empty part: this backslash and the next are `\\\\`.
            pending_slash = true;
            continue;
        };
        out.push(match c {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'u' => return None,
            other => other,
        });
        out.push_str(&part[c.len_utf8()..]);
    }
    Some(out)
}

/// A member's raw text, `None` for `null` (as serde reads an `Option` of
/// a raw value).
pub(crate) fn present(raw: Option<&str>) -> Option<&str> {
    raw.filter(|r| *r != "null")
}

/// A member read by serde from its own text, so exactly as serde reads it
/// (`None` when absent or `null`); `None` for the whole when serde refuses it.
pub(crate) fn own<'a, T: serde::Deserialize<'a>>(raw: Option<&'a str>) -> Option<Option<T>> {
    match raw {
        None => Some(None),
        Some(r) => serde_json::from_str(r).ok(),
    }
}

/// An unsigned integer member, as serde reads an `Option<u64>`: the
/// reader checked it is a JSON number, so plain digits are what serde
/// reads; any other (a sign, a fraction, past `u64`) is left to serde.
pub(crate) fn uint(raw: Option<&str>) -> Option<Option<u64>> {
    match raw {
        None | Some("null") => Some(None),
        Some(n) => match n.parse::<u64>() {
            Ok(v) => Some(Some(v)),
            Err(_) => own(raw),
        },
    }
}

/// A flag member, as serde reads an `Option<bool>` (`None` for the whole
/// when it is no flag: serde refuses it).
pub(crate) fn flag(raw: Option<&str>) -> Option<Option<bool>> {
    match raw {
        None | Some("null") => Some(None),
        Some("true") => Some(Some(true)),
        Some("false") => Some(Some(false)),
        Some(_) => None,
    }
}

/// An integer member, as serde reads an `Option<i64>`: `None` for `null`;
/// `Err` for a fraction, an exponent, one out of range or any other kind.
pub(crate) fn int(raw: Option<&str>) -> Result<Option<i64>, ()> {
    match raw {
        None | Some("null") => Ok(None),
        Some(n) => n.parse::<i64>().map(Some).map_err(|_| ()),
    }
}

struct Reader<'a> {
    s: &'a [u8],
    /// The same text, as text: members are sliced from it (at ASCII bytes,
    /// never inside a character).
    t: &'a str,
    i: usize,
}

impl<'a> Reader<'a> {
    fn new(text: &'a str) -> Self {
        Reader {
            s: text.as_bytes(),
            t: text,
            i: 0,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    /// An object at `self.i`, and what `want` takes from it into `found`.
    fn object(
        &mut self,
        depth: usize,
        want: Option<&Want<'_>>,
        found: &mut [Option<&'a str>],
    ) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            // An object whose first member is wanted has one.
            return want.is_none_or(|w| w.first.is_none()).then_some(());
        }
        // The members entered so far (a second one is refused).
        let mut entered = 0u64;
        let mut first = true;
        loop {
            self.ws();
            let start = self.i;
            let escaped = self.string()?;
            let Some(w) = want else {
                self.member_value(depth)?;
                if !self.next_member()? {
                    return Some(());
                }
                continue;
            };
            if escaped {
                // A key with an escape might be a wanted one: the general
                // reader decides.
                return None;
            }
            let key = &self.s[start + 1..self.i - 1];
            self.ws();
            self.eat(b':')?;
            self.ws();
            let at = self.i;
            if let Some((slot, inner)) = w.first.filter(|_| first) {
                *found.get_mut(slot)? = Some(self.t.get(start + 1..start + 1 + key.len())?);
                if self.peek()? != b'{' {
                    return None;
                }
                self.object(depth + 1, Some(inner), found)?;
            } else if let Some(k) = w.enter.iter().position(|(n, _)| named(n, key)) {
                if entered & (1 << k) != 0 {
                    return None;
                }
                entered |= 1 << k;
                if self.peek()? == b'{' {
                    self.object(depth + 1, Some(&w.enter[k].1), found)?;
                } else {
                    self.literal(b"null")?;
                }
            } else {
                self.value(depth + 1)?;
            }
            first = false;
            if let Some((_, slot)) = w.take.iter().find(|(n, _)| named(n, key)) {
                let slot = found.get_mut(*slot)?;
                if slot.is_some() {
                    return None;
                }
                *slot = Some(self.t.get(at..self.i)?);
            }
            if !self.next_member()? {
                return Some(());
            }
        }
    }

    /// After a key: `:` and the value, passed over.
    fn member_value(&mut self, depth: usize) -> Option<()> {
        self.ws();
        self.eat(b':')?;
        self.ws();
        self.value(depth + 1)
    }

    /// After a member: `,` (another follows) or `}` (the object ended).
    fn next_member(&mut self) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.i += 1;
                Some(true)
            }
            b'}' => {
                self.i += 1;
                Some(false)
            }
            _ => None,
        }
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(depth, None, &mut []),
            b'[' => self.array(depth),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.elements(depth, |r| r.value(depth + 1))
    }

    /// An array at `self.i` (at nesting `depth`), each element read by
    /// `element` from its first byte.
    fn elements(
        &mut self,
        depth: usize,
        mut element: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.ws();
            element(self)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.s.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
    }

    /// A string at `self.i`, passed over; whether it has an escape.
    fn string(&mut self) -> Option<bool> {
        self.eat(b'"')?;
        let s = self.s;
        let mut escaped = false;
        loop {
            // The plain run, eight bytes at a time, to the first byte that
            // ends it.
            while let Some(chunk) = s.get(self.i..self.i + 8) {
                let mut w = [0u8; 8];
                w.copy_from_slice(chunk);
                let m = special(u64::from_le_bytes(w));
                if m != 0 {
                    self.i += m.trailing_zeros() as usize / 8;
                    break;
                }
                self.i += 8;
            }
            match *s.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let hex = s.get(self.i + 1..self.i + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
    }
}

/// Whether `key` is `name`, compared in line: keys are short, and a call
/// to compare them costs more than the comparison.
fn named(name: &str, key: &[u8]) -> bool {
    let name = name.as_bytes();
    name.len() == key.len() && name.iter().zip(key).all(|(a, b)| a == b)
}

/// The bytes of `w` that are `"`, `\\` or below 0x20, as the high bit of
/// each (SWAR: a byte of `x` is zero exactly where it matched). Bits above
/// the lowest may be false (a borrow carries), never the lowest: it marks
/// the first such byte.
fn special(w: u64) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let quote = zero(w ^ (LO * u64::from(b'"')));
    let slash = zero(w ^ (LO * u64::from(b'\\')));
    // Below 0x20: subtracting 0x20 borrows into the high bit of a byte that
    // had it clear.
    let control = w.wrapping_sub(LO * 0x20) & !w & HI;
    quote | slash | control
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_ok(text: &str) -> bool {
        serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object())
    }

    #[test]
    fn finds_the_wanted_members_as_written() {
        let line = r#" {"type":"item.completed","item":{"id":"i_1","exit_code":-2,"out":"a\nb"},"n":null} "#;
        let [kind, item, missing] = members(line, ["type", "item", "nope"]).unwrap();
        assert_eq!(kind, Some(r#""item.completed""#));
        assert_eq!(item, Some(r#"{"id":"i_1","exit_code":-2,"out":"a\nb"}"#));
        assert_eq!(missing, None);
        let [code, out, id] = members(item.unwrap(), ["exit_code", "out", "id"]).unwrap();
        assert_eq!(int(code), Ok(Some(-2)));
        assert_eq!(string(out).unwrap().as_deref(), Some("a\nb"));
        assert!(matches!(string(id), Ok(Some(Cow::Borrowed("i_1")))));
        assert_eq!(string(Some("null")), Ok(None));
        assert_eq!(string(Some("3")), Err(()));
        assert_eq!(int(Some("1.0")), Err(()));
        assert_eq!(int(Some("\"1\"")), Err(()));
        assert_eq!(int(Some("99999999999999999999")), Err(()));
    }

    #[test]
    fn what_it_cannot_take_plainly_it_leaves_to_the_general_reader() {
        // A wanted member twice, a key with an escape: valid JSON, not taken.
        assert!(members(r#"{"a":1,"a":2}"#, ["a"]).is_none());
        assert!(members(r#"{"a":1,"a":2}"#, ["b"]).is_some());
        assert!(members(r#"{"\u0061":1}"#, ["a"]).is_none());
        // Not one object.
        for bad in ["[1]", "\"x\"", "", "{} {}", "{}x", "1"] {
            assert!(members(bad, ["a"]).is_none(), "{bad}");
        }
    }

    #[test]
    fn it_agrees_with_serde_json_on_what_is_json() {
        let cases = [
            r#"{"a":[1,2,{"b":[true,false,null]}],"c":"d"}"#,
            r#"{"a":-0.5e+10,"b":0,"c":1E5,"d":-0}"#,
            r#"{ "a" : "\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00" }"#,
            r#"{"a":"é ünïcødé 😀"}"#,
            "{\"a\":\t[ ]\r\n, \"b\" : { } }",
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":1e}"#,
            r#"{"a":+1}"#,
            r#"{"a":tru}"#,
            r#"{"a":nul}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12g4"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":[1,]}"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{a:1}"#,
            r#"{"a":1"#,
            r#"{"a":"unterminated}"#,
            r#"{"a":[1 2]}"#,
        ];
        for c in cases {
            assert_eq!(members(c, ["a"]).is_some(), serde_ok(c), "{c}");
        }
        // Nesting: serde_json's limit is this one's.
        for depth in [126, 127, 128, 129] {
            let c = format!("{{\"a\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
            assert_eq!(members(&c, ["a"]).is_some(), serde_ok(&c), "depth {depth}");
        }
    }

    #[test]
    fn every_cut_and_every_changed_byte_of_real_lines_is_judged_as_serde_judges_it() {
        let lines = [
            r#"{"type":"item.completed","item":{"id":"item_3","type":"command_execution","command":"bash -lc 'pytest -q tests/test_3.py'","aggregated_output":"1 failed, 12 passed in 0.31s\n","exit_code":1,"status":"failed"}}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"call_1","tool_call":{"shellToolCall":{"args":{"command":"npm test"},"result":{"success":{"exitCode":0,"stdout":"3 passing","stderr":""}}}},"session_id":"c-1"}"#,
        ];
        let swaps = [
            b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'0', b'e', b'-', b' ', 0x01,
        ];
        for line in lines {
            for cut in 0..line.len() {
                if line.is_char_boundary(cut) {
                    let c = &line[..cut];
                    assert_eq!(members(c, ["type"]).is_some(), serde_ok(c), "{c}");
                }
            }
            for c in every_changed_byte(line, &swaps) {
                {
                    // Where serde takes it, this one takes it too, or it is
                    // a case this one leaves aside on purpose (a key now
                    // holding an escape, a member now twice).
                    let ours = members(&c, ["type", "item", "tool_call"]).is_some();
                    let theirs = serde_ok(&c);
                    if ours {
                        assert!(theirs, "taken but not JSON: {c}");
                    } else if theirs {
                        assert!(
                            members(&c, []).is_some() || c.contains('\\'),
                            "JSON but not taken: {c}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_nested_members_come_in_the_same_pass() {
        const ITEM: Want<'static> = Want::take(&[("a", 2), ("b", 3), ("z", 4)]);
        const WANT: Want<'static> = Want {
            take: &[("type", 0), ("c", 1)],
            enter: &[("item", ITEM)],
            first: None,
        };
        let line = r#"{"type":"t","item":{"a":"x","b":2},"c":3}"#;
        let found: Found<'_, 5> = read(line, &WANT).unwrap();
        assert_eq!(
            found,
            [Some(r#""t""#), Some("3"), Some(r#""x""#), Some("2"), None]
        );
        // Absent or null: nothing from it; anything else, or twice: not taken.
        assert_eq!(read::<5>(r#"{"item":null}"#, &WANT), Some([None; 5]));
        assert_eq!(read::<5>(r#"{"x":1}"#, &WANT), Some([None; 5]));
        assert!(read::<5>(r#"{"item":[1]}"#, &WANT).is_none());
        assert!(read::<5>(r#"{"item":{},"item":{}}"#, &WANT).is_none());
        // Deeper objects are passed over, not entered; their keys may be escaped.
        let found: Found<'_, 5> =
            read(r#"{"item":{"o":{"a":1,"\u0062":1},"a":2}}"#, &WANT).unwrap();
        assert_eq!(found[2], Some("2"));
    }

    #[test]
    fn a_want_that_names_a_slot_past_the_end_reads_nothing_and_does_not_panic() {
        const WANT: Want<'static> = Want::take(&[("a", 3)]);
        assert_eq!(read::<2>(r#"{"a":1}"#, &WANT), None);
        assert_eq!(read::<2>(r#"{"b":1}"#, &WANT), Some([None, None]));
        assert_eq!(string(Some("\"")), Err(()));
    }

    #[test]
    fn the_first_member_is_named_and_entered() {
        const RESULT: Want<'static> = Want::take(&[("exitCode", 2)]);
        const BODY: Want<'static> = Want {
            take: &[("args", 1)],
            enter: &[],
            first: None,
        };
        const CALL: Want<'static> = Want {
            take: &[],
            enter: &[],
            first: Some((0, &BODY)),
        };
        const WANT: Want<'static> = Want {
            take: &[],
            enter: &[
                ("tool_call", CALL),
                (
                    "result",
                    Want {
                        take: &[],
                        enter: &[],
                        first: Some((3, &RESULT)),
                    },
                ),
            ],
            first: None,
        };
        let line = r#"{"tool_call":{"shellToolCall":{"args":{"command":"ls"}},"other":{"args":1}},"result":{"success":{"exitCode":0}}}"#;
        let found: Found<'_, 4> = read(line, &WANT).unwrap();
        assert_eq!(
            found,
            [
                Some("shellToolCall"),
                Some(r#"{"command":"ls"}"#),
                Some("0"),
                Some("success")
            ]
        );
        // The first member must be an object, and be there.
        assert!(read::<4>(r#"{"tool_call":{}}"#, &WANT).is_none());
        assert!(read::<4>(r#"{"tool_call":{"a":1}}"#, &WANT).is_none());
    }

    #[test]
    fn strings_are_unescaped_as_serde_unescapes_them() {
        let pieces = [
            "a",
            "\\n",
            "\\\\",
            "\\\"",
            "\\/",
            "\\t",
            "\\r",
            "\\b",
            "\\f",
            "é",
            "\\u00e9",
            "\\ud83d\\ude00",
            " ",
            "n",
            "u",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5_000 {
            let mut raw = String::from("\"");
            for _ in 0..(state % 7) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                raw.push_str(pieces[(state % pieces.len() as u64) as usize]);
            }
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            raw.push('"');
            let ours = string(Some(&raw)).map(|s| s.map(Cow::into_owned));
            assert_eq!(ours, Ok(serde_json::from_str::<String>(&raw).ok()), "{raw}");
        }
    }

    #[test]
    fn the_eight_byte_test_finds_each_byte_that_ends_a_plain_run() {
        for b in 0u8..=255 {
            for pos in 0..8 {
                let mut w = [b'a'; 8];
                w[pos] = b;
                let is = b == b'"' || b == b'\\' || b < 0x20;
                let m = special(u64::from_le_bytes(w));
                assert_eq!(m != 0, is, "{b} at {pos}");
                if is {
                    assert_eq!(m.trailing_zeros() as usize / 8, pos, "{b} at {pos}");
                    // With another after it, it is still the first found.
                    for later in pos + 1..8 {
                        w[later] = b'"';
                        let m = special(u64::from_le_bytes(w));
                        assert_eq!(
                            m.trailing_zeros() as usize / 8,
                            pos,
                            "{b} at {pos}, '\"' at {later}"
                        );
                    }
                }
            }
        }
    }
}
