//! The report pump's own NATS reader (`xo_bus::wire`) against a real
//! nats-server: what the NATS client publishes arrives whole and in order
//! (headers, replies, payloads larger than a read), the server's pings are
//! answered, a silent link and a restarted server are noticed, counted and
//! connected to again, credentials are used and a refused subscription is
//! named.

use std::time::Duration;

use bytes::Bytes;
use xo_bus::{Bus, Headers, NatsBus, Subscription, nats::ConnectOptions};
use xo_tests::NatsServer;

const T: Duration = Duration::from_secs(10);

async fn client(url: &str, opts: ConnectOptions) -> NatsBus {
    NatsBus::connect(url, opts).await.expect("a client")
}

async fn wire(bus: &NatsBus, pattern: &str) -> Subscription {
    let sub = bus
        .wire("test", pattern)
        .await
        .expect("a plain connection is read off the wire")
        .expect("subscribed");
    assert!(matches!(sub, Subscription::Wire(_)), "{sub:?}");
    sub
}

/// The server's id of the connection named `name`, if it has one open.
fn cid_of(server: &NatsServer, name: &str) -> Option<u64> {
    server.monitor("/connz")["connections"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["cid"].as_u64())
}

async fn recv(sub: &mut Subscription) -> xo_bus::Message {
    tokio::time::timeout(T, sub.next())
        .await
        .expect("a message within 10 s")
        .expect("the subscription is open")
}

/// Payload `i` of a mix of sizes: empty, small, and larger than one read
/// of the socket (128 KiB), with CRLF inside.
fn payload(i: usize) -> Bytes {
    let len = match i % 7 {
        0 => 0,
        1 => 300 * 1024,
        _ => (i * 37) % 2000,
    };
    (0..len)
        .map(|j| match (i + j) % 11 {
            0 => b'\r',
            1 => b'\n',
            k => b'a' + k as u8,
        })
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test]
async fn what_the_client_publishes_is_read_whole_and_in_order() {
    let server = NatsServer::start();
    let bus = client(&server.url(), Default::default()).await;
    let mut sub = wire(&bus, "xo.salute.*").await;
    let publisher = Bus::Nats(client(&server.url(), Default::default()).await);
    const N: usize = 3000;
    // Published while it is read (unread, 64 MiB pending would make the
    // server cut the reader off as a slow consumer).
    let published = tokio::spawn(async move {
        for i in 0..N {
            let mut h = Headers::new();
            if i % 3 == 0 {
                h.insert("Content-Type", "application/msgpack");
                h.insert("X-Seq", i.to_string());
            }
            let reply = (i % 5 == 0).then(|| format!("_INBOX.r.{i}"));
            let subject = format!("xo.salute.u{}", i % 97);
            publisher
                .publish_with_reply(&subject, reply.as_deref(), h, payload(i))
                .await
                .unwrap();
            publisher
                .publish("xo.other.x", Headers::new(), Bytes::new())
                .await
                .unwrap();
        }
    });
    for i in 0..N {
        // Half taken without waiting when one is there, as the pump does.
        let m = match (i % 2 == 0).then(|| sub.try_next()).flatten() {
            Some(m) => m,
            None => recv(&mut sub).await,
        };
        assert_eq!(m.subject, format!("xo.salute.u{}", i % 97), "message {i}");
        assert_eq!(m.payload, payload(i), "message {i}'s payload");
        assert_eq!(m.reply, (i % 5 == 0).then(|| format!("_INBOX.r.{i}")));
        if i % 3 == 0 {
            assert_eq!(m.headers.get("content-type"), Some("application/msgpack"));
            assert_eq!(m.headers.get("x-seq"), Some(i.to_string().as_str()));
        } else {
            assert!(m.headers.is_empty(), "message {i}: {:?}", m.headers);
        }
        // A message held is detached from the read buffer and reads the same.
        let held = m.clone().detached();
        assert_eq!((held.payload, held.headers), (m.payload, m.headers));
    }
    published.await.unwrap();
    assert!(sub.try_next().is_none(), "no message of another subject");
    assert_eq!(bus.outages(), 0, "read on one connection throughout");
    // The connection is named as the bus's part.
    let conns = server.monitor("/connz?subs=1");
    let names: Vec<&str> = conns["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(names.contains(&"xo (test)"), "{names:?}");
}

#[tokio::test]
async fn the_servers_pings_are_answered_and_a_silent_server_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, "ping_interval: \"100ms\"\nping_max: 2\n").unwrap();
    let server = NatsServer::start_with(Some(conf));
    let opts = ConnectOptions {
        ping_interval: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let bus = client(&server.url(), opts).await;
    let mut sub = wire(&bus, "xo.salute.*").await;
    let publisher = Bus::Nats(client(&server.url(), Default::default()).await);
    let first = cid_of(&server, "xo (test)").expect("the reader's connection");
    // Waiting through many of the server's pings: each is answered, so
    // the server keeps the connection.
    let (m, ()) = tokio::join!(recv(&mut sub), async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        publisher
            .publish("xo.salute.a", Headers::new(), Bytes::from_static(b"late"))
            .await
            .unwrap();
    });
    assert_eq!(&m.payload[..], b"late");
    assert_eq!(
        cid_of(&server, "xo (test)"),
        Some(first),
        "the server's pings were answered: the same connection"
    );
    // A server that says nothing (frozen): after two unanswered pings the
    // connection is counted lost, and made again once it answers.
    server.pause();
    let waited = tokio::time::timeout(Duration::from_millis(1500), sub.next()).await;
    assert!(waited.is_err(), "nothing to read while frozen");
    assert!(bus.outages() >= 1, "a silent link is counted lost");
    server.resume();
    // Published until one arrives: the reader connects again in its own time.
    let mut n = 0;
    let got = loop {
        n += 1;
        publisher
            .publish(
                "xo.salute.b",
                Headers::new(),
                Bytes::from(format!("probe {n}")),
            )
            .await
            .unwrap();
        if let Ok(m) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
            break m.expect("open");
        }
        assert!(n < 150, "not subscribed again after the server woke");
    };
    assert!(got.payload.starts_with(b"probe "));
    let now = cid_of(&server, "xo (test)").expect("connected again");
    assert_ne!(now, first, "the silent connection was left for a new one");
}

#[tokio::test]
async fn a_restarted_server_is_connected_to_again_with_the_subscription() {
    let mut server = NatsServer::start();
    let bus = client(&server.url(), Default::default()).await;
    let mut sub = wire(&bus, "xo.salute.*").await;
    let publisher = Bus::Nats(client(&server.url(), Default::default()).await);
    publisher
        .publish("xo.salute.a", Headers::new(), Bytes::from_static(b"before"))
        .await
        .unwrap();
    assert_eq!(&recv(&mut sub).await.payload[..], b"before");
    let lost = bus.outages();
    server.restart();
    let mut n = 0;
    let got = loop {
        n += 1;
        // Published until one arrives: the publisher and the reader each
        // connect again on their own time.
        let _ = publisher
            .publish(
                "xo.salute.a",
                Headers::new(),
                Bytes::from(format!("after {n}")),
            )
            .await;
        if let Ok(m) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
            break m.expect("open");
        }
        assert!(n < 150, "not subscribed again after the restart");
    };
    assert!(got.payload.starts_with(b"after "));
    assert!(bus.outages() > lost, "the lost connection is counted");
}

#[tokio::test]
async fn credentials_are_used_and_a_refused_subscription_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    std::fs::write(
        &conf,
        "authorization {\n  users = [\n    {user: pump, password: \"s3cret\", permissions: {subscribe: {allow: [\"xo.salute.>\", \"_INBOX.>\"]}}}\n  ]\n}\n",
    )
    .unwrap();
    let server = NatsServer::start_with(Some(conf));
    let opts = ConnectOptions {
        user: Some("pump".into()),
        password: Some("s3cret".into()),
        ..Default::default()
    };
    let bus = client(&server.url(), opts.clone()).await;
    let mut sub = wire(&bus, "xo.salute.*").await;
    Bus::Nats(bus.clone())
        .publish("xo.salute.z", Headers::new(), Bytes::from_static(b"in"))
        .await
        .unwrap();
    assert_eq!(&recv(&mut sub).await.payload[..], b"in");
    // Credentials in the URL work as well.
    let in_url = server.url().replace("nats://", "nats://pump:s3cret@");
    let bus2 = client(&in_url, Default::default()).await;
    let _ = wire(&bus2, "xo.salute.*").await;
    // A subject the user may not read: the server's refusal, named.
    let refused = bus
        .wire("test", "xo.secret.>")
        .await
        .expect("tried off the wire")
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("Permissions Violation") && refused.contains("xo.secret.>"),
        "{refused}"
    );
    assert!(!refused.contains("s3cret"), "no password shown: {refused}");
}
