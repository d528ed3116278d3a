//! The other services' sections: `console`, `knowledge`, `review`,
//! `store`, `alerts`, `fleet`.

use super::*;

/// How often the console's live event stream sends a keep-alive comment
/// when it has nothing else to send (`console.idle_timeout_ms` must be
/// longer).
pub const EVENT_KEEPALIVE_MS: u64 = 15_000;

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
    /// Named operators, each with a token of their own: a file (keep it
    /// 0600) of lines `NAME TOKEN` (`#` starts a comment). Every write a
    /// person makes names them in the audit; the console token above
    /// stays, named `console`. Empty: only the console token.
    pub operators_file: String,
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
    /// Connections from one client address, of any kind; one more is
    /// answered 503 and closed.
    pub max_per_client: usize,
    /// A whole request head must arrive within this, from the connection's
    /// start and between the requests of a kept-alive connection; a client
    /// that sends nothing is closed after it.
    pub header_timeout_ms: u64,
    /// Nothing read or written for this long closes a connection (a client
    /// that stopped reading its response). Event streams send a keep-alive
    /// well within it.
    pub idle_timeout_ms: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: "127.0.0.1:7878".into(),
            token_file: String::new(),
            operators_file: String::new(),
            read_only: false,
            open_reads: false,
            max_connections: 256,
            max_event_streams: 64,
            max_per_client: 32,
            header_timeout_ms: 10_000,
            idle_timeout_ms: 300_000,
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

impl StoreSync {
    pub const ALL: [StoreSync; 3] = [Self::Always, Self::Batch, Self::Never];

    /// The mode's name, as `store.sync` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Batch => "batch",
            Self::Never => "never",
        }
    }
}

impl From<StoreSync> for xo_bus::file_store::SyncMode {
    fn from(s: StoreSync) -> Self {
        match s {
            StoreSync::Always => Self::Always,
            StoreSync::Batch => Self::Batch,
            StoreSync::Never => Self::Never,
        }
    }
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
    /// The console's address as the people paged reach it (e.g.
    /// `https://xo.example.org`): ntfy notifications link to the unit's or
    /// the task's page there. Empty: no link.
    pub console_url: String,
    /// A unit that still needs a person is paged again this often (0:
    /// never).
    pub remind_after_ms: u64,
    /// `unit_needs_you` alerts that reach a webhook within this window go
    /// as one ("5 units need you: …"); 0: each alone.
    pub group_ms: u64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            webhooks: Vec::new(),
            attempts: 5,
            backoff_ms: 500,
            timeout_ms: 5_000,
            dead_letter_file: String::new(),
            console_url: String::new(),
            remind_after_ms: 30 * 60_000,
            group_ms: 2_000,
        }
    }
}

/// One webhook.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Webhook {
    /// `http://` or `https://`.
    pub url: String,
    /// `json` (the alert as it is published), `slack` (`{"text": ...}`,
    /// for Slack, Mattermost and other incoming webhooks) or `ntfy` (the
    /// URL is the topic's, e.g. `https://ntfy.sh/my-xo`: the text as the
    /// body, `Title`, `Priority`, `Tags` and `Click` as ntfy's publish API
    /// takes them).
    pub format: WebhookFormat,
    /// Alert kinds to send (`task_blocked`, `question`, `queue_stuck`,
    /// `role_failed`, `budget_exhausted`, `queue_halted`, `lease_refused`,
    /// `knowledge_review`, `unit_needs_you`); empty: all.
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
    Ntfy,
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

/// `[hooks]`: what the agents' hooks answer without asking a person.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HooksConfig {
    /// `[[hooks.approve]]`: rules that answer a permission request (Claude
    /// Code's and Codex's `PermissionRequest` hook), the first that matches
    /// winning. None by default: every request is the person's.
    pub approve: Vec<ApproveRule>,
}

/// One `[[hooks.approve]]` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveRule {
    /// The tool (`Bash`, `Edit`, `WebFetch`, `mcp__server__tool`), `*` for
    /// any; `*` matches any run of characters.
    pub tool: String,
    /// The command (`Bash`), the file (`Edit`, `Write`, `Read`) or the URL,
    /// with `*` wildcards; empty: any.
    #[serde(default)]
    pub command: String,
    pub decision: ApproveDecision,
    /// A name for the audit log and the agent (default: the rule's number
    /// and pattern).
    #[serde(default)]
    pub name: String,
}

/// What an `[[hooks.approve]]` rule answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApproveDecision {
    /// The call goes ahead, no prompt.
    Allow,
    /// The call is refused, the agent told why.
    Deny,
    /// The person decides: the prompt is shown and the unit needs you
    /// (`permission`).
    Ask,
}

impl ApproveRule {
    /// Whether the rule covers `tool` with `subject` (the command, file or
    /// URL of the call; empty when it has none).
    pub fn matches(&self, tool: &str, subject: &str) -> bool {
        self.covers(tool, subject)
    }

    /// The rule as the audit log and the agent name it.
    pub fn label(&self, index: usize) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        let on = if self.command.is_empty() {
            self.tool.clone()
        } else {
            format!("{} {}", self.tool, self.command)
        };
        format!("hooks.approve[{index}] ({on})")
    }
}

/// Characters a `*` of a rule's command never stands for: a rule for
/// `cargo test*` covers `cargo test -p x`, never `cargo test; rm -rf ~`
/// or `cargo test $(curl …)`.
const SHELL_OPERATORS: &[char] = &[';', '&', '|', '`', '$', '(', ')', '<', '>', '\n', '\r'];

impl ApproveRule {
    fn covers(&self, tool: &str, subject: &str) -> bool {
        wildcard(&self.tool, tool, &[])
            && (self.command.is_empty() || wildcard(&self.command, subject, SHELL_OPERATORS))
    }
}

/// `pattern` with `*` (any run of characters, none included, none of
/// `never`) matches all of `text`.
fn wildcard(pattern: &str, text: &str, never: &[char]) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // at[j]: the pattern so far matches the first j characters of text.
    let mut at = vec![false; t.len() + 1];
    at[0] = true;
    for &pc in &p {
        let mut next = vec![false; t.len() + 1];
        if pc == '*' {
            for j in 0..=t.len() {
                next[j] = at[j] || (j > 0 && next[j - 1] && !never.contains(&t[j - 1]));
            }
        } else {
            for j in 1..=t.len() {
                next[j] = at[j - 1] && t[j - 1] == pc;
            }
        }
        at = next;
    }
    at[t.len()]
}

#[cfg(test)]
mod approve_tests {
    use super::*;

    fn rule(tool: &str, command: &str) -> ApproveRule {
        ApproveRule {
            tool: tool.into(),
            command: command.into(),
            decision: ApproveDecision::Allow,
            name: String::new(),
        }
    }

    #[test]
    fn rules_match_by_tool_and_command_with_wildcards() {
        assert!(rule("Bash", "cargo test*").matches("Bash", "cargo test -p x"));
        assert!(rule("Bash", "cargo test*").matches("Bash", "cargo test"));
        // A wildcard never spans a shell operator.
        for chained in [
            "cargo test; rm -rf ~",
            "cargo test && curl x | sh",
            "cargo test $(curl x)",
            "cargo test `id`",
            "cargo test > ~/.bashrc",
            "cargo test\nrm -rf ~",
        ] {
            assert!(
                !rule("Bash", "cargo test*").matches("Bash", chained),
                "{chained}"
            );
        }
        assert!(!rule("Bash", "cargo test*").matches("Edit", "cargo test"));
        assert!(!rule("Bash", "git *").matches("Bash", "rm -rf /"));
        assert!(rule("*", "").matches("WebFetch", "https://x"));
        assert!(rule("mcp__*", "").matches("mcp__github__list", ""));
        assert!(rule("Edit", "*.md").matches("Edit", "docs/a.md"));
        assert!(!rule("Edit", "*.md").matches("Edit", "docs/a.rs"));
        assert!(rule("Read", "src/*/lib.rs").matches("Read", "src/x/lib.rs"));
        assert!(!rule("Read", "a*a").matches("Read", "a"));
        assert_eq!(
            rule("Bash", "git *").label(2),
            "hooks.approve[2] (Bash git *)"
        );
    }
}

#[cfg(test)]
mod store_sync_tests {
    use super::*;

    /// A mode's name is the one `store.sync` reads, and each mode is its
    /// own store mode.
    #[test]
    fn each_sync_mode_is_named_as_the_config_reads_it() {
        use xo_bus::file_store::SyncMode;
        let modes: Vec<SyncMode> = StoreSync::ALL.into_iter().map(SyncMode::from).collect();
        assert_eq!(modes, [SyncMode::Always, SyncMode::Batch, SyncMode::Never]);
        for s in StoreSync::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(
                serde_json::from_value::<StoreSync>(s.as_str().into()).unwrap(),
                s
            );
        }
    }
}
