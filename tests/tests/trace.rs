//! W3C trace context crosses the bus: a report and the steering it caused
//! share one trace (checked with an in-memory exporter).

mod common;

use common::*;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test]
async fn report_and_its_steering_share_one_trace() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    xo_runtime::telemetry::install_propagator();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("xo-test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let sb = Sandbox::start(&[]).await;
    let mut sub = sb.steering("u1").await;
    // The first report is decoded by the report pump (which then asks the
    // root for the watcher), the second by the watcher: both keep the trace.
    for turn in 1..=2u64 {
        let agent = tracing::info_span!("agent.turn");
        let (trace_id, agent_span_id) = async {
            let mut r = report("u1", turn);
            r.unit.pace = xo_proto::Pace::Emergency;
            sb.send(&r).await;
            let cx = tracing::Span::current().context();
            let sc = cx.span().span_context().clone();
            (sc.trace_id(), sc.span_id())
        }
        .instrument(agent)
        .await;
        assert_ne!(trace_id, opentelemetry::trace::TraceId::INVALID);
        sb.wait_seq("u1", turn).await;
        let m = sub.try_next().expect("steering arrived");
        let tp = m
            .headers
            .get("traceparent")
            .expect("steering carries traceparent");
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(
            parts[1],
            trace_id.to_string(),
            "turn {turn}: steering is in the report's trace"
        );

        let _ = provider.force_flush();
        let spans = exporter.get_finished_spans().unwrap();
        let check = spans
            .iter()
            .find(|s| s.name == "radio.check" && s.span_context.trace_id() == trace_id)
            .expect("radio.check span exported in the report's trace");
        assert_eq!(
            check.parent_span_id, agent_span_id,
            "turn {turn}: radio.check is a child of the agent's span"
        );
        assert_eq!(
            parts[2],
            check.span_context.span_id().to_string(),
            "turn {turn}: steering sent from radio.check"
        );
    }
}
