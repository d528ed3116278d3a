//! What agents write today, each case from the agent's current documented
//! format: every case here failed on the sensors before they read it.

use xo_proto::Outcome;
use xo_sensor::document::read_runs;
use xo_sensor::{Format, Sensor, TurnEvent};

fn lines(format: Format, text: &str) -> (Sensor, Vec<TurnEvent>) {
    let mut s = Sensor::new(format);
    let mut turns = Vec::new();
    for l in text.lines() {
        turns.extend(s.line(l).unwrap_or_else(|e| panic!("{e}")));
    }
    (s, turns)
}

fn outcomes(turns: &[TurnEvent]) -> Vec<(Outcome, Option<String>)> {
    turns
        .iter()
        .filter_map(|t| t.action.as_ref())
        .map(|a| (a.outcome, a.error_type.as_ref().map(|e| e.to_string())))
        .collect()
}

#[test]
fn codex_exec_command_exit_codes_are_seen_and_unknown_items_skipped() {
    // Codex's unified exec: `exec_command` with `cmd`; the output's header
    // names the exit code; `write_stdin` ends a process still running.
    let text = [
        r#"{"timestamp":"2026-03-01T10:00:00.000Z","type":"session_meta","payload":{"id":"019c-abc","cwd":"/w","originator":"codex_cli_rs","cli_version":"0.111.0"}}"#,
        r#"{"timestamp":"2026-03-01T10:00:01.000Z","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"cargo test\",\"workdir\":\"/w\"}","call_id":"c1"}}"#,
        r#"{"timestamp":"2026-03-01T10:00:02.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"Chunk ID: 9e8716\nWall time: 0.8740 seconds\nProcess exited with code 101\nOriginal token count: 9\nOutput:\ntest result: FAILED. 1 passed; 1 failed\n"}}"#,
        r#"{"timestamp":"2026-03-01T10:00:03.000Z","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"rg -n foo\"}","call_id":"c2"}}"#,
        r#"{"timestamp":"2026-03-01T10:00:04.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c2","output":"Chunk ID: 1a\nWall time: 0.0102 seconds\nProcess exited with code 1\nOriginal token count: 0\nOutput:\n"}}"#,
        r#"{"timestamp":"2026-03-01T10:00:05.000Z","type":"response_item","payload":{"type":"web_search_call","status":"completed","action":{"type":"search","query":"rust trait objects"}}}"#,
        r#"{"timestamp":"2026-03-01T10:00:06.000Z","type":"response_item","payload":{"type":"ghost_snapshot","ghost_commit":{"id":"x"}}}"#,
        r#"{"timestamp":"2026-03-01T10:00:07.000Z","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"cargo test\"}","call_id":"c3"}}"#,
        r#"{"timestamp":"2026-03-01T10:00:08.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c3","output":"Chunk ID: 77\nWall time: 3.1 seconds\nProcess exited with code 0\nOriginal token count: 5\nOutput:\ntest result: ok. 2 passed\n"}}"#,
    ]
    .join("\n");
    let (s, turns) = lines(Format::Codex, &text);
    assert_eq!(
        outcomes(&turns),
        vec![
            (Outcome::Error, Some("test_failure".into())),
            // ripgrep's 1 is "no match" (its documented meaning): an
            // answer, empty, not a failure.
            (Outcome::Empty, None),
            (Outcome::Ok, None),
            (Outcome::Ok, None),
        ]
    );
    assert_eq!(s.stats().malformed, 0, "no line rejected");
    assert_eq!(
        s.stats().unknown,
        1,
        "the unknown item is skipped and counted"
    );
    assert!(turns[3].progress, "a passing cargo test is progress");
    assert_eq!(
        turns[0].at_ms,
        Some(1_772_359_202_000),
        "the record's own time"
    );
    // The header (chunk id, wall time) is not the output: equal outputs hash equal.
    let out = |i: usize| turns[i].action.as_ref().unwrap().output_hash.clone();
    assert_ne!(out(0), out(3));
}

#[test]
fn claude_usage_is_the_last_copy_of_a_message_and_siblings_are_not_failures() {
    // A message comes once a content block; its usage grows; the last wins.
    let text = [
        r#"{"type":"assistant","sessionId":"s1","timestamp":"2025-11-02T10:00:00.000Z","message":{"id":"m1","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Two checks at once."}],"usage":{"input_tokens":10,"cache_read_input_tokens":1000,"output_tokens":2}}}"#,
        r#"{"type":"assistant","sessionId":"s1","timestamp":"2025-11-02T10:00:01.000Z","message":{"id":"m1","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"false"}}],"usage":{"input_tokens":10,"cache_read_input_tokens":1000,"output_tokens":40}}}"#,
        r#"{"type":"assistant","sessionId":"s1","timestamp":"2025-11-02T10:00:01.500Z","message":{"id":"m1","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t2","name":"Read","input":{"file_path":"/w/a.rs"}}],"usage":{"input_tokens":10,"cache_read_input_tokens":1000,"output_tokens":74}}}"#,
        r#"{"type":"user","sessionId":"s1","timestamp":"2025-11-02T10:00:02.000Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"Error: Exit code 1","is_error":true}]}}"#,
        r#"{"type":"user","sessionId":"s1","timestamp":"2025-11-02T10:00:02.000Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"<tool_use_error>Sibling tool call errored</tool_use_error>","is_error":true}]}}"#,
    ]
    .join("\n");
    let (s, turns) = lines(Format::Claude, &text);
    let out: u64 = turns.iter().map(|t| t.tokens_out).sum();
    assert_eq!(out, 74, "output tokens of the last copy, once");
    assert_eq!(
        outcomes(&turns)
            .iter()
            .filter(|(o, _)| *o == Outcome::Error)
            .count(),
        1
    );
    assert_eq!(s.stats().cancelled, 1);
    assert_eq!(s.ended(), None, "no result record: no end, so no outcome");
    assert_eq!(turns.last().unwrap().at_ms, Some(1_762_077_602_000));
}

#[test]
fn a_claude_subagent_is_its_own_unit_linked_to_its_parent() {
    let line = r#"{"type":"assistant","sessionId":"parent-1","isSidechain":true,"agentId":"a0ad4f","message":{"id":"m9","content":[{"type":"text","text":"done"}]}}"#;
    let (s, _) = lines(Format::Claude, line);
    assert_eq!(s.session(), Some("parent-1-agent-a0ad4f"));
    assert_eq!(s.parent(), Some("parent-1"));
}

#[test]
fn openhands_arrays_and_evaluation_outputs_are_runs() {
    let array = r#"[
      {"id": 1, "timestamp": "2025-01-27T22:44:56.900854", "source": "agent", "action": "run", "args": {"command": "ls"}},
      {"id": 2, "cause": 1, "source": "agent", "observation": "run", "content": "a.py", "extras": {"metadata": {"exit_code": 0}}},
      {"id": 3, "source": "agent", "action": "finish", "args": {"final_thought": "done"}}
    ]"#;
    let runs = read_runs(Format::OpenHands, array).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].turns.len(), 2);
    assert_eq!(runs[0].outcome(), "succeeded");
    assert!(runs[0].errors.is_empty());

    let one = r#"{"id": 1, "source": "agent", "action": "run", "args": {"command": "make"}}"#;
    let output = format!(
        "{{\"instance_id\": \"x__y-1\", \"history\": [{one}], \"error\": \"RuntimeError: Agent reached maximum iteration\"}}\n{{\"instance_id\": \"x__y-2\", \"history\": [{one}]}}\n"
    );
    let runs = read_runs(Format::OpenHands, &output).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].id.as_deref(), Some("x__y-1"));
    assert_eq!(runs[0].outcome(), "failed");
    assert_eq!(runs[1].outcome(), "unknown");
}

#[test]
fn swe_agent_history_only_and_mini_swe_agent_lists() {
    let history = r#"{"history": [
      {"role": "system", "content": "x", "message_type": "system_prompt"},
      {"role": "assistant", "content": "look", "action": "find_file a.py", "message_type": "action"},
      {"role": "tool", "content": "Found 1 matches", "message_type": "observation"},
      {"role": "assistant", "content": "done", "action": "submit", "message_type": "action"},
      {"role": "tool", "content": "diff", "message_type": "observation"}
    ]}"#;
    let runs = read_runs(Format::SweAgent, history).unwrap();
    assert_eq!(runs[0].turns.len(), 3, "two steps and the end");
    assert_eq!(runs[0].outcome(), "succeeded");
    assert!(
        runs[0].turns[0].progress,
        "a first look at a file is progress"
    );

    let mini = r#"[
      {"role": "system", "content": "x"},
      {"role": "assistant", "content": "THOUGHT\n```mswea_bash_command\ncat a.py\n```"},
      {"role": "user", "content": "<returncode>0</returncode>\n<output>\nprint(1)\n</output>"},
      {"role": "assistant", "content": "THOUGHT\n```mswea_bash_command\ncat a.py\n```"},
      {"role": "user", "content": "<returncode>0</returncode>\n<output>\nprint(1)\n</output>"}
    ]"#;
    let runs = read_runs(Format::SweAgent, mini).unwrap();
    let t = &runs[0].turns;
    assert_eq!(t.len(), 2);
    assert!(
        t[0].progress && !t[1].progress,
        "re-reading the same file is not progress"
    );
    assert_eq!(runs[0].outcome(), "unknown");
}

/// When the agent stops working: Claude Code's transcript records the end
/// of a turn (`stop_reason: end_turn`, then `turn_duration`), Codex's
/// rollout `task_complete` (or `turn_aborted` when its user interrupts),
/// OpenHands an agent state; work after it clears it.
#[test]
fn the_sensors_tell_when_the_agent_rests() {
    let (mut s, _) = lines(
        Format::Claude,
        r#"{"type":"assistant","sessionId":"s1","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"a.rs"}}],"stop_reason":"tool_use"}}
{"type":"user","sessionId":"s1","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"fn a() {}"}]}}"#,
    );
    assert!(!s.resting(), "mid-work");
    s.line(r#"{"type":"assistant","sessionId":"s1","message":{"id":"m2","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn"}}"#).unwrap();
    assert!(s.resting(), "the turn ended");
    s.line(r#"{"type":"system","subtype":"turn_duration","durationMs":900,"sessionId":"s1"}"#)
        .unwrap();
    assert!(s.resting());
    assert_eq!(s.ended(), None, "a turn's end is no outcome");
    s.line(r#"{"type":"assistant","sessionId":"s1","message":{"id":"m3","content":[{"type":"tool_use","id":"t2","name":"Edit","input":{"file_path":"a.rs"}}]}}"#).unwrap();
    s.line(r#"{"type":"user","sessionId":"s1","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"ok"}]}}"#).unwrap();
    assert!(!s.resting(), "its user asked more: working again");

    let (mut s, turns) = lines(
        Format::Codex,
        r#"{"type":"session_meta","payload":{"id":"019c-t","cwd":"/w"}}
{"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"cargo test\"}","call_id":"c1"}}
{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"Process exited with code 0\nOutput:\ntest result: ok"}}
{"type":"event_msg","payload":{"type":"task_complete","last_agent_message":"All tests pass."}}"#,
    );
    assert!(s.resting());
    assert_eq!(s.ended(), Some(false), "a completed task is an end");
    assert_eq!(
        turns.last().and_then(|t| t.summary.as_deref()),
        Some("task complete: All tests pass.")
    );
    s.line(r#"{"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"git push\"}","call_id":"c2"}}"#).unwrap();
    s.line(r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"c2","output":"Process exited with code 0"}}"#).unwrap();
    assert!(!s.resting());
    assert_eq!(s.ended(), None, "work after the end: no end (yet)");
    s.line(r#"{"type":"event_msg","payload":{"type":"turn_aborted","reason":"interrupted"}}"#)
        .unwrap();
    assert!(s.resting(), "interrupted by its user");

    let (s, _) = lines(
        Format::OpenHands,
        r#"{"id":1,"source":"agent","action":"message","args":{"content":"Which file?"}}
{"id":2,"source":"environment","observation":"agent_state_changed","content":"","extras":{"agent_state":"awaiting_user_input"}}"#,
    );
    assert!(s.resting());
    let (s, _) = lines(
        Format::OpenHands,
        r#"{"id":2,"source":"environment","observation":"agent_state_changed","content":"","extras":{"agent_state":"running"}}"#,
    );
    assert!(!s.resting());
}
