//! Telemetry to a real collector: `rotel` (PyPI's Rust OTLP collector, run
//! as its own process and printing every span it receives) gets the spans
//! of two processes — this test, playing an agent that sends one SALUTE
//! report, and `xo serve supervisor`, which checks it and steers — and they
//! are one trace: the supervisor's `radio.check` span is the child of the
//! agent's span, and the steering carries that trace across NATS.
//!
//! The collector comes from `pip install rotel==0.0.1a15` (CI installs it);
//! `XO_ROTEL` names another binary.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
    let grpc = free_port();
    let log = dir.path().join("rotel.log");
    let _collector = Killed(
        Command::new(rotel())
            .args([
                "start",
                "--otlp-grpc-endpoint",
                &format!("127.0.0.1:{grpc}"),
                "--otlp-http-endpoint",
                &format!("127.0.0.1:{}", free_port()),
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
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", grpc)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let endpoint = format!("http://127.0.0.1:{grpc}");

    let nats = NatsServer::start();
    let url = nats.url();
    let supervisor = Killed(
        Command::new(env!("CARGO_BIN_EXE_xo"))
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
    for _ in 0..400 {
        if typed::call(
            &bus,
            &subjects,
            &xo_proto::control::ListUnits {
                after: None,
                limit: None,
            },
            Duration::from_millis(500),
        )
        .await
        .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

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
    let mut got = String::new();
    for _ in 0..400 {
        got = received(&log);
        if got.contains(&check_span) && got.contains(&agent_span) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    drop(supervisor);
    // The collector saw the agent's span and the supervisor's check, in the
    // one trace, the check's parent being the agent's span.
    assert!(got.contains("agent-under-test"), "{got}");
    assert!(got.contains("xo-supervisor"), "{got}");
    assert!(got.contains(&agent_span), "the agent's span: {got}");
    let spans: Vec<&str> = got.split("Span #").skip(1).collect();
    let field = |span: &str, name: &str| -> String {
        span.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let agent = spans
        .iter()
        .find(|s| field(s, "ID") == agent_span)
        .unwrap_or_else(|| panic!("the agent's span {agent_span} at the collector: {got}"));
    assert_eq!(field(agent, "Name"), "agent.turn");
    assert_eq!(field(agent, "Trace ID"), trace_id);
    let check = spans
        .iter()
        .find(|s| field(s, "ID") == check_span)
        .unwrap_or_else(|| panic!("the supervisor's span {check_span} at the collector: {got}"));
    assert_eq!(field(check, "Name"), "radio.check");
    assert_eq!(field(check, "Trace ID"), trace_id, "in the report's trace");
    assert_eq!(
        field(check, "Parent ID"),
        agent_span,
        "a child of the agent's span, across the two processes"
    );
}
