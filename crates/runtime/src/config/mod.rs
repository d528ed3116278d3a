//! Layered configuration: defaults → file → environment → flags.
//!
//! - this file: [`XoConfig`], loading and the paths it derives;
//! - `fabric`: `org`, `nats`, `state`, `wire`, `telemetry`;
//! - `supervisor`, `queue`, `runner`: their sections;
//! - `services`: `console`, `knowledge`, `review`, `store`, `alerts`, `fleet`;
//! - `validate`: every key checked, errors naming the key.

mod fabric;
mod queue;
mod runner;
mod services;
mod supervisor;
mod validate;

pub use fabric::*;
pub use queue::*;
pub use runner::*;
pub use services::*;
pub use supervisor::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xo_proto::Format;
use xo_radio::{RoleProfile, Roles};

/// Errors name the key (or file) that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config: {0}")]
    Load(String),
    #[error("config key {key}: {reason}")]
    Invalid { key: String, reason: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct XoConfig {
    pub org: OrgConfig,
    pub nats: NatsConfig,
    pub state: StateConfig,
    pub wire: WireConfig,
    pub telemetry: TelemetryConfig,
    pub supervisor: SupervisorConfig,
    pub queue: QueueConfig,
    pub runner: RunnerConfig,
    pub knowledge: KnowledgeConfig,
    pub review: ReviewConfig,
    pub fleet: FleetConfig,
    pub alerts: AlertsConfig,
    pub store: StoreConfig,
    pub console: ConsoleConfig,
    /// What `xo hook claude` / `xo hook codex` answer on their own.
    pub hooks: HooksConfig,
    /// Role profiles by name; `default` applies to roles not listed.
    pub roles: BTreeMap<String, RoleProfile>,
}

impl Default for XoConfig {
    fn default() -> Self {
        let mut roles = BTreeMap::new();
        for role in [
            "default",
            "coder",
            "architect",
            "reviewer",
            xo_proto::queue::MANAGER_ROLE,
        ] {
            roles.insert(role.to_string(), RoleProfile::default());
        }
        Self {
            org: OrgConfig::default(),
            nats: NatsConfig::default(),
            state: StateConfig::default(),
            wire: WireConfig::default(),
            telemetry: TelemetryConfig::default(),
            supervisor: SupervisorConfig::default(),
            queue: QueueConfig::default(),
            runner: RunnerConfig::default(),
            knowledge: KnowledgeConfig::default(),
            review: ReviewConfig::default(),
            fleet: FleetConfig::default(),
            alerts: AlertsConfig::default(),
            store: StoreConfig::default(),
            console: ConsoleConfig::default(),
            hooks: HooksConfig::default(),
            roles,
        }
    }
}

impl XoConfig {
    /// Where the knowledge folder lives.
    pub fn knowledge_dir(&self) -> PathBuf {
        if self.knowledge.dir.is_empty() {
            self.state.dir.join("knowledge")
        } else {
            PathBuf::from(&self.knowledge.dir)
        }
    }

    /// Where projects' working trees live.
    pub fn sandbox_dir(&self) -> PathBuf {
        if self.runner.sandbox.is_empty() {
            self.state.dir.join("sandbox")
        } else {
            PathBuf::from(&self.runner.sandbox)
        }
    }

    /// Where audit logs live.
    pub fn data_dir(&self) -> PathBuf {
        if self.queue.data_dir.is_empty() {
            self.state.dir.join("data")
        } else {
            PathBuf::from(&self.queue.data_dir)
        }
    }

    /// Roles tasks may name: every configured role but `default`.
    pub fn task_roles(&self) -> std::collections::BTreeSet<String> {
        self.roles
            .keys()
            .filter(|r| *r != "default")
            .cloned()
            .collect()
    }

    /// Loads defaults → `file` (or `./xo.toml` if present) → `XO__SECTION__KEY`
    /// environment → `overrides` (`section.key`, value), then validates.
    pub fn load(file: Option<&Path>, overrides: &[(String, String)]) -> Result<Self, ConfigError> {
        let load = |e: config::ConfigError| ConfigError::Load(e.to_string());
        let defaults = config::Config::try_from(&XoConfig::default()).map_err(load)?;
        let mut b = config::Config::builder().add_source(defaults);
        match file {
            Some(path) => {
                if !path.exists() {
                    return Err(ConfigError::Load(format!(
                        "config file {} does not exist",
                        path.display()
                    )));
                }
                b = b.add_source(config::File::from(path).format(config::FileFormat::Toml));
            }
            None => {
                b = b.add_source(
                    config::File::with_name("xo.toml")
                        .format(config::FileFormat::Toml)
                        .required(false),
                );
            }
        }
        b = b.add_source(
            config::Environment::with_prefix("XO")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true),
        );
        for (k, v) in overrides {
            b = b.set_override(k.as_str(), v.as_str()).map_err(load)?;
        }
        let mut cfg: XoConfig = b.build().map_err(load)?.try_deserialize().map_err(load)?;
        cfg.validate()?;
        if cfg.nats.password.is_empty() && !cfg.nats.password_file.is_empty() {
            let invalid = |reason: String| ConfigError::Invalid {
                key: "nats.password_file".into(),
                reason,
            };
            let path = expand_env(&cfg.nats.password_file).map_err(|e| invalid(e.to_string()))?;
            let text =
                std::fs::read_to_string(&path).map_err(|e| invalid(format!("{path}: {e}")))?;
            cfg.nats.password = text.trim_end_matches(['\n', '\r']).to_string();
            if cfg.nats.password.is_empty() {
                return Err(invalid(format!("{path} is empty")));
            }
        }
        Ok(cfg)
    }

    /// Role profiles for the radio check.
    pub fn roles(&self) -> Roles {
        let mut by_name = self.roles.clone();
        let default = by_name.remove("default").unwrap_or_default();
        // External agents' role: measured defaults unless configured.
        by_name
            .entry(xo_radio::AGENT_ROLE.to_string())
            .or_insert_with(xo_radio::RoleProfile::agent);
        Roles::new(default, by_name)
    }

    pub fn subjects(&self) -> xo_proto::Subjects {
        xo_proto::Subjects::new(&self.org.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_toml(text: &str) -> Result<XoConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("xo.toml");
        std::fs::write(&p, text).unwrap();
        XoConfig::load(Some(&p), &[])
    }

    /// `nats.password_file` names the variable it could not expand, or
    /// the bracket left open, by case; the config error names the key.
    #[test]
    fn an_unexpandable_password_file_says_which_way() {
        use super::fabric::{EnvError, expand_env};
        assert_eq!(
            expand_env("$(XO_TEST_SURELY_UNSET_VAR)/p"),
            Err(EnvError::Unset("XO_TEST_SURELY_UNSET_VAR".into()))
        );
        assert_eq!(expand_env("${HOME"), Err(EnvError::Unclosed('{')));
        assert_eq!(expand_env("$(HOME"), Err(EnvError::Unclosed('(')));
        assert_eq!(expand_env("a$b").unwrap(), "a$b");
        let e = load_toml("[nats]\npassword_file = \"$(XO_TEST_SURELY_UNSET_VAR)\"\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "config key nats.password_file: environment variable XO_TEST_SURELY_UNSET_VAR is not set"
        );
    }

    #[test]
    fn defaults_are_valid() {
        XoConfig::default().validate().unwrap();
        assert_eq!(XoConfig::default().supervisor.stale_after_ms, 30_000);
    }

    #[test]
    fn file_then_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("xo.toml");
        std::fs::write(
            &p,
            "[supervisor]\nstale_after_ms = 5000\n[roles.coder.doctrine]\ncooldown_turns = 5\nexempt_tools = [\"wait\"]\n[roles.coder.pace_plan.contingent]\ndescription = \"ask the reviewer\"\n",
        )
        .unwrap();
        let cfg = XoConfig::load(Some(&p), &[("supervisor.tick_ms".into(), "250".into())]).unwrap();
        assert_eq!(cfg.supervisor.stale_after_ms, 5000);
        assert_eq!(cfg.supervisor.tick_ms, 250);
        let roles = cfg.roles();
        assert_eq!(roles.get("coder").doctrine.cooldown_turns, 5);
        assert_eq!(roles.get("coder").doctrine.exempt_tools, vec!["wait"]);
        assert_eq!(
            roles.get("coder").pace_plan.contingent.description,
            "ask the reviewer"
        );
        assert_eq!(
            roles.get("other").doctrine.cooldown_turns,
            3,
            "unlisted roles get the default"
        );
    }

    /// Issue 39: where a task's work goes is checked at start.
    #[test]
    fn merge_modes_say_what_they_need() {
        let cfg = load_toml("[runner]\nmerge = \"merge\"\n").unwrap();
        assert_eq!(cfg.runner.merge, MergeMode::Merge);
        assert_eq!(cfg.runner.isolation, Isolation::Worktree);
        let e = load_toml("[runner]\nmerge = \"push\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("runner.push_remote"), "{e}");
        let e = load_toml("[runner]\nisolation = \"directory\"\nmerge = \"merge\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("runner.merge") && e.contains("worktree"), "{e}");
        let e = load_toml("[runner]\nmerge = \"rebase\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("runner.merge"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let e = load_toml("[supervisor]\nstale_after_ms = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("supervisor.stale_after_ms"), "{e}");
        let e = load_toml("[supervisor]\nstale_afterr_ms = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stale_afterr_ms"), "{e}");
        let e = load_toml("[org]\nprefix = \"a b\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("org.prefix"), "{e}");
        let e = load_toml("[supervisor]\npartitions = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("supervisor.partitions"), "{e}");
        let e = load_toml("[supervisor]\npartitions = 4\npartition_lease_ms = 10\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("supervisor.partition_lease_ms"), "{e}");
        let e = load_toml("[supervisor]\npartitions = 4\nreport_retention_ms = 20000\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("supervisor.report_retention_ms") && e.contains("25000 ms"),
            "{e}"
        );
        let e = load_toml("[supervisor]\ninstance = \"a.b\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("supervisor.instance"), "{e}");
        let e = load_toml("[roles.coder.doctrine]\ncontext_warning = 1.5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("roles.coder.doctrine.context_warning"), "{e}");
        let e = load_toml("[nats]\nurl = \"http://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nats.url"), "{e}");
        for (toml, key) in [
            (
                "[console]\nlisten = \"0.0.0.0:7878\"\nopen_reads = true\n",
                "console.open_reads",
            ),
            (
                "[console]\nmax_connections = 0\n",
                "console.max_connections",
            ),
            (
                "[console]\nmax_connections = 8\nmax_event_streams = 8\n",
                "console.max_event_streams",
            ),
        ] {
            let e = load_toml(toml).unwrap_err().to_string();
            assert!(e.contains(key), "{toml}: {e}");
        }
        assert!(load_toml("[console]\nopen_reads = true\n").is_ok());
        let e = load_toml("[supervisor\n").unwrap_err().to_string();
        assert!(e.contains("xo.toml"), "{e}");
        let missing = XoConfig::load(Some(Path::new("/nonexistent/xo.toml")), &[]).unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/xo.toml"));
    }

    /// Issue 43: past `persist_writes_per_s` a unit's state is written less
    /// often; sharded, never past what a take-over reads back.
    #[test]
    fn a_units_state_is_written_less_often_past_the_write_budget() {
        let mut s = SupervisorConfig::default();
        // 4,000 writes a second: 20,000 units at 5 s; more units, longer.
        assert_eq!(s.persist_every_ms(0), 5_000);
        assert_eq!(s.persist_every_ms(20_000), 5_000);
        assert_eq!(s.persist_every_ms(20_001), 5_001);
        assert_eq!(s.persist_every_ms(100_000), 25_000);
        // No budget: the interval whatever the fleet.
        s.persist_writes_per_s = 0;
        assert_eq!(s.persist_every_ms(1_000_000), 5_000);
        // Sharded: never past what a take-over reads back (retention less
        // two leases), never below the interval.
        s.persist_writes_per_s = 4_000;
        s.partitions = 4;
        s.report_retention_ms = 40_000;
        assert_eq!(s.persist_every_ms(100_000), 20_000);
        s.report_retention_ms = 25_000;
        assert_eq!(s.persist_every_ms(100_000), 5_000);
    }

    /// The reference `deploy/config/xo.toml` says it holds "every key at
    /// its default unless noted": every key of the code's defaults is in it
    /// (roles: the `default` role's, whole; the others inherit the code's
    /// profile and name what they change), at the code's value unless it is
    /// one of the examples noted here. A key added to the code without the
    /// reference, or a default changed in one place only, fails here.
    #[test]
    fn the_reference_config_names_every_key_at_its_default() {
        // Set apart on purpose (the file's comments say they are examples).
        const NOTED: &[(&str, &str)] = &[
            (
                "runner.role_templates.coder",
                "an example role template, empty",
            ),
            (
                "roles.coder.doctrine.max_turns_without_progress",
                "the example coder stalls later",
            ),
            (
                "roles.coder.doctrine.exempt_tools",
                "the example coder polls CI with `wait`",
            ),
            (
                "roles.coder.pace_plan.contingent",
                "the example coder's contingent plan",
            ),
        ];
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/xo.toml");
        let file: serde_json::Value = config::Config::builder()
            .add_source(config::File::from(p.as_path()))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap();
        let defaults = serde_json::to_value(XoConfig::default()).unwrap();
        let loaded = serde_json::to_value(XoConfig::load(Some(&p), &[]).unwrap()).unwrap();
        fn leaves(v: &serde_json::Value, path: String, out: &mut Vec<String>) {
            match v.as_object() {
                Some(o) if !o.is_empty() => {
                    for (k, v) in o {
                        let p = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        leaves(v, p, out);
                    }
                }
                _ => out.push(path),
            }
        }
        let at = |v: &serde_json::Value, path: &str| -> Option<serde_json::Value> {
            path.split('.')
                .try_fold(v.clone(), |v, k| v.get(k).cloned())
        };
        let (mut keys, mut set) = (Vec::new(), Vec::new());
        leaves(&defaults, String::new(), &mut keys);
        leaves(&loaded, String::new(), &mut set);
        let missing: Vec<&String> = keys
            .iter()
            .filter(|k| !k.starts_with("roles.") || k.starts_with("roles.default."))
            .filter(|k| at(&file, k).is_none())
            .collect();
        assert!(missing.is_empty(), "keys the reference lacks: {missing:#?}");
        let differ: Vec<String> = set
            .iter()
            .filter(|k| !NOTED.iter().any(|(n, _)| k.starts_with(n)))
            .filter(|k| at(&loaded, k) != at(&defaults, k))
            .map(|k| {
                format!(
                    "{k} = {:?} (the code's: {:?})",
                    at(&loaded, k),
                    at(&defaults, k)
                )
            })
            .collect();
        assert!(
            differ.is_empty(),
            "values the reference sets apart, not noted: {differ:#?}"
        );
    }

    #[test]
    fn shipped_example_config_is_valid() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/xo.toml");
        let cfg = XoConfig::load(Some(&p), &[]).unwrap();
        assert!(cfg.roles.contains_key("coder"));
    }
}
