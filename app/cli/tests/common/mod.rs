//! The supervisor's rig on the harness: a real nats-server, the supervisor
//! started by the product's fabric (`xo_tests::sandbox`), a test client,
//! and a manual clock.
#![allow(dead_code)]

use std::time::Duration;

use xo_bus::{Bus, Store, Subscription, typed};
use xo_fabric::Slot;
use xo_proto::control::{ShowUnit, UnitDetail};
use xo_proto::{Format, SaluteReport, Steering, Subjects};
use xo_runtime::XoConfig;
use xo_supervisor::{Clock, SupervisorHandle};
use xo_tests::NatsServer;
use xo_tests::sandbox::{self, Started};

pub use xo_tests::sandbox::EPOCH;

pub const T: Duration = Duration::from_secs(10);

pub struct Sandbox {
    /// The harness this rig runs on.
    pub h: sandbox::Sandbox,
    /// The test's connection (the harness's).
    pub client: Bus,
    pub subjects: Subjects,
    pub cfg: XoConfig,
    pub clock: Clock,
    sup: Option<Started>,
}

pub async fn connect(nats: &NatsServer, name: &str) -> Bus {
    let opts = xo_bus::nats::ConnectOptions {
        name: name.into(),
        ..Default::default()
    };
    Bus::Nats(xo_bus::NatsBus::connect(&nats.url(), opts).await.unwrap())
}

impl Sandbox {
    pub async fn start(overrides: &[(&str, &str)]) -> Self {
        Self::on(sandbox::Sandbox::nats().with(overrides)).await
    }

    /// The rig on a sandbox the test describes (a configuration no key spells).
    pub async fn on(b: sandbox::Builder) -> Self {
        let h = b.build().await;
        let mut sb = Self {
            client: h.bus.clone(),
            subjects: h.subjects.clone(),
            cfg: h.cfg.clone(),
            clock: h.clock.clone(),
            h,
            sup: None,
        };
        sb.start_supervisor().await;
        sb
    }

    /// The nats-server under the rig.
    pub fn nats(&mut self) -> &mut NatsServer {
        self.h.nats.as_mut().expect("the rig runs on NATS")
    }

    /// A new connection named `name`, as another service would have.
    pub async fn connect(&self, name: &str) -> Bus {
        self.h.connect(name).await
    }

    /// A store on a connection of its own, under the rig's prefix.
    pub async fn store(&self, name: &str) -> Store {
        let Bus::Nats(nb) = self.h.connect(name).await else {
            unreachable!("the rig runs on NATS")
        };
        Store::Nats(xo_bus::NatsStore::new(
            nb.client().clone(),
            &self.cfg.org.prefix,
        ))
    }

    pub async fn start_supervisor(&mut self) {
        self.sup = Some(self.h.start(&[Slot::Supervisor]).await);
    }

    /// Stops the supervisor as its fabric does (state flushed); its error, if it ended on one.
    pub async fn stop_supervisor(&mut self) -> anyhow::Result<()> {
        match self.sup.take() {
            Some(s) => self.h.stop(s).await,
            None => Ok(()),
        }
    }

    pub fn sup(&self) -> &SupervisorHandle {
        self.h.get::<SupervisorHandle>()
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
        let what = format!("the supervisor evaluated seq {seq} of {unit}");
        xo_tests::until(&what, async || {
            self.show(unit).await.ok().filter(|d| d.summary.seq >= seq)
        })
        .await
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
