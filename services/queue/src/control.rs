//! The queue's control API on `xo.ctl.queue.<verb>` (NATS micro service `xo-queue`).

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use ractor::rpc::CallResult;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use xo_bus::{ServiceRequest, ServiceSpec, typed};
use xo_proto::Request;
use xo_proto::control::{ErrorCode, ServiceError};
use xo_proto::queue::*;

use crate::{Ctx, QueueMsg, QueueResult};

const VERBS: [&str; 16] = [
    Init::VERB,
    SetGoal::VERB,
    Enqueue::VERB,
    Claim::VERB,
    Heartbeat::VERB,
    Complete::VERB,
    Block::VERB,
    Answer::VERB,
    Halt::VERB,
    Resume::VERB,
    Start::VERB,
    Step::VERB,
    GetStatus::VERB,
    ListTasks::VERB,
    RetryTask::VERB,
    Cancel::VERB,
];

pub async fn serve(ctx: Arc<Ctx>, actor: ActorRef<QueueMsg>) -> QueueResult<JoinHandle<()>> {
    let mut ep = ctx
        .bus
        .serve(ServiceSpec {
            name: "xo-queue".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "XO durable queue: tasks, leases, halts, audit".into(),
            group: ctx.subjects.ctl_group(QUEUE),
            verbs: VERBS.map(String::from).to_vec(),
        })
        .await?;
    Ok(tokio::spawn(async move {
        while let Some(req) = ep.next().await {
            tokio::spawn(handle(req, actor.clone()));
        }
        ep.stop().await;
    }))
}

type Port<T> = ractor::RpcReplyPort<Result<T, ServiceError>>;

async fn ask<T: Send + 'static>(
    actor: &ActorRef<QueueMsg>,
    timeout: Duration,
    build: impl FnOnce(Port<T>) -> QueueMsg,
) -> Result<T, ServiceError> {
    match actor.call(build, Some(timeout)).await {
        Ok(CallResult::Success(r)) => r,
        Ok(CallResult::Timeout) => Err(ServiceError::new(ErrorCode::Timeout, "queue busy")),
        Ok(CallResult::SenderError) => Err(ServiceError::new(
            ErrorCode::Internal,
            "queue gave no reply",
        )),
        Err(e) => Err(ServiceError::new(ErrorCode::Unavailable, e.to_string())),
    }
}

async fn run<R: Request + DeserializeOwned, T: Serialize + Send + 'static>(
    req: ServiceRequest,
    actor: &ActorRef<QueueMsg>,
    timeout: impl FnOnce(&R) -> Duration,
    build: impl FnOnce(R, Port<T>) -> QueueMsg,
) {
    let r = match typed::decode_request::<R>(&req.message) {
        Ok(q) => {
            let t = timeout(&q);
            ask(actor, t, |p| build(q, p)).await
        }
        Err(e) => Err(e),
    };
    req.reply(r).await;
}

const T: Duration = Duration::from_secs(30);

fn t<R>(_: &R) -> Duration {
    T
}

async fn handle(req: ServiceRequest, a: ActorRef<QueueMsg>) {
    let verb = req.verb().to_string();
    match verb.as_str() {
        Init::VERB => {
            run(req, &a, t, |q: Init, reply| QueueMsg::Init {
                mode: q.mode,
                manager: q.manager,
                force: q.force,
                reply,
            })
            .await
        }
        SetGoal::VERB => {
            run(req, &a, t, |q: SetGoal, r| {
                QueueMsg::SetGoal(
                    Goal {
                        description: q.description,
                        project_id: q.project_id,
                        completed: q.completed,
                    },
                    r,
                )
            })
            .await
        }
        Enqueue::VERB => run(req, &a, t, |q: Enqueue, r| QueueMsg::Enqueue(q.tasks, r)).await,
        Claim::VERB => {
            run(
                req,
                &a,
                |q: &Claim| T + Duration::from_millis(q.wait_ms),
                |q: Claim, reply| QueueMsg::Claim {
                    role: q.role,
                    claimant: q.claimant,
                    wait_ms: q.wait_ms,
                    reply,
                },
            )
            .await
        }
        Heartbeat::VERB => {
            run(req, &a, t, |q: Heartbeat, reply| QueueMsg::Heartbeat {
                task_id: q.task_id,
                token: q.token,
                checkpoint: q.checkpoint,
                reply,
            })
            .await
        }
        Complete::VERB => {
            run(req, &a, t, |q: Complete, reply| QueueMsg::Complete {
                task_id: q.task_id,
                token: q.token,
                report: q.report,
                manager_reply: q.manager_reply,
                reply,
            })
            .await
        }
        Block::VERB => {
            run(req, &a, t, |q: Block, reply| QueueMsg::Block {
                task_id: q.task_id,
                token: q.token,
                reason: q.reason,
                question: q.question,
                reply,
            })
            .await
        }
        Answer::VERB => {
            run(req, &a, t, |q: Answer, reply| QueueMsg::Answer {
                task_id: q.task_id,
                text: q.text,
                reply,
            })
            .await
        }
        Halt::VERB => run(req, &a, t, |q: Halt, r| QueueMsg::Halt(q.reason, r)).await,
        Resume::VERB => run(req, &a, t, |_: Resume, r| QueueMsg::Resume(r)).await,
        Start::VERB => run(req, &a, t, |_: Start, r| QueueMsg::Start(r)).await,
        Step::VERB => run(req, &a, t, |_: Step, r| QueueMsg::Step(r)).await,
        GetStatus::VERB => run(req, &a, t, |_: GetStatus, r| QueueMsg::Status(r)).await,
        ListTasks::VERB => run(req, &a, t, |q: ListTasks, r| QueueMsg::List(q.state, r)).await,
        RetryTask::VERB => run(req, &a, t, |q: RetryTask, r| QueueMsg::Retry(q.task_id, r)).await,
        Cancel::VERB => run(req, &a, t, |q: Cancel, r| QueueMsg::Cancel(q.task_id, r)).await,
        other => {
            let r: Result<(), _> = Err(ServiceError::new(
                ErrorCode::NotFound,
                format!("unknown verb: {other}"),
            ));
            req.reply(r).await;
        }
    }
}
