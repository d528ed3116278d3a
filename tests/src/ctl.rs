//! Control calls to a queue that may be down for a moment (killed,
//! restarting, failing over): one call, or retries until it answers.

use std::time::Duration;

use xo_bus::{Bus, Client, typed};
use xo_proto::queue::{GetStatus, QueueStatus, RunStatus, Task, TaskRecord};

/// A client of the default deployment's services on `bus`, its calls
/// waiting at most `timeout`.
pub fn client(bus: &Bus, timeout: Duration) -> Client {
    Client::new(bus.clone(), xo_proto::Subjects::default()).with_timeout(timeout)
}

/// One call with the default subjects and a 2 s timeout.
pub async fn call<R: xo_proto::Request>(bus: &Bus, r: &R) -> Result<R::Response, typed::CallError> {
    client(bus, Duration::from_secs(2)).call(r).await
}

/// One call with the default subjects and a 3 s timeout: its answer, or
/// nothing (for a test that asks again until it is what it waits for).
pub async fn ask<R: xo_proto::Request>(bus: &Bus, r: &R) -> Option<R::Response> {
    client(bus, Duration::from_secs(3)).call(r).await.ok()
}

/// Retries while nothing answers (a queue restarting, failing over);
/// panics after the harness's hang guard.
pub async fn must<R: xo_proto::Request>(bus: &Bus, r: &R) -> R::Response
where
    R::Response: serde::de::DeserializeOwned,
{
    crate::until("the queue answered", async || call(bus, r).await.ok()).await
}

/// Waits until task `id`'s record satisfies `ok`, told by the task's own
/// events (`xo.event.task.<id>`: the queue publishes one for each change
/// of a task): it looks once, then again on each event, and never sleeps.
/// Panics, with the record as it last was, if no event comes within the
/// harness's hang guard.
pub async fn task_reaches(
    client: &Client,
    id: &str,
    what: &str,
    ok: impl Fn(&TaskRecord) -> bool,
) -> TaskRecord {
    use xo_proto::queue::ListTasks;
    let subject = client.subjects().task_event(id);
    let mut events = client
        .bus()
        .subscribe(&subject)
        .await
        .expect("subscribing to a task's events");
    client
        .bus()
        .flush()
        .await
        .expect("the subscription in place");
    let mut last = None;
    loop {
        let req = ListTasks {
            task_id: Some(id.into()),
            ..ListTasks::of(None)
        };
        if let Ok(all) = client.call(&req).await {
            last = all.into_iter().next();
            if let Some(r) = last.as_ref().filter(|r| ok(r)) {
                return r.clone();
            }
        }
        match tokio::time::timeout(crate::HANG_GUARD, events.next()).await {
            Ok(Some(_)) => continue,
            _ => panic!("task {id} never {what}; last seen: {last:#?}"),
        }
    }
}

/// Waits up to `guard` for the queue to complete its goal, asking its
/// status again while it is not (or does not answer: a queue restarting,
/// failing over): that status, or `None` for the caller to say what it
/// saw instead.
pub async fn goal_completed(client: &Client, guard: Duration) -> Option<QueueStatus> {
    crate::within(guard, async || {
        client
            .call(&GetStatus {})
            .await
            .ok()
            .filter(|s| s.status == RunStatus::Completed)
    })
    .await
}

/// `n` coder tasks `<prefix>00`, `<prefix>01`, …
pub fn tasks(prefix: &str, n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| Task::new(format!("{prefix}{i:02}"), "x", "y", "coder"))
        .collect()
}

/// An AUTO queue with a goal that completes when its tasks are done, these
/// tasks enqueued, and started.
pub async fn begin(bus: &Bus, tasks: Vec<Task>) {
    use xo_proto::queue::{Enqueue, ExecutionMode, Init, SetGoal, Start};
    must(
        bus,
        &Init {
            by: Default::default(),
            mode: ExecutionMode::Auto,
            manager: false,
            force: false,
        },
    )
    .await;
    must(
        bus,
        &SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "g".into(),
            project_id: None,
            completed: true,
        },
    )
    .await;
    must(bus, &Enqueue::new(tasks)).await;
    must(bus, &Start::default()).await;
}

/// What one claim gave.
#[derive(Debug)]
pub enum Next {
    /// A task, leased to this claimant.
    Task(Box<xo_proto::queue::Claimed>),
    /// The goal is completed.
    Done,
    /// Nothing now (no answer, or a lease still held): ask again.
    Again,
}

/// One claim as role `coder`.
pub async fn claim(bus: &Bus) -> Next {
    use xo_proto::queue::{Claim, GetStatus, RunStatus};
    match call(
        bus,
        &Claim {
            role: "coder".into(),
            claimant: "c1".into(),
            wait_ms: 200,
        },
    )
    .await
    {
        Ok(Some(c)) => Next::Task(Box::new(c)),
        Ok(None) if must(bus, &GetStatus {}).await.status == RunStatus::Completed => Next::Done,
        Ok(None) => Next::Again,
        Err(_) => {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Next::Again
        }
    }
}

/// Completes a claimed task as passed: whether the queue acknowledged it.
pub async fn complete(bus: &Bus, c: &xo_proto::queue::Claimed) -> bool {
    use xo_proto::queue::{Complete, TaskState, ValidationReport};
    let req = Complete {
        usage: Default::default(),
        task_id: c.record.task.task_id.clone(),
        token: c.token.clone(),
        // The lease's holder, on its unit's subject (`complete.c1`).
        claimant: c
            .record
            .lease
            .as_ref()
            .map(|l| l.claimant.clone())
            .unwrap_or_default(),
        report: ValidationReport {
            passed: true,
            ..Default::default()
        },
        manager_reply: None,
        exchange: None,
        diff: None,
    };
    matches!(call(bus, &req).await, Ok(r) if r.state == TaskState::Completed)
}
