//! The review supervisors end to end on the embedded bus: the queue, the
//! knowledge service and the reviewers in-process, the model a local
//! OpenAI-compatible test server, the test acting as the runner.

mod common;

use std::time::Duration;

use common::LocalQueue;
use xo_bus::{Bus, Subscription, typed};
use xo_proto::Subjects;
use xo_proto::knowledge::*;
use xo_proto::queue::*;
use xo_runtime::XoConfig;
use xo_tests::openai::{OpenAiStub, StubRequest, text};

const T: Duration = Duration::from_secs(10);

struct Rig {
    _dir: tempfile::TempDir,
    bus: Bus,
    s: Subjects,
    cfg: XoConfig,
    runs: Subscription,
    directives: Subscription,
    queue: xo_queue::QueueHandle,
    knowledge: xo_knowledge::service::KnowledgeHandle,
    review: xo_review::service::ReviewHandle,
}

impl Rig {
    async fn start(stub: Option<&OpenAiStub>, extra: &[(&str, &str)]) -> Self {
        let url = stub.map(|s| s.base_url()).unwrap_or_default();
        let model = if stub.is_some() { "review-model" } else { "" };
        let mut o = vec![
            ("review.model.base_url", url.as_str()),
            ("review.model.model", model),
            ("review.model.api_key_env", "CARGO_PKG_DESCRIPTION"),
            ("review.model.backoff_ms", "1"),
            ("review.model.max_attempts", "1"),
            ("review.model.price_in_per_mtok", "3"),
            ("review.model.price_out_per_mtok", "15"),
        ];
        o.extend_from_slice(extra);
        let LocalQueue {
            dir,
            cfg,
            bus,
            queue,
        } = LocalQueue::start(&o).await;
        let knowledge = xo_knowledge::service::start(&cfg, bus.clone())
            .await
            .unwrap();
        let runs = bus.subscribe("xo.event.review.*").await.unwrap();
        let directives = bus.subscribe("xo.directive.*").await.unwrap();
        let review = xo_review::start(cfg.clone(), bus.clone()).await.unwrap();
        let s = cfg.subjects();
        let rig = Self {
            _dir: dir,
            bus,
            s,
            cfg,
            runs,
            directives,
            queue,
            knowledge,
            review,
        };
        rig.call(&Init::default()).await;
        rig.call(&SetGoal {
            budget_usd: 0.0,
            description: "a parser".into(),
            project_id: None,
            completed: true,
        })
        .await;
        let tasks = (1..=8)
            .map(|i| Task::new(format!("t{i}"), format!("step {i}"), "x", "coder"))
            .collect();
        rig.call(&Enqueue { tasks }).await;
        rig.call(&Start {}).await;
        rig
    }

    async fn call<R: xo_proto::Request>(&self, r: &R) -> R::Response
    where
        R::Response: serde::de::DeserializeOwned,
    {
        typed::call(&self.bus, &self.s, r, T).await.unwrap()
    }

    /// Plays the runner: claims the next task and completes it.
    async fn complete_one(&self) -> String {
        let c = self
            .call(&Claim {
                role: "coder".into(),
                claimant: "test".into(),
                wait_ms: 0,
            })
            .await
            .expect("a task to claim");
        let id = c.record.task.task_id.clone();
        self.call(&Complete {
            usage: Default::default(),
            task_id: id.clone(),
            token: c.token,
            claimant: String::new(),
            report: ValidationReport {
                passed: true,
                summary: "ok".into(),
                ..Default::default()
            },
            manager_reply: None,
            exchange: None,
        })
        .await;
        id
    }

    /// Cancels every planned task but t1, enqueues `n` cleanup directives
    /// and drains the review runs that caused.
    async fn only_cleanup_after_t1(&mut self, n: usize) {
        let ids: Vec<String> = self
            .call(&ListTasks::default())
            .await
            .into_iter()
            .map(|r| r.task.task_id)
            .collect();
        for id in ids.iter().skip(1) {
            self.call(&Cancel {
                task_id: id.clone(),
            })
            .await;
        }
        self.call(&Enqueue {
            tasks: cleanup_tasks(n),
        })
        .await;
        while tokio::time::timeout(Duration::from_millis(200), self.runs.next())
            .await
            .is_ok()
        {}
    }

    async fn next_run(&mut self) -> ReviewRun {
        let m = tokio::time::timeout(T, self.runs.next())
            .await
            .expect("a review run")
            .unwrap();
        typed::decode(&m, 1 << 20).unwrap()
    }

    async fn stop(self) {
        self.review.stop().await.unwrap();
        self.knowledge.stop().await.unwrap();
        self.queue.stop().await.unwrap();
    }
}

/// `n` cleanup directives, `dir-c1`…
fn cleanup_tasks(n: usize) -> Vec<Task> {
    (1..=n)
        .map(|i| {
            let mut t = Task::new(format!("dir-c{i}"), format!("tidy {i}"), "x", "coder");
            t.lane = Lane::Cleanup;
            t.directive = Some(format!("dir-c{i}"));
            t
        })
        .collect()
}

fn reply(output: serde_json::Value) -> xo_tests::openai::StubReply {
    let r = serde_json::json!({"status": "ok", "message": "reviewed", "output": output});
    text(&format!("Review done.\n{r}"))
}

fn prompt_of(r: &StubRequest) -> String {
    r.body["messages"][1]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn code_style() -> serde_json::Value {
    serde_json::json!({
        "conventions_updated": ["errors"],
        "documents": [{"name": "errors", "title": "Error handling", "rules": ["Return typed errors, never strings"], "rationale": "callers match on kinds"}],
        "directives": [
            {"type": "cleanup", "description": "Replace string errors in src/parse.rs with ParseError", "rationale": "convention errors", "priority": "low", "files": ["src/parse.rs"]},
            {"type": "functional", "description": "Stop the lexer from panicking on empty input", "rationale": "crashes the runner", "priority": "critical"}
        ],
        "summary": "1 convention, 2 directives"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviewers_write_knowledge_and_directives_and_converge() {
    let internaliser = serde_json::json!({
        "knowledge_items": [{"category": "lesson", "content": "The lexer must handle empty input", "source_task": "t2", "confidence": "high", "needs_user_review": false}],
        "summary": "1 lesson"
    });
    let stub = OpenAiStub::start(vec![
        reply(code_style()),
        reply(internaliser),
        reply(code_style()),
    ]);
    let mut rig = Rig::start(
        Some(&stub),
        &[
            ("review.code_style_every", "2"),
            ("review.internaliser_every", "3"),
            ("review.assessor_every", "100"),
        ],
    )
    .await;
    rig.complete_one().await;
    rig.complete_one().await;
    let r1 = rig.next_run().await;
    assert_eq!(
        (
            r1.reviewer.as_str(),
            r1.outcome.as_str(),
            r1.trigger.as_str()
        ),
        ("code_style", "ran", "interval")
    );
    assert!(r1.bootstrap, "the store was empty");
    assert_eq!((r1.documents, r1.directives), (1, 2));
    assert_eq!((r1.tokens_in, r1.tokens_out), (120, 20));
    assert!((r1.cost_usd - (120.0 * 3.0 + 20.0 * 15.0) / 1e6).abs() < 1e-12);
    assert!(prompt_of(&stub.requests()[0]).contains("BOOTSTRAP"));
    assert!(prompt_of(&stub.requests()[0]).contains("Done (most recent last):\n- t1: step 1"));

    // The directives: announced, and in the queue's lanes.
    let mut seen = Vec::new();
    for _ in 0..2 {
        let m = tokio::time::timeout(T, rig.directives.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.subject, "xo.directive.code_style");
        seen.push(typed::decode::<Directive>(&m, 1 << 20).unwrap());
    }
    assert_eq!(seen[1].priority, DirectivePriority::Critical);
    let tasks = rig.call(&ListTasks::default()).await;
    let lanes: Vec<(Lane, String)> = tasks
        .iter()
        .filter(|t| t.task.directive.is_some())
        .map(|t| (t.task.lane, t.task.intent.clone()))
        .collect();
    assert_eq!(lanes.len(), 2);
    assert!(
        lanes
            .iter()
            .any(|(l, i)| *l == Lane::Cleanup && i.starts_with("Replace string errors"))
    );
    assert!(
        lanes
            .iter()
            .any(|(l, i)| *l == Lane::Critical && i.contains("(why: crashes the runner)"))
    );
    let doc = rig
        .call(&GetDoc {
            id: "conventions/errors".into(),
        })
        .await;
    assert_eq!(
        (doc.status, doc.updated_by.as_str()),
        (DocStatus::Provisional, "code_style")
    );

    // The critical directive is served first.
    let third = rig.complete_one().await;
    assert!(third.starts_with("dir-code-style-"), "{third}");
    let r2 = rig.next_run().await;
    assert_eq!(r2.reviewer, "internaliser");
    assert!(!r2.bootstrap);
    let lesson = rig
        .call(&GetDoc {
            id: "lessons/the-lexer-must-handle-empty-input".into(),
        })
        .await;
    assert_eq!(lesson.updated_by, "internaliser");
    assert!(lesson.rationale.contains("from task t2"));
    // The lesson (of no milestone) reaches later tasks it is about, and
    // only those: the knowledge a runner's prompt gets for a task.
    let about = |text: &str| Select {
        milestone: Some("m9".into()),
        budget_tokens: None,
        about: About {
            role: "coder".into(),
            task_type: "fix".into(),
            text: text.into(),
            paths: vec!["src/lexer.rs".into()],
        },
    };
    let hit = rig
        .call(&about("Stop the lexer from panicking on empty input"))
        .await;
    assert!(
        hit.section.contains("The lexer must handle empty input"),
        "{}",
        hit.section
    );
    assert!(
        hit.docs
            .contains(&"lessons/the-lexer-must-handle-empty-input".to_string())
    );
    let miss = rig
        .call(&Select {
            about: About {
                text: "Write the release notes".into(),
                ..Default::default()
            },
            ..about("")
        })
        .await;
    assert!(
        !miss.docs.iter().any(|d| d.starts_with("lessons/")),
        "{:?}",
        miss.docs
    );

    // Code style again with the same findings: converging, interval doubled.
    rig.complete_one().await;
    let r3 = rig.next_run().await;
    assert_eq!(r3.reviewer, "code_style");
    assert!(r3.converging);
    // Three more: the internaliser's turn comes (at 6; the stub has no
    // more replies, so it is skipped), code style's does not (next at 8).
    for _ in 0..3 {
        rig.complete_one().await;
    }
    let r4 = rig.next_run().await;
    assert_eq!((r4.reviewer.as_str(), r4.task_count), ("internaliser", 6));
    assert_eq!(
        r4.outcome, "skipped",
        "an unreachable model skips the review"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), rig.runs.next())
            .await
            .is_err(),
        "no code style run at 7: its interval is now 4"
    );
    rig.complete_one().await;
    let r5 = rig.next_run().await;
    assert_eq!((r5.reviewer.as_str(), r5.task_count), ("code_style", 8));
    let log = xo_review::runlog::read_run_log(&xo_review::runlog::run_log_path(&rig.cfg)).await;
    assert_eq!(log.len(), 5);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_model_malformed_replies_and_budgets_skip_reviews() {
    // No model configured: skipped with a reason, work continues.
    let mut rig = Rig::start(None, &[("review.code_style_every", "1")]).await;
    rig.complete_one().await;
    let r = rig.next_run().await;
    assert_eq!(r.outcome, "skipped");
    assert!(r.summary.contains("review.model.model"), "{}", r.summary);
    rig.complete_one().await;
    rig.stop().await;

    // A reply that breaks the schema is discarded: nothing is written.
    let mut bad = code_style();
    bad["directives"][0]["priority"] = serde_json::json!("asap");
    let stub = OpenAiStub::start(vec![reply(bad), reply(code_style())]);
    let mut rig = Rig::start(
        Some(&stub),
        &[
            ("review.code_style_every", "1"),
            ("review.daily_budget_usd", "0.001"),
        ],
    )
    .await;
    rig.complete_one().await;
    let r = rig.next_run().await;
    assert_eq!(r.outcome, "discarded");
    assert!(r.summary.contains("asap"), "{}", r.summary);
    assert!(rig.call(&ListDocs::default()).await.docs.is_empty());
    // The discarded call was paid for (0.00066); the next run spends past
    // the daily budget (0.001); the one after is skipped.
    rig.complete_one().await;
    assert_eq!(rig.next_run().await.outcome, "ran");
    rig.complete_one().await;
    let r = rig.next_run().await;
    assert_eq!(r.outcome, "skipped");
    assert!(r.summary.contains("daily budget spent"), "{}", r.summary);
    assert_eq!(
        stub.requests().len(),
        2,
        "no model call once the budget is spent"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_assessor_halts_on_major_drift_after_the_reviewers() {
    let stub = OpenAiStub::start(vec![
        reply(code_style()),
        reply(
            serde_json::json!({"verdict": "major_drift", "summary": "building a GUI, the goal is a parser", "evidence": ["t1"]}),
        ),
    ]);
    let mut rig = Rig::start(
        Some(&stub),
        &[
            ("review.code_style_every", "1"),
            ("review.internaliser_every", "100"),
            ("review.assessor_every", "1"),
        ],
    )
    .await;
    rig.complete_one().await;
    let first = rig.next_run().await;
    let second = rig.next_run().await;
    assert_eq!(
        (first.reviewer.as_str(), second.reviewer.as_str()),
        ("code_style", "assessor")
    );
    assert_eq!(second.verdict.as_deref(), Some("major_drift"));
    // The assessor read the reviewers' run log.
    assert!(
        prompt_of(&stub.requests()[1])
            .contains("code_style after 1 tasks: 1 convention, 2 directives")
    );
    let status = rig.call(&GetStatus {}).await;
    assert_eq!(status.status, RunStatus::Halted);
    assert!(
        status
            .halt_reason
            .unwrap()
            .starts_with("assessor: major drift: building a GUI")
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polish_phase_is_bounded_to_cleanup_directives() {
    let mut rig = Rig::start(
        None,
        &[
            ("review.code_style_every", "1"),
            ("review.polish_max_tasks", "2"),
        ],
    )
    .await;
    // Only cleanup directives left after the planned work.
    // Only t1 and 4 cleanup directives left; the operator's cancellations
    // were churn: a review run from urgency (skipped, no model), drained.
    rig.only_cleanup_after_t1(4).await;
    assert_eq!(rig.complete_one().await, "t1");
    // t1's own review (the last functional work), then the polish phase.
    assert_eq!(rig.next_run().await.reviewer, "code_style");
    assert!(rig.complete_one().await.starts_with("dir-c"));
    assert!(rig.complete_one().await.starts_with("dir-c"));
    for _ in 0..100 {
        if rig.call(&GetStatus {}).await.status == RunStatus::Completed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = rig.call(&GetStatus {}).await;
    assert_eq!(st.status, RunStatus::Completed, "{st:?}");
    assert_eq!(st.counts.get("completed"), Some(&3));
    let dropped = rig
        .call(&ListTasks {
            after_seq: 0,
            limit: 0,
            task_id: None,
            state: Some(TaskState::Cancelled),
        })
        .await
        .iter()
        .filter(|r| r.task.lane == Lane::Cleanup)
        .count();
    assert_eq!(dropped, 2, "cleanup beyond polish_max_tasks is dropped");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rig.runs.next())
            .await
            .is_err(),
        "no reviews in the polish phase"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_model_stops_the_reviews_and_reviewers_cannot_write() {
    // Every call is refused with 401: the first run is skipped naming it;
    // the next runs are skipped without calling the model again.
    let refused = xo_tests::openai::StubReply::Status(401, "invalid api key".into(), None);
    let stub = OpenAiStub::start(vec![refused; 30]);
    let mut rig = Rig::start(Some(&stub), &[("review.code_style_every", "1")]).await;
    rig.complete_one().await;
    let r = rig.next_run().await;
    assert_eq!(r.outcome, "skipped");
    assert!(r.summary.contains("401"), "{}", r.summary);
    for _ in 0..4 {
        rig.complete_one().await;
        let r = rig.next_run().await;
        assert_eq!(r.outcome, "skipped");
        assert!(
            r.summary.contains("the review model refused"),
            "{}",
            r.summary
        );
        assert!(r.summary.contains("review.model"), "{}", r.summary);
    }
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 1, "a refusal is not retried");
    // The reviewer was offered only tools that read the sandbox (seed 001).
    let tools: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, vec!["read_file", "list_dir", "finish"]);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_survives_a_restart_and_dropped_cleanup_is_not_churn() {
    let mut rig = Rig::start(None, &[("review.code_style_every", "3")]).await;
    // Cleanup directives past the cap are dropped by the queue: not churn
    // (50 drops at +0.2 each would have pulled a run by urgency).
    rig.call(&Enqueue {
        tasks: cleanup_tasks(60),
    })
    .await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), rig.runs.next())
            .await
            .is_err(),
        "no review run from the queue's own cleanup drops"
    );
    rig.complete_one().await;
    rig.complete_one().await;
    // The reviewers restart between the second and the third completion
    // (once they have taken the second in).
    let kept = xo_review::service::kept_path(&rig.cfg);
    for _ in 0..500 {
        let k: Option<xo_review::service::Kept> = std::fs::read(&kept)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if k.is_some_and(|k| k.sched.completed() == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let restarted = xo_review::start(rig.cfg.clone(), rig.bus.clone())
        .await
        .unwrap();
    let old = std::mem::replace(&mut rig.review, restarted);
    old.stop().await.unwrap();
    rig.complete_one().await;
    let r = rig.next_run().await;
    assert_eq!(
        (r.reviewer.as_str(), r.task_count, r.trigger.as_str()),
        ("code_style", 3, "interval"),
        "the counter went on across the restart"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_functional_work_ends_the_polish_phase() {
    let mut rig = Rig::start(
        None,
        &[
            ("review.code_style_every", "1"),
            ("review.polish_max_tasks", "5"),
        ],
    )
    .await;
    // Only t1 and 3 cleanup directives left; the operator's cancellations
    // were churn: a review run from urgency (skipped, no model), drained.
    rig.only_cleanup_after_t1(3).await;
    // t1 done, only cleanup left: polish, no reviews.
    assert_eq!(rig.complete_one().await, "t1");
    assert_eq!(rig.next_run().await.reviewer, "code_style");
    assert!(rig.complete_one().await.starts_with("dir-c"));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), rig.runs.next())
            .await
            .is_err(),
        "no reviews in the polish phase"
    );
    // New functional work arrives: the polish phase ends, reviews resume.
    let mut t = Task::new("f1", "a new feature", "x", "coder");
    t.lane = Lane::Critical;
    rig.call(&Enqueue { tasks: vec![t] }).await;
    assert_eq!(rig.complete_one().await, "f1");
    let r = rig.next_run().await;
    assert_eq!(r.reviewer, "code_style");
    rig.stop().await;
}

/// Each review run is its own trace (not one for the review service's
/// life): an OpenTelemetry GenAI `invoke_agent <reviewer>` root span with
/// the run's tokens, the model's turn (`chat`) inside it. Exported to an
/// in-memory exporter (the one-trace-per-task test uses a real collector).
#[tokio::test]
async fn each_review_run_is_its_own_trace_with_gen_ai_attributes() {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    xo_runtime::telemetry::install_propagator();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("xo-test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let stub = OpenAiStub::start(vec![reply(code_style()), reply(code_style())]);
    let mut rig = Rig::start(
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
    let _ = provider.force_flush();
    let spans = exporter.get_finished_spans().unwrap();
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

/// Seed 001's user review queue: what the internaliser flags
/// `needs_user_review` is written, raised as a `knowledge_review` alert and
/// held out of prompts; the operator's accept makes it established (and
/// given to agents), a reject deprecates it; each decision is a
/// `KNOWLEDGE_REVIEWED` audit line holding the document's state before and
/// after, and a document not waiting cannot be decided again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flagged_knowledge_waits_for_the_operator_and_the_decision_is_audited() {
    let internaliser = serde_json::json!({
        "knowledge_items": [
            {"category": "lesson", "content": "The vendored parser accepts trailing commas", "source_task": "t1", "confidence": "low", "needs_user_review": true},
            {"category": "domain", "content": "Invoices are due within thirty days", "source_task": "t1", "confidence": "medium", "needs_user_review": true},
            {"category": "lesson", "content": "Run the formatter before the parser tests", "source_task": "t1", "confidence": "high", "needs_user_review": false}
        ],
        "summary": "3 items"
    });
    let stub = OpenAiStub::start(vec![reply(internaliser)]);
    let mut rig = Rig::start(
        Some(&stub),
        &[
            ("review.code_style_every", "100"),
            ("review.internaliser_every", "1"),
            ("review.assessor_every", "100"),
        ],
    )
    .await;
    let mut alerts = rig
        .bus
        .subscribe(&rig.s.alert(xo_proto::alert::AlertKind::KnowledgeReview))
        .await
        .unwrap();
    rig.complete_one().await;
    let run = rig.next_run().await;
    assert_eq!((run.reviewer.as_str(), run.documents), ("internaliser", 3));

    let list = rig.call(&ListDocs::default()).await;
    let id_of = |words: &str| {
        list.docs
            .iter()
            .find(|d| d.title.contains(words))
            .unwrap_or_else(|| panic!("{words}: {list:?}"))
            .clone()
    };
    let (commas, invoices, formatter) = (
        id_of("trailing commas"),
        id_of("Invoices"),
        id_of("formatter"),
    );
    assert!(commas.needs_user_review && invoices.needs_user_review);
    assert!(!formatter.needs_user_review);

    // One alert for the run, naming the two documents and not the third.
    let m = tokio::time::timeout(T, alerts.next())
        .await
        .expect("a knowledge_review alert")
        .unwrap();
    let alert: xo_proto::alert::Alert = typed::decode(&m, 1 << 20).unwrap();
    assert_eq!(alert.source, "review");
    assert!(alert.title.contains(&commas.id) && alert.title.contains(&invoices.id));
    assert!(!alert.title.contains(&formatter.id), "{}", alert.title);
    assert!(alert.detail.contains("Knowledge page"), "{}", alert.detail);

    // Held out of prompts until accepted.
    let select = Select {
        milestone: None,
        budget_tokens: Some(5000),
        about: About {
            role: "coder".into(),
            task_type: "fix".into(),
            text:
                "vendored parser trailing commas; formatter parser tests; invoices due thirty days"
                    .into(),
            paths: Vec::new(),
        },
    };
    let before = rig.call(&select).await;
    assert!(before.docs.contains(&formatter.id), "{before:?}");
    assert!(!before.docs.contains(&commas.id) && !before.docs.contains(&invoices.id));

    let accepted = rig
        .call(&ReviewDoc {
            id: commas.id.clone(),
            accept: true,
            by: "alice".into(),
            note: "checked against the vendored copy".into(),
        })
        .await;
    assert_eq!(accepted.before, DocStatus::Provisional);
    assert_eq!(accepted.doc.status, DocStatus::Established);
    assert!(!accepted.doc.needs_user_review);
    assert_eq!(accepted.audit_error, None);
    let last = accepted.doc.changelog.last().unwrap();
    assert_eq!(
        (last.by.as_str(), last.what.as_str()),
        (
            "alice",
            "accepted in review: checked against the vendored copy"
        )
    );
    let rejected = rig
        .call(&ReviewDoc {
            id: invoices.id.clone(),
            accept: false,
            by: String::new(),
            note: "terms differ per customer".into(),
        })
        .await;
    assert_eq!(rejected.doc.status, DocStatus::Deprecated);
    // Decided once: again is refused, naming why.
    let again = typed::call(
        &rig.bus,
        &rig.s,
        &ReviewDoc {
            id: commas.id.clone(),
            accept: false,
            by: String::new(),
            note: String::new(),
        },
        T,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(again.contains("not awaiting review"), "{again}");

    let after = rig.call(&select).await;
    assert!(after.docs.contains(&commas.id), "accepted: given to agents");
    assert!(!after.docs.contains(&invoices.id), "rejected: deprecated");

    // The audit holds both decisions, before and after.
    let audit = rig
        .call(&AuditTail {
            project: None,
            lines: None,
        })
        .await;
    let lines: Vec<&AuditEvent> = audit
        .iter()
        .filter(|a| a.event == "KNOWLEDGE_REVIEWED")
        .collect();
    assert_eq!(lines.len(), 2, "{audit:#?}");
    assert_eq!(lines[0].state_before["doc"], commas.id.as_str());
    assert_eq!(lines[0].state_before["status"], "provisional");
    assert_eq!(lines[0].state_before["needs_user_review"], true);
    assert_eq!(lines[0].state_after["status"], "established");
    assert_eq!(lines[0].state_after["decision"], "accepted");
    assert_eq!(lines[0].state_after["by"], "alice");
    assert_eq!(lines[1].state_before["doc"], invoices.id.as_str());
    assert_eq!(lines[1].state_after["status"], "deprecated");
    assert_eq!(lines[1].state_after["decision"], "rejected");
    assert_eq!(lines[1].state_after["by"], "operator");
    assert_eq!(lines[1].state_after["note"], "terms differ per customer");
    let check = rig.call(&AuditVerify { project: None }).await;
    assert!(check.intact, "{check:?}");
    rig.stop().await;
}
