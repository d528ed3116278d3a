//! Stage 1, prepare: the task's tree (its worktree on its branch, or the
//! project's directory), its project settings, its logs, the context its
//! agent runs in; and where a replay starts (a resume validated, a
//! rollback, the starting commit recorded).

use super::*;

/// A task ready to run: everything the agent's runs share, made once at
/// its claim. Made by [`Pipeline::prepare`], run by [`Pipeline::work`],
/// ended by [`Pipeline::settle`].
#[derive(Debug)]
pub struct Prepared {
    pub(super) project: String,
    pub(super) project_dir: PathBuf,
    pub(super) pcfg: ProjectConfig,
    /// XO's history of the project.
    pub(super) snaps: crate::git::Snapshots,
    /// The same history over the tree the agent works in.
    pub(super) tree_snaps: crate::git::Snapshots,
    /// The task's own tree on its branch (worktree isolation).
    pub(super) worktree: Option<crate::worktree::Worktree>,
    pub(super) ctx: RunCtx,
    pub(super) log: PromptLog,
    pub(super) work: WorkLog,
    /// Retries of each kind (format, clarification, validation).
    pub(super) max: u32,
}

impl Prepared {
    /// Where the agent leaves its checkpoint (in its working directory).
    pub fn checkpoint(&self) -> PathBuf {
        self.ctx.cwd.join(crate::driver::command::CHECKPOINT)
    }

    /// One agent run's timeout (its project's profile, else the task's).
    pub fn timeout(&self) -> Duration {
        self.ctx.timeout
    }

    /// The directory the agent works in.
    pub fn cwd(&self) -> &std::path::Path {
        &self.ctx.cwd
    }
}

fn failed(why: impl std::fmt::Display) -> Outcome {
    Outcome::Blocked(format!("EXEC_FAILURE: {why}"))
}

impl Pipeline {
    /// Prepares `job`: its project and settings (SUP-4: read at task
    /// start, so an edit applies from the next task), its tree, its logs
    /// and the context of its agent's runs (`turns` out, `cancel` in). A
    /// task that cannot be prepared ends here, blocked as `EXEC_FAILURE`.
    pub async fn prepare(
        &self,
        job: &Job,
        turns: Turns,
        cancel: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Result<Prepared, Outcome> {
        let task = &job.record.task;
        let project = task
            .project
            .clone()
            .unwrap_or_else(|| self.cfg.default_project.clone());
        let project_dir = self.sandbox.project_dir(&project).map_err(failed)?;
        let pcfg = ProjectConfig::load(&self.sandbox, &project_dir)
            .map_err(failed)?
            .with_settings(&job.settings, &project);
        // XO's history of the project, and (worktree isolation) the
        // task's own tree on its branch.
        let snaps = crate::git::Snapshots::new(&self.data_dir.join(&project), &project_dir);
        let worktree = match self.cfg.isolation {
            Isolation::Directory => None,
            Isolation::Worktree => {
                let dir =
                    crate::worktree::worktree_dir(self.sandbox.root(), &project, &task.task_id);
                let wt = snaps
                    .open_worktree(&project_dir, &dir, &task.task_id, task.branch.as_deref())
                    .await
                    .map_err(|e| failed(format!("the task's worktree: {e}")))?;
                Some(wt)
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
        let cwd = self
            .sandbox
            .working_dir(&tree_dir, task.working_directory.as_deref())
            .map_err(failed)?;
        let log = PromptLog::open(&self.data_dir, &project)
            .map_err(|e| failed(format!("prompt log in {}: {e}", self.data_dir.display())))?;
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
            cwd,
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
        let max = pcfg
            .supervisor_rules
            .max_retries
            .unwrap_or(self.cfg.max_retries)
            .min(task.retry_policy.max_retries.max(1));
        Ok(Prepared {
            work: WorkLog::new(&self.data_dir.join(&project), &task.task_id),
            tree_snaps: match &worktree {
                Some(w) => snaps.for_tree(&w.dir),
                None => snaps.clone(),
            },
            project,
            project_dir,
            pcfg,
            snaps,
            worktree,
            ctx,
            log,
            max,
        })
    }
}

impl TaskRun<'_> {
    /// Where a replay starts (SUP-6): a resumed task is validated before
    /// anything runs (and completes if its artifacts pass); a replayed one
    /// starts from its starting commit; a first or continued attempt
    /// records that commit. `runner.restart_mode = "rollback"`: never
    /// resume, always replay. `Some` when the task ended here.
    pub(super) async fn start(&mut self) -> Option<Outcome> {
        let task = self.task;
        let id = task.task_id.as_str();
        let mark = match self.job.record.mark {
            Some(ReplayMark::Resume) if self.p.cfg.restart_mode == RestartMode::Rollback => {
                Some(ReplayMark::RollbackReplay)
            }
            m => m,
        };
        match mark {
            Some(ReplayMark::Resume) => {
                let reply = AgentReply {
                    status: ReplyStatus::Ok,
                    message: "resumed: the previous attempt's artifacts were validated".into(),
                    object: json!({"status": "ok", "message": "resumed"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                };
                let v = self
                    .checker()
                    .validate(task, &AgentOutput::default(), &reply)
                    .await;
                self.prep
                    .work
                    .event(
                        "Resume",
                        &format!("existing artifacts: {}", v.report().summary),
                    )
                    .await;
                if v.uncertain().is_empty() && task.role != xo_proto::queue::MANAGER_ROLE {
                    match v.accept(reply) {
                        Ok(ok) => {
                            info!(task_id = %id, "resumed task validated without running the agent");
                            return Some(Outcome::Completed(TaskResult::from_validated(
                                ok,
                                &self.output_template(),
                                self.prep.pcfg.supervisor_rules.allow_raw_output,
                                id,
                                "",
                                ("resume".into(), "resume".into()),
                            )));
                        }
                        Err(_) => info!(task_id = %id, "resumed task incomplete; running it again"),
                    }
                }
            }
            Some(ReplayMark::RollbackReplay) => {
                let cwd = &self.prep.ctx.cwd;
                match self.prep.tree_snaps.rollback(cwd, id).await {
                    Ok(Some(c)) => {
                        // The dead attempt's checkpoint is of work undone now.
                        let _ = tokio::fs::remove_file(self.prep.checkpoint()).await;
                        info!(task_id = %id, commit = %c, "rolled back to the task's starting commit");
                        self.prep
                            .work
                            .event("Rollback", &format!("working directory reset to {c}"))
                            .await;
                    }
                    Ok(None) => {
                        warn!(task_id = %id, "no starting commit recorded; replaying without rollback")
                    }
                    Err(e) => warn!(task_id = %id, error = %e, "rollback failed; replaying as is"),
                }
            }
            Some(ReplayMark::Continue) | None => {
                // Yielded to a critical task: the work stays; the starting
                // commit recorded by the first attempt is kept (a recorded
                // start is never replaced).
                if mark.is_some() {
                    self.prep
                        .work
                        .event(
                            "Continue",
                            "yielded to a critical task earlier; the agent continues on the work it left",
                        )
                        .await;
                }
                if let Err(e) = self
                    .prep
                    .tree_snaps
                    .record_start(&self.prep.ctx.cwd, id)
                    .await
                {
                    warn!(task_id = %id, error = %e, "starting commit not recorded; a replay cannot roll back");
                }
            }
        }
        None
    }
}
