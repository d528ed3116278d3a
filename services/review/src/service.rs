//! The review supervisors' loop: hears task and runner events, asks the
//! [`Schedule`] who is due, and runs each due reviewer: gate → run → apply.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use xo_runtime::tree::{self, Intensity, Running};
use xo_runtime::{Clock, ServiceCtx};

use tokio::sync::mpsc;
use tracing::{Instrument, error, info, warn};
use xo_bus::api::ActorPorts;
use xo_bus::{Bus, input, typed};
use xo_pipeline::driver::{Driver, OpenAiDriver, TaskTag, Turn, Turns};
use xo_pipeline::sandbox::Sandbox;
use xo_pipeline::{Job, Outcome, Pipeline};
use xo_proto::knowledge::*;
use xo_proto::queue::{self as q, EventName, Lane, Task, TaskEvent, TaskRecord, TaskState};
use xo_proto::{Format, Subjects};
use xo_runtime::XoConfig;

use crate::findings::{DirectiveOut, Findings, Verdict, flat_schema, parse_findings, remit};
use crate::runlog::{self, run_log_path};
use crate::schedule::{Reviewer, Schedule, Signal, similarity};

mod run;

pub struct Reviews {
    /// `xo.toml` laid under the operator settings of `settings_version`.
    cfg: XoConfig,
    base: XoConfig,
    settings_version: u64,
    bus: Bus,
    /// Now, for the run log's times, the daily budget and the model's
    /// back-off (the service's clock: a test's manual one).
    clock: Clock,
    subjects: Subjects,
    format: Format,
    pipeline: Option<Pipeline>,
    driver: Option<Driver>,
    sched: Schedule,
    last: BTreeMap<Reviewer, BTreeSet<String>>,
    feedback: VecDeque<String>,
    /// Cleanup tasks done in the polish phase (None: not in it).
    polish: Option<u32>,
    /// Cancellations this service made (not churn).
    ours: BTreeSet<String>,
    runs: u64,
    /// The model endpoint failed: no run until then (see [`ModelDown`]).
    down: Option<ModelDown>,
}

/// The review model's endpoint is failing. A refusal retrying cannot fix
/// (401, 403, 404, 400: a wrong key, model or URL) stops the reviews until
/// the operator settings change; anything else backs off, doubling from
/// 30 s to 15 min, so a dead endpoint is not called at every task event.
#[derive(Debug, Clone)]
struct ModelDown {
    until_ms: u64,
    failures: u32,
    permanent: bool,
    reason: String,
    settings_version: u64,
}

/// Whether a model error is one no retry can fix.
fn permanent_model_error(reason: &str) -> bool {
    [
        "400 Bad Request",
        "401 Unauthorized",
        "403 Forbidden",
        "404 Not Found",
    ]
    .iter()
    .any(|s| reason.contains(s))
}

/// What the reviewers hear: the queue's task events and the runners' events.
pub enum Input {
    Task(TaskEvent),
    Runner(q::RunnerEvent),
}

/// The review actor (configuration only; [`Reviews`] is its state, built
/// afresh on a restart: counters start over, the run log and budgets stay).
#[derive(Debug, Clone)]
pub struct ReviewActor {
    cfg: XoConfig,
    bus: Bus,
    clock: Clock,
}

impl Actor for ReviewActor {
    type Msg = Input;
    type State = Reviews;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Input>,
        _: (),
    ) -> Result<Reviews, ActorProcessingErr> {
        Ok(Reviews::new(
            self.cfg.clone(),
            self.bus.clone(),
            self.clock.clone(),
        ))
    }

    async fn handle(
        &self,
        _myself: ActorRef<Input>,
        input: Input,
        st: &mut Reviews,
    ) -> Result<(), ActorProcessingErr> {
        st.take(input)
            .instrument(tracing::info_span!(parent: None, "review"))
            .await;
        Ok(())
    }
}

/// Running review supervisors.
#[derive(Debug)]
pub struct ReviewHandle {
    running: Running<Input>,
    /// The run log's tree (its control API).
    runs: Running<crate::runs::RunsMsg>,
}

impl ReviewHandle {
    /// Waits for `shutdown`, or for the tree to give up.
    pub async fn until(&mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::select! {
            _ = shutdown => {}
            _ = self.running.until(std::future::pending::<()>()) => {}
            _ = self.runs.until(std::future::pending::<()>()) => {}
        }
    }

    /// Stops in order: the event pumps, then the actor (a review in
    /// progress finishes and is logged), then the run log's API and actor.
    /// `Err` if a tree had given up.
    pub async fn stop(self) -> Result<(), ReviewError> {
        let reviews = self.running.stop().await;
        let runs = self.runs.stop().await;
        reviews.and(runs).map_err(ReviewError::from)
    }
}

/// Starts the review supervisors (when `review.enabled`): a one-for-one
/// root over the review actor, fed by the task and runner events.
pub async fn start(ctx: ServiceCtx) -> Result<ReviewHandle, ReviewError> {
    let ServiceCtx {
        cfg,
        bus,
        shutdown,
        clock,
        ..
    } = ctx;
    let cfg_for_runs = cfg.clone();
    let subjects = cfg.subjects();
    let tasks = bus.subscribe(&subjects.task_event_all()).await?;
    let runners = bus.subscribe(&subjects.runner_event_all()).await?;
    let limit = cfg.wire.max_payload;
    let intensity = Intensity::of(&cfg);
    let model = cfg.review.model.model.clone();
    let runs_actor = crate::runs::RunsActor { cfg: cfg.clone() };
    let api_bus = bus.clone();
    let actor = ReviewActor { cfg, bus, clock };
    let mut running =
        Running::one_for_one("review", actor, intensity, tree::no_args::<ReviewActor>())
            .await?
            .ending_on(shutdown.clone());
    let root = running.root.clone();
    let dead = |name| input::DeadLetters::new(api_bus.clone(), subjects.clone(), name);
    running.input(input::cast(
        tasks,
        limit,
        dead("review: task events"),
        running.signal(),
        root.clone(),
        Input::Task,
    ));
    running.input(input::cast(
        runners,
        limit,
        dead("review: runner events"),
        running.signal(),
        root,
        Input::Runner,
    ));
    // The run log is read by an actor of its own (a review may take
    // minutes), under a root of its own.
    let mut runs = Running::one_for_one(
        "review run log",
        runs_actor,
        Intensity::of(&cfg_for_runs),
        tree::no_args::<crate::runs::RunsActor>(),
    )
    .await?
    .ending_on(shutdown);
    runs.input(
        xo_bus::api::serve::<ReviewApi<ActorPorts>, crate::runs::RunsMsg>(
            &api_bus,
            &subjects,
            limit,
            "XO review supervisors: run log",
            runs.current.clone(),
            runs.signal(),
        )
        .await?,
    );
    info!(model = %model, "review supervisors started");
    Ok(ReviewHandle { running, runs })
}

/// Errors of starting the review supervisors.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
    /// The runtime: an actor tree that did not start or gave up, no store.
    #[error(transparent)]
    Runtime(#[from] xo_runtime::RuntimeError),
}

/// Why a reviewer is skipped this time (the run's summary; work goes on).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Skip {
    #[error("review supervisors switched off in the operator settings (review.enabled)")]
    Off,
    #[error(
        "the review model refused: {reason}; fix review.model (URL, model, the key in its api_key_env) — reviews resume when the settings change"
    )]
    ModelRefused { reason: String },
    #[error(
        "the review model is failing ({failures} times in a row: {reason}); next try in {retry_in_s} s"
    )]
    ModelFailing {
        failures: u32,
        reason: String,
        retry_in_s: u64,
    },
    #[error(transparent)]
    Budget(#[from] runlog::BudgetSpent),
    #[error("no model configured (review.model.model)")]
    NoModel,
    #[error("the sandbox could not be opened")]
    NoSandbox,
}

xo_bus::bus_error_from!(ReviewError);
xo_runtime::runtime_error_from!(ReviewError);

/// The review model's driver (none without a model).
fn review_driver(cfg: &XoConfig) -> Option<Driver> {
    if cfg.review.model.model.is_empty() {
        return None;
    }
    OpenAiDriver::new(&cfg.review.model, cfg.runner.context_limit)
        .ok()
        .map(|d| Driver::OpenAi(d.read_only()))
}

/// What the reviewers keep across restarts (`<data>/<review.project>/review-state.json`):
/// the schedule (counters, intervals, urgency), the polish phase and the
/// cancellations they made themselves.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Kept {
    pub sched: Schedule,
    pub polish: Option<u32>,
    pub ours: BTreeSet<String>,
}

pub fn kept_path(cfg: &XoConfig) -> std::path::PathBuf {
    cfg.data_dir()
        .join(&cfg.review.project)
        .join("review-state.json")
}

/// The kept state, if a previous life left one that reads.
fn load_kept(cfg: &XoConfig) -> Option<Kept> {
    let path = kept_path(cfg);
    let bytes = std::fs::read(&path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(k) => Some(k),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "review state unreadable; starting the schedule afresh (file left as it is)");
            None
        }
    }
}

impl Reviews {
    /// Writes the kept state (atomically: a temporary file renamed).
    async fn keep(&self) {
        let k = Kept {
            sched: self.sched.clone(),
            polish: self.polish,
            ours: self.ours.clone(),
        };
        let path = kept_path(&self.cfg);
        let res = async {
            if let Some(d) = path.parent() {
                tokio::fs::create_dir_all(d).await?;
            }
            let bytes = serde_json::to_vec(&k).map_err(std::io::Error::other)?;
            xo_runtime::files::replace(&path, bytes, xo_runtime::files::Mode::Private).await
        }
        .await;
        if let Err(e) = res {
            warn!(path = %path.display(), error = %e, "review state not kept; a restart starts the schedule afresh");
        }
    }

    /// The reviewers' state: the pipeline on the sandbox, the review model.
    pub(crate) fn new(cfg: XoConfig, bus: Bus, clock: Clock) -> Self {
        let sandbox = Sandbox::open(&cfg.sandbox_dir()).ok();
        let pipeline = sandbox.and_then(|s| {
            Pipeline::new(cfg.runner.clone(), s, cfg.data_dir(), "xo-review", None).ok()
        });
        let driver = review_driver(&cfg);
        let kept = load_kept(&cfg);
        if let Some(k) = &kept {
            info!(completed = k.sched.completed(), urgency = k.sched.urgency(), polish = ?k.polish, "review schedule restored");
        }
        let (sched, polish, ours) = match kept {
            Some(k) => (k.sched, k.polish, k.ours),
            None => (Schedule::new(&cfg.review), None, BTreeSet::new()),
        };
        Self {
            base: cfg.clone(),
            settings_version: 0,
            down: None,
            sched,
            format: cfg.wire.format,
            subjects: cfg.subjects(),
            bus,
            clock,
            pipeline,
            driver,
            last: BTreeMap::new(),
            feedback: VecDeque::new(),
            polish,
            ours,
            runs: 0,
            cfg,
        }
    }
}

impl Reviews {
    /// Every task, page by page.
    async fn all_tasks(&self) -> Option<Vec<TaskRecord>> {
        match typed::all_tasks(&self.bus, &self.subjects, None, Duration::from_secs(5)).await {
            Ok(v) => Some(v),
            Err(e) => {
                warn!(error = %e, "review: listing tasks failed");
                None
            }
        }
    }

    async fn call<R: xo_proto::Request>(&self, req: &R) -> Option<R::Response>
    where
        R::Response: serde::de::DeserializeOwned,
    {
        match typed::call(&self.bus, &self.subjects, req, Duration::from_secs(5)).await {
            Ok(v) => Some(v),
            Err(e) => {
                warn!(verb = R::VERB, error = %e, "review: call failed");
                None
            }
        }
    }

    pub(crate) async fn take(&mut self, input: Input) {
        // A completion that starts the polish phase still gets its reviews
        // (it was functional work); the phase holds them from the next.
        let in_polish = self.polish.is_some();
        let signal = match input {
            Input::Runner(e) => {
                if e.validation_failures > 0 {
                    self.note(format!(
                        "task {}: {} validation failure(s)",
                        e.task_id, e.validation_failures
                    ));
                    Some(Signal::ValidationFailure)
                } else {
                    None
                }
            }
            Input::Task(e) => match e.event {
                EventName::TaskComplete => self.completed(&e.task_id).await,
                EventName::TaskRetry => {
                    self.note(format!(
                        "task {}: retried after a failed attempt",
                        e.task_id
                    ));
                    Some(Signal::ValidationFailure)
                }
                EventName::TaskBlocked => {
                    self.note(format!("task {}: blocked", e.task_id));
                    Some(Signal::Abort)
                }
                EventName::TaskCancelled if !self.ours.contains(&e.task_id) => Some(Signal::Churn),
                EventName::Enqueue | EventName::EnqueueCritical if self.polish.is_some() => {
                    self.new_work(&e.task_id).await;
                    None
                }
                _ => None,
            },
        };
        if let Some(signal) = signal
            && !in_polish
        {
            let due = self.sched.signal(signal);
            for (r, why) in due {
                self.run(r, why).await;
            }
        }
        self.keep().await;
    }

    /// New work during the polish phase: functional work ends it (reviews
    /// start again); more cleanup does not.
    async fn new_work(&mut self, id: &str) {
        let req = q::ListTasks {
            task_id: Some(id.to_string()),
            ..q::ListTasks::of(None)
        };
        let Some(rec) = self.call(&req).await.and_then(|v| v.into_iter().next()) else {
            return;
        };
        if rec.task.lane != Lane::Cleanup {
            info!(
                task = id,
                lane = rec.task.lane.as_str(),
                "new functional work: polish phase over, reviews resume"
            );
            self.polish = None;
        }
    }

    fn note(&mut self, s: String) {
        self.feedback.push_back(s);
        while self.feedback.len() > 10 {
            self.feedback.pop_front();
        }
    }

    /// A completion: milestone and replan detection, and the polish phase.
    async fn completed(&mut self, id: &str) -> Option<Signal> {
        let tasks = self.all_tasks().await?;
        let rec = tasks.iter().find(|r| r.task.task_id == id)?;
        let milestone_done = rec.task.milestone.clone().filter(|m| {
            tasks
                .iter()
                .filter(|r| r.task.milestone.as_deref() == Some(m))
                .all(|r| matches!(r.state, TaskState::Completed | TaskState::Cancelled))
        });
        let open = |r: &&TaskRecord| matches!(r.state, TaskState::Pending | TaskState::Running);
        let functional_left = tasks
            .iter()
            .filter(open)
            .any(|r| r.task.lane != Lane::Cleanup);
        let cleanup_left: Vec<&TaskRecord> = tasks
            .iter()
            .filter(open)
            .filter(|r| r.task.lane == Lane::Cleanup)
            .collect();
        match self.polish.as_mut() {
            Some(done) => {
                if rec.task.lane == Lane::Cleanup {
                    *done += 1;
                }
                if *done >= self.cfg.review.polish_max_tasks {
                    let done = *done;
                    for r in cleanup_left
                        .iter()
                        .filter(|r| r.state == TaskState::Pending)
                    {
                        self.ours.insert(r.task.task_id.clone());
                        let _ = self
                            .call(&q::Cancel {
                                by: Default::default(),
                                task_id: r.task.task_id.clone(),
                            })
                            .await;
                    }
                    info!(
                        done,
                        "polish phase over: remaining cleanup directives dropped"
                    );
                }
                return None;
            }
            None if !functional_left && !cleanup_left.is_empty() => {
                info!(
                    cleanup = cleanup_left.len(),
                    max = self.cfg.review.polish_max_tasks,
                    "goal functionally complete: polish phase (cleanup directives only, no reviews)"
                );
                self.polish = Some(0);
            }
            None => {}
        }
        Some(Signal::Completed {
            milestone_done,
            manager: rec.task.role == q::MANAGER_ROLE,
        })
    }

    /// Appends the run to the run log and announces it.
    async fn record(&mut self, mut run: ReviewRun) {
        run.v = xo_proto::PROTOCOL_VERSION;
        run.at = self.clock.now_ms();
        let path = run_log_path(&self.cfg);
        if let Err(e) = runlog::append(&path, &run).await {
            warn!(path = %path.display(), error = %e, "review run log not written");
        }
        if let Err(e) = typed::publish(
            &self.bus,
            &self.subjects.review_event(&run.reviewer),
            &run,
            self.format,
        )
        .await
        {
            warn!(error = %e, "review event not published");
        }
    }

    fn base(&self, r: Reviewer, why: &str, outcome: ReviewOutcome, summary: String) -> ReviewRun {
        ReviewRun {
            v: 0,
            reviewer: r.name().into(),
            project: self.cfg.review.project.clone(),
            task_count: self.sched.completed(),
            trigger: why.into(),
            outcome,
            summary,
            directives: 0,
            documents: 0,
            verdict: None,
            converging: false,
            bootstrap: false,
            tokens_in: 0,
            tokens_out: 0,
            cost_usd: 0.0,
            at: 0,
        }
    }

    /// One review: gate (budgets, model, sandbox) → run (the supervised
    /// pipeline on the review model) → apply (documents, directives,
    /// verdict, convergence); every path ends in one run-log line.
    async fn run(&mut self, r: Reviewer, why: &'static str) {
        // Each review run is its own trace (an OpenTelemetry GenAI agent
        // span), following from the event that triggered it.
        let span = tracing::info_span!(
            parent: None,
            "review.run",
            otel.name = %format!("invoke_agent {}", r.name()),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = r.name(),
            trigger = why,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            xo.outcome = tracing::field::Empty,
        );
        span.follows_from(tracing::Span::current());
        self.run_traced(r, why, &span)
            .instrument(span.clone())
            .await
    }

    async fn run_traced(&mut self, r: Reviewer, why: &'static str, span: &tracing::Span) {
        let run = match self.gate().await {
            Err(reason) => {
                warn!(reviewer = r.name(), reason = %reason, "review skipped; work continues");
                self.base(r, why, ReviewOutcome::Skipped, reason.to_string())
            }
            Ok((pipeline, log)) => match self.execute(r, why, pipeline, &log).await {
                Err(run) => run,
                Ok((findings, run, tasks)) => self.apply(r, findings, run, &tasks).await,
            },
        };
        span.record("gen_ai.usage.input_tokens", run.tokens_in as i64);
        span.record("gen_ai.usage.output_tokens", run.tokens_out as i64);
        span.record("xo.outcome", run.outcome.as_str());
        self.record(run).await;
    }

    /// Whether a reviewer may run now: budgets left, a model, a sandbox.
    /// `Err` is the reason it is skipped.
    async fn gate(&mut self) -> Result<(Pipeline, Vec<ReviewRun>), Skip> {
        self.refresh_settings().await;
        if !self.cfg.review.enabled {
            return Err(Skip::Off);
        }
        if let Some(d) = &self.down {
            let now = self.clock.now_ms();
            if d.permanent && d.settings_version == self.settings_version {
                return Err(Skip::ModelRefused {
                    reason: d.reason.clone(),
                });
            }
            if !d.permanent && now < d.until_ms {
                return Err(Skip::ModelFailing {
                    failures: d.failures,
                    reason: d.reason.clone(),
                    retry_in_s: (d.until_ms - now) / 1000,
                });
            }
        }
        let log = runlog::read_run_log(&run_log_path(&self.cfg)).await;
        runlog::within_budget(&self.cfg.review, &log, self.clock.now_ms())?;
        if self.driver.is_none() {
            return Err(Skip::NoModel);
        }
        let pipeline = self.pipeline.clone().ok_or(Skip::NoSandbox)?;
        Ok((pipeline, log))
    }

    /// Tells the operator that knowledge waits for their review
    /// (`xo.event.alert.knowledge_review`); it is held out of prompts until
    /// accepted.
    async fn review_alert(&self, r: Reviewer, ids: &[String]) {
        let a = xo_proto::alert::Alert {
            v: xo_proto::PROTOCOL_VERSION,
            kind: xo_proto::alert::AlertKind::KnowledgeReview,
            title: format!(
                "{} knowledge document(s) wait for your review: {}",
                ids.len(),
                ids.join(", ")
            ),
            detail: format!(
                "The {} reviewer asked for a human to confirm them. They are not given to agents until accepted: accept or reject each on the console's Knowledge page (Needs your review), or POST /api/v1/knowledge/<category>/<name>/review with {{\"accept\": true|false, \"note\": \"...\"}}.",
                r.name()
            ),
            task_id: None,
            project: None,
            unit: None,
            source: "review".into(),
            at: self.clock.now_ms(),
        };
        let subject = self.subjects.alert(a.kind);
        if let Err(e) = typed::publish(&self.bus, &subject, &a, self.cfg.wire.format).await {
            warn!(error = %e, docs = ?ids, "knowledge review alert not published; the documents are listed on the console's Knowledge page");
        }
    }

    /// Records a failed model call: stop for good on a refusal, else back off.
    fn model_failed(&mut self, reason: &str) {
        let failures = self.down.as_ref().map_or(0, |d| d.failures) + 1;
        let permanent = permanent_model_error(reason);
        let wait_s = (30u64 << (failures - 1).min(5)).min(900);
        let until_ms = self.clock.now_ms() + wait_s * 1000;
        if permanent {
            error!(
                reason,
                "the review model refused; reviews stop until the settings change"
            );
        } else {
            warn!(
                reason,
                failures, wait_s, "the review model failed; backing off"
            );
        }
        self.down = Some(ModelDown {
            until_ms,
            failures,
            permanent,
            reason: reason.chars().take(300).collect(),
            settings_version: self.settings_version,
        });
    }

    /// Reads the operator settings before a run: the model, its endpoint,
    /// budgets and on/off apply from the next run (none answering: as before).
    async fn refresh_settings(&mut self) {
        let Ok(view) = typed::call(
            &self.bus,
            &self.subjects,
            &xo_proto::settings::GetSettings {},
            Duration::from_secs(3),
        )
        .await
        else {
            return;
        };
        if view.settings.version == self.settings_version {
            return;
        }
        match xo_runtime::settings::apply(&self.base, &view.settings) {
            Ok(cfg) => {
                if cfg.review.model != self.cfg.review.model {
                    self.driver = review_driver(&cfg);
                }
                self.cfg = cfg;
                self.settings_version = view.settings.version;
                info!(
                    version = self.settings_version,
                    "review: operator settings applied"
                );
            }
            Err(e) => warn!(error = %e, "review: operator settings not applied"),
        }
    }
}

xo_runtime::service_handle!(ReviewHandle, "review");
