//! The XO console: a web dashboard and JSON API that is one more client of
//! the bus. It talks to the supervisor, queue, knowledge, review and fleet
//! services only through their control requests and subscriptions, like
//! `xo` does, so it runs inside `xo up` or as its own process
//! (`xo serve console`).
//!
//! # Layout
//!
//! - this file: [`start`] binds the listener and builds the router;
//!   [`ConsoleHandle`] stops it.
//! - [`auth`]: the bearer token, the browser's cookie, CSRF, read-only mode.
//! - [`api`]: `/api/v1/...`, one route per control request, errors as
//!   `{code, message}`.
//! - [`events`]: the bus subscriptions fanned out to `/api/v1/events` (SSE).
//! - [`rows`]: the fleet page's changed rows, rendered once a second and
//!   sent on the same stream (a tab makes no request per report);
//!   [`views`]: what each tab shows, so that its stream carries only those;
//!   [`triage`]: a unit's bucket and where it sorts, for all three.
//! - [`listen`]: the listener and its edges: connections counted once a request is parsed
//!   (`console.max_connections`), per client, header and idle timeouts, 503 beyond, accept backoff.
//! - [`metrics`]: `/metrics` in the Prometheus text format.
//! - [`pages`]: the server-rendered pages and their form actions; [`html`]
//!   the escaping and the layout. `assets/` holds the CSS and the script,
//!   embedded at build time (no npm, no CDN).

pub mod api;
pub mod auth;
pub mod events;
pub mod guard;
pub mod html;
pub mod listen;
pub mod metrics;
pub mod pages;
pub mod rows;
pub mod triage;
pub mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::task::JoinHandle;
use tracing::info;
use xo_bus::Client;
use xo_bus::typed::{self, CallError};
use xo_proto::Request;
use xo_proto::control::{ErrorCode, ServiceError};
use xo_runtime::ServiceCtx;
use xo_runtime::XoConfig;
use xo_runtime::tree::Shutdown;

/// How long a control request from the console may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What every handler shares.
#[derive(Debug)]
pub struct Console {
    /// The services' front door: every page and API call asks through it.
    pub client: Client,
    pub cfg: XoConfig,
    pub auth: auth::Auth,
    pub hub: events::Hub,
    /// Triggered at stop: open event streams end.
    pub stop: Shutdown,
    /// Connections refused for `console.max_connections`, failed accepts.
    pub conns: Arc<listen::Counts>,
    /// Fleet pages rendered, waiting for their tab's stream.
    pub views: views::Views,
    /// The service clock: ages, login codes and live rows are timed by it.
    pub clock: xo_runtime::Clock,
}

pub type Shared = Arc<Console>;

impl Console {
    /// Calls a service's control API; a failure says which service and
    /// what to do.
    pub async fn call<R: Request>(&self, req: &R) -> Result<R::Response, ServiceError> {
        self.client.call(req).await.map_err(|e| call_error::<R>(e))
    }
}

impl Console {
    /// Every unit as one JSON array, the supervisor's pages spliced
    /// together without decoding each summary (only the last unit id of a
    /// page is read, to ask for the next).
    pub async fn units_json(&self) -> Result<String, ServiceError> {
        use serde_json::value::RawValue;
        use xo_proto::control::{ListUnits, Reply};
        #[derive(serde::Deserialize)]
        struct Id {
            unit: String,
        }
        let mut out = String::from("[");
        let mut after = None;
        loop {
            let req = ListUnits::page(after.take());
            let (h, payload) = typed::encode(&req, xo_proto::Format::Json)
                .map_err(|e| ServiceError::new(ErrorCode::Internal, e.to_string()))?;
            let reply = self
                .client
                .bus()
                .request(
                    &ListUnits::subject(self.client.subjects()),
                    h,
                    payload,
                    CALL_TIMEOUT,
                )
                .await
                .map_err(|e| call_error::<ListUnits>(CallError::Bus(e)))?;
            let page: Reply<Vec<Box<RawValue>>> =
                serde_json::from_slice(&reply.payload).map_err(|e| {
                    ServiceError::new(
                        ErrorCode::Internal,
                        format!("the supervisor's unit list is not readable JSON: {e}"),
                    )
                })?;
            let page = page.into_result()?;
            for (i, u) in page.iter().enumerate() {
                if out.len() > 1 || i > 0 {
                    out.push(',');
                }
                out.push_str(u.get());
            }
            if page.len() < ListUnits::PAGE {
                out.push(']');
                return Ok(out);
            }
            let last: Id = page
                .last()
                .map(|u| serde_json::from_str(u.get()))
                .transpose()
                .map_err(|e| {
                    ServiceError::new(
                        ErrorCode::Internal,
                        format!("a unit summary without its id: {e}"),
                    )
                })?
                .ok_or_else(|| ServiceError::new(ErrorCode::Internal, "empty page"))?;
            after = Some(last.unit);
        }
    }

    /// Every unit, a page at a time (a large fleet's list exceeds one message).
    pub async fn units(&self) -> Result<Vec<xo_proto::control::UnitSummary>, ServiceError> {
        self.client
            .all_units()
            .await
            .map_err(call_error::<xo_proto::control::ListUnits>)
    }
}

/// The service a request goes to, as an operator knows it.
pub fn service_name(service: &str) -> &'static str {
    match service {
        "supervisor" => "the supervisor",
        "queue" => "the queue",
        "knowledge" => "the knowledge store",
        "review" => "the review supervisors",
        "fleet" => "the fleet manager",
        _ => "a service",
    }
}

pub(crate) fn call_error<R: Request>(e: CallError) -> ServiceError {
    let who = service_name(R::SERVICE);
    match e {
        CallError::Service(s) => s,
        CallError::Bus(xo_bus::BusError::NoResponders { .. }) => ServiceError::new(
            ErrorCode::Unavailable,
            format!(
                "{who} is not running (no service answers xo.ctl.{}.{}); start it with `xo up` or `xo serve {}`",
                R::SERVICE,
                R::VERB,
                R::SERVICE
            ),
        ),
        CallError::Bus(xo_bus::BusError::Timeout { timeout, .. }) => ServiceError::new(
            ErrorCode::Timeout,
            format!(
                "{who} did not answer {}.{} within {timeout:?}",
                R::SERVICE,
                R::VERB
            ),
        ),
        CallError::Bus(b) => ServiceError::new(
            ErrorCode::Unavailable,
            format!("{who} cannot be reached: {b}"),
        ),
        CallError::Codec(c) => ServiceError::new(
            ErrorCode::Internal,
            format!(
                "{who} answered {}.{} with a reply this console cannot read: {c}",
                R::SERVICE,
                R::VERB
            ),
        ),
    }
}

/// Errors of starting the console.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error(
        "console.listen {addr}: {source} (another process may hold the port: set console.listen, or console.enabled = false)"
    )]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    /// A token or operators file that is wrong (what is wrong, said).
    #[error("console token {path}: {reason}")]
    Token { path: String, reason: String },
    /// A token file that could not be read or written (`what` it was doing).
    #[error("console token {path}: {what}: {source}")]
    TokenFile {
        path: String,
        what: &'static str,
        source: std::io::Error,
    },
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
}

xo_bus::bus_error_from!(ConsoleError);

/// A running console.
#[derive(Debug)]
pub struct ConsoleHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// `http://addr` (what `xo up` prints).
    pub url: String,
    pub console: Shared,
    stop: Shutdown,
    /// The listener's task; `None` once it ended on its own (a task is
    /// awaited once).
    server: Option<JoinHandle<()>>,
    hub: JoinHandle<()>,
    rows: JoinHandle<()>,
}

/// Where a running console is and how to log in to it (a copy of the
/// handle's address, for whoever prints it).
#[derive(Debug, Clone)]
pub struct ConsoleView {
    pub addr: SocketAddr,
    pub url: String,
    pub console: Shared,
}

impl ConsoleView {
    /// A URL that logs a browser in as the console token's operator
    /// once, within ten minutes (a one-time code, not the token: the
    /// browser keeps the URL in its history); the login page that asks
    /// for the token when no code could be made.
    pub fn login_url(&self) -> String {
        match self.console.auth.login_code(0, self.console.clock.now_ms()) {
            Some(code) => format!("{}/login?code={code}", self.url),
            None => format!("{}/login", self.url),
        }
    }

    /// How to log in, for a start banner: a login link (a one-time code,
    /// good for ten minutes) only to a terminal and only for a token from
    /// a file; to a log, or for `XO_CONSOLE_TOKEN` (container logs), where
    /// the token is.
    pub fn login_hint(&self, terminal: bool) -> String {
        let auth = &self.console.auth;
        if terminal && auth.source != "XO_CONSOLE_TOKEN" {
            format!("log in: {}", self.login_url())
        } else {
            format!(
                "log in at {}/login with the token in {}",
                self.url, auth.source
            )
        }
    }
}

impl ConsoleHandle {
    pub fn view(&self) -> ConsoleView {
        ConsoleView {
            addr: self.addr,
            url: self.url.clone(),
            console: self.console.clone(),
        }
    }

    /// A one-time URL that logs a browser in (sets the token cookie).
    pub fn login_url(&self) -> String {
        self.view().login_url()
    }

    /// Stops serving: open event streams end, then the listener.
    pub async fn stop(self) {
        self.stop.trigger();
        if let Some(server) = self.server {
            let _ = server.await;
        }
        let _ = self.hub.await;
        let _ = self.rows.await;
    }

    /// Waits for `shutdown`, or for the server to end on its own (it
    /// does only when serving fails).
    pub async fn until(&mut self, shutdown: impl std::future::Future<Output = ()>) {
        let Some(server) = self.server.as_mut() else {
            return shutdown.await;
        };
        tokio::select! {
            _ = shutdown => {}
            _ = server => self.server = None,
        }
    }
}

/// The router for `console` (also used by the bench and the tests).
pub fn router(console: Shared) -> Router {
    let assets = Router::new()
        .route("/assets/console.css", axum::routing::get(html::css))
        .route("/assets/console.js", axum::routing::get(html::js));
    Router::new()
        .merge(pages::routes())
        .nest("/api/v1", api::routes())
        .route("/metrics", axum::routing::get(metrics::handler))
        // Liveness for probes: says nothing but that the listener serves.
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .merge(assets)
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            guard::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            metrics::count,
        ))
        .with_state(console)
}

/// Binds `console.listen`, subscribes to the bus for the live events, and
/// serves until [`ConsoleHandle::stop`].
pub async fn start(ctx: ServiceCtx) -> Result<ConsoleHandle, ConsoleError> {
    let ServiceCtx {
        cfg,
        bus,
        shutdown,
        clock,
        ..
    } = ctx;
    let cfg = &cfg;
    let addr = cfg.console.listen.clone();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ConsoleError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| ConsoleError::Bind {
        addr: addr.clone(),
        source,
    })?;
    let auth = auth::Auth::load(cfg, local)?;
    let stop = shutdown;
    let (hub, hub_task) = events::Hub::start(&bus, cfg, stop.signal()).await?;
    let console = Arc::new(Console {
        client: Client::new(bus, cfg.subjects()).with_timeout(CALL_TIMEOUT),
        cfg: cfg.clone(),
        auth,
        hub,
        stop: stop.clone(),
        conns: Arc::default(),
        views: views::Views::default(),
        clock,
    });
    let app = router(console.clone());
    let rows = rows::start(console.clone());
    // At most half the process's descriptors: the bus socket, NATS and the
    // services keep the rest whatever the console's clients do.
    let fds = xo_runtime::limits::fd_limit();
    // (Connections waiting for their first request are bounded by as many
    // again: both together take at most that half.)
    let max = xo_runtime::limits::share_of(fds, cfg.console.max_connections.saturating_mul(2)) / 2;
    let max = max.max(1);
    if max < cfg.console.max_connections {
        tracing::warn!(configured = cfg.console.max_connections, max, fd_limit = ?fds, "console.max_connections lowered so that its connections and as many waiting ones take at most half the process's file-descriptor limit");
    }
    let c = &cfg.console;
    let limits = listen::Limits {
        max,
        per_client: c.max_per_client,
        header_timeout: Duration::from_millis(c.header_timeout_ms),
        idle_timeout: Duration::from_millis(c.idle_timeout_ms),
    };
    let server = listen::Server::new(listener, limits, console.conns.clone());
    let server = tokio::spawn(server.serve(app, stop.clone()));
    let url = format!("http://{local}");
    info!(url = %url, read_only = cfg.console.read_only, open = console.auth.open_reads(), "console serving");
    Ok(ConsoleHandle {
        addr: local,
        url,
        console,
        stop,
        server: Some(server),
        hub: hub_task,
        rows,
    })
}

impl xo_runtime::Service for ConsoleHandle {
    fn name(&self) -> String {
        "console".into()
    }
    fn until<'a>(
        &'a mut self,
        shutdown: xo_runtime::service::BoxFuture<'a, ()>,
    ) -> xo_runtime::service::BoxFuture<'a, ()> {
        Box::pin(ConsoleHandle::until(self, shutdown))
    }
    fn stop(
        self: Box<Self>,
    ) -> xo_runtime::service::BoxFuture<'static, Result<(), xo_runtime::service::StopError>> {
        Box::pin(async move {
            ConsoleHandle::stop(*self).await;
            Ok(())
        })
    }
}
