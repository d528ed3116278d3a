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

/// A `tool_call` line as the sensor uses it, however it was read.
#[derive(Debug, PartialEq)]
struct Tool<'a> {
    subtype: Option<Cow<'a, str>>,
    call_id: Option<Cow<'a, str>>,
    session_id: Option<Cow<'a, str>>,
    model_call_id: Option<Cow<'a, str>>,
    /// The call's first entry: its name and body.
    call: Option<(Cow<'a, str>, Body<'a>)>,
}

#[derive(Debug, PartialEq)]
struct Body<'a> {
    /// The arguments as written (JSON).
    args: Option<&'a str>,
    /// The result's first entry (`success`, `error`…), its exit code, and
    /// the raw text of its output fields (stdout, stderr, content, output,
    /// message, errorMessage) that are not `null`.
    result: Option<(Cow<'a, str>, Option<i64>, Outputs<'a>)>,
}

/// A result's output fields, raw: stdout, stderr, content, output,
/// message, errorMessage.
type Outputs<'a> = [Option<&'a str>; 6];

impl<'a> From<ToolLine<'a>> for Tool<'a> {
    fn from(t: ToolLine<'a>) -> Self {
        Tool {
            subtype: t.subtype,
            call_id: t.call_id,
            session_id: t.session_id,
            model_call_id: t.model_call_id,
            call: t.tool_call.map(|First(name, body)| {
                let result = body.result.map(|First(k, d)| {
                    let raw = [
                        d.stdout,
                        d.stderr,
                        d.content,
                        d.output,
                        d.message,
                        d.error_message,
                    ]
                    .map(|r| r.map(RawValue::get));
                    (k, d.exit_code, raw)
                });
                (
                    name,
                    Body {
                        args: body.args.map(RawValue::get),
                        result,
                    },
                )
            }),
        }
    }
}

/// A `tool_call` line read by [`crate::scan`] (one pass, nothing built);
/// `None` for any line it cannot take plainly, which serde reads.
fn scanned<'a>(text: &'a str) -> Option<Tool<'a>> {
    use crate::scan::{Found, Want, int, present, read, string};
    const DETAIL: Want<'static> = Want::take(&[
        ("exitCode", 7),
        ("stdout", 8),
        ("stderr", 9),
        ("content", 10),
        ("output", 11),
        ("message", 12),
        ("errorMessage", 13),
    ]);
    const BODY: Want<'static> = Want {
        take: &[("args", 5)],
        enter: &[(
            "result",
            Want {
                take: &[],
                enter: &[],
                first: Some((6, &DETAIL)),
            },
        )],
        first: None,
    };
    const WANT: Want<'static> = Want {
        take: &[
            ("subtype", 0),
            ("call_id", 1),
            ("session_id", 2),
            ("model_call_id", 3),
        ],
        enter: &[(
            "tool_call",
            Want {
                take: &[],
                enter: &[],
                first: Some((4, &BODY)),
            },
        )],
        first: None,
    };
    let f: Found<'_, 14> = read(text, &WANT)?;
    // A null is no value: as serde reads an `Option`.
    let call = match f[4] {
        None => None,
        Some(name) => Some((
            Cow::Borrowed(name),
            Body {
                args: present(f[5]),
                result: match f[6] {
                    None => None,
                    Some(k) => Some((
                        Cow::Borrowed(k),
                        int(f[7]).ok()?,
                        [f[8], f[9], f[10], f[11], f[12], f[13]].map(present),
                    )),
                },
            },
        )),
    };
    Some(Tool {
        subtype: string(f[0]).ok()?,
        call_id: string(f[1]).ok()?,
        session_id: string(f[2]).ok()?,
        model_call_id: string(f[3]).ok()?,
        call,
    })
}

/// Reads one line: `tool_call` lines (most of a stream) typed, the rest
/// through [`event`]. Arguments are hashed as the agent wrote them.
pub(crate) fn line(
    c: &mut Common,
    text: &str,
) -> Result<Option<Vec<TurnEvent>>, crate::SensorError> {
    // Cursor writes the type first: most tool lines are known by their head.
    if !text.starts_with(r#"{"type":"tool_call""#) && !text.contains("\"tool_call\"") {
        let v: Value = crate::parse_object(text)?;
        return event(c, &v);
    }
    let t = match scanned(text) {
        Some(t) => t,
        None => Tool::from(crate::parse_object::<ToolLine<'_>>(text)?),
    };
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
    let (name, body) = t
        .call
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
            let args = body.args.unwrap_or("null");
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
            let (ok, exit, raw) = match &body.result {
                Some((k, exit, raw)) => (k == "success", *exit, Some(raw)),
                None => (false, None, None),
            };
            let text: Cow<'_, str> = match raw {
                Some(raw) => {
                    let mut parts = raw
                        .iter()
                        .flatten()
                        .map(|r| crate::raw_text(r))
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

#[cfg(test)]
mod scanned_as_serde_reads {
    use super::*;

    /// What the scanner takes of a `tool_call` line is what serde reads of
    /// it, for lines as `cursor-agent` writes them, every changed byte of
    /// them, and the odd variants.
    #[test]
    fn the_scanner_reads_what_serde_reads() {
        let mut lines: Vec<String> = [
            r#"{"type":"tool_call","subtype":"started","call_id":"call_1","tool_call":{"shellToolCall":{"args":{"command":"npm test -- --grep case1"}}},"session_id":"c-1"}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"call_1","tool_call":{"shellToolCall":{"args":{"command":"npm test"},"result":{"error":{"exitCode":1,"stdout":"3 passing\n1 failing","stderr":"boom"}}}},"session_id":"c-1"}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"c2","model_call_id":"m1","tool_call":{"readToolCall":{"args":{"path":"a.rs"},"result":{"success":{"content":"fn main() {}\n","stdout":null}}},"otherToolCall":{}}}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"c3","tool_call":{"editToolCall":{"args":null,"result":{"success":{"exitCode":null,"message":"caf\u00e9"}}}}}"#,
            r#"{"type":"tool_call","subtype":"started","call_id":"c4","tool_call":{}}"#,
            r#"{"type":"tool_call","subtype":"started","call_id":"c5","tool_call":null}"#,
            r#"{"type":"tool_call","subtype":"started","call_id":"c6","tool_call":{"x":[1]}}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"c7","tool_call":{"x":{"result":{"error":{"exitCode":1.5}}}}}"#,
            r#"{"type":"tool_call","subtype":7,"call_id":"c8","tool_call":{"x":{}}}"#,
            r#"{"type":"tool_call","call_id":"c9","call_id":"c9","tool_call":{"x":{}}}"#,
        ]
        .map(String::from)
        .to_vec();
        let changed = crate::scan::every_changed_byte(&lines[1], b"\"{}n1,:\\");
        lines.extend(changed);
        let taken = crate::scan::taken_as_serde_reads(&lines, scanned, |l| {
            crate::parse_object::<ToolLine<'_>>(l).map(Tool::from)
        });
        // The lines as written, and most of their variants, went the fast way.
        assert!(taken > lines.len() / 3, "{taken} of {}", lines.len());
        for l in &lines[..4] {
            assert!(scanned(l).is_some(), "{l}");
        }
    }
}
