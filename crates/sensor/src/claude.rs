//! Claude Code: `claude -p --output-format stream-json --verbose` and the
//! session transcripts (`~/.claude/projects/<dir>/<session>.jsonl`), which
//! carry the same `assistant` / `user` messages.
//!
//! - `system` `init`: `session_id`, `model`; `compact_boundary`: a condensation.
//! - `assistant`: `message.content[]` of `text`, `thinking`, `tool_use`
//!   (`id`, `name`, `input`); `message.usage` (input, cache creation, cache
//!   read, output tokens) counted once per `message.id`.
//! - `user`: `message.content[]` of `tool_result` (`tool_use_id`, `content`,
//!   `is_error`) — a completed action; a transcript's `isCompactSummary`
//!   user message is a condensation.
//! - `result`: the run's end (`subtype`, `is_error`, `result`, `total_cost_usd`).
//!
//! Lines are read into borrowing types that name only these fields (the
//! rest is skipped unread), and arguments are hashed as the agent wrote them.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{Common, Pending, TurnEvent};

/// Claude Code compacts its own context (auto-compact, on by default) once
/// it holds its window less this many tokens: 20,000 kept for the reply
/// and a 13,000-token buffer, 83.5% of a 200k window (Claude Code 2.x;
/// the real transcripts under `tests/fixtures/real/claude` compact at fills
/// up to 0.835, which `xo bench detection` prints).
/// `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` can only lower it.
pub const AUTO_COMPACT_RESERVE: u64 = 33_000;

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow)]
    session_id: Option<Cow<'a, str>>,
    #[serde(rename = "sessionId", borrow)]
    session_id_camel: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    message: Option<Message<'a>>,
    #[serde(rename = "isCompactSummary")]
    compact: Option<bool>,
    #[serde(rename = "isMeta")]
    meta: Option<bool>,
    total_cost_usd: Option<f64>,
    is_error: Option<bool>,
    #[serde(borrow)]
    result: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(rename = "isSidechain")]
    sidechain: Option<bool>,
    #[serde(rename = "agentId", borrow)]
    agent_id: Option<Cow<'a, str>>,
    /// A message Claude Code wrote in the model's place (an API error, a
    /// usage limit): `error` names its kind where it is a string.
    #[serde(rename = "isApiErrorMessage")]
    api_error: Option<bool>,
    #[serde(borrow, default, deserialize_with = "raw")]
    error: Option<&'a str>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Blocks<'a>,
    usage: Option<Usage>,
    #[serde(borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

/// A message's content: its blocks, or none when it is a plain string
/// (then whether that string has any text).
#[derive(Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Blocks<'a>(Vec<Block<'a>>, bool);

impl<'de: 'a, 'a> Deserialize<'de> for Blocks<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Blocks<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of content blocks")
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Blocks(Vec::new(), !s.trim().is_empty()))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Blocks(Vec::new(), false))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = s.next_element()? {
                    v.push(b);
                }
                Ok(Blocks(v, false))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A tool result's text: a string, or its text blocks joined.
#[derive(Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct ResultText<'a>(Cow<'a, str>);

impl<'a> ResultText<'a> {
    /// Text blocks' texts, one a line (one block's text borrowed as it is).
    fn joined(mut parts: Vec<Cow<'a, str>>) -> Self {
        ResultText(if parts.len() == 1 {
            parts.pop().unwrap_or_default()
        } else {
            Cow::Owned(parts.join("\n"))
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ResultText<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = ResultText<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of text blocks")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(ResultText(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(ResultText(Cow::Owned(s.to_string())))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(ResultText::default())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<Self::Value, A::Error> {
                let mut parts: Vec<Cow<'a, str>> = Vec::new();
                while let Some(t) = s.next_element::<Text<'a>>()? {
                    parts.extend(t.text);
                }
                Ok(ResultText::joined(parts))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Usage {
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "raw")]
    input: Option<&'a str>,
    #[serde(borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: ResultText<'a>,
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct Command<'a> {
    #[serde(borrow)]
    command: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Text<'a> {
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
}

/// A member's raw text, as serde's `RawValue` holds it (`None` for `null`).
fn raw<'de: 'a, 'a, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'a str>, D::Error> {
    Ok(Option::<&'de RawValue>::deserialize(d)?.map(RawValue::get))
}

/// A line read by [`crate::scan`]: the same [`Line`] serde reads, its
/// content blocks read too, without building the rest; `None` for any
/// line it cannot take plainly (then serde reads it, and says what is
/// wrong with it). Integers and flags are read from their checked text
/// ([`crate::scan::uint`], [`crate::scan::flag`]), the cost by serde from its own.
fn scanned(text: &str) -> Option<Line<'_>> {
    use crate::scan::{Found, Want, flag, own, present, read, string, uint};
    const USAGE: Want<'static> = Want::take(&[
        ("input_tokens", 21),
        ("cache_creation_input_tokens", 22),
        ("cache_read_input_tokens", 23),
        ("output_tokens", 24),
    ]);
    const MESSAGE: Want<'static> = Want {
        take: &[
            ("id", 16),
            ("model", 17),
            ("content", 18),
            ("usage", 19),
            ("stop_reason", 20),
        ],
        enter: &[("usage", USAGE)],
        first: None,
    };
    const WANT: Want<'static> = Want {
        take: &[
            ("type", 0),
            ("subtype", 1),
            ("session_id", 2),
            ("sessionId", 3),
            ("model", 4),
            ("isCompactSummary", 5),
            ("isMeta", 6),
            ("total_cost_usd", 7),
            ("is_error", 8),
            ("result", 9),
            ("timestamp", 10),
            ("isSidechain", 11),
            ("agentId", 12),
            ("isApiErrorMessage", 13),
            ("error", 14),
            ("message", 15),
        ],
        enter: &[("message", MESSAGE)],
        first: None,
    };
    let f: Found<'_, 25> = read(text, &WANT)?;
    let s = |at: usize| string(f[at]).ok();
    let message = match present(f[15]) {
        None => None,
        Some(_) => Some(Message {
            id: s(16)?,
            model: s(17)?,
            content: blocks(f[18])?,
            usage: match present(f[19]) {
                None => None,
                Some(_) => Some(Usage {
                    input_tokens: uint(f[21])?,
                    cache_creation_input_tokens: uint(f[22])?,
                    cache_read_input_tokens: uint(f[23])?,
                    output_tokens: uint(f[24])?,
                }),
            },
            stop_reason: s(20)?,
        }),
    };
    Some(Line {
        kind: s(0)?,
        subtype: s(1)?,
        session_id: s(2)?,
        session_id_camel: s(3)?,
        model: s(4)?,
        message,
        compact: flag(f[5])?,
        meta: flag(f[6])?,
        total_cost_usd: own(f[7])?,
        is_error: flag(f[8])?,
        result: s(9)?,
        timestamp: s(10)?,
        sidechain: flag(f[11])?,
        agent_id: s(12)?,
        api_error: flag(f[13])?,
        error: present(f[14]),
    })
}

/// A message's content as [`Blocks`] reads it: a string, `null`, or an
/// array of blocks (each read by the scanner).
fn blocks(raw: Option<&str>) -> Option<Blocks<'_>> {
    use crate::scan::{each, flag, present, string};
    const BLOCK: crate::scan::Want<'static> = crate::scan::Want::take(&[
        ("type", 0),
        ("text", 1),
        ("id", 2),
        ("name", 3),
        ("input", 4),
        ("tool_use_id", 5),
        ("content", 6),
        ("is_error", 7),
    ]);
    match raw.map(str::as_bytes).and_then(<[u8]>::first) {
        None | Some(b'n') => Some(Blocks::default()),
        Some(b'"') => Some(Blocks(Vec::new(), !string(raw).ok()??.trim().is_empty())),
        Some(b'[') => {
            let found = each::<8>(raw?, &BLOCK)?;
            let mut out = Vec::with_capacity(found.len());
            for f in found {
                let s = |at: usize| string(f[at]).ok();
                out.push(Block {
                    kind: s(0)?,
                    text: s(1)?,
                    id: s(2)?,
                    name: s(3)?,
                    input: present(f[4]),
                    tool_use_id: s(5)?,
                    content: result_text(f[6])?,
                    is_error: flag(f[7])?,
                });
            }
            Some(Blocks(out, false))
        }
        _ => None,
    }
}

/// A tool result's content as [`ResultText`] reads it: a string, `null`,
/// or an array of text blocks joined.
fn result_text(raw: Option<&str>) -> Option<ResultText<'_>> {
    use crate::scan::{Want, each, string};
    match raw.map(str::as_bytes).and_then(<[u8]>::first) {
        None | Some(b'n') => Some(ResultText::default()),
        Some(b'"') => Some(ResultText(string(raw).ok()??)),
        Some(b'[') => {
            let mut parts = Vec::new();
            for [text] in each::<1>(raw?, &Want::take(&[("text", 0)]))? {
                parts.extend(string(text).ok()?);
            }
            Some(ResultText::joined(parts))
        }
        _ => None,
    }
}

/// `Ok(None)` for an event type this sensor does not know.
pub(crate) fn event(
    c: &mut Common,
    last_message: &mut (String, u64, u64),
    text: &str,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    let v = match scanned(text) {
        Some(v) => v,
        None => crate::parse_object::<Line<'_>>(text)?,
    };
    let Some(kind) = v.kind.as_deref() else {
        return Err(crate::SensorError::NoType);
    };
    match (kind, v.subtype.as_deref()) {
        ("system", sub) => c.kind(&["system", sub.unwrap_or("-")]),
        _ => c.kind(&[kind]),
    }
    if let Some(s) = v.session_id.as_deref().or(v.session_id_camel.as_deref())
        && c.session.is_none()
    {
        // A subagent's transcript carries its parent's session id: it is
        // a unit of its own, linked to the parent.
        match (v.sidechain, v.agent_id.as_deref()) {
            (Some(true), Some(agent)) => {
                c.session = Some(format!("{s}-agent-{agent}"));
                c.parent = Some(s.to_string());
            }
            _ => c.session = Some(s.to_string()),
        }
    }
    if let Some(at) = v.timestamp.as_deref().and_then(crate::parse_time_ms) {
        c.at_ms = Some(at);
    }
    let mut out = Vec::new();
    // A message is written a content block a line: a text block held back
    // (below) is its own turn when anything but its message's next block
    // comes — before that line's usage is counted, which is the next turn's.
    let next_block = kind == "assistant"
        && v.message
            .as_ref()
            .and_then(|m| m.id.as_deref())
            .is_some_and(|id| c.holding(id));
    if !next_block {
        out.extend(c.flush_held());
    }
    match kind {
        "system" => match v.subtype.as_deref() {
            Some("init") => {
                if let Some(m) = v.model {
                    c.model = Some(m.into_owned());
                }
            }
            Some("compact_boundary") => c.condensed = true,
            // Written when the agent's turn is over: it waits for its user.
            Some("turn_duration") => c.resting = true,
            // What hooks said, a slash command the person ran, a notice,
            // an API retry: no step of the agent.
            Some("stop_hook_summary" | "local_command" | "informational" | "api_error") => c.skip(),
            _ => c.unknown(),
        },
        // Not the model's turn: Claude Code's own notice in its place
        // (a transcript's `isApiErrorMessage`; the stream's assistant
        // message with its `error` kind). A usage limit stops the session
        // until its reset; any other API error is the turn that failed.
        "assistant" if v.api_error == Some(true) || v.error.is_some_and(|e| e.starts_with('"')) => {
            let msg = v.message.ok_or("assistant event without \"message\"")?;
            let text: Vec<&str> = msg
                .content
                .0
                .iter()
                .filter(|b| b.kind.as_deref() == Some("text"))
                .filter_map(|b| b.text.as_deref())
                .collect();
            let text = text.join("\n");
            let error = v.error.and_then(|e| serde_json::from_str::<&str>(e).ok());
            if crate::limit::is_usage_limit(error, &text) {
                let local = jiff::tz::TimeZone::system();
                c.limited_until = c
                    .at_ms
                    .and_then(|at| crate::limit::reset_ms(&text, at, &local));
                c.resting = true;
            } else {
                out.extend(c.hold("", &text));
                out.extend(c.flush_held());
            }
        }
        "assistant" => {
            let msg = v.message.ok_or("assistant event without \"message\"")?;
            // The model ran again: a usage limit it was under is over.
            c.limited_until = None;
            if let Some(m) = msg.model.as_deref()
                && c.model.as_deref() != Some(m)
            {
                c.model = Some(m.to_string());
            }
            let id = msg.id.as_deref().unwrap_or_default();
            // A message comes once a content block, one after the other,
            // each with the usage so far: the last one's counts. What an
            // earlier copy counted is taken back.
            if let Some(u) = &msg.usage {
                let context = u.input_tokens.unwrap_or(0)
                    + u.cache_creation_input_tokens.unwrap_or(0)
                    + u.cache_read_input_tokens.unwrap_or(0);
                let out = u.output_tokens.unwrap_or(0);
                let (seen_in, seen_out) = if !id.is_empty() && id == last_message.0.as_str() {
                    (last_message.1, last_message.2)
                } else {
                    (0, 0)
                };
                last_message.0.clear();
                last_message.0.push_str(id);
                last_message.1 = seen_in.max(context);
                last_message.2 = seen_out.max(out);
                c.tokens_in += context.saturating_sub(seen_in);
                c.tokens_out += out.saturating_sub(seen_out);
                c.context_tokens = Some(context);
            }
            let blocks = msg.content.0;
            let mut tools = 0;
            let mut text: Vec<&str> = Vec::new();
            let mut thinking = false;
            for b in &blocks {
                match b.kind.as_deref() {
                    Some("tool_use") => {
                        let call = b.id.as_deref().ok_or("tool_use without \"id\"")?;
                        let input = b.input.unwrap_or("null");
                        let command = input
                            .contains("\"command\"")
                            .then(|| serde_json::from_str::<Command<'_>>(input).ok())
                            .flatten()
                            .and_then(|c| c.command.map(Cow::into_owned));
                        // A poll of a background task (its output so far,
                        // or its end).
                        if matches!(b.name.as_deref(), Some("TaskOutput" | "BashOutput"))
                            && let Ok(p) = serde_json::from_str::<Poll<'_>>(input)
                            && let Some(task) = p.task_id.or(p.bash_id)
                        {
                            c.exec.polls.insert(call.to_string(), task.into_owned());
                        }
                        c.pending.insert(
                            call.to_string(),
                            Pending {
                                tool: b.name.as_deref().unwrap_or("tool").into(),
                                args_hash: crate::hex_hash(input).as_str().into(),
                                command,
                            },
                        );
                        tools += 1;
                    }
                    Some("text") => text.extend(b.text.as_deref()),
                    Some("thinking" | "redacted_thinking") => thinking = true,
                    _ => {}
                }
            }
            if tools > 0 {
                // The text before a call is the call's preamble, not a turn.
                out.extend(c.called(id));
            } else if !text.is_empty() || !thinking {
                out.extend(c.hold(id, &text.join("\n")));
                // A message that says it ended (or has no id to continue
                // under) is whole.
                if msg.stop_reason.is_some() || id.is_empty() {
                    out.extend(c.flush_held());
                }
            }
            // The model ended its turn with nothing left to run.
            if msg.stop_reason.as_deref() == Some("end_turn") && c.pending.is_empty() {
                c.resting = true;
            }
        }
        "user" => {
            if v.compact == Some(true) {
                c.condensed = true;
            }
            let content = v.message.map(|m| m.content).unwrap_or_default();
            // A person's prompt (or an interruption, a notification) is a
            // new instruction: the agent's turns without progress start
            // over. Tool results, compact summaries and meta lines are not.
            if v.compact != Some(true)
                && v.meta != Some(true)
                && (content.1 || content.0.iter().any(|b| b.kind.as_deref() == Some("text")))
            {
                c.instructed = true;
            }
            let blocks = content.0;
            for b in blocks
                .iter()
                .filter(|b| b.kind.as_deref() == Some("tool_result"))
            {
                let call = b
                    .tool_use_id
                    .as_deref()
                    .ok_or("tool_result without \"tool_use_id\"")?;
                let text = &b.content.0;
                // A parallel call cancelled because a sibling failed never ran.
                if b.is_error == Some(true) && text.contains("Sibling tool call errored") {
                    c.pending.remove(call);
                    c.stats.cancelled += 1;
                    continue;
                }
                if let Some(turns) = background(c, call, text) {
                    out.extend(turns);
                    continue;
                }
                let exit = exit_code(text);
                if let Some(t) = c.complete(call, b.is_error != Some(true), text, exit) {
                    out.push(t);
                }
            }
        }
        "result" => {
            if let Some(cost) = v.total_cost_usd {
                c.cumulative(Some(cost), None, None);
            }
            let subtype = v.subtype.as_deref().unwrap_or("done");
            let text = v.result.as_deref().unwrap_or_default();
            if !text.is_empty() {
                c.final_text = Some(text.to_string());
            }
            let failed = v.is_error == Some(true) || subtype.starts_with("error");
            let summary = format!("{subtype}: {}", text.chars().take(200).collect::<String>());
            out.push(c.end(
                summary,
                failed.then_some(if text.is_empty() { subtype } else { text }),
            ));
        }
        // Transcript lines that carry no agent step: a session's title or
        // name, the files' backups, prompts queued while it worked, the
        // live progress of hooks, commands and subagents (their results
        // come as tool results), what was attached to a prompt, the
        // session's mode and permission mode, its last prompt and cost.
        "summary"
        | "file-history-snapshot"
        | "queue-operation"
        | "progress"
        | "custom-title"
        | "agent-name"
        | "last-prompt"
        | "attachment"
        | "mode"
        | "permission-mode"
        | "cost-state" => c.skip(),
        // Not known: said, and the turn it ended kept.
        _ => c.unknown(),
    }
    Ok(Some(out))
}

/// The input of `TaskOutput` (`task_id`) or the older `BashOutput`
/// (`bash_id`).
#[derive(Deserialize)]
struct Poll<'a> {
    #[serde(borrow)]
    task_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    bash_id: Option<Cow<'a, str>>,
}

/// A result of Claude Code's background tasks, when it is one: a command
/// sent to the background (`Command running in background with ID: X`,
/// by `run_in_background` or past its timeout) is pending until a
/// `TaskOutput` of it says `<status>completed</status>` (or failed,
/// killed) with its `<exit_code>`: then it is the command's action; a
/// `TaskOutput` that finds it still running is a wait. `None` for any other
/// result.
fn background(c: &mut Common, call: &str, text: &str) -> Option<Vec<TurnEvent>> {
    const STARTED: &str = "Command running in background with ID: ";
    if let Some(task) = c.exec.polls.remove(call) {
        let tag = |name: &str| {
            let open = format!("<{name}>");
            let at = text.find(&open)? + open.len();
            let len = text[at..].find(&format!("</{name}>"))?;
            Some(text[at..at + len].trim().to_string())
        };
        let status = tag("status");
        if status.as_deref() == Some("running") {
            c.pending.remove(call);
            return Some(vec![c.wait()]);
        }
        let r = c.exec.running.remove(&task)?;
        c.pending.remove(call);
        let exit = tag("exit_code").and_then(|e| e.parse().ok());
        // `<output>` (TaskOutput); `<stdout>` and `<stderr>` (BashOutput).
        let output = tag("output")
            .or_else(|| {
                let both = [tag("stdout"), tag("stderr")].into_iter().flatten();
                Some(both.collect::<Vec<_>>().join("\n"))
            })
            .unwrap_or_default();
        let ok = matches!(status.as_deref(), Some("completed")) && exit.is_none_or(|e| e == 0);
        return Some(vec![c.tool_turn(&r.pending, ok, &output, exit)]);
    }
    let task = text.trim_start().strip_prefix(STARTED)?;
    let task = task
        .split(|ch: char| ch == '.' || ch.is_whitespace())
        .next()?;
    let pending = c.pending.remove(call)?;
    c.exec.running.insert(
        task.to_string(),
        crate::Running {
            call: call.to_string(),
            pending,
            output: String::new(),
        },
    );
    // Its step is its end.
    Some(Vec::new())
}

/// `Exit code N` as Claude Code's Bash tool writes it on failure.
fn exit_code(text: &str) -> Option<i64> {
    let at = text.find("Exit code ")?;
    text[at + 10..]
        .split(|ch: char| !ch.is_ascii_digit() && ch != '-')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod scanned_as_serde_reads {
    use super::*;

    /// Real transcripts (`tests/fixtures/real/claude`) and the crate's
    /// stream and transcript fixtures, built in: the sensor does no I/O,
    /// its tests neither.
    const REAL: [&str; 7] = [
        include_str!("../../../tests/fixtures/real/claude/short.jsonl"),
        include_str!("../../../tests/fixtures/real/claude/tool_heavy.jsonl"),
        include_str!("../../../tests/fixtures/real/claude/subagent.jsonl"),
        include_str!(
            "../../../tests/fixtures/real/claude/6c2214d7-b87e-4432-8e41-22ba294ea584-agent-afc096d.jsonl"
        ),
        include_str!(
            "../../../tests/fixtures/real/claude/4d5611e5-241a-462a-8d15-5122611a9569-agent-acompact-e1f845.jsonl"
        ),
        include_str!("../tests/fixtures/claude_stream.jsonl"),
        include_str!("../tests/fixtures/claude_transcript.jsonl"),
    ];

    /// What the scanner takes of a line is the [`Line`] serde reads: on
    /// every line of the real recordings, on the bench's lines, on the odd
    /// shapes of content, numbers and flags, and on every changed byte of
    /// a tool call and of a tool result.
    #[test]
    fn the_scanner_reads_what_serde_reads() {
        let real: Vec<&str> = REAL.iter().flat_map(|t| t.lines()).collect();
        assert!(real.len() > 300, "{} real lines", real.len());
        let call = r#"{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Let me build."},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"cargo build -p crate1","description":"build"}}],"stop_reason":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":45000,"output_tokens":90}},"session_id":"5f0c2a7e"}"#;
        let result = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"error[E0425]: cannot find value `x`\n --> src/lib.rs:10:5","is_error":true}]},"session_id":"5f0c2a7e","isSidechain":false,"timestamp":"2026-02-10T21:11:52.481Z"}"#;
        let mut lines: Vec<String> = real.iter().map(|l| l.to_string()).collect();
        lines.extend(
            [
                call,
                result,
                r#"{"type":"user","message":{"role":"user","content":"run the tests\u00e9"},"isMeta":null}"#,
                r#"{"type":"user","message":{"role":"user","content":"  "}}"#,
                r#"{"type":"user","message":{"role":"user","content":null}}"#,
                r#"{"type":"user","message":null}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a"},{"type":"text","text":"b\tc"},{"type":"image"}]}]}}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"one"}],"is_error":null}]}}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[]}]}}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":7}]}}"#,
                r#"{"type":"user","message":{"content":[["text"]]}}"#,
                r#"{"type":"assistant","message":{"id":"m","content":[],"usage":{"input_tokens":1.0,"output_tokens":-0}}}"#,
                r#"{"type":"assistant","message":{"id":"m","usage":{"input_tokens":18446744073709551616}}}"#,
                r#"{"type":"assistant","message":{"id":"m","id":"n","content":[]}}"#,
                r#"{"type":"assistant","message":[1],"error":"rate_limit","isApiErrorMessage":true}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"Write","input":null}]},"error":{"x":1}}"#,
                r#"{"type":"result","subtype":"success","total_cost_usd":0.0123,"is_error":false,"result":"done \"quoted\""}"#,
                r#"{"type":"system","subtype":"init","model":"claude-opus-4-1","session_id":"s","tools":["Bash"]}"#,
                r#"{"type":"system","subtype":"init","model":7}"#,
                r#"{"type":"summary","isSidechain":"no"}"#,
            ]
            .map(String::from),
        );
        lines.extend(crate::scan::every_changed_byte(call, b"\"{}[]n1.,:\\"));
        lines.extend(crate::scan::every_changed_byte(result, b"\"{}[]nt,:\\"));
        let taken =
            crate::scan::taken_as_serde_reads(&lines, scanned, crate::parse_object::<Line<'_>>);
        // Every real line goes the fast way (none is written with escaped
        // keys or in a shape serde alone reads), and most variants do.
        let real_taken = real.iter().filter(|l| scanned(l).is_some()).count();
        assert_eq!(real_taken, real.len());
        assert!(taken > lines.len() / 2, "{taken} of {}", lines.len());
    }
}
