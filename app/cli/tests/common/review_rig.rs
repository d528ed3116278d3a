//! The review rig: the queue, the knowledge service and the reviewers
//! in-process on the embedded bus, the model a local OpenAI-compatible test
//! server, the test acting as the runner (review.rs, trace.rs); on the
//! harness's sandbox, so the fabric starts them as `xo up` does.
#![allow(dead_code)]

use std::time::Duration;

use xo_bus::{Bus, Subscription, typed};
use xo_fabric::Slot;
use xo_proto::Subjects;
use xo_proto::knowledge::*;
use xo_proto::queue::*;
use xo_runtime::XoConfig;
use xo_tests::openai::{OpenAiStub, text};
use xo_tests::sandbox::{Sandbox, Started, plan};

pub const T: Duration = Duration::from_secs(10);

pub struct Rig {
    pub sb: Sandbox,
    pub bus: Bus,
    pub s: Subjects,
    pub cfg: XoConfig,
    pub runs: Subscription,
    pub directives: Subscription,
    /// The review supervisors' fabric (restarted by a test).
    pub review: Started,
    /// The review service's clock: manual, at 12:20 UTC, so that its day
    /// (the daily budget's) turns only when a test moves it.
    pub clock: xo_runtime::Clock,
}

impl Rig {
    pub async fn start(stub: Option<&OpenAiStub>, extra: &[(&str, &str)]) -> Self {
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
        // 2026-11-22T12:20:00Z.
        let clock = xo_runtime::Clock::manual(1_795_350_000_000);
        let mut sb = Sandbox::embedded()
            .clock(clock.clone())
            .with(&o)
            .build()
            .await;
        // The queue's leases and the knowledge store on real time.
        sb.start_on_clock(
            plan(&[Slot::Queue, Slot::Knowledge]),
            xo_runtime::Clock::System,
        )
        .await;
        let bus = sb.bus.clone();
        let runs = bus.subscribe("xo.event.review.*").await.unwrap();
        let directives = bus.subscribe("xo.directive.*").await.unwrap();
        let review = sb.start(&[Slot::Review]).await;
        let cfg = sb.cfg.clone();
        let s = cfg.subjects();
        let rig = Self {
            sb,
            bus,
            s,
            cfg,
            runs,
            directives,
            review,
            clock,
        };
        rig.call(&Init::default()).await;
        rig.call(&SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "a parser".into(),
            project_id: None,
            completed: true,
        })
        .await;
        let tasks = (1..=8)
            .map(|i| Task::new(format!("t{i}"), format!("step {i}"), "x", "coder"))
            .collect();
        rig.call(&Enqueue::new(tasks)).await;
        rig.call(&Start::default()).await;
        rig
    }

    pub async fn call<R: xo_proto::Request>(&self, r: &R) -> R::Response {
        self.sb.must(r).await
    }

    /// Plays the runner: claims the next task and completes it.
    pub async fn complete_one(&self) -> String {
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
            diff: None,
        })
        .await;
        id
    }

    /// Cancels every planned task but t1, enqueues `n` cleanup directives
    /// and drains the review runs that caused.
    pub async fn only_cleanup_after_t1(&mut self, n: usize) {
        let ids: Vec<String> = self
            .call(&ListTasks::default())
            .await
            .into_iter()
            .map(|r| r.task.task_id)
            .collect();
        for id in ids.iter().skip(1) {
            self.call(&Cancel {
                by: Default::default(),
                task_id: id.clone(),
            })
            .await;
        }
        self.call(&Enqueue::new(cleanup_tasks(n))).await;
        while tokio::time::timeout(Duration::from_millis(200), self.runs.next())
            .await
            .is_ok()
        {}
    }

    pub async fn next_run(&mut self) -> ReviewRun {
        let m = tokio::time::timeout(T, self.runs.next())
            .await
            .expect("a review run")
            .unwrap();
        typed::decode(&m, 1 << 20).unwrap()
    }

    /// Starts the review supervisors again beside the running ones, then
    /// stops those: a restart with no moment without a reviewer.
    pub async fn restart_review(&mut self) {
        let again = self.sb.start(&[Slot::Review]).await;
        let old = std::mem::replace(&mut self.review, again);
        self.sb.stop(old).await.unwrap();
    }

    pub async fn stop(mut self) {
        self.sb.stop_all().await.unwrap();
    }
}

pub fn reply(output: serde_json::Value) -> xo_tests::openai::StubReply {
    let r = serde_json::json!({"status": "ok", "message": "reviewed", "output": output});
    text(&format!("Review done.\n{r}"))
}

pub fn code_style() -> serde_json::Value {
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

/// `n` cleanup directives, `dir-c1`…
pub fn cleanup_tasks(n: usize) -> Vec<Task> {
    (1..=n)
        .map(|i| {
            let mut t = Task::new(format!("dir-c{i}"), format!("tidy {i}"), "x", "coder");
            t.lane = Lane::Cleanup;
            t.directive = Some(format!("dir-c{i}"));
            t
        })
        .collect()
}
