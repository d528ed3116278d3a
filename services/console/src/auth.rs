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

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use xo_runtime::XoConfig;
use xo_runtime::secret::{hex, same};

use crate::ConsoleError;

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
    /// Where a person finds the token, for the login page: the file it is
    /// in (relative to the working directory when under it), or the
    /// environment variable the console started with.
    pub fn where_token(&self) -> String {
        if self.source == "XO_CONSOLE_TOKEN" {
            return "the XO_CONSOLE_TOKEN the console started with (the chart's Secret)".into();
        }
        let path = std::path::Path::new(&self.source);
        let shown = std::env::current_dir()
            .ok()
            .and_then(|d| path.strip_prefix(d).ok().map(|p| p.display().to_string()))
            .unwrap_or_else(|| self.source.clone());
        format!("<code>{}</code>", crate::html::esc(&shown))
    }

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
/// absolute, not another host's (`//host`), no scheme, no `\\` (browsers
/// read it as `/`) and no control character (browsers drop a tab or a line
/// break, so `/\t/host` is `//host`; a CR in a `Location` is a 500).
pub fn local_path(p: &str) -> bool {
    p.starts_with('/')
        && !p.starts_with("//")
        && !p.contains("://")
        && !p.chars().any(|c| c == '\\' || c.is_control())
}

/// `127.0.0.1`, `localhost`, `[::1]` (any port), or another 127/8 address.
pub(crate) fn loopback_host(host: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::loopback_host;

    /// Issue 40, item 5: `next=/%09/host` once sent Chromium to another
    /// host after login, and `next=/%0d/x` was a 500.
    #[test]
    fn a_login_goes_back_only_to_a_local_route() {
        for ok in ["/", "/units/u1", "/tasks?state=blocked", "/a b"] {
            assert!(super::local_path(ok), "{ok}");
        }
        for bad in [
            "//evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r/x",
            "/\\evil.example",
            "/\\/evil.example",
            "https://evil.example",
            "/x?u=https://evil.example",
            "evil.example",
            "",
        ] {
            assert!(!super::local_path(bad), "{bad:?}");
        }
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
