//! The in-process bus: NATS semantics (subjects, wildcards, request/reply,
//! headers) inside one process. Delivery to each subscriber is in publish
//! order and nothing is dropped (unbounded per-subscriber queues).

use std::collections::HashMap;
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
    tx: mpsc::UnboundedSender<Message>,
}

/// The subscriptions, indexed: a publish finds those to its subject in
/// one lookup and matches only the wildcard ones against it, so its cost
/// does not grow with every request's reply inbox and every service's
/// subjects (all of them were matched, one by one, before).
#[derive(Default)]
struct Subs {
    /// Subscriptions without a wildcard, by their subject: one matches a
    /// subject exactly when it is the subject.
    exact: HashMap<String, Vec<Sub>>,
    /// Subscriptions with `*` or `>`, matched in turn.
    wild: Vec<(Pattern, Sub)>,
}

impl Subs {
    fn len(&self) -> usize {
        self.exact.values().map(Vec::len).sum::<usize>() + self.wild.len()
    }

    fn insert(&mut self, pattern: &str, sub: Sub) {
        if Pattern::is_literal(pattern) {
            self.exact.entry(pattern.to_string()).or_default().push(sub);
        } else {
            self.wild.push((Pattern::new(pattern), sub));
        }
    }

    /// Only literal patterns are keys of `exact`: one that is not there
    /// was a wildcard's.
    fn remove(&mut self, pattern: &str, id: u64) {
        match self.exact.get_mut(pattern) {
            Some(subs) => {
                subs.retain(|s| s.id != id);
                if subs.is_empty() {
                    self.exact.remove(pattern);
                }
            }
            None => self.wild.retain(|(_, s)| s.id != id),
        }
    }

    /// Those whose receiver is gone (dropped without its guard running).
    fn remove_closed(&mut self) {
        self.exact.retain(|_, subs| {
            subs.retain(|s| !s.tx.is_closed());
            !subs.is_empty()
        });
        self.wild.retain(|(_, s)| !s.tx.is_closed());
    }
}

#[derive(Default)]
struct Inner {
    subs: RwLock<Subs>,
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
            let exact = subs.exact.get(subject).into_iter().flatten();
            let wild = subs.wild.iter().filter(|(p, _)| p.matches(subject));
            for s in exact.chain(wild.map(|(_, s)| s)) {
                if s.tx.send(msg.clone()).is_ok() {
                    delivered += 1;
                } else {
                    dead = true;
                }
            }
        }
        if dead && let Ok(mut subs) = self.inner.subs.write() {
            subs.remove_closed();
        }
        delivered
    }

    pub fn subscribe(&self, pattern: &str) -> Subscription {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut subs) = self.inner.subs.write() {
            subs.insert(pattern, Sub { id, tx });
        }
        let inner = Arc::downgrade(&self.inner);
        let pattern = pattern.to_string();
        let guard = SubGuard::new(move || {
            if let Some(inner) = inner.upgrade()
                && let Ok(mut subs) = inner.subs.write()
            {
                subs.remove(&pattern, id);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(bus: &LocalBus, subject: &str) -> usize {
        bus.publish_with_reply(subject, None, Headers::new(), Bytes::from_static(b"x"))
    }

    /// A subject reaches every subscription it matches, literal or
    /// wildcard, each once; the index changes nothing of who receives.
    #[test]
    fn a_subject_reaches_each_matching_subscription_once() {
        let bus = LocalBus::new();
        let mut exact = bus.subscribe("xo.salute.u1");
        let mut twice = bus.subscribe("xo.salute.u1");
        let mut star = bus.subscribe("xo.salute.*");
        let mut rest = bus.subscribe("xo.>");
        let mut other = bus.subscribe("xo.salute.u2");
        assert_eq!(bus.subscription_count(), 5);
        assert_eq!(publish(&bus, "xo.salute.u1"), 4);
        for s in [&mut exact, &mut twice, &mut star, &mut rest] {
            assert_eq!(
                s.try_next().map(|m| m.subject).as_deref(),
                Some("xo.salute.u1")
            );
            assert!(s.try_next().is_none(), "delivered once");
        }
        assert!(other.try_next().is_none());
        // A prefix of a literal subscription is not it.
        assert_eq!(publish(&bus, "xo.salute"), 1);
        assert_eq!(publish(&bus, "xo.salute.u1.x"), 1);
        assert_eq!(publish(&bus, "elsewhere"), 0);
    }

    /// Dropping a subscription removes it and only it, literal or
    /// wildcard; the last of a subject takes the subject out.
    #[test]
    fn a_dropped_subscription_is_gone_and_only_it() {
        let bus = LocalBus::new();
        let first = bus.subscribe("a.b");
        let mut second = bus.subscribe("a.b");
        let star = bus.subscribe("a.*");
        drop(first);
        assert_eq!(bus.subscription_count(), 2);
        assert_eq!(publish(&bus, "a.b"), 2);
        assert!(second.try_next().is_some());
        drop(star);
        assert_eq!(publish(&bus, "a.b"), 1);
        drop(second);
        assert_eq!(bus.subscription_count(), 0);
        assert_eq!(publish(&bus, "a.b"), 0);
        assert!(bus.inner.subs.read().unwrap().exact.is_empty());
    }

    #[tokio::test]
    async fn a_requests_inbox_is_gone_after_its_reply() {
        let bus = LocalBus::new();
        let mut svc = bus.subscribe("svc.echo");
        let server = bus.clone();
        tokio::spawn(async move {
            while let Some(m) = svc.next().await {
                let reply = m.reply.expect("a request carries its inbox");
                server.publish_with_reply(&reply, None, Headers::new(), m.payload);
            }
        });
        for i in 0..3 {
            let body = Bytes::from(format!("ping {i}"));
            let m = bus
                .request(
                    "svc.echo",
                    Headers::new(),
                    body.clone(),
                    Duration::from_secs(30),
                )
                .await
                .unwrap();
            assert_eq!(m.payload, body);
        }
        // Each request's inbox left the index with its reply (requests
        // and no responders across transports: app/cli/tests/conformance.rs).
        assert_eq!(bus.subscription_count(), 1, "only the service's own");
        assert_eq!(bus.inner.subs.read().unwrap().exact.len(), 1);
    }
}
