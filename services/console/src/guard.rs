//! The rules of `auth` applied to every request (the router's middleware):
//! the host, the token, read-only, CSRF for API writes carried by the
//! cookie, and the login page for a browser whose login is gone.

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Shared;
use crate::auth::{CSRF_HEADER, Credential, local_target, refuse};

/// Where a refused request came from: a form action goes back to the page
/// it was sent from (its `Referer`, on this console), a page to itself.
fn came_from(req: &Request) -> String {
    let path = req.uri().path();
    if !path.starts_with("/ui/") {
        return req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    let referer = req
        .headers()
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| url::Url::parse(r).ok())
        .filter(|u| {
            let authority = match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_string(),
                (None, _) => return false,
            };
            host.is_some_and(|h| h.eq_ignore_ascii_case(&authority))
        })
        .map(|u| crate::auth::path_onwards(&u));
    // Without a Referer: the page a form action belongs to.
    let from_action = || {
        let rest = path.trim_start_matches("/ui");
        match rest.rsplit_once('/') {
            Some((page, _verb)) if !page.is_empty() => page.to_string(),
            _ if !rest.is_empty() => rest.to_string(),
            _ => "/".to_string(),
        }
    };
    referer
        .and_then(|p| local_target(&p))
        .unwrap_or_else(from_action)
}

/// The login page for a browser whose login is gone: the page it was on
/// comes back after the login, and a form's fields (the steering text, an
/// answer) are carried back into it — never sent on their own.
async fn login_again(req: Request, token_at: maud::Markup) -> Response {
    use axum::extract::FromRequest;
    let next = came_from(&req);
    let kept: Vec<(String, String)> = if is_write(req.method()) {
        axum::Form::<Vec<(String, String)>>::from_request(req, &())
            .await
            .map(|f| f.0)
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, v)| k != "csrf" && !v.is_empty())
            .collect()
    } else {
        Vec::new()
    };
    let page = crate::pages::login_form(
        &next,
        &kept,
        if kept.is_empty() {
            "Your login has ended (no console token, or the console's token changed). Log in again to go back to the page you were on."
        } else {
            "Your login has ended, so that was not done. Log in again: you go back to the page, with what you typed put back in the form."
        },
        &token_at,
    );
    (StatusCode::UNAUTHORIZED, axum::response::Html(page)).into_response()
}

fn is_write(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Applies the rules to every request. Form actions check their CSRF
/// field themselves (the body is theirs to read); API writes carried by
/// the cookie must send the header.
pub async fn guard(State(c): State<Shared>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let api = path.starts_with("/api/") || path == "/metrics";
    if !c.auth.host_ok(req.headers()) {
        return refuse(
            api,
            StatusCode::MISDIRECTED_REQUEST,
            "host",
            "this console answers only to a loopback name (127.0.0.1, localhost, [::1]); a page reaching it under another name is refused",
        );
    }
    if path == "/login" || path == "/healthz" || path.starts_with("/assets/") {
        return next.run(req).await;
    }
    let cred = c.auth.credential(req.headers());
    if cred == Credential::Wrong {
        return refuse(
            api,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "wrong token: send `Authorization: Bearer <token>` with the token of console.token (or XO_CONSOLE_TOKEN)",
        );
    }
    let write = is_write(req.method());
    if write && c.auth.read_only() {
        return refuse(
            api,
            StatusCode::FORBIDDEN,
            "read_only",
            "the console is read-only (console.read_only = true): no action is allowed",
        );
    }
    if (write || !c.auth.open_reads()) && !cred.valid() {
        // A browser whose login is gone (no cookie, or the token changed):
        // the login page, which takes it back where it was and, for a form
        // it sent, with what it typed (nothing was done).
        if !api {
            return login_again(req, c.auth.where_token()).await;
        }
        return refuse(
            api,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            if write {
                "this action needs the console token: `Authorization: Bearer <token>` (the token is in console.token), or log in at /login"
            } else {
                "every request needs the console token (`Authorization: Bearer <token>`, or log in at /login); on loopback, console.open_reads = true lets reads through without it"
            },
        );
    }
    let who = c.auth.who(cred);
    if write && api && matches!(cred, Credential::Cookie(_)) {
        let ok = req
            .headers()
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| xo_runtime::secret::same(v, &who.csrf));
        if !ok {
            return refuse(
                true,
                StatusCode::FORBIDDEN,
                "csrf",
                "missing or wrong X-XO-CSRF header: a browser write needs the page's CSRF value",
            );
        }
    }
    // Who asked, for the pages (their forms' CSRF value) and the writes
    // (the audit's `by`).
    crate::auth::as_who(who, next.run(req)).await
}

#[cfg(test)]
mod tests {
    use super::came_from;
    use crate::auth::local_target;

    /// A login sends the browser back only to a page of this console (no
    /// open redirect), and a form action back to the page it was sent from.
    #[test]
    fn a_login_goes_back_only_to_this_console() {
        for ok in ["/", "/units/web-1", "/settings?project=web"] {
            assert_eq!(local_target(ok).as_deref(), Some(ok), "{ok}");
        }
        for bad in [
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "units",
        ] {
            assert_eq!(local_target(bad), None, "{bad}");
        }
        let req = |path: &str, referer: Option<&str>| {
            let mut b = axum::http::Request::builder()
                .method("POST")
                .uri(path)
                .header("host", "127.0.0.1:7878");
            if let Some(r) = referer {
                b = b.header("referer", r);
            }
            b.body(axum::body::Body::empty()).unwrap()
        };
        assert_eq!(
            came_from(&req(
                "/ui/units/web-1/steer",
                Some("http://127.0.0.1:7878/units/web-1?x=1")
            )),
            "/units/web-1?x=1"
        );
        // Another site's page is not where the form came from.
        assert_eq!(
            came_from(&req(
                "/ui/units/web-1/steer",
                Some("http://evil.example/units/x")
            )),
            "/units/web-1"
        );
        assert_eq!(came_from(&req("/ui/tasks/t-1/cancel", None)), "/tasks/t-1");
        assert_eq!(came_from(&req("/ui/settings", None)), "/settings");
        assert_eq!(came_from(&req("/queue?x=1", None)), "/queue?x=1");
    }
}
