//! Operator settings over `xo.toml` (seed 004): which keys an operator may
//! change at run time, how a change is checked, and how the settings in
//! force are laid over a service's own configuration.
//!
//! A key is the dotted path of an [`XoConfig`] field. Applying settings
//! writes each value into the configuration's JSON form and reads it back,
//! so a value of the wrong type, an unknown field or a value `validate()`
//! refuses is an error naming the key. Only keys a running service reads
//! again per task or per report are settable: the bus, the store and the
//! listeners need a restart and are not here. Secrets never are (model keys
//! are named by environment variable, and those names are not settable).

use std::collections::BTreeMap;

use serde_json::Value;
use xo_proto::AnomalyKind;
use xo_proto::settings::{SettingKey, Settings};

use crate::{ConfigError, XoConfig};

/// Doctrine thresholds an operator may tune per role.
const DOCTRINE_NUMBERS: &[(&str, &str, &str)] = &[
    (
        "max_turns_without_progress",
        "integer",
        "stall: turns without progress before steering",
    ),
    (
        "loop_error_repeats",
        "integer",
        "loop: the same action failing the same way this many times",
    ),
    (
        "loop_output_repeats",
        "integer",
        "loop: the same action with the same output this many times",
    ),
    (
        "cooldown_turns",
        "integer",
        "turns before the same anomaly may be steered again",
    ),
    (
        "context_warning",
        "number",
        "context warning above this fill (0..1)",
    ),
    (
        "context_urgent",
        "number",
        "context urgent above this fill (0..1)",
    ),
    (
        "cascade_tools",
        "integer",
        "cascade: this many different failing tools…",
    ),
    (
        "cascade_window",
        "integer",
        "…within this many last actions",
    ),
];

/// Every key an operator may set, `<role>` and `<project>` standing for a name.
pub fn keys() -> Vec<SettingKey> {
    let k = |key: &str, kind: &str, help: &str| SettingKey {
        key: key.into(),
        kind: kind.into(),
        help: help.into(),
        choices: Vec::new(),
    };
    let mut v = vec![
        k(
            "supervisor.enabled",
            "bool",
            "supervision on/off: with off, reports are recorded but no rule runs and no steering is sent",
        ),
        k(
            "runner.global_template",
            "template",
            "global input template, first in every prompt",
        ),
        k(
            "runner.output_template",
            "template",
            "global output template: {status}, {message}, {task_id}, {output}",
        ),
        k(
            "runner.role_templates.<role>",
            "template",
            "role template, third in every prompt of that role",
        ),
        k(
            "projects.<project>.input_template",
            "template",
            "project input template, second in every prompt of that project (over the project's .xo/project.toml)",
        ),
        k(
            "projects.<project>.output_template",
            "template",
            "project output template (over project.toml and the global one)",
        ),
        SettingKey {
            choices: vec!["standard".into(), "long".into(), "extended".into()],
            ..k(
                "projects.<project>.timeout_profile",
                "choice",
                "the project's timeout profile: every task of the project runs under it, whatever profile the task names (over the project's .xo/project.toml)",
            )
        },
        k(
            "projects.<project>.allow_raw_output",
            "bool",
            "the project's results keep the agent's raw output, no output template applied (over the project's .xo/project.toml)",
        ),
        k(
            "projects.<project>.fail_on_violation",
            "bool",
            "a reply missing a required section fails the task (on) or blocks it for you (off) in this project (over project.toml and runner.fail_on_violation)",
        ),
        k(
            "runner.fail_on_violation",
            "bool",
            "a reply missing a required section fails the task (on) or blocks it for you (off)",
        ),
        k(
            "runner.helper_agent",
            "bool",
            "seed 003's helper agent: a free-text criterion judged not met is checked against the code by one more agent run giving verification commands (an extra agent run)",
        ),
        k(
            "runner.timeout_default_ms",
            "integer",
            "agent timeout of the standard (default) profile; 0: runner.timeouts.standard_ms",
        ),
        k(
            "runner.max_retries",
            "integer",
            "format retries, fix retries and clarifications per task",
        ),
        k(
            "runner.timeouts.standard_ms",
            "integer",
            "agent timeout of the standard profile",
        ),
        k(
            "runner.timeouts.long_ms",
            "integer",
            "agent timeout of the long profile",
        ),
        k(
            "runner.timeouts.extended_ms",
            "integer",
            "agent timeout of the extended profile",
        ),
        SettingKey {
            choices: vec!["resume".into(), "rollback".into()],
            ..k(
                "runner.restart_mode",
                "choice",
                "a task offered again after its runner died: resume from its checkpoint when it has one, or always roll back and replay",
            )
        },
        SettingKey {
            choices: AnomalyKind::ALL
                .iter()
                .filter(|a| !matches!(a, AnomalyKind::Operator | AnomalyKind::Stale))
                .map(|a| a.to_string())
                .collect(),
            ..k(
                "roles.<role>.doctrine.disabled_rules",
                "list",
                "radio rules switched off for this role",
            )
        },
        k(
            "review.enabled",
            "bool",
            "review supervisors on/off (read at each run)",
        ),
        k(
            "review.model.model",
            "string",
            "the reviewers' model (empty: reviews skipped)",
        ),
        k(
            "review.model.base_url",
            "string",
            "the reviewers' OpenAI-compatible endpoint",
        ),
        k(
            "review.daily_budget_usd",
            "number",
            "USD per UTC day across reviewers (0: no limit)",
        ),
        k(
            "review.project_budget_usd",
            "number",
            "USD per project across reviewers (0: no limit)",
        ),
    ];
    for (name, kind, help) in DOCTRINE_NUMBERS {
        v.push(k(&format!("roles.<role>.doctrine.{name}"), kind, help));
    }
    v
}

/// Why a setting is refused: its key, its value or its template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSetting {
    #[error("{key:?} is not a setting an operator may change at run time; settable: {settable}")]
    NotSettable { key: String, settable: String },
    /// A project value of the wrong kind: what it must be, what it was.
    #[error("{0}")]
    Value(ProjectValue),
    #[error("{key}: {len} bytes; a template may have at most 65536")]
    TemplateTooLong { key: String, len: usize },
    #[error("{key}: unknown placeholder {{{name}}}; an output template may use {allowed}")]
    Placeholder {
        key: String,
        name: String,
        allowed: String,
    },
}

/// A project setting's value that is not of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectValue {
    TimeoutProfile(String),
    NotBool(String),
    NotString(String),
}

impl std::fmt::Display for ProjectValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TimeoutProfile(v) => write!(f, "{v} is not standard, long or extended"),
            Self::NotBool(v) => write!(f, "must be true or false, got {v}"),
            Self::NotString(v) => write!(f, "must be a string, got {v}"),
        }
    }
}

/// Whether `key` names a settable key; an error says which keys are.
pub fn check_key(key: &str) -> Result<(), InvalidSetting> {
    let parts: Vec<&str> = key.split('.').collect();
    let named = |s: &str| xo_proto::validate_token("name", s).is_ok();
    let ok = match parts.as_slice() {
        [
            "projects",
            p,
            "input_template" | "output_template" | "timeout_profile" | "allow_raw_output"
            | "fail_on_violation",
        ] => named(p),
        ["runner", "role_templates", r] => named(r),
        ["roles", r, "doctrine", field] => {
            named(r)
                && (*field == "disabled_rules"
                    || DOCTRINE_NUMBERS.iter().any(|(n, _, _)| n == field))
        }
        _ => keys().iter().any(|k| k.key == key),
    };
    if ok {
        Ok(())
    } else {
        Err(InvalidSetting::NotSettable {
            key: key.to_string(),
            settable: keys()
                .iter()
                .map(|k| k.key.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Checks a project setting's value (they are not part of [`XoConfig`]:
/// the runner reads them per task).
fn check_project_value(key: &str, value: &Value) -> Result<(), InvalidSetting> {
    let wrong = match key.rsplit('.').next().unwrap_or_default() {
        "timeout_profile" => match value.as_str() {
            Some("standard" | "long" | "extended") => None,
            _ => Some(ProjectValue::TimeoutProfile(value.to_string())),
        },
        "allow_raw_output" | "fail_on_violation" => {
            (!value.is_boolean()).then(|| ProjectValue::NotBool(value.to_string()))
        }
        _ => (!value.is_string()).then(|| ProjectValue::NotString(value.to_string())),
    };
    wrong.map_or(Ok(()), |w| Err(InvalidSetting::Value(w)))
}

/// Writes `value` at the dotted `key` of a JSON object, making the objects
/// on the way (a new role starts from the default role's profile).
fn set_path(root: &mut Value, key: &str, value: Value) {
    let mut parts = key.split('.').peekable();
    let mut cur = root;
    while let Some(p) = parts.next() {
        let Some(obj) = cur.as_object_mut() else {
            return;
        };
        if parts.peek().is_none() {
            obj.insert(p.to_string(), value);
            return;
        }
        cur = obj
            .entry(p.to_string())
            .or_insert_with(|| Value::Object(Default::default()));
    }
}

fn get_path<'a>(root: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(root, |cur, p| cur.get(p))
}

/// The placeholders an output template may use (SUP-3).
pub const OUTPUT_PLACEHOLDERS: &[&str] = &["status", "message", "task_id", "output"];

/// Checks a template before it is saved: text, at most 64 KiB, and for an
/// output template only the placeholders the formatter fills.
pub fn check_template(key: &str, text: &str) -> Result<(), InvalidSetting> {
    if text.len() > 64 * 1024 {
        return Err(InvalidSetting::TemplateTooLong {
            key: key.to_string(),
            len: text.len(),
        });
    }
    if key.ends_with("output_template") {
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else { break };
            let name = &after[..close];
            let is_word =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if is_word && !OUTPUT_PLACEHOLDERS.contains(&name) {
                return Err(InvalidSetting::Placeholder {
                    key: key.to_string(),
                    name: name.to_string(),
                    allowed: OUTPUT_PLACEHOLDERS
                        .iter()
                        .map(|p| format!("{{{p}}}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            rest = &after[close + 1..];
        }
    }
    Ok(())
}

fn is_template(key: &str) -> bool {
    key.ends_with("_template") || key.starts_with("runner.role_templates.")
}

/// `base` with `settings` laid over it. Project template keys are not part
/// of [`XoConfig`] (the runner reads them from the settings per task).
pub fn apply(base: &XoConfig, settings: &Settings) -> Result<XoConfig, ConfigError> {
    apply_values(base, &settings.values)
}

fn apply_values(
    base: &XoConfig,
    values: &BTreeMap<String, Value>,
) -> Result<XoConfig, ConfigError> {
    let invalid = |key: &str, reason: String| ConfigError::Invalid {
        key: key.to_string(),
        reason,
    };
    let mut json = serde_json::to_value(base).map_err(|e| invalid("settings", e.to_string()))?;
    for (key, value) in values {
        check_key(key).map_err(|r| invalid(key, r.to_string()))?;
        if is_template(key)
            && let Some(text) = value.as_str()
        {
            check_template(key, text).map_err(|r| invalid(key, r.to_string()))?;
        }
        if key.starts_with("projects.") {
            check_project_value(key, value).map_err(|r| invalid(key, r.to_string()))?;
            continue;
        }
        // A role not in xo.toml starts from the default role's profile.
        if let ["roles", role, ..] = key.split('.').collect::<Vec<_>>().as_slice()
            && get_path(&json, &format!("roles.{role}")).is_none()
        {
            let default = get_path(&json, "roles.default")
                .cloned()
                .unwrap_or_default();
            set_path(&mut json, &format!("roles.{role}"), default);
        }
        set_path(&mut json, key, value.clone());
    }
    let cfg: XoConfig = serde_path_to_error::deserialize(json).map_err(|e| {
        let path = e.path().to_string();
        invalid(&path, e.into_inner().to_string())
    })?;
    cfg.validate()?;
    Ok(cfg)
}

/// Checks a change (`set`, `unset`) against `base` and the settings in
/// force; the values the change leaves.
pub fn change(
    base: &XoConfig,
    current: &Settings,
    set: &BTreeMap<String, Value>,
    unset: &[String],
) -> Result<BTreeMap<String, Value>, ConfigError> {
    let mut values = current.values.clone();
    for key in unset {
        check_key(key).map_err(|reason| ConfigError::Invalid {
            key: key.clone(),
            reason: reason.to_string(),
        })?;
        values.remove(key);
    }
    for (k, v) in set {
        values.insert(k.clone(), v.clone());
    }
    apply_values(base, &values)?;
    Ok(values)
}

/// The `xo.toml` value of every settable key that has one in `base` (role
/// keys for the roles `base` lists).
pub fn defaults(base: &XoConfig) -> BTreeMap<String, Value> {
    let json = serde_json::to_value(base).unwrap_or_default();
    let mut out = BTreeMap::new();
    for k in keys() {
        let expanded: Vec<String> = if k.key.contains("<role>") {
            let roles: Vec<String> = if k.key.starts_with("runner.role_templates") {
                base.runner.role_templates.keys().cloned().collect()
            } else {
                base.roles.keys().cloned().collect()
            };
            roles.iter().map(|r| k.key.replace("<role>", r)).collect()
        } else if k.key.contains('<') {
            Vec::new()
        } else {
            vec![k.key.clone()]
        };
        for key in expanded {
            if let Some(v) = get_path(&json, &key) {
                out.insert(key, v.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused setting says which way, in the words the operator sees.
    #[test]
    fn a_refused_setting_says_which_way() {
        assert!(matches!(
            check_key("nats.url"),
            Err(InvalidSetting::NotSettable { key, .. }) if key == "nats.url"
        ));
        let e = check_template("projects.web.output_template", "{status} {secret}").unwrap_err();
        assert!(matches!(&e, InvalidSetting::Placeholder { name, .. } if name == "secret"));
        assert!(
            e.to_string().contains("unknown placeholder {secret}"),
            "{e}"
        );
        assert_eq!(
            check_project_value("projects.web.allow_raw_output", &serde_json::json!("yes")),
            Err(InvalidSetting::Value(ProjectValue::NotBool(
                "\"yes\"".into()
            )))
        );
        assert_eq!(
            check_project_value("projects.web.timeout_profile", &serde_json::json!("long")),
            Ok(())
        );
    }

    fn settings(pairs: &[(&str, Value)]) -> Settings {
        Settings {
            version: 1,
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            ..Settings::default()
        }
    }

    #[test]
    fn values_land_in_the_config() {
        let base = XoConfig::default();
        let s = settings(&[
            ("runner.global_template", Value::from("G")),
            ("supervisor.enabled", Value::from(false)),
            ("roles.coder.doctrine.loop_error_repeats", Value::from(7)),
            (
                "roles.tester.doctrine.disabled_rules",
                serde_json::json!(["stall"]),
            ),
            ("runner.restart_mode", Value::from("rollback")),
        ]);
        let cfg = apply(&base, &s).unwrap();
        assert_eq!(cfg.runner.global_template, "G");
        assert!(!cfg.supervisor.enabled);
        assert_eq!(cfg.roles["coder"].doctrine.loop_error_repeats, 7);
        // A role xo.toml does not list starts from the default profile.
        assert_eq!(
            cfg.roles["tester"].doctrine.disabled_rules,
            vec![AnomalyKind::Stall]
        );
        assert_eq!(
            cfg.roles["tester"].doctrine.max_turns_without_progress,
            base.roles["default"].doctrine.max_turns_without_progress
        );
        assert_eq!(
            cfg.runner.restart_mode,
            crate::config::RestartMode::Rollback
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let base = XoConfig::default();
        let cases = [
            (
                "supervisor.enabled",
                Value::from("yes"),
                "supervisor.enabled",
            ),
            ("nats.url", Value::from("nats://x"), "nats.url"),
            (
                "roles.coder.doctrine.context_warning",
                Value::from(1.5),
                "context_warning",
            ),
            (
                "runner.restart_mode",
                Value::from("sometimes"),
                "restart_mode",
            ),
            ("projects.p.input_template", Value::from(3), "projects.p"),
            ("projects.../x.input_template", Value::from("t"), "projects"),
        ];
        for (key, v, named) in cases {
            let err = apply(&base, &settings(&[(key, v)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{key}: {err}");
        }
    }

    #[test]
    fn retries_and_urls_are_checked_for_sense() {
        let base = XoConfig::default();
        for (key, v, says) in [
            ("runner.max_retries", Value::from(999), "1 to 20"),
            ("runner.max_retries", Value::from(0), "1 to 20"),
            (
                "review.model.base_url",
                Value::from("not a url"),
                "is not a URL",
            ),
            (
                "review.model.base_url",
                Value::from("http://"),
                "is not a URL",
            ),
            (
                "review.model.base_url",
                Value::from("http://a host/v1"),
                "is not a URL",
            ),
            (
                "review.model.base_url",
                Value::from("ftp://host/v1"),
                "scheme \"ftp\"",
            ),
            (
                "review.model.base_url",
                Value::from("http://[::1/v1"),
                "is not a URL",
            ),
        ] {
            let err = apply(&base, &settings(&[(key, v)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(says), "{key}: {err}");
        }
        apply(
            &base,
            &settings(&[
                ("runner.max_retries", Value::from(5)),
                (
                    "review.model.base_url",
                    Value::from("https://api.example.com/v1"),
                ),
            ]),
        )
        .unwrap();
    }

    #[test]
    fn project_rules_take_their_own_kinds_of_value() {
        let base = XoConfig::default();
        apply(
            &base,
            &settings(&[
                ("projects.p.timeout_profile", Value::from("long")),
                ("projects.p.allow_raw_output", Value::from(true)),
                ("projects.p.fail_on_violation", Value::from(false)),
                ("runner.fail_on_violation", Value::from(false)),
                ("runner.timeout_default_ms", Value::from(60_000)),
            ]),
        )
        .unwrap();
        for (key, v, says) in [
            (
                "projects.p.timeout_profile",
                Value::from("forever"),
                "standard, long or extended",
            ),
            (
                "projects.p.allow_raw_output",
                Value::from("yes"),
                "true or false",
            ),
            (
                "projects.p.fail_on_violation",
                Value::from(1),
                "true or false",
            ),
            ("projects.p.input_template", Value::from(true), "a string"),
        ] {
            let err = apply(&base, &settings(&[(key, v)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(says), "{key}: {err}");
        }
        let cfg = apply(
            &base,
            &settings(&[("runner.timeout_default_ms", Value::from(60_000))]),
        )
        .unwrap();
        assert_eq!(
            cfg.runner
                .timeout_ms(xo_proto::queue::TimeoutProfile::Standard),
            60_000
        );
    }

    #[test]
    fn output_templates_may_use_only_the_known_placeholders() {
        let base = XoConfig::default();
        let ok = settings(&[(
            "projects.p.output_template",
            Value::from("{status}: {message} ({task_id}) {output} {not a placeholder}"),
        )]);
        apply(&base, &ok).unwrap();
        let bad = settings(&[("runner.output_template", Value::from("{stauts}: {message}"))]);
        let err = apply(&base, &bad).unwrap_err().to_string();
        assert!(
            err.contains("{stauts}") && err.contains("{status}"),
            "{err}"
        );
        // Input templates are free text.
        apply(
            &base,
            &settings(&[("runner.global_template", Value::from("{anything}"))]),
        )
        .unwrap();
    }

    #[test]
    fn change_unsets_and_keeps_the_rest() {
        let base = XoConfig::default();
        let cur = settings(&[
            ("runner.global_template", Value::from("G")),
            ("runner.max_retries", Value::from(1)),
        ]);
        let mut set = BTreeMap::new();
        set.insert("runner.output_template".to_string(), Value::from("O"));
        let v = change(&base, &cur, &set, &["runner.max_retries".into()]).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v["runner.global_template"], "G");
        assert!(!v.contains_key("runner.max_retries"));
    }

    #[test]
    fn defaults_list_roles_and_plain_keys() {
        let d = defaults(&XoConfig::default());
        assert_eq!(d["supervisor.enabled"], Value::from(true));
        assert_eq!(d["roles.coder.doctrine.loop_error_repeats"], Value::from(3));
        assert!(d.keys().all(|k| !k.contains('<')));
        for k in d.keys() {
            check_key(k).unwrap();
        }
    }
}
