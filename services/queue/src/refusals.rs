//! Requests on a lease that do not hold it: a token that is not the
//! lease's (stale after the lease moved on, or a guess) or a claimant that
//! is not its holder. Each is refused and counted by who sent it; the first
//! and every doubling after are logged (a flood does not flood the log),
//! and [`ALERT_AFTER`] within [`WINDOW_MS`] from one claimant raise a
//! `lease_refused` alert, once a window.

use std::collections::HashMap;

use tracing::warn;
use xo_proto::alert::AlertKind;
use xo_proto::control::{ErrorCode, ServiceError};
use xo_proto::queue::Lease;

use crate::machine::AlertDraft;

/// Refusals from one claimant within [`WINDOW_MS`] that raise an alert. A
/// runner whose lease lapsed sends one or two (a heartbeat, its result).
pub const ALERT_AFTER: u32 = 5;
/// The window refusals are counted in (ms).
pub const WINDOW_MS: u64 = 10 * 60 * 1000;
/// Claimants remembered at most (a flood of invented names cannot grow
/// the queue without bound; the oldest window is forgotten first).
const MAX_CLAIMANTS: usize = 10_000;

#[derive(Debug, Default)]
struct Tally {
    /// Refusals since the queue started.
    total: u64,
    window_start: u64,
    in_window: u32,
    alerted: bool,
}

/// Refused lease requests, by claimant.
#[derive(Debug, Default)]
pub struct Refusals {
    by: HashMap<String, Tally>,
    /// Every refusal since the queue started.
    pub total: u64,
}

/// A refused request: the error its sender gets, and the alert to raise.
#[derive(Debug)]
pub struct Refused {
    pub error: ServiceError,
    pub alert: Option<AlertDraft>,
}

impl Refusals {
    /// Checks a request on `task_id`'s lease; `lease` is the lease while
    /// the task runs (`None`: not running, the machine answers that).
    /// `claimant` empty: a trusted caller on the plain subject, who needs
    /// only the token.
    pub fn check(
        &mut self,
        lease: Option<&Lease>,
        task_id: &str,
        token: &str,
        claimant: &str,
        now: u64,
    ) -> Result<(), Refused> {
        let Some(lease) = lease else {
            return Ok(());
        };
        let wrong_claimant = !claimant.is_empty() && claimant != lease.claimant;
        let wrong_token = !xo_runtime::secret::same(&lease.token, token);
        if !wrong_claimant && !wrong_token {
            return Ok(());
        }
        let error = if wrong_claimant {
            ServiceError::new(
                ErrorCode::Invalid,
                format!(
                    "task {task_id}: leased to {:?}, not to {claimant:?}; a runner acts only on its own leases",
                    lease.claimant
                ),
            )
        } else {
            ServiceError::new(
                ErrorCode::Invalid,
                format!("task {task_id}: lease lost (another claimant holds it now)"),
            )
        };
        let who = if claimant.is_empty() {
            "(unnamed)"
        } else {
            claimant
        };
        let alert = self.note(who, task_id, &lease.claimant, wrong_claimant, now);
        Err(Refused { error, alert })
    }

    fn note(
        &mut self,
        who: &str,
        task_id: &str,
        holder: &str,
        wrong_claimant: bool,
        now: u64,
    ) -> Option<AlertDraft> {
        self.total += 1;
        if !self.by.contains_key(who) && self.by.len() >= MAX_CLAIMANTS {
            let oldest = self
                .by
                .iter()
                .min_by_key(|(_, t)| t.window_start)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.by.remove(&k);
            }
        }
        let t = self.by.entry(who.to_string()).or_default();
        if now.saturating_sub(t.window_start) > WINDOW_MS {
            t.window_start = now;
            t.in_window = 0;
            t.alerted = false;
        }
        t.total += 1;
        t.in_window += 1;
        if t.total.is_power_of_two() {
            warn!(
                claimant = %who,
                task = %task_id,
                holder = %holder,
                wrong_claimant,
                refused = t.total,
                "lease request refused: wrong token or claimant (logged at 1, 2, 4, 8… from one claimant)"
            );
        }
        if t.in_window < ALERT_AFTER || t.alerted {
            return None;
        }
        t.alerted = true;
        Some(AlertDraft {
            kind: AlertKind::LeaseRefused,
            title: format!("{who}: {} lease requests refused", t.in_window),
            detail: format!(
                "{who} sent {} requests within {} minutes on leases it does not hold (last: task {task_id}, held by {holder:?}, {}). A runner whose lease lapsed sends one or two; more is a runner guessing or replaying another's lease, or one misconfigured with another unit's name. Check that runner's logs and credentials; its requests are refused and the lease holder keeps its task.",
                t.in_window,
                WINDOW_MS / 60_000,
                if wrong_claimant {
                    "wrong claimant"
                } else {
                    "wrong token"
                },
            ),
            task_id: Some(task_id.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(claimant: &str, token: &str) -> Lease {
        Lease {
            claimant: claimant.into(),
            token: token.into(),
            renewed_at: 0,
            checkpoint: false,
        }
    }

    #[test]
    fn the_holder_passes_and_others_are_refused_by_name() {
        let mut r = Refusals::default();
        let l = lease("coder-1", "t0k3n");
        assert!(r.check(Some(&l), "a", "t0k3n", "coder-1", 0).is_ok());
        assert!(r.check(Some(&l), "a", "t0k3n", "", 0).is_ok());
        assert!(r.check(None, "a", "guess", "coder-2", 0).is_ok());
        let e = r.check(Some(&l), "a", "t0k3n", "coder-2", 0).unwrap_err();
        assert!(
            e.error.message.contains("leased to \"coder-1\""),
            "{}",
            e.error
        );
        let e = r.check(Some(&l), "a", "guess", "coder-1", 0).unwrap_err();
        assert!(e.error.message.contains("lease lost"), "{}", e.error);
        assert_eq!(r.total, 2);
    }

    #[test]
    fn five_refusals_in_a_window_alert_once_and_a_new_window_again() {
        let mut r = Refusals::default();
        let l = lease("coder-1", "t0k3n");
        let alerts = |r: &mut Refusals, at: u64, n: u32| {
            (0..n)
                .filter_map(|i| {
                    r.check(Some(&l), "a", &format!("g{i}"), "coder-2", at)
                        .unwrap_err()
                        .alert
                })
                .collect::<Vec<_>>()
        };
        assert!(alerts(&mut r, 1_000, ALERT_AFTER - 1).is_empty());
        let a = alerts(&mut r, 2_000, 20);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].kind, AlertKind::LeaseRefused);
        assert!(
            a[0].title.starts_with("coder-2: 5 lease requests"),
            "{}",
            a[0].title
        );
        // Another claimant is counted on its own.
        let other = (0..ALERT_AFTER)
            .filter_map(|_| {
                r.check(Some(&l), "a", "x", "coder-3", 3_000)
                    .unwrap_err()
                    .alert
            })
            .count();
        assert_eq!(other, 1);
        // A new window alerts again.
        assert_eq!(alerts(&mut r, 2_000 + WINDOW_MS + 1, ALERT_AFTER).len(), 1);
    }
}
