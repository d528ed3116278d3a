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

use crate::git::{GitError, Snapshots, XO, io_err};
use crate::repo::{Was, oid};

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
        .map_err(|e| GitError::said(&self.home, "lock", e.to_string()))?
    }

    /// The commit `refname` names, if it exists.
    async fn commit_of(&self, refname: &str) -> Option<String> {
        if !self.git_dir().join("HEAD").exists() {
            return None;
        }
        let refname = refname.to_string();
        self.with_repo(false, move |r| Ok(r.commit_of(&refname)))
            .await
            .ok()
            .flatten()
            .map(|c| c.to_string())
    }

    /// The project's `main` as it is now (made before: an error if gone).
    async fn main_now(&self) -> Result<String, GitError> {
        self.commit_of("refs/heads/main").await.ok_or_else(|| {
            GitError::said(
                &self.git_dir(),
                "rev-parse main",
                "the project's main is gone",
            )
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
        let dir = project_dir.to_path_buf();
        let commit = self
            .for_tree(project_dir)
            .with_repo(true, move |r| {
                let tree = r.tree_of_dir(&dir)?;
                let c = r.commit(tree, &[], "xo: the project as it was", XO)?;
                r.set_ref("refs/heads/main", c, Was::Absent)?;
                Ok(c.to_string())
            })
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
        let tree = proj.tree_now(project_dir).await?;
        let s2 = synced.clone();
        let synced_tree = self
            .with_repo(false, move |r| {
                Ok(r.tree_of(oid(Path::new(&s2), &s2)?)?.to_string())
            })
            .await?;
        if tree == synced_tree {
            return Ok(main);
        }
        // The person's changes, as a commit on what the directory matched.
        let message = format!("xo: the project directory as it was when {task} started");
        let edits = self
            .commit_tree(&tree, &[synced.as_str()], &message, XO)
            .await?;
        let new_main = if synced == main {
            edits.clone()
        } else {
            match self.merged_tree(&main, &edits, "main").await {
                Ok(merged) => {
                    self.commit_tree(&merged, &[main.as_str()], &message, XO)
                        .await?
                }
                Err(MergeError::Conflict { paths, .. }) => {
                    tracing::warn!(project = %project_dir.display(), paths = %paths.join(", "), task, "changes made in the project directory conflict with main: the task starts from main without them");
                    return Ok(main);
                }
                Err(MergeError::Git(e)) => return Err(e),
            }
        };
        self.move_ref("refs/heads/main", &new_main, Some(&main))
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
                .ok_or_else(|| {
                    GitError::said(
                        &self.git_dir(),
                        format!("the task's branch {b}"),
                        "no such branch in the project (its branches: main and xo/<task>)",
                    )
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
        let index = self.tasks_dir().join(format!("{task}.wt-index"));
        let (b2, branch_ref) = (base.clone(), format!("refs/heads/{branch}"));
        self.for_tree(dir)
            .with_repo(true, move |r| {
                let c = oid(&index, &b2)?;
                r.check_out(c, &index)?;
                r.set_ref(&branch_ref, c, Was::Any)
            })
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
        let _ = task;
        let tree = self.for_tree(&wt.dir).tree_now(&wt.dir).await?;
        let refname = format!("refs/heads/{}", wt.branch);
        let parent = self
            .commit_of(&refname)
            .await
            .unwrap_or_else(|| wt.base.clone());
        let p2 = parent.clone();
        let parent_tree = self
            .with_repo(false, move |r| {
                Ok(r.tree_of(oid(Path::new(&p2), &p2)?)?.to_string())
            })
            .await?;
        let commit = if parent_tree == tree {
            parent
        } else {
            let email = format!("{unit}@xo");
            let c = self
                .commit_tree(&tree, &[parent.as_str()], message, (unit, &email))
                .await?;
            self.move_ref(&refname, &c, Some(&parent)).await?;
            c
        };
        self.diff(&wt.base, &commit, &wt.branch).await
    }

    /// What changed from `base` to `commit`: files with their lines, and
    /// the patch cut at [`MAX_PATCH`].
    pub async fn diff(&self, base: &str, commit: &str, branch: &str) -> Result<TaskDiff, GitError> {
        let (b, c) = (base.to_string(), commit.to_string());
        let (files, (patch, truncated)) = self
            .with_repo(false, move |r| {
                let dir = Path::new(&c);
                let (bo, co) = (oid(dir, &b)?, oid(dir, &c)?);
                let files = r.changes(r.tree_of(bo)?, r.tree_of(co)?, None, true)?;
                Ok((files, r.patch(bo, co, MAX_PATCH)?))
            })
            .await?;
        let files = files
            .into_iter()
            .map(|f| FileChange {
                path: f.path,
                status: f.status.to_string(),
                added: f.lines.map(|l| l.0 as u64),
                removed: f.lines.map(|l| l.1 as u64),
            })
            .collect();
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

    /// A commit of the tree `tree` (hex) on `parents`, by `who`.
    async fn commit_tree(
        &self,
        tree: &str,
        parents: &[&str],
        message: &str,
        who: (&str, &str),
    ) -> Result<String, GitError> {
        let (tree, message) = (tree.to_string(), message.to_string());
        let parents: Vec<String> = parents.iter().map(|p| p.to_string()).collect();
        let who = (who.0.to_string(), who.1.to_string());
        self.with_repo(false, move |r| {
            let d = Path::new(&tree);
            let parents = parents
                .iter()
                .map(|p| oid(d, p))
                .collect::<Result<Vec<_>, _>>()?;
            let c = r.commit(oid(d, &tree)?, &parents, &message, (&who.0, &who.1))?;
            Ok(c.to_string())
        })
        .await
    }

    /// Moves `refname` to `to`, if it is still `was` (or whatever it is).
    async fn move_ref(&self, refname: &str, to: &str, was: Option<&str>) -> Result<(), GitError> {
        let (refname, to, was) = (refname.to_string(), to.to_string(), was.map(str::to_string));
        self.with_repo(false, move |r| {
            let d = Path::new(&to);
            let was = match &was {
                Some(w) => Was::At(oid(d, w)?),
                None => Was::Any,
            };
            r.set_ref(&refname, oid(d, &to)?, was)
        })
        .await
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
                let (to, branch) = (remote.to_string(), diff.branch.clone());
                self.with_repo(false, move |r| r.push(&to, &branch)).await?;
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
                    let mut parents = vec![main.as_str()];
                    if mode == Merge::Merge {
                        parents.push(diff.commit.as_str());
                    }
                    self.commit_tree(&tree, &parents, message, XO).await?
                };
                self.move_ref("refs/heads/main", &new_main, Some(&main))
                    .await?;
                self.follow_main(project_dir, &new_main).await;
                Ok(Some(format!("main {new_main}")))
            }
        }
    }

    /// The tree of `ours` (main) with `theirs` merged in, or the paths
    /// that conflict. `main` only moves forward (a fast-forward, a commit
    /// on it), so the two meet at the task's base: the merge applies the
    /// task's change from its base.
    async fn merged_tree(
        &self,
        ours: &str,
        theirs: &str,
        branch: &str,
    ) -> Result<String, MergeError> {
        let (o, t) = (ours.to_string(), theirs.to_string());
        let merged = self
            .with_repo(false, move |r| {
                let d = Path::new(&o);
                r.merge(oid(d, &o)?, oid(d, &t)?)
            })
            .await?;
        match merged {
            Ok(tree) => Ok(tree.to_string()),
            Err(paths) => Err(MergeError::Conflict {
                paths,
                branch: branch.to_string(),
            }),
        }
    }

    /// The project directory follows `main` from `old` to `new`: paths
    /// changed there by hand that `main` also changed leave it as it is
    /// (said); it is never forced.
    async fn follow_main(&self, project_dir: &Path, new: &str) {
        let Some(old) = self.synced().await else {
            tracing::warn!(project = %project_dir.display(), "the project directory's commit is not known: not updated to main");
            return;
        };
        let index = self.tasks_dir().join(".follow.index");
        let (o, n) = (old.clone(), new.to_string());
        let r = self
            .for_tree(project_dir)
            .with_repo(true, move |r| {
                let d = Path::new(&o);
                r.advance(oid(d, &o)?, oid(d, &n)?, &index)
            })
            .await;
        match r {
            Ok(Ok(())) => self.set_synced(new).await,
            Ok(Err(paths)) => {
                tracing::warn!(project = %project_dir.display(), main = %new, paths = %paths.join(", "), "the project directory was not updated to main: these paths main changed were changed there too; update it by hand")
            }
            Err(e) => {
                tracing::warn!(project = %project_dir.display(), main = %new, error = %e, "the project directory was not updated to main")
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
