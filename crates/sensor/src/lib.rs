//! Sensors: the event streams of the agents teams already run, read
//! incrementally (line by line, from a pipe or a growing file) into the
//! turns of the SALUTE contract. Pure: no I/O, no clock.
//!
//! # Layout
//!
//! - [`Sensor`] (here): one stream of one [`Format`]; feed it lines, get
//!   [`TurnEvent`]s; unknown events are skipped and counted, a malformed line
//!   is a [`LineError`] naming its line, and the stream goes on.
//! - [`classify`]: error classes from exit codes, `is_error`, tracebacks,
//!   test failures, timeouts — and provider errors (rate limits, overload,
//!   5xx), their own class so the XO does not call an outage a loop.
//! - [`claude`]: Claude Code `stream-json` events and session transcripts.
//! - [`cursor`]: Cursor CLI `stream-json`.
//! - [`codex`]: Codex CLI `exec --json` events and rollout files.
//! - [`openhands`]: OpenHands V0 event streams and V1 SDK events.
//! - [`swe`]: SWE-agent `.traj` and mini-swe-agent trajectories (whole documents).
//! - [`document`]: whole recordings (a stream, a JSON array, an evaluation's
//!   `output.jsonl`, a trajectory) → [`document::Run`]s, one a session.
//! - [`salute`]: turns → SALUTE reports (the runner, `xo import`).
//! - `common`: what every format's reader shares (calls waiting for their
//!   results, commands still running, turns made with progress and evidence).
//! - [`evidence`]: the command that decided a shell step, the line that
//!   tells, and what a tool's status means.
//! - `scan`: the common lines' few fields found in one pass that checks
//!   the line is JSON, without building it (what it cannot take plainly,
//!   serde reads).
//!
//! Start with [`Sensor::line`]; docs/sensors.md maps every field.

pub mod classify;
pub mod claude;
pub mod codex;
mod common;
pub mod cursor;
pub mod document;
pub mod evidence;
pub mod limit;
pub mod openhands;
pub mod salute;
mod scan;
pub mod swe;

use std::collections::HashMap;

use serde_json::Value;
use xo_proto::{Action, Outcome};

pub(crate) use common::{Common, Pending, Running};

/// One step of an agent, as the SALUTE report and the radio see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnEvent {
    pub action: Option<Action>,
    pub summary: Option<String>,
    /// The step moved the task forward (a file written, a check passing).
    pub progress: bool,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    /// The conversation's size now, when the stream tells it.
    pub context_tokens: Option<u64>,
    pub context_limit: Option<u64>,
    pub condensed: bool,
    /// The fill (0..1) at which the agent compacts its own context, where
    /// the format's agent is known to (Claude Code's auto-compact).
    pub compacts_at: Option<f64>,
    /// A new instruction reached the agent before this step (its user's
    /// prompt, a notification): the count of turns without progress starts
    /// over, as it does for a new task.
    pub instructed: bool,
    /// The step waited on a command still running (a poll of its session):
    /// no action of its own, neither progress nor the lack of it; the
    /// command's end is the action.
    pub waiting: bool,
    pub model: Option<String>,
    /// When the step happened, from the record (ms since the epoch); `None`
    /// where the format keeps no time.
    pub at_ms: Option<u64>,
}

/// An RFC 3339 time (`2025-01-27T22:44:56.900854`, `…Z`, `…+02:00`) in ms
/// since the epoch; a time without a zone is UTC. `None` if it is no time
/// (an impossible date or hour, an offset past ±25:59, any other text) or
/// one before 1970. Parsed by `jiff`: text from outside (a report file, a
/// transcript) never panics it.
pub fn parse_time_ms(s: &str) -> Option<u64> {
    // Most records write the one plain shape: read here, the rest by jiff.
    plain_time_ms(s).or_else(|| jiff_time_ms(s))
}

/// [`parse_time_ms`] by jiff: an instant with its offset, or else a civil
/// time read as UTC.
fn jiff_time_ms(s: &str) -> Option<u64> {
    let ts = match s.parse::<jiff::Timestamp>() {
        Ok(ts) => ts,
        // No offset: the civil time, read as UTC.
        Err(_) => s
            .parse::<jiff::civil::DateTime>()
            .ok()?
            .to_zoned(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp(),
    };
    u64::try_from(ts.as_millisecond()).ok()
}

/// `YYYY-MM-DDTHH:MM:SS`, then perhaps a fraction of up to nine digits,
/// then `Z` or nothing (UTC either way), from 1970 to 9998: the ms since the
/// epoch, as jiff gives them (a fraction past the millisecond dropped).
/// `None` for anything else, which [`parse_time_ms`] hands to jiff (an
/// impossible date too: jiff says why not).
fn plain_time_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<u64> {
        let d = b.get(from..from + len)?;
        d.iter().try_fold(0u64, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
        })
    };
    if b.len() < 19 || [b[4], b[7], b[10], b[13], b[16]] != [b'-', b'-', b'T', b':', b':'] {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    // (jiff's last instant is late in 9999: that year is its to read.)
    if !(1970..=9998).contains(&year)
        || day == 0
        || day > days_in_month
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut rest = &b[19..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return None;
        }
        ms = frac[..n.min(3)]
            .iter()
            .fold(0u64, |m, c| m * 10 + u64::from(c - b'0'))
            * [100, 10, 1][n.min(3) - 1];
        rest = &frac[n..];
    }
    if !(rest.is_empty() || rest == b"Z") {
        return None;
    }
    // Days since the epoch of a proleptic Gregorian date (Howard Hinnant's
    // days_from_civil, for years from 1970).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + ms)
}

#[cfg(test)]
mod time_tests {
    use super::parse_time_ms;

    #[test]
    fn the_plain_shape_is_read_as_jiff_reads_it() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let fracs = [
            "",
            ".",
            ".9",
            ".90",
            ".900",
            ".900854",
            ".123456789",
            ".1234567891",
            ".x",
        ];
        let ends = ["", "Z", "z", "+00:00", "-05:00", " ", "ZZ"];
        let mut plain = 0;
        for _ in 0..20_000 {
            let s = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}{}",
                [1969, 1970, 1999, 2000, 2024, 2025, 2100, 2400, 9999][next(9) as usize],
                next(14),
                next(33),
                next(26),
                next(62),
                next(62),
                fracs[next(fracs.len() as u64) as usize],
                ends[next(ends.len() as u64) as usize],
            );
            plain += usize::from(super::plain_time_ms(&s).is_some());
            assert_eq!(parse_time_ms(&s), super::jiff_time_ms(&s), "{s}");
        }
        // Most of them went the plain way (the rest: impossible, or not plain).
        assert!(plain > 2_000, "{plain}");
    }

    #[test]
    fn times_are_read_as_rfc_3339_and_anything_else_is_none() {
        assert_eq!(parse_time_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_time_ms("2025-01-27T22:44:56.900854"),
            Some(1_738_017_896_900)
        );
        assert_eq!(
            parse_time_ms("2025-01-27T22:44:56.9Z"),
            Some(1_738_017_896_900)
        );
        assert_eq!(
            parse_time_ms("2025-01-28T00:44:56+02:00"),
            Some(1_738_017_896_000)
        );
        assert_eq!(
            parse_time_ms("2025-01-27 22:44:56Z"),
            Some(1_738_017_896_000),
            "a space for the T"
        );
        // Issue 44: a multibyte character where the fraction goes once
        // panicked the report-file poller; impossible dates and hours and
        // offsets were accepted.
        for bad in [
            "2025-01-27T22:44:56é1234",
            "2025-01-27T22:44:56.é",
            "2025-01-27T-1:44:56",
            "2025-02-31T10:00:00Z",
            "2025-01-27T22:44:56+99:00",
            "2025-01-27T24:00:01Z",
            "1969-12-31T23:59:59Z",
            "yesterday",
            "",
        ] {
            assert_eq!(parse_time_ms(bad), None, "{bad:?}");
        }
    }
}

/// A short stable hash of some text, for SALUTE action fields: 12 hex
/// digits (48 bits) of a fast 64-bit hash, eight bytes a step. Equal text
/// gives an equal hash on every machine and in every version; it is no
/// digest (nothing relies on it being hard to forge).
pub fn short_hash(text: &str) -> String {
    hex_hash(text).as_str().to_string()
}

/// [`short_hash`] on the stack, for the fields of every turn.
pub(crate) struct Hex([u8; 12]);

impl Hex {
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

pub(crate) fn hex_hash(text: &str) -> Hex {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let b = text.as_bytes();
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(5) ^ v).wrapping_mul(K);
    }
    // The last bytes as a little-endian word, built in place: a copy of a
    // length not known here would be a call.
    let tail = chunks
        .remainder()
        .iter()
        .rev()
        .fold(0u64, |t, &x| t << 8 | u64::from(x));
    h = (h.rotate_left(5) ^ tail).wrapping_mul(K);
    // Final mix (a 64-bit avalanche), so that near texts differ everywhere.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    let v = h >> 16;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 12];
    for (i, o) in out.iter_mut().enumerate() {
        *o = HEX[((v >> ((11 - i) * 4)) & 0xf) as usize];
    }
    Hex(out)
}

/// A JSON value's hash: its compact text (objects keep their key order).
pub fn value_hash(v: &Value) -> String {
    short_hash(&v.to_string())
}

/// The formats a sensor reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `claude -p --output-format stream-json --verbose`, and transcripts
    /// (`~/.claude/projects/<dir>/<session>.jsonl`).
    Claude,
    /// `cursor-agent -p --output-format stream-json`.
    Cursor,
    /// `codex exec --json`, and rollout files (`~/.codex/sessions/**/rollout-*.jsonl`).
    Codex,
    /// OpenHands V0 event streams and V1 SDK events.
    OpenHands,
    /// SWE-agent `.traj` and mini-swe-agent trajectories: whole JSON
    /// documents, read with [`swe::parse_document`].
    SweAgent,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Self::Claude,
        Self::Cursor,
        Self::Codex,
        Self::OpenHands,
        Self::SweAgent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claude => "claude",
            Self::Cursor => "cursor",
            Self::Codex => "codex",
            Self::OpenHands => "openhands",
            Self::SweAgent => "swe-agent",
        }
    }

    /// Reads a format name; the error lists the known ones.
    pub fn parse(s: &str) -> Result<Self, SensorError> {
        Self::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| SensorError::UnknownFormat { given: s.into() })
    }

    /// Line formats are read line by line; a document format as a whole.
    pub fn is_lines(self) -> bool {
        self != Self::SweAgent
    }
}

/// Why a sensor could not use its input. Pure: no I/O error is among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SensorError {
    /// A format name none of [`Format::ALL`] has.
    UnknownFormat { given: String },
    /// Not JSON at all (the parser's words).
    NotJson(String),
    /// JSON, but not an object.
    NotObject,
    /// An object of another shape than the format's (the parser's words).
    Shape(String),
    /// An event with no `type`.
    NoType,
    /// A known event without a field it must have (`tool_use without "id"`).
    Missing(&'static str),
    /// A known event with a value the format does not have.
    Unexpected(String),
    /// A line longer than [`MAX_LINE`].
    TooLong { len: usize },
    /// A whole-document format fed line by line.
    WholeDocument(Format),
    /// A document (a trajectory, an event array, an evaluation's output)
    /// that is not one: what it should have been, and why not.
    Document { what: String, why: String },
}

impl std::fmt::Display for SensorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownFormat { given } => {
                let known: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
                write!(
                    f,
                    "unknown agent format {given:?}; known: {}",
                    known.join(", ")
                )
            }
            Self::NotJson(e) => write!(f, "not JSON: {e}"),
            Self::NotObject => f.write_str("not a JSON object"),
            Self::Shape(e) => write!(f, "unexpected shape: {e}"),
            Self::NoType => f.write_str("no \"type\""),
            Self::Missing(what) => f.write_str(what),
            Self::Unexpected(what) => f.write_str(what),
            Self::TooLong { len } => write!(f, "line of {len} bytes, longer than {MAX_LINE}"),
            Self::WholeDocument(format) => write!(
                f,
                "{} is a whole-document format; read it with swe::parse_document",
                format.as_str()
            ),
            Self::Document { what, why } => write!(f, "not {what}: {why}"),
        }
    }
}

impl std::error::Error for SensorError {}

/// `event.ok_or("tool_use without \"id\"")?`: a missing field, in words.
impl From<&'static str> for SensorError {
    fn from(what: &'static str) -> Self {
        Self::Missing(what)
    }
}

impl PartialEq<&str> for SensorError {
    fn eq(&self, other: &&str) -> bool {
        let words = self.to_string();
        words.as_str() == *other
    }
}

/// A line that could not be used: which, and why. The stream goes on.
#[derive(Debug, Clone, PartialEq)]
pub struct LineError {
    pub line: u64,
    pub reason: SensorError,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// What a sensor has read so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub lines: u64,
    /// Events of a known type used.
    pub events: u64,
    /// Events of a type this sensor does not know: skipped.
    pub unknown: u64,
    /// Lines that were not JSON objects, or had the wrong shape.
    pub malformed: u64,
    /// Results that named no call seen (out of order, or the call's line lost).
    pub orphan_results: u64,
    /// The line of the first of them.
    pub first_orphan: Option<u64>,
    /// Calls the agent cancelled before they ran (Claude Code's "Sibling
    /// tool call errored"): no step, and no failure.
    pub cancelled: u64,
    pub turns: u64,
    /// Tool results whose exit status was not 0, and of those the ones
    /// read by their tool's documented meaning (grep 1: no match; a
    /// linter's findings), not as failures.
    pub exits_nonzero: u64,
    pub exits_by_meaning: u64,
    /// Per record kind (`type`, or `type/subtype` where the type is only
    /// an envelope): what was read, mapped, skipped by name and not known.
    pub kinds: std::collections::BTreeMap<String, KindCount>,
}

/// What a sensor did with the records of one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindCount {
    pub read: u64,
    /// Read into the run (a step, a result, usage, a state).
    pub mapped: u64,
    /// Skipped by name: a kind the sensor knows carries no step.
    pub skipped: u64,
    /// A kind the sensor does not know: not read, and said.
    pub unknown: u64,
    /// Of a known kind but of a shape the sensor could not read.
    pub malformed: u64,
    /// The first line (a document: the record's number) not read.
    pub first_unread: Option<u64>,
}

impl Stats {
    /// Records that were not read: of kinds not known, or not readable.
    pub fn unread(&self) -> u64 {
        self.unknown + self.malformed
    }

    /// Counts a record of `kind` and what was done with it (`Some(true)`
    /// mapped, `Some(false)` skipped by name, `None` not known); `line`
    /// names it when it was not read.
    pub fn count_kind(&mut self, kind: &str, done: Option<bool>, malformed: bool, line: u64) {
        let k = match self.kinds.get_mut(kind) {
            Some(k) => k,
            None => self.kinds.entry(kind.to_string()).or_default(),
        };
        k.read += 1;
        match (malformed, done) {
            (true, _) => k.malformed += 1,
            (false, Some(true)) => k.mapped += 1,
            (false, Some(false)) => k.skipped += 1,
            (false, None) => k.unknown += 1,
        }
        if (malformed || done.is_none()) && k.first_unread.is_none() {
            k.first_unread = Some(line);
        }
    }
}

/// Lines longer than this are malformed (a runaway tool output is not an event).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// One event stream of one format, read line by line.
#[derive(Debug)]
pub struct Sensor {
    format: Format,
    line: u64,
    pub(crate) common: Common,
    /// Claude: the assistant message whose usage was counted last (a
    /// message comes once a content block, in a row), with its input and
    /// output tokens counted so far.
    last_message: (String, u64, u64),
}

impl Sensor {
    pub fn new(format: Format) -> Self {
        let common = Common::for_format(format);
        Self {
            format,
            line: 0,
            common,
            last_message: (String::new(), 0, 0),
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Feeds one line (without its newline); returns the turns it ends.
    /// Blank lines are skipped; anything else that is not a JSON object of
    /// the format is a [`LineError`] and the stream goes on.
    pub fn line(&mut self, text: &str) -> Result<Vec<TurnEvent>, LineError> {
        self.line += 1;
        self.common.stats.lines += 1;
        // Read from its start: a line is touched at its end only when it
        // is no JSON object (to every reader of one, a trailing `\r` is
        // white space), so a line not yet in the cache is fetched in order.
        let start = text.trim_start();
        if start.is_empty() {
            return Ok(Vec::new());
        }
        let text = if start.starts_with('{') {
            text
        } else {
            text.trim_end_matches('\r')
        };
        let bad = |line, reason: SensorError| LineError { line, reason };
        if text.len() > MAX_LINE {
            self.common.stats.malformed += 1;
            return Err(bad(self.line, SensorError::TooLong { len: text.len() }));
        }
        self.common.record_kind.clear();
        self.common.record_skipped = false;
        self.common.record_unknown = false;
        // A line that marks rest sets it again; work without one clears it.
        let resting = std::mem::take(&mut self.common.resting);
        let out = match self.format {
            Format::Claude => claude::event(&mut self.common, &mut self.last_message, text),
            Format::Cursor => cursor::line(&mut self.common, text),
            Format::Codex => codex::line(&mut self.common, text),
            Format::OpenHands => openhands::line(&mut self.common, text),
            Format::SweAgent => Err(SensorError::WholeDocument(self.format)),
        };
        if !self.common.resting {
            let worked = matches!(&out, Ok(Some(t)) if !t.is_empty());
            if worked {
                // The run went on after its end: it has no end (yet).
                self.common.ended = None;
            } else {
                self.common.resting = resting;
            }
        }
        if self.common.stats.orphan_results > 0 && self.common.stats.first_orphan.is_none() {
            self.common.stats.first_orphan = Some(self.line);
        }
        let kind = if self.common.record_kind.is_empty() {
            if out.is_err() {
                "(unreadable line)"
            } else {
                "(no type)"
            }
        } else {
            self.common.record_kind.as_str()
        };
        let done = match &out {
            Ok(Some(_)) if !self.common.record_unknown => Some(!self.common.record_skipped),
            _ => None,
        };
        self.common
            .stats
            .count_kind(kind, done, out.is_err(), self.line);
        match out {
            Ok(Some(turns)) if self.common.record_unknown => {
                self.common.stats.unknown += 1;
                Ok(turns)
            }
            Ok(Some(turns)) => {
                self.common.stats.events += 1;
                Ok(turns)
            }
            Ok(None) => {
                self.common.stats.unknown += 1;
                Ok(Vec::new())
            }
            Err(reason) => {
                self.common.stats.malformed += 1;
                Err(bad(self.line, reason))
            }
        }
    }

    /// The stream has ended: the turn still held back (Claude's last text
    /// block, which no later line of its message followed), if any.
    pub fn finish(&mut self) -> Vec<TurnEvent> {
        self.common.flush_held().into_iter().collect()
    }

    /// Calls still waiting for their result when the stream ended.
    /// Commands still running in the background (or a unified-exec
    /// session) count: their end was never read.
    pub fn unfinished(&self) -> usize {
        self.common.pending.len() + self.common.exec.running.len()
    }

    pub fn stats(&self) -> &Stats {
        &self.common.stats
    }

    /// Records read so far that the sensor could not use: of kinds it does
    /// not know, lines it could not parse, results that named no call.
    /// Not 0: its picture of the run is known to be incomplete.
    pub fn unread(&self) -> u64 {
        let st = &self.common.stats;
        st.unread() + st.orphan_results
    }

    /// The agent's session id, once the stream named it.
    pub fn session(&self) -> Option<&str> {
        self.common.session.as_deref()
    }

    /// The session that started this one (a subagent's parent), if any.
    pub fn parent(&self) -> Option<&str> {
        self.common.parent.as_deref()
    }

    /// How the run ended: `None` while (or if) the stream has no end
    /// record, `Some(true)` when it ended failed.
    pub fn ended(&self) -> Option<bool> {
        self.common.ended
    }

    /// The agent has stopped working: its run ended, or its turn did and
    /// it waits for its user (Claude Code's `turn_duration` or a message
    /// that ends the turn, Codex's `task_complete` or `turn_aborted`, an
    /// OpenHands agent state such as `awaiting_user_input`). Work after it
    /// clears it.
    pub fn resting(&self) -> bool {
        self.common.resting
    }

    /// When the usage limit the agent's provider refused it for resets
    /// (ms since the epoch), while the stream says it is over one (Codex's
    /// `token_count` `rate_limits`: `rate_limit_reached_type` set, or a
    /// window at 100%).
    pub fn limited_until(&self) -> Option<u64> {
        self.common.limited_until
    }

    pub fn model(&self) -> Option<&str> {
        self.common.model.as_deref()
    }

    /// The agent's last words so far: its run's result, else its last
    /// message (where a live run's reply is).
    pub fn final_text(&self) -> Option<&str> {
        self.common.final_text.as_deref()
    }
}

/// A line as a JSON object of type `T`; the error says whether it was no
/// JSON, no object, or an object of another shape.
pub(crate) fn parse_object<'a, T: serde::Deserialize<'a>>(text: &'a str) -> Result<T, SensorError> {
    if !text.trim_start().starts_with('{') {
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => SensorError::NotObject,
            Err(e) => SensorError::NotJson(e.to_string()),
        });
    }
    serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => SensorError::Shape(e.to_string()),
        _ => SensorError::NotJson(e.to_string()),
    })
}

/// The text of a raw JSON value: a string unescaped, anything else as written.
pub(crate) fn raw_text(t: &str) -> std::borrow::Cow<'_, str> {
    match scan::string(Some(t)) {
        Ok(Some(text)) => text,
        // `null`, a number, an object: as written.
        _ => std::borrow::Cow::Borrowed(t),
    }
}

/// The `command` of a call's arguments, if they have one.
pub(crate) fn command_of(args: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Command<'a> {
        #[serde(borrow)]
        command: Option<std::borrow::Cow<'a, str>>,
    }
    if !args.contains("\"command\"") {
        return None;
    }
    const WANT: scan::Want<'static> = scan::Want::take(&[("command", 0)]);
    if let Some([raw]) = scan::read::<1>(args, &WANT) {
        return scan::string(raw)
            .ok()
            .flatten()
            .map(std::borrow::Cow::into_owned);
    }
    serde_json::from_str::<Command<'_>>(args)
        .ok()
        .and_then(|c| c.command.map(std::borrow::Cow::into_owned))
}

/// The text of a string or of an array of `{type: text, text}` blocks.
pub(crate) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| match i {
                Value::String(s) => Some(s.as_str()),
                _ => i.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

pub(crate) fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests;
