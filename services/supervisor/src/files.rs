//! Macrocosm file mode: units that can only write files are supervised too.
//! A unit replaces `<volume>/reports/<unit>_latest.json` atomically (write a
//! temporary file, rename it); the XO polls the folder and appends each
//! steering decision as a JSON line to `<volume>/steering/<unit>.jsonl`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use ractor::ActorRef;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;
use tracing::warn;
use xo_bus::Headers;
use xo_proto::{SaluteReport, Steering};

use crate::{Ctx, RootMsg};

const SUFFIX: &str = "_latest.json";

/// Appends one steering line to `<volume>/steering/<unit>.jsonl`.
pub async fn append_steering(volume: &Path, s: &Steering) {
    let dir = volume.join("steering");
    let path = dir.join(format!("{}.jsonl", s.unit));
    let res = async {
        tokio::fs::create_dir_all(&dir).await?;
        let mut line = serde_json::to_vec(s).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await?;
        f.write_all(&line).await
    }
    .await;
    if let Err(e) = res {
        warn!(unit = %s.unit, path = %path.display(), error = %e, "steering file append failed");
    }
}

/// Polls `<volume>/reports/` for changed `<unit>_latest.json` files.
pub fn spawn_poller(ctx: Arc<Ctx>, root: ActorRef<RootMsg>, volume: PathBuf) -> JoinHandle<()> {
    tokio::spawn(async move {
        let dir = volume.join("reports");
        let mut seen: HashMap<PathBuf, (SystemTime, u64)> = HashMap::new();
        let mut every =
            tokio::time::interval(Duration::from_millis(ctx.cfg.supervisor.file_poll_ms));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if poll_once(&ctx, &root, &dir, &mut seen).await.is_err() {
                break;
            }
        }
    })
}

async fn poll_once(
    ctx: &Ctx,
    root: &ActorRef<RootMsg>,
    dir: &Path,
    seen: &mut HashMap<PathBuf, (SystemTime, u64)>,
) -> Result<(), ()> {
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return Ok(());
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(unit) = name.strip_suffix(SUFFIX) else {
            continue;
        };
        let Ok(meta) = entry.metadata().await else {
            continue;
        };
        let stamp = (
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            meta.len(),
        );
        if seen.get(&path) == Some(&stamp) {
            continue;
        }
        seen.insert(path.clone(), stamp);
        ctx.counters.reports.fetch_add(1, Ordering::Relaxed);
        let mut raw = bytes::Bytes::new();
        let report = match tokio::fs::read(&path).await {
            Ok(bytes) => xo_proto::codec::decode::<SaluteReport>(
                &bytes,
                Some(xo_proto::codec::JSON),
                ctx.cfg.wire.max_payload,
            )
            .map_err(|e| e.to_string())
            .and_then(|r| {
                raw = bytes::Bytes::from(bytes);
                if r.unit.unit == unit {
                    Ok(r)
                } else {
                    Err(format!(
                        "report names unit {:?} but the file is for {unit:?}",
                        r.unit.unit
                    ))
                }
            }),
            Err(e) => Err(e.to_string()),
        };
        match report {
            Ok(r) => {
                let unit = r.unit.unit.clone();
                let m = crate::watcher::WatcherMsg::Report(Box::new(r), Headers::new(), raw);
                if !ctx.route(root, &unit, m) {
                    return Err(());
                }
            }
            Err(reason) => {
                ctx.counters.dead_letters.fetch_add(1, Ordering::Relaxed);
                warn!(path = %path.display(), reason = %reason, "report file rejected");
            }
        }
    }
    Ok(())
}
