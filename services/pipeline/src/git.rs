//! SUP-6 rollback: before a task runs, its working directory is recorded as
//! a git commit (made with a private index, touching no branch, so runners
//! sharing a project do not race on one index); a `rollback_replay` resets
//! the directory to that commit. The commit id is kept in
//! `<project>/.xo/tasks/<task>.start`, on the shared volume, so whichever
//! runner replays the task finds it.

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

/// Resets the working directory to the task's starting commit: files it
/// had are restored, files made since are removed (ignored files and
/// `.xo/` are kept). `Ok(None)` when no start was recorded.
pub async fn rollback(project: &Path, cwd: &Path, task: &str) -> Result<Option<String>, GitError> {
    let Ok(commit) = tokio::fs::read_to_string(start_file(project, task)).await else {
        return Ok(None);
    };
    let commit = commit.trim().to_string();
    let index = start_file(project, task).with_extension("rollback-index");
    let _ = tokio::fs::remove_file(&index).await;
    git(cwd, Some(&index), &["read-tree", &commit]).await?;
    git(cwd, Some(&index), &["clean", "-fdq", "--", "."]).await?;
    git(cwd, Some(&index), &["checkout-index", "-a", "-f"]).await?;
    let _ = tokio::fs::remove_file(&index).await;
    Ok(Some(commit))
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
}
