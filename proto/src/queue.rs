//! The durable queue's contract: tasks, their records, the queue status,
//! events, audit records, and every control request with its reply.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod events;
mod requests;
pub use events::*;
pub use requests::*;

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
    /// The claimants whose long-poll claim waits for a task (runners with
    /// nothing to do), in the order they asked; filled in by the queue's
    /// status answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_claims: Vec<String>,
    /// Set in an answer given while the queue's writes fail (a full disk):
    /// since when, why, and that what it shows may not be durable yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_failing: Option<String>,
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
