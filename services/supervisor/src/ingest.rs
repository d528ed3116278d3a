//! Everything that comes in: the report pump, the heartbeat pump and the
//! macrocosm file poller. Each ends on the shutdown signal.
//!
//! Reports go undecoded from the pump to their unit's watcher, which decodes
//! and checks them: decoding (most of the cost of ingest) runs on every
//! core, and a report crosses one task boundary between the NATS client and
//! its check.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use ractor::ActorRef;
use ractor::concurrency::OneshotReceiver;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use xo_bus::input::{self, Next};
use xo_bus::{Headers, Message, Subscription, typed};
use xo_proto::settings::{GetSettings, SettingsChanged};
use xo_proto::{CodecError, SaluteReport};
use xo_radio::{FnvMap, UnitKey};

use crate::SupervisorResult;
use crate::ctx::Ctx;
use crate::decode;
use crate::group::GroupMsg;
use crate::inbox::{Offer, Routed};
use crate::root::{RootMsg, Routes};
use crate::watcher::WatcherMsg;

const SUFFIX: &str = "_latest.json";

/// Sends a message to a unit's watcher directly if it has one, else
/// through the root (which spawns it). For heartbeats (which only mark
/// the unit seen) and file reports (one per poll): a message still queued
/// at the root can be overtaken by a later one sent directly once the
/// route appears. Bus reports do not come this way (see [`pump_reports`]).
fn route(routes: &Routes, root: &ActorRef<RootMsg>, unit: &str, msg: WatcherMsg) -> bool {
    let msg = match routes.get(unit) {
        Some(g) => match g.cast(GroupMsg::Unit(unit.to_string(), msg)) {
            Ok(()) => return true,
            Err(ractor::MessagingErr::SendErr(GroupMsg::Unit(_, m))) => m,
            Err(_) => return false,
        },
        None => msg,
    };
    root.cast(RootMsg::Route(unit.to_string(), msg)).is_ok()
}

/// Reads reports from `sub` (all, or one partition's) and hands each, undecoded, to its unit's watcher, which
/// decodes and checks it: decoding (most of the cost of ingest) runs on
/// every core, and a report crosses one task boundary between the NATS
/// client and its check. The pump is the only sender of a unit's reports,
/// straight into its watcher's mailbox, so their order is kept. The first
/// report of a unit is decoded here, before the root is asked for its
/// watcher, so that malformed messages never spawn one.
pub async fn pump_reports(
    ctx: &Arc<Ctx>,
    root: &ActorRef<RootMsg>,
    shared: &Arc<Routes>,
    sub: Subscription,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> SupervisorResult<JoinHandle<()>> {
    let pump = ReportPump::new(ctx, root, shared);
    Ok(input::raw_on_thread("report pump", sub, shutdown, pump))
}

/// [`pump_reports`] for every unit's reports, on a NATS connection of the
/// pump's own made on its thread (`xo_bus::input::raw_on_own_connection`,
/// named `<the supervisor's> (report pump)`): the connection's reading runs
/// beside the pump, not on the runtime the watchers keep busy, so under
/// overload nothing is lost at the connection, only shed where the pump
/// chooses. Returns once the subscription is live.
pub async fn pump_all_reports(
    ctx: &Arc<Ctx>,
    root: &ActorRef<RootMsg>,
    shared: &Arc<Routes>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> SupervisorResult<JoinHandle<()>> {
    let pump = ReportPump::new(ctx, root, shared);
    let pattern = ctx.subjects.salute_all();
    Ok(input::raw_on_own_connection("report pump", &ctx.bus, &pattern, shutdown, pump).await?)
}

/// Reports gathered for one group before they are handed to it at once.
const GATHER: usize = 128;

/// New units' reports held before the root is asked for their watchers in
/// one round trip. The root shares the busy workers with the groups: while
/// the pump waited for each answer, reading nothing, 100,000 units starting
/// together were 782 round trips at 128, and the connection dropped 5,000
/// to 9,000 reports in those first seconds (docs/performance.md §39, §40).
/// Held decoded, about 2 KiB each.
const WELCOME: usize = 1024;

/// Welcomes asked of the root and not yet answered, past which the pump
/// waits for the oldest before it asks again: it reads on while the root
/// answers (the root shares the busy workers), and holds at most this many
/// and one more of [`WELCOME`] new units' reports.
const ASKED: usize = 4;

/// The report pump's state: its own routes (no shared lock per report).
struct ReportPump {
    ctx: Arc<Ctx>,
    root: ActorRef<RootMsg>,
    shared: Arc<Routes>,
    /// Keyed in place (`UnitKey`, as the groups' units).
    routes: FnvMap<UnitKey, ActorRef<GroupMsg>>,
    /// Per watcher group, the reports read for it and not yet handed
    /// over, and the group they go to: handed over when the subscription
    /// has none waiting, at [`GATHER`], or before anything else is sent to
    /// the group (so a unit's reports keep their order).
    gathered: Vec<Option<Gathered>>,
    /// Reports of units with no route yet, decoded, in the order they
    /// came: the root is asked for all their watchers at once
    /// ([`ReportPump::welcome`]) when the subscription has none waiting, at
    /// [`WELCOME`] of them, or when a group's batch is handed over at
    /// [`GATHER`], not once for each (100,000 units starting together
    /// were 100,000 round trips through the root, and the pump read
    /// nothing meanwhile). The pump reads on while the root answers
    /// (taking the answer beside the next report: `awaited`); it waits for
    /// it only with [`ASKED`] welcomes unanswered and [`WELCOME`] more new
    /// units' reports held, or when its input ends.
    newcomers: Vec<Newcomer>,
    /// Welcomes asked of the root and not yet handed over, oldest first
    /// (the root answers in the order asked).
    asked: VecDeque<Asked>,
    /// Per unit with reports in `newcomers` or `asked`, how many: its later
    /// reports join them, not its route, until the last is handed over, so
    /// they keep their order.
    waiting: FnvMap<UnitKey, u32>,
}

/// A welcome asked of the root: the reports it is for, in order, and where
/// the root answers with their units' watcher groups.
struct Asked {
    newcomers: Vec<Newcomer>,
    answer: OneshotReceiver<Vec<ActorRef<GroupMsg>>>,
}

/// How long [`ReportPump::welcome`] waits for the root's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Not at all: the answers that came are handed over, and the root is
    /// asked if no welcome is unanswered (a trickle of new units is one
    /// welcome at a time, not [`ASKED`] of one unit each).
    No,
    /// [`WELCOME`] are waiting: they are asked for even while a welcome is
    /// unanswered; past [`ASKED`], the oldest is waited for first.
    Full,
    /// Until every new unit's report is handed over.
    All,
}

/// The group reports go to, and the reports gathered for it.
type Gathered = (ActorRef<GroupMsg>, Vec<Routed>);

/// A report of a unit the pump has no route for: decoded, with what came
/// with it.
type Newcomer = (Box<SaluteReport>, Headers, bytes::Bytes);

impl input::Handler<Message> for ReportPump {
    async fn handle(&mut self, msg: Message) -> Next {
        self.ctx.counters.reports.fetch_add(1, Ordering::Relaxed);
        // The subject is parsed here, once: the group and the watcher read
        // the unit from where it was found.
        let report = match self.ctx.subjects.unit_span(&msg.subject) {
            Some(at) => match Routed::new(msg, at) {
                Ok(r) => r,
                Err(msg) => return self.first(*msg).await,
            },
            None => return self.first(msg).await,
        };
        let g = match self.routes.get(report.unit()) {
            Some(g) => g.clone(),
            // Its earlier reports wait to be welcomed: this one waits
            // behind them.
            None if self.waiting.contains_key(report.unit()) => {
                return self.first(report.into_message()).await;
            }
            None => match self.shared.get(report.unit()) {
                // One the root published (a watcher restored from the
                // store, or spawned for a heartbeat or a file report),
                // safe to take over: no report of the unit is queued at
                // the root (the pump never sends reports through it) or
                // waits here.
                Some(g) => {
                    self.routes.insert(report.unit().into(), g.clone());
                    g
                }
                None => return self.first(report.into_message()).await,
            },
        };
        // Past `supervisor.inbox_high` waiting for the group, the unit's
        // latest report is kept, not queued (crate::inbox).
        let i = crate::group::group_of(report.unit());
        let high = self.ctx.cfg.supervisor.inbox_high;
        match self.ctx.inboxes[i].offer(report, high) {
            Offer::Send(report) => {
                let moved = matches!(&self.gathered[i], Some((to, _)) if to.get_id() != g.get_id());
                if moved {
                    // The group was started again: what was gathered for
                    // the one before goes first (back through the root).
                    if self.hand_over(i).await == Next::Stop {
                        return Next::Stop;
                    }
                }
                let (_, reports) = match &mut self.gathered[i] {
                    Some(slot) => slot,
                    slot @ None => match self.routes.get(report.unit()) {
                        Some(g) => slot.insert((g.clone(), Vec::new())),
                        // Its route went handing over: ask the root.
                        None => {
                            self.ctx.inboxes[i].handled();
                            return self.first(report.into_message()).await;
                        }
                    },
                };
                reports.push(report);
                if reports.len() >= GATHER {
                    // New units are asked for no later than a group's
                    // batch is handed over, even while the subscription
                    // never runs dry.
                    if self.welcome(Wait::No).await == Next::Stop {
                        return Next::Stop;
                    }
                    return self.hand_over(i).await;
                }
                Next::Go
            }
            Offer::Kept { drain, shed } => {
                if shed {
                    self.ctx.counters.shed.fetch_add(1, Ordering::Relaxed);
                }
                // A group that stopped drains when it starts again. What
                // was gathered for it goes first: it came before.
                if drain {
                    if self.hand_over(i).await == Next::Stop {
                        return Next::Stop;
                    }
                    let _ = g.cast(GroupMsg::Drain);
                }
                Next::Go
            }
        }
    }

    async fn caught_up(&mut self) -> Next {
        self.hand_over_all(Wait::No).await
    }

    /// The root's answer to a welcome, while no report is waiting.
    async fn awaited(&mut self) -> Next {
        self.answered().await
    }

    async fn ending(&mut self) {
        self.hand_over_all(Wait::All).await;
    }
}

impl ReportPump {
    fn new(ctx: &Arc<Ctx>, root: &ActorRef<RootMsg>, shared: &Arc<Routes>) -> Self {
        ReportPump {
            ctx: ctx.clone(),
            root: root.clone(),
            shared: shared.clone(),
            routes: Default::default(),
            gathered: (0..crate::group::GROUPS).map(|_| None).collect(),
            newcomers: Vec::new(),
            asked: VecDeque::new(),
            waiting: Default::default(),
        }
    }

    /// Hands over what was gathered for every group, then welcomes new
    /// units as `wait` says. Last: a handover to a group that stopped
    /// leaves its reports here, to ask the root again.
    async fn hand_over_all(&mut self, wait: Wait) -> Next {
        for i in 0..self.gathered.len() {
            if self.gathered[i].is_some() && self.hand_over(i).await == Next::Stop {
                return Next::Stop;
            }
        }
        self.welcome(wait).await
    }

    /// Hands what was gathered for group `i` to it; if the group stopped
    /// (and is being restarted), each report asks the root again, in order.
    async fn hand_over(&mut self, i: usize) -> Next {
        let Some((g, reports)) = self.gathered[i].take() else {
            return Next::Go;
        };
        let reports = match g.cast(GroupMsg::Reports(reports)) {
            Ok(()) => return Next::Go,
            Err(ractor::MessagingErr::SendErr(GroupMsg::Reports(r))) => r,
            Err(e) => {
                warn!(error = %e, "reports lost: their watcher group is gone");
                return Next::Go;
            }
        };
        let ctx = self.ctx.clone();
        let inbox = &ctx.inboxes[i];
        for r in reports {
            inbox.handled();
            self.routes.remove(r.unit());
            if self.first(r.into_message()).await == Next::Stop {
                return Next::Stop;
            }
        }
        Next::Go
    }

    /// A unit's first report (or a subject without a unit, which fails
    /// here: the report's unit must be the subject's), or one whose group
    /// stopped: decoded here, so malformed messages never spawn a watcher,
    /// and kept for [`Self::welcome`] (the unit's later reports too, until
    /// it has a route: they keep their order).
    async fn first(&mut self, msg: Message) -> Next {
        let ctx = &self.ctx;
        let report = match decode::decode_report(ctx, &msg) {
            Ok(r) => r,
            Err(e) => {
                decode::reject(ctx, &msg, &e).await;
                return Next::Go;
            }
        };
        *self
            .waiting
            .entry(report.unit.unit.as_str().into())
            .or_insert(0) += 1;
        self.newcomers
            .push((Box::new(report), msg.headers, msg.payload));
        if self.newcomers.len() >= WELCOME {
            return self.welcome(Wait::Full).await;
        }
        Next::Go
    }

    /// Hands over the welcomes the root has answered, asks it for the
    /// watchers of the units waiting to be welcomed, all at once, and waits
    /// as `wait` says.
    async fn welcome(&mut self, wait: Wait) -> Next {
        loop {
            while let Some(oldest) = self.asked.front_mut() {
                let groups = match oldest.answer.try_recv() {
                    Ok(groups) => groups,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Closed) => return Next::Stop, // the tree is gone
                };
                if let Some(oldest) = self.asked.pop_front() {
                    self.greet(oldest.newcomers, groups);
                }
            }
            let room = match wait {
                Wait::No => self.asked.is_empty(),
                Wait::Full | Wait::All => self.asked.len() < ASKED,
            };
            if room && !self.newcomers.is_empty() {
                let newcomers = std::mem::take(&mut self.newcomers);
                let units = newcomers
                    .iter()
                    .map(|(r, ..)| r.unit.unit.clone())
                    .collect();
                let (port, answer) = ractor::concurrency::oneshot();
                if self.root.cast(RootMsg::Spawn(units, port.into())).is_err() {
                    return Next::Stop;
                }
                self.asked.push_back(Asked { newcomers, answer });
            }
            let more = match wait {
                Wait::No => false,
                Wait::Full => self.newcomers.len() >= WELCOME,
                Wait::All => !self.asked.is_empty(),
            };
            if !more {
                return Next::Go;
            }
            if self.answered().await == Next::Stop {
                return Next::Stop;
            }
        }
    }

    /// Waits for the root's answer to the oldest welcome unanswered, and
    /// hands its reports over; never resolves if none is. Loses nothing if
    /// dropped while it waits.
    async fn answered(&mut self) -> Next {
        let Some(oldest) = self.asked.front_mut() else {
            return std::future::pending().await;
        };
        let Ok(groups) = (&mut oldest.answer).await else {
            return Next::Stop; // the tree is gone
        };
        if let Some(oldest) = self.asked.pop_front() {
            self.greet(oldest.newcomers, groups);
        }
        Next::Go
    }

    /// Sends each new unit's report to the watcher group the root answered
    /// with; the unit's last waiting report gives the pump its route.
    fn greet(&mut self, newcomers: Vec<Newcomer>, groups: Vec<ActorRef<GroupMsg>>) {
        // No report of these units waits in what is gathered: reports are
        // gathered only for units with a route, and a route goes only
        // when what was gathered with it is taken (`hand_over`).
        for ((report, headers, payload), g) in newcomers.into_iter().zip(groups) {
            let unit = report.unit.unit.clone();
            let m = WatcherMsg::Report(report, headers, payload);
            // Said before it goes: the unit's later reports kept in the
            // overflow meanwhile wait for it (crate::inbox).
            let inbox = &self.ctx.inboxes[crate::group::group_of(&unit)];
            inbox.greeted(&unit);
            let sent = g.cast(GroupMsg::Unit(unit.clone(), m)).is_ok();
            if !sent {
                let _ = inbox.welcomed(&unit);
                warn!(unit = %unit, "report lost: a new watcher stopped before its first report");
            }
            match self.waiting.get_mut(unit.as_str()) {
                Some(n) if *n > 1 => *n -= 1,
                _ => {
                    self.waiting.remove(unit.as_str());
                    if sent {
                        self.routes.insert(unit.into(), g);
                    }
                }
            }
        }
    }
}

/// Reads heartbeats from `sub` (all, or one partition's): each marks its
/// unit seen (through the root for a unit with no watcher yet).
pub async fn pump_heartbeats(
    ctx: &Arc<Ctx>,
    root: &ActorRef<RootMsg>,
    routes: &Arc<Routes>,
    sub: Subscription,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> SupervisorResult<JoinHandle<()>> {
    let (ctx, root, routes) = (ctx.clone(), root.clone(), routes.clone());
    Ok(input::raw(sub, shutdown, move |msg: Message| {
        let (ctx, root, routes) = (ctx.clone(), root.clone(), routes.clone());
        async move {
            ctx.counters.heartbeats.fetch_add(1, Ordering::Relaxed);
            match decode::decode_heartbeat(&ctx, &msg) {
                Ok(hb) => {
                    let unit = hb.unit.clone();
                    if !route(&routes, &root, &unit, WatcherMsg::Heartbeat(hb)) {
                        return Next::Stop;
                    }
                }
                Err(e) => decode::reject(&ctx, &msg, &e).await,
            }
            Next::Go
        }
    }))
}

/// Polls `<volume>/reports/` for changed `<unit>_latest.json` files.
/// (Macrocosm file mode: a unit replaces `<volume>/reports/<unit>_latest.json`
/// atomically; a file that cannot be used is dead-lettered like bus input.)
pub fn spawn_poller(
    ctx: Arc<Ctx>,
    root: ActorRef<RootMsg>,
    routes: Arc<Routes>,
    volume: PathBuf,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let dir = volume.join("reports");
        let mut seen: HashMap<PathBuf, FileSeen> = HashMap::new();
        let mut every =
            tokio::time::interval(Duration::from_millis(ctx.cfg.supervisor.file_poll_ms));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = &mut shutdown => break,
            }
            if poll_once(&ctx, &root, &routes, &dir, &mut seen)
                .await
                .is_err()
            {
                break;
            }
        }
    })
}

/// What the poller knows of one report file: its last modification time
/// and length, and the life and seq of the last report read from it.
#[derive(Debug, Default)]
struct FileSeen {
    stamp: Option<(SystemTime, u64)>,
    last: Option<(u64, u64)>,
    /// Rewrites in a row whose seq was not above the last one.
    not_newer: u32,
}

impl FileSeen {
    /// Notes a report read from the file. A rewrite whose `time.seq` is not
    /// above the last one read (same epoch) is a duplicate to the watcher,
    /// which ignores it: said here, since the writer is at fault (logged at
    /// the 1st, 2nd, 4th… such rewrite of the file in a row).
    fn read(&mut self, path: &Path, r: &SaluteReport) {
        let (epoch, seq) = (r.time.epoch, r.time.seq);
        match self.last {
            Some((e, last)) if e == epoch && seq <= last => {
                self.not_newer = self.not_newer.saturating_add(1);
                if self.not_newer.is_power_of_two() {
                    warn!(unit = %r.unit.unit, file = %path.display(), seq, last_seq = last, rewrites = self.not_newer, "report file rewritten without a higher time.seq: ignored as a duplicate; the writer must raise time.seq with every write (logged at 1, 2, 4… in a row)");
                }
            }
            _ => {
                self.last = Some((epoch, seq));
                self.not_newer = 0;
            }
        }
    }
}

async fn poll_once(
    ctx: &Ctx,
    root: &ActorRef<RootMsg>,
    routes: &Routes,
    dir: &Path,
    seen: &mut HashMap<PathBuf, FileSeen>,
) -> Result<(), ()> {
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return Ok(());
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(unit) = name.strip_suffix(SUFFIX) else {
            continue;
        };
        let Ok(meta) = entry.metadata().await else {
            continue;
        };
        let stamp = (
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            meta.len(),
        );
        let file = seen.entry(path.clone()).or_default();
        if file.stamp == Some(stamp) {
            continue;
        }
        file.stamp = Some(stamp);
        // A file whose reading panics is counted, logged and skipped (its
        // stamp is kept: read again only once rewritten); the poller goes
        // on with the next file, now and at every start.
        let read = async {
            ctx.counters.reports.fetch_add(1, Ordering::Relaxed);
            // Never through a symlink, only a regular file, never past the
            // payload limit: the volume is writable by others.
            let bytes = match xo_runtime::jsonl::read_bounded(&path, ctx.cfg.wire.max_payload).await
            {
                Ok(b) => b,
                Err(e) => {
                    let err = CodecError::Invalid {
                        ty: "SaluteReport",
                        reason: xo_proto::Invalid::Unreadable(e.to_string()),
                    };
                    decode::reject_file(ctx, &path, unit, Vec::new(), &err).await;
                    return Ok(());
                }
            };
            let decode_file = |bytes: &[u8]| {
                xo_proto::codec::decode::<SaluteReport>(
                    bytes,
                    Some(xo_proto::codec::JSON),
                    ctx.cfg.wire.max_payload,
                )
            };
            // A file that is no report in XO's shape may be one in seed 000's
            // own: read as the same report in XO's (looked at only then, so a
            // report in XO's shape is parsed once).
            let (bytes, report) = match decode_file(&bytes) {
                Ok(r) => (bytes, Ok(r)),
                Err(e) => match decode::seed_shaped(&bytes) {
                    None => (bytes, Err(e)),
                    Some(Ok(mapped)) => {
                        let r = decode_file(&mapped);
                        (mapped, r)
                    }
                    Some(Err(seed)) => (bytes, Err(seed)),
                },
            };
            let report = report.and_then(|r| {
                if r.unit.unit == unit {
                    Ok(r)
                } else {
                    Err(CodecError::Invalid {
                        ty: "SaluteReport",
                        reason: xo_proto::Invalid::NotFileUnit {
                            named: r.unit.unit.clone(),
                            file: unit.to_string(),
                        },
                    })
                }
            });
            match report {
                Ok(mut r) => {
                    file.read(&path, &r);
                    decode::fill_from_pct(&mut r, &bytes);
                    let unit = r.unit.unit.clone();
                    let m = WatcherMsg::Report(Box::new(r), Headers::new(), bytes.into());
                    if !route(routes, root, &unit, m) {
                        return Err(());
                    }
                }
                Err(e) => decode::reject_file(ctx, &path, unit, bytes, &e).await,
            }
            Ok(())
        };
        guarded(&path, &ctx.counters.panics, read).await?;
    }
    Ok(())
}

/// Runs the reading of one file; a panic in it is caught, counted in
/// `panics`, logged with the file's path, and is `Ok`: the poller goes on
/// with the next file. `Err(())` is the reading's own (the fleet stopped).
async fn guarded(
    path: &Path,
    panics: &AtomicU64,
    read: impl Future<Output = Result<(), ()>>,
) -> Result<(), ()> {
    match std::panic::AssertUnwindSafe(read).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => {
            panics.fetch_add(1, Ordering::Relaxed);
            xo_bus::input::caught(&path.display().to_string(), panic.as_ref());
            Ok(())
        }
    }
}

/// Follows the settings: subscribes to `xo.event.settings`, then asks the
/// queue for the settings in force (none answering: `xo.toml` alone).
pub async fn follow_settings(
    ctx: &Arc<Ctx>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> SupervisorResult<JoinHandle<()>> {
    let sub = ctx.bus.subscribe(&ctx.subjects.settings_event()).await?;
    let ctx = ctx.clone();
    let (limit, dead) = (
        ctx.cfg.wire.max_payload,
        ctx.dead_letters("settings changes"),
    );
    Ok(tokio::spawn(async move {
        let first = typed::call(
            &ctx.bus,
            &ctx.subjects,
            &GetSettings {},
            Duration::from_secs(3),
        );
        let shutdown = futures::FutureExt::shared(Box::pin(shutdown));
        tokio::select! {
            r = first => match r {
                Ok(view) => {
                    ctx.live.apply(&ctx.cfg, &view.settings);
                }
                Err(e) => info!(error = %e, "no queue answered for settings; xo.toml in force until a change arrives"),
            },
            _ = shutdown.clone() => return,
        }
        // Changes that came while the first answer was awaited are applied
        // after it, in order.
        let settings = move |(ev, _): (SettingsChanged, Headers)| {
            let ctx = ctx.clone();
            async move {
                ctx.live.apply(&ctx.cfg, &ev.settings);
                Next::Go
            }
        };
        let _ = input::typed(sub, limit, dead, shutdown, settings).await;
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file whose reading panics is counted and skipped; the poller's
    /// own stop is passed on.
    #[tokio::test]
    async fn a_file_whose_reading_panics_is_counted_and_the_poller_goes_on() {
        let panics = AtomicU64::new(0);
        let p = Path::new("/reports/u1_latest.json");
        let boom = async {
            if panics.load(Ordering::Relaxed) == 0 {
                panic!("a parser broke on this file");
            }
            Ok(())
        };
        assert_eq!(guarded(p, &panics, boom).await, Ok(()));
        assert_eq!(panics.load(Ordering::Relaxed), 1);
        assert_eq!(guarded(p, &panics, async { Ok(()) }).await, Ok(()));
        assert_eq!(guarded(p, &panics, async { Err(()) }).await, Err(()));
        assert_eq!(
            panics.load(Ordering::Relaxed),
            1,
            "only the panic is counted"
        );
    }
}
