//! What every part of the supervisor shares: configuration and handles
//! ([`Ctx`]), and the counters behind `xo.ctl.supervisor.stats`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use xo_bus::{Bus, Store};
use xo_proto::Subjects;
use xo_proto::control::{StatsReply, SteeringMinute};
use xo_runtime::{Clock, XoConfig};

use crate::persist;

/// A counter bumped by watchers on every core: one cache line per shard,
/// so that cores do not take turns owning one line on every report.
#[derive(Debug, Default)]
pub struct Sharded([Padded; 8]);

#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

impl Sharded {
    pub fn incr(&self) {
        thread_local! {
            static SHARD: usize = {
                static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            };
        }
        let i = SHARD.with(|s| *s) % self.0.len();
        self.0[i].0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn load(&self) -> u64 {
        self.0.iter().map(|p| p.0.load(Ordering::Relaxed)).sum()
    }
}

/// Counters, shared by every part of the service.
#[derive(Debug, Default)]
pub struct Counters {
    pub reports: AtomicU64,
    pub heartbeats: AtomicU64,
    pub evaluated: Sharded,
    pub duplicates: AtomicU64,
    pub dead_letters: AtomicU64,
    pub steering: AtomicU64,
    /// `steering` by kind, in `AnomalyKind::ALL`'s order.
    pub steering_by_kind: [AtomicU64; xo_proto::AnomalyKind::ALL.len()],
    pub watcher_restarts: AtomicU64,
    /// Report files whose reading panicked (skipped; the poller goes on).
    pub panics: AtomicU64,
    pub missed: AtomicU64,
    /// Reports replaced by a newer one of their unit while waiting for a
    /// watcher group past `supervisor.inbox_high` (shed on purpose).
    pub shed: AtomicU64,
    pub evicted: AtomicU64,
    /// Steering by kind per minute, the last `SteeringMinute::KEPT` minutes
    /// that had any (a steering is rare next to a report: one lock is fine).
    pub minutes: std::sync::Mutex<
        std::collections::VecDeque<(u64, [u32; xo_proto::AnomalyKind::ALL.len()])>,
    >,
    /// Units that went stale since the last liveness check said so: how
    /// many, and the first few names. One summary line a check, not a line
    /// a unit (100k units going silent once logged 520k lines).
    pub went_stale: std::sync::Mutex<(u64, Vec<String>)>,
    /// Reports missing from units' sequences since the last summary: how
    /// many, and the first few units.
    pub gapped: std::sync::Mutex<(u64, Vec<String>)>,
    /// Losses not yet said (gaps, and the connection's drops past
    /// `dropped_said`), and when they were last said (ms).
    lost: std::sync::Mutex<Lost>,
}

/// What [`Counters::losses_due`] has said so far.
#[derive(Debug, Default)]
struct Lost {
    /// The connection's drop count when last said.
    dropped_said: u64,
    /// The shed count when last said.
    shed_said: u64,
    /// Gaps counted since last said, and the first few units.
    gaps: u64,
    units: Vec<String>,
    said_at: Option<u64>,
}

/// Losses are said (a log line, a `reports_lost` alert) at most this often.
pub const LOST_EVERY_MS: u64 = 60_000;

/// Losses to say: reports the connection dropped, reports missing from
/// units' sequences, and the first few units with gaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Losses {
    pub dropped: u64,
    pub gaps: u64,
    /// Reports superseded by a newer one of their unit and not checked.
    pub shed: u64,
    pub units: Vec<String>,
}

/// Names a summary line shows.
pub const SUMMARY_NAMES: usize = 5;

impl Counters {
    /// A unit went stale: counted for the next summary.
    pub fn stale(&self, unit: &str) {
        let mut b = self.went_stale.lock().unwrap_or_else(|e| e.into_inner());
        b.0 += 1;
        if b.1.len() < SUMMARY_NAMES {
            b.1.push(unit.to_string());
        }
    }

    /// `n` reports of `unit` never arrived (a gap in its sequence).
    pub fn gap(&self, unit: &str, n: u64) {
        self.missed.fetch_add(n, Ordering::Relaxed);
        let mut l = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        l.gaps += n;
        if l.units.len() < SUMMARY_NAMES && !l.units.iter().any(|u| u == unit) {
            l.units.push(unit.to_string());
        }
    }

    /// The losses to say at `now`, given the connection's drop count
    /// `dropped`: `None` when there are none, or when the last were said
    /// less than [`LOST_EVERY_MS`] ago (they wait, added up, for the next).
    pub fn losses_due(&self, dropped: u64, now: u64) -> Option<Losses> {
        let mut l = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        let new_drops = dropped.saturating_sub(l.dropped_said);
        let shed = self.shed.load(Ordering::Relaxed);
        let new_shed = shed.saturating_sub(l.shed_said);
        if new_drops == 0 && l.gaps == 0 && new_shed == 0 {
            return None;
        }
        if l.said_at
            .is_some_and(|at| now.saturating_sub(at) < LOST_EVERY_MS)
        {
            return None;
        }
        l.said_at = Some(now);
        l.dropped_said = dropped;
        l.shed_said = shed;
        Some(Losses {
            dropped: new_drops,
            shed: new_shed,
            gaps: std::mem::take(&mut l.gaps),
            units: std::mem::take(&mut l.units),
        })
    }

    /// Logs, once, the units that went stale since the last call.
    pub fn summarise_stale(&self) {
        let (n, names) = {
            let mut b = self.went_stale.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *b)
        };
        if n == 0 {
            return;
        }
        let more = n.saturating_sub(names.len() as u64);
        let shown = names.join(", ");
        if more > 0 {
            tracing::warn!(
                units = n,
                "{n} units went stale: {shown} and {more} more (steered to report; `xo units` lists them)"
            );
        } else {
            tracing::warn!(
                units = n,
                "{n} unit(s) went stale: {shown} (steered to report)"
            );
        }
    }
}

impl Counters {
    /// Counts one steering of `kind`, sent at `at` (ms since the epoch).
    pub fn steered(&self, kind: xo_proto::AnomalyKind, at: u64) {
        self.steering.fetch_add(1, Ordering::Relaxed);
        let Some(i) = xo_proto::AnomalyKind::ALL.iter().position(|k| *k == kind) else {
            return;
        };
        self.steering_by_kind[i].fetch_add(1, Ordering::Relaxed);
        let minute = at - at % 60_000;
        let mut minutes = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        match minutes.iter_mut().rev().find(|(m, _)| *m == minute) {
            Some((_, n)) => n[i] += 1,
            None => {
                let mut n = [0; xo_proto::AnomalyKind::ALL.len()];
                n[i] = 1;
                // In order: a steering stamped a little earlier than the
                // last (another watcher's clock read) goes before it.
                let at = minutes.partition_point(|(m, _)| *m < minute);
                minutes.insert(at, (minute, n));
                if minutes.len() > SteeringMinute::KEPT {
                    minutes.pop_front();
                }
            }
        }
    }

    pub fn snapshot(&self, units: u64) -> StatsReply {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsReply {
            reports: g(&self.reports),
            heartbeats: g(&self.heartbeats),
            evaluated: self.evaluated.load(),
            duplicates: g(&self.duplicates),
            dead_letters: g(&self.dead_letters),
            steering: g(&self.steering),
            units,
            watcher_restarts: g(&self.watcher_restarts),
            missed: g(&self.missed),
            shed: g(&self.shed),
            dropped: 0,
            persist_every_ms: 0,
            panics: g(&self.panics) + xo_bus::input::panics(),
            evicted: g(&self.evicted),
            steering_by_kind: xo_proto::AnomalyKind::ALL
                .iter()
                .zip(&self.steering_by_kind)
                .map(|(k, n)| (k.to_string(), g(n)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            steering_minutes: self
                .minutes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(minute, n)| SteeringMinute {
                    minute: *minute,
                    by_kind: xo_proto::AnomalyKind::ALL
                        .iter()
                        .zip(n)
                        .filter(|(_, n)| **n > 0)
                        .map(|(k, n)| (k.to_string(), u64::from(*n)))
                        .collect(),
                })
                .collect(),
        }
    }
}

/// What every actor of the service shares (configuration, not state).
#[derive(Debug)]
pub struct Ctx {
    pub bus: Bus,
    pub store: Store,
    pub subjects: Subjects,
    pub cfg: XoConfig,
    /// Operator settings in force (role profiles, steering on/off).
    pub live: crate::live::Live,
    pub clock: Clock,
    pub counters: Counters,
    /// Since when this supervisor has heard the bus without a break: a
    /// unit's silence counts from then ([`xo_bus::Hearing`]). Before, a
    /// unit went stale while the supervisor itself heard nobody, and its
    /// runner was restarted the moment the bus came back.
    pub hearing: xo_bus::Hearing,
    /// What waits for each watcher group (index: `group::group_of`).
    pub inboxes: Vec<Arc<crate::inbox::Inbox>>,
    pub persist: persist::Persister,
    /// Macrocosm volume, if file mode is on.
    pub volume: Option<PathBuf>,
    /// Sharded supervision (`supervisor.partitions` > 1): who this
    /// supervisor is and the partitions it holds.
    pub shard: Option<Arc<crate::membership::Shard>>,
}

impl Ctx {
    /// Where an input of the supervisor sends what does not decode:
    /// dead-lettered, logged and counted (`stats.dead_letters`).
    pub fn dead_letters(self: &Arc<Self>, input: &'static str) -> xo_bus::input::DeadLetters {
        let me = Arc::downgrade(self);
        let mut d = xo_bus::input::DeadLetters::new(self.bus.clone(), self.subjects.clone(), input);
        d.counted = Some(Arc::new(move || {
            if let Some(ctx) = me.upgrade() {
                ctx.counters.dead_letters.fetch_add(1, Ordering::Relaxed);
            }
        }));
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xo_proto::AnomalyKind;

    /// Steering per minute: by kind, in order even when a steering is
    /// stamped before the last one, and only the last 60 minutes kept.
    #[test]
    fn steering_is_kept_per_minute_by_kind_for_an_hour() {
        let c = Counters::default();
        let min = 60_000;
        c.steered(AnomalyKind::Loop, 10 * min + 5);
        c.steered(AnomalyKind::Loop, 10 * min + 59_999);
        c.steered(AnomalyKind::Stall, 12 * min);
        c.steered(AnomalyKind::Stall, 11 * min + 1); // late, in between
        let s = c.snapshot(0);
        let got: Vec<(u64, Vec<(String, u64)>)> = s
            .steering_minutes
            .iter()
            .map(|m| (m.minute / min, m.by_kind.clone().into_iter().collect()))
            .collect();
        assert_eq!(
            got,
            [
                (10, vec![("loop".to_string(), 2)]),
                (11, vec![("stall".to_string(), 1)]),
                (12, vec![("stall".to_string(), 1)]),
            ]
        );
        for m in 13..100 {
            c.steered(AnomalyKind::Context, m * min);
        }
        let s = c.snapshot(0);
        assert_eq!(s.steering_minutes.len(), SteeringMinute::KEPT);
        assert_eq!(s.steering_minutes[0].minute, 40 * min, "the oldest dropped");
        assert_eq!(s.steering, 91);
    }
}
