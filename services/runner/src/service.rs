//! The runner service: claims tasks for its role, keeps the lease alive,
//! runs each task through the pipeline and reports the outcome; emits
//! SALUTE reports and heartbeats; applies the XO's steering before the
//! agent's next step; in microcosm mode runs the radio check itself.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{Instrument, debug, error, info, info_span, warn};
use xo_bus::typed::{self, CallError};
use xo_bus::{Bus, Subscription};
use xo_proto::queue::{self as q, Claimed, ExecutionMode, RunStatus};
use xo_proto::{Outcome as ActOutcome, SaluteReport, Steering, SteeringSource, Subjects};
use xo_radio::Microcosm;
use xo_runtime::XoConfig;

use crate::driver::{Driver, TurnEvent, Turns};
use crate::pipeline::{Job, Outcome, Pipeline};
use crate::proc::Groups;
use crate::sandbox::Sandbox;

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("runner {what}: {reason}")]
    Setup { what: String, reason: String },
    #[error("bus: {0}")]
    Bus(#[from] xo_bus::BusError),
}

fn setup(what: &str, reason: impl ToString) -> RunnerError {
    RunnerError::Setup {
        what: what.to_string(),
        reason: reason.to_string(),
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

/// Runs until `shutdown`; a task in flight is stopped (its agent's process
/// group killed) and left to the queue to replay.
pub async fn run(
    cfg: XoConfig,
    bus: Bus,
    opts: RunnerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunnerError> {
    xo_proto::validate_unit_id(&opts.unit).map_err(|e| setup("unit", e))?;
    xo_proto::validate_token("role", &opts.role).map_err(|e| setup("role", e))?;
    let span = info_span!("runner", unit = %opts.unit, role = %opts.role);
    async move {
        let data = cfg.data_dir();
        let groups = Groups::new(&data.join("runner"), &opts.unit)
            .map_err(|e| setup("process group file", format!("{}: {e}", data.display())))?;
        let killed = groups.kill_orphans();
        if !killed.is_empty() {
            warn!(count = killed.len(), "killed agents left by an earlier incarnation");
        }
        let sandbox = Sandbox::open(&cfg.sandbox_dir()).map_err(|e| setup("sandbox", e))?;
        let pipeline = Pipeline::new(cfg.runner.clone(), sandbox, data, &opts.unit, Some(groups))
            .map_err(|e| setup("templates", e))?;
        let mut driver =
            Driver::from_config(&cfg.runner.driver, &cfg.runner).map_err(|e| setup("driver", e))?;
        let subjects = cfg.subjects();
        let (tx, rx) = mpsc::unbounded_channel();
        let turns = Turns::new(tx);
        let current: Arc<Mutex<Option<String>>> = Default::default();

        let steer_sub = bus.subscribe(&subjects.steer(&opts.unit)).await?;
        let mut bg = vec![
            tokio::spawn(steering_loop(steer_sub, turns.clone(), cfg.wire.max_payload).in_current_span()),
            tokio::spawn(
                reporter(
                    bus.clone(),
                    cfg.clone(),
                    opts.clone(),
                    rx,
                    turns.clone(),
                    current.clone(),
                )
                .in_current_span(),
            ),
            tokio::spawn(heartbeats(bus.clone(), cfg.clone(), opts.clone(), current.clone()).in_current_span()),
        ];
        info!(driver = driver.name(), sandbox = %pipeline.sandbox().root().display(), "runner started");
        let mut shutdown = std::pin::pin!(shutdown);
        let res = loop {
            let claim = q::Claim {
                role: opts.role.clone(),
                claimant: opts.unit.clone(),
                wait_ms: cfg.runner.claim_wait_ms,
            };
            let wait = Duration::from_millis(cfg.runner.claim_wait_ms + 5_000);
            let got = tokio::select! {
                _ = &mut shutdown => break Ok(()),
                r = typed::call(&bus, &subjects, &claim, wait) => r,
            };
            let claimed = match got {
                Ok(Some(c)) => c,
                Ok(None) => continue,
                Err(e) => {
                    warn!(error = %e, "claim failed; retrying");
                    tokio::select! {
                        _ = &mut shutdown => break Ok(()),
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            let task_id = claimed.record.task.task_id.clone();
            let stop = work_task(
                &bus,
                &subjects,
                &opts.unit,
                cfg.wire.format,
                &pipeline,
                &mut driver,
                &turns,
                &current,
                claimed,
                &mut shutdown,
            )
            .instrument(info_span!("task", task_id = %task_id))
            .await;
            if stop {
                break Ok(());
            }
        };
        for h in bg.drain(..) {
            h.abort();
        }
        info!("runner stopped");
        res
    }
    .instrument(span)
    .await
}

/// Runs one claimed task; true if shutdown was requested meanwhile.
#[allow(clippy::too_many_arguments)]
async fn work_task(
    bus: &Bus,
    subjects: &Subjects,
    unit: &str,
    format: xo_proto::Format,
    pipeline: &Pipeline,
    driver: &mut Driver,
    turns: &Turns,
    current: &Arc<Mutex<Option<String>>>,
    claimed: Claimed,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> bool {
    let rec = claimed.record;
    let id = rec.task.task_id.clone();
    info!(attempt = rec.attempt, mark = ?rec.mark, "task claimed");
    let status = typed::call(bus, subjects, &q::GetStatus {}, Duration::from_secs(5))
        .await
        .ok();
    // Knowledge under its token budget (empty when no knowledge store answers).
    let selection = typed::call(
        bus,
        subjects,
        &xo_proto::knowledge::Select {
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
        goal: status
            .as_ref()
            .map(|s| s.goal.description.clone())
            .filter(|d| !d.is_empty()),
        manual: status
            .as_ref()
            .is_some_and(|s| s.mode == ExecutionMode::Manual),
        knowledge: selection.section.clone(),
        directives: active_directives(bus, subjects).await,
        record: rec,
    };
    *current.lock().unwrap_or_else(|p| p.into_inner()) = Some(id.clone());
    // Steering meant for the previous task does not carry over.
    let _ = turns.take_steering();
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let keeper = tokio::spawn(
        lease_keeper(
            bus.clone(),
            subjects.clone(),
            id.clone(),
            claimed.token.clone(),
            claimed.lease_ms,
            cancel_tx.clone(),
        )
        .in_current_span(),
    );
    let mut stopping = false;
    let (outcome, stats) = {
        let fut = pipeline.run_counted(driver, &job, turns.clone(), Some(cancel_rx));
        let mut fut = std::pin::pin!(fut);
        tokio::select! {
            o = &mut fut => o,
            _ = shutdown.as_mut() => {
                stopping = true;
                let _ = cancel_tx.send(true);
                fut.await
            }
        }
    };
    keeper.abort();
    *current.lock().unwrap_or_else(|p| p.into_inner()) = None;
    let ended = match &outcome {
        Outcome::Completed(_) => "completed",
        Outcome::Blocked(_) => "blocked",
        Outcome::Question(_) => "awaiting_response",
        Outcome::Violation(_) => "violation",
        Outcome::Cancelled => "cancelled",
    };
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
    let ev = q::RunnerEvent {
        v: xo_proto::PROTOCOL_VERSION,
        unit: unit.to_string(),
        task_id: id.clone(),
        outcome: ended.into(),
        attempt: job.record.attempt,
        agent_runs: stats.agent_runs,
        format_retries: stats.format_retries,
        validation_failures: stats.validation_failures,
        clarifications: stats.clarifications,
        knowledge: selection.docs.clone(),
        at: xo_proto::now_ms(),
    };
    if let Err(e) = typed::publish(bus, &subjects.runner_event(unit), &ev, format).await {
        warn!(error = %e, "runner event not published");
    }
    report(bus, subjects, &id, &claimed.token, outcome).await;
    stopping
}

/// The directives waiting or being worked on, most urgent first, as the
/// prompt lists them.
async fn active_directives(bus: &Bus, subjects: &Subjects) -> Vec<String> {
    let Ok(tasks) = typed::call(
        bus,
        subjects,
        &q::ListTasks::default(),
        Duration::from_secs(3),
    )
    .await
    else {
        return Vec::new();
    };
    let mut active: Vec<&q::TaskRecord> = tasks
        .iter()
        .filter(|r| r.task.directive.is_some())
        .filter(|r| matches!(r.state, q::TaskState::Pending | q::TaskState::Running))
        .collect();
    active.sort_by_key(|r| (r.task.lane, r.seq));
    active
        .iter()
        .map(|r| format!("[{}] {}", r.task.lane.as_str(), r.task.intent))
        .collect()
}

/// Blocks the task, or (with a question) leaves it awaiting the operator.
async fn block(
    bus: &Bus,
    subjects: &Subjects,
    id: &str,
    token: &str,
    reason: String,
    question: Option<String>,
    timeout: Duration,
) -> Result<(), CallError> {
    let req = q::Block {
        task_id: id.into(),
        token: token.into(),
        reason,
        question,
    };
    typed::call(bus, subjects, &req, timeout).await.map(|_| ())
}

/// Sends the outcome to the queue, retrying while the queue is unreachable.
async fn report(bus: &Bus, subjects: &Subjects, id: &str, token: &str, outcome: Outcome) {
    let timeout = Duration::from_secs(10);
    for attempt in 1..=5u32 {
        let res: Result<(), CallError> = match &outcome {
            Outcome::Completed(r) => {
                info!(summary = %r.report().summary, "task completed");
                typed::call(
                    bus,
                    subjects,
                    &q::Complete {
                        task_id: id.into(),
                        token: token.into(),
                        report: r.report().clone(),
                        manager_reply: Some(serde_json::Value::Object(r.reply().clone())),
                    },
                    timeout,
                )
                .await
                .map(|_| ())
            }
            Outcome::Blocked(reason) | Outcome::Violation(reason) => {
                warn!(reason = %reason, "task blocked");
                block(bus, subjects, id, token, reason.clone(), None, timeout).await
            }
            Outcome::Question(q) => {
                info!(question = %q, "task awaits the operator's answer");
                block(
                    bus,
                    subjects,
                    id,
                    token,
                    "ASKED_QUESTION".into(),
                    Some(q.clone()),
                    timeout,
                )
                .await
            }
            Outcome::Cancelled => {
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

/// Renews the lease; cancels the run when the lease is lost or the
/// operator halts the queue (a halt caused by a blocked task lets running
/// tasks finish).
async fn lease_keeper(
    bus: Bus,
    subjects: Subjects,
    task_id: String,
    token: String,
    lease_ms: u64,
    cancel: watch::Sender<bool>,
) {
    let every = Duration::from_millis((lease_ms / 3).max(50));
    loop {
        tokio::time::sleep(every).await;
        let hb = q::Heartbeat {
            task_id: task_id.clone(),
            token: token.clone(),
            checkpoint: false,
        };
        match typed::call(&bus, &subjects, &hb, every.max(Duration::from_secs(2))).await {
            Ok(_) => {}
            Err(CallError::Service(e)) => {
                warn!(error = %e, "lease lost; stopping the agent");
                let _ = cancel.send(true);
                return;
            }
            Err(e) => warn!(error = %e, "lease renewal failed; will retry"),
        }
        if let Ok(s) = typed::call(&bus, &subjects, &q::GetStatus {}, Duration::from_secs(2)).await
            && s.status == RunStatus::Halted
            && !s
                .halt_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("TASK_BLOCKED"))
        {
            warn!(reason = ?s.halt_reason, "queue halted by the operator; stopping the agent");
            let _ = cancel.send(true);
            return;
        }
    }
}

async fn steering_loop(mut sub: Subscription, turns: Turns, limit: usize) {
    while let Some(msg) = sub.next().await {
        match typed::decode::<Steering>(&msg, limit) {
            Ok(s) => {
                info!(kind = %s.kind.as_str(), severity = ?s.severity, source = ?s.source, "steering received");
                turns.push_steering(s.message);
            }
            Err(e) => warn!(subject = %msg.subject, error = %e, "undecodable steering dropped"),
        }
    }
}

async fn heartbeats(
    bus: Bus,
    cfg: XoConfig,
    opts: RunnerOptions,
    current: Arc<Mutex<Option<String>>>,
) {
    let subjects = cfg.subjects();
    let mut seq = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.runner.heartbeat_ms));
    loop {
        tick.tick().await;
        seq += 1;
        let mut hb = xo_proto::Heartbeat::new(&opts.unit, &opts.role, seq);
        hb.task_id = current.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Err(e) =
            typed::publish(&bus, &subjects.heartbeat(&opts.unit), &hb, cfg.wire.format).await
        {
            warn!(error = %e, "heartbeat not published");
        }
    }
}

/// Builds SALUTE reports from the agent's turns; publishes one every
/// `salute_interval_turns` turns and at each new task; runs the radio
/// in-process in microcosm mode.
async fn reporter(
    bus: Bus,
    cfg: XoConfig,
    opts: RunnerOptions,
    mut rx: mpsc::UnboundedReceiver<TurnEvent>,
    turns: Turns,
    current: Arc<Mutex<Option<String>>>,
) {
    let subjects = cfg.subjects();
    let profile = cfg.roles().get(&opts.role).clone();
    let interval = u64::from(profile.doctrine.salute_interval_turns.max(1));
    let mut micro = cfg.runner.microcosm.then(|| Microcosm::new(profile));
    let mut s = SaluteState::new(&opts, &cfg);
    while let Some(ev) = rx.recv().await {
        let task = current.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let new_task = s.task != task;
        if new_task {
            s.start_task(task);
        }
        let mut report = s.turn(ev);
        if let Some(m) = micro.as_mut() {
            for st in m.turn(&mut report) {
                info!(kind = %st.kind.as_str(), source = ?SteeringSource::SelfCheck, "microcosm steering");
                turns.push_steering(st.message);
            }
        }
        if (new_task || report.time.turn.is_multiple_of(interval))
            && let Err(e) =
                typed::publish(&bus, &subjects.salute(&opts.unit), &report, cfg.wire.format).await
        {
            warn!(error = %e, "salute not published");
        }
    }
}

struct SaluteState {
    unit: String,
    role: String,
    host: Option<String>,
    limit: u64,
    task: Option<String>,
    turn: u64,
    seq: u64,
    since_progress: u32,
    history: u32,
    recent: VecDeque<xo_proto::Action>,
    context: u64,
    context_limit: u64,
    condensations: u32,
    tokens_in: u64,
    tokens_out: u64,
    cost: f64,
    model: Option<String>,
    failures: std::collections::BTreeMap<String, u32>,
    summary: Option<String>,
}

impl SaluteState {
    fn new(opts: &RunnerOptions, cfg: &XoConfig) -> Self {
        Self {
            unit: opts.unit.clone(),
            role: opts.role.clone(),
            host: std::env::var("HOSTNAME").ok(),
            limit: cfg.runner.context_limit,
            task: None,
            turn: 0,
            seq: 0,
            since_progress: 0,
            history: 0,
            recent: VecDeque::new(),
            context: 0,
            context_limit: cfg.runner.context_limit,
            condensations: 0,
            tokens_in: 0,
            tokens_out: 0,
            cost: 0.0,
            model: None,
            failures: Default::default(),
            summary: None,
        }
    }

    fn start_task(&mut self, task: Option<String>) {
        self.task = task;
        self.since_progress = 0;
        self.history = 0;
        self.recent.clear();
        self.context = 0;
        self.condensations = 0;
    }

    fn turn(&mut self, ev: TurnEvent) -> SaluteReport {
        self.turn += 1;
        self.seq += 1;
        self.history += 1;
        if ev.progress {
            self.since_progress = 0;
        } else {
            self.since_progress += 1;
        }
        if let Some(mut a) = ev.action {
            a.turn = self.turn;
            if a.outcome == ActOutcome::Error
                && let Some(t) = &a.tool
            {
                *self.failures.entry(t.to_string()).or_default() += 1;
            }
            self.recent.push_back(a);
            while self.recent.len() > 20 {
                self.recent.pop_front();
            }
        }
        if let Some(c) = ev.context_tokens {
            self.context = c;
        }
        if let Some(l) = ev.context_limit {
            self.context_limit = l;
        }
        if ev.condensed {
            self.condensations += 1;
        }
        self.tokens_in += ev.tokens_in;
        self.tokens_out += ev.tokens_out;
        self.cost += ev.cost_usd;
        if ev.model.is_some() {
            self.model = ev.model;
        }
        if ev.summary.is_some() {
            self.summary = ev.summary;
        }
        let mut r = SaluteReport::new(&self.unit, &self.role, self.turn, self.seq);
        let limit = if self.context_limit > 0 {
            self.context_limit
        } else {
            self.limit
        };
        r.size.context_tokens = self.context;
        r.size.context_limit = limit;
        r.size.context_fill = if limit > 0 {
            (self.context as f64 / limit as f64).min(1.0)
        } else {
            0.0
        };
        r.size.history_len = self.history;
        r.size.condensations = self.condensations;
        r.activity.task_id = self.task.clone();
        r.activity.summary = self.summary.clone();
        r.activity.turns_since_progress = self.since_progress;
        r.activity.recent = self.recent.iter().cloned().collect();
        r.location.host = self.host.clone();
        r.equipment.model = self.model.clone();
        r.equipment.tokens_in = self.tokens_in;
        r.equipment.tokens_out = self.tokens_out;
        r.equipment.cost_usd = self.cost;
        r.equipment.tool_failures = self.failures.clone();
        r
    }
}
