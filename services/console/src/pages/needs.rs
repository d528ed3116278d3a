//! "Needs you": the units that need a person, the longest waiting first,
//! each with its reason, the last evidence and the action that answers it.

use maud::{Markup, html};

use super::*;

pub use xo_proto::control::needing;

/// What answers a reason, as a link or a form.
fn answer(u: &UnitSummary, n: &xo_proto::NeedsYou) -> Markup {
    use xo_proto::NeedsReason as R;
    let id = &u.unit;
    let open = html! { a href={ "/units/" (id) } { (id) } };
    // A question or a permission waits in the agent's own session (a
    // watched session's task id is its session id, not a queue task).
    match n.reason {
        R::Answer => match &u.task_id {
            Some(t) => html! { a href={ "/tasks/" (t) } { "Answer task " (t) } },
            None => html! { a href={ "/units/" (id) } { "Open " (id) } },
        },
        R::Permission => html! {
            "Allow or refuse it in the session's own terminal (" (open) "); a "
            code { "[[hooks.approve]]" } " rule answers it next time"
        },
        R::Question => html! { "Reply in the session's own terminal (" (open) ")" },
        R::Budget if n.detail.contains("max_cost_usd") || n.detail.contains("max_tokens") => {
            html! {
                "Raise the watch's cap (" code { "xo watch --max-cost" } ", "
                code { "[[supervisor.watch]] max_cost_usd" } ") and restart it"
            }
        }
        R::Budget => html! { a href="/settings" { "Raise the budget" } },
        _ => html! { a href={ "/units/" (id) } { "Open " (id) " and steer it" } },
    }
}

pub fn needs_body(units: &[UnitSummary], now: u64) -> Markup {
    let list = needing(units);
    if list.is_empty() {
        return html! { p.empty #no-needs { "No unit needs you." } };
    }
    let one = list.len() == 1;
    html! {
        p.summary {
            (list.len()) " unit" @if !one { "s" } " need" @if one { "s" } " you, the longest waiting first."
        }
        table #needs {
            thead { tr {
                th { "unit" } th { "reason" } th { "waiting" } th { "stretch" }
                th { "last evidence" } th { "answer" }
            } }
            tbody {
                @for u in &list {
                    @if let Some(n) = &u.needs {
                        tr data-unit=(u.unit) {
                            td { a href={ "/units/" (u.unit) } { (u.unit) } }
                            td {
                                span.badge.red { (n.reason) }
                                @if let Some(k) = n.kind { " " small { (k) } }
                            }
                            td { (age(now, n.since)) }
                            td.num { "turns " (n.stretch_from) "–" (n.turn) }
                            td.evidence { (n.detail) }
                            td { (answer(u, n)) }
                        }
                    }
                }
            }
        }
    }
}

pub(crate) async fn needs(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Needs you", "/needs", &q);
    match c.units().await {
        Ok(units) => ok_page(&f, needs_body(&units, f.now)),
        Err(e) => down(&f, &e),
    }
}
