//! A standby queue: two `xo serve queue` on one nats-server, one serving
//! under a lease in the KV store, the other waiting. SIGKILL the active one
//! mid-goal (twice, the killed one coming back as the standby): the other
//! takes over within the lease, and every task is completed exactly once,
//! the audit chain intact and equal to the store's copy. A holder whose
//! lease is taken from it stops serving at once, and says why.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use xo_tests::launcher::Xo;

use xo_bus::{Bus, NatsBus, NatsStore, Store};
use xo_proto::queue::*;
use xo_tests::NatsServer;
use xo_tests::ctl::{Next, begin, claim, complete, must};

const LEASE_MS: u64 = 1500;

fn serve_queue(url: &str, data: &std::path::Path) -> Child {
    Xo::new()
        .command(&[])
        .args(["serve", "queue", "--nats", url])
        .env("XO__QUEUE__LEASE_MS", "1500")
        .env("XO__QUEUE__LEADER_LEASE_MS", LEASE_MS.to_string())
        .env("XO__QUEUE__DATA_DIR", data)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xo serve queue")
}

/// The pid of the lease's holder (`host:pid:…`).
async fn holder(store: &Store) -> u32 {
    let e = store
        .get(xo_queue::BUCKET, xo_queue::LEADER_KEY)
        .await
        .unwrap()
        .expect("a lease is held");
    let h: xo_bus::leader::Holder = serde_json::from_slice(&e.value).unwrap();
    h.holder.split(':').nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_when_the_active_queue_is_killed() {
    let nats = NatsServer::start();
    let data = tempfile::tempdir().unwrap();
    let url = nats.url();
    let mut a = serve_queue(&url, data.path());
    let bus = Bus::Nats(NatsBus::connect(&url, Default::default()).await.unwrap());
    let xo_bus::Bus::Nats(nb) = &bus else {
        unreachable!()
    };
    let store = Store::Nats(NatsStore::new(nb.client().clone(), "xo"));
    // The second instance starts once the first serves: it stands by.
    must(&bus, &GetStatus {}).await;
    let mut b = serve_queue(&url, data.path());
    assert_eq!(
        holder(&store).await,
        a.id(),
        "the first one holds the lease"
    );
    begin(&bus, xo_tests::ctl::tasks("s", 60)).await;

    let mut completed: BTreeMap<String, u32> = BTreeMap::new();
    let mut failovers: Vec<Duration> = Vec::new();
    loop {
        let c = match claim(&bus).await {
            Next::Task(c) => c,
            Next::Done => break,
            Next::Again => continue,
        };
        let id = c.record.task.task_id.clone();
        if completed.len() % 20 == 10 && failovers.len() < 2 && !completed.contains_key(&id) {
            // SIGKILL the active one while this task is leased; the killed
            // one comes back as the standby.
            let active = holder(&store).await;
            let (dead, alive) = if active == a.id() {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            dead.kill().unwrap();
            dead.wait().unwrap();
            let killed = Instant::now();
            must(&bus, &GetStatus {}).await;
            failovers.push(killed.elapsed());
            assert_eq!(holder(&store).await, alive.id(), "the standby took over");
            *dead = serve_queue(&url, data.path());
        }
        if complete(&bus, &c).await {
            *completed.entry(id).or_default() += 1;
        }
    }
    for f in &failovers {
        println!("failover: {} ms (lease {LEASE_MS} ms)", f.as_millis());
        assert!(
            *f >= Duration::from_millis(LEASE_MS / 2),
            "a standby waits for the lease to run out: {f:?}"
        );
    }
    assert_eq!(failovers.len(), 2);
    assert_eq!(completed.len(), 60, "no task lost");
    assert!(
        completed.values().all(|n| *n == 1),
        "none completed twice: {completed:?}"
    );
    let c = xo_queue::audit::check(&store, data.path(), "default")
        .await
        .unwrap();
    assert!(c.intact, "{c:?}");
    assert_eq!(c.store_lines, Some(c.lines), "{c:?}");
    let file = xo_queue::audit::file_for(data.path(), "default");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.matches("\"TASK_COMPLETE\"").count(), 60);

    // Fencing: the lease taken from under the active one (its revision
    // moved) stops it at once, with the reason; it writes nothing more.
    let active = holder(&store).await;
    let (fenced, standby) = if active == a.id() { (a, b) } else { (b, a) };
    store
        .put(
            xo_queue::BUCKET,
            xo_queue::LEADER_KEY,
            serde_json::to_vec(&xo_bus::leader::Holder {
                holder: "elsewhere:1:0".into(),
                renewed_at: 0,
            })
            .unwrap()
            .into(),
        )
        .await
        .unwrap();
    let out = fenced.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("was taken by another instance"), "{err}");
    let mut standby = standby;
    standby.kill().unwrap();
    let _ = standby.wait();
}
