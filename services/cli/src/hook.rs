//! `xo hook claude`: Claude Code's PostToolUse hook. The runner appends the
//! XO's steering for a running agent to `.xo/steering.pending` in the
//! task's directory; after each tool call Claude Code runs this hook, which
//! hands the pending steering to the model in the form Claude Code shows it
//! (`{"decision": "block", "reason": …}` on stdout) and moves it to
//! `.xo/steering.delivered`. Nothing pending: no output.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use xo_pipeline::driver::command::{DELIVERED, PENDING};

/// The project directory: Claude Code's `CLAUDE_PROJECT_DIR`, else the
/// payload's `cwd`, else this process's directory.
fn project_dir(payload: &serde_json::Value) -> PathBuf {
    std::env::var_os("CLAUDE_PROJECT_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            payload
                .get("cwd")
                .and_then(|c| c.as_str())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn claude() -> anyhow::Result<ExitCode> {
    let mut input = String::new();
    // The payload says where the project is; a hook must not fail the tool
    // call because of it, so an unreadable payload is an empty one.
    let _ = std::io::stdin().read_to_string(&mut input);
    let payload: serde_json::Value = serde_json::from_str(&input).unwrap_or_default();
    let dir = project_dir(&payload);
    let pending = dir.join(PENDING);
    // Taken by a rename first, so steering the runner appends meanwhile
    // waits for the next call instead of being lost.
    let taking = dir.join(".xo/steering.taking");
    match std::fs::rename(&pending, &taking) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e).with_context(|| format!("taking {}", pending.display())),
    }
    let text = std::fs::read_to_string(&taking)
        .with_context(|| format!("reading {}", taking.display()))?;
    let steering = text.trim();
    if !steering.is_empty() {
        let reason =
            format!("{steering}\n(from the XO supervisor: act on this before your next step)");
        println!(
            "{}",
            serde_json::json!({"decision": "block", "reason": reason})
        );
    }
    use std::io::Write;
    let mut kept = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(DELIVERED))
        .with_context(|| format!("keeping delivered steering in {}", dir.display()))?;
    kept.write_all(text.as_bytes())?;
    let _ = std::fs::remove_file(&taking);
    Ok(ExitCode::SUCCESS)
}
