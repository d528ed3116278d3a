//! "Needs you": the units that need a person, the longest waiting first,
//! each with its reason, the last evidence and the action that answers it.

use super::*;

pub use xo_proto::control::needing;

/// What answers a reason, as a link or a form.
fn answer(u: &UnitSummary, n: &xo_proto::NeedsYou) -> String {
    use xo_proto::NeedsReason as R;
    let id = esc(&u.unit);
    // A question or a permission waits in the agent's own session (a
    // watched session's task id is its session id, not a queue task).
    match n.reason {
        R::Answer => match &u.task_id {
            Some(t) => format!("<a href=\"/tasks/{}\">Answer task {}</a>", esc(t), esc(t)),
            None => format!("<a href=\"/units/{id}\">Open {id}</a>"),
        },
        R::Permission => format!(
            "Allow or refuse it in the session's own terminal (<a href=\"/units/{id}\">{id}</a>); a <code>[[hooks.approve]]</code> rule answers it next time"
        ),
        R::Question => format!(
            "Reply in the session's own terminal (<a href=\"/units/{id}\">{id}</a>)"
        ),
        R::Budget if n.detail.contains("max_cost_usd") || n.detail.contains("max_tokens") => {
            "Raise the watch's cap (<code>xo watch --max-cost</code>, <code>[[supervisor.watch]] max_cost_usd</code>) and restart it".into()
        }
        R::Budget => "<a href=\"/settings\">Raise the budget</a>".into(),
        _ => format!("<a href=\"/units/{id}\">Open {id} and steer it</a>"),
    }
}

pub fn needs_body(units: &[UnitSummary], now: u64) -> String {
    let list = needing(units);
    if list.is_empty() {
        return "<p class=\"empty\" id=\"no-needs\">No unit needs you.</p>".into();
    }
    let mut out = format!(
        "<p class=\"summary\">{} unit{} need{} you, the longest waiting first.</p><table id=\"needs\"><thead><tr><th>unit</th><th>reason</th><th>waiting</th><th>stretch</th><th>last evidence</th><th>answer</th></tr></thead><tbody>",
        list.len(),
        if list.len() == 1 { "" } else { "s" },
        if list.len() == 1 { "s" } else { "" },
    );
    for u in list {
        let Some(n) = &u.needs else { continue };
        out.push_str(&format!(
            "<tr data-unit=\"{id}\"><td><a href=\"/units/{id}\">{id}</a></td><td><span class=\"badge red\">{reason}</span>{kind}</td><td>{since}</td><td class=\"num\">turns {from}–{turn}</td><td class=\"evidence\">{detail}</td><td>{answer}</td></tr>",
            id = esc(&u.unit),
            reason = n.reason,
            kind = n
                .kind
                .map(|k| format!(" <small>{k}</small>"))
                .unwrap_or_default(),
            since = age(now, n.since),
            from = n.stretch_from,
            turn = n.turn,
            detail = esc(&n.detail),
            answer = answer(u, n),
        ));
    }
    out.push_str("</tbody></table>");
    out
}

pub(crate) async fn needs(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Needs you", "/needs", &q);
    match c.units().await {
        Ok(units) => ok_page(&f, &needs_body(&units, now())),
        Err(e) => down(&f, &e),
    }
}
