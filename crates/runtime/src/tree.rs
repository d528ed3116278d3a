//! Actor trees: how every service keeps its actors running.
//!
//! ractor has no restart strategy of its own; this is a small one, as OTP
//! has it: one-for-one, with an intensity limit — at most `max` restarts
//! within `window`, then give up and escalate (the root stops with the
//! reason, and the service's `run` returns it as an error).
//!
//! - [`Intensity`]: the counter (also used by the supervisor's root, which
//!   keeps one watcher a unit).
//! - [`OneForOne`]: a root that keeps one child running, building its
//!   arguments afresh for every start, and forwards every message to it, so
//!   callers hold the root and never see a restart.
//! - [`Shutdown`]: the signal a service's `run` takes; its inputs end on it.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, warn};

/// N restarts within T, then give up.
#[derive(Debug, Clone)]
pub struct Intensity {
    max: u32,
    window_ms: u64,
    times: VecDeque<u64>,
}

impl Intensity {
    pub fn new(max: u32, window: Duration) -> Self {
        Self {
            max,
            window_ms: window.as_millis() as u64,
            times: VecDeque::new(),
        }
    }

    /// Counts a restart at `now_ms`: `Ok(restarts within the window)`, or
    /// `Err` once past the limit.
    pub fn restart(&mut self, now_ms: u64) -> Result<u32, Exceeded> {
        self.times
            .retain(|t| now_ms.saturating_sub(*t) < self.window_ms);
        self.times.push_back(now_ms);
        let n = self.times.len() as u32;
        if n > self.max {
            Err(Exceeded {
                restarts: n,
                window_ms: self.window_ms,
                limit: self.max,
            })
        } else {
            Ok(n)
        }
    }

    /// Restarts counted within the window as of the last call.
    pub fn count(&self) -> u32 {
        self.times.len() as u32
    }
}

/// An [`Intensity`] past its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{restarts} restarts within {window_ms} ms (limit {limit})")]
pub struct Exceeded {
    pub restarts: u32,
    pub window_ms: u64,
    pub limit: u32,
}

/// Why an actor tree could not go on: the error a service's `start`
/// returns when its tree does not start, and its `stop` when the tree gave
/// up. Every service's error enum wraps it (`Tree(#[from] Escalation)`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Escalation {
    /// The tree's root or first child did not start.
    #[error("{service}: the actor tree did not start: {why}")]
    Start { service: String, why: String },
    /// One child (`who`: the service, or a unit's watcher) failed more
    /// often than its intensity allows.
    #[error("escalated: {who}: {exceeded}; last: {last}")]
    Intensity {
        who: String,
        exceeded: Exceeded,
        last: String,
    },
    /// A failed child could not be started again.
    #[error("escalated: {who}: could not restart: {why}")]
    Restart { who: String, why: String },
    /// The root ended with no reason recorded.
    #[error("escalated: {service}: the actor tree stopped on its own")]
    Ended { service: String },
    /// The root's task panicked.
    #[error("escalated: {service}: the actor tree panicked")]
    Panicked { service: String },
}

impl Escalation {
    /// The tree of `service` did not start: `why` is the spawn error.
    pub fn start(service: &str, why: impl std::fmt::Display) -> Self {
        Self::Start {
            service: service.into(),
            why: why.to_string(),
        }
    }
}

/// Builds a child's arguments for every start (first and after a failure).
pub type Factory<A> = Arc<
    dyn Fn() -> Pin<
            Box<dyn Future<Output = Result<<A as Actor>::Arguments, ActorProcessingErr>> + Send>,
        > + Send
        + Sync,
>;

/// The factory of a child built from its own configuration alone (its
/// arguments are `()`).
pub fn no_args<A: Actor<Arguments = ()>>() -> Factory<A> {
    Arc::new(|| Box::pin(async { Ok(()) }))
}

/// A root keeping one child of actor type `A` running, one-for-one.
#[derive(Debug)]
pub struct OneForOne<A> {
    /// The child's definition (configuration only, cloned for each start).
    pub child: A,
    /// Names the service in logs and in the escalation reason.
    pub name: &'static str,
}

pub struct OneForOneArgs<A: Actor> {
    pub factory: Factory<A>,
    pub intensity: Intensity,
    pub current: Current<A::Msg>,
    pub escalation: EscalationCell,
}

/// The child a [`OneForOne`] root keeps now, for callers that send it
/// requests straight (the control API's serve loop): one hop fewer than
/// through the root. Empty while the child restarts.
#[derive(Debug)]
pub struct Current<M: ractor::Message>(Arc<RwLock<Option<ActorRef<M>>>>);

impl<M: ractor::Message> Clone for Current<M> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<M: ractor::Message> Default for Current<M> {
    fn default() -> Self {
        Self(Arc::new(RwLock::new(None)))
    }
}

impl<M: ractor::Message> Current<M> {
    pub fn get(&self) -> Option<ActorRef<M>> {
        self.0.read().ok().and_then(|c| c.clone())
    }
    fn set(&self, child: Option<ActorRef<M>>) {
        if let Ok(mut c) = self.0.write() {
            *c = child;
        }
    }
}

impl<M: ractor::Message> xo_bus::api::Target<M> for Current<M> {
    fn actor(&self) -> Option<ActorRef<M>> {
        self.get()
    }
}

pub struct OneForOneState<A: Actor> {
    current: Current<A::Msg>,
    escalation: EscalationCell,
    child: Option<ActorRef<A::Msg>>,
    factory: Factory<A>,
    intensity: Intensity,
    stopping: bool,
}

impl<A: Actor + Clone> OneForOne<A> {
    async fn start_child(
        &self,
        myself: &ActorRef<A::Msg>,
        factory: &Factory<A>,
    ) -> Result<ActorRef<A::Msg>, ActorProcessingErr> {
        let args = factory().await?;
        let (child, _) = myself
            .get_cell()
            .spawn_linked(None, self.child.clone(), args)
            .await?;
        Ok(child)
    }
}

impl<A: Actor + Clone> Actor for OneForOne<A> {
    type Msg = A::Msg;
    type State = OneForOneState<A>;
    type Arguments = OneForOneArgs<A>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let child = self.start_child(&myself, &args.factory).await?;
        args.current.set(Some(child.clone()));
        Ok(OneForOneState {
            current: args.current,
            escalation: args.escalation,
            child: Some(child),
            factory: args.factory,
            intensity: args.intensity,
            stopping: false,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Drain: the child finishes what it was given, then stops.
        state.stopping = true;
        state.current.set(None);
        if let Some(child) = state.child.take() {
            let _ = child.drain_and_wait(None).await;
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A message that finds no child is dropped; its reply port closes
        // and the caller gets an answer saying so.
        if let Some(child) = &state.child
            && child.send_message(msg).is_err()
        {
            warn!(service = self.name, "message for a stopped child dropped");
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let reason = match evt {
            SupervisionEvent::ActorFailed(_, err) => err.to_string(),
            SupervisionEvent::ActorTerminated(_, _, reason) => {
                reason.unwrap_or_else(|| "stopped".into())
            }
            _ => return Ok(()),
        };
        state.child = None;
        state.current.set(None);
        if state.stopping {
            return Ok(());
        }
        match state.intensity.restart(crate::Clock::System.now_ms()) {
            Ok(n) => {
                warn!(service = self.name, reason = %reason, restarts = n, "actor stopped; restarting it");
                match self.start_child(&myself, &state.factory).await {
                    Ok(child) => {
                        state.current.set(Some(child.clone()));
                        state.child = Some(child);
                    }
                    Err(e) => {
                        let why = Escalation::Restart {
                            who: self.name.into(),
                            why: e.to_string(),
                        };
                        error!(service = self.name, error = %e, "restart failed; escalating");
                        myself.stop(Some(why.to_string()));
                        state.escalation.set(why);
                    }
                }
            }
            Err(exceeded) => {
                let why = Escalation::Intensity {
                    who: self.name.into(),
                    exceeded,
                    last: reason,
                };
                error!(service = self.name, reason = %why, "restart intensity exceeded; escalating");
                myself.stop(Some(why.to_string()));
                state.escalation.set(why);
            }
        }
        Ok(())
    }
}

/// A running service's tree and inputs — what every service's handle
/// holds: the root, the child it keeps now (for the control API), the
/// root's task (it ends only when the tree escalates, or at stop), the
/// inputs (serve loop, subscriptions, tickers) and the shutdown signal
/// they end on.
pub struct Running<M: ractor::Message> {
    pub name: &'static str,
    pub root: ActorRef<M>,
    pub current: Current<M>,
    root_task: Option<JoinHandle<()>>,
    shutdown: Shutdown,
    inputs: Vec<JoinHandle<()>>,
    escalation: EscalationCell,
}

impl<M: ractor::Message> std::fmt::Debug for Running<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("name", &self.name)
            .field("inputs", &self.inputs.len())
            .finish()
    }
}

impl<M: ractor::Message> Running<M> {
    /// Spawns a [`OneForOne`] root over `child`.
    pub async fn one_for_one<A>(
        name: &'static str,
        child: A,
        intensity: Intensity,
        factory: Factory<A>,
    ) -> Result<Self, Escalation>
    where
        A: Actor<Msg = M> + Clone,
    {
        let current = Current::default();
        let escalation = EscalationCell::default();
        let (root, task) = Actor::spawn(
            None,
            OneForOne { child, name },
            OneForOneArgs {
                factory,
                intensity,
                current: current.clone(),
                escalation: escalation.clone(),
            },
        )
        .await
        .map_err(|e| Escalation::start(name, e))?;
        Ok(Self {
            name,
            root,
            current,
            root_task: Some(task),
            shutdown: Shutdown::new(),
            inputs: Vec::new(),
            escalation,
        })
    }

    /// A root spawned otherwise (the supervisor's, which keeps one watcher
    /// a unit and answers the control API itself).
    pub fn with_root(
        name: &'static str,
        root: ActorRef<M>,
        root_task: JoinHandle<()>,
        escalation: EscalationCell,
    ) -> Self {
        let current = Current::default();
        current.set(Some(root.clone()));
        Self {
            name,
            root,
            current,
            root_task: Some(root_task),
            shutdown: Shutdown::new(),
            inputs: Vec::new(),
            escalation,
        }
    }

    /// Ends this tree's inputs on `shutdown` (the service context's), so
    /// that whoever holds it stops them too. Call it before adding inputs.
    pub fn ending_on(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// A future that resolves at stop: inputs end on it.
    pub fn signal(&self) -> impl Future<Output = ()> + Send + 'static {
        self.shutdown.signal()
    }

    /// An input to wait for at stop (it ends on [`Running::signal`]).
    pub fn input(&mut self, h: JoinHandle<()>) {
        self.inputs.push(h);
    }

    /// A ticker input: sends `msg()` to the root every `period` until stop
    /// (a missed tick is delayed, not bunched).
    pub fn every(&mut self, period: Duration, msg: impl Fn() -> M + Send + 'static) {
        let (root, stop) = (self.root.clone(), self.signal());
        self.inputs.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut stop = std::pin::pin!(stop);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stop => break,
                }
                if root.cast(msg()).is_err() {
                    break;
                }
            }
        }));
    }

    /// Waits for `shutdown`, or for the tree to end on its own (it does
    /// only when it escalates), whichever comes first.
    pub async fn until(&mut self, shutdown: impl Future<Output = ()>) {
        match self.root_task.as_mut() {
            Some(t) => {
                tokio::select! {
                    _ = shutdown => {}
                    _ = t => {
                        self.root_task = None;
                        self.escalation.set(Escalation::Ended {
                            service: self.name.into(),
                        });
                    }
                }
            }
            None => shutdown.await,
        }
    }

    /// Why the tree gave up, if it did.
    pub fn escalation(&self) -> Option<Escalation> {
        self.escalation.get()
    }

    /// Stops taking input (every input ends on the signal and is waited
    /// for), then stops the root, which drains its children. `Err` is why
    /// the tree gave up, if it did.
    pub async fn stop(mut self) -> Result<(), Escalation> {
        self.shutdown.trigger();
        for t in self.inputs.drain(..) {
            let _ = t.await;
        }
        self.root.stop(None);
        if let Some(t) = self.root_task.take()
            && t.await.is_err()
        {
            self.escalation.set(Escalation::Panicked {
                service: self.name.into(),
            });
        }
        match self.escalation.get() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Intensity {
    /// The intensity every service's tree uses: `supervisor.max_restarts`
    /// within `supervisor.restart_window_ms`.
    pub fn of(cfg: &crate::XoConfig) -> Self {
        Self::new(
            cfg.supervisor.max_restarts,
            Duration::from_millis(cfg.supervisor.restart_window_ms),
        )
    }
}

/// Why a root stopped, read from its task's end: `None` on a clean stop.
/// (ractor gives the reason to the supervisor only; a root has none, so
/// an escalating root records it here.) The first reason set is kept.
#[derive(Debug, Clone, Default)]
pub struct EscalationCell(Arc<std::sync::Mutex<Option<Escalation>>>);

impl EscalationCell {
    pub fn set(&self, why: Escalation) {
        if let Ok(mut e) = self.0.lock() {
            e.get_or_insert(why);
        }
    }
    pub fn get(&self) -> Option<Escalation> {
        self.0.lock().ok().and_then(|e| e.clone())
    }
}

/// A shutdown signal: [`Shutdown::trigger`] once, every [`Shutdown::signal`]
/// future resolves (also those made after the trigger).
#[derive(Debug, Clone)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Default for Shutdown {
    fn default() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }
    /// Resolves once triggered.
    pub fn signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intensity_counts_within_the_window_only() {
        let mut i = Intensity::new(2, Duration::from_millis(1000));
        assert_eq!(i.restart(0), Ok(1));
        assert_eq!(i.restart(500), Ok(2));
        assert!(
            i.restart(900)
                .unwrap_err()
                .to_string()
                .contains("3 restarts within 1000 ms (limit 2)")
        );
        // The first two left the window.
        let mut i = Intensity::new(2, Duration::from_millis(1000));
        i.restart(0).unwrap();
        i.restart(100).unwrap();
        assert_eq!(i.restart(1200), Ok(1));
    }

    #[tokio::test]
    async fn shutdown_reaches_signals_made_before_and_after() {
        let s = Shutdown::new();
        let before = s.signal();
        s.trigger();
        before.await;
        s.signal().await;
        assert!(s.is_triggered());
    }
}
