//! One actor owns the state machine. Every request is applied in memory and
//! handed to the committer with its reply, so replies go out in order and
//! only once durable. Claims that find nothing may wait (long-poll).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::mpsc;
use tracing::{error, info, warn};
use xo_proto::control::ServiceError;
use xo_proto::queue::{
    Claimed, ExecutionMode, Goal, QueueStatus, Task, TaskEvent, TaskRecord, TaskState,
    ValidationReport,
};

use crate::commit::Commit;
use crate::machine::{Changes, Machine};
use crate::{BUCKET, Ctx, QueueResult};

type Reply<T> = RpcReplyPort<Result<T, ServiceError>>;

pub enum QueueMsg {
    Init {
        mode: ExecutionMode,
        manager: bool,
        force: bool,
        reply: Reply<QueueStatus>,
    },
    SetGoal(Goal, Reply<QueueStatus>),
    Enqueue(Vec<Task>, Reply<Vec<String>>),
    Claim {
        role: String,
        claimant: String,
        wait_ms: u64,
        reply: Reply<Option<Claimed>>,
    },
    Heartbeat {
        task_id: String,
        token: String,
        checkpoint: bool,
        reply: Reply<TaskRecord>,
    },
    Complete {
        task_id: String,
        token: String,
        report: ValidationReport,
        manager_reply: Option<serde_json::Value>,
        reply: Reply<TaskRecord>,
    },
    Block {
        task_id: String,
        token: String,
        reason: String,
        question: Option<String>,
        reply: Reply<TaskRecord>,
    },
    Answer {
        task_id: String,
        text: String,
        reply: Reply<TaskRecord>,
    },
    Halt(String, Reply<QueueStatus>),
    Resume(Reply<QueueStatus>),
    Start(Reply<QueueStatus>),
    Step(Reply<QueueStatus>),
    Status(Reply<QueueStatus>),
    List(Option<TaskState>, Reply<Vec<TaskRecord>>),
    Retry(String, Reply<TaskRecord>),
    Cancel(String, Reply<TaskRecord>),
    /// Expire leases and waiting claims at `now`; answered when done.
    Tick(u64, Option<RpcReplyPort<()>>),
}

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
}

fn task_key(id: &str) -> String {
    format!("task.{id}")
}
const STATUS_KEY: &str = "status";

/// Loads the machine from the store. An unreadable record is reported (by
/// key) in the status and left untouched; it never stops the queue.
pub async fn load(ctx: &Ctx) -> QueueResult<Machine> {
    let mut m = Machine::new(ctx.cfg.queue.lease_ms, ctx.cfg.task_roles());
    let keys = ctx.store.keys(BUCKET).await?;
    let mut status = None;
    let mut tasks = Vec::new();
    let mut corrupt = Vec::new();
    for key in keys {
        let Some(entry) = ctx.store.get(BUCKET, &key).await? else {
            continue;
        };
        let res = if key == STATUS_KEY {
            serde_json::from_slice::<QueueStatus>(&entry.value).map(|s| status = Some(s))
        } else {
            serde_json::from_slice::<TaskRecord>(&entry.value).map(|t| tasks.push(t))
        };
        if let Err(e) = res {
            error!(bucket = BUCKET, key = %key, error = %e, "corrupt queue record left untouched");
            corrupt.push(format!("{BUCKET}/{key}: {e}"));
        }
    }
    let n = tasks.len();
    m.restore(status, tasks);
    m.status.corrupt = corrupt;
    if n > 0 {
        info!(tasks = n, "queue state restored from the store");
    }
    Ok(m)
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
    fn commit(&self, changes: Changes, reply: Option<Box<dyn FnOnce() + Send>>) {
        let mut writes = Vec::new();
        for id in &changes.tasks {
            let value = match self.m.tasks.get(id) {
                Some(r) => serde_json::to_vec(r).unwrap_or_default(),
                None => continue,
            };
            writes.push((task_key(id), Bytes::from(value)));
        }
        if changes.status {
            let mut s = self.m.status.clone();
            s.corrupt.clear();
            writes.push((
                STATUS_KEY.to_string(),
                Bytes::from(serde_json::to_vec(&s).unwrap_or_default()),
            ));
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
                    event: d.event.to_string(),
                    state: r.state,
                    attempt: r.attempt,
                    at: now,
                })
            })
            .collect();
        let c = Commit {
            writes,
            audit: changes.audit,
            project: self.project(),
            events,
            reply,
        };
        if self.commits.send(c).is_err() {
            error!("queue committer gone; change not persisted");
        }
    }

    fn answer<T: Send + 'static>(
        &self,
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

    fn result<T: Send + 'static>(&self, r: Result<(T, Changes), ServiceError>, reply: Reply<T>) {
        match r {
            Ok((v, c)) => self.answer(c, reply, Ok(v)),
            Err(e) => self.answer(Changes::default(), reply, Err(e)),
        }
    }

    fn with_status(&self, r: Result<Changes, ServiceError>, reply: Reply<QueueStatus>) {
        match r {
            Ok(c) => {
                let s = self.m.status();
                self.answer(c, reply, Ok(s));
            }
            Err(e) => self.answer(Changes::default(), reply, Err(e)),
        }
    }

    fn claimed(&self, rec: TaskRecord, token: String) -> Claimed {
        Claimed {
            record: rec,
            token,
            lease_ms: self.ctx.cfg.queue.lease_ms,
        }
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
        })
    }

    async fn handle(
        &self,
        _me: ActorRef<QueueMsg>,
        msg: QueueMsg,
        st: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.clock.now_ms();
        let mut wake = true;
        match msg {
            QueueMsg::Init {
                mode,
                manager,
                force,
                reply,
            } => {
                let r = st.m.init(mode, manager, force);
                st.with_status(r, reply);
            }
            QueueMsg::SetGoal(goal, reply) => {
                let r = st.m.set_goal(goal);
                st.with_status(r, reply);
            }
            QueueMsg::Enqueue(tasks, reply) => {
                let r = st.m.enqueue(tasks, now);
                st.result(r, reply);
            }
            QueueMsg::Claim {
                role,
                claimant,
                wait_ms,
                reply,
            } => match st.m.claim(&role, &claimant, now) {
                Ok((Some((rec, token)), c)) => {
                    let v = st.claimed(rec, token);
                    st.answer(c, reply, Ok(Some(v)));
                }
                Ok((None, c)) if wait_ms > 0 => {
                    if !c.is_empty() {
                        st.commit(c, None);
                    }
                    st.waiters.push_back(Waiter {
                        role,
                        claimant,
                        deadline: now + wait_ms,
                        reply,
                    });
                    wake = false;
                }
                Ok((None, c)) => st.answer(c, reply, Ok(None)),
                Err(e) => st.answer(Changes::default(), reply, Err(e)),
            },
            QueueMsg::Heartbeat {
                task_id,
                token,
                checkpoint,
                reply,
            } => {
                let r = st.m.heartbeat(&task_id, &token, checkpoint, now);
                st.result(r, reply);
                wake = false;
            }
            QueueMsg::Complete {
                task_id,
                token,
                report,
                manager_reply,
                reply,
            } => {
                let r = st.m.complete(&task_id, &token, report, manager_reply, now);
                if let Err(e) = &r {
                    warn!(task = %task_id, error = %e, "completion refused");
                }
                st.result(r, reply);
            }
            QueueMsg::Block {
                task_id,
                token,
                reason,
                question,
                reply,
            } => {
                let r = st.m.block(&task_id, &token, reason, question, now);
                st.result(r, reply);
            }
            QueueMsg::Answer {
                task_id,
                text,
                reply,
            } => {
                let r = st.m.answer(&task_id, text, now);
                st.result(r, reply);
            }
            QueueMsg::Halt(reason, reply) => {
                let r = st.m.halt(reason);
                st.with_status(r, reply);
            }
            QueueMsg::Resume(reply) => {
                let r = st.m.resume("RESUME");
                st.with_status(r, reply);
            }
            QueueMsg::Start(reply) => {
                let r = st.m.resume("START");
                st.with_status(r, reply);
            }
            QueueMsg::Step(reply) => {
                let r = st.m.step();
                st.with_status(r, reply);
            }
            QueueMsg::Status(reply) => {
                let s = st.m.status();
                st.answer(Changes::default(), reply, Ok(s));
                wake = false;
            }
            QueueMsg::List(filter, reply) => {
                let mut list: Vec<TaskRecord> =
                    st.m.tasks
                        .values()
                        .filter(|t| filter.is_none_or(|f| t.state == f))
                        .cloned()
                        .collect();
                list.sort_by_key(|t| t.seq);
                st.answer(Changes::default(), reply, Ok(list));
                wake = false;
            }
            QueueMsg::Retry(id, reply) => {
                let r = st.m.retry(&id, now);
                st.result(r, reply);
            }
            QueueMsg::Cancel(id, reply) => {
                let r = st.m.cancel(&id, now);
                st.result(r, reply);
            }
            QueueMsg::Tick(at, port) => {
                let c = st.m.expire_leases(at);
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
                wake = false;
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
        Ok(())
    }
}
