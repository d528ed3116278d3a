//! The prompt log (`<data>/<project>/prompts.log.jsonl`: every prompt and
//! response with its type and metadata) and the task work log
//! (`<data>/<project>/tasks/<task>.md`, where seed 002's retry events go).
//! Both are XO's data, outside every tree an agent can write.

use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;
use tracing::warn;

use xo_runtime::clock::rfc3339;

use serde::Serialize;

#[derive(Debug, Clone)]
pub struct PromptLog {
    path: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptEntry<'a> {
    pub task_id: &'a str,
    /// Agent runs of this task so far, this one included.
    pub iteration: u32,
    /// `PROMPT`, `FIX_PROMPT`, `CLARIFICATION_PROMPT`, `INTERROGATION_PROMPT` or `RESPONSE`.
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub content: &'a str,
    pub metadata: serde_json::Value,
}

impl PromptLog {
    pub fn open(data_dir: &Path, project: &str) -> std::io::Result<Self> {
        let dir = data_dir.join(project);
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            path: dir.join(xo_proto::names::PROMPT_LOG),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line; returns `<path>@<byte offset>` to refer to it.
    pub async fn append(&self, e: &PromptEntry<'_>) -> std::io::Result<String> {
        let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .await?;
        let at = f.metadata().await?.len();
        // One write per line: concurrent runners append whole lines.
        f.write_all(&line).await?;
        f.flush().await?;
        Ok(format!("{}@{at}", self.path.display()))
    }
}

/// Where a task's work log lives: `<data>/<project>/tasks/<task>.md`
/// (`project_data` is `<data>/<project>`), outside the agent's tree.
pub fn work_log_path(project_data: &Path, task_id: &str) -> PathBuf {
    xo_proto::names::work_log(project_data, task_id)
}

/// The task's work log.
#[derive(Debug, Clone)]
pub struct WorkLog {
    path: PathBuf,
}

impl WorkLog {
    pub fn new(project_data: &Path, task_id: &str) -> Self {
        Self {
            path: work_log_path(project_data, task_id),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends to the log; a failure is logged with the path (the work
    /// goes on: the prompt log and the audit keep the record).
    pub async fn append(&self, text: &str) {
        if let Err(e) = self.try_append(text).await {
            warn!(path = %self.path.display(), error = %e, "work log not written");
        }
    }

    async fn try_append(&self, text: &str) -> std::io::Result<()> {
        if let Some(d) = self.path.parent() {
            tokio::fs::create_dir_all(d).await?;
        }
        let fresh = !tokio::fs::try_exists(&self.path).await?;
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .await?;
        if fresh {
            f.write_all(b"## Supervisor Log\n").await?;
        }
        f.write_all(text.as_bytes()).await?;
        f.flush().await
    }

    /// Seed 002's retry event, verbatim in shape.
    pub async fn retry_event(
        &self,
        role: &str,
        task: &str,
        attempt: u32,
        max: u32,
        issue: &str,
        received: &str,
    ) {
        let expected = "{\"status\": \"ok\" | \"blocked\" | \"error\" | \"escalate\", \"message\": \"<string>\"}";
        let received: String = received.chars().take(4000).collect();
        self.append(&format!(
            "\n### [{}] Retry Event\n\n**Agent:** {role}  \n**Task:** {task}  \n**Attempt:** {attempt}/{max}  \n**Issue:** {issue}\n\n**Expected:**\n```json\n{expected}\n```\n\n**Received:**\n```json\n{received}\n```\n\n**Action:** Rescheduling with exact same parameters\n",
            rfc3339(xo_proto::now_ms()),
        ))
        .await
    }

    /// Any other supervisor event (fix prompt, clarification, interrogation, result).
    pub async fn event(&self, title: &str, body: &str) {
        self.append(&format!(
            "\n### [{}] {title}\n\n{body}\n",
            rfc3339(xo_proto::now_ms())
        ))
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn retry_event_has_the_seed_shape() {
        let tmp = tempfile::tempdir().unwrap();
        let w = WorkLog::new(tmp.path(), "t1");
        w.retry_event("coder", "t1", 1, 3, "Invalid output format", "I am done")
            .await;
        let text = std::fs::read_to_string(w.path()).unwrap();
        assert!(text.starts_with("## Supervisor Log\n"));
        for part in [
            "] Retry Event",
            "**Agent:** coder",
            "**Attempt:** 1/3",
            "**Issue:** Invalid output format",
            "**Received:**\n```json\nI am done",
            "**Action:** Rescheduling with exact same parameters",
        ] {
            assert!(text.contains(part), "{part} missing:\n{text}");
        }
    }

    #[tokio::test]
    async fn prompt_log_refs_point_at_the_line() {
        let tmp = tempfile::tempdir().unwrap();
        let log = PromptLog::open(tmp.path(), "p").unwrap();
        let e = |c| PromptEntry {
            task_id: "t",
            iteration: 1,
            kind: "PROMPT",
            content: c,
            metadata: serde_json::json!({}),
        };
        log.append(&e("first")).await.unwrap();
        let r = log.append(&e("second")).await.unwrap();
        let off: usize = r.rsplit('@').next().unwrap().parse().unwrap();
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert!(text[off..].starts_with(
            "{\"task_id\":\"t\",\"iteration\":1,\"type\":\"PROMPT\",\"content\":\"second\""
        ));
    }
}
