//! Stage 2, supervise: what watches a task while it runs, in one select
//! beside the run itself (no task of its own): the lease renewed every
//! third of its length (its answer says whether the operator halted the
//! queue, or asks the task to yield to a critical one), the queue's
//! interrupts, the task's budget, the runner's shutdown. Any of them
//! stops the agent (its process group killed) and says why; the run is
//! then driven to its end, so its work is settled either way.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};
use xo_bus::Bus;
use xo_bus::typed::{self, CallError};
use xo_proto::Subjects;
use xo_proto::queue::{self as q, Renewed};
use xo_runtime::tree::Shutdown;

use crate::lease::{Held, Meter, operator_halt};

/// What a task's supervision watches.
pub struct Supervision {
    pub bus: Bus,
    pub subjects: Subjects,
    pub held: Held,
    /// The attempt held (an interrupt names the task and its attempt).
    pub attempt: u32,
    pub lease_ms: u64,
    pub budget: q::TaskBudget,
    /// What the task's earlier attempts spent (its budget counts them).
    pub spent: q::Usage,
    pub meter: Meter,
    /// The queue's latest request to yield a task to a critical one.
    pub interrupts: watch::Receiver<Option<q::Interrupt>>,
    pub shutdown: Shutdown,
    /// Stops the agent (the pipeline's cancel).
    pub cancel: watch::Sender<bool>,
}

/// Why the agent was stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// The runner is shutting down: the task is left to the queue to replay.
    Shutdown,
    /// The operator halted the queue.
    Halted,
    /// The queue refused the renewal (the lease lapsed, the task was
    /// cancelled or given to another).
    LeaseLost,
    /// Asked to give the task back for this critical one.
    Yield(String),
    /// The task's budget is spent: this reason.
    Budget(String),
}

type Renewal = Pin<Box<dyn Future<Output = Result<Renewed, CallError>> + Send>>;

/// Drives `run` to its end while watching it; the run's output, and why
/// its agent was stopped if it was (the first reason only).
pub async fn supervise<T>(mut s: Supervision, run: impl Future<Output = T>) -> (T, Option<Stop>) {
    let mut run = std::pin::pin!(run);
    let every = Duration::from_millis((s.lease_ms / 3).max(50));
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut budget = tokio::time::interval(Duration::from_millis(100));
    let mut renewal: Option<Renewal> = None;
    // Renewals stop once the lease is lost or the queue halted.
    let mut renewing = true;
    let mut stop: Option<Stop> = interrupted(&mut s).map(Stop::Yield);
    let mut stopped = false;
    // The worker's interrupt channel closes only as it stops.
    let mut listening = true;
    loop {
        if let Some(why) = &stop
            && !stopped
        {
            stopped = true;
            log(why);
            let _ = s.cancel.send(true);
        }
        let watching = stop.is_none();
        tokio::select! {
            out = &mut run => return (out, stop),
            _ = s.shutdown.signal(), if watching => stop = Some(Stop::Shutdown),
            _ = renew.tick(), if renewing && renewal.is_none() => {
                renewal = Some(Box::pin(renew_once(s.bus.clone(), s.subjects.clone(), heartbeat(&s), every)));
            }
            r = pending(&mut renewal) => {
                renewal = None;
                match r {
                    Ok(r) if operator_halt(&r) => {
                        renewing = false;
                        warn!(reason = ?r.halt_reason, "queue halted by the operator");
                        stop.get_or_insert(Stop::Halted);
                    }
                    Ok(Renewed { record: q::TaskRecord { interrupt: Some(critical), .. }, .. }) => {
                        stop.get_or_insert(Stop::Yield(critical));
                    }
                    Ok(_) => {}
                    Err(CallError::Service(e)) => {
                        renewing = false;
                        warn!(error = %e, "lease lost");
                        stop.get_or_insert(Stop::LeaseLost);
                    }
                    Err(e) => warn!(error = %e, "lease renewal failed; will retry"),
                }
            }
            changed = s.interrupts.changed(), if watching && listening => match changed {
                Ok(()) => stop = interrupted(&mut s).map(Stop::Yield),
                Err(_) => listening = false,
            },
            _ = budget.tick(), if watching => {
                let mut used = s.spent;
                used.add(&s.meter.usage());
                stop = s.budget.exceeded(&used).map(Stop::Budget);
            }
        }
    }
}

fn log(why: &Stop) {
    match why {
        Stop::Shutdown => info!("shutting down; stopping the agent"),
        Stop::Halted => warn!("stopping the agent for the operator's halt"),
        Stop::LeaseLost => warn!("stopping the agent: its lease is lost"),
        Stop::Yield(c) => {
            info!(critical = %c, "asked to yield to a critical task; stopping the agent to give the task back")
        }
        Stop::Budget(r) => warn!(reason = %r, "task budget exhausted; stopping the agent"),
    }
}

/// The critical task the queue's latest interrupt asks this attempt to
/// yield to (one received before the task started counts).
fn interrupted(s: &mut Supervision) -> Option<String> {
    s.interrupts
        .borrow_and_update()
        .as_ref()
        .filter(|i| i.task_id == s.held.task_id && i.attempt == s.attempt)
        .map(|i| i.critical.clone())
}

/// The renewal of the lease, with the attempt's usage so far.
fn heartbeat(s: &Supervision) -> q::Heartbeat {
    q::Heartbeat {
        task_id: s.held.task_id.clone(),
        token: s.held.token.clone(),
        claimant: s.held.unit.clone(),
        checkpoint: s.meter.checkpoint.as_ref().is_some_and(|p| p.exists()),
        usage: s.meter.usage(),
    }
}

async fn renew_once(
    bus: Bus,
    subjects: Subjects,
    hb: q::Heartbeat,
    every: Duration,
) -> Result<Renewed, CallError> {
    typed::call(&bus, &subjects, &hb, every.max(Duration::from_secs(2))).await
}

/// The renewal in flight, or never.
async fn pending(r: &mut Option<Renewal>) -> Result<Renewed, CallError> {
    match r {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}
