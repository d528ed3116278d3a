//! The fleet page: every unit in triage order, sortable, filtered by the
//! count badges and the search; one row builder shared with the live script.

use maud::{Markup, html};

use super::*;

use crate::triage::triage_key;
pub(crate) use crate::triage::{BUCKETS, bucket, severity};

/// Steered this many times and still red or amber: the steering is not
/// working, and a human should look.
pub(crate) const NO_EFFECT_AFTER: u64 = 3;

/// A relative age, marked `old` past `old_after_ms` (a unit not heard from
/// in minutes, steering long ago) so it does not read as current.
pub(crate) fn age_mark(now: u64, at: u64, old_after_ms: u64) -> Markup {
    let old = at > 0 && now.saturating_sub(at) > old_after_ms;
    html! { small.age.old[old] { (age(now, at)) } }
}

/// One row of the fleet table (the live script swaps it in as it is).
pub fn unit_row(u: &UnitSummary, now: u64) -> Markup {
    let h = health_name(u.health);
    let own = health_name(u.self_health);
    let rank = severity(u);
    let own_differs = u.self_health != u.health && u.self_health != xo_proto::Health::Green;
    html! {
        tr id={ "unit-" (u.unit) } data-unit=(u.unit) data-role=(u.role) data-health=(h)
            data-rank=(rank) data-needs=(u8::from(u.needs.is_some()))
            data-acked=(u8::from(u.ack.is_some())) data-steered=(u.steering_sent)
            data-tsp=(u.turns_since_progress) {
            td { a href={ "/units/" (u.unit) } { (u.unit) } }
            td { (u.role) }
            td {
                @if rank == 4 {
                    span.health.idle title={ "its task or session ended and it has not reported since; its last assessment was " (h) } { "idle" }
                } @else {
                    span class={ "health " (h) } { (h) }
                }
                @if own_differs {
                    " " span class={ "badge self " (own) } title={ "the unit reported itself " (own) } { "self: " (own) }
                    @if let Some(n) = &u.self_note { " " small.note { (n) } }
                }
                (state_badge(u))
                (unreadable(u.unreadable))
                (acked_badge(u))
            }
            td.pace { (wire(&u.pace)) }
            td.num.fill { (format!("{:.0}%", u.context_fill * 100.0)) }
            td.num.tsp { (u.turns_since_progress) }
            td.num.cost { (format!("${:.4}", u.cost_usd)) }
            td.task { @if let Some(t) = &u.task_id { a href={ "/tasks/" (t) } { code { (t) } } } }
            td.num.steered { (steered_cell(u, rank)) }
            td.steer {
                @match u.last_steering {
                    Some((k, at)) => { (k.to_string()) " " (age_mark(now, at, 10 * 60_000)) },
                    None => "—",
                }
            }
            td.seen { (age_mark(now, u.last_seen, 2 * 60_000)) }
        }
    }
}

/// How often a unit was steered, and whether the steering is failing it.
fn steered_cell(u: &UnitSummary, rank: u8) -> Markup {
    let n = u.steering_sent;
    html! {
        @if n >= NO_EFFECT_AFTER && rank <= 1 {
            (n) "× "
            span.badge.red title={ "steered " (n) " times and still " (if rank == 0 { "red" } else { "amber" }) ": the steering is not working" } { "no effect" }
        } @else if n > 0 {
            (n) "×"
        }
    }
}

/// The one state badge of a row: needs a person, stale, reports refused,
/// waiting out a usage limit, or its task ended.
fn state_badge(u: &UnitSummary) -> Markup {
    html! {
        @if let Some(n) = &u.needs {
            " " a.badge.red.needs href="/needs" title=(n.detail) { "needs you: " (n.reason) }
        } @else if u.stale {
            " " span.badge { "stale" }
        } @else if u.refused_reports >= 3 {
            " " span.badge title="its reports are refused for their epoch (an earlier life, or its clock too far off) while its heartbeats arrive" { "reports refused" }
        } @else if let (true, Some(t)) = (u.ended, u.waiting_until) {
            " " span.badge.ended title={ "its provider's usage limit resets at " (xo_runtime::clock::rfc3339(t)) ": not stale, not steered until then" } {
                "waiting until " (xo_runtime::clock::hh_mm(t)) "Z"
            }
        } @else if u.ended {
            " " span.badge.ended { "task ended" }
        }
    }
}

/// The fleet's sortable columns: (query key, header).
pub(crate) const FLEET_COLUMNS: [(&str, &str); 11] = [
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

pub(crate) fn sort_units(units: &mut [&UnitSummary], key: &str, desc: bool) {
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
            _ => triage_key(a).cmp(&triage_key(b)),
        };
        let o = if desc { o.reverse() } else { o };
        o.then_with(|| a.unit.cmp(&b.unit))
    });
}

/// Rows on one page of the fleet (`?per=` sets another, up to
/// [`MAX_PER_PAGE`]).
pub(crate) const PER_PAGE: usize = 100;
pub(crate) const MAX_PER_PAGE: usize = 1000;

/// The fleet table for `units` with the filters and order of `q`: red
/// first by default; a header sorts by its column (again: the other way).
/// What its page shows is a [`crate::views::View`]: `register` keeps it
/// and gives its id, which the table carries (`data-view`) for the tab's
/// live stream.
pub(crate) fn fleet_view(
    units: &[UnitSummary],
    q: &BTreeMap<String, String>,
    now: u64,
    register: impl FnOnce(crate::views::View) -> Option<String>,
) -> (Markup, Option<String>) {
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
    // A page of rows at a time: a fleet of thousands is not one page
    // thousands of rows tall (the counts and rollups stay the whole fleet's).
    let per = q
        .get("per")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(PER_PAGE)
        .clamp(1, MAX_PER_PAGE);
    let pages = shown.len().div_ceil(per).max(1);
    let page = q
        .get("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, pages);
    let first = (page - 1) * per;
    let on_page = &shown[first.min(shown.len())..(first + per).min(shown.len())];
    let view = register(crate::views::View {
        filters: crate::views::Filters {
            role: role.cloned(),
            health: health.cloned(),
            q: needle.clone(),
        },
        per,
        grows: page == 1 && sort == "health" && !desc,
        shown: on_page
            .iter()
            .map(|u| (u.unit.clone(), triage_key(u)))
            .collect(),
    });
    // Links keep the other filters and the order.
    let link = |set: &[(&str, &str)]| {
        let mut kv: BTreeMap<&str, &str> = q
            .iter()
            .filter(|(k, v)| {
                ["role", "health", "q", "sort", "dir", "per"].contains(&k.as_str()) && !v.is_empty()
            })
            // Another filter or order starts at its first page.
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
        if qs.is_empty() {
            "/".to_string()
        } else {
            format!("/?{}", qs.join("&"))
        }
    };
    let counts = crate::triage::counts(units.iter().map(severity));
    // Per role: its units, how many in each bucket, what they spent; the
    // role links to its rows alone.
    let mut by_role: BTreeMap<&str, ([usize; BUCKETS.len()], f64)> = BTreeMap::new();
    for u in units {
        let e = by_role.entry(u.role.as_str()).or_default();
        e.0[usize::from(severity(u)).min(BUCKETS.len() - 1)] += 1;
        e.1 += u.cost_usd;
    }
    let to_page = |p: usize| {
        let n = p.to_string();
        link(&[("page", if p == 1 { "" } else { &n })])
    };
    let markup = html! {
        p.summary {
            span #unit-count { (units.len()) } " units · "
            @for (i, h) in BUCKETS.iter().enumerate() {
                @let on = health.is_some_and(|x| x == h);
                a class={ "health " (h) @if on { " on" } } id={ "count-" (h) }
                    href=(link(&[("health", if on { "" } else { h })]))
                    title={ "show only the " (h) " units" } { b { (counts[i]) } " " (h) }
                " "
            }
        }
        form method="get" class="filters" {
            label { "Role " select name="role" {
                option value="" { "all" }
                @for r in &roles { option value=(r) selected[role.is_some_and(|s| s == r)] { (r) } }
            } }
            label { "Health " select name="health" {
                option value="" { "all" }
                @for h in BUCKETS { option value=(h) selected[health.is_some_and(|s| s == h)] { (h) } }
            } }
            label { "Unit " input name="q" value=(find.map(String::as_str).unwrap_or("")) placeholder="name contains (any case)"; }
            input type="hidden" name="sort" value=(sort);
            @if per != PER_PAGE { input type="hidden" name="per" value=(per); }
            button type="submit" { "Filter" }
        }
        // Open where there is more than one role to tell apart.
        details.roles open[by_role.len() > 1] {
            summary { "By role (" (by_role.len()) ")" }
            div.scroll { table #roles {
                thead { tr {
                    th { "role" } th { "units" }
                    @for b in BUCKETS { th { (b) } }
                    th { "cost" }
                } }
                tbody {
                    @for (r, (n, cost)) in &by_role {
                        tr data-role=(r) {
                            th scope="row" { a href=(link(&[("role", r)])) { (r) } }
                            td.num { (n.iter().sum::<usize>()) }
                            @for (n, b) in n.iter().zip(BUCKETS) { td class={ "num " (b) } { (n) } }
                            td.num { (format!("${cost:.2}")) }
                        }
                    }
                }
            } }
        }
        div.scroll {
            table #units data-live="fleet" data-sort=(sort) data-page=(page) data-per=(per) data-view=[view.as_deref()] {
                thead { tr {
                    @for (k, title) in FLEET_COLUMNS {
                        @let current = k == sort;
                        @let next = if current && !desc { "desc" } else { "" };
                        th aria-sort=[current.then_some(if desc { "descending" } else { "ascending" })] {
                            a href=(link(&[("sort", k), ("dir", next)])) data-sort=(k) {
                                (title)
                                @if current { (if desc { " ▾" } else { " ▴" }) }
                            }
                        }
                    }
                } }
                tbody { @for u in on_page { (unit_row(u, now)) } }
            }
        }
        @if pages > 1 {
            nav.pages #pages aria-label="pages of units" {
                @if page > 1 { a href=(to_page(page - 1)) rel="prev" { "‹ previous" } }
                " " span { "rows " (first + 1) "–" (first + on_page.len()) " of " (shown.len()) " · page " (page) " of " (pages) } " "
                @if page < pages { a href=(to_page(page + 1)) rel="next" { "next ›" } }
            }
        }
        @if shown.is_empty() {
            p.empty #no-units { "No units match. Units appear here when they send their first SALUTE report (`xo report FILE`, or a runner)." }
        }
    };
    (markup, view)
}

/// One unit's fleet row, for the live page to swap in (the server's row
/// is the only one: the page's script does not build its own).
pub(crate) async fn unit_row_fragment(
    State(c): State<Shared>,
    Path(unit): Path<String>,
) -> Response {
    if xo_proto::validate_token("unit", &unit).is_err() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    match c.call(&ShowUnit { unit }).await {
        Ok(d) => Html(unit_row(&d.summary, c.clock.now_ms()).into_string()).into_response(),
        Err(e) if e.code == xo_proto::control::ErrorCode::NotFound => {
            StatusCode::NOT_FOUND.into_response()
        }
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

pub(crate) async fn fleet(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Fleet", "/", &q);
    match c.units().await {
        Ok(units) => {
            let n = c.clock.now_ms();
            let (body, _) = fleet_view(&units, &q, n, |v| c.views.register(v, n));
            ok_page(&f, body)
        }
        Err(e) => down(&f, &e),
    }
}

/// An operator's acknowledgement in force: who, until when, why.
pub(crate) fn acked_badge(u: &UnitSummary) -> Markup {
    let Some(a) = &u.ack else {
        return html! {};
    };
    html! {
        " " span.badge.acked title={
            "acknowledged by " (a.by) ": " (a.why) " (it lapses at "
            (xo_runtime::clock::rfc3339(a.until)) ", or as soon as the unit gets worse)"
        } { "acked by " (a.by) " until " (xo_runtime::clock::hh_mm(a.until)) "Z" }
        " " small.note.ack-why { (a.why) }
    }
}

/// A unit whose sensor could not read some of its records: said, with what
/// it means (its picture is incomplete: not steered on it).
pub(crate) fn unreadable(n: u64) -> Markup {
    html! {
        @if n > 0 {
            " " span.badge.amber.unreadable title={ "its sensor could not read " (n) " of its session's records (kinds it does not know, lines it could not parse, results naming no call): XO does not steer it on what it did; xo import --stats on the file names them" } {
                "unreadable: " (n) " records"
            }
        }
    }
}
