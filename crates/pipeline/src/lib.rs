//! The supervised pipeline (DESIGN §5), a library: no prompt reaches a
//! model and no output leaves it except through here. The runner service
//! (claim loop, leases, reporting) and the review supervisors both run
//! their work through it.
//!
//! compose → execute → detect halts → validate → format → complete | retry | interrogate | block
//!
//! # Layout
//!
//! - [`pipeline`]: the loop above, [`Pipeline::run`] (start here).
//! - [`compose`]: the only constructor of a [`compose::ComposedPrompt`] (SUP-1, SUP-2),
//!   the pure `xo-compose` library.
//! - [`driver`]: `command`, `openai` and `script` agents; each takes only a composed prompt;
//!   `driver::waiting`, what the agents' hooks say of a session waiting for a person.
//! - [`halt`]: the reply format (seed 002) and halt detection (seed 003).
//! - [`validate`]: deterministic validation, match quality, confidence, output template.
//! - [`sandbox`]: paths confined to the project sandbox.
//! - [`proc`]: agent processes in their own process group, bounded capture, orphans.
//! - [`project`]: `.xo/project.toml`, read at each task start.
//! - [`git`]: the task's starting commit and rollback; `repo`, XO's git through libgit2.
//! - [`worktree`]: a worktree per task, its diff, and where its work goes.
//! - [`logs`]: the prompt log and the work log with retry events.
//! - [`error`]: [`PipelineError`], the one error of this library.

/// Prompt composition: the `xo-compose` library (the console previews with it too).
pub use xo_compose as compose;
pub mod confine;
pub mod driver;
pub mod error;
pub mod git;
pub mod halt;
pub mod logs;
pub mod pipeline;
pub mod proc;
pub mod project;
pub(crate) mod repo;
pub mod sandbox;
pub mod validate;
pub mod worktree;

pub use error::PipelineError;
pub use pipeline::{Job, Outcome, Pipeline, Prepared, RunStats, TaskResult};
