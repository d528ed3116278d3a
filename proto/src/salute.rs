//! The SALUTE report: Size, Activity, Location, Unit, Time, Equipment, plus a
//! status verdict. Sections other than `unit` and `time` may be omitted.

use std::collections::BTreeMap;

use compact_str::CompactString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A unit's status report, published on `xo.salute.<unit>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SaluteReport {
    /// Major schema version; see `PROTOCOL_VERSION`.
    pub v: u16,
    /// S: how full the unit's context is.
    #[serde(default)]
    pub size: Size,
    /// A: what the unit is doing.
    #[serde(default)]
    pub activity: Activity,
    /// L: where it runs.
    #[serde(default)]
    pub location: Location,
    /// U: who it is.
    pub unit: UnitInfo,
    /// T: when; `seq` orders and de-duplicates.
    pub time: Time,
    /// E: with what.
    #[serde(default)]
    pub equipment: Equipment,
    /// The verdict.
    #[serde(default)]
    pub status: Status,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Size {
    #[serde(default)]
    pub context_tokens: u64,
    #[serde(default)]
    pub context_limit: u64,
    /// 0..1; when 0 and `context_limit` is set, tokens / limit is used.
    #[serde(default)]
    pub context_fill: f64,
    #[serde(default)]
    pub history_len: u32,
    #[serde(default)]
    pub condensations: u32,
    /// The fill (0..1) at which the agent compacts its own context, when
    /// known (its own watchdog: Claude Code's auto-compact, or the fill a
    /// unit was seen compacting at). The XO does not duplicate it: its
    /// context steering starts only past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacts_at: Option<f64>,
}

impl Size {
    /// The fill ratio the radio check uses.
    pub fn fill(&self) -> f64 {
        if self.context_fill > 0.0 || self.context_limit == 0 {
            self.context_fill
        } else {
            self.context_tokens as f64 / self.context_limit as f64
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Activity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default)]
    pub turns_since_progress: u32,
    /// The last actions, oldest first, at most 20.
    #[serde(default)]
    pub recent: Vec<Action>,
}

/// The most actions a report may carry in `activity.recent` (more is
/// refused by [`SaluteReport::validate`]).
pub const MAX_RECENT: usize = 64;

// The strings of an action are short (names and hashes) and stored inline:
// decoding a 20-action window allocates nothing for them.
/// One thing the unit did in a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Action {
    pub kind: ActionKind,
    /// Tool name (kind `tool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub tool: Option<CompactString>,
    /// Hash of the tool arguments; equal arguments give equal hashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub args_hash: Option<CompactString>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub error_type: Option<CompactString>,
    /// Hash of the tool output, or of the message text (kind `message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub output_hash: Option<CompactString>,
    #[serde(default)]
    pub turn: u64,
    /// Evidence, for steering to quote: the command as the agent ran it,
    /// the one whose status decided the outcome (the last of an `&&` chain,
    /// the one after `cd`, the script a heredoc wrote and then ran), at
    /// most [`EVIDENCE_CHARS`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub cmd: Option<CompactString>,
    /// Evidence: the line of its output that says what happened (an
    /// error's last meaningful line), at most [`EVIDENCE_CHARS`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub line: Option<CompactString>,
}

/// The first word of a command, its program (env settings, `sudo`,
/// `timeout N`, `time`, `env` passed over; a path cut to its name).
pub fn command_program(command: &str) -> &str {
    let mut words = command.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w.contains('=') && !w.starts_with('-') && !w.starts_with('/') {
            continue;
        }
        match w {
            "sudo" | "time" | "env" | "nohup" | "exec" => continue,
            "timeout" => {
                // Its duration.
                words.next();
                continue;
            }
            _ => return w.rsplit('/').next().unwrap_or(w),
        }
    }
    ""
}

/// The most characters of an action's `cmd` or `line` (a longer one is cut
/// with `…` by the sensor; [`SaluteReport::validate`] refuses one of more
/// than 16 bytes a character).
pub const EVIDENCE_CHARS: usize = 120;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    Tool,
    Message,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Error,
    Empty,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Location {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnitInfo {
    /// Unit id: one subject token (letters, digits, `-`, `_`).
    pub unit: String,
    pub role: String,
    #[serde(default)]
    pub pace: Pace,
}

/// PACE plan level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Pace {
    #[default]
    Primary,
    Alternate,
    Contingent,
    Emergency,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Time {
    /// Milliseconds since the Unix epoch.
    #[serde(default)]
    pub at: u64,
    pub turn: u64,
    /// Strictly increasing per unit and epoch; a report with a seq already
    /// seen in its epoch is a duplicate.
    pub seq: u64,
    /// The reporting process's incarnation (its start, ms since the Unix
    /// epoch): a restarted unit starts `seq` over in a higher epoch, which
    /// the XO tells from a duplicate. 0: not given (one epoch for ever).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub epoch: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Equipment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default)]
    pub tokens_in: u64,
    #[serde(default)]
    pub tokens_out: u64,
    #[serde(default, deserialize_with = "crate::finite::cost_usd")]
    pub cost_usd: f64,
    /// Failures per tool name.
    #[serde(default)]
    pub tool_failures: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Status {
    #[serde(default)]
    pub health: Health,
    #[serde(default)]
    pub assessed_by: Assessor,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The unit's session has ended, or its agent has finished its turn
    /// and waits for its user: silence after this report is not a stale
    /// unit, and it is not steered. A later report without it clears it
    /// (the session went on).
    #[serde(default, skip_serializing_if = "is_false")]
    pub ended: bool,
    /// Steering the unit's own check (the runner's microcosm) gave its
    /// agent since its previous report, on the turn it saw each anomaly.
    /// The XO counts each as steered (its cooldown runs from that turn), so
    /// the agent gets one steering per anomaly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub self_steered: Vec<SelfSteered>,
    /// The unit waits for a person, by its own account: its agent asked
    /// for a permission or asked its user something (the agent's hooks),
    /// its spend cap was reached, it ended with an error. The XO marks it
    /// "needs you" with this reason and does not steer it; a later report
    /// without it clears it (the unit moved again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<UnitNeeds>,
    /// The agent's provider refused it for a usage limit that resets then
    /// (ms since the epoch; with `ended`): it is waiting, neither stalled
    /// nor stale, and not steered, until it moves after the reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<u64>,
    /// Records of the session the sensor could not read so far (kinds it
    /// does not know, lines it could not parse, results that name no
    /// call): its picture of the run is known to be incomplete, so the XO
    /// shows the unit "unreadable: N records" and does not steer it on
    /// what it did (its context, read from its usage, and its PACE are
    /// still steered).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreadable: u64,
}

/// Why a unit says it waits for a person ([`Status::needs`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnitNeeds {
    pub reason: crate::NeedsReason,
    /// What it waits on, in words: the prompt, the question, the cap.
    #[serde(default)]
    pub detail: String,
}

/// One steering the unit gave itself ([`Status::self_steered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SelfSteered {
    pub kind: crate::AnomalyKind,
    pub severity: crate::Severity,
    /// The unit's turn it was given at.
    pub turn: u64,
}

fn is_false(v: &bool) -> bool {
    !*v
}

#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    #[default]
    Green,
    Amber,
    Red,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Assessor {
    #[default]
    #[serde(rename = "self")]
    SelfAssessed,
    Xo,
}

impl SaluteReport {
    /// A minimal valid report, for agents and tests to fill in.
    pub fn new(unit: impl Into<String>, role: impl Into<String>, turn: u64, seq: u64) -> Self {
        Self {
            v: crate::PROTOCOL_VERSION,
            size: Size::default(),
            activity: Activity::default(),
            location: Location::default(),
            unit: UnitInfo {
                unit: unit.into(),
                role: role.into(),
                pace: Pace::Primary,
            },
            time: Time {
                at: crate::now_ms(),
                turn,
                seq,
                epoch: 0,
            },
            equipment: Equipment::default(),
            status: Status::default(),
        }
    }

    /// Checks what serde cannot: the unit id and the value ranges.
    pub fn validate(&self) -> Result<(), crate::Invalid> {
        use crate::Invalid;
        crate::validate_unit_id(&self.unit.unit)?;
        if self.unit.role.is_empty() {
            return Err(Invalid::Empty { field: "unit.role" });
        }
        let fill = self.size.context_fill;
        if !(0.0..=1.0).contains(&fill) || fill.is_nan() {
            return Err(Invalid::Fraction {
                field: "size.context_fill",
                value: fill,
            });
        }
        if let Some(c) = self.size.compacts_at
            && !(0.0..=1.0).contains(&c)
        {
            return Err(Invalid::Fraction {
                field: "size.compacts_at",
                value: c,
            });
        }
        // The fast reader bypasses serde's checks.
        crate::finite::check_amount("equipment.cost_usd", self.equipment.cost_usd)?;
        if self.activity.recent.len() > MAX_RECENT {
            return Err(Invalid::TooMany {
                field: "activity.recent",
                len: self.activity.recent.len(),
                max: MAX_RECENT,
            });
        }
        // Evidence is cut to EVIDENCE_CHARS characters by the sensors; four
        // bytes a character, four times over, is the most taken.
        let max = 16 * EVIDENCE_CHARS;
        for a in &self.activity.recent {
            for (field, v) in [
                ("activity.recent.cmd", &a.cmd),
                ("activity.recent.line", &a.line),
            ] {
                if let Some(v) = v
                    && v.len() > max
                {
                    return Err(Invalid::TooLong {
                        field,
                        len: v.len(),
                        max,
                    });
                }
            }
        }
        Ok(())
    }
}

impl Action {
    #[inline]
    pub fn tool(tool: &str, args_hash: &str, outcome: Outcome, turn: u64) -> Self {
        Self {
            kind: ActionKind::Tool,
            tool: Some(tool.into()),
            args_hash: Some(args_hash.into()),
            outcome,
            error_type: None,
            output_hash: None,
            turn,
            cmd: None,
            line: None,
        }
    }

    #[inline]
    pub fn message(output_hash: Option<&str>, outcome: Outcome, turn: u64) -> Self {
        Self {
            kind: ActionKind::Message,
            tool: None,
            args_hash: None,
            outcome,
            error_type: None,
            output_hash: output_hash.map(Into::into),
            turn,
            cmd: None,
            line: None,
        }
    }

    #[inline]
    pub fn with_error(mut self, error_type: &str) -> Self {
        self.outcome = Outcome::Error;
        self.error_type = Some(error_type.into());
        self
    }

    #[inline]
    pub fn with_output(mut self, output_hash: &str) -> Self {
        self.output_hash = Some(output_hash.into());
        self
    }

    /// The command as run and the line of its output that tells, each cut
    /// to [`EVIDENCE_CHARS`] characters (empty ones are left out).
    #[inline]
    pub fn with_evidence(mut self, cmd: Option<&str>, line: Option<&str>) -> Self {
        let cut = |s: &str| -> Option<CompactString> {
            let s = s.trim();
            if s.is_empty() {
                return None;
            }
            // No more bytes than the most characters: no count needed.
            if s.len() <= EVIDENCE_CHARS || s.chars().count() <= EVIDENCE_CHARS {
                return Some(s.into());
            }
            let mut t: String = s.chars().take(EVIDENCE_CHARS - 1).collect();
            t.push('…');
            Some(t.into())
        };
        self.cmd = cmd.and_then(cut);
        self.line = line.and_then(cut);
        self
    }
}
