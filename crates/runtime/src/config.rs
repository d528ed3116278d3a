//! Layered configuration: defaults → file → environment → flags.

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
            roles,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrgConfig {
    /// Subject prefix; several organisations can share one NATS.
    pub prefix: String,
}

impl Default for OrgConfig {
    fn default() -> Self {
        Self {
            prefix: xo_proto::subject::DEFAULT_PREFIX.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// Empty: the embedded in-process bus.
    pub url: String,
    pub user: String,
    pub password: String,
    /// Replies arrive under this prefix (default `_INBOX`; a runner with
    /// credentials uses `_INBOX_<unit>`, see `xo nats-config`).
    pub inbox_prefix: String,
    /// A file holding the password (a mounted Secret), read at start when
    /// `password` is empty. `$(NAME)` and `${NAME}` are replaced by the
    /// environment variable (e.g. `/etc/xo-nats/${XO_UNIT}`).
    pub password_file: String,
    /// TLS: the CA certificate (PEM) that signed the server's; set, TLS is
    /// required. With `tls_cert_file` and `tls_key_file` this client also
    /// shows its own certificate (servers that verify clients).
    pub tls_ca_file: String,
    pub tls_cert_file: String,
    pub tls_key_file: String,
    /// Copies of each key-value bucket and stream XO creates: 1 on one
    /// server, 3 on a three-node cluster (JetStream R3). Existing ones are
    /// used as they are and reported when they have fewer.
    pub replicas: usize,
    /// How often the client pings its server: a server cut off the network
    /// (no reset, no close) is noticed after two unanswered pings, and the
    /// client moves to another node of the cluster.
    pub ping_interval_ms: u64,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            user: String::new(),
            password: String::new(),
            inbox_prefix: String::new(),
            password_file: String::new(),
            tls_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            replicas: 1,
            ping_interval_ms: 5_000,
        }
    }
}

/// `$(NAME)` and `${NAME}` replaced by the environment's values.
fn expand_env(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        let close = match tail.chars().next() {
            Some('(') => ')',
            Some('{') => '}',
            _ => {
                out.push('$');
                rest = tail;
                continue;
            }
        };
        let Some(end) = tail.find(close) else {
            return Err(format!("unclosed ${}", &tail[..1]));
        };
        let name = &tail[1..end];
        let v =
            std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))?;
        out.push_str(&v);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// Where the embedded store and the bus socket live.
    pub dir: PathBuf,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from(".xo"),
        }
    }
}

impl StateConfig {
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join("bus.sock")
    }
    /// The console's bearer token when `console.token_file` names none.
    pub fn console_token_path(&self) -> PathBuf {
        self.dir.join("console.token")
    }
    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("state")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WireConfig {
    /// What XO sends: `msgpack` (default) or `json`. Both are always accepted.
    pub format: Format,
    /// Largest payload accepted, in bytes.
    pub max_payload: usize,
}

impl Default for WireConfig {
    fn default() -> Self {
        Self {
            format: Format::Msgpack,
            max_payload: xo_proto::codec::DEFAULT_MAX_PAYLOAD,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Pretty,
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    pub log_format: LogFormat,
    /// A `tracing` filter, e.g. `info` or `xo_supervisor=debug,info`; `RUST_LOG` wins.
    pub log_level: String,
    /// OTLP/gRPC endpoint, e.g. `http://localhost:4317`; empty: no export.
    pub otlp_endpoint: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Pretty,
            log_level: "info".into(),
            otlp_endpoint: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorConfig {
    /// With supervision disabled the supervisor subscribes to nothing and starts no timers.
    pub enabled: bool,
    /// A unit with no report or heartbeat for this long is stale.
    pub stale_after_ms: u64,
    /// A unit silent for this long is forgotten: its watcher stopped, its
    /// state deleted from the store, counted (`evicted` in the stats). A
    /// unit that reports again starts afresh. 0: never (memory grows with
    /// every unit ever seen, about 14 KB each).
    pub unit_retention_ms: u64,
    /// How often liveness is checked.
    pub tick_ms: u64,
    /// How often pending unit state is written to the store.
    pub flush_interval_ms: u64,
    /// A unit's state is handed for writing at most this often (plus at
    /// stop, on stale and on operator steering): a crash loses at most this much.
    pub persist_interval_ms: u64,
    /// Watcher restarts allowed within `restart_window_ms` before escalating.
    pub max_restarts: u32,
    pub restart_window_ms: u64,
    /// Macrocosm file mode: a shared volume with `reports/` and `steering/`; empty: off.
    pub volume: String,
    /// How often the volume's reports are polled.
    pub file_poll_ms: u64,
    /// Steering messages kept per unit for `xo units UNIT`.
    pub steering_history: usize,
    /// Directories of live agent transcripts the XO's process watches
    /// (`[[supervisor.watch]]`, as `xo watch` does), for containers.
    pub watch: Vec<WatchConfig>,
    /// Sharded supervision: the units' reports are spread over this many
    /// partitions by the NATS server's subject mapping (`xo nats-config
    /// --partitions N`), and every `xo serve supervisor` with the same value
    /// takes a share of them. 1: one supervisor sees every unit.
    pub partitions: u32,
    /// A partition whose holder has not renewed its lease for this long is
    /// taken over by another supervisor (sharded supervision only).
    pub partition_lease_ms: u64,
    /// Sharded supervision: how long NATS keeps the units' reports (the
    /// stream `<PREFIX>_REPORTS`). A supervisor that takes over a partition,
    /// or whose own node went away, reads on from what is kept: at least
    /// two partition leases and a persist interval.
    pub report_retention_ms: u64,
    /// ... and at most this many MiB of them (the oldest go first).
    pub report_retention_mb: u64,
    /// This supervisor's name among the sharded ones (empty: host, pid and
    /// a random suffix). Letters, digits, '-' and '_'.
    pub instance: String,
}

/// One `[[supervisor.watch]]`: a format and the directories of its sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchConfig {
    /// `claude`, `cursor`, `codex` or `openhands`.
    pub format: String,
    pub dirs: Vec<String>,
    /// The role the sessions are checked as (`agent`: thresholds measured
    /// on real runs).
    pub role: String,
    pub poll_ms: u64,
    /// Read the sessions already there from their start (reported, never
    /// steered); by default the watch starts at their end.
    pub from_start: bool,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            format: String::new(),
            dirs: Vec::new(),
            role: xo_radio::AGENT_ROLE.into(),
            poll_ms: 500,
            from_start: false,
        }
    }
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            stale_after_ms: 30_000,
            unit_retention_ms: 24 * 60 * 60 * 1000,
            tick_ms: 1_000,
            flush_interval_ms: 200,
            persist_interval_ms: 5_000,
            max_restarts: 5,
            restart_window_ms: 10_000,
            volume: String::new(),
            file_poll_ms: 500,
            steering_history: 20,
            watch: Vec::new(),
            partitions: 1,
            partition_lease_ms: 10_000,
            report_retention_ms: 120_000,
            report_retention_mb: 1024,
            instance: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// A lease not renewed by a heartbeat for this long is stale (SUP-6).
    pub lease_ms: u64,
    /// How often leases and long-polling claims are checked.
    pub tick_ms: u64,
    /// Audit logs go to `<data_dir>/<project>/audit.log.jsonl`; empty: `<state.dir>/data`.
    pub data_dir: String,
    /// Block causes that halt the whole queue (`exec_failure`,
    /// `agent_blocked`, `validation`, `violation`, `budget`); a task blocked
    /// for any other cause waits for the operator while the queue goes on.
    pub halt_on: Vec<xo_proto::queue::BlockCause>,
    /// The role of a task that names neither a role nor a phase.
    pub default_role: String,
    /// Seed 002's phase → role table (`design`, `plan`, `execute`, `review`, `validate`).
    pub phase_roles: BTreeMap<xo_proto::queue::Phase, String>,
    /// A goal's cost budget in USD when `xo goal` gives none (0: none).
    pub goal_budget_usd: f64,
    /// Most tasks one enqueue request carries; larger enqueues are sent in
    /// parts of this many (each part is checked and applied whole).
    pub enqueue_batch: usize,
    /// On NATS, one `xo serve queue` serves and the others stand by: the
    /// active one holds a lease of this many ms in the KV store and renews
    /// it every third of it; a standby takes over once it has not been
    /// renewed for a whole lease. 0: no lease (only ever run one instance).
    /// The review supervisors, notifier and fleet manager of several
    /// supervisor replicas run under a lease of this length too.
    pub leader_lease_ms: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            lease_ms: 30_000,
            tick_ms: 100,
            data_dir: String::new(),
            halt_on: xo_proto::queue::BlockCause::DEFAULT_HALT_ON.to_vec(),
            default_role: "coder".into(),
            phase_roles: [
                (xo_proto::queue::Phase::Design, "architect"),
                (xo_proto::queue::Phase::Plan, xo_proto::queue::MANAGER_ROLE),
                (xo_proto::queue::Phase::Execute, "coder"),
                (xo_proto::queue::Phase::Review, "architect"),
                (xo_proto::queue::Phase::Validate, "architect"),
            ]
            .into_iter()
            .map(|(p, r)| (p, r.to_string()))
            .collect(),
            goal_budget_usd: 0.0,
            enqueue_batch: 500,
            leader_lease_ms: 5_000,
        }
    }
}

/// The web console (`xo up` serves it; `xo serve console` alone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve the console in `xo up`.
    pub enabled: bool,
    /// The address to listen on. Loopback by default; on any other address
    /// every request needs the token, not only the writes.
    pub listen: String,
    /// The bearer token's file; empty: `<state.dir>/console.token`, made
    /// (mode 0600) on first start. `XO_CONSOLE_TOKEN` wins over both.
    pub token_file: String,
    /// Read-only: every action is hidden and refused.
    pub read_only: bool,
    /// Let pages and the API be read without the token (loopback only).
    /// Off by default: any local user, or a web page that rebinds its name
    /// to 127.0.0.1, could otherwise read the fleet.
    pub open_reads: bool,
    /// Connections open at once; one more is answered 503 and closed, so
    /// the console never takes the file descriptors the bus and the
    /// services need.
    pub max_connections: usize,
    /// Live event streams (`/api/v1/events`) open at once, within
    /// `max_connections`; one more is answered 503.
    pub max_event_streams: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: "127.0.0.1:7878".into(),
            token_file: String::new(),
            read_only: false,
            open_reads: false,
            max_connections: 256,
            max_event_streams: 64,
        }
    }
}

/// How agent processes are confined (`runner.confine`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfineMode {
    /// Landlock where the kernel has it; otherwise unconfined, said at start.
    #[default]
    Auto,
    /// Landlock, or the runner does not start.
    Landlock,
    /// Unconfined.
    Off,
}

/// The runner: sandbox, templates, retries, timeouts and the agent driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerConfig {
    /// Projects live in `<sandbox>/<project>`; empty: `<state.dir>/sandbox`.
    pub sandbox: String,
    /// Project of tasks that name none.
    pub default_project: String,
    /// Global input template (SUP-5), first in every prompt.
    pub global_template: String,
    /// Read the global template from this file instead (a missing file is an error).
    pub global_template_file: String,
    /// Global output template (SUP-3); `{status}`, `{message}`, `{task_id}`, `{output}`.
    pub output_template: String,
    /// Role templates by role name, third in every prompt.
    pub role_templates: BTreeMap<String, String>,
    /// Format retries, fix retries and clarifications per task (seed 002: 3).
    pub max_retries: u32,
    /// Liveness heartbeat on `xo.heartbeat.<unit>`.
    pub heartbeat_ms: u64,
    /// Long-poll of a claim.
    pub claim_wait_ms: u64,
    /// stdout and stderr are each kept up to this many bytes.
    pub max_output_bytes: usize,
    /// Environment variables an agent process inherits; all others are dropped.
    pub env_allow: Vec<String>,
    /// How agent processes are confined: `auto` (Landlock where the kernel
    /// has it, else a warning at start), `landlock` (refuse to start
    /// without it) or `off`. Confined, an agent writes only in its task's
    /// folder, the temp folder and `confine_write`, and cannot read the
    /// runner's `/proc` (its environment: keys, NATS password) or signal it.
    pub confine: ConfineMode,
    /// More paths a confined agent may write (e.g. `~/.claude` for Claude
    /// Code's session files); `~/` is the runner's `HOME`.
    pub confine_write: Vec<String>,
    pub timeouts: TimeoutConfig,
    /// Seed 004 SUP-5's `timeout_default_ms`: the agent timeout of the
    /// standard profile (the default one), set under the seed's name; 0
    /// leaves `timeouts.standard_ms`. Setting both to different values is
    /// an error.
    pub timeout_default_ms: u64,
    /// Seed 004 SUP-5's `fail_on_violation`: a major violation (a reply
    /// missing a required section) ends the task as failed (`true`, the
    /// default: seed 004's ERROR), or blocks it for the operator with the
    /// violation named (`false`). A project may override it.
    pub fail_on_violation: bool,
    /// Seed 003's helper agent: when criteria a rule cannot decide (free
    /// text) are judged not met, the agent is asked once more, as a helper
    /// given the files that exist, for a read-only command per criterion;
    /// one that exits 0 in the working directory (and not in an empty one)
    /// passes it, before any fix retry. An extra agent run, so off by
    /// default; a project may switch it (`supervisor_rules.helper_agent`).
    pub helper_agent: bool,
    /// Run the radio check in-process every turn too (self-supervision):
    /// the runner steers its agent on the turn it sees an anomaly, and says
    /// so in its next report (`status.self_steered`); the XO counts that as
    /// its own steering of the anomaly, and the runner does not give the
    /// XO's steering of an anomaly it already gave, so the agent gets one
    /// steering per anomaly, XO reachable or not.
    pub microcosm: bool,
    /// No longer used (the runner's own check no longer waits for the XO);
    /// accepted so that older configuration files still load.
    pub microcosm_grace_ms: u64,
    /// Context window assumed for SALUTE fill when the driver does not know it.
    pub context_limit: u64,
    /// A task offered again after its runner died (SUP-6).
    pub restart_mode: RestartMode,
    /// Limits on one task's work across all its retries and attempts, for
    /// tasks that set none (0: no limit). `max_wall_ms = 0` means the task's
    /// timeout profile bounds the whole task, not each agent run.
    pub task_budget: xo_proto::queue::TaskBudget,
    pub driver: DriverConfig,
}

/// What a runner does with a task offered again after a stale lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RestartMode {
    /// Resume from the previous attempt's checkpoint when it reached one,
    /// else roll the sandbox back and replay.
    #[default]
    Resume,
    /// Always roll the sandbox back and replay from the start.
    Rollback,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            sandbox: String::new(),
            default_project: "default".into(),
            global_template: String::new(),
            global_template_file: String::new(),
            output_template: String::new(),
            role_templates: BTreeMap::new(),
            max_retries: 3,
            heartbeat_ms: 5_000,
            claim_wait_ms: 5_000,
            max_output_bytes: 1 << 20,
            env_allow: ["PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER"]
                .map(String::from)
                .to_vec(),
            confine: ConfineMode::Auto,
            confine_write: Vec::new(),
            timeouts: TimeoutConfig::default(),
            timeout_default_ms: 0,
            fail_on_violation: true,
            helper_agent: false,
            microcosm: true,
            microcosm_grace_ms: 2_000,
            context_limit: 128_000,
            restart_mode: RestartMode::Resume,
            task_budget: xo_proto::queue::TaskBudget::default(),
            driver: DriverConfig::default(),
        }
    }
}

/// Agent timeout per task timeout profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutConfig {
    pub standard_ms: u64,
    pub long_ms: u64,
    pub extended_ms: u64,
}

impl RunnerConfig {
    /// The agent timeout of a profile (`timeout_default_ms`, when set, is
    /// the standard one).
    pub fn timeout_ms(&self, p: xo_proto::queue::TimeoutProfile) -> u64 {
        use xo_proto::queue::TimeoutProfile::*;
        match p {
            Standard if self.timeout_default_ms > 0 => self.timeout_default_ms,
            Standard => self.timeouts.standard_ms,
            Long => self.timeouts.long_ms,
            Extended => self.timeouts.extended_ms,
        }
    }
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        Self {
            standard_ms: 30 * 60_000,
            long_ms: 2 * 60 * 60_000,
            extended_ms: 6 * 60 * 60_000,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    /// Any CLI agent.
    Command,
    /// Any OpenAI-compatible chat-completions endpoint.
    Openai,
    /// A deterministic scripted agent.
    #[default]
    Script,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DriverConfig {
    pub kind: DriverKind,
    /// `command`: argv; `{prompt}` and `{prompt_file}` are replaced, and
    /// with neither the prompt goes to stdin.
    pub command: Vec<String>,
    /// `script`: a script file (TOML, `[tasks.<id>]` and `[default]`); a
    /// fenced `xo-script` block in the task's instructions wins.
    pub script: String,
    pub openai: OpenAiConfig,
    /// `command`: the agent's stdout event format, read live so that every
    /// agent turn is a SALUTE turn: `none` (one turn a run), `claude`,
    /// `cursor`, `codex` or `openhands` (see docs/sensors.md).
    pub stream: String,
    /// `command`: the agent hook steering reaches a running agent through:
    /// `""` (none), `claude` (Claude Code's PostToolUse, PostToolUseFailure
    /// and Stop hooks, `xo hook claude`, installed into the task's
    /// `.claude/settings.local.json`) or `codex` (Codex's PostToolUse and
    /// Stop hooks, `xo hook codex`, installed into `$CODEX_HOME/hooks.json`;
    /// give Codex `--dangerously-bypass-hook-trust`, or trust the hook once).
    pub hook: String,
    /// `command`: argv that resumes the agent's session with the steering
    /// as the next prompt (`{session}`, `{prompt}`). Critical steering
    /// (PACE emergency, a loop steered twice) stops the agent at once and
    /// resumes it; with no hook, any other steering stops it at its next
    /// turn and resumes it. Empty: no resume.
    pub resume: Vec<String>,
    /// `command`: resumes of one run at most; beyond, steering waits for
    /// the agent's next prompt (and a line says so).
    pub max_resumes: u32,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            kind: DriverKind::default(),
            command: Vec::new(),
            script: String::new(),
            openai: OpenAiConfig::default(),
            stream: String::new(),
            hook: String::new(),
            resume: Vec::new(),
            max_resumes: 10,
        }
    }
}

/// The live stream formats of `runner.driver.stream`.
pub const STREAM_FORMATS: [&str; 5] = ["none", "claude", "cursor", "codex", "openhands"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiConfig {
    /// e.g. `https://openrouter.ai/api/v1`, `http://localhost:11434/v1`.
    pub base_url: String,
    pub model: String,
    /// The environment variable holding the API key (never logged).
    pub api_key_env: String,
    /// A file holding the API key (a mounted Secret): read once at start,
    /// so the key need not be in the runner's environment. Wins over
    /// `api_key_env`.
    pub api_key_file: String,
    /// Model calls per task before the run ends.
    pub max_turns: u32,
    /// Attempts on 429, 5xx and unreadable replies.
    pub max_attempts: u32,
    /// First backoff; doubles each attempt (a `Retry-After` header wins).
    pub backoff_ms: u64,
    pub request_timeout_ms: u64,
    /// USD per million tokens, for the SALUTE cost field.
    pub price_in_per_mtok: f64,
    pub price_out_per_mtok: f64,
    /// A tool's output beyond this many bytes reaches the model as its head
    /// and tail with the cut named.
    pub max_tool_output_bytes: usize,
    /// At this fill of the context window the conversation is condensed:
    /// older tool outputs are replaced by a note, the task, the latest
    /// turns and the steering stay.
    pub condense_at: f64,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: "http://localhost:11434/v1".into(),
            model: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            api_key_file: String::new(),
            max_turns: 30,
            max_attempts: 5,
            backoff_ms: 500,
            request_timeout_ms: 120_000,
            price_in_per_mtok: 0.0,
            price_out_per_mtok: 0.0,
            max_tool_output_bytes: 16 * 1024,
            condense_at: 0.75,
        }
    }
}

/// The knowledge store (seed 001).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KnowledgeConfig {
    /// Serve the store in `xo up` (and let runners inject it).
    pub enabled: bool,
    /// The folder; empty: `<state.dir>/knowledge`.
    pub dir: String,
    /// How often the folder is checked for edits by hand.
    pub poll_ms: u64,
    /// Token budget of the `## PROJECT KNOWLEDGE` section.
    pub budget_tokens: usize,
    /// Clean tasks after which a provisional document is established.
    pub establish_after: u32,
}

impl Default for KnowledgeConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: String::new(),
            poll_ms: 1_000,
            budget_tokens: 2_000,
            establish_after: 5,
        }
    }
}

/// The review supervisors (seed 001) on their own model route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReviewConfig {
    pub enabled: bool,
    /// The project the reviewers read (its sandbox) and write directives for.
    pub project: String,
    /// Code style runs every N completed tasks (and on milestone).
    pub code_style_every: u32,
    /// The internaliser runs every N completed tasks (and on milestone).
    pub internaliser_every: u32,
    /// The assessor runs every N completed tasks (and on milestone).
    pub assessor_every: u32,
    /// Role of the tasks directives become.
    pub directive_role: String,
    /// Polish phase: cleanup tasks processed after the goal is functionally complete.
    pub polish_max_tasks: u32,
    /// USD per UTC day across reviewers; 0: no limit.
    pub daily_budget_usd: f64,
    /// USD per project; 0: no limit.
    pub project_budget_usd: f64,
    /// Findings at least this similar to the previous run's mean "converging".
    pub convergence_similarity: f64,
    /// The `supervisor` model route (any OpenAI-compatible endpoint); an empty model skips reviews.
    pub model: OpenAiConfig,
}

impl Default for ReviewConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            project: "default".into(),
            code_style_every: 5,
            internaliser_every: 3,
            assessor_every: 10,
            directive_role: "coder".into(),
            polish_max_tasks: 10,
            daily_budget_usd: 5.0,
            project_budget_usd: 20.0,
            convergence_similarity: 0.8,
            model: OpenAiConfig {
                base_url: "https://openrouter.ai/api/v1".into(),
                api_key_env: "OPENROUTER_API_KEY".into(),
                max_turns: 8,
                ..OpenAiConfig::default()
            },
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FleetBackend {
    /// No fleet management (Kubernetes keeps the replicas).
    #[default]
    None,
    /// Runner containers on the local Docker engine.
    Docker,
}

/// The embedded file store (`xo up` without NATS).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `always`: fsync before a write is acknowledged (the queue's group
    /// commit pays one per batch); `batch`: fsync every 100 ms (a power cut
    /// loses at most that); `never`: the OS decides (a power cut can lose
    /// seconds). A process crash loses nothing in any mode.
    pub sync: StoreSync,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreSync {
    #[default]
    Always,
    Batch,
    Never,
}

/// Alerts to the operator's webhooks (`xo serve notify`; `xo up` runs it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// Where alerts go; none: they are only published on `xo.event.alert.*`.
    pub webhooks: Vec<Webhook>,
    /// Attempts per alert and webhook before it is dead-lettered.
    pub attempts: u32,
    /// The first retry's wait; each next one doubles it (at most 60 s).
    pub backoff_ms: u64,
    /// One POST's timeout.
    pub timeout_ms: u64,
    /// Alerts that could not be delivered, one JSON line each; empty:
    /// `<data_dir>/alerts.dead.jsonl`.
    pub dead_letter_file: String,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            webhooks: Vec::new(),
            attempts: 5,
            backoff_ms: 500,
            timeout_ms: 5_000,
            dead_letter_file: String::new(),
        }
    }
}

/// One webhook.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Webhook {
    /// `http://` or `https://`.
    pub url: String,
    /// `json` (the alert as it is published) or `slack` (`{"text": ...}`,
    /// for Slack, Mattermost and other incoming webhooks).
    pub format: WebhookFormat,
    /// Alert kinds to send (`task_blocked`, `question`, `queue_stuck`,
    /// `role_failed`, `budget_exhausted`, `queue_halted`, `lease_refused`); empty: all.
    pub kinds: Vec<xo_proto::alert::AlertKind>,
    /// The value of an `Authorization` header, if the receiver wants one;
    /// `env:NAME` reads it from the environment.
    pub authorization: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    #[default]
    Json,
    Slack,
}

/// Runner containers managed by the XO through the Docker API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetConfig {
    pub backend: FleetBackend,
    /// The runner image.
    pub image: String,
    /// Desired runners per role.
    pub runners: BTreeMap<String, u32>,
    /// Container arguments; `{role}` and `{unit}` are replaced.
    pub command: Vec<String>,
    /// `KEY=value` for every runner container.
    pub env: Vec<String>,
    /// Binds and volume mounts (`shared:/data`).
    pub binds: Vec<String>,
    /// A Docker network to attach runners to (compose's, for example).
    pub network: String,
    /// Restarts of one unit allowed within `restart_window_ms` before its role is failed.
    pub max_restarts: u32,
    pub restart_window_ms: u64,
    /// How often the fleet is reconciled.
    pub reconcile_ms: u64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            backend: FleetBackend::None,
            image: "xo:latest".into(),
            runners: BTreeMap::new(),
            command: ["serve", "runner", "--role", "{role}", "--unit", "{unit}"]
                .map(String::from)
                .to_vec(),
            env: Vec::new(),
            binds: Vec::new(),
            network: String::new(),
            max_restarts: 5,
            restart_window_ms: 60_000,
            reconcile_ms: 2_000,
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
            let path = expand_env(&cfg.nats.password_file).map_err(invalid)?;
            let text =
                std::fs::read_to_string(&path).map_err(|e| invalid(format!("{path}: {e}")))?;
            cfg.nats.password = text.trim_end_matches(['\n', '\r']).to_string();
            if cfg.nats.password.is_empty() {
                return Err(invalid(format!("{path} is empty")));
            }
        }
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: String| ConfigError::Invalid {
            key: key.to_string(),
            reason,
        };
        xo_proto::Subjects::validate_prefix(&self.org.prefix)
            .map_err(|r| invalid("org.prefix", r))?;
        if !(1..=5).contains(&self.nats.replicas) {
            return Err(invalid(
                "nats.replicas",
                format!(
                    "{} copies: JetStream keeps 1 to 5 (3 on a three-node cluster)",
                    self.nats.replicas
                ),
            ));
        }
        if self.nats.tls_cert_file.is_empty() != self.nats.tls_key_file.is_empty() {
            return Err(invalid(
                "nats.tls_cert_file",
                "a client certificate needs its key: set both nats.tls_cert_file and nats.tls_key_file, or neither".into(),
            ));
        }
        if self.wire.max_payload < 1024 {
            return Err(invalid(
                "wire.max_payload",
                format!(
                    "{} bytes is too small (at least 1024)",
                    self.wire.max_payload
                ),
            ));
        }
        if self.console.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "console.listen",
                format!(
                    "{:?} is not an address and port (like 127.0.0.1:7878)",
                    self.console.listen
                ),
            ));
        }
        if self.supervisor.unit_retention_ms > 0
            && self.supervisor.unit_retention_ms < self.supervisor.stale_after_ms
        {
            return Err(invalid(
                "supervisor.unit_retention_ms",
                format!(
                    "{} ms would forget units before they are even stale (supervisor.stale_after_ms {} ms): at least that, or 0 to never forget",
                    self.supervisor.unit_retention_ms, self.supervisor.stale_after_ms
                ),
            ));
        }
        let c = &self.console;
        if c.open_reads
            && c.listen
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|a| !a.ip().is_loopback())
        {
            return Err(invalid(
                "console.open_reads",
                format!(
                    "reads without the token are only for a loopback console, and console.listen is {}: unset console.open_reads or listen on 127.0.0.1",
                    c.listen
                ),
            ));
        }
        if c.max_connections == 0 {
            return Err(invalid(
                "console.max_connections",
                "0 would refuse every connection: at least 1 (default 256)".into(),
            ));
        }
        if c.max_event_streams == 0 || c.max_event_streams >= c.max_connections {
            return Err(invalid(
                "console.max_event_streams",
                format!(
                    "{} is out of range: at least 1 and fewer than console.max_connections ({}), so pages still load while streams are open",
                    c.max_event_streams, c.max_connections
                ),
            ));
        }
        let s = &self.supervisor;
        if !(1..=1024).contains(&s.partitions) {
            return Err(invalid(
                "supervisor.partitions",
                format!(
                    "{} is out of range: 1 (one supervisor) to 1024",
                    s.partitions
                ),
            ));
        }
        if s.partitions > 1 && !s.volume.is_empty() {
            return Err(invalid(
                "supervisor.volume",
                "file mode and sharded supervision (supervisor.partitions > 1) do not mix: every supervisor would read every report file; keep one supervisor for a volume".into(),
            ));
        }
        if s.partitions > 1 && s.partition_lease_ms < 300 {
            return Err(invalid(
                "supervisor.partition_lease_ms",
                format!(
                    "{} ms is too short for a lease renewed over the network (at least 300)",
                    s.partition_lease_ms
                ),
            ));
        }
        let least = 2 * s.partition_lease_ms + s.persist_interval_ms;
        if s.partitions > 1 && s.report_retention_ms < least {
            return Err(invalid(
                "supervisor.report_retention_ms",
                format!(
                    "{} ms is shorter than what a take-over reads back: two partition leases and a persist interval ({least} ms); raise it",
                    s.report_retention_ms
                ),
            ));
        }
        if !s
            .instance
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                "supervisor.instance",
                format!(
                    "{:?} is not a name of letters, digits, '-' and '_' (it is a subject token and a store key)",
                    s.instance
                ),
            ));
        }
        for (key, v) in [
            ("nats.ping_interval_ms", self.nats.ping_interval_ms),
            ("supervisor.stale_after_ms", s.stale_after_ms),
            ("supervisor.tick_ms", s.tick_ms),
            ("supervisor.flush_interval_ms", s.flush_interval_ms),
            ("supervisor.persist_interval_ms", s.persist_interval_ms),
            ("supervisor.restart_window_ms", s.restart_window_ms),
            ("supervisor.file_poll_ms", s.file_poll_ms),
            ("supervisor.report_retention_mb", s.report_retention_mb),
            ("queue.lease_ms", self.queue.lease_ms),
            ("queue.tick_ms", self.queue.tick_ms),
            ("queue.enqueue_batch", self.queue.enqueue_batch as u64),
            ("runner.heartbeat_ms", self.runner.heartbeat_ms),
            ("knowledge.poll_ms", self.knowledge.poll_ms),
            ("fleet.reconcile_ms", self.fleet.reconcile_ms),
            ("fleet.restart_window_ms", self.fleet.restart_window_ms),
            ("fleet.max_restarts", u64::from(self.fleet.max_restarts)),
            (
                "knowledge.establish_after",
                u64::from(self.knowledge.establish_after),
            ),
            (
                "review.code_style_every",
                u64::from(self.review.code_style_every),
            ),
            (
                "review.internaliser_every",
                u64::from(self.review.internaliser_every),
            ),
            (
                "review.assessor_every",
                u64::from(self.review.assessor_every),
            ),
            (
                "runner.timeouts.standard_ms",
                self.runner.timeouts.standard_ms,
            ),
            ("runner.timeouts.long_ms", self.runner.timeouts.long_ms),
            (
                "runner.timeouts.extended_ms",
                self.runner.timeouts.extended_ms,
            ),
            (
                "runner.driver.openai.max_attempts",
                u64::from(self.runner.driver.openai.max_attempts),
            ),
            (
                "runner.driver.openai.max_turns",
                u64::from(self.runner.driver.openai.max_turns),
            ),
        ] {
            if v == 0 {
                return Err(invalid(key, "must be greater than 0".into()));
            }
        }
        if !(1..=20).contains(&self.runner.max_retries) {
            return Err(invalid(
                "runner.max_retries",
                format!(
                    "{}: retries per task are 1 to 20 (seed 002: 3); more repeats a failure instead of fixing it",
                    self.runner.max_retries
                ),
            ));
        }
        for (key, url) in [
            (
                "runner.driver.openai.base_url",
                &self.runner.driver.openai.base_url,
            ),
            ("review.model.base_url", &self.review.model.base_url),
        ] {
            let ok = url.is_empty()
                || ((url.starts_with("http://") || url.starts_with("https://"))
                    && url.split("://").nth(1).is_some_and(|rest| {
                        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
                        !host.is_empty() && !host.contains(char::is_whitespace)
                    }));
            if !ok {
                return Err(invalid(
                    key,
                    format!(
                        "{url:?} is not a URL: give http(s)://HOST[:PORT]/PATH, e.g. http://localhost:11434/v1"
                    ),
                ));
            }
        }
        let t = &self.runner;
        if t.timeout_default_ms > 0
            && t.timeouts.standard_ms != TimeoutConfig::default().standard_ms
            && t.timeouts.standard_ms != t.timeout_default_ms
        {
            return Err(invalid(
                "runner.timeout_default_ms",
                format!(
                    "{} ms, but runner.timeouts.standard_ms is {} ms: both name the standard profile's timeout (timeout_default_ms is seed 004's name for it); set one",
                    t.timeout_default_ms, t.timeouts.standard_ms
                ),
            ));
        }
        let schemes = ["nats://", "tls://", "ws://", "wss://"];
        if !self.nats.url.is_empty() && !schemes.iter().any(|s| self.nats.url.starts_with(s)) {
            return Err(invalid(
                "nats.url",
                format!(
                    "{:?} is not a nats://, tls://, ws:// or wss:// URL",
                    self.nats.url
                ),
            ));
        }
        let roles = self.task_roles();
        let known = || roles.iter().cloned().collect::<Vec<_>>().join(", ");
        if !roles.contains(&self.queue.default_role) {
            return Err(invalid(
                "queue.default_role",
                format!(
                    "{:?} is not a role (known: {})",
                    self.queue.default_role,
                    known()
                ),
            ));
        }
        for (phase, role) in &self.queue.phase_roles {
            if !roles.contains(role) {
                return Err(invalid(
                    &format!("queue.phase_roles.{}", phase.as_str()),
                    format!("{role:?} is not a role (known: {})", known()),
                ));
            }
        }
        if !self.queue.goal_budget_usd.is_finite() || self.queue.goal_budget_usd < 0.0 {
            return Err(invalid(
                "queue.goal_budget_usd",
                "must be 0 (no budget) or a positive amount".into(),
            ));
        }
        for (i, w) in self.alerts.webhooks.iter().enumerate() {
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                return Err(invalid(
                    &format!("alerts.webhooks[{i}].url"),
                    format!("{:?} is not an http:// or https:// URL", w.url),
                ));
            }
        }
        if self.alerts.attempts == 0 || self.alerts.timeout_ms == 0 {
            return Err(invalid(
                "alerts.attempts",
                "attempts and timeout_ms must be greater than 0".into(),
            ));
        }
        if self.runner.max_output_bytes < 1024 {
            return Err(invalid(
                "runner.max_output_bytes",
                format!(
                    "{} is too small (at least 1024)",
                    self.runner.max_output_bytes
                ),
            ));
        }
        xo_proto::validate_token("runner.default_project", &self.runner.default_project)
            .map_err(|r| invalid("runner.default_project", r))?;
        xo_proto::validate_token("review.project", &self.review.project)
            .map_err(|r| invalid("review.project", r))?;
        if !(0.0..=1.0).contains(&self.review.convergence_similarity) {
            return Err(invalid(
                "review.convergence_similarity",
                format!("{} is not within 0..1", self.review.convergence_similarity),
            ));
        }
        for (k, v) in [
            ("review.daily_budget_usd", self.review.daily_budget_usd),
            ("review.project_budget_usd", self.review.project_budget_usd),
        ] {
            if v < 0.0 || !v.is_finite() {
                return Err(invalid(k, format!("{v} must be 0 (no limit) or more")));
            }
        }
        let d = &self.runner.driver;
        if d.kind == DriverKind::Command && d.command.is_empty() {
            return Err(invalid(
                "runner.driver.command",
                "the command driver needs an argv, e.g. [\"my-agent\", \"--prompt-file\", \"{prompt_file}\"]".into(),
            ));
        }
        for (i, w) in self.supervisor.watch.iter().enumerate() {
            let key = format!("supervisor.watch[{i}]");
            if !STREAM_FORMATS.contains(&w.format.as_str()) || w.format == "none" {
                return Err(invalid(
                    &format!("{key}.format"),
                    format!(
                        "{:?} is no live format; use claude, cursor, codex or openhands",
                        w.format
                    ),
                ));
            }
            if w.dirs.is_empty() {
                return Err(invalid(
                    &format!("{key}.dirs"),
                    "name at least one directory to watch".into(),
                ));
            }
        }
        if !d.stream.is_empty() && !STREAM_FORMATS.contains(&d.stream.as_str()) {
            return Err(invalid(
                "runner.driver.stream",
                format!(
                    "{:?} is no stream format; use one of {}",
                    d.stream,
                    STREAM_FORMATS.join(", ")
                ),
            ));
        }
        if !matches!(d.hook.as_str(), "" | "claude" | "codex") {
            return Err(invalid(
                "runner.driver.hook",
                format!(
                    "{:?}: the hooks are \"claude\" and \"codex\" (or empty for none)",
                    d.hook
                ),
            ));
        }
        if !d.hook.is_empty() && d.stream.is_empty() {
            return Err(invalid(
                "runner.driver.hook",
                format!(
                    "a hook hands steering to an agent whose stream is read live; set runner.driver.stream (\"{}\") too",
                    d.hook
                ),
            ));
        }
        if !d.resume.is_empty() && !d.resume.iter().any(|a| a.contains("{prompt}")) {
            return Err(invalid(
                "runner.driver.resume",
                "the resume argv must pass the steering as {prompt}".into(),
            ));
        }
        if d.kind == DriverKind::Openai && d.openai.model.is_empty() {
            return Err(invalid(
                "runner.driver.openai.model",
                "the openai driver needs a model name".into(),
            ));
        }
        for (name, profile) in &self.roles {
            profile
                .doctrine
                .validate()
                .map_err(|r| ConfigError::Invalid {
                    key: format!("roles.{name}.{}", r.split_whitespace().next().unwrap_or("")),
                    reason: r,
                })?;
        }
        Ok(())
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

    #[test]
    fn shipped_example_config_is_valid() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/xo.toml");
        let cfg = XoConfig::load(Some(&p), &[]).unwrap();
        assert!(cfg.roles.contains_key("coder"));
    }
}
