//! The console's listener and its connection edges.
//!
//! A connection is one of two kinds. Until its first request head has been
//! read it is *waiting*; a waiting connection that has not sent a whole
//! request head within `console.header_timeout_ms` is closed. Only once a
//! request is parsed does the connection count against
//! `console.max_connections`. Waiting connections are bounded too (as many
//! as `max_connections`, and `console.max_per_client` connections of any
//! kind from one address), but a new connection beyond either bound pushes
//! out the oldest *waiting* one (of its own address for the per-client
//! bound) instead of being refused: idle sockets, however many, cannot keep
//! out a browser that sends its request at once. The same header timeout
//! closes a kept-alive connection that sends no next request, and
//! `console.idle_timeout_ms` closes one on which nothing moved either way
//! (a client that stopped reading its response).
//!
//! A connection that finds nothing to push out (every one of its address's
//! connections is serving a request) is answered `503` with `Retry-After`:
//! one write into an empty socket buffer and closed, nothing held for it.
//! An accept that fails (out of descriptors) backs off, doubling from 10 ms
//! to 1 s, and is logged at 1, 2, 4… failures in a row, not once each.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tracing::{error, warn};
use xo_runtime::tree::Shutdown;

/// What a connection beyond a bound is told before it is closed.
fn busy(why: &str) -> Vec<u8> {
    let body = format!("the console is at {why}; try again soon\n");
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Counters the metrics page shows.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections answered 503 for a bound.
    pub refused: AtomicU64,
    /// Accepts that failed (out of descriptors, …).
    pub accept_errors: AtomicU64,
    /// Connections closed by the header or the idle timeout.
    pub timed_out: AtomicU64,
    /// Waiting connections closed to make room for a new one.
    pub evicted: AtomicU64,
    /// Connections with a parsed request, open now.
    pub open: AtomicU64,
}

/// A connection's place among those with a parsed request.
struct ActiveSlot {
    _permit: OwnedSemaphorePermit,
    counts: Arc<Counts>,
}

impl Drop for ActiveSlot {
    fn drop(&mut self) {
        self.counts.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The listener's bounds, from `[console]`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections with a parsed request, at once.
    pub max: usize,
    /// Connections from one address, of any kind.
    pub per_client: usize,
    /// A whole request head must arrive within this (also between the
    /// requests of a kept-alive connection).
    pub header_timeout: Duration,
    /// Nothing read or written for this long closes the connection.
    pub idle_timeout: Duration,
}

impl Limits {
    /// Connections waiting for their first request, at once.
    pub fn waiting(&self) -> usize {
        self.max
    }
}

/// Open connections by client address.
#[derive(Debug, Default)]
struct Clients(Mutex<HashMap<IpAddr, usize>>);

impl Clients {
    fn enter(self: &Arc<Self>, ip: IpAddr, bound: usize) -> Option<ClientSlot> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_default();
        if *n >= bound {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

/// One connection's place in its client's count, given back on drop.
struct ClientSlot {
    clients: Arc<Clients>,
    ip: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut m = self.clients.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// The connections waiting for their first request, oldest first (by
/// id), each with its client and the signal that closes it.
#[derive(Debug, Default)]
struct WaitList(Mutex<BTreeMap<u64, (IpAddr, Arc<Notify>)>>);

impl WaitList {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (IpAddr, Arc<Notify>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the oldest waiting connection (of `ip` only, if given);
    /// whether there was one.
    fn evict_oldest(&self, ip: Option<IpAddr>) -> bool {
        let mut m = self.lock();
        let Some(id) = m
            .iter()
            .find(|(_, (from, _))| ip.is_none_or(|ip| *from == ip))
            .map(|(id, _)| *id)
        else {
            return false;
        };
        if let Some((_, close)) = m.remove(&id) {
            close.notify_one();
        }
        true
    }
}

/// A connection's place in the wait list, left when its first request is
/// parsed or when it closes.
struct WaitSlot {
    list: Arc<WaitList>,
    id: u64,
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.list.lock().remove(&self.id);
    }
}

/// A connection's admission: waiting until its first request, then
/// active. The active slot is taken by the first request.
struct Admission {
    waiting: Mutex<Option<WaitSlot>>,
    active: Mutex<Option<ActiveSlot>>,
    /// Notified when a newer connection pushes this one out.
    evicted: Arc<Notify>,
}

impl Admission {
    /// Whether a request on this connection may be served: true once the
    /// connection holds an active slot (taken here on its first request).
    fn admit(&self, active: &Arc<Semaphore>, counts: &Arc<Counts>) -> bool {
        let mut slot = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return true;
        }
        match active.clone().try_acquire_owned() {
            Ok(p) => {
                counts.open.fetch_add(1, Ordering::Relaxed);
                *slot = Some(ActiveSlot {
                    _permit: p,
                    counts: counts.clone(),
                });
                self.waiting
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                true
            }
            Err(_) => false,
        }
    }
}

/// The console's server: accepts within the bounds and serves each
/// connection with HTTP/1.1 until `stop` resolves, then lets open
/// connections finish their response (event streams end on the same
/// stop).
pub struct Server {
    inner: TcpListener,
    limits: Limits,
    counts: Arc<Counts>,
    active: Arc<Semaphore>,
    waiting: Arc<WaitList>,
    next_id: u64,
    clients: Arc<Clients>,
    /// Failed accepts in a row.
    failing: u32,
}

impl Server {
    pub fn new(inner: TcpListener, limits: Limits, counts: Arc<Counts>) -> Self {
        Self {
            inner,
            limits,
            counts,
            active: Arc::new(Semaphore::new(limits.max)),
            waiting: Arc::default(),
            next_id: 0,
            clients: Arc::default(),
            failing: 0,
        }
    }

    /// Accepts and serves until `stop`; returns once every connection has
    /// closed.
    pub async fn serve(mut self, app: Router, stop: Shutdown) {
        let (open_tx, open_rx) = tokio::sync::watch::channel(());
        let stopped = stop.signal();
        tokio::pin!(stopped);
        loop {
            let (stream, addr) = tokio::select! {
                biased;
                _ = &mut stopped => break,
                a = self.inner.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        self.accept_failed(e).await;
                        continue;
                    }
                },
            };
            self.failing = 0;
            let Some(conn) = self.admit(stream, addr) else {
                continue;
            };
            let open = open_rx.clone();
            let app = app.clone();
            let active = self.active.clone();
            let counts = self.counts.clone();
            let limits = self.limits;
            let stopping = stop.signal();
            tokio::spawn(async move {
                serve_one(conn, app, active, counts, limits, stopping).await;
                drop(open);
            });
        }
        drop(open_rx);
        // Every connection task holds a receiver: closed once all ended.
        open_tx.closed().await;
    }

    /// The bounds at accept: a client's count and the waiting pool, each
    /// making room by pushing out the oldest waiting connection.
    fn admit(&mut self, stream: TcpStream, addr: SocketAddr) -> Option<Conn> {
        // Small SSE frames must not wait for the previous one's ACK
        // (Nagle with delayed ACKs held events back).
        let _ = stream.set_nodelay(true);
        let ip = addr.ip();
        let client = match self.clients.enter(ip, self.limits.per_client) {
            Some(c) => c,
            None if self.waiting.evict_oldest(Some(ip)) => {
                self.evicted("console.max_per_client");
                // The pushed-out connection gives its count back as it
                // closes: this one is counted over the bound meanwhile.
                self.clients.enter(ip, usize::MAX)?
            }
            None => {
                self.refuse(&stream, "console.max_per_client");
                return None;
            }
        };
        if self.waiting.lock().len() >= self.limits.waiting() && self.waiting.evict_oldest(None) {
            self.evicted("its bound of connections waiting for a request");
        }
        let evicted = Arc::new(Notify::new());
        self.next_id += 1;
        let id = self.next_id;
        self.waiting.lock().insert(id, (ip, evicted.clone()));
        Some(Conn {
            stream,
            idle: self.limits.idle_timeout,
            deadline: Box::pin(tokio::time::sleep(self.limits.idle_timeout)),
            timed_out: Arc::default(),
            counts: self.counts.clone(),
            admission: Arc::new(Admission {
                waiting: Mutex::new(Some(WaitSlot {
                    list: self.waiting.clone(),
                    id,
                })),
                active: Mutex::new(None),
                evicted,
            }),
            _client: client,
        })
    }

    fn evicted(&self, bound: &str) {
        let n = self.counts.evicted.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            warn!(
                bound,
                pushed_out = n,
                "console connection that sent no request pushed out for a newer one (logged at 1, 2, 4…)"
            );
        }
    }

    fn refuse(&self, stream: &TcpStream, why: &str) {
        // One write into an empty socket buffer, then the descriptor is
        // closed: nothing waits on it.
        let _ = stream.try_write(&busy(why));
        let n = self.counts.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            warn!(
                bound = why,
                refused = n,
                "console connection refused at a bound (logged at 1, 2, 4…)"
            );
        }
    }

    async fn accept_failed(&mut self, e: io::Error) {
        self.failing = self.failing.saturating_add(1);
        self.counts.accept_errors.fetch_add(1, Ordering::Relaxed);
        if self.failing.is_power_of_two() {
            error!(error = %e, in_a_row = self.failing, "console accept failed; backing off (logged at 1, 2, 4… in a row)");
        }
        tokio::time::sleep(xo_bus::socket::accept_backoff(self.failing)).await;
    }

    /// Connections with a parsed request, open now.
    pub fn open(&self) -> usize {
        self.limits.max - self.active.available_permits()
    }
}

/// The answer to a request on a connection beyond `max_connections`.
fn at_max() -> Response<Body> {
    let mut r = Response::new(Body::from(
        "the console is at console.max_connections; try again soon\n",
    ));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = r.headers_mut();
    h.insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    h.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    r
}

async fn serve_one(
    conn: Conn,
    app: Router,
    active: Arc<Semaphore>,
    counts: Arc<Counts>,
    limits: Limits,
    stopping: impl Future<Output = ()>,
) {
    let admission = conn.admission.clone();
    let conn_evicted = conn.admission.evicted.clone();
    let idle = conn.timed_out.clone();
    let refused = counts.clone();
    let tower = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let ok = admission.admit(&active, &refused);
        let call = ok.then(|| hyper::service::Service::call(&tower, req));
        if !ok {
            refused.refused.fetch_add(1, Ordering::Relaxed);
        }
        async move {
            match call {
                Some(f) => f.await,
                None => Ok(at_max()),
            }
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let io = TokioIo::new(conn);
    let served = http.serve_connection(io, service);
    tokio::pin!(served);
    tokio::pin!(stopping);
    let mut stopped = false;
    let evicted = conn_evicted.notified();
    tokio::pin!(evicted);
    let res = loop {
        tokio::select! {
            r = served.as_mut() => break r,
            _ = &mut stopping, if !stopped => {
                stopped = true;
                served.as_mut().graceful_shutdown();
            }
            // Pushed out while still waiting for its first request: closed.
            _ = &mut evicted => return,
        }
    };
    if let Err(e) = res {
        // The idle timeout counts itself (its error reaches hyper as an
        // I/O error); the header timeout is hyper's.
        if e.is_timeout() && !idle.load(Ordering::Relaxed) {
            counts.timed_out.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(error = %e, "console connection ended");
    }
}

/// An admitted connection: its client's and its pool's slots are given
/// back when it closes.
pub struct Conn {
    stream: TcpStream,
    idle: Duration,
    /// When the connection counts as idle: pushed on by every byte moved.
    deadline: Pin<Box<Sleep>>,
    /// Set when the idle timeout closed it.
    timed_out: Arc<AtomicBool>,
    counts: Arc<Counts>,
    admission: Arc<Admission>,
    _client: ClientSlot,
}

impl Conn {
    fn moved(&mut self) {
        let next = Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    /// Pending I/O past the idle deadline is an error: the connection is
    /// closed.
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.deadline.as_mut().poll(cx).is_ready() {
            if !self.timed_out.swap(true, Ordering::Relaxed) {
                self.counts.timed_out.fetch_add(1, Ordering::Relaxed);
            }
            return true;
        }
        false
    }
}

impl Conn {
    /// A write's result: bytes written push the idle deadline on; a write
    /// still pending past it is an error.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.moved();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending if self.idle_expired(cx) => Poll::Ready(Err(idle_error())),
            other => other,
        }
    }
}

fn idle_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "nothing moved on the connection for console.idle_timeout_ms",
    )
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.moved();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if self.idle_expired(cx) => Poll::Ready(Err(idle_error())),
            other => other,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(cx, r)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_second() {
        use xo_bus::socket::accept_backoff as backoff;
        assert_eq!(backoff(1), Duration::from_millis(10));
        assert_eq!(backoff(2), Duration::from_millis(20));
        assert_eq!(backoff(7), Duration::from_millis(640));
        assert_eq!(backoff(8), Duration::from_millis(1000));
        assert_eq!(backoff(u32::MAX), Duration::from_millis(1000));
    }

    #[test]
    fn the_busy_answer_says_its_length() {
        let bytes = busy("console.max_per_client");
        let text = std::str::from_utf8(&bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{text}"
        );
        assert!(body.contains("console.max_per_client"), "{text}");
    }

    /// A connection on which nothing moves is closed after the idle
    /// timeout, and counted; one byte read pushes the deadline on.
    #[tokio::test]
    async fn nothing_moving_for_the_idle_timeout_closes_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            max: 4,
            per_client: 4,
            header_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_millis(200),
        };
        let counts = Arc::new(Counts::default());
        let mut server = Server::new(listener, limits, counts.clone());
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (stream, from) = server.inner.accept().await.unwrap();
        let mut conn = server.admit(stream, from).unwrap();
        client.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(conn.read(&mut buf).await.unwrap(), 1);
        let e = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains("console.idle_timeout_ms"), "{e}");
        assert_eq!(counts.timed_out.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_client_count_is_given_back() {
        let c = Arc::new(Clients::default());
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let a = c.enter(ip, 2).unwrap();
        let _b = c.enter(ip, 2).unwrap();
        assert!(c.enter(ip, 2).is_none(), "a third over a bound of 2");
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(
            c.enter(other, 2).is_some(),
            "another client is counted apart"
        );
        drop(a);
        assert!(c.enter(ip, 2).is_some(), "the slot came back");
    }
}
