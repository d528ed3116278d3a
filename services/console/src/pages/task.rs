//! A task's page: state, runner, spend, validation, result and audit
//! history, with the actions its state allows.

use super::*;

pub(crate) fn task_actions(f: &Frame<'_>, t: &TaskRecord) -> String {
    let mut a = String::new();
    match t.state {
        TaskState::AwaitingResponse | TaskState::Blocked => {
            if t.state == TaskState::AwaitingResponse || t.question.is_some() {
                a.push_str(&action(
                    f,
                    &format!("/ui/tasks/{}/answer", t.task.task_id),
                    "<input name=\"text\" placeholder=\"answer\" required>",
                    "Answer",
                    "",
                ));
            }
            if t.state == TaskState::Blocked {
                a.push_str(&action(
                    f,
                    &format!("/ui/tasks/{}/retry", t.task.task_id),
                    "",
                    "Retry",
                    "",
                ));
            }
            a.push_str(&action(
                f,
                &format!("/ui/tasks/{}/cancel", t.task.task_id),
                "",
                "Cancel",
                "danger",
            ));
        }
        TaskState::Pending | TaskState::Running => {
            a.push_str(&action(
                f,
                &format!("/ui/tasks/{}/cancel", t.task.task_id),
                "",
                "Cancel",
                "danger",
            ));
        }
        _ => {}
    }
    a
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
            return (
                e.0,
                Html(page(
                    &f,
                    &format!(
                        "<div class=\"down\" role=\"alert\"><h2>Not found</h2><p>{}</p></div>",
                        esc(&e.2)
                    ),
                )),
            )
                .into_response();
        }
    };
    let n = now();
    let task = &t.task;
    let mut body = String::new();
    if q.get("confirm").is_some_and(|v| v == "cancel")
        && matches!(
            t.state,
            TaskState::Pending
                | TaskState::Running
                | TaskState::Blocked
                | TaskState::AwaitingResponse
        )
    {
        body.push_str(&format!(
            "<section class=\"confirm\" id=\"confirm\"><p><b>Cancel task {id}?</b> It will not run again{running}.</p>{yes} <a href=\"/tasks/{id}\">Keep it</a></section>",
            id = esc(&id),
            running = if t.state == TaskState::Running { "; its agent is stopped" } else { "" },
            yes = action(
                &f,
                &format!("/ui/tasks/{}/cancel", task.task_id),
                "<input type=\"hidden\" name=\"confirm\" value=\"yes\">",
                "Yes, cancel it",
                "danger"
            ),
        ));
    }
    let runner = t.lease.as_ref().map(|l| {
        format!(
            "{} (lease renewed {}{})",
            esc(&l.claimant),
            age(n, l.renewed_at),
            if l.checkpoint { ", checkpointed" } else { "" }
        )
    });
    let mut spent = t.spent;
    spent.add(&t.attempt_spent);
    let row = |k: &str, v: String| format!("<tr><th>{k}</th><td>{v}</td></tr>");
    let mut facts = String::new();
    facts.push_str(&row(
        "State",
        format!("<b id=\"task-state\">{}</b>", esc(t.state.as_str())),
    ));
    facts.push_str(&row("Intent", esc(&task.intent)));
    facts.push_str(&row("Role", esc(&task.role)));
    facts.push_str(&row("Lane", esc(task.lane.as_str())));
    facts.push_str(&row(
        "Project",
        esc(task.project.as_deref().unwrap_or("(the goal's)")),
    ));
    facts.push_str(&row(
        "Attempt",
        format!("{} · {} validation retries", t.attempt, t.retries),
    ));
    if let Some(r) = runner {
        facts.push_str(&row("Runner", r));
    }
    // The units on it, each with the steering it got (linked both ways:
    // a unit's row links its task).
    if let Ok(units) = c
        .call(&xo_proto::control::ListUnits::on_task(id.as_str()))
        .await
    {
        let on: Vec<String> = units
            .iter()
            .map(|u| {
                let steered = match (u.steering_sent, u.last_steering) {
                    (0, _) => "not steered".to_string(),
                    (times, Some((kind, at))) => {
                        format!("steered {times}×, last {kind} {}", age(n, at))
                    }
                    (times, None) => format!("steered {times}×"),
                };
                format!(
                    "<li><a href=\"/units/{u}\">{u}</a> <span class=\"health {h}\">{h}</span> {s}</li>",
                    u = esc(&u.unit),
                    h = esc(&wire(&u.health)),
                    s = esc(&steered),
                )
            })
            .collect();
        if !on.is_empty() {
            facts.push_str(&row(
                "Units",
                format!("<ul id=\"task-units\">{}</ul>", on.concat()),
            ));
        }
    }
    facts.push_str(&row(
        "Spent",
        format!(
            "{} turns · {} tokens · ${:.4} · {:.1}s",
            spent.turns,
            spent.tokens,
            spent.cost_usd,
            spent.wall_ms as f64 / 1000.0
        ),
    ));
    facts.push_str(&row("Updated", age(n, t.updated_at)));
    facts.push_str(&row(
        "Logs",
        format!(
            "<a href=\"/tasks/{id}/prompts\" id=\"prompt-log-link\">prompt log</a> · <a href=\"/tasks/{id}/worklog\" id=\"work-log-link\">work log</a>",
            id = esc(&task.task_id)
        ),
    ));
    for (k, v) in [
        ("Reason", &t.reason),
        ("Question", &t.question),
        ("Answer", &t.answer),
        ("Yielding to", &t.interrupt),
    ] {
        if let Some(v) = v {
            facts.push_str(&row(k, esc(v)));
        }
    }
    body.push_str(&format!(
        "<div class=\"actions\">{acts}</div><div class=\"scroll\"><table class=\"facts\" id=\"task\"><tbody>{facts}</tbody></table></div>\
<h2>Instructions</h2><pre class=\"instructions\">{ins}</pre>",
        acts = task_actions(&f, &t),
        ins = esc(&task.instructions),
    ));
    if !task.acceptance_criteria.is_empty() {
        body.push_str("<h2>Acceptance criteria</h2><ul>");
        for c in &task.acceptance_criteria {
            body.push_str(&format!("<li>{}</li>", esc(c)));
        }
        body.push_str("</ul>");
    }
    if let Some(r) = &t.report {
        body.push_str(&format!(
            "<h2>Validation</h2><p id=\"validation\">{verdict} · confidence <b>{level}</b> — {summary}</p>",
            verdict = if r.passed { "passed" } else { "failed" },
            level = r.confidence_level.map(|l| wire(&l)).unwrap_or_else(|| "—".into()),
            summary = esc(&r.summary),
        ));
        body.push_str("<div class=\"scroll\"><table><thead><tr><th>Criterion</th><th>Met</th><th>Quality</th><th>Detail</th></tr></thead><tbody>");
        for c in &r.criteria {
            body.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.criterion),
                if c.passed { "yes" } else { "no" },
                esc(c.quality.as_deref().unwrap_or("")),
                esc(&c.detail)
            ));
        }
        body.push_str("</tbody></table></div>");
        if let Some(formatted) = &r.formatted {
            body.push_str(&format!("<h3>Result</h3><pre>{}</pre>", esc(formatted)));
        }
    }
    if let Some(d) = &t.diff {
        body.push_str(&diff_section(d));
    }
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
    body.push_str("<h2>History</h2>");
    if mine.is_empty() {
        body.push_str(
            "<p class=\"empty\">No audit lines for it in the last 2,000 of its project.</p>",
        );
    } else {
        body.push_str("<ol class=\"timeline\" id=\"history\">");
        for a in mine {
            body.push_str(&format!(
                "<li><span class=\"when\">#{seq} · {at}</span> <b>{ev}</b> {state}{ex}</li>",
                seq = a.seq,
                at = esc(&xo_runtime::clock::rfc3339(a.at)),
                ev = esc(a.event.as_str()),
                state = a.state_after["task"]["state"]
                    .as_str()
                    .map(|s| format!("→ {}", esc(s)))
                    .unwrap_or_default(),
                ex = exchange_details(a),
            ));
        }
        body.push_str("</ol>");
    }
    ok_page(&f, &body)
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
        .map_err(|e| (e.0, Html(page(f, &esc(&e.2)))).into_response())?;
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
    (
        StatusCode::NOT_FOUND,
        Html(page(
            f,
            &format!(
                "<div class=\"down\" role=\"alert\" id=\"no-log\"><h2>No {what} here</h2><p>{why} The runner writes it to <code>{}</code>; the console reads it from its own disk, so a console on another machine than the runners needs their <code>queue.data_dir</code> and <code>runner.sandbox</code> (the shared volume in compose and the chart).</p></div>",
                esc(&path.display().to_string())
            ),
        )),
    )
        .into_response()
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
    let mut body = format!(
        "<p class=\"summary\"><a href=\"/tasks/{ide}\">← task {ide}</a> · {total} entries in <code>{p}</code>{more}{bad}</p><ol class=\"prompt-log\" id=\"prompt-log\">",
        ide = esc(&id),
        p = esc(&path.display().to_string()),
        more = if total > mine.len() {
            format!(" (the last {} shown)", mine.len())
        } else {
            String::new()
        },
        bad = if unreadable > 0 {
            format!(" · {unreadable} lines that do not parse skipped")
        } else {
            String::new()
        },
    );
    for e in &mine {
        let meta = if e.metadata.is_null() {
            String::new()
        } else {
            format!(
                "<details><summary>metadata</summary><pre>{}</pre></details>",
                esc(&serde_json::to_string_pretty(&e.metadata).unwrap_or_default())
            )
        };
        body.push_str(&format!(
            "<li class=\"entry {cls}\"><h3>{kind} <small>run {it}</small></h3><pre>{text}</pre>{meta}</li>",
            cls = if e.kind == "RESPONSE" { "response" } else { "prompt" },
            kind = esc(&e.kind),
            it = e.iteration,
            text = esc(&elide(&e.content, LOG_TEXT_BYTES)),
        ));
    }
    body.push_str("</ol>");
    if mine.is_empty() {
        body.push_str("<p class=\"empty\">No prompt of this task is in the log yet.</p>");
    }
    ok_page(&f, &body)
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
    ok_page(
        &f,
        &format!(
            "<p class=\"summary\"><a href=\"/tasks/{ide}\">← task {ide}</a> · <code>{p}</code></p><pre id=\"worklog\">{t}</pre>",
            ide = esc(&id),
            p = esc(&path.display().to_string()),
            t = esc(&text),
        ),
    )
}

/// What a task changed on its branch: where it went, its files with their
/// lines, and the patch (as kept: cut at 64 KiB).
pub(crate) fn diff_section(d: &xo_proto::queue::TaskDiff) -> String {
    let (added, removed) = d.lines();
    let short = |c: &str| c.chars().take(10).collect::<String>();
    let went = match &d.merged {
        Some(m) => format!("brought to {}", esc(m)),
        None => "on its branch only".to_string(),
    };
    let mut out = format!(
        "<h2>Changes</h2><p id=\"diff-summary\">branch <code>{branch}</code> · {n} {files}, <span class=\"num add\">+{added}</span> <span class=\"num del\">−{removed}</span> · {base}..{commit} · {went}</p>",
        branch = esc(&d.branch),
        n = d.files.len(),
        files = if d.files.len() == 1 { "file" } else { "files" },
        base = esc(&short(&d.base)),
        commit = esc(&short(&d.commit)),
    );
    if d.files.is_empty() {
        out.push_str("<p class=\"empty\">It changed no file.</p>");
        return out;
    }
    out.push_str("<div class=\"scroll\"><table id=\"diff-files\"><thead><tr><th>File</th><th>Change</th><th>Added</th><th>Removed</th></tr></thead><tbody>");
    for f in &d.files {
        let n = |v: Option<u64>| v.map_or("binary".to_string(), |v| v.to_string());
        out.push_str(&format!(
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"num add\">{}</td><td class=\"num del\">{}</td></tr>",
            esc(&f.path),
            match f.status.as_str() {
                "A" => "added",
                "D" => "deleted",
                "M" => "modified",
                "T" => "type changed",
                _ => "changed",
            },
            n(f.added),
            n(f.removed)
        ));
    }
    out.push_str("</tbody></table></div><pre class=\"diff\" id=\"diff-patch\">");
    for line in d.patch.lines() {
        let class = if line.starts_with("+++") || line.starts_with("---") {
            ""
        } else if line.starts_with('+') {
            "add"
        } else if line.starts_with('-') {
            "del"
        } else if line.starts_with("@@") {
            "hunk"
        } else {
            ""
        };
        if class.is_empty() {
            out.push_str(&esc(line));
        } else {
            out.push_str(&format!("<span class=\"{class}\">{}</span>", esc(line)));
        }
        out.push('\n');
    }
    out.push_str("</pre>");
    if d.truncated {
        out.push_str(&format!(
            "<p class=\"empty\">The patch is cut at 64 KiB; the whole of it: <code>xo task diff {}</code> on the runner's machine, or <code>git diff {}..{}</code> in XO's repository of the project.</p>",
            esc(d.branch.trim_start_matches("xo/")),
            esc(&short(&d.base)),
            esc(&short(&d.commit))
        ));
    }
    out
}
