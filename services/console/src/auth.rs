//! Who may do what.
//!
//! - One bearer token: `XO_CONSOLE_TOKEN`, else `console.token_file`, else
//!   `<state.dir>/console.token`, made with mode 0600 on first start.
//! - Every request needs it, but reads on a loopback console with
//!   `console.open_reads` (off by default: any local user could read).
//! - A loopback console answers only requests whose `Host` is a loopback
//!   name (`127.0.0.1`, `localhost`, `[::1]`): a web page whose name an
//!   attacker rebinds to 127.0.0.1 (DNS rebinding) is refused.
//! - A browser logs in once (`/login?token=…` or the login form): the token
//!   goes into an HttpOnly, SameSite=Strict cookie. A write carried by that
//!   cookie must also carry the CSRF value (form field `csrf` or header
//!   `X-XO-CSRF`), derived from the token, so another site cannot forge it.
//!   A write with `Authorization: Bearer` needs no CSRF value.
//! - Read-only mode refuses every write and the pages hide the actions.

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use xo_runtime::XoConfig;
use xo_runtime::secret::{hex, same};

use crate::{ConsoleError, Shared};

/// The cookie a logged-in browser carries.
pub const COOKIE: &str = "xo_console";
/// The header a script sends the CSRF value in.
pub const CSRF_HEADER: &str = "x-xo-csrf";

/// The token and the rules in force.
pub struct Auth {
    token: String,
    csrf: String,
    /// Loopback with `console.open_reads`: reads need no token.
    open_reads: bool,
    /// Bound to a loopback address: the `Host` must be a loopback name.
    loopback: bool,
    read_only: bool,
    /// Where the token came from (for the log, never the token itself).
    pub source: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("source", &self.source)
            .field("open_reads", &self.open_reads)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// A new console token: 256 bits from the kernel's CSPRNG.
fn random_token() -> Result<String, std::io::Error> {
    xo_runtime::secret::random_hex(32)
}

impl Auth {
    /// The token from the environment, the configured file, or a new one
    /// written to `<state.dir>/console.token` (0600).
    pub fn load(cfg: &XoConfig, bound: SocketAddr) -> Result<Self, ConsoleError> {
        let err = |path: &PathBuf, reason: String| ConsoleError::Token {
            path: path.display().to_string(),
            reason,
        };
        let (token, source) = match std::env::var("XO_CONSOLE_TOKEN") {
            Ok(t) if !t.trim().is_empty() => (t.trim().to_string(), "XO_CONSOLE_TOKEN".to_string()),
            _ => {
                let path = if cfg.console.token_file.is_empty() {
                    cfg.state.console_token_path()
                } else {
                    PathBuf::from(&cfg.console.token_file)
                };
                match std::fs::read_to_string(&path) {
                    Ok(t) if !t.trim().is_empty() => {
                        (t.trim().to_string(), path.display().to_string())
                    }
                    Ok(_) => {
                        return Err(err(
                            &path,
                            "is empty; delete it to have a new token made, or write one".into(),
                        ));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        let t = random_token()
                            .map_err(|e| err(&path, format!("no randomness: {e}")))?;
                        write_private(&path, &t).map_err(|e| err(&path, e.to_string()))?;
                        (t, path.display().to_string())
                    }
                    Err(e) => return Err(err(&path, e.to_string())),
                }
            }
        };
        if token.len() < 16 {
            return Err(ConsoleError::Token {
                path: source,
                reason: format!("is {} characters; use at least 16", token.len()),
            });
        }
        let csrf = hex(&Sha256::digest(
            format!("xo-console-csrf:{token}").as_bytes(),
        ));
        Ok(Self {
            token,
            csrf,
            open_reads: cfg.console.open_reads && bound.ip().is_loopback(),
            loopback: bound.ip().is_loopback(),
            read_only: cfg.console.read_only,
            source,
        })
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// The value forms carry in `csrf`.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    pub fn open_reads(&self) -> bool {
        self.open_reads
    }

    /// Whether a request's `Host` may reach this console: on loopback,
    /// only a loopback name (a rebound DNS name is someone else's page).
    pub fn host_ok(&self, headers: &HeaderMap) -> bool {
        if !self.loopback {
            return true;
        }
        let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
            // HTTP/1.0 without Host: not a browser's request.
            return true;
        };
        loopback_host(host)
    }

    /// How a request proves itself.
    pub fn credential(&self, headers: &HeaderMap) -> Credential {
        if let Some(v) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        {
            return match v.strip_prefix("Bearer ") {
                Some(t) if same(t.trim(), &self.token) => Credential::Bearer,
                _ => Credential::Wrong,
            };
        }
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)
            .map(|(_, v)| v.to_string());
        match cookie {
            Some(c) if same(&c, &self.token) => Credential::Cookie,
            Some(_) => Credential::Wrong,
            None => Credential::None,
        }
    }

    /// Whether a login token is the console's.
    pub fn matches(&self, token: &str) -> bool {
        same(token.trim(), &self.token)
    }

    pub fn csrf_ok(&self, value: &str) -> bool {
        same(value, &self.csrf)
    }

    /// The `Set-Cookie` value of a login.
    pub fn cookie(&self) -> String {
        format!("{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", self.token)
    }
}

fn write_private(path: &PathBuf, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")
}

/// How a request authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    None,
    /// A token that is not the console's.
    Wrong,
    Bearer,
    Cookie,
}

impl Credential {
    pub fn valid(self) -> bool {
        matches!(self, Credential::Bearer | Credential::Cookie)
    }
}

/// A refusal, as JSON for the API and as a page for a browser.
pub fn refuse(api: bool, status: StatusCode, code: &str, message: &str) -> Response {
    if api {
        (
            status,
            axum::Json(serde_json::json!({"code": code, "message": message})),
        )
            .into_response()
    } else {
        let body = crate::html::page_plain(
            "Not allowed",
            &format!(
                "<p class=\"flash error\">{}</p><p><a href=\"/login\">Log in with the console token</a></p>",
                crate::html::esc(message)
            ),
        );
        (status, axum::response::Html(body)).into_response()
    }
}

/// A path on this console that a login may send the browser back to:
/// absolute, not another host's (`//host`, `/\\host`), no scheme.
pub fn local_path(p: &str) -> bool {
    p.starts_with('/') && !p.starts_with("//") && !p.starts_with("/\\") && !p.contains("://")
}

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
        .and_then(|r| r.split_once("://"))
        .and_then(|(_, rest)| rest.split_once('/'))
        .filter(|(authority, _)| host.is_some_and(|h| h.eq_ignore_ascii_case(authority)))
        .map(|(_, p)| format!("/{p}"));
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
        .filter(|p| local_path(p))
        .unwrap_or_else(from_action)
}

/// The login page for a browser whose login is gone: the page it was on
/// comes back after the login, and a form's fields (the steering text, an
/// answer) are carried back into it — never sent on their own.
async fn login_again(req: Request) -> Response {
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
    );
    (StatusCode::UNAUTHORIZED, axum::response::Html(page)).into_response()
}

/// `127.0.0.1`, `localhost`, `[::1]` (any port), or another 127/8 address.
fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(n, _)| n)
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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
            return login_again(req).await;
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
    if write && api && cred == Credential::Cookie {
        let ok = req
            .headers()
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| c.auth.csrf_ok(v));
        if !ok {
            return refuse(
                true,
                StatusCode::FORBIDDEN,
                "csrf",
                "missing or wrong X-XO-CSRF header: a browser write needs the page's CSRF value",
            );
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::{came_from, local_path, loopback_host};

    /// A login sends the browser back only to a page of this console (no
    /// open redirect), and a form action back to the page it was sent from.
    #[test]
    fn a_login_goes_back_only_to_this_console() {
        for ok in ["/", "/units/web-1", "/settings?project=web"] {
            assert!(local_path(ok), "{ok}");
        }
        for bad in [
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "units",
        ] {
            assert!(!local_path(bad), "{bad}");
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

    #[test]
    fn only_loopback_names_reach_a_loopback_console() {
        for ok in [
            "127.0.0.1:7878",
            "127.0.0.1",
            "localhost:7878",
            "LOCALHOST",
            "[::1]:7878",
            "127.1.2.3:80",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example:7878",
            "10.0.0.1:7878",
            "localhost.evil.example",
            "[2001:db8::1]:7878",
            "",
        ] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }
}
