//! One active instance among several: a lease held in a key of the store,
//! fenced by the key's revision.
//!
//! The holder writes the key every third of the lease with a compare-and-set
//! on the revision it last wrote; a standby watches the key and takes it
//! (again by compare-and-set) once its revision has not moved for a whole
//! lease, measured on the standby's own monotonic clock, so no two clocks are
//! compared. The holder counts its lease from the moment it *sent* each
//! renewal, which is never later than when a standby saw it, and stops a
//! quarter of a lease early (the margin covers a write on its way): when the holder
//! can no longer be sure it holds the lease (no renewal acknowledged for
//! three quarters of a lease) [`Fence::valid`]
//! turns false before a standby may take over; writes wait until a renewal
//! goes through again, and when one is refused because another instance
//! took the key, [`Leader::lost`] resolves and nothing more is written.

use std::sync::{Arc, Mutex};
use std::time::Duration;

// Tokio's clock (the monotonic clock, unless a test pauses it): a lease's
// timing is tested on a paused clock, in virtual time.
use tokio::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::{Store, StoreError, StoreResult};

/// What the lease key holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Who holds it: `<host>:<pid>:<random>`.
    pub holder: String,
    /// Wall-clock ms of the last renewal (for people; never compared).
    pub renewed_at: u64,
}

impl Holder {
    /// What a lease key holds (an older or foreign value: its text as the holder).
    pub fn of(value: &[u8]) -> Self {
        serde_json::from_slice(value).unwrap_or_else(|_| Holder {
            holder: String::from_utf8_lossy(value).into_owned(),
            renewed_at: 0,
        })
    }
}

/// A name for this process as a lease holder.
pub fn holder_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}:{}:{nanos:08x}", std::process::id())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn encode(holder: &str) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&Holder {
            holder: holder.to_string(),
            renewed_at: now_ms(),
        })
        .unwrap_or_default(),
    )
}

/// Whether the lease is still this process's: check before every write.
#[derive(Debug, Clone)]
pub struct Fence {
    until: Arc<Mutex<Instant>>,
    lost: Arc<std::sync::atomic::AtomicBool>,
}

impl Fence {
    /// Writes may be made now.
    pub fn valid(&self) -> bool {
        !self.is_lost()
            && self
                .until
                .lock()
                .map(|u| Instant::now() < *u)
                .unwrap_or(false)
    }

    /// Another instance holds the lease: nothing more may be written, ever.
    /// (Not valid but not lost: the store was unreachable for a while;
    /// writes wait until a renewal goes through again.)
    pub fn is_lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A held lease, renewed until it is released or lost.
#[derive(Debug)]
pub struct Leader {
    fence: Fence,
    lost: watch::Receiver<Option<String>>,
    renew: JoinHandle<()>,
    store: Store,
    bucket: String,
    key: String,
    revision: Arc<Mutex<u64>>,
}

impl Leader {
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Resolves when the lease is lost, with why.
    pub async fn lost(&self) -> String {
        let mut rx = self.lost.clone();
        loop {
            if let Some(why) = rx.borrow().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return "the lease's renewal stopped".into();
            }
        }
    }

    /// Stops renewing and deletes the key if it is still ours, so that a
    /// standby takes over at once rather than after a lease.
    pub async fn release(self) {
        self.renew.abort();
        let _ = self.renew.await;
        let rev = self.revision.lock().map(|r| *r).unwrap_or(0);
        if let Ok(Some(e)) = self.store.get(&self.bucket, &self.key).await
            && e.revision == rev
            && let Err(e) = self.store.delete(&self.bucket, &self.key).await
        {
            warn!(error = %e, "lease not released; a standby takes over when it expires");
        }
    }
}

/// Waits until this process holds the lease `bucket/key`, then keeps it.
/// `waiting` is told who holds it each time the holder changes.
pub async fn acquire(
    store: &Store,
    bucket: &str,
    key: &str,
    holder: &str,
    lease: Duration,
    mut waiting: impl FnMut(&Holder),
) -> StoreResult<Leader> {
    let poll = (lease / 5).max(Duration::from_millis(20));
    let mut contender = Contender::default();
    loop {
        if let Some(leader) = contender
            .attempt(store, bucket, key, holder, lease, &mut waiting)
            .await?
        {
            return Ok(leader);
        }
        tokio::time::sleep(poll).await;
    }
}

/// One would-be holder's view of a lease key, for taking it without
/// waiting: each [`Contender::attempt`] takes the key if it is free, or if
/// its revision has not moved for a whole lease since this contender first
/// saw it (on this process's monotonic clock), and otherwise returns `None`.
#[derive(Debug, Default)]
pub struct Contender {
    /// The revision last seen and when it was first seen.
    seen: Option<(u64, Instant)>,
    /// The holder last told to `waiting`.
    told: Option<String>,
}

impl Contender {
    /// Looks at the key without taking it: its revision starts (or goes
    /// on) counting towards a lease, so that a later [`Contender::attempt`]
    /// takes at once a key that stopped moving long enough ago.
    pub async fn observe(&mut self, store: &Store, bucket: &str, key: &str) -> StoreResult<()> {
        match store.get(bucket, key).await? {
            None => {
                self.seen = None;
                self.told = None;
            }
            Some(e) => {
                if self.seen.is_none_or(|(rev, _)| rev != e.revision) {
                    self.seen = Some((e.revision, Instant::now()));
                }
                self.told = Some(Holder::of(&e.value).holder);
            }
        }
        Ok(())
    }

    pub async fn attempt(
        &mut self,
        store: &Store,
        bucket: &str,
        key: &str,
        holder: &str,
        lease: Duration,
        mut waiting: impl FnMut(&Holder),
    ) -> StoreResult<Option<Leader>> {
        let sent = Instant::now();
        // Some(attempt) when the key is free or its holder's lease ran out.
        let attempt = match store.get(bucket, key).await? {
            None => {
                self.told = None;
                Some(store.create(bucket, key, encode(holder)).await)
            }
            Some(e) => {
                let h = Holder::of(&e.value);
                if self.told.as_deref() != Some(h.holder.as_str()) {
                    waiting(&h);
                    self.told = Some(h.holder.clone());
                }
                match self.seen {
                    Some((rev, since)) if rev == e.revision && since.elapsed() >= lease => {
                        info!(key, previous = %h.holder, "lease expired; taking it over");
                        Some(store.update(bucket, key, encode(holder), rev).await)
                    }
                    Some((rev, _)) if rev == e.revision => None,
                    _ => {
                        self.seen = Some((e.revision, Instant::now()));
                        None
                    }
                }
            }
        };
        match attempt {
            Some(Ok(rev)) => {
                self.seen = None;
                self.told = Some(holder.to_string());
                Ok(Some(hold(store, bucket, key, holder, lease, rev, sent)))
            }
            // Another contender won the race, or the store is briefly away.
            Some(Err(e)) => {
                debug!(key, error = %e, "lease not taken; trying again");
                Ok(None)
            }
            None => Ok(None),
        }
    }
}

/// Keeps a lease just taken at revision `rev` (the write sent at `sent`).
fn hold(
    store: &Store,
    bucket: &str,
    key: &str,
    holder: &str,
    lease: Duration,
    rev: u64,
    sent: Instant,
) -> Leader {
    // The holder stops writing a quarter of a lease before a standby may
    // take over: the margin covers a write already on its way.
    let valid = lease - lease / 4;
    let until = Arc::new(Mutex::new(sent + valid));
    let lost_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let revision = Arc::new(Mutex::new(rev));
    let (lost_tx, lost) = watch::channel(None);
    let renew = tokio::spawn({
        let (store, bucket, key, holder) = (
            store.clone(),
            bucket.to_string(),
            key.to_string(),
            holder.to_string(),
        );
        let (until, revision, lost_flag) = (until.clone(), revision.clone(), lost_flag.clone());
        async move {
            let every = lease / 3;
            loop {
                tokio::time::sleep(every).await;
                let sent = Instant::now();
                let rev = revision.lock().map(|r| *r).unwrap_or(0);
                match store.update(&bucket, &key, encode(&holder), rev).await {
                    Ok(r) => {
                        if let Ok(mut g) = revision.lock() {
                            *g = r;
                        }
                        if let Ok(mut g) = until.lock() {
                            *g = sent + valid;
                        }
                    }
                    Err(StoreError::Conflict { .. }) | Err(StoreError::Exists { .. }) => {
                        // A renewal that timed out while the server was away
                        // may have landed on reconnection: the key then names
                        // us at a newer revision. Only another holder is a loss.
                        if let Ok(Some(e)) = store.get(&bucket, &key).await
                            && serde_json::from_slice::<Holder>(&e.value)
                                .is_ok_and(|h| h.holder == holder)
                        {
                            if let Ok(mut g) = revision.lock() {
                                *g = e.revision;
                            }
                            continue;
                        }
                        lost_flag.store(true, std::sync::atomic::Ordering::SeqCst);
                        let _ = lost_tx.send(Some(format!(
                            "the lease {bucket}/{key} was taken by another instance"
                        )));
                        return;
                    }
                    // The store is away: writes wait (the fence runs out) and
                    // the renewal goes on; nobody else can take the lease
                    // from a store nobody reaches.
                    Err(e) => warn!(error = %e, "lease not renewed; writes wait until it is"),
                }
            }
        }
    });
    Leader {
        fence: Fence {
            until,
            lost: lost_flag,
        },
        lost,
        renew,
        store: store.clone(),
        bucket: bucket.to_string(),
        key: key.to_string(),
        revision,
    }
}

#[cfg(test)]
mod tests {
    //! On tokio's paused clock: the lease's timing in virtual time, exact
    //! whatever the machine's speed.
    use super::*;
    use crate::FileStore;

    const LEASE: Duration = Duration::from_secs(3);

    /// A store of its own, and `a` holding the lease `leases/k` in it.
    async fn held() -> (tempfile::TempDir, Store, Leader) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::File(FileStore::open(dir.path()).unwrap());
        let a = acquire(&store, "leases", "k", "a", LEASE, |_| {})
            .await
            .unwrap();
        (dir, store, a)
    }

    /// A holder that dies (no renewal, no release): its fence closes a
    /// quarter of a lease before a standby may take over, and the standby
    /// takes the lease one lease after the key last moved, no earlier, and
    /// within one of its looks after that.
    #[tokio::test(start_paused = true)]
    async fn a_standby_takes_a_dead_holders_lease_one_lease_on_and_its_fence_closed_first() {
        let (_dir, store, a) = held().await;
        let fence = a.fence();
        // Some renewals go through.
        tokio::time::sleep(LEASE * 2).await;
        assert!(fence.valid(), "a renewed lease is valid");
        let moved = store.get("leases", "k").await.unwrap().unwrap().revision;
        assert!(moved > 1, "renewed: revision {moved}");

        // It dies between two renewals.
        a.renew.abort();
        let died = Instant::now();
        let b = acquire(&store, "leases", "k", "b", LEASE, |_| {})
            .await
            .unwrap();
        let took = Instant::now() - died;
        assert!(took >= LEASE, "taken {took:?} after the holder died");
        assert!(
            took <= LEASE + LEASE / 5,
            "taken {took:?} after the holder died: one look (a fifth of a lease) late at most"
        );
        assert!(!fence.valid(), "the dead holder's fence is closed");
        let h = Holder::of(&store.get("leases", "k").await.unwrap().unwrap().value);
        assert_eq!(h.holder, "b");
        assert!(b.fence().valid());
        assert!(
            !fence.is_lost(),
            "the dead holder never heard, but its fence ran out"
        );
    }

    /// The fence of a holder that cannot renew (the store away, here its
    /// renewals stopped) runs out three quarters of a lease after the last
    /// renewal it sent: before anyone may take over.
    #[tokio::test(start_paused = true)]
    async fn a_holders_fence_runs_out_three_quarters_of_a_lease_after_its_last_renewal() {
        let (_dir, store, a) = held().await;
        let fence = a.fence();
        let first = store.get("leases", "k").await.unwrap().unwrap().revision;
        // Just after a renewal (every third of a lease).
        tokio::time::sleep(LEASE / 3 + Duration::from_millis(1)).await;
        let renewed = store.get("leases", "k").await.unwrap().unwrap().revision;
        assert!(renewed > first, "renewed after a third of a lease");
        a.renew.abort();
        tokio::time::sleep(LEASE * 3 / 4 - Duration::from_millis(10)).await;
        assert!(fence.valid(), "still within three quarters of a lease");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!fence.valid(), "three quarters of a lease on: closed");
    }

    /// A holder that keeps renewing is never taken over, however long a
    /// standby contends.
    #[tokio::test(start_paused = true)]
    async fn a_renewed_lease_is_never_taken_over() {
        let (_dir, store, a) = held().await;
        let mut b = Contender::default();
        let mut told = Vec::new();
        for _ in 0..100 {
            let got = b
                .attempt(&store, "leases", "k", "b", LEASE, |h| {
                    told.push(h.holder.clone())
                })
                .await
                .unwrap();
            assert!(got.is_none(), "a live holder's lease taken");
            assert!(a.fence().valid());
            tokio::time::sleep(LEASE / 5).await;
        }
        assert_eq!(told, ["a"], "the standby is told of the holder once");
        a.release().await;
        let b = b
            .attempt(&store, "leases", "k", "b", LEASE, |_| {})
            .await
            .unwrap();
        assert!(b.is_some(), "a released lease is taken at once");
    }
}
