//! `xo watch` on a directory whose transcripts are appended while it runs,
//! with the XO as its own process on a real nats-server: units appear, a
//! stalled session is steered (the steering waits for the session's hook),
//! a rotated file is followed, a file of another format is skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use xo_bus::{Bus, NatsBus, typed};
use xo_proto::Subjects;
use xo_proto::control::ListUnits;
use xo_tests::NatsServer;

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn xo(root: &Path, url: &str, name: &str, args: &[&str]) -> Child {
    let log = std::fs::File::create(root.join(format!("{name}.log"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_xo"))
        .current_dir(root)
        .args(["--nats", url, "--log-format", "json"])
        .args(args)
        .env("XO__STATE__DIR", root.join("state"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn read_turn(i: u32, cwd: &Path) -> String {
    let c = cwd.display();
    format!(
        "{{\"type\":\"assistant\",\"sessionId\":\"s-watch-1\",\"cwd\":\"{c}\",\"message\":{{\"id\":\"m{i}\",\"model\":\"claude-sonnet-4-5\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"t{i}\",\"name\":\"Read\",\"input\":{{\"file_path\":\"f.rs\"}}}}]}}}}\n\
         {{\"type\":\"user\",\"sessionId\":\"s-watch-1\",\"cwd\":\"{c}\",\"message\":{{\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"t{i}\",\"content\":\"contents of f{i}\"}}]}}}}\n"
    )
}

async fn units(bus: &Bus) -> Vec<xo_proto::control::UnitSummary> {
    typed::call(
        bus,
        &Subjects::default(),
        &ListUnits::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap_or_default()
}

/// Waits (bounded) until `f` holds; the bound is a hang guard, not a timing assertion.
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    logs: &Path,
    mut f: impl FnMut() -> F,
) {
    for _ in 0..600 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = |n: &str| std::fs::read_to_string(logs.join(format!("{n}.log"))).unwrap_or_default();
    panic!(
        "{what}\n--- watch\n{}\n--- supervisor\n{}",
        log("watch"),
        log("supervisor")
    );
}

/// Reports are core NATS: the XO must listen before a watch publishes.
async fn supervisor_answers(bus: &Bus, root: &Path) {
    eventually("the supervisor answers", root, || async {
        typed::call(
            bus,
            &Subjects::default(),
            &ListUnits::default(),
            Duration::from_secs(1),
        )
        .await
        .is_ok()
    })
    .await;
}

#[tokio::test]
async fn watch_supervises_live_transcripts() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let projects = root.join("projects").join("-work-parser");
    let project: PathBuf = root.join("work-parser");
    std::fs::create_dir_all(&projects).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let session = projects.join("s-watch-1.jsonl");
    std::fs::write(&session, read_turn(0, &project)).unwrap();
    // Another tool's log in the same folder: skipped with a warning.
    let other: String = (0..25)
        .map(|i| format!("{{\"event\":\"other-{i}\"}}\n"))
        .collect();
    std::fs::write(projects.join("not-claude.jsonl"), other).unwrap();

    let mut procs = Procs(vec![xo(root, &url, "supervisor", &["serve", "supervisor"])]);
    let bus = Bus::Nats(NatsBus::connect(&url, Default::default()).await.unwrap());
    // Reports are core NATS: the XO listens before the watch starts.
    supervisor_answers(&bus, root).await;
    let dir = root.join("projects").display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &["watch", "claude", &dir, "--poll-ms", "50"],
    ));

    eventually("the session is a unit", root, || async {
        units(&bus).await.iter().any(|u| u.unit == "s-watch-1")
    })
    .await;
    // The agent goes on reading the same file (a first look at a file is
    // progress, a look again is not; its contents change, so no loop):
    // appended while watched, past the agent role's 8 turns.
    for i in 1..=11 {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&session)
            .unwrap();
        f.write_all(read_turn(i, &project).as_bytes()).unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let pending = project.join(".xo/steering.pending");
    eventually(
        "the stalled session is steered through its hook's file",
        root,
        || async {
            std::fs::read_to_string(&pending).is_ok_and(|t| t.contains("[SUPERVISOR] Stall"))
        },
    )
    .await;
    let turn = units(&bus)
        .await
        .into_iter()
        .find(|u| u.unit == "s-watch-1")
        .unwrap()
        .turn;
    assert!(turn >= 8, "every turn reported: {turn}");

    // Rotated: the file starts again; the unit goes on.
    std::fs::write(&session, read_turn(20, &project)).unwrap();
    eventually("the rotated file is followed", root, || async {
        units(&bus)
            .await
            .iter()
            .any(|u| u.unit == "s-watch-1" && u.turn > turn)
    })
    .await;
    let watch_log = std::fs::read_to_string(root.join("watch.log")).unwrap();
    assert!(
        watch_log.contains("not-claude.jsonl") && watch_log.contains("skipped"),
        "{watch_log}"
    );
    assert!(watch_log.contains("truncated or rotated"), "{watch_log}");
    assert!(
        !units(&bus).await.iter().any(|u| u.unit == "not-claude"),
        "a file of another format is no unit"
    );
    drop(procs);
}

/// In containers: the XO's own process watches `[[supervisor.watch]]`.
#[tokio::test]
async fn the_supervisor_watches_what_its_config_names() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let sessions = root.join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let cfg = root.join("xo.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[supervisor.watch]]\nformat = \"claude\"\ndirs = [{:?}]\npoll_ms = 50\n",
            sessions.display().to_string()
        ),
    )
    .unwrap();
    let _procs = Procs(vec![xo(
        root,
        &url,
        "supervisor",
        &["--config", cfg.to_str().unwrap(), "serve", "supervisor"],
    )]);
    let bus = Bus::Nats(NatsBus::connect(&url, Default::default()).await.unwrap());
    supervisor_answers(&bus, root).await;
    std::fs::write(sessions.join("s-config.jsonl"), read_turn(0, root)).unwrap();
    eventually(
        "the session named by the config is a unit",
        root,
        || async { units(&bus).await.iter().any(|u| u.unit == "s-config") },
    )
    .await;
}

/// OpenHands keeps a session as a folder of event files, one JSON event a
/// file: each new file is read in order, the session is one unit.
#[tokio::test]
async fn watch_follows_openhands_event_directories() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let events = root.join("sessions").join("oh-session-9").join("events");
    std::fs::create_dir_all(&events).unwrap();
    let mut procs = Procs(vec![xo(root, &url, "supervisor", &["serve", "supervisor"])]);
    let bus = Bus::Nats(NatsBus::connect(&url, Default::default()).await.unwrap());
    supervisor_answers(&bus, root).await;
    let dir = root.join("sessions").display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &["watch", "openhands", &dir, "--poll-ms", "50"],
    ));
    // Four failing runs of the same command, written one event file at a time.
    for i in 0..4u32 {
        let (a, o) = (2 * i, 2 * i + 1);
        let action = format!(
            r#"{{"id":{a},"source":"agent","action":"run","args":{{"command":"pytest","thought":"try {i}"}}}}"#
        );
        std::fs::write(events.join(format!("{a}.json")), action).unwrap();
        let obs = format!(
            r#"{{"id":{o},"source":"agent","cause":{a},"observation":"run","content":"1 failed","extras":{{"metadata":{{"exit_code":1}}}}}}"#
        );
        // Pretty-printed, as OpenHands writes them.
        let pretty =
            serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&obs).unwrap())
                .unwrap();
        std::fs::write(events.join(format!("{o}.json")), pretty).unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    eventually(
        "every run of the session is a turn of its unit",
        root,
        || async {
            units(&bus)
                .await
                .iter()
                .any(|u| u.unit == "oh-session-9" && u.turn >= 4)
        },
    )
    .await;
    let sup = std::fs::read_to_string(root.join("supervisor.log")).unwrap();
    assert!(
        sup.contains("\"kind\":\"loop\""),
        "the same failing run is a loop: {sup}"
    );
}

#[test]
fn watch_says_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_xo"))
            .current_dir(tmp.path())
            .env_remove("XO_NATS_URL")
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["watch", "swe-agent", "."]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("import it with `xo import`"));
    let o = run(&["watch", "claude", "no-such-dir"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-dir is not a directory"));
    std::fs::write(
        tmp.path().join("bad.toml"),
        "[[supervisor.watch]]\nformat = \"aider\"\ndirs = [\".\"]\n",
    )
    .unwrap();
    let o = run(&["--config", "bad.toml", "units"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("supervisor.watch[0].format") && err.contains("\"aider\""),
        "{err}"
    );
}
