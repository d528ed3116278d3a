//! Report files on the shared volume (macrocosm file mode), read by the
//! supervisor of `xo up`: a writer that rewrites `<unit>_latest.json`
//! without raising `time.seq` is told so in the log (issue 26, item 6).

use std::io::Read;

use xo_tests::launcher::Xo;

fn report(turn: u64, seq: u64) -> String {
    format!(
        r#"{{"v":1,"unit":{{"unit":"scout","role":"researcher"}},"time":{{"turn":{turn},"seq":{seq},"epoch":1}},"size":{{"context_fill":0.1}}}}"#
    )
}

/// The seq `xo units scout` shows, once the unit is known.
fn seq_shown(dir: &std::path::Path) -> Option<u64> {
    let o = Xo::in_dir(dir).run(&["units", "scout", "--json"]);
    if !o.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
    v["summary"]["seq"].as_u64()
}

#[test]
fn a_report_file_rewritten_with_the_same_seq_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("volume");
    std::fs::create_dir_all(vol.join("reports")).unwrap();
    let log = dir.path().join("up.log");
    let vol_path = vol.display().to_string();
    let up = Xo::in_dir(dir.path())
        .env("XO__SUPERVISOR__VOLUME", vol_path)
        .env("XO__SUPERVISOR__FILE_POLL_MS", "20")
        .up_logged(std::fs::File::create(&log).unwrap());
    let file = vol.join("reports/scout_latest.json");
    // Replaced whole, as a writer on the volume must.
    let write = |body: String| {
        let tmp = vol.join("reports/.scout.tmp");
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    };
    let logged = || {
        let mut s = String::new();
        std::fs::File::open(&log)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s.matches("rewritten without a higher time.seq").count()
    };
    let wait_seq = |want: u64| {
        xo_tests::eventually_blocking(&format!("seq {want} shown"), || {
            seq_shown(dir.path()) == Some(want)
        })
    };

    write(report(1, 1));
    wait_seq(1);
    assert_eq!(logged(), 0, "a first report is no rewrite");

    // The same seq again, with other contents (another turn): ignored by the
    // supervisor, and said in its log.
    write(report(22, 1));
    let n = xo_tests::until_blocking("the rewrite logged", || Some(logged()).filter(|n| *n > 0));
    assert_eq!(n, 1, "{}", std::fs::read_to_string(&log).unwrap());
    let o = Xo::in_dir(dir.path()).run(&["units", "scout", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["summary"]["turn"], 1, "the rewrite was not taken: {v}");

    // A higher seq is read as usual, and not logged.
    write(report(23, 2));
    wait_seq(2);
    assert_eq!(logged(), 1);
    let out = up.stop();
    assert!(out.status.success(), "{out:?}");
}
