//! The root actor: knows every unit and the group its watcher lives in
//! ([`crate::group`]); starts a unit's watcher on its first message;
//! restarts a watcher that panicked, and a group that died with all of its
//! units, one unit at a time against the unit's intensity limit (N
//! restarts in T, then the tree escalates and stops).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tracing::{error, info, warn};
use xo_bus::api::ActorPorts;
use xo_proto::control::{ErrorCode, ServiceError, SupervisorApi};
use xo_radio::FnvMap;
use xo_runtime::tree::{Escalation, EscalationCell, Intensity};

use crate::ctx::Ctx;
use crate::group::{GROUPS, Group, GroupArgs, group_of};
use crate::msg::GroupMsg;
pub use crate::msg::RootMsg;
use crate::persist::UnitRecord;
use crate::watcher::{Liveness, WatcherArgs, WatcherMsg};

/// Routes to the groups of the units the root has started. The root alone
/// writes it (on start, restart and stop); the ingest pumps read it, so
/// that a unit's messages skip the root once its watcher exists.
#[derive(Debug, Default)]
pub struct Routes(RwLock<FnvMap<String, ActorRef<GroupMsg>>>);

impl Routes {
    pub fn get(&self, unit: &str) -> Option<ActorRef<GroupMsg>> {
        self.0.read().ok().and_then(|r| r.get(unit).cloned())
    }
    pub(crate) fn insert(&self, unit: &str, actor: &ActorRef<GroupMsg>) {
        if let Ok(mut r) = self.0.write() {
            r.insert(unit.to_string(), actor.clone());
        }
    }
    pub(crate) fn remove(&self, unit: &str) {
        if let Ok(mut r) = self.0.write() {
            r.remove(unit);
        }
    }
}

pub struct Root;

pub struct RootArgs {
    pub ctx: Arc<Ctx>,
    pub routes: Arc<Routes>,
    pub restored: Vec<UnitRecord>,
    pub escalation: EscalationCell,
}

struct Child {
    group: usize,
    restarts: Intensity,
    live: Arc<Liveness>,
}

pub struct RootState {
    ctx: Arc<Ctx>,
    last_sweep: u64,
    /// By unit id, in order: the unit list pages through a range.
    units: BTreeMap<String, Child>,
    groups: Vec<ActorRef<GroupMsg>>,
    by_id: HashMap<ractor::ActorId, usize>,
    routes: Arc<Routes>,
    escalation: EscalationCell,
}

/// How long the root waits for a group's answer: a group answers at once
/// unless its unit is being started again.
const ASK_GROUP: Duration = Duration::from_secs(10);

impl RootState {
    async fn spawn_group(
        &mut self,
        myself: &ActorRef<RootMsg>,
        i: usize,
    ) -> Result<ActorRef<GroupMsg>, ActorProcessingErr> {
        let (group, _) = myself
            .get_cell()
            .spawn_linked(
                None,
                Group,
                GroupArgs {
                    root: myself.clone(),
                    inbox: self.ctx.inboxes[i].clone(),
                },
            )
            .await?;
        self.by_id.insert(group.get_id(), i);
        if i < self.groups.len() {
            self.groups[i] = group.clone();
        } else {
            self.groups.push(group.clone());
        }
        Ok(group)
    }

    /// Starts a unit's watcher in its group (before anything the root
    /// routes to it) and publishes the route.
    fn start_unit(
        &mut self,
        unit: &str,
        record: Option<UnitRecord>,
        restarts: Intensity,
    ) -> ActorRef<GroupMsg> {
        // Seen now: its group may start it after the next liveness check,
        // which must not take it for silent (or forget it) meanwhile.
        let live = Arc::new(Liveness::default());
        live.last_seen
            .store(self.ctx.clock.now_ms(), Ordering::Relaxed);
        let i = group_of(unit);
        let group = self.groups[i].clone();
        self.start_in(&group, unit, record, restarts.count(), &live);
        self.units.insert(
            unit.to_string(),
            Child {
                group: i,
                restarts,
                live,
            },
        );
        self.routes.insert(unit, &group);
        group
    }

    fn start_in(
        &self,
        group: &ActorRef<GroupMsg>,
        unit: &str,
        record: Option<UnitRecord>,
        restarts: u32,
        live: &Arc<Liveness>,
    ) {
        let _ = group.cast(GroupMsg::Start(Box::new(WatcherArgs {
            ctx: self.ctx.clone(),
            unit: unit.to_string(),
            record,
            restarts,
            live: live.clone(),
        })));
    }

    /// Withdraws `units` (no route, no watcher entry) and stops their
    /// watchers.
    async fn drop_units(&mut self, units: &[String]) {
        let mut stopping = Vec::with_capacity(units.len());
        for unit in units {
            self.routes.remove(unit);
            if let Some(c) = self.units.remove(unit) {
                stopping.push((unit.clone(), c.group));
            }
        }
        self.stop_units(stopping).await;
    }

    /// Stops the watchers of `units` (already withdrawn), group by group,
    /// each answering once their state is with the persister.
    async fn stop_units(&self, units: Vec<(String, usize)>) {
        let mut by_group: FnvMap<usize, Vec<String>> = FnvMap::default();
        for (u, g) in units {
            by_group.entry(g).or_default().push(u);
        }
        for (g, units) in by_group {
            let n = units.len();
            if self.groups[g]
                .call(|p| GroupMsg::Stop(units, p), Some(ASK_GROUP))
                .await
                .is_err()
            {
                warn!(
                    group = g,
                    units = n,
                    "watcher group did not stop its units in time; their last changes may be lost"
                );
            }
        }
    }

    /// Forgets `gone`, silent for `retention` ms: each watcher stopped
    /// (waited for, so its last save comes first), its state deleted from
    /// the store, counted and logged.
    async fn evict(&mut self, gone: Vec<String>, retention: u64) {
        self.drop_units(&gone).await;
        for unit in &gone {
            if let Err(e) = self.ctx.persist.forget(unit).await {
                warn!(unit = %unit, error = %e, "evicted unit's state not deleted from the store; it comes back at the next start");
            }
        }
        self.ctx
            .counters
            .evicted
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
        info!(
            units = gone.len(),
            retention_ms = retention,
            "silent units forgotten (supervisor.unit_retention_ms)"
        );
    }

    fn intensity(&self) -> Intensity {
        let cfg = &self.ctx.cfg.supervisor;
        Intensity::new(
            cfg.max_restarts,
            Duration::from_millis(cfg.restart_window_ms),
        )
    }

    /// Answers a control request.
    async fn api(&mut self, api: SupervisorApi<ActorPorts>) {
        match api {
            SupervisorApi::Units(q, port) => {
                use std::ops::Bound;
                let from = match &q.after {
                    Some(a) => Bound::Excluded(a.clone()),
                    None => Bound::Unbounded,
                };
                // On a task: the summaries say which, so every unit is
                // read and the limit applies after.
                let limit = match q.task {
                    Some(_) => usize::MAX,
                    None => q.limit.unwrap_or(usize::MAX),
                };
                let page: Vec<(&String, usize)> = if q.units.is_empty() {
                    self.units
                        .range((from, Bound::Unbounded))
                        .take(limit)
                        .map(|(u, c)| (u, c.group))
                        .collect()
                } else {
                    // Only the named units this member knows, in unit order.
                    let mut named: Vec<&String> = q.units.iter().collect();
                    named.sort_unstable();
                    named.dedup();
                    named
                        .into_iter()
                        .filter(|u| q.after.as_ref().is_none_or(|a| u.as_str() > a.as_str()))
                        .filter_map(|u| self.units.get_key_value(u))
                        .take(limit)
                        .map(|(u, c)| (u, c.group))
                        .collect()
                };
                let mut by_group: FnvMap<usize, Vec<String>> = FnvMap::default();
                for (u, g) in &page {
                    by_group.entry(*g).or_default().push((*u).clone());
                }
                let mut found: FnvMap<String, xo_proto::control::UnitSummary> = FnvMap::default();
                for (g, units) in by_group {
                    if let Ok(ractor::rpc::CallResult::Success(sums)) = self.groups[g]
                        .call(|p| GroupMsg::Summaries(units, p), Some(ASK_GROUP))
                        .await
                    {
                        found.extend(sums.into_iter().map(|s| (s.unit.clone(), s)));
                    }
                }
                let out = page
                    .iter()
                    .filter_map(|(u, _)| found.remove(u.as_str()))
                    .filter(|s| q.task.is_none() || s.task_id == q.task)
                    .take(q.limit.unwrap_or(usize::MAX))
                    .collect();
                let _ = port.send(Ok(out));
            }
            SupervisorApi::Unit(q, port) => {
                let detail = match self.units.get(&q.unit) {
                    None => Err(not_found(&q.unit)),
                    Some(c) => match self.groups[c.group]
                        .call(
                            |p| GroupMsg::Unit(q.unit.clone(), WatcherMsg::Detail(p)),
                            Some(ASK_GROUP),
                        )
                        .await
                    {
                        Ok(ractor::rpc::CallResult::Success(d)) => Ok(d),
                        _ => Err(not_found(&q.unit)),
                    },
                };
                let _ = port.send(detail);
            }
            SupervisorApi::Steer(q, port) => {
                let steer_by = q.by.clone();
                let checked = q.check();
                let reply = self
                    .operator(checked, &q.unit.clone(), |p| WatcherMsg::Operator(q, p))
                    .await;
                if let Ok(s) = &reply {
                    audit_operator(
                        &self.ctx,
                        xo_proto::queue::RecordOperatorAction {
                            unit: s.unit.clone(),
                            action: "steer".into(),
                            by: by_of(&steer_by),
                            detail: serde_json::json!({"message": s.message, "severity": s.severity, "steering": s.id}),
                        },
                    );
                }
                let _ = port.send(reply);
            }
            SupervisorApi::Ack(q, port) => {
                let checked = q.check();
                let reply = self
                    .operator(checked, &q.unit.clone(), |p| WatcherMsg::Ack(q, p))
                    .await;
                if let Ok(s) = &reply
                    && let Some(a) = &s.ack
                {
                    audit_operator(
                        &self.ctx,
                        xo_proto::queue::RecordOperatorAction {
                            unit: s.unit.clone(),
                            action: "ack".into(),
                            by: by_of(&a.by),
                            detail: serde_json::json!({"why": a.why, "until": xo_runtime::clock::rfc3339(a.until), "health": a.health}),
                        },
                    );
                }
                let _ = port.send(reply);
            }
            SupervisorApi::Stats(_, port) => {
                let mut s = self.ctx.counters.snapshot(self.units.len() as u64);
                s.dropped = self.ctx.bus.dropped();
                s.persist_every_ms = self.ctx.persist.every_ms();
                let _ = port.send(Ok(s));
            }
        }
    }

    /// An operator's request for `unit`'s watcher, once `checked`: its
    /// answer, or why there is none (refused, no such unit, no answer).
    async fn operator<T: Send + 'static>(
        &self,
        checked: Result<(), xo_proto::control::Refusal>,
        unit: &str,
        msg: impl FnOnce(ractor::RpcReplyPort<T>) -> WatcherMsg + Send + 'static,
    ) -> Result<T, ServiceError> {
        checked.map_err(|why| ServiceError::new(ErrorCode::Invalid, why.to_string()))?;
        let c = self.units.get(unit).ok_or_else(|| not_found(unit))?;
        let u = unit.to_string();
        match self.groups[c.group]
            .call(|p| GroupMsg::Unit(u, msg(p)), Some(ASK_GROUP))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(s)) => Ok(s),
            _ => Err(ServiceError::new(
                ErrorCode::Unavailable,
                "watcher did not answer",
            )),
        }
    }

    fn watcher_for(&mut self, unit: &str) -> ActorRef<GroupMsg> {
        match self.units.get(unit) {
            Some(c) => self.groups[c.group].clone(),
            None => {
                let fresh = self.intensity();
                self.start_unit(unit, None, fresh)
            }
        }
    }

    /// Counts a restart of `unit`'s watcher: `Err` (and the tree stopped)
    /// once past its intensity limit.
    fn count_restart(
        &mut self,
        myself: &ActorRef<RootMsg>,
        unit: &str,
        reason: &str,
    ) -> Result<u32, ()> {
        let now = self.ctx.clock.now_ms();
        let Some(child) = self.units.get_mut(unit) else {
            return Err(());
        };
        match child.restarts.restart(now) {
            Ok(n) => {
                self.ctx
                    .counters
                    .watcher_restarts
                    .fetch_add(1, Ordering::Relaxed);
                warn!(unit = %unit, reason = %reason, restarts = n, "watcher stopped; restarting it");
                Ok(n)
            }
            Err(exceeded) => {
                let why = Escalation::Intensity {
                    who: format!("watcher of unit {unit}"),
                    exceeded,
                    last: reason.to_string(),
                };
                error!(unit = %unit, "restart intensity exceeded; escalating");
                myself.stop(Some(why.to_string()));
                self.escalation.set(why);
                Err(())
            }
        }
    }
}

fn not_found(unit: &str) -> ServiceError {
    ServiceError::new(ErrorCode::NotFound, format!("unit not found: {unit}"))
}

impl Actor for Root {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RootMsg>,
        args: RootArgs,
    ) -> Result<RootState, ActorProcessingErr> {
        let mut state = RootState {
            ctx: args.ctx,
            last_sweep: 0,
            units: BTreeMap::new(),
            groups: Vec::with_capacity(GROUPS),
            by_id: HashMap::new(),
            routes: args.routes,
            escalation: args.escalation,
        };
        for i in 0..GROUPS {
            state.spawn_group(&myself, i).await?;
        }
        let n = args.restored.len();
        for record in args.restored {
            let unit = record.unit.clone();
            let fresh = state.intensity();
            state.start_unit(&unit, Some(record), fresh);
        }
        if n > 0 {
            info!(units = n, "unit state restored from the store");
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<RootMsg>,
        msg: RootMsg,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RootMsg::Route(unit, msg) => {
                let g = state.watcher_for(&unit);
                let _ = g.cast(GroupMsg::Unit(unit, msg));
            }
            RootMsg::Tick(now, port) => {
                let ctx = state.ctx.clone();
                // What the last check found stale, in one line.
                ctx.counters.summarise_stale();
                // Reports lost on the way: said, and an operator paged.
                if let Some(l) = ctx.counters.losses_due(ctx.bus.dropped(), now) {
                    crate::watcher::say_lost(&ctx, &l, now).await;
                }
                let cfg = &ctx.cfg.supervisor;
                // Nobody is silent while the supervisor hears nobody.
                let heard_from = ctx.hearing.look(&ctx.bus, now);
                pace_persistence(&ctx, state.units.len());
                let sweep = now.saturating_sub(state.last_sweep) >= ctx.persist.every_ms();
                if sweep {
                    state.last_sweep = now;
                }
                let retention = cfg.unit_retention_ms;
                let mut gone = Vec::new();
                let mut due: FnvMap<usize, Vec<String>> = FnvMap::default();
                for (unit, c) in &state.units {
                    let last_seen = c.live.last_seen.load(Ordering::Relaxed);
                    let silent = xo_bus::hearing::silent(last_seen, heard_from, now);
                    if retention > 0 && silent >= retention {
                        gone.push(unit.clone());
                        continue;
                    }
                    let paged = c.live.paged_at.load(Ordering::Relaxed);
                    let remind = ctx.cfg.alerts.remind_after_ms;
                    let is_due = !c.live.stale.load(Ordering::Relaxed)
                        && !c.live.ended.load(Ordering::Relaxed)
                        && silent >= cfg.stale_after_ms
                        || sweep && c.live.dirty.load(Ordering::Relaxed)
                        || remind > 0 && paged > 0 && now.saturating_sub(paged) >= remind;
                    if is_due {
                        due.entry(c.group).or_default().push(unit.clone());
                    }
                }
                for (g, units) in due {
                    let group = &state.groups[g];
                    if port.is_some() {
                        // A caller waiting for the check (tests): wait for each group.
                        let _ = group
                            .call(
                                |p| GroupMsg::Tick(units, now, heard_from, Some(p)),
                                Some(ASK_GROUP),
                            )
                            .await;
                    } else {
                        let _ = group.cast(GroupMsg::Tick(units, now, heard_from, None));
                    }
                }
                if !gone.is_empty() {
                    state.evict(gone, retention).await;
                }
                if let Some(p) = port {
                    let _ = p.send(());
                }
            }
            RootMsg::Api(api) => state.api(api).await,
            RootMsg::Watcher(unit, port) => {
                let _ = port.send(
                    state
                        .units
                        .get(&unit)
                        .map(|c| state.groups[c.group].clone()),
                );
            }
            RootMsg::Spawn(units, port) => {
                let groups = units.iter().map(|u| state.watcher_for(u)).collect();
                let _ = port.send(groups);
            }
            RootMsg::Failed(unit, reason) => {
                if let Ok(n) = state.count_restart(&myself, &unit, &reason)
                    && let Some(c) = state.units.get(&unit)
                {
                    let record = state.ctx.persist.latest(&unit).await;
                    let group = state.groups[c.group].clone();
                    state.start_in(&group, &unit, record, n, &c.live.clone());
                }
            }
            RootMsg::Adopt(records, port) => {
                let mut started = 0;
                for record in records {
                    let unit = record.unit.clone();
                    if state.units.contains_key(&unit) {
                        continue;
                    }
                    let fresh = state.intensity();
                    state.start_unit(&unit, Some(record), fresh);
                    started += 1;
                }
                let _ = port.send(started);
            }
            RootMsg::Release(partition, port) => {
                let Some(shard) = state.ctx.shard.clone() else {
                    let _ = port.send(Vec::new());
                    return Ok(());
                };
                let units: Vec<String> = state
                    .units
                    .keys()
                    .filter(|u| shard.partition(u) == partition)
                    .cloned()
                    .collect();
                state.drop_units(&units).await;
                let _ = port.send(units);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RootMsg>,
        evt: SupervisionEvent,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, reason) = match evt {
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.unwrap_or_else(|| "terminated".into()))
            }
            _ => return Ok(()),
        };
        let Some(i) = state.by_id.remove(&cell.get_id()) else {
            return Ok(());
        };
        // A group died, and with it the watchers it held: each is a
        // restart of its unit.
        let units: Vec<String> = state
            .units
            .iter()
            .filter(|(_, c)| c.group == i)
            .map(|(u, _)| u.clone())
            .collect();
        warn!(group = i, units = units.len(), reason = %reason, "watcher group stopped; restarting it with its units");
        let mut counts = Vec::with_capacity(units.len());
        for unit in &units {
            match state.count_restart(&myself, unit, &reason) {
                Ok(n) => counts.push(n),
                Err(()) => return Ok(()),
            }
        }
        let group = state.spawn_group(&myself, i).await?;
        for (unit, n) in units.iter().zip(counts) {
            let record = state.ctx.persist.latest(unit).await;
            if let Some(c) = state.units.get(unit) {
                let live = c.live.clone();
                state.start_in(&group, unit, record, n, &live);
                state.routes.insert(unit, &group);
            }
        }
        Ok(())
    }
}

/// Who did it, for the audit: the name given, else `operator`.
fn by_of(by: &str) -> String {
    if by.trim().is_empty() {
        "operator".into()
    } else {
        by.trim().to_string()
    }
}

/// An operator's action as a line of the goal's project audit (the queue
/// writes it): sent beside the reply, which does not wait for it; a queue
/// that does not take it is logged.
fn audit_operator(ctx: &Arc<Ctx>, action: xo_proto::queue::RecordOperatorAction) {
    let (bus, subjects) = (ctx.bus.clone(), ctx.subjects.clone());
    tokio::spawn(async move {
        if let Err(e) = xo_bus::typed::call(&bus, &subjects, &action, Duration::from_secs(5)).await
        {
            warn!(unit = %action.unit, action = %action.action, error = %e, "operator action not audited: the queue did not take the line");
        }
    });
}

/// Sets how often each of `units` units has its state written
/// (`SupervisorConfig::persist_every_ms`), saying so when it moves by a
/// quarter or more: past the write budget a crash loses more of a unit's
/// state, and an operator reading the log should know how much.
fn pace_persistence(ctx: &Ctx, units: usize) {
    let cfg = &ctx.cfg.supervisor;
    let every = cfg.persist_every_ms(units);
    if ctx.persist.set_every_ms(every, cfg.persist_interval_ms) {
        info!(
            units,
            every_ms = every,
            "each unit's state written every {:.1} s for {units} units (supervisor.persist_writes_per_s = {}): a crash loses at most that much of a unit's state",
            every as f64 / 1000.0,
            cfg.persist_writes_per_s
        );
    }
}
