//! The audit page: who changed what, before → after, filtered, live.

use maud::{Markup, html};

use super::*;

/// An audit line's prompt and reply (seed 003), folded.
pub(crate) fn exchange_details(e: &xo_proto::queue::AuditEvent) -> Markup {
    html! {
        @for (label, text) in [("prompt", &e.prompt), ("response", &e.response)] {
            @if let Some(t) = text {
                details.exchange { summary { (label) } pre { (t) } }
            }
        }
    }
}

/// Who made an audit line's change: the operator or service it names
/// (`by`), else the runner holding the task, else the queue.
pub(crate) fn audit_actor(e: &xo_proto::queue::AuditEvent) -> String {
    let a = &e.state_after;
    a.get("by")
        .and_then(Value::as_str)
        .map(String::from)
        .or_else(|| {
            a.pointer("/task/claimant")
                .and_then(Value::as_str)
                .or_else(|| {
                    e.state_before
                        .pointer("/task/claimant")
                        .and_then(Value::as_str)
                })
                .map(String::from)
        })
        .unwrap_or_else(|| "queue".into())
}

/// What an audit line changed: each leaf that differs between before and
/// after (`task.state: running → completed`), not the two whole states.
pub(crate) fn audit_diff(before: &Value, after: &Value) -> Markup {
    fn leaves(v: &Value, path: String, out: &mut BTreeMap<String, String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    leaves(x, p, out);
                }
            }
            Value::Null => {}
            other => {
                out.insert(path, other.to_string().trim_matches('"').to_string());
            }
        }
    }
    let (mut b, mut a) = (BTreeMap::new(), BTreeMap::new());
    leaves(before, String::new(), &mut b);
    leaves(after, String::new(), &mut a);
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    let changed: Vec<(&String, Option<&String>, Option<&String>)> = keys
        .into_iter()
        .map(|k| (k, b.get(k), a.get(k)))
        .filter(|(k, x, y)| x != y && k.as_str() != "last_updated")
        .collect();
    if changed.is_empty() {
        return html! {};
    }
    let show = |v: Option<&String>| {
        v.map(|s| {
            let mut t: String = s.chars().take(120).collect();
            if s.chars().count() > 120 {
                t.push('…');
            }
            t
        })
        .unwrap_or_else(|| "—".into())
    };
    html! {
        ul.diff {
            @for (k, x, y) in &changed {
                li { code { (k) } ": " (show(*x)) " → " b { (show(*y)) } }
            }
        }
    }
}

pub(crate) fn compact(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 240 {
        format!(
            "{}…",
            &s[..s
                .char_indices()
                .take_while(|(i, _)| *i < 240)
                .last()
                .map_or(0, |(i, ch)| i + ch.len_utf8())]
        )
    } else {
        s
    }
}

pub(crate) async fn audit(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Audit", "/audit", &q);
    let project = q.get("project").filter(|p| !p.is_empty()).cloned();
    if let Some(p) = &project
        && let Err(e) = xo_proto::validate_token("project", p)
    {
        return bad_request(&f, &e.to_string());
    }
    let lines = q.get("lines").and_then(|l| l.parse().ok()).unwrap_or(200);
    let events = match c
        .call(&AuditTail {
            project: project.clone(),
            lines: Some(lines),
        })
        .await
    {
        Ok(e) => e,
        Err(e) => return down(&f, &e),
    };
    let want_event = q
        .get("event")
        .filter(|e| !e.is_empty())
        .map(|e| e.to_uppercase());
    let want_task = q.get("task").filter(|t| !t.is_empty());
    let verdict = if q.contains_key("verify") {
        Some(
            c.call(&AuditVerify {
                project: project.clone(),
            })
            .await,
        )
    } else {
        None
    };
    let broken_at = match &verdict {
        Some(Ok(v)) if !v.intact => v.broken_at,
        _ => None,
    };
    let shown: Vec<&xo_proto::queue::AuditEvent> = events
        .iter()
        .rev()
        .filter(|e| {
            want_event
                .as_ref()
                .is_none_or(|w| e.event.as_str().contains(w.as_str()))
        })
        .filter(|e| want_task.is_none_or(|t| e.task_id.as_deref() == Some(t.as_str())))
        .collect();
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let body = html! {
        form method="get" class="filters" {
            label { "Project " input name="project" value=(project.as_deref().unwrap_or("")) placeholder="the goal's"; }
            label { "Lines " input name="lines" type="number" min="1" max="10000" value=(lines); }
            label { "Event " input name="event" value=(get("event")) placeholder="e.g. TASK_BLOCKED"; }
            label { "Task " input name="task" value=(get("task")) placeholder="task id"; }
            button type="submit" { "Show" }
            " "
            button type="submit" name="verify" value="1" #verify { "Verify the chain" }
        }
        @match &verdict {
            Some(Ok(v)) if v.intact => p.flash.ok #verdict {
                "Chain intact: " (v.lines) " lines of project " (v.project) "."
            },
            Some(Ok(v)) => p.flash.error #verdict {
                "Chain broken at line " (v.broken_at.unwrap_or(0)) ": " (v.reason.as_deref().unwrap_or(""))
            },
            Some(Err(e)) => p.flash.error #verdict { (e.message) },
            None => {},
        }
        div.scroll { table #audit data-live-reload="1" {
            thead { tr {
                th { "#" } th { "At" } th { "Event" } th { "Task or unit" } th { "By" } th { "Changed" }
            } }
            tbody {
                @for e in &shown {
                    tr class=[(broken_at == Some(e.seq)).then_some("broken")] {
                        td.num { (e.seq) }
                        td { (xo_runtime::clock::rfc3339(e.at)) }
                        td { b { (e.event.as_str()) } }
                        // A task's line links its task; an operator's
                        // steering or acknowledgement its unit.
                        td {
                            @match (e.task_id.as_deref(), e.state_after.get("unit").and_then(Value::as_str)) {
                                (Some(t), _) => a href={ "/tasks/" (t) } { code { (t) } },
                                (None, Some(u)) if xo_proto::validate_token("unit", u).is_ok() => {
                                    "unit " a href={ "/units/" (u) } { code { (u) } }
                                },
                                _ => {},
                            }
                        }
                        td { (audit_actor(e)) }
                        td {
                            (audit_diff(&e.state_before, &e.state_after))
                            details.raw {
                                summary { "before / after" }
                                code { (compact(&e.state_before)) }
                                br;
                                code { (compact(&e.state_after)) }
                            }
                            (exchange_details(e))
                        }
                    }
                }
            }
        } }
        @if events.is_empty() { p.empty { "No audit lines yet for this project." } }
    };
    ok_page(&f, body)
}
