//! XO on a three-node NATS cluster (issue 16, cluster mode): with
//! `nats.replicas = 3` the queue's bucket and audit log are created R3; the
//! node leading the queue's bucket is SIGKILLed mid-goal and the goal still
//! completes, each task exactly once; an existing bucket with fewer
//! replicas is used and reported, naming both numbers. A kept stream waits
//! for a cluster's JetStream to answer and says when it does not, apart
//! from a server with no JetStream at all.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use xo_tests::launcher::Xo;

use async_nats::jetstream;
use xo_bus::{Bus, NatsBus};
use xo_proto::queue::*;
use xo_tests::cluster::NatsCluster;
use xo_tests::ctl::{Next, begin, claim, complete};

fn serve_queue(url: &str, data: &std::path::Path, prefix: &str) -> Child {
    Xo::new()
        .command(&[])
        .args(["serve", "queue", "--nats", url])
        .env("XO__NATS__REPLICAS", "3")
        .env("XO__ORG__PREFIX", prefix)
        .env("XO__QUEUE__LEASE_MS", "2000")
        .env("XO__QUEUE__DATA_DIR", data)
        .env("RUST_LOG", "info")
        .env("XO__TELEMETRY__LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xo serve queue")
}

/// The stream behind a bucket or log: its replicas and its leader.
async fn placement(js: &jetstream::Context, stream: &str) -> (usize, String) {
    let mut s = js.get_stream(stream).await.expect(stream);
    let info = s.info().await.expect("stream info");
    let leader = info
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .unwrap_or_default();
    (info.config.num_replicas, leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_survives_the_bucket_leader_dying_on_a_three_node_cluster() {
    let mut nats = NatsCluster::start(3);
    let url = nats.url();
    let data = tempfile::tempdir().unwrap();
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(url.split(',').collect::<Vec<_>>())
        .await
        .unwrap();
    let bus = Bus::Nats(NatsBus::from_client(client.clone()));
    let js = jetstream::new(client.clone());
    let mut queue = serve_queue(&url, data.path(), "xo");
    begin(&bus, xo_tests::ctl::tasks("r", 30)).await;
    let (replicas, leader) = placement(&js, "KV_XO_QUEUE").await;
    assert_eq!(replicas, 3, "the queue's bucket is R3");
    assert_eq!(
        placement(&js, "XO_LOG_AUDIT").await.0,
        3,
        "the audit log is R3"
    );
    let leader = nats.index_of(&leader).expect("a leader node");

    let mut completed: BTreeMap<String, u32> = BTreeMap::new();
    let mut killed = false;
    let mut killed_at: Option<std::time::Instant> = None;
    loop {
        let c = match claim(&bus).await {
            Next::Task(c) => c,
            Next::Done => break,
            Next::Again => continue,
        };
        let id = c.record.task.task_id.clone();
        if completed.len() == 10 && !killed {
            // The node leading the queue's bucket dies with this task leased.
            nats.kill(leader);
            killed = true;
            killed_at = Some(std::time::Instant::now());
        }
        if complete(&bus, &c).await {
            *completed.entry(id).or_default() += 1;
            if let Some(at) = killed_at.take() {
                // A durable write (state on the R3 bucket) acknowledged.
                println!(
                    "first completion acknowledged {} ms after the bucket's leader node was killed",
                    at.elapsed().as_millis()
                );
            }
        }
    }
    assert!(killed);
    // A reply lost with the node may leave a completion unacknowledged to
    // this client; the queue's record and audit log are the truth: each
    // task completed, exactly once.
    assert!(completed.values().all(|n| *n == 1), "{completed:?}");
    let subjects = xo_proto::Subjects::default();
    let all = xo_bus::typed::all_tasks(&bus, &subjects, None, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(all.len(), 30);
    assert!(
        all.iter().all(|t| t.state == TaskState::Completed),
        "no task lost"
    );
    let audit = std::fs::read_to_string(xo_queue::audit::file_for(data.path(), "default")).unwrap();
    for t in &all {
        let n = audit
            .lines()
            .filter(|l| {
                l.contains("\"TASK_COMPLETE\"")
                    && l.contains(&format!("\"task_id\":\"{}\"", t.task.task_id))
            })
            .count();
        assert_eq!(n, 1, "{} completed {n} times", t.task.task_id);
    }
    let (_, new_leader) = placement(&js, "KV_XO_QUEUE").await;
    assert_ne!(nats.index_of(&new_leader), Some(leader), "a new leader");
    nats.restart(leader);

    // A bucket made R1 before (another organisation's): used, and reported.
    let old = xo_bus::NatsStore::new(client.clone(), "old");
    old.put(
        "queue",
        "status",
        bytes::Bytes::from_static(b"{}"),
        xo_bus::Cas::Any,
    )
    .await
    .unwrap();
    let _ = old;
    let mut other = serve_queue(&url, data.path(), "old");
    // Its log, line by line as it writes it, until it reports the bucket.
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let stderr = other.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut err = String::new();
    let warned = loop {
        match lines.recv_timeout(xo_tests::HANG_GUARD) {
            Ok(l) if l.contains("fewer replicas") => break l,
            Ok(l) => err.push_str(&(l + "\n")),
            Err(e) => panic!("no report of the R1 bucket ({e}): {err}"),
        }
    };
    let _ = Command::new("kill")
        .args(["-INT", &other.id().to_string()])
        .status();
    let _ = other.wait();
    assert!(
        warned.contains("OLD_QUEUE")
            && warned.contains("\"found\":1")
            && warned.contains("\"configured\":3"),
        "{warned}"
    );
    let _ = queue.kill();
    let _ = queue.wait();
}

fn kept(name: &str, replicas: usize) -> xo_bus::kept::Kept {
    xo_bus::kept::Kept {
        name: name.into(),
        subjects: vec![format!("{}.>", name.to_lowercase())],
        max_age: Duration::from_secs(60),
        max_bytes: 1 << 20,
        replicas,
    }
}

/// A kept stream (the sharded supervisors' reports) asked of a cluster
/// whose JetStream cannot answer (two of three nodes down: no quorum)
/// says that it did not answer, not that the server lacks JetStream; asked
/// while the nodes come back, it waits for them and is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_stream_waits_for_the_clusters_jetstream_and_says_when_it_does_not_answer() {
    let mut nats = NatsCluster::start(3);
    nats.kill(1);
    nats.kill(2);
    let client = async_nats::connect(nats.node_url(0)).await.unwrap();
    let bus = Bus::Nats(NatsBus::from_client(client.clone()));
    let spec = kept("XO_KEPT_PROBE", 3);

    let e = xo_bus::kept::ensure_within(&bus, &spec, Duration::ZERO)
        .await
        .expect_err("no quorum: no stream");
    let said = e.to_string();
    assert!(
        said.contains("did not answer") && !said.contains("no JetStream"),
        "{said}"
    );
    assert!(
        !matches!(e, xo_bus::BusError::NoJetStream { .. }),
        "a cluster without quorum has JetStream: {e:?}"
    );

    let asked = tokio::spawn({
        let bus = bus.clone();
        let spec = spec.clone();
        async move { xo_bus::kept::ensure(&bus, &spec).await }
    });
    nats.restart(1);
    nats.restart(2);
    asked.await.unwrap().expect("made once the nodes are back");
    let (replicas, _) = placement(&jetstream::new(client), "XO_KEPT_PROBE").await;
    assert_eq!(replicas, 3);
}

/// A server whose account has no JetStream is named as such at once (the
/// fix: enable it), not after the wait for a cluster's JetStream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_stream_on_a_server_without_jetstream_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    // Accounts of their own, none with JetStream; anonymous clients are `xo`.
    std::fs::write(
        &conf,
        "accounts { XO: { users: [ { user: xo, password: secret } ] } }\nno_auth_user: xo\n",
    )
    .unwrap();
    let nats = xo_tests::NatsServer::start_with(Some(conf));
    let client = async_nats::connect(nats.url()).await.unwrap();
    let bus = Bus::Nats(NatsBus::from_client(client));
    let e = xo_bus::kept::ensure(&bus, &kept("XO_KEPT_PROBE", 1))
        .await
        .expect_err("no JetStream: no stream");
    assert!(matches!(e, xo_bus::BusError::NoJetStream { .. }), "{e:?}");
    assert!(e.to_string().contains("enable it"), "{e}");
}
