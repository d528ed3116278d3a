//! The live feed: bus subscriptions (SALUTE reports, steering, task,
//! runner, review, fleet and settings events, directives) decoded once and
//! fanned out to every `/api/v1/events` client as Server-Sent Events. A
//! client too slow to keep up is told (`lagged`) and reloads; it never
//! holds up the bus or the other clients.
//!
//! The hub also counts what it sees for `/metrics` (steering by kind,
//! claims, lease expiries since the console started).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tracing::debug;
use xo_bus::input::{self, Next};
use xo_bus::{Bus, Message, Subscription, typed};
use xo_proto::queue::{EventName, RunnerEvent, TaskEvent};
use xo_proto::{SaluteReport, Steering, SubjectKind, Subjects};
use xo_runtime::XoConfig;

use crate::Shared;

/// One event as clients receive it: its SSE name, and the whole SSE frame
/// (`event: …\ndata: …\n\n`) formatted once for every client.
#[derive(Debug, Clone)]
pub struct Live {
    pub name: &'static str,
    pub frame: Bytes,
    /// The unit a report or a steering is about (`?unit=` keeps only its).
    pub unit: Option<Arc<str>>,
    /// A `rows` batch, for the streams that take some of its rows.
    pub rows: Option<Arc<crate::views::Rows>>,
}

impl Live {
    pub fn new(name: &'static str, json: &str) -> Self {
        let mut f = BytesMut::with_capacity(json.len() + name.len() + 16);
        f.extend_from_slice(b"event: ");
        f.extend_from_slice(name.as_bytes());
        f.extend_from_slice(b"\ndata: ");
        // JSON from serde has no raw newlines; a payload that does is split
        // into data lines as SSE requires.
        for (i, line) in json.split('\n').enumerate() {
            if i > 0 {
                f.extend_from_slice(b"\ndata: ");
            }
            f.extend_from_slice(line.as_bytes());
        }
        f.extend_from_slice(b"\n\n");
        Self {
            name,
            frame: f.freeze(),
            unit: None,
            rows: None,
        }
    }

    /// A `rows` event: every row in the shared frame, and the batch for
    /// the streams that take fewer.
    pub fn rows(batch: Arc<crate::views::Rows>) -> Self {
        Self {
            rows: Some(batch.clone()),
            ..Self::new("rows", &batch.json(|_| true))
        }
    }

    /// The same, about `unit`.
    fn about(mut self, unit: Option<&str>) -> Self {
        self.unit = unit.map(Arc::from);
        self
    }
}

/// Counters of what went by since the console started.
#[derive(Debug, Default)]
pub struct Seen {
    pub reports: AtomicU64,
    pub claims: AtomicU64,
    pub lease_expiries: AtomicU64,
    /// Requests answered (all but `/metrics` and `/healthz`), and the
    /// bytes of the bodies whose size was known.
    pub requests: AtomicU64,
    pub response_bytes: AtomicU64,
    /// Bytes written to live event streams, and the `rows` batches sent.
    pub live_bytes: AtomicU64,
    pub row_batches: AtomicU64,
}

/// The fan-out.
#[derive(Debug)]
pub struct Hub {
    tx: broadcast::Sender<Live>,
    /// Counted by the feeder from the values it decoded anyway.
    pub seen: Arc<Seen>,
    /// One a live stream open (`console.max_event_streams`).
    streams: Arc<tokio::sync::Semaphore>,
    max_streams: usize,
    /// Streams refused for the bound.
    pub streams_refused: std::sync::atomic::AtomicU64,
    /// Units reported or steered since the last `rows` batch, with the
    /// sequence number of the latest report seen (0: a steering) (see
    /// [`crate::rows`]); kept only while a stream is open.
    changed: Changed,
}

type Changed = Arc<std::sync::Mutex<std::collections::HashMap<Arc<str>, u64>>>;

/// Clients may fall this many events behind before they are told to reload.
const BACKLOG: usize = 8192;

fn name_of(kind: SubjectKind) -> Option<&'static str> {
    Some(match kind {
        SubjectKind::Salute => "salute",
        SubjectKind::Steer => "steer",
        SubjectKind::TaskEvent => "task",
        SubjectKind::RunnerEvent => "runner",
        SubjectKind::ReviewEvent => "review",
        SubjectKind::FleetEvent => "fleet",
        SubjectKind::SettingsEvent => "settings",
        SubjectKind::Directive => "directive",
        _ => return None,
    })
}

/// The JSON of a bus message: the typed message where the console knows
/// it (so MessagePack reports arrive as JSON), else the payload as it is.
fn json_of(kind: SubjectKind, msg: &Message, limit: usize) -> Option<Value> {
    fn typed_json<T: xo_proto::Message + serde::Serialize>(
        m: &Message,
        limit: usize,
    ) -> Option<Value> {
        match typed::decode::<T>(m, limit) {
            Ok(v) => serde_json::to_value(v).ok(),
            Err(e) => {
                debug!(subject = %m.subject, error = %e, "console: event not decoded; not shown");
                None
            }
        }
    }
    match kind {
        SubjectKind::Salute => typed_json::<SaluteReport>(msg, limit),
        SubjectKind::Steer => typed_json::<Steering>(msg, limit),
        SubjectKind::TaskEvent => typed_json::<TaskEvent>(msg, limit),
        SubjectKind::RunnerEvent => typed_json::<RunnerEvent>(msg, limit),
        SubjectKind::SettingsEvent => typed_json::<xo_proto::settings::SettingsChanged>(msg, limit),
        _ => xo_proto::codec::decode_plain::<Value>(
            &msg.payload,
            msg.headers.get(xo_proto::codec::CONTENT_TYPE),
            limit,
        )
        .ok(),
    }
}

impl Hub {
    /// Subscribes and starts fanning out until `shutdown`.
    pub async fn start(
        bus: &Bus,
        cfg: &XoConfig,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(Hub, JoinHandle<()>), xo_bus::BusError> {
        let subjects = cfg.subjects();
        let (tx, _) = broadcast::channel(BACKLOG);
        let seen = Arc::new(Seen::default());
        let changed: Changed = Arc::default();
        let hub = Hub {
            tx: tx.clone(),
            seen: seen.clone(),
            streams: Arc::new(tokio::sync::Semaphore::new(cfg.console.max_event_streams)),
            max_streams: cfg.console.max_event_streams,
            streams_refused: Default::default(),
            changed: changed.clone(),
        };
        let mut subs = Vec::new();
        for pattern in patterns(&subjects) {
            subs.push(bus.subscribe(&pattern).await?);
        }
        let merged = futures::stream::select_all(subs.into_iter().map(|s| s.into_stream()));
        let limit = cfg.wire.max_payload;
        let (in_tx, in_rx) = tokio::sync::mpsc::channel::<Message>(BACKLOG);
        // The pump only moves messages; decoding happens in the feeder.
        let pump = tokio::spawn(async move {
            use futures::StreamExt;
            let mut merged = merged;
            while let Some(m) = merged.next().await {
                if in_tx.send(m).await.is_err() {
                    break;
                }
            }
        });
        let moved =
            futures::stream::unfold(
                in_rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        let feed = move |m: Message| {
            if let Some(kind) = subjects.kind(&m.subject)
                && let Some(name) = name_of(kind)
                && let Some(data) = json_of(kind, &m, limit)
            {
                seen.count(name, &data);
                let unit = match kind {
                    SubjectKind::Salute => data.pointer("/unit/unit"),
                    SubjectKind::Steer => data.get("unit"),
                    _ => None,
                }
                .and_then(Value::as_str);
                let live = Live::new(name, &data.to_string()).about(unit);
                if tx.receiver_count() > 0 {
                    if let Some(u) = &live.unit
                        && let Ok(mut c) = changed.lock()
                    {
                        let seq = data.pointer("/time/seq").and_then(Value::as_u64);
                        let at = c.entry(u.clone()).or_default();
                        *at = (*at).max(seq.unwrap_or(0));
                    }
                    let _ = tx.send(live);
                }
            }
            async { Next::Go }
        };
        let feeder = input::raw(Subscription::Stream(Box::pin(moved)), shutdown, feed);
        let feeder = tokio::spawn(async move {
            let _ = feeder.await;
            pump.abort();
        });
        Ok((hub, feeder))
    }

    /// A new client's receiver.
    pub fn subscribe(&self) -> broadcast::Receiver<Live> {
        self.tx.subscribe()
    }

    /// Live streams open now.
    pub fn listeners(&self) -> usize {
        self.tx.receiver_count()
    }

    /// The units reported or steered since the last call, each with the
    /// sequence number of its latest report seen (0: steered only).
    pub fn take_changed(&self) -> Vec<(Arc<str>, u64)> {
        self.changed
            .lock()
            .map(|mut c| c.drain().collect())
            .unwrap_or_default()
    }

    /// Sends an event the console made itself (a `rows` batch).
    pub fn send(&self, live: Live) {
        let _ = self.tx.send(live);
    }
}

impl Seen {
    /// Counts an event for `/metrics` from its decoded value.
    fn count(&self, name: &str, v: &Value) {
        match name {
            "salute" => {
                self.reports.fetch_add(1, Ordering::Relaxed);
            }
            "task" => match v
                .get("event")
                .and_then(Value::as_str)
                .and_then(EventName::parse)
            {
                Some(EventName::TaskStart) => {
                    self.claims.fetch_add(1, Ordering::Relaxed);
                }
                Some(EventName::LeaseExpired) => {
                    self.lease_expiries.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            },
            _ => {}
        }
    }
}

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_millis(xo_runtime::config::EVENT_KEEPALIVE_MS);
/// Frames a client that fell behind gets in one write.
const BATCH: usize = 64;

/// The event names a stream can ask for with `?only=` (`lagged` always comes).
pub const NAMES: [&str; 9] = [
    "salute",
    "steer",
    "task",
    "runner",
    "review",
    "fleet",
    "settings",
    "directive",
    "rows",
];

/// `GET /api/v1/events`: the live feed as Server-Sent Events. `?only=`
/// takes a comma-separated list of event names, `?unit=` keeps only the
/// reports, steering and row of one unit, `?view=` only the rows a fleet
/// page shows (the id on its table, [`crate::views`]). Frames are formatted once in the hub
/// and shared; a client with several waiting gets them in one write.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EventsQuery {
    /// Comma-separated event names to receive (default: every event).
    #[serde(default)]
    pub only: Option<String>,
    /// Only this unit's `salute`, `steer` and row.
    #[serde(default)]
    pub unit: Option<String>,
    /// Only the rows of this fleet page (the `data-view` of its table).
    #[serde(default)]
    pub view: Option<String>,
}

pub async fn sse(
    State(c): State<Shared>,
    aide::NoApi(axum::extract::Query(q)): aide::NoApi<
        axum::extract::Query<BTreeMap<String, String>>,
    >,
) -> aide::NoApi<Response> {
    aide::NoApi(sse_stream(c, q).await)
}

async fn sse_stream(c: Shared, q: BTreeMap<String, String>) -> Response {
    let only: Option<Vec<&'static str>> = match q.get("only") {
        None => None,
        Some(s) => {
            let mut names = Vec::new();
            for n in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                match NAMES.iter().find(|k| **k == n) {
                    Some(k) => names.push(*k),
                    None => {
                        return (
                            StatusCode::BAD_REQUEST,
                            format!(
                                "?only= names an event {n:?} the console does not send; the events are {}\n",
                                NAMES.join(", ")
                            ),
                        )
                            .into_response();
                    }
                }
            }
            Some(names)
        }
    };
    let unit: Option<Arc<str>> = match q.get("unit").filter(|u| !u.is_empty()) {
        None => None,
        Some(u) => match xo_proto::validate_token("unit", u) {
            Ok(()) => Some(Arc::from(u.as_str())),
            Err(e) => {
                return (StatusCode::BAD_REQUEST, format!("?unit=: {e}\n")).into_response();
            }
        },
    };
    // A page's view not (or no longer) known: every row, as without one.
    let view = q.get("view").and_then(|id| c.views.claim(id));
    let wanted = Filter { only, unit, view };
    let seen = c.hub.seen.clone();
    // A slot a stream, held until it closes: beyond the bound, 503.
    let Ok(slot) = c.hub.streams.clone().try_acquire_owned() else {
        use std::sync::atomic::Ordering;
        let n = c.hub.streams_refused.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                max = c.hub.max_streams,
                refused = n,
                "event stream refused: at console.max_event_streams (logged at 1, 2, 4…)"
            );
        }
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            format!(
                "{} live event streams are open (console.max_event_streams); close one or try again later\n",
                c.hub.max_streams
            ),
        )
            .into_response();
    };
    let rx = c.hub.subscribe();
    let stream = futures::stream::unfold((rx, wanted, slot), move |(mut rx, mut wanted, slot)| {
        let seen = seen.clone();
        async move {
            loop {
                let first = match tokio::time::timeout(KEEP_ALIVE, rx.recv()).await {
                    Err(_) => {
                        return Some((
                            Ok::<_, Infallible>(Bytes::from_static(b": keep-alive\n\n")),
                            (rx, wanted, slot),
                        ));
                    }
                    Ok(Ok(ev)) => ev,
                    Ok(Err(broadcast::error::RecvError::Lagged(n))) => {
                        let frame = Live::new("lagged", &format!("{{\"missed\":{n}}}")).frame;
                        return Some((Ok(frame), (rx, wanted, slot)));
                    }
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                };
                // The waiting frames this client wants, in one write.
                let mut frames: Vec<Bytes> = Vec::new();
                let mut next = Some(first);
                while let Some(ev) = next.take() {
                    if let Some(frame) = wanted.frame(ev) {
                        frames.push(frame);
                    }
                    if frames.len() < BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                let chunk = match frames.len() {
                    0 => continue,
                    1 => frames.swap_remove(0),
                    _ => Bytes::from(frames.concat()),
                };
                seen.live_bytes
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                return Some((Ok(chunk), (rx, wanted, slot)));
            }
        }
    });
    // Open streams end when the console stops (graceful shutdown waits for them).
    use futures::StreamExt;
    let stop = c.stop.clone();
    let stream = stream.take_until(async move { stop.signal().await });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// What one stream takes of the feed.
struct Filter {
    only: Option<Vec<&'static str>>,
    unit: Option<Arc<str>>,
    view: Option<crate::views::View>,
}

impl Filter {
    /// The frame this stream sends for `ev`, if any: a `rows` batch cut
    /// down to the rows its unit or its page takes.
    fn frame(&mut self, ev: Live) -> Option<Bytes> {
        if self.only.as_ref().is_some_and(|o| !o.contains(&ev.name)) {
            return None;
        }
        if let (Some(want), Some(of)) = (&self.unit, &ev.unit)
            && want != of
        {
            return None;
        }
        match (&ev.rows, &self.unit, &mut self.view) {
            // A unit page: its row, when the batch has it (the counts are
            // the fleet page's).
            (Some(rows), Some(unit), _) => rows
                .rows
                .iter()
                .any(|r| *r.unit == **unit)
                .then(|| Live::new("rows", &rows.json(|r| *r.unit == **unit)).frame),
            (Some(rows), None, Some(view)) => {
                Some(Live::new("rows", &rows.json(|r| view.wants(r))).frame)
            }
            _ => Some(ev.frame),
        }
    }
}

/// The subjects the hub listens on (for the docs and the tests).
pub fn patterns(subjects: &Subjects) -> Vec<String> {
    vec![
        subjects.salute_all(),
        subjects.steer_all(),
        subjects.event_all(),
        format!("{}.directive.*", subjects.prefix()),
    ]
}
