//! The queue's control requests (`xo.ctl.queue.<verb>`) and their
//! answers.

use super::*;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Init {
    #[serde(default)]
    pub mode: ExecutionMode,
    #[serde(default)]
    pub manager: bool,
    /// Re-initialise a queue that has state (drops every task).
    #[serde(default)]
    pub force: bool,
    /// Who asked: the operator's name as the console or `xo` gives it
    /// (`NAME`, `NAME (api)`, `USER (cli)`), written on the audit line
    /// (`state_after.by`); empty from a program that gives none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
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
    /// Who asked (as [`Init::by`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Enqueue {
    pub tasks: Vec<Task>,
    /// Who asked (as [`Init::by`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

impl Enqueue {
    /// `tasks`, signed by no one (a test, a script): the queue's audit
    /// line names no one.
    pub fn new(tasks: Vec<Task>) -> Self {
        Self {
            tasks,
            by: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub role: String,
    pub claimant: String,
    /// Long-poll: wait up to this long for a task (ms).
    #[serde(default)]
    pub wait_ms: u64,
}

/// A claimant gives up the claim it left waiting (a runner shutting down
/// while its long-poll claim waits), so the queue hands the next task to
/// a runner that is there instead of to a reply nobody reads, where it
/// would sit leased until the lease ran out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Withdraw {
    pub claimant: String,
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
    /// Who asked (as [`Init::by`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Halt {
    pub reason: String,
    /// Who asked (as [`Init::by`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// Who asked (as [`Init::by`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Start {
    /// Who asked (as [`Init::by`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

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
    /// Who asked (as [`Init::by`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cancel {
    pub task_id: String,
    /// Who asked (as [`Init::by`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
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
        /// Replies with how many waiting claims of the claimant were given up.
        Withdraw(Withdraw) => "withdraw" -> u64, scope: |q| Some(q.claimant.as_str());
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
