//! SIGKILL the queue service mid-run and start it again: no task is lost and
//! none is completed twice.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use xo_tests::launcher::Xo;

use xo_bus::{Bus, NatsBus};
use xo_tests::NatsServer;
use xo_tests::ctl::{Next, begin, claim, complete};

fn serve_queue(url: &str, data: &std::path::Path) -> Child {
    Xo::new()
        .command(&[])
        .args(["serve", "queue", "--nats", url])
        .env("XO__QUEUE__LEASE_MS", "1500")
        .env("XO__QUEUE__DATA_DIR", data)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("xo serve queue")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_loses_nothing_and_completes_nothing_twice() {
    let nats = NatsServer::start();
    let data = tempfile::tempdir().unwrap();
    let url = nats.url();
    let mut queue = serve_queue(&url, data.path());
    let bus = Bus::Nats(NatsBus::connect(&url, Default::default()).await.unwrap());
    begin(&bus, xo_tests::ctl::tasks("k", 60)).await;

    let mut completed: BTreeMap<String, u32> = BTreeMap::new();
    let mut kills = 0;
    loop {
        let c = match claim(&bus).await {
            Next::Task(c) => c,
            Next::Done => break,
            // No answer, or a lease held by a claim lost in a kill: again.
            Next::Again => continue,
        };
        let id = c.record.task.task_id.clone();
        if completed.len() % 20 == 10 && kills < 2 && !completed.contains_key(&id) {
            // Kill the queue while this task is leased.
            queue.kill().unwrap();
            queue.wait().unwrap();
            kills += 1;
            queue = serve_queue(&url, data.path());
        }
        // Refused (lease lost across the kill) or no answer: offered again.
        if complete(&bus, &c).await {
            *completed.entry(id).or_default() += 1;
        }
    }
    queue.kill().unwrap();
    let _ = queue.wait();
    assert_eq!(kills, 2);
    assert_eq!(completed.len(), 60, "no task lost");
    assert!(
        completed.values().all(|n| *n == 1),
        "none completed twice: {completed:?}"
    );
    // The audit log agrees: one completion per task, chain intact.
    let file = xo_queue::audit::file_for(data.path(), "default");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.matches("\"TASK_COMPLETE\"").count(), 60);
    assert!(matches!(
        xo_queue::audit::verify(&file).unwrap(),
        xo_queue::audit::Verdict::Intact { .. }
    ));
}
