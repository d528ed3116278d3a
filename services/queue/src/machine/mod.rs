//! The queue's state machine, pure: no I/O, time passed in. Every operation
//! returns what changed (task keys, status, audit drafts, events) so the
//! actor can persist it before it answers.

mod claim;
mod complete;
mod enqueue;
mod manager;
mod snapshot;
mod stuck;

pub use enqueue::{check_id, check_sandbox_path, validate_task};
pub use manager::parse_manager_reply;
pub use snapshot::{AuditState, GoalState, QueueState, SeedState, SupervisorState, TaskSnapshot};
pub use xo_proto::task_file::{dependency_order, tasks_from_json};

use std::collections::{BTreeMap, BTreeSet};

use xo_proto::alert::AlertKind;
use xo_proto::control::{ErrorCode, ServiceError};
use xo_proto::queue::{
    BlockCause, EventName, ExecutionMode, Goal, HALT_BUDGET_EXHAUSTED, HALT_TASK_BLOCKED, Lane,
    Lease, ManagerReply, Phase, QUEUE_STUCK, QueueStatus, REPLY_STATUSES, ReplayMark, RunStatus,
    TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE, Task, TaskRecord, TaskState, Usage, ValidationReport,
};

/// Most characters of the task list a Manager prompt carries (about 6,000
/// tokens): longer lists show pending work first and count the rest.
pub const MANAGER_LIST_BUDGET: usize = 24_000;

/// The role whose tasks reconcile the task list (seed 002).
pub use xo_proto::queue::MANAGER_ROLE;
/// Cleanup directives age out after this many completed tasks...
pub const CLEANUP_AGE: u64 = 15;
/// ...and at most this many wait at once.
pub const CLEANUP_CAP: usize = 10;

pub type OpResult<T> = Result<T, ServiceError>;

fn invalid(msg: impl Into<String>) -> ServiceError {
    ServiceError::new(ErrorCode::Invalid, msg)
}
fn not_found(task: &str) -> ServiceError {
    ServiceError::new(ErrorCode::NotFound, format!("task not found: {task}"))
}

/// An audit record before the committer numbers and chains it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditDraft {
    pub event: EventName,
    pub task_id: Option<String>,
    pub before: AuditState,
    pub after: AuditState,
    pub report: Option<ValidationReport>,
    /// The agent's last prompt and reply (a completion's or a block's).
    pub exchange: Option<xo_proto::queue::Exchange>,
}

/// An alert before the actor stamps and publishes it (once durable).
#[derive(Debug, Clone, PartialEq)]
pub struct AlertDraft {
    pub kind: AlertKind,
    pub title: String,
    pub detail: String,
    pub task_id: Option<String>,
}

/// What an operation changed.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Changes {
    pub tasks: BTreeSet<String>,
    pub status: bool,
    /// The operator settings changed.
    pub settings: bool,
    pub audit: Vec<AuditDraft>,
    pub alerts: Vec<AlertDraft>,
    /// The status's `last_updated` is already stamped for this change (its
    /// reply carries the time it is stored with).
    pub stamped: bool,
}

impl Changes {
    /// Names who asked for this change on each of its audit lines
    /// (`state_after.by`); nothing when `by` is empty (a program's own
    /// write: a runner's claim names its claimant in the record).
    pub fn sign(&mut self, by: &str) {
        if by.is_empty() {
            return;
        }
        for a in &mut self.audit {
            a.after.sign(by);
        }
    }

    /// [`Changes::sign`] on a request's result.
    pub fn signed<T>(
        r: Result<(T, Changes), ServiceError>,
        by: &str,
    ) -> Result<(T, Changes), ServiceError> {
        r.map(|(v, mut c)| {
            c.sign(by);
            (v, c)
        })
    }

    pub fn merge(&mut self, other: Changes) {
        self.tasks.extend(other.tasks);
        self.status |= other.status;
        self.stamped |= other.stamped;
        self.settings |= other.settings;
        self.audit.extend(other.audit);
        self.alerts.extend(other.alerts);
    }
    /// The last audit line of this change about task `id`.
    pub fn line_of(&mut self, id: &str) -> Option<&mut AuditDraft> {
        self.audit
            .iter_mut()
            .rev()
            .find(|d| d.task_id.as_deref() == Some(id))
    }
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
            && !self.status
            && !self.settings
            && self.audit.is_empty()
            && self.alerts.is_empty()
    }
    fn alert(&mut self, kind: AlertKind, task_id: Option<&str>, title: String, detail: String) {
        self.alerts.push(AlertDraft {
            kind,
            title,
            detail,
            task_id: task_id.map(str::to_string),
        });
    }
}

/// How the queue treats what goes wrong (`[queue]` in the config).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Block causes that halt the whole queue; the others leave the task
    /// for the operator and the queue goes on.
    pub halt_on: BTreeSet<BlockCause>,
    /// The role of a task that names none and no phase.
    pub default_role: String,
    /// Seed 002's phase → role table.
    pub phase_roles: BTreeMap<Phase, String>,
    /// A role with no claim for this long has no runner (`QUEUE_STUCK`).
    pub stale_after_ms: u64,
    /// The goal's cost budget when `set_goal` gives none (0: none).
    pub goal_budget_usd: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            halt_on: BlockCause::DEFAULT_HALT_ON.into_iter().collect(),
            default_role: "coder".into(),
            phase_roles: default_phase_roles(),
            stale_after_ms: 30_000,
            goal_budget_usd: 0.0,
        }
    }
}

/// Seed 002's table: design, review and validate are the architect's,
/// plan is the Manager's, execute the implementor's (`coder`).
pub fn default_phase_roles() -> BTreeMap<Phase, String> {
    [
        (Phase::Design, "architect"),
        (Phase::Plan, MANAGER_ROLE),
        (Phase::Execute, "coder"),
        (Phase::Review, "architect"),
        (Phase::Validate, "architect"),
    ]
    .into_iter()
    .map(|(p, r)| (p, r.to_string()))
    .collect()
}

/// The whole queue state.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub status: QueueStatus,
    pub tasks: BTreeMap<String, TaskRecord>,
    /// The operator settings (seed 004), handed to every claim.
    pub settings: xo_proto::settings::Settings,
    pub lease_ms: u64,
    pub roles: BTreeSet<String>,
    pub policy: Policy,
    /// When a claimant of each role last asked for work (not persisted: a
    /// restarted queue waits `stale_after_ms` before it calls a role absent).
    role_seen: BTreeMap<String, u64>,
    /// When this process first saw the queue RUNNING.
    running_since: Option<u64>,
    /// The running tasks (no stuck check while work is in flight; lease
    /// expiry looks at these, not at every task the queue ever held).
    running: BTreeSet<String>,
    next_seq: u64,
    /// Pending tasks by role, in serving order: claims do not scan the queue.
    ready: BTreeMap<String, BTreeSet<ReadyKey>>,
    /// Pending, running and awaiting tasks.
    open: usize,
    /// Task ids in enqueue order (listing pages).
    by_seq: BTreeMap<u64, String>,
    /// The task list of the Manager task just claimed, for its claim.
    manager_list: Option<String>,
    /// Pending tasks shown to a Manager whose reply is not yet taken, with
    /// how many such Managers showed each: not claimable until the
    /// Manager's reply decides (seed 002: task, then the Manager, then the
    /// next task).
    held: BTreeMap<String, usize>,
}

/// Serving order: priority (retries, replays, answers, Manager) first, then
/// lane, then enqueue order.
type ReadyKey = (bool, Lane, u64, String);

fn ready_key(r: &TaskRecord) -> ReadyKey {
    (!r.priority, r.task.lane, r.seq, r.task.task_id.clone())
}

fn is_open(s: TaskState) -> bool {
    matches!(
        s,
        TaskState::Pending | TaskState::Running | TaskState::AwaitingResponse
    )
}

fn task_snapshot(r: &TaskRecord) -> TaskSnapshot {
    TaskSnapshot {
        attempt: r.attempt,
        claimant: r.lease.as_ref().map(|l| l.claimant.clone()),
        reason: r.reason.clone(),
        retries: r.retries,
        state: r.state,
        task_id: r.task.task_id.clone(),
    }
}

impl Machine {
    pub fn new(lease_ms: u64, roles: BTreeSet<String>) -> Self {
        Self {
            lease_ms,
            roles,
            ..Default::default()
        }
    }

    /// Rebuilds from stored state.
    pub fn restore(&mut self, status: Option<QueueStatus>, tasks: Vec<TaskRecord>) {
        if let Some(s) = status {
            self.status = s;
        }
        self.next_seq = tasks.iter().map(|t| t.seq).max().unwrap_or(0);
        for t in tasks {
            let id = t.task.task_id.clone();
            self.by_seq.insert(t.seq, id.clone());
            self.tasks.insert(id.clone(), t);
            self.index(&id, true);
        }
    }

    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Adds (`on`) or removes a task's entries in the indexes.
    fn index(&mut self, id: &str, on: bool) {
        let Some(r) = self.tasks.get(id) else { return };
        if r.state == TaskState::Running {
            if on {
                self.running.insert(id.to_string());
            } else {
                self.running.remove(id);
            }
        }
        if is_open(r.state) {
            if on {
                self.open += 1;
            } else {
                self.open -= 1;
            }
        }
        if r.state == TaskState::Pending {
            let key = ready_key(r);
            let set = self.ready.entry(r.task.role.clone()).or_default();
            if on {
                set.insert(key);
            } else {
                set.remove(&key);
            }
        }
        // Held from the Manager's claim until its reply is taken: a reply
        // refused for its format sends the Manager task back pending and
        // the hold stays until it is retried, cancelled or fails.
        if matches!(r.state, TaskState::Running | TaskState::Pending)
            && r.task.role == MANAGER_ROLE
            && let Some(shown) = &r.shown
        {
            for id in shown {
                if on {
                    *self.held.entry(id.clone()).or_default() += 1;
                } else if let Some(n) = self.held.get_mut(id) {
                    *n -= 1;
                    if *n == 0 {
                        self.held.remove(id);
                    }
                }
            }
        }
    }

    /// Changes a task, keeping the indexes right.
    fn mutate(&mut self, id: &str, f: impl FnOnce(&mut TaskRecord)) {
        self.index(id, false);
        if let Some(r) = self.tasks.get_mut(id) {
            f(r);
            // An interrupt is asked of a running task only.
            if r.state != TaskState::Running {
                r.interrupt = None;
            }
        }
        self.index(id, true);
    }

    /// Seed 003's state, as an audit line's `state_before`/`state_after`
    /// hold it ([`SeedState`]): the list of completed tasks is the queue's,
    /// the line holds their count, so each line stays small. A task's line
    /// adds the `task` itself.
    fn seed_state(&self, task: Option<&str>) -> AuditState {
        let s = &self.status;
        let record = task.and_then(|id| self.tasks.get(id));
        AuditState::Seed(Box::new(SeedState {
            by: None,
            completed_tasks: s.completed_total,
            execution_mode: s.mode,
            goal: GoalState {
                completed: s.goal.completed,
                description: s.goal.description.clone(),
                project_id: s.goal.project_id.clone(),
            },
            interrupt: None,
            last_updated: s.last_updated.clone(),
            note: None,
            queue: QueueState {
                exhausted: !self.has_open_work(),
            },
            supervisor: SupervisorState {
                halt_details: s.halt_reason.as_deref().and_then(halt_details),
                halt_reason: s.halt_reason.clone(),
                iteration: s.iteration,
                last_task_id: s.last_task_id.clone(),
                retry_count: record.map(|r| (r.task.task_id.clone(), r.retries)),
                status: s.status,
            },
            task: task.map(|_| record.map(task_snapshot)),
            yielded_to: None,
        }))
    }

    /// The status with counts filled in.
    pub fn status(&self) -> QueueStatus {
        let mut s = self.status.clone();
        s.counts = TaskState::ALL
            .iter()
            .map(|st| (st.as_str().to_string(), 0))
            .collect();
        for t in self.tasks.values() {
            *s.counts.entry(t.state.as_str().to_string()).or_default() += 1;
        }
        s.exhausted = !self.has_open_work();
        s.halt_details = s.halt_reason.as_deref().and_then(halt_details);
        s
    }

    fn has_open_work(&self) -> bool {
        self.open > 0
    }

    fn require_init(&self) -> OpResult<()> {
        if self.status.initialised {
            Ok(())
        } else {
            Err(invalid("queue not initialised: run `xo init` first"))
        }
    }

    fn status_change(&mut self, event: EventName, f: impl FnOnce(&mut QueueStatus)) -> Changes {
        let before = self.seed_state(None);
        f(&mut self.status);
        Changes {
            status: true,
            audit: vec![AuditDraft {
                event,
                task_id: None,
                before,
                after: self.seed_state(None),
                report: None,
                exchange: None,
            }],
            ..Default::default()
        }
    }

    fn task_change(
        &mut self,
        event: EventName,
        id: &str,
        report: Option<ValidationReport>,
        f: impl FnOnce(&mut TaskRecord),
    ) -> Changes {
        self.task_and_status_change(event, id, report, f, |_| {})
    }

    /// [`Self::task_change`] that moves the status too (`g`, after the
    /// task's `f`): the line's after-state shows both, built once.
    fn task_and_status_change(
        &mut self,
        event: EventName,
        id: &str,
        report: Option<ValidationReport>,
        f: impl FnOnce(&mut TaskRecord),
        g: impl FnOnce(&mut QueueStatus),
    ) -> Changes {
        let before = self.seed_state(Some(id));
        self.mutate(id, f);
        g(&mut self.status);
        Changes {
            tasks: [id.to_string()].into(),
            audit: vec![AuditDraft {
                event,
                task_id: Some(id.to_string()),
                before,
                after: self.seed_state(Some(id)),
                report,
                exchange: None,
            }],
            ..Default::default()
        }
    }

    pub fn init(&mut self, mode: ExecutionMode, manager: bool, force: bool) -> OpResult<Changes> {
        if self.status.initialised && !force {
            return Err(invalid(
                "queue already initialised: pass --force to start over (drops every task)",
            ));
        }
        let mut c = Changes::default();
        c.tasks.extend(self.tasks.keys().cloned());
        self.tasks.clear();
        self.by_seq.clear();
        self.ready.clear();
        self.held.clear();
        self.open = 0;
        self.running.clear();
        c.merge(self.status_change(EventName::Init, |s| {
            *s = QueueStatus {
                status: RunStatus::Halted,
                mode,
                manager,
                initialised: true,
                ..Default::default()
            };
        }));
        Ok(c)
    }

    pub fn set_goal(&mut self, goal: Goal) -> OpResult<Changes> {
        self.require_init()?;
        if goal.description.trim().is_empty() {
            return Err(invalid("goal description is empty"));
        }
        if let Some(p) = &goal.project_id {
            check_id("goal.project_id", p)?;
        }
        if !goal.budget_usd.is_finite() || goal.budget_usd < 0.0 {
            return Err(invalid(format!(
                "goal budget_usd {} is not a cost: give 0 (none) or a positive amount",
                goal.budget_usd
            )));
        }
        let mut goal = goal;
        if goal.budget_usd == 0.0 {
            goal.budget_usd = self.policy.goal_budget_usd;
        }
        Ok(self.status_change(EventName::GoalSet, |s| {
            s.goal = goal;
            s.spent_usd = 0.0;
        }))
    }

    /// A page of tasks in enqueue order: those in `state` (any: `None`)
    /// enqueued after `after_seq`, at most `limit`, and no more than fit
    /// `max_bytes` as JSON.
    pub fn page(
        &self,
        state: Option<TaskState>,
        after_seq: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Vec<TaskRecord> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for id in self.by_seq.range(after_seq + 1..).map(|(_, id)| id) {
            let Some(r) = self.tasks.get(id) else {
                continue;
            };
            if state.is_some_and(|s| s != r.state) {
                continue;
            }
            let size = serde_json::to_vec(r).map_or(0, |v| v.len());
            if !out.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            out.push(r.clone());
            if out.len() >= limit {
                break;
            }
        }
        out
    }

    pub fn halt(&mut self, reason: String) -> OpResult<Changes> {
        self.require_init()?;
        if reason.trim().is_empty() {
            return Err(invalid("halt needs a reason"));
        }
        Ok(self.status_change(EventName::Halt, |s| {
            s.status = RunStatus::Halted;
            s.halt_reason = Some(reason);
        }))
    }

    /// RUNNING again (seed 003: resume sets the status; `start` also begins work).
    pub fn resume(&mut self, event: EventName) -> OpResult<Changes> {
        self.require_init()?;
        let mut c = self.status_change(event, |s| {
            s.status = RunStatus::Running;
            s.halt_reason = None;
        });
        c.merge(self.check_exhausted());
        Ok(c)
    }

    pub fn step(&mut self) -> OpResult<Changes> {
        self.require_init()?;
        if self.status.mode != ExecutionMode::Manual {
            return Err(invalid(
                "step is for MANUAL mode; in AUTO mode use `xo start`",
            ));
        }
        if self.status.status != RunStatus::Running {
            return Err(invalid("queue is HALTED: `xo resume` first"));
        }
        Ok(self.status_change(EventName::Step, |s| s.steps += 1))
    }
}

/// The text of a halt reason after its code (`CODE: text`), if it has one.
pub fn halt_details(reason: &str) -> Option<String> {
    let (code, rest) = reason.split_once(": ")?;
    let is_code = !code.is_empty()
        && code
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    (is_code && !rest.trim().is_empty()).then(|| rest.to_string())
}
