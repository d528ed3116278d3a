//! The review supervisors end to end on the embedded bus: the queue, the
//! knowledge service and the reviewers in-process, the model a local
//! OpenAI-compatible test server, the test acting as the runner.

mod common;
#[path = "common/review_rig.rs"]
mod review_rig;

use std::time::Duration;

use review_rig::{Rig, cleanup_tasks, code_style, reply};
use xo_bus::typed;
use xo_proto::knowledge::*;
use xo_proto::queue::*;
use xo_tests::openai::{OpenAiStub, StubRequest};

const T: Duration = Duration::from_secs(10);

fn prompt_of(r: &StubRequest) -> String {
    r.body["messages"][1]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
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
    let stub = OpenAiStub::start(vec![reply(bad), reply(code_style()), reply(code_style())]);
    let mut rig = Rig::start(
        Some(&stub),
        &[
            ("review.code_style_every", "1"),
            ("review.internaliser_every", "100"),
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
    // The next day (by the service's clock) the daily budget is there again.
    rig.clock.advance(std::time::Duration::from_secs(86_400));
    rig.complete_one().await;
    let r = rig.next_run().await;
    assert_eq!(r.reviewer, "code_style");
    assert_eq!(
        r.outcome,
        "ran",
        "{} ({} requests)",
        r.summary,
        stub.requests().len()
    );
    assert_eq!(
        r.at,
        1_795_350_000_000 + 86_400_000,
        "stamped by the service's clock"
    );
    assert_eq!(stub.requests().len(), 3);
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
    let st = xo_tests::until("the goal completed", async || {
        Some(rig.call(&GetStatus {}).await).filter(|s| s.status == RunStatus::Completed)
    })
    .await;
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
    rig.call(&Enqueue::new(cleanup_tasks(60))).await;
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
    xo_tests::eventually("the reviewers kept the second completion", || {
        std::fs::read(&kept)
            .ok()
            .and_then(|b| serde_json::from_slice::<xo_review::service::Kept>(&b).ok())
            .is_some_and(|k| k.sched.completed() == 2)
    })
    .await;
    rig.restart_review().await;
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
    rig.call(&Enqueue::new(vec![t])).await;
    assert_eq!(rig.complete_one().await, "f1");
    let r = rig.next_run().await;
    assert_eq!(r.reviewer, "code_style");
    rig.stop().await;
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
