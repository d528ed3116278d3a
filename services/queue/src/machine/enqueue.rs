//! Enqueue: roles, dependencies and their order, task validation, and the
//! cleanup lane's cap and age.

use super::*;

impl Machine {
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

    pub(super) fn insert(
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
                diff: None,
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
                before: Default::default(),
                after: self.seed_state(Some(&id)),
                report: None,
                exchange: None,
            }],
            ..Default::default()
        }
    }

    /// Pending cleanup tasks, found by range in the ready index (not a scan).
    pub(super) fn pending_cleanup(&self) -> impl Iterator<Item = &TaskRecord> + '_ {
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
    pub(super) fn cap_cleanup(&mut self) -> Changes {
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
    pub(super) fn age_cleanup(&mut self, now: u64) -> Changes {
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
