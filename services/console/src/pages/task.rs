//! A task's page: state, runner, spend, validation, result and audit
//! history, with the actions its state allows.

use maud::{Markup, html};

use super::*;

pub(crate) fn task_actions(f: &Frame<'_>, t: &TaskRecord) -> Markup {
    let to = |verb: &str| format!("/ui/tasks/{}/{verb}", t.task.task_id);
    let open = matches!(
        t.state,
        TaskState::AwaitingResponse | TaskState::Blocked | TaskState::Pending | TaskState::Running
    );
    let answers = t.state == TaskState::AwaitingResponse
        || (t.state == TaskState::Blocked && t.question.is_some());
    html! {
        @if answers {
            (post_form(f, &to("answer"), html! { input name="text" placeholder="answer" required; }, "Answer", ""))
        }
        @if t.state == TaskState::Blocked { (post_form(f, &to("retry"), html! {}, "Retry", "")) }
        @if open { (post_form(f, &to("cancel"), html! {}, "Cancel", "danger")) }
    }
}

/// One task: what it is, where it stands, what it cost, its validation,
/// and its audit lines with the prompts and replies; only the actions its
/// state allows; a cancel asks first.
pub(crate) async fn task_page(
    State(c): State<Shared>,
    Path(id): Path<String>,
    Query(q): Q,
) -> Response {
    let title = format!("Task {id}");
    let f = frame(&c, &title, "/queue", &q);
    if let Err(e) = xo_proto::validate_token("task id", &id) {
        return bad_request(&f, &e.to_string());
    }
    let t = match crate::api::find_task(&c, &id).await {
        Ok(t) => t,
        Err(e) => {
            let body = html! { div.down role="alert" { h2 { "Not found" } p { (e.2) } } };
            return (e.0, Html(page(&f, body))).into_response();
        }
    };
    let n = f.now;
    let task = &t.task;
    let confirm = q.get("confirm").is_some_and(|v| v == "cancel")
        && matches!(
            t.state,
            TaskState::Pending
                | TaskState::Running
                | TaskState::Blocked
                | TaskState::AwaitingResponse
        );
    // The units on it, each with the steering it got (linked both ways:
    // a unit's row links its task).
    let units = c
        .call(&xo_proto::control::ListUnits::on_task(id.as_str()))
        .await
        .unwrap_or_default();
    // Its audit lines (the project's last 2,000), prompts and replies folded.
    let audit = c
        .call(&AuditTail {
            project: task.project.clone(),
            lines: Some(2000),
        })
        .await
        .unwrap_or_default();
    let mine: Vec<&xo_proto::queue::AuditEvent> = audit
        .iter()
        .filter(|a| a.task_id.as_deref() == Some(task.task_id.as_str()))
        .collect();
    let body = html! {
        @if confirm {
            section.confirm #confirm {
                p {
                    b { "Cancel task " (id) "?" } " It will not run again"
                    @if t.state == TaskState::Running { "; its agent is stopped" } "."
                }
                (post_form(
                    &f,
                    &format!("/ui/tasks/{}/cancel", task.task_id),
                    html! { input type="hidden" name="confirm" value="yes"; },
                    "Yes, cancel it",
                    "danger",
                ))
                " " a href={ "/tasks/" (id) } { "Keep it" }
            }
        }
        div.actions { (task_actions(&f, &t)) }
        div.scroll { table.facts #task { tbody { (task_facts(&t, &units, n)) } } }
        h2 { "Instructions" } pre.instructions { (task.instructions) }
        @if !task.acceptance_criteria.is_empty() {
            h2 { "Acceptance criteria" }
            ul { @for c in &task.acceptance_criteria { li { (c) } } }
        }
        @if let Some(r) = &t.report {
            h2 { "Validation" }
            p #validation {
                (if r.passed { "passed" } else { "failed" }) " · confidence "
                b { (r.confidence_level.map(|l| wire(&l)).unwrap_or_else(|| "—".into())) }
                " — " (r.summary)
            }
            div.scroll { table {
                thead { tr { th { "Criterion" } th { "Met" } th { "Quality" } th { "Detail" } } }
                tbody {
                    @for c in &r.criteria {
                        tr {
                            td { (c.criterion) }
                            td { (if c.passed { "yes" } else { "no" }) }
                            td { (c.quality.as_deref().unwrap_or("")) }
                            td { (c.detail) }
                        }
                    }
                }
            } }
            @if let Some(formatted) = &r.formatted { h3 { "Result" } pre { (formatted) } }
        }
        @if let Some(d) = &t.diff { (diff_section(d)) }
        h2 { "History" }
        @if mine.is_empty() {
            p.empty { "No audit lines for it in the last 2,000 of its project." }
        } @else {
            ol.timeline #history {
                @for a in mine {
                    li {
                        span.when { "#" (a.seq) " · " (xo_runtime::clock::rfc3339(a.at)) }
                        " " b { (a.event.as_str()) } " "
                        @if let Some(s) = a.state_after["task"]["state"].as_str() { "→ " (s) }
                        (exchange_details(a))
                    }
                }
            }
        }
    };
    ok_page(&f, body)
}

/// The facts table of a task's page: state, what it is, its runner and
/// units, what it spent, its logs, and its question and answer.
fn task_facts(t: &TaskRecord, units: &[UnitSummary], n: u64) -> Markup {
    let task = &t.task;
    let mut spent = t.spent;
    spent.add(&t.attempt_spent);
    let row = |k: &str, v: Markup| html! { tr { th { (k) } td { (v) } } };
    let text = |s: &str| html! { (s) };
    html! {
        (row("State", html! { b #task-state { (t.state.as_str()) } }))
        (row("Intent", text(&task.intent)))
        (row("Role", text(&task.role)))
        (row("Lane", text(task.lane.as_str())))
        (row("Project", text(task.project.as_deref().unwrap_or("(the goal's)"))))
        (row("Attempt", html! { (t.attempt) " · " (t.retries) " validation retries" }))
        @if let Some(l) = &t.lease {
            (row("Runner", html! {
                (l.claimant) " (lease renewed " (age(n, l.renewed_at))
                @if l.checkpoint { ", checkpointed" } ")"
            }))
        }
        @if !units.is_empty() {
            (row("Units", html! { ul #task-units { @for u in units { (unit_on_task(u, n)) } } }))
        }
        (row("Spent", html! {
            (format!(
                "{} turns · {} tokens · ${:.4} · {:.1}s",
                spent.turns,
                spent.tokens,
                spent.cost_usd,
                spent.wall_ms as f64 / 1000.0
            ))
        }))
        (row("Updated", text(&age(n, t.updated_at))))
        (row("Logs", html! {
            a href={ "/tasks/" (task.task_id) "/prompts" } id="prompt-log-link" { "prompt log" }
            " · "
            a href={ "/tasks/" (task.task_id) "/worklog" } id="work-log-link" { "work log" }
        }))
        @for (k, v) in [
            ("Reason", &t.reason),
            ("Question", &t.question),
            ("Answer", &t.answer),
            ("Yielding to", &t.interrupt),
        ] {
            @if let Some(v) = v { (row(k, text(v))) }
        }
    }
}

/// A unit on a task, with the steering it got.
fn unit_on_task(u: &UnitSummary, n: u64) -> Markup {
    let steered = match (u.steering_sent, u.last_steering) {
        (0, _) => "not steered".to_string(),
        (times, Some((kind, at))) => format!("steered {times}×, last {kind} {}", age(n, at)),
        (times, None) => format!("steered {times}×"),
    };
    let h = wire(&u.health);
    html! {
        li { a href={ "/units/" (u.unit) } { (u.unit) } " " span class={ "health " (h) } { (h) } " " (steered) }
    }
}

pub(crate) async fn ui_task(
    State(c): State<Shared>,
    Path((task_id, verb)): Path<(String, String)>,
    UiForm(form): UiForm,
) -> Response {
    let text = field(&form, "text").unwrap_or_default();
    let r = match verb.as_str() {
        "answer" if text.trim().is_empty() => Err(ServiceError::new(
            xo_proto::control::ErrorCode::Invalid,
            "the answer is empty",
        )),
        "answer" => {
            c.call(&Answer {
                task_id: task_id.clone(),
                text,
                by: crate::auth::who().by(None),
            })
            .await
        }
        "retry" => {
            c.call(&RetryTask {
                task_id: task_id.clone(),
                by: crate::auth::who().by(None),
            })
            .await
        }
        // Destructive: confirmed on the task's page first.
        "cancel" if field(&form, "confirm").as_deref() != Some("yes") => {
            return Redirect::to(&format!("/tasks/{}?confirm=cancel", enc(&task_id)))
                .into_response();
        }
        "cancel" => {
            c.call(&Cancel {
                task_id: task_id.clone(),
                by: crate::auth::who().by(None),
            })
            .await
        }
        other => return back("/queue", Err(format!("no task action {other:?}"))),
    };
    back(
        "/queue",
        r.map(|t| format!("{verb}: {} is {}", t.task.task_id, t.state.as_str()))
            .map_err(|e| e.message),
    )
}

/// The project whose logs hold a task's lines: its own, else the goal's,
/// else the runners' default (as the runner chose when it ran it).
async fn log_project(c: &Shared, t: &TaskRecord) -> String {
    match &t.task.project {
        Some(p) => p.clone(),
        None => goal_project(c).await,
    }
}

/// A task's prompt log and work log on this console's disk: the runners
/// write them under `queue.data_dir`, which the
/// console reads as its own (one machine under `xo up`; the shared volume
/// in compose and the chart).
fn log_paths(c: &Shared, project: &str, id: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    (
        c.cfg
            .data_dir()
            .join(project)
            .join(xo_proto::names::PROMPT_LOG),
        xo_proto::names::work_log(&c.cfg.data_dir().join(project), id),
    )
}

/// A task's two logs.
#[derive(Clone, Copy)]
enum Log {
    Prompts,
    Work,
}

/// Where a task's log is, or the page refusing the request (a bad id, a
/// task the queue does not have).
async fn log_path(
    c: &Shared,
    f: &Frame<'_>,
    id: &str,
    which: Log,
) -> Result<std::path::PathBuf, Response> {
    if let Err(e) = xo_proto::validate_token("task id", id) {
        return Err(bad_request(f, &e.to_string()));
    }
    let t = crate::api::find_task(c, id)
        .await
        .map_err(|e| (e.0, Html(page(f, html! { p { (e.2) } }))).into_response())?;
    let project = log_project(c, &t).await;
    let (prompts, work) = log_paths(c, &project, id);
    Ok(match which {
        Log::Prompts => prompts,
        Log::Work => work,
    })
}

/// At most this many of a task's prompt-log entries on its page (the last).
pub const PROMPT_LOG_ENTRIES: usize = 200;
/// At most this much of one entry's text, and of a work log (its end).
pub const LOG_TEXT_BYTES: usize = 64 * 1024;

/// A prompt-log line longer than this is counted unreadable, not held.
pub const PROMPT_LINE_BYTES: usize = 8 * 1024 * 1024;

/// `text` cut to `max` bytes on a character boundary, its middle elided.
pub(crate) fn elide(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let floor = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let head = floor(max / 2);
    let tail = floor(text.len() - max / 2);
    format!(
        "{}\n… {} bytes elided (the whole text is in the log file) …\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// The page a log is missing from: where the runner writes it, and why the
/// console may not see it.
fn no_log(f: &Frame<'_>, what: &str, path: &std::path::Path, why: &str) -> Response {
    let body = html! {
        div.down #no-log role="alert" {
            h2 { "No " (what) " here" }
            p {
                (why) " The runner writes it to " code { (path.display()) }
                "; the console reads it from its own disk, so a console on another machine than the runners needs their "
                code { "queue.data_dir" } " and " code { "runner.sandbox" }
                " (the shared volume in compose and the chart)."
            }
        }
    };
    (StatusCode::NOT_FOUND, Html(page(f, body))).into_response()
}

/// `/tasks/<id>/prompts`: every prompt the task's agent was given and every
/// reply, in order (seed 002's prompt log, this task's lines).
pub(crate) async fn task_prompts(
    State(c): State<Shared>,
    Path(id): Path<String>,
    Query(q): Q,
) -> Response {
    let title = format!("Prompt log of task {id}");
    let f = frame(&c, &title, "/queue", &q);
    let path = match log_path(&c, &f, &id, Log::Prompts).await {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    // Opened without following a link, read line by line with a cap per
    // line: one request never holds more than a line's cap of it.
    let file = match xo_runtime::jsonl::open_regular(&path, std::fs::OpenOptions::new().read(true))
    {
        Ok(file) => tokio::fs::File::from_std(file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return no_log(
                &f,
                "prompt log",
                &path,
                "No prompt has been logged for this project yet.",
            );
        }
        Err(e) => return no_log(&f, "prompt log", &path, &format!("It cannot be read: {e}.")),
    };
    #[derive(serde::Deserialize)]
    struct Entry {
        task_id: String,
        #[serde(default)]
        iteration: u32,
        #[serde(rename = "type", default)]
        kind: String,
        #[serde(default)]
        content: String,
        #[serde(default)]
        metadata: Value,
    }
    // Keeping this task's last entries; a line that does not parse (or is
    // longer than the cap) is counted.
    let mut reader = tokio::io::BufReader::new(file);
    let mut line = Vec::new();
    let needle = format!("\"{id}\"");
    let mut mine = std::collections::VecDeque::new();
    let (mut total, mut unreadable) = (0usize, 0usize);
    loop {
        match xo_runtime::untrusted::read_line_capped(&mut reader, &mut line, PROMPT_LINE_BYTES)
            .await
        {
            Ok(Some(cut)) => {
                let text = String::from_utf8_lossy(&line);
                if !text.contains(&needle) {
                    continue;
                }
                if cut {
                    unreadable += 1;
                    continue;
                }
                match serde_json::from_str::<Entry>(&text) {
                    Ok(e) if e.task_id == id => {
                        total += 1;
                        if mine.len() == PROMPT_LOG_ENTRIES {
                            mine.pop_front();
                        }
                        mine.push_back(e);
                    }
                    Ok(_) => {}
                    Err(_) => unreadable += 1,
                }
            }
            Ok(None) => break,
            Err(_) => {
                unreadable += 1;
                break;
            }
        }
    }
    let body = html! {
        p.summary {
            a href={ "/tasks/" (id) } { "← task " (id) } " · " (total) " entries in " code { (path.display()) }
            @if total > mine.len() { " (the last " (mine.len()) " shown)" }
            @if unreadable > 0 { " · " (unreadable) " lines that do not parse skipped" }
        }
        ol.prompt-log #prompt-log {
            @for e in &mine {
                li class={ "entry " (if e.kind == "RESPONSE" { "response" } else { "prompt" }) } {
                    h3 { (e.kind) " " small { "run " (e.iteration) } }
                    pre { (elide(&e.content, LOG_TEXT_BYTES)) }
                    @if !e.metadata.is_null() {
                        details {
                            summary { "metadata" }
                            pre { (serde_json::to_string_pretty(&e.metadata).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
        @if mine.is_empty() { p.empty { "No prompt of this task is in the log yet." } }
    };
    ok_page(&f, body)
}

/// `/tasks/<id>/worklog`: the task's work log (retry events, fix prompts,
/// interrogations: seed 002's supervisor log in the project's tree).
pub(crate) async fn task_worklog(
    State(c): State<Shared>,
    Path(id): Path<String>,
    Query(q): Q,
) -> Response {
    let title = format!("Work log of task {id}");
    let f = frame(&c, &title, "/queue", &q);
    let path = match log_path(&c, &f, &id, Log::Work).await {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    // The last LOG_TEXT_BYTES only, never following a link: a log of any
    // size costs a request that much.
    let data = c.cfg.data_dir();
    let rel = path.strip_prefix(&data).unwrap_or(&path).to_path_buf();
    let read = tokio::task::spawn_blocking(move || {
        xo_runtime::untrusted::read_tail(&data, &rel, LOG_TEXT_BYTES)
    })
    .await;
    let (text, skipped) = match read {
        Ok(Ok((b, skipped))) => (String::from_utf8_lossy(&b).into_owned(), skipped),
        Ok(Err(e)) if e.is_not_found() => {
            return no_log(
                &f,
                "work log",
                &path,
                "Nothing has been logged for this task yet: its work log starts when a runner first runs it.",
            );
        }
        Ok(Err(e)) => return no_log(&f, "work log", &path, &format!("It cannot be read: {e}.")),
        Err(e) => return no_log(&f, "work log", &path, &format!("It cannot be read: {e}.")),
    };
    let text = if skipped > 0 {
        format!("[… {skipped} earlier bytes not shown: the last {LOG_TEXT_BYTES} are]\n{text}")
    } else {
        text
    };
    let body = html! {
        p.summary { a href={ "/tasks/" (id) } { "← task " (id) } " · " code { (path.display()) } }
        pre #worklog { (text) }
    };
    ok_page(&f, body)
}

/// What a task changed on its branch: where it went, its files with their
/// lines, and the patch (as kept: cut at 64 KiB).
pub(crate) fn diff_section(d: &xo_proto::queue::TaskDiff) -> Markup {
    let (added, removed) = d.lines();
    let short = |c: &str| c.chars().take(10).collect::<String>();
    let count = |v: Option<u64>| v.map_or("binary".to_string(), |v| v.to_string());
    html! {
        h2 { "Changes" }
        p #diff-summary {
            "branch " code { (d.branch) } " · " (d.files.len())
            (if d.files.len() == 1 { " file" } else { " files" }) ", "
            span.num.add { "+" (added) } " " span.num.del { "−" (removed) }
            " · " (short(&d.base)) ".." (short(&d.commit)) " · "
            @match &d.merged { Some(m) => { "brought to " (m) }, None => "on its branch only" }
        }
        @if d.files.is_empty() {
            p.empty { "It changed no file." }
        } @else {
            div.scroll { table #diff-files {
                thead { tr { th { "File" } th { "Change" } th { "Added" } th { "Removed" } } }
                tbody {
                    @for f in &d.files {
                        tr {
                            td { code { (f.path) } }
                            td { (match f.status.as_str() {
                                "A" => "added",
                                "D" => "deleted",
                                "M" => "modified",
                                "T" => "type changed",
                                _ => "changed",
                            }) }
                            td.num.add { (count(f.added)) }
                            td.num.del { (count(f.removed)) }
                        }
                    }
                }
            } }
            pre.diff #diff-patch {
                @for line in d.patch.lines() {
                    @match patch_line_class(line) {
                        Some(class) => { span class=(class) { (line) } },
                        None => { (line) },
                    }
                    "\n"
                }
            }
            @if d.truncated {
                p.empty {
                    "The patch is cut at 64 KiB; the whole of it: "
                    code { "xo task diff " (d.branch.trim_start_matches("xo/")) }
                    " on the runner's machine, or "
                    code { "git diff " (short(&d.base)) ".." (short(&d.commit)) }
                    " in XO's repository of the project."
                }
            }
        }
    }
}

/// The class a patch line is shown with: added, removed, a hunk's head.
fn patch_line_class(line: &str) -> Option<&'static str> {
    if line.starts_with("+++") || line.starts_with("---") {
        None
    } else if line.starts_with('+') {
        Some("add")
    } else if line.starts_with('-') {
        Some("del")
    } else if line.starts_with("@@") {
        Some("hunk")
    } else {
        None
    }
}
