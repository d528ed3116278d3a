//! The root actor: one watcher per unit, restarted one-for-one with an
//! intensity limit (N restarts in T, then the tree escalates and stops).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tracing::{error, info, warn};
use xo_bus::Headers;
use xo_proto::control::{ErrorCode, ServiceError, StatsReply, SteerUnit, UnitDetail, UnitSummary};
use xo_proto::{Heartbeat, SaluteReport, Steering};

use crate::Ctx;
use crate::persist::UnitRecord;
use crate::watcher::{Watcher, WatcherArgs, WatcherMsg};

pub enum RootMsg {
    Report(Box<SaluteReport>, Headers),
    Heartbeat(Heartbeat),
    /// Liveness check at `now` (ms); the port, if any, is answered when done.
    Tick(u64, Option<RpcReplyPort<()>>),
    List(RpcReplyPort<Vec<UnitSummary>>),
    Show(String, RpcReplyPort<Option<UnitDetail>>),
    Steer(SteerUnit, RpcReplyPort<Result<Steering, ServiceError>>),
    Stats(RpcReplyPort<StatsReply>),
    /// The watcher actor of a unit (tests and diagnostics).
    Watcher(String, RpcReplyPort<Option<ActorRef<WatcherMsg>>>),
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
}

pub struct RootState {
    ctx: Arc<Ctx>,
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
                },
            )
            .await?;
        self.by_id.insert(actor.get_id(), unit.to_string());
        self.units.insert(
            unit.to_string(),
            Child {
                actor: actor.clone(),
                restarts,
            },
        );
        Ok(actor)
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
            units: HashMap::new(),
            by_id: HashMap::new(),
            escalation: args.escalation,
        };
        let n = args.restored.len();
        for record in args.restored {
            let unit = record.unit.clone();
            state
                .spawn_watcher(&myself, &unit, Some(record), VecDeque::new())
                .await?;
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
            RootMsg::Report(report, headers) => {
                let w = state.watcher_for(&myself, &report.unit.unit).await?;
                let _ = w.cast(WatcherMsg::Report(report, headers));
            }
            RootMsg::Heartbeat(hb) => {
                let w = state.watcher_for(&myself, &hb.unit).await?;
                let _ = w.cast(WatcherMsg::Heartbeat(hb));
            }
            RootMsg::Tick(now, port) => {
                for c in state.units.values() {
                    let _ = c.actor.call(|p| WatcherMsg::Tick(now, Some(p)), None).await;
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
