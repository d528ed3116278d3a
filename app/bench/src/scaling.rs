//! `xo bench radio --supervisors N --scale-units U [--cluster]`: out past
//! one core. One sharded supervisor carrying `U` units, then `N` carrying
//! `N × U`, each supervisor in a process of its own (`xo serve supervisor`)
//! and each unit reporting once a second for `--soak-secs`: every
//! supervisor's CPU per report checked, side by side. The supervisors scale
//! when `N` of them carry `N` times the units at the same CPU per report.
//!
//! Each set runs on NATS of its own (a three-node cluster with
//! `--cluster`), carrying XO's partition mapping; the reports reach the
//! supervisors through the stream that keeps them, as in production.

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use xo_bus::{Bus, NatsBus};
use xo_proto::Subjects;
use xo_proto::control::{StatsReply, SupervisorStats};
use xo_radio::sample;
use xo_runtime::XoConfig;

use super::deck::Deck;
use super::util::{Nats, clock_ticks, proc_cpu_ticks, start_nats_cluster, start_nats_with};

/// What the scaling soak is asked for.
#[derive(Debug, Clone)]
pub struct ScalingArgs {
    pub supervisors: usize,
    pub units_each: u64,
    pub secs: u64,
    pub partitions: u32,
    pub cluster: bool,
    pub nats_server: String,
}

/// One supervisor process of a set.
struct Member {
    name: String,
    child: Child,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// What one supervisor did over a set's measured window.
struct Share {
    name: String,
    cpu_s: f64,
    checked: u64,
    units: u64,
}

pub async fn run(cfg: &XoConfig, a: &ScalingArgs) -> anyhow::Result<ExitCode> {
    if a.supervisors < 2 || a.partitions < 2 || a.units_each == 0 || a.secs == 0 {
        bail!(
            "the scaling soak needs --supervisors of 2 or more, --partitions of 2 or more, --scale-units and --soak-secs above 0 (got {}, {}, {}, {})",
            a.supervisors,
            a.partitions,
            a.units_each,
            a.secs
        );
    }
    let mut sets = Vec::new();
    for n in [1, a.supervisors] {
        let shares = set(cfg, a, n).await?;
        sets.push((n, shares));
    }
    let where_ = if a.cluster {
        "a three-node NATS cluster"
    } else {
        "one nats-server"
    };
    println!(
        "== out past one core ({} units a supervisor, 1 report/s each, {} s a set, {} partitions, on {where_}; each supervisor in its own process)",
        a.units_each, a.secs, a.partitions
    );
    let per_report = |s: &[Share]| {
        let cpu: f64 = s.iter().map(|x| x.cpu_s).sum();
        let checked: u64 = s.iter().map(|x| x.checked).sum();
        (cpu * 1e6 / checked.max(1) as f64, checked)
    };
    let (one, _) = per_report(&sets[0].1);
    for (n, shares) in &sets {
        let (us, checked) = per_report(shares);
        println!(
            "   {n} supervisor(s), {} units: {checked} reports checked, {us:.2} µs of CPU a report   / 1 supervisor = {:.2}",
            *n as u64 * a.units_each,
            us / one.max(1e-9)
        );
        for s in shares {
            println!(
                "      {:<14} {:>7} units  {:>9} reports  cpu {:>5.1}% of one core  {:>6.2} µs a report",
                s.name,
                s.units,
                s.checked,
                100.0 * s.cpu_s / a.secs as f64,
                s.cpu_s * 1e6 / s.checked.max(1) as f64
            );
        }
    }
    let (many, _) = per_report(&sets[1].1);
    println!(
        "   cpu per report, {} supervisors over 1: {:.2}   target: the same (within 10%): {}",
        a.supervisors,
        many / one.max(1e-9),
        super::util::verdict(many <= one * 1.1)
    );
    Ok(ExitCode::SUCCESS)
}

/// `n` supervisors carrying `n × units_each` units for `secs`: each one's
/// CPU and reports checked over the measured window.
async fn set(cfg: &XoConfig, a: &ScalingArgs, n: usize) -> anyhow::Result<Vec<Share>> {
    let mapping = crate::nats_config::mappings(&cfg.org.prefix, a.partitions);
    let nats: Nats = if a.cluster {
        start_nats_cluster(&a.nats_server, 3, &mapping)?
    } else {
        start_nats_with(&a.nats_server, &mapping)?
    };
    let url = nats.url().to_string();
    let replicas = if a.cluster { 3 } else { 1 };
    let opts = crate::connect::nats_options(cfg, "bench-scaling", false);
    let publisher = Bus::Nats(NatsBus::connect(&url, opts).await?);
    let subjects = cfg.subjects();
    let exe = crate::util::xo_exe()?;
    let members: Vec<Member> = (0..n)
        .map(|i| {
            let name = format!("scale-{n}-{i}");
            let child = Command::new(&exe)
                .args(["serve", "supervisor", "--nats", &url])
                .env("XO__SUPERVISOR__PARTITIONS", a.partitions.to_string())
                .env("XO__SUPERVISOR__INSTANCE", &name)
                .env("XO__NATS__REPLICAS", replicas.to_string())
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .context("starting a supervisor")?;
            anyhow::Ok(Member { name, child })
        })
        .collect::<Result<_, _>>()?;
    let units = n as u64 * a.units_each;
    // Every member up (the reports stream exists once one is), every unit
    // heard once, and the partitions settled: each member holds units, and
    // the counts held still for three seconds.
    let begun = Instant::now();
    while let Err(e) = sample_all(&publisher, &subjects, &members).await {
        if begun.elapsed() > Duration::from_secs(60) {
            return Err(e.context("the supervisors did not start"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deck = Deck::new(crate::deck::CARDS)?;
    let load = (&publisher, &subjects, &deck);
    publish_second(load, units, 1).await?;
    settle(&publisher, &subjects, &members, units).await?;
    let ticks = clock_ticks() as f64;
    let before = sample_all(&publisher, &subjects, &members).await?;
    let t0 = Instant::now();
    for second in 0..a.secs {
        let due = t0 + Duration::from_secs(second);
        tokio::time::sleep_until(due.into()).await;
        publish_second(load, units, second + 2).await?;
    }
    publisher.flush().await?;
    let wall = t0.elapsed();
    // Let the last second's reports be checked before reading the counts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = sample_all(&publisher, &subjects, &members).await?;
    if wall > Duration::from_secs(a.secs + a.secs / 10 + 1) {
        eprintln!(
            "   (the publisher fell behind: {:.1} s for {} s of reports)",
            wall.as_secs_f64(),
            a.secs
        );
    }
    Ok(members
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(m, ((c0, s0), (c1, s1)))| Share {
            name: m.name.clone(),
            cpu_s: (c1 - c0) as f64 / ticks,
            checked: (s1.evaluated + s1.duplicates).saturating_sub(s0.evaluated + s0.duplicates),
            units: s1.units,
        })
        .collect())
}

/// One report from each of `units` units, with sequence `seq`, spread
/// over the next second in ten slices (the reports from the deck).
async fn publish_second(
    (publisher, subjects, deck): (&Bus, &Subjects, &Deck),
    units: u64,
    seq: u64,
) -> anyhow::Result<()> {
    let begun = Instant::now();
    let per_slice = units.div_ceil(10);
    for slice in 0..10u64 {
        tokio::time::sleep_until((begun + Duration::from_millis(slice * 100)).into()).await;
        for u in (slice * per_slice)..((slice + 1) * per_slice).min(units) {
            let name = sample::unit_name(u);
            let body = deck.report(u, &name, seq)?;
            publisher
                .publish(&subjects.salute(&name), deck.headers().clone(), body)
                .await?;
        }
    }
    Ok(())
}

/// Waits until every member answers, holds units, and all `units` are held
/// with the counts unchanged for three seconds.
async fn settle(
    publisher: &Bus,
    subjects: &Subjects,
    members: &[Member],
    units: u64,
) -> anyhow::Result<()> {
    let begun = Instant::now();
    let mut last: Vec<u64> = Vec::new();
    let mut still = 0;
    while begun.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Ok(now) = sample_all(publisher, subjects, members).await else {
            continue;
        };
        let held: Vec<u64> = now.iter().map(|(_, s)| s.units).collect();
        let all = held.iter().sum::<u64>() == units && held.iter().all(|h| *h > 0);
        still = if all && held == last { still + 1 } else { 0 };
        last = held;
        if still >= 3 {
            return Ok(());
        }
    }
    bail!(
        "{} supervisors never settled on {units} units (held: {last:?})",
        members.len()
    )
}

/// Each member's CPU ticks and counters, asked of it directly.
async fn sample_all(
    publisher: &Bus,
    subjects: &Subjects,
    members: &[Member],
) -> anyhow::Result<Vec<(u64, StatsReply)>> {
    let mut out = Vec::with_capacity(members.len());
    let asker = xo_bus::Client::new(publisher.clone(), subjects.clone())
        .with_timeout(Duration::from_secs(10));
    for m in members {
        let subject = format!(
            "{}.stats",
            subjects.ctl_instance_group("supervisor", &m.name)
        );
        let stats = asker
            .call_to(&subject, &SupervisorStats {})
            .await
            .with_context(|| format!("supervisor {} did not answer", m.name))?;
        out.push((proc_cpu_ticks(m.child.id())?, stats));
    }
    Ok(out)
}
