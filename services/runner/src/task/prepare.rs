//! Stage 1, prepare: a claimed task made ready to run. The operator
//! settings it carried laid over `xo.toml`, the knowledge chosen for it
//! under its budget, its job, its tree (the pipeline's
//! [`prepare`](xo_pipeline::Pipeline::prepare): its worktree on its
//! branch), and what its supervision watches: its lease, the queue's
//! interrupts, its budget.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};
use xo_bus::typed;
use xo_pipeline::driver::{Driver, TaskTag};
use xo_pipeline::{Job, Outcome, Pipeline, RunStats};
use xo_proto::knowledge::Selection;
use xo_proto::queue::{self as q, Claimed, ExecutionMode};
use xo_proto::settings::Settings;

use super::supervise::Supervision;
use crate::lease::{Held, Meter};
use crate::worker::{Worker, WorkerState};

/// A claimed task ready to run (its tree apart: [`Tree`], moved into the run).
pub struct Prepared {
    /// The pipeline under the task's operator settings.
    pub pipeline: Pipeline,
    pub job: Job,
    /// The knowledge it carries (its documents' uses are recorded at the end).
    pub selection: Selection,
    pub held: Held,
    pub meter: Meter,
}

/// The task's tree ready, or why it could not be made (an `EXEC_FAILURE`).
pub type Tree = Result<xo_pipeline::Prepared, Outcome>;

impl Prepared {
    /// Stages 3 and 4, then the task's end in its tree: its agent run and
    /// its replies judged until it ends ([`Pipeline::work`]), its work
    /// committed on its branch and merged ([`Pipeline::settle`]). Run under
    /// [`supervise`](super::supervise::supervise): the lease is kept until
    /// the work is on its branch.
    pub async fn run(&self, tree: Tree, driver: &mut Driver) -> (Outcome, RunStats) {
        let tree = match tree {
            Ok(t) => t,
            Err(o) => return (o, RunStats::default()),
        };
        let (out, stats) = self.pipeline.work(driver, &self.job, &tree).await;
        let task = &self.job.record.task;
        self.pipeline.settle(tree, task, out, stats).await
    }
}

/// Prepares `claimed` on `w`: what it runs with, and its supervision.
pub async fn prepare(
    w: &Worker,
    st: &mut WorkerState,
    claimed: Claimed,
) -> (Prepared, Tree, Supervision) {
    let started = std::time::Instant::now();
    let pipeline = pipeline_for(w, st, &claimed.settings);
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
        &w.bus,
        &st.subjects,
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
        span: tracing::Span::current(),
    });
    let (cancel, cancelled) = watch::channel(false);
    let tree = pipeline
        .prepare(&job, st.turns.clone(), Some(cancelled))
        .await;
    let meter = Meter {
        turns: st.turns.clone(),
        started,
        checkpoint: tree.as_ref().ok().map(|t| t.checkpoint()),
    };
    // The task's budget, across its retries and earlier attempts.
    let mut budget = job
        .record
        .task
        .budget
        .unwrap_or_default()
        .or(pipeline.cfg().task_budget);
    if budget.max_wall_ms == 0
        && let Ok(t) = &tree
    {
        // A separate, larger bound than one agent run's timeout (which
        // is EXEC_FAILURE, critical): every run the task may take, its
        // retries included, and one more.
        let runs = u64::from(pipeline.cfg().max_retries) + 2;
        budget.max_wall_ms = (t.timeout().as_millis() as u64).saturating_mul(runs);
    }
    let held = Held {
        task_id: id,
        token: claimed.token.clone(),
        unit: w.opts.unit.clone(),
    };
    let supervision = Supervision {
        bus: w.bus.clone(),
        subjects: st.subjects.clone(),
        held: held.clone(),
        attempt: job.record.attempt,
        lease_ms: claimed.lease_ms,
        budget,
        spent: job.record.spent,
        meter: meter.clone(),
        interrupts: st.interrupts.clone(),
        shutdown: w.shutdown.clone(),
        cancel,
    };
    let prepared = Prepared {
        pipeline,
        job,
        selection,
        held,
        meter,
    };
    (prepared, tree, supervision)
}

/// The pipeline under the operator settings a claim carried, laid over
/// this runner's `xo.toml` (kept until the settings' version changes).
/// Settings that do not apply here are logged and the task runs on
/// `xo.toml` alone.
fn pipeline_for(w: &Worker, st: &mut WorkerState, settings: &Settings) -> Pipeline {
    if settings.version == 0 {
        return st.pipeline.clone();
    }
    if let Some((v, p)) = &st.applied
        && *v == settings.version
    {
        return p.clone();
    }
    let p = match xo_runtime::settings::apply(&w.cfg, settings) {
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
