//! The XO wire contract: every message, subject, version constant and
//! request/reply pairing that crosses the bus lives here.
//!
//! # Layout
//!
//! - [`salute`]: the SALUTE status report a unit sends (`xo.salute.<unit>`).
//! - `salute_reader` (private): the direct MessagePack reader behind
//!   [`codec::decode`] for reports of the usual shape; serde decides the rest.
//! - [`steering`]: corrective messages the XO sends (`xo.steer.<unit>`).
//! - [`heartbeat`]: liveness pings (`xo.heartbeat.<unit>`).
//! - [`control`]: the control-API machinery — [`Request`], the [`api!`]
//!   declaration (one line a request), error codes, the reply envelope — and
//!   the supervisor's API (`units`, `unit`, `steer`, `stats`).
//! - [`queue`]: tasks, records, status, task events and audit records, event
//!   names, the Manager role, and the queue's API.
//! - [`knowledge`]: knowledge documents, directives, review runs, and the
//!   knowledge store's API.
//! - [`fleet`]: runner containers per role, fleet events, and the fleet's API.
//! - [`settings`]: operator settings layered over `xo.toml` (served by the queue).
//! - [`subject`]: the only place subject strings are spelled.
//! - [`codec`]: MessagePack (named fields) or JSON, size limit, version checks.
//! - [`secret`]: secrets made and compared; here so that the bus, below
//!   the runtime, uses them too.
//!
//! Start with [`SaluteReport`] and [`codec::decode`]; for a service's API,
//! with [`control`].

pub mod alert;
pub mod codec;
pub mod control;
pub mod finite;
pub mod fleet;
pub mod followed;
pub mod heartbeat;
pub mod invalid;
pub mod knowledge;
pub mod knowledge_doc;
pub mod names;
pub mod queue;
pub mod salute;
mod salute_reader;
pub mod secret;
pub mod settings;
pub mod steering;
pub mod subject;
pub mod task_file;

pub use codec::{CodecError, Format, Message};
pub use control::Request;
pub use heartbeat::Heartbeat;
pub use invalid::Invalid;
pub use salute::{
    Action, ActionKind, Activity, Assessor, Equipment, Health, Location, Outcome, Pace,
    SaluteReport, SelfSteered, Size, Status, Time, UnitInfo, UnitNeeds,
};
pub use steering::{
    AnomalyKind, Evidence, NeedsReason, NeedsYou, Severity, Steering, SteeringSource,
};
pub use subject::{SubjectKind, Subjects, partition_of};

/// Major version of the wire schema this build writes.
pub const PROTOCOL_VERSION: u16 = 1;
/// Oldest major version this build still reads.
pub const MIN_SUPPORTED_VERSION: u16 = 1;

/// Milliseconds since the Unix epoch by the host's wall clock, the time
/// unit of every message. It can jump either way (an operator, NTP after a
/// suspend): durations inside a process are measured by the services'
/// `Clock`, which runs on the monotonic clock.
pub fn now_ms() -> u64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    wall.saturating_add_signed(WALL_SHIFT_MS.load(std::sync::atomic::Ordering::Relaxed))
}

/// What [`shift_wall_clock`] added to the wall clock (0 unless a test moved
/// it).
static WALL_SHIFT_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Moves this process's wall clock ([`now_ms`]) by `ms`, either way: the
/// clock-jump tests do what an operator's `date -s` does to a running
/// service, without the privilege to do it to the host.
#[doc(hidden)]
pub fn shift_wall_clock(ms: i64) {
    WALL_SHIFT_MS.fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
}

/// Why an id is not one subject token and store key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidToken {
    #[error("{what} is empty")]
    Empty { what: String },
    #[error("{what} is {len} bytes, at most 128")]
    TooLong { what: String, len: usize },
    #[error("{what} {id:?} has {c:?}; use letters, digits, '-' and '_'")]
    Char { what: String, id: String, c: char },
}

/// The words of the error, for callers that carry a reason as text.
impl From<InvalidToken> for String {
    fn from(e: InvalidToken) -> Self {
        e.to_string()
    }
}

/// An id that is one NATS subject token and one store key: non-empty, at
/// most 128 bytes, ASCII letters, digits, `-` and `_` only. `what` names it
/// in the error (`unit id`, `task_id`…).
pub fn validate_token(what: &str, id: &str) -> Result<(), InvalidToken> {
    if id.is_empty() {
        return Err(InvalidToken::Empty { what: what.into() });
    }
    if id.len() > 128 {
        return Err(InvalidToken::TooLong {
            what: what.into(),
            len: id.len(),
        });
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(InvalidToken::Char {
            what: what.into(),
            id: id.into(),
            c,
        });
    }
    Ok(())
}

/// A unit id: see [`validate_token`].
pub fn validate_unit_id(unit: &str) -> Result<(), InvalidToken> {
    validate_token("unit id", unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each refusal of an id is its own case, in the same words as before.
    #[test]
    fn an_invalid_id_says_which_way_it_is_invalid() {
        assert_eq!(
            validate_token("task_id", ""),
            Err(InvalidToken::Empty {
                what: "task_id".into()
            })
        );
        let long = "a".repeat(129);
        assert!(matches!(
            validate_unit_id(&long),
            Err(InvalidToken::TooLong { len: 129, .. })
        ));
        let e = validate_unit_id("a.b").unwrap_err();
        assert!(matches!(e, InvalidToken::Char { c: '.', .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "unit id \"a.b\" has '.'; use letters, digits, '-' and '_'"
        );
        assert_eq!(validate_unit_id("coder-1_a"), Ok(()));
        assert_eq!(
            Subjects::validate_prefix("a b"),
            Err(subject::InvalidPrefix::NotSubject("a b".into()))
        );
        assert_eq!(
            knowledge::Category::parse("recipes"),
            Err(knowledge::UnknownCategory("recipes".into()))
        );
    }
}
