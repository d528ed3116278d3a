//! The runner service on the bus (embedded bus and file store, the queue
//! in-process): SALUTE every `salute_interval_turns` turns, heartbeats,
//! microcosm self-steering, and an operator halt killing the agent.

use std::time::Duration;

use xo_bus::{Bus, typed};
use xo_fabric::{Plan, Slot};
use xo_proto::queue::*;
use xo_proto::{Heartbeat, SaluteReport, Subjects};
use xo_runner::RunnerOptions;
use xo_runner::task::supervise::{Stop, Supervision, supervise};
use xo_runtime::{Clock, XoConfig};
use xo_tests::sandbox::{Sandbox, Started};

const T: Duration = Duration::from_secs(10);

struct Rig {
    sb: Sandbox,
    bus: Bus,
    subjects: Subjects,
    cfg: XoConfig,
    runner: Option<Started>,
}

impl Rig {
    async fn start(extra: &[(&str, &str)]) -> Self {
        let mut o = vec![("runner.claim_wait_ms", "200")];
        o.extend_from_slice(extra);
        // The runner's turns and heartbeats run on real time: so does the queue.
        let mut sb = Sandbox::embedded()
            .clock(Clock::System)
            .with(&o)
            .build()
            .await;
        sb.start(&[Slot::Queue]).await;
        Self {
            bus: sb.bus.clone(),
            subjects: sb.subjects.clone(),
            cfg: sb.cfg.clone(),
            sb,
            runner: None,
        }
    }

    async fn call<R: xo_proto::Request>(&self, r: &R) -> R::Response {
        self.sb.must(r).await
    }

    async fn go(&mut self, tasks: Vec<Task>) {
        self.call(&Init::default()).await;
        self.call(&SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "g".into(),
            project_id: None,
            completed: true,
        })
        .await;
        self.call(&Enqueue::new(tasks)).await;
        self.call(&Start::default()).await;
        let runner = RunnerOptions {
            role: "coder".into(),
            unit: "u1".into(),
        };
        self.runner = Some(
            self.sb
                .start_plan(Plan {
                    runners: vec![runner],
                    ..Plan::default()
                })
                .await,
        );
    }

    async fn wait_task(&self, id: &str, state: TaskState) -> TaskRecord {
        self.wait_for(id, state.as_str(), |r| r.state == state)
            .await
    }

    async fn wait_for(&self, id: &str, what: &str, f: impl Fn(&TaskRecord) -> bool) -> TaskRecord {
        xo_tests::ctl::task_reaches(&self.sb.client(), id, &format!("reached {what}"), f).await
    }

    /// The runner first, then the queue, as the fabric stops them.
    async fn stop(mut self) {
        self.sb.stop_all().await.unwrap();
    }
}

fn scripted(id: &str, body: &str) -> Task {
    Task::new(
        id,
        "x",
        format!("```xo-script\nturn_ms = 5\n{body}\n```"),
        "coder",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn salute_every_interval_and_heartbeats() {
    let mut rig = Rig::start(&[("runner.heartbeat_ms", "20"), ("runner.microcosm", "false")]).await;
    let mut salutes = rig.bus.subscribe(&rig.subjects.salute("u1")).await.unwrap();
    let mut beats = rig
        .bus
        .subscribe(&rig.subjects.heartbeat("u1"))
        .await
        .unwrap();
    let steps: Vec<String> = (1..=7)
        .map(|i| format!("{{ tool = \"grep\", args = \"a{i}\", output = \"o{i}\" }}"))
        .collect();
    rig.go(vec![scripted(
        "s1",
        &format!("[[run]]\nsteps = [{}]", steps.join(", ")),
    )])
    .await;
    rig.wait_task("s1", TaskState::Completed).await;
    let mut reports = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), salutes.next()).await {
        reports.push(typed::decode::<SaluteReport>(&m, 1 << 20).unwrap());
    }
    // The task's first turn, then every 3rd turn (salute_interval_turns).
    let turns: Vec<u64> = reports.iter().map(|r| r.time.turn).collect();
    assert_eq!(turns, [1, 3, 6], "{turns:?}");
    let last = reports.last().unwrap();
    assert_eq!(last.activity.task_id.as_deref(), Some("s1"));
    assert_eq!(last.activity.recent.len(), 6);
    assert_eq!(last.activity.recent[5].turn, 6);
    assert_eq!(last.equipment.model.as_deref(), Some("script"));
    assert_eq!(last.equipment.tokens_in, 6 * 200);
    assert!(last.size.context_fill > 0.0);
    let mut n = 0;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), beats.next()).await {
        let hb = typed::decode::<Heartbeat>(&m, 1 << 20).unwrap();
        assert_eq!(hb.unit, "u1");
        n += 1;
        if n >= 3 {
            break;
        }
    }
    assert!(n >= 3, "heartbeats keep coming between tasks");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microcosm_steers_the_agent_out_of_a_loop_with_no_supervisor() {
    let mut rig = Rig::start(&[("runner.microcosm", "true")]).await;
    let mut t = scripted(
        "m1",
        "[[run]]\nsteps = [{ repeat = 500, tool = \"build\", args = \"x\", fail = \"compile_error\", until_steered = true }, { reply = '{\"status\": \"ok\", \"message\": \"changed approach\"}' }]",
    );
    t.acceptance_criteria = vec!["output contains: [steering received] [SUPERVISOR] Loop".into()];
    rig.go(vec![t]).await;
    let r = rig.wait_task("m1", TaskState::Completed).await;
    assert!(r.report.unwrap().passed);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_halt_kills_the_agents_process_group() {
    let mut rig = Rig::start(&[("queue.lease_ms", "600")]).await;
    // The agent works in its task's own tree (worktree isolation).
    let sandbox = xo_pipeline::worktree::worktree_dir(&rig.cfg.sandbox_dir(), "default", "h1");
    rig.go(vec![scripted(
        "h1",
        "[[run]]\nsteps = [{ run = \"echo $$ > agent.pid; exec sleep 600\" }]",
    )])
    .await;
    rig.wait_task("h1", TaskState::Running).await;
    let pidfile = sandbox.join("agent.pid");
    let pid = xo_tests::until("the agent wrote its pid", async || {
        let s = std::fs::read_to_string(&pidfile).ok()?;
        s.trim().parse::<i32>().ok()
    })
    .await;
    assert!(pid > 0);
    rig.call(&Halt {
        by: Default::default(),
        reason: "operator intervention".into(),
    })
    .await;
    let alive = |pid: i32| {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        !s.is_empty() && !s.contains(") Z ")
    };
    xo_tests::eventually("the halt killed the agent", || !alive(pid)).await;
    // The stopped task is replayed (rolled back) once the operator resumes.
    rig.call(&Resume::default()).await;
    let r = rig
        .wait_for("h1", "a second attempt", |r| {
            r.state == TaskState::Running && r.attempt == 2
        })
        .await;
    assert_eq!(r.mark, Some(ReplayMark::RollbackReplay));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_carry_knowledge_and_directives_and_clean_tasks_establish_documents() {
    let mut rig = Rig::start(&[
        ("knowledge.establish_after", "2"),
        ("runner.microcosm", "false"),
    ])
    .await;
    rig.sb.start(&[Slot::Knowledge]).await;
    let doc = xo_proto::knowledge::KnowledgeDoc {
        tags: Vec::new(),
        category: xo_proto::knowledge::Category::Conventions,
        name: "naming".into(),
        title: "Naming".into(),
        status: xo_proto::knowledge::DocStatus::Provisional,
        updated_by: String::new(),
        after_task: None,
        milestone: None,
        uses: 0,
        needs_user_review: false,
        rules: vec!["Use snake_case file names".into()],
        examples: String::new(),
        rationale: String::new(),
        changelog: vec![],
    };
    rig.call(&xo_proto::knowledge::PutDoc {
        doc,
        author: xo_proto::knowledge::Author::CodeStyle,
        task: None,
    })
    .await;
    let ok = "[[run]]\nsteps = [{ reply = '{\"status\": \"ok\", \"message\": \"done\"}' }]";
    let mut directive = scripted("dir-1", ok);
    directive.intent = "Rename Foo.txt to foo.txt (why: convention naming)".into();
    directive.lane = Lane::Functional;
    directive.directive = Some("dir-1".into());
    let mut retried = scripted(
        "r1",
        "[[run]]\nsteps = [{ reply = 'not json' }]\n[[run]]\nsteps = [{ reply = '{\"status\": \"ok\", \"message\": \"done\"}' }]",
    );
    retried.depends_on = vec!["dir-1".into()];
    let mut last = scripted("p2", ok);
    last.depends_on = vec!["r1".into()];
    rig.go(vec![directive, retried, last]).await;
    rig.wait_task("p2", TaskState::Completed).await;
    let prompts =
        std::fs::read_to_string(rig.cfg.data_dir().join("default/prompts.log.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(prompts.lines().next().unwrap()).unwrap();
    let text = first["content"].as_str().unwrap();
    assert!(
        text.contains("## PROJECT KNOWLEDGE")
            && text.contains("### Naming (provisional)\n- Use snake_case file names"),
        "{text}"
    );
    assert!(
        text.contains("## ACTIVE DIRECTIVES") && text.contains("[functional] Rename Foo.txt"),
        "{text}"
    );
    assert!(
        text.find("## PROJECT KNOWLEDGE").unwrap() < text.find("## ACTIVE DIRECTIVES").unwrap()
    );
    // dir-1 and p2 were clean, r1 needed a format retry: two clean uses establish it.
    let d = rig
        .call(&xo_proto::knowledge::GetDoc {
            id: "conventions/naming".into(),
        })
        .await;
    assert_eq!(d.uses, 2);
    assert_eq!(d.status, xo_proto::knowledge::DocStatus::Established);
    // The directive was consumed: its task completed, and it is no longer active.
    let last_prompt: serde_json::Value = serde_json::from_str(
        prompts
            .lines()
            .rfind(|l| l.contains("\"type\":\"PROMPT\""))
            .unwrap(),
    )
    .unwrap();
    assert!(
        !last_prompt["content"]
            .as_str()
            .unwrap()
            .contains("## ACTIVE DIRECTIVES")
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_over_its_budget_is_stopped_and_blocked_and_the_queue_goes_on() {
    // A budget of 8 turns for every task; the first task loops far past it.
    let mut rig = Rig::start(&[
        ("runner.microcosm", "false"),
        ("runner.task_budget.max_turns", "8"),
    ])
    .await;
    let spin = scripted(
        "spin",
        "[[run]]\nsteps = [{ repeat = 500, tool = \"build\", args = \"x\", output = \"same\" }, { reply = '{\"status\": \"ok\", \"message\": \"done\"}' }]",
    );
    let ok = scripted(
        "after",
        "[[run]]\nsteps = [{ reply = '{\"status\": \"ok\", \"message\": \"done\"}' }]",
    );
    rig.go(vec![spin, ok]).await;
    let r = rig.wait_task("spin", TaskState::Blocked).await;
    assert_eq!(r.cause, Some(BlockCause::Budget));
    let reason = r.reason.unwrap();
    assert!(reason.starts_with("BUDGET_EXHAUSTED: "), "{reason}");
    assert!(reason.contains("turns of 8"), "{reason}");
    // The usage reached the queue with the outcome.
    assert!(r.spent.turns >= 8 && r.spent.turns < 100, "{:?}", r.spent);
    // A budget stop is not in the default halt policy: the next task runs.
    rig.wait_task("after", TaskState::Completed).await;
    assert_eq!(rig.call(&GetStatus {}).await.status, RunStatus::Completed);
    rig.stop().await;
}

/// Seed 003's control-plane state in the audit: every line's state before
/// and after is the seed's state (supervisor, goal, queue, mode,
/// last_updated, the task); a completion's validation report carries the
/// confidence level, a block on validation its failed criteria; and the
/// line holds the agent's last prompt and reply themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_holds_the_seed_state_the_validation_and_the_exchange() {
    let mut rig = Rig::start(&[("runner.microcosm", "false"), ("runner.max_retries", "1")]).await;
    let mut good = scripted(
        "good",
        "[[run]]\nsteps = [{ write = \"out.txt\", content = \"hi\" }, { reply = '{\"status\": \"ok\", \"message\": \"wrote it\"}' }]",
    );
    good.acceptance_criteria = vec!["file contains: out.txt :: hi".into()];
    let mut bad = scripted(
        "bad",
        "[[run]]\nsteps = [{ reply = '{\"status\": \"ok\", \"message\": \"all done\"}' }]",
    );
    bad.acceptance_criteria = vec![
        "file contains: out.txt :: hi".into(),
        "file exists: missing.txt".into(),
    ];
    rig.go(vec![good, bad]).await;
    rig.wait_task("good", TaskState::Completed).await;
    let blocked = rig.wait_task("bad", TaskState::Blocked).await;
    // The record keeps the validation it was blocked on.
    let r = blocked.report.expect("the failed validation on the record");
    assert_eq!(r.failed_criteria, ["file exists: missing.txt"]);
    assert_eq!(r.confidence_level, Some(ConfidenceLevel::Uncertain));
    assert!(r.uncertain_criteria.is_empty());

    let audit = rig
        .call(&AuditTail {
            project: None,
            lines: None,
        })
        .await;
    let line = |event: &str, id: &str| {
        audit
            .iter()
            .find(|a| a.event == event && a.task_id.as_deref() == Some(id))
            .unwrap_or_else(|| panic!("{event} {id}: {audit:#?}"))
            .clone()
    };
    let done = line("TASK_COMPLETE", "good");
    let (b, a) = (&done.state_before, &done.state_after);
    assert_eq!(b["supervisor"]["iteration"], 0);
    assert_eq!(a["supervisor"]["iteration"], 1);
    assert_eq!(a["supervisor"]["last_task_id"], "good");
    assert_eq!(a["supervisor"]["status"], "RUNNING");
    assert_eq!(a["supervisor"]["retry_count_good"], 0);
    assert_eq!(b["task"]["state"], "running");
    assert_eq!(a["task"]["state"], "completed");
    assert_eq!(a["goal"]["description"], "g");
    assert_eq!(a["queue"]["exhausted"], false, "bad is still to do");
    assert_eq!(a["completed_tasks"], 1);
    assert_eq!(a["execution_mode"], "AUTO");
    assert!(
        a["last_updated"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{a}"
    );
    let v = done.validation_report.as_ref().unwrap();
    assert_eq!(v.confidence_level, Some(ConfidenceLevel::High));
    assert!(v.failed_criteria.is_empty() && v.uncertain_criteria.is_empty());
    // The prompt and the reply themselves, not only where they were logged.
    let prompt = done.prompt.as_deref().expect("the prompt");
    assert!(prompt.contains("## TASK good"), "{prompt}");
    assert!(prompt.contains("## REPLY FORMAT"), "{prompt}");
    let response = done.response.as_deref().expect("the response");
    assert!(response.contains(r#""message": "wrote it""#), "{response}");
    assert!(done.prompt_ref.is_some() && done.response_ref.is_some());

    let stop = line("TASK_BLOCKED", "bad");
    assert_eq!(stop.state_after["task"]["state"], "blocked");
    assert_eq!(stop.state_after["supervisor"]["retry_count_bad"], 0);
    let v = stop
        .validation_report
        .as_ref()
        .expect("the failed validation");
    assert_eq!(v.failed_criteria, ["file exists: missing.txt"]);
    assert_eq!(v.confidence_level, Some(ConfidenceLevel::Uncertain));
    assert!(!v.passed);
    // Its last prompt was the fix prompt naming the failure.
    let prompt = stop.prompt.as_deref().expect("the prompt");
    assert!(
        prompt.contains("FIX REQUIRED") && prompt.contains("missing.txt"),
        "{prompt}"
    );
    assert!(stop.response.as_deref().unwrap().contains("all done"));
    // Status lines hold the seed's state too.
    let start = audit.iter().find(|a| a.event == "START").unwrap();
    assert_eq!(start.state_before["supervisor"]["status"], "HALTED");
    assert_eq!(start.state_after["supervisor"]["status"], "RUNNING");
    assert!(start.state_after.get("task").is_none());
    let check = rig.call(&AuditVerify { project: None }).await;
    assert!(check.intact, "{check:?}");
    rig.stop().await;
}

/// Seed 001's interrupt when its message is lost: the queue's
/// `xo.interrupt.<unit>` reaches no one (here no runner listens), and the
/// holder's next lease renewal carries it: the task's supervision stops
/// the agent to yield to the critical task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_interrupt_comes_with_the_next_lease_renewal() {
    let rig = Rig::start(&[("queue.lease_ms", "600")]).await;
    rig.call(&Init::default()).await;
    rig.call(&SetGoal {
        by: Default::default(),
        budget_usd: 0.0,
        description: "g".into(),
        project_id: None,
        completed: false,
    })
    .await;
    rig.call(&Enqueue::new(vec![Task::new(
        "slow",
        "planned work",
        "x",
        "coder",
    )]))
    .await;
    rig.call(&Start::default()).await;
    let c = rig
        .call(&Claim {
            role: "coder".into(),
            claimant: "u1".into(),
            wait_ms: 0,
        })
        .await
        .expect("the planned task");
    // Critical work and no idle runner: the queue asks the holder to yield.
    let mut hot = Task::new("hot", "critical fix", "x", "coder");
    hot.lane = Lane::Critical;
    rig.call(&Enqueue::new(vec![hot])).await;
    rig.wait_for("slow", "asked to yield", |r| r.interrupt.is_some())
        .await;
    let (cancel, mut cancelled) = tokio::sync::watch::channel(false);
    let (_interrupt_tx, interrupts) = tokio::sync::watch::channel(None);
    let supervision = Supervision {
        bus: rig.bus.clone(),
        subjects: rig.subjects.clone(),
        held: xo_runner::lease::Held {
            task_id: "slow".into(),
            token: c.token,
            unit: "u1".into(),
        },
        attempt: c.record.attempt,
        lease_ms: c.lease_ms,
        budget: Default::default(),
        spent: Default::default(),
        meter: xo_runner::lease::Meter {
            turns: Default::default(),
            started: std::time::Instant::now(),
            checkpoint: None,
        },
        interrupts,
        shutdown: xo_runtime::tree::Shutdown::new(),
        cancel,
    };
    // The agent: it works until it is stopped.
    let agent = async move {
        while !*cancelled.borrow_and_update() {
            if cancelled.changed().await.is_err() {
                return "the supervision went away";
            }
        }
        "stopped"
    };
    let (ran, stop) = tokio::time::timeout(T, supervise(supervision, agent))
        .await
        .expect("the supervision acts on the renewal");
    assert_eq!(ran, "stopped", "the agent is stopped to give the task back");
    assert_eq!(stop, Some(Stop::Yield("hot".into())));
    rig.stop().await;
}

/// Issue 37, item 3: a runner whose task waits for the operator's answer
/// (a question clarifications did not settle) reports that its unit needs
/// you (`answer`, the question named); one whose agent could not run
/// (`EXEC_FAILURE`) reports `error`; the next task's first report clears
/// what the last one waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_an_answer_or_an_agent_that_failed_needs_you() {
    let mut rig = Rig::start(&[("runner.microcosm", "false")]).await;
    let mut salutes = rig.bus.subscribe(&rig.subjects.salute("u1")).await.unwrap();
    let asks = "[[run]]\nsteps = [{ say = \"looking\" }, { reply = '{\"status\": \"ok\", \"message\": \"Which database should the cache use?\"}' }]";
    let fails = "[[run]]\nsteps = [{ say = \"installing\" }, { reply = '{\"status\": \"error\", \"message\": \"cannot reach the package index\"}' }]";
    rig.go(vec![scripted("q1", asks), scripted("e1", fails)])
        .await;
    rig.wait_task("q1", TaskState::AwaitingResponse).await;
    rig.wait_task("e1", TaskState::Blocked).await;
    let mut reports = Vec::new();
    let mut errored = false;
    for _ in 0..200 {
        match tokio::time::timeout(Duration::from_millis(100), salutes.next()).await {
            Ok(Some(m)) => {
                let r = typed::decode::<SaluteReport>(&m, 1 << 20).unwrap();
                errored |= r
                    .status
                    .needs
                    .as_ref()
                    .is_some_and(|n| n.reason == xo_proto::NeedsReason::Error);
                reports.push(r);
                if errored {
                    break;
                }
            }
            _ => continue,
        }
    }
    let said = |r: &SaluteReport| {
        (
            r.activity.task_id.clone().unwrap_or_default(),
            r.status
                .needs
                .as_ref()
                .map(|n| (n.reason, n.detail.clone())),
        )
    };
    let seen: Vec<_> = reports.iter().map(said).collect();
    let answer = seen
        .iter()
        .position(|(_, n)| {
            n.as_ref().is_some_and(|(r, d)| {
                *r == xo_proto::NeedsReason::Answer
                    && d == "q1 asks: Which database should the cache use?"
            })
        })
        .unwrap_or_else(|| panic!("no answer awaited: {seen:#?}"));
    let next = seen[answer + 1..]
        .iter()
        .position(|(t, _)| t == "e1")
        .map(|i| i + answer + 1)
        .unwrap_or_else(|| panic!("no report of e1 after: {seen:#?}"));
    assert_eq!(seen[next].1, None, "the next task clears it: {seen:#?}");
    let (task, needs) = seen.last().unwrap();
    assert_eq!(task, "e1");
    let (reason, detail) = needs.clone().unwrap();
    assert_eq!(reason, xo_proto::NeedsReason::Error);
    assert!(
        detail.starts_with("e1: EXEC_FAILURE") && detail.contains("cannot reach the package index"),
        "{detail}"
    );
    assert!(reports.last().unwrap().status.ended);
    rig.stop().await;
}
