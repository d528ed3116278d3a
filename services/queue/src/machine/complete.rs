//! Completion and retry: an outcome delivered, a failed attempt retried or
//! blocked, spending, questions and answers, the operator's retry and cancel.

use super::*;

impl Machine {
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
                            Some(k) => {
                                Err(super::manager::BadManagerReply::KeepsUnknown(k.clone()))
                            }
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
        // The completion's line shows the supervisor state it moved.
        let stored = report.clone();
        c.merge(self.task_and_status_change(
            EventName::TaskComplete,
            id,
            Some(report.clone()),
            |r| {
                r.state = TaskState::Completed;
                r.lease = None;
                r.mark = None;
                r.report = Some(stored);
                r.reason = None;
                r.updated_at = now;
            },
            |s| {
                s.iteration += 1;
                s.completed_total += 1;
                s.last_task_id = Some(id.to_string());
                s.last_validation_report = Some(report);
            },
        ));
        c.status = true;
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
    pub(super) fn fail_attempt(
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

    /// Keeps what a completed task changed on its branch (worktree
    /// isolation) on its record; `c` already holds the record's change.
    /// The record as it now is.
    pub fn attach_diff(
        &mut self,
        id: &str,
        diff: xo_proto::queue::TaskDiff,
        c: &Changes,
    ) -> Option<TaskRecord> {
        let r = self.tasks.get_mut(id)?;
        if r.state == TaskState::Completed && c.tasks.contains(id) {
            r.diff = Some(diff);
        }
        Some(r.clone())
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
    pub(super) fn stopped(&mut self, id: &str, cause: BlockCause, reason: &str) -> Changes {
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

    pub(super) fn check_goal_budget(&mut self) -> Changes {
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
}
