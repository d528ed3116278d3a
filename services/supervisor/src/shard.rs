//! Sharded supervision: several supervisors share the units of one
//! organisation (`supervisor.partitions` > 1).
//!
//! The NATS server spreads reports and heartbeats over the partitions by
//! their unit token (the subject mapping of `xo nats-config --partitions N`:
//! `xo.salute.<unit>` arrives as `xo.salute.<unit>.<partition>`). Each
//! partition is a lease in the store's `supervisors` bucket
//! (`partition.<k>`, fenced by revision, see [`xo_bus::leader`]); every
//! supervisor also renews `member.<instance>`. Every supervisor computes
//! the same preferred holder of each partition among the members alive
//! (rendezvous hashing: a member's death moves only its own partitions) and
//! takes the partitions it prefers once they are free or their holder's
//! lease ran out; it hands back the ones another member now prefers.
//!
//! Taking partition `k`: the units of `k` are read from the store and their
//! watchers started with that state (cooldowns, last sequence, health), then
//! `xo.salute.*.k` and `xo.heartbeat.*.k` are subscribed. Handing it back:
//! the subscriptions end, the watchers stop and hand over their state, the
//! state is written, then the lease is deleted so the next holder starts at
//! once. A lease lost to another supervisor (this one was cut off for longer
//! than a lease) drops the partition without writing: the new holder's state
//! is the one kept.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ractor::ActorRef;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use xo_bus::leader::{Contender, Holder, Leader};
use xo_bus::{Store, StoreError, Subscription};
use xo_proto::partition_of;
use xo_runtime::tree::Shutdown;

use crate::ctx::Ctx;
use crate::ingest;
use crate::persist;
use crate::root::{RootMsg, Routes};

/// The bucket of members and partition leases.
pub const BUCKET: &str = "supervisors";

fn member_key(instance: &str) -> String {
    format!("member.{instance}")
}

fn partition_key(k: u32) -> String {
    format!("partition.{k}")
}

/// This supervisor's name: `supervisor.instance`, else host, pid and a
/// random suffix.
pub fn instance_name(configured: &str) -> String {
    if !configured.is_empty() {
        return configured.to_string();
    }
    xo_bus::leader::holder_id()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The member that should hold partition `k`: the highest of a hash of
/// (member, partition), so that a member's arrival or death moves only the
/// partitions it gains or had.
pub fn preferred(members: &[String], k: u32) -> Option<&String> {
    members.iter().max_by_key(|m| (score(m, k), m.as_str()))
}

/// A well-mixed 64-bit score of (member, partition): FNV-1a of the name,
/// then splitmix64's finaliser (names that differ in one character, like
/// `s1` and `s2`, must not score alike).
fn score(member: &str, k: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut x = h ^ u64::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_gets_a_share_and_a_death_moves_only_its_own() {
        let members: Vec<String> = ["s1", "s2", "s3"].iter().map(|s| s.to_string()).collect();
        let of = |ms: &[String]| -> Vec<String> {
            (0..12).map(|k| preferred(ms, k).unwrap().clone()).collect()
        };
        let three = of(&members);
        for m in &members {
            let n = three.iter().filter(|o| *o == m).count();
            assert!((2..=7).contains(&n), "{m} gets {n} of 12: {three:?}");
        }
        let two = of(&[members[0].clone(), members[2].clone()]);
        for (a, b) in three.iter().zip(&two) {
            if a != "s2" {
                assert_eq!(a, b, "a survivor's partition moved: {three:?} → {two:?}");
            }
        }
        assert_eq!(preferred(&[], 3), None);
    }
}

/// What the sharded parts share: who this supervisor is, the members it
/// believes alive and the partitions it holds.
#[derive(Debug)]
pub struct Shard {
    pub me: String,
    pub partitions: u32,
    pub lease: Duration,
    members: Mutex<Vec<String>>,
    held: Mutex<Vec<u32>>,
    /// Leases handed over at shutdown, released after the state is written.
    leaving: Mutex<Vec<Leader>>,
}

impl Shard {
    pub fn new(me: String, partitions: u32, lease: Duration) -> Self {
        Self {
            members: Mutex::new(vec![me.clone()]),
            me,
            partitions,
            lease,
            held: Mutex::default(),
            leaving: Mutex::default(),
        }
    }

    /// The members believed alive, sorted (this one always among them).
    pub fn members(&self) -> Vec<String> {
        self.members.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The partitions this supervisor holds now.
    pub fn held(&self) -> Vec<u32> {
        self.held.lock().map(|h| h.clone()).unwrap_or_default()
    }

    pub fn partition(&self, unit: &str) -> u32 {
        partition_of(unit, self.partitions)
    }

    /// Who holds the partition of `unit`, as the store says now.
    pub async fn owner_of(&self, store: &Store, unit: &str) -> Result<Option<String>, StoreError> {
        let k = self.partition(unit);
        Ok(store
            .get(BUCKET, &partition_key(k))
            .await?
            .map(|e| Holder::of(&e.value).holder))
    }

    /// After the state is written at shutdown: deletes the leases held and
    /// this member's key, so that the others take over at once.
    pub async fn leave(&self, store: &Store, bus: &xo_bus::Bus, subjects: &xo_proto::Subjects) {
        let leaving: Vec<Leader> = self
            .leaving
            .lock()
            .map(|mut l| l.drain(..).collect())
            .unwrap_or_default();
        let n = leaving.len();
        for l in leaving {
            l.release().await;
        }
        if let Err(e) = store.delete(BUCKET, &member_key(&self.me)).await {
            warn!(error = %e, "member key not deleted; the others notice when it expires");
        }
        let _ = bus
            .publish(
                &subjects.partitions_event(),
                xo_bus::Headers::new(),
                Bytes::new(),
            )
            .await;
        info!(partitions = n, instance = %self.me, "partitions handed back");
    }
}

/// What a standby keeps of a partition: messages received within two
/// leases and a persist interval, at most this many.
const STANDBY_KEEP: usize = 200_000;

/// A partition this supervisor would take if its holder died: the
/// partition's reports and heartbeats are received here too and kept for
/// two leases and a persist interval, so that a take-over after the
/// holder's death checks what was sent while nobody did, and what the dead
/// holder checked after it last wrote the units' state (those it had
/// written are duplicates by their sequence numbers).
struct Standby {
    stop: Shutdown,
    task: JoinHandle<(Ring, Ring)>,
}

/// Messages kept, with when they arrived, and the subscription behind them.
struct Ring {
    kept: VecDeque<(Instant, xo_bus::Message)>,
    sub: Subscription,
}

impl Ring {
    fn into_subscription(self) -> Subscription {
        Subscription::with_backlog(self.kept.into_iter().map(|(_, m)| m).collect(), self.sub)
    }
}

impl Standby {
    fn start(reports: Subscription, beats: Subscription, keep: Duration) -> Self {
        let stop = Shutdown::new();
        let signal = stop.signal();
        let task = tokio::spawn(async move {
            let mut r = Ring {
                kept: VecDeque::new(),
                sub: reports,
            };
            let mut h = Ring {
                kept: VecDeque::new(),
                sub: beats,
            };
            let mut signal = std::pin::pin!(signal);
            loop {
                let (ring, m) = tokio::select! {
                    m = r.sub.next() => (&mut r.kept, m),
                    m = h.sub.next() => (&mut h.kept, m),
                    _ = &mut signal => break,
                };
                let Some(m) = m else { break };
                let now = Instant::now();
                ring.push_back((now, m));
                while ring
                    .front()
                    .is_some_and(|(at, _)| now.duration_since(*at) > keep)
                    || ring.len() > STANDBY_KEEP
                {
                    ring.pop_front();
                }
            }
            (r, h)
        });
        Self { stop, task }
    }

    /// Stops keeping; the subscriptions with what they kept.
    async fn take(self) -> Option<(Subscription, Subscription)> {
        self.stop.trigger();
        let (r, h) = self.task.await.ok()?;
        Some((r.into_subscription(), h.into_subscription()))
    }
}

/// A partition held: its lease and the pumps reading its subjects.
struct Held {
    leader: Leader,
    stop: Shutdown,
    pumps: Vec<JoinHandle<()>>,
}

/// Renews membership, takes and hands back partitions, every fifth of a
/// lease, until `shutdown`; then ends the pumps and leaves the leases for
/// [`Shard::leave`] (after the state is written).
pub fn spawn(
    ctx: Arc<Ctx>,
    root: ActorRef<RootMsg>,
    routes: Arc<Routes>,
    shard: Arc<Shard>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut m = Manager {
            ctx,
            root,
            routes,
            shard,
            held: BTreeMap::new(),
            waiting: HashMap::new(),
            standby: HashMap::new(),
            contenders: HashMap::new(),
            seen: HashMap::new(),
        };
        let poll = (m.shard.lease / 5).max(Duration::from_millis(20));
        let mut shutdown = std::pin::pin!(shutdown);
        let mut wake = match m
            .ctx
            .bus
            .subscribe(&m.ctx.subjects.partitions_event())
            .await
        {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(error = %e, "partition events not followed: hand-overs wait for the next poll");
                None
            }
        };
        let mut first = true;
        loop {
            if let Err(e) = m.step().await {
                warn!(error = %e, "partition leases not checked; trying again");
            }
            if std::mem::take(&mut first) {
                // Joined: the others hand back what this one is preferred for now.
                m.announce().await;
            }
            // `false`: the event subscription ended (polling goes on).
            let woken = async {
                match wake.as_mut() {
                    Some(w) => w.next().await.is_some(),
                    None => std::future::pending::<bool>().await,
                }
            };
            let mut ended = false;
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                open = woken => ended = !open,
                _ = &mut shutdown => break,
            }
            if ended {
                wake = None;
            }
        }
        for (_, sb) in m.standby.drain() {
            drop(sb.take().await);
        }
        let held = std::mem::take(&mut m.held);
        for (_, h) in held {
            h.stop.trigger();
            for p in h.pumps {
                let _ = p.await;
            }
            if let Ok(mut l) = m.shard.leaving.lock() {
                l.push(h.leader);
            }
        }
    })
}

struct Manager {
    ctx: Arc<Ctx>,
    root: ActorRef<RootMsg>,
    routes: Arc<Routes>,
    shard: Arc<Shard>,
    held: BTreeMap<u32, Held>,
    /// Subscriptions made for partitions this one is preferred for but
    /// does not hold yet: what arrives while the holder hands them over
    /// waits here, so a hand-over loses no report (those the previous
    /// holder also checked are duplicates: their sequence is in the state
    /// it wrote before letting go).
    waiting: HashMap<u32, (Subscription, Subscription)>,
    /// Partitions held by another, which this one would take if it died.
    standby: HashMap<u32, Standby>,
    contenders: HashMap<u32, Contender>,
    /// Each member key's revision and when it was first seen.
    seen: HashMap<String, (u64, Instant)>,
}

impl Manager {
    /// Tells the other supervisors to look at the leases now.
    async fn announce(&self) {
        let _ = self
            .ctx
            .bus
            .publish(
                &self.ctx.subjects.partitions_event(),
                xo_bus::Headers::new(),
                Bytes::new(),
            )
            .await;
    }

    async fn step(&mut self) -> Result<(), StoreError> {
        let store = self.ctx.store.clone();
        let me = self.shard.me.clone();
        let lease = self.shard.lease;
        let beat = Holder {
            holder: me.clone(),
            renewed_at: self.ctx.clock.now_ms(),
        };
        let beat = Bytes::from(serde_json::to_vec(&beat).unwrap_or_default());
        let alive = self.alive(&store).await?;
        // Subscribed before this member's key says it is here (the others
        // hand over only once they see it), so nothing sent to a partition
        // it takes over is missed.
        self.wait_for(&alive).await;
        store.put(BUCKET, &member_key(&me), beat).await?;
        if let Ok(mut m) = self.shard.members.lock() {
            *m = alive.clone();
        }
        for k in 0..self.shard.partitions {
            let mine = preferred(&alive, k) == Some(&me);
            if let Some(h) = self.held.get(&k) {
                if h.leader.fence().is_lost() {
                    warn!(
                        partition = k,
                        "partition lease lost to another supervisor; its units are dropped here unwritten"
                    );
                    self.hand_back(k, false).await;
                } else if !mine {
                    self.hand_back(k, true).await;
                }
                continue;
            }
            let contender = self.contenders.entry(k).or_default();
            let key = partition_key(k);
            // Every partition not held is watched, so that a dead holder's
            // lease is seen to run out from the moment it stopped moving;
            // only the preferred member takes it.
            let taken = if mine {
                contender
                    .attempt(&store, BUCKET, &key, &me, lease, |_| {})
                    .await?
            } else {
                contender.observe(&store, BUCKET, &key).await?;
                None
            };
            if let Some(leader) = taken {
                self.adopt(k, leader).await;
            }
        }
        self.stand_by(&alive).await;
        if let Ok(mut h) = self.shard.held.lock() {
            *h = self.held.keys().copied().collect();
        }
        Ok(())
    }

    /// Stands by for the partitions whose holder, were it to die, this one
    /// would succeed; stops standing by for the others.
    async fn stand_by(&mut self, alive: &[String]) {
        let me = self.shard.me.clone();
        // From the dead holder's last written state (a persist interval
        // old at most) to the take-over (two leases at most).
        let keep = self.shard.lease * 2
            + Duration::from_millis(self.ctx.cfg.supervisor.persist_interval_ms);
        for k in 0..self.shard.partitions {
            let holder = self
                .contenders
                .get(&k)
                .and_then(|c| c.holder())
                .map(String::from);
            let next = holder.as_ref().filter(|h| **h != me).and_then(|h| {
                let rest: Vec<String> = alive.iter().filter(|m| *m != h).cloned().collect();
                preferred(&rest, k).cloned()
            });
            let wanted = next.as_deref() == Some(me.as_str())
                && !self.held.contains_key(&k)
                && !self.waiting.contains_key(&k);
            if !wanted {
                if let Some(sb) = self.standby.remove(&k) {
                    drop(sb.take().await);
                }
                continue;
            }
            if self.standby.contains_key(&k) {
                continue;
            }
            match self.subscribe(k).await {
                Ok((r, h)) => {
                    self.standby.insert(k, Standby::start(r, h, keep));
                }
                Err(e) => warn!(
                    partition = k,
                    error = %e,
                    "not standing by for the partition: a take-over after its holder's death may miss reports"
                ),
            }
        }
    }

    /// Partition `k`'s reports and heartbeats.
    async fn subscribe(&self, k: u32) -> Result<(Subscription, Subscription), xo_bus::BusError> {
        let subjects = &self.ctx.subjects;
        let r = self
            .ctx
            .bus
            .subscribe(&subjects.salute_partition(k))
            .await?;
        let h = self
            .ctx
            .bus
            .subscribe(&subjects.heartbeat_partition(k))
            .await?;
        Ok((r, h))
    }

    /// Subscribes to the partitions `alive` prefers this one for and it
    /// does not hold; forgets those it is no longer preferred for.
    async fn wait_for(&mut self, alive: &[String]) {
        let me = &self.shard.me;
        let mut new = false;
        for k in 0..self.shard.partitions {
            let mine = preferred(alive, k) == Some(me);
            if !mine || self.held.contains_key(&k) {
                self.waiting.remove(&k);
                continue;
            }
            if self.waiting.contains_key(&k) {
                continue;
            }
            // Its holder is gone and this one stood by: what it kept first.
            if let Some(sb) = self.standby.remove(&k)
                && let Some(subs) = sb.take().await
            {
                self.waiting.insert(k, subs);
                continue;
            }
            match self.subscribe(k).await {
                Ok(subs) => {
                    self.waiting.insert(k, subs);
                    new = true;
                }
                Err(e) => {
                    warn!(partition = k, error = %e, "partition not subscribed ahead of its hand-over")
                }
            }
        }
        if new && let Err(e) = self.ctx.bus.flush().await {
            warn!(error = %e, "subscriptions not confirmed by the server");
        }
    }

    /// The members whose key moved within a lease (on this process's clock).
    async fn alive(&mut self, store: &Store) -> Result<Vec<String>, StoreError> {
        let mut alive = vec![self.shard.me.clone()];
        let mut present = Vec::new();
        for key in store.keys(BUCKET).await? {
            let Some(member) = key.strip_prefix("member.") else {
                continue;
            };
            present.push(member.to_string());
            if member == self.shard.me {
                continue;
            }
            let Some(e) = store.get(BUCKET, &key).await? else {
                continue;
            };
            let seen = self
                .seen
                .entry(member.to_string())
                .or_insert((e.revision, Instant::now()));
            if seen.0 != e.revision {
                *seen = (e.revision, Instant::now());
            }
            if seen.1.elapsed() < self.shard.lease {
                alive.push(member.to_string());
            }
        }
        self.seen.retain(|m, _| present.contains(m));
        alive.sort();
        Ok(alive)
    }

    /// Starts partition `k`: its units' watchers from their stored state,
    /// then its subscriptions.
    async fn adopt(&mut self, k: u32, leader: Leader) {
        let records = match persist::load_where(&self.ctx.store, |unit| {
            self.shard.partition(unit) == k
        })
        .await
        {
            Ok(r) => r,
            Err(e) => {
                warn!(partition = k, error = %e, "partition's unit state unreadable; handing it back");
                leader.release().await;
                return;
            }
        };
        let units = records.len();
        if self
            .root
            .call(|port| RootMsg::Adopt(records, port), None)
            .await
            .is_err()
        {
            leader.release().await;
            return;
        }
        let stop = Shutdown::new();
        let mut pumps = Vec::new();
        let subs = match self.waiting.remove(&k) {
            Some(s) => Ok(s),
            None => self.subscribe(k).await,
        };
        let (reports, beats) = match subs {
            Ok((r, h)) => (
                ingest::pump_reports(&self.ctx, &self.root, &self.routes, r, stop.signal()).await,
                ingest::pump_heartbeats(&self.ctx, &self.root, &self.routes, h, stop.signal())
                    .await,
            ),
            Err(e) => (
                Err(e.into()),
                Err(crate::SupervisorError::Actor(String::new())),
            ),
        };
        match (reports, beats) {
            (Ok(r), Ok(b)) => pumps.extend([r, b]),
            (r, b) => {
                warn!(
                    partition = k,
                    "partition's subjects not subscribed; handing it back"
                );
                stop.trigger();
                for p in [r, b].into_iter().flatten() {
                    let _ = p.await;
                }
                leader.release().await;
                return;
            }
        }
        if let Err(e) = self.ctx.bus.flush().await {
            warn!(partition = k, error = %e, "subscriptions not confirmed by the server");
        }
        info!(partition = k, units, instance = %self.shard.me, "partition taken");
        self.held.insert(
            k,
            Held {
                leader,
                stop,
                pumps,
            },
        );
    }

    /// Ends partition `k` here: subscriptions, then watchers; with `write`,
    /// their state is written before the lease is deleted.
    async fn hand_back(&mut self, k: u32, write: bool) {
        let Some(h) = self.held.remove(&k) else {
            return;
        };
        h.stop.trigger();
        for p in h.pumps {
            let _ = p.await;
        }
        let stopped = match self.root.call(|port| RootMsg::Release(k, port), None).await {
            Ok(ractor::rpc::CallResult::Success(w)) => w,
            _ => Vec::new(),
        };
        let units: Vec<String> = stopped.iter().map(|(u, _)| u.clone()).collect();
        for (_, w) in stopped {
            let _ = w.stop_and_wait(None, None).await;
        }
        if write {
            self.ctx.persist.flush().await;
        } else {
            self.ctx.persist.discard(&units);
        }
        h.leader.release().await;
        self.announce().await;
        info!(partition = k, units = units.len(), "partition handed back");
    }
}

/// Checks, before taking any partition, that the NATS server spreads XO's
/// subjects over the same number of partitions, by the same hash: a probe
/// published on `xo.partition.<instance>` must arrive as
/// `xo.partition.<instance>.<k>` with `k` the partition this supervisor
/// computes. Without the server's mapping nothing would reach a partition's
/// subscriptions, and every report would be lost silently.
pub async fn check_mapping(ctx: &Ctx, shard: &Shard) -> Result<(), crate::SupervisorError> {
    let fix = format!(
        "generate the server's configuration with `xo nats-config --partitions {n}` (the Helm chart: supervisor.partitions={n}), or set supervisor.partitions = 1",
        n = shard.partitions
    );
    if ctx.bus.kind() != "nats" {
        return Err(crate::SupervisorError::Config(format!(
            "supervisor.partitions = {} needs NATS (nats.url), whose subject mapping spreads the units over the supervisors; the {} bus has none: set supervisor.partitions = 1",
            shard.partitions,
            ctx.bus.kind()
        )));
    }
    let subjects = &ctx.subjects;
    let mut sub = ctx
        .bus
        .subscribe(&subjects.partition_probe_reply(&shard.me))
        .await?;
    ctx.bus.flush().await?;
    let expected = partition_of(&shard.me, shard.partitions);
    for _ in 0..3 {
        ctx.bus
            .publish(
                &subjects.partition_probe(&shard.me),
                xo_bus::Headers::new(),
                Bytes::new(),
            )
            .await?;
        ctx.bus.flush().await?;
        let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(1), sub.next()).await else {
            continue;
        };
        let got = msg.subject.rsplit('.').next().unwrap_or("");
        if got == expected.to_string() {
            return Ok(());
        }
        return Err(crate::SupervisorError::Config(format!(
            "the NATS server puts this supervisor's probe in partition {got}, not {expected} as supervisor.partitions = {} does: the server's mapping uses another number of partitions; {fix}",
            shard.partitions
        )));
    }
    Err(crate::SupervisorError::Config(format!(
        "the NATS server does not partition XO's subjects (a probe on {} never arrived as {}): supervisor.partitions = {} needs the server's subject mapping; {fix}",
        subjects.partition_probe(&shard.me),
        subjects.partition_probe_reply(&shard.me),
        shard.partitions
    )))
}
