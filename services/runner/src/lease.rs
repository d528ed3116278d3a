//! The lease on a claimed task: who holds it and what the task has used
//! (each renewal carries it). Renewed every third of its length by the
//! task's supervision ([`crate::task::supervise`]); the renewal's answer
//! also says whether the queue is halted, so the runner stops its agent on
//! an operator's halt without asking for the status.

use xo_proto::queue::{self as q, Renewed, RunStatus};

/// A halt that stops running agents: any but one caused by a blocked task
/// (which lets running tasks finish).
pub fn operator_halt(r: &Renewed) -> bool {
    r.status == RunStatus::Halted
        && !r
            .halt_reason
            .as_deref()
            .is_some_and(|r| r.starts_with(q::HALT_TASK_BLOCKED))
}

/// The lease a runner holds: the task, its token and the unit it was
/// claimed for. Every renewal and the outcome name all three: the queue
/// takes them only from the lease's holder, on that unit's subject.
#[derive(Debug, Clone)]
pub struct Held {
    pub task_id: String,
    pub token: String,
    pub unit: String,
}

/// What the current task has used: the agent's turns, tokens and cost
/// (from its turns) and the wall time since the claim.
#[derive(Debug, Clone)]
pub struct Meter {
    pub turns: xo_pipeline::driver::Turns,
    pub started: std::time::Instant,
    /// The agent's checkpoint file: while it exists, heartbeats say so.
    pub checkpoint: Option<std::path::PathBuf>,
}

impl Meter {
    pub fn usage(&self) -> q::Usage {
        let mut u = self.turns.usage();
        u.wall_ms = self.started.elapsed().as_millis() as u64;
        u
    }
}
