//! Issue 40, item 7: every service stops on SIGINT and SIGTERM whatever NATS
//! is doing, and a runner started before `xo up` waits for its bus instead
//! of exiting. Before, `xo up --nats`, `xo serve queue` and `xo serve
//! runner` ignored both signals while NATS was down, and a runner started
//! while `xo up` was down exited.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use xo_tests::NatsServer;
use xo_tests::launcher::Xo;

/// `xo ARGS` in `dir`, its log lines sent to the returned receiver.
fn spawn(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Xo::new()
        .command(&[])
        .args(args)
        .current_dir(dir)
        .env_remove("XO_NATS_URL")
        .env("RUST_LOG", "info")
        .env("XO__CONSOLE__ENABLED", "false")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Waits for a log line containing `what`; every line seen is kept in
/// `seen`. The wait is a guard against a hang, not a measure.
fn wait_for(rx: &mpsc::Receiver<String>, what: &str, seen: &mut Vec<String>) {
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => {
                let hit = l.contains(what);
                seen.push(l);
                if hit {
                    return;
                }
            }
            Err(_) => panic!("no log line with {what:?}; saw:\n{}", seen.join("\n")),
        }
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

/// Waits for the process to end (the harness's guard against a hang).
fn ended(child: &mut Child) -> ExitStatus {
    if let Some(s) = xo_tests::within_blocking(xo_tests::HANG_GUARD, || child.try_wait().unwrap()) {
        return s;
    }
    let _ = child.kill();
    panic!("still running {:?} after the signal", xo_tests::HANG_GUARD);
}

fn rest(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>) -> String {
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        seen.push(l);
    }
    seen.join("\n")
}

/// A port nothing listens on: NATS is down.
fn dead_nats() -> String {
    format!("nats://127.0.0.1:{}", xo_tests::free_port())
}

#[test]
fn services_waiting_for_nats_stop_on_sigint_and_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let url = dead_nats();
    let runner = [
        "serve",
        "runner",
        "--role",
        "coder",
        "--script",
        "inline",
        "--nats",
        url.as_str(),
    ];
    for (args, sig) in [
        (&["serve", "queue"][..], "TERM"),
        (&["serve", "queue"][..], "INT"),
        (&["up", "--nats", url.as_str()][..], "INT"),
        (&["up", "--nats", url.as_str()][..], "TERM"),
        (&runner[..], "TERM"),
        (&runner[..], "INT"),
    ] {
        let (mut child, rx) = spawn(
            tmp.path(),
            args,
            &[
                ("XO__NATS__URL", &url),
                ("XO__STATE__STOP_GRACE_MS", "1000"),
            ],
        );
        let mut seen = Vec::new();
        // Trying to reach NATS, and failing: the signal comes while it waits.
        wait_for(&rx, "nats", &mut seen);
        signal(&child, sig);
        let status = ended(&mut child);
        let log = rest(&rx, &mut seen);
        // A service that waits for NATS to start stops before it started;
        // one that started without it (a runner: its client connects in the
        // background) stops, or is ended at its grace, saying so.
        let before = status.success()
            && log.contains("stopped before it started (it was waiting for its bus)");
        let at_grace =
            !status.success() && log.contains("did not stop within state.stop_grace_ms (1000 ms");
        assert!(
            before || at_grace || (status.success() && log.contains("shutdown requested")),
            "{args:?} SIG{sig}: {status}\n{log}"
        );
        if args[1] != "runner" {
            assert!(before, "{args:?} SIG{sig}: {status}\n{log}");
        }
    }
}

#[test]
fn a_runner_started_before_xo_up_waits_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (mut runner, rx) = spawn(
        d,
        &["serve", "runner", "--role", "coder", "--script", "inline"],
        &[],
    );
    let mut seen = Vec::new();
    wait_for(&rx, "waiting for the bus", &mut seen);
    assert!(runner.try_wait().unwrap().is_none(), "the runner exited");
    let (mut up, _up_log) = spawn(d, &["up"], &[]);
    Xo::in_dir(d).wait_answered(&mut up);
    wait_for(&rx, "xo up answered", &mut seen);
    // It is a runner of this fabric now: the fleet lists it.
    let listed = xo_tests::within_blocking(xo_tests::HANG_GUARD, || {
        let o = Xo::in_dir(d).run(&["units", "--json"]);
        String::from_utf8_lossy(&o.stdout)
            .contains("coder")
            .then_some(())
    })
    .is_some();
    signal(&runner, "TERM");
    let status = ended(&mut runner);
    let log = rest(&rx, &mut seen);
    assert!(status.success(), "{status}\n{log}");
    assert!(listed, "the runner never reported to xo up:\n{log}");
    signal(&up, "INT");
    assert!(ended(&mut up).success());

    // Waiting, it stops on a signal too.
    let tmp = tempfile::tempdir().unwrap();
    let (mut runner, rx) = spawn(
        tmp.path(),
        &["serve", "runner", "--role", "coder", "--script", "inline"],
        &[],
    );
    let mut seen = Vec::new();
    wait_for(&rx, "waiting for the bus", &mut seen);
    signal(&runner, "INT");
    let status = ended(&mut runner);
    assert!(status.success(), "{status}\n{}", rest(&rx, &mut seen));
}

/// NATS goes away under a running `xo up`: ctrl-c still ends it, within
/// `state.stop_grace_ms` (cleanly if the services could stop, or saying
/// that they did not), and a second signal ends a stop at once.
#[test]
fn xo_up_stops_when_nats_went_away() {
    let tmp = tempfile::tempdir().unwrap();
    let mut nats = NatsServer::start();
    let url = nats.url();
    let (mut up, rx) = spawn(
        tmp.path(),
        &["up", "--nats", &url],
        &[("XO__STATE__STOP_GRACE_MS", "1000")],
    );
    let mut seen = Vec::new();
    wait_for(&rx, "prefix:", &mut seen);
    nats.stop();
    signal(&up, "INT");
    let status = ended(&mut up);
    let log = rest(&rx, &mut seen);
    assert!(
        status.success() || log.contains("did not stop within state.stop_grace_ms (1000 ms"),
        "{status}\n{log}"
    );
}
