//! Group commit. The actor applies a change in memory and hands the commit
//! here; the committer takes every commit waiting, writes all their keys at
//! once, appends their audit records in order, publishes task events, and
//! only then runs their replies. A reply therefore always means "durable".
//!
//! One batch syncs at a time, and the next is written the moment its sync
//! ends: every commit that came while it synced, in one write, whose sync
//! then runs while the last batch's audit, events and replies go out.
//! Batches finish in the order they were written. A failed sync is written
//! again by the store (what it may have lost, in order) before it syncs
//! again: the batch waits and asks again, and nothing after it is written
//! or answered before it is.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{error, warn};
use xo_bus::typed;
use xo_proto::alert::Alert;
use xo_proto::queue::{Interrupt, QueueStatus, TaskEvent};

use crate::audit::Chains;
use crate::machine::AuditDraft;
use crate::{AUDIT_LOG, BUCKET, Ctx};

/// One operation's durable effects and its reply.
pub struct Commit {
    pub writes: Vec<(String, Bytes)>,
    pub audit: Vec<AuditDraft>,
    pub project: String,
    pub events: Vec<TaskEvent>,
    /// Published once durable, on `xo.event.alert.<kind>`.
    pub alerts: Vec<Alert>,
    /// Published once durable, on `xo.interrupt.<unit>`: (unit, interrupt).
    pub interrupts: Vec<(String, Interrupt)>,
    /// The status after the stuck state changed (`xo.event.queue.stuck`).
    pub stuck: Option<QueueStatus>,
    pub reply: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Commit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commit")
            .field("writes", &self.writes.len())
            .field("audit", &self.audit.len())
            .finish()
    }
}

/// Resolves once every commit handed over before it is durable (a restarted
/// actor loads the machine after this, so it sees every change).
pub async fn barrier(commits: &mpsc::UnboundedSender<Commit>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let c = Commit {
        writes: Vec::new(),
        audit: Vec::new(),
        project: String::new(),
        events: Vec::new(),
        alerts: Vec::new(),
        interrupts: Vec::new(),
        stuck: None,
        reply: Some(Box::new(move || {
            let _ = tx.send(());
        })),
    };
    if commits.send(c).is_ok() {
        let _ = rx.await;
    }
}

pub fn spawn(ctx: Arc<Ctx>) -> (mpsc::UnboundedSender<Commit>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Commit>();
    // The store's copy of the audit log is shipped in order by its own task,
    // so replies wait for the state and the local file, not for its acks.
    let (ship, shipped) = mpsc::unbounded_channel::<Vec<Bytes>>();
    let shipper = tokio::spawn(ship_audit(ctx.clone(), shipped, AUDIT_COPY_SYNC_EVERY));
    let task = tokio::spawn(async move {
        let mut chains = Chains::new(ctx.cfg.data_dir());
        let mut caught_up = false;
        // The batch written whose state is not yet known to be on disk.
        let mut syncing: Option<Written> = None;
        loop {
            let Some(mut last) = syncing.take() else {
                let Some(first) = rx.recv().await else { break };
                syncing = write(&ctx, gather(first, &mut rx), &mut caught_up).await;
                continue;
            };
            let synced = (&mut last.synced).await;
            if !made_durable(&ctx, &last.staged, synced).await {
                // The lease is lost: nothing more is answered here.
                continue;
            }
            // What came while it synced is written now, and its sync runs
            // while this batch finishes.
            if let Ok(first) = rx.try_recv() {
                syncing = write(&ctx, gather(first, &mut rx), &mut caught_up).await;
            }
            finish(&ctx, &mut chains, last, &ship).await;
        }
        drop(ship);
        let _ = shipper.await;
    });
    (tx, task)
}

/// How often, at most, the store's copy of the audit log is synced while
/// lines keep coming (`store.sync = "always"`): each shipment is written at
/// once, and one fdatasync covers every shipment of the interval, where one
/// a shipment doubled the disk's syncs (the state's batch has its own).
pub const AUDIT_COPY_SYNC_EVERY: Duration = Duration::from_millis(5);

/// Ships the audit lines to the store's copy, in order: each shipment is
/// written as it comes (with every one waiting behind it), and synced at
/// most every `every` ([`AUDIT_COPY_SYNC_EVERY`]); a shipment after a quiet
/// interval is synced at once, and the last one when the committer ends.
/// Replies do not wait for the copy: the state and the local file are
/// answered for.
async fn ship_audit(
    ctx: Arc<Ctx>,
    mut shipped: mpsc::UnboundedReceiver<Vec<Bytes>>,
    every: Duration,
) {
    // The latest shipment written and not yet known to be on disk (a sync
    // covers every write before it), and when the copy was last synced.
    let mut unsynced: Option<xo_bus::Staged> = None;
    let mut synced_at: Option<tokio::time::Instant> = None;
    loop {
        let due = synced_at.map(|t| t + every);
        if unsynced.is_some() && due.is_none_or(|d| tokio::time::Instant::now() >= d) {
            sync_copy(&ctx, unsynced.take()).await;
            synced_at = Some(tokio::time::Instant::now());
            continue;
        }
        let next = match (&unsynced, due) {
            (Some(_), Some(due)) => tokio::select! {
                r = shipped.recv() => r,
                _ = tokio::time::sleep_until(due) => continue,
            },
            _ => shipped.recv().await,
        };
        let Some(mut records) = next else { break };
        while let Ok(more) = shipped.try_recv() {
            records.extend(more);
        }
        let written = retrying(&ctx, "audit log", || {
            ctx.store.append_many_staged(AUDIT_LOG, records.clone())
        })
        .await;
        // None: the lease is lost, and nothing more is written here.
        if let Some((_, staged)) = written {
            unsynced = Some(staged);
        }
    }
    sync_copy(&ctx, unsynced).await;
}

/// Waits until the copy's shipments written so far are on disk (a failed
/// sync is said and asked again: the store writes them again first).
async fn sync_copy(ctx: &Ctx, written: Option<xo_bus::Staged>) {
    if let Some(staged) = written {
        retrying(ctx, "audit log (sync)", || staged.durable()).await;
    }
}

/// `first` and every commit waiting behind it (at most 4,096).
fn gather(first: Commit, rx: &mut mpsc::UnboundedReceiver<Commit>) -> Vec<Commit> {
    let mut batch = vec![first];
    while batch.len() < 4096 {
        match rx.try_recv() {
            Ok(c) => batch.push(c),
            Err(_) => break,
        }
    }
    batch
}

/// A batch whose state is written; `synced` ends once it is on disk.
struct Written {
    effects: Vec<Effects>,
    replies: Vec<Box<dyn FnOnce() + Send>>,
    staged: xo_bus::Staged,
    synced: JoinHandle<xo_bus::StoreResult<()>>,
}

/// Waits until this instance may write: at once without a standby; while
/// its lease is held; `false` once the lease is lost to another instance
/// (nothing more is written or answered here).
async fn may_write(ctx: &Ctx, what: &str) -> bool {
    let Some(f) = &ctx.fence else { return true };
    let mut told = false;
    loop {
        if f.is_lost() {
            error!(
                what,
                "the queue's lease is held by another instance: nothing more is written or answered here"
            );
            return false;
        }
        if f.valid() {
            return true;
        }
        if !told {
            warn!(
                what,
                "the queue's lease is not renewed (store unreachable?): writes wait"
            );
            told = true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes failing since `since` (the queue's clock), the last error.
#[derive(Debug, Clone)]
pub struct Failing {
    pub since: u64,
    pub error: String,
}

impl Failing {
    /// What a read answered while writes wait says.
    pub fn note(&self) -> String {
        format!(
            "the queue's writes have failed since {} ({}); they are retried, and what this shows may not be durable yet",
            xo_runtime::clock::rfc3339(self.since),
            self.error
        )
    }
}

/// Says that a write failed: logged, and [`Ctx::failing`] set (since the
/// first failure of a run of them).
fn failed(ctx: &Ctx, what: &str, e: &dyn std::fmt::Display) {
    {
        let mut failing = ctx.failing.lock().unwrap_or_else(|p| p.into_inner());
        let since = failing
            .as_ref()
            .map(|f| f.since)
            .unwrap_or_else(|| ctx.clock.now_ms());
        *failing = Some(Failing {
            since,
            error: format!("{what}: {e}"),
        });
    }
    warn!(error = %e, what, "queue write failed; retrying");
}

/// Retries a store write until it succeeds (the replies wait for it), or
/// until this instance loses the lease (`None`: nothing written). While it
/// fails, [`Ctx::failing`] says so (reads are then answered at once).
async fn retrying<T, F, Fut>(ctx: &Ctx, what: &str, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = xo_bus::StoreResult<T>>,
{
    let mut delays = xo_runtime::retry::store_write();
    loop {
        if !may_write(ctx, what).await {
            return None;
        }
        match f().await {
            Ok(v) => {
                let was = ctx.failing.lock().unwrap_or_else(|p| p.into_inner()).take();
                if was.is_some() {
                    tracing::info!(what, "queue writes succeed again");
                }
                return Some(v);
            }
            Err(e) => {
                failed(ctx, what, &e);
                let wait = delays.next().unwrap_or(Duration::from_secs(2));
                tokio::time::sleep(wait).await;
            }
        }
    }
}

struct Effects {
    audit: Vec<AuditDraft>,
    project: String,
    events: Vec<TaskEvent>,
    alerts: Vec<Alert>,
    interrupts: Vec<(String, Interrupt)>,
    stuck: Option<QueueStatus>,
}

/// Before this instance's first write: the lines the audit files hold and
/// the store's copy lacks at its end are shipped (an instance killed
/// between its file's append and the copy's, this one or the one it took
/// over from), so the copy stays the file's, line for line.
async fn catch_up(ctx: &Ctx) {
    let Some(records) = retrying(ctx, "audit log (catch-up read)", || {
        ctx.store.read(crate::AUDIT_LOG, 1, usize::MAX)
    })
    .await
    else {
        return;
    };
    let records: Vec<Bytes> = records.into_iter().map(|(_, r)| r).collect();
    let dir = ctx.cfg.data_dir();
    let found = tokio::task::spawn_blocking(move || crate::audit::unshipped(&dir, &records)).await;
    let (ship, differ) = match found {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            warn!(error = %e, "audit files not compared with the store's copy; lines an earlier instance did not ship stay unshipped");
            return;
        }
        Err(e) => {
            warn!(error = %e, "audit catch-up failed");
            return;
        }
    };
    for project in differ {
        warn!(project = %project, "the audit file and the store's copy differ; left as they are (xo audit verify says where)");
    }
    for (project, lines) in ship {
        let n = lines.len();
        if retrying(ctx, "audit log (catch-up)", || {
            ctx.store.append_many(AUDIT_LOG, lines.clone())
        })
        .await
        .is_some()
        {
            tracing::info!(project = %project, lines = n, "shipped audit lines the store's copy lacked (an earlier instance stopped between the file and the copy)");
        }
    }
}

/// Writes a batch's state (every key once, the last write of each) and
/// starts waiting for it to be on disk; `None` when this instance may not
/// write (dropped unanswered: the callers time out and retry on the
/// holder).
async fn write(ctx: &Ctx, commits: Vec<Commit>, caught_up: &mut bool) -> Option<Written> {
    // Replies run last, after every await: split off first.
    let mut replies: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    let mut effects = Vec::with_capacity(commits.len());
    // Last write of a key wins: the actor's snapshot at that point is newest.
    let mut writes: BTreeMap<String, Bytes> = BTreeMap::new();
    for c in commits {
        replies.extend(c.reply);
        writes.extend(c.writes);
        effects.push(Effects {
            audit: c.audit,
            project: c.project,
            events: c.events,
            alerts: c.alerts,
            interrupts: c.interrupts,
            stuck: c.stuck,
        });
    }
    if !may_write(ctx, "state").await {
        return None;
    }
    if !*caught_up {
        catch_up(ctx).await;
        *caught_up = true;
    }
    let staged = if writes.is_empty() {
        xo_bus::Staged::durable_already()
    } else {
        let items: Vec<(String, Bytes)> = writes.into_iter().collect();
        let (_, staged) = retrying(ctx, "state", || {
            ctx.store.put_many_staged(BUCKET, items.clone())
        })
        .await?;
        staged
    };
    let waiting = staged.clone();
    Some(Written {
        effects,
        replies,
        staged,
        synced: tokio::spawn(async move { waiting.durable().await }),
    })
}

/// Whether the batch's state is on disk: a failed sync is said and asked
/// again until it succeeds (the store writes the lost bytes again first);
/// `false` once the lease is lost.
async fn made_durable(
    ctx: &Ctx,
    staged: &xo_bus::Staged,
    synced: Result<xo_bus::StoreResult<()>, tokio::task::JoinError>,
) -> bool {
    let e = match synced {
        Ok(Ok(())) => return true,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    failed(ctx, "state (sync)", &e);
    retrying(ctx, "state (sync)", || staged.durable())
        .await
        .is_some()
}

/// Appends a durable batch's audit records, publishes its events and
/// only then runs its replies.
async fn finish(
    ctx: &Ctx,
    chains: &mut Chains,
    w: Written,
    ship: &mpsc::UnboundedSender<Vec<Bytes>>,
) {
    let Written {
        effects: batch,
        replies,
        ..
    } = w;
    let now = ctx.clock.now_ms();
    let mut lines: Vec<(String, Vec<u8>)> = Vec::new();
    for c in &batch {
        for d in &c.audit {
            match chains.next(&c.project, d, now) {
                Ok(line) => lines.push((c.project.clone(), line)),
                // The state is stored; its audit line cannot be: said, not hidden.
                Err(e) => error!(
                    project = %c.project,
                    task = d.task_id.as_deref().unwrap_or(""),
                    event = %d.event,
                    error = %e,
                    "audit record not encodable; not written (the chain goes on without it)"
                ),
            }
        }
    }
    // The state is durable; the audit copies and the events go out together.
    let audit = async {
        if lines.is_empty() {
            return;
        }
        let records: Vec<Bytes> = lines
            .iter()
            .map(|(p, l)| Bytes::from(crate::audit::store_record(p, l)))
            .collect();
        if ship.send(records).is_err() {
            warn!("audit shipper gone");
        }
        let file = async {
            if let Err(e) = chains.write_files(&lines).await {
                warn!(error = %e, "audit file append failed");
            }
        };
        let live = async {
            for (project, line) in &lines {
                let mut h = xo_bus::Headers::new();
                h.insert(xo_proto::codec::CONTENT_TYPE, xo_proto::codec::JSON);
                let _ = ctx
                    .bus
                    .publish(&ctx.subjects.audit(project), h, Bytes::from(line.clone()))
                    .await;
            }
        };
        tokio::join!(file, live);
    };
    let events = async {
        for c in &batch {
            for e in &c.events {
                let _ = typed::publish(
                    &ctx.bus,
                    &ctx.subjects.task_event(&e.task_id),
                    e,
                    ctx.cfg.wire.format,
                )
                .await;
            }
            for a in &c.alerts {
                if let Err(e) = typed::publish(
                    &ctx.bus,
                    &ctx.subjects.alert(a.kind),
                    a,
                    ctx.cfg.wire.format,
                )
                .await
                {
                    warn!(error = %e, kind = %a.kind, "alert not published");
                }
            }
            for (unit, i) in &c.interrupts {
                if let Err(e) = typed::publish(
                    &ctx.bus,
                    &ctx.subjects.interrupt(unit),
                    i,
                    ctx.cfg.wire.format,
                )
                .await
                {
                    warn!(error = %e, unit = %unit, task = %i.task_id, "interrupt not published; the unit's next lease renewal carries it");
                }
            }
            if let Some(s) = &c.stuck
                && let Err(e) = typed::publish(
                    &ctx.bus,
                    &ctx.subjects.queue_stuck(),
                    s,
                    ctx.cfg.wire.format,
                )
                .await
            {
                warn!(error = %e, "stuck status not published");
            }
        }
    };
    tokio::join!(audit, events);
    for reply in replies {
        reply();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xo_bus::file_store::{FileStore, SyncMode};
    use xo_bus::{Bus, LocalBus, Store};

    fn ctx(dir: &std::path::Path) -> (Arc<Ctx>, FileStore) {
        let files = FileStore::open_with(dir, SyncMode::Always).unwrap();
        let cfg = xo_runtime::config::XoConfig::default();
        let ctx = Ctx {
            bus: Bus::Local(LocalBus::new()),
            store: Store::File(files.clone()),
            subjects: cfg.subjects(),
            cfg,
            clock: xo_runtime::clock::Clock::manual(0),
            fence: None,
            failing: Default::default(),
        };
        (Arc::new(ctx), files)
    }

    /// The copy's records, as read back from the store.
    async fn copy(ctx: &Ctx) -> Vec<Bytes> {
        let records = ctx.store.read(AUDIT_LOG, 1, usize::MAX).await.unwrap();
        records.into_iter().map(|(_, r)| r).collect()
    }

    /// Sends one shipment and waits until the shipper has written it.
    async fn ship(ctx: &Ctx, tx: &mpsc::UnboundedSender<Vec<Bytes>>, line: &'static str) {
        tx.send(vec![Bytes::from(line)]).unwrap();
        while !copy(ctx).await.contains(&Bytes::from(line)) {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn the_audit_copy_is_written_at_once_and_synced_once_an_interval() {
        let tmp = tempfile::tempdir().unwrap();
        let (ctx, files) = ctx(tmp.path());
        let (tx, rx) = mpsc::unbounded_channel();
        // An interval no test outlives: only the first shipment (after a
        // quiet interval) and the end sync.
        let shipper = tokio::spawn(ship_audit(ctx.clone(), rx, Duration::from_secs(3600)));
        ship(&ctx, &tx, "p\tone").await;
        // The first is synced at once; wait for that sync to be counted.
        while files.log_writes_and_syncs(AUDIT_LOG).1 < 1 {
            tokio::task::yield_now().await;
        }
        ship(&ctx, &tx, "p\ttwo").await;
        ship(&ctx, &tx, "p\tthree").await;
        // Three shipments written, in order, readable at once; one sync.
        assert_eq!(files.log_writes_and_syncs(AUDIT_LOG), (3, 1));
        assert_eq!(
            copy(&ctx).await,
            ["p\tone", "p\ttwo", "p\tthree"].map(Bytes::from)
        );
        // The committer ends: what is written is synced before the shipper ends.
        drop(tx);
        shipper.await.unwrap();
        assert_eq!(files.log_writes_and_syncs(AUDIT_LOG), (3, 2));
    }

    #[tokio::test]
    async fn with_no_interval_each_audit_shipment_is_synced() {
        let tmp = tempfile::tempdir().unwrap();
        let (ctx, files) = ctx(tmp.path());
        let (tx, rx) = mpsc::unbounded_channel();
        let shipper = tokio::spawn(ship_audit(ctx.clone(), rx, Duration::ZERO));
        for (n, line) in ["p\ta", "p\tb", "p\tc"].into_iter().enumerate() {
            ship(&ctx, &tx, line).await;
            // Written; its sync follows before the next shipment is taken.
            while files.log_writes_and_syncs(AUDIT_LOG).1 < n as u64 + 1 {
                tokio::task::yield_now().await;
            }
        }
        drop(tx);
        shipper.await.unwrap();
        assert_eq!(files.log_writes_and_syncs(AUDIT_LOG), (3, 3));
    }
}
