//! What every part of the supervisor shares: configuration and handles
//! ([`Ctx`]), and the counters behind `xo.ctl.supervisor.stats`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use xo_bus::{Bus, Store};
use xo_proto::Subjects;
use xo_proto::control::StatsReply;
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
    pub missed: AtomicU64,
    pub evicted: AtomicU64,
}

impl Counters {
    /// Counts one steering of `kind`.
    pub fn steered(&self, kind: xo_proto::AnomalyKind) {
        self.steering.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = xo_proto::AnomalyKind::ALL.iter().position(|k| *k == kind) {
            self.steering_by_kind[i].fetch_add(1, Ordering::Relaxed);
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
            evicted: g(&self.evicted),
            steering_by_kind: xo_proto::AnomalyKind::ALL
                .iter()
                .zip(&self.steering_by_kind)
                .map(|(k, n)| (k.to_string(), g(n)))
                .filter(|(_, n)| *n > 0)
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
    pub persist: persist::Persister,
    /// Macrocosm volume, if file mode is on.
    pub volume: Option<PathBuf>,
    /// Sharded supervision (`supervisor.partitions` > 1): who this
    /// supervisor is and the partitions it holds.
    pub shard: Option<Arc<crate::shard::Shard>>,
}
