//! The queue's state machine, pure: no I/O, time passed in. Every operation
//! returns what changed (task keys, status, audit drafts, events) so the
//! actor can persist it before it answers.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use xo_proto::control::{ErrorCode, ServiceError};
use xo_proto::queue::{
    EventName, ExecutionMode, Goal, HALT_TASK_BLOCKED, Lane, Lease, ManagerReply, QueueStatus,
    REPLY_STATUSES, ReplayMark, RunStatus, TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE, Task, TaskRecord,
    TaskState, ValidationReport,
};

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
}

/// What an operation changed.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Changes {
    pub tasks: BTreeSet<String>,
    pub status: bool,
    /// The operator settings changed.
    pub settings: bool,
    pub audit: Vec<AuditDraft>,
}

impl Changes {
    pub fn merge(&mut self, other: Changes) {
        self.tasks.extend(other.tasks);
        self.status |= other.status;
        self.settings |= other.settings;
        self.audit.extend(other.audit);
    }
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty() && !self.status && !self.settings && self.audit.is_empty()
    }
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
    next_seq: u64,
    next_token: u64,
    /// Pending tasks by role, in serving order: claims do not scan the queue.
    ready: BTreeMap<String, BTreeSet<ReadyKey>>,
    /// Pending, running and awaiting tasks.
    open: usize,
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
        Some(r) => json!({"state": r.state, "attempt": r.attempt, "retries": r.retries}),
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
            self.tasks.insert(id.clone(), t);
            self.index(&id, true);
        }
    }

    /// Adds (`on`) or removes a task's entries in the indexes.
    fn index(&mut self, id: &str, on: bool) {
        let Some(r) = self.tasks.get(id) else { return };
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
    }

    /// Changes a task, keeping the indexes right.
    fn mutate(&mut self, id: &str, f: impl FnOnce(&mut TaskRecord)) {
        self.index(id, false);
        if let Some(r) = self.tasks.get_mut(id) {
            f(r);
        }
        self.index(id, true);
    }

    fn status_snapshot(&self) -> serde_json::Value {
        json!({"status": self.status.status, "halt_reason": self.status.halt_reason, "iteration": self.status.iteration})
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
        let before = self.status_snapshot();
        f(&mut self.status);
        Changes {
            status: true,
            audit: vec![AuditDraft {
                event,
                task_id: None,
                before,
                after: self.status_snapshot(),
                report: None,
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
        let before = task_snapshot(self.tasks.get(id));
        self.mutate(id, f);
        Changes {
            tasks: [id.to_string()].into(),
            status: false,
            settings: false,
            audit: vec![AuditDraft {
                event,
                task_id: Some(id.to_string()),
                before,
                after: task_snapshot(self.tasks.get(id)),
                report,
            }],
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
        self.ready.clear();
        self.open = 0;
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
        Ok(self.status_change(EventName::GoalSet, |s| s.goal = goal))
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

    pub fn enqueue(&mut self, tasks: Vec<Task>, now: u64) -> OpResult<(Vec<String>, Changes)> {
        self.require_init()?;
        self.validate(&tasks)?;
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
                updated_at: now,
            },
        );
        self.index(&id, true);
        Changes {
            tasks: [id.clone()].into(),
            status: false,
            settings: false,
            audit: vec![AuditDraft {
                event,
                task_id: Some(id.clone()),
                before: serde_json::Value::Null,
                after: task_snapshot(self.tasks.get(&id)),
                report: None,
            }],
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
            c.merge(self.task_change(EventName::TaskCancelled, &id, None, |r| {
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
            c.merge(self.task_change(EventName::TaskCancelled, &id, None, |r| {
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
    /// enqueue order.
    pub fn next_for(&self, role: &str) -> Option<String> {
        self.ready
            .get(role)?
            .iter()
            .map(|k| &k.3)
            .find(|id| self.tasks.get(*id).is_some_and(|t| self.deps_done(t)))
            .cloned()
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
        if self.status.status != RunStatus::Running {
            return Ok((None, Changes::default()));
        }
        if self.status.mode == ExecutionMode::Manual && self.status.steps == 0 {
            return Ok((None, Changes::default()));
        }
        let Some(id) = self.next_for(role) else {
            return Ok((None, self.check_exhausted()));
        };
        self.next_token += 1;
        let token = format!("{now:x}-{:x}", self.next_token);
        let lease = Lease {
            claimant: claimant.to_string(),
            token: token.clone(),
            renewed_at: now,
            checkpoint: false,
        };
        let mut c = self.task_change(EventName::TaskStart, &id, None, |r| {
            r.state = TaskState::Running;
            r.attempt += 1;
            r.lease = Some(lease);
            r.priority = false;
            r.updated_at = now;
        });
        if self.status.mode == ExecutionMode::Manual {
            self.status.steps -= 1;
            c.status = true;
        }
        let rec = self.tasks.get(&id).cloned().ok_or_else(|| not_found(&id))?;
        Ok((Some((rec, token)), c))
    }

    fn holder(&self, id: &str, token: &str) -> OpResult<&TaskRecord> {
        let r = self.tasks.get(id).ok_or_else(|| not_found(id))?;
        match (&r.state, &r.lease) {
            (TaskState::Running, Some(l)) if l.token == token => Ok(r),
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
            && r.completed_token.as_deref() == Some(token)
        {
            return Ok((r.clone(), Changes::default()));
        }
        let rec = self.holder(id, token)?.clone();
        let mut c = Changes::default();
        let manager = rec.task.role == MANAGER_ROLE;
        let reply = if manager {
            match parse_manager_reply(manager_reply.as_ref(), &self.roles) {
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
        if let Some(reply) = reply {
            c.merge(self.reconcile(reply, now));
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
                            "Task {id} is done. Reconcile the task list: reply with status, message, next_task and the tasks still to do."
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
                r.updated_at = now;
            });
            c.merge(self.status_change(EventName::Halt, |s| {
                s.status = RunStatus::Halted;
                s.halt_reason = Some(format!("{HALT_TASK_BLOCKED}: {id}: {reason}"));
            }));
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
    fn reconcile(&mut self, reply: ManagerReply, now: u64) -> Changes {
        let mut c = Changes::default();
        let listed: BTreeSet<String> = reply.tasks.iter().map(|t| t.task_id.clone()).collect();
        let stale: Vec<String> = self
            .tasks
            .values()
            .filter(|t| {
                t.state == TaskState::Pending
                    && t.task.role != MANAGER_ROLE
                    && !listed.contains(&t.task.task_id)
            })
            .map(|t| t.task.task_id.clone())
            .collect();
        for id in stale {
            c.merge(self.task_change(EventName::TaskCancelled, &id, None, |r| {
                r.state = TaskState::Cancelled;
                r.reason = Some("dropped by the Manager's reconciliation".into());
                r.updated_at = now;
            }));
        }
        for t in reply.tasks {
            match self.tasks.get(&t.task_id).map(|r| r.state) {
                None => c.merge(self.insert(t, now, false, None)),
                Some(TaskState::Pending) => {
                    let id = t.task_id.clone();
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
            after: json!({"message": reply.message, "status": reply.status}),
            report: None,
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
            self.status_change(EventName::Halt, |s| {
                s.status = RunStatus::Halted;
                s.halt_reason = Some(TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE.into());
            })
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
        self.holder(id, token)?;
        let mut c;
        if let Some(q) = question {
            c = self.task_change(EventName::TaskAwaitingResponse, id, None, |r| {
                r.state = TaskState::AwaitingResponse;
                r.lease = None;
                r.question = Some(q);
                r.reason = Some(reason);
                r.updated_at = now;
            });
        } else {
            c = self.task_change(EventName::TaskBlocked, id, None, |r| {
                r.state = TaskState::Blocked;
                r.lease = None;
                r.reason = Some(reason.clone());
                r.updated_at = now;
            });
            c.merge(self.status_change(EventName::Halt, |s| {
                s.status = RunStatus::Halted;
                s.halt_reason = Some(format!("{HALT_TASK_BLOCKED}: {id}: {reason}"));
            }));
        }
        let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
        Ok((r, c))
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
        let c = self.task_change(EventName::TaskRetry, id, None, |r| {
            r.state = TaskState::Pending;
            r.retries = 0;
            r.priority = true;
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
                r.updated_at = now;
            }));
        }
        c
    }
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
) -> Result<ManagerReply, String> {
    let v = v.ok_or("no manager_reply")?;
    let reply: ManagerReply = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
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
