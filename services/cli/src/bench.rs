//! `xo bench`.

use std::process::ExitCode;

use xo_runtime::XoConfig;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// Detector throughput, end to end over NATS, and a fleet soak.
    Radio,
}

pub async fn run(_cfg: &XoConfig, _what: BenchCmd) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet")
}
