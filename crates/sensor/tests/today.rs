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

/// mini-swe-agent 2 (`trajectory_format` `mini-swe-agent-1.1`) with a
/// tool-call model, each message as its source writes it
/// (github.com/SWE-agent/mini-swe-agent @ a83fcae8:
/// `models/litellm_model.py` `query`: the assistant message is litellm's
/// `message.model_dump()` with `extra.actions` `[{command, tool_call_id}]`;
/// `models/utils/actions_toolcall.py`: each observation is
/// `role: "tool"` with its `tool_call_id`, the `observation_template`'s
/// `<returncode>`/`<output>` as content and `extra.returncode`,
/// `raw_output`, `exception_info`; a reply it cannot parse is a
/// `role: "user"` `Format error:` with `extra.interrupt_type`
/// `FormatError`, and no assistant message; `agents/default.py`: the run
/// ends with a `role: "exit"` message). The calls and results are read
/// (they used to be dropped: message-only turns), two calls of one reply
/// are paired by id, the refusal is a failed `format_error`, never
/// progress, and `LimitsExceeded` ends the run failed.
#[test]
fn mini_swe_agent_2_tool_call_trajectories_are_read_call_by_call() {
    let call = |id: &str, cmd: &str| serde_json::json!({"function": {"arguments": serde_json::json!({"command": cmd}).to_string(), "name": "bash"}, "id": id, "type": "function"});
    let assistant = |content: serde_json::Value, calls: &[(&str, &str)]| {
        serde_json::json!({
            "content": content, "role": "assistant",
            "tool_calls": calls.iter().map(|(i, c)| call(i, c)).collect::<Vec<_>>(),
            "function_call": null, "provider_specific_fields": {"refusal": null},
            "extra": {
                "actions": calls.iter().map(|(i, c)| serde_json::json!({"command": c, "tool_call_id": i})).collect::<Vec<_>>(),
                "response": {"id": "chatcmpl-1", "object": "chat.completion"},
                "cost": 0.0021, "timestamp": 1_769_000_000.5
            }
        })
    };
    let tool = |id: &str, code: i64, out: &str, exception: Option<&str>| {
        let mut content = String::new();
        if let Some(e) = exception {
            content.push_str(&format!("<exception>{e}</exception>\n"));
        }
        content.push_str(&format!(
            "<returncode>{code}</returncode>\n<output>\n{out}</output>"
        ));
        serde_json::json!({
            "content": content,
            "extra": {"raw_output": out, "returncode": code, "timestamp": 1_769_000_001.0, "exception_info": exception},
            "tool_call_id": id, "role": "tool"
        })
    };
    let doc = serde_json::json!({
        "info": {
            "model_stats": {"instance_cost": 0.0105, "api_calls": 5},
            "config": {"agent_type": "minisweagent.agents.default.DefaultAgent"},
            "mini_version": "2.0.0", "exit_status": "LimitsExceeded", "submission": ""
        },
        "messages": [
            {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
            {"role": "user", "content": "Please solve this issue: the parser drops the last field."},
            assistant(serde_json::Value::Null, &[("call_a", "ls -la src"), ("call_b", "cd src && grep -n 'def parse' parser.py")]),
            tool("call_b", 1, "", None),
            tool("call_a", 0, "parser.py\n", None),
            assistant(serde_json::json!("Run the tests."), &[("call_c", "python -m pytest tests/test_parser.py -q")]),
            tool("call_c", 1, "E   AssertionError: assert ['a'] == ['a', 'b']\n1 failed in 0.04s\n", None),
            {"role": "user", "content": "Format error:\n\n<error>\nNo tool calls found in the response. Every response MUST include at least one tool call.\n</error>\n\nHere is general guidance on how to submit correct toolcalls:", "extra": {"interrupt_type": "FormatError", "cost": 0.0019, "response": {"id": "chatcmpl-2"}}},
            assistant(serde_json::Value::Null, &[("call_d", "sleep 100")]),
            tool("call_d", -1, "", Some("An error occurred while executing the command: timed out")),
            {"role": "exit", "content": "LimitsExceeded", "extra": {"exit_status": "LimitsExceeded", "submission": ""}}
        ],
        "trajectory_format": "mini-swe-agent-1.1"
    });
    let runs = read_runs(Format::SweAgent, &doc.to_string()).unwrap();
    let run = &runs[0];
    let actions: Vec<_> = run.turns.iter().filter_map(|t| t.action.as_ref()).collect();
    // The last turn is the run's end.
    let (end, actions) = actions.split_last().unwrap();
    assert_eq!(
        end.error_type.as_deref(),
        Some("run_failed"),
        "LimitsExceeded"
    );
    let tools: Vec<&str> = actions
        .iter()
        .map(|a| a.tool.as_deref().unwrap_or("-"))
        .collect();
    // grep's 1 (no match) is paired with its own call, whatever the order.
    assert_eq!(
        tools,
        ["grep", "ls", "python", "reply", "sleep"],
        "{actions:?}"
    );
    let o = outcomes(&run.turns);
    assert_eq!(
        o[0].0,
        Outcome::Empty,
        "grep 1 is no match, no failure: {o:?}"
    );
    assert_eq!(o[1].0, Outcome::Ok);
    assert_eq!(o[2].0, Outcome::Error, "{o:?}");
    assert_eq!(o[3], (Outcome::Error, Some("format_error".into())), "{o:?}");
    assert_eq!(
        actions[3].line.as_deref(),
        Some(
            "No tool calls found in the response. Every response MUST include at least one tool call."
        ),
        "the refusal quotes what the harness said was wrong"
    );
    assert_eq!(o[4], (Outcome::Error, Some("timeout".into())), "{o:?}");
    assert!(
        actions[4]
            .line
            .as_deref()
            .is_some_and(|l| l.contains("timed out")),
        "{:?}",
        actions[4]
    );
    assert!(
        actions
            .iter()
            .all(|a| a.kind != xo_proto::ActionKind::Message),
        "no message-only turns"
    );
    assert_eq!(run.outcome(), "failed", "LimitsExceeded");
    assert_eq!(run.unfinished, 0);
    assert_eq!(run.stats.orphan_results, 0);
}
