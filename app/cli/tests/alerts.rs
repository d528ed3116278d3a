//! Operators are told: a blocked task, a question nobody answered and a
//! stuck queue, raised by a real queue on a real nats-server, reach the
//! webhooks of `[alerts]` through the notifier — as JSON and as a Slack
//! body, retried through a receiver's 503s, and dead-lettered (file and
//! `xo.dlq.*`) when a receiver refuses or is not there.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use xo_bus::typed;
use xo_fabric::Slot;
use xo_proto::alert::{Alert, AlertKind};
use xo_proto::queue::*;
use xo_runtime::config::{Webhook, WebhookFormat};
use xo_tests::eventually;
use xo_tests::sandbox::Sandbox;

const T: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Received {
    /// (path, body) in arrival order.
    posts: Vec<(String, serde_json::Value)>,
    flaky_failures: u32,
}

type Shared = Arc<Mutex<Received>>;

async fn hook(
    State(r): State<Shared>,
    Path(path): Path<String>,
    body: axum::Json<serde_json::Value>,
) -> StatusCode {
    let mut r = r.lock().unwrap();
    r.posts.push((path.clone(), body.0));
    match path.as_str() {
        // Fails twice, then takes everything.
        "flaky" if r.flaky_failures < 2 => {
            r.flaky_failures += 1;
            StatusCode::SERVICE_UNAVAILABLE
        }
        "refuse" => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

async fn receiver() -> (String, Shared) {
    let shared: Shared = Default::default();
    let app = Router::new()
        .route("/{path}", post(hook))
        .with_state(shared.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (base, shared)
}

fn task(id: &str, deps: &[&str]) -> Task {
    Task {
        depends_on: deps.iter().map(|s| s.to_string()).collect(),
        ..Task::new(id, format!("do {id}"), "do it", "coder")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_questions_and_stuck_reach_the_webhooks_and_nothing_is_lost() {
    let (base, got) = receiver().await;
    // A port nobody listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/gone", l.local_addr().unwrap())
    };
    let hook = move |path: &str, format, kinds: Vec<AlertKind>| Webhook {
        url: format!("{base}/{path}"),
        format,
        kinds,
        authorization: String::new(),
    };
    let webhooks = vec![
        hook("flaky", WebhookFormat::Json, vec![]),
        hook("slack", WebhookFormat::Slack, vec![AlertKind::Question]),
        hook("refuse", WebhookFormat::Json, vec![AlertKind::TaskBlocked]),
        Webhook {
            url: dead.clone(),
            kinds: vec![AlertKind::QueueStuck],
            ..Default::default()
        },
    ];
    let mut sb = Sandbox::nats()
        .clock(xo_runtime::Clock::System)
        .with(&[
            ("alerts.backoff_ms", "20"),
            ("alerts.attempts", "3"),
            ("alerts.timeout_ms", "2000"),
        ])
        .edit(|c| c.alerts.webhooks = webhooks)
        .build()
        .await;
    sb.start(&[Slot::Notify, Slot::Queue]).await;
    let (client, cfg) = (sb.bus.clone(), sb.cfg.clone());
    let data = cfg.data_dir();
    let s = cfg.subjects();
    let mut dlq = client.subscribe(&s.dlq(&s.alert_all())).await.unwrap();
    let mut stuck_events = client.subscribe(&s.queue_stuck()).await.unwrap();
    typed::call(&client, &s, &Init::default(), T).await.unwrap();
    typed::call(
        &client,
        &s,
        &SetGoal {
            description: "night".into(),
            project_id: Some("night".into()),
            ..Default::default()
        },
        T,
    )
    .await
    .unwrap();
    typed::call(
        &client,
        &s,
        &Enqueue::new(vec![task("a", &[]), task("b", &[]), task("c", &["a"])]),
        T,
    )
    .await
    .unwrap();
    typed::call(&client, &s, &Start::default(), T)
        .await
        .unwrap();
    let claim = || Claim {
        role: "coder".into(),
        claimant: "r1".into(),
        wait_ms: 0,
    };
    // a: out of validation retries (the queue goes on); b: asks a question.
    let a = typed::call(&client, &s, &claim(), T)
        .await
        .unwrap()
        .unwrap();
    typed::call(
        &client,
        &s,
        &Block {
            task_id: "a".into(),
            token: a.token,
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
    let b = typed::call(&client, &s, &claim(), T)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        b.record.task.task_id, "b",
        "the queue went on after a blocked task"
    );
    typed::call(
        &client,
        &s,
        &Block {
            task_id: "b".into(),
            token: b.token,
            claimant: String::new(),
            reason: ASKED_QUESTION.into(),
            question: Some("Which database: Postgres or SQLite?".into()),
            cause: None,
            usage: Default::default(),
            report: None,
            exchange: None,
        },
        T,
    )
    .await
    .unwrap();
    // c waits on a (blocked), b on its answer, nothing runs: stuck.
    let status = xo_tests::until("the queue reports itself stuck", async || {
        Some(typed::call(&client, &s, &GetStatus {}, T).await.unwrap())
            .filter(|st| st.stuck.is_some())
    })
    .await;
    assert_eq!(
        status.status,
        RunStatus::Running,
        "stuck is reported, not a halt"
    );
    assert!(
        status
            .stuck
            .as_deref()
            .unwrap()
            .contains("c waits on a (blocked)"),
        "{:?}",
        status.stuck
    );

    // The JSON webhook got all three (after two 503s), in order, as alerts.
    eventually("three alerts on the flaky hook", || {
        got.lock()
            .unwrap()
            .posts
            .iter()
            .filter(|(p, b)| p == "flaky" && b.get("kind").is_some())
            .count()
            >= 5
    })
    .await;
    let posts = got.lock().unwrap().posts.clone();
    let flaky: Vec<Alert> = posts
        .iter()
        .filter(|(p, _)| p == "flaky")
        .map(|(_, b)| serde_json::from_value(b.clone()).unwrap())
        .collect();
    // Two failed posts of the first alert, then one of each.
    assert_eq!(flaky.len(), 5, "{flaky:?}");
    let kinds: Vec<AlertKind> = flaky[2..].iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AlertKind::TaskBlocked,
            AlertKind::Question,
            AlertKind::QueueStuck
        ]
    );
    assert_eq!(flaky[0], flaky[2], "the same alert retried");
    assert_eq!(flaky[2].task_id.as_deref(), Some("a"));
    assert!(
        flaky[2].detail.contains("goes on with the next task"),
        "{}",
        flaky[2].detail
    );
    assert_eq!(flaky[2].project.as_deref(), Some("night"));
    // The Slack hook got only the question, as text.
    let slack: Vec<&serde_json::Value> = posts
        .iter()
        .filter(|(p, _)| p == "slack")
        .map(|(_, b)| b)
        .collect();
    assert_eq!(slack.len(), 1);
    let text = slack[0]["text"].as_str().unwrap();
    assert!(
        text.contains("task b asks a question") && text.contains("Postgres or SQLite"),
        "{text}"
    );
    assert!(text.contains("xo answer b"), "{text}");
    // The refusing hook was tried once (a 400 is not retried).
    assert_eq!(posts.iter().filter(|(p, _)| p == "refuse").count(), 1);

    // Refused and unreachable deliveries are dead-lettered: file and subject.
    let file = data.join("alerts.dead.jsonl");
    let lines = xo_tests::until("two deliveries dead-lettered", async || {
        Some(
            std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str::<xo_notify::DeadLetter>(l).unwrap())
                .collect::<Vec<_>>(),
        )
        .filter(|lines| lines.len() >= 2)
    })
    .await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    let refused = lines.iter().find(|l| l.url.ends_with("/refuse")).unwrap();
    assert_eq!(
        (refused.attempts, refused.error.as_str()),
        (1, "HTTP 400 Bad Request")
    );
    assert_eq!(refused.alert.kind, AlertKind::TaskBlocked);
    let gone = lines.iter().find(|l| l.url == dead).unwrap();
    assert_eq!((gone.attempts, gone.alert.kind), (3, AlertKind::QueueStuck));
    let mut on_dlq = Vec::new();
    while on_dlq.len() < 2 {
        let m = tokio::time::timeout(T, dlq.next()).await.unwrap().unwrap();
        on_dlq.push(typed::decode::<Alert>(&m, 1 << 20).unwrap().kind);
    }
    on_dlq.sort();
    assert_eq!(on_dlq, vec![AlertKind::TaskBlocked, AlertKind::QueueStuck]);

    // The stuck state went out on xo.event.queue.stuck, and is in the audit.
    let m = tokio::time::timeout(T, stuck_events.next())
        .await
        .unwrap()
        .unwrap();
    let st = typed::decode::<QueueStatus>(&m, 1 << 20).unwrap();
    assert!(
        st.stuck
            .as_deref()
            .unwrap()
            .contains("c waits on a (blocked)")
    );
    let audit = std::fs::read_to_string(data.join("night/audit.log.jsonl")).unwrap();
    assert!(audit.contains("\"QUEUE_STUCK\""));
    sb.stop_all().await.unwrap();
}

/// What an ntfy server would read of one publish: the headers its publish
/// API documents (docs.ntfy.sh/publish) and the body.
#[derive(Debug, Clone)]
struct Push {
    topic: String,
    title: String,
    priority: String,
    tags: String,
    click: String,
    content_type: String,
    body: String,
}

type Pushes = Arc<Mutex<Vec<Push>>>;

async fn ntfy_topic(
    State(p): State<Pushes>,
    Path(topic): Path<String>,
    headers: axum::http::HeaderMap,
    body: String,
) -> StatusCode {
    let h = |n: &str| {
        headers
            .get(n)
            .map(|v| v.to_str().unwrap_or("<not ascii>").to_string())
            .unwrap_or_default()
    };
    p.lock().unwrap().push(Push {
        topic,
        title: h("title"),
        priority: h("priority"),
        tags: h("tags"),
        click: h("click"),
        content_type: h("content-type"),
        body,
    });
    StatusCode::OK
}

/// A local HTTP server that reads publishes as ntfy does: its base URL
/// (a topic is a path under it) and what it received.
async fn ntfy_server() -> (String, Pushes) {
    let pushes: Pushes = Default::default();
    let app = Router::new()
        .route("/{topic}", post(ntfy_topic))
        .with_state(pushes.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (base, pushes)
}

/// Issue 37, items 2 to 4: a unit stuck on one stretch is steered three
/// times (its rule, a second notice, a last one), then it needs you: `xo
/// units` shows it with its reason and evidence, and the phone gets one
/// ntfy push with ntfy's documented headers and a link to the unit's page.
/// The same unit, having moved and stuck again, pages again: one push a
/// stretch, not one a report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_unit_needs_you_and_is_pushed_to_ntfy_once_a_stretch() {
    let (base, pushes) = ntfy_server().await;
    let mut sb = common::Sandbox::on(Sandbox::nats().edit(move |cfg| {
        cfg.alerts.console_url = "http://xo.example:8080/".into();
        cfg.alerts.webhooks = vec![
            Webhook {
                url: format!("{base}/xo-phone"),
                format: WebhookFormat::Ntfy,
                kinds: vec![AlertKind::UnitNeedsYou],
                authorization: String::new(),
            },
            // A webhook that does not want the kind gets nothing.
            Webhook {
                url: format!("{base}/other"),
                format: WebhookFormat::Ntfy,
                kinds: vec![AlertKind::QueueStuck],
                authorization: String::new(),
            },
        ];
    }))
    .await;
    sb.h.start(&[Slot::Notify]).await;
    // The notifier's subscription is in place before the first alert.
    sb.client.flush().await.unwrap();
    let mut steer = sb.steering("coder-1").await;
    let stuck = |turn: u64, since: u64| {
        let mut r = common::report("coder-1", turn);
        r.activity.turns_since_progress = since as u32;
        r.activity.task_id = Some("T-7".into());
        r
    };
    let mut steered = Vec::new();
    for turn in 1..=40u64 {
        steered.extend(sb.exchange(&mut steer, &stuck(turn, turn - 1)).await);
    }
    assert_eq!(steered.len(), 3, "{steered:#?}");
    assert!(
        steered[2].message.contains("asked a person"),
        "{}",
        steered[2].message
    );
    let d = sb.show("coder-1").await.unwrap();
    let needs = d.summary.needs.clone().expect("the unit needs you");
    assert_eq!(needs.reason, xo_proto::NeedsReason::Stuck);
    assert_eq!(needs.stretch_from, 1);
    assert!(needs.detail.contains("third notice"), "{}", needs.detail);
    let all = typed::all_units(&sb.client, &sb.subjects, T).await.unwrap();
    assert_eq!(all.iter().filter(|u| u.needs.is_some()).count(), 1);
    eventually("the push reaches ntfy", || {
        pushes.lock().unwrap().len() == 1
    })
    .await;
    {
        let p = pushes.lock().unwrap()[0].clone();
        assert_eq!(p.topic, "xo-phone");
        assert!(
            p.title
                .starts_with("XO: coder-1 needs you: stuck (stall) on task T-7"),
            "{p:?}"
        );
        assert_eq!(p.priority, "4", "a person waits: high");
        assert!(p.tags.split(',').any(|t| t == "unit_needs_you"), "{p:?}");
        assert_eq!(p.click, "http://xo.example:8080/units/coder-1");
        assert!(p.content_type.starts_with("text/plain"), "{p:?}");
        assert!(
            p.body.contains("Turns 1-") && p.body.contains("xo steer coder-1"),
            "{}",
            p.body
        );
    }
    // It moves: no longer needs you. Then it sticks again.
    sb.exchange(&mut steer, &stuck(41, 0)).await;
    assert!(sb.show("coder-1").await.unwrap().summary.needs.is_none());
    for turn in 42..=80u64 {
        sb.exchange(&mut steer, &stuck(turn, turn - 41)).await;
    }
    eventually("the second stretch pages again", || {
        pushes.lock().unwrap().len() >= 2
    })
    .await;
    let p = pushes.lock().unwrap().clone();
    assert_eq!(p.len(), 2, "one push a stretch: {p:#?}");
    assert!(p.iter().all(|p| p.topic == "xo-phone"));
    sb.h.stop_all().await.unwrap();
}

/// Issue 37, item 4: many units needing a person at once page once (the
/// count and the units in the title), and an alert of another kind that
/// comes meanwhile is not lost or merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_that_need_you_at_once_are_one_push() {
    let (base, pushes) = ntfy_server().await;
    let mut sb = Sandbox::nats()
        .clock(xo_runtime::Clock::System)
        .set("alerts.group_ms", "1500")
        .edit(move |c| {
            c.alerts.webhooks = vec![Webhook {
                url: format!("{base}/fleet"),
                format: WebhookFormat::Ntfy,
                kinds: vec![],
                authorization: String::new(),
            }]
        })
        .build()
        .await;
    sb.start(&[Slot::Notify]).await;
    let (client, cfg) = (sb.bus.clone(), sb.cfg.clone());
    client.flush().await.unwrap();
    let s = cfg.subjects();
    let needs = |unit: &str| Alert {
        v: xo_proto::PROTOCOL_VERSION,
        kind: AlertKind::UnitNeedsYou,
        title: format!("{unit} needs you: stuck (loop)"),
        detail: "Turns 3-12 without progress.".into(),
        task_id: None,
        project: None,
        unit: Some(unit.into()),
        source: "supervisor".into(),
        at: 1,
    };
    let send = |a: Alert| {
        let client = client.clone();
        let subject = s.alert(a.kind);
        async move {
            typed::publish(&client, &subject, &a, xo_proto::Format::Json)
                .await
                .unwrap()
        }
    };
    for u in ["c1", "c2", "c3", "c4", "c5", "c6"] {
        send(needs(u)).await;
    }
    send(Alert {
        kind: AlertKind::QueueHalted,
        title: "queue halted".into(),
        unit: None,
        ..needs("x")
    })
    .await;
    client.flush().await.unwrap();
    eventually("two pushes", || pushes.lock().unwrap().len() >= 2).await;
    let p = pushes.lock().unwrap().clone();
    assert!(
        p[0].title
            .starts_with("XO: 6 units need you: c1, c2, c3, c4, c5 (+1 more)"),
        "{p:#?}"
    );
    assert!(p[0].body.contains("c6 needs you"), "{}", p[0].body);
    assert_eq!(p[1].title, "XO: queue halted");
    sb.stop_all().await.unwrap();
}
