//! OpenHands: the V0 event stream (events with `action` or `observation`)
//! and the V1 SDK events (events with `kind`), told apart per line.
//!
//! V0:
//! - an action (`id`, `source`, `action`, `args`): `run`, `run_ipython`,
//!   `read`, `write`, `edit`, `browse`, `call_tool_mcp`… wait for their
//!   observation; `message` from the agent is a message; `finish` ends the
//!   run; `condensation` is a condensation.
//! - an observation (`observation`, `cause` = the action's id, `content`,
//!   `extras.metadata.exit_code` for `run`): `error` fails the action.
//! - `llm_metrics` on events: `accumulated_cost`,
//!   `accumulated_token_usage.prompt_tokens` / `completion_tokens` /
//!   `context_window` (cumulative; deltas are counted).
//!
//! V1:
//! - `ActionEvent` (`tool_call_id`, `tool_name`, `action`) and
//!   `ObservationEvent` (`tool_call_id`, `observation` with `exit_code`,
//!   `is_error`, `content`) paired by `tool_call_id`; `AgentErrorEvent`
//!   (`tool_call_id`, `error`) fails the call; `UserRejectObservation`
//!   rejects it; `MessageEvent` from the agent is a message; `Condensation`
//!   is a condensation.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::{Common, Pending, TurnEvent, str_of, text_of, u64_of, value_hash};

/// Argument keys that change between equal calls (thoughts, approvals).
const VOLATILE: [&str; 6] = [
    "thought",
    "confirmation_state",
    "security_risk",
    "is_confirmed",
    "hidden",
    "kind",
];

/// Agent states in which the agent has stopped working: it waits for its
/// user, has finished, or was stopped.
const RESTING: &[&str] = &[
    "awaiting_user_input",
    "awaiting_user_confirmation",
    "finished",
    "stopped",
    "error",
    "rejected",
    "paused",
];

fn stable_args(args: &Value) -> Value {
    match args {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !VOLATILE.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn id_of(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A V0 event as serde reads it; [`V0`] is what the sensor uses.
#[derive(serde::Deserialize)]
struct V0Serde<'a> {
    #[serde(borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    source: Option<Cow<'a, str>>,
    #[serde(borrow)]
    action: Option<Cow<'a, str>>,
    #[serde(borrow)]
    observation: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cause: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow)]
    args: Option<Args<'a>>,
    extras: Option<Extras>,
    llm_metrics: Option<Metrics>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
}

/// A V0 event as the sensor uses it, however it was read: raw values
/// (`id`, `cause`, the arguments) are their JSON text.
#[derive(Debug, PartialEq)]
struct V0<'a> {
    kind: Option<Cow<'a, str>>,
    id: Option<&'a str>,
    source: Option<Cow<'a, str>>,
    action: Option<Cow<'a, str>>,
    observation: Option<Cow<'a, str>>,
    cause: Option<&'a str>,
    content: Option<Cow<'a, str>>,
    message: Option<Cow<'a, str>>,
    args: Option<Args<'a>>,
    extras: Option<Extras>,
    llm_metrics: Option<Metrics>,
    timestamp: Option<Cow<'a, str>>,
}

impl<'a> From<V0Serde<'a>> for V0<'a> {
    fn from(v: V0Serde<'a>) -> Self {
        V0 {
            kind: v.kind,
            id: v.id.map(RawValue::get),
            source: v.source,
            action: v.action,
            observation: v.observation,
            cause: v.cause.map(RawValue::get),
            content: v.content,
            message: v.message,
            args: v.args,
            extras: v.extras,
            llm_metrics: v.llm_metrics,
            timestamp: v.timestamp,
        }
    }
}

/// A V0 event read by [`crate::scan`] (one pass, nothing built but the
/// arguments' list); `None` for any line it cannot take plainly, which
/// serde reads. Numbers are read by serde from their own text, so that
/// they are exactly serde's.
fn scanned<'a>(text: &'a str) -> Option<V0<'a>> {
    use crate::scan::{Found, Want, int, own, present, read, string, uint};
    const META: Want<'static> = Want::take(&[("exit_code", 14)]);
    const EXTRAS: Want<'static> = Want {
        take: &[("exit_code", 12), ("agent_state", 13), ("metadata", 20)],
        enter: &[("metadata", META)],
        first: None,
    };
    const USAGE: Want<'static> = Want::take(&[
        ("prompt_tokens", 17),
        ("completion_tokens", 18),
        ("context_window", 19),
    ]);
    const METRICS: Want<'static> = Want {
        take: &[
            ("accumulated_cost", 15),
            ("token_usages", 16),
            ("accumulated_token_usage", 21),
        ],
        enter: &[("accumulated_token_usage", USAGE)],
        first: None,
    };
    const WANT: Want<'static> = Want {
        take: &[
            ("kind", 0),
            ("id", 1),
            ("source", 2),
            ("action", 3),
            ("observation", 4),
            ("cause", 5),
            ("content", 6),
            ("message", 7),
            ("args", 8),
            ("timestamp", 9),
            ("extras", 10),
            ("llm_metrics", 11),
        ],
        enter: &[("extras", EXTRAS), ("llm_metrics", METRICS)],
        first: None,
    };
    let f: Found<'_, 22> = read(text, &WANT)?;
    let usage = |at: usize| -> Option<Usage> {
        Some(Usage {
            prompt_tokens: uint(f[at])?,
            completion_tokens: uint(f[at + 1])?,
            context_window: uint(f[at + 2])?,
        })
    };
    let extras = match present(f[10]) {
        None => None,
        Some(_) => Some(Extras {
            metadata: match present(f[20]) {
                None => None,
                Some(_) => Some(Meta {
                    exit_code: int(f[14]).ok()?,
                }),
            },
            exit_code: int(f[12]).ok()?,
            agent_state: string(f[13]).ok()?.map(Cow::into_owned),
        }),
    };
    let llm_metrics = match present(f[11]) {
        None => None,
        Some(_) => Some(Metrics {
            accumulated_cost: own(f[15])?,
            accumulated_token_usage: match present(f[21]) {
                None => None,
                Some(_) => Some(usage(17)?),
            },
            token_usages: own(f[16])?,
        }),
    };
    let args = match present(f[8]) {
        None => None,
        Some(a) => Some(Args::of(crate::scan::entries(a)?)),
    };
    Some(V0 {
        kind: string(f[0]).ok()?,
        id: present(f[1]),
        source: string(f[2]).ok()?,
        action: string(f[3]).ok()?,
        observation: string(f[4]).ok()?,
        cause: present(f[5]),
        content: string(f[6]).ok()?,
        message: string(f[7]).ok()?,
        args,
        extras,
        llm_metrics,
        timestamp: string(f[9]).ok()?,
    })
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Extras {
    metadata: Option<Meta>,
    exit_code: Option<i64>,
    agent_state: Option<String>,
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Meta {
    exit_code: Option<i64>,
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Metrics {
    accumulated_cost: Option<f64>,
    accumulated_token_usage: Option<Usage>,
    token_usages: Option<Vec<Usage>>,
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    context_window: Option<u64>,
}

/// An action's arguments, as written, sorted by key.
#[derive(Debug, PartialEq)]
struct Args<'a>(Vec<(Cow<'a, str>, &'a str)>);

impl<'a> Args<'a> {
    /// The entries as written, sorted by key (stably: a key written twice
    /// keeps its order).
    fn of(mut v: Vec<(Cow<'a, str>, &'a str)>) -> Self {
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Args(v)
    }
    fn get(&self, k: &str) -> Option<&'a str> {
        self.0.iter().find(|(key, _)| key == k).map(|(_, v)| *v)
    }
    fn iter(&self) -> impl Iterator<Item = (&Cow<'a, str>, &'a str)> {
        self.0.iter().map(|(k, v)| (k, *v))
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Args<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Args<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of arguments")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let mut v: Vec<(Cow<'a, str>, &'a str)> = Vec::with_capacity(8);
                while let Some((k, raw)) = m.next_entry::<Cow<'a, str>, &'a RawValue>()? {
                    v.push((k, raw.get()));
                }
                Ok(Args::of(v))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// An id as written: a number, or a string's text.
fn raw_id(r: &str) -> String {
    r.trim_matches('"').to_string()
}

/// Reads one line: V0 events typed (arguments hashed as written, without
/// the keys that change between equal calls), V1 events through [`event`].
pub(crate) fn line(
    c: &mut Common,
    text: &str,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    // V1 events carry a `kind` (and an `action` object): the Value path.
    // Once a stream showed V1, its lines go there without a typed try.
    if c.openhands_v1 {
        return event(c, &crate::parse_object(text)?);
    }
    let read = match scanned(text) {
        Some(v) => Ok(v),
        None => crate::parse_object::<V0Serde<'_>>(text).map(V0::from),
    };
    let v: V0<'_> = match read {
        Ok(v) if v.kind.is_none() => v,
        Ok(_) => {
            c.openhands_v1 = true;
            return event(c, &crate::parse_object(text)?);
        }
        Err(crate::SensorError::Shape(_)) => {
            let v: Value = crate::parse_object(text)?;
            c.openhands_v1 = v.get("kind").is_some_and(Value::is_string);
            return event(c, &v);
        }
        Err(e) => return Err(e),
    };
    if let Some(at) = v.timestamp.as_deref().and_then(crate::parse_time_ms) {
        c.at_ms = Some(at);
    }
    if let Some(m) = &v.llm_metrics {
        let usage = m.accumulated_token_usage.as_ref();
        c.cumulative(
            m.accumulated_cost,
            usage.and_then(|u| u.prompt_tokens),
            usage.and_then(|u| u.completion_tokens),
        );
        if let Some(w) = usage.and_then(|u| u.context_window).filter(|w| *w > 0) {
            c.context_limit = Some(w);
        }
        if let Some(p) = m
            .token_usages
            .as_ref()
            .and_then(|t| t.last())
            .and_then(|u| u.prompt_tokens)
        {
            c.context_tokens = Some(p);
        }
    }
    let mut out = Vec::new();
    if let Some(action) = v.action.as_deref() {
        c.kind(&["action", action]);
        let agent = v.source.as_deref() != Some("user");
        let arg = |k: &str| v.args.as_ref().and_then(|a| a.get(k)).map(crate::raw_text);
        match action {
            "message" if agent => {
                let text = arg("content")
                    .map(Cow::into_owned)
                    .or(v.message.map(Cow::into_owned))
                    .unwrap_or_default();
                out.push(c.message(&text));
            }
            // Its user's message: a new instruction.
            "message" => c.instructed = true,
            "system" | "think" | "recall" | "change_agent_state" | "null" => c.skip(),
            "condensation" => c.condensed = true,
            "finish" => {
                let text = arg("final_thought")
                    .or_else(|| arg("message"))
                    .map(Cow::into_owned)
                    .unwrap_or_else(|| "finished".into());
                c.final_text = Some(text.clone());
                out.push(c.end(
                    format!("finish: {}", text.chars().take(200).collect::<String>()),
                    None,
                ));
            }
            tool => {
                // Older outputs flatten their history without ids: the
                // call is numbered, and the next observation is its.
                let id = match v.id.map(raw_id) {
                    Some(id) => id,
                    None => c.number_call(),
                };
                // The arguments that make the call: sorted, volatile keys left out.
                let mut stable = String::new();
                if let Some(a) = &v.args {
                    let kept = || a.iter().filter(|(k, _)| !VOLATILE.contains(&k.as_ref()));
                    stable.reserve(kept().map(|(k, val)| k.len() + val.len() + 2).sum());
                    for (k, val) in kept() {
                        stable.push_str(k);
                        stable.push('=');
                        stable.push_str(val);
                        stable.push(';');
                    }
                }
                c.pending.insert(
                    id,
                    Pending {
                        tool: tool.into(),
                        args_hash: crate::hex_hash(&stable).as_str().into(),
                        command: arg("command").map(Cow::into_owned),
                    },
                );
            }
        }
        return Ok(Some(out));
    }
    if let Some(obs) = v.observation.as_deref() {
        c.kind(&["observation", obs]);
        if obs == "agent_state_changed" {
            if let Some(state) = v.extras.as_ref().and_then(|e| e.agent_state.as_deref()) {
                c.resting |= RESTING.contains(&state);
            }
            return Ok(Some(out));
        }
        // The think tool's "Your thought has been logged." answers a
        // thought, no step.
        if matches!(obs, "null" | "recall" | "agent_condensation" | "think") {
            c.skip();
            return Ok(Some(out));
        }
        let Some(cause) = v.cause.map(raw_id).or_else(|| c.unnumbered.pop_front()) else {
            let content = v.content.as_deref().unwrap_or_default();
            out.extend(uncaused(c, obs, content));
            return Ok(Some(out));
        };
        let content = v.content.as_deref().unwrap_or_default();
        let exit = v
            .extras
            .as_ref()
            .and_then(|e| {
                e.metadata
                    .as_ref()
                    .and_then(|m| m.exit_code)
                    .or(e.exit_code)
            })
            .filter(|e| *e >= 0);
        let ok = obs != "error" && !content.trim_start().starts_with("ERROR:");
        out.extend(c.complete(&cause, ok, content, exit));
        return Ok(Some(out));
    }
    Ok(None)
}

pub(crate) fn event(
    c: &mut Common,
    v: &Value,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    if let Some(at) = str_of(v, "timestamp").and_then(crate::parse_time_ms) {
        c.at_ms = Some(at);
    }
    if let Some(m) = v.get("llm_metrics").filter(|m| !m.is_null()) {
        let usage = m.get("accumulated_token_usage");
        c.cumulative(
            m.get("accumulated_cost").and_then(Value::as_f64),
            usage.map(|u| u64_of(u, "prompt_tokens")),
            usage.map(|u| u64_of(u, "completion_tokens")),
        );
        if let Some(w) = usage
            .and_then(|u| u.get("context_window"))
            .and_then(Value::as_u64)
            .filter(|w| *w > 0)
        {
            c.context_limit = Some(w);
        }
        if let Some(last) = m
            .get("token_usages")
            .and_then(Value::as_array)
            .and_then(|t| t.last())
        {
            c.context_tokens = Some(u64_of(last, "prompt_tokens"));
        }
    }
    if let Some(kind) = str_of(v, "kind") {
        c.kind(&[kind]);
        return v1(c, kind, v);
    }
    let mut out = Vec::new();
    if let Some(action) = str_of(v, "action") {
        c.kind(&["action", action]);
        let agent = str_of(v, "source") != Some("user");
        let args = v.get("args").cloned().unwrap_or(Value::Null);
        match action {
            "message" if agent => {
                let text = str_of(&args, "content")
                    .or_else(|| str_of(v, "message"))
                    .unwrap_or_default();
                out.push(c.message(text));
            }
            "message" => c.instructed = true,
            "system" | "think" | "recall" | "change_agent_state" | "null" => c.skip(),
            "condensation" => c.condensed = true,
            "finish" => {
                let text = str_of(&args, "final_thought")
                    .or_else(|| str_of(&args, "message"))
                    .unwrap_or("finished");
                out.push(c.end(
                    format!("finish: {}", text.chars().take(200).collect::<String>()),
                    None,
                ));
            }
            tool => {
                let id = match id_of(v, "id") {
                    Some(id) => id,
                    None => c.number_call(),
                };
                c.pending.insert(
                    id,
                    Pending {
                        tool: tool.into(),
                        args_hash: value_hash(&stable_args(&args)).into(),
                        command: str_of(&args, "command").map(String::from),
                    },
                );
            }
        }
        return Ok(Some(out));
    }
    if let Some(obs) = str_of(v, "observation") {
        c.kind(&["observation", obs]);
        if obs == "agent_state_changed" {
            if let Some(state) = v.get("extras").and_then(|e| str_of(e, "agent_state")) {
                c.resting |= RESTING.contains(&state);
            }
            return Ok(Some(out));
        }
        // The think tool's "Your thought has been logged." answers a
        // thought, no step.
        if matches!(obs, "null" | "recall" | "agent_condensation" | "think") {
            c.skip();
            return Ok(Some(out));
        }
        // Observations no action caused (and no unnumbered call waits).
        let Some(cause) = id_of(v, "cause").or_else(|| c.unnumbered.pop_front()) else {
            out.extend(uncaused(c, obs, str_of(v, "content").unwrap_or_default()));
            return Ok(Some(out));
        };
        let content = str_of(v, "content").unwrap_or_default();
        let extras = v.get("extras").unwrap_or(&Value::Null);
        let exit = extras
            .get("metadata")
            .and_then(|m| m.get("exit_code"))
            .or_else(|| extras.get("exit_code"))
            .and_then(Value::as_i64)
            .filter(|e| *e >= 0);
        let ok = obs != "error" && !content.trim_start().starts_with("ERROR:");
        out.extend(c.complete(&cause, ok, content, exit));
        return Ok(Some(out));
    }
    Ok(None)
}

/// An observation no action caused: an `error` is the harness refusing a
/// call it could not run (a parameter out of its schema: no action was
/// recorded), a failed reply; anything else is a result without its call.
fn uncaused(c: &mut Common, obs: &str, content: &str) -> Option<TurnEvent> {
    if obs == "error" {
        return Some(c.refused(crate::hex_hash(content).as_str(), content));
    }
    c.stats.orphan_results += 1;
    None
}

/// V1 `ConversationStateUpdateEvent`: `key` `stats` carries the usage
/// totals of every LLM of the conversation (`usage_to_metrics.<id>`:
/// `accumulated_cost`, `accumulated_token_usage.prompt_tokens` /
/// `completion_tokens` / `context_window` / `per_turn_token`); `key`
/// `execution_status` says when the agent stopped working (finished,
/// paused, waiting for confirmation, in error, stuck).
fn state_update(c: &mut Common, v: &Value) {
    let value = v.get("value").unwrap_or(&Value::Null);
    match str_of(v, "key") {
        Some("stats") => {
            let Some(usages) = value.get("usage_to_metrics").and_then(Value::as_object) else {
                return;
            };
            let (mut cost, mut prompt, mut completion) = (0.0, 0, 0);
            for m in usages.values() {
                cost += m
                    .get("accumulated_cost")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0);
                if let Some(u) = m.get("accumulated_token_usage") {
                    prompt += u64_of(u, "prompt_tokens");
                    completion += u64_of(u, "completion_tokens");
                }
            }
            c.cumulative(Some(cost), Some(prompt), Some(completion));
            if let Some(u) = usages
                .get("default")
                .and_then(|m| m.get("accumulated_token_usage"))
            {
                if let Some(w) = u
                    .get("context_window")
                    .and_then(Value::as_u64)
                    .filter(|w| *w > 0)
                {
                    c.context_limit = Some(w);
                }
                if let Some(t) = u
                    .get("per_turn_token")
                    .and_then(Value::as_u64)
                    .filter(|t| *t > 0)
                {
                    c.context_tokens = Some(t);
                }
            }
        }
        Some("execution_status") => {
            c.resting |= matches!(
                value.as_str(),
                Some("finished" | "paused" | "waiting_for_confirmation" | "error" | "stuck")
            );
        }
        _ => {}
    }
}

fn v1(c: &mut Common, kind: &str, v: &Value) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    let mut out = Vec::new();
    let call = || str_of(v, "tool_call_id").map(String::from);
    match kind {
        "ActionEvent" => {
            let id = call().ok_or("ActionEvent without \"tool_call_id\"")?;
            let action = v.get("action").cloned().unwrap_or(Value::Null);
            c.pending.insert(
                id,
                Pending {
                    tool: str_of(v, "tool_name").unwrap_or("tool").into(),
                    args_hash: value_hash(&stable_args(&action)).into(),
                    command: str_of(&action, "command").map(String::from),
                },
            );
        }
        "ObservationEvent" => {
            let id = call().ok_or("ObservationEvent without \"tool_call_id\"")?;
            let o = v.get("observation").unwrap_or(&Value::Null);
            let text = ["content", "output", "error"]
                .iter()
                .filter_map(|k| o.get(*k).filter(|x| !x.is_null()))
                .map(text_of)
                .collect::<Vec<_>>()
                .join("\n");
            let exit = o
                .get("exit_code")
                .and_then(Value::as_i64)
                .filter(|e| *e >= 0);
            let ok = o.get("is_error").and_then(Value::as_bool) != Some(true)
                && o.get("error").is_none_or(Value::is_null);
            out.extend(c.complete(&id, ok, &text, exit));
        }
        "AgentErrorEvent" => {
            let error = str_of(v, "error").unwrap_or("agent error");
            match call() {
                Some(id) if c.pending.contains_key(&id) => {
                    out.extend(c.complete(&id, false, error, None))
                }
                _ => out.push(c.error_message(error)),
            }
        }
        "UserRejectObservation" => {
            let id = call().ok_or("UserRejectObservation without \"tool_call_id\"")?;
            let reason = str_of(v, "rejection_reason").unwrap_or("rejected by the user");
            out.extend(c.complete(&id, false, reason, None));
        }
        "MessageEvent" => match str_of(v, "source") {
            Some("agent") => {
                let text = v
                    .get("llm_message")
                    .and_then(|m| m.get("content"))
                    .map(text_of)
                    .unwrap_or_default();
                out.push(c.message(&text));
            }
            // Its user's message: a new instruction.
            Some("user") => c.instructed = true,
            _ => {}
        },
        "Condensation" | "CondensationSummaryEvent" => c.condensed = true,
        "ConversationStateUpdateEvent" => state_update(c, v),
        "SystemPromptEvent" | "PauseEvent" | "CondensationRequest" => c.skip(),
        _ => return Ok(None),
    }
    Ok(Some(out))
}

#[cfg(test)]
mod scanned_as_serde_reads {
    use super::*;

    /// The real recordings (`tests/fixtures/real/openhands`), built in: the
    /// sensor does no I/O, its tests neither.
    const REAL: [(&str, &str); 6] = [
        (
            "basic.json",
            include_str!("../../../tests/fixtures/real/openhands/basic.json"),
        ),
        (
            "basic_gui_mode.json",
            include_str!("../../../tests/fixtures/real/openhands/basic_gui_mode.json"),
        ),
        (
            "basic_interactions.json",
            include_str!("../../../tests/fixtures/real/openhands/basic_interactions.json"),
        ),
        (
            "multi_swe_bench_output.jsonl",
            include_str!("../../../tests/fixtures/real/openhands/multi_swe_bench_output.jsonl"),
        ),
        (
            "v1_sdk_events.jsonl",
            include_str!("../../../tests/fixtures/real/openhands/v1_sdk_events.jsonl"),
        ),
        (
            "wrong_initial_state.json",
            include_str!("../../../tests/fixtures/real/openhands/wrong_initial_state.json"),
        ),
    ];

    /// The V0 events of the real recordings (event arrays, and the
    /// histories of an evaluation's output), one a line.
    fn real_lines() -> Vec<String> {
        let mut out = Vec::new();
        for (name, text) in REAL {
            let docs: Vec<Value> = if name.ends_with(".json") {
                vec![serde_json::from_str(text).unwrap()]
            } else {
                text.lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect()
            };
            for d in docs {
                let events = match d {
                    Value::Array(a) => a,
                    Value::Object(mut o) => match o.remove("history") {
                        Some(Value::Array(a)) => a,
                        _ => vec![Value::Object(o)],
                    },
                    other => vec![other],
                };
                out.extend(events.iter().map(Value::to_string));
            }
        }
        out
    }

    /// What the scanner takes of a V0 event is what serde reads of it: on
    /// every event of the real recordings, on the bench's lines and on
    /// every changed byte of one of them.
    #[test]
    fn the_scanner_reads_what_serde_reads() {
        let real = real_lines();
        assert!(real.len() > 100, "{} real events", real.len());
        let mut lines = real.clone();
        let metrics = r#"{"id":8,"timestamp":"2026-11-20T10:00:00","source":"agent","message":"Running command","action":"run","args":{"command":"pytest -x tests/test_3.py","is_input":false,"thought":"run step 3","blocking":false,"hidden":false,"confirmation_state":"confirmed"},"llm_metrics":{"accumulated_cost":0.003,"accumulated_token_usage":{"prompt_tokens":300,"completion_tokens":30,"context_window":128000},"token_usages":[{"prompt_tokens":7}]}}"#;
        lines.push(metrics.to_string());
        lines.push(r#"{"id":9,"timestamp":"2026-11-20T10:00:01","source":"agent","cause":8,"observation":"run","content":"E   AssertionError\n1 failed","extras":{"command":"pytest","metadata":{"exit_code":1}}}"#.to_string());
        lines.extend(crate::scan::every_changed_byte(metrics, b"\"{}n1.,:[\\"));
        let taken = crate::scan::taken_as_serde_reads(&lines, scanned, |l| {
            crate::parse_object::<V0Serde<'_>>(l).map(V0::from)
        });
        let real_taken = real.iter().filter(|l| scanned(l).is_some()).count();
        // The real events go the fast way (those that do not: V1 events
        // and keys written with escapes, none here).
        assert!(
            real_taken * 10 >= real.len() * 9,
            "{real_taken} of {}",
            real.len()
        );
        assert!(taken > real_taken, "{taken}");
    }
}
