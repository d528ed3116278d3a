//! The fleet manager's contract: runner containers per role, `xo fleet`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const FLEET: &str = "fleet";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetUnit {
    pub unit: String,
    pub role: String,
    pub running: bool,
    pub container: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetStatus {
    pub backend: String,
    pub desired: BTreeMap<String, u32>,
    pub units: Vec<FleetUnit>,
    /// Roles past their restart intensity: not restarted until scaled again.
    pub failed: Vec<String>,
}

/// Published on `xo.event.fleet.<role>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetEvent {
    pub v: u16,
    /// `created`, `restarted`, `removed`, `role_failed` or `error`.
    pub kind: String,
    pub role: String,
    #[serde(default)]
    pub unit: Option<String>,
    pub detail: String,
    pub at: u64,
}

impl crate::Message for FleetEvent {
    const NAME: &'static str = "FleetEvent";
    fn version(&self) -> u16 {
        self.v
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetLs {}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetScale {
    pub role: String,
    pub replicas: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetRestart {
    pub unit: String,
}

crate::api! {
    /// The fleet manager's control API (`xo.ctl.fleet.<verb>`, NATS micro
    /// service `xo-fleet`).
    pub enum FleetApi for FLEET {
        Ls(FleetLs) => "ls" -> FleetStatus;
        Scale(FleetScale) => "scale" -> FleetStatus;
        Restart(FleetRestart) => "restart" -> FleetStatus;
    }
}
