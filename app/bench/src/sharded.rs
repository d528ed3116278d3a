//! `xo bench radio --supervisors N [--cluster]`: sharded supervision.
//!
//! On one nats-server, or a three-node cluster (`--cluster`; or the servers
//! of `nats.url`, e.g. the compose cluster's, which must carry XO's
//! partition mapping), the same reports are published in the same windows
//! to (1) raw NATS subscribers, (2) one sharded supervisor holding every
//! partition, (3) N sharded supervisors sharing them, in alternating rounds;
//! the supervisors read the reports from the stream that keeps them
//! (`XO_REPORTS`, with `nats.replicas` copies), as sharded supervision
//! does, while raw NATS is core pub/sub; then steering latency (report →
//! steering, N supervisors) beside raw
//! request/reply on the same servers: p50, p99 and the p99 ratio. The
//! supervisors run in this process, each with its own connection.

use crate::fabric::{Fabric, Plan};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use xo_bus::{Bus, Headers, NatsBus, NatsStore, Store};
use xo_proto::codec::{self, CONTENT_TYPE, Format};
use xo_radio::sample;
use xo_runtime::XoConfig;
use xo_supervisor::SupervisorHandle;

use super::flow::{paced, print_latency, raw_counter, reqreply_latency, steering_latency};
use super::util::{median, pct, start_nats_cluster, start_nats_with, us};

/// What the sharded bench is asked for.
#[derive(Debug, Clone)]
pub struct ShardedArgs {
    pub supervisors: usize,
    pub cluster: bool,
    pub partitions: u32,
    pub reports: usize,
    pub units: u64,
    pub rounds: usize,
    pub window: usize,
    pub latency_samples: usize,
    pub nats_server: String,
}

pub async fn run(
    cfg: &XoConfig,
    a: &ShardedArgs,
    out: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<ExitCode> {
    if a.supervisors == 0 || a.partitions < 2 {
        bail!(
            "--supervisors needs at least 1 supervisor and --partitions at least 2 (got {} and {})",
            a.supervisors,
            a.partitions
        );
    }
    let mapping = crate::nats_config::mappings(&cfg.org.prefix, a.partitions);
    // Ours, unless nats.url names servers (which must carry the mapping).
    let servers = if !cfg.nats.url.is_empty() {
        None
    } else if a.cluster {
        Some(start_nats_cluster(&a.nats_server, 3, &mapping)?)
    } else {
        Some(start_nats_with(&a.nats_server, &mapping)?)
    };
    let url = match &servers {
        None => cfg.nats.url.clone(),
        Some(s) => s.url().to_string(),
    };
    let nodes = match &servers {
        None => url.split(',').count(),
        Some(s) => s.nodes(),
    };
    // Three copies of the reports stream (and of the leases) on a cluster
    // of our own, as cluster mode has; else what nats.replicas says.
    let replicas = if servers.as_ref().is_some_and(|s| s.nodes() >= 3) {
        3
    } else {
        cfg.nats.replicas
    };
    let connect = |name: String| {
        let opts = crate::connect::nats_options(cfg, &name, false);
        let url = url.clone();
        async move { anyhow::Ok(Bus::Nats(NatsBus::connect(&url, opts).await?)) }
    };
    let publisher = connect("bench-pub".into()).await?;
    let raw_sub = connect("bench-sub".into()).await?;
    let (got, counter) = raw_counter(&raw_sub).await?;
    let mut msgpack = Headers::new();
    msgpack.insert(CONTENT_TYPE, codec::MSGPACK);
    let stride = (a.reports as u64).div_ceil(a.units) + 1;
    let encode = |unit: u64, turn: u64| -> anyhow::Result<(String, Bytes)> {
        let r = sample::realistic(unit, turn);
        Ok((
            r.unit.unit.clone(),
            Bytes::from(codec::encode(&r, Format::Msgpack)?),
        ))
    };
    let subjects = cfg.subjects();
    let counts = [1, a.supervisors];
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut last = Vec::new();
    for round in 0..a.rounds.max(1) as u64 {
        for (i, &n) in counts.iter().enumerate() {
            // Each measured set starts fresh, warmed up on every unit
            // first, with turns after the last set's.
            let set = round * 2 + i as u64;
            let warm: Vec<_> = (0..a.units)
                .map(|u| encode(u, 1 + set * stride))
                .collect::<anyhow::Result<_>>()?;
            let payloads: Vec<_> = (0..a.reports as u64)
                .map(|k| encode(k % a.units, 2 + set * stride + k / a.units))
                .collect::<anyhow::Result<_>>()?;
            if i == 0 {
                rates[0].push(
                    paced(
                        &publisher,
                        &payloads,
                        a.window,
                        &msgpack,
                        |u| format!("bench.raw.{u}"),
                        || got.load(Ordering::Relaxed),
                    )
                    .await?,
                );
            }
            // The reports stream keeps the last set's reports: a new set's
            // supervisors (fresh state) would read them all again.
            for s in std::mem::take(&mut last) {
                let s: Fabric = s;
                s.stop().await?;
            }
            xo_bus::kept::purge(&publisher, &subjects.reports_stream()).await?;
            let sups = start(cfg, &connect, n, a.partitions, set, replicas).await?;
            let done = || {
                sups.iter()
                    .filter_map(|f| f.get::<SupervisorHandle>())
                    .map(|s| {
                        s.ctx.counters.evaluated.load()
                            + s.ctx.counters.duplicates.load(Ordering::Relaxed)
                    })
                    .sum::<u64>()
            };
            paced(
                &publisher,
                &warm,
                a.window,
                &msgpack,
                |u| subjects.salute(u),
                done,
            )
            .await?;
            rates[1 + i].push(
                paced(
                    &publisher,
                    &payloads,
                    a.window,
                    &msgpack,
                    |u| subjects.salute(u),
                    done,
                )
                .await?,
            );
            last = sups;
        }
    }
    counter.abort();
    let (raw, one, many) = (median(&rates[0]), median(&rates[1]), median(&rates[2]));
    let where_ = if nodes > 1 {
        format!("a {nodes}-node NATS cluster")
    } else {
        "one nats-server".to_string()
    };
    println!(
        "== sharded ingest on {where_} ({} reports, {} units, {} partitions, windows of {}, {} rounds; medians)",
        a.reports, a.units, a.partitions, a.window, a.rounds
    );
    println!(
        "   1 supervisor       {one:>12.0} reports/s evaluated   / raw = {:.2}",
        one / raw
    );
    println!(
        "   {} supervisors      {many:>12.0} reports/s evaluated   / raw = {:.2}   / 1 supervisor = {:.2}",
        a.supervisors,
        many / raw,
        many / one
    );
    println!(
        "   baseline: raw NATS {raw:>12.0} msgs/s pub/sub (core; the supervisors read a stream of {replicas} replica(s))"
    );
    out.insert("sharded_nodes".into(), nodes.into());
    out.insert("sharded_raw_msgs_per_s".into(), raw.into());
    out.insert("sharded_1_reports_per_s".into(), one.into());
    out.insert("sharded_n_reports_per_s".into(), many.into());
    out.insert("sharded_supervisors".into(), a.supervisors.into());
    out.insert("sharded_stream_replicas".into(), replicas.into());

    // Steering latency with the N supervisors of the last round, beside
    // request/reply on the same servers.
    let responder = connect("bench-echo".into()).await?;
    let sample_payload = encode(0, 1)?.1;
    let mut raw_lat =
        reqreply_latency(&publisher, &responder, &sample_payload, a.latency_samples).await?;
    let mut steer_lat = steering_latency(&publisher, &subjects, a.latency_samples).await?;
    let ratio = print_latency(
        &format!(
            "== steering latency on {where_}, {} sharded supervisors ({} round trips each)",
            a.supervisors, a.latency_samples
        ),
        &mut steer_lat,
        &mut raw_lat,
    );
    out.insert(
        "sharded_steering_p99_us".into(),
        us(pct(&steer_lat, 0.99)).into(),
    );
    out.insert(
        "sharded_reqreply_p99_us".into(),
        us(pct(&raw_lat, 0.99)).into(),
    );
    out.insert("sharded_p99_ratio".into(), ratio.into());
    for s in last {
        s.stop().await?;
    }
    drop(servers);
    Ok(ExitCode::SUCCESS)
}

/// `n` sharded supervisors on their own connections and a fresh store
/// prefix, returned once every partition is held.
async fn start<F, Fut>(
    cfg: &XoConfig,
    connect: &F,
    n: usize,
    partitions: u32,
    set: u64,
    replicas: usize,
) -> anyhow::Result<Vec<Fabric>>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Bus>>,
{
    let mut sups = Vec::new();
    for i in 0..n {
        let bus = connect(format!("bench-supervisor-{i}")).await?;
        let Bus::Nats(nb) = &bus else { unreachable!() };
        let store = Store::Nats(NatsStore::with_replicas(
            nb.client().clone(),
            &format!("{}sharded{set}", cfg.org.prefix),
            replicas,
        ));
        let mut c = cfg.clone();
        c.nats.replicas = replicas;
        c.supervisor.volume.clear();
        c.supervisor.partitions = partitions;
        c.supervisor.instance = format!("bench-{set}-{i}");
        let plan = Plan {
            supervisor: true,
            ..Plan::default()
        };
        sups.push(Fabric::start_with(&c, plan, bus, Some(store)).await?);
    }
    // Settled: every partition held by exactly one of them, and the
    // shares even (no hand-over left to happen while measuring).
    for _ in 0..1200 {
        let held: Vec<Vec<u32>> = sups
            .iter()
            .filter_map(|f| f.get::<SupervisorHandle>())
            .filter_map(|s| s.ctx.shard.as_ref())
            .map(|s| s.held())
            .collect();
        let settled = settled(&held, partitions);
        if settled {
            return Ok(sups);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(anyhow::anyhow!(
        "the partitions never settled on {n} supervisors"
    ))
    .context("sharded bench")
}

/// Whether the partitions each supervisor holds (`held`, one list a
/// supervisor) cover `0..partitions` once each, in even shares (no two
/// differing by more than one).
fn settled(held: &[Vec<u32>], partitions: u32) -> bool {
    let mut all: Vec<u32> = held.iter().flatten().copied().collect();
    all.sort_unstable();
    let sizes = held.iter().map(Vec::len);
    let even = sizes.clone().max().unwrap_or(0) - sizes.min().unwrap_or(0) <= 1;
    even && all == (0..partitions).collect::<Vec<_>>()
}

#[cfg(test)]
mod tests {
    use super::settled;

    #[test]
    fn settled_is_every_partition_once_in_even_shares() {
        assert!(settled(&[vec![0, 2], vec![1, 3]], 4));
        assert!(settled(&[vec![0, 1], vec![2]], 3));
        assert!(!settled(&[vec![0, 1, 2], vec![3]], 4), "uneven");
        assert!(!settled(&[vec![0, 1], vec![1, 3]], 4), "held twice");
        assert!(!settled(&[vec![0], vec![1]], 3), "one unheld");
    }
}
