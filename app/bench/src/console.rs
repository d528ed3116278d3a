//! `xo bench console`: the console's live feed and pages under a fleet.
//!
//! - SSE fan-out: SALUTE reports published at a fixed rate reach every one
//!   of N connected `/api/v1/events` clients; the p99 delivery latency is
//!   set beside the p99 of a raw bus subscription to the same subject,
//!   measured in the same run (target: ≤ 2×).
//! - Pages: with U units known to the supervisor, the fleet page and the
//!   API's unit list are fetched repeatedly (targets: p50 under 100 ms and
//!   50 ms), beside the raw `units` control call they are built from.
//! - A tab's work: one open fleet page in headless Chromium while a fleet
//!   reports each second, in requests and bytes a second, beside the
//!   previous script's protocol replayed ([`super::console_tab`]).

use crate::fabric::{ConsoleMode, Fabric, Plan};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use xo_bus::{Bus, NatsBus, NatsStore, Store, typed};
use xo_proto::{Format, SaluteReport};
use xo_runtime::XoConfig;

use super::util::{pct, start_nats, us, verdict};

#[derive(Debug, clap::Args)]
pub struct ConsoleArgs {
    /// Connected SSE clients.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Reports published per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Seconds of publishing.
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Units known to the supervisor for the page figures.
    #[arg(long, default_value_t = 10_000)]
    units: u64,
    /// Fetches of each page.
    #[arg(long, default_value_t = 30)]
    fetches: usize,
    /// Units reporting once a second while a tab's work is measured.
    #[arg(long, default_value_t = 1_000)]
    tab_units: u64,
    /// Seconds each tab is measured (0: not measured; needs Chromium).
    #[arg(long, default_value_t = 20)]
    tab_secs: u64,
    /// The nats-server binary to start.
    #[arg(long, default_value = "nats-server")]
    nats_server: String,
}

/// The marker a report carries: nanoseconds since the bench began.
fn marked(seq: u64, t0: Instant) -> SaluteReport {
    let unit = format!("sse-{}", seq % 10);
    let mut r = SaluteReport::new(&unit, "coder", seq, seq);
    r.activity.summary = Some(format!("t={}", t0.elapsed().as_nanos()));
    r
}

fn latency_of(line: &str, t0: Instant) -> Option<Duration> {
    let at = line.find("t=")?;
    let digits: String = line[at + 2..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let sent = Duration::from_nanos(digits.parse().ok()?);
    Some(t0.elapsed().saturating_sub(sent))
}

/// One SSE client: raw HTTP/1.1 on a socket, latencies of `salute` events.
async fn sse_client(
    addr: std::net::SocketAddr,
    token: String,
    t0: Instant,
    want: usize,
    ready: Arc<tokio::sync::Barrier>,
) -> anyhow::Result<Vec<Duration>> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "GET /api/v1/events?only=salute HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    // The status: a refused stream (a bound of the console) is said.
    r.read_line(&mut line).await?;
    if !line.contains(" 200 ") {
        anyhow::bail!("the console answered the event stream with {}", line.trim());
    }
    // Headers.
    loop {
        line.clear();
        r.read_line(&mut line).await?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    ready.wait().await;
    let mut out = Vec::with_capacity(want);
    while out.len() < want {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            break;
        }
        if line.starts_with("data:")
            && let Some(l) = latency_of(&line, t0)
        {
            out.push(l);
        }
    }
    Ok(out)
}

pub async fn run(cfg: &XoConfig, a: ConsoleArgs) -> anyhow::Result<ExitCode> {
    let server = start_nats(&a.nats_server)?;
    let dir = super::util::tempfile_dir::Dir::new("console")?;
    let mut cfg = cfg.clone();
    cfg.state.dir = dir.0.clone();
    cfg.console.listen = "127.0.0.1:0".into();
    // Every client of the bench is on loopback: the bounds per client and
    // on streams make room for them (the browser's tab and the replay too).
    cfg.console.max_per_client = cfg.console.max_per_client.max(a.clients + 8);
    cfg.console.max_event_streams = cfg.console.max_event_streams.max(a.clients + 8);
    cfg.console.max_connections = cfg.console.max_connections.max(2 * a.clients + 16);
    cfg.supervisor.persist_interval_ms = 60_000;
    let connect = |name: &str| {
        let url = server.url().to_string();
        let name = name.to_string();
        async move {
            let opts = xo_bus::nats::ConnectOptions {
                name,
                ..Default::default()
            };
            NatsBus::connect(&url, opts).await.map(Bus::Nats)
        }
    };
    let sbus = connect("xo-supervisor").await?;
    let Bus::Nats(nb) = &sbus else { unreachable!() };
    let store = Store::Nats(NatsStore::new(nb.client().clone(), &cfg.org.prefix));
    let sup = Fabric::start_with(
        &cfg,
        Plan {
            supervisor: true,
            ..Plan::default()
        },
        sbus,
        Some(store),
    )
    .await?;
    let front = Fabric::start_with(
        &cfg,
        Plan {
            console: ConsoleMode::Required,
            ..Plan::default()
        },
        connect("xo-console").await?,
        None,
    )
    .await?;
    let console = front
        .console()
        .context("the console did not start")?
        .clone();
    let client = connect("bench").await?;
    let subjects = cfg.subjects();
    println!(
        "xo bench console: {} SSE clients, {} reports/s for {} s; pages with {} units",
        a.clients, a.rate, a.secs, a.units
    );

    // SSE fan-out beside a raw bus subscription.
    let total = (a.rate * a.secs) as usize;
    let t0 = Instant::now();
    let ready = Arc::new(tokio::sync::Barrier::new(2 * a.clients + 2));
    let mut clients = Vec::new();
    for _ in 0..a.clients {
        clients.push(tokio::spawn(sse_client(
            console.addr,
            console.console.auth.token().to_string(),
            t0,
            total,
            ready.clone(),
        )));
    }
    // Baselines: one raw subscriber, and as many raw subscribers (each on a
    // connection of its own) as there are SSE clients: the same fan-out
    // done by the bus alone.
    let mut raw_tasks = Vec::new();
    for i in 0..=a.clients {
        let conn = if i == 0 {
            client.clone()
        } else {
            connect("bench-raw").await?
        };
        let mut raw = conn.subscribe(&subjects.salute_all()).await?;
        conn.flush().await?;
        let raw_ready = ready.clone();
        raw_tasks.push(tokio::spawn(async move {
            let _conn = conn;
            raw_ready.wait().await;
            let mut out = Vec::with_capacity(total);
            while out.len() < total {
                let Some(m) = raw.next().await else { break };
                if let Ok(r) = typed::decode::<SaluteReport>(&m, usize::MAX)
                    && let Some(s) = r.activity.summary.as_deref()
                    && let Some(l) = latency_of(s, t0)
                {
                    out.push(l);
                }
            }
            out
        }));
    }
    ready.wait().await;
    let period = Duration::from_nanos(1_000_000_000 / a.rate.max(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for seq in 1..=total as u64 {
        tick.tick().await;
        let r = marked(seq, t0);
        typed::publish(&client, &subjects.salute(&r.unit.unit), &r, Format::Msgpack).await?;
    }
    client.flush().await?;
    let wait = Duration::from_secs(a.secs + 30);
    let mut raw_lat = Vec::new();
    let mut fan_lat = Vec::new();
    for (i, t) in raw_tasks.into_iter().enumerate() {
        let v = tokio::time::timeout(wait, t)
            .await
            .context("raw subscriber")??;
        if i == 0 {
            raw_lat = v
        } else {
            fan_lat.extend(v)
        }
    }
    fan_lat.sort();
    let mut sse_lat = Vec::new();
    let mut short = 0usize;
    let mut refused: Option<String> = None;
    for c in clients {
        match tokio::time::timeout(wait, c).await {
            Ok(Ok(Ok(v))) => {
                short += total - v.len().min(total);
                sse_lat.extend(v);
            }
            Ok(Ok(Err(e))) => {
                refused.get_or_insert_with(|| e.to_string());
                short += total;
            }
            _ => short += total,
        }
    }
    if let Some(why) = refused {
        println!("  some SSE clients got nothing: {why}");
    }
    raw_lat.sort();
    sse_lat.sort();
    let (rp99, sp99) = (pct(&raw_lat, 0.99), pct(&sse_lat, 0.99));
    let ratio = us(sp99) / us(rp99).max(1.0);
    println!(
        "  raw bus subscription: {} events, p50 {:.0} µs, p99 {:.0} µs",
        raw_lat.len(),
        us(pct(&raw_lat, 0.5)),
        us(rp99)
    );
    println!(
        "  SSE, {} clients:       {} events ({} missing), p50 {:.0} µs, p99 {:.0} µs",
        a.clients,
        sse_lat.len(),
        short,
        us(pct(&sse_lat, 0.5)),
        us(sp99)
    );
    let fp99 = pct(&fan_lat, 0.99);
    println!(
        "  raw bus, {} subscribers: {} events, p50 {:.0} µs, p99 {:.0} µs",
        a.clients,
        fan_lat.len(),
        us(pct(&fan_lat, 0.5)),
        us(fp99)
    );
    println!(
        "  SSE p99 / one raw subscriber's p99: {ratio:.2} (target ≤ 2) {}",
        verdict(ratio <= 2.0 && short == 0)
    );
    let fan_ratio = us(sp99) / us(fp99).max(1.0);
    println!(
        "  SSE p99 / raw p99 at the same fan-out: {fan_ratio:.2} (≤ 2) {}",
        verdict(fan_ratio <= 2.0 && short == 0)
    );

    // Pages with many units.
    for i in 0..a.units {
        let r = SaluteReport::new(
            format!("u-{i}"),
            if i % 3 == 0 { "architect" } else { "coder" },
            1,
            1,
        );
        typed::publish(&client, &subjects.salute(&r.unit.unit), &r, Format::Msgpack).await?;
    }
    client.flush().await?;
    let want = a.units as usize + 10;
    let mut known = 0;
    let asker = xo_bus::Client::new(client.clone(), subjects.clone());
    for _ in 0..600 {
        known = asker.all_units().await.map(|l| l.len()).unwrap_or(0);
        if known >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("  units known to the supervisor: {known}");
    let http = reqwest::Client::new();
    let mut figures = Vec::new();
    for (name, path) in [
        ("raw `units` calls", ""),
        ("API /api/v1/units", "/api/v1/units"),
        ("fleet page /", "/"),
    ] {
        let mut d = Vec::with_capacity(a.fetches);
        let mut bytes = 0usize;
        for _ in 0..a.fetches {
            let t = Instant::now();
            if path.is_empty() {
                let l = asker.all_units().await?;
                bytes = l.len();
            } else {
                let body = http
                    .get(format!("{}{path}", console.url))
                    .bearer_auth(console.console.auth.token())
                    .send()
                    .await?
                    .bytes()
                    .await?;
                bytes = body.len();
            }
            d.push(t.elapsed());
        }
        d.sort();
        figures.push((name, pct(&d, 0.5), pct(&d, 0.99), bytes));
    }
    let base = figures[0].1;
    for (name, p50, p99, bytes) in &figures {
        println!(
            "  {name:<20} p50 {:>7.1} ms  p99 {:>7.1} ms  ({:.2}× the raw call; {bytes} {})",
            us(*p50) / 1000.0,
            us(*p99) / 1000.0,
            us(*p50) / us(base).max(1.0),
            if name.starts_with("raw") {
                "units"
            } else {
                "bytes"
            }
        );
    }
    let api_ok = us(figures[1].1) / 1000.0 < 50.0;
    let page_ok = us(figures[2].1) / 1000.0 < 100.0;
    println!("  API unit list p50 under 50 ms {}", verdict(api_ok));
    println!("  fleet page p50 under 100 ms {}", verdict(page_ok));
    if a.tab_secs > 0 {
        super::console_tab::run(&console, &client, &subjects, a.tab_units, a.tab_secs).await?;
    }
    front.stop().await?;
    sup.stop().await?;
    drop(server);
    Ok(ExitCode::SUCCESS)
}
