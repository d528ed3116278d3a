//! A direct MessagePack reader for [`SaluteReport`], the one message the
//! supervisor decodes at fleet rate.
//!
//! It reads the shape every encoder produces (maps with string keys, values
//! of the field's own type) without serde's generic machinery: keys are
//! matched as bytes, action strings go straight into inline storage. On
//! anything else — an array-encoded struct, an unknown or duplicate key, a
//! missing required field, a value of another type, an out-of-range number,
//! invalid UTF-8, trailing bytes — it answers `None` and the caller decodes with
//! serde, which either accepts the message the same way or names the error.
//! It never accepts what serde would reject, and when both accept, both give
//! the same report (the differential tests at the end of this file hold it
//! to that).

use std::collections::BTreeMap;

use compact_str::CompactString;

use crate::salute::*;

/// Reads a report, or `None` to let serde decide.
pub(crate) fn read(payload: &[u8]) -> Option<SaluteReport> {
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let report = r.report()?;
    (r.pos == payload.len()).then_some(report)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Marks field `bit` as seen; `None` if it was already (serde rejects
/// duplicate fields).
fn first(seen: &mut u32, bit: u32) -> Option<()> {
    let mask = 1 << bit;
    if *seen & mask != 0 {
        return None;
    }
    *seen |= mask;
    Some(())
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    fn be(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
        )
    }

    /// A map header: its number of entries.
    fn map_len(&mut self) -> Option<usize> {
        match self.byte()? {
            m @ 0x80..=0x8f => Some(usize::from(m & 0x0f)),
            0xde => self.be(2).map(|n| n as usize),
            0xdf => self.be(4).map(|n| n as usize),
            _ => None,
        }
    }

    fn array_len(&mut self) -> Option<usize> {
        match self.byte()? {
            m @ 0x90..=0x9f => Some(usize::from(m & 0x0f)),
            0xdc => self.be(2).map(|n| n as usize),
            0xdd => self.be(4).map(|n| n as usize),
            _ => None,
        }
    }

    /// A string's bytes, not yet checked for UTF-8 (keys are compared as bytes).
    fn str_bytes(&mut self) -> Option<&'a [u8]> {
        let n = match self.byte()? {
            m @ 0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.be(1)? as usize,
            0xda => self.be(2)? as usize,
            0xdb => self.be(4)? as usize,
            _ => return None,
        };
        self.take(n)
    }

    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.str_bytes()?).ok()
    }

    fn is_nil(&mut self) -> bool {
        if self.peek() == Some(0xc0) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn opt_string(&mut self) -> Option<Option<String>> {
        if self.is_nil() {
            return Some(None);
        }
        self.str().map(|s| Some(s.to_owned()))
    }

    fn opt_compact(&mut self) -> Option<Option<CompactString>> {
        if self.is_nil() {
            return Some(None);
        }
        self.str().map(|s| Some(CompactString::from(s)))
    }

    /// An integer of any width that is not negative.
    fn u64(&mut self) -> Option<u64> {
        let m = self.byte()?;
        let signed = |v: i64| u64::try_from(v).ok();
        match m {
            0x00..=0x7f => Some(u64::from(m)),
            0xcc => self.be(1),
            0xcd => self.be(2),
            0xce => self.be(4),
            0xcf => self.be(8),
            0xd0 => signed(i64::from(self.be(1)? as u8 as i8)),
            0xd1 => signed(i64::from(self.be(2)? as u16 as i16)),
            0xd2 => signed(i64::from(self.be(4)? as u32 as i32)),
            0xd3 => signed(self.be(8)? as i64),
            _ => None,
        }
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    fn f64(&mut self) -> Option<f64> {
        match self.peek()? {
            0xca => {
                self.pos += 1;
                Some(f64::from(f32::from_bits(self.be(4)? as u32)))
            }
            0xcb => {
                self.pos += 1;
                Some(f64::from_bits(self.be(8)?))
            }
            // Negative integers decode as floats too, but rarely occur here.
            _ => self.u64().map(|v| v as f64),
        }
    }

    fn report(&mut self) -> Option<SaluteReport> {
        let (mut v, mut unit, mut time) = (None, None, None);
        let mut size = Size::default();
        let mut activity = Activity::default();
        let mut location = Location::default();
        let mut equipment = Equipment::default();
        let mut status = Status::default();
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"v" => {
                    first(&mut seen, 0)?;
                    v = Some(u16::try_from(self.u64()?).ok()?);
                }
                b"size" => {
                    first(&mut seen, 1)?;
                    size = self.size()?;
                }
                b"activity" => {
                    first(&mut seen, 2)?;
                    activity = self.activity()?;
                }
                b"location" => {
                    first(&mut seen, 3)?;
                    location = self.location()?;
                }
                b"unit" => {
                    first(&mut seen, 4)?;
                    unit = Some(self.unit_info()?);
                }
                b"time" => {
                    first(&mut seen, 5)?;
                    time = Some(self.time()?);
                }
                b"equipment" => {
                    first(&mut seen, 6)?;
                    equipment = self.equipment()?;
                }
                b"status" => {
                    first(&mut seen, 7)?;
                    status = self.status()?;
                }
                _ => return None,
            }
        }
        Some(SaluteReport {
            v: v?,
            size,
            activity,
            location,
            unit: unit?,
            time: time?,
            equipment,
            status,
        })
    }

    fn size(&mut self) -> Option<Size> {
        let mut s = Size::default();
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"context_tokens" => {
                    first(&mut seen, 0)?;
                    s.context_tokens = self.u64()?;
                }
                b"context_limit" => {
                    first(&mut seen, 1)?;
                    s.context_limit = self.u64()?;
                }
                b"context_fill" => {
                    first(&mut seen, 2)?;
                    s.context_fill = self.f64()?;
                }
                b"history_len" => {
                    first(&mut seen, 3)?;
                    s.history_len = self.u32()?;
                }
                b"condensations" => {
                    first(&mut seen, 4)?;
                    s.condensations = self.u32()?;
                }
                b"compacts_at" => {
                    first(&mut seen, 5)?;
                    s.compacts_at = if self.is_nil() {
                        None
                    } else {
                        Some(self.f64()?)
                    };
                }
                _ => return None,
            }
        }
        Some(s)
    }

    fn activity(&mut self) -> Option<Activity> {
        let mut a = Activity::default();
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"task_id" => {
                    first(&mut seen, 0)?;
                    a.task_id = self.opt_string()?;
                }
                b"step" => {
                    first(&mut seen, 1)?;
                    a.step = self.opt_string()?;
                }
                b"summary" => {
                    first(&mut seen, 2)?;
                    a.summary = self.opt_string()?;
                }
                b"turns_since_progress" => {
                    first(&mut seen, 3)?;
                    a.turns_since_progress = self.u32()?;
                }
                b"recent" => {
                    first(&mut seen, 4)?;
                    let n = self.array_len()?;
                    // Never trust a length for an allocation: room for at
                    // most what validation accepts (64 actions), and never
                    // more than the bytes left (an action takes at least one).
                    let room = n.min(64).min(self.buf.len() - self.pos);
                    let mut recent = Vec::with_capacity(room);
                    for _ in 0..n {
                        recent.push(self.action()?);
                    }
                    a.recent = recent;
                }
                _ => return None,
            }
        }
        Some(a)
    }

    fn action(&mut self) -> Option<Action> {
        let (mut kind, mut outcome) = (None, None);
        let (mut tool, mut args_hash, mut error_type, mut output_hash) = (None, None, None, None);
        let (mut cmd, mut line) = (None, None);
        let mut turn = 0;
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"kind" => {
                    first(&mut seen, 0)?;
                    kind = Some(match self.str_bytes()? {
                        b"tool" => ActionKind::Tool,
                        b"message" => ActionKind::Message,
                        _ => return None,
                    });
                }
                b"tool" => {
                    first(&mut seen, 1)?;
                    tool = self.opt_compact()?;
                }
                b"args_hash" => {
                    first(&mut seen, 2)?;
                    args_hash = self.opt_compact()?;
                }
                b"outcome" => {
                    first(&mut seen, 3)?;
                    outcome = Some(match self.str_bytes()? {
                        b"ok" => Outcome::Ok,
                        b"error" => Outcome::Error,
                        b"empty" => Outcome::Empty,
                        _ => return None,
                    });
                }
                b"error_type" => {
                    first(&mut seen, 4)?;
                    error_type = self.opt_compact()?;
                }
                b"output_hash" => {
                    first(&mut seen, 5)?;
                    output_hash = self.opt_compact()?;
                }
                b"turn" => {
                    first(&mut seen, 6)?;
                    turn = self.u64()?;
                }
                b"cmd" => {
                    first(&mut seen, 7)?;
                    cmd = self.opt_compact()?;
                }
                b"line" => {
                    first(&mut seen, 8)?;
                    line = self.opt_compact()?;
                }
                _ => return None,
            }
        }
        Some(Action {
            kind: kind?,
            tool,
            args_hash,
            outcome: outcome?,
            error_type,
            output_hash,
            turn,
            cmd,
            line,
        })
    }

    fn location(&mut self) -> Option<Location> {
        let mut l = Location::default();
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"host" => {
                    first(&mut seen, 0)?;
                    l.host = self.opt_string()?;
                }
                b"container" => {
                    first(&mut seen, 1)?;
                    l.container = self.opt_string()?;
                }
                b"workdir" => {
                    first(&mut seen, 2)?;
                    l.workdir = self.opt_string()?;
                }
                _ => return None,
            }
        }
        Some(l)
    }

    fn unit_info(&mut self) -> Option<UnitInfo> {
        let (mut unit, mut role) = (None, None);
        let mut pace = Pace::default();
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"unit" => {
                    first(&mut seen, 0)?;
                    unit = Some(self.str()?.to_owned());
                }
                b"role" => {
                    first(&mut seen, 1)?;
                    role = Some(self.str()?.to_owned());
                }
                b"pace" => {
                    first(&mut seen, 2)?;
                    pace = match self.str_bytes()? {
                        b"primary" => Pace::Primary,
                        b"alternate" => Pace::Alternate,
                        b"contingent" => Pace::Contingent,
                        b"emergency" => Pace::Emergency,
                        _ => return None,
                    };
                }
                _ => return None,
            }
        }
        Some(UnitInfo {
            unit: unit?,
            role: role?,
            pace,
        })
    }

    fn time(&mut self) -> Option<Time> {
        let (mut at, mut turn, mut seq, mut epoch) = (0, None, None, 0);
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"at" => {
                    first(&mut seen, 0)?;
                    at = self.u64()?;
                }
                b"turn" => {
                    first(&mut seen, 1)?;
                    turn = Some(self.u64()?);
                }
                b"seq" => {
                    first(&mut seen, 2)?;
                    seq = Some(self.u64()?);
                }
                b"epoch" => {
                    first(&mut seen, 3)?;
                    epoch = self.u64()?;
                }
                _ => return None,
            }
        }
        Some(Time {
            at,
            turn: turn?,
            seq: seq?,
            epoch,
        })
    }

    fn equipment(&mut self) -> Option<Equipment> {
        let mut e = Equipment::default();
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"model" => {
                    first(&mut seen, 0)?;
                    e.model = self.opt_string()?;
                }
                b"tokens_in" => {
                    first(&mut seen, 1)?;
                    e.tokens_in = self.u64()?;
                }
                b"tokens_out" => {
                    first(&mut seen, 2)?;
                    e.tokens_out = self.u64()?;
                }
                b"cost_usd" => {
                    first(&mut seen, 3)?;
                    e.cost_usd = crate::finite::check_amount("cost_usd", self.f64()?).ok()?;
                }
                b"tool_failures" => {
                    first(&mut seen, 4)?;
                    let mut m = BTreeMap::new();
                    for _ in 0..self.map_len()? {
                        let k = self.str()?.to_owned();
                        m.insert(k, self.u32()?);
                    }
                    e.tool_failures = m;
                }
                _ => return None,
            }
        }
        Some(e)
    }

    fn status(&mut self) -> Option<Status> {
        let mut s = Status::default();
        let mut seen = 0u32;
        for _ in 0..self.map_len()? {
            match self.str_bytes()? {
                b"health" => {
                    first(&mut seen, 0)?;
                    s.health = match self.str_bytes()? {
                        b"green" => Health::Green,
                        b"amber" => Health::Amber,
                        b"red" => Health::Red,
                        _ => return None,
                    };
                }
                b"assessed_by" => {
                    first(&mut seen, 1)?;
                    s.assessed_by = match self.str_bytes()? {
                        b"self" => Assessor::SelfAssessed,
                        b"xo" => Assessor::Xo,
                        _ => return None,
                    };
                }
                b"note" => {
                    first(&mut seen, 2)?;
                    s.note = self.opt_string()?;
                }
                b"ended" => {
                    first(&mut seen, 3)?;
                    s.ended = match self.byte()? {
                        0xc2 => false,
                        0xc3 => true,
                        _ => return None,
                    };
                }
                _ => return None,
            }
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (no dependency for a test).
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn flip(&mut self) -> bool {
            self.next() & 1 == 1
        }
        /// Short ASCII, long (past inline storage), or non-ASCII text.
        fn text(&mut self) -> String {
            match self.below(4) {
                0 => format!("{:x}", self.next()),
                1 => "x".repeat(20 + self.below(40) as usize),
                2 => "héllo wörld ✓ 日本".into(),
                _ => String::new(),
            }
        }
        fn opt(&mut self) -> Option<String> {
            self.flip().then(|| self.text())
        }
        fn number(&mut self) -> u64 {
            match self.below(5) {
                0 => self.below(128),
                1 => self.below(256),
                2 => self.below(65_536),
                3 => self.below(u64::from(u32::MAX)),
                _ => self.next(),
            }
        }
    }

    fn report(g: &mut Gen) -> SaluteReport {
        let mut r = SaluteReport::new(
            format!("u-{}", g.below(1000)),
            g.text(),
            g.number(),
            g.number(),
        );
        r.time.at = g.number();
        r.size = Size {
            context_tokens: g.number(),
            context_limit: g.number(),
            context_fill: if g.flip() {
                0.0
            } else {
                g.below(1000) as f64 / 1000.0
            },
            history_len: g.number() as u32,
            condensations: g.below(9) as u32,
            compacts_at: g.flip().then(|| g.below(1000) as f64 / 1000.0),
        };
        r.activity = Activity {
            task_id: g.opt(),
            step: g.opt(),
            summary: g.opt(),
            turns_since_progress: g.number() as u32,
            recent: (0..g.below(25))
                .map(|_| Action {
                    kind: if g.flip() {
                        ActionKind::Tool
                    } else {
                        ActionKind::Message
                    },
                    tool: g.opt().map(Into::into),
                    args_hash: g.opt().map(Into::into),
                    outcome: [Outcome::Ok, Outcome::Error, Outcome::Empty][g.below(3) as usize],
                    error_type: g.opt().map(Into::into),
                    output_hash: g.opt().map(Into::into),
                    turn: g.number(),
                    cmd: g.opt().map(Into::into),
                    line: g.opt().map(Into::into),
                })
                .collect(),
        };
        r.location = Location {
            host: g.opt(),
            container: g.opt(),
            workdir: g.opt(),
        };
        r.unit.pace = [
            Pace::Primary,
            Pace::Alternate,
            Pace::Contingent,
            Pace::Emergency,
        ][g.below(4) as usize];
        r.equipment = Equipment {
            model: g.opt(),
            tokens_in: g.number(),
            tokens_out: g.number(),
            cost_usd: g.below(10_000) as f64 / 7.0,
            tool_failures: (0..g.below(4))
                .map(|_| (g.text(), g.number() as u32))
                .collect(),
        };
        r.status = Status {
            health: [Health::Green, Health::Amber, Health::Red][g.below(3) as usize],
            assessed_by: if g.flip() {
                Assessor::Xo
            } else {
                Assessor::SelfAssessed
            },
            note: g.opt(),
            ended: g.flip(),
            self_steered: Vec::new(),
            needs: None,
            waiting_until: None,
            unreadable: 0,
        };
        r
    }

    fn serde(bytes: &[u8]) -> Result<SaluteReport, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }

    #[test]
    fn reads_what_serde_writes_and_reads() {
        let mut g = Gen(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2_000 {
            let r = report(&mut g);
            let bytes = rmp_serde::to_vec_named(&r).unwrap();
            assert_eq!(read(&bytes).as_ref(), Some(&r));
            assert_eq!(serde(&bytes).unwrap(), r);
        }
    }

    /// Corrupted payloads: whenever the reader accepts one, serde accepts it
    /// too and decodes the same report; some corruptions must still be read
    /// (a changed digit), so the comparison is not vacuous.
    #[test]
    fn never_accepts_what_serde_rejects() {
        let mut g = Gen(0x2545_f491_4f6c_dd1d);
        let (mut read_some, mut rejected) = (0, 0);
        for _ in 0..20_000 {
            let r = report(&mut g);
            let mut bytes = rmp_serde::to_vec_named(&r).unwrap();
            match g.below(3) {
                0 => {
                    let i = g.below(bytes.len() as u64) as usize;
                    bytes[i] = g.next() as u8;
                }
                1 => bytes.truncate(g.below(bytes.len() as u64) as usize),
                _ => {
                    let i = g.below(bytes.len() as u64) as usize;
                    bytes.insert(i, g.next() as u8);
                }
            }
            match read(&bytes) {
                Some(fast) => {
                    let slow = serde(&bytes).expect("serde rejects what the reader accepted");
                    // Compared through their encoding: a corrupted float may be NaN.
                    assert_eq!(
                        rmp_serde::to_vec_named(&fast).unwrap(),
                        rmp_serde::to_vec_named(&slow).unwrap()
                    );
                    read_some += 1;
                }
                None => rejected += 1,
            }
        }
        assert!(
            read_some > 1_000,
            "only {read_some} corrupted payloads were read"
        );
        assert!(
            rejected > 1_000,
            "only {rejected} corrupted payloads were refused"
        );
    }

    /// Shapes serde accepts that the reader leaves to serde.
    #[test]
    fn leaves_other_shapes_to_serde() {
        let r = report(&mut Gen(7));
        // A struct as an array of its fields in order.
        let mut v = fields(&r);
        let t = &r.time;
        v.iter_mut().find(|(k, _)| k == b"time").unwrap().1 =
            rmp_serde::to_vec(&(t.at, t.turn, t.seq)).unwrap();
        let bytes = encode_map(&v);
        assert_eq!(read(&bytes), None);
        assert_eq!(serde(&bytes).unwrap(), r);
        // An unknown field (a newer minor version).
        let mut v = fields(&r);
        v.push((b"extra".to_vec(), vec![0xc3]));
        let bytes = encode_map(&v);
        assert_eq!(read(&bytes), None);
        assert_eq!(serde(&bytes).unwrap(), r);
    }

    /// Shapes both refuse: the reader answers `None`, serde names the error.
    #[test]
    fn refuses_what_serde_refuses() {
        let r = report(&mut Gen(11));
        let fields = fields(&r);
        // Duplicate field.
        let mut dup = fields.clone();
        dup.push(dup[0].clone());
        // Missing required field (`time`).
        let missing: Vec<_> = fields
            .iter()
            .filter(|(k, _)| k != b"time")
            .cloned()
            .collect();
        // Negative version.
        let mut negative = fields.clone();
        negative.iter_mut().find(|(k, _)| k == b"v").unwrap().1 = vec![0xff];
        for (what, bytes) in [
            ("duplicate", encode_map(&dup)),
            ("missing", encode_map(&missing)),
            ("negative", encode_map(&negative)),
        ] {
            assert_eq!(read(&bytes), None, "{what}");
            assert!(serde(&bytes).is_err(), "{what}");
        }
        let mut trailing = rmp_serde::to_vec_named(&r).unwrap();
        trailing.push(0xc0);
        assert_eq!(read(&trailing), None);
    }

    /// Every integer width a writer may pick: the reader reads the value
    /// serde reads, and refuses a negative number for an unsigned field.
    #[test]
    fn integers_of_every_width() {
        let r = report(&mut Gen(13));
        let with_turn = |encoded: Vec<u8>| {
            let mut v = fields(&r);
            let mut time = vec![0x83, 0xa2, b'a', b't', 0x00, 0xa3, b's', b'e', b'q', 0x01];
            time.extend_from_slice(&[0xa4, b't', b'u', b'r', b'n']);
            time.extend_from_slice(&encoded);
            v.iter_mut().find(|(k, _)| k == b"time").unwrap().1 = time;
            encode_map(&v)
        };
        let five = [
            vec![0x05],
            vec![0xcc, 5],
            vec![0xcd, 0, 5],
            vec![0xce, 0, 0, 0, 5],
            vec![0xcf, 0, 0, 0, 0, 0, 0, 0, 5],
            vec![0xd0, 5],
            vec![0xd1, 0, 5],
            vec![0xd2, 0, 0, 0, 5],
            vec![0xd3, 0, 0, 0, 0, 0, 0, 0, 5],
        ];
        for enc in five {
            let bytes = with_turn(enc.clone());
            assert_eq!(read(&bytes).map(|r| r.time.turn), Some(5), "{enc:x?}");
            assert_eq!(serde(&bytes).unwrap().time.turn, 5, "{enc:x?}");
        }
        let negative = [
            vec![0xff],
            vec![0xd0, 0xfb],
            vec![0xd1, 0xff, 0xfb],
            vec![0xd2, 0xff, 0xff, 0xff, 0xfb],
            vec![0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfb],
            vec![0xcb, 0x40, 0x14, 0, 0, 0, 0, 0, 0],
        ];
        for enc in negative {
            let bytes = with_turn(enc.clone());
            assert_eq!(read(&bytes), None, "{enc:x?}");
            assert!(serde(&bytes).is_err(), "{enc:x?}");
        }
        // A float field takes floats of both widths and integers.
        for (enc, want) in [
            (vec![0xca, 0x40, 0xa0, 0, 0], 5.0),
            (vec![0xcb, 0x40, 0x14, 0, 0, 0, 0, 0, 0], 5.0),
            (vec![0x05], 5.0),
            (vec![0xd0, 5], 5.0),
        ] {
            let mut v = fields(&r);
            let mut eq = vec![0x81, 0xa8];
            eq.extend_from_slice(b"cost_usd");
            eq.extend_from_slice(&enc);
            v.iter_mut().find(|(k, _)| k == b"equipment").unwrap().1 = eq;
            let bytes = encode_map(&v);
            assert_eq!(read(&bytes).map(|r| r.equipment.cost_usd), Some(want));
            assert_eq!(serde(&bytes).unwrap().equipment.cost_usd, want);
        }
    }

    /// The report's top-level fields as (key, encoded value) pairs.
    fn fields(r: &SaluteReport) -> Vec<(Vec<u8>, Vec<u8>)> {
        let json = serde_json::to_value(r).unwrap();
        json.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), rmp_serde::to_vec_named(v).unwrap()))
            .collect()
    }

    fn encode_map(fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut out = vec![0xde, 0, fields.len() as u8];
        for (k, v) in fields {
            out.push(0xa0 | k.len() as u8);
            out.extend_from_slice(k);
            out.extend_from_slice(v);
        }
        out
    }
}
