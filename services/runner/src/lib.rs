//! The XO runner: claims tasks for its role and runs each through the
//! supervised pipeline with an agent driver, reporting SALUTE and
//! heartbeats and applying the XO's steering.
//!
//! # Layout
//!
//! - [`compose`]: the only constructor of a [`compose::ComposedPrompt`] (SUP-1, SUP-2).
//! - [`driver`]: `command`, `openai` and `script` agents.
//! - [`halt`]: the reply format (seed 002) and halt detection (seed 003).
//! - [`validate`]: deterministic validation, match quality, confidence, output template.
//! - [`pipeline`]: compose → execute → halts → validate → format → complete | retry | interrogate | block.
//! - [`service`]: the runner service on the bus.
//! - [`sandbox`], [`project`], [`proc`], [`git`], [`logs`]: the pieces around them.

pub mod compose;
pub mod driver;
pub mod git;
pub mod halt;
pub mod logs;
pub mod pipeline;
pub mod proc;
pub mod project;
pub mod sandbox;
pub mod service;
pub mod validate;

pub use pipeline::{Job, Outcome, Pipeline, RunStats, TaskResult};
