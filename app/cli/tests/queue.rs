//! The durable queue over a real nats-server: claims, leases, restarts,
//! concurrency, corruption, bad input, audit.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use xo_bus::{Bus, Store, typed};
use xo_fabric::Slot;
use xo_proto::Subjects;
use xo_proto::control::ErrorCode;
use xo_proto::queue::*;
use xo_queue::QueueHandle;
use xo_runtime::Clock;
use xo_tests::NatsServer;
use xo_tests::sandbox::{EPOCH, Sandbox, Started};

const T: Duration = Duration::from_secs(30);

/// The queue on a sandbox over NATS, on a manual clock, stopped and
/// started again by the tests.
struct Q {
    sb: Sandbox,
    client: Bus,
    subjects: Subjects,
    clock: Clock,
    queue: Option<Started>,
}

impl Q {
    async fn start(overrides: &[(&str, &str)]) -> Self {
        let sb = Sandbox::nats().with(overrides).build().await;
        let mut q = Self {
            client: sb.bus.clone(),
            subjects: sb.subjects.clone(),
            clock: sb.clock.clone(),
            sb,
            queue: None,
        };
        q.start_queue().await;
        q
    }

    /// The queue's store, read as another process would.
    async fn store(&self) -> Store {
        self.sb.store_for("xo-queue-reader").await
    }

    /// Where the queue writes its audit log.
    fn data(&self) -> PathBuf {
        self.sb.cfg.data_dir()
    }

    fn handle(&self) -> &QueueHandle {
        self.sb.queue()
    }

    fn nats(&mut self) -> &mut NatsServer {
        self.sb.nats.as_mut().expect("on NATS")
    }

    async fn start_queue(&mut self) {
        self.queue = Some(self.sb.start(&[Slot::Queue]).await);
    }

    async fn stop_queue(&mut self) {
        if let Some(q) = self.queue.take() {
            self.sb.stop(q).await.unwrap();
        }
    }

    async fn call<R: xo_proto::Request>(&self, r: &R) -> Result<R::Response, typed::CallError> {
        self.sb.call(r).await
    }

    async fn ready(&self, n: usize, manager: bool) -> Vec<String> {
        self.call(&Init {
            by: Default::default(),
            mode: ExecutionMode::Auto,
            manager,
            force: false,
        })
        .await
        .unwrap();
        self.call(&SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "g".into(),
            project_id: Some("p1".into()),
            completed: true,
        })
        .await
        .unwrap();
        let tasks: Vec<Task> = (0..n).map(|i| task(&format!("t{i:03}"))).collect();
        let ids = self.call(&Enqueue::new(tasks)).await.unwrap();
        self.call(&Start::default()).await.unwrap();
        ids
    }
}

fn task(id: &str) -> Task {
    xo_queue::machine::tasks_from_json(
        format!(r#"{{"task_id":"{id}","intent":"do {id}","instructions":"do it","role":"coder"}}"#)
            .as_bytes(),
    )
    .unwrap()
    .remove(0)
}

fn ok() -> ValidationReport {
    ValidationReport {
        passed: true,
        summary: "ok".into(),
        ..Default::default()
    }
}

async fn claim(q: &Q, who: &str) -> Option<Claimed> {
    q.call(&Claim {
        role: "coder".into(),
        claimant: who.into(),
        wait_ms: 0,
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_goal_runs_to_completed_with_an_intact_audit() {
    let q = Q::start(&[]).await;
    let ids = q.ready(20, false).await;
    assert_eq!(ids.len(), 20);
    let mut events = q
        .client
        .subscribe(&q.subjects.task_event("*"))
        .await
        .unwrap();
    q.client.flush().await.unwrap();
    while let Some(c) = claim(&q, "r1").await {
        let r = q
            .call(&Complete {
                usage: Default::default(),
                task_id: c.record.task.task_id.clone(),
                token: c.token,
                claimant: String::new(),
                report: ok(),
                manager_reply: None,
                exchange: None,
                diff: None,
            })
            .await
            .unwrap();
        assert_eq!(r.state, TaskState::Completed);
    }
    let s = q.call(&GetStatus {}).await.unwrap();
    assert_eq!(
        (s.status, s.iteration, s.counts["completed"]),
        (RunStatus::Completed, 20, 20)
    );
    let e = tokio::time::timeout(T, events.next())
        .await
        .unwrap()
        .unwrap();
    let e: TaskEvent = typed::decode(&e, usize::MAX).unwrap();
    assert_eq!(
        (e.event.as_str(), e.state),
        ("TASK_START", TaskState::Running)
    );

    let file = xo_queue::audit::file_for(&q.data(), "p1");
    assert_eq!(
        xo_queue::audit::verify(&file).unwrap(),
        xo_queue::audit::Verdict::Intact { lines: 63 }
    );
    // 1 goal + 20 enqueue + 1 start + 20 start + 20 complete + 1 completed = 63
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.matches("\"TASK_COMPLETE\"").count(), 20);
    // The same records are in the JetStream log.
    let log = q
        .store()
        .await
        .read(xo_queue::AUDIT_LOG, 1, 1000)
        .await
        .unwrap();
    assert!(log.len() >= 63, "{}", log.len());
    // And the file is the same as the JetStream copy, line for line.
    let store = q.store().await;
    let c = xo_queue::audit::check(&store, &q.data(), "p1")
        .await
        .unwrap();
    assert!(c.intact, "{c:?}");
    assert_eq!((c.lines, c.store_lines), (63, Some(63)), "{c:?}");
    // Tampering with a line breaks the chain there.
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    assert!(lines[9].contains("\"seq\":10,"));
    lines[9] = lines[9].replace("\"seq\":10,", "\"seq\":99,");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    match xo_queue::audit::verify(&file).unwrap() {
        xo_queue::audit::Verdict::Broken { line, .. } => {
            assert_eq!(line, 11, "the line after the edited one")
        }
        v => panic!("{v:?}"),
    }
}

/// A queue killed between its audit file's append and the store copy's
/// (the line is in the file, not in the copy): the next instance ships
/// what the copy lacks before it writes, so the copy stays the file's,
/// line for line, and the chain goes on from the file's last line.
#[tokio::test]
async fn lines_the_store_copy_lacks_are_shipped_before_the_next_write() {
    let mut q = Q::start(&[]).await;
    q.ready(2, false).await;
    q.stop_queue().await;
    let file = xo_queue::audit::file_for(&q.data(), "p1");
    let text = std::fs::read_to_string(&file).unwrap();
    let last = text.lines().last().unwrap();
    let mut ev: AuditEvent = serde_json::from_str(last).unwrap();
    ev.seq += 1;
    ev.prev = xo_queue::audit::hash_line(last.as_bytes());
    ev.task_id = Some("t000".into());
    let killed_after_the_file = serde_json::to_string(&ev).unwrap();
    std::fs::write(&file, format!("{text}{killed_after_the_file}\n")).unwrap();
    let store = q.store().await;
    let before = xo_queue::audit::check(&store, &q.data(), "p1")
        .await
        .unwrap();
    assert_eq!(before.unshipped, 1, "{before:?}");
    q.start_queue().await;
    // The next write: a claim starts t000.
    claim(&q, "u1").await.expect("a task");
    let after = xo_queue::audit::check(&store, &q.data(), "p1")
        .await
        .unwrap();
    assert!(after.intact, "{after:?}");
    assert_eq!(after.store_lines, Some(after.lines), "{after:?}");
    assert_eq!(after.lines, before.lines + 1, "the claim's line after it");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains(&killed_after_the_file)
    );
}

#[tokio::test]
async fn a_silent_claimant_loses_its_lease_to_the_next() {
    let q = Q::start(&[("queue.lease_ms", "30000")]).await;
    q.ready(1, false).await;
    let first = claim(&q, "r1").await.unwrap();
    assert_eq!(first.record.attempt, 1);
    assert!(claim(&q, "r2").await.is_none(), "leased");
    q.clock.advance(Duration::from_millis(29_999));
    q.handle().tick().await;
    assert!(claim(&q, "r2").await.is_none(), "29.999 s is not stale");
    q.clock.advance(Duration::from_millis(1));
    q.handle().tick().await;
    let second = claim(&q, "r2").await.expect("offered again");
    assert_eq!(
        (second.record.attempt, second.record.mark),
        (2, Some(ReplayMark::RollbackReplay))
    );
    let err = q
        .call(&Complete {
            usage: Default::default(),
            task_id: "t000".into(),
            token: first.token,
            claimant: String::new(),
            report: ok(),
            manager_reply: None,
            exchange: None,
            diff: None,
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lease lost"), "{err}");
    q.call(&Complete {
        usage: Default::default(),
        task_id: "t000".into(),
        token: second.token,
        claimant: String::new(),
        report: ok(),
        manager_reply: None,
        exchange: None,
        diff: None,
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn heartbeats_keep_a_lease_and_long_polls_get_new_work() {
    let q = Q::start(&[("queue.lease_ms", "30000")]).await;
    q.ready(1, false).await;
    let c = claim(&q, "r1").await.unwrap();
    for _ in 0..3 {
        q.clock.advance(Duration::from_secs(20));
        q.call(&Heartbeat {
            usage: Default::default(),
            task_id: "t000".into(),
            token: c.token.clone(),
            claimant: String::new(),
            checkpoint: false,
        })
        .await
        .unwrap();
        q.handle().tick().await;
    }
    assert!(claim(&q, "r2").await.is_none(), "renewed for 60 s");
    // A long-polling claimant gets work enqueued after it asked.
    let (client, subjects) = (q.client.clone(), q.subjects.clone());
    let waiting = tokio::spawn(async move {
        typed::call(
            &client,
            &subjects,
            &Claim {
                role: "coder".into(),
                claimant: "r3".into(),
                wait_ms: 3_600_000,
            },
            T * 2,
        )
        .await
    });
    // Enqueued once the claim waits (the queue lists it), not after a
    // guess at how long the request takes to arrive.
    xo_tests::until("r3's claim waits", async || {
        let st = q.call(&GetStatus::default()).await.unwrap();
        (st.waiting_claims == ["r3"]).then_some(())
    })
    .await;
    q.call(&Enqueue::new(vec![task("late")])).await.unwrap();
    let got = waiting.await.unwrap().unwrap().expect("a task");
    assert_eq!(got.record.task.task_id, "late");
}

/// A claimant that gave up its long-poll claim (its call timed out, its
/// runner restarted under the same unit) and asks again gets the next
/// task: the claim it left waiting is forgotten, not handed the task to
/// sit leased to nobody until the lease runs out.
#[tokio::test]
async fn a_claimant_asking_again_gets_the_task_not_the_claim_it_gave_up() {
    let q = Q::start(&[]).await;
    // A run under way (its one task held by another runner), nothing left.
    q.ready(1, false).await;
    assert!(claim(&q, "r0").await.is_some());
    let long = |who: &str| Claim {
        role: "coder".into(),
        claimant: who.into(),
        wait_ms: 3_600_000,
    };
    // Given up: the call is sent, then dropped by its side.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        typed::call(&q.client, &q.subjects, &long("r9"), T),
    )
    .await;
    assert!(gave_up.is_err(), "nothing to claim yet: it waits");
    // Asked again, then a task enqueued. On one connection the queue reads
    // them in the order sent: the new claim before the task.
    let again = long("r9");
    let (again, _) = tokio::join!(typed::call(&q.client, &q.subjects, &again, T * 2), async {
        tokio::task::yield_now().await;
        q.call(&Enqueue::new(vec![task("next")])).await.unwrap()
    });
    let got = again
        .unwrap()
        .expect("the task, to the claim still waiting");
    assert_eq!(got.record.task.task_id, "next");
    assert_eq!(got.record.lease.map(|l| l.claimant).as_deref(), Some("r9"));
}

/// A claimant shutting down withdraws the claim it left waiting: the
/// claim is answered with nothing, `xo status` no longer lists it, and the
/// next task goes to a claimant that is there.
#[tokio::test]
async fn a_withdrawn_claim_gets_no_task_and_the_next_claimant_does() {
    let q = Q::start(&[]).await;
    q.ready(1, false).await;
    assert!(claim(&q, "r0").await.is_some());
    let long = Claim {
        role: "coder".into(),
        claimant: "r9".into(),
        wait_ms: 3_600_000,
    };
    let waiting = tokio::spawn({
        let (client, subjects) = (q.client.clone(), q.subjects.clone());
        async move { typed::call(&client, &subjects, &long, T * 2).await }
    });
    let status = || async { q.call(&GetStatus::default()).await.unwrap() };
    xo_tests::until("r9's claim waits", async || {
        (status().await.waiting_claims == ["r9"]).then_some(())
    })
    .await;
    let withdrawn = q
        .call(&Withdraw {
            claimant: "r9".into(),
        })
        .await
        .unwrap();
    assert_eq!(withdrawn, 1);
    assert_eq!(
        waiting.await.unwrap().unwrap(),
        None,
        "answered with nothing"
    );
    assert!(status().await.waiting_claims.is_empty());
    // Nothing to withdraw any more: said, not refused.
    let again = Withdraw {
        claimant: "r9".into(),
    };
    assert_eq!(q.call(&again).await.unwrap(), 0);
    q.call(&Enqueue::new(vec![task("next")])).await.unwrap();
    let got = claim(&q, "r1")
        .await
        .expect("the task, to a claimant that is there");
    assert_eq!(got.record.task.task_id, "next");
}

/// A claim still waiting when the queue stops is answered (the queue
/// dropped it: the runner asks again), not left for its caller to time
/// out: the wait for a request's answer outlives the serve loop that read
/// the request.
#[tokio::test]
async fn a_claim_waiting_as_the_queue_stops_is_answered() {
    let mut q = Q::start(&[]).await;
    q.ready(1, false).await;
    assert!(claim(&q, "r0").await.is_some());
    let waiting = tokio::spawn({
        let (client, subjects) = (q.client.clone(), q.subjects.clone());
        let long = Claim {
            role: "coder".into(),
            claimant: "r9".into(),
            wait_ms: 3_600_000,
        };
        async move { typed::call(&client, &subjects, &long, T * 2).await }
    });
    xo_tests::until("r9's claim waits", async || {
        let st = q.call(&GetStatus::default()).await.unwrap();
        (st.waiting_claims == ["r9"]).then_some(())
    })
    .await;
    q.stop_queue().await;
    match waiting.await.unwrap() {
        Err(typed::CallError::Service(e)) => {
            assert_eq!(e.code, ErrorCode::Internal, "{e}");
            assert!(
                e.message.contains("dropped the request without answering"),
                "{e}"
            );
        }
        other => panic!("answered by the stopping queue, not left to time out: {other:?}"),
    }
}

#[tokio::test]
async fn thirty_two_concurrent_claimants_never_share_a_task() {
    let q = Q::start(&[]).await;
    q.ready(400, false).await;
    let mut all = Vec::new();
    let mut joins = Vec::new();
    for i in 0..32 {
        let (client, subjects) = (q.sb.connect(&format!("r{i}")).await, q.subjects.clone());
        joins.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let c = typed::call(
                    &client,
                    &subjects,
                    &Claim {
                        role: "coder".into(),
                        claimant: format!("r{i}"),
                        wait_ms: 0,
                    },
                    T,
                )
                .await
                .unwrap();
                let Some(c) = c else { break };
                mine.push(c.record.task.task_id.clone());
                typed::call(
                    &client,
                    &subjects,
                    &Complete {
                        usage: Default::default(),
                        task_id: c.record.task.task_id,
                        token: c.token,
                        claimant: String::new(),
                        report: ok(),
                        manager_reply: None,
                        exchange: None,
                        diff: None,
                    },
                    T,
                )
                .await
                .unwrap();
            }
            mine
        }));
    }
    for j in joins {
        all.extend(j.await.unwrap());
    }
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        (all.len(), unique.len()),
        (400, 400),
        "every task claimed exactly once"
    );
}

#[tokio::test]
async fn the_queue_survives_a_nats_server_restart() {
    let mut q = Q::start(&[]).await;
    q.ready(10, false).await;
    let c = claim(&q, "r1").await.unwrap();
    q.nats().restart();
    // Both sides reconnect by themselves; keep asking until they have.
    let done = xo_tests::within(xo_tests::HANG_GUARD, async || {
        let req = Complete {
            usage: Default::default(),
            task_id: c.record.task.task_id.clone(),
            token: c.token.clone(),
            claimant: String::new(),
            report: ok(),
            manager_reply: None,
            exchange: None,
            diff: None,
        };
        // A request sent while the client reconnects is lost: ask again.
        typed::call(&q.client, &q.subjects, &req, Duration::from_secs(1))
            .await
            .ok()
    })
    .await;
    assert_eq!(done.expect("reconnected").state, TaskState::Completed);
    let mut n = 1;
    while let Some(c) = claim(&q, "r1").await {
        q.call(&Complete {
            usage: Default::default(),
            task_id: c.record.task.task_id,
            token: c.token,
            claimant: String::new(),
            report: ok(),
            manager_reply: None,
            exchange: None,
            diff: None,
        })
        .await
        .unwrap();
        n += 1;
    }
    assert_eq!(n, 10);
    // State written before the restart is in JetStream: a new queue sees it all.
    q.stop_queue().await;
    q.start_queue().await;
    let s = q.call(&GetStatus {}).await.unwrap();
    assert_eq!(
        (s.status, s.counts["completed"]),
        (RunStatus::Completed, 10)
    );
}

#[tokio::test]
async fn corrupt_records_are_named_and_the_rest_is_served() {
    let mut q = Q::start(&[]).await;
    q.ready(3, false).await;
    q.stop_queue().await;
    q.store()
        .await
        .put(
            xo_queue::BUCKET,
            "task.t001",
            Bytes::from_static(b"\x00garbage"),
        )
        .await
        .unwrap();
    q.start_queue().await;
    let s = q.call(&GetStatus {}).await.unwrap();
    assert_eq!(s.corrupt.len(), 1);
    assert!(
        s.corrupt[0].starts_with("queue/task.t001:"),
        "{:?}",
        s.corrupt
    );
    assert_eq!(s.counts["pending"], 2);
    let raw = q
        .store()
        .await
        .get(xo_queue::BUCKET, "task.t001")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        &raw.value[..],
        b"\x00garbage",
        "left untouched for the operator"
    );
}

#[tokio::test]
async fn bad_tasks_over_the_wire_enqueue_nothing() {
    let q = Q::start(&[]).await;
    q.ready(0, false).await;
    let bad = Task {
        role: "wizard".into(),
        ..task("w1")
    };
    let err = q
        .call(&Enqueue::new(vec![task("fine"), bad]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("task w1") && err.contains("role \"wizard\""),
        "{err}"
    );
    let abs = Task {
        required_artifacts: vec!["/etc/passwd".into()],
        ..task("w2")
    };
    let err = q
        .call(&Enqueue::new(vec![abs]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("task w2: required_artifacts \"/etc/passwd\" is absolute"),
        "{err}"
    );
    assert!(
        q.call(&ListTasks {
            after_seq: 0,
            limit: 0,
            task_id: None,
            state: None
        })
        .await
        .unwrap()
        .is_empty()
    );
}

#[tokio::test]
async fn a_question_survives_a_restart_and_is_answered() {
    let mut q = Q::start(&[]).await;
    q.ready(1, false).await;
    let c = claim(&q, "r1").await.unwrap();
    q.call(&Block {
        cause: None,
        usage: Default::default(),
        task_id: "t000".into(),
        token: c.token,
        claimant: String::new(),
        reason: "ambiguous".into(),
        question: Some("which db?".into()),
        report: None,
        exchange: None,
    })
    .await
    .unwrap();
    q.stop_queue().await;
    q.start_queue().await;
    let list = q
        .call(&ListTasks {
            after_seq: 0,
            limit: 0,
            task_id: None,
            state: Some(TaskState::AwaitingResponse),
        })
        .await
        .unwrap();
    assert_eq!(list[0].question.as_deref(), Some("which db?"));
    q.call(&Answer {
        by: Default::default(),
        task_id: "t000".into(),
        text: "postgres".into(),
    })
    .await
    .unwrap();
    let again = claim(&q, "r2").await.unwrap();
    assert_eq!(again.record.answer.as_deref(), Some("postgres"));
}

/// Seed 003's status: `last_updated` moves with every status change (and
/// survives a restart); `halt_details` is the halt reason after its code.
#[tokio::test]
async fn the_status_says_when_it_changed_and_why_it_halted() {
    let mut q = Q::start(&[]).await;
    q.ready(1, false).await;
    let s = q.call(&GetStatus {}).await.unwrap();
    assert_eq!(s.last_updated, xo_runtime::clock::rfc3339(EPOCH));
    assert_eq!(s.halt_details, None);
    // The agent's own BLOCKED halts the queue with a coded reason.
    q.clock.advance(Duration::from_secs(90));
    let c = claim(&q, "r1").await.unwrap();
    q.call(&Block {
        task_id: c.record.task.task_id.clone(),
        token: c.token,
        claimant: "r1".into(),
        reason: "BLOCKED: needs a database password".into(),
        question: None,
        cause: None,
        usage: Default::default(),
        report: None,
        exchange: None,
    })
    .await
    .unwrap();
    let s = q.call(&GetStatus {}).await.unwrap();
    assert_eq!(s.status, RunStatus::Halted);
    assert_eq!(s.last_updated, xo_runtime::clock::rfc3339(EPOCH + 90_000));
    assert!(s.last_updated.ends_with('Z'), "{}", s.last_updated);
    assert_eq!(
        s.halt_reason.as_deref(),
        Some("TASK_BLOCKED: t000: BLOCKED: needs a database password")
    );
    assert_eq!(
        s.halt_details.as_deref(),
        Some("t000: BLOCKED: needs a database password")
    );
    // An operator's words have no code: no details to split off. The
    // reply to a change carries the time it is stored with.
    q.clock.advance(Duration::from_secs(30));
    let resumed = q.call(&Resume::default()).await.unwrap();
    assert_eq!(
        resumed.last_updated,
        xo_runtime::clock::rfc3339(EPOCH + 120_000)
    );
    q.clock.advance(Duration::from_secs(30));
    let halted = q
        .call(&Halt {
            by: Default::default(),
            reason: "lunch".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        halted.last_updated,
        xo_runtime::clock::rfc3339(EPOCH + 150_000)
    );
    let s = q.call(&GetStatus {}).await.unwrap();
    assert_eq!(
        (s.halt_reason.as_deref(), s.halt_details),
        (Some("lunch"), None)
    );
    assert_eq!(s.last_updated, halted.last_updated);
    // The HALT line's state after holds that time; before, the previous one.
    let audit = q
        .call(&AuditTail {
            project: None,
            lines: None,
        })
        .await
        .unwrap();
    let line = audit.iter().rev().find(|a| a.event == "HALT").unwrap();
    assert_eq!(
        line.state_after["last_updated"],
        halted.last_updated.as_str()
    );
    assert_eq!(
        line.state_before["last_updated"],
        resumed.last_updated.as_str()
    );
    q.stop_queue().await;
    q.start_queue().await;
    let s = q.call(&GetStatus {}).await.unwrap();
    assert_eq!(s.last_updated, xo_runtime::clock::rfc3339(EPOCH + 150_000));
}

/// Issue 39, item 3: a task whose `agent_mode` the runners' driver cannot
/// pass on (a plain command agent with no model option) is refused at
/// enqueue, whole, naming the task and the driver; `auto` always goes, and
/// a driver that takes a mode (Claude Code's `--model`) takes the task.
#[tokio::test]
async fn a_mode_the_driver_cannot_pass_on_is_refused_at_enqueue() {
    let q = Q::start(&[
        ("runner.driver.kind", "command"),
        ("runner.driver.command[0]", "my-agent"),
        ("runner.driver.stream", "none"),
    ])
    .await;
    q.call(&Init::default()).await.unwrap();
    let with_mode = |id: &str, mode: &str| {
        let mut t = Task::new(id, "x", "y", "coder");
        t.agent_mode = Some(mode.into());
        t
    };
    let err = q
        .call(&Enqueue::new(vec![
            with_mode("a", "auto"),
            with_mode("b", "opus"),
        ]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("task b: agent_mode \"opus\" cannot reach its agent")
            && err.contains("runner.driver.stream"),
        "{err}"
    );
    let listed = q.call(&ListTasks::default()).await.unwrap();
    assert!(listed.is_empty(), "refused whole: {listed:?}");
    q.call(&Enqueue::new(vec![with_mode("a", "auto")]))
        .await
        .unwrap();
    drop(q);

    let q = Q::start(&[
        ("runner.driver.kind", "command"),
        ("runner.driver.command[0]", "claude"),
        ("runner.driver.stream", "claude"),
    ])
    .await;
    q.call(&Init::default()).await.unwrap();
    q.call(&Enqueue::new(vec![with_mode("b", "opus")]))
        .await
        .unwrap();
}
