//! The local socket transport: a running `xo up` serves its in-process bus
//! on a Unix socket under `./.xo/`, so the operator's `xo` commands reach it
//! with no server. Frames are `[len: u32 LE][msgpack Frame]`.
//!
//! Who may use it: a peer of this user (checked by its uid) that opens with
//! the token `xo up` wrote beside the socket (`bus.token`, 0600, new at
//! every start). An agent the runner confined runs as the same user, and
//! on kernels before Landlock's UNIX-socket rules it can still connect; it
//! cannot read the token (its reads stop at its project), so it cannot
//! halt the queue or read other tasks' leases through the socket.
//!
//! A client that reads slower than its subscriptions fill holds at most
//! [`CLIENT_BACKLOG`] frames in the server; past that, messages for it are
//! dropped and counted ([`dropped`], `xo_socket_dropped_total` on the
//! console's `/metrics`), the way NATS treats a slow consumer, instead of
//! queuing without bound in `xo up`'s memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use crate::local::{ChannelSub, NO_RESPONDERS, STATUS_HEADER, SubGuard};
use crate::{BusError, BusResult, Headers, LocalBus, Message, Subscription};

/// Largest frame either side accepts (16 MiB).
const MAX_FRAME: usize = 16 * 1024 * 1024;

#[derive(Debug, Serialize, Deserialize)]
enum Frame {
    /// A client's first frame: the token of `bus.token`.
    Hello {
        token: String,
    },
    Pub {
        subject: String,
        reply: Option<String>,
        headers: Vec<(String, String)>,
        payload: serde_bytes::ByteBuf,
    },
    Sub {
        sid: u64,
        pattern: String,
    },
    Unsub {
        sid: u64,
    },
    Msg {
        sid: u64,
        subject: String,
        reply: Option<String>,
        headers: Vec<(String, String)>,
        payload: serde_bytes::ByteBuf,
    },
    Ping {
        id: u64,
    },
    Pong {
        id: u64,
    },
}

async fn write_frame(w: &mut (impl AsyncWriteExt + Unpin), f: &Frame) -> std::io::Result<()> {
    let body = rmp_serde::to_vec(f).map_err(std::io::Error::other)?;
    w.write_all(&(body.len() as u32).to_le_bytes()).await?;
    w.write_all(&body).await
}

async fn read_frame(r: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Option<Frame>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes exceeds {MAX_FRAME}"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    rmp_serde::from_slice(&body)
        .map(Some)
        .map_err(|e| std::io::Error::other(format!("undecodable frame: {e}")))
}

/// Where the token of the socket at `socket` is: `bus.token` beside
/// `bus.sock`.
pub fn token_path(socket: &Path) -> PathBuf {
    socket.with_extension("token")
}

/// Writes the token, readable by this user only (a file left by an
/// earlier run is replaced, not written through: it may be a link).
fn write_token(path: &Path, token: &str) -> std::io::Result<()> {
    crate::files::replace(path, token.as_bytes(), crate::files::Mode::Private)
}

/// The token a client sends (at most 1 KiB of the file, trimmed).
fn read_token(socket: &Path) -> BusResult<String> {
    use std::io::Read;
    let path = token_path(socket);
    let err = |source| BusError::Token {
        path: path.display().to_string(),
        source,
    };
    let mut s = String::new();
    std::fs::File::open(&path)
        .map_err(err)?
        .take(1024)
        .read_to_string(&mut s)
        .map_err(err)?;
    Ok(s.trim().to_string())
}

/// How long an accept loop waits after `failing` failed accepts in a row:
/// 10 ms doubling to 1 s (a process out of file descriptors gets them back
/// as connections close; retrying at once only burns a core and the log).
pub fn accept_backoff(failing: u32) -> std::time::Duration {
    std::time::Duration::from_millis((10u64 << failing.saturating_sub(1).min(7)).min(1000))
}

/// Serves `bus` on the socket at `path` until `shutdown` resolves. A stale
/// socket file left by a dead process is replaced; a live one is an error.
pub async fn serve(
    bus: LocalBus,
    path: &Path,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> BusResult<tokio::task::JoinHandle<()>> {
    let sock_err = |source| BusError::Socket {
        path: path.display().to_string(),
        source,
    };
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            return Err(sock_err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "another xo is already serving this socket",
            )));
        }
        std::fs::remove_file(path).map_err(sock_err)?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(sock_err)?;
    }
    let token = xo_proto::secret::random_hex(32).map_err(sock_err)?;
    let token_file = token_path(path);
    write_token(&token_file, &token).map_err(|source| BusError::Token {
        path: token_file.display().to_string(),
        source,
    })?;
    let listener = UnixListener::bind(path).map_err(sock_err)?;
    // Only this user may connect: the file is 0600, and each peer's uid is
    // checked against ours (a directory with looser rights does not open it).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(sock_err)?;
    }
    let me = own_uid(path);
    let path = path.to_path_buf();
    let token: Arc<str> = token.into();
    Ok(tokio::spawn(async move {
        tokio::pin!(shutdown);
        // Failed accepts in a row (out of descriptors: each retry at once
        // once logged 7 million lines in 16 s), refused peers so far.
        let mut failing = 0u32;
        let mut refused = 0u64;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        failing = 0;
                        let peer = stream.peer_cred().map(|c| c.uid());
                        let why = match (peer, me) {
                            (Ok(uid), Some(me)) if uid != me => Some(format!("from user {uid}")),
                            (Err(e), _) => Some(format!("whose user cannot be read: {e}")),
                            _ => None,
                        };
                        if let Some(why) = why {
                            refused += 1;
                            if refused.is_power_of_two() {
                                tracing::warn!(refused, "a connection {why} was refused (logged at 1, 2, 4…)");
                            }
                            continue;
                        }
                        tokio::spawn(serve_conn(bus.clone(), stream, token.clone()));
                    }
                    Err(e) => {
                        failing = failing.saturating_add(1);
                        if failing.is_power_of_two() {
                            tracing::error!(error = %e, in_a_row = failing, "socket accept failed; backing off (logged at 1, 2, 4… in a row)");
                        }
                        tokio::select! {
                            _ = &mut shutdown => break,
                            _ = tokio::time::sleep(accept_backoff(failing)) => {}
                        }
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&token_file);
    }))
}

/// The uid that owns the socket just bound: this process's user.
fn own_uid(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.uid())
}

/// Peers refused for a wrong or missing token, for the log's 1, 2, 4….
static NO_TOKEN: AtomicU64 = AtomicU64::new(0);

/// Frames a socket client may have waiting in the server before messages
/// for it are dropped (NATS's default for a subscription is the same).
pub const CLIENT_BACKLOG: usize = 65_536;

/// Messages dropped in this process for socket clients that read too slowly.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Messages this process's socket server dropped for slow clients.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Counts a message dropped for a slow client (logged at 1, 2, 4…).
fn drop_for_slow_client(subject: &str) {
    let n = DROPPED.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            dropped = n,
            subject,
            backlog = CLIENT_BACKLOG,
            "a socket client reads too slowly: messages for it dropped (counted: xo_socket_dropped_total; logged at 1, 2, 4…)"
        );
    }
}

async fn serve_conn(bus: LocalBus, stream: UnixStream, token: Arc<str>) {
    let (mut r, mut w) = stream.into_split();
    // The first frame is the token, or the connection is closed.
    let admitted = matches!(
        read_frame(&mut r).await,
        Ok(Some(Frame::Hello { token: t })) if xo_proto::secret::same(&t, &token)
    );
    if !admitted {
        let n = NO_TOKEN.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                refused = n,
                "a socket peer without the bus token was refused (logged at 1, 2, 4…)"
            );
        }
        return;
    }
    let (tx, mut rx) = mpsc::channel::<Frame>(CLIENT_BACKLOG);
    let writer = tokio::spawn(async move {
        while let Some(f) = rx.recv().await {
            if write_frame(&mut w, &f).await.is_err() {
                break;
            }
        }
    });
    let mut forwarders: HashMap<u64, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let frame = match read_frame(&mut r).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e, "socket client sent a bad frame; closing it");
                break;
            }
        };
        match frame {
            Frame::Pub {
                subject,
                reply,
                headers,
                payload,
            } => {
                if crate::subject_match::validate_subject(&subject).is_err() {
                    continue;
                }
                let n = bus.publish_with_reply(
                    &subject,
                    reply.as_deref(),
                    Headers::from_pairs(headers),
                    Bytes::from(payload.into_vec()),
                );
                if n == 0
                    && let Some(reply) = reply
                {
                    let mut h = Headers::new();
                    h.insert(STATUS_HEADER, NO_RESPONDERS);
                    bus.publish_with_reply(&reply, None, h, Bytes::new());
                }
            }
            Frame::Sub { sid, pattern } => {
                if crate::subject_match::validate_pattern(&pattern).is_err() {
                    continue;
                }
                let mut sub = bus.subscribe(&pattern);
                let tx = tx.clone();
                forwarders.insert(
                    sid,
                    tokio::spawn(async move {
                        while let Some(m) = sub.next().await {
                            let f = Frame::Msg {
                                sid,
                                subject: m.subject,
                                reply: m.reply,
                                headers: m.headers.into_pairs(),
                                payload: serde_bytes::ByteBuf::from(m.payload.to_vec()),
                            };
                            match tx.try_send(f) {
                                Ok(()) => {}
                                Err(mpsc::error::TrySendError::Full(Frame::Msg {
                                    subject,
                                    ..
                                })) => drop_for_slow_client(&subject),
                                Err(mpsc::error::TrySendError::Full(_)) => drop_for_slow_client(""),
                                Err(mpsc::error::TrySendError::Closed(_)) => break,
                            }
                        }
                    }),
                );
            }
            Frame::Unsub { sid } => {
                if let Some(h) = forwarders.remove(&sid) {
                    h.abort();
                }
            }
            Frame::Ping { id } => {
                // Waits for room: a pong is never dropped.
                let _ = tx.send(Frame::Pong { id }).await;
            }
            Frame::Msg { .. } | Frame::Pong { .. } | Frame::Hello { .. } => {}
        }
    }
    for (_, h) in forwarders {
        h.abort();
    }
    drop(tx);
    let _ = writer.await;
}

struct ClientInner {
    path: PathBuf,
    /// The token sent first on every connection (read again on reconnect:
    /// a restarted `xo up` writes a new one).
    token: Mutex<String>,
    /// The current connection's writer; replaced on every reconnect.
    tx: Mutex<mpsc::UnboundedSender<Frame>>,
    /// Subscriptions by sid, with their pattern (sent again on reconnect).
    subs: Mutex<HashMap<u64, (String, mpsc::UnboundedSender<Message>)>>,
    pongs: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    next: AtomicU64,
}

/// A client of a socket served by `xo up`. When `xo up` goes away the
/// client reconnects (backing off from 100 ms to 2 s) and subscribes again,
/// so a runner attached to it goes on once `xo up` is back; calls made
/// while it is away fail with [`BusError::Closed`] and are retried by
/// their callers. Messages published while it is away are not received.
#[derive(Clone)]
pub struct SocketBus {
    inner: Arc<ClientInner>,
}

impl std::fmt::Debug for SocketBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketBus")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// The user this process runs as.
fn my_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// The process at the other end of `stream` must run as this user: a
/// socket another user put in place of `xo up`'s would otherwise receive
/// every request (and answer them as it likes).
fn check_server(path: &Path, stream: &UnixStream) -> BusResult<()> {
    let peer = stream.peer_cred().map_err(|e| socket_err(path, e))?.uid();
    match my_uid() {
        Some(me) if me != peer => Err(BusError::NotOurs {
            path: path.display().to_string(),
            owner: peer,
            me,
        }),
        _ => Ok(()),
    }
}

fn socket_err(path: &Path, e: std::io::Error) -> BusError {
    BusError::Socket {
        path: path.display().to_string(),
        source: e,
    }
}

/// Starts the writer and the reader of one connection; when the reader
/// ends (the server went away), reconnecting starts.
fn attach(inner: &Arc<ClientInner>, stream: UnixStream) {
    let (mut r, mut w) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Frame>();
    let token = inner.token.lock().map(|t| t.clone()).unwrap_or_default();
    let _ = tx.send(Frame::Hello { token });
    if let Ok(mut cur) = inner.tx.lock() {
        *cur = tx;
    }
    tokio::spawn(async move {
        while let Some(f) = rx.recv().await {
            if write_frame(&mut w, &f).await.is_err() {
                break;
            }
        }
    });
    let weak = Arc::downgrade(inner);
    tokio::spawn(async move {
        while let Ok(Some(f)) = read_frame(&mut r).await {
            let Some(inner) = weak.upgrade() else { return };
            match f {
                Frame::Msg {
                    sid,
                    subject,
                    reply,
                    headers,
                    payload,
                } => {
                    let tx = inner
                        .subs
                        .lock()
                        .ok()
                        .and_then(|s| s.get(&sid).map(|(_, tx)| tx.clone()));
                    if let Some(tx) = tx {
                        let _ = tx.send(Message {
                            subject,
                            reply,
                            headers: Headers::from_pairs(headers),
                            payload: Bytes::from(payload.into_vec()),
                        });
                    }
                }
                Frame::Pong { id } => {
                    if let Some(tx) = inner.pongs.lock().ok().and_then(|mut p| p.remove(&id)) {
                        let _ = tx.send(());
                    }
                }
                _ => {}
            }
        }
        reconnect(weak).await;
    });
}

/// Connects again until it works (or nobody holds the client any more),
/// then subscribes every live subscription again.
async fn reconnect(weak: std::sync::Weak<ClientInner>) {
    let mut wait = Duration::from_millis(100);
    let mut tries = 0u32;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if let Ok(mut p) = inner.pongs.lock() {
            p.clear();
        }
        match UnixStream::connect(&inner.path).await {
            Ok(stream) if check_server(&inner.path, &stream).is_err() => {
                if tries.is_multiple_of(20) {
                    tracing::warn!(path = %inner.path.display(), "the socket is now another user's; not reconnecting to it");
                }
                tries += 1;
            }
            Ok(stream) => {
                match read_token(&inner.path) {
                    Ok(t) => {
                        if let Ok(mut cur) = inner.token.lock() {
                            *cur = t;
                        }
                    }
                    Err(e) => {
                        if tries.is_multiple_of(20) {
                            tracing::warn!(error = %e, "cannot reconnect to xo up");
                        }
                        tries += 1;
                        drop(inner);
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(Duration::from_secs(2));
                        continue;
                    }
                }
                attach(&inner, stream);
                let subs: Vec<(u64, String)> = inner
                    .subs
                    .lock()
                    .map(|s| s.iter().map(|(sid, (p, _))| (*sid, p.clone())).collect())
                    .unwrap_or_default();
                let tx = inner.tx.lock().ok().map(|t| t.clone());
                for (sid, pattern) in subs {
                    if let Some(tx) = &tx {
                        let _ = tx.send(Frame::Sub { sid, pattern });
                    }
                }
                tracing::info!(path = %inner.path.display(), tries, "reconnected to xo up");
                return;
            }
            Err(e) => {
                if tries.is_multiple_of(20) {
                    tracing::warn!(path = %inner.path.display(), error = %e, "xo up is gone; reconnecting");
                }
                tries += 1;
            }
        }
        drop(inner);
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(2));
    }
}

impl SocketBus {
    pub async fn connect(path: &Path) -> BusResult<Self> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| socket_err(path, e))?;
        check_server(path, &stream)?;
        let token = read_token(path)?;
        let (tx, _) = mpsc::unbounded_channel::<Frame>();
        let inner = Arc::new(ClientInner {
            path: path.to_path_buf(),
            token: Mutex::new(token),
            tx: Mutex::new(tx),
            subs: Mutex::default(),
            pongs: Mutex::default(),
            next: AtomicU64::new(1),
        });
        attach(&inner, stream);
        Ok(Self { inner })
    }

    fn send(&self, f: Frame) -> BusResult<()> {
        let tx = self.inner.tx.lock().map_err(|_| BusError::Closed)?.clone();
        tx.send(f).map_err(|_| BusError::Closed)
    }

    pub async fn publish_with_reply(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Headers,
        payload: Bytes,
    ) -> BusResult<()> {
        self.send(Frame::Pub {
            subject: subject.to_string(),
            reply: reply.map(str::to_string),
            headers: headers.into_pairs(),
            payload: serde_bytes::ByteBuf::from(payload.to_vec()),
        })
    }

    pub async fn subscribe(&self, pattern: &str) -> BusResult<Subscription> {
        let sid = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut subs) = self.inner.subs.lock() {
            subs.insert(sid, (pattern.to_string(), tx));
        }
        if let Err(e) = self.send(Frame::Sub {
            sid,
            pattern: pattern.to_string(),
        }) {
            if let Ok(mut subs) = self.inner.subs.lock() {
                subs.remove(&sid);
            }
            return Err(e);
        }
        // Make sure the server registered it before we return.
        self.flush().await?;
        let weak = Arc::downgrade(&self.inner);
        let guard = SubGuard::new(move || {
            if let Some(inner) = weak.upgrade() {
                if let Ok(mut subs) = inner.subs.lock() {
                    subs.remove(&sid);
                }
                if let Ok(tx) = inner.tx.lock() {
                    let _ = tx.send(Frame::Unsub { sid });
                }
            }
        });
        Ok(Subscription::Channel(ChannelSub::new(rx, Some(guard))))
    }

    pub async fn request(
        &self,
        subject: &str,
        headers: Headers,
        payload: Bytes,
        timeout: Duration,
    ) -> BusResult<Message> {
        let inbox = format!(
            "_INBOX.sock.{}.{}",
            std::process::id(),
            self.inner.next.fetch_add(1, Ordering::Relaxed)
        );
        let mut sub = self.subscribe(&inbox).await?;
        self.publish_with_reply(subject, Some(&inbox), headers, payload)
            .await?;
        crate::await_reply(&mut sub, subject, timeout).await
    }

    /// A round trip to the server: everything sent before has been handled.
    pub async fn flush(&self) -> BusResult<()> {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.inner.pongs.lock() {
            p.insert(id, tx);
        }
        self.send(Frame::Ping { id })?;
        match tokio::time::timeout(Duration::from_secs(5), rx).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(BusError::Closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw peer that sends `first` and then a publication on `xo.t`.
    async fn raw_peer(path: &Path, first: Option<Frame>) {
        let mut s = UnixStream::connect(path).await.unwrap();
        if let Some(f) = first {
            write_frame(&mut s, &f).await.unwrap();
        }
        let _ = write_frame(
            &mut s,
            &Frame::Pub {
                subject: "xo.t".into(),
                reply: None,
                headers: Vec::new(),
                payload: serde_bytes::ByteBuf::from(b"from a peer".to_vec()),
            },
        )
        .await;
        // The server closes a refused peer: the read ends.
        let mut buf = [0u8; 1];
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    }

    /// Issue 40, item 2: a confined agent runs as the operator's user and
    /// (before Landlock's UNIX-socket rules) can connect; without the token
    /// beside the socket it can publish nothing (no `xo halt`, no claim).
    #[tokio::test]
    async fn a_peer_without_the_token_publishes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bus.sock");
        let bus = LocalBus::new();
        let (tx, rx) = oneshot::channel::<()>();
        let server = serve(bus.clone(), &path, async move {
            let _ = rx.await;
        })
        .await
        .unwrap();
        let token_file = token_path(&path);
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "bus.token {mode:o}");
        }
        let mut sub = bus.subscribe("xo.t");
        raw_peer(&path, None).await;
        raw_peer(
            &path,
            Some(Frame::Hello {
                token: "0".repeat(64),
            }),
        )
        .await;
        raw_peer(&path, Some(Frame::Ping { id: 1 })).await;
        // The operator's client, which reads the token, is heard.
        let client = SocketBus::connect(&path).await.unwrap();
        client
            .publish_with_reply(
                "xo.t",
                None,
                Headers::new(),
                Bytes::from_static(b"operator"),
            )
            .await
            .unwrap();
        let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .expect("the operator's message arrives")
            .unwrap();
        assert_eq!(
            &m.payload[..],
            b"operator",
            "a refused peer's message got through"
        );
        // Without the token file, the client says why.
        std::fs::remove_file(&token_file).unwrap();
        let e = SocketBus::connect(&path).await.unwrap_err().to_string();
        assert!(e.contains("bus token") && e.contains("xo up"), "{e}");
        let _ = tx.send(());
        server.await.unwrap();
    }

    /// Issue 43, item 3: a client that does not read holds at most
    /// `CLIENT_BACKLOG` frames in the server; the rest are dropped and
    /// counted, and what it reads later plus what was dropped is every
    /// message published (nothing lost unseen).
    #[tokio::test]
    async fn a_client_that_does_not_read_is_bounded_and_its_drops_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bus.sock");
        let bus = LocalBus::new();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = serve(bus.clone(), &path, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
        let token = std::fs::read_to_string(token_path(&path)).unwrap();
        let mut s = UnixStream::connect(&path).await.unwrap();
        write_frame(&mut s, &Frame::Hello { token }).await.unwrap();
        write_frame(
            &mut s,
            &Frame::Sub {
                sid: 1,
                pattern: "xo.flood".into(),
            },
        )
        .await
        .unwrap();
        // The subscription is in place once the ping after it is answered.
        write_frame(&mut s, &Frame::Ping { id: 7 }).await.unwrap();
        loop {
            match read_frame(&mut s).await.unwrap() {
                Some(Frame::Pong { id: 7 }) => break,
                Some(_) => {}
                None => panic!("the server closed the connection"),
            }
        }
        let before = dropped();
        let n = CLIENT_BACKLOG as u64 + 50_000;
        for i in 0..n {
            bus.publish_with_reply(
                "xo.flood",
                None,
                Headers::new(),
                Bytes::from(i.to_le_bytes().to_vec()),
            );
        }
        // Now read: every message is either here or counted as dropped.
        let mut got = 0u64;
        let read_all = async {
            while got + (dropped() - before) < n {
                match read_frame(&mut s).await.unwrap() {
                    Some(Frame::Msg { .. }) => got += 1,
                    Some(_) => {}
                    None => break,
                }
            }
        };
        // A hang guard, not a timing assertion.
        tokio::time::timeout(Duration::from_secs(120), read_all)
            .await
            .expect("neither delivered nor counted");
        let lost = dropped() - before;
        assert!(lost > 0, "nothing was dropped: the backlog is not bounded");
        assert!(got >= CLIENT_BACKLOG as u64, "only {got} delivered");
        assert_eq!(got + lost, n);
        let _ = stop.send(());
        server.await.unwrap();
    }
}
