//! The console's listener, bounded: at most `console.max_connections`
//! connections at once. One more is answered `503` with `Retry-After` and
//! closed at once (no task, no buffer held for it), so a flood of clients
//! cannot take the file descriptors the bus socket, NATS and the services
//! need. An accept that fails (out of descriptors) backs off, doubling from
//! 10 ms to 1 s, and is logged at 1, 2, 4… failures in a row, not once each.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{error, warn};

/// What a connection beyond the bound is told before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 58\r\nConnection: close\r\n\r\nthe console is at console.max_connections; try again soon\n";

/// Counters the metrics page shows.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections answered 503 for the bound.
    pub refused: AtomicU64,
    /// Accepts that failed (out of descriptors, …).
    pub accept_errors: AtomicU64,
}

pub struct Bounded {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    max: usize,
    counts: Arc<Counts>,
    /// Failed accepts in a row.
    failing: u32,
}

impl Bounded {
    pub fn new(inner: TcpListener, max: usize, counts: Arc<Counts>) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(max)),
            max,
            counts,
            failing: 0,
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max - self.permits.available_permits()
    }
}

/// A connection within the bound: its slot is given back when it closes.
pub struct Conn {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl axum::serve::Listener for Bounded {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    self.failing = 0;
                    // Small SSE frames must not wait for the previous
                    // one's ACK (Nagle with delayed ACKs held events back).
                    let _ = stream.set_nodelay(true);
                    match self.permits.clone().try_acquire_owned() {
                        Ok(slot) => {
                            return (
                                Conn {
                                    stream,
                                    _slot: slot,
                                },
                                addr,
                            );
                        }
                        Err(_) => {
                            // One write into an empty socket buffer, then
                            // the descriptor is closed: nothing waits on it.
                            let _ = stream.try_write(BUSY);
                            let n = self.counts.refused.fetch_add(1, Ordering::Relaxed) + 1;
                            if n.is_power_of_two() {
                                warn!(
                                    max = self.max,
                                    refused = n,
                                    "console connection refused: at console.max_connections (logged at 1, 2, 4…)"
                                );
                            }
                        }
                    }
                }
                Err(e) => {
                    self.failing = self.failing.saturating_add(1);
                    self.counts.accept_errors.fetch_add(1, Ordering::Relaxed);
                    if self.failing.is_power_of_two() {
                        error!(error = %e, in_a_row = self.failing, "console accept failed; backing off (logged at 1, 2, 4… in a row)");
                    }
                    tokio::time::sleep(xo_bus::socket::accept_backoff(self.failing)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
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
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{text}"
        );
    }
}
