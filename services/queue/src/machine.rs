//! The queue's state machine, pure: no I/O, time passed in. Every operation
//! returns what changed (task keys, status, audit drafts, events) so the
//! actor can persist it before it answers.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
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
    pub before: serde_json::Value,
    pub after: serde_json::Value,
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
    /// Running tasks (no stuck check while work is in flight).
    running: usize,
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

fn task_snapshot(r: Option<&TaskRecord>) -> serde_json::Value {
    match r {
        Some(r) => json!({
            "task_id": r.task.task_id,
            "state": r.state,
            "attempt": r.attempt,
            "retries": r.retries,
            "reason": r.reason,
            "claimant": r.lease.as_ref().map(|l| &l.claimant),
        }),
        None => serde_json::Value::Null,
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
                self.running += 1;
            } else {
                self.running -= 1;
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
    /// hold it: `supervisor` (status, iteration, last task, halt reason and
    /// details, and `retry_count_<task>` for the task concerned), `goal`,
    /// `queue.exhausted`, `execution_mode`, `last_updated`, and
    /// `completed_tasks` as a count (the list is the queue's; each line
    /// stays small). A task's line adds the `task` itself.
    fn seed_state(&self, task: Option<&str>) -> serde_json::Value {
        let s = &self.status;
        let mut supervisor = json!({
            "status": s.status,
            "iteration": s.iteration,
            "last_task_id": s.last_task_id,
            "halt_reason": s.halt_reason,
            "halt_details": s.halt_reason.as_deref().and_then(halt_details),
        });
        let record = task.and_then(|id| self.tasks.get(id));
        if let Some(r) = record {
            supervisor[format!("retry_count_{}", r.task.task_id)] = json!(r.retries);
        }
        let mut v = json!({
            "supervisor": supervisor,
            "goal": {
                "description": s.goal.description,
                "project_id": s.goal.project_id,
                "completed": s.goal.completed,
            },
            "queue": {"exhausted": !self.has_open_work()},
            "completed_tasks": s.completed_total,
            "execution_mode": s.mode,
            "last_updated": s.last_updated,
        });
        if task.is_some() {
            v["task"] = task_snapshot(record);
        }
        v
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
        let before = self.seed_state(Some(id));
        self.mutate(id, f);
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
        self.running = 0;
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

    /// The task list a Manager task reconciles, as its prompt shows it
    /// (under [`MANAGER_LIST_BUDGET`] characters), and the pending tasks it
    /// shows. Pending first (the Manager may change those), then what it may
    /// not change: blocked and failed (with their reasons), running,
    /// waiting for an answer; completed ones counted.
    pub fn manager_view(&self, manager: &str) -> (String, Vec<String>) {
        use std::fmt::Write;
        let cut = |s: &str, n: usize| -> String {
            let s = s.replace('\n', " ");
            if s.chars().count() > n {
                format!("{}…", s.chars().take(n).collect::<String>())
            } else {
                s
            }
        };
        let mut by_state: BTreeMap<u8, Vec<&TaskRecord>> = BTreeMap::new();
        for id in self.by_seq.values() {
            let Some(r) = self.tasks.get(id) else {
                continue;
            };
            if r.task.role == MANAGER_ROLE || r.task.task_id == manager {
                continue;
            }
            let rank = match r.state {
                TaskState::Pending => 0,
                TaskState::Blocked | TaskState::Failed => 1,
                TaskState::Running => 2,
                TaskState::AwaitingResponse => 3,
                TaskState::Completed => 4,
                TaskState::Cancelled => 5,
            };
            by_state.entry(rank).or_default().push(r);
        }
        let mut s = String::from(
            "## TASK LIST (reconcile it)\nOne line a task: id | state | role | lane | attempt/retries | intent | depends on | reason.\n",
        );
        let mut shown = Vec::new();
        let mut hidden = 0usize;
        for (rank, list) in &by_state {
            if *rank == 4 {
                let last: Vec<&str> = list
                    .iter()
                    .rev()
                    .take(10)
                    .map(|r| r.task.task_id.as_str())
                    .collect();
                let _ = writeln!(s, "completed: {} (latest: {})", list.len(), last.join(", "));
                continue;
            }
            if *rank == 5 {
                let _ = writeln!(s, "cancelled: {}", list.len());
                continue;
            }
            for r in list {
                let line = format!(
                    "- {} | {} | {} | {} | {}/{} | {} | {} | {}\n",
                    r.task.task_id,
                    r.state.as_str(),
                    r.task.role,
                    r.task.lane.as_str(),
                    r.attempt,
                    r.retries,
                    cut(&r.task.intent, 100),
                    if r.task.depends_on.is_empty() {
                        "-".to_string()
                    } else {
                        r.task.depends_on.join(",")
                    },
                    r.reason
                        .as_deref()
                        .or(r.question.as_deref())
                        .map_or("-".to_string(), |x| cut(x, 160)),
                );
                if s.len() + line.len() > MANAGER_LIST_BUDGET {
                    hidden += 1;
                    continue;
                }
                s.push_str(&line);
                if r.state == TaskState::Pending {
                    shown.push(r.task.task_id.clone());
                }
            }
        }
        if hidden > 0 {
            let _ = writeln!(
                s,
                "({hidden} more tasks not shown for length: they are kept as they are.)"
            );
        }
        s.push_str("\nYou may change only pending tasks. In your reply, `keep` lists the ids of pending tasks to keep as they are; `tasks` holds new tasks and changed pending tasks as whole task objects (task_id, intent, instructions, role). A pending task listed above that is in neither is cancelled. Running, waiting, blocked, failed and completed tasks stay as they are whatever you reply. `next_task`: the id to run next, or null when the goal is met.\n");
        (s, shown)
    }

    /// The task list built for the Manager task the last claim handed out.
    pub fn take_manager_list(&mut self) -> Option<String> {
        self.manager_list.take()
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

    /// A task that names no role gets one from its phase (seed 002's
    /// table) or the default role.
    pub fn assign_role(&self, t: &mut Task) {
        if t.role.trim().is_empty() {
            t.role = t
                .phase
                .and_then(|p| self.policy.phase_roles.get(&p).cloned())
                .unwrap_or_else(|| self.policy.default_role.clone());
        }
    }

    /// Refuses dependencies that can never be met: an id neither in the
    /// queue nor in the batch, a cancelled task, and cycles (named in order).
    pub fn check_dependencies(&self, tasks: &[Task]) -> OpResult<()> {
        let batch: BTreeMap<&str, &Task> = tasks.iter().map(|t| (t.task_id.as_str(), t)).collect();
        for t in tasks {
            for d in &t.depends_on {
                if batch.contains_key(d.as_str()) {
                    continue;
                }
                match self.tasks.get(d).map(|r| r.state) {
                    None => {
                        return Err(invalid(format!(
                            "task {}: depends_on names {d}, which is neither enqueued nor in this batch: enqueue {d} first or remove it from depends_on",
                            t.task_id
                        )));
                    }
                    Some(TaskState::Cancelled) => {
                        return Err(invalid(format!(
                            "task {}: depends_on names {d}, which is cancelled and will never complete",
                            t.task_id
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        // Cycles: only edges among the batch can close one (a queued task's
        // dependencies were checked when it was enqueued, and they cannot
        // point at tasks that did not exist then).
        let deps = |id: &str| -> Vec<String> {
            match batch.get(id) {
                Some(t) => t.depends_on.clone(),
                None => self
                    .tasks
                    .get(id)
                    .map(|r| r.task.depends_on.clone())
                    .unwrap_or_default(),
            }
        };
        // 0 new, 1 on the path, 2 done.
        let mut mark: BTreeMap<String, u8> = BTreeMap::new();
        for start in batch.keys() {
            if mark.contains_key(*start) {
                continue;
            }
            let mut path: Vec<(String, Vec<String>)> = vec![(start.to_string(), deps(start))];
            mark.insert(start.to_string(), 1);
            while let Some((node, rest)) = path.last_mut() {
                let Some(next) = rest.pop() else {
                    mark.insert(node.clone(), 2);
                    path.pop();
                    continue;
                };
                match mark.get(&next).copied() {
                    Some(1) => {
                        let from = path.iter().position(|(n, _)| *n == next).unwrap_or(0);
                        let mut cycle: Vec<String> =
                            path[from..].iter().map(|(n, _)| n.clone()).collect();
                        cycle.push(next);
                        return Err(invalid(format!(
                            "dependency cycle: {} (no task of it could ever start); remove one of these depends_on entries",
                            cycle.join(" -> ")
                        )));
                    }
                    Some(_) => {}
                    None => {
                        mark.insert(next.clone(), 1);
                        let d = deps(&next);
                        path.push((next, d));
                    }
                }
            }
        }
        Ok(())
    }

    /// Validates every task before any is enqueued.
    pub fn validate(&self, tasks: &[Task]) -> OpResult<()> {
        let mut seen = BTreeSet::new();
        for t in tasks {
            validate_task(t, &self.roles)?;
            if !seen.insert(t.task_id.as_str()) {
                return Err(invalid(format!(
                    "task {}: duplicate task_id in this batch",
                    t.task_id
                )));
            }
            if let Some(existing) = self.tasks.get(&t.task_id)
                && existing.task != *t
            {
                return Err(invalid(format!(
                    "task {}: already enqueued with different content",
                    t.task_id
                )));
            }
        }
        Ok(())
    }

    pub fn enqueue(&mut self, mut tasks: Vec<Task>, now: u64) -> OpResult<(Vec<String>, Changes)> {
        self.require_init()?;
        for t in &mut tasks {
            self.assign_role(t);
        }
        self.validate(&tasks)?;
        self.check_dependencies(&tasks)?;
        let mut added = Vec::new();
        let mut c = Changes::default();
        for t in tasks {
            if self.tasks.contains_key(&t.task_id) {
                continue;
            }
            let id = t.task_id.clone();
            c.merge(self.insert(t, now, false, None));
            added.push(id);
        }
        c.merge(self.cap_cleanup());
        Ok((added, c))
    }

    fn insert(
        &mut self,
        task: Task,
        now: u64,
        priority: bool,
        reconciles: Option<String>,
    ) -> Changes {
        self.next_seq += 1;
        // A critical task interrupts: its event tells runners holding other
        // work to yield (the runner decides how to stop safely).
        let event = if task.lane == Lane::Critical {
            EventName::EnqueueCritical
        } else {
            EventName::Enqueue
        };
        let id = task.task_id.clone();
        let born = self.status.completed_total;
        self.by_seq.insert(self.next_seq, id.clone());
        self.tasks.insert(
            id.clone(),
            TaskRecord {
                task,
                state: TaskState::Pending,
                attempt: 0,
                retries: 0,
                seq: self.next_seq,
                lease: None,
                mark: None,
                priority,
                report: None,
                reason: None,
                question: None,
                answer: None,
                born_completed: born,
                completed_token: None,
                reconciles,
                cause: None,
                shown: None,
                spent: Usage::default(),
                attempt_spent: Usage::default(),
                interrupt: None,
                updated_at: now,
            },
        );
        self.index(&id, true);
        Changes {
            tasks: [id.clone()].into(),
            audit: vec![AuditDraft {
                event,
                task_id: Some(id.clone()),
                before: serde_json::Value::Null,
                after: self.seed_state(Some(&id)),
                report: None,
                exchange: None,
            }],
            ..Default::default()
        }
    }

    /// Pending cleanup tasks, found by range in the ready index (not a scan).
    fn pending_cleanup(&self) -> impl Iterator<Item = &TaskRecord> + '_ {
        self.ready.values().flat_map(move |set| {
            [false, true].into_iter().flat_map(move |p| {
                let lo = (p, Lane::Cleanup, 0, String::new());
                set.range(lo..)
                    .take_while(move |k| k.0 == p && k.1 == Lane::Cleanup)
                    .filter_map(|k| self.tasks.get(&k.3))
            })
        })
    }

    /// Keeps at most `CLEANUP_CAP` cleanup tasks waiting: the oldest go.
    fn cap_cleanup(&mut self) -> Changes {
        let mut waiting: Vec<(u64, String)> = self
            .pending_cleanup()
            .map(|t| (t.seq, t.task.task_id.clone()))
            .collect();
        waiting.sort();
        let mut c = Changes::default();
        let excess = waiting.len().saturating_sub(CLEANUP_CAP);
        for (_, id) in waiting.into_iter().take(excess) {
            c.merge(self.task_change(EventName::CleanupDropped, &id, None, |r| {
                r.state = TaskState::Cancelled;
                r.reason = Some(format!("cleanup cap of {CLEANUP_CAP} exceeded"));
            }));
        }
        c
    }

    /// Cleanup tasks waiting while `CLEANUP_AGE` tasks completed age out.
    fn age_cleanup(&mut self, now: u64) -> Changes {
        let total = self.status.completed_total;
        let old: Vec<String> = self
            .pending_cleanup()
            .filter(|t| total.saturating_sub(t.born_completed) >= CLEANUP_AGE)
            .map(|t| t.task.task_id.clone())
            .collect();
        let mut c = Changes::default();
        for id in old {
            c.merge(self.task_change(EventName::CleanupDropped, &id, None, |r| {
                r.state = TaskState::Cancelled;
                r.reason = Some(format!(
                    "cleanup aged out after {CLEANUP_AGE} completed tasks"
                ));
                r.updated_at = now;
            }));
        }
        c
    }

    fn deps_done(&self, t: &TaskRecord) -> bool {
        t.task.depends_on.iter().all(|d| {
            self.tasks
                .get(d)
                .is_some_and(|r| r.state == TaskState::Completed)
        })
    }

    /// The next task for `role`: replays, retries, answers and Manager tasks
    /// first, then by lane (critical, functional, planned, cleanup), then in
    /// enqueue order. A task a Manager is reconciling waits for its reply.
    pub fn next_for(&self, role: &str) -> Option<String> {
        self.ready
            .get(role)?
            .iter()
            .map(|k| &k.3)
            .filter(|id| !self.held.contains_key(*id))
            .find(|id| self.tasks.get(*id).is_some_and(|t| self.deps_done(t)))
            .cloned()
    }

    /// Whether a Manager's claim holds `id` back (it was shown pending).
    pub fn held_by_manager(&self, id: &str) -> bool {
        self.held.contains_key(id)
    }

    /// Hands out a task, or `None` (and maybe halts or completes when no
    /// work is left at all).
    pub fn claim(
        &mut self,
        role: &str,
        claimant: &str,
        now: u64,
    ) -> OpResult<(Option<(TaskRecord, String)>, Changes)> {
        self.require_init()?;
        self.role_seen.insert(role.to_string(), now);
        if self.status.status != RunStatus::Running {
            return Ok((None, Changes::default()));
        }
        if self.status.mode == ExecutionMode::Manual && self.status.steps == 0 {
            return Ok((None, Changes::default()));
        }
        let Some(id) = self.next_for(role) else {
            return Ok((None, self.check_exhausted()));
        };
        // 128 bits from the kernel's CSPRNG: a token proves the holder, so
        // it must not be guessed from the claim time or another token.
        let token = xo_runtime::secret::random_hex(16).map_err(|e| {
            ServiceError::new(
                ErrorCode::Internal,
                format!("no lease token could be made: {e}"),
            )
        })?;
        let lease = Lease {
            claimant: claimant.to_string(),
            token: token.clone(),
            renewed_at: now,
            checkpoint: false,
        };
        // The Manager's list is built once: the pending ids it shows are kept
        // on the task, the text goes with the claim (`take_manager_list`).
        let view = (role == MANAGER_ROLE).then(|| self.manager_view(&id));
        let shown = view.as_ref().map(|(_, ids)| ids.clone());
        self.manager_list = view.map(|(text, _)| text);
        let mut c = self.task_change(EventName::TaskStart, &id, None, |r| {
            r.state = TaskState::Running;
            r.attempt += 1;
            r.lease = Some(lease);
            r.priority = false;
            r.updated_at = now;
            if shown.is_some() {
                r.shown = shown;
            }
        });
        if self.status.mode == ExecutionMode::Manual {
            self.status.steps -= 1;
            c.status = true;
        }
        let rec = self.tasks.get(&id).cloned().ok_or_else(|| not_found(&id))?;
        Ok((Some((rec, token)), c))
    }

    /// The lease of `id` while it runs.
    pub fn lease(&self, id: &str) -> Option<&Lease> {
        self.tasks
            .get(id)
            .filter(|r| r.state == TaskState::Running)
            .and_then(|r| r.lease.as_ref())
    }

    fn holder(&self, id: &str, token: &str) -> OpResult<&TaskRecord> {
        let r = self.tasks.get(id).ok_or_else(|| not_found(id))?;
        match (&r.state, &r.lease) {
            (TaskState::Running, Some(l)) if xo_runtime::secret::same(&l.token, token) => Ok(r),
            (TaskState::Running, _) => Err(ServiceError::new(
                ErrorCode::Invalid,
                format!("task {id}: lease lost (another claimant holds it now)"),
            )),
            (state, _) => Err(ServiceError::new(
                ErrorCode::Invalid,
                format!("task {id}: not running (it is {})", state.as_str()),
            )),
        }
    }

    pub fn heartbeat(
        &mut self,
        id: &str,
        token: &str,
        checkpoint: bool,
        now: u64,
    ) -> OpResult<(TaskRecord, Changes)> {
        self.holder(id, token)?;
        let r = self.tasks.get_mut(id).ok_or_else(|| not_found(id))?;
        if let Some(l) = r.lease.as_mut() {
            l.renewed_at = now;
            l.checkpoint |= checkpoint;
        }
        let rec = r.clone();
        // Renewals are persisted (a restarted queue must not expire a live
        // lease at once) but not audited: they are not transitions.
        Ok((
            rec,
            Changes {
                tasks: [id.to_string()].into(),
                ..Default::default()
            },
        ))
    }

    pub fn complete(
        &mut self,
        id: &str,
        token: &str,
        report: ValidationReport,
        manager_reply: Option<serde_json::Value>,
        now: u64,
    ) -> OpResult<(TaskRecord, Changes)> {
        if let Some(r) = self.tasks.get(id)
            && r.state == TaskState::Completed
            && r.completed_token
                .as_deref()
                .is_some_and(|t| xo_runtime::secret::same(t, token))
        {
            return Ok((r.clone(), Changes::default()));
        }
        let rec = self.holder(id, token)?.clone();
        let mut c = Changes::default();
        let manager = rec.task.role == MANAGER_ROLE;
        let reply = if manager {
            let parsed =
                parse_manager_reply(manager_reply.as_ref(), &self.roles, |t| self.assign_role(t))
                    .and_then(
                        |r| match r.keep.iter().find(|k| !self.tasks.contains_key(*k)) {
                            Some(k) => Err(format!("keep names {k}, which is not in the queue")),
                            None => Ok(r),
                        },
                    );
            match parsed {
                Ok(r) => Some(r),
                Err(why) => {
                    // Seed 002: a reply in the wrong format changes nothing;
                    // the same task is run again with the same inputs.
                    c.merge(self.fail_attempt(
                        id,
                        now,
                        report,
                        format!("invalid manager reply: {why}"),
                    ));
                    c.merge(self.check_exhausted());
                    let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
                    return Ok((r, c));
                }
            }
        } else {
            None
        };
        if !report.passed {
            let why = if report.summary.is_empty() {
                "validation failed".to_string()
            } else {
                report.summary.clone()
            };
            c.merge(self.fail_attempt(id, now, report, why));
            c.merge(self.check_exhausted());
            let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
            return Ok((r, c));
        }
        c.merge(
            self.task_change(EventName::TaskComplete, id, Some(report.clone()), |r| {
                r.state = TaskState::Completed;
                r.lease = None;
                r.mark = None;
                r.report = Some(report.clone());
                r.reason = None;
                r.updated_at = now;
            }),
        );
        self.status.iteration += 1;
        self.status.completed_total += 1;
        self.status.last_task_id = Some(id.to_string());
        self.status.last_validation_report = Some(report);
        c.status = true;
        // The completion's line shows the supervisor state it moved.
        let after = self.seed_state(Some(id));
        if let Some(d) = c.line_of(id) {
            d.after = after;
        }
        if let Some(reply) = reply {
            c.merge(self.reconcile(id, reply, now));
        } else if self.status.manager {
            let mid = format!("manager-{id}");
            if !self.tasks.contains_key(&mid) {
                let task = Task {
                    project: rec.task.project.clone(),
                    lane: Lane::Functional,
                    ..Task::new(
                        mid.clone(),
                        format!("reconcile the task list after {id}"),
                        format!(
                            "Task {id} is done. Reconcile the task list below against the goal: reply with status, message, next_task, keep (pending tasks kept as they are) and tasks (new or changed pending tasks)."
                        ),
                        MANAGER_ROLE,
                    )
                };
                c.merge(self.insert(task, now, true, Some(id.to_string())));
            }
        }
        c.merge(self.age_cleanup(now));
        c.merge(self.check_exhausted());
        let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
        Ok((r, c))
    }

    /// A failed attempt: retried first next time, or blocked when out of retries.
    fn fail_attempt(
        &mut self,
        id: &str,
        now: u64,
        report: ValidationReport,
        why: String,
    ) -> Changes {
        let Some(r) = self.tasks.get(id) else {
            return Changes::default();
        };
        let max = r.task.retry_policy.max_retries;
        if r.retries + 1 > max {
            let reason = format!("{why} (after {max} retries)");
            let mut c = self.task_change(EventName::TaskBlocked, id, Some(report.clone()), |r| {
                r.state = TaskState::Blocked;
                r.retries += 1;
                r.lease = None;
                r.report = Some(report);
                r.reason = Some(reason.clone());
                r.cause = Some(BlockCause::Validation);
                r.updated_at = now;
            });
            c.merge(self.stopped(id, BlockCause::Validation, &reason));
            c
        } else {
            self.task_change(EventName::TaskRetry, id, Some(report.clone()), |r| {
                r.state = TaskState::Pending;
                r.retries += 1;
                r.lease = None;
                r.priority = true;
                r.report = Some(report);
                r.reason = Some(why);
                r.updated_at = now;
            })
        }
    }

    /// Applies a validated Manager reply: pending tasks absent from it are
    /// cancelled, new ones enqueued, changed ones replaced; `next_task` is
    /// served next; no `next_task` marks the goal complete.
    fn reconcile(&mut self, manager: &str, reply: ManagerReply, now: u64) -> Changes {
        let mut c = Changes::default();
        let listed: BTreeSet<String> = reply
            .tasks
            .iter()
            .map(|t| t.task_id.clone())
            .chain(reply.keep.iter().cloned())
            .collect();
        // Only pending tasks the Manager was shown can be dropped by
        // leaving them out (a list cut to the prompt budget hides none).
        let shown: Option<BTreeSet<String>> = self
            .tasks
            .get(manager)
            .and_then(|r| r.shown.clone())
            .map(|v| v.into_iter().collect());
        let stale: Vec<String> = self
            .tasks
            .values()
            .filter(|t| {
                t.state == TaskState::Pending
                    && t.task.role != MANAGER_ROLE
                    && !listed.contains(&t.task.task_id)
                    && shown.as_ref().is_none_or(|s| s.contains(&t.task.task_id))
            })
            .map(|t| t.task.task_id.clone())
            .collect();
        for id in &stale {
            c.merge(self.task_change(EventName::TaskCancelled, id, None, |r| {
                r.state = TaskState::Cancelled;
                r.reason = Some(format!(
                    "dropped by the Manager's reconciliation ({manager})"
                ));
                r.updated_at = now;
            }));
        }
        let (mut added, mut updated) = (Vec::new(), Vec::new());
        for t in reply.tasks {
            match self.tasks.get(&t.task_id).map(|r| r.state) {
                None => {
                    added.push(t.task_id.clone());
                    c.merge(self.insert(t, now, false, None))
                }
                Some(TaskState::Pending) => {
                    let id = t.task_id.clone();
                    updated.push(id.clone());
                    c.merge(self.task_change(EventName::TaskUpdated, &id, None, |r| {
                        r.task = t;
                        r.updated_at = now;
                    }));
                }
                Some(_) => {}
            }
        }
        match reply.next_task {
            Some(next) => {
                if self
                    .tasks
                    .get(&next)
                    .is_some_and(|r| r.state == TaskState::Pending)
                {
                    self.mutate(&next, |r| r.priority = true);
                    c.tasks.insert(next);
                }
            }
            None => {
                self.status.goal.completed = true;
                c.status = true;
            }
        }
        c.audit.push(AuditDraft {
            event: EventName::ManagerReconciled,
            task_id: None,
            before: serde_json::Value::Null,
            after: json!({"message": reply.message, "status": reply.status, "manager": manager,
                "cancelled": stale, "added": added, "updated": updated, "kept": reply.keep}),
            report: None,
            exchange: None,
        });
        c
    }

    /// No pending, running or awaiting task left: COMPLETED if the goal is
    /// met, else HALTED with `TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE`.
    pub fn check_exhausted(&mut self) -> Changes {
        if self.status.status != RunStatus::Running || self.has_open_work() {
            return Changes::default();
        }
        if self.status.goal.completed {
            self.status_change(EventName::Completed, |s| {
                s.status = RunStatus::Completed;
                s.halt_reason = None;
            })
        } else {
            let waiting: Vec<String> = self
                .tasks
                .values()
                .filter(|t| matches!(t.state, TaskState::Blocked | TaskState::Failed))
                .map(|t| t.task.task_id.clone())
                .take(10)
                .collect();
            let mut c = self.status_change(EventName::Halt, |s| {
                s.status = RunStatus::Halted;
                s.halt_reason = Some(TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE.into());
            });
            c.alert(
                AlertKind::QueueHalted,
                None,
                "the task list is done but the goal is not".into(),
                if waiting.is_empty() {
                    format!("{TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE}: enqueue more tasks, or mark the goal complete with `xo goal --completed`.")
                } else {
                    format!(
                        "{TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE}: blocked or failed tasks wait for you: {}. `xo retry ID` and `xo resume`, or enqueue more.",
                        waiting.join(", ")
                    )
                },
            );
            c
        }
    }

    pub fn block(
        &mut self,
        id: &str,
        token: &str,
        reason: String,
        question: Option<String>,
        now: u64,
    ) -> OpResult<(TaskRecord, Changes)> {
        self.block_for(id, token, reason, question, None, now)
    }

    /// Blocks (or fails, for a violation) the task, or leaves it awaiting
    /// the operator's answer to `question`.
    pub fn block_for(
        &mut self,
        id: &str,
        token: &str,
        reason: String,
        question: Option<String>,
        cause: Option<BlockCause>,
        now: u64,
    ) -> OpResult<(TaskRecord, Changes)> {
        self.holder(id, token)?;
        let mut c;
        if let Some(q) = question {
            c = self.task_change(EventName::TaskAwaitingResponse, id, None, |r| {
                r.state = TaskState::AwaitingResponse;
                r.lease = None;
                r.question = Some(q.clone());
                r.reason = Some(reason);
                r.updated_at = now;
            });
            c.alert(
                AlertKind::Question,
                Some(id),
                format!("task {id} asks a question"),
                format!("{q}\nAnswer it with `xo answer {id} \"...\"` (or on the console's queue page); the task waits until then."),
            );
        } else {
            let cause = cause.unwrap_or_else(|| BlockCause::of_reason(&reason));
            // Seed 004 (SUP-7): a major violation ends the task in ERROR.
            let (event, state) = if cause == BlockCause::Violation {
                (EventName::TaskFailed, TaskState::Failed)
            } else {
                (EventName::TaskBlocked, TaskState::Blocked)
            };
            c = self.task_change(event, id, None, |r| {
                r.state = state;
                r.lease = None;
                r.reason = Some(reason.clone());
                r.cause = Some(cause);
                r.updated_at = now;
            });
            c.merge(self.stopped(id, cause, &reason));
        }
        let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
        Ok((r, c))
    }

    /// Puts the agent's last prompt and reply into the audit line of `id`'s
    /// outcome in `c`.
    pub fn attach_exchange(id: &str, exchange: xo_proto::queue::Exchange, c: &mut Changes) {
        if let Some(d) = c.line_of(id) {
            d.exchange = Some(exchange);
        }
    }

    /// Keeps the validation a blocked task failed on: on its record and in
    /// the audit line of its block. The record as it now is.
    pub fn attach_report(
        &mut self,
        id: &str,
        report: ValidationReport,
        c: &mut Changes,
    ) -> Option<TaskRecord> {
        let r = self.tasks.get_mut(id)?;
        r.report = Some(report.clone());
        if let Some(d) = c.line_of(id) {
            d.report = Some(report);
        }
        Some(r.clone())
    }

    /// A task blocked or failed: the operator is told; the queue halts if
    /// the policy lists the cause, else goes on with the next task.
    fn stopped(&mut self, id: &str, cause: BlockCause, reason: &str) -> Changes {
        let mut c = Changes::default();
        let halts = self.policy.halt_on.contains(&cause);
        let kind = if cause == BlockCause::Budget {
            AlertKind::BudgetExhausted
        } else {
            AlertKind::TaskBlocked
        };
        let state = self.tasks.get(id).map_or("blocked", |r| r.state.as_str());
        c.alert(
            kind,
            Some(id),
            format!("task {id} {state} ({cause})"),
            format!(
                "{reason}. {} Look at it with `xo tasks --state {state}`, then `xo retry {id}` or `xo cancel {id}`.",
                if halts {
                    format!("The queue halted (queue.halt_on lists {cause}); `xo resume` after.")
                } else {
                    "The queue goes on with the next task.".to_string()
                }
            ),
        );
        if halts {
            c.merge(self.status_change(EventName::Halt, |s| {
                s.status = RunStatus::Halted;
                s.halt_reason = Some(format!("{HALT_TASK_BLOCKED}: {id}: {reason}"));
            }));
        } else {
            c.merge(self.check_exhausted());
        }
        c
    }

    /// Records the work a runner reports for the task it holds: the
    /// attempt's total so far (`done`: the attempt ended, so it moves into
    /// the task's spent total). The goal's cost grows by the difference;
    /// past the goal's budget the queue halts with `BUDGET_EXHAUSTED`.
    pub fn spend(&mut self, id: &str, token: &str, usage: Usage, done: bool) -> Changes {
        if self.holder(id, token).is_err() {
            return Changes::default();
        }
        let mut c = Changes::default();
        let mut delta = 0.0;
        self.mutate(id, |r| {
            delta = (usage.cost_usd - r.attempt_spent.cost_usd).max(0.0);
            if done {
                r.spent.add(&usage);
                r.attempt_spent = Usage::default();
            } else {
                r.attempt_spent = usage;
            }
        });
        c.tasks.insert(id.to_string());
        if delta > 0.0 {
            self.status.spent_usd += delta;
            c.status = true;
            c.merge(self.check_goal_budget());
        }
        c
    }

    fn check_goal_budget(&mut self) -> Changes {
        let (budget, spent) = (self.status.goal.budget_usd, self.status.spent_usd);
        if budget <= 0.0 || spent < budget || self.status.status != RunStatus::Running {
            return Changes::default();
        }
        let reason = format!(
            "{HALT_BUDGET_EXHAUSTED}: the goal spent ${spent:.4} of its ${budget:.4} budget"
        );
        let mut c = self.status_change(EventName::Halt, |s| {
            s.status = RunStatus::Halted;
            s.halt_reason = Some(reason.clone());
        });
        c.alert(
            AlertKind::BudgetExhausted,
            None,
            "the goal's budget is spent; the queue halted".into(),
            format!("{reason}. Running agents are stopped (their tasks are offered again after `xo resume`); raise the budget with `xo goal --budget-usd` first, or stop here."),
        );
        c
    }

    pub fn answer(&mut self, id: &str, text: String, now: u64) -> OpResult<(TaskRecord, Changes)> {
        let r = self.tasks.get(id).ok_or_else(|| not_found(id))?;
        if r.state != TaskState::AwaitingResponse {
            return Err(invalid(format!(
                "task {id}: not awaiting a response (it is {})",
                r.state.as_str()
            )));
        }
        if text.trim().is_empty() {
            return Err(invalid("answer is empty"));
        }
        let c = self.task_change(EventName::TaskAnswered, id, None, |r| {
            r.state = TaskState::Pending;
            r.answer = Some(text);
            r.priority = true;
            r.updated_at = now;
        });
        let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
        Ok((r, c))
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

    pub fn retry(&mut self, id: &str, now: u64) -> OpResult<(TaskRecord, Changes)> {
        let r = self.tasks.get(id).ok_or_else(|| not_found(id))?;
        if !matches!(r.state, TaskState::Blocked | TaskState::Failed) {
            return Err(invalid(format!(
                "task {id}: only blocked or failed tasks can be retried (it is {})",
                r.state.as_str()
            )));
        }
        // The operator's retry starts the task afresh: retries and budget;
        // why it stopped is history (the audit keeps it), not its state.
        let c = self.task_change(EventName::TaskRetry, id, None, |r| {
            r.state = TaskState::Pending;
            r.retries = 0;
            r.priority = true;
            r.cause = None;
            r.reason = None;
            r.spent = Usage::default();
            r.updated_at = now;
        });
        let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
        Ok((r, c))
    }

    pub fn cancel(&mut self, id: &str, now: u64) -> OpResult<(TaskRecord, Changes)> {
        let r = self.tasks.get(id).ok_or_else(|| not_found(id))?;
        if matches!(r.state, TaskState::Completed | TaskState::Cancelled) {
            return Err(invalid(format!("task {id}: already {}", r.state.as_str())));
        }
        let mut c = self.task_change(EventName::TaskCancelled, id, None, |r| {
            r.state = TaskState::Cancelled;
            r.lease = None;
            r.reason = Some("cancelled by the operator".into());
            r.updated_at = now;
        });
        c.merge(self.check_exhausted());
        let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
        Ok((r, c))
    }

    /// Seed 001's interrupt: each critical task that could run now (its
    /// dependencies done, no Manager holding it) but waits because every
    /// runner of its role is busy asks one running lower-lane task of its
    /// scope (same role, same project) to yield: the lowest lane first,
    /// then the most recently claimed (the least work set aside). One task
    /// yields per critical task; none while the queue is not running.
    /// Called after the waiting claims were served, so an idle runner takes
    /// the critical task instead.
    pub fn interrupts(&mut self, now: u64) -> Changes {
        let mut c = Changes::default();
        if self.status.status != RunStatus::Running || self.running == 0 {
            return c;
        }
        // Critical tasks come right after the priority ones in a role's set.
        let critical: Vec<String> = self
            .ready
            .values()
            .flat_map(|set| {
                set.iter()
                    .skip_while(|k| !k.0)
                    .take_while(|k| k.1 == Lane::Critical)
                    .map(|k| k.3.clone())
            })
            .filter(|id| !self.held.contains_key(id))
            .filter(|id| self.tasks.get(id).is_some_and(|t| self.deps_done(t)))
            .collect();
        if critical.is_empty() {
            return c;
        }
        let goal_project = self.status.goal.project_id.clone();
        for cid in critical {
            let Some(crit) = self.tasks.get(&cid) else {
                continue;
            };
            // The scope: the same role, the same project (a task naming
            // none is worked in the goal's).
            let role = crit.task.role.clone();
            let project = crit.task.project.clone().or_else(|| goal_project.clone());
            let in_scope = |r: &TaskRecord| {
                r.task.role == role
                    && r.task.project.as_ref().or(goal_project.as_ref()) == project.as_ref()
            };
            let mut victim: Option<(Lane, u64, String)> = None;
            let mut taken = false;
            for r in self.tasks.values() {
                if r.state != TaskState::Running {
                    continue;
                }
                if r.interrupt.as_deref() == Some(cid.as_str()) {
                    taken = true;
                    break;
                }
                if r.interrupt.is_some()
                    || r.task.lane == Lane::Critical
                    || r.task.role == MANAGER_ROLE
                    || !in_scope(r)
                {
                    continue;
                }
                let key = (r.task.lane, r.updated_at, r.task.task_id.clone());
                if victim.as_ref().is_none_or(|v| key > *v) {
                    victim = Some(key);
                }
            }
            let Some((_, _, vid)) = victim.filter(|_| !taken) else {
                continue;
            };
            let mut d = self.task_change(EventName::TaskInterrupted, &vid, None, |r| {
                r.interrupt = Some(cid.clone());
                r.updated_at = now;
            });
            for a in &mut d.audit {
                a.after["interrupt"] = json!(cid);
            }
            c.merge(d);
        }
        c
    }

    /// The holder of a task gives it back after it was asked to yield:
    /// pending, behind the critical task, to be resumed (validated first if
    /// the agent left a checkpoint) or continued on the work it left. Not a
    /// retry.
    pub fn yield_task(
        &mut self,
        id: &str,
        token: &str,
        checkpoint: bool,
        note: &str,
        now: u64,
    ) -> OpResult<(TaskRecord, Changes)> {
        let held = self.holder(id, token)?;
        let checkpoint = checkpoint || held.lease.as_ref().is_some_and(|l| l.checkpoint);
        let to = held
            .interrupt
            .clone()
            .unwrap_or_else(|| "none named".into());
        let mut c = self.task_change(EventName::TaskYielded, id, None, |r| {
            r.state = TaskState::Pending;
            r.lease = None;
            r.priority = false;
            r.mark = Some(if checkpoint {
                ReplayMark::Resume
            } else {
                ReplayMark::Continue
            });
            r.reason = Some(format!("yielded to critical task {to}: {note}"));
            r.updated_at = now;
        });
        for a in &mut c.audit {
            a.after["yielded_to"] = json!(to);
            a.after["note"] = json!(note);
        }
        let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
        Ok((r, c))
    }

    /// SUP-6: a lease not renewed for `lease_ms` is stale; the task is
    /// offered again (attempt + 1 on the next claim), marked `resume` if the
    /// holder had checkpointed, else `rollback_replay`.
    pub fn expire_leases(&mut self, now: u64) -> Changes {
        let stale: Vec<(String, bool)> = self
            .tasks
            .values()
            .filter_map(|t| match (&t.state, &t.lease) {
                (TaskState::Running, Some(l))
                    if now.saturating_sub(l.renewed_at) >= self.lease_ms =>
                {
                    Some((t.task.task_id.clone(), l.checkpoint))
                }
                _ => None,
            })
            .collect();
        let mut c = Changes::default();
        for (id, checkpoint) in stale {
            c.merge(self.task_change(EventName::LeaseExpired, &id, None, |r| {
                r.state = TaskState::Pending;
                r.lease = None;
                r.priority = true;
                r.mark = Some(if checkpoint {
                    ReplayMark::Resume
                } else {
                    ReplayMark::RollbackReplay
                });
                let spent = std::mem::take(&mut r.attempt_spent);
                r.spent.add(&spent);
                r.updated_at = now;
            }));
        }
        c
    }

    /// Pending work no runner can claim: nothing is running and no pending
    /// task both has its dependencies done and a role whose runners asked
    /// for work within `stale_after_ms`. Raises `QUEUE_STUCK` (status,
    /// audit, alert) with the reasons; clears it once work can go on.
    pub fn check_stuck(&mut self, now: u64) -> Changes {
        let why = if self.status.status == RunStatus::Running {
            let since = *self.running_since.get_or_insert(now);
            self.stuck_reason(now, since)
        } else {
            self.running_since = None;
            None
        };
        if why == self.status.stuck {
            return Changes::default();
        }
        match why {
            Some(reason) => {
                let mut c = self.status_change(EventName::QueueStuck, |s| {
                    s.stuck = Some(reason.clone());
                });
                c.alert(
                    AlertKind::QueueStuck,
                    None,
                    "the queue is stuck: pending work no runner can claim".into(),
                    format!("{reason}. Cancel or retry the tasks named, or start a runner of the role named (`xo serve runner --role ROLE`)."),
                );
                c
            }
            None => self.status_change(EventName::QueueUnstuck, |s| s.stuck = None),
        }
    }

    fn stuck_reason(&self, now: u64, running_since: u64) -> Option<String> {
        // Work in flight can unblock the rest: nothing to look at (checked
        // before the pending tasks are gathered; this runs every second).
        if self.running > 0 {
            return None;
        }
        let pending: Vec<&TaskRecord> = self
            .ready
            .values()
            .flatten()
            .filter_map(|k| self.tasks.get(&k.3))
            .collect();
        if pending.is_empty() {
            return None;
        }
        let grace = now.saturating_sub(running_since) < self.policy.stale_after_ms;
        let live = |role: &str| {
            grace
                || self
                    .role_seen
                    .get(role)
                    .is_some_and(|t| now.saturating_sub(*t) < self.policy.stale_after_ms)
        };
        let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in &pending {
            // Waits for a Manager's reply; the Manager task is judged itself.
            if self.held.contains_key(&t.task.task_id) {
                continue;
            }
            let mut waits = None;
            for d in &t.task.depends_on {
                match self.tasks.get(d).map(|r| r.state) {
                    Some(TaskState::Completed) => {}
                    // Waits on work that may still happen.
                    Some(TaskState::Pending) => waits = waits.or(Some(None)),
                    Some(st) => {
                        waits = Some(Some(format!("waits on {d} ({})", st.as_str())));
                        break;
                    }
                    None => {
                        waits = Some(Some(format!("waits on {d} (not in the queue)")));
                        break;
                    }
                }
            }
            match waits {
                Some(Some(why)) => reasons.entry(why).or_default().push(t.task.task_id.clone()),
                Some(None) => {}
                None if live(&t.task.role) => return None,
                None => reasons
                    .entry(format!(
                        "no runner of role {:?} asked for work in {} s",
                        t.task.role,
                        self.policy.stale_after_ms / 1000
                    ))
                    .or_default()
                    .push(t.task.task_id.clone()),
            }
        }
        if reasons.is_empty() {
            // Only chains of pending tasks: each waits on another pending
            // task that waits in turn; the roots are named above, so this
            // is a cycle that came in through a Manager's reply.
            return Some(format!(
                "{QUEUE_STUCK}: {} pending tasks wait on each other",
                pending.len()
            ));
        }
        let parts: Vec<String> = reasons
            .into_iter()
            .map(|(why, ids)| {
                let shown: Vec<&str> = ids.iter().take(5).map(String::as_str).collect();
                let more = ids.len().saturating_sub(5);
                if more > 0 {
                    format!("{} and {more} more {why}", shown.join(", "))
                } else {
                    format!("{} {why}", shown.join(", "))
                }
            })
            .collect();
        Some(format!("{QUEUE_STUCK}: {}", parts.join("; ")))
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

/// Task ids and project ids: one store key and subject token.
pub fn check_id(field: &str, id: &str) -> OpResult<()> {
    xo_proto::validate_token(field, id).map_err(invalid)
}

/// A path inside the project sandbox: relative, no `..`.
pub fn check_sandbox_path(task: &str, field: &str, p: &str) -> OpResult<()> {
    let path = std::path::Path::new(p);
    let bad = |why: &str| invalid(format!("task {task}: {field} {p:?} {why}"));
    if p.is_empty() {
        return Err(bad("is empty"));
    }
    if path.is_absolute() || p.starts_with('~') {
        return Err(bad(
            "is absolute; paths are relative to the project sandbox",
        ));
    }
    if path.components().any(|c| {
        matches!(
            c,
            std::path::Component::ParentDir | std::path::Component::Prefix(_)
        )
    }) {
        return Err(bad("leaves the sandbox ('..')"));
    }
    Ok(())
}

pub fn validate_task(t: &Task, roles: &BTreeSet<String>) -> OpResult<()> {
    check_id("task_id", &t.task_id)?;
    let id = &t.task_id;
    if t.intent.trim().is_empty() {
        return Err(invalid(format!("task {id}: intent is empty")));
    }
    if t.instructions.trim().is_empty() {
        return Err(invalid(format!("task {id}: instructions is empty")));
    }
    if !roles.contains(&t.role) {
        return Err(invalid(format!(
            "task {id}: role {:?} is unknown (known: {})",
            t.role,
            roles.iter().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    if let Some(wd) = &t.working_directory {
        check_sandbox_path(id, "working_directory", wd)?;
    }
    for a in &t.required_artifacts {
        check_sandbox_path(id, "required_artifacts", a)?;
    }
    if let Some(p) = &t.project {
        check_id(&format!("task {id}: project"), p)?;
    }
    if t.retry_policy.max_retries > 100 {
        return Err(invalid(format!(
            "task {id}: retry_policy.max_retries {} is more than 100",
            t.retry_policy.max_retries
        )));
    }
    if t.depends_on.iter().any(|d| d == id) {
        return Err(invalid(format!("task {id}: depends_on names itself")));
    }
    Ok(())
}

/// Seed 002's format check of a Manager reply.
pub fn parse_manager_reply(
    v: Option<&serde_json::Value>,
    roles: &BTreeSet<String>,
    assign_role: impl Fn(&mut Task),
) -> Result<ManagerReply, String> {
    let v = v.ok_or("no manager_reply")?;
    let mut reply: ManagerReply = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    for t in &mut reply.tasks {
        assign_role(t);
    }
    if !REPLY_STATUSES.contains(&reply.status.as_str()) {
        return Err(format!(
            "status {:?} is not one of {}",
            reply.status,
            REPLY_STATUSES.join(", ")
        ));
    }
    if reply.message.trim().is_empty() {
        return Err("message is empty".into());
    }
    let mut seen = BTreeSet::new();
    for t in &reply.tasks {
        validate_task(t, roles).map_err(|e| e.message)?;
        if !seen.insert(&t.task_id) {
            return Err(format!("task {} listed twice", t.task_id));
        }
    }
    Ok(reply)
}

/// Orders a batch so every task comes after the tasks of the batch it
/// depends on (otherwise in file order): a batch sent in parts then never
/// names a task a later part brings. A cycle is an error naming it.
pub fn dependency_order(tasks: Vec<Task>) -> Result<Vec<Task>, String> {
    let pos: BTreeMap<String, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.task_id.clone(), i))
        .collect();
    let mut state = vec![0u8; tasks.len()];
    let mut order = Vec::with_capacity(tasks.len());
    for start in 0..tasks.len() {
        if state[start] != 0 {
            continue;
        }
        let deps_of = |i: usize| -> Vec<usize> {
            tasks[i]
                .depends_on
                .iter()
                .rev()
                .filter_map(|d| pos.get(d).copied())
                .collect()
        };
        let mut path: Vec<(usize, Vec<usize>)> = vec![(start, deps_of(start))];
        state[start] = 1;
        while let Some((node, rest)) = path.last_mut() {
            let node = *node;
            match rest.pop() {
                None => {
                    state[node] = 2;
                    order.push(node);
                    path.pop();
                }
                Some(next) => match state[next] {
                    1 => {
                        let from = path.iter().position(|(n, _)| *n == next).unwrap_or(0);
                        let mut cycle: Vec<&str> = path[from..]
                            .iter()
                            .map(|(n, _)| tasks[*n].task_id.as_str())
                            .collect();
                        cycle.push(tasks[next].task_id.as_str());
                        return Err(format!(
                            "dependency cycle: {} (no task of it could ever start); remove one of these depends_on entries",
                            cycle.join(" -> ")
                        ));
                    }
                    2 => {}
                    _ => {
                        state[next] = 1;
                        let d = deps_of(next);
                        path.push((next, d));
                    }
                },
            }
        }
    }
    let mut slots: Vec<Option<Task>> = tasks.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

/// Reads a task file: one task object or an array. Errors name the task
/// (position and id) and the field.
pub fn tasks_from_json(bytes: &[u8]) -> Result<Vec<Task>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let items = match v {
        serde_json::Value::Array(items) => items,
        obj @ serde_json::Value::Object(_) => vec![obj],
        _ => return Err("expected a task object or an array of tasks".into()),
    };
    let mut tasks = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let name = match item.get("task_id").and_then(|t| t.as_str()) {
            Some(id) => format!("task #{} ({id})", i + 1),
            None => format!("task #{}", i + 1),
        };
        let task: Task = serde_path_to_error::deserialize(item).map_err(|e| {
            let path = e.path().to_string();
            if path == "." || path.is_empty() {
                format!("{name}: {}", e.inner())
            } else {
                format!("{name}: field {path}: {}", e.inner())
            }
        })?;
        tasks.push(task);
    }
    Ok(tasks)
}
