//! What an agent's hooks tell XO about a session that waits for a person,
//! and what XO tells the hooks back about a session whose cap is reached.
//! Both are files in the session's project, beside `.xo/steering.pending`:
//!
//! - `.xo/needs.jsonl`: `xo hook claude` appends one line when Claude Code
//!   calls its `Notification` hook with `permission_prompt` (a permission
//!   prompt is open), `idle_prompt` or `elicitation_dialog` (the agent
//!   waits for its user's answer), or its `PermissionRequest` hook that no
//!   `[hooks.approve]` rule answered; `xo hook codex` for Codex's
//!   `PermissionRequest`. A transcript watch reads the lines for its
//!   sessions and reports the unit "needs you" with the reason until the
//!   session writes again.
//! - `.xo/spent.jsonl`: a watch appends a line when a session reaches its
//!   cap (`max_cost_usd`, `max_tokens`); the hook then refuses that
//!   session's next tool call in the agent's own terms (`PreToolUse` with
//!   `permissionDecision: "deny"` and the reason).
//!
//! Both are read and written without following a link and to a bound (the
//! project is the agent's to write).

use std::path::Path;

use serde::{Deserialize, Serialize};
use xo_proto::NeedsReason;
use xo_runtime::untrusted;

/// The hooks' account of sessions waiting for a person.
pub const NEEDS: &str = ".xo/needs.jsonl";
/// The sessions whose cap is reached.
pub const SPENT: &str = ".xo/spent.jsonl";
/// Most bytes read of either file at once (a line past it waits for the
/// next read).
const MAX_READ: usize = 1 << 20;
/// Longest detail kept (a prompt's text, a command).
const MAX_DETAIL: usize = 240;

/// One line of [`NEEDS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// The session the hook was called for (a subagent's, its parent's).
    #[serde(default)]
    pub session_id: Option<String>,
    pub reason: NeedsReason,
    /// What it waits on: the prompt's text, the tool and its command.
    #[serde(default)]
    pub detail: String,
    /// When the hook was called (ms since the epoch, the host's clock).
    #[serde(default)]
    pub at: u64,
}

/// `s` on one line, at most 240 characters (cut with `…`): a detail a
/// person reads in a list.
pub fn short(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() <= MAX_DETAIL {
        return s;
    }
    let mut out: String = s.chars().take(MAX_DETAIL - 1).collect();
    out.push('…');
    out
}

/// The tool a permission is asked for, as a person reads it: `Bash: cargo
/// test`, `Edit: src/lib.rs`, `WebFetch: https://…`, else the tool's name.
pub fn tool_detail(payload: &serde_json::Value) -> String {
    let tool = payload
        .get("tool_name")
        .and_then(|t| t.as_str())
        .unwrap_or("a tool");
    match subject(payload) {
        Some(w) => short(&format!("{tool}: {w}")),
        None => short(tool),
    }
}

/// What a hook payload's tool call acts on: its command, file, path, URL or
/// pattern (`tool_input`), as the call gives it.
pub fn subject(payload: &serde_json::Value) -> Option<&str> {
    let input = payload.get("tool_input")?;
    ["command", "file_path", "path", "url", "pattern"]
        .iter()
        .find_map(|k| input.get(*k)?.as_str())
}

/// What a hook call says about its session waiting for a person: Claude
/// Code's `Notification` (`notification_type` `permission_prompt`,
/// `idle_prompt`, `elicitation_dialog`; other types, such as
/// `auth_success`, say nothing) and `PermissionRequest` (Claude Code's and
/// Codex's: a permission dialog is about to be shown).
pub fn from_hook(payload: &serde_json::Value, at: u64) -> Option<Waiting> {
    let event = payload.get("hook_event_name")?.as_str()?;
    let session_id = payload
        .get("session_id")
        .and_then(|s| s.as_str())
        .map(String::from);
    let message = || {
        payload
            .get("message")
            .and_then(|m| m.as_str())
            .map(short)
            .unwrap_or_default()
    };
    let (reason, detail) = match event {
        "Notification" => match payload.get("notification_type")?.as_str()? {
            "permission_prompt" => (NeedsReason::Permission, message()),
            "idle_prompt" | "elicitation_dialog" => (NeedsReason::Question, message()),
            _ => return None,
        },
        "PermissionRequest" => (
            NeedsReason::Permission,
            format!("permission for {}", tool_detail(payload)),
        ),
        _ => return None,
    };
    Some(Waiting {
        session_id,
        reason,
        detail,
        at,
    })
}

/// Appends `w` to `dir`'s [`NEEDS`].
pub fn record(dir: &Path, w: &Waiting) -> Result<(), untrusted::UntrustedError> {
    let mut line = serde_json::to_vec(w).unwrap_or_default();
    line.push(b'\n');
    untrusted::append(dir, Path::new(NEEDS), &line)
}

/// The lines of `dir`'s [`NEEDS`] after byte `*offset`, moving it past the
/// last whole line read (a line still being written waits). Unreadable
/// lines are skipped; a missing file is none.
pub fn read_new(dir: &Path, offset: &mut u64) -> Vec<Waiting> {
    let Ok((bytes, start, _)) = untrusted::read_from(dir, Path::new(NEEDS), *offset, MAX_READ)
    else {
        return Vec::new();
    };
    let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
        *offset = start;
        return Vec::new();
    };
    *offset = start + end as u64 + 1;
    bytes[..end]
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

/// One line of [`SPENT`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    pub session_id: String,
    /// Which cap, in words ("$5.00 of max_cost_usd $5.00 spent").
    pub reason: String,
}

/// Marks `session` spent in `dir`'s [`SPENT`].
pub fn spend(dir: &Path, session: &str, reason: &str) -> Result<(), untrusted::UntrustedError> {
    let mut line = serde_json::to_vec(&Spent {
        session_id: session.to_string(),
        reason: reason.to_string(),
    })
    .unwrap_or_default();
    line.push(b'\n');
    untrusted::append(dir, Path::new(SPENT), &line)
}

/// Why `session` may make no more tool calls, if its cap is reached.
pub fn spent(dir: &Path, session: &str) -> Option<String> {
    let (bytes, _) = untrusted::read_head(dir, Path::new(SPENT), MAX_READ).ok()?;
    bytes
        .split(|b| *b == b'\n')
        .rev()
        .filter_map(|l| serde_json::from_slice::<Spent>(l).ok())
        .find(|s| s.session_id == session)
        .map(|s| s.reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_notifications_are_read_by_their_type() {
        let n = |t: &str| {
            from_hook(
                &json!({"session_id": "s1", "cwd": "/p", "hook_event_name": "Notification",
                    "notification_type": t, "message": "Claude needs your permission to use Bash",
                    "title": "Claude Code", "transcript_path": "/t.jsonl"}),
                5,
            )
        };
        let p = n("permission_prompt").unwrap();
        assert_eq!(
            (p.reason, p.session_id.as_deref(), p.at),
            (NeedsReason::Permission, Some("s1"), 5)
        );
        assert_eq!(p.detail, "Claude needs your permission to use Bash");
        assert_eq!(n("idle_prompt").unwrap().reason, NeedsReason::Question);
        assert_eq!(
            n("elicitation_dialog").unwrap().reason,
            NeedsReason::Question
        );
        assert!(n("auth_success").is_none());
        let r = from_hook(
            &json!({"session_id": "s1", "hook_event_name": "PermissionRequest",
                "tool_name": "Bash", "tool_input": {"command": "rm -rf build", "description": "clean"}}),
            0,
        )
        .unwrap();
        assert_eq!(r.reason, NeedsReason::Permission);
        assert_eq!(r.detail, "permission for Bash: rm -rf build");
        assert!(from_hook(&json!({"hook_event_name": "PostToolUse"}), 0).is_none());
    }

    #[test]
    fn the_needs_file_is_followed_by_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let mut off = 0;
        assert!(read_new(dir.path(), &mut off).is_empty(), "no file yet");
        let w = Waiting {
            session_id: Some("s".into()),
            reason: NeedsReason::Question,
            detail: "which port?".into(),
            at: 1,
        };
        record(dir.path(), &w).unwrap();
        // Half a line: waits.
        untrusted::append(dir.path(), Path::new(NEEDS), b"{\"reason\":").unwrap();
        assert_eq!(read_new(dir.path(), &mut off), vec![w.clone()]);
        assert!(read_new(dir.path(), &mut off).is_empty());
        untrusted::append(dir.path(), Path::new(NEEDS), b"\"permission\"}\n").unwrap();
        let next = read_new(dir.path(), &mut off);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].reason, NeedsReason::Permission);
    }

    #[test]
    fn a_spent_session_is_named_with_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(spent(dir.path(), "s1"), None);
        spend(dir.path(), "s2", "other").unwrap();
        spend(dir.path(), "s1", "$5.01 of max_cost_usd $5.00 spent").unwrap();
        assert_eq!(
            spent(dir.path(), "s1").as_deref(),
            Some("$5.01 of max_cost_usd $5.00 spent")
        );
        assert_eq!(spent(dir.path(), "s3"), None);
    }
}
