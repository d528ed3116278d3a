//! Every format read from fixtures written by hand from the documented
//! fields: the actions each stream yields (tool, outcome, error class),
//! usage, context, condensation, session; bad lines reported by number.

use std::path::PathBuf;

use xo_proto::{ActionKind, Outcome};
use xo_sensor::{Format, Sensor, TurnEvent, swe};

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Reads a whole fixture; panics on a line error (fixtures are well formed).
fn read(format: Format, name: &str) -> (Sensor, Vec<TurnEvent>) {
    let mut s = Sensor::new(format);
    let mut turns = Vec::new();
    for line in fixture(name).lines() {
        turns.extend(s.line(line).unwrap_or_else(|e| panic!("{name}: {e}")));
    }
    (s, turns)
}

/// `tool:outcome[:error]` or `msg:outcome[:error]` a turn; `-` for no action.
fn shape(turns: &[TurnEvent]) -> Vec<String> {
    turns
        .iter()
        .map(|t| match &t.action {
            None => "-".to_string(),
            Some(a) => {
                let head = match a.kind {
                    ActionKind::Tool => a.tool.as_deref().unwrap_or("?").to_string(),
                    ActionKind::Message => "msg".to_string(),
                };
                let outcome = match a.outcome {
                    Outcome::Ok => "ok",
                    Outcome::Error => "error",
                    Outcome::Empty => "empty",
                };
                match &a.error_type {
                    Some(e) => format!("{head}:{outcome}:{e}"),
                    None => format!("{head}:{outcome}"),
                }
            }
        })
        .collect()
}

fn sum(turns: &[TurnEvent]) -> (u64, u64, f64) {
    turns.iter().fold((0, 0, 0.0), |(a, b, c), t| {
        (a + t.tokens_in, b + t.tokens_out, c + t.cost_usd)
    })
}

#[test]
fn claude_stream_json() {
    let (s, turns) = read(Format::Claude, "claude_stream.jsonl");
    assert_eq!(
        shape(&turns),
        [
            "msg:ok",
            "Bash:error:compile_error",
            "Edit:ok",
            "-" // the result
        ]
    );
    assert_eq!(s.session(), Some("s-claude-1"));
    // msg_3 came twice (one line a content block): its usage counts once.
    let (tin, tout, cost) = sum(&turns);
    assert_eq!(tin, 16_200 + 16_310 + 16_610);
    assert_eq!(tout, 40 + 30 + 80);
    assert!((cost - 0.1234).abs() < 1e-9, "{cost}");
    assert!(turns[2].progress, "a successful edit is progress");
    assert!(!turns[1].progress);
    assert_eq!(turns[1].context_tokens, Some(16_310));
    assert_eq!(turns[1].context_limit, Some(200_000), "from the model");
    assert!(
        turns[3].condensed,
        "the compact boundary reaches the next turn"
    );
    assert!(
        turns[3]
            .summary
            .as_deref()
            .unwrap()
            .starts_with("success: Fixed")
    );
    assert_eq!(
        s.stats().unknown,
        1,
        "the stream_event line is skipped and counted"
    );
    assert_eq!(s.unfinished(), 0);
}

#[test]
fn claude_transcript() {
    let (s, turns) = read(Format::Claude, "claude_transcript.jsonl");
    assert_eq!(shape(&turns), ["Bash:error:exception:ModuleNotFoundError"]);
    assert_eq!(s.session(), Some("s-transcript"));
    assert_eq!(s.model(), Some("claude-opus-4-1"));
    // The compact summary is waiting for the next turn.
    let mut s = s;
    let more = s
        .line(r#"{"type":"assistant","sessionId":"s-transcript","message":{"id":"m2","content":[{"type":"text","text":"continuing"}]}}"#)
        .unwrap();
    // A text block waits for the next line: a call of its message may follow.
    assert!(more.is_empty());
    let more = s.finish();
    assert!(more[0].condensed);
    assert_eq!(s.stats().unknown, 0);
}

#[test]
fn cursor_stream_json() {
    let (s, turns) = read(Format::Cursor, "cursor_stream.jsonl");
    assert_eq!(
        shape(&turns),
        ["msg:ok", "read:ok", "shell:error:test_failure", "-"]
    );
    assert_eq!(s.session(), Some("cur-1"));
    assert_eq!(
        s.stats().orphan_results,
        1,
        "a completion never started is counted"
    );
    assert_eq!(turns[1].context_limit, Some(272_000));
}

#[test]
fn codex_exec_json() {
    let (s, turns) = read(Format::Codex, "codex_exec.jsonl");
    assert_eq!(
        shape(&turns),
        [
            "shell:error:exit_2",
            "apply_patch:ok",
            "shell:ok",
            "msg:error:provider_rate_limit",
            "msg:ok",
            "-"
        ]
    );
    assert_eq!(s.session(), Some("th-codex-1"));
    // The same command gives the same args hash, whatever its result.
    let h = |i: usize| turns[i].action.as_ref().unwrap().args_hash.clone();
    assert_eq!(h(0), h(2));
    let (tin, tout, _) = sum(&turns);
    assert_eq!((tin, tout), (24_763, 122));
    assert!(turns[1].progress);
}

#[test]
fn codex_rollout() {
    let (s, turns) = read(Format::Codex, "codex_rollout.jsonl");
    assert_eq!(
        shape(&turns),
        [
            "shell:error:test_failure",
            "apply_patch:ok",
            "shell:ok",
            "msg:ok"
        ]
    );
    assert_eq!(s.session(), Some("rollout-1"));
    assert_eq!(s.model(), Some("gpt-5-codex"));
    // Cumulative token counts become deltas, carried by the next turn.
    assert_eq!((turns[1].tokens_in, turns[1].tokens_out), (5_000, 200));
    assert_eq!((turns[2].tokens_in, turns[2].tokens_out), (6_000, 300));
    assert_eq!(turns[2].context_tokens, Some(6_000));
    assert_eq!(turns[2].context_limit, Some(272_000));
    assert!(turns[2].condensed);
    assert!(turns[2].progress, "a passing test run is progress");
    assert_eq!(s.stats().unknown, 0);
}

#[test]
fn openhands_v0_event_stream() {
    let (s, turns) = read(Format::OpenHands, "openhands_v0.jsonl");
    assert_eq!(
        shape(&turns),
        [
            "run:error:test_failure",
            "run:error:test_failure",
            "edit:ok",
            "-"
        ]
    );
    // Thoughts differ between the two runs; the call is the same.
    let h = |i: usize| turns[i].action.as_ref().unwrap().args_hash.clone();
    assert_eq!(h(0), h(1));
    let (tin, tout, cost) = sum(&turns);
    assert_eq!((tin, tout), (9_000, 250));
    assert!((cost - 0.025).abs() < 1e-9);
    assert_eq!(turns[1].context_tokens, Some(5_000));
    assert_eq!(turns[0].context_limit, Some(128_000));
    assert!(turns[3].condensed && turns[3].summary.as_deref().unwrap().contains("Fixed"));
    assert_eq!(s.unfinished(), 0);
}

#[test]
fn openhands_v1_sdk_events() {
    let (s, turns) = read(Format::OpenHands, "openhands_v1.jsonl");
    assert_eq!(
        shape(&turns),
        [
            "execute_bash:error:exit_2",
            "str_replace_editor:error:tool_error",
            "msg:ok"
        ]
    );
    assert!(turns[2].condensed);
    assert_eq!(
        s.stats().unknown,
        1,
        "an unknown kind is skipped and counted"
    );
}

#[test]
fn swe_agent_and_mini_swe_agent_trajectories() {
    let (turns, stats) = swe::parse_document(&fixture("swe_agent.traj")).unwrap();
    assert_eq!(
        shape(&turns),
        [
            "find_file:ok",
            "python:error:exception:ImportError",
            "edit:ok",
            "submit:ok",
            "-"
        ]
    );
    assert_eq!(stats.events, 4);
    let last = turns.last().unwrap();
    assert_eq!(last.summary.as_deref(), Some("exit_status: submitted"));
    assert_eq!((last.tokens_in, last.tokens_out), (30_000, 1_500));
    assert!((last.cost_usd - 0.42).abs() < 1e-9);

    let (turns, _) = swe::parse_document(&fixture("mini_swe_agent.json")).unwrap();
    assert_eq!(
        shape(&turns),
        [
            "pytest:error:test_failure",
            "pytest:error:test_failure",
            "msg:error:run_failed"
        ]
    );
    assert!(
        swe::parse_document("{\"neither\": 1}")
            .unwrap_err()
            .to_string()
            .contains("trajectory")
    );
}

#[test]
fn bad_lines_are_reported_by_number_and_the_stream_goes_on() {
    let mut s = Sensor::new(Format::Claude);
    let lines = [
        r#"{"type":"system","subtype":"init","session_id":"s","model":"claude-x"}"#,
        "\u{0}\u{1}garbage",
        r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Bash","input":{"command":"ls"}}]"#,
        "[1, 2]",
        r#"{"no_type": true}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"ls"}}]}}"#,
        "",
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"a b"}]}}"#,
    ];
    let mut errors = Vec::new();
    let mut turns = Vec::new();
    for l in lines {
        match s.line(l) {
            Ok(t) => turns.extend(t),
            Err(e) => errors.push(e),
        }
    }
    let at: Vec<u64> = errors.iter().map(|e| e.line).collect();
    assert_eq!(at, [2, 3, 4, 5]);
    assert!(
        errors[0].reason.to_string().starts_with("not JSON"),
        "{}",
        errors[0]
    );
    assert_eq!(errors[2].reason, "not a JSON object");
    assert_eq!(errors[3].reason, "no \"type\"");
    // The result whose call was on a truncated line is an orphan, counted;
    // the next call and its result are read as usual.
    assert_eq!(s.stats().orphan_results, 1);
    assert_eq!(shape(&turns), ["Bash:ok"]);
    assert_eq!(s.stats().malformed, 4);
    // A 50 MB tool result in one line: refused by its length, named by
    // its number, and the stream goes on.
    let fifty = format!(
        r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t9","content":"{}"}}]}}}}"#,
        "A".repeat(50 << 20)
    );
    let e = s.line(&fifty).unwrap_err();
    assert_eq!(e.line, 10);
    assert!(e.reason.to_string().contains("longer than"), "{e}");
    assert_eq!(
        s.line(r#"{"type":"system","subtype":"init"}"#),
        Ok(Vec::new())
    );
    let huge = "x".repeat(xo_sensor::MAX_LINE + 1);
    let e = s.line(&huge).unwrap_err();
    assert!(e.reason.to_string().contains("longer than"), "{e}");
    assert_eq!(e.line, 12);
}

#[test]
fn formats_by_name() {
    for f in Format::ALL {
        assert_eq!(Format::parse(f.as_str()), Ok(f));
    }
    let e = Format::parse("aider").unwrap_err().to_string();
    assert!(
        e.contains("\"aider\"") && e.contains("claude, cursor, codex"),
        "{e}"
    );
    let mut s = Sensor::new(Format::SweAgent);
    assert!(
        s.line("{}")
            .unwrap_err()
            .reason
            .to_string()
            .contains("whole-document")
    );
}

#[test]
fn a_bad_line_says_why_as_a_typed_reason() {
    use xo_sensor::SensorError;
    let mut s = Sensor::new(Format::Codex);
    assert!(matches!(
        s.line("{oops").unwrap_err().reason,
        SensorError::NotJson(_)
    ));
    assert_eq!(s.line("[1]").unwrap_err().reason, SensorError::NotObject);
    assert_eq!(s.line("{}").unwrap_err().reason, SensorError::NoType);
    let long = format!("{{\"type\":\"{}\"}}", "x".repeat(xo_sensor::MAX_LINE));
    assert!(matches!(
        s.line(&long).unwrap_err().reason,
        SensorError::TooLong { len } if len == long.len()
    ));
    assert_eq!(
        Format::parse("aider"),
        Err(SensorError::UnknownFormat {
            given: "aider".into()
        })
    );
}

/// Issue 37, item 5: Codex records its plan's limits in `token_count`
/// (`rate_limits`: `primary` and `secondary` windows with `used_percent`,
/// `window_minutes`, `resets_at` in seconds, and `rate_limit_reached_type`
/// once a limit refused it; `codex-rs/protocol` `RateLimitSnapshot`). A
/// reached limit is read as "waiting until" its reset; a snapshot within
/// the limits, or `null`, clears it.
#[test]
fn a_codex_usage_limit_is_waiting_until_its_reset() {
    let mut s = Sensor::new(Format::Codex);
    let line = |limits: &str| {
        format!(
            "{{\"timestamp\":\"2026-08-15T15:03:14.540Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"token_count\",\"info\":null,\"rate_limits\":{limits}}}}}"
        )
    };
    s.line(&line("null")).unwrap();
    assert_eq!(s.limited_until(), None);
    s.line(&line(
        "{\"limit_id\":\"codex\",\"primary\":{\"used_percent\":42.0,\"window_minutes\":300,\"resets_at\":1786206068},\"secondary\":{\"used_percent\":12.0,\"window_minutes\":10080,\"resets_at\":1786700000},\"plan_type\":\"plus\",\"rate_limit_reached_type\":null}",
    ))
    .unwrap();
    assert_eq!(s.limited_until(), None, "within the limits");
    s.line(&line(
        "{\"limit_id\":\"codex\",\"primary\":{\"used_percent\":100.0,\"window_minutes\":300,\"resets_at\":1786206068},\"secondary\":{\"used_percent\":31.0,\"window_minutes\":10080,\"resets_at\":1786700000},\"spend_control_reached\":null,\"plan_type\":\"plus\",\"rate_limit_reached_type\":\"primary\"}",
    ))
    .unwrap();
    assert_eq!(
        s.limited_until(),
        Some(1_786_206_068_000),
        "the spent window's reset"
    );
    // Reached with no window at 100%: the latest reset.
    s.line(&line(
        "{\"limit_id\":\"codex\",\"primary\":{\"used_percent\":80.0,\"window_minutes\":300,\"resets_at\":1786206068},\"secondary\":{\"used_percent\":90.0,\"window_minutes\":10080,\"resets_at\":1786700000},\"rate_limit_reached_type\":\"workspace_member_credits_depleted\"}",
    ))
    .unwrap();
    assert_eq!(s.limited_until(), Some(1_786_700_000_000));
    s.line(&line(
        "{\"limit_id\":\"codex\",\"primary\":{\"used_percent\":3.0,\"window_minutes\":300,\"resets_at\":1786224068},\"secondary\":null,\"rate_limit_reached_type\":null}",
    ))
    .unwrap();
    assert_eq!(s.limited_until(), None, "back within the limits");
}

/// Issue 37, item 5: Claude Code's usage limit is the notice it writes in
/// the model's place (a transcript's `isApiErrorMessage` line; in
/// `stream-json` the assistant message with its `error` kind): a wait
/// until the reset, no turn, no model. Another API error is no limit; the
/// model writing again ends the wait.
#[test]
fn a_claude_usage_limit_is_waiting_until_its_reset() {
    let mut s = Sensor::new(Format::Claude);
    s.line(r#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-sonnet-4-5"}"#)
        .unwrap();
    let turns = s
        .line(r#"{"type":"assistant","timestamp":"2026-08-19T13:40:00.123Z","message":{"id":"x1","model":"<synthetic>","content":[{"type":"text","text":"You've hit your session limit · resets 9:50pm (Asia/Saigon)"}]},"error":"rate_limit","isApiErrorMessage":true,"apiErrorStatus":429,"session_id":"s1"}"#)
        .unwrap();
    assert!(turns.is_empty(), "the notice is no turn: {turns:?}");
    // 20:40 in Saigon (+7): 9:50pm is 14:50 UTC.
    assert_eq!(
        s.limited_until(),
        Some(xo_sensor::parse_time_ms("2026-08-19T14:50:00Z").unwrap())
    );
    assert_eq!(
        s.model(),
        Some("claude-sonnet-4-5"),
        "<synthetic> is no model"
    );
    assert!(s.resting());
    // The model writes again: the wait is over.
    s.line(r#"{"type":"assistant","timestamp":"2026-08-19T15:00:00Z","message":{"id":"m2","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Continuing."}],"stop_reason":"end_turn"}}"#)
        .unwrap();
    assert_eq!(s.limited_until(), None);
    // The stream's form: no isApiErrorMessage, the error kind on the message.
    s.line(r#"{"type":"assistant","timestamp":"2026-09-15T10:00:00Z","message":{"id":"x2","model":"<synthetic>","content":[{"type":"text","text":"You've hit your weekly limit · resets Sep 17 at 10pm (Europe/Lisbon)"}]},"error":"rate_limit","session_id":"s1"}"#)
        .unwrap();
    assert_eq!(
        s.limited_until(),
        Some(xo_sensor::parse_time_ms("2026-09-17T21:00:00Z").unwrap())
    );
    // An outage is no limit: a turn that failed, not a wait.
    let mut o = Sensor::new(Format::Claude);
    let turns = o
        .line(r#"{"type":"assistant","timestamp":"2026-08-19T13:41:00.000Z","message":{"content":[{"type":"text","text":"API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment."}]},"error":"server_error","isApiErrorMessage":true,"apiErrorStatus":529}"#)
        .unwrap();
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(o.limited_until(), None);
}

/// Issue 38: the Claude Code transcript kinds that carry no agent step are
/// skipped by name (a session that writes them is read whole); a kind this
/// sensor does not know is counted as such, with its line.
#[test]
fn claude_metadata_kinds_are_skipped_by_name_and_others_said() {
    let mut s = Sensor::new(Format::Claude);
    for kind in [
        "summary",
        "file-history-snapshot",
        "queue-operation",
        "progress",
        "custom-title",
        "agent-name",
        "last-prompt",
        "attachment",
        "mode",
        "permission-mode",
        "cost-state",
    ] {
        s.line(&format!("{{\"type\":\"{kind}\",\"sessionId\":\"s1\"}}"))
            .unwrap();
    }
    assert_eq!(s.unread(), 0, "{:?}", s.stats().kinds);
    assert_eq!(s.stats().kinds["attachment"].skipped, 1);
    s.line(r#"{"type":"worktree-state","sessionId":"s1"}"#)
        .unwrap();
    assert_eq!(s.unread(), 1);
    let k = &s.stats().kinds["worktree-state"];
    assert_eq!((k.unknown, k.first_unread), (1, Some(12)));
}

/// A transcript written with CRLF line ends (a file from Windows, a pipe
/// through a tool that adds them) reads as the same turns, and a line of
/// white space only (ASCII or not) is passed over, wherever it comes.
#[test]
fn crlf_line_ends_and_blank_lines_change_nothing() {
    for (format, name) in [
        (Format::Claude, "claude_stream.jsonl"),
        (Format::Claude, "claude_transcript.jsonl"),
        (Format::Cursor, "cursor_stream.jsonl"),
        (Format::Codex, "codex_exec.jsonl"),
        (Format::Codex, "codex_rollout.jsonl"),
        (Format::OpenHands, "openhands_v0.jsonl"),
        (Format::OpenHands, "openhands_v1.jsonl"),
    ] {
        let (_, plain) = read(format, name);
        assert!(!plain.is_empty(), "{name}: no turns to compare");
        let mut s = Sensor::new(format);
        let mut crlf = Vec::new();
        for line in fixture(name).lines() {
            for blank in ["", "\r", "  \r", "\t", "\u{a0}\u{2003}"] {
                let turns = s.line(blank).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(turns.is_empty(), "{name}: {blank:?} made a turn");
            }
            let turns = s.line(&format!("{line}\r"));
            crlf.extend(turns.unwrap_or_else(|e| panic!("{name}, CRLF: {e}")));
        }
        assert_eq!(format!("{crlf:?}"), format!("{plain:?}"), "{name}");
    }
}
