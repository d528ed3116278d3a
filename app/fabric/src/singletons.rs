//! The services a deployment runs once, whatever the number of supervisor
//! replicas: the review supervisors (model calls, knowledge writes,
//! `review-state.json`), the notifier (every alert delivered once) and the
//! fleet manager (one owner of the containers).
//!
//! In one process (`xo up` on the embedded store) they simply run. On NATS,
//! where several `xo serve supervisor` may run, they run under a lease in
//! the store (`leases/singletons`, `queue.leader_lease_ms`, the same
//! mechanism as the queue's): one replica holds it and runs them, the
//! others stand by and take over when it goes. A replica that loses the
//! lease stops them and stands by again; one of them ending on its own
//! (its actor tree gave up) gives the lease back, so another replica
//! tries.

use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{error, info, warn};
use xo_runtime::service::{BoxFuture, StopError};
use xo_runtime::tree::Shutdown;
use xo_runtime::{Service, ServiceCtx};

use crate::slots::{Plan, Services, Slot, start_slot};

/// The bucket and key of the singletons' lease.
pub use xo_proto::names::{LEASES_BUCKET as LEASE_BUCKET, SINGLETONS_LEASE_KEY as LEASE_KEY};

/// Which of them this process was asked to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wanted {
    pub notify: bool,
    pub review: bool,
    pub fleet: bool,
}

impl Wanted {
    pub fn of(plan: &Plan) -> Self {
        Self {
            notify: plan.notify,
            review: plan.review,
            fleet: plan.fleet,
        }
    }

    pub fn any(&self) -> bool {
        self.notify || self.review || self.fleet
    }
}

/// The singletons under a lease, in a task of their own.
pub struct Leased {
    stop: Shutdown,
    task: JoinHandle<()>,
    /// Whether this replica runs them now (holds the lease, all started).
    running: tokio::sync::watch::Receiver<bool>,
}

impl Leased {
    /// Stands by for the lease, runs the singletons of `plan` while holding it.
    pub fn start(ctx: ServiceCtx, plan: Plan) -> anyhow::Result<Self> {
        let store = ctx.store("the singletons' lease")?;
        let stop = ctx.shutdown.clone();
        let (tell, running) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(keep(ctx, store, plan, tell));
        Ok(Self {
            stop,
            task,
            running,
        })
    }

    /// Resolves once this replica runs the singletons (at once if it does;
    /// never while another replica holds the lease).
    pub async fn running(&self) {
        let mut r = self.running.clone();
        let _ = r.wait_for(|on| *on).await;
    }
}

impl Service for Leased {
    fn name(&self) -> String {
        "singletons (leased)".into()
    }
    /// A lease lost or a singleton ending is handled inside: it stands
    /// by again, so this never ends on its own.
    fn until<'a>(&'a mut self, shutdown: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        shutdown
    }
    /// Stops them (if running) and gives the lease back.
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), StopError>> {
        Box::pin(async move {
            self.stop.trigger();
            let _ = self.task.await;
            Ok(())
        })
    }
}

/// Starts the singletons of `plan`, in slot order; what started is
/// stopped again if a later one fails.
async fn start_all(ctx: &ServiceCtx, plan: &Plan) -> anyhow::Result<Services> {
    let mut running = Services::default();
    let mut no_console = None;
    for slot in Slot::ORDER.into_iter().filter(|s| s.singleton()) {
        if let Err(e) = start_slot(slot, ctx, plan, &mut running, &mut no_console).await {
            running.stop(|_, _| {}).await;
            return Err(e);
        }
    }
    Ok(running)
}

async fn keep(
    ctx: ServiceCtx,
    store: xo_bus::Store,
    plan: Plan,
    told: tokio::sync::watch::Sender<bool>,
) {
    let stop = ctx.shutdown.clone();
    let me = xo_bus::leader::holder_id();
    let lease = Duration::from_millis(ctx.cfg.queue.leader_lease_ms.max(100));
    loop {
        let acquired = tokio::select! {
            _ = stop.signal() => return,
            l = xo_bus::leader::acquire(&store, LEASE_BUCKET, LEASE_KEY, &me, lease, |h| {
                info!(holder = %h.holder, "another replica runs the review supervisors, notifier and fleet manager; standing by")
            }) => l,
        };
        let leader = match acquired {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "the singletons' lease cannot be read; trying again");
                tokio::select! {
                    _ = stop.signal() => return,
                    _ = tokio::time::sleep(lease) => continue,
                }
            }
        };
        info!(holder = %me, "holding the singletons' lease: running the review supervisors, notifier and fleet manager");
        let mut running = match start_all(&ctx, &plan).await {
            Ok(s) => s,
            Err(e) => {
                error!(error = %format!("{e:#}"), "the singletons did not start; giving the lease back");
                leader.release().await;
                tokio::select! {
                    _ = stop.signal() => return,
                    _ = tokio::time::sleep(lease) => continue,
                }
            }
        };
        told.send_replace(true);
        let outcome = tokio::select! {
            _ = stop.signal() => None,
            why = leader.lost() => Some(format!("lease lost: {why}")),
            which = running.ended() => Some(format!("{which} stopped on its own")),
        };
        running
            .stop(|name, r| {
                if let Err(e) = r {
                    warn!(service = %name, error = %e, "stopping a singleton");
                }
            })
            .await;
        told.send_replace(false);
        leader.release().await;
        match outcome {
            None => return,
            Some(why) => {
                warn!(reason = %why, "singletons stopped; standing by for the lease again");
            }
        }
    }
}
