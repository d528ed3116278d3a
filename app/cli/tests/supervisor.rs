//! The XO radio check end to end over a real nats-server: the eight testing
//! criteria of seed 000, liveness, restarts, bad input, file mode, control API.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use xo_bus::{Headers, typed};
use xo_proto::control::{ListUnits, SteerUnit};
use xo_proto::{Action, AnomalyKind, Format, Health, Heartbeat, Outcome, Pace, Severity};
use xo_radio::{Microcosm, RoleProfile};

/// Replaces `<volume>/reports/<unit>_latest.json` whole, as a writer on
/// the volume must (a temporary file, then a rename).
/// A supervisor reading report files from a fresh volume (polled every
/// 20 ms), its `reports` folder made.
async fn file_mode() -> (tempfile::TempDir, Sandbox) {
    let vol = tempfile::tempdir().unwrap();
    let v = vol.path().display().to_string();
    let sb = Sandbox::start(&[("supervisor.volume", &v), ("supervisor.file_poll_ms", "20")]).await;
    std::fs::create_dir_all(vol.path().join("reports")).unwrap();
    (vol, sb)
}

fn replace_report_file(volume: &std::path::Path, unit: &str, body: &[u8]) {
    let reports = volume.join("reports");
    let tmp = reports.join(format!(".{unit}.tmp"));
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, reports.join(format!("{unit}_latest.json"))).unwrap();
}

fn kinds(s: &[xo_proto::Steering]) -> Vec<(AnomalyKind, Severity)> {
    s.iter().map(|s| (s.kind, s.severity)).collect()
}

/// Test 1: with supervision off there is no work at all.
#[tokio::test]
async fn no_org_passthrough_subscribes_to_nothing() {
    let mut sb = Sandbox::start(&[("supervisor.enabled", "false")]).await;
    let connz = sb.nats().monitor("/connz?subs=1");
    let conns = connz["connections"].as_array().unwrap();
    let sup = conns
        .iter()
        .find(|c| c["name"] == "xo-supervisor")
        .expect("supervisor connection");
    assert_eq!(sup["subscriptions"], 0, "{sup}");
    assert_eq!(sup["out_msgs"], 0, "the supervisor sent nothing: {sup}");
    let err = typed::call(&sb.client, &sb.subjects, &ListUnits::default(), T)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no responders"), "{err}");
    // Same on the embedded bus.
    let local = xo_bus::LocalBus::new();
    let dir = tempfile::tempdir().unwrap();
    let store = xo_bus::Store::File(xo_bus::FileStore::open(dir.path()).unwrap());
    let h = xo_supervisor::start(
        xo_runtime::ServiceCtx::new(
            xo_tests::sandbox::config(&[("supervisor.enabled", "false")]),
            xo_bus::Bus::Local(local.clone()),
        )
        .with_store(store)
        .with_clock(xo_supervisor::Clock::System),
    )
    .await
    .unwrap();
    assert_eq!(local.subscription_count(), 0);
    assert!(h.root().is_none(), "no actors");
    h.stop().await.unwrap();
}

/// Test 2: a healthy run is checked every report and steered never.
#[tokio::test]
async fn normal_operation_injects_nothing() {
    let sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    for turn in 1..=20 {
        let mut r = report("u1", turn);
        r.activity.turns_since_progress = (turn % 4) as u32;
        r.size.context_fill = 0.3 + turn as f64 / 100.0;
        r.activity.recent = vec![
            Action::tool("read_file", &format!("a{turn}"), Outcome::Ok, turn)
                .with_output(&format!("o{turn}")),
        ];
        assert!(sb.exchange(&mut sub, &r).await.is_empty(), "turn {turn}");
    }
    let d = sb.show("u1").await.unwrap();
    assert_eq!(d.summary.health, Health::Green);
    assert_eq!(d.summary.steering_sent, 0);
    let stats = sb.stats().await;
    assert_eq!(
        (stats.reports, stats.evaluated, stats.steering),
        (20, 20, 0)
    );
}

/// Test 3 and 7: a stall is steered, held for the cooldown, then steered again.
#[tokio::test]
async fn stall_and_cooldown() {
    let sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    let stalled = |turn: u64, n: u32| {
        let mut r = report("u1", turn);
        r.activity.turns_since_progress = n;
        r.activity.task_id = Some("T-42".into());
        r.activity.step = Some("parse config".into());
        r
    };
    assert!(
        sb.exchange(&mut sub, &stalled(10, 5)).await.is_empty(),
        "at the maximum"
    );
    let s = sb.exchange(&mut sub, &stalled(11, 6)).await;
    assert_eq!(kinds(&s), [(AnomalyKind::Stall, Severity::Warning)]);
    assert!(s[0].message.starts_with("[SUPERVISOR]") && s[0].message.contains("T-42"));
    assert_eq!(s[0].unit, "u1");
    assert!(
        sb.exchange(&mut sub, &stalled(12, 7)).await.is_empty(),
        "cooldown"
    );
    assert!(
        sb.exchange(&mut sub, &stalled(13, 8)).await.is_empty(),
        "cooldown"
    );
    let s = sb.exchange(&mut sub, &stalled(14, 9)).await;
    assert_eq!(
        kinds(&s),
        [(AnomalyKind::Stall, Severity::Urgent)],
        "after 3 turns, the same stretch: escalated"
    );
    assert!(s[0].message.contains("second notice"), "{}", s[0].message);
    assert_eq!(sb.show("u1").await.unwrap().summary.health, Health::Amber);
}

/// Test 4: a loop is named as a loop (not per-tool advice).
#[tokio::test]
async fn loop_detection() {
    let sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    let fail = |t| Action::tool("shell", "cargo-build", Outcome::Error, t).with_error("exit_101");
    let mut r = report("u1", 3);
    r.activity.recent = vec![fail(1), fail(2)];
    assert!(sb.exchange(&mut sub, &r).await.is_empty());
    let mut r = report("u1", 4);
    r.activity.recent = vec![fail(1), fail(2), fail(3)];
    let s = sb.exchange(&mut sub, &r).await;
    assert_eq!(kinds(&s), [(AnomalyKind::Loop, Severity::Warning)]);
    assert!(s[0].message.contains("shell") && s[0].message.contains("different approach"));
    assert_eq!(s[0].evidence.turns, [1, 2, 3]);
}

/// Test 5: context warning above 80%, urgent above 90%.
#[tokio::test]
async fn context_exhaustion() {
    let sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    let at = |turn, fill| {
        let mut r = report("u1", turn);
        r.size.context_fill = fill;
        r
    };
    assert!(sb.exchange(&mut sub, &at(1, 0.80)).await.is_empty());
    assert_eq!(
        kinds(&sb.exchange(&mut sub, &at(2, 0.82)).await),
        [(AnomalyKind::Context, Severity::Warning)]
    );
    let s = sb.exchange(&mut sub, &at(3, 0.93)).await;
    assert_eq!(
        kinds(&s),
        [(AnomalyKind::Context, Severity::Urgent)],
        "escalation passes cooldown"
    );
    assert_eq!(sb.show("u1").await.unwrap().summary.health, Health::Red);
}

/// Test 6: PACE contingent quotes the role's plan; emergency is never held.
#[tokio::test]
async fn pace_response() {
    let sb = Sandbox::start(&[(
        "roles.coder.pace_plan.contingent.description",
        "write a failing test first",
    )])
    .await;
    let mut sub = sb.steering("u1").await;
    let mut r = report("u1", 1);
    r.unit.pace = Pace::Contingent;
    let s = sb.exchange(&mut sub, &r).await;
    assert_eq!(kinds(&s), [(AnomalyKind::Pace, Severity::Warning)]);
    assert!(
        s[0].message.contains("write a failing test first"),
        "{}",
        s[0].message
    );
    for turn in 2..=4 {
        let mut r = report("u1", turn);
        r.unit.pace = Pace::Emergency;
        let s = sb.exchange(&mut sub, &r).await;
        assert_eq!(
            kinds(&s),
            [(AnomalyKind::Pace, Severity::Critical)],
            "turn {turn}"
        );
    }
}

/// Test 8: three different tools failing within five actions.
#[tokio::test]
async fn cascade_detection() {
    let sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    let mut r = report("u1", 5);
    r.activity.recent = vec![
        Action::tool("read_file", "a", Outcome::Error, 1).with_error("enoent"),
        Action::tool("shell", "b", Outcome::Error, 2).with_error("exit_1"),
        Action::tool("write_file", "c", Outcome::Error, 3).with_error("eacces"),
    ];
    let s = sb.exchange(&mut sub, &r).await;
    assert_eq!(kinds(&s), [(AnomalyKind::Cascade, Severity::Warning)]);
    assert!(s[0].message.contains("working directory"));
}

/// Stale after `stale_after` of silence, on the supervisor's clock (no sleeping).
#[tokio::test]
async fn stale_detection_with_owned_time() {
    let sb = Sandbox::start(&[("supervisor.stale_after_ms", "30000")]).await;
    let mut sub = sb.steering("u1").await;
    sb.exchange(&mut sub, &report("u1", 1)).await;
    sb.clock.advance(Duration::from_millis(29_999));
    sb.sup().tick().await;
    sb.client.flush().await.unwrap();
    let d = sb.show("u1").await.unwrap();
    assert!(!d.summary.stale, "29.999 s is not stale");
    assert!(drain(&mut sub).is_empty());
    sb.clock.advance(Duration::from_millis(1));
    sb.sup().tick().await;
    let d = sb.show("u1").await.unwrap();
    assert!(d.summary.stale && d.summary.health == Health::Red);
    let s = drain(&mut sub);
    assert_eq!(kinds(&s), [(AnomalyKind::Stale, Severity::Urgent)]);
    // Another tick does not repeat it; a heartbeat revives the unit.
    sb.clock.advance(Duration::from_secs(10));
    sb.sup().tick().await;
    sb.show("u1").await.unwrap();
    assert!(drain(&mut sub).is_empty());
    let hb = Heartbeat::new("u1", "coder", 1);
    typed::publish(&sb.client, &sb.subjects.heartbeat("u1"), &hb, Format::Json)
        .await
        .unwrap();
    xo_tests::until("the heartbeat revived the unit", async || {
        (!sb.show("u1").await.unwrap().summary.stale).then_some(())
    })
    .await;
}

/// A restarted supervisor resumes from the store: units, health and cooldowns.
#[tokio::test]
async fn supervisor_restart_resumes_from_the_store() {
    let mut sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    let stalled = |turn| {
        let mut r = report("u1", turn);
        r.activity.turns_since_progress = 9;
        r
    };
    assert_eq!(sb.exchange(&mut sub, &stalled(10)).await.len(), 1);
    sb.stop_supervisor().await.unwrap();
    sb.start_supervisor().await;
    let list = typed::call(&sb.client, &sb.subjects, &ListUnits::default(), T)
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].unit.as_str(), list[0].health, list[0].turn),
        ("u1", Health::Amber, 10)
    );
    assert_eq!(list[0].steering_sent, 1);
    // Its steering history, kept apart from its state, came back with it.
    let d = sb.show("u1").await.unwrap();
    let kept: Vec<_> = d.recent_steering.iter().map(|s| (s.kind, s.turn)).collect();
    assert_eq!(kept, [(AnomalyKind::Stall, 10)]);
    assert_eq!(
        d.summary.last_steering.map(|l| l.0),
        Some(AnomalyKind::Stall)
    );
    assert!(
        sb.exchange(&mut sub, &stalled(11)).await.is_empty(),
        "cooldown survived the restart"
    );
    let old = stalled(10);
    sb.send(&old).await;
    assert!(
        sb.exchange(&mut sub, &stalled(13)).await.len() == 1,
        "cooldown over"
    );
    let stats = sb.stats().await;
    assert_eq!(
        stats.duplicates, 1,
        "a replayed seq is a duplicate after the restart too"
    );
}

/// A unit's state written when its steering history was kept inside it
/// (before issue 43) is read by this version: the history moves to its own
/// bucket, is shown, and is not written back into the state.
#[tokio::test]
async fn a_state_with_its_history_inside_is_moved_out() {
    use xo_bus::{Bus, NatsStore, Store};
    use xo_supervisor::persist::{BUCKET, UnitRecord};
    let mut sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    let mut r = report("u1", 10);
    r.activity.turns_since_progress = 9;
    let sent = sb.exchange(&mut sub, &r).await;
    assert_eq!(sent.len(), 1);
    sb.stop_supervisor().await.unwrap();
    let Bus::Nats(nb) = &sb.client else {
        unreachable!()
    };
    let store = Store::Nats(NatsStore::new(nb.client().clone(), &sb.cfg.org.prefix));
    let stored = store.get(BUCKET, "u1").await.unwrap().unwrap().value;
    let rec: UnitRecord = xo_proto::codec::decode_plain(&stored, None, usize::MAX).unwrap();
    #[derive(serde::Serialize)]
    struct Before<'a> {
        #[serde(flatten)]
        rec: &'a UnitRecord,
        steering: Vec<xo_proto::Steering>,
    }
    let mut older = sent[0].clone();
    older.turn = 3;
    older.id = "u1-3-old".into();
    let before = Before {
        rec: &UnitRecord {
            steering_kept: 0,
            last_steering: None,
            ..rec
        },
        steering: vec![older, sent[0].clone()],
    };
    let bytes = xo_proto::codec::encode(&before, Format::Msgpack).unwrap();
    store.put(BUCKET, "u1", Bytes::from(bytes)).await.unwrap();
    sb.start_supervisor().await;
    let d = sb.show("u1").await.unwrap();
    let turns: Vec<u64> = d.recent_steering.iter().map(|s| s.turn).collect();
    assert_eq!(turns, [3, 10]);
    sb.stop_supervisor().await.unwrap();
    let stored = store.get(BUCKET, "u1").await.unwrap().unwrap().value;
    let rec: UnitRecord = xo_proto::codec::decode_plain(&stored, None, usize::MAX).unwrap();
    assert!(rec.legacy_steering.is_empty());
    assert_eq!(rec.steering_kept, 2);
    sb.start_supervisor().await;
    let d = sb.show("u1").await.unwrap();
    assert_eq!(d.recent_steering.len(), 2);
}

/// Issue 43: past `supervisor.persist_writes_per_s` each unit's state is
/// written less often (the store's writes do not grow with the fleet), the
/// stats say how often, and units heard of together are written spread
/// over the interval, each at its own point, not all at once.
#[tokio::test]
async fn past_the_write_budget_units_are_written_less_often_and_spread() {
    use xo_supervisor::persist::{BUCKET, Persister, UnitRecord};
    // 20 units at 2 writes a second: each every 10 s, not every 5. The
    // liveness check that counts them runs when the test says (`tick`):
    // the supervisor's own runs at its start (its timer's first tick, which
    // may come after the first reports) and then after an hour. With one a
    // second, a check in real time could count the units, or sweep, at a
    // point the test did not choose (it did, in a full run).
    let sb = Sandbox::start(&[
        ("supervisor.persist_interval_ms", "5000"),
        ("supervisor.persist_writes_per_s", "2"),
        ("supervisor.tick_ms", "3600000"),
    ])
    .await;
    assert_eq!(
        sb.stats().await.persist_every_ms,
        5_000,
        "no unit yet: the base interval"
    );
    let units: Vec<String> = (0..20).map(|i| format!("u{i:02}")).collect();
    let t0 = sb.clock.now_ms();
    for u in &units {
        sb.send(&report(u, 1)).await;
    }
    for u in &units {
        sb.wait_seq(u, 1).await;
    }
    sb.sup().tick().await;
    assert_eq!(sb.stats().await.persist_every_ms, 10_000);
    // The turn of each unit's stored state (0: none stored yet).
    let turn_of = async |u: &str| -> u64 {
        let Some(e) = sb.h.store.get(BUCKET, u).await.unwrap() else {
            return 0;
        };
        let rec: UnitRecord = xo_proto::codec::decode_plain(&e.value, None, usize::MAX).unwrap();
        rec.turn
    };
    let written = async |what: &str, list: &[&String], turn: u64| {
        xo_tests::until(what, async || {
            for u in list {
                if turn_of(u.as_str()).await != turn {
                    return None;
                }
            }
            Some(())
        })
        .await
    };
    let all: Vec<&String> = units.iter().collect();
    // Every unit's first state is written at once.
    written("each unit's first state written", &all, 1).await;
    // 6 s on, a unit is due again where its own 10 s grid (offset by its
    // name) has a step between t0 and now.
    sb.clock.advance(Duration::from_secs(6));
    for u in &units {
        sb.send(&report(u, 2)).await;
    }
    for u in &units {
        sb.wait_seq(u, 2).await;
    }
    let due: Vec<&String> = units
        .iter()
        .filter(|u| Persister::due(u, t0, t0 + 6_000, 10_000))
        .collect();
    assert!(
        !due.is_empty() && due.len() < units.len(),
        "the names spread over the interval: {due:?}"
    );
    written("the due units' second state written", &due, 2).await;
    // Every report is in: the rest were not handed over, and wait.
    for u in units.iter().filter(|u| !due.contains(u)) {
        assert_eq!(
            turn_of(u.as_str()).await,
            1,
            "{u} was written before its 10 s"
        );
    }
    // The sweep at the (longer) interval writes what waits.
    sb.clock.advance(Duration::from_secs(5));
    sb.sup().tick().await;
    written("every unit's second state written", &all, 2).await;
}

/// Waits until the unit's detail satisfies `ok`.
async fn wait_for(
    sb: &Sandbox,
    unit: &str,
    what: &str,
    ok: impl Fn(&xo_proto::control::UnitDetail) -> bool,
) -> xo_proto::control::UnitDetail {
    xo_tests::until(&format!("{unit}: {what}"), async || {
        sb.show(unit).await.ok().filter(&ok)
    })
    .await
}

/// Issue 23, item 5: one report with epoch 2^64-1 once made every later
/// report of its unit a duplicate, and a runner restarted with its clock
/// 5 s behind was ignored for good while its heartbeats kept it green.
#[tokio::test]
async fn epochs_are_bounded_and_a_unit_heard_only_by_heartbeat_is_flagged() {
    let now = xo_proto::now_ms();
    let at = |turn: u64, seq: u64, epoch: u64| {
        let mut r = report("u1", turn);
        r.time.seq = seq;
        r.time.epoch = epoch;
        r
    };
    let sb = &Sandbox::start(&[]).await;
    let refused = |n: u64| async move {
        xo_tests::until(&format!("{n} reports refused"), async || {
            (sb.stats().await.duplicates >= n).then_some(())
        })
        .await
    };
    sb.send(&at(1, 1, now)).await;
    sb.wait_seq("u1", 1).await;
    // From the future: refused, and the unit's count is not taken over.
    sb.send(&at(2, 2, u64::MAX)).await;
    refused(1).await;
    sb.send(&at(3, 2, now)).await;
    let d = wait_for(sb, "u1", "heard after the poisoned epoch", |d| {
        d.summary.turn == 3
    })
    .await;
    assert_eq!(d.summary.refused_reports, 0);
    // Restarted on a host whose clock is 5 s behind: heard.
    sb.send(&at(50, 1, now - 5_000)).await;
    wait_for(
        sb,
        "u1",
        "heard after a restart with its clock behind",
        |d| d.summary.turn == 50,
    )
    .await;
    // Reports from a life further back than the skew, while heartbeats
    // arrive: refused, and from the third on the unit is not green.
    let far = now - 5_000 - xo_radio::MAX_CLOCK_SKEW_MS - 1;
    for (i, seq) in (2..=4).enumerate() {
        sb.send(&at(60 + seq, seq, far)).await;
        let hb = Heartbeat::new("u1", "coder", seq);
        typed::publish(&sb.client, &sb.subjects.heartbeat("u1"), &hb, Format::Json)
            .await
            .unwrap();
        refused(2 + i as u64).await;
    }
    let d = sb.show("u1").await.unwrap();
    assert_eq!(d.summary.refused_reports, 3, "{:?}", d.summary);
    assert_eq!(d.summary.health, Health::Amber, "{:?}", d.summary);
    assert!(!d.summary.stale && d.summary.turn == 50);
    // Its live life reports again: heard, the flag gone.
    sb.send(&at(51, 2, now - 5_000)).await;
    let d = wait_for(sb, "u1", "heard again", |d| d.summary.turn == 51).await;
    assert_eq!(d.summary.refused_reports, 0);
    assert_eq!(d.summary.health, Health::Green);
}

/// Issue 23, item 7: silent units were never forgotten (~14 KB each;
/// 60,000 of them held 865 MB). After `supervisor.unit_retention_ms` of
/// silence a unit is forgotten, in memory and in the store, and counted.
#[tokio::test]
async fn silent_units_are_forgotten_after_the_retention() {
    let mut sb = Sandbox::start(&[("supervisor.unit_retention_ms", "60000")]).await;
    sb.send(&report("quiet", 1)).await;
    sb.wait_seq("quiet", 1).await;
    sb.send(&report("chatty", 1)).await;
    sb.wait_seq("chatty", 1).await;
    // 59 s: kept, however silent (stale by now).
    sb.clock.advance(Duration::from_secs(59));
    sb.sup().tick().await;
    sb.send(&report("chatty", 2)).await;
    sb.wait_seq("chatty", 2).await;
    assert!(sb.show("quiet").await.is_ok());
    // 60 s of silence: the quiet one is forgotten, the chatty one is not.
    sb.clock.advance(Duration::from_secs(2));
    sb.sup().tick().await;
    let units = |sb: &Sandbox| {
        let (c, s) = (sb.client.clone(), sb.subjects.clone());
        async move {
            typed::call(&c, &s, &ListUnits::default(), T)
                .await
                .unwrap()
                .into_iter()
                .map(|u| u.unit)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(units(&sb).await, vec!["chatty".to_string()]);
    let stats = sb.stats().await;
    assert_eq!((stats.evicted, stats.units), (1, 1));
    // Gone from the store too: a restarted supervisor does not bring it back.
    sb.stop_supervisor().await.unwrap();
    sb.start_supervisor().await;
    assert_eq!(units(&sb).await, vec!["chatty".to_string()]);
    // It reports again: a new unit, counted from its report.
    sb.send(&report("quiet", 7)).await;
    let d = sb.wait_seq("quiet", 7).await;
    assert_eq!((d.summary.turn, d.summary.steering_sent), (7, 0));
}

/// A watcher that dies is restarted with its state; too many deaths escalate.
#[tokio::test]
async fn watcher_restart_and_intensity_limit() {
    let mut sb = Sandbox::start(&[
        ("supervisor.max_restarts", "2"),
        ("supervisor.restart_window_ms", "60000"),
    ])
    .await;
    let mut sub = sb.steering("u1").await;
    let mut r = report("u1", 1);
    r.size.context_fill = 0.85;
    assert_eq!(sb.exchange(&mut sub, &r).await.len(), 1);
    let root = sb.sup().root().unwrap().clone();
    let watcher = |root: ractor::ActorRef<xo_supervisor::RootMsg>| async move {
        root.call(|p| xo_supervisor::RootMsg::Watcher("u1".into(), p), None)
            .await
            .unwrap()
            .unwrap()
            .expect("watcher exists")
    };
    for n in 1..=2u32 {
        let w = watcher(root.clone()).await;
        w.kill();
        xo_tests::until("the watcher restarted", async || {
            (watcher(root.clone()).await.get_id() != w.get_id()).then_some(())
        })
        .await;
        let d = sb.show("u1").await.unwrap();
        assert_eq!(d.summary.restarts, n);
        assert_eq!(d.summary.steering_sent, 1, "state kept across the restart");
    }
    // Cooldown state survived too: turn 2 context is still held.
    let mut r = report("u1", 2);
    r.size.context_fill = 0.85;
    assert!(sb.exchange(&mut sub, &r).await.is_empty());
    watcher(root.clone()).await.kill();
    xo_tests::eventually("the tree stopped", || {
        root.get_status() == ractor::ActorStatus::Stopped
    })
    .await;
    assert_eq!(
        root.get_status(),
        ractor::ActorStatus::Stopped,
        "tree escalated"
    );
    // The fabric's error names the service, its cause the escalation.
    let err = format!("{:#}", sb.stop_supervisor().await.unwrap_err());
    assert!(
        err.contains("escalated") && err.contains("u1") && err.contains("3 restarts within"),
        "{err}"
    );
}

/// Bad input is counted, logged, dead-lettered, and other units keep being served.
#[tokio::test]
async fn bad_input_goes_to_the_dead_letter_subject() {
    bad_input_is_dead_lettered(false).await;
}

/// A watched unit's reports are decoded by its watcher: bad input there is
/// dead-lettered the same way, and the unit keeps being served.
#[tokio::test]
async fn bad_input_for_a_watched_unit_is_dead_lettered_by_its_watcher() {
    bad_input_is_dead_lettered(true).await;
}

async fn bad_input_is_dead_lettered(watched: bool) {
    let sb = Sandbox::start(&[("wire.max_payload", "4096")]).await;
    let mut dlq = sb.client.subscribe(&sb.subjects.dlq_all()).await.unwrap();
    let mut sub = sb.steering("good").await;
    let mut bad_sub = sb.steering("bad").await;
    sb.client.flush().await.unwrap();
    if watched {
        let mut r = report("bad", 1);
        r.size.context_fill = 0.95;
        assert_eq!(sb.exchange(&mut bad_sub, &r).await.len(), 1);
    }
    let subject = sb.subjects.salute("bad");
    let mut json = Headers::new();
    json.insert("Content-Type", "application/json");
    let cases: Vec<(Headers, Bytes, &str)> = vec![
        (
            Headers::new(),
            Bytes::from_static(&[0x93, 0xc1, 0xff]),
            "undecodable",
        ),
        (
            json.clone(),
            Bytes::from_static(br#"{"v":1,"unit":{"unit":"bad","role":"coder"}}"#),
            "undecodable",
        ),
        (
            json.clone(),
            Bytes::from_static(
                br#"{"v":9,"unit":{"unit":"bad","role":"coder"},"time":{"turn":1,"seq":1}}"#,
            ),
            "unsupported_version",
        ),
        (json.clone(), Bytes::from(vec![b' '; 5000]), "too_large"),
        (
            json.clone(),
            Bytes::from_static(
                br#"{"v":1,"unit":{"unit":"other","role":"coder"},"time":{"turn":1,"seq":1}}"#,
            ),
            "invalid",
        ),
    ];
    for (h, p, _) in &cases {
        sb.client
            .publish(&subject, h.clone(), p.clone())
            .await
            .unwrap();
    }
    for (headers, payload, reason) in &cases {
        let m = tokio::time::timeout(T, dlq.next()).await.unwrap().unwrap();
        assert_eq!(m.subject, format!("xo.dlq.{subject}"));
        assert_eq!(m.headers.get(typed::DLQ_REASON), Some(*reason));
        // The pump lets a content type go once it has read it (the format
        // says it): a dead letter still shows the message as it came.
        assert_eq!(
            m.headers.get("Content-Type"),
            headers.get("Content-Type"),
            "the original content type is kept ({reason})"
        );
        assert!(
            m.headers
                .get(typed::DLQ_ERROR)
                .is_some_and(|e| !e.is_empty())
        );
        assert_eq!(&m.payload, payload, "the original payload is kept");
    }
    let mut r = report("good", 1);
    r.size.context_fill = 0.95;
    assert_eq!(
        sb.exchange(&mut sub, &r).await.len(),
        1,
        "other units still served"
    );
    if watched {
        let mut r = report("bad", 2);
        r.unit.pace = xo_proto::Pace::Emergency;
        assert_eq!(
            sb.exchange(&mut bad_sub, &r).await.len(),
            1,
            "the unit is still served after its bad reports"
        );
    }
    let stats = sb.stats().await;
    assert_eq!(stats.dead_letters, 5);
    if watched {
        assert_eq!(stats.units, 2);
        assert_eq!(stats.evaluated, 3, "bad reports are never evaluated");
    } else {
        assert_eq!(stats.units, 1, "no unit was created from bad input");
    }
}

/// A MessagePack report can carry a cost of inf or NaN (JSON cannot): it
/// is refused by name and dead-lettered, so the fleet list stays readable
/// and the unit's persisted state is never poisoned.
#[tokio::test]
async fn a_non_finite_cost_is_dead_lettered_and_the_fleet_stays_readable() {
    let sb = Sandbox::start(&[]).await;
    let mut dlq = sb.client.subscribe(&sb.subjects.dlq_all()).await.unwrap();
    let mut sub = sb.steering("rich").await;
    sb.client.flush().await.unwrap();
    // 1.7e308 is finite, but two of them sum to inf: above the ceiling
    // (1e12, issue 40 item 4), refused by name too.
    for cost in [f64::INFINITY, f64::NAN, 1.7e308] {
        let mut r = report("rich", 1);
        r.equipment.cost_usd = cost;
        let payload = xo_proto::codec::encode(&r, Format::Msgpack).unwrap();
        sb.client
            .publish(&sb.subjects.salute("rich"), Headers::new(), payload.into())
            .await
            .unwrap();
        let m = tokio::time::timeout(T, dlq.next()).await.unwrap().unwrap();
        let error = m.headers.get(typed::DLQ_ERROR).unwrap_or_default();
        assert!(error.contains("cost_usd"), "{cost}: {error}");
    }
    let units = typed::call(&sb.client, &sb.subjects, &ListUnits::default(), T)
        .await
        .unwrap();
    assert!(units.iter().all(|u| u.cost_usd.is_finite()), "{units:?}");
    // The unit reports a real cost next: served as ever.
    let mut r = report("rich", 2);
    r.equipment.cost_usd = 1.5;
    r.size.context_fill = 0.95;
    assert_eq!(sb.exchange(&mut sub, &r).await.len(), 1);
    let units = typed::call(&sb.client, &sb.subjects, &ListUnits::default(), T)
        .await
        .unwrap();
    let rich = units.iter().find(|u| u.unit == "rich").unwrap();
    assert_eq!(rich.cost_usd, 1.5);
}

/// Microcosm and macrocosm give the same steering for the same reports.
#[tokio::test]
async fn microcosm_and_supervisor_agree() {
    let sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    let mut micro = Microcosm::new(RoleProfile::default());
    let fail = |tool: &str, t| Action::tool(tool, "x", Outcome::Error, t).with_error("e");
    let mut seq = Vec::new();
    for turn in 1..=16u64 {
        let mut r = report("u1", turn);
        r.activity.turns_since_progress = (turn / 2) as u32;
        r.size.context_fill = turn as f64 / 17.0;
        r.activity.recent = match turn % 4 {
            0 => vec![fail("a", turn), fail("b", turn), fail("c", turn)],
            1 => vec![fail("a", turn), fail("a", turn), fail("a", turn)],
            2 => (0..3)
                .map(|_| Action::message(None, Outcome::Empty, turn))
                .collect(),
            _ => vec![],
        };
        if turn == 9 {
            r.unit.pace = Pace::Contingent;
        }
        if turn == 15 {
            r.unit.pace = Pace::Emergency;
        }
        seq.push(r);
    }
    let (mut from_micro, mut from_bus) = (Vec::new(), Vec::new());
    for r in &seq {
        let mut own = r.clone();
        from_micro.extend(micro.turn(&mut own));
        from_bus.extend(sb.exchange(&mut sub, r).await);
    }
    assert!(
        from_micro.len() >= 8,
        "the sequence exercises the rules: {}",
        from_micro.len()
    );
    assert_eq!(from_micro, from_bus);
}

/// File mode: a unit that can only write files is supervised too.
#[tokio::test]
async fn macrocosm_file_mode() {
    let (vol, sb) = file_mode().await;
    let mut sub = sb.steering("filer").await;
    let mut dlq = sb.client.subscribe("xo.dlq.>").await.unwrap();
    sb.client.flush().await.unwrap();
    let write = |r: &xo_proto::SaluteReport| {
        replace_report_file(vol.path(), "filer", &serde_json::to_vec(r).unwrap())
    };
    let mut r = report("filer", 1);
    r.activity.turns_since_progress = 7;
    write(&r);
    std::fs::write(vol.path().join("reports/broken_latest.json"), b"{not json").unwrap();
    let d = sb.wait_seq("filer", 1).await;
    assert_eq!(d.summary.health, Health::Amber);
    let lines = std::fs::read_to_string(vol.path().join("steering/filer.jsonl")).unwrap();
    let steer: Vec<xo_proto::Steering> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(kinds(&steer), [(AnomalyKind::Stall, Severity::Warning)]);
    assert_eq!(drain(&mut sub), steer, "the bus gets the same steering");
    let stats = sb.stats().await;
    assert_eq!(
        stats.dead_letters, 1,
        "the broken file is rejected, not fatal"
    );
    // Dead-lettered like bus input: under the unit's report subject, with
    // the reason and the file named, and the bytes as they were.
    let m = tokio::time::timeout(T, dlq.next())
        .await
        .expect("a dead letter for the broken file")
        .unwrap();
    assert_eq!(m.subject, "xo.dlq.xo.salute.broken");
    assert_eq!(
        m.headers.get(xo_bus::typed::DLQ_REASON),
        Some("undecodable")
    );
    assert!(
        m.headers
            .get(xo_supervisor::decode::DLQ_FILE)
            .is_some_and(|f| f.ends_with("reports/broken_latest.json")),
        "{:?}",
        m.headers
    );
    assert_eq!(&m.payload[..], b"{not json");
}

/// The volume is writable by others: a report file that is a symlink (to
/// a secret, or to `/dev/zero`) is dead-lettered without its target's
/// bytes, and a steering file linked elsewhere is never written through.
#[tokio::test]
async fn file_mode_follows_no_symlink() {
    let (vol, sb) = file_mode().await;
    let mut dlq = sb.client.subscribe("xo.dlq.>").await.unwrap();
    sb.client.flush().await.unwrap();
    let reports = vol.path().join("reports");
    std::fs::create_dir_all(vol.path().join("steering")).unwrap();
    let secret = vol.path().join("secret");
    std::fs::write(&secret, "root:$6$hash").unwrap();
    std::os::unix::fs::symlink(&secret, reports.join("thief_latest.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", reports.join("zero_latest.json")).unwrap();
    for _ in 0..2 {
        let m = tokio::time::timeout(T, dlq.next()).await.unwrap().unwrap();
        let error = m.headers.get(typed::DLQ_ERROR).unwrap_or_default();
        assert!(error.contains("symlink"), "{error}");
        assert!(m.payload.is_empty(), "nothing of the target is published");
    }
    // A unit whose steering file links to the secret: steered on the bus,
    // the secret untouched.
    std::os::unix::fs::symlink(&secret, vol.path().join("steering/filer.jsonl")).unwrap();
    let mut sub = sb.steering("filer").await;
    let mut stall = report("filer", 1);
    stall.activity.turns_since_progress = 7;
    // A steering is published, then its file line written, by the unit's
    // one watcher: once the second is on the bus the first line was tried.
    let mut full = report("filer", 2);
    full.size.context_fill = 0.95;
    for (r, kind) in [(stall, AnomalyKind::Stall), (full, AnomalyKind::Context)] {
        let json = serde_json::to_vec(&r).unwrap();
        std::fs::write(reports.join("filer_latest.json"), json).unwrap();
        let m = tokio::time::timeout(T, sub.next()).await.unwrap().unwrap();
        let steer = typed::decode::<xo_proto::Steering>(&m, usize::MAX).unwrap();
        assert_eq!(steer.kind, kind);
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root:$6$hash");
}

/// Seed 000's own report files: `context_fill_pct`, a percentage.
#[tokio::test]
async fn file_mode_reads_seed_context_fill_pct() {
    let (vol, sb) = file_mode().await;
    let mut sub = sb.steering("researcher").await;
    let report = r#"{"v":1,"unit":{"unit":"researcher","role":"researcher"},"time":{"turn":4,"seq":4},"size":{"context_fill_pct":91.5}}"#;
    std::fs::write(vol.path().join("reports/researcher_latest.json"), report).unwrap();
    let d = sb.wait_seq("researcher", 4).await;
    assert!(
        (d.summary.context_fill - 0.915).abs() < 1e-9,
        "{}",
        d.summary.context_fill
    );
    let steer = drain(&mut sub);
    assert_eq!(kinds(&steer), [(AnomalyKind::Context, Severity::Urgent)]);
}

/// Seed 000's own report files (`role_id`, `timestamp`, `context_fill_pct`,
/// `status.health`, no `v`) are read as reports; one that cannot be ordered
/// is dead-lettered with the reason named.
#[tokio::test]
async fn file_mode_reads_seed_shaped_files() {
    let (vol, sb) = file_mode().await;
    let mut sub = sb.steering("analyst").await;
    let mut dlq = sb.client.subscribe("xo.dlq.>").await.unwrap();
    sb.client.flush().await.unwrap();
    let write = |unit: &str, body: &str| replace_report_file(vol.path(), unit, body.as_bytes());
    write(
        "analyst",
        r#"{"role_id":"analyst","timestamp":"2026-01-01T00:00:05.250Z","iteration":12,"context_fill_pct":93,"status":{"health":"AMBER"}}"#,
    );
    // 2026-01-01T00:00:05.250Z in ms since the epoch: the seq.
    let seq = 1_767_225_605_250;
    let d = sb.wait_seq("analyst", seq).await;
    assert_eq!(d.summary.role, "analyst");
    assert_eq!(d.summary.turn, 12);
    assert_eq!(d.summary.self_health, Health::Amber);
    assert!((d.summary.context_fill - 0.93).abs() < 1e-9);
    let steer = drain(&mut sub);
    assert_eq!(kinds(&steer), [(AnomalyKind::Context, Severity::Urgent)]);
    // A later write (a numeric timestamp in seconds) is read too.
    write(
        "analyst",
        r#"{"role_id":"analyst","timestamp":1767225606,"context_fill_pct":0.2,"status":{"health":"green"}}"#,
    );
    let d = sb.wait_seq("analyst", 1_767_225_606_000).await;
    assert!((d.summary.context_fill - 0.2).abs() < 1e-9);

    let undated = r#"{"role_id":"undated","context_fill_pct":50}"#;
    write("undated", undated);
    let m = tokio::time::timeout(T, dlq.next())
        .await
        .expect("a dead letter for the undated file")
        .unwrap();
    assert_eq!(m.subject, "xo.dlq.xo.salute.undated");
    let err = m.headers.get(xo_bus::typed::DLQ_ERROR).unwrap_or_default();
    assert!(
        err.contains("seed-shaped") && err.contains("timestamp"),
        "{err}"
    );
    assert_eq!(&m.payload[..], undated.as_bytes());
}

/// The control API is a NATS micro service; operators can steer by hand.
#[tokio::test]
async fn control_api_and_operator_steering() {
    let sb = Sandbox::start(&[]).await;
    let ping = sb
        .client
        .request("$SRV.PING.xo-supervisor", Headers::new(), Bytes::new(), T)
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ping.payload).unwrap();
    assert_eq!(v["name"], "xo-supervisor");
    let info = sb
        .client
        .request("$SRV.INFO.xo-supervisor", Headers::new(), Bytes::new(), T)
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
    let subjects: Vec<&str> = v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["subject"].as_str().unwrap())
        .collect();
    assert!(
        subjects.contains(&"xo.ctl.supervisor.units")
            && subjects.contains(&"xo.ctl.supervisor.steer"),
        "{subjects:?}"
    );

    let err = typed::call(
        &sb.client,
        &sb.subjects,
        &SteerUnit {
            unit: "ghost".into(),
            message: "hi".into(),
            severity: Severity::Info,
            by: String::new(),
        },
        T,
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "not found: unit not found: ghost");
    let mut sub = sb.steering("u1").await;
    sb.exchange(&mut sub, &report("u1", 1)).await;
    let s = typed::call(
        &sb.client,
        &sb.subjects,
        &SteerUnit {
            unit: "u1".into(),
            message: "rebase on main first".into(),
            severity: Severity::Urgent,
            by: String::new(),
        },
        T,
    )
    .await
    .unwrap();
    assert_eq!(s.message, "[SUPERVISOR] rebase on main first");
    let got = drain(&mut sub);
    assert_eq!(got, vec![s]);
    let err = typed::call(
        &sb.client,
        &sb.subjects,
        &SteerUnit {
            unit: "u1".into(),
            message: "  ".into(),
            severity: Severity::Info,
            by: String::new(),
        },
        T,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
}

/// An operator's acknowledgement (`xo ack`): it holds until its time is
/// up, lapses as soon as the unit gets worse (here: silent, so stale and
/// red), and does not come back when the unit recovers; one without a why,
/// for no time or for a unit nobody knows is refused, saying so.
#[tokio::test]
async fn an_acknowledgement_holds_until_its_time_or_until_the_unit_gets_worse() {
    use xo_proto::control::AckUnit;
    let sb = Sandbox::start(&[("supervisor.stale_after_ms", "300000")]).await;
    let mut sub = sb.steering("u1").await;
    sb.exchange(&mut sub, &report("u1", 1)).await;
    let ack = |why: &str, for_ms: u64| AckUnit {
        unit: "u1".into(),
        by: "ana".into(),
        why: why.into(),
        for_ms,
    };
    let s = typed::call(
        &sb.client,
        &sb.subjects,
        &ack("rebuilding the cache", 120_000),
        T,
    )
    .await
    .unwrap();
    let a = s.ack.expect("in force");
    assert_eq!(
        (a.by.as_str(), a.why.as_str()),
        ("ana", "rebuilding the cache")
    );
    assert_eq!(a.until - a.at, 120_000);
    assert_eq!(a.health, Health::Green);
    sb.clock.advance(Duration::from_secs(60));
    sb.sup().tick().await;
    assert!(
        sb.show("u1").await.unwrap().summary.ack.is_some(),
        "1 of 2 minutes"
    );
    sb.clock.advance(Duration::from_secs(60));
    sb.sup().tick().await;
    assert_eq!(
        sb.show("u1").await.unwrap().summary.ack,
        None,
        "its time is up"
    );
    // Worse: silent past stale_after, the unit is stale and red.
    typed::call(&sb.client, &sb.subjects, &ack("on it", 86_400_000), T)
        .await
        .unwrap();
    sb.clock.advance(Duration::from_secs(301));
    sb.sup().tick().await;
    let d = sb.show("u1").await.unwrap().summary;
    assert!(d.stale && d.health == Health::Red, "{d:?}");
    assert_eq!(d.ack, None, "lapsed: the unit got worse");
    // Back, it is not acknowledged again by itself.
    sb.exchange(&mut sub, &report("u1", 2)).await;
    assert_eq!(sb.show("u1").await.unwrap().summary.ack, None);
    for (req, says) in [
        (ack("  ", 60_000), "needs a why"),
        (ack("x", 0), "from 1 minute to 7 days"),
        (
            AckUnit {
                unit: "ghost".into(),
                ..ack("x", 60_000)
            },
            "unit not found: ghost",
        ),
    ] {
        let err = typed::call(&sb.client, &sb.subjects, &req, T)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
    }
}

/// A burst of reports from units the supervisor has never seen: every report
/// is evaluated in its unit's order, none taken for a duplicate (a unit's
/// first reports and its later ones reach its watcher by one path).
#[tokio::test]
async fn a_burst_from_new_units_is_evaluated_in_order() {
    let sb = Sandbox::start(&[]).await;
    // Each unit's reports back to back: while the root spawns a unit's
    // watcher, its next reports are already arriving.
    let (units, turns) = (100u64, 30u64);
    for u in 0..units {
        for turn in 1..=turns {
            sb.send(&report(&format!("burst-{u}"), turn)).await;
        }
    }
    sb.client.flush().await.unwrap();
    let stats = xo_tests::until("every report checked or refused", async || {
        Some(sb.stats().await).filter(|s| s.evaluated + s.duplicates >= units * turns)
    })
    .await;
    assert_eq!(stats.duplicates, 0, "reports overtook each other");
    assert_eq!(stats.evaluated, units * turns);
    for u in 0..units {
        assert_eq!(
            sb.show(&format!("burst-{u}")).await.unwrap().summary.seq,
            turns
        );
    }
}

/// A fleet whose whole list would not fit one bus message is listed in
/// pages; every unit comes back once, in order.
#[tokio::test]
async fn a_large_fleet_is_listed_in_pages() {
    let sb = Sandbox::start(&[]).await;
    let n = 1_200u64;
    for i in 0..n {
        let r = report(&format!("big-{i:05}"), 1);
        sb.send(&r).await;
    }
    sb.client.flush().await.unwrap();
    sb.wait_seq(&format!("big-{:05}", n - 1), 1).await;
    let all = xo_tests::until("every unit listed", async || {
        Some(typed::all_units(&sb.client, &sb.subjects, T).await.unwrap())
            .filter(|all| all.len() as u64 >= n)
    })
    .await;
    assert_eq!(all.len() as u64, n);
    assert!(
        all.windows(2).all(|w| w[0].unit < w[1].unit),
        "sorted, no repeats"
    );
    let first = typed::call(&sb.client, &sb.subjects, &ListUnits::page(None), T)
        .await
        .unwrap();
    assert_eq!(first.len(), ListUnits::PAGE);
    let next = typed::call(
        &sb.client,
        &sb.subjects,
        &ListUnits::page(first.last().map(|u| u.unit.clone())),
        T,
    )
    .await
    .unwrap();
    assert_eq!(next[0].unit, all[ListUnits::PAGE].unit);
}

/// The console asks for the rows that changed and for a task's units by
/// name: only those come back, in unit order (a unit it does not know is
/// left out; a limit applies after the task's filter).
#[tokio::test]
async fn units_are_listed_by_name_and_by_task() {
    let sb = Sandbox::start(&[]).await;
    for i in 0..30u64 {
        let mut r = report(&format!("named-{i:02}"), 1);
        r.activity.task_id = Some(if i % 10 == 3 { "t-3" } else { "t-other" }.into());
        sb.send(&r).await;
    }
    sb.client.flush().await.unwrap();
    for i in 0..30u64 {
        sb.wait_seq(&format!("named-{i:02}"), 1).await;
    }
    let ids = |l: &[xo_proto::control::UnitSummary]| -> Vec<String> {
        l.iter().map(|u| u.unit.clone()).collect()
    };
    let named = typed::call(
        &sb.client,
        &sb.subjects,
        &ListUnits::only(vec![
            "named-17".into(),
            "nobody".into(),
            "named-02".into(),
            "named-17".into(),
        ]),
        T,
    )
    .await
    .unwrap();
    assert_eq!(ids(&named), ["named-02", "named-17"]);
    let on = typed::call(&sb.client, &sb.subjects, &ListUnits::on_task("t-3"), T)
        .await
        .unwrap();
    assert_eq!(ids(&on), ["named-03", "named-13", "named-23"]);
    assert!(on.iter().all(|u| u.task_id.as_deref() == Some("t-3")));
    let two = typed::call(
        &sb.client,
        &sb.subjects,
        &ListUnits {
            limit: Some(2),
            ..ListUnits::on_task("t-3")
        },
        T,
    )
    .await
    .unwrap();
    assert_eq!(ids(&two), ["named-03", "named-13"]);
    let none = typed::call(&sb.client, &sb.subjects, &ListUnits::on_task("t-none"), T)
        .await
        .unwrap();
    assert!(none.is_empty());
}

/// The unit page's charts: the supervisor keeps a unit's last reports as
/// points, oldest first, at most `HISTORY_POINTS` (the oldest dropped).
#[tokio::test]
async fn the_supervisor_keeps_each_units_last_reports_for_its_charts() {
    let sb = Sandbox::start(&[]).await;
    let n = xo_proto::control::HISTORY_POINTS as u64 + 2;
    for turn in 1..=n {
        let mut r = report("charted", turn);
        r.size.context_fill = turn as f64 / (n as f64 * 2.0);
        r.equipment.cost_usd = turn as f64 * 0.01;
        r.activity.turns_since_progress = (turn % 4) as u32;
        sb.send(&r).await;
    }
    let d = sb.wait_seq("charted", n).await;
    assert_eq!(d.history.len(), xo_proto::control::HISTORY_POINTS);
    let first = d.history[0];
    let last = d.history[d.history.len() - 1];
    assert_eq!((first.turn, last.turn), (3, n), "the two oldest dropped");
    assert!((last.context_fill - 0.5).abs() < 0.001, "{last:?}");
    assert!((last.cost_usd - n as f64 * 0.01).abs() < 1e-4, "{last:?}");
    assert_eq!(last.turns_since_progress, (n % 4) as u32);
    assert!(
        d.history.windows(2).all(|w| w[0].turn < w[1].turn),
        "oldest first"
    );
}

/// Issue 37, item 4: a unit that still needs a person is paged again
/// after `alerts.remind_after_ms` (owned time, no sleeping), and no more
/// once it moved.
#[tokio::test]
async fn a_unit_that_still_needs_you_is_reminded_until_it_moves() {
    let sb = Sandbox::start(&[("alerts.remind_after_ms", "1800000")]).await;
    let mut alerts = sb
        .client
        .subscribe(&sb.subjects.alert(xo_proto::alert::AlertKind::UnitNeedsYou))
        .await
        .unwrap();
    let mut sub = sb.steering("u1").await;
    sb.client.flush().await.unwrap();
    let stuck = |turn: u64, since: u64| {
        let mut r = report("u1", turn);
        r.activity.turns_since_progress = since as u32;
        r
    };
    for turn in 1..=30u64 {
        sb.exchange(&mut sub, &stuck(turn, turn - 1)).await;
    }
    let first = tokio::time::timeout(T, alerts.next())
        .await
        .unwrap()
        .unwrap();
    let first = typed::decode::<xo_proto::alert::Alert>(&first, 1 << 20).unwrap();
    assert!(
        first.title.starts_with("u1 needs you: stuck"),
        "{}",
        first.title
    );
    // 29 minutes: nothing; 30: a reminder.
    // A request answered by the supervisor after the tick: its reply comes
    // on the same connection after anything the tick published.
    sb.clock.advance(Duration::from_secs(29 * 60));
    sb.sup().tick().await;
    sb.show("u1").await.unwrap();
    assert!(
        alerts.try_next().is_none(),
        "no reminder before remind_after"
    );
    sb.clock.advance(Duration::from_secs(60));
    sb.sup().tick().await;
    let again = tokio::time::timeout(T, alerts.next())
        .await
        .unwrap()
        .unwrap();
    let again = typed::decode::<xo_proto::alert::Alert>(&again, 1 << 20).unwrap();
    assert!(again.title.starts_with("Reminder ("), "{}", again.title);
    assert!(
        again.title.contains("u1 needs you: stuck"),
        "{}",
        again.title
    );
    // It moves: no reminder however long.
    sb.exchange(&mut sub, &stuck(31, 0)).await;
    sb.clock.advance(Duration::from_secs(3 * 3600));
    sb.sup().tick().await;
    sb.show("u1").await.unwrap();
    assert!(alerts.try_next().is_none(), "reminded after it moved");
}

/// Issue 43, item 3: reports lost on the way are not lost unseen. A gap
/// in a unit's sequence is counted (`missed`, `xo_reports_gap_total`), and
/// said: one `reports_lost` alert naming the unit and the count, at most
/// once a minute (owned time), the losses in between added to the next.
#[tokio::test]
async fn reports_missing_from_a_units_sequence_are_counted_and_paged_once_a_minute() {
    let sb = Sandbox::start(&[]).await;
    let mut alerts = sb
        .client
        .subscribe(&sb.subjects.alert(xo_proto::alert::AlertKind::ReportsLost))
        .await
        .unwrap();
    sb.client.flush().await.unwrap();
    // Seq 1, then 5: reports 2, 3 and 4 never came.
    sb.send(&report("gappy", 1)).await;
    sb.send(&report("gappy", 5)).await;
    sb.wait_seq("gappy", 5).await;
    assert_eq!(sb.stats().await.missed, 3);
    sb.sup().tick().await;
    // The supervisor's reply comes after anything its tick published.
    sb.stats().await;
    let a = alerts
        .try_next()
        .expect("a reports_lost alert after the tick");
    let a = typed::decode::<xo_proto::alert::Alert>(&a, 1 << 20).unwrap();
    assert!(
        a.title
            .ends_with("0 dropped by the supervisor's connection, 3 missing from units' sequences, 0 shed under load"),
        "{}",
        a.title
    );
    assert!(a.detail.contains("(gaps in gappy)"), "{}", a.detail);
    // Nothing new: nothing said.
    sb.sup().tick().await;
    sb.stats().await;
    assert!(alerts.try_next().is_none(), "no alert without a new loss");
    // Two more missing within the minute: counted now, said once the
    // minute has passed.
    sb.send(&report("gappy", 8)).await;
    sb.wait_seq("gappy", 8).await;
    sb.sup().tick().await;
    assert_eq!(sb.stats().await.missed, 5);
    assert!(alerts.try_next().is_none(), "at most one alert a minute");
    sb.clock.advance(Duration::from_secs(60));
    sb.sup().tick().await;
    sb.stats().await;
    let a = alerts.try_next().expect("the losses of the minute, said");
    let a = typed::decode::<xo_proto::alert::Alert>(&a, 1 << 20).unwrap();
    assert!(
        a.title
            .ends_with(", 2 missing from units' sequences, 0 shed under load"),
        "{}",
        a.title
    );
    // A restart (a new epoch) starts the sequence over: no gap.
    let mut again = report("gappy", 9);
    again.time.epoch += 1;
    again.time.seq = 1;
    sb.send(&again).await;
    xo_tests::until("the restarted unit's report taken", async || {
        sb.show("gappy")
            .await
            .is_ok_and(|d| d.summary.turn == 9)
            .then_some(())
    })
    .await;
    assert_eq!(sb.show("gappy").await.unwrap().summary.turn, 9);
    assert_eq!(sb.stats().await.missed, 5);
}

/// Issue 43, item 3: under overload the supervisor sheds deliberately.
/// With `supervisor.inbox_high = 1` a burst of one unit's reports waits
/// for its watcher group: past the mark a newer report replaces the older
/// one still waiting. Whatever the timing: the unit is judged on its
/// latest report, every report is either checked or counted as shed, and a
/// shed report is never counted as lost (no gap); shedding is said.
#[tokio::test]
async fn under_overload_a_units_latest_report_is_kept_and_the_superseded_counted() {
    let sb = Sandbox::start(&[("supervisor.inbox_high", "1")]).await;
    // Known (its route in the pump), then a burst without a pause.
    sb.send(&report("busy", 1)).await;
    sb.wait_seq("busy", 1).await;
    const N: u64 = 400;
    for seq in 2..=N {
        let mut r = report("busy", seq);
        r.activity.turns_since_progress = 0;
        typed::publish(&sb.client, &sb.subjects.salute("busy"), &r, Format::Msgpack)
            .await
            .unwrap();
    }
    sb.client.flush().await.unwrap();
    let st = latest_kept_and_every_report_accounted(&sb, "busy", N).await;
    println!("shed {} of {N} reports", st.shed);
    // Said with the losses (a log line and the reports_lost alert) when
    // any was shed; nothing said when none was.
    let mut alerts = sb
        .client
        .subscribe(&sb.subjects.alert(xo_proto::alert::AlertKind::ReportsLost))
        .await
        .unwrap();
    sb.client.flush().await.unwrap();
    sb.sup().tick().await;
    sb.stats().await;
    match (st.shed, alerts.try_next()) {
        (0, None) => {}
        (0, Some(_)) => panic!("an alert with nothing lost"),
        (n, Some(a)) => {
            let a = typed::decode::<xo_proto::alert::Alert>(&a, 1 << 20).unwrap();
            assert!(
                a.title.ends_with(&format!(", {n} shed under load")),
                "{}",
                a.title
            );
        }
        (n, None) => panic!("{n} reports shed and not said"),
    }
}

/// Issue 43, item 3: the report pump reads on a thread of its own. While
/// every worker of the supervisor's runtime is busy (here its one worker is
/// held), reports are still taken off the bus and the overload shed where
/// the supervisor chooses (the unit's latest report kept, the superseded
/// counted), not left waiting in the connection until it overflows. With
/// the pump as a task of that runtime none is read until the worker is
/// free, and the wait below never ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_report_pump_reads_while_every_worker_is_busy() {
    let sb =
        Sandbox::on(xo_tests::sandbox::Sandbox::embedded().with(&[("supervisor.inbox_high", "1")]))
            .await;
    // Known first (its route in the pump: no question to the root, whose
    // actor runs on the worker).
    sb.send(&report("busy", 1)).await;
    sb.wait_seq("busy", 1).await;
    let ctx = sb.sup().ctx.clone();
    let read_before = ctx
        .counters
        .reports
        .load(std::sync::atomic::Ordering::Relaxed);
    let free = hold_the_worker();
    const N: u64 = 200;
    for seq in 2..=N {
        // The in-process bus delivers as it is called: nothing here waits
        // for the held worker.
        sb.send(&report("busy", seq)).await;
    }
    xo_tests::eventually_blocking(
        "the pump read every report while the worker was held",
        || {
            ctx.counters
                .reports
                .load(std::sync::atomic::Ordering::Relaxed)
                - read_before
                == N - 1
        },
    );
    let shed = ctx.counters.shed.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        shed > 0,
        "an overload behind a busy group is shed, each unit's latest kept"
    );
    free.send(()).unwrap();
    latest_kept_and_every_report_accounted(&sb, "busy", N).await;
}

/// Issue 43, item 3: the report pump asks the root for new units' watchers
/// without waiting for its answer. The root's actor runs on the runtime's
/// one worker, held here: the pump asks for a thousand and more new units
/// at a time (one question for each would be thousands of round trips) and
/// reads on. Waiting for each answer, it would read nothing after the
/// first thousand or so (or the first, one unit at a time), and the wait
/// below would never end. Each unit's later reports wait behind its
/// first: once the worker is free, every report is checked in its unit's
/// order, those sent while the root answers too.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn new_units_are_welcomed_while_the_pump_reads_on() {
    let sb = Sandbox::on(xo_tests::sandbox::Sandbox::embedded()).await;
    let read = reports_read(&sb);
    let read_before = read();
    let free = hold_the_worker();
    let (units, turns) = (1500u64, 2u64);
    for turn in 1..=turns {
        for u in 0..units {
            sb.send(&report(&format!("new-{u}"), turn)).await;
        }
    }
    xo_tests::eventually_blocking(
        "the pump read every report while the root could not answer",
        || read() - read_before == units * turns,
    );
    free.send(()).unwrap();
    // Two more turns while the root answers, one welcome after another: a
    // unit whose first report has been handed over but whose second still
    // waits must not take a later one past it.
    let last = turns + 2;
    for turn in turns + 1..=last {
        for u in 0..units {
            sb.send(&report(&format!("new-{u}"), turn)).await;
        }
    }
    let all = units * last;
    let stats = xo_tests::until("every report checked or refused", async || {
        Some(sb.stats().await).filter(|s| s.evaluated + s.duplicates >= all)
    })
    .await;
    assert_eq!(
        stats.duplicates, 0,
        "reports overtook each other: {stats:?}"
    );
    assert_eq!(stats.evaluated, all, "{stats:?}");
    for u in [0, units / 2, units - 1] {
        assert_eq!(
            sb.show(&format!("new-{u}")).await.unwrap().summary.seq,
            last
        );
    }
}

/// Issue 43, item 3, on NATS: the report pump reads on a connection of its
/// own, made on its thread, so the connection's reading (what takes reports
/// off the socket) does not wait for the supervisor's runtime either. With
/// its one worker held, reports published by another process are all read
/// and the overload shed, the latest kept. With the pump reading the
/// supervisor's connection, whose reading task is the held runtime's, none
/// is read until the worker is free, and the wait below never ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn on_nats_the_report_pump_reads_on_a_connection_of_its_own_while_every_worker_is_busy() {
    let mut sb = Sandbox::start(&[("supervisor.inbox_high", "1")]).await;
    sb.send(&report("busy", 1)).await;
    sb.wait_seq("busy", 1).await;
    // The reports' subscription is the pump connection's, named after it,
    // and not the supervisor's own.
    let connz = sb.nats().monitor("/connz?subs=1");
    let subs_of = |name: &str| -> Vec<String> {
        let c = connz["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no connection named {name:?}: {connz}"));
        c["subscriptions_list"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let all = sb.subjects.salute_all();
    assert_eq!(subs_of("xo-supervisor (report pump)"), vec![all.clone()]);
    assert!(!subs_of("xo-supervisor").contains(&all));
    let ctx = sb.sup().ctx.clone();
    let read = reports_read(&sb);
    let read_before = read();
    let free = hold_the_worker();
    const N: u64 = 200;
    // Another process: a thread with a runtime of its own (this test's
    // runtime is the held one).
    let (url, subjects) = (sb.nats().url(), sb.subjects.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let bus = xo_bus::Bus::Nats(
                xo_bus::NatsBus::connect(&url, Default::default())
                    .await
                    .unwrap(),
            );
            for seq in 2..=N {
                let r = report("busy", seq);
                typed::publish(&bus, &subjects.salute("busy"), &r, Format::Msgpack)
                    .await
                    .unwrap();
            }
            bus.flush().await.unwrap();
        });
    })
    .join()
    .unwrap();
    xo_tests::eventually_blocking(
        "the pump read every report while the worker was held",
        || read() - read_before == N - 1,
    );
    let shed = ctx.counters.shed.load(std::sync::atomic::Ordering::Relaxed);
    assert!(shed > 0, "an overload behind a busy group is shed");
    free.send(()).unwrap();
    latest_kept_and_every_report_accounted(&sb, "busy", N).await;
    // The pump's connection closes with the supervisor.
    sb.stop_supervisor().await.unwrap();
    let nats = sb.nats();
    xo_tests::eventually_blocking("the pump's connection closed with the supervisor", || {
        !nats.monitor("/connz")["connections"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["name"] == "xo-supervisor (report pump)"))
    });
}

/// The supervisor's count of reports read off the bus, readable while its
/// runtime's workers are held.
fn reports_read(sb: &Sandbox) -> impl Fn() -> u64 + use<> {
    let ctx = sb.sup().ctx.clone();
    move || {
        ctx.counters
            .reports
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Holds the test runtime's one worker until the returned sender sends
/// (or is dropped); returns once it is held.
fn hold_the_worker() -> std::sync::mpsc::Sender<()> {
    let (free, held) = std::sync::mpsc::channel::<()>();
    let (holding, is_held) = std::sync::mpsc::channel::<()>();
    tokio::spawn(async move {
        let _ = holding.send(());
        let _ = held.recv();
    });
    is_held.recv().unwrap();
    free
}

/// `unit` sent reports 1..=`n`: its latest is the one its watcher holds,
/// and every report was read and then checked or shed, none lost.
async fn latest_kept_and_every_report_accounted(
    sb: &Sandbox,
    unit: &str,
    n: u64,
) -> xo_proto::control::StatsReply {
    let d = sb.wait_seq(unit, n).await;
    assert_eq!(d.summary.seq, n, "the latest report is the one kept");
    let st = sb.stats().await;
    assert_eq!(st.reports, n, "{st:?}");
    assert_eq!(
        st.evaluated + st.shed + st.duplicates,
        n,
        "every report checked or shed: {st:?}"
    );
    assert_eq!(st.missed, 0, "a shed report is not a lost one: {st:?}");
    st
}
