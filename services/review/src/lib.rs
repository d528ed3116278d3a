//! The review supervisors (seed 001), run by the XO at natural breakpoints:
//! code style, design, internaliser, and the assessor. Each run goes through
//! the supervised pipeline ([`xo_pipeline`]) on the review model route.
//!
//! # Layout
//!
//! - [`schedule`]: who is due and why (counters, urgency, convergence); pure.
//! - [`findings`]: the strict output types of each reviewer and their parsing.
//! - [`runlog`]: the run log (`reviews.jsonl`) and the budgets read from it.
//! - [`runs`]: the control API (`xo.ctl.review.runs`): the run log.
//! - [`service`]: the loop — hears task and runner events, then for each due
//!   reviewer gates (budget, model, sandbox) → runs → applies (documents,
//!   directives, verdict, convergence).

pub mod findings;
pub mod runlog;
pub mod runs;
pub mod schedule;
pub mod service;

pub use service::start;
