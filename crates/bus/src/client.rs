//! The front door of the fabric's services for everything that is not a
//! service: the CLI, the console, the benches and the tests ask through a
//! [`Client`], never through a service's files or internals.
//!
//! A client is a bus connection (NATS, the socket of `xo up`, or the
//! embedded bus), the subjects of its deployment, and how long a call may
//! take; a call is one of the `api!` verbs of `xo_proto`, its reply typed.

use std::time::Duration;

use xo_proto::Subjects;
use xo_proto::control::Request;
use xo_proto::queue::{TaskRecord, TaskState};

use crate::typed::{self, CallError};
use crate::{Bus, BusError};

/// How long a call waits for its answer unless told otherwise (a request's
/// own [`Request::wait`] is added to it).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A client of the fabric's services.
///
/// ```no_run
/// # async fn f(bus: xo_bus::Bus) -> Result<(), xo_bus::typed::CallError> {
/// use xo_bus::Client;
/// let client = Client::new(bus, xo_proto::Subjects::default());
/// let status = client.call(&xo_proto::queue::GetStatus {}).await?;
/// println!("{:?}", status.status);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    bus: Bus,
    subjects: Subjects,
    timeout: Duration,
}

impl Client {
    /// A client on `bus` for the deployment whose subjects are `subjects`,
    /// with [`DEFAULT_TIMEOUT`].
    pub fn new(bus: Bus, subjects: Subjects) -> Self {
        Client {
            bus,
            subjects,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same client with calls waiting at most `timeout` (plus a
    /// request's own wait).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The connection the calls go over (to subscribe or publish beside
    /// them).
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The subjects of the deployment.
    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }

    /// How long a call waits, a request's own wait aside.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Calls `req`'s verb on its service and waits for the typed reply.
    pub async fn call<R: Request>(&self, req: &R) -> Result<R::Response, CallError> {
        typed::call(&self.bus, &self.subjects, req, self.timeout + req.wait()).await
    }

    /// [`Client::call`] on another subject than the request's usual one
    /// (one instance of a service, asked by name).
    pub async fn call_to<R: Request>(
        &self,
        subject: &str,
        req: &R,
    ) -> Result<R::Response, CallError> {
        typed::call_to(&self.bus, subject, req, self.timeout + req.wait()).await
    }

    /// Every task in `state` (all: `None`) in enqueue order, a page at a
    /// time, so a queue of any size fits the bus's message limit.
    pub async fn all_tasks(&self, state: Option<TaskState>) -> Result<Vec<TaskRecord>, CallError> {
        typed::all_tasks(&self.bus, &self.subjects, state, self.timeout).await
    }

    /// Every unit the supervisor knows, a page at a time.
    pub async fn all_units(&self) -> Result<Vec<xo_proto::control::UnitSummary>, CallError> {
        typed::all_units(&self.bus, &self.subjects, self.timeout).await
    }
}

impl CallError {
    /// No service answered (none runs, it is restarting, or the bus could
    /// not carry the request in time): what a caller may wait out or do
    /// without. A service that answered with an error is not this.
    pub fn unanswered(&self) -> bool {
        matches!(
            self,
            CallError::Bus(BusError::NoResponders { .. } | BusError::Timeout { .. })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xo_proto::queue::GetStatus;

    fn local() -> Client {
        Client::new(Bus::Local(crate::LocalBus::new()), Subjects::default())
            .with_timeout(Duration::from_millis(200))
    }

    #[tokio::test]
    async fn a_call_nobody_serves_is_unanswered_and_names_its_subject() {
        let e = local().call(&GetStatus {}).await.unwrap_err();
        assert!(e.unanswered(), "{e}");
        assert!(e.to_string().contains("xo.ctl.queue.status"), "{e}");
    }

    #[test]
    fn a_service_refusal_is_an_answer() {
        let e = CallError::Service(xo_proto::control::ServiceError::new(
            xo_proto::control::ErrorCode::Invalid,
            "no such task",
        ));
        assert!(!e.unanswered());
    }
}
