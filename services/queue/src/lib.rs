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
//! - [`refusals`]: requests on a lease that do not hold it, counted, logged and alerted.
//! - [`start`]: the tree (a one-for-one root over the actor), the control
//!   API (`xo.ctl.queue.*`, NATS micro service `xo-queue`, served by
//!   `xo_bus::api`), the lease ticker, and the shutdown order.

pub mod actor;
pub mod audit;
pub mod commit;
pub mod machine;
pub mod refusals;

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use tokio::task::JoinHandle;
use tracing::info;
use xo_bus::api::ActorPorts;
use xo_bus::{Bus, Store};
use xo_proto::Subjects;
use xo_proto::queue::QueueApi;
use xo_runtime::tree::{Factory, Intensity, Running};
use xo_runtime::{Clock, ServiceCtx, XoConfig};

pub use actor::QueueMsg;

/// The bucket the queue's state lives in, the log of its audit records and
/// the key of the active instance's lease (see `queue.leader_lease_ms`).
pub use xo_proto::names::{AUDIT_LOG, QUEUE_BUCKET as BUCKET, QUEUE_LEADER_KEY as LEADER_KEY};

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
    /// The runtime: an actor tree that did not start or gave up, no store.
    #[error(transparent)]
    Runtime(#[from] xo_runtime::RuntimeError),
    /// A record could not be encoded for the store: the change is not made.
    #[error("record {key} not encodable: {source}")]
    Encode {
        key: String,
        source: serde_json::Error,
    },
}

xo_bus::bus_error_from!(QueueError);
xo_runtime::runtime_error_from!(QueueError);

pub type QueueResult<T> = Result<T, QueueError>;

/// What the queue's parts share (configuration, not state).
#[derive(Debug)]
pub struct Ctx {
    pub bus: Bus,
    pub store: Store,
    pub subjects: Subjects,
    pub cfg: XoConfig,
    pub clock: Clock,
    /// With a standby: whether this instance still holds the queue's lease
    /// (checked before every write; none when it is the only one).
    pub fence: Option<xo_bus::leader::Fence>,
    /// Set while the committer's writes fail (a full disk, a store that
    /// does not answer): reads are then answered at once, saying so,
    /// instead of waiting behind the writes.
    pub failing: std::sync::Mutex<Option<commit::Failing>>,
}

/// A running queue.
#[derive(Debug)]
pub struct QueueHandle {
    pub ctx: Arc<Ctx>,
    /// The root of the queue's tree: send it the queue's messages.
    pub actor: ActorRef<QueueMsg>,
    running: Running<QueueMsg>,
    committer: JoinHandle<()>,
}

/// Loads the queue from the store and serves its control API.
///
/// The tree: a one-for-one root over the queue actor. A failed actor is
/// restarted (at most `supervisor.max_restarts` within
/// `supervisor.restart_window_ms`) after every change it handed to the
/// committer is durable, and reloads the machine from the store, so it
/// resumes exactly where the store is; claims waiting in it are answered
/// with an error and retried by runners.
///
/// With a fence (the active one of several instances), every write is made
/// only while the fence says the lease is still held; after that the queue
/// writes nothing and answers nothing (its callers retry on the new holder).
pub async fn start(sctx: ServiceCtx) -> QueueResult<QueueHandle> {
    let store = sctx.store("the queue")?;
    let ServiceCtx {
        cfg,
        bus,
        clock,
        shutdown,
        fence,
        ..
    } = sctx;
    let ctx = Arc::new(Ctx {
        subjects: cfg.subjects(),
        bus,
        store,
        clock,
        cfg,
        fence,
        failing: Default::default(),
    });
    // The audit log's store copy is read once before serving: a damaged copy
    // stops the start here, named, instead of failing every write later.
    ctx.store.read(AUDIT_LOG, u64::MAX, 0).await?;
    let (commits, committer) = commit::spawn(ctx.clone());
    let factory: Factory<actor::QueueActor> = {
        let (ctx, commits) = (ctx.clone(), commits.clone());
        Arc::new(move || {
            let (ctx, commits) = (ctx.clone(), commits.clone());
            Box::pin(async move {
                commit::barrier(&commits).await;
                let machine = actor::load(&ctx).await?;
                Ok(actor::Args {
                    ctx,
                    machine,
                    commits,
                })
            })
        })
    };
    drop(commits);
    let mut running =
        Running::one_for_one("queue", actor::QueueActor, Intensity::of(&ctx.cfg), factory)
            .await?
            .ending_on(shutdown);
    running.input(
        xo_bus::api::serve::<QueueApi<ActorPorts>, _>(
            &ctx.bus,
            &ctx.subjects,
            ctx.cfg.wire.max_payload,
            "XO durable queue: tasks, leases, halts, audit",
            running.current.clone(),
            running.signal(),
        )
        .await?,
    );
    let clock = ctx.clock.clone();
    running.every(Duration::from_millis(ctx.cfg.queue.tick_ms), move || {
        QueueMsg::Tick(clock.now_ms(), None)
    });
    ctx.bus.flush().await?;
    info!(bus = ctx.bus.kind(), "queue started");
    Ok(QueueHandle {
        ctx,
        actor: running.root.clone(),
        running,
        committer,
    })
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

    /// Waits for `shutdown`, or for the tree to give up (escalation).
    pub async fn until(&mut self, shutdown: impl std::future::Future<Output = ()>) {
        self.running.until(shutdown).await
    }

    /// Stops in order: inputs (control API, ticker) stop taking requests,
    /// the actor drains what it was given, the committer writes what is
    /// pending and ends, the bus is flushed.
    pub async fn stop(self) -> QueueResult<()> {
        let QueueHandle {
            ctx,
            actor,
            running,
            committer,
        } = self;
        drop(actor);
        let escalated = running.stop().await;
        // The root's state held the last sender: the committer drains and ends.
        let _ = committer.await;
        let _ = ctx.bus.flush().await;
        escalated.map_err(QueueError::from)
    }
}

xo_runtime::service_handle!(QueueHandle, "queue");
