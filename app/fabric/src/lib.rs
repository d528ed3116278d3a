//! XO's assembly: what starts the services of one process and stops them.
//! Not a service and not a library of the services: it depends on every
//! service, and only the `xo` binary, the benches and the tests depend on it.
//!
//! - [`fabric`]: [`fabric::Fabric`], a started set of services over one bus
//!   and store (`xo up`, `xo serve …`, `xo watch`, the benches).
//! - [`slots`]: the start order, written once ([`slots::Slot::ORDER`]), the
//!   plan, the list of running services, and the one place each service is
//!   started from its `start(ServiceCtx)`.
//! - `singletons`: notify, fleet and review under one lease on NATS.
//! - [`connect`]: which bus a command talks to.
//! - [`nats_config`]: the NATS server configuration XO needs (users,
//!   permissions, partition mappings).

pub mod connect;
pub mod fabric;
pub mod nats_config;
mod singletons;
pub mod slots;

pub use fabric::{Fabric, Transport};
pub use slots::{ConsoleMode, Plan, Services, Slot};
