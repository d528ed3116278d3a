//! The in-process bus: NATS semantics (subjects, wildcards, request/reply,
//! headers) inside one process. Delivery to each subscriber is in publish
//! order and nothing is dropped (unbounded per-subscriber queues).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::subject_match::Pattern;
use crate::{BusError, BusResult, Headers, Message, Subscription};

/// Header a reply carries when nobody listened (as NATS's 503 status).
pub const STATUS_HEADER: &str = "Status";
pub const NO_RESPONDERS: &str = "503";

struct Sub {
    id: u64,
    pattern: Pattern,
    tx: mpsc::UnboundedSender<Message>,
}

#[derive(Default)]
struct Inner {
    subs: RwLock<Vec<Sub>>,
    next_id: AtomicU64,
}

/// The in-process bus. Clones share one hub.
#[derive(Clone, Default)]
pub struct LocalBus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBus")
            .field("subscriptions", &self.subscription_count())
            .finish()
    }
}

/// The receiving end of a local subscription; dropping it unsubscribes.
pub struct ChannelSub {
    pub(crate) rx: mpsc::UnboundedReceiver<Message>,
    _guard: Option<SubGuard>,
}

impl ChannelSub {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<Message>, guard: Option<SubGuard>) -> Self {
        Self { rx, _guard: guard }
    }
}

pub(crate) struct SubGuard(Box<dyn FnOnce() + Send + Sync>);

impl SubGuard {
    pub(crate) fn new(f: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self(Box::new(f))
    }
}

impl Drop for SubGuard {
    fn drop(&mut self) {
        let f = std::mem::replace(&mut self.0, Box::new(|| {}));
        f();
    }
}

impl LocalBus {
    pub fn new() -> Self {
        Self::default()
    }

    /// Live subscriptions; used to prove a disabled service subscribes to nothing.
    pub fn subscription_count(&self) -> usize {
        self.inner.subs.read().map(|s| s.len()).unwrap_or(0)
    }

    /// Delivers a message; returns how many subscribers received it.
    pub fn publish_with_reply(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Headers,
        payload: Bytes,
    ) -> usize {
        let msg = Message {
            subject: subject.to_string(),
            reply: reply.map(str::to_string),
            headers,
            payload,
        };
        let mut delivered = 0;
        let mut dead = false;
        if let Ok(subs) = self.inner.subs.read() {
            for s in subs.iter().filter(|s| s.pattern.matches(subject)) {
                if s.tx.send(msg.clone()).is_ok() {
                    delivered += 1;
                } else {
                    dead = true;
                }
            }
        }
        if dead && let Ok(mut subs) = self.inner.subs.write() {
            subs.retain(|s| !s.tx.is_closed());
        }
        delivered
    }

    pub fn subscribe(&self, pattern: &str) -> Subscription {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut subs) = self.inner.subs.write() {
            subs.push(Sub {
                id,
                pattern: Pattern::new(pattern),
                tx,
            });
        }
        let inner = Arc::downgrade(&self.inner);
        let guard = SubGuard::new(move || {
            if let Some(inner) = inner.upgrade()
                && let Ok(mut subs) = inner.subs.write()
            {
                subs.retain(|s| s.id != id);
            }
        });
        Subscription::Channel(ChannelSub::new(rx, Some(guard)))
    }

    pub fn new_inbox(&self) -> String {
        format!(
            "_INBOX.local.{}",
            self.inner.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }

    pub async fn request(
        &self,
        subject: &str,
        headers: Headers,
        payload: Bytes,
        timeout: Duration,
    ) -> BusResult<Message> {
        let inbox = self.new_inbox();
        let mut sub = self.subscribe(&inbox);
        if self.publish_with_reply(subject, Some(&inbox), headers, payload) == 0 {
            return Err(BusError::NoResponders {
                subject: subject.to_string(),
            });
        }
        crate::await_reply(&mut sub, subject, timeout).await
    }
}
