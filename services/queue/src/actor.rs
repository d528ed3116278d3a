//! One actor owns the state machine. Every request is applied in memory and
//! handed to the committer with its reply, so replies go out in order and
//! only once durable. Claims that find nothing may wait (long-poll).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::mpsc;
use tracing::{error, info, warn};
use xo_bus::api::{ActorPorts, Port};
use xo_bus::typed;
use xo_proto::alert::Alert;
use xo_proto::control::{ErrorCode, ServiceError};
use xo_proto::queue::{
    Claimed, EventName, Interrupt, QueueApi, QueueStatus, TaskEvent, TaskRecord, TaskState,
};
use xo_proto::settings::{PutSettings, Settings, SettingsChanged, SettingsView};

use crate::audit;
use crate::commit::Commit;
use crate::machine::{AuditDraft, Changes, Machine};
use crate::refusals::Refusals;
use crate::{BUCKET, Ctx, QueueError, QueueResult};

mod verbs;

type Reply<T> = Port<T>;

/// The queue actor's messages: its control API (each variant carries the
/// proto request and its reply port) and the clock.
pub enum QueueMsg {
    /// Boxed: a completion carries its whole validation report.
    Api(Box<QueueApi<ActorPorts>>),
    /// Expire leases and waiting claims at `now`; answered when done.
    Tick(u64, Option<RpcReplyPort<()>>),
}

impl From<QueueApi<ActorPorts>> for QueueMsg {
    fn from(a: QueueApi<ActorPorts>) -> Self {
        QueueMsg::Api(Box::new(a))
    }
}

#[derive(Debug, Clone)]
pub struct QueueActor;

pub struct Args {
    pub ctx: Arc<Ctx>,
    pub machine: Machine,
    pub commits: mpsc::UnboundedSender<Commit>,
}

struct Waiter {
    role: String,
    claimant: String,
    deadline: u64,
    reply: Reply<Option<Claimed>>,
}

pub struct State {
    ctx: Arc<Ctx>,
    m: Machine,
    commits: mpsc::UnboundedSender<Commit>,
    waiters: VecDeque<Waiter>,
    /// The active directives as claims carry them; `None` after a change
    /// to a directive's task (rebuilt on the next claim, not per claim).
    directives: std::sync::OnceLock<Vec<String>>,
    /// When the queue last looked for stuck work (once a second at most).
    stuck_checked: u64,
    /// Requests on leases they do not hold, by claimant.
    refusals: Refusals,
    /// A change of this message could not be encoded (see `unwritable`).
    failed: Option<QueueError>,
    /// Since when the queue has heard the bus without a break: a lease's
    /// silence counts from then. Before, every lease expired during the
    /// queue's own outage of the bus, and the work done meanwhile was
    /// refused when it came back.
    hearing: xo_bus::Hearing,
}

fn task_key(id: &str) -> String {
    format!("task.{id}")
}

/// A record as the store keeps it.
fn encode<T: serde::Serialize>(key: &str, value: &T) -> Result<Bytes, QueueError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| QueueError::Encode {
            key: key.to_string(),
            source: e,
        })
}
use xo_proto::names::{
    QUEUE_CORRUPT_STATUS_KEY as CORRUPT_STATUS_KEY, QUEUE_GOOD_STATUS_KEY as GOOD_STATUS_KEY,
    QUEUE_STATUS_KEY as STATUS_KEY,
};
/// The operator settings' key in the queue's bucket.
const SETTINGS_KEY: &str = "settings";
/// Most audit lines one `audit_tail` returns.
const MAX_TAIL: usize = 10_000;

/// Loads the machine from the store. An unreadable record is reported (by
/// key) in the status and left untouched; it never stops the queue. A
/// status that does not decode is recovered from the last good one (kept
/// at every start), and kept aside under `status.corrupt`.
pub async fn load(ctx: &Ctx) -> QueueResult<Machine> {
    let q = &ctx.cfg.queue;
    let mut m =
        Machine::new(q.lease_ms, ctx.cfg.task_roles()).with_policy(crate::machine::Policy {
            halt_on: q.halt_on.iter().copied().collect(),
            default_role: q.default_role.clone(),
            phase_roles: q.phase_roles.clone(),
            stale_after_ms: ctx.cfg.supervisor.stale_after_ms,
            goal_budget_usd: q.goal_budget_usd,
        });
    let keys = ctx.store.keys(BUCKET).await?;
    let mut status = None;
    let mut status_bytes = None;
    let mut bad_status = None;
    let mut settings = None;
    let mut tasks = Vec::new();
    let mut corrupt = Vec::new();
    for key in keys {
        let Some(entry) = ctx.store.get(BUCKET, &key).await? else {
            continue;
        };
        let res = if key == crate::LEADER_KEY || key == GOOD_STATUS_KEY || key == CORRUPT_STATUS_KEY
        {
            // The active instance's lease, and the status's copies: not
            // queue state.
            continue;
        } else if key == STATUS_KEY {
            match serde_json::from_slice::<QueueStatus>(&entry.value) {
                Ok(s) => {
                    status = Some(s);
                    status_bytes = Some(entry.value.clone());
                }
                Err(e) => bad_status = Some((e, entry.value.clone())),
            }
            Ok(())
        } else if key == SETTINGS_KEY {
            serde_json::from_slice::<Settings>(&entry.value).map(|s| settings = Some(s))
        } else {
            serde_json::from_slice::<TaskRecord>(&entry.value).map(|t| tasks.push(t))
        };
        if let Err(e) = res {
            error!(bucket = BUCKET, key = %key, error = %e, "corrupt queue record left untouched");
            corrupt.push(format!("{BUCKET}/{key}: {e}"));
        }
    }
    if let Some(bytes) = status_bytes {
        // This start's good revision, for a later start that cannot read
        // the status.
        ctx.store.put(BUCKET, GOOD_STATUS_KEY, bytes).await?;
    } else if let Some((e, bytes)) = bad_status {
        let (recovered, note) = recover_status(ctx, &e).await?;
        status = recovered;
        ctx.store.put(BUCKET, CORRUPT_STATUS_KEY, bytes).await?;
        error!(bucket = BUCKET, key = STATUS_KEY, error = %e, recovered = %note, kept = CORRUPT_STATUS_KEY, "the queue's status does not decode");
        corrupt.push(format!(
            "{BUCKET}/{STATUS_KEY}: {e}; {note}; the unreadable status is kept under {BUCKET}/{CORRUPT_STATUS_KEY}"
        ));
    }
    let n = tasks.len();
    m.restore(status, tasks);
    m.settings = settings.unwrap_or_default();
    m.status.corrupt = corrupt;
    if n > 0 {
        info!(tasks = n, "queue state restored from the store");
    }
    Ok(m)
}

/// The status kept at the last start, if it decodes, and what the
/// operator is told about it.
async fn recover_status(
    ctx: &Ctx,
    why: &serde_json::Error,
) -> QueueResult<(Option<QueueStatus>, String)> {
    let good = ctx.store.get(BUCKET, GOOD_STATUS_KEY).await?;
    Ok(
        match good.map(|g| serde_json::from_slice::<QueueStatus>(&g.value)) {
            Some(Ok(s)) => {
                let note = format!(
                    "recovered from the last good revision (written {}, kept at the queue's last start): changes to the status since then (the goal's spend, the iteration) are lost, the tasks are not",
                    if s.last_updated.is_empty() { "at an unknown time" } else { s.last_updated.as_str() }
                );
                (Some(s), note)
            }
            Some(Err(e)) => (
                None,
                format!("the last good revision does not decode either ({e}): the queue starts uninitialised; set the goal again with `xo init --force` after reading the kept status (why it failed: {why})"),
            ),
            None => (
                None,
                "no good revision is kept (the queue never started with a readable status): the queue starts uninitialised; set the goal again with `xo init --force`".to_string(),
            ),
        },
    )
}

impl State {
    fn project(&self) -> String {
        self.m
            .status
            .goal
            .project_id
            .clone()
            .unwrap_or_else(|| "default".into())
    }

    /// Hands a change and its reply to the committer.
    fn commit(&mut self, mut changes: Changes, reply: Option<Box<dyn FnOnce() + Send>>) {
        let mut writes = Vec::new();
        for id in &changes.tasks {
            let value = match self.m.tasks.get(id) {
                Some(r) => {
                    if r.task.directive.is_some() {
                        self.directives.take();
                    }
                    match encode(&task_key(id), r) {
                        Ok(v) => v,
                        Err(e) => return self.unwritable(e),
                    }
                }
                None => {
                    // Dropped (a forced init): it may have been a directive.
                    self.directives.take();
                    continue;
                }
            };
            writes.push((task_key(id), value));
        }
        if changes.status {
            if !changes.stamped {
                self.stamp(&mut changes);
            }
            let mut s = self.m.status.clone();
            s.corrupt.clear();
            match encode(STATUS_KEY, &s) {
                Ok(v) => writes.push((STATUS_KEY.to_string(), v)),
                Err(e) => return self.unwritable(e),
            }
        }
        if changes.settings {
            match encode(SETTINGS_KEY, &self.m.settings) {
                Ok(v) => writes.push((SETTINGS_KEY.to_string(), v)),
                Err(e) => return self.unwritable(e),
            }
        }
        let now = self.ctx.clock.now_ms();
        let events = changes
            .audit
            .iter()
            .filter_map(|d| {
                let id = d.task_id.as_ref()?;
                let r = self.m.tasks.get(id)?;
                Some(TaskEvent {
                    v: xo_proto::PROTOCOL_VERSION,
                    task_id: id.clone(),
                    event: d.event,
                    state: r.state,
                    attempt: r.attempt,
                    at: now,
                })
            })
            .collect();
        let project = self.project();
        let alerts = changes
            .alerts
            .into_iter()
            .map(|a| Alert {
                v: xo_proto::PROTOCOL_VERSION,
                kind: a.kind,
                title: a.title,
                detail: a.detail,
                task_id: a.task_id,
                project: Some(project.clone()),
                unit: None,
                source: xo_proto::queue::QUEUE.into(),
                at: now,
            })
            .collect();
        // The holders of tasks asked to yield are told on their own subject.
        let interrupts = changes
            .audit
            .iter()
            .filter(|d| d.event == EventName::TaskInterrupted)
            .filter_map(|d| {
                let r = self.m.tasks.get(d.task_id.as_ref()?)?;
                Some((
                    r.lease.as_ref()?.claimant.clone(),
                    Interrupt {
                        v: xo_proto::PROTOCOL_VERSION,
                        task_id: r.task.task_id.clone(),
                        attempt: r.attempt,
                        critical: r.interrupt.clone()?,
                        at: now,
                    },
                ))
            })
            .collect();
        let stuck = changes
            .audit
            .iter()
            .any(|d| matches!(d.event, EventName::QueueStuck | EventName::QueueUnstuck))
            .then(|| self.m.status());
        let c = Commit {
            writes,
            audit: changes.audit,
            project,
            events,
            alerts,
            interrupts,
            stuck,
            reply,
        };
        if self.commits.send(c).is_err() {
            error!("queue committer gone; change not persisted");
        }
    }

    /// A change that cannot be encoded is not made: nothing of it is
    /// written, its reply port closes (the caller gets an error), and the
    /// actor fails after this message, so the tree restarts it from the
    /// store, where the change never happened.
    fn unwritable(&mut self, e: QueueError) {
        error!(error = %e, "queue change not encodable; not made (restarting from the store)");
        self.failed.get_or_insert(e);
    }

    fn answer<T: Send + 'static>(
        &mut self,
        changes: Changes,
        reply: Reply<T>,
        value: Result<T, ServiceError>,
    ) {
        self.commit(
            changes,
            Some(Box::new(move || {
                let _ = reply.send(value);
            })),
        );
    }

    fn result<T: Send + 'static>(
        &mut self,
        r: Result<(T, Changes), ServiceError>,
        reply: Reply<T>,
    ) {
        match r {
            Ok((v, c)) => self.answer(c, reply, Ok(v)),
            Err(e) => self.answer(Changes::default(), reply, Err(e)),
        }
    }

    /// Moves the status's `last_updated` to now (seed 003), and the audit
    /// lines of the change with it.
    fn stamp(&mut self, changes: &mut Changes) {
        self.m.status.last_updated = xo_runtime::clock::rfc3339(self.ctx.clock.now_ms());
        for d in &mut changes.audit {
            d.after.stamp(&self.m.status.last_updated);
        }
        changes.stamped = true;
    }

    fn with_status(&mut self, r: Result<Changes, ServiceError>, reply: Reply<QueueStatus>) {
        match r {
            Ok(mut c) => {
                // The reply carries the time the change is stored with.
                if c.status {
                    self.stamp(&mut c);
                }
                let s = self.m.status();
                self.answer(c, reply, Ok(s));
            }
            Err(e) => self.answer(Changes::default(), reply, Err(e)),
        }
    }

    /// A claim's answer carries what the runner composes the prompt from
    /// (goal, mode, active directives), so it asks the queue nothing else.
    fn claimed(&mut self, rec: TaskRecord, token: String) -> Claimed {
        let task_list = self.m.take_manager_list();
        Claimed {
            token,
            lease_ms: self.ctx.cfg.queue.lease_ms,
            goal: self.m.status.goal.clone(),
            mode: self.m.status.mode,
            directives: self
                .directives
                .get_or_init(|| self.active_directives())
                .clone(),
            settings: self.m.settings.clone(),
            task_list,
            record: rec,
        }
    }

    /// Directives pending or running, most urgent first, as the prompt lists them.
    fn active_directives(&self) -> Vec<String> {
        let mut active: Vec<&TaskRecord> = self
            .m
            .tasks
            .values()
            .filter(|r| r.task.directive.is_some())
            .filter(|r| matches!(r.state, TaskState::Pending | TaskState::Running))
            .collect();
        active.sort_by_key(|r| (r.task.lane, r.seq));
        active
            .iter()
            .map(|r| format!("[{}] {}", r.task.lane.as_str(), r.task.intent))
            .collect()
    }

    /// Passes `reply` back when the request holds `task_id`'s lease (or the
    /// task is not running: the machine says so); otherwise answers the
    /// refusal, counted and maybe alerted ([`Refusals`]).
    fn holds<T: Send + 'static>(
        &mut self,
        task_id: &str,
        token: &str,
        claimant: &str,
        now: u64,
        reply: Reply<T>,
    ) -> Result<Reply<T>, ()> {
        let lease = self.m.lease(task_id);
        match self.refusals.check(lease, task_id, token, claimant, now) {
            Ok(()) => Ok(reply),
            Err(refused) => {
                let mut c = Changes::default();
                c.alerts.extend(refused.alert);
                self.answer(c, reply, Err(refused.error));
                Err(())
            }
        }
    }

    /// Applies one control request; true if it may have made work
    /// available to waiting claimants.
    fn api(&mut self, api: QueueApi<ActorPorts>, now: u64) -> bool {
        match api {
            QueueApi::Init(q, reply) => {
                let r = self.m.init(q.mode, q.manager, q.force).map(|mut c| {
                    c.sign(&q.by);
                    c
                });
                self.with_status(r, reply);
            }
            QueueApi::SetGoal(q, reply) => {
                let r = self.m.set_goal(xo_proto::queue::Goal {
                    description: q.description,
                    project_id: q.project_id,
                    completed: q.completed,
                    budget_usd: q.budget_usd,
                });
                let r = r.map(|mut c| {
                    c.sign(&q.by);
                    c
                });
                self.with_status(r, reply);
            }
            QueueApi::Enqueue(q, reply) => return self.enqueue(q, reply, now),
            QueueApi::Claim(q, reply) => return self.claim(q, reply, now),
            QueueApi::Withdraw(q, reply) => return self.withdraw(q, reply),
            QueueApi::Heartbeat(q, reply) => return self.heartbeat(q, reply, now),
            QueueApi::Complete(q, reply) => return self.complete(q, reply, now),
            QueueApi::Block(q, reply) => return self.block(q, reply, now),
            QueueApi::Yield(q, reply) => return self.yield_task(q, reply, now),
            QueueApi::Answer(q, reply) => {
                let r = Changes::signed(self.m.answer(&q.task_id, q.text, now), &q.by);
                self.result(r, reply);
            }
            QueueApi::Halt(q, reply) => {
                let r = self.m.halt(q.reason).map(|mut c| {
                    c.sign(&q.by);
                    c
                });
                self.with_status(r, reply);
            }
            QueueApi::Resume(q, reply) => {
                let r = self.m.resume(EventName::Resume).map(|mut c| {
                    c.sign(&q.by);
                    c
                });
                self.with_status(r, reply);
            }
            QueueApi::Start(q, reply) => {
                let r = self.m.resume(EventName::Start).map(|mut c| {
                    c.sign(&q.by);
                    c
                });
                self.with_status(r, reply);
            }
            QueueApi::Step(_, reply) => {
                let r = self.m.step();
                self.with_status(r, reply);
            }
            QueueApi::Status(q, reply) => return self.status_now(q, reply),
            QueueApi::Tasks(q, reply) => return self.list_tasks(q, reply),
            QueueApi::Retry(q, reply) => {
                let r = Changes::signed(self.m.retry(&q.task_id, now), &q.by);
                self.result(r, reply);
            }
            QueueApi::Cancel(q, reply) => {
                let r = Changes::signed(self.m.cancel(&q.task_id, now), &q.by);
                self.result(r, reply);
            }
            QueueApi::AuditTail(q, reply) => return self.audit_tail(q, reply),
            QueueApi::AuditVerify(q, reply) => return self.audit_verify(q, reply),
            QueueApi::KnowledgeReviewed(q, reply) => return self.knowledge_reviewed(q, reply),
            QueueApi::OperatorAction(q, reply) => return self.operator_action(q, reply),
            QueueApi::Settings(_, reply) => {
                let v = self.settings_view();
                self.answer(Changes::default(), reply, Ok(v));
                return false;
            }
            QueueApi::PutSettings(q, reply) => return self.settings_put(q, reply, now),
        }
        true
    }

    fn audit_file(&self, project: &str) -> std::path::PathBuf {
        audit::file_for(&self.ctx.cfg.data_dir(), project)
    }

    /// Whether the committer's writes are failing now.
    fn failing(&self) -> Option<crate::commit::Failing> {
        self.ctx
            .failing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs `f` once every change handed to the committer so far is durable.
    fn after_commits(&mut self, f: impl FnOnce() + Send + 'static) {
        self.commit(Changes::default(), Some(Box::new(f)));
    }

    fn settings_view(&self) -> SettingsView {
        SettingsView {
            settings: self.m.settings.clone(),
            defaults: xo_runtime::settings::defaults(&self.ctx.cfg),
            keys: xo_runtime::settings::keys(),
        }
    }

    /// Checks and applies an operator's settings change: a new version,
    /// an audit line with the keys' values before and after.
    fn put_settings(
        &mut self,
        q: PutSettings,
        now: u64,
    ) -> Result<(Changes, SettingsChanged), ServiceError> {
        let cur = self.m.settings.clone();
        if let Some(base) = q.base_version
            && base != cur.version
        {
            return Err(ServiceError::new(
                ErrorCode::Invalid,
                format!(
                    "settings changed since version {base} (now {}): reload them and apply your change again",
                    cur.version
                ),
            ));
        }
        if q.set.is_empty() && q.unset.is_empty() {
            return Err(ServiceError::new(
                ErrorCode::Invalid,
                "settings_put: nothing to change (give `set` or `unset`)",
            ));
        }
        let values = xo_runtime::settings::change(&self.ctx.cfg, &cur, &q.set, &q.unset)
            .map_err(|e| ServiceError::new(ErrorCode::Invalid, format!("settings: {e}")))?;
        let changed: Vec<String> = q.set.keys().chain(q.unset.iter()).cloned().collect();
        let pick = |v: &std::collections::BTreeMap<String, serde_json::Value>| {
            serde_json::Value::Object(
                changed
                    .iter()
                    .map(|k| {
                        (
                            k.clone(),
                            v.get(k).cloned().unwrap_or(serde_json::Value::Null),
                        )
                    })
                    .collect(),
            )
        };
        let before = pick(&cur.values);
        let after = pick(&values);
        let by = if q.by.is_empty() {
            "operator".to_string()
        } else {
            q.by
        };
        self.m.settings = Settings {
            version: cur.version + 1,
            values,
            updated_at: now,
            updated_by: by.clone(),
        };
        info!(version = self.m.settings.version, by = %by, keys = ?changed, "operator settings changed");
        let c = Changes {
            settings: true,
            audit: vec![AuditDraft {
                event: EventName::SettingsChanged,
                task_id: None,
                before: serde_json::json!({"version": cur.version, "values": before}).into(),
                after: serde_json::json!({"version": self.m.settings.version, "values": after, "by": by})
                    .into(),
                report: None,
                exchange: None,
            }],
            ..Changes::default()
        };
        let event = SettingsChanged {
            v: xo_proto::PROTOCOL_VERSION,
            settings: self.m.settings.clone(),
            changed,
        };
        Ok((c, event))
    }

    /// Gives waiting claimants whatever became available; answers the
    /// expired ones with nothing.
    fn serve_waiters(&mut self, now: u64) {
        let mut still = VecDeque::new();
        while let Some(w) = self.waiters.pop_front() {
            if w.reply.is_closed() {
                continue;
            }
            match self.m.claim(&w.role, &w.claimant, now) {
                Ok((Some((rec, token)), c)) => {
                    let v = self.claimed(rec, token);
                    self.answer(c, w.reply, Ok(Some(v)));
                }
                Ok((None, c)) => {
                    if !c.is_empty() {
                        self.commit(c, None);
                    }
                    if now >= w.deadline {
                        self.answer(Changes::default(), w.reply, Ok(None));
                    } else {
                        still.push_back(w);
                    }
                }
                Err(e) => self.answer(Changes::default(), w.reply, Err(e)),
            }
        }
        self.waiters = still;
    }
}

impl Actor for QueueActor {
    type Msg = QueueMsg;
    type State = State;
    type Arguments = Args;

    async fn pre_start(
        &self,
        _me: ActorRef<QueueMsg>,
        args: Args,
    ) -> Result<State, ActorProcessingErr> {
        Ok(State {
            ctx: args.ctx,
            m: args.machine,
            commits: args.commits,
            waiters: VecDeque::new(),
            directives: std::sync::OnceLock::new(),
            stuck_checked: 0,
            refusals: Refusals::default(),
            failed: None,
            hearing: xo_bus::Hearing::new("leases"),
        })
    }

    async fn handle(
        &self,
        _me: ActorRef<QueueMsg>,
        msg: QueueMsg,
        st: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.clock.now_ms();
        let mut wake = false;
        let mut interrupt = false;
        match msg {
            QueueMsg::Api(api) => wake = st.api(*api, now),
            QueueMsg::Tick(at, port) => {
                // No lease lapses, and no work is stuck for want of a
                // runner, while the queue hears nobody.
                let heard_from = st.hearing.look(&st.ctx.bus, at);
                let c = match heard_from {
                    Some(from) => st.m.expire_leases(at, from),
                    None => Default::default(),
                };
                if !c.is_empty() {
                    for d in &c.audit {
                        warn!(
                            task = d.task_id.as_deref().unwrap_or(""),
                            "lease expired; task offered again"
                        );
                    }
                    st.commit(c, None);
                }
                st.serve_waiters(at);
                if let Some(from) = heard_from
                    && (at.saturating_sub(st.stuck_checked) >= 1000 || port.is_some())
                {
                    st.stuck_checked = at;
                    // A critical task whose dependencies finished, or that
                    // a Manager stopped holding, interrupts within a second.
                    interrupt = true;
                    let c = st.m.check_stuck(at, from);
                    if let Some(why) = c.status.then(|| st.m.status.stuck.clone()) {
                        match why {
                            Some(why) => warn!(reason = %why, "queue stuck"),
                            None => info!("queue no longer stuck"),
                        }
                        st.commit(c, None);
                    }
                }
                if let Some(p) = port {
                    st.commit(
                        Changes::default(),
                        Some(Box::new(move || {
                            let _ = p.send(());
                        })),
                    );
                }
            }
        }
        if wake && !st.waiters.is_empty() {
            st.serve_waiters(now);
        }
        // What the idle runners did not take may interrupt a busy one:
        // looked at when work may have appeared (not on every renewal or
        // empty claim) and once a second.
        if wake || interrupt {
            let c = st.m.interrupts(now);
            if !c.is_empty() {
                st.commit(c, None);
            }
        }
        match st.failed.take() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// A change that is only an audit line (another service's, an operator's
/// action): no state of the queue's moves.
fn audit_only(event: EventName, before: serde_json::Value, after: serde_json::Value) -> Changes {
    Changes {
        audit: vec![AuditDraft {
            event,
            task_id: None,
            before: before.into(),
            after: after.into(),
            report: None,
            exchange: None,
        }],
        ..Changes::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_that_cannot_be_encoded_is_an_error_naming_its_key() {
        // serde_json refuses a map keyed by a non-string: the record is not
        // written as an empty value, it is refused by name.
        let bad: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let e = encode("task.t1", &bad).unwrap_err();
        assert!(
            matches!(&e, QueueError::Encode { key, .. } if key == "task.t1"),
            "{e}"
        );
        assert!(
            e.to_string().contains("record task.t1 not encodable"),
            "{e}"
        );
        assert_eq!(&encode("k", &[1, 2]).unwrap()[..], b"[1,2]");
    }
}
