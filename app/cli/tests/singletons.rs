//! Issue 23, item 8: with several supervisor replicas, each also ran the
//! review supervisors, the notifier and the fleet manager: every alert was
//! delivered once per replica. They now run under a lease: three replicas
//! on a real nats-server deliver each alert once, and when the active one
//! is killed another takes over and the next alert is delivered once.

use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use xo_tests::launcher::Xo;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use xo_bus::{Bus, NatsBus, NatsStore, Store, typed};
use xo_proto::Format;
use xo_proto::alert::{Alert, AlertKind};
use xo_tests::{NatsServer, eventually};

type Got = Arc<Mutex<Vec<String>>>;

async fn hook(State(got): State<Got>, body: axum::Json<serde_json::Value>) -> &'static str {
    got.lock()
        .unwrap()
        .push(body.0["title"].as_str().unwrap_or("").to_string());
    "ok"
}

fn replica(nats: &NatsServer, conf: &std::path::Path, dir: &std::path::Path) -> Child {
    Xo::new()
        .command(&[])
        .args(["--nats", &nats.url(), "--config"])
        .arg(conf)
        .args(["serve", "supervisor"])
        .env("XO__STATE__DIR", dir.join("state"))
        .env("XO__QUEUE__DATA_DIR", dir.join("data"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn alert(title: &str) -> Alert {
    Alert {
        v: xo_proto::PROTOCOL_VERSION,
        kind: AlertKind::TaskBlocked,
        title: title.into(),
        detail: "d".into(),
        task_id: None,
        project: None,
        unit: None,
        source: "test".into(),
        at: xo_proto::now_ms(),
    }
}

/// Publishes alerts titled `<prefix> N` until one of them is delivered.
async fn until_delivered(bus: &Bus, got: &Got, prefix: &str) {
    let s = xo_proto::Subjects::default();
    let mut n = 0;
    eventually(&format!("an alert {prefix} delivered"), || {
        n += 1;
        let (bus, subject) = (bus.clone(), s.alert(AlertKind::TaskBlocked));
        let title = format!("{prefix} {n}");
        tokio::spawn(async move {
            let _ = typed::publish(&bus, &subject, &alert(&title), Format::Json).await;
        });
        got.lock().unwrap().iter().any(|x| x.starts_with(prefix))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_deliver_each_alert_once_and_a_standby_takes_over() {
    let nats = NatsServer::start();
    let got: Got = Default::default();
    let app = Router::new()
        .route("/alerts", post(hook))
        .with_state(got.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("xo.toml");
    std::fs::write(
        &conf,
        format!(
            "[supervisor]\npartitions = 3\n[queue]\nleader_lease_ms = 1000\n[alerts]\nbackoff_ms = 50\n[[alerts.webhooks]]\nurl = \"{base}/alerts\"\n"
        ),
    )
    .unwrap();
    let mut replicas: Vec<Child> = (0..3)
        .map(|i| {
            let d = tmp.path().join(format!("r{i}"));
            replica(&nats, &conf, &d)
        })
        .collect();
    let bus = Bus::Nats(
        NatsBus::connect(&nats.url(), Default::default())
            .await
            .unwrap(),
    );
    let Bus::Nats(nb) = &bus else { unreachable!() };
    let store = Store::Nats(NatsStore::new(nb.client().clone(), "xo"));
    let s = xo_proto::Subjects::default();
    let holder = || async {
        store
            .get("leases", "singletons")
            .await
            .ok()
            .flatten()
            .map(|e| xo_bus::leader::Holder::of(&e.value).holder)
    };
    // One replica holds the lease (and runs the notifier).
    let first = xo_tests::until("a replica took the singletons' lease", async || {
        holder().await
    })
    .await;
    // Alerts until one is delivered (the notifier subscribes after taking
    // the lease), then each of the next ones exactly once.
    until_delivered(&bus, &got, "warm-up").await;
    for title in ["one", "two", "three"] {
        typed::publish(
            &bus,
            &s.alert(AlertKind::TaskBlocked),
            &alert(title),
            Format::Json,
        )
        .await
        .unwrap();
    }
    eventually("three alerts delivered", || {
        let g = got.lock().unwrap();
        ["one", "two", "three"]
            .iter()
            .all(|t| g.iter().any(|x| x == t))
    })
    .await;
    // Time for duplicates from other replicas to arrive, if any would.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for t in ["one", "two", "three"] {
        let count = got.lock().unwrap().iter().filter(|x| *x == t).count();
        assert_eq!(count, 1, "{t} delivered {count} times by 3 replicas");
    }
    // The holder is killed: another replica takes the lease and delivers.
    let pid: u32 = first.split(':').nth(1).unwrap().parse().unwrap();
    let killed = replicas
        .iter()
        .position(|c| c.id() == pid)
        .expect("the holder is a replica");
    let mut dead = replicas.remove(killed);
    let _ = dead.kill();
    let _ = dead.wait();
    let taken = xo_tests::until("a standby took the lease over", async || {
        holder().await.filter(|h| *h != first)
    })
    .await;
    assert!(
        replicas
            .iter()
            .any(|c| taken.contains(&format!(":{}:", c.id()))),
        "{taken}"
    );
    until_delivered(&bus, &got, "after").await;
    typed::publish(
        &bus,
        &s.alert(AlertKind::TaskBlocked),
        &alert("four"),
        Format::Json,
    )
    .await
    .unwrap();
    eventually("four delivered", || {
        got.lock().unwrap().iter().any(|x| x == "four")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let count = got.lock().unwrap().iter().filter(|x| *x == "four").count();
    assert_eq!(count, 1, "four delivered {count} times by 2 replicas");
    for mut c in replicas {
        let _ = c.kill();
        let _ = c.wait();
    }
}
