//! The command line: every command and flag of `xo` (clap), and nothing
//! else. `main.rs` hands each command to the module that runs it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use crate::globals::Globals;

#[derive(Debug, Parser)]
#[command(
    name = "xo",
    version,
    about = "XO: a supervision fabric for fleets of AI agents"
)]
pub struct Cli {
    #[command(flatten)]
    pub globals: Globals,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
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
        /// Only the units that need a person (stuck after escalation…), the
        /// longest waiting first, each with its reason and last evidence.
        #[arg(long)]
        needs: bool,
    },
    /// Send an operator's steering to a unit.
    Steer {
        unit: String,
        text: String,
        /// info, warning, urgent or critical.
        #[arg(long, default_value = "warning")]
        severity: String,
    },
    /// Acknowledge a unit in trouble: in hand, and why. It sinks below the
    /// units of its colour nobody has acknowledged, until the time is up or
    /// it gets worse.
    Ack {
        unit: String,
        /// What is being done about it.
        #[arg(long)]
        why: String,
        /// For how long: 30m, 2h, 1d (1 minute to 7 days).
        #[arg(long = "for", default_value = "30m")]
        for_: String,
        /// Who acknowledges (default: $USER).
        #[arg(long)]
        by: Option<String>,
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
        /// Print, per file and record kind, the records read, mapped,
        /// skipped by name, not known and not readable (on stderr).
        #[arg(long)]
        stats: bool,
        /// Import what could be read of a file whose records the sensor
        /// could not all read (else `xo import` exits 1 naming them).
        #[arg(long)]
        lenient: bool,
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
        /// A session's spend cap in USD: a warning at 80%, and at 100% its
        /// hook refuses its next tool call and the unit needs you.
        #[arg(long, default_value_t = 0.0)]
        max_cost: f64,
        /// A session's token cap (input and output), as --max-cost.
        #[arg(long, default_value_t = 0)]
        max_tokens: u64,
        /// The cost cap of all the watched sessions of one day (UTC).
        #[arg(long, default_value_t = 0.0)]
        max_cost_per_day: f64,
        /// The token cap of all the watched sessions of one day (UTC).
        #[arg(long, default_value_t = 0)]
        max_tokens_per_day: u64,
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
    /// Run by the `xo-bench` binary beside `xo` (`xo bench --help` lists them).
    #[command(disable_help_flag = true)]
    Bench {
        /// The bench and its options, handed to `xo-bench` as they are.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
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
    /// One task: `xo task diff ID` shows what it changed on its branch.
    Task {
        #[command(subcommand)]
        cmd: TaskCmd,
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
pub enum FleetCmd {
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
pub enum KnowledgeCmd {
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
    /// Seed documents from `DIR/<category>/*.md` (as the operator).
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
pub enum ReviewCmd {
    /// Every review run: reviewer, outcome, task count, summary, tokens, cost.
    Log {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum GoalCmd {
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
pub enum StoreCmd {
    /// Checks every store file (or those given) and rewrites a damaged one
    /// with only its good records, after a backup; lists what was dropped.
    /// Stop `xo up` first.
    Repair {
        /// Files to repair (default: every `.kv` and `.log` of the store).
        files: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum TaskCmd {
    /// What a completed task changed on its branch `xo/<task>` (worktree
    /// isolation): where it went, its files with added and removed lines,
    /// and the patch.
    Diff {
        task: String,
        /// Only the files and their lines, not the patch.
        #[arg(long)]
        stat: bool,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCmd {
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
pub enum ServeCmd {
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
pub enum RadioCmd {
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
        /// Each decision in words with the evidence it rested on: the rule
        /// and what was observed, the stretch it fell in (and which of its
        /// three steerings it was), and the actions it names, with the
        /// command each ran and the line it got back.
        #[arg(long, conflicts_with = "summary")]
        explain: bool,
    },
}
