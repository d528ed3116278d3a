//! `xo watch FORMAT DIR...`: supervise agents that run outside XO from
//! their live transcripts. The watch itself is a service
//! ([`xo_runner::watch`]); this command runs it in a fabric of its own on
//! the bus of this machine (NATS, or the socket of a running `xo up`).

use std::process::ExitCode;

use xo_runner::watch::WatchArgs;
use xo_runtime::XoConfig;

use crate::fabric::{Fabric, Plan, Transport};

/// `xo watch`: the watch until `shutdown`, with its own logs.
pub async fn watch(
    cfg: &XoConfig,
    args: WatchArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    xo_runner::watch::check(&args)?;
    let (format, dirs, from_start) = (args.format.clone(), args.dirs.join(", "), args.from_start);
    let plan = Plan {
        watches: vec![args],
        ..Plan::default()
    };
    let fabric = Fabric::start(cfg, plan, Transport::Client, "xo-watch", "xo-watch").await?;
    errln!(
        "xo watch: {format} sessions in {dirs} from {} — ctrl-c stops",
        if from_start { "their start" } else { "now on" }
    );
    fabric.run_until(shutdown).await?;
    Ok(ExitCode::SUCCESS)
}
