//! What a process runs, and in which order: the [`Slot`]s of services
//! (start order, reverse stop order, written once), the [`Plan`] that names
//! them, the [`Services`] list that holds them as they started, and
//! [`start_slot`], the one place each service is started from its
//! `start(ServiceCtx)`. The fabric (`fabric.rs`) and the singletons' lease
//! (`singletons.rs`) both start services through it.

use std::time::Duration;

use anyhow::{Context, anyhow};
use tracing::{error, info, warn};
use xo_bus::Store;
use xo_runner::RunnerOptions;
use xo_runtime::config::FleetBackend;
use xo_runtime::service::{BoxFuture, StopError};
use xo_runtime::{Service, ServiceCtx};

/// Where a service stands in a process: its start order (stopped in the
/// reverse order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Slot {
    Notify,
    Queue,
    Knowledge,
    Supervisor,
    Fleet,
    Review,
    Watch,
    Runners,
    Console,
}

impl Slot {
    /// The start order; the stop order is its reverse.
    pub const ORDER: [Slot; 9] = [
        Slot::Notify,
        Slot::Queue,
        Slot::Knowledge,
        Slot::Supervisor,
        Slot::Fleet,
        Slot::Review,
        Slot::Watch,
        Slot::Runners,
        Slot::Console,
    ];

    /// Run once per deployment, whatever the number of replicas: under a
    /// lease when several may start.
    pub fn singleton(self) -> bool {
        matches!(self, Slot::Notify | Slot::Fleet | Slot::Review)
    }
}

/// Which services a process runs.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub queue: bool,
    pub knowledge: bool,
    /// Review supervisors (skipped unless `review.enabled` and supervision is on).
    pub review: bool,
    /// The fleet manager (only with `fleet.backend = "docker"`).
    pub fleet: bool,
    pub supervisor: bool,
    /// The notifier (alerts to webhooks); started first, stopped last, so
    /// no alert of the others is missed.
    pub notify: bool,
    /// The web console (only with `console.enabled`).
    pub console: ConsoleMode,
    pub runners: Vec<RunnerOptions>,
    /// Transcript watches beside `[[supervisor.watch]]` (`xo watch`).
    pub watches: Vec<xo_runner::watch::WatchArgs>,
}

/// Whether a process serves the console.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConsoleMode {
    #[default]
    Off,
    /// `xo up`: a port in use is a warning, the rest runs.
    IfFree,
    /// `xo serve console`: a port in use is an error.
    Required,
}

impl Plan {
    /// The services of `slots` and nothing else (a test's, a bench's);
    /// the console required. Runners and watches take options: a plan
    /// names them itself.
    pub fn of(slots: &[Slot]) -> Self {
        let mut p = Plan::default();
        for s in slots {
            match s {
                Slot::Notify => p.notify = true,
                Slot::Queue => p.queue = true,
                Slot::Knowledge => p.knowledge = true,
                Slot::Supervisor => p.supervisor = true,
                Slot::Fleet => p.fleet = true,
                Slot::Review => p.review = true,
                Slot::Console => p.console = ConsoleMode::Required,
                Slot::Watch | Slot::Runners => {}
            }
        }
        p
    }

    /// Everything of `xo up`.
    pub fn all() -> Self {
        Self {
            queue: true,
            knowledge: true,
            review: true,
            fleet: true,
            supervisor: true,
            notify: true,
            console: ConsoleMode::IfFree,
            runners: Vec::new(),
            watches: Vec::new(),
        }
    }
}

/// Services started in [`Slot`] order, stopped in reverse.
#[derive(Default)]
pub struct Services {
    entries: Vec<(Slot, Box<dyn Service>)>,
}

impl Services {
    /// Adds a started service in its slot's place.
    pub fn add(&mut self, slot: Slot, service: Box<dyn Service>) {
        let at = self.entries.partition_point(|(s, _)| *s <= slot);
        self.entries.insert(at, (slot, service));
    }

    /// The first service of type `T` (a bench reads a handle's figures).
    pub fn get<T: Service>(&self) -> Option<&T> {
        self.entries
            .iter()
            .find_map(|(_, s)| (s.as_ref() as &dyn std::any::Any).downcast_ref::<T>())
    }

    /// The names of the services, in start order.
    pub fn names(&self) -> Vec<String> {
        self.entries.iter().map(|(_, s)| s.name()).collect()
    }

    /// Resolves when one of them ends on its own: its name. Never with none.
    pub async fn ended(&mut self) -> String {
        use futures::FutureExt;
        let mut all: Vec<BoxFuture<'_, String>> = Vec::new();
        for (_, s) in self.entries.iter_mut() {
            let name = s.name();
            all.push(
                s.until(Box::pin(std::future::pending()))
                    .map(move |()| name)
                    .boxed(),
            );
        }
        all.push(Box::pin(std::future::pending()));
        futures::future::select_all(all).await.0
    }

    /// Stops them all, in reverse slot order, the services of one slot
    /// together; every one is stopped, each error is told.
    pub async fn stop(&mut self, mut keep: impl FnMut(String, Result<(), StopError>)) {
        while let Some((slot, _)) = self.entries.last() {
            let slot = *slot;
            let at = self.entries.partition_point(|(s, _)| *s < slot);
            let batch: Vec<Box<dyn Service>> = self.entries.drain(at..).map(|(_, s)| s).collect();
            let names: Vec<String> = batch.iter().map(|s| s.name()).collect();
            let ends = futures::future::join_all(batch.into_iter().map(|s| s.stop())).await;
            for (name, r) in names.into_iter().zip(ends) {
                keep(name, r);
            }
        }
    }
}

/// The queue with the lease it holds when it is the active one of
/// several instances: losing the lease ends it.
pub(crate) struct LeasedQueue {
    pub(crate) queue: xo_queue::QueueHandle,
    leader: Option<xo_bus::leader::Leader>,
    lost: Option<String>,
}

impl Service for LeasedQueue {
    fn name(&self) -> String {
        "queue".into()
    }
    fn until<'a>(&'a mut self, shutdown: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let lost = async {
                match &self.leader {
                    Some(l) => l.lost().await,
                    None => std::future::pending::<String>().await,
                }
            };
            tokio::select! {
                _ = self.queue.until(shutdown) => {}
                why = lost => {
                    error!(reason = %why, "the queue's lease is lost; stopping (start again to stand by)");
                    self.lost = Some(why);
                }
            }
        })
    }
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), StopError>> {
        Box::pin(async move {
            let r = self.queue.stop().await;
            // The queue is stopped: a standby may take over at once.
            if let Some(l) = self.leader {
                l.release().await;
            }
            match self.lost {
                Some(why) => Err(anyhow!("{why}: this instance stopped serving the queue").into()),
                None => r.map_err(Into::into),
            }
        })
    }
}

/// Starts what `plan` asks of `slot`, into `into`. `console` gets the
/// console's address when it starts.
pub async fn start_slot(
    slot: Slot,
    ctx: &ServiceCtx,
    plan: &Plan,
    into: &mut Services,
    console: &mut Option<xo_console::ConsoleView>,
) -> anyhow::Result<()> {
    let cfg = &ctx.cfg;
    match slot {
        Slot::Notify if plan.notify => {
            let n = xo_notify::start(ctx.fresh())
                .await
                .context("starting the notifier")?;
            into.add(slot, Box::new(n));
        }
        Slot::Queue if plan.queue => {
            let store = ctx.store("the queue")?;
            // On NATS other instances may be running: serve only while
            // holding the queue's lease.
            let mut leader = None;
            if matches!(store, Store::Nats(_)) && cfg.queue.leader_lease_ms > 0 {
                let me = xo_bus::leader::holder_id();
                let l = xo_bus::leader::acquire(
                    &store,
                    xo_queue::BUCKET,
                    xo_queue::LEADER_KEY,
                    &me,
                    Duration::from_millis(cfg.queue.leader_lease_ms),
                    |h| info!(holder = %h.holder, "another queue instance is active; standing by"),
                )
                .await
                .context("taking the queue's lease")?;
                info!(holder = %me, "holding the queue's lease; serving");
                leader = Some(l);
            }
            let fence = leader.as_ref().map(|l| l.fence());
            let queue = match xo_queue::start(ctx.fresh().with_fence(fence)).await {
                Ok(q) => q,
                Err(e) => {
                    if let Some(l) = leader {
                        l.release().await;
                    }
                    return Err(anyhow!(e).context("starting the queue"));
                }
            };
            into.add(
                slot,
                Box::new(LeasedQueue {
                    queue,
                    leader,
                    lost: None,
                }),
            );
        }
        Slot::Knowledge if plan.knowledge && cfg.knowledge.enabled => {
            let k = xo_knowledge::service::start(ctx.fresh())
                .await
                .context("starting the knowledge store")?;
            into.add(slot, Box::new(k));
        }
        Slot::Supervisor if plan.supervisor => {
            let s = xo_supervisor::start(ctx.fresh())
                .await
                .context("starting the supervisor")?;
            into.add(slot, Box::new(s));
        }
        Slot::Fleet if plan.fleet && cfg.fleet.backend == FleetBackend::Docker => {
            let f = xo_fleet::service::start(ctx.fresh())
                .await
                .context("starting the fleet manager (fleet.backend = \"docker\")")?;
            into.add(slot, Box::new(f));
        }
        Slot::Review if plan.review && cfg.review.enabled && cfg.supervisor.enabled => {
            if cfg.review.model.model.is_empty() {
                warn!(
                    "no review model configured (review.model.model): review supervisors will skip their runs"
                );
            }
            let r = xo_review::start(ctx.fresh())
                .await
                .context("starting the review supervisors")?;
            into.add(slot, Box::new(r));
        }
        Slot::Watch => {
            // `[[supervisor.watch]]` in a process that supervises, and any
            // the plan names (`xo watch`).
            let configured = (plan.supervisor && cfg.supervisor.enabled)
                .then_some(&cfg.supervisor.watch)
                .into_iter()
                .flatten()
                .map(xo_runner::watch::WatchArgs::from);
            for (i, args) in configured.chain(plan.watches.iter().cloned()).enumerate() {
                let h = xo_runner::watch::start(ctx.fresh(), args)
                    .await
                    .with_context(|| format!("supervisor.watch[{i}]"))?;
                into.add(slot, Box::new(h));
            }
        }
        Slot::Runners => {
            for opts in &plan.runners {
                let r = xo_runner::start(ctx.fresh(), opts.clone())
                    .await
                    .with_context(|| format!("runner {}", opts.unit))?;
                into.add(slot, Box::new(r));
            }
        }
        Slot::Console if plan.console != ConsoleMode::Off && cfg.console.enabled => {
            match xo_console::start(ctx.fresh()).await {
                Ok(c) => {
                    *console = Some(c.view());
                    into.add(slot, Box::new(c));
                }
                Err(e) if plan.console == ConsoleMode::IfFree => {
                    warn!(error = %e, "console not started; everything else runs")
                }
                Err(e) => return Err(anyhow!(e).context("starting the console")),
            }
        }
        _ => {}
    }
    Ok(())
}
