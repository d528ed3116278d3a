//! The one place that starts and stops services: `xo up`, `xo up --demo`
//! and every `xo serve …` describe what they run as a [`Plan`]; [`Fabric`]
//! starts it in order and stops it in one documented order.
//!
//! Start order: the bus (and the store), then queue → knowledge → review →
//! fleet → supervisor → console → runners, so that each finds what it calls already
//! serving.
//!
//! Stop order ([`Fabric::stop`]), each service itself stopping its inputs,
//! draining its actors and flushing what it writes:
//!
//! 1. the console (its event streams end), then stop taking work: runners stop claiming, their task in flight is
//!    stopped and left to the queue; transcript watches stop;
//! 2. review supervisors and the fleet manager (no new runs or containers);
//! 3. the supervisor (unit state flushed to the store);
//! 4. knowledge, then the queue last (outcomes delivered before it stops are
//!    durable; its committer writes what is pending);
//! 5. close: the bus socket of `xo up` is closed, telemetry flushed.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, anyhow};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};
use xo_bus::{Bus, FileStore, LocalBus, NatsBus, NatsStore, Store};
use xo_runner::{RunnerError, RunnerOptions};
use xo_runtime::XoConfig;
use xo_runtime::telemetry::TelemetryGuard;
use xo_runtime::tree::Shutdown;

use crate::connect::nats_options;

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
        }
    }
}

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
    queue: Option<xo_queue::QueueHandle>,
    knowledge: Option<xo_knowledge::service::KnowledgeHandle>,
    /// Review supervisors, notifier, fleet manager: run here directly...
    singletons: crate::singletons::Singletons,
    /// ...or, on NATS, under a lease (one replica of several runs them).
    leased: Option<crate::singletons::Leased>,
    supervisor: Option<xo_supervisor::SupervisorHandle>,
    console: Option<xo_console::ConsoleHandle>,
    runners_stop: Shutdown,
    runners: Vec<Runner>,
    /// `[[supervisor.watch]]`: transcripts watched in this process.
    watches: Vec<JoinHandle<()>>,
    /// The queue's lease, when this process is the active one of several.
    leader: Option<xo_bus::leader::Leader>,
    telemetry: Option<TelemetryGuard>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("bus", &self.bus.kind())
            .field("runners", &self.runners.len())
            .finish()
    }
}

/// A runner of this process: its task, and how it ended once it did.
struct Runner {
    unit: String,
    task: Option<JoinHandle<Result<(), RunnerError>>>,
    ended: Option<anyhow::Result<()>>,
}

impl Runner {
    /// Waits for the runner's end and keeps it (a task is awaited once).
    async fn wait(&mut self) {
        if let Some(t) = self.task.as_mut() {
            let r = match t.await {
                Ok(r) => r.with_context(|| format!("runner {}", self.unit)),
                Err(e) => Err(anyhow!("runner {}: {e}", self.unit)),
            };
            self.task = None;
            self.ended = Some(r);
        }
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
    let sync = match cfg.store.sync {
        xo_runtime::config::StoreSync::Always => xo_bus::file_store::SyncMode::Always,
        xo_runtime::config::StoreSync::Batch => xo_bus::file_store::SyncMode::Batch,
        xo_runtime::config::StoreSync::Never => xo_bus::file_store::SyncMode::Never,
    };
    let store = FileStore::open_with(&dir, sync)
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
        Transport::Client => Ok((crate::connect::client_bus(cfg).await?, None, None)),
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
    /// Connects and starts what `plan` names, in the start order above.
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
        let (bus, store, socket) = connect(cfg, transport, name).await?;
        let mut f = Fabric {
            bus,
            store,
            socket,
            queue: None,
            knowledge: None,
            singletons: Default::default(),
            leased: None,
            supervisor: None,
            console: None,
            runners_stop: Shutdown::new(),
            runners: Vec::new(),
            watches: Vec::new(),
            leader: None,
            telemetry: Some(telemetry),
        };
        if let Err(e) = f.start_services(cfg, plan).await {
            // Whatever did start is stopped in order before the error is told.
            let _ = f.stop().await;
            return Err(e);
        }
        Ok(f)
    }

    /// The console, if this process serves one.
    pub fn console(&self) -> Option<&xo_console::ConsoleHandle> {
        self.console.as_ref()
    }

    fn store(&self) -> anyhow::Result<Store> {
        self.store
            .clone()
            .ok_or_else(|| anyhow!("this transport has no store"))
    }

    async fn start_services(&mut self, cfg: &XoConfig, plan: Plan) -> anyhow::Result<()> {
        let wanted = crate::singletons::Wanted {
            notify: plan.notify,
            review: plan.review,
            fleet: plan.fleet,
        };
        // On NATS other replicas may run them too: under a lease, one at a time.
        let leased = wanted.any()
            && matches!(self.store, Some(Store::Nats(_)))
            && cfg.queue.leader_lease_ms > 0;
        if wanted.any() && !leased {
            self.singletons = crate::singletons::Singletons::start(cfg, &self.bus, wanted).await?;
        }
        if plan.queue {
            let store = self.store()?;
            // On NATS other instances may be running: serve only while
            // holding the queue's lease.
            if matches!(store, Store::Nats(_)) && cfg.queue.leader_lease_ms > 0 {
                let me = xo_bus::leader::holder_id();
                let leader = xo_bus::leader::acquire(
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
                self.leader = Some(leader);
            }
            self.queue = Some(
                xo_queue::start_fenced(
                    cfg.clone(),
                    self.bus.clone(),
                    store,
                    xo_runtime::Clock::System,
                    self.leader.as_ref().map(|l| l.fence()),
                )
                .await
                .context("starting the queue")?,
            );
        }
        if plan.knowledge && cfg.knowledge.enabled {
            self.knowledge = Some(
                xo_knowledge::service::start(cfg, self.bus.clone())
                    .await
                    .context("starting the knowledge store")?,
            );
        }
        if leased {
            self.leased = Some(crate::singletons::Leased::start(
                cfg,
                self.bus.clone(),
                self.store()?,
                wanted,
            ));
        }
        if plan.supervisor {
            self.supervisor = Some(
                xo_supervisor::start(
                    cfg.clone(),
                    self.bus.clone(),
                    self.store()?,
                    xo_runtime::Clock::System,
                )
                .await
                .context("starting the supervisor")?,
            );
        }
        if plan.console != ConsoleMode::Off && cfg.console.enabled {
            match xo_console::start(cfg, self.bus.clone()).await {
                Ok(c) => self.console = Some(c),
                Err(e) if plan.console == ConsoleMode::IfFree => {
                    warn!(error = %e, "console not started; everything else runs")
                }
                Err(e) => return Err(anyhow!(e).context("starting the console")),
            }
        }
        if plan.supervisor && cfg.supervisor.enabled {
            for w in &cfg.supervisor.watch {
                let args = crate::watch::WatchArgs::from(w);
                crate::watch::check(&args).context("supervisor.watch")?;
                let (bus, cfg, stop) = (self.bus.clone(), cfg.clone(), self.runners_stop.signal());
                self.watches.push(tokio::spawn(async move {
                    if let Err(e) = crate::watch::run(bus, &cfg, args, stop).await {
                        warn!(error = %e, "transcript watch stopped");
                    }
                }));
            }
        }
        for opts in plan.runners {
            self.spawn_runner(cfg, opts);
        }
        Ok(())
    }

    fn spawn_runner(&mut self, cfg: &XoConfig, opts: RunnerOptions) {
        let unit = opts.unit.clone();
        let run = xo_runner::run(
            cfg.clone(),
            self.bus.clone(),
            opts,
            self.runners_stop.signal(),
        );
        self.runners.push(Runner {
            unit,
            task: Some(tokio::spawn(run)),
            ended: None,
        });
    }

    /// Adds runners to a started fabric (the demo starts them once its goal
    /// and tasks are in place); they stop first, as every runner does.
    pub fn with_runners(mut self, cfg: &XoConfig, runners: Vec<RunnerOptions>) -> Self {
        for opts in runners {
            self.spawn_runner(cfg, opts);
        }
        self
    }

    /// Runs until `shutdown` resolves, or until a service's actor tree
    /// gives up (escalates); then stops everything in order.
    pub async fn run_until(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        use futures::FutureExt;
        let never = || std::future::pending::<()>();
        // Each service's tree ends on its own only when it gives up.
        let mut ended: Vec<futures::future::BoxFuture<'_, &str>> = Vec::new();
        if let Some(s) = self.supervisor.as_mut() {
            ended.push(s.until(never()).map(|_| "supervisor").boxed());
        }
        if let Some(q) = self.queue.as_mut() {
            ended.push(q.until(never()).map(|_| "queue").boxed());
        }
        if let Some(k) = self.knowledge.as_mut() {
            ended.push(k.until(never()).map(|_| "knowledge").boxed());
        }
        let singletons = &mut self.singletons;
        ended.push(
            async move {
                let which: &str = singletons.ended().await;
                which
            }
            .boxed(),
        );
        for r in self.runners.iter_mut() {
            ended.push(
                async move {
                    r.wait().await;
                    r.unit.as_str()
                }
                .boxed(),
            );
        }
        ended.push(never().map(|_| "").boxed());
        let lost = async {
            match &self.leader {
                Some(l) => l.lost().await,
                None => std::future::pending::<String>().await,
            }
        };
        let mut lease_lost = None;
        tokio::select! {
            _ = shutdown => {}
            (which, _, _) = futures::future::select_all(ended) => {
                warn!(service = which, "a service stopped on its own; stopping the rest")
            }
            why = lost => {
                error!(reason = %why, "the queue's lease is lost; stopping (start again to stand by)");
                lease_lost = Some(why);
            }
        }
        let r = self.stop().await;
        match lease_lost {
            Some(why) => Err(anyhow!("{why}: this instance stopped serving the queue")),
            None => r,
        }
    }

    /// Stops everything in the stop order above; the first error is
    /// returned after every service has been stopped.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let mut first: Option<anyhow::Error> = None;
        let mut keep = |r: anyhow::Result<()>| {
            if let Err(e) = r
                && first.is_none()
            {
                first = Some(e);
            }
        };
        if let Some(c) = self.console.take() {
            c.stop().await;
        }
        self.runners_stop.trigger();
        for mut r in self.runners.drain(..) {
            r.wait().await;
            keep(r.ended.unwrap_or(Ok(())));
        }
        for w in self.watches.drain(..) {
            let _ = w.await;
        }
        self.singletons.stop_early(&mut keep).await;
        if let Some(s) = self.supervisor.take() {
            keep(s.stop().await.context("supervisor"));
        }
        if let Some(k) = self.knowledge.take() {
            keep(k.stop().await.context("knowledge"));
        }
        if let Some(q) = self.queue.take() {
            keep(q.stop().await.context("queue"));
        }
        // The queue is stopped: a standby may take over at once.
        if let Some(l) = self.leader.take() {
            l.release().await;
        }
        self.singletons.stop(&mut keep).await;
        if let Some(l) = self.leased.take() {
            l.stop().await;
        }
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
