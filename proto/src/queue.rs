//! The durable queue's contract: tasks, their records, the queue status,
//! events, audit records, and every control request with its reply.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The queue's control service name.
pub const QUEUE: &str = "queue";

/// A unit of work (seed 003's task schema plus project, role, timeout
/// profile, lane and dependencies). Unknown fields are errors in task files,
/// so a typo never passes silently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub task_id: String,
    /// Brief description.
    pub intent: String,
    /// Detailed instructions for the agent.
    pub instructions: String,
    /// All must be met.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
    #[serde(default)]
    pub retry_policy: RetryPolicy,
    /// Relative to the project sandbox; must stay inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    /// Paths relative to the project sandbox.
    #[serde(default)]
    pub required_artifacts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_command: Option<String>,
    #[serde(default)]
    pub tests_required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_json_schema: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Which specialist runs it (seed 002: from the task header). Empty:
    /// the queue picks it from `phase` (seed 002's phase → role table) or
    /// its default role.
    #[serde(default)]
    pub role: String,
    /// Seed 002's workflow phase; decides the role when the task names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Limits on this task's work, across its retries and attempts; unset
    /// limits come from the runner's `runner.task_budget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<TaskBudget>,
    #[serde(default)]
    pub timeout_profile: TimeoutProfile,
    #[serde(default)]
    pub lane: Lane,
    /// Task ids that must complete first.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// The milestone it belongs to (reviewers run when one completes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub milestone: Option<String>,
    /// The directive it carries out (consumption is tracked through it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directive: Option<String>,
    /// The branch of the project its worktree starts from
    /// (`runner.isolation = "worktree"`); unset: the project's main.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

impl Task {
    /// A task with every optional field at its default.
    pub fn new(
        task_id: impl Into<String>,
        intent: impl Into<String>,
        instructions: impl Into<String>,
        role: impl Into<String>,
    ) -> Self {
        Self {
            task_id: task_id.into(),
            intent: intent.into(),
            instructions: instructions.into(),
            acceptance_criteria: Vec::new(),
            retry_policy: RetryPolicy::default(),
            working_directory: None,
            required_artifacts: Vec::new(),
            test_command: None,
            tests_required: false,
            expected_json_schema: None,
            agent_mode: None,
            project: None,
            role: role.into(),
            phase: None,
            budget: None,
            timeout_profile: TimeoutProfile::default(),
            lane: Lane::default(),
            depends_on: Vec::new(),
            milestone: None,
            directive: None,
            branch: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    pub max_retries: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 3 }
    }
}

/// A task's timeout profile (declared with the operator's settings, which
/// set one per project).
pub use crate::settings::TimeoutProfile;

/// Priority lanes (seed 001): critical first and interrupting, functional
/// before planned work, cleanup after.
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
#[serde(rename_all = "snake_case")]
pub enum Lane {
    Critical,
    Functional,
    #[default]
    Planned,
    Cleanup,
}

impl Lane {
    /// The wire name (`critical`, `functional`, `planned`, `cleanup`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Critical => "critical",
            Self::Functional => "functional",
            Self::Planned => "planned",
            Self::Cleanup => "cleanup",
        }
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Pending,
    Running,
    Completed,
    Blocked,
    Failed,
    AwaitingResponse,
    Cancelled,
}

impl TaskState {
    pub const ALL: [TaskState; 7] = [
        Self::Pending,
        Self::Running,
        Self::Completed,
        Self::Blocked,
        Self::Failed,
        Self::AwaitingResponse,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Blocked => "blocked",
            Self::Failed => "failed",
            Self::AwaitingResponse => "awaiting_response",
            Self::Cancelled => "cancelled",
        }
    }

    /// No more work will happen on it without an operator.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Blocked | Self::Failed | Self::Cancelled
        )
    }
}

/// What a runner should do with a task offered again after a stale lease
/// (SUP-6): resume if the previous attempt reached a checkpoint, else roll
/// the sandbox back and replay. A task that yielded to a critical one
/// without a checkpoint continues: its work is kept and the agent runs
/// again on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReplayMark {
    Resume,
    RollbackReplay,
    Continue,
}

/// One criterion's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CriterionResult {
    pub criterion: String,
    pub passed: bool,
    #[serde(default)]
    pub detail: String,
    /// Seed 003's match quality: `EXACT`, `HIGH`, `MEDIUM`, `LOW` or `NONE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<String>,
}

/// How sure the validation is (seed 003).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum ConfidenceLevel {
    High,
    Medium,
    Low,
    Uncertain,
}

/// The runner's validation of a task's output.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ValidationReport {
    pub passed: bool,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub criteria: Vec<CriterionResult>,
    /// 0..1, if the validator rated it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::finite::confidence"
    )]
    pub confidence: Option<f64>,
    /// Seed 003's `confidence`: `HIGH`, `MEDIUM`, `LOW` or `UNCERTAIN`
    /// (any failed or undecided criterion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence_level: Option<ConfidenceLevel>,
    /// Seed 003's `failed_criteria`: the criteria that failed, as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_criteria: Vec<String>,
    /// Seed 003's `uncertain_criteria`: the criteria no rule could decide.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncertain_criteria: Vec<String>,
    /// Where the prompt and the response were logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_ref: Option<String>,
    /// The reply after the output template (SUP-3); the raw output is in
    /// the prompt log at `response_ref`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formatted: Option<String>,
    #[serde(default)]
    pub template_applied: bool,
}

/// A lease on a running task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Lease {
    pub claimant: String,
    /// Proves the holder; a complete with another token is refused.
    pub token: String,
    /// Milliseconds since the Unix epoch.
    pub renewed_at: u64,
    /// The holder reported its work is checkpointed (artifacts written).
    #[serde(default)]
    pub checkpoint: bool,
}

/// A task as the queue keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskRecord {
    pub task: Task,
    pub state: TaskState,
    /// 1 on the first claim; + 1 on every offer after a stale lease or retry.
    pub attempt: u32,
    /// Validation failures so far (bounded by `retry_policy.max_retries`).
    pub retries: u32,
    /// Order of enqueueing.
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<ReplayMark>,
    /// Served before new work (a retry, an answered question, a replay).
    #[serde(default)]
    pub priority: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ValidationReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Tasks completed in the queue when this one was enqueued (cleanup
    /// directives age out `CLEANUP_AGE` completions later).
    #[serde(default)]
    pub born_completed: u64,
    /// The lease token that completed it: the same completion sent again
    /// (a reply lost in a crash) is answered with the record, not refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_token: Option<String>,
    /// For Manager tasks: the task whose completion it reconciles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciles: Option<String>,
    /// Why it was blocked or failed (decides whether the queue halted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<BlockCause>,
    /// What it changed, on its branch (worktree isolation), once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<TaskDiff>,
    /// Manager tasks: the pending tasks its prompt listed (only those can
    /// be cancelled by its reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<Vec<String>>,
    /// Work spent on finished attempts (the budget counts all of them).
    #[serde(default)]
    pub spent: Usage,
    /// Work the running attempt reported so far (heartbeats).
    #[serde(default)]
    pub attempt_spent: Usage,
    /// While it runs: the critical task it was asked to yield to (seed 001's
    /// interrupt). Its runner checkpoints and yields; the task goes back
    /// pending, to be resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<String>,
    pub updated_at: u64,
}

impl TaskRecord {
    /// A record of `task` as a runner holds it: running, this attempt, no
    /// lease details (for work outside the queue: reviews, tests).
    pub fn running(task: Task, attempt: u32) -> Self {
        Self {
            task,
            state: TaskState::Running,
            attempt,
            retries: 0,
            seq: 0,
            lease: None,
            mark: None,
            priority: false,
            report: None,
            reason: None,
            question: None,
            answer: None,
            born_completed: 0,
            completed_token: None,
            reconciles: None,
            cause: None,
            diff: None,
            shown: None,
            spent: Usage::default(),
            attempt_spent: Usage::default(),
            interrupt: None,
            updated_at: 0,
        }
    }
}

/// Seed 002's workflow phases.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Design,
    Plan,
    Execute,
    /// `phase="execute", sub_phase="review"`.
    Review,
    Validate,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Self::Design,
        Self::Plan,
        Self::Execute,
        Self::Review,
        Self::Validate,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Design => "design",
            Self::Plan => "plan",
            Self::Execute => "execute",
            Self::Review => "review",
            Self::Validate => "validate",
        }
    }
}

/// Why a task stopped without completing. `queue.halt_on` lists the causes
/// that halt the queue; the others leave the task for the operator and the
/// queue goes on with the next task (seed 003, scenario 3).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum BlockCause {
    /// The agent did not run, crashed, timed out or reported `error`.
    ExecFailure,
    /// The agent itself reported `blocked` or `escalate`.
    AgentBlocked,
    /// Out of validation, format or clarification retries.
    Validation,
    /// A major SUP-7 violation: the task ends as failed (seed 004's ERROR).
    Violation,
    /// The task's budget (turns, tokens, cost or wall time) ran out.
    Budget,
    /// The agent's reply stayed in the wrong format after its retries
    /// (seed 003's `OUTPUT_FORMAT_INVALID`, critical).
    OutputFormat,
}

impl BlockCause {
    pub const ALL: [BlockCause; 6] = [
        Self::ExecFailure,
        Self::AgentBlocked,
        Self::Validation,
        Self::Violation,
        Self::Budget,
        Self::OutputFormat,
    ];
    /// The seed's halt policy: execution failures (a timeout among them),
    /// an agent's own BLOCKED, violations and a reply still in the wrong
    /// format after its retries halt; a task out of validation retries or
    /// budget does not (seed 003, scenario 3).
    pub const DEFAULT_HALT_ON: [BlockCause; 4] = [
        Self::ExecFailure,
        Self::AgentBlocked,
        Self::Violation,
        Self::OutputFormat,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ExecFailure => "exec_failure",
            Self::AgentBlocked => "agent_blocked",
            Self::Validation => "validation",
            Self::Violation => "violation",
            Self::Budget => "budget",
            Self::OutputFormat => "output_format",
        }
    }

    /// The cause a runner's block reason spells (`CODE: detail`), for
    /// requests from runners that do not send one.
    pub fn of_reason(reason: &str) -> Self {
        let code = reason.split(':').next().unwrap_or("").trim();
        match code {
            "EXEC_FAILURE" | "CURSOR_EXEC_FAILURE" => Self::ExecFailure,
            "BLOCKED" if !reason.contains("(out of retries)") => Self::AgentBlocked,
            "BUDGET_EXHAUSTED" => Self::Budget,
            "OUTPUT_FORMAT_INVALID" => Self::OutputFormat,
            _ if reason.starts_with("supervisor violation") => Self::Violation,
            _ => Self::Validation,
        }
    }
}

impl std::fmt::Display for BlockCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Work an agent did, from its SALUTE usage and the runner's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    #[serde(default)]
    pub turns: u64,
    #[serde(default)]
    pub tokens: u64,
    #[serde(default, deserialize_with = "crate::finite::cost_usd")]
    pub cost_usd: f64,
    #[serde(default)]
    pub wall_ms: u64,
}

impl Usage {
    /// Adds `o`, every field held at its ceiling (a cost at
    /// [`MAX_AMOUNT`](crate::finite::MAX_AMOUNT), counts at `u64::MAX`): two
    /// large costs never sum to `inf`, which no status could decode.
    pub fn add(&mut self, o: &Usage) {
        use crate::finite::{add, add_count};
        self.turns = add_count(self.turns, o.turns);
        self.tokens = add_count(self.tokens, o.tokens);
        self.cost_usd = add(self.cost_usd, o.cost_usd);
        self.wall_ms = add_count(self.wall_ms, o.wall_ms);
    }
    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}

/// Per-task limits (0 or absent: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskBudget {
    #[serde(default)]
    pub max_turns: u64,
    #[serde(default)]
    pub max_tokens: u64,
    #[serde(default, deserialize_with = "crate::finite::max_cost_usd")]
    pub max_cost_usd: f64,
    #[serde(default)]
    pub max_wall_ms: u64,
}

impl TaskBudget {
    /// Each limit of `self`, else of `fallback`.
    pub fn or(self, fallback: TaskBudget) -> TaskBudget {
        TaskBudget {
            max_turns: if self.max_turns > 0 {
                self.max_turns
            } else {
                fallback.max_turns
            },
            max_tokens: if self.max_tokens > 0 {
                self.max_tokens
            } else {
                fallback.max_tokens
            },
            max_cost_usd: if self.max_cost_usd > 0.0 {
                self.max_cost_usd
            } else {
                fallback.max_cost_usd
            },
            max_wall_ms: if self.max_wall_ms > 0 {
                self.max_wall_ms
            } else {
                fallback.max_wall_ms
            },
        }
    }
    /// The first limit `used` reaches, as `BUDGET_EXHAUSTED: ...`.
    pub fn exceeded(&self, used: &Usage) -> Option<String> {
        let hit = if self.max_turns > 0 && used.turns >= self.max_turns {
            format!("{} turns of {}", used.turns, self.max_turns)
        } else if self.max_tokens > 0 && used.tokens >= self.max_tokens {
            format!("{} tokens of {}", used.tokens, self.max_tokens)
        } else if self.max_cost_usd > 0.0 && used.cost_usd >= self.max_cost_usd {
            format!("${:.4} of ${:.4}", used.cost_usd, self.max_cost_usd)
        } else if self.max_wall_ms > 0 && used.wall_ms >= self.max_wall_ms {
            format!(
                "{} s of {} s wall time",
                used.wall_ms / 1000,
                self.max_wall_ms / 1000
            )
        } else {
            return None;
        };
        Some(format!("{HALT_BUDGET_EXHAUSTED}: {hit}"))
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum RunStatus {
    #[default]
    Halted,
    Running,
    Completed,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum ExecutionMode {
    #[default]
    Auto,
    Manual,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Goal {
    pub description: String,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub completed: bool,
    /// The goal's cost budget in USD (0: none); spent past it, the queue
    /// halts with `BUDGET_EXHAUSTED`.
    #[serde(default, deserialize_with = "crate::finite::budget_usd")]
    pub budget_usd: f64,
}

/// The role of the Manager task (seed 002): reconciles the task list after
/// every completed task when the queue runs with a Manager.
pub const MANAGER_ROLE: &str = "manager";

/// The halt reason a blocked task gives (`TASK_BLOCKED: <task>: <reason>`);
/// such a halt lets running tasks finish.
pub const HALT_TASK_BLOCKED: &str = "TASK_BLOCKED";

/// The halt reason (and task block code) when a budget runs out.
pub const HALT_BUDGET_EXHAUSTED: &str = "BUDGET_EXHAUSTED";

/// The reason pending work cannot go on (`QUEUE_STUCK: <why>`).
pub const QUEUE_STUCK: &str = "QUEUE_STUCK";

/// The block reason of a task that waits for the operator's answer.
pub const ASKED_QUESTION: &str = "ASKED_QUESTION";

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

/// Halt reason when the queue ran dry before the goal was met.
pub const TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE: &str = "TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE";

/// Seed 003's status fields, plus counts and errors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueueStatus {
    pub status: RunStatus,
    #[serde(default)]
    pub halt_reason: Option<String>,
    /// Seed 003's `halt_details`: the halt reason's text after its code
    /// (`TASK_BLOCKED: t4: needs a password` → `t4: needs a password`);
    /// filled in by the queue's status answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt_details: Option<String>,
    /// Seed 003's `last_updated`: when the status last changed (RFC 3339,
    /// UTC).
    #[serde(default)]
    pub last_updated: String,
    pub iteration: u64,
    pub goal: Goal,
    pub mode: ExecutionMode,
    /// Manager reconciliation after every completed task (seed 002).
    pub manager: bool,
    #[serde(default)]
    pub last_task_id: Option<String>,
    #[serde(default)]
    pub last_validation_report: Option<ValidationReport>,
    /// No pending or running task is left.
    pub exhausted: bool,
    /// Tasks by state.
    pub counts: BTreeMap<String, u64>,
    /// MANUAL mode: tasks the operator allowed with `step` and not yet claimed.
    pub steps: u64,
    /// Completed tasks since start, for cleanup-directive aging.
    pub completed_total: u64,
    /// Store keys that could not be read; kept untouched for the operator.
    #[serde(default)]
    pub corrupt: Vec<String>,
    pub initialised: bool,
    /// `QUEUE_STUCK: <why>` while pending work cannot be claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<String>,
    /// Cost spent on the goal so far (every attempt of every task).
    #[serde(default, deserialize_with = "crate::finite::spent_usd")]
    pub spent_usd: f64,
    /// Set in an answer given while the queue's writes fail (a full disk):
    /// since when, why, and that what it shows may not be durable yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_failing: Option<String>,
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

/// The reply a Manager task completes with (seed 002).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagerReply {
    pub status: String,
    pub message: String,
    /// The task to serve next; `null` when the workflow is complete.
    #[serde(default)]
    pub next_task: Option<String>,
    /// New tasks, and pending tasks changed (whole task objects).
    #[serde(default)]
    pub tasks: Vec<Task>,
    /// Pending tasks to keep as they are, by id. A pending task the Manager
    /// was shown that is neither here nor in `tasks` is cancelled; running,
    /// waiting, blocked, failed and completed tasks are never changed.
    #[serde(default)]
    pub keep: Vec<String>,
}

/// The statuses any agent reply may carry.
pub const REPLY_STATUSES: [&str; 4] = ["ok", "blocked", "error", "escalate"];

// ---- control requests ----

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Init {
    #[serde(default)]
    pub mode: ExecutionMode,
    #[serde(default)]
    pub manager: bool,
    /// Re-initialise a queue that has state (drops every task).
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetGoal {
    pub description: String,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub completed: bool,
    /// The goal's cost budget in USD (0: the queue's `goal_budget_usd`).
    #[serde(default, deserialize_with = "crate::finite::budget_usd")]
    pub budget_usd: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Enqueue {
    pub tasks: Vec<Task>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub role: String,
    pub claimant: String,
    /// Long-poll: wait up to this long for a task (ms).
    #[serde(default)]
    pub wait_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claimed {
    pub record: TaskRecord,
    pub token: String,
    /// Renew the lease at least this often (ms).
    pub lease_ms: u64,
    /// What the runner composes the prompt from, so it asks nothing else.
    #[serde(default)]
    pub goal: Goal,
    #[serde(default)]
    pub mode: ExecutionMode,
    /// The directives pending or running, most urgent first, as the
    /// prompt lists them (`[critical] intent`).
    #[serde(default)]
    pub directives: Vec<String>,
    /// The operator settings in force (`xo_proto::settings`): applied to
    /// this task over the runner's `xo.toml`.
    #[serde(default)]
    pub settings: crate::settings::Settings,
    /// Manager tasks: the task list to reconcile, as the prompt shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_list: Option<String>,
}

/// The reply to a lease renewal: the task as the queue holds it, and
/// whether the queue is halted (a runner stops its agent on an operator's
/// halt without asking for the status).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Renewed {
    pub record: TaskRecord,
    #[serde(default)]
    pub status: RunStatus,
    #[serde(default)]
    pub halt_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub task_id: String,
    pub token: String,
    /// The unit that holds the lease (the claim's `claimant`); empty only
    /// from a trusted user on the plain subject.
    #[serde(default)]
    pub claimant: String,
    #[serde(default)]
    pub checkpoint: bool,
    /// This attempt's work so far.
    #[serde(default)]
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Complete {
    pub task_id: String,
    pub token: String,
    /// The unit that holds the lease (the claim's `claimant`); empty only
    /// from a trusted user on the plain subject.
    #[serde(default)]
    pub claimant: String,
    pub report: ValidationReport,
    /// Manager tasks: the reconciliation reply.
    #[serde(default)]
    pub manager_reply: Option<serde_json::Value>,
    /// This attempt's work.
    #[serde(default)]
    pub usage: Usage,
    /// The last prompt and reply, for the audit line (bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<Exchange>,
    /// What the task changed, on its branch (worktree isolation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<TaskDiff>,
}

/// The patch of a [`TaskDiff`] is cut at a line past this many bytes.
pub const MAX_PATCH: usize = 64 * 1024;

/// What a task changed, on its own branch (`runner.isolation =
/// "worktree"`): the files with their added and removed lines, and the
/// patch (at most [`MAX_PATCH`] bytes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskDiff {
    /// `xo/<task>`.
    pub branch: String,
    /// The commit the task started from, and the one it ended with.
    pub base: String,
    pub commit: String,
    #[serde(default)]
    pub files: Vec<FileChange>,
    #[serde(default)]
    pub patch: String,
    /// The patch was cut at [`MAX_PATCH`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Where the work went (`runner.merge`): the project's main at this
    /// commit (`ff`, `merge`), or the remote it was pushed to (`push`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<String>,
}

impl TaskDiff {
    /// Lines added and removed over every file.
    pub fn lines(&self) -> (u64, u64) {
        self.files.iter().fold((0, 0), |(a, r), f| {
            (a + f.added.unwrap_or(0), r + f.removed.unwrap_or(0))
        })
    }
}

/// One file of a [`TaskDiff`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileChange {
    pub path: String,
    /// `A` added, `M` modified, `D` deleted, `T` type changed.
    pub status: String,
    /// Lines added and removed; `None` for a binary file.
    #[serde(default)]
    pub added: Option<u64>,
    #[serde(default)]
    pub removed: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub task_id: String,
    pub token: String,
    /// The unit that holds the lease (the claim's `claimant`); empty only
    /// from a trusted user on the plain subject.
    #[serde(default)]
    pub claimant: String,
    pub reason: String,
    /// A question for the operator: the task waits for `answer` instead of blocking.
    #[serde(default)]
    pub question: Option<String>,
    /// Why; absent: read from the reason's code.
    #[serde(default)]
    pub cause: Option<BlockCause>,
    /// This attempt's work.
    #[serde(default)]
    pub usage: Usage,
    /// The validation it failed on, when that is why it is blocked: kept on
    /// the task and in the audit line (its failed and uncertain criteria).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ValidationReport>,
    /// The last prompt and reply, for the audit line (bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<Exchange>,
}

/// The holder of a task asked to yield (its record's `interrupt`) gives it
/// back: pending again, marked to resume from the work it left (validated
/// first), behind the critical task. Not a retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Yield {
    pub task_id: String,
    pub token: String,
    /// The unit that holds the lease (the claim's `claimant`); empty only
    /// from a trusted user on the plain subject.
    #[serde(default)]
    pub claimant: String,
    /// The agent's checkpoint file exists: its artifacts are written (the
    /// task resumes by validating them first).
    #[serde(default)]
    pub checkpoint: bool,
    /// What the runner did with the work so far (logged and audited).
    #[serde(default)]
    pub note: String,
    /// This attempt's work.
    #[serde(default)]
    pub usage: Usage,
}

/// Published on `xo.interrupt.<unit>` once the queue has asked the task a
/// unit holds to yield to a critical task (also on the record the unit's
/// next lease renewal returns, should this be missed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Interrupt {
    pub v: u16,
    /// The running task asked to yield.
    pub task_id: String,
    /// Its attempt (an interrupt of an earlier attempt is not for this one).
    pub attempt: u32,
    /// The critical task it yields to.
    pub critical: String,
    pub at: u64,
}

impl crate::Message for Interrupt {
    const NAME: &'static str = "Interrupt";
    fn version(&self) -> u16 {
        self.v
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub task_id: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Halt {
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resume {}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Start {}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GetStatus {}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListTasks {
    #[serde(default)]
    pub state: Option<TaskState>,
    /// Paging: tasks enqueued after this sequence number (0: from the start).
    #[serde(default)]
    pub after_seq: u64,
    /// Most tasks in the reply (0: [`ListTasks::PAGE`]); a page also ends
    /// before it outgrows the bus's message limit.
    #[serde(default)]
    pub limit: usize,
    /// Only this task.
    #[serde(default)]
    pub task_id: Option<String>,
}

impl ListTasks {
    /// The page size when the request gives none: a page of tasks fits a
    /// message.
    pub const PAGE: usize = 100;

    /// The first page of tasks in `state` (all states: `None`).
    pub fn of(state: Option<TaskState>) -> Self {
        Self {
            state,
            after_seq: 0,
            limit: 0,
            task_id: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryTask {
    pub task_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cancel {
    pub task_id: String,
}

/// The last lines of a project's audit log (the goal's project if none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditTail {
    #[serde(default)]
    pub project: Option<String>,
    /// How many of the last lines (default 100, at most 10,000).
    #[serde(default)]
    pub lines: Option<usize>,
}

/// The knowledge store's record of an operator's review decision, for the
/// audit of the goal's project (`KNOWLEDGE_REVIEWED`): the document's state
/// before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordKnowledgeReview {
    /// `<category>/<name>`
    pub doc: String,
    pub accepted: bool,
    pub by: String,
    #[serde(default)]
    pub note: String,
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

/// An operator's action on a unit, for the goal's project audit (the
/// supervisor asks, once the action is done): `OPERATOR_STEERING` or
/// `UNIT_ACKNOWLEDGED`, naming the unit and who.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordOperatorAction {
    pub unit: String,
    /// `steer` or `ack`.
    pub action: String,
    pub by: String,
    /// What was done: the steering's message and severity, or the
    /// acknowledgement's why and until.
    pub detail: serde_json::Value,
}

/// Check a project's audit chain.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditVerify {
    #[serde(default)]
    pub project: Option<String>,
}

/// Whether a project's audit chain is intact, and where it breaks if not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditCheck {
    pub project: String,
    pub intact: bool,
    /// Lines checked.
    pub lines: u64,
    /// The first line (1-based) that does not follow from the one before,
    /// or that parts from the store's copy.
    #[serde(default)]
    pub broken_at: Option<u64>,
    #[serde(default)]
    pub reason: Option<String>,
    /// The project's records in the store's copy of the audit log (none when
    /// the store could not be read: `reason` says why).
    #[serde(default)]
    pub store_lines: Option<u64>,
    /// The file's last lines not yet in the store's copy.
    #[serde(default)]
    pub unshipped: u64,
}

crate::api! {
    /// The queue's control API (`xo.ctl.queue.<verb>`, NATS micro service `xo-queue`).
    pub enum QueueApi for QUEUE {
        Init(Init) => "init" -> QueueStatus;
        SetGoal(SetGoal) => "goal" -> QueueStatus;
        /// Replies with the ids newly enqueued (identical ones already present are skipped).
        Enqueue(Enqueue) => "enqueue" -> Vec<String>;
        /// Claim, heartbeat, complete and block act for the runner's unit
        /// (`claimant`): sent on `<verb>.<unit>`, the subject its NATS user may use.
        Claim(Claim) => "claim" -> Option<Claimed>, wait: |q| std::time::Duration::from_millis(q.wait_ms), scope: |q| Some(q.claimant.as_str());
        Heartbeat(Heartbeat) => "heartbeat" -> Renewed, scope: |q| Some(q.claimant.as_str());
        Complete(Complete) => "complete" -> TaskRecord, scope: |q| Some(q.claimant.as_str());
        Block(Block) => "block" -> TaskRecord, scope: |q| Some(q.claimant.as_str());
        /// Gives back a task the queue asked to yield to a critical one.
        Yield(Yield) => "yield" -> TaskRecord, scope: |q| Some(q.claimant.as_str());
        Answer(Answer) => "answer" -> TaskRecord;
        Halt(Halt) => "halt" -> QueueStatus;
        Resume(Resume) => "resume" -> QueueStatus;
        Start(Start) => "start" -> QueueStatus;
        Step(Step) => "step" -> QueueStatus;
        Status(GetStatus) => "status" -> QueueStatus;
        Tasks(ListTasks) => "tasks" -> Vec<TaskRecord>;
        Retry(RetryTask) => "retry" -> TaskRecord;
        Cancel(Cancel) => "cancel" -> TaskRecord;
        AuditTail(AuditTail) => "audit_tail" -> Vec<AuditEvent>;
        AuditVerify(AuditVerify) => "audit_verify" -> AuditCheck;
        /// Replies once the audit line is durable.
        KnowledgeReviewed(RecordKnowledgeReview) => "knowledge_reviewed" -> ();
        OperatorAction(RecordOperatorAction) => "operator_action" -> ();
        /// The operator settings, their `xo.toml` defaults and the keys that may be set.
        Settings(crate::settings::GetSettings) => "settings" -> crate::settings::SettingsView;
        PutSettings(crate::settings::PutSettings) => "settings_put" -> crate::settings::SettingsView;
    }
}

/// Published by a runner on `xo.event.runner.<unit>` when a task ends on
/// it: how it ended and what it took (the review supervisors weigh
/// validation failures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunnerEvent {
    pub v: u16,
    pub unit: String,
    pub task_id: String,
    /// `completed`, `blocked`, `awaiting_response`, `violation`,
    /// `cancelled` or `yielded`.
    #[schemars(with = "String")]
    pub outcome: RunnerOutcome,
    pub attempt: u32,
    pub agent_runs: u32,
    pub format_retries: u32,
    pub validation_failures: u32,
    pub clarifications: u32,
    /// Knowledge documents injected into its prompt.
    #[serde(default)]
    pub knowledge: Vec<String>,
    pub at: u64,
}

impl crate::Message for RunnerEvent {
    const NAME: &'static str = "RunnerEvent";
    fn version(&self) -> u16 {
        self.v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_and_outcomes_are_their_names_on_the_wire() {
        for e in EventName::ALL {
            let wire = serde_json::to_string(&e).unwrap();
            assert_eq!(wire, format!("\"{}\"", e.as_str()));
            assert_eq!(serde_json::from_str::<EventName>(&wire).unwrap(), e);
            assert_eq!(EventName::parse(e.as_str()), Some(e));
        }
        // A newer peer's name still decodes; the event is not lost.
        let ev: TaskEvent = serde_json::from_str(
            r#"{"v":1,"task_id":"t1","event":"TASK_TELEPORTED","state":"pending","attempt":0,"at":0}"#,
        )
        .unwrap();
        assert_eq!(ev.event, EventName::Unknown);
        for (o, name) in [
            (RunnerOutcome::AwaitingResponse, "\"awaiting_response\""),
            (RunnerOutcome::Yielded, "\"yielded\""),
        ] {
            assert_eq!(serde_json::to_string(&o).unwrap(), name);
            assert_eq!(format!("\"{o}\""), name);
        }
        assert_eq!(
            serde_json::from_str::<RunnerOutcome>("\"exploded\"").unwrap(),
            RunnerOutcome::Unknown
        );
    }

    #[test]
    fn an_exchange_keeps_head_and_tail_and_says_where_the_whole_is() {
        assert_eq!(Exchange::bounded("short", "p@1"), "short");
        let long = format!(
            "{}{}{}",
            "a".repeat(10_000),
            "é".repeat(5_000),
            "z".repeat(10_000)
        );
        let b = Exchange::bounded(&long, "/data/p/prompts.log.jsonl@42");
        assert!(b.len() < Exchange::MAX_BYTES + 200, "{}", b.len());
        assert!(b.starts_with("aaaa") && b.ends_with("zzzz"));
        assert!(b.contains(
            "bytes not shown; the whole text is in the prompt log at /data/p/prompts.log.jsonl@42"
        ));
        assert!(Exchange::bounded(&long, "").contains("(not logged)"));
    }

    #[test]
    fn event_names_read_back() {
        for e in EventName::ALL {
            assert_eq!(EventName::parse(e.as_str()), Some(e));
        }
        assert_eq!(EventName::parse("TASK_FROM_THE_FUTURE"), None);
    }

    #[test]
    fn lane_names_are_the_wire_names() {
        for l in [
            Lane::Critical,
            Lane::Functional,
            Lane::Planned,
            Lane::Cleanup,
        ] {
            assert_eq!(serde_json::to_value(l).unwrap(), l.as_str());
        }
    }
}
