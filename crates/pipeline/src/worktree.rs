//! A worktree per task (`runner.isolation = "worktree"`, the default).
//!
//! The project's history is XO's own repository (`<data>/<project>/git`,
//! [`crate::git`]): its `main` is made once, under a lock, by whichever
//! runner comes first, from what the project directory holds. Each task
//! gets its own tree, `<sandbox>/.xo-worktrees/<project>/<task>`, checked
//! out from `main` (or the branch the task names) on a branch
//! `xo/<task>`; concurrent tasks never share a working tree. Its start is
//! the branch's base commit: a rollback resets the tree to it, a resume
//! keeps it. A completed task's tree is committed on its branch (author:
//! the unit; message: the task id and intent), the diff kept with the
//! task, and the work brought where `runner.merge` says: `none` leaves it
//! on the branch, `ff` puts it on `main` (a fast-forward, or the task's
//! change replayed on a `main` that moved, when it applies cleanly),
//! `merge` makes a merge commit on `main`, `push` pushes the branch to
//! `runner.push_remote`. A conflict blocks the task, naming the paths; the
//! branch is kept. When `main` moves, the project directory follows it,
//! unless a path it changes was changed there by hand (then it is left as
//! it is, and said). What a person changes in the project directory is
//! committed on `main` before the next task starts from it: the directory
//! is the project as its people see it.
//!
//! The task's tree has no `.git`: the agent sees plain files, and XO's
//! repository is never where an agent can write it (the security model of
//! [`crate::git`]).

use std::path::{Path, PathBuf};

use xo_proto::queue::{FileChange, MAX_PATCH, TaskDiff};

use crate::git::{GitError, Snapshots, io_err};

/// Where the work of a task goes once it is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    None,
    Ff,
    Merge,
    Push,
}

/// A task's own tree, on its branch.
#[derive(Debug, Clone)]
pub struct Worktree {
    pub dir: PathBuf,
    /// The commit it started from.
    pub base: String,
    /// `xo/<task>`.
    pub branch: String,
}

/// The task's work could not be brought into `main`: these paths changed
/// on both sides. The branch keeps it.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(
        "MERGE_CONFLICT: {} changed on main too since the task started; its work is kept on branch {branch}",
        paths.join(", ")
    )]
    Conflict { paths: Vec<String>, branch: String },
    #[error("{0}")]
    Git(#[from] GitError),
}

/// The project's lock (held while `main` is made or moved): released when
/// dropped.
struct ProjectLock(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

impl Snapshots {
    async fn lock(&self) -> Result<ProjectLock, GitError> {
        let path = self.home.join("git.lock");
        tokio::fs::create_dir_all(&self.home)
            .await
            .map_err(|e| io_err(&self.home, "mkdir", e))?;
        tokio::task::spawn_blocking(move || {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| io_err(&path, "open the lock", e))?;
            nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
                .map(ProjectLock)
                .map_err(|(_, e)| io_err(&path, "lock", std::io::Error::from(e)))
        })
        .await
        .map_err(|e| GitError {
            dir: self.home.display().to_string(),
            what: "lock".into(),
            detail: e.to_string(),
        })?
    }

    /// The commit `refname` names, if it exists.
    async fn commit_of(&self, refname: &str) -> Option<String> {
        let (ok, out, _) = self
            .git_out(
                &self.home,
                None,
                &[
                    "rev-parse",
                    "-q",
                    "--verify",
                    &format!("{refname}^{{commit}}"),
                ],
                &[],
            )
            .await
            .ok()?;
        let c = out.trim();
        (ok && !c.is_empty()).then(|| c.to_string())
    }

    /// The project's `main` as it is now (made before: an error if gone).
    async fn main_now(&self) -> Result<String, GitError> {
        self.commit_of("refs/heads/main")
            .await
            .ok_or_else(|| GitError {
                dir: self.git_dir().display().to_string(),
                what: "rev-parse main".into(),
                detail: "the project's main is gone".into(),
            })
    }

    /// The project's `main`, made from the project directory the first
    /// time (under the project's lock: one runner makes it, the others
    /// find it).
    pub async fn main_commit(&self, project_dir: &Path) -> Result<String, GitError> {
        if let Some(c) = self.commit_of("refs/heads/main").await {
            return Ok(c);
        }
        let _lock = self.lock().await?;
        if let Some(c) = self.commit_of("refs/heads/main").await {
            return Ok(c);
        }
        self.ensure_repo().await?;
        let tasks = self.tasks_dir();
        tokio::fs::create_dir_all(&tasks)
            .await
            .map_err(|e| io_err(&tasks, "mkdir", e))?;
        let proj = self.for_tree(project_dir);
        let index = tasks.join(".main.index");
        let tree = proj.tree_now(project_dir, &index).await?;
        let commit = proj
            .git(
                project_dir,
                None,
                &["commit-tree", &tree, "-m", "xo: the project as it was"],
            )
            .await?;
        self.git(
            &self.home,
            None,
            &["update-ref", "refs/heads/main", &commit, ""],
        )
        .await?;
        tracing::info!(project = %project_dir.display(), commit = %commit, "the project's main made from its directory");
        self.set_synced(&commit).await;
        Ok(commit)
    }

    /// The commit the project directory was last made to match (or
    /// found matching): what a person changed there is the difference.
    fn synced_file(&self) -> PathBuf {
        self.home.join("project.synced")
    }

    async fn synced(&self) -> Option<String> {
        let c = tokio::fs::read_to_string(self.synced_file()).await.ok()?;
        let c = c.trim();
        (!c.is_empty()).then(|| c.to_string())
    }

    async fn set_synced(&self, commit: &str) {
        if let Err(e) = xo_runtime::files::replace(
            self.synced_file(),
            commit.as_bytes(),
            xo_runtime::files::Mode::Private,
        )
        .await
        {
            tracing::warn!(error = %e, "the project directory's commit not recorded");
        }
    }

    /// `main`, with what a person changed in the project directory since
    /// it last matched `main` committed on it (the directory is the project
    /// as its people see it), so the task that starts from it sees it.
    /// When one of them conflicts with `main`, they are left out as a
    /// whole (the directory keeps them), and said.
    pub async fn sync_main(&self, project_dir: &Path, task: &str) -> Result<String, GitError> {
        // Made first (under the lock, which is not held twice).
        self.main_commit(project_dir).await?;
        let _lock = self.lock().await?;
        let main = self.main_now().await?;
        let synced = self.synced().await.unwrap_or_else(|| main.clone());
        let proj = self.for_tree(project_dir);
        let index = self.tasks_dir().join(".sync.index");
        let tree = proj.tree_now(project_dir, &index).await?;
        let synced_tree = self
            .git(
                &self.home,
                None,
                &["rev-parse", &format!("{synced}^{{tree}}")],
            )
            .await?;
        if tree == synced_tree {
            return Ok(main);
        }
        // The person's changes, as a commit on what the directory matched.
        let message = format!("xo: the project directory as it was when {task} started");
        let edits = proj
            .git(
                project_dir,
                None,
                &["commit-tree", &tree, "-p", &synced, "-m", &message],
            )
            .await?;
        let new_main = if synced == main {
            edits.clone()
        } else {
            match self.merged_tree(&main, &edits, "main").await {
                Ok(merged) => {
                    self.git(
                        &self.home,
                        None,
                        &["commit-tree", &merged, "-p", &main, "-m", &message],
                    )
                    .await?
                }
                Err(MergeError::Conflict { paths, .. }) => {
                    tracing::warn!(project = %project_dir.display(), paths = %paths.join(", "), task, "changes made in the project directory conflict with main: the task starts from main without them");
                    return Ok(main);
                }
                Err(MergeError::Git(e)) => return Err(e),
            }
        };
        self.git(
            &self.home,
            None,
            &["update-ref", "refs/heads/main", &new_main, &main],
        )
        .await?;
        tracing::info!(project = %project_dir.display(), commit = %new_main, "changes made in the project directory are on main");
        // The directory has the person's changes; main's own it missed
        // are written to it now.
        self.set_synced(&edits).await;
        self.follow_main(project_dir, &new_main).await;
        Ok(new_main)
    }

    /// The task's tree at `dir` on its branch `xo/<task>`: made from `main`
    /// (or `from`, a branch of the project) the first time; the one there
    /// already when the task is resumed or replayed.
    pub async fn open_worktree(
        &self,
        project_dir: &Path,
        dir: &Path,
        task: &str,
        from: Option<&str>,
    ) -> Result<Worktree, GitError> {
        let branch = format!("xo/{task}");
        let start = self.start_file(task);
        if let Ok(c) = tokio::fs::read_to_string(&start).await
            && !c.trim().is_empty()
            && dir.is_dir()
        {
            return Ok(Worktree {
                dir: dir.to_path_buf(),
                base: c.trim().to_string(),
                branch,
            });
        }
        let main = self.sync_main(project_dir, task).await?;
        let base = match from {
            None => main,
            Some(b) => self
                .commit_of(&format!("refs/heads/{b}"))
                .await
                .ok_or_else(|| GitError {
                    dir: self.git_dir().display().to_string(),
                    what: format!("the task's branch {b}"),
                    detail: "no such branch in the project (its branches: main and xo/<task>)"
                        .into(),
                })?,
        };
        if dir.exists() {
            tokio::fs::remove_dir_all(dir)
                .await
                .map_err(|e| io_err(dir, "clear the task's old tree", e))?;
        }
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| io_err(dir, "mkdir", e))?;
        tokio::fs::create_dir_all(self.tasks_dir())
            .await
            .map_err(|e| io_err(&self.tasks_dir(), "mkdir", e))?;
        let wt = self.for_tree(dir);
        let index = self.tasks_dir().join(format!("{task}.wt-index"));
        let _ = tokio::fs::remove_file(&index).await;
        wt.git(dir, Some(&index), &["read-tree", &base]).await?;
        wt.git(dir, Some(&index), &["checkout-index", "-a", "-f"])
            .await?;
        let _ = tokio::fs::remove_file(&index).await;
        self.git(
            &self.home,
            None,
            &["update-ref", &format!("refs/heads/{branch}"), &base],
        )
        .await?;
        xo_runtime::files::replace(&start, base.as_bytes(), xo_runtime::files::Mode::Private)
            .await
            .map_err(|e| io_err(&start, "write", e))?;
        Ok(Worktree {
            dir: dir.to_path_buf(),
            base,
            branch,
        })
    }

    /// Commits the task's tree on its branch (author `unit`, `message`)
    /// and gives what it changed from its base. A task that changed
    /// nothing leaves the branch at its base.
    pub async fn settle(
        &self,
        wt: &Worktree,
        task: &str,
        unit: &str,
        message: &str,
    ) -> Result<TaskDiff, GitError> {
        let tree_snaps = self.for_tree(&wt.dir);
        let index = self.tasks_dir().join(format!("{task}.settle-index"));
        let tree = tree_snaps.tree_now(&wt.dir, &index).await?;
        let refname = format!("refs/heads/{}", wt.branch);
        let parent = self
            .commit_of(&refname)
            .await
            .unwrap_or_else(|| wt.base.clone());
        let parent_tree = self
            .git(
                &self.home,
                None,
                &["rev-parse", &format!("{parent}^{{tree}}")],
            )
            .await?;
        let commit = if parent_tree == tree {
            parent
        } else {
            let name = format!("user.name={unit}");
            let email = format!("user.email={unit}@xo");
            let c = self
                .git(
                    &self.home,
                    None,
                    &[
                        "-c",
                        &name,
                        "-c",
                        &email,
                        "commit-tree",
                        &tree,
                        "-p",
                        &parent,
                        "-m",
                        message,
                    ],
                )
                .await?;
            self.git(&self.home, None, &["update-ref", &refname, &c, &parent])
                .await?;
            c
        };
        self.diff(&wt.base, &commit, &wt.branch).await
    }

    /// What changed from `base` to `commit`: files with their lines, and
    /// the patch cut at [`MAX_PATCH`].
    pub async fn diff(&self, base: &str, commit: &str, branch: &str) -> Result<TaskDiff, GitError> {
        let h = &self.home;
        let status = self
            .git(
                h,
                None,
                &[
                    "diff-tree",
                    "-r",
                    "--no-renames",
                    "--name-status",
                    base,
                    commit,
                ],
            )
            .await?;
        let numstat = self
            .git(
                h,
                None,
                &["diff-tree", "-r", "--no-renames", "--numstat", base, commit],
            )
            .await?;
        let mut files: Vec<FileChange> = status
            .lines()
            .filter_map(|l| {
                let (s, path) = l.split_once('\t')?;
                Some(FileChange {
                    path: path.to_string(),
                    status: s.to_string(),
                    added: None,
                    removed: None,
                })
            })
            .collect();
        for l in numstat.lines() {
            let mut parts = l.splitn(3, '\t');
            let (Some(a), Some(r), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            if let Some(f) = files.iter_mut().find(|f| f.path == path) {
                f.added = a.parse().ok();
                f.removed = r.parse().ok();
            }
        }
        let (_, mut patch, _) = self
            .git_out(
                h,
                None,
                &[
                    "diff",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--no-color",
                    "--no-renames",
                    base,
                    commit,
                ],
                &[],
            )
            .await?;
        let truncated = patch.len() > MAX_PATCH;
        if truncated {
            let mut cut = MAX_PATCH;
            while !patch.is_char_boundary(cut) {
                cut -= 1;
            }
            let cut = patch[..cut].rfind('\n').map_or(cut, |i| i + 1);
            patch.truncate(cut);
        }
        Ok(TaskDiff {
            branch: branch.to_string(),
            base: base.to_string(),
            commit: commit.to_string(),
            files,
            patch,
            truncated,
            merged: None,
        })
    }

    /// Brings a settled task's work where `mode` says (see the module);
    /// `Ok(Some(where))` once it went somewhere.
    pub async fn integrate(
        &self,
        diff: &TaskDiff,
        mode: Merge,
        project_dir: &Path,
        remote: &str,
        message: &str,
    ) -> Result<Option<String>, MergeError> {
        match mode {
            Merge::None => Ok(None),
            Merge::Push => {
                let spec = format!("refs/heads/{0}:refs/heads/{0}", diff.branch);
                let ssh = std::env::var("SSH_AUTH_SOCK").unwrap_or_default();
                let env: Vec<(&str, &str)> = if ssh.is_empty() {
                    Vec::new()
                } else {
                    vec![("SSH_AUTH_SOCK", ssh.as_str())]
                };
                let (ok, _, err) = self
                    .git_out(
                        &self.home,
                        None,
                        &[
                            "-c",
                            "protocol.allow=always",
                            "-c",
                            "core.sshCommand=ssh",
                            "push",
                            "--porcelain",
                            remote,
                            &spec,
                        ],
                        &env,
                    )
                    .await?;
                if !ok {
                    return Err(MergeError::Git(GitError {
                        dir: remote.to_string(),
                        what: format!("push {}", diff.branch),
                        detail: err.trim().to_string(),
                    }));
                }
                Ok(Some(format!("{remote} {}", diff.branch)))
            }
            Merge::Ff | Merge::Merge => {
                if diff.commit == diff.base && mode == Merge::Ff {
                    return Ok(None);
                }
                let _lock = self.lock().await?;
                // (It exists: the task started from it.)
                let main = self.main_now().await?;
                let new_main = if mode == Merge::Ff && main == diff.base {
                    diff.commit.clone()
                } else {
                    let tree = self.merged_tree(&main, &diff.commit, &diff.branch).await?;
                    let mut args = vec!["commit-tree", tree.as_str(), "-p", main.as_str()];
                    if mode == Merge::Merge {
                        args.extend(["-p", diff.commit.as_str()]);
                    }
                    args.extend(["-m", message]);
                    self.git(&self.home, None, &args).await?
                };
                self.git(
                    &self.home,
                    None,
                    &["update-ref", "refs/heads/main", &new_main, &main],
                )
                .await?;
                self.follow_main(project_dir, &new_main).await;
                Ok(Some(format!("main {new_main}")))
            }
        }
    }

    /// The tree of `ours` (main) with `theirs` merged in, or the paths
    /// that conflict. `main` only moves forward (a fast-forward, a commit
    /// on it), so the two meet at the task's base: the merge applies the
    /// task's change from its base. (Git 2.38's `merge-tree --write-tree`,
    /// without 2.40's `--merge-base`: the runner image's git.)
    async fn merged_tree(
        &self,
        ours: &str,
        theirs: &str,
        branch: &str,
    ) -> Result<String, MergeError> {
        let (ok, out, err) = self
            .git_out(
                &self.home,
                None,
                &[
                    "merge-tree",
                    "--write-tree",
                    "--name-only",
                    "--no-messages",
                    ours,
                    theirs,
                ],
                &[],
            )
            .await?;
        let mut lines = out.lines();
        let tree = lines.next().unwrap_or_default().trim().to_string();
        if ok && !tree.is_empty() {
            return Ok(tree);
        }
        let paths: Vec<String> = lines
            .map(str::trim)
            .take_while(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        if paths.is_empty() {
            return Err(MergeError::Git(GitError {
                dir: self.git_dir().display().to_string(),
                what: "merge-tree".into(),
                detail: err.trim().to_string(),
            }));
        }
        Err(MergeError::Conflict {
            paths,
            branch: branch.to_string(),
        })
    }

    /// The project directory follows `main` from `old` to `new`: paths
    /// changed there by hand that `main` also changed leave it as it is
    /// (said); it is never forced.
    async fn follow_main(&self, project_dir: &Path, new: &str) {
        let Some(old) = self.synced().await else {
            tracing::warn!(project = %project_dir.display(), "the project directory's commit is not known: not updated to main");
            return;
        };
        let old = old.as_str();
        let proj = self.for_tree(project_dir);
        let index = self.tasks_dir().join(".follow.index");
        let _ = tokio::fs::remove_file(&index).await;
        // The index holds the directory as it is (stat data fresh), so a
        // two-tree read-tree keeps local changes git can keep and refuses
        // to overwrite any it cannot.
        let r = async {
            proj.git(project_dir, Some(&index), &["add", "-A", "--", "."])
                .await?;
            proj.git(
                project_dir,
                Some(&index),
                &["read-tree", "-m", "-u", old, new],
            )
            .await
        }
        .await;
        let _ = tokio::fs::remove_file(&index).await;
        match r {
            Ok(_) => self.set_synced(new).await,
            Err(e) => {
                tracing::warn!(project = %project_dir.display(), main = %new, error = %e, "the project directory was not updated to main: a path main changed was changed there too; update it by hand")
            }
        }
    }

    /// Removes a task's tree (its branch stays).
    pub async fn remove_worktree(&self, wt: &Worktree, task: &str) {
        if let Err(e) = tokio::fs::remove_dir_all(&wt.dir).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %wt.dir.display(), error = %e, "the task's tree was not removed");
        }
        self.forget(task).await;
    }
}

/// Where a task's own tree lives: beside the projects, under a name no
/// project id can take.
pub fn worktree_dir(sandbox_root: &Path, project: &str, task: &str) -> PathBuf {
    sandbox_root.join(".xo-worktrees").join(project).join(task)
}
