//! The audit page: who changed what, before → after, filtered, live.

use super::*;

/// An audit line's prompt and reply (seed 003), folded.
pub(crate) fn exchange_details(e: &xo_proto::queue::AuditEvent) -> String {
    let mut s = String::new();
    for (label, text) in [("prompt", &e.prompt), ("response", &e.response)] {
        if let Some(t) = text {
            s.push_str(&format!(
                "<details class=\"exchange\"><summary>{label}</summary><pre>{}</pre></details>",
                esc(t)
            ));
        }
    }
    s
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
pub(crate) fn audit_diff(before: &Value, after: &Value) -> String {
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
    let mut out = String::from("<ul class=\"diff\">");
    let mut n = 0;
    for k in keys {
        let (x, y) = (b.get(k), a.get(k));
        if x == y || k == "last_updated" {
            continue;
        }
        n += 1;
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
        out.push_str(&format!(
            "<li><code>{}</code>: {} → <b>{}</b></li>",
            esc(k),
            esc(&show(x)),
            esc(&show(y))
        ));
    }
    if n == 0 {
        return String::new();
    }
    out.push_str("</ul>");
    out
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
    let mut body = format!(
        "<form method=\"get\" class=\"filters\"><label>Project <input name=\"project\" value=\"{p}\" placeholder=\"the goal's\"></label>\
<label>Lines <input name=\"lines\" type=\"number\" min=\"1\" max=\"10000\" value=\"{lines}\"></label>\
<label>Event <input name=\"event\" value=\"{ev}\" placeholder=\"e.g. TASK_BLOCKED\"></label>\
<label>Task <input name=\"task\" value=\"{tk}\" placeholder=\"task id\"></label>\
<button type=\"submit\">Show</button> <button type=\"submit\" name=\"verify\" value=\"1\" id=\"verify\">Verify the chain</button></form>",
        p = esc(project.as_deref().unwrap_or("")),
        ev = esc(q.get("event").map(String::as_str).unwrap_or("")),
        tk = esc(q.get("task").map(String::as_str).unwrap_or("")),
    );
    let want_event = q
        .get("event")
        .filter(|e| !e.is_empty())
        .map(|e| e.to_uppercase());
    let want_task = q.get("task").filter(|t| !t.is_empty());
    let mut broken_at = None;
    if q.contains_key("verify") {
        match c
            .call(&AuditVerify {
                project: project.clone(),
            })
            .await
        {
            Ok(v) if v.intact => body.push_str(&format!(
                "<p class=\"flash ok\" id=\"verdict\">Chain intact: {} lines of project {}.</p>",
                v.lines,
                esc(&v.project)
            )),
            Ok(v) => {
                broken_at = v.broken_at;
                body.push_str(&format!(
                    "<p class=\"flash error\" id=\"verdict\">Chain broken at line {}: {}</p>",
                    v.broken_at.unwrap_or(0),
                    esc(v.reason.as_deref().unwrap_or(""))
                ))
            }
            Err(e) => body.push_str(&format!(
                "<p class=\"flash error\" id=\"verdict\">{}</p>",
                esc(&e.message)
            )),
        }
    }
    body.push_str("<div class=\"scroll\"><table id=\"audit\" data-live-reload=\"1\"><thead><tr><th>#</th><th>At</th><th>Event</th><th>Task or unit</th><th>By</th><th>Changed</th></tr></thead><tbody>");
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
    for e in &shown {
        let cls = if broken_at == Some(e.seq) {
            " class=\"broken\""
        } else {
            ""
        };
        body.push_str(&format!(
            "<tr{cls}><td class=\"num\">{seq}</td><td>{at}</td><td><b>{ev}</b></td><td>{task}</td><td>{by}</td><td>{diff}<details class=\"raw\"><summary>before / after</summary><code>{b}</code><br><code>{a}</code></details>{ex}</td></tr>",
            seq = e.seq,
            at = esc(&xo_runtime::clock::rfc3339(e.at)),
            ev = esc(e.event.as_str()),
            // A task's line links its task; an operator's steering or
            // acknowledgement its unit.
            task = match (e.task_id.as_deref(), e.state_after.get("unit").and_then(Value::as_str)) {
                (Some(t), _) => format!("<a href=\"/tasks/{t}\"><code>{t}</code></a>", t = esc(t)),
                (None, Some(u)) if xo_proto::validate_token("unit", u).is_ok() => {
                    format!("unit <a href=\"/units/{u}\"><code>{u}</code></a>", u = esc(u))
                }
                _ => String::new(),
            },
            by = esc(&audit_actor(e)),
            diff = audit_diff(&e.state_before, &e.state_after),
            b = esc(&compact(&e.state_before)),
            a = esc(&compact(&e.state_after)),
            ex = exchange_details(e),
        ));
    }
    body.push_str("</tbody></table></div>");
    if events.is_empty() {
        body.push_str("<p class=\"empty\">No audit lines yet for this project.</p>");
    }
    ok_page(&f, &body)
}
