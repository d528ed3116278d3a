//! Codex CLI: `codex exec --json` events and rollout files
//! (`~/.codex/sessions/**/rollout-*.jsonl`), told apart by their `type`.
//!
//! `exec --json`:
//! - `thread.started` (`thread_id`), `turn.started`.
//! - `item.completed` with `item.type` (older builds: `item_type`):
//!   `command_execution` (`command`, `aggregated_output`, `exit_code`,
//!   `status`), `file_change` (`changes`, `status`), `mcp_tool_call`
//!   (`server`, `tool`, `status`), `web_search`, `agent_message` (`text`),
//!   `error` (`message`); `reasoning` and `todo_list` carry no step.
//! - `turn.completed` (`usage`: input, cached input, output tokens) ends a
//!   run; `turn.failed` (`error.message`) ends it failed; `error` (`message`)
//!   is a stream error.
//!
//! Rollouts (`{timestamp, type, payload}`):
//! - `session_meta` (`payload.id`), `turn_context` (`payload.model`).
//! - `response_item`: `function_call` / `custom_tool_call` / `local_shell_call`
//!   (`call_id`) and `function_call_output` / `custom_tool_call_output`
//!   (`call_id`, `output`: JSON with `metadata.exit_code`, or text with
//!   `Exit code: N`); assistant `message` (`content[].text`).
//! - `event_msg` `token_count` (`info.total_token_usage`,
//!   `info.last_token_usage`, `info.model_context_window`).
//! - `compacted`: a condensation.

use serde_json::Value;

use crate::{Common, Pending, Running, TurnEvent, str_of, text_of, u64_of, value_hash};

/// Reads one line: the lines most of a stream is made of (`item.completed`
/// of a command or a message) through [`fast`], the rest through [`event`].
pub(crate) fn line(
    c: &mut Common,
    text: &str,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    // Codex writes the type first: most such lines are known by their
    // head, without a search of the whole.
    if text.starts_with(r#"{"type":"item.completed""#) || text.contains("\"item.completed\"") {
        // The turn is made in its place in the list returned: a turn is
        // large, and each move of it out of a call was a copy (8% of a
        // line's time).
        let mut out = Vec::with_capacity(1);
        if fast(c, text, &mut out).is_some() {
            return Ok(Some(out));
        }
    }
    let v: Value = crate::parse_object(text)?;
    event(c, &v)
}

/// An `item.completed` of a command or a message, its few fields found
/// without building the line ([`crate::scan`]); `None` for any other line
/// (another item, a field of an unexpected kind, a line that is no plain
/// JSON object), which [`event`] reads; the turn is pushed on `out`.
fn fast(c: &mut Common, text: &str, out: &mut Vec<TurnEvent>) -> Option<()> {
    use crate::scan::{Found, Want, int, read, string};
    const WANT: Want<'static> = Want {
        take: &[("type", 0)],
        enter: &[(
            "item",
            Want::take(&[
                ("type", 1),
                ("item_type", 2),
                ("command", 3),
                ("aggregated_output", 4),
                ("exit_code", 5),
                ("status", 6),
                ("text", 7),
            ]),
        )],
        first: None,
    };
    let found: Found<'_, 8> = read(text, &WANT)?;
    let [kind, ..] = found;
    if string(kind).ok()?.as_deref() != Some("item.completed") {
        return None;
    }
    let [
        _,
        kind,
        item_type,
        command,
        output,
        exit_code,
        status,
        words,
    ] = found;
    let (kind, item_type) = (string(kind).ok()?, string(item_type).ok()?);
    let (command, output) = (string(command).ok()?, string(output).ok()?);
    let (exit_code, status, words) = (
        int(exit_code).ok()?,
        string(status).ok()?,
        string(words).ok()?,
    );
    let kind = kind.as_deref().or(item_type.as_deref());
    match kind {
        Some("command_execution") => {
            c.kind(&["item.completed", "command_execution"]);
            let status_ok = !matches!(status.as_deref(), Some("failed" | "declined"));
            let command = command.as_deref().unwrap_or_default();
            out.push(c.tool_turn_with(
                "shell",
                crate::hex_hash(command).as_str(),
                Some(command),
                status_ok,
                output.as_deref().unwrap_or_default(),
                exit_code,
            ));
            Some(())
        }
        Some("agent_message") => {
            c.kind(&["item.completed", "agent_message"]);
            out.push(c.message(words.as_deref().unwrap_or_default()));
            Some(())
        }
        _ => None,
    }
}

pub(crate) fn event(
    c: &mut Common,
    v: &Value,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    let Some(kind) = str_of(v, "type") else {
        return Err(crate::SensorError::NoType);
    };
    // An envelope's kind is its payload's (or item's) type.
    let inner = match kind {
        "response_item" | "event_msg" => v.get("payload"),
        "item.completed" | "item.started" | "item.updated" => v.get("item"),
        _ => None,
    };
    match inner {
        Some(i) => c.kind(&[
            kind,
            str_of(i, "type")
                .or_else(|| str_of(i, "item_type"))
                .unwrap_or("-"),
        ]),
        None => c.kind(&[kind]),
    }
    if let Some(at) = str_of(v, "timestamp").and_then(crate::parse_time_ms) {
        c.at_ms = Some(at);
    }
    let mut out = Vec::new();
    match kind {
        "thread.started" => {
            if let Some(t) = str_of(v, "thread_id") {
                c.session.get_or_insert_with(|| t.to_string());
            }
        }
        // A step's start and progress: its end is the step.
        "turn.started" | "item.started" | "item.updated" => c.skip(),
        "item.completed" => {
            let item = v.get("item").ok_or("item.completed without \"item\"")?;
            match item_completed(c, item)? {
                Some(turns) => out.extend(turns),
                None => return Ok(None),
            }
        }
        "turn.completed" => {
            if let Some(u) = v.get("usage") {
                c.tokens_in += u64_of(u, "input_tokens");
                c.tokens_out += u64_of(u, "output_tokens");
                c.context_tokens = Some(u64_of(u, "input_tokens"));
            }
            out.push(c.end("turn completed".into(), None));
        }
        "turn.failed" => {
            let msg = v
                .get("error")
                .and_then(|e| str_of(e, "message"))
                .unwrap_or("turn failed");
            out.push(c.end(format!("turn failed: {msg}"), Some(msg)));
        }
        "error" => {
            let msg = str_of(v, "message").unwrap_or("error");
            out.push(c.error_message(msg));
        }
        // Rollout files.
        "session_meta" => {
            if let Some(id) = v.get("payload").and_then(|p| str_of(p, "id")) {
                c.session.get_or_insert_with(|| id.to_string());
            }
        }
        "turn_context" => {
            if let Some(m) = v.get("payload").and_then(|p| str_of(p, "model")) {
                c.model = Some(m.to_string());
            }
        }
        "compacted" => c.condensed = true,
        "response_item" => {
            let p = v
                .get("payload")
                .ok_or("response_item without \"payload\"")?;
            match response_item(c, p)? {
                Some(turns) => out.extend(turns),
                None => return Ok(None),
            }
        }
        "event_msg" => {
            let p = v.get("payload").ok_or("event_msg without \"payload\"")?;
            match str_of(p, "type") {
                // The end of a task the user gave (`codex exec` ends there).
                Some("task_complete" | "turn_complete") => {
                    let last = str_of(p, "last_agent_message").unwrap_or("turn completed");
                    if !last.is_empty() {
                        c.final_text = Some(last.to_string());
                    }
                    let summary: String = last.chars().take(200).collect();
                    out.push(c.end(format!("task complete: {summary}"), None));
                    return Ok(Some(out));
                }
                // Interrupted by its user: it waits for them, nothing failed.
                Some("turn_aborted") => c.resting = true,
                // Its user's prompt: a new instruction.
                Some("user_message") => c.instructed = true,
                Some("exec_command_end") => {
                    out.extend(exec_end(c, p));
                    return Ok(Some(out));
                }
                Some("token_count") => {}
                // The rest of the event stream tells the UI what the
                // response items already hold (the agent's messages and
                // reasoning, a command's start and output so far, a
                // patch, a search) or what the session does (its
                // settings, a turn's start, background notices): skipped
                // by name.
                _ => c.skip(),
            }
            if str_of(p, "type") == Some("token_count")
                && let Some(limits) = p.get("rate_limits").filter(|l| !l.is_null())
            {
                c.limited_until = limit_reset(limits);
            }
            if str_of(p, "type") == Some("token_count")
                && let Some(info) = p.get("info").filter(|i| !i.is_null())
            {
                if let Some(t) = info.get("total_token_usage") {
                    c.cumulative(
                        None,
                        Some(u64_of(t, "input_tokens")),
                        Some(u64_of(t, "output_tokens")),
                    );
                }
                if let Some(l) = info.get("last_token_usage") {
                    c.context_tokens = Some(u64_of(l, "input_tokens"));
                }
                if let Some(w) = info.get("model_context_window").and_then(Value::as_u64) {
                    c.context_limit = Some(w);
                }
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(out))
}

/// When a usage limit the snapshot says is reached resets (ms since the
/// epoch): Codex's `rate_limits` (`primary` and `secondary` windows with
/// `used_percent` and `resets_at` in seconds, `rate_limit_reached_type`
/// set once a limit refused the agent). `None` while within the limits, or
/// when no reset time is given.
fn limit_reset(limits: &Value) -> Option<u64> {
    let reached = limits
        .get("rate_limit_reached_type")
        .is_some_and(|t| !t.is_null());
    let windows: Vec<&Value> = ["primary", "secondary"]
        .iter()
        .filter_map(|k| limits.get(*k).filter(|w| !w.is_null()))
        .collect();
    let spent = |w: &Value| {
        w.get("used_percent")
            .and_then(Value::as_f64)
            .is_some_and(|p| p >= 100.0)
    };
    let reset = |w: &Value| w.get("resets_at").and_then(Value::as_u64);
    let at_limit = windows
        .iter()
        .filter(|w| spent(w))
        .filter_map(|w| reset(w))
        .max();
    let latest = windows.iter().filter_map(|w| reset(w)).max();
    // Reached, but no window at 100% says which: the latest reset.
    let secs = at_limit.or(latest.filter(|_| reached))?;
    Some(secs.saturating_mul(1000))
}

/// `Ok(None)` for an item type this sensor does not know (skipped, counted).
fn item_completed(
    c: &mut Common,
    item: &Value,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    let kind = str_of(item, "type")
        .or_else(|| str_of(item, "item_type"))
        .ok_or("item without \"type\"")?;
    let status_ok = !matches!(str_of(item, "status"), Some("failed" | "declined"));
    let tool = |tool: &str, args: String, command: Option<String>| Pending {
        tool: tool.into(),
        args_hash: crate::hex_hash(&args).as_str().into(),
        command,
    };
    Ok(Some(match kind {
        "command_execution" => {
            let command = str_of(item, "command").unwrap_or_default().to_string();
            let p = tool("shell", command.clone(), Some(command));
            let output = str_of(item, "aggregated_output").unwrap_or_default();
            let exit = item.get("exit_code").and_then(Value::as_i64);
            vec![c.tool_turn(&p, status_ok, output, exit)]
        }
        "file_change" => {
            let changes = item.get("changes").cloned().unwrap_or(Value::Null);
            let p = tool("apply_patch", changes.to_string(), None);
            vec![c.tool_turn(&p, status_ok, &changes.to_string(), None)]
        }
        "mcp_tool_call" => {
            let name = format!(
                "{}.{}",
                str_of(item, "server").unwrap_or("mcp"),
                str_of(item, "tool").unwrap_or("tool")
            );
            let args = item.get("arguments").cloned().unwrap_or(Value::Null);
            let p = tool(&name, args.to_string(), None);
            let result = item
                .get("error")
                .filter(|e| !e.is_null())
                .or_else(|| item.get("result"))
                .map(|r| r.to_string())
                .unwrap_or_default();
            vec![c.tool_turn(&p, status_ok, &result, None)]
        }
        "web_search" => {
            let q = str_of(item, "query").unwrap_or_default();
            let p = tool("web_search", q.to_string(), None);
            vec![c.tool_turn(&p, true, q, None)]
        }
        "agent_message" => vec![c.message(str_of(item, "text").unwrap_or_default())],
        "error" => vec![c.error_message(str_of(item, "message").unwrap_or("error"))],
        "reasoning" | "todo_list" => {
            c.skip();
            Vec::new()
        }
        _ => return Ok(None),
    }))
}

/// `Ok(None)` for a payload type this sensor does not know (skipped, counted).
fn response_item(c: &mut Common, p: &Value) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    let kind = str_of(p, "type").ok_or("payload without \"type\"")?;
    let call = || str_of(p, "call_id").map(String::from);
    match kind {
        "function_call" | "custom_tool_call" | "local_shell_call" => {
            let id = call().ok_or_else(|| {
                crate::SensorError::Unexpected(format!("{kind} without \"call_id\""))
            })?;
            let (tool, args) = match kind {
                "local_shell_call" => (
                    "shell".to_string(),
                    p.get("action").cloned().unwrap_or(Value::Null),
                ),
                "custom_tool_call" => (
                    str_of(p, "name").unwrap_or("tool").to_string(),
                    p.get("input").cloned().unwrap_or(Value::Null),
                ),
                _ => (
                    str_of(p, "name").unwrap_or("tool").to_string(),
                    // Arguments come as a JSON string.
                    str_of(p, "arguments")
                        .and_then(|a| serde_json::from_str(a).ok())
                        .unwrap_or(Value::Null),
                ),
            };
            if tool == "write_stdin"
                && let Some(session) = args.get("session_id").map(text_of)
            {
                c.exec.polls.insert(id.clone(), session);
            }
            // `shell`: `command` (an argv array or a string); `exec_command`: `cmd`.
            let command = args
                .get("command")
                .or_else(|| args.get("cmd"))
                .map(|c| match c {
                    Value::Array(parts) => parts.iter().map(text_of).collect::<Vec<_>>().join(" "),
                    other => text_of(other),
                });
            c.pending.insert(
                id,
                Pending {
                    tool: tool.into(),
                    args_hash: value_hash(&args).into(),
                    command,
                },
            );
            Ok(Some(Vec::new()))
        }
        "function_call_output" | "custom_tool_call_output" => {
            let id = call().ok_or_else(|| {
                crate::SensorError::Unexpected(format!("{kind} without \"call_id\""))
            })?;
            let raw = p.get("output").map(text_of).unwrap_or_default();
            let (text, exit) = tool_output(&raw);
            if let Some(turns) = unified_exec(c, &id, &raw, &text, exit) {
                return Ok(Some(turns));
            }
            let ok = exit.is_none_or(|e| e == 0) && !looks_failed(&text);
            Ok(Some(c.complete(&id, ok, &text, exit).into_iter().collect()))
        }
        // A search the model ran on the provider's side: no call id, no output.
        "web_search_call" => {
            let action = p.get("action").unwrap_or(&Value::Null);
            let query = str_of(action, "query").unwrap_or_default();
            let ok = !matches!(str_of(p, "status"), Some("failed"));
            let pending = Pending {
                tool: "web_search".into(),
                args_hash: value_hash(action).into(),
                command: None,
            };
            Ok(Some(vec![c.tool_turn(&pending, ok, query, None)]))
        }
        "message" if str_of(p, "role") == Some("assistant") => {
            Ok(Some(vec![c.message(&text_of(
                p.get("content").unwrap_or(&Value::Null),
            ))]))
        }
        // The user's and the developer's messages (the prompt is read
        // from `event_msg` `user_message`), and reasoning: no step.
        "message" | "reasoning" => {
            c.skip();
            Ok(Some(Vec::new()))
        }
        _ => Ok(None),
    }
}

/// A result of unified exec, when it is one: `None` for any other call.
fn unified_exec(
    c: &mut Common,
    id: &str,
    raw: &str,
    text: &str,
    exit: Option<i64>,
) -> Option<Vec<TurnEvent>> {
    if c.exec.ended_calls.remove(id) {
        // Its end was told by `exec_command_end` already.
        return Some(Vec::new());
    }
    if let Some(session) = c.exec.polls.remove(id) {
        c.pending.remove(id);
        if c.exec.ended_sessions.contains(&session) {
            // The poll that sees it exit is its last: forget the session.
            if exit.is_some() {
                c.exec.ended_sessions.remove(&session);
            }
            return Some(vec![c.wait()]);
        }
        let mut r = c.exec.running.remove(&session)?;
        r.output.push_str(text);
        return Some(match exit {
            Some(code) => {
                let ok = code == 0;
                vec![c.tool_turn(&r.pending, ok, &r.output, Some(code))]
            }
            None => {
                c.exec.running.insert(session, r);
                vec![c.wait()]
            }
        });
    }
    // Started, still running: `Process running with session ID N` in the
    // header (read only for a result with no exit code).
    let started = || {
        let header = raw.split("\nOutput:").next().unwrap_or(raw);
        header.lines().find_map(|l| {
            l.trim()
                .strip_prefix("Process running with session ID")
                .map(|n| n.trim().to_string())
        })
    };
    if exit.is_none()
        && let Some(session) = started()
        && let Some(pending) = c.pending.remove(id)
    {
        c.exec.running.insert(
            session,
            Running {
                call: id.to_string(),
                pending,
                output: text.to_string(),
            },
        );
        // Its step is its end.
        return Some(Vec::new());
    }
    None
}

/// `exec_command_end`: a command's end with its code and whole output
/// (`aggregated_output`), whichever of it and the call's result comes first.
fn exec_end(c: &mut Common, p: &Value) -> Vec<TurnEvent> {
    let Some(id) = str_of(p, "call_id") else {
        return Vec::new();
    };
    let code = p.get("exit_code").and_then(Value::as_i64);
    let output = str_of(p, "aggregated_output").unwrap_or_default();
    let failed = matches!(str_of(p, "status"), Some("failed" | "declined"));
    let ok = !failed && code.is_none_or(|e| e == 0);
    let session = c
        .exec
        .running
        .iter()
        .find(|(_, r)| r.call == id)
        .map(|(s, _)| s.clone());
    if let Some((session, r)) = session.and_then(|s| c.exec.running.remove_entry(&s)) {
        c.exec.ended_sessions.insert(session);
        return vec![c.tool_turn(&r.pending, ok, output, code)];
    }
    match c.pending.remove(id) {
        Some(pending) => {
            c.exec.ended_calls.insert(id.to_string());
            if let Some(s) = str_of(p, "process_id") {
                c.exec.ended_sessions.insert(s.to_string());
            }
            vec![c.tool_turn(&pending, ok, output, code)]
        }
        // Ended already, through the call's own result.
        None => Vec::new(),
    }
}

/// A tool output as rollouts write it: JSON `{output, metadata: {exit_code}}`;
/// `exec_command`'s text (`Chunk ID…`, `Wall time…`, `Process exited with
/// code N`, `Original token count…`, `Output:` then the output; a process
/// still running says `Process running with session ID N` and has no code
/// yet); or the older shell's text with an `Exit code: N` line.
fn tool_output(raw: &str) -> (String, Option<i64>) {
    if let Ok(v) = serde_json::from_str::<Value>(raw)
        && let Some(out) = v.get("output")
    {
        let exit = v
            .get("metadata")
            .and_then(|m| m.get("exit_code"))
            .and_then(Value::as_i64);
        return (text_of(out), exit);
    }
    // The header ends at `Output:`; a code in the output itself is not the process's.
    let header = raw.split("\nOutput:").next().unwrap_or(raw);
    let exit = header
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("Exit code:")
                .or_else(|| l.strip_prefix("Process exited with code"))
        })
        .and_then(|n| n.trim().parse().ok());
    let text = match raw.find("\nOutput:\n") {
        Some(at) if raw.starts_with("Chunk ID") || raw.starts_with("Command:") => &raw[at + 9..],
        _ => raw,
    };
    (text.to_string(), exit)
}

/// Outputs with no exit code that still report a failure (apply_patch).
fn looks_failed(text: &str) -> bool {
    let t = text.trim_start().to_ascii_lowercase();
    t.starts_with("error") || t.starts_with("failed to")
}
#[cfg(test)]
mod fast_path {
    use super::*;

    /// `item.completed` lines as `codex exec --json` writes them, and the
    /// variants a reader meets (an older build's `item_type`, escapes, a
    /// null or odd field, a field of another kind, a bad line).
    fn lines() -> Vec<String> {
        let mut out = Vec::new();
        for (i, (output, code, status)) in [
            (r#""1 failed, 12 passed in 0.31s\n""#, "1", r#""failed""#),
            (r#""13 passed in 0.29s\n""#, "0", r#""completed""#),
            (
                r#""tab\there \"quoted\" \\ caf\u00e9\n""#,
                "0",
                r#""completed""#,
            ),
            ("null", "null", "null"),
            (r#""""#, "127", r#""declined""#),
            (r#""x""#, r#""1""#, r#""failed""#),
            (r#""x""#, "1.5", r#""failed""#),
            ("7", "1", r#""failed""#),
        ]
        .into_iter()
        .enumerate()
        {
            for kind in [
                r#""type":"command_execution""#,
                r#""item_type":"command_execution""#,
            ] {
                out.push(format!(
                    r#"{{"type":"item.completed","item":{{"id":"item_{i}",{kind},"command":"bash -lc 'pytest -q tests/test_{i}.py'","aggregated_output":{output},"exit_code":{code},"status":{status}}}}}"#
                ));
            }
        }
        out.extend(
            [
                r#"{"type":"item.completed","item":{"id":"m1","type":"agent_message","text":"Looking at the failures next."}}"#,
                r#"{"type":"item.completed","item":{"id":"m2","type":"agent_message","text":"line\none"}}"#,
                r#"{"type":"item.completed","item":{"id":"m3","type":"agent_message","text":null}}"#,
                r#"{"type":"item.completed","item":{"id":"m4","type":"agent_message","text":3}}"#,
                r#"{"type":"item.completed","item":{"id":"m5","type":"reasoning","text":"think"}}"#,
                r#"{"type":"item.completed","item":{"id":"m6","type":"web_search","query":"rust serde"}}"#,
                r#"{"type":"item.completed","item":null}"#,
                r#"{"type":"item.completed"}"#,
                r#"{"type":"item.completed","item":{"type":"agent_message","text":"a"},"item":{}}"#,
                r#"{"type":"item.completed","item":{"type":"agent_message","text":"a"}"#,
                r#"{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":2}}"#,
            ]
            .map(String::from),
        );
        out
    }

    /// The fast path gives what the general reader gives, line for line,
    /// for every line it takes (and refuses none that it should read).
    #[test]
    fn it_reads_what_the_general_reader_reads() {
        let (mut fast_side, mut general) = (Common::default(), Common::default());
        let mut taken = 0;
        for l in lines() {
            let ours = line(&mut fast_side, &l);
            let theirs = match crate::parse_object::<Value>(&l) {
                Ok(v) => event(&mut general, &v),
                Err(e) => Err(e),
            };
            taken += usize::from(fast(&mut Common::default(), &l, &mut Vec::new()).is_some());
            assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{l}");
            assert_eq!(fast_side.record_kind, general.record_kind, "{l}");
        }
        // The common lines went the fast way.
        assert_eq!(taken, 13, "lines taken by the fast path");
    }
}
