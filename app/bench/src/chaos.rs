//! `xo bench chaos`: the fabric as separate processes over a real
//! nats-server — two queues (one active, one standing by), the supervisor,
//! the knowledge store and runners whose agents are real child processes —
//! working a goal while a random one of them, nats-server included, is
//! SIGKILLed every few seconds and started again, as an orchestrator would.
//!
//! Then the invariants: every task completed exactly once (one
//! `TASK_COMPLETE` in the audit log) or reported blocked/failed; every
//! acknowledged enqueue present; the audit chain intact and equal to the
//! store's copy; no agent process left behind; every runner unit supervised
//! again (known to the supervisor and not stale) after its restarts. The
//! baseline is the same work measured calm, in the same run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use xo_bus::{Bus, Client, NatsBus};
use xo_proto::Subjects;
use xo_proto::queue::*;
use xo_runtime::XoConfig;

use super::util::{free_port, tempfile_dir, verdict};

#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// How long to keep killing.
    #[arg(long, default_value_t = 120)]
    pub secs: u64,
    /// A kill every this many ms (then the victim is started again).
    #[arg(long, default_value_t = 3_000)]
    pub kill_every_ms: u64,
    /// Runner processes (role coder).
    #[arg(long, default_value_t = 3)]
    pub runners: usize,
    /// Tasks per batch (a new batch whenever one is done, while killing).
    #[arg(long, default_value_t = 30)]
    pub tasks: usize,
    /// Stop killing after this many kills, even before --secs (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub kills: u32,
    /// Seed of the victim choice (default: the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The nats-server binary.
    #[arg(long, default_value = "nats-server", env = "XO_NATS_SERVER")]
    pub nats_server: String,
}

const T: Duration = Duration::from_secs(3);

/// A child process the bench can kill and start again.
struct Proc {
    name: String,
    cmd: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    kills: u32,
}

impl Proc {
    fn new(name: &str, cmd: &Path, args: &[&str]) -> Self {
        Self {
            name: name.into(),
            cmd: cmd.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            child: None,
            kills: 0,
        }
    }

    fn start(&mut self, log: &Path) -> anyhow::Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log.join(format!("{}.log", self.name)))?;
        let child = Command::new(&self.cmd)
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            self.kills += 1;
        }
    }

    /// SIGINT, then the exit (or SIGKILL after 20 s).
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            for _ in 0..400 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// xorshift: enough to choose victims, no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn batch(tag: &str, n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| Task::new(format!("{tag}-{i:03}"), "chaos", "do the thing", "coder"))
        .collect()
}

/// Retries through outages until `deadline`.
async fn must<R: xo_proto::Request>(
    c: &Client,
    r: &R,
    deadline: Duration,
) -> anyhow::Result<R::Response> {
    let begun = Instant::now();
    loop {
        // Any refusal too: a queue failing over refuses until it leads.
        if let Ok(v) = c.call(r).await {
            return Ok(v);
        }
        if begun.elapsed() > deadline {
            bail!(
                "no answer to {} for {deadline:?}",
                std::any::type_name::<R>()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Enqueues and waits until every task of the batch is finished.
async fn work(c: &Client, tasks: Vec<Task>) -> anyhow::Result<Vec<String>> {
    let ids = must(c, &Enqueue::new(tasks), Duration::from_secs(60)).await?;
    must(c, &Start::default(), Duration::from_secs(60)).await?;
    Ok(ids)
}

async fn finished(c: &Client) -> Option<bool> {
    let st = c.call(&GetStatus {}).await.ok()?;
    Some(
        matches!(st.status, RunStatus::Completed | RunStatus::Halted)
            && st.counts.get("pending").copied().unwrap_or(0) == 0
            && st.counts.get("running").copied().unwrap_or(0) == 0,
    )
}

async fn wait_finished(c: &Client, deadline: Duration) -> anyhow::Result<()> {
    let begun = Instant::now();
    while finished(c).await != Some(true) {
        if begun.elapsed() > deadline {
            bail!("the goal did not finish within {deadline:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

pub async fn run(_cfg: &XoConfig, a: ChaosArgs) -> anyhow::Result<ExitCode> {
    let xo = crate::util::xo_exe()?;
    let dir = tempfile_dir::Dir::new("chaos")?;
    let root = dir.0.clone();
    let logs = root.join("logs");
    std::fs::create_dir_all(&logs)?;
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let marker = format!("xo-chaos-agent-{}", std::process::id());
    // One configuration for every process: short leases so the kills cost
    // seconds, and a command agent (a real child process per task).
    let config = root.join("xo.toml");
    std::fs::write(
        &config,
        format!(
            r#"[nats]
url = "{url}"
[state]
dir = "{state}"
[queue]
data_dir = "{data}"
lease_ms = 3000
leader_lease_ms = 2000
[supervisor]
stale_after_ms = 4000
[knowledge]
dir = "{knowledge}"
[runner]
sandbox = "{sandbox}"
heartbeat_ms = 500
claim_wait_ms = 500
microcosm = false
[runner.driver]
kind = "command"
command = ["sh", "-c", "cat >/dev/null; sleep 1; echo '{{\"status\": \"ok\", \"message\": \"done\"}}'", "{marker}"]
"#,
            state = root.join("state").display(),
            data = root.join("data").display(),
            knowledge = root.join("knowledge").display(),
            sandbox = root.join("sandbox").display(),
        ),
    )?;
    let cfg_arg = config.display().to_string();
    let js = root.join("js").display().to_string();
    let port_s = port.to_string();
    let mut procs = vec![Proc::new(
        "nats",
        Path::new(&a.nats_server),
        &["-a", "127.0.0.1", "-p", &port_s, "-js", "-sd", &js],
    )];
    for name in ["queue-a", "queue-b"] {
        procs.push(Proc::new(
            name,
            &xo,
            &["--config", &cfg_arg, "serve", "queue"],
        ));
    }
    procs.push(Proc::new(
        "supervisor",
        &xo,
        &["--config", &cfg_arg, "serve", "supervisor"],
    ));
    procs.push(Proc::new(
        "knowledge",
        &xo,
        &["--config", &cfg_arg, "serve", "knowledge"],
    ));
    let units: Vec<String> = (1..=a.runners).map(|i| format!("chaos-{i}")).collect();
    for u in &units {
        procs.push(Proc::new(
            u,
            &xo,
            &[
                "--config", &cfg_arg, "serve", "runner", "--role", "coder", "--unit", u,
            ],
        ));
    }
    let result = drive(&a, &mut procs, &url, &root, &logs, &units).await;
    for p in procs.iter_mut().rev() {
        p.stop();
    }
    // Agents left behind once every runner has stopped (a runner kills its
    // own; a SIGKILLed runner's are killed by its next start).
    let orphans = processes_with(&marker);
    match result {
        Ok(report) => {
            println!("{report}");
            let ok = orphans.is_empty() && !report.contains("FAIL");
            println!(
                "no agent process left behind: {} ({} found) {}",
                orphans.is_empty(),
                orphans.len(),
                verdict(orphans.is_empty())
            );
            println!("invariants {}", if ok { "held" } else { "BROKEN" });
            if !ok {
                println!("logs kept in {}", keep_logs(&logs)?.display());
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Err(e) => {
            let kept = keep_logs(&logs)?;
            Err(e.context(format!("logs kept in {}", kept.display())))
        }
    }
}

fn keep_logs(logs: &Path) -> anyhow::Result<PathBuf> {
    let to = std::env::temp_dir().join(format!("xo-chaos-logs-{}", std::process::id()));
    std::fs::create_dir_all(&to)?;
    for e in std::fs::read_dir(logs)?.flatten() {
        let _ = std::fs::copy(e.path(), to.join(e.file_name()));
    }
    Ok(to)
}

/// Pids whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
                && String::from_utf8_lossy(&cmd).contains(marker)
            {
                out.push(pid);
            }
        }
    }
    out
}

async fn drive(
    a: &ChaosArgs,
    procs: &mut [Proc],
    url: &str,
    root: &Path,
    logs: &Path,
    units: &[String],
) -> anyhow::Result<String> {
    for p in procs.iter_mut() {
        p.start(logs)?;
        if p.name == "nats" {
            let begun = Instant::now();
            while std::net::TcpStream::connect(url.trim_start_matches("nats://")).is_err() {
                if begun.elapsed() > Duration::from_secs(20) {
                    bail!("{} did not listen", a.nats_server);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let bus = Bus::Nats(
        NatsBus::connect(
            url,
            xo_bus::nats::ConnectOptions {
                name: "xo-bench-chaos".into(),
                retry_initial: true,
                ..Default::default()
            },
        )
        .await?,
    );
    let c = Client::new(bus, Subjects::default()).with_timeout(T);
    let init = Init {
        by: Default::default(),
        mode: ExecutionMode::Auto,
        manager: false,
        force: false,
    };
    must(&c, &init, Duration::from_secs(60)).await?;
    let goal = SetGoal {
        by: Default::default(),
        budget_usd: 0.0,
        description: "chaos".into(),
        project_id: None,
        completed: true,
    };
    must(&c, &goal, Duration::from_secs(30)).await?;

    // The baseline: one batch, calm.
    let calm_n = a.tasks;
    let begun = Instant::now();
    let mut acked: Vec<String> = work(&c, batch("calm", calm_n)).await?;
    wait_finished(&c, Duration::from_secs(300)).await?;
    let calm_rate = calm_n as f64 / begun.elapsed().as_secs_f64();

    // Chaos: batches while a random process is killed and started again.
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    });
    let mut rng = Rng(seed);
    let chaos_begun = Instant::now();
    let mut batches = 0usize;
    let mut chaos_tasks = 0usize;
    let mut next_kill = Instant::now() + Duration::from_millis(a.kill_every_ms);
    let mut pending_batch = true;
    acked.extend(work(&c, batch(&format!("b{batches}"), a.tasks)).await?);
    let mut kills = 0u32;
    while chaos_begun.elapsed() < Duration::from_secs(a.secs) && (a.kills == 0 || kills < a.kills) {
        if Instant::now() >= next_kill {
            let v = rng.below(procs.len());
            let p = &mut procs[v];
            p.kill();
            kills += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
            p.start(logs)?;
            next_kill = Instant::now() + Duration::from_millis(a.kill_every_ms);
        }
        if pending_batch && finished(&c).await == Some(true) {
            chaos_tasks += a.tasks;
            batches += 1;
            pending_batch = false;
        }
        if !pending_batch {
            let ids = work(&c, batch(&format!("b{batches}"), a.tasks)).await?;
            acked.extend(ids);
            pending_batch = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Calm again: the last batch finishes.
    wait_finished(&c, Duration::from_secs(300)).await?;
    if pending_batch {
        chaos_tasks += a.tasks;
        batches += 1;
    }
    let chaos_secs = chaos_begun.elapsed().as_secs_f64();

    // --- invariants
    let mut out = String::new();
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "chaos: {kills} kills survived in {chaos_secs:.0} s (seed {seed}): {}",
        procs
            .iter()
            .filter(|p| p.kills > 0)
            .map(|p| format!("{} ×{}", p.name, p.kills))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        out,
        "throughput: calm {calm_rate:.1} tasks/s; under chaos {:.1} tasks/s ({batches} batches, {chaos_tasks} tasks; ratio {:.2})",
        chaos_tasks as f64 / chaos_secs,
        (chaos_tasks as f64 / chaos_secs) / calm_rate
    );
    let records = c
        .clone()
        .with_timeout(Duration::from_secs(30))
        .all_tasks(None)
        .await
        .context("listing the tasks")?;
    let states: BTreeMap<String, TaskState> = records
        .iter()
        .map(|r| (r.task.task_id.clone(), r.state))
        .collect();
    let lost: Vec<&String> = acked
        .iter()
        .filter(|id| !states.contains_key(*id))
        .collect();
    let _ = writeln!(
        out,
        "acknowledged enqueues present: {} of {} {}",
        acked.len() - lost.len(),
        acked.len(),
        if lost.is_empty() { "ok" } else { "FAIL" }
    );
    let file = xo_proto::names::audit_file(&root.join("data"), "default");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let mut completes: BTreeMap<String, u32> = BTreeMap::new();
    for line in text.lines() {
        if let Ok(ev) = serde_json::from_str::<xo_proto::queue::AuditEvent>(line)
            && ev.event == "TASK_COMPLETE"
            && let Some(id) = ev.task_id
        {
            *completes.entry(id).or_default() += 1;
        }
    }
    let mut twice = Vec::new();
    let mut unreported = Vec::new();
    let mut reported = 0;
    for (id, st) in &states {
        let n = completes.get(id).copied().unwrap_or(0);
        match st {
            TaskState::Completed if n == 1 => {}
            TaskState::Completed => twice.push(format!("{id} ×{n}")),
            TaskState::Blocked | TaskState::Failed | TaskState::Cancelled => reported += 1,
            other => unreported.push(format!("{id}: {}", other.as_str())),
        }
    }
    let _ = writeln!(
        out,
        "tasks completed exactly once: {} ({reported} reported blocked/failed, {} completed twice, {} neither) {}",
        states.len() - reported - twice.len() - unreported.len(),
        twice.len(),
        unreported.len(),
        if twice.is_empty() && unreported.is_empty() {
            "ok"
        } else {
            "FAIL"
        }
    );
    if !twice.is_empty() || !unreported.is_empty() {
        let _ = writeln!(out, "  {twice:?} {unreported:?}");
    }
    // The queue's own check: its file against the store's copy.
    let verify = AuditVerify {
        project: Some("default".into()),
    };
    let check = must(&c, &verify, Duration::from_secs(60)).await?;
    let _ = writeln!(
        out,
        "audit chain intact and equal to the store's copy: {} lines, copy {:?} {}",
        check.lines,
        check.store_lines,
        if check.intact && check.store_lines.is_some() {
            "ok"
        } else {
            "FAIL"
        }
    );
    if !check.intact {
        let _ = writeln!(out, "  {:?}", check.reason);
    }
    // Every runner unit is supervised again: known, and reporting.
    let begun = Instant::now();
    let mut missing: Vec<String> = units.to_vec();
    while !missing.is_empty() && begun.elapsed() < Duration::from_secs(30) {
        if let Ok(list) = c.call(&xo_proto::control::ListUnits::default()).await {
            missing.retain(|u| !list.iter().any(|x| &x.unit == u && !x.stale));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = writeln!(
        out,
        "runner units supervised again after their restarts: {} of {} {}",
        units.len() - missing.len(),
        units.len(),
        if missing.is_empty() { "ok" } else { "FAIL" }
    );
    Ok(out)
}
