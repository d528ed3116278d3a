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
mod tests;
