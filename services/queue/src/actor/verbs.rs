//! The queue actor's verbs with more than a few lines each: one method a
//! verb, called from [`super::State::api`]'s match. Each returns whether
//! waiting claims should be looked at again (a change that may have made a
//! task claimable).

use xo_proto::queue::{
    AuditCheck, AuditEvent, AuditTail, AuditVerify, Block, Claim, Claimed, Complete, Enqueue,
    GetStatus, Heartbeat, ListTasks, RecordKnowledgeReview, RecordOperatorAction, Renewed,
    TaskRecord, Withdraw, Yield,
};
use xo_proto::settings::PutSettings;

use super::*;

impl State {
    pub(super) fn enqueue(&mut self, q: Enqueue, reply: Reply<Vec<String>>, now: u64) -> bool {
        // A mode the runners' driver cannot pass on is refused
        // whole, naming the task and the driver.
        let driver = &self.ctx.cfg.runner.driver;
        let refused = q.tasks.iter().find_map(|t| {
            let mode = t.agent_mode.as_deref()?;
            driver.honours_mode(mode).err().map(|why| {
                format!(
                    "task {}: agent_mode {mode:?} cannot reach its agent: {why}",
                    t.task_id
                )
            })
        });
        if let Some(why) = refused {
            self.answer(
                Changes::default(),
                reply,
                Err(ServiceError::new(ErrorCode::Invalid, why)),
            );
            return false;
        }
        let r = Changes::signed(self.m.enqueue(q.tasks, now), &q.by);
        self.result(r, reply);
        true
    }

    pub(super) fn claim(&mut self, q: Claim, reply: Reply<Option<Claimed>>, now: u64) -> bool {
        self.forget_earlier_claims(&q.claimant);
        match self.m.claim(&q.role, &q.claimant, now) {
            Ok((Some((rec, token)), c)) => {
                let v = self.claimed(rec, token);
                self.answer(c, reply, Ok(Some(v)));
            }
            Ok((None, c)) if q.wait_ms > 0 => {
                if !c.is_empty() {
                    self.commit(c, None);
                }
                self.waiters.push_back(Waiter {
                    deadline: now + q.wait_ms,
                    role: q.role,
                    claimant: q.claimant,
                    reply,
                });
                return false;
            }
            Ok((None, c)) => self.answer(c, reply, Ok(None)),
            Err(e) => self.answer(Changes::default(), reply, Err(e)),
        }
        true
    }

    /// One claim waits per claimant (a runner's unit claims, works, then
    /// claims again): a claimant that asks again has given up the claim it
    /// left waiting (its call timed out, or its runner restarted), and a
    /// task handed to that claim would sit leased to nobody until its
    /// lease ran out. That claim is answered with nothing.
    fn forget_earlier_claims(&mut self, claimant: &str) -> u64 {
        if claimant.is_empty() || !self.waiters.iter().any(|w| w.claimant == claimant) {
            return 0;
        }
        let (earlier, others) =
            std::mem::take(&mut self.waiters)
                .into_iter()
                .partition::<std::collections::VecDeque<_>, _>(|w| w.claimant == claimant);
        self.waiters = others;
        let n = earlier.len() as u64;
        for w in earlier {
            tracing::debug!(
                claimant,
                "an earlier waiting claim of this claimant given up"
            );
            self.answer(Changes::default(), w.reply, Ok(None));
        }
        n
    }

    /// A claimant's waiting claims given up at its word (a runner shutting
    /// down): answered with nothing; the next task waits for a claim from a
    /// runner that is there.
    pub(super) fn withdraw(&mut self, q: Withdraw, reply: Reply<u64>) -> bool {
        let n = self.forget_earlier_claims(&q.claimant);
        if n > 0 {
            info!(claimant = %q.claimant, "waiting claim withdrawn");
        }
        self.answer(Changes::default(), reply, Ok(n));
        false
    }

    pub(super) fn heartbeat(&mut self, q: Heartbeat, reply: Reply<Renewed>, now: u64) -> bool {
        let Ok(reply) = self.holds(&q.task_id, &q.token, &q.claimant, now, reply) else {
            return false;
        };
        let spent = self.m.spend(&q.task_id, &q.token, q.usage, false);
        let r = self
            .m
            .heartbeat(&q.task_id, &q.token, q.checkpoint, now)
            .map(|(record, mut c)| {
                c.merge(spent);
                let renewed = Renewed {
                    record,
                    status: self.m.status.status,
                    halt_reason: self.m.status.halt_reason.clone(),
                };
                (renewed, c)
            });
        self.result(r, reply);
        false
    }

    pub(super) fn complete(&mut self, q: Complete, reply: Reply<TaskRecord>, now: u64) -> bool {
        let Ok(reply) = self.holds(&q.task_id, &q.token, &q.claimant, now, reply) else {
            return false;
        };
        let spent = self.m.spend(&q.task_id, &q.token, q.usage, true);
        let exchange = q.exchange;
        let diff = q.diff;
        let r = self
            .m
            .complete(&q.task_id, &q.token, q.report, q.manager_reply, now)
            .map(|(mut rec, mut c)| {
                if let Some(e) = exchange {
                    Machine::attach_exchange(&q.task_id, e, &mut c);
                }
                if let Some(d) = diff
                    && let Some(r) = self.m.attach_diff(&q.task_id, d, &c)
                {
                    rec = r;
                }
                c.merge(spent);
                (rec, c)
            });
        if let Err(e) = &r {
            warn!(task = %q.task_id, error = %e, "completion refused");
        }
        self.result(r, reply);
        true
    }

    pub(super) fn block(&mut self, q: Block, reply: Reply<TaskRecord>, now: u64) -> bool {
        let Ok(reply) = self.holds(&q.task_id, &q.token, &q.claimant, now, reply) else {
            return false;
        };
        let spent = self.m.spend(&q.task_id, &q.token, q.usage, true);
        let (report, exchange) = (q.report, q.exchange);
        let r = self
            .m
            .block_for(&q.task_id, &q.token, q.reason, q.question, q.cause, now)
            .map(|(mut rec, mut c)| {
                if let Some(e) = exchange {
                    Machine::attach_exchange(&q.task_id, e, &mut c);
                }
                if let Some(report) = report {
                    rec = self
                        .m
                        .attach_report(&q.task_id, report, &mut c)
                        .unwrap_or(rec);
                }
                c.merge(spent);
                (rec, c)
            });
        self.result(r, reply);
        true
    }

    pub(super) fn yield_task(&mut self, q: Yield, reply: Reply<TaskRecord>, now: u64) -> bool {
        let Ok(reply) = self.holds(&q.task_id, &q.token, &q.claimant, now, reply) else {
            return false;
        };
        let spent = self.m.spend(&q.task_id, &q.token, q.usage, true);
        let r = self
            .m
            .yield_task(&q.task_id, &q.token, q.checkpoint, &q.note, now)
            .map(|(rec, mut c)| {
                c.merge(spent);
                (rec, c)
            });
        if r.is_ok() {
            info!(task = %q.task_id, claimant = %q.claimant, "task yielded to a critical task");
        }
        self.result(r, reply);
        true
    }

    pub(super) fn status_now(&mut self, _q: GetStatus, reply: Reply<QueueStatus>) -> bool {
        let mut s = self.m.status();
        s.waiting_claims = self.waiters.iter().map(|w| w.claimant.clone()).collect();
        // Writes failing: answered now, saying so, not behind them.
        if let Some(f) = self.failing() {
            s.writes_failing = Some(f.note());
            let _ = reply.send(Ok(s));
        } else {
            self.answer(Changes::default(), reply, Ok(s));
        }
        false
    }

    pub(super) fn list_tasks(&mut self, q: ListTasks, reply: Reply<Vec<TaskRecord>>) -> bool {
        let list = match &q.task_id {
            Some(id) => self.m.tasks.get(id).cloned().into_iter().collect(),
            None => {
                let limit = if q.limit == 0 {
                    ListTasks::PAGE
                } else {
                    q.limit
                };
                // Half the message limit: the envelope and MessagePack
                // vs JSON sizes leave room.
                let max = self.ctx.cfg.wire.max_payload / 2;
                self.m.page(q.state, q.after_seq, limit, max)
            }
        };
        if self.failing().is_some() {
            let _ = reply.send(Ok(list));
        } else {
            self.answer(Changes::default(), reply, Ok(list));
        }
        false
    }

    pub(super) fn audit_tail(&mut self, q: AuditTail, reply: Reply<Vec<AuditEvent>>) -> bool {
        let project = q.project.unwrap_or_else(|| self.project());
        let lines = q.lines.unwrap_or(100).min(MAX_TAIL);
        let path = self.audit_file(&project);
        // Read off the actor: after the commits handed over so far.
        self.after_commits(move || {
            tokio::task::spawn_blocking(move || {
                let _ = reply.send(audit::tail(&path, lines).map_err(|e| {
                    ServiceError::new(
                        ErrorCode::Internal,
                        format!("reading {}: {e}", path.display()),
                    )
                }));
            });
        });
        false
    }

    pub(super) fn audit_verify(&mut self, q: AuditVerify, reply: Reply<AuditCheck>) -> bool {
        let project = q.project.unwrap_or_else(|| self.project());
        let ctx = self.ctx.clone();
        self.after_commits(move || {
            tokio::spawn(async move {
                let dir = ctx.cfg.data_dir();
                let r = audit::check(&ctx.store, &dir, &project).await.map_err(|e| {
                    ServiceError::new(
                        ErrorCode::Internal,
                        format!("reading {}: {e}", audit::file_for(&dir, &project).display()),
                    )
                });
                let _ = reply.send(r);
            });
        });
        false
    }

    pub(super) fn knowledge_reviewed(
        &mut self,
        q: RecordKnowledgeReview,
        reply: Reply<()>,
    ) -> bool {
        let mut after = q.after;
        if let Some(o) = after.as_object_mut() {
            o.insert(
                "decision".into(),
                (if q.accepted { "accepted" } else { "rejected" }).into(),
            );
            o.insert("by".into(), q.by.into());
            o.insert("note".into(), q.note.into());
        }
        let mut before = q.before;
        if let Some(o) = before.as_object_mut() {
            o.insert("doc".into(), q.doc.clone().into());
        }
        info!(doc = %q.doc, accepted = q.accepted, "knowledge review decision audited");
        let c = audit_only(EventName::KnowledgeReviewed, before, after);
        self.answer(c, reply, Ok(()));
        false
    }

    pub(super) fn operator_action(&mut self, q: RecordOperatorAction, reply: Reply<()>) -> bool {
        let event = match q.action.as_str() {
            "steer" => EventName::OperatorSteering,
            "ack" => EventName::UnitAcknowledged,
            other => {
                let e = ServiceError::new(
                    ErrorCode::Invalid,
                    format!("operator action {other:?}: steer or ack"),
                );
                self.answer(Changes::default(), reply, Err(e));
                return false;
            }
        };
        let mut after = serde_json::json!({"unit": q.unit, "by": q.by});
        if let (Some(o), Some(d)) = (after.as_object_mut(), q.detail.as_object()) {
            o.extend(d.clone());
        }
        info!(unit = %q.unit, action = %q.action, by = %q.by, "operator action audited");
        let c = audit_only(event, serde_json::json!({"unit": q.unit}), after);
        self.answer(c, reply, Ok(()));
        false
    }

    pub(super) fn settings_put(
        &mut self,
        q: PutSettings,
        reply: Reply<SettingsView>,
        now: u64,
    ) -> bool {
        match self.put_settings(q, now) {
            Ok((c, event)) => {
                let v = self.settings_view();
                let (bus, subject, format) = (
                    self.ctx.bus.clone(),
                    self.ctx.subjects.settings_event(),
                    self.ctx.cfg.wire.format,
                );
                self.commit(
                            c,
                            Some(Box::new(move || {
                                let _ = reply.send(Ok(v));
                                // Durable now: tell the services.
                                tokio::spawn(async move {
                                    if let Err(e) = typed::publish(&bus, &subject, &event, format).await {
                                        warn!(error = %e, "settings change not published; services see it at their next claim or start");
                                    }
                                });
                            })),
                        );
            }
            Err(e) => self.answer(Changes::default(), reply, Err(e)),
        }
        false
    }
}
