//! `xo up --demo`: the embedded fabric with three scripted runners working a
//! small goal. One runner stalls and one loops; the XO steers them, they
//! recover, the goal completes, and a timeline and final status are printed.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use xo_bus::typed;
use xo_proto::queue::{self as q, EventName, RunStatus, Task, TaskEvent};
use xo_proto::{SaluteReport, Steering, SubjectKind};
use xo_runner::RunnerOptions;
use xo_runtime::XoConfig;
use xo_runtime::config::{DriverConfig, DriverKind};

use crate::fabric::{Fabric, Plan, Transport};

const PROJECT: &str = "demo";
const RUNNERS: [&str; 3] = ["coder-1", "coder-2", "coder-3"];

fn script(body: &str) -> String {
    format!("Follow the task.\n\n```xo-script\nturn_ms = 120\n{body}\n```\n")
}

/// The demo's goal: six tasks, each with the scripted agent's behaviour inline.
pub fn demo_tasks() -> Vec<Task> {
    let ok = |m: &str| format!("{{ reply = '{{\"status\": \"ok\", \"message\": \"{m}\"}}' }}");
    let mut t1 = Task::new(
        "greet",
        "write the greeting",
        script(&format!(
            "[[run]]\nsteps = [\n  {{ say = \"reading the task\" }},\n  {{ write = \"hello.txt\", content = \"hello, world\\n\" }},\n  {}\n]",
            ok("wrote hello.txt")
        )),
        "coder",
    );
    t1.acceptance_criteria = vec!["file contains: hello.txt :: hello".into()];
    let mut t2 = Task::new(
        "farewell",
        "write the farewell (this agent stalls until steered)",
        script(&format!(
            "[[run]]\nsteps = [\n  {{ stall = 60, until_steered = true }},\n  {{ write = \"farewell.txt\", content = \"goodbye\\n\" }},\n  {}\n]",
            ok("wrote farewell.txt after the nudge")
        )),
        "coder",
    );
    t2.acceptance_criteria = vec!["file exists: farewell.txt".into()];
    let mut t3 = Task::new(
        "build",
        "make the build pass (this agent loops on a failing build until steered)",
        script(&format!(
            "[[run]]\nsteps = [\n  {{ repeat = 60, tool = \"cargo_build\", args = \"--release\", fail = \"compile_error\", until_steered = true }},\n  {{ write = \"build.ok\", content = \"built with a different approach\\n\" }},\n  {}\n]",
            ok("changed approach; build.ok written")
        )),
        "coder",
    );
    t3.required_artifacts = vec!["build.ok".into()];
    let mut t4 = Task::new(
        "notes",
        "write release notes (the first reply is in the wrong format)",
        script(&format!(
            "[[run]]\nsteps = [\n  {{ write = \"NOTES.md\", content = \"# Notes\\n\" }},\n  {{ reply = \"All done, notes written.\" }},\n]\n[[run]]\nsteps = [ {} ]",
            ok("wrote NOTES.md")
        )),
        "coder",
    );
    t4.acceptance_criteria = vec!["file exists: NOTES.md".into()];
    let mut t5 = Task::new(
        "shout",
        "derive the loud greeting from hello.txt",
        script(&format!(
            "[[run]]\nsteps = [\n  {{ run = \"tr a-z A-Z < hello.txt > LOUD.txt\" }},\n  {}\n]",
            ok("LOUD.txt derived")
        )),
        "coder",
    );
    t5.depends_on = vec!["greet".into()];
    t5.acceptance_criteria = vec!["command succeeds: grep -q 'HELLO, WORLD' LOUD.txt".into()];
    let mut t6 = Task::new(
        "readme",
        "document the toolkit (a free-text criterion, settled by interrogation)",
        script(&format!(
            "[[run]]\nsteps = [\n  {{ write = \"README.md\", content = \"# Greeting toolkit\\nhello.txt greets, farewell.txt says goodbye.\\n\" }},\n  {}\n]\n[[run]]\nsteps = [ {} ]",
            ok("README.md written"),
            ok("YES: README.md explains the greeting toolkit")
        )),
        "coder",
    );
    t6.acceptance_criteria = vec!["the README explains the greeting toolkit".into()];
    let mut all = vec![t1, t2, t3, t4, t5, t6];
    for t in &mut all {
        t.project = Some(PROJECT.into());
    }
    all
}

/// `keep`: the console too, and the fabric left running after the goal
/// until ctrl-c (`xo up --demo --keep`).
pub async fn demo(mut cfg: XoConfig, keep: bool) -> anyhow::Result<ExitCode> {
    let dir = cfg.state.dir.join("demo");
    let socket = cfg.state.socket_path();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    cfg.state.dir = dir.clone();
    cfg.queue.data_dir = String::new();
    cfg.runner.sandbox = String::new();
    cfg.runner.default_project = PROJECT.into();
    cfg.runner.driver = DriverConfig {
        kind: DriverKind::Script,
        ..Default::default()
    };
    // The XO does the steering here, over the bus, not the runners themselves.
    cfg.runner.microcosm = false;
    cfg.runner.claim_wait_ms = 300;
    cfg.runner.heartbeat_ms = 1_000;
    if std::env::var("RUST_LOG").is_err() {
        cfg.telemetry.log_level = "error".into();
    }
    let plan = Plan {
        queue: true,
        knowledge: true,
        supervisor: true,
        console: if keep {
            crate::fabric::ConsoleMode::IfFree
        } else {
            crate::fabric::ConsoleMode::Off
        },
        ..Plan::default()
    };
    let mut fabric = Fabric::start(&cfg, plan, Transport::Private, "xo-demo", "xo-demo").await?;
    // Kept, its bus is served where `xo units`, `xo steer`… look for it.
    let served = if keep {
        fabric
            .serve_socket(&socket)
            .await
            .map_err(|e| format!("{e:#}"))
    } else {
        Err(String::new())
    };
    let bus = fabric.bus.clone();
    let subjects = cfg.subjects();
    let client =
        xo_bus::Client::new(bus.clone(), subjects.clone()).with_timeout(Duration::from_secs(10));
    // The timeline's subjects only: a tap on everything would take every
    // request too, and a service that is not running here (reviews,
    // containers) would be waited for instead of said absent at once.
    let mut tap = {
        let mut subs = Vec::new();
        for s in [
            subjects.steer_all(),
            subjects.salute_all(),
            subjects.task_event_all(),
        ] {
            subs.push(bus.subscribe(&s).await?.into_stream());
        }
        futures::stream::select_all(subs)
    };
    // The knowledge store, seeded with one convention the runners' prompts carry.
    let convention = xo_proto::knowledge::KnowledgeDoc {
        tags: Vec::new(),
        category: xo_proto::knowledge::Category::Conventions,
        name: "text-files".into(),
        title: "Text files".into(),
        status: xo_proto::knowledge::DocStatus::Established,
        updated_by: String::new(),
        after_task: None,
        milestone: None,
        uses: 0,
        needs_user_review: false,
        rules: vec![
            "End every text file with a newline".into(),
            "Write lowercase greetings".into(),
        ],
        examples: String::new(),
        rationale: "Tools that read line by line lose an unterminated last line.".into(),
        changelog: Vec::new(),
    };
    client
        .call(&xo_proto::knowledge::PutDoc {
            doc: convention,
            author: xo_proto::knowledge::Author::Operator,
            task: None,
        })
        .await?;
    client
        .call(&q::Init {
            force: true,
            ..Default::default()
        })
        .await?;
    client
        .call(&q::SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "a tiny greeting toolkit".into(),
            project_id: Some(PROJECT.into()),
            completed: true,
        })
        .await?;
    let tasks = demo_tasks();
    let n_tasks = tasks.len();
    client.call(&q::Enqueue::new(tasks)).await?;
    // The runners join once the goal and the tasks are in place.
    let runners: Vec<RunnerOptions> = RUNNERS
        .iter()
        .map(|unit| RunnerOptions {
            role: "coder".into(),
            unit: (*unit).into(),
        })
        .collect();
    let fabric = fabric.with_runners(&cfg, runners).await?;
    outln!(
        "xo demo: {n_tasks} tasks, {} scripted runners, the XO watching (state in {})",
        RUNNERS.len(),
        dir.display()
    );
    if keep {
        crate::services::say_console(&fabric, &cfg);
        match &served {
            Ok(()) => errln!(
                "  bus:     {} (xo units, xo steer, xo report… in this directory talk to the demo)",
                socket.display()
            ),
            Err(e) => errln!("  bus:     not served: {e}"),
        }
    }
    outln!();
    client.call(&q::Start::default()).await?;

    let started = Instant::now();
    let mut tl = Timeline {
        started,
        unit_task: HashMap::new(),
        steered: BTreeMap::new(),
        steer_count: BTreeMap::new(),
        completed: std::collections::HashSet::new(),
    };
    let mut poll = tokio::time::interval(Duration::from_millis(250));
    let limit = Duration::from_secs(180);
    let final_status = loop {
        tokio::select! {
            m = tap.next() => {
                let Some(m) = m else { break None };
                tl.show(&subjects, cfg.wire.max_payload, &m);
            }
            _ = poll.tick() => {
                if let Ok(s) = client.call(&q::GetStatus {}).await
                    && (s.status == RunStatus::Completed
                        || (s.status == RunStatus::Halted && s.halt_reason.is_some()))
                {
                    break Some(s);
                }
                if started.elapsed() > limit {
                    break None;
                }
            }
        }
    };
    let records = client.all_tasks(None).await.unwrap_or_default();
    // The status can be read before the last completions' events are
    // published: the timeline waits (briefly) for each of them.
    let drain = Instant::now() + Duration::from_secs(5);
    while records
        .iter()
        .any(|r| r.state == q::TaskState::Completed && !tl.completed.contains(&r.task.task_id))
    {
        let left = drain.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, tap.next()).await {
            Ok(Some(m)) => tl.show(&subjects, cfg.wire.max_payload, &m),
            _ => break,
        }
    }
    let Timeline {
        steered,
        steer_count,
        ..
    } = tl;
    // Kept: stopped after the summary, on ctrl-c.
    let fabric = if keep {
        Some(fabric)
    } else {
        fabric.stop().await?;
        None
    };

    outln!();
    let project_data = cfg.data_dir().join(PROJECT);
    outln!(
        "{:<10} {:<10} {:>7}  supervisor log",
        "task",
        "state",
        "attempt"
    );
    for r in &records {
        let log = std::fs::read_to_string(xo_pipeline::logs::work_log_path(
            &project_data,
            &r.task.task_id,
        ))
        .unwrap_or_default();
        let mut notes = Vec::new();
        for (needle, label) in [
            ("Retry Event", "format retry"),
            ("Fix prompt", "fix prompt"),
            ("] Interrogation", "interrogation"),
            ("Violation auto-corrected", "auto-corrected"),
        ] {
            let n = log.matches(needle).count();
            if n > 0 {
                notes.push(format!("{n} {label}"));
            }
        }
        if let Some(k) = steered.get(&r.task.task_id) {
            notes.push(format!("steered: {}", k.join(", ")));
        }
        outln!(
            "{:<10} {:<10} {:>7}  {}",
            r.task.task_id,
            r.state.as_str(),
            r.attempt,
            notes.join("; ")
        );
    }
    outln!();
    let kinds: Vec<String> = steer_count
        .iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect();
    outln!(
        "steering: {}",
        if kinds.is_empty() {
            "none".into()
        } else {
            kinds.join(", ")
        }
    );
    outln!(
        "logs:     {} (work logs), {} (prompts), {} (audit)",
        project_data.join("tasks").display(),
        project_data.join(xo_proto::names::PROMPT_LOG).display(),
        xo_proto::names::audit_file(&cfg.data_dir(), PROJECT).display()
    );
    if let Some(fabric) = fabric {
        outln!();
        outln!("kept running: the fabric and the console stay up to look around; ctrl-c stops");
        say_console_stdout(&fabric);
        fabric.run_until(crate::services::shutdown_signal()).await?;
        outln!("xo demo: stopped cleanly");
    }
    match final_status {
        Some(s) if s.status == RunStatus::Completed => {
            outln!(
                "status:   COMPLETED in {:.1}s — goal \"{}\"",
                started.elapsed().as_secs_f64(),
                s.goal.description
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(s) => {
            outln!("status:   HALTED: {}", s.halt_reason.unwrap_or_default());
            Ok(ExitCode::FAILURE)
        }
        None => {
            outln!("status:   did not finish within {}s", limit.as_secs());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The live timeline: steering and task events as they come, and what it
/// saw (for the summary).
struct Timeline {
    started: Instant,
    unit_task: HashMap<String, String>,
    steered: BTreeMap<String, Vec<String>>,
    steer_count: BTreeMap<String, u32>,
    /// Tasks whose TASK_COMPLETE was printed.
    completed: std::collections::HashSet<String>,
}

impl Timeline {
    fn show(&mut self, subjects: &xo_proto::Subjects, max_payload: usize, m: &xo_bus::Message) {
        let t = self.started.elapsed().as_secs_f64();
        let kind = subjects.kind(&m.subject);
        if kind == Some(SubjectKind::Steer) {
            if let Ok(s) = typed::decode::<Steering>(m, max_payload) {
                *self
                    .steer_count
                    .entry(s.kind.as_str().to_string())
                    .or_default() += 1;
                if let Some(task) = self.unit_task.get(&s.unit) {
                    self.steered
                        .entry(task.clone())
                        .or_default()
                        .push(s.kind.as_str().to_string());
                }
                outln!(
                    "{t:6.1}s  XO → {:<8} {:<6} {}",
                    s.unit,
                    s.kind.as_str(),
                    s.message
                );
            }
        } else if kind == Some(SubjectKind::Salute) {
            if let Ok(r) = typed::decode::<SaluteReport>(m, max_payload)
                && let Some(task) = r.activity.task_id
            {
                self.unit_task.insert(r.unit.unit, task);
            }
        } else if kind == Some(SubjectKind::TaskEvent)
            && let Ok(e) = typed::decode::<TaskEvent>(m, max_payload)
        {
            let note = match e.event {
                EventName::TaskComplete => {
                    self.completed.insert(e.task_id.clone());
                    match self.steered.get(&e.task_id) {
                        Some(k) => format!("recovered after {} steering", k.join(", ")),
                        None => String::new(),
                    }
                }
                EventName::TaskStart => format!("attempt {}", e.attempt),
                _ => String::new(),
            };
            outln!(
                "{t:6.1}s  {:<13} {:<16} {note}",
                e.task_id,
                e.event.as_str()
            );
        }
    }
}

/// The console's URL on stdout, after the summary (where one reads it).
fn say_console_stdout(fabric: &Fabric) {
    match fabric.console() {
        Some(c) => outln!("console:  {} — {}", c.url, c.login_hint(false)),
        None => outln!("console:  not started (console.listen in use? set console.listen)"),
    }
}
