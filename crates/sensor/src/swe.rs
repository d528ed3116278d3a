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
//!
//! mini-swe-agent 2 (`mini-swe-agent-1.1`): an assistant message's
//! `extra.actions` (`command`, and `tool_call_id` with a tool-call model,
//! whose message also has `tool_calls`) are its actions; a `role: "tool"`
//! message answers the call its `tool_call_id` names (a text-based
//! model's `role: "user"` observation the oldest), with `extra.returncode`,
//! `raw_output` and `exception_info`; an assistant message's
//! `extra.response.usage` (`prompt_tokens`: the context's size,
//! `completion_tokens`), `extra.cost` and `extra.timestamp` (seconds) are
//! the model call's; a `role: "user"` message with
//! `extra.interrupt_type` `FormatError` is a refused reply; a `role:
//! "exit"` message ends the run (`extra.exit_status`).

use serde_json::Value;

use crate::{Common, Pending, Stats, TurnEvent, str_of, text_of};

/// A whole trajectory: its turns, in order, and what was read.
pub fn parse_document(text: &str) -> Result<(Vec<TurnEvent>, Stats), crate::SensorError> {
    read(text).map(|(turns, stats, _, _)| (turns, stats))
}

/// A whole trajectory: its turns, what was read, how it ended (`None`:
/// the document records no end; `Some(true)`: it ended failed), and the
/// calls it holds no observation of.
pub type Read = (Vec<TurnEvent>, Stats, Option<bool>, usize);

pub fn read(text: &str) -> Result<Read, crate::SensorError> {
    let v: Value = serde_json::from_str(text).map_err(|e| crate::SensorError::Document {
        what: "a JSON trajectory".into(),
        why: e.to_string(),
    })?;
    let mut c = Common::default();
    let mut out = Vec::new();
    let info = v.get("info").cloned().unwrap_or(Value::Null);
    let mut submitted = false;
    let mut unfinished = 0;
    // mini-swe-agent's `exit` message's status (a run saved before its
    // `info` was).
    let mut exit: Option<String> = None;
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
        for (i, step) in steps.iter().enumerate() {
            c.stats.events += 1;
            c.stats
                .count_kind("trajectory", Some(true), false, i as u64 + 1);
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
        for (i, m) in history.iter().enumerate() {
            c.stats.events += 1;
            let content = m.get("content").map(text_of).unwrap_or_default();
            let role = str_of(m, "role").unwrap_or("-");
            let used = role == "assistant" || str_of(m, "message_type") == Some("observation");
            // The system prompt, the task and demonstrations: no step.
            let known = used || matches!(role, "system" | "user" | "tool");
            c.stats.count_kind(
                &format!("history/{role}"),
                known.then_some(used),
                false,
                i as u64 + 1,
            );
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
        // Calls waiting for their observation, in order, each with its
        // `tool_call_id` (empty for a text-based model's action).
        let mut pending: Vec<(String, Pending)> = Vec::new();
        // mini-swe-agent 2's running totals: each model call's usage and
        // cost are on its message (`info.model_stats` only at the end).
        let (mut cost, mut sent, mut received) = (0.0, 0, 0);
        for (i, m) in messages.iter().enumerate() {
            c.stats.events += 1;
            let content = m.get("content").map(text_of).unwrap_or_default();
            let extra = m.get("extra").unwrap_or(&Value::Null);
            if let Some(at) = extra.get("timestamp").and_then(Value::as_f64) {
                c.at_ms = Some((at * 1000.0) as u64);
            }
            if let Some(u) = extra.get("response").and_then(|r| r.get("usage")) {
                let prompt = u.get("prompt_tokens").and_then(Value::as_u64);
                // The prompt is the whole conversation: the context's size.
                if let Some(p) = prompt {
                    c.context_tokens = Some(p);
                }
                sent += prompt.unwrap_or(0);
                received += u
                    .get("completion_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                cost += extra.get("cost").and_then(Value::as_f64).unwrap_or(0.0);
                c.cumulative(Some(cost), Some(sent), Some(received));
            }
            let role = str_of(m, "role").unwrap_or("-");
            // A user message is an observation once a call waits for one
            // (or the harness refused a reply); before, the task.
            let done = match role {
                "assistant" | "tool" | "exit" => Some(true),
                "user" => Some(!pending.is_empty() || extra.get("interrupt_type").is_some()),
                "system" => Some(false),
                _ => None,
            };
            c.stats
                .count_kind(&format!("message/{role}"), done, false, i as u64 + 1);
            match str_of(m, "role") {
                Some("assistant") => {
                    let actions = actions_of(m, &content);
                    if actions.is_empty() {
                        out.push(c.message(&content));
                    }
                    for (id, cmd) in actions {
                        submitted |= cmd.contains("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
                            || cmd.contains("MINI_SWE_AGENT_FINAL_OUTPUT");
                        pending.push((id, mini_call(&cmd)));
                    }
                }
                Some(role @ ("user" | "tool")) => {
                    let returncode =
                        extra.get("returncode").and_then(Value::as_i64).or_else(|| {
                            tag(&content, "returncode").and_then(|r| r.trim().parse().ok())
                        });
                    let format_error = str_of(extra, "interrupt_type") == Some("FormatError")
                        || returncode.is_none() && refused(&content);
                    if format_error {
                        // The harness refused the reply (no action, or
                        // several, or a call it could not parse): nothing
                        // ran. A failed action of its own kind, never a
                        // run of the reply's first block.
                        let hash = if pending.is_empty() {
                            crate::hex_hash(&content).as_str().into()
                        } else {
                            pending.remove(0).1.args_hash
                        };
                        // What the harness said was wrong, where it says.
                        let said = tag(&content, "error").unwrap_or(&content);
                        out.push(c.refused(&hash, said));
                        continue;
                    }
                    // A tool message answers the call it names; a user
                    // message with a return code the oldest action.
                    let call = match str_of(m, "tool_call_id") {
                        Some(id) if role == "tool" => pending.iter().position(|(p, _)| p == id),
                        _ if returncode.is_some() && !pending.is_empty() => Some(0),
                        _ => None,
                    };
                    let Some(i) = call else {
                        if role == "tool" {
                            c.stats.orphan_results += 1;
                        }
                        continue;
                    };
                    let (_, p) = pending.remove(i);
                    let mut output = str_of(extra, "raw_output")
                        .map(str::to_string)
                        .or_else(|| tag(&content, "output").map(str::to_string))
                        .unwrap_or_else(|| content.clone());
                    // Not run, or not to its end (a timeout, an action
                    // never executed): a failure, whatever the code says,
                    // and what the harness said is its evidence.
                    let exception = str_of(extra, "exception_info")
                        .or_else(|| tag(&content, "exception"))
                        .filter(|e| !e.trim().is_empty());
                    // Last, where the telling line is looked for; a
                    // timeout in the harness's words without the command
                    // line it quotes whole (`Command '['docker', 'exec', …]'
                    // timed out after 60 seconds`).
                    if let Some(e) = exception {
                        let e = match e.find("timed out after") {
                            Some(i) => format!("{e}\nthe command {}", &e[i..]),
                            None => e.to_string(),
                        };
                        output = format!("{output}\n{e}");
                    }
                    out.push(c.tool_turn(&p, exception.is_none(), &output, returncode));
                }
                // The run's end: its status is in `info` too.
                Some("exit") => {
                    if exit.is_none() {
                        exit = str_of(extra, "exit_status").map(str::to_string);
                    }
                }
                Some("system") => {}
                _ => c.stats.unknown += 1,
            }
        }
        // Calls the run never saw the output of.
        unfinished = pending.len();
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
    let status = str_of(&info, "exit_status")
        .filter(|s| !s.is_empty())
        .or(exit.as_deref())
        .or(submitted.then_some("submitted"));
    let ended = match status {
        // Every other exit status names why the run stopped early.
        Some(s) => {
            let failed = !s.eq_ignore_ascii_case("submitted");
            out.push(c.end(format!("exit_status: {s}"), failed.then_some(s)));
            Some(failed)
        }
        None => None,
    };
    Ok((out, c.stats, ended, unfinished))
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

/// A mini-swe-agent assistant message's actions, each with its
/// `tool_call_id` (empty for a text-based model): the `extra.actions`
/// mini-swe-agent 2 parsed and ran, else the message's `tool_calls`
/// (`bash` with a JSON `command`), else (mini-swe-agent 1) its first bash
/// block.
fn actions_of(m: &Value, content: &str) -> Vec<(String, String)> {
    let id_of = |v: &Value, key: &str| str_of(v, key).unwrap_or_default().to_string();
    if let Some(actions) = m
        .get("extra")
        .and_then(|e| e.get("actions"))
        .and_then(Value::as_array)
    {
        return actions
            .iter()
            .filter_map(|a| Some((id_of(a, "tool_call_id"), str_of(a, "command")?.to_string())))
            .collect();
    }
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        return calls
            .iter()
            .filter_map(|call| {
                let f = call.get("function")?;
                let args: Value = serde_json::from_str(str_of(f, "arguments")?).ok()?;
                Some((id_of(call, "id"), str_of(&args, "command")?.to_string()))
            })
            .collect();
    }
    bash_block(content)
        .map(|cmd| vec![(String::new(), cmd.to_string())])
        .unwrap_or_default()
}

/// A mini-swe-agent shell command as a call, named by the program whose
/// status decides (`cd x && pylint …` is pylint's), not its first word.
fn mini_call(cmd: &str) -> Pending {
    Pending {
        tool: match crate::evidence::program(&crate::evidence::deciding_command(cmd)) {
            "" => "bash".into(),
            p => p.into(),
        },
        args_hash: crate::hex_hash(cmd.trim()).as_str().into(),
        command: Some(cmd.trim().to_string()),
    }
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
