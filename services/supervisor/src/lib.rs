//! The XO supervisor service: radio checks on every SALUTE report, steering,
//! unit liveness, and macrocosm file mode.
//!
//! # Layout
//!
//! - this file: wiring only — [`start`] builds the tree and its inputs (each
//!   ending on the service's shutdown signal), [`SupervisorHandle::stop`] stops in order.
//! - [`ctx`]: what every part shares (configuration, handles, counters).
//! - [`ingest`]: the inputs — the report pump, the heartbeat pump, the
//!   macrocosm file poller (`<volume>/reports`), the settings follower.
//! - [`decode`]: decoding, the subject's unit against the message's, dead
//!   letters (bus input and rejected report files alike).
//! - [`root`]: the root actor — owns the route table and the [`group`]s,
//!   starts a unit's [`watcher`] on its first report, restarts watchers
//!   one-for-one with an intensity limit; answers the control API
//!   (`xo.ctl.supervisor.*`).
//! - [`group`]: actors holding the watchers of many units each (a unit's
//!   group fixed by its id); [`inbox`]: what waits for a group, bounded
//!   (past `supervisor.inbox_high`, each unit's latest report only).
//! - [`watcher`]: a unit's radio state, latest report, health and steering.
//! - [`live`]: operator settings in force (role profiles, steering on/off).
//! - [`outbox`]: where steering goes (the bus, and the volume's steering files).
//! - [`persist`]: coalesced writes of unit state to the store, and the
//!   rebuild after a restart.
//!
//! A report's path: `ingest::pump_reports` → its watcher (decode, check,
//! radio) → `outbox::send`. Shutdown order ([`SupervisorHandle::stop`]):
//! stop taking input (pumps, file poller, ticker, control API), drain the
//! actor tree, flush unit state to the store, flush the bus.

pub mod ctx;
pub mod decode;
pub mod front;
pub mod group;
pub mod inbox;
pub mod ingest;
pub mod live;
pub mod membership;
pub mod msg;
pub mod outbox;
pub mod persist;
pub mod root;
pub mod shard;
pub mod watcher;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::task::JoinHandle;
use tracing::{info, warn};
use xo_bus::api::ActorPorts;
use xo_proto::control::SupervisorApi;
use xo_runtime::ServiceCtx;
use xo_runtime::tree::{Escalation, EscalationCell, Factory, Intensity, Running, Shutdown};

pub use ctx::{Counters, Ctx, Sharded};
pub use root::RootMsg;
pub use xo_runtime::Clock;

/// Errors of the supervisor service.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
    /// The runtime: an actor tree that did not start or gave up, no store.
    #[error(transparent)]
    Runtime(#[from] xo_runtime::RuntimeError),
    #[error("{0}")]
    Config(String),
}

xo_bus::bus_error_from!(SupervisorError);
xo_runtime::runtime_error_from!(SupervisorError);

pub type SupervisorResult<T> = Result<T, SupervisorError>;

/// A running supervisor.
#[derive(Debug)]
pub struct SupervisorHandle {
    pub ctx: Arc<Ctx>,
    /// `None` with supervision disabled: nothing runs.
    running: Option<Running<RootMsg>>,
    /// Sharded: the actor answering the shared control API.
    front: Option<Running<front::FrontMsg>>,
    flusher: Option<(Shutdown, JoinHandle<()>)>,
}

/// Starts the supervisor: rebuilds unit state from the store, subscribes to
/// reports and heartbeats, serves the control API. With supervision disabled
/// it returns a handle that does nothing: no subscriptions, no timers.
pub async fn start(sctx: ServiceCtx) -> SupervisorResult<SupervisorHandle> {
    let store = sctx.store("the supervisor")?;
    let ServiceCtx {
        cfg,
        bus,
        clock,
        shutdown,
        ..
    } = sctx;
    let volume = (!cfg.supervisor.volume.is_empty()).then(|| PathBuf::from(&cfg.supervisor.volume));
    let shard = (cfg.supervisor.enabled && cfg.supervisor.partitions > 1).then(|| {
        Arc::new(shard::Shard::new(
            shard::instance_name(&cfg.supervisor.instance),
            cfg.supervisor.partitions,
            Duration::from_millis(cfg.supervisor.partition_lease_ms),
        ))
    });
    let ctx = Arc::new(Ctx {
        subjects: cfg.subjects(),
        live: live::Live::new(&cfg),
        persist: persist::Persister::new(store.clone(), cfg.supervisor.steering_history),
        bus,
        store,
        clock,
        counters: Counters::default(),
        hearing: xo_bus::Hearing::new("units"),
        inboxes: (0..group::GROUPS).map(|_| Arc::default()).collect(),
        volume,
        shard,
        cfg,
    });
    let base = ctx.cfg.supervisor.persist_interval_ms;
    ctx.persist
        .set_every_ms(ctx.cfg.supervisor.persist_every_ms(0), base);
    if !ctx.cfg.supervisor.enabled {
        info!("supervision disabled: no subscriptions, no timers");
        return Ok(SupervisorHandle {
            ctx,
            running: None,
            front: None,
            flusher: None,
        });
    }
    if let Some(shard) = &ctx.shard {
        shard::check_mapping(&ctx, shard).await?;
        shard::keep_reports(&ctx).await?;
    }
    let routes = Arc::new(root::Routes::default());
    // Sharded: each partition's units are read when it is taken.
    let restored = match ctx.shard {
        Some(_) => Vec::new(),
        None => persist::load_all(&ctx.store).await?,
    };
    let escalation = EscalationCell::default();
    let (root, root_task) = Actor::spawn(
        None,
        root::Root,
        root::RootArgs {
            ctx: ctx.clone(),
            routes: routes.clone(),
            restored,
            escalation: escalation.clone(),
        },
    )
    .await
    .map_err(|e| Escalation::start("supervisor", e))?;
    let mut running = Running::with_root("supervisor", root.clone(), root_task, escalation)
        .ending_on(shutdown.clone());
    let flush_stop = Shutdown::new();
    let flusher = ctx.persist.spawn_flusher(
        Duration::from_millis(ctx.cfg.supervisor.flush_interval_ms),
        flush_stop.signal(),
    );
    running.input(ingest::follow_settings(&ctx, running.signal()).await?);
    let mut front = None;
    match ctx.shard.clone() {
        None => {
            let beats = ctx.bus.subscribe(&ctx.subjects.heartbeat_all()).await?;
            let signal = running.signal();
            running.input(ingest::pump_all_reports(&ctx, &root, &routes, signal).await?);
            let signal = running.signal();
            running.input(ingest::pump_heartbeats(&ctx, &root, &routes, beats, signal).await?);
            running.input(
                xo_bus::api::serve::<SupervisorApi<ActorPorts>, _>(
                    &ctx.bus,
                    &ctx.subjects,
                    ctx.cfg.wire.max_payload,
                    "XO supervisor: units, steering",
                    root.clone(),
                    running.signal(),
                )
                .await?,
            );
        }
        Some(shard) => {
            // This instance's own API (what the others forward to), then
            // the shared one, which any instance answers.
            running.input(
                xo_bus::api::serve_in::<SupervisorApi<ActorPorts>, _>(
                    &ctx.bus,
                    ctx.subjects.ctl_instance_group("supervisor", &shard.me),
                    ctx.cfg.wire.max_payload,
                    "XO supervisor (one instance of the sharded ones)",
                    root.clone(),
                    running.signal(),
                )
                .await?,
            );
            // The shared API's actor, under a root of its own.
            let state = front::FrontState {
                ctx: ctx.clone(),
                root: root.clone(),
                shard: shard.clone(),
            };
            let factory: Factory<front::Front> = Arc::new(move || {
                let state = state.clone();
                Box::pin(async move { Ok(state) })
            });
            let mut f = Running::one_for_one(
                "supervisor front",
                front::Front,
                Intensity::of(&ctx.cfg),
                factory,
            )
            .await?
            .ending_on(shutdown.clone());
            f.input(
                xo_bus::api::serve::<SupervisorApi<ActorPorts>, _>(
                    &ctx.bus,
                    &ctx.subjects,
                    ctx.cfg.wire.max_payload,
                    "XO supervisor: units, steering (sharded: any instance answers)",
                    f.current.clone(),
                    f.signal(),
                )
                .await?,
            );
            front = Some(f);
            running.input(shard::spawn(
                ctx.clone(),
                root.clone(),
                routes.clone(),
                shard.clone(),
                running.signal(),
            ));
            info!(instance = %shard.me, partitions = shard.partitions, lease_ms = shard.lease.as_millis() as u64, "sharded supervision: taking a share of the partitions");
        }
    }
    let clock = ctx.clock.clone();
    running.every(
        Duration::from_millis(ctx.cfg.supervisor.tick_ms),
        move || RootMsg::Tick(clock.now_ms(), None),
    );
    if let Some(volume) = ctx.volume.clone() {
        let poller = ingest::spawn_poller(ctx.clone(), root, routes, volume, running.signal());
        running.input(poller);
    }
    ctx.bus.flush().await?;
    info!(
        bus = ctx.bus.kind(),
        prefix = ctx.subjects.prefix(),
        "supervisor started"
    );
    Ok(SupervisorHandle {
        ctx,
        running: Some(running),
        front,
        flusher: Some((flush_stop, flusher)),
    })
}

impl SupervisorHandle {
    pub fn root(&self) -> Option<&ActorRef<RootMsg>> {
        self.running.as_ref().map(|r| &r.root)
    }

    /// Runs a liveness check now (tests drive time with a manual clock).
    pub async fn tick(&self) {
        if let Some(root) = self.root() {
            let now = self.ctx.clock.now_ms();
            let _ = root.call(|port| RootMsg::Tick(now, Some(port)), None).await;
        }
    }

    /// Why the tree gave up, if it did.
    pub fn escalation(&self) -> Option<Escalation> {
        self.running.as_ref().and_then(|r| r.escalation())
    }

    /// Waits for `shutdown`, or for the tree to end on its own (it does only
    /// when it escalates), whichever comes first (no polling).
    pub async fn until(&mut self, shutdown: impl std::future::Future<Output = ()>) {
        let never = std::future::pending::<()>;
        let front = async {
            match self.front.as_mut() {
                Some(f) => f.until(never()).await,
                None => never().await,
            }
        };
        match self.running.as_mut() {
            Some(r) => {
                tokio::select! {
                    _ = r.until(shutdown) => {}
                    _ = front => {}
                }
            }
            None => shutdown.await,
        }
    }

    /// Shuts down in order: inputs, actors, state flush, bus flush.
    pub async fn stop(mut self) -> SupervisorResult<()> {
        let escalated = match self.running.take() {
            Some(r) => r.stop().await,
            None => Ok(()),
        };
        // The watchers have handed over their state: stop the flusher
        // between flushes, then write what is left.
        if let Some((stop, f)) = self.flusher.take() {
            stop.trigger();
            let _ = f.await;
        }
        self.ctx.persist.flush().await;
        let front = match self.front.take() {
            Some(f) => f.stop().await,
            None => Ok(()),
        };
        // Sharded: the state is written; the others may take over now.
        if let Some(shard) = &self.ctx.shard {
            shard
                .leave(&self.ctx.store, &self.ctx.bus, &self.ctx.subjects)
                .await;
        }
        if let Err(e) = self.ctx.bus.flush().await {
            warn!(error = %e, "bus flush at shutdown failed");
        }
        escalated.and(front).map_err(SupervisorError::from)
    }
}

xo_runtime::service_handle!(SupervisorHandle, "supervisor");
