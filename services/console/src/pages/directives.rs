//! Directives (with their source) and the review supervisors' runs.

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
    let mut body = String::from(
        "<div class=\"scroll\"><table id=\"directives\"><thead><tr><th>Directive</th><th>Source</th><th>Lane</th><th>State</th><th>Task</th><th>What</th></tr></thead><tbody>",
    );
    for t in &rows {
        let state = match t.state {
            TaskState::Completed => "consumed",
            TaskState::Cancelled => "dropped",
            s => s.as_str(),
        };
        body.push_str(&format!(
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td><a href=\"/tasks/{t}\"><code>{t}</code></a></td><td>{}</td></tr>",
            esc(t.task.directive.as_deref().unwrap_or("")),
            esc(&directive_source(&t.task)),
            esc(t.task.lane.as_str()),
            esc(state),
            esc(&t.task.intent),
            t = esc(&t.task.task_id),
        ));
    }
    body.push_str("</tbody></table></div>");
    if rows.is_empty() {
        body.push_str("<p class=\"empty\">No directives.</p>");
    }
    ok_page(&f, &body)
}

pub(crate) async fn reviews(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Review runs", "/reviews", &q);
    let runs = match c.call(&ListReviewRuns { last: Some(500) }).await {
        Ok(r) => r,
        Err(e) => return down(&f, &e),
    };
    let total: f64 = runs.iter().map(|r| r.cost_usd).sum();
    let tokens: u64 = runs.iter().map(|r| r.tokens_in + r.tokens_out).sum();
    let mut body = format!(
        "<p class=\"summary\">{} runs · {tokens} tokens · <b>${total:.4}</b></p><div class=\"scroll\"><table id=\"reviews\"><thead><tr><th>At</th><th>Reviewer</th><th>Outcome</th><th>Trigger</th><th>Tasks</th><th>Tokens</th><th>Cost</th><th>Summary</th></tr></thead><tbody>",
        runs.len()
    );
    for r in runs.iter().rev() {
        body.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">${:.4}</td><td>{}</td></tr>",
            esc(&xo_runtime::clock::rfc3339(r.at)),
            esc(&r.reviewer),
            esc(r.outcome.as_str()),
            esc(&r.trigger),
            r.task_count,
            r.tokens_in + r.tokens_out,
            r.cost_usd,
            esc(&r.summary)
        ));
    }
    body.push_str("</tbody></table></div>");
    ok_page(&f, &body)
}
