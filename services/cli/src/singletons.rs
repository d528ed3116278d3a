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

use anyhow::Context;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};
use xo_bus::{Bus, Store};
use xo_runtime::XoConfig;
use xo_runtime::config::FleetBackend;
use xo_runtime::tree::Shutdown;

/// The bucket and key of the singletons' lease.
pub const LEASE_BUCKET: &str = "leases";
pub const LEASE_KEY: &str = "singletons";

/// Which of them this process was asked to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wanted {
    pub notify: bool,
    pub review: bool,
    pub fleet: bool,
}

impl Wanted {
    pub fn any(&self) -> bool {
        self.notify || self.review || self.fleet
    }
}

/// The running ones.
#[derive(Default)]
pub struct Singletons {
    pub notify: Option<xo_notify::NotifyHandle>,
    pub review: Option<xo_review::service::ReviewHandle>,
    pub fleet: Option<xo_fleet::service::FleetHandle>,
}

impl Singletons {
    /// Starts what `wanted` asks for and the configuration allows; whatever
    /// started is stopped again if a later one fails.
    pub async fn start(cfg: &XoConfig, bus: &Bus, wanted: Wanted) -> anyhow::Result<Self> {
        let mut s = Singletons::default();
        if let Err(e) = s.start_each(cfg, bus, wanted).await {
            s.stop(|_| {}).await;
            return Err(e);
        }
        Ok(s)
    }

    async fn start_each(&mut self, cfg: &XoConfig, bus: &Bus, w: Wanted) -> anyhow::Result<()> {
        if w.notify {
            self.notify = Some(
                xo_notify::start(cfg, bus.clone())
                    .await
                    .context("starting the notifier")?,
            );
        }
        if w.review && cfg.review.enabled && cfg.supervisor.enabled {
            if cfg.review.model.model.is_empty() {
                warn!(
                    "no review model configured (review.model.model): review supervisors will skip their runs"
                );
            }
            self.review = Some(
                xo_review::start(cfg.clone(), bus.clone())
                    .await
                    .context("starting the review supervisors")?,
            );
        }
        if w.fleet && cfg.fleet.backend == FleetBackend::Docker {
            self.fleet = Some(
                xo_fleet::service::start(cfg, bus.clone())
                    .await
                    .context("starting the fleet manager (fleet.backend = \"docker\")")?,
            );
        }
        Ok(())
    }

    /// Resolves when one of them ends on its own (its tree gave up): its name.
    pub async fn ended(&mut self) -> &'static str {
        use futures::FutureExt;
        let never = || std::future::pending::<()>();
        let mut all: Vec<futures::future::BoxFuture<'_, &'static str>> = Vec::new();
        if let Some(n) = self.notify.as_mut() {
            all.push(n.until(never()).map(|_| "notify").boxed());
        }
        if let Some(r) = self.review.as_mut() {
            all.push(r.until(never()).map(|_| "review").boxed());
        }
        if let Some(f) = self.fleet.as_mut() {
            all.push(f.until(never()).map(|_| "fleet").boxed());
        }
        all.push(never().map(|_| "").boxed());
        futures::future::select_all(all).await.0
    }

    /// Stops the review supervisors and the fleet manager (the notifier
    /// goes on delivering what the others raise while they stop).
    pub async fn stop_early(&mut self, mut keep: impl FnMut(anyhow::Result<()>)) {
        if let Some(r) = self.review.take() {
            keep(r.stop().await.context("review supervisors"));
        }
        if let Some(f) = self.fleet.take() {
            keep(f.stop().await.context("fleet manager"));
        }
    }

    /// Stops them all, the notifier last.
    pub async fn stop(&mut self, mut keep: impl FnMut(anyhow::Result<()>)) {
        self.stop_early(&mut keep).await;
        if let Some(n) = self.notify.take() {
            keep(n.stop().await.context("notifier"));
        }
    }
}

/// The singletons under a lease, in a task of their own.
pub struct Leased {
    stop: Shutdown,
    task: JoinHandle<()>,
}

impl Leased {
    /// Stands by for the lease, runs the singletons while holding it.
    pub fn start(cfg: &XoConfig, bus: Bus, store: Store, wanted: Wanted) -> Self {
        let stop = Shutdown::new();
        let (cfg, signal) = (cfg.clone(), stop.clone());
        let task = tokio::spawn(async move { keep(cfg, bus, store, wanted, signal).await });
        Self { stop, task }
    }

    /// Stops them (if running) and gives the lease back.
    pub async fn stop(self) {
        self.stop.trigger();
        let _ = self.task.await;
    }
}

async fn keep(cfg: XoConfig, bus: Bus, store: Store, wanted: Wanted, stop: Shutdown) {
    let me = xo_bus::leader::holder_id();
    let lease = Duration::from_millis(cfg.queue.leader_lease_ms.max(100));
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
        let mut running = match Singletons::start(&cfg, &bus, wanted).await {
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
        let outcome = tokio::select! {
            _ = stop.signal() => None,
            why = leader.lost() => Some(format!("lease lost: {why}")),
            which = running.ended() => Some(format!("{which} stopped on its own")),
        };
        running
            .stop(|r| {
                if let Err(e) = r {
                    warn!(error = %format!("{e:#}"), "stopping a singleton");
                }
            })
            .await;
        leader.release().await;
        match outcome {
            None => return,
            Some(why) => {
                warn!(reason = %why, "singletons stopped; standing by for the lease again");
            }
        }
    }
}
