//! The prompt log (`<data>/<project>/prompts.log.jsonl`: every prompt and
//! response with its type and metadata) and the task work log
//! (`<sandbox>/<project>/tasks/<task>.md`, where seed 002's retry events go).

use std::io::Write;
use std::path::{Path, PathBuf};

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
            path: dir.join("prompts.log.jsonl"),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line; returns `<path>@<byte offset>` to refer to it.
    pub fn append(&self, e: &PromptEntry<'_>) -> std::io::Result<String> {
        let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        let at = f.metadata()?.len();
        // One write per line: concurrent runners append whole lines.
        f.write_all(&line)?;
        Ok(format!("{}@{at}", self.path.display()))
    }
}

/// The task's work log.
#[derive(Debug, Clone)]
pub struct WorkLog {
    path: PathBuf,
}

impl WorkLog {
    pub fn new(project_dir: &Path, task_id: &str) -> Self {
        Self {
            path: project_dir.join("tasks").join(format!("{task_id}.md")),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&self, text: &str) -> std::io::Result<()> {
        if let Some(d) = self.path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let fresh = !self.path.exists();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        if fresh {
            f.write_all(b"## Supervisor Log\n")?;
        }
        f.write_all(text.as_bytes())
    }

    /// Seed 002's retry event, verbatim in shape.
    pub fn retry_event(
        &self,
        role: &str,
        task: &str,
        attempt: u32,
        max: u32,
        issue: &str,
        received: &str,
    ) -> std::io::Result<()> {
        let expected = "{\"status\": \"ok\" | \"blocked\" | \"error\" | \"escalate\", \"message\": \"<string>\"}";
        let received: String = received.chars().take(4000).collect();
        self.append(&format!(
            "\n### [{}] Retry Event\n\n**Agent:** {role}  \n**Task:** {task}  \n**Attempt:** {attempt}/{max}  \n**Issue:** {issue}\n\n**Expected:**\n```json\n{expected}\n```\n\n**Received:**\n```json\n{received}\n```\n\n**Action:** Rescheduling with exact same parameters\n",
            rfc3339(xo_proto::now_ms()),
        ))
    }

    /// Any other supervisor event (fix prompt, clarification, interrogation, result).
    pub fn event(&self, title: &str, body: &str) -> std::io::Result<()> {
        self.append(&format!(
            "\n### [{}] {title}\n\n{body}\n",
            rfc3339(xo_proto::now_ms())
        ))
    }
}

/// `2026-11-22T10:17:20.123Z` from milliseconds since the epoch.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_350_000_123), "2026-11-22T12:20:00.123Z");
    }

    #[test]
    fn retry_event_has_the_seed_shape() {
        let tmp = tempfile::tempdir().unwrap();
        let w = WorkLog::new(tmp.path(), "t1");
        w.retry_event("coder", "t1", 1, 3, "Invalid output format", "I am done")
            .unwrap();
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

    #[test]
    fn prompt_log_refs_point_at_the_line() {
        let tmp = tempfile::tempdir().unwrap();
        let log = PromptLog::open(tmp.path(), "p").unwrap();
        let e = |c| PromptEntry {
            task_id: "t",
            iteration: 1,
            kind: "PROMPT",
            content: c,
            metadata: serde_json::json!({}),
        };
        log.append(&e("first")).unwrap();
        let r = log.append(&e("second")).unwrap();
        let off: usize = r.rsplit('@').next().unwrap().parse().unwrap();
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert!(text[off..].starts_with(
            "{\"task_id\":\"t\",\"iteration\":1,\"type\":\"PROMPT\",\"content\":\"second\""
        ));
    }
}
