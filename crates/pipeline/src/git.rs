//! SUP-6 rollback: before a task runs, its working directory is recorded as
//! a git commit (made through an index of its own, touching no branch, so
//! runners sharing a project do not race on one index); a `rollback_replay`
//! resets the directory to that commit.
//!
//! The project's tree is the agent's: it can write `.git/config`, hooks,
//! `.gitattributes` naming a filter, anything. So none of XO's git runs
//! on the project's own repository or reads anything the agent wrote but
//! the files it snapshots:
//!
//! - the repository is XO's, `<data>/<project>/git` (outside every tree
//!   an agent can write), with the project as its work tree; the agent's own
//!   `.git` folders are never read as the repository;
//! - the start and changed-path records are `<data>/<project>/tasks/<task>.start`
//!   and `.files`, on the same volume as the data, so whichever runner replays
//!   the task finds them;
//! - git is a library, libgit2 (`crate::repo`), not the `git` program: it
//!   runs no hook, fsmonitor, filter driver, external diff or textconv,
//!   whatever a tree or a configuration names, and reads no configuration
//!   but XO's repository's own; no process is started.
//!
//! A rollback does not undo other tasks' finished work: a finished task
//! leaves the paths it changed in its `.files`, and a rollback keeps, as
//! they are now, the paths of tasks finished since its start. Work of a task
//! still running in the same directory is not told apart from the dead
//! attempt's (isolation `directory`): give concurrent tasks their own
//! `working_directory`, or their own tree (`worktree`, the default).

use std::path::{Path, PathBuf};

pub use crate::repo::{Cause, GitError};
use crate::repo::{Repo, oid};

/// Who XO's own commits are by (the project as it was, a task's start).
pub(crate) const XO: (&str, &str) = ("xo", "xo@localhost");

/// A file operation on `path` that failed, as a [`GitError`].
pub(crate) fn io_err(path: &Path, what: &str, e: std::io::Error) -> GitError {
    GitError::new(path, what, e)
}

/// The whole patch from `base` to `commit` in XO's repository of a project
/// (`git_dir`, `<data>/<project>/git`): what `xo task diff` shows on the
/// runner's machine when the task's record holds the patch cut. Blocking.
pub fn whole_patch(git_dir: &Path, base: &str, commit: &str) -> Result<String, GitError> {
    let r = Repo::open(git_dir, None)?;
    r.patch(oid(git_dir, base)?, oid(git_dir, commit)?, usize::MAX)
        .map(|(p, _)| p)
}

/// XO's snapshots of one project: its own repository and task records
/// under `home` (`<data>/<project>`), the project as the work tree.
#[derive(Debug, Clone)]
pub struct Snapshots {
    pub(crate) home: PathBuf,
    pub(crate) work_tree: PathBuf,
    /// The work tree is a task's own (a worktree): a rollback keeps no
    /// other task's paths, there being none.
    pub(crate) isolated: bool,
}

impl Snapshots {
    /// `home` is XO's folder for the project (`<data>/<project>`),
    /// `work_tree` the project's.
    pub fn new(home: &Path, work_tree: &Path) -> Self {
        Self::at(home, work_tree, false)
    }

    /// The same repository with `dir` as its work tree (a task's
    /// worktree).
    pub fn for_tree(&self, dir: &Path) -> Self {
        Self::at(&self.home, dir, true)
    }

    /// Paths are made absolute: a work tree is compared by its path.
    fn at(home: &Path, work_tree: &Path, isolated: bool) -> Self {
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        Self {
            home: abs(home),
            work_tree: abs(work_tree),
            isolated,
        }
    }

    /// XO's repository of the project (`<data>/<project>/git`).
    pub fn git_dir(&self) -> PathBuf {
        self.home.join("git")
    }

    pub(crate) fn tasks_dir(&self) -> PathBuf {
        self.home.join("tasks")
    }

    pub(crate) fn start_file(&self, task: &str) -> PathBuf {
        self.tasks_dir().join(format!("{task}.start"))
    }

    fn files_file(&self, task: &str) -> PathBuf {
        self.tasks_dir().join(format!("{task}.files"))
    }

    /// Runs `f` on XO's repository (with the work tree when `tree`), off
    /// the async runtime: libgit2's calls block.
    pub(crate) async fn with_repo<T: Send + 'static>(
        &self,
        tree: bool,
        f: impl FnOnce(&Repo) -> Result<T, GitError> + Send + 'static,
    ) -> Result<T, GitError> {
        let git_dir = self.git_dir();
        let work_tree = tree.then(|| self.work_tree.clone());
        let dir = git_dir.clone();
        tokio::task::spawn_blocking(move || f(&Repo::open(&git_dir, work_tree.as_deref())?))
            .await
            .map_err(|e| GitError::said(&dir, "git", e.to_string()))?
    }

    /// Makes XO's repository for the project if there is none (`.xo/`
    /// excluded).
    pub(crate) async fn ensure_repo(&self) -> Result<(), GitError> {
        let dir = self.git_dir();
        let failed = |what: &str, e| io_err(&dir, what, e);
        if !dir.join("HEAD").exists() {
            tokio::fs::create_dir_all(&self.home)
                .await
                .map_err(|e| failed("mkdir", e))?;
            let d = dir.clone();
            tokio::task::spawn_blocking(move || crate::repo::init(&d))
                .await
                .map_err(|e| GitError::said(&dir, "init", e.to_string()))??;
        }
        let exclude = dir.join("info/exclude");
        let text = tokio::fs::read_to_string(&exclude)
            .await
            .unwrap_or_default();
        if !text.lines().any(|l| l.trim() == ".xo/") {
            tokio::fs::create_dir_all(dir.join("info"))
                .await
                .map_err(|e| failed("excluding .xo/", e))?;
            tokio::fs::write(&exclude, format!("{text}\n.xo/\n"))
                .await
                .map_err(|e| failed("excluding .xo/", e))?;
        }
        Ok(())
    }

    /// Records the working directory as the task's starting commit (kept
    /// if one is recorded already: a replay keeps the first attempt's start).
    pub async fn record_start(&self, cwd: &Path, task: &str) -> Result<String, GitError> {
        let file = self.start_file(task);
        if let Ok(c) = tokio::fs::read_to_string(&file).await
            && !c.trim().is_empty()
        {
            return Ok(c.trim().to_string());
        }
        self.ensure_repo().await?;
        if let Some(d) = file.parent() {
            tokio::fs::create_dir_all(d)
                .await
                .map_err(|e| io_err(d, "mkdir", e))?;
        }
        let (cwd_owned, message) = (cwd.to_path_buf(), format!("xo: start of task {task}"));
        let commit = self
            .with_repo(true, move |r| {
                let tree = r.tree_of_dir(&cwd_owned)?;
                r.commit(tree, &[], &message, XO)
            })
            .await?
            .to_string();
        xo_runtime::files::replace(&file, commit.as_bytes(), xo_runtime::files::Mode::Private)
            .await
            .map_err(|e| io_err(&file, "write", e))?;
        Ok(commit)
    }

    /// The working tree of `cwd` as a tree object (through an index of
    /// its own).
    pub(crate) async fn tree_now(&self, cwd: &Path) -> Result<String, GitError> {
        let cwd = cwd.to_path_buf();
        self.with_repo(true, move |r| r.tree_of_dir(&cwd))
            .await
            .map(|t| t.to_string())
    }

    /// Paths (relative to `cwd`) that differ between `commit` and the tree now.
    async fn changed_since(&self, cwd: &Path, commit: &str) -> Result<Vec<String>, GitError> {
        let (cwd, commit, root) = (
            cwd.to_path_buf(),
            commit.to_string(),
            self.work_tree.clone(),
        );
        self.with_repo(true, move |r| {
            let now = r.tree_of_dir(&cwd)?;
            let then = r.tree_of(oid(&cwd, &commit)?)?;
            let prefix = cwd
                .strip_prefix(&root)
                .ok()
                .and_then(Path::to_str)
                .unwrap_or_default()
                .to_string();
            Ok(r.changes(then, now, Some(&prefix), false)?
                .into_iter()
                .map(|c| c.path)
                .collect())
        })
        .await
    }

    /// Resets the working directory to the task's starting commit: files
    /// it had are restored, files made since are removed (ignored files and
    /// `.xo/` are kept), except the paths other tasks changed meanwhile
    /// (see the module). `Ok(None)` when no start was recorded.
    pub async fn rollback(&self, cwd: &Path, task: &str) -> Result<Option<String>, GitError> {
        let start = self.start_file(task);
        let Ok(commit) = tokio::fs::read_to_string(&start).await else {
            return Ok(None);
        };
        let commit = commit.trim().to_string();
        let started = tokio::fs::metadata(&start)
            .await
            .and_then(|m| m.modified())
            .ok();
        let index = start.with_extension("rollback-index");
        let keep: Vec<String> = if self.isolated {
            Vec::new()
        } else {
            self.others_changes(task, started)
                .await
                .into_iter()
                .collect()
        };
        let (cwd, c) = (cwd.to_path_buf(), commit.clone());
        self.with_repo(true, move |r| {
            r.reset_dir(&cwd, oid(&cwd, &c)?, &keep, &index)
        })
        .await?;
        Ok(Some(commit))
    }

    /// The paths other tasks finished since `task` started changed (their
    /// `.files`, relative to `cwd` when they ran there).
    async fn others_changes(
        &self,
        task: &str,
        started: Option<std::time::SystemTime>,
    ) -> std::collections::BTreeSet<String> {
        let mut keep = std::collections::BTreeSet::new();
        let Ok(mut rd) = tokio::fs::read_dir(self.tasks_dir()).await else {
            return keep;
        };
        while let Ok(Some(e)) = rd.next_entry().await {
            let path = e.path();
            let (Some(stem), Some(ext)) = (
                path.file_stem().and_then(|s| s.to_str()),
                path.extension().and_then(|s| s.to_str()),
            ) else {
                continue;
            };
            if stem == task || ext != "files" {
                continue;
            }
            let newer = match (started, e.metadata().await.and_then(|m| m.modified())) {
                (Some(s), Ok(m)) => m >= s,
                _ => true,
            };
            if newer && let Ok(text) = tokio::fs::read_to_string(&path).await {
                keep.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_string));
            }
        }
        keep
    }

    /// A task finished: the paths it changed (for later rollbacks of other
    /// tasks to keep) replace its start record.
    pub async fn finish(&self, cwd: &Path, task: &str) {
        let start = self.start_file(task);
        if let Ok(c) = tokio::fs::read_to_string(&start).await {
            match self.changed_since(cwd, c.trim()).await {
                Ok(paths) => {
                    let mut text = paths.join("\n");
                    text.push('\n');
                    if let Err(e) = xo_runtime::files::replace(
                        self.files_file(task),
                        text,
                        xo_runtime::files::Mode::Private,
                    )
                    .await
                    {
                        tracing::warn!(task, error = %e, "changed paths not recorded");
                    }
                }
                Err(e) => tracing::warn!(task, error = %e, "changed paths not read"),
            }
        }
        self.forget(task).await;
    }

    /// Forgets the start of a finished task (none recorded is fine).
    pub async fn forget(&self, task: &str) {
        let path = self.start_file(task);
        match tokio::fs::remove_file(&path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %path.display(), error = %e, "task start record not removed")
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rollback_restores_the_start_and_leaves_other_dirs_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        let snaps = Snapshots::new(&tmp.path().join("data/p"), &proj);
        let work = proj.join("t1");
        let other = proj.join("t2");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(work.join("keep.txt"), "original").unwrap();
        let c = snaps.record_start(&work, "t1").await.unwrap();
        assert_eq!(c.len(), 40);
        assert_eq!(
            snaps.record_start(&work, "t1").await.unwrap(),
            c,
            "a replay keeps the first start"
        );
        // The dead attempt's partial work, and another task's work meanwhile.
        std::fs::write(work.join("keep.txt"), "half-edited").unwrap();
        std::fs::create_dir_all(work.join("new")).unwrap();
        std::fs::write(work.join("new/partial.rs"), "fn").unwrap();
        std::fs::write(other.join("done.txt"), "t2's artifact").unwrap();
        std::fs::create_dir_all(work.join(".xo")).unwrap();
        std::fs::write(work.join(".xo/steering.md"), "s").unwrap();
        assert_eq!(snaps.rollback(&work, "t1").await.unwrap(), Some(c));
        assert_eq!(
            std::fs::read_to_string(work.join("keep.txt")).unwrap(),
            "original"
        );
        assert!(!work.join("new").exists());
        assert!(work.join(".xo/steering.md").exists(), ".xo is kept");
        assert!(
            other.join("done.txt").exists(),
            "another directory is untouched"
        );
        snaps.forget("t1").await;
        assert_eq!(snaps.rollback(&work, "t1").await.unwrap(), None);
    }

    #[tokio::test]
    async fn tasks_in_one_directory_do_not_roll_back_each_other() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        let snaps = Snapshots::new(&tmp.path().join("data/p"), &proj);
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(proj.join("shared.txt"), "v0").unwrap();
        std::fs::write(proj.join("lib.rs"), "v0").unwrap();
        // a starts; b starts, writes and finishes; a's runner dies mid-edit.
        snaps.record_start(&proj, "a").await.unwrap();
        std::fs::write(proj.join("a_partial.rs"), "half").unwrap();
        snaps.record_start(&proj, "b").await.unwrap();
        std::fs::write(proj.join("b_done.rs"), "b's work").unwrap();
        std::fs::write(proj.join("shared.txt"), "b's edit").unwrap();
        snaps.finish(&proj, "b").await;
        assert!(
            std::fs::read_to_string(tmp.path().join("data/p/tasks/b.files"))
                .unwrap()
                .contains("b_done.rs")
        );
        std::fs::write(proj.join("lib.rs"), "a's half edit").unwrap();
        // The work log of a (XO's own file) is kept too.
        std::fs::create_dir_all(proj.join(".xo/tasks")).unwrap();
        std::fs::write(proj.join(".xo/tasks/a.md"), "# a\nRetry Event").unwrap();

        snaps.rollback(&proj, "a").await.unwrap().unwrap();
        assert!(
            !proj.join("a_partial.rs").exists(),
            "a's own work is undone"
        );
        assert_eq!(
            std::fs::read_to_string(proj.join("b_done.rs")).unwrap(),
            "b's work"
        );
        assert_eq!(
            std::fs::read_to_string(proj.join("shared.txt")).unwrap(),
            "b's edit"
        );
        assert_eq!(std::fs::read_to_string(proj.join("lib.rs")).unwrap(), "v0");
        assert!(
            std::fs::read_to_string(proj.join(".xo/tasks/a.md"))
                .unwrap()
                .contains("Retry Event")
        );
        // XO's repository is its own: the project is not made one.
        assert!(!proj.join(".git").exists());
        assert!(tmp.path().join("data/p/git/HEAD").exists());
    }
}

#[cfg(test)]
mod links {
    use super::*;

    /// The agent swaps a directory of its start for a link to a folder
    /// outside, and leaves a new link to it: the rollback writes through
    /// neither and removes nothing behind them.
    #[tokio::test]
    async fn a_rollback_writes_and_removes_nothing_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(proj.join("src")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(proj.join("src/lib.rs"), "fn main() {}").unwrap();
        std::fs::write(proj.join("top.txt"), "top").unwrap();
        std::fs::write(outside.join("secret"), "mine").unwrap();
        let snaps = Snapshots::new(&tmp.path().join("data/p"), &proj);
        snaps.record_start(&proj, "t").await.unwrap();
        std::fs::remove_dir_all(proj.join("src")).unwrap();
        std::os::unix::fs::symlink(&outside, proj.join("src")).unwrap();
        std::os::unix::fs::symlink(&outside, proj.join("new-link")).unwrap();
        std::fs::remove_file(proj.join("top.txt")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), proj.join("top.txt")).unwrap();
        snaps.rollback(&proj, "t").await.unwrap().unwrap();
        let src = std::fs::symlink_metadata(proj.join("src")).unwrap();
        assert!(src.is_dir(), "src is a folder again, not the link");
        assert_eq!(
            std::fs::read_to_string(proj.join("top.txt")).unwrap(),
            "top"
        );
        assert!(
            !std::fs::symlink_metadata(proj.join("top.txt"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(proj.join("src/lib.rs")).unwrap(),
            "fn main() {}"
        );
        assert!(
            std::fs::symlink_metadata(proj.join("new-link")).is_err(),
            "the new link is removed"
        );
        let mut left: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, vec![std::ffi::OsString::from("secret")]);
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "mine"
        );
    }
}
