//! The orders the seeds give, over a real nats-server with the queue and
//! runners as their own `xo` processes.
//!
//! - Seed 002's loop is task → Manager → the Manager's next task (a
//!   Manager on the openai driver against a local model, a coder on the
//!   inline script driver): while the Manager reconciles, the coder asks
//!   for work and gets only what the Manager was not shown; the task the
//!   Manager drops never runs.
//! - Seed 001's critical directive interrupts: the one coder, mid-way
//!   through a planned task, is told, stops its agent and gives the task
//!   back; the critical task runs next, then the planned one continues on
//!   the work it left.

use std::path::PathBuf;
use std::time::Duration;
use xo_tests::ctl::ask;
use xo_tests::launcher::Xo;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use xo_bus::{Bus, NatsBus};
use xo_proto::queue::*;
use xo_tests::NatsServer;
use xo_tests::procs::Procs;

async fn state_of(bus: &Bus, id: &str) -> Option<TaskRecord> {
    let req = ListTasks {
        task_id: Some(id.into()),
        ..ListTasks::of(None)
    };
    ask(bus, &req).await.and_then(|v| v.into_iter().next())
}

/// The Manager's model. Asked to reconcile a list in which `t2` is pending,
/// it takes its time: it answers only once the coder has finished `d`
/// (work enqueued after the list was built), so the coder has asked for
/// work while the Manager's claim was out. Its reply drops `t2`.
async fn model(
    State(bus): State<Bus>,
    body: axum::Json<serde_json::Value>,
) -> axum::Json<serde_json::Value> {
    let pending = xo_tests::openai::manager_prompt_pending(&body);
    if pending.iter().any(|id| id == "t2") {
        // The reply waits (bounded) until d is done, as a slow model would.
        // (An async block, not the harness's `within`: an axum handler's
        // future must be Send, and an async closure borrowing `bus` is not.)
        let _ = tokio::time::timeout(xo_tests::HANG_GUARD, async {
            while state_of(&bus, "d")
                .await
                .is_none_or(|r| r.state != TaskState::Completed)
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }
    axum::Json(xo_tests::openai::manager_dropping(&body, &["t2"]))
}

const OK: &str = r#"{ reply = '{"status": "ok", "message": "done"}' }"#;

/// A coder task worked by the inline script `runs` (`[[run]]` tables).
fn scripted(id: &str, runs: &str) -> Task {
    let script = format!("```xo-script\nturn_ms = 20\n{runs}\n```\n");
    let mut t = Task::new(id, format!("task {id}"), script, "coder");
    t.project = Some("m".into());
    t
}

/// A coder task that writes `<id>.txt` and replies ok.
fn task(id: &str) -> Task {
    scripted(
        id,
        &format!("[[run]]\nsteps = [{{ write = \"{id}.txt\", content = \"{id}\" }}, {OK}]"),
    )
}

/// A nats-server, a folder, the processes started there and a client.
struct Fabric {
    nats: NatsServer,
    root: PathBuf,
    procs: Procs,
    bus: Bus,
    _tmp: tempfile::TempDir,
}

impl Fabric {
    /// The server and the queue, initialised (`manager`: with a Manager
    /// after each task) with a goal in project `m`, met once the queue is
    /// empty unless a Manager says it is.
    async fn start(manager: bool) -> Self {
        let nats = NatsServer::start();
        let tmp = tempfile::tempdir().unwrap();
        let bus = Bus::Nats(
            NatsBus::connect(&nats.url(), Default::default())
                .await
                .unwrap(),
        );
        let mut f = Fabric {
            root: tmp.path().to_path_buf(),
            procs: Procs::new(tmp.path().to_path_buf()),
            nats,
            bus,
            _tmp: tmp,
        };
        f.spawn("queue", &["serve", "queue"], &[]);
        let init = Init {
            manager,
            force: true,
            ..Default::default()
        };
        let answered =
            xo_tests::within(xo_tests::HANG_GUARD, async || ask(&f.bus, &init).await).await;
        assert!(
            answered.is_some(),
            "the queue never answered\n{}",
            f.procs.logs(20)
        );
        ask(
            &f.bus,
            &SetGoal {
                description: "a few steps".into(),
                project_id: Some("m".into()),
                completed: !manager,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        f
    }

    fn spawn(&mut self, name: &str, args: &[&str], env: &[(&str, &str)]) {
        let root = &self.root;
        let mut c = Xo::new().command(&[]);
        c.args(["--nats", &self.nats.url(), "--log-format", "json"])
            .args(args)
            .env("XO__STATE__DIR", root.join("state"))
            .env("XO__QUEUE__DATA_DIR", root.join("data"))
            .env("XO__RUNNER__SANDBOX", root.join("sandbox"))
            .env("XO__RUNNER__DEFAULT_PROJECT", "m")
            .env("XO__RUNNER__CLAIM_WAIT_MS", "300")
            .env("XO__RUNNER__MICROCOSM", "false")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied());
        self.procs.start(name, c);
    }

    fn coder(&mut self, unit: &str) {
        self.spawn(
            unit,
            &[
                "serve", "runner", "--script", "inline", "--role", "coder", "--unit", unit,
            ],
            &[],
        );
    }

    /// Waits for the queue to complete the goal; panics with the logs if it
    /// does not.
    async fn completed(&self) {
        let client = xo_tests::ctl::client(&self.bus, Duration::from_secs(3));
        let done = xo_tests::ctl::goal_completed(&client, xo_tests::HANG_GUARD).await;
        assert!(
            done.is_some(),
            "the goal did not complete\n{}",
            self.procs.logs(30)
        );
    }

    fn audit(&self) -> String {
        std::fs::read_to_string(self.root.join("data/m/audit.log.jsonl")).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_manager_drops_never_runs_while_a_coder_asks_for_work() {
    let mut f = Fabric::start(true).await;
    let bus = f.bus.clone();
    let app = Router::new()
        .route("/v1/chat/completions", post(model))
        .with_state(bus.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    ask(
        &bus,
        &Enqueue::new(vec![task("t1"), task("t2"), task("t3")]),
    )
    .await
    .unwrap();
    ask(&bus, &Start::default()).await.unwrap();
    // The test does t1; its completion makes the Manager task.
    let claim = Claim {
        role: "coder".into(),
        claimant: "test".into(),
        wait_ms: 0,
    };
    let c1 = ask(&bus, &claim).await.unwrap().unwrap();
    assert_eq!(c1.record.task.task_id, "t1");
    ask(
        &bus,
        &Complete {
            task_id: "t1".into(),
            token: c1.token,
            claimant: String::new(),
            report: ValidationReport {
                passed: true,
                summary: "ok".into(),
                ..Default::default()
            },
            manager_reply: None,
            usage: Default::default(),
            exchange: None,
            diff: None,
        },
    )
    .await
    .unwrap();

    f.spawn(
        "manager",
        &[
            "serve",
            "runner",
            "--role",
            "manager",
            "--unit",
            "manager-1",
        ],
        &[
            ("XO__RUNNER__DRIVER__KIND", "openai"),
            ("XO__RUNNER__DRIVER__OPENAI__BASE_URL", &base),
            ("XO__RUNNER__DRIVER__OPENAI__MODEL", "manager-model"),
            ("XO__RUNNER__DRIVER__OPENAI__MAX_ATTEMPTS", "1"),
        ],
    );
    let claimed = xo_tests::within(xo_tests::HANG_GUARD, async || {
        state_of(&bus, "manager-t1")
            .await
            .filter(|r| r.state == TaskState::Running)
    })
    .await;
    assert!(
        claimed.is_some(),
        "the Manager never claimed\n{}",
        f.procs.logs(20)
    );
    // New work the Manager was not shown, then a coder process.
    ask(&bus, &Enqueue::new(vec![task("d")])).await.unwrap();
    f.coder("coder-1");
    f.completed().await;
    let t2 = state_of(&bus, "t2").await.unwrap();
    assert_eq!(t2.state, TaskState::Cancelled, "{t2:?}");
    assert_eq!(t2.attempt, 0, "the task the Manager dropped was claimed");
    assert!(!f.root.join("sandbox/m/t2.txt").exists(), "t2 ran");
    for id in ["t3", "d"] {
        let r = state_of(&bus, id).await.unwrap();
        assert_eq!(r.state, TaskState::Completed, "{id}: {r:?}");
    }
    let audit = f.audit();
    let rec = audit
        .lines()
        .find(|l| l.contains("MANAGER_RECONCILED") && l.contains("\"manager-t1\""))
        .unwrap_or_else(|| panic!("no reconciliation of manager-t1 in\n{audit}"));
    assert!(rec.contains(r#""cancelled":["t2"]"#), "{rec}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_task_interrupts_planned_work_which_continues_after_it() {
    let mut f = Fabric::start(false).await;
    // The planned task: its first attempt writes part of its work and then
    // works "forever"; a later attempt finishes. It passes only if the part
    // written first is still there (continued, not rolled back).
    let mut slow = scripted(
        "slow",
        &format!(
            "[[run]]\nattempt = 1\nsteps = [{{ write = \"partial.txt\", content = \"half\" }}, {{ run = \"exec sleep 600\" }}, {OK}]\n[[run]]\nattempt = 2\nsteps = [{{ write = \"whole.txt\", content = \"whole\" }}, {OK}]"
        ),
    );
    slow.acceptance_criteria = vec![
        "file exists: partial.txt".into(),
        "file exists: whole.txt".into(),
    ];
    ask(&f.bus, &Enqueue::new(vec![slow])).await.unwrap();
    ask(&f.bus, &Start::default()).await.unwrap();
    f.coder("coder-1");
    // Mid-task, its work is in its own tree (worktree isolation); the
    // critical task starts from main, without it.
    let partial = f.root.join("sandbox/.xo-worktrees/m/slow/partial.txt");
    let midway = xo_tests::within(xo_tests::HANG_GUARD, async || {
        if !partial.exists() {
            return None;
        }
        state_of(&f.bus, "slow")
            .await
            .filter(|r| r.state == TaskState::Running)
    })
    .await;
    assert!(
        midway.is_some(),
        "the planned task never got going\n{}",
        f.procs.logs(20)
    );
    // A critical directive's task, while the only coder is busy.
    let mut crit = task("crit");
    crit.lane = Lane::Critical;
    ask(&f.bus, &Enqueue::new(vec![crit])).await.unwrap();
    f.completed().await;

    let slow = state_of(&f.bus, "slow").await.unwrap();
    assert_eq!(slow.state, TaskState::Completed, "{slow:?}");
    assert_eq!((slow.attempt, slow.retries), (2, 0), "a yield is no retry");
    assert!(f.root.join("sandbox/m/crit.txt").exists());
    // Both reached the project: the planned task's work continued in its
    // tree across the yield (its first half kept).
    assert!(f.root.join("sandbox/m/partial.txt").exists());
    assert!(f.root.join("sandbox/m/whole.txt").exists());
    // The order, from the audit: interrupted, given back, the critical task
    // run, then the planned one again.
    let audit = f.audit();
    let events: Vec<String> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let e = v["event"].as_str()?;
            let t = v["task_id"].as_str()?;
            matches!(
                e,
                "TASK_START" | "TASK_INTERRUPTED" | "TASK_YIELDED" | "TASK_COMPLETE"
            )
            .then(|| format!("{e} {t}"))
        })
        .collect();
    assert_eq!(
        events,
        [
            "TASK_START slow",
            "TASK_INTERRUPTED slow",
            "TASK_YIELDED slow",
            "TASK_START crit",
            "TASK_COMPLETE crit",
            "TASK_START slow",
            "TASK_COMPLETE slow",
        ],
        "\n{audit}"
    );
    let yielded = audit.lines().find(|l| l.contains("TASK_YIELDED")).unwrap();
    assert!(yielded.contains(r#""yielded_to":"crit""#), "{yielded}");
    let log = std::fs::read_to_string(f.root.join("coder-1.log")).unwrap();
    assert!(log.contains("asked to yield to a critical task"), "{log}");
}
