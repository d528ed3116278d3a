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
//!
//! Start with [`Sensor::line`]; docs/sensors.md maps every field.

pub mod classify;
pub mod claude;
pub mod codex;
pub mod cursor;
pub mod document;
pub mod evidence;
pub mod openhands;
pub mod salute;
pub mod swe;

use std::collections::HashMap;

use serde_json::Value;
use xo_proto::{Action, Outcome};

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
/// since the epoch; a time without a zone is UTC. `None` if it is no time.
pub fn parse_time_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        let f = &frac[..digits];
        ms = f.get(..3.min(f.len()))?.parse::<i64>().ok()? * 10i64.pow(3 - 3.min(f.len()) as u32);
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "" | "Z" | "z" => 0,
        r if r.len() == 6 && matches!(&r[..1], "+" | "-") => {
            let v = r[1..3].parse::<i64>().ok()? * 60 + r[4..6].parse::<i64>().ok()?;
            if r.starts_with('-') { -v } else { v }
        }
        _ => return None,
    };
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3_600 + mi * 60 + sec - offset_min * 60;
    u64::try_from(secs * 1000 + ms).ok()
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
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K);
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
    /// Calls the agent cancelled before they ran (Claude Code's "Sibling
    /// tool call errored"): no step, and no failure.
    pub cancelled: u64,
    pub turns: u64,
}

/// Lines longer than this are malformed (a runaway tool output is not an event).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// A tool call waiting for its result.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub tool: compact_str::CompactString,
    pub args_hash: compact_str::CompactString,
    /// A command line, for error classes that depend on it (tests).
    pub command: Option<String>,
}

/// Commands still running after their call returned: Codex's unified exec
/// (`exec_command` answered `Process running with session ID N`, ended in a
/// later `write_stdin` or `exec_command_end`) and Claude Code's background
/// tasks (`Command running in background with ID: X`, ended in a later
/// `TaskOutput`). The command's end is its action, with its exit code and
/// output; the polls between are waits.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// Running commands by session or task id.
    pub running: HashMap<String, Running>,
    /// Poll calls by call id: the session or task each one polls.
    pub polls: HashMap<String, String>,
    /// Commands whose end was told by an event of its own (Codex's
    /// `exec_command_end`): their call ids and sessions, whose later results
    /// are no new step.
    pub ended_calls: std::collections::HashSet<String>,
    pub ended_sessions: std::collections::HashSet<String>,
}

/// A command still running: its call, and what it has written so far.
#[derive(Debug)]
pub(crate) struct Running {
    pub call: String,
    pub pending: Pending,
    pub output: String,
}

/// What every line parser shares: pending calls, the session, usage
/// waiting for the next turn, counters.
#[derive(Debug, Default)]
pub(crate) struct Common {
    pub pending: HashMap<String, Pending>,
    pub session: Option<String>,
    pub model: Option<String>,
    pub context_limit: Option<u64>,
    /// Usage seen since the last turn, carried by the next one.
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    pub context_tokens: Option<u64>,
    pub condensed: bool,
    /// Tokens the agent keeps free below its window before it compacts
    /// its own context, where that is known of it.
    pub compact_reserve: Option<u64>,
    /// A new instruction arrived since the last turn.
    pub instructed: bool,
    /// A message's text, held until the stream tells whether a call of the
    /// same message follows (its id: Claude's message id, Cursor's
    /// `model_call_id`; the text): see [`Common::hold`].
    held: Option<(String, String)>,
    /// Commands still running after their call returned.
    pub exec: Sessions,
    pub stats: Stats,
    /// The agent's last words: a run's result, else its last message.
    pub final_text: Option<String>,
    /// The model the last turn told.
    model_told: Option<String>,
    /// OpenHands: the stream is of V1 SDK events.
    pub openhands_v1: bool,
    /// The time of the record being read (ms since the epoch).
    pub at_ms: Option<u64>,
    /// How the run ended, once it did: `Some(true)` failed.
    pub ended: Option<bool>,
    /// The agent has stopped working: its run ended, or its turn did and
    /// it waits for its user. Work after it clears it.
    pub resting: bool,
    /// The session this one was started by (a subagent's parent).
    pub parent: Option<String>,
    /// What the run has looked at (tool and arguments), so that a second
    /// look is not progress.
    explored: std::collections::HashSet<String>,
    /// Cumulative usage last seen (streams that report totals, not deltas).
    last_cost: f64,
    last_in: u64,
    last_out: u64,
}

impl Common {
    /// Takes cumulative totals; adds what grew since the last ones.
    pub fn cumulative(
        &mut self,
        cost: Option<f64>,
        tokens_in: Option<u64>,
        tokens_out: Option<u64>,
    ) {
        if let Some(c) = cost {
            if c > self.last_cost {
                self.cost_usd = xo_proto::finite::add(self.cost_usd, c - self.last_cost);
            }
            self.last_cost = c;
        }
        if let Some(t) = tokens_in {
            self.tokens_in += t.saturating_sub(self.last_in);
            self.last_in = t;
        }
        if let Some(t) = tokens_out {
            self.tokens_out += t.saturating_sub(self.last_out);
            self.last_out = t;
        }
    }

    /// An error the agent met that is no tool's result (a failed turn, a
    /// stream error): a message turn with its error class.
    pub fn error_message(&mut self, text: &str) -> TurnEvent {
        let class = match classify::error_class(false, None, text, None).as_deref() {
            None | Some("tool_error") => "agent_error".to_string(),
            Some(c) => c.to_string(),
        };
        let a = Action::message(Some(&short_hash(text)), Outcome::Error, 0).with_error(&class);
        self.turn(Some(a), false)
    }
    /// The words of message `id`, held: the agents write a message a part
    /// at a time, and text that a call of the same message follows is that
    /// call's preamble, no turn of its own ([`Common::called`]). Text held
    /// for another message is a turn now.
    pub fn hold(&mut self, id: &str, text: &str) -> Option<TurnEvent> {
        match &mut self.held {
            Some((held, before)) if held == id => {
                if !before.is_empty() && !text.is_empty() {
                    before.push('\n');
                }
                before.push_str(text);
                None
            }
            _ => {
                let earlier = self.flush_held();
                self.held = Some((id.to_string(), text.to_string()));
                earlier
            }
        }
    }

    /// Whether text of message `id` is held.
    pub fn holding(&self, id: &str) -> bool {
        self.held.as_ref().is_some_and(|(held, _)| held == id)
    }

    /// A call of message `id` starts: the text held for it was its
    /// preamble; text held for another message is a turn now.
    pub fn called(&mut self, id: &str) -> Option<TurnEvent> {
        if self.holding(id) {
            self.held = None;
            None
        } else {
            self.flush_held()
        }
    }

    /// The held text as a message turn: no call of its message followed.
    pub fn flush_held(&mut self) -> Option<TurnEvent> {
        let (_, text) = self.held.take()?;
        Some(self.message(&text))
    }

    /// A step that waited on a running command: a turn (its tokens, its
    /// time) with no action, which counts toward no stall.
    pub fn wait(&mut self) -> TurnEvent {
        TurnEvent {
            waiting: true,
            ..self.turn(None, false)
        }
    }

    /// A turn carrying the usage accumulated since the last one.
    pub fn turn(&mut self, action: Option<Action>, progress: bool) -> TurnEvent {
        self.stats.turns += 1;
        let context_limit = self
            .context_limit
            .or_else(|| self.model.as_deref().and_then(classify::context_window));
        TurnEvent {
            action,
            summary: None,
            progress,
            tokens_in: std::mem::take(&mut self.tokens_in),
            tokens_out: std::mem::take(&mut self.tokens_out),
            cost_usd: std::mem::take(&mut self.cost_usd),
            context_tokens: self.context_tokens.take(),
            context_limit,
            condensed: std::mem::take(&mut self.condensed),
            compacts_at: context_limit
                .zip(self.compact_reserve)
                .filter(|(l, r)| *l > *r)
                .map(|(l, r)| (l - r) as f64 / l as f64),
            instructed: std::mem::take(&mut self.instructed),
            waiting: false,
            at_ms: self.at_ms,
            // Told once a change: the report keeps the model it last heard.
            model: (self.model != self.model_told)
                .then(|| {
                    self.model_told = self.model.clone();
                    self.model.clone()
                })
                .flatten(),
        }
    }

    /// A tool call's result: the completed action as a turn, or `None`
    /// (counted) when no call of that id was seen.
    pub fn complete(
        &mut self,
        id: &str,
        ok: bool,
        output: &str,
        exit_code: Option<i64>,
    ) -> Option<TurnEvent> {
        let Some(p) = self.pending.remove(id) else {
            self.stats.orphan_results += 1;
            return None;
        };
        Some(self.tool_turn(&p, ok, output, exit_code))
    }

    /// A completed tool action as a turn.
    pub fn tool_turn(
        &mut self,
        p: &Pending,
        ok: bool,
        output: &str,
        exit_code: Option<i64>,
    ) -> TurnEvent {
        self.tool_turn_with(
            &p.tool,
            &p.args_hash,
            p.command.as_deref(),
            ok,
            output,
            exit_code,
        )
    }

    /// [`Common::tool_turn`] from borrowed parts (no pending call made).
    pub fn tool_turn_with(
        &mut self,
        tool: &str,
        args_hash: &str,
        command: Option<&str>,
        ok: bool,
        output: &str,
        exit_code: Option<i64>,
    ) -> TurnEvent {
        // The command whose status decided, and what that status means
        // for its program (grep 1 is no match, pylint 16 is findings).
        let decided = command.map(evidence::deciding_command);
        let meaning = match (decided.as_deref().map(evidence::program), exit_code) {
            (Some(p), Some(code)) if code != 0 => evidence::meaning(p, code),
            _ => None,
        };
        let class = match meaning {
            Some(_) => None,
            None => classify::error_class(ok, exit_code, output, command),
        };
        let outcome = match (&class, output.trim().is_empty()) {
            (Some(_), _) => Outcome::Error,
            (None, true) => Outcome::Empty,
            (None, false) => Outcome::Ok,
        };
        let mut a = Action::tool(tool, args_hash, outcome, 0)
            .with_output(hex_hash(output).as_str())
            .with_evidence(
                decided.as_deref(),
                evidence::telling_line(output, class.is_some()),
            );
        if let Some(c) = &class {
            a = a.with_error(c);
        }
        // A check that reported findings told the agent something; it did
        // not move the work.
        let progress = class.is_none()
            && meaning != Some(evidence::Meaning::Findings)
            && match classify::step_kind(tool, command) {
                classify::StepKind::Write
                | classify::StepKind::Check
                | classify::StepKind::Commit => true,
                // New to this run: progress; looked at before: not.
                classify::StepKind::Explore => {
                    self.explored.insert(format!("{tool}\u{1f}{args_hash}"))
                }
                classify::StepKind::Other => false,
            };
        self.turn(Some(a), progress)
    }

    /// A reply the agent's harness refused to run (a format error): a
    /// failed action of kind `format_error`, tool `reply`, never progress,
    /// with the harness's words as its line.
    pub fn refused(&mut self, args_hash: &str, text: &str) -> TurnEvent {
        let line = text.lines().map(str::trim).find(|l| !l.is_empty());
        let a = Action::tool("reply", args_hash, Outcome::Error, 0)
            .with_error(classify::FORMAT_ERROR)
            .with_output(hex_hash(text).as_str())
            .with_evidence(None, line);
        self.turn(Some(a), false)
    }

    /// An agent message: empty replies and repeated text are what the
    /// radio's monologue and empty rules look at.
    pub fn message(&mut self, text: &str) -> TurnEvent {
        if !text.trim().is_empty() {
            // The buffer is reused: no allocation a message.
            let last = self.final_text.get_or_insert_with(String::new);
            last.clear();
            last.push_str(text);
        }
        let a = if text.trim().is_empty() {
            Action::message(None, Outcome::Empty, 0)
        } else {
            Action::message(Some(hex_hash(text.trim()).as_str()), Outcome::Ok, 0)
        };
        self.turn(Some(a), false)
    }

    /// The end of a run: what is left of the usage, and a summary.
    pub fn end(&mut self, summary: String, failed: Option<&str>) -> TurnEvent {
        let action = failed.map(|text| {
            let class = match classify::error_class(false, None, text, None).as_deref() {
                None | Some("tool_error") => "run_failed".to_string(),
                Some(c) => c.to_string(),
            };
            Action::message(Some(&short_hash(text)), Outcome::Error, 0).with_error(&class)
        });
        self.ended = Some(failed.is_some());
        self.resting = true;
        let mut t = self.turn(action, failed.is_none());
        t.summary = Some(summary);
        t
    }
}

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
        let common = Common {
            compact_reserve: match format {
                Format::Claude => Some(claude::AUTO_COMPACT_RESERVE),
                _ => None,
            },
            ..Common::default()
        };
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
        let text = text.trim_end_matches('\r');
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        let bad = |line, reason: SensorError| LineError { line, reason };
        if text.len() > MAX_LINE {
            self.common.stats.malformed += 1;
            return Err(bad(self.line, SensorError::TooLong { len: text.len() }));
        }
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
        match out {
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
pub(crate) fn raw_text(raw: &serde_json::value::RawValue) -> std::borrow::Cow<'_, str> {
    let t = raw.get();
    if t.starts_with('"') {
        serde_json::from_str::<std::borrow::Cow<'_, str>>(t)
            .unwrap_or(std::borrow::Cow::Borrowed(t))
    } else {
        std::borrow::Cow::Borrowed(t)
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
mod tests {
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
}
