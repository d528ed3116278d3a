//! The one in-process harness: the services a test names, started by the
//! fabric the product starts ([`Fabric::start_with_clock`], in the
//! product's slot order), on the embedded bus and file store or on a real
//! nats-server, with a clock the test owns.
//!
//! ```ignore
//! let mut sb = Sandbox::nats().set("supervisor.stale_after_ms", "5000").build().await;
//! let sup = sb.start(&[Slot::Supervisor]).await;
//! sb.clock.advance(Duration::from_secs(6)); // a unit goes stale
//! sb.stop(sup).await.unwrap();              // its state flushed, as in production
//! ```
//!
//! A sandbox keeps one state folder, one configuration (the defaults, the
//! test's overrides, everything under the folder), one store and one
//! client connection; each [`Sandbox::start`] is a fabric of its own on a
//! connection of its own, so a test stops and starts a service (a restart,
//! a failover) while the rest run on.

use std::path::Path;
use std::time::Duration;

use xo_bus::file_store::SyncMode;
use xo_bus::{Bus, Client, FileStore, LocalBus, NatsBus, NatsStore, Store, typed};
use xo_fabric::{Fabric, Plan, Slot};
use xo_proto::Subjects;
use xo_runtime::{Clock, Service, XoConfig};

use crate::NatsServer;

/// Where a manual clock starts: 2026-01-01T00:00:00Z.
pub const EPOCH: u64 = 1_767_225_600_000;

/// How long a call of the sandbox's client waits before it says nobody answered.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The configuration a test runs under: the defaults (no file is read) and
/// `overrides`, as `XO__…` variables would give them.
pub fn config(overrides: &[(&str, &str)]) -> XoConfig {
    let empty = tempfile::tempdir().expect("a temporary folder");
    let none = empty.path().join("none.toml");
    std::fs::write(&none, "").expect("an empty config file");
    load(&none, overrides)
}

/// `file` under `overrides`.
fn load(file: &Path, overrides: &[(&str, &str)]) -> XoConfig {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    XoConfig::load(Some(file), &o)
        .unwrap_or_else(|e| panic!("config {} with {overrides:?}: {e:#}", file.display()))
}

/// A plan of the services named ([`Plan::of`]); runners and watches take
/// options, so a test puts them in a [`Plan`] itself.
pub fn plan(slots: &[Slot]) -> Plan {
    assert!(
        !slots
            .iter()
            .any(|s| matches!(s, Slot::Watch | Slot::Runners)),
        "runners and watches take options: set them in the Plan"
    );
    Plan::of(slots)
}

/// Which bus the services talk on.
#[derive(Debug)]
enum On {
    Embedded,
    Nats,
}

/// A change to the configuration that no `XO__…` key spells (a list of webhooks).
type Edit = Box<dyn FnOnce(&mut XoConfig) + Send>;

/// How a [`Sandbox`] is made: [`Sandbox::embedded`] or [`Sandbox::nats`].
pub struct Builder {
    on: On,
    file: Option<std::path::PathBuf>,
    overrides: Vec<(String, String)>,
    edits: Vec<Edit>,
    clock: Clock,
}

impl Builder {
    /// A configuration file under the keys (the shipped
    /// `deploy/config/xo.toml`, say), instead of the defaults alone.
    pub fn file(mut self, path: &Path) -> Self {
        self.file = Some(path.to_path_buf());
        self
    }

    /// One configuration key, as `XO__SECTION__KEY` would set it.
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        self.overrides.push((key.to_string(), value.into()));
        self
    }

    /// Several keys at once.
    pub fn with(mut self, overrides: &[(&str, &str)]) -> Self {
        for (k, v) in overrides {
            self.overrides.push((k.to_string(), v.to_string()));
        }
        self
    }

    /// Changes the configuration after the keys (webhooks, watches: lists
    /// and tables a key does not spell).
    pub fn edit(mut self, f: impl FnOnce(&mut XoConfig) + Send + 'static) -> Self {
        self.edits.push(Box::new(f));
        self
    }

    /// The services' clock (a [`Clock::manual`] at [`EPOCH`] unless given).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The sandbox, with nothing started yet.
    pub async fn build(self) -> Sandbox {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let state = dir.path().display().to_string();
        let mut o: Vec<(&str, &str)> = vec![("state.dir", &state)];
        o.extend(self.overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut cfg = match &self.file {
            None => config(&o),
            Some(f) => load(f, &o),
        };
        for edit in self.edits {
            edit(&mut cfg);
        }
        let (nats, local, store) = match self.on {
            On::Embedded => {
                let files = FileStore::open_with(cfg.state.store_dir(), SyncMode::Always)
                    .expect("the embedded store in a temporary folder");
                (None, Some(LocalBus::new()), Store::File(files))
            }
            On::Nats => {
                let nats = NatsServer::start();
                let store = nats_store(&nats, "xo-test-store", &cfg).await;
                (Some(nats), None, store)
            }
        };
        let mut sb = Sandbox {
            subjects: cfg.subjects(),
            cfg,
            clock: self.clock,
            nats,
            local,
            store,
            bus: Bus::Local(LocalBus::new()),
            dir,
            fabrics: Vec::new(),
        };
        sb.bus = sb.connect("test-client").await;
        sb
    }
}

async fn nats_bus(nats: &NatsServer, name: &str) -> NatsBus {
    let opts = xo_bus::nats::ConnectOptions {
        name: name.into(),
        ..Default::default()
    };
    NatsBus::connect(&nats.url(), opts)
        .await
        .unwrap_or_else(|e| panic!("connecting {name} to {}: {e}", nats.url()))
}

async fn nats_store(nats: &NatsServer, name: &str, cfg: &XoConfig) -> Store {
    let b = nats_bus(nats, name).await;
    Store::Nats(NatsStore::with_replicas(
        b.client().clone(),
        &cfg.org.prefix,
        cfg.nats.replicas,
    ))
}

/// `xo-` and the services of `plan`, in slot order.
fn connection_name(plan: &Plan) -> String {
    let named = [
        (plan.notify, "notify"),
        (plan.queue, "queue"),
        (plan.knowledge, "knowledge"),
        (plan.supervisor, "supervisor"),
        (plan.fleet, "fleet"),
        (plan.review, "review"),
        (!plan.watches.is_empty(), "watch"),
        (!plan.runners.is_empty(), "runner"),
        (plan.console != xo_fabric::ConsoleMode::Off, "console"),
    ];
    let names: Vec<&str> = named
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
    format!("xo-{}", names.join("-"))
}

/// A fabric a sandbox started, to stop by [`Sandbox::stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started(usize);

/// Services on one bus and store, with the test's client and clock.
#[derive(Debug)]
pub struct Sandbox {
    /// Everything the services read: defaults, the test's keys, paths under [`Sandbox::dir`].
    pub cfg: XoConfig,
    pub subjects: Subjects,
    /// The services' clock: advance it to age units, leases, reminders.
    pub clock: Clock,
    /// The nats-server, on NATS (to restart or kill it mid-test).
    pub nats: Option<NatsServer>,
    /// The test's own connection.
    pub bus: Bus,
    /// The store the services keep their state in.
    pub store: Store,
    local: Option<LocalBus>,
    dir: tempfile::TempDir,
    fabrics: Vec<Option<Fabric>>,
}

impl Sandbox {
    /// Services on the embedded bus and file store (as `xo up` runs them).
    pub fn embedded() -> Builder {
        Builder {
            on: On::Embedded,
            file: None,
            overrides: Vec::new(),
            edits: Vec::new(),
            clock: Clock::manual(EPOCH),
        }
    }

    /// Services on a real nats-server of their own, started now.
    pub fn nats() -> Builder {
        Builder {
            on: On::Nats,
            file: None,
            overrides: Vec::new(),
            edits: Vec::new(),
            clock: Clock::manual(EPOCH),
        }
    }

    /// The state folder (the store, data, sandboxes, knowledge beneath it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A new connection named `name` (NATS), or the embedded bus.
    pub async fn connect(&self, name: &str) -> Bus {
        match (&self.nats, &self.local) {
            (Some(n), _) => Bus::Nats(nats_bus(n, name).await),
            (None, Some(l)) => Bus::Local(l.clone()),
            (None, None) => unreachable!("a sandbox is on NATS or embedded"),
        }
    }

    /// The context the fabric gives a service here (the configuration, a
    /// connection named `name`, the store, the clock), for a test of a
    /// service's own shape (its handle's `until` and `stop`) that starts
    /// it without a fabric.
    pub async fn ctx(&self, name: &str) -> xo_runtime::ServiceCtx {
        let store = self.store_for(name).await;
        xo_runtime::ServiceCtx::new(self.cfg.clone(), self.connect(name).await)
            .with_store(store)
            .with_clock(self.clock.clone())
    }

    /// The services' store as a process named `name` sees it: on NATS over
    /// a connection of its own (to read what a service wrote, or to spoil
    /// it), embedded the one file store.
    pub async fn store_for(&self, name: &str) -> Store {
        match &self.nats {
            Some(n) => nats_store(n, &format!("{name}-store"), &self.cfg).await,
            None => self.store.clone(),
        }
    }

    /// Starts the services named, as one fabric on a connection of its own.
    pub async fn start(&mut self, slots: &[Slot]) -> Started {
        self.start_plan(plan(slots)).await
    }

    /// Starts `plan` as one fabric, and returns once its services run
    /// (on NATS the notifier, reviewers and fleet manager once their lease
    /// is taken: a second fabric running them would stand by, so a test
    /// runs them in one); panics, saying why, if it does not start.
    pub async fn start_plan(&mut self, plan: Plan) -> Started {
        self.try_start(plan)
            .await
            .unwrap_or_else(|e| panic!("starting the sandbox's services: {e:#}"))
    }

    /// Starts `plan` as one fabric on a clock of its own (a console on a
    /// manual clock beside services on the system's, say).
    pub async fn start_on_clock(&mut self, plan: Plan, clock: Clock) -> Started {
        self.try_start_on(plan, clock)
            .await
            .unwrap_or_else(|e| panic!("starting the sandbox's services: {e:#}"))
    }

    /// Starts `plan` as one fabric, or says why not.
    pub async fn try_start(&mut self, plan: Plan) -> anyhow::Result<Started> {
        self.try_start_on(plan, self.clock.clone()).await
    }

    async fn try_start_on(&mut self, plan: Plan, clock: Clock) -> anyhow::Result<Started> {
        // Named after what it runs (`xo-supervisor`, `xo-queue-knowledge`), as
        // the server's monitor shows it.
        let name = connection_name(&plan);
        let bus = self.connect(&name).await;
        let store = self.store_for(&name).await;
        // On the heap: the services' start futures together are deep for a
        // test thread's stack.
        let f = Box::pin(Fabric::start_with_clock(
            &self.cfg,
            plan,
            bus,
            Some(store),
            clock,
        ))
        .await?;
        // On NATS the singletons start once their lease is taken: a test
        // begins when they run, as an operator's fleet does.
        f.singletons_running().await;
        self.fabrics.push(Some(f));
        Ok(Started(self.fabrics.len() - 1))
    }

    /// Stops one fabric in the product's order (its state flushed).
    pub async fn stop(&mut self, which: Started) -> anyhow::Result<()> {
        match self.fabrics.get_mut(which.0).and_then(Option::take) {
            Some(f) => f.stop().await,
            None => Ok(()),
        }
    }

    /// Stops every fabric still running, the last started first.
    pub async fn stop_all(&mut self) -> anyhow::Result<()> {
        let mut first = Ok(());
        for f in self.fabrics.iter_mut().rev() {
            if let Some(f) = f.take() {
                let r = f.stop().await;
                if first.is_ok() {
                    first = r;
                }
            }
        }
        first
    }

    /// The running fabric `which`.
    pub fn fabric(&self, which: Started) -> &Fabric {
        self.fabrics[which.0]
            .as_ref()
            .expect("a fabric still running")
    }

    /// The running service of type `T` (the most recently started one).
    pub fn get<T: Service>(&self) -> &T {
        self.fabrics
            .iter()
            .rev()
            .flatten()
            .find_map(|f| f.get::<T>())
            .unwrap_or_else(|| panic!("no {} runs in this sandbox", std::any::type_name::<T>()))
    }

    /// The running queue (the most recently started one).
    pub fn queue(&self) -> &xo_queue::QueueHandle {
        self.fabrics
            .iter()
            .rev()
            .flatten()
            .find_map(Fabric::queue)
            .expect("no queue runs in this sandbox")
    }

    /// A client of the services on the test's connection.
    pub fn client(&self) -> Client {
        Client::new(self.bus.clone(), self.subjects.clone()).with_timeout(CALL_TIMEOUT)
    }

    /// One call of a service's verb.
    pub async fn call<R: xo_proto::Request>(&self, r: &R) -> Result<R::Response, typed::CallError> {
        self.client().call(r).await
    }

    /// One call that must be answered well.
    pub async fn must<R: xo_proto::Request>(&self, r: &R) -> R::Response {
        self.call(r)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", std::any::type_name::<R>()))
    }
}
