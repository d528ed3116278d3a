//! The review supervisors (seed 001), run by the XO at natural
//! breakpoints: code style, design, internaliser, and the assessor.
//!
//! [`Schedule`] is the pure trigger logic (counters, urgency, order);
//! [`start`] listens to the queue's task events and the runners' events,
//! runs due reviewers through the supervised pipeline on the `supervisor`
//! model route, and turns their validated output into knowledge documents
//! and directives.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{Instrument, info, info_span, warn};
use xo_bus::{Bus, typed};
use xo_proto::knowledge::*;
use xo_proto::queue::{self as q, Lane, Task, TaskEvent, TaskRecord, TaskState};
use xo_proto::{Format, Subjects};
use xo_runner::driver::{Driver, OpenAiDriver, TurnEvent, Turns};
use xo_runner::sandbox::Sandbox;
use xo_runner::{Job, Outcome, Pipeline};
use xo_runtime::XoConfig;
use xo_runtime::config::ReviewConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reviewer {
    CodeStyle,
    Design,
    Internaliser,
    /// Alignment of done work with the goal; runs after the others.
    Assessor,
}

impl Reviewer {
    pub const ALL: [Reviewer; 4] = [
        Self::CodeStyle,
        Self::Design,
        Self::Internaliser,
        Self::Assessor,
    ];

    pub fn name(self) -> &'static str {
        self.author().as_str()
    }

    pub fn author(self) -> Author {
        match self {
            Self::CodeStyle => Author::CodeStyle,
            Self::Design => Author::Design,
            Self::Internaliser => Author::Internaliser,
            Self::Assessor => Author::Assessor,
        }
    }

    fn idx(self) -> usize {
        self as usize
    }
}

/// What the schedule hears.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// A task completed; `milestone_done` when it was the last of its milestone.
    Completed {
        milestone_done: Option<String>,
        manager: bool,
    },
    /// QA (validation) failed: urgency + 0.3.
    ValidationFailure,
    /// A task was aborted (blocked): urgency + 1.0, and the design reviewer runs.
    Abort,
    /// The plan churned (tasks cancelled or replaced): urgency + 0.2.
    Churn,
    /// The assessor found minor drift: urgency + 0.5.
    MinorDrift,
}

/// Seed 001's triggers: counters per reviewer, urgency that pulls runs
/// forward, reviewers before the assessor.
#[derive(Debug, Clone)]
pub struct Schedule {
    completed: u64,
    since: [u32; 4],
    /// 0: event-triggered only (design).
    every: [u32; 4],
    urgency: f64,
}

impl Schedule {
    pub fn new(cfg: &ReviewConfig) -> Self {
        Self {
            completed: 0,
            since: [0; 4],
            every: [
                cfg.code_style_every,
                0,
                cfg.internaliser_every,
                cfg.assessor_every,
            ],
            urgency: 0.0,
        }
    }

    pub fn completed(&self) -> u64 {
        self.completed
    }
    pub fn urgency(&self) -> f64 {
        self.urgency
    }
    pub fn interval(&self, r: Reviewer) -> u32 {
        self.every[r.idx()]
    }

    /// A reviewer whose findings barely changed: its interval doubles.
    pub fn converging(&mut self, r: Reviewer) {
        let e = &mut self.every[r.idx()];
        *e = e.saturating_mul(2);
    }

    /// Takes a signal; returns the reviewers due now, each with why, in
    /// the order they run (the assessor last, so it reads their run log).
    pub fn signal(&mut self, s: Signal) -> Vec<(Reviewer, &'static str)> {
        let mut due: BTreeMap<Reviewer, &'static str> = BTreeMap::new();
        match s {
            Signal::Completed {
                milestone_done,
                manager,
            } => {
                self.completed += 1;
                for r in Reviewer::ALL {
                    let i = r.idx();
                    if self.every[i] == 0 {
                        continue;
                    }
                    self.since[i] += 1;
                    if self.since[i] >= self.every[i] {
                        due.entry(r).or_insert("interval");
                    }
                }
                if milestone_done.is_some() {
                    for r in Reviewer::ALL {
                        due.entry(r).or_insert("milestone");
                    }
                }
                if manager {
                    due.entry(Reviewer::Design).or_insert("replan");
                }
            }
            Signal::ValidationFailure => self.urgency += 0.3,
            Signal::Abort => {
                self.urgency += 1.0;
                due.entry(Reviewer::Design).or_insert("abort");
            }
            Signal::Churn => self.urgency += 0.2,
            Signal::MinorDrift => self.urgency += 0.5,
        }
        // Float sums of 0.3 steps: compare with a little slack.
        if self.urgency >= 1.0 - 1e-9 {
            for r in [
                Reviewer::CodeStyle,
                Reviewer::Design,
                Reviewer::Internaliser,
            ] {
                due.entry(r).or_insert("urgency");
            }
            self.urgency = 0.0;
        }
        for r in due.keys() {
            self.since[r.idx()] = 0;
        }
        due.into_iter().collect()
    }
}

// ---- the reviewers' output schemas (seed 001), validated strictly ----

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectiveOut {
    #[serde(rename = "type")]
    pub kind: DirectiveType,
    pub description: String,
    #[serde(default)]
    pub rationale: String,
    pub priority: DirectivePriority,
    #[serde(default)]
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocOut {
    pub name: String,
    pub title: String,
    pub rules: Vec<String>,
    #[serde(default)]
    pub examples: String,
    #[serde(default)]
    pub rationale: String,
    #[serde(default)]
    pub milestone: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeStyleOut {
    pub conventions_updated: Vec<String>,
    pub documents: Vec<DocOut>,
    pub directives: Vec<DirectiveOut>,
    pub summary: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignOut {
    pub design_updates: Vec<String>,
    pub documents: Vec<DocOut>,
    pub directives: Vec<DirectiveOut>,
    pub summary: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemCategory {
    Lesson,
    Domain,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeItem {
    pub category: ItemCategory,
    pub content: String,
    #[serde(default)]
    pub source_task: Option<String>,
    pub confidence: String,
    #[serde(default)]
    pub needs_user_review: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InternaliserOut {
    pub knowledge_items: Vec<KnowledgeItem>,
    pub summary: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Aligned,
    MinorDrift,
    MajorDrift,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssessorOut {
    pub verdict: Verdict,
    pub summary: String,
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// A reviewer's validated findings.
#[derive(Debug, Clone)]
pub struct Findings {
    pub documents: Vec<(Category, DocOut)>,
    pub directives: Vec<DirectiveOut>,
    pub verdict: Option<Verdict>,
    pub summary: String,
}

impl Findings {
    /// What is compared between runs for convergence.
    pub fn keys(&self) -> BTreeSet<String> {
        self.documents
            .iter()
            .map(|(c, d)| format!("doc:{}/{}", c.as_str(), d.name))
            .chain(
                self.directives
                    .iter()
                    .map(|d| format!("dir:{}", d.description.to_lowercase())),
            )
            .collect()
    }
}

/// Jaccard similarity of two finding sets (1.0 when both are empty).
pub fn similarity(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

fn check_len(what: &str, s: &str) -> Result<(), String> {
    let n = s.chars().count();
    if n > 200 {
        return Err(format!("{what} is {n} characters, at most 200"));
    }
    Ok(())
}

fn slug(text: &str) -> String {
    let s: String = text
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let words: Vec<&str> = s.split('-').filter(|w| !w.is_empty()).take(6).collect();
    let s = words.join("-");
    if s.is_empty() { "item".into() } else { s }
}

/// The findings of a reviewer that writes documents into its own folder.
fn documents_and_directives(
    c: Category,
    documents: Vec<DocOut>,
    directives: Vec<DirectiveOut>,
    summary: String,
) -> Findings {
    Findings {
        documents: documents.into_iter().map(|d| (c, d)).collect(),
        directives,
        verdict: None,
        summary,
    }
}

/// Validates a reviewer's `output` against its schema; any error discards
/// the whole reply.
pub fn parse_findings(r: Reviewer, output: &serde_json::Value) -> Result<Findings, String> {
    let de = |e: serde_json::Error| format!("{} reply does not match its schema: {e}", r.name());
    let check_dirs = |ds: &[DirectiveOut]| -> Result<(), String> {
        for d in ds {
            check_len("directive description", &d.description)?;
            check_len("directive rationale", &d.rationale)?;
            if d.description.trim().is_empty() {
                return Err("a directive has an empty description".into());
            }
        }
        Ok(())
    };
    Ok(match r {
        Reviewer::CodeStyle => {
            let o: CodeStyleOut = serde_json::from_value(output.clone()).map_err(de)?;
            check_dirs(&o.directives)?;
            documents_and_directives(Category::Conventions, o.documents, o.directives, o.summary)
        }
        Reviewer::Design => {
            let o: DesignOut = serde_json::from_value(output.clone()).map_err(de)?;
            check_dirs(&o.directives)?;
            documents_and_directives(Category::Design, o.documents, o.directives, o.summary)
        }
        Reviewer::Internaliser => {
            let o: InternaliserOut = serde_json::from_value(output.clone()).map_err(de)?;
            let documents = o
                .knowledge_items
                .into_iter()
                .filter(|i| !i.content.trim().is_empty())
                .map(|i| {
                    let c = match i.category {
                        ItemCategory::Lesson => Category::Lessons,
                        ItemCategory::Domain => Category::Domain,
                    };
                    let title: String = i.content.chars().take(60).collect();
                    let mut rationale = format!("confidence: {}", i.confidence);
                    if let Some(t) = &i.source_task {
                        rationale.push_str(&format!("; from task {t}"));
                    }
                    if i.needs_user_review {
                        rationale.push_str("; needs the operator's review");
                    }
                    (
                        c,
                        DocOut {
                            name: slug(&i.content),
                            title,
                            rules: vec![i.content.replace('\n', " ")],
                            examples: String::new(),
                            rationale,
                            milestone: None,
                        },
                    )
                })
                .collect();
            Findings {
                documents,
                directives: Vec::new(),
                verdict: None,
                summary: o.summary,
            }
        }
        Reviewer::Assessor => {
            let o: AssessorOut = serde_json::from_value(output.clone()).map_err(de)?;
            Findings {
                documents: Vec::new(),
                directives: Vec::new(),
                verdict: Some(o.verdict),
                summary: o.summary,
            }
        }
    })
}

fn flat_schema(r: Reviewer) -> serde_json::Value {
    match r {
        Reviewer::CodeStyle => {
            serde_json::json!({"conventions_updated": "array", "documents": "array", "directives": "array", "summary": "string"})
        }
        Reviewer::Design => {
            serde_json::json!({"design_updates": "array", "documents": "array", "directives": "array", "summary": "string"})
        }
        Reviewer::Internaliser => {
            serde_json::json!({"knowledge_items": "array", "summary": "string"})
        }
        Reviewer::Assessor => {
            serde_json::json!({"verdict": "string", "summary": "string", "evidence": "array"})
        }
    }
}

fn remit(r: Reviewer) -> &'static str {
    match r {
        Reviewer::CodeStyle => {
            "You are the code style supervisor. Read the files the recent tasks changed and compare them with the conventions. If no convention exists for a pattern, establish one (a document). If code does not match a convention, write a cleanup directive. If it matches, do nothing. You own conventions/ only. Each document: name (one token), title, rules (short imperative rules, at most 500 characters in all), examples, rationale. Reply output: {\"conventions_updated\": [names], \"documents\": [documents], \"directives\": [{\"type\": \"cleanup\"|\"functional\", \"description\": \"<= 200 chars\", \"rationale\": \"<= 200 chars\", \"priority\": \"critical\"|\"normal\"|\"low\", \"files\": [..]}], \"summary\": \"...\"}."
        }
        Reviewer::Design => {
            "You are the design supervisor. Compare the design documents with what has been built. Decide whether a divergence means the implementation or the design is wrong. Update design documents that are outdated; write a functional directive when the approach must change. You own design/ only. Reply output: {\"design_updates\": [names], \"documents\": [documents with name, title, rules, examples, rationale, milestone], \"directives\": [...], \"summary\": \"...\"}."
        }
        Reviewer::Internaliser => {
            "You are the internaliser. From the recent plans, results and validation feedback, capture anything novel: a discovered pattern, a surprising library behaviour, an implicit design decision. Capture facts, never prescribe. Reply output: {\"knowledge_items\": [{\"category\": \"lesson\"|\"domain\", \"content\": \"...\", \"source_task\": \"<task id>\", \"confidence\": \"high\"|\"medium\"|\"low\", \"needs_user_review\": false}], \"summary\": \"...\"}."
        }
        Reviewer::Assessor => {
            "You are the assessor. Judge whether the work done so far is aligned with the goal, using the reviewers' run log as evidence of drift. Reply output: {\"verdict\": \"aligned\"|\"minor_drift\"|\"major_drift\", \"summary\": \"...\", \"evidence\": [\"...\"]}. major_drift halts the queue for the operator."
        }
    }
}

/// The run log: `<data>/<project>/reviews.jsonl`.
pub fn run_log_path(cfg: &XoConfig) -> PathBuf {
    cfg.data_dir()
        .join(&cfg.review.project)
        .join("reviews.jsonl")
}

pub fn read_run_log(path: &std::path::Path) -> Vec<ReviewRun> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Spent today (UTC) and on the project, in USD.
pub fn spent(log: &[ReviewRun], now_ms: u64) -> (f64, f64) {
    let day = now_ms / 86_400_000;
    let today = log
        .iter()
        .filter(|r| r.at / 86_400_000 == day)
        .map(|r| r.cost_usd)
        .sum();
    let total = log.iter().map(|r| r.cost_usd).sum();
    (today, total)
}

struct Reviews {
    cfg: XoConfig,
    bus: Bus,
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
}

enum Input {
    Task(TaskEvent),
    Runner(q::RunnerEvent),
}

/// Starts the review supervisors (when `review.enabled`).
pub async fn start(cfg: XoConfig, bus: Bus) -> Result<JoinHandle<()>, xo_bus::BusError> {
    let subjects = cfg.subjects();
    let mut tasks = bus
        .subscribe(&format!("{}.event.task.*", subjects.prefix()))
        .await?;
    let mut runners = bus
        .subscribe(&format!("{}.event.runner.*", subjects.prefix()))
        .await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let limit = cfg.wire.max_payload;
    let t1 = tx.clone();
    tokio::spawn(async move {
        while let Some(m) = tasks.next().await {
            if let Ok(e) = typed::decode::<TaskEvent>(&m, limit)
                && t1.send(Input::Task(e)).is_err()
            {
                break;
            }
        }
    });
    tokio::spawn(async move {
        while let Some(m) = runners.next().await {
            if let Ok(e) = typed::decode::<q::RunnerEvent>(&m, limit)
                && tx.send(Input::Runner(e)).is_err()
            {
                break;
            }
        }
    });
    let sandbox = Sandbox::open(&cfg.sandbox_dir()).ok();
    let pipeline = sandbox
        .and_then(|s| Pipeline::new(cfg.runner.clone(), s, cfg.data_dir(), "xo-review", None).ok());
    let driver = if cfg.review.model.model.is_empty() {
        None
    } else {
        OpenAiDriver::new(&cfg.review.model, cfg.runner.context_limit)
            .ok()
            .map(Driver::OpenAi)
    };
    let mut r = Reviews {
        sched: Schedule::new(&cfg.review),
        format: cfg.wire.format,
        subjects,
        bus,
        pipeline,
        driver,
        last: BTreeMap::new(),
        feedback: VecDeque::new(),
        polish: None,
        ours: BTreeSet::new(),
        runs: 0,
        cfg,
    };
    info!(model = %r.cfg.review.model.model, "review supervisors started");
    Ok(tokio::spawn(
        async move {
            while let Some(input) = rx.recv().await {
                r.take(input).await;
            }
        }
        .instrument(info_span!("review")),
    ))
}

impl Reviews {
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

    async fn take(&mut self, input: Input) {
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
            Input::Task(e) => match e.event.as_str() {
                "TASK_COMPLETE" => self.completed(&e.task_id).await,
                "TASK_RETRY" => {
                    self.note(format!(
                        "task {}: retried after a failed attempt",
                        e.task_id
                    ));
                    Some(Signal::ValidationFailure)
                }
                "TASK_BLOCKED" => {
                    self.note(format!("task {}: blocked", e.task_id));
                    Some(Signal::Abort)
                }
                "TASK_CANCELLED" if !self.ours.contains(&e.task_id) => Some(Signal::Churn),
                _ => None,
            },
        };
        let Some(signal) = signal else { return };
        if self.polish.is_some() {
            return;
        }
        let due = self.sched.signal(signal);
        for (r, why) in due {
            self.run(r, why).await;
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
        let tasks = self.call(&q::ListTasks::default()).await?;
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
            manager: rec.task.role == "manager",
        })
    }

    async fn record(&mut self, mut run: ReviewRun) {
        run.v = xo_proto::PROTOCOL_VERSION;
        run.at = xo_proto::now_ms();
        let path = run_log_path(&self.cfg);
        if let Some(d) = path.parent() {
            let _ = std::fs::create_dir_all(d);
        }
        if let Ok(line) = serde_json::to_string(&run) {
            use std::io::Write;
            let r = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
            if let Err(e) = r {
                warn!(path = %path.display(), error = %e, "review run log not written");
            }
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

    fn base(&self, r: Reviewer, why: &str, outcome: &str, summary: String) -> ReviewRun {
        ReviewRun {
            v: 0,
            reviewer: r.name().into(),
            project: self.cfg.review.project.clone(),
            task_count: self.sched.completed(),
            trigger: why.into(),
            outcome: outcome.into(),
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

    async fn skip(&mut self, r: Reviewer, why: &str, reason: String) {
        warn!(reviewer = r.name(), reason = %reason, "review skipped; work continues");
        let run = self.base(r, why, "skipped", reason);
        self.record(run).await;
    }

    async fn run(&mut self, r: Reviewer, why: &'static str) {
        let log = read_run_log(&run_log_path(&self.cfg));
        let (today, total) = spent(&log, xo_proto::now_ms());
        let rc = &self.cfg.review;
        if rc.daily_budget_usd > 0.0 && today >= rc.daily_budget_usd {
            return self
                .skip(
                    r,
                    why,
                    format!(
                        "daily budget spent (${today:.4} of ${:.2})",
                        rc.daily_budget_usd
                    ),
                )
                .await;
        }
        if rc.project_budget_usd > 0.0 && total >= rc.project_budget_usd {
            return self
                .skip(
                    r,
                    why,
                    format!(
                        "project budget spent (${total:.4} of ${:.2})",
                        rc.project_budget_usd
                    ),
                )
                .await;
        }
        if self.driver.is_none() {
            return self
                .skip(r, why, "no model configured (review.model.model)".into())
                .await;
        }
        let Some(pipeline) = self.pipeline.clone() else {
            return self
                .skip(r, why, "the sandbox could not be opened".into())
                .await;
        };
        let status = self.call(&q::GetStatus {}).await.unwrap_or_default();
        let tasks = self
            .call(&q::ListTasks::default())
            .await
            .unwrap_or_default();
        let docs = self.call(&ListDocs::default()).await.unwrap_or_default();
        let bootstrap = docs.docs.is_empty();
        let knowledge = self
            .call(&Select {
                milestone: None,
                budget_tokens: None,
            })
            .await
            .unwrap_or_default();
        let instructions = self.inputs(r, &status, &tasks, &docs, &log, bootstrap);
        self.runs += 1;
        let mut task = Task::new(
            format!("review-{}-{}", r.name().replace('_', "-"), self.runs),
            format!("{} review", r.name()),
            instructions,
            r.name(),
        );
        task.project = Some(self.cfg.review.project.clone());
        task.expected_json_schema = Some(flat_schema(r));
        let job = Job {
            record: TaskRecord::running(task, 1),
            goal: Some(status.goal.description.clone()),
            manual: false,
            knowledge: knowledge.section,
            directives: Vec::new(),
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<TurnEvent>();
        let turns = Turns::new(tx);
        let Some(mut driver) = self.driver.take() else {
            return;
        };
        info!(
            reviewer = r.name(),
            trigger = why,
            bootstrap,
            "review running"
        );
        let outcome = pipeline.run(&mut driver, &job, turns, None).await;
        self.driver = Some(driver);
        let (mut tin, mut tout, mut cost) = (0, 0, 0.0);
        while let Ok(ev) = rx.try_recv() {
            tin += ev.tokens_in;
            tout += ev.tokens_out;
            cost += ev.cost_usd;
        }
        let mut run = self.base(r, why, "ran", String::new());
        run.bootstrap = bootstrap;
        run.tokens_in = tin;
        run.tokens_out = tout;
        run.cost_usd = cost;
        let result = match outcome {
            Outcome::Completed(res) => res
                .reply()
                .get("output")
                .cloned()
                .ok_or_else(|| "the reply has no output".to_string())
                .and_then(|o| parse_findings(r, &o)),
            Outcome::Blocked(reason) | Outcome::Violation(reason) => {
                run.outcome = "skipped".into();
                run.summary = format!("model unreachable or reply unusable: {reason}");
                warn!(reviewer = r.name(), reason = %run.summary, "review skipped; work continues");
                return self.record(run).await;
            }
            Outcome::Question(_) | Outcome::Cancelled => {
                Err("the reviewer asked instead of reviewing".into())
            }
        };
        let findings = match result {
            Ok(f) => f,
            Err(e) => {
                warn!(reviewer = r.name(), error = %e, "malformed review reply discarded");
                run.outcome = "discarded".into();
                run.summary = e;
                return self.record(run).await;
            }
        };
        run.summary = findings.summary.clone();
        // Knowledge documents, under the reviewer's own authorship.
        for (c, d) in &findings.documents {
            let doc = KnowledgeDoc {
                category: *c,
                name: d.name.clone(),
                title: d.title.clone(),
                status: DocStatus::Provisional,
                updated_by: String::new(),
                after_task: None,
                milestone: d.milestone.clone(),
                uses: 0,
                rules: d.rules.clone(),
                examples: d.examples.clone(),
                rationale: d.rationale.clone(),
                changelog: Vec::new(),
            };
            let last = tasks
                .iter()
                .filter(|t| t.state == TaskState::Completed)
                .max_by_key(|t| t.updated_at)
                .map(|t| t.task.task_id.clone());
            let put = PutDoc {
                doc,
                author: r.author(),
                task: last,
            };
            match typed::call(&self.bus, &self.subjects, &put, Duration::from_secs(5)).await {
                Ok(_) => run.documents += 1,
                Err(e) => {
                    warn!(reviewer = r.name(), doc = %d.name, error = %e, "review document refused")
                }
            }
        }
        // Directives: announced, and enqueued in the lane they belong to.
        for d in &findings.directives {
            let id = format!(
                "dir-{}-{}-{}",
                r.name().replace('_', "-"),
                self.runs,
                run.directives + 1
            );
            let directive = Directive {
                v: xo_proto::PROTOCOL_VERSION,
                id: id.clone(),
                kind: d.kind,
                source: r.name().into(),
                description: d.description.clone(),
                rationale: d.rationale.clone(),
                priority: d.priority,
                files: d.files.clone(),
                at: xo_proto::now_ms(),
            };
            let _ = typed::publish(
                &self.bus,
                &self.subjects.directive(r.name()),
                &directive,
                self.format,
            )
            .await;
            let mut t = Task::new(
                id.clone(),
                if d.rationale.is_empty() {
                    d.description.clone()
                } else {
                    format!("{} (why: {})", d.description, d.rationale)
                },
                format!(
                    "Directive from the {} supervisor ({:?}, {:?}): {}\nRationale: {}\nFiles: {}",
                    r.name(),
                    d.kind,
                    d.priority,
                    d.description,
                    d.rationale,
                    d.files.join(", ")
                ),
                self.cfg.review.directive_role.clone(),
            );
            t.lane = directive.lane();
            t.directive = Some(id);
            t.project = Some(self.cfg.review.project.clone());
            if self.call(&q::Enqueue { tasks: vec![t] }).await.is_some() {
                run.directives += 1;
            }
        }
        if let Some(v) = findings.verdict {
            run.verdict = Some(
                match v {
                    Verdict::Aligned => "aligned",
                    Verdict::MinorDrift => "minor_drift",
                    Verdict::MajorDrift => "major_drift",
                }
                .into(),
            );
            match v {
                Verdict::MajorDrift => {
                    warn!(summary = %findings.summary, "assessor: major drift; halting for the operator");
                    let _ = self
                        .call(&q::Halt {
                            reason: format!("assessor: major drift: {}", findings.summary),
                        })
                        .await;
                }
                Verdict::MinorDrift => {
                    for (r2, why2) in self.sched.signal(Signal::MinorDrift) {
                        if r2 != Reviewer::Assessor {
                            Box::pin(self.run(r2, why2)).await;
                        }
                    }
                }
                Verdict::Aligned => {}
            }
        }
        // Convergence: findings barely changed since the last run.
        let keys = findings.keys();
        if let Some(prev) = self.last.get(&r)
            && r != Reviewer::Assessor
            && self.sched.interval(r) > 0
            && similarity(prev, &keys) >= self.cfg.review.convergence_similarity
        {
            self.sched.converging(r);
            run.converging = true;
            info!(
                reviewer = r.name(),
                interval = self.sched.interval(r),
                "reviewer converging; its interval doubles"
            );
        }
        self.last.insert(r, keys);
        info!(
            reviewer = r.name(),
            directives = run.directives,
            documents = run.documents,
            cost_usd = run.cost_usd,
            "review done"
        );
        self.record(run).await;
    }

    /// Compressed inputs (seed 001: summarised state, not the full context).
    fn inputs(
        &self,
        r: Reviewer,
        status: &q::QueueStatus,
        tasks: &[TaskRecord],
        docs: &DocList,
        log: &[ReviewRun],
        bootstrap: bool,
    ) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "{}\n", remit(r));
        if bootstrap {
            s.push_str("BOOTSTRAP: the knowledge store is empty. Establish baselines (initial documents describing what exists) instead of comparing against documents.\n\n");
        }
        let _ = writeln!(s, "Goal: {}", status.goal.description);
        let mut milestones: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for t in tasks {
            if let Some(m) = &t.task.milestone {
                let e = milestones.entry(m).or_default();
                e.1 += 1;
                if t.state == TaskState::Completed {
                    e.0 += 1;
                }
            }
        }
        if !milestones.is_empty() {
            let ms: Vec<String> = milestones
                .iter()
                .map(|(m, (d, n))| format!("{m} ({d}/{n} done)"))
                .collect();
            let _ = writeln!(s, "Milestones: {}", ms.join(", "));
        }
        let mut done: Vec<&TaskRecord> = tasks
            .iter()
            .filter(|t| t.state == TaskState::Completed)
            .collect();
        done.sort_by_key(|t| t.updated_at);
        s.push_str("\nDone (most recent last):\n");
        for t in done.iter().rev().take(20).rev() {
            let summary = t.report.as_ref().map(|r| r.summary.as_str()).unwrap_or("");
            let _ = writeln!(s, "- {}: {} — {}", t.task.task_id, t.task.intent, summary);
        }
        s.push_str("\nPlanned:\n");
        for t in tasks
            .iter()
            .filter(|t| t.state == TaskState::Pending)
            .take(20)
        {
            let _ = writeln!(s, "- {}: {}", t.task.task_id, t.task.intent);
        }
        if !self.feedback.is_empty() {
            s.push_str("\nRecent validation feedback:\n");
            for f in &self.feedback {
                let _ = writeln!(s, "- {f}");
            }
        }
        s.push_str("\nKnowledge store:\n");
        for d in &docs.docs {
            let _ = writeln!(s, "- {} ({}): {}", d.id, d.status.as_str(), d.title);
        }
        if r == Reviewer::Assessor {
            s.push_str("\nReviewers' run log (most recent last):\n");
            for l in log.iter().rev().take(10).rev() {
                let _ = writeln!(
                    s,
                    "- {} after {} tasks: {} ({} directives)",
                    l.reviewer, l.task_count, l.summary, l.directives
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched() -> Schedule {
        Schedule::new(&ReviewConfig::default())
    }

    fn done(s: &mut Schedule) -> Vec<(Reviewer, &'static str)> {
        s.signal(Signal::Completed {
            milestone_done: None,
            manager: false,
        })
    }

    #[test]
    fn counters_per_reviewer() {
        let mut s = sched();
        let mut runs: Vec<(u64, Reviewer)> = Vec::new();
        for _ in 0..15 {
            for (r, why) in done(&mut s) {
                assert_eq!(why, "interval");
                runs.push((s.completed(), r));
            }
        }
        let at = |r: Reviewer| {
            runs.iter()
                .filter(|(_, x)| *x == r)
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
        };
        assert_eq!(at(Reviewer::CodeStyle), [5, 10, 15]);
        assert_eq!(at(Reviewer::Internaliser), [3, 6, 9, 12, 15]);
        assert_eq!(at(Reviewer::Assessor), [10]);
        assert!(at(Reviewer::Design).is_empty(), "design is event-triggered");
        // At 15 the reviewers run before the assessor would.
        let mut s = sched();
        for _ in 0..9 {
            done(&mut s);
        }
        let due = done(&mut s);
        assert_eq!(due.last().map(|d| d.0), Some(Reviewer::Assessor));
    }

    #[test]
    fn milestone_replan_abort() {
        let mut s = sched();
        let due = s.signal(Signal::Completed {
            milestone_done: Some("m1".into()),
            manager: false,
        });
        assert_eq!(due.iter().map(|d| d.0).collect::<Vec<_>>(), Reviewer::ALL);
        assert!(due.iter().all(|d| d.1 == "milestone"));
        let due = s.signal(Signal::Completed {
            milestone_done: None,
            manager: true,
        });
        assert_eq!(due, [(Reviewer::Design, "replan")]);
        let due = s.signal(Signal::Abort);
        // An abort is +1.0: the design reviewer for the abort, the others by urgency.
        assert_eq!(
            due,
            [
                (Reviewer::CodeStyle, "urgency"),
                (Reviewer::Design, "abort"),
                (Reviewer::Internaliser, "urgency")
            ]
        );
        assert_eq!(s.urgency(), 0.0, "urgency resets after running");
    }

    #[test]
    fn urgency_accumulates() {
        let mut s = sched();
        assert!(s.signal(Signal::ValidationFailure).is_empty());
        assert!(s.signal(Signal::ValidationFailure).is_empty());
        assert!(s.signal(Signal::Churn).is_empty());
        assert!((s.urgency() - 0.8).abs() < 1e-9);
        let due = s.signal(Signal::Churn);
        assert_eq!(due.len(), 3, "0.3 + 0.3 + 0.2 + 0.2 reaches 1.0");
        assert!(s.signal(Signal::MinorDrift).is_empty());
        assert_eq!(s.signal(Signal::MinorDrift).len(), 3);
        // A run by urgency restarts the counters.
        let mut s = sched();
        for _ in 0..4 {
            done(&mut s);
        }
        s.signal(Signal::Abort);
        assert!(done(&mut s).iter().all(|d| d.0 != Reviewer::CodeStyle));
    }

    #[test]
    fn convergence_doubles_the_interval() {
        let mut s = sched();
        s.converging(Reviewer::CodeStyle);
        assert_eq!(s.interval(Reviewer::CodeStyle), 10);
        let runs: usize = (0..20)
            .map(|_| {
                done(&mut s)
                    .iter()
                    .filter(|d| d.0 == Reviewer::CodeStyle)
                    .count()
            })
            .sum();
        assert_eq!(runs, 2);
        let a: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
        let b: BTreeSet<String> = ["a", "b", "c", "d", "f"].map(String::from).into();
        assert!((similarity(&a, &b) - 4.0 / 6.0).abs() < 1e-9);
        assert_eq!(similarity(&BTreeSet::new(), &BTreeSet::new()), 1.0);
    }

    #[test]
    fn outputs_are_validated_strictly() {
        let ok = serde_json::json!({"conventions_updated": ["errors"], "documents": [{"name": "errors", "title": "Errors", "rules": ["raise ToolError"]}],
            "directives": [{"type": "cleanup", "description": "standardise errors", "rationale": "consistency", "priority": "low", "files": ["a.rs"]}], "summary": "1 fix"});
        let f = parse_findings(Reviewer::CodeStyle, &ok).unwrap();
        assert_eq!(f.documents[0].0, Category::Conventions);
        assert_eq!(f.directives[0].kind, DirectiveType::Cleanup);
        let mut long = ok.clone();
        long["directives"][0]["description"] = serde_json::json!("x".repeat(201));
        assert!(
            parse_findings(Reviewer::CodeStyle, &long)
                .unwrap_err()
                .contains("at most 200")
        );
        let mut extra = ok.clone();
        extra["mood"] = serde_json::json!("happy");
        assert!(
            parse_findings(Reviewer::CodeStyle, &extra)
                .unwrap_err()
                .contains("mood")
        );
        let bad_prio = serde_json::json!({"design_updates": [], "documents": [], "directives": [{"type": "functional", "description": "x", "priority": "asap"}], "summary": ""});
        assert!(parse_findings(Reviewer::Design, &bad_prio).is_err());
        let design = serde_json::json!({"design_updates": ["store"], "documents": [{"name": "store", "title": "Store", "rules": ["one actor owns state"], "milestone": "m1"}],
            "directives": [{"type": "functional", "description": "move state into one actor", "priority": "normal"}], "summary": "1 update"});
        let f = parse_findings(Reviewer::Design, &design).unwrap();
        assert_eq!(
            (f.documents[0].0, f.documents[0].1.milestone.as_deref()),
            (Category::Design, Some("m1"))
        );
        assert_eq!(f.directives[0].kind, DirectiveType::Functional);
        let items = serde_json::json!({"knowledge_items": [{"category": "lesson", "content": "JetStream KV needs nats-server 2.10", "source_task": "t3", "confidence": "high", "needs_user_review": false}], "summary": "s"});
        let f = parse_findings(Reviewer::Internaliser, &items).unwrap();
        assert_eq!(f.documents[0].0, Category::Lessons);
        assert_eq!(f.documents[0].1.name, "jetstream-kv-needs-nats-server-2");
        let v = parse_findings(
            Reviewer::Assessor,
            &serde_json::json!({"verdict": "major_drift", "summary": "off", "evidence": []}),
        )
        .unwrap();
        assert_eq!(v.verdict, Some(Verdict::MajorDrift));
    }

    #[test]
    fn budget_sums() {
        let run = |at: u64, cost: f64| ReviewRun {
            v: 1,
            reviewer: "code_style".into(),
            project: "p".into(),
            task_count: 0,
            trigger: "interval".into(),
            outcome: "ran".into(),
            summary: String::new(),
            directives: 0,
            documents: 0,
            verdict: None,
            converging: false,
            bootstrap: false,
            tokens_in: 0,
            tokens_out: 0,
            cost_usd: cost,
            at,
        };
        let day = 86_400_000u64;
        let log = [
            run(day * 10 + 5, 0.5),
            run(day * 11 + 1, 0.25),
            run(day * 11 + 2, 0.25),
        ];
        assert_eq!(spent(&log, day * 11 + 100), (0.5, 1.0));
    }
}
