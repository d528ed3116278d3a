//! XO runtime: layered configuration and telemetry shared by every service.
//!
//! # Layout
//!
//! - [`config`]: `XoConfig` — built-in defaults → `xo.toml` (or `--config`)
//!   → `XO__SECTION__KEY` environment → command-line overrides, then
//!   `validate()` with errors that name the key.
//! - [`telemetry`]: `tracing` logs (pretty or JSON), optional OTLP export,
//!   and the W3C trace-context propagator.
//! - [`tree`]: actor trees — one-for-one restarts with an intensity limit,
//!   escalation, and the shutdown signal every service's `run` takes.
//! - [`service`]: the one shape of a service: `start(ServiceCtx) -> Handle`,
//!   the handle a [`service::Service`] (`until`, `stop`).
//! - [`error`]: [`RuntimeError`], the one error of this library (each case
//!   a type of its own), and `runtime_error_from!` for a service's enum.
//! - [`clock`]: the services' notion of now (tests own time), RFC 3339 stamps.
//! - [`jsonl`]: appending whole JSON lines to a file.
//! - [`limits`]: the file-descriptor limit, raised at start; listeners sized below it.
//! - [`secret`]: random secrets (`getrandom`) and constant-time comparison (`subtle`).
//! - [`files`]: files replaced whole (`tempfile` in the same folder, fsync, rename).
//! - [`retry`]: one retry policy per kind of call (`backon`, with jitter).
//! - [`template`]: placeholders filled in one pass (text put in is never read again).
//! - [`settings`]: operator settings laid over `xo.toml` (which keys, how checked).
//! - [`untrusted`]: files in an agent's tree read and appended as untrusted input
//!   (no symlink followed, regular files only, bounded).

pub mod clock;
pub mod config;
pub mod error;
pub mod files;
pub mod jsonl;
pub mod limits;
pub mod retry;
pub mod secret;
pub mod service;
pub mod settings;
pub mod telemetry;
pub mod template;
pub mod tree;
pub mod untrusted;

pub use clock::Clock;
pub use config::{ConfigError, XoConfig};
pub use error::{RuntimeError, RuntimeResult};
pub use service::{Service, ServiceCtx};
