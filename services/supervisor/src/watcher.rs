//! A unit's watcher: runs the radio check on each report, sends steering,
//! tracks liveness, and hands its state to the persister. Watchers live in
//! the group actors (`group.rs`), many to an actor: an actor of its own would
//! cost a unit ~5.7 KiB (its mailboxes and task) beside its ~2 KiB of state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ractor::RpcReplyPort;
use tracing::{Instrument, debug, info, info_span, warn};
use xo_bus::Headers;
use xo_proto::codec::Format;
use xo_proto::control::{AckUnit, Acknowledged, SteerUnit, UnitDetail, UnitSummary};
use xo_proto::steering::STEERING_TAG;
use xo_proto::{AnomalyKind, Evidence, Health, Heartbeat, SaluteReport, Steering, SteeringSource};
use xo_radio::Radio;

use crate::ctx::Ctx;
use crate::persist::{Persister, UnitRecord};
use crate::{decode, outbox};

pub enum WatcherMsg {
    /// A decoded report, its headers, and its payload as received (what is
    /// persisted, so the report is never encoded again).
    Report(Box<SaluteReport>, Headers, bytes::Bytes),
    /// A report as it arrived on the bus, decoded by the watcher, and the
    /// format its content type names (the pump read it).
    Received(xo_bus::Message, Option<Format>),
    /// A unit's latest report out of its group's overflow, its format, and
    /// how many older ones it replaced there (shed: not counted as a gap).
    Latest(xo_bus::Message, Option<Format>, u64),
    Heartbeat(Heartbeat),
    /// The liveness check at `now` (ms), silence counted from the second
    /// (`None`: the supervisor hears nobody), and a save if one is due.
    Tick(u64, Option<u64>),
    Summary(RpcReplyPort<UnitSummary>),
    Detail(RpcReplyPort<UnitDetail>),
    Operator(SteerUnit, RpcReplyPort<Steering>),
    /// An operator acknowledges the unit.
    Ack(AckUnit, RpcReplyPort<UnitSummary>),
}

/// Reports refused in a row for their epoch that flag the unit amber.
pub const REFUSED_FLAG: u32 = 3;

/// What the root reads of a watcher without messaging it: liveness checks
/// and persistence sweeps touch only the units that need them.
#[derive(Debug, Default)]
pub struct Liveness {
    pub last_seen: AtomicU64,
    pub stale: AtomicBool,
    /// Its last report said its session ended: the stale sweep passes it.
    pub ended: AtomicBool,
    /// Changed since last handed to the persister.
    pub dirty: AtomicBool,
    /// The unit needs a person: when it was last paged (ms; 0 when it does
    /// not), so the tick reaches it for a reminder.
    pub paged_at: AtomicU64,
}

pub struct WatcherArgs {
    pub ctx: Arc<Ctx>,
    pub unit: String,
    /// State to resume from (after a supervisor or watcher restart).
    pub record: Option<UnitRecord>,
    pub restarts: u32,
    pub live: Arc<Liveness>,
}

pub struct WatcherState {
    ctx: Arc<Ctx>,
    rec: UnitRecord,
    live: Arc<Liveness>,
    /// Changed since it was last handed to the persister.
    dirty: bool,
    last_saved: u64,
    /// The role profiles of the settings version last seen.
    roles: (u64, Arc<xo_radio::Roles>),
    /// Its last reports, compact, for the unit page's charts (in memory:
    /// they start over with the supervisor).
    history: std::collections::VecDeque<Point>,
    /// The unit came to need a person on the last report: the alert to
    /// publish with its steering.
    paged: Option<Box<xo_proto::alert::Alert>>,
}

/// One report for the charts, 16 bytes (memory per unit matters: issue 23).
#[derive(Debug, Clone, Copy)]
struct Point {
    turn: u32,
    /// Seconds since the Unix epoch.
    at_s: u32,
    /// Context fill in per-mille.
    fill: u16,
    turns_since_progress: u16,
    cost_usd: f32,
}

impl Point {
    fn of(r: &SaluteReport, now_ms: u64) -> Self {
        Self {
            turn: u32::try_from(r.time.turn).unwrap_or(u32::MAX),
            at_s: u32::try_from(now_ms / 1000).unwrap_or(u32::MAX),
            fill: (r.size.fill().clamp(0.0, 1.0) * 1000.0).round() as u16,
            turns_since_progress: u16::try_from(r.activity.turns_since_progress)
                .unwrap_or(u16::MAX),
            cost_usd: r.equipment.cost_usd as f32,
        }
    }

    fn wire(self) -> xo_proto::control::ReportPoint {
        xo_proto::control::ReportPoint {
            turn: u64::from(self.turn),
            at: u64::from(self.at_s) * 1000,
            context_fill: f64::from(self.fill) / 1000.0,
            cost_usd: f64::from(self.cost_usd),
            turns_since_progress: u32::from(self.turns_since_progress),
        }
    }
}

impl WatcherState {
    /// Hands the record to the persister once per persist interval
    /// ([`Persister::every_ms`]: longer past the write budget), at the
    /// unit's own point of it ([`Persister::due`]); a change in between is
    /// saved on a later tick or at stop. Encoding and writing therefore cost
    /// once per interval per unit, not once per report. A unit's first
    /// record is handed over at once.
    fn changed(&mut self) {
        let now = self.ctx.clock.now_ms();
        let every = self.ctx.persist.every_ms();
        if self.last_saved == 0 || Persister::due(&self.rec.unit, self.last_saved, now, every) {
            self.save(now);
        } else {
            self.dirty = true;
            self.live.dirty.store(true, Ordering::Relaxed);
        }
    }

    fn save(&mut self, now: u64) {
        self.ctx.persist.save(&self.rec);
        self.dirty = false;
        self.live.dirty.store(false, Ordering::Relaxed);
        self.last_saved = now.max(1);
    }

    /// Something arrived from the unit.
    fn seen(rec: &mut UnitRecord, live: &Liveness, now: u64) {
        rec.last_seen = now;
        live.last_seen.store(now, Ordering::Relaxed);
        if rec.stale {
            info!(unit = %rec.unit, "unit alive again");
            rec.stale = false;
            live.stale.store(false, Ordering::Relaxed);
        }
    }

    pub fn summary(&self) -> UnitSummary {
        let r = &self.rec;
        UnitSummary {
            unit: r.unit.clone(),
            role: r.role.clone(),
            health: r.health,
            self_health: r.self_health,
            self_note: r.self_note.clone(),
            stale: r.stale,
            ended: r.ended,
            refused_reports: r.refused_reports,
            turn: r.turn,
            seq: r.seq,
            last_seen: r.last_seen,
            task_id: r.task_id.clone(),
            context_fill: r.context_fill,
            steering_sent: r.steering_sent,
            restarts: r.restarts,
            pace: r.pace,
            turns_since_progress: r.turns_since_progress,
            cost_usd: r.cost_usd,
            last_steering: r.last_steering,
            needs: r.radio.needs.as_deref().cloned(),
            waiting_until: r.waiting_until,
            unreadable: r.unreadable,
            ack: self.ack_in_force(self.ctx.clock.now_ms()),
        }
    }

    /// The operator's acknowledgement, while it holds: not past its time,
    /// the unit no worse than it was (its health, a person needed since).
    fn ack_in_force(&self, now: u64) -> Option<Acknowledged> {
        let r = &self.rec;
        let a = r.ack.as_ref()?;
        let needs_since = r.radio.needs.as_deref().map(|n| n.since);
        let worse = r.health > a.health || needs_since.is_some_and(|s| s > a.at);
        (now < a.until && !worse).then(|| a.clone())
    }

    /// Drops an acknowledgement that no longer holds, saying why: once
    /// lapsed it does not come back (the unit getting better again).
    fn lapse_ack(&mut self, now: u64) {
        if self.rec.ack.is_some() && self.ack_in_force(now).is_none() {
            let a = self.rec.ack.take();
            info!(unit = %self.rec.unit, by = a.as_ref().map(|a| a.by.as_str()).unwrap_or(""), "acknowledgement lapsed (its time is up, or the unit got worse)");
            self.changed();
        }
    }

    /// The reminder for a unit that still needs a person.
    fn reminder(&self, now: u64) -> Option<xo_proto::alert::Alert> {
        let n = self.rec.radio.needs.as_deref()?;
        let report = self.rec.report()?;
        let mut a = needs_alert(&report, n);
        let waited = now.saturating_sub(n.since) / 60_000;
        a.title = format!("Reminder ({waited} min): {}", a.title);
        a.at = now;
        Some(a)
    }

    async fn send(&mut self, s: Steering) {
        outbox::send(&self.ctx, &s).await;
        self.record(s);
    }

    /// Keeps a steering sent (or about to be) in the unit's history.
    fn record(&mut self, s: Steering) {
        self.ctx.counters.steered(s.kind, s.at);
        self.rec.steering_sent += 1;
        keep(&mut self.rec, &self.ctx.persist, &s);
    }

    /// A report the pump routed here by its subject's unit, after
    /// `superseded` older ones of the unit were shed while it waited:
    /// decoded, checked, steered on.
    async fn received(
        &mut self,
        mut msg: xo_bus::Message,
        format: Option<Format>,
        superseded: u64,
    ) {
        let checked = match decode::decode_routed(&self.ctx, &msg, format, &self.rec.unit) {
            Ok(report) => self.check(report, &msg.headers, msg.payload, superseded),
            Err(e) => {
                crate::inbox::restore_content_type(&mut msg, format);
                Box::pin(decode::reject(&self.ctx, &msg, &e)).await;
                None
            }
        };
        self.steer(checked).await;
        self.lapse_ack(self.ctx.clock.now_ms());
    }

    /// Runs the radio check on a decoded report in a span that carries the
    /// unit, task, turn and seq, linked to the trace of the report. Returns
    /// the steering to send in that span, or `None` for a duplicate.
    ///
    /// Synchronous, and the sending apart: an actor's task reserves room
    /// for the largest future its handler awaits, for as long as it lives,
    /// so the report (and the publish future) must not live in one.
    /// `superseded` reports of the unit were shed before this one: that part
    /// of a gap in its sequence arrived, and is not counted as lost.
    fn check(
        &mut self,
        report: SaluteReport,
        headers: &Headers,
        raw: bytes::Bytes,
        superseded: u64,
    ) -> Option<(tracing::Span, Vec<Steering>)> {
        let span = info_span!(
            "radio.check",
            unit = %report.unit.unit,
            task = report.activity.task_id.as_deref().unwrap_or(""),
            turn = report.time.turn,
            seq = report.time.seq,
        );
        xo_bus::trace::link(&span, headers);
        let steering = span.in_scope(|| self.evaluate(report, raw, superseded))?;
        Some((span, steering))
    }

    /// Sends what a check decided (boxed: steering is rare) and hands the
    /// record to the persister.
    async fn steer(&mut self, checked: Option<(tracing::Span, Vec<Steering>)>) {
        let Some((span, steering)) = checked else {
            return;
        };
        if !steering.is_empty() {
            Box::pin(self.send_all(steering).instrument(span)).await;
        }
        if let Some(a) = self.paged.take() {
            Box::pin(page(&self.ctx, *a)).await;
        }
        self.changed();
    }

    async fn send_all(&mut self, steering: Vec<Steering>) {
        if self.ctx.shard.is_none() {
            for s in steering {
                self.send(s).await;
            }
            return;
        }
        // Sharded: the state that says the steering is going (and starts
        // its cooldown) is written before it goes, with the steering as
        // unsent, so that a supervisor taking the unit over after this one
        // dies neither decides it again nor loses it: it sends the unsent
        // ones again under the same ids, which the unit ignores if it had
        // them already.
        for s in &steering {
            self.record(s.clone());
        }
        self.rec.unsent = steering;
        if let Err(e) = self.ctx.persist.write_now(&self.rec).await {
            warn!(unit = %self.rec.unit, error = %e, "unit state not written before steering; a supervisor taking over may steer again");
        }
        self.send_unsent().await;
    }

    /// Publishes the steering recorded as unsent; then it is sent (the
    /// record says so at its next save).
    async fn send_unsent(&mut self) {
        for s in std::mem::take(&mut self.rec.unsent) {
            outbox::send(&self.ctx, &s).await;
        }
        // Written at the next flush (not the next persist interval): the
        // fewer steering a successor sends again.
        self.save(self.ctx.clock.now_ms());
    }

    /// A report refused for its epoch (not a seq seen again): counted on
    /// the unit; from the [`REFUSED_FLAG`]th in a row on, a unit the XO
    /// calls green is shown amber, since its heartbeats keep it alive while
    /// none of its reports is heard.
    fn refused(&mut self, report: &SaluteReport, why: &str) {
        self.ctx.counters.duplicates.fetch_add(1, Ordering::Relaxed);
        let n = self.rec.refused_reports.saturating_add(1);
        self.rec.refused_reports = n;
        if n.is_power_of_two() {
            warn!(unit = %report.unit.unit, epoch = report.time.epoch, known_epoch = self.rec.radio.epoch, seq = report.time.seq, refused = n, "report refused: {why} (logged at 1, 2, 4… in a row)");
        }
        if n >= REFUSED_FLAG && self.rec.health == Health::Green {
            self.rec.health = Health::Amber;
            self.changed();
        }
    }

    /// Runs the radio check and updates the unit's record; returns the
    /// steering to send, or `None` for a duplicate.
    fn evaluate(
        &mut self,
        report: SaluteReport,
        raw: bytes::Bytes,
        superseded: u64,
    ) -> Option<Vec<Steering>> {
        if self.rec.role != report.unit.role {
            self.rec.role = report.unit.role.clone();
        }
        // Borrowed, not cloned: an `Arc` clone per report would make every
        // core write the same reference count.
        let ctx = &*self.ctx;
        let version = ctx.live.version();
        if version != self.roles.0 {
            self.roles = (version, ctx.live.roles());
        }
        let profile = self.roles.1.get(&report.unit.role);
        let last_seq = self.rec.seq;
        // An epoch (the reporting process's start) ahead of the wall clock
        // by more than the skew is refused before it can become the unit's:
        // every later report would be a duplicate of it.
        if xo_radio::epoch_ahead(report.time.epoch, xo_proto::now_ms()) {
            self.refused(&report, "its epoch is ahead of this supervisor's clock");
            return None;
        }
        let needed = self
            .rec
            .radio
            .needs
            .as_ref()
            .map(|n| (n.reason, n.stretch_from));
        let a = xo_radio::check_unit(&mut self.rec.radio, profile, &report);
        if a.refused_epoch {
            self.refused(&report, "its epoch is an earlier life of the unit");
            return None;
        }
        if self.rec.refused_reports > 0 {
            info!(unit = %report.unit.unit, refused = self.rec.refused_reports, epoch = report.time.epoch, "reports heard again after some were refused for their epoch");
            self.rec.refused_reports = 0;
        }
        // A gap in the unit's sequence (not a restart, which starts over):
        // reports lost on the way.
        if !a.duplicate && !a.restarted && last_seq > 0 && report.time.seq > last_seq + 1 {
            let lost = (report.time.seq - last_seq - 1).saturating_sub(superseded);
            if lost > 0 {
                ctx.counters.gap(&report.unit.unit, lost);
            }
        }
        if a.duplicate {
            ctx.counters.duplicates.fetch_add(1, Ordering::Relaxed);
            debug!(unit = %report.unit.unit, seq = report.time.seq, "duplicate report ignored");
            return None;
        }
        // Not on a duplicate: a take-over reads old reports back, and they
        // say nothing of the unit being alive now.
        Self::seen(&mut self.rec, &self.live, ctx.clock.now_ms());
        ctx.counters.evaluated.incr();
        if a.restarted {
            info!(unit = %report.unit.unit, epoch = report.time.epoch, seq = report.time.seq, "unit restarted: its reports start over");
        }
        if !a.suppressed.is_empty() {
            debug!(unit = %report.unit.unit, turn = report.time.turn, suppressed = ?a.suppressed, "steering suppressed by cooldown");
        }
        self.rec.health = a.health;
        self.rec.self_health = report.status.health;
        self.rec.self_note = report
            .status
            .note
            .as_deref()
            .map(|n| n.chars().take(200).collect());
        if a.corrected {
            debug!(unit = %report.unit.unit, reported = ?report.status.health, assessed = ?a.health, "health corrected");
        }
        self.rec.turn = report.time.turn;
        self.rec.seq = report.time.seq;
        self.rec.context_fill = report.size.fill();
        self.rec.pace = report.unit.pace;
        self.rec.turns_since_progress = report.activity.turns_since_progress;
        self.rec.cost_usd = report.equipment.cost_usd;
        if self.history.len() >= xo_proto::control::HISTORY_POINTS {
            self.history.pop_front();
        } else if self.history.capacity() == 0 {
            self.history
                .reserve_exact(xo_proto::control::HISTORY_POINTS);
        }
        self.history
            .push_back(Point::of(&report, ctx.clock.now_ms()));
        if self.rec.task_id != report.activity.task_id {
            self.rec.task_id = report.activity.task_id.clone();
        }
        self.rec.keep_report(&raw);
        // What the unit's own check gave it is in its steering history
        // (not sent, not counted as the XO's).
        for own in &report.status.self_steered {
            debug!(unit = %report.unit.unit, kind = %own.kind.as_str(), turn = own.turn, "the unit steered itself: counted as steered");
            let given = Steering {
                v: xo_proto::PROTOCOL_VERSION,
                unit: report.unit.unit.clone(),
                id: format!("{}-{}-{}-self", report.unit.unit, own.turn, own.kind),
                kind: own.kind,
                severity: own.severity,
                message: format!(
                    "{STEERING_TAG} {} (given by the unit's own check)",
                    own.kind.as_str()
                ),
                turn: own.turn,
                at: report.time.at,
                evidence: Evidence::default(),
                source: SteeringSource::SelfCheck,
            };
            keep(&mut self.rec, &ctx.persist, &given);
        }
        if self.rec.waiting_until != report.status.waiting_until {
            self.rec.waiting_until = report.status.waiting_until;
            if let Some(until) = report.status.waiting_until {
                info!(unit = %report.unit.unit, until = %xo_runtime::clock::rfc3339(until), "waiting for its provider's usage limit to reset: not stale, not steered");
            }
        }
        if self.rec.unreadable != report.status.unreadable {
            if self.rec.unreadable == 0 {
                warn!(unit = %report.unit.unit, records = report.status.unreadable, "its sensor could not read some of the session's records: not steered on what it did until it can (xo import --stats on the file names them)");
            }
            self.rec.unreadable = report.status.unreadable;
        }
        if self.rec.ended != report.status.ended {
            self.rec.ended = report.status.ended;
            self.live
                .ended
                .store(report.status.ended, Ordering::Relaxed);
            if report.status.ended {
                info!(unit = %report.unit.unit, turn = report.time.turn, "session ended: not stale when silent");
            } else {
                info!(unit = %report.unit.unit, turn = report.time.turn, "session went on after its end");
            }
        }
        // Needs a person since this report (a stretch not paged for yet),
        // or moved again.
        match (&a.needs, needed) {
            (Some(n), before) if before != Some((n.reason, n.stretch_from)) => {
                warn!(unit = %report.unit.unit, reason = %n.reason, kind = ?n.kind, turn = n.turn, stretch_from = n.stretch_from, "unit needs a person");
                // Since when, by this supervisor's clock (a unit's own
                // clock may be anything).
                let now = ctx.clock.now_ms().max(1);
                let mut n = n.clone();
                n.since = now;
                if let Some(kept) = self.rec.radio.needs.as_deref_mut() {
                    kept.since = now;
                }
                self.paged = Some(Box::new(needs_alert(&report, &n)));
                self.live.paged_at.store(now, Ordering::Relaxed);
            }
            (None, Some(_)) => {
                info!(unit = %report.unit.unit, turn = report.time.turn, "unit moved again: it no longer needs a person");
                self.live.paged_at.store(0, Ordering::Relaxed);
            }
            _ => {}
        }
        if !ctx.live.steering() && !a.steering.is_empty() {
            debug!(unit = %report.unit.unit, held = a.steering.len(), "supervision switched off in the settings: steering not sent");
            return Some(Vec::new());
        }
        Some(a.steering)
    }
}

/// The alert a unit that needs a person raises: why, the last evidence,
/// and what answers it.
fn needs_alert(report: &SaluteReport, n: &xo_proto::NeedsYou) -> xo_proto::alert::Alert {
    let unit = &report.unit.unit;
    let on = report
        .activity
        .task_id
        .as_deref()
        .map(|t| format!(" on task {t}"))
        .unwrap_or_default();
    let what = n.kind.map(|k| format!(" ({k})")).unwrap_or_default();
    xo_proto::alert::Alert {
        v: xo_proto::PROTOCOL_VERSION,
        kind: xo_proto::alert::AlertKind::UnitNeedsYou,
        title: format!("{unit} needs you: {}{what}{on}", n.reason),
        detail: format!(
            "Turns {}-{} without progress; the XO steered it, then escalated, and stopped steering this stretch. Last steering: {} Open the unit (`xo units {unit}`, the console's unit page) and steer it (`xo steer {unit} \"...\"`), or stop its task.",
            n.stretch_from,
            n.turn,
            n.detail.trim()
        ),
        task_id: report.activity.task_id.clone(),
        project: None,
        unit: Some(unit.clone()),
        source: "supervisor".into(),
        at: n.since,
    }
}

/// Says reports lost on the way: one log line and a `reports_lost` alert
/// (the notifier pages), with the counts since the last time.
pub async fn say_lost(ctx: &Ctx, l: &crate::ctx::Losses, at: u64) {
    let units = if l.units.is_empty() {
        String::new()
    } else {
        format!(" (gaps in {})", l.units.join(", "))
    };
    let title = format!(
        "reports lost: {} dropped by the supervisor's connection, {} missing from units' sequences, {} shed under load",
        l.dropped, l.gaps, l.shed
    );
    warn!(
        dropped = l.dropped,
        gaps = l.gaps,
        shed = l.shed,
        "{title}{units}; said at most once a minute (xo_reports_dropped_total, xo_reports_gap_total, xo_reports_shed_total)"
    );
    let detail = format!(
        "Since the last alert{units}. The XO decided without these reports: a unit's picture may be behind. Dropped reports mean the supervisor reads too slowly for the reports it gets: add supervisors (supervisor.partitions) or raise nats.subscription_capacity. Missing ones were lost before they reached it (a unit's connection, a NATS node). Shed ones were replaced, while they waited for the watchers, by a newer report of the same unit (supervisor.inbox_high): every unit was judged on its latest report, the ones in between were not checked. The console's /metrics counts all three (xo_reports_dropped_total, xo_reports_gap_total, xo_reports_shed_total)."
    );
    page(
        ctx,
        xo_proto::alert::Alert {
            v: xo_proto::PROTOCOL_VERSION,
            kind: xo_proto::alert::AlertKind::ReportsLost,
            title,
            detail,
            task_id: None,
            project: None,
            unit: None,
            source: "supervisor".into(),
            at,
        },
    )
    .await;
}

/// Publishes a unit's `unit_needs_you` alert (the notifier pages).
async fn page(ctx: &Ctx, a: xo_proto::alert::Alert) {
    let subject = ctx.subjects.alert(a.kind);
    if let Err(e) = xo_bus::typed::publish(&ctx.bus, &subject, &a, ctx.cfg.wire.format).await {
        warn!(kind = %a.kind, unit = a.unit.as_deref().unwrap_or(""), error = %e, "alert not published; `xo units --needs` and /metrics still show what it said");
    }
}

/// Adds `s` to a unit's steering history (written apart from its record,
/// at the next flush).
fn keep(rec: &mut UnitRecord, persist: &crate::persist::Persister, s: &Steering) {
    rec.steering_kept += 1;
    rec.last_steering = Some((s.kind, s.at));
    persist.keep_steering(&rec.unit, rec.steering_kept, s);
}

impl WatcherState {
    /// A unit's watcher, from its stored state if it has one; steering its
    /// previous supervisor recorded but may not have sent is sent again.
    pub async fn start(args: WatcherArgs) -> WatcherState {
        let now = args.ctx.clock.now_ms();
        let mut rec = args
            .record
            .unwrap_or_else(|| UnitRecord::new(&args.unit, "", now));
        // Kept from before epochs were bounded: an epoch from the future
        // would refuse every report of the unit from now on.
        if xo_radio::epoch_ahead(rec.radio.epoch, xo_proto::now_ms()) {
            warn!(unit = %rec.unit, epoch = rec.radio.epoch, "stored epoch is ahead of the clock: forgotten, the next report starts the unit's count");
            rec.radio = xo_radio::UnitState::default();
        }
        // A resumed unit gets a full stale window from now.
        rec.last_seen = now;
        rec.restarts = rec.restarts.max(args.restarts);
        args.live.last_seen.store(now, Ordering::Relaxed);
        args.live.stale.store(rec.stale, Ordering::Relaxed);
        args.live.ended.store(rec.ended, Ordering::Relaxed);
        // A unit that needed a person before the restart was paged then:
        // its reminder comes remind_after from now.
        if rec.radio.needs.is_some() {
            args.live.paged_at.store(now.max(1), Ordering::Relaxed);
        }
        let legacy = std::mem::take(&mut rec.legacy_steering);
        let unsent = !rec.unsent.is_empty();
        let mut state = WatcherState {
            roles: (args.ctx.live.version(), args.ctx.live.roles()),
            ctx: args.ctx,
            rec,
            live: args.live,
            dirty: false,
            last_saved: 0,
            history: Default::default(),
            paged: None,
        };
        if !legacy.is_empty() {
            // Kept by a version that held the history in the record: it
            // moves to its own bucket, in its order.
            for s in &legacy {
                keep(&mut state.rec, &state.ctx.persist, s);
            }
            state.changed();
        }
        if unsent {
            // Its previous supervisor died between writing and sending.
            info!(unit = %state.rec.unit, steering = state.rec.unsent.len(), "steering recorded but maybe not sent by the previous supervisor: sending it again under the same ids");
            state.send_unsent().await;
            state.changed();
        }
        state
    }

    /// The watcher stops: a change not yet handed to the persister is.
    pub fn stop(&mut self) {
        if self.dirty {
            self.save(self.ctx.clock.now_ms());
        }
    }

    /// The unit this watcher watches.
    pub fn unit(&self) -> &str {
        &self.rec.unit
    }

    /// Handles one message of the unit.
    pub async fn handle(&mut self, msg: WatcherMsg) {
        let state = self;
        match msg {
            WatcherMsg::Report(report, headers, raw) => {
                let checked = state.check(*report, &headers, raw, 0);
                state.steer(checked).await;
                state.lapse_ack(state.ctx.clock.now_ms());
            }
            WatcherMsg::Received(msg, format) => state.received(msg, format, 0).await,
            WatcherMsg::Latest(msg, format, superseded) => {
                state.received(msg, format, superseded).await
            }
            WatcherMsg::Heartbeat(hb) => {
                WatcherState::seen(&mut state.rec, &state.live, state.ctx.clock.now_ms());
                if state.rec.role.is_empty() {
                    state.rec.role = hb.role;
                }
                state.changed();
            }
            WatcherMsg::Tick(now, heard_from) => {
                let stale_after = state.ctx.cfg.supervisor.stale_after_ms;
                // Not silent while the supervisor itself hears nobody.
                let silent = xo_bus::hearing::silent(state.rec.last_seen, heard_from, now);
                if !state.rec.stale && !state.rec.ended && silent >= stale_after {
                    state.rec.stale = true;
                    state.live.stale.store(true, Ordering::Relaxed);
                    state.rec.health = Health::Red;
                    // Said once a check for all units (Counters::summarise_stale).
                    debug!(unit = %state.rec.unit, silent_ms = silent, "unit is stale");
                    state.ctx.counters.stale(&state.rec.unit);
                    let turn = state.rec.turn;
                    let s = Radio::stale(&state.rec.unit, silent, stale_after, turn, now);
                    Box::pin(state.send(s)).await;
                    state.save(now);
                }
                state.lapse_ack(now);
                // Still needs a person: a reminder every remind_after.
                let paged = state.live.paged_at.load(Ordering::Relaxed);
                let remind = state.ctx.cfg.alerts.remind_after_ms;
                if remind > 0
                    && paged > 0
                    && now.saturating_sub(paged) >= remind
                    && let Some(a) = state.reminder(now)
                {
                    state.live.paged_at.store(now.max(1), Ordering::Relaxed);
                    Box::pin(page(&state.ctx, a)).await;
                }
                if state.dirty
                    && Persister::due(
                        &state.rec.unit,
                        state.last_saved,
                        now,
                        state.ctx.persist.every_ms(),
                    )
                {
                    state.save(now);
                }
            }
            WatcherMsg::Summary(port) => {
                let _ = port.send(state.summary());
            }
            WatcherMsg::Detail(port) => {
                let _ = port.send(UnitDetail {
                    summary: state.summary(),
                    report: state.rec.report(),
                    recent_steering: state
                        .ctx
                        .persist
                        .steering_history(&state.rec.unit, state.rec.steering_kept)
                        .await,
                    history: state.history.iter().map(|p| p.wire()).collect(),
                });
            }
            WatcherMsg::Operator(req, port) => {
                let now = state.ctx.clock.now_ms();
                let text = req.message.trim();
                let message = if text.starts_with(STEERING_TAG) {
                    text.to_string()
                } else {
                    format!("{STEERING_TAG} {text}")
                };
                let turn = state.rec.turn;
                let s = Steering {
                    v: xo_proto::PROTOCOL_VERSION,
                    unit: state.rec.unit.clone(),
                    id: format!("{}-{turn}-operator-{now}", state.rec.unit),
                    kind: AnomalyKind::Operator,
                    severity: req.severity,
                    message,
                    turn,
                    at: now,
                    evidence: Evidence {
                        rule: "operator".into(),
                        ..Default::default()
                    },
                    source: SteeringSource::Operator,
                };
                Box::pin(state.send(s.clone())).await;
                state.save(now);
                let _ = port.send(s);
            }
            WatcherMsg::Ack(req, port) => {
                let now = state.ctx.clock.now_ms();
                info!(unit = %state.rec.unit, by = %req.by, why = %req.why, for_ms = req.for_ms, "acknowledged by an operator");
                state.rec.ack = Some(Acknowledged {
                    by: req.by,
                    why: req.why,
                    at: now,
                    until: now.saturating_add(req.for_ms),
                    health: state.rec.health,
                });
                state.save(now);
                let _ = port.send(state.summary());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The docs' figure for the charts' memory: 16 bytes a report, 48
    /// reports a unit.
    #[test]
    fn a_chart_point_is_16_bytes() {
        assert_eq!(std::mem::size_of::<super::Point>(), 16);
        assert_eq!(xo_proto::control::HISTORY_POINTS, 48);
    }
}
