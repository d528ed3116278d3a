//! A `docker-compose` project of the repository's `compose.yaml` for a test:
//! its own project name, ports and NATS passwords (the environment wins
//! over `./.env`); `down -v --remove-orphans` on drop.

use std::path::PathBuf;
use std::process::Command;

/// The compose users whose NATS passwords the project sets.
pub const USERS: [&str; 6] = [
    "SUPERVISOR",
    "QUEUE",
    "KNOWLEDGE",
    "OPERATOR",
    "CONSOLE",
    "RUNNER",
];

/// A user's password in this test run.
pub fn password(user: &str) -> String {
    format!("{}-{}-pw", user.to_lowercase(), std::process::id())
}

/// Runs `cmd`; panics with its stderr if it fails. Returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let o = cmd.output().expect("runs");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[derive(Debug)]
pub struct Project {
    pub root: PathBuf,
    pub name: String,
    /// Environment of every compose command (ports, modes).
    pub env: Vec<(String, String)>,
}

impl Project {
    /// `name` under the repository root `root`, with `env`.
    pub fn new(root: PathBuf, name: String, env: Vec<(String, String)>) -> Self {
        Self { root, name, env }
    }

    /// `docker-compose -p NAME -f compose.yaml` with the project's environment.
    pub fn compose(&self) -> Command {
        let mut c = Command::new("docker-compose");
        c.current_dir(&self.root)
            .args(["-p", &self.name, "-f", "compose.yaml"]);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        for user in USERS {
            c.env(format!("XO_NATS_PASSWORD_{user}"), password(user));
        }
        c
    }

    /// `docker-compose ARGS`, which must succeed; its stdout.
    pub fn run(&self, args: &[&str]) -> String {
        run(self.compose().args(args))
    }

    /// The container id of a service (its first replica).
    pub fn container(&self, service: &str) -> String {
        self.containers(service)
            .into_iter()
            .next()
            .unwrap_or_default()
    }

    /// The ids of every replica of `service`.
    pub fn containers(&self, service: &str) -> Vec<String> {
        self.run(&["ps", "-q", service])
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = self
            .compose()
            .args(["down", "-v", "--remove-orphans"])
            .output();
    }
}
