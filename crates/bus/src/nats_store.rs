//! The NATS store: JetStream key-value buckets (one revision history entry
//! per key) and one stream per log. Bucket and stream names carry the subject
//! prefix, so organisations sharing a NATS do not collide.

use std::collections::HashMap;
use std::sync::Arc;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures::TryStreamExt;
use tokio::sync::Mutex;

use crate::{Cas, Entry, StoreError, StoreResult, validate_key};

#[derive(Clone)]
pub struct NatsStore {
    js: jetstream::Context,
    prefix: String,
    /// Replicas of the buckets and streams this store creates (3 on a
    /// three-node cluster); an existing one with fewer is reported.
    replicas: usize,
    /// Shared, not cloned per call: a `kv::Store` carries its stream's
    /// whole configuration and state (dozens of strings), and the
    /// supervisor's persister looks its bucket up for every record it
    /// writes (issue 43).
    buckets: Arc<Mutex<HashMap<String, Arc<kv::Store>>>>,
    streams: Arc<Mutex<HashMap<String, Arc<jetstream::stream::Stream>>>>,
}

impl std::fmt::Debug for NatsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsStore")
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn backend(e: impl Into<crate::BoxError>) -> StoreError {
    StoreError::Backend(e.into())
}

impl NatsStore {
    pub fn new(client: async_nats::Client, prefix: &str) -> Self {
        Self::with_replicas(client, prefix, 1)
    }

    /// A store whose new buckets and streams have `replicas` copies (JetStream
    /// R1/R3). Existing ones are used as they are; one with fewer replicas is
    /// reported at a warning, naming both numbers.
    pub fn with_replicas(client: async_nats::Client, prefix: &str, replicas: usize) -> Self {
        let mut js = jetstream::new(client);
        // An acknowledgement lost across a server restart is retried after
        // this, not after the default 30 s.
        js.set_timeout(std::time::Duration::from_secs(3));
        Self {
            js,
            prefix: prefix.to_string(),
            replicas: replicas.max(1),
            buckets: Arc::default(),
            streams: Arc::default(),
        }
    }

    /// Says what an existing bucket or log has: fewer replicas than asked
    /// is a warning (it is used as it is; JetStream does not change it).
    fn found(&self, what: &str, replicas: usize) {
        if replicas < self.replicas {
            tracing::warn!(
                what,
                found = replicas,
                configured = self.replicas,
                "existing store has fewer replicas than nats.replicas: it is used as it is; raise it with `nats stream edit --replicas {}` (or remove it to have it created again)",
                self.replicas
            );
        } else {
            tracing::info!(what, replicas, "store found");
        }
    }

    fn name(&self, name: &str) -> String {
        format!("{}_{name}", self.prefix.replace('.', "_")).to_uppercase()
    }

    async fn bucket(&self, name: &str) -> StoreResult<Arc<kv::Store>> {
        let mut cache = self.buckets.lock().await;
        if let Some(b) = cache.get(name) {
            return Ok(b.clone());
        }
        let full = self.name(name);
        let store = match self.js.get_key_value(&full).await {
            Ok(s) => {
                let found = self
                    .js
                    .get_stream(format!("KV_{full}"))
                    .await
                    .map(|st| st.cached_info().config.num_replicas)
                    .unwrap_or(0);
                self.found(&format!("bucket {full}"), found);
                s
            }
            Err(_) => match self
                .js
                .create_key_value(kv::Config {
                    bucket: full.clone(),
                    history: 1,
                    num_replicas: self.replicas,
                    ..Default::default()
                })
                .await
            {
                Ok(s) => {
                    tracing::info!(bucket = %full, replicas = self.replicas, "store bucket created");
                    s
                }
                // Another process created it between our look and our
                // create (services and operators start together): use it.
                Err(e) => {
                    self.js
                        .get_key_value(&full)
                        .await
                        .map_err(|_| StoreError::BackendAt {
                            what: format!("bucket {full}"),
                            source: e.into(),
                        })?
                }
            },
        };
        let store = Arc::new(store);
        cache.insert(name.to_string(), Arc::clone(&store));
        Ok(store)
    }

    pub async fn get(&self, bucket: &str, key: &str) -> StoreResult<Option<Entry>> {
        validate_key(key)?;
        let b = self.bucket(bucket).await?;
        let entry = b.entry(key).await.map_err(backend)?;
        Ok(entry.and_then(|e| match e.operation {
            kv::Operation::Put => Some(Entry {
                value: e.value,
                revision: e.revision,
            }),
            _ => None,
        }))
    }

    pub async fn put(&self, bucket: &str, key: &str, value: Bytes, cas: Cas) -> StoreResult<u64> {
        validate_key(key)?;
        let b = self.bucket(bucket).await?;
        match cas {
            Cas::Any => b.put(key, value).await.map_err(backend),
            Cas::Absent => b.create(key, value).await.map_err(|e| match e.kind() {
                kv::CreateErrorKind::AlreadyExists => StoreError::Exists {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                },
                _ => backend(e),
            }),
            Cas::Revision(expected) => match b.update(key, value, expected).await {
                Ok(r) => Ok(r),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    let found = b.entry(key).await.ok().flatten().map_or(0, |e| e.revision);
                    Err(StoreError::Conflict {
                        bucket: bucket.to_string(),
                        key: key.to_string(),
                        expected,
                        found,
                    })
                }
                Err(e) => Err(backend(e)),
            },
        }
    }

    pub async fn put_many(
        &self,
        bucket: &str,
        items: Vec<(String, Bytes)>,
    ) -> StoreResult<Vec<u64>> {
        let b = self.bucket(bucket).await?;
        for (k, _) in &items {
            validate_key(k)?;
        }
        futures::future::try_join_all(items.into_iter().map(|(k, v)| {
            let b = Arc::clone(&b);
            async move { b.put(k, v).await.map_err(backend) }
        }))
        .await
    }

    pub async fn append_many(&self, log: &str, records: Vec<Bytes>) -> StoreResult<u64> {
        self.stream(log).await?;
        let mut acks = Vec::with_capacity(records.len());
        for r in records {
            // A record sent again (its ack lost to a failing node, the
            // append retried) is stored once: JetStream drops a message id
            // it has seen within its duplicate window.
            let id = record_id(&r);
            acks.push(
                self.js
                    .send_publish(
                        self.log_subject(log),
                        jetstream::message::PublishMessage::build()
                            .payload(r)
                            .message_id(id),
                    )
                    .await
                    .map_err(backend)?,
            );
        }
        let mut last = 0;
        for a in acks {
            last = a.await.map_err(backend)?.sequence;
        }
        Ok(last)
    }

    pub async fn delete(&self, bucket: &str, key: &str) -> StoreResult<()> {
        validate_key(key)?;
        let b = self.bucket(bucket).await?;
        b.delete(key).await.map_err(backend)
    }

    pub async fn keys(&self, bucket: &str) -> StoreResult<Vec<String>> {
        let b = self.bucket(bucket).await?;
        let mut keys: Vec<String> = b
            .keys()
            .await
            .map_err(backend)?
            .try_collect()
            .await
            .map_err(backend)?;
        keys.sort();
        Ok(keys)
    }

    fn log_subject(&self, log: &str) -> String {
        xo_proto::Subjects::new(self.prefix.as_str()).store_log(log)
    }

    async fn stream(&self, log: &str) -> StoreResult<Arc<jetstream::stream::Stream>> {
        let mut cache = self.streams.lock().await;
        if let Some(s) = cache.get(log) {
            return Ok(s.clone());
        }
        let name = self.name(&format!("LOG_{log}"));
        let s = match self.js.get_stream(&name).await {
            Ok(s) => {
                self.found(&format!("log {name}"), s.cached_info().config.num_replicas);
                s
            }
            Err(_) => {
                let s = self
                    .js
                    .get_or_create_stream(jetstream::stream::Config {
                        name: name.clone(),
                        subjects: vec![self.log_subject(log)],
                        num_replicas: self.replicas,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| StoreError::BackendAt {
                        what: format!("log {name}"),
                        source: e.into(),
                    })?;
                tracing::info!(log = %name, replicas = self.replicas, "store log created");
                s
            }
        };
        let s = Arc::new(s);
        cache.insert(log.to_string(), Arc::clone(&s));
        Ok(s)
    }

    pub async fn append(&self, log: &str, record: Bytes) -> StoreResult<u64> {
        self.append_many(log, vec![record]).await
    }

    pub async fn read(&self, log: &str, from: u64, max: usize) -> StoreResult<Vec<(u64, Bytes)>> {
        // A copy of its own: reading the state updates the cached info.
        let mut stream = jetstream::stream::Stream::clone(&*self.stream(log).await?);
        let last = stream.info().await.map_err(backend)?.state.last_sequence;
        let mut out = Vec::new();
        let mut seq = from.max(1);
        while seq <= last && out.len() < max {
            match stream.get_raw_message(seq).await {
                Ok(m) => out.push((seq, m.payload)),
                Err(e) if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound => {}
                Err(e) => return Err(backend(e)),
            }
            seq += 1;
        }
        Ok(out)
    }
}

/// A log record's message id: 128 bits of FNV-1a (two seeds) over its
/// bytes. Log records carry the hash of the record before them, so two
/// different records never share one within the duplicate window.
fn record_id(record: &[u8]) -> String {
    let fnv = |seed: u64| {
        record.iter().fold(seed, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142)
    )
}
