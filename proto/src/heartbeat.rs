//! Liveness pings a unit sends between reports.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::codec::Message;

/// Published on `xo.heartbeat.<unit>`; proves liveness without a full report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Heartbeat {
    pub v: u16,
    pub unit: String,
    #[serde(default)]
    pub role: String,
    /// Milliseconds since the Unix epoch.
    #[serde(default)]
    pub at: u64,
    #[serde(default)]
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

impl Message for Heartbeat {
    const NAME: &'static str = "Heartbeat";
    fn version(&self) -> u16 {
        self.v
    }
}

impl Heartbeat {
    pub fn new(unit: impl Into<String>, role: impl Into<String>, seq: u64) -> Self {
        Self {
            v: crate::PROTOCOL_VERSION,
            unit: unit.into(),
            role: role.into(),
            at: crate::now_ms(),
            seq,
            task_id: None,
        }
    }
}
