//! The knowledge pages: documents, each readable on its own page, the
//! review queue, and the files that do not parse.

use super::*;

pub(crate) async fn knowledge(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Knowledge", "/knowledge", &q);
    let list = match c.call(&ListDocs::default()).await {
        Ok(l) => l,
        Err(e) => return down(&f, &e),
    };
    // Seed 001's user review queue: what a reviewer asked a human to
    // confirm, first; held out of prompts until accepted.
    let waiting: Vec<&DocSummary> = list.docs.iter().filter(|d| d.needs_user_review).collect();
    let mut body = String::new();
    if !waiting.is_empty() {
        body.push_str(&format!(
            "<section id=\"needs-review\"><h2>Needs your review ({})</h2><p class=\"summary\">A review supervisor asked a human to confirm these. They are not given to agents until accepted; rejected, they are deprecated. Each decision is a <code>KNOWLEDGE_REVIEWED</code> line in the audit.</p><div class=\"scroll\"><table><thead><tr><th>Document</th><th>Title</th><th>By</th><th></th></tr></thead><tbody>",
            waiting.len()
        ));
        for d in &waiting {
            let (cat, name) = d.id.split_once('/').unwrap_or(("", &d.id));
            let to = format!("/ui/knowledge/{cat}/{name}/review");
            body.push_str(&format!(
                "<tr data-doc=\"{id}\"><td><code>{id}</code></td><td>{title}</td><td>{by}</td><td>{accept}{reject}</td></tr>",
                id = esc(&d.id),
                title = esc(&d.title),
                by = esc(&d.updated_by),
                accept = action(
                    &f,
                    &to,
                    "<input type=\"hidden\" name=\"decision\" value=\"accept\"><input name=\"note\" placeholder=\"note (optional)\">",
                    "Accept",
                    "",
                ),
                reject = action(
                    &f,
                    &to,
                    "<input type=\"hidden\" name=\"decision\" value=\"reject\"><input name=\"note\" placeholder=\"why\" required>",
                    "Reject",
                    "danger",
                ),
            ));
        }
        body.push_str("</tbody></table></div></section><h2>All documents</h2>");
    }
    body.push_str(
        "<div class=\"scroll\"><table><thead><tr><th>Document</th><th>Title</th><th>Status</th><th>Uses</th><th></th></tr></thead><tbody>",
    );
    for d in &list.docs {
        let (cat, name) = d.id.split_once('/').unwrap_or(("", &d.id));
        let deprecated = d.status == xo_proto::knowledge::DocStatus::Deprecated;
        body.push_str(&format!(
            "<tr><td><a href=\"/knowledge/{cat}/{name}\"><code>{id}</code></a></td><td>{title}</td><td>{status}</td><td class=\"num\">{uses}</td><td>{act}</td></tr>",
            cat = esc(cat),
            name = esc(name),
            id = esc(&d.id),
            title = esc(&d.title),
            status = esc(&format!(
                "{}{}",
                d.status.as_str(),
                if d.needs_user_review {
                    " · awaiting review"
                } else {
                    ""
                }
            )),
            uses = d.uses,
            // A deprecated document has nothing left to deprecate.
            act = if deprecated {
                String::new()
            } else {
                action(
                    &f,
                    &format!("/ui/knowledge/{cat}/{name}/deprecate"),
                    "<input name=\"reason\" placeholder=\"why\" required>",
                    "Deprecate",
                    "danger",
                )
            },
        ));
    }
    body.push_str("</tbody></table></div>");
    if list.docs.is_empty() {
        body.push_str("<p class=\"empty\">No documents yet (`xo knowledge seed`, or the review supervisors write them).</p>");
    }
    if !list.invalid.is_empty() {
        body.push_str("<h2>Files that do not parse</h2><p class=\"summary\">Never injected until fixed; edit the file, the store reads it again.</p><ul id=\"invalid-docs\">");
        for bad in &list.invalid {
            body.push_str(&format!(
                "<li class=\"flash error\"><code>{}</code>: {}</li>",
                esc(&bad.path),
                esc(&bad.error)
            ));
        }
        body.push_str("</ul>");
    }
    ok_page(&f, &body)
}

/// One knowledge document, readable: status, rules, examples, rationale,
/// changelog.
pub(crate) async fn knowledge_doc(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
    Query(q): Q,
) -> Response {
    let id = format!("{category}/{name}");
    let title = format!("Knowledge {id}");
    let f = frame(&c, &title, "/knowledge", &q);
    let d = match c.call(&xo_proto::knowledge::GetDoc { id }).await {
        Ok(d) => d,
        Err(e) => return down(&f, &e),
    };
    let mut body = format!(
        "<h2 id=\"doc-title\">{}</h2><p class=\"summary\">{} · {} uses · last updated by {}{}{}{}</p><h3>Rules</h3><ol id=\"doc-rules\">",
        esc(&d.title),
        esc(d.status.as_str()),
        d.uses,
        esc(&d.updated_by),
        d.after_task
            .as_deref()
            .map(|t| format!(" after {}", esc(t)))
            .unwrap_or_default(),
        d.milestone
            .as_deref()
            .map(|m| format!(" · milestone {}", esc(m)))
            .unwrap_or_default(),
        if d.needs_user_review {
            " · <b>awaiting your review</b>"
        } else {
            ""
        },
    );
    for r in &d.rules {
        body.push_str(&format!("<li>{}</li>", esc(r)));
    }
    body.push_str("</ol>");
    for (h, t) in [("Examples", &d.examples), ("Rationale", &d.rationale)] {
        if !t.is_empty() {
            body.push_str(&format!("<h3>{h}</h3><pre>{}</pre>", esc(t)));
        }
    }
    if !d.tags.is_empty() {
        body.push_str(&format!("<p>Tags: {}</p>", esc(&d.tags.join(", "))));
    }
    body.push_str("<h3>Changelog</h3><ul>");
    for ch in &d.changelog {
        body.push_str(&format!(
            "<li><span class=\"when\">{}</span> {}{}: {}</li>",
            esc(&ch.at),
            esc(&ch.by),
            ch.task
                .as_deref()
                .map(|t| format!(" after {}", esc(t)))
                .unwrap_or_default(),
            esc(&ch.what)
        ));
    }
    body.push_str("</ul>");
    ok_page(&f, &body)
}

pub(crate) async fn ui_deprecate(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
    UiForm(form): UiForm,
) -> Response {
    let reason = field(&form, "reason").unwrap_or_default();
    let r = c
        .call(&DeprecateDoc {
            id: format!("{category}/{name}"),
            author: Author::Operator,
            reason,
        })
        .await
        .map(|_| format!("deprecated {category}/{name}"))
        .map_err(|e| e.message);
    back("/knowledge", r)
}

pub(crate) async fn ui_review(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
    UiForm(form): UiForm,
) -> Response {
    let accept = match field(&form, "decision").as_deref() {
        Some("accept") => true,
        Some("reject") => false,
        other => {
            return back(
                "/knowledge",
                Err(format!("decision {other:?}: accept or reject")),
            );
        }
    };
    let id = format!("{category}/{name}");
    let r = c
        .call(&ReviewDoc {
            id: id.clone(),
            accept,
            by: crate::auth::who().by(None),
            note: field(&form, "note").unwrap_or_default(),
        })
        .await
        .map_err(|e| e.message)
        .and_then(|r| match r.audit_error {
            None => Ok(format!(
                "{} {id}: now {}",
                if accept { "accepted" } else { "rejected" },
                r.doc.status.as_str()
            )),
            Some(e) => Err(format!("{id} is now {}, but {e}", r.doc.status.as_str())),
        });
    back("/knowledge", r)
}
