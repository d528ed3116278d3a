//! End to end over a real nats-server, every service its own `xo` process:
//! supervisor, queue and two or four runners on one project, each task in
//! its own worktree, complete an eleven-task goal in which one reply needs
//! a format retry, one task ends blocked, one runner is steered out of a
//! loop by the XO, a runner SIGKILLed mid-task has its task finished by
//! another after rollback, and one SIGKILLed after its agent's checkpoint
//! has its task resumed (validated, not run again); restarted, each kills
//! the agent process its earlier incarnation left behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use xo_tests::ctl::ask;
use xo_tests::launcher::Xo;

use xo_bus::{Bus, NatsBus, typed};
use xo_proto::Steering;
use xo_proto::queue::*;
use xo_tests::NatsServer;
use xo_tests::procs::Procs;

struct Fleet {
    url: String,
    root: PathBuf,
    procs: Procs,
}

impl Fleet {
    fn spawn(&mut self, name: &str, args: &[&str]) {
        let r = &self.root;
        let mut c = Xo::new().command(&[]);
        c.args(["--nats", &self.url, "--log-format", "json"])
            .args(args)
            .env("XO__STATE__DIR", r.join("state"))
            .env("XO__QUEUE__DATA_DIR", r.join("data"))
            .env("XO__QUEUE__LEASE_MS", "1500")
            .env("XO__RUNNER__SANDBOX", r.join("sandbox"))
            .env("XO__RUNNER__DEFAULT_PROJECT", "e2e")
            .env("XO__RUNNER__CLAIM_WAIT_MS", "300")
            .env("XO__RUNNER__HEARTBEAT_MS", "500")
            .env("XO__RUNNER__MICROCOSM", "false")
            .env("RUST_LOG", "info");
        self.procs.start(name, c);
    }

    fn runner(&mut self, unit: &str) {
        self.spawn(
            unit,
            &[
                "serve", "runner", "--script", "inline", "--role", "coder", "--unit", unit,
            ],
        );
    }

    fn kill(&mut self, name: &str) {
        self.procs.kill(name);
    }

    fn logs(&self) -> String {
        self.procs.logs(15)
    }
}

fn script(body: &str) -> String {
    format!("```xo-script\nturn_ms = 20\n{body}\n```\n")
}

const OK: &str = r#"{ reply = '{"status": "ok", "message": "done"}' }"#;

fn t(id: &str, body: &str) -> Task {
    let mut t = Task::new(id, format!("task {id}"), script(body), "coder");
    t.project = Some("e2e".into());
    t
}

fn writes(id: &str, file: &str) -> Task {
    let mut x = t(
        id,
        &format!("[[run]]\nsteps = [{{ write = \"{file}\", content = \"{id}\" }}, {OK}]"),
    );
    x.acceptance_criteria = vec![format!("file contains: {file} :: {id}")];
    x
}

fn goal() -> Vec<Task> {
    let mut v = vec![writes("t01", "a.txt"), writes("t02", "b.txt")];
    let mut x = t(
        "t03",
        &format!(
            "[[run]]\nsteps = [{{ write = \"c.txt\", content = \"c\" }}, {{ reply = \"finished!\" }}]\n[[run]]\nsteps = [{OK}]"
        ),
    );
    x.acceptance_criteria = vec!["file exists: c.txt".into()];
    v.push(x);
    v.push(t(
        "t04",
        r#"[[run]]
steps = [{ reply = '{"status": "blocked", "message": "needs a database password"}' }]"#,
    ));
    let mut x = t(
        "t05",
        &format!(
            "[[run]]\nsteps = [{{ repeat = 1000, tool = \"build\", args = \"--all\", fail = \"compile_error\", until_steered = true }}, {{ write = \"built.txt\", content = \"x\" }}, {OK}]"
        ),
    );
    // Fails validation unless the XO's loop steering reached the agent.
    x.acceptance_criteria = vec![
        "output contains: [steering received] [SUPERVISOR] Loop".into(),
        "file exists: built.txt".into(),
    ];
    v.push(x);
    let mut x = t(
        "t06",
        &format!(
            "[[run]]\nattempt = 1\nsteps = [{{ write = \"partial.txt\", content = \"half\" }}, {{ run = \"echo $$ > sleeper.pid; exec sleep 600\" }}, {OK}]\n[[run]]\nattempt = 2\nsteps = [{{ write = \"final.txt\", content = \"whole\" }}, {OK}]"
        ),
    );
    x.working_directory = Some("slow".into());
    x.acceptance_criteria = vec![
        "command succeeds: test ! -e partial.txt".into(),
        "command succeeds: test ! -e sleeper.pid".into(),
        "file exists: final.txt".into(),
    ];
    v.push(x);
    let mut x = t(
        "t07",
        &format!("[[run]]\nsteps = [{{ run = \"cat a.txt > a2.txt\" }}, {OK}]"),
    );
    x.depends_on = vec!["t01".into()];
    x.acceptance_criteria = vec!["command succeeds: grep -q t01 a2.txt".into()];
    v.push(x);
    let mut x = t(
        "t08",
        &format!(
            "[[run]]\nsteps = [{{ write = \"check.sh\", content = \"test -s b.txt\" }}, {OK}]"
        ),
    );
    x.depends_on = vec!["t02".into()];
    x.test_command = Some("sh check.sh".into());
    x.tests_required = true;
    v.push(x);
    let mut x = t(
        "t09",
        &format!(
            "[[run]]\nsteps = [{OK}]\n[[run]]\nsteps = [{{ write = \"fixed.txt\", content = \"f\" }}, {OK}]"
        ),
    );
    x.acceptance_criteria = vec!["file exists: fixed.txt".into()];
    v.push(x);
    v.push(writes("t10", "d.txt"));
    // Checkpointed, then killed: resumed on replay. The checkpoint holds
    // the agent's pid (it is not part of the task's work).
    let checkpointed = r#"{ run = 'mkdir -p "$(dirname "$XO_CHECKPOINT")"; echo $$ > "$XO_CHECKPOINT"; exec sleep 600' }"#;
    let mut x = t(
        "t11",
        &format!(
            "[[run]]\nattempt = 1\nsteps = [{{ write = \"done.txt\", content = \"t11\" }}, {checkpointed}, {OK}]"
        ),
    );
    x.acceptance_criteria = vec!["file contains: done.txt :: t11".into()];
    // After the rollback's kill, so a runner is always left to replay.
    x.depends_on = vec!["t06".into()];
    v.push(x);
    v
}

/// A runner SIGKILLed mid-task: the agent it left, and whether it was
/// restarted (after its task was finished by another).
struct Victim {
    unit: String,
    agent: i32,
    restarted: bool,
}

fn pid_alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.contains(") Z ")
}

fn work_log(root: &Path, task: &str) -> String {
    std::fs::read_to_string(root.join(format!("data/e2e/tasks/{task}.md"))).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_runners_complete_a_goal_through_failures_and_kills() {
    goal_through_failures_and_kills(&["r1", "r2", "r3", "r4"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runners_complete_a_goal_through_failures_and_kills() {
    goal_through_failures_and_kills(&["r1", "r2"]).await;
}

async fn goal_through_failures_and_kills(runners: &[&str]) {
    let nats = NatsServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::create_dir_all(root.join("sandbox/e2e/slow")).unwrap();
    let mut fleet = Fleet {
        url: nats.url(),
        root: root.clone(),
        procs: Procs::new(root.clone()),
    };
    fleet.spawn("queue", &["serve", "queue"]);
    fleet.spawn("supervisor", &["serve", "supervisor"]);
    let bus = Bus::Nats(
        NatsBus::connect(&nats.url(), Default::default())
            .await
            .unwrap(),
    );
    let mut steer = bus.subscribe("xo.steer.>").await.unwrap();
    let first = Init {
        force: true,
        ..Default::default()
    };
    let init = xo_tests::within(xo_tests::HANG_GUARD, async || ask(&bus, &first).await).await;
    assert!(init.is_some(), "the queue never answered\n{}", fleet.logs());
    ask(
        &bus,
        &SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "eleven tasks".into(),
            project_id: Some("e2e".into()),
            completed: true,
        },
    )
    .await
    .unwrap();
    let ids = ask(&bus, &Enqueue::new(goal())).await.unwrap();
    assert_eq!(ids.len(), 11);
    for u in runners {
        fleet.runner(u);
    }
    ask(&bus, &Start::default()).await.unwrap();

    // t06's runner (rollback), then t11's (resume).
    let mut victims: BTreeMap<&str, Victim> = BTreeMap::new();
    let mut resumed = 0;
    let mut final_status = None;
    for _ in 0..3000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(tasks) = ask(&bus, &ListTasks::default()).await else {
            continue;
        };
        let by_id: BTreeMap<String, TaskRecord> = tasks
            .into_iter()
            .map(|r| (r.task.task_id.clone(), r))
            .collect();
        // Kill whichever runner holds t06 once its agent is mid-task (its
        // pid file in t06's own tree), and whichever holds t11 once the
        // queue knows its agent checkpointed.
        let agent_of = |id: &str, file: &str| {
            std::fs::read_to_string(root.join(format!("sandbox/.xo-worktrees/e2e/{id}/{file}")))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .filter(|p| *p > 0)
        };
        for (id, file, checkpointed) in [
            ("t06", "slow/sleeper.pid", false),
            ("t11", xo_pipeline::driver::command::CHECKPOINT, true),
        ] {
            let r = &by_id[id];
            if !victims.contains_key(id)
                && victims.values().all(|v| v.restarted)
                && r.state == TaskState::Running
                && r.attempt == 1
                && let Some(l) = &r.lease
                && (l.checkpoint || !checkpointed)
                && let Some(pid) = agent_of(id, file)
            {
                fleet.kill(&l.claimant);
                victims.insert(
                    id,
                    Victim {
                        unit: l.claimant.clone(),
                        agent: pid,
                        restarted: false,
                    },
                );
            }
        }
        // Once another runner finished its task, restart the killed one:
        // it kills the agent its predecessor left.
        for (id, v) in victims.iter_mut() {
            if v.restarted || by_id[*id].state != TaskState::Completed {
                continue;
            }
            assert!(
                pid_alive(v.agent),
                "the orphaned agent of {id} outlived its SIGKILLed runner"
            );
            fleet.runner(&v.unit);
            xo_tests::within(xo_tests::HANG_GUARD, async || {
                (!pid_alive(v.agent)).then_some(())
            })
            .await;
            assert!(
                !pid_alive(v.agent),
                "the restarted runner killed its predecessor's agent of {id}\n{}",
                fleet.logs()
            );
            v.restarted = true;
        }
        let Some(s) = ask(&bus, &GetStatus {}).await else {
            continue;
        };
        match s.status {
            RunStatus::Halted => {
                let why = s.halt_reason.clone().unwrap_or_default();
                assert!(
                    why.starts_with("TASK_BLOCKED: t04"),
                    "unexpected halt: {why}\n{}",
                    fleet.logs()
                );
                // The operator acknowledges the blocked task and resumes.
                ask(&bus, &Resume::default()).await.unwrap();
                resumed += 1;
            }
            RunStatus::Completed if victims.len() == 2 && victims.values().all(|v| v.restarted) => {
                final_status = Some(s);
                break;
            }
            _ => {}
        }
    }
    let status =
        final_status.unwrap_or_else(|| panic!("the goal did not complete\n{}", fleet.logs()));
    assert_eq!(resumed, 1);
    assert_eq!(
        status.counts.get("completed"),
        Some(&10),
        "{:?}",
        status.counts
    );
    assert_eq!(status.counts.get("blocked"), Some(&1));
    let tasks = ask(&bus, &ListTasks::default()).await.unwrap();
    let by_id: BTreeMap<String, TaskRecord> = tasks
        .into_iter()
        .map(|r| (r.task.task_id.clone(), r))
        .collect();
    assert_eq!(
        by_id["t04"].reason.as_deref(),
        Some("BLOCKED: needs a database password")
    );
    // Each task's changes, and only its own, on its branch: the killed
    // attempt's half work and pid file are not in t06's; t07, which read
    // t01's a.txt from main, changed a2.txt only.
    let files = |id: &str| -> Vec<String> {
        by_id[id]
            .diff
            .as_ref()
            .unwrap_or_else(|| panic!("{id} has no diff"))
            .files
            .iter()
            .map(|f| f.path.clone())
            .collect()
    };
    assert_eq!(files("t01"), ["a.txt"]);
    assert_eq!(files("t06"), ["slow/final.txt"]);
    assert_eq!(files("t07"), ["a2.txt"]);
    assert!(by_id["t04"].diff.is_none(), "a blocked task has none");
    // The format retry, written as seed 002's retry event: one in each
    // attempt (a machine under load may let a lease lapse and the queue
    // replay the task; its agent is then asked again the same way).
    assert_eq!(
        work_log(&root, "t03").matches("Retry Event").count(),
        by_id["t03"].attempt as usize,
        "{}",
        work_log(&root, "t03"),
    );
    // The fix prompt.
    assert!(work_log(&root, "t09").contains("Fix prompt"));
    // The loop: the XO steered the unit running t05 and it recovered.
    let mut kinds = Vec::new();
    while let Some(m) = steer.try_next() {
        if let Ok(s) = typed::decode::<Steering>(&m, 1 << 20) {
            kinds.push(s.kind.as_str().to_string());
        }
    }
    assert!(kinds.iter().any(|k| k == "loop"), "{kinds:?}");
    assert!(by_id["t05"].report.as_ref().is_some_and(|r| r.passed));
    // The killed runner's task: replayed with a rollback by another runner.
    let victim = &victims["t06"].unit;
    let slow = &by_id["t06"];
    assert_eq!(slow.attempt, 2);
    assert!(
        slow.report.as_ref().is_some_and(|r| r.passed),
        "{:?}",
        slow.report
    );
    assert!(work_log(&root, "t06").contains("Rollback"));
    let prompts = std::fs::read_to_string(root.join("data/e2e/prompts.log.jsonl")).unwrap();
    let prompted = |id: &str, attempt: u32| -> Vec<String> {
        prompts
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| {
                v["task_id"] == id && v["type"] == "PROMPT" && v["metadata"]["attempt"] == attempt
            })
            .map(|v| v["metadata"]["unit"].as_str().unwrap().to_string())
            .collect()
    };
    let finisher = prompted("t06", 2);
    assert_eq!(finisher.len(), 1);
    assert_ne!(&finisher[0], victim, "another runner finished it");
    // The checkpointed task: resumed, its artifacts validated without
    // running its agent again, its work (not the checkpoint) on its branch.
    let done = &by_id["t11"];
    assert_eq!(done.attempt, 2);
    assert!(done.report.as_ref().is_some_and(|r| r.passed));
    assert!(work_log(&root, "t11").contains("Resume"));
    assert_eq!(prompted("t11", 1).len(), 1);
    assert!(prompted("t11", 2).is_empty(), "the resume ran no agent");
    assert_eq!(files("t11"), ["done.txt"]);
    // The audit chain is intact, line for line, through the kill.
    let audit = root.join("data/e2e/audit.log.jsonl");
    match xo_queue::audit::verify(&audit).unwrap() {
        xo_queue::audit::Verdict::Intact { lines } => assert!(lines > 20, "{lines} lines"),
        broken => panic!("{broken:?}"),
    }
    // Every task that completed did so once.
    let text = std::fs::read_to_string(&audit).unwrap();
    for id in [
        "t01", "t02", "t03", "t05", "t06", "t07", "t08", "t09", "t10", "t11",
    ] {
        let completions = text
            .lines()
            .filter(|l| {
                l.contains("\"TASK_COMPLETE\"") && l.contains(&format!("\"task_id\":\"{id}\""))
            })
            .count();
        assert_eq!(completions, 1, "{id}");
    }
}
