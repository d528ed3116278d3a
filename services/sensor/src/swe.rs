//! SWE-agent `.traj` files and mini-swe-agent trajectories: whole JSON
//! documents, written when a run ends.
//!
//! SWE-agent: `trajectory[]` of `{action, observation, thought}` (the
//! action's first word is the command: `edit`, `python`, `submit`…);
//! `info.exit_status`; `info.model_stats` (`instance_cost`, `tokens_sent`,
//! `tokens_received`).
//!
//! mini-swe-agent (`trajectory_format` `mini-swe-agent-1`): `messages[]`;
//! an assistant message's bash block is the action, the next user message's
//! `<returncode>N</returncode>` and `<output>` its result; `info` as above.

use serde_json::Value;

use crate::{Common, Pending, Stats, TurnEvent, str_of, text_of};

/// A whole trajectory: its turns, in order, and what was read.
pub fn parse_document(text: &str) -> Result<(Vec<TurnEvent>, Stats), String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not a JSON trajectory: {e}"))?;
    let mut c = Common::default();
    let mut out = Vec::new();
    let info = v.get("info").cloned().unwrap_or(Value::Null);
    if let Some(steps) = v.get("trajectory").and_then(Value::as_array) {
        for step in steps {
            c.stats.events += 1;
            let action = str_of(step, "action").unwrap_or_default().trim();
            let observation = step.get("observation").map(text_of).unwrap_or_default();
            if action.is_empty() {
                out.push(c.message(str_of(step, "thought").unwrap_or_default()));
                continue;
            }
            let tool = action.split_whitespace().next().unwrap_or("bash");
            let p = Pending {
                tool: tool.into(),
                args_hash: crate::hex_hash(action).as_str().into(),
                command: Some(action.to_string()),
            };
            let failed = failed_text(&observation);
            out.push(c.tool_turn(&p, !failed, &observation, None));
        }
    } else if let Some(messages) = v.get("messages").and_then(Value::as_array) {
        let mut pending: Option<Pending> = None;
        for m in messages {
            c.stats.events += 1;
            let content = m.get("content").map(text_of).unwrap_or_default();
            match str_of(m, "role") {
                Some("assistant") => match bash_block(&content) {
                    Some(cmd) => {
                        pending = Some(Pending {
                            tool: cmd.split_whitespace().next().unwrap_or("bash").into(),
                            args_hash: crate::hex_hash(cmd.trim()).as_str().into(),
                            command: Some(cmd.trim().to_string()),
                        })
                    }
                    None => out.push(c.message(&content)),
                },
                Some("user") => {
                    if let Some(p) = pending.take() {
                        let exit = tag(&content, "returncode").and_then(|r| r.trim().parse().ok());
                        let output = tag(&content, "output").unwrap_or(&content).to_string();
                        out.push(c.tool_turn(&p, true, &output, exit));
                    }
                }
                _ => {}
            }
        }
    } else {
        return Err(
            "neither \"trajectory\" (SWE-agent) nor \"messages\" (mini-swe-agent) found".into(),
        );
    }
    if let Some(stats) = info.get("model_stats") {
        c.cumulative(
            stats.get("instance_cost").and_then(Value::as_f64),
            stats.get("tokens_sent").and_then(Value::as_u64),
            stats.get("tokens_received").and_then(Value::as_u64),
        );
    }
    let status = str_of(&info, "exit_status").unwrap_or("unknown");
    let failed = !matches!(status, "submitted" | "Submitted" | "unknown");
    out.push(c.end(format!("exit_status: {status}"), failed.then_some(status)));
    Ok((out, c.stats))
}

/// The first fenced bash block of a message.
fn bash_block(text: &str) -> Option<&str> {
    let start = text.find("```bash").or_else(|| text.find("```sh"))?;
    let body = &text[start..];
    let body = &body[body.find('\n')? + 1..];
    Some(&body[..body.find("```")?])
}

fn tag<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let a = text.find(&open)? + open.len();
    let b = a + text[a..].find(&close)?;
    Some(&text[a..b])
}

/// SWE-agent observations report failure only in their text.
fn failed_text(obs: &str) -> bool {
    obs.contains("Traceback (most recent call last)")
        || obs.contains("command not found")
        || obs.contains("Your proposed edit has introduced new syntax error")
        || obs.trim_start().starts_with("Error")
        || obs.contains("FAILED")
}
