//! A unit's page: its latest report, the steering with its evidence, the
//! report history's charts, and the steering form.

use maud::{Markup, html};

use super::*;

/// One steering on the timeline: when, what, its evidence (the rule, the
/// value observed, the turns and tools), how many times in a row the same
/// steering was sent (`×N`, turns first to last), and what followed it.
pub(crate) fn steering_item(
    s: &xo_proto::Steering,
    repeats: usize,
    first_turn: u64,
    now: u64,
    then: Option<(&str, String)>,
) -> Markup {
    let e = &s.evidence;
    let sev = s.severity.to_string();
    let turns: Vec<String> = e.turns.iter().map(u64::to_string).collect();
    let has_evidence = !e.rule.is_empty() || !e.turns.is_empty() || !e.tools.is_empty();
    html! {
        li class={ "steer " (sev) } {
            span.when {
                "turn "
                @if repeats > 1 { (first_turn) "–" (s.turn) } @else { (s.turn) }
                " · " (age(now, s.at))
            }
            " " b { (s.kind.to_string()) }
            @if repeats > 1 { " " span.badge.repeat { "×" (repeats) } }
            " " span.sev { (sev) }
            " " span.src { (wire(&s.source)) }
            p { (s.message) }
            @if has_evidence {
                p.evidence {
                    "evidence: "
                    @if !e.rule.is_empty() {
                        code { (e.rule) }
                        @if !e.observed.is_empty() { ", observed " b { (e.observed) } }
                        @if !e.turns.is_empty() || !e.tools.is_empty() { " · " }
                    }
                    @if !e.turns.is_empty() {
                        "turns " (turns.join(", "))
                        @if !e.tools.is_empty() { " · " }
                    }
                    @if !e.tools.is_empty() { "tools " (e.tools.join(", ")) }
                }
            }
            @if let Some((class, text)) = &then {
                p class={ "followed " (class) } { "then: " (text) }
            }
        }
    }
}

/// The timeline's items, newest first, a run of the same steering (kind
/// and message) collapsed into one with its count.
/// Each item says what followed it (of a run, its last), read from the
/// unit's report points and whether it was handed to a person: the words
/// of `xo units UNIT`.
pub(crate) fn steering_timeline(
    steering: &[xo_proto::Steering],
    now: u64,
    history: &[xo_proto::control::ReportPoint],
    needs: Option<&xo_proto::NeedsYou>,
) -> Markup {
    let mut items = Vec::new();
    let mut i = steering.len();
    while i > 0 {
        let last = &steering[i - 1];
        let mut j = i - 1;
        while j > 0 && steering[j - 1].kind == last.kind && steering[j - 1].message == last.message
        {
            j -= 1;
        }
        let then = xo_proto::control::followed(steering, i - 1, history, needs);
        let class = match then {
            xo_proto::control::Followed::Progress(_) => "ok",
            xo_proto::control::Followed::Escalated(_)
            | xo_proto::control::Followed::NoChange(_) => "bad",
            _ => "open",
        };
        let item = steering_item(
            last,
            i - j,
            steering[j].turn,
            now,
            Some((class, then.to_string())),
        );
        items.push(item);
        i = j;
    }
    html! { @for item in items { (item) } }
}

/// A small line chart (inline SVG, no script): `values` oldest first, the
/// axis from 0 to `max` (0: the largest value), the last value named.
pub(crate) fn chart(title: &str, values: &[f64], max: f64, show: impl Fn(f64) -> String) -> Markup {
    const W: f64 = 220.0;
    const H: f64 = 48.0;
    let top = if max > 0.0 {
        max
    } else {
        values.iter().cloned().fold(0.0, f64::max).max(1e-9)
    };
    let step = W / (values.len().max(2) - 1) as f64;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let y = H - (v / top).clamp(0.0, 1.0) * (H - 2.0) - 1.0;
            format!("{:.1},{:.1}", i as f64 * step, y)
        })
        .collect();
    let last = values.last().copied().unwrap_or_default();
    html! {
        figure.chart data-chart=(title) {
            svg viewBox={ "0 0 " (W) " " (H) } width=(W) height=(H) role="img" aria-label=(title) {
                polyline fill="none" stroke="currentColor" stroke-width="1.5" points=(points.join(" ")) {}
            }
            figcaption {
                (title) ": " b { (show(last)) } " "
                small { "(max " (show(values.iter().cloned().fold(0.0, f64::max))) ")" }
            }
        }
    }
}

pub(crate) async fn unit(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    Query(q): Q,
) -> Response {
    let title = format!("Unit {unit}");
    let f = frame(&c, &title, "/", &q);
    if let Err(e) = xo_proto::validate_token("unit", &unit) {
        return bad_request(&f, &e.to_string());
    }
    let d = match c.call(&ShowUnit { unit: unit.clone() }).await {
        Ok(d) => d,
        Err(e) => return down(&f, &e),
    };
    let n = f.now;
    // A steering typed before a login ended comes back (never sent).
    let kept_message = q
        .get(&format!("{KEEP}message"))
        .map(String::as_str)
        .unwrap_or("");
    let kept_severity = q
        .get(&format!("{KEEP}severity"))
        .map(String::as_str)
        .unwrap_or("warning");
    let body = html! {
        div.scroll { table #units data-live="unit" data-unit=(unit) {
            thead { tr { @for (_, t) in FLEET_COLUMNS { th { (t) } } } }
            // The row's HTML is the fleet page's (a row it also sends live).
            tbody { (unit_row(&d.summary, n)) }
        } }
        @if let Some(r) = &d.report {
            section.report #latest-report {
                h2 { "Latest report" }
                p {
                    "turn " (r.time.turn) " · seq " (r.time.seq) " · step "
                    b { (r.activity.step.as_deref().unwrap_or("—")) }
                    " — " (r.activity.summary.as_deref().unwrap_or(""))
                }
                p {
                    "tokens " (r.equipment.tokens_in) " in / " (r.equipment.tokens_out) " out · "
                    (r.activity.turns_since_progress) " turns without progress · $"
                    (format!("{:.4}", r.equipment.cost_usd))
                    @if let Some(note) = &r.status.note { " · its note: “" (note) "”" }
                }
                @if !r.activity.recent.is_empty() {
                    h3 { "Recent actions (newest first)" }
                    ol.actions #recent-actions {
                        @for a in r.activity.recent.iter().rev() {
                            @let o = wire(&a.outcome);
                            li {
                                span.when { "turn " (a.turn) } " "
                                (match (&a.kind, &a.tool) {
                                    (xo_proto::ActionKind::Tool, Some(t)) => t.to_string(),
                                    (xo_proto::ActionKind::Tool, None) => "tool".into(),
                                    (xo_proto::ActionKind::Message, _) => "message".into(),
                                })
                                " " span class={ "outcome " (o) } { (o) }
                                @if let Some(e) = &a.error_type { " " code { (e) } }
                            }
                        }
                    }
                }
            }
        }
        @if d.history.len() >= 2 {
            @let fill: Vec<f64> = d.history.iter().map(|p| p.context_fill).collect();
            @let cost: Vec<f64> = d.history.iter().map(|p| p.cost_usd).collect();
            @let tsp: Vec<f64> = d.history.iter().map(|p| f64::from(p.turns_since_progress)).collect();
            section.charts #history {
                h2 {
                    "Last " (d.history.len()) " reports "
                    small { "turns " (d.history[0].turn) "–" (d.history[d.history.len() - 1].turn) }
                }
                div.chart-row {
                    (chart("context fill", &fill, 1.0, |v| format!("{:.0}%", v * 100.0)))
                    (chart("cost", &cost, 0.0, |v| format!("${v:.4}")))
                    (chart("turns without progress", &tsp, 0.0, |v| format!("{v:.0}")))
                }
            }
        }
        section {
            h2 { "Timeline" }
            ol #timeline .timeline reversed {
                // Items made by `steering_item`'s template.
                (steering_timeline(&d.recent_steering, n, &d.history, d.summary.needs.as_ref()))
            }
            @if d.recent_steering.is_empty() { p.empty { "No steering yet." } }
        }
        @if !f.read_only {
            section {
                h2 { "Steer" }
                form method="post" action={ "/ui/units/" (unit) "/steer" } #steer-form .stack {
                    input type="hidden" name="csrf" value=(f.csrf);
                    @if !kept_message.is_empty() {
                        p.flash.ok #kept-note { "What you typed is back in the form; it has not been sent." }
                    }
                    label {
                        "Message (sent as " code { "[SUPERVISOR]" } " steering on " code { "xo.steer." (unit) }
                        "; at most " (xo_proto::control::MAX_STEERING_CHARS) " characters)"
                        textarea name="message" rows="3" required { (kept_message) }
                    }
                    label {
                        "Severity "
                        select name="severity" {
                            @for s in ["info", "warning", "urgent", "critical"] {
                                option selected[s == kept_severity] { (s) }
                            }
                        }
                    }
                    button type="submit" { "Send steering" }
                }
            }
            section {
                h2 { "Acknowledge" }
                p.summary {
                    @if let Some(a) = &d.summary.ack {
                        b #ack-now {
                            "Acknowledged by " (a.by) " until " (xo_runtime::clock::hh_mm(a.until)) "Z: " (a.why) "."
                        }
                        " "
                    }
                    "Seen, and in hand: the unit sinks below those of its colour nobody has acknowledged, until the time is up or it gets worse."
                }
                form method="post" action={ "/ui/units/" (unit) "/ack" } #ack-form .stack {
                    input type="hidden" name="csrf" value=(f.csrf);
                    label { "Why (what is being done about it) " input name="why" required maxlength="500"; }
                    label {
                        "For "
                        select name="for" {
                            option value="30m" { "30 minutes" }
                            option value="2h" { "2 hours" }
                            option value="8h" { "8 hours" }
                            option value="24h" { "a day" }
                        }
                    }
                    button type="submit" { "Acknowledge" }
                }
            }
        }
    };
    ok_page(&f, body)
}

pub(crate) async fn ui_steer(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let to = format!("/units/{}", enc(&unit));
    let get = |k: &str| field(&form, k).unwrap_or_default();
    let (message, severity_text) = (get("message"), get("severity"));
    // Refused (by this check or the XO's): the page again, what was typed
    // back in the form, nothing sent.
    let refused = |why: String| {
        let q = kept_refusal(&form, why);
        let (c, unit) = (c.clone(), unit.clone());
        async move { refused_page(self::unit(State(c), Path(unit), Query(q)).await) }
    };
    let severity: Severity = match serde_json::from_value(Value::String(severity_text.clone())) {
        Ok(s) => s,
        Err(_) => {
            return refused(format!(
                "severity {severity_text:?}: use info, warning, urgent or critical"
            ))
            .await;
        }
    };
    let req = SteerUnit {
        unit: unit.clone(),
        message: message.clone(),
        severity,
        by: crate::auth::who().by(None),
    };
    if let Err(why) = req.check() {
        return refused(why.to_string()).await;
    }
    match c.call(&req).await {
        Ok(s) => back(
            &to,
            Ok(format!(
                "{} steering sent to {} at its turn {}: its agent sees it on its next turn",
                s.severity, s.unit, s.turn
            )),
        ),
        Err(e) => refused(e.message).await,
    }
}

pub(crate) async fn ui_ack(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let to = format!("/units/{}", enc(&unit));
    let for_ms = match field(&form, "for").filter(|f| !f.is_empty()) {
        None => xo_proto::control::ACK_DEFAULT_MS,
        Some(f) => match parse_ms(&f) {
            Some(ms) => ms,
            None => {
                return back(
                    &to,
                    Err(format!("for {f:?}: a duration such as 30m, 2h or 24h")),
                );
            }
        },
    };
    let req = xo_proto::control::AckUnit {
        unit,
        by: crate::auth::who().by(None),
        why: field(&form, "why").unwrap_or_default().trim().to_string(),
        for_ms,
    };
    if let Err(why) = req.check() {
        return back(&to, Err(why.to_string()));
    }
    let r = c
        .call(&req)
        .await
        .map(|s| match s.ack {
            Some(a) => format!(
                "{} acknowledged until {}Z: {}",
                s.unit,
                xo_runtime::clock::hh_mm(a.until),
                a.why
            ),
            None => format!("{} acknowledged", s.unit),
        })
        .map_err(|e| e.message);
    back(&to, r)
}
