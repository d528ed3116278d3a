//! HTML: the page layout, and the embedded assets (the CSS and
//! the script are files in `assets/`, compiled into the binary).

use axum::http::header;
use axum::response::IntoResponse;
use maud::{DOCTYPE, Markup, html};

pub const CSS: &str = include_str!("../assets/console.css");
pub const JS: &str = include_str!("../assets/console.js");

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
    /// Now, by the console's clock (ms since the epoch): what ages are
    /// counted from.
    pub now: u64,
}

/// A whole page around `body` (its HTML, made by a page's template).
pub fn page(f: &Frame<'_>, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="xo-csrf" content=(f.csrf);
                meta name="xo-read-only" content=(f.read_only);
                title { (f.title) " · XO" }
                link rel="stylesheet" href="/assets/console.css";
            }
            body {
                a.skip href="#main" { "Skip to the content" }
                header {
                    span.brand { "XO" }
                    nav aria-label="pages" {
                        @for (href, label) in NAV {
                            a href=(href) class=[(*href == f.active).then_some("active")] { (label) }
                        }
                    }
                    @if f.read_only {
                        span.badge.ro title="console.read_only = true" { "read-only" }
                    }
                    span #live .live title="live updates" { "offline" }
                }
                main #main tabindex="-1" {
                    h1 { (f.title) }
                    @match &f.flash {
                        Some((true, m)) => p.flash.ok role="status" { (m) },
                        Some((false, m)) => p.flash.error role="alert" { (m) },
                        None => {},
                    }
                    (body)
                }
                script src="/assets/console.js" defer {}
            }
        }
    }
    .into_string()
}

/// A bare page (errors before a frame exists: login, refusals).
pub fn page_plain(title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · XO" }
                link rel="stylesheet" href="/assets/console.css";
            }
            body {
                header { span.brand { "XO" } }
                main { h1 { (title) } (body) }
            }
        }
    }
    .into_string()
}

/// A form that posts an action to `to`, with `fields` (nothing in
/// read-only mode).
pub fn post_form(f: &Frame<'_>, to: &str, fields: Markup, label: &str, class: &str) -> Markup {
    if f.read_only {
        return html! {};
    }
    html! {
        form method="post" action=(to) class="inline" {
            input type="hidden" name="csrf" value=(f.csrf);
            (fields)
            button type="submit" class=(class) { (label) }
        }
    }
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
    fn ages_read_like_a_person_would_say_them() {
        assert_eq!(age(10_000, 0), "—");
        assert_eq!(age(10_000, 5_000), "5s ago");
        assert_eq!(age(200_000, 20_000), "3m ago");
        assert_eq!(age(2 * 86_400_000, 1), "1d ago");
    }
}
