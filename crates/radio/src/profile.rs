//! Role profiles: the doctrine thresholds and PACE plan of each role.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Thresholds of the radio check. Every field has the seed's default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Doctrine {
    /// How often a unit of this role sends a SALUTE report.
    pub salute_interval_turns: u32,
    /// Stall when `turns_since_progress` exceeds this.
    pub max_turns_without_progress: u32,
    /// Turns before the same anomaly may be steered again.
    pub cooldown_turns: u32,
    /// Tools that never count towards loop, oscillation or cascade.
    pub exempt_tools: Vec<String>,
    /// Loop: same action with the same error type this many times.
    pub loop_error_repeats: u32,
    /// Loop: same action with the same output this many times (3, seed
    /// 000's figure: on the 30 public real runs of `xo bench detection` it
    /// steers exactly what 4 does, and 5 misses the one loop OpenHands'
    /// rules catch).
    pub loop_output_repeats: u32,
    /// Context warning above this fill.
    pub context_warning: f64,
    /// Context urgent above this fill.
    pub context_urgent: f64,
    /// Condensations without progress before steering.
    pub max_condensations_without_progress: u32,
    /// Cascade: this many different failing tools...
    pub cascade_tools: u32,
    /// ...within this many last actions.
    pub cascade_window: u32,
    /// Identical messages in a row (no action between).
    pub monologue_repeats: u32,
    /// Empty replies in a row.
    pub empty_repeats: u32,
    /// Rules switched off for this role (their findings are dropped).
    pub disabled_rules: Vec<xo_proto::AnomalyKind>,
}

impl Default for Doctrine {
    fn default() -> Self {
        Self {
            salute_interval_turns: 3,
            max_turns_without_progress: 5,
            cooldown_turns: 3,
            exempt_tools: Vec::new(),
            loop_error_repeats: 3,
            loop_output_repeats: 3,
            context_warning: 0.80,
            context_urgent: 0.90,
            max_condensations_without_progress: 2,
            cascade_tools: 3,
            cascade_window: 5,
            monologue_repeats: 3,
            empty_repeats: 3,
            disabled_rules: Vec::new(),
        }
    }
}

/// A doctrine value out of its range: the field, and why.
#[derive(Debug, Clone, PartialEq)]
pub enum InvalidDoctrine {
    /// A count that must be at least 1.
    Zero(&'static str),
    /// `cascade_tools` above `cascade_window`.
    CascadeWider { tools: u32, window: u32 },
    /// A fill outside 0..1.
    Fill(&'static str, f64),
    /// `context_warning` above `context_urgent`.
    WarningAboveUrgent { warning: f64, urgent: f64 },
}

impl std::fmt::Display for InvalidDoctrine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Zero(name) => write!(f, "doctrine.{name} must be at least 1"),
            Self::CascadeWider { tools, window } => write!(
                f,
                "doctrine.cascade_tools ({tools}) exceeds doctrine.cascade_window ({window})"
            ),
            Self::Fill(name, v) => write!(f, "doctrine.{name} is {v}, must be within 0..1"),
            Self::WarningAboveUrgent { warning, urgent } => write!(
                f,
                "doctrine.context_warning ({warning}) exceeds doctrine.context_urgent ({urgent})"
            ),
        }
    }
}

impl std::error::Error for InvalidDoctrine {}

impl InvalidDoctrine {
    /// The field it names (`doctrine.cascade_tools`), for a config key.
    pub fn field(&self) -> String {
        match self {
            Self::Zero(name) | Self::Fill(name, _) => format!("doctrine.{name}"),
            Self::CascadeWider { .. } => "doctrine.cascade_tools".into(),
            Self::WarningAboveUrgent { .. } => "doctrine.context_warning".into(),
        }
    }
}

impl Doctrine {
    /// Checks the values; errors name the field.
    pub fn validate(&self) -> Result<(), InvalidDoctrine> {
        let positive = [
            ("salute_interval_turns", self.salute_interval_turns),
            (
                "max_turns_without_progress",
                self.max_turns_without_progress,
            ),
            ("loop_error_repeats", self.loop_error_repeats),
            ("loop_output_repeats", self.loop_output_repeats),
            ("cascade_tools", self.cascade_tools),
            ("cascade_window", self.cascade_window),
            ("monologue_repeats", self.monologue_repeats),
            ("empty_repeats", self.empty_repeats),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(InvalidDoctrine::Zero(name));
            }
        }
        if self.cascade_tools > self.cascade_window {
            return Err(InvalidDoctrine::CascadeWider {
                tools: self.cascade_tools,
                window: self.cascade_window,
            });
        }
        for (name, v) in [
            ("context_warning", self.context_warning),
            ("context_urgent", self.context_urgent),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(InvalidDoctrine::Fill(name, v));
            }
        }
        if self.context_warning > self.context_urgent {
            return Err(InvalidDoctrine::WarningAboveUrgent {
                warning: self.context_warning,
                urgent: self.context_urgent,
            });
        }
        Ok(())
    }
}

/// One level of the PACE plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaceLevel {
    pub description: String,
}

/// What a role does when its primary approach fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PacePlan {
    pub primary: PaceLevel,
    pub alternate: PaceLevel,
    pub contingent: PaceLevel,
    pub emergency: PaceLevel,
}

impl Default for PacePlan {
    fn default() -> Self {
        let level = |d: &str| PaceLevel {
            description: d.to_string(),
        };
        Self {
            primary: level("work the task as planned"),
            alternate: level("retry with a narrower step"),
            contingent: level("switch to a fundamentally different method or ask the operator"),
            emergency: level("stop, keep partial results and report"),
        }
    }
}

/// A role: doctrine plus PACE plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleProfile {
    pub doctrine: Doctrine,
    pub pace_plan: PacePlan,
}

/// The role external agents are checked as when they are imported or
/// watched (`xo import`, `xo watch`, `xo bench detection`): Claude Code,
/// Codex, Cursor, OpenHands and SWE-agent sessions.
pub const AGENT_ROLE: &str = "agent";

impl RoleProfile {
    /// The built-in profile of [`AGENT_ROLE`], measured on the public real
    /// runs in `tests/fixtures/real` (28 that succeeded, 1 that failed):
    /// the longest stretch without progress in a succeeded run has a
    /// median of 3 turns, 6 at the 90th percentile and 8 at most; the
    /// failed run's is 11. A stall is steered past 8 turns: no succeeded
    /// run is told it stalled, the failed one is.
    /// Configure `[roles.agent]` to change it.
    pub fn agent() -> Self {
        Self {
            doctrine: Doctrine {
                max_turns_without_progress: 8,
                ..Doctrine::default()
            },
            pace_plan: PacePlan::default(),
        }
    }
}

/// Profiles by role name, with a default for roles not listed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Roles {
    pub default: RoleProfile,
    pub by_name: BTreeMap<String, RoleProfile>,
}

impl Roles {
    pub fn new(default: RoleProfile, by_name: BTreeMap<String, RoleProfile>) -> Self {
        Self { default, by_name }
    }

    pub fn get(&self, role: &str) -> &RoleProfile {
        self.by_name.get(role).unwrap_or(&self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A doctrine out of range names its field, which a config key is made of.
    #[test]
    fn an_invalid_doctrine_names_its_field() {
        let mut d = Doctrine {
            cascade_tools: 6,
            cascade_window: 5,
            ..Doctrine::default()
        };
        let e = d.validate().unwrap_err();
        assert_eq!(
            e,
            InvalidDoctrine::CascadeWider {
                tools: 6,
                window: 5
            }
        );
        assert_eq!(e.field(), "doctrine.cascade_tools");
        assert!(
            e.to_string()
                .starts_with("doctrine.cascade_tools (6) exceeds")
        );
        d.cascade_tools = 3;
        d.loop_error_repeats = 0;
        assert_eq!(
            d.validate(),
            Err(InvalidDoctrine::Zero("loop_error_repeats"))
        );
        d.loop_error_repeats = 3;
        assert_eq!(d.validate(), Ok(()));
    }
}
