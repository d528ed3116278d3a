//! Cursor CLI: `cursor-agent -p --output-format stream-json`.
//!
//! - `system` `init`: `session_id`, `model`.
//! - `assistant`: `message.content[]` text — an agent message. Text with a
//!   `model_call_id` comes before that model call's tools: it is held, and
//!   is their preamble (no turn) when a `tool_call` of the same
//!   `model_call_id` starts; the final text (no `model_call_id`) is a turn.
//! - `tool_call` `started`: `call_id` and `tool_call.<name>ToolCall.args`.
//! - `tool_call` `completed`: the same `call_id`, with `result.success` or
//!   `result.error` (an `exitCode` where the tool ran a command).
//! - `result`: the run's end (`subtype`, `is_error`, `result`).

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::{Common, Pending, TurnEvent, str_of, text_of};

#[derive(serde::Deserialize)]
struct ToolLine<'a> {
    #[serde(borrow)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow)]
    call_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model_call_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tool_call: Option<First<'a, ToolBody<'a>>>,
}

#[derive(serde::Deserialize)]
struct ToolBody<'a> {
    #[serde(borrow)]
    args: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<First<'a, Detail<'a>>>,
}

/// The first entry of an object (`{"readToolCall": {...}}`,
/// `{"success": {...}}`); the rest is skipped unread.
struct First<'a, T>(Cow<'a, str>, T);

impl<'de: 'a, 'a, T: serde::Deserialize<'de>> serde::Deserialize<'de> for First<'a, T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a, T>(std::marker::PhantomData<(&'a (), T)>);
        impl<'de: 'a, 'a, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for V<'a, T> {
            type Value = First<'a, T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object with one entry")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let (k, v) = m
                    .next_entry::<Cow<'a, str>, T>()?
                    .ok_or_else(|| serde::de::Error::custom("an empty object"))?;
                while m
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(First(k, v))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[derive(serde::Deserialize)]
struct Detail<'a> {
    #[serde(rename = "exitCode")]
    exit_code: Option<i64>,
    #[serde(borrow)]
    stdout: Option<&'a RawValue>,
    #[serde(borrow)]
    stderr: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    output: Option<&'a RawValue>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    #[serde(rename = "errorMessage", borrow)]
    error_message: Option<&'a RawValue>,
}

/// Reads one line: `tool_call` lines (most of a stream) typed, the rest
/// through [`event`]. Arguments are hashed as the agent wrote them.
pub(crate) fn line(
    c: &mut Common,
    text: &str,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    if !text.contains("\"tool_call\"") {
        let v: Value = crate::parse_object(text)?;
        return event(c, &v);
    }
    let t: ToolLine<'_> = crate::parse_object(text)?;
    c.kind(&["tool_call", t.subtype.as_deref().unwrap_or("-")]);
    if let Some(s) = t.session_id.as_deref()
        && c.session.is_none()
    {
        c.session = Some(s.to_string());
    }
    let call = t
        .call_id
        .as_deref()
        .ok_or("tool_call without \"call_id\"")?;
    let First(name, body) = t
        .tool_call
        .as_ref()
        .ok_or("tool_call without a \"tool_call\" object")?;
    let tool = name.strip_suffix("ToolCall").unwrap_or(name);
    let mut out = Vec::new();
    match (t.subtype.as_deref(), t.model_call_id.as_deref()) {
        (Some("started"), Some(id)) => out.extend(c.called(id)),
        _ => out.extend(c.flush_held()),
    }
    match t.subtype.as_deref() {
        Some("started") => {
            let args = body.args.map(RawValue::get).unwrap_or("null");
            c.pending.insert(
                call.to_string(),
                Pending {
                    tool: tool.into(),
                    args_hash: crate::hex_hash(args).as_str().into(),
                    command: crate::command_of(args),
                },
            );
        }
        Some("completed") => {
            let (ok, d) = match &body.result {
                Some(First(k, d)) => (k == "success", Some(d)),
                None => (false, None),
            };
            let text: Cow<'_, str> = match d {
                Some(d) => {
                    let mut parts = [
                        d.stdout,
                        d.stderr,
                        d.content,
                        d.output,
                        d.message,
                        d.error_message,
                    ]
                    .into_iter()
                    .flatten()
                    .map(crate::raw_text)
                    .filter(|t| !t.is_empty());
                    match (parts.next(), parts.next()) {
                        (None, _) => Cow::Borrowed(""),
                        (Some(one), None) => one,
                        (Some(a), Some(b)) => {
                            let mut all = vec![a, b];
                            all.extend(parts);
                            Cow::Owned(all.join("\n"))
                        }
                    }
                }
                None => Cow::Borrowed(""),
            };
            let exit = d.and_then(|d| d.exit_code);
            out.extend(c.complete(call, ok, &text, exit));
        }
        other => {
            return Err(crate::SensorError::Unexpected(format!(
                "tool_call with subtype {other:?}"
            )));
        }
    }
    Ok(Some(out))
}

pub(crate) fn event(
    c: &mut Common,
    v: &Value,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    let Some(kind) = str_of(v, "type") else {
        return Err(crate::SensorError::NoType);
    };
    c.kind(&[kind]);
    if let Some(s) = str_of(v, "session_id") {
        c.session.get_or_insert_with(|| s.to_string());
    }
    let mut out = Vec::new();
    match kind {
        "system" => {
            if let Some(m) = str_of(v, "model") {
                c.model = Some(m.to_string());
            }
        }
        // Thinking goes on between a model call's text and its tools.
        "thinking" => c.skip(),
        "user" => out.extend(c.flush_held()),
        "assistant" => {
            let text = v
                .get("message")
                .and_then(|m| m.get("content"))
                .map(text_of)
                .unwrap_or_default();
            match str_of(v, "model_call_id") {
                Some(id) => out.extend(c.hold(id, &text)),
                None => {
                    out.extend(c.flush_held());
                    out.push(c.message(&text));
                }
            }
        }
        "result" => {
            out.extend(c.flush_held());
            let subtype = str_of(v, "subtype").unwrap_or("done");
            let text = str_of(v, "result").unwrap_or_default();
            if !text.is_empty() {
                c.final_text = Some(text.to_string());
            }
            let failed = v.get("is_error").and_then(Value::as_bool) == Some(true);
            let summary = format!("{subtype}: {}", text.chars().take(200).collect::<String>());
            out.push(c.end(
                summary,
                failed.then_some(if text.is_empty() { subtype } else { text }),
            ));
        }
        _ => return Ok(None),
    }
    Ok(Some(out))
}
