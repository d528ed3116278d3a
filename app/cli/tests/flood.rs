//! Issue 23, item 3: about 20,000 connections to the tokenless loopback
//! console once took every file descriptor of `xo up`; its bus socket then
//! refused operators and runners, and its accept loop logged 7 million
//! lines in 16 s. Now the console holds at most half the process's
//! descriptors: a connection that sent no request is pushed out for a newer
//! one (one address keeps `console.max_per_client`), one beyond a bound is
//! refused with 503, and both are logged at 1, 2, 4…

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use xo_tests::launcher::Xo;

/// The console's address from `xo up`'s log, once it serves.
fn console_addr(log: &Path) -> String {
    xo_tests::until_blocking("the console says where it serves", || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let at = text.find("http://127.0.0.1:")?;
        let rest = &text[at + "http://".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
            .unwrap_or(rest.len());
        Some(rest[..end].to_string())
    })
}

#[test]
fn a_console_flood_leaves_the_bus_socket_to_operators() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let log = d.join("up.log");
    // 256 descriptors in all, soft and hard: the console may hold 128.
    let mut up = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec '{}' up",
            xo_tests::launcher::bin().display()
        ))
        .current_dir(d)
        .env_remove("XO_NATS_URL")
        .env("RUST_LOG", "info")
        .env("XO__CONSOLE__LISTEN", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = console_addr(&log);
    Xo::in_dir(d).wait_answered(&mut up);
    // 400 clients hold connections open (more than the process has
    // descriptors) and send nothing.
    let mut flood = Vec::new();
    for _ in 0..400 {
        flood.push(TcpStream::connect(&addr).unwrap());
    }
    // What the console did with each: refused (503), pushed out for a
    // newer one (closed, nothing said), or still held. The reads wait a
    // little each for an answer already on its way.
    let (mut refused, mut closed, mut held) = (0, 0, Vec::new());
    for mut s in flood {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut head = [0u8; 12];
        match s.read(&mut head) {
            Ok(0) => closed += 1,
            Ok(n) => {
                assert_eq!(&head[..n], &b"HTTP/1.1 503"[..n]);
                refused += 1;
            }
            Err(_) => held.push(s),
        }
    }
    assert!(
        held.len() <= 128,
        "{} connections held: more than half of 256 descriptors",
        held.len()
    );
    assert_eq!(refused + closed + held.len(), 400);
    assert!(
        closed + refused >= 400 - 128,
        "{closed} closed, {refused} refused"
    );
    // The bus socket still serves the operator, and a write goes through.
    let st = Xo::in_dir(d).run(&["status", "--json"]);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let init = Xo::in_dir(d).run(&["init"]);
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    drop(held);
    let _ = Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status();
    let _ = up.wait();
    // Refusals and connections pushed out are logged at 1, 2, 4…: a
    // handful of lines, not one each.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = text
        .lines()
        .filter(|l| l.contains("connection refused") || l.contains("pushed out"))
        .count();
    assert!((1..=20).contains(&lines), "{lines} lines:\n{text}");
}
