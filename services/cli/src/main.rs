//! `xo`: every XO service and every operator command in one binary.
//!
//! # Layout
//!
//! - `main.rs`: the command line (clap) and dispatch.
//! - [`connect`]: which bus a command talks to (NATS, the local socket of a
//!   running `xo up`, or a clear error saying how to start one).
//! - [`fabric`]: the one place that starts the services of a process (a
//!   [`fabric::Plan`]) and stops them in order.
//! - [`services`]: `xo up` and `xo serve …`, each a plan run by the fabric.
//! - [`demo`]: `xo up --demo` (a plan with three scripted runners, and a timeline).
//! - [`hook`]: `xo hook claude`, Claude Code's hook that delivers steering to a running agent.
//! - [`watch`]: `xo watch FORMAT DIR…` (live transcripts of agents outside XO → SALUTE, steering via the hook).
//! - [`import`]: `xo import FORMAT FILE…` (agent logs → SALUTE lines, via `xo-sensor`).
//! - [`ops`]: operator commands (`report`, `tap`, `units`, `steer`, `radio replay`).
//! - [`queue_ops`]: the control plane (`init`, `goal`, `enqueue`, `start`, `status`, `audit`…).
//! - [`knowledge_ops`]: `knowledge ls|show|seed|deprecate`, `directives`, `review log`.
//! - [`nats_config`]: `xo nats-config` (NATS users and permissions per service and runner).
//! - [`bench`]: `xo bench radio|queue|pipeline`.

#[macro_use]
mod term;
mod bench;
mod connect;
mod demo;
mod fabric;
mod hook;
mod import;
mod knowledge_ops;
mod nats_config;
mod ops;
mod queue_ops;
mod services;
mod singletons;
mod slots;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// glibc's allocator spent ~40% of the supervisor's CPU on cross-thread
/// frees under fleet load (see docs/performance.md); mimalloc does not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use xo_runtime::XoConfig;

#[derive(Debug, Parser)]
#[command(
    name = "xo",
    version,
    about = "XO: a supervision fabric for fleets of AI agents"
)]
struct Cli {
    /// Config file (default: ./xo.toml if present).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// NATS server URL; without it, commands use the socket of a running `xo up`.
    #[arg(long, global = true, env = "XO_NATS_URL")]
    nats: Option<String>,
    /// Subject prefix (config org.prefix).
    #[arg(long, global = true)]
    prefix: Option<String>,
    /// State directory (config state.dir).
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
    /// Log format: pretty or json (config telemetry.log_format).
    #[arg(long, global = true)]
    log_format: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run every service in one process on the embedded bus (or NATS with --nats).
    Up {
        /// Three scripted runners work a small goal; one stalls, one loops, the XO steers them.
        #[arg(long)]
        demo: bool,
        /// With --demo: serve the console too, print its URL, and keep the
        /// fabric running after the goal until ctrl-c, to look around.
        #[arg(long, requires = "demo")]
        keep: bool,
    },
    /// Run one service (for containers).
    Serve {
        #[command(subcommand)]
        service: ServeCmd,
    },
    /// Publish a SALUTE report from a JSON file (or `-` for stdin).
    Report {
        #[arg(default_value = "-")]
        file: String,
    },
    /// Live decoded view of bus traffic.
    Tap {
        /// Subject or wildcard (default: everything under the prefix).
        subject: Option<String>,
        /// One JSON object a line.
        #[arg(long)]
        json: bool,
        /// Exit after this many messages.
        #[arg(long)]
        count: Option<u64>,
    },
    /// List units, or show one.
    Units {
        unit: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Send an operator's steering to a unit.
    Steer {
        unit: String,
        text: String,
        /// info, warning, urgent or critical.
        #[arg(long, default_value = "warning")]
        severity: String,
    },
    /// Recorded agent runs (claude, cursor, codex, openhands, swe-agent) as
    /// SALUTE JSON lines on stdout, one report a turn.
    Import {
        /// claude, cursor, codex, openhands or swe-agent.
        format: String,
        /// Transcripts, stream logs, rollouts, event files or trajectories; one run each.
        #[arg(required = true)]
        files: Vec<String>,
        /// The role the runs are checked as (its doctrine thresholds;
        /// `agent` has thresholds measured on real runs).
        #[arg(long, default_value = "agent")]
        role: String,
        /// The runs' outcome, when the logs do not tell it: succeeded or failed.
        #[arg(long)]
        label: Option<String>,
    },
    /// Supervise agents running outside XO from their live transcripts:
    /// every session file in the directories is a unit.
    Watch {
        /// claude, cursor, codex or openhands.
        format: String,
        /// Directories of live transcripts (e.g. ~/.claude/projects, ~/.codex/sessions).
        #[arg(required = true)]
        dirs: Vec<String>,
        /// The role the sessions are checked as (`agent` has thresholds
        /// measured on real runs).
        #[arg(long, default_value = "agent")]
        role: String,
        /// How often the files are looked at (ms).
        #[arg(long, default_value_t = 500)]
        poll_ms: u64,
        /// Read the sessions already in the directories from their start
        /// (reported, never steered); by default the watch starts at
        /// their end and reports only what is written from now on.
        #[arg(long)]
        from_start: bool,
    },
    /// Agent hooks: `xo hook claude` (Claude Code's PostToolUse,
    /// PostToolUseFailure and Stop hook) and `xo hook codex` (Codex's
    /// PostToolUse and Stop hook) hand the XO's pending steering to a
    /// running agent; `--install DIR` adds the hook to a project.
    Hook {
        /// The agent: claude or codex.
        agent: String,
        /// Add the hook to the project in DIR (default: here) instead of
        /// answering one: `.claude/settings.local.json`, or
        /// `.codex/hooks.json` and `[features] codex_hooks` in
        /// `.codex/config.toml`.
        #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = ".")]
        install: Option<std::path::PathBuf>,
    },
    /// The radio check offline.
    Radio {
        #[command(subcommand)]
        cmd: RadioCmd,
    },
    /// Benchmarks that print figures against a baseline measured in the same run.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCmd,
    },
    /// Print the effective configuration (after file, environment and flags).
    Config,
    /// Print a nats-server configuration: a user per service and per runner
    /// unit, each runner confined to its own reports, heartbeats and steering.
    NatsConfig {
        /// A runner unit id (repeat for each).
        #[arg(long = "runner")]
        runners: Vec<String>,
        #[arg(long, default_value_t = 4222)]
        port: u16,
        /// JetStream store directory (default: nats-server's).
        #[arg(long, default_value = "")]
        store_dir: String,
        /// One user shared by runners whose unit ids are not known in
        /// advance (compose's `--scale`): confined to runner verbs, not to
        /// one unit's subjects. Its inbox prefix is `_INBOX_<user>`.
        #[arg(long)]
        shared_runner: Option<String>,
        /// Sharded supervision: spread the units' reports and heartbeats
        /// over this many partitions (the subject mapping the supervisors
        /// need; the same as their supervisor.partitions). Default: the
        /// configuration's supervisor.partitions.
        #[arg(long)]
        partitions: Option<u32>,
        /// A node of a NATS cluster: the route URL of every node (repeat;
        /// `nats://nats-2:6222`). Each node names itself from
        /// $XO_NATS_SERVER_NAME, so one file serves all of them.
        #[arg(long = "cluster-route")]
        cluster_routes: Vec<String>,
    },
    /// Initialise the queue (status HALTED).
    Init {
        /// auto or manual.
        #[arg(long, default_value = "auto")]
        mode: String,
        /// Reconcile the task list with a Manager task after every completed task.
        #[arg(long)]
        manager: bool,
        /// Start over: drops every task.
        #[arg(long)]
        force: bool,
    },
    /// The goal.
    Goal {
        #[command(subcommand)]
        cmd: GoalCmd,
    },
    /// Enqueue tasks from a JSON file (one task or an array; `-` for stdin).
    Enqueue { file: String },
    /// Set the queue RUNNING and start handing out work.
    Start,
    /// MANUAL mode: allow one more task to be handed out.
    Step,
    /// Halt the queue: no task is handed out until `xo resume`.
    Halt {
        #[arg(long)]
        reason: String,
    },
    /// Set the queue RUNNING again.
    Resume,
    /// Status, iteration, goal, queue, task counts, last validation report, mode.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// List tasks.
    Tasks {
        /// Only tasks in this state (pending, running, completed, blocked, …).
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Answer a task awaiting an operator's response.
    Answer { task: String, text: String },
    /// Retry a blocked task.
    Retry { task: String },
    /// Cancel a task.
    Cancel { task: String },
    /// The audit log.
    Audit {
        #[command(subcommand)]
        cmd: AuditCmd,
    },
    /// The embedded store's files (`<state.dir>/state`).
    Store {
        #[command(subcommand)]
        cmd: StoreCmd,
    },
    /// The knowledge store.
    Knowledge {
        #[command(subcommand)]
        cmd: KnowledgeCmd,
    },
    /// Directives of the review supervisors and whether they were consumed.
    Directives {
        #[arg(long)]
        json: bool,
    },
    /// The review supervisors.
    Review {
        #[command(subcommand)]
        cmd: ReviewCmd,
    },
    /// Runner containers managed by the XO (`fleet.backend = "docker"`).
    Fleet {
        #[command(subcommand)]
        cmd: FleetCmd,
    },
}

#[derive(Debug, Subcommand)]
enum FleetCmd {
    /// Desired runners per role, their containers, failed roles.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Set a role's desired runners (clears a failed role).
    Scale { role: String, replicas: u32 },
    /// Restart one unit's container.
    Restart { unit: String },
}

#[derive(Debug, Subcommand)]
enum KnowledgeCmd {
    /// List documents (and files that do not parse).
    Ls {
        /// conventions, design, lessons or domain.
        category: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// One document, with its changelog.
    Show {
        /// `<category>/<name>`
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Seed documents from DIR/<category>/*.md (as the operator).
    Seed { dir: PathBuf },
    /// Deprecate a document: it is never injected again.
    Deprecate {
        id: String,
        #[arg(long)]
        reason: String,
    },
    /// Documents a reviewer asked you to confirm (seed 001's user review
    /// queue); with an id, accept it (established, given to agents) or
    /// reject it (deprecated). Either is a KNOWLEDGE_REVIEWED audit line.
    Review {
        /// `<category>/<name>`; none: list what waits.
        id: Option<String>,
        #[arg(long, conflicts_with = "reject")]
        accept: bool,
        #[arg(long)]
        reject: bool,
        /// Why, kept in the changelog and the audit.
        #[arg(long, default_value = "")]
        note: String,
    },
}

#[derive(Debug, Subcommand)]
enum ReviewCmd {
    /// Every review run: reviewer, outcome, task count, summary, tokens, cost.
    Log {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum GoalCmd {
    /// Set the goal.
    Set {
        description: String,
        #[arg(long)]
        project: Option<String>,
        /// The goal is met: an exhausted queue then completes instead of halting.
        #[arg(long)]
        completed: bool,
        /// The goal's cost budget in USD; spent, the queue halts with
        /// BUDGET_EXHAUSTED (0: `queue.goal_budget_usd`).
        #[arg(long, default_value_t = 0.0)]
        budget_usd: f64,
    },
}

#[derive(Debug, Subcommand)]
enum StoreCmd {
    /// Checks every store file (or those given) and rewrites a damaged one
    /// with only its good records, after a backup; lists what was dropped.
    /// Stop `xo up` first.
    Repair {
        /// Files to repair (default: every `.kv` and `.log` of the store).
        files: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCmd {
    /// Check the hash chain, then the file line for line against the store's
    /// copy; report the first line where either breaks.
    Verify {
        #[arg(long, default_value = "default")]
        project: String,
    },
    /// Print the log; with --follow, keep printing new lines.
    Tail {
        #[arg(long, default_value = "default")]
        project: String,
        #[arg(long)]
        follow: bool,
        /// Only the last N lines first.
        #[arg(short = 'n', long)]
        lines: Option<usize>,
    },
}

#[derive(Debug, Subcommand)]
enum ServeCmd {
    /// The XO supervisor (radio checks, steering, liveness).
    Supervisor,
    /// The durable queue (tasks, leases, audit).
    Queue,
    /// The knowledge store (documents, ownership, selection).
    Knowledge,
    /// The notifier: alerts to the webhooks of `[alerts]`, with retries and
    /// a dead-letter file (`xo serve supervisor` and `xo up` run it too).
    Notify,
    /// The web console: pages, JSON API, live events, /metrics (a bus client;
    /// on NATS, or beside a running `xo up` through its socket).
    Console {
        /// Address to listen on (config console.listen, default 127.0.0.1:7878).
        #[arg(long)]
        listen: Option<String>,
        /// Hide and refuse every action (config console.read_only).
        #[arg(long)]
        read_only: bool,
    },
    /// A specialist: claims tasks of its role and runs them through the supervised pipeline.
    Runner {
        /// The role whose tasks it claims (coder, architect, reviewer, manager, …).
        #[arg(long)]
        role: String,
        /// Unit id, stable across restarts (default `<role>-<hostname>`).
        #[arg(long, env = "XO_UNIT")]
        unit: Option<String>,
        /// Agent driver: command, openai or script (config runner.driver.kind).
        #[arg(long)]
        driver: Option<String>,
        /// Script file for the script driver (config runner.driver.script).
        #[arg(long)]
        script: Option<String>,
        /// Sandbox root (config runner.sandbox).
        #[arg(long)]
        sandbox: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum RadioCmd {
    /// Run recorded SALUTE reports (JSON lines) through the detector; print
    /// one JSON line per steering decision.
    Replay {
        file: String,
        /// One line per run instead: turns, steering by kind, the first
        /// detection and what the run spent after it; steered and unsteered
        /// runs by outcome.
        #[arg(long)]
        summary: bool,
        /// With --summary: JSON lines.
        #[arg(long)]
        json: bool,
    },
}

impl Cli {
    fn overrides(&self) -> Vec<(String, String)> {
        let mut o = Vec::new();
        if let Some(n) = &self.nats {
            o.push(("nats.url".into(), n.clone()));
        }
        if let Some(p) = &self.prefix {
            o.push(("org.prefix".into(), p.clone()));
        }
        if let Some(d) = &self.state_dir {
            o.push(("state.dir".into(), d.display().to_string()));
        }
        if let Some(f) = &self.log_format {
            o.push(("telemetry.log_format".into(), f.clone()));
        }
        o
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cfg = match XoConfig::load(cli.config.as_deref(), &cli.overrides()) {
        Ok(c) => c,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Every connection takes a descriptor: use what the system allows.
    xo_runtime::limits::raise_fd_limit();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let res = rt.block_on(dispatch(cli.cmd, cfg));
    match res {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The configuration again with more overrides (flags of one subcommand).
fn reload(cfg: &XoConfig, extra: Vec<(String, String)>) -> anyhow::Result<XoConfig> {
    let mut cfg = cfg.clone();
    for (k, v) in extra {
        match k.as_str() {
            "runner.driver.kind" => {
                cfg.runner.driver.kind =
                    serde_json::from_value(serde_json::Value::String(v.clone())).map_err(|_| {
                        anyhow::anyhow!("--driver {v:?}: use command, openai or script")
                    })?
            }
            "runner.driver.script" => cfg.runner.driver.script = v,
            "runner.sandbox" => cfg.runner.sandbox = v,
            _ => {}
        }
    }
    cfg.validate()?;
    Ok(cfg)
}

async fn dispatch(cmd: Cmd, cfg: XoConfig) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Up { demo: true, keep } => demo::demo(cfg, keep).await,
        Cmd::Up { demo: false, .. } => services::up(cfg).await,
        Cmd::Serve {
            service: ServeCmd::Supervisor,
        } => services::serve(cfg, services::supervisor_plan(), "xo-supervisor").await,
        Cmd::Serve {
            service: ServeCmd::Queue,
        } => {
            let plan = fabric::Plan {
                queue: true,
                ..Default::default()
            };
            services::serve(cfg, plan, "xo-queue").await
        }
        Cmd::Serve {
            service:
                ServeCmd::Runner {
                    role,
                    unit,
                    driver,
                    script,
                    sandbox,
                },
        } => {
            let mut o = Vec::new();
            if let Some(d) = driver {
                o.push(("runner.driver.kind".to_string(), d));
            }
            if let Some(s) = script {
                o.push(("runner.driver.script".to_string(), s));
            }
            if let Some(s) = sandbox {
                o.push(("runner.sandbox".to_string(), s));
            }
            let cfg = if o.is_empty() { cfg } else { reload(&cfg, o)? };
            services::serve_runner(cfg, role, unit).await
        }
        Cmd::Init {
            mode,
            manager,
            force,
        } => queue_ops::init(&cfg, &mode, manager, force).await,
        Cmd::Goal {
            cmd:
                GoalCmd::Set {
                    description,
                    project,
                    completed,
                    budget_usd,
                },
        } => queue_ops::goal(&cfg, description, project, completed, budget_usd).await,
        Cmd::Enqueue { file } => queue_ops::enqueue(&cfg, &file).await,
        Cmd::Start => queue_ops::simple(&cfg, xo_proto::queue::Start {}).await,
        Cmd::Step => queue_ops::simple(&cfg, xo_proto::queue::Step {}).await,
        Cmd::Resume => queue_ops::simple(&cfg, xo_proto::queue::Resume {}).await,
        Cmd::Halt { reason } => queue_ops::simple(&cfg, xo_proto::queue::Halt { reason }).await,
        Cmd::Status { json } => queue_ops::status(&cfg, json).await,
        Cmd::Tasks { state, json } => queue_ops::tasks(&cfg, state, json).await,
        Cmd::Answer { task, text } => {
            queue_ops::task_op(
                &cfg,
                xo_proto::queue::Answer {
                    task_id: task,
                    text,
                },
            )
            .await
        }
        Cmd::Retry { task } => {
            queue_ops::task_op(&cfg, xo_proto::queue::RetryTask { task_id: task }).await
        }
        Cmd::Cancel { task } => {
            queue_ops::task_op(&cfg, xo_proto::queue::Cancel { task_id: task }).await
        }
        Cmd::Audit {
            cmd: AuditCmd::Verify { project },
        } => queue_ops::audit_verify(&cfg, &project).await,
        Cmd::Store {
            cmd: StoreCmd::Repair { files },
        } => ops::store_repair(&cfg, &files),
        Cmd::Audit {
            cmd:
                AuditCmd::Tail {
                    project,
                    follow,
                    lines,
                },
        } => queue_ops::audit_tail(&cfg, &project, follow, lines).await,
        Cmd::Knowledge {
            cmd: KnowledgeCmd::Ls { category, json },
        } => knowledge_ops::ls(&cfg, category, json).await,
        Cmd::Knowledge {
            cmd: KnowledgeCmd::Show { id, json },
        } => knowledge_ops::show(&cfg, id, json).await,
        Cmd::Knowledge {
            cmd: KnowledgeCmd::Seed { dir },
        } => knowledge_ops::seed(&cfg, &dir).await,
        Cmd::Knowledge {
            cmd: KnowledgeCmd::Deprecate { id, reason },
        } => knowledge_ops::deprecate(&cfg, id, reason).await,
        Cmd::Knowledge {
            cmd:
                KnowledgeCmd::Review {
                    id,
                    accept,
                    reject,
                    note,
                },
        } => knowledge_ops::review(&cfg, id, accept, reject, note).await,
        Cmd::Fleet { cmd } => {
            let bus = connect::client_bus(&cfg).await?;
            let t = std::time::Duration::from_secs(60);
            let s = cfg.subjects();
            let (st, json) = match cmd {
                FleetCmd::Ls { json } => (
                    xo_bus::typed::call(&bus, &s, &xo_proto::fleet::FleetLs {}, t).await,
                    json,
                ),
                FleetCmd::Scale { role, replicas } => (
                    xo_bus::typed::call(
                        &bus,
                        &s,
                        &xo_proto::fleet::FleetScale { role, replicas },
                        t,
                    )
                    .await,
                    false,
                ),
                FleetCmd::Restart { unit } => (
                    xo_bus::typed::call(&bus, &s, &xo_proto::fleet::FleetRestart { unit }, t).await,
                    false,
                ),
            };
            let st = st.map_err(|e| match e {
                xo_bus::typed::CallError::Bus(xo_bus::BusError::NoResponders { .. }) => anyhow::anyhow!(
                    "no fleet manager is running: set fleet.backend = \"docker\" for the supervisor"
                ),
                other => other.into(),
            })?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&st)?);
            } else {
                outln!(
                    "desired: {}",
                    st.desired
                        .iter()
                        .map(|(r, n)| format!("{r}={n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                if !st.failed.is_empty() {
                    outln!(
                        "FAILED roles (past their restart intensity): {}",
                        st.failed.join(", ")
                    );
                }
                for u in &st.units {
                    outln!(
                        "{:<20} {:<12} {:<8} {}",
                        u.unit,
                        u.role,
                        if u.running { "running" } else { "exited" },
                        u.container
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Directives { json } => knowledge_ops::directives(&cfg, json).await,
        Cmd::Review {
            cmd: ReviewCmd::Log { json },
        } => knowledge_ops::review_log(&cfg, json),
        Cmd::Serve {
            service: ServeCmd::Console { listen, read_only },
        } => {
            let mut cfg = cfg;
            if let Some(l) = listen {
                cfg.console.listen = l;
            }
            cfg.console.read_only |= read_only;
            cfg.console.enabled = true;
            cfg.validate()?;
            let plan = fabric::Plan {
                console: fabric::ConsoleMode::Required,
                ..Default::default()
            };
            services::serve(cfg, plan, "xo-console").await
        }
        Cmd::Serve {
            service: ServeCmd::Knowledge,
        } => {
            let plan = fabric::Plan {
                knowledge: true,
                ..Default::default()
            };
            services::serve(cfg, plan, "xo-knowledge").await
        }
        Cmd::Serve {
            service: ServeCmd::Notify,
        } => {
            let plan = fabric::Plan {
                notify: true,
                ..Default::default()
            };
            services::serve(cfg, plan, "xo-notify").await
        }
        Cmd::Report { file } => ops::report(&cfg, &file).await,
        Cmd::Tap {
            subject,
            json,
            count,
        } => ops::tap(&cfg, subject, json, count).await,
        Cmd::Units { unit, json } => ops::units(&cfg, unit, json).await,
        Cmd::Steer {
            unit,
            text,
            severity,
        } => ops::steer(&cfg, unit, text, &severity).await,
        Cmd::Radio {
            cmd:
                RadioCmd::Replay {
                    file,
                    summary,
                    json,
                },
        } => ops::replay(&cfg, &file, summary, json),
        Cmd::Watch {
            format,
            dirs,
            role,
            poll_ms,
            from_start,
        } => {
            let args = xo_runner::watch::WatchArgs {
                format,
                dirs,
                role,
                poll_ms,
                from_start,
            };
            watch::watch(&cfg, args, services::shutdown_signal()).await
        }
        Cmd::Hook { agent, install } => match install {
            Some(dir) => hook::install(&agent, &dir).await,
            None => hook::answer_hook(&agent),
        },
        Cmd::Import {
            format,
            files,
            role,
            label,
        } => import::import(&import::ImportArgs {
            format,
            files,
            role,
            label,
            context_limit: cfg.runner.context_limit,
        }),
        Cmd::Bench { what } => bench::run(&cfg, what).await,
        Cmd::NatsConfig {
            runners,
            port,
            store_dir,
            shared_runner,
            partitions,
            cluster_routes,
        } => {
            let text = nats_config::render(&nats_config::Spec {
                prefix: &cfg.org.prefix,
                runners: &runners,
                shared_runner: shared_runner.as_deref(),
                port,
                jetstream_dir: &store_dir,
                partitions: partitions.unwrap_or(cfg.supervisor.partitions),
                cluster_routes: &cluster_routes,
            })
            .map_err(anyhow::Error::msg)?;
            out!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Config => {
            // Secrets are never printed: set or not, that is all it says.
            let mut shown = cfg.clone();
            if !shown.nats.password.is_empty() {
                shown.nats.password = "*** (set)".into();
            }
            shown.nats.url = xo_bus::nats::redact_url(&shown.nats.url);
            for w in &mut shown.alerts.webhooks {
                if !w.authorization.is_empty() && !w.authorization.starts_with("env:") {
                    w.authorization = "*** (set)".into();
                }
            }
            outln!("{}", serde_json::to_string_pretty(&shown)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
