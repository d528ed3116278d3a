//! SUP-6 rollback: before a task runs, its working directory is recorded as
//! a git commit (made with a private index, touching no branch, so runners
//! sharing a project do not race on one index); a `rollback_replay` resets
//! the directory to that commit.
//!
//! The project's tree is the agent's: it can write `.git/config`, hooks,
//! `.gitattributes` naming a filter, anything. So none of XO's git runs
//! on the project's own repository or reads anything the agent wrote but
//! the files it snapshots:
//!
//! - the repository is XO's, `<data>/<project>/git` (outside every tree
//!   an agent can write), with the project as its work tree; the agent's own
//!   `.git` folders are never read as a repository (git skips `.git`);
//! - the start and changed-path records are `<data>/<project>/tasks/<task>.start`
//!   and `.files`, on the same volume as the data, so whichever runner replays
//!   the task finds them;
//! - git runs with a cleared environment, no system or global config
//!   (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), hooks, the
//!   fsmonitor, external diff and textconv off: a `filter=` in an agent's
//!   `.gitattributes` names a driver no config defines, so nothing runs;
//! - and, where agents are confined, git is too: it writes only the project
//!   and XO's folder for it, reads only those and the system, connects nowhere.
//!
//! A rollback does not undo other tasks' finished work: a finished task
//! leaves the paths it changed in its `.files`, and a rollback keeps, as
//! they are now, the paths of tasks finished since its start. Work of a task
//! still running in the same directory is not told apart from the dead
//! attempt's (no per-task worktree yet): give concurrent tasks their own
//! `working_directory`.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::confine::Confinement;

#[derive(Debug, thiserror::Error)]
#[error("git in {dir}: {what}: {detail}")]
pub struct GitError {
    pub dir: String,
    pub what: String,
    pub detail: String,
}

/// A file operation on `path` that failed, as a [`GitError`].
pub(crate) fn io_err(path: &Path, what: &str, e: std::io::Error) -> GitError {
    GitError {
        dir: path.display().to_string(),
        what: what.into(),
        detail: e.to_string(),
    }
}

/// Git config that XO's git always runs with (on top of an empty config):
/// nothing a tree can name is executed.
const SAFE_CONFIG: [&str; 14] = [
    "user.name=xo",
    "user.email=xo@localhost",
    "commit.gpgsign=false",
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.symlinks=true",
    "core.autocrlf=false",
    "core.sshCommand=false",
    "core.askPass=",
    "protocol.allow=never",
    "diff.external=",
    "gc.auto=0",
    "maintenance.auto=false",
];

/// XO's snapshots of one project: its own repository and task records
/// under `home` (`<data>/<project>`), the project as the work tree.
#[derive(Debug, Clone)]
pub struct Snapshots {
    pub(crate) home: PathBuf,
    pub(crate) work_tree: PathBuf,
    confine: Option<Confinement>,
    /// The work tree is a task's own (a worktree): a rollback keeps no
    /// other task's paths, there being none.
    pub(crate) isolated: bool,
}

impl Snapshots {
    /// `home` is XO's folder for the project (`<data>/<project>`),
    /// `work_tree` the project's; `confine`: git runs confined so.
    pub fn new(home: &Path, work_tree: &Path, confine: Option<&Confinement>) -> Self {
        Self::at(home, work_tree, confine.is_some(), false)
    }

    /// The same repository with `dir` as its work tree (a task's
    /// worktree): git confined to it and XO's folder.
    pub fn for_tree(&self, dir: &Path) -> Self {
        Self::at(&self.home, dir, self.confine.is_some(), true)
    }

    /// Git on `home`'s repository with `work_tree`, confined (when
    /// `confined`) to reading and writing those two only. Paths are made
    /// absolute: git runs in these folders with them in its environment,
    /// and a relative one would be read against itself.
    fn at(home: &Path, work_tree: &Path, confined: bool, isolated: bool) -> Self {
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let (home, work_tree) = (abs(home), abs(work_tree));
        let confine = confined.then(|| Confinement {
            read: vec![work_tree.clone(), home.clone()],
            write: vec![work_tree.clone(), home.clone(), PathBuf::from("/dev/null")],
            connect: Some(Vec::new()),
        });
        Self {
            home,
            work_tree,
            confine,
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

    pub(crate) async fn git(
        &self,
        cwd: &Path,
        index: Option<&Path>,
        args: &[&str],
    ) -> Result<String, GitError> {
        self.git_out(cwd, index, args, &[])
            .await
            .and_then(|(ok, out, err)| {
                if ok {
                    Ok(out.trim().to_string())
                } else {
                    Err(GitError {
                        dir: cwd.display().to_string(),
                        what: args.join(" "),
                        detail: err.trim().to_string(),
                    })
                }
            })
    }

    /// Runs git and gives back whether it succeeded, its stdout (untrimmed)
    /// and stderr; `env` is passed on beside XO's own.
    pub(crate) async fn git_out(
        &self,
        cwd: &Path,
        index: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<(bool, String, String), GitError> {
        let failed = |detail: String| GitError {
            dir: cwd.display().to_string(),
            what: args.join(" "),
            detail,
        };
        let mut c = Command::new("git");
        c.current_dir(cwd).env_clear();
        for kv in SAFE_CONFIG {
            c.args(["-c", kv]);
        }
        c.args(args)
            .env("GIT_DIR", self.git_dir())
            .env("GIT_WORK_TREE", &self.work_tree)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("HOME", &self.home)
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(p) = std::env::var_os("PATH") {
            c.env("PATH", p);
        }
        if let Some(i) = index {
            c.env("GIT_INDEX_FILE", i);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        if args.first() == Some(&"init") {
            c.env_remove("GIT_WORK_TREE");
        }
        let child = match &self.confine {
            None => c.spawn().map_err(|e| failed(e.to_string()))?,
            Some(conf) => {
                let path_var = std::env::var("PATH").ok();
                let conf = conf.reading(crate::confine::program_files(
                    &["git".to_string()],
                    path_var.as_deref(),
                ));
                crate::proc::spawn_confined(c, &conf, cwd)
                    .await
                    .map_err(|e| failed(e.to_string()))?
                    .map_err(|e| failed(e.to_string()))?
            }
        };
        let o = child
            .wait_with_output()
            .await
            .map_err(|e| failed(e.to_string()))?;
        Ok((
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ))
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
            self.git(&self.home, None, &["init", "-q", "--bare"])
                .await?;
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
        let index = file.with_extension("index");
        if let Some(d) = file.parent() {
            tokio::fs::create_dir_all(d)
                .await
                .map_err(|e| io_err(d, "mkdir", e))?;
        }
        let tree = self.tree_now(cwd, &index).await?;
        let commit = self
            .git(
                cwd,
                Some(&index),
                &[
                    "commit-tree",
                    &tree,
                    "-m",
                    &format!("xo: start of task {task}"),
                ],
            )
            .await?;
        xo_runtime::files::replace(&file, commit.as_bytes(), xo_runtime::files::Mode::Private)
            .await
            .map_err(|e| io_err(&file, "write", e))?;
        Ok(commit)
    }

    /// The working tree of `cwd` as a tree object (through a private index).
    pub(crate) async fn tree_now(&self, cwd: &Path, index: &Path) -> Result<String, GitError> {
        let _ = tokio::fs::remove_file(index).await;
        self.git(cwd, Some(index), &["add", "-A", "--", "."])
            .await?;
        let tree = self.git(cwd, Some(index), &["write-tree"]).await;
        let _ = tokio::fs::remove_file(index).await;
        tree
    }

    /// Paths (relative to `cwd`) that differ between `commit` and the tree now.
    async fn changed_since(
        &self,
        cwd: &Path,
        commit: &str,
        index: &Path,
    ) -> Result<Vec<String>, GitError> {
        let tree = self.tree_now(cwd, index).await?;
        let out = self
            .git(
                cwd,
                None,
                &[
                    "diff",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--name-only",
                    "--no-renames",
                    "--relative",
                    commit,
                    &tree,
                ],
            )
            .await?;
        Ok(out
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect())
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
        let keep = if self.isolated {
            Default::default()
        } else {
            self.others_changes(task, started).await
        };
        let _ = tokio::fs::remove_file(&index).await;
        self.git(cwd, Some(&index), &["read-tree", &commit]).await?;
        if !keep.is_empty() {
            // Their current content goes into the index, so neither the
            // clean nor the checkout touches them.
            let (present, gone): (Vec<&String>, Vec<&String>) =
                keep.iter().partition(|p| cwd.join(p).exists());
            for chunk in present.chunks(200) {
                let mut args = vec!["add", "-f", "--"];
                args.extend(chunk.iter().map(|s| s.as_str()));
                self.git(cwd, Some(&index), &args).await?;
            }
            for chunk in gone.chunks(200) {
                let mut args = vec!["rm", "-q", "--cached", "--ignore-unmatch", "--"];
                args.extend(chunk.iter().map(|s| s.as_str()));
                self.git(cwd, Some(&index), &args).await?;
            }
        }
        self.git(cwd, Some(&index), &["clean", "-fdq", "--", "."])
            .await?;
        self.git(cwd, Some(&index), &["checkout-index", "-a", "-f"])
            .await?;
        let _ = tokio::fs::remove_file(&index).await;
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
            let index = start.with_extension("finish-index");
            match self.changed_since(cwd, c.trim(), &index).await {
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
        let snaps = Snapshots::new(&tmp.path().join("data/p"), &proj, None);
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
        let snaps = Snapshots::new(&tmp.path().join("data/p"), &proj, None);
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
