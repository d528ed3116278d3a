//! SIGKILL the queue service mid-run and start it again: no task is lost and
//! none is completed twice.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use xo_bus::{Bus, NatsBus};
use xo_proto::queue::*;
use xo_tests::NatsServer;
use xo_tests::ctl::{call, must};

fn serve_queue(url: &str, data: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_xo"))
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
    must(
        &bus,
        &Init {
            mode: ExecutionMode::Auto,
            manager: false,
            force: false,
        },
    )
    .await;
    must(
        &bus,
        &SetGoal {
            budget_usd: 0.0,
            description: "g".into(),
            project_id: None,
            completed: true,
        },
    )
    .await;
    let tasks = xo_tests::ctl::tasks("k", 60);
    must(&bus, &Enqueue { tasks }).await;
    must(&bus, &Start {}).await;

    let mut completed: BTreeMap<String, u32> = BTreeMap::new();
    let mut kills = 0;
    loop {
        let claimed = match call(
            &bus,
            &Claim {
                role: "coder".into(),
                claimant: "c1".into(),
                wait_ms: 200,
            },
        )
        .await
        {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(c) = claimed else {
            let s = must(&bus, &GetStatus {}).await;
            if s.status == RunStatus::Completed {
                break;
            }
            continue; // a lease held by a claim lost in a kill: wait for it to expire
        };
        let id = c.record.task.task_id.clone();
        if completed.len() % 20 == 10 && kills < 2 && !completed.contains_key(&id) {
            // Kill the queue while this task is leased.
            queue.kill().unwrap();
            queue.wait().unwrap();
            kills += 1;
            queue = serve_queue(&url, data.path());
        }
        let req = Complete {
            usage: Default::default(),
            task_id: id.clone(),
            token: c.token,
            report: ValidationReport {
                passed: true,
                ..Default::default()
            },
            manager_reply: None,
        };
        match call(&bus, &req).await {
            Ok(r) if r.state == TaskState::Completed => *completed.entry(id).or_default() += 1,
            // Refused (lease lost across the kill) or no answer: the task is offered again.
            _ => {}
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
