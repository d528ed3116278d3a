//! The notifier: every alert published on `xo.event.alert.*` (blocked and
//! failed tasks, questions waiting for an answer, stuck queues, failed
//! fleet roles, spent budgets) is POSTed to each configured webhook that
//! wants its kind — the alert as JSON, or a Slack-compatible `{"text"}`.
//!
//! The tree: a one-for-one root over one actor that routes alerts to one
//! delivery task per webhook, so a slow or dead receiver holds up only its
//! own alerts, in order. A delivery is retried with doubling backoff
//! (`alerts.attempts`, `alerts.backoff_ms`); one that never lands — or is
//! still waiting at shutdown — is written to the dead-letter file (one JSON
//! line: the alert, the webhook, the last error) and published on
//! `xo.dlq.<subject>`. Nothing is dropped silently. Inputs: the alert
//! subscription. Shutdown: the subscription ends, the actor stops, each
//! delivery task finishes the attempt in flight and dead-letters the rest.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};
use xo_bus::{Bus, input, typed};
use xo_proto::alert::Alert;
use xo_proto::{Format, Subjects};
use xo_runtime::ServiceCtx;
use xo_runtime::XoConfig;
use xo_runtime::config::{AlertsConfig, Webhook, WebhookFormat};
use xo_runtime::tree::{Factory, Intensity, Running, Shutdown};

#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
    /// The runtime: an actor tree that did not start or gave up, no store.
    #[error(transparent)]
    Runtime(#[from] xo_runtime::RuntimeError),
    #[error("http client: {0}")]
    Client(String),
}

xo_bus::bus_error_from!(NotifyError);
xo_runtime::runtime_error_from!(NotifyError);

/// The notifier's one message: an alert to deliver.
#[derive(Debug)]
pub enum NotifyMsg {
    Alert(Box<Alert>),
}

/// One dead-lettered delivery.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct DeadLetter {
    pub alert: Alert,
    pub url: String,
    pub attempts: u32,
    pub error: String,
    pub at: u64,
}

/// What every delivery task shares.
#[derive(Clone)]
struct Delivery {
    client: reqwest::Client,
    cfg: AlertsConfig,
    dead: PathBuf,
    bus: Bus,
    subjects: Subjects,
    format: Format,
    /// Now, for a dead letter's time.
    clock: xo_runtime::Clock,
    /// Triggered at shutdown: no more retries; what waits is dead-lettered.
    stop: Shutdown,
}

/// The actor (configuration only).
#[derive(Clone)]
pub struct NotifyActor {
    webhooks: Vec<Webhook>,
    delivery: Delivery,
}

impl std::fmt::Debug for NotifyActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyActor")
            .field("webhooks", &self.webhooks.len())
            .finish()
    }
}

pub struct State {
    /// One queue a webhook, in `webhooks` order.
    queues: Vec<mpsc::UnboundedSender<Alert>>,
}

/// A running notifier.
pub struct NotifyHandle {
    running: Running<NotifyMsg>,
    stop: Shutdown,
    tasks: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
    bus: Bus,
}

impl std::fmt::Debug for NotifyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyHandle").finish()
    }
}

impl NotifyHandle {
    /// Waits for `shutdown`, or for the tree to give up.
    pub async fn until(&mut self, shutdown: impl std::future::Future<Output = ()>) {
        self.running.until(shutdown).await
    }

    /// Stops in order: the subscription, the actor, then the deliveries
    /// (the attempt in flight finishes; what waits is dead-lettered).
    pub async fn stop(self) -> Result<(), NotifyError> {
        self.stop.trigger();
        let escalated = self.running.stop().await;
        let tasks: Vec<_> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
        let _ = self.bus.flush().await;
        escalated.map_err(NotifyError::from)
    }
}

/// The dead-letter file: `alerts.dead_letter_file`, else
/// `<data_dir>/alerts.dead.jsonl`.
pub fn dead_letter_file(cfg: &XoConfig) -> PathBuf {
    if cfg.alerts.dead_letter_file.is_empty() {
        cfg.data_dir().join("alerts.dead.jsonl")
    } else {
        PathBuf::from(&cfg.alerts.dead_letter_file)
    }
}

/// Subscribes to the alerts and starts the tree.
pub async fn start(ctx: ServiceCtx) -> Result<NotifyHandle, NotifyError> {
    let ServiceCtx {
        cfg,
        bus,
        shutdown,
        clock,
        ..
    } = ctx;
    let cfg = &cfg;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(cfg.alerts.timeout_ms))
        .build()
        .map_err(|e| NotifyError::Client(e.to_string()))?;
    let stop = Shutdown::new();
    let tasks: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>> = Default::default();
    let actor = NotifyActor {
        webhooks: cfg.alerts.webhooks.clone(),
        delivery: Delivery {
            client,
            cfg: cfg.alerts.clone(),
            dead: dead_letter_file(cfg),
            bus: bus.clone(),
            subjects: cfg.subjects(),
            format: cfg.wire.format,
            clock,
            stop: stop.clone(),
        },
    };
    let factory: Factory<NotifyActor> = {
        let tasks = tasks.clone();
        Arc::new(move || {
            let tasks = tasks.clone();
            Box::pin(async move { Ok(tasks) })
        })
    };
    let mut running = Running::one_for_one("notify", actor, Intensity::of(cfg), factory)
        .await?
        .ending_on(shutdown);
    let sub = bus.subscribe(&cfg.subjects().alert_all()).await?;
    let dead = input::DeadLetters::new(bus.clone(), cfg.subjects(), "alerts");
    running.input(input::cast(
        sub,
        cfg.wire.max_payload,
        dead,
        running.signal(),
        running.current.clone(),
        |a: Alert| NotifyMsg::Alert(Box::new(a)),
    ));
    bus.flush().await?;
    info!(
        webhooks = cfg.alerts.webhooks.len(),
        dead_letters = %dead_letter_file(cfg).display(),
        "notifier started"
    );
    Ok(NotifyHandle {
        running,
        stop,
        tasks,
        bus,
    })
}

impl Actor for NotifyActor {
    type Msg = NotifyMsg;
    type State = State;
    /// Where the delivery tasks are kept for the handle to await.
    type Arguments = Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>;

    async fn pre_start(
        &self,
        _me: ActorRef<NotifyMsg>,
        keep: Self::Arguments,
    ) -> Result<State, ActorProcessingErr> {
        let mut queues = Vec::new();
        let mut tasks = keep.lock().unwrap_or_else(|p| p.into_inner());
        for w in &self.webhooks {
            let (tx, rx) = mpsc::unbounded_channel();
            queues.push(tx);
            // The handle awaits them at stop (a restarted actor makes new
            // ones; the old ones finish what they hold).
            tasks.push(tokio::spawn(deliver_all(
                self.delivery.clone(),
                w.clone(),
                rx,
            )));
        }
        Ok(State { queues })
    }

    async fn handle(
        &self,
        _me: ActorRef<NotifyMsg>,
        msg: NotifyMsg,
        st: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        let NotifyMsg::Alert(a) = msg;
        debug!(kind = %a.kind, title = %a.title, "alert");
        for (w, q) in self.webhooks.iter().zip(&st.queues) {
            let wanted = w.kinds.is_empty() || w.kinds.contains(&a.kind);
            if wanted && q.send((*a).clone()).is_err() {
                // The delivery task ended (shutdown): keep the alert.
                dead_letter(&self.delivery, &a, &w.url, 0, "notifier stopping").await;
            }
        }
        Ok(())
    }
}

/// The body a webhook gets (JSON formats; ntfy's is [`ntfy`]'s text).
pub fn body(format: WebhookFormat, a: &Alert) -> serde_json::Value {
    match format {
        WebhookFormat::Json => serde_json::to_value(a).unwrap_or(serde_json::Value::Null),
        WebhookFormat::Slack => {
            let mut text = format!("*XO: {}*\n{}", a.title, a.detail);
            if let Some(p) = &a.project {
                text.push_str(&format!("\nproject `{p}`"));
            }
            serde_json::json!({ "text": text })
        }
        WebhookFormat::Ntfy => serde_json::Value::String(ntfy(a, "").body),
    }
}

/// A notification as ntfy's publish API takes it: the message as the
/// body, the rest as headers (docs.ntfy.sh/publish: `Title`, `Priority`
/// 1-5, `Tags` comma-separated, `Click` a URL).
#[derive(Debug, Clone, PartialEq)]
pub struct Ntfy {
    pub body: String,
    pub title: String,
    pub priority: u8,
    pub tags: String,
    /// Empty: no `Click` header.
    pub click: String,
}

/// What ntfy gets for `a`; `console` is `alerts.console_url` (links to the
/// unit's or the task's page when set).
pub fn ntfy(a: &Alert, console: &str) -> Ntfy {
    use xo_proto::alert::AlertKind as K;
    // A person is waiting on these: high; the fabric's own trouble: default.
    let (priority, tag) = match a.kind {
        K::UnitNeedsYou => (4, "raising_hand"),
        K::Question => (4, "question"),
        K::TaskBlocked | K::BudgetExhausted => (4, "warning"),
        K::QueueStuck | K::RoleFailed | K::QueueHalted | K::ReportsLost => (3, "rotating_light"),
        K::LeaseRefused => (3, "lock"),
        K::KnowledgeReview => (3, "memo"),
    };
    let console = console.trim_end_matches('/');
    let click = match (&a.unit, &a.task_id) {
        _ if console.is_empty() => String::new(),
        (Some(u), _) => format!("{console}/units/{}", path_segment(u)),
        (None, Some(t)) => format!("{console}/tasks/{}", path_segment(t)),
        (None, None) => console.to_string(),
    };
    Ntfy {
        body: a.detail.clone(),
        title: format!("XO: {}", a.title),
        priority,
        tags: format!("{tag},{}", a.kind),
        click,
    }
}

/// Percent-encodes what is not a URL path's unreserved character
/// (`percent-encoding`).
fn path_segment(s: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// A header value as HTTP carries it: ASCII as is (control characters
/// dropped), anything else as an RFC 2047 encoded word, which ntfy decodes.
pub fn header_text(s: &str) -> String {
    let clean: String = s.chars().filter(|c| !c.is_control()).collect();
    if clean.is_ascii() {
        return clean;
    }
    use base64::Engine;
    let enc = base64::engine::general_purpose::STANDARD.encode(clean.as_bytes());
    format!("=?UTF-8?B?{enc}?=")
}

fn authorization(w: &Webhook) -> Option<String> {
    let v = w.authorization.trim();
    if v.is_empty() {
        return None;
    }
    match v.strip_prefix("env:") {
        Some(name) => std::env::var(name).ok(),
        None => Some(v.to_string()),
    }
}

/// Delivers one webhook's alerts in order until its queue closes.
async fn deliver_all(d: Delivery, w: Webhook, mut rx: mpsc::UnboundedReceiver<Alert>) {
    let mut held: std::collections::VecDeque<Alert> = Default::default();
    loop {
        let a = match held.pop_front() {
            Some(a) => a,
            None => match rx.recv().await {
                Some(a) => a,
                None => break,
            },
        };
        if d.stop.is_triggered() {
            dead_letter(&d, &a, &w.url, 0, "notifier stopped before delivery").await;
            continue;
        }
        // Many units needing a person at once page once: those that come
        // within group_ms go together; other alerts wait their turn.
        let a = if a.kind == xo_proto::alert::AlertKind::UnitNeedsYou && d.cfg.group_ms > 0 {
            let mut same = vec![a];
            let until = tokio::time::Instant::now() + Duration::from_millis(d.cfg.group_ms);
            while let Ok(Some(next)) = tokio::time::timeout_at(until, rx.recv()).await {
                if next.kind == xo_proto::alert::AlertKind::UnitNeedsYou {
                    same.push(next);
                } else {
                    held.push_back(next);
                }
            }
            grouped(same)
        } else {
            a
        };
        deliver(&d, &w, &a).await;
    }
}

/// Several `unit_needs_you` alerts as one: the count and the units in the
/// title, each unit's line in the text; one alone is itself.
pub fn grouped(mut alerts: Vec<Alert>) -> Alert {
    if alerts.len() == 1 {
        return alerts.remove(0);
    }
    let mut units: Vec<String> = Vec::new();
    for a in &alerts {
        let u = a.unit.clone().unwrap_or_else(|| "?".into());
        if !units.contains(&u) {
            units.push(u);
        }
    }
    let shown = units.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    let more = units.len().saturating_sub(5);
    let first = alerts.remove(0);
    let mut lines = vec![first.title.clone()];
    lines.extend(alerts.iter().map(|a| a.title.clone()));
    Alert {
        title: format!(
            "{} units need you: {shown}{}",
            units.len(),
            if more > 0 {
                format!(" (+{more} more)")
            } else {
                String::new()
            }
        ),
        detail: format!(
            "{}\n`xo units --needs` lists them with their evidence.",
            lines.join("\n")
        ),
        // No one unit to link to: the list.
        unit: None,
        task_id: None,
        ..first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_outside_ascii_is_an_encoded_word() {
        assert_eq!(header_text("plain\ntext"), "plaintext");
        // "é" is C3 A9: base64 "w6k=".
        assert_eq!(header_text("é"), "=?UTF-8?B?w6k=?=");
        assert_eq!(header_text("aé→"), "=?UTF-8?B?YcOp4oaS?=");
    }
}

/// One alert to one webhook: retried with doubling backoff and jitter
/// (`xo_runtime::retry::webhook`); a 4xx other
/// than 408/429 is not retried (the receiver refuses the request itself).
async fn deliver(d: &Delivery, w: &Webhook, a: &Alert) {
    let body = body(w.format, a);
    let push = (w.format == WebhookFormat::Ntfy).then(|| ntfy(a, &d.cfg.console_url));
    let auth = authorization(w);
    let mut delays =
        xo_runtime::retry::webhook(Duration::from_millis(d.cfg.backoff_ms), d.cfg.attempts);
    let mut last = String::new();
    for attempt in 1..=d.cfg.attempts {
        let mut req = match &push {
            None => d.client.post(&w.url).json(&body),
            Some(n) => {
                let mut r = d
                    .client
                    .post(&w.url)
                    .header("content-type", "text/plain; charset=utf-8")
                    .header("title", header_text(&n.title))
                    .header("priority", n.priority.to_string())
                    .header("tags", header_text(&n.tags))
                    .body(n.body.clone());
                if !n.click.is_empty() {
                    r = r.header("click", header_text(&n.click));
                }
                r
            }
        };
        if let Some(v) = &auth {
            req = req.header("authorization", v);
        }
        let retry = match req.send().await {
            Ok(r) if r.status().is_success() => {
                debug!(url = %w.url, kind = %a.kind, attempt, "alert delivered");
                return;
            }
            Ok(r) => {
                let s = r.status();
                last = format!("HTTP {s}");
                s.is_server_error() || s.as_u16() == 408 || s.as_u16() == 429
            }
            Err(e) => {
                last = e.to_string();
                true
            }
        };
        if !retry {
            warn!(url = %w.url, error = %last, "webhook refused the alert; not retried");
            dead_letter(d, a, &w.url, attempt, &last).await;
            return;
        }
        let Some(wait) = delays.next() else {
            break;
        };
        warn!(url = %w.url, attempt, error = %last, "alert not delivered; retrying");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = d.stop.signal() => {
                dead_letter(d, a, &w.url, attempt, &format!("notifier stopped while retrying: {last}")).await;
                return;
            }
        }
    }
    error!(url = %w.url, attempts = d.cfg.attempts, error = %last, "alert not delivered; dead-lettered");
    dead_letter(d, a, &w.url, d.cfg.attempts, &last).await;
}

async fn dead_letter(d: &Delivery, a: &Alert, url: &str, attempts: u32, error: &str) {
    let rec = DeadLetter {
        alert: a.clone(),
        url: url.to_string(),
        attempts,
        error: error.to_string(),
        at: d.clock.now_ms(),
    };
    if let Err(e) = xo_runtime::jsonl::append(&d.dead, &rec).await {
        error!(path = %d.dead.display(), error = %e, "dead letter not written");
    }
    let subject = d.subjects.dlq(&d.subjects.alert(a.kind));
    if let Err(e) = typed::publish(&d.bus, &subject, a, d.format).await {
        warn!(error = %e, "dead letter not published");
    }
}

xo_runtime::service_handle!(NotifyHandle, "notify");
