//! `xo bench …`: every figure next to a baseline measured in the same run.
//!
//! - `radio`: detector, ingest over NATS, steering latency, fleet soak;
//!   `sharded`: with `--supervisors N`, sharded supervisors (one server or a cluster);
//!   `scaling`: with `--supervisors N --scale-units U`, CPU per report as supervisors and units grow together.
//! - `queue`: claim + complete cycles beside raw key-value put + get.
//! - `pipeline`: the supervised pipeline's cost per task without the agent.
//! - `watch`: the CPU of `xo watch` over many live transcripts.
//! - `detection`: real recordings replayed, XO beside OpenHands' stuck-detector rules.
//! - `sensor`: agent event lines read per second, beside generic JSON parsing.
//! - `console`: SSE fan-out beside a raw bus subscription; pages with many units.
//! - `chaos`: the fabric as processes, SIGKILLed at random under load; invariants checked.
//! - `deck`: realistic reports encoded ahead, so the soak's load keeps its rate.
//! - `flow`: the raw NATS baseline, paced publishing and latency, shared by radio and sharded.
//! - `util`: a nats-server of the bench's own, percentiles, verdicts.

use xo_fabric::{connect, fabric, nats_config};

mod baseline;
mod chaos;
mod console;
mod console_tab;
mod deck;
pub mod detection;
pub mod fidelity;
mod flow;
mod fuzz;
mod pipeline;
mod queue;
mod radio;
mod reader;
mod scaling;
mod sensor;
mod sharded;
mod util;
mod watch;

use std::process::ExitCode;

use xo_runtime::XoConfig;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// Detector throughput, ingest over NATS, steering latency, fleet soak.
    Radio(radio::RadioArgs),
    /// Claim + complete cycles per second, on NATS and embedded, beside raw key-value put/get.
    Queue(queue::QueueArgs),
    /// Real recordings under a folder replayed: XO's steering beside OpenHands' stuck-detector rules, per format.
    Detection(detection::DetectionArgs),
    /// Agent event lines read per second by each format's sensor, beside generic JSON parsing.
    Sensor(sensor::SensorArgs),
    /// The CPU of `xo watch` following live transcripts (1 line/s each).
    Watch(watch::WatchArgs),
    /// SSE fan-out to many clients beside a raw bus subscription; fleet page and unit list with many units.
    Console(console::ConsoleArgs),
    /// The supervised pipeline's cost per task without the agent (compose, validate 20 criteria, format).
    Pipeline(pipeline::PipelineArgs),
    /// The fabric as processes over a real nats-server, one SIGKILLed at random every few seconds; invariants checked at the end.
    Chaos(chaos::ChaosArgs),
    /// The tests' fuzz targets (every reader of outside input), run long: no panic, named errors, bounded allocations.
    Fuzz(fuzz::FuzzArgs),
}

/// The allocator `xo-bench` installs around its own: it counts the largest
/// allocation for `xo bench fuzz` (one relaxed load an allocation before).
pub use xo_tests::fuzz::Peak;

pub async fn run(cfg: &XoConfig, what: BenchCmd) -> anyhow::Result<ExitCode> {
    match what {
        BenchCmd::Radio(a) => radio::run(cfg, a).await,
        BenchCmd::Queue(a) => queue::run(cfg, a).await,
        BenchCmd::Pipeline(a) => pipeline::run(cfg, a).await,
        BenchCmd::Sensor(a) => sensor::run(a).await,
        BenchCmd::Detection(a) => detection::run(cfg, a).await,
        BenchCmd::Watch(a) => watch::run(a).await,
        BenchCmd::Console(a) => console::run(cfg, a).await,
        BenchCmd::Chaos(a) => chaos::run(cfg, a).await,
        // The targets start their own runtimes: off this one's threads.
        BenchCmd::Fuzz(a) => tokio::task::spawn_blocking(move || fuzz::run(a)).await?,
    }
}
