//! The worker: one actor that claims a task of its role (long-poll), works
//! it through the pipeline while the lease is kept, and delivers the
//! outcome; then claims the next. A restarted worker kills the agents its
//! predecessor left (their process groups) before it claims again.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{Instrument, debug, info, info_span, warn};
use xo_bus::Bus;
use xo_bus::typed;
use xo_pipeline::Pipeline;
use xo_pipeline::driver::{Driver, Turns};
use xo_pipeline::proc::Groups;
use xo_pipeline::sandbox::Sandbox;
use xo_proto::Subjects;
use xo_proto::queue::{self as q, Claimed};
use xo_runtime::XoConfig;
use xo_runtime::tree::Shutdown;

use crate::RunnerOptions;
use crate::{report, task};

/// The worker's one message: claim and work the next task.
#[derive(Debug)]
pub struct Next;

/// The worker (configuration only).
#[derive(Debug, Clone)]
pub struct Worker {
    pub cfg: XoConfig,
    pub bus: Bus,
    pub opts: RunnerOptions,
    /// Triggered at shutdown: no new claim; the task in flight is stopped
    /// (its agent's process group killed) and left to the queue to replay.
    pub shutdown: Shutdown,
    /// The service clock: what a task's end is dated by.
    pub clock: xo_runtime::Clock,
}

/// What the worker holds while it lives.
pub struct WorkerState {
    pub(crate) pipeline: Pipeline,
    /// The pipeline under the operator settings last seen (by version).
    pub(crate) applied: Option<(u64, Pipeline)>,
    pub(crate) driver: Driver,
    pub(crate) turns: Turns,
    pub(crate) subjects: Subjects,
    /// The queue's latest request to yield a task to a critical one.
    pub(crate) interrupts: watch::Receiver<Option<q::Interrupt>>,
    /// Stops the reporting tasks when the worker stops.
    reporting: Shutdown,
    tasks: Vec<JoinHandle<()>>,
}

fn setup(what: &str, reason: impl std::fmt::Display) -> ActorProcessingErr {
    format!("runner {what}: {reason}").into()
}

impl Actor for Worker {
    type Msg = Next;
    type State = WorkerState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Next>,
        _: (),
    ) -> Result<WorkerState, ActorProcessingErr> {
        let (cfg, opts) = (&self.cfg, &self.opts);
        let data = cfg.data_dir();
        let (dir, unit) = (data.join("runner"), opts.unit.clone());
        let groups = tokio::task::spawn_blocking(move || {
            let groups = Groups::new(&dir, &unit)?;
            let killed = groups.kill_orphans();
            Ok::<_, std::io::Error>((groups, killed))
        })
        .await?;
        let (groups, killed) =
            groups.map_err(|e| setup("process group file", format!("{}: {e}", data.display())))?;
        if !killed.is_empty() {
            warn!(
                count = killed.len(),
                "killed agents left by an earlier incarnation"
            );
        }
        let sandbox = Sandbox::open(&cfg.sandbox_dir()).map_err(|e| setup("sandbox", e))?;
        let pipeline = Pipeline::new(cfg.runner.clone(), sandbox, data, &opts.unit, Some(groups))
            .map_err(|e| setup("templates", e))?
            .confined()
            .map_err(|e| setup("runner.confine", e))?;
        let driver =
            Driver::from_config(&cfg.runner.driver, &cfg.runner).map_err(|e| setup("driver", e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let turns = Turns::new(tx);
        let reporting = Shutdown::new();
        let (interrupt_tx, interrupts) = watch::channel(None);
        let links = report::Links {
            events: rx,
            turns: turns.clone(),
            interrupts: interrupt_tx,
        };
        let tasks = report::spawn(&self.bus, cfg, opts, links, &reporting).await?;
        info!(driver = driver.name(), sandbox = %pipeline.sandbox().root().display(), "runner started");
        myself.cast(Next)?;
        Ok(WorkerState {
            pipeline,
            applied: None,
            driver,
            turns,
            subjects: cfg.subjects(),
            interrupts,
            reporting,
            tasks,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Next>,
        st: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        st.reporting.trigger();
        for t in st.tasks.drain(..) {
            let _ = t.await;
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Next>,
        _: Next,
        st: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        if self.shutdown.is_triggered() {
            return Ok(());
        }
        if let Some(claimed) = self.claim(st).await {
            let span = self.task_span(&claimed);
            self.work(st, claimed).instrument(span).await;
        }
        if !self.shutdown.is_triggered() {
            myself.cast(Next)?;
        }
        Ok(())
    }
}

impl Worker {
    /// The root span of a task's trace, from its claim to its outcome (the
    /// OpenTelemetry GenAI agent span): one trace per task, not one per
    /// runner, following from the runner's span. Its turns, reports, the
    /// XO's checks of them and the steering they caused are in it.
    fn task_span(&self, claimed: &Claimed) -> tracing::Span {
        let (task, role) = (&claimed.record.task, &self.opts.role);
        let span = info_span!(
            parent: None,
            "task",
            otel.name = %format!("invoke_agent {role}"),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = %role,
            gen_ai.agent.id = %self.opts.unit,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            unit = %self.opts.unit,
            task_id = %task.task_id,
            attempt = i64::from(claimed.record.attempt),
            xo.outcome = tracing::field::Empty,
        );
        span.follows_from(tracing::Span::current());
        span
    }

    /// One long-poll claim; `None` when nothing came, the queue did not
    /// answer (after a pause), or shutdown began.
    async fn claim(&self, st: &WorkerState) -> Option<Claimed> {
        let cfg = &self.cfg;
        let claim = q::Claim {
            role: self.opts.role.clone(),
            claimant: self.opts.unit.clone(),
            wait_ms: cfg.runner.claim_wait_ms,
        };
        let wait = Duration::from_millis(cfg.runner.claim_wait_ms + 5_000);
        let got = tokio::select! {
            _ = self.shutdown.signal() => {
                self.withdraw(st).await;
                return None;
            }
            r = typed::call(&self.bus, &st.subjects, &claim, wait) => r,
        };
        match got {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "claim failed; retrying");
                tokio::select! {
                    _ = self.shutdown.signal() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                None
            }
        }
    }

    /// Gives up the claim left waiting at shutdown: a task enqueued after
    /// would otherwise be handed to it, a reply nobody reads, and sit
    /// leased to this stopped runner until the lease ran out. Best effort
    /// (the queue may be stopping too): a claim not withdrawn still ends
    /// at its `claim_wait_ms`, or when this unit claims again.
    async fn withdraw(&self, st: &WorkerState) {
        let w = q::Withdraw {
            claimant: self.opts.unit.clone(),
        };
        match typed::call(&self.bus, &st.subjects, &w, Duration::from_secs(2)).await {
            Ok(n) => debug!(claims = n, "waiting claim withdrawn at shutdown"),
            Err(e) => {
                warn!(error = %e, "the waiting claim could not be withdrawn at shutdown; it ends at its claim_wait_ms")
            }
        }
    }

    /// Works one claimed task through its stages ([`crate::task`]).
    async fn work(&self, st: &mut WorkerState, claimed: Claimed) {
        let (task, tree, supervision) = task::prepare::prepare(self, st, claimed).await;
        let run = task.run(tree, &mut st.driver);
        let (ran, stop) = task::supervise::supervise(supervision, run).await;
        task::settle::settle(self, st, task, ran, stop).await;
    }
}
