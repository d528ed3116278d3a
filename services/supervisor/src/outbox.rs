//! Where steering goes: the unit's steering subject (`xo.steer.<unit>`)
//! and, in macrocosm file mode, a JSON line in `<volume>/steering/<unit>.jsonl`.

use std::path::Path;

use tracing::{info, warn};
use xo_bus::typed;
use xo_proto::Steering;

use crate::ctx::Ctx;

/// Publishes a steering decision (and appends it to the volume's file).
pub async fn send(ctx: &Ctx, s: &Steering) {
    // A stale unit's steering is in the stale summary, not a line each.
    if s.kind == xo_proto::AnomalyKind::Stale {
        tracing::debug!(unit = %s.unit, kind = %s.kind, severity = %s.severity, turn = s.turn, "steering sent");
    } else {
        info!(unit = %s.unit, kind = %s.kind, severity = %s.severity, turn = s.turn, "steering sent");
    }
    if let Err(e) = typed::publish(
        &ctx.bus,
        &ctx.subjects.steer(&s.unit),
        s,
        ctx.cfg.wire.format,
    )
    .await
    {
        warn!(unit = %s.unit, error = %e, "steering could not be published");
    }
    if let Some(volume) = &ctx.volume {
        append_steering(volume, s).await;
    }
}

/// Appends one steering line to `<volume>/steering/<unit>.jsonl`.
pub async fn append_steering(volume: &Path, s: &Steering) {
    let dir = volume.join("steering");
    // The folder too is never a link elsewhere (the file is checked when
    // opened): others can write to the volume.
    if tokio::fs::symlink_metadata(&dir)
        .await
        .is_ok_and(|m| !m.is_dir())
    {
        warn!(unit = %s.unit, dir = %dir.display(), "the steering folder is not a folder (a symlink?): steering file not written");
        return;
    }
    let path = dir.join(format!("{}.jsonl", s.unit));
    if let Err(e) = xo_runtime::jsonl::append(&path, s).await {
        warn!(unit = %s.unit, path = %path.display(), error = %e, "steering file append failed");
    }
}
