//! `xo knowledge ls|show|seed|deprecate`, `xo directives`, `xo review log`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use xo_proto::Request;
use xo_proto::knowledge::*;
use xo_proto::queue::TaskState;
use xo_runtime::XoConfig;

use crate::connect::{client, no_service};

async fn call<R: Request>(cfg: &XoConfig, req: &R) -> anyhow::Result<R::Response> {
    client(cfg).await?.call(req).await.map_err(no_service::<R>)
}

pub async fn ls(cfg: &XoConfig, category: Option<String>, json: bool) -> anyhow::Result<ExitCode> {
    let category = category
        .map(|c| Category::parse(&c))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let list = call(cfg, &ListDocs { category }).await?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"docs": list.docs, "invalid": list.invalid})
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<32} {:<12} {:>4} {:>6}  {:<13} title",
        "id",
        "status",
        "uses",
        "tokens",
        "by"
    );
    for d in &list.docs {
        outln!(
            "{:<32} {:<12} {:>4} {:>6}  {:<13} {}",
            d.id,
            if d.needs_user_review {
                "review"
            } else {
                d.status.as_str()
            },
            d.uses,
            d.tokens,
            d.updated_by,
            d.title
        );
    }
    for i in &list.invalid {
        outln!("INVALID  {}", i.error);
    }
    Ok(if list.invalid.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

pub async fn show(cfg: &XoConfig, id: String, json: bool) -> anyhow::Result<ExitCode> {
    let d = call(cfg, &GetDoc { id }).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        out!("{}", xo_proto::knowledge_doc::render(&d));
    }
    Ok(ExitCode::SUCCESS)
}

/// Seeds documents from `DIR/<category>/*.md` as the operator; every file
/// is checked before anything is written.
pub async fn seed(cfg: &XoConfig, dir: &Path) -> anyhow::Result<ExitCode> {
    let mut docs = Vec::new();
    for (c, name, p) in xo_knowledge::store::md_files(dir) {
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let d = xo_proto::knowledge_doc::parse(&text, c, &name, &p.display().to_string())?;
        xo_proto::knowledge_doc::check(&d)?;
        docs.push(d);
    }
    if docs.is_empty() {
        bail!(
            "{} has no documents: expected conventions/, design/, lessons/ or domain/ with .md files",
            dir.display()
        );
    }
    for d in docs {
        let id = d.id();
        let put = call(
            cfg,
            &PutDoc {
                doc: d,
                author: Author::Operator,
                task: None,
            },
        )
        .await?;
        outln!("seeded {id} ({})", put.status.as_str());
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn deprecate(cfg: &XoConfig, id: String, reason: String) -> anyhow::Result<ExitCode> {
    let d = call(
        cfg,
        &DeprecateDoc {
            id,
            author: Author::Operator,
            reason,
        },
    )
    .await?;
    outln!("{} is {}", d.id(), d.status.as_str());
    Ok(ExitCode::SUCCESS)
}

/// `xo knowledge review [ID --accept|--reject [--note]]`.
pub async fn review(
    cfg: &XoConfig,
    id: Option<String>,
    accept: bool,
    reject: bool,
    note: String,
) -> anyhow::Result<ExitCode> {
    let Some(id) = id else {
        let list = call(cfg, &ListDocs { category: None }).await?;
        let waiting: Vec<_> = list.docs.iter().filter(|d| d.needs_user_review).collect();
        if waiting.is_empty() {
            outln!("nothing waits for your review");
        }
        for d in waiting {
            outln!("{:<32} {:<13} {}", d.id, d.updated_by, d.title);
        }
        return Ok(ExitCode::SUCCESS);
    };
    if accept == reject {
        anyhow::bail!(
            "say what to do with {id}: --accept (established, given to agents) or --reject (deprecated)"
        );
    }
    let r = call(
        cfg,
        &xo_proto::knowledge::ReviewDoc {
            id: id.clone(),
            accept,
            by: "operator".into(),
            note,
        },
    )
    .await?;
    outln!(
        "{id} {}: now {}",
        if accept { "accepted" } else { "rejected" },
        r.doc.status.as_str()
    );
    if let Some(e) = r.audit_error {
        errln!("warning: {e}");
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn directives(cfg: &XoConfig, json: bool) -> anyhow::Result<ExitCode> {
    let tasks = client(cfg)
        .await?
        .all_tasks(None)
        .await
        .map_err(no_service::<xo_proto::queue::ListTasks>)?;
    let mut rows: Vec<_> = tasks
        .iter()
        .filter(|t| t.task.directive.is_some())
        .collect();
    rows.sort_by_key(|t| (t.task.lane, t.seq));
    if json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{:<28} {:<11} {:<18} directive", "id", "lane", "state");
    for t in rows {
        let state = match t.state {
            TaskState::Completed => "consumed".to_string(),
            TaskState::Cancelled => "dropped".to_string(),
            s => s.as_str().to_string(),
        };
        outln!(
            "{:<28} {:<11} {:<18} {}",
            t.task.task_id,
            t.task.lane.as_str(),
            state,
            t.task.intent
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `xo review log`: the review supervisors' runs, from their `runs` verb
/// (so it works against a fabric on other machines); with no review
/// service answering, from the run log here, and that is said.
pub async fn review_log(cfg: &XoConfig, json: bool) -> anyhow::Result<ExitCode> {
    let asked = match client(cfg).await {
        Ok(client) => {
            let req = ListReviewRuns { last: None };
            match client
                .with_timeout(Duration::from_secs(10))
                .call(&req)
                .await
            {
                Ok(runs) => return print_review_log(&runs, json, "the review service"),
                Err(e) if e.unanswered() => e.to_string(),
                Err(e) => return Err(e).context("the review service's runs"),
            }
        }
        Err(e) => format!("{e:#}"),
    };
    let path = xo_review::runlog::run_log_path(cfg);
    if !json {
        outln!(
            "no review service answered ({asked}); reading {}",
            path.display()
        );
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => anyhow::bail!("cannot read the review run log {}: {e}", path.display()),
    };
    let log = xo_review::runlog::parse_run_log(&path, &text);
    print_review_log(&log, json, &path.display().to_string())
}

/// The runs as a table (or JSON lines), `from` naming where they came from
/// when there are none.
fn print_review_log(log: &[ReviewRun], json: bool, from: &str) -> anyhow::Result<ExitCode> {
    if json {
        for r in log {
            outln!("{}", serde_json::to_string(r)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if log.is_empty() {
        outln!("no review runs yet ({from})");
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<24} {:<13} {:<10} {:>5} {:>9} {:>9}  summary",
        "at",
        "reviewer",
        "outcome",
        "tasks",
        "tokens",
        "cost"
    );
    let mut total = 0.0;
    for r in log {
        total += r.cost_usd;
        outln!(
            "{:<24} {:<13} {:<10} {:>5} {:>9} {:>9.4}  {}{}",
            xo_runtime::clock::rfc3339(r.at),
            r.reviewer,
            r.outcome,
            r.task_count,
            r.tokens_in + r.tokens_out,
            r.cost_usd,
            r.summary,
            r.verdict
                .as_ref()
                .map(|v| format!(" [{v}]"))
                .unwrap_or_default()
        );
    }
    outln!("total cost ${total:.4}");
    Ok(ExitCode::SUCCESS)
}

/// `xo knowledge …`.
pub async fn run(cfg: &XoConfig, cmd: crate::cli::KnowledgeCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        crate::cli::KnowledgeCmd::Ls { category, json } => ls(cfg, category, json).await,
        crate::cli::KnowledgeCmd::Show { id, json } => show(cfg, id, json).await,
        crate::cli::KnowledgeCmd::Seed { dir } => seed(cfg, &dir).await,
        crate::cli::KnowledgeCmd::Deprecate { id, reason } => deprecate(cfg, id, reason).await,
        crate::cli::KnowledgeCmd::Review {
            id,
            accept,
            reject,
            note,
        } => review(cfg, id, accept, reject, note).await,
    }
}
