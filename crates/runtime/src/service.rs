//! The one shape of a service: `start(ServiceCtx) -> Handle`, where the
//! handle is a [`Service`].
//!
//! Every service crate has `pub async fn start(ctx: ServiceCtx) ->
//! Result<Handle, Error>` (the runner adds its options). The context holds
//! what a service may be given: the configuration, the bus, the store (for
//! the stateful ones), the clock, the shutdown signal its inputs end on,
//! and the fence of a lease when the service runs as the holder of one.
//! The handle is a [`Service`]: the process that started it (the fabric in
//! `xo`) waits on [`Service::until`] and stops it with [`Service::stop`],
//! without knowing which service it is.

use std::future::Future;
use std::pin::Pin;

use xo_bus::leader::Fence;
use xo_bus::{Bus, Store};

use crate::XoConfig;
use crate::clock::Clock;
use crate::tree::Shutdown;

/// A future a [`Service`] method returns (the trait is used as `dyn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a service's stop failed (its tree gave up, a write at stop failed):
/// the service's own error, boxed.
pub type StopError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What every service's `start` takes.
#[derive(Debug, Clone)]
pub struct ServiceCtx {
    pub cfg: XoConfig,
    pub bus: Bus,
    /// The store, for a service that keeps state (queue, supervisor); a
    /// service that needs one and gets none fails its start, saying so.
    pub store: Option<Store>,
    pub clock: Clock,
    /// Triggered when the service is to stop: its inputs end on it. A new
    /// context has its own; the fabric gives each service its own too.
    pub shutdown: Shutdown,
    /// Held while this process holds the service's lease: every write is
    /// made only while it says the lease is still held.
    pub fence: Option<Fence>,
}

/// A service that needs a store was started without one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0} keeps its state in a store and was started without one (give it NATS, or run it in `xo up`)"
)]
pub struct NoStore(pub &'static str);

impl ServiceCtx {
    /// A context with no store, the system clock, its own shutdown, no fence.
    pub fn new(cfg: XoConfig, bus: Bus) -> Self {
        Self {
            cfg,
            bus,
            store: None,
            clock: Clock::System,
            shutdown: Shutdown::new(),
            fence: None,
        }
    }

    pub fn with_store(mut self, store: Store) -> Self {
        self.store = Some(store);
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    pub fn with_fence(mut self, fence: Option<Fence>) -> Self {
        self.fence = fence;
        self
    }

    /// The store of a service that cannot run without one.
    pub fn store(&self, service: &'static str) -> Result<Store, NoStore> {
        self.store.clone().ok_or(NoStore(service))
    }

    /// The same context with a fresh shutdown signal (for the next service).
    pub fn fresh(&self) -> Self {
        Self {
            shutdown: Shutdown::new(),
            ..self.clone()
        }
    }
}

/// A running service, as the process that started it sees it. A holder
/// of many finds one by its type through `dyn Any` (trait upcasting).
pub trait Service: std::any::Any + Send {
    /// Its name in logs and errors (`queue`, `runner web-1`…).
    fn name(&self) -> String;

    /// Waits for `shutdown`, or for the service to end on its own (its
    /// actor tree gave up, or it lost its lease), whichever comes first.
    fn until<'a>(&'a mut self, shutdown: BoxFuture<'a, ()>) -> BoxFuture<'a, ()>;

    /// Stops it in its own order (inputs, actors drained, writes flushed).
    /// `Err` says why it ended on its own, if it did.
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), StopError>>;
}

/// Implements [`Service`] for a handle with inherent `until(shutdown)` and
/// `stop() -> Result<(), E>` (the shape every service handle has).
#[macro_export]
macro_rules! service_handle {
    ($handle:ty, $name:expr) => {
        impl $crate::service::Service for $handle {
            fn name(&self) -> String {
                ($name).to_string()
            }
            fn until<'a>(
                &'a mut self,
                shutdown: $crate::service::BoxFuture<'a, ()>,
            ) -> $crate::service::BoxFuture<'a, ()> {
                Box::pin(<$handle>::until(self, shutdown))
            }
            fn stop(
                self: Box<Self>,
            ) -> $crate::service::BoxFuture<'static, Result<(), $crate::service::StopError>> {
                Box::pin(async move { <$handle>::stop(*self).await.map_err(Into::into) })
            }
        }
    };
}
