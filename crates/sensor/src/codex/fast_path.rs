//! The fast paths of Codex's reader against its general reader: every
//! line they take is read the same both ways (`exec --json` items; a
//! rollout's outputs and ends, over real recordings in order).

use super::*;

/// `item.completed` lines as `codex exec --json` writes them, and the
/// variants a reader meets (an older build's `item_type`, escapes, a
/// null or odd field, a field of another kind, a bad line).
fn lines() -> Vec<String> {
    let mut out = Vec::new();
    for (i, (output, code, status)) in [
        (r#""1 failed, 12 passed in 0.31s\n""#, "1", r#""failed""#),
        (r#""13 passed in 0.29s\n""#, "0", r#""completed""#),
        (
            r#""tab\there \"quoted\" \\ caf\u00e9\n""#,
            "0",
            r#""completed""#,
        ),
        ("null", "null", "null"),
        (r#""""#, "127", r#""declined""#),
        (r#""x""#, r#""1""#, r#""failed""#),
        (r#""x""#, "1.5", r#""failed""#),
        ("7", "1", r#""failed""#),
    ]
    .into_iter()
    .enumerate()
    {
        for kind in [
            r#""type":"command_execution""#,
            r#""item_type":"command_execution""#,
        ] {
            out.push(format!(
                r#"{{"type":"item.completed","item":{{"id":"item_{i}",{kind},"command":"bash -lc 'pytest -q tests/test_{i}.py'","aggregated_output":{output},"exit_code":{code},"status":{status}}}}}"#
            ));
        }
    }
    out.extend(
        [
            r#"{"type":"item.completed","item":{"id":"m1","type":"agent_message","text":"Looking at the failures next."}}"#,
            r#"{"type":"item.completed","item":{"id":"m2","type":"agent_message","text":"line\none"}}"#,
            r#"{"type":"item.completed","item":{"id":"m3","type":"agent_message","text":null}}"#,
            r#"{"type":"item.completed","item":{"id":"m4","type":"agent_message","text":3}}"#,
            r#"{"type":"item.completed","item":{"id":"m5","type":"reasoning","text":"think"}}"#,
            r#"{"type":"item.completed","item":{"id":"m6","type":"web_search","query":"rust serde"}}"#,
            r#"{"type":"item.completed","item":null}"#,
            r#"{"type":"item.completed"}"#,
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"a"},"item":{}}"#,
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"a"}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":2}}"#,
        ]
        .map(String::from),
    );
    out
}

/// The fast path gives what the general reader gives, line for line,
/// for every line it takes (and refuses none that it should read).
#[test]
fn it_reads_what_the_general_reader_reads() {
    let (mut fast_side, mut general) = (Common::default(), Common::default());
    let mut taken = 0;
    for l in lines() {
        let ours = line(&mut fast_side, &l);
        let theirs = match crate::parse_object::<Value>(&l) {
            Ok(v) => event(&mut general, &v),
            Err(e) => Err(e),
        };
        taken += usize::from(fast(&mut Common::default(), &l, &mut Vec::new()).is_some());
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{l}");
        assert_eq!(fast_side.record_kind, general.record_kind, "{l}");
    }
    // The common lines went the fast way.
    assert_eq!(taken, 13, "lines taken by the fast path");
}

/// What a reading leaves behind that the next lines depend on: the
/// calls waiting, the sessions running and polled, the ends told, the
/// time, the kind of the record and how it was counted.
fn state(c: &Common) -> String {
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v.join(",")
    };
    format!(
        "pending {} running {} polls {} ended {} / {} at {:?} kind {} skipped {} unknown {} orphans {}",
        sorted(c.pending.keys().cloned().collect()),
        sorted(
            c.exec
                .running
                .iter()
                .map(|(s, r)| format!("{s}={}:{}", r.call, r.output.len()))
                .collect()
        ),
        sorted(
            c.exec
                .polls
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        ),
        sorted(c.exec.ended_calls.iter().cloned().collect()),
        sorted(c.exec.ended_sessions.iter().cloned().collect()),
        c.at_ms,
        c.record_kind,
        c.record_skipped,
        c.record_unknown,
        c.stats.orphan_results,
    )
}

/// Reads `lines` in order both ways (the line reader, with its fast
/// paths, and the general reader alone) and holds every reading and
/// what it leaves behind equal; how many lines the rollouts' fast path
/// took.
fn read_both_ways(lines: &[&str]) -> usize {
    let (mut fast_side, mut general) = (Common::default(), Common::default());
    let mut taken = 0;
    for l in lines {
        let ours = line(&mut fast_side, l);
        let theirs = match crate::parse_object::<Value>(l) {
            Ok(v) => event(&mut general, &v),
            Err(e) => Err(e),
        };
        taken += usize::from(rollout_fast(&mut Common::default(), l, &mut Vec::new()).is_some());
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{l}");
        assert_eq!(state(&fast_side), state(&general), "{l}");
    }
    taken
}

/// Codex's rollouts of real runs, read in order both ways: the same
/// turns, the same calls and sessions left, and most of the outputs
/// and ends went the fast way.
#[test]
fn real_rollouts_read_as_the_general_reader_reads_them() {
    for (text, outputs) in [
        (
            include_str!(
                "../../../../tests/fixtures/real/codex/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
            ),
            0,
        ),
        (
            include_str!(
                "../../../../tests/fixtures/real/codex/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl"
            ),
            0,
        ),
    ] {
        let lines: Vec<&str> = text.lines().collect();
        let expected = lines
            .iter()
            .filter(|l| {
                l.contains("\"function_call_output\"")
                    || l.contains("\"custom_tool_call_output\"")
                    || l.contains("\"exec_command_end\"")
            })
            .count();
        assert!(expected > outputs, "the recording has outputs and ends");
        assert_eq!(
            read_both_ways(&lines),
            expected,
            "lines taken by the fast path"
        );
    }
}

/// A call, then its output or its end in the shapes a reader meets
/// (escapes, null and odd fields, fields of another kind, a duplicate,
/// a key with an escape, a bad line), each read both ways.
#[test]
fn rollout_outputs_and_ends_read_as_the_general_reader_reads_them() {
    let call = r#"{"timestamp":"2026-05-11T11:27:00.000Z","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"cargo test\"}","call_id":"c1"}}"#;
    let head = r#"{"timestamp":"2026-05-11T11:27:01.500Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"#;
    let end = |fields: &str| {
        format!(
            r#"{{"timestamp":"2026-05-11T11:27:02.000Z","type":"event_msg","payload":{{"type":"exec_command_end","call_id":"c1",{fields}}}}}"#
        )
    };
    let mut cases: Vec<String> = [
        r#""Chunk ID: a1\nWall time: 1.0 seconds\nProcess exited with code 0\nOutput:\nok\n""#,
        r#""Chunk ID: a1\nWall time: 1.0 seconds\nProcess exited with code 101\nOutput:\nerror[E0425]: cannot find value\n""#,
        r#""Chunk ID: a1\nWall time: 1.0 seconds\nProcess running with session ID 7""#,
        r#""{\"output\":\"3 passed\\n\",\"metadata\":{\"exit_code\":0,\"duration_seconds\":0.5}}""#,
        r#""Exit code: 1\nWall time: 0.2 seconds\nOutput:\ntab\there caf\u00e9""#,
        r#""error: patch failed""#,
        r#""""#,
        "null",
        "7",
        r#"[{"type":"input_text","text":"a"}]"#,
    ]
    .iter()
    .map(|o| format!("{head}{o}}}}}"))
    .collect();
    for fields in [
        r#""process_id":"7","aggregated_output":"1 failed\n","exit_code":1,"status":"failed""#,
        r#""aggregated_output":"ok","exit_code":0,"status":"completed","stdout":"ok","formatted_output":"ok""#,
        r#""aggregated_output":null,"exit_code":null,"status":null"#,
        r#""aggregated_output":3,"exit_code":0"#,
        r#""aggregated_output":"x","exit_code":1.5"#,
        r#""aggregated_output":"x","exit_code":-0"#,
        r#""aggregated_output":"x","exit_code":"1""#,
        r#""aggregated_output":"x","exit_code":99999999999999999999"#,
        r#""aggregated_output":"x","status":"declined","process_id":7"#,
        r#""aggregated_output":"x","status":"completed","status":"failed""#,
        r#""aggregat\u0065d_output":"x","exit_code":0"#,
    ] {
        cases.push(end(fields));
    }
    cases.extend(
        [
            r#"{"timestamp":7,"type":"event_msg","payload":{"type":"exec_command_end","call_id":"c1","exit_code":0}}"#,
            r#"{"timestamp":"2026-05-11T11:27:02Z","type":"event_msg","payload":{"type":"exec_command_end","call_id":null,"exit_code":0}}"#,
            r#"{"timestamp":"2026-05-11T11:27:02Z","type":"event_msg","payload":{"type":"exec_command_end","call_id":5,"exit_code":0}}"#,
            r#"{"timestamp":"2026-05-11T11:27:02Z","type":"event_msg","payload":null,"x":"exec_command_end"}"#,
            r#"{"timestamp":"2026-05-11T11:27:02Z","type":"response_item","payload":{"type":"function_call_output","output":"no call"}}"#,
            r#"{"timestamp":"2026-05-11T11:27:02Z","type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"c1","output":"Success."}}"#,
            r#"{"timestamp":"2026-05-11T11:27:02Z","type":"response_item","payload":{"item_type":"x","type":"function_call_output","call_id":"c1","output":"a"}}"#,
            r#"{"timestamp":"2026-05-11T11:27:02Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"a"}"#,
            r#"{"timestamp":"2026-05-11T11:27:02Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"a"}} x"#,
        ]
        .map(String::from),
    );
    let mut taken = 0;
    for case in &cases {
        taken += read_both_ways(&[call, case]);
        // A call's output or end with no call waiting for it.
        read_both_ways(&[case]);
    }
    // The plain shapes went the fast way (eight outputs: text, JSON,
    // empty, null; four ends: with their fields, with nulls, one key
    // written with an escape; a call id of null; a custom tool's output);
    // the rest (a field of another kind, `-0` for a code, a duplicate, a
    // bad line) were left to the general reader, which read them the same.
    assert_eq!(taken, 8 + 4 + 2, "lines taken by the fast path");
}
