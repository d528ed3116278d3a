//! The XO knowledge store (seed 001): markdown documents on a shared volume,
//! their ownership and lifecycle, and the service that serves them.
//!
//! # Layout
//!
//! - [`doc`]: the document format (rules, examples, rationale, status, changelog).
//! - [`store`]: the folder, ownership, lifecycle, selection under a token budget, index.
//! - [`service`]: the `knowledge` control API on the bus and the watcher of hand edits.

/// The document format: `xo_proto::knowledge_doc` (a client model).
pub use xo_proto::knowledge_doc as doc;
pub mod relevance;
pub mod service;
pub mod store;

pub use store::{KnowledgeError, KnowledgeStore};
