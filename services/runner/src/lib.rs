//! The XO runner service: claims tasks for its role, keeps their leases,
//! runs each through the supervised pipeline ([`xo_pipeline`]) and reports
//! the outcome; emits SALUTE reports and heartbeats; applies the XO's
//! steering before the agent's next step; in microcosm mode runs the radio
//! check itself.
//!
//! # Layout
//!
//! - [`start`]: the tree — a one-for-one root over the [`worker`] — in a
//!   task of its own, and the shutdown order ([`RunnerHandle::stop`]).
//! - [`worker`]: the claim loop: claim (long-poll) → work the task through
//!   its stages → claim the next, one task at a time.
//! - [`task`]: a task's stages: prepare → supervise (the lease, interrupts,
//!   budget) around the pipeline's run → settle (the outcome delivered).
//! - [`lease`]: what a lease holds and meters; whether a renewal says the
//!   operator halted the queue.
//! - [`report`]: SALUTE reports from the agent's turns, heartbeats, steering intake.
//! - [`recordings`]: recorded runs read from disk (`xo import`).
//! - [`watch`]: the same for agents that run outside XO, from their live
//!   transcripts (`xo watch`, `[[supervisor.watch]]`): a service of its own.
//!
//! Shutdown order: no new claim; the task in flight is stopped (its agent's
//! process group killed) and left to the queue to replay; the worker drains
//! and stops its reporting tasks; the bus is flushed.

pub mod lease;
pub mod recordings;
pub mod report;
pub mod task;
pub mod watch;
pub mod worker;

use std::future::Future;

use tokio::task::JoinHandle;
use tracing::{Instrument, info, info_span};
use xo_bus::Bus;
use xo_runtime::tree::{self, Intensity, Running, Shutdown};
use xo_runtime::{ServiceCtx, XoConfig};

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("runner {what}: {source}")]
    Setup {
        what: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
    /// The runtime: an actor tree that did not start or gave up, no store.
    #[error(transparent)]
    Runtime(#[from] xo_runtime::RuntimeError),
}

xo_bus::bus_error_from!(RunnerError);
xo_runtime::runtime_error_from!(RunnerError);

fn setup(what: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> RunnerError {
    RunnerError::Setup {
        what: what.to_string(),
        source: source.into(),
    }
}

/// Who this runner is.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    pub role: String,
    /// Stable across restarts (orphaned agents are found by it).
    pub unit: String,
}

/// `<role>-<hostname>`: stable for a container or a machine.
pub fn default_unit(role: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .unwrap_or_else(|| "local".into());
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{role}-{host}")
}

/// A running runner: its tree runs in a task of its own until stopped.
#[derive(Debug)]
pub struct RunnerHandle {
    unit: String,
    shutdown: Shutdown,
    task: Option<JoinHandle<Result<(), RunnerError>>>,
    /// How it ended, once it did on its own.
    ended: Option<Result<(), RunnerError>>,
}

/// Starts a runner for `opts` (its unit and role are checked first).
/// Stopping it stops its task in flight (the agent's process group is
/// killed) and leaves the task to the queue to replay.
pub async fn start(ctx: ServiceCtx, opts: RunnerOptions) -> Result<RunnerHandle, RunnerError> {
    xo_proto::validate_unit_id(&opts.unit).map_err(|e| setup("unit", e))?;
    xo_proto::validate_token("role", &opts.role).map_err(|e| setup("role", e))?;
    let unit = opts.unit.clone();
    let signal = ctx.shutdown.signal();
    let task = tokio::spawn(run(ctx.cfg, ctx.bus, ctx.clock, opts, signal));
    Ok(RunnerHandle {
        unit,
        shutdown: ctx.shutdown,
        task: Some(task),
        ended: None,
    })
}

impl RunnerHandle {
    pub fn unit(&self) -> &str {
        &self.unit
    }

    /// Waits for `shutdown`, or for the runner to end on its own (its
    /// tree gave up, or it could not set up).
    pub async fn until(&mut self, shutdown: impl Future<Output = ()>) {
        let Some(task) = self.task.as_mut() else {
            return shutdown.await;
        };
        tokio::select! {
            _ = shutdown => {}
            r = task => {
                self.task = None;
                self.ended = Some(joined(r));
            }
        }
    }

    /// Stops taking work, stops the task in flight, waits for the end.
    pub async fn stop(mut self) -> Result<(), RunnerError> {
        self.shutdown.trigger();
        match self.task.take() {
            Some(t) => joined(t.await),
            None => self.ended.take().unwrap_or(Ok(())),
        }
    }
}

fn joined(r: Result<Result<(), RunnerError>, tokio::task::JoinError>) -> Result<(), RunnerError> {
    r.unwrap_or_else(|e| Err(setup("task", e)))
}

impl xo_runtime::Service for RunnerHandle {
    fn name(&self) -> String {
        format!("runner {}", self.unit)
    }
    fn until<'a>(
        &'a mut self,
        shutdown: xo_runtime::service::BoxFuture<'a, ()>,
    ) -> xo_runtime::service::BoxFuture<'a, ()> {
        Box::pin(RunnerHandle::until(self, shutdown))
    }
    fn stop(
        self: Box<Self>,
    ) -> xo_runtime::service::BoxFuture<'static, Result<(), xo_runtime::service::StopError>> {
        Box::pin(async move { RunnerHandle::stop(*self).await.map_err(Into::into) })
    }
}

/// Runs until `shutdown`; a task in flight is stopped (its agent's process
/// group killed) and left to the queue to replay.
async fn run(
    cfg: XoConfig,
    bus: Bus,
    clock: xo_runtime::Clock,
    opts: RunnerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunnerError> {
    let span = info_span!("runner", unit = %opts.unit, role = %opts.role);
    async move {
        let stop = Shutdown::new();
        let worker = worker::Worker {
            cfg: cfg.clone(),
            bus: bus.clone(),
            opts,
            shutdown: stop.clone(),
            clock,
        };
        let mut running = Running::one_for_one(
            "runner",
            worker,
            Intensity::of(&cfg),
            tree::no_args::<worker::Worker>(),
        )
        .await
        .map_err(|e| setup("worker", e))?;
        running.until(shutdown).await;
        // Stop taking work first: no new claim, the task in flight stopped.
        stop.trigger();
        let escalated = running.stop().await;
        let _ = bus.flush().await;
        info!("runner stopped");
        escalated.map_err(RunnerError::from)
    }
    .instrument(span)
    .await
}
