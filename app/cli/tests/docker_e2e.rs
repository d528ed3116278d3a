//! End to end on the real Docker engine, from the local images: NATS, the
//! queue and the supervisor (with its fleet manager) each in a container,
//! three scripted runners created by the fleet manager. A runner is killed
//! mid-task (restarted, the task completes), another is cut off the network
//! (marked stale, its task replayed elsewhere), NATS is stopped for 10 s
//! (everything reconnects), the goal completes, and teardown leaves no
//! container, network or volume behind. Prints the figures.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use xo_bus::{Bus, NatsBus};
use xo_proto::Subjects;
use xo_proto::control::ListUnits;
use xo_proto::queue::*;
use xo_tests::docker::{quiet as docker_ok, remove_org, run as docker};

/// Removes everything of this run, however the test ends.
struct Env {
    name: String,
}

impl Drop for Env {
    fn drop(&mut self) {
        let n = &self.name;
        // A failed run shows what the services and the runners said last.
        if std::thread::panicking() {
            let runners = Command::new("docker")
                .args(["ps", "-a", "--filter", &format!("label=xo.org={n}")])
                .args(["--format", "{{.Names}}"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let services = ["queue", "supervisor", "nats"].map(|c| format!("{n}-{c}"));
            for c in services.iter().map(String::as_str).chain(runners.lines()) {
                if let Ok(o) = Command::new("docker")
                    .args(["logs", "--tail", "40", c])
                    .output()
                {
                    eprintln!(
                        "--- {c}:\n{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            }
        }
        // The supervisor first: its fleet manager would recreate runners.
        docker_ok(&["rm", "-f", &format!("{n}-supervisor")]);
        remove_org(n);
        for c in ["nats", "queue", "supervisor"] {
            docker_ok(&["rm", "-f", &format!("{n}-{c}")]);
        }
        docker_ok(&["network", "rm", &format!("{n}-net")]);
        docker_ok(&["volume", "rm", &format!("{n}-shared"), &format!("{n}-nats")]);
    }
}

fn script(body: &str) -> String {
    format!("```xo-script\nturn_ms = 100\n{body}\n```\n")
}

const OK: &str = r#"{ reply = '{"status": "ok", "message": "done"}' }"#;

fn tasks() -> Vec<Task> {
    let mut v = Vec::new();
    for i in 1..=4 {
        let mut t = Task::new(
            format!("quick-{i}"),
            "quick",
            script(&format!(
                "[[run]]\nsteps = [{{ write = \"q{i}.txt\", content = \"q\" }}, {OK}]"
            )),
            "coder",
        );
        t.acceptance_criteria = vec![format!("file exists: q{i}.txt")];
        v.push(t);
    }
    v.push(slow("slow-kill"));
    v
}

/// Long enough to be interrupted; replayed from scratch after a rollback.
fn slow(id: &str) -> Task {
    {
        let mut t = Task::new(
            id,
            "slow",
            script(&format!(
                "[[run]]\nsteps = [{{ stall = 3 }}, {{ sleep_ms = 6000 }}, {{ write = \"{id}.txt\", content = \"x\" }}, {OK}]"
            )),
            "coder",
        );
        t.acceptance_criteria = vec![format!("file exists: {id}.txt")];
        t
    }
}

async fn call<R: xo_proto::Request>(bus: &Bus, s: &Subjects, r: &R) -> Option<R::Response> {
    xo_bus::Client::new(bus.clone(), s.clone())
        .with_timeout(Duration::from_secs(3))
        .call(r)
        .await
        .ok()
}

async fn task(bus: &Bus, s: &Subjects, id: &str) -> Option<TaskRecord> {
    call(bus, s, &ListTasks::default())
        .await?
        .into_iter()
        .find(|r| r.task.task_id == id)
}

/// Containers start slowly: [`xo_tests::within`] the containers' guard.
async fn wait<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    match xo_tests::within(xo_tests::CONTAINER_GUARD, f).await {
        Some(v) => v,
        None => panic!("never happened: {what}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fabric_in_containers_survives_kill_partition_and_a_nats_outage() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The images, from the xo binary this test was built with.
    let out = Command::new(root.join("deploy/docker/build"))
        .arg("--binary")
        .arg(xo_tests::launcher::bin())
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "image build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = format!("xoe{}", std::process::id());
    let env = Env { name: n.clone() };
    let net = format!("{n}-net");
    let shared = format!("{n}-shared");
    docker(&["network", "create", &net]);
    docker(&["volume", "create", &shared]);
    let port = xo_tests::free_port();
    docker(&[
        "run",
        "-d",
        "--name",
        &format!("{n}-nats"),
        "--network",
        &net,
        "--network-alias",
        "nats",
        "-p",
        &format!("127.0.0.1:{port}:4222"),
        "-v",
        &format!("{n}-nats:/data"),
        "xo-nats:latest",
        "-js",
        "-sd",
        "/data",
        "-m",
        "8222",
    ]);
    let cfg_dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"[org]
prefix = "{n}"
[supervisor]
stale_after_ms = 3000
tick_ms = 250
[queue]
lease_ms = 3000
data_dir = "/data/logs"
[fleet]
backend = "docker"
image = "xo:latest"
network = "{net}"
binds = ["{shared}:/data"]
env = ["XO_NATS_URL=nats://nats:4222", "XO__ORG__PREFIX={n}", "XO__RUNNER__SANDBOX=/data/sandbox", "XO__QUEUE__DATA_DIR=/data/logs", "XO__RUNNER__MICROCOSM=false", "XO__RUNNER__DRIVER__SCRIPT=inline", "XO__RUNNER__HEARTBEAT_MS=500", "XO__RUNNER__CLAIM_WAIT_MS=300", "RUST_LOG=info"]
max_restarts = 5
restart_window_ms = 60000
reconcile_ms = 500
[fleet.runners]
coder = 3
"#
    );
    std::fs::write(cfg_dir.path().join("xo.toml"), toml).unwrap();
    let conf = format!("{}:/etc/xo:ro", cfg_dir.path().display());
    for svc in ["queue", "supervisor"] {
        let mut args = vec![
            "run".to_string(),
            "-d".into(),
            "--name".into(),
            format!("{n}-{svc}"),
            "--network".into(),
            net.clone(),
            "-v".into(),
            format!("{shared}:/data"),
            "-v".into(),
            conf.clone(),
            "-e".into(),
            "XO_NATS_URL=nats://nats:4222".into(),
            "-e".into(),
            "RUST_LOG=info".into(),
        ];
        if svc == "supervisor" {
            // The image runs as a non-root user: the socket's group lets it
            // manage runner containers.
            let gid = std::fs::metadata("/var/run/docker.sock")
                .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
                .unwrap_or(0);
            args.extend([
                "-v".into(),
                "/var/run/docker.sock:/var/run/docker.sock".into(),
                "--group-add".into(),
                gid.to_string(),
            ]);
        }
        args.extend([
            "xo:latest".into(),
            "--config".into(),
            "/etc/xo/xo.toml".into(),
            "serve".into(),
            svc.into(),
        ]);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&a);
    }
    let bus = Bus::Nats(
        NatsBus::connect(
            &format!("nats://127.0.0.1:{port}"),
            xo_bus::nats::ConnectOptions {
                retry_initial: true,
                ..Default::default()
            },
        )
        .await
        .unwrap(),
    );
    let s = Subjects::new(&n);
    wait("the queue answers", async || {
        call(&bus, &s, &Init::default()).await
    })
    .await;
    call(
        &bus,
        &s,
        &SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "containers".into(),
            project_id: None,
            completed: true,
        },
    )
    .await
    .unwrap();
    // Three runners from the fleet manager, reporting to the XO.
    wait("three runners report", async || {
        let u = call(&bus, &s, &ListUnits::default()).await?;
        (u.iter().filter(|x| !x.stale).count() >= 3).then_some(())
    })
    .await;
    call(&bus, &s, &Enqueue::new(tasks())).await.unwrap();
    let started = Instant::now();
    call(&bus, &s, &Start::default()).await.unwrap();
    let mut figures: BTreeMap<&str, f64> = BTreeMap::new();

    // 1. Kill the runner holding slow-kill mid-task.
    let victim = wait("slow-kill runs", async || {
        let r = task(&bus, &s, "slow-kill").await?;
        (r.state == TaskState::Running)
            .then(|| r.lease.map(|l| l.claimant))
            .flatten()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_at = Instant::now();
    docker(&["kill", &format!("xo-{n}-{victim}")]);
    wait("the fleet restarts the killed runner", async || {
        let st = docker(&[
            "inspect",
            "-f",
            "{{.State.Running}} {{.RestartCount}} {{.State.StartedAt}}",
            &format!("xo-{n}-{victim}"),
        ]);
        st.starts_with("true").then_some(())
    })
    .await;
    figures.insert(
        "kill: runner running again (s)",
        killed_at.elapsed().as_secs_f64(),
    );
    let r = wait("slow-kill completes after the kill", async || {
        let r = task(&bus, &s, "slow-kill").await?;
        (r.state == TaskState::Completed).then_some(r)
    })
    .await;
    assert!(r.attempt >= 2, "replayed after the kill: {r:?}");
    figures.insert(
        "kill: task completed (s)",
        killed_at.elapsed().as_secs_f64(),
    );

    // 2. Cut the runner holding slow-net off the network.
    call(&bus, &s, &Enqueue::new(vec![slow("slow-net")]))
        .await
        .unwrap();
    // The first tasks may all be done: the queue completed; run again.
    call(&bus, &s, &Start::default()).await.unwrap();
    let cut = wait("slow-net runs", async || {
        let r = task(&bus, &s, "slow-net").await?;
        (r.state == TaskState::Running)
            .then(|| r.lease.map(|l| l.claimant))
            .flatten()
    })
    .await;
    let cut_at = Instant::now();
    docker(&["network", "disconnect", &net, &format!("xo-{n}-{cut}")]);
    wait("the XO marks the cut runner stale", async || {
        let u = call(&bus, &s, &ListUnits::default()).await?;
        u.iter().any(|x| x.unit == cut && x.stale).then_some(())
    })
    .await;
    figures.insert(
        "partition: marked stale (s)",
        cut_at.elapsed().as_secs_f64(),
    );
    let r = wait("slow-net is finished by another runner", async || {
        let r = task(&bus, &s, "slow-net").await?;
        (r.state == TaskState::Completed).then_some(r)
    })
    .await;
    assert!(r.attempt >= 2, "{r:?}");
    figures.insert(
        "partition: task completed elsewhere (s)",
        cut_at.elapsed().as_secs_f64(),
    );
    docker(&["network", "connect", &net, &format!("xo-{n}-{cut}")]);

    // 3. Stop NATS for 10 s with work queued; everything reconnects.
    let mut more = Vec::new();
    for i in 5..=7 {
        more.push(Task::new(
            format!("after-{i}"),
            "after",
            script(&format!("[[run]]\nsteps = [{OK}]")),
            "coder",
        ));
    }
    call(&bus, &s, &Enqueue::new(more)).await.unwrap();
    call(&bus, &s, &Start::default()).await.unwrap();
    docker(&["stop", &format!("{n}-nats")]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let back = Instant::now();
    docker(&["start", &format!("{n}-nats")]);
    let client = xo_bus::Client::new(bus.clone(), s.clone()).with_timeout(Duration::from_secs(3));
    let st = xo_tests::ctl::goal_completed(&client, xo_tests::CONTAINER_GUARD)
        .await
        .expect("never happened: the goal completes after the outage");
    figures.insert(
        "nats outage: goal completed after restart (s)",
        back.elapsed().as_secs_f64(),
    );
    figures.insert("whole goal (s)", started.elapsed().as_secs_f64());
    assert_eq!(st.counts.get("completed"), Some(&9), "{:?}", st.counts);
    // The audit chain of the run is in the shared volume, read from a container.
    let verify = docker(&[
        "run",
        "--rm",
        "--network",
        &net,
        "-e",
        "XO_NATS_URL=nats://nats:4222",
        "-v",
        &format!("{shared}:/data"),
        "-e",
        &format!("XO__ORG__PREFIX={n}"),
        "-e",
        "XO__QUEUE__DATA_DIR=/data/logs",
        "xo:latest",
        "audit",
        "verify",
    ]);
    assert!(
        verify.contains("chain intact") && verify.contains("the same"),
        "the file and the JetStream copy agree: {verify}"
    );

    for (k, v) in &figures {
        println!("figure: {k}: {v:.1}");
    }
    drop(bus);
    drop(env);
    let left = docker(&["ps", "-a", "--filter", &format!("label=xo.org={n}"), "-q"]);
    assert!(left.is_empty(), "containers left: {left}");
    assert!(
        !docker(&["network", "ls", "--format", "{{.Name}}"])
            .lines()
            .any(|l| l == net)
    );
    assert!(
        !docker(&["volume", "ls", "--format", "{{.Name}}"])
            .lines()
            .any(|l| l.starts_with(&n))
    );
}
