//! A NATS subscription read off a connection of its own, for the one input
//! that reads at fleet rate: the supervisor's report pump
//! ([`crate::input::raw_on_own_connection`]).
//!
//! The NATS client's subscriber costs each message a good part of what the
//! supervisor then spends on it: its reading task parses the message into
//! the client's types (a subject, a header map built name by name), queues
//! it on a channel to the subscription, and the input takes it off there.
//! This reads the protocol where the input runs: a message is its subject,
//! a slice of the read buffer for its payload and another for its header
//! block (read when asked, [`crate::Headers`]), and nothing crosses a task
//! between the socket and the handler.
//!
//! It speaks the subscriber's part of the client protocol (`INFO`,
//! `CONNECT`, `SUB`, `PING`/`PONG`, `MSG`, `HMSG`, `+OK`, `-ERR`) over plain
//! TCP, with the user and password or token the bus was given. A bus given
//! TLS, or a server that asks for it, is read by the NATS client instead
//! ([`crate::NatsBus::wire`] answers `None`). A lost connection is counted
//! (the bus's outages) and logged, and made again, with its subscription,
//! to the servers the bus was given or that the cluster announced, backing
//! off to a try every two seconds; what was published meanwhile is lost to
//! it, as it is to the client's subscriber (the supervisor counts each
//! unit's gap). A link that goes silent is pinged (the bus's ping interval,
//! a minute by default) and dropped after two pings go unanswered; the
//! server's pings are answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::nats::Auth;
use crate::{Headers, Message};

/// Bytes asked of the socket at a time (a few hundred reports).
const READ: usize = 128 * 1024;
/// The longest control line read (`MSG` with a subject and reply of NATS's
/// longest is far below it).
const MAX_LINE: usize = 4096;
/// A message larger than this ends the connection as a protocol error (the
/// server's own `max_payload` is at most 64 MiB).
const MAX_MESSAGE: usize = 64 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// What went wrong with a connection: it cannot be read on after it, and
/// is made again.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("a control line longer than {MAX_LINE} bytes")]
    LongLine,
    #[error("a control line that is not UTF-8")]
    LineNotUtf8,
    #[error("an operation NATS does not send: {0:?}")]
    UnknownOp(String),
    #[error("INFO that is not JSON: {0}")]
    Info(#[source] serde_json::Error),
    #[error("{op} with {n} arguments")]
    Arguments { op: &'static str, n: usize },
    #[error("{op} with a {what} that is no number: {value:?}")]
    NotANumber {
        op: &'static str,
        what: &'static str,
        value: String,
    },
    #[error("{op} of {total} bytes with a header of {hdr} (at most {MAX_MESSAGE})")]
    Size {
        op: &'static str,
        total: usize,
        hdr: usize,
    },
    #[error("{op} on {subject}: its {total} bytes are not followed by CRLF")]
    NoCrlf {
        op: &'static str,
        subject: String,
        total: usize,
    },
    #[error("{op} on {subject}: a header block that is not UTF-8")]
    HeaderNotUtf8 { op: &'static str, subject: String },
    #[error("the server closed the connection")]
    Closed,
    #[error("no answer to two pings {0:?} apart")]
    Silent(Duration),
    #[error("the server began with {0}, not INFO")]
    NotInfo(String),
    #[error("the server said: {0}")]
    Refused(String),
    #[error("no answer in {0:?}")]
    NoAnswer(Duration),
    /// Every server given was tried: what each answered.
    #[error("{}", tried(.0))]
    Unreachable(Vec<(String, WireError)>),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Each server tried and what it answered, in turn.
fn tried(each: &[(String, WireError)]) -> String {
    let said: Vec<String> = each
        .iter()
        .map(|(addr, e)| format!("{addr}: {e}"))
        .collect();
    said.join("; ")
}

/// What the server sent, one operation at a time.
#[derive(Debug)]
pub(crate) enum Op {
    Msg { sid: u64, msg: Message },
    Ping,
    Pong,
    Ok,
    Err(String),
    Info(serde_json::Value),
}

/// Takes one operation off the front of `buf`; `Ok(None)` while it is not
/// all there. An error names what was wrong with the stream (the
/// connection cannot be read on after it).
pub(crate) fn parse(buf: &mut BytesMut) -> Result<Option<Op>, WireError> {
    let seen = &buf[..buf.len().min(MAX_LINE + 2)];
    let Some(nl) = seen.iter().position(|b| *b == b'\n') else {
        return if buf.len() > MAX_LINE {
            Err(WireError::LongLine)
        } else {
            Ok(None)
        };
    };
    let line = std::str::from_utf8(&buf[..nl])
        .map_err(|_| WireError::LineNotUtf8)?
        .trim_end_matches('\r');
    let (op, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
    let rest = rest.trim_start();
    let is = |name: &str| op.eq_ignore_ascii_case(name);
    let simple = if is("MSG") || is("HMSG") {
        let head = Head::read(is("HMSG"), rest)?;
        return Ok(head
            .frame(buf, nl + 1)?
            .map(|(sid, msg)| Op::Msg { sid, msg }));
    } else if is("PING") {
        Op::Ping
    } else if is("PONG") {
        Op::Pong
    } else if is("+OK") {
        Op::Ok
    } else if is("-ERR") {
        Op::Err(rest.trim().trim_matches('\'').to_string())
    } else if is("INFO") {
        Op::Info(serde_json::from_str(rest).map_err(WireError::Info)?)
    } else {
        let shown: String = line.chars().take(40).collect();
        return Err(WireError::UnknownOp(shown));
    };
    buf.advance(nl + 1);
    Ok(Some(simple))
}

/// A message's control line: `MSG <subject> <sid> [reply] <size>` or
/// `HMSG <subject> <sid> [reply] <header size> <total size>`.
struct Head {
    op: &'static str,
    subject: String,
    sid: u64,
    reply: Option<String>,
    hdr: usize,
    total: usize,
}

impl Head {
    fn read(headed: bool, args: &str) -> Result<Head, WireError> {
        let op = if headed { "HMSG" } else { "MSG" };
        let mut a = [""; 5];
        let mut n = 0;
        for (i, w) in args.split_ascii_whitespace().enumerate() {
            if i < a.len() {
                a[i] = w;
            }
            n = i + 1;
        }
        let sizes = if headed { 2 } else { 1 };
        if n != 2 + sizes && n != 3 + sizes {
            return Err(WireError::Arguments { op, n });
        }
        let number = |s: &str, what: &'static str| {
            s.parse::<usize>().map_err(|_| WireError::NotANumber {
                op,
                what,
                value: s.to_string(),
            })
        };
        let sid = number(a[1], "subscription id")? as u64;
        let total = number(a[n - 1], "size")?;
        let hdr = if headed {
            number(a[n - 2], "header size")?
        } else {
            0
        };
        if hdr > total || total > MAX_MESSAGE {
            return Err(WireError::Size { op, total, hdr });
        }
        Ok(Head {
            op,
            subject: a[0].to_string(),
            sid,
            reply: (n == 3 + sizes).then(|| a[2].to_string()),
            hdr,
            total,
        })
    }

    /// Takes the message whose control line ends at `at` off `buf`, once
    /// it is all there.
    fn frame(self, buf: &mut BytesMut, at: usize) -> Result<Option<(u64, Message)>, WireError> {
        let (op, subject) = (self.op, self.subject);
        let end = at + self.total;
        if buf.len() < end + 2 {
            buf.reserve(end + 2 - buf.len());
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(WireError::NoCrlf {
                op,
                subject,
                total: self.total,
            });
        }
        // The control line and the CRLF after go; the header block and
        // the payload are cut off the buffer each once (one count of the
        // shared buffer's references taken each, none for the frame).
        buf.advance(at);
        let headers = match self.hdr {
            0 => Headers::new(),
            hdr => Headers::from_block(buf.split_to(hdr).freeze()).ok_or_else(|| {
                WireError::HeaderNotUtf8 {
                    op,
                    subject: subject.clone(),
                }
            })?,
        };
        let payload = buf.split_to(self.total - self.hdr).freeze();
        buf.advance(2);
        let msg = Message {
            subject,
            reply: self.reply,
            headers,
            payload,
        };
        Ok(Some((self.sid, msg)))
    }
}

/// How to connect and what to subscribe to.
pub(crate) struct Dial {
    /// `host:port` of each server the bus was given.
    pub servers: Vec<String>,
    pub auth: Option<Auth>,
    pub name: String,
    pub pattern: String,
    pub ping_every: Duration,
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dial")
            .field("servers", &self.servers)
            .field(
                "user",
                &match &self.auth {
                    Some(Auth::User(u, _)) => Some(u.as_str()),
                    _ => None,
                },
            )
            .field("name", &self.name)
            .field("pattern", &self.pattern)
            .finish_non_exhaustive()
    }
}

/// Why a connection could not be made.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The server asks for TLS, which this does not speak.
    Tls,
    /// Anything else.
    Broke(WireError),
}

/// A subscription on a connection of its own (see the module).
pub struct WireSub {
    dial: Dial,
    /// `host:port` the cluster announced (`connect_urls`), tried after
    /// the ones given.
    announced: Vec<String>,
    conn: Option<Conn>,
    /// Messages read while the subscription was being confirmed.
    early: std::collections::VecDeque<Message>,
    outages: Arc<AtomicU64>,
    /// Rounds of tries since the connection was lost.
    tries: u32,
}

impl std::fmt::Debug for WireSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireSub")
            .field("dial", &self.dial)
            .field("connected", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    /// Written when the socket takes it (`PONG`s, our `PING`s).
    out: BytesMut,
    /// When anything was last read (or a ping last sent).
    heard: Instant,
    unanswered: u32,
}

/// The one subscription a connection carries.
const SID: u64 = 1;

impl WireSub {
    /// Connects to the first of `dial`'s servers that answers and
    /// subscribes; the subscription is live (the server confirmed it)
    /// when this returns. Lost connections count in `outages` (a server
    /// cuts a reader too slow for it off; it sends no error first).
    pub(crate) async fn subscribe(dial: Dial, outages: Arc<AtomicU64>) -> Result<WireSub, Refused> {
        let mut sub = WireSub {
            dial,
            announced: Vec::new(),
            conn: None,
            early: Default::default(),
            outages,
            tries: 0,
        };
        let mut tried = Vec::new();
        for addr in sub.dial.servers.clone() {
            match sub.connect(&addr).await {
                Ok(()) => return Ok(sub),
                Err(Refused::Tls) => return Err(Refused::Tls),
                Err(Refused::Broke(e)) => tried.push((addr, e)),
            }
        }
        Err(Refused::Broke(WireError::Unreachable(tried)))
    }

    /// The next message; reconnects (for as long as it takes) when the
    /// connection is lost. Cancel-safe: nothing read is lost when the
    /// wait is dropped.
    pub async fn next(&mut self) -> Option<Message> {
        loop {
            if let Some(m) = self.early.pop_front() {
                return Some(m);
            }
            let Some(conn) = self.conn.as_mut() else {
                self.reconnect().await;
                continue;
            };
            let res = conn.next(self.dial.ping_every).await;
            match res {
                Ok(m) => return Some(m),
                Err(e) => self.lost(&e),
            }
        }
    }

    /// A message already read, or waiting on the socket, without waiting
    /// (and without reconnecting: [`WireSub::next`] does).
    pub fn try_next(&mut self) -> Option<Message> {
        if let Some(m) = self.early.pop_front() {
            return Some(m);
        }
        let res = self.conn.as_mut()?.try_next();
        match res {
            Ok(m) => m,
            Err(e) => {
                self.lost(&e);
                None
            }
        }
    }

    fn lost(&mut self, why: &WireError) {
        self.conn = None;
        self.outages.fetch_add(1, Ordering::Relaxed);
        warn!(connection = %self.dial.name, subject = %self.dial.pattern, error = %why,
            "lost its NATS connection: connecting again (what is published meanwhile is not read)");
    }

    /// Tries every server known until one takes the subscription, backing
    /// off between rounds.
    async fn reconnect(&mut self) {
        loop {
            if self.tries > 0 {
                let wait = Duration::from_millis(50 << self.tries.min(6)).min(BACKOFF_MAX);
                tokio::time::sleep(wait).await;
            }
            self.tries += 1;
            let mut known = self.dial.servers.clone();
            for a in &self.announced {
                if !known.contains(a) {
                    known.push(a.clone());
                }
            }
            for addr in known {
                match self.connect(&addr).await {
                    Ok(()) => {
                        info!(connection = %self.dial.name, server = %addr, tries = self.tries,
                            "connected again and subscribed");
                        self.tries = 0;
                        return;
                    }
                    // Said once in 30 rounds (about a minute at the
                    // longest wait), as any other refusal.
                    Err(Refused::Tls) if self.tries % 30 == 1 => {
                        tracing::error!(connection = %self.dial.name, server = %addr, tries = self.tries,
                            "the server now asks for TLS, which this connection does not speak: give the bus its TLS settings (nats.tls_ca_file)");
                    }
                    Err(Refused::Broke(e)) if self.tries % 30 == 1 => {
                        warn!(connection = %self.dial.name, server = %addr, tries = self.tries, error = %e,
                            "could not connect again; still trying");
                    }
                    Err(_) => {}
                }
            }
        }
    }

    /// Connects to `addr`, says who it is, subscribes and waits for the
    /// server to confirm.
    async fn connect(&mut self, addr: &str) -> Result<(), Refused> {
        let broke = Refused::Broke;
        let made = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|e| broke(e.into()))?;
            let _ = stream.set_nodelay(true);
            let mut conn = Conn {
                stream,
                buf: BytesMut::with_capacity(READ),
                out: BytesMut::new(),
                heard: Instant::now(),
                unanswered: 0,
            };
            let info = match conn.op().await.map_err(broke)? {
                Op::Info(info) => info,
                other => return Err(broke(WireError::NotInfo(format!("{other:?}")))),
            };
            if info.get("tls_required").and_then(|t| t.as_bool()) == Some(true) {
                return Err(Refused::Tls);
            }
            self.announce(&info);
            conn.out.extend_from_slice(&self.hello());
            conn.flush().await.map_err(broke)?;
            loop {
                match conn.op().await.map_err(broke)? {
                    Op::Pong => break,
                    Op::Err(e) => return Err(broke(WireError::Refused(e))),
                    Op::Msg { sid: SID, msg } => self.early.push_back(msg),
                    Op::Info(info) => self.announce(&info),
                    Op::Ping => {
                        conn.out.extend_from_slice(b"PONG\r\n");
                        conn.flush().await.map_err(broke)?;
                    }
                    Op::Ok | Op::Msg { .. } => {}
                }
            }
            Ok(conn)
        })
        .await
        .map_err(|_| broke(WireError::NoAnswer(CONNECT_TIMEOUT)))??;
        self.conn = Some(made);
        Ok(())
    }

    /// `CONNECT`, `SUB` and a `PING` whose `PONG` confirms both.
    fn hello(&self) -> Vec<u8> {
        let d = &self.dial;
        let mut connect = serde_json::json!({
            "verbose": false,
            "pedantic": false,
            "tls_required": false,
            "name": d.name,
            "lang": "rust",
            "version": env!("CARGO_PKG_VERSION"),
            "protocol": 1,
            "headers": true,
            "no_responders": true,
        });
        match &d.auth {
            Some(Auth::User(u, p)) => {
                connect["user"] = u.clone().into();
                connect["pass"] = p.clone().into();
            }
            Some(Auth::Token(t)) => connect["auth_token"] = t.clone().into(),
            None => {}
        }
        format!("CONNECT {connect}\r\nSUB {} {SID}\r\nPING\r\n", d.pattern).into_bytes()
    }

    /// Keeps the servers the cluster announces, to try them after the
    /// ones given.
    fn announce(&mut self, info: &serde_json::Value) {
        if let Some(urls) = info.get("connect_urls").and_then(|u| u.as_array()) {
            for u in urls.iter().filter_map(|u| u.as_str()) {
                if !self.announced.iter().any(|a| a == u) {
                    self.announced.push(u.to_string());
                }
            }
        }
    }
}

impl Conn {
    /// The next operation, read for as long as it takes.
    async fn op(&mut self) -> Result<Op, WireError> {
        loop {
            if let Some(op) = parse(&mut self.buf)? {
                return Ok(op);
            }
            self.fill().await?;
        }
    }

    /// Reads what the socket has (waiting for it); cancel-safe.
    async fn fill(&mut self) -> Result<(), WireError> {
        self.buf.reserve(READ);
        let read = self.stream.read_buf(&mut self.buf).await;
        self.read(read)
    }

    /// What a read of the socket gave: the server was heard from (its
    /// pings answered or not), or the connection ended.
    fn read(&mut self, read: std::io::Result<usize>) -> Result<(), WireError> {
        match read {
            Ok(0) => Err(WireError::Closed),
            Ok(_) => {
                self.heard = Instant::now();
                self.unanswered = 0;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Writes what waits to be written; cancel-safe (what was written is
    /// taken off as it goes).
    async fn flush(&mut self) -> Result<(), WireError> {
        while !self.out.is_empty() {
            let n = self.stream.write(&self.out).await?;
            if n == 0 {
                return Err(WireError::Closed);
            }
            self.out.advance(n);
        }
        Ok(())
    }

    /// The next message of the subscription from what was read, answering
    /// what the server asks on the way; `None` when none is all there.
    fn take(&mut self) -> Result<Option<Message>, WireError> {
        while let Some(op) = parse(&mut self.buf)? {
            match op {
                Op::Msg { sid: SID, msg } => return Ok(Some(msg)),
                Op::Ping => self.out.extend_from_slice(b"PONG\r\n"),
                Op::Err(e) => warn!(error = %e, "the NATS server said"),
                Op::Msg { .. } | Op::Pong | Op::Ok | Op::Info(_) => {}
            }
        }
        Ok(None)
    }

    async fn next(&mut self, ping_every: Duration) -> Result<Message, WireError> {
        loop {
            if let Some(m) = self.take()? {
                return Ok(m);
            }
            self.flush().await?;
            let quiet = self.heard + ping_every;
            let read = tokio::select! {
                read = self.fill() => Some(read),
                _ = tokio::time::sleep_until(quiet) => None,
            };
            match read {
                Some(read) => read?,
                None if self.unanswered >= 2 => {
                    return Err(WireError::Silent(ping_every));
                }
                None => {
                    self.unanswered += 1;
                    self.heard = Instant::now();
                    self.out.extend_from_slice(b"PING\r\n");
                }
            }
        }
    }

    fn try_next(&mut self) -> Result<Option<Message>, WireError> {
        if let Some(m) = self.take()? {
            return Ok(Some(m));
        }
        if !self.out.is_empty() {
            match self.stream.try_write(&self.out) {
                Ok(n) => self.out.advance(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.buf.reserve(READ);
        match self.stream.try_read_buf(&mut self.buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            read => {
                self.read(read)?;
                self.take()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation of `stream`, fed to the parser `step` bytes at a
    /// time, as a socket may cut it anywhere.
    fn ops_in_steps(stream: &[u8], step: usize) -> Vec<String> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in stream.chunks(step) {
            buf.extend_from_slice(chunk);
            while let Some(op) = parse(&mut buf).unwrap() {
                out.push(match op {
                    Op::Msg { sid, msg } => format!(
                        "{sid} {} {:?} {:?} {:?}",
                        msg.subject,
                        msg.reply,
                        msg.headers.into_pairs(),
                        msg.payload
                    ),
                    other => format!("{other:?}"),
                });
            }
        }
        assert!(buf.is_empty(), "nothing left over");
        out
    }

    const STREAM: &[u8] = b"INFO {\"server_id\":\"x\",\"max_payload\":1048576}\r\n\
        +OK\r\n\
        MSG xo.salute.a 1 5\r\nhello\r\n\
        msg xo.salute.b 1 _INBOX.r 0\r\n\r\n\
        PING\r\n\
        HMSG xo.salute.c 1 44 49\r\nNATS/1.0\r\nContent-Type: application/json\r\n\r\n{\"a\"}\r\n\
        HMSG xo.salute.d 1 reply.to 12 14\r\nNATS/1.0\r\n\r\n\r\n\r\n\
        MSG xo.salute.e 1 4\r\na\r\nb\r\n\
        PONG\r\n\
        -ERR 'Slow Consumer Detected'\r\n";

    #[test]
    fn the_protocol_is_read_the_same_wherever_the_socket_cuts_it() {
        let whole = ops_in_steps(STREAM, STREAM.len());
        assert_eq!(whole.len(), 10, "{whole:#?}");
        assert!(whole[0].starts_with("Info(Object"), "{}", whole[0]);
        assert_eq!(whole[1], "Ok");
        assert_eq!(whole[2], "1 xo.salute.a None [] b\"hello\"");
        assert_eq!(
            whole[3], "1 xo.salute.b Some(\"_INBOX.r\") [] b\"\"",
            "an empty payload, any case"
        );
        assert_eq!(whole[4], "Ping");
        assert_eq!(
            whole[5],
            "1 xo.salute.c None [(\"Content-Type\", \"application/json\")] b\"{\\\"a\\\"}\""
        );
        assert_eq!(
            whole[6], "1 xo.salute.d Some(\"reply.to\") [] b\"\\r\\n\"",
            "CRLF inside a payload is payload"
        );
        assert_eq!(whole[7], "1 xo.salute.e None [] b\"a\\r\\nb\"");
        assert_eq!(whole[8], "Pong");
        assert_eq!(whole[9], "Err(\"Slow Consumer Detected\")");
        for step in 1..STREAM.len() {
            assert_eq!(
                ops_in_steps(STREAM, step),
                whole,
                "read {step} bytes at a time"
            );
        }
    }

    #[test]
    fn a_broken_stream_is_named_not_read_on() {
        let bad: &[(&[u8], &str)] = &[
            (b"MSG a 1 5\r\nhelloXX", "not followed by CRLF"),
            (b"MSG a 1 x\r\n", "size that is no number"),
            (b"MSG a\r\n", "MSG with 1 arguments"),
            (b"HMSG a 1 9 5\r\n", "header of 9"),
            (b"MSG a 1 99999999999\r\n", "at most"),
            (
                b"WHAT now\r\n",
                "an operation NATS does not send: \"WHAT now\"",
            ),
            (b"INFO {nope\r\n", "INFO that is not JSON"),
            (
                b"HMSG a 1 4 4\r\n\xff\xfe\r\n\r\n\r\n",
                "header block that is not UTF-8",
            ),
        ];
        for (stream, said) in bad {
            let mut buf = BytesMut::from(*stream);
            let e = parse(&mut buf).map(|_| ()).unwrap_err().to_string();
            assert!(e.contains(said), "{stream:?}: {e}");
        }
        let mut long = BytesMut::from(&[b'M'; MAX_LINE + 10][..]);
        assert!(
            parse(&mut long)
                .unwrap_err()
                .to_string()
                .contains("longer than")
        );
        // Short of its end, a line or a message is waited for.
        for partial in [&b"MSG a 1 5\r\nhel"[..], b"PIN", b"MSG a 1 5"] {
            let mut buf = BytesMut::from(partial);
            assert!(parse(&mut buf).unwrap().is_none(), "{partial:?}");
            assert_eq!(&buf[..], partial, "nothing taken");
        }
    }

    #[test]
    fn the_hello_names_the_connection_and_carries_its_credentials() {
        let sub = |auth: Option<Auth>| WireSub {
            dial: Dial {
                servers: vec!["127.0.0.1:4222".into()],
                auth,
                name: "xo-supervisor (report pump)".into(),
                pattern: "xo.salute.*".into(),
                ping_every: Duration::from_secs(60),
            },
            announced: Vec::new(),
            conn: None,
            early: Default::default(),
            outages: Arc::default(),
            tries: 0,
        };
        let hello = |s: WireSub| String::from_utf8(s.hello()).unwrap();
        let h = hello(sub(Some(Auth::User("u".into(), "p\"w".into()))));
        let (connect, rest) = h.split_once("\r\n").unwrap();
        let v: serde_json::Value =
            serde_json::from_str(connect.strip_prefix("CONNECT ").unwrap()).unwrap();
        assert_eq!(v["user"], "u");
        assert_eq!(v["pass"], "p\"w", "quoted as JSON");
        assert_eq!(v["name"], "xo-supervisor (report pump)");
        assert_eq!(v["headers"], true);
        assert_eq!(rest, "SUB xo.salute.* 1\r\nPING\r\n");
        let h = hello(sub(Some(Auth::Token("tok".into()))));
        assert!(
            h.contains("\"auth_token\":\"tok\"") && !h.contains("\"user\""),
            "{h}"
        );
    }
}
