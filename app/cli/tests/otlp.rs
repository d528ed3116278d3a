//! Telemetry to a real collector: `rotel` (PyPI's Rust OTLP collector, run
//! as its own process and printing every span it receives) gets the spans
//! of two processes — this test, playing an agent that sends one SALUTE
//! report, and `xo serve supervisor`, which checks it and steers — and they
//! are one trace: the supervisor's `radio.check` span is the child of the
//! agent's span, and the steering carries that trace across NATS.
//!
//! A task is one trace: with the queue, a supervisor and a runner as their
//! own `xo` processes exporting to the collector, each of two tasks worked
//! by one runner is its own trace, rooted at the runner's `invoke_agent`
//! span (OpenTelemetry GenAI attributes, the task's tokens summed), holding
//! its turns (`chat`, `execute_tool` with `gen_ai.tool.name`), its SALUTE
//! reports, the supervisor's checks of them, the steering they caused as
//! the runner received it, and the queue's answers to its requests.
//!
//! The collector comes from `pip install rotel==0.0.1a15` (CI installs it);
//! `XO_ROTEL` names another binary.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use xo_tests::launcher::Xo;

use opentelemetry::trace::TraceContextExt;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use xo_bus::{Bus, NatsBus, typed};
use xo_proto::{Format, SaluteReport, Subjects};
use xo_tests::{NatsServer, free_port};

fn rotel() -> PathBuf {
    if let Some(p) = std::env::var_os("XO_ROTEL") {
        return PathBuf::from(p);
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))",
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "no OTLP collector: `pip install rotel==0.0.1a15` (CI does), or set XO_ROTEL: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The collector's printed spans so far.
fn received(log: &std::path::Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_and_its_steering_are_one_trace_at_the_collector() {
    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::start(dir.path());
    let endpoint = collector.endpoint.clone();

    let nats = NatsServer::start();
    let url = nats.url();
    let supervisor = Killed(
        Xo::new()
            .command(&[])
            .args(["serve", "supervisor", "--nats", &url])
            .env("XO__STATE__DIR", dir.path().join("state"))
            .env("XO__TELEMETRY__OTLP_ENDPOINT", &endpoint)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("xo serve supervisor"),
    );

    // This process exports its own spans to the same collector.
    let telemetry = xo_runtime::telemetry::init(
        &xo_runtime::config::TelemetryConfig {
            otlp_endpoint: endpoint.clone(),
            log_level: "info".into(),
            ..Default::default()
        },
        "agent-under-test",
    )
    .unwrap();
    let bus = Bus::Nats(NatsBus::connect(&url, Default::default()).await.unwrap());
    let subjects = Subjects::default();
    let mut steering = bus.subscribe(&subjects.steer("u1")).await.unwrap();
    // The supervisor is up once it answers its control API.
    xo_tests::until("the supervisor answers", async || {
        typed::call(
            &bus,
            &subjects,
            &xo_proto::control::ListUnits::default(),
            Duration::from_millis(500),
        )
        .await
        .ok()
    })
    .await;

    let span = tracing::info_span!("agent.turn");
    let (trace_id, agent_span) = async {
        let mut r = SaluteReport::new("u1", "coder", 1, 1);
        r.unit.pace = xo_proto::Pace::Emergency;
        typed::publish(&bus, &subjects.salute("u1"), &r, Format::Msgpack)
            .await
            .unwrap();
        let sc = tracing::Span::current()
            .context()
            .span()
            .span_context()
            .clone();
        (sc.trace_id().to_string(), sc.span_id().to_string())
    }
    .instrument(span)
    .await;
    let m = tokio::time::timeout(Duration::from_secs(30), steering.next())
        .await
        .expect("steering arrives")
        .expect("a message");
    let tp = m
        .headers
        .get("traceparent")
        .expect("steering has traceparent");
    assert_eq!(tp.split('-').nth(1), Some(trace_id.as_str()), "{tp}");
    let check_span = tp.split('-').nth(2).unwrap().to_string();

    // Both processes flush: this one now, the supervisor as it stops.
    drop(telemetry);
    let _ = Command::new("kill")
        .args(["-INT", &supervisor.0.id().to_string()])
        .status();
    // Both spans in (or what came, for the assertions to name what is missing).
    let got = xo_tests::within(xo_tests::HANG_GUARD, async || {
        Some(received(&collector.log))
            .filter(|got| got.contains(&check_span) && got.contains(&agent_span))
    })
    .await
    .unwrap_or_else(|| received(&collector.log));
    drop(supervisor);
    // The collector saw the agent's span and the supervisor's check, in the
    // one trace, the check's parent being the agent's span.
    assert!(got.contains("agent-under-test"), "{got}");
    assert!(got.contains("xo-supervisor"), "{got}");
    assert!(got.contains(&agent_span), "the agent's span: {got}");
    let spans = parse_spans(&got);
    let agent = spans
        .iter()
        .find(|s| s.id == agent_span)
        .unwrap_or_else(|| panic!("the agent's span {agent_span} at the collector: {got}"));
    assert_eq!(agent.name, "agent.turn");
    assert_eq!(agent.trace, trace_id);
    assert_eq!(agent.service, "agent-under-test");
    let check = spans
        .iter()
        .find(|s| s.id == check_span)
        .unwrap_or_else(|| panic!("the supervisor's span {check_span} at the collector: {got}"));
    assert_eq!(check.name, "radio.check");
    assert_eq!(check.service, "xo-supervisor");
    assert_eq!(check.trace, trace_id, "in the report's trace");
    assert_eq!(
        check.parent, agent_span,
        "a child of the agent's span, across the two processes"
    );
}

/// A span as the collector printed it.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    id: String,
    trace: String,
    parent: String,
    service: String,
    attrs: std::collections::BTreeMap<String, String>,
}

/// The collector's printed spans, with the service each came from.
fn parse_spans(text: &str) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut service = String::new();
    let mut cur: Option<Seen> = None;
    let mut in_attrs = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("-> service.name: Str(") {
            service = v.trim_end_matches(')').to_string();
            continue;
        }
        if t.starts_with("Span #") {
            out.extend(cur.take());
            cur = Some(Seen {
                service: service.clone(),
                ..Default::default()
            });
            in_attrs = false;
            continue;
        }
        if t.starts_with("ResourceSpans #") || t.starts_with("ScopeSpans #") {
            out.extend(cur.take());
            in_attrs = false;
            continue;
        }
        let Some(span) = cur.as_mut() else { continue };
        if t == "Attributes:" {
            in_attrs = true;
            continue;
        }
        if let Some(kv) = t.strip_prefix("-> ") {
            if in_attrs && let Some((k, v)) = kv.split_once(": ") {
                let v = v
                    .split_once('(')
                    .map_or(v, |(_, v)| v.strip_suffix(')').unwrap_or(v));
                span.attrs.insert(k.to_string(), v.to_string());
            }
            continue;
        }
        in_attrs = false;
        if let Some((k, v)) = t.split_once(':') {
            let v = v.trim().to_string();
            match k.trim() {
                "Name" => span.name = v,
                "ID" => span.id = v,
                "Trace ID" => span.trace = v,
                "Parent ID" => span.parent = v,
                _ => {}
            }
        }
    }
    out.extend(cur);
    out
}

/// The collector, as a child process printing what it receives.
struct Collector {
    _child: Killed,
    log: PathBuf,
    endpoint: String,
}

impl Collector {
    fn start(dir: &std::path::Path) -> Self {
        let http = free_port();
        let log = dir.join("rotel.log");
        let child = Killed(
            Command::new(rotel())
                .args([
                    "start",
                    "--otlp-grpc-endpoint",
                    &format!("127.0.0.1:{}", free_port()),
                    "--otlp-http-endpoint",
                    &format!("127.0.0.1:{http}"),
                    "--exporter",
                    "blackhole",
                    "--debug-log",
                    "traces",
                    "--debug-log-verbosity",
                    "detailed",
                ])
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .expect("rotel starts"),
        );
        xo_tests::eventually_blocking("the collector listens", || {
            std::net::TcpStream::connect(("127.0.0.1", http)).is_ok()
        });
        // OTLP over HTTP: the collector's base URL (XO posts to v1/traces).
        Self {
            _child: child,
            log,
            endpoint: format!("http://127.0.0.1:{http}"),
        }
    }

    fn spans(&self) -> Vec<Seen> {
        parse_spans(&received(&self.log))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_task_is_one_trace_from_claim_to_outcome_with_its_checks_and_steering() {
    use xo_proto::queue::*;
    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::start(dir.path());
    let nats = NatsServer::start();
    let url = nats.url();
    let mut procs = xo_tests::procs::Procs::new(dir.path().to_path_buf());
    let spawn = |procs: &mut xo_tests::procs::Procs, name: &str, args: &[&str]| {
        let mut c = Xo::new().command(&[]);
        c.args(["--nats", &url])
            .args(args)
            .env("XO__STATE__DIR", dir.path().join("state"))
            .env("XO__QUEUE__DATA_DIR", dir.path().join("data"))
            .env("XO__RUNNER__SANDBOX", dir.path().join("sandbox"))
            .env("XO__RUNNER__DEFAULT_PROJECT", "m")
            .env("XO__RUNNER__CLAIM_WAIT_MS", "300")
            // The XO steers, not the runner's own check.
            .env("XO__RUNNER__MICROCOSM", "false")
            .env("XO__TELEMETRY__OTLP_ENDPOINT", &collector.endpoint)
            .env("RUST_LOG", "info");
        procs.start(name, c);
    };
    spawn(&mut procs, "queue", &["serve", "queue"]);
    spawn(&mut procs, "supervisor", &["serve", "supervisor"]);
    let bus = Bus::Nats(NatsBus::connect(&url, Default::default()).await.unwrap());
    let subjects = Subjects::default();
    let t = Duration::from_secs(3);
    let init = Init {
        force: true,
        ..Default::default()
    };
    let ready = xo_tests::within(xo_tests::HANG_GUARD, async || {
        typed::call(&bus, &subjects, &init, t).await.ok()?;
        typed::call(&bus, &subjects, &xo_proto::control::ListUnits::default(), t)
            .await
            .ok()
    })
    .await;
    assert!(
        ready.is_some(),
        "queue and supervisor answer\n{}",
        procs.logs(20)
    );
    typed::call(
        &bus,
        &subjects,
        &SetGoal {
            description: "two tasks".into(),
            project_id: Some("m".into()),
            completed: true,
            ..Default::default()
        },
        t,
    )
    .await
    .unwrap();
    let ok = r#"{ reply = '{"status": "ok", "message": "done"}' }"#;
    let task = |id: &str, steps: &str| {
        let mut t = Task::new(
            id,
            format!("task {id}"),
            format!("```xo-script\nturn_ms = 20\n[[run]]\nsteps = [{steps}, {ok}]\n```\n"),
            "coder",
        );
        t.project = Some("m".into());
        t
    };
    typed::call(
        &bus,
        &subjects,
        &Enqueue::new(vec![
                // Loops on a failing build until steered (the XO's loop rule).
                task(
                    "looping",
                    r#"{ repeat = 1000, tool = "build", args = "--all", fail = "compile_error", until_steered = true }, { write = "built.txt", content = "x" }"#,
                ),
                task("plain", r#"{ tool = "read_file", args = "a.txt" }, { write = "b.txt", content = "b" }"#),
        ]),
        t,
    )
    .await
    .unwrap();
    typed::call(&bus, &subjects, &Start::default(), t)
        .await
        .unwrap();
    spawn(
        &mut procs,
        "runner",
        &[
            "serve", "runner", "--script", "inline", "--role", "coder", "--unit", "coder-1",
        ],
    );
    let client = xo_bus::Client::new(bus.clone(), subjects.clone()).with_timeout(t);
    let done = xo_tests::ctl::goal_completed(&client, xo_tests::HANG_GUARD).await;
    assert!(done.is_some(), "the goal completes\n{}", procs.logs(30));
    // Each process flushes its spans as it stops.
    for p in ["runner", "supervisor", "queue"] {
        procs.stop(p);
    }
    // What the collector holds once every process's spans are in (or
    // what it has, for the assertions below to name what is missing).
    let complete = |spans: &Vec<Seen>| {
        spans
            .iter()
            .filter(|s| s.name == "invoke_agent coder")
            .count()
            >= 2
            && spans.iter().any(|s| s.service == "xo-supervisor")
            && spans.iter().any(|s| s.service == "xo-queue")
    };
    let spans = xo_tests::within(xo_tests::HANG_GUARD, async || {
        Some(collector.spans()).filter(complete)
    })
    .await
    .unwrap_or_else(|| collector.spans());
    let dump = || received(&collector.log);
    let root = |id: &str| -> Seen {
        spans
            .iter()
            .find(|s| {
                s.name == "invoke_agent coder"
                    && s.attrs.get("task_id").map(String::as_str) == Some(id)
            })
            .cloned()
            .unwrap_or_else(|| panic!("the task span of {id}: {}", dump()))
    };
    let (looping, plain) = (root("looping"), root("plain"));
    // One trace each, each rooted at its task span (not the runner's).
    assert_ne!(looping.trace, plain.trace, "two tasks, two traces");
    for r in [&looping, &plain] {
        assert!(r.parent.is_empty(), "a task span is a trace's root: {r:?}");
        assert_eq!(r.service, "xo-runner");
        assert_eq!(r.attrs["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(r.attrs["gen_ai.agent.name"], "coder");
        assert_eq!(r.attrs["gen_ai.agent.id"], "coder-1");
        assert_eq!(r.attrs["xo.outcome"], "completed");
    }
    let in_trace = |r: &Seen, name: &str| -> Vec<Seen> {
        spans
            .iter()
            .filter(|s| s.trace == r.trace && s.name == name)
            .cloned()
            .collect()
    };
    // Its turns: the script's agent spends 200 tokens in and 50 out a turn,
    // and the task span sums them.
    let chats: Vec<Seen> = spans
        .iter()
        .filter(|s| {
            s.trace == plain.trace
                && s.attrs.get("gen_ai.operation.name").map(String::as_str) == Some("chat")
        })
        .cloned()
        .collect();
    assert!(
        chats.iter().all(|c| c.name == "chat script"),
        "named for the model: {chats:?}"
    );
    assert!(
        chats.len() >= 2,
        "the plain task's turns: {chats:?}\n{}",
        dump()
    );
    assert!(
        chats
            .iter()
            .all(|c| c.parent == plain.id && c.attrs["gen_ai.usage.input_tokens"] == "200")
    );
    assert_eq!(
        plain.attrs["gen_ai.usage.input_tokens"],
        (200 * chats.len()).to_string(),
        "the task's input tokens are its turns' sum"
    );
    assert_eq!(
        plain.attrs["gen_ai.usage.output_tokens"],
        (50 * chats.len()).to_string()
    );
    let tools = in_trace(&plain, "execute_tool read_file");
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0].attrs["gen_ai.tool.name"], "read_file");
    assert!(
        chats.iter().any(|c| c.id == tools[0].parent),
        "a tool call is inside its turn"
    );
    // Its reports, the supervisor's checks of them, and the steering the
    // loop caused, received by the runner: all in the looping task's trace.
    let reports = in_trace(&looping, "salute.report");
    assert!(
        !reports.is_empty(),
        "the looping task's reports: {}",
        dump()
    );
    assert!(reports.iter().all(|r| r.parent == looping.id));
    let checks = in_trace(&looping, "radio.check");
    assert!(
        checks
            .iter()
            .any(|c| c.service == "xo-supervisor" && reports.iter().any(|r| r.id == c.parent)),
        "the supervisor's check of a report is that report's child: {checks:?}"
    );
    let steered = in_trace(&looping, "steering.received");
    assert!(
        steered.iter().any(|s| s.service == "xo-runner"
            && s.attrs.get("kind").map(String::as_str) == Some("loop")
            && checks.iter().any(|c| c.id == s.parent)),
        "the loop steering, received by the runner under the check that sent it: {steered:?}\n{checks:?}"
    );
    // No check of a report strays into the other task's trace.
    assert!(in_trace(&plain, "steering.received").is_empty());
    // The queue's answer to the task's outcome is in the task's trace.
    let answered = in_trace(&plain, "queue complete");
    assert!(
        answered.iter().any(|s| s.service == "xo-queue"),
        "the queue's answer to the outcome: {}",
        dump()
    );
    // Nothing of a task is left in a runner-wide trace: every report and
    // check is in the trace of one of the two tasks.
    for s in spans
        .iter()
        .filter(|s| s.name == "salute.report" || s.name == "radio.check")
    {
        assert!(
            s.trace == looping.trace || s.trace == plain.trace,
            "a report or check outside the tasks' traces: {s:?}"
        );
    }
}
