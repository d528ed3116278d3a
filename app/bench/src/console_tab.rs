//! `xo bench console`, a tab's work: what one open fleet page costs the
//! browser and the console while a fleet reports, in requests and bytes
//! per second, counted by the console itself (`xo_console_requests_total`,
//! `xo_console_response_bytes_total`, `xo_console_live_bytes_total`).
//!
//! Two tabs are measured one after the other under the same fleet:
//!
//! - this console's fleet page in a real headless Chromium (its script
//!   takes the `rows` batches: no request per report);
//! - the previous script's protocol, replayed over HTTP by the bench: the
//!   whole unfiltered stream, and one `/ui/units/UNIT/row` fetch per unit
//!   that reported, at most one per unit every 500 ms, plus the header's
//!   count every 10 s (what `assets/console.js` did up to 4393d8e).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use xo_bus::{Bus, typed};
use xo_console::ConsoleView;
use xo_proto::{Format, SaluteReport, Subjects};

/// What the console served in a window.
#[derive(Debug, Clone, Copy, Default)]
struct Served {
    requests: u64,
    answer_bytes: u64,
    live_bytes: u64,
}

impl Served {
    fn now(c: &ConsoleView) -> Self {
        let s = &c.console.hub.seen;
        Self {
            requests: s.requests.load(Ordering::Relaxed),
            answer_bytes: s.response_bytes.load(Ordering::Relaxed),
            live_bytes: s.live_bytes.load(Ordering::Relaxed),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            requests: self.requests - before.requests,
            answer_bytes: self.answer_bytes - before.answer_bytes,
            live_bytes: self.live_bytes - before.live_bytes,
        }
    }
}

/// Publishes one report of each of `units` every second until `stop`.
fn fleet(
    client: Bus,
    subjects: Subjects,
    units: u64,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        // A hundredth of the fleet every 10 ms: each unit once a second.
        let step = units.div_ceil(100).max(1);
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let (mut next, mut seq, mut sent) = (0u64, 1u64, 0u64);
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            for _ in 0..step {
                let unit = format!("tab-{next:05}");
                let mut r = SaluteReport::new(&unit, "coder", seq, seq);
                r.activity.turns_since_progress = (seq % 7) as u32;
                if typed::publish(&client, &subjects.salute(&unit), &r, Format::Msgpack)
                    .await
                    .is_ok()
                {
                    sent += 1;
                }
                next += 1;
                if next == units {
                    next = 0;
                    seq += 1;
                }
            }
        }
        sent
    })
}

/// The previous script's protocol, replayed until `stop`.
async fn replay(console: ConsoleView, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let token = console.console.auth.token().to_string();
    let base = console.url.clone();
    let get = move |path: String| {
        let http = http.clone();
        let token = token.clone();
        let url = format!("{base}{path}");
        async move {
            if let Ok(r) = http.get(url).bearer_auth(token).send().await {
                let _ = r.bytes().await;
            }
        }
    };
    get("/".into()).await;
    get("/api/v1/needs".into()).await;
    let mut stream = reqwest::Client::new()
        .get(format!("{}/api/v1/events", console.url))
        .bearer_auth(console.console.auth.token())
        .send()
        .await?;
    let pending: Arc<std::sync::Mutex<HashSet<String>>> = Arc::default();
    let mut needs = tokio::time::interval(Duration::from_secs(10));
    needs.tick().await;
    let steer_due = Arc::new(AtomicBool::new(false));
    let mut buf = String::new();
    while !stop.load(Ordering::Relaxed) {
        let chunk = tokio::select! {
            c = stream.chunk() => c?,
            _ = needs.tick() => { tokio::spawn(get("/api/v1/needs".into())); continue; }
            _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
        };
        let Some(chunk) = chunk else { break };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            if frame.starts_with("event: steer") {
                // A steering: the header's count again within 2 s.
                if !steer_due.swap(true, Ordering::Relaxed) {
                    let (due, get) = (steer_due.clone(), get.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        due.store(false, Ordering::Relaxed);
                        get("/api/v1/needs".into()).await;
                    });
                }
                continue;
            }
            if !frame.starts_with("event: salute") {
                continue;
            }
            let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
                continue;
            };
            let Some(unit) = v.pointer("/unit/unit").and_then(|u| u.as_str()) else {
                continue;
            };
            let fresh = pending
                .lock()
                .map(|mut p| p.insert(unit.to_string()))
                .unwrap_or(false);
            if fresh {
                let (pending, unit, get) = (pending.clone(), unit.to_string(), get.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    if let Ok(mut p) = pending.lock() {
                        p.remove(&unit);
                    }
                    get(format!("/ui/units/{unit}/row")).await;
                });
            }
        }
    }
    Ok(())
}

/// Waits until the console has no live stream open beyond `baseline`.
async fn streams_down_to(c: &ConsoleView, baseline: usize) {
    for _ in 0..200 {
        if c.console.hub.listeners() <= baseline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn line(name: &str, s: Served, secs: f64, reports: u64) {
    let per_s = |n: u64| n as f64 / secs;
    println!(
        "    {name:<38} {:>8.1} requests/s {:>10.1} KB/s answers {:>10.1} KB/s live  ({:.4} requests, {:.0} bytes a report)",
        per_s(s.requests),
        per_s(s.answer_bytes) / 1024.0,
        per_s(s.live_bytes) / 1024.0,
        s.requests as f64 / reports.max(1) as f64,
        (s.answer_bytes + s.live_bytes) as f64 / reports.max(1) as f64,
    );
}

/// A tab's work with `units` reporting once a second, `secs` seconds a tab.
pub async fn run(
    console: &ConsoleView,
    client: &Bus,
    subjects: &Subjects,
    units: u64,
    secs: u64,
) -> anyhow::Result<()> {
    println!("  a tab's work, {units} units reporting each second, {secs} s a tab:");
    let (b, mut driver) = match xo_tests::browser::start().await {
        Ok(b) => b,
        Err(e) => {
            println!("    not measured: {e}");
            return Ok(());
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = fleet(client.clone(), subjects.clone(), units, stop.clone());
    // Every unit known before the first window.
    let asker = xo_bus::Client::new(client.clone(), subjects.clone());
    for _ in 0..600 {
        let n = asker
            .all_units()
            .await
            .map(|l| l.iter().filter(|u| u.unit.starts_with("tab-")).count())
            .unwrap_or(0);
        if n as u64 >= units {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let baseline = console.console.hub.listeners();
    let window = Duration::from_secs(secs);
    let seen = |c: &ConsoleView| c.console.hub.seen.reports.load(Ordering::Relaxed);

    // This console's fleet page, in Chromium.
    b.goto(&console.login_url()).await?;
    for _ in 0..400 {
        let live = b
            .execute(
                "const l = document.getElementById('live'); return l ? l.textContent : '';",
                vec![],
            )
            .await?;
        if live == "live" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (before, r0, t0) = (Served::now(console), seen(console), Instant::now());
    tokio::time::sleep(window).await;
    let page = Served::now(console).since(before);
    let (page_reports, page_secs) = (seen(console) - r0, t0.elapsed().as_secs_f64());
    let rows = b
        .execute(
            "return document.querySelectorAll('#units tbody tr').length;",
            vec![],
        )
        .await?;
    b.goto("about:blank").await?;
    streams_down_to(console, baseline).await;

    // The previous script's protocol, replayed.
    let replay_stop = Arc::new(AtomicBool::new(false));
    let (before, r0, t0) = (Served::now(console), seen(console), Instant::now());
    let replayer = tokio::spawn(replay(console.clone(), replay_stop.clone()));
    tokio::time::sleep(window).await;
    replay_stop.store(true, Ordering::Relaxed);
    let old = Served::now(console).since(before);
    let (old_reports, old_secs) = (seen(console) - r0, t0.elapsed().as_secs_f64());
    let replayed = replayer.await;
    stop.store(true, Ordering::Relaxed);
    let sent = publisher.await.unwrap_or(0);
    let _ = b.close().await;
    let _ = driver.kill();
    let _ = driver.wait();
    if let Ok(Err(e)) = replayed {
        println!("    the replay stopped early: {e}");
    }
    line(
        "fleet page (Chromium, rows batches):",
        page,
        page_secs,
        page_reports,
    );
    line("previous script, replayed:", old, old_secs, old_reports);
    let ratio = |new: f64, old: f64| if old > 0.0 { new / old } else { 0.0 };
    println!(
        "    the page / the previous script: {:.3}× the requests, {:.3}× the bytes ({} reports published, {} rows on the page)",
        ratio(page.requests as f64, old.requests as f64),
        ratio(
            (page.answer_bytes + page.live_bytes) as f64,
            (old.answer_bytes + old.live_bytes) as f64
        ),
        sent,
        rows
    );
    Ok(())
}
