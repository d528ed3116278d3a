//! NATS security: the configuration `xo nats-config` generates, enforced by
//! a real nats-server. A runner's credentials can publish only its own
//! reports and heartbeats and subscribe only to its own steering; with them
//! the runner still works end to end (queue, steering, replies in its own inbox).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;
use xo_tests::launcher::Xo;

use xo_bus::{Bus, NatsBus, nats::ConnectOptions, typed};
use xo_proto::Subjects;
use xo_proto::queue::*;
use xo_tests::NatsServer;

const PASSWORDS: [(&str, &str); 7] = [
    ("XO_NATS_PASSWORD_SUPERVISOR", "sup-secret"),
    ("XO_NATS_PASSWORD_QUEUE", "queue-secret"),
    ("XO_NATS_PASSWORD_KNOWLEDGE", "know-secret"),
    ("XO_NATS_PASSWORD_OPERATOR", "op-secret"),
    ("XO_NATS_PASSWORD_CONSOLE", "console-secret"),
    ("XO_NATS_PASSWORD_CODER_1", "c1-secret"),
    ("XO_NATS_PASSWORD_CODER_2", "c2-secret"),
];

fn secured() -> (NatsServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = Xo::new()
        .command(&[])
        .args(["nats-config", "--runner", "coder-1", "--runner", "coder-2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, &out.stdout).unwrap();
    (NatsServer::start_with_env(Some(conf), &PASSWORDS), dir)
}

/// A raw NATS protocol session in verbose mode: every command is answered
/// with `+OK` or `-ERR '…'`, exactly as the server decided.
struct Raw {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Raw {
    fn connect(port: u16, user: &str, pass: &str) -> (Self, String) {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut info = String::new();
        r.read_line(&mut info).unwrap();
        assert!(info.starts_with("INFO"));
        let mut raw = Self { w: s, r };
        let first = raw.send(&format!(
            "CONNECT {{\"user\":\"{user}\",\"pass\":\"{pass}\",\"verbose\":true,\"pedantic\":false}}\r\n"
        ));
        (raw, first)
    }

    fn send(&mut self, cmd: &str) -> String {
        self.w.write_all(cmd.as_bytes()).unwrap();
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    fn publish(&mut self, subject: &str) -> String {
        self.send(&format!("PUB {subject} 2\r\nhi\r\n"))
    }

    fn subscribe(&mut self, subject: &str, sid: u32) -> String {
        self.send(&format!("SUB {subject} {sid}\r\n"))
    }
}

#[test]
fn a_runner_cannot_steer_or_read_another_unit() {
    let (nats, _dir) = secured();
    let (_, bad) = Raw::connect(nats.port(), "coder-1", "wrong");
    assert!(bad.contains("Authorization Violation"), "{bad}");
    let (mut c1, ok) = Raw::connect(nats.port(), "coder-1", "c1-secret");
    assert_eq!(ok, "+OK");
    // Its own reports, heartbeats and steering.
    assert_eq!(c1.publish("xo.salute.coder-1"), "+OK");
    assert_eq!(c1.publish("xo.heartbeat.coder-1"), "+OK");
    assert_eq!(c1.subscribe("xo.steer.coder-1", 1), "+OK");
    // Nobody else's.
    for subject in [
        "xo.steer.coder-2",
        "xo.salute.coder-2",
        "xo.ctl.supervisor.steer",
        "xo.ctl.queue.halt",
        "xo.ctl.knowledge.put",
    ] {
        let r = c1.publish(subject);
        assert!(
            r.contains("Permissions Violation for Publish"),
            "{subject}: {r}"
        );
    }
    for (i, subject) in ["xo.steer.coder-2", "xo.steer.>", "xo.salute.>", "_INBOX.>"]
        .iter()
        .enumerate()
    {
        let r = c1.subscribe(subject, 10 + i as u32);
        assert!(
            r.contains("Permissions Violation for Subscription"),
            "{subject}: {r}"
        );
    }
    // The console asks the services and reads the live subjects; it cannot
    // speak as a unit, steer around the supervisor, or read others' replies.
    let (mut con, ok) = Raw::connect(nats.port(), "console", "console-secret");
    assert_eq!(ok, "+OK");
    assert_eq!(con.publish("xo.ctl.queue.status"), "+OK");
    for (i, subject) in [
        "xo.salute.*",
        "xo.steer.*",
        "xo.event.>",
        "_INBOX_console.>",
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(con.subscribe(subject, 30 + i as u32), "+OK", "{subject}");
    }
    for subject in ["xo.salute.coder-1", "xo.steer.coder-1", "xo.event.task.t1"] {
        let r = con.publish(subject);
        assert!(
            r.contains("Permissions Violation for Publish"),
            "{subject}: {r}"
        );
    }
    let r = con.subscribe("_INBOX.>", 40);
    assert!(r.contains("Permissions Violation for Subscription"), "{r}");
    // The operator may do anything.
    let (mut op, ok) = Raw::connect(nats.port(), "operator", "op-secret");
    assert_eq!(ok, "+OK");
    assert_eq!(op.publish("xo.steer.coder-2"), "+OK");
}

fn serve(
    nats: &NatsServer,
    root: &std::path::Path,
    user: &str,
    pass: &str,
    args: &[&str],
) -> Child {
    Xo::new()
        .command(&[])
        .args(["--nats", &nats.url()])
        .args(args)
        .env("XO__NATS__USER", user)
        .env("XO__NATS__PASSWORD", pass)
        .env("XO__STATE__DIR", root.join("state"))
        .env("XO__QUEUE__DATA_DIR", root.join("data"))
        .env("XO__RUNNER__SANDBOX", root.join("sandbox"))
        .env("XO__RUNNER__CLAIM_WAIT_MS", "300")
        .env("XO__RUNNER__MICROCOSM", "false")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_credentials_a_runner_still_works_and_is_steered() {
    let (nats, dir) = secured();
    let root = dir.path();
    let mut children = vec![
        serve(&nats, root, "queue", "queue-secret", &["serve", "queue"]),
        serve(
            &nats,
            root,
            "supervisor",
            "sup-secret",
            &["serve", "supervisor"],
        ),
        serve(
            &nats,
            root,
            "coder-1",
            "c1-secret",
            &[
                "serve", "runner", "--script", "inline", "--role", "coder", "--unit", "coder-1",
            ],
        ),
    ];
    let opts = ConnectOptions {
        name: "operator".into(),
        user: Some("operator".into()),
        password: Some("op-secret".into()),
        ..Default::default()
    };
    let bus = Bus::Nats(NatsBus::connect(&nats.url(), opts).await.unwrap());
    let s = Subjects::default();
    let call_t = Duration::from_secs(3);
    xo_tests::until("the queue answered", async || {
        typed::call(&bus, &s, &Init::default(), call_t).await.ok()
    })
    .await;
    typed::call(
        &bus,
        &s,
        &SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "g".into(),
            project_id: None,
            completed: true,
        },
        call_t,
    )
    .await
    .unwrap();
    let mut t = Task::new(
        "loop",
        "build",
        "```xo-script\nturn_ms = 20\n[[run]]\nsteps = [{ repeat = 1000, tool = \"build\", args = \"x\", fail = \"compile_error\", until_steered = true }, { reply = '{\"status\": \"ok\", \"message\": \"changed approach\"}' }]\n```",
        "coder",
    );
    // Completes only if the XO's steering reached the runner through its permissions.
    t.acceptance_criteria = vec!["output contains: [steering received] [SUPERVISOR] Loop".into()];
    typed::call(&bus, &s, &Enqueue::new(vec![t]), call_t)
        .await
        .unwrap();
    typed::call(&bus, &s, &Start::default(), call_t)
        .await
        .unwrap();
    let done = xo_tests::within(xo_tests::HANG_GUARD, async || {
        typed::call(&bus, &s, &GetStatus {}, call_t)
            .await
            .ok()
            .filter(|st| st.status != RunStatus::Running)
    })
    .await;
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let st = done.expect("the goal finished");
    assert_eq!(st.status, RunStatus::Completed, "{st:?}");
    assert_eq!(st.counts.get("completed"), Some(&1));
}

/// `deploy/nats/<file>` is what `xo nats-config ARGS` prints.
fn assert_shipped(args: &[&str], file: &str) {
    let out = Xo::new()
        .command(&[])
        .arg("nats-config")
        .args(args)
        .output()
        .unwrap();
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../deploy/nats/{file}")),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        shipped,
        "regenerate deploy/nats/{file} with the command in docs/security.md and docs/scaling.md"
    );
}

#[test]
fn the_shipped_config_is_what_the_generator_prints() {
    assert_shipped(
        &[
            "--shared-runner",
            "runner",
            "--store-dir",
            "/data/jetstream",
        ],
        "nats.conf",
    );
}

#[test]
fn the_shipped_cluster_config_is_what_the_generator_prints() {
    assert_shipped(
        &[
            "--shared-runner",
            "runner",
            "--store-dir",
            "/data/jetstream",
            "--partitions",
            "12",
            "--cluster-route",
            "nats://nats:6222",
            "--cluster-route",
            "nats://nats-2:6222",
            "--cluster-route",
            "nats://nats-3:6222",
        ],
        "nats-cluster.conf",
    );
}

async fn connect_as(nats: &NatsServer, user: &str, pass: &str) -> Bus {
    let opts = ConnectOptions {
        name: user.into(),
        user: Some(user.into()),
        password: Some(pass.into()),
        inbox_prefix: Some(format!("_INBOX_{user}")),
        ..Default::default()
    };
    Bus::Nats(NatsBus::connect(&nats.url(), opts).await.unwrap())
}

/// Issue 23, item 1: a runner's credentials act only for its own unit.
/// Another runner can neither claim in its name, nor renew, complete or
/// block its lease, even holding its token; lease tokens are 128 random
/// bits; requests on a lease they do not hold are refused and, repeated,
/// alerted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_runner_can_act_for_another() {
    let (nats, dir) = secured();
    let mut queue = serve(
        &nats,
        dir.path(),
        "queue",
        "queue-secret",
        &["serve", "queue"],
    );
    let op = connect_as(&nats, "operator", "op-secret").await;
    let c1 = connect_as(&nats, "coder-1", "c1-secret").await;
    let c2 = connect_as(&nats, "coder-2", "c2-secret").await;
    let s = Subjects::default();
    let t = Duration::from_secs(3);
    xo_tests::until("the queue answers", async || {
        typed::call(&op, &s, &Init::default(), t).await.ok()
    })
    .await;
    let goal = SetGoal {
        by: Default::default(),
        budget_usd: 0.0,
        description: "g".into(),
        project_id: None,
        completed: false,
    };
    typed::call(&op, &s, &goal, t).await.unwrap();
    let tasks = vec![
        Task::new("a", "build", "do a", "coder"),
        Task::new("b", "build", "do b", "coder"),
    ];
    typed::call(&op, &s, &Enqueue::new(tasks), t).await.unwrap();
    typed::call(&op, &s, &Start::default(), t).await.unwrap();
    let mut alerts = op.subscribe("xo.event.alert.lease_refused").await.unwrap();
    op.flush().await.unwrap();

    // The server lets coder-2 use the claim path on its own subjects only.
    let (mut raw2, ok) = Raw::connect(nats.port(), "coder-2", "c2-secret");
    assert_eq!(ok, "+OK");
    assert_eq!(raw2.publish("xo.ctl.queue.claim.coder-2"), "+OK");
    for subject in [
        "xo.ctl.queue.claim.coder-1",
        "xo.ctl.queue.claim",
        "xo.ctl.queue.heartbeat.coder-1",
        "xo.ctl.queue.complete.coder-1",
        "xo.ctl.queue.block",
    ] {
        let r = raw2.publish(subject);
        assert!(
            r.contains("Permissions Violation for Publish"),
            "{subject}: {r}"
        );
    }
    // On its own subject, a body naming coder-1 is refused by the queue.
    let spoof = Claim {
        role: "coder".into(),
        claimant: "coder-1".into(),
        wait_ms: 0,
    };
    let err = typed::call_to(&c2, "xo.ctl.queue.claim.coder-2", &spoof, t)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("acts only for its own unit"), "{err}");

    // coder-1 claims on its subject: a 128-bit token, not the claim time.
    let claim = |unit: &str| Claim {
        role: "coder".into(),
        claimant: unit.into(),
        wait_ms: 0,
    };
    let got = typed::call(&c1, &s, &claim("coder-1"), t)
        .await
        .unwrap()
        .expect("a task for coder-1");
    let mine = typed::call(&c2, &s, &claim("coder-2"), t)
        .await
        .unwrap()
        .expect("a task for coder-2");
    for token in [&got.token, &mine.token] {
        assert_eq!(token.len(), 32, "{token}");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    }
    assert_ne!(got.token, mine.token);
    let id = got.record.task.task_id.clone();

    // coder-2 on coder-1's lease: guessed tokens, then coder-1's own token
    // (leaked): every one refused, naming the holder.
    for i in 0..6 {
        let token = if i == 5 {
            got.token.clone()
        } else {
            format!("{:032x}", i)
        };
        let hb = Heartbeat {
            task_id: id.clone(),
            token,
            claimant: "coder-2".into(),
            checkpoint: false,
            usage: Default::default(),
        };
        let err = typed::call(&c2, &s, &hb, t).await.unwrap_err().to_string();
        assert!(err.contains("leased to \"coder-1\""), "{err}");
    }
    let done = Complete {
        task_id: id.clone(),
        token: got.token.clone(),
        claimant: "coder-2".into(),
        report: ValidationReport {
            passed: true,
            ..Default::default()
        },
        manager_reply: None,
        usage: Default::default(),
        exchange: None,
        diff: None,
    };
    let err = typed::call(&c2, &s, &done, t)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("leased to \"coder-1\""), "{err}");
    // Five refusals from one claimant raise one alert naming it.
    let alert = tokio::time::timeout(Duration::from_secs(10), alerts.next())
        .await
        .expect("a lease_refused alert")
        .unwrap();
    let alert: xo_proto::alert::Alert = typed::decode(&alert, 1 << 20).unwrap();
    assert_eq!(alert.kind, xo_proto::alert::AlertKind::LeaseRefused);
    assert!(alert.title.starts_with("coder-2:"), "{}", alert.title);
    assert_eq!(alert.task_id.as_deref(), Some(id.as_str()));
    // coder-1 still holds its task and completes it.
    let done = Complete {
        claimant: "coder-1".into(),
        ..done
    };
    let rec = typed::call(&c1, &s, &done, t).await.unwrap();
    assert_eq!(rec.state, TaskState::Completed);
    let lease = rec.lease.clone();
    assert!(lease.is_none_or(|l| l.claimant == "coder-1"), "{rec:?}");
    let _ = queue.kill();
    let _ = queue.wait();
}
