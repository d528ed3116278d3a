//! The root actor: one watcher per unit, restarted one-for-one with an
//! intensity limit (N restarts in T, then the tree escalates and stops).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tracing::{error, info, warn};
use xo_bus::api::ActorPorts;
use xo_proto::control::{ErrorCode, ServiceError, SupervisorApi};
use xo_radio::FnvMap;
use xo_runtime::tree::{Escalation, Intensity};

use crate::ctx::Ctx;
use crate::persist::UnitRecord;
use crate::watcher::{Liveness, Watcher, WatcherArgs, WatcherMsg};

/// Routes to the watchers the root has spawned. The root alone writes it
/// (on spawn, restart and stop); the ingest pumps read it, so that a
/// unit's messages skip the root once its watcher exists.
#[derive(Debug, Default)]
pub struct Routes(RwLock<FnvMap<String, ActorRef<WatcherMsg>>>);

impl Routes {
    pub fn get(&self, unit: &str) -> Option<ActorRef<WatcherMsg>> {
        self.0.read().ok().and_then(|r| r.get(unit).cloned())
    }
    fn insert(&self, unit: &str, actor: &ActorRef<WatcherMsg>) {
        if let Ok(mut r) = self.0.write() {
            r.insert(unit.to_string(), actor.clone());
        }
    }
    fn remove(&self, unit: &str) {
        if let Ok(mut r) = self.0.write() {
            r.remove(unit);
        }
    }
}

pub enum RootMsg {
    /// A message for a unit's watcher, spawning it if needed.
    Route(String, WatcherMsg),
    /// Liveness check at `now` (ms); the port, if any, is answered when done.
    Tick(u64, Option<RpcReplyPort<()>>),
    /// The control API (`xo.ctl.supervisor.*`).
    Api(SupervisorApi<ActorPorts>),
    /// The watcher actor of a unit (tests and diagnostics).
    Watcher(String, RpcReplyPort<Option<ActorRef<WatcherMsg>>>),
    /// The watcher of a unit, spawned if needed: the report pump asks once
    /// per unit (and after a restart), then sends to it directly.
    Spawn(String, RpcReplyPort<ActorRef<WatcherMsg>>),
    /// Sharded: watchers for the units of a partition just taken, from
    /// their stored state (a unit already watched is left as it is);
    /// answers how many were started.
    Adopt(Vec<UnitRecord>, RpcReplyPort<usize>),
    /// Sharded: forgets the watchers of a partition handed back and
    /// answers them, for the caller to stop (their state goes to the
    /// persister as they stop; they are not restarted).
    Release(u32, RpcReplyPort<Vec<(String, ActorRef<WatcherMsg>)>>),
}

impl From<SupervisorApi<ActorPorts>> for RootMsg {
    fn from(a: SupervisorApi<ActorPorts>) -> Self {
        RootMsg::Api(a)
    }
}

pub struct Root;

pub struct RootArgs {
    pub ctx: Arc<Ctx>,
    pub routes: Arc<Routes>,
    pub restored: Vec<UnitRecord>,
    pub escalation: Escalation,
}

struct Child {
    actor: ActorRef<WatcherMsg>,
    restarts: Intensity,
    live: Arc<Liveness>,
}

pub struct RootState {
    ctx: Arc<Ctx>,
    last_sweep: u64,
    /// By unit id, in order: the unit list pages through a range.
    units: BTreeMap<String, Child>,
    by_id: HashMap<ractor::ActorId, String>,
    routes: Arc<Routes>,
    escalation: Escalation,
}

impl RootState {
    async fn spawn_watcher(
        &mut self,
        myself: &ActorRef<RootMsg>,
        unit: &str,
        record: Option<UnitRecord>,
        restarts: Intensity,
    ) -> Result<ActorRef<WatcherMsg>, ActorProcessingErr> {
        let live = Arc::new(Liveness::default());
        let (actor, _) = myself
            .get_cell()
            .spawn_linked(
                None,
                Watcher,
                WatcherArgs {
                    ctx: self.ctx.clone(),
                    unit: unit.to_string(),
                    record,
                    restarts: restarts.count(),
                    live: live.clone(),
                },
            )
            .await?;
        self.by_id.insert(actor.get_id(), unit.to_string());
        self.units.insert(
            unit.to_string(),
            Child {
                actor: actor.clone(),
                restarts,
                live,
            },
        );
        Ok(actor)
    }

    /// Lets the pumps reach a watcher directly.
    /// Forgets `gone`, silent for `retention` ms: each watcher stopped
    /// (waited for, so its last save comes first), its state deleted from
    /// the store, counted and logged.
    async fn evict(&mut self, gone: Vec<String>, retention: u64) {
        for unit in &gone {
            self.withdraw_route(unit);
            let Some(c) = self.units.remove(unit) else {
                continue;
            };
            self.by_id.remove(&c.actor.get_id());
            let _ = c
                .actor
                .stop_and_wait(
                    Some("evicted".into()),
                    Some(std::time::Duration::from_secs(5)),
                )
                .await;
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

    fn publish_route(&self, unit: &str, actor: &ActorRef<WatcherMsg>) {
        self.routes.insert(unit, actor);
    }

    fn withdraw_route(&self, unit: &str) {
        self.routes.remove(unit);
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
                let limit = q.limit.unwrap_or(usize::MAX);
                let mut out = Vec::with_capacity(limit.min(self.units.len()));
                for c in self
                    .units
                    .range((from, Bound::Unbounded))
                    .take(limit)
                    .map(|(_, c)| c)
                {
                    if let Ok(ractor::rpc::CallResult::Success(s)) =
                        c.actor.call(WatcherMsg::Summary, None).await
                    {
                        out.push(s);
                    }
                }
                let _ = port.send(Ok(out));
            }
            SupervisorApi::Unit(q, port) => {
                let detail = match self.units.get(&q.unit) {
                    None => Err(not_found(&q.unit)),
                    Some(c) => match c.actor.call(WatcherMsg::Detail, None).await {
                        Ok(ractor::rpc::CallResult::Success(d)) => Ok(d),
                        _ => Err(not_found(&q.unit)),
                    },
                };
                let _ = port.send(detail);
            }
            SupervisorApi::Steer(q, port) => {
                let reply = if q.message.trim().is_empty() {
                    Err(ServiceError::new(
                        ErrorCode::Invalid,
                        "steering message is empty",
                    ))
                } else {
                    match self.units.get(&q.unit) {
                        None => Err(not_found(&q.unit)),
                        Some(c) => match c.actor.call(|p| WatcherMsg::Operator(q, p), None).await {
                            Ok(ractor::rpc::CallResult::Success(s)) => Ok(s),
                            _ => Err(ServiceError::new(
                                ErrorCode::Unavailable,
                                "watcher did not answer",
                            )),
                        },
                    }
                };
                let _ = port.send(reply);
            }
            SupervisorApi::Stats(_, port) => {
                let _ = port.send(Ok(self.ctx.counters.snapshot(self.units.len() as u64)));
            }
        }
    }

    async fn watcher_for(
        &mut self,
        myself: &ActorRef<RootMsg>,
        unit: &str,
    ) -> Result<ActorRef<WatcherMsg>, ActorProcessingErr> {
        match self.units.get(unit) {
            Some(c) => Ok(c.actor.clone()),
            None => {
                let fresh = self.intensity();
                self.spawn_watcher(myself, unit, None, fresh).await
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
            by_id: HashMap::new(),
            routes: args.routes,
            escalation: args.escalation,
        };
        let n = args.restored.len();
        for record in args.restored {
            let unit = record.unit.clone();
            let fresh = state.intensity();
            let actor = state
                .spawn_watcher(&myself, &unit, Some(record), fresh)
                .await?;
            state.publish_route(&unit, &actor);
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
                let w = state.watcher_for(&myself, &unit).await?;
                let _ = w.cast(msg);
                // Published after forwarding: later messages may go direct.
                state.publish_route(&unit, &w);
            }
            RootMsg::Tick(now, port) => {
                let ctx = state.ctx.clone();
                let cfg = &ctx.cfg.supervisor;
                let sweep = now.saturating_sub(state.last_sweep) >= cfg.persist_interval_ms;
                if sweep {
                    state.last_sweep = now;
                }
                let retention = cfg.unit_retention_ms;
                let mut gone = Vec::new();
                for (unit, c) in &state.units {
                    let silent = now.saturating_sub(c.live.last_seen.load(Ordering::Relaxed));
                    if retention > 0 && silent >= retention {
                        gone.push(unit.clone());
                        continue;
                    }
                    let due = !c.live.stale.load(Ordering::Relaxed)
                        && !c.live.ended.load(Ordering::Relaxed)
                        && silent >= cfg.stale_after_ms
                        || sweep && c.live.dirty.load(Ordering::Relaxed);
                    if !due {
                        continue;
                    }
                    if port.is_some() {
                        // A caller waiting for the check (tests): wait for each unit.
                        let _ = c.actor.call(|p| WatcherMsg::Tick(now, Some(p)), None).await;
                    } else {
                        let _ = c.actor.cast(WatcherMsg::Tick(now, None));
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
                let _ = port.send(state.units.get(&unit).map(|c| c.actor.clone()));
            }
            RootMsg::Spawn(unit, port) => {
                let w = state.watcher_for(&myself, &unit).await?;
                state.publish_route(&unit, &w);
                let _ = port.send(w);
            }
            RootMsg::Adopt(records, port) => {
                let mut started = 0;
                for record in records {
                    let unit = record.unit.clone();
                    if state.units.contains_key(&unit) {
                        continue;
                    }
                    let fresh = state.intensity();
                    let actor = state
                        .spawn_watcher(&myself, &unit, Some(record), fresh)
                        .await?;
                    state.publish_route(&unit, &actor);
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
                let mut out = Vec::with_capacity(units.len());
                for unit in units {
                    state.withdraw_route(&unit);
                    if let Some(c) = state.units.remove(&unit) {
                        state.by_id.remove(&c.actor.get_id());
                        out.push((unit, c.actor));
                    }
                }
                let _ = port.send(out);
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
        let Some(unit) = state.by_id.remove(&cell.get_id()) else {
            return Ok(());
        };
        let Some(child) = state.units.remove(&unit) else {
            return Ok(());
        };
        state.withdraw_route(&unit);
        let mut restarts = child.restarts;
        if let Err(limit) = restarts.restart(state.ctx.clock.now_ms()) {
            let why = format!("watcher of unit {unit}: {limit}: {reason}");
            error!(unit = %unit, "restart intensity exceeded; escalating");
            state.escalation.set(why.clone());
            myself.stop(Some(why));
            return Ok(());
        }
        state
            .ctx
            .counters
            .watcher_restarts
            .fetch_add(1, Ordering::Relaxed);
        warn!(unit = %unit, reason = %reason, restarts = restarts.count(), "watcher stopped; restarting it");
        let record = state.ctx.persist.latest(&unit).await;
        state
            .spawn_watcher(&myself, &unit, record, restarts)
            .await?;
        Ok(())
    }
}
