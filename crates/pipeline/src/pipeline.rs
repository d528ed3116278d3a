//! The supervised pipeline (DESIGN §5):
//!
//! compose → execute → detect halts → validate → format → complete | retry | interrogate | block
//!
//! A task goes through it in stages, each in a file of its own:
//! `prepare` (its tree, settings, logs; where a replay starts) →
//! `agent` (one run of the agent, its halts and its reply's format) →
//! `judge` (validation, interrogation, the helper agent; complete, fix
//! or block) → `settle` (commit, merge, the work log's result).
//! `run` holds their order. A runner puts its lease, interrupts and
//! budget around the middle two ([`Pipeline::work`]).
//!
//! A task ends as [`Outcome::Completed`] only with a [`TaskResult`], which
//! only a [`Validated`] output makes.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use tracing::{info, warn};
use xo_proto::queue::{ReplayMark, Task, TaskRecord, TimeoutProfile, ValidationReport};
use xo_runtime::config::{Isolation, MergeMode, RestartMode, RunnerConfig};

use crate::compose::{ComposedPrompt, Context, Feedback, PromptKind, Snapshot, Templates, compose};
use crate::driver::{AgentOutput, Driver, RunCtx, Turns};
use crate::error::{PipelineError, TemplateError};
use crate::halt::{AgentReply, FormatError, ReplyStatus, detect, parse_reply};
use crate::logs::{PromptEntry, PromptLog, WorkLog};
use crate::proc::Groups;
use crate::project::ProjectConfig;
use crate::sandbox::Sandbox;
use crate::validate::{Check, Checker, Criterion, Validated, Validation, format_output};

mod agent;
mod judge;
mod prepare;
mod run;
mod settle;

pub use judge::{MAX_QUESTIONS, yes_or_no};
pub use prepare::Prepared;
use run::TaskRun;

/// A completed task's result; made only from a [`Validated`] output.
#[derive(Debug, Clone)]
pub struct TaskResult {
    report: ValidationReport,
    reply: serde_json::Map<String, serde_json::Value>,
    clean: bool,
}

/// What happened on the way to an outcome.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunStats {
    pub agent_runs: u32,
    pub format_retries: u32,
    /// Validation failures answered with a fix prompt (or out of retries).
    pub validation_failures: u32,
    pub clarifications: u32,
    /// The validation that failed last, when the task ends blocked on it
    /// (the queue keeps it with the block: seed 003's failed and uncertain
    /// criteria, its confidence).
    pub failed_validation: Option<ValidationReport>,
    /// The last prompt and the agent's raw reply, bounded, for the audit
    /// line of the task's outcome (seed 003's `prompt` and `response`).
    pub exchange: Option<xo_proto::queue::Exchange>,
    /// What the task changed on its branch (worktree isolation).
    pub diff: Option<xo_proto::queue::TaskDiff>,
}

impl TaskResult {
    fn from_validated(
        v: Validated,
        template: &str,
        allow_raw: bool,
        task_id: &str,
        raw: &str,
        refs: (String, String),
    ) -> Self {
        let f = if allow_raw {
            // SUP-4 allow_raw_output: the agent's output as it was.
            crate::validate::FormattedOutput {
                raw: raw.to_string(),
                formatted: raw.to_string(),
                template_applied: false,
            }
        } else {
            format_output(template, &v, task_id, raw)
        };
        let mut report = v.validation().report();
        report.formatted = Some(f.formatted.chars().take(64 * 1024).collect());
        report.template_applied = f.template_applied;
        report.prompt_ref = Some(refs.0);
        report.response_ref = Some(refs.1);
        Self {
            report,
            reply: v.reply().object.clone(),
            clean: false,
        }
    }
    /// Completed without a validation failure, format retry or clarification.
    pub fn clean(&self) -> bool {
        self.clean
    }
    pub fn report(&self) -> &ValidationReport {
        &self.report
    }
    /// The whole reply object (a Manager's reconciliation).
    pub fn reply(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.reply
    }
}

/// How a task ended on this runner.
#[derive(Debug, Clone)]
pub enum Outcome {
    Completed(TaskResult),
    /// A critical halt or out of retries: `CODE: detail`.
    Blocked(String),
    /// A question for the operator (MANUAL mode): the task awaits a response.
    Question(String),
    /// A major SUP-7 violation: `supervisor violation: <type>`.
    Violation(String),
    /// Stopped by a halt or shutdown; the lease lapses and the queue replays it.
    Cancelled,
}

/// One task as the runner got it.
#[derive(Debug, Clone)]
pub struct Job {
    pub record: TaskRecord,
    pub goal: Option<String>,
    /// MANUAL mode: questions wait for the operator instead of a clarification.
    pub manual: bool,
    pub knowledge: String,
    pub directives: Vec<String>,
    /// The operator settings the claim carried: project templates set
    /// there win over the project's `project.toml`.
    pub settings: xo_proto::settings::Settings,
    /// Manager tasks: the task list to reconcile, as the queue gave it.
    pub task_list: Option<String>,
}

/// The pipeline of one runner.
#[derive(Debug, Clone)]
pub struct Pipeline {
    cfg: RunnerConfig,
    sandbox: Sandbox,
    data_dir: PathBuf,
    global_template: String,
    unit: String,
    groups: Option<Groups>,
    /// Where agents may write, when they run confined.
    confine: Option<crate::confine::Confinement>,
}

impl Pipeline {
    pub fn new(
        cfg: RunnerConfig,
        sandbox: Sandbox,
        data_dir: PathBuf,
        unit: &str,
        groups: Option<Groups>,
    ) -> Result<Self, PipelineError> {
        let global_template = if cfg.global_template_file.is_empty() {
            cfg.global_template.clone()
        } else {
            std::fs::read_to_string(&cfg.global_template_file).map_err(|e| TemplateError {
                path: cfg.global_template_file.clone(),
                source: e,
            })?
        };
        Ok(Self {
            cfg,
            sandbox,
            data_dir,
            global_template,
            unit: unit.to_string(),
            groups,
            confine: None,
        })
    }

    /// Agents confined as `runner.confine` says (see [`crate::confine`]):
    /// `auto` confines where the kernel has Landlock and warns where it
    /// has not; `landlock` refuses to start without it; `off` says so.
    pub fn confined(mut self) -> Result<Self, PipelineError> {
        use xo_runtime::config::ConfineMode;
        let mode = self.cfg.confine;
        if mode == ConfineMode::Off {
            tracing::warn!(
                "runner.confine = off: agents run unconfined (they can write anywhere this user can, and read this runner's environment through /proc)"
            );
            return Ok(self);
        }
        if crate::confine::available() {
            let ports = self
                .cfg
                .confine_ports()
                .map_err(PipelineError::ConfineConnect)?;
            let c = crate::confine::Confinement::new(
                &self.cfg.confine_write,
                &self.cfg.confine_read,
                ports,
            );
            tracing::info!(write = ?c.write, read = ?c.read, connect = ?c.connect, "agents confined with Landlock: they read the system's folders, their project and these, write only in their task's folder and these, and cannot reach this runner's state, tokens or keys");
            for gap in crate::confine::missing() {
                tracing::warn!("this kernel's Landlock lacks {gap}");
            }
            let temp = std::env::temp_dir();
            if let Ok(data) = self.data_dir.canonicalize()
                && temp.canonicalize().is_ok_and(|t| data.starts_with(t))
            {
                tracing::warn!(data = %data.display(), "queue.data_dir is under the temp folder, which every confined agent may read and write: work logs and XO's git are in their reach; keep the state directory and the data elsewhere");
            }
            self.confine = Some(c);
        } else if mode == ConfineMode::Landlock {
            return Err(PipelineError::NoLandlock);
        } else {
            tracing::warn!(
                "agents run unconfined: this kernel has no Landlock (runner.confine = auto); they can write anywhere this user can and read this runner's environment through /proc"
            );
        }
        Ok(self)
    }

    /// Whether agents run confined.
    pub fn is_confined(&self) -> bool {
        self.confine.is_some()
    }

    /// The same pipeline under another runner configuration (the operator
    /// settings of a claim laid over `xo.toml`); a global template set
    /// there wins over `runner.global_template_file`.
    pub fn reconfigured(&self, cfg: RunnerConfig, global_template: Option<String>) -> Self {
        Self {
            global_template: global_template.unwrap_or_else(|| self.global_template.clone()),
            cfg,
            ..self.clone()
        }
    }

    /// The runner configuration this pipeline runs under.
    pub fn cfg(&self) -> &RunnerConfig {
        &self.cfg
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The agent timeout of a timeout profile (also the whole task's wall
    /// time when its budget sets none).
    pub fn timeout(&self, p: TimeoutProfile) -> Duration {
        Duration::from_millis(self.cfg.timeout_ms(p))
    }

    /// Runs one task to its outcome.
    pub async fn run(
        &self,
        driver: &mut Driver,
        job: &Job,
        turns: Turns,
        cancel: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Outcome {
        self.run_counted(driver, job, turns, cancel).await.0
    }

    /// Runs one task to its outcome, with what it took: prepared, worked
    /// and settled (the stages the runner puts its lease around).
    pub async fn run_counted(
        &self,
        driver: &mut Driver,
        job: &Job,
        turns: Turns,
        cancel: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> (Outcome, RunStats) {
        let prep = match self.prepare(job, turns, cancel).await {
            Ok(p) => p,
            Err(o) => return (o, RunStats::default()),
        };
        let (out, stats) = self.work(driver, job, &prep).await;
        self.settle(prep, &job.record.task, out, stats).await
    }

    /// Works a prepared task: its agent run and its replies judged, again
    /// and again, until it ends (stages 3 and 4; [`Pipeline::settle`]
    /// ends it in its tree).
    pub async fn work(
        &self,
        driver: &mut Driver,
        job: &Job,
        prep: &Prepared,
    ) -> (Outcome, RunStats) {
        let mut run = TaskRun::new(self, driver, job, prep);
        let mut out = run.go().await;
        let mut stats = run.stats;
        stats.agent_runs = run.iteration;
        if let Outcome::Completed(r) = &mut out {
            r.clean = stats.format_retries == 0
                && stats.validation_failures == 0
                && stats.clarifications == 0;
        }
        (out, stats)
    }
}
