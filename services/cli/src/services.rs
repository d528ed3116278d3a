//! `xo up` and `xo serve`: services with their shutdown signal.

use std::process::ExitCode;

use anyhow::Context;
use tracing::info;
use xo_bus::{Bus, FileStore, LocalBus, NatsBus, NatsStore, Store};
use xo_runtime::XoConfig;

use crate::connect::nats_options;

/// Resolves on ctrl-c or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    info!("shutdown requested");
}

async fn nats(cfg: &XoConfig, name: &str) -> anyhow::Result<(Bus, Store)> {
    let bus = NatsBus::connect(&cfg.nats.url, nats_options(cfg, name, true))
        .await
        .with_context(|| format!("connecting to {}", cfg.nats.url))?;
    let store = Store::Nats(NatsStore::new(bus.client().clone(), &cfg.org.prefix));
    Ok((Bus::Nats(bus), store))
}

/// Every service in one process: the embedded bus and file store (served to
/// local `xo` commands over `./.xo/bus.sock`), or NATS when configured.
pub async fn up(cfg: XoConfig) -> anyhow::Result<ExitCode> {
    let mut telemetry =
        xo_runtime::telemetry::init(&cfg.telemetry, "xo").map_err(|e| anyhow::anyhow!(e))?;
    let (bus, store, socket) = if cfg.nats.url.is_empty() {
        let local = LocalBus::new();
        let store_dir = cfg.state.store_dir();
        let store = FileStore::open(&store_dir)
            .with_context(|| format!("opening the store in {}", store_dir.display()))?;
        let sock = cfg.state.socket_path();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = xo_bus::socket::serve(local.clone(), &sock, async move {
            let _ = stop_rx.await;
        })
        .await
        .context("serving the local bus socket")?;
        eprintln!("xo up: embedded bus, no server needed");
        eprintln!("  state:  {}", store_dir.display());
        eprintln!(
            "  socket: {} (other `xo` commands here use it)",
            sock.display()
        );
        (
            Bus::Local(local),
            Store::File(store),
            Some((stop_tx, server)),
        )
    } else {
        let (bus, store) = nats(&cfg, "xo-up").await?;
        eprintln!(
            "xo up: on NATS {}; state in JetStream buckets",
            cfg.nats.url
        );
        (bus, store, None)
    };
    if let Some(v) = (!cfg.supervisor.volume.is_empty()).then_some(&cfg.supervisor.volume) {
        eprintln!("  volume: {v} (reports/, steering/)");
    }
    eprintln!(
        "  prefix: {} — try `xo tap` and `xo units` in another terminal; ctrl-c stops",
        cfg.org.prefix
    );
    eprintln!("  audit:  {}", cfg.data_dir().display());
    let queue = xo_queue::start(
        cfg.clone(),
        bus.clone(),
        store.clone(),
        xo_runtime::Clock::System,
    )
    .await
    .context("starting the queue")?;
    let knowledge = if cfg.knowledge.enabled {
        eprintln!("  knowledge: {}", cfg.knowledge_dir().display());
        Some(
            xo_knowledge::service::start(&cfg, bus.clone())
                .await
                .context("starting the knowledge store")?,
        )
    } else {
        None
    };
    let review = start_review(&cfg, &bus).await?;
    let fleet = start_fleet(&cfg, &bus).await?;
    let res = xo_supervisor::run(cfg, bus, store, shutdown_signal()).await;
    for h in fleet {
        h.abort();
    }
    if let Some(r) = review {
        r.abort();
    }
    if let Some(k) = knowledge {
        k.stop().await;
    }
    queue.stop().await;
    if let Some((stop, server)) = socket {
        let _ = stop.send(());
        let _ = server.await;
    }
    telemetry.shutdown();
    res?;
    eprintln!("xo up: stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

pub async fn serve_supervisor(cfg: XoConfig) -> anyhow::Result<ExitCode> {
    if cfg.nats.url.is_empty() {
        anyhow::bail!(
            "serve supervisor needs NATS: pass --nats URL (or set XO_NATS_URL); for one process with no server use `xo up`"
        );
    }
    let mut telemetry = xo_runtime::telemetry::init(&cfg.telemetry, "xo-supervisor")
        .map_err(|e| anyhow::anyhow!(e))?;
    let (bus, store) = nats(&cfg, "xo-supervisor").await?;
    let review = start_review(&cfg, &bus).await?;
    let fleet = start_fleet(&cfg, &bus).await?;
    let res = xo_supervisor::run(cfg, bus, store, shutdown_signal()).await;
    for h in fleet {
        h.abort();
    }
    if let Some(r) = review {
        r.abort();
    }
    telemetry.shutdown();
    res?;
    Ok(ExitCode::SUCCESS)
}

pub async fn serve_queue(cfg: XoConfig) -> anyhow::Result<ExitCode> {
    if cfg.nats.url.is_empty() {
        anyhow::bail!(
            "serve queue needs NATS: pass --nats URL (or set XO_NATS_URL); for one process with no server use `xo up`"
        );
    }
    let mut telemetry =
        xo_runtime::telemetry::init(&cfg.telemetry, "xo-queue").map_err(|e| anyhow::anyhow!(e))?;
    let (bus, store) = nats(&cfg, "xo-queue").await?;
    let res = xo_queue::run(cfg, bus, store, shutdown_signal()).await;
    telemetry.shutdown();
    res?;
    Ok(ExitCode::SUCCESS)
}

/// `xo serve runner --role ROLE`: a specialist on NATS (or, with no NATS
/// URL, on the socket of a running `xo up`).
pub async fn serve_runner(
    mut cfg: XoConfig,
    role: String,
    unit: Option<String>,
) -> anyhow::Result<ExitCode> {
    let unit = unit.unwrap_or_else(|| xo_runner::service::default_unit(&role));
    // With credentials, a runner's replies come to its own inbox (the only
    // one its NATS user may subscribe to).
    if !cfg.nats.user.is_empty() && cfg.nats.inbox_prefix.is_empty() {
        cfg.nats.inbox_prefix = crate::nats_config::runner_inbox(&unit);
    }
    let mut telemetry =
        xo_runtime::telemetry::init(&cfg.telemetry, "xo-runner").map_err(|e| anyhow::anyhow!(e))?;
    let bus = if cfg.nats.url.is_empty() {
        crate::connect::client_bus(&cfg).await?
    } else {
        nats(&cfg, &format!("xo-runner-{unit}")).await?.0
    };
    let res = xo_runner::service::run(
        cfg,
        bus,
        xo_runner::service::RunnerOptions { role, unit },
        shutdown_signal(),
    )
    .await;
    telemetry.shutdown();
    res?;
    Ok(ExitCode::SUCCESS)
}

/// The review supervisors run in the XO's process (when enabled).
async fn start_review(
    cfg: &XoConfig,
    bus: &Bus,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if !(cfg.review.enabled && cfg.supervisor.enabled) {
        return Ok(None);
    }
    if cfg.review.model.model.is_empty() {
        tracing::warn!(
            "no review model configured (review.model.model): review supervisors will skip their runs"
        );
    }
    Ok(Some(
        xo_knowledge::review::start(cfg.clone(), bus.clone())
            .await
            .context("starting the review supervisors")?,
    ))
}

/// `xo serve knowledge`: the knowledge store alone, for containers.
pub async fn serve_knowledge(cfg: XoConfig) -> anyhow::Result<ExitCode> {
    if cfg.nats.url.is_empty() {
        anyhow::bail!(
            "serve knowledge needs NATS: pass --nats URL (or set XO_NATS_URL); for one process with no server use `xo up`"
        );
    }
    let mut telemetry = xo_runtime::telemetry::init(&cfg.telemetry, "xo-knowledge")
        .map_err(|e| anyhow::anyhow!(e))?;
    let (bus, _) = nats(&cfg, "xo-knowledge").await?;
    let k = xo_knowledge::service::start(&cfg, bus).await?;
    shutdown_signal().await;
    k.stop().await;
    telemetry.shutdown();
    Ok(ExitCode::SUCCESS)
}

/// The fleet manager runs in the XO's process when `fleet.backend = "docker"`.
async fn start_fleet(
    cfg: &XoConfig,
    bus: &Bus,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    if cfg.fleet.backend != xo_runtime::config::FleetBackend::Docker {
        return Ok(Vec::new());
    }
    xo_fleet::service::start(cfg, bus.clone())
        .await
        .context("starting the fleet manager (fleet.backend = \"docker\")")
}
