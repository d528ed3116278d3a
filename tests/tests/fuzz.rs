//! Property-based fuzzing of every reader of outside input: the SALUTE
//! codec (and its direct MessagePack reader, held to serde's answer), the
//! task-file parser, the knowledge document parser, the file store's record
//! reader and repair, the agent sensors' line parsers, the console's
//! request bodies (over HTTP, against a running console and queue), report
//! files in seed 000's shape and every timestamp, URLs (NATS credentials
//! and their redaction, a login's return path), operator settings, and the
//! hook payloads agents send.
//!
//! Each target gets random bytes, random JSON and mutations of valid input
//! (bytes flipped, cut, repeated, spliced). What must hold: no panic; every
//! rejection is an error that names what was wrong; and no input makes a
//! reader allocate by what it claims rather than what it has — the largest
//! single allocation while reading is bounded by the input's size (plus the
//! 1 MiB serde allows itself for a collection's claimed length).
//!
//! The run is a fixed number of cases per target (`XO_FUZZ_CASES`, default
//! 2000; the console gets a tenth), printed with the time taken. For a long
//! run: `XO_FUZZ_CASES=200000 cargo test --release -p xo-tests --test fuzz
//! -- --nocapture --test-threads 1`.

// The one place unsafe code is allowed: a global allocator that records
// the largest single allocation, around the system allocator.
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use xo_proto::codec::{self, Message};
use xo_proto::{Format, SaluteReport};

// --- the largest single allocation, per thread -----------------------------

struct Peak;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Peak = Peak;

/// Runs `f` and returns its result with the largest single allocation made
/// on this thread meanwhile.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(|l| l.get()))
}

/// What reading `len` bytes may allocate at once: a few times the input
/// (strings and parsed values), and serde's own cap for a claimed length.
fn allowed(len: usize) -> usize {
    (1 << 20) + 16 * len + 4096
}

fn check_alloc(target: &str, len: usize, largest: usize) -> Result<(), TestCaseError> {
    prop_assert!(
        largest <= allowed(len),
        "{target}: {largest} bytes allocated at once for {len} bytes of input"
    );
    Ok(())
}

fn cases(scale: u32) -> u32 {
    let base: u32 = std::env::var("XO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    (base / scale).max(10)
}

/// Runs one target for its number of cases and prints the figures.
fn fuzz<S: Strategy>(
    name: &str,
    scale: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let n = cases(scale);
    let mut runner = TestRunner::new(Config {
        cases: n,
        failure_persistence: None,
        ..Config::default()
    });
    let t = Instant::now();
    let r = runner.run(&strategy, test);
    let took = t.elapsed();
    println!(
        "fuzz {name}: {n} cases in {:.2} s ({:.0} cases/s)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64().max(1e-9)
    );
    if let Err(e) = r {
        panic!("fuzz {name}: {e}");
    }
}

// --- input shapes ------------------------------------------------------------

/// Any JSON value, keys drawn from `keys` (so that parsers see their own
/// fields with values of every type) or random.
fn json_value(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,24}".prop_map(Value::String),
        prop::sample::select(keys).prop_map(|k| json!(k)),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        3 => prop::sample::select(keys).prop_map(String::from),
                        1 => "[a-z_]{1,8}",
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A change to valid input: a byte set, a span cut, a span repeated, a
/// random run spliced in, or the input cut short.
#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Cut(usize, usize),
    Repeat(usize, usize),
    Splice(usize, Vec<u8>),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => (any::<usize>(), 0usize..64).prop_map(|(i, n)| Mutation::Cut(i, n)),
        1 => (any::<usize>(), 0usize..64).prop_map(|(i, n)| Mutation::Repeat(i, n)),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(i, b)| Mutation::Splice(i, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(mut data: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        let len = data.len();
        if len == 0 {
            break;
        }
        match m {
            Mutation::Set(i, b) => data[i % len] = *b,
            Mutation::Cut(i, n) => {
                let at = i % len;
                let end = (at + n).min(len);
                data.drain(at..end);
            }
            Mutation::Repeat(i, n) => {
                let at = i % len;
                let end = (at + n).min(len);
                let span = data[at..end].to_vec();
                data.splice(end..end, span);
            }
            Mutation::Splice(i, b) => {
                let at = i % len;
                data.splice(at..at, b.iter().copied());
            }
            Mutation::Truncate(i) => data.truncate(i % len),
        }
    }
    data
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..5)
}

// --- the SALUTE codec ----------------------------------------------------------

fn reports() -> Vec<SaluteReport> {
    let a = common::report("u-1", 3);
    let mut b = common::report("team.runner-7", 40);
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

#[test]
fn salute_codec() {
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

#[test]
fn task_file() {
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

#[test]
fn knowledge_documents() {
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

#[test]
fn file_store_records() {
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

#[test]
fn sensor_lines() {
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

// --- the console's request bodies --------------------------------------------------

#[test]
fn console_bodies() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (q, console) = rt.block_on(async {
        let q = common::LocalQueue::start(&[("console.listen", "127.0.0.1:0")]).await;
        let console = xo_console::start(xo_runtime::ServiceCtx::new(q.cfg.clone(), q.bus.clone()))
            .await
            .unwrap();
        (q, console)
    });
    let token = std::fs::read_to_string(q.cfg.state.console_token_path())
        .unwrap()
        .trim()
        .to_string();
    let http = reqwest::Client::new();
    let url = console.url.clone();
    const KEYS: &[&str] = &[
        "mode",
        "project",
        "description",
        "completed",
        "budget_usd",
        "tasks",
        "task_id",
        "intent",
        "instructions",
        "role",
        "reason",
        "text",
        "message",
        "severity",
        "settings",
        "version",
        "replicas",
        "depends_on",
        "lane",
    ];
    static ROUTES: [&str; 8] = [
        "/api/v1/queue/init",
        "/api/v1/queue/goal",
        "/api/v1/queue/halt",
        "/api/v1/tasks",
        "/api/v1/tasks/t-1/answer",
        "/api/v1/units/u-1/steer",
        "/api/v1/knowledge/conventions/errors/deprecate",
        "/api/v1/fleet/coder/scale",
    ];
    let post = |route: &str, body: Vec<u8>, put: bool| -> Result<(), TestCaseError> {
        let (status, text) = rt.block_on(async {
            let req = if put {
                http.put(format!("{url}/api/v1/settings"))
            } else {
                http.post(format!("{url}{route}"))
            };
            let r = req
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("the console answers");
            (r.status(), r.text().await.unwrap_or_default())
        });
        // A bad body is the caller's error, named; a service this rig does
        // not run is named as down (503). Never a 500.
        prop_assert!(
            status.is_success() || status.is_client_error() || status.as_u16() == 503,
            "{route}: {status} {text}"
        );
        if !status.is_success() {
            let v: Value = serde_json::from_str(&text).map_err(|e| {
                TestCaseError::fail(format!("{route}: {status} not JSON: {e}: {text}"))
            })?;
            prop_assert!(
                v["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{route}: {status} {text}"
            );
        }
        Ok(())
    };
    fuzz(
        "console: random JSON bodies",
        10,
        (
            prop::sample::select(&ROUTES[..]),
            json_value(KEYS),
            any::<bool>(),
        ),
        |(route, v, put)| post(route, serde_json::to_vec(&v).unwrap(), put),
    );
    fuzz(
        "console: random bytes",
        10,
        (
            prop::sample::select(&ROUTES[..]),
            prop::collection::vec(any::<u8>(), 0..128),
        ),
        |(route, b)| post(route, b, false),
    );
    // Still serving, and the queue still answers through it.
    let s = rt.block_on(async {
        http.get(format!("{url}/api/v1/queue"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .status()
    });
    assert!(s.is_success(), "{s}");
    rt.block_on(async {
        console.stop().await;
        q.queue.stop().await.unwrap();
    });
}

// --- report files on the shared volume, times, URLs, settings, hook payloads --

/// A report file as a unit (or seed 000's host) writes it to
/// `<volume>/reports/`: seed-shaped or XO-shaped JSON, timestamps of any
/// text (multibyte characters where digits go, impossible dates), read the
/// way the supervisor's poller reads it. A reading that panics is what
/// once stopped file mode for good.
#[test]
fn report_files() {
    const KEYS: &[&str] = &[
        "role_id",
        "timestamp",
        "turn",
        "iteration",
        "context_fill_pct",
        "size",
        "status",
        "health",
        "turns_since_progress",
        "GREEN",
        "AMBER",
        "RED",
        "2025-01-27T22:44:56.1234Z",
        "2025-01-27T22:44:56é1234",
        "2025-02-31T25:61:00+99:00",
    ];
    let time_text = prop_oneof![
        ".{0,40}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9é]{0,9})?(Z|[+-][0-9]{2}:[0-9]{2})?",
    ];
    let file = (json_value(KEYS), time_text, ".{0,12}").prop_map(|(mut v, t, role)| {
        if let Value::Object(o) = &mut v {
            o.insert("role_id".into(), json!(role));
            o.insert("timestamp".into(), json!(t));
        }
        v
    });
    fuzz("report files (seed 000's shape)", 1, file, |v| {
        let bytes = serde_json::to_vec(&v).unwrap();
        let (r, largest) = measured(|| {
            let mapped = xo_supervisor::decode::seed_shaped(&bytes);
            let report = match &mapped {
                Some(Ok(m)) => {
                    codec::decode::<SaluteReport>(m, Some(codec::JSON), 1 << 20).map(Some)
                }
                _ => Ok(None),
            };
            if let Ok(Some(mut r)) = report {
                xo_supervisor::decode::fill_from_pct(&mut r, &bytes);
            }
            mapped
        });
        check_alloc("report file", bytes.len(), largest)?;
        if let Some(Err(e)) = r {
            prop_assert!(!e.to_string().is_empty());
        }
        Ok(())
    });
    fuzz("timestamps", 1, ".{0,48}", |t| {
        // A value or nothing; a value is a real instant, after 1970.
        if let Some(ms) = xo_sensor::parse_time_ms(&t) {
            prop_assert!(ms > 0, "{t:?} read as {ms}");
        }
        Ok(())
    });
}

/// URLs from outside: a NATS URL (with credentials) is split and
/// redacted, a login's `next` is kept only as a local route. Beyond no
/// panic: a password never survives redaction, and a kept route never
/// leaves this console (starts with one `/`, no control character, and a
/// browser joining it on any page of the console stays on the console).
#[test]
fn urls() {
    let any_url = prop_oneof![
        ".{0,40}",
        "(nats|tls|ws|https?)://[a-z%@:/\\[\\]é.]{0,30}",
        "/[a-z/\\\\\t\n%.:@?#é]{0,30}",
    ];
    fuzz(
        "urls: redaction, credentials, return paths",
        1,
        any_url,
        |u| {
            let _ = xo_bus::nats::redact_url(&u);
            let _ = xo_bus::nats::split_credentials(&u);
            if let Some(to) = xo_console::auth::local_target(&u) {
                prop_assert!(
                    to.starts_with('/') && !to.starts_with("//"),
                    "{u:?} -> {to:?}"
                );
                prop_assert!(!to.chars().any(char::is_control), "{u:?} -> {to:?}");
                // A browser on any host joins what is sent back to that host.
                let here = url::Url::parse("https://xo.example:7878/units/a").unwrap();
                let went = here.join(&to).unwrap();
                prop_assert_eq!(went.origin(), here.origin(), "{:?} -> {:?}", u, to);
            }
            Ok(())
        },
    );
    let creds = (
        "[a-z]{1,8}",
        "Pw[A-Za-z0-9%é@:]{6,16}",
        "[a-z]{1,10}(:[0-9]{1,5})?",
        prop::sample::select(&["nats://", "tls://", "ws://", ""][..]),
    );
    fuzz(
        "urls: a password never survives redaction",
        1,
        creds,
        |(user, pass, host, scheme)| {
            let url = format!("{scheme}{user}:{pass}@{host}");
            let shown = xo_bus::nats::redact_url(&url);
            prop_assert!(!shown.contains(&pass), "{url:?} shown as {shown:?}");
            Ok(())
        },
    );
}

/// Operator settings as the console's settings page and `xo settings set`
/// send them: any key (known or not), any JSON value. Applied over the
/// defaults they give a config or an error that names the key.
#[test]
fn settings_values() {
    let keys: Vec<String> = xo_runtime::settings::keys()
        .into_iter()
        .map(|k| k.key.replace("<role>", "default").replace("<project>", "p"))
        .collect();
    let keys: &'static [String] = Box::leak(keys.into_boxed_slice());
    let pairs = prop::collection::vec(
        (
            prop_oneof![
                4 => prop::sample::select(keys),
                1 => "[a-z_.<>/]{1,24}",
            ],
            json_value(&["true", "3", "-1", "1e308", "{output}", "http://"]),
        ),
        1..4,
    );
    let base = xo_runtime::XoConfig::default();
    fuzz("settings", 1, pairs, |pairs| {
        let s = xo_proto::settings::Settings {
            version: 1,
            values: pairs.iter().cloned().collect(),
            ..Default::default()
        };
        if let Err(e) = xo_runtime::settings::apply(&base, &s) {
            let said = e.to_string();
            prop_assert!(
                pairs
                    .iter()
                    .any(|(k, _)| said.contains(k.split('.').next().unwrap_or(k))),
                "{pairs:?}: {said}"
            );
        }
        Ok(())
    });
}

/// Hook payloads as Claude Code and Codex send them on stdin (`xo hook`):
/// any JSON, with their field names. A waiting session is read or not;
/// what it says is bounded by the payload.
#[test]
fn hook_payloads() {
    use xo_pipeline::driver::waiting;
    const KEYS: &[&str] = &[
        "hook_event_name",
        "Notification",
        "PermissionRequest",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "session_id",
        "transcript_path",
        "cwd",
        "message",
        "notification_type",
        "permission_prompt",
        "idle_prompt",
        "tool_name",
        "tool_input",
        "command",
        "file_path",
        "url",
        "stop_hook_active",
    ];
    fuzz("hook payloads", 1, json_value(KEYS), |v| {
        let text = v.to_string();
        let (w, largest) = measured(|| {
            let _ = waiting::subject(&v);
            waiting::from_hook(&v, 1)
        });
        check_alloc("hook payload", text.len(), largest)?;
        if let Some(w) = w {
            let said = format!("{w:?}");
            prop_assert!(said.len() <= 4 * text.len() + 1024, "{said}");
        }
        Ok(())
    });
}
