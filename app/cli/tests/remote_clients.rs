//! Clients through the front door (issue 42, item 4): `xo audit verify` and
//! `xo review log` ask the services' verbs, so they answer for a fabric on
//! other machines. Here the fabric runs in a process of its own with its
//! own state directory, over a real nats-server, and the client runs with
//! another (empty) state directory: it has no file to read, only the bus.

use std::path::Path;
use std::process::{Child, Output, Stdio};

use xo_tests::NatsServer;

use xo_tests::launcher::{Xo, text};

/// The fabric (`xo up`) in its own process, killed when dropped.
struct Fabric(Child);

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `xo ARGS` until `done` holds for its output (the fabric starting);
/// the bound is a hang guard, not a timing assertion.
fn until(url: &str, state: &Path, args: &[&str], done: impl Fn(&Output) -> bool) -> Output {
    xo_tests::until_blocking(&format!("xo {args:?} did what was waited for"), || {
        Some(Xo::on_nats(url, state).run(args)).filter(&done)
    })
}

#[test]
fn audit_verify_and_review_log_answer_for_a_fabric_elsewhere() {
    let nats = NatsServer::start();
    let url = nats.url();
    let there = tempfile::tempdir().unwrap();
    let here = tempfile::tempdir().unwrap();
    // A review run already in the fabric's run log.
    let mut cfg = xo_runtime::XoConfig::default();
    cfg.state.dir = there.path().to_path_buf();
    let runlog = xo_review::runlog::run_log_path(&cfg);
    std::fs::create_dir_all(runlog.parent().unwrap()).unwrap();
    let run = serde_json::json!({
        "v": 1, "reviewer": "assessor", "project": cfg.review.project, "task_count": 4,
        "trigger": "interval", "outcome": "ran", "summary": "on course",
        "verdict": "aligned", "tokens_in": 1200, "tokens_out": 300, "cost_usd": 0.0123,
        "at": 1_795_350_000_000u64
    });
    std::fs::write(&runlog, format!("{run}\n")).unwrap();

    let _fabric = Fabric(
        Xo::new()
            .command(&[])
            .args(["up", "--nats", &url])
            .env("XO__STATE__DIR", there.path())
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("xo up"),
    );
    let h = here.path();
    until(&url, h, &["init"], |o| o.status.success());
    let o = Xo::on_nats(&url, h).run(&["goal", "set", "ship it", "--project", "p"]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    // The queue's own check, from here: its file is there, not here.
    let o = Xo::on_nats(&url, h).run(&["audit", "verify", "--project", "p"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(out.starts_with("project p: chain intact, "), "{out}");
    assert!(!out.contains("checking the files here"), "{out}");
    let here_file = xo_queue::audit::file_for(&h.join("data"), "p");
    assert!(
        !here_file.exists(),
        "the client wrote {}",
        here_file.display()
    );

    // A line changed where the queue runs: the check from here says so.
    let file = xo_queue::audit::file_for(&there.path().join("data"), "p");
    let log = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, log.replacen("\"GOAL_SET\"", "\"GOAL_SET \"", 1)).unwrap();
    let o = Xo::on_nats(&url, h).run(&["audit", "verify", "--project", "p"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stdout).contains("broken at line "),
        "{}",
        text(&o.stdout)
    );

    // The review service's runs, from here.
    let o = until(&url, h, &["review", "log", "--json"], |o| {
        o.status.success() && !o.stdout.is_empty()
    });
    let runs: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["summary"], "on course");
    let o = Xo::on_nats(&url, h).run(&["review", "log"]);
    let out = text(&o.stdout);
    assert!(
        out.contains("assessor") && out.contains("on course"),
        "{out}"
    );
    assert!(!out.contains("no review service answered"), "{out}");

    // With nothing answering, each says so and reads the files here.
    drop(_fabric);
    let o = Xo::on_nats(&url, h).run(&["review", "log"]);
    let out = text(&o.stdout);
    assert!(out.contains("no review service answered"), "{out}");
    assert!(out.contains("no review runs yet"), "{out}");
    let o = Xo::on_nats(&url, h).run(&["audit", "verify", "--project", "p"]);
    assert!(
        text(&o.stdout).contains("no queue answered"),
        "{}",
        text(&o.stdout)
    );
}
