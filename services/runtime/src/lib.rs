//! XO runtime: layered configuration and telemetry shared by every service.
//!
//! # Layout
//!
//! - [`config`]: `XoConfig` — built-in defaults → `xo.toml` (or `--config`)
//!   → `XO__SECTION__KEY` environment → command-line overrides, then
//!   `validate()` with errors that name the key.
//! - [`telemetry`]: `tracing` logs (pretty or JSON), optional OTLP export,
//!   and the W3C trace-context propagator.

pub mod clock;
pub mod config;
pub mod telemetry;

pub use clock::Clock;
pub use config::{ConfigError, XoConfig};
