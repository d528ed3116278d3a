//! Operator settings (seed 004's settings UI): values an operator changes at
//! run time, layered over each service's `xo.toml`. The queue keeps them
//! durably and versioned (every change is an audit line), hands them to each
//! claim, and publishes every change on `xo.event.settings`, so a new value
//! applies from the next task and the next report without a restart.
//!
//! A value is addressed by its dotted config key (`runner.global_template`,
//! `roles.coder.doctrine.loop_error_repeats`); which keys may be set, and how
//! they are checked, is `xo_runtime::settings`. Project templates have keys
//! of their own: `projects.<project>.input_template` and
//! `projects.<project>.output_template` (over the project's `project.toml`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The settings now in force: a version and the values set (dotted key →
/// JSON value). Keys not here come from `xo.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Settings {
    /// 0 before the first change; +1 a change.
    pub version: u64,
    #[serde(default)]
    pub values: BTreeMap<String, serde_json::Value>,
    /// Milliseconds since the Unix epoch of the last change.
    #[serde(default)]
    pub updated_at: u64,
    /// Who made the last change (`console`, `cli`, …).
    #[serde(default)]
    pub updated_by: String,
}

impl Settings {
    /// The project template `kind` (`input_template`, `output_template`) of
    /// `project`, if an operator set it.
    pub fn project_template(&self, project: &str, kind: &str) -> Option<&str> {
        self.values
            .get(&format!("projects.{project}.{kind}"))
            .and_then(|v| v.as_str())
    }

    /// A project's on/off setting (`allow_raw_output`, `fail_on_violation`).
    pub fn project_flag(&self, project: &str, kind: &str) -> Option<bool> {
        self.values
            .get(&format!("projects.{project}.{kind}"))
            .and_then(|v| v.as_bool())
    }

    /// A project's timeout profile, when the operator set one.
    pub fn project_timeout_profile(&self, project: &str) -> Option<TimeoutProfile> {
        self.values
            .get(&format!("projects.{project}.timeout_profile"))
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }
}

// How long a task may run: its profile's timeout (`runner.timeouts`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutProfile {
    #[default]
    Standard,
    Long,
    Extended,
}

/// Published on `xo.event.settings` after every change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SettingsChanged {
    pub v: u16,
    pub settings: Settings,
    /// The keys this change set or unset.
    pub changed: Vec<String>,
}

impl crate::Message for SettingsChanged {
    const NAME: &'static str = "SettingsChanged";
    fn version(&self) -> u16 {
        self.v
    }
}

/// Ask for the settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GetSettings {}

/// Change settings: set some keys, unset others (back to `xo.toml`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSettings {
    #[serde(default)]
    pub set: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub unset: Vec<String>,
    /// The version this change was made against; if another change landed
    /// since, the put is refused (reload and try again).
    #[serde(default)]
    pub base_version: Option<u64>,
    #[serde(default)]
    pub by: String,
}

/// One key an operator may set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SettingKey {
    /// The dotted key, with `<role>` or `<project>` where a name goes.
    pub key: String,
    /// `bool`, `integer`, `number`, `string`, `template`, `list`, `choice`.
    pub kind: String,
    pub help: String,
    /// For `choice`: the values allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
}

/// The settings, with where every value comes from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SettingsView {
    pub settings: Settings,
    /// Every settable key's value in the serving queue's `xo.toml` (its defaults).
    pub defaults: BTreeMap<String, serde_json::Value>,
    /// The keys that may be set.
    pub keys: Vec<SettingKey>,
}
