//! The services' notion of now. Tests own time with [`Clock::manual`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone)]
pub enum Clock {
    System,
    Manual(Arc<AtomicU64>),
}

impl Clock {
    pub fn manual(start_ms: u64) -> Self {
        Clock::Manual(Arc::new(AtomicU64::new(start_ms)))
    }
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => xo_proto::now_ms(),
            Clock::Manual(t) => t.load(Ordering::SeqCst),
        }
    }
    /// Moves a manual clock forward; no-op on the system clock.
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(t) = self {
            t.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
        }
    }
}
