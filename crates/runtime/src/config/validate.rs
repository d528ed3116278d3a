//! `XoConfig::validate`: every key checked, errors naming the key.

use super::*;

impl XoConfig {
    /// Checks every key; the error names the first key that is wrong and
    /// why. One check per part of the configuration, in this order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_process()?;
        self.check_bus()?;
        self.check_console()?;
        self.check_supervisor()?;
        self.check_positive()?;
        self.check_runner()?;
        self.check_queue()?;
        self.check_alerts()?;
        self.check_review()?;
        self.check_roles()?;
        Ok(())
    }

    /// The process: its runtime's threads.
    fn check_process(&self) -> Result<(), ConfigError> {
        if self.state.runtime_threads > 1024 {
            return Err(invalid(
                "state.runtime_threads",
                format!(
                    "{} threads: 0 gives one per core, 1 one thread, at most 1024",
                    self.state.runtime_threads
                ),
            ));
        }
        Ok(())
    }

    /// The bus and its messages: the subject prefix, NATS replicas and TLS files, the message size limit, the server URLs.
    fn check_bus(&self) -> Result<(), ConfigError> {
        xo_proto::Subjects::validate_prefix(&self.org.prefix)
            .map_err(|r| invalid("org.prefix", r.into()))?;
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
        if !self.nats.url.is_empty() {
            for one in self.nats.url.split(',') {
                let parsed = url::Url::parse(one.trim());
                let why = match &parsed {
                    Err(e) => Some(e.to_string()),
                    Ok(u) if !["nats", "tls", "ws", "wss"].contains(&u.scheme()) => {
                        Some(format!("scheme {:?}", u.scheme()))
                    }
                    Ok(u) if u.host_str().is_none_or(str::is_empty) => Some("no host".into()),
                    Ok(_) => None,
                };
                if let Some(why) = why {
                    return Err(invalid(
                        "nats.url",
                        format!(
                            "{:?} is not a nats://, tls://, ws:// or wss:// URL ({why}); several servers are separated by commas",
                            xo_bus::nats::redact_url(one)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The console: its listen address, open reads, connection limits and timeouts.
    fn check_console(&self) -> Result<(), ConfigError> {
        if self.console.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "console.listen",
                format!(
                    "{:?} is not an address and port (like 127.0.0.1:7878)",
                    self.console.listen
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
        if c.max_per_client == 0 {
            return Err(invalid(
                "console.max_per_client",
                "0 would refuse every connection: at least 1 (default 32)".into(),
            ));
        }
        for (key, ms, floor) in [
            ("console.header_timeout_ms", c.header_timeout_ms, 100),
            ("console.idle_timeout_ms", c.idle_timeout_ms, 100),
        ] {
            if ms < floor {
                return Err(invalid(
                    key,
                    format!(
                        "{ms} ms would close connections before a browser sends a request: at least {floor} (defaults 10000 and 300000)"
                    ),
                ));
            }
        }
        if c.idle_timeout_ms <= crate::config::EVENT_KEEPALIVE_MS {
            return Err(invalid(
                "console.idle_timeout_ms",
                format!(
                    "{} ms would close the live event streams between their keep-alives (every {} ms): more than that (default 300000)",
                    c.idle_timeout_ms,
                    crate::config::EVENT_KEEPALIVE_MS
                ),
            ));
        }
        Ok(())
    }

    /// The supervisor: retention, partitions and their leases, the sessions it watches.
    fn check_supervisor(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// Every period, count and size that must be greater than 0.
    fn check_positive(&self) -> Result<(), ConfigError> {
        let s = &self.supervisor;
        for (key, v) in [
            ("nats.ping_interval_ms", self.nats.ping_interval_ms),
            ("supervisor.stale_after_ms", s.stale_after_ms),
            ("supervisor.tick_ms", s.tick_ms),
            ("supervisor.flush_interval_ms", s.flush_interval_ms),
            ("supervisor.persist_interval_ms", s.persist_interval_ms),
            ("supervisor.restart_window_ms", s.restart_window_ms),
            ("supervisor.file_poll_ms", s.file_poll_ms),
            ("supervisor.inbox_high", s.inbox_high),
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
        Ok(())
    }

    /// The runner: merge mode, numbers in range, retries, model URLs, timeouts, confinement, output sizes, the driver.
    fn check_runner(&self) -> Result<(), ConfigError> {
        if self.runner.merge == super::runner::MergeMode::Push
            && self.runner.push_remote.trim().is_empty()
        {
            return Err(invalid(
                "runner.push_remote",
                "runner.merge = \"push\" needs the remote to push task branches to (a URL or a path)".into(),
            ));
        }
        if self.runner.merge != super::runner::MergeMode::None
            && self.runner.merge != super::runner::MergeMode::Ff
            && self.runner.isolation == super::runner::Isolation::Directory
        {
            return Err(invalid(
                "runner.merge",
                "merge and push need runner.isolation = \"worktree\" (in a shared directory a task has no branch of its own)".into(),
            ));
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
            if let (false, Some(why)) = (url.is_empty(), not_http_url(url)) {
                return Err(invalid(
                    key,
                    format!(
                        "{url:?} is not a URL ({why}): give http(s)://HOST[:PORT]/PATH, e.g. http://localhost:11434/v1"
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
        self.runner
            .confine_ports()
            .map_err(|e| invalid("runner.confine_connect", e.to_string()))?;
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
            .map_err(|r| invalid("runner.default_project", r.into()))?;
        let d = &self.runner.driver;
        if d.kind == DriverKind::Command && d.command.is_empty() {
            return Err(invalid(
                "runner.driver.command",
                "the command driver needs an argv, e.g. [\"my-agent\", \"--prompt-file\", \"{prompt_file}\"]".into(),
            ));
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
        Ok(())
    }

    /// The queue: its roles and budget.
    fn check_queue(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// Alerts: webhook URLs, attempts and timeouts.
    fn check_alerts(&self) -> Result<(), ConfigError> {
        for (i, w) in self.alerts.webhooks.iter().enumerate() {
            if let Some(why) = not_http_url(&w.url) {
                return Err(invalid(
                    &format!("alerts.webhooks[{i}].url"),
                    format!("{:?} is not an http:// or https:// URL ({why})", w.url),
                ));
            }
        }
        if self.alerts.attempts == 0 || self.alerts.timeout_ms == 0 {
            return Err(invalid(
                "alerts.attempts",
                "attempts and timeout_ms must be greater than 0".into(),
            ));
        }
        Ok(())
    }

    /// Review: its project and convergence numbers.
    fn check_review(&self) -> Result<(), ConfigError> {
        xo_proto::validate_token("review.project", &self.review.project)
            .map_err(|r| invalid("review.project", r.into()))?;
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
        Ok(())
    }

    /// Each role's doctrine.
    fn check_roles(&self) -> Result<(), ConfigError> {
        for (name, profile) in &self.roles {
            profile
                .doctrine
                .validate()
                .map_err(|r| ConfigError::Invalid {
                    key: format!("roles.{name}.{}", r.field()),
                    reason: r.to_string(),
                })?;
        }
        Ok(())
    }
}

/// Why `s` is no http(s) URL with a host (`url`); `None`: it is one.
fn not_http_url(s: &str) -> Option<String> {
    match url::Url::parse(s) {
        Err(e) => Some(e.to_string()),
        Ok(u) if !matches!(u.scheme(), "http" | "https") => {
            Some(format!("scheme {:?}", u.scheme()))
        }
        Ok(u) if u.host_str().is_none_or(str::is_empty) => Some("no host".into()),
        Ok(_) => None,
    }
}

/// A key that is wrong, and why.
fn invalid(key: &str, reason: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        reason,
    }
}
