//! The queue's task events and audit records (their names, the line, the
//! exchange it keeps), and how a task ended on a runner.

use super::*;

/// The names of audit records and task events (seed 003's log), in one
/// place: `TaskEvent::event` and `AuditEvent::event` are of this type. On
/// the wire each is its name (`TASK_COMPLETE`); a name this build does not
/// know decodes as [`EventName::Unknown`], so a peer that knows a newer
/// name still decodes the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventName {
    Init,
    GoalSet,
    Enqueue,
    /// A critical-lane task was enqueued (it interrupts planned work).
    EnqueueCritical,
    TaskStart,
    TaskComplete,
    TaskRetry,
    TaskBlocked,
    TaskAwaitingResponse,
    TaskAnswered,
    /// The Manager changed a pending task.
    TaskUpdated,
    TaskCancelled,
    LeaseExpired,
    Halt,
    Resume,
    Start,
    Step,
    Completed,
    ManagerReconciled,
    /// An operator changed the settings (before/after: the keys changed).
    SettingsChanged,
    /// Pending work that no runner can claim (after: the reason).
    QueueStuck,
    /// The stuck queue can go on again.
    QueueUnstuck,
    /// A violation ended the task as failed (seed 004's ERROR).
    TaskFailed,
    /// A cleanup directive dropped by the queue (cap or age): not churn.
    CleanupDropped,
    /// A running lower-lane task was asked to yield to a critical one.
    TaskInterrupted,
    /// Its runner checkpointed and gave it back: pending, to be resumed.
    TaskYielded,
    /// The operator accepted or rejected a knowledge document awaiting review.
    KnowledgeReviewed,
    /// An operator steered a unit (after: the unit, who, the message).
    OperatorSteering,
    /// An operator acknowledged a unit (after: the unit, who, why, until).
    UnitAcknowledged,
    /// A name from a newer peer (never sent by this build).
    #[serde(other)]
    Unknown,
}

impl EventName {
    pub const ALL: [EventName; 29] = [
        Self::Init,
        Self::GoalSet,
        Self::Enqueue,
        Self::EnqueueCritical,
        Self::TaskStart,
        Self::TaskComplete,
        Self::TaskRetry,
        Self::TaskBlocked,
        Self::TaskAwaitingResponse,
        Self::TaskAnswered,
        Self::TaskUpdated,
        Self::TaskCancelled,
        Self::LeaseExpired,
        Self::Halt,
        Self::Resume,
        Self::Start,
        Self::Step,
        Self::Completed,
        Self::ManagerReconciled,
        Self::SettingsChanged,
        Self::QueueStuck,
        Self::QueueUnstuck,
        Self::TaskFailed,
        Self::CleanupDropped,
        Self::TaskInterrupted,
        Self::TaskYielded,
        Self::KnowledgeReviewed,
        Self::OperatorSteering,
        Self::UnitAcknowledged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Init => "INIT",
            Self::GoalSet => "GOAL_SET",
            Self::Enqueue => "ENQUEUE",
            Self::EnqueueCritical => "ENQUEUE_CRITICAL",
            Self::TaskStart => "TASK_START",
            Self::TaskComplete => "TASK_COMPLETE",
            Self::TaskRetry => "TASK_RETRY",
            Self::TaskBlocked => "TASK_BLOCKED",
            Self::TaskAwaitingResponse => "TASK_AWAITING_RESPONSE",
            Self::TaskAnswered => "TASK_ANSWERED",
            Self::TaskUpdated => "TASK_UPDATED",
            Self::TaskCancelled => "TASK_CANCELLED",
            Self::LeaseExpired => "LEASE_EXPIRED",
            Self::Halt => "HALT",
            Self::Resume => "RESUME",
            Self::Start => "START",
            Self::Step => "STEP",
            Self::Completed => "COMPLETED",
            Self::ManagerReconciled => "MANAGER_RECONCILED",
            Self::SettingsChanged => "SETTINGS_CHANGED",
            Self::QueueStuck => "QUEUE_STUCK",
            Self::QueueUnstuck => "QUEUE_UNSTUCK",
            Self::TaskFailed => "TASK_FAILED",
            Self::CleanupDropped => "CLEANUP_DROPPED",
            Self::TaskInterrupted => "TASK_INTERRUPTED",
            Self::TaskYielded => "TASK_YIELDED",
            Self::KnowledgeReviewed => "KNOWLEDGE_REVIEWED",
            Self::OperatorSteering => "OPERATOR_STEERING",
            Self::UnitAcknowledged => "UNIT_ACKNOWLEDGED",
            Self::Unknown => "UNKNOWN",
        }
    }

    /// The name a wire string spells, if this build knows it.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

impl std::fmt::Display for EventName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for EventName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for EventName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// How a task ended on a runner (`RunnerEvent::outcome`; on the wire its
/// name, `awaiting_response`; a newer one decodes as `Unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunnerOutcome {
    Completed,
    Blocked,
    AwaitingResponse,
    Violation,
    Cancelled,
    /// Given back to the queue for a critical task (seed 001's interrupt).
    Yielded,
    /// An outcome from a newer peer.
    #[serde(other)]
    Unknown,
}

impl RunnerOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Blocked => "blocked",
            Self::AwaitingResponse => "awaiting_response",
            Self::Violation => "violation",
            Self::Cancelled => "cancelled",
            Self::Yielded => "yielded",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for RunnerOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for RunnerOutcome {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Published on `xo.event.task.<task>` at every transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskEvent {
    pub v: u16,
    pub task_id: String,
    /// Its [`EventName`] (a string on the wire: a newer name still decodes).
    #[schemars(with = "String")]
    pub event: EventName,
    pub state: TaskState,
    pub attempt: u32,
    pub at: u64,
}

impl crate::Message for QueueStatus {
    const NAME: &'static str = "QueueStatus";
    fn version(&self) -> u16 {
        crate::PROTOCOL_VERSION
    }
}

impl crate::Message for TaskEvent {
    const NAME: &'static str = "TaskEvent";
    fn version(&self) -> u16 {
        self.v
    }
}

/// One line of the audit log. `prev` is the hash of the line before it, so
/// `xo audit verify` finds the first line where the chain breaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditEvent {
    pub v: u16,
    pub seq: u64,
    /// `INIT`, `GOAL_SET`, `ENQUEUE`, `TASK_START`, `TASK_COMPLETE`… ([`EventName`]).
    #[schemars(with = "String")]
    pub event: EventName,
    #[serde(default)]
    pub task_id: Option<String>,
    pub at: u64,
    pub state_before: serde_json::Value,
    pub state_after: serde_json::Value,
    #[serde(default)]
    pub validation_report: Option<ValidationReport>,
    #[serde(default)]
    pub prompt_ref: Option<String>,
    #[serde(default)]
    pub response_ref: Option<String>,
    /// Seed 003's `prompt` and `response`: the last prompt the agent was
    /// given for this outcome and its raw reply, each at most
    /// [`Exchange::MAX_BYTES`] (the middle of a longer one elided with a
    /// note naming the prompt log's ref, where the whole text is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// Hex SHA-256 of the previous line ("" for the first).
    pub prev: String,
}

/// The last prompt and reply of a task's run, for its audit line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Exchange {
    pub prompt: String,
    pub response: String,
}

impl Exchange {
    /// The most of each text an audit line keeps.
    pub const MAX_BYTES: usize = 16 * 1024;

    /// `text` within [`Exchange::MAX_BYTES`]: its head and tail, the middle
    /// replaced by a note naming how much and where the whole is.
    pub fn bounded(text: &str, whole_at: &str) -> String {
        if text.len() <= Self::MAX_BYTES {
            return text.to_string();
        }
        let half = Self::MAX_BYTES / 2;
        let head_end = (0..=half)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        let tail_start = (text.len() - half..=text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        format!(
            "{}\n[… {} bytes not shown; the whole text is in the prompt log at {}]\n{}",
            &text[..head_end],
            tail_start - head_end,
            if whole_at.is_empty() {
                "(not logged)"
            } else {
                whole_at
            },
            &text[tail_start..]
        )
    }
}
