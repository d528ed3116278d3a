//! A corrupt byte never deletes data silently: one high byte of a record's
//! length set in the middle of `.xo/state/kv/queue.kv` (which used to read
//! as a torn tail and cut half the file) stops `xo up`, naming the file and
//! the offset; `xo store repair` keeps a backup, drops only the damaged
//! record and says so; `xo up` then starts with every other task.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use xo_tests::launcher::{Xo, text};

/// `xo up` in `dir` with the queue initialised and `n` tasks enqueued from
/// a task file.
fn seeded(dir: &Path, n: usize) -> xo_tests::launcher::Up {
    let tasks: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({"task_id": format!("t{i:04}"), "intent": "x",
                "instructions": "do it", "role": "coder"})
        })
        .collect();
    std::fs::write(dir.join("tasks.json"), serde_json::to_vec(&tasks).unwrap()).unwrap();
    let u = Xo::in_dir(dir).up();
    for args in [&["init"][..], &["enqueue", "tasks.json"]] {
        let o = Xo::in_dir(dir).run(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    }
    u
}

/// Where each record of a store file starts (length, checksum, body).
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut pos = 0usize;
    let mut offsets = Vec::new();
    while pos + 8 <= bytes.len() {
        offsets.push(pos);
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        pos += 8 + len;
    }
    offsets
}

/// `xo up` in `dir`, which must refuse to start: what it said.
fn up_refused(dir: &Path) -> String {
    let o = Xo::new()
        .command(&[])
        .arg("up")
        .current_dir(dir)
        .env_remove("XO_NATS_URL")
        .env("XO__CONSOLE__ENABLED", "false")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success(), "xo up started: {}", text(&o.stderr));
    text(&o.stderr)
}

fn pending(dir: &Path) -> u64 {
    let s: serde_json::Value =
        serde_json::from_str(&text(&Xo::in_dir(dir).run(&["status", "--json"]).stdout)).unwrap();
    s["counts"]["pending"].as_u64().unwrap()
}

#[test]
fn a_damaged_record_stops_the_start_and_repair_drops_only_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let u = seeded(d, 1003);
    assert_eq!(pending(d), 1003);
    assert!(u.stop().status.success());

    // One high byte of the length of a record in the middle.
    let kv = d.join(".xo/state/kv/queue.kv");
    let mut bytes = std::fs::read(&kv).unwrap();
    let size = bytes.len();
    let offsets = record_offsets(&bytes);
    let victim = offsets[offsets.len() / 2];
    bytes[victim + 2] = 0x01;
    std::fs::write(&kv, &bytes).unwrap();

    // xo up refuses, naming the file, the offset and the repair.
    let err = up_refused(d);
    assert!(
        err.contains("queue.kv") && err.contains(&format!("at byte {victim}")),
        "{err}"
    );
    assert!(err.contains("xo store repair"), "{err}");
    assert_eq!(
        std::fs::read(&kv).unwrap().len(),
        size,
        "the file is left as it was"
    );

    // The repair keeps a backup and drops only the damaged record.
    let o = Xo::in_dir(d).run(&["store", "repair"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("queue.kv: repaired"), "{out}");
    assert!(out.contains(&format!("at {victim}")), "{out}");
    // Issue 23, item 7: it names what the dropped bytes held, and that it
    // is lost (the task's only record), not only where they were.
    assert!(
        out.contains(&format!("it held at {victim}: key task."))
            && out.contains("LOST: no later revision"),
        "{out}"
    );
    let backup = std::fs::read_dir(d.join(".xo/state/kv"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().contains(".bak-"))
        .expect("a backup");
    assert_eq!(
        std::fs::metadata(backup.path()).unwrap().len() as usize,
        size
    );
    let repaired = std::fs::metadata(&kv).unwrap().len() as usize;
    assert!(
        repaired > size - 1000,
        "{repaired} of {size}: only one record dropped"
    );

    // It starts, with every other task.
    let u = Xo::in_dir(d).up();
    assert_eq!(pending(d), 1002);
    assert!(u.stop().status.success());
    // A second repair finds nothing to do.
    assert!(text(&Xo::in_dir(d).run(&["store", "repair"]).stdout).contains("queue.kv: intact"));
}

/// fdatasync calls `xo up` makes while the queue is initialised, 20 tasks
/// enqueued and started, traced (strace attached to the running process).
fn fdatasyncs(sync: &str) -> usize {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let tasks: Vec<serde_json::Value> = (0..20)
        .map(|i| {
            serde_json::json!({"task_id": format!("t{i}"), "intent": "x",
                "instructions": "do it", "role": "coder"})
        })
        .collect();
    std::fs::write(d.join("tasks.json"), serde_json::to_vec(&tasks).unwrap()).unwrap();
    let up = Xo::in_dir(d).env("XO__STORE__SYNC", sync).up();
    let trace = d.join("trace.txt");
    let strace = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=fdatasync", "-o"])
        .arg(&trace)
        .args(["-p", &up.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut strace = match strace {
        Ok(s) => s,
        Err(e) => {
            drop(up);
            panic!("strace is needed (apt-get install strace): {e}");
        }
    };
    // strace attaches to every thread before it traces.
    std::thread::sleep(Duration::from_millis(500));
    for args in [&["init"][..], &["enqueue", "tasks.json"], &["start"]] {
        assert!(Xo::in_dir(d).run(args).status.success());
    }
    up.stop();
    let _ = strace.wait();
    std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("fdatasync("))
        .count()
}

#[test]
fn acknowledged_writes_are_synced_unless_told_not_to() {
    // always: each acknowledged change (init, the enqueue, start) is synced
    // before its reply; never: none is (the shutdown's flush included).
    let always = fdatasyncs("always");
    assert!(
        always >= 3,
        "{always} fdatasync calls with store.sync = always"
    );
    assert_eq!(fdatasyncs("never"), 0);
}

#[test]
fn the_socket_and_the_state_are_the_users_alone_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut child = Command::new("sh")
        .args([
            "-c",
            &format!("umask 000; exec {} up", xo_tests::launcher::bin().display()),
        ])
        .current_dir(d)
        .env_remove("XO_NATS_URL")
        .env("RUST_LOG", "warn")
        .env("XO__CONSOLE__ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = xo_tests::within_blocking(xo_tests::HANG_GUARD, || {
        Xo::in_dir(d).run(&["init"]).status.success().then_some(())
    })
    .is_some();
    // A task: the audit log is written.
    std::fs::write(
        d.join("t.json"),
        r#"[{"task_id": "t1", "intent": "x", "instructions": "do it", "role": "coder"}]"#,
    )
    .unwrap();
    let o = Xo::in_dir(d).run(&["enqueue", "t.json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mode = |p: &str| {
        std::fs::metadata(d.join(p))
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    };
    let (sock, state, kv) = (
        mode(".xo/bus.sock"),
        mode(".xo/state"),
        mode(".xo/state/kv/queue.kv"),
    );
    let (data, project, audit) = (
        mode(".xo/data"),
        mode(".xo/data/default"),
        mode(".xo/data/default/audit.log.jsonl"),
    );
    // Issue 40, item 7: the state directory itself, the knowledge and the
    // sandbox (another user could plant knowledge or a git config there),
    // and the bus token.
    let (root, knowledge, sandbox, token) = (
        mode(".xo"),
        mode(".xo/knowledge"),
        mode(".xo/sandbox"),
        mode(".xo/bus.token"),
    );
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert!(ready, "xo up never answered");
    assert_eq!(sock, 0o600, "bus.sock {sock:o}");
    assert_eq!(state, 0o700, "state {state:o}");
    assert_eq!(kv, 0o600, "queue.kv {kv:o}");
    // Issue 23, item 7: the audit log and its folders followed the umask.
    assert_eq!(data, 0o700, "data {data:o}");
    assert_eq!(project, 0o700, "data/default {project:o}");
    assert_eq!(audit, 0o600, "audit.log.jsonl {audit:o}");
    assert_eq!(root, 0o700, ".xo {root:o}");
    assert_eq!(knowledge, 0o700, "knowledge {knowledge:o}");
    assert_eq!(sandbox, 0o700, "sandbox {sandbox:o}");
    assert_eq!(token, 0o600, "bus.token {token:o}");
}

/// The audit file is checked against the store's copy: lines cut from its
/// end are found (the chain alone cannot see them), and a damaged copy stops
/// the start like any damaged store file.
#[test]
fn the_audit_file_is_checked_against_the_stores_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let u = seeded(d, 40);
    assert!(u.stop().status.success());

    let file = d.join(".xo/data/default/audit.log.jsonl");
    let text_before = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text_before.lines().collect();
    assert!(lines.len() > 40, "{}", lines.len());
    let o = Xo::in_dir(d).run(&["audit", "verify"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        out.contains(&format!("store's copy: {} lines, the same", lines.len())),
        "{out}"
    );

    // The last three lines cut: the chain still holds, the copy does not.
    let cut = lines[..lines.len() - 3].join("\n") + "\n";
    std::fs::write(&file, &cut).unwrap();
    let o = Xo::in_dir(d).run(&["audit", "verify"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("broken at line {}", lines.len() - 2))
            && out.contains("3 more line(s)"),
        "{out}"
    );
    // A line changed in place (its chain rewritten to match would still
    // differ from the copy; here the chain breaks first).
    std::fs::write(&file, &text_before).unwrap();
    assert!(Xo::in_dir(d).run(&["audit", "verify"]).status.success());

    // A damaged record in the store's copy: xo up refuses, naming it.
    let log = d.join(".xo/state/log/audit.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let offsets = record_offsets(&bytes);
    assert_eq!(offsets.len(), lines.len());
    let victim = offsets[offsets.len() / 2];
    bytes[victim + 2] = 0x01;
    std::fs::write(&log, &bytes).unwrap();
    let err = up_refused(d);
    assert!(
        err.contains("audit.log") && err.contains(&format!("at byte {victim}")),
        "{err}"
    );
    assert!(err.contains("xo store repair"), "{err}");
    // verify says the copy could not be read, and fails.
    let o = Xo::in_dir(d).run(&["audit", "verify"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stdout).contains("could not be read"),
        "{}",
        text(&o.stdout)
    );
    // Repaired, the copy lacks one line: verify says where they part.
    assert!(Xo::in_dir(d).run(&["store", "repair"]).status.success());
    let o = Xo::in_dir(d).run(&["audit", "verify"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stdout).contains(&format!("broken at line {}", offsets.len() / 2 + 1)),
        "{}",
        text(&o.stdout)
    );
}

/// Issue 40, item 4: a status that no longer decodes (two heartbeats of
/// 1.7e308 once summed to `inf`, written as `null`: after a restart the
/// goal was gone and the queue "not initialised") is recovered from the
/// last good revision, kept at every start; `xo store repair` names it,
/// and the unreadable status is kept for the operator.
#[test]
fn a_status_that_does_not_decode_is_recovered_from_the_last_good_revision() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let u = seeded(d, 3);
    let o = Xo::in_dir(d).run(&["goal", "set", "ship the parser"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(u.stop().status.success());
    // A start keeps the good revision; the goal is in it.
    let u = Xo::in_dir(d).up();
    assert_eq!(pending(d), 3);
    assert!(u.stop().status.success());

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store_dir = d.join(".xo/state");
    let bad = rt.block_on(async {
        let store = xo_bus::Store::File(xo_bus::FileStore::open(&store_dir).unwrap());
        let good = store.get("queue", "status").await.unwrap().unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(&good.value).unwrap();
        v["iteration"] = serde_json::Value::Null;
        let bad = serde_json::to_vec(&v).unwrap();
        store
            .put("queue", "status", bytes::Bytes::from(bad.clone()))
            .await
            .unwrap();
        bad
    });

    let o = Xo::in_dir(d).run(&["store", "repair"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("queue/status: does not decode")
            && out.contains("recovers it from the last good revision")
            && out.contains("ship the parser"),
        "{out}"
    );

    let u = Xo::in_dir(d).up();
    let s: serde_json::Value =
        serde_json::from_str(&text(&Xo::in_dir(d).run(&["status", "--json"]).stdout)).unwrap();
    assert_eq!(s["goal"]["description"], "ship the parser", "{s}");
    assert_eq!(s["initialised"], true, "{s}");
    assert_eq!(s["counts"]["pending"], 3, "{s}");
    let human = text(&Xo::in_dir(d).run(&["status"]).stdout);
    assert!(
        human.contains("CORRUPT")
            && human.contains("recovered from the last good revision")
            && human.contains("queue/status.corrupt"),
        "{human}"
    );
    assert!(u.stop().status.success());
    // The unreadable status was kept as it was.
    let kept = rt.block_on(async {
        let store = xo_bus::Store::File(xo_bus::FileStore::open(&store_dir).unwrap());
        store.get("queue", "status.corrupt").await.unwrap().unwrap()
    });
    assert_eq!(&kept.value[..], &bad[..]);
}

/// Issue 40, item 7: on a full disk the queue's writes wait and retry, and
/// reads waited behind them (`xo status` timed out). Now a read is
/// answered at once while writes fail, saying since when and why; the
/// store still starts afterwards. The full disk is the file-size limit
/// (RLIMIT_FSIZE, with SIGXFSZ ignored), as in `crates/bus/tests/full_disk.rs`.
#[test]
fn reads_are_answered_while_writes_wait_on_a_full_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // 512 KiB per file: the queue's store fills up with the tasks below.
    let mut full = Command::new("bash")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 512; exec \"$0\" up")
        .arg(xo_tests::launcher::bin())
        .current_dir(d)
        .env_remove("XO_NATS_URL")
        .env("RUST_LOG", "warn")
        .env("XO__CONSOLE__ENABLED", "false")
        .env("XO__STATE__STOP_GRACE_MS", "2000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Xo::in_dir(d).wait_answered(&mut full);
    assert!(Xo::in_dir(d).run(&["init"]).status.success());
    let big = "x".repeat(4096);
    let tasks: Vec<serde_json::Value> = (0..400)
        .map(|i| {
            serde_json::json!({"task_id": format!("t{i:04}"), "intent": "x",
                "instructions": big, "role": "coder"})
        })
        .collect();
    std::fs::write(d.join("tasks.json"), serde_json::to_vec(&tasks).unwrap()).unwrap();
    // The enqueue's reply waits for its write, which cannot fit.
    let mut enqueue = Xo::new()
        .command(&[])
        .args(["enqueue", "tasks.json"])
        .current_dir(d)
        .env_remove("XO_NATS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let said = xo_tests::until_blocking("xo status says that writes fail", || {
        let o = Xo::in_dir(d).run(&["status"]);
        let out = text(&o.stdout);
        (o.status.success() && out.contains("WRITES")).then_some(out)
    });
    assert!(
        said.contains("writes have failed since") && said.contains("may not be durable yet"),
        "{said}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&text(&Xo::in_dir(d).run(&["status", "--json"]).stdout)).unwrap();
    assert!(json["writes_failing"].is_string(), "{json}");
    let _ = enqueue.kill();
    let _ = enqueue.wait();
    let _ = Command::new("kill")
        .args(["-INT", &full.id().to_string()])
        .status();
    let _ = full.wait_with_output().unwrap();
    // Room again: it starts, nothing asks for a repair.
    let u = Xo::in_dir(d).up();
    let s: serde_json::Value =
        serde_json::from_str(&text(&Xo::in_dir(d).run(&["status", "--json"]).stdout)).unwrap();
    assert_eq!(s["initialised"], true, "{s}");
    assert!(s.get("writes_failing").is_none(), "{s}");
    assert!(u.stop().status.success());
}
