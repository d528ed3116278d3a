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
//!
//! Start with [`SaluteReport`] and [`codec::decode`]; for a service's API,
//! with [`control`].

pub mod alert;
pub mod codec;
pub mod control;
pub mod finite;
pub mod fleet;
pub mod heartbeat;
pub mod knowledge;
pub mod knowledge_doc;
pub mod names;
pub mod queue;
pub mod salute;
mod salute_reader;
pub mod settings;
pub mod steering;
pub mod subject;
pub mod task_file;

pub use codec::{CodecError, Format, Message};
pub use control::Request;
pub use heartbeat::Heartbeat;
pub use salute::{
    Action, ActionKind, Activity, Assessor, Equipment, Health, Location, Outcome, Pace,
    SaluteReport, SelfSteered, Size, Status, Time, UnitInfo,
};
pub use steering::{AnomalyKind, Evidence, Severity, Steering, SteeringSource};
pub use subject::{SubjectKind, Subjects, partition_of};

/// Major version of the wire schema this build writes.
pub const PROTOCOL_VERSION: u16 = 1;
/// Oldest major version this build still reads.
pub const MIN_SUPPORTED_VERSION: u16 = 1;

/// Milliseconds since the Unix epoch, the time unit of every message.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// An id that is one NATS subject token and one store key: non-empty, at
/// most 128 bytes, ASCII letters, digits, `-` and `_` only. `what` names it
/// in the error (`unit id`, `task_id`…).
pub fn validate_token(what: &str, id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if id.len() > 128 {
        return Err(format!("{what} is {} bytes, at most 128", id.len()));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "{what} {id:?} has {c:?}; use letters, digits, '-' and '_'"
        ));
    }
    Ok(())
}

/// A unit id: see [`validate_token`].
pub fn validate_unit_id(unit: &str) -> Result<(), String> {
    validate_token("unit id", unit)
}
