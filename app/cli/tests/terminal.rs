//! Issue 23, item 7: `xo units` once printed the terminal escapes a report
//! carried (an agent could clear the operator's screen, set the window
//! title, hide text). Every human-readable line is now made safe.

use std::process::{Command, Stdio};

use xo_tests::launcher::Xo;

#[test]
fn reports_cannot_drive_the_operators_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let up = Xo::in_dir(d).up();
    let mut r = xo_proto::SaluteReport::new("u1", "coder\u{1b}]0;pwned\u{7}", 3, 1);
    r.activity.task_id = Some("t\u{1b}[2J\u{1b}[Hgone".into());
    r.status.note = Some("fine\u{202e}txt.exe\u{9b}31m".into());
    std::fs::write(d.join("r.json"), serde_json::to_vec(&r).unwrap()).unwrap();
    let sent = Xo::in_dir(d).run(&["report", "r.json"]);
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let shown = xo_tests::until_blocking("the unit shown", || {
        let o = Xo::in_dir(d).run(&["units"]);
        String::from_utf8_lossy(&o.stdout)
            .contains("u1")
            .then_some(o.stdout)
    });
    let detail = Xo::in_dir(d).run(&["units", "u1"]).stdout;
    for out in [&shown, &detail] {
        let text = String::from_utf8_lossy(out);
        assert!(
            !out.iter().any(|&b| b == 0x1b || b == 0x07)
                && !text.contains('\u{9b}')
                && !text.contains('\u{202e}'),
            "{text:?}"
        );
        assert!(text.contains("\\u{1b}"), "shown, not obeyed: {text}");
    }
    up.stop();
}

/// Issue 23, item 7: the CLI once sent its requests to whatever listened
/// on `.xo/bus.sock`. A socket served by another user is refused, named.
#[test]
fn a_socket_served_by_another_user_is_refused() {
    if std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .ok()
        != Some(0)
    {
        eprintln!("needs root to run a server as another user; not run");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let state = d.join("state");
    std::fs::create_dir_all(&state).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for p in [d, state.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let sock = state.join("bus.sock");
    // A server run as `nobody`: it accepts and keeps the connection.
    let server = format!(
        "import socket,os,time\ns=socket.socket(socket.AF_UNIX)\ns.bind({:?})\nos.chmod({:?},0o777)\ns.listen(8)\nwhile True:\n  c,_=s.accept()\n  time.sleep(30)\n",
        sock.display().to_string(),
        sock.display().to_string()
    );
    let mut impostor = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            &server,
        ])
        .spawn()
        .unwrap();
    xo_tests::eventually_blocking("the impostor listens", || sock.exists());
    let o = Xo::new()
        .command(&[])
        .args(["status"])
        .current_dir(d)
        .env_remove("XO_NATS_URL")
        .env("XO__STATE__DIR", &state)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = impostor.kill();
    let _ = impostor.wait();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("served by user 65534"), "{err}");
}
