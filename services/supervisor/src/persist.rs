//! Coalesced persistence of unit state. Watchers hand their latest record to
//! the [`Persister`]; a flusher writes the newest record of each dirty unit
//! every `flush_interval_ms`, so ingest is never bounded by store writes.
//!
//! A unit's steering history is kept apart from its record
//! ([`HISTORY_BUCKET`]): a record is saved every persist interval of a unit
//! that reports, a steering is written once, when it is kept. Neither the
//! record nor the watcher holds the history, so a unit's state does not grow
//! as it is steered.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tracing::{error, warn};
use xo_bus::{Store, StoreError};
use xo_proto::{AnomalyKind, Health, SaluteReport, Steering};
use xo_radio::UnitState;

/// The bucket of units' steering histories: `<unit>.<slot>`.
pub use xo_proto::names::UNIT_STEERING_BUCKET as HISTORY_BUCKET;
/// The bucket unit state lives in.
pub use xo_proto::names::UNITS_BUCKET as BUCKET;

/// Everything the supervisor knows about one unit; survives a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitRecord {
    pub unit: String,
    pub role: String,
    /// The XO's verdict.
    pub health: Health,
    /// The unit's own verdict in its last report.
    pub self_health: Health,
    /// Its own words with it (`status.note`), at most 200 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_note: Option<String>,
    pub stale: bool,
    /// Its last report said its session ended: silence is not staleness.
    #[serde(default)]
    pub ended: bool,
    /// Reports refused in a row for their epoch (an earlier life, or a
    /// clock too far off): from `watcher::REFUSED_FLAG` on, not green.
    #[serde(default)]
    pub refused_reports: u32,
    pub last_seen: u64,
    /// Of the latest report: what `xo units` shows without decoding it again.
    pub turn: u64,
    pub seq: u64,
    pub task_id: Option<String>,
    pub context_fill: f64,
    #[serde(default)]
    pub pace: xo_proto::Pace,
    #[serde(default)]
    pub turns_since_progress: u32,
    #[serde(default)]
    pub cost_usd: f64,
    /// Its last report's `status.waiting_until` (a provider's usage limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<u64>,
    /// Its last report's `status.unreadable`: records its sensor could not read.
    #[serde(default)]
    pub unreadable: u64,
    /// The latest report as received (MessagePack or JSON): keeping and
    /// persisting it costs a copy, not an encoding, and a fraction of the
    /// memory of the decoded form. Decoded again only for `xo units UNIT`.
    /// Its own buffer, reused report after report: a payload kept as the
    /// client received it would hold on to the whole read buffer it was
    /// cut from (4.7 KiB a unit measured, against 1.7 for the copy).
    #[serde(default, with = "raw_bytes")]
    pub report_raw: Option<Vec<u8>>,
    pub radio: UnitState,
    /// Steering kept in the unit's history so far (sent, or given by its
    /// own check): the history holds the last `supervisor.steering_history`
    /// of them, in [`HISTORY_BUCKET`].
    #[serde(default)]
    pub steering_kept: u64,
    /// The kind and time of the last one.
    #[serde(default)]
    pub last_steering: Option<(AnomalyKind, u64)>,
    /// The history as records written before it had its own bucket held
    /// it: moved there when the unit's watcher starts, never written.
    #[serde(default, rename = "steering", skip_serializing)]
    pub legacy_steering: Vec<Steering>,
    /// Sharded: steering decided and written before it was published, not
    /// yet known to be published. A supervisor taking the unit over sends
    /// these again, under the same ids (a unit ignores a steering id it has
    /// had): at least once on the wire, once for the unit.
    #[serde(default)]
    pub unsent: Vec<Steering>,
    pub steering_sent: u64,
    pub restarts: u32,
    /// An operator's acknowledgement (`xo ack`), until it lapses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<xo_proto::control::Acknowledged>,
}

/// The room a kept report's buffer has past a report of `len` bytes: a
/// sixteenth, and 32 bytes (about 64 for a typical report of 500).
fn keep_room(len: usize) -> usize {
    len / 16 + 32
}

impl UnitRecord {
    /// The latest report, decoded from what was received.
    pub fn report(&self) -> Option<SaluteReport> {
        let raw = self.report_raw.as_ref()?;
        xo_proto::codec::decode::<SaluteReport>(raw, None, usize::MAX)
            .map_err(|e| warn!(unit = %self.unit, error = %e, "stored report undecodable"))
            .ok()
    }

    /// Keeps `raw` as the latest report, in the buffer kept for the one
    /// before while `raw` fits in it and it is not much larger: a unit's
    /// reports differ in size by a few bytes from one to the next (its
    /// counters' digits), so a buffer of exactly one report's size was made
    /// again for nearly every report. A new buffer has a sixteenth of the
    /// report and 32 bytes to spare, never the doubling of one grown the
    /// usual way.
    pub fn keep_report(&mut self, raw: &[u8]) {
        let fits = raw.len()..=raw.len() + 2 * keep_room(raw.len());
        match &mut self.report_raw {
            Some(buf) if fits.contains(&buf.capacity()) => {
                buf.clear();
                buf.extend_from_slice(raw);
            }
            kept => {
                let mut buf = Vec::with_capacity(raw.len() + keep_room(raw.len()));
                buf.extend_from_slice(raw);
                *kept = Some(buf);
            }
        }
    }

    pub fn new(unit: &str, role: &str, now: u64) -> Self {
        Self {
            unit: unit.to_string(),
            role: role.to_string(),
            health: Health::Green,
            self_health: Health::Green,
            self_note: None,
            stale: false,
            ended: false,
            refused_reports: 0,
            last_seen: now,
            turn: 0,
            seq: 0,
            task_id: None,
            context_fill: 0.0,
            pace: xo_proto::Pace::default(),
            turns_since_progress: 0,
            cost_usd: 0.0,
            waiting_until: None,
            unreadable: 0,
            report_raw: None,
            radio: UnitState::default(),
            steering_kept: 0,
            last_steering: None,
            legacy_steering: Vec::new(),
            unsent: Vec::new(),
            steering_sent: 0,
            restarts: 0,
            ack: None,
        }
    }
}

/// One steering of a unit's history, with its number in the unit's count
/// (`steering_kept`): the order the slots do not give.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    n: u64,
    steering: Steering,
}

/// Coalesces writes: only the newest record of a unit is written.
#[derive(Debug, Clone)]
pub struct Persister {
    store: Store,
    dirty: Arc<Mutex<HashMap<String, Bytes>>>,
    /// Steering kept and not yet written, by history key.
    kept: Arc<Mutex<HashMap<String, Bytes>>>,
    /// Steering kept per unit (`supervisor.steering_history`).
    limit: u64,
    /// Serialises flushes (the periodic one and the final one).
    flushing: Arc<tokio::sync::Mutex<()>>,
    /// How often one unit's record is handed over now (ms): the persist
    /// interval, stretched by the write budget as the fleet grows
    /// (`SupervisorConfig::persist_every_ms`, set at each liveness check).
    every: Arc<AtomicU64>,
    /// What `every` was when it last moved enough to be said.
    every_said: Arc<AtomicU64>,
}

thread_local! {
    /// The encoder's buffer, reused save after save: a record encoded into
    /// a fresh buffer grows it several times over (measured: a quarter of
    /// the supervisor's CPU in a long soak, issue 43).
    static ENCODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Persister {
    pub fn new(store: Store, steering_history: usize) -> Self {
        Self {
            store,
            dirty: Arc::default(),
            kept: Arc::default(),
            limit: steering_history as u64,
            flushing: Arc::default(),
            every: Arc::default(),
            every_said: Arc::default(),
        }
    }

    /// How often one unit's record is handed over (ms).
    pub fn every_ms(&self) -> u64 {
        self.every.load(Ordering::Relaxed)
    }

    /// Sets [`Self::every_ms`]; whether it moved by a quarter or more
    /// from what it was when it last did (or came back to `base`): what is
    /// worth a line in the log.
    pub fn set_every_ms(&self, ms: u64, base: u64) -> bool {
        self.every.store(ms, Ordering::Relaxed);
        let said = self.every_said.load(Ordering::Relaxed);
        let moved = said.max(ms).saturating_mul(4) >= said.min(ms).saturating_mul(5)
            || (ms == base && said != base);
        if moved {
            self.every_said.store(ms, Ordering::Relaxed);
        }
        moved && said != 0
    }

    /// Whether `unit`, last handed over at `last` (ms), is due again at
    /// `now` with a record every `every`: once in each `every` of its own
    /// grid, offset by a hash of its name. Units heard of together (a fleet
    /// starting, a supervisor restarting) are so written spread over the
    /// interval, whatever the interval is now, not all in the same second
    /// of each.
    pub fn due(unit: &str, last: u64, now: u64, every: u64) -> bool {
        if every == 0 {
            return true;
        }
        // FNV-1a, as the unit's watcher group: the same in every run.
        let mut h = xo_radio::Fnv::default();
        std::hash::Hasher::write(&mut h, unit.as_bytes());
        let phase = std::hash::Hasher::finish(&h) % every;
        now.saturating_add(phase) / every > last.saturating_add(phase) / every
    }

    /// Marks a unit dirty with its newest record.
    pub fn save(&self, record: &UnitRecord) {
        match encode_reused(record, BUCKET, &record.unit) {
            Ok(bytes) => {
                if let Ok(mut d) = self.dirty.lock() {
                    d.insert(record.unit.clone(), bytes);
                }
            }
            Err(e) => error!(unit = %record.unit, error = %e, "unit record could not be encoded"),
        }
    }

    /// Keeps `steering`, the unit's `n`th (from 1), in its history: written
    /// at the next flush, over the oldest of its last `steering_history`.
    pub fn keep_steering(&self, unit: &str, n: u64, steering: &Steering) {
        if self.limit == 0 || n == 0 {
            return;
        }
        let key = history_key(unit, (n - 1) % self.limit);
        let kept = Kept {
            n,
            steering: steering.clone(),
        };
        match encode_reused(&kept, HISTORY_BUCKET, &key) {
            Ok(bytes) => {
                if let Ok(mut k) = self.kept.lock() {
                    k.insert(key, bytes);
                }
            }
            Err(e) => {
                error!(unit, error = %e, "steering could not be encoded for the unit's history")
            }
        }
    }

    /// A unit's last steering (at most `steering_history`), oldest first,
    /// of the `kept` it has had: what is not written yet, else the store.
    /// A slot that cannot be read is logged and left out.
    pub async fn steering_history(&self, unit: &str, kept: u64) -> Vec<Steering> {
        let slots = self.limit.min(kept);
        let reads = (0..slots).map(|slot| async move {
            let key = history_key(unit, slot);
            let pending = self.kept.lock().ok().and_then(|k| k.get(&key).cloned());
            let bytes = match pending {
                Some(b) => b,
                None => match self.store.get(HISTORY_BUCKET, &key).await {
                    Ok(e) => e?.value,
                    Err(e) => {
                        warn!(unit, key = %key, error = %e, "steering history could not be read");
                        return None;
                    }
                },
            };
            xo_proto::codec::decode_plain::<Kept>(&bytes, None, usize::MAX)
                .map_err(|e| warn!(bucket = HISTORY_BUCKET, key = %key, error = %e, "kept steering could not be decoded; left out"))
                .ok()
        });
        let mut out: Vec<Kept> = futures::future::join_all(reads)
            .await
            .into_iter()
            .flatten()
            // A slot written before a count the record lost (a supervisor
            // that died before saving it) is older than the unit's last.
            .filter(|k| k.n <= kept && k.n + self.limit > kept)
            .collect();
        out.sort_by_key(|k| k.n);
        out.into_iter().map(|k| k.steering).collect()
    }

    /// The newest record of a unit: pending, else stored.
    pub async fn latest(&self, unit: &str) -> Option<UnitRecord> {
        let pending = self.dirty.lock().ok().and_then(|d| d.get(unit).cloned());
        let bytes = match pending {
            Some(b) => b,
            None => match self.store.get(BUCKET, unit).await {
                Ok(Some(e)) => e.value,
                Ok(None) => return None,
                Err(e) => {
                    warn!(unit, error = %e, "unit state could not be read");
                    return None;
                }
            },
        };
        decode(&bytes)
            .map_err(
                |e| warn!(bucket = BUCKET, unit, error = %e, "unit state could not be decoded"),
            )
            .ok()
    }

    /// Writes a record now (not coalesced), before what it records is
    /// acted on: a sharded supervisor writes a unit's state before sending
    /// its steering, so that a supervisor taking the unit over after a crash
    /// knows the steering was sent (and its cooldown) and does not send it
    /// again.
    pub async fn write_now(&self, record: &UnitRecord) -> Result<(), StoreError> {
        let bytes = encode_reused(record, BUCKET, &record.unit)?;
        if let Ok(mut d) = self.dirty.lock() {
            d.remove(&record.unit);
        }
        self.store
            .put(BUCKET, &record.unit, bytes)
            .await
            .map(|_| ())
    }

    /// Forgets the pending records of `units` (another supervisor holds
    /// them now: its state is the one kept).
    pub fn discard(&self, units: &[String]) {
        if let Ok(mut d) = self.dirty.lock() {
            for u in units {
                d.remove(u);
            }
        }
    }

    /// Forgets a unit for good: its pending record and its stored one,
    /// and its steering history.
    pub async fn forget(&self, unit: &str) -> Result<(), StoreError> {
        self.discard(&[unit.to_string()]);
        let keys: Vec<String> = (0..self.limit).map(|s| history_key(unit, s)).collect();
        if let Ok(mut k) = self.kept.lock() {
            for key in &keys {
                k.remove(key);
            }
        }
        let _one = self.flushing.lock().await;
        self.store.delete(BUCKET, unit).await?;
        for key in &keys {
            self.store.delete(HISTORY_BUCKET, key).await?;
        }
        Ok(())
    }

    /// Writes every dirty record and every steering kept since the last
    /// flush. A write that fails is tried again at the next flush (unless
    /// a newer one replaced it meanwhile).
    pub async fn flush(&self) {
        let _one = self.flushing.lock().await;
        write_all(&self.store, BUCKET, &self.dirty).await;
        write_all(&self.store, HISTORY_BUCKET, &self.kept).await;
    }

    /// Writes pending records every `every` until `shutdown` (never in the
    /// middle of a flush: a flush begun is finished).
    pub fn spawn_flusher(
        &self,
        every: Duration,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut shutdown = std::pin::pin!(shutdown);
            loop {
                tokio::select! {
                    _ = t.tick() => {}
                    _ = &mut shutdown => break,
                }
                me.flush().await;
            }
        })
    }
}

/// Writes what `pending` holds to `bucket`. An entry stays pending until
/// its write succeeded (a reader between the two finds it pending, never
/// in neither place), and is then removed unless a newer one replaced it
/// meanwhile; one that failed stays for the next flush.
async fn write_all(store: &Store, bucket: &str, pending: &Mutex<HashMap<String, Bytes>>) {
    let batch: Vec<(String, Bytes)> = match pending.lock() {
        Ok(d) => d.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Err(_) => return,
    };
    use futures::StreamExt;
    futures::stream::iter(batch)
        .for_each_concurrent(64, |(key, bytes)| async move {
            match store.put(bucket, &key, bytes.clone()).await {
                Ok(_) => {
                    if let Ok(mut d) = pending.lock()
                        // The same value (each encoding is a fresh copy).
                        && d.get(&key).is_some_and(|b| b.as_ptr() == bytes.as_ptr())
                    {
                        d.remove(&key);
                    }
                }
                Err(e) => {
                    warn!(bucket, key = %key, error = %e, "unit state write failed; will retry")
                }
            }
        })
        .await;
}

/// The most of the encoder's buffer kept between values.
const KEPT_BUFFER: usize = 64 * 1024;

/// The key of a unit's history slot.
fn history_key(unit: &str, slot: u64) -> String {
    format!("{unit}.{slot}")
}

/// Encodes into the thread's reused buffer; the bytes kept are a copy of
/// exactly their size.
/// (One that grew past [`KEPT_BUFFER`] for an outsized value is let go.)
fn encode_reused<T: Serialize>(value: &T, bucket: &str, key: &str) -> Result<Bytes, StoreError> {
    ENCODED
        .with_borrow_mut(|buf| {
            xo_proto::codec::encode_msgpack_into(value, buf)?;
            let bytes = Bytes::copy_from_slice(buf);
            buf.clear();
            buf.shrink_to(KEPT_BUFFER);
            Ok(bytes)
        })
        .map_err(|e: xo_proto::CodecError| StoreError::Encode {
            bucket: bucket.into(),
            key: key.to_string(),
            source: e.into(),
        })
}

fn decode(bytes: &[u8]) -> Result<UnitRecord, xo_proto::CodecError> {
    xo_proto::codec::decode_plain::<UnitRecord>(bytes, None, usize::MAX)
}

/// `Option<Vec<u8>>` as MessagePack binary.
mod raw_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_some(&serde_bytes::Bytes::new(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<serde_bytes::ByteBuf>::deserialize(d)?.map(serde_bytes::ByteBuf::into_vec))
    }
}

/// Every unit's kept state (a corrupt record is logged with its key and
/// skipped; it never stops the supervisor). A store that cannot be read (a damaged file)
/// is an error: the supervisor does not start on it rather than start empty
/// and lose every unit's state (`xo store repair` names what it drops).
pub async fn load_all(store: &Store) -> Result<Vec<UnitRecord>, xo_bus::StoreError> {
    load_where(store, |_| true).await
}

/// The kept state of the units `wanted` picks (by unit id).
pub async fn load_where(
    store: &Store,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<UnitRecord>, xo_bus::StoreError> {
    let keys = store.keys(BUCKET).await?;
    let mut out = Vec::new();
    for key in keys.into_iter().filter(|k| wanted(k)) {
        match store.get(BUCKET, &key).await {
            Ok(Some(e)) => match decode(&e.value) {
                Ok(r) => out.push(r),
                Err(e) => {
                    error!(bucket = BUCKET, key = %key, error = %e, "corrupt unit state skipped")
                }
            },
            Ok(None) => {}
            Err(e) => error!(key = %key, error = %e, "unit state could not be read"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit's reports, a few bytes apart in size, are kept in one buffer;
    /// one much larger or much smaller gets a buffer of its own size (plus
    /// the room), not one that keeps growing or stays large.
    #[test]
    fn a_units_reports_of_about_one_size_are_kept_in_one_buffer() {
        let mut rec = UnitRecord::new("u", "", 0);
        let kept = |r: &UnitRecord| r.report_raw.as_ref().map(|b| (b.as_ptr(), b.capacity()));
        rec.keep_report(&[1; 500]);
        let (first, cap) = kept(&rec).expect("kept");
        assert_eq!(cap, 500 + keep_room(500));
        for len in [503, 497, 531, 470] {
            rec.keep_report(&vec![2; len]);
            assert_eq!(
                kept(&rec),
                Some((first, cap)),
                "{len} bytes: the same buffer"
            );
            assert_eq!(rec.report_raw.as_deref(), Some(&vec![2u8; len][..]));
        }
        rec.keep_report(&[3; 2_000]);
        assert_eq!(kept(&rec).map(|k| k.1), Some(2_000 + keep_room(2_000)));
        rec.keep_report(&[4; 100]);
        assert_eq!(
            kept(&rec).map(|k| k.1),
            Some(100 + keep_room(100)),
            "a small report does not keep the large buffer"
        );
        assert_eq!(rec.report_raw.as_deref(), Some(&[4u8; 100][..]));
    }

    /// Each unit is due once in each interval, at its own point of it:
    /// 1,000 units written from one instant on are due again spread over
    /// the next interval, each exactly once.
    #[test]
    fn units_are_due_once_an_interval_each_at_its_own_point() {
        let (t0, every) = (1_000_000u64, 10_000u64);
        let units: Vec<String> = (0..1_000).map(|i| format!("unit-{i}")).collect();
        let mut by_second = [0u32; 10];
        for u in &units {
            let mut last = t0;
            let mut writes = 0;
            // A report each second for one interval.
            for s in 1..=10 {
                let now = t0 + s * 1_000;
                if Persister::due(u, last, now, every) {
                    by_second[(s - 1) as usize] += 1;
                    writes += 1;
                    last = now;
                }
            }
            assert_eq!(writes, 1, "{u}: once in the interval");
        }
        // Spread: no second of the interval takes more than a fifth.
        assert!(by_second.iter().all(|&n| n < 200), "{by_second:?}");
    }

    /// The interval is worth a line when it moves by a quarter since it was
    /// last said, or comes back to the base; not at the first setting.
    #[test]
    fn the_interval_is_said_when_it_moves_by_a_quarter() {
        let dir = tempfile::tempdir().unwrap();
        let p = Persister::new(store(dir.path()), 4);
        assert!(!p.set_every_ms(5_000, 5_000), "the first setting");
        assert!(!p.set_every_ms(6_000, 5_000), "a fifth more");
        assert!(p.set_every_ms(6_250, 5_000), "a quarter more than said");
        assert_eq!(p.every_ms(), 6_250);
        assert!(!p.set_every_ms(7_000, 5_000));
        assert!(p.set_every_ms(5_000, 5_000), "back to the base");
        assert!(p.set_every_ms(u64::MAX, 5_000), "no overflow");
    }

    fn steering(unit: &str, i: u64) -> Steering {
        Steering {
            v: xo_proto::PROTOCOL_VERSION,
            unit: unit.into(),
            id: format!("{unit}-{i}"),
            kind: AnomalyKind::Loop,
            severity: xo_proto::Severity::Warning,
            message: format!("[SUPERVISOR] loop {i}"),
            turn: i,
            at: 1_000 + i,
            evidence: Default::default(),
            source: Default::default(),
        }
    }

    fn store(dir: &std::path::Path) -> Store {
        Store::File(xo_bus::FileStore::open(dir).unwrap())
    }

    fn turns(h: &[Steering]) -> Vec<u64> {
        h.iter().map(|s| s.turn).collect()
    }

    /// The history keeps a unit's last `limit`, oldest first: before it is
    /// written, once written, and read by another supervisor from the store.
    #[tokio::test]
    async fn the_history_keeps_the_last_steering_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = Persister::new(store(dir.path()), 4);
        for n in 1..=6 {
            p.keep_steering("u1", n, &steering("u1", n));
        }
        p.keep_steering("u2", 1, &steering("u2", 1));
        assert_eq!(turns(&p.steering_history("u1", 6).await), [3, 4, 5, 6]);
        p.flush().await;
        assert_eq!(turns(&p.steering_history("u1", 6).await), [3, 4, 5, 6]);
        assert_eq!(turns(&p.steering_history("u2", 1).await), [1]);
        let other = Persister::new(store(dir.path()), 4);
        assert_eq!(turns(&other.steering_history("u1", 6).await), [3, 4, 5, 6]);
        // Fewer kept than the limit: only those.
        assert_eq!(
            turns(&other.steering_history("u1", 0).await),
            Vec::<u64>::new()
        );
        // A record that lost its count (saved before its last two steering):
        // the two written after it are not shown as older ones.
        assert_eq!(turns(&other.steering_history("u1", 4).await), [3, 4]);
        other.forget("u1").await.unwrap();
        let again = Persister::new(store(dir.path()), 4);
        assert!(again.steering_history("u1", 6).await.is_empty());
        assert_eq!(turns(&again.steering_history("u2", 1).await), [1]);
    }

    /// Steering does not grow a unit's record: saved after a hundred, it is
    /// the size it was after one.
    #[tokio::test]
    async fn a_record_does_not_grow_with_its_steering() {
        let dir = tempfile::tempdir().unwrap();
        let p = Persister::new(store(dir.path()), 20);
        let mut rec = UnitRecord::new("u1", "coder", 1);
        let size = |rec: &UnitRecord| encode_reused(rec, BUCKET, "u1").unwrap().len();
        let mut sizes = Vec::new();
        for n in 1..=100u64 {
            let s = steering("u1", n);
            rec.steering_kept = n;
            rec.last_steering = Some((s.kind, s.at));
            p.keep_steering("u1", n, &s);
            sizes.push(size(&rec));
        }
        assert_eq!(sizes[0], sizes[99], "{sizes:?}");
        assert_eq!(p.steering_history("u1", 100).await.len(), 20);
    }

    /// A record written when the history was in it still reads: its
    /// history is there to move, and it is not written back into the record.
    #[test]
    fn a_record_with_its_history_inside_still_reads() {
        #[derive(Serialize)]
        struct Old<'a> {
            #[serde(flatten)]
            rec: &'a UnitRecord,
            steering: Vec<Steering>,
        }
        let rec = UnitRecord::new("u1", "coder", 1);
        let old = Old {
            rec: &rec,
            steering: vec![steering("u1", 1), steering("u1", 2)],
        };
        let bytes = xo_proto::codec::encode(&old, xo_proto::Format::Msgpack).unwrap();
        let read = decode(&bytes).unwrap();
        assert_eq!(turns(&read.legacy_steering), [1, 2]);
        let again = decode(&encode_reused(&read, BUCKET, "u1").unwrap()).unwrap();
        assert!(again.legacy_steering.is_empty());
    }
}
