//! The one serve loop of every control API. A service declares its API in
//! `proto` ([`xo_proto::api!`]) and hands its actor to [`serve`]: each
//! request is decoded by its verb, wrapped in the API's variant with a reply
//! port, sent to the actor, and the actor's answer (or the failure of the
//! call, mapped once by [`call_result`]) goes back as a control reply.

use std::future::Future;
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorRef, ActorStatus, RpcReplyPort};
use tokio::task::JoinHandle;
use xo_proto::Subjects;
use xo_proto::codec::CONTENT_TYPE;
use xo_proto::control::{Api, ErrorCode, Ports, Reply, Request, Route, ServiceError};

use crate::{Answerer, Bus, BusResult, ServiceSpec, typed};

/// An actor's reply ports: `QueueApi<ActorPorts>` is the queue actor's API message.
#[derive(Debug)]
pub struct ActorPorts;

impl Ports for ActorPorts {
    type Port<T: Send + 'static> = Port<T>;
}

/// Where the answer to a request for `T` goes. A request read by [`serve`]
/// is answered straight from where the actor sends its answer (encoded and
/// put on the bus there: no task waits for it); one asked in the process
/// (`ActorRef::call`) goes back through ractor's port it came with.
///
/// A port dropped unanswered answers that the service dropped the request,
/// so that a caller never waits out its timeout for a service that let go
/// of its request (one that stopped with claims waiting).
pub struct Port<T: Send + 'static>(Kind<T>);

/// Sends a request's answer where its caller waits for it.
type Answering<T> = Box<dyn FnOnce(Result<T, ServiceError>) + Send>;

enum Kind<T: Send + 'static> {
    Call(RpcReplyPort<Result<T, ServiceError>>),
    Wire {
        answer: Option<Answering<T>>,
        /// Past it, the caller has given up ([`ANSWER_WITHIN`] beyond the request's wait).
        until: tokio::time::Instant,
        service: &'static str,
    },
}

impl<T: Send + 'static> std::fmt::Debug for Port<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Kind::Call(_) => f.write_str("Port(call)"),
            Kind::Wire { service, .. } => write!(f, "Port(wire, {service})"),
        }
    }
}

impl<T: Send + 'static> From<RpcReplyPort<Result<T, ServiceError>>> for Port<T> {
    fn from(port: RpcReplyPort<Result<T, ServiceError>>) -> Self {
        Port(Kind::Call(port))
    }
}

impl<T: Send + 'static> Port<T> {
    /// A port that answers by running `answer` once: with what is sent, or,
    /// dropped unsent, with the service's "dropped the request" error.
    pub fn answering(
        service: &'static str,
        within: Duration,
        answer: impl FnOnce(Result<T, ServiceError>) + Send + 'static,
    ) -> Self {
        Port(Kind::Wire {
            answer: Some(Box::new(answer)),
            until: tokio::time::Instant::now() + within,
            service,
        })
    }

    /// Sends the answer; `Err` gives it back when nobody waits for it any more.
    pub fn send(mut self, answer: Result<T, ServiceError>) -> Result<(), Result<T, ServiceError>> {
        match &mut self.0 {
            Kind::Call(_) => {
                let Kind::Call(port) = std::mem::replace(
                    &mut self.0,
                    Kind::Wire {
                        answer: None,
                        until: tokio::time::Instant::now(),
                        service: "",
                    },
                ) else {
                    unreachable!("matched above")
                };
                port.send(answer).map_err(|e| match e {
                    ractor::MessagingErr::SendErr(a) => a,
                    _ => Err(ServiceError::new(ErrorCode::Internal, "reply port closed")),
                })
            }
            Kind::Wire { answer: slot, .. } => match slot.take() {
                Some(f) => {
                    f(answer);
                    Ok(())
                }
                None => Err(answer),
            },
        }
    }

    /// Whether the caller has given up waiting (its port closed, or the
    /// time it waits for a service's answer is past).
    pub fn is_closed(&self) -> bool {
        match &self.0 {
            Kind::Call(port) => port.is_closed(),
            Kind::Wire { answer, until, .. } => {
                answer.is_none() || tokio::time::Instant::now() >= *until
            }
        }
    }
}

impl<T: Send + 'static> Drop for Port<T> {
    fn drop(&mut self) {
        if let Kind::Wire {
            answer: slot,
            service,
            ..
        } = &mut self.0
            && let Some(f) = slot.take()
        {
            f(Err(ServiceError::new(
                ErrorCode::Internal,
                format!("{service} dropped the request without answering"),
            )));
        }
    }
}

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
            let (asked, answerer) = req.split();
            // A request made in a trace is answered in it (a task's claim,
            // renewals and outcome in the task's trace).
            let span = if asked.message.headers.get("traceparent").is_some() {
                let span = tracing::info_span!(
                    "xo.ctl",
                    otel.name = %format!("{} {}", A::SERVICE, asked.verb()),
                    otel.kind = "server",
                    rpc.service = A::SERVICE,
                    rpc.method = asked.verb(),
                );
                crate::trace::link(&span, &asked.message.headers);
                span
            } else {
                tracing::Span::none()
            };
            let mut answerer = Some((answerer, span));
            let routed = A::route(
                asked.verb(),
                asked.scope(),
                &asked.message.payload,
                asked.message.headers.get(CONTENT_TYPE),
                limit,
                ToActor::<M> {
                    actor: target.actor(),
                    answerer: &mut answerer,
                },
            );
            // Refused before it reached the actor: answered here.
            if let (Err(e), Some((answerer, span))) = (routed, answerer) {
                answer_now(A::SERVICE, answerer, span, Err::<(), _>(e));
            }
        }
        ep.stop().await;
    }))
}

/// Encodes a control reply and sends it (see [`Answerer::answer`]).
fn answer_now<T: serde::Serialize>(
    service: &'static str,
    answerer: Answerer,
    span: tracing::Span,
    r: Result<T, ServiceError>,
) {
    // Encoded in the request's span: the reply carries its trace context.
    let (h, body) = span.in_scope(|| typed::encode_reply(&Reply::from(r)));
    answerer.answer(service, h, body, span);
}

struct ToActor<'a, M: ractor::Message> {
    actor: Option<ActorRef<M>>,
    /// Taken by the port the request goes to the actor with.
    answerer: &'a mut Option<(Answerer, tracing::Span)>,
}

impl<A, M> Route<A, ActorPorts> for ToActor<'_, M>
where
    A: Api<ActorPorts>,
    M: From<A> + ractor::Message,
{
    type Out = ();

    /// The request goes into the actor's mailbox here, as the serve loop
    /// reads it: a service takes requests in the order they arrived, so a
    /// client's claim sent before its enqueue is seen first. Its port
    /// answers from where the actor answers; nothing waits for it here.
    fn route<R: Request>(self, req: R, variant: fn(R, Port<R::Response>) -> A) {
        let Some((answerer, span)) = self.answerer.take() else {
            return;
        };
        let actor = match self.actor {
            Some(a) if !matches!(a.get_status(), ActorStatus::Stopping | ActorStatus::Stopped) => a,
            Some(_) => {
                let r: Result<R::Response, _> = Err(ServiceError::new(
                    ErrorCode::Unavailable,
                    format!("{} is not running: it is stopping", A::SERVICE),
                ));
                return answer_now(A::SERVICE, answerer, span, r);
            }
            None => {
                let r: Result<R::Response, _> = Err(ServiceError::new(
                    ErrorCode::Unavailable,
                    format!("{} is restarting; try again", A::SERVICE),
                ));
                return answer_now(A::SERVICE, answerer, span, r);
            }
        };
        let within = ANSWER_WITHIN + req.wait();
        let port = Port::answering(A::SERVICE, within, move |r: Result<R::Response, _>| {
            answer_now(A::SERVICE, answerer, span, r)
        });
        // Not delivered (the actor stopped meanwhile): the message is
        // dropped with its port, which answers that it was dropped.
        let _ = actor.send_message(M::from(variant(req, port)));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use ractor::{Actor, ActorProcessingErr};
    use xo_proto::knowledge::{ListReviewRuns, ReviewApi};

    use super::*;
    use crate::LocalBus;
    use crate::typed::CallError;

    type Answers = Arc<Mutex<Vec<Result<u32, ServiceError>>>>;

    /// A port whose answers are kept, as the serve loop's would be sent.
    fn kept(within: Duration) -> (Port<u32>, Answers) {
        let answers: Answers = Arc::default();
        let to = answers.clone();
        let port = Port::answering("svc", within, move |r| to.lock().unwrap().push(r));
        (port, answers)
    }

    #[test]
    fn a_port_answers_once_with_what_is_sent() {
        let (port, answers) = kept(ANSWER_WITHIN);
        assert!(port.send(Ok(7)).is_ok());
        let got = answers.lock().unwrap();
        assert_eq!(got.len(), 1, "answered once, and not again as it dropped");
        assert_eq!(got[0].as_ref().ok(), Some(&7));
    }

    /// A service that lets go of a request (it stopped with the request
    /// waiting) answers it, so its caller does not wait out a timeout.
    #[test]
    fn a_port_dropped_unsent_answers_that_the_request_was_dropped() {
        let (port, answers) = kept(ANSWER_WITHIN);
        drop(port);
        let got = answers.lock().unwrap();
        assert_eq!(got.len(), 1);
        let e = got[0].as_ref().unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal);
        assert_eq!(e.message, "svc dropped the request without answering");
    }

    /// A long-poll's waiter is dropped once its caller has given up: its
    /// port says so when the time it was given is past.
    #[tokio::test(start_paused = true)]
    async fn a_port_is_closed_once_its_caller_has_given_up() {
        let (port, answers) = kept(Duration::from_secs(10));
        assert!(!port.is_closed());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(!port.is_closed());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(port.is_closed());
        drop(port);
        assert_eq!(
            answers.lock().unwrap().len(),
            1,
            "still answered as dropped"
        );
    }

    /// A request asked in the process (`ActorRef::call`) is answered
    /// through ractor's port it came with.
    #[tokio::test]
    async fn a_port_made_from_ractors_answers_through_it() {
        let (tx, rx) = ractor::concurrency::oneshot();
        let port: Port<u32> = RpcReplyPort::from(tx).into();
        assert!(!port.is_closed());
        assert!(port.send(Ok(3)).is_ok());
        assert_eq!(rx.await.unwrap().ok(), Some(3));
        let (tx, rx) = ractor::concurrency::oneshot::<Result<u32, ServiceError>>();
        drop(rx);
        let port: Port<u32> = RpcReplyPort::from(tx).into();
        assert!(port.is_closed(), "its caller is gone");
        assert_eq!(port.send(Ok(4)).unwrap_err().ok(), Some(4), "given back");
    }

    /// Answers `runs` with as many runs as `last` asks of it (none), or,
    /// asked for 0, lets go of the request unanswered.
    struct Reviews;

    impl Actor for Reviews {
        type Msg = ReviewApi<ActorPorts>;
        type State = ();
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<Self::Msg>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }

        async fn handle(
            &self,
            _: ActorRef<Self::Msg>,
            msg: Self::Msg,
            _: &mut (),
        ) -> Result<(), ActorProcessingErr> {
            let ReviewApi::Runs(q, port) = msg;
            if q.last != Some(0) {
                let _ = port.send(Ok(Vec::new()));
            }
            Ok(())
        }
    }

    /// Over the in-process bus, a served request is answered from where
    /// the actor answers it; one the actor lets go of, or one sent to an
    /// actor that has stopped, is answered with why.
    #[tokio::test]
    async fn a_served_request_is_answered_by_its_actor_or_told_why_not() {
        let bus = Bus::Local(LocalBus::new());
        let subjects = Subjects::default();
        let (actor, handle) = Actor::spawn(None, Reviews, ()).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = serve::<ReviewApi<ActorPorts>, _>(
            &bus,
            &subjects,
            1 << 20,
            "reviews",
            actor.clone(),
            async move {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
        let ask = |last| {
            let (bus, subjects) = (bus.clone(), subjects.clone());
            async move {
                typed::call(
                    &bus,
                    &subjects,
                    &ListReviewRuns { last },
                    Duration::from_secs(30),
                )
                .await
            }
        };
        assert_eq!(ask(None).await.unwrap(), Vec::new());
        match ask(Some(0)).await {
            Err(CallError::Service(e)) => {
                assert_eq!(e.code, ErrorCode::Internal);
                assert!(
                    e.message.contains("dropped the request without answering"),
                    "{e}"
                );
            }
            other => panic!("the dropped request is answered as such: {other:?}"),
        }
        actor.stop(None);
        handle.await.unwrap();
        match ask(None).await {
            Err(CallError::Service(e)) => {
                assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
                assert!(e.message.contains("review is not running"), "{e}");
            }
            other => panic!("a stopped actor's request is refused: {other:?}"),
        }
        let _ = stop.send(());
        served.await.unwrap();
    }
}
