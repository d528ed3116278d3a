//! A sandbox: a real nats-server, a supervisor on it, and a test client.
#![allow(dead_code)]

use std::time::Duration;

use xo_bus::{Bus, NatsBus, NatsStore, Store, Subscription, typed};
use xo_proto::control::{ShowUnit, UnitDetail};
use xo_proto::{Format, SaluteReport, Steering, Subjects};
use xo_runtime::XoConfig;
use xo_supervisor::{Clock, SupervisorHandle};
use xo_tests::NatsServer;

pub const T: Duration = Duration::from_secs(10);
/// Clock start for manual time: 2026-01-01.
pub const EPOCH: u64 = 1_767_225_600_000;

pub struct Sandbox {
    pub nats: NatsServer,
    pub client: Bus,
    pub subjects: Subjects,
    pub cfg: XoConfig,
    pub clock: Clock,
    pub sup: Option<SupervisorHandle>,
}

pub fn config(overrides: &[(&str, &str)]) -> XoConfig {
    let o: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let empty = tempfile::tempdir().unwrap();
    let none = empty.path().join("none.toml");
    std::fs::write(&none, "").unwrap();
    XoConfig::load(Some(&none), &o).unwrap()
}

pub async fn connect(nats: &NatsServer, name: &str) -> Bus {
    let opts = xo_bus::nats::ConnectOptions {
        name: name.into(),
        ..Default::default()
    };
    Bus::Nats(NatsBus::connect(&nats.url(), opts).await.unwrap())
}

/// A connection named `name` and the store on it, under `cfg`'s prefix: what
/// a stateful service is started with.
pub async fn store(nats: &NatsServer, name: &str, cfg: &XoConfig) -> (Bus, Store) {
    let bus = connect(nats, name).await;
    let Bus::Nats(nb) = &bus else { unreachable!() };
    let s = Store::Nats(NatsStore::new(nb.client().clone(), &cfg.org.prefix));
    (bus, s)
}

impl Sandbox {
    pub async fn start(overrides: &[(&str, &str)]) -> Self {
        let nats = NatsServer::start();
        let client = connect(&nats, "test-client").await;
        let cfg = config(overrides);
        let mut sb = Self {
            subjects: cfg.subjects(),
            nats,
            client,
            cfg,
            clock: Clock::manual(EPOCH),
            sup: None,
        };
        sb.start_supervisor().await;
        sb
    }

    pub async fn start_supervisor(&mut self) {
        let bus = connect(&self.nats, "xo-supervisor").await;
        let Bus::Nats(nb) = &bus else { unreachable!() };
        let store = Store::Nats(NatsStore::new(nb.client().clone(), &self.cfg.org.prefix));
        self.sup = Some(
            xo_supervisor::start(
                xo_runtime::ServiceCtx::new(self.cfg.clone(), bus)
                    .with_store(store)
                    .with_clock(self.clock.clone()),
            )
            .await
            .unwrap(),
        );
    }

    pub async fn stop_supervisor(&mut self) -> Result<(), xo_supervisor::SupervisorError> {
        match self.sup.take() {
            Some(s) => s.stop().await,
            None => Ok(()),
        }
    }

    pub fn sup(&self) -> &SupervisorHandle {
        self.sup.as_ref().expect("supervisor running")
    }

    pub async fn steering(&self, unit: &str) -> Subscription {
        let s = self
            .client
            .subscribe(&self.subjects.steer(unit))
            .await
            .unwrap();
        self.client.flush().await.unwrap();
        s
    }

    pub async fn send(&self, r: &SaluteReport) {
        typed::publish(
            &self.client,
            &self.subjects.salute(&r.unit.unit),
            r,
            Format::Msgpack,
        )
        .await
        .unwrap();
    }

    /// Publishes a report and waits until the supervisor has evaluated it;
    /// returns the steering it caused (the supervisor publishes steering
    /// before it answers, and NATS keeps one publisher's order).
    pub async fn exchange(&self, sub: &mut Subscription, r: &SaluteReport) -> Vec<Steering> {
        self.send(r).await;
        self.wait_seq(&r.unit.unit, r.time.seq).await;
        drain(sub)
    }

    /// The supervisor's counters (`xo.ctl.supervisor.stats`).
    pub async fn stats(&self) -> xo_proto::control::StatsReply {
        typed::call(
            &self.client,
            &self.subjects,
            &xo_proto::control::SupervisorStats {},
            T,
        )
        .await
        .expect("the supervisor's stats")
    }

    pub async fn show(&self, unit: &str) -> Result<UnitDetail, typed::CallError> {
        typed::call(
            &self.client,
            &self.subjects,
            &ShowUnit { unit: unit.into() },
            T,
        )
        .await
    }

    pub async fn wait_seq(&self, unit: &str, seq: u64) -> UnitDetail {
        for _ in 0..3000 {
            if let Ok(d) = self.show(unit).await
                && d.summary.seq >= seq
            {
                return d;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("supervisor never evaluated seq {seq} of {unit}");
    }
}

pub fn drain(sub: &mut Subscription) -> Vec<Steering> {
    let mut out = Vec::new();
    while let Some(m) = sub.try_next() {
        out.push(typed::decode::<Steering>(&m, usize::MAX).expect("steering decodes"));
    }
    out
}

pub fn report(unit: &str, turn: u64) -> SaluteReport {
    let mut r = SaluteReport::new(unit, "coder", turn, turn);
    r.time.at = EPOCH + turn * 1000;
    r
}

/// The embedded setup the runner and review tests share: state in a
/// temporary directory, an in-process bus, and a queue on a file store.
pub struct LocalQueue {
    pub dir: tempfile::TempDir,
    pub cfg: XoConfig,
    pub bus: Bus,
    pub queue: xo_queue::QueueHandle,
}

impl LocalQueue {
    /// `overrides` come after `state.dir`, which points into the directory.
    pub async fn start(overrides: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state").display().to_string();
        let mut o = vec![("state.dir", state.as_str())];
        o.extend_from_slice(overrides);
        let cfg = config(&o);
        let bus = Bus::Local(xo_bus::LocalBus::new());
        let store = Store::File(xo_bus::FileStore::open(cfg.state.store_dir()).unwrap());
        let queue = xo_queue::start(
            xo_runtime::ServiceCtx::new(cfg.clone(), bus.clone())
                .with_store(store)
                .with_clock(Clock::System),
        )
        .await
        .unwrap();
        Self {
            dir,
            cfg,
            bus,
            queue,
        }
    }
}

/// Spans exported to memory, for tests on a current-thread runtime (the
/// subscriber is this thread's, so every span of the test is on it).
pub struct MemoryTraces {
    pub exporter: opentelemetry_sdk::trace::InMemorySpanExporter,
    pub provider: opentelemetry_sdk::trace::SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl MemoryTraces {
    pub fn start() -> Self {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt;
        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        xo_runtime::telemetry::install_propagator();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("xo-test")));
        Self {
            exporter,
            provider,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The spans finished so far.
    pub fn spans(&self) -> Vec<opentelemetry_sdk::trace::SpanData> {
        let _ = self.provider.force_flush();
        self.exporter.get_finished_spans().unwrap_or_default()
    }
}
