//! The pages: server-rendered HTML that reads without JavaScript, and form
//! actions (`POST /ui/...`) that redirect back with a message. The script
//! (`assets/console.js`) adds live updates from `/api/v1/events`.
//!
//! A service that does not answer gives a page that says which service and
//! how to start it (status 503), never a 500.

use std::collections::BTreeMap;

use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::Value;
use xo_proto::Severity;
use xo_proto::control::{ServiceError, ShowUnit, SteerUnit, UnitSummary};
use xo_proto::fleet::{FleetLs, FleetRestart, FleetScale};
use xo_proto::knowledge::{Author, DeprecateDoc, DocSummary, ListDocs, ListReviewRuns, ReviewDoc};
use xo_proto::queue::{
    Answer, AuditTail, AuditVerify, Cancel, Enqueue, GetStatus, Halt, Init, Resume, RetryTask,
    SetGoal, Start, Step, Task, TaskRecord, TaskState,
};
use xo_proto::settings::{GetSettings, PutSettings, SettingsView};

use crate::Shared;
use crate::html::{Frame, action, age, esc, health_name, page, wire};

type Q = Query<BTreeMap<String, String>>;

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/", get(fleet))
        .route("/units/{unit}", get(unit))
        .route("/queue", get(queue))
        .route("/tasks/{id}", get(task_page))
        .route("/audit", get(audit))
        .route("/knowledge", get(knowledge))
        .route("/knowledge/{category}/{name}", get(knowledge_doc))
        .route("/directives", get(directives))
        .route("/reviews", get(reviews))
        .route("/containers", get(containers))
        .route("/settings", get(settings))
        .route("/login", get(login_page).post(login))
        .route("/ui/units/{unit}/steer", post(ui_steer))
        .route("/ui/units/{unit}/row", get(unit_row_fragment))
        .route("/ui/queue/{verb}", post(ui_queue))
        .route("/ui/tasks/{id}/{verb}", post(ui_task))
        .route(
            "/ui/knowledge/{category}/{name}/deprecate",
            post(ui_deprecate),
        )
        .route("/ui/knowledge/{category}/{name}/review", post(ui_review))
        .route("/ui/fleet/{role}/scale", post(ui_scale))
        .route("/ui/fleet/units/{unit}/restart", post(ui_restart))
        .route("/ui/settings", post(ui_settings))
}

fn flash(q: &BTreeMap<String, String>) -> Option<(bool, String)> {
    q.get("error")
        .map(|e| (false, e.clone()))
        .or_else(|| q.get("ok").map(|m| (true, m.clone())))
}

fn frame<'a>(
    c: &'a Shared,
    title: &'a str,
    active: &'a str,
    q: &BTreeMap<String, String>,
) -> Frame<'a> {
    Frame {
        title,
        active,
        csrf: c.auth.csrf(),
        read_only: c.auth.read_only(),
        flash: flash(q),
    }
}

fn ok_page(f: &Frame<'_>, body: &str) -> Response {
    Html(page(f, body)).into_response()
}

/// The page of a service that did not answer: which, and how to start it.
/// A page refused for what its address named (400), saying why.
fn bad_request(f: &Frame<'_>, why: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Html(page(
            f,
            &format!("<p class=\"flash error\">{}</p>", esc(why)),
        )),
    )
        .into_response()
}

fn down(f: &Frame<'_>, e: &ServiceError) -> Response {
    let body = format!(
        "<div class=\"down\" role=\"alert\"><h2>Not available</h2><p>{}</p></div>",
        esc(&e.message)
    );
    let status = crate::api::status_of(e.code);
    let status = if status == StatusCode::INTERNAL_SERVER_ERROR {
        StatusCode::BAD_GATEWAY
    } else {
        status
    };
    (status, Html(page(f, &body))).into_response()
}

fn now() -> u64 {
    xo_proto::now_ms()
}

/// One row of the fleet table (the script renders the same cells).
/// Triage order (seed: the operator looks at red first): 0 red (the XO's
/// assessment or the unit's own), 1 amber, 2 not heard from (stale, or its
/// reports refused), 3 the rest.
pub fn severity(u: &UnitSummary) -> u8 {
    use xo_proto::Health;
    if u.health == Health::Red || u.self_health == Health::Red {
        0
    } else if u.health == Health::Amber || u.self_health == Health::Amber {
        1
    } else if u.stale || u.refused_reports >= 3 {
        2
    } else {
        3
    }
}

/// The triage bucket of a severity: what the count badges and the health
/// filter group by.
fn bucket(rank: u8) -> &'static str {
    match rank {
        0 => "red",
        1 => "amber",
        2 => "stale",
        _ => "green",
    }
}

/// Steered this many times and still red or amber: the steering is not
/// working, and a human should look.
const NO_EFFECT_AFTER: u64 = 3;

/// A relative age, marked `old` past `old_after_ms` (a unit not heard from
/// in minutes, steering long ago) so it does not read as current.
fn age_mark(now: u64, at: u64, old_after_ms: u64) -> String {
    let old = at > 0 && now.saturating_sub(at) > old_after_ms;
    format!(
        "<small class=\"age{}\">{}</small>",
        if old { " old" } else { "" },
        age(now, at)
    )
}

pub fn unit_row(u: &UnitSummary, now: u64) -> String {
    let h = health_name(u.health);
    let own = health_name(u.self_health);
    let last = match u.last_steering {
        Some((k, at)) => format!("{} {}", esc(&k.to_string()), age_mark(now, at, 10 * 60_000)),
        None => "—".into(),
    };
    let rank = severity(u);
    let steered = if u.steering_sent == 0 {
        String::new()
    } else if u.steering_sent >= NO_EFFECT_AFTER && rank <= 1 {
        format!(
            "{}× <span class=\"badge red\" title=\"steered {} times and still {}: the steering is not working\">no effect</span>",
            u.steering_sent,
            u.steering_sent,
            if rank == 0 { "red" } else { "amber" }
        )
    } else {
        format!("{}×", u.steering_sent)
    };
    format!(
        "<tr id=\"unit-{id}\" data-unit=\"{id}\" data-role=\"{role}\" data-health=\"{h}\" data-rank=\"{rank}\">\
<td><a href=\"/units/{id}\">{id}</a></td><td>{role}</td>\
<td><span class=\"health {h}\">{h}</span>{own_badge}{stale}</td><td class=\"pace\">{pace}</td>\
<td class=\"num fill\">{fill:.0}%</td><td class=\"num tsp\">{tsp}</td><td class=\"num cost\">${cost:.4}</td>\
<td class=\"task\">{task}</td><td class=\"num steered\">{steered}</td>\
<td class=\"steer\">{last}</td><td class=\"seen\">{seen}</td></tr>",
        id = esc(&u.unit),
        role = esc(&u.role),
        own_badge = if u.self_health != u.health && u.self_health != xo_proto::Health::Green {
            format!(
                " <span class=\"badge self {own}\" title=\"the unit reported itself {own}\">self: {own}</span>{note}",
                note = u
                    .self_note
                    .as_deref()
                    .map(|n| format!(" <small class=\"note\">{}</small>", esc(n)))
                    .unwrap_or_default()
            )
        } else {
            String::new()
        },
        stale = if u.stale {
            " <span class=\"badge\">stale</span>"
        } else if u.refused_reports >= 3 {
            " <span class=\"badge\" title=\"its reports are refused for their epoch (an earlier life, or its clock too far off) while its heartbeats arrive\">reports refused</span>"
        } else if u.ended {
            " <span class=\"badge ended\">ended</span>"
        } else {
            ""
        },
        pace = esc(&wire(&u.pace)),
        fill = u.context_fill * 100.0,
        tsp = u.turns_since_progress,
        cost = u.cost_usd,
        task = u
            .task_id
            .as_deref()
            .map(|t| format!("<code>{}</code>", esc(t)))
            .unwrap_or_default(),
        seen = age_mark(now, u.last_seen, 2 * 60_000),
    )
}

/// The fleet's sortable columns: (query key, header).
const FLEET_COLUMNS: [(&str, &str); 11] = [
    ("unit", "Unit"),
    ("role", "Role"),
    ("health", "Health"),
    ("pace", "PACE"),
    ("context", "Context"),
    ("tsp", "Turns w/o progress"),
    ("cost", "Cost"),
    ("task", "Task"),
    ("steered", "Steered"),
    ("steering", "Last steering"),
    ("seen", "Seen"),
];

fn sort_units(units: &mut [&UnitSummary], key: &str, desc: bool) {
    use std::cmp::Ordering;
    let f = |a: f64, b: f64| a.partial_cmp(&b).unwrap_or(Ordering::Equal);
    units.sort_by(|a, b| {
        let o = match key {
            "unit" => Ordering::Equal,
            "role" => a.role.cmp(&b.role),
            "pace" => wire(&a.pace).cmp(&wire(&b.pace)),
            "context" => f(a.context_fill, b.context_fill),
            "tsp" => a.turns_since_progress.cmp(&b.turns_since_progress),
            "cost" => f(a.cost_usd, b.cost_usd),
            "task" => a.task_id.cmp(&b.task_id),
            "steered" => a.steering_sent.cmp(&b.steering_sent),
            "steering" => a
                .last_steering
                .map(|s| s.1)
                .cmp(&b.last_steering.map(|s| s.1)),
            "seen" => a.last_seen.cmp(&b.last_seen),
            _ => severity(a).cmp(&severity(b)),
        };
        let o = if desc { o.reverse() } else { o };
        o.then_with(|| a.unit.cmp(&b.unit))
    });
}

/// The fleet table for `units` with the filters and order of `q`: red
/// first by default; a header sorts by its column (again: the other way).
pub fn fleet_body(units: &[UnitSummary], q: &BTreeMap<String, String>, now: u64) -> String {
    let role = q.get("role").filter(|s| !s.is_empty());
    let health = q.get("health").filter(|s| !s.is_empty());
    let find = q.get("q").filter(|s| !s.is_empty());
    let needle = find.map(|f| f.to_lowercase());
    let sort = q
        .get("sort")
        .map(String::as_str)
        .filter(|k| FLEET_COLUMNS.iter().any(|(c, _)| c == k))
        .unwrap_or("health");
    let desc = q.get("dir").is_some_and(|d| d == "desc");
    let mut roles: Vec<&str> = units.iter().map(|u| u.role.as_str()).collect();
    roles.sort_unstable();
    roles.dedup();
    let mut shown: Vec<&UnitSummary> = units
        .iter()
        .filter(|u| {
            !(role.is_some_and(|r| *r != u.role)
                || health.is_some_and(|h| h != bucket(severity(u)))
                || needle
                    .as_deref()
                    .is_some_and(|f| !u.unit.to_lowercase().contains(f)))
        })
        .collect();
    sort_units(&mut shown, sort, desc);
    let mut rows = String::with_capacity(shown.len() * 450);
    for u in &shown {
        rows.push_str(&unit_row(u, now));
    }
    // Links keep the other filters and the order.
    let link = |set: &[(&str, &str)]| {
        let mut kv: BTreeMap<&str, &str> = q
            .iter()
            .filter(|(k, v)| {
                ["role", "health", "q", "sort", "dir"].contains(&k.as_str()) && !v.is_empty()
            })
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        for (k, v) in set {
            if v.is_empty() {
                kv.remove(k);
            } else {
                kv.insert(k, v);
            }
        }
        let qs: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect();
        esc(&format!("/?{}", qs.join("&")))
    };
    let opt = |v: &str, sel: Option<&String>| {
        format!(
            "<option value=\"{v}\"{}>{v}</option>",
            if sel.is_some_and(|s| s == v) {
                " selected"
            } else {
                ""
            },
            v = esc(v)
        )
    };
    let role_opts: String = roles.iter().map(|r| opt(r, role)).collect();
    let health_opts: String = ["red", "amber", "green", "stale"]
        .iter()
        .map(|h| opt(h, health))
        .collect();
    let mut counts = [0usize; 4];
    for u in units {
        counts[usize::from(severity(u))] += 1;
    }
    let count = |h: &str| match h {
        "red" => counts[0],
        "amber" => counts[1],
        "stale" => counts[2],
        _ => counts[3],
    };
    let badges: String = ["red", "amber", "green", "stale"]
        .iter()
        .map(|h| {
            let on = health.is_some_and(|x| x == h);
            format!(
                "<a class=\"health {h}{on}\" id=\"count-{h}\" href=\"{href}\" title=\"show only the {h} units\"><b>{n}</b> {h}</a> ",
                on = if on { " on" } else { "" },
                href = link(&[("health", if on { "" } else { h })]),
                n = count(h),
            )
        })
        .collect();
    let heads: String = FLEET_COLUMNS
        .iter()
        .map(|(k, title)| {
            let current = *k == sort;
            let next = if current && !desc { "desc" } else { "" };
            format!(
                "<th{aria}><a href=\"{href}\" data-sort=\"{k}\">{title}{arrow}</a></th>",
                aria = if current {
                    format!(
                        " aria-sort=\"{}\"",
                        if desc { "descending" } else { "ascending" }
                    )
                } else {
                    String::new()
                },
                href = link(&[("sort", k), ("dir", next)]),
                arrow = if current {
                    if desc { " ▾" } else { " ▴" }
                } else {
                    ""
                },
            )
        })
        .collect();
    format!(
        "<p class=\"summary\"><span id=\"unit-count\">{n}</span> units · {badges}</p>\
<form method=\"get\" class=\"filters\"><label>Role <select name=\"role\"><option value=\"\">all</option>{role_opts}</select></label>\
<label>Health <select name=\"health\"><option value=\"\">all</option>{health_opts}</select></label>\
<label>Unit <input name=\"q\" value=\"{f}\" placeholder=\"name contains (any case)\"></label>\
<input type=\"hidden\" name=\"sort\" value=\"{sort}\"><button type=\"submit\">Filter</button></form>\
<div class=\"scroll\"><table id=\"units\" data-live=\"fleet\" data-sort=\"{sort}\"><thead><tr>{heads}</tr></thead>\
<tbody>{rows}</tbody></table></div>{empty}",
        n = units.len(),
        f = esc(find.map(String::as_str).unwrap_or("")),
        empty = if shown.is_empty() {
            "<p class=\"empty\" id=\"no-units\">No units match. Units appear here when they send their first SALUTE report (`xo report FILE`, or a runner).</p>"
        } else {
            ""
        },
    )
}

/// One unit's fleet row, for the live page to swap in (the server's row
/// is the only one: the page's script does not build its own).
async fn unit_row_fragment(State(c): State<Shared>, Path(unit): Path<String>) -> Response {
    if xo_proto::validate_token("unit", &unit).is_err() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    match c.call(&ShowUnit { unit }).await {
        Ok(d) => Html(unit_row(&d.summary, now())).into_response(),
        Err(e) if e.code == xo_proto::control::ErrorCode::NotFound => {
            StatusCode::NOT_FOUND.into_response()
        }
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn fleet(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Fleet", "/", &q);
    match c.units().await {
        Ok(units) => ok_page(&f, &fleet_body(&units, &q, now())),
        Err(e) => down(&f, &e),
    }
}

/// One steering on the timeline: when, what, its evidence (the rule, the
/// value observed, the turns and tools), and how many times in a row the
/// same steering was sent (`×N`, turns first to last).
fn steering_item(s: &xo_proto::Steering, repeats: usize, first_turn: u64, now: u64) -> String {
    let e = &s.evidence;
    let mut evidence = Vec::new();
    if !e.rule.is_empty() {
        evidence.push(format!(
            "<code>{}</code>{}",
            esc(&e.rule),
            if e.observed.is_empty() {
                String::new()
            } else {
                format!(", observed <b>{}</b>", esc(&e.observed))
            }
        ));
    }
    if !e.turns.is_empty() {
        let turns: Vec<String> = e.turns.iter().map(u64::to_string).collect();
        evidence.push(format!("turns {}", esc(&turns.join(", "))));
    }
    if !e.tools.is_empty() {
        evidence.push(format!("tools {}", esc(&e.tools.join(", "))));
    }
    format!(
        "<li class=\"steer {sev}\"><span class=\"when\">turn {turns} · {age}</span> <b>{kind}</b>{times} <span class=\"sev\">{sev}</span> <span class=\"src\">{src}</span><p>{msg}</p>{ev}</li>",
        sev = esc(&s.severity.to_string()),
        turns = if repeats > 1 {
            format!("{first_turn}–{}", s.turn)
        } else {
            s.turn.to_string()
        },
        times = if repeats > 1 {
            format!(" <span class=\"badge repeat\">×{repeats}</span>")
        } else {
            String::new()
        },
        age = age(now, s.at),
        kind = esc(&s.kind.to_string()),
        src = esc(&wire(&s.source)),
        msg = esc(&s.message),
        ev = if evidence.is_empty() {
            String::new()
        } else {
            format!(
                "<p class=\"evidence\">evidence: {}</p>",
                evidence.join(" · ")
            )
        },
    )
}

/// The timeline's items, newest first, a run of the same steering (kind
/// and message) collapsed into one with its count.
fn steering_timeline(steering: &[xo_proto::Steering], now: u64) -> String {
    let mut out = String::new();
    let mut i = steering.len();
    while i > 0 {
        let last = &steering[i - 1];
        let mut j = i - 1;
        while j > 0 && steering[j - 1].kind == last.kind && steering[j - 1].message == last.message
        {
            j -= 1;
        }
        out.push_str(&steering_item(last, i - j, steering[j].turn, now));
        i = j;
    }
    out
}

/// A small line chart (inline SVG, no script): `values` oldest first, the
/// axis from 0 to `max` (0: the largest value), the last value named.
fn chart(title: &str, values: &[f64], max: f64, show: impl Fn(f64) -> String) -> String {
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
    format!(
        "<figure class=\"chart\" data-chart=\"{t}\"><svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{t}\"><polyline fill=\"none\" stroke=\"currentColor\" stroke-width=\"1.5\" points=\"{p}\"/></svg><figcaption>{t}: <b>{v}</b> <small>(max {m})</small></figcaption></figure>",
        t = esc(title),
        p = points.join(" "),
        v = esc(&show(last)),
        m = esc(&show(values.iter().cloned().fold(0.0, f64::max))),
    )
}

async fn unit(State(c): State<Shared>, Path(unit): Path<String>, Query(q): Q) -> Response {
    let title = format!("Unit {unit}");
    let f = frame(&c, &title, "/", &q);
    if let Err(e) = xo_proto::validate_token("unit", &unit) {
        return bad_request(&f, &e);
    }
    let d = match c.call(&ShowUnit { unit: unit.clone() }).await {
        Ok(d) => d,
        Err(e) => return down(&f, &e),
    };
    let n = now();
    let mut body = format!(
        "<div class=\"scroll\"><table id=\"units\" data-live=\"unit\" data-unit=\"{u}\"><thead><tr>{heads}</tr></thead><tbody>{row}</tbody></table></div>",
        u = esc(&unit),
        heads = FLEET_COLUMNS
            .iter()
            .map(|(_, t)| format!("<th>{t}</th>"))
            .collect::<String>(),
        row = unit_row(&d.summary, n)
    );
    if let Some(r) = &d.report {
        let actions: String = r
            .activity
            .recent
            .iter()
            .rev()
            .map(|a| {
                format!(
                    "<li><span class=\"when\">turn {}</span> {} <span class=\"outcome {o}\">{o}</span>{}</li>",
                    a.turn,
                    esc(&match (&a.kind, &a.tool) {
                        (xo_proto::ActionKind::Tool, Some(t)) => t.to_string(),
                        (xo_proto::ActionKind::Tool, None) => "tool".into(),
                        (xo_proto::ActionKind::Message, _) => "message".into(),
                    }),
                    a.error_type
                        .as_deref()
                        .map(|e| format!(" <code>{}</code>", esc(e)))
                        .unwrap_or_default(),
                    o = esc(&wire(&a.outcome)),
                )
            })
            .collect();
        body.push_str(&format!(
            "<section class=\"report\" id=\"latest-report\"><h2>Latest report</h2><p>turn {} · seq {} · step <b>{}</b> — {}</p><p>tokens {} in / {} out · {} turns without progress · ${:.4}{note}</p>{acts}</section>",
            r.time.turn,
            r.time.seq,
            esc(r.activity.step.as_deref().unwrap_or("—")),
            esc(r.activity.summary.as_deref().unwrap_or("")),
            r.equipment.tokens_in,
            r.equipment.tokens_out,
            r.activity.turns_since_progress,
            r.equipment.cost_usd,
            note = r
                .status
                .note
                .as_deref()
                .map(|n| format!(" · its note: “{}”", esc(n)))
                .unwrap_or_default(),
            acts = if actions.is_empty() {
                String::new()
            } else {
                format!("<h3>Recent actions (newest first)</h3><ol class=\"actions\" id=\"recent-actions\">{actions}</ol>")
            },
        ));
    }
    if d.history.len() >= 2 {
        let fill: Vec<f64> = d.history.iter().map(|p| p.context_fill).collect();
        let cost: Vec<f64> = d.history.iter().map(|p| p.cost_usd).collect();
        let tsp: Vec<f64> = d
            .history
            .iter()
            .map(|p| f64::from(p.turns_since_progress))
            .collect();
        let (first, last) = (d.history[0].turn, d.history[d.history.len() - 1].turn);
        body.push_str(&format!(
            "<section class=\"charts\" id=\"history\"><h2>Last {n} reports <small>turns {first}–{last}</small></h2><div class=\"chart-row\">{a}{b}{c}</div></section>",
            n = d.history.len(),
            a = chart("context fill", &fill, 1.0, |v| format!("{:.0}%", v * 100.0)),
            b = chart("cost", &cost, 0.0, |v| format!("${v:.4}")),
            c = chart("turns without progress", &tsp, 0.0, |v| format!("{v:.0}")),
        ));
    }
    body.push_str("<section><h2>Timeline</h2><ol id=\"timeline\" class=\"timeline\" reversed>");
    body.push_str(&steering_timeline(&d.recent_steering, n));
    body.push_str("</ol>");
    if d.recent_steering.is_empty() {
        body.push_str("<p class=\"empty\">No steering yet.</p>");
    }
    body.push_str("</section>");
    if !f.read_only {
        body.push_str(&format!(
            "<section><h2>Steer</h2><form method=\"post\" action=\"/ui/units/{u}/steer\" id=\"steer-form\" class=\"stack\">\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
<label>Message (sent as <code>[SUPERVISOR]</code> steering on <code>xo.steer.{u}</code>)<textarea name=\"message\" rows=\"3\" required></textarea></label>\
<label>Severity <select name=\"severity\"><option>info</option><option selected>warning</option><option>urgent</option><option>critical</option></select></label>\
<button type=\"submit\">Send steering</button></form></section>",
            u = esc(&unit),
            csrf = esc(f.csrf)
        ));
    }
    ok_page(&f, &body)
}

fn task_actions(f: &Frame<'_>, t: &TaskRecord) -> String {
    let mut a = String::new();
    match t.state {
        TaskState::AwaitingResponse | TaskState::Blocked => {
            if t.state == TaskState::AwaitingResponse || t.question.is_some() {
                a.push_str(&action(
                    f,
                    &format!("/ui/tasks/{}/answer", t.task.task_id),
                    "<input name=\"text\" placeholder=\"answer\" required>",
                    "Answer",
                    "",
                ));
            }
            if t.state == TaskState::Blocked {
                a.push_str(&action(
                    f,
                    &format!("/ui/tasks/{}/retry", t.task.task_id),
                    "",
                    "Retry",
                    "",
                ));
            }
            a.push_str(&action(
                f,
                &format!("/ui/tasks/{}/cancel", t.task.task_id),
                "",
                "Cancel",
                "danger",
            ));
        }
        TaskState::Pending | TaskState::Running => {
            a.push_str(&action(
                f,
                &format!("/ui/tasks/{}/cancel", t.task.task_id),
                "",
                "Cancel",
                "danger",
            ));
        }
        _ => {}
    }
    a
}

/// One task: what it is, where it stands, what it cost, its validation,
/// and its audit lines with the prompts and replies; only the actions its
/// state allows; a cancel asks first.
async fn task_page(State(c): State<Shared>, Path(id): Path<String>, Query(q): Q) -> Response {
    let title = format!("Task {id}");
    let f = frame(&c, &title, "/queue", &q);
    if let Err(e) = xo_proto::validate_token("task id", &id) {
        return bad_request(&f, &e);
    }
    let t = match crate::api::find_task(&c, &id).await {
        Ok(t) => t,
        Err(e) => {
            return (
                e.0,
                Html(page(
                    &f,
                    &format!(
                        "<div class=\"down\" role=\"alert\"><h2>Not found</h2><p>{}</p></div>",
                        esc(&e.2)
                    ),
                )),
            )
                .into_response();
        }
    };
    let n = now();
    let task = &t.task;
    let mut body = String::new();
    if q.get("confirm").is_some_and(|v| v == "cancel")
        && matches!(
            t.state,
            TaskState::Pending
                | TaskState::Running
                | TaskState::Blocked
                | TaskState::AwaitingResponse
        )
    {
        body.push_str(&format!(
            "<section class=\"confirm\" id=\"confirm\"><p><b>Cancel task {id}?</b> It will not run again{running}.</p>{yes} <a href=\"/tasks/{id}\">Keep it</a></section>",
            id = esc(&id),
            running = if t.state == TaskState::Running { "; its agent is stopped" } else { "" },
            yes = action(
                &f,
                &format!("/ui/tasks/{}/cancel", task.task_id),
                "<input type=\"hidden\" name=\"confirm\" value=\"yes\">",
                "Yes, cancel it",
                "danger"
            ),
        ));
    }
    let runner = t.lease.as_ref().map(|l| {
        format!(
            "{} (lease renewed {}{})",
            esc(&l.claimant),
            age(n, l.renewed_at),
            if l.checkpoint { ", checkpointed" } else { "" }
        )
    });
    let mut spent = t.spent;
    spent.add(&t.attempt_spent);
    let row = |k: &str, v: String| format!("<tr><th>{k}</th><td>{v}</td></tr>");
    let mut facts = String::new();
    facts.push_str(&row(
        "State",
        format!("<b id=\"task-state\">{}</b>", esc(t.state.as_str())),
    ));
    facts.push_str(&row("Intent", esc(&task.intent)));
    facts.push_str(&row("Role", esc(&task.role)));
    facts.push_str(&row("Lane", esc(task.lane.as_str())));
    facts.push_str(&row(
        "Project",
        esc(task.project.as_deref().unwrap_or("(the goal's)")),
    ));
    facts.push_str(&row(
        "Attempt",
        format!("{} · {} validation retries", t.attempt, t.retries),
    ));
    if let Some(r) = runner {
        facts.push_str(&row("Runner", r));
    }
    facts.push_str(&row(
        "Spent",
        format!(
            "{} turns · {} tokens · ${:.4} · {:.1}s",
            spent.turns,
            spent.tokens,
            spent.cost_usd,
            spent.wall_ms as f64 / 1000.0
        ),
    ));
    facts.push_str(&row("Updated", age(n, t.updated_at)));
    for (k, v) in [
        ("Reason", &t.reason),
        ("Question", &t.question),
        ("Answer", &t.answer),
        ("Yielding to", &t.interrupt),
    ] {
        if let Some(v) = v {
            facts.push_str(&row(k, esc(v)));
        }
    }
    body.push_str(&format!(
        "<div class=\"actions\">{acts}</div><div class=\"scroll\"><table class=\"facts\" id=\"task\"><tbody>{facts}</tbody></table></div>\
<h2>Instructions</h2><pre class=\"instructions\">{ins}</pre>",
        acts = task_actions(&f, &t),
        ins = esc(&task.instructions),
    ));
    if !task.acceptance_criteria.is_empty() {
        body.push_str("<h2>Acceptance criteria</h2><ul>");
        for c in &task.acceptance_criteria {
            body.push_str(&format!("<li>{}</li>", esc(c)));
        }
        body.push_str("</ul>");
    }
    if let Some(r) = &t.report {
        body.push_str(&format!(
            "<h2>Validation</h2><p id=\"validation\">{verdict} · confidence <b>{level}</b> — {summary}</p>",
            verdict = if r.passed { "passed" } else { "failed" },
            level = r.confidence_level.map(|l| wire(&l)).unwrap_or_else(|| "—".into()),
            summary = esc(&r.summary),
        ));
        body.push_str("<div class=\"scroll\"><table><thead><tr><th>Criterion</th><th>Met</th><th>Quality</th><th>Detail</th></tr></thead><tbody>");
        for c in &r.criteria {
            body.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.criterion),
                if c.passed { "yes" } else { "no" },
                esc(c.quality.as_deref().unwrap_or("")),
                esc(&c.detail)
            ));
        }
        body.push_str("</tbody></table></div>");
        if let Some(formatted) = &r.formatted {
            body.push_str(&format!("<h3>Result</h3><pre>{}</pre>", esc(formatted)));
        }
    }
    // Its audit lines (the project's last 2,000), prompts and replies folded.
    let audit = c
        .call(&AuditTail {
            project: task.project.clone(),
            lines: Some(2000),
        })
        .await
        .unwrap_or_default();
    let mine: Vec<&xo_proto::queue::AuditEvent> = audit
        .iter()
        .filter(|a| a.task_id.as_deref() == Some(task.task_id.as_str()))
        .collect();
    body.push_str("<h2>History</h2>");
    if mine.is_empty() {
        body.push_str(
            "<p class=\"empty\">No audit lines for it in the last 2,000 of its project.</p>",
        );
    } else {
        body.push_str("<ol class=\"timeline\" id=\"history\">");
        for a in mine {
            body.push_str(&format!(
                "<li><span class=\"when\">#{seq} · {at}</span> <b>{ev}</b> {state}{ex}</li>",
                seq = a.seq,
                at = esc(&xo_runtime::clock::rfc3339(a.at)),
                ev = esc(&a.event),
                state = a.state_after["task"]["state"]
                    .as_str()
                    .map(|s| format!("→ {}", esc(s)))
                    .unwrap_or_default(),
                ex = exchange_details(a),
            ));
        }
        body.push_str("</ol>");
    }
    ok_page(&f, &body)
}

async fn queue(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Queue", "/queue", &q);
    let (status, tasks) = tokio::join!(c.call(&GetStatus {}), crate::api::all_tasks(&c, None));
    let (status, tasks) = match (status, tasks) {
        (Ok(s), Ok(t)) => (s, t),
        (Err(e), _) | (_, Err(e)) => return down(&f, &e),
    };
    let run = wire(&status.status);
    // Only the controls the state allows.
    use xo_proto::queue::{ExecutionMode, RunStatus};
    let (running, halted) = (
        status.status == RunStatus::Running,
        status.status == RunStatus::Halted,
    );
    let manual = status.mode == ExecutionMode::Manual;
    let fresh = status.halt_reason.is_none();
    let mut body = String::new();
    if let Some(stuck) = &status.stuck {
        body.push_str(&format!(
            "<p class=\"flash error\" id=\"stuck\" role=\"alert\">Stuck: {}</p>",
            esc(stuck)
        ));
    }
    let spend = if status.goal.budget_usd > 0.0 {
        format!(
            " · spent <b id=\"goal-spent\">${:.2}</b> of ${:.2} ({:.0}%)",
            status.spent_usd,
            status.goal.budget_usd,
            100.0 * status.spent_usd / status.goal.budget_usd
        )
    } else {
        format!(
            " · spent <b id=\"goal-spent\">${:.2}</b> (no budget)",
            status.spent_usd
        )
    };
    body.push_str(&format!(
        "<section class=\"status\"><p>Status <b id=\"queue-status\">{run}</b>{reason} · mode <b>{mode}</b> · iteration {it}</p><p>Goal: {goal}{spend}</p><div class=\"actions\">{start}{step}{halt}{resume}</div></section>",
        reason = status
            .halt_reason
            .as_ref()
            .map(|r| format!(" <span class=\"reason\">({})</span>", esc(r)))
            .unwrap_or_default(),
        mode = esc(&wire(&status.mode)),
        it = status.iteration,
        goal = if status.goal.description.is_empty() {
            "<i>none set</i>".to_string()
        } else {
            esc(&status.goal.description)
        },
        start = if halted && fresh {
            action(&f, "/ui/queue/start", "", "Start", "")
        } else {
            String::new()
        },
        step = if manual && (running || halted) {
            action(&f, "/ui/queue/step", "", "Step", "")
        } else {
            String::new()
        },
        halt = if running {
            action(
                &f,
                "/ui/queue/halt",
                "<input name=\"reason\" placeholder=\"reason\">",
                "Halt",
                "danger",
            )
        } else {
            String::new()
        },
        resume = if halted && !fresh {
            action(&f, "/ui/queue/resume", "", "Resume", "")
        } else {
            String::new()
        },
    ));
    body.push_str(&setup_forms(&f, &status, tasks.is_empty()));
    for (state, title) in [
        (TaskState::AwaitingResponse, "Awaiting an answer"),
        (TaskState::Blocked, "Blocked"),
        (TaskState::Running, "Running"),
        (TaskState::Pending, "Pending"),
        (TaskState::Completed, "Completed"),
        (TaskState::Cancelled, "Cancelled"),
    ] {
        let rows: Vec<&TaskRecord> = tasks.iter().filter(|t| t.state == state).collect();
        body.push_str(&format!(
            "<section class=\"tasks\" id=\"tasks-{s}\"><h2>{title} <small>{n}</small></h2>",
            s = state.as_str(),
            n = rows.len()
        ));
        if rows.is_empty() {
            body.push_str("</section>");
            continue;
        }
        body.push_str("<div class=\"scroll\"><table><thead><tr><th>Task</th><th>Role</th><th>Intent</th><th>Attempt</th><th>Detail</th><th></th></tr></thead><tbody>");
        for t in rows {
            let detail = t
                .question
                .as_ref()
                .map(|q| format!("asks: {q}"))
                .or_else(|| t.reason.clone())
                .or_else(|| t.answer.as_ref().map(|a| format!("answered: {a}")))
                .unwrap_or_default();
            body.push_str(&format!(
                "<tr id=\"task-{id}\"><td><a href=\"/tasks/{id}\"><code>{id}</code></a></td><td>{role}</td><td>{intent}</td><td class=\"num\">{att}</td><td>{detail}</td><td class=\"actions\">{acts}</td></tr>",
                id = esc(&t.task.task_id),
                role = esc(&t.task.role),
                intent = esc(&t.task.intent),
                att = t.attempt,
                detail = esc(&detail),
                acts = task_actions(&f, t),
            ));
        }
        body.push_str("</tbody></table></div></section>");
    }
    ok_page(&f, &body)
}

/// Seed 004: everything from the web. Initialise the queue, set the goal
/// and enqueue a task from the Queue page (the same requests as
/// `xo init`, `xo goal` and `xo enqueue`); open until there is a goal and a task.
fn setup_forms(f: &Frame<'_>, status: &xo_proto::queue::QueueStatus, no_tasks: bool) -> String {
    if f.read_only {
        return String::new();
    }
    let fresh = status.goal.description.is_empty() || no_tasks;
    let open = if fresh { " open" } else { "" };
    let init = action(
        f,
        "/ui/queue/init",
        "<label>mode <select name=\"mode\"><option>AUTO</option><option>MANUAL</option></select></label>\
         <label class=\"check\"><input type=\"checkbox\" name=\"manager\"> a Manager after each task</label>\
         <label class=\"check\"><input type=\"checkbox\" name=\"force\"> start over (drops every task)</label>",
        "Initialise",
        "",
    );
    let goal = action(
        f,
        "/ui/queue/goal",
        &format!(
            "<input name=\"description\" placeholder=\"what the fleet should achieve\" required size=\"48\" value=\"{d}\">\
             <input name=\"project\" placeholder=\"project\" size=\"12\" value=\"{p}\">\
             <input name=\"budget_usd\" placeholder=\"budget USD (0: default)\" inputmode=\"decimal\" size=\"10\">\
             <label class=\"check\"><input type=\"checkbox\" name=\"completed\"> met once the queue is empty</label>",
            d = esc(&status.goal.description),
            p = esc(status.goal.project_id.as_deref().unwrap_or("")),
        ),
        "Set goal",
        "",
    );
    let lanes: String = ["functional", "planned", "cleanup", "critical"]
        .iter()
        .map(|l| format!("<option>{l}</option>"))
        .collect();
    let enqueue = action(
        f,
        "/ui/queue/enqueue",
        &format!(
            "<input name=\"task_id\" placeholder=\"task id\" required size=\"10\">\
             <input name=\"role\" placeholder=\"role\" value=\"coder\" size=\"8\">\
             <input name=\"intent\" placeholder=\"intent (one line)\" required size=\"28\">\
             <textarea name=\"instructions\" placeholder=\"instructions\" rows=\"2\" required></textarea>\
             <textarea name=\"criteria\" placeholder=\"acceptance criteria, one per line (file exists: PATH, file contains: PATH :: TEXT, command succeeds: CMD, …)\" rows=\"2\"></textarea>\
             <label>lane <select name=\"lane\">{lanes}</select></label>\
             <label>timeout <select name=\"timeout_profile\"><option>standard</option><option>long</option><option>extended</option></select></label>\
             <input name=\"project\" placeholder=\"project (the goal's)\" size=\"12\">"
        ),
        "Enqueue",
        "",
    );
    format!(
        "<details id=\"setup\"{open}><summary>Set up: initialise, goal, enqueue a task</summary>\
         <div class=\"setup\"><h3>Initialise</h3>{init}<h3>Goal</h3>{goal}<h3>Enqueue a task</h3>{enqueue}</div></details>"
    )
}

/// The queue's set-up requests from the page's forms; an error names the
/// field and what to give.
async fn setup_request(
    c: &Shared,
    verb: &str,
    form: &[(String, String)],
) -> Result<String, String> {
    let on = |k: &str| field(form, k).is_some_and(|v| v == "on" || v == "true");
    let text = |k: &str| {
        field(form, k)
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    match verb {
        "init" => {
            let mode = match text("mode").as_str() {
                "" | "AUTO" => xo_proto::queue::ExecutionMode::Auto,
                "MANUAL" => xo_proto::queue::ExecutionMode::Manual,
                other => return Err(format!("mode {other:?}: AUTO or MANUAL")),
            };
            let s = c
                .call(&Init {
                    mode,
                    manager: on("manager"),
                    force: on("force"),
                })
                .await
                .map_err(|e| e.message)?;
            Ok(format!(
                "initialised: queue is {} in {} mode",
                wire(&s.status),
                wire(&s.mode)
            ))
        }
        "goal" => {
            let description = text("description");
            if description.is_empty() {
                return Err(
                    "goal: the description is empty; say what the fleet should achieve".into(),
                );
            }
            let project = text("project");
            if !project.is_empty() {
                xo_proto::validate_token("project", &project)?;
            }
            let budget = text("budget_usd");
            let budget_usd = if budget.is_empty() {
                0.0
            } else {
                match budget.parse::<f64>() {
                    Ok(b) if b.is_finite() && b >= 0.0 => b,
                    _ => {
                        return Err(format!(
                            "budget USD {budget:?}: a number of dollars, 0 or more"
                        ));
                    }
                }
            };
            c.call(&SetGoal {
                description,
                project_id: Some(project).filter(|p| !p.is_empty()),
                completed: on("completed"),
                budget_usd,
            })
            .await
            .map_err(|e| e.message)?;
            Ok("goal set".into())
        }
        "enqueue" => {
            let id = text("task_id");
            xo_proto::validate_token("task id", &id)?;
            let (intent, instructions) = (text("intent"), text("instructions"));
            if intent.is_empty() || instructions.is_empty() {
                return Err("enqueue: give the task an intent and instructions".into());
            }
            let mut t = Task::new(id.clone(), intent, instructions, text("role"));
            t.acceptance_criteria = text("criteria")
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            if !text("lane").is_empty() {
                t.lane = serde_json::from_value(Value::String(text("lane"))).map_err(|_| {
                    format!(
                        "lane {:?}: functional, planned, cleanup or critical",
                        text("lane")
                    )
                })?;
            }
            if !text("timeout_profile").is_empty() {
                t.timeout_profile = serde_json::from_value(Value::String(text("timeout_profile")))
                    .map_err(|_| {
                        format!(
                            "timeout {:?}: standard, long or extended",
                            text("timeout_profile")
                        )
                    })?;
            }
            let project = text("project");
            if !project.is_empty() {
                xo_proto::validate_token("project", &project)?;
                t.project = Some(project);
            }
            let added = c
                .call(&Enqueue { tasks: vec![t] })
                .await
                .map_err(|e| e.message)?;
            Ok(if added.is_empty() {
                format!("{id} is already queued, identical; nothing added")
            } else {
                format!("enqueued {id}")
            })
        }
        other => Err(format!("no queue action {other:?}")),
    }
}

/// An audit line's prompt and reply (seed 003), folded.
fn exchange_details(e: &xo_proto::queue::AuditEvent) -> String {
    let mut s = String::new();
    for (label, text) in [("prompt", &e.prompt), ("response", &e.response)] {
        if let Some(t) = text {
            s.push_str(&format!(
                "<details class=\"exchange\"><summary>{label}</summary><pre>{}</pre></details>",
                esc(t)
            ));
        }
    }
    s
}

/// Who made an audit line's change: the operator or service it names
/// (`by`), else the runner holding the task, else the queue.
fn audit_actor(e: &xo_proto::queue::AuditEvent) -> String {
    let a = &e.state_after;
    a.get("by")
        .and_then(Value::as_str)
        .map(String::from)
        .or_else(|| {
            a.pointer("/task/claimant")
                .and_then(Value::as_str)
                .or_else(|| {
                    e.state_before
                        .pointer("/task/claimant")
                        .and_then(Value::as_str)
                })
                .map(String::from)
        })
        .unwrap_or_else(|| "queue".into())
}

/// What an audit line changed: each leaf that differs between before and
/// after (`task.state: running → completed`), not the two whole states.
fn audit_diff(before: &Value, after: &Value) -> String {
    fn leaves(v: &Value, path: String, out: &mut BTreeMap<String, String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    leaves(x, p, out);
                }
            }
            Value::Null => {}
            other => {
                out.insert(path, other.to_string().trim_matches('"').to_string());
            }
        }
    }
    let (mut b, mut a) = (BTreeMap::new(), BTreeMap::new());
    leaves(before, String::new(), &mut b);
    leaves(after, String::new(), &mut a);
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    let mut out = String::from("<ul class=\"diff\">");
    let mut n = 0;
    for k in keys {
        let (x, y) = (b.get(k), a.get(k));
        if x == y || k == "last_updated" {
            continue;
        }
        n += 1;
        let show = |v: Option<&String>| {
            v.map(|s| {
                let mut t: String = s.chars().take(120).collect();
                if s.chars().count() > 120 {
                    t.push('…');
                }
                t
            })
            .unwrap_or_else(|| "—".into())
        };
        out.push_str(&format!(
            "<li><code>{}</code>: {} → <b>{}</b></li>",
            esc(k),
            esc(&show(x)),
            esc(&show(y))
        ));
    }
    if n == 0 {
        return String::new();
    }
    out.push_str("</ul>");
    out
}

fn compact(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 240 {
        format!(
            "{}…",
            &s[..s
                .char_indices()
                .take_while(|(i, _)| *i < 240)
                .last()
                .map_or(0, |(i, ch)| i + ch.len_utf8())]
        )
    } else {
        s
    }
}

async fn audit(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Audit", "/audit", &q);
    let project = q.get("project").filter(|p| !p.is_empty()).cloned();
    if let Some(p) = &project
        && let Err(e) = xo_proto::validate_token("project", p)
    {
        return bad_request(&f, &e);
    }
    let lines = q.get("lines").and_then(|l| l.parse().ok()).unwrap_or(200);
    let events = match c
        .call(&AuditTail {
            project: project.clone(),
            lines: Some(lines),
        })
        .await
    {
        Ok(e) => e,
        Err(e) => return down(&f, &e),
    };
    let mut body = format!(
        "<form method=\"get\" class=\"filters\"><label>Project <input name=\"project\" value=\"{p}\" placeholder=\"the goal's\"></label>\
<label>Lines <input name=\"lines\" type=\"number\" min=\"1\" max=\"10000\" value=\"{lines}\"></label>\
<label>Event <input name=\"event\" value=\"{ev}\" placeholder=\"e.g. TASK_BLOCKED\"></label>\
<label>Task <input name=\"task\" value=\"{tk}\" placeholder=\"task id\"></label>\
<button type=\"submit\">Show</button> <button type=\"submit\" name=\"verify\" value=\"1\" id=\"verify\">Verify the chain</button></form>",
        p = esc(project.as_deref().unwrap_or("")),
        ev = esc(q.get("event").map(String::as_str).unwrap_or("")),
        tk = esc(q.get("task").map(String::as_str).unwrap_or("")),
    );
    let want_event = q
        .get("event")
        .filter(|e| !e.is_empty())
        .map(|e| e.to_uppercase());
    let want_task = q.get("task").filter(|t| !t.is_empty());
    let mut broken_at = None;
    if q.contains_key("verify") {
        match c
            .call(&AuditVerify {
                project: project.clone(),
            })
            .await
        {
            Ok(v) if v.intact => body.push_str(&format!(
                "<p class=\"flash ok\" id=\"verdict\">Chain intact: {} lines of project {}.</p>",
                v.lines,
                esc(&v.project)
            )),
            Ok(v) => {
                broken_at = v.broken_at;
                body.push_str(&format!(
                    "<p class=\"flash error\" id=\"verdict\">Chain broken at line {}: {}</p>",
                    v.broken_at.unwrap_or(0),
                    esc(v.reason.as_deref().unwrap_or(""))
                ))
            }
            Err(e) => body.push_str(&format!(
                "<p class=\"flash error\" id=\"verdict\">{}</p>",
                esc(&e.message)
            )),
        }
    }
    body.push_str("<div class=\"scroll\"><table id=\"audit\" data-live-reload=\"1\"><thead><tr><th>#</th><th>At</th><th>Event</th><th>Task</th><th>By</th><th>Changed</th></tr></thead><tbody>");
    let shown: Vec<&xo_proto::queue::AuditEvent> = events
        .iter()
        .rev()
        .filter(|e| {
            want_event
                .as_ref()
                .is_none_or(|w| e.event.contains(w.as_str()))
        })
        .filter(|e| want_task.is_none_or(|t| e.task_id.as_deref() == Some(t.as_str())))
        .collect();
    for e in &shown {
        let cls = if broken_at == Some(e.seq) {
            " class=\"broken\""
        } else {
            ""
        };
        body.push_str(&format!(
            "<tr{cls}><td class=\"num\">{seq}</td><td>{at}</td><td><b>{ev}</b></td><td>{task}</td><td>{by}</td><td>{diff}<details class=\"raw\"><summary>before / after</summary><code>{b}</code><br><code>{a}</code></details>{ex}</td></tr>",
            seq = e.seq,
            at = esc(&xo_runtime::clock::rfc3339(e.at)),
            ev = esc(&e.event),
            task = e
                .task_id
                .as_deref()
                .map(|t| format!("<a href=\"/tasks/{t}\"><code>{t}</code></a>", t = esc(t)))
                .unwrap_or_default(),
            by = esc(&audit_actor(e)),
            diff = audit_diff(&e.state_before, &e.state_after),
            b = esc(&compact(&e.state_before)),
            a = esc(&compact(&e.state_after)),
            ex = exchange_details(e),
        ));
    }
    body.push_str("</tbody></table></div>");
    if events.is_empty() {
        body.push_str("<p class=\"empty\">No audit lines yet for this project.</p>");
    }
    ok_page(&f, &body)
}

async fn knowledge(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Knowledge", "/knowledge", &q);
    let list = match c.call(&ListDocs::default()).await {
        Ok(l) => l,
        Err(e) => return down(&f, &e),
    };
    // Seed 001's user review queue: what a reviewer asked a human to
    // confirm, first; held out of prompts until accepted.
    let waiting: Vec<&DocSummary> = list.docs.iter().filter(|d| d.needs_user_review).collect();
    let mut body = String::new();
    if !waiting.is_empty() {
        body.push_str(&format!(
            "<section id=\"needs-review\"><h2>Needs your review ({})</h2><p class=\"summary\">A review supervisor asked a human to confirm these. They are not given to agents until accepted; rejected, they are deprecated. Each decision is a <code>KNOWLEDGE_REVIEWED</code> line in the audit.</p><div class=\"scroll\"><table><thead><tr><th>Document</th><th>Title</th><th>By</th><th></th></tr></thead><tbody>",
            waiting.len()
        ));
        for d in &waiting {
            let (cat, name) = d.id.split_once('/').unwrap_or(("", &d.id));
            let to = format!("/ui/knowledge/{cat}/{name}/review");
            body.push_str(&format!(
                "<tr data-doc=\"{id}\"><td><code>{id}</code></td><td>{title}</td><td>{by}</td><td>{accept}{reject}</td></tr>",
                id = esc(&d.id),
                title = esc(&d.title),
                by = esc(&d.updated_by),
                accept = action(
                    &f,
                    &to,
                    "<input type=\"hidden\" name=\"decision\" value=\"accept\"><input name=\"note\" placeholder=\"note (optional)\">",
                    "Accept",
                    "",
                ),
                reject = action(
                    &f,
                    &to,
                    "<input type=\"hidden\" name=\"decision\" value=\"reject\"><input name=\"note\" placeholder=\"why\" required>",
                    "Reject",
                    "danger",
                ),
            ));
        }
        body.push_str("</tbody></table></div></section><h2>All documents</h2>");
    }
    body.push_str(
        "<div class=\"scroll\"><table><thead><tr><th>Document</th><th>Title</th><th>Status</th><th>Uses</th><th></th></tr></thead><tbody>",
    );
    for d in &list.docs {
        let (cat, name) = d.id.split_once('/').unwrap_or(("", &d.id));
        let deprecated = d.status == xo_proto::knowledge::DocStatus::Deprecated;
        body.push_str(&format!(
            "<tr><td><a href=\"/knowledge/{cat}/{name}\"><code>{id}</code></a></td><td>{title}</td><td>{status}</td><td class=\"num\">{uses}</td><td>{act}</td></tr>",
            cat = esc(cat),
            name = esc(name),
            id = esc(&d.id),
            title = esc(&d.title),
            status = esc(&format!(
                "{}{}",
                d.status.as_str(),
                if d.needs_user_review {
                    " · awaiting review"
                } else {
                    ""
                }
            )),
            uses = d.uses,
            // A deprecated document has nothing left to deprecate.
            act = if deprecated {
                String::new()
            } else {
                action(
                    &f,
                    &format!("/ui/knowledge/{cat}/{name}/deprecate"),
                    "<input name=\"reason\" placeholder=\"why\" required>",
                    "Deprecate",
                    "danger",
                )
            },
        ));
    }
    body.push_str("</tbody></table></div>");
    if list.docs.is_empty() {
        body.push_str("<p class=\"empty\">No documents yet (`xo knowledge seed`, or the review supervisors write them).</p>");
    }
    if !list.invalid.is_empty() {
        body.push_str("<h2>Files that do not parse</h2><p class=\"summary\">Never injected until fixed; edit the file, the store reads it again.</p><ul id=\"invalid-docs\">");
        for bad in &list.invalid {
            body.push_str(&format!(
                "<li class=\"flash error\"><code>{}</code>: {}</li>",
                esc(&bad.path),
                esc(&bad.error)
            ));
        }
        body.push_str("</ul>");
    }
    ok_page(&f, &body)
}

/// One knowledge document, readable: status, rules, examples, rationale,
/// changelog.
async fn knowledge_doc(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
    Query(q): Q,
) -> Response {
    let id = format!("{category}/{name}");
    let title = format!("Knowledge {id}");
    let f = frame(&c, &title, "/knowledge", &q);
    let d = match c.call(&xo_proto::knowledge::GetDoc { id }).await {
        Ok(d) => d,
        Err(e) => return down(&f, &e),
    };
    let mut body = format!(
        "<h2 id=\"doc-title\">{}</h2><p class=\"summary\">{} · {} uses · last updated by {}{}{}{}</p><h3>Rules</h3><ol id=\"doc-rules\">",
        esc(&d.title),
        esc(d.status.as_str()),
        d.uses,
        esc(&d.updated_by),
        d.after_task
            .as_deref()
            .map(|t| format!(" after {}", esc(t)))
            .unwrap_or_default(),
        d.milestone
            .as_deref()
            .map(|m| format!(" · milestone {}", esc(m)))
            .unwrap_or_default(),
        if d.needs_user_review {
            " · <b>awaiting your review</b>"
        } else {
            ""
        },
    );
    for r in &d.rules {
        body.push_str(&format!("<li>{}</li>", esc(r)));
    }
    body.push_str("</ol>");
    for (h, t) in [("Examples", &d.examples), ("Rationale", &d.rationale)] {
        if !t.is_empty() {
            body.push_str(&format!("<h3>{h}</h3><pre>{}</pre>", esc(t)));
        }
    }
    if !d.tags.is_empty() {
        body.push_str(&format!("<p>Tags: {}</p>", esc(&d.tags.join(", "))));
    }
    body.push_str("<h3>Changelog</h3><ul>");
    for ch in &d.changelog {
        body.push_str(&format!(
            "<li><span class=\"when\">{}</span> {}{}: {}</li>",
            esc(&ch.at),
            esc(&ch.by),
            ch.task
                .as_deref()
                .map(|t| format!(" after {}", esc(t)))
                .unwrap_or_default(),
            esc(&ch.what)
        ));
    }
    body.push_str("</ul>");
    ok_page(&f, &body)
}

/// Who gave a directive: the reviewer its task names ("Directive from the
/// code_style supervisor …"), else the operator or another tool.
fn directive_source(t: &Task) -> String {
    t.instructions
        .strip_prefix("Directive from the ")
        .and_then(|r| r.split_once(" supervisor"))
        .map(|(who, _)| who.to_string())
        .unwrap_or_else(|| "—".into())
}

async fn directives(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Directives", "/directives", &q);
    let rows = match crate::api::directive_tasks(&c).await {
        Ok(r) => r,
        Err(e) => {
            return down(
                &f,
                &ServiceError::new(xo_proto::control::ErrorCode::Unavailable, e.2),
            );
        }
    };
    let mut body = String::from(
        "<div class=\"scroll\"><table id=\"directives\"><thead><tr><th>Directive</th><th>Source</th><th>Lane</th><th>State</th><th>Task</th><th>What</th></tr></thead><tbody>",
    );
    for t in &rows {
        let state = match t.state {
            TaskState::Completed => "consumed",
            TaskState::Cancelled => "dropped",
            s => s.as_str(),
        };
        body.push_str(&format!(
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td><a href=\"/tasks/{t}\"><code>{t}</code></a></td><td>{}</td></tr>",
            esc(t.task.directive.as_deref().unwrap_or("")),
            esc(&directive_source(&t.task)),
            esc(t.task.lane.as_str()),
            esc(state),
            esc(&t.task.intent),
            t = esc(&t.task.task_id),
        ));
    }
    body.push_str("</tbody></table></div>");
    if rows.is_empty() {
        body.push_str("<p class=\"empty\">No directives.</p>");
    }
    ok_page(&f, &body)
}

async fn reviews(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Review runs", "/reviews", &q);
    let runs = match c.call(&ListReviewRuns { last: Some(500) }).await {
        Ok(r) => r,
        Err(e) => return down(&f, &e),
    };
    let total: f64 = runs.iter().map(|r| r.cost_usd).sum();
    let tokens: u64 = runs.iter().map(|r| r.tokens_in + r.tokens_out).sum();
    let mut body = format!(
        "<p class=\"summary\">{} runs · {tokens} tokens · <b>${total:.4}</b></p><div class=\"scroll\"><table id=\"reviews\"><thead><tr><th>At</th><th>Reviewer</th><th>Outcome</th><th>Trigger</th><th>Tasks</th><th>Tokens</th><th>Cost</th><th>Summary</th></tr></thead><tbody>",
        runs.len()
    );
    for r in runs.iter().rev() {
        body.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">${:.4}</td><td>{}</td></tr>",
            esc(&xo_runtime::clock::rfc3339(r.at)),
            esc(&r.reviewer),
            esc(&r.outcome),
            esc(&r.trigger),
            r.task_count,
            r.tokens_in + r.tokens_out,
            r.cost_usd,
            esc(&r.summary)
        ));
    }
    body.push_str("</tbody></table></div>");
    ok_page(&f, &body)
}

async fn containers(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Containers", "/containers", &q);
    let st = match c.call(&FleetLs {}).await {
        Ok(s) => s,
        Err(mut e) => {
            // The likely cause first: the fleet manager runs only on Docker.
            if e.code == xo_proto::control::ErrorCode::Unavailable
                && c.cfg.fleet.backend != xo_runtime::config::FleetBackend::Docker
            {
                e.message = format!(
                    "The fleet manager is not running: it manages runner containers only with `fleet.backend = \"docker\"`, and this fabric's is `{}`. Set it in xo.toml ([fleet] backend = \"docker\", with fleet.image and fleet.runners) or XO__FLEET__BACKEND=docker, and restart `xo up`. Without it, start runners yourself: `xo serve runner --role coder`. ({})",
                    wire(&c.cfg.fleet.backend),
                    e.message
                );
            }
            return down(&f, &e);
        }
    };
    let mut body = format!(
        "<p>Backend <b>{}</b></p><h2>Roles</h2><div class=\"scroll\"><table><thead><tr><th>Role</th><th>Desired</th><th>Running</th><th></th></tr></thead><tbody>",
        esc(&st.backend)
    );
    for (role, n) in &st.desired {
        let running = st
            .units
            .iter()
            .filter(|u| &u.role == role && u.running)
            .count();
        let failed = if st.failed.contains(role) {
            " <span class=\"badge red\">failed</span>"
        } else {
            ""
        };
        body.push_str(&format!(
            "<tr><td>{r}{failed}</td><td class=\"num\">{n}</td><td class=\"num\">{running}</td><td>{act}</td></tr>",
            r = esc(role),
            act = action(
                &f,
                &format!("/ui/fleet/{role}/scale"),
                &format!("<input name=\"replicas\" type=\"number\" min=\"0\" max=\"100\" value=\"{n}\">"),
                "Scale",
                ""
            ),
        ));
    }
    body.push_str("</tbody></table></div><h2>Containers</h2><div class=\"scroll\"><table><thead><tr><th>Unit</th><th>Role</th><th>Running</th><th>Container</th><th></th></tr></thead><tbody>");
    for u in &st.units {
        body.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&u.unit),
            esc(&u.role),
            if u.running { "yes" } else { "no" },
            esc(&u.container),
            action(
                &f,
                &format!("/ui/fleet/units/{}/restart", u.unit),
                "",
                "Restart",
                ""
            )
        ));
    }
    body.push_str("</tbody></table></div>");
    ok_page(&f, &body)
}

/// Milliseconds in the largest unit that divides them: `1800000` → `30m`.
fn human_ms(ms: u64) -> String {
    for (unit, n) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= n && ms.is_multiple_of(n) {
            return format!("{}{unit}", ms / n);
        }
    }
    format!("{ms}ms")
}

/// A duration typed by a person: `30m`, `2h`, `90s`, `1500ms`, or plain
/// milliseconds.
fn parse_ms(raw: &str) -> Option<u64> {
    let t = raw.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3_600_000)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1_000)
    } else {
        (t, 1)
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// A key's value when the settings do not set it: xo.toml's, or for a
/// role xo.toml does not name (one seen in the fleet), the default role's.
fn default_of<'a>(v: &'a SettingsView, key: &str) -> Option<&'a Value> {
    v.defaults.get(key).or_else(|| {
        let rest = key.strip_prefix("roles.")?;
        let (_, field) = rest.split_once(".doctrine.")?;
        v.defaults.get(&format!("roles.default.doctrine.{field}"))
    })
}

/// A settings key's editor, with where its value comes from.
fn setting_row(
    f: &Frame<'_>,
    v: &SettingsView,
    key: &str,
    kind: &str,
    help: &str,
    choices: &[String],
) -> String {
    let set = v.settings.values.get(key);
    let value = set
        .or_else(|| default_of(v, key))
        .cloned()
        .unwrap_or(Value::Null);
    let source = if set.is_some() {
        format!(
            "<span class=\"src set\">settings v{}</span>",
            v.settings.version
        )
    } else if v.defaults.contains_key(key) {
        "<span class=\"src\">xo.toml</span>".to_string()
    } else if default_of(v, key).is_some() {
        "<span class=\"src\">the default role's</span>".to_string()
    } else {
        "<span class=\"src\">not set</span>".to_string()
    };
    let name = format!("set:{key}");
    let disabled = if f.read_only { " disabled" } else { "" };
    let editor = match kind {
        "bool" => format!(
            "<input type=\"hidden\" name=\"{n}\" value=\"false\"><input type=\"checkbox\" name=\"{n}\" value=\"true\"{c}{disabled}>",
            n = esc(&name),
            c = if value.as_bool().unwrap_or(false) {
                " checked"
            } else {
                ""
            }
        ),
        "template" => format!(
            "<textarea name=\"{n}\" rows=\"4\" data-key=\"{k}\"{disabled}>{t}</textarea>",
            n = esc(&name),
            k = esc(key),
            t = esc(value.as_str().unwrap_or(""))
        ),
        "choice" => {
            let opts: String = choices
                .iter()
                .map(|ch| {
                    format!(
                        "<option{}>{}</option>",
                        if value.as_str() == Some(ch) {
                            " selected"
                        } else {
                            ""
                        },
                        esc(ch)
                    )
                })
                .collect();
            format!("<select name=\"{}\"{disabled}>{opts}</select>", esc(&name))
        }
        "list" => {
            let on: Vec<String> = value
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let mut s = format!(
                "<input type=\"hidden\" name=\"list:{}\" value=\"\">",
                esc(key)
            );
            for ch in choices {
                s.push_str(&format!(
                    "<label class=\"check\"><input type=\"checkbox\" name=\"list:{k}\" value=\"{c}\"{on}{disabled}> {c}</label>",
                    k = esc(key),
                    c = esc(ch),
                    on = if on.contains(ch) { " checked" } else { "" }
                ));
            }
            s
        }
        // Durations read and typed in human units (`30m`, `2h`, `1500ms`).
        _ if key.ends_with("_ms") => format!(
            "<input name=\"{n}\" value=\"{val}\" data-kind=\"duration\" placeholder=\"e.g. 30m, 2h, 90s\"{disabled}>",
            n = esc(&name),
            val = esc(&value.as_u64().map(human_ms).unwrap_or_default()),
        ),
        _ => format!(
            "<input name=\"{n}\" value=\"{val}\" data-kind=\"{kind}\"{disabled}>",
            n = esc(&name),
            val = esc(&match &value {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            })
        ),
    };
    let reset = if set.is_some() && !f.read_only {
        format!(
            "<label class=\"check\"><input type=\"checkbox\" name=\"unset\" value=\"{}\"> back to xo.toml</label>",
            esc(key)
        )
    } else {
        String::new()
    };
    format!(
        "<div class=\"setting\" data-setting=\"{k}\"><div class=\"key\"><code>{k}</code> {source}<small>{help}</small></div><div class=\"editor\">{editor}{reset}</div></div>",
        k = esc(key),
        help = esc(help),
    )
}

/// The sample task of the preview.
fn sample_task() -> xo_proto::queue::Task {
    let mut t = xo_proto::queue::Task::new(
        "sample-1",
        "Add a health endpoint",
        "Add GET /health returning {\"ok\": true}.",
        "coder",
    );
    t.acceptance_criteria = vec!["GET /health answers 200".into()];
    t
}

/// The composed prompt of the sample task under `v` (and the edits in `form`).
fn preview(c: &Shared, values: &BTreeMap<String, Value>, project: &str) -> Result<String, String> {
    let settings = xo_proto::settings::Settings {
        version: 1,
        values: values.clone(),
        ..Default::default()
    };
    let cfg = xo_runtime::settings::apply(&c.cfg, &settings).map_err(|e| e.to_string())?;
    let mut task = sample_task();
    task.project = Some(project.to_string());
    let role = cfg
        .runner
        .role_templates
        .get(&task.role)
        .cloned()
        .unwrap_or_default();
    let project_t = settings
        .project_template(project, "input_template")
        .unwrap_or("")
        .to_string();
    let templates = xo_pipeline::compose::Templates {
        global: &cfg.runner.global_template,
        project: &project_t,
        role: &role,
    };
    let ctx = xo_pipeline::compose::Context::default();
    let p = xo_pipeline::compose::compose(
        xo_pipeline::compose::PromptKind::Prompt,
        &templates,
        &task,
        &ctx,
        None,
    );
    Ok(p.text().to_string())
}

fn settings_body(
    f: &Frame<'_>,
    v: &SettingsView,
    project: &str,
    roles: &[String],
    extra: &str,
) -> String {
    let key_of = |k: &str| v.keys.iter().find(|x| x.key == k);
    let row = |key: &str, pattern: &str| {
        key_of(pattern)
            .map(|k| setting_row(f, v, key, &k.kind, &k.help, &k.choices))
            .unwrap_or_default()
    };
    let mut body = format!(
        "<p class=\"summary\">Settings version <b id=\"settings-version\">{ver}</b>{by}. Values set here win over <code>xo.toml</code> and apply from the next task and the next report, without a restart; every change is a <code>SETTINGS_CHANGED</code> line in the audit.</p>{extra}\
{open}",
        ver = v.settings.version,
        by = if v.settings.updated_by.is_empty() {
            String::new()
        } else {
            format!(
                " (by {}, {})",
                esc(&v.settings.updated_by),
                age(now(), v.settings.updated_at)
            )
        },
        // Read-only: the values, and no form to send.
        open = if f.read_only {
            "<div class=\"settings\" id=\"settings-form\">".to_string()
        } else {
            format!(
                "<form method=\"post\" action=\"/ui/settings\" id=\"settings-form\" class=\"settings\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"base_version\" value=\"{}\"><input type=\"hidden\" name=\"project\" value=\"{}\">",
                esc(f.csrf),
                v.settings.version,
                esc(project)
            )
        },
    );
    body.push_str("<fieldset><legend>Prompt templates</legend>");
    body.push_str(&row("runner.global_template", "runner.global_template"));
    body.push_str(&row(
        &format!("projects.{project}.input_template"),
        "projects.<project>.input_template",
    ));
    body.push_str(&row("runner.output_template", "runner.output_template"));
    body.push_str(&row(
        &format!("projects.{project}.output_template"),
        "projects.<project>.output_template",
    ));
    for r in roles {
        body.push_str(&row(
            &format!("runner.role_templates.{r}"),
            "runner.role_templates.<role>",
        ));
    }
    body.push_str("</fieldset><fieldset><legend>Supervision</legend>");
    body.push_str(&row("supervisor.enabled", "supervisor.enabled"));
    for r in roles {
        body.push_str(&format!(
            "<details><summary>Role <b>{}</b>: radio rules and thresholds</summary>",
            esc(r)
        ));
        for k in v.keys.iter().filter(|k| k.key.starts_with("roles.<role>.")) {
            body.push_str(&setting_row(
                f,
                v,
                &k.key.replace("<role>", r),
                &k.kind,
                &k.help,
                &k.choices,
            ));
        }
        body.push_str("</details>");
    }
    body.push_str("</fieldset><fieldset><legend>Timeouts and restarts</legend>");
    for k in [
        "runner.timeouts.standard_ms",
        "runner.timeouts.long_ms",
        "runner.timeouts.extended_ms",
        "runner.max_retries",
        "runner.restart_mode",
    ] {
        body.push_str(&row(k, k));
    }
    body.push_str("</fieldset><fieldset><legend>Review supervisors</legend>");
    for k in [
        "review.enabled",
        "review.model.model",
        "review.model.base_url",
        "review.daily_budget_usd",
        "review.project_budget_usd",
    ] {
        body.push_str(&row(k, k));
    }
    body.push_str("</fieldset>");
    if !f.read_only {
        body.push_str("<div class=\"actions sticky\"><button type=\"submit\" name=\"do\" value=\"preview\" id=\"preview\">Check and preview</button> <button type=\"submit\" name=\"do\" value=\"save\" id=\"save\" class=\"primary\">Save</button></div>");
    }
    body.push_str(if f.read_only { "</div>" } else { "</form>" });
    body.push_str(&format!(
        "<form method=\"get\" class=\"filters\"><label>Project for its templates <input name=\"project\" value=\"{}\"></label><button type=\"submit\">Switch</button></form>",
        esc(project)
    ));
    body
}

/// The roles the settings page offers: xo.toml's, those in the settings,
/// and those of the units the supervisor knows (a role seen in the fleet
/// can be tuned before anyone writes it down).
async fn roles_of(c: &Shared, v: &SettingsView) -> Vec<String> {
    let mut roles: Vec<String> = c.cfg.roles.keys().cloned().collect();
    if let Ok(units) = c.units().await {
        for u in units {
            if !roles.contains(&u.role) && xo_proto::validate_token("role", &u.role).is_ok() {
                roles.push(u.role);
            }
        }
    }
    for k in v.settings.values.keys().chain(v.defaults.keys()) {
        let parts: Vec<&str> = k.split('.').collect();
        if let ["roles", r, ..] | ["runner", "role_templates", r] = parts.as_slice()
            && !roles.iter().any(|x| x == r)
        {
            roles.push(r.to_string());
        }
    }
    roles.sort();
    roles
}

fn default_project(c: &Shared) -> String {
    c.cfg.runner.default_project.clone()
}

/// The project the settings page edits first: the goal's, else the
/// runners' default.
async fn goal_project(c: &Shared) -> String {
    c.call(&GetStatus {})
        .await
        .ok()
        .and_then(|s| s.goal.project_id)
        .unwrap_or_else(|| default_project(c))
}

async fn settings(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Settings", "/settings", &q);
    let v = match c.call(&GetSettings {}).await {
        Ok(v) => v,
        Err(e) => return down(&f, &e),
    };
    let project = match q
        .get("project")
        .filter(|p| xo_proto::validate_token("project", p).is_ok())
    {
        Some(p) => p.clone(),
        None => goal_project(&c).await,
    };
    let roles = roles_of(&c, &v).await;
    ok_page(&f, &settings_body(&f, &v, &project, &roles, ""))
}

/// Reads the settings form: `set:<key>` fields (typed by the key's kind),
/// `list:<key>` checkboxes, `unset` keys. Only values that differ from
/// what is in force are sent.
fn form_change(
    v: &SettingsView,
    form: &[(String, String)],
) -> Result<(BTreeMap<String, Value>, Vec<String>), String> {
    let kind_of = |key: &str| -> Option<String> {
        v.keys.iter().find_map(|k| {
            let pat: Vec<&str> = k.key.split('.').collect();
            let parts: Vec<&str> = key.split('.').collect();
            (pat.len() == parts.len()
                && pat
                    .iter()
                    .zip(&parts)
                    .all(|(p, x)| p.starts_with('<') || p == x))
            .then(|| k.kind.clone())
        })
    };
    let unset: Vec<String> = form
        .iter()
        .filter(|(k, _)| k == "unset")
        .map(|(_, v)| v.clone())
        .collect();
    // The last value of a field wins (a checked box after its hidden "false").
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    let mut lists: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, val) in form {
        if let Some(key) = k.strip_prefix("set:") {
            fields.insert(key.to_string(), val.clone());
        } else if let Some(key) = k.strip_prefix("list:") {
            let l = lists.entry(key.to_string()).or_default();
            if !val.is_empty() {
                l.push(val.clone());
            }
        }
    }
    let mut set = BTreeMap::new();
    let mut unset = unset;
    for (key, raw) in fields {
        if unset.contains(&key) {
            continue;
        }
        let kind = kind_of(&key).ok_or_else(|| format!("{key:?} is not a setting"))?;
        // An emptied number is no value: back to xo.toml if it was set,
        // else nothing to change (never "\"\" is not a whole number").
        if matches!(kind.as_str(), "integer" | "number") && raw.trim().is_empty() {
            if v.settings.values.contains_key(&key) {
                unset.push(key);
            }
            continue;
        }
        let value = match kind.as_str() {
            "integer" if key.ends_with("_ms") => Value::from(parse_ms(&raw).ok_or_else(|| {
                format!(
                    "{key}: {raw:?} is not a duration (e.g. 30m, 2h, 90s, 1500ms, or milliseconds)"
                )
            })?),
            "bool" => Value::Bool(raw == "true"),
            "integer" => Value::from(
                raw.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("{key}: {raw:?} is not a whole number"))?,
            ),
            "number" => Value::from(
                raw.trim()
                    .parse::<f64>()
                    .map_err(|_| format!("{key}: {raw:?} is not a number"))?,
            ),
            _ => Value::String(raw.replace("\r\n", "\n")),
        };
        set.insert(key, value);
    }
    for (key, items) in lists {
        if !unset.contains(&key) {
            set.insert(key, Value::from(items));
        }
    }
    // Only what changes: a value equal to the one in force is not a change.
    set.retain(|k, val| {
        let current = v.settings.values.get(k).or_else(|| default_of(v, k));
        match current {
            Some(cur) => cur != val,
            None => {
                !(val.is_null()
                    || val.as_str() == Some("")
                    || val.as_array().is_some_and(|a| a.is_empty()))
            }
        }
    });
    Ok((set, unset))
}

/// A form action's fields, once its CSRF value checked out (every
/// `POST /ui/...` takes this instead of checking for itself).
struct UiForm(Vec<(String, String)>);

impl axum::extract::FromRequest<Shared> for UiForm {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, c: &Shared) -> Result<Self, Response> {
        let Form(form) = Form::<Vec<(String, String)>>::from_request(req, c)
            .await
            .map_err(IntoResponse::into_response)?;
        if !csrf_ok(c, &form) {
            return Err(refused_csrf());
        }
        Ok(UiForm(form))
    }
}

/// A form field's value (the last one wins, like a checkbox after its hidden default).
fn field(form: &[(String, String)], name: &str) -> Option<String> {
    form.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

fn csrf_ok(c: &Shared, form: &[(String, String)]) -> bool {
    field(form, "csrf").is_some_and(|v| c.auth.csrf_ok(&v))
}

/// Percent-encodes a query value.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn back(to: &str, r: Result<String, String>) -> Response {
    let sep = if to.contains('?') { '&' } else { '?' };
    let url = match r {
        Ok(m) => format!("{to}{sep}ok={}", enc(&m)),
        Err(e) => format!("{to}{sep}error={}", enc(&e)),
    };
    Redirect::to(&url).into_response()
}

fn refused_csrf() -> Response {
    crate::auth::refuse(
        false,
        StatusCode::FORBIDDEN,
        "csrf",
        "this form's CSRF value is missing or wrong: reload the page and try again",
    )
}

async fn ui_settings(State(c): State<Shared>, UiForm(form): UiForm) -> Response {
    let get = |k: &str| field(&form, k);
    let project = get("project")
        .filter(|p| xo_proto::validate_token("project", p).is_ok())
        .unwrap_or_else(|| default_project(&c));
    let to = format!("/settings?project={}", enc(&project));
    let v = match c.call(&GetSettings {}).await {
        Ok(v) => v,
        Err(e) => return back(&to, Err(e.message)),
    };
    let (set, unset) = match form_change(&v, &form) {
        Ok(x) => x,
        Err(e) => return back(&to, Err(e)),
    };
    if get("do").as_deref() == Some("preview") {
        // Check the edits against the settings in force, and show the
        // composed prompt of a sample task, without saving.
        let mut values = v.settings.values.clone();
        for k in &unset {
            values.remove(k);
        }
        values.extend(set.clone());
        let f = Frame {
            title: "Settings",
            active: "/settings",
            csrf: c.auth.csrf(),
            read_only: c.auth.read_only(),
            flash: None,
        };
        let extra = match preview(&c, &values, &project) {
            Ok(text) => format!(
                "<section class=\"preview\"><p class=\"flash ok\" id=\"check\">The templates check out ({} changed, not saved yet).</p><h2>Composed prompt of a sample task</h2><pre id=\"preview-text\">{}</pre></section>",
                set.len() + unset.len(),
                esc(&text)
            ),
            Err(e) => format!("<p class=\"flash error\" id=\"check\">{}</p>", esc(&e)),
        };
        // The page shows the edited values, so Save sends them.
        let mut shown = v.clone();
        shown.settings.values = values;
        let roles = roles_of(&c, &shown).await;
        return Html(page(
            &f,
            &settings_body(&f, &shown, &project, &roles, &extra),
        ))
        .into_response();
    }
    if set.is_empty() && unset.is_empty() {
        return back(&to, Ok("nothing changed".into()));
    }
    let base_version = get("base_version").and_then(|b| b.parse().ok());
    let n = set.len() + unset.len();
    let r = c
        .call(&PutSettings {
            set,
            unset,
            base_version,
            by: "console".into(),
        })
        .await
        .map(|v| {
            format!(
                "saved settings version {} ({n} changed)",
                v.settings.version
            )
        })
        .map_err(|e| e.message);
    back(&to, r)
}

async fn ui_steer(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let to = format!("/units/{}", enc(&unit));
    let get = |k: &str| field(&form, k).unwrap_or_default();
    let message = get("message");
    if message.trim().is_empty() {
        return back(
            &to,
            Err("the steering message is empty: say what the unit should do".into()),
        );
    }
    let severity: Severity = match serde_json::from_value(Value::String(get("severity"))) {
        Ok(s) => s,
        Err(_) => {
            return back(
                &to,
                Err("severity: use info, warning, urgent or critical".into()),
            );
        }
    };
    let r = c
        .call(&SteerUnit {
            unit,
            message,
            severity,
        })
        .await
        .map(|s| {
            format!(
                "{} steering sent to {} at its turn {}: its agent sees it on its next turn",
                s.severity, s.unit, s.turn
            )
        })
        .map_err(|e| e.message);
    back(&to, r)
}

async fn ui_queue(
    State(c): State<Shared>,
    Path(verb): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let reason = field(&form, "reason")
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "halted from the console".into());
    if matches!(verb.as_str(), "init" | "goal" | "enqueue") {
        return back("/queue", setup_request(&c, &verb, &form).await);
    }
    let r = match verb.as_str() {
        "start" => c.call(&Start {}).await,
        "step" => c.call(&Step {}).await,
        "resume" => c.call(&Resume {}).await,
        "halt" => c.call(&Halt { reason }).await,
        other => return back("/queue", Err(format!("no queue action {other:?}"))),
    };
    back(
        "/queue",
        r.map(|s| format!("{verb}: queue is {}", wire(&s.status)))
            .map_err(|e| e.message),
    )
}

async fn ui_task(
    State(c): State<Shared>,
    Path((task_id, verb)): Path<(String, String)>,
    UiForm(form): UiForm,
) -> Response {
    let text = field(&form, "text").unwrap_or_default();
    let r = match verb.as_str() {
        "answer" if text.trim().is_empty() => Err(ServiceError::new(
            xo_proto::control::ErrorCode::Invalid,
            "the answer is empty",
        )),
        "answer" => {
            c.call(&Answer {
                task_id: task_id.clone(),
                text,
            })
            .await
        }
        "retry" => {
            c.call(&RetryTask {
                task_id: task_id.clone(),
            })
            .await
        }
        // Destructive: confirmed on the task's page first.
        "cancel" if field(&form, "confirm").as_deref() != Some("yes") => {
            return Redirect::to(&format!("/tasks/{}?confirm=cancel", enc(&task_id)))
                .into_response();
        }
        "cancel" => {
            c.call(&Cancel {
                task_id: task_id.clone(),
            })
            .await
        }
        other => return back("/queue", Err(format!("no task action {other:?}"))),
    };
    back(
        "/queue",
        r.map(|t| format!("{verb}: {} is {}", t.task.task_id, t.state.as_str()))
            .map_err(|e| e.message),
    )
}

async fn ui_deprecate(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
    UiForm(form): UiForm,
) -> Response {
    let reason = field(&form, "reason").unwrap_or_default();
    let r = c
        .call(&DeprecateDoc {
            id: format!("{category}/{name}"),
            author: Author::Operator,
            reason,
        })
        .await
        .map(|_| format!("deprecated {category}/{name}"))
        .map_err(|e| e.message);
    back("/knowledge", r)
}

async fn ui_review(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
    UiForm(form): UiForm,
) -> Response {
    let accept = match field(&form, "decision").as_deref() {
        Some("accept") => true,
        Some("reject") => false,
        other => {
            return back(
                "/knowledge",
                Err(format!("decision {other:?}: accept or reject")),
            );
        }
    };
    let id = format!("{category}/{name}");
    let r = c
        .call(&ReviewDoc {
            id: id.clone(),
            accept,
            by: "console".into(),
            note: field(&form, "note").unwrap_or_default(),
        })
        .await
        .map_err(|e| e.message)
        .and_then(|r| match r.audit_error {
            None => Ok(format!(
                "{} {id}: now {}",
                if accept { "accepted" } else { "rejected" },
                r.doc.status.as_str()
            )),
            Some(e) => Err(format!("{id} is now {}, but {e}", r.doc.status.as_str())),
        });
    back("/knowledge", r)
}

async fn ui_scale(
    State(c): State<Shared>,
    Path(role): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let replicas = field(&form, "replicas").and_then(|v| v.parse::<u32>().ok());
    let Some(replicas) = replicas else {
        return back("/containers", Err("replicas: a whole number".into()));
    };
    let r = c
        .call(&FleetScale {
            role: role.clone(),
            replicas,
        })
        .await
        .map(|_| format!("{role} scaled to {replicas}"))
        .map_err(|e| e.message);
    back("/containers", r)
}

async fn ui_restart(State(c): State<Shared>, Path(unit): Path<String>, _: UiForm) -> Response {
    let r = c
        .call(&FleetRestart { unit: unit.clone() })
        .await
        .map(|_| format!("{unit} restarted"))
        .map_err(|e| e.message);
    back("/containers", r)
}

async fn login_page(State(c): State<Shared>, Query(q): Q) -> Response {
    if let Some(t) = q.get("token") {
        return login_with(&c, t);
    }
    let body = "<form method=\"post\" action=\"/login\" class=\"stack\"><label>Console token (in <code>.xo/console.token</code>, or the chart's Secret)<input name=\"token\" type=\"password\" autocomplete=\"off\" required></label><button type=\"submit\">Log in</button></form>";
    Html(crate::html::page_plain("Log in", body)).into_response()
}

fn login_with(c: &Shared, token: &str) -> Response {
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

async fn login(State(c): State<Shared>, Form(form): Form<BTreeMap<String, String>>) -> Response {
    login_with(&c, form.get("token").map(String::as_str).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(name: &str, health: xo_proto::Health) -> UnitSummary {
        UnitSummary {
            unit: name.into(),
            role: "coder".into(),
            health,
            self_health: xo_proto::Health::Green,
            self_note: None,
            stale: false,
            ended: false,
            refused_reports: 0,
            turn: 1,
            seq: 1,
            last_seen: 1_000_000,
            task_id: None,
            context_fill: 0.5,
            steering_sent: 0,
            restarts: 0,
            pace: Default::default(),
            turns_since_progress: 0,
            cost_usd: 0.0,
            last_steering: None,
        }
    }

    fn order(body: &str) -> Vec<String> {
        body.split("<tr id=\"unit-")
            .skip(1)
            .map(|r| r.split('"').next().unwrap().to_string())
            .collect()
    }

    #[test]
    fn the_timeline_shows_evidence_and_collapses_repeats() {
        use xo_proto::{AnomalyKind, Severity, Steering};
        let mk = |kind: AnomalyKind, turn: u64, msg: &str| Steering {
            v: 1,
            unit: "u1".into(),
            id: format!("u1-{turn}"),
            kind,
            severity: Severity::Urgent,
            message: msg.into(),
            turn,
            at: 0,
            evidence: xo_proto::Evidence {
                rule: "context_fill > 0.90".into(),
                observed: "0.930".into(),
                turns: vec![turn],
                tools: Vec::new(),
            },
            source: xo_proto::SteeringSource::Xo,
        };
        let list = vec![
            mk(AnomalyKind::Stall, 3, "stalled"),
            mk(AnomalyKind::Context, 10, "compact"),
            mk(AnomalyKind::Context, 11, "compact"),
            mk(AnomalyKind::Context, 12, "compact"),
        ];
        let html = steering_timeline(&list, 0);
        assert_eq!(html.matches("<li").count(), 2, "{html}");
        let first = html.split("<li").nth(1).unwrap();
        assert!(
            first.contains("turn 10–12") && first.contains("×3"),
            "{first}"
        );
        assert!(
            first.contains("evidence: <code>context_fill &gt; 0.90</code>, observed <b>0.930</b>"),
            "{first}"
        );
        let second = html.split("<li").nth(2).unwrap();
        assert!(
            second.contains("turn 3 ") && !second.contains("×"),
            "{second}"
        );
    }

    #[test]
    fn an_audit_line_shows_what_changed_and_who() {
        let before = serde_json::json!({"supervisor": {"iteration": 0, "status": "RUNNING"},
            "task": {"state": "running", "claimant": "coder-1", "reason": null}, "last_updated": "a"});
        let after = serde_json::json!({"supervisor": {"iteration": 1, "status": "RUNNING"},
            "task": {"state": "completed", "claimant": null}, "last_updated": "b"});
        let d = audit_diff(&before, &after);
        assert!(
            d.contains("<code>task.state</code>: running → <b>completed</b>"),
            "{d}"
        );
        assert!(
            d.contains("<code>supervisor.iteration</code>: 0 → <b>1</b>"),
            "{d}"
        );
        assert!(
            d.contains("<code>task.claimant</code>: coder-1 → <b>—</b>"),
            "{d}"
        );
        assert!(
            !d.contains("supervisor.status") && !d.contains("last_updated"),
            "{d}"
        );
        assert_eq!(audit_diff(&before, &before), "");
        let e = |after: Value| xo_proto::queue::AuditEvent {
            v: 1,
            seq: 1,
            event: "X".into(),
            task_id: None,
            at: 0,
            state_before: before.clone(),
            state_after: after,
            validation_report: None,
            prompt_ref: None,
            response_ref: None,
            prompt: None,
            response: None,
            prev: String::new(),
        };
        assert_eq!(
            audit_actor(&e(after.clone())),
            "coder-1",
            "the holder, from before"
        );
        assert_eq!(audit_actor(&e(serde_json::json!({"by": "alice"}))), "alice");
    }

    #[test]
    fn a_role_xo_toml_does_not_name_shows_the_default_roles_values() {
        let mut v = view();
        v.defaults.insert(
            "roles.default.doctrine.loop_error_repeats".into(),
            Value::from(3),
        );
        v.settings
            .values
            .insert("roles.devops.doctrine.cascade_tools".into(), Value::from(5));
        assert_eq!(
            default_of(&v, "roles.devops.doctrine.loop_error_repeats"),
            Some(&Value::from(3))
        );
        assert_eq!(default_of(&v, "roles.devops.doctrine.cascade_tools"), None);
        let f = Frame {
            title: "t",
            active: "/settings",
            csrf: "c",
            read_only: false,
            flash: None,
        };
        let row = setting_row(
            &f,
            &v,
            "roles.devops.doctrine.loop_error_repeats",
            "integer",
            "",
            &[],
        );
        assert!(
            row.contains("value=\"3\"") && row.contains("the default role's"),
            "{row}"
        );
        // Shown and sent back unchanged: not a change (the bricked page
        // sent every one of them).
        let (set, unset) = form_change(
            &v,
            &pairs(&[("set:roles.devops.doctrine.loop_error_repeats", "3")]),
        )
        .unwrap();
        assert!(set.is_empty() && unset.is_empty(), "{set:?}");
    }

    #[test]
    fn durations_read_and_type_in_human_units() {
        assert_eq!(human_ms(1_800_000), "30m");
        assert_eq!(human_ms(7_200_000), "2h");
        assert_eq!(human_ms(90_000), "90s");
        assert_eq!(human_ms(1_500), "1500ms");
        for (t, ms) in [
            ("30m", 1_800_000),
            ("2h", 7_200_000),
            ("90s", 90_000),
            ("1500ms", 1_500),
            (" 250 ", 250),
        ] {
            assert_eq!(parse_ms(t), Some(ms), "{t}");
        }
        assert_eq!(parse_ms("soon"), None);
        assert_eq!(parse_ms("-5m"), None);
        // Through the form: a duration in words is saved in milliseconds,
        // a wrong one is named.
        let v = view();
        let mut v2 = v.clone();
        v2.keys.push(SettingKey {
            key: "runner.timeouts.standard_ms".into(),
            kind: "integer".into(),
            help: String::new(),
            choices: Vec::new(),
        });
        let (set, _) =
            form_change(&v2, &pairs(&[("set:runner.timeouts.standard_ms", "45m")])).unwrap();
        assert_eq!(set["runner.timeouts.standard_ms"], Value::from(2_700_000));
        let e =
            form_change(&v2, &pairs(&[("set:runner.timeouts.standard_ms", "soon")])).unwrap_err();
        assert!(e.contains("is not a duration"), "{e}");
    }

    #[test]
    fn a_directive_names_its_source() {
        let mut t = Task::new(
            "dir-code-style-3-1",
            "tidy",
            "Directive from the code_style supervisor (Cleanup, Low): tidy\nRationale: x",
            "coder",
        );
        assert_eq!(directive_source(&t), "code_style");
        t.instructions = "do it".into();
        assert_eq!(directive_source(&t), "—");
    }

    #[test]
    fn the_fleet_is_in_triage_order_sorts_filters_and_flags() {
        use xo_proto::Health::*;
        let now = 1_000_000 + 30_000;
        let mut self_red = unit("hot-2", Green);
        self_red.self_health = Red;
        let mut stale = unit("quiet-4", Green);
        stale.stale = true;
        stale.last_seen = 1;
        let mut steered = unit("Full-5", Amber);
        steered.steering_sent = 60;
        steered.context_fill = 0.93;
        steered.task_id = Some("t-7".into());
        steered.last_steering = Some((xo_proto::AnomalyKind::Context, 1));
        steered.cost_usd = 3.0;
        let units = vec![
            unit("alpha-1", Green),
            stale,
            steered,
            self_red,
            unit("Red-3", Red),
        ];
        let q = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // Red (the XO's or the unit's own), then amber, then stale, then the rest.
        let body = fleet_body(&units, &q(&[]), now);
        assert_eq!(
            order(&body),
            ["Red-3", "hot-2", "Full-5", "quiet-4", "alpha-1"]
        );
        assert!(body.contains("title=\"the unit reported itself red\">self: red</span>"));
        // Steered 60 times and still amber: the steering is not working.
        assert!(body.contains("60× <span class=\"badge red\""), "{body}");
        assert!(body.contains(">no effect</span>"));
        assert!(body.contains("<code>t-7</code>"), "the current task");
        // A unit silent for long and steering long ago read as old.
        assert!(
            body.contains("<td class=\"seen\"><small class=\"age old\">17m ago</small>"),
            "{body}"
        );
        assert!(body.contains("context <small class=\"age old\">17m ago</small>"));
        assert!(
            body.contains("<small class=\"age\">30s ago</small>"),
            "a fresh one is not"
        );
        // The badges count by triage bucket and are filter links.
        assert!(
            body.contains("id=\"count-red\" href=\"/?health=red\""),
            "{body}"
        );
        assert!(body.contains("<b>2</b> red</a>"));
        assert!(body.contains("<b>1</b> amber</a>") && body.contains("<b>1</b> stale</a>"));
        let reds = fleet_body(&units, &q(&[("health", "red")]), now);
        assert_eq!(order(&reds), ["Red-3", "hot-2"]);
        assert!(
            reds.contains("class=\"health red on\" id=\"count-red\" href=\"/?\""),
            "clicking again clears it"
        );
        // Search is case-insensitive.
        assert_eq!(
            order(&fleet_body(&units, &q(&[("q", "RED")]), now)),
            ["Red-3"]
        );
        assert_eq!(
            order(&fleet_body(&units, &q(&[("q", "full")]), now)),
            ["Full-5"]
        );
        // A header sorts by its column, and again the other way; the
        // filters stay in its link.
        let by_cost = fleet_body(&units, &q(&[("sort", "cost"), ("dir", "desc")]), now);
        assert_eq!(order(&by_cost)[0], "Full-5");
        assert!(by_cost.contains("aria-sort=\"descending\""));
        let by_name = fleet_body(&units, &q(&[("sort", "unit"), ("role", "coder")]), now);
        assert_eq!(
            order(&by_name),
            ["Full-5", "Red-3", "alpha-1", "hot-2", "quiet-4"]
        );
        assert!(
            by_name.contains("href=\"/?dir=desc&amp;role=coder&amp;sort=unit\""),
            "{by_name}"
        );
        // An unknown column falls back to triage order.
        assert_eq!(
            order(&fleet_body(&units, &q(&[("sort", "bogus")]), now))[0],
            "Red-3"
        );
    }
    use xo_proto::Health;
    use xo_proto::settings::{SettingKey, Settings};

    fn view() -> SettingsView {
        let mut defaults = BTreeMap::new();
        defaults.insert("supervisor.enabled".to_string(), Value::Bool(true));
        defaults.insert("runner.max_retries".to_string(), Value::from(3));
        defaults.insert("runner.global_template".to_string(), Value::from(""));
        SettingsView {
            settings: Settings::default(),
            defaults,
            keys: xo_runtime::settings::keys()
                .into_iter()
                .chain([SettingKey {
                    key: "x".into(),
                    kind: "string".into(),
                    help: String::new(),
                    choices: vec![],
                }])
                .collect(),
        }
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_form_sends_only_what_changed_typed_by_kind() {
        let v = view();
        let (set, unset) = form_change(
            &v,
            &pairs(&[
                ("set:supervisor.enabled", "false"),
                ("set:runner.max_retries", "3"),
                ("set:runner.global_template", "Be brief.\r\nAlways."),
                ("list:roles.coder.doctrine.disabled_rules", ""),
                ("list:roles.coder.doctrine.disabled_rules", "stall"),
                ("set:roles.coder.doctrine.loop_error_repeats", "5"),
            ]),
        )
        .unwrap();
        assert!(unset.is_empty());
        assert_eq!(set["supervisor.enabled"], Value::Bool(false));
        assert!(
            !set.contains_key("runner.max_retries"),
            "unchanged values are not sent"
        );
        assert_eq!(set["runner.global_template"], "Be brief.\nAlways.");
        assert_eq!(
            set["roles.coder.doctrine.disabled_rules"],
            serde_json::json!(["stall"])
        );
        assert_eq!(
            set["roles.coder.doctrine.loop_error_repeats"],
            Value::from(5)
        );
        // A checked box comes after its hidden "false": the last value wins.
        let (set, _) = form_change(
            &v,
            &pairs(&[
                ("set:supervisor.enabled", "false"),
                ("set:supervisor.enabled", "true"),
            ]),
        )
        .unwrap();
        assert!(set.is_empty());
        let e = form_change(&v, &pairs(&[("set:runner.max_retries", "many")])).unwrap_err();
        assert!(e.contains("runner.max_retries"), "{e}");
        // Issue 24's bricked page: a role's thresholds rendered empty came
        // back as "" and every Save failed. An emptied number is no value:
        // nothing to change, or back to xo.toml where it was set.
        let mut v2 = view();
        v2.settings
            .values
            .insert("runner.max_retries".into(), Value::from(5));
        let (set, unset) = form_change(
            &v2,
            &pairs(&[
                ("set:roles.devops.doctrine.loop_error_repeats", ""),
                ("set:runner.max_retries", " "),
                ("set:supervisor.enabled", "false"),
            ]),
        )
        .unwrap();
        assert_eq!(unset, ["runner.max_retries"]);
        assert_eq!(set.len(), 1, "{set:?}");
        assert_eq!(set["supervisor.enabled"], Value::Bool(false));
    }

    #[test]
    fn the_fleet_table_filters_and_escapes() {
        let u = |name: &str, role: &str, h: Health| UnitSummary {
            unit: name.into(),
            role: role.into(),
            health: h,
            self_health: h,
            self_note: None,
            stale: false,
            ended: false,
            refused_reports: 0,
            turn: 1,
            seq: 1,
            last_seen: 0,
            task_id: None,
            context_fill: 0.5,
            steering_sent: 0,
            restarts: 0,
            pace: Default::default(),
            turns_since_progress: 2,
            cost_usd: 0.25,
            last_steering: None,
        };
        let units = vec![
            u("a-1", "coder", Health::Green),
            u("b-1", "<tester>", Health::Red),
        ];
        let mut q = BTreeMap::new();
        let all = fleet_body(&units, &q, 0);
        assert!(all.contains("id=\"unit-a-1\"") && all.contains("id=\"unit-b-1\""));
        assert!(all.contains("&lt;tester&gt;") && !all.contains("<tester>"));
        q.insert("health".into(), "red".into());
        let red = fleet_body(&units, &q, 0);
        assert!(!red.contains("id=\"unit-a-1\"") && red.contains("id=\"unit-b-1\""));
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(enc("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
