//! The one place that starts and stops services: `xo up`, `xo up --demo`
//! and every `xo serve …` describe what they run as a [`Plan`]; [`Fabric`]
//! starts it in the order of [`Slot::ORDER`] and stops it in the reverse
//! order. Every service is started the same way, `start(ServiceCtx)`, and
//! held the same way, as a [`Service`].
//!
//! The order, written once ([`Slot::ORDER`]): the bus and the store first,
//! then notify → queue → knowledge → supervisor → fleet → review → watches →
//! runners → console, so that each finds what it calls already serving.
//! Stopping goes backwards, each service stopping its inputs, draining its
//! actors and flushing what it writes; the services of one slot (the
//! runners, the watches) stop together:
//!
//! 1. the console (its event streams end);
//! 2. runners stop claiming, their task in flight is stopped and left to
//!    the queue; transcript watches stop;
//! 3. review supervisors, then the fleet manager (no new runs or containers);
//! 4. the supervisor (unit state flushed to the store);
//! 5. knowledge, then the queue (outcomes delivered before it stops are
//!    durable; its committer writes what is pending; its lease is given back);
//! 6. the notifier last, so no alert of the others is missed;
//! 7. close: the bus socket of `xo up` is closed, telemetry flushed.
//!
//! Singletons ([`Slot::singleton`]: notify, fleet, review) run once per
//! deployment: on NATS, where several replicas may start, they run under
//! one lease in the notifier's place (`crate::singletons`). What a slot
//! starts is in `crate::slots`.

use std::future::Future;

use anyhow::{Context, anyhow};
use tokio::task::JoinHandle;
use tracing::{info, warn};
use xo_bus::{Bus, FileStore, LocalBus, NatsBus, NatsStore, Store};
use xo_runner::RunnerOptions;
use xo_runtime::telemetry::TelemetryGuard;
use xo_runtime::{Clock, Service, ServiceCtx, XoConfig};

use crate::connect::nats_options;
pub use crate::slots::{ConsoleMode, Plan, Services, Slot, start_slot};

/// Where the services' bus and store come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// NATS at `nats.url` if set, else the embedded bus and file store,
    /// served to local `xo` commands over `./.xo/bus.sock` (`xo up`).
    UpDefault,
    /// The embedded bus and file store, not served (the demo).
    Private,
    /// NATS, required (`xo serve` of a stateful service).
    Nats,
    /// NATS if set, else the socket of a running `xo up` (`xo serve runner`).
    Client,
}

/// A started set of services.
pub struct Fabric {
    pub bus: Bus,
    pub store: Option<Store>,
    socket: Option<(tokio::sync::oneshot::Sender<()>, JoinHandle<()>)>,
    services: Services,
    console: Option<xo_console::ConsoleView>,
    telemetry: Option<TelemetryGuard>,
    /// The services' notion of now (the system clock but in tests).
    clock: Clock,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("bus", &self.bus.kind())
            .field("services", &self.services.names())
            .finish()
    }
}

/// What the transport gave: the bus, the store, and the socket server.
type Connected = (
    Bus,
    Option<Store>,
    Option<(tokio::sync::oneshot::Sender<()>, JoinHandle<()>)>,
);

async fn nats(cfg: &XoConfig, name: &str) -> anyhow::Result<(Bus, Store)> {
    let bus = NatsBus::connect(&cfg.nats.url, nats_options(cfg, name, true))
        .await
        .with_context(|| format!("connecting to {}", xo_bus::nats::redact_url(&cfg.nats.url)))?;
    let store = Store::Nats(NatsStore::with_replicas(
        bus.client().clone(),
        &cfg.org.prefix,
        cfg.nats.replicas,
    ));
    Ok((Bus::Nats(bus), store))
}

/// The store the configuration names (NATS when a URL is set, else the
/// embedded files), for commands that read it beside a running fabric.
pub async fn store_of(cfg: &XoConfig) -> anyhow::Result<Store> {
    if cfg.nats.url.is_empty() {
        let dir = cfg.state.store_dir();
        if !dir.is_dir() {
            anyhow::bail!("no embedded store at {} (and no nats.url)", dir.display());
        }
        embedded_store(cfg)
    } else {
        Ok(nats(cfg, "xo-cli").await?.1)
    }
}

fn embedded_store(cfg: &XoConfig) -> anyhow::Result<Store> {
    let dir = cfg.state.store_dir();
    let store = FileStore::open_with(&dir, cfg.store.sync.into())
        .with_context(|| format!("opening the store in {}", dir.display()))?;
    Ok(Store::File(store))
}

async fn connect(cfg: &XoConfig, transport: Transport, name: &str) -> anyhow::Result<Connected> {
    match transport {
        Transport::Nats | Transport::UpDefault | Transport::Client if !cfg.nats.url.is_empty() => {
            let (bus, store) = nats(cfg, name).await?;
            Ok((bus, Some(store), None))
        }
        Transport::Nats => anyhow::bail!(
            "{name} needs NATS: pass --nats URL (or set XO_NATS_URL); for one process with no server use `xo up`"
        ),
        Transport::Client => Ok((crate::connect::service_client_bus(cfg).await?, None, None)),
        Transport::Private => Ok((
            Bus::Local(LocalBus::new()),
            Some(embedded_store(cfg)?),
            None,
        )),
        Transport::UpDefault => {
            let local = LocalBus::new();
            let store = embedded_store(cfg)?;
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let server =
                xo_bus::socket::serve(local.clone(), &cfg.state.socket_path(), async move {
                    let _ = stop_rx.await;
                })
                .await
                .context("serving the local bus socket")?;
            Ok((Bus::Local(local), Some(store), Some((stop_tx, server))))
        }
    }
}

impl Fabric {
    /// Serves this fabric's embedded bus to local `xo` commands over the
    /// socket at `path` (the demo kept running, whose state is elsewhere):
    /// refused when the bus is not the embedded one or another `xo`
    /// already serves `path`.
    pub async fn serve_socket(&mut self, path: &std::path::Path) -> anyhow::Result<()> {
        let Bus::Local(local) = &self.bus else {
            anyhow::bail!(
                "the bus is {}, not the embedded one: nothing to serve",
                self.bus.kind()
            );
        };
        if self.socket.is_some() {
            anyhow::bail!("this fabric already serves its bus socket");
        }
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = xo_bus::socket::serve(local.clone(), path, async move {
            let _ = stop_rx.await;
        })
        .await
        .with_context(|| format!("serving the bus on {}", path.display()))?;
        self.socket = Some((stop_tx, server));
        Ok(())
    }

    /// Connects and starts what `plan` names, in [`Slot::ORDER`].
    /// `service` names the process in telemetry (`xo`, `xo-queue`…), `name`
    /// its NATS connection.
    pub async fn start(
        cfg: &XoConfig,
        plan: Plan,
        transport: Transport,
        service: &'static str,
        name: &str,
    ) -> anyhow::Result<Fabric> {
        let telemetry = xo_runtime::telemetry::init(&cfg.telemetry, service)?;
        // XO's folders are this user's alone, whatever the umask.
        for dir in [
            cfg.state.dir.clone(),
            cfg.data_dir(),
            cfg.sandbox_dir(),
            cfg.knowledge_dir(),
        ] {
            if let Err(e) = xo_runtime::untrusted::private_dir(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "folder not made private (0700)");
            }
        }
        let (bus, store, socket) = connect(cfg, transport, name).await?;
        Self::start_on(
            cfg,
            plan,
            (bus, store, socket),
            Clock::System,
            Some(telemetry),
        )
        .await
    }

    /// Starts `plan` on a bus and store the caller has (benches, tests):
    /// no telemetry set up, no socket served.
    pub async fn start_with(
        cfg: &XoConfig,
        plan: Plan,
        bus: Bus,
        store: Option<Store>,
    ) -> anyhow::Result<Fabric> {
        Self::start_on(cfg, plan, (bus, store, None), Clock::System, None).await
    }

    /// [`Fabric::start_with`] with the services' clock given: a test owns
    /// time with [`Clock::manual`] (stale units, leases, cooldowns,
    /// reminders, retention all read it).
    pub async fn start_with_clock(
        cfg: &XoConfig,
        plan: Plan,
        bus: Bus,
        store: Option<Store>,
        clock: Clock,
    ) -> anyhow::Result<Fabric> {
        Self::start_on(cfg, plan, (bus, store, None), clock, None).await
    }

    async fn start_on(
        cfg: &XoConfig,
        plan: Plan,
        (bus, store, socket): Connected,
        clock: Clock,
        telemetry: Option<TelemetryGuard>,
    ) -> anyhow::Result<Fabric> {
        let mut f = Fabric {
            bus,
            store,
            socket,
            services: Services::default(),
            console: None,
            telemetry,
            clock,
        };
        if let Err(e) = f.start_services(cfg, plan).await {
            // Whatever did start is stopped in order before the error is told.
            let _ = f.stop().await;
            return Err(e);
        }
        info!(services = ?f.services(), bus = f.bus.kind(), "services started");
        Ok(f)
    }

    /// The context every service of this fabric starts with.
    fn ctx(&self, cfg: &XoConfig) -> ServiceCtx {
        let mut ctx = ServiceCtx::new(cfg.clone(), self.bus.clone()).with_clock(self.clock.clone());
        ctx.store = self.store.clone();
        ctx
    }

    /// The console, if this process serves one.
    pub fn console(&self) -> Option<&xo_console::ConsoleView> {
        self.console.as_ref()
    }

    /// The names of the running services, in start order.
    pub fn services(&self) -> Vec<String> {
        self.services.names()
    }

    /// The running service of type `T`, if this fabric runs one.
    pub fn get<T: Service>(&self) -> Option<&T> {
        self.services.get::<T>()
    }

    /// Resolves once this fabric runs the singletons it was asked to run
    /// (notifier, review supervisors, fleet manager): at once where they
    /// simply run (the embedded store), when this replica holds their
    /// lease on NATS (never while another replica holds it).
    pub async fn singletons_running(&self) {
        if let Some(l) = self.services.get::<crate::singletons::Leased>() {
            l.running().await;
        }
    }

    /// The running queue, if this fabric runs one (held under its lease on NATS).
    pub fn queue(&self) -> Option<&xo_queue::QueueHandle> {
        self.services
            .get::<crate::slots::LeasedQueue>()
            .map(|l| &l.queue)
    }

    async fn start_services(&mut self, cfg: &XoConfig, plan: Plan) -> anyhow::Result<()> {
        let ctx = self.ctx(cfg);
        let wanted = crate::singletons::Wanted::of(&plan);
        // On NATS other replicas may run them too: under a lease, one at a time.
        let leased = wanted.any()
            && matches!(self.store, Some(Store::Nats(_)))
            && cfg.queue.leader_lease_ms > 0;
        for slot in Slot::ORDER {
            if leased && slot.singleton() {
                if slot == Slot::Notify {
                    let l = crate::singletons::Leased::start(ctx.fresh(), plan.clone())?;
                    self.services.add(slot, Box::new(l));
                }
                continue;
            }
            start_slot(slot, &ctx, &plan, &mut self.services, &mut self.console).await?;
        }
        Ok(())
    }

    /// Adds runners to a started fabric (the demo starts them once its goal
    /// and tasks are in place); they stop in their slot's place.
    pub async fn with_runners(
        mut self,
        cfg: &XoConfig,
        runners: Vec<RunnerOptions>,
    ) -> anyhow::Result<Self> {
        let plan = Plan {
            runners,
            ..Plan::default()
        };
        let ctx = self.ctx(cfg);
        if let Err(e) = start_slot(
            Slot::Runners,
            &ctx,
            &plan,
            &mut self.services,
            &mut self.console,
        )
        .await
        {
            let _ = self.stop().await;
            return Err(e);
        }
        Ok(self)
    }

    /// Runs until `shutdown` resolves, or until a service ends on its own
    /// (its actor tree gave up, or it lost its lease); then stops
    /// everything in order.
    pub async fn run_until(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        tokio::select! {
            _ = shutdown => {}
            which = self.services.ended() => {
                warn!(service = %which, "a service stopped on its own; stopping the rest")
            }
        }
        self.stop().await
    }

    /// Stops everything in reverse [`Slot::ORDER`]; the first error is
    /// returned after every service has been stopped.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let mut first: Option<anyhow::Error> = None;
        self.services
            .stop(|name, r| {
                if let Err(e) = r {
                    warn!(service = %name, error = %e, "service stopped with an error");
                    if first.is_none() {
                        first = Some(anyhow!(e).context(name));
                    }
                }
            })
            .await;
        if let Err(e) = self.bus.flush().await {
            warn!(error = %e, "bus flush at shutdown failed");
        }
        if let Some((stop, server)) = self.socket.take() {
            let _ = stop.send(());
            let _ = server.await;
        }
        info!("stopped");
        if let Some(mut t) = self.telemetry.take() {
            t.shutdown();
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use xo_runtime::service::{BoxFuture, StopError};

    /// A service that records when it stops, and may end on its own.
    struct Probe {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        ends: bool,
    }

    impl Service for Probe {
        fn name(&self) -> String {
            self.name.into()
        }
        fn until<'a>(&'a mut self, shutdown: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
            if self.ends {
                Box::pin(async {})
            } else {
                shutdown
            }
        }
        fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), StopError>> {
            Box::pin(async move {
                self.log
                    .lock()
                    .unwrap()
                    .push(format!("{} stopping", self.name));
                // Services of one slot stop together: each sees the others begin.
                tokio::task::yield_now().await;
                self.log
                    .lock()
                    .unwrap()
                    .push(format!("{} stopped", self.name));
                if self.name == "supervisor" {
                    Err("escalated".into())
                } else {
                    Ok(())
                }
            })
        }
    }

    fn probe(name: &'static str, log: &Arc<Mutex<Vec<String>>>) -> Box<dyn Service> {
        Box::new(Probe {
            name,
            log: log.clone(),
            ends: false,
        })
    }

    #[tokio::test]
    async fn services_stop_in_the_reverse_of_the_start_order_a_slot_together() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut s = Services::default();
        // Added out of order, as the demo adds its runners after the console.
        s.add(Slot::Console, probe("console", &log));
        s.add(Slot::Queue, probe("queue", &log));
        s.add(Slot::Runners, probe("r1", &log));
        s.add(Slot::Notify, probe("notify", &log));
        s.add(Slot::Supervisor, probe("supervisor", &log));
        s.add(Slot::Runners, probe("r2", &log));
        assert_eq!(
            s.names(),
            ["notify", "queue", "supervisor", "r1", "r2", "console"]
        );
        let mut errors = Vec::new();
        s.stop(|name, r| {
            if let Err(e) = r {
                errors.push(format!("{name}: {e}"));
            }
        })
        .await;
        let log = log.lock().unwrap().clone();
        let at = |what: &str| log.iter().position(|l| l == what).unwrap();
        assert!(at("console stopped") < at("r1 stopping"));
        // The two runners stop together: both begin before either ends.
        assert!(at("r1 stopping") < at("r2 stopped") && at("r2 stopping") < at("r1 stopped"));
        assert!(at("r2 stopped") < at("supervisor stopping"));
        assert!(at("supervisor stopped") < at("queue stopping"));
        assert!(at("queue stopped") < at("notify stopping"));
        // An error is told, and the rest are stopped all the same.
        assert_eq!(errors, ["supervisor: escalated"]);
        assert_eq!(log.len(), 12);
    }

    #[tokio::test]
    async fn a_service_ending_on_its_own_is_named() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut s = Services::default();
        s.add(Slot::Queue, probe("queue", &log));
        s.add(
            Slot::Review,
            Box::new(Probe {
                name: "review",
                log: log.clone(),
                ends: true,
            }),
        );
        assert_eq!(s.ended().await, "review");
    }

    #[tokio::test]
    async fn a_plan_of_named_slots_starts_those_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = XoConfig::default();
        cfg.state.dir = dir.path().to_path_buf();
        let store = embedded_store(&cfg).unwrap();
        let plan = Plan::of(&[Slot::Supervisor, Slot::Queue]);
        let f = Fabric::start_with(&cfg, plan, Bus::Local(LocalBus::new()), Some(store))
            .await
            .unwrap();
        assert_eq!(f.services(), ["queue", "supervisor"]);
        f.stop().await.unwrap();
    }

    #[tokio::test]
    async fn the_fabric_starts_the_plan_in_slot_order_and_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = XoConfig::default();
        // Everything under the temporary folder (knowledge, data, review state).
        cfg.state.dir = dir.path().to_path_buf();
        cfg.review.enabled = true;
        let store = embedded_store(&cfg).unwrap();
        let plan = Plan {
            console: ConsoleMode::Off,
            ..Plan::all()
        };
        let f = Fabric::start_with(&cfg, plan, Bus::Local(LocalBus::new()), Some(store))
            .await
            .unwrap();
        assert_eq!(
            f.services(),
            ["notify", "queue", "knowledge", "supervisor", "review"]
        );
        assert!(f.get::<xo_supervisor::SupervisorHandle>().is_some());
        assert!(f.queue().is_some());
        assert!(f.get::<xo_console::ConsoleHandle>().is_none());
        f.stop().await.unwrap();
    }
}
