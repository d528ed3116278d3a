//! The one event input (`xo_bus::input`) on the in-process bus: what does
//! not decode is dead-lettered with its reason and the input goes on; good
//! messages reach the handler in order with their headers; casts reach the
//! actor; the input ends on its shutdown signal and on `Next::Stop`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use xo_bus::input::{self, DeadLetters, Next};
use xo_bus::typed::{self, DLQ_REASON};
use xo_bus::{Bus, Headers, LocalBus};
use xo_proto::settings::{Settings, SettingsChanged};
use xo_proto::{Format, Subjects};

fn change(n: usize) -> SettingsChanged {
    SettingsChanged {
        v: xo_proto::PROTOCOL_VERSION,
        settings: Settings::default(),
        changed: vec![format!("k{n}")],
    }
}

async fn next_of(sub: &mut xo_bus::Subscription) -> xo_bus::Message {
    sub.next().await.expect("an open subscription")
}

#[tokio::test]
async fn a_message_that_does_not_decode_is_dead_lettered_and_the_input_goes_on() {
    let bus = Bus::Local(LocalBus::new());
    let subjects = Subjects::new("xo");
    let sub = bus.subscribe("xo.event.settings").await.unwrap();
    let mut dlq = bus.subscribe("xo.dlq.>").await.unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut dead = DeadLetters::new(bus.clone(), subjects.clone(), "test settings");
    let c = counted.clone();
    dead.counted = Some(Arc::new(move || {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }));
    let stop = xo_runtime_free_shutdown();
    let g = got.clone();
    let task = input::typed(
        sub,
        1 << 20,
        dead,
        stop.1,
        move |(c, h): (SettingsChanged, Headers)| {
            g.lock()
                .unwrap()
                .push((c.changed[0].clone(), h.get("X-Mark").map(str::to_string)));
            async { Next::Go }
        },
    );
    let (mut h1, body) = typed::encode(&change(1), Format::Json).unwrap();
    h1.insert("X-Mark", "first");
    bus.publish("xo.event.settings", h1, body).await.unwrap();
    bus.publish(
        "xo.event.settings",
        Headers::new(),
        Bytes::from_static(b"{not json"),
    )
    .await
    .unwrap();
    typed::publish(&bus, "xo.event.settings", &change(2), Format::Msgpack)
        .await
        .unwrap();
    let d = next_of(&mut dlq).await;
    assert_eq!(d.subject, "xo.dlq.xo.event.settings");
    assert!(d.headers.get(DLQ_REASON).is_some(), "{:?}", d.headers);
    assert_eq!(&d.payload[..], b"{not json");
    for _ in 0..1000 {
        if got.lock().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        *got.lock().unwrap(),
        [
            ("k1".to_string(), Some("first".to_string())),
            ("k2".to_string(), None)
        ]
    );
    assert_eq!(counted.load(std::sync::atomic::Ordering::Relaxed), 1);
    // The input ends on its signal.
    let _ = stop.0.send(());
    task.await.unwrap();
}

/// A oneshot-based shutdown signal (the runtime crate's is not a dependency here).
fn xo_runtime_free_shutdown() -> (
    tokio::sync::oneshot::Sender<()>,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    (tx, async move {
        let _ = rx.await;
    })
}

struct Collect(Arc<Mutex<Vec<String>>>);

impl Actor for Collect {
    type Msg = String;
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<String>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
    async fn handle(
        &self,
        _: ActorRef<String>,
        m: String,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        self.0.lock().unwrap().push(m);
        Ok(())
    }
}

#[tokio::test]
async fn cast_delivers_each_decoded_value_to_the_actor_in_order() {
    let bus = Bus::Local(LocalBus::new());
    let got = Arc::new(Mutex::new(Vec::new()));
    let (actor, _h) = Actor::spawn(None, Collect(got.clone()), ()).await.unwrap();
    let sub = bus.subscribe("xo.event.settings").await.unwrap();
    let stop = xo_runtime_free_shutdown();
    let task = input::cast(
        sub,
        1 << 20,
        DeadLetters::new(bus.clone(), Subjects::new("xo"), "test"),
        stop.1,
        actor.clone(),
        |c: SettingsChanged| c.changed[0].clone(),
    );
    for n in 0..5 {
        typed::publish(&bus, "xo.event.settings", &change(n), Format::Json)
            .await
            .unwrap();
    }
    for _ in 0..1000 {
        if got.lock().unwrap().len() == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(*got.lock().unwrap(), ["k0", "k1", "k2", "k3", "k4"]);
    let _ = stop.0.send(());
    task.await.unwrap();
    actor.stop(None);
}

#[tokio::test]
async fn a_handler_saying_stop_ends_the_input() {
    let bus = Bus::Local(LocalBus::new());
    let sub = bus.subscribe("x.>").await.unwrap();
    let seen = Arc::new(Mutex::new(0));
    let s = seen.clone();
    let task = input::raw(sub, std::future::pending(), move |_m| {
        *s.lock().unwrap() += 1;
        async { Next::Stop }
    });
    bus.publish("x.a", Headers::new(), Bytes::new())
        .await
        .unwrap();
    task.await.unwrap();
    bus.publish("x.b", Headers::new(), Bytes::new())
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), 1);
}

/// Issue 44, item 7: a handler that panics on one message does not end
/// its input (before, the input's task died with it and the service went
/// deaf to that subject for good): the panic is counted and the next
/// message is handled.
#[tokio::test]
async fn a_handler_that_panics_on_one_message_is_counted_and_the_input_goes_on() {
    let bus = Bus::Local(LocalBus::new());
    let sub = bus.subscribe("x.>").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let before = input::panics();
    let task = input::raw(sub, std::future::pending(), move |m: xo_bus::Message| {
        let tx = tx.clone();
        async move {
            if m.subject == "x.boom" {
                panic!("a handler's bug on {}", m.subject);
            }
            let _ = tx.send(m.subject);
            Next::Go
        }
    });
    for s in ["x.a", "x.boom", "x.b"] {
        bus.publish(s, Headers::new(), Bytes::new()).await.unwrap();
    }
    assert_eq!(rx.recv().await.as_deref(), Some("x.a"));
    assert_eq!(rx.recv().await.as_deref(), Some("x.b"));
    // Other tests of this binary may panic in their handlers too: at least ours.
    assert!(input::panics() > before, "the panic was not counted");
    assert!(!task.is_finished(), "the input ended with the panic");
    task.abort();
}

/// A handler that gathers messages is told when none is waiting: once
/// after a burst (not per message), and after a lone message at once (it
/// is not held until the next).
#[tokio::test]
async fn a_handler_is_told_once_the_messages_waiting_are_read() {
    struct Gather(tokio::sync::mpsc::UnboundedSender<String>);
    impl input::Handler<xo_bus::Message> for Gather {
        async fn handle(&mut self, m: xo_bus::Message) -> Next {
            let _ = self.0.send(m.subject);
            Next::Go
        }
        async fn caught_up(&mut self) -> Next {
            let _ = self.0.send("caught up".into());
            Next::Go
        }
    }
    let bus = Bus::Local(LocalBus::new());
    let sub = bus.subscribe("x.>").await.unwrap();
    // A burst waiting before the input reads.
    for s in ["x.a", "x.b", "x.c"] {
        bus.publish(s, Headers::new(), Bytes::new()).await.unwrap();
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = input::raw(
        sub,
        async {
            let _ = stopped.await;
        },
        Gather(tx),
    );
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(rx.recv().await.unwrap());
    }
    assert_eq!(seen, ["x.a", "x.b", "x.c", "caught up"]);
    // A lone message: handed on and told at once.
    bus.publish("x.d", Headers::new(), Bytes::new())
        .await
        .unwrap();
    assert_eq!(rx.recv().await.as_deref(), Some("x.d"));
    assert_eq!(rx.recv().await.as_deref(), Some("caught up"));
    let _ = stop.send(());
    task.await.unwrap();
}

/// A handler waiting for something besides messages (the report pump: the
/// root's answer for new units) is woken by it while no message comes, and
/// told again it is caught up; at the input's end it hands on what it holds.
#[tokio::test]
async fn a_handler_is_woken_by_what_it_awaits_and_told_when_the_input_ends() {
    struct Held {
        said: tokio::sync::mpsc::UnboundedSender<String>,
        answer: Option<tokio::sync::oneshot::Receiver<&'static str>>,
    }
    impl input::Handler<xo_bus::Message> for Held {
        async fn handle(&mut self, m: xo_bus::Message) -> Next {
            let _ = self.said.send(m.subject);
            Next::Go
        }
        async fn caught_up(&mut self) -> Next {
            let _ = self.said.send("caught up".into());
            Next::Go
        }
        async fn awaited(&mut self) -> Next {
            match &mut self.answer {
                Some(rx) => {
                    let got = rx.await.unwrap_or("no answer");
                    self.answer = None;
                    let _ = self.said.send(format!("answered {got}"));
                    Next::Go
                }
                None => std::future::pending().await,
            }
        }
        async fn ending(&mut self) {
            let _ = self.said.send("ending".into());
        }
    }
    let bus = Bus::Local(LocalBus::new());
    let sub = bus.subscribe("x.>").await.unwrap();
    let (said, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let (answer, answered) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = input::raw(
        sub,
        async {
            let _ = stopped.await;
        },
        Held {
            said,
            answer: Some(answered),
        },
    );
    assert_eq!(heard.recv().await.as_deref(), Some("caught up"));
    // A message before the answer: the wait for it is not lost.
    bus.publish("x.a", Headers::new(), Bytes::new())
        .await
        .unwrap();
    assert_eq!(heard.recv().await.as_deref(), Some("x.a"));
    assert_eq!(heard.recv().await.as_deref(), Some("caught up"));
    answer.send("now").unwrap();
    assert_eq!(heard.recv().await.as_deref(), Some("answered now"));
    assert_eq!(heard.recv().await.as_deref(), Some("caught up"));
    let _ = stop.send(());
    assert_eq!(heard.recv().await.as_deref(), Some("ending"));
    task.await.unwrap();
    assert_eq!(heard.recv().await, None, "nothing after the end");
}

/// A handler whose wait panics is counted once and not asked to wait again
/// until the next message: the input does not spin on it.
#[tokio::test]
async fn a_wait_that_panics_is_not_waited_on_again_until_the_next_message() {
    struct Panics {
        waits: std::sync::Arc<std::sync::atomic::AtomicU64>,
        said: tokio::sync::mpsc::UnboundedSender<(String, u64)>,
    }
    impl input::Handler<xo_bus::Message> for Panics {
        async fn handle(&mut self, m: xo_bus::Message) -> Next {
            let waits = self.waits.load(std::sync::atomic::Ordering::SeqCst);
            let _ = self.said.send((m.subject, waits));
            Next::Go
        }
        async fn awaited(&mut self) -> Next {
            let n = self.waits.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let _ = self.said.send(("waited".into(), n));
            panic!("a wait's bug");
        }
    }
    let bus = Bus::Local(LocalBus::new());
    let sub = bus.subscribe("x.>").await.unwrap();
    let (said, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let before = input::panics();
    // On a thread of its own: an input spinning there fails the first
    // assertion below rather than starving this test's runtime.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = input::raw_on_thread(
        "panicking wait",
        sub,
        async {
            let _ = stopped.await;
        },
        Panics {
            waits: Default::default(),
            said,
        },
    );
    assert_eq!(heard.recv().await, Some(("waited".into(), 1)));
    bus.publish("x.a", Headers::new(), Bytes::new())
        .await
        .unwrap();
    assert_eq!(
        heard.recv().await,
        Some(("x.a".into(), 1)),
        "waited on again before the next message"
    );
    // After a message, the handler is asked to wait again.
    assert_eq!(heard.recv().await, Some(("waited".into(), 2)));
    assert!(input::panics() > before, "the panic was not counted");
    assert!(!task.is_finished(), "the input ended with the panic");
    let _ = stop.send(());
    task.await.unwrap();
}
