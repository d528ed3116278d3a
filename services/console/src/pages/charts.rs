//! The fleet's charts, from what XO keeps (no external service): steering
//! per minute by kind (the supervisor's last hour), the goal's spend against
//! its budget, tasks completed per interval and how long they took (the
//! queue's tasks). Inline SVG, drawn on the server: no script, no build.

use maud::{Markup, html};

use super::*;

/// A kind's colour: the same kind the same colour on every chart.
fn colour(i: usize) -> &'static str {
    const C: [&str; 11] = [
        "#3182ce", "#e53e3e", "#dd6b20", "#d69e2e", "#38a169", "#319795", "#5a67d8", "#805ad5",
        "#d53f8c", "#718096", "#2d3748",
    ];
    C[i % C.len()]
}

const W: f64 = 640.0;
const H: f64 = 160.0;
/// Room on the left for the y axis' labels, below for the x axis'.
const LEFT: f64 = 44.0;
const BOTTOM: f64 = 18.0;

/// Something that happened, marked on a chart's time axis: a settings
/// change or steering, with what a pointer over it shows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mark {
    pub at: u64,
    pub kind: MarkKind,
    pub label: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkKind {
    Settings,
    Steering,
}

impl MarkKind {
    fn name(self) -> &'static str {
        match self {
            MarkKind::Settings => "settings",
            MarkKind::Steering => "steering",
        }
    }
}

/// The marks whose time `x` places on the chart, as dashed vertical lines
/// (each with its label as a tooltip), and a legend line counting them.
fn marks_drawn(marks: &[Mark], x: impl Fn(u64) -> Option<f64>) -> (Markup, Markup) {
    let placed: Vec<(f64, &Mark)> = marks.iter().filter_map(|m| Some((x(m.at)?, m))).collect();
    let mut shown = [0usize; 2];
    for (_, m) in &placed {
        shown[m.kind as usize] += 1;
    }
    let svg = html! {
        @for (at, m) in &placed {
            line x1=(f1(*at)) y1="4" x2=(f1(*at)) y2=(H - BOTTOM) class={ "mark " (m.kind.name()) }
                data-mark=(m.kind.name()) data-at=(m.at) {
                title { (hhmm(m.at)) " " (m.label) }
            }
        }
    };
    let legend = html! {
        @for k in [MarkKind::Settings, MarkKind::Steering] {
            @if shown[k as usize] > 0 {
                li {
                    span class={ "mark-swatch " (k.name()) } {}
                    (match k {
                        MarkKind::Settings => "settings changed",
                        MarkKind::Steering => "minutes with steering",
                    })
                    " " b { (shown[k as usize]) }
                }
            }
        }
    };
    (svg, legend)
}

/// A coordinate with one decimal, as the charts print them.
fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// A bar chart: one bar per slot, each stacked from `series` (name, values
/// per slot). Labels under the first, middle and last slots.
pub(crate) fn bars(
    id: &str,
    title: &str,
    slots: &[String],
    series: &[(String, Vec<f64>)],
) -> Markup {
    bars_marked(id, title, slots, series, None)
}

/// [`bars`] on a time axis (`starts` of equal slots of `step` ms) with
/// `marks` drawn where they fall.
pub(crate) fn bars_marked(
    id: &str,
    title: &str,
    slots: &[String],
    series: &[(String, Vec<f64>)],
    time: Option<(&[u64], u64, &[Mark])>,
) -> Markup {
    let n = slots.len().max(1);
    let totals: Vec<f64> = (0..n)
        .map(|i| {
            series
                .iter()
                .map(|(_, v)| v.get(i).copied().unwrap_or(0.0))
                .sum()
        })
        .collect();
    let top = totals.iter().cloned().fold(0.0, f64::max).max(1.0);
    let slot = (W - LEFT) / n as f64;
    // Each slot's bars, stacked from the baseline: (x, y, height, series, value).
    let mut rects = Vec::new();
    for i in 0..n {
        let mut y = H - BOTTOM;
        for (k, (name, values)) in series.iter().enumerate() {
            let v = values.get(i).copied().unwrap_or(0.0);
            if v <= 0.0 {
                continue;
            }
            let h = v / top * (H - BOTTOM - 4.0);
            y -= h;
            rects.push((i, k, y, h, name, v));
        }
    }
    let ticks: Vec<(f64, &str, &String)> = [(0, "start"), (n / 2, "middle"), (n - 1, "end")]
        .into_iter()
        .filter_map(|(i, anchor)| {
            let l = slots.get(i)?;
            let x = match anchor {
                "start" => LEFT + i as f64 * slot,
                "middle" => LEFT + (i as f64 + 0.5) * slot,
                _ => W,
            };
            Some((x, anchor, l))
        })
        .collect();
    let (lines, more) = match time {
        Some((starts, step, marks)) => marks_drawn(marks, |t| {
            let i = starts.iter().position(|s| t >= *s && t < s + step)?;
            Some(LEFT + (i as f64 + 0.5) * slot)
        }),
        None => (html! {}, html! {}),
    };
    let svg = html! {
        (axes(top, |v| if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.1}") }))
        @for (i, k, y, h, name, v) in &rects {
            rect.bar x=(f1(LEFT + *i as f64 * slot + 1.0)) y=(f1(*y)) width=(f1((slot - 2.0).max(1.0)))
                height=(f1(*h)) fill=(colour(*k)) data-series=(name) data-value=(v) {
                title { (slots[(*i).min(slots.len().saturating_sub(1))]) ": " (v) " " (name) }
            }
        }
        @for (x, anchor, l) in &ticks {
            text x=(f1(*x)) y=(f1(H - 4.0)) class="tick" text-anchor=(anchor) { (l) }
        }
        (lines)
    };
    let legend = html! {
        ul.legend {
            @for (k, (name, v)) in series.iter().enumerate() {
                li {
                    span.swatch style={ "background:" (colour(k)) } {}
                    (name) " " b { (v.iter().sum::<f64>()) }
                }
            }
            (more)
        }
    };
    figure(id, title, svg, legend)
}

/// The y axis: a baseline, the top value and the middle.
fn axes(top: f64, show: impl Fn(f64) -> String) -> Markup {
    let b = H - BOTTOM;
    html! {
        line x1=(LEFT) y1=(b) x2=(W) y2=(b) class="axis" {}
        @for f in [0.5, 1.0] {
            @let y = H - BOTTOM - f * (H - BOTTOM - 4.0);
            line x1=(LEFT) y1=(f1(y)) x2=(W) y2=(f1(y)) class="grid" {}
            text x="2" y=(f1(y + 4.0)) class="tick" { (show(top * f)) }
        }
    }
}

fn figure(id: &str, title: &str, svg: Markup, under: Markup) -> Markup {
    html! {
        figure.chart.wide id=(id) {
            figcaption { (title) }
            svg viewBox={ "0 0 " (W) " " (H) } role="img" aria-label=(title) preserveAspectRatio="none" { (svg) }
            (under)
        }
    }
}

/// The goal's spend over time (finished attempts, by when they finished)
/// against its budget: a step line and, when there is one, the budget's
/// dashed line.
pub(crate) fn spend(
    id: &str,
    points: &[(u64, f64)],
    now: u64,
    spent_now: f64,
    budget: f64,
    marks: &[Mark],
) -> Markup {
    let start = points.first().map_or(now, |p| p.0);
    let span = (now.saturating_sub(start)).max(1) as f64;
    let top = spent_now
        .max(budget)
        .max(points.last().map_or(0.0, |p| p.1))
        .max(0.01)
        * 1.1;
    let x = |t: u64| LEFT + (t.saturating_sub(start)) as f64 / span * (W - LEFT - 4.0);
    let y = |v: f64| H - BOTTOM - v / top * (H - BOTTOM - 4.0);
    let mut path = format!("M{:.1},{:.1}", x(start), y(0.0));
    for (t, v) in points {
        path.push_str(&format!(" H{:.1} V{:.1}", x(*t), y(*v)));
    }
    path.push_str(&format!(" H{:.1} V{:.1}", x(now), y(spent_now)));
    let (lines, marked) = marks_drawn(marks, |t| (t >= start && t <= now).then(|| x(t)));
    let svg = html! {
        (axes(top, |v| if top >= 1.0 { format!("${v:.2}") } else { format!("${v:.4}") }))
        path d=(path) fill="none" stroke="#3182ce" stroke-width="2" class="spend" {}
        @if budget > 0.0 {
            line x1=(LEFT) y1=(f1(y(budget))) x2=(W) y2=(f1(y(budget))) class="budget"
                stroke="#e53e3e" stroke-dasharray="6 4" {}
        }
        (lines)
    };
    let under = html! {
        p.legend {
            "spent " b #chart-spent { (format!("${spent_now:.2}")) }
            @if budget > 0.0 {
                " of a " b { (format!("${budget:.2}")) } (format!(" budget ({:.0}%)", 100.0 * spent_now / budget))
            } @else {
                " (no budget)"
            }
        }
        @if !marked.0.is_empty() { ul.legend { (marked) } }
    };
    figure(id, "Goal spend against its budget", svg, under)
}

/// The interval a chart of `span` ms is cut into: the smallest of a
/// minute, 5, 15 minutes, an hour, 6 hours, a day that makes at most 24.
pub(crate) fn interval(span: u64) -> u64 {
    const M: u64 = 60_000;
    [M, 5 * M, 15 * M, 60 * M, 360 * M, 1440 * M]
        .into_iter()
        .find(|i| span / i < 24)
        .unwrap_or(1440 * M)
}

fn interval_name(ms: u64) -> String {
    match ms / 60_000 {
        m if m >= 60 => format!("{} h", m / 60),
        m => format!("{m} min"),
    }
}

/// Clock time of `ms` (UTC), as the page's other ages are relative.
fn hhmm(ms: u64) -> String {
    let m = ms / 60_000;
    format!("{:02}:{:02}", (m / 60) % 24, m % 60)
}

pub(crate) async fn charts(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Charts", "/charts", &q);
    let n = c.clock.now_ms();
    let (stats, status, tasks, audit) = tokio::join!(
        c.call(&xo_proto::control::SupervisorStats {}),
        c.call(&GetStatus {}),
        crate::api::all_tasks(&c, None),
        c.call(&xo_proto::queue::AuditTail {
            project: None,
            lines: Some(MARKED_AUDIT_LINES),
        })
    );
    let marks = marks_of(
        audit.as_deref().unwrap_or_default(),
        stats
            .as_ref()
            .map(|s| &s.steering_minutes[..])
            .unwrap_or_default(),
    );
    let settings_marks: Vec<Mark> = marks
        .iter()
        .filter(|m| m.kind == MarkKind::Settings)
        .cloned()
        .collect();
    let queue_charts = match (&status, &tasks) {
        (Ok(status), Ok(tasks)) => queue_charts(status, tasks, n, &marks),
        (Err(e), _) | (_, Err(e)) => html! { p.flash.error { "Queue: " (e.message) } },
    };
    let body = html! {
        p.summary {
            "From what XO keeps: the supervisor's steering of the last hour, the queue's tasks and goal. The same series are on "
            a href="/metrics" { code { "/metrics" } } " for Prometheus."
        }
        div.charts-grid {
            // Steering per minute, by kind, the last hour.
            @match &stats {
                Ok(s) => (steering_chart(s, n, &settings_marks)),
                Err(e) => p.flash.error { "Steering: " (e.message) },
            }
            (queue_charts)
        }
    };
    ok_page(&f, body)
}

/// The queue's charts: the goal's spend, tasks completed per interval,
/// and how long completed tasks took.
fn queue_charts(
    status: &xo_proto::queue::QueueStatus,
    tasks: &[TaskRecord],
    n: u64,
    marks: &[Mark],
) -> Markup {
    // Spend: each finished task's cost at the time it finished.
    let mut done: Vec<&TaskRecord> = tasks
        .iter()
        .filter(|t| {
            matches!(
                t.state,
                TaskState::Completed | TaskState::Failed | TaskState::Cancelled
            ) && t.spent.cost_usd > 0.0
        })
        .collect();
    done.sort_by_key(|t| t.updated_at);
    let mut sum = 0.0;
    let points: Vec<(u64, f64)> = done
        .iter()
        .map(|t| {
            sum += t.spent.cost_usd;
            (t.updated_at, sum)
        })
        .collect();
    // Throughput and duration: completed tasks.
    let completed: Vec<&TaskRecord> = tasks
        .iter()
        .filter(|t| t.state == TaskState::Completed)
        .collect();
    let first = completed.iter().map(|t| t.updated_at).min().unwrap_or(n);
    let step = interval(n.saturating_sub(first));
    let start = (n - n % step).saturating_sub(23 * step);
    let slots: Vec<u64> = (0..24).map(|i| start + i * step).collect();
    let per: Vec<f64> = slots
        .iter()
        .map(|s| {
            completed
                .iter()
                .filter(|t| t.updated_at >= *s && t.updated_at < s + step)
                .count() as f64
        })
        .collect();
    let mut secs: Vec<f64> = completed
        .iter()
        .map(|t| t.spent.wall_ms as f64 / 1000.0)
        .collect();
    secs.sort_by(f64::total_cmp);
    let buckets = crate::metrics::TASK_DURATION_BUCKETS;
    let mut counts = vec![0.0; buckets.len() + 1];
    for s in &secs {
        let i = buckets.iter().position(|b| s <= b).unwrap_or(buckets.len());
        counts[i] += 1.0;
    }
    let mut labels: Vec<String> = buckets
        .iter()
        .map(|b| format!("≤{}", human_ms((b * 1000.0) as u64)))
        .collect();
    labels.push("more".into());
    let pct = |p: f64| {
        secs.get(((secs.len() as f64 - 1.0) * p).round() as usize)
            .map(|s| human_ms((s * 1000.0) as u64))
            .unwrap_or_else(|| "—".into())
    };
    html! {
        (spend("chart-spend", &points, n, status.spent_usd, status.goal.budget_usd, marks))
        (bars_marked(
            "chart-throughput",
            &format!("Tasks completed per {} (UTC)", interval_name(step)),
            &slots.iter().map(|t| hhmm(*t)).collect::<Vec<_>>(),
            &[("completed".to_string(), per)],
            Some((&slots, step, marks)),
        ))
        (bars(
            "chart-duration",
            &format!(
                "How long completed tasks took (all attempts): p50 {}, p90 {}, {} tasks",
                pct(0.5),
                pct(0.9),
                secs.len()
            ),
            &labels,
            &[("tasks".to_string(), counts)],
        ))
    }
}

/// Steering per minute by kind over the last hour, settings changes marked.
fn steering_chart(s: &xo_proto::control::StatsReply, n: u64, settings_marks: &[Mark]) -> Markup {
    let first = (n - n % 60_000).saturating_sub(59 * 60_000);
    let slots: Vec<u64> = (0..60).map(|i| first + i * 60_000).collect();
    let mut kinds: Vec<String> = s
        .steering_minutes
        .iter()
        .flat_map(|m| m.by_kind.keys().cloned())
        .collect();
    kinds.sort();
    kinds.dedup();
    let series: Vec<(String, Vec<f64>)> = kinds
        .iter()
        .map(|k| {
            let v = slots
                .iter()
                .map(|slot| {
                    s.steering_minutes
                        .iter()
                        .find(|m| m.minute == *slot)
                        .and_then(|m| m.by_kind.get(k))
                        .copied()
                        .unwrap_or(0) as f64
                })
                .collect();
            (k.clone(), v)
        })
        .collect();
    let labels: Vec<String> = slots.iter().map(|t| hhmm(*t)).collect();
    html! {
        (bars_marked(
            "chart-steering",
            "Steering per minute by kind, the last hour (UTC)",
            &labels,
            &series,
            Some((&slots, 60_000, settings_marks)),
        ))
        @if kinds.is_empty() { p.empty { "No steering in the last hour." } }
    }
}

/// The audit lines read for settings changes to mark.
const MARKED_AUDIT_LINES: usize = 2000;

/// What the charts mark: each settings change in the audit (its version
/// and who), and each minute the supervisor steered (how many, by kind).
pub(crate) fn marks_of(
    audit: &[xo_proto::queue::AuditEvent],
    minutes: &[xo_proto::control::SteeringMinute],
) -> Vec<Mark> {
    let mut marks: Vec<Mark> = audit
        .iter()
        .filter(|e| e.event == xo_proto::queue::EventName::SettingsChanged)
        .map(|e| {
            let a = &e.state_after;
            Mark {
                at: e.at,
                kind: MarkKind::Settings,
                label: format!(
                    "settings version {} by {}",
                    a["version"],
                    a["by"].as_str().unwrap_or("someone")
                ),
            }
        })
        .collect();
    marks.extend(minutes.iter().filter(|m| !m.by_kind.is_empty()).map(|m| {
        let kinds: Vec<String> = m.by_kind.iter().map(|(k, n)| format!("{n} {k}")).collect();
        Mark {
            at: m.minute,
            kind: MarkKind::Steering,
            label: format!("steering: {}", kinds.join(", ")),
        }
    }));
    marks.sort_by_key(|m| m.at);
    marks
}
