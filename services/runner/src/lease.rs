//! The lease on a claimed task: renewed every third of its length; the
//! renewal's answer also says whether the queue is halted, so the runner
//! stops its agent on an operator's halt without asking for the status.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};
use xo_bus::Bus;
use xo_bus::typed::{self, CallError};
use xo_proto::Subjects;
use xo_proto::queue::{self as q, Renewed, RunStatus};

/// A halt that stops running agents: any but one caused by a blocked task
/// (which lets running tasks finish).
pub fn operator_halt(r: &Renewed) -> bool {
    r.status == RunStatus::Halted
        && !r
            .halt_reason
            .as_deref()
            .is_some_and(|r| r.starts_with(q::HALT_TASK_BLOCKED))
}

/// The lease a runner holds: the task, its token and the unit it was
/// claimed for. Every renewal and the outcome name all three: the queue
/// takes them only from the lease's holder, on that unit's subject.
#[derive(Debug, Clone)]
pub struct Held {
    pub task_id: String,
    pub token: String,
    pub unit: String,
}

/// What the current task has used: the agent's turns, tokens and cost
/// (from its turns) and the wall time since the claim.
#[derive(Debug, Clone)]
pub struct Meter {
    pub turns: xo_pipeline::driver::Turns,
    pub started: std::time::Instant,
    /// The agent's checkpoint file: while it exists, heartbeats say so.
    pub checkpoint: Option<std::path::PathBuf>,
}

impl Meter {
    pub fn usage(&self) -> q::Usage {
        let mut u = self.turns.usage();
        u.wall_ms = self.started.elapsed().as_millis() as u64;
        u
    }
}

/// Stops the agent so the task can be given back for `critical`.
pub fn yield_now(
    yield_to: &watch::Sender<Option<String>>,
    cancel: &watch::Sender<bool>,
    critical: String,
) {
    if yield_to.borrow().is_some() {
        return;
    }
    info!(critical = %critical, "asked to yield to a critical task; stopping the agent to give the task back");
    let _ = yield_to.send(Some(critical));
    let _ = cancel.send(true);
}

/// Waits for the queue's interrupt naming `task` at `attempt` (one
/// already received counts) and yields.
pub async fn on_interrupt(
    mut interrupts: watch::Receiver<Option<q::Interrupt>>,
    task: String,
    attempt: u32,
    yield_to: watch::Sender<Option<String>>,
    cancel: watch::Sender<bool>,
) {
    loop {
        let critical = interrupts
            .borrow_and_update()
            .as_ref()
            .filter(|i| i.task_id == task && i.attempt == attempt)
            .map(|i| i.critical.clone());
        if let Some(c) = critical {
            yield_now(&yield_to, &cancel, c);
            return;
        }
        if interrupts.changed().await.is_err() {
            return;
        }
    }
}

/// Stops the run when the task's budget is spent (its earlier attempts'
/// work counted): the reason goes to `hit`, the run is cancelled, and the
/// worker blocks the task with it.
pub async fn watch_budget(
    budget: q::TaskBudget,
    before: q::Usage,
    meter: Meter,
    cancel: watch::Sender<bool>,
    hit: watch::Sender<Option<String>>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let mut used = before;
        used.add(&meter.usage());
        if let Some(reason) = budget.exceeded(&used) {
            let _ = hit.send(Some(reason));
            let _ = cancel.send(true);
            return;
        }
    }
}

/// Renews the lease; cancels the run when the lease is lost or the
/// operator halts the queue (a halt caused by a blocked task lets running
/// tasks finish), or when the queue asks the task to yield to a critical
/// one (named on `yield_to`; missed on `xo.interrupt.<unit>`, it comes
/// with the renewal). Each renewal carries the attempt's usage so far.
pub async fn keep(
    bus: Bus,
    subjects: Subjects,
    held: Held,
    lease_ms: u64,
    cancel: watch::Sender<bool>,
    yield_to: watch::Sender<Option<String>>,
    meter: Meter,
) {
    let every = Duration::from_millis((lease_ms / 3).max(50));
    loop {
        tokio::time::sleep(every).await;
        let hb = q::Heartbeat {
            task_id: held.task_id.clone(),
            token: held.token.clone(),
            claimant: held.unit.clone(),
            checkpoint: meter.checkpoint.as_ref().is_some_and(|p| p.exists()),
            usage: meter.usage(),
        };
        match typed::call(&bus, &subjects, &hb, every.max(Duration::from_secs(2))).await {
            Ok(r) if operator_halt(&r) => {
                warn!(reason = ?r.halt_reason, "queue halted by the operator; stopping the agent");
                let _ = cancel.send(true);
                return;
            }
            Ok(Renewed {
                record:
                    q::TaskRecord {
                        interrupt: Some(critical),
                        ..
                    },
                ..
            }) => {
                yield_now(&yield_to, &cancel, critical);
                return;
            }
            Ok(_) => {}
            Err(CallError::Service(e)) => {
                warn!(error = %e, "lease lost; stopping the agent");
                let _ = cancel.send(true);
                return;
            }
            Err(e) => warn!(error = %e, "lease renewal failed; will retry"),
        }
    }
}
