//! Which bus a command talks to: NATS when a URL is given (`--nats`,
//! `XO_NATS_URL`, `nats.url`), else the socket of a running `xo up`, else a
//! clear error saying how to start one.

use anyhow::{Context, bail};
use xo_bus::typed::CallError;
use xo_bus::{Bus, BusError, Client, NatsBus, SocketBus, nats::ConnectOptions};
use xo_proto::Request;
use xo_runtime::XoConfig;

/// A command's client of the fabric's services: [`client_bus`]'s
/// connection and this configuration's subjects.
pub async fn client(cfg: &XoConfig) -> anyhow::Result<Client> {
    Ok(Client::new(client_bus(cfg).await?, cfg.subjects()))
}

/// A call's error as a command says it: with no service answering `R`'s
/// verb, which service to start.
pub fn no_service<R: Request>(e: CallError) -> anyhow::Error {
    match e {
        CallError::Bus(BusError::NoResponders { .. }) => anyhow::anyhow!(
            "no {} service is running: start `xo up` (or `xo serve {} --nats URL`)",
            R::SERVICE,
            R::SERVICE
        ),
        other => other.into(),
    }
}

pub fn nats_options(cfg: &XoConfig, name: &str, retry: bool) -> ConnectOptions {
    ConnectOptions {
        name: name.into(),
        retry_initial: retry,
        user: (!cfg.nats.user.is_empty()).then(|| cfg.nats.user.clone()),
        password: (!cfg.nats.password.is_empty()).then(|| cfg.nats.password.clone()),
        inbox_prefix: (!cfg.nats.inbox_prefix.is_empty()).then(|| cfg.nats.inbox_prefix.clone()),
        tls_ca: (!cfg.nats.tls_ca_file.is_empty()).then(|| cfg.nats.tls_ca_file.clone().into()),
        tls_cert: (!cfg.nats.tls_cert_file.is_empty()).then(|| {
            (
                cfg.nats.tls_cert_file.clone().into(),
                cfg.nats.tls_key_file.clone().into(),
            )
        }),
        ping_interval: Some(std::time::Duration::from_millis(cfg.nats.ping_interval_ms)),
        subscription_capacity: (cfg.nats.subscription_capacity > 0)
            .then_some(cfg.nats.subscription_capacity),
    }
}

pub async fn client_bus(cfg: &XoConfig) -> anyhow::Result<Bus> {
    if !cfg.nats.url.is_empty() {
        let bus = NatsBus::connect(&cfg.nats.url, nats_options(cfg, "xo-cli", false))
            .await
            .with_context(|| {
                format!(
                    "is a nats-server running at {}?",
                    xo_bus::nats::redact_url(&cfg.nats.url)
                )
            })?;
        return Ok(Bus::Nats(bus));
    }
    let path = cfg.state.socket_path();
    socket_bus(&path).await
}

/// The bus of a service that runs as a client (`xo serve runner`, `xo serve
/// console`): NATS (whose client retries by itself), or the socket of
/// `xo up`, waited for while nothing serves it (started before `xo up`, or
/// while it restarts), retrying every 100 ms up to every 2 s. A socket
/// served by another user, or whose token cannot be read, is an error at
/// once.
pub async fn service_client_bus(cfg: &XoConfig) -> anyhow::Result<Bus> {
    if !cfg.nats.url.is_empty() {
        return client_bus(cfg).await;
    }
    let path = cfg.state.socket_path();
    let mut wait = std::time::Duration::from_millis(100);
    let mut said = false;
    loop {
        match SocketBus::connect(&path).await {
            Ok(b) => {
                if said {
                    tracing::info!(socket = %path.display(), "xo up answered; starting");
                }
                return Ok(Bus::Socket(b));
            }
            Err(e @ (xo_bus::BusError::NotOurs { .. } | xo_bus::BusError::Token { .. })) => {
                bail!("refused: {e}")
            }
            Err(e) => {
                if !said {
                    tracing::warn!(socket = %path.display(), error = %e, "waiting for the bus: nothing serves the socket yet; start `xo up` in this directory (or pass --nats URL); ctrl-c stops");
                    said = true;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(2));
            }
        }
    }
}

async fn socket_bus(path: &std::path::Path) -> anyhow::Result<Bus> {
    match SocketBus::connect(path).await {
        Ok(b) => Ok(Bus::Socket(b)),
        // Served, but not by this user: say so, not "nothing is serving".
        Err(e @ xo_bus::BusError::NotOurs { .. }) => bail!("refused: {e}"),
        // Served, but its token cannot be read (a confined agent): say so.
        Err(e @ xo_bus::BusError::Token { .. }) => bail!("refused: {e}"),
        Err(_) => bail!(
            "no bus: nothing is serving {} — start one with `xo up` in this directory, or pass --nats URL (or set XO_NATS_URL)",
            path.display()
        ),
    }
}
