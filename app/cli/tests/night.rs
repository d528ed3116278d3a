//! The night: a goal of 40 tasks with a Manager, three runners and a
//! manager runner, every service its own `xo` process on a real
//! nats-server, left alone. One task can never validate, one depends on a
//! task the operator cancelled, one asks a question nobody answers, and
//! runners are SIGKILLed twice — once on a task whose agent had written a
//! checkpoint (resumed), once on one that had not (rolled back). In the
//! morning every other task is completed, the blocked, waiting and stuck
//! tasks were reported to the operator's webhook, and the audit chain is
//! intact.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use xo_tests::ctl::ask;
use xo_tests::launcher::Xo;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use xo_bus::{Bus, NatsBus, typed};
use xo_proto::Subjects;
use xo_proto::alert::{Alert, AlertKind};
use xo_proto::queue::*;
use xo_tests::NatsServer;
use xo_tests::procs::Procs;

struct Night {
    url: String,
    config: PathBuf,
    model: String,
    procs: Procs,
}

impl Night {
    fn spawn(&mut self, name: &str, args: &[&str]) {
        let r = &self.procs.root;
        let mut c = Xo::new().command(&[]);
        c.args(["--nats", &self.url, "--config"])
            .arg(&self.config)
            .args(["--log-format", "json"])
            .args(args)
            .env("XO__STATE__DIR", r.join("state"))
            .env("XO__QUEUE__DATA_DIR", r.join("data"))
            .env("XO__RUNNER__SANDBOX", r.join("sandbox"))
            .env("XO__RUNNER__DRIVER__OPENAI__BASE_URL", &self.model)
            .env("RUST_LOG", "info");
        self.procs.start(name, c);
    }

    fn runner(&mut self, unit: &str) {
        self.spawn(
            unit,
            &[
                "serve", "runner", "--script", "inline", "--role", "coder", "--unit", unit,
            ],
        );
    }

    fn logs(&self) -> String {
        self.procs.logs(8)
    }
}

const OK: &str = r#"{ reply = '{"status": "ok", "message": "done"}' }"#;

fn task(id: &str, steps: &str) -> Task {
    let mut t = Task::new(
        id,
        format!("night task {id}"),
        format!("```xo-script\nturn_ms = 10\n{steps}\n```\n"),
        "coder",
    );
    t.project = Some("night".into());
    t
}

fn goal() -> Vec<Task> {
    let mut v = Vec::new();
    for i in 1..=34 {
        let id = format!("n{i:02}");
        let mut t = task(
            &id,
            &format!("[[run]]\nsteps = [{{ write = \"out/{id}.txt\", content = \"{id}\" }}, {OK}]"),
        );
        t.acceptance_criteria = vec![format!("file contains: out/{id}.txt :: {id}")];
        if i > 1 && i % 5 == 0 {
            t.depends_on = vec![format!("n{:02}", i - 1)];
        }
        v.push(t);
    }
    // Never validates: the file is never written.
    let mut t = task("never", &format!("[[run]]\nsteps = [{OK}]"));
    t.acceptance_criteria = vec!["file exists: never.txt".into()];
    v.push(t);
    // Its dependency is cancelled by the operator before the night starts.
    v.push(task("dep0", &format!("[[run]]\nsteps = [{OK}]")));
    let mut t = task("needs-dep0", &format!("[[run]]\nsteps = [{OK}]"));
    t.depends_on = vec!["dep0".into()];
    v.push(t);
    // Asks a question nobody answers.
    v.push(task(
        "asks",
        r#"[[run]]
steps = [{ reply = '{"status": "ok", "message": "Should I use Postgres or SQLite for the store?"}' }]"#,
    ));
    // Killed mid-task with a checkpoint written: resumed.
    let mut t = task(
        "ck",
        &format!(
            "[[run]]\nattempt = 1\nsteps = [{{ write = \".xo/checkpoint\", content = \"step 1 of 2\" }}, {{ write = \"ck-half.txt\", content = \"half\" }}, {{ run = \"exec sleep 600\" }}, {OK}]\n[[run]]\nattempt = 2\nsteps = [{{ run = \"cat .xo/checkpoint > ck-resumed-from.txt\" }}, {{ write = \"ck.txt\", content = \"whole\" }}, {OK}]"
        ),
    );
    t.working_directory = Some("ck".into());
    t.acceptance_criteria = vec![
        "file exists: ck.txt".into(),
        "file exists: ck-half.txt".into(),
    ];
    v.push(t);
    // Killed mid-task with no checkpoint: rolled back.
    let mut t = task(
        "rb",
        &format!(
            "[[run]]\nattempt = 1\nsteps = [{{ write = \"rb-half.txt\", content = \"half\" }}, {{ run = \"exec sleep 600\" }}, {OK}]\n[[run]]\nattempt = 2\nsteps = [{{ write = \"rb.txt\", content = \"whole\" }}, {OK}]"
        ),
    );
    t.working_directory = Some("rb".into());
    t.acceptance_criteria = vec![
        "file exists: rb.txt".into(),
        "command succeeds: test ! -e rb-half.txt".into(),
    ];
    v.push(t);
    v
}

type Alerts = Arc<Mutex<Vec<Alert>>>;

async fn hook(State(a): State<Alerts>, body: axum::Json<Alert>) -> &'static str {
    a.lock().unwrap().push(body.0);
    "ok"
}

/// The Manager's model: keeps every pending task it is shown.
async fn model(body: axum::Json<serde_json::Value>) -> axum::Json<serde_json::Value> {
    axum::Json(xo_tests::openai::manager_keeping_pending(&body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_night_alone() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let alerts: Alerts = Default::default();
    let app = Router::new()
        .route("/alerts", post(hook))
        .with_state(alerts.clone())
        .route("/v1/chat/completions", post(model));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    for d in ["ck", "rb"] {
        std::fs::create_dir_all(root.join("sandbox/night").join(d)).unwrap();
    }
    let config = root.join("xo.toml");
    std::fs::write(
        &config,
        format!(
            r#"[queue]
lease_ms = 1500
[supervisor]
stale_after_ms = 3000
[runner]
claim_wait_ms = 300
heartbeat_ms = 500
microcosm = false
max_retries = 1
[runner.driver.openai]
model = "night-manager"
max_attempts = 2
backoff_ms = 50
[alerts]
backoff_ms = 50
[[alerts.webhooks]]
url = "{base}/alerts"
"#
        ),
    )
    .unwrap();
    let mut night = Night {
        url: nats.url(),
        config,
        model: format!("{base}/v1"),
        procs: Procs::new(root.clone()),
    };
    night.spawn("queue", &["serve", "queue"]);
    night.spawn("supervisor", &["serve", "supervisor"]);
    let bus = Bus::Nats(
        NatsBus::connect(&nats.url(), Default::default())
            .await
            .unwrap(),
    );
    let first = Init {
        manager: true,
        ..Default::default()
    };
    let init = xo_tests::within(xo_tests::HANG_GUARD, async || ask(&bus, &first).await).await;
    assert!(init.is_some(), "the queue never answered\n{}", night.logs());
    ask(
        &bus,
        &SetGoal {
            description: "forty tasks overnight".into(),
            project_id: Some("night".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ids = ask(&bus, &Enqueue::new(goal())).await.unwrap();
    assert_eq!(ids.len(), 40);
    ask(
        &bus,
        &Cancel {
            by: Default::default(),
            task_id: "dep0".into(),
        },
    )
    .await
    .unwrap();
    for u in ["r1", "r2", "r3"] {
        night.runner(u);
    }
    night.spawn(
        "manager-1",
        &[
            "serve",
            "runner",
            "--driver",
            "openai",
            "--role",
            "manager",
            "--unit",
            "manager-1",
        ],
    );
    ask(&bus, &Start::default()).await.unwrap();

    // The night: nobody answers, nobody resumes. The test only kills.
    let mut kills: BTreeMap<&str, String> = BTreeMap::new();
    let mut marks: BTreeMap<&str, ReplayMark> = BTreeMap::new();
    let mut morning = None;
    let mut last = String::new();
    for _ in 0..3000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Ok(all) =
            typed::all_tasks(&bus, &Subjects::default(), None, Duration::from_secs(3)).await
        else {
            continue;
        };
        let by: BTreeMap<String, TaskRecord> = all
            .into_iter()
            .map(|r| (r.task.task_id.clone(), r))
            .collect();
        for (id, pid) in [("ck", "ck/.xo/checkpoint"), ("rb", "rb/rb-half.txt")] {
            let r = &by[id];
            // Kill its runner once the agent is mid-task (for ck: once the
            // heartbeats said checkpoint).
            if !kills.contains_key(id)
                && r.state == TaskState::Running
                && r.attempt == 1
                && let Some(l) = &r.lease
                // Mid-task work is in the task's own tree (worktree
                // isolation); once completed it reaches the project.
                && root
                    .join("sandbox/.xo-worktrees/night")
                    .join(id)
                    .join(pid)
                    .exists()
                && (id != "ck" || l.checkpoint)
            {
                night.procs.kill(&l.claimant);
                kills.insert(id, l.claimant.clone());
                night.runner(&l.claimant.clone());
            }
            if r.attempt == 2
                && let Some(m) = r.mark
            {
                marks.insert(id, m);
            }
        }
        let Some(s) = ask(&bus, &GetStatus {}).await else {
            continue;
        };
        assert_eq!(
            s.status,
            RunStatus::Running,
            "nothing halts the night: {:?}\n{}",
            s.halt_reason,
            night.logs()
        );
        let done = by
            .values()
            .filter(|r| r.task.role != MANAGER_ROLE && r.state == TaskState::Completed)
            .count();
        if done == 36 && s.stuck.is_some() && kills.len() == 2 {
            morning = Some((s, by));
            break;
        }
        last = format!(
            "{done} of 36 completed, kills {kills:?}, stuck {:?}; not completed: {}",
            s.stuck,
            by.values()
                .filter(|r| r.task.role != MANAGER_ROLE && r.state != TaskState::Completed)
                .map(|r| format!(
                    "{} {} (attempt {}): {}",
                    r.task.task_id,
                    r.state.as_str(),
                    r.attempt,
                    r.reason.as_deref().unwrap_or("")
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let (status, by) =
        morning.unwrap_or_else(|| panic!("the night did not settle: {last}\n{}", night.logs()));

    // Every other task completed; the four that need a human are as said.
    assert_eq!(by["never"].state, TaskState::Blocked);
    assert_eq!(by["never"].cause, Some(BlockCause::Validation));
    assert_eq!(by["asks"].state, TaskState::AwaitingResponse);
    assert_eq!(by["dep0"].state, TaskState::Cancelled);
    assert_eq!(by["needs-dep0"].state, TaskState::Pending);
    assert!(
        status
            .stuck
            .as_deref()
            .unwrap()
            .contains("needs-dep0 waits on dep0 (cancelled)"),
        "{:?}",
        status.stuck
    );
    // Both SIGKILLs: the checkpointed task resumed, the other rolled back
    // (the replays' marks, when a poll saw them running, and their work logs).
    let sandbox = root.join("sandbox/night");
    let data = root.join("data/night");
    let log =
        |id: &str| std::fs::read_to_string(data.join(format!("tasks/{id}.md"))).unwrap_or_default();
    assert!(
        log("ck").contains("Resume") && !log("ck").contains("Rollback"),
        "{}",
        log("ck")
    );
    assert!(log("rb").contains("Rollback"), "{}", log("rb"));
    for (id, want) in [
        ("ck", ReplayMark::Resume),
        ("rb", ReplayMark::RollbackReplay),
    ] {
        if let Some(m) = marks.get(id) {
            assert_eq!(*m, want, "{id}");
        }
    }
    assert_eq!((by["ck"].attempt, by["rb"].attempt), (2, 2));
    assert!(
        sandbox.join("ck/ck-half.txt").exists(),
        "a resume keeps the work"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.join("ck/ck-resumed-from.txt")).unwrap(),
        "step 1 of 2"
    );
    assert!(
        !sandbox.join("rb/rb-half.txt").exists(),
        "a rollback undoes it"
    );
    // The Manager reconciled after the completions and cancelled nothing.
    let managers = by
        .values()
        .filter(|r| r.task.role == MANAGER_ROLE && r.state == TaskState::Completed)
        .count();
    assert!(managers >= 30, "{managers} Manager runs");

    // The operator was told: the blocked task, the question, the stuck queue.
    let mut got = Vec::new();
    let _ = xo_tests::within(xo_tests::HANG_GUARD, async || {
        got = alerts.lock().unwrap().clone();
        let has = |k: AlertKind, t: Option<&str>| {
            got.iter()
                .any(|a| a.kind == k && (t.is_none() || a.task_id.as_deref() == t))
        };
        (has(AlertKind::TaskBlocked, Some("never"))
            && has(AlertKind::Question, Some("asks"))
            && has(AlertKind::QueueStuck, None))
        .then_some(())
    })
    .await;
    let kinds: Vec<(AlertKind, Option<String>)> =
        got.iter().map(|a| (a.kind, a.task_id.clone())).collect();
    assert!(
        kinds.contains(&(AlertKind::TaskBlocked, Some("never".into()))),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(AlertKind::Question, Some("asks".into()))),
        "{kinds:?}"
    );
    assert!(
        kinds.iter().any(|(k, _)| *k == AlertKind::QueueStuck),
        "{kinds:?}"
    );
    let q = got.iter().find(|a| a.kind == AlertKind::Question).unwrap();
    assert!(q.detail.contains("Postgres or SQLite"), "{}", q.detail);
    assert!(
        !kinds.iter().any(|(k, _)| *k == AlertKind::QueueHalted),
        "the queue never halted: {kinds:?}"
    );

    // The audit chain is intact.
    let check = ask(
        &bus,
        &AuditVerify {
            project: Some("night".into()),
        },
    )
    .await
    .unwrap();
    assert!(check.intact, "{check:?}");
    assert!(check.lines > 100, "{}", check.lines);
}
