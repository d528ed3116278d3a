//! `xo`: every XO service and every operator command in one binary.
//!
//! # Layout
//!
//! - `main.rs`: reads the configuration, starts the runtime, hands each
//!   command to the module that runs it.
//! - [`cli`]: the command line (clap): every command and flag.
//! - [`fleet_ops`]: `xo fleet ls|scale|restart`.
//! - [`connect`]: which bus a command talks to (NATS, the local socket of a
//!   running `xo up`, or a clear error saying how to start one).
//! - [`fabric`]: the one place that starts the services of a process (a
//!   [`fabric::Plan`]) and stops them in order.
//! - [`services`]: `xo up` and `xo serve …`, each a plan run by the fabric.
//! - [`demo`]: `xo up --demo` (a plan with three scripted runners, and a timeline).
//! - [`hook`]: `xo hook claude`, Claude Code's hook that delivers steering to a running agent.
//! - [`watch`]: `xo watch FORMAT DIR…` (live transcripts of agents outside XO → SALUTE, steering via the hook).
//! - [`import`]: `xo import FORMAT FILE…` (agent logs → SALUTE lines, via `xo-sensor`).
//! - [`ops`]: operator commands (`report`, `tap`, `units`, `steer`, `radio replay`).
//! - [`queue_ops`]: the control plane (`init`, `goal`, `enqueue`, `start`, `status`, `audit`…).
//! - [`knowledge_ops`]: `knowledge ls|show|seed|deprecate`, `directives`, `review log`.
//! - [`nats_config`]: `xo nats-config` (NATS users and permissions per service and runner).
//! - [`globals`]: the options every command takes.
//! - `xo bench …`: handed to the `xo-bench` binary beside `xo`
//!   (`src/bin/xo-bench.rs`, the `xo-bench` crate in `app/bench`): the
//!   benches and their test harness are not linked into `xo`.

#[macro_use]
mod term;
mod cli;
mod demo;
mod fleet_ops;
mod globals;
mod hook;
mod import;
mod knowledge_ops;
mod ops;
mod queue_ops;
mod services;
mod watch;

use std::process::ExitCode;

use clap::Parser;

/// glibc's allocator spent ~40% of the supervisor's CPU on cross-thread
/// frees under fleet load (see docs/performance.md); mimalloc does not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use xo_runtime::XoConfig;

use xo_fabric::{connect, fabric, nats_config};

use crate::cli::{AuditCmd, Cli, Cmd, GoalCmd, RadioCmd, ReviewCmd, StoreCmd, TaskCmd};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Bench { args } = &cli.cmd {
        return bench(&cli.globals, args);
    }
    let (cfg, rt) = match cli.globals.start() {
        Ok(started) => started,
        Err((code, why)) => {
            errln!("{why}");
            return code;
        }
    };
    let res = rt.block_on(dispatch(cli.cmd, cfg));
    match res {
        Ok(code) => code,
        // Its reader went away (`xo import … | head`): done, quietly.
        Err(e) if term::is_closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `xo bench …`: the `xo-bench` binary beside this one (or `XO_BENCH_BIN`)
/// runs in this process's place, with the same options; it finds this
/// binary through `XO_BIN` to start services as processes.
fn bench(globals: &globals::Globals, args: &[std::ffi::OsString]) -> ExitCode {
    let me = std::env::current_exe().ok();
    let named = std::env::var_os("XO_BENCH_BIN").map(std::path::PathBuf::from);
    if let Some(n) = named.as_ref().filter(|n| !n.is_file()) {
        errln!(
            "error: XO_BENCH_BIN names {}, which is not a file: point it at the xo-bench binary, or unset it to use the one beside xo",
            n.display()
        );
        return ExitCode::from(2);
    }
    let bin = named.or_else(|| me.as_ref().map(|m| m.with_file_name("xo-bench")));
    let Some(bin) = bin.filter(|b| b.is_file()) else {
        errln!(
            "error: `xo bench` runs the xo-bench binary, which is not beside {}; build it with \
             `cargo build --release -p xo-cli --bin xo-bench` (or set XO_BENCH_BIN to its path)",
            me.map(|m| m.display().to_string())
                .unwrap_or_else(|| "xo".into())
        );
        return ExitCode::from(2);
    };
    let mut cmd = std::process::Command::new(&bin);
    cmd.args(globals.args()).args(args);
    if let Some(m) = me {
        cmd.env("XO_BIN", m);
    }
    use std::os::unix::process::CommandExt;
    let e = cmd.exec();
    errln!("error: cannot run {}: {e}", bin.display());
    ExitCode::FAILURE
}

async fn dispatch(cmd: Cmd, cfg: XoConfig) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Up { demo: true, keep } => demo::demo(cfg, keep).await,
        Cmd::Up { demo: false, .. } => services::up(cfg).await,
        Cmd::Serve { service } => services::serve_cmd(cfg, service).await,
        Cmd::Init {
            mode,
            manager,
            force,
        } => queue_ops::init(&cfg, &mode, manager, force).await,
        Cmd::Goal {
            cmd:
                GoalCmd::Set {
                    description,
                    project,
                    completed,
                    budget_usd,
                },
        } => queue_ops::goal(&cfg, description, project, completed, budget_usd).await,
        Cmd::Enqueue { file } => queue_ops::enqueue(&cfg, &file).await,
        Cmd::Start => {
            queue_ops::simple(
                &cfg,
                xo_proto::queue::Start {
                    by: queue_ops::by(),
                },
            )
            .await
        }
        Cmd::Step => queue_ops::simple(&cfg, xo_proto::queue::Step {}).await,
        Cmd::Resume => {
            queue_ops::simple(
                &cfg,
                xo_proto::queue::Resume {
                    by: queue_ops::by(),
                },
            )
            .await
        }
        Cmd::Halt { reason } => {
            let by = queue_ops::by();
            queue_ops::simple(&cfg, xo_proto::queue::Halt { reason, by }).await
        }
        Cmd::Status { json } => queue_ops::status(&cfg, json).await,
        Cmd::Tasks { state, json } => queue_ops::tasks(&cfg, state, json).await,
        Cmd::Task {
            cmd: TaskCmd::Diff { task, stat, json },
        } => queue_ops::task_diff(&cfg, &task, stat, json).await,
        Cmd::Answer { task, text } => {
            queue_ops::task_op(
                &cfg,
                xo_proto::queue::Answer {
                    task_id: task,
                    text,
                    by: queue_ops::by(),
                },
            )
            .await
        }
        Cmd::Retry { task } => {
            let by = queue_ops::by();
            queue_ops::task_op(&cfg, xo_proto::queue::RetryTask { task_id: task, by }).await
        }
        Cmd::Cancel { task } => {
            let by = queue_ops::by();
            queue_ops::task_op(&cfg, xo_proto::queue::Cancel { task_id: task, by }).await
        }
        Cmd::Audit {
            cmd: AuditCmd::Verify { project },
        } => queue_ops::audit_verify(&cfg, &project).await,
        Cmd::Store {
            cmd: StoreCmd::Repair { files },
        } => ops::store_repair(&cfg, &files).await,
        Cmd::Audit {
            cmd:
                AuditCmd::Tail {
                    project,
                    follow,
                    lines,
                },
        } => queue_ops::audit_tail(&cfg, &project, follow, lines).await,
        Cmd::Fleet { cmd } => fleet_ops::run(&cfg, cmd).await,
        Cmd::Knowledge { cmd } => knowledge_ops::run(&cfg, cmd).await,
        Cmd::Directives { json } => knowledge_ops::directives(&cfg, json).await,
        Cmd::Review {
            cmd: ReviewCmd::Log { json },
        } => knowledge_ops::review_log(&cfg, json).await,
        Cmd::Report { file } => ops::report(&cfg, &file).await,
        Cmd::Tap {
            subject,
            json,
            count,
        } => ops::tap(&cfg, subject, json, count).await,
        Cmd::Units { unit, json, needs } => ops::units(&cfg, unit, json, needs).await,
        Cmd::Steer {
            unit,
            text,
            severity,
        } => ops::steer(&cfg, unit, text, &severity).await,
        Cmd::Ack {
            unit,
            why,
            for_,
            by,
        } => ops::ack(&cfg, unit, why, &for_, by).await,
        Cmd::Radio {
            cmd:
                RadioCmd::Replay {
                    file,
                    summary,
                    json,
                    explain,
                },
        } => ops::replay(&cfg, &file, summary, json, explain),
        Cmd::Watch {
            format,
            dirs,
            role,
            poll_ms,
            from_start,
            max_cost,
            max_tokens,
            max_cost_per_day,
            max_tokens_per_day,
        } => {
            let args = xo_runner::watch::WatchArgs {
                format,
                dirs,
                role,
                poll_ms,
                from_start,
                caps: xo_runner::watch::Caps {
                    cost_usd: max_cost,
                    tokens: max_tokens,
                    cost_usd_per_day: max_cost_per_day,
                    tokens_per_day: max_tokens_per_day,
                },
            };
            watch::watch(&cfg, args, services::shutdown_signal()).await
        }
        Cmd::Hook { agent, install } => match install {
            Some(dir) => hook::install(&agent, &dir).await,
            None => hook::answer_hook(&agent, &cfg),
        },
        Cmd::Import {
            format,
            files,
            role,
            label,
            stats,
            lenient,
        } => import::import(&import::ImportArgs {
            format,
            files,
            role,
            label,
            context_limit: cfg.runner.context_limit,
            stats,
            lenient,
        }),
        Cmd::Bench { .. } => unreachable!("handed to xo-bench before the runtime starts"),
        Cmd::NatsConfig {
            runners,
            port,
            store_dir,
            shared_runner,
            partitions,
            cluster_routes,
        } => {
            let text = nats_config::render(&nats_config::Spec {
                prefix: &cfg.org.prefix,
                runners: &runners,
                shared_runner: shared_runner.as_deref(),
                port,
                jetstream_dir: &store_dir,
                partitions: partitions.unwrap_or(cfg.supervisor.partitions),
                cluster_routes: &cluster_routes,
            })
            .map_err(anyhow::Error::msg)?;
            out!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Config => ops::show_config(&cfg),
    }
}
