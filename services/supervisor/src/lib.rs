//! The XO supervisor service: radio checks on every SALUTE report, steering,
//! unit liveness, and macrocosm file mode.
//!
//! # Layout
//!
//! - [`start`] / [`run`]: wires the bus, the store and the actor tree; `run`
//!   takes its shutdown signal.
//! - [`root`]: the root actor — one [`watcher`] per unit, spawned on the
//!   unit's first report, restarted one-for-one with an intensity limit.
//! - [`watcher`]: a unit's radio state, latest report, health and steering.
//! - [`persist`]: coalesced writes of unit state to the store, and the
//!   rebuild after a restart.
//! - [`files`]: macrocosm file mode (`<volume>/reports`, `<volume>/steering`).
//! - [`control`]: the control API (`xo.ctl.supervisor.*`, a NATS micro service).
//!
//! Shutdown order ([`SupervisorHandle::stop`]): stop taking input (pumps,
//! file poller, control API), drain the actor tree, flush unit state to the
//! store, flush the bus.

pub mod control;
pub mod files;
pub mod persist;
pub mod root;
pub mod watcher;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::task::JoinHandle;
use tracing::{info, warn};
use xo_bus::typed;
use xo_bus::{Bus, Store};
use xo_proto::control::StatsReply;
use xo_proto::{Heartbeat, SaluteReport, Subjects};
use xo_radio::Roles;
use xo_runtime::XoConfig;

pub use root::RootMsg;

/// Errors of the supervisor service.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("bus: {0}")]
    Bus(#[from] xo_bus::BusError),
    #[error("store: {0}")]
    Store(#[from] xo_bus::StoreError),
    #[error("actor: {0}")]
    Actor(String),
    #[error("escalated: {0}")]
    Escalated(String),
}

pub type SupervisorResult<T> = Result<T, SupervisorError>;

pub use xo_runtime::Clock;

/// A counter bumped by watchers on every core: one cache line per shard,
/// so that cores do not take turns owning one line on every report.
#[derive(Debug, Default)]
pub struct Sharded([Padded; 8]);

#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

impl Sharded {
    pub fn incr(&self) {
        thread_local! {
            static SHARD: usize = {
                static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            };
        }
        let i = SHARD.with(|s| *s) % self.0.len();
        self.0[i].0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn load(&self) -> u64 {
        self.0.iter().map(|p| p.0.load(Ordering::Relaxed)).sum()
    }
}

/// Counters, shared by every part of the service.
#[derive(Debug, Default)]
pub struct Counters {
    pub reports: AtomicU64,
    pub heartbeats: AtomicU64,
    pub evaluated: Sharded,
    pub duplicates: AtomicU64,
    pub dead_letters: AtomicU64,
    pub steering: AtomicU64,
    pub watcher_restarts: AtomicU64,
}

impl Counters {
    pub fn snapshot(&self, units: u64) -> StatsReply {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsReply {
            reports: g(&self.reports),
            heartbeats: g(&self.heartbeats),
            evaluated: self.evaluated.load(),
            duplicates: g(&self.duplicates),
            dead_letters: g(&self.dead_letters),
            steering: g(&self.steering),
            units,
            watcher_restarts: g(&self.watcher_restarts),
        }
    }
}

/// What every actor of the service shares (configuration, not state).
#[derive(Debug)]
pub struct Ctx {
    pub bus: Bus,
    pub store: Store,
    pub subjects: Subjects,
    pub cfg: XoConfig,
    pub roles: Roles,
    pub clock: Clock,
    pub counters: Counters,
    pub persist: persist::Persister,
    /// Macrocosm volume, if file mode is on.
    pub volume: Option<PathBuf>,
    /// Routes to watchers the root has spawned, so that messages skip it.
    pub routes: std::sync::RwLock<xo_radio::FnvMap<String, ActorRef<watcher::WatcherMsg>>>,
}

impl Ctx {
    /// Sends a message to a unit's watcher directly if it has one, else
    /// through the root (which spawns it). For heartbeats (which only mark
    /// the unit seen) and file reports (one per poll): a message still
    /// queued at the root can be overtaken by a later one sent directly once
    /// the route appears.
    /// Bus reports do not come this way (see `pump_reports`).
    pub fn route(&self, root: &ActorRef<RootMsg>, unit: &str, msg: watcher::WatcherMsg) -> bool {
        let direct = self.routes.read().ok().and_then(|r| r.get(unit).cloned());
        let msg = match direct {
            Some(w) => match w.cast(msg) {
                Ok(()) => return true,
                Err(ractor::MessagingErr::SendErr(m)) => m,
                Err(_) => return false,
            },
            None => msg,
        };
        root.cast(RootMsg::Route(unit.to_string(), msg)).is_ok()
    }
}

/// A running supervisor.
#[derive(Debug)]
pub struct SupervisorHandle {
    pub ctx: Arc<Ctx>,
    root: Option<ActorRef<RootMsg>>,
    root_task: Option<JoinHandle<()>>,
    inputs: Vec<JoinHandle<()>>,
    flusher: Option<JoinHandle<()>>,
    escalation: Arc<std::sync::Mutex<Option<String>>>,
}

/// Starts the supervisor: rebuilds unit state from the store, subscribes to
/// reports and heartbeats, serves the control API. With supervision disabled
/// it returns a handle that does nothing: no subscriptions, no timers.
pub async fn start(
    cfg: XoConfig,
    bus: Bus,
    store: Store,
    clock: Clock,
) -> SupervisorResult<SupervisorHandle> {
    let volume = (!cfg.supervisor.volume.is_empty()).then(|| PathBuf::from(&cfg.supervisor.volume));
    let ctx = Arc::new(Ctx {
        subjects: cfg.subjects(),
        roles: cfg.roles(),
        persist: persist::Persister::new(store.clone()),
        bus,
        store,
        clock,
        counters: Counters::default(),
        volume,
        cfg,
        routes: Default::default(),
    });
    let escalation = Arc::new(std::sync::Mutex::new(None));
    let mut handle = SupervisorHandle {
        ctx: ctx.clone(),
        root: None,
        root_task: None,
        inputs: Vec::new(),
        flusher: None,
        escalation: escalation.clone(),
    };
    if !ctx.cfg.supervisor.enabled {
        info!("supervision disabled: no subscriptions, no timers");
        return Ok(handle);
    }
    let restored = persist::load_all(&ctx.store).await;
    let (root, root_task) = Actor::spawn(
        None,
        root::Root,
        root::RootArgs {
            ctx: ctx.clone(),
            restored,
            escalation,
        },
    )
    .await
    .map_err(|e| SupervisorError::Actor(e.to_string()))?;
    handle.root = Some(root.clone());
    handle.root_task = Some(root_task);
    handle.flusher = Some(
        ctx.persist
            .spawn_flusher(Duration::from_millis(ctx.cfg.supervisor.flush_interval_ms)),
    );
    handle.inputs.push(pump_reports(&ctx, &root).await?);
    handle.inputs.push(pump_heartbeats(&ctx, &root).await?);
    handle
        .inputs
        .push(control::serve(ctx.clone(), root.clone()).await?);
    handle.inputs.push(spawn_ticker(&ctx, &root));
    if let Some(volume) = ctx.volume.clone() {
        handle
            .inputs
            .push(files::spawn_poller(ctx.clone(), root.clone(), volume));
    }
    ctx.bus.flush().await?;
    info!(
        bus = ctx.bus.kind(),
        prefix = ctx.subjects.prefix(),
        "supervisor started"
    );
    Ok(handle)
}

/// Runs the supervisor until `shutdown` resolves (or it escalates).
pub async fn run(
    cfg: XoConfig,
    bus: Bus,
    store: Store,
    shutdown: impl std::future::Future<Output = ()>,
) -> SupervisorResult<()> {
    let mut handle = start(cfg, bus, store, Clock::System).await?;
    // The tree ends on its own only when it escalates: wait for that or for
    // the shutdown signal, whichever comes first (no polling).
    match handle.root_task.as_mut() {
        Some(root_task) => {
            tokio::select! {
                _ = shutdown => {}
                _ = root_task => {
                    handle.root_task = None;
                }
            }
        }
        None => shutdown.await,
    }
    handle.stop().await
}

impl SupervisorHandle {
    pub fn root(&self) -> Option<&ActorRef<RootMsg>> {
        self.root.as_ref()
    }

    /// Runs a liveness check now (tests drive time with a manual clock).
    pub async fn tick(&self) {
        if let Some(root) = &self.root {
            let now = self.ctx.clock.now_ms();
            let _ = root.call(|port| RootMsg::Tick(now, Some(port)), None).await;
        }
    }

    /// Why the tree gave up, if it did.
    pub fn escalation(&self) -> Option<String> {
        self.escalation.lock().ok().and_then(|e| e.clone())
    }

    /// Shuts down in order: inputs, actors, state flush, bus flush.
    pub async fn stop(mut self) -> SupervisorResult<()> {
        for t in self.inputs.drain(..) {
            t.abort();
        }
        if let Some(root) = self.root.take() {
            root.stop(None);
        }
        if let Some(t) = self.root_task.take() {
            let _ = t.await;
        }
        if let Some(f) = self.flusher.take() {
            f.abort();
        }
        self.ctx.persist.flush().await;
        if let Err(e) = self.ctx.bus.flush().await {
            warn!(error = %e, "bus flush at shutdown failed");
        }
        match self.escalation() {
            Some(e) => Err(SupervisorError::Escalated(e)),
            None => Ok(()),
        }
    }
}

/// Reads reports and hands each, undecoded, to its unit's watcher, which
/// decodes and checks it: decoding (most of the cost of ingest) runs on
/// every core, and a report crosses one task boundary between the NATS
/// client and its check. The pump is the only sender of a unit's reports,
/// straight into its watcher's mailbox, so their order is kept. The first
/// report of a unit is decoded here, before the root is asked for its
/// watcher, so that malformed messages never spawn one.
async fn pump_reports(
    ctx: &Arc<Ctx>,
    root: &ActorRef<RootMsg>,
) -> SupervisorResult<JoinHandle<()>> {
    let mut sub = ctx.bus.subscribe(&ctx.subjects.salute_all()).await?;
    let (ctx, root) = (ctx.clone(), root.clone());
    Ok(tokio::spawn(async move {
        // The pump's own routes: no shared lock per report.
        let mut routes: xo_radio::FnvMap<String, ActorRef<watcher::WatcherMsg>> =
            Default::default();
        while let Some(msg) = sub.next().await {
            ctx.counters.reports.fetch_add(1, Ordering::Relaxed);
            let route = ctx
                .subjects
                .unit_of(&msg.subject)
                .and_then(|unit| route_to(&ctx, &mut routes, unit));
            let msg = match route {
                Some((unit, w)) => match w.cast(watcher::WatcherMsg::Received(msg)) {
                    Ok(()) => continue,
                    // Its watcher stopped (and is being restarted): ask the
                    // root again, below.
                    Err(ractor::MessagingErr::SendErr(watcher::WatcherMsg::Received(m))) => {
                        let unit = unit.clone();
                        routes.remove(&unit);
                        m
                    }
                    Err(e) => {
                        let unit = unit.clone();
                        routes.remove(&unit);
                        warn!(unit = %unit, error = %e, "report lost: its watcher is gone");
                        continue;
                    }
                },
                None => msg,
            };
            // A unit's first report (or a subject without a unit, which
            // fails here: the report's unit must be the subject's).
            let report = match decode_report(&ctx, &msg) {
                Ok(r) => r,
                Err(e) => {
                    reject(&ctx, &msg, &e).await;
                    continue;
                }
            };
            let unit = report.unit.unit.clone();
            let Ok(ractor::rpc::CallResult::Success(w)) = root
                .call(|port| RootMsg::Spawn(unit.clone(), port), None)
                .await
            else {
                return; // the tree is gone
            };
            let m = watcher::WatcherMsg::Report(Box::new(report), msg.headers, msg.payload);
            if w.cast(m).is_ok() {
                routes.insert(unit, w);
            } else {
                warn!(unit = %unit, "report lost: a new watcher stopped before its first report");
            }
        }
    }))
}

/// The pump's route to a unit's watcher: its own, else one the root
/// published (a watcher restored from the store, or spawned for a heartbeat
/// or a file report), which is safe to take over since no report of the
/// unit is queued at the root: the pump never sends reports through it.
fn route_to<'a>(
    ctx: &Ctx,
    routes: &'a mut xo_radio::FnvMap<String, ActorRef<watcher::WatcherMsg>>,
    unit: &str,
) -> Option<(&'a String, &'a ActorRef<watcher::WatcherMsg>)> {
    if !routes.contains_key(unit) {
        let shared = ctx.routes.read().ok()?.get(unit).cloned()?;
        routes.insert(unit.to_owned(), shared);
    }
    routes.get_key_value(unit)
}

/// Decodes a report and checks that its unit is the subject's.
pub(crate) fn decode_report(
    ctx: &Ctx,
    msg: &xo_bus::Message,
) -> Result<SaluteReport, xo_proto::CodecError> {
    typed::decode::<SaluteReport>(msg, ctx.cfg.wire.max_payload)
        .and_then(|r| check_subject_unit(&ctx.subjects, &msg.subject, &r.unit.unit).map(|_| r))
}

async fn pump_heartbeats(
    ctx: &Arc<Ctx>,
    root: &ActorRef<RootMsg>,
) -> SupervisorResult<JoinHandle<()>> {
    let mut sub = ctx.bus.subscribe(&ctx.subjects.heartbeat_all()).await?;
    let (ctx, root) = (ctx.clone(), root.clone());
    Ok(tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            ctx.counters.heartbeats.fetch_add(1, Ordering::Relaxed);
            match typed::decode::<Heartbeat>(&msg, ctx.cfg.wire.max_payload).and_then(|h| {
                xo_proto::validate_unit_id(&h.unit)
                    .map_err(|reason| xo_proto::CodecError::Invalid {
                        ty: "Heartbeat",
                        reason,
                    })
                    .and_then(|_| check_subject_unit(&ctx.subjects, &msg.subject, &h.unit))
                    .map(|_| h)
            }) {
                Ok(hb) => {
                    let unit = hb.unit.clone();
                    if !ctx.route(&root, &unit, watcher::WatcherMsg::Heartbeat(hb)) {
                        break;
                    }
                }
                Err(e) => reject(&ctx, &msg, &e).await,
            }
        }
    }))
}

/// A unit may only report for itself: the subject's unit must match.
fn check_subject_unit(
    subjects: &Subjects,
    subject: &str,
    unit: &str,
) -> Result<(), xo_proto::CodecError> {
    match subjects.unit_of(subject) {
        Some(u) if u == unit => Ok(()),
        other => Err(xo_proto::CodecError::Invalid {
            ty: "SaluteReport",
            reason: format!(
                "unit {unit:?} does not match the subject's unit {:?}",
                other.unwrap_or("")
            ),
        }),
    }
}

/// Counts, logs and dead-letters a message that could not be used.
pub(crate) async fn reject(ctx: &Ctx, msg: &xo_bus::Message, err: &xo_proto::CodecError) {
    ctx.counters.dead_letters.fetch_add(1, Ordering::Relaxed);
    warn!(subject = %msg.subject, reason = err.code(), error = %err, "message dead-lettered");
    typed::dead_letter(&ctx.bus, &ctx.subjects, msg, err).await;
}

fn spawn_ticker(ctx: &Arc<Ctx>, root: &ActorRef<RootMsg>) -> JoinHandle<()> {
    let (ctx, root) = (ctx.clone(), root.clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(ctx.cfg.supervisor.tick_ms));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if root.cast(RootMsg::Tick(ctx.clock.now_ms(), None)).is_err() {
                break;
            }
        }
    })
}
