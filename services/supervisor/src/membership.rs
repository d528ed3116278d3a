//! Who a sharded supervisor is among the others: its name, the members it
//! believes alive, the partitions it holds and the store keys of both.
//! What every part of the supervisor may read ([`crate::ctx::Ctx`] holds
//! it); the taking and handing back is `shard.rs`.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tracing::{info, warn};
use xo_bus::leader::{Holder, Leader};
use xo_bus::{Store, StoreError};
use xo_proto::names::SUPERVISORS_BUCKET as BUCKET;
use xo_proto::partition_of;

pub(crate) fn member_key(instance: &str) -> String {
    format!("member.{instance}")
}

pub(crate) fn partition_key(k: u32) -> String {
    format!("partition.{k}")
}

/// What the sharded parts share: who this supervisor is, the members it
/// believes alive and the partitions it holds.
#[derive(Debug)]
pub struct Shard {
    pub me: String,
    pub partitions: u32,
    pub lease: Duration,
    pub(crate) members: Mutex<Vec<String>>,
    pub(crate) held: Mutex<Vec<u32>>,
    /// Leases handed over at shutdown, released after the state is written.
    pub(crate) leaving: Mutex<Vec<Leader>>,
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
