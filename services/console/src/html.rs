//! HTML: escaping, the page layout, and the embedded assets (the CSS and
//! the script are files in `assets/`, compiled into the binary).

use axum::http::header;
use axum::response::IntoResponse;

pub const CSS: &str = include_str!("../assets/console.css");
pub const JS: &str = include_str!("../assets/console.js");

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CSS,
    )
}

pub async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        JS,
    )
}

/// A health as its lower-case wire name (`green`…).
pub fn health_name(h: xo_proto::Health) -> String {
    serde_json::to_value(h)
        .ok()
        .and_then(|v| v.as_str().map(str::to_lowercase))
        .unwrap_or_else(|| "unknown".into())
}

/// A value's wire name (`primary`, `RUNNING`…).
pub fn wire<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The pages of the navigation bar: path and label.
pub const NAV: &[(&str, &str)] = &[
    ("/", "Fleet"),
    ("/needs", "Needs you"),
    ("/queue", "Queue"),
    ("/charts", "Charts"),
    ("/audit", "Audit"),
    ("/knowledge", "Knowledge"),
    ("/directives", "Directives"),
    ("/reviews", "Reviews"),
    ("/containers", "Containers"),
    ("/settings", "Settings"),
];

/// What every page shares: where it is, the CSRF value, read-only mode.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    pub title: &'a str,
    pub active: &'a str,
    pub csrf: String,
    pub read_only: bool,
    /// A message from the last action (`?ok=` / `?error=`).
    pub flash: Option<(bool, String)>,
}

/// A whole page around `body`.
pub fn page(f: &Frame<'_>, body: &str) -> String {
    let mut nav = String::new();
    for (href, label) in NAV {
        let cls = if *href == f.active {
            " class=\"active\""
        } else {
            ""
        };
        nav.push_str(&format!("<a href=\"{href}\"{cls}>{label}</a>"));
    }
    let flash = match &f.flash {
        Some((true, m)) => format!("<p class=\"flash ok\" role=\"status\">{}</p>", esc(m)),
        Some((false, m)) => format!("<p class=\"flash error\" role=\"alert\">{}</p>", esc(m)),
        None => String::new(),
    };
    let ro = if f.read_only {
        "<span class=\"badge ro\" title=\"console.read_only = true\">read-only</span>"
    } else {
        ""
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta name=\"xo-csrf\" content=\"{csrf}\"><meta name=\"xo-read-only\" content=\"{ro_flag}\">\
<title>{title} · XO</title><link rel=\"stylesheet\" href=\"/assets/console.css\"></head>\
<body><a class=\"skip\" href=\"#main\">Skip to the content</a><header><span class=\"brand\">XO</span><nav aria-label=\"pages\">{nav}</nav>{ro}<span id=\"live\" class=\"live\" title=\"live updates\">offline</span></header>\
<main id=\"main\" tabindex=\"-1\"><h1>{title}</h1>{flash}{body}</main><script src=\"/assets/console.js\" defer></script></body></html>",
        csrf = esc(&f.csrf),
        ro_flag = f.read_only,
        title = esc(f.title),
    )
}

/// A bare page (errors before a frame exists: login, refusals).
pub fn page_plain(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{t} · XO</title><link rel=\"stylesheet\" href=\"/assets/console.css\"></head>\
<body><header><span class=\"brand\">XO</span></header><main><h1>{t}</h1>{body}</main></body></html>",
        t = esc(title)
    )
}

/// A form that posts an action (hidden in read-only mode).
pub fn action(f: &Frame<'_>, to: &str, fields: &str, label: &str, class: &str) -> String {
    if f.read_only {
        return String::new();
    }
    format!(
        "<form method=\"post\" action=\"{to}\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">{fields}<button type=\"submit\" class=\"{class}\">{label}</button></form>",
        to = esc(to),
        csrf = esc(&f.csrf),
        label = esc(label),
    )
}

/// "3s ago", "5m ago"… from milliseconds.
pub fn age(now_ms: u64, at_ms: u64) -> String {
    if at_ms == 0 {
        return "—".into();
    }
    let s = now_ms.saturating_sub(at_ms) / 1000;
    match s {
        0..=59 => format!("{s}s ago"),
        60..=3599 => format!("{}m ago", s / 60),
        3600..=86_399 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<script>alert(\"x\")</script>&'"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
    }

    #[test]
    fn ages_read_like_a_person_would_say_them() {
        assert_eq!(age(10_000, 0), "—");
        assert_eq!(age(10_000, 5_000), "5s ago");
        assert_eq!(age(200_000, 20_000), "3m ago");
        assert_eq!(age(2 * 86_400_000, 1), "1d ago");
    }
}
