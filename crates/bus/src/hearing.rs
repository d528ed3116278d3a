//! Since when a service has heard the bus without a break: a peer's
//! silence counts only from then.
//!
//! While a service's own connection is down nobody is heard, so nobody is
//! silent; after an outage every peer (a unit reporting to the supervisor,
//! a runner renewing its lease at the queue) has its full allowance from
//! the connection's return to be heard again, since what it sent meanwhile
//! could not arrive. A peer that stays silent is found so one allowance
//! after the return.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::Bus;

/// Since when the bus has been heard without a break, looked at by a
/// service's own clock (ms).
#[derive(Debug)]
pub struct Hearing {
    /// Whose silence this decides, for the log ("units", "leases").
    of: &'static str,
    /// The bus's outage count when last looked at.
    outages: AtomicU64,
    /// The last look found the bus not heard.
    down: AtomicBool,
    /// The service's clock when the bus was found back; 0: never lost.
    since: AtomicU64,
}

impl Hearing {
    pub fn new(of: &'static str) -> Self {
        Self {
            of,
            outages: AtomicU64::new(0),
            down: AtomicBool::new(false),
            since: AtomicU64::new(0),
        }
    }

    /// Looks at the bus at `now` (a service's liveness check): an outage
    /// that ended since the last look (counted by the connection, or seen
    /// by the last look) starts the count of silence again. The time
    /// silence counts from (a peer's own last word if later), or `None`
    /// while the bus is not heard.
    pub fn look(&self, bus: &Bus, now: u64) -> Option<u64> {
        if !bus.is_connected() {
            self.down.store(true, Ordering::Relaxed);
            return None;
        }
        let outages = bus.outages();
        let counted = self.outages.swap(outages, Ordering::Relaxed) != outages;
        if self.down.swap(false, Ordering::Relaxed) || counted {
            self.since.store(now, Ordering::Relaxed);
            tracing::info!(
                of = self.of,
                outages,
                "the bus is heard again: silence counts from now"
            );
        }
        Some(self.since.load(Ordering::Relaxed))
    }
}

/// How long a peer last heard at `last` has been silent at `now`, as far
/// as a side that has heard the bus since `from` ([`Hearing::look`])
/// could have heard it: 0 while it does not hear the bus (`from` is
/// `None`), since nobody can be found silent then.
pub fn silent(last: u64, from: impl Into<Option<u64>>, now: u64) -> u64 {
    from.into()
        .map_or(0, |from| now.saturating_sub(last.max(from)))
}

#[cfg(test)]
mod tests {
    use super::silent;

    #[test]
    fn silence_counts_from_when_the_bus_was_heard_again() {
        // Heard at 1,000; the bus heard since 5,000: silent from 5,000.
        assert_eq!(silent(1_000, 5_000, 8_000), 3_000);
        // Heard after the bus came back: from then.
        assert_eq!(silent(6_000, 5_000, 8_000), 2_000);
        // The bus not heard now: nobody is silent.
        assert_eq!(silent(1_000, None, 8_000), 0);
        assert_eq!(silent(1_000, Some(5_000), 8_000), 3_000);
        // A clock behind a report's time: never negative.
        assert_eq!(silent(9_000, 5_000, 8_000), 0);
    }
}
