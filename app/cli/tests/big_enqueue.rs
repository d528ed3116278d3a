//! Big goals fit: `xo enqueue` splits a file of 100,000 tasks into requests
//! that fit the bus's message limit (dependencies first), the queue holds
//! every task, and `xo tasks` pages through them. Refusals name the tasks.

use std::path::Path;
use std::process::{Child, Output, Stdio};

use xo_proto::queue::QueueStatus;
use xo_tests::NatsServer;

use xo_tests::launcher::Xo;

fn serve_queue(url: &str, state: &Path) -> Child {
    Xo::new()
        .command(&[])
        .args(["serve", "queue", "--nats", url])
        .env("XO__STATE__DIR", state)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("xo serve queue")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_hundred_thousand_tasks_enqueue_in_parts_and_list_in_pages() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = nats.url();
    let mut queue = serve_queue(&url, dir.path());
    // The queue is up when `init` answers.
    xo_tests::until_blocking("the queue answers", || {
        Some(Xo::on_nats(&url, dir.path()).run(&["init"])).filter(|o| o.status.success())
    });

    // 100,000 tasks; the first depends on the last, so the file's order is
    // not an order the queue could accept part by part.
    const N: usize = 100_000;
    let mut tasks = Vec::with_capacity(N);
    for i in 0..N {
        let mut t = serde_json::json!({
            "task_id": format!("t{i:06}"),
            "intent": format!("step {i} of the big goal"),
            "instructions": "Implement this step and its tests; keep the public API unchanged.",
            "role": "coder",
        });
        if i == 0 {
            t["depends_on"] = serde_json::json!([format!("t{:06}", N - 1)]);
        }
        tasks.push(t);
    }
    let file = dir.path().join("tasks.json");
    std::fs::write(&file, serde_json::to_vec(&tasks).unwrap()).unwrap();
    assert!(
        std::fs::metadata(&file).unwrap().len() > 10 * 262_144,
        "the file is far over one message"
    );
    let out = ok(&Xo::on_nats(&url, dir.path()).run(&["enqueue", file.to_str().unwrap()]));
    assert!(
        out.contains(&format!("enqueued {N} of {N} tasks in")),
        "{out}"
    );

    let status: QueueStatus = serde_json::from_str(&ok(
        &Xo::on_nats(&url, dir.path()).run(&["status", "--json"])
    ))
    .unwrap();
    assert_eq!(status.counts["pending"], N as u64);

    let listed: Vec<serde_json::Value> = serde_json::from_str(&ok(
        &Xo::on_nats(&url, dir.path()).run(&["tasks", "--state", "pending", "--json"])
    ))
    .unwrap();
    assert_eq!(listed.len(), N, "every task, page by page");
    // In enqueue order: the last task was sent before the first (its dependant).
    let pos = |id: &str| {
        listed
            .iter()
            .position(|t| t["task"]["task_id"] == id)
            .unwrap()
    };
    assert!(pos(&format!("t{:06}", N - 1)) < pos("t000000"));

    // The same file again adds nothing and says so.
    let out = ok(&Xo::on_nats(&url, dir.path()).run(&["enqueue", file.to_str().unwrap()]));
    assert!(out.contains(&format!("enqueued 0 of {N}")), "{out}");

    // A cycle is refused before anything is sent, naming its tasks.
    let cyc = dir.path().join("cycle.json");
    std::fs::write(
        &cyc,
        r#"[{"task_id":"C-1","intent":"a","instructions":"a","role":"coder","depends_on":["C-2"]},
            {"task_id":"C-2","intent":"b","instructions":"b","role":"coder","depends_on":["C-1"]}]"#,
    )
    .unwrap();
    let o = Xo::on_nats(&url, dir.path()).run(&["enqueue", cyc.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("dependency cycle: C-1 -> C-2 -> C-1"), "{err}");
    // A dependency on a task nobody enqueued is refused by the queue.
    let ghost = dir.path().join("ghost.json");
    std::fs::write(
        &ghost,
        r#"{"task_id":"G-1","intent":"a","instructions":"a","role":"coder","depends_on":["nope"]}"#,
    )
    .unwrap();
    let o = Xo::on_nats(&url, dir.path()).run(&["enqueue", ghost.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("G-1") && err.contains("nope"), "{err}");
    let _ = queue.kill();
    let _ = queue.wait();
}
