//! Claims and leases: who may take what next, lease renewal and expiry,
//! and the interrupts that ask a lower lane to yield to a critical task.

use super::*;

impl Machine {
    pub(super) fn deps_done(&self, t: &TaskRecord) -> bool {
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

    pub(super) fn holder(&self, id: &str, token: &str) -> OpResult<&TaskRecord> {
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

    /// SUP-6: a lease not renewed for `lease_ms` is stale; the task is
    /// offered again (attempt + 1 on the next claim), marked `resume` if the
    /// holder had checkpointed, else `rollback_replay`. Silence counts from
    /// `heard_from` at the earliest: the queue's own return to the bus
    /// after an outage (0: never lost), when renewals could arrive again.
    pub fn expire_leases(&mut self, now: u64, heard_from: u64) -> Changes {
        let stale: Vec<(String, bool)> = self
            .running
            .iter()
            .filter_map(|id| self.tasks.get(id))
            .filter_map(|t| match (&t.state, &t.lease) {
                (TaskState::Running, Some(l))
                    if xo_bus::hearing::silent(l.renewed_at, heard_from, now) >= self.lease_ms =>
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
        if self.status.status != RunStatus::Running || self.running.is_empty() {
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
                if let Some(s) = a.after.seed_mut() {
                    s.interrupt = Some(cid.clone());
                }
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
            if let Some(s) = a.after.seed_mut() {
                s.yielded_to = Some(to.clone());
                s.note = Some(note.to_string());
            }
        }
        let r = self.tasks.get(id).cloned().ok_or_else(|| not_found(id))?;
        Ok((r, c))
    }
}
