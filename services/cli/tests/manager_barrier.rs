//! Seed 002's loop is task → Manager → the Manager's next task. Over a real
//! nats-server with the queue and two runners as their own `xo` processes
//! (a Manager on the openai driver against a local model, a coder on the
//! inline script driver): while the Manager reconciles, the coder asks for
//! work and gets only what the Manager was not shown; the task the
//! Manager drops never runs.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use xo_bus::{Bus, NatsBus, typed};
use xo_proto::Subjects;
use xo_proto::queue::*;
use xo_tests::NatsServer;
use xo_tests::procs::Procs;

const T: Duration = Duration::from_secs(3);

async fn call<R: xo_proto::Request>(bus: &Bus, r: &R) -> Option<R::Response>
where
    R::Response: serde::de::DeserializeOwned,
{
    typed::call(bus, &Subjects::default(), r, T).await.ok()
}

async fn state_of(bus: &Bus, id: &str) -> Option<TaskRecord> {
    let req = ListTasks {
        task_id: Some(id.into()),
        ..ListTasks::of(None)
    };
    call(bus, &req).await.and_then(|v| v.into_iter().next())
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
        for _ in 0..600 {
            if state_of(&bus, "d")
                .await
                .is_some_and(|r| r.state == TaskState::Completed)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    axum::Json(xo_tests::openai::manager_dropping(&body, &["t2"]))
}

fn task(id: &str) -> Task {
    let script = format!(
        "```xo-script\nturn_ms = 20\n[[run]]\nsteps = [{{ write = \"{id}.txt\", content = \"{id}\" }}, {{ reply = '{{\"status\": \"ok\", \"message\": \"done\"}}' }}]\n```\n"
    );
    let mut t = Task::new(id, format!("task {id}"), script, "coder");
    t.project = Some("m".into());
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_manager_drops_never_runs_while_a_coder_asks_for_work() {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let root: PathBuf = tmp.path().to_path_buf();
    let mut procs = Procs::new(root.clone());
    let bus = Bus::Nats(
        NatsBus::connect(&nats.url(), Default::default())
            .await
            .unwrap(),
    );
    let app = Router::new()
        .route("/v1/chat/completions", post(model))
        .with_state(bus.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });

    let spawn = |procs: &mut Procs, name: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_xo"));
        c.args(["--nats", &nats.url(), "--log-format", "json"])
            .args(args)
            .env("XO__STATE__DIR", root.join("state"))
            .env("XO__QUEUE__DATA_DIR", root.join("data"))
            .env("XO__RUNNER__SANDBOX", root.join("sandbox"))
            .env("XO__RUNNER__DEFAULT_PROJECT", "m")
            .env("XO__RUNNER__CLAIM_WAIT_MS", "300")
            .env("XO__RUNNER__MICROCOSM", "false")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied());
        procs.start(name, c);
    };
    spawn(&mut procs, "queue", &["serve", "queue"], &[]);
    let mut init = None;
    for _ in 0..400 {
        init = call(
            &bus,
            &Init {
                manager: true,
                force: true,
                ..Default::default()
            },
        )
        .await;
        if init.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        init.is_some(),
        "the queue never answered\n{}",
        procs.logs(20)
    );
    call(
        &bus,
        &SetGoal {
            description: "three steps".into(),
            project_id: Some("m".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    call(
        &bus,
        &Enqueue {
            tasks: vec![task("t1"), task("t2"), task("t3")],
        },
    )
    .await
    .unwrap();
    call(&bus, &Start {}).await.unwrap();
    // The test does t1; its completion makes the Manager task.
    let claim = Claim {
        role: "coder".into(),
        claimant: "test".into(),
        wait_ms: 0,
    };
    let c1 = call(&bus, &claim).await.unwrap().unwrap();
    assert_eq!(c1.record.task.task_id, "t1");
    call(
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
        },
    )
    .await
    .unwrap();

    spawn(
        &mut procs,
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
    let mut claimed = false;
    for _ in 0..600 {
        if state_of(&bus, "manager-t1")
            .await
            .is_some_and(|r| r.state == TaskState::Running)
        {
            claimed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(claimed, "the Manager never claimed\n{}", procs.logs(20));
    // New work the Manager was not shown, then a coder process.
    call(
        &bus,
        &Enqueue {
            tasks: vec![task("d")],
        },
    )
    .await
    .unwrap();
    spawn(
        &mut procs,
        "coder",
        &[
            "serve", "runner", "--script", "inline", "--role", "coder", "--unit", "coder-1",
        ],
        &[],
    );

    let mut done = None;
    for _ in 0..1200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(s) = call(&bus, &GetStatus {}).await
            && s.status == RunStatus::Completed
        {
            done = Some(s);
            break;
        }
    }
    assert!(
        done.is_some(),
        "the goal did not complete\n{}",
        procs.logs(30)
    );
    let t2 = state_of(&bus, "t2").await.unwrap();
    assert_eq!(t2.state, TaskState::Cancelled, "{t2:?}");
    assert_eq!(t2.attempt, 0, "the task the Manager dropped was claimed");
    assert!(!root.join("sandbox/m/t2.txt").exists(), "t2 ran");
    for id in ["t3", "d"] {
        let r = state_of(&bus, id).await.unwrap();
        assert_eq!(r.state, TaskState::Completed, "{id}: {r:?}");
    }
    let audit = std::fs::read_to_string(root.join("data/m/audit.log.jsonl")).unwrap();
    let rec = audit
        .lines()
        .find(|l| l.contains("MANAGER_RECONCILED") && l.contains("\"manager-t1\""))
        .unwrap_or_else(|| panic!("no reconciliation of manager-t1 in\n{audit}"));
    assert!(rec.contains(r#""cancelled":["t2"]"#), "{rec}");
}
