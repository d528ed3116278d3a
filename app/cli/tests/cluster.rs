//! XO on a three-node NATS cluster (issue 16, cluster mode): with
//! `nats.replicas = 3` the queue's bucket and audit log are created R3; the
//! node leading the queue's bucket is SIGKILLed mid-goal and the goal still
//! completes, each task exactly once; an existing bucket with fewer
//! replicas is used and reported, naming both numbers.

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
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = Command::new("kill")
        .args(["-INT", &other.id().to_string()])
        .status();
    let _ = other.wait();
    let mut err = String::new();
    std::io::Read::read_to_string(other.stderr.as_mut().unwrap(), &mut err).unwrap();
    let warned = err
        .lines()
        .find(|l| l.contains("fewer replicas"))
        .unwrap_or_else(|| panic!("no report of the R1 bucket: {err}"));
    assert!(
        warned.contains("OLD_QUEUE")
            && warned.contains("\"found\":1")
            && warned.contains("\"configured\":3"),
        "{warned}"
    );
    let _ = queue.kill();
    let _ = queue.wait();
}
