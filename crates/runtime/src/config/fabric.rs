//! Sections every process reads: `org`, `nats`, `state`, `wire`,
//! `telemetry`.

use super::*;

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
    /// Messages each subscription holds before the client drops new ones
    /// (0: the client's 65,536). Drops are counted
    /// (`xo_reports_dropped_total`) and alerted (`reports_lost`).
    pub subscription_capacity: usize,
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
            subscription_capacity: 0,
        }
    }
}

/// Why a value's `$(NAME)` or `${NAME}` could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("unclosed ${0}")]
    Unclosed(char),
    #[error("environment variable {0} is not set")]
    Unset(String),
}

/// `$(NAME)` and `${NAME}` replaced by the environment's values.
pub(super) fn expand_env(s: &str) -> Result<String, EnvError> {
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
            return Err(EnvError::Unclosed(if close == ')' { '(' } else { '{' }));
        };
        let name = &tail[1..end];
        let v = std::env::var(name).map_err(|_| EnvError::Unset(name.to_string()))?;
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
    /// How long `xo up` and `xo serve` wait, after ctrl-c or SIGTERM, for
    /// their services to stop (drain, write their state) before exiting
    /// anyway, saying so: a store or NATS that does not answer never keeps
    /// the process. A second signal exits at once.
    pub stop_grace_ms: u64,
    /// The threads of the process's async runtime: 0 gives one per core;
    /// 1 runs every task of the process on the thread that started it (no
    /// wake-up crosses threads: what a supervisor given one core wants,
    /// docs/performance.md); N > 1 gives N.
    pub runtime_threads: usize,
    /// Whether the kernel may back this process's memory with transparent
    /// huge pages. Off by default: where the kernel's policy is `always`,
    /// each first touch of memory the allocator gave back and takes again
    /// zeroes 2 MiB, and the queue and the radio check ran 5–35% slower
    /// with them (docs/performance.md §32). `true` leaves the kernel's
    /// policy as it is.
    pub huge_pages: bool,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from(".xo"),
            stop_grace_ms: 10_000,
            runtime_threads: 0,
            huge_pages: false,
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
    /// The collector's OTLP/HTTP base URL, e.g. `http://localhost:4318`
    /// (spans go to its `v1/traces`); empty: no export.
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
