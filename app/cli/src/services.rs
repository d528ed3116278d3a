//! `xo up` and `xo serve`: each names its services as a [`Plan`] and runs
//! it with the [`Fabric`] until ctrl-c or SIGTERM.

use std::process::ExitCode;

use tracing::info;
use xo_runner::RunnerOptions;
use xo_runtime::XoConfig;

use crate::cli::ServeCmd;
use crate::fabric::{Fabric, Plan, Transport};

/// Resolves on ctrl-c or SIGTERM.
pub async fn shutdown_signal() {
    match Stop::install() {
        Ok(stop) => stop.requested(1).await,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    info!("shutdown requested");
}

/// SIGINT and SIGTERM, listened to from the moment a command starts (not
/// once its services are up: a service waiting for NATS or for `xo up`
/// stops on the first signal too), and counted: the first stops the
/// services within `state.stop_grace_ms`, a second exits at once.
#[derive(Clone)]
pub struct Stop(tokio::sync::watch::Receiver<u32>);

impl Stop {
    pub fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let (tx, rx) = tokio::sync::watch::channel(0u32);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                tx.send_modify(|n| *n += 1);
            }
        });
        Ok(Self(rx))
    }

    /// Resolves once `n` signals have come.
    pub fn requested(&self, n: u32) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|got| *got >= n).await;
        }
    }
}

/// Starts the fabric unless a signal comes first (NATS down, `xo up` not
/// there yet: starting can wait on them for as long as they are away).
async fn start_or_stop(
    stop: &Stop,
    start: impl std::future::Future<Output = anyhow::Result<Fabric>>,
    what: &str,
) -> anyhow::Result<Option<Fabric>> {
    tokio::select! {
        f = start => f.map(Some),
        _ = stop.requested(1) => {
            errln!("{what}: stopped before it started (it was waiting for its bus)");
            Ok(None)
        }
    }
}

/// Runs until the first signal, then stops the services; a stop that takes
/// longer than `state.stop_grace_ms` (a store or NATS that does not answer),
/// or a second signal, ends the process without waiting, saying so.
async fn run(fabric: Fabric, stop: &Stop, cfg: &XoConfig, what: &str) -> anyhow::Result<()> {
    let grace = std::time::Duration::from_millis(cfg.state.stop_grace_ms);
    let first = stop.requested(1);
    let running = fabric.run_until(async move {
        first.await;
        info!("shutdown requested");
    });
    tokio::pin!(running);
    let over_grace = {
        let first = stop.requested(1);
        async move {
            first.await;
            tokio::time::sleep(grace).await;
        }
    };
    tokio::select! {
        r = &mut running => r,
        _ = over_grace => anyhow::bail!(
            "{what}: the services did not stop within state.stop_grace_ms ({} ms; is NATS or the store answering?): exited without waiting; what they had not written is written again by their next start from the store and the runners' heartbeats",
            grace.as_millis()
        ),
        _ = stop.requested(2) => anyhow::bail!(
            "{what}: a second signal: exited without waiting for the services to stop"
        ),
    }
}

/// Every service in one process: the embedded bus and file store (served to
/// local `xo` commands over `./.xo/bus.sock`), or NATS when configured.
pub async fn up(cfg: XoConfig) -> anyhow::Result<ExitCode> {
    let stop = Stop::install()?;
    let start = Fabric::start(&cfg, Plan::all(), Transport::UpDefault, "xo", "xo-up");
    let Some(fabric) = start_or_stop(&stop, start, "xo up").await? else {
        return Ok(ExitCode::SUCCESS);
    };
    if cfg.nats.url.is_empty() {
        errln!("xo up: embedded bus, no server needed");
        errln!("  state:  {}", cfg.state.store_dir().display());
        errln!(
            "  socket: {} (other `xo` commands here use it)",
            cfg.state.socket_path().display()
        );
    } else {
        errln!(
            "xo up: on NATS {}; state in JetStream buckets",
            xo_bus::nats::redact_url(&cfg.nats.url)
        );
    }
    if !cfg.supervisor.volume.is_empty() {
        errln!("  volume: {} (reports/, steering/)", cfg.supervisor.volume);
    }
    errln!(
        "  prefix: {} — try `xo tap` and `xo units` in another terminal; ctrl-c stops",
        cfg.org.prefix
    );
    errln!("  audit:  {}", cfg.data_dir().display());
    if cfg.knowledge.enabled {
        errln!("  knowledge: {}", cfg.knowledge_dir().display());
    }
    errln!("  runtime: {}", runtime_threads());
    say_console(&fabric, &cfg);
    run(fabric, &stop, &cfg, "xo up").await?;
    errln!("xo up: stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

/// The threads the process's runtime runs its tasks on
/// (`state.runtime_threads`), as the runtime itself counts them.
fn runtime_threads() -> String {
    let rt = tokio::runtime::Handle::current();
    match rt.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => {
            "one thread (state.runtime_threads = 1)".into()
        }
        _ => format!("{} worker threads", rt.metrics().num_workers()),
    }
}

/// Where the console is and how to log in (or why it is not there).
pub fn say_console(fabric: &Fabric, cfg: &XoConfig) {
    match fabric.console() {
        Some(c) => {
            use std::io::IsTerminal;
            let reads = if c.console.auth.open_reads() {
                "reads open on loopback"
            } else {
                "every page needs the token"
            };
            errln!("  console: {} ({reads})", c.url);
            errln!(
                "           {}",
                c.login_hint(std::io::stderr().is_terminal())
            );
        }
        None if cfg.console.enabled => errln!(
            "  console: not started ({} in use? see the log; set console.listen)",
            cfg.console.listen
        ),
        None => {}
    }
}

/// `xo serve <service>`: one service (or, for the supervisor, the XO with
/// its review supervisors and fleet manager) in this process.
pub async fn serve(cfg: XoConfig, plan: Plan, service: &'static str) -> anyhow::Result<ExitCode> {
    // Runners and the console are clients: NATS, or a running `xo up`'s socket.
    let client_only = !(plan.queue
        || plan.knowledge
        || plan.review
        || plan.fleet
        || plan.supervisor
        || plan.notify);
    let transport = if client_only {
        Transport::Client
    } else {
        Transport::Nats
    };
    let name = match plan.runners.first() {
        Some(r) => format!("xo-runner-{}", r.unit),
        None => service.to_string(),
    };
    let stop = Stop::install()?;
    let what = format!("xo serve {}", service.trim_start_matches("xo-"));
    let start = Fabric::start(&cfg, plan, transport, service, &name);
    let Some(fabric) = start_or_stop(&stop, start, &what).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    errln!("{what}: runtime on {}", runtime_threads());
    if let Some(c) = fabric.console() {
        use std::io::IsTerminal;
        errln!(
            "xo serve console: {} — {}",
            c.url,
            c.login_hint(std::io::stderr().is_terminal())
        );
    }
    run(fabric, &stop, &cfg, &what).await?;
    Ok(ExitCode::SUCCESS)
}

/// The plan of `xo serve supervisor`: the XO, its reviewers and its fleet manager.
pub fn supervisor_plan() -> Plan {
    Plan {
        supervisor: true,
        review: true,
        fleet: true,
        notify: true,
        ..Plan::default()
    }
}

/// `xo serve runner --role ROLE`: a specialist on NATS (or, with no NATS
/// URL, on the socket of a running `xo up`).
pub async fn serve_runner(
    mut cfg: XoConfig,
    role: String,
    unit: Option<String>,
) -> anyhow::Result<ExitCode> {
    if let Some(why) = xo_pipeline::driver::idle_agent(&cfg.runner.driver) {
        anyhow::bail!("{why}");
    }
    let unit = unit.unwrap_or_else(|| xo_runner::default_unit(&role));
    // With credentials, a runner's replies come to its own inbox (the only
    // one its NATS user may subscribe to).
    if !cfg.nats.user.is_empty() && cfg.nats.inbox_prefix.is_empty() {
        cfg.nats.inbox_prefix = crate::nats_config::runner_inbox(&unit);
    }
    let plan = Plan {
        runners: vec![RunnerOptions { role, unit }],
        ..Plan::default()
    };
    serve(cfg, plan, "xo-runner").await
}

/// `xo serve SERVICE`: one service (a plan of one) run by the fabric.
pub async fn serve_cmd(cfg: XoConfig, service: ServeCmd) -> anyhow::Result<ExitCode> {
    match service {
        ServeCmd::Supervisor => serve(cfg, supervisor_plan(), "xo-supervisor").await,
        ServeCmd::Queue => {
            let plan = Plan {
                queue: true,
                ..Default::default()
            };
            serve(cfg, plan, "xo-queue").await
        }
        ServeCmd::Runner {
            role,
            unit,
            driver,
            script,
            sandbox,
        } => {
            let mut o = Vec::new();
            if let Some(d) = driver {
                o.push(("runner.driver.kind".to_string(), d));
            }
            if let Some(s) = script {
                o.push(("runner.driver.script".to_string(), s));
            }
            if let Some(s) = sandbox {
                o.push(("runner.sandbox".to_string(), s));
            }
            let cfg = if o.is_empty() { cfg } else { reload(&cfg, o)? };
            serve_runner(cfg, role, unit).await
        }
        ServeCmd::Console { listen, read_only } => {
            let mut cfg = cfg;
            if let Some(l) = listen {
                cfg.console.listen = l;
            }
            cfg.console.read_only |= read_only;
            cfg.console.enabled = true;
            cfg.validate()?;
            let plan = Plan {
                console: crate::fabric::ConsoleMode::Required,
                ..Default::default()
            };
            serve(cfg, plan, "xo-console").await
        }
        ServeCmd::Knowledge => {
            let plan = Plan {
                knowledge: true,
                ..Default::default()
            };
            serve(cfg, plan, "xo-knowledge").await
        }
        ServeCmd::Notify => {
            let plan = Plan {
                notify: true,
                ..Default::default()
            };
            serve(cfg, plan, "xo-notify").await
        }
    }
}

/// The configuration again with more overrides (flags of one subcommand).
fn reload(cfg: &XoConfig, extra: Vec<(String, String)>) -> anyhow::Result<XoConfig> {
    let mut cfg = cfg.clone();
    for (k, v) in extra {
        match k.as_str() {
            "runner.driver.kind" => {
                cfg.runner.driver.kind =
                    serde_json::from_value(serde_json::Value::String(v.clone())).map_err(|_| {
                        anyhow::anyhow!("--driver {v:?}: use command, openai or script")
                    })?
            }
            "runner.driver.script" => cfg.runner.driver.script = v,
            "runner.sandbox" => cfg.runner.sandbox = v,
            _ => {}
        }
    }
    cfg.validate()?;
    Ok(cfg)
}
