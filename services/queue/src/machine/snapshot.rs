//! An audit line's `state_before` and `state_after`. Seed 003's state of
//! the queue is built typed, and encoded once, as its line is written (it
//! was built as a JSON value, a map of owned keys, and encoded from that:
//! four of them a claim-and-complete cycle). Its keys are written in the
//! order a JSON value's map keeps them (sorted), so a line reads the same
//! as before, and a line decoded and encoded again is byte for byte itself.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use xo_proto::queue::{ExecutionMode, RunStatus, TaskState};

/// One side of an audit line's change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AuditState {
    /// Seed 003's state of the queue ([`SeedState`]).
    Seed(Box<SeedState>),
    /// Anything else (a settings change, an operator's action, a Manager's
    /// reply), and `null`.
    Json(serde_json::Value),
}

impl Default for AuditState {
    fn default() -> Self {
        Self::Json(serde_json::Value::Null)
    }
}

impl From<serde_json::Value> for AuditState {
    fn from(v: serde_json::Value) -> Self {
        Self::Json(v)
    }
}

impl AuditState {
    /// The state as a JSON value, as the line holds it (to read it back).
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            Self::Json(v) => v.clone(),
            Self::Seed(s) => serde_json::to_value(s).unwrap_or_default(),
        }
    }

    /// Names who asked for the change (`by`); a `null` state becomes
    /// `{"by": …}`, a value that is not an object is left as it is.
    pub fn sign(&mut self, by: &str) {
        match self {
            Self::Seed(s) => s.by = Some(by.to_string()),
            Self::Json(serde_json::Value::Object(o)) => {
                o.insert("by".into(), by.into());
            }
            Self::Json(v @ serde_json::Value::Null) => *v = serde_json::json!({ "by": by }),
            Self::Json(_) => {}
        }
    }

    /// Moves `last_updated` to `at`, where the state has one.
    pub fn stamp(&mut self, at: &str) {
        match self {
            Self::Seed(s) => at.clone_into(&mut s.last_updated),
            Self::Json(v) => {
                if let Some(old) = v.get_mut("last_updated") {
                    *old = at.into();
                }
            }
        }
    }

    /// Seed 003's state, for the notes a task's line adds to it.
    pub fn seed_mut(&mut self) -> Option<&mut SeedState> {
        match self {
            Self::Seed(s) => Some(s),
            Self::Json(_) => None,
        }
    }
}

/// Seed 003's state: `supervisor` (status, iteration, last task, halt
/// reason and details, and `retry_count_<task>` for the task concerned),
/// `goal`, `queue.exhausted`, `execution_mode`, `last_updated`, and
/// `completed_tasks` as a count. A task's line adds the `task` itself, and
/// some lines a note (`interrupt`, `yielded_to` and `note`); `by` names who
/// asked. Fields in the order of their names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedState {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    pub completed_tasks: u64,
    pub execution_mode: ExecutionMode,
    pub goal: GoalState,
    /// The critical task a running task was asked to yield to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<String>,
    pub last_updated: String,
    /// What the agent said as it yielded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub queue: QueueState,
    pub supervisor: SupervisorState,
    /// On a task's line: the task (`null` if it is gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<Option<TaskSnapshot>>,
    /// The critical task a task yielded to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub yielded_to: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoalState {
    pub completed: bool,
    pub description: String,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueState {
    pub exhausted: bool,
}

/// The supervisor's part; `retry_count_<task>` is a key named by its task.
#[derive(Debug, Clone, PartialEq)]
pub struct SupervisorState {
    pub halt_details: Option<String>,
    pub halt_reason: Option<String>,
    pub iteration: u64,
    pub last_task_id: Option<String>,
    /// The task concerned and its retries.
    pub retry_count: Option<(String, u32)>,
    pub status: RunStatus,
}

impl Serialize for SupervisorState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // In the order of the keys' names: `retry_count_…` sorts after
        // `last_task_id` and before `status`, whatever the task is named.
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("halt_details", &self.halt_details)?;
        m.serialize_entry("halt_reason", &self.halt_reason)?;
        m.serialize_entry("iteration", &self.iteration)?;
        m.serialize_entry("last_task_id", &self.last_task_id)?;
        if let Some((task, n)) = &self.retry_count {
            m.serialize_entry(&format_args!("retry_count_{task}"), n)?;
        }
        m.serialize_entry("status", &self.status)?;
        m.end()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSnapshot {
    pub attempt: u32,
    pub claimant: Option<String>,
    pub reason: Option<String>,
    pub retries: u32,
    pub state: TaskState,
    pub task_id: String,
}
