//! The XO durable queue: tasks, leases, retries, halts, the Manager's
//! reconciliation, directive lanes, and an audit log chained by hashes.
//!
//! # Layout
//!
//! - [`machine`]: the state machine, pure (start here).
//! - [`actor`]: one ractor actor owns the machine; long-polling claims wait in it.
//! - [`commit`]: group commit — every change is written to the store (and
//!   the audit log) before the request that caused it is answered.
//! - [`audit`]: the audit record chain, `verify` and reading back.
//! - [`control`]: the control API (`xo.ctl.queue.*`, a NATS micro service `xo-queue`).

pub mod actor;
pub mod audit;
pub mod commit;
pub mod control;
pub mod machine;

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::task::JoinHandle;
use tracing::info;
use xo_bus::{Bus, Store};
use xo_proto::Subjects;
use xo_runtime::{Clock, XoConfig};

pub use actor::QueueMsg;

/// The bucket the queue's state lives in.
pub const BUCKET: &str = "queue";
/// The store log the audit records are appended to.
pub const AUDIT_LOG: &str = "audit";

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("bus: {0}")]
    Bus(#[from] xo_bus::BusError),
    #[error("store: {0}")]
    Store(#[from] xo_bus::StoreError),
    #[error("actor: {0}")]
    Actor(String),
}

pub type QueueResult<T> = Result<T, QueueError>;

/// What the queue's parts share (configuration, not state).
#[derive(Debug)]
pub struct Ctx {
    pub bus: Bus,
    pub store: Store,
    pub subjects: Subjects,
    pub cfg: XoConfig,
    pub clock: Clock,
}

#[derive(Debug)]
pub struct QueueHandle {
    pub ctx: Arc<Ctx>,
    pub actor: ActorRef<QueueMsg>,
    actor_task: JoinHandle<()>,
    inputs: Vec<JoinHandle<()>>,
    committer: JoinHandle<()>,
}

/// Loads the queue from the store and serves its control API.
pub async fn start(
    cfg: XoConfig,
    bus: Bus,
    store: Store,
    clock: Clock,
) -> QueueResult<QueueHandle> {
    let ctx = Arc::new(Ctx {
        subjects: cfg.subjects(),
        bus,
        store,
        clock,
        cfg,
    });
    let machine = actor::load(&ctx).await?;
    let (commits, committer) = commit::spawn(ctx.clone());
    let (actor, actor_task) = Actor::spawn(
        None,
        actor::QueueActor,
        actor::Args {
            ctx: ctx.clone(),
            machine,
            commits,
        },
    )
    .await
    .map_err(|e| QueueError::Actor(e.to_string()))?;
    let mut inputs = vec![control::serve(ctx.clone(), actor.clone()).await?];
    let (a, c) = (actor.clone(), ctx.clone());
    inputs.push(tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_millis(c.cfg.queue.tick_ms));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            if a.cast(QueueMsg::Tick(c.clock.now_ms(), None)).is_err() {
                break;
            }
        }
    }));
    ctx.bus.flush().await?;
    info!(bus = ctx.bus.kind(), "queue started");
    Ok(QueueHandle {
        ctx,
        actor,
        actor_task,
        inputs,
        committer,
    })
}

/// Runs the queue until `shutdown` resolves.
pub async fn run(
    cfg: XoConfig,
    bus: Bus,
    store: Store,
    shutdown: impl std::future::Future<Output = ()>,
) -> QueueResult<()> {
    let handle = start(cfg, bus, store, Clock::System).await?;
    shutdown.await;
    handle.stop().await;
    Ok(())
}

impl QueueHandle {
    /// Checks leases and waiting claims now (tests drive time with a manual clock).
    pub async fn tick(&self) {
        let now = self.ctx.clock.now_ms();
        let _ = self
            .actor
            .call(|p| QueueMsg::Tick(now, Some(p)), None)
            .await;
    }

    /// Stops taking requests, lets the actor finish, writes what is pending.
    pub async fn stop(self) {
        for t in &self.inputs {
            t.abort();
        }
        self.actor.stop(None);
        let _ = self.actor_task.await;
        // The actor dropped its sender: the committer drains and ends.
        let _ = self.committer.await;
        let _ = self.ctx.bus.flush().await;
    }
}
