//! The operator's control plane over the queue's API.

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use xo_proto::Request;
use xo_proto::queue::*;
use xo_queue::audit::{self, Verdict};
use xo_runtime::XoConfig;

use crate::connect::{client, no_service};

async fn call<R: Request>(cfg: &XoConfig, req: &R) -> anyhow::Result<R::Response> {
    client(cfg).await?.call(req).await.map_err(no_service::<R>)
}

fn print_status(s: &QueueStatus) {
    let word = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_string();
    outln!(
        "status     {}{}",
        word(&serde_json::json!(s.status)),
        s.halt_reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    outln!("iteration  {}", s.iteration);
    outln!(
        "mode       {}{}",
        word(&serde_json::json!(s.mode)),
        if s.manager {
            ", Manager reconciliation on"
        } else {
            ""
        }
    );
    if s.mode == ExecutionMode::Manual {
        outln!("steps      {} allowed, not yet claimed", s.steps);
    }
    outln!(
        "goal       {}{}{}",
        if s.goal.description.is_empty() {
            "(none)"
        } else {
            &s.goal.description
        },
        s.goal
            .project_id
            .as_ref()
            .map(|p| format!(" [project {p}]"))
            .unwrap_or_default(),
        if s.goal.completed {
            " — complete"
        } else {
            ""
        }
    );
    outln!(
        "queue      {}",
        if s.exhausted { "exhausted" } else { "has work" }
    );
    let counts: Vec<String> = s
        .counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    outln!(
        "tasks      {}",
        if counts.is_empty() {
            "none".into()
        } else {
            counts.join(", ")
        }
    );
    match &s.last_validation_report {
        Some(r) => outln!(
            "last       {} — {} ({})",
            s.last_task_id.as_deref().unwrap_or("?"),
            if r.passed { "passed" } else { "failed" },
            r.summary
        ),
        None => outln!("last       (no task completed yet)"),
    }
    if s.goal.budget_usd > 0.0 || s.spent_usd > 0.0 {
        outln!(
            "spent      ${:.4}{}",
            s.spent_usd,
            if s.goal.budget_usd > 0.0 {
                format!(" of ${:.4} budget", s.goal.budget_usd)
            } else {
                String::new()
            }
        );
    }
    if !s.waiting_claims.is_empty() {
        outln!(
            "idle       {} (waiting for a task)",
            s.waiting_claims.join(", ")
        );
    }
    if let Some(why) = &s.stuck {
        outln!("STUCK      {why}");
    }
    for c in &s.corrupt {
        outln!("CORRUPT    {c}");
    }
    if let Some(w) = &s.writes_failing {
        outln!("WRITES     {w}");
    }
}

fn parse_mode(mode: &str) -> anyhow::Result<ExecutionMode> {
    match mode.to_ascii_lowercase().as_str() {
        "auto" => Ok(ExecutionMode::Auto),
        "manual" => Ok(ExecutionMode::Manual),
        other => bail!("--mode {other:?}: use auto or manual"),
    }
}

/// How `xo` signs a queue write on the audit line: `USER (cli)` (`cli`
/// when `USER` is unset).
pub fn by() -> String {
    match std::env::var("USER") {
        Ok(u) if !u.trim().is_empty() => format!("{} (cli)", u.trim()),
        _ => "cli".into(),
    }
}

pub async fn init(
    cfg: &XoConfig,
    mode: &str,
    manager: bool,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let s = call(
        cfg,
        &Init {
            mode: parse_mode(mode)?,
            manager,
            force,
            by: by(),
        },
    )
    .await?;
    print_status(&s);
    Ok(ExitCode::SUCCESS)
}

pub async fn goal(
    cfg: &XoConfig,
    description: String,
    project_id: Option<String>,
    completed: bool,
    budget_usd: f64,
) -> anyhow::Result<ExitCode> {
    let s = call(
        cfg,
        &SetGoal {
            budget_usd,
            description,
            project_id,
            completed,
            by: by(),
        },
    )
    .await?;
    print_status(&s);
    Ok(ExitCode::SUCCESS)
}

pub async fn enqueue(cfg: &XoConfig, file: &str) -> anyhow::Result<ExitCode> {
    let bytes = if file == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .context("reading stdin")?;
        b
    } else {
        std::fs::read(file).with_context(|| format!("reading {file}"))?
    };
    let tasks =
        xo_proto::task_file::tasks_from_json(&bytes).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let n = tasks.len();
    let tasks =
        xo_proto::task_file::dependency_order(tasks).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let parts = enqueue_parts(tasks, cfg.queue.enqueue_batch, cfg.wire.max_payload / 2)?;
    let client = client(cfg).await?;
    let (mut added, mut sent) = (0usize, 0usize);
    let count = parts.len();
    for (i, part) in parts.into_iter().enumerate() {
        let len = part.len();
        let r = client
            .call(&Enqueue {
                tasks: part,
                by: by(),
            })
            .await;
        match r {
            Ok(ids) => {
                added += ids.len();
                sent += len;
            }
            Err(e) => {
                if sent > 0 {
                    errln!(
                        "the first {sent} tasks ({i} of {count} parts) are enqueued; enqueue the same file again once this is fixed (tasks already queued are skipped)"
                    );
                }
                return Err(if e.unanswered() {
                    no_service::<Enqueue>(e)
                } else {
                    anyhow::Error::from(e).context(format!("part {} of {count}", i + 1))
                });
            }
        }
    }
    outln!(
        "enqueued {added} of {n} tasks{}{}",
        if count > 1 {
            format!(" in {count} parts")
        } else {
            String::new()
        },
        if added < n {
            " (the rest were already queued)"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Splits a batch into requests of at most `max_tasks` tasks and about
/// `max_bytes` encoded each (a task larger than that alone is refused,
/// naming it and the limit).
pub fn enqueue_parts(
    tasks: Vec<Task>,
    max_tasks: usize,
    max_bytes: usize,
) -> anyhow::Result<Vec<Vec<Task>>> {
    let mut parts: Vec<Vec<Task>> = Vec::new();
    let mut cur: Vec<Task> = Vec::new();
    let mut bytes = 0usize;
    for t in tasks {
        let size = serde_json::to_vec(&t).map_or(0, |v| v.len()) + 16;
        if size > max_bytes {
            bail!(
                "task {}: {size} bytes encoded, more than one request may carry ({max_bytes}, half of wire.max_payload): shorten its instructions or raise wire.max_payload (and the NATS server's max_payload)",
                t.task_id
            );
        }
        if !cur.is_empty() && (cur.len() >= max_tasks || bytes + size > max_bytes) {
            parts.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += size;
        cur.push(t);
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    Ok(parts)
}

pub async fn simple<R: Request<Response = QueueStatus>>(
    cfg: &XoConfig,
    req: R,
) -> anyhow::Result<ExitCode> {
    let s = call(cfg, &req).await?;
    print_status(&s);
    Ok(ExitCode::SUCCESS)
}

pub async fn status(cfg: &XoConfig, json: bool) -> anyhow::Result<ExitCode> {
    let s = call(cfg, &GetStatus {}).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print_status(&s);
    }
    Ok(ExitCode::SUCCESS)
}

/// Every task in `state` (all: `None`), from the running queue.
async fn all_tasks(cfg: &XoConfig, state: Option<TaskState>) -> anyhow::Result<Vec<TaskRecord>> {
    client(cfg)
        .await?
        .all_tasks(state)
        .await
        .map_err(no_service::<ListTasks>)
}

/// `xo task diff ID`: what a completed task changed on its branch. The
/// patch as the queue keeps it (64 KiB at most); a longer one is read
/// whole from XO's repository of the project when it is on this machine.
pub async fn task_diff(
    cfg: &XoConfig,
    task: &str,
    stat: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    xo_proto::validate_token("task id", task).map_err(|e| anyhow::anyhow!("{e}"))?;
    let list = all_tasks(cfg, None).await?;
    let Some(t) = list.into_iter().find(|t| t.task.task_id == task) else {
        anyhow::bail!("no task {task:?} in the queue (`xo tasks` lists them)");
    };
    let Some(d) = t.diff else {
        anyhow::bail!(
            "task {task} has no diff: it is {} (a diff is kept once it completes), or it ran in its project directory (runner.isolation = \"directory\")",
            t.state.as_str()
        );
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&d)?);
        return Ok(ExitCode::SUCCESS);
    }
    let (added, removed) = d.lines();
    outln!(
        "{task}: branch {} · {} {}, +{added} -{removed} · {}..{} · {}",
        d.branch,
        d.files.len(),
        if d.files.len() == 1 { "file" } else { "files" },
        &d.base[..d.base.len().min(10)],
        &d.commit[..d.commit.len().min(10)],
        d.merged
            .as_deref()
            .map_or("on its branch only".to_string(), |m| format!(
                "brought to {m}"
            ))
    );
    for f in &d.files {
        let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        outln!(
            " {} {:>6} {:>6}  {}",
            f.status,
            n(f.added),
            n(f.removed),
            f.path
        );
    }
    if stat {
        return Ok(ExitCode::SUCCESS);
    }
    outln!();
    let project = t
        .task
        .project
        .as_deref()
        .unwrap_or(&cfg.runner.default_project);
    let repo = cfg.data_dir().join(project).join("git");
    let whole = if d.truncated && repo.join("HEAD").exists() {
        match xo_pipeline::git::whole_patch(&repo, &d.base, &d.commit) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!(
                    "warning: the whole patch could not be read ({e}); the kept part follows"
                );
                None
            }
        }
    } else {
        None
    };
    match whole {
        Some(p) => out!("{p}"),
        None => {
            out!("{}", d.patch);
            if d.truncated {
                outln!(
                    "(the patch is cut at 64 KiB; the whole of it is in XO's repository of the project on the runner's machine: git --git-dir {} diff {} {})",
                    repo.display(),
                    d.base,
                    d.commit
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn tasks(cfg: &XoConfig, state: Option<String>, json: bool) -> anyhow::Result<ExitCode> {
    let state = match state {
        Some(s) => Some(
            serde_json::from_value::<TaskState>(serde_json::Value::String(s.clone()))
                .map_err(|_| anyhow::anyhow!("--state {s:?}: use pending, running, completed, blocked, failed, awaiting_response or cancelled"))?,
        ),
        None => None,
    };
    let list = all_tasks(cfg, state).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<20} {:<10} {:<18} {:<8} {:>7} {:>7}  INTENT / REASON",
        "TASK",
        "ROLE",
        "STATE",
        "LANE",
        "ATTEMPT",
        "RETRIES"
    );
    for t in &list {
        let note = t
            .reason
            .as_ref()
            .or(t.question.as_ref())
            .map(|r| format!(" — {r}"))
            .unwrap_or_default();
        outln!(
            "{:<20} {:<10} {:<18} {:<8} {:>7} {:>7}  {}{note}",
            t.task.task_id,
            t.task.role,
            t.state.as_str(),
            t.task.lane.as_str(),
            t.attempt,
            t.retries,
            t.task.intent
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn task_op<R: Request<Response = TaskRecord>>(
    cfg: &XoConfig,
    req: R,
) -> anyhow::Result<ExitCode> {
    let r = call(cfg, &req).await?;
    outln!("{}: {}", r.task.task_id, r.state.as_str());
    Ok(ExitCode::SUCCESS)
}

/// Checks a project's audit file: its chain, then line for line against the
/// store's copy (exit 1 when either fails).
/// `xo audit verify`: the queue's own check (its `audit_verify` verb: the
/// file where the queue runs, against the store's copy), so it works
/// against a fabric on other machines; with no queue answering, the files
/// here are checked and that is said.
pub async fn audit_verify(cfg: &XoConfig, project: &str) -> anyhow::Result<ExitCode> {
    let asked = match client(cfg).await {
        Ok(client) => {
            let req = AuditVerify {
                project: Some(project.to_string()),
            };
            match client.call(&req).await {
                Ok(c) => return Ok(print_check(&c, &format!("project {}", c.project))),
                Err(e) if e.unanswered() => e.to_string(),
                Err(e) => return Err(e).context("the queue's audit check"),
            }
        }
        Err(e) => format!("{e:#}"),
    };
    outln!("no queue answered ({asked}); checking the files here");
    audit_verify_here(cfg, project).await
}

/// The audit check on this machine's files (and the store's copy).
async fn audit_verify_here(cfg: &XoConfig, project: &str) -> anyhow::Result<ExitCode> {
    let path = audit::file_for(&cfg.data_dir(), project);
    let store = match crate::fabric::store_of(cfg).await {
        Ok(s) => s,
        Err(e) => {
            match audit::verify(&path).with_context(|| format!("reading {}", path.display()))? {
                Verdict::Intact { lines } => {
                    outln!("{}: chain intact, {lines} lines", path.display())
                }
                Verdict::Broken { line, reason } => {
                    outln!("{}: chain broken at line {line}: {reason}", path.display())
                }
            }
            outln!(
                "store's copy not compared: {e:#}; start the store's server (or unset nats.url for the embedded one) and verify again"
            );
            return Ok(ExitCode::from(1));
        }
    };
    let c = audit::check(&store, &cfg.data_dir(), project)
        .await
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(print_check(&c, &path.display().to_string()))
}

/// Prints an audit check as `WHERE: chain intact, N lines` and the store's
/// copy, or where it broke; the exit code says which.
fn print_check(c: &AuditCheck, at: &str) -> ExitCode {
    if !c.intact {
        let what = if c.store_lines.is_some() {
            "broken at line {} against the store's copy"
        } else {
            "chain broken at line {}"
        };
        outln!(
            "{at}: {}: {}",
            what.replace("{}", &c.broken_at.unwrap_or(c.lines).to_string()),
            c.reason.as_deref().unwrap_or("")
        );
        return ExitCode::from(1);
    }
    outln!("{at}: chain intact, {} lines", c.lines);
    match (c.store_lines, &c.reason) {
        (Some(n), _) => {
            let pending = if c.unshipped > 0 {
                format!(" ({} not yet copied)", c.unshipped)
            } else {
                String::new()
            };
            outln!("store's copy: {n} lines, the same{pending}");
            ExitCode::SUCCESS
        }
        (None, Some(why)) => {
            outln!("{why}");
            ExitCode::from(1)
        }
        (None, None) => ExitCode::SUCCESS,
    }
}

pub async fn audit_tail(
    cfg: &XoConfig,
    project: &str,
    follow: bool,
    lines: Option<usize>,
) -> anyhow::Result<ExitCode> {
    let path = audit::file_for(&cfg.data_dir(), project);
    let mut offset = 0usize;
    let mut first = true;
    loop {
        let data = match tokio::fs::read(&path).await {
            Ok(d) => d,
            Err(e) if follow && e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if data.len() > offset {
            let text = String::from_utf8_lossy(&data[offset..]);
            let complete = text.rfind('\n').map_or(0, |i| i + 1);
            let mut new: Vec<&str> = text[..complete].lines().collect();
            if first && let Some(n) = lines {
                new = new.split_off(new.len().saturating_sub(n));
            }
            for l in new {
                outln!("{l}");
            }
            offset += complete;
        }
        first = false;
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
