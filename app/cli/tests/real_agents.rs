//! The agents' streams as they really are, through the sensor and the
//! radio check: each fake stream below follows a shape read off the real
//! recordings under `tests/fixtures/real/` (Claude Code 2.1 transcripts,
//! Codex CLI 0.125 rollouts), not a tidier one. What each test holds:
//!
//! - Claude Code writes a message a content block a line: the text before
//!   a call is part of the call's step, not a turn of its own.
//! - A person's prompt is a new instruction: turns without progress start
//!   over.
//! - Claude Code compacts its own context at 83.5% of its window: the XO's
//!   context steering starts past that, and is given once a level.
//! - Codex's unified exec returns `Process running with session ID N` and
//!   ends the command in a later `write_stdin` (or `exec_command_end`):
//!   the command's end is its action, with its exit code, so a failing
//!   command run again and again is a loop, and polls are waits.

use xo_proto::{ActionKind, AnomalyKind, Outcome, SaluteReport, Severity};
use xo_radio::profile::{AGENT_ROLE, RoleProfile};
use xo_radio::{Radio, Roles};
use xo_sensor::salute::SaluteState;
use xo_sensor::{Format, Sensor, TurnEvent};

/// Every turn of `lines` (and what the stream held back at its end).
fn turns(format: Format, lines: &[String]) -> Vec<TurnEvent> {
    let mut s = Sensor::new(format);
    let mut out = Vec::new();
    for l in lines {
        out.extend(s.line(l).unwrap_or_else(|e| panic!("{l}: {e}")));
    }
    out.extend(s.finish());
    out
}

/// The reports a unit of the `agent` role makes of `turns`.
fn reports(turns: Vec<TurnEvent>) -> Vec<SaluteReport> {
    let mut st = SaluteState::new("u1", "agent", None, 200_000);
    st.start_task(Some("t1".into()));
    turns.into_iter().map(|t| st.turn(t)).collect()
}

/// The radio external agents are checked with: the `agent` role, as `xo
/// import`, `xo watch` and `xo bench detection` check them.
fn agent_radio() -> Radio {
    Radio::new(Roles::new(
        RoleProfile::default(),
        [(AGENT_ROLE.to_string(), RoleProfile::agent())].into(),
    ))
}

/// What the XO steers on `reports`, by kind and severity.
fn steered(reports: &[SaluteReport]) -> Vec<(AnomalyKind, Severity, u64)> {
    let mut radio = agent_radio();
    reports
        .iter()
        .flat_map(|r| {
            radio
                .check(r)
                .steering
                .into_iter()
                .map(|s| (s.kind, s.severity, s.turn))
        })
        .collect()
}

// --- Claude Code ---------------------------------------------------------------

/// One assistant line of a Claude Code transcript: one content block, the
/// message's usage so far.
fn claude_block(id: &str, block: serde_json::Value, context: u64) -> String {
    serde_json::json!({"type": "assistant", "sessionId": "s1", "isSidechain": false,
        "timestamp": "2026-02-11T20:00:00.000Z",
        "message": {"id": id, "model": "claude-opus-4-6", "role": "assistant", "stop_reason": null,
            "content": [block],
            "usage": {"input_tokens": 3, "cache_creation_input_tokens": 200, "cache_read_input_tokens": context - 203, "output_tokens": 40}}})
    .to_string()
}

fn claude_result(call: &str, text: &str, is_error: bool) -> String {
    serde_json::json!({"type": "user", "sessionId": "s1",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": text, "is_error": is_error}]}})
    .to_string()
}

fn claude_prompt(text: &str) -> String {
    serde_json::json!({"type": "user", "sessionId": "s1", "message": {"role": "user", "content": text}})
        .to_string()
}

/// A step as Claude Code writes most of them: a line of text, then the
/// call on the next line of the same message, then its result.
fn claude_step(i: u32, command: &str, output: &str, context: u64) -> Vec<String> {
    let (id, call) = (format!("msg_{i}"), format!("toolu_{i}"));
    vec![
        claude_block(
            &id,
            serde_json::json!({"type": "text", "text": format!("Let me check step {i}.")}),
            context,
        ),
        claude_block(
            &id,
            serde_json::json!({"type": "tool_use", "id": call, "name": "Bash", "input": {"command": command, "description": "a step"}}),
            context,
        ),
        claude_result(&call, output, false),
    ]
}

#[test]
fn a_claude_step_with_its_text_is_one_turn() {
    let mut lines = claude_step(1, "git status", "clean", 20_000);
    lines.push(claude_block(
        "msg_2",
        serde_json::json!({"type": "text", "text": "All done."}),
        20_000,
    ));
    let t = turns(Format::Claude, &lines);
    let kinds: Vec<_> = t
        .iter()
        .map(|t| t.action.as_ref().map(|a| (a.kind, a.tool.clone())))
        .collect();
    assert_eq!(
        kinds,
        [
            Some((ActionKind::Tool, Some("Bash".into()))),
            Some((ActionKind::Message, None))
        ],
        "the call's preamble is no turn; the last words are one, when the stream ends"
    );
}

#[test]
fn a_persons_prompt_starts_the_count_of_turns_without_progress_over() {
    // Twelve looks at the same thing (no progress), a prompt, twelve more.
    let mut lines = Vec::new();
    for i in 0..12 {
        lines.extend(claude_step(i, "git status", "clean", 20_000));
    }
    lines.push(claude_prompt("did you push?"));
    for i in 12..24 {
        lines.extend(claude_step(i, "git status", "clean", 20_000));
    }
    let r = reports(turns(Format::Claude, &lines));
    assert_eq!(r.len(), 24, "a turn a step, none a preamble");
    // `git status` is no look at a file, no check, no write: no progress.
    assert_eq!(r[11].activity.turns_since_progress, 12);
    assert_eq!(
        r[12].activity.turns_since_progress, 0,
        "the prompt was an instruction"
    );
    assert_eq!(r[23].activity.turns_since_progress, 11);
    // Without the prompt, the same 24 steps are a stall: the check can fail.
    let mut straight = Vec::new();
    for i in 0..24 {
        straight.extend(claude_step(i, "git status", "clean", 20_000));
    }
    let r = reports(turns(Format::Claude, &straight));
    assert!(steered(&r).iter().any(|s| s.0 == AnomalyKind::Stall));
}

#[test]
fn claude_codes_own_compaction_is_not_duplicated_and_a_level_is_told_once() {
    // The context grows from 150k to 196k of 200k, 2k a step: Claude Code
    // compacts at 167k (83.5%) by itself; here it never does.
    let steps: Vec<String> = (0..24)
        .flat_map(|i| {
            claude_step(
                i,
                &format!("echo {i}"),
                &format!("{i}"),
                150_000 + u64::from(i) * 2_000,
            )
        })
        .collect();
    let r = reports(turns(Format::Claude, &steps));
    let compacts = r[0]
        .size
        .compacts_at
        .expect("Claude Code's compaction point");
    assert!((compacts - 0.835).abs() < 1e-9, "{compacts}");
    let context: Vec<_> = steered(&r)
        .into_iter()
        .filter(|s| s.0 == AnomalyKind::Context)
        .collect();
    // Warned once past 0.885 (its own point + 0.05), urgent once past 0.935.
    assert_eq!(
        context.iter().map(|s| s.1).collect::<Vec<_>>(),
        [Severity::Warning, Severity::Urgent],
        "{context:?}"
    );
    let fill_at = |turn: u64| r[(turn - 1) as usize].size.context_fill;
    assert!(fill_at(context[0].2) > 0.885 && fill_at(context[0].2 - 1) <= 0.885);
    assert!(fill_at(context[1].2) > 0.935);
    // An agent that does not compact itself is told at 0.80, once.
    let mut plain = r.clone();
    for p in &mut plain {
        p.size.compacts_at = None;
    }
    let first = steered(&plain)
        .into_iter()
        .find(|s| s.0 == AnomalyKind::Context)
        .unwrap();
    assert!(fill_at(first.2) > 0.80 && fill_at(first.2 - 1) <= 0.80);
}

#[test]
fn a_context_warning_is_given_again_after_the_context_was_compacted() {
    let mut r: Vec<SaluteReport> = Vec::new();
    for (turn, fill) in [(1, 0.82), (5, 0.83), (9, 0.84), (13, 0.30), (17, 0.81)] {
        let mut rep = SaluteReport::new("u1", "agent", turn, turn);
        rep.size.context_fill = fill;
        r.push(rep);
    }
    let told: Vec<u64> = steered(&r)
        .into_iter()
        .filter(|s| s.0 == AnomalyKind::Context)
        .map(|s| s.2)
        .collect();
    assert_eq!(
        told,
        [1, 17],
        "not at turns 5 and 9 (the cooldown is over, the level was told)"
    );
}

#[test]
fn a_unit_seen_compacting_high_is_not_warned_before_that_point_again() {
    let mut st = SaluteState::new("u1", "agent", None, 100_000);
    let step = |tokens: u64, condensed: bool| TurnEvent {
        context_tokens: Some(tokens),
        context_limit: Some(100_000),
        condensed,
        ..TurnEvent::default()
    };
    for t in [50_000, 80_000, 91_000] {
        assert_eq!(st.turn(step(t, false)).size.compacts_at, None);
    }
    // It compacted itself after 91%: that is where it does.
    let r = st.turn(step(20_000, true));
    assert_eq!(r.size.compacts_at, Some(0.91));
    // A compaction asked for low in the window teaches nothing.
    let mut st = SaluteState::new("u2", "agent", None, 100_000);
    st.turn(step(40_000, false));
    assert_eq!(st.turn(step(10_000, true)).size.compacts_at, None);
}

// --- Codex ---------------------------------------------------------------------

fn rollout(kind: &str, payload: serde_json::Value) -> String {
    serde_json::json!({"timestamp": "2026-05-11T08:30:00.000Z", "type": kind, "payload": payload})
        .to_string()
}

fn call(name: &str, id: &str, args: serde_json::Value) -> String {
    rollout(
        "response_item",
        serde_json::json!({"type": "function_call", "name": name, "arguments": args.to_string(), "call_id": id}),
    )
}

/// `exec_command`'s and `write_stdin`'s result text, as Codex 0.125 writes it.
fn output(id: &str, state: &str, out: &str) -> String {
    rollout(
        "response_item",
        serde_json::json!({"type": "function_call_output", "call_id": id,
            "output": format!("Chunk ID: a21e41\nWall time: 1.0037 seconds\n{state}\nOriginal token count: 0\nOutput:\n{out}")}),
    )
}

/// A long command as Codex runs it: started, polled while it runs, ended
/// by a poll (`end_event`: or first by `exec_command_end`).
fn codex_command(i: u32, cmd: &str, code: i64, out: &str, end_event: bool) -> Vec<String> {
    let session = format!("{}", 48_000 + i);
    let (run, p1, p2) = (
        format!("call_r{i}"),
        format!("call_p{i}"),
        format!("call_q{i}"),
    );
    let mut lines = vec![
        call(
            "exec_command",
            &run,
            serde_json::json!({"cmd": cmd, "workdir": "/w", "yield_time_ms": 1000}),
        ),
        output(
            &run,
            &format!("Process running with session ID {session}"),
            "",
        ),
        call(
            "write_stdin",
            &p1,
            serde_json::json!({"session_id": session.parse::<u64>().unwrap(), "chars": "", "yield_time_ms": 1000}),
        ),
        output(
            &p1,
            &format!("Process running with session ID {session}"),
            "",
        ),
    ];
    if end_event {
        lines.push(rollout(
            "event_msg",
            serde_json::json!({"type": "exec_command_end", "call_id": run, "process_id": session,
                "command": ["/bin/zsh", "-lc", cmd], "aggregated_output": out, "exit_code": code,
                "status": if code == 0 { "completed" } else { "failed" }}),
        ));
    }
    lines.push(call(
        "write_stdin",
        &p2,
        serde_json::json!({"session_id": session.parse::<u64>().unwrap(), "chars": "", "yield_time_ms": 1000}),
    ));
    lines.push(output(
        &p2,
        &format!("Process exited with code {code}"),
        if end_event { "" } else { out },
    ));
    lines
}

#[test]
fn a_codex_command_that_fails_after_it_was_polled_is_a_failed_command() {
    for end_event in [false, true] {
        let lines = codex_command(
            1,
            "cargo test",
            101,
            "test result: FAILED. 1 passed; 2 failed",
            end_event,
        );
        let mut s = Sensor::new(Format::Codex);
        let mut t = Vec::new();
        for l in &lines {
            t.extend(s.line(l).unwrap());
        }
        let actions: Vec<_> = t.iter().filter_map(|t| t.action.clone()).collect();
        assert_eq!(actions.len(), 1, "one command, one action: {actions:?}");
        assert_eq!(actions[0].tool.as_deref(), Some("exec_command"));
        assert_eq!(actions[0].outcome, Outcome::Error);
        assert_eq!(actions[0].error_type.as_deref(), Some("test_failure"));
        assert!(
            t.iter().filter(|t| t.action.is_none()).all(|t| t.waiting),
            "the polls are waits"
        );
        assert_eq!(s.stats().orphan_results, 0, "end_event {end_event}");
        assert_eq!(s.unfinished(), 0);
    }
}

#[test]
fn a_codex_command_failing_again_and_again_is_a_loop_and_polling_is_not() {
    // The same failing test run three times, each polled while it runs.
    let mut lines = vec![rollout(
        "session_meta",
        serde_json::json!({"id": "019e1625", "cwd": "/w", "originator": "codex-tui", "cli_version": "0.125.0"}),
    )];
    for i in 0..3 {
        lines.extend(codex_command(
            i,
            "cargo test",
            101,
            "test result: FAILED. 1 passed; 2 failed",
            i % 2 == 0,
        ));
    }
    let r = reports(turns(Format::Codex, &lines));
    let loops: Vec<_> = steered(&r)
        .into_iter()
        .filter(|s| s.0 == AnomalyKind::Loop)
        .collect();
    assert_eq!(loops.len(), 1, "{loops:?}");
    // A long command polled many times that succeeds: no loop, no stall.
    let mut lines = Vec::new();
    let session = "77";
    lines.push(call(
        "exec_command",
        "c0",
        serde_json::json!({"cmd": "cargo build --release"}),
    ));
    lines.push(output(
        "c0",
        &format!("Process running with session ID {session}"),
        "",
    ));
    for p in 0..20 {
        let id = format!("p{p}");
        lines.push(call(
            "write_stdin",
            &id,
            serde_json::json!({"session_id": 77, "chars": ""}),
        ));
        lines.push(output(
            &id,
            &format!("Process running with session ID {session}"),
            "",
        ));
    }
    lines.push(call(
        "write_stdin",
        "pz",
        serde_json::json!({"session_id": 77, "chars": ""}),
    ));
    lines.push(output(
        "pz",
        "Process exited with code 0",
        "Finished `release` profile",
    ));
    let r = reports(turns(Format::Codex, &lines));
    assert_eq!(
        steered(&r),
        [],
        "waiting on a build is neither a loop nor a stall"
    );
    assert_eq!(
        r.last().unwrap().activity.turns_since_progress,
        0,
        "the build was progress"
    );
}

// --- Cursor --------------------------------------------------------------------

#[test]
fn a_cursor_model_calls_text_before_its_tools_is_no_turn_of_its_own() {
    // As cursor-agent writes a step: thinking, the model call's text, its
    // tool with the same model_call_id; at the end the final text.
    let line = |v: serde_json::Value| v.to_string();
    let mut lines = Vec::new();
    for i in 0..3 {
        let mc = format!("mc-{i}");
        lines.push(line(serde_json::json!({"type": "thinking", "subtype": "delta", "text": "hm", "session_id": "c1"})));
        lines.push(line(serde_json::json!({"type": "assistant", "model_call_id": mc, "session_id": "c1",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "Running the tests."}]}})));
        let call = serde_json::json!({"shellToolCall": {"args": {"command": "npm test"}}});
        lines.push(line(serde_json::json!({"type": "tool_call", "subtype": "started", "call_id": format!("c{i}"),
            "model_call_id": mc, "session_id": "c1", "tool_call": call})));
        let done = serde_json::json!({"shellToolCall": {"args": {"command": "npm test"},
            "result": {"success": {"exitCode": 1, "stdout": "", "stderr": "1 failed, 3 passed"}}}});
        lines.push(line(serde_json::json!({"type": "tool_call", "subtype": "completed", "call_id": format!("c{i}"),
            "model_call_id": mc, "session_id": "c1", "tool_call": done})));
    }
    lines.push(line(serde_json::json!({"type": "assistant", "session_id": "c1",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "I could not fix it."}]}})));
    let t = turns(Format::Cursor, &lines);
    let shape: Vec<_> = t
        .iter()
        .map(|t| {
            let a = t.action.as_ref().unwrap();
            (a.tool.as_ref().map(|t| t.to_string()), a.outcome)
        })
        .collect();
    assert_eq!(
        shape,
        [
            (Some("shell".to_string()), Outcome::Error),
            (Some("shell".to_string()), Outcome::Error),
            (Some("shell".to_string()), Outcome::Error),
            (None, Outcome::Ok)
        ],
        "a failing command under `success` with its exit code is a failure; text before a tool is no turn"
    );
    let r = reports(t);
    assert!(
        steered(&r).iter().any(|s| s.0 == AnomalyKind::Loop),
        "the same failing test three times is a loop"
    );
}

/// A command Claude Code sends to the background (by `run_in_background`,
/// or past its timeout) ends in a later `TaskOutput`: that end is the
/// command's action, with its exit code; a `TaskOutput` that finds it still
/// running is a wait. The result texts are Claude Code 2.1's, from the real
/// transcripts.
#[test]
fn a_claude_background_command_ends_in_its_task_output() {
    let call_line = |i: u32, name: &str, input: serde_json::Value| {
        claude_block(
            &format!("msg_{i}"),
            serde_json::json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": name, "input": input}),
            30_000,
        )
    };
    let poll = |status: &str, exit: Option<i64>| {
        format!(
            "<retrieval_status>{}</retrieval_status>\n\n<task_id>b0be39e</task_id>\n\n<task_type>local_bash</task_type>\n\n<status>{status}</status>\n\n{}<output>\n3 tests, 1 failure\n</output>",
            if status == "running" {
                "timeout"
            } else {
                "success"
            },
            exit.map(|e| format!("<exit_code>{e}</exit_code>\n\n"))
                .unwrap_or_default()
        )
    };
    let mut lines = Vec::new();
    for round in 0..3u32 {
        let i = round * 10;
        lines.push(call_line(
            i,
            "Bash",
            serde_json::json!({"command": "mix test", "description": "Run tests", "run_in_background": true}),
        ));
        lines.push(claude_result(
            &format!("toolu_{i}"),
            "Command running in background with ID: b0be39e. Output is being written to: /tmp/claude-1000/tasks/b0be39e.output",
            false,
        ));
        // Polled: still running after two minutes, then its end. The last
        // round polls as Claude Code 2.0 did: BashOutput, its bash_id, the
        // output in <stdout> (claude-code-log's real sample).
        for (j, status, exit) in [(1, "running", None), (2, "completed", Some(1))] {
            let (tool, input, text) = if round < 2 {
                (
                    "TaskOutput",
                    serde_json::json!({"task_id": "b0be39e", "block": true, "timeout": 120000}),
                    poll(status, exit),
                )
            } else {
                (
                    "BashOutput",
                    serde_json::json!({"bash_id": "b0be39e"}),
                    format!(
                        "<status>{status}</status>\n\n{}<stdout>\n3 tests, 1 failure\n</stdout>\n\n<timestamp>2025-11-18T00:03:27.238Z</timestamp>",
                        exit.map(|e| format!("<exit_code>{e}</exit_code>\n\n"))
                            .unwrap_or_default()
                    ),
                )
            };
            lines.push(call_line(i + j, tool, input));
            lines.push(claude_result(&format!("toolu_{}", i + j), &text, false));
        }
    }
    let t = turns(Format::Claude, &lines);
    let actions: Vec<_> = t.iter().filter_map(|t| t.action.clone()).collect();
    assert_eq!(actions.len(), 3, "three commands: {actions:?}");
    for a in &actions {
        assert_eq!(a.tool.as_deref(), Some("Bash"));
        assert_eq!(a.outcome, Outcome::Error);
        assert_eq!(a.error_type.as_deref(), Some("test_failure"));
    }
    assert_eq!(
        t.iter().filter(|t| t.waiting).count(),
        3,
        "the running polls are waits"
    );
    let r = reports(t);
    assert!(
        steered(&r).iter().any(|s| s.0 == AnomalyKind::Loop),
        "the same failing test run three times in the background is a loop"
    );
}

// --- mini-swe-agent: the evidence a steering names --------------------------------

/// A mini-swe-agent message list as its trajectories keep it (the shape of
/// `tests/fixtures/real/mini-swe-agent/github_issue.traj.json`): the
/// model's replies with one `mswea_bash_command` block, the observations
/// with `<returncode>` and `<output>`.
fn mini_swe(steps: &[(&str, i64, &str)]) -> String {
    let mut m = vec![
        serde_json::json!({"role": "system", "content": "You are a helpful assistant that can interact with a computer."}),
        serde_json::json!({"role": "user", "content": "Please solve this issue: lint errors in src/a.py"}),
    ];
    for (cmd, code, out) in steps {
        m.push(serde_json::json!({"role": "assistant", "content": format!("Let me run it.\n\n```mswea_bash_command\n{cmd}\n```")}));
        m.push(serde_json::json!({"role": "user", "content": format!("<returncode>{code}</returncode>\n<output>\n{out}</output>")}));
    }
    serde_json::Value::Array(m).to_string()
}

/// The XO's steering texts on a mini-swe-agent run.
fn steering_texts(doc: &str) -> Vec<String> {
    let (turns, _) = xo_sensor::swe::parse_document(doc).unwrap();
    let reports = reports(turns);
    let mut radio = agent_radio();
    reports
        .iter()
        .flat_map(|r| radio.check(r).steering)
        .map(|s| s.message)
        .collect()
}

/// Issue 37, item 1: a run re-ran pylint five ways and got the same
/// findings each time; it was told "pylint failed 3 times in a row with the
/// same error (exit_16)… find the cause of the error". Exit 16 is pylint
/// reporting convention messages, not an error: the steering now says the
/// output is the same whatever the agent changes, and quotes it.
#[test]
fn pylint_findings_whatever_the_options_are_named_as_such_not_as_a_failure() {
    let out = "************* Module a\nsrc/a.py:3:0: C0116: Missing function or method docstring (missing-function-docstring)\n\n------------------------------------------------------------------\nYour code has been rated at 8.00/10\n";
    let steps: Vec<(String, i64, &str)> = [
        "",
        " --disable=C0114",
        " --disable=C0114,C0115",
        " --score=n --disable=C0114",
        " --rcfile=/dev/null",
        " -j 2",
    ]
    .iter()
    .map(|o| (format!("cd /repo && pylint{o} src/a.py"), 16, out))
    .collect();
    let steps: Vec<(&str, i64, &str)> =
        steps.iter().map(|(c, n, o)| (c.as_str(), *n, *o)).collect();
    let texts = steering_texts(&mini_swe(&steps));
    let lp: Vec<&String> = texts.iter().filter(|t| t.contains("Loop")).collect();
    assert!(!lp.is_empty(), "{texts:#?}");
    let t = lp[0];
    assert!(
        t.contains("pylint") && t.contains("different ways") && t.contains("the same each time"),
        "{t}"
    );
    assert!(
        t.contains("rated at 8.00/10") || t.contains("C0116"),
        "the output is quoted: {t}"
    );
    for t in &texts {
        assert!(!t.contains("exit_16") && !t.contains("failed"), "{t}");
        assert!(!t.contains("cd "), "cd is not what ran: {t}");
    }
}

/// A run stuck re-running a failing reproduction script written by a
/// heredoc (`cat <<EOF > t.py … EOF` then `python3 t.py`) was told "cat
/// failed": the steering names the script that ran and its error.
#[test]
fn a_heredoc_script_run_again_and_again_is_named_by_the_script_not_by_cat() {
    let cmd = "cat <<'EOF' > t.py\nfrom pkg import run\nrun()\nEOF\npython3 t.py";
    let out = "Traceback (most recent call last):\n  File \"/repo/t.py\", line 1, in <module>\n    from pkg import run\nImportError: cannot import name 'run' from 'pkg' (/repo/pkg/__init__.py)\n";
    let texts = steering_texts(&mini_swe(&[(cmd, 1, out), (cmd, 1, out), (cmd, 1, out)]));
    let lp: Vec<&String> = texts.iter().filter(|t| t.contains("Loop")).collect();
    assert_eq!(lp.len(), 1, "{texts:#?}");
    assert!(lp[0].contains("`python3 t.py`"), "{}", lp[0]);
    assert!(
        lp[0].contains("ImportError: cannot import name 'run'"),
        "{}",
        lp[0]
    );
    assert!(!lp[0].contains("cat "), "{}", lp[0]);
}

/// Issue 38, item 3 (and 37, item 1): replies mini-swe-agent's harness
/// refused ("Please always provide EXACTLY ONE action…", no `<returncode>`)
/// were read as good runs of their first block, a `sed -i` in it as
/// progress: eight refused replies looked like eight edits. They are failed
/// actions of kind `format_error`, never progress, and the steering names
/// the refusal.
#[test]
fn replies_the_harness_refused_are_failures_named_as_such_not_edits() {
    let mut m = vec![
        serde_json::json!({"role": "system", "content": "You are a helpful assistant that can interact with a computer."}),
        serde_json::json!({"role": "user", "content": "Please solve this issue: fix the parser"}),
    ];
    for i in 0..8 {
        m.push(serde_json::json!({"role": "assistant", "content": format!(
            "I'll edit it, then check.\n\n```mswea_bash_command\nsed -i 's/a/b{i}/' src/parser.py\n```\n\n```mswea_bash_command\npython3 -m pytest -q\n```"
        )}));
        m.push(serde_json::json!({"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks, found 2 actions.\n\nPlease format your action in triple backticks as shown in <response_example>."}));
    }
    let doc = serde_json::Value::Array(m).to_string();
    let (turns, _) = xo_sensor::swe::parse_document(&doc).unwrap();
    let actions: Vec<_> = turns.iter().filter_map(|t| t.action.clone()).collect();
    assert_eq!(actions.len(), 8, "{actions:#?}");
    for a in &actions {
        assert_eq!(a.outcome, Outcome::Error);
        assert_eq!(a.error_type.as_deref(), Some("format_error"));
        assert!(
            a.line
                .as_deref()
                .unwrap_or("")
                .contains("EXACTLY ONE action")
        );
    }
    assert!(
        turns.iter().all(|t| !t.progress),
        "a refused reply is no progress"
    );
    let texts = steering_texts(&doc);
    let refused: Vec<&String> = texts.iter().filter(|t| t.contains("Refused")).collect();
    assert!(!refused.is_empty(), "{texts:#?}");
    assert!(
        refused[0].contains("refused by your harness") && refused[0].contains("EXACTLY ONE action"),
        "{}",
        refused[0]
    );
}
