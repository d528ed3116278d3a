//! The login page: the token in, a cookie out.

use super::*;

pub(crate) async fn login_page(State(c): State<Shared>, Query(q): Q) -> Response {
    if let Some(t) = q.get("token") {
        return login_with(&c, t);
    }
    let body = "<form method=\"post\" action=\"/login\" class=\"stack\"><label>Console token (in <code>.xo/console.token</code>, or the chart's Secret)<input name=\"token\" type=\"password\" autocomplete=\"off\" required></label><button type=\"submit\">Log in</button></form>";
    Html(crate::html::page_plain("Log in", body)).into_response()
}

pub(crate) fn login_with(c: &Shared, token: &str) -> Response {
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
    (headers, Redirect::to("/")).into_response()
}

pub(crate) async fn login(
    State(c): State<Shared>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    login_with(&c, form.get("token").map(String::as_str).unwrap_or(""))
}
