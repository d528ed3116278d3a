//! `xo hook claude`: Claude Code's hook for `PostToolUse`,
//! `PostToolUseFailure` and `Stop`; `xo hook codex`: Codex's for
//! `PostToolUse` and `Stop` (the same contract: Codex's hook payloads and
//! answers follow Claude Code's). `xo hook AGENT --install DIR` adds it to
//! a project. The runner (or `xo watch`) appends the
//! XO's steering for a running agent to `.xo/steering.pending` in the
//! session's project; Claude Code runs this hook after every tool call —
//! `PostToolUse` after one that succeeded, `PostToolUseFailure` after one
//! that failed — and before the session stops. The hook takes the pending
//! steering meant for the payload's `session_id` (lines addressed to
//! another session stay pending) and hands it over as Claude Code reads it:
//!
//! - after a tool call: `{"hookSpecificOutput": {"hookEventName": <event>,
//!   "additionalContext": <steering>}}` — shown to the model beside the
//!   tool's result, no block;
//! - at `Stop`: `{"decision": "block", "reason": <steering>}` — the session
//!   goes on with the steering as its next instruction (never twice in a
//!   row: with `stop_hook_active` it lets the session stop).
//!
//! What it hands over moves to `.xo/steering.delivered`. Nothing pending:
//! no output. A hook must never fail the agent's call: an unreadable
//! payload is an empty one.
//!
//! The same hook tells XO when the session waits for a person, and answers
//! for it where it was asked to (`xo_pipeline::driver::waiting`):
//!
//! - `Notification` (Claude Code) with `permission_prompt`, `idle_prompt`
//!   or `elicitation_dialog`: a line in `.xo/needs.jsonl`; the transcript
//!   watch reports the unit "needs you" (`permission`, `question`) until
//!   the session writes again. No output.
//! - `PermissionRequest` (Claude Code, Codex): the first `[[hooks.approve]]`
//!   rule that matches the tool and its command answers `allow` or `deny`
//!   (`{"hookSpecificOutput": {"hookEventName": "PermissionRequest",
//!   "decision": {"behavior": …}}}`); `ask`, or no rule, leaves the prompt
//!   to the person and the unit needs you (`permission`). Every answer a
//!   rule gives is a line of `<state.dir>/approvals.jsonl` naming the rule.
//! - `PreToolUse`: a session whose cap a watch marked reached
//!   (`.xo/spent.jsonl`) has its next tool call refused
//!   (`permissionDecision: "deny"` with the reason).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use xo_pipeline::driver::command::{DELIVERED, PENDING, addressed};

/// The agents with a hook.
const AGENTS: [&str; 2] = ["claude", "codex"];

fn known(agent: &str) -> anyhow::Result<()> {
    if !AGENTS.contains(&agent) {
        anyhow::bail!(
            "no hook for agent {agent:?}; the hooks are: {}",
            AGENTS.join(", ")
        );
    }
    Ok(())
}

/// `xo hook AGENT --install DIR`: the hook added to the project in `dir`.
pub async fn install(agent: &str, dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    known(agent)?;
    if !dir.is_dir() {
        anyhow::bail!("{} is not a project directory", dir.display());
    }
    use xo_pipeline::driver::command as c;
    let files = match agent {
        "claude" => vec![c::install_claude_hook(dir).await?],
        _ => c::install_codex_hook(dir).await?,
    };
    for f in &files {
        eprintln!("xo hook {agent}: installed in {}", f.display());
    }
    if agent == "codex" {
        eprintln!(
            "xo hook codex: Codex runs a project's hooks once the project is trusted and the hook reviewed: open /hooks in codex"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The project directory: Claude Code's `CLAUDE_PROJECT_DIR`, else the
/// payload's `cwd`, else this process's directory.
fn project_dir(agent: &str, payload: &serde_json::Value) -> PathBuf {
    std::env::var_os("CLAUDE_PROJECT_DIR")
        .filter(|_| agent == "claude")
        .map(PathBuf::from)
        .or_else(|| {
            payload
                .get("cwd")
                .and_then(|c| c.as_str())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("."))
}

/// What the hook answers Claude Code for `event` with `steering`.
fn answer(event: &str, steering: &str) -> serde_json::Value {
    let text = format!("{steering}\n(from the XO supervisor: act on this before your next step)");
    match event {
        "Stop" | "SubagentStop" => serde_json::json!({"decision": "block", "reason": text}),
        _ => serde_json::json!({
            "hookSpecificOutput": {"hookEventName": event, "additionalContext": text}
        }),
    }
}

/// `xo hook AGENT`: answers one hook call (its payload on stdin).
pub fn answer_hook(agent: &str, cfg: &xo_runtime::XoConfig) -> anyhow::Result<ExitCode> {
    known(agent)?;
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let payload: serde_json::Value = serde_json::from_str(&input).unwrap_or_default();
    let event = payload
        .get("hook_event_name")
        .and_then(|e| e.as_str())
        .unwrap_or("PostToolUse")
        .to_string();
    match event.as_str() {
        "Notification" => {
            waits(&project_dir(agent, &payload), &payload);
            return Ok(ExitCode::SUCCESS);
        }
        "PermissionRequest" => return permission(agent, cfg, &payload),
        "PreToolUse" => return pre_tool_use(agent, &payload),
        // The session moved: the transcript says so to the watch.
        "UserPromptSubmit" | "SessionStart" => return Ok(ExitCode::SUCCESS),
        _ => {}
    }
    let session = payload
        .get("session_id")
        .and_then(|s| s.as_str())
        .map(String::from);
    let stop_active = payload.get("stop_hook_active").and_then(|s| s.as_bool()) == Some(true);
    if stop_active && matches!(event.as_str(), "Stop" | "SubagentStop") {
        // The session already went on once for a Stop hook: let it stop,
        // and leave the steering for its next call.
        return Ok(ExitCode::SUCCESS);
    }
    let dir = project_dir(agent, &payload);
    let pending = dir.join(PENDING);
    // Taken by a rename first, so steering appended meanwhile waits for the
    // next call instead of being lost.
    let taking = dir.join(format!(".xo/steering.taking.{}", std::process::id()));
    match std::fs::rename(&pending, &taking) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e).with_context(|| format!("taking {}", pending.display())),
    }
    let text = std::fs::read_to_string(&taking)
        .with_context(|| format!("reading {}", taking.display()))?;
    let (mut mine, mut others) = (Vec::new(), String::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match addressed(line) {
            (Some(s), _) if Some(&s) != session.as_ref() => {
                others.push_str(line);
                others.push('\n');
            }
            (_, t) => mine.push(t),
        }
    }
    if !others.is_empty() {
        // Back for their own sessions' hooks, after anything appended meanwhile.
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&pending)
            .with_context(|| format!("keeping {} pending", pending.display()))?;
        f.write_all(others.as_bytes())?;
    }
    if !mine.is_empty() {
        // Exact JSON for the agent (not made terminal-safe: that would
        // change its strings); quiet if the agent stopped reading.
        crate::term::print_out(&format!("{}\n", answer(&event, &mine.join("\n"))));
        let mut kept = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(DELIVERED))
            .with_context(|| format!("keeping delivered steering in {}", dir.display()))?;
        for m in &mine {
            kept.write_all(m.as_bytes())?;
            kept.write_all(b"\n")?;
        }
    }
    let _ = std::fs::remove_file(&taking);
    Ok(ExitCode::SUCCESS)
}

/// Records that the hook's session waits for a person, if its payload says
/// so. Never fails the agent's call: a file that cannot be written is said
/// on stderr.
fn waits(dir: &std::path::Path, payload: &serde_json::Value) {
    use xo_pipeline::driver::waiting;
    if let Some(w) = waiting::from_hook(payload, xo_proto::now_ms())
        && let Err(e) = waiting::record(dir, &w)
    {
        eprintln!("xo hook: {}: {e}", waiting::NEEDS);
    }
}

/// `PermissionRequest`: the first `[[hooks.approve]]` rule that matches
/// answers; `ask`, or none, leaves it to the person (the unit needs you).
fn permission(
    agent: &str,
    cfg: &xo_runtime::XoConfig,
    payload: &serde_json::Value,
) -> anyhow::Result<ExitCode> {
    use xo_runtime::config::ApproveDecision;
    let dir = project_dir(agent, payload);
    let tool = payload
        .get("tool_name")
        .and_then(|t| t.as_str())
        .unwrap_or("");
    // What a rule's `command` is matched against (empty: the call has none).
    let subject = xo_pipeline::driver::waiting::subject(payload)
        .unwrap_or("")
        .to_string();
    let rule = cfg
        .hooks
        .approve
        .iter()
        .enumerate()
        .find(|(_, r)| r.matches(tool, &subject));
    let Some((i, rule)) = rule else {
        waits(&dir, payload);
        return Ok(ExitCode::SUCCESS);
    };
    let label = rule.label(i);
    audit(
        cfg,
        &dir,
        agent,
        payload,
        tool,
        &subject,
        rule.decision,
        &label,
    );
    let decision = match rule.decision {
        ApproveDecision::Allow => serde_json::json!({"behavior": "allow"}),
        ApproveDecision::Deny => serde_json::json!({
            "behavior": "deny",
            "message": format!("refused by the XO rule {label}; do it another way or ask your user"),
        }),
        ApproveDecision::Ask => {
            waits(&dir, payload);
            return Ok(ExitCode::SUCCESS);
        }
    };
    crate::term::print_out(&format!(
        "{}\n",
        serde_json::json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}})
    ));
    Ok(ExitCode::SUCCESS)
}

/// One line of `<state.dir>/approvals.jsonl`: what a rule answered, for
/// whom. Said on stderr if it cannot be written (the answer still goes).
#[allow(clippy::too_many_arguments)]
fn audit(
    cfg: &xo_runtime::XoConfig,
    dir: &std::path::Path,
    agent: &str,
    payload: &serde_json::Value,
    tool: &str,
    subject: &str,
    decision: xo_runtime::config::ApproveDecision,
    rule: &str,
) {
    let state = if cfg.state.dir.is_absolute() {
        cfg.state.dir.clone()
    } else {
        dir.join(&cfg.state.dir)
    };
    let line = serde_json::json!({
        "at": xo_runtime::clock::rfc3339(xo_proto::now_ms()),
        "agent": agent,
        "session_id": payload.get("session_id"),
        "cwd": dir.display().to_string(),
        "tool": tool,
        "subject": subject,
        "decision": decision,
        "rule": rule,
    });
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    if let Err(e) = xo_runtime::untrusted::append(&state, std::path::Path::new(APPROVALS), &bytes) {
        eprintln!(
            "xo hook: the approval was not written to {}: {e}",
            state.join(APPROVALS).display()
        );
    }
}

/// The hooks' audit log of rule answers, in the state directory.
pub const APPROVALS: &str = "approvals.jsonl";

/// `PreToolUse`: a session whose cap is reached may make no more calls.
fn pre_tool_use(agent: &str, payload: &serde_json::Value) -> anyhow::Result<ExitCode> {
    let Some(session) = payload.get("session_id").and_then(|s| s.as_str()) else {
        return Ok(ExitCode::SUCCESS);
    };
    let dir = project_dir(agent, payload);
    if let Some(why) = xo_pipeline::driver::waiting::spent(&dir, session) {
        crate::term::print_out(&format!(
            "{}\n",
            serde_json::json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": format!("[SUPERVISOR] this session's cap is reached ({why}): make no more tool calls; stop and tell your user what is left to do"),
            }})
        ));
    }
    Ok(ExitCode::SUCCESS)
}
