//! `xo bench watch`: the CPU of `xo watch` following N live transcripts
//! appended at one line a second each, beside the same watch over the same
//! files when nothing is appended (its scanning alone), measured in the
//! same run on a nats-server of the bench's own.

use std::io::Write;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use super::util::{clock_ticks, proc_cpu_ticks, start_nats, tempfile_dir, verdict};

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Transcript files watched.
    #[arg(long, default_value_t = 1_000)]
    files: usize,
    /// Seconds measured, idle and appended each.
    #[arg(long, default_value_t = 20)]
    secs: u64,
    /// The nats-server binary.
    #[arg(long, default_value = "nats-server")]
    nats_server: String,
}

/// One agent turn: a tool call and its result (two lines).
fn turn(i: u64, f: usize) -> String {
    format!(
        "{{\"type\":\"assistant\",\"sessionId\":\"s{f}\",\"message\":{{\"id\":\"m{i}\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"t{i}\",\"name\":\"Read\",\"input\":{{\"file_path\":\"src/f{i}.rs\"}}}}],\"usage\":{{\"input_tokens\":1000,\"output_tokens\":20}}}}}}\n\
         {{\"type\":\"user\",\"sessionId\":\"s{f}\",\"message\":{{\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"t{i}\",\"content\":\"fn f{i}() {{}}\"}}]}}}}\n"
    )
}

pub async fn run(args: WatchArgs) -> anyhow::Result<ExitCode> {
    let nats = start_nats(&args.nats_server)?;
    let dir = tempfile_dir::Dir::new("watch")?;
    let files: Vec<std::path::PathBuf> = (0..args.files)
        .map(|f| dir.0.join(format!("session-{f}.jsonl")))
        .collect();
    for (f, p) in files.iter().enumerate() {
        std::fs::write(p, turn(0, f))?;
    }
    // Counts what the watch publishes, to show it did the work.
    let bus = xo_bus::NatsBus::connect(nats.url(), Default::default()).await?;
    // The watch is given its prefix: the bench reads the same subjects,
    // whatever xo.toml or the environment would say.
    let prefix = "xobench";
    let subjects = xo_proto::Subjects::new(prefix);
    let mut reports = xo_bus::Bus::Nats(bus)
        .subscribe(&subjects.salute_all())
        .await?;
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = counted.clone();
    tokio::spawn(async move {
        while reports.next().await.is_some() {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let exe = crate::util::xo_exe()?;
    let mut child = Command::new(exe)
        .args(["--nats", nats.url(), "watch", "claude"])
        .arg(&dir.0)
        .args(["--poll-ms", "500"])
        .env("XO__ORG__PREFIX", prefix)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let hz = clock_ticks() as f64;
    // Let it find every file before measuring.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let measure = |secs: u64, append: bool| -> anyhow::Result<(f64, u64)> {
        let t0 = proc_cpu_ticks(pid)?;
        let begun = Instant::now();
        let mut written = 0u64;
        let mut i = 1u64;
        while begun.elapsed() < Duration::from_secs(secs) {
            let tick = Instant::now();
            if append {
                // One line a second for every file, in ten slices a second.
                for (f, p) in files.iter().enumerate().skip((i % 10) as usize).step_by(10) {
                    let mut h = std::fs::OpenOptions::new().append(true).open(p)?;
                    h.write_all(turn(i, f).as_bytes())?;
                    written += 1;
                }
                i += 1;
            }
            std::thread::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed()));
        }
        let cpu = (proc_cpu_ticks(pid)? - t0) as f64 / hz / begun.elapsed().as_secs_f64();
        Ok((cpu * 100.0, written))
    };
    let (idle, _) = measure(args.secs, false)?;
    let before = counted.load(std::sync::atomic::Ordering::Relaxed);
    let (busy, written) = measure(args.secs, true)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let published = counted.load(std::sync::atomic::Ordering::Relaxed) - before;
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "== watch: {} transcripts, {} s each phase",
        args.files, args.secs
    );
    println!("   baseline: scanning, nothing appended   {idle:>6.2}% of one core");
    println!(
        "   appended 1 turn/s per file ({:.0} turns/s, {published} of {written} reported)   {busy:>6.2}% of one core   ratio {:.1}   target < 10%: {}",
        written as f64 / args.secs as f64,
        if idle > 0.0 {
            busy / idle
        } else {
            f64::INFINITY
        },
        verdict(busy < 10.0)
    );
    Ok(ExitCode::SUCCESS)
}
