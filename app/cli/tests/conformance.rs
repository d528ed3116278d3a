//! One conformance suite, three transports: in-process, the Unix socket
//! served by `xo up`, and NATS (a real nats-server per test). The store suite
//! runs on the file store and on JetStream.

use std::time::Duration;

use bytes::Bytes;
use xo_bus::{Bus, Headers, LocalBus, SocketBus, Store, StoreError};
use xo_tests::NatsServer;

const T: Duration = Duration::from_secs(5);

/// Keeps whatever the transport needs alive for the test.
#[allow(dead_code)]
enum Guard {
    None,
    Nats(NatsServer),
    Socket(tempfile::TempDir, tokio::sync::oneshot::Sender<()>),
}

async fn transport(kind: &str) -> (Bus, Guard) {
    match kind {
        "local" => (Bus::Local(LocalBus::new()), Guard::None),
        "socket" => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("bus.sock");
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            xo_bus::socket::serve(LocalBus::new(), &path, async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
            let bus = SocketBus::connect(&path).await.unwrap();
            (Bus::Socket(bus), Guard::Socket(dir, tx))
        }
        "nats" => {
            let server = NatsServer::start();
            let bus = xo_bus::NatsBus::connect(&server.url(), Default::default())
                .await
                .unwrap();
            (Bus::Nats(bus), Guard::Nats(server))
        }
        other => panic!("unknown transport {other}"),
    }
}

async fn second_client(bus: &Bus, guard: &Guard) -> Bus {
    match (bus, guard) {
        (Bus::Local(b), _) => Bus::Local(b.clone()),
        (Bus::Socket(_), Guard::Socket(dir, _)) => Bus::Socket(
            SocketBus::connect(&dir.path().join("bus.sock"))
                .await
                .unwrap(),
        ),
        (Bus::Nats(_), Guard::Nats(s)) => Bus::Nats(
            xo_bus::NatsBus::connect(&s.url(), Default::default())
                .await
                .unwrap(),
        ),
        _ => unreachable!(),
    }
}

/// A client of `server`, with the default options.
async fn connect_to(server: &NatsServer) -> Bus {
    Bus::Nats(
        xo_bus::NatsBus::connect(&server.url(), Default::default())
            .await
            .unwrap(),
    )
}

async fn recv(sub: &mut xo_bus::Subscription) -> xo_bus::Message {
    tokio::time::timeout(T, sub.next())
        .await
        .expect("message within 5 s")
        .expect("subscription open")
}

async fn pubsub_with_wildcards_and_headers(kind: &str) {
    let (bus, guard) = transport(kind).await;
    let other = second_client(&bus, &guard).await;
    let mut star = bus.subscribe("xo.salute.*").await.unwrap();
    let mut tail = bus.subscribe("xo.>").await.unwrap();
    // The subscriptions reach the server before the other client publishes
    // (a busy machine showed the race).
    bus.flush().await.unwrap();
    other.flush().await.unwrap();
    let mut h = Headers::new();
    h.insert("Content-Type", "application/json");
    h.insert(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    );
    other
        .publish("xo.salute.u1", h.clone(), Bytes::from_static(b"{}"))
        .await
        .unwrap();
    other
        .publish("xo.steer.u1", Headers::new(), Bytes::from_static(b"x"))
        .await
        .unwrap();
    other
        .publish(
            "xo.salute.u1.extra",
            Headers::new(),
            Bytes::from_static(b"y"),
        )
        .await
        .unwrap();
    other.flush().await.unwrap();
    let m = recv(&mut star).await;
    assert_eq!(m.subject, "xo.salute.u1");
    assert_eq!(m.payload, Bytes::from_static(b"{}"));
    assert_eq!(m.headers.get("content-type"), Some("application/json"));
    assert_eq!(m.headers.get("traceparent"), h.get("traceparent"));
    let subjects: Vec<String> = [
        recv(&mut tail).await,
        recv(&mut tail).await,
        recv(&mut tail).await,
    ]
    .into_iter()
    .map(|m| m.subject)
    .collect();
    assert_eq!(
        subjects,
        ["xo.salute.u1", "xo.steer.u1", "xo.salute.u1.extra"],
        "in publish order"
    );
    // `*` matched one token only: nothing else arrives on `star`.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), star.next())
            .await
            .is_err()
    );
}

async fn request_reply_and_errors(kind: &str) {
    let (bus, guard) = transport(kind).await;
    let server = second_client(&bus, &guard).await;
    let mut sub = server.subscribe("svc.echo").await.unwrap();
    server.flush().await.unwrap();
    let responder = server.clone();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            let mut h = Headers::new();
            h.insert("X-Echo", "1");
            let body = [b"echo:".as_slice(), &m.payload].concat();
            responder
                .publish(m.reply.as_deref().unwrap(), h, Bytes::from(body))
                .await
                .unwrap();
        }
    });
    let reply = bus
        .request("svc.echo", Headers::new(), Bytes::from_static(b"hi"), T)
        .await
        .unwrap();
    assert_eq!(reply.payload, Bytes::from_static(b"echo:hi"));
    assert_eq!(reply.headers.get("x-echo"), Some("1"));

    let err = bus
        .request("svc.nobody", Headers::new(), Bytes::new(), T)
        .await
        .unwrap_err();
    assert!(
        matches!(err, xo_bus::BusError::NoResponders { .. }),
        "{err}"
    );

    let _silent = server.subscribe("svc.silent").await.unwrap();
    server.flush().await.unwrap();
    let err = bus
        .request(
            "svc.silent",
            Headers::new(),
            Bytes::new(),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, xo_bus::BusError::Timeout { .. }), "{err}");

    let err = bus
        .publish("bad subject", Headers::new(), Bytes::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("whitespace"), "{err}");
    assert!(bus.subscribe("a.>.b").await.is_err());
}

async fn unsubscribe_on_drop(kind: &str) {
    let (bus, guard) = transport(kind).await;
    let other = second_client(&bus, &guard).await;
    let sub = bus.subscribe("drop.me").await.unwrap();
    drop(sub);
    bus.flush().await.unwrap();
    let err = other
        .request(
            "drop.me",
            Headers::new(),
            Bytes::new(),
            Duration::from_secs(2),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, xo_bus::BusError::NoResponders { .. }),
        "{err}"
    );
}

async fn control_service(kind: &str) {
    let (bus, guard) = transport(kind).await;
    let client = second_client(&bus, &guard).await;
    let mut ep = bus
        .serve(xo_bus::ServiceSpec {
            name: "xo-test".into(),
            version: "0.1.0".into(),
            description: "conformance".into(),
            group: "xo.ctl.test".into(),
            verbs: vec!["a".into(), "b".into()],
            scoped: vec!["b".into()],
        })
        .await
        .unwrap();
    let server = tokio::spawn(async move {
        while let Some(req) = ep.next().await {
            let body = Bytes::from(match req.scope() {
                Some(unit) => format!("{} for {unit}", req.verb()),
                None => req.verb().to_string(),
            });
            req.respond(Headers::new(), body).await.unwrap();
        }
    });
    // No flush: a served verb answers a second client as soon as `serve`
    // returns (a fabric says it is up when its services have served).
    for verb in ["a", "b"] {
        let r = client
            .request(
                &format!("xo.ctl.test.{verb}"),
                Headers::new(),
                Bytes::new(),
                T,
            )
            .await
            .unwrap();
        assert_eq!(r.payload, Bytes::from(verb));
    }
    // A scoped verb is also served on `<verb>.<unit>`, and the unit is
    // told apart from the verb; an unscoped one is not served there.
    let r = client
        .request("xo.ctl.test.b.coder-1", Headers::new(), Bytes::new(), T)
        .await
        .unwrap();
    assert_eq!(r.payload, Bytes::from("b for coder-1"));
    let err = client
        .request("xo.ctl.test.a.coder-1", Headers::new(), Bytes::new(), T)
        .await;
    assert!(
        err.is_err(),
        "an unscoped verb answered on a unit's subject"
    );
    if kind == "nats" {
        let r = client
            .request("$SRV.PING.xo-test", Headers::new(), Bytes::new(), T)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
        assert_eq!(v["name"], "xo-test");
        let r = client
            .request("$SRV.STATS.xo-test", Headers::new(), Bytes::new(), T)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
        let requests: u64 = v["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["num_requests"].as_u64().unwrap())
            .sum();
        // a, b, and b on a unit's subject.
        assert_eq!(requests, 3);
    }
    // A service whose task is aborted (as services stop theirs) is gone:
    // its verbs and, on NATS, its `$SRV` answers too.
    server.abort();
    let _ = server.await;
    bus.flush().await.unwrap();
    let mut gone = vec!["xo.ctl.test.a"];
    if kind == "nats" {
        gone.push("$SRV.PING.xo-test");
    }
    for subject in gone {
        let err = client
            .request(subject, Headers::new(), Bytes::new(), T)
            .await
            .unwrap_err();
        assert!(
            matches!(err, xo_bus::BusError::NoResponders { .. }),
            "{subject}: {err}"
        );
    }
}

macro_rules! conformance {
    ($($name:ident),*) => {
        mod local { $( #[tokio::test] async fn $name() { super::$name("local").await } )* }
        mod socket { $( #[tokio::test] async fn $name() { super::$name("socket").await } )* }
        mod nats { $( #[tokio::test] async fn $name() { super::$name("nats").await } )* }
    };
}

conformance!(
    pubsub_with_wildcards_and_headers,
    request_reply_and_errors,
    unsubscribe_on_drop,
    control_service
);

// ---- store ----

async fn store_kv_revisions_and_cas(store: Store) {
    assert_eq!(store.get("units", "u1").await.unwrap(), None);
    let r1 = store
        .create("units", "u1", Bytes::from_static(b"a"))
        .await
        .unwrap();
    let err = store
        .create("units", "u1", Bytes::from_static(b"b"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Exists { .. }), "{err}");
    let r2 = store
        .update("units", "u1", Bytes::from_static(b"b"), r1)
        .await
        .unwrap();
    assert!(r2 > r1);
    let err = store
        .update("units", "u1", Bytes::from_static(b"c"), r1)
        .await
        .unwrap_err();
    match &err {
        StoreError::Conflict {
            expected,
            found,
            key,
            ..
        } => {
            assert_eq!((*expected, *found, key.as_str()), (r1, r2, "u1"));
        }
        other => panic!("expected a conflict, got {other}"),
    }
    let e = store.get("units", "u1").await.unwrap().unwrap();
    assert_eq!((e.value, e.revision), (Bytes::from_static(b"b"), r2));
    store
        .put("units", "u2", Bytes::from_static(b"z"))
        .await
        .unwrap();
    assert_eq!(store.keys("units").await.unwrap(), ["u1", "u2"]);
    store.delete("units", "u1").await.unwrap();
    assert_eq!(store.get("units", "u1").await.unwrap(), None);
    assert_eq!(store.keys("units").await.unwrap(), ["u2"]);
    let err = store
        .put("units", "bad key", Bytes::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("invalid key \"bad key\""), "{err}");
}

async fn store_log_appends_in_order(store: Store) {
    for i in 1..=5u8 {
        assert_eq!(
            store.append("audit", Bytes::from(vec![i])).await.unwrap(),
            i as u64
        );
    }
    let all = store.read("audit", 1, 100).await.unwrap();
    assert_eq!(
        all.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    let some = store.read("audit", 3, 2).await.unwrap();
    assert_eq!(
        some,
        vec![(3, Bytes::from(vec![3])), (4, Bytes::from(vec![4]))]
    );
    assert!(store.read("audit", 6, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn file_store_kv() {
    let dir = tempfile::tempdir().unwrap();
    store_kv_revisions_and_cas(Store::File(xo_bus::FileStore::open(dir.path()).unwrap())).await;
}

#[tokio::test]
async fn file_store_log() {
    let dir = tempfile::tempdir().unwrap();
    store_log_appends_in_order(Store::File(xo_bus::FileStore::open(dir.path()).unwrap())).await;
}

async fn nats_store(server: &NatsServer) -> Store {
    let bus = xo_bus::NatsBus::connect(&server.url(), Default::default())
        .await
        .unwrap();
    Store::Nats(xo_bus::NatsStore::new(bus.client().clone(), "xo"))
}

#[tokio::test]
async fn nats_store_kv() {
    let server = NatsServer::start();
    store_kv_revisions_and_cas(nats_store(&server).await).await;
}

/// Services and operators start together: stores on separate connections
/// that all open a bucket no one has made yet all get it (whoever loses the
/// race to create it uses the one made), in round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_opening_a_new_bucket_together_all_get_it() {
    let server = NatsServer::start();
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(nats_store(&server).await);
    }
    for round in 0..20 {
        let bucket = format!("fresh_{round}");
        let opened = futures::future::join_all(stores.iter().enumerate().map(|(i, s)| {
            let bucket = bucket.clone();
            async move {
                s.put(&bucket, &format!("k{i}"), Bytes::from_static(b"v"))
                    .await
            }
        }))
        .await;
        for (i, r) in opened.into_iter().enumerate() {
            if let Err(e) = r {
                panic!("round {round}, store {i}: {e}");
            }
        }
        assert_eq!(stores[0].keys(&bucket).await.unwrap().len(), 8);
    }
}

#[tokio::test]
async fn nats_store_log() {
    let server = NatsServer::start();
    store_log_appends_in_order(nats_store(&server).await).await;
}

#[tokio::test]
async fn file_store_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = xo_bus::FileStore::open(dir.path()).unwrap();
    let s = Store::File(store);
    let rev = s
        .put("units", "u1", Bytes::from_static(b"kept"))
        .await
        .unwrap();
    s.append("audit", Bytes::from_static(b"one")).await.unwrap();
    drop(s);
    let s = Store::File(xo_bus::FileStore::open(dir.path()).unwrap());
    let e = s.get("units", "u1").await.unwrap().unwrap();
    assert_eq!((e.value, e.revision), (Bytes::from_static(b"kept"), rev));
    assert_eq!(
        s.append("audit", Bytes::from_static(b"two")).await.unwrap(),
        2
    );
    let next = s
        .put("units", "u1", Bytes::from_static(b"again"))
        .await
        .unwrap();
    assert!(next > rev, "revisions keep increasing across restarts");
}

#[tokio::test]
async fn file_store_cuts_a_torn_tail_and_names_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::File(xo_bus::FileStore::open(dir.path()).unwrap());
    s.put("units", "u1", Bytes::from_static(b"one"))
        .await
        .unwrap();
    s.put("units", "u2", Bytes::from_static(b"two"))
        .await
        .unwrap();
    drop(s);
    let path = dir.path().join("kv").join("units.kv");
    let mut data = std::fs::read(&path).unwrap();
    let full = data.len();
    // A crash mid-write: half a record at the end.
    data.extend_from_slice(&[40, 0, 0, 0, 1, 2]);
    std::fs::write(&path, &data).unwrap();
    let s = Store::File(xo_bus::FileStore::open(dir.path()).unwrap());
    assert_eq!(s.keys("units").await.unwrap(), ["u1", "u2"]);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len() as usize,
        full,
        "torn tail cut off"
    );
    drop(s);
    // A flipped byte in the first record: an error naming file and offset.
    let mut data = std::fs::read(&path).unwrap();
    data[10] ^= 0xff;
    std::fs::write(&path, &data).unwrap();
    let s = Store::File(xo_bus::FileStore::open(dir.path()).unwrap());
    let err = s.get("units", "u1").await.unwrap_err().to_string();
    assert!(
        err.contains("units.kv") && err.contains("at byte 0") && err.contains("checksum"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        data,
        "a corrupt file is left untouched"
    );
}

/// `serve` returns once the server holds the endpoints' subscriptions: with
/// the server frozen it does not return, and once it goes on, the moment it
/// returns the monitor lists every verb's subject. (Without the flush it
/// returned at once, and a caller on another connection told the service
/// was up could be answered "no responders".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_returns_once_the_server_has_the_endpoints() {
    let server = NatsServer::start();
    let bus = connect_to(&server).await;
    server.pause();
    let b = bus.clone();
    let mut serving = tokio::spawn(async move {
        b.serve(xo_bus::ServiceSpec {
            name: "xo-test".into(),
            version: "0.1.0".into(),
            description: "conformance".into(),
            group: "xo.ctl.test".into(),
            verbs: vec!["a".into()],
            scoped: vec!["b".into()],
        })
        .await
    });
    // While the server is frozen nothing it must see can have been seen.
    let early = tokio::time::timeout(Duration::from_millis(300), &mut serving).await;
    server.resume();
    assert!(
        early.is_err(),
        "serve returned while the server could not have its subscriptions"
    );
    let ep = serving.await.unwrap().unwrap();
    let subs = server.monitor("/subsz?subs=1");
    let subjects: Vec<&str> = subs["subscriptions_list"]
        .as_array()
        .unwrap_or_else(|| panic!("no subscriptions_list in {subs}"))
        .iter()
        .filter_map(|s| s["subject"].as_str())
        .collect();
    for want in ["xo.ctl.test.a", "xo.ctl.test.b.*"] {
        assert!(subjects.contains(&want), "{want} not in {subjects:?}");
    }
    drop(ep);
}

/// Counts the messages handled and the times it was told it caught up
/// before the last of a burst.
struct Burst {
    n: usize,
    seen: usize,
    caught_up: usize,
    told_early: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
}

impl xo_bus::input::Handler<xo_bus::Message> for Burst {
    async fn handle(&mut self, _m: xo_bus::Message) -> xo_bus::input::Next {
        self.seen += 1;
        if self.seen == self.n {
            self.told_early
                .store(self.caught_up, std::sync::atomic::Ordering::SeqCst);
            if let Some(d) = self.done.take() {
                let _ = d.send(());
            }
        }
        xo_bus::input::Next::Go
    }

    async fn caught_up(&mut self) -> xo_bus::input::Next {
        self.caught_up += 1;
        xo_bus::input::Next::Go
    }
}

/// An input on a thread of its own reads a burst already waiting on NATS
/// whole before it tells its handler it caught up (the report pump hands
/// what it gathered over then). Under tokio's cooperative budget a
/// subscription reports nothing waiting after 128 messages a turn, and a
/// burst of 1,000 was cut into eight handovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_on_its_thread_reads_a_waiting_burst_whole() {
    let server = NatsServer::start();
    let bus = connect_to(&server).await;
    let sender = connect_to(&server).await;
    let sub = bus.subscribe("burst.>").await.unwrap();
    bus.flush().await.unwrap();
    const N: usize = 1000;
    for i in 0..N {
        sender
            .publish(
                &format!("burst.{i}"),
                Headers::new(),
                Bytes::from_static(b"x"),
            )
            .await
            .unwrap();
    }
    sender.flush().await.unwrap();
    // A round trip on the reading connection after the burst: the server
    // sent the burst first, and the client queued it in order.
    bus.flush().await.unwrap();
    let told_early = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let (done, all) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let input = xo_bus::input::raw_on_thread(
        "burst",
        sub,
        async move {
            let _ = stopped.await;
        },
        Burst {
            n: N,
            seen: 0,
            caught_up: 0,
            told_early: told_early.clone(),
            done: Some(done),
        },
    );
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("the burst was read")
        .unwrap();
    assert_eq!(
        told_early.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "told it caught up before the burst waiting was read"
    );
    let _ = stop.send(());
    input.await.unwrap();
}

#[tokio::test]
async fn nats_bus_reconnects_after_a_server_restart() {
    let mut server = NatsServer::start();
    let bus = connect_to(&server).await;
    let mut sub = bus.subscribe("xo.salute.*").await.unwrap();
    bus.flush().await.unwrap();
    server.restart();
    // Publish until the restored subscription delivers again.
    let got = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let _ = bus
                .publish("xo.salute.u1", Headers::new(), Bytes::from_static(b"after"))
                .await;
            if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await
            {
                return m;
            }
        }
    })
    .await
    .expect("resubscribed after restart");
    assert_eq!(got.payload, Bytes::from_static(b"after"));
    let store = nats_store(&server).await;
    store
        .put("units", "u1", Bytes::from_static(b"x"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_supervisor_does_not_start_empty_on_a_damaged_unit_store() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::File(xo_bus::FileStore::open(dir.path()).unwrap());
    for u in ["u1", "u2", "u3"] {
        s.put("units", u, Bytes::from_static(b"state"))
            .await
            .unwrap();
    }
    drop(s);
    let path = dir.path().join("kv").join("units.kv");
    let mut data = std::fs::read(&path).unwrap();
    data[12] ^= 0xff;
    std::fs::write(&path, &data).unwrap();
    let store = Store::File(xo_bus::FileStore::open(dir.path()).unwrap());
    let cfg = xo_runtime::XoConfig::default();
    let err = xo_supervisor::start(
        xo_runtime::ServiceCtx::new(cfg, Bus::Local(LocalBus::new()))
            .with_store(store)
            .with_clock(xo_runtime::Clock::System),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("units.kv") && err.contains("at byte 0") && err.contains("xo store repair"),
        "{err}"
    );
}

/// Issue 43, item 3: a NATS subscription read too slowly loses messages
/// (the client drops what its full buffer cannot hold), and the bus counts
/// them instead of losing them unseen. The local and socket buses queue
/// and drop nothing.
#[tokio::test]
async fn a_nats_subscriber_too_slow_to_read_counts_what_it_dropped() {
    let server = NatsServer::start();
    let slow = Bus::Nats(
        xo_bus::NatsBus::connect(
            &server.url(),
            xo_bus::nats::ConnectOptions {
                subscription_capacity: Some(4),
                ..Default::default()
            },
        )
        .await
        .unwrap(),
    );
    let mut sub = slow.subscribe("lost.>").await.unwrap();
    slow.flush().await.unwrap();
    let sender = xo_bus::NatsBus::connect(&server.url(), Default::default())
        .await
        .unwrap();
    let sent = 200;
    for i in 0..sent {
        sender
            .publish_with_reply("lost.x", None, Headers::new(), Bytes::from(format!("{i}")))
            .await
            .unwrap();
    }
    sender.client().flush().await.unwrap();
    // A round trip on the slow connection: everything sent before it has
    // reached its client (and been kept or dropped there).
    slow.flush().await.unwrap();
    let mut kept = 0;
    while tokio::time::timeout(Duration::from_millis(200), sub.next())
        .await
        .is_ok_and(|m| m.is_some())
    {
        kept += 1;
    }
    assert!(kept < sent, "the subscription held {kept} of {sent}");
    // The count is taken from the client's events, delivered by its own
    // task: wait for them rather than assume they came first.
    let dropped = xo_tests::until(&format!("drops counted ({kept} kept)"), async || {
        Some(slow.dropped()).filter(|d| *d > 0)
    })
    .await;
    assert!(
        dropped <= (sent - kept) as u64,
        "{dropped} counted, {} lost",
        sent - kept
    );
    let local = Bus::Local(LocalBus::new());
    assert_eq!(local.dropped(), 0);
}
