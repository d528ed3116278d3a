//! W3C trace context crosses the bus: a report and the steering it caused
//! share one trace (checked with an in-memory exporter).

mod common;
#[path = "common/review_rig.rs"]
mod review_rig;

use common::*;
use opentelemetry::trace::TraceContextExt;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

#[tokio::test]
async fn report_and_its_steering_share_one_trace() {
    let traces = MemoryTraces::start();

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

        let spans = traces.spans();
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

/// Each review run is its own trace (not one for the review service's
/// life): an OpenTelemetry GenAI `invoke_agent <reviewer>` root span with
/// the run's tokens, the model's turn (`chat`) inside it. Exported to an
/// in-memory exporter (the one-trace-per-task test uses a real collector).
#[tokio::test]
async fn each_review_run_is_its_own_trace_with_gen_ai_attributes() {
    let traces = MemoryTraces::start();

    let stub = xo_tests::openai::OpenAiStub::start(vec![
        review_rig::reply(review_rig::code_style()),
        review_rig::reply(review_rig::code_style()),
    ]);
    let mut rig = review_rig::Rig::start(
        Some(&stub),
        &[
            ("review.code_style_every", "1"),
            ("review.internaliser_every", "100"),
            ("review.assessor_every", "100"),
        ],
    )
    .await;
    let mut runs = Vec::new();
    for _ in 0..2 {
        rig.complete_one().await;
        let r = rig.next_run().await;
        assert_eq!(
            (r.reviewer.as_str(), r.outcome.as_str()),
            ("code_style", "ran")
        );
        runs.push(r);
    }
    rig.stop().await;
    let spans = traces.spans();
    let attr = |s: &opentelemetry_sdk::trace::SpanData, k: &str| {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.clone())
    };
    let roots: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent code_style")
        .collect();
    assert_eq!(roots.len(), 2, "one span per run: {spans:#?}");
    assert_ne!(
        roots[0].span_context.trace_id(),
        roots[1].span_context.trace_id(),
        "two runs, two traces"
    );
    for (root, run) in roots.iter().zip(&runs) {
        assert_eq!(
            root.parent_span_id,
            opentelemetry::trace::SpanId::INVALID,
            "a run is a trace's root"
        );
        assert_eq!(
            attr(root, "gen_ai.operation.name"),
            Some("invoke_agent".into())
        );
        assert_eq!(attr(root, "gen_ai.agent.name"), Some("code_style".into()));
        assert_eq!(
            attr(root, "gen_ai.usage.input_tokens"),
            Some(opentelemetry::Value::I64(run.tokens_in as i64))
        );
        assert_eq!(
            attr(root, "gen_ai.usage.output_tokens"),
            Some(opentelemetry::Value::I64(run.tokens_out as i64))
        );
        assert_eq!(attr(root, "xo.outcome"), Some("ran".into()));
        // The model's turn, inside the run.
        let chat = spans
            .iter()
            .find(|s| {
                s.span_context.trace_id() == root.span_context.trace_id()
                    && attr(s, "gen_ai.operation.name") == Some("chat".into())
            })
            .unwrap_or_else(|| panic!("the run's model turn: {spans:#?}"));
        assert_eq!(chat.parent_span_id, root.span_context.span_id());
        assert_eq!(
            attr(chat, "gen_ai.usage.input_tokens"),
            Some(opentelemetry::Value::I64(run.tokens_in as i64))
        );
    }
}
