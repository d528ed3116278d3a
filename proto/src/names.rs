//! Wire names that are not subjects, in one place: message headers, the
//! store's buckets, keys and logs, container labels. Peers in other
//! languages (and `nats kv ls`, `docker ps --filter`) see these names.

/// Header naming why a message was dead-lettered (`too_large`, `undecodable`…).
pub const DLQ_REASON: &str = "Xo-Dlq-Reason";
/// Header with the full decode error of a dead letter.
pub const DLQ_ERROR: &str = "Xo-Dlq-Error";
/// Header naming the report file a dead letter came from (macrocosm file mode).
pub const DLQ_FILE: &str = "Xo-Dlq-File";

/// The store bucket of the queue's state (`status`, `settings`, `task.<id>`).
pub const QUEUE_BUCKET: &str = "queue";
/// The store log the queue's audit records are appended to.
pub const AUDIT_LOG: &str = "audit";
/// The key of the active queue instance's lease in [`QUEUE_BUCKET`].
pub const QUEUE_LEADER_KEY: &str = "leader";
/// The queue's status in [`QUEUE_BUCKET`].
pub const QUEUE_STATUS_KEY: &str = "status";
/// The last status that decoded, copied at every start of the queue: what
/// a status that no longer decodes is recovered from.
pub const QUEUE_GOOD_STATUS_KEY: &str = "status.good";
/// An undecodable status, kept as it was when the queue recovered from
/// [`QUEUE_GOOD_STATUS_KEY`].
pub const QUEUE_CORRUPT_STATUS_KEY: &str = "status.corrupt";
/// The store bucket of the supervisor's unit state (a key a unit).
pub const UNITS_BUCKET: &str = "units";
/// The store bucket of units' steering histories, apart from their state
/// so that a unit's state is saved without them: a key a kept steering,
/// `<unit>.<slot>`, each unit's slots reused in turn
/// (`supervisor.steering_history` of them).
pub const UNIT_STEERING_BUCKET: &str = "unit_steering";
/// The store bucket of sharded supervisors: members and partition leases.
pub const SUPERVISORS_BUCKET: &str = "supervisors";
/// The store bucket of leases of services run once per deployment.
pub const LEASES_BUCKET: &str = "leases";
/// The key of the singletons' lease (review, notify, fleet) in [`LEASES_BUCKET`].
pub const SINGLETONS_LEASE_KEY: &str = "singletons";

/// A project's prompt log, under `<queue.data_dir>/<project>/`: every
/// prompt and reply of its tasks, a JSON line each.
pub const PROMPT_LOG: &str = "prompts.log.jsonl";

/// Where a task's work log lives: `<data>/<project>/tasks/<task>.md`, in
/// XO's data beside the prompt log, never in the project's tree (an agent
/// could replace a file there with a symlink and have the runner append to
/// `~/.bashrc`). A path, not a read: the runner writes it, the console
/// shows it. `project_data` is `<data>/<project>`.
pub fn work_log(project_data: &std::path::Path, task_id: &str) -> std::path::PathBuf {
    project_data.join("tasks").join(format!("{task_id}.md"))
}

/// A project's audit file: `<data>/<project>/audit.log.jsonl`, the queue's
/// hash-chained lines (what `xo audit verify` checks, through the queue's
/// `audit_verify` verb). A path, not a read.
pub fn audit_file(data_dir: &std::path::Path, project: &str) -> std::path::PathBuf {
    data_dir.join(project).join("audit.log.jsonl")
}

/// Docker labels of the runner containers the fleet manager owns.
pub const LABEL_ORG: &str = "xo.org";
pub const LABEL_UNIT: &str = "xo.unit";
pub const LABEL_ROLE: &str = "xo.role";
pub const LABEL_MANAGED: &str = "xo.managed";
