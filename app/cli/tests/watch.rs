//! `xo watch` on a directory whose transcripts are appended while it runs,
//! with the XO as its own process on a real nats-server: units appear, a
//! stalled session is steered (the steering waits for the session's hook),
//! a rotated file is followed, a file of another format is skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use xo_tests::launcher::Xo;

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
    xo_env(root, url, name, args, &[])
}

fn xo_env(root: &Path, url: &str, name: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    let log = std::fs::File::create(root.join(format!("{name}.log"))).unwrap();
    Xo::new()
        .command(&[])
        .current_dir(root)
        .args(["--nats", url, "--log-format", "json"])
        .args(args)
        .env("XO__STATE__DIR", root.join("state"))
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn read_turn(i: u32, cwd: &Path) -> String {
    session_turn("s-watch-1", i, cwd)
}

/// One turn of a Claude Code session that reads the same file again.
fn session_turn(session: &str, i: u32, cwd: &Path) -> String {
    let c = cwd.display();
    format!(
        "{{\"type\":\"assistant\",\"sessionId\":\"{session}\",\"cwd\":\"{c}\",\"message\":{{\"id\":\"m{i}\",\"model\":\"claude-sonnet-4-5\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"t{i}\",\"name\":\"Read\",\"input\":{{\"file_path\":\"f.rs\"}}}}]}}}}\n\
         {{\"type\":\"user\",\"sessionId\":\"{session}\",\"cwd\":\"{c}\",\"message\":{{\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"t{i}\",\"content\":\"contents of f{i}\"}}]}}}}\n"
    )
}

/// The row of `unit` in `xo units` (the table a person reads).
fn units_row(root: &Path, url: &str, unit: &str) -> String {
    let o = Xo::new()
        .command(&[])
        .current_dir(root)
        .args(["--nats", url, "units"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    table
        .lines()
        .find(|l| l.starts_with(unit))
        .unwrap_or_else(|| panic!("{table}"))
        .to_string()
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

/// The XO's supervisor (after `args`, with `env`) on the nats-server at
/// `url`, answering, and a client of that server. Reports are core NATS:
/// the XO listens before a watch starts.
async fn supervisor(root: &Path, url: &str, args: &[&str], env: &[(&str, &str)]) -> (Procs, Bus) {
    let args: Vec<&str> = args
        .iter()
        .copied()
        .chain(["serve", "supervisor"])
        .collect();
    let procs = Procs(vec![xo_env(root, url, "supervisor", &args, env)]);
    let bus = Bus::Nats(NatsBus::connect(url, Default::default()).await.unwrap());
    supervisor_answers(&bus, root).await;
    (procs, bus)
}

/// The watch (its log `name`) has read the sessions that were there when
/// it started: what is written from now on is reported.
async fn read_what_was_there(root: &Path, name: &str) {
    eventually("the watch has read what was there", root, || async {
        std::fs::read_to_string(root.join(format!("{name}.log")))
            .is_ok_and(|l| l.contains("sessions already there read"))
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

    let (mut procs, bus) = supervisor(root, &url, &[], &[]).await;
    let dir = root.join("projects").display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &["watch", "claude", &dir, "--poll-ms", "50"],
    ));

    // The watch starts at the end of what is there: the session is a unit
    // once it writes again.
    read_what_was_there(root, "watch").await;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&session)
        .unwrap()
        .write_all(read_turn(1, &project).as_bytes())
        .unwrap();
    eventually("the session is a unit", root, || async {
        units(&bus).await.iter().any(|u| u.unit == "s-watch-1")
    })
    .await;
    // The agent goes on reading the same file (a first look at a file is
    // progress, a look again is not; its contents change, so no loop):
    // appended while watched, past the agent role's 8 turns.
    for i in 2..=12 {
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

/// The end of a Claude Code turn as its transcript records it: the model's
/// last message (`stop_reason: end_turn`) and the turn's duration.
fn session_end(session: &str, cwd: &Path) -> String {
    let c = cwd.display();
    format!(
        "{{\"type\":\"assistant\",\"sessionId\":\"{session}\",\"cwd\":\"{c}\",\"message\":{{\"id\":\"m-end\",\"content\":[{{\"type\":\"text\",\"text\":\"Done.\"}}],\"stop_reason\":\"end_turn\"}}}}\n\
         {{\"type\":\"system\",\"subtype\":\"turn_duration\",\"durationMs\":5000,\"sessionId\":\"{session}\",\"cwd\":\"{c}\"}}\n"
    )
}

/// A session file of `turns` re-reads in `project`, ended or not.
fn session_file(dir: &Path, project: &Path, session: &str, turns: u32, ended: bool) {
    std::fs::create_dir_all(project).unwrap();
    let mut text: String = (0..turns)
        .map(|i| session_turn(session, i, project))
        .collect();
    if ended {
        text.push_str(&session_end(session, project));
    }
    std::fs::write(dir.join(format!("{session}.jsonl")), text).unwrap();
}

fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// Sessions already in the folder when the watch starts are history: a
/// finished one and an idle one are never reported nor steered. A session
/// that starts while watched is steered while it works and, once it ends,
/// is reported ended: silent as long as one that stopped mid-work (which
/// is stale), it is not stale and gets no steering.
#[tokio::test]
async fn watch_starts_at_the_end_and_never_steers_what_has_ended() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join("projects");
    std::fs::create_dir_all(&dir).unwrap();
    let project = |n: &str| root.join(format!("work-{n}"));
    // Both stall past the agent role's 8 turns without progress.
    session_file(&dir, &project("done"), "s-done", 12, true);
    session_file(&dir, &project("idle"), "s-idle", 12, false);

    let (mut procs, bus) = supervisor(
        root,
        &url,
        &[],
        &[("XO__SUPERVISOR__STALE_AFTER_MS", "1500")],
    )
    .await;
    let d = dir.display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &["watch", "claude", &d, "--poll-ms", "50"],
    ));
    read_what_was_there(root, "watch").await;

    // A session started while watched stalls, and is steered.
    session_file(&dir, &project("new"), "s-new", 1, false);
    let new = dir.join("s-new.jsonl");
    for i in 1..=11 {
        append(&new, &session_turn("s-new", i, &project("new")));
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let pending = |n: &str| project(n).join(".xo/steering.pending");
    eventually("the working session is steered", root, || async {
        std::fs::read_to_string(pending("new")).is_ok_and(|t| t.contains("[SUPERVISOR] Stall"))
    })
    .await;
    // It ends: reported ended.
    append(&new, &session_end("s-new", &project("new")));
    eventually("the ended session is reported ended", root, || async {
        units(&bus)
            .await
            .iter()
            .any(|u| u.unit == "s-new" && u.ended)
    })
    .await;
    // Another stops mid-work, after the first ended: it goes stale, and by
    // then the ended one has been silent longer.
    session_file(&dir, &project("cut"), "s-cut", 2, false);
    eventually("the session cut off mid-work is stale", root, || async {
        units(&bus)
            .await
            .iter()
            .any(|u| u.unit == "s-cut" && u.stale)
    })
    .await;
    let all = units(&bus).await;
    let ended = all.iter().find(|u| u.unit == "s-new").unwrap();
    assert!(ended.ended && !ended.stale, "ended, not stale: {ended:?}");
    let steering = std::fs::read_to_string(pending("new")).unwrap();
    assert!(!steering.contains("Stale"), "{steering}");
    assert!(
        !all.iter().any(|u| u.unit == "s-done" || u.unit == "s-idle"),
        "history is not reported: {all:?}"
    );
    for n in ["done", "idle"] {
        assert!(
            !pending(n).exists(),
            "no steering for a session that was there before the watch: {n}"
        );
    }
}

/// `--from-start` reports the history too (the XO decides on it) but
/// writes no steering for a session that has not written since the watch
/// started; a Codex session is the unit `xo import` names: its session id,
/// not its file.
#[tokio::test]
async fn from_start_reports_history_and_steers_none_of_it() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join("projects");
    std::fs::create_dir_all(&dir).unwrap();
    let project = root.join("work-old");
    session_file(&dir, &project, "s-old", 12, false);
    let codex = root.join("codex").join("2026").join("03").join("01");
    std::fs::create_dir_all(&codex).unwrap();
    let mut rollout = format!(
        "{{\"timestamp\":\"2026-03-01T10:00:00.000Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"019c-thread-7\",\"cwd\":{:?}}}}}\n",
        project.display().to_string()
    );
    for i in 0..3 {
        rollout.push_str(&format!(
            "{{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call\",\"name\":\"exec_command\",\"arguments\":\"{{\\\"cmd\\\":\\\"cargo build\\\"}}\",\"call_id\":\"c{i}\"}}}}\n\
             {{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call_output\",\"call_id\":\"c{i}\",\"output\":\"Process exited with code 101\\nOutput:\\nerror[E0425]\"}}}}\n"
        ));
    }
    rollout.push_str("{\"type\":\"event_msg\",\"payload\":{\"type\":\"task_complete\",\"last_agent_message\":\"gave up\"}}\n");
    let file = codex.join("rollout-2026-03-01T10-00-00-019c-thread-7.jsonl");
    std::fs::write(&file, &rollout).unwrap();

    let (mut procs, bus) = supervisor(root, &url, &[], &[]).await;
    let d = dir.display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &["watch", "claude", &d, "--poll-ms", "50", "--from-start"],
    ));
    let c = root.join("codex").display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch-codex",
        &["watch", "codex", &c, "--poll-ms", "50", "--from-start"],
    ));
    eventually("the history is reported and steered", root, || async {
        units(&bus)
            .await
            .iter()
            .any(|u| u.unit == "s-old" && u.turn >= 12 && u.steering_sent > 0)
    })
    .await;
    eventually("the watch holds the steering back", root, || async {
        std::fs::read_to_string(root.join("watch.log")).is_ok_and(|l| {
            l.contains("s-old") && l.contains("has not written since the watch started")
        })
    })
    .await;
    assert!(
        !project.join(".xo/steering.pending").exists(),
        "no steering written for history"
    );
    eventually(
        "the Codex session is its session id, ended",
        root,
        || async {
            units(&bus)
                .await
                .iter()
                .any(|u| u.unit == "019c-thread-7" && u.ended && u.turn >= 3)
        },
    )
    .await;
    assert!(
        !units(&bus)
            .await
            .iter()
            .any(|u| u.unit.starts_with("rollout")),
        "not named after its file"
    );
    // `xo import` names it alike.
    let o = Xo::new()
        .command(&[])
        .args(["import", "codex", file.to_str().unwrap()])
        .output()
        .unwrap();
    let first = String::from_utf8_lossy(&o.stdout);
    let r: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    assert_eq!(r["unit"]["unit"], "019c-thread-7");
    assert!(
        !project.join(".xo/steering.pending").exists(),
        "no steering written for the Codex history either"
    );
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
    let (_procs, bus) = supervisor(root, &url, &["--config", cfg.to_str().unwrap()], &[]).await;
    read_what_was_there(root, "supervisor").await;
    std::fs::write(
        sessions.join("s-config.jsonl"),
        session_turn("s-config", 0, root),
    )
    .unwrap();
    eventually(
        "the session named by the config is a unit",
        root,
        || async { units(&bus).await.iter().any(|u| u.unit == "s-config") },
    )
    .await;
}

/// OpenHands keeps a session as a folder of event files, one JSON event a
/// file: each new file is read in order, the session is one unit. Beside
/// its `events/` it keeps what OpenHands writes there too (V0:
/// `metadata.json`, `init.json`, `agent_state.pkl`, the `event_cache/`
/// pages that repeat the events 25 a file; V1: `base_state.json` and
/// `event-<n>-<id>.json` files): none of it is a unit or an event.
#[tokio::test]
async fn watch_follows_openhands_event_directories() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let session = root.join("sessions").join("oh-session-9");
    let events = session.join("events");
    std::fs::create_dir_all(&events).unwrap();
    std::fs::create_dir_all(session.join("event_cache")).unwrap();
    std::fs::write(
        session.join("metadata.json"),
        r#"{"conversation_id": "oh-session-9", "title": "fix tests", "selected_repository": null}"#,
    )
    .unwrap();
    std::fs::write(
        session.join("init.json"),
        r#"{"llm_model": "claude-sonnet-4"}"#,
    )
    .unwrap();
    std::fs::write(session.join("agent_state.pkl"), b"\x80\x04\x95 not json").unwrap();
    // A V1 conversation beside it: base_state.json and its events.
    let v1 = root.join("sessions").join("c0ffee").join("events");
    std::fs::create_dir_all(&v1).unwrap();
    std::fs::write(
        v1.parent().unwrap().join("base_state.json"),
        r#"{"id": "c0ffee", "agent": {}}"#,
    )
    .unwrap();

    let (mut procs, bus) = supervisor(root, &url, &[], &[]).await;
    let dir = root.join("sessions").display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &["watch", "openhands", &dir, "--poll-ms", "50"],
    ));
    // Written once the watch has read what was there: events written
    // before are history to it (from_start is off), and under load the
    // watch may start after all of them (the failure this once was).
    read_what_was_there(root, "watch").await;
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
    // The V1 conversation's first event, once the watch runs.
    std::fs::write(
        v1.join("event-00000-0b1f.json"),
        r#"{"id":"0b1f","timestamp":"2026-06-16T05:39:18.809928","source":"agent","kind":"MessageEvent","llm_message":{"role":"assistant","content":[{"type":"text","text":"Looking at the tests."}]}}"#,
    )
    .unwrap();
    // OpenHands' cache page repeats events in an array (written once a page
    // is full; here, early, as the worst case).
    std::fs::write(
        session.join("event_cache").join("0-25.json"),
        r#"[{"id":0,"source":"agent","action":"run","args":{"command":"pytest"}}]"#,
    )
    .unwrap();
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
    eventually("the V1 conversation is a unit", root, || async {
        units(&bus).await.iter().any(|u| u.unit == "c0ffee")
    })
    .await;
    // A session begun after the cache page was written, last in the
    // watch's sorted scan: once it is a unit, the watch has read the
    // folders as they were with the page in them. Then: three units, and
    // no file of theirs refused.
    let late = root.join("sessions").join("zz-late").join("events");
    std::fs::create_dir_all(&late).unwrap();
    std::fs::write(
        late.join("0.json"),
        r#"{"id":0,"source":"agent","action":"run","args":{"command":"ls"}}"#,
    )
    .unwrap();
    std::fs::write(
        late.join("1.json"),
        r#"{"id":1,"source":"agent","cause":0,"observation":"run","content":"src","extras":{"metadata":{"exit_code":0}}}"#,
    )
    .unwrap();
    eventually("a session begun later is a unit", root, || async {
        units(&bus).await.iter().any(|u| u.unit == "zz-late")
    })
    .await;
    let mut names: Vec<String> = units(&bus).await.into_iter().map(|u| u.unit).collect();
    names.sort();
    assert_eq!(names, ["c0ffee", "oh-session-9", "zz-late"]);
    let watch = std::fs::read_to_string(root.join("watch.log")).unwrap();
    for refused in ["not used", "skipped", "not a openhands"] {
        assert!(!watch.contains(refused), "{refused}: {watch}");
    }
}

#[test]
fn watch_says_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Xo::new()
            .command(&[])
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

/// One turn of a Claude Code session that lists a folder, with its usage:
/// 1000 tokens in, 100 out.
fn costly_turn(session: &str, i: u32, cwd: &Path) -> String {
    let c = cwd.display();
    format!(
        "{{\"type\":\"assistant\",\"sessionId\":\"{session}\",\"cwd\":\"{c}\",\"message\":{{\"id\":\"m{i}\",\"model\":\"claude-sonnet-4-5\",\"usage\":{{\"input_tokens\":1000,\"output_tokens\":100}},\"content\":[{{\"type\":\"tool_use\",\"id\":\"t{i}\",\"name\":\"Bash\",\"input\":{{\"command\":\"ls d{i}\"}}}}]}}}}\n\
         {{\"type\":\"user\",\"sessionId\":\"{session}\",\"cwd\":\"{c}\",\"message\":{{\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"t{i}\",\"content\":\"d{i}: a b c\"}}]}}}}\n"
    )
}

/// `xo hook claude` in `project` with `payload`, as Claude Code runs it.
fn hook(project: &Path, payload: serde_json::Value) -> std::process::Output {
    let mut c = Xo::new()
        .command(&[])
        .current_dir(project)
        .args(["hook", "claude"])
        .env_remove("CLAUDE_PROJECT_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    c.wait_with_output().unwrap()
}

/// Issue 37, items 3 and 5, with the XO and the watch as their own
/// processes on a real nats-server: a watched Claude Code session whose
/// hook says a permission prompt is open needs you (`permission`), and no
/// longer once it writes again; at 80% of its token cap it is warned
/// through its hook; at the cap its hook is told to refuse its next call
/// and it needs you (`budget`), whatever it writes after.
#[tokio::test]
async fn a_waiting_session_needs_you_and_its_cap_stops_it() {
    let nats = NatsServer::start();
    let url = nats.url();
    let root_dir = tempfile::tempdir().unwrap();
    let root = root_dir.path();
    let sessions = root.join("projects");
    let project = root.join("p");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let (mut procs, bus) = supervisor(root, &url, &[], &[]).await;
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &[
            "watch",
            "claude",
            sessions.to_str().unwrap(),
            "--poll-ms",
            "50",
            "--max-tokens",
            "10000",
        ],
    ));
    read_what_was_there(root, "watch").await;
    let file = sessions.join("s-cap.jsonl");
    let turns = |from: u32, to: u32| -> String {
        (from..to)
            .map(|i| costly_turn("s-cap", i, &project))
            .collect()
    };
    std::fs::write(&file, turns(0, 2)).unwrap();
    let needs_of = |bus: &Bus| {
        let bus = bus.clone();
        async move {
            units(&bus)
                .await
                .into_iter()
                .find(|u| u.unit == "s-cap")
                .map(|u| u.needs.map(|n| (n.reason, n.detail)))
        }
    };
    eventually("the session is a unit", root, || async {
        needs_of(&bus).await.is_some()
    })
    .await;

    // Claude Code's Notification hook: a permission prompt is open.
    let o = hook(
        &project,
        serde_json::json!({"session_id": "s-cap", "transcript_path": file, "cwd": project,
            "hook_event_name": "Notification", "notification_type": "permission_prompt",
            "message": "Claude needs your permission to use Bash", "title": "Claude Code"}),
    );
    assert!(o.status.success(), "{o:?}");
    eventually("the unit needs you for a permission", root, || async {
        needs_of(&bus).await
            == Some(Some((
                xo_proto::NeedsReason::Permission,
                "Claude needs your permission to use Bash".into(),
            )))
    })
    .await;
    // The person answered: the session writes again.
    append(&file, &turns(2, 3));
    eventually("the unit moved: it no longer needs you", root, || async {
        needs_of(&bus).await == Some(None)
    })
    .await;

    // 80% of 10,000 tokens (1,100 a turn): warned through its hook.
    append(&file, &turns(3, 9));
    let pending = project.join(".xo/steering.pending");
    eventually("warned at 80% of its cap", root, || async {
        std::fs::read_to_string(&pending).is_ok_and(|p| {
            p.contains("\"session_id\":\"s-cap\"") && p.contains("of this session's cap is spent")
        })
    })
    .await;
    // Past the cap: its hook refuses the next call, it needs you.
    append(&file, &turns(9, 12));
    eventually("at its cap it needs you", root, || async {
        matches!(
            needs_of(&bus).await,
            Some(Some((xo_proto::NeedsReason::Budget, _)))
        )
    })
    .await;
    let spent = std::fs::read_to_string(project.join(".xo/spent.jsonl")).unwrap();
    assert!(
        spent.contains("\"session_id\":\"s-cap\"") && spent.contains("max_tokens 10000"),
        "{spent}"
    );
    let o = hook(
        &project,
        serde_json::json!({"session_id": "s-cap", "transcript_path": file, "cwd": project,
            "permission_mode": "default", "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "toolu_1"}),
    );
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny", "{a}");
    // What the refused session writes after does not clear it.
    append(&file, &turns(12, 13));
    eventually("the refused call's turn is read", root, || async {
        units(&bus)
            .await
            .iter()
            .any(|u| u.unit == "s-cap" && u.turn >= 12)
    })
    .await;
    let last = needs_of(&bus).await;
    assert!(
        matches!(last, Some(Some((xo_proto::NeedsReason::Budget, _)))),
        "{last:?}"
    );
    drop(procs);
}

/// Issue 37, item 5: a watched Codex session refused by its plan's usage
/// limit (its rollout's `token_count` says the limit was reached and when
/// it resets) is "waiting until" then: ended for the XO (neither stale nor
/// steered), `xo units` says until when; it is back to normal once it
/// works again after the reset.
#[tokio::test]
async fn a_session_at_its_usage_limit_waits_until_the_reset() {
    let nats = NatsServer::start();
    let url = nats.url();
    let root_dir = tempfile::tempdir().unwrap();
    let root = root_dir.path();
    let codex = root.join("codex").join("2026").join("08").join("15");
    let project = root.join("p");
    std::fs::create_dir_all(&codex).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let (mut procs, bus) = supervisor(root, &url, &[], &[]).await;
    let c = root.join("codex").display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &["watch", "codex", &c, "--poll-ms", "50"],
    ));
    read_what_was_there(root, "watch").await;
    let step = |i: u32| {
        format!(
            "{{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call\",\"name\":\"exec_command\",\"arguments\":\"{{\\\"cmd\\\":\\\"ls d{i}\\\"}}\",\"call_id\":\"c{i}\"}}}}\n\
             {{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call_output\",\"call_id\":\"c{i}\",\"output\":\"Process exited with code 0\\nOutput:\\nd{i}\"}}}}\n"
        )
    };
    let mut rollout = format!(
        "{{\"timestamp\":\"2026-08-15T15:00:00.000Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"019c-limited\",\"cwd\":{:?}}}}}\n",
        project.display().to_string()
    );
    for i in 0..3 {
        rollout.push_str(&step(i));
    }
    // Refused: the five-hour window is spent; it resets at 16:21:08 UTC.
    rollout.push_str("{\"timestamp\":\"2026-08-15T15:03:14.540Z\",\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":null,\"rate_limits\":{\"limit_id\":\"codex\",\"primary\":{\"used_percent\":100.0,\"window_minutes\":300,\"resets_at\":1786206068},\"secondary\":{\"used_percent\":31.0,\"window_minutes\":10080,\"resets_at\":1786700000},\"spend_control_reached\":null,\"plan_type\":\"plus\",\"rate_limit_reached_type\":\"primary\"}}}\n");
    let file = codex.join("rollout-2026-08-15T15-00-00-019c-limited.jsonl");
    std::fs::write(&file, &rollout).unwrap();
    let unit = |bus: &Bus| {
        let bus = bus.clone();
        async move {
            units(&bus)
                .await
                .into_iter()
                .find(|u| u.unit == "019c-limited")
        }
    };
    eventually("the session waits for its limit's reset", root, || async {
        unit(&bus)
            .await
            .is_some_and(|u| u.waiting_until == Some(1_786_206_068_000) && u.ended && !u.stale)
    })
    .await;
    let row = units_row(root, &url, "019c-limited");
    assert!(row.contains("until 16:21Z"), "{row}");
    // After the reset it works again: back to normal.
    append(
        &file,
        &format!(
            "{}{}",
            "{\"timestamp\":\"2026-08-15T16:22:00.000Z\",\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":null,\"rate_limits\":{\"limit_id\":\"codex\",\"primary\":{\"used_percent\":0.0,\"window_minutes\":300,\"resets_at\":1786224068},\"secondary\":{\"used_percent\":31.0,\"window_minutes\":10080,\"resets_at\":1786700000},\"rate_limit_reached_type\":null}}}\n",
            step(3)
        ),
    );
    eventually("it works again after the reset", root, || async {
        unit(&bus)
            .await
            .is_some_and(|u| u.waiting_until.is_none() && !u.ended)
    })
    .await;
    drop(procs);
}

/// Claude Code writes a usage limit in the model's place: an `assistant`
/// line with `isApiErrorMessage`, `error: "rate_limit"`,
/// `apiErrorStatus: 429`, model `<synthetic>` and the notice as its text
/// (the fields of a Claude Code 2.1.220 transcript line; the wording is
/// the notice Claude Code itself files as the title of its bug reports,
/// e.g. anthropics/claude-code#79765 "You've hit your session limit ·
/// resets 5:10pm (Europe/Paris)"). The session waits until the reset in
/// the notice's own zone, and a notice without a zone is read in the
/// machine's (`TZ`).
#[tokio::test]
async fn a_claude_session_at_its_usage_limit_waits_until_the_reset() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join("projects");
    std::fs::create_dir_all(&dir).unwrap();
    let project = root.join("work");
    let (mut procs, bus) = supervisor(root, &url, &[], &[]).await;
    let d = dir.display().to_string();
    procs.0.push(xo_env(
        root,
        &url,
        "watch",
        &["watch", "claude", &d, "--poll-ms", "50"],
        &[("TZ", "Asia/Tokyo")],
    ));
    read_what_was_there(root, "watch").await;
    let limit = |text: &str| {
        format!(
            "{{\"parentUuid\":\"p\",\"isSidechain\":false,\"type\":\"assistant\",\"uuid\":\"u-limit\",\"timestamp\":\"2026-07-26T15:06:19.592Z\",\"message\":{{\"id\":\"4d66b61c\",\"model\":\"<synthetic>\",\"role\":\"assistant\",\"stop_reason\":\"stop_sequence\",\"type\":\"message\",\"usage\":{{\"input_tokens\":0,\"output_tokens\":0,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}},\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}]}},\"error\":\"rate_limit\",\"isApiErrorMessage\":true,\"apiErrorStatus\":429,\"sessionId\":\"s-limited\",\"cwd\":{:?},\"version\":\"2.1.220\"}}\n",
            project.display().to_string()
        )
    };
    session_file(&dir, &project, "s-limited", 3, false);
    let file = dir.join("s-limited.jsonl");
    let unit = |bus: &Bus| {
        let bus = bus.clone();
        async move {
            units(&bus)
                .await
                .into_iter()
                .find(|u| u.unit == "s-limited")
        }
    };
    eventually("the session is watched", root, || async {
        unit(&bus).await.is_some()
    })
    .await;
    // 17:06 in Madrid: the limit resets at 17:40 there, 15:40 UTC.
    append(
        &file,
        &limit("You've hit your session limit · resets 5:40pm (Europe/Madrid)"),
    );
    eventually("the session waits for its limit's reset", root, || async {
        unit(&bus)
            .await
            .is_some_and(|u| u.waiting_until == Some(1_785_080_400_000) && u.ended && !u.stale)
    })
    .await;
    let row = units_row(root, &url, "s-limited");
    assert!(row.contains("until 15:40Z"), "{row}");
    // The model runs again: back to normal.
    append(&file, &session_turn("s-limited", 3, &project));
    eventually("it works again after the reset", root, || async {
        unit(&bus)
            .await
            .is_some_and(|u| u.waiting_until.is_none() && !u.ended)
    })
    .await;
    // Limited again, the notice with no zone: 1am in the machine's zone
    // (Tokyo, +9) after 00:06 Tokyo time is 16:00 UTC.
    append(&file, &limit("You've hit your limit · resets 1am"));
    eventually("the reset in the machine's zone", root, || async {
        unit(&bus)
            .await
            .is_some_and(|u| u.waiting_until == Some(1_785_081_600_000))
    })
    .await;
    drop(procs);
}

/// Issue 38: a watched session with a record its sensor does not know is
/// marked `unreadable: N records` (the supervisor's view, `xo units`) and
/// is not steered while it stalls: its picture is known to be incomplete.
/// A session beside it that reads whole is steered for the same stall.
#[tokio::test]
async fn a_session_with_records_not_read_is_said_and_not_steered() {
    let nats = NatsServer::start();
    let url = nats.url();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join("projects");
    std::fs::create_dir_all(&dir).unwrap();
    let project = |n: &str| root.join(format!("work-{n}"));
    let (mut procs, bus) = supervisor(root, &url, &[], &[]).await;
    let d = dir.display().to_string();
    procs.0.push(xo(
        root,
        &url,
        "watch",
        &["watch", "claude", &d, "--poll-ms", "50"],
    ));
    read_what_was_there(root, "watch").await;
    for n in ["odd", "whole"] {
        session_file(&dir, &project(n), &format!("s-{n}"), 1, false);
    }
    // A kind this Claude Code sensor does not know, then a stall.
    append(
        &dir.join("s-odd.jsonl"),
        &format!(
            "{{\"type\":\"worktree-state\",\"sessionId\":\"s-odd\",\"cwd\":{:?},\"worktree\":{{\"path\":\"/w\"}}}}\n",
            project("odd").display().to_string()
        ),
    );
    for i in 1..=11 {
        for n in ["odd", "whole"] {
            append(
                &dir.join(format!("s-{n}.jsonl")),
                &session_turn(&format!("s-{n}"), i, &project(n)),
            );
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let pending = |n: &str| project(n).join(".xo/steering.pending");
    eventually("the session read whole is steered", root, || async {
        std::fs::read_to_string(pending("whole")).is_ok_and(|t| t.contains("[SUPERVISOR] Stall"))
    })
    .await;
    eventually(
        "the other is said unreadable at its last turn",
        root,
        || async {
            units(&bus)
                .await
                .iter()
                .any(|u| u.unit == "s-odd" && u.unreadable == 1 && u.turn >= 12)
        },
    )
    .await;
    // The supervisor counts a steering when it decides it (before its
    // delivery): none for this unit through its turn 12.
    let odd = units(&bus)
        .await
        .into_iter()
        .find(|u| u.unit == "s-odd")
        .unwrap();
    assert_eq!(odd.steering_sent, 0, "{odd:?}");
    assert!(
        std::fs::read_to_string(pending("odd")).is_err(),
        "not steered on a picture known to be incomplete"
    );
    let row = units_row(root, &url, "s-odd");
    assert!(
        row.ends_with("· unreadable: 1 records (not steered on them)"),
        "{row}"
    );
    drop(procs);
}
