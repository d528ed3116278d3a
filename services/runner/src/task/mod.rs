//! A claimed task's stages, each a function with typed input and output
//! in a file of its own; [`Worker::work`](crate::worker::Worker) holds
//! their order:
//!
//! 1. [`prepare`]: the operator settings, the knowledge, the job, the
//!    task's tree (its worktree on its branch) → [`prepare::Prepared`],
//!    its [`prepare::Tree`] (moved into the run) and its
//!    [`supervise::Supervision`].
//! 2. [`supervise`]: the lease, the queue's interrupts, the budget and
//!    the shutdown in one select around the run → the run's output and
//!    why its agent was stopped ([`supervise::Stop`]).
//! 3. and 4. run the agent, validate and interrogate: the pipeline's
//!    [`work`](xo_pipeline::Pipeline::work), then its work committed and
//!    merged ([`settle`](xo_pipeline::Pipeline::settle)), under the lease
//!    ([`prepare::Prepared::run`]).
//! 5. [`settle`]: the outcome, the runner event, the knowledge's uses, the
//!    delivery to the queue.
//!
//! No task is spawned per task: the supervision is a select beside the
//! run, in the worker's own task.

pub mod prepare;
pub mod settle;
pub mod supervise;
