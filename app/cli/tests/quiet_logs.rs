//! Issue 40, item 7: 100k units going silent once logged 520k lines (a
//! warning, a steering line and more, each unit). A check that finds many
//! units stale says so in one line, with the count and the first names; a
//! unit's own lines are at debug. Its own test binary: the log subscriber
//! is the process's.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Sandbox, report};

#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn many_units_going_stale_are_one_line_not_one_a_unit() {
    let lines = Lines::default();
    let sink = lines.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .init();
    let sb = Sandbox::start(&[("supervisor.stale_after_ms", "30000")]).await;
    let n = 60u64;
    for u in 0..n {
        sb.send(&report(&format!("quiet-{u:02}"), 1)).await;
    }
    for u in 0..n {
        sb.wait_seq(&format!("quiet-{u:02}"), 1).await;
    }
    let before = String::from_utf8_lossy(&lines.0.lock().unwrap()).to_string();
    sb.clock.advance(Duration::from_secs(31));
    // The check that finds them, then the next one, which says so.
    sb.sup().tick().await;
    sb.sup().tick().await;
    let all = String::from_utf8_lossy(&lines.0.lock().unwrap()).to_string();
    let after = &all[before.len()..];
    let stale_lines: Vec<&str> = after.lines().filter(|l| l.contains("stale")).collect();
    assert_eq!(stale_lines.len(), 1, "{after}");
    assert!(
        stale_lines[0].contains("60 units went stale: quiet-")
            && stale_lines[0].contains("and 55 more"),
        "{}",
        stale_lines[0]
    );
    assert!(
        !after.contains("steering sent"),
        "a stale unit's steering is in the summary: {after}"
    );
    // They are all stale, and all were steered.
    let units = xo_bus::typed::all_units(&sb.client, &sb.subjects, common::T)
        .await
        .unwrap();
    assert_eq!(units.iter().filter(|u| u.stale).count() as u64, n);
}
