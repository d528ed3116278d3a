//! XO transport: one [`Bus`] (publish, wildcard subscribe, request/reply with
//! timeout, headers, control services) and one [`Store`] (key-value with
//! revisions and compare-and-swap, plus an append-only log).
//!
//! # Layout
//!
//! - [`Bus`]: an enum over three transports with one set of methods:
//!   [`nats`] (async-nats, the distributed engine), [`local`] (in-process,
//!   the embedded default) and [`socket`] (a running `xo up` serving its local
//!   bus to other processes over a Unix socket).
//! - [`Store`]: [`nats_store`] (JetStream key-value buckets and streams) or
//!   [`file_store`] (records with checksums under `./.xo/state`).
//! - [`trace`]: W3C trace context in message headers.
//! - [`files`]: files replaced whole (`tempfile` in the same folder, fsync,
//!   rename, fsync of the folder), for the store and every service.
//! - [`subject_match`]: subject and wildcard validation and matching (the
//!   local transports' routing).
//! - [`typed`]: versioned messages with `Content-Type`, control calls, and the
//!   dead-letter path for undecodable input.
//! - [`client`]: the front door for everything that is not a service (the
//!   CLI, the console, the benches, the tests): a [`Client`] calls the
//!   services' verbs and nothing else.
//! - [`api`]: the one serve loop of every control API: requests decoded by
//!   verb, handed to the service's actor, answered.
//! - [`input`]: the one event input of every service: a subscription read
//!   until shutdown, decoded (what does not decode is dead-lettered), handed
//!   on or cast to the service's actor.
//!
//! Every transport passes the same conformance suite (`app/cli/tests/conformance.rs`).

pub mod api;
pub mod client;
pub mod file_store;
pub mod files;
mod headers;
pub mod hearing;
pub mod input;
pub mod kept;
pub mod leader;
pub mod local;
pub mod nats;
pub mod nats_store;
pub mod socket;
pub mod subject_match;
pub mod trace;
pub mod typed;
pub mod wire;

use std::time::Duration;

use bytes::Bytes;

pub use client::Client;
pub use file_store::{FileStore, Staged};
pub use headers::Headers;
pub use hearing::Hearing;
pub use local::LocalBus;
pub use nats::NatsBus;
pub use nats_store::NatsStore;
pub use socket::SocketBus;

/// Errors of the bus.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("no responders on {subject}")]
    NoResponders { subject: String },
    #[error("request on {subject} timed out after {timeout:?}")]
    Timeout { subject: String, timeout: Duration },
    #[error("invalid subject {subject:?}: {reason}")]
    InvalidSubject { subject: String, reason: String },
    #[error("bus connection closed")]
    Closed,
    #[error("cannot connect to {target}: {source}")]
    Connect {
        target: String,
        source: ConnectError,
    },
    /// What NATS answered to `op`, as its own type (a caller can tell a
    /// refused publish from a dead connection by downcasting).
    #[error("nats {op}: {source}")]
    Nats { op: String, source: BoxError },
    /// A message that could not be encoded: nothing was sent.
    #[error("{subject}: not encodable: {source}")]
    Encode {
        subject: String,
        source: xo_proto::codec::CodecError,
    },
    /// Something only NATS (JetStream) keeps, asked of another bus.
    #[error("{what} needs NATS (JetStream); the {kind} bus keeps nothing")]
    NeedsNats { what: String, kind: &'static str },
    /// A NATS server with no JetStream, asked for something it keeps.
    #[error(
        "{what}: the NATS server has no JetStream: enable it (`jetstream {{}}` in its configuration, `-js` on its command line)"
    )]
    NoJetStream { what: String },
    #[error("socket {path}: {source}")]
    Socket {
        path: String,
        source: std::io::Error,
    },
    /// The socket is served by another user's process.
    #[error(
        "socket {path}: served by user {owner}, not by you (user {me}): another user's process holds it; remove it and start `xo up` again"
    )]
    NotOurs { path: String, owner: u32, me: u32 },
    /// The socket's token could not be read (only the user running
    /// `xo up`, unconfined, can).
    #[error(
        "bus token {path}: {source}: only the user running `xo up` can use its socket (a confined agent cannot read the token)"
    )]
    Token {
        path: String,
        source: std::io::Error,
    },
}

pub type BusResult<T> = Result<T, BusError>;

/// A cause of any type, kept as it is.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a connection to NATS was not made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "user {user:?} has no password: set nats.password (or XO__NATS__PASSWORD, or nats.password_file)"
    )]
    NoPassword { user: String },
    #[error("not a NATS URL (or a comma-separated list of them): {0}")]
    NotAUrl(#[source] std::io::Error),
    /// The server's or the network's answer (its kind says which:
    /// refused, authentication, TLS, timed out…). The URLs it was given
    /// carry no credentials, so neither does this.
    #[error(transparent)]
    Refused(#[from] async_nats::ConnectError),
}

/// Errors of the store. Each names the bucket/key or file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{bucket}/{key}: revision conflict (expected {expected}, found {found})")]
    Conflict {
        bucket: String,
        key: String,
        expected: u64,
        found: u64,
    },
    #[error("{bucket}/{key}: already exists")]
    Exists { bucket: String, key: String },
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("corrupt store file {path} at byte {offset}: {reason}")]
    Corrupt {
        path: String,
        offset: u64,
        reason: String,
    },
    #[error("store file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// What the backend (NATS key-value, a worker thread) answered, as its type.
    #[error("store backend: {0}")]
    Backend(#[source] BoxError),
    /// The same, for one bucket or log.
    #[error("store backend, {what}: {source}")]
    BackendAt { what: String, source: BoxError },
    /// A writer panicked holding the store's lock: what it held is not
    /// trusted; the service restarts (its supervisor tree does).
    #[error("store lock poisoned by a writer that panicked: restart the service")]
    Poisoned,
    /// The store's own invariant broke (a bucket or log it holds is gone,
    /// a write gave no revision): a defect, never the input's fault.
    #[error("store: {0} (a defect in the store; please report it)")]
    Broken(&'static str),
    /// A record could not be encoded: nothing was written.
    #[error("{bucket}/{key}: record not encodable: {source}")]
    Encode {
        bucket: String,
        key: String,
        source: BoxError,
    },
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The bus crate's one error: the transport's, the store's or a control
/// call's, each a type of its own. A service wraps it once, as
/// `Bus(#[from] xo_bus::Error)`, and [`bus_error_from!`] gives it the
/// `From` of each case, so `?` works on all of them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("bus: {0}")]
    Bus(#[from] BusError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Call(#[from] typed::CallError),
}

/// Gives a service's error enum, which wraps [`enum@Error`] once, the `From`
/// of [`BusError`], [`StoreError`] and [`typed::CallError`].
#[macro_export]
macro_rules! bus_error_from {
    ($ty:ty) => {
        $crate::bus_error_from!(@one $ty, $crate::BusError);
        $crate::bus_error_from!(@one $ty, $crate::StoreError);
        $crate::bus_error_from!(@one $ty, $crate::typed::CallError);
    };
    (@one $ty:ty, $from:ty) => {
        impl From<$from> for $ty {
            fn from(e: $from) -> Self {
                <$ty>::from($crate::Error::from(e))
            }
        }
    };
}

/// A message as every transport delivers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub subject: String,
    pub reply: Option<String>,
    pub headers: Headers,
    pub payload: Bytes,
}

impl Message {
    /// The message with a payload of its own. A payload read from NATS is a
    /// slice of the connection's read buffer, shared with the messages read
    /// with it: one message kept for long keeps that whole buffer. A
    /// message to be held (queued behind a busy consumer) is detached
    /// first, so what is held is what it weighs.
    pub fn detached(self) -> Self {
        Self {
            payload: Bytes::copy_from_slice(&self.payload),
            headers: self.headers.detached(),
            ..self
        }
    }
}

/// One bus, three transports.
#[derive(Debug, Clone)]
pub enum Bus {
    Local(LocalBus),
    Nats(NatsBus),
    Socket(SocketBus),
}

impl Bus {
    /// Which transport this is, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Bus::Local(_) => "in-process",
            Bus::Nats(_) => "nats",
            Bus::Socket(_) => "socket",
        }
    }

    /// Whether the bus is connected right now (NATS: the client's state;
    /// the in-process and socket buses always are). A message published
    /// while not connected waits in the client's buffer and is lost if the
    /// buffer fills or the process ends first.
    pub fn is_connected(&self) -> bool {
        match self {
            Bus::Nats(n) => {
                n.client().connection_state() == async_nats::connection::State::Connected
            }
            _ => true,
        }
    }

    /// Times this connection lost its server (NATS: each disconnection;
    /// the in-process and socket buses: 0). With [`Bus::is_connected`],
    /// what tells a peer's silence from this side's own deafness.
    pub fn outages(&self) -> u64 {
        match self {
            Bus::Nats(n) => n.outages(),
            _ => 0,
        }
    }

    /// Messages this connection dropped because a subscription was full
    /// (NATS: its slow-consumer events, a lower bound). The in-process and
    /// socket buses queue without dropping: 0.
    pub fn dropped(&self) -> u64 {
        match self {
            Bus::Nats(n) => n.dropped(),
            _ => 0,
        }
    }

    /// A connection of its own for one part of a service (NATS:
    /// [`NatsBus::another`]); `None` where there is no connection to make
    /// (the in-process and socket buses, a NATS client made elsewhere):
    /// the part uses this one.
    pub async fn another(&self, part: &str) -> Option<BusResult<Bus>> {
        match self {
            Bus::Nats(n) => Some(n.another(part).await?.map(Bus::Nats)),
            _ => None,
        }
    }

    /// A subscription to `pattern` read off a NATS connection of its own
    /// ([`NatsBus::wire`]); `None` on the in-process and socket buses, and
    /// where only the NATS client can read (TLS).
    pub async fn wire(&self, part: &str, pattern: &str) -> Option<BusResult<Subscription>> {
        match self {
            Bus::Nats(n) => n.wire(part, pattern).await,
            _ => None,
        }
    }

    pub async fn publish(&self, subject: &str, headers: Headers, payload: Bytes) -> BusResult<()> {
        self.publish_with_reply(subject, None, headers, payload)
            .await
    }

    pub async fn publish_with_reply(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Headers,
        payload: Bytes,
    ) -> BusResult<()> {
        subject_match::validate_subject(subject)?;
        match self {
            Bus::Local(b) => {
                b.publish_with_reply(subject, reply, headers, payload);
                Ok(())
            }
            Bus::Nats(b) => b.publish_with_reply(subject, reply, headers, payload).await,
            Bus::Socket(b) => b.publish_with_reply(subject, reply, headers, payload).await,
        }
    }

    /// Publishes into a stream that keeps `subject` ([`kept`]) and waits up
    /// to `timeout` for the stream's acknowledgement: `Ok` means the message
    /// is stored (on as many nodes as the stream has replicas); an error
    /// means it may not be. `id` makes a retry of the same message stored
    /// once. The in-process and socket buses deliver while they are up: a
    /// plain publish.
    pub async fn publish_acked(
        &self,
        subject: &str,
        headers: Headers,
        payload: Bytes,
        id: &str,
        timeout: Duration,
    ) -> BusResult<()> {
        subject_match::validate_subject(subject)?;
        match self {
            Bus::Nats(b) => {
                kept::publish_acked(b.client(), subject, &headers, payload, id, timeout)
                    .await
                    .map(|_| ())
            }
            _ => self.publish(subject, headers, payload).await,
        }
    }

    /// Subscribes to a subject or wildcard pattern (`*` one token, `>` the rest).
    pub async fn subscribe(&self, pattern: &str) -> BusResult<Subscription> {
        subject_match::validate_pattern(pattern)?;
        match self {
            Bus::Local(b) => Ok(b.subscribe(pattern)),
            Bus::Nats(b) => b.subscribe(pattern).await,
            Bus::Socket(b) => b.subscribe(pattern).await,
        }
    }

    /// Sends a request and waits for the first reply.
    pub async fn request(
        &self,
        subject: &str,
        headers: Headers,
        payload: Bytes,
        timeout: Duration,
    ) -> BusResult<Message> {
        subject_match::validate_subject(subject)?;
        match self {
            Bus::Local(b) => b.request(subject, headers, payload, timeout).await,
            Bus::Nats(b) => b.request(subject, headers, payload, timeout).await,
            Bus::Socket(b) => b.request(subject, headers, payload, timeout).await,
        }
    }

    /// Waits until everything published so far has left this process.
    pub async fn flush(&self) -> BusResult<()> {
        match self {
            Bus::Local(_) => Ok(()),
            Bus::Nats(b) => b.flush().await,
            Bus::Socket(b) => b.flush().await,
        }
    }

    /// Serves a control API: on NATS a micro service (so `$SRV.PING`, `INFO`
    /// and `STATS` answer), elsewhere a subscription to `<group>.<verb>`.
    pub async fn serve(&self, spec: ServiceSpec) -> BusResult<ServiceEndpoint> {
        match self {
            Bus::Nats(b) => b.serve(spec).await,
            _ => {
                let mut subs = Vec::new();
                for verb in &spec.verbs {
                    subs.push(self.subscribe(&format!("{}.{verb}", spec.group)).await?);
                }
                for verb in &spec.scoped {
                    subs.push(self.subscribe(&format!("{}.{verb}.*", spec.group)).await?);
                }
                Ok(ServiceEndpoint::Plain {
                    group: spec.group.clone(),
                    bus: self.clone(),
                    stream: Box::pin(futures::stream::select_all(
                        subs.into_iter().map(Subscription::into_stream),
                    )),
                })
            }
        }
    }
}

/// A control API to serve.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    /// Service name, e.g. `xo-supervisor`.
    pub name: String,
    pub version: String,
    pub description: String,
    /// Subject group, e.g. `xo.ctl.supervisor`.
    pub group: String,
    /// Endpoint names within the group.
    pub verbs: Vec<String>,
    /// Verbs also served on `<group>.<verb>.<unit>`: a runner's request
    /// for its own unit ([`ServiceRequest::scope`]).
    pub scoped: Vec<String>,
}

/// A stream of control requests.
pub enum ServiceEndpoint {
    Plain {
        group: String,
        bus: Bus,
        stream: std::pin::Pin<Box<dyn futures::Stream<Item = Message> + Send>>,
    },
    Nats {
        group: String,
        service: nats::RunningService,
        stream: std::pin::Pin<Box<dyn futures::Stream<Item = async_nats::service::Request> + Send>>,
    },
}

impl std::fmt::Debug for ServiceEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceEndpoint")
    }
}

impl ServiceEndpoint {
    pub async fn next(&mut self) -> Option<ServiceRequest> {
        use futures::StreamExt;
        match self {
            ServiceEndpoint::Plain { group, bus, stream } => {
                let message = stream.next().await?;
                Some(ServiceRequest {
                    message,
                    group_len: group.len(),
                    responder: Responder::Bus(bus.clone()),
                })
            }
            ServiceEndpoint::Nats { group, stream, .. } => {
                let req = stream.next().await?;
                Some(ServiceRequest {
                    message: nats::from_nats(req.message.clone()),
                    group_len: group.len(),
                    responder: Responder::Nats(Box::new(req)),
                })
            }
        }
    }

    /// Stops the service (on NATS it deregisters from `$SRV`). Dropping the
    /// endpoint (its task aborted) does the same.
    pub async fn stop(self) {
        if let ServiceEndpoint::Nats { mut service, .. } = self {
            service.stop();
        }
    }
}

enum Responder {
    Bus(Bus),
    Nats(Box<async_nats::service::Request>),
}

/// One request to a control API; answer it with [`ServiceRequest::respond`].
pub struct ServiceRequest {
    pub message: Message,
    /// The length of the endpoint's group (`xo.ctl.queue`) in the subject.
    group_len: usize,
    responder: Responder,
}

impl std::fmt::Debug for ServiceRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceRequest")
            .field("subject", &self.message.subject)
            .finish()
    }
}

impl ServiceRequest {
    /// What follows the group: `<verb>` or `<verb>.<unit>`.
    fn tail(&self) -> &str {
        let s = &self.message.subject;
        s.get(self.group_len..)
            .and_then(|t| t.strip_prefix('.'))
            .unwrap_or(s.rsplit('.').next().unwrap_or_default())
    }

    /// The verb: the subject's token after the group.
    pub fn verb(&self) -> &str {
        let t = self.tail();
        t.split_once('.').map_or(t, |(verb, _)| verb)
    }

    /// The unit of a scoped request (`<group>.<verb>.<unit>`): the one
    /// whose NATS user was allowed to publish it.
    pub fn scope(&self) -> Option<&str> {
        self.tail().split_once('.').map(|(_, unit)| unit)
    }

    /// Answers with a control reply (`{"ok": …}` or `{"err": …}`); a reply
    /// that cannot be sent is logged, since the caller has nobody to tell.
    pub async fn reply<T: serde::Serialize>(
        self,
        result: Result<T, xo_proto::control::ServiceError>,
    ) {
        let subject = self.message.subject.clone();
        let (h, body) = typed::encode_reply(&xo_proto::control::Reply::from(result));
        if let Err(e) = self.respond(h, body).await {
            tracing::warn!(subject = %subject, error = %e, "control reply could not be sent");
        }
    }

    pub async fn respond(self, headers: Headers, payload: Bytes) -> BusResult<()> {
        match self.responder {
            Responder::Bus(bus) => match &self.message.reply {
                Some(reply) => bus.publish(reply, headers, payload).await,
                None => Ok(()),
            },
            Responder::Nats(req) => req
                .respond_with_headers(Ok(payload), nats::to_nats_headers(&headers))
                .await
                .map_err(|e| BusError::Nats {
                    op: "respond".into(),
                    source: e.into(),
                }),
        }
    }
}

/// Waits for the reply to a request on its inbox subscription (the local
/// transports; NATS has its own). A `Status: 503` reply means nobody listened.
pub(crate) async fn await_reply(
    sub: &mut Subscription,
    subject: &str,
    timeout: Duration,
) -> BusResult<Message> {
    match tokio::time::timeout(timeout, sub.next()).await {
        Ok(Some(m)) if m.headers.get(local::STATUS_HEADER) == Some(local::NO_RESPONDERS) => {
            Err(BusError::NoResponders {
                subject: subject.to_string(),
            })
        }
        Ok(Some(m)) => Ok(m),
        Ok(None) => Err(BusError::Closed),
        Err(_) => Err(BusError::Timeout {
            subject: subject.to_string(),
            timeout,
        }),
    }
}

/// A live subscription; dropping it unsubscribes.
pub enum Subscription {
    Channel(local::ChannelSub),
    Nats(async_nats::Subscriber),
    /// Messages read off a NATS connection of the subscription's own
    /// ([`wire`]).
    Wire(Box<wire::WireSub>),
    /// Messages read from a stream the server keeps ([`kept::follow`]).
    Stream(std::pin::Pin<Box<dyn futures::Stream<Item = Message> + Send>>),
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Subscription")
    }
}

impl Subscription {
    /// The next message, or `None` once the transport closed.
    pub async fn next(&mut self) -> Option<Message> {
        use futures::StreamExt;
        match self {
            Subscription::Channel(s) => s.rx.recv().await,
            Subscription::Nats(s) => s.next().await.map(nats::from_nats),
            Subscription::Wire(s) => s.next().await,
            Subscription::Stream(s) => s.next().await,
        }
    }

    /// A message already received, without waiting.
    pub fn try_next(&mut self) -> Option<Message> {
        use futures::{FutureExt, StreamExt};
        match self {
            Subscription::Channel(s) => s.rx.try_recv().ok(),
            Subscription::Nats(s) => s.next().now_or_never().flatten().map(nats::from_nats),
            Subscription::Wire(s) => s.try_next(),
            Subscription::Stream(s) => s.next().now_or_never().flatten(),
        }
    }

    pub fn into_stream(self) -> std::pin::Pin<Box<dyn futures::Stream<Item = Message> + Send>> {
        Box::pin(futures::stream::unfold(self, |mut s| async move {
            s.next().await.map(|m| (m, s))
        }))
    }
}

/// One store, two backends.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // a handle, created once and cloned
pub enum Store {
    File(FileStore),
    Nats(NatsStore),
}

/// A key-value entry with its revision.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub value: Bytes,
    pub revision: u64,
}

impl Store {
    pub async fn get(&self, bucket: &str, key: &str) -> StoreResult<Option<Entry>> {
        match self {
            Store::File(s) => s.get(bucket, key).await,
            Store::Nats(s) => s.get(bucket, key).await,
        }
    }
    /// Writes unconditionally; returns the new revision.
    pub async fn put(&self, bucket: &str, key: &str, value: Bytes) -> StoreResult<u64> {
        match self {
            Store::File(s) => s.put(bucket, key, value, Cas::Any).await,
            Store::Nats(s) => s.put(bucket, key, value, Cas::Any).await,
        }
    }
    /// Writes only if the key does not exist.
    pub async fn create(&self, bucket: &str, key: &str, value: Bytes) -> StoreResult<u64> {
        match self {
            Store::File(s) => s.put(bucket, key, value, Cas::Absent).await,
            Store::Nats(s) => s.put(bucket, key, value, Cas::Absent).await,
        }
    }
    /// Compare-and-swap: writes only if the key is at `revision`.
    pub async fn update(
        &self,
        bucket: &str,
        key: &str,
        value: Bytes,
        revision: u64,
    ) -> StoreResult<u64> {
        match self {
            Store::File(s) => s.put(bucket, key, value, Cas::Revision(revision)).await,
            Store::Nats(s) => s.put(bucket, key, value, Cas::Revision(revision)).await,
        }
    }
    pub async fn delete(&self, bucket: &str, key: &str) -> StoreResult<()> {
        match self {
            Store::File(s) => s.delete(bucket, key).await,
            Store::Nats(s) => s.delete(bucket, key).await,
        }
    }
    /// Live keys, sorted.
    pub async fn keys(&self, bucket: &str) -> StoreResult<Vec<String>> {
        match self {
            Store::File(s) => s.keys(bucket).await,
            Store::Nats(s) => s.keys(bucket).await,
        }
    }
    /// Writes several keys at once (one blocking call on files, concurrent
    /// puts on NATS); returns the new revisions in order.
    pub async fn put_many(
        &self,
        bucket: &str,
        items: Vec<(String, Bytes)>,
    ) -> StoreResult<Vec<u64>> {
        match self {
            Store::File(s) => s.put_many(bucket, items).await,
            Store::Nats(s) => s.put_many(bucket, items).await,
        }
    }
    /// Writes several keys as [`Self::put_many`] does and returns before
    /// they are known to be on disk: [`Staged::durable`] says when they
    /// are. Writes made after this one are ordered after it; a failed sync
    /// is written again by the store before its next, so asking again is
    /// the retry. (NATS answers once the writes are stored.)
    pub async fn put_many_staged(
        &self,
        bucket: &str,
        items: Vec<(String, Bytes)>,
    ) -> StoreResult<(Vec<u64>, Staged)> {
        match self {
            Store::File(s) => s.put_many_staged(bucket, items).await,
            Store::Nats(s) => Ok((s.put_many(bucket, items).await?, Staged::durable_already())),
        }
    }
    /// Appends several records in order; returns the last sequence.
    pub async fn append_many(&self, log: &str, records: Vec<Bytes>) -> StoreResult<u64> {
        match self {
            Store::File(s) => s.append_many(log, records).await,
            Store::Nats(s) => s.append_many(log, records).await,
        }
    }
    /// Appends as [`Self::append_many`] does and returns before the records
    /// are known to be on disk: [`Staged::durable`] says when they are (as
    /// [`Self::put_many_staged`]; NATS answers once they are stored).
    pub async fn append_many_staged(
        &self,
        log: &str,
        records: Vec<Bytes>,
    ) -> StoreResult<(u64, Staged)> {
        match self {
            Store::File(s) => s.append_many_staged(log, records).await,
            Store::Nats(s) => Ok((
                s.append_many(log, records).await?,
                Staged::durable_already(),
            )),
        }
    }
    /// Appends to a log; returns the record's sequence (from 1).
    pub async fn append(&self, log: &str, record: Bytes) -> StoreResult<u64> {
        match self {
            Store::File(s) => s.append(log, record).await,
            Store::Nats(s) => s.append(log, record).await,
        }
    }
    /// Reads up to `max` records from sequence `from` on.
    pub async fn read(&self, log: &str, from: u64, max: usize) -> StoreResult<Vec<(u64, Bytes)>> {
        match self {
            Store::File(s) => s.read(log, from, max).await,
            Store::Nats(s) => s.read(log, from, max).await,
        }
    }
}

/// The condition of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cas {
    Any,
    Absent,
    Revision(u64),
}

/// Checks a store key: non-empty, letters, digits, `-`, `_`, `=`, `.` inside.
pub fn validate_key(key: &str) -> StoreResult<()> {
    let bad = |reason: &str| {
        Err(StoreError::InvalidKey {
            key: key.to_string(),
            reason: reason.to_string(),
        })
    };
    if key.is_empty() {
        return bad("empty");
    }
    if key.starts_with('.') || key.ends_with('.') {
        return bad("starts or ends with '.'");
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '=' | '.'))
    {
        return bad("use letters, digits, '-', '_', '=' and '.'");
    }
    Ok(())
}
