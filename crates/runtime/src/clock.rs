//! The services' notion of now. Tests own time with [`Clock::manual`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Now, in milliseconds since the epoch, for liveness, leases, staleness
/// and retention.
///
/// [`Clock::System`] reads the wall clock once, when the process first asks,
/// and counts on from there by the monotonic clock: a jump of the host's
/// wall clock either way (minutes, a day) neither ages every unit at once
/// nor expires live leases nor keeps a dead runner's task. Times that come
/// from other processes (a report's epoch) are compared with the wall
/// clock, within a documented skew (`xo_radio::MAX_EPOCH_AHEAD_MS`).
#[derive(Debug, Clone)]
pub enum Clock {
    System,
    Manual(Arc<AtomicU64>),
}

/// The wall clock at the process's first reading, and the monotonic
/// instant of that reading.
fn anchor() -> &'static (Instant, u64) {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    ANCHOR.get_or_init(|| (Instant::now(), xo_proto::now_ms()))
}

impl Clock {
    pub fn manual(start_ms: u64) -> Self {
        Clock::Manual(Arc::new(AtomicU64::new(start_ms)))
    }
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => {
                let (at, wall) = anchor();
                wall.saturating_add(at.elapsed().as_millis() as u64)
            }
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

/// `10:17` (UTC) from milliseconds since the epoch.
pub fn hh_mm(ms: u64) -> String {
    let at = rfc3339(ms);
    at.get(11..16).unwrap_or(&at).to_string()
}

/// `2026-11-22T10:17:20.123Z` from milliseconds since the epoch (`jiff`;
/// past jiff's last instant, late in 9999, that instant).
pub fn rfc3339(ms: u64) -> String {
    let at = i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .unwrap_or(jiff::Timestamp::MAX);
    format!("{at:.3}")
}

/// A duration as people type it: `30m`, `2h`, `1d`, `90s`, `1500ms`, or
/// plain milliseconds; `None` when it is none of these.
pub fn parse_ms(raw: &str) -> Option<u64> {
    let t = raw.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = t.strip_suffix('d') {
        (n, 86_400_000)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3_600_000)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1_000)
    } else {
        (t, 1)
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_350_000_123), "2026-11-22T12:20:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_000), "1970-01-01T00:00:01.000Z");
        assert!(
            rfc3339(u64::MAX).starts_with("9999-12-30T"),
            "{}",
            rfc3339(u64::MAX)
        );
        assert_eq!(hh_mm(1_795_350_000_123), "12:20");
    }
}
