//! The queue's state machine, pinned rule by rule (no I/O).

use std::collections::BTreeSet;

use xo_proto::queue::*;
use xo_queue::machine::{CLEANUP_AGE, CLEANUP_CAP, Machine, Policy, tasks_from_json};

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
        budget_usd: 0.0,
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
    let e = tasks_from_json(br#"[{"task_id":"T-1","intent":"x","instructions":"y","role":"coder"},{"task_id":"T-2","instructions":"y","role":"coder"}]"#).unwrap_err().to_string();
    assert!(
        e.contains("task #2 (T-2)") && e.contains("missing field `intent`"),
        "{e}"
    );
    let e = tasks_from_json(br#"{"task_id":"T-3","intent":"x","instructions":"y","role":"coder","retry_policy":{"max_retries":"three"}}"#).unwrap_err().to_string();
    assert!(
        e.contains("T-3") && e.contains("retry_policy.max_retries"),
        "{e}"
    );
    let e = tasks_from_json(br#"{"task_id":"T-4","intent":"x","instructions":"y","role":"coder","acceptance_critera":[]}"#).unwrap_err().to_string();
    assert!(e.contains("T-4") && e.contains("acceptance_critera"), "{e}");
    let e = tasks_from_json(b"[1]").unwrap_err().to_string();
    assert!(e.contains("task #1"), "{e}");
    let both = tasks_from_json(br#"[{"task_id":"a","intent":"x","instructions":"y","role":"coder"},{"task_id":"b","intent":"x","instructions":"y","role":"coder"}]"#).unwrap();
    assert_eq!(both.len(), 2);
    // The refusal is a case: the task, the field, serde's words.
    let e = tasks_from_json(br#"{"task_id":"T-3","intent":"x","instructions":"y","role":"coder","retry_policy":{"max_retries":"three"}}"#).unwrap_err();
    assert!(
        matches!(
            e,
            xo_proto::task_file::TaskFileError::Task { ref task, field: Some(ref f), .. }
                if task == "task #1 (T-3)" && f == "retry_policy.max_retries"
        ),
        "{e:?}"
    );
    assert_eq!(
        tasks_from_json(b"3").unwrap_err(),
        xo_proto::task_file::TaskFileError::NotTasks
    );
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
        budget_usd: 0.0,
        description: "ship it".into(),
        project_id: None,
        completed: true,
    })
    .unwrap();
    m.resume(EventName::Resume).unwrap();
    assert_eq!(m.status().status, RunStatus::Completed);
}

/// Runs task `a` out of its two retries (validation fails three times).
fn exhaust_retries(m: &mut Machine) {
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
        let (r, tok) = claim(m, 1).unwrap();
        assert_eq!((r.task.task_id.as_str(), r.attempt), ("a", attempt));
        let r = m.complete("a", &tok, failed(), None, 1).unwrap().0;
        assert_eq!(r.retries, attempt);
    }
    let a = &m.tasks["a"];
    assert_eq!(a.state, TaskState::Blocked);
    assert_eq!(a.cause, Some(BlockCause::Validation));
    assert!(
        a.report.as_ref().is_some_and(|r| !r.passed),
        "kept with its report"
    );
}

#[test]
fn a_task_out_of_retries_is_blocked_and_the_queue_goes_on() {
    // Seed 003, scenario 3: the blocked list grows, the next task runs.
    let mut m = running(ExecutionMode::Auto, false);
    exhaust_retries(&mut m);
    let s = m.status();
    assert_eq!(s.status, RunStatus::Running, "{:?}", s.halt_reason);
    let (b, tok) = claim(&mut m, 2).unwrap();
    assert_eq!(b.task.task_id, "b");
    let c = m.complete("b", &tok, ok(), None, 3).unwrap().1;
    // Only the blocked task is left: the list is exhausted, not the goal
    // met, and the operator is told which task waits.
    assert_eq!(c.alerts.len(), 1);
    assert_eq!(c.alerts[0].kind, xo_proto::alert::AlertKind::QueueHalted);
    assert!(
        c.alerts[0].detail.contains(": a."),
        "{}",
        c.alerts[0].detail
    );
    let s = m.status();
    assert_eq!(
        (s.status, s.halt_reason.as_deref()),
        (RunStatus::Halted, Some(TASK_LIST_EXHAUSTED_GOAL_INCOMPLETE))
    );
}

#[test]
fn the_halt_policy_is_per_cause() {
    let policy = |causes: &[BlockCause]| Policy {
        halt_on: causes.iter().copied().collect(),
        ..Policy::default()
    };
    // Validation listed: the block halts the queue.
    let mut m = running(ExecutionMode::Auto, false).with_policy(policy(&[BlockCause::Validation]));
    exhaust_retries(&mut m);
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

    // By default an agent's own BLOCKED halts, and says so in the alert.
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("x"), task("y")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    let c = m
        .block_for("x", &tok, "BLOCKED: no credentials".into(), None, None, 2)
        .unwrap()
        .1;
    assert_eq!(m.tasks["x"].cause, Some(BlockCause::AgentBlocked));
    assert_eq!(m.status().status, RunStatus::Halted);
    assert_eq!(c.alerts.len(), 1);
    assert_eq!(c.alerts[0].kind, xo_proto::alert::AlertKind::TaskBlocked);
    assert!(
        c.alerts[0].detail.contains("The queue halted"),
        "{}",
        c.alerts[0].detail
    );

    // Not listed: the same block leaves the queue running.
    let mut m = running(ExecutionMode::Auto, false).with_policy(policy(&[]));
    m.enqueue(vec![task("x"), task("y")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    m.block_for("x", &tok, "BLOCKED: no credentials".into(), None, None, 2)
        .unwrap();
    assert_eq!(m.status().status, RunStatus::Running);
    assert_eq!(claim(&mut m, 3).unwrap().0.task.task_id, "y");
}

#[test]
fn a_violation_fails_the_task_as_seed_004_errors_it() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("x")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    let c = m
        .block_for(
            "x",
            &tok,
            "supervisor violation: missing_required_sections".into(),
            None,
            None,
            2,
        )
        .unwrap()
        .1;
    let x = &m.tasks["x"];
    assert_eq!(
        (x.state, x.cause),
        (TaskState::Failed, Some(BlockCause::Violation))
    );
    assert_eq!(c.audit[0].event, EventName::TaskFailed);
    assert_eq!(m.status().status, RunStatus::Halted);
    m.retry("x", 3).unwrap();
    assert_eq!(m.tasks["x"].state, TaskState::Pending);
    // A retried task no longer shows why it stopped (the audit keeps it).
    assert_eq!(m.tasks["x"].reason, None);
    assert_eq!(m.tasks["x"].cause, None);
}

/// A lease's silence counts from the queue's own return to the bus: a
/// lease last renewed before an outage has a full `lease_ms` from the
/// return, and lapses then if nobody renews it.
#[test]
fn a_lease_does_not_lapse_for_the_queues_own_outage() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("a")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    claim(&mut m, 1_000).unwrap();
    // Renewed at 1 s; the queue heard the bus again at 40 s.
    assert!(
        m.expire_leases(69_999, 40_000).is_empty(),
        "29.999 s since the return"
    );
    let c = m.expire_leases(70_000, 40_000);
    assert_eq!(c.tasks.iter().collect::<Vec<_>>(), ["a"]);
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
        m.expire_leases(30_999, 0).is_empty(),
        "a is 1 ms short of 30 s"
    );
    let c = m.expire_leases(31_000, 0);
    assert_eq!(c.tasks.iter().collect::<Vec<_>>(), ["a"]);
    assert_eq!(m.tasks["a"].mark, Some(ReplayMark::RollbackReplay));
    m.expire_leases(50_000, 0);
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
    assert_eq!(d.before.to_value()["task"]["state"], "pending");
    assert_eq!(d.after.to_value()["task"]["state"], "running");
    assert_eq!(d.after.to_value()["task"]["claimant"], "r1");
    assert_eq!(d.after.to_value()["supervisor"]["status"], "RUNNING");
}

fn dep(id: &str, on: &[&str]) -> Task {
    Task {
        depends_on: on.iter().map(|s| s.to_string()).collect(),
        ..task(id)
    }
}

#[test]
fn dependencies_that_can_never_be_met_are_refused_at_enqueue() {
    let mut m = running(ExecutionMode::Auto, false);
    let e = m
        .enqueue(vec![dep("C-1", &["C-2"]), dep("C-2", &["C-1"])], 0)
        .unwrap_err()
        .message;
    assert!(e.contains("dependency cycle"), "{e}");
    assert!(
        e.contains("C-1 -> C-2 -> C-1") || e.contains("C-2 -> C-1 -> C-2"),
        "{e}"
    );
    let e = m
        .enqueue(
            vec![
                task("a"),
                dep("b", &["c"]),
                dep("c", &["d"]),
                dep("d", &["b"]),
            ],
            0,
        )
        .unwrap_err()
        .message;
    assert!(
        e.contains("b -> c -> d -> b")
            || e.contains("c -> d -> b -> c")
            || e.contains("d -> b -> c -> d"),
        "{e}"
    );
    assert!(m.tasks.is_empty(), "nothing of a refused batch is enqueued");
    let e = m
        .enqueue(vec![dep("b", &["ghost"])], 0)
        .unwrap_err()
        .message;
    assert!(e.contains("task b") && e.contains("ghost"), "{e}");
    m.enqueue(vec![task("a")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    m.cancel("a", 1).unwrap();
    let e = m.enqueue(vec![dep("b", &["a"])], 2).unwrap_err().message;
    assert!(e.contains("cancelled"), "{e}");
    // A dependency on a queued task, or on one later in the batch, is fine.
    m.enqueue(vec![task("x"), dep("z", &["y"]), dep("y", &["x"])], 3)
        .unwrap();
    assert_eq!(m.tasks.len(), 4);
}

/// Runners have `stale_after_ms` from the queue's own return to the bus
/// to ask for work: the queue's outage is no runner's absence.
#[test]
fn no_work_is_stuck_for_the_queues_own_outage() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("a")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    assert!(m.check_stuck(1_000, 0).is_empty(), "within the grace");
    // The queue heard the bus again at 100 s: no claim could come before.
    assert!(m.check_stuck(129_999, 100_000).is_empty());
    assert_eq!(m.status().stuck, None);
    let c = m.check_stuck(130_000, 100_000);
    assert_eq!(
        c.audit[0].event,
        EventName::QueueStuck,
        "nobody asked since the return"
    );
}

#[test]
fn pending_work_nobody_can_claim_raises_queue_stuck_and_clears() {
    let mut m = running(ExecutionMode::Auto, false);
    let r = Task {
        role: "reviewer".into(),
        ..task("r")
    };
    m.enqueue(vec![task("a"), dep("b", &["a"]), r], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    // A coder runner asks for work; no reviewer ever does.
    let (_, tok) = claim(&mut m, 1_000).unwrap();
    assert!(m.check_stuck(1_000, 0).is_empty(), "a task is running");
    m.block_for(
        "a",
        &tok,
        "out of ideas".into(),
        None,
        Some(BlockCause::Validation),
        2_000,
    )
    .unwrap();
    // Within the grace (stale_after_ms from RUNNING) the reviewer is not missed.
    assert!(m.check_stuck(2_000, 0).is_empty());
    let _ = m.claim("coder", "r1", 40_000).unwrap();
    let c = m.check_stuck(40_000, 0);
    let why = m.status().stuck.expect("stuck");
    assert!(why.starts_with("QUEUE_STUCK: "), "{why}");
    assert!(why.contains("b waits on a (blocked)"), "{why}");
    assert!(why.contains("r no runner of role \"reviewer\""), "{why}");
    assert_eq!(c.audit[0].event, EventName::QueueStuck);
    assert_eq!(c.alerts[0].kind, xo_proto::alert::AlertKind::QueueStuck);
    assert!(m.check_stuck(41_000, 0).is_empty(), "raised once");
    // A reviewer appears and the operator retries a: it can go on.
    let _ = m.claim("reviewer", "rv", 42_000).unwrap();
    m.retry("a", 42_000).unwrap();
    let c = m.check_stuck(42_000, 0);
    assert_eq!(c.audit[0].event, EventName::QueueUnstuck);
    assert_eq!(m.status().stuck, None);
}

#[test]
fn the_goal_budget_halts_with_budget_exhausted() {
    let mut m = running(ExecutionMode::Auto, false);
    m.set_goal(Goal {
        description: "ship it".into(),
        budget_usd: 1.0,
        ..Default::default()
    })
    .unwrap();
    m.enqueue(vec![task("a"), task("b")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    let usage = |c: f64| Usage {
        cost_usd: c,
        turns: 3,
        ..Default::default()
    };
    // Heartbeats report the attempt so far; only the growth counts.
    assert!(m.spend("a", &tok, usage(0.4), false).alerts.is_empty());
    assert!(m.spend("a", &tok, usage(0.6), false).alerts.is_empty());
    assert!((m.status().spent_usd - 0.6).abs() < 1e-9);
    assert_eq!(m.tasks["a"].attempt_spent.turns, 3);
    let c = m.spend("a", &tok, usage(1.2), true);
    let s = m.status();
    assert_eq!(s.status, RunStatus::Halted);
    assert!(
        s.halt_reason
            .as_deref()
            .unwrap()
            .starts_with("BUDGET_EXHAUSTED"),
        "{:?}",
        s.halt_reason
    );
    assert_eq!(
        c.alerts[0].kind,
        xo_proto::alert::AlertKind::BudgetExhausted
    );
    assert!(
        (m.tasks["a"].spent.cost_usd - 1.2).abs() < 1e-9,
        "the attempt moves into the task's total"
    );
    // A stale token spends nothing.
    assert!(m.spend("a", "not-the-token", usage(9.0), true).is_empty());
}

#[test]
fn a_task_without_a_role_gets_one_from_its_phase_or_the_default() {
    let mut m = Machine::new(
        30_000,
        ["coder", "architect", "manager"].map(String::from).into(),
    );
    m.init(ExecutionMode::Auto, false, false).unwrap();
    let ts = tasks_from_json(
        br#"[{"task_id":"d","intent":"i","instructions":"x","phase":"design"},
            {"task_id":"e","intent":"i","instructions":"x","phase":"execute"},
            {"task_id":"r","intent":"i","instructions":"x","phase":"review"},
            {"task_id":"n","intent":"i","instructions":"x"}]"#,
    )
    .unwrap();
    m.enqueue(ts, 0).unwrap();
    let role = |id: &str| m.tasks[id].task.role.clone();
    assert_eq!(
        (role("d"), role("e"), role("r"), role("n")),
        (
            "architect".into(),
            "coder".into(),
            "architect".into(),
            "coder".into()
        )
    );
}

#[test]
fn a_manager_reply_cancels_only_pending_tasks_it_was_shown() {
    let mut m = running(ExecutionMode::Auto, true);
    // More pending work than the Manager's prompt budget holds.
    let long = "x".repeat(100);
    let tasks: Vec<Task> = (0..400)
        .map(|i| Task {
            intent: format!("step {i} {long}"),
            ..task(&format!("p{i:03}"))
        })
        .collect();
    m.enqueue(tasks, 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    m.complete("p000", &tok, ok(), None, 1).unwrap();
    let (mr, mtok) = m.claim("manager", "mgr", 2).unwrap().0.unwrap();
    let shown = mr.shown.clone().unwrap();
    let (text, _) = m.manager_view("manager-p000");
    assert!(text.len() <= xo_queue::machine::MANAGER_LIST_BUDGET + 2_000);
    assert!(
        text.contains("more tasks not shown for length: they are kept"),
        "{text}"
    );
    assert!(shown.len() < 399 && !shown.is_empty(), "{}", shown.len());
    // The reply keeps one shown task, names a bad id: refused, nothing changes.
    let bad =
        serde_json::json!({"status": "ok", "message": "m", "next_task": null, "keep": ["ghost"]});
    let r = m
        .complete("manager-p000", &mtok, ok(), Some(bad), 3)
        .unwrap()
        .0;
    assert_eq!(
        r.state,
        TaskState::Pending,
        "a reply naming an unknown task is retried"
    );
    let (_, mtok) = m.claim("manager", "mgr", 4).unwrap().0.unwrap();
    let keep = shown[0].clone();
    let reply =
        serde_json::json!({"status": "ok", "message": "m", "next_task": keep, "keep": [keep]});
    let c = m
        .complete("manager-p000", &mtok, ok(), Some(reply), 5)
        .unwrap()
        .1;
    let pending = |m: &Machine| {
        m.tasks
            .values()
            .filter(|t| t.state == TaskState::Pending)
            .count()
    };
    // The shown tasks but the kept one are cancelled; the unshown stay.
    assert_eq!(pending(&m), 399 - (shown.len() - 1));
    assert_eq!(m.tasks[&keep].state, TaskState::Pending);
    let rec = c
        .audit
        .iter()
        .find(|d| d.event == EventName::ManagerReconciled)
        .unwrap();
    assert_eq!(
        rec.after.to_value()["cancelled"].as_array().unwrap().len(),
        shown.len() - 1
    );
}

#[test]
fn tasks_a_manager_was_shown_wait_for_its_reply() {
    let mut m = running(ExecutionMode::Auto, true);
    m.enqueue(vec![task("a"), task("b"), task("c")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    m.complete("a", &tok, ok(), None, 1).unwrap();
    let (mr, mtok) = m.claim("manager", "mgr", 2).unwrap().0.unwrap();
    assert_eq!(
        mr.shown.as_deref(),
        Some(&["b".to_string(), "c".to_string()][..])
    );
    // The race of seed 002's loop: a coder asks while the Manager works.
    assert!(claim(&mut m, 3).is_none(), "b and c wait for the Manager");
    assert!(m.held_by_manager("b") && m.held_by_manager("c"));
    // Work enqueued after the Manager's list was built is not held.
    m.enqueue(vec![task("d")], 3).unwrap();
    let (d, dtok) = claim(&mut m, 4).unwrap();
    assert_eq!(d.task.task_id, "d");
    // Nobody can claim b or c, yet work is in flight: not stuck.
    assert!(m.check_stuck(60_000, 0).is_empty());
    // A reply refused for its format: the Manager retries, the hold stays.
    let bad = serde_json::json!({"status": "fine", "message": "x", "tasks": []});
    m.complete("manager-a", &mtok, ok(), Some(bad), 5).unwrap();
    assert_eq!(m.tasks["manager-a"].state, TaskState::Pending);
    assert!(
        claim(&mut m, 6).is_none(),
        "still waiting for a valid reply"
    );
    let (_, mtok) = m.claim("manager", "mgr", 7).unwrap().0.unwrap();
    assert!(m.held_by_manager("b"));
    // The reply drops b: it never ran.
    let reply = serde_json::json!({"status": "ok", "message": "b is obsolete", "next_task": "c", "keep": ["c"]});
    m.complete("manager-a", &mtok, ok(), Some(reply), 8)
        .unwrap();
    assert!(!m.held_by_manager("b") && !m.held_by_manager("c"));
    assert_eq!(m.tasks["b"].state, TaskState::Cancelled);
    assert_eq!(m.tasks["b"].attempt, 0, "the dropped task never ran");
    assert_eq!(claim(&mut m, 9).unwrap().0.task.task_id, "c");
    m.complete("d", &dtok, ok(), None, 10).unwrap();
}

#[test]
fn a_manager_that_cannot_be_served_leaves_the_queue_stuck_on_its_role() {
    let mut m = running(ExecutionMode::Auto, true);
    m.enqueue(vec![task("a"), task("b")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    m.complete("a", &tok, ok(), None, 1).unwrap();
    assert!(m.claim("manager", "mgr", 2).unwrap().0.is_some());
    // The Manager's lease runs out (its runner died): b stays held while the
    // Manager task waits, and the stuck check names the manager role.
    m.expire_leases(2 + 30_001, 0);
    assert_eq!(m.tasks["manager-a"].state, TaskState::Pending);
    assert!(claim(&mut m, 40_000).is_none());
    let _ = m.check_stuck(40_000, 0);
    let c = m.check_stuck(200_000, 0);
    assert!(!c.is_empty());
    let why = m.status().stuck.unwrap();
    assert!(why.contains("\"manager\""), "{why}");
    assert!(!why.contains("b no runner"), "{why}");
}

fn in_lane(id: &str, lane: Lane, project: Option<&str>) -> Task {
    Task {
        lane,
        project: project.map(String::from),
        ..task(id)
    }
}

#[test]
fn a_critical_task_interrupts_the_latest_lower_lane_task_of_its_scope() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(
        vec![
            in_lane("f", Lane::Functional, None),
            in_lane("p", Lane::Planned, None),
            in_lane("other", Lane::Cleanup, Some("elsewhere")),
        ],
        0,
    )
    .unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, _ftok) = claim(&mut m, 1).unwrap();
    let (_, ptok) = m.claim("coder", "r2", 2).unwrap().0.unwrap();
    let (_, _otok) = m.claim("coder", "r3", 3).unwrap().0.unwrap();
    assert!(m.interrupts(4).is_empty(), "no critical work: no interrupt");
    // A critical task for the goal's project (p1), as a directive makes it.
    m.enqueue(vec![in_lane("crit", Lane::Critical, None)], 5)
        .unwrap();
    let c = m.interrupts(6);
    // The planned task yields (lower lane than the functional one); the
    // cleanup task is of another project: out of scope.
    assert_eq!(c.audit.len(), 1, "{:?}", c.audit);
    assert_eq!(c.audit[0].event, EventName::TaskInterrupted);
    assert_eq!(c.audit[0].task_id.as_deref(), Some("p"));
    assert_eq!(c.audit[0].after.to_value()["interrupt"], "crit");
    assert_eq!(m.tasks["p"].interrupt.as_deref(), Some("crit"));
    assert!(
        m.interrupts(7).is_empty(),
        "one task yields per critical task"
    );
    // Its holder gives it back: pending, continued later, not a retry.
    let (r, c) = m.yield_task("p", &ptok, false, "agent stopped", 8).unwrap();
    assert_eq!(c.audit[0].event, EventName::TaskYielded);
    assert_eq!(c.audit[0].after.to_value()["yielded_to"], "crit");
    assert_eq!((r.state, r.retries), (TaskState::Pending, 0));
    assert_eq!(r.mark, Some(ReplayMark::Continue));
    assert_eq!(r.interrupt, None);
    // The critical task goes first, then the yielded one.
    assert_eq!(claim(&mut m, 9).unwrap().0.task.task_id, "crit");
    let (again, _) = claim(&mut m, 10).unwrap();
    assert_eq!((again.task.task_id.as_str(), again.attempt), ("p", 2));
    assert!(m.interrupts(11).is_empty());
}

#[test]
fn a_checkpointed_task_that_yields_resumes_and_a_finished_one_is_not_asked_again() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("a")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    // A critical task whose dependency is not done interrupts nothing.
    let mut crit = in_lane("crit", Lane::Critical, None);
    crit.depends_on = vec!["a".into()];
    m.enqueue(vec![crit, in_lane("crit2", Lane::Critical, None)], 2)
        .unwrap();
    m.interrupts(3);
    assert_eq!(m.tasks["a"].interrupt.as_deref(), Some("crit2"));
    // The task completes before its runner yields: the ask ends with it.
    m.complete("a", &tok, ok(), None, 4).unwrap();
    assert_eq!(m.tasks["a"].interrupt, None);
    assert!(
        m.yield_task("a", &tok, true, "late", 5).is_err(),
        "a finished task cannot be given back"
    );
    // Both critical tasks run; then b, which a third one interrupts once
    // the queue runs again (halted, nothing is interrupted).
    m.enqueue(vec![task("b")], 6).unwrap();
    let order: Vec<String> = ["r1", "r2", "r3"]
        .iter()
        .map(|u| m.claim("coder", u, 7).unwrap().0.unwrap().0.task.task_id)
        .collect();
    assert_eq!(order, ["crit", "crit2", "b"]);
    m.enqueue(vec![in_lane("crit3", Lane::Critical, None)], 8)
        .unwrap();
    m.halt("operator".into()).unwrap();
    assert!(m.interrupts(9).is_empty());
    m.resume(EventName::Resume).unwrap();
    assert!(!m.interrupts(10).is_empty());
    let btok = m.tasks["b"].lease.clone().unwrap().token;
    // Its agent left a checkpoint: resumed, its artifacts validated first.
    let (r, _) = m
        .yield_task("b", &btok, true, "at its checkpoint", 11)
        .unwrap();
    assert_eq!(r.mark, Some(ReplayMark::Resume));
}

/// Issue 39, item 3 (seed 003): a reply still in the wrong format after its
/// retries (`OUTPUT_FORMAT_INVALID`) is critical and halts the queue by
/// default; a task out of validation retries does not (scenario 3, above).
#[test]
fn an_output_format_still_invalid_after_its_retries_halts_the_queue() {
    let mut m = running(ExecutionMode::Auto, false);
    m.enqueue(vec![task("a"), task("b")], 0).unwrap();
    m.resume(EventName::Start).unwrap();
    let (_, tok) = claim(&mut m, 1).unwrap();
    m.block(
        "a",
        &tok,
        "OUTPUT_FORMAT_INVALID: no JSON object in the reply after 3 retries".into(),
        None,
        2,
    )
    .unwrap();
    assert_eq!(m.tasks["a"].cause, Some(BlockCause::OutputFormat));
    let s = m.status();
    assert_eq!(s.status, RunStatus::Halted, "{s:?}");
    assert!(
        s.halt_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("TASK_BLOCKED: a: OUTPUT_FORMAT_INVALID")),
        "{s:?}"
    );
    assert!(claim(&mut m, 3).is_none(), "halted: b waits");
}
