//! The queue's state machine, pinned rule by rule (no I/O).

use std::collections::BTreeSet;

use xo_proto::queue::*;
use xo_queue::machine::{CLEANUP_AGE, CLEANUP_CAP, Machine, tasks_from_json};

fn roles() -> BTreeSet<String> {
    ["coder", "reviewer", "manager"].map(String::from).into()
}

fn task(id: &str) -> Task {
    tasks_from_json(
        format!(r#"{{"task_id":"{id}","intent":"do {id}","instructions":"do it","role":"coder"}}"#)
            .as_bytes(),
    )
    .unwrap()
    .remove(0)
}

fn running(mode: ExecutionMode, manager: bool) -> Machine {
    let mut m = Machine::new(30_000, roles());
    m.init(mode, manager, false).unwrap();
    m.set_goal(Goal {
        description: "ship it".into(),
        project_id: Some("p1".into()),
        completed: false,
    })
    .unwrap();
    m
}

fn ok() -> ValidationReport {
    ValidationReport {
        passed: true,
        summary: "all criteria met".into(),
        ..Default::default()
    }
}

fn failed() -> ValidationReport {
    ValidationReport {
        passed: false,
        summary: "tests fail".into(),
        ..Default::default()
    }
}

fn claim(m: &mut Machine, now: u64) -> Option<(TaskRecord, String)> {
    m.claim("coder", "r1", now).unwrap().0
}

#[test]
fn init_is_halted_and_not_repeated_by_accident() {
    let mut m = Machine::new(30_000, roles());
    assert!(
        m.enqueue(vec![task("a")], 0)
            .unwrap_err()
            .message
            .contains("xo init")
    );
    m.init(ExecutionMode::Auto, false, false).unwrap();
    assert_eq!(m.status().status, RunStatus::Halted);
    assert!(
        m.init(ExecutionMode::Auto, false, false)
            .unwrap_err()
            .message
            .contains("--force")
    );
    m.enqueue(vec![task("a")], 0).unwrap();
    m.init(ExecutionMode::Manual, false, true).unwrap();
    assert!(m.tasks.is_empty(), "force starts over");
    assert_eq!(m.status().mode, ExecutionMode::Manual);
}

#[test]
fn task_files_name_the_task_and_field() {
    let e = tasks_from_json(br#"[{"task_id":"T-1","intent":"x","instructions":"y","role":"coder"},{"task_id":"T-2","instructions":"y","role":"coder"}]"#).unwrap_err();
    assert!(
        e.contains("task #2 (T-2)") && e.contains("missing field `intent`"),
        "{e}"
    );
    let e = tasks_from_json(br#"{"task_id":"T-3","intent":"x","instructions":"y","role":"coder","retry_policy":{"max_retries":"three"}}"#).unwrap_err();
    assert!(
        e.contains("T-3") && e.contains("retry_policy.max_retries"),
        "{e}"
    );
    let e = tasks_from_json(br#"{"task_id":"T-4","intent":"x","instructions":"y","role":"coder","acceptance_critera":[]}"#).unwrap_err();
    assert!(e.contains("T-4") && e.contains("acceptance_critera"), "{e}");
    let e = tasks_from_json(b"[1]").unwrap_err();
    assert!(e.contains("task #1"), "{e}");
    let both = tasks_from_json(br#"[{"task_id":"a","intent":"x","instructions":"y","role":"coder"},{"task_id":"b","intent":"x","instructions":"y","role":"coder"}]"#).unwrap();
    assert_eq!(both.len(), 2);
}

#[test]
fn a_bad_task_enqueues_nothing() {
    let mut m = running(ExecutionMode::Auto, false);
    let cases: Vec<(Task, &str)> = vec![
        (
            Task {
                role: "wizard".into(),
                ..task("r")
            },
            "role \"wizard\" is unknown",
        ),
        (
            Task {
                working_directory: Some("../up".into()),
                ..task("w")
            },
            "working_directory \"../up\" leaves the sandbox",
        ),
        (
            Task {
                working_directory: Some("/etc".into()),
                ..task("a")
            },
            "working_directory \"/etc\" is absolute",
        ),
        (
            Task {
                required_artifacts: vec!["ok.txt".into(), "src/../../x".into()],
                ..task("q")
            },
            "required_artifacts \"src/../../x\" leaves",
        ),
        (
            Task {
                required_artifacts: vec!["/tmp/x".into()],
                ..task("z")
            },
            "required_artifacts \"/tmp/x\" is absolute",
        ),
        (
            Task {
                task_id: "bad id".into(),
                ..task("x")
            },
            "task_id \"bad id\"",
        ),
    ];
    for (bad, want) in cases {
        let e = m.enqueue(vec![task("good"), bad.clone()], 0).unwrap_err();
        assert!(
            e.message.contains(want),
            "{} does not contain {want}",
            e.message
        );
        assert!(
            e.message.contains(&format!("task {}", bad.task_id)) || want.starts_with("task_id"),
            "{}",
            e.message
        );
        assert!(m.tasks.is_empty(), "nothing enqueued");
    }
    let e = m.enqueue(vec![task("d"), task("d")], 0).unwrap_err();
    assert!(
        e.message.contains("task d: duplicate task_id"),
        "{}",
        e.message
    );
    assert!(m.tasks.is_empty());
}

#[test]
fn enqueue_is_idempotent_by_task_id() {
    let mut m = running(ExecutionMode::Auto, false);
    assert_eq!(
        m.enqueue(vec![task("a"), task("b")], 0).unwrap().0,
        ["a", "b"]
    );
    assert_eq!(m.enqueue(vec![task("a"), task("c")], 0).unwrap().0, ["c"]);
    let changed = Task {
        intent: "other".into(),
        ..task("a")
    };
    assert!(
        m.enqueue(vec![changed], 0)
            .unwrap_err()
            .message
            .contains("different content")
    );
}

#[test]
fn nothing_is_served_while_halted() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("a")], 0).unwrap();
    assert!(claim(&mut m, 1).is_none());
    m.resume(EventName::Start).unwrap();
    assert_eq!(claim(&mut m, 1).unwrap().0.task.task_id, "a");
}

#[test]
fn order_is_retries_then_lanes_then_fifo_and_deps_wait() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(
        vec![
            Task {
                lane: Lane::Cleanup,
                ..task("clean")
            },
            task("planned1"),
            Task {
                depends_on: vec!["planned1".into()],
                lane: Lane::Critical,
                ..task("after")
            },
            Task {
                lane: Lane::Functional,
                ..task("func")
            },
            task("planned2"),
            Task {
                lane: Lane::Critical,
                ..task("crit")
            },
        ],
        0,
    )
    .unwrap();
    m.resume(EventName::Start).unwrap();
    let mut order = Vec::new();
    while let Some((r, tok)) = claim(&mut m, 1) {
        let id = r.task.task_id.clone();
        if id == "func" && !order.contains(&"func-retried".to_string()) {
            // A failed attempt is served again before any new work.
            m.complete(&id, &tok, failed(), None, 1).unwrap();
            order.push("func-retried".into());
            continue;
        }
        m.complete(&id, &tok, ok(), None, 1).unwrap();
        order.push(id);
    }
    assert_eq!(
        order,
        [
            "crit",
            "func-retried",
            "func",
            "planned1",
            "after",
            "planned2",
            "clean"
        ]
    );
}

#[test]
fn exhausted_queue_halts_unless_the_goal_is_met() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("a")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (r, tok) = claim(&mut m, 1).unwrap();
    m.complete(&r.task.task_id, &tok, ok(), None, 2).unwrap();
    let s = m.status();
    assert_eq!(
        (s.status, s.halt_reason.as_deref()),
        (RunStatus::Halted, Some(TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE))
    );
    assert_eq!((s.iteration, s.last_task_id.as_deref()), (1, Some("a")));
    assert!(s.last_validation_report.unwrap().passed);
    m.set_goal(Goal {
        description: "ship it".into(),
        project_id: None,
        completed: true,
    })
    .unwrap();
    m.resume(EventName::Resume).unwrap();
    assert_eq!(m.status().status, RunStatus::Completed);
}

#[test]
fn retries_are_counted_then_the_task_blocks_and_halts() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(
        vec![
            Task {
                retry_policy: RetryPolicy { max_retries: 2 },
                ..task("a")
            },
            task("b"),
        ],
        0,
    )
    .unwrap();
    m.resume(EventName::Start).unwrap();
    for attempt in 1..=3u32 {
        let (r, tok) = claim(&mut m, 1).unwrap();
        assert_eq!((r.task.task_id.as_str(), r.attempt), ("a", attempt));
        let r = m.complete("a", &tok, failed(), None, 1).unwrap().0;
        assert_eq!(r.retries, attempt);
    }
    let a = &m.tasks["a"];
    assert_eq!(a.state, TaskState::Blocked);
    assert!(
        a.report.as_ref().is_some_and(|r| !r.passed),
        "kept with its report"
    );
    let s = m.status();
    assert_eq!(s.status, RunStatus::Halted);
    assert!(s.halt_reason.unwrap().starts_with("TASK_BLOCKED: a"));
    m.retry("a", 2).unwrap();
    m.resume(EventName::Resume).unwrap();
    assert_eq!(
        claim(&mut m, 3).unwrap().0.task.task_id,
        "a",
        "a retried task goes first"
    );
}

#[test]
fn a_stale_lease_is_offered_again_with_a_mark() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("a"), task("b")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok_a) = claim(&mut m, 1_000).unwrap();
    let (_, tok_b) = claim(&mut m, 1_000).unwrap();
    m.heartbeat("b", &tok_b, true, 20_000).unwrap();
    assert!(
        m.expire_leases(30_999).is_empty(),
        "a is 1 ms short of 30 s"
    );
    let c = m.expire_leases(31_000);
    assert_eq!(c.tasks.iter().collect::<Vec<_>>(), ["a"]);
    assert_eq!(m.tasks["a"].mark, Some(ReplayMark::RollbackReplay));
    m.expire_leases(50_000);
    assert_eq!(
        m.tasks["b"].mark,
        Some(ReplayMark::Resume),
        "b had checkpointed"
    );
    let err = m.complete("a", &tok_a, ok(), None, 50_001).unwrap_err();
    assert!(err.message.contains("not running"), "{}", err.message);
    let (r, tok) = claim(&mut m, 50_002).unwrap();
    assert_eq!((r.task.task_id.as_str(), r.attempt), ("a", 2));
    let err = m.complete("a", &tok_a, ok(), None, 50_003).unwrap_err();
    assert!(err.message.contains("lease lost"), "{}", err.message);
    m.complete("a", &tok, ok(), None, 50_004).unwrap();
    assert!(
        m.complete("a", &tok, ok(), None, 50_005).is_err(),
        "never completed twice"
    );
}

#[test]
fn questions_wait_for_an_answer() {
    let mut m = running(ExecutionMode::Manual, false);
    m.enqueue(vec![task("a")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    assert!(claim(&mut m, 1).is_none(), "MANUAL: nothing until a step");
    m.step().unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    assert!(claim(&mut m, 1).is_none(), "one step, one task");
    m.block(
        "a",
        &tok,
        "ambiguous".into(),
        Some("which database?".into()),
        2,
    )
    .unwrap();
    assert_eq!(m.tasks["a"].state, TaskState::AwaitingResponse);
    assert_eq!(
        m.status().status,
        RunStatus::Running,
        "a question is not a halt"
    );
    assert!(m.answer("a", "  ".into(), 3).is_err());
    m.answer("a", "postgres".into(), 3).unwrap();
    m.step().unwrap();
    let (r, _) = claim(&mut m, 4).unwrap();
    assert_eq!(r.answer.as_deref(), Some("postgres"));
}

#[test]
fn manager_reconciles_after_each_task_and_bad_replies_change_nothing() {
    let mut m = running(ExecutionMode::Auto, true);
    m.enqueue(vec![task("a"), task("b"), task("c")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    m.complete("a", &tok, ok(), None, 1).unwrap();
    assert_eq!(m.next_for("manager").as_deref(), Some("manager-a"));
    let (mr, mtok) = m.claim("manager", "mgr", 2).unwrap().0.unwrap();
    assert_eq!(mr.reconciles.as_deref(), Some("a"));
    let bad = serde_json::json!({"status": "fine", "message": "x", "tasks": []});
    let r = m
        .complete("manager-a", &mtok, ok(), Some(bad), 3)
        .unwrap()
        .0;
    assert_eq!((r.state, r.retries), (TaskState::Pending, 1));
    assert!(r.reason.unwrap().contains("status \"fine\""));
    assert_eq!(m.tasks["b"].state, TaskState::Pending, "nothing changed");
    let (_, mtok) = m.claim("manager", "mgr", 4).unwrap().0.unwrap();
    let good = serde_json::json!({
        "status": "ok", "message": "b is obsolete; d is new; c next",
        "next_task": "c",
        "tasks": [
            {"task_id": "c", "intent": "do c", "instructions": "do it", "role": "coder"},
            {"task_id": "d", "intent": "do d", "instructions": "do it", "role": "coder"}
        ]
    });
    m.complete("manager-a", &mtok, ok(), Some(good), 5).unwrap();
    assert_eq!(m.tasks["b"].state, TaskState::Cancelled);
    assert_eq!(m.tasks["d"].state, TaskState::Pending);
    assert_eq!(
        claim(&mut m, 6).unwrap().0.task.task_id,
        "c",
        "next_task is served next"
    );
    let done =
        serde_json::json!({"status": "ok", "message": "all done", "next_task": null, "tasks": []});
    let (_, tok) = m
        .tasks
        .get("c")
        .map(|r| (r.clone(), r.lease.clone().unwrap().token))
        .unwrap();
    m.complete("c", &tok, ok(), None, 7).unwrap();
    let (_, mtok) = m.claim("manager", "mgr", 8).unwrap().0.unwrap();
    m.complete("manager-c", &mtok, ok(), Some(done), 9).unwrap();
    assert!(m.status().goal.completed);
    assert_eq!(m.tasks["d"].state, TaskState::Cancelled);
    assert_eq!(m.status().status, RunStatus::Completed);
}

#[test]
fn cleanup_directives_are_capped_and_age_out() {
    let mut m = running(ExecutionMode::Auto, false);
    let cleanups: Vec<Task> = (0..12)
        .map(|i| Task {
            lane: Lane::Cleanup,
            ..task(&format!("c{i}"))
        })
        .collect();
    m.enqueue(cleanups, 0).unwrap();
    let waiting = m
        .tasks
        .values()
        .filter(|t| t.state == TaskState::Pending)
        .count();
    assert_eq!(waiting, CLEANUP_CAP);
    assert_eq!(m.tasks["c0"].state, TaskState::Cancelled, "the oldest go");
    let work: Vec<Task> = (0..CLEANUP_AGE).map(|i| task(&format!("w{i}"))).collect();
    m.enqueue(work, 0).unwrap();
    m.resume(EventName::Start).unwrap();
    for i in 0..CLEANUP_AGE {
        let (r, tok) = claim(&mut m, 1).unwrap();
        assert_eq!(r.task.task_id, format!("w{i}"));
        m.complete(&r.task.task_id, &tok, ok(), None, 1).unwrap();
    }
    assert!(
        m.tasks
            .values()
            .filter(|t| t.task.lane == Lane::Cleanup)
            .all(|t| t.state == TaskState::Cancelled)
    );
    assert!(
        m.tasks["c5"]
            .reason
            .as_deref()
            .unwrap()
            .contains("aged out")
    );
}

#[test]
fn cancel_frees_and_exhausts() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("a")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    m.cancel("a", 2).unwrap();
    assert!(m.complete("a", &tok, ok(), None, 3).is_err());
    assert_eq!(
        m.status().halt_reason.as_deref(),
        Some(TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE)
    );
    assert!(m.cancel("a", 4).is_err());
    assert!(
        m.cancel("nope", 4)
            .unwrap_err()
            .message
            .contains("task not found: nope")
    );
}

#[test]
fn every_transition_is_audited_with_before_and_after() {
    let mut m = running(ExecutionMode::Auto, false);
    let (_, c) = m.enqueue(vec![task("a")], 0).unwrap();
    assert_eq!(c.audit[0].event.as_str(), "ENQUEUE");
    let (_, c) = m
        .enqueue(
            vec![Task {
                lane: Lane::Critical,
                ..task("hot")
            }],
            0,
        )
        .unwrap();
    assert_eq!(
        c.audit[0].event.as_str(),
        "ENQUEUE_CRITICAL",
        "critical work announces itself"
    );
    m.resume(EventName::Start).unwrap();
    let (_, c) = m.claim("coder", "r1", 1).unwrap();
    let d = &c.audit[0];
    assert_eq!(
        (d.event.as_str(), d.task_id.as_deref()),
        ("TASK_START", Some("hot"))
    );
    assert_eq!(d.before["state"], "pending");
    assert_eq!(d.after["state"], "running");
}
