//! The worker: one actor that claims a task of its role (long-poll), works
//! it through the pipeline while the lease is kept, and delivers the
//! outcome; then claims the next. A restarted worker kills the agents its
//! predecessor left (their process groups) before it claims again.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{Instrument, debug, error, info, info_span, warn};
use xo_bus::Bus;
use xo_bus::typed::{self, CallError};
use xo_pipeline::driver::{Driver, TaskTag, Turns};
use xo_pipeline::proc::Groups;
use xo_pipeline::sandbox::Sandbox;
use xo_pipeline::{Job, Outcome, Pipeline};
use xo_proto::Subjects;
use xo_proto::queue::{self as q, Claimed, ExecutionMode};
use xo_proto::settings::Settings;
use xo_runtime::XoConfig;
use xo_runtime::tree::Shutdown;

use crate::report;
use crate::{RunnerOptions, lease};

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
}

/// What the worker holds while it lives.
pub struct WorkerState {
    pipeline: Pipeline,
    /// The pipeline under the operator settings last seen (by version).
    applied: Option<(u64, Pipeline)>,
    driver: Driver,
    turns: Turns,
    subjects: Subjects,
    /// The queue's latest request to yield a task to a critical one.
    interrupts: watch::Receiver<Option<q::Interrupt>>,
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
            self.work(st, claimed, span.clone()).instrument(span).await;
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
            _ = self.shutdown.signal() => return None,
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

    /// The pipeline under the operator settings a claim carried, laid over
    /// this runner's `xo.toml` (kept until the settings' version changes).
    /// Settings that do not apply here are logged and the task runs on
    /// `xo.toml` alone.
    fn pipeline_for(&self, st: &mut WorkerState, settings: &Settings) -> Pipeline {
        if settings.version == 0 {
            return st.pipeline.clone();
        }
        if let Some((v, p)) = &st.applied
            && *v == settings.version
        {
            return p.clone();
        }
        let p = match xo_runtime::settings::apply(&self.cfg, settings) {
            Ok(cfg) => {
                let global = settings
                    .values
                    .contains_key("runner.global_template")
                    .then(|| cfg.runner.global_template.clone());
                info!(version = settings.version, "operator settings applied");
                st.pipeline.reconfigured(cfg.runner, global)
            }
            Err(e) => {
                warn!(version = settings.version, error = %e, "operator settings not applied; tasks run on xo.toml");
                st.pipeline.clone()
            }
        };
        st.applied = Some((settings.version, p.clone()));
        p
    }

    /// Works one claimed task: knowledge under its budget, the lease kept
    /// alive, the pipeline run (stopped on shutdown, a lost lease or an
    /// operator's halt), the outcome delivered.
    async fn work(&self, st: &mut WorkerState, claimed: Claimed, span: tracing::Span) {
        let pipeline = self.pipeline_for(st, &claimed.settings);
        let (bus, subjects) = (&self.bus, &st.subjects);
        let mut rec = claimed.record;
        // A task that names no project is worked in the goal's project
        // (where the queue writes its audit), else the runner's default.
        if rec.task.project.is_none() {
            rec.task.project = claimed.goal.project_id.clone();
        }
        let id = rec.task.task_id.clone();
        info!(attempt = rec.attempt, mark = ?rec.mark, "task claimed");
        // Knowledge under its token budget (empty when no knowledge store answers).
        let selection = typed::call(
            bus,
            subjects,
            &xo_proto::knowledge::Select {
                about: about(&rec.task),
                milestone: rec.task.milestone.clone(),
                budget_tokens: None,
            },
            Duration::from_secs(3),
        )
        .await
        .unwrap_or_else(|e| {
            debug!(error = %e, "no knowledge store answered; composing without knowledge");
            Default::default()
        });
        let job = Job {
            goal: Some(claimed.goal.description.clone()).filter(|d| !d.is_empty()),
            manual: claimed.mode == ExecutionMode::Manual,
            knowledge: selection.section.clone(),
            directives: claimed.directives.clone(),
            settings: claimed.settings.clone(),
            task_list: claimed.task_list.clone(),
            record: rec,
        };
        // Steering meant for the previous task does not carry over.
        st.turns.start_task(TaskTag {
            task_id: id.clone(),
            span: span.clone(),
        });
        let started = std::time::Instant::now();
        let meter = lease::Meter {
            turns: st.turns.clone(),
            started,
            checkpoint: pipeline.checkpoint_path(&job.record.task),
        };
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (yield_tx, yield_rx) = watch::channel(None::<String>);
        let held = lease::Held {
            task_id: id.clone(),
            token: claimed.token.clone(),
            unit: self.opts.unit.clone(),
        };
        let keeper = tokio::spawn(
            lease::keep(
                bus.clone(),
                subjects.clone(),
                held.clone(),
                claimed.lease_ms,
                cancel_tx.clone(),
                yield_tx.clone(),
                meter.clone(),
            )
            .in_current_span(),
        );
        let interrupted = tokio::spawn(
            lease::on_interrupt(
                st.interrupts.clone(),
                id.clone(),
                job.record.attempt,
                yield_tx.clone(),
                cancel_tx.clone(),
            )
            .in_current_span(),
        );
        // The task's budget, across its retries and earlier attempts.
        let mut budget = job
            .record
            .task
            .budget
            .unwrap_or_default()
            .or(pipeline.cfg().task_budget);
        if budget.max_wall_ms == 0 {
            // A separate, larger bound than one agent run's timeout (which
            // is EXEC_FAILURE, critical): every run the task may take, its
            // retries included, and one more.
            let runs = u64::from(pipeline.cfg().max_retries) + 2;
            budget.max_wall_ms = (pipeline.timeout(pipeline.profile_of(&job)).as_millis() as u64)
                .saturating_mul(runs);
        }
        let (hit_tx, hit_rx) = watch::channel(None::<String>);
        let watcher = tokio::spawn(lease::watch_budget(
            budget,
            job.record.spent,
            meter.clone(),
            cancel_tx.clone(),
            hit_tx,
        ));
        let (outcome, stats) = {
            let fut = pipeline.run_counted(&mut st.driver, &job, st.turns.clone(), Some(cancel_rx));
            let mut fut = std::pin::pin!(fut);
            tokio::select! {
                o = &mut fut => o,
                _ = self.shutdown.signal() => {
                    let _ = cancel_tx.send(true);
                    fut.await
                }
            }
        };
        for t in [keeper, watcher, interrupted] {
            t.abort();
            let _ = t.await;
        }
        let usage = meter.usage();
        let outcome = match (outcome, hit_rx.borrow().clone()) {
            (Outcome::Completed(r), _) => Outcome::Completed(r),
            // The agent's own failure (its timeout among them) is what
            // happened, whatever the budget says after it.
            (Outcome::Blocked(r), _) if r.starts_with("EXEC_FAILURE") => Outcome::Blocked(r),
            (_, Some(reason)) => {
                warn!(reason = %reason, "task budget exhausted; the agent was stopped");
                Outcome::Blocked(reason)
            }
            (o, None) => o,
        };
        // Stopped to yield (not by shutdown, a halt or a lost lease): the
        // task goes back to the queue at once, its work kept.
        let yielded = yield_rx
            .borrow()
            .clone()
            .filter(|_| matches!(outcome, Outcome::Cancelled) && !self.shutdown.is_triggered());
        // The unit waits for a person until its next task: its task asks
        // the operator a question, or its agent could not run.
        if let Some(needs) = waits_for(&id, &outcome) {
            st.turns.wait(needs);
        }
        st.turns.end_task();
        if let Outcome::Completed(r) = &outcome
            && !selection.docs.is_empty()
        {
            // The knowledge lifecycle: clean tasks establish the documents they carried.
            let uses = xo_proto::knowledge::RecordUses {
                docs: selection.docs.clone(),
                clean: r.clean(),
                task: Some(id.clone()),
            };
            if let Err(e) = typed::call(bus, subjects, &uses, Duration::from_secs(3)).await {
                warn!(error = %e, "knowledge uses not recorded");
            }
        }
        let ended_as = if yielded.is_some() {
            q::RunnerOutcome::Yielded
        } else {
            ended(&outcome)
        };
        let tokens = st.turns.tokens_in_out();
        span.record("gen_ai.usage.input_tokens", tokens.input as i64);
        span.record("gen_ai.usage.output_tokens", tokens.output as i64);
        span.record("xo.outcome", ended_as.as_str());
        let ev = q::RunnerEvent {
            v: xo_proto::PROTOCOL_VERSION,
            unit: self.opts.unit.clone(),
            task_id: id.clone(),
            outcome: ended_as,
            attempt: job.record.attempt,
            agent_runs: stats.agent_runs,
            format_retries: stats.format_retries,
            validation_failures: stats.validation_failures,
            clarifications: stats.clarifications,
            knowledge: selection.docs.clone(),
            at: xo_proto::now_ms(),
        };
        if let Err(e) = typed::publish(
            bus,
            &subjects.runner_event(&self.opts.unit),
            &ev,
            self.cfg.wire.format,
        )
        .await
        {
            warn!(error = %e, "runner event not published");
        }
        let yielded = yielded.map(|critical| Yielded {
            critical,
            checkpoint: meter.checkpoint.as_ref().is_some_and(|p| p.exists()),
        });
        let ended = Ended {
            outcome,
            yielded,
            usage,
            failed_validation: stats.failed_validation,
            exchange: stats.exchange,
            diff: stats.diff,
        };
        deliver(bus, subjects, &held, ended).await;
    }
}

/// What the task is about, for knowledge chosen by relevance.
fn about(t: &q::Task) -> xo_proto::knowledge::About {
    let mut text = format!("{}\n{}", t.intent, t.instructions);
    text.truncate(
        (0..=text.len().min(4000))
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0),
    );
    for c in &t.acceptance_criteria {
        text.push('\n');
        text.push_str(c);
    }
    let mut paths: Vec<String> = t.required_artifacts.clone();
    paths.extend(t.working_directory.clone());
    xo_proto::knowledge::About {
        role: t.role.clone(),
        task_type: xo_pipeline::compose::TaskType::detect(t).name().to_string(),
        text,
        paths,
    }
}

/// Blocks the task, or (with a question) leaves it awaiting the operator.
async fn block(
    bus: &Bus,
    subjects: &Subjects,
    mut req: q::Block,
    timeout: Duration,
) -> Result<(), CallError> {
    if req.question.is_none() {
        req.cause = Some(q::BlockCause::of_reason(&req.reason));
    }
    typed::call(bus, subjects, &req, timeout).await.map(|_| ())
}

/// A task stopped to be given back for a critical one.
struct Yielded {
    critical: String,
    /// The agent's checkpoint file exists.
    checkpoint: bool,
}

/// Sends the outcome to the queue (or gives the task back, `yielded`),
/// retrying while the queue is unreachable.
/// How a task ended here, for the queue.
struct Ended {
    outcome: Outcome,
    yielded: Option<Yielded>,
    usage: q::Usage,
    /// The validation it was blocked on, if that is why.
    failed_validation: Option<q::ValidationReport>,
    /// The last prompt and reply, for the audit line.
    exchange: Option<q::Exchange>,
    /// What it changed on its branch (worktree isolation).
    diff: Option<q::TaskDiff>,
}

async fn deliver(bus: &Bus, subjects: &Subjects, held: &lease::Held, ended: Ended) {
    let Ended {
        outcome,
        yielded,
        usage,
        failed_validation,
        exchange,
        diff,
    } = ended;
    let timeout = Duration::from_secs(10);
    for attempt in 1..=5u32 {
        let res: Result<(), CallError> = match (&outcome, &yielded) {
            (_, Some(y)) => {
                info!(critical = %y.critical, checkpoint = y.checkpoint, "task given back for the critical task");
                let req = q::Yield {
                    task_id: held.task_id.clone(),
                    token: held.token.clone(),
                    claimant: held.unit.clone(),
                    checkpoint: y.checkpoint,
                    note: if y.checkpoint {
                        "agent stopped at its checkpoint; its artifacts are validated on resume"
                            .into()
                    } else {
                        "agent stopped; the work it left stays for the next attempt".into()
                    },
                    usage,
                };
                typed::call(bus, subjects, &req, timeout).await.map(|_| ())
            }
            (Outcome::Completed(r), None) => {
                info!(summary = %r.report().summary, "task completed");
                typed::call(
                    bus,
                    subjects,
                    &q::Complete {
                        task_id: held.task_id.clone(),
                        token: held.token.clone(),
                        claimant: held.unit.clone(),
                        report: r.report().clone(),
                        manager_reply: Some(serde_json::Value::Object(r.reply().clone())),
                        usage,
                        exchange: exchange.clone(),
                        diff: diff.clone(),
                    },
                    timeout,
                )
                .await
                .map(|_| ())
            }
            (Outcome::Blocked(reason) | Outcome::Violation(reason), None) => {
                warn!(reason = %reason, "task blocked");
                let req = q::Block {
                    task_id: held.task_id.clone(),
                    token: held.token.clone(),
                    claimant: held.unit.clone(),
                    reason: reason.clone(),
                    question: None,
                    cause: None,
                    usage,
                    report: failed_validation.clone(),
                    exchange: exchange.clone(),
                };
                block(bus, subjects, req, timeout).await
            }
            (Outcome::Question(q), None) => {
                info!(question = %q, "task awaits the operator's answer");
                let req = q::Block {
                    task_id: held.task_id.clone(),
                    token: held.token.clone(),
                    claimant: held.unit.clone(),
                    reason: q::ASKED_QUESTION.into(),
                    question: Some(q.clone()),
                    cause: None,
                    usage,
                    report: None,
                    exchange: exchange.clone(),
                };
                block(bus, subjects, req, timeout).await
            }
            (Outcome::Cancelled, None) => {
                info!("task stopped; the queue replays it when the lease lapses");
                return;
            }
        };
        match res {
            Ok(()) => return,
            // The queue refused (lease lost, task cancelled): nothing to retry.
            Err(CallError::Service(e)) => {
                warn!(error = %e, "the queue refused the outcome");
                return;
            }
            Err(e) => {
                warn!(attempt, error = %e, "outcome not delivered; retrying");
                tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
            }
        }
    }
    error!("outcome not delivered after 5 attempts; the lease will lapse and the task be replayed");
}

/// What the unit waits for after `outcome` of task `id`: an operator's
/// answer to the task's question (`answer`), or a person to look at an
/// agent that could not run (`error`, an `EXEC_FAILURE`). Other outcomes
/// are the queue's to handle.
fn waits_for(id: &str, outcome: &Outcome) -> Option<xo_proto::UnitNeeds> {
    let (reason, detail) = match outcome {
        Outcome::Question(q) => (xo_proto::NeedsReason::Answer, format!("{id} asks: {q}")),
        Outcome::Blocked(r) if r.starts_with("EXEC_FAILURE") => {
            (xo_proto::NeedsReason::Error, format!("{id}: {r}"))
        }
        _ => return None,
    };
    Some(xo_proto::UnitNeeds {
        reason,
        detail: xo_pipeline::driver::waiting::short(&detail),
    })
}

/// The runner event's name for an outcome.
fn ended(o: &Outcome) -> q::RunnerOutcome {
    match o {
        Outcome::Completed(_) => q::RunnerOutcome::Completed,
        Outcome::Blocked(_) => q::RunnerOutcome::Blocked,
        Outcome::Question(_) => q::RunnerOutcome::AwaitingResponse,
        Outcome::Violation(_) => q::RunnerOutcome::Violation,
        Outcome::Cancelled => q::RunnerOutcome::Cancelled,
    }
}
