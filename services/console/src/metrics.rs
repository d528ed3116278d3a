//! `/metrics` in the Prometheus text format (0.0.4), gathered from the
//! services' control APIs at scrape time plus the counters of the live
//! feed. A service that does not answer is `xo_service_up{service} 0` and
//! its metrics are left out (never reported as zero).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use xo_proto::control::SupervisorStats;
use xo_proto::knowledge::ListReviewRuns;
use xo_proto::queue::GetStatus;

use crate::Shared;

/// The upper bounds (seconds) of `xo_task_duration_seconds` and of the
/// Charts page's duration histogram.
pub const TASK_DURATION_BUCKETS: [f64; 10] = [
    1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0,
];

/// Writes one metric family's header.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escapes a label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counts a request and the bytes of its answer when their number is
/// known (`/metrics` and `/healthz`, the scrapes and probes, are not counted):
/// what `xo bench console` reads as a tab's work.
pub async fn count(
    State(c): State<Shared>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::body::HttpBody;
    let counted = !matches!(req.uri().path(), "/metrics" | "/healthz");
    let resp = next.run(req).await;
    if counted {
        let seen = &c.hub.seen;
        seen.requests.fetch_add(1, Ordering::Relaxed);
        if let Some(n) = resp.body().size_hint().exact() {
            seen.response_bytes.fetch_add(n, Ordering::Relaxed);
        }
    }
    resp
}

/// The whole exposition.
pub async fn render(c: &Shared) -> String {
    let (units, stats, status, runs, done) = tokio::join!(
        c.units(),
        c.call(&SupervisorStats {}),
        c.call(&GetStatus {}),
        c.call(&ListReviewRuns { last: None }),
        crate::api::all_tasks(c, Some(xo_proto::queue::TaskState::Completed)),
    );
    let mut out = String::with_capacity(4096);
    family(
        &mut out,
        "xo_build_info",
        "gauge",
        "The running build: 1, with its version.",
    );
    let _ = writeln!(
        out,
        "xo_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    family(
        &mut out,
        "xo_service_up",
        "gauge",
        "Whether a service answered this scrape.",
    );
    for (svc, up) in [
        ("supervisor", units.is_ok() && stats.is_ok()),
        ("queue", status.is_ok()),
        ("review", runs.is_ok()),
    ] {
        let _ = writeln!(out, "xo_service_up{{service=\"{svc}\"}} {}", u8::from(up));
    }
    if let Ok(units) = &units {
        family(&mut out, "xo_units", "gauge", "Units by assessed health.");
        for h in ["green", "amber", "red"] {
            let n = units
                .iter()
                .filter(|u| crate::html::health_name(u.health) == h)
                .count();
            let _ = writeln!(out, "xo_units{{health=\"{h}\"}} {n}");
        }
        family(
            &mut out,
            "xo_units_needs_you",
            "gauge",
            "Units that need a person, by reason.",
        );
        for reason in xo_proto::NeedsReason::ALL {
            let n = units
                .iter()
                .filter(|u| u.needs.as_ref().is_some_and(|x| x.reason == reason))
                .count();
            let _ = writeln!(out, "xo_units_needs_you{{reason=\"{reason}\"}} {n}");
        }
        family(
            &mut out,
            "xo_units_unreadable",
            "gauge",
            "Units whose sensor could not read some of their records (not steered on them).",
        );
        let unread: Vec<u64> = units
            .iter()
            .map(|u| u.unreadable)
            .filter(|n| *n > 0)
            .collect();
        let _ = writeln!(out, "xo_units_unreadable {}", unread.len());
        family(
            &mut out,
            "xo_unit_records_unreadable",
            "gauge",
            "Records the units' sensors could not read, summed over the units.",
        );
        let _ = writeln!(
            out,
            "xo_unit_records_unreadable {}",
            unread.iter().sum::<u64>()
        );
        // Per role: how many, the fullest context, what they spent.
        let mut roles: std::collections::BTreeMap<&str, (u64, f64, f64)> = Default::default();
        for u in units {
            let r = roles.entry(u.role.as_str()).or_default();
            r.0 += 1;
            r.1 = r.1.max(u.context_fill);
            r.2 += u.cost_usd;
        }
        for (name, help, pick) in [
            ("xo_role_units", "Units by role.", 0usize),
            (
                "xo_role_context_fill_max",
                "The fullest context window among a role's units (0..1).",
                1,
            ),
            (
                "xo_role_cost_usd",
                "USD the units of a role reported spending (their latest reports).",
                2,
            ),
        ] {
            family(&mut out, name, "gauge", help);
            for (role, (n, fill, cost)) in &roles {
                let v = match pick {
                    0 => *n as f64,
                    1 => *fill,
                    _ => *cost,
                };
                let _ = writeln!(out, "{name}{{role=\"{}\"}} {v}", label(role));
            }
        }
        for (name, help, n) in [
            (
                "xo_units_stale",
                "Units with no report or heartbeat within stale_after.",
                units.iter().filter(|u| u.stale).count(),
            ),
            (
                "xo_units_ended",
                "Units whose last report said their session ended.",
                units.iter().filter(|u| u.ended).count(),
            ),
        ] {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {n}");
        }
    }
    if let Ok(s) = &stats {
        for (name, help, v) in [
            (
                "xo_reports_received_total",
                "SALUTE reports received by the supervisor.",
                s.reports,
            ),
            (
                "xo_reports_evaluated_total",
                "Reports run through the radio check.",
                s.evaluated,
            ),
            (
                "xo_reports_duplicate_total",
                "Reports ignored as duplicates or out of order.",
                s.duplicates,
            ),
            (
                "xo_reports_gap_total",
                "Reports missing from units' sequence numbers: lost before the supervisor got them.",
                s.missed,
            ),
            (
                "xo_reports_dropped_total",
                "Reports the supervisor's NATS connection dropped because it read too slowly (a lower bound).",
                s.dropped,
            ),
            (
                "xo_reports_shed_total",
                "Reports replaced, while they waited for the supervisor's watchers past supervisor.inbox_high, by a newer report of their unit (shed on purpose: each unit judged on its latest).",
                s.shed,
            ),
            (
                "xo_dead_letters_total",
                "Messages sent to the dead-letter subjects.",
                s.dead_letters,
            ),
            (
                "xo_input_panics_total",
                "Inputs (messages, report files) whose handling panicked in the supervisor's process: each skipped, the input went on.",
                s.panics,
            ),
            ("xo_heartbeats_total", "Heartbeats received.", s.heartbeats),
        ] {
            family(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {v}");
        }
        family(
            &mut out,
            "xo_unit_state_persist_seconds",
            "gauge",
            "How often each unit's state is written to the store (supervisor.persist_interval_ms, longer past supervisor.persist_writes_per_s): what a crash can lose.",
        );
        let _ = writeln!(
            out,
            "xo_unit_state_persist_seconds {}",
            s.persist_every_ms as f64 / 1000.0
        );
        // One counter for steering: the supervisor's, by anomaly kind.
        family(
            &mut out,
            "xo_steering_sent_total",
            "counter",
            "Steering messages the supervisor sent, by anomaly kind.",
        );
        for (kind, n) in &s.steering_by_kind {
            let _ = writeln!(
                out,
                "xo_steering_sent_total{{kind=\"{}\"}} {n}",
                label(kind)
            );
        }
    }
    {
        let seen = &c.hub.seen;
        for (name, help, v) in [
            (
                "xo_claims_total",
                "Tasks claimed (TASK_START) since the console started.",
                seen.claims.load(Ordering::Relaxed),
            ),
            (
                "xo_lease_expiries_total",
                "Leases that expired since the console started.",
                seen.lease_expiries.load(Ordering::Relaxed),
            ),
            (
                "xo_console_reports_seen_total",
                "SALUTE reports the console's live feed saw.",
                seen.reports.load(Ordering::Relaxed),
            ),
            (
                "xo_console_requests_total",
                "HTTP requests the console answered, but for /metrics and /healthz.",
                seen.requests.load(Ordering::Relaxed),
            ),
            (
                "xo_console_response_bytes_total",
                "Bytes of the answers to those requests whose size was known (pages, fragments, JSON; not the live streams).",
                seen.response_bytes.load(Ordering::Relaxed),
            ),
            (
                "xo_console_live_bytes_total",
                "Bytes written to live event streams (/api/v1/events), summed over the streams.",
                seen.live_bytes.load(Ordering::Relaxed),
            ),
            (
                "xo_console_row_batches_total",
                "`rows` events sent: the fleet page's changed rows, at most one a second.",
                seen.row_batches.load(Ordering::Relaxed),
            ),
            (
                "xo_socket_dropped_total",
                "Messages the local bus socket dropped for clients that read too slowly (in this process: xo up serves the socket).",
                xo_bus::socket::dropped(),
            ),
            (
                "xo_console_connections_refused_total",
                "Connections answered 503 at a bound (console.max_connections, console.max_per_client, the waiting connections).",
                c.conns.refused.load(Ordering::Relaxed),
            ),
            (
                "xo_console_connections_evicted_total",
                "Connections waiting for their first request closed to make room for a newer one.",
                c.conns.evicted.load(Ordering::Relaxed),
            ),
            (
                "xo_console_connections_timed_out_total",
                "Connections closed by console.header_timeout_ms or console.idle_timeout_ms.",
                c.conns.timed_out.load(Ordering::Relaxed),
            ),
            (
                "xo_console_event_streams_refused_total",
                "Live event streams answered 503 at console.max_event_streams.",
                c.hub.streams_refused.load(Ordering::Relaxed),
            ),
            (
                "xo_console_accept_errors_total",
                "Accepts that failed (out of file descriptors, ...).",
                c.conns.accept_errors.load(Ordering::Relaxed),
            ),
        ] {
            family(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {v}");
        }
        family(
            &mut out,
            "xo_console_connections_open",
            "gauge",
            "Connections with a parsed request open now (what console.max_connections bounds).",
        );
        let _ = writeln!(
            out,
            "xo_console_connections_open {}",
            c.conns.open.load(Ordering::Relaxed)
        );
    }
    if let Ok(st) = &status {
        family(&mut out, "xo_tasks", "gauge", "Tasks by state.");
        for (state, n) in &st.counts {
            let _ = writeln!(out, "xo_tasks{{state=\"{}\"}} {n}", label(state));
        }
        family(
            &mut out,
            "xo_queue_iteration",
            "gauge",
            "The queue's iteration counter.",
        );
        let _ = writeln!(out, "xo_queue_iteration {}", st.iteration);
        family(
            &mut out,
            "xo_queue_running",
            "gauge",
            "1 while the queue is RUNNING.",
        );
        let running = st.status == xo_proto::queue::RunStatus::Running;
        let _ = writeln!(out, "xo_queue_running {}", u8::from(running));
        for (name, help, v) in [
            (
                "xo_queue_stuck",
                "1 while pending work cannot be claimed (QUEUE_STUCK).",
                f64::from(u8::from(st.stuck.is_some())),
            ),
            (
                "xo_goal_spent_usd",
                "USD spent on the goal (every attempt of every task).",
                st.spent_usd,
            ),
            (
                "xo_goal_budget_usd",
                "The goal's budget in USD (0: none set).",
                st.goal.budget_usd,
            ),
        ] {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {v}");
        }
    }
    if let Ok(done) = &done {
        // Wall time of completed tasks, every attempt counted.
        family(
            &mut out,
            "xo_task_duration_seconds",
            "histogram",
            "Wall time of completed tasks (all their attempts).",
        );
        let secs: Vec<f64> = done
            .iter()
            .map(|t| t.spent.wall_ms as f64 / 1000.0)
            .collect();
        for b in TASK_DURATION_BUCKETS {
            let n = secs.iter().filter(|s| **s <= b).count();
            let _ = writeln!(out, "xo_task_duration_seconds_bucket{{le=\"{b}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "xo_task_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            secs.len()
        );
        let _ = writeln!(
            out,
            "xo_task_duration_seconds_sum {}",
            secs.iter().sum::<f64>()
        );
        let _ = writeln!(out, "xo_task_duration_seconds_count {}", secs.len());
    }
    if let Ok(runs) = &runs {
        family(
            &mut out,
            "xo_review_runs_total",
            "counter",
            "Review runs by reviewer and outcome.",
        );
        let mut by: std::collections::BTreeMap<(String, String), u64> = Default::default();
        let mut cost: std::collections::BTreeMap<String, f64> = Default::default();
        for r in runs {
            *by.entry((r.reviewer.clone(), r.outcome.to_string()))
                .or_default() += 1;
            *cost.entry(r.reviewer.clone()).or_default() += r.cost_usd;
        }
        for ((reviewer, outcome), n) in by {
            let _ = writeln!(
                out,
                "xo_review_runs_total{{reviewer=\"{}\",outcome=\"{}\"}} {n}",
                label(&reviewer),
                label(&outcome)
            );
        }
        family(
            &mut out,
            "xo_review_cost_usd_total",
            "counter",
            "USD spent by the review supervisors.",
        );
        for (reviewer, usd) in cost {
            let _ = writeln!(
                out,
                "xo_review_cost_usd_total{{reviewer=\"{}\"}} {usd}",
                label(&reviewer)
            );
        }
    }
    out
}

pub async fn handler(State(c): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&c).await,
    )
}
