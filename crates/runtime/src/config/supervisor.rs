//! `[supervisor]` and its `[[supervisor.watch]]`.

use super::*;

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
    /// stop, on stale and on operator steering): a crash loses at most this
    /// much, or [`Self::persist_every_ms`] where the write budget stretches it.
    pub persist_interval_ms: u64,
    /// The most unit records written to the store a second, all units
    /// together (0: no budget): past `persist_writes_per_s ×
    /// persist_interval_ms / 1000` units, each unit's state is written
    /// less often than `persist_interval_ms` rather than the store's writes
    /// growing with the fleet ([`Self::persist_every_ms`]).
    pub persist_writes_per_s: u64,
    /// Watcher restarts allowed within `restart_window_ms` before escalating.
    pub max_restarts: u32,
    pub restart_window_ms: u64,
    /// Macrocosm file mode: a shared volume with `reports/` and `steering/`; empty: off.
    pub volume: String,
    /// How often the volume's reports are polled.
    pub file_poll_ms: u64,
    /// Steering messages kept per unit for `xo units UNIT`.
    pub steering_history: usize,
    /// Reports waiting for one watcher group before the supervisor sheds:
    /// past it, a unit's newer report replaces its older one still waiting
    /// (each unit's latest is kept, the superseded ones counted in
    /// `xo_reports_shed_total`) instead of the queue growing without bound.
    /// Lower steers sooner under overload (less waits ahead of a unit's
    /// latest report) and sheds more; higher absorbs longer bursts.
    pub inbox_high: u64,
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
    /// A session's spend cap in USD (0: none): a warning steering at 80%,
    /// and at 100% the session's hook refuses its next tool call and the
    /// unit needs you (`budget`).
    pub max_cost_usd: f64,
    /// A session's token cap (input and output; 0: none), as
    /// `max_cost_usd`.
    pub max_tokens: u64,
    /// The same caps for all the watch's sessions of one day (UTC) together.
    pub max_cost_usd_per_day: f64,
    pub max_tokens_per_day: u64,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            format: String::new(),
            dirs: Vec::new(),
            role: xo_radio::AGENT_ROLE.into(),
            poll_ms: 500,
            from_start: false,
            max_cost_usd: 0.0,
            max_tokens: 0,
            max_cost_usd_per_day: 0.0,
            max_tokens_per_day: 0,
        }
    }
}

impl SupervisorConfig {
    /// How often one unit's state is handed for writing while the
    /// supervisor holds `units`: `persist_interval_ms`, stretched so that
    /// all of them together write at most `persist_writes_per_s` records a
    /// second. Sharded, never past what a take-over reads back from the
    /// reports' stream (`report_retention_ms` less two partition leases),
    /// which `validate` keeps at least `persist_interval_ms`.
    pub fn persist_every_ms(&self, units: usize) -> u64 {
        let base = self.persist_interval_ms;
        let mut every = match self.persist_writes_per_s {
            0 => base,
            per_s => base.max((units as u64).saturating_mul(1000).div_ceil(per_s)),
        };
        if self.partitions > 1 {
            let read_back = self
                .report_retention_ms
                .saturating_sub(2 * self.partition_lease_ms);
            every = every.min(read_back.max(base));
        }
        every
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
            persist_writes_per_s: 4_000,
            max_restarts: 5,
            restart_window_ms: 10_000,
            volume: String::new(),
            file_poll_ms: 500,
            steering_history: 20,
            inbox_high: 512,
            watch: Vec::new(),
            partitions: 1,
            partition_lease_ms: 10_000,
            report_retention_ms: 120_000,
            report_retention_mb: 1024,
            instance: String::new(),
        }
    }
}
