//! Coalesced persistence of unit state. Watchers hand their latest record to
//! the [`Persister`]; a flusher writes the newest record of each dirty unit
//! every `flush_interval_ms`, so ingest is never bounded by store writes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tracing::{error, warn};
use xo_bus::{Store, StoreError};
use xo_proto::{Health, SaluteReport, Steering};
use xo_radio::UnitState;

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
    pub steering: VecDeque<Steering>,
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

impl UnitRecord {
    /// The latest report, decoded from what was received.
    pub fn report(&self) -> Option<SaluteReport> {
        let raw = self.report_raw.as_ref()?;
        xo_proto::codec::decode::<SaluteReport>(raw, None, usize::MAX)
            .map_err(|e| warn!(unit = %self.unit, error = %e, "stored report undecodable"))
            .ok()
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
            steering: VecDeque::new(),
            unsent: Vec::new(),
            steering_sent: 0,
            restarts: 0,
            ack: None,
        }
    }
}

/// Coalesces writes: only the newest record of a unit is written.
#[derive(Debug, Clone)]
pub struct Persister {
    store: Store,
    dirty: Arc<Mutex<HashMap<String, Bytes>>>,
    /// Serialises flushes (the periodic one and the final one).
    flushing: Arc<tokio::sync::Mutex<()>>,
}

impl Persister {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            dirty: Arc::default(),
            flushing: Arc::default(),
        }
    }

    /// Marks a unit dirty with its newest record.
    pub fn save(&self, record: &UnitRecord) {
        match rmp_serde_encode(record) {
            Ok(bytes) => {
                if let Ok(mut d) = self.dirty.lock() {
                    d.insert(record.unit.clone(), bytes);
                }
            }
            Err(e) => error!(unit = %record.unit, error = %e, "unit record could not be encoded"),
        }
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
        let bytes = rmp_serde_encode(record)?;
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

    /// Forgets a unit for good: its pending record and its stored one.
    pub async fn forget(&self, unit: &str) -> Result<(), StoreError> {
        self.discard(&[unit.to_string()]);
        let _one = self.flushing.lock().await;
        self.store.delete(BUCKET, unit).await
    }

    /// Writes every dirty record.
    pub async fn flush(&self) {
        let _one = self.flushing.lock().await;
        let batch: Vec<(String, Bytes)> = match self.dirty.lock() {
            Ok(mut d) => d.drain().collect(),
            Err(_) => return,
        };
        use futures::StreamExt;
        futures::stream::iter(batch)
            .for_each_concurrent(64, |(unit, bytes)| async move {
                if let Err(e) = self.store.put(BUCKET, &unit, bytes.clone()).await {
                    warn!(unit = %unit, error = %e, "unit state write failed; will retry");
                    if let Ok(mut d) = self.dirty.lock() {
                        d.entry(unit).or_insert(bytes);
                    }
                }
            })
            .await;
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

fn rmp_serde_encode(record: &UnitRecord) -> Result<Bytes, StoreError> {
    xo_proto::codec::encode(record, xo_proto::Format::Msgpack)
        .map(Bytes::from)
        .map_err(|e| StoreError::Encode {
            bucket: BUCKET.into(),
            key: record.unit.clone(),
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
