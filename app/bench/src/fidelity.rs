//! How faithfully the sensors read the recordings `xo bench detection`
//! replays: per format, the share of records mapped (skipped by name, not
//! known, not readable), and the tool errors the sensor saw beside an
//! independent count from the raw file.
//!
//! The independent count shares no code with the sensors: it reads each
//! file as plain JSON and counts what the agent's own format marks as a
//! failed tool result: Claude Code's `tool_result` with `is_error` (not the
//! "Sibling tool call errored" cancellations), Cursor's completed calls
//! with an `error` or a non-zero `exitCode`, Codex's calls whose
//! `exec_command_end` or output says an exit code other than 0, OpenHands'
//! `error` observations, the file editor's `ERROR:` answers and exit
//! codes other than 0 (V1: `is_error`,
//! `exit_code`, `AgentErrorEvent`), mini-swe-agent's return codes other
//! than 0 and its `FormatError` refusals. SWE-agent trajectories record no
//! exit status: no count.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;
use xo_runner::recordings::Imported;
use xo_sensor::Format;

/// One format's figures, summed over its files.
#[derive(Debug, Default, Clone)]
pub struct Fidelity {
    pub records: u64,
    pub mapped: u64,
    pub skipped: u64,
    pub unknown: u64,
    pub malformed: u64,
    /// Failed tool actions the sensor read.
    pub failed: u64,
    /// Non-zero exits the sensor read by their tool's meaning (no failure).
    pub by_meaning: u64,
    /// The independent count, where the format records one.
    pub raw: Option<u64>,
}

impl Fidelity {
    /// Adds one file: its runs as read, and its text. The errors the
    /// sensor saw are summed only where the file has an independent count.
    pub fn add(&mut self, format: Format, runs: &[Imported], text: &str) {
        let raw = raw_errors(format, text);
        for r in runs {
            let st = &r.run.stats;
            for k in st.kinds.values() {
                self.records += k.read;
                self.mapped += k.mapped;
                self.skipped += k.skipped;
                self.unknown += k.unknown;
                self.malformed += k.malformed;
            }
            if raw.is_none() {
                continue;
            }
            self.by_meaning += st.exits_by_meaning;
            self.failed += r
                .run
                .turns
                .iter()
                .filter_map(|t| t.action.as_ref())
                .filter(|a| {
                    a.kind == xo_proto::ActionKind::Tool && a.outcome == xo_proto::Outcome::Error
                })
                .count() as u64;
        }
        if let Some(n) = raw {
            *self.raw.get_or_insert(0) += n;
        }
    }

    /// The share of records mapped or skipped by name (read), in percent.
    pub fn read_pct(&self) -> f64 {
        if self.records == 0 {
            return 100.0;
        }
        (self.mapped + self.skipped) as f64 * 100.0 / self.records as f64
    }
}

/// Per format name.
pub type ByFormat = BTreeMap<&'static str, Fidelity>;

/// The failed tool results of a recording, counted from its raw JSON
/// without the sensors; `None` for a format that records no status.
pub fn raw_errors(format: Format, text: &str) -> Option<u64> {
    let lines = || {
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    };
    match format {
        // Cursor: a completed call whose result is an `error`, or a
        // `success` with a non-zero `exitCode`.
        Format::Cursor => Some(
            lines()
                .filter(|v| v["type"] == "tool_call" && v["subtype"] == "completed")
                .filter_map(|v| {
                    v["tool_call"]
                        .as_object()
                        .and_then(|o| o.values().next().cloned())
                })
                .filter(|call| {
                    let r = &call["result"];
                    r.get("error").is_some()
                        || r["success"]["exitCode"].as_i64().is_some_and(|c| c != 0)
                })
                .count() as u64,
        ),
        Format::Claude => Some(
            lines()
                .filter(|v| v["type"] == "user")
                .filter_map(|v| v["message"]["content"].as_array().cloned())
                .flatten()
                .filter(|b| b["type"] == "tool_result" && b["is_error"] == true)
                .filter(|b| {
                    !b["content"]
                        .to_string()
                        .contains("Sibling tool call errored")
                })
                .count() as u64,
        ),
        Format::Codex => {
            // A process's end is its `exec_command_end` where the rollout
            // keeps them (a poll's output repeats the same exit); else the
            // exit code its call's output states.
            let ends = text.contains("\"exec_command_end\"");
            let mut failed = HashSet::new();
            for v in lines() {
                let p = &v["payload"];
                let id = p["call_id"].as_str().unwrap_or_default().to_string();
                let code = match (v["type"].as_str(), p["type"].as_str()) {
                    (Some("event_msg"), Some("exec_command_end")) => p["exit_code"].as_i64(),
                    (Some("response_item"), Some("function_call_output")) if !ends => {
                        output_exit(&p["output"])
                    }
                    _ => None,
                };
                if code.is_some_and(|c| c != 0) {
                    failed.insert(id);
                }
            }
            Some(failed.len() as u64)
        }
        Format::OpenHands => {
            let events: Vec<Value> = match serde_json::from_str::<Value>(text.trim()) {
                Ok(Value::Array(a)) => a,
                _ => lines()
                    .flat_map(|v| match v.get("history").and_then(Value::as_array) {
                        Some(h) => h.clone(),
                        None => vec![v],
                    })
                    .collect(),
            };
            Some(events.iter().filter(|e| openhands_failed(e)).count() as u64)
        }
        Format::SweAgent => {
            let doc: Value = serde_json::from_str(text).ok()?;
            let messages = doc
                .get("messages")
                .and_then(Value::as_array)
                .or_else(|| doc.as_array())?;
            Some(
                messages
                    .iter()
                    .filter(|m| matches!(m["role"].as_str(), Some("user" | "tool")))
                    .filter(|m| {
                        if m["extra"]["interrupt_type"] == "FormatError" {
                            return true;
                        }
                        let code = m["extra"]["returncode"].as_i64().or_else(|| {
                            let c = m["content"].as_str()?;
                            let a = c.find("<returncode>")? + "<returncode>".len();
                            let b = a + c[a..].find("</returncode>")?;
                            c[a..b].trim().parse().ok()
                        });
                        code.is_some_and(|c| c != 0)
                    })
                    .count() as u64,
            )
        }
    }
}

/// The exit code a Codex call's output states: JSON `metadata.exit_code`,
/// or a `Process exited with code N` / `Exit code: N` line.
fn output_exit(output: &Value) -> Option<i64> {
    let text = output.as_str()?;
    if let Ok(v) = serde_json::from_str::<Value>(text)
        && let Some(c) = v["metadata"]["exit_code"].as_i64()
    {
        return Some(c);
    }
    text.lines().find_map(|l| {
        l.strip_prefix("Process exited with code ")
            .or_else(|| l.strip_prefix("Exit code: "))
            .and_then(|n| n.trim().parse().ok())
    })
}

fn openhands_failed(e: &Value) -> bool {
    if e["kind"] == "AgentErrorEvent" {
        return true;
    }
    if e["kind"] == "ObservationEvent" {
        let o = &e["observation"];
        return o["is_error"] == true || o["exit_code"].as_i64().is_some_and(|c| c > 0);
    }
    if e.get("observation").is_none() {
        return false;
    }
    let x = &e["extras"];
    let code = x["metadata"]["exit_code"]
        .as_i64()
        .or_else(|| x["exit_code"].as_i64());
    // The file editor answers a call it could not do with `ERROR:` first
    // (OpenHands' `str_replace_editor` tool errors), not with `error`.
    let editor_error = e["content"]
        .as_str()
        .is_some_and(|c| c.trim_start().starts_with("ERROR:"));
    e["observation"] == "error" || editor_error || code.is_some_and(|c| c > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The independent count reads Cursor's documented stream: an `error`
    /// result, or a shell `success` with a non-zero `exitCode`, is a
    /// failure; a zero exit and a started call are not.
    #[test]
    fn cursor_failures_are_counted_from_the_stream() {
        let text = [
            r#"{"type":"tool_call","subtype":"started","call_id":"a","tool_call":{"shellToolCall":{"args":{"command":"ls"}}}}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"a","tool_call":{"shellToolCall":{"args":{"command":"ls"},"result":{"success":{"exitCode":0,"stdout":"x"}}}}}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"b","tool_call":{"shellToolCall":{"args":{"command":"make"},"result":{"success":{"exitCode":2,"stderr":"boom"}}}}}"#,
            r#"{"type":"tool_call","subtype":"completed","call_id":"c","tool_call":{"readToolCall":{"args":{"path":"nope"},"result":{"error":{"errorMessage":"no such file"}}}}}"#,
        ]
        .join("\n");
        assert_eq!(raw_errors(Format::Cursor, &text), Some(2));
        assert_eq!(raw_errors(Format::SweAgent, "not json"), None);
    }
}
