//! Control APIs: each request names its service, verb and reply type, so the
//! subject is `xo.ctl.<service>.<verb>` and no caller spells it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::{Health, SaluteReport, Severity, Steering, Subjects};

/// A control request and its reply type.
pub trait Request: Serialize + DeserializeOwned + Send {
    const SERVICE: &'static str;
    const VERB: &'static str;
    type Response: Serialize + DeserializeOwned + Send;

    fn subject(subjects: &Subjects) -> String {
        subjects.ctl(Self::SERVICE, Self::VERB)
    }
}

/// Error codes shared by every service's replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Invalid,
    NotFound,
    Unavailable,
    Timeout,
    Internal,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Invalid => "invalid",
            Self::NotFound => "not found",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::Internal => "internal",
        })
    }
}

/// A service error as it crosses the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ServiceError {
    pub code: ErrorCode,
    pub message: String,
}

impl ServiceError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The envelope of every control reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reply<T> {
    Ok(T),
    Err(ServiceError),
}

impl<T> From<Result<T, ServiceError>> for Reply<T> {
    fn from(r: Result<T, ServiceError>) -> Self {
        match r {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Err(e),
        }
    }
}

impl<T> Reply<T> {
    pub fn into_result(self) -> Result<T, ServiceError> {
        match self {
            Reply::Ok(v) => Ok(v),
            Reply::Err(e) => Err(e),
        }
    }
}

/// The supervisor's control service name.
pub const SUPERVISOR: &str = "supervisor";

/// List every unit the supervisor knows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListUnits {}

impl Request for ListUnits {
    const SERVICE: &'static str = SUPERVISOR;
    const VERB: &'static str = "units";
    type Response = Vec<UnitSummary>;
}

/// Show one unit with its latest report and recent steering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShowUnit {
    pub unit: String,
}

impl Request for ShowUnit {
    const SERVICE: &'static str = SUPERVISOR;
    const VERB: &'static str = "unit";
    type Response = UnitDetail;
}

/// Send an operator's steering to a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerUnit {
    pub unit: String,
    pub message: String,
    #[serde(default = "default_operator_severity")]
    pub severity: Severity,
}

fn default_operator_severity() -> Severity {
    Severity::Warning
}

impl Request for SteerUnit {
    const SERVICE: &'static str = SUPERVISOR;
    const VERB: &'static str = "steer";
    type Response = Steering;
}

/// One row of `xo units`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitSummary {
    pub unit: String,
    pub role: String,
    /// The health the XO assessed.
    pub health: Health,
    /// The health the unit reported for itself.
    pub self_health: Health,
    pub stale: bool,
    pub turn: u64,
    pub seq: u64,
    /// Milliseconds since the Unix epoch of the last report or heartbeat.
    pub last_seen: u64,
    #[serde(default)]
    pub task_id: Option<String>,
    pub context_fill: f64,
    pub steering_sent: u64,
    pub restarts: u32,
}

/// `xo units UNIT`: a summary, the latest report and the last steering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitDetail {
    pub summary: UnitSummary,
    pub report: Option<SaluteReport>,
    pub recent_steering: Vec<Steering>,
}

/// The supervisor's counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SupervisorStats {}

impl Request for SupervisorStats {
    const SERVICE: &'static str = SUPERVISOR;
    const VERB: &'static str = "stats";
    type Response = StatsReply;
}

/// Counters since the supervisor started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsReply {
    /// Reports received (bus and files).
    pub reports: u64,
    pub heartbeats: u64,
    /// Reports run through the radio check.
    pub evaluated: u64,
    /// Reports ignored as duplicates or out of order.
    pub duplicates: u64,
    /// Messages sent to the dead-letter subject.
    pub dead_letters: u64,
    pub steering: u64,
    pub units: u64,
    pub watcher_restarts: u64,
}
