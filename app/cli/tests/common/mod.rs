//! What several CLI test files do alike: run `xo` in a folder, start `xo up`
//! there (the embedded default) and wait until it answers.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// `xo ARGS --nats URL` with `state` as its state directory: a client of
/// a fabric over nats-server, with no file of that fabric to read.
pub fn xo_nats(url: &str, state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xo"))
        .args(args)
        .args(["--nats", url])
        .env("XO__STATE__DIR", state)
        .env("RUST_LOG", "error")
        .output()
        .expect("xo")
}

/// `xo ARGS` in `dir` against the `xo up` there (no NATS, no console).
pub fn xo(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xo"))
        .args(args)
        .current_dir(dir)
        .env_remove("XO_NATS_URL")
        .env("RUST_LOG", "warn")
        .env("XO__CONSOLE__ENABLED", "false")
        .stdin(Stdio::null())
        .output()
        .expect("xo")
}

/// Waits until `xo status` answers in `dir`; panics (killing `up`) if it never does.
pub fn answered(dir: &Path, up: &mut Child) {
    for _ in 0..500 {
        if xo(dir, &["status", "--json"]).status.success() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = up.kill();
    let _ = up.wait();
    panic!("xo up never answered");
}

/// `xo up` in `dir` (console off), once it answers.
pub fn up(dir: &Path) -> Child {
    up_with(dir, &[], Stdio::null())
}

/// `xo up` in `dir` (console off) with more environment and its log to
/// `stderr`, once it answers.
pub fn up_with(dir: &Path, env: &[(&str, &str)], stderr: impl Into<Stdio>) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xo"))
        .arg("up")
        .current_dir(dir)
        .env_remove("XO_NATS_URL")
        .env("RUST_LOG", "warn")
        .env("XO__CONSOLE__ENABLED", "false")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    answered(dir, &mut child);
    child
}

/// Stops `xo up` as ctrl-c does.
pub fn stop(child: Child) -> Output {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    child.wait_with_output().unwrap()
}
