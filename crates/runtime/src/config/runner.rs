//! `[runner]`: the claim loop, timeouts, the agent driver (command,
//! OpenAI-compatible, script) and confinement.

use super::*;

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

/// An entry of `runner.confine_connect` that is not a port.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not a TCP port; give port numbers (e.g. \"443\") or \"*\" for any")]
pub struct BadPort {
    pub entry: String,
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
    /// More paths a confined agent may read and run. It reads the system's
    /// folders (`/usr`, `/etc`, `/opt`…), its project, its program's folder
    /// (`<prefix>` of `<prefix>/bin/<program>`) and the files its command
    /// names; an agent installed elsewhere names its install here (e.g.
    /// `~/.nvm`, `~/.pyenv` for a version manager's shims). Never the state
    /// directory or XO's data: those hold the tokens and keys.
    pub confine_read: Vec<String>,
    /// TCP ports a confined agent may connect to (Landlock ABI 4, Linux
    /// 6.7): port numbers, or `"*"` for any. The default, `["443"]`, is the
    /// hosted models' HTTPS endpoints: not NATS, not the console.
    pub confine_connect: Vec<String>,
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
    /// Where a task runs: `worktree` (its own tree on a branch `xo/<task>`
    /// of the project's history) or `directory` (the project directory
    /// itself, shared with the project's other tasks).
    pub isolation: Isolation,
    /// Where a validated task's work goes (worktree isolation): `none`
    /// (its branch only), `ff` (onto the project's main, and the project
    /// directory), `merge` (a merge commit on main), `push` (its branch
    /// pushed to `push_remote`).
    pub merge: MergeMode,
    /// The remote `merge = "push"` pushes to (a URL or a path).
    pub push_remote: String,
    /// Limits on one task's work across all its retries and attempts, for
    /// tasks that set none (0: no limit). `max_wall_ms = 0` means the agent
    /// timeout of the task's profile times `max_retries + 2` (a larger bound
    /// than one run's timeout, which is EXEC_FAILURE).
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

/// Where a task runs ([`RunnerConfig::isolation`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    #[default]
    Worktree,
    Directory,
}

/// Where a validated task's work goes ([`RunnerConfig::merge`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeMode {
    None,
    #[default]
    Ff,
    Merge,
    Push,
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
            confine_read: Vec::new(),
            confine_connect: vec!["443".into()],
            timeouts: TimeoutConfig::default(),
            timeout_default_ms: 0,
            fail_on_violation: true,
            helper_agent: false,
            microcosm: true,
            microcosm_grace_ms: 2_000,
            context_limit: 128_000,
            restart_mode: RestartMode::Resume,
            isolation: Isolation::Worktree,
            merge: MergeMode::Ff,
            push_remote: String::new(),
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
    /// `confine_connect` as ports (`None`: any port).
    pub fn confine_ports(&self) -> Result<Option<Vec<u16>>, BadPort> {
        let mut ports = Vec::new();
        for p in &self.confine_connect {
            if p.trim() == "*" {
                return Ok(None);
            }
            match p.trim().parse::<u16>() {
                Ok(n) if n > 0 => ports.push(n),
                _ => return Err(BadPort { entry: p.clone() }),
            }
        }
        Ok(Some(ports))
    }

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

/// The agent streams whose CLI takes a model or mode option (`--model`):
/// Claude Code, Codex, Cursor.
pub const MODE_STREAMS: [&str; 3] = ["claude", "codex", "cursor"];

/// Why a task's `agent_mode` cannot reach the agent the driver runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the runner's driver (command, stream {stream:?}) has no option that takes a mode: set runner.driver.stream to claude, codex or cursor, or put {{agent_mode}} in runner.driver.command"
)]
pub struct ModeNotPassed {
    pub stream: String,
}

impl DriverConfig {
    /// Whether a task's `agent_mode` can reach the agent this driver runs
    /// (`auto` is the agent's own default: always). The error names the
    /// driver and what would let it.
    pub fn honours_mode(&self, mode: &str) -> Result<(), ModeNotPassed> {
        if mode.trim().is_empty() || mode == "auto" {
            return Ok(());
        }
        match self.kind {
            DriverKind::Script | DriverKind::Openai => Ok(()),
            DriverKind::Command if MODE_STREAMS.contains(&self.stream.as_str()) => Ok(()),
            DriverKind::Command if self.command.iter().any(|a| a.contains("{agent_mode}")) => {
                Ok(())
            }
            DriverKind::Command => Err(ModeNotPassed {
                stream: self.stream.clone(),
            }),
        }
    }
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
