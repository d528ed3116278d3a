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
//! - Named operators (`console.operators_file`: lines `NAME TOKEN`) each
//!   log in with a token of their own; every write names who made it
//!   ([`who`]): the operator's name from the browser, `NAME (api)` (or
//!   `NAME (api: CLIENT)` when the body names its client) with a bearer
//!   token. The console token is the operator `console`.
//! - A login URL carries a one-time code, never a token: a URL the browser
//!   keeps in its history is worthless once used, or after ten minutes.

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

/// One who may use the console: a name and a token.
pub struct Operator {
    pub name: String,
    token: String,
    csrf: String,
}

impl Operator {
    fn new(name: String, token: String) -> Self {
        let csrf = hex(&Sha256::digest(
            format!("xo-console-csrf:{token}").as_bytes(),
        ));
        Self { name, token, csrf }
    }
}

/// The operator who made the request being answered (set by the guard
/// around each request): their name and the CSRF value their forms carry.
#[derive(Debug, Clone, Default)]
pub struct Who {
    pub name: String,
    pub csrf: String,
    /// Carried by `Authorization: Bearer` (a script), not by a browser.
    pub api: bool,
}

impl Who {
    /// How a write is named in the audit: the operator, and for the API
    /// the client the body names.
    pub fn by(&self, client: Option<&str>) -> String {
        let name = if self.name.is_empty() {
            "console"
        } else {
            &self.name
        };
        match (self.api, client.map(str::trim).filter(|c| !c.is_empty())) {
            (false, _) => name.to_string(),
            (true, None) => format!("{name} (api)"),
            (true, Some(c)) => format!("{name} (api: {c})"),
        }
    }
}

tokio::task_local! {
    static WHO: Who;
}

/// Who made the request being answered (nobody outside a request, or
/// for a read let through without a token).
pub fn who() -> Who {
    WHO.try_with(Clone::clone).unwrap_or_default()
}

/// Runs `f` as a request made by `who`.
pub async fn as_who<F: std::future::Future>(who: Who, f: F) -> F::Output {
    WHO.scope(who, f).await
}

/// How long a login code is good for.
const CODE_MS: u64 = 10 * 60 * 1000;

/// The tokens and the rules in force.
pub struct Auth {
    /// The console token first (`console`), then the named operators.
    operators: Vec<Operator>,
    /// One-time login codes: code → (operator, good until, ms).
    codes: std::sync::Mutex<std::collections::HashMap<String, (usize, u64)>>,
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
    pub fn where_token(&self) -> maud::Markup {
        if self.source == "XO_CONSOLE_TOKEN" {
            return maud::html! { "the XO_CONSOLE_TOKEN the console started with (the chart's Secret)" };
        }
        let path = std::path::Path::new(&self.source);
        let shown = std::env::current_dir()
            .ok()
            .and_then(|d| path.strip_prefix(d).ok().map(|p| p.display().to_string()))
            .unwrap_or_else(|| self.source.clone());
        maud::html! { code { (shown) } }
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
                        let file = |what, source| ConsoleError::TokenFile {
                            path: path.display().to_string(),
                            what,
                            source,
                        };
                        let t = random_token().map_err(|e| file("no randomness", e))?;
                        write_private(&path, &t).map_err(|e| file("writing a new token", e))?;
                        (t, path.display().to_string())
                    }
                    Err(e) => {
                        return Err(ConsoleError::TokenFile {
                            path: path.display().to_string(),
                            what: "reading",
                            source: e,
                        });
                    }
                }
            }
        };
        if token.len() < 16 {
            return Err(ConsoleError::Token {
                path: source,
                reason: format!("is {} characters; use at least 16", token.len()),
            });
        }
        let mut operators = vec![Operator::new("console".into(), token)];
        if !cfg.console.operators_file.is_empty() {
            let path = &cfg.console.operators_file;
            let text = std::fs::read_to_string(path).map_err(|e| ConsoleError::TokenFile {
                path: path.clone(),
                what: "reading console.operators_file (lines `NAME TOKEN`)",
                source: e,
            })?;
            for op in operators_of(path, &text)? {
                if operators.iter().any(|o| o.token == op.token) {
                    return Err(ConsoleError::Token {
                        path: path.clone(),
                        reason: format!(
                            "operator {}'s token is another's (the console token's, or one above it): give each their own",
                            op.name
                        ),
                    });
                }
                operators.push(op);
            }
        }
        Ok(Self {
            operators,
            codes: Default::default(),
            open_reads: cfg.console.open_reads && bound.ip().is_loopback(),
            loopback: bound.ip().is_loopback(),
            read_only: cfg.console.read_only,
            source,
        })
    }

    /// The console token (the operator `console`'s).
    pub fn token(&self) -> &str {
        &self.operators[0].token
    }

    /// Who a valid credential is.
    pub fn who(&self, cred: Credential) -> Who {
        match cred {
            Credential::Bearer(i) | Credential::Cookie(i) => {
                let o = &self.operators[i];
                Who {
                    name: o.name.clone(),
                    csrf: o.csrf.clone(),
                    api: matches!(cred, Credential::Bearer(_)),
                }
            }
            _ => Who::default(),
        }
    }

    /// A one-time login code for operator `i`, good for ten minutes from
    /// `now` (ms): what a login URL carries instead of a token. `None`
    /// (logged) when the system gives no randomness: no code is made.
    pub fn login_code(&self, i: usize, now: u64) -> Option<String> {
        let code = match xo_runtime::secret::random_hex(16) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no login code made; log in with the token");
                return None;
            }
        };
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        codes.retain(|_, (_, until)| *until > now);
        codes.insert(
            code.clone(),
            (i.min(self.operators.len() - 1), now + CODE_MS),
        );
        Some(code)
    }

    /// The operator a login code is for, once: the code is gone after.
    pub fn redeem(&self, code: &str, now: u64) -> Option<usize> {
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        match codes.remove(code.trim()) {
            Some((i, until)) if until > now && !code.is_empty() => Some(i),
            _ => None,
        }
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
            return match v.strip_prefix("Bearer ").and_then(|t| self.matches(t)) {
                Some(i) => Credential::Bearer(i),
                None => Credential::Wrong,
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
        match cookie.map(|c| self.matches(&c)) {
            Some(Some(i)) => Credential::Cookie(i),
            Some(None) => Credential::Wrong,
            None => Credential::None,
        }
    }

    /// Which operator a token is (every token compared, in constant time
    /// each, so the answer's time does not tell which one came close).
    pub fn matches(&self, token: &str) -> Option<usize> {
        let token = token.trim();
        let mut found = None;
        for (i, o) in self.operators.iter().enumerate() {
            if same(token, &o.token) && found.is_none() {
                found = Some(i);
            }
        }
        found
    }

    /// The `Set-Cookie` value of operator `i`'s login.
    pub fn cookie(&self, i: usize) -> String {
        format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
            self.operators[i].token
        )
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

/// The operators of a `console.operators_file` (at `path`): lines `NAME
/// TOKEN`; a mistake names its line.
fn operators_of(path: &str, text: &str) -> Result<Vec<Operator>, ConsoleError> {
    let err = |reason: String| ConsoleError::Token {
        path: path.to_string(),
        reason,
    };
    let mut out: Vec<Operator> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = n + 1;
        let mut words = line.split_whitespace();
        let (Some(name), Some(token), None) = (words.next(), words.next(), words.next()) else {
            return Err(err(format!(
                "line {at}: expected `NAME TOKEN` (two words), found {} words",
                line.split_whitespace().count()
            )));
        };
        if name.len() > 64
            || name == "console"
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(err(format!(
                "line {at}: operator name {name:?}: use 1-64 letters, digits, '.', '_' or '-' (and not `console`, the console token's)"
            )));
        }
        if token.len() < 16 {
            return Err(err(format!(
                "line {at}: operator {name}'s token is {} characters; use at least 16 (`openssl rand -hex 32`)",
                token.len()
            )));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(err(format!("line {at}: operator {name} is named twice")));
        }
        out.push(Operator::new(name.to_string(), token.to_string()));
    }
    Ok(out)
}

/// How a request authenticated: with operator `i`'s token, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    None,
    /// A token that is no operator's.
    Wrong,
    Bearer(usize),
    Cookie(usize),
}

impl Credential {
    pub fn valid(self) -> bool {
        matches!(self, Credential::Bearer(_) | Credential::Cookie(_))
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
            maud::html! {
                p.flash.error { (message) }
                p { a href="/login" { "Log in with the console token" } }
            },
        );
        (status, axum::response::Html(body)).into_response()
    }
}

/// Where a login may send the browser back to: `p` joined against a fixed
/// base the way a browser joins it (`url`: tabs and line breaks dropped,
/// `\` read as `/`), kept only when it stays on that base's origin, and
/// given back as the joined path, query and fragment, so a `Location`
/// holds exactly what was checked. `//host`, `/\host`, `/\t/host`,
/// `/.//host` and `https://host` name another origin and are refused; so
/// is anything not starting with `/` (a relative path).
pub fn local_target(p: &str) -> Option<String> {
    const BASE: &str = "http://console.invalid/";
    if !p.starts_with('/') {
        return None;
    }
    let base = url::Url::parse(BASE).ok()?;
    let u = base.join(p).ok()?;
    // A path that begins `//` after its dots are resolved (`/.//host`)
    // is on this origin to the join, and another host to the browser that
    // reads it back.
    if u.origin() != base.origin()
        || !u.username().is_empty()
        || u.password().is_some()
        || u.path().starts_with("//")
    {
        return None;
    }
    Some(path_onwards(&u))
}

/// A URL's path, query and fragment, as it serializes them.
pub(crate) fn path_onwards(u: &url::Url) -> String {
    let s = u.as_str();
    let start = s.len() - u[url::Position::BeforePath..].len();
    s[start..].to_string()
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
    /// host after login, and `next=/%0d/x` was a 500. Issue 44: the check is
    /// the browser's own join, and what goes back is what was joined.
    #[test]
    fn a_login_goes_back_only_to_a_local_route() {
        for (ok, to) in [
            ("/", "/"),
            ("/units/u1", "/units/u1"),
            ("/tasks?state=blocked", "/tasks?state=blocked"),
            ("/a b", "/a%20b"),
            // A URL in the query is a local route's query.
            ("/x?u=https://evil.example", "/x?u=https://evil.example"),
            ("/a/../b#top", "/b#top"),
        ] {
            assert_eq!(super::local_target(ok).as_deref(), Some(to), "{ok:?}");
        }
        for bad in [
            "//evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r/x",
            "/\\evil.example",
            "/\\/evil.example",
            "/\t\t/evil.example",
            "https://evil.example",
            "evil.example",
            "//u:p@console.invalid/",
            // Found by the fuzz test: dots resolved leave `//host`.
            "/.//evil.example",
            "/a/..//evil.example",
            "/.\\/evil.example",
            "",
        ] {
            assert_eq!(super::local_target(bad), None, "{bad:?}");
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
