//! The knowledge pages: documents, each readable on its own page, the
//! review queue, and the files that do not parse.

use maud::html;

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
    let body = html! {
        @if !waiting.is_empty() {
            section #needs-review {
                h2 { "Needs your review (" (waiting.len()) ")" }
                p.summary {
                    "A review supervisor asked a human to confirm these. They are not given to agents until accepted; rejected, they are deprecated. Each decision is a "
                    code { "KNOWLEDGE_REVIEWED" } " line in the audit."
                }
                div.scroll { table {
                    thead { tr { th { "Document" } th { "Title" } th { "By" } th {} } }
                    tbody {
                        @for d in &waiting {
                            @let (cat, name) = d.id.split_once('/').unwrap_or(("", &d.id));
                            @let to = format!("/ui/knowledge/{cat}/{name}/review");
                            tr data-doc=(d.id) {
                                td { code { (d.id) } }
                                td { (d.title) }
                                td { (d.updated_by) }
                                td {
                                    (post_form(&f, &to, html! {
                                        input type="hidden" name="decision" value="accept";
                                        input name="note" placeholder="note (optional)";
                                    }, "Accept", ""))
                                    (post_form(&f, &to, html! {
                                        input type="hidden" name="decision" value="reject";
                                        input name="note" placeholder="why" required;
                                    }, "Reject", "danger"))
                                }
                            }
                        }
                    }
                } }
            }
            h2 { "All documents" }
        }
        div.scroll { table {
            thead { tr { th { "Document" } th { "Title" } th { "Status" } th { "Uses" } th {} } }
            tbody {
                @for d in &list.docs {
                    @let (cat, name) = d.id.split_once('/').unwrap_or(("", &d.id));
                    tr {
                        td { a href={ "/knowledge/" (cat) "/" (name) } { code { (d.id) } } }
                        td { (d.title) }
                        td { (d.status.as_str()) @if d.needs_user_review { " · awaiting review" } }
                        td.num { (d.uses) }
                        // A deprecated document has nothing left to deprecate.
                        td {
                            @if d.status != xo_proto::knowledge::DocStatus::Deprecated {
                                (post_form(
                                    &f,
                                    &format!("/ui/knowledge/{cat}/{name}/deprecate"),
                                    html! { input name="reason" placeholder="why" required; },
                                    "Deprecate",
                                    "danger",
                                ))
                            }
                        }
                    }
                }
            }
        } }
        @if list.docs.is_empty() {
            p.empty { "No documents yet (`xo knowledge seed`, or the review supervisors write them)." }
        }
        @if !list.invalid.is_empty() {
            h2 { "Files that do not parse" }
            p.summary { "Never injected until fixed; edit the file, the store reads it again." }
            ul #invalid-docs {
                @for bad in &list.invalid {
                    li.flash.error { code { (bad.path) } ": " (bad.error) }
                }
            }
        }
    };
    ok_page(&f, body)
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
    let body = html! {
        h2 #doc-title { (d.title) }
        p.summary {
            (d.status.as_str()) " · " (d.uses) " uses · last updated by " (d.updated_by)
            @if let Some(t) = &d.after_task { " after " (t) }
            @if let Some(m) = &d.milestone { " · milestone " (m) }
            @if d.needs_user_review { " · " b { "awaiting your review" } }
        }
        h3 { "Rules" }
        ol #doc-rules { @for r in &d.rules { li { (r) } } }
        @for (h, t) in [("Examples", &d.examples), ("Rationale", &d.rationale)] {
            @if !t.is_empty() { h3 { (h) } pre { (t) } }
        }
        @if !d.tags.is_empty() { p { "Tags: " (d.tags.join(", ")) } }
        h3 { "Changelog" }
        ul {
            @for ch in &d.changelog {
                li {
                    span.when { (ch.at) } " " (ch.by)
                    @if let Some(t) = &ch.task { " after " (t) }
                    ": " (ch.what)
                }
            }
        }
    };
    ok_page(&f, body)
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
