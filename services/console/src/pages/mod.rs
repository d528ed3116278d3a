//! The pages: server-rendered HTML that reads without JavaScript, and form
//! actions (`POST /ui/...`) that redirect back with a message. The script
//! (`assets/console.js`) adds live updates from `/api/v1/events`.
//!
//! A service that does not answer gives a page that says which service and
//! how to start it (status 503), never a 500.

use std::collections::BTreeMap;

use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::Value;
use xo_proto::Severity;
use xo_proto::control::{ServiceError, ShowUnit, SteerUnit, UnitSummary};
use xo_proto::fleet::{FleetLs, FleetRestart, FleetScale};
use xo_proto::knowledge::{Author, DeprecateDoc, DocSummary, ListDocs, ListReviewRuns, ReviewDoc};
use xo_proto::queue::{
    Answer, AuditTail, AuditVerify, Cancel, Enqueue, GetStatus, Halt, Init, Resume, RetryTask,
    SetGoal, Start, Step, Task, TaskRecord, TaskState,
};
use xo_proto::settings::{GetSettings, PutSettings, SettingsView};

use maud::html;

use crate::Shared;
use crate::html::{Frame, age, health_name, page, post_form, wire};

mod audit;
mod charts;
mod containers;
mod directives;
pub(crate) mod fleet;
mod knowledge;
mod login;
mod needs;
mod queue;
mod settings;
mod task;
mod unit;

use audit::*;
use charts::*;
use containers::*;
use directives::*;
use fleet::*;
use knowledge::*;
pub use login::login_form;
use login::*;
pub use needs::needing;
use needs::*;
use queue::*;
use settings::*;
use task::*;
use unit::*;

type Q = Query<BTreeMap<String, String>>;

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/", get(fleet))
        .route("/needs", get(needs))
        .route("/units/{unit}", get(unit))
        .route("/queue", get(queue))
        .route("/tasks/{id}", get(task_page))
        .route("/tasks/{id}/prompts", get(task_prompts))
        .route("/tasks/{id}/worklog", get(task_worklog))
        .route("/audit", get(audit))
        .route("/charts", get(charts))
        .route("/knowledge", get(knowledge))
        .route("/knowledge/{category}/{name}", get(knowledge_doc))
        .route("/directives", get(directives))
        .route("/reviews", get(reviews))
        .route("/containers", get(containers))
        .route("/settings", get(settings))
        .route("/login", get(login_page).post(login))
        .route("/ui/units/{unit}/steer", post(ui_steer))
        .route("/ui/units/{unit}/ack", post(ui_ack))
        .route("/ui/units/{unit}/row", get(unit_row_fragment))
        .route("/ui/queue/{verb}", post(ui_queue))
        .route("/ui/tasks/{id}/{verb}", post(ui_task))
        .route(
            "/ui/knowledge/{category}/{name}/deprecate",
            post(ui_deprecate),
        )
        .route("/ui/knowledge/{category}/{name}/review", post(ui_review))
        .route("/ui/fleet/{role}/scale", post(ui_scale))
        .route("/ui/fleet/units/{unit}/restart", post(ui_restart))
        .route("/ui/settings", post(ui_settings))
}

/// The flash message of a page: only one the console's own redirect
/// ([`back`]) put in the address, signed with a key made at start. A link
/// someone else made (`?error=Your session expired, call +1…`) shows
/// nothing.
fn flash(q: &BTreeMap<String, String>) -> Option<(bool, String)> {
    let sig = q.get("sig")?;
    let (ok, m) = match (q.get("error"), q.get("ok")) {
        (Some(e), _) => (false, e),
        (None, Some(m)) => (true, m),
        (None, None) => return None,
    };
    xo_runtime::secret::same(sig, &flash_sig(ok, m)).then(|| (ok, m.clone()))
}

/// HMAC-SHA-256 (RFC 2104) of a flash message under the console's flash
/// key, hex.
fn flash_sig(ok: bool, message: &str) -> String {
    use sha2::{Digest, Sha256};
    static KEY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(|| {
        xo_runtime::secret::random_hex(32)
            .unwrap_or_else(|_| format!("{:?}", std::time::SystemTime::now()))
            .into_bytes()
    });
    let mut block = [0u8; 64];
    block[..key.len().min(64)].copy_from_slice(&key[..key.len().min(64)]);
    let pad = |b: u8| block.iter().map(|k| k ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update([u8::from(ok)])
        .chain_update(message.as_bytes())
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    xo_runtime::secret::hex(&outer)
}

fn frame<'a>(
    c: &'a Shared,
    title: &'a str,
    active: &'a str,
    q: &BTreeMap<String, String>,
) -> Frame<'a> {
    Frame {
        title,
        active,
        csrf: crate::auth::who().csrf,
        read_only: c.auth.read_only(),
        flash: flash(q),
        now: c.clock.now_ms(),
    }
}

fn ok_page(f: &Frame<'_>, body: maud::Markup) -> Response {
    Html(page(f, body)).into_response()
}

/// The page of a service that did not answer: which, and how to start it.
/// A page refused for what its address named (400), saying why.
fn bad_request(f: &Frame<'_>, why: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Html(page(f, html! { p.flash.error { (why) } })),
    )
        .into_response()
}

fn down(f: &Frame<'_>, e: &ServiceError) -> Response {
    let body = html! {
        div.down role="alert" { h2 { "Not available" } p { (e.message) } }
    };
    let status = crate::api::status_of(e.code);
    let status = if status == StatusCode::INTERNAL_SERVER_ERROR {
        StatusCode::BAD_GATEWAY
    } else {
        status
    };
    (status, Html(page(f, body))).into_response()
}

/// A form action's fields, once its CSRF value checked out (every
/// `POST /ui/...` takes this instead of checking for itself).
struct UiForm(Vec<(String, String)>);

impl axum::extract::FromRequest<Shared> for UiForm {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, c: &Shared) -> Result<Self, Response> {
        // Read here, not by the extractor: a form over the bound is read to
        // its end (up to FORM_DRAIN) before the refusal goes out, so the
        // browser gets the page that says why, not a reset connection.
        use futures::StreamExt;
        let (parts, body) = req.into_parts();
        let mut stream = body.into_data_stream();
        let (mut buf, mut total) = (Vec::new(), 0usize);
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else {
                return Err(unreadable_form(StatusCode::BAD_REQUEST));
            };
            total += chunk.len();
            if total > FORM_DRAIN {
                break;
            }
            if total <= FORM_LIMIT {
                buf.extend_from_slice(&chunk);
            }
        }
        if total > FORM_LIMIT {
            return Err(unreadable_form(StatusCode::PAYLOAD_TOO_LARGE));
        }
        let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(buf));
        let Form(form) = Form::<Vec<(String, String)>>::from_request(req, c)
            .await
            .map_err(|r| unreadable_form(r.status()))?;
        if !csrf_ok(&form) {
            return Err(refused_csrf());
        }
        Ok(UiForm(form))
    }
}

/// The largest form the console takes (a steering message, an answer, a
/// template): 2 MB.
const FORM_LIMIT: usize = 2 << 20;
/// A larger one is still read to its end up to this much before it is
/// refused (then the connection is closed on it).
const FORM_DRAIN: usize = 32 << 20;

/// A form the console could not read, in plain words (not the
/// extractor's): too large, or not a form; nothing was done.
fn unreadable_form(status: StatusCode) -> Response {
    let why = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "What was sent is larger than the console takes (2 MB), so nothing was done. Go back: what you typed is still in the page; shorten it (a steering message is at most 4000 characters) and send it again.".to_string()
    } else {
        format!(
            "The console could not read what was sent as a form ({}), so nothing was done. Go back and send it again from the page.",
            status.canonical_reason().unwrap_or("unreadable")
        )
    };
    let body = crate::html::page_plain(
        "Not sent",
        html! { p.flash.error #unreadable-form { (why) } },
    );
    (status, Html(body)).into_response()
}

/// A form field's value (the last one wins, like a checkbox after its hidden default).
fn field(form: &[(String, String)], name: &str) -> Option<String> {
    form.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

fn csrf_ok(form: &[(String, String)]) -> bool {
    let who = crate::auth::who();
    !who.csrf.is_empty()
        && field(form, "csrf").is_some_and(|v| xo_runtime::secret::same(&v, &who.csrf))
}

/// Percent-encodes a query value (`percent-encoding`: all but the
/// unreserved `A-Z a-z 0-9 - _ . ~`).
pub fn enc(s: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const VALUE: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(s, VALUE).to_string()
}

/// A refused form's page query: every field as typed (`keep.<name>`, the
/// CSRF value aside) and `why` as its error flash.
fn kept_refusal(form: &[(String, String)], why: String) -> BTreeMap<String, String> {
    let mut q: BTreeMap<String, String> = form
        .iter()
        .filter(|(k, _)| k != "csrf")
        .map(|(k, v)| (format!("{KEEP}{k}"), v.clone()))
        .collect();
    q.insert("sig".into(), flash_sig(false, &why));
    q.insert("error".into(), why);
    q
}

/// A page shown again for a refusal: 400 where it rendered (an error page
/// keeps its own status).
fn refused_page(mut r: Response) -> Response {
    if r.status() == StatusCode::OK {
        *r.status_mut() = StatusCode::BAD_REQUEST;
    }
    r
}

fn back(to: &str, r: Result<String, String>) -> Response {
    let sep = if to.contains('?') { '&' } else { '?' };
    let url = match r {
        Ok(m) => format!("{to}{sep}ok={}&sig={}", enc(&m), flash_sig(true, &m)),
        Err(e) => format!("{to}{sep}error={}&sig={}", enc(&e), flash_sig(false, &e)),
    };
    Redirect::to(&url).into_response()
}

fn refused_csrf() -> Response {
    crate::auth::refuse(
        false,
        StatusCode::FORBIDDEN,
        "csrf",
        "this form's CSRF value is missing or wrong: reload the page and try again",
    )
}

#[cfg(test)]
mod tests;
