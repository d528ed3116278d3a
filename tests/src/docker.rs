//! The Docker engine from tests: commands that must work, cleanup that may fail.

use std::process::Command;

/// Runs `docker ARGS`; panics with its stderr if it fails. Returns stdout, trimmed.
pub fn run(args: &[&str]) -> String {
    let o = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    assert!(
        o.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Runs `docker ARGS` for cleanup: failures are ignored.
pub fn quiet(args: &[&str]) {
    let _ = Command::new("docker").args(args).output();
}

/// Removes every container labelled `xo.org=<org>`, running or not.
pub fn remove_org(org: &str) {
    let ids = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=xo.org={org}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    for id in ids.split_whitespace() {
        quiet(&["rm", "-f", id]);
    }
}
