//! The supervised pipeline (DESIGN §5):
//!
//! compose → execute → detect halts → validate → format → complete | retry | interrogate | block
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

mod run;
mod settle;

/// At most this many questions per uncertain criterion (seed 003).
pub const MAX_QUESTIONS: u32 = 4;

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
                reason: e.to_string(),
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

    /// Where the agent of `task` leaves its checkpoint (`None`: the task's
    /// directory is not in the sandbox; it fails when it runs).
    pub fn checkpoint_path(&self, task: &xo_proto::queue::Task) -> Option<PathBuf> {
        let project = task
            .project
            .clone()
            .unwrap_or_else(|| self.cfg.default_project.clone());
        let cwd = match self.cfg.isolation {
            // The task's tree may not be made yet (asked at its claim).
            Isolation::Worktree => {
                xo_proto::validate_token("project id", &project).ok()?;
                let dir =
                    crate::worktree::worktree_dir(self.sandbox.root(), &project, &task.task_id);
                match task.working_directory.as_deref() {
                    Some(rel) => self.sandbox.resolve(&dir, rel).ok()?,
                    None => dir,
                }
            }
            Isolation::Directory => {
                let dir = self.sandbox.project_dir(&project).ok()?;
                self.sandbox
                    .working_dir(&dir, task.working_directory.as_deref())
                    .ok()?
            }
        };
        Some(cwd.join(crate::driver::command::CHECKPOINT))
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

    /// The timeout profile a job runs under: its project's (the operator's
    /// setting, else `.xo/project.toml`), else the task's own.
    pub fn profile_of(&self, job: &Job) -> TimeoutProfile {
        let task = &job.record.task;
        let project = task
            .project
            .clone()
            .unwrap_or_else(|| self.cfg.default_project.clone());
        let from_file = self
            .sandbox
            .project_dir(&project)
            .ok()
            .and_then(|d| ProjectConfig::load(&self.sandbox, &d).ok())
            .unwrap_or_default();
        from_file
            .with_settings(&job.settings, &project)
            .supervisor_rules
            .timeout_profile
            .unwrap_or(task.timeout_profile)
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

    /// Runs one task to its outcome, with what it took.
    pub async fn run_counted(
        &self,
        driver: &mut Driver,
        job: &Job,
        turns: Turns,
        cancel: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> (Outcome, RunStats) {
        let task = &job.record.task;
        let project = task
            .project
            .clone()
            .unwrap_or_else(|| self.cfg.default_project.clone());
        let project_dir = match self.sandbox.project_dir(&project) {
            Ok(d) => d,
            Err(e) => {
                return (
                    Outcome::Blocked(format!("EXEC_FAILURE: {e}")),
                    RunStats::default(),
                );
            }
        };
        // SUP-4: read at task start, so an edit applies from the next task.
        let pcfg = match ProjectConfig::load(&self.sandbox, &project_dir) {
            Ok(c) => c.with_settings(&job.settings, &project),
            Err(e) => {
                return (
                    Outcome::Blocked(format!("EXEC_FAILURE: {e}")),
                    RunStats::default(),
                );
            }
        };
        // XO's history of the project, and (worktree isolation) the
        // task's own tree on its branch.
        let snaps = crate::git::Snapshots::new(
            &self.data_dir.join(&project),
            &project_dir,
            self.confine.as_ref(),
        );
        let worktree = match self.cfg.isolation {
            Isolation::Directory => None,
            Isolation::Worktree => {
                let dir =
                    crate::worktree::worktree_dir(self.sandbox.root(), &project, &task.task_id);
                match snaps
                    .open_worktree(&project_dir, &dir, &task.task_id, task.branch.as_deref())
                    .await
                {
                    Ok(wt) => Some(wt),
                    Err(e) => {
                        return (
                            Outcome::Blocked(format!("EXEC_FAILURE: the task's worktree: {e}")),
                            RunStats::default(),
                        );
                    }
                }
            }
        };
        let tree_dir = worktree
            .as_ref()
            .map_or_else(|| project_dir.clone(), |w| w.dir.clone());
        // A working directory the project has but git does not keep (an
        // empty folder) is made in the task's tree too.
        if let (Some(w), Some(rel)) = (&worktree, task.working_directory.as_deref())
            && self
                .sandbox
                .resolve(&project_dir, rel)
                .is_ok_and(|p| p.is_dir())
            && let Ok(inside) = self.sandbox.resolve(&w.dir, rel)
            && !inside.exists()
        {
            let _ = std::fs::create_dir_all(&inside);
        }
        let cwd = match self
            .sandbox
            .working_dir(&tree_dir, task.working_directory.as_deref())
        {
            Ok(d) => d,
            Err(e) => {
                return (
                    Outcome::Blocked(format!("EXEC_FAILURE: {e}")),
                    RunStats::default(),
                );
            }
        };
        let log = match PromptLog::open(&self.data_dir, &project) {
            Ok(l) => l,
            Err(e) => {
                return (
                    Outcome::Blocked(format!(
                        "EXEC_FAILURE: prompt log in {}: {e}",
                        self.data_dir.display()
                    )),
                    RunStats::default(),
                );
            }
        };
        let env = crate::proc::allowed_env(
            &self.cfg.env_allow,
            &[
                ("XO_UNIT", &self.unit),
                ("XO_TASK_ID", &task.task_id),
                ("XO_PROJECT", &project),
                (
                    "XO_CHECKPOINT",
                    &cwd.join(crate::driver::command::CHECKPOINT)
                        .display()
                        .to_string(),
                ),
                (
                    "XO_STEERING_FILE",
                    &cwd.join(crate::driver::command::PENDING)
                        .display()
                        .to_string(),
                ),
            ],
        );
        let profile = pcfg
            .supervisor_rules
            .timeout_profile
            .unwrap_or(task.timeout_profile);
        let ctx = RunCtx {
            sandbox: self.sandbox.clone(),
            cwd: cwd.clone(),
            timeout: self.timeout(profile),
            env,
            max_output: self.cfg.max_output_bytes,
            turns,
            cancel,
            groups: self.groups.clone(),
            // The agent reads its own tree (its project, or its task's
            // worktree), not the others.
            confine: self.confine.as_ref().map(|c| c.reading([tree_dir.clone()])),
            agent_mode: task.agent_mode.clone(),
        };
        let mut run = TaskRun {
            p: self,
            driver,
            job,
            task,
            pcfg: &pcfg,
            ctx: &ctx,
            log: &log,
            work: WorkLog::new(&self.data_dir.join(&project), &task.task_id),
            snaps: match &worktree {
                Some(w) => snaps.for_tree(&w.dir),
                None => snaps.clone(),
            },
            iteration: 0,
            stats: RunStats::default(),
            last_refs: (String::new(), String::new()),
            max: pcfg
                .supervisor_rules
                .max_retries
                .unwrap_or(self.cfg.max_retries)
                .min(task.retry_policy.max_retries.max(1)),
        };
        let mut out = run.go(&project).await;
        let mut stats = run.stats;
        stats.agent_runs = run.iteration;
        if let Outcome::Completed(r) = &mut out {
            r.clean = stats.format_retries == 0
                && stats.validation_failures == 0
                && stats.clarifications == 0;
        }
        if matches!(out, Outcome::Completed(_)) {
            let _ =
                tokio::fs::remove_file(run.ctx.cwd.join(crate::driver::command::CHECKPOINT)).await;
            match &worktree {
                None => run.snaps.finish(&run.ctx.cwd, &task.task_id).await,
                Some(wt) => {
                    let (o, diff) = self.settle(&snaps, wt, task, &project_dir).await;
                    stats.diff = diff;
                    if let Some(o) = o {
                        out = o;
                    }
                }
            }
        }
        run.work
            .event(
                "Result",
                &match &out {
                    Outcome::Completed(r) => format!("completed: {}", r.report().summary),
                    Outcome::Blocked(r) => format!("blocked: {r}"),
                    Outcome::Question(q) => format!("awaiting response: {q}"),
                    Outcome::Violation(v) => v.clone(),
                    Outcome::Cancelled => "cancelled (halt or shutdown)".into(),
                },
            )
            .await;
        (out, stats)
    }
}

struct TaskRun<'a> {
    p: &'a Pipeline,
    driver: &'a mut Driver,
    job: &'a Job,
    task: &'a Task,
    pcfg: &'a ProjectConfig,
    ctx: &'a RunCtx,
    log: &'a PromptLog,
    work: WorkLog,
    /// XO's snapshots of the project (rollback).
    snaps: crate::git::Snapshots,
    iteration: u32,
    stats: RunStats,
    last_refs: (String, String),
    max: u32,
}

impl TaskRun<'_> {
    fn checker(&self) -> Checker<'_> {
        Checker {
            sandbox: &self.p.sandbox,
            cwd: &self.ctx.cwd,
            env: &self.ctx.env,
            timeout: self.ctx.timeout,
            max_output: self.ctx.max_output,
            confine: self.ctx.confine.as_ref(),
        }
    }

    fn compose(
        &self,
        project_id: &str,
        kind: PromptKind,
        feedback: Option<&Feedback>,
    ) -> ComposedPrompt {
        let rec = &self.job.record;
        let role_t = self
            .pcfg
            .role_templates
            .get(&self.task.role)
            .or_else(|| self.p.cfg.role_templates.get(&self.task.role))
            .map(String::as_str)
            .unwrap_or("");
        let templates = Templates {
            global: &self.p.global_template,
            project: &self.pcfg.input_template,
            role: role_t,
        };
        let ctx = Context {
            knowledge: &self.job.knowledge,
            directives: &self.job.directives,
            snapshot: Snapshot {
                project_id: project_id.to_string(),
                sandbox_root: self.ctx.cwd.display().to_string(),
                // Smart context: a plain fix does not need the goal.
                goal: self.job.goal.clone().filter(|_| {
                    crate::compose::TaskType::detect(self.task) != crate::compose::TaskType::Fix
                }),
                attempt: rec.attempt,
                replay: rec.mark,
                question: rec.question.clone().filter(|_| rec.answer.is_some()),
                answer: rec.answer.clone(),
            },
            required_sections: &self.pcfg.required_sections,
            task_list: self.job.task_list.as_deref(),
        };
        compose(kind, &templates, self.task, &ctx, feedback)
    }

    /// One agent run, logged both ways.
    async fn execute(&mut self, prompt: &ComposedPrompt) -> Result<AgentOutput, PipelineError> {
        self.iteration += 1;
        let meta = json!({
            "unit": self.p.unit,
            "attempt": self.job.record.attempt,
            "working_directory": self.ctx.cwd.display().to_string(),
            "agent_mode": self.ctx.mode().unwrap_or("auto"),
            "prompt_length": prompt.text().len(),
            "at": xo_proto::now_ms(),
        });
        let pref = self
            .log
            .append(&PromptEntry {
                task_id: &self.task.task_id,
                iteration: self.iteration,
                kind: prompt.kind().as_str(),
                content: prompt.text(),
                metadata: meta,
            })
            .await
            .unwrap_or_else(|e| {
                warn!(task_id = %self.task.task_id, error = %e, "prompt log not written");
                String::new()
            });
        let out = self.driver.run(prompt, self.ctx).await?;
        let meta = json!({
            "unit": self.p.unit,
            "exit_code": out.exit_code,
            "timed_out": out.timed_out,
            "cancelled": out.cancelled,
            "truncated": out.truncated,
            "elapsed_ms": out.elapsed_ms,
            "turns": out.turns,
            "tokens_in": out.tokens_in,
            "tokens_out": out.tokens_out,
            "stderr": out.stderr.chars().take(4000).collect::<String>(),
            "at": xo_proto::now_ms(),
        });
        let rref = self
            .log
            .append(&PromptEntry {
                task_id: &self.task.task_id,
                iteration: self.iteration,
                kind: "RESPONSE",
                content: &out.stdout,
                metadata: meta,
            })
            .await
            .unwrap_or_else(|e| {
                warn!(task_id = %self.task.task_id, error = %e, "prompt log not written (response)");
                String::new()
            });
        self.stats.exchange = Some(xo_proto::queue::Exchange {
            prompt: xo_proto::queue::Exchange::bounded(prompt.text(), &pref),
            response: xo_proto::queue::Exchange::bounded(&out.stdout, &rref),
        });
        self.last_refs = (pref, rref);
        Ok(out)
    }
}

impl TaskRun<'_> {
    async fn parse(&self, out: &AgentOutput) -> Result<AgentReply, FormatError> {
        let manager = self.task.role == xo_proto::queue::MANAGER_ROLE;
        match parse_reply(&out.stdout, manager, self.pcfg.supervisor_rules.reply_words) {
            Ok((r, fixes)) => {
                for f in fixes {
                    // SUP-7: a minor violation, auto-corrected and revalidated.
                    info!(task_id = %self.task.task_id, correction = %f.0, "reply auto-corrected");
                    self.work.event("Violation auto-corrected", &f.0).await;
                }
                Ok(r)
            }
            Err(_) if !self.pcfg.supervisor_rules.require_format_validation => {
                let last = out
                    .stdout
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                Ok(AgentReply {
                    status: ReplyStatus::Ok,
                    message: last.to_string(),
                    object: serde_json::Map::new(),
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// An interrogation answer's verdict: its first word is exactly YES or NO
/// (any case, then punctuation, space or the end). "Not sure", "None",
/// "Nope" or "Yesterday…" are no answer, and the question is asked again.
pub fn yes_or_no(answer: &str) -> Option<bool> {
    let word: String = answer
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    match word.to_ascii_lowercase().as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod yes_or_no_tests {
    use super::yes_or_no;

    #[test]
    fn only_a_plain_yes_or_no_is_an_answer() {
        for (a, v) in [
            ("YES: greet.txt says hello", Some(true)),
            ("yes", Some(true)),
            ("  Yes. The file exists.", Some(true)),
            ("NO - the test fails", Some(false)),
            ("No, it is missing", Some(false)),
            ("Not sure", None),
            ("None of the files match", None),
            ("Nope", None),
            ("Yesterday it passed", None),
            ("", None),
            ("I think YES", None),
        ] {
            assert_eq!(yes_or_no(a), v, "{a:?}");
        }
    }
}
