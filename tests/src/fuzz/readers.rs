//! Fuzz targets of the readers of messages and files: the SALUTE codec, task files, knowledge documents, the file store's records, the sensors' lines.

use super::*;

// --- the SALUTE codec ----------------------------------------------------------

fn reports() -> Vec<SaluteReport> {
    let report = |unit: &str, turn: u64| {
        let mut r = SaluteReport::new(unit, "coder", turn, turn);
        r.time.at = 1_700_000_000_000 + turn * 1000;
        r
    };
    let a = report("u-1", 3);
    let mut b = report("team.runner-7", 40);
    b.size.context_tokens = 150_000;
    b.size.context_limit = 200_000;
    b.activity.recent = vec![
        xo_proto::Action::tool("Edit", "a1b2", xo_proto::Outcome::Ok, 39),
        xo_proto::Action::tool("Bash", "c3d4", xo_proto::Outcome::Error, 40),
    ];
    vec![a, b]
}

/// Decodes as the supervisor does, checking the fast reader against serde.
fn decode_report(bytes: &[u8], content_type: Option<&str>) -> Result<(), TestCaseError> {
    let (r, largest) = measured(|| {
        let r = codec::decode::<SaluteReport>(bytes, content_type, 1 << 20);
        let fast = <SaluteReport as Message>::read_msgpack(bytes);
        let serde: Result<SaluteReport, _> = rmp_serde::from_slice(bytes);
        (r, fast, serde)
    });
    let (r, fast, serde) = r;
    check_alloc("salute", bytes.len(), largest)?;
    if let Some(f) = fast {
        // The fast reader never accepts what serde rejects, and agrees.
        match serde {
            Ok(s) => prop_assert_eq!(f, s, "the fast reader and serde disagree"),
            Err(e) => prop_assert!(false, "the fast reader accepted what serde rejects: {e}"),
        }
    }
    if let Err(e) = r {
        let text = e.to_string();
        prop_assert!(text.contains("SaluteReport"), "unnamed rejection: {text}");
    }
    Ok(())
}

pub fn salute_codec() {
    let valid: Vec<Vec<u8>> = reports()
        .iter()
        .flat_map(|r| {
            [
                codec::encode(r, Format::Msgpack).unwrap(),
                codec::encode(r, Format::Json).unwrap(),
            ]
        })
        .collect();
    fuzz(
        "salute: random bytes",
        1,
        prop::collection::vec(any::<u8>(), 0..512),
        |b| decode_report(&b, None),
    );
    let v = valid.clone();
    fuzz(
        "salute: mutated reports",
        1,
        (0..valid.len(), mutations()),
        move |(i, ms)| decode_report(&mutate(v[i].clone(), &ms), None),
    );
    fuzz(
        "salute: random JSON",
        1,
        json_value(&[
            "v",
            "unit",
            "role",
            "status",
            "action",
            "health",
            "time",
            "turn",
            "seq",
            "recent",
            "context_used",
            "errors",
            "at",
            "task",
            "tool",
        ]),
        |v| decode_report(&serde_json::to_vec(&v).unwrap(), Some("application/json")),
    );
    // A length claim far past the payload (a 4 GiB string, array and map).
    for claim in [
        &[0xdb, 0xff, 0xff, 0xff, 0xff][..],
        &[0xdd, 0xff, 0xff, 0xff, 0xff],
        &[0xdf, 0xff, 0xff, 0xff, 0xff],
        &[
            0x81, 0xa4, b'u', b'n', b'i', b't', 0xdd, 0x7f, 0xff, 0xff, 0xff,
        ],
    ] {
        let (r, largest) = measured(|| codec::decode::<SaluteReport>(claim, None, 1 << 20));
        assert!(r.is_err());
        assert!(largest <= allowed(claim.len()), "{largest} for {claim:?}");
    }
}

// --- the task file ----------------------------------------------------------------

fn parse_tasks(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (r, largest) = measured(|| {
        xo_queue::machine::tasks_from_json(bytes).and_then(xo_queue::machine::dependency_order)
    });
    check_alloc("tasks", bytes.len(), largest)?;
    match r {
        Ok(tasks) => {
            for t in &tasks {
                prop_assert!(!t.task_id.is_empty());
            }
        }
        Err(e) => prop_assert!(!e.to_string().trim().is_empty(), "an empty rejection"),
    }
    Ok(())
}

pub fn task_file() {
    const KEYS: &[&str] = &[
        "task_id",
        "intent",
        "instructions",
        "role",
        "lane",
        "depends_on",
        "phase",
        "budget",
        "max_retries",
        "files",
        "priority",
        "acceptance",
        "turns",
        "tokens",
        "cost_usd",
    ];
    fuzz(
        "tasks: random bytes",
        1,
        prop::collection::vec(any::<u8>(), 0..256),
        |b| parse_tasks(&b),
    );
    fuzz("tasks: random JSON", 1, json_value(KEYS), |v| {
        parse_tasks(&serde_json::to_vec(&v).unwrap())
    });
    let valid = serde_json::to_vec(&json!([
        {"task_id": "a-1", "intent": "x", "instructions": "do", "role": "coder"},
        {"task_id": "a-2", "intent": "y", "instructions": "do", "role": "tester",
         "depends_on": ["a-1"], "lane": "hot"},
    ]))
    .unwrap();
    fuzz("tasks: mutated files", 1, mutations(), move |ms| {
        parse_tasks(&mutate(valid.clone(), &ms))
    });
}

// --- knowledge documents --------------------------------------------------------

const DOC: &str = "# Error Handling Conventions\n\n_Last updated by: code_style, task_12_\n_Status: established_\n_Milestone: m1_\n_Tags: parser, src/lexer_\n_Uses: 3_\n\n## Rules\n\n1. All tool functions raise `ToolError`\n2. Never a bare panic\n\n## Examples\n\n```rust\nfn f() {}\n```\n\n## Rationale\n\nOne error type.\n\n## Changelog\n\n- 2026-11-22T10:00:00.000Z code_style after task_12: created\n";

fn parse_doc(text: &str) -> Result<(), TestCaseError> {
    use xo_proto::knowledge::Category;
    let (r, largest) = measured(|| {
        xo_knowledge::doc::parse(
            text,
            Category::Conventions,
            "errors",
            "conventions/errors.md",
        )
    });
    check_alloc("knowledge", text.len(), largest)?;
    match r {
        Ok(d) => {
            // What parses renders, and the rendering parses to the same.
            let again = xo_knowledge::doc::parse(
                &xo_knowledge::doc::render(&d),
                Category::Conventions,
                "errors",
                "conventions/errors.md",
            );
            prop_assert_eq!(again.as_ref().ok(), Some(&d), "{:?}", again);
        }
        Err(e) => {
            prop_assert_eq!(e.path.as_str(), "conventions/errors.md");
            prop_assert!(!e.reason.to_string().is_empty());
            prop_assert!(
                e.line <= text.lines().count() + 1,
                "line {} of {}",
                e.line,
                text.lines().count()
            );
        }
    }
    Ok(())
}

pub fn knowledge_documents() {
    parse_doc(DOC).unwrap();
    fuzz("knowledge: random text", 1, ".{0,400}", |t| parse_doc(&t));
    fuzz(
        "knowledge: random lines",
        1,
        prop::collection::vec(
            prop_oneof![
                Just("# T".to_string()),
                Just("## Rules".to_string()),
                Just("## Changelog".to_string()),
                Just("## Examples".to_string()),
                Just("```".to_string()),
                "_[A-Za-z ]{0,12}: .{0,12}_",
                "[0-9]{1,3}\\. .{0,30}",
                "- .{0,40}",
                ".{0,30}",
            ],
            0..30,
        ),
        |lines| parse_doc(&lines.join("\n")),
    );
    fuzz("knowledge: mutated documents", 1, mutations(), |ms| {
        let bytes = mutate(DOC.as_bytes().to_vec(), &ms);
        parse_doc(&String::from_utf8_lossy(&bytes))
    });
}

// --- the file store ---------------------------------------------------------------

/// A store file with `n` records written by the store itself.
fn store_file(dir: &std::path::Path, n: usize) -> (std::path::PathBuf, Vec<Vec<u8>>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let records: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("record {i} {}", "x".repeat(i * 7 % 50)).into_bytes())
        .collect();
    let store = xo_bus::FileStore::open(dir).unwrap();
    rt.block_on(
        store.append_many(
            "fuzz",
            records
                .iter()
                .map(|r| bytes::Bytes::from(r.clone()))
                .collect(),
        ),
    )
    .unwrap();
    drop(store);
    (dir.join("log").join("fuzz.log"), records)
}

pub fn file_store_records() {
    use xo_bus::file_store::{repair_file, scan_file};
    let tmp = tempfile::tempdir().unwrap();
    let (path, records) = store_file(tmp.path(), 12);
    let valid = std::fs::read(&path).unwrap();
    let work = tmp.path().join("work.log");
    let check = |data: Vec<u8>| -> Result<(), TestCaseError> {
        std::fs::write(&work, &data).unwrap();
        let (scan, largest) = measured(|| scan_file(&work));
        check_alloc("store", data.len(), largest)?;
        let scan = scan.map_err(|e| TestCaseError::fail(format!("scan refused: {e}")))?;
        // Every record read is one that was written (a checksum guards
        // each), though a span repeated may read twice.
        for (_, body) in &scan.records {
            prop_assert!(records.contains(body), "a record never written was read");
        }
        for (off, len, reason) in &scan.damaged {
            prop_assert!(off + len <= data.len() as u64, "a span past the end");
            prop_assert!(!reason.is_empty());
        }
        // Repair keeps what reads and leaves a file that scans clean.
        let kept = scan.records.len();
        match repair_file(&work).map_err(|e| TestCaseError::fail(format!("repair: {e}")))? {
            Some(r) => {
                prop_assert_eq!(r.kept, kept);
                let again = scan_file(&work).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(again.damaged.is_empty() && again.torn.is_none());
                prop_assert_eq!(again.records.len(), kept);
                let _ = std::fs::remove_file(&r.backup);
            }
            None => prop_assert!(scan.damaged.is_empty() && scan.torn.is_none()),
        }
        Ok(())
    };
    fuzz("store: mutated logs", 1, mutations(), |ms| {
        check(mutate(valid.clone(), &ms))
    });
    fuzz(
        "store: random bytes",
        1,
        prop::collection::vec(any::<u8>(), 0..512),
        check,
    );
    // A length claim of 4 GiB in an 8-byte header allocates nothing of it.
    let mut claim = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
    claim.extend_from_slice(&valid);
    check(claim).unwrap();
}

// --- the sensors ---------------------------------------------------------------------

pub fn sensor_lines() {
    use xo_sensor::{Format as Agent, Sensor};
    const KEYS: &[&str] = &[
        "type",
        "subtype",
        "message",
        "content",
        "role",
        "tool_use",
        "tool_result",
        "id",
        "tool_use_id",
        "name",
        "input",
        "is_error",
        "usage",
        "input_tokens",
        "output_tokens",
        "session_id",
        "model",
        "result",
        "payload",
        "item",
        "command",
        "exit_code",
        "output",
        "call_id",
        "arguments",
        "event",
        "action",
        "observation",
        "source",
        "args",
        "text",
        "assistant",
        "user",
        "system",
        "function_call",
        "function_call_output",
        "token_count",
        "info",
        "total_token_usage",
        "event_msg",
        "response_item",
        "turn_context",
        "cwd",
        "error",
        "success",
        "extras",
        "llm_metrics",
        "accumulated_token_usage",
        "history",
        "trajectory",
        "thought",
        "response",
        "info",
        "model_stats",
        "exit_status",
    ];
    let line = |agent: Agent, lines: Vec<String>| -> Result<(), TestCaseError> {
        let mut s = Sensor::new(agent);
        for l in &lines {
            let (r, largest) = measured(|| s.line(l));
            check_alloc(agent.as_str(), l.len(), largest)?;
            if let Err(e) = r {
                prop_assert!(!e.reason.to_string().is_empty());
            }
        }
        Ok(())
    };
    for agent in Agent::ALL {
        if agent.is_lines() {
            fuzz(
                &format!("sensor {}: random JSON lines", agent.as_str()),
                1,
                prop::collection::vec(json_value(KEYS), 1..6),
                |vs| line(agent, vs.iter().map(|v| v.to_string()).collect()),
            );
            fuzz(
                &format!("sensor {}: random text", agent.as_str()),
                2,
                prop::collection::vec(".{0,80}", 1..6),
                |ls| line(agent, ls),
            );
        } else {
            fuzz(
                &format!("sensor {}: random documents", agent.as_str()),
                1,
                json_value(KEYS),
                |v| {
                    let text = v.to_string();
                    let (r, largest) = measured(|| xo_sensor::swe::parse_document(&text));
                    check_alloc(agent.as_str(), text.len(), largest)?;
                    if let Err(e) = r {
                        prop_assert!(!e.to_string().is_empty());
                    }
                    Ok(())
                },
            );
        }
    }
}
