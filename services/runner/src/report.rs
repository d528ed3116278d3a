//! Reporting to the XO and hearing from it: SALUTE reports built from the
//! agent's turns ([`SaluteState`]), heartbeats, the steering intake and
//! the queue's interrupts. Each runs as a task of the worker and ends on its shutdown signal.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{Instrument, info, info_span, warn};
use xo_bus::input::{self, Next};
use xo_bus::{Bus, Headers, typed};
use xo_pipeline::driver::{Turn, Turns};
use xo_proto::queue::Interrupt;
use xo_proto::{Steering, SteeringSource};
use xo_radio::Microcosm;
use xo_runtime::XoConfig;
use xo_sensor::salute::SaluteState;

use crate::RunnerOptions;

/// What the reporting tasks share with the worker.
pub struct Links {
    /// The agent's turns as the driver sees them, each with its task.
    pub events: mpsc::UnboundedReceiver<Turn>,
    /// Also the task in hand (heartbeats name it).
    pub turns: Turns,
    /// Where the queue's interrupts go.
    pub interrupts: watch::Sender<Option<Interrupt>>,
}

/// Starts the reporting and listening tasks; each ends on `shutdown`.
pub async fn spawn(
    bus: &Bus,
    cfg: &XoConfig,
    opts: &RunnerOptions,
    links: Links,
    shutdown: &xo_runtime::tree::Shutdown,
) -> Result<Vec<JoinHandle<()>>, xo_bus::BusError> {
    let Links {
        events: rx,
        turns,
        interrupts,
    } = links;
    let steer_sub = bus.subscribe(&cfg.subjects().steer(&opts.unit)).await?;
    let interrupt_sub = bus.subscribe(&cfg.subjects().interrupt(&opts.unit)).await?;
    let dead = |name| input::DeadLetters::new(bus.clone(), cfg.subjects(), name);
    let limit = cfg.wire.max_payload;
    let cooldown = u64::from(profile_cooldown(cfg, &opts.role));
    Ok(vec![
        input::typed(
            interrupt_sub,
            limit,
            dead("runner: interrupts"),
            shutdown.signal(),
            move |(i, _): (Interrupt, Headers)| {
                let _ = interrupts.send(Some(i));
                async { Next::Go }
            },
        ),
        input::typed(
            steer_sub,
            limit,
            dead("runner: steering"),
            shutdown.signal(),
            {
                let turns = turns.clone();
                move |(s, headers): (Steering, Headers)| {
                    steered(&turns, s, &headers, cooldown);
                    async { Next::Go }
                }
            },
        ),
        tokio::spawn(
            until(
                shutdown.signal(),
                reporter(bus.clone(), cfg.clone(), opts.clone(), rx, turns.clone()),
            )
            .in_current_span(),
        ),
        tokio::spawn(
            until(
                shutdown.signal(),
                heartbeats(bus.clone(), cfg.clone(), opts.clone(), turns.clone()),
            )
            .in_current_span(),
        ),
    ])
}

/// Runs `work` until `shutdown` resolves.
async fn until(shutdown: impl Future<Output = ()>, work: impl Future<Output = ()>) {
    tokio::select! {
        _ = shutdown => {}
        _ = work => {}
    }
}

/// One steering message: given to the agent's next turn, unless it is the
/// XO's of an anomaly the runner's own check already steered, or a resend.
/// (The queue's interrupts need no more: the worker acts on the one naming
/// its task; an undecodable one is dead-lettered, and the next lease
/// renewal carries it anyway.)
fn steered(turns: &Turns, s: Steering, headers: &Headers, cooldown: u64) {
    // In the trace of the report that caused it (the task's).
    let span = info_span!("steering.received", kind = %s.kind.as_str(), severity = ?s.severity, source = ?s.source);
    xo_bus::trace::link(&span, headers);
    let _in = span.enter();
    if s.source == SteeringSource::Xo
        && let Some(own) = turns.steered_itself(&s, cooldown)
    {
        info!(kind = %s.kind.as_str(), turn = s.turn, own_turn = own, "the XO's steering of an anomaly the runner's own check gave at its turn; not given again");
        return;
    }
    if turns.push(&s) {
        info!(kind = %s.kind.as_str(), severity = ?s.severity, source = ?s.source, "steering received");
    } else {
        info!(id = %s.id, "steering received again (a supervisor taking over resends what may not have gone); ignored");
    }
}

async fn heartbeats(bus: Bus, cfg: XoConfig, opts: RunnerOptions, turns: Turns) {
    let subjects = cfg.subjects();
    let mut seq = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.runner.heartbeat_ms));
    loop {
        tick.tick().await;
        seq += 1;
        let mut hb = xo_proto::Heartbeat::new(&opts.unit, &opts.role, seq);
        hb.task_id = turns.task().map(|t| t.task_id);
        if let Err(e) =
            typed::publish(&bus, &subjects.heartbeat(&opts.unit), &hb, cfg.wire.format).await
        {
            warn!(error = %e, "heartbeat not published");
        }
    }
}

fn profile_cooldown(cfg: &XoConfig, role: &str) -> u32 {
    cfg.roles().get(role).doctrine.cooldown_turns
}

/// Builds SALUTE reports from the agent's turns; publishes one every
/// `salute_interval_turns` turns and at each new task; runs the radio
/// in-process in microcosm mode, steering the agent on the turn it sees an
/// anomaly (unless the XO steered that kind within a cooldown), and tells
/// the XO in the next report (`status.self_steered`), which then does not
/// steer it again.
async fn reporter(
    bus: Bus,
    cfg: XoConfig,
    opts: RunnerOptions,
    mut rx: mpsc::UnboundedReceiver<Turn>,
    turns: Turns,
) {
    let subjects = cfg.subjects();
    let profile = cfg.roles().get(&opts.role).clone();
    // Reports published, and those the server did not confirm (published
    // with no connection, or on a connection that failed before its next
    // round trip): they may be lost, and are counted, never silent.
    let mut published = 0u64;
    let unconfirmed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Sharded supervision: the reports go into the stream the supervisors
    // read, each acknowledged by it.
    let acked = (cfg.supervisor.partitions > 1).then(|| {
        Acked::spawn(
            bus.clone(),
            subjects.salute(&opts.unit),
            unconfirmed.clone(),
        )
    });
    let interval = u64::from(profile.doctrine.salute_interval_turns.max(1));
    let mut micro = cfg.runner.microcosm.then(|| Microcosm::new(profile));
    let host = std::env::var("HOSTNAME").ok();
    let mut s = SaluteState::new(&opts.unit, &opts.role, host, cfg.runner.context_limit);
    let cooldown = u64::from(profile_cooldown(&cfg, &opts.role));
    // Given since the last report published.
    let mut self_steered: Vec<xo_proto::SelfSteered> = Vec::new();
    // What the unit waits for, until its next task.
    let mut waiting: Option<xo_proto::UnitNeeds> = None;
    while let Some(Turn {
        event,
        task: working,
        waiting: wait,
    }) = rx.recv().await
    {
        let task = working.as_ref().map(|w| w.task_id.clone());
        let new_task = s.task() != task.as_deref();
        if let Some(needs) = wait {
            // Reported at once: the task is over, no turn follows it.
            waiting = Some(needs.clone());
            if let Some(mut report) = s.waiting(needs) {
                published += 1;
                report.time.seq = published;
                info!(reason = %waiting.as_ref().map(|n| n.reason.as_str()).unwrap_or(""), "the runner's unit waits for a person");
                if let Some(acked) = &acked {
                    acked.send(&opts.unit, &report, cfg.wire.format);
                } else if let Err(e) =
                    typed::publish(&bus, &subjects.salute(&opts.unit), &report, cfg.wire.format)
                        .await
                {
                    warn!(error = %e, "salute not published");
                }
            }
            continue;
        }
        if new_task {
            s.start_task(task);
            // A new task: it no longer waits for the last one's answer.
            waiting = None;
        }
        let mut report = s.turn(event);
        report.status.needs = waiting.clone();
        if let Some(m) = micro.as_mut() {
            let task_turn = turns.usage().turns;
            for mut st in m.turn(&mut report) {
                // The XO steered this kind moments ago: it is covered.
                if turns
                    .xo_steered(st.kind)
                    .is_some_and(|t| task_turn < t + cooldown)
                {
                    continue;
                }
                st.source = SteeringSource::SelfCheck;
                info!(kind = %st.kind.as_str(), turn = report.time.turn, source = ?SteeringSource::SelfCheck, "the runner's own check steers its agent");
                if turns.push(&st) {
                    self_steered.push(xo_proto::SelfSteered {
                        kind: st.kind,
                        severity: st.severity,
                        turn: st.turn,
                    });
                }
            }
        }
        if new_task || report.time.turn.is_multiple_of(interval) {
            report.status.self_steered = std::mem::take(&mut self_steered);
            // Numbered by publication, not by turn (a report every few
            // turns): a gap the XO sees is a report lost on the way.
            published += 1;
            report.time.seq = published;
            // In the task's trace: the XO's check of this report is its child.
            let span = match &working {
                Some(w) => {
                    info_span!(parent: &w.span, "salute.report", seq = published, turn = report.time.turn)
                }
                None => tracing::Span::none(),
            };
            if let Some(acked) = &acked {
                span.in_scope(|| acked.send(&opts.unit, &report, cfg.wire.format));
                continue;
            }
            let connected = bus.is_connected();
            if let Err(e) =
                typed::publish(&bus, &subjects.salute(&opts.unit), &report, cfg.wire.format)
                    .instrument(span)
                    .await
            {
                warn!(error = %e, "salute not published");
            }
            // Core NATS keeps nothing for a publisher without a working
            // connection: a round trip after the report confirms it reached
            // the server (off the turn's path).
            let (bus, unconfirmed, seq) = (bus.clone(), unconfirmed.clone(), report.time.seq);
            tokio::spawn(async move {
                let confirmed = connected
                    && matches!(
                        tokio::time::timeout(Duration::from_secs(3), bus.flush()).await,
                        Ok(Ok(()))
                    );
                if !confirmed {
                    let total = unconfirmed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    warn!(
                        seq,
                        total,
                        "report published without a confirmed connection to NATS: it may be lost"
                    );
                }
            });
        }
    }
}

/// How long a report is offered to the reports stream (retried under its
/// id, so stored once) before it is counted as not confirmed: longer than a
/// client's move to another node (two pings, 10 s) and a stream leader's
/// election.
const ACKED_FOR: Duration = Duration::from_secs(20);

/// Reports waiting for the stream, at most: beyond, one is counted and
/// dropped at once (the stream has been gone for a long time).
const ACKED_QUEUE: usize = 1024;

/// Sharded supervision: reports are published into the stream the
/// supervisors read (`XO_REPORTS`), one at a time in order, each waiting
/// for the stream's acknowledgement and retried under its id (`unit`,
/// `epoch`, `seq`) until [`ACKED_FOR`]; a report still not acknowledged
/// then, or not queued, is counted and logged, never silent.
struct Acked {
    tx: mpsc::Sender<(u64, String, xo_bus::Headers, bytes::Bytes)>,
    unconfirmed: Arc<std::sync::atomic::AtomicU64>,
}

impl Acked {
    fn spawn(bus: Bus, subject: String, unconfirmed: Arc<std::sync::atomic::AtomicU64>) -> Self {
        let (tx, mut rx) =
            mpsc::channel::<(u64, String, xo_bus::Headers, bytes::Bytes)>(ACKED_QUEUE);
        let count = unconfirmed.clone();
        tokio::spawn(
            async move {
                while let Some((seq, id, headers, payload)) = rx.recv().await {
                    let began = std::time::Instant::now();
                    let mut wait = Duration::from_millis(100);
                    let mut last = None;
                    while began.elapsed() < ACKED_FOR {
                        match bus
                            .publish_acked(&subject, headers.clone(), payload.clone(), &id, Duration::from_secs(2))
                            .await
                        {
                            Ok(()) => {
                                last = None;
                                break;
                            }
                            Err(e) => last = Some(e),
                        }
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(Duration::from_secs(1));
                    }
                    if let Some(e) = last {
                        let total = count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        warn!(
                            seq,
                            total,
                            error = %e,
                            "report published without a confirmed connection to NATS: the reports stream did not acknowledge it; it may be lost"
                        );
                    }
                }
            }
            .in_current_span(),
        );
        Self { tx, unconfirmed }
    }

    /// Queues a report for the stream (the turn does not wait).
    fn send(&self, unit: &str, report: &xo_proto::SaluteReport, format: xo_proto::codec::Format) {
        let seq = report.time.seq;
        let (headers, payload) = match typed::encode(report, format) {
            Ok(x) => x,
            Err(e) => {
                warn!(seq, error = %e, "salute not encoded");
                return;
            }
        };
        let id = format!("{unit}.{}.{seq}", report.time.epoch);
        if self.tx.try_send((seq, id, headers, payload)).is_err() {
            let total = self
                .unconfirmed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            warn!(
                seq,
                total,
                "report published without a confirmed connection to NATS: {ACKED_QUEUE} reports already wait for the reports stream; this one is dropped"
            );
        }
    }
}
