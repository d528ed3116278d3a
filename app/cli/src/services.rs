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

/// Every service in one process: the embedded bus and file store (served to
/// local `xo` commands over `./.xo/bus.sock`), or NATS when configured.
pub async fn up(cfg: XoConfig) -> anyhow::Result<ExitCode> {
    let fabric = Fabric::start(&cfg, Plan::all(), Transport::UpDefault, "xo", "xo-up").await?;
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
    say_console(&fabric, &cfg);
    fabric.run_until(shutdown_signal()).await?;
    errln!("xo up: stopped cleanly");
    Ok(ExitCode::SUCCESS)
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
    let fabric = Fabric::start(&cfg, plan, transport, service, &name).await?;
    if let Some(c) = fabric.console() {
        use std::io::IsTerminal;
        errln!(
            "xo serve console: {} — {}",
            c.url,
            c.login_hint(std::io::stderr().is_terminal())
        );
    }
    fabric.run_until(shutdown_signal()).await?;
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
