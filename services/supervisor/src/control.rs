//! The supervisor's control API on `xo.ctl.supervisor.<verb>`: on NATS a
//! micro service named `xo-supervisor` (`nats micro ls`, `$SRV.PING`).

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use ractor::rpc::CallResult;
use tokio::task::JoinHandle;

use xo_bus::{ServiceRequest, ServiceSpec, typed};
use xo_proto::Request;
use xo_proto::control::{
    ErrorCode, ListUnits, SUPERVISOR, ServiceError, ShowUnit, SteerUnit, SupervisorStats,
};

use crate::{Ctx, RootMsg, SupervisorResult};

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(ctx: Arc<Ctx>, root: ActorRef<RootMsg>) -> SupervisorResult<JoinHandle<()>> {
    let mut ep = ctx
        .bus
        .serve(ServiceSpec {
            name: "xo-supervisor".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "XO supervisor: units, steering".into(),
            group: ctx.subjects.ctl_group(SUPERVISOR),
            verbs: [
                ListUnits::VERB,
                ShowUnit::VERB,
                SteerUnit::VERB,
                SupervisorStats::VERB,
            ]
            .map(String::from)
            .to_vec(),
        })
        .await?;
    Ok(tokio::spawn(async move {
        while let Some(req) = ep.next().await {
            let root = root.clone();
            tokio::spawn(handle(req, root));
        }
        ep.stop().await;
    }))
}

fn unavailable<T>(r: Result<CallResult<T>, impl std::fmt::Display>) -> Result<T, ServiceError> {
    match r {
        Ok(CallResult::Success(v)) => Ok(v),
        Ok(CallResult::Timeout) => Err(ServiceError::new(ErrorCode::Timeout, "supervisor busy")),
        Ok(CallResult::SenderError) => Err(ServiceError::new(ErrorCode::Internal, "no reply")),
        Err(e) => Err(ServiceError::new(ErrorCode::Unavailable, e.to_string())),
    }
}

async fn handle(req: ServiceRequest, root: ActorRef<RootMsg>) {
    let t = Some(CALL_TIMEOUT);
    match req.verb().to_string().as_str() {
        ListUnits::VERB => {
            let r = unavailable(root.call(RootMsg::List, t).await);
            req.reply(r).await;
        }
        ShowUnit::VERB => {
            let r = match typed::decode_request::<ShowUnit>(&req.message) {
                Ok(q) => {
                    let unit = q.unit.clone();
                    unavailable(root.call(|p| RootMsg::Show(q.unit, p), t).await).and_then(|d| {
                        d.ok_or_else(|| {
                            ServiceError::new(
                                ErrorCode::NotFound,
                                format!("unit not found: {unit}"),
                            )
                        })
                    })
                }
                Err(e) => Err(e),
            };
            req.reply(r).await;
        }
        SteerUnit::VERB => {
            let r = match typed::decode_request::<SteerUnit>(&req.message) {
                Ok(q) if q.message.trim().is_empty() => Err(ServiceError::new(
                    ErrorCode::Invalid,
                    "steering message is empty",
                )),
                Ok(q) => unavailable(root.call(|p| RootMsg::Steer(q, p), t).await).and_then(|x| x),
                Err(e) => Err(e),
            };
            req.reply(r).await;
        }
        SupervisorStats::VERB => {
            let r = unavailable(root.call(RootMsg::Stats, t).await);
            req.reply(r).await;
        }
        other => {
            let r: Result<(), _> = Err(ServiceError::new(
                ErrorCode::NotFound,
                format!("unknown verb: {other}"),
            ));
            req.reply(r).await;
        }
    }
}
