//! `xo bench fuzz`: the fuzz targets of the tests (`xo_tests::fuzz`: every
//! reader of outside input), run long. Each target gets `--cases` cases
//! (the console a tenth), on a thread of its own; a failure names the
//! target and the input proptest shrank it to, and the run goes on with the
//! next target. The largest single allocation is checked as in the test
//! (`xo-bench`'s allocator counts it).

use std::process::ExitCode;
use std::time::Instant;

use xo_tests::fuzz;

#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Cases per target (the console's HTTP bodies get a tenth).
    #[arg(long, default_value_t = 200_000)]
    cases: u32,
    /// Only these targets (repeat the option); `--list` names them.
    #[arg(long)]
    only: Vec<String>,
    /// Name the targets and stop.
    #[arg(long)]
    list: bool,
}

pub fn run(a: FuzzArgs) -> anyhow::Result<ExitCode> {
    let names: Vec<&str> = fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    if a.list {
        for n in &names {
            println!("{n}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(bad) = a.only.iter().find(|o| !names.contains(&o.as_str())) {
        anyhow::bail!(
            "--only {bad}: no such fuzz target; the targets are {}",
            names.join(", ")
        );
    }
    if !fuzz::allocations_recorded() {
        println!(
            "note: allocations are not counted by this binary's allocator; the allocation bound is not checked"
        );
    }
    fuzz::set_cases(a.cases);
    println!(
        "xo bench fuzz: {} cases per target (the console {})",
        a.cases,
        (a.cases / 10).max(10)
    );
    let mut failed = Vec::new();
    let t0 = Instant::now();
    for (name, target) in fuzz::TARGETS {
        if !a.only.is_empty() && !a.only.iter().any(|o| o == name) {
            continue;
        }
        let t = Instant::now();
        // A target that fails panics (proptest's shrunk input in the
        // message, printed by the panic hook): its thread says so.
        let ok = std::thread::Builder::new()
            .name(format!("fuzz-{name}"))
            .spawn(target)?
            .join()
            .is_ok();
        println!(
            "  {name:<22} {} in {:.1} s",
            if ok { "ok" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
        if !ok {
            failed.push(name);
        }
    }
    println!(
        "  {} targets in {:.1} s; {}",
        if a.only.is_empty() {
            names.len()
        } else {
            a.only.len()
        },
        t0.elapsed().as_secs_f64(),
        if failed.is_empty() {
            "no failure".to_string()
        } else {
            format!("FAILED: {}", failed.join(", "))
        }
    );
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
