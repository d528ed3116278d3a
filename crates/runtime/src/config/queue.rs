//! `[queue]`.

use super::*;

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
