//! The control API of a sharded supervisor, answered by any instance
//! (`xo.ctl.supervisor.<verb>`, a NATS queue group): a unit's request goes
//! to the instance holding the unit's partition (its own API,
//! `xo.ctl.supervisor.at.<instance>.<verb>`), the unit list and the
//! counters are gathered from every member and merged.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use xo_bus::api::{ActorPorts, Port, call_result};
use xo_bus::typed;
use xo_proto::Request;
use xo_proto::control::{
    ErrorCode, ListUnits, ServiceError, StatsReply, SupervisorApi, SupervisorStats, UnitSummary,
};

use crate::ctx::Ctx;
use crate::root::RootMsg;
use crate::shard::Shard;

/// How long another instance may take to answer.
const ASK_WITHIN: Duration = Duration::from_secs(5);

/// A request to the shared API.
pub struct FrontMsg(SupervisorApi<ActorPorts>);

impl From<SupervisorApi<ActorPorts>> for FrontMsg {
    fn from(a: SupervisorApi<ActorPorts>) -> Self {
        FrontMsg(a)
    }
}

#[derive(Debug, Clone)]
pub struct Front;

#[derive(Debug, Clone)]
pub struct FrontState {
    pub ctx: Arc<Ctx>,
    pub root: ActorRef<RootMsg>,
    pub shard: Arc<Shard>,
}

impl Actor for Front {
    type Msg = FrontMsg;
    type State = FrontState;
    type Arguments = FrontState;

    async fn pre_start(
        &self,
        _myself: ActorRef<FrontMsg>,
        args: FrontState,
    ) -> Result<FrontState, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<FrontMsg>,
        FrontMsg(api): FrontMsg,
        state: &mut FrontState,
    ) -> Result<(), ActorProcessingErr> {
        // Each request in its own task: one waiting on another instance
        // holds up no other.
        let s = state.clone();
        tokio::spawn(async move { s.answer(api).await });
        Ok(())
    }
}

impl FrontState {
    async fn answer(&self, api: SupervisorApi<ActorPorts>) {
        match api {
            SupervisorApi::Units(q, port) => {
                let _ = port.send(self.units(q).await);
            }
            SupervisorApi::Unit(q, port) => {
                let unit = q.unit.clone();
                let _ = port.send(self.at_owner(&unit, q, SupervisorApi::Unit).await);
            }
            SupervisorApi::Steer(q, port) => {
                let unit = q.unit.clone();
                let _ = port.send(self.at_owner(&unit, q, SupervisorApi::Steer).await);
            }
            SupervisorApi::Ack(q, port) => {
                let unit = q.unit.clone();
                let _ = port.send(self.at_owner(&unit, q, SupervisorApi::Ack).await);
            }
            SupervisorApi::Stats(q, port) => {
                let _ = port.send(self.stats(q).await);
            }
        }
    }

    /// The instance holding `unit`'s partition.
    async fn owner(&self, unit: &str) -> Result<String, ServiceError> {
        match self.shard.owner_of(&self.ctx.store, unit).await {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(ServiceError::new(
                ErrorCode::Unavailable,
                format!(
                    "unit {unit}: no supervisor holds its partition {} right now (it is taken within supervisor.partition_lease_ms); try again",
                    self.shard.partition(unit)
                ),
            )),
            Err(e) => Err(ServiceError::new(
                ErrorCode::Unavailable,
                format!("the partition leases could not be read: {e}"),
            )),
        }
    }

    /// Asks the instance holding `unit`'s partition.
    async fn at_owner<R: Request>(
        &self,
        unit: &str,
        req: R,
        variant: fn(R, Port<R::Response>) -> SupervisorApi<ActorPorts>,
    ) -> Result<R::Response, ServiceError> {
        let member = self.owner(unit).await?;
        self.ask(&member, req, variant).await
    }

    /// Asks instance `member` (this one through its root, another over the bus).
    async fn ask<R: Request>(
        &self,
        member: &str,
        req: R,
        variant: fn(R, Port<R::Response>) -> SupervisorApi<ActorPorts>,
    ) -> Result<R::Response, ServiceError> {
        if member == self.shard.me {
            let r = self
                .root
                .call(|port| RootMsg::Api(variant(req, port)), Some(ASK_WITHIN))
                .await;
            return call_result("supervisor", ASK_WITHIN, r);
        }
        let subject = format!(
            "{}.{}",
            self.ctx.subjects.ctl_instance_group("supervisor", member),
            R::VERB
        );
        typed::call_to(&self.ctx.bus, &subject, &req, ASK_WITHIN)
            .await
            .map_err(|e| match e {
                typed::CallError::Service(s) => s,
                e => ServiceError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "supervisor {member} did not answer ({e}); if it died, its partitions are taken over within supervisor.partition_lease_ms"
                    ),
                ),
            })
    }

    /// Every member's page, merged in unit order (a unit in the middle of
    /// a hand-over is listed once).
    async fn units(&self, q: ListUnits) -> Result<Vec<UnitSummary>, ServiceError> {
        let members = self.shard.members();
        let pages = futures::future::join_all(
            members
                .iter()
                .map(|m| self.ask(m, q.clone(), SupervisorApi::Units)),
        )
        .await;
        let mut all: Vec<UnitSummary> = Vec::new();
        for page in pages {
            all.extend(page?);
        }
        all.sort_by(|a, b| a.unit.cmp(&b.unit));
        all.dedup_by(|a, b| a.unit == b.unit);
        if let Some(limit) = q.limit {
            all.truncate(limit);
        }
        Ok(all)
    }

    /// Every member's counters, summed.
    async fn stats(&self, q: SupervisorStats) -> Result<StatsReply, ServiceError> {
        let members = self.shard.members();
        let all = futures::future::join_all(
            members
                .iter()
                .map(|m| self.ask(m, q.clone(), SupervisorApi::Stats)),
        )
        .await;
        let mut sum = StatsReply::default();
        for s in all {
            let s = s?;
            sum.reports += s.reports;
            sum.heartbeats += s.heartbeats;
            sum.evaluated += s.evaluated;
            sum.duplicates += s.duplicates;
            sum.dead_letters += s.dead_letters;
            sum.steering += s.steering;
            sum.units += s.units;
            sum.watcher_restarts += s.watcher_restarts;
            sum.missed += s.missed;
            sum.shed += s.shed;
            sum.dropped += s.dropped;
            sum.panics += s.panics;
            sum.evicted += s.evicted;
            sum.persist_every_ms = sum.persist_every_ms.max(s.persist_every_ms);
            for (k, n) in s.steering_by_kind {
                *sum.steering_by_kind.entry(k).or_default() += n;
            }
            xo_proto::control::SteeringMinute::merge(&mut sum.steering_minutes, s.steering_minutes);
        }
        Ok(sum)
    }
}
