//! The fleet page: every unit in triage order, sortable, filtered by the
//! count badges and the search; one row builder shared with the live script.

use super::*;

use crate::triage::triage_key;
pub(crate) use crate::triage::{BUCKETS, bucket, severity};

/// Steered this many times and still red or amber: the steering is not
/// working, and a human should look.
pub(crate) const NO_EFFECT_AFTER: u64 = 3;

/// A relative age, marked `old` past `old_after_ms` (a unit not heard from
/// in minutes, steering long ago) so it does not read as current.
pub(crate) fn age_mark(now: u64, at: u64, old_after_ms: u64) -> String {
    let old = at > 0 && now.saturating_sub(at) > old_after_ms;
    format!(
        "<small class=\"age{}\">{}</small>",
        if old { " old" } else { "" },
        age(now, at)
    )
}

/// One row of the fleet table (the live script swaps it in as it is).
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
    let health_cell = if rank == 4 {
        format!(
            "<span class=\"health idle\" title=\"its task or session ended and it has not reported since; its last assessment was {h}\">idle</span>"
        )
    } else {
        format!("<span class=\"health {h}\">{h}</span>")
    };
    format!(
        "<tr id=\"unit-{id}\" data-unit=\"{id}\" data-role=\"{role}\" data-health=\"{h}\" data-rank=\"{rank}\" data-needs=\"{needs}\" data-acked=\"{acked}\" data-steered=\"{n_steered}\" data-tsp=\"{tsp}\">\
<td><a href=\"/units/{id}\">{id}</a></td><td>{role}</td>\
<td>{health_cell}{own_badge}{stale}</td><td class=\"pace\">{pace}</td>\
<td class=\"num fill\">{fill:.0}%</td><td class=\"num tsp\">{tsp}</td><td class=\"num cost\">${cost:.4}</td>\
<td class=\"task\">{task}</td><td class=\"num steered\">{steered}</td>\
<td class=\"steer\">{last}</td><td class=\"seen\">{seen}</td></tr>",
        id = esc(&u.unit),
        role = esc(&u.role),
        n_steered = u.steering_sent,
        acked = u8::from(u.ack.is_some()),
        needs = u8::from(u.needs.is_some()),
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
        stale = if let Some(n) = &u.needs {
            format!(
                " <a class=\"badge red needs\" href=\"/needs\" title=\"{}\">needs you: {}</a>",
                esc(&n.detail),
                n.reason
            )
        } else if u.stale {
            " <span class=\"badge\">stale</span>".to_string()
        } else if u.refused_reports >= 3 {
            " <span class=\"badge\" title=\"its reports are refused for their epoch (an earlier life, or its clock too far off) while its heartbeats arrive\">reports refused</span>".to_string()
        } else if let (true, Some(t)) = (u.ended, u.waiting_until) {
            format!(
                " <span class=\"badge ended\" title=\"its provider's usage limit resets at {}: not stale, not steered until then\">waiting until {}Z</span>",
                xo_runtime::clock::rfc3339(t),
                xo_runtime::clock::hh_mm(t)
            )
        } else if u.ended {
            " <span class=\"badge ended\">task ended</span>".to_string()
        } else {
            String::new()
        } + &unreadable(u.unreadable)
            + &acked_badge(u),
        pace = esc(&wire(&u.pace)),
        fill = u.context_fill * 100.0,
        tsp = u.turns_since_progress,
        cost = u.cost_usd,
        task = u
            .task_id
            .as_deref()
            .map(|t| format!("<a href=\"/tasks/{t}\"><code>{t}</code></a>", t = esc(t)))
            .unwrap_or_default(),
        seen = age_mark(now, u.last_seen, 2 * 60_000),
    )
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
) -> (String, Option<String>) {
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
    let mut rows = String::with_capacity(on_page.len() * 450);
    for u in on_page {
        rows.push_str(&unit_row(u, now));
    }
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
            esc(&format!("/?{}", qs.join("&")))
        }
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
    let health_opts: String = BUCKETS.iter().map(|h| opt(h, health)).collect();
    let counts = crate::triage::counts(units.iter().map(severity));
    let count = |h: &str| {
        BUCKETS
            .iter()
            .position(|b| *b == h)
            .map_or(0, |i| counts[i])
    };
    let badges: String = BUCKETS
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
    // Per role: its units, how many in each bucket, what they spent; the
    // role links to its rows alone.
    let mut by_role: BTreeMap<&str, ([usize; BUCKETS.len()], f64)> = BTreeMap::new();
    for u in units {
        let e = by_role.entry(u.role.as_str()).or_default();
        e.0[usize::from(severity(u)).min(BUCKETS.len() - 1)] += 1;
        e.1 += u.cost_usd;
    }
    let rollups: String = by_role
        .iter()
        .map(|(r, (n, cost))| {
            let cells: String = n
                .iter()
                .zip(BUCKETS)
                .map(|(n, b)| format!("<td class=\"num {b}\">{n}</td>"))
                .collect();
            format!(
                "<tr data-role=\"{r}\"><th scope=\"row\"><a href=\"{href}\">{r}</a></th><td class=\"num\">{all}</td>{cells}<td class=\"num\">${cost:.2}</td></tr>",
                r = esc(r),
                href = link(&[("role", r)]),
                all = n.iter().sum::<usize>(),
            )
        })
        .collect();
    let rollup_heads: String = BUCKETS.iter().map(|b| format!("<th>{b}</th>")).collect();
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
    let nav = if pages > 1 {
        let to = |p: usize, text: &str, rel: &str| {
            let n = p.to_string();
            format!(
                "<a href=\"{href}\" rel=\"{rel}\">{text}</a>",
                href = link(&[("page", if p == 1 { "" } else { &n })])
            )
        };
        format!(
            "<nav class=\"pages\" aria-label=\"pages of units\" id=\"pages\">{prev} <span>rows {from}–{to_row} of {all} · page {page} of {pages}</span> {next}</nav>",
            prev = if page > 1 {
                to(page - 1, "‹ previous", "prev")
            } else {
                String::new()
            },
            next = if page < pages {
                to(page + 1, "next ›", "next")
            } else {
                String::new()
            },
            from = first + 1,
            to_row = first + on_page.len(),
            all = shown.len(),
        )
    } else {
        String::new()
    };
    let html = format!(
        "<p class=\"summary\"><span id=\"unit-count\">{n}</span> units · {badges}</p>\
<form method=\"get\" class=\"filters\"><label>Role <select name=\"role\"><option value=\"\">all</option>{role_opts}</select></label>\
<label>Health <select name=\"health\"><option value=\"\">all</option>{health_opts}</select></label>\
<label>Unit <input name=\"q\" value=\"{f}\" placeholder=\"name contains (any case)\"></label>\
<input type=\"hidden\" name=\"sort\" value=\"{sort}\">{per_field}<button type=\"submit\">Filter</button></form>\
<details class=\"roles\"{open}><summary>By role ({roles})</summary><div class=\"scroll\"><table id=\"roles\"><thead><tr><th>role</th><th>units</th>{rollup_heads}<th>cost</th></tr></thead><tbody>{rollups}</tbody></table></div></details>\
<div class=\"scroll\"><table id=\"units\" data-live=\"fleet\" data-sort=\"{sort}\" data-page=\"{page}\" data-per=\"{per}\"{view_attr}><thead><tr>{heads}</tr></thead>\
<tbody>{rows}</tbody></table></div>{nav}{empty}",
        n = units.len(),
        view_attr = view
            .as_deref()
            .map(|v| format!(" data-view=\"{}\"", esc(v)))
            .unwrap_or_default(),
        per_field = if per == PER_PAGE {
            String::new()
        } else {
            format!("<input type=\"hidden\" name=\"per\" value=\"{per}\">")
        },
        roles = by_role.len(),
        // Open where there is more than one role to tell apart.
        open = if by_role.len() > 1 { " open" } else { "" },
        f = esc(find.map(String::as_str).unwrap_or("")),
        empty = if shown.is_empty() {
            "<p class=\"empty\" id=\"no-units\">No units match. Units appear here when they send their first SALUTE report (`xo report FILE`, or a runner).</p>"
        } else {
            ""
        },
    );
    (html, view)
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
        Ok(d) => Html(unit_row(&d.summary, now())).into_response(),
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
            let n = now();
            let (body, _) = fleet_view(&units, &q, n, |v| c.views.register(v, n));
            ok_page(&f, &body)
        }
        Err(e) => down(&f, &e),
    }
}

/// An operator's acknowledgement in force: who, until when, why.
pub(crate) fn acked_badge(u: &UnitSummary) -> String {
    let Some(a) = &u.ack else {
        return String::new();
    };
    format!(
        " <span class=\"badge acked\" title=\"acknowledged by {by}: {why} (it lapses at {until}, or as soon as the unit gets worse)\">acked by {by} until {hhmm}Z</span> <small class=\"note ack-why\">{why}</small>",
        by = esc(&a.by),
        why = esc(&a.why),
        until = xo_runtime::clock::rfc3339(a.until),
        hhmm = xo_runtime::clock::hh_mm(a.until),
    )
}

/// A unit whose sensor could not read some of its records: said, with what
/// it means (its picture is incomplete: not steered on it).
pub(crate) fn unreadable(n: u64) -> String {
    if n == 0 {
        return String::new();
    }
    format!(
        " <span class=\"badge amber unreadable\" title=\"its sensor could not read {n} of its session's records (kinds it does not know, lines it could not parse, results naming no call): XO does not steer it on what it did; xo import --stats on the file names them\">unreadable: {n} records</span>"
    )
}
