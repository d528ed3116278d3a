//! SWE-agent `.traj` files and mini-swe-agent trajectories: whole JSON
//! documents, written when a run ends.
//!
//! SWE-agent: `trajectory[]` of `{action, observation, thought}` (the
//! action's first word is the command: `edit`, `python`, `submit`…);
//! `info.exit_status`; `info.model_stats` (`instance_cost`, `tokens_sent`,
//! `tokens_received`).
//!
//! SWE-agent trajectories that keep their calls only in `history` (the
//! model's messages: an assistant message's `action`, the next
//! `observation` message its result).
//!
//! mini-swe-agent (`trajectory_format` `mini-swe-agent-1`): `messages[]`,
//! or the bare list of messages; an assistant message's bash block
//! (```` ```bash ````, ```` ```mswea_bash_command ````) is the action, the next user message's
//! `<returncode>N</returncode>` and `<output>` its result; `info` as above.

use serde_json::Value;

use crate::{Common, Pending, Stats, TurnEvent, str_of, text_of};

/// A whole trajectory: its turns, in order, and what was read.
pub fn parse_document(text: &str) -> Result<(Vec<TurnEvent>, Stats), crate::SensorError> {
    read(text).map(|(turns, stats, _)| (turns, stats))
}

/// A whole trajectory: its turns, what was read, and how it ended
/// (`None`: the document records no end; `Some(true)`: it ended failed).
pub fn read(text: &str) -> Result<(Vec<TurnEvent>, Stats, Option<bool>), crate::SensorError> {
    let v: Value = serde_json::from_str(text).map_err(|e| crate::SensorError::Document {
        what: "a JSON trajectory".into(),
        why: e.to_string(),
    })?;
    let mut c = Common::default();
    let mut out = Vec::new();
    let info = v.get("info").cloned().unwrap_or(Value::Null);
    let mut submitted = false;
    let steps = v
        .get("trajectory")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty());
    // mini-swe-agent keeps `messages`, or (its tests) the bare list.
    let messages = v.get("messages").and_then(Value::as_array).or_else(|| {
        v.as_array()
            .filter(|l| l.iter().any(|m| m.get("role").is_some()))
    });
    if let Some(steps) = steps {
        for step in steps {
            c.stats.events += 1;
            let action = str_of(step, "action").unwrap_or_default().trim();
            let observation = step.get("observation").map(text_of).unwrap_or_default();
            if action.is_empty() {
                out.push(c.message(str_of(step, "thought").unwrap_or_default()));
                continue;
            }
            submitted |= action == "submit" || action.starts_with("submit ");
            out.push(command_turn(&mut c, action, &observation, None));
        }
    } else if let Some(history) = v.get("history").and_then(Value::as_array) {
        // SWE-agent's `history`: the model's messages, each action's
        // observation in the next `observation` message.
        let mut pending: Option<String> = None;
        for m in history {
            c.stats.events += 1;
            let content = m.get("content").map(text_of).unwrap_or_default();
            match (str_of(m, "role"), str_of(m, "message_type")) {
                (Some("assistant"), _) => {
                    let action = str_of(m, "action").unwrap_or_default().trim();
                    if action.is_empty() {
                        out.push(c.message(&content));
                    } else {
                        submitted |= action == "submit" || action.starts_with("submit ");
                        pending = Some(action.to_string());
                    }
                }
                (_, Some("observation")) => {
                    if let Some(action) = pending.take() {
                        out.push(command_turn(&mut c, &action, &content, None));
                    }
                }
                _ => {}
            }
        }
        if let Some(action) = pending.take() {
            out.push(command_turn(&mut c, &action, "", None));
        }
    } else if let Some(messages) = messages {
        let mut pending: Option<Pending> = None;
        for m in messages {
            c.stats.events += 1;
            let content = m.get("content").map(text_of).unwrap_or_default();
            match str_of(m, "role") {
                Some("assistant") => match bash_block(&content) {
                    Some(cmd) => {
                        submitted |= cmd.contains("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
                            || cmd.contains("MINI_SWE_AGENT_FINAL_OUTPUT");
                        pending = Some(Pending {
                            // The program whose status decides, not the
                            // first word (`cd x && pylint …` is pylint's).
                            tool: match crate::evidence::program(
                                &crate::evidence::deciding_command(cmd),
                            ) {
                                "" => "bash".into(),
                                p => p.into(),
                            },
                            args_hash: crate::hex_hash(cmd.trim()).as_str().into(),
                            command: Some(cmd.trim().to_string()),
                        })
                    }
                    None => out.push(c.message(&content)),
                },
                Some("user" | "tool") => {
                    let returncode = tag(&content, "returncode");
                    if returncode.is_none() && refused(&content) {
                        // The harness refused the reply (none or several
                        // commands in it): nothing ran. A failed action of
                        // its own kind, never a run of its first block.
                        let hash = pending
                            .take()
                            .map(|p| p.args_hash)
                            .unwrap_or_else(|| crate::hex_hash(&content).as_str().into());
                        out.push(c.refused(&hash, &content));
                    } else if let Some(p) = pending.take() {
                        let exit = returncode.and_then(|r| r.trim().parse().ok());
                        let output = tag(&content, "output").unwrap_or(&content).to_string();
                        out.push(c.tool_turn(&p, true, &output, exit));
                    }
                }
                _ => {}
            }
        }
    } else {
        return Err(crate::SensorError::Document {
            what: "a trajectory".into(),
            why: "none of \"trajectory\", \"history\" (SWE-agent) or \"messages\" (mini-swe-agent) found".into(),
        });
    }
    if let Some(stats) = info.get("model_stats") {
        c.cumulative(
            stats.get("instance_cost").and_then(Value::as_f64),
            stats.get("tokens_sent").and_then(Value::as_u64),
            stats.get("tokens_received").and_then(Value::as_u64),
        );
    }
    let status = str_of(&info, "exit_status").or(submitted.then_some("submitted"));
    let ended = match status {
        // Every other exit status names why the run stopped early.
        Some(s) => {
            let failed = !s.eq_ignore_ascii_case("submitted");
            out.push(c.end(format!("exit_status: {s}"), failed.then_some(s)));
            Some(failed)
        }
        None => None,
    };
    Ok((out, c.stats, ended))
}

/// One command and its observation as a turn (SWE-agent reports failure
/// only in the observation's text).
fn command_turn(c: &mut Common, action: &str, observation: &str, exit: Option<i64>) -> TurnEvent {
    let mut words = action.split_whitespace();
    let first = words.next().unwrap_or("bash");
    // An editor's subcommand (`str_replace_editor view …`) says what it
    // did; a shell line is named by the program whose status decides.
    // (SWE-agent's own commands span lines, `edit` … `end_of_edit`: only
    // a first line that chains commands is read as a shell line.)
    let chained = action
        .lines()
        .next()
        .is_some_and(|l| l.contains("&&") || l.contains("||") || l.contains(';'));
    let decided = crate::evidence::deciding_command(action);
    let (tool, command) = if first.ends_with("editor") {
        (first, words.next().unwrap_or_default().to_string())
    } else if !chained {
        (first, action.to_string())
    } else {
        match crate::evidence::program(&decided) {
            "" => (first, action.to_string()),
            p => (p, action.to_string()),
        }
    };
    let p = Pending {
        tool: tool.into(),
        args_hash: crate::hex_hash(action).as_str().into(),
        command: Some(command),
    };
    c.tool_turn(&p, !failed_text(observation), observation, exit)
}

/// The first fenced bash block of a message.
fn bash_block(text: &str) -> Option<&str> {
    let start = text
        .find("```mswea_bash_command")
        .or_else(|| text.find("```bash"))
        .or_else(|| text.find("```sh"))?;
    let body = &text[start..];
    let body = &body[body.find('\n')? + 1..];
    Some(&body[..body.find("```")?])
}

/// mini-swe-agent's answer to a reply it could not run (its
/// `format_error_template`: "Please always provide EXACTLY ONE action in
/// triple backticks, found N actions"), with no `<returncode>`.
fn refused(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("exactly one action") || lower.contains("format error")
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
