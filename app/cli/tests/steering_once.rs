//! With the shipped configuration (deploy/config/xo.toml: the runner's own
//! radio check on), a looping agent supervised by the XO gets one steering
//! per anomaly: the runner's own check steers it on the turn it sees the
//! loop and says so in its next report; the XO, told, steers none of it
//! again. A runner restarted under the same unit id (its `seq` starting
//! over) is still supervised: the XO tells the restart from a duplicate.

use std::path::Path;
use std::time::Duration;

use xo_bus::{Bus, typed};
use xo_fabric::{Plan, Slot};
use xo_proto::queue::*;
use xo_proto::{AnomalyKind, Steering, SteeringSource};
use xo_runner::RunnerOptions;
use xo_runtime::XoConfig;
use xo_tests::sandbox::{Sandbox, Started};

const T: Duration = Duration::from_secs(10);

/// The shipped configuration on the embedded bus, real time.
async fn shipped() -> Sandbox {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/xo.toml");
    let sb = Sandbox::embedded()
        .file(&file)
        .clock(xo_runtime::Clock::System)
        .with(&[
            // Long enough that a claim left waiting would still be there.
            ("runner.claim_wait_ms", "60000"),
            // Every steering of both tasks stays in the unit's history.
            ("supervisor.steering_history", "100"),
        ])
        .build()
        .await;
    assert!(
        sb.cfg.runner.microcosm,
        "the shipped config runs the runner's own check"
    );
    sb
}

fn looping(id: &str) -> Task {
    Task::new(
        id,
        "build it",
        "```xo-script\nturn_ms = 20\n[[run]]\nsteps = [{ repeat = 60, tool = \"build\", args = \"x\", fail = \"compile_error\" }, { reply = '{\"status\": \"ok\", \"message\": \"done\"}' }]\n```",
        "coder",
    )
}

async fn start_runner(sb: &mut Sandbox) -> Started {
    sb.start_plan(Plan {
        runners: vec![RunnerOptions {
            role: "coder".into(),
            unit: "u1".into(),
        }],
        ..Plan::default()
    })
    .await
}

async fn wait_completed(bus: &Bus, cfg: &XoConfig, id: &str) {
    let client = xo_bus::Client::new(bus.clone(), cfg.subjects()).with_timeout(T);
    xo_tests::ctl::task_reaches(&client, id, "completed", |r| {
        r.state == TaskState::Completed
    })
    .await;
}

/// Loop steering the agent read in task `id` (the script driver echoes
/// each steering it receives into its output, kept in the prompt log).
fn received(cfg: &XoConfig, id: &str) -> usize {
    let log = std::fs::read_to_string(cfg.data_dir().join("default/prompts.log.jsonl")).unwrap();
    log.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "RESPONSE" && v["task_id"] == id)
        .map(|v| {
            v["content"]
                .as_str()
                .unwrap()
                .matches("[steering received] [SUPERVISOR] Loop")
                .count()
        })
        .sum()
}

/// The XO's loop steering published for the unit.
async fn drain_loops(sub: &mut xo_bus::Subscription) -> usize {
    let mut n = 0;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), sub.next()).await {
        let s = typed::decode::<Steering>(&m, 1 << 20).unwrap();
        assert_eq!(s.source, SteeringSource::Xo);
        if s.kind == AnomalyKind::Loop {
            n += 1;
        }
    }
    n
}

/// The loop steering the unit's reports said its own check gave it (the
/// XO keeps them in the unit's history), and the turns it gave them at.
async fn self_steered_loops(bus: &Bus, cfg: &XoConfig) -> Vec<u64> {
    let u = typed::call(
        bus,
        &cfg.subjects(),
        &xo_proto::control::ShowUnit { unit: "u1".into() },
        T,
    )
    .await
    .unwrap();
    u.recent_steering
        .iter()
        .filter(|s| s.source == SteeringSource::SelfCheck && s.kind == AnomalyKind::Loop)
        .map(|s| s.turn)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_steering_per_anomaly_and_a_restarted_runner_stays_supervised() {
    let mut sb = shipped().await;
    sb.start(&[Slot::Queue, Slot::Supervisor]).await;
    let (bus, cfg) = (sb.bus.clone(), sb.cfg.clone());
    let mut steer = bus.subscribe(&cfg.subjects().steer("u1")).await.unwrap();
    let s = cfg.subjects();
    typed::call(&bus, &s, &Init::default(), T).await.unwrap();
    typed::call(
        &bus,
        &s,
        &SetGoal {
            description: "g".into(),
            completed: true,
            ..Default::default()
        },
        T,
    )
    .await
    .unwrap();
    typed::call(&bus, &s, &Enqueue::new(vec![looping("l1")]), T)
        .await
        .unwrap();
    typed::call(&bus, &s, &Start::default(), T).await.unwrap();

    let r1 = start_runner(&mut sb).await;
    wait_completed(&bus, &cfg, "l1").await;
    let sent = drain_loops(&mut steer).await;
    let got = received(&cfg, "l1");
    let own = self_steered_loops(&bus, &cfg).await;
    assert!(got >= 1, "the agent was steered out of its loop");
    assert_eq!(
        own.len(),
        got,
        "every loop steering the agent read was its runner's own, reported to the XO: {own:?}"
    );
    assert_eq!(sent, 0, "the XO steered no loop its runner had steered");

    // The same unit again, in a new process life: seq starts over at 1.
    sb.stop(r1).await.unwrap();
    // r1 withdrew the claim it left waiting (long-poll, claim_wait_ms) as
    // it stopped, so the next task goes to the new runner, not to a reply
    // nobody reads.
    let waiting = typed::call(&bus, &s, &GetStatus::default(), T)
        .await
        .unwrap();
    assert!(
        waiting.waiting_claims.is_empty(),
        "{:?}",
        waiting.waiting_claims
    );
    start_runner(&mut sb).await;
    typed::call(&bus, &s, &Enqueue::new(vec![looping("l2")]), T)
        .await
        .unwrap();
    typed::call(&bus, &s, &Resume::default(), T).await.unwrap();
    wait_completed(&bus, &cfg, "l2").await;
    let sent2 = drain_loops(&mut steer).await;
    let got2 = received(&cfg, "l2");
    assert!(got2 >= 1, "the restarted runner's agent is steered too");
    assert_eq!(sent2, 0, "and the XO, told, does not steer it again");
    assert_eq!(self_steered_loops(&bus, &cfg).await.len(), got + got2);
    let u = typed::call(
        &bus,
        &s,
        &xo_proto::control::ShowUnit { unit: "u1".into() },
        T,
    )
    .await
    .unwrap();
    assert_eq!(
        u.summary.task_id.as_deref(),
        Some("l2"),
        "xo units follows the new life"
    );

    sb.stop_all().await.unwrap();
}
