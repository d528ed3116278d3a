//! `xo bench radio`: every figure next to a baseline measured in the same run.
//!
//! 1. detector: reports/s through `Radio::check` on one core (realistic
//!    20-action reports), next to MessagePack decoding of the same reports;
//! 2. ingest over NATS: reports/s evaluated by the supervisor divided by raw
//!    NATS pub/sub of the same payloads on as many subjects, both with the
//!    same flow control, in alternating rounds (medians);
//! 3. steering latency (report published → steering received) against raw
//!    NATS request/reply, p50 and p99;
//! 4. soak: N simulated units at 1 report/s for S seconds against a
//!    supervisor in its own process: its CPU, resident memory, the reports
//!    not checked and how they were counted (gaps, shed under load, the
//!    connection's drops).

use crate::fabric::{Fabric, Plan};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use xo_bus::{Bus, Headers, NatsBus, NatsStore, Store};
use xo_proto::codec::{self, CONTENT_TYPE, Format};
use xo_proto::control::SupervisorStats;
use xo_radio::sample;
use xo_runtime::XoConfig;
use xo_supervisor::SupervisorHandle;

use super::baseline::{BASELINE_ROUNDS, Unavoidable, cpu_per_report_line, unavoidable};
use super::flow::{paced, print_latency, raw_counter, reqreply_latency, steering_latency};
use super::util::{
    clock_ticks, max, median, min, pct, proc_cpu_ticks, proc_status_kib, start_nats, us, verdict,
};

#[derive(Debug, clap::Args)]
pub struct RadioArgs {
    /// Reports for the detector figure.
    #[arg(long, default_value_t = 500_000)]
    detector_reports: u64,
    /// Reports for the ingest figure.
    #[arg(long, default_value_t = 100_000)]
    ingest_reports: u64,
    /// Ingest rounds: each measures raw NATS, then a supervisor started for
    /// the round; the medians are reported (alternating keeps both on the
    /// same machine).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Ingest flow control: publish this many, wait until all arrived, repeat
    /// (the same for the raw baseline). Below the client's 65,536-message
    /// subscription buffer, so neither side can drop.
    #[arg(long, default_value_t = 10_000)]
    window: usize,
    /// Round trips for the latency figures.
    #[arg(long, default_value_t = 2_000)]
    latency_samples: usize,
    /// Simulated units in the soak.
    #[arg(long, default_value_t = 10_000)]
    soak_units: u64,
    /// Soak length in seconds (0 skips the soak).
    #[arg(long, default_value_t = 60)]
    soak_secs: u64,
    /// The soak supervisor's runtime threads (`state.runtime_threads`: 0
    /// one per core, 1 a single thread).
    #[arg(long, default_value_t = 0)]
    supervisor_threads: usize,
    /// The nats-server binary to start when no --nats URL is given.
    #[arg(long, default_value = "nats-server")]
    nats_server: String,
    /// Print the figures as one JSON object too.
    #[arg(long)]
    json: bool,
    /// Sharded supervision instead of the ingest, latency and soak figures:
    /// ingest with 1 and N supervisors beside raw NATS, and steering latency
    /// with N (`xo bench radio --supervisors 3`).
    #[arg(long)]
    supervisors: Option<usize>,
    /// With --supervisors: on a three-node NATS cluster of the bench's own
    /// (or the servers of nats.url / XO_NATS_URL, e.g. the compose
    /// cluster's, which carry the partition mapping).
    #[arg(long)]
    cluster: bool,
    /// With --supervisors: the partitions the units are spread over.
    #[arg(long, default_value_t = 12)]
    partitions: u32,
    /// With --supervisors N: the scaling soak instead (issue 43, item 4):
    /// one supervisor process carrying this many units, then N carrying N
    /// times as many, for --soak-secs each; CPU per report side by side.
    #[arg(long)]
    scale_units: Option<u64>,
}

pub async fn run(cfg: &XoConfig, args: RadioArgs) -> anyhow::Result<ExitCode> {
    let mut out = serde_json::Map::new();

    // 1. detector
    let units = 1000u64;
    let before = unavoidable(cfg, args.detector_reports, BASELINE_ROUNDS)?;
    let (check_rate, decode_rate) = (median(&before.check), median(&before.decode));
    let size = before.size;
    println!(
        "== detector (one core, {} realistic reports, {} bytes each encoded, {} steering decisions; medians of {BASELINE_ROUNDS} rounds, a fresh check each)",
        before.reports,
        size,
        before.steering.last().copied().unwrap_or_default()
    );
    println!(
        "   radio check        {check_rate:>12.0} reports/s   ({:.0}–{:.0})   target >= 1,000,000: {}",
        min(&before.check),
        max(&before.check),
        verdict(check_rate >= 1e6)
    );
    println!(
        "   baseline: decode   {decode_rate:>12.0} reports/s   ({:.0}–{:.0})   check/decode = {:.2}",
        min(&before.decode),
        max(&before.decode),
        check_rate / decode_rate
    );
    out.insert("detector_reports_per_s".into(), check_rate.into());
    out.insert("decode_reports_per_s".into(), decode_rate.into());
    if let (Some(supervisors), Some(units_each)) = (args.supervisors, args.scale_units) {
        let a = super::scaling::ScalingArgs {
            supervisors,
            units_each,
            secs: args.soak_secs,
            partitions: args.partitions,
            cluster: args.cluster,
            nats_server: args.nats_server.clone(),
        };
        return super::scaling::run(cfg, &a).await;
    }
    if args.scale_units.is_some() {
        bail!("--scale-units goes with --supervisors N");
    }
    if let Some(supervisors) = args.supervisors {
        let a = super::sharded::ShardedArgs {
            supervisors,
            cluster: args.cluster,
            partitions: args.partitions,
            reports: args.ingest_reports as usize,
            units,
            rounds: args.rounds,
            window: args.window.max(1),
            latency_samples: args.latency_samples,
            nats_server: args.nats_server.clone(),
        };
        let code = super::sharded::run(cfg, &a, &mut out).await?;
        if args.json {
            println!("{}", serde_json::Value::Object(out));
        }
        return Ok(code);
    }
    if args.cluster {
        bail!("--cluster goes with --supervisors N");
    }

    // NATS for the rest.
    let server = if cfg.nats.url.is_empty() {
        Some(start_nats(&args.nats_server)?)
    } else {
        None
    };
    let url = server
        .as_ref()
        .map_or(cfg.nats.url.clone(), |s| s.url().to_string());
    let connect = |name: &str| {
        let opts = crate::connect::nats_options(cfg, name, false);
        let url = url.clone();
        async move { NatsBus::connect(&url, opts).await }
    };

    // 2. ingest: raw pub/sub vs the supervisor, same payloads, same windows,
    // in alternating rounds so that both see the same machine.
    let n = args.ingest_reports as usize;
    let window = args.window.max(1);
    let rounds = args.rounds.max(1);
    // Round r: one warm-up report per unit (untimed), then its timed
    // reports, all with turns after round r-1's: the supervisor sees new
    // reports, never duplicates.
    let stride = (n as u64).div_ceil(units) + 1;
    let encode = |unit: u64, turn: u64| -> anyhow::Result<(String, Bytes)> {
        let r = sample::realistic(unit, turn);
        let b = codec::encode(&r, Format::Msgpack).map(Bytes::from)?;
        Ok((r.unit.unit, b))
    };
    let round_payloads = |round: u64| -> anyhow::Result<Vec<(String, Bytes)>> {
        (0..n as u64)
            .map(|i| encode(i % units, 2 + round * stride + i / units))
            .collect()
    };
    let warm_up = |round: u64| -> anyhow::Result<Vec<(String, Bytes)>> {
        (0..units).map(|u| encode(u, 1 + round * stride)).collect()
    };
    let mut msgpack = Headers::new();
    msgpack.insert(CONTENT_TYPE, codec::MSGPACK);

    let publisher = Bus::Nats(connect("bench-pub").await?);
    let raw_sub = Bus::Nats(connect("bench-sub").await?);
    let (got, counter) = raw_counter(&raw_sub).await?;
    // A supervisor of its own per round, started after the raw run, warmed
    // up, timed, and stopped (its state flushed) before the next raw run:
    // nothing of it runs while raw NATS is measured.
    let start_supervisor = |round: u64| {
        let connect = &connect;
        async move {
            let sup_bus = Bus::Nats(connect("bench-supervisor").await?);
            let Bus::Nats(nb) = &sup_bus else {
                unreachable!()
            };
            let store = Store::Nats(NatsStore::new(
                nb.client().clone(),
                &format!("{}bench{round}", cfg.org.prefix),
            ));
            let mut sup_cfg = cfg.clone();
            sup_cfg.supervisor.volume.clear();
            let plan = Plan {
                supervisor: true,
                ..Plan::default()
            };
            Fabric::start_with(&sup_cfg, plan, sup_bus, Some(store)).await
        }
    };
    let (mut raw_rates, mut sup_rates) = (Vec::new(), Vec::new());
    // The baseline carries the same traffic: one subject per unit, of the
    // same length as the unit's report subject (`bench.raw.<unit>` beside
    // `xo.salute.<unit>`), so the only difference is the supervisor's work.
    let subjects = cfg.subjects();
    let mut payloads = Vec::new();
    let mut duplicates = 0;
    let mut sup = None;
    for round in 0..rounds as u64 {
        payloads = round_payloads(round)?;
        raw_rates.push(
            paced(
                &publisher,
                &payloads,
                window,
                &msgpack,
                |unit| format!("bench.raw.{unit}"),
                || got.load(Ordering::Relaxed),
            )
            .await?,
        );
        let s = start_supervisor(round).await?;
        let ctx = s
            .get::<SupervisorHandle>()
            .context("the supervisor did not start")?
            .ctx
            .clone();
        let evaluated =
            || ctx.counters.evaluated.load() + ctx.counters.duplicates.load(Ordering::Relaxed);
        // Every unit's watcher spawned before the clock starts, as in a
        // supervisor that has been running.
        paced(
            &publisher,
            &warm_up(round)?,
            window,
            &msgpack,
            |unit| subjects.salute(unit),
            evaluated,
        )
        .await?;
        sup_rates.push(
            paced(
                &publisher,
                &payloads,
                window,
                &msgpack,
                |unit| subjects.salute(unit),
                evaluated,
            )
            .await?,
        );
        duplicates += ctx.counters.duplicates.load(Ordering::Relaxed);
        if round + 1 < rounds as u64 {
            s.stop().await?;
        } else {
            sup = Some(s);
        }
    }
    let sup = sup.context("no ingest round ran")?;
    counter.abort();
    let ratios: Vec<f64> = sup_rates
        .iter()
        .zip(&raw_rates)
        .map(|(s, r)| s / r)
        .collect();
    let (sup_rate, raw_rate, ratio) = (median(&sup_rates), median(&raw_rates), median(&ratios));
    println!(
        "== ingest over NATS ({n} reports of ~{size} bytes, {units} units, windows of {window}, {rounds} rounds alternating raw and supervisor; medians)"
    );
    println!(
        "   supervisor         {sup_rate:>12.0} reports/s evaluated ({duplicates} duplicates)"
    );
    println!("   baseline: raw NATS {raw_rate:>12.0} msgs/s pub/sub");
    println!(
        "   ratio              {ratio:>12.2}   target >= 0.5: {}   (rounds: {})",
        verdict(ratio >= 0.5),
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    out.insert("ingest_reports_per_s".into(), sup_rate.into());
    out.insert("raw_nats_msgs_per_s".into(), raw_rate.into());
    out.insert("ingest_ratio".into(), ratio.into());
    out.insert("ingest_round_ratios".into(), ratios.into());
    out.insert("ingest_round_supervisor".into(), sup_rates.into());
    out.insert("ingest_round_raw".into(), raw_rates.into());
    // The pump's reader alone, beside the client's subscriber.
    let opts = crate::connect::nats_options(cfg, "bench-reader", false);
    for (k, v) in super::reader::run(&url, opts, n, rounds).await? {
        out.insert(k, v);
    }

    // 3. latency: raw request/reply vs report → steering.
    let responder = Bus::Nats(connect("bench-echo").await?);
    let mut raw_lat =
        reqreply_latency(&publisher, &responder, &payloads[0].1, args.latency_samples).await?;
    let mut steer_lat = steering_latency(&publisher, &cfg.subjects(), args.latency_samples).await?;
    let p99_ratio = print_latency(
        &format!(
            "== steering latency ({} round trips each)",
            args.latency_samples
        ),
        &mut steer_lat,
        &mut raw_lat,
    );
    out.insert("steering_p99_ratio".into(), p99_ratio.into());
    out.insert("steering_p50_us".into(), us(pct(&steer_lat, 0.5)).into());
    out.insert("steering_p99_us".into(), us(pct(&steer_lat, 0.99)).into());
    out.insert("reqreply_p50_us".into(), us(pct(&raw_lat, 0.5)).into());
    out.insert("reqreply_p99_us".into(), us(pct(&raw_lat, 0.99)).into());
    sup.stop().await?;

    // 4. soak against a supervisor in its own process.
    if args.soak_secs > 0 {
        // A report's unavoidable work, measured above in this run and
        // again after the soak: the baseline of its CPU per report.
        let soak = soak(
            cfg,
            &url,
            &publisher,
            (args.soak_units, args.soak_secs, args.supervisor_threads),
            (args.detector_reports, &before),
        )
        .await?;
        for (k, v) in soak {
            out.insert(k, v);
        }
    }
    if args.json {
        println!("{}", serde_json::Value::Object(out));
    }
    Ok(ExitCode::SUCCESS)
}

async fn soak(
    cfg: &XoConfig,
    url: &str,
    publisher: &Bus,
    (units, secs, threads): (u64, u64, usize),
    (reports, before): (u64, &Unavoidable),
) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let exe = crate::util::xo_exe()?;
    let prefix = format!("{}soak", cfg.org.prefix);
    let mut child = Command::new(exe)
        .args(["serve", "supervisor", "--nats", url, "--prefix", &prefix])
        .env("RUST_LOG", "warn")
        .env("XO__STATE__RUNTIME_THREADS", threads.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let pid = child.id();
    let subjects = xo_proto::Subjects::new(&prefix);
    let asker = xo_bus::Client::new(publisher.clone(), subjects.clone())
        .with_timeout(Duration::from_secs(10));
    let stats = || asker.call(&SupervisorStats {});
    let begun = Instant::now();
    while stats().await.is_err() {
        if begun.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            bail!("the soak supervisor did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The supervisor with no unit yet: what the units add is measured from here.
    let rss0 = proc_status_kib(pid, "VmRSS:")?;
    let ticks = clock_ticks() as f64;
    let cpu0 = proc_cpu_ticks(pid)?;
    let t0 = Instant::now();
    // Steering under the load: a probe unit's round trips throughout.
    let (stop_probe, probe_stop) = tokio::sync::watch::channel(false);
    let probe = tokio::spawn(super::flow::steering_probe(
        publisher.clone(),
        subjects.clone(),
        probe_stop,
    ));
    let at_start = Baseline {
        pid,
        rss0,
        cpu0,
        ticks,
    };
    let Load {
        mut published,
        peak_rss,
        minutes,
    } = load(publisher, &subjects, (units, secs), &at_start, t0).await?;
    publisher.flush().await?;
    let wall = t0.elapsed().as_secs_f64();
    let _ = stop_probe.send(true);
    let (mut steer, steer_missed, probes) = probe.await??;
    steer.sort();
    // The probe's reports are the supervisor's work too.
    published += probes;
    let cpu = (proc_cpu_ticks(pid)? - cpu0) as f64 / ticks;
    let (last, settled_cpu, settled_in) = settle(pid, published, stats).await?;
    let settled_cpu = (settled_cpu - cpu0) as f64 / ticks;
    let rss = proc_status_kib(pid, "VmRSS:")?;
    let hwm = proc_status_kib(pid, "VmHWM:")?;
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
    // The baseline again, now that the load is gone: one taken only before
    // a minute-long soak rests on a second of a machine whose speed drifts.
    // (The reports are made again: the first rounds' were let go rather
    // than held through the soak beside its publisher.)
    let after = unavoidable(cfg, reports, BASELINE_ROUNDS)?;
    // Reports not checked: shed on purpose, missing from their unit's
    // sequence (counted as gaps), or a unit's last ones, which show as a
    // gap only once the unit reports again (the rest).
    let dropped = published.saturating_sub(accounted(&last));
    let trailing = dropped.saturating_sub(last.missed);
    let cpu_pct = 100.0 * cpu / wall;
    let mib = |k: u64| k as f64 / 1024.0;
    let peak = hwm.max(peak_rss);
    println!(
        "== soak ({units} units x 1 report/s x {secs} s = {published} reports, supervisor in its own process, runtime threads {})",
        if threads == 0 {
            "one per core".to_string()
        } else {
            threads.to_string()
        }
    );
    print_pace(units, secs, wall);
    print_share(units, cpu_pct, (mib(rss), mib(peak)));
    let per_unit = rss.saturating_sub(rss0) as f64 / units.max(1) as f64;
    println!(
        "   memory per unit    {per_unit:>11.1} KiB   ({:.1} MiB at the end − {:.1} MiB before the load, over {units} units)   goal ≤ 10 KiB: {}",
        mib(rss),
        mib(rss0),
        verdict(per_unit <= 10.0)
    );
    // Per report that reached the check: one lost before it is not work
    // the supervisor did (its share of the client's reading is in the CPU).
    let per_report_us = settled_cpu * 1e6 / accounted(&last).max(1) as f64;
    let baseline = cpu_per_report_line(per_report_us, before, &after);
    // Where that CPU was spent: a supervisor behind at the load's end
    // works on after it (its backlog, the writes it held back).
    println!(
        "   of which           {cpu:>9.1} s over the load's {wall:.1} s, {:.1} s after it, until its last report was checked {:.1} s later",
        settled_cpu - cpu,
        settled_in.as_secs_f64()
    );
    let (p99, flat) = print_steering_and_flatness(&steer, steer_missed, &minutes);
    println!(
        "   not checked        {dropped:>12}   (of {published}: evaluated {}, duplicates {}, shed under load {}, dead letters {})   target 0: {}",
        last.evaluated,
        last.duplicates,
        last.shed,
        last.dead_letters,
        verdict(dropped == 0)
    );
    println!(
        "   of which counted   {:>12} missing from units' sequences (gaps), {} shed (each unit judged on its latest); {trailing} were units' last reports, a gap once the unit reports again; the connection's own drop count: {} (a lower bound, within the gaps)",
        last.missed, last.shed, last.dropped
    );
    Ok(vec![
        ("soak_cpu_pct".into(), cpu_pct.into()),
        ("soak_rss_mib".into(), mib(rss).into()),
        ("soak_kib_per_unit".into(), per_unit.into()),
        ("soak_peak_rss_mib".into(), mib(peak).into()),
        ("soak_published".into(), published.into()),
        ("soak_not_checked".into(), dropped.into()),
        ("soak_trailing".into(), trailing.into()),
        ("soak_shed".into(), last.shed.into()),
        ("soak_missed".into(), last.missed.into()),
        ("soak_cpu_per_report_us".into(), per_report_us.into()),
        ("soak_steering_p99_us".into(), us(p99).into()),
        ("soak_steering_missed".into(), steer_missed.into()),
        ("soak_decode_check_us".into(), baseline.all.into()),
        ("soak_decode_check_us_before".into(), baseline.before.into()),
        ("soak_decode_check_us_after".into(), baseline.after.into()),
        ("soak_flat_cpu".into(), flat.map(|f| f.0).into()),
        ("soak_flat_memory".into(), flat.map(|f| f.1).into()),
    ])
}

/// Prints steering under the load (sorted latencies, probes unanswered)
/// and, for a long enough soak, whether it stayed flat: the p99 and the
/// (CPU, memory) ratios.
fn print_steering_and_flatness(
    steer: &[Duration],
    steer_missed: u64,
    minutes: &[(f64, u64)],
) -> (Duration, Option<(f64, f64)>) {
    let p99 = pct(steer, 0.99);
    println!(
        "   steering (load on)  p50 {:>8.1} ms   p99 {:>8.1} ms   ({} round trips, {steer_missed} without steering within 5 s)   target p99 <= 2 s: {}",
        us(pct(steer, 0.5)) / 1000.0,
        us(p99) / 1000.0,
        steer.len(),
        verdict(!steer.is_empty() && steer_missed == 0 && p99 <= Duration::from_secs(2))
    );
    let flat = flatness(minutes);
    if let Some((cpu_ratio, mem_ratio)) = flat {
        println!(
            "   flat over time     last ten minutes ÷ first ten: cpu {cpu_ratio:.2}, memory {mem_ratio:.2}   target within 10%: {}",
            verdict((0.9..=1.1).contains(&cpu_ratio) && (0.9..=1.1).contains(&mem_ratio))
        );
    }
    (p99, flat)
}

/// Prints whether the load kept its rate: `secs` seconds of reports from
/// `units` units were sent over `wall` seconds. A load that falls behind
/// (by more than 5%) measures the machine as much as the supervisor: its
/// publisher and the supervisor were short of cores together.
fn print_pace(units: u64, secs: u64, wall: f64) {
    let reached = (units * secs) as f64 / wall.max(1e-9);
    let kept = wall <= secs as f64 * 1.05;
    println!(
        "   load pace          {reached:>9.0} reports/s of {units} asked ({secs} s of reports sent in {wall:.1} s): {}",
        if kept {
            "kept"
        } else {
            "fell behind: the figures below are the machine's as much as the supervisor's"
        }
    );
}

/// The supervisor's figures when the load began.
#[derive(Clone, Copy)]
struct Baseline {
    pid: u32,
    rss0: u64,
    cpu0: u64,
    ticks: f64,
}

/// Prints the supervisor's share of a core over the load and its memory
/// (MiB at the end and at the peak) beside the targets for `units`.
fn print_share(units: u64, cpu_pct: f64, (end, peak): (f64, f64)) {
    let (cpu_target, mib_target) = soak_targets(units);
    println!(
        "   supervisor cpu     {cpu_pct:>11.1}% of one core   target < {cpu_target}% at {units} units: {}",
        verdict(cpu_pct < cpu_target as f64)
    );
    println!(
        "   resident memory    {end:>8.1} MiB at the end, {peak:.1} MiB peak   target < {mib_target} MiB at {units} units: {}",
        verdict(peak < mib_target as f64)
    );
}

/// The soak's targets for CPU (per cent of one core) and peak memory
/// (MiB) at `units`: a quarter of a core and 256 MiB up to 10,000 units
/// (seed 000's fleet soak), one core and 1 GiB beyond (issue 43: 100,000
/// units on one supervisor core, under 1 GiB).
fn soak_targets(units: u64) -> (u64, u64) {
    if units <= 10_000 {
        (25, 256)
    } else {
        (100, 1024)
    }
}

/// What the soak's load left: reports published, the peak resident memory
/// seen (once a second), and each minute's (CPU %, resident KiB).
struct Load {
    published: u64,
    peak_rss: u64,
    minutes: Vec<(f64, u64)>,
}

/// Waits (up to 30 s) for the reports still waiting when the load ended
/// to be checked. Returns the last stats, and the supervisor's CPU ticks at
/// the last poll that found more checked, and how long after the load
/// that poll came: the CPU of the reports checked after the load is
/// counted too, not the idle wait for reports that never came.
async fn settle<F>(
    pid: u32,
    published: u64,
    stats: impl Fn() -> F,
) -> anyhow::Result<(xo_proto::control::StatsReply, u64, Duration)>
where
    F: std::future::Future<
            Output = Result<xo_proto::control::StatsReply, xo_bus::typed::CallError>,
        >,
{
    let mut last = stats().await?;
    let begun = Instant::now();
    let mut settled_cpu = proc_cpu_ticks(pid)?;
    let mut settled_in = Duration::ZERO;
    while accounted(&last) < published && begun.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = stats().await?;
        let cpu_now = proc_cpu_ticks(pid)?;
        if accounted(&now) > accounted(&last) {
            settled_cpu = cpu_now;
            settled_in = begun.elapsed();
        }
        last = now;
    }
    Ok((last, settled_cpu, settled_in))
}

/// Reports the supervisor accounted for: checked, duplicates, or shed.
fn accounted(s: &xo_proto::control::StatsReply) -> u64 {
    s.evaluated + s.duplicates + s.shed
}

/// Publishes one report a second for each of `units` units for `secs`
/// seconds, spread over each second in 100 slices from `t0`; prints each
/// minute's CPU and memory of the supervisor as it goes.
async fn load(
    publisher: &Bus,
    subjects: &xo_proto::Subjects,
    (units, secs): (u64, u64),
    at_start: &Baseline,
    t0: Instant,
) -> anyhow::Result<Load> {
    let slices = 100u64;
    let per_slice = units.div_ceil(slices);
    // Reports encoded ahead: building and encoding each one here took
    // the publisher as long as the supervisor's decode and check, and on a
    // small machine the load fell behind its rate (docs/performance.md §41).
    let deck = super::deck::Deck::new(super::deck::CARDS)?;
    let mut published = 0u64;
    let mut peak_rss = 0u64;
    // Each minute: the supervisor's CPU over that minute and its memory at
    // its end (flat over hours is the goal: compare the first and the last).
    let Baseline {
        pid,
        rss0,
        cpu0,
        ticks,
    } = *at_start;
    let mut minute_cpu = cpu0;
    let mut minute_at = Instant::now();
    let mut minutes: Vec<(f64, u64)> = Vec::new();
    for second in 0..secs {
        for slice in 0..slices {
            let due = t0 + Duration::from_millis(second * 1000 + slice * 1000 / slices);
            tokio::time::sleep_until(due.into()).await;
            for u in (slice * per_slice)..((slice + 1) * per_slice).min(units) {
                let name = sample::unit_name(u);
                let body = deck.report(u, &name, second + 1)?;
                publisher
                    .publish(&subjects.salute(&name), deck.headers().clone(), body)
                    .await?;
                published += 1;
            }
        }
        let rss_now = proc_status_kib(pid, "VmRSS:")?;
        peak_rss = peak_rss.max(rss_now);
        if (second + 1) % 60 == 0 {
            let cpu_now = proc_cpu_ticks(pid)?;
            let pct = 100.0 * (cpu_now - minute_cpu) as f64
                / ticks
                / minute_at.elapsed().as_secs_f64().max(1e-9);
            println!(
                "   soak minute {:>3}: supervisor cpu {pct:>5.1}% of one core, memory {:>7.1} MiB ({:.1} KiB a unit)",
                (second + 1) / 60,
                rss_now as f64 / 1024.0,
                rss_now.saturating_sub(rss0) as f64 / units.max(1) as f64
            );
            minutes.push((pct, rss_now));
            minute_cpu = cpu_now;
            minute_at = Instant::now();
        }
    }
    Ok(Load {
        published,
        peak_rss,
        minutes,
    })
}

/// The last ten minutes' mean CPU and memory, each over the first ten's,
/// from each minute's (CPU %, resident KiB); a soak under 20 minutes has
/// no such pair.
fn flatness(minutes: &[(f64, u64)]) -> Option<(f64, f64)> {
    if minutes.len() < 20 {
        return None;
    }
    let mean = |m: &[(f64, u64)]| {
        let n = m.len() as f64;
        (
            m.iter().map(|x| x.0).sum::<f64>() / n,
            m.iter().map(|x| x.1 as f64).sum::<f64>() / n,
        )
    };
    let (first, last) = (mean(&minutes[..10]), mean(&minutes[minutes.len() - 10..]));
    Some((last.0 / first.0.max(1e-9), last.1 / first.1.max(1e-9)))
}

#[cfg(test)]
mod tests {
    use super::flatness;

    #[test]
    fn flatness_compares_the_last_ten_minutes_with_the_first_ten() {
        // 19 minutes: no pair of ten-minute windows that do not overlap.
        assert_eq!(flatness(&[(10.0, 1000); 19]), None);
        assert_eq!(flatness(&[(10.0, 1000); 25]), Some((1.0, 1.0)));
        // CPU up by half and memory doubled over the last ten minutes.
        let mut m = vec![(10.0, 1000); 10];
        m.extend([(99.0, 5000); 5]);
        m.extend([(15.0, 2000); 10]);
        assert_eq!(flatness(&m), Some((1.5, 2.0)));
    }
}
