//! `xo import` and `xo radio replay --summary` on recorded runs: what the
//! XO would have caught, and when.

use std::path::Path;
use std::process::{Command, Stdio};

fn xo(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xo"));
    c.current_dir(dir)
        .env_remove("XO_NATS_URL")
        .env("RUST_LOG", "warn")
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

    let o = xo(dir.path(), &["import", "codex", "loop.jsonl"], None);
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
