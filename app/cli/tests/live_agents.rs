//! CLI agents supervised turn by turn, live: fake agents that speak the
//! real agents' stream formats (Claude Code stream-json with its
//! PostToolUse hooks; Codex `exec --json` with `exec resume`) run under a
//! real runner, with the XO and the queue as their own `xo` processes on a
//! real nats-server. The XO sees the loop from the runner's live SALUTE
//! reports and steers; the steering reaches the running agent (the hook,
//! or a stop and a resume of its session); the agent changes course; the
//! task completes.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use xo_tests::launcher::Xo;

use xo_bus::{Bus, NatsBus, typed};
use xo_proto::Subjects;
use xo_proto::queue::*;
use xo_tests::NatsServer;

struct Rig {
    _nats: Option<NatsServer>,
    /// Empty: everything on the socket of an `xo up`.
    url: String,
    root: PathBuf,
    children: Vec<Child>,
}

impl Rig {
    fn start() -> Self {
        let nats = NatsServer::start();
        let root = tempfile::tempdir().unwrap().keep();
        Self {
            url: nats.url(),
            _nats: Some(nats),
            root,
            children: Vec::new(),
        }
    }

    /// No server: `xo up` serves its embedded bus on a socket.
    fn embedded() -> Self {
        Self {
            url: String::new(),
            _nats: None,
            root: tempfile::tempdir().unwrap().keep(),
            children: Vec::new(),
        }
    }

    fn spawn(&mut self, name: &str, config: Option<&Path>, args: &[&str]) {
        self.spawn_with(name, config, args, &[]);
    }

    fn spawn_with(
        &mut self,
        name: &str,
        config: Option<&Path>,
        args: &[&str],
        env: &[(&str, PathBuf)],
    ) {
        let log = std::fs::File::create(self.root.join(format!("{name}.log"))).unwrap();
        let mut c = Xo::new().command(&[]);
        c.current_dir(&self.root).args(["--log-format", "json"]);
        if !self.url.is_empty() {
            c.args(["--nats", &self.url]);
        }
        if let Some(cfg) = config {
            c.arg("--config").arg(cfg);
        }
        let r = &self.root;
        c.args(args)
            .env("XO__STATE__DIR", r.join("state"))
            .env("XO__QUEUE__DATA_DIR", r.join("data"))
            .env("XO__RUNNER__SANDBOX", r.join("sandbox"))
            .env("XO__RUNNER__DEFAULT_PROJECT", "live")
            .env("XO__RUNNER__CLAIM_WAIT_MS", "300")
            .env("XO__RUNNER__MICROCOSM", "false")
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log);
        self.children.push(c.spawn().expect("xo starts"));
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.root.join(format!("{name}.log"))).unwrap_or_default()
    }

    fn project(&self) -> PathBuf {
        self.root.join("sandbox").join("live")
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn agent(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fake_agents")
        .join(name)
        .display()
        .to_string()
}

fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

async fn run_goal(rig: &mut Rig, config: &str, task: Task) -> TaskRecord {
    let id = task.task_id.clone();
    let bus = start_goal(rig, config, task, true, &[]).await;
    wait_final(rig, &bus, &id).await
}

/// Starts the queue, a runner with `config` (and the supervisor when
/// `supervised`), and enqueues `task`; the bus to watch it on.
async fn start_goal(
    rig: &mut Rig,
    config: &str,
    task: Task,
    supervised: bool,
    runner_env: &[(&str, PathBuf)],
) -> Bus {
    let cfg = rig.root.join("runner.toml");
    std::fs::write(&cfg, config).unwrap();
    let bus = if rig.url.is_empty() {
        rig.spawn("supervisor", None, &["up"]);
        let sock = rig.root.join("state").join("bus.sock");
        let b = xo_tests::until("xo up serves its socket", async || {
            xo_bus::SocketBus::connect(&sock).await.ok()
        })
        .await;
        Bus::Socket(b)
    } else {
        if supervised {
            rig.spawn("supervisor", None, &["serve", "supervisor"]);
        }
        rig.spawn("queue", None, &["serve", "queue"]);
        Bus::Nats(
            NatsBus::connect(&rig.url, Default::default())
                .await
                .unwrap(),
        )
    };
    rig.spawn_with(
        "runner",
        Some(&cfg),
        &[
            "serve", "runner", "--script", "inline", "--role", "coder", "--unit", "live-1",
        ],
        runner_env,
    );
    let s = Subjects::default();
    let t = Duration::from_secs(10);
    // The queue may still be starting.
    xo_tests::until("the queue answers", async || {
        typed::call(&bus, &s, &Init::default(), t).await.ok()
    })
    .await;
    // Reports are core NATS: the XO listens before any agent runs.
    if supervised {
        xo_tests::until("the supervisor answers", async || {
            typed::call(&bus, &s, &xo_proto::control::ListUnits::default(), t)
                .await
                .ok()
        })
        .await;
    }
    typed::call(
        &bus,
        &s,
        &SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "live supervision".into(),
            project_id: Some("live".into()),
            completed: true,
        },
        t,
    )
    .await
    .unwrap();
    typed::call(&bus, &s, &Enqueue::new(vec![task]), t)
        .await
        .unwrap();
    typed::call(&bus, &s, &Start::default(), t).await.unwrap();
    bus
}

async fn wait_final(rig: &Rig, bus: &Bus, id: &str) -> TaskRecord {
    let (s, t) = (Subjects::default(), Duration::from_secs(10));
    // An agent's run takes minutes at most: the containers' guard.
    let ended = xo_tests::within(xo_tests::CONTAINER_GUARD, async || {
        let tasks = typed::call(bus, &s, &ListTasks::default(), t)
            .await
            .unwrap();
        let rec = tasks.into_iter().find(|r| r.task.task_id == id).unwrap();
        rec.state.is_final().then_some(rec)
    })
    .await;
    if let Some(rec) = ended {
        return rec;
    }
    panic!(
        "the task never ended\n--- runner\n{}\n--- supervisor\n{}",
        rig.log("runner"),
        rig.log("supervisor")
    );
}

#[tokio::test]
async fn a_claude_code_agent_is_steered_mid_run_through_its_hook() {
    claude_steered_through_its_hook(Rig::start()).await;
}

/// The same with no server at all: the runner on the socket of `xo up`.
#[tokio::test]
async fn a_claude_code_agent_is_steered_on_the_embedded_bus() {
    claude_steered_through_its_hook(Rig::embedded()).await;
}

async fn claude_steered_through_its_hook(mut rig: Rig) {
    // In the project directory (`isolation = "directory"`): what the
    // steering channel left there is read after the task completed.
    let config = format!(
        "[runner]\nisolation = \"directory\"\n[runner.driver]\nkind = \"command\"\ncommand = {}\nstream = \"claude\"\nhook = \"claude\"\n",
        toml_list(&["python3".into(), agent("fake_claude.py")])
    );
    let mut task = Task::new("c1", "fix the build", "make build fails; fix it", "coder");
    task.project = Some("live".into());
    task.acceptance_criteria = vec!["file contains: fixed.txt :: [SUPERVISOR] Loop".into()];
    let rec = run_goal(&mut rig, &config, task).await;
    assert_eq!(
        rec.state,
        TaskState::Completed,
        "{rec:?}\n--- runner\n{}",
        rig.log("runner")
    );
    let project = rig.project();
    // The steering reached the agent during its run, through the hook.
    let delivered = std::fs::read_to_string(project.join(".xo/steering.delivered")).unwrap();
    assert!(delivered.contains("[SUPERVISOR] Loop"), "{delivered}");
    assert!(
        !project.join(".xo/steering.pending").exists(),
        "nothing left undelivered"
    );
    // The hook sits beside whatever the project's settings held.
    let settings = std::fs::read_to_string(project.join(".claude/settings.local.json")).unwrap();
    assert!(settings.contains("hook claude"), "{settings}");
    // The XO saw the agent's own turns: many SALUTE turns in one agent run.
    let sup = rig.log("supervisor");
    assert!(
        sup.contains("steering sent") && sup.contains("\"kind\":\"loop\""),
        "{sup}"
    );
    let runner = rig.log("runner");
    assert!(runner.contains("agent run read live"), "{runner}");
}

/// A Codex agent with its hook and a resume: the XO's first loop steering
/// goes through the hook (this agent keeps looping regardless); the second
/// is critical, and stops the agent to resume its thread with it.
#[tokio::test]
async fn a_codex_agent_steered_twice_is_stopped_and_resumed_with_the_steering() {
    let mut rig = Rig::start();
    let fake = agent("fake_codex.py");
    let codex_home = rig.root.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let config = format!(
        "[runner]\nisolation = \"directory\"\nenv_allow = [\"PATH\", \"HOME\", \"CODEX_HOME\"]\n[runner.driver]\nkind = \"command\"\ncommand = {}\nstream = \"codex\"\nhook = \"codex\"\nresume = {}\n",
        toml_list(&[
            "python3".into(),
            fake.clone(),
            "exec".into(),
            "--dangerously-bypass-hook-trust".into(),
            "--json".into(),
            "{prompt}".into()
        ]),
        toml_list(&[
            "python3".into(),
            fake,
            "exec".into(),
            "resume".into(),
            "{session}".into(),
            "{prompt}".into()
        ])
    );
    let mut task = Task::new("x1", "fix the build", "make build fails; fix it", "coder");
    task.project = Some("live".into());
    task.acceptance_criteria = vec!["file contains: resumed.txt :: fake-thread-7".into()];
    let bus = start_goal(
        &mut rig,
        &config,
        task,
        true,
        &[("CODEX_HOME", codex_home.clone())],
    )
    .await;
    let rec = wait_final(&rig, &bus, "x1").await;
    assert_eq!(
        rec.state,
        TaskState::Completed,
        "{rec:?}\n--- runner\n{}",
        rig.log("runner")
    );
    // The first went through Codex's hook, installed in its home.
    let hooks = std::fs::read_to_string(codex_home.join("hooks.json")).unwrap();
    assert!(hooks.contains("hook codex"), "{hooks}");
    let delivered = std::fs::read_to_string(rig.project().join(".xo/steering.delivered")).unwrap();
    assert!(delivered.contains("[SUPERVISOR] Loop"), "{delivered}");
    // Resumed in its own thread, with the XO's steering as the prompt.
    let resumed = std::fs::read_to_string(rig.project().join("resumed.txt")).unwrap();
    assert!(resumed.starts_with("fake-thread-7\n"), "{resumed}");
    assert!(resumed.contains("[SUPERVISOR] Loop"), "{resumed}");
    let runner = rig.log("runner");
    assert!(runner.contains("critical steering"), "{runner}");
}

/// One CLI agent's channel for steering while it runs.
struct Channel {
    name: &'static str,
    config: String,
    env: Vec<(&'static str, PathBuf)>,
}

fn channels(rig: &Rig) -> Vec<Channel> {
    let py = |agent_file: &str, rest: &[&str]| {
        let mut v = vec!["python3".to_string(), agent(agent_file)];
        v.extend(rest.iter().map(|s| s.to_string()));
        toml_list(&v)
    };
    let codex_home = rig.root.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    vec![
        Channel {
            name: "claude (its PostToolUse hook)",
            config: format!(
                "[runner]\nisolation = \"directory\"\n[runner.driver]\nkind = \"command\"\ncommand = {}\nstream = \"claude\"\nhook = \"claude\"\n",
                py("fake_claude.py", &["-p", "{prompt}"])
            ),
            env: vec![],
        },
        Channel {
            name: "codex (its PostToolUse hook)",
            config: format!(
                "[runner]\nisolation = \"directory\"\nenv_allow = [\"PATH\", \"HOME\", \"CODEX_HOME\"]\n[runner.driver]\nkind = \"command\"\ncommand = {}\nstream = \"codex\"\nhook = \"codex\"\nresume = {}\n",
                py(
                    "fake_codex.py",
                    &[
                        "exec",
                        "--dangerously-bypass-hook-trust",
                        "--json",
                        "{prompt}"
                    ]
                ),
                py(
                    "fake_codex.py",
                    &["exec", "resume", "{session}", "{prompt}"]
                ),
            ),
            env: vec![("CODEX_HOME", codex_home)],
        },
        Channel {
            name: "cursor (a resume at its next turn)",
            config: format!(
                "[runner]\nisolation = \"directory\"\n[runner.driver]\nkind = \"command\"\ncommand = {}\nstream = \"cursor\"\nresume = {}\n",
                py(
                    "fake_cursor.py",
                    &["-p", "{prompt}", "--output-format", "stream-json"]
                ),
                py(
                    "fake_cursor.py",
                    &[
                        "-p",
                        "{prompt}",
                        "--resume",
                        "{session}",
                        "--output-format",
                        "stream-json"
                    ]
                ),
            ),
            env: vec![],
        },
        Channel {
            name: "plain command ($XO_STEERING_FILE)",
            config: format!(
                "[runner]\nisolation = \"directory\"\n[runner.driver]\nkind = \"command\"\ncommand = {}\n",
                py("plain_agent.py", &[])
            ),
            env: vec![],
        },
    ]
}

fn read_turn(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let first = text.lines().next()?;
    first.trim_start_matches("turn ").trim().parse().ok()
}

/// Steering reaches every CLI agent while it runs, on its next turn: an
/// operator's steering published when the agent has done a few steps is
/// shown to its model after the step it is in, or the one after (the
/// agent's steps take ~200 ms; the runner hands steering over within
/// ~100 ms). Measured per channel in agent turns and printed.
#[tokio::test]
async fn steering_reaches_every_cli_agent_on_its_next_turn() {
    let mut table = Vec::new();
    for i in 0..4 {
        let mut rig = Rig::start();
        let ch = channels(&rig).remove(i);
        let mut task = Task::new(
            format!("lat{i}"),
            "steps",
            "latency: work in steps until the supervisor steers you",
            "coder",
        );
        task.project = Some("live".into());
        task.acceptance_criteria = vec!["file contains: seen.txt :: stop stepping".into()];
        let id = task.task_id.clone();
        let bus = start_goal(&mut rig, &ch.config, task, false, &ch.env).await;
        let project = rig.project();
        let started = xo_tests::within(xo_tests::HANG_GUARD, async || {
            read_turn(&project.join("agent_turn")).filter(|t| *t >= 3)
        })
        .await;
        assert!(
            started.is_some(),
            "{}: the agent never made 3 steps\n--- runner\n{}",
            ch.name,
            rig.log("runner")
        );
        let steering = xo_proto::Steering {
            v: 1,
            unit: "live-1".into(),
            id: format!("live-1-op-{i}"),
            kind: xo_proto::AnomalyKind::Operator,
            severity: xo_proto::Severity::Warning,
            message: "[SUPERVISOR] Operator: stop stepping and report.".into(),
            turn: 0,
            at: xo_proto::now_ms(),
            evidence: Default::default(),
            source: xo_proto::SteeringSource::Operator,
        };
        let sent = std::time::Instant::now();
        typed::publish(
            &bus,
            &Subjects::default().steer("live-1"),
            &steering,
            Default::default(),
        )
        .await
        .unwrap();
        bus.flush().await.unwrap();
        let at = read_turn(&project.join("agent_turn")).unwrap();
        let rec = wait_final(&rig, &bus, &id).await;
        assert_eq!(
            rec.state,
            TaskState::Completed,
            "{}: {rec:?}\n--- runner\n{}",
            ch.name,
            rig.log("runner")
        );
        let seen = read_turn(&project.join("seen.txt")).expect("seen.txt names a turn");
        let text = std::fs::read_to_string(project.join("seen.txt")).unwrap();
        assert!(text.contains("stop stepping"), "{}: {text}", ch.name);
        assert!(
            seen >= at && seen <= at + 2,
            "{}: published at the agent's turn {at}, shown to it after turn {seen}\n--- runner\n{}",
            ch.name,
            rig.log("runner")
        );
        table.push(format!(
            "{:<36} published at turn {at:>3}, shown after turn {seen:>3} (+{} turn(s), {} ms to the task's end)",
            ch.name,
            seen - at,
            sent.elapsed().as_millis()
        ));
    }
    eprintln!("steering latency per channel:\n{}", table.join("\n"));
}

/// Issue 39, item 3 (seed 003): an agent run past its timeout is
/// `EXEC_FAILURE`, a critical halt. It used to end as `BUDGET_EXHAUSTED`
/// (the task's wall budget was the same bound and fired first) and the
/// queue went on.
#[tokio::test]
async fn an_agent_past_its_timeout_is_an_exec_failure_that_halts_the_queue() {
    let mut rig = Rig::start();
    // The plain agent works 40 s without steering; its timeout is 1 s.
    let config = format!(
        "[runner]\ntimeout_default_ms = 1000\n[runner.driver]\nkind = \"command\"\ncommand = {}\n",
        toml_list(&["python3".into(), agent("plain_agent.py")])
    );
    let task = Task::new("slow", "x", "work", "coder");
    let bus = start_goal(&mut rig, &config, task, false, &[]).await;
    let rec = wait_final(&rig, &bus, "slow").await;
    assert_eq!(rec.state, TaskState::Blocked, "{rec:?}");
    assert_eq!(rec.cause, Some(BlockCause::ExecFailure), "{rec:?}");
    let reason = rec.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("EXEC_FAILURE") && reason.contains("timed out"),
        "{reason}"
    );
    let st = typed::call(
        &bus,
        &Subjects::default(),
        &GetStatus {},
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(st.status, RunStatus::Halted, "{st:?}");
    assert!(
        st.halt_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("TASK_BLOCKED: slow: EXEC_FAILURE")),
        "{st:?}"
    );
}

/// Issue 39: each task runs in its own worktree on a branch `xo/<task>`;
/// once completed its diff is kept with the task (`xo task diff`), and
/// with `runner.merge = "ff"` (the default) its work reaches the
/// project's main and the project directory. A second task, started
/// after the first finished, starts from the main that has the first's
/// work. The queue and the runner are their own `xo` processes on a real
/// nats-server; the agent is the script driver writing real files.
#[tokio::test]
async fn each_task_works_in_its_own_tree_and_its_diff_reaches_the_project() {
    let mut rig = Rig::start();
    std::fs::create_dir_all(rig.project()).unwrap();
    std::fs::write(rig.project().join("README"), "before\n").unwrap();
    let script = |write: &str, content: &str| {
        format!(
            "```xo-script\nturn_ms = 0\n[[run]]\nsteps = [{{ run = \"test ! -e ../live && pwd > where.txt\" }}, {{ write = \"{write}\", content = \"{content}\" }}, {{ reply = '{{\"status\": \"ok\", \"message\": \"wrote {write}\"}}' }}]\n```"
        )
    };
    let first = Task::new(
        "wt-1",
        "add notes",
        script("notes.txt", "one\\ntwo\\n"),
        "coder",
    );
    let bus = start_goal(&mut rig, "", first, false, &[]).await;
    let rec = wait_final(&rig, &bus, "wt-1").await;
    assert_eq!(
        rec.state,
        TaskState::Completed,
        "{rec:?}\n{}",
        rig.log("runner")
    );
    let d = rec.diff.clone().expect("a completed task's diff");
    assert_eq!(d.branch, "xo/wt-1");
    let paths: Vec<&str> = d.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["notes.txt", "where.txt"], "{d:?}");
    assert_eq!(d.files[0].added, Some(2));
    assert!(
        d.merged.as_deref().is_some_and(|m| m.starts_with("main ")),
        "{d:?}"
    );
    // It ran in its own tree, not in the project directory.
    let tree = rig.root.join("sandbox/.xo-worktrees/live/wt-1");
    let ran_in = std::fs::read_to_string(rig.project().join("where.txt")).unwrap();
    assert_eq!(ran_in.trim(), tree.display().to_string());
    assert!(
        !tree.exists(),
        "its tree is removed once its work is on its branch"
    );
    // ff: the project directory has its work.
    assert_eq!(
        std::fs::read_to_string(rig.project().join("notes.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert_eq!(
        std::fs::read_to_string(rig.project().join("README")).unwrap(),
        "before\n"
    );
    // `xo task diff` shows it.
    let o = Xo::new()
        .command(&[])
        .current_dir(&rig.root)
        .args(["--nats", &rig.url, "task", "diff", "wt-1"])
        .env("XO__STATE__DIR", rig.root.join("state"))
        .env("XO__QUEUE__DATA_DIR", rig.root.join("data"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.starts_with("wt-1: branch xo/wt-1 · 2 files, +3 -0"),
        "{out}"
    );
    assert!(
        out.contains("+++ b/notes.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"),
        "{out}"
    );
    // The second task starts from the main that holds the first's work.
    let second = Task::new(
        "wt-2",
        "more notes",
        "```xo-script\nturn_ms = 0\n[[run]]\nsteps = [{ run = \"cat notes.txt > seen.txt\" }, { reply = '{\"status\": \"ok\", \"message\": \"seen\"}' }]\n```",
        "coder",
    );
    typed::call(
        &bus,
        &Subjects::default(),
        &Enqueue::new(vec![second]),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    // The goal was met with the queue empty: started again for it.
    typed::call(
        &bus,
        &Subjects::default(),
        &Start::default(),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let rec = wait_final(&rig, &bus, "wt-2").await;
    assert_eq!(rec.state, TaskState::Completed, "{rec:?}");
    assert_eq!(
        std::fs::read_to_string(rig.project().join("seen.txt")).unwrap(),
        "one\ntwo\n"
    );
    // A task that has no diff is said so.
    let o = Xo::new()
        .command(&[])
        .current_dir(&rig.root)
        .args(["--nats", &rig.url, "task", "diff", "nope"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no task \"nope\""));
}
