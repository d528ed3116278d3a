//! The Manager sees what it reconciles: a real runner of role `manager`
//! with the openai driver, against a local OpenAI-compatible model that
//! builds its reply from the task list in the prompt it is sent. The
//! prompt carries the goal and every task (ids, states, attempts, the
//! blocked task's reason); a reply built from it keeps every task.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use xo_bus::typed;
use xo_fabric::{Plan, Slot};
use xo_proto::queue::*;
use xo_runner::RunnerOptions;
use xo_runtime::Clock;
use xo_tests::sandbox::Sandbox;

const T: Duration = Duration::from_secs(10);

type Prompts = Arc<Mutex<Vec<String>>>;

/// The "model": keeps every pending task its prompt lists.
async fn model(
    State(p): State<Prompts>,
    body: axum::Json<serde_json::Value>,
) -> axum::Json<serde_json::Value> {
    let prompt = body["messages"][1]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    p.lock().unwrap().push(prompt);
    axum::Json(xo_tests::openai::manager_keeping_pending(&body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_reply_built_from_its_prompt_keeps_every_task() {
    let prompts: Prompts = Default::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(model))
        .with_state(prompts.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });

    let mut sb = Sandbox::embedded()
        .clock(Clock::System)
        .with(&[
            ("runner.claim_wait_ms", "200"),
            ("runner.driver.kind", "openai"),
            ("runner.driver.openai.base_url", &base),
            ("runner.driver.openai.model", "manager-model"),
            ("runner.driver.openai.max_attempts", "1"),
        ])
        .build()
        .await;
    sb.start(&[Slot::Queue]).await;
    let (cfg, bus) = (sb.cfg.clone(), sb.bus.clone());
    let s = cfg.subjects();
    typed::call(
        &bus,
        &s,
        &Init {
            manager: true,
            ..Default::default()
        },
        T,
    )
    .await
    .unwrap();
    typed::call(
        &bus,
        &s,
        &SetGoal {
            description: "a markdown parser with tables".into(),
            ..Default::default()
        },
        T,
    )
    .await
    .unwrap();
    let mut tasks: Vec<Task> = (1..=5)
        .map(|i| {
            Task::new(
                format!("t{i}"),
                format!("step {i} of the parser"),
                "x",
                "coder",
            )
        })
        .collect();
    tasks[3].depends_on = vec!["t3".into()];
    typed::call(&bus, &s, &Enqueue::new(tasks), T)
        .await
        .unwrap();
    typed::call(&bus, &s, &Start::default(), T).await.unwrap();
    let claim = Claim {
        role: "coder".into(),
        claimant: "test".into(),
        wait_ms: 0,
    };
    // The test plays the coder: t2 blocked out of retries, t1 completed.
    let c1 = typed::call(&bus, &s, &claim, T).await.unwrap().unwrap();
    let c2 = typed::call(&bus, &s, &claim, T).await.unwrap().unwrap();
    assert_eq!(c2.record.task.task_id, "t2");
    typed::call(
        &bus,
        &s,
        &Block {
            task_id: "t2".into(),
            token: c2.token,
            claimant: String::new(),
            reason: "validation failed after 3 retries: tests fail".into(),
            question: None,
            cause: None,
            usage: Default::default(),
            report: None,
            exchange: None,
        },
        T,
    )
    .await
    .unwrap();
    typed::call(
        &bus,
        &s,
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
        T,
    )
    .await
    .unwrap();

    // A real runner of role manager reconciles with the model.
    sb.start_plan(Plan {
        runners: vec![RunnerOptions {
            role: MANAGER_ROLE.into(),
            unit: "manager-1".into(),
        }],
        ..Plan::default()
    })
    .await;
    let done =
        xo_tests::ctl::task_reaches(&sb.client(), "manager-t1", "ended", |r| r.state.is_final())
            .await;
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.reason);

    let prompt = prompts.lock().unwrap()[0].clone();
    assert!(prompt.contains("a markdown parser with tables"), "the goal");
    assert!(prompt.contains("## TASK LIST"));
    for line in [
        "- t2 | blocked | coder | planned | 1/0 | step 2 of the parser | - | validation failed after 3 retries: tests fail",
        "- t3 | pending",
        "- t4 | pending | coder | planned | 0/0 | step 4 of the parser | t3 | -",
        "- t5 | pending",
        "completed: 1 (latest: t1)",
    ] {
        assert!(prompt.contains(line), "{line:?} missing from:\n{prompt}");
    }
    assert!(
        prompt.contains("\"keep\""),
        "the reply format asks for keep"
    );

    // Every task is still there as it was: nothing cancelled.
    let all = typed::all_tasks(&bus, &s, None, T).await.unwrap();
    let state = |id: &str| all.iter().find(|r| r.task.task_id == id).unwrap().state;
    assert_eq!(state("t2"), TaskState::Blocked);
    for id in ["t3", "t4", "t5"] {
        assert_eq!(state(id), TaskState::Pending, "{id}");
    }
    assert!(all.iter().all(|r| r.state != TaskState::Cancelled));
    let audit = std::fs::read_to_string(cfg.data_dir().join("default/audit.log.jsonl")).unwrap();
    let rec = audit
        .lines()
        .find(|l| l.contains("MANAGER_RECONCILED"))
        .unwrap();
    assert!(rec.contains("\"cancelled\":[]"), "{rec}");

    sb.stop_all().await.unwrap();
}
