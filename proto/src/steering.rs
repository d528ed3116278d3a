//! Steering: a short corrective message from the XO (or an operator) to a unit.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::codec::Message;

/// Published on `xo.steer.<unit>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Steering {
    pub v: u16,
    pub unit: String,
    /// `<unit>-<turn>-<kind>` for radio decisions; unique per decision.
    pub id: String,
    pub kind: AnomalyKind,
    pub severity: Severity,
    /// Starts with `[SUPERVISOR]`, at most three sentences.
    pub message: String,
    /// The unit's turn the decision was made on.
    #[serde(default)]
    pub turn: u64,
    /// Milliseconds since the Unix epoch.
    #[serde(default)]
    pub at: u64,
    #[serde(default)]
    pub evidence: Evidence,
    #[serde(default)]
    pub source: SteeringSource,
}

impl Message for Steering {
    const NAME: &'static str = "Steering";
    fn version(&self) -> u16 {
        self.v
    }
}

/// What triggered a steering decision.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Evidence {
    /// Turns of the actions that matched the rule.
    #[serde(default)]
    pub turns: Vec<u64>,
    /// Tools involved.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The rule and threshold, e.g. `turns_since_progress > 5`.
    #[serde(default)]
    pub rule: String,
    /// The observed value, e.g. `7`.
    #[serde(default)]
    pub observed: String,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AnomalyKind {
    Stall,
    Loop,
    Oscillation,
    Monologue,
    Empty,
    Context,
    Cascade,
    Pace,
    Stale,
    /// Steering an operator sent by hand.
    Operator,
    /// The model provider is failing (rate limits, overload, 5xx): an
    /// outage to wait out, not the agent's behaviour.
    Provider,
}

impl AnomalyKind {
    pub const ALL: [AnomalyKind; 11] = [
        Self::Stall,
        Self::Loop,
        Self::Oscillation,
        Self::Monologue,
        Self::Empty,
        Self::Context,
        Self::Cascade,
        Self::Pace,
        Self::Stale,
        Self::Operator,
        Self::Provider,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stall => "stall",
            Self::Loop => "loop",
            Self::Oscillation => "oscillation",
            Self::Monologue => "monologue",
            Self::Empty => "empty",
            Self::Context => "context",
            Self::Cascade => "cascade",
            Self::Pace => "pace",
            Self::Stale => "stale",
            Self::Operator => "operator",
            Self::Provider => "provider",
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Urgent,
    Critical,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Urgent => "urgent",
            Self::Critical => "critical",
        })
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SteeringSource {
    #[default]
    Xo,
    Operator,
    #[serde(rename = "self")]
    SelfCheck,
}

/// Prefix of every steering message.
pub const STEERING_TAG: &str = "[SUPERVISOR]";

/// Why a unit needs a person (DESIGN §11: the supervisor sets it on the
/// unit, from escalation or from the reason a unit's own report gives).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NeedsReason {
    /// The agent waits on a permission prompt.
    Permission,
    /// The agent ended its turn asking its user something.
    Question,
    /// Steering of one stretch was spent (escalated, then given up on).
    Stuck,
    /// Its spend cap was reached.
    Budget,
    /// It ended with an error.
    Error,
    /// Its task is blocked on an operator's answer.
    Answer,
}

impl NeedsReason {
    pub const ALL: [NeedsReason; 6] = [
        Self::Permission,
        Self::Question,
        Self::Stuck,
        Self::Budget,
        Self::Error,
        Self::Answer,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Permission => "permission",
            Self::Question => "question",
            Self::Stuck => "stuck",
            Self::Budget => "budget",
            Self::Error => "error",
            Self::Answer => "answer",
        }
    }
}

impl fmt::Display for NeedsReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A unit that needs a person: why, since when, and what it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NeedsYou {
    pub reason: NeedsReason,
    /// The unit's turn it was set on.
    #[serde(default)]
    pub turn: u64,
    /// The turn the stretch it rests on began (the last progress).
    #[serde(default)]
    pub stretch_from: u64,
    /// Milliseconds since the Unix epoch (of the report that set it).
    #[serde(default)]
    pub since: u64,
    /// The anomaly whose steering was spent (`stuck`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<AnomalyKind>,
    /// The last evidence, in words: the steering that was spent, the
    /// prompt, the question.
    #[serde(default)]
    pub detail: String,
}
