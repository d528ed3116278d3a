//! Sharded supervisors: three `xo serve supervisor` share 3,000 simulated
//! units over twelve partitions, on a nats-server configured by
//! `xo nats-config --partitions 12` (passwords and all). One is SIGKILLed
//! while anomalies are being steered; every unit is steered exactly once
//! (the dead one's units by the supervisors taking its partitions over,
//! from the state it wrote before each steering); the take-over time is
//! printed. The killed one comes back under its name and gets its
//! partitions handed back, with the units' cooldowns and without losing a
//! report sent meanwhile: the same anomaly reported again is not steered
//! again. The control API answers from any
//! instance: the whole unit list, counters summed, an operator's steering
//! for a unit another instance holds.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};
use xo_tests::launcher::Xo;

use xo_bus::{Bus, NatsBus, NatsStore, Store, typed};
use xo_proto::codec::Format;
use xo_proto::control::{ListUnits, SteerUnit, SupervisorStats};
use xo_proto::{AnomalyKind, SaluteReport, Severity, Steering, Subjects, partition_of};
use xo_tests::NatsServer;
use xo_tests::procs::Procs;

const UNITS: usize = 3000;
const PARTITIONS: u32 = 12;
const LEASE_MS: u64 = 1500;
const T: Duration = Duration::from_secs(10);

fn unit(i: usize) -> String {
    format!("u{i:04}")
}

fn report(i: usize, turn: u64, seq: u64, fill: f64) -> SaluteReport {
    let mut r = SaluteReport::new(unit(i), "coder", turn, seq);
    r.size.context_limit = 100_000;
    r.size.context_fill = fill;
    r
}

fn supervisor(url: &str, name: &str) -> Command {
    let mut c = Xo::new().command(&[]);
    c.args(["serve", "supervisor", "--nats", url])
        .env("XO__SUPERVISOR__PARTITIONS", PARTITIONS.to_string())
        .env("XO__SUPERVISOR__PARTITION_LEASE_MS", LEASE_MS.to_string())
        .env("XO__SUPERVISOR__INSTANCE", name)
        // The rounds report only the units not steered yet, and the
        // hand-back waits for the counters to settle: on a loaded machine a
        // unit steered early is silent for longer than the default 30 s,
        // and its stale steering is not what this test is about.
        .env("XO__SUPERVISOR__STALE_AFTER_MS", "3600000")
        .env("RUST_LOG", "info");
    c
}

/// Who holds each partition now.
async fn holders(store: &Store) -> BTreeMap<u32, String> {
    xo_supervisor::shard::holders(store, PARTITIONS)
        .await
        .unwrap()
}

/// Waits until every partition is held by the member of `members` it prefers.
async fn settled(store: &Store, members: &[&str], procs: &Procs) -> BTreeMap<u32, String> {
    // Each partition with the member rendezvous hashing prefers: no
    // hand-over left to happen.
    let names: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    let want: BTreeMap<u32, String> = (0..PARTITIONS)
        .map(|k| {
            (
                k,
                xo_supervisor::shard::preferred(&names, k, PARTITIONS)
                    .unwrap()
                    .clone(),
            )
        })
        .collect();
    let settled = xo_tests::within(xo_tests::HANG_GUARD, async || {
        Some(holders(store).await).filter(|h| *h == want)
    })
    .await;
    if let Some(h) = settled {
        return h;
    }
    panic!(
        "partitions never settled on {members:?}: {:?}\n{}",
        holders(store).await,
        procs.logs(30)
    );
}

/// The supervisors' counters once `done` holds, or the last ones read when
/// `guard` has passed (the caller asserts on them): a bound in time, not in
/// looks, so a slow machine is given the same time.
async fn stats_when(
    bus: &Bus,
    guard: Duration,
    done: impl Fn(&xo_proto::control::StatsReply) -> bool,
) -> xo_proto::control::StatsReply {
    let mut last = Default::default();
    let held = xo_tests::within(guard, async || {
        last = typed::call(bus, &Subjects::default(), &SupervisorStats {}, T)
            .await
            .unwrap();
        done(&last).then(|| last.clone())
    })
    .await;
    held.unwrap_or(last)
}

/// A report from each unit `only` picks, each with the unit's next
/// sequence number (so a gap the supervisors see is a report lost).
async fn publish_all(
    bus: &Bus,
    turn: u64,
    seqs: &mut [u64],
    fill: f64,
    only: impl Fn(usize) -> bool,
) {
    let subjects = Subjects::default();
    for i in (0..UNITS).filter(|i| only(*i)) {
        typed::publish(
            bus,
            &subjects.salute(&unit(i)),
            &report(
                i,
                turn,
                {
                    seqs[i] += 1;
                    seqs[i]
                },
                fill,
            ),
            Format::Msgpack,
        )
        .await
        .unwrap();
    }
    bus.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_supervisors_steer_every_anomaly_once_through_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let made = Xo::new()
        .command(&[])
        .args(["nats-config", "--partitions", &PARTITIONS.to_string()])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, &made.stdout).unwrap();
    let nats = NatsServer::start_with_env(
        Some(conf),
        &[
            ("XO_NATS_PASSWORD_SUPERVISOR", "sup-pw"),
            ("XO_NATS_PASSWORD_OPERATOR", "op-pw"),
            ("XO_NATS_PASSWORD_QUEUE", "q"),
            ("XO_NATS_PASSWORD_KNOWLEDGE", "k"),
            ("XO_NATS_PASSWORD_CONSOLE", "c"),
        ],
    );
    let sup_url = format!("nats://supervisor:sup-pw@127.0.0.1:{}", nats.port());
    let op_url = format!("nats://operator:op-pw@127.0.0.1:{}", nats.port());
    let bus = Bus::Nats(NatsBus::connect(&op_url, Default::default()).await.unwrap());
    let Bus::Nats(nb) = &bus else { unreachable!() };
    let store = Store::Nats(NatsStore::new(nb.client().clone(), "xo"));
    let subjects = Subjects::default();
    let mut steer_sub = bus.subscribe(&subjects.steer_all()).await.unwrap();

    // A supervisor that asks for partitions from a server without the
    // mapping refuses to start, and says what to do.
    let plain = NatsServer::start();
    let o = supervisor(&plain.url(), "lonely")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("does not partition XO's subjects") && err.contains("--partitions 12"),
        "{err}"
    );

    let mut procs = Procs::new(dir.path().to_path_buf());
    for name in ["s1", "s2", "s3"] {
        procs.start(name, supervisor(&sup_url, name));
    }
    let before = settled(&store, &["s1", "s2", "s3"], &procs).await;

    // Every unit reports, healthy: each is known to exactly one supervisor,
    // and the shared API shows all of them. (Units the supervisors do not
    // know yet report again.)
    let mut stats = Default::default();
    let mut seqs = vec![0u64; UNITS];
    let mut missing: Vec<usize> = (0..UNITS).collect();
    for _ in 0..20 {
        publish_all(&bus, 1, &mut seqs, 0.1, |i| missing.contains(&i)).await;
        // Two seconds a round, then the units still unknown report again.
        stats = stats_when(&bus, Duration::from_secs(2), |s| s.units == UNITS as u64).await;
        let known: std::collections::BTreeSet<String> = typed::all_units(&bus, &subjects, T)
            .await
            .unwrap()
            .into_iter()
            .map(|u| u.unit)
            .collect();
        missing.retain(|i| !known.contains(&unit(*i)));
        if missing.is_empty() {
            break;
        }
    }
    assert_eq!(stats.units, UNITS as u64, "{stats:?}\n{}", procs.logs(40));
    // Each report published is checked once. On a loaded machine a unit
    // may be listed late and report again (a report of its own, with its
    // next seq): what is counted is what was published, not one a unit.
    // (Fixed after a fresh-clone run under load saw 3249 for 3000 units.)
    let published: u64 = seqs.iter().sum();
    // (Up to the hang guard: two cores shared with other tests'
    // supervisors took longer than the ten seconds this once waited.)
    let stats = stats_when(&bus, xo_tests::HANG_GUARD, |s| s.evaluated >= published).await;
    assert_eq!(stats.evaluated, published, "each report checked once");
    let listed = typed::all_units(&bus, &subjects, T).await.unwrap();
    assert_eq!(listed.len(), UNITS);
    assert!(listed.windows(2).all(|w| w[0].unit < w[1].unit));
    let page = typed::call(&bus, &subjects, &ListUnits::page(Some(unit(99))), T)
        .await
        .unwrap();
    assert_eq!(page.len(), ListUnits::PAGE);
    assert_eq!(page[0].unit, unit(100));
    assert!(
        steer_sub.try_next().is_none(),
        "healthy reports are not steered"
    );

    // An operator's steering for units of every supervisor, whichever
    // instance answers the request.
    for i in 0..12 {
        let s = typed::call(
            &bus,
            &subjects,
            &SteerUnit {
                unit: unit(i),
                message: "rebase on main".into(),
                severity: Severity::Warning,
                by: String::new(),
            },
            T,
        )
        .await
        .unwrap();
        assert_eq!(s.unit, unit(i));
        let m = tokio::time::timeout(T, steer_sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.subject, subjects.steer(&unit(i)));
    }

    // Half the units report a full context; once s2 has steered some of
    // its units, it is SIGKILLed. From then on every unit reports a full
    // context (the same turn, again and again, as an agent stuck on it
    // would) until steered, and four more times after: a unit steered by s2
    // just before it died must not be steered again by its new holder.
    let dead: Vec<u32> = before
        .iter()
        .filter(|(_, h)| *h == "s2")
        .map(|(k, _)| *k)
        .collect();
    assert!(!dead.is_empty(), "{before:?}");
    let of_dead = |i: usize| dead.contains(&partition_of(&unit(i), PARTITIONS));
    let mut steered: BTreeMap<String, Vec<Steering>> = BTreeMap::new();
    let record = |m: xo_bus::Message, steered: &mut BTreeMap<String, Vec<Steering>>| {
        let s: Steering = typed::decode(&m, 1 << 20).unwrap();
        let i: usize = s.unit[1..].parse().unwrap();
        steered.entry(s.unit.clone()).or_default().push(s);
        i
    };
    publish_all(&bus, 2, &mut seqs, 0.97, |i| i % 2 == 0).await;
    let mut by_s2_before = 0;
    while by_s2_before < 20 {
        let m = tokio::time::timeout(T, steer_sub.next())
            .await
            .expect("steering for the first anomalies")
            .unwrap();
        if of_dead(record(m, &mut steered)) {
            by_s2_before += 1;
        }
    }
    let missed_at_kill = typed::call(&bus, &subjects, &SupervisorStats {}, T)
        .await
        .unwrap()
        .missed;
    procs.kill("s2");
    let killed = Instant::now();
    let killed_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut takeover = None;
    let mut rounds_after = 0;
    let mut rounds = 0;
    while rounds_after < 4 {
        rounds += 1;
        let all = steered.len() == UNITS;
        publish_all(&bus, 2, &mut seqs, 0.97, |i| {
            all || !steered.contains_key(&unit(i))
        })
        .await;
        if all {
            rounds_after += 1;
        }
        let round = Instant::now();
        while round.elapsed() < Duration::from_millis(300) {
            let Ok(Some(m)) =
                tokio::time::timeout(Duration::from_millis(50), steer_sub.next()).await
            else {
                continue;
            };
            let i = record(m, &mut steered);
            // Decided after the kill (s2's last ones may still arrive): by
            // a new holder.
            let decided = steered[&unit(i)].last().unwrap().at;
            if takeover.is_none() && of_dead(i) && decided > killed_ms {
                takeover = Some(killed.elapsed());
            }
        }
        assert!(
            rounds < 400,
            "{} of {UNITS} units steered after {rounds} rounds of reports\n{}",
            steered.len(),
            procs.logs(30)
        );
    }
    // Once for each unit: one steering id per unit. The same id may come
    // twice for a unit s2 recorded as steered but died before (or just
    // after) sending: its new holder sends it again, and the unit ignores
    // an id it had (`xo_pipeline::driver::Turns::push`).
    let twice: Vec<_> = steered
        .iter()
        .filter(|(_, v)| v.iter().any(|s| s.id != v[0].id))
        .collect();
    assert!(
        twice.is_empty(),
        "{} units steered more than once: {:?}",
        twice.len(),
        twice.first()
    );
    let resent: usize = steered.values().map(|v| v.len() - 1).sum();
    assert!(
        steered
            .iter()
            .filter(|(_, v)| v.len() > 1)
            .all(|(u, _)| of_dead(u[1..].parse().unwrap())),
        "only the dead supervisor's units may be sent again"
    );
    assert!(
        steered.values().all(|v| v[0].kind == AnomalyKind::Context),
        "the context anomaly is what was steered"
    );
    let after = settled(&store, &["s1", "s3"], &procs).await;
    // What was sent to s2's partitions while nobody checked them was kept
    // by the reports stream, and checked when they were taken over.
    let missed = typed::call(&bus, &subjects, &SupervisorStats {}, T)
        .await
        .unwrap()
        .missed;
    assert_eq!(
        missed, missed_at_kill,
        "reports lost in the take-over after a supervisor's death"
    );
    let takeover = takeover.expect("a unit of the killed supervisor was steered");
    println!(
        "sharded: {UNITS} units, {PARTITIONS} partitions, 3 supervisors, lease {LEASE_MS} ms: s2's {} partitions taken over; first steering of its units {:.2} s after the kill; every unit steered once ({resent} sent again under the same id by the new holders)",
        dead.len(),
        takeover.as_secs_f64()
    );
    for k in &dead {
        assert_ne!(after[k], "s2");
    }

    // s2 comes back: its partitions are handed back to it, state and all.
    procs.start("s2", supervisor(&sup_url, "s2"));
    // Its units keep reporting through the hand-back (each report a new
    // sequence number, the same anomaly on the same turn): what is lost in
    // the hand-over shows as gaps in their sequences.
    let missed_before = typed::call(&bus, &subjects, &SupervisorStats {}, T)
        .await
        .unwrap()
        .missed;
    let mut back = BTreeMap::new();
    let mut sent = 0u64;
    xo_tests::within(xo_tests::HANG_GUARD, async || {
        publish_all(&bus, 2, &mut seqs, 0.97, of_dead).await;
        sent += 1;
        back = holders(&store).await;
        (back == before).then_some(())
    })
    .await;
    assert_eq!(back, before, "the same partitions go back to s2");
    // Reports until s2 has surely subscribed to its partitions.
    for _ in 0..10 {
        publish_all(&bus, 2, &mut seqs, 0.97, of_dead).await;
        sent += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Once s2 has read its units' state, all of them are known again.
    let mut stats = stats_when(&bus, xo_tests::HANG_GUARD, |s| s.units == UNITS as u64).await;
    assert_eq!(stats.units, UNITS as u64, "{stats:?}");
    // The same anomaly again, on the same turn: checked by s2 (the
    // counters say so), and still in its cooldown.
    // (Once the reports of the hand-back are all checked: the counters
    // stand still.)
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s2 = typed::call(&bus, &subjects, &SupervisorStats {}, T)
            .await
            .unwrap();
        let still = s2.evaluated + s2.duplicates == stats.evaluated + stats.duplicates;
        stats = s2;
        if still {
            break;
        }
    }
    let evaluated = stats.evaluated;
    let n_dead = (0..UNITS).filter(|i| of_dead(*i)).count() as u64;
    publish_all(&bus, 2, &mut seqs, 0.97, of_dead).await;
    let now = stats_when(&bus, xo_tests::HANG_GUARD, |s| {
        s.evaluated >= evaluated + n_dead
    })
    .await;
    assert_eq!(
        now.evaluated,
        evaluated + n_dead,
        "s2 checked its units' reports"
    );
    let lost = now.missed - missed_before;
    println!(
        "hand-back to s2: {lost} of {} reports of its {n_dead} units lost in the hand-over (gaps in their sequences)",
        sent * n_dead
    );
    assert_eq!(
        lost, 0,
        "a hand-over to a live supervisor loses no report (it subscribes before it is seen)"
    );
    // Every steering since the take-over's rounds: a new decision (an id
    // the unit has not had) is a steering again in its cooldown. The same
    // id sent again is the resend of a decision a supervisor recorded but
    // may not have sent (the unit ignores an id it had), and only for s2's
    // units, as above; it may arrive late, under load, after the rounds.
    let mut again = Vec::new();
    let mut resent_late = 0;
    while let Some(m) = steer_sub.try_next() {
        let s: Steering = typed::decode(&m, 1 << 20).unwrap();
        let had = steered
            .get(&s.unit)
            .is_some_and(|v| v.iter().any(|o| o.id == s.id));
        if had && of_dead(s.unit[1..].parse().unwrap()) {
            resent_late += 1;
        } else {
            again.push(format!("{} {} turn {} at {}", s.unit, s.id, s.turn, s.at));
        }
    }
    println!("steering resent late under the same id: {resent_late}");
    assert!(
        again.is_empty(),
        "an anomaly in its cooldown was steered again after the hand-back: {} ({:?})\n{}",
        again.len(),
        again.iter().take(5).collect::<Vec<_>>(),
        procs.logs(20)
    );
    let summary = typed::all_units(&bus, &subjects, T).await.unwrap();
    assert!(
        summary.iter().all(|u| u.steering_sent >= 1),
        "every unit's steering count survived the hand-overs"
    );
}

/// A sharded supervisor whose NATS node dies reads on, once its client is
/// back, from where it was: the reports published meanwhile (into the
/// stream that keeps them, acknowledged by the two nodes left) are all
/// checked, none missing from the units' sequences. The supervisor is
/// given its node alone, so it is away until the node comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_supervisor_reads_on_after_its_node_comes_back() {
    const N: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let subjects = Subjects::default();
    let mut conf = String::from("mappings {\n");
    for (from, to) in subjects.partition_mappings(PARTITIONS) {
        conf.push_str(&format!("  \"{from}\": \"{to}\"\n"));
    }
    conf.push_str("}\n");
    let conf_path = dir.path().join("mappings.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut cluster = xo_tests::cluster::NatsCluster::start_with(3, Some(conf_path));
    let mut procs = Procs::new(dir.path().to_path_buf());
    procs.start("s1", {
        let mut c = supervisor(&cluster.node_url(2), "s1");
        c.env("XO__NATS__REPLICAS", "3")
            // Its partitions stay its own while its node is away.
            .env("XO__SUPERVISOR__PARTITION_LEASE_MS", "30000");
        c
    });
    let bus = Bus::Nats(
        NatsBus::connect(&cluster.node_url(0), Default::default())
            .await
            .unwrap(),
    );
    let Bus::Nats(nb) = &bus else { unreachable!() };
    let store = Store::Nats(NatsStore::new(nb.client().clone(), "xo"));
    settled(&store, &["s1"], &procs).await;
    // Acknowledged by the stream, retried under the same id as a runner does.
    let publish = |seq: u64| {
        let bus = bus.clone();
        let subjects = subjects.clone();
        async move {
            for i in 0..N {
                let r = report(i, seq, seq, 0.1);
                let (h, payload) = typed::encode(&r, Format::Msgpack).unwrap();
                let id = format!("{}.0.{seq}", unit(i));
                let mut tries = 0;
                while let Err(e) = bus
                    .publish_acked(
                        &subjects.salute(&unit(i)),
                        h.clone(),
                        payload.clone(),
                        &id,
                        T,
                    )
                    .await
                {
                    tries += 1;
                    assert!(tries < 60, "the stream never acknowledged {id}: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    };
    let evaluated = |want: u64| {
        let bus = bus.clone();
        async move {
            xo_tests::until(
                &format!("the supervisor checked {want} reports"),
                async || {
                    typed::call(&bus, &Subjects::default(), &SupervisorStats {}, T)
                        .await
                        .ok()
                        .filter(|s| s.evaluated >= want)
                },
            )
            .await
        }
    };
    publish(1).await;
    evaluated(N as u64).await;

    // Its node dies; two rounds are published to the other two.
    cluster.kill(2);
    let begun = Instant::now();
    publish(2).await;
    publish(3).await;
    cluster.restart(2);
    // And one after it is back: a round lost meanwhile would be a gap.
    publish(4).await;
    let s = evaluated(4 * N as u64).await;
    println!(
        "a sharded supervisor's node killed: {} reports published while it was away, all checked {:.1} s after the kill; {} missing, {} read twice",
        2 * N,
        begun.elapsed().as_secs_f64(),
        s.missed,
        s.duplicates
    );
    assert_eq!(s.missed, 0, "{s:?}");
    assert_eq!(s.evaluated, 4 * N as u64, "{s:?}");
}
