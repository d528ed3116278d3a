//! The login page: the token in, a cookie out, and back to the page the
//! browser was on, with what it had typed in a form.

use super::*;

/// The prefix of a kept form field in the login form and in the query of
/// the page it goes back to (`keep.message=…` fills the steering form).
pub const KEEP: &str = "keep.";

/// The login page: a token field, the page to go back to, and the fields
/// of a form the login interrupted, carried along.
/// `token_at` says where the token is ([`crate::auth::Auth::where_token`]).
pub fn login_form(next: &str, kept: &[(String, String)], why: &str, token_at: &str) -> String {
    let mut hidden = String::new();
    let mut shown = String::new();
    if crate::auth::local_path(next) {
        hidden.push_str(&format!(
            "<input type=\"hidden\" name=\"next\" value=\"{}\">",
            esc(next)
        ));
    }
    for (k, v) in kept {
        hidden.push_str(&format!(
            "<input type=\"hidden\" name=\"{KEEP}{}\" value=\"{}\">",
            esc(k),
            esc(v)
        ));
        shown.push_str(&format!(
            "<dt>{}</dt><dd><pre>{}</pre></dd>",
            esc(k),
            esc(v)
        ));
    }
    let kept = if shown.is_empty() {
        String::new()
    } else {
        format!(
            "<details open id=\"kept\"><summary>What you typed (kept, not sent)</summary><dl>{shown}</dl></details>"
        )
    };
    let why = if why.is_empty() {
        String::new()
    } else {
        format!("<p class=\"flash error\" role=\"alert\">{}</p>", esc(why))
    };
    crate::html::page_plain(
        "Log in",
        &format!(
            "{why}<form method=\"post\" action=\"/login\" class=\"stack\" id=\"login\">{hidden}<label>Console token (in {token_at})<input name=\"token\" type=\"password\" autocomplete=\"off\" required></label><button type=\"submit\">Log in</button></form>{kept}"
        ),
    )
}

pub(crate) async fn login_page(State(c): State<Shared>, Query(q): Q) -> Response {
    if let Some(t) = q.get("token") {
        return login_with(&c, t, &q);
    }
    let next = q.get("next").map(String::as_str).unwrap_or("/");
    Html(login_form(next, &[], "", &c.auth.where_token())).into_response()
}

/// Sets the cookie and goes back: to `next` (a path on this console),
/// with the kept form fields in its query.
pub(crate) fn login_with(c: &Shared, token: &str, form: &BTreeMap<String, String>) -> Response {
    if !c.auth.matches(token) {
        return crate::auth::refuse(
            false,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "that is not this console's token",
        );
    }
    let mut headers = HeaderMap::new();
    if let Ok(v) = c.auth.cookie().parse() {
        headers.insert(header::SET_COOKIE, v);
    }
    let next = form
        .get("next")
        .filter(|n| crate::auth::local_path(n))
        .map(String::as_str)
        .unwrap_or("/");
    let kept: Vec<String> = form
        .iter()
        .filter(|(k, _)| k.starts_with(KEEP))
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect();
    let to = if kept.is_empty() {
        next.to_string()
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
