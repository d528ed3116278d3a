//! The one serve loop of every control API. A service declares its API in
//! `proto` ([`xo_proto::api!`]) and hands its actor to [`serve`]: each
//! request is decoded by its verb, wrapped in the API's variant with a reply
//! port, sent to the actor, and the actor's answer (or the failure of the
//! call, mapped once by [`call_result`]) goes back as a control reply.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use ractor::rpc::CallResult;
use ractor::{ActorRef, MessagingErr, RpcReplyPort};
use tokio::task::JoinHandle;
use tracing::{Instrument, warn};
use xo_proto::Subjects;
use xo_proto::codec::CONTENT_TYPE;
use xo_proto::control::{Api, ErrorCode, Ports, Reply, Request, Route, ServiceError};

use crate::{Bus, BusResult, Headers, ServiceSpec, typed};

/// ractor's reply ports: `QueueApi<ActorPorts>` is the queue actor's API message.
#[derive(Debug)]
pub struct ActorPorts;

impl Ports for ActorPorts {
    type Port<T: Send + 'static> = RpcReplyPort<Result<T, ServiceError>>;
}

/// The reply port of a request answering `T`.
pub type Port<T> = RpcReplyPort<Result<T, ServiceError>>;

/// How long a service may take to answer, beyond a request's own
/// [`Request::wait`].
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// The one mapping from an actor call's failure to the wire error.
pub fn call_result<T, E: std::fmt::Display>(
    service: &str,
    timeout: Duration,
    r: Result<CallResult<Result<T, ServiceError>>, E>,
) -> Result<T, ServiceError> {
    match r {
        Ok(CallResult::Success(answer)) => answer,
        Ok(CallResult::Timeout) => Err(ServiceError::new(
            ErrorCode::Timeout,
            format!("{service} did not answer within {timeout:?}"),
        )),
        Ok(CallResult::SenderError) => Err(ServiceError::new(
            ErrorCode::Internal,
            format!("{service} dropped the request without answering"),
        )),
        Err(e) => Err(ServiceError::new(
            ErrorCode::Unavailable,
            format!("{service} is not running: {e}"),
        )),
    }
}

/// Where a service's requests go: an actor, or the actor a root currently
/// keeps (so requests do not pass through the root; see `xo_runtime::tree`).
pub trait Target<M: ractor::Message>: Send + Sync + 'static {
    /// The actor to ask now; `None` while it is being restarted.
    fn actor(&self) -> Option<ActorRef<M>>;
}

impl<M: ractor::Message> Target<M> for ActorRef<M> {
    fn actor(&self) -> Option<ActorRef<M>> {
        Some(self.clone())
    }
}

/// Serves API `A` on `xo.ctl.<service>.<verb>` (on NATS a micro service
/// `xo-<service>`, so `nats micro ls` and `$SRV.PING` see it) until
/// `shutdown` resolves; each request is answered by `actor`, one task a
/// request (a long-poll does not hold up the others).
pub async fn serve<A, M>(
    bus: &Bus,
    subjects: &Subjects,
    limit: usize,
    description: &str,
    target: impl Target<M>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> BusResult<JoinHandle<()>>
where
    A: Api<ActorPorts>,
    M: From<A> + ractor::Message,
{
    let group = subjects.ctl_group(A::SERVICE);
    serve_in::<A, M>(bus, group, limit, description, target, shutdown).await
}

/// [`serve`] under another subject group (`<group>.<verb>`): one instance
/// of a service among several, asked by name (a sharded supervisor's
/// `xo.ctl.supervisor.at.<instance>`).
pub async fn serve_in<A, M>(
    bus: &Bus,
    group: String,
    limit: usize,
    description: &str,
    target: impl Target<M>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> BusResult<JoinHandle<()>>
where
    A: Api<ActorPorts>,
    M: From<A> + ractor::Message,
{
    let mut ep = bus
        .serve(ServiceSpec {
            name: format!("xo-{}", A::SERVICE),
            version: env!("CARGO_PKG_VERSION").into(),
            description: description.into(),
            group,
            verbs: A::VERBS.iter().map(|v| v.to_string()).collect(),
            scoped: A::SCOPED.iter().map(|v| v.to_string()).collect(),
        })
        .await?;
    Ok(tokio::spawn(async move {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let req = tokio::select! {
                r = ep.next() => r,
                _ = &mut shutdown => None,
            };
            let Some(req) = req else { break };
            let routed = A::route(
                req.verb(),
                req.scope(),
                &req.message.payload,
                req.message.headers.get(CONTENT_TYPE),
                limit,
                ToActor::<M> {
                    actor: target.actor(),
                },
            );
            // A request made in a trace is answered in it (a task's claim,
            // renewals and outcome in the task's trace).
            let span = if req.message.headers.get("traceparent").is_some() {
                let span = tracing::info_span!(
                    "xo.ctl",
                    otel.name = %format!("{} {}", A::SERVICE, req.verb()),
                    otel.kind = "server",
                    rpc.service = A::SERVICE,
                    rpc.method = req.verb(),
                );
                crate::trace::link(&span, &req.message.headers);
                span
            } else {
                tracing::Span::none()
            };
            tokio::spawn(
                async move {
                    let (h, body) = match routed {
                        Ok(answer) => answer.await,
                        Err(e) => typed::encode_reply::<()>(&Reply::Err(e)),
                    };
                    let subject = req.message.subject.clone();
                    if let Err(e) = req.respond(h, body).await {
                        warn!(subject = %subject, error = %e, "control reply could not be sent");
                    }
                }
                .instrument(span),
            );
        }
        ep.stop().await;
    }))
}

type Answer = Pin<Box<dyn Future<Output = (Headers, Bytes)> + Send>>;

struct ToActor<M: ractor::Message> {
    actor: Option<ActorRef<M>>,
}

impl<A, M> Route<A, ActorPorts> for ToActor<M>
where
    A: Api<ActorPorts>,
    M: From<A> + ractor::Message,
{
    type Out = Answer;

    /// The request goes into the actor's mailbox here, as the serve loop
    /// reads it (only the wait for its answer is spawned): a service takes
    /// requests in the order they arrived, so a client's claim sent before
    /// its enqueue is seen first.
    fn route<R: Request>(self, req: R, variant: fn(R, Port<R::Response>) -> A) -> Answer {
        let timeout = ANSWER_WITHIN + req.wait();
        let Some(actor) = self.actor else {
            let r: Result<R::Response, _> = Err(ServiceError::new(
                ErrorCode::Unavailable,
                format!("{} is restarting; try again", A::SERVICE),
            ));
            let answer = typed::encode_reply(&Reply::from(r));
            return Box::pin(async move { answer });
        };
        let (tx, rx) = ractor::concurrency::oneshot();
        let sent = actor.send_message(M::from(variant(req, (tx, timeout).into())));
        Box::pin(async move {
            let r = match sent {
                Ok(()) => Ok(match tokio::time::timeout(timeout, rx).await {
                    Ok(Ok(answer)) => CallResult::Success(answer),
                    Ok(Err(_)) => CallResult::SenderError,
                    Err(_) => CallResult::Timeout,
                }),
                Err(e) => Err(e),
            };
            let r = call_result(
                A::SERVICE,
                timeout,
                r.map_err(|e: MessagingErr<M>| e.to_string()),
            );
            typed::encode_reply(&Reply::from(r))
        })
    }
}
