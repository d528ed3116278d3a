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
pub fn answer_hook(agent: &str) -> anyhow::Result<ExitCode> {
    known(agent)?;
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let payload: serde_json::Value = serde_json::from_str(&input).unwrap_or_default();
    let event = payload
        .get("hook_event_name")
        .and_then(|e| e.as_str())
        .unwrap_or("PostToolUse")
        .to_string();
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
        println!("{}", answer(&event, &mine.join("\n")));
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
