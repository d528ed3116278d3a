//! Stage 5, settle: a task's end in its tree. A completed task's
//! checkpoint goes; in a worktree its tree is committed on its branch and
//! its work brought where `runner.merge` says ([`crate::worktree`]); in
//! the project's directory its starting commit is let go. The outcome is
//! written to the work log.

use super::*;

impl Pipeline {
    /// Settles `prep`'s task after its run ended as `out`: the outcome to
    /// give (a conflict or a commit that failed replaces a completion)
    /// and what the run took, with the task's diff.
    pub async fn settle(
        &self,
        prep: Prepared,
        task: &Task,
        mut out: Outcome,
        mut stats: RunStats,
    ) -> (Outcome, RunStats) {
        if matches!(out, Outcome::Completed(_)) {
            let _ = tokio::fs::remove_file(prep.checkpoint()).await;
            match &prep.worktree {
                None => prep.tree_snaps.finish(&prep.ctx.cwd, &task.task_id).await,
                Some(wt) => {
                    let (o, diff) = self.integrate(&prep, wt, task).await;
                    stats.diff = diff;
                    if let Some(o) = o {
                        out = o;
                    }
                }
            }
        }
        prep.work
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

    /// A completed task in its worktree: its tree committed on its branch,
    /// and its work brought where `runner.merge` says. The outcome to give
    /// instead (a conflict, a commit or push that failed) and the diff.
    async fn integrate(
        &self,
        prep: &Prepared,
        wt: &crate::worktree::Worktree,
        task: &Task,
    ) -> (Option<Outcome>, Option<xo_proto::queue::TaskDiff>) {
        use crate::worktree::{Merge, MergeError};
        let (snaps, id) = (&prep.snaps, &task.task_id);
        let message = format!("{id}: {}", task.intent);
        let mut diff = match snaps.settle(wt, id, &self.unit, &message).await {
            Ok(d) => d,
            Err(e) => {
                return (
                    Some(Outcome::Blocked(format!(
                        "EXEC_FAILURE: the task's work could not be committed on its branch {}: {e}",
                        wt.branch
                    ))),
                    None,
                );
            }
        };
        let mode = match self.cfg.merge {
            MergeMode::None => Merge::None,
            MergeMode::Ff => Merge::Ff,
            MergeMode::Merge => Merge::Merge,
            MergeMode::Push => Merge::Push,
        };
        match snaps
            .integrate(
                &diff,
                mode,
                &prep.project_dir,
                &self.cfg.push_remote,
                &message,
            )
            .await
        {
            Ok(to) => {
                info!(task_id = %id, branch = %wt.branch, files = diff.files.len(), merged = to.as_deref().unwrap_or("no"), "the task's work is on its branch");
                diff.merged = to;
                snaps.remove_worktree(wt, id).await;
                (None, Some(diff))
            }
            Err(e @ MergeError::Conflict { .. }) => {
                warn!(task_id = %id, error = %e, "the task's work does not apply to main");
                (Some(Outcome::Blocked(e.to_string())), Some(diff))
            }
            Err(MergeError::Git(e)) => (
                Some(Outcome::Blocked(format!(
                    "MERGE_FAILED: the task's work is on its branch {} but could not be brought {}: {e}",
                    wt.branch,
                    if mode == Merge::Push {
                        "to the remote"
                    } else {
                        "into main"
                    }
                ))),
                Some(diff),
            ),
        }
    }
}
