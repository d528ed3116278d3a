//! `xo import` and `xo radio replay --summary` on recorded runs: what the
//! XO would have caught, and when; every public recording of a real run in
//! `tests/fixtures/real` imported, the detection benchmark over them, and
//! the Claude Code and Codex hooks held to their agents' hook contracts.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use xo_tests::launcher::Xo;

fn xo(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    xo_env(dir, args, stdin, &[])
}

/// `xo` in `dir` with `env` set on top of a clean environment.
fn xo_env(
    dir: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut c = Xo::new().command(&[]);
    c.current_dir(dir)
        .env_remove("XO_NATS_URL")
        .env_remove("CLAUDE_PROJECT_DIR")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = c.spawn().expect("xo runs");
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

/// A Codex run that loops on a failing build, then gives up.
fn looping_codex() -> String {
    let mut s = String::from(
        "{\"type\":\"thread.started\",\"thread_id\":\"loop-run\"}\n{\"type\":\"turn.started\"}\n",
    );
    for i in 0..8 {
        s.push_str(&format!(
            "{{\"type\":\"item.completed\",\"item\":{{\"id\":\"i{i}\",\"type\":\"command_execution\",\"command\":\"make build\",\"aggregated_output\":\"make: *** [build] Error 2\",\"exit_code\":2,\"status\":\"failed\"}}}}\n"
        ));
        s.push_str(&format!("{{\"type\":\"event_msg_unknown_{i}\"}}\n"));
    }
    s.push_str("this line is not json\n");
    s.push_str("{\"type\":\"turn.failed\",\"error\":{\"message\":\"gave up\"}}\n");
    s
}

/// A Claude Code run that edits and passes.
fn clean_claude() -> String {
    [
        r#"{"type":"system","subtype":"init","session_id":"clean-run","model":"claude-sonnet-4-5"}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Edit","input":{"file_path":"a.rs"}}],"usage":{"input_tokens":100,"output_tokens":10}}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"updated"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"cargo test"}}],"usage":{"input_tokens":120,"output_tokens":10}}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"test result: ok. 3 passed"}]}}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":0.02}"#,
    ]
    .join("\n")
}

#[test]
fn import_then_replay_summary_shows_what_the_xo_would_have_caught() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loop.jsonl"), looping_codex()).unwrap();
    std::fs::write(dir.path().join("clean.jsonl"), clean_claude()).unwrap();

    // Its bad line and unknown kinds are named, and the import refused…
    let o = xo(dir.path(), &["import", "codex", "loop.jsonl"], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("not read: 1 not readable of kind \"(unreadable line)\" (first at line 19)")
            && err.contains("of kind \"event_msg_unknown_0\" (first at line 4)")
            && err.contains("--lenient"),
        "{err}"
    );
    // …unless asked to take what could be read.
    let o = xo(
        dir.path(),
        &["import", "--lenient", "codex", "loop.jsonl"],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("loop.jsonl:19: not JSON"),
        "the bad line is named: {err}"
    );
    assert!(err.contains("8 unknown events skipped"), "{err}");
    let mut reports = o.stdout.clone();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&reports)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 9, "8 failing commands and the failed end");
    assert_eq!(lines[0]["unit"]["unit"], "loop-run");
    assert_eq!(
        lines[8]["status"]["note"].as_str().unwrap(),
        "outcome=failed; turn failed: gave up"
    );

    let o = xo(
        dir.path(),
        &["import", "claude", "clean.jsonl", "--role", "coder"],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    reports.extend_from_slice(&o.stdout);

    let o = xo(
        dir.path(),
        &["radio", "replay", "--summary", "--json", "-"],
        Some(&reports),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let run = |u: &str| rows.iter().find(|r| r["unit"] == u).unwrap().clone();
    let looping = run("loop-run");
    assert!(
        looping["steering"]["loop"].as_u64().unwrap() >= 1,
        "{looping}"
    );
    assert_eq!(
        looping["first_detection_turn"], 3,
        "the third identical failure"
    );
    assert_eq!(
        looping["after_first_detection"]["turns"], 6,
        "turns 4..9 after it"
    );
    assert_eq!(looping["outcome"], "failed");
    let clean = run("clean-run");
    assert_eq!(
        clean["first_detection_turn"],
        serde_json::Value::Null,
        "{clean}"
    );
    assert_eq!(clean["outcome"], "succeeded");
    assert!((clean["cost_usd"].as_f64().unwrap() - 0.02).abs() < 1e-9);
    let totals = rows.iter().find(|r| r.get("totals").is_some()).unwrap();
    let t = totals["totals"].as_array().unwrap();
    assert!(t.contains(&serde_json::json!({"outcome": "failed", "steered": true, "runs": 1})));
    assert!(t.contains(&serde_json::json!({"outcome": "succeeded", "steered": false, "runs": 1})));

    // The table form, for people.
    let o = xo(
        dir.path(),
        &["radio", "replay", "--summary", "-"],
        Some(&reports),
    );
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("1 failed runs the XO would have steered"),
        "{table}"
    );
}

#[test]
fn import_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let o = xo(dir.path(), &["import", "aider", "x.jsonl"], None);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown agent format \"aider\""));
    let o = xo(dir.path(), &["import", "codex", "missing.jsonl"], None);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.jsonl"));
    std::fs::write(
        dir.path().join("other.jsonl"),
        "{\"type\":\"something_else\"}\n",
    )
    .unwrap();
    let o = xo(dir.path(), &["import", "claude", "other.jsonl"], None);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("no agent turns in other.jsonl — are they claude logs?"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The public recordings of real agent runs (sources and licences in its
/// SOURCES.md).
fn real() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/real")
}

#[test]
fn every_real_recording_imports_with_no_line_rejected() {
    let mut count = 0;
    for (folder, format) in [
        ("claude", "claude"),
        ("codex", "codex"),
        ("openhands", "openhands"),
        ("swe-agent", "swe-agent"),
        ("mini-swe-agent", "swe-agent"),
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(real().join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_none_or(|e| e != "txt"))
            .collect();
        files.sort();
        for f in files {
            let o = xo(&real(), &["import", format, f.to_str().unwrap()], None);
            let err = String::from_utf8_lossy(&o.stderr);
            if f.ends_with("v1_sdk_events.jsonl") {
                // An excerpt: one action of a parallel pair is not in it,
                // and its observation is said, with its line.
                assert!(!o.status.success(), "{err}");
                assert!(
                    err.contains("1 results that name no call seen (first at line 7)"),
                    "{err}"
                );
                let o = xo(
                    &real(),
                    &["import", "--lenient", format, f.to_str().unwrap()],
                    None,
                );
                assert!(o.status.success());
                count += 1;
                continue;
            }
            assert!(o.status.success(), "{}: {err}", f.display());
            assert!(err.contains(" 0 lines rejected"), "{}: {err}", f.display());
            let reports = String::from_utf8_lossy(&o.stdout).lines().count();
            assert!(reports > 0, "{}: no reports", f.display());
            count += err.matches("; outcome ").count();
        }
    }
    assert!(count >= 50, "at least 50 real runs, found {count}");
}

/// The actions of a real Codex rollout: every command its `exec_command_end`
/// says failed is a failed `exec_command` (none a poll's), but for the two
/// `rg` that exited 1 with no output: ripgrep's 1 is "no match", an answer
/// (issue 37: a status is read by its tool's documented meaning).
#[test]
fn a_real_codex_rollouts_failed_commands_are_its_failures() {
    let file = "codex/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl";
    let failed_in_the_rollout = std::fs::read_to_string(real().join(file))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"exec_command_end\"") && l.contains("\"status\":\"failed\""))
        .count();
    assert_eq!(failed_in_the_rollout, 4);
    let o = xo(&real(), &["import", "codex", file], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut failed = Vec::new();
    let mut no_match = 0;
    let mut tools = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let turn = r["time"]["turn"].as_u64().unwrap();
        for a in r["activity"]["recent"].as_array().unwrap() {
            if a["turn"].as_u64() == Some(turn) {
                tools.insert(a["tool"].as_str().unwrap_or("-").to_string());
                if a["outcome"] == "error" {
                    failed.push(a["tool"].as_str().unwrap().to_string());
                }
                if a["outcome"] == "empty"
                    && a["cmd"].as_str().is_some_and(|c| c.starts_with("rg "))
                {
                    no_match += 1;
                }
            }
        }
    }
    assert_eq!(failed, ["exec_command"; 2], "{failed:?}");
    assert_eq!(no_match, 2, "the two rg runs that found nothing");
    assert!(
        !tools.contains("write_stdin"),
        "a poll is no action: {tools:?}"
    );
    // And nothing in it is steered: its polls are no loop.
    let runs = tempfile::tempdir().unwrap();
    std::fs::write(runs.path().join("r.jsonl"), &o.stdout).unwrap();
    let o = xo(runs.path(), &["radio", "replay", "r.jsonl"], None);
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "", "no steering");
}

/// The actions of one report's own turn (its `recent` holds the window).
fn own_actions(report: &serde_json::Value) -> Vec<serde_json::Value> {
    let turn = report["time"]["turn"].as_u64();
    report["activity"]["recent"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["turn"].as_u64() == turn)
        .cloned()
        .collect()
}

/// Real mini-swe-agent 2 runs (tool calls, `mini-swe-agent-1.1`): each
/// call paired with its result; the reply the harness could not parse a
/// `format_error`, never progress; a command the harness timed out a
/// failure that says so; the context and the spend read call by call
/// from each response's usage (a spend cap needs them before the end),
/// and both counted here from the raw file, not by the sensor's code.
#[test]
fn real_mini_swe_agent_2_runs_are_read_call_by_call() {
    let file = "mini-swe-agent/deepseek_lite_dev_noparallel__pvlib__pvlib-python-1606.traj.json";
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(real().join(file)).unwrap()).unwrap();
    let messages = raw["messages"].as_array().unwrap();
    let largest_prompt = messages
        .iter()
        .filter_map(|m| m["extra"]["response"]["usage"]["prompt_tokens"].as_u64())
        .max()
        .unwrap();
    let failed_in_the_file = messages
        .iter()
        .filter(|m| m["role"] == "tool" && m["extra"]["returncode"].as_i64() != Some(0))
        .count();
    let o = xo(&real(), &["import", "swe-agent", file], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("; outcome succeeded"), "{err}");
    let reports: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let actions: Vec<serde_json::Value> = reports.iter().flat_map(own_actions).collect();
    let refused: Vec<_> = actions
        .iter()
        .filter(|a| a["error_type"] == "format_error")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["tool"], "reply");
    assert!(
        refused[0]["line"]
            .as_str()
            .unwrap()
            .starts_with("Error parsing tool call arguments"),
        "{refused:?}"
    );
    let timed_out: Vec<_> = actions
        .iter()
        .filter(|a| a["error_type"] == "timeout")
        .collect();
    assert_eq!(timed_out.len(), 2, "{timed_out:?}");
    for a in &timed_out {
        assert_eq!(a["tool"], "pip");
        assert!(
            a["line"]
                .as_str()
                .unwrap()
                .ends_with("timed out after 60 seconds"),
            "{a}"
        );
    }
    // Every command that exited non-zero in the file is a failure here,
    // the refused reply besides them, but for `pip list | grep -E …`
    // exiting 1: grep's "no match", an answer (its status decides).
    let no_match: Vec<_> = actions
        .iter()
        .filter(|a| {
            a["cmd"]
                .as_str()
                .is_some_and(|c| c.starts_with("pip list | grep"))
        })
        .collect();
    assert_eq!(no_match.len(), 1, "{no_match:?}");
    assert_eq!(no_match[0]["outcome"], "empty", "{no_match:?}");
    let failures = actions.iter().filter(|a| a["outcome"] == "error").count();
    assert_eq!(failures, failed_in_the_file - 1 + 1, "{actions:?}");
    // The context as it grew, and the spend as it went.
    let context = |r: &serde_json::Value| r["size"]["context_tokens"].as_u64().unwrap();
    assert_eq!(reports.iter().map(context).max(), Some(largest_prompt));
    let halfway = &reports[reports.len() / 2];
    assert!(context(halfway) > 0, "{halfway}");
    assert!(halfway["equipment"]["cost_usd"].as_f64().unwrap() > 0.0);
    let spent = reports.last().unwrap()["equipment"]["cost_usd"]
        .as_f64()
        .unwrap();
    let total = raw["info"]["model_stats"]["instance_cost"]
        .as_f64()
        .unwrap();
    assert!((spent - total).abs() < 1e-6, "{spent} against {total}");

    // Runs ended by the model's API, not by their agent: failed, with
    // the status the harness wrote.
    for (file, status) in [
        (
            "mini-swe-agent/deepseek_reasoner_dev__pvlib__pvlib-python-1072.traj.json",
            "InternalServerError",
        ),
        (
            "mini-swe-agent/deepseek_reasoner_dev__pylint-dev__astroid-1196.traj.json",
            "Timeout",
        ),
    ] {
        let o = xo(&real(), &["import", "swe-agent", file], None);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("; outcome failed"), "{err}");
        let last: serde_json::Value =
            serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap())
                .unwrap();
        assert_eq!(
            last["activity"]["summary"],
            format!("exit_status: {status}"),
            "{last}"
        );
    }
}

/// A real OpenHands V1 run's usage is read from its state updates: the
/// tokens of every LLM of the conversation, as the SDK totals them.
#[test]
fn a_real_openhands_v1_runs_usage_comes_from_its_state_updates() {
    let file = "openhands/v1_sdk_events.jsonl";
    let mut prompt = 0;
    for line in std::fs::read_to_string(real().join(file)).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["kind"] == "ConversationStateUpdateEvent" && v["key"] == "stats" {
            prompt = v["value"]["usage_to_metrics"]
                .as_object()
                .unwrap()
                .values()
                .map(|m| {
                    m["accumulated_token_usage"]["prompt_tokens"]
                        .as_u64()
                        .unwrap()
                })
                .sum();
        }
    }
    assert!(prompt > 0);
    let o = xo(&real(), &["import", "--lenient", "openhands", file], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(
        last["equipment"]["tokens_in"].as_u64(),
        Some(prompt),
        "{last}"
    );
    assert!(
        last["size"]["context_tokens"].as_u64().unwrap() > 0,
        "{last}"
    );
}

/// Real Claude Code sessions (five of 240–400 turns, with their own
/// compactions and subagents) are not steered for what Claude Code does
/// itself: no context steering before its own compaction, no preamble or
/// prompt counted as a turn without progress.
#[test]
fn real_claude_code_sessions_are_not_nagged() {
    let o = xo(&real(), &["bench", "detection", "claude", "--runs"], None);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let row = out
        .lines()
        .find(|l| l.starts_with("claude") && l.contains(" all "))
        .unwrap_or_else(|| panic!("no claude row:\n{out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    let (turns, per100): (u64, f64) = (cols[3].parse().unwrap(), cols[7].parse().unwrap());
    assert!(turns > 1000, "{row}");
    assert!(per100 <= 0.5, "at most one steering in 200 turns: {row}");
    assert!(!out.contains("context×"), "no context steering:\n{out}");
}

#[test]
fn an_openhands_events_folder_is_one_run() {
    // As OpenHands' file store keeps a conversation: `events/<id>.json`,
    // here the events of a real trajectory, one a file.
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("sessions/abc123/events");
    std::fs::create_dir_all(&events).unwrap();
    let traj: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(real().join("openhands/basic_gui_mode.json")).unwrap(),
    )
    .unwrap();
    for (i, e) in traj.iter().enumerate() {
        std::fs::write(
            events.join(format!("{i}.json")),
            serde_json::to_string_pretty(e).unwrap(),
        )
        .unwrap();
    }
    let folder = dir.path().join("sessions/abc123");
    let o = xo(
        dir.path(),
        &["import", "openhands", folder.to_str().unwrap()],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let from_folder = String::from_utf8_lossy(&o.stdout).lines().count();
    let o = xo(
        &real(),
        &["import", "openhands", "openhands/basic_gui_mode.json"],
        None,
    );
    assert_eq!(
        from_folder,
        String::from_utf8_lossy(&o.stdout).lines().count(),
        "the same run as the array"
    );
    let first: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    // Dated by the recording (January 2025), not by the import.
    assert!(
        first["time"]["at"].as_u64().unwrap() < 1_740_000_000_000,
        "{first}"
    );
    // What OpenHands keeps beside the events is no run: the session is one
    // run, once, in the detection benchmark too.
    let session = dir.path().join("sessions/abc123");
    std::fs::write(
        session.join("metadata.json"),
        r#"{"conversation_id": "abc123"}"#,
    )
    .unwrap();
    std::fs::write(session.join("init.json"), "{}").unwrap();
    std::fs::create_dir_all(session.join("event_cache")).unwrap();
    std::fs::write(
        session.join("event_cache/0-25.json"),
        serde_json::to_string(&traj).unwrap(),
    )
    .unwrap();
    let o = xo(
        dir.path(),
        &["import", "openhands", folder.to_str().unwrap()],
        None,
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        from_folder
    );
    std::fs::rename(dir.path().join("sessions"), dir.path().join("openhands")).unwrap();
    let o = xo(dir.path(), &["bench", "detection", ".", "--runs"], None);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The run rows come first, then a blank line and the totals.
    let runs: Vec<&str> = out
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("openhands"))
        .collect();
    assert_eq!(runs.len(), 1, "one run:\n{out}");
    assert!(runs[0].contains("abc123"), "{out}");
}

/// The formats `xo bench detection` prints a row of figures for.
const FORMATS: [&str; 5] = [
    "claude",
    "codex",
    "openhands",
    "swe-agent",
    "mini-swe-agent",
];

#[test]
fn the_detection_benchmark_prints_xo_beside_the_openhands_rules() {
    let o = xo(&real(), &["bench", "detection", "."], None);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in FORMATS.iter().chain(&["total"]) {
        assert!(
            out.lines().any(|l| l.starts_with(f)),
            "{f} row missing:\n{out}"
        );
    }
    // Measured on these runs: every loop the OpenHands rules catch, XO
    // catches at the same turn or earlier; at most 1 succeeded run in 5
    // steered; at most 1 steering per 100 turns of succeeded runs.
    let goal = |what: &str| {
        out.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what}:\n{out}"))
            .to_string()
    };
    assert!(goal("goal, loops").ends_with("MET"), "{out}");
    assert!(goal("of 31 steered").ends_with("MET"), "{out}");
    // The agent role's stall threshold (past 8) rests on these runs: no run
    // that did not fail goes more than 8 turns without progress, in any
    // format; Claude Code compacts itself no later than its 83.5%.
    for f in FORMATS {
        let line = goal(&format!("{f:<14} longest stretch"));
        let most: u32 = line
            .split("most ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(most <= 8, "{line}");
    }
    // What follows a decision, per format: no stretch gets more than three
    // steerings of a kind, and the loop steering quotes its evidence.
    for f in FORMATS {
        let line = goal(&format!("{f:<14} after a decision"));
        let most: u32 = line
            .split("in one stretch ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(most <= 3, "{line}");
    }
    assert!(
        goal("swe-agent      after a decision").contains("2 of 2 steerings quote"),
        "{out}"
    );
    // The cascade on the real mini-swe-agent run that failed names the
    // command that failed last and what it got back.
    assert!(
        goal("mini-swe-agent after a decision").contains("1 of 1 steerings quote"),
        "{out}"
    );
    let claude = goal("claude         longest stretch");
    let highest: f64 = claude
        .rsplit('–')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{claude}"));
    assert!(highest <= 0.835 + 1e-9, "{claude}");
    assert!(goal("steering per 100 turns").ends_with("MET"), "{out}");
    // Issue 38: every record of the real runs is read (mapped or skipped
    // by name), and the tool errors the sensors saw are at least 90% of
    // what an independent reading of the raw files counts.
    for f in FORMATS {
        let line = goal(&format!("{f:<14} records:"));
        assert!(
            line.contains(", 100.0% mapped or skipped by name"),
            "{line}"
        );
        assert!(
            line.contains(" 0 of kinds not known, 0 not readable"),
            "{line}"
        );
        // SWE-agent's own trajectories keep no exit status (its tools say
        // what failed only in their text): nothing to count them against.
        if f == "swe-agent" {
            assert!(
                line.ends_with("the format records no exit status"),
                "{line}"
            );
            continue;
        }
        let pct: f64 = line
            .rsplit('(')
            .next()
            .and_then(|r| r.strip_suffix("%)"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(pct >= 90.0, "{line}");
    }
}

fn payload(event: &str, session: &str, dir: &Path) -> Vec<u8> {
    serde_json::json!({
        "session_id": session, "hook_event_name": event, "cwd": dir,
        "transcript_path": "/nonexistent", "tool_name": "Bash",
        "tool_input": {"command": "make build"}, "tool_use_id": "toolu_1",
        "error": "Exit code 2", "is_interrupt": false, "stop_hook_active": false
    })
    .to_string()
    .into_bytes()
}

#[test]
fn the_claude_hook_answers_failures_and_stops_and_takes_only_its_sessions_steering() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".xo")).unwrap();
    std::fs::write(
        d.join(".xo/steering.pending"),
        "{\"session_id\":\"other\",\"text\":\"[SUPERVISOR] for the other session\"}\n{\"session_id\":\"mine\",\"text\":\"[SUPERVISOR] Loop: stop running make build.\"}\n",
    )
    .unwrap();
    // A failed call fires PostToolUseFailure: the steering comes as context.
    let o = xo(
        d,
        &["hook", "claude"],
        Some(&payload("PostToolUseFailure", "mine", d)),
    );
    assert!(o.status.success());
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        a["hookSpecificOutput"]["hookEventName"],
        "PostToolUseFailure"
    );
    assert!(
        a["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .contains("Loop: stop running make build")
    );
    assert!(a.get("decision").is_none(), "context, not a block");
    // The other session's steering stays for its own hook.
    let left = std::fs::read_to_string(d.join(".xo/steering.pending")).unwrap();
    assert!(
        left.contains("for the other session") && !left.contains("make build"),
        "{left}"
    );
    let o = xo(
        d,
        &["hook", "claude"],
        Some(&payload("PostToolUse", "mine", d)),
    );
    assert!(o.stdout.is_empty(), "nothing pending for this session");
    // Before a session stops, pending steering makes it go on, once.
    let o = xo(d, &["hook", "claude"], Some(&payload("Stop", "other", d)));
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["decision"], "block");
    assert!(
        a["reason"]
            .as_str()
            .unwrap()
            .contains("for the other session")
    );
    let delivered = std::fs::read_to_string(d.join(".xo/steering.delivered")).unwrap();
    assert_eq!(delivered.lines().count(), 2, "{delivered}");
}

/// The lines of `.xo/needs.jsonl` in `d`.
fn needs(d: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(d.join(".xo/needs.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Issue 37, items 3 and 6, on Claude Code's documented hook JSON: a
/// `Notification` with `permission_prompt`, `idle_prompt` or
/// `elicitation_dialog` tells the XO the session waits for a person (other
/// types say nothing); a `PermissionRequest` is answered by the first
/// `[[hooks.approve]]` rule that matches (allow, deny, ask), each answer in
/// the audit log with its rule, and left to the person (who is told) when
/// none matches or the rule says ask; a `*` never spans a shell operator.
#[test]
fn the_claude_hook_says_when_a_session_waits_and_answers_permissions_by_rule() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let note = |kind: &str, message: &str| {
        serde_json::json!({
            "session_id": "s1", "transcript_path": "/t/s1.jsonl", "cwd": d,
            "hook_event_name": "Notification", "notification_type": kind,
            "message": message, "title": "Claude Code"
        })
        .to_string()
        .into_bytes()
    };
    let o = xo(
        d,
        &["hook", "claude"],
        Some(&note(
            "permission_prompt",
            "Claude needs your permission to use Bash",
        )),
    );
    assert!(o.status.success() && o.stdout.is_empty(), "{o:?}");
    let o = xo(
        d,
        &["hook", "claude"],
        Some(&note("auth_success", "Logged in")),
    );
    assert!(o.status.success() && o.stdout.is_empty());
    let o = xo(
        d,
        &["hook", "claude"],
        Some(&note("idle_prompt", "Claude is waiting for your input")),
    );
    assert!(o.status.success() && o.stdout.is_empty());
    let n = needs(d);
    assert_eq!(n.len(), 2, "{n:?}");
    assert_eq!(
        (
            n[0]["reason"].as_str(),
            n[0]["session_id"].as_str(),
            n[0]["detail"].as_str()
        ),
        (
            Some("permission"),
            Some("s1"),
            Some("Claude needs your permission to use Bash")
        )
    );
    assert_eq!(n[1]["reason"], "question");

    let ask = |session: &str, tool: &str, input: serde_json::Value| {
        serde_json::json!({
            "session_id": session, "transcript_path": "/t/s1.jsonl", "cwd": d,
            "permission_mode": "default", "hook_event_name": "PermissionRequest",
            "tool_name": tool, "tool_input": input,
            "permission_suggestions": [{"type": "addRules", "behavior": "allow", "destination": "localSettings"}]
        })
        .to_string()
        .into_bytes()
    };
    // No rule: the person answers, and is told.
    let o = xo(
        d,
        &["hook", "claude"],
        Some(&ask(
            "s1",
            "Bash",
            serde_json::json!({"command": "cargo test -p x"}),
        )),
    );
    assert!(o.status.success() && o.stdout.is_empty(), "{o:?}");
    assert_eq!(
        needs(d)[2]["detail"],
        "permission for Bash: cargo test -p x"
    );
    assert!(
        !d.join(".xo/approvals.jsonl").exists(),
        "no rule, nothing audited"
    );

    std::fs::write(
        d.join("xo.toml"),
        r#"
[[hooks.approve]]
tool = "Bash"
command = "cargo test*"
decision = "allow"

[[hooks.approve]]
tool = "Bash"
command = "rm *"
decision = "deny"
name = "no deletions"

[[hooks.approve]]
tool = "WebFetch"
decision = "ask"
"#,
    )
    .unwrap();
    let answer = |o: &std::process::Output| -> serde_json::Value {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null)
    };
    let a = answer(&xo(
        d,
        &["hook", "claude"],
        Some(&ask(
            "s1",
            "Bash",
            serde_json::json!({"command": "cargo test -p x"}),
        )),
    ));
    assert_eq!(
        a,
        serde_json::json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}})
    );
    let a = answer(&xo(
        d,
        &["hook", "claude"],
        Some(&ask(
            "s1",
            "Bash",
            serde_json::json!({"command": "rm -rf build"}),
        )),
    ));
    assert_eq!(a["hookSpecificOutput"]["decision"]["behavior"], "deny");
    assert!(
        a["hookSpecificOutput"]["decision"]["message"]
            .as_str()
            .unwrap()
            .contains("no deletions"),
        "{a}"
    );
    // A chained command is no test run: no rule covers it, the person
    // decides.
    let before = needs(d).len();
    let a = answer(&xo(
        d,
        &["hook", "claude"],
        Some(&ask(
            "s1",
            "Bash",
            serde_json::json!({"command": "cargo test; curl x | sh"}),
        )),
    ));
    assert_eq!(a, serde_json::Value::Null);
    let a = answer(&xo(
        d,
        &["hook", "claude"],
        Some(&ask(
            "s1",
            "WebFetch",
            serde_json::json!({"url": "https://example.com", "prompt": "p"}),
        )),
    ));
    assert_eq!(a, serde_json::Value::Null, "ask: the prompt is shown");
    let n = needs(d);
    assert_eq!(n.len(), before + 2);
    assert_eq!(
        n[n.len() - 1]["detail"],
        "permission for WebFetch: https://example.com"
    );
    let audit: Vec<serde_json::Value> = std::fs::read_to_string(d.join(".xo/approvals.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(&str, &str)> = audit
        .iter()
        .map(|a| (a["decision"].as_str().unwrap(), a["rule"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("allow", "hooks.approve[0] (Bash cargo test*)"),
            ("deny", "no deletions"),
            ("ask", "hooks.approve[2] (WebFetch)"),
        ]
    );
    assert_eq!(audit[0]["subject"], "cargo test -p x");
    assert_eq!(audit[0]["session_id"], "s1");

    // Codex's PermissionRequest (codex-rs/hooks schema): the same answer.
    let codex = serde_json::json!({
        "session_id": "c1", "turn_id": "t1", "transcript_path": null, "cwd": d,
        "hook_event_name": "PermissionRequest", "model": "gpt-5.5", "permission_mode": "default",
        "tool_name": "Bash", "tool_input": {"command": "cargo test", "description": "run the tests"}
    });
    let a = answer(&xo(
        d,
        &["hook", "codex"],
        Some(codex.to_string().as_bytes()),
    ));
    assert_eq!(a["hookSpecificOutput"]["decision"]["behavior"], "allow");

    // A session whose cap a watch marked reached: its next call is refused
    // in PreToolUse's terms; another session's is not.
    std::fs::write(
        d.join(".xo/spent.jsonl"),
        "{\"session_id\":\"s1\",\"reason\":\"12100 tokens of the session's max_tokens 10000 spent\"}\n",
    )
    .unwrap();
    let pre = |session: &str| {
        serde_json::json!({
            "session_id": session, "transcript_path": "/t.jsonl", "cwd": d,
            "permission_mode": "default", "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "toolu_9"
        })
        .to_string()
        .into_bytes()
    };
    let a = answer(&xo(d, &["hook", "claude"], Some(&pre("s1"))));
    assert_eq!(a["hookSpecificOutput"]["hookEventName"], "PreToolUse");
    assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(
        a["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("max_tokens 10000"),
        "{a}"
    );
    assert_eq!(
        answer(&xo(d, &["hook", "claude"], Some(&pre("s2")))),
        serde_json::Value::Null
    );
}

/// Codex's hook contract (codex-rs/hooks/schema/generated): a PostToolUse
/// answer may carry only `continue`, `decision`, `hookSpecificOutput`
/// (`hookEventName` = PostToolUse, `additionalContext`,
/// `updatedMCPToolOutput`), `reason`, `stopReason`, `suppressOutput`,
/// `systemMessage`; a Stop answer the same without `hookSpecificOutput`.
fn codex_allows(answer: &serde_json::Value, event: &str) {
    let top = [
        "continue",
        "decision",
        "hookSpecificOutput",
        "reason",
        "stopReason",
        "suppressOutput",
        "systemMessage",
    ];
    let o = answer.as_object().expect("an object");
    for k in o.keys() {
        assert!(
            top.contains(&k.as_str()),
            "{k} not in Codex's {event} output"
        );
    }
    if let Some(h) = o.get("hookSpecificOutput") {
        assert_eq!(
            event, "PostToolUse",
            "only PostToolUse has hookSpecificOutput"
        );
        assert_eq!(h["hookEventName"], event);
        for k in h.as_object().unwrap().keys() {
            assert!(
                ["hookEventName", "additionalContext", "updatedMCPToolOutput"]
                    .contains(&k.as_str()),
                "{k} not in Codex's hookSpecificOutput"
            );
        }
    }
}

/// Issue 44, item 3: `features` as an inline table or as dotted keys used
/// to be left without `codex_hooks = true` while the install said it was
/// done (the file was edited as text). Each form gets it, kept in its
/// form; a `features` that is no table is an error that says what to add.
#[test]
fn the_codex_hook_install_sets_codex_hooks_whatever_form_features_takes() {
    for (given, kept) in [
        (
            "features = { web_search = true }\n",
            "features = { web_search = true, codex_hooks = true }",
        ),
        (
            "# dotted\nfeatures.web_search = true\n",
            "features.codex_hooks = true",
        ),
        ("model = \"gpt-5\"\n", "[features]"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join(".codex")).unwrap();
        std::fs::write(d.join(".codex/config.toml"), given).unwrap();
        let o = xo(d, &["hook", "codex", "--install", "."], None);
        assert!(
            o.status.success(),
            "{given}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let config = std::fs::read_to_string(d.join(".codex/config.toml")).unwrap();
        let t: toml::Table = config.parse().unwrap();
        assert_eq!(
            t["features"]["codex_hooks"].as_bool(),
            Some(true),
            "{given} -> {config}"
        );
        assert!(config.contains(kept), "{given} -> {config}");
        if given.contains("web_search") {
            assert_eq!(
                t["features"]["web_search"].as_bool(),
                Some(true),
                "{config}"
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".codex")).unwrap();
    std::fs::write(d.join(".codex/config.toml"), "features = 1\n").unwrap();
    let o = xo(d, &["hook", "codex", "--install", "."], None);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("codex_hooks = true") && err.contains("by hand"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join(".codex/config.toml")).unwrap(),
        "features = 1\n",
        "left as it was"
    );
}

#[test]
fn the_codex_hook_installs_in_a_project_and_answers_codex() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".codex")).unwrap();
    // The user's own config: kept, comments and all.
    std::fs::write(
        d.join(".codex/config.toml"),
        "# mine\nmodel = \"gpt-5\"\n\n[features]\nweb_search = true\n",
    )
    .unwrap();
    for _ in 0..2 {
        let o = xo(d, &["hook", "codex", "--install", "."], None);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let hooks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join(".codex/hooks.json")).unwrap())
            .unwrap();
    for event in ["PostToolUse", "Stop"] {
        let list = hooks["hooks"][event].as_array().unwrap();
        assert_eq!(list.len(), 1, "installed once: {hooks}");
        let cmd = list[0]["hooks"][0]["command"].as_str().unwrap();
        assert!(cmd.ends_with("hook codex"), "{cmd}");
    }
    let config = std::fs::read_to_string(d.join(".codex/config.toml")).unwrap();
    let t: toml::Table = config.parse().unwrap();
    assert_eq!(
        t["features"]["codex_hooks"].as_bool(),
        Some(true),
        "{config}"
    );
    assert_eq!(
        t["features"]["web_search"].as_bool(),
        Some(true),
        "{config}"
    );
    assert!(config.starts_with("# mine"), "{config}");

    // Steering addressed to the Codex session (its thread id), as xo watch writes it.
    std::fs::create_dir_all(d.join(".xo")).unwrap();
    std::fs::write(
        d.join(".xo/steering.pending"),
        "{\"session_id\":\"019c-thread-7\",\"text\":\"[SUPERVISOR] Loop: cargo build fails the same way.\"}\n",
    )
    .unwrap();
    // Codex's PostToolUse payload; CLAUDE_PROJECT_DIR is Claude's, not Codex's.
    let payload = serde_json::json!({
        "session_id": "019c-thread-7", "turn_id": "t-3", "transcript_path": null,
        "cwd": d, "hook_event_name": "PostToolUse", "model": "gpt-5",
        "permission_mode": "default", "tool_name": "Bash", "tool_use_id": "c2",
        "tool_input": {"command": "cargo build"},
        "tool_response": "Process exited with code 101"
    })
    .to_string();
    let o = xo_env(
        Path::new("/"),
        &["hook", "codex"],
        Some(payload.as_bytes()),
        &[("CLAUDE_PROJECT_DIR", "/nonexistent")],
    );
    assert!(o.status.success());
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    codex_allows(&a, "PostToolUse");
    assert!(
        a["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .contains("cargo build fails")
    );
    // Nothing left: a Stop lets the session end.
    let stop = serde_json::json!({
        "session_id": "019c-thread-7", "cwd": d, "hook_event_name": "Stop",
        "stop_hook_active": false, "last_assistant_message": "done"
    })
    .to_string();
    let o = xo(d, &["hook", "codex"], Some(stop.as_bytes()));
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    std::fs::write(
        d.join(".xo/steering.pending"),
        "{\"session_id\":\"019c-thread-7\",\"text\":\"[SUPERVISOR] Stall.\"}\n",
    )
    .unwrap();
    let o = xo(d, &["hook", "codex"], Some(stop.as_bytes()));
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    codex_allows(&a, "Stop");
    assert_eq!(a["decision"], "block");
    let o = xo(d, &["hook", "aider"], Some(stop.as_bytes()));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the hooks are: claude, codex"));
}

/// Issue 38: `xo import --stats` prints per record kind what was read,
/// mapped, skipped by name, not known and not readable; on a real Claude
/// Code transcript every kind is mapped or skipped by name (its `progress`
/// lines, its slash-command notices), none unknown.
#[test]
fn import_stats_name_every_record_kind_of_a_real_transcript() {
    let o = xo(
        &real(),
        &["import", "--stats", "claude", "claude/short.jsonl"],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let row = |kind: &str| -> Vec<u64> {
        let line = err
            .lines()
            .find(|l| l.split_whitespace().next() == Some(kind))
            .unwrap_or_else(|| panic!("{kind}:\n{err}"));
        line.split_whitespace()
            .skip(1)
            .map(|n| n.parse().unwrap())
            .collect()
    };
    // read, mapped, skipped, unknown, malformed
    assert_eq!(row("assistant"), [5, 5, 0, 0, 0]);
    assert_eq!(row("progress"), [3, 0, 3, 0, 0]);
    assert_eq!(row("system/local_command"), [2, 0, 2, 0, 0]);
    let lines = std::fs::read_to_string(real().join("claude/short.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count() as u64;
    let read: u64 = err
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("kind"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    assert_eq!(read, lines, "every line is a record of some kind:\n{err}");
}
