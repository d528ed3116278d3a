//! Issue 40, item 6: a jump of the host's wall clock, either way, by
//! minutes or a day, against a supervisor and a queue on a real
//! nats-server. Before, a supervisor 10 min behind refused every report,
//! +25 h forgot every live unit, the queue's clock +2 min expired live
//! leases and −1 h left a dead runner's task stuck.
//!
//! The wall clock is moved in this process (`xo_proto::shift_wall_clock`,
//! what `date -s` does to a running service): this binary holds only this
//! test, so nothing else runs under the moved clock.

use std::time::Duration;

use xo_bus::{Bus, typed};
use xo_fabric::Slot;
use xo_proto::control::{ShowUnit, UnitDetail};
use xo_proto::queue::{Claim, Claimed, Complete, Heartbeat, ValidationReport};
use xo_proto::{Format, SaluteReport, Subjects};
use xo_runtime::Clock;
use xo_tests::sandbox::Sandbox;

const T: Duration = Duration::from_secs(10);
const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;

async fn claim(bus: &Bus, who: &str) -> Option<Claimed> {
    xo_tests::ctl::call(
        bus,
        &Claim {
            role: "coder".into(),
            claimant: who.into(),
            wait_ms: 0,
        },
    )
    .await
    .unwrap()
}

async fn heartbeat(bus: &Bus, c: &Claimed) -> Result<(), String> {
    xo_tests::ctl::call(
        bus,
        &Heartbeat {
            task_id: c.record.task.task_id.clone(),
            token: c.token.clone(),
            claimant: String::new(),
            checkpoint: false,
            usage: Default::default(),
        },
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

async fn show(bus: &Bus, subjects: &Subjects, unit: &str) -> Option<UnitDetail> {
    typed::call(bus, subjects, &ShowUnit { unit: unit.into() }, T)
        .await
        .ok()
}

/// Publishes `seq` of unit `u1` (its process started at `epoch` by its own
/// clock) and says whether the supervisor took it.
async fn reported(bus: &Bus, subjects: &Subjects, epoch: u64, seq: u64) -> bool {
    let mut r = SaluteReport::new("u1", "coder", seq, seq);
    r.time.epoch = epoch;
    r.time.at = epoch + seq;
    typed::publish(bus, &subjects.salute("u1"), &r, Format::Msgpack)
        .await
        .unwrap();
    // Taken (its seq shown) or refused (counted), whichever the supervisor says.
    xo_tests::until(&format!("seq {seq} taken or refused"), async || {
        let d = show(bus, subjects, "u1").await?;
        if d.summary.seq >= seq {
            Some(true)
        } else {
            (d.summary.refused_reports > 0).then_some(false)
        }
    })
    .await
}

#[tokio::test]
async fn a_jump_of_the_wall_clock_either_way_changes_nothing_that_lives() {
    // The system clock: what jumps here is the host's wall clock.
    let mut sb = Sandbox::nats()
        .clock(Clock::System)
        .with(&[
            ("queue.lease_ms", "5000"),
            ("supervisor.stale_after_ms", "30000"),
        ])
        .build()
        .await;
    sb.start(&[Slot::Queue, Slot::Supervisor]).await;
    let (client, subjects) = (sb.bus.clone(), sb.subjects.clone());
    let queue = sb.queue();
    let sup = sb.get::<xo_supervisor::SupervisorHandle>();
    xo_tests::ctl::begin(&client, xo_tests::ctl::tasks("t", 2)).await;

    // A live unit (its process started now, by the real clock) and a live
    // lease, heartbeated.
    let epoch = xo_proto::now_ms();
    assert!(reported(&client, &subjects, epoch, 1).await);
    let live = claim(&client, "r1").await.expect("a task to claim");
    let mut seq = 1;
    for (what, shift) in [("+2 min", 2 * MINUTE), ("+25 h", 25 * HOUR)] {
        heartbeat(&client, &live).await.unwrap();
        xo_proto::shift_wall_clock(shift);
        // Both services look at their clocks now (their own tickers do
        // the same every tick).
        queue.tick().await;
        sup.tick().await;
        let d = show(&client, &subjects, "u1")
            .await
            .unwrap_or_else(|| panic!("{what}: the live unit was forgotten"));
        assert!(!d.summary.stale, "{what}: the live unit went stale");
        heartbeat(&client, &live)
            .await
            .unwrap_or_else(|e| panic!("{what}: the live lease expired: {e}"));
        seq += 1;
        assert!(
            reported(&client, &subjects, epoch, seq).await,
            "{what}: a report refused"
        );
        xo_proto::shift_wall_clock(-shift);
    }

    // A supervisor ten minutes behind its units hears them.
    xo_proto::shift_wall_clock(-10 * MINUTE);
    seq += 1;
    assert!(
        reported(&client, &subjects, epoch, seq).await,
        "a supervisor 10 min behind refused the unit's report"
    );

    // A runner claims the other task and dies; the clock goes back an
    // hour: its lease still ends after lease_ms, and the task is offered
    // again.
    let dead = claim(&client, "r2").await.expect("the second task");
    xo_proto::shift_wall_clock(-HOUR);
    let again = xo_tests::until("the dead runner's task offered again", async || {
        heartbeat(&client, &live).await.unwrap();
        queue.tick().await;
        claim(&client, "r3").await
    })
    .await;
    assert_eq!(again.record.task.task_id, dead.record.task.task_id);
    assert!(again.record.attempt > dead.record.attempt);
    xo_proto::shift_wall_clock(HOUR + 10 * MINUTE);

    // The live lease was held throughout.
    xo_tests::ctl::call(
        &client,
        &Complete {
            usage: Default::default(),
            task_id: live.record.task.task_id.clone(),
            token: live.token.clone(),
            claimant: String::new(),
            report: ValidationReport {
                passed: true,
                summary: "done".into(),
                ..Default::default()
            },
            manager_reply: None,
            exchange: None,
            diff: None,
        },
    )
    .await
    .unwrap();
    sb.stop_all().await.unwrap();
}
