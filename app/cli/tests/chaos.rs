//! A short, bounded run of `xo bench chaos`: the fabric as processes over a
//! real nats-server, twelve SIGKILLs (the seed makes every process a victim
//! at least once: nats-server, both queues, the supervisor, the knowledge
//! store and each runner), then every invariant checked — the bench exits 1
//! when one breaks. Longer runs: `xo bench chaos --secs 600`.

use xo_tests::launcher::Xo;

#[test]
fn every_process_killed_once_and_the_invariants_hold() {
    let o = Xo::new()
        .command(&[])
        .args([
            "bench",
            "chaos",
            "--secs",
            "600",
            "--kills",
            "12",
            "--kill-every-ms",
            "1500",
            "--tasks",
            "10",
            "--seed",
            "11",
        ])
        .env("XO_NATS_SERVER", xo_tests::nats_server_binary())
        .env_remove("XO_NATS_URL")
        .output()
        .expect("xo bench chaos");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("chaos: 12 kills survived"), "{out}");
    for victim in [
        "nats ×",
        "queue-a ×",
        "queue-b ×",
        "supervisor ×",
        "knowledge ×",
        "chaos-1 ×",
        "chaos-2 ×",
        "chaos-3 ×",
    ] {
        assert!(out.contains(victim), "{victim} was never killed: {out}");
    }
    for invariant in [
        "acknowledged enqueues present",
        "tasks completed exactly once",
        "audit chain intact and equal to the store's copy",
        "runner units supervised again after their restarts",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(invariant))
            .unwrap_or_else(|| panic!("no {invariant} line: {out}"));
        assert!(line.ends_with(" ok"), "{line}");
    }
    assert!(out.contains("no agent process left behind: true"), "{out}");
    assert!(out.contains("invariants held"), "{out}");
}
