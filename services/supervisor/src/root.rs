//! The root actor: one watcher per unit, restarted one-for-one with an
//! intensity limit (N restarts in T, then the tree escalates and stops).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tracing::{error, info, warn};
use xo_proto::Steering;
use xo_proto::control::{ErrorCode, ServiceError, StatsReply, SteerUnit, UnitDetail, UnitSummary};

use crate::Ctx;
use crate::persist::UnitRecord;
use crate::watcher::{Watcher, WatcherArgs, WatcherMsg};

pub enum RootMsg {
    /// A message for a unit's watcher, spawning it if needed.
    Route(String, WatcherMsg),
    /// Liveness check at `now` (ms); the port, if any, is answered when done.
    Tick(u64, Option<RpcReplyPort<()>>),
    List(RpcReplyPort<Vec<UnitSummary>>),
    Show(String, RpcReplyPort<Option<UnitDetail>>),
    Steer(SteerUnit, RpcReplyPort<Result<Steering, ServiceError>>),
    Stats(RpcReplyPort<StatsReply>),
    /// The watcher actor of a unit (tests and diagnostics).
    Watcher(String, RpcReplyPort<Option<ActorRef<WatcherMsg>>>),
    /// The watcher of a unit, spawned if needed: the report pump asks once
    /// per unit (and after a restart), then sends to it directly.
    Spawn(String, RpcReplyPort<ActorRef<WatcherMsg>>),
}

pub struct Root;

pub struct RootArgs {
    pub ctx: Arc<Ctx>,
    pub restored: Vec<UnitRecord>,
    pub escalation: Arc<std::sync::Mutex<Option<String>>>,
}

struct Child {
    actor: ActorRef<WatcherMsg>,
    restarts: VecDeque<u64>,
    live: Arc<Liveness>,
}

/// What the root reads of a watcher without messaging it: liveness checks
/// and persistence sweeps touch only the units that need them.
#[derive(Debug, Default)]
pub struct Liveness {
    pub last_seen: AtomicU64,
    pub stale: AtomicBool,
    /// Changed since last handed to the persister.
    pub dirty: AtomicBool,
}

pub struct RootState {
    ctx: Arc<Ctx>,
    last_sweep: u64,
    units: HashMap<String, Child>,
    by_id: HashMap<ractor::ActorId, String>,
    escalation: Arc<std::sync::Mutex<Option<String>>>,
}

impl RootState {
    async fn spawn_watcher(
        &mut self,
        myself: &ActorRef<RootMsg>,
        unit: &str,
        record: Option<UnitRecord>,
        restarts: VecDeque<u64>,
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
                    restarts: restarts.len() as u32,
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

    /// Lets the report pump reach a watcher directly.
    fn publish_route(&self, unit: &str, actor: &ActorRef<WatcherMsg>) {
        if let Ok(mut r) = self.ctx.routes.write() {
            r.insert(unit.to_string(), actor.clone());
        }
    }

    fn withdraw_route(&self, unit: &str) {
        if let Ok(mut r) = self.ctx.routes.write() {
            r.remove(unit);
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
                self.spawn_watcher(myself, unit, None, VecDeque::new())
                    .await
            }
        }
    }
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
            units: HashMap::new(),
            by_id: HashMap::new(),
            escalation: args.escalation,
        };
        let n = args.restored.len();
        for record in args.restored {
            let unit = record.unit.clone();
            let actor = state
                .spawn_watcher(&myself, &unit, Some(record), VecDeque::new())
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
                let cfg = &state.ctx.cfg.supervisor;
                let sweep = now.saturating_sub(state.last_sweep) >= cfg.persist_interval_ms;
                if sweep {
                    state.last_sweep = now;
                }
                for c in state.units.values() {
                    let silent = now.saturating_sub(c.live.last_seen.load(Ordering::Relaxed));
                    let due = !c.live.stale.load(Ordering::Relaxed) && silent >= cfg.stale_after_ms
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
                if let Some(p) = port {
                    let _ = p.send(());
                }
            }
            RootMsg::List(port) => {
                let mut out = Vec::with_capacity(state.units.len());
                for c in state.units.values() {
                    if let Ok(ractor::rpc::CallResult::Success(s)) =
                        c.actor.call(WatcherMsg::Summary, None).await
                    {
                        out.push(s);
                    }
                }
                out.sort_by(|a, b| a.unit.cmp(&b.unit));
                let _ = port.send(out);
            }
            RootMsg::Show(unit, port) => {
                let detail = match state.units.get(&unit) {
                    Some(c) => match c.actor.call(WatcherMsg::Detail, None).await {
                        Ok(ractor::rpc::CallResult::Success(d)) => Some(d),
                        _ => None,
                    },
                    None => None,
                };
                let _ = port.send(detail);
            }
            RootMsg::Steer(req, port) => {
                let reply = match state.units.get(&req.unit) {
                    None => Err(ServiceError::new(
                        ErrorCode::NotFound,
                        format!("unit not found: {}", req.unit),
                    )),
                    Some(c) => match c.actor.call(|p| WatcherMsg::Operator(req, p), None).await {
                        Ok(ractor::rpc::CallResult::Success(s)) => Ok(s),
                        _ => Err(ServiceError::new(
                            ErrorCode::Unavailable,
                            "watcher did not answer",
                        )),
                    },
                };
                let _ = port.send(reply);
            }
            RootMsg::Stats(port) => {
                let _ = port.send(state.ctx.counters.snapshot(state.units.len() as u64));
            }
            RootMsg::Watcher(unit, port) => {
                let _ = port.send(state.units.get(&unit).map(|c| c.actor.clone()));
            }
            RootMsg::Spawn(unit, port) => {
                let w = state.watcher_for(&myself, &unit).await?;
                state.publish_route(&unit, &w);
                let _ = port.send(w);
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
        let now = state.ctx.clock.now_ms();
        let cfg = &state.ctx.cfg.supervisor;
        let mut restarts = child.restarts;
        restarts.retain(|t| now.saturating_sub(*t) < cfg.restart_window_ms);
        restarts.push_back(now);
        if restarts.len() as u32 > cfg.max_restarts {
            let why = format!(
                "watcher of unit {unit} failed {} times within {} ms (limit {}): {reason}",
                restarts.len(),
                cfg.restart_window_ms,
                cfg.max_restarts
            );
            error!(unit = %unit, restarts = restarts.len(), "restart intensity exceeded; escalating");
            if let Ok(mut e) = state.escalation.lock() {
                *e = Some(why.clone());
            }
            myself.stop(Some(why));
            return Ok(());
        }
        state
            .ctx
            .counters
            .watcher_restarts
            .fetch_add(1, Ordering::Relaxed);
        warn!(unit = %unit, reason = %reason, restarts = restarts.len(), "watcher stopped; restarting it");
        let record = state.ctx.persist.latest(&unit).await;
        state
            .spawn_watcher(&myself, &unit, record, restarts)
            .await?;
        Ok(())
    }
}
