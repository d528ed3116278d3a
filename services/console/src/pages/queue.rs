//! The queue page: status, goal, budget, tasks, and the set-up forms.

use maud::{Markup, html};

use super::*;

pub(crate) async fn queue(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Queue", "/queue", &q);
    let (status, tasks) = tokio::join!(c.call(&GetStatus {}), crate::api::all_tasks(&c, None));
    let (status, tasks) = match (status, tasks) {
        (Ok(s), Ok(t)) => (s, t),
        (Err(e), _) | (_, Err(e)) => return down(&f, &e),
    };
    // Only the controls the state allows.
    use xo_proto::queue::{ExecutionMode, RunStatus};
    let (running, halted) = (
        status.status == RunStatus::Running,
        status.status == RunStatus::Halted,
    );
    let manual = status.mode == ExecutionMode::Manual;
    let fresh = status.halt_reason.is_none();
    let goal = &status.goal;
    let body = html! {
        @if q.get("confirm").is_some_and(|v| v == "start-over") && !f.read_only {
            (start_over_confirm(&f, &status, &tasks, &q))
        }
        @if let Some(stuck) = &status.stuck {
            p.flash.error #stuck role="alert" { "Stuck: " (stuck) }
        }
        section.status {
            p {
                "Status " b #queue-status { (wire(&status.status)) }
                @if let Some(r) = &status.halt_reason { " " span.reason { "(" (r) ")" } }
                " · mode " b { (wire(&status.mode)) } " · iteration " (status.iteration)
            }
            p {
                "Goal: "
                @if goal.description.is_empty() { i { "none set" } } @else { (goal.description) }
                " · spent " b #goal-spent { (format!("${:.2}", status.spent_usd)) }
                @if goal.budget_usd > 0.0 {
                    (format!(" of ${:.2} ({:.0}%)", goal.budget_usd, 100.0 * status.spent_usd / goal.budget_usd))
                } @else {
                    " (no budget)"
                }
            }
            div.actions {
                @if halted && fresh { (post_form(&f, "/ui/queue/start", html! {}, "Start", "")) }
                @if manual && (running || halted) { (post_form(&f, "/ui/queue/step", html! {}, "Step", "")) }
                @if running {
                    (post_form(&f, "/ui/queue/halt", html! { input name="reason" placeholder="reason"; }, "Halt", "danger"))
                }
                @if halted && !fresh { (post_form(&f, "/ui/queue/resume", html! {}, "Resume", "")) }
            }
        }
        (setup_forms(&f, &status, tasks.is_empty(), &q))
        @for (state, title) in [
            (TaskState::AwaitingResponse, "Awaiting an answer"),
            (TaskState::Blocked, "Blocked"),
            (TaskState::Running, "Running"),
            (TaskState::Pending, "Pending"),
            (TaskState::Completed, "Completed"),
            (TaskState::Cancelled, "Cancelled"),
        ] {
            @let rows: Vec<&TaskRecord> = tasks.iter().filter(|t| t.state == state).collect();
            section.tasks id={ "tasks-" (state.as_str()) } {
                h2 { (title) " " small { (rows.len()) } }
                @if !rows.is_empty() {
                    div.scroll { table {
                        thead { tr {
                            th { "Task" } th { "Role" } th { "Intent" } th { "Attempt" } th { "Detail" } th {}
                        } }
                        tbody { @for t in rows { (task_row(&f, t)) } }
                    } }
                }
            }
        }
    };
    ok_page(&f, body)
}

/// One task's row in the queue's tables.
fn task_row(f: &Frame<'_>, t: &TaskRecord) -> Markup {
    let detail = t
        .question
        .as_ref()
        .map(|q| format!("asks: {q}"))
        .or_else(|| t.reason.clone())
        .or_else(|| t.answer.as_ref().map(|a| format!("answered: {a}")))
        .unwrap_or_default();
    let id = &t.task.task_id;
    html! {
        tr id={ "task-" (id) } {
            td { a href={ "/tasks/" (id) } { code { (id) } } }
            td { (t.task.role) }
            td { (t.task.intent) }
            td.num { (t.attempt) }
            td { (detail) }
            td.actions { (task_actions(f, t)) }
        }
    }
}

/// "Start over" asks first, naming what is lost: the goal and every task
/// by state (their records; the audit log keeps its lines).
fn start_over_confirm(
    f: &Frame<'_>,
    status: &xo_proto::queue::QueueStatus,
    tasks: &[xo_proto::queue::TaskRecord],
    q: &BTreeMap<String, String>,
) -> Markup {
    let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
    for t in tasks {
        *by_state.entry(t.state.as_str()).or_default() += 1;
    }
    let states: Vec<String> = by_state.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let tasks_lost = if tasks.is_empty() {
        "no task".to_string()
    } else if tasks.len() == 1 {
        format!("its one task ({})", states.join(", "))
    } else {
        format!("all {} tasks ({})", tasks.len(), states.join(", "))
    };
    let keep = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let fields = html! {
        input type="hidden" name="force" value="on";
        input type="hidden" name="confirm" value="yes";
        input type="hidden" name="mode" value=(keep("mode"));
        input type="hidden" name="manager" value=(keep("manager"));
    };
    html! {
        section.confirm #confirm {
            p {
                b { "Start over?" } " This drops "
                @if status.goal.description.is_empty() { "no goal" } @else { "the goal “" (status.goal.description) "”" }
                " and " (tasks_lost) ", with their results; running agents are stopped. The audit log keeps its lines."
            }
            (post_form(f, "/ui/queue/init", fields, "Yes, start over", "danger"))
            " " a href="/queue" { "Keep them" }
        }
    }
}

/// Seed 004: everything from the web. Initialise the queue, set the goal
/// and enqueue a task from the Queue page (the same requests as
/// `xo init`, `xo goal` and `xo enqueue`); open until there is a goal and a task.
/// A refused enqueue comes back with every field as it was typed (`q`'s
/// `keep.` values), the set-up open on it.
pub(crate) fn setup_forms(
    f: &Frame<'_>,
    status: &xo_proto::queue::QueueStatus,
    no_tasks: bool,
    q: &BTreeMap<String, String>,
) -> Markup {
    if f.read_only {
        return html! {};
    }
    let kept = |k: &str| q.get(&format!("{KEEP}{k}")).map(String::as_str);
    let typed = |k: &str, default: &'static str| kept(k).unwrap_or(default).to_string();
    let refused = kept("task_id").is_some();
    let fresh = status.goal.description.is_empty() || no_tasks || refused;
    let init = html! {
        label { "mode " select name="mode" { option { "AUTO" } option { "MANUAL" } } }
        label.check { input type="checkbox" name="manager"; " a Manager after each task" }
        label.check { input type="checkbox" name="force"; " start over (drops every task)" }
    };
    let goal = html! {
        input name="description" placeholder="what the fleet should achieve" required size="48" value=(status.goal.description);
        input name="project" placeholder="project" size="12" value=(status.goal.project_id.as_deref().unwrap_or(""));
        input name="budget_usd" placeholder="budget USD (0: default)" inputmode="decimal" size="10";
        label.check { input type="checkbox" name="completed"; " met once the queue is empty" }
    };
    let options = |all: &[&str], chosen: Option<&str>| {
        html! { @for o in all { option selected[chosen == Some(*o)] { (o) } } }
    };
    let enqueue = html! {
        @if refused {
            p.flash.ok #enqueue-kept { "What you typed is back in the form; nothing was enqueued." }
        }
        input name="task_id" placeholder="task id" aria-label="task id" required size="10" value=(typed("task_id", ""));
        input name="role" placeholder="role" aria-label="role" value=(typed("role", "coder")) size="8";
        input name="intent" placeholder="intent (one line)" aria-label="intent" required size="28" value=(typed("intent", ""));
        textarea name="instructions" placeholder="instructions" aria-label="instructions" rows="2" required { (typed("instructions", "")) }
        textarea name="criteria" placeholder="acceptance criteria, one per line (file exists: PATH, file contains: PATH :: TEXT, command succeeds: CMD, …)" aria-label="acceptance criteria" rows="2" { (typed("criteria", "")) }
        label { "lane " select name="lane" { (options(&["functional", "planned", "cleanup", "critical"], kept("lane"))) } }
        label { "timeout " select name="timeout_profile" { (options(&["standard", "long", "extended"], kept("timeout_profile"))) } }
        input name="project" placeholder="project (the goal's)" aria-label="project" size="12" value=(typed("project", ""));
    };
    html! {
        details #setup open[fresh] {
            summary { "Set up: initialise, goal, enqueue a task" }
            div.setup {
                h3 { "Initialise" } (post_form(f, "/ui/queue/init", init, "Initialise", ""))
                h3 { "Goal" } (post_form(f, "/ui/queue/goal", goal, "Set goal", ""))
                h3 { "Enqueue a task" } (post_form(f, "/ui/queue/enqueue", enqueue, "Enqueue", ""))
            }
        }
    }
}

/// The queue's set-up requests from the page's forms; an error names the
/// field and what to give.
pub(crate) async fn setup_request(
    c: &Shared,
    verb: &str,
    form: &[(String, String)],
) -> Result<String, String> {
    let on = |k: &str| field(form, k).is_some_and(|v| v == "on" || v == "true");
    let text = |k: &str| {
        field(form, k)
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    match verb {
        "init" => {
            let mode = match text("mode").as_str() {
                "" | "AUTO" => xo_proto::queue::ExecutionMode::Auto,
                "MANUAL" => xo_proto::queue::ExecutionMode::Manual,
                other => return Err(format!("mode {other:?}: AUTO or MANUAL")),
            };
            let s = c
                .call(&Init {
                    mode,
                    manager: on("manager"),
                    force: on("force"),
                    by: crate::auth::who().by(None),
                })
                .await
                .map_err(|e| e.message)?;
            Ok(format!(
                "initialised: queue is {} in {} mode",
                wire(&s.status),
                wire(&s.mode)
            ))
        }
        "goal" => {
            let description = text("description");
            if description.is_empty() {
                return Err(
                    "goal: the description is empty; say what the fleet should achieve".into(),
                );
            }
            let project = text("project");
            if !project.is_empty() {
                xo_proto::validate_token("project", &project)?;
            }
            let budget = text("budget_usd");
            let budget_usd = if budget.is_empty() {
                0.0
            } else {
                match budget.parse::<f64>() {
                    Ok(b) if b.is_finite() && b >= 0.0 => b,
                    _ => {
                        return Err(format!(
                            "budget USD {budget:?}: a number of dollars, 0 or more"
                        ));
                    }
                }
            };
            c.call(&SetGoal {
                description,
                project_id: Some(project).filter(|p| !p.is_empty()),
                completed: on("completed"),
                budget_usd,
                by: crate::auth::who().by(None),
            })
            .await
            .map_err(|e| e.message)?;
            Ok("goal set".into())
        }
        "enqueue" => {
            let id = text("task_id");
            xo_proto::validate_token("task id", &id)?;
            let (intent, instructions) = (text("intent"), text("instructions"));
            if intent.is_empty() || instructions.is_empty() {
                return Err("enqueue: give the task an intent and instructions".into());
            }
            let mut t = Task::new(id.clone(), intent, instructions, text("role"));
            t.acceptance_criteria = text("criteria")
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            if !text("lane").is_empty() {
                t.lane = serde_json::from_value(Value::String(text("lane"))).map_err(|_| {
                    format!(
                        "lane {:?}: functional, planned, cleanup or critical",
                        text("lane")
                    )
                })?;
            }
            if !text("timeout_profile").is_empty() {
                t.timeout_profile = serde_json::from_value(Value::String(text("timeout_profile")))
                    .map_err(|_| {
                        format!(
                            "timeout {:?}: standard, long or extended",
                            text("timeout_profile")
                        )
                    })?;
            }
            let project = text("project");
            if !project.is_empty() {
                xo_proto::validate_token("project", &project)?;
                t.project = Some(project);
            }
            let added = c
                .call(&Enqueue {
                    tasks: vec![t],
                    by: crate::auth::who().by(None),
                })
                .await
                .map_err(|e| e.message)?;
            Ok(if added.is_empty() {
                format!("{id} is already queued, identical; nothing added")
            } else {
                format!("enqueued {id}")
            })
        }
        other => Err(format!("no queue action {other:?}")),
    }
}

pub(crate) async fn ui_queue(
    State(c): State<Shared>,
    Path(verb): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let reason = field(&form, "reason")
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "halted from the console".into());
    // Destructive: "start over" is confirmed on the queue page first.
    if verb == "init"
        && field(&form, "force").is_some_and(|v| !v.is_empty())
        && field(&form, "confirm").as_deref() != Some("yes")
    {
        let v = |k: &str| field(&form, k).unwrap_or_default();
        return Redirect::to(&format!(
            "/queue?confirm=start-over&mode={}&manager={}",
            enc(&v("mode")),
            enc(&v("manager"))
        ))
        .into_response();
    }
    if verb == "enqueue" {
        return match setup_request(&c, &verb, &form).await {
            Ok(m) => back("/queue", Ok(m)),
            // Refused: the page again with every field as typed.
            Err(why) => {
                let mut q = kept_refusal(&form, why);
                q.entry(format!("{KEEP}task_id")).or_default();
                refused_page(queue(State(c), Query(q)).await)
            }
        };
    }
    if matches!(verb.as_str(), "init" | "goal") {
        return back("/queue", setup_request(&c, &verb, &form).await);
    }
    let r = match verb.as_str() {
        "start" => c.call(&Start { by: who_by() }).await,
        "step" => c.call(&Step {}).await,
        "resume" => c.call(&Resume { by: who_by() }).await,
        "halt" => {
            c.call(&Halt {
                reason,
                by: who_by(),
            })
            .await
        }
        other => return back("/queue", Err(format!("no queue action {other:?}"))),
    };
    back(
        "/queue",
        r.map(|s| format!("{verb}: queue is {}", wire(&s.status)))
            .map_err(|e| e.message),
    )
}

/// The signed-in operator, as a write names them.
fn who_by() -> String {
    crate::auth::who().by(None)
}
