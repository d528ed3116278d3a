//! The agent's reply (seed 002's format) and halt detection (seed 003):
//! critical halts stop the task, non-critical ones get a clarification.

use serde_json::{Map, Value};
use xo_proto::queue::REPLY_STATUSES;

use crate::driver::AgentOutput;
use crate::project::ReplyWords;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStatus {
    Ok,
    Blocked,
    Error,
    Escalate,
}

impl ReplyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Blocked => "blocked",
            Self::Error => "error",
            Self::Escalate => "escalate",
        }
    }
}

/// A reply in the required format.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentReply {
    pub status: ReplyStatus,
    pub message: String,
    /// The whole JSON object (manager fields, `output`).
    pub object: Map<String, Value>,
}

/// Why a reply is not in the required format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no JSON object with a \"status\" field in the output")]
    NoReply,
    #[error("status {0:?} is not one of ok, blocked, error, escalate")]
    BadStatus(String),
    #[error("the reply has no \"message\" string")]
    NoMessage,
    #[error("manager reply: {0}")]
    Manager(String),
}

/// A minor violation fixed in place (SUP-7), kept for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Correction(pub String);

/// Finds the last JSON object carrying `status` in the output (a fenced
/// block or bare), checks seed 002's format and auto-corrects minor
/// violations: a non-string message; with [`ReplyWords::Corrected`] also
/// the status word's case and common synonyms (strict: only the four words
/// as written).
pub fn parse_reply(
    stdout: &str,
    manager: bool,
    words: ReplyWords,
) -> Result<(AgentReply, Vec<Correction>), FormatError> {
    let mut object = last_status_object(stdout).ok_or(FormatError::NoReply)?;
    let mut fixes = Vec::new();
    let raw_status = match object.get("status") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => return Err(FormatError::NoReply),
    };
    let norm = match words {
        ReplyWords::Strict => raw_status.clone(),
        ReplyWords::Corrected => raw_status.trim().to_ascii_lowercase(),
    };
    let status = match (norm.as_str(), words) {
        ("ok", _) => ReplyStatus::Ok,
        ("blocked", _) => ReplyStatus::Blocked,
        ("error", _) => ReplyStatus::Error,
        ("escalate", _) => ReplyStatus::Escalate,
        ("done" | "success" | "completed" | "complete", ReplyWords::Corrected) => ReplyStatus::Ok,
        ("failed" | "failure", ReplyWords::Corrected) => ReplyStatus::Error,
        _ => return Err(FormatError::BadStatus(raw_status)),
    };
    if !REPLY_STATUSES.contains(&raw_status.as_str()) {
        fixes.push(Correction(format!(
            "status {raw_status:?} corrected to {:?}",
            status.as_str()
        )));
        object.insert("status".into(), Value::String(status.as_str().into()));
    }
    let message = match object.get("message") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => return Err(FormatError::NoMessage),
        Some(other) => {
            let s = other.to_string();
            fixes.push(Correction("message was not a string; stringified".into()));
            object.insert("message".into(), Value::String(s.clone()));
            s
        }
    };
    if manager && status == ReplyStatus::Ok {
        match object.get("next_task") {
            Some(Value::String(_)) | Some(Value::Null) => {}
            None => {
                return Err(FormatError::Manager(
                    "no \"next_task\" (a task id or null)".into(),
                ));
            }
            Some(v) => {
                return Err(FormatError::Manager(format!(
                    "next_task {v} is not a task id or null"
                )));
            }
        }
        let list = |k: &str| matches!(object.get(k), Some(Value::Array(_)));
        let absent_or_list = |k: &str| object.get(k).is_none() || list(k);
        if !(list("tasks") || list("keep")) || !absent_or_list("tasks") || !absent_or_list("keep") {
            return Err(FormatError::Manager(
                "no \"keep\" or \"tasks\" list (keep: ids of pending tasks kept; tasks: new or changed ones)".into(),
            ));
        }
    }
    Ok((
        AgentReply {
            status,
            message,
            object,
        },
        fixes,
    ))
}

fn last_status_object(text: &str) -> Option<Map<String, Value>> {
    // Try each '{' from the end: the reply is the last object.
    let bytes = text.as_bytes();
    let mut tried = 0;
    for i in (0..bytes.len()).rev() {
        if bytes[i] != b'{' {
            continue;
        }
        tried += 1;
        if tried > 512 {
            break;
        }
        let mut it = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(m))) = it.next()
            && m.contains_key("status")
        {
            return Some(m);
        }
    }
    None
}

/// Seed 003's halt conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halt {
    /// The agent did not run, crashed, timed out, was killed or reported `error`.
    ExecFailure(String),
    /// The agent reported `blocked` or `escalate`.
    Blocked(String),
    /// Out of format retries.
    OutputFormatInvalid(String),
    /// Non-critical: the agent asked a question.
    AskedQuestion(String),
    /// Non-critical: the agent hedged.
    Ambiguity(String),
}

impl Halt {
    pub fn code(&self) -> &'static str {
        match self {
            Self::ExecFailure(_) => "EXEC_FAILURE",
            Self::Blocked(_) => "BLOCKED",
            Self::OutputFormatInvalid(_) => "OUTPUT_FORMAT_INVALID",
            Self::AskedQuestion(_) => "ASKED_QUESTION",
            Self::Ambiguity(_) => "AMBIGUITY",
        }
    }
    pub fn critical(&self) -> bool {
        !matches!(self, Self::AskedQuestion(_) | Self::Ambiguity(_))
    }
    pub fn detail(&self) -> &str {
        match self {
            Self::ExecFailure(d)
            | Self::Blocked(d)
            | Self::OutputFormatInvalid(d)
            | Self::AskedQuestion(d)
            | Self::Ambiguity(d) => d,
        }
    }
    /// `CODE: detail`, the reason given to the queue.
    pub fn reason(&self) -> String {
        format!("{}: {}", self.code(), self.detail())
    }
}

const QUESTION: [&str; 8] = [
    "should i ",
    "do you want",
    "would you like",
    "could you clarify",
    "can you clarify",
    "please confirm",
    "can you confirm",
    "which one should",
];
const AMBIGUITY: [&str; 6] = [
    "i'm not sure",
    "i am not sure",
    "it is unclear",
    "it's unclear",
    "ambiguous",
    "not certain",
];

/// Checks an execution and its parsed reply for halts. A format error is
/// not a halt here: it is retried with the same inputs first.
pub fn detect(out: &AgentOutput, reply: Option<&AgentReply>) -> Option<Halt> {
    if out.cancelled {
        return Some(Halt::ExecFailure(
            "the agent was stopped (halt or shutdown)".into(),
        ));
    }
    if out.timed_out {
        return Some(Halt::ExecFailure(format!(
            "the agent timed out after {} ms; its process group was killed",
            out.elapsed_ms
        )));
    }
    let Some(reply) = reply else {
        if let Some(code) = out.exit_code.filter(|c| *c != 0) {
            return Some(Halt::ExecFailure(format!(
                "the agent exited with code {code} and no reply{}",
                tail(&out.stderr)
            )));
        }
        if out.exit_code.is_none() && !out.timed_out && out.signal.is_some() {
            return Some(Halt::ExecFailure(format!(
                "the agent was killed by signal {}",
                out.signal.unwrap_or_default()
            )));
        }
        return None;
    };
    match reply.status {
        ReplyStatus::Blocked => return Some(Halt::Blocked(reply.message.clone())),
        ReplyStatus::Escalate => {
            return Some(Halt::Blocked(format!("escalate: {}", reply.message)));
        }
        ReplyStatus::Error => {
            return Some(Halt::ExecFailure(format!(
                "the agent reported error: {}",
                reply.message
            )));
        }
        ReplyStatus::Ok => {}
    }
    let m = reply.message.to_lowercase();
    let m = m.trim();
    if m.ends_with('?') || QUESTION.iter().any(|q| m.contains(q)) {
        return Some(Halt::AskedQuestion(reply.message.clone()));
    }
    if AMBIGUITY.iter().any(|q| m.contains(q)) {
        return Some(Halt::Ambiguity(reply.message.clone()));
    }
    None
}

fn tail(stderr: &str) -> String {
    let t = stderr.trim();
    if t.is_empty() {
        return String::new();
    }
    let start = t.len().saturating_sub(300);
    let start = (start..t.len())
        .find(|i| t.is_char_boundary(*i))
        .unwrap_or(0);
    format!("; stderr: {}", &t[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(stdout: &str) -> AgentOutput {
        AgentOutput {
            stdout: stdout.into(),
            exit_code: Some(0),
            ..Default::default()
        }
    }

    #[test]
    fn reply_is_the_last_status_object() {
        let text = "log {\"x\":1}\nsome {\"status\":\"error\",\"message\":\"old\"}\n```json\n{\"status\": \"ok\", \"message\": \"done\", \"n\": {\"a\": 1}}\n```\n";
        let (r, fixes) = parse_reply(text, false, ReplyWords::Strict).unwrap();
        assert_eq!(r.status, ReplyStatus::Ok);
        assert_eq!(r.message, "done");
        assert!(fixes.is_empty());
    }

    #[test]
    fn format_errors_and_corrections() {
        assert_eq!(
            parse_reply("all done!", false, ReplyWords::Strict),
            Err(FormatError::NoReply)
        );
        assert_eq!(
            parse_reply(
                "{\"status\":\"maybe\",\"message\":\"x\"}",
                false,
                ReplyWords::Strict
            ),
            Err(FormatError::BadStatus("maybe".into()))
        );
        assert_eq!(
            parse_reply("{\"status\":\"ok\"}", false, ReplyWords::Strict),
            Err(FormatError::NoMessage)
        );
        // Seed 004 SUP-7: minor violations corrected in place when asked to.
        let (r, fixes) = parse_reply(
            "{\"status\":\" OK \",\"message\":42}",
            false,
            ReplyWords::Corrected,
        )
        .unwrap();
        assert_eq!(r.status, ReplyStatus::Ok);
        assert_eq!(r.message, "42");
        assert_eq!(fixes.len(), 2, "{fixes:?}");
        for (word, status) in [
            ("done", ReplyStatus::Ok),
            ("Success", ReplyStatus::Ok),
            ("failed", ReplyStatus::Error),
        ] {
            let text = format!("{{\"status\":\"{word}\",\"message\":\"m\"}}");
            let (r, fixes) = parse_reply(&text, false, ReplyWords::Corrected).unwrap();
            assert_eq!((r.status, fixes.len()), (status, 1), "{word}");
            // Seed 003 (the default): no "helpful" corrections of the words.
            assert_eq!(
                parse_reply(&text, false, ReplyWords::Strict),
                Err(FormatError::BadStatus(word.into())),
                "{word}"
            );
        }
        assert_eq!(
            parse_reply(
                "{\"status\":\" OK \",\"message\":\"m\"}",
                false,
                ReplyWords::Strict
            ),
            Err(FormatError::BadStatus(" OK ".into()))
        );
        // A non-string message is stringified either way (it is not a word).
        let (r, fixes) = parse_reply(
            "{\"status\":\"ok\",\"message\":42}",
            false,
            ReplyWords::Strict,
        )
        .unwrap();
        assert_eq!((r.message.as_str(), fixes.len()), ("42", 1));
        assert!(matches!(
            parse_reply(
                "{\"status\":\"ok\",\"message\":\"m\"}",
                true,
                ReplyWords::Strict
            ),
            Err(FormatError::Manager(_))
        ));
        assert!(
            parse_reply(
                "{\"status\":\"ok\",\"message\":\"m\",\"next_task\":null,\"tasks\":[]}",
                true,
                ReplyWords::Strict
            )
            .is_ok()
        );
    }

    #[test]
    fn halts() {
        let reply = |s: &str| parse_reply(s, false, ReplyWords::Strict).unwrap().0;
        let o = out("");
        assert_eq!(
            detect(
                &o,
                Some(&reply("{\"status\":\"ok\",\"message\":\"wrote it\"}"))
            ),
            None
        );
        let h = detect(
            &o,
            Some(&reply("{\"status\":\"blocked\",\"message\":\"no access\"}")),
        )
        .unwrap();
        assert_eq!(h.code(), "BLOCKED");
        assert!(h.critical());
        let h = detect(
            &o,
            Some(&reply(
                "{\"status\":\"ok\",\"message\":\"Should I use tabs?\"}",
            )),
        )
        .unwrap();
        assert_eq!(h.code(), "ASKED_QUESTION");
        assert!(!h.critical());
        let h = detect(
            &o,
            Some(&reply(
                "{\"status\":\"ok\",\"message\":\"I'm not sure the spec means UTF-8\"}",
            )),
        )
        .unwrap();
        assert_eq!(h.code(), "AMBIGUITY");
        let h = detect(
            &o,
            Some(&reply("{\"status\":\"error\",\"message\":\"crashed\"}")),
        )
        .unwrap();
        assert_eq!(h.code(), "EXEC_FAILURE");
        let mut failed = out("");
        failed.exit_code = Some(2);
        failed.stderr = "boom".into();
        let h = detect(&failed, None).unwrap();
        assert!(
            h.reason().contains("code 2") && h.reason().contains("boom"),
            "{}",
            h.reason()
        );
        failed.timed_out = true;
        assert!(
            detect(&failed, None)
                .unwrap()
                .reason()
                .contains("timed out")
        );
        assert_eq!(
            detect(&out("no reply"), None),
            None,
            "format errors are retried, not halts"
        );
    }
}
