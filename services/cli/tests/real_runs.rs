//! The public recordings of real agent runs in `tests/fixtures/real`
//! (sources and licences in its SOURCES.md): every one imported without a
//! rejected line, the detection benchmark over them, and the Claude Code
//! hook held to Claude Code's hook contract.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn real() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/real")
}

fn xo(
    dir: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xo"));
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

#[test]
fn every_real_recording_imports_with_no_line_rejected() {
    let mut count = 0;
    for (folder, format) in [
        ("openhands", "openhands"),
        ("swe-agent", "swe-agent"),
        ("mini-swe-agent", "swe-agent"),
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(real().join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            let o = xo(&real(), &["import", format, f.to_str().unwrap()], None, &[]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "{}: {err}", f.display());
            assert!(err.contains(" 0 lines rejected"), "{}: {err}", f.display());
            let reports = String::from_utf8_lossy(&o.stdout).lines().count();
            assert!(reports > 0, "{}: no reports", f.display());
            count += err.matches("; outcome ").count();
        }
    }
    assert!(count >= 20, "at least 20 real runs, found {count}");
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
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let from_folder = String::from_utf8_lossy(&o.stdout).lines().count();
    let o = xo(
        &real(),
        &["import", "openhands", "openhands/basic_gui_mode.json"],
        None,
        &[],
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
}

#[test]
fn the_detection_benchmark_prints_xo_beside_the_openhands_rules() {
    let o = xo(&real(), &["bench", "detection", "."], None, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["openhands", "swe-agent", "total"] {
        assert!(
            out.lines().any(|l| l.starts_with(f)),
            "{f} row missing:\n{out}"
        );
    }
    // Measured on these runs: every loop the OpenHands rules catch, XO
    // catches at the same turn or earlier; at most 1 succeeded run in 5 steered.
    let goal = |what: &str| {
        out.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what}:\n{out}"))
            .to_string()
    };
    assert!(goal("goal, loops").ends_with("MET"), "{out}");
    assert!(goal("of 28 steered").ends_with("MET"), "{out}");
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
        &[],
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
        &[],
    );
    assert!(o.stdout.is_empty(), "nothing pending for this session");
    // Before a session stops, pending steering makes it go on, once.
    let o = xo(
        d,
        &["hook", "claude"],
        Some(&payload("Stop", "other", d)),
        &[],
    );
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
