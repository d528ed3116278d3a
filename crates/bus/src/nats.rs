//! The NATS transport (async-nats). The client reconnects by itself after a
//! server restart and restores its subscriptions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::{HeaderMap, client::RequestErrorKind, service::ServiceExt};
use bytes::Bytes;
use futures::StreamExt;

use crate::{BusError, BusResult, Headers, Message, ServiceEndpoint, ServiceSpec, Subscription};

#[derive(Clone)]
pub struct NatsBus {
    client: async_nats::Client,
    /// Messages lost to this client's own slowness: the client's
    /// slow-consumer events (one per message its full subscription
    /// dropped) and the server's slow-consumer errors. A lower bound: the
    /// client drops an event too when its event queue is full.
    dropped: Arc<AtomicU64>,
    /// Times this client lost its server (each disconnection counted once).
    outages: Arc<AtomicU64>,
    /// Where and how it connected, for [`NatsBus::another`] (`None`: a
    /// client made elsewhere, [`NatsBus::from_client`]).
    again: Option<Arc<(String, ConnectOptions)>>,
}

/// Shows the client and counters, never how it connected (the options hold
/// the password).
impl std::fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBus")
            .field("client", &self.client)
            .field("dropped", &self.dropped)
            .field("outages", &self.outages)
            .finish_non_exhaustive()
    }
}

/// How to connect.
#[derive(Clone)]
pub struct ConnectOptions {
    /// Client name shown by `nats server report connections`.
    pub name: String,
    /// Keep retrying the first connection (services) instead of failing at once (CLI).
    pub retry_initial: bool,
    pub user: Option<String>,
    pub password: Option<String>,
    /// Replies arrive under this prefix instead of `_INBOX` (a runner's
    /// credentials may subscribe to its own inbox only).
    pub inbox_prefix: Option<String>,
    /// TLS: the CA that signed the server's certificate (TLS is then
    /// required), and this client's certificate and key when the server
    /// verifies clients.
    pub tls_ca: Option<std::path::PathBuf>,
    pub tls_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// How often to ping the server (a dead link is noticed after two
    /// unanswered pings); `None`: the client's default (a minute).
    pub ping_interval: Option<Duration>,
    /// Messages a subscription holds before the client drops new ones
    /// (counted: [`NatsBus::dropped`]); `None`: the client's 65,536.
    pub subscription_capacity: Option<usize>,
}

/// A NATS URL with any password replaced by `***`, for logs and errors; a
/// lone `nats://TOKEN@host` is a token, replaced whole. A URL that does not
/// parse keeps nothing between its scheme and its last `@`.
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|one| match parse_server(one) {
            Some((mut u, schemed)) => {
                let hidden = if u.password().is_some() {
                    u.set_password(Some("***"))
                } else if !u.username().is_empty() {
                    u.set_username("***")
                } else {
                    return one.to_string();
                };
                match hidden {
                    Ok(()) => shown(&u, schemed),
                    Err(()) => hide_by_hand(one),
                }
            }
            None => hide_by_hand(one),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What [`redact_url`] shows of a URL it cannot parse.
fn hide_by_hand(one: &str) -> String {
    match one.rfind('@') {
        Some(at) => {
            let from = one.find("://").map_or(0, |i| i + 3).min(at);
            format!("{}***{}", &one[..from], &one[at..])
        }
        None => one.to_string(),
    }
}

/// How a connection proves who it is.
pub(crate) enum Auth {
    User(String, String),
    /// A lone token in the URL (`nats://token@host`).
    Token(String),
}

/// The servers of `url` (a comma-separated list) without credentials, and
/// the credentials to use: the options' user and password, else the first
/// the URLs carry. Credentials are never shown: an error names the URL
/// with its password replaced.
fn servers_and_auth(url: &str, opts: &ConnectOptions) -> BusResult<(Vec<String>, Option<Auth>)> {
    let mut servers = Vec::new();
    let mut from_url = None;
    for one in url.split(',') {
        let (plain, creds) = split_credentials(one.trim());
        if from_url.is_none() {
            from_url = creds;
        }
        servers.push(plain);
    }
    let auth = match (opts.user.clone(), opts.password.clone(), from_url) {
        (Some(u), Some(p), _) => Some(Auth::User(u, p)),
        (None, None, Some((u, Some(p)))) => Some(Auth::User(u, p)),
        (None, None, Some((t, None))) => Some(Auth::Token(t)),
        (Some(u), None, _) => {
            return Err(BusError::Connect {
                target: redact_url(url),
                source: crate::ConnectError::NoPassword { user: u },
            });
        }
        _ => None,
    };
    Ok((servers, auth))
}

/// One server URL parsed (`url`); `host:port` without a scheme is read as
/// `nats://host:port`. The flag says whether it had a scheme.
fn parse_server(one: &str) -> Option<(url::Url, bool)> {
    let one = one.trim();
    if one.contains("://") {
        url::Url::parse(one).ok().map(|u| (u, true))
    } else {
        url::Url::parse(&format!("nats://{one}"))
            .ok()
            .map(|u| (u, false))
    }
}

/// A parsed server URL as text, without the scheme it was not given.
fn shown(u: &url::Url, schemed: bool) -> String {
    let s = u.as_str();
    if schemed {
        s.to_string()
    } else {
        s.strip_prefix("nats://").unwrap_or(s).to_string()
    }
}

/// Splits `scheme://user:password@host:port` into the URL without its
/// credentials and the credentials (user, password), percent-decoded
/// (`percent-encoding`: `%40` is `@`; a broken escape is kept as typed).
pub fn split_credentials(url: &str) -> (String, Option<(String, Option<String>)>) {
    let Some((mut u, schemed)) = parse_server(url) else {
        return (url.to_string(), None);
    };
    if u.username().is_empty() && u.password().is_none() {
        return (url.to_string(), None);
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let creds = (decode(u.username()), u.password().map(decode));
    if u.set_password(None).is_err() || u.set_username("").is_err() {
        return (url.to_string(), None);
    }
    (shown(&u, schemed), Some(creds))
}

/// Every option but the password, which shows as `***` when there is one.
impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("name", &self.name)
            .field("retry_initial", &self.retry_initial)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("inbox_prefix", &self.inbox_prefix)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("ping_interval", &self.ping_interval)
            .field("subscription_capacity", &self.subscription_capacity)
            .finish()
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            name: "xo".into(),
            retry_initial: false,
            user: None,
            password: None,
            inbox_prefix: None,
            tls_ca: None,
            tls_cert: None,
            ping_interval: None,
            subscription_capacity: None,
        }
    }
}

impl NatsBus {
    pub async fn connect(url: &str, opts: ConnectOptions) -> BusResult<Self> {
        Self::connect_counting(url, opts, Arc::default()).await
    }

    /// A second connection to the same servers, with the same credentials
    /// and TLS, named `<name> (<part>)`; the messages it drops count in
    /// this one's [`NatsBus::dropped`]. It is tried once (no retrying while
    /// the server is away), and its reading task runs on the runtime it is
    /// made on (an input that reads on a thread of its own makes its
    /// connection there). `None` for a client made elsewhere.
    pub async fn another(&self, part: &str) -> Option<BusResult<NatsBus>> {
        let again = self.again.as_ref()?;
        let (url, opts) = (&again.0, &again.1);
        let opts = ConnectOptions {
            name: format!("{} ({part})", opts.name),
            retry_initial: false,
            ..opts.clone()
        };
        Some(Self::connect_counting(url, opts, self.dropped.clone()).await)
    }

    async fn connect_counting(
        url: &str,
        opts: ConnectOptions,
        dropped: Arc<AtomicU64>,
    ) -> BusResult<Self> {
        let again = Arc::new((url.to_string(), opts.clone()));
        let mut o = async_nats::ConnectOptions::new()
            .name(&opts.name)
            .connection_timeout(Duration::from_secs(5))
            .max_reconnects(None);
        if opts.retry_initial {
            o = o.retry_on_initial_connect();
        }
        if let Some(every) = opts.ping_interval {
            o = o.ping_interval(every);
        }
        if let Some(n) = opts.subscription_capacity {
            o = o.subscription_capacity(n.max(1));
        }
        let outages = Arc::new(AtomicU64::new(0));
        let (seen, lost) = (dropped.clone(), outages.clone());
        o = o.event_callback(move |e| {
            match e {
                async_nats::Event::SlowConsumer(_)
                | async_nats::Event::ServerError(async_nats::ServerError::SlowConsumer(_)) => {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
                async_nats::Event::Disconnected => {
                    lost.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
            std::future::ready(())
        });
        let shown = redact_url(url);
        let (servers, auth) = servers_and_auth(url, &opts)?;
        match auth {
            Some(Auth::User(u, p)) => o = o.user_and_password(u, p),
            Some(Auth::Token(t)) => o = o.token(t),
            None => {}
        }
        if let Some(prefix) = opts.inbox_prefix {
            o = o.custom_inbox_prefix(prefix);
        }
        if let Some(ca) = opts.tls_ca {
            o = o.add_root_certificates(ca).require_tls(true);
        }
        if let Some((cert, key)) = opts.tls_cert {
            o = o.add_client_certificate(cert, key).require_tls(true);
        }
        // Several servers (a cluster) are tried in turn.
        let addrs = servers
            .iter()
            .map(|s| s.parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BusError::Connect {
                target: shown.clone(),
                source: crate::ConnectError::NotAUrl(e),
            })?;
        // `servers` hold no credentials (they were split off above), so
        // the error, which may quote them, holds none either.
        let client = o.connect(addrs).await.map_err(|e| BusError::Connect {
            target: shown.clone(),
            source: e.into(),
        })?;
        Ok(Self {
            client,
            dropped,
            outages,
            again: Some(again),
        })
    }

    /// A subscription to `pattern` on a connection of its own, read off
    /// the socket where it is awaited ([`crate::wire`]), to the same
    /// servers with the same credentials, named `<name> (<part>)`; its
    /// lost connections count in this one's outages. Live
    /// when this returns. `None` where the NATS client must read instead:
    /// a bus given TLS, a server that asks for it, a client made
    /// elsewhere ([`NatsBus::another`] then).
    pub async fn wire(&self, part: &str, pattern: &str) -> Option<BusResult<Subscription>> {
        let (url, opts) = self.again.as_deref()?;
        if opts.tls_ca.is_some() || opts.tls_cert.is_some() {
            return None;
        }
        let (servers, auth) = match servers_and_auth(url, opts) {
            Ok(found) => found,
            Err(e) => return Some(Err(e)),
        };
        let mut addrs = Vec::new();
        for one in &servers {
            let (u, _) = parse_server(one)?;
            if u.scheme() != "nats" {
                return None;
            }
            addrs.push(format!("{}:{}", u.host_str()?, u.port().unwrap_or(4222)));
        }
        let dial = crate::wire::Dial {
            servers: addrs,
            auth,
            name: format!("{} ({part})", opts.name),
            pattern: pattern.to_string(),
            ping_every: opts.ping_interval.unwrap_or(Duration::from_secs(60)),
        };
        let made = crate::wire::WireSub::subscribe(dial, self.outages.clone()).await;
        match made {
            Ok(sub) => Some(Ok(Subscription::Wire(Box::new(sub)))),
            Err(crate::wire::Refused::Tls) => None,
            Err(crate::wire::Refused::Broke(e)) => Some(Err(BusError::Nats {
                op: format!(
                    "subscribe to {pattern} on a connection of its own ({})",
                    redact_url(url)
                ),
                source: e.into(),
            })),
        }
    }

    pub fn from_client(client: async_nats::Client) -> Self {
        Self {
            client,
            dropped: Arc::default(),
            outages: Arc::default(),
            again: None,
        }
    }

    /// Times this client lost its server since it connected.
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// Messages this client dropped because a subscription was full (see
    /// the field): reports a supervisor never read.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    pub async fn publish_with_reply(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Headers,
        payload: Bytes,
    ) -> BusResult<()> {
        let subject = subject.to_string();
        let res = match (reply, headers.is_empty()) {
            (None, true) => self.client.publish(subject, payload).await,
            (None, false) => {
                self.client
                    .publish_with_headers(subject, to_nats_headers(&headers), payload)
                    .await
            }
            (Some(r), _) => {
                self.client
                    .publish_with_reply_and_headers(
                        subject,
                        r.to_string(),
                        to_nats_headers(&headers),
                        payload,
                    )
                    .await
            }
        };
        res.map_err(|e| nats_err("publish", e))
    }

    /// Subscribes, and returns once the server has the subscription (a
    /// round trip), so a message published after this returns is received —
    /// as on the other transports.
    pub async fn subscribe(&self, pattern: &str) -> BusResult<Subscription> {
        let sub = self
            .client
            .subscribe(pattern.to_string())
            .await
            .map_err(|e| nats_err("subscribe", e))?;
        self.client
            .flush()
            .await
            .map_err(|e| nats_err("flush", e))?;
        Ok(Subscription::Nats(sub))
    }

    pub async fn request(
        &self,
        subject: &str,
        headers: Headers,
        payload: Bytes,
        timeout: Duration,
    ) -> BusResult<Message> {
        let req = async_nats::Request::new()
            .payload(payload)
            .headers(to_nats_headers(&headers))
            .timeout(Some(timeout));
        match self.client.send_request(subject.to_string(), req).await {
            Ok(m) => Ok(from_nats(m)),
            Err(e) => Err(match e.kind() {
                RequestErrorKind::NoResponders => BusError::NoResponders {
                    subject: subject.to_string(),
                },
                RequestErrorKind::TimedOut => BusError::Timeout {
                    subject: subject.to_string(),
                    timeout,
                },
                _ => nats_err("request", e),
            }),
        }
    }

    /// A round trip through the server: everything this client sent before
    /// (subscriptions included) has been processed when it returns.
    pub async fn flush(&self) -> BusResult<()> {
        let inbox = self.client.new_inbox();
        let mut echo = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| nats_err("flush (subscribe)", e))?;
        self.client
            .publish(inbox.clone(), Bytes::new())
            .await
            .map_err(|e| nats_err("flush (publish)", e))?;
        self.client
            .flush()
            .await
            .map_err(|e| nats_err("flush", e))?;
        let timeout = Duration::from_secs(10);
        match tokio::time::timeout(timeout, echo.next()).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(BusError::Closed),
            Err(_) => Err(BusError::Timeout {
                subject: inbox,
                timeout,
            }),
        }
    }

    pub async fn serve(&self, spec: ServiceSpec) -> BusResult<ServiceEndpoint> {
        let err = |e: async_nats::Error| BusError::Nats {
            op: format!("serve {}", spec.name),
            source: e,
        };
        let service = self
            .client
            .service_builder()
            .description(&spec.description)
            .start(&spec.name, &spec.version)
            .await
            .map_err(err)?;
        let group = service.group(&spec.group);
        let mut endpoints = Vec::new();
        for verb in &spec.verbs {
            endpoints.push(group.endpoint(verb.as_str()).await.map_err(err)?);
        }
        for verb in &spec.scoped {
            endpoints.push(
                group
                    .endpoint_builder()
                    .name(format!("{verb}-unit"))
                    .add(format!("{verb}.*"))
                    .await
                    .map_err(err)?,
            );
        }
        // The endpoints' subscriptions reach the server before `serve`
        // returns: a caller on another connection told the service is up
        // would otherwise be answered "no responders" in the gap.
        self.flush().await?;
        Ok(ServiceEndpoint::Nats {
            group: spec.group.clone(),
            service: RunningService(Some(Box::new(service))),
            stream: Box::pin(futures::stream::select_all(endpoints).map(|r| r)),
        })
    }
}

/// A NATS micro service, stopped when dropped: async-nats leaves its
/// `$SRV.PING/INFO/STATS` task (and the connection it holds) running until
/// `stop` is called, so an endpoint whose task was aborted would otherwise
/// keep answering for a service that is gone.
pub struct RunningService(Option<Box<async_nats::service::Service>>);

impl RunningService {
    pub(crate) fn stop(&mut self) {
        use futures::FutureExt;
        if let Some(s) = self.0.take() {
            // `Service::stop` only signals and aborts: it completes when
            // first polled.
            let _ = s.stop().now_or_never();
        }
    }
}

impl Drop for RunningService {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn to_nats_headers(h: &Headers) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in h.iter() {
        m.append(k, v);
    }
    m
}

pub(crate) fn from_nats(m: async_nats::Message) -> Message {
    // The header map is kept as the client built it; the subject is
    // copied as a string, not formatted (`to_string` would run the
    // formatting machinery on every message).
    Message {
        subject: m.subject.as_str().to_owned(),
        reply: m.reply.map(|r| r.as_str().to_owned()),
        headers: m.headers.map(Headers::from_nats).unwrap_or_default(),
        payload: m.payload,
    }
}

/// NATS's answer to `op`, kept as its type.
fn nats_err(op: &str, e: impl std::error::Error + Send + Sync + 'static) -> BusError {
    BusError::Nats {
        op: op.to_string(),
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_options_never_show_their_password() {
        let o = ConnectOptions {
            user: Some("alice".into()),
            password: Some("s3cret-pass".into()),
            ..Default::default()
        };
        let shown = format!("{o:?}");
        assert!(!shown.contains("s3cret-pass"), "{shown}");
        assert!(shown.contains("alice") && shown.contains("***"), "{shown}");
    }

    #[test]
    fn credentials_in_urls_are_split_and_hidden() {
        assert_eq!(
            split_credentials("nats://queue:s3cret@nats:4222"),
            (
                "nats://nats:4222".to_string(),
                Some(("queue".to_string(), Some("s3cret".to_string())))
            )
        );
        assert_eq!(
            split_credentials("nats://tok@nats:4222"),
            (
                "nats://nats:4222".to_string(),
                Some(("tok".to_string(), None))
            )
        );
        assert_eq!(split_credentials("nats://nats:4222").1, None);
        assert_eq!(
            redact_url("nats://queue:s3cret@a:4222,nats://b:4222"),
            "nats://queue:***@a:4222,nats://b:4222"
        );
        assert!(!redact_url("tls://u:p%40ss@h:4222").contains("p%40ss"));
        // A token is a secret too.
        assert_eq!(
            redact_url("nats://s3cretT0ken@h:4222,nats://b:4222"),
            "nats://***@h:4222,nats://b:4222"
        );
        assert_eq!(
            split_credentials("nats://u:p%40ss@h:4222").1,
            Some(("u".to_string(), Some("p@ss".to_string())))
        );
    }

    /// Issue 44: the hand-written decoder sliced `%a` followed by a
    /// multibyte character by byte index and panicked.
    #[test]
    fn broken_escapes_and_odd_urls_are_read_without_panic() {
        assert_eq!(
            split_credentials("nats://u:%aé@h:4222").1,
            Some(("u".to_string(), Some("%aé".to_string())))
        );
        assert_eq!(
            split_credentials("u:p%40ss@h:4222"),
            (
                "h:4222".to_string(),
                Some(("u".to_string(), Some("p@ss".to_string())))
            )
        );
        for odd in [
            "nats://u:p@",
            "nats://@",
            "nats://:p@h",
            "%",
            "nats://[::1",
            "@@@",
            "",
        ] {
            let shown = redact_url(odd);
            assert!(!shown.contains(":p@"), "{odd:?} shown as {shown:?}");
            let _ = split_credentials(odd);
        }
        for odd in [
            "nats://[::1:u:s3cret@h",
            "nats://u:s3cret@h:99999",
            "nats://u:s3cret@h h",
        ] {
            assert!(!redact_url(odd).contains("s3cret"), "{odd:?}");
        }
    }
}
