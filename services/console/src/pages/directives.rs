//! Directives (with their source) and the review supervisors' runs.

use maud::html;

use super::*;

/// Who gave a directive: the reviewer its task names ("Directive from the
/// code_style supervisor …"), else the operator or another tool.
pub(crate) fn directive_source(t: &Task) -> String {
    t.instructions
        .strip_prefix("Directive from the ")
        .and_then(|r| r.split_once(" supervisor"))
        .map(|(who, _)| who.to_string())
        .unwrap_or_else(|| "—".into())
}

pub(crate) async fn directives(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Directives", "/directives", &q);
    let rows = match crate::api::directive_tasks(&c).await {
        Ok(r) => r,
        Err(e) => {
            return down(
                &f,
                &ServiceError::new(xo_proto::control::ErrorCode::Unavailable, e.2),
            );
        }
    };
    let body = html! {
        div.scroll { table #directives {
            thead { tr {
                th { "Directive" } th { "Source" } th { "Lane" } th { "State" } th { "Task" } th { "What" }
            } }
            tbody {
                @for t in &rows {
                    tr {
                        td { code { (t.task.directive.as_deref().unwrap_or("")) } }
                        td { (directive_source(&t.task)) }
                        td { (t.task.lane.as_str()) }
                        td { (match t.state {
                            TaskState::Completed => "consumed",
                            TaskState::Cancelled => "dropped",
                            s => s.as_str(),
                        }) }
                        td { a href={ "/tasks/" (t.task.task_id) } { code { (t.task.task_id) } } }
                        td { (t.task.intent) }
                    }
                }
            }
        } }
        @if rows.is_empty() { p.empty { "No directives." } }
    };
    ok_page(&f, body)
}

pub(crate) async fn reviews(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Review runs", "/reviews", &q);
    let runs = match c.call(&ListReviewRuns { last: Some(500) }).await {
        Ok(r) => r,
        Err(e) => return down(&f, &e),
    };
    let total: f64 = runs.iter().map(|r| r.cost_usd).sum();
    let tokens: u64 = runs.iter().map(|r| r.tokens_in + r.tokens_out).sum();
    let body = html! {
        p.summary { (runs.len()) " runs · " (tokens) " tokens · " b { "$" (format!("{total:.4}")) } }
        div.scroll { table #reviews {
            thead { tr {
                th { "At" } th { "Reviewer" } th { "Outcome" } th { "Trigger" } th { "Tasks" }
                th { "Tokens" } th { "Cost" } th { "Summary" }
            } }
            tbody {
                @for r in runs.iter().rev() {
                    tr {
                        td { (xo_runtime::clock::rfc3339(r.at)) }
                        td { (r.reviewer) }
                        td { (r.outcome.as_str()) }
                        td { (r.trigger) }
                        td.num { (r.task_count) }
                        td.num { (r.tokens_in + r.tokens_out) }
                        td.num { "$" (format!("{:.4}", r.cost_usd)) }
                        td { (r.summary) }
                    }
                }
            }
        } }
    };
    ok_page(&f, body)
}
