//! The one shape every service has (docs/architecture.md): the control API
//! served by `xo_bus::api` (unknown verbs and bad bodies answered, not
//! dropped), an actor under a one-for-one root that is restarted from its
//! durable state and escalates past its intensity, and the runner's claim
//! path answered in two requests (claim; lease renewal says "halted").
//! Against a real nats-server.

use std::time::Duration;

use bytes::Bytes;
use xo_bus::{Bus, Headers, typed};
use xo_proto::codec::{self, CONTENT_TYPE};
use xo_proto::control::{ErrorCode, Reply};
use xo_proto::knowledge::ListDocs;
use xo_proto::queue::*;
use xo_runtime::Clock;
use xo_tests::sandbox::Sandbox;

const T: Duration = Duration::from_secs(10);

async fn raw(bus: &Bus, subject: &str, body: &'static [u8]) -> Reply<serde_json::Value> {
    let mut h = Headers::new();
    h.insert(CONTENT_TYPE, codec::JSON);
    let m = bus
        .request(subject, h, Bytes::from_static(body), T)
        .await
        .unwrap();
    codec::decode_plain(&m.payload, m.headers.get(CONTENT_TYPE), 1 << 20).unwrap()
}

/// A sandbox on NATS, the services started by hand: what is tested is
/// each service's own handle (`until`, `stop`), not the fabric's.
struct Rig {
    sb: Sandbox,
    client: Bus,
}

impl Rig {
    async fn start(extra: &[(&str, &str)]) -> Self {
        let sb = Sandbox::nats()
            .clock(Clock::System)
            .with(extra)
            .build()
            .await;
        Self {
            client: sb.bus.clone(),
            sb,
        }
    }

    async fn queue(&self) -> xo_queue::QueueHandle {
        xo_queue::start(self.sb.ctx("xo-queue").await)
            .await
            .unwrap()
    }

    async fn call<R: xo_proto::Request>(&self, r: &R) -> Result<R::Response, typed::CallError> {
        self.sb.call(r).await
    }
}

#[tokio::test]
async fn the_serve_loop_answers_unknown_verbs_and_bad_bodies() {
    let rig = Rig::start(&[]).await;
    let q = rig.queue().await;
    let mut k = xo_knowledge::service::start(rig.sb.ctx("xo-knowledge").await)
        .await
        .unwrap();
    // A verb nobody declared has no endpoint: the caller is told at once.
    let e = rig
        .client
        .request("xo.ctl.queue.frobnicate", Headers::new(), Bytes::new(), T)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, xo_bus::BusError::NoResponders { subject } if subject == "xo.ctl.queue.frobnicate"),
        "{e}"
    );
    // A body that does not decode: invalid, naming the service and verb.
    let Reply::Err(e) = raw(&rig.client, "xo.ctl.queue.claim", b"{\"role\": 7}").await else {
        panic!("a bad body is an error");
    };
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(e.message.starts_with("queue.claim:"), "{e}");
    // The same loop serves every service: knowledge answers the same way.
    let Reply::Err(e) = raw(&rig.client, "xo.ctl.knowledge.get", b"[]").await else {
        panic!("a bad body is an error");
    };
    assert!(e.message.starts_with("knowledge.get:"), "{e}");
    assert!(rig.call(&ListDocs::default()).await.is_ok());
    // Each is a NATS micro service of its own name.
    for name in ["xo-queue", "xo-knowledge"] {
        let ping = rig
            .client
            .request(
                &format!("$SRV.PING.{name}"),
                Headers::new(),
                Bytes::new(),
                T,
            )
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&ping.payload).unwrap();
        assert_eq!(v["name"], name);
    }
    k.until(async {}).await;
    k.stop().await.unwrap();
    q.stop().await.unwrap();
    // Stopped services no longer answer.
    assert!(rig.call(&GetStatus {}).await.is_err());
}

/// Kills the queue actor under its root: the root restarts it from the
/// store, and what was acknowledged is all there.
#[tokio::test]
async fn a_killed_queue_actor_is_restarted_from_the_store() {
    let rig = Rig::start(&[]).await;
    let q = rig.queue().await;
    rig.call(&Init::default()).await.unwrap();
    let tasks = (1..=5)
        .map(|i| Task::new(format!("t{i}"), "x", "x", "coder"))
        .collect();
    assert_eq!(rig.call(&Enqueue::new(tasks)).await.unwrap().len(), 5);
    rig.call(&Start::default()).await.unwrap();
    let c = rig
        .call(&Claim {
            role: "coder".into(),
            claimant: "r1".into(),
            wait_ms: 0,
        })
        .await
        .unwrap()
        .unwrap();
    let children = q.actor.get_children();
    assert_eq!(children.len(), 1, "the root keeps one queue actor");
    let before = children[0].get_id();
    children[0].kill();
    // The root restarts it; the queue answers again with the same state.
    let s = xo_tests::until("the queue answers after its actor was killed", async || {
        rig.call(&GetStatus {}).await.ok()
    })
    .await;
    assert_eq!(s.counts.get("pending"), Some(&4));
    assert_eq!(s.counts.get("running"), Some(&1));
    let after = q.actor.get_children();
    assert_eq!(after.len(), 1);
    assert_ne!(after[0].get_id(), before, "a new actor, not the old one");
    // The lease taken before the restart is still honoured.
    let done = rig
        .call(&Complete {
            usage: Default::default(),
            task_id: c.record.task.task_id.clone(),
            token: c.token,
            claimant: String::new(),
            report: ValidationReport {
                passed: true,
                ..Default::default()
            },
            manager_reply: None,
            exchange: None,
            diff: None,
        })
        .await
        .unwrap();
    assert_eq!(done.state, TaskState::Completed);
    q.stop().await.unwrap();
}

/// Past its restart intensity the queue's tree gives up: `until` returns
/// and `stop` says why, so the process exits non-zero.
#[tokio::test]
async fn a_queue_actor_failing_past_its_intensity_escalates() {
    let rig = Rig::start(&[
        ("supervisor.max_restarts", "2"),
        ("supervisor.restart_window_ms", "60000"),
    ])
    .await;
    let mut q = rig.queue().await;
    let root = q.actor.clone();
    let killer = tokio::spawn(async move {
        for _ in 0..50 {
            if let Some(c) = root.get_children().first() {
                c.kill();
            }
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
    });
    // Resolves only because the tree ended on its own.
    q.until(std::future::pending()).await;
    killer.abort();
    let e = q.stop().await.unwrap_err().to_string();
    assert!(e.contains("escalated"), "{e}");
}

/// The runner's claim path: the claim carries goal, mode and active
/// directives; a lease renewal says whether the queue is halted.
#[tokio::test]
async fn a_claim_carries_what_the_prompt_needs_and_renewal_says_halted() {
    let rig = Rig::start(&[]).await;
    let q = rig.queue().await;
    rig.call(&Init {
        mode: ExecutionMode::Auto,
        ..Default::default()
    })
    .await
    .unwrap();
    rig.call(&SetGoal {
        by: Default::default(),
        budget_usd: 0.0,
        description: "ship the parser".into(),
        project_id: None,
        completed: false,
    })
    .await
    .unwrap();
    let mut dir = Task::new("d1", "fix the error type", "x", "reviewer");
    dir.directive = Some("dir-1".into());
    dir.lane = Lane::Cleanup;
    let mut hot = Task::new("d2", "stop leaking tokens", "x", "reviewer");
    hot.directive = Some("dir-2".into());
    hot.lane = Lane::Critical;
    let work = Task::new("w1", "write the parser", "x", "coder");
    rig.call(&Enqueue::new(vec![dir, hot, work])).await.unwrap();
    rig.call(&Start::default()).await.unwrap();
    let c = rig
        .call(&Claim {
            role: "coder".into(),
            claimant: "r1".into(),
            wait_ms: 0,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.goal.description, "ship the parser");
    assert_eq!(c.mode, ExecutionMode::Auto);
    assert_eq!(
        c.directives,
        [
            "[critical] stop leaking tokens",
            "[cleanup] fix the error type"
        ],
        "most urgent first"
    );
    // A directive worked off leaves the list the next claim carries.
    let d = rig
        .call(&Claim {
            role: "reviewer".into(),
            claimant: "r2".into(),
            wait_ms: 0,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.record.task.task_id, "d2", "the critical directive first");
    rig.call(&Complete {
        usage: Default::default(),
        task_id: "d2".into(),
        token: d.token,
        claimant: String::new(),
        report: ValidationReport {
            passed: true,
            ..Default::default()
        },
        manager_reply: None,
        exchange: None,
        diff: None,
    })
    .await
    .unwrap();
    rig.call(&Enqueue::new(vec![Task::new(
        "w2",
        "write the lexer",
        "x",
        "coder",
    )]))
    .await
    .unwrap();
    let c2 = rig
        .call(&Claim {
            role: "coder".into(),
            claimant: "r3".into(),
            wait_ms: 0,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c2.directives, ["[cleanup] fix the error type"]);
    let hb = Heartbeat {
        usage: Default::default(),
        task_id: "w1".into(),
        token: c.token.clone(),
        claimant: String::new(),
        checkpoint: false,
    };
    let r = rig.call(&hb).await.unwrap();
    assert_eq!((r.status, r.halt_reason), (RunStatus::Running, None));
    assert_eq!(r.record.state, TaskState::Running);
    rig.call(&Halt {
        by: Default::default(),
        reason: "lunch".into(),
    })
    .await
    .unwrap();
    let r = rig.call(&hb).await.unwrap();
    assert_eq!(r.status, RunStatus::Halted);
    assert_eq!(r.halt_reason.as_deref(), Some("lunch"));
    q.stop().await.unwrap();
}
