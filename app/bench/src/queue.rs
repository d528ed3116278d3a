//! `xo bench queue`: claim + complete cycles per second with 1 and 32
//! concurrent clients, on NATS and on the embedded store, beside raw
//! key-value put + get measured in the same run with the same concurrency.

use crate::fabric::{Fabric, Plan, Slot};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use xo_bus::{Bus, Client, FileStore, LocalBus, NatsBus, NatsStore, Store};
use xo_proto::queue::*;
use xo_runtime::XoConfig;
use xo_runtime::config::StoreSync;

use super::util::{start_nats, tempfile_dir};

#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// Tasks per measurement.
    #[arg(long, default_value_t = 4_000)]
    pub tasks: usize,
    /// The nats-server binary to start when no --nats URL is given.
    #[arg(long, default_value = "nats-server")]
    pub nats_server: String,
    #[arg(long)]
    pub json: bool,
    /// Only `nats` or only `embedded`.
    #[arg(long)]
    pub only: Option<String>,
    /// The embedded queue with this `store.sync` only (`always`, `batch`,
    /// `never`; repeat for more), as for a profile of one mode.
    #[arg(long = "sync", value_parser = sync_mode)]
    pub sync: Vec<StoreSync>,
    /// Concurrent clients of a row (repeat for more rows), as for a
    /// profile of one row.
    #[arg(long = "clients", default_values_t = [1usize, 32])]
    pub clients: Vec<usize>,
}

fn sync_mode(s: &str) -> Result<StoreSync, String> {
    StoreSync::ALL
        .into_iter()
        .find(|m| m.as_str() == s)
        .ok_or_else(|| format!("no such store.sync mode {s:?} (always, batch or never)"))
}

const T: Duration = Duration::from_secs(30);

fn tasks(n: usize, tag: &str) -> Vec<Task> {
    (0..n)
        .map(|i| Task::new(format!("{tag}{i}"), "bench", "bench", "coder"))
        .collect()
}

/// Runs `n` claim + complete cycles with `clients` concurrent clients:
/// cycles a second, and this process's CPU a cycle in microseconds (the
/// queue and its clients, every thread; setting up the tasks not counted),
/// all of it and the kernel's part (system calls: the syncs, the wake-ups).
async fn cycles(
    clients: Vec<Bus>,
    subjects: &xo_proto::Subjects,
    n: usize,
    tag: &str,
) -> anyhow::Result<(f64, f64, f64)> {
    let clients: Vec<Client> = clients
        .into_iter()
        .map(|b| Client::new(b, subjects.clone()).with_timeout(T))
        .collect();
    let first = clients[0].clone();
    first
        .call(&Init {
            by: Default::default(),
            mode: ExecutionMode::Auto,
            manager: false,
            force: true,
        })
        .await?;
    first
        .call(&SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "bench".into(),
            project_id: Some("bench".into()),
            completed: true,
        })
        .await?;
    for chunk in tasks(n, tag).chunks(1000) {
        first.call(&Enqueue::new(chunk.to_vec())).await?;
    }
    first.call(&Start::default()).await?;
    let cpu0 = super::util::process_cpu()?;
    let begun = Instant::now();
    let mut joins = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        joins.push(tokio::spawn(async move {
            let mut done = 0u64;
            loop {
                let c = client
                    .call(&Claim {
                        role: "coder".into(),
                        claimant: format!("b{i}"),
                        wait_ms: 0,
                    })
                    .await?;
                let Some(c) = c else { break };
                let report = ValidationReport {
                    passed: true,
                    ..Default::default()
                };
                client
                    .call(&Complete {
                        usage: Default::default(),
                        task_id: c.record.task.task_id,
                        token: c.token,
                        claimant: format!("b{i}"),
                        report,
                        manager_reply: None,
                        exchange: None,
                        diff: None,
                    })
                    .await?;
                done += 1;
            }
            anyhow::Ok(done)
        }));
    }
    let mut total = 0;
    for j in joins {
        total += j.await??;
    }
    let took = begun.elapsed();
    let cpu = super::util::process_cpu()?.since(cpu0);
    if total != n as u64 {
        anyhow::bail!("{total} of {n} cycles completed");
    }
    Ok((
        n as f64 / took.as_secs_f64(),
        cpu.total().as_secs_f64() * 1e6 / n as f64,
        cpu.system.as_secs_f64() * 1e6 / n as f64,
    ))
}

/// Raw key-value put + get of a task-sized value, same concurrency.
async fn raw_kv(store: &Store, clients: usize, n: usize) -> anyhow::Result<f64> {
    let value = Bytes::from(vec![b'x'; 600]);
    let per = n / clients;
    let begun = Instant::now();
    let mut joins = Vec::new();
    for c in 0..clients {
        let (store, value) = (store.clone(), value.clone());
        joins.push(tokio::spawn(async move {
            for i in 0..per {
                let key = format!("k{c}-{i}");
                store.put("benchraw", &key, value.clone()).await?;
                store.get("benchraw", &key).await?;
            }
            anyhow::Ok(())
        }));
    }
    for j in joins {
        j.await??;
    }
    Ok((per * clients) as f64 / begun.elapsed().as_secs_f64())
}

pub async fn run(cfg: &XoConfig, args: QueueArgs) -> anyhow::Result<ExitCode> {
    if args.only.as_deref() == Some("nats") && !args.sync.is_empty() {
        anyhow::bail!("--sync picks the embedded queue's modes: drop it, or drop --only nats");
    }
    if args.clients.contains(&0) {
        anyhow::bail!("--clients 0: a row needs at least one client");
    }
    let mut out = serde_json::Map::new();
    // Removed when the bench ends, whichever way it ends.
    let dir = tempfile_dir::Dir::new("queue")?;
    let tmp = dir.0.clone();
    let mut qcfg = cfg.clone();
    qcfg.queue.data_dir = tmp.join("data").display().to_string();

    let nats = args.only.as_deref() != Some("embedded");
    let embedded = args.only.as_deref() != Some("nats");
    if nats {
        bench_nats(cfg, &args, &qcfg, &mut out).await?;
    }
    if embedded {
        bench_embedded(cfg, &tmp, qcfg, &args, &mut out).await?;
    }
    if args.json {
        println!("{}", serde_json::Value::Object(out));
    }
    Ok(ExitCode::SUCCESS)
}

async fn bench_nats(
    cfg: &XoConfig,
    args: &QueueArgs,
    qcfg: &XoConfig,
    out: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let n = args.tasks;
    let server = if cfg.nats.url.is_empty() {
        Some(start_nats(&args.nats_server)?)
    } else {
        None
    };
    let url = server
        .as_ref()
        .map_or(cfg.nats.url.clone(), |s| s.url().to_string());
    let connect = |name: String| {
        let url = url.clone();
        async move {
            NatsBus::connect(
                &url,
                xo_bus::nats::ConnectOptions {
                    name,
                    ..Default::default()
                },
            )
            .await
        }
    };
    let qbus = connect("bench-queue".into()).await?;
    let qstore = Store::Nats(NatsStore::new(qbus.client().clone(), &cfg.org.prefix));
    // One instance: no lease to take (the bench measures the queue).
    let mut one = qcfg.clone();
    one.queue.leader_lease_ms = 0;
    let queue = Fabric::start_with(
        &one,
        Plan::of(&[Slot::Queue]),
        Bus::Nats(qbus),
        Some(qstore.clone()),
    )
    .await?;
    let subjects = cfg.subjects();
    println!("== queue on NATS ({n} tasks per run; task records and audit in JetStream)");
    for clients in args.clients.iter().copied() {
        let mut buses = Vec::new();
        for i in 0..clients {
            buses.push(Bus::Nats(connect(format!("bench-client-{i}")).await?));
        }
        row("nats", buses, &qstore, &subjects, n, 5_000.0, out).await?;
    }
    queue.stop().await?;
    Ok(())
}

async fn bench_embedded(
    cfg: &XoConfig,
    tmp: &std::path::Path,
    qcfg: XoConfig,
    args: &QueueArgs,
    out: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let (n, only) = (args.tasks, &args.sync);
    let subjects = cfg.subjects();
    for sync in StoreSync::ALL {
        if !only.is_empty() && !only.contains(&sync) {
            continue;
        }
        let (mode, name) = (sync.into(), sync.as_str());
        let local = LocalBus::new();
        let fstore = Store::File(FileStore::open_with(
            tmp.join(format!("state-{name}")),
            mode,
        )?);
        let mut qcfg = qcfg.clone();
        qcfg.queue.data_dir = tmp.join(format!("data-{name}")).display().to_string();
        let queue = Fabric::start_with(
            &qcfg,
            Plan::of(&[Slot::Queue]),
            Bus::Local(local.clone()),
            Some(fstore.clone()),
        )
        .await?;
        println!("== queue embedded (in-process bus, file store, store.sync = \"{name}\")");
        for clients in args.clients.iter().copied() {
            let buses = vec![Bus::Local(local.clone()); clients];
            let label = format!("embedded_{name}");
            row(&label, buses, &fstore, &subjects, n, 20_000.0, out).await?;
        }
        queue.stop().await?;
    }
    Ok(())
}

/// Measures one row (cycles and the raw baseline) and prints it.
async fn row(
    label: &str,
    buses: Vec<Bus>,
    store: &Store,
    subjects: &xo_proto::Subjects,
    n: usize,
    target: f64,
    out: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let clients = buses.len();
    // The whole store's writes and syncs, and the audit copy's of them.
    let counts = |s: &Store| match s {
        Store::File(f) => Some((
            f.writes(),
            f.syncs(),
            f.log_writes_and_syncs(xo_proto::names::AUDIT_LOG),
        )),
        Store::Nats(_) => None,
    };
    let before = counts(store);
    let (rate, cpu_us, kernel_us) =
        cycles(buses, subjects, n, &format!("{label}{clients}-")).await?;
    // Group commit at work: how many writes each fdatasync covered.
    let shared = match (before, counts(store)) {
        (Some((w0, s0, (aw0, as0))), Some((w1, s1, (aw1, as1)))) if s1 > s0 => {
            let (w, s) = (w1 - w0, s1 - s0);
            let (aw, asy) = (aw1 - aw0, as1 - as0);
            out.insert(
                format!("{label}_{clients}_writes_per_sync"),
                (w as f64 / s as f64).into(),
            );
            out.insert(format!("{label}_{clients}_audit_copy_writes"), aw.into());
            out.insert(format!("{label}_{clients}_audit_copy_syncs"), asy.into());
            format!(
                "   {w} writes, {s} fdatasyncs ({:.1} a sync; of them the audit copy's: {aw} writes, {asy} fdatasyncs)",
                w as f64 / s as f64
            )
        }
        _ => String::new(),
    };
    let raw = raw_kv(store, clients, n).await?;
    let verdict = if clients == 32 {
        let v = if rate >= target {
            "meets target"
        } else {
            "BELOW TARGET"
        };
        format!("   target >= {target:.0}: {v}")
    } else {
        String::new()
    };
    println!(
        "   {clients:>2} clients  {rate:>9.0} cycles/s  ({cpu_us:>5.0} us CPU a cycle, {kernel_us:>4.0} of them in the kernel)   baseline raw KV put+get {raw:>9.0}/s   ratio {:.2}{verdict}{shared}",
        rate / raw
    );
    out.insert(format!("{label}_{clients}_cycles_per_s"), rate.into());
    out.insert(format!("{label}_{clients}_cpu_us_per_cycle"), cpu_us.into());
    out.insert(
        format!("{label}_{clients}_kernel_cpu_us_per_cycle"),
        kernel_us.into(),
    );
    out.insert(format!("{label}_{clients}_raw_kv_per_s"), raw.into());
    Ok(())
}
