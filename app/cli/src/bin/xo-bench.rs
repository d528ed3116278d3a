//! `xo-bench`: the benches (`xo bench …` runs this binary in its place).
//! They start services through the fabric and nats-servers through the
//! tests' guards, so they live beside `xo`, not in it: the product binary
//! links neither the benches nor the test harness.

use std::process::ExitCode;

use clap::Parser;

#[path = "../globals.rs"]
mod globals;

/// The product's allocator, inside the fuzz bench's counter of the largest
/// allocation (idle until `xo bench fuzz` runs).
#[global_allocator]
static GLOBAL: xo_bench::Peak<mimalloc::MiMalloc> = xo_bench::Peak(mimalloc::MiMalloc);

#[derive(Debug, Parser)]
#[command(
    name = "xo bench",
    bin_name = "xo bench",
    version,
    about = "Benchmarks that print figures against a baseline measured in the same run"
)]
struct BenchCli {
    #[command(flatten)]
    globals: globals::Globals,
    #[command(subcommand)]
    what: xo_bench::BenchCmd,
}

fn main() -> ExitCode {
    let cli = BenchCli::parse();
    let (cfg, rt) = match cli.globals.start() {
        Ok(started) => started,
        Err((code, why)) => {
            eprintln!("{why}");
            return code;
        }
    };
    match rt.block_on(xo_bench::run(&cfg, cli.what)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
