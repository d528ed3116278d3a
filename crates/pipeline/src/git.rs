//! SUP-6 rollback: before a task runs, its working directory is recorded as
//! a git commit (made with a private index, touching no branch, so runners
//! sharing a project do not race on one index); a `rollback_replay` resets
//! the directory to that commit. The commit id is kept in
//! `<project>/.xo/tasks/<task>.start`, on the shared volume, so whichever
//! runner replays the task finds it.
//!
//! A rollback does not undo other tasks' finished work: a finished task
//! leaves the paths it changed in `<project>/.xo/tasks/<task>.files`, and a
//! rollback keeps, as they are now, the paths of tasks finished since its
//! start. Work of a task still running in the same directory is not told
//! apart from the dead attempt's (no per-task worktree yet): give
//! concurrent tasks their own `working_directory`.

use std::path::{Path, PathBuf};

use tokio::process::Command;

#[derive(Debug, thiserror::Error)]
#[error("git in {dir}: {what}: {detail}")]
pub struct GitError {
    pub dir: String,
    pub what: String,
    pub detail: String,
}

fn start_file(project: &Path, task: &str) -> PathBuf {
    project
        .join(".xo")
        .join("tasks")
        .join(format!("{task}.start"))
}

async fn git(cwd: &Path, index: Option<&Path>, args: &[&str]) -> Result<String, GitError> {
    let mut c = Command::new("git");
    c.current_dir(cwd)
        .args([
            "-c",
            "user.name=xo",
            "-c",
            "user.email=xo@localhost",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0");
    if let Some(i) = index {
        c.env("GIT_INDEX_FILE", i);
    }
    let o = c.output().await.map_err(|e| GitError {
        dir: cwd.display().to_string(),
        what: args.join(" "),
        detail: e.to_string(),
    })?;
    if !o.status.success() {
        return Err(GitError {
            dir: cwd.display().to_string(),
            what: args.join(" "),
            detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Makes the project a git repository if it is not one (`.xo/` excluded).
async fn ensure_repo(project: &Path) -> Result<(), GitError> {
    if !project.join(".git").exists() {
        git(project, None, &["init", "-q"]).await?;
    }
    let exclude = project.join(".git/info/exclude");
    let text = tokio::fs::read_to_string(&exclude)
        .await
        .unwrap_or_default();
    if !text.lines().any(|l| l.trim() == ".xo/") {
        let failed = |e: std::io::Error| GitError {
            dir: exclude.display().to_string(),
            what: "excluding .xo/".into(),
            detail: e.to_string(),
        };
        tokio::fs::create_dir_all(project.join(".git/info"))
            .await
            .map_err(failed)?;
        tokio::fs::write(&exclude, format!("{text}\n.xo/\n"))
            .await
            .map_err(failed)?;
    }
    Ok(())
}

/// Records the working directory as the task's starting commit (kept if
/// one is recorded already: a replay keeps the first attempt's start).
pub async fn record_start(project: &Path, cwd: &Path, task: &str) -> Result<String, GitError> {
    let file = start_file(project, task);
    if let Ok(c) = tokio::fs::read_to_string(&file).await
        && !c.trim().is_empty()
    {
        return Ok(c.trim().to_string());
    }
    ensure_repo(project).await?;
    let index = file.with_extension("index");
    if let Some(d) = file.parent() {
        tokio::fs::create_dir_all(d).await.map_err(|e| GitError {
            dir: d.display().to_string(),
            what: "mkdir".into(),
            detail: e.to_string(),
        })?;
    }
    let _ = tokio::fs::remove_file(&index).await;
    git(cwd, Some(&index), &["add", "-A", "--", "."]).await?;
    let tree = git(cwd, Some(&index), &["write-tree"]).await?;
    let commit = git(
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
    let _ = tokio::fs::remove_file(&index).await;
    tokio::fs::write(&file, &commit)
        .await
        .map_err(|e| GitError {
            dir: file.display().to_string(),
            what: "write".into(),
            detail: e.to_string(),
        })?;
    Ok(commit)
}

/// The working tree of `cwd` as a tree object (through a private index).
async fn tree_now(cwd: &Path, index: &Path) -> Result<String, GitError> {
    let _ = tokio::fs::remove_file(index).await;
    git(cwd, Some(index), &["add", "-A", "--", "."]).await?;
    let tree = git(cwd, Some(index), &["write-tree"]).await;
    let _ = tokio::fs::remove_file(index).await;
    tree
}

/// Paths (relative to `cwd`) that differ between `commit` and the tree now.
async fn changed_since(cwd: &Path, commit: &str, index: &Path) -> Result<Vec<String>, GitError> {
    let tree = tree_now(cwd, index).await?;
    let out = git(
        cwd,
        None,
        &[
            "diff",
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

fn files_file(project: &Path, task: &str) -> PathBuf {
    start_file(project, task).with_extension("files")
}

/// Resets the working directory to the task's starting commit: files it
/// had are restored, files made since are removed (ignored files and
/// `.xo/` are kept), except the paths other tasks changed meanwhile (see
/// the module). `Ok(None)` when no start was recorded.
pub async fn rollback(project: &Path, cwd: &Path, task: &str) -> Result<Option<String>, GitError> {
    let start = start_file(project, task);
    let Ok(commit) = tokio::fs::read_to_string(&start).await else {
        return Ok(None);
    };
    let commit = commit.trim().to_string();
    let started = tokio::fs::metadata(&start)
        .await
        .and_then(|m| m.modified())
        .ok();
    let index = start.with_extension("rollback-index");
    let keep = others_changes(project, task, started).await;
    let _ = tokio::fs::remove_file(&index).await;
    git(cwd, Some(&index), &["read-tree", &commit]).await?;
    if !keep.is_empty() {
        // Their current content goes into the index, so neither the clean
        // nor the checkout touches them.
        let (present, gone): (Vec<&String>, Vec<&String>) =
            keep.iter().partition(|p| cwd.join(p).exists());
        for chunk in present.chunks(200) {
            let mut args = vec!["add", "-f", "--"];
            args.extend(chunk.iter().map(|s| s.as_str()));
            git(cwd, Some(&index), &args).await?;
        }
        for chunk in gone.chunks(200) {
            let mut args = vec!["rm", "-q", "--cached", "--ignore-unmatch", "--"];
            args.extend(chunk.iter().map(|s| s.as_str()));
            git(cwd, Some(&index), &args).await?;
        }
    }
    git(cwd, Some(&index), &["clean", "-fdq", "--", "."]).await?;
    git(cwd, Some(&index), &["checkout-index", "-a", "-f"]).await?;
    let _ = tokio::fs::remove_file(&index).await;
    Ok(Some(commit))
}

/// The paths other tasks finished since `task` started changed (their
/// `.files`, relative to `cwd` when they ran there).
async fn others_changes(
    project: &Path,
    task: &str,
    started: Option<std::time::SystemTime>,
) -> std::collections::BTreeSet<String> {
    let mut keep = std::collections::BTreeSet::new();
    let dir = project.join(".xo").join("tasks");
    let Ok(mut rd) = tokio::fs::read_dir(&dir).await else {
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
        if stem == task {
            continue;
        }
        if ext != "files" {
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
pub async fn finish(project: &Path, cwd: &Path, task: &str) {
    let start = start_file(project, task);
    if let Ok(c) = tokio::fs::read_to_string(&start).await {
        let index = start.with_extension("finish-index");
        match changed_since(cwd, c.trim(), &index).await {
            Ok(paths) => {
                let mut text = paths.join("\n");
                text.push('\n');
                if let Err(e) = tokio::fs::write(files_file(project, task), text).await {
                    tracing::warn!(task, error = %e, "changed paths not recorded");
                }
            }
            Err(e) => tracing::warn!(task, error = %e, "changed paths not read"),
        }
    }
    forget(project, task).await;
}

/// Forgets the start of a finished task (none recorded is fine).
pub async fn forget(project: &Path, task: &str) {
    let path = start_file(project, task);
    match tokio::fs::remove_file(&path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(path = %path.display(), error = %e, "task start record not removed")
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rollback_restores_the_start_and_leaves_other_dirs_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        let work = proj.join("t1");
        let other = proj.join("t2");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(work.join("keep.txt"), "original").unwrap();
        let c = record_start(&proj, &work, "t1").await.unwrap();
        assert_eq!(c.len(), 40);
        assert_eq!(
            record_start(&proj, &work, "t1").await.unwrap(),
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
        assert_eq!(rollback(&proj, &work, "t1").await.unwrap(), Some(c));
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
        forget(&proj, "t1").await;
        assert_eq!(rollback(&proj, &work, "t1").await.unwrap(), None);
    }

    #[tokio::test]
    async fn tasks_in_one_directory_do_not_roll_back_each_other() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(proj.join("shared.txt"), "v0").unwrap();
        std::fs::write(proj.join("lib.rs"), "v0").unwrap();
        // a starts; b starts, writes and finishes; a's runner dies mid-edit.
        record_start(&proj, &proj, "a").await.unwrap();
        std::fs::write(proj.join("a_partial.rs"), "half").unwrap();
        record_start(&proj, &proj, "b").await.unwrap();
        std::fs::write(proj.join("b_done.rs"), "b's work").unwrap();
        std::fs::write(proj.join("shared.txt"), "b's edit").unwrap();
        finish(&proj, &proj, "b").await;
        assert!(
            std::fs::read_to_string(proj.join(".xo/tasks/b.files"))
                .unwrap()
                .contains("b_done.rs")
        );
        std::fs::write(proj.join("lib.rs"), "a's half edit").unwrap();
        // The work log of a (XO's own file) is kept too.
        std::fs::create_dir_all(proj.join(".xo/tasks")).unwrap();
        std::fs::write(proj.join(".xo/tasks/a.md"), "# a\nRetry Event").unwrap();

        rollback(&proj, &proj, "a").await.unwrap().unwrap();
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
        // XO's files never enter the project's history.
        let ignored = std::process::Command::new("git")
            .args(["check-ignore", "-q", ".xo/tasks/a.md"])
            .current_dir(&proj)
            .status()
            .unwrap();
        assert!(ignored.success());
    }
}
