//! Messages the server keeps for a while (a JetStream stream), for
//! receivers that must not miss what was published while they were away —
//! the reports of sharded supervision: a supervisor whose node dies, or
//! that takes over a dead one's partition, reads on from the stream.
//!
//! - [`ensure`] creates the stream (or finds it, and says what it found);
//! - [`follow`] reads a filtered part of it, from the oldest message kept,
//!   with an ordered consumer that the client recreates from the last
//!   message it delivered after a reconnection, a node's death or a lost
//!   consumer (no gap, no repeat);
//! - [`Bus::publish_acked`](crate::Bus::publish_acked) publishes into it and
//!   waits for the stream's acknowledgement.
//!
//! NATS only: the in-process and socket buses have no server to keep
//! anything, and no one but the one process to miss it.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;

use crate::{Bus, BusError, BusResult, Headers, Message, Subscription};

/// A stream to keep messages in.
#[derive(Debug, Clone)]
pub struct Kept {
    pub name: String,
    /// The subjects it keeps (wildcards allowed).
    pub subjects: Vec<String>,
    /// How long a message is kept.
    pub max_age: Duration,
    /// At most this many bytes (the oldest go first).
    pub max_bytes: i64,
    /// Copies (JetStream R1/R3).
    pub replicas: usize,
}

fn nats(bus: &Bus, what: &str) -> BusResult<async_nats::Client> {
    match bus {
        Bus::Nats(n) => Ok(n.client().clone()),
        other => Err(BusError::NeedsNats {
            what: what.to_string(),
            kind: other.kind(),
        }),
    }
}

fn err(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> BusError {
    BusError::Nats {
        op: what.to_string(),
        source: Box::new(e),
    }
}

fn context(client: async_nats::Client) -> jetstream::Context {
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(3));
    js
}

/// How long [`ensure`] waits for JetStream to answer: a new cluster elects
/// its JetStream leader (and finds the peers for a stream's replicas) some
/// seconds after its nodes listen.
pub const READY_WAIT: Duration = Duration::from_secs(30);

/// Creates the stream, or finds it: one with other subjects, age or size
/// is updated to these; one with fewer replicas is used as it is and
/// reported (as the store's buckets are).
///
/// A JetStream that does not answer yet (a request timed out, the cluster
/// not yet available, no peers for the replicas yet) is asked again for up
/// to [`READY_WAIT`], then the error says it did not answer; a server with
/// no JetStream at all (or not for this account) is
/// [`BusError::NoJetStream`] at once.
pub async fn ensure(bus: &Bus, spec: &Kept) -> BusResult<()> {
    ensure_within(bus, spec, READY_WAIT).await
}

/// [`ensure`], asking a JetStream that does not answer yet for `ready`
/// at most.
pub async fn ensure_within(bus: &Bus, spec: &Kept, ready: Duration) -> BusResult<()> {
    let js = context(nats(bus, "a kept stream")?);
    let what = format!("stream {}", spec.name);
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(250);
    loop {
        match ensure_once(&js, spec).await {
            Ok(()) => return Ok(()),
            Err(Failed::NoJetStream) => return Err(BusError::NoJetStream { what }),
            Err(Failed::Other(e)) => return Err(err(&what, e)),
            Err(Failed::NotYet(e)) if started.elapsed() < ready => {
                tracing::info!(stream = %spec.name, error = %e, retry_in_ms = wait.as_millis() as u64, "kept stream: JetStream does not answer yet; asking again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(4));
            }
            Err(Failed::NotYet(e)) => {
                return Err(err(
                    &format!(
                        "{what} (JetStream did not answer for {} s: is every node of the cluster up?)",
                        ready.as_secs()
                    ),
                    e,
                ));
            }
        }
    }
}

/// Why one attempt of [`ensure`] failed.
enum Failed {
    /// No JetStream answers on this server: asking again will not help.
    NoJetStream,
    /// JetStream is there but not ready (timed out, cluster not yet
    /// available, no peers yet): ask again.
    NotYet(jetstream::context::CreateStreamError),
    Other(jetstream::context::CreateStreamError),
}

impl From<jetstream::context::CreateStreamError> for Failed {
    fn from(e: jetstream::context::CreateStreamError) -> Self {
        use jetstream::ErrorCode;
        use jetstream::context::CreateStreamErrorKind as K;
        match e.kind() {
            K::JetStreamUnavailable => Failed::NoJetStream,
            K::JetStream(j)
                if j.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED
                    || j.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
            {
                Failed::NoJetStream
            }
            K::TimedOut => Failed::NotYet(e),
            K::JetStream(j)
                if j.error_code() == ErrorCode::CLUSTER_NOT_AVAILABLE
                    || j.error_code() == ErrorCode::CLUSTER_NO_PEERS =>
            {
                Failed::NotYet(e)
            }
            _ => Failed::Other(e),
        }
    }
}

async fn ensure_once(js: &jetstream::Context, spec: &Kept) -> Result<(), Failed> {
    // The duplicate window (a message id seen again is dropped) is at most
    // the age, as JetStream requires.
    let window = spec.max_age.min(Duration::from_secs(120));
    let config = jetstream::stream::Config {
        name: spec.name.clone(),
        subjects: spec.subjects.clone(),
        max_age: spec.max_age,
        max_bytes: spec.max_bytes,
        duplicate_window: window,
        discard: jetstream::stream::DiscardPolicy::Old,
        storage: jetstream::stream::StorageType::File,
        num_replicas: spec.replicas.max(1),
        ..Default::default()
    };
    match js.get_stream(&spec.name).await {
        Ok(s) => {
            let found = s.cached_info().config.clone();
            if found.num_replicas < config.num_replicas {
                tracing::warn!(
                    stream = %spec.name,
                    found = found.num_replicas,
                    configured = config.num_replicas,
                    "existing stream has fewer replicas than nats.replicas: it is used as it is; raise it with `nats stream edit {} --replicas {}`",
                    spec.name,
                    config.num_replicas
                );
            }
            let mut subjects = found.subjects.clone();
            subjects.sort();
            let mut want = spec.subjects.clone();
            want.sort();
            if subjects != want
                || found.max_age != spec.max_age
                || found.max_bytes != spec.max_bytes
            {
                js.update_stream(jetstream::stream::Config {
                    num_replicas: found.num_replicas,
                    storage: found.storage,
                    ..config
                })
                .await?;
                tracing::info!(stream = %spec.name, subjects = ?spec.subjects, max_age_ms = spec.max_age.as_millis() as u64, "kept stream updated");
            } else {
                tracing::info!(stream = %spec.name, replicas = found.num_replicas, "kept stream found");
            }
        }
        // Not found, or the lookup itself failed: creating says which.
        Err(_) => {
            js.get_or_create_stream(config).await?;
            tracing::info!(stream = %spec.name, replicas = spec.replicas, max_age_ms = spec.max_age.as_millis() as u64, "kept stream created");
        }
    }
    Ok(())
}

/// The messages of `stream` on `filter`, from the oldest kept, then as
/// they come. The consumer is ordered and ephemeral: after a reconnection
/// (or a node's death, or the consumer lost) the client makes it again from
/// the message after the last delivered, so nothing kept is skipped or
/// delivered twice. Dropping the subscription ends it.
pub async fn follow(bus: &Bus, stream: &str, filter: &str) -> BusResult<Subscription> {
    let js = context(nats(bus, "following a kept stream")?);
    let what = format!("stream {stream}");
    let s = js.get_stream(stream).await.map_err(|e| err(&what, e))?;
    let consumer = s
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            // Pulls wait 4 s, with an idle heartbeat every 2 s: a consumer
            // lost with its node is made again after two missed heartbeats
            // (4 s), not the client's default 30.
            max_expires: Duration::from_secs(4),
            ..Default::default()
        })
        .await
        .map_err(|e| err(&what, e))?;
    let messages = consumer.messages().await.map_err(|e| err(&what, e))?;
    let stream = stream.to_string();
    let out = messages.filter_map(move |m| {
        let stream = stream.clone();
        async move {
            match m {
                Ok(m) => Some(from_kept(m)),
                Err(e) => {
                    tracing::warn!(stream = %stream, error = %e, "kept stream: the consumer reported an error; it goes on");
                    None
                }
            }
        }
    });
    Ok(Subscription::Stream(Box::pin(out)))
}

fn from_kept(m: jetstream::Message) -> Message {
    Message {
        // The stream's acknowledgement subject: nothing to reply to.
        reply: None,
        ..crate::nats::from_nats(m.message)
    }
}

/// Publishes into a stream and waits up to `timeout` for its
/// acknowledgement; `id` makes a retry of the same message stored once.
pub(crate) async fn publish_acked(
    client: &async_nats::Client,
    subject: &str,
    headers: &Headers,
    payload: bytes::Bytes,
    id: &str,
    timeout: Duration,
) -> BusResult<u64> {
    let mut js = jetstream::new(client.clone());
    js.set_timeout(timeout);
    let mut msg = jetstream::message::PublishMessage::build()
        .payload(payload)
        .headers(crate::nats::to_nats_headers(headers));
    msg = msg.message_id(id);
    let ack = js
        .send_publish(subject.to_string(), msg)
        .await
        .map_err(|e| err(subject, e))?;
    match tokio::time::timeout(timeout, ack).await {
        Ok(Ok(a)) => Ok(a.sequence),
        Ok(Err(e)) => Err(err(subject, e)),
        Err(_) => Err(BusError::Timeout {
            subject: subject.to_string(),
            timeout,
        }),
    }
}

/// Empties a stream (its configuration stays); a stream that does not
/// exist is empty already.
pub async fn purge(bus: &Bus, stream: &str) -> BusResult<()> {
    let js = context(nats(bus, "purging a kept stream")?);
    match js.get_stream(stream).await {
        Ok(s) => s
            .purge()
            .await
            .map(|_| ())
            .map_err(|e| err(&format!("stream {stream}"), e)),
        Err(_) => Ok(()),
    }
}
