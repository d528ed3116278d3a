//! A completed task in its worktree: committed on its branch, its work
//! brought where `runner.merge` says ([`crate::worktree`]).

use super::*;

impl Pipeline {
    /// A completed task in its worktree: its tree committed on its branch,
    /// and its work brought where `runner.merge` says. The outcome to give
    /// instead (a conflict, a commit or push that failed) and the diff.
    pub(super) async fn settle(
        &self,
        snaps: &crate::git::Snapshots,
        wt: &crate::worktree::Worktree,
        task: &Task,
        project_dir: &std::path::Path,
    ) -> (Option<Outcome>, Option<xo_proto::queue::TaskDiff>) {
        use crate::worktree::{Merge, MergeError};
        let id = &task.task_id;
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
            .integrate(&diff, mode, project_dir, &self.cfg.push_remote, &message)
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
