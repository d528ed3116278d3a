//! One retry policy per kind of call, each an exponential backoff with
//! jitter (`backon`): callers that fail together (runners whose queue
//! restarted, a fleet's webhooks behind one receiver) spread their next
//! attempts instead of arriving in step. Each policy is a [`Delays`]
//! iterator: the caller keeps its own loop, what it retries and when it
//! gives up, and sleeps for the next delay (`None`: out of attempts).
//!
//! | kind | first delay | cap | attempts |
//! |---|---|---|---|
//! | [`model_call`] | `backoff_ms` | 60 s | `max_attempts` |
//! | [`webhook`] | `backoff_ms` | 60 s | `attempts` |
//! | [`outcome`] | 1 s | 5 s | 5 |
//! | [`store_write`] | 50 ms | 2 s | until it succeeds or the lease is lost |
//!
//! Jitter adds up to one more delay at random (backon's: a delay `d` is
//! slept as `d` to `2d`).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// The delays between attempts (the first after the first failure).
pub type Delays = backon::ExponentialBackoff;

fn policy(first: Duration, cap: Duration, retries: Option<usize>) -> Delays {
    let b = ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(cap.max(first))
        .with_factor(2.0)
        .with_jitter();
    match retries {
        Some(n) => b.with_max_times(n),
        None => b.without_max_times(),
    }
    .build()
}

/// A model provider's chat call: `attempts` in all, from `first`.
pub fn model_call(first: Duration, attempts: u32) -> Delays {
    policy(first, Duration::from_secs(60), Some(retries(attempts)))
}

/// An alert to a webhook: `attempts` in all, from `first`.
pub fn webhook(first: Duration, attempts: u32) -> Delays {
    policy(first, Duration::from_secs(60), Some(retries(attempts)))
}

/// A runner's outcome to the queue: five attempts, from a second.
pub fn outcome() -> Delays {
    policy(Duration::from_secs(1), Duration::from_secs(5), Some(4))
}

/// The queue's write to its store: until it succeeds (the caller stops
/// when its lease is lost), from 50 ms, at most 2 s apart.
pub fn store_write() -> Delays {
    policy(Duration::from_millis(50), Duration::from_secs(2), None)
}

/// Retries after the first attempt, for `attempts` in all.
fn retries(attempts: u32) -> usize {
    attempts.saturating_sub(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_counted_and_delays_grow_within_their_jitter() {
        let d: Vec<Duration> = model_call(Duration::from_millis(100), 4).collect();
        assert_eq!(d.len(), 3, "4 attempts: 3 waits");
        for (i, w) in d.iter().enumerate() {
            let base = Duration::from_millis(100 << i);
            assert!(*w >= base && *w <= base * 2, "wait {i}: {w:?}");
        }
        assert_eq!(webhook(Duration::from_millis(10), 1).count(), 0);
        assert_eq!(outcome().count(), 4);
    }

    #[test]
    fn the_cap_holds_and_a_store_write_never_runs_out() {
        let mut s = store_write();
        let waits: Vec<Duration> = (&mut s).take(50).collect();
        assert_eq!(waits.len(), 50);
        assert!(
            waits.iter().all(|w| *w <= Duration::from_secs(4)),
            "{waits:?}"
        );
    }

    /// Two callers failing together do not wait the same: the jitter
    /// draws apart (20 waits of 1 s, all equal only with no jitter).
    #[test]
    fn two_callers_do_not_retry_in_step() {
        let a: Vec<Duration> = outcome().collect();
        let b: Vec<Duration> = outcome().collect();
        let c: Vec<Duration> = outcome().collect();
        assert!(a != b || b != c, "{a:?} {b:?} {c:?}");
    }
}
