//! The XO knowledge store and review supervisors (seed 001).
//!
//! - [`doc`]: the document format (rules, examples, rationale, status, changelog).
//! - [`store`]: the folder, ownership, lifecycle, selection under a token budget, index.
//! - [`service`]: the `knowledge` control API on the bus and the watcher of hand edits.
//! - [`review`]: the review supervisors (code style, design, internaliser, assessor).

pub mod doc;
pub mod review;
pub mod service;
pub mod store;

pub use store::{KnowledgeStore, StoreError};
