//! The login page: a token (the form's) or a one-time code (a login
//! link's) in, a cookie out, and back to the page the browser was on, with
//! what it had typed in a form.

use maud::html;

use super::*;

/// The prefix of a kept form field in the login form and in the query of
/// the page it goes back to (`keep.message=…` fills the steering form).
pub const KEEP: &str = "keep.";

/// The login page: a token field, the page to go back to, and the fields
/// of a form the login interrupted, carried along.
/// `token_at` says where the token is ([`crate::auth::Auth::where_token`]).
pub fn login_form(
    next: &str,
    kept: &[(String, String)],
    why: &str,
    token_at: &maud::Markup,
) -> String {
    let next = crate::auth::local_target(next);
    let body = html! {
        @if !why.is_empty() { p.flash.error role="alert" { (why) } }
        form method="post" action="/login" class="stack" #login {
            @if let Some(next) = &next { input type="hidden" name="next" value=(next); }
            @for (k, v) in kept {
                input type="hidden" name={ (KEEP) (k) } value=(v);
            }
            label {
                "Console token (in " (token_at) ")"
                input name="token" type="password" autocomplete="off" required;
            }
            button type="submit" { "Log in" }
        }
        @if !kept.is_empty() {
            details open #kept {
                summary { "What you typed (kept, not sent)" }
                dl { @for (k, v) in kept { dt { (k) } dd { pre { (v) } } } }
            }
        }
    };
    crate::html::page_plain("Log in", body)
}

pub(crate) async fn login_page(State(c): State<Shared>, Query(q): Q) -> Response {
    let next = q.get("next").map(String::as_str).unwrap_or("/");
    if let Some(code) = q.get("code") {
        return match c.auth.redeem(code, c.clock.now_ms()) {
            Some(i) => login_as(&c, i, &q),
            None => (
                StatusCode::UNAUTHORIZED,
                Html(login_form(
                    next,
                    &[],
                    "That login link was used already, or is more than ten minutes old. Log in with your token.",
                    &c.auth.where_token(),
                )),
            )
                .into_response(),
        };
    }
    // A token in a URL stays in the browser's history (and may reach a
    // proxy's log): refused, not used.
    if q.contains_key("token") {
        return (
            StatusCode::BAD_REQUEST,
            Html(login_form(
                next,
                &[],
                "A token in the address is kept in the browser's history, so it was not used. Paste it in the form below; a login link (`xo up` prints one) carries a one-time code instead.",
                &c.auth.where_token(),
            )),
        )
            .into_response();
    }
    Html(login_form(next, &[], "", &c.auth.where_token())).into_response()
}

/// Logs in with `token` (the form's) and goes back.
pub(crate) fn login_with(c: &Shared, token: &str, form: &BTreeMap<String, String>) -> Response {
    match c.auth.matches(token) {
        Some(i) => login_as(c, i, form),
        None => crate::auth::refuse(
            false,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "that is not this console's token, nor a named operator's",
        ),
    }
}

/// Sets operator `i`'s cookie and goes back: to `next` (a path on this
/// console), with the kept form fields in its query.
fn login_as(c: &Shared, i: usize, form: &BTreeMap<String, String>) -> Response {
    let mut headers = HeaderMap::new();
    if let Ok(v) = c.auth.cookie(i).parse() {
        headers.insert(header::SET_COOKIE, v);
    }
    let next = form
        .get("next")
        .and_then(|n| crate::auth::local_target(n))
        .unwrap_or_else(|| "/".to_string());
    let kept: Vec<String> = form
        .iter()
        .filter(|(k, _)| k.starts_with(KEEP))
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect();
    let to = if kept.is_empty() {
        next
    } else {
        let sep = if next.contains('?') { '&' } else { '?' };
        format!("{next}{sep}{}", kept.join("&"))
    };
    (headers, Redirect::to(&to)).into_response()
}

pub(crate) async fn login(
    State(c): State<Shared>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    login_with(
        &c,
        form.get("token").map(String::as_str).unwrap_or(""),
        &form,
    )
}
