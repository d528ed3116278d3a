//! Issue 40, item 2: the agent is the attacker. A confined agent of a real
//! `xo up` (its console on, a runner attached to its socket) tries what a
//! prompt-injected agent would: read the bus token, the console token, the
//! store and a key file in the state directory, halt the queue with `xo
//! halt` through the socket, and halt it through the console's API. All of
//! it fails, and the queue is still running. The same probes run by the
//! test itself (unconfined, as the operator) all succeed: they are live.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use xo_tests::launcher::{Xo, text};

/// A folder outside the temp folder (which confined agents may write and
/// read): the state directory under test must not be in it.
fn outside_temp() -> PathBuf {
    let temp = std::env::temp_dir();
    [
        Some(PathBuf::from("/var/tmp")),
        Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
    ]
    .into_iter()
    .flatten()
    .find(|p| !p.starts_with(&temp) && std::fs::create_dir_all(p).is_ok())
    .expect("a writable folder outside the temp folder")
}

fn xo(dir: &Path, state: &Path, port: u16) -> Command {
    Xo::new()
        .dir(dir)
        .env("RUST_LOG", "warn")
        .env("XO__STATE__DIR", state.display().to_string())
        .env("XO__CONSOLE__LISTEN", format!("127.0.0.1:{port}"))
        .command(&[])
}

fn run(dir: &Path, state: &Path, port: u16, args: &[&str]) -> Output {
    xo(dir, state, port).args(args).output().unwrap()
}

/// The probes, as one shell script writing `<name>.rc` (the exit code) and
/// `<name>.out` for each into the current folder.
fn probes(state: &Path, key: &Path, port: u16) -> String {
    let xo = xo_tests::launcher::bin();
    let xo = xo.display();
    let s = state.display();
    let api = format!(
        "import sys,urllib.request\ntoken=''\ntry:\n  token=open('{s}/console.token').read().strip()\nexcept Exception as e:\n  print('token:',e)\nr=urllib.request.Request('http://127.0.0.1:{port}/api/v1/queue/halt',data=b'{{\"reason\":\"agent\"}}',method='POST',headers={{'Authorization':'Bearer '+token,'Content-Type':'application/json'}})\ntry:\n  print(urllib.request.urlopen(r,timeout=5).status)\nexcept Exception as e:\n  print('failed:',e); sys.exit(1)\n"
    );
    std::fs::write(state.parent().unwrap().join("api.py"), api).unwrap();
    let api_py = state.parent().unwrap().join("api.py");
    [
        ("bus_token", format!("cat {s}/bus.token")),
        ("console_token", format!("cat {s}/console.token")),
        ("store", format!("ls {s}/state")),
        ("key", format!("cat {}", key.display())),
        (
            "halt",
            format!("XO__STATE__DIR={s} XO__CONSOLE__ENABLED=false {xo} halt --reason agent"),
        ),
        ("api", format!("/usr/bin/python3 {}", api_py.display())),
    ]
    .iter()
    .map(|(n, c)| format!("({c}) > {n}.out 2>&1; echo $? > {n}.rc"))
    .collect::<Vec<_>>()
    .join("; ")
}

const NAMES: [&str; 6] = ["bus_token", "console_token", "store", "key", "halt", "api"];

fn results(dir: &Path) -> Vec<(String, i32, String)> {
    NAMES
        .iter()
        .map(|n| {
            let rc = std::fs::read_to_string(dir.join(format!("{n}.rc")))
                .unwrap_or_else(|e| panic!("{n}.rc: {e}"))
                .trim()
                .parse()
                .unwrap();
            let out = std::fs::read_to_string(dir.join(format!("{n}.out"))).unwrap_or_default();
            (n.to_string(), rc, out)
        })
        .collect()
}

#[test]
fn a_confined_agent_cannot_reach_the_fabric_its_tokens_or_its_keys() {
    let root = outside_temp().join(format!("xo-attacker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("work");
    let state = dir.join(".xo");
    std::fs::create_dir_all(&state).unwrap();
    let key = state.join("model.key");
    std::fs::write(&key, "sk-secret").unwrap();
    let port = xo_tests::free_port();
    let mut up = xo(&dir, &state, port)
        .arg("up")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    xo_tests::eventually_blocking("xo up answers", || {
        run(&dir, &state, port, &["status", "--json"])
            .status
            .success()
    });
    let script = probes(&state, &key, port);
    let task = serde_json::json!({
        "task_id": "probe",
        "intent": "probe",
        "role": "coder",
        "instructions": format!(
            "```xo-script\nturn_ms = 0\n[[run]]\nsteps = [{{ run = {script:?} }}, {{ reply = '{{\"status\": \"ok\", \"message\": \"probed\"}}' }}]\n```"
        ),
    });
    std::fs::write(dir.join("task.json"), task.to_string()).unwrap();
    for args in [
        &["init"][..],
        &["goal", "set", "probe", "--project", "p"],
        &["enqueue", "task.json"],
        &["start"],
    ] {
        let o = run(&dir, &state, port, args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    }
    let mut runner = xo(&dir, &state, port)
        .args([
            "serve", "runner", "--script", "inline", "--role", "coder", "--unit", "coder-a",
        ])
        .env("XO__RUNNER__CONFINE", "landlock")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let project = state.join("sandbox/p");
    let done = xo_tests::within_blocking(xo_tests::HANG_GUARD, || {
        project.join("api.rc").exists().then_some(())
    })
    .is_some();
    let status = text(&run(&dir, &state, port, &["status", "--json"]).stdout);
    let _ = runner.kill();
    let runner_err = {
        let o = runner.wait_with_output().unwrap();
        text(&o.stderr)
    };
    assert!(done, "the agent never ran its probes: {runner_err}");
    let confined = results(&project);
    // The queue was not halted by the agent (it halts by itself once its
    // task list is done, with its own reason).
    assert!(!status.contains("\"agent\""), "{status}");

    // The operator, unconfined, with the same probes: every one works.
    let operator = root.join("operator");
    std::fs::create_dir_all(&operator).unwrap();
    let o = Command::new("sh")
        .args(["-c", &probes(&state, &key, port)])
        .current_dir(&operator)
        .env("PATH", std::env::var("PATH").unwrap())
        .output()
        .unwrap();
    assert!(o.status.success());
    let unconfined = results(&operator);
    let _ = Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status();
    let _ = up.wait();
    let _ = std::fs::remove_dir_all(&root);
    for (name, rc, out) in &unconfined {
        assert_eq!(*rc, 0, "the operator's {name} probe failed: {out}");
    }
    // `xo halt` from inside says why: the token, not "nothing is serving".
    let halt = confined.iter().find(|(n, _, _)| n == "halt").unwrap();
    assert!(halt.2.contains("bus token"), "{}", halt.2);
    for (name, rc, out) in &confined {
        assert_ne!(*rc, 0, "the confined agent's {name} probe worked: {out}");
        assert!(!out.contains("sk-secret"), "{name}: the key leaked: {out}");
    }
}
