//! The one event input of every service, beside [`crate::api::serve`]: a
//! subscription read until the service's shutdown signal, each message
//! handed on in the order it came.
//!
//! - [`raw`]: the messages as they come, to a [`Handler`] (the supervisor's
//!   report pump, which decodes on the watchers' cores); [`raw_on_thread`]
//!   on a thread of its own, [`raw_on_own_connection`] with its connection
//!   there too.
//! - [`typed`]: each decoded as a versioned message `T`; one that does not
//!   decode is dead-lettered (`xo.dlq.<subject>`, the reason in its
//!   headers) and logged, never dropped silently; the rest go to the
//!   handler with their headers (a trace's context rides in them).
//! - [`cast`]: [`typed`], then cast to the actor a [`Target`] keeps
//!   (`Current` of a one-for-one root), wrapped in its message.
//!
//! Each returns the input's task, to be waited for at stop (`tree::Running::input`).
//!
//! A handler that panics on a message does not end its input: the panic
//! is caught, logged with the handler it happened in, counted ([`panics`]) and the input
//! reads the next message (one bad message must not deafen a service).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;

use ractor::ActorRef;
use tokio::task::JoinHandle;
use tracing::{Instrument, warn};
use xo_proto::{CodecError, Subjects};

use crate::api::Target;
use crate::{Bus, BusError, BusResult, Headers, Message, Subscription, typed as codec};

static PANICS: AtomicU64 = AtomicU64::new(0);

/// Messages whose handler panicked in this process (each skipped).
pub fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Counts and logs a panic caught while handling `what`.
pub fn caught(what: &str, panic: &(dyn std::any::Any + Send)) {
    counted(
        what,
        panic,
        "handling an input panicked; it was skipped and the input goes on (counted: xo_input_panics_total)",
    );
}

/// Counts a caught panic and logs it with what became of the input.
fn counted(what: &str, panic: &(dyn std::any::Any + Send), outcome: &'static str) {
    PANICS.fetch_add(1, Ordering::Relaxed);
    let said = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    tracing::error!(input = what, panic = said, "{outcome}");
}

/// What an input does after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read the next one.
    Go,
    /// Stop reading: where the messages go is gone for good.
    Stop,
}

/// What an input does with each message (or decoded value) `T`.
pub trait Handler<T>: Send + 'static {
    fn handle(&mut self, item: T) -> impl Future<Output = Next> + Send + '_;

    /// Called by [`raw`] when no message is waiting, before it waits for
    /// the next: a handler that gathers messages (the report pump, per
    /// watcher group) hands them on here, so a burst costs one hand-over
    /// and a lone message is not held.
    fn caught_up(&mut self) -> impl Future<Output = Next> + Send + '_ {
        std::future::ready(Next::Go)
    }

    /// What the handler waits for besides the next message (the report
    /// pump: the root's answer for new units' watchers, and handing their
    /// reports on): awaited by [`raw`] beside the next message once
    /// [`Handler::caught_up`] has run, and `caught_up` is called again when
    /// it resolves. Cancelled when a message comes first, so it must lose
    /// nothing if dropped at a wait. Never resolves, by default.
    fn awaited(&mut self) -> impl Future<Output = Next> + Send + '_ {
        std::future::pending()
    }

    /// Called by [`raw`] once, when the input ends on its shutdown signal
    /// or its subscription's end: a handler still holding messages hands
    /// them on here. Nothing to do, by default.
    fn ending(&mut self) -> impl Future<Output = ()> + Send + '_ {
        std::future::ready(())
    }
}

/// A closure is a handler when its future owns what it uses.
impl<T, F, Fut> Handler<T> for F
where
    T: Send + 'static,
    F: FnMut(T) -> Fut + Send + 'static,
    Fut: Future<Output = Next> + Send + 'static,
{
    fn handle(&mut self, item: T) -> impl Future<Output = Next> + Send + '_ {
        self(item)
    }
}

/// Reads `sub` until `shutdown` resolves, the subscription ends, or the
/// handler says [`Next::Stop`]. A message already waiting is read before
/// the shutdown signal is looked at (ingest does not poll the signal per
/// message); once none waits, the handler is told ([`Handler::caught_up`])
/// and the signal ends the input.
pub fn raw<H: Handler<Message>>(
    sub: Subscription,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handler: H,
) -> JoinHandle<()> {
    tokio::spawn(read(sub, shutdown, handler).in_current_span())
}

/// [`raw`] on a thread of its own, with a runtime of its own there: the
/// input keeps taking messages off the connection while every worker of
/// the process's runtime is busy with what it handed them (the report
/// pump: behind watcher groups that are all busy it still reads, so an
/// overload is shed where the supervisor chooses, each unit's latest report
/// kept, instead of overflowing the connection's buffer at random). The
/// handle resolves when the input ends. The thread is the input's alone
/// and is not waited for when the process's runtime is dropped (as a task
/// of it would not be). If no thread can be made for it, it runs as
/// [`raw`] does, and says so.
pub fn raw_on_thread<H: Handler<Message>>(
    name: &'static str,
    sub: Subscription,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handler: H,
) -> JoinHandle<()> {
    let input = tokio::task::unconstrained(read(sub, shutdown, handler))
        .instrument(tracing::Span::current());
    on_thread(name, input)
}

/// [`raw_on_thread`] reading `pattern` on a connection of its own, made on
/// the input's thread: read off the socket there by [`crate::wire`] where
/// it can be, else by a NATS client of its own ([`Bus::another`]; a bus
/// given TLS) whose reading task (what takes messages off the socket and
/// parses them) runs there too. Either way the reading is not done on the
/// process's runtime, so nothing is lost at the connection while every
/// worker is busy, and a message does not cross threads before it is
/// handled. Returns once the subscription is live. Without a connection of
/// its own (the in-process and socket buses, one that cannot be made: said
/// in the log) it reads `bus`'s; without a thread, it runs as [`raw`].
pub async fn raw_on_own_connection<H: Handler<Message>>(
    name: &'static str,
    bus: &Bus,
    pattern: &str,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handler: H,
) -> BusResult<JoinHandle<()>> {
    let (ready, subscribed) = tokio::sync::oneshot::channel::<BusResult<()>>();
    let (bus, pattern) = (bus.clone(), pattern.to_string());
    let input = async move {
        let (sub, own) = match own_subscription(name, &bus, &pattern).await {
            Ok(found) => found,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        tokio::task::unconstrained(read(sub, shutdown, handler)).await;
        // The connection closes with the input.
        drop(own);
    }
    .instrument(tracing::Span::current());
    let ended = on_thread(name, input);
    match subscribed.await {
        Ok(Ok(())) => Ok(ended),
        Ok(Err(e)) => Err(e),
        // Ended before it subscribed: only a panic does.
        Err(_) => Err(BusError::Closed),
    }
}

/// The live subscription [`raw_on_own_connection`] reads, and the client
/// it is read through when that is one of its own (kept until the input
/// ends): off the wire where it can be ([`crate::wire`]: no client task
/// and channel between the socket and the handler), else a NATS client of
/// its own, else `bus`'s.
async fn own_subscription(
    name: &'static str,
    bus: &Bus,
    pattern: &str,
) -> BusResult<(Subscription, Option<Bus>)> {
    match bus.wire(name, pattern).await {
        Some(Ok(sub)) => return Ok((sub, None)),
        Some(Err(e)) => {
            warn!(input = name, error = %e, "the input could not read off a connection of its own; the NATS client reads for it");
        }
        None => {}
    }
    let own = match bus.another(name).await {
        Some(Ok(own)) => Some(own),
        Some(Err(e)) => {
            warn!(input = name, error = %e, "no connection of its own for the input: it reads the service's");
            None
        }
        None => None,
    };
    let conn = own.as_ref().unwrap_or(bus);
    let sub = conn.subscribe(pattern).await?;
    // A round trip: the server has the subscription when this returns
    // (a message published after it, from any connection, is read).
    if let Err(e) = conn.flush().await {
        warn!(input = name, error = %e, "the server did not confirm the input's subscription; it reads what comes");
    }
    Ok((sub, own))
}

/// Runs `input` on a thread named `xo <name>` with a runtime of its own
/// (the inputs above run there unconstrained by tokio's cooperative budget:
/// on NATS a budget spent makes a waiting message look absent after 128,
/// so a burst would be cut into handovers of 128, and on the input's own
/// connection the connection's reading, thousands a turn, would outrun
/// an input taking 128 a turn until the subscription overflowed);
/// the handle resolves when it ends. If no thread or runtime can be made,
/// it runs as a task of the process's runtime, and says so.
fn on_thread<F: Future<Output = ()> + Send + 'static>(
    name: &'static str,
    input: F,
) -> JoinHandle<()> {
    let (done, ended) = tokio::sync::oneshot::channel::<()>();
    // Shared with the thread: one that cannot be made drops what it was
    // given, and the input comes back from here.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(input)));
    let theirs = slot.clone();
    let made = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            std::thread::Builder::new()
                .name(format!("xo {name}"))
                .spawn(move || {
                    let input = theirs.lock().ok().and_then(|mut s| s.take());
                    if let Some(input) = input {
                        rt.block_on(input);
                    }
                    let _ = done.send(());
                })
                .map_err(|e| e.to_string())
        });
    let input = match made {
        Ok(_) => None,
        // Not made: what it was given comes back from the slot.
        Err(e) => {
            warn!(input = name, error = %e, "no thread of its own for the input: it reads on the process's runtime");
            slot.lock().ok().and_then(|mut s| s.take())
        }
    };
    match input {
        Some(input) => tokio::spawn(input),
        None => tokio::spawn(async move {
            let _ = ended.await;
        }),
    }
}

async fn read<H: Handler<Message>>(
    mut sub: Subscription,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut handler: H,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let name = std::any::type_name::<H>;
    let mut awaiting = true;
    loop {
        let msg = match sub.try_next() {
            Some(m) => Some(m),
            // A handler whose wait panicked is not asked to wait again
            // until the next message (a wait that panics at once would
            // spin the input).
            None => loop {
                match std::panic::AssertUnwindSafe(handler.caught_up())
                    .catch_unwind()
                    .await
                {
                    Ok(Next::Stop) => return,
                    Ok(Next::Go) => {}
                    Err(panic) => caught(name(), panic.as_ref()),
                }
                let waits = awaiting;
                let awaited = async {
                    if !waits {
                        return std::future::pending().await;
                    }
                    std::panic::AssertUnwindSafe(handler.awaited())
                        .catch_unwind()
                        .await
                };
                tokio::select! {
                    biased;
                    m = sub.next() => break m,
                    done = awaited => match done {
                        Ok(Next::Stop) => return,
                        Ok(Next::Go) => {}
                        Err(panic) => {
                            caught(name(), panic.as_ref());
                            awaiting = false;
                        }
                    },
                    _ = &mut shutdown => break None,
                }
            },
        };
        let Some(msg) = msg else {
            if let Err(panic) = std::panic::AssertUnwindSafe(handler.ending())
                .catch_unwind()
                .await
            {
                counted(
                    name(),
                    panic.as_ref(),
                    "the input panicked while ending; what it held is lost (counted: xo_input_panics_total)",
                );
            }
            break;
        };
        awaiting = true;
        // No per-message copy for the log (this is the report
        // pump's path): a panic is named by its handler's type.
        match std::panic::AssertUnwindSafe(handler.handle(msg))
            .catch_unwind()
            .await
        {
            Ok(Next::Stop) => break,
            Ok(Next::Go) => {}
            Err(panic) => caught(name(), panic.as_ref()),
        }
    }
}

/// Where [`typed`] sends what does not decode.
#[derive(Clone)]
pub struct DeadLetters {
    pub bus: Bus,
    pub subjects: Subjects,
    /// The input's name in the log (`alerts`, `review task events`…).
    pub input: &'static str,
    /// Called for each message dead-lettered (a service's counter).
    pub counted: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("input", &self.input)
            .finish()
    }
}

impl DeadLetters {
    pub fn new(bus: Bus, subjects: Subjects, input: &'static str) -> Self {
        Self {
            bus,
            subjects,
            input,
            counted: None,
        }
    }

    /// Counts, logs and dead-letters `msg`.
    pub async fn reject(&self, msg: &Message, err: &CodecError) {
        if let Some(count) = &self.counted {
            count();
        }
        warn!(input = self.input, subject = %msg.subject, reason = err.code(), error = %err, "message dead-lettered");
        codec::dead_letter(&self.bus, &self.subjects, msg, err).await;
    }
}

/// [`raw`], each message decoded as `T` (at most `limit` bytes) before the
/// handler sees it, with its headers; one that does not decode is
/// dead-lettered.
pub fn typed<T, H>(
    sub: Subscription,
    limit: usize,
    dead: DeadLetters,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handler: H,
) -> JoinHandle<()>
where
    T: xo_proto::Message + Send + 'static,
    H: Handler<(T, Headers)>,
{
    raw(
        sub,
        shutdown,
        Decoding {
            limit,
            dead,
            handler,
            _t: std::marker::PhantomData::<fn() -> T>,
        },
    )
}

struct Decoding<T, H> {
    limit: usize,
    dead: DeadLetters,
    handler: H,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T, H> Handler<Message> for Decoding<T, H>
where
    T: xo_proto::Message + Send + 'static,
    H: Handler<(T, Headers)>,
{
    async fn handle(&mut self, msg: Message) -> Next {
        match codec::decode::<T>(&msg, self.limit) {
            Ok(v) => self.handler.handle((v, msg.headers)).await,
            Err(e) => {
                self.dead.reject(&msg, &e).await;
                Next::Go
            }
        }
    }
}

/// [`typed`], each value cast to the actor `target` keeps now, as
/// `wrap(value)`. While that actor is being restarted (or once it is gone)
/// the value is not delivered and the log says so; the input ends on its
/// shutdown signal.
pub fn cast<T, M>(
    sub: Subscription,
    limit: usize,
    dead: DeadLetters,
    shutdown: impl Future<Output = ()> + Send + 'static,
    target: impl Target<M>,
    wrap: fn(T) -> M,
) -> JoinHandle<()>
where
    T: xo_proto::Message + Send + 'static,
    M: ractor::Message,
{
    let input = dead.input;
    typed(sub, limit, dead, shutdown, move |(v, _): (T, Headers)| {
        let actor: Option<ActorRef<M>> = target.actor();
        async move {
            match actor.map(|a| a.cast(wrap(v))) {
                Some(Ok(())) => {}
                Some(Err(_)) | None => {
                    warn!(
                        input,
                        "its actor is restarting or stopped; message not delivered"
                    )
                }
            }
            Next::Go
        }
    })
}
