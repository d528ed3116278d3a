//! What comes in is checked here, for the pumps and the watchers alike:
//! decoding, the subject's unit against the message's, and dead letters
//! (bus input and rejected report files go the same way: counted, logged
//! with the reason, and published on `xo.dlq.<subject>`).

use std::path::Path;
use std::sync::atomic::Ordering;

use tracing::warn;
use xo_bus::{Headers, Message, typed};
use xo_proto::{CodecError, Heartbeat, SaluteReport, Subjects};

use crate::ctx::Ctx;

/// Header naming the report file a dead letter came from.
pub const DLQ_FILE: &str = "Xo-Dlq-File";

/// Decodes a report and checks that its unit is the subject's.
pub fn decode_report(ctx: &Ctx, msg: &Message) -> Result<SaluteReport, CodecError> {
    typed::decode::<SaluteReport>(msg, ctx.cfg.wire.max_payload)
        .and_then(|r| check_subject_unit(&ctx.subjects, &msg.subject, &r.unit.unit).map(|_| r))
}

/// Decodes a heartbeat and checks its unit id and that it is the subject's.
pub fn decode_heartbeat(ctx: &Ctx, msg: &Message) -> Result<Heartbeat, CodecError> {
    typed::decode::<Heartbeat>(msg, ctx.cfg.wire.max_payload).and_then(|h| {
        xo_proto::validate_unit_id(&h.unit)
            .map_err(|reason| CodecError::Invalid {
                ty: "Heartbeat",
                reason,
            })
            .and_then(|_| check_subject_unit(&ctx.subjects, &msg.subject, &h.unit))
            .map(|_| h)
    })
}

/// A unit may only report for itself: the subject's unit must match.
fn check_subject_unit(subjects: &Subjects, subject: &str, unit: &str) -> Result<(), CodecError> {
    match subjects.unit_of(subject) {
        Some(u) if u == unit => Ok(()),
        other => Err(CodecError::Invalid {
            ty: "SaluteReport",
            reason: format!(
                "unit {unit:?} does not match the subject's unit {:?}",
                other.unwrap_or("")
            ),
        }),
    }
}

/// Counts, logs and dead-letters a message that could not be used.
pub async fn reject(ctx: &Ctx, msg: &Message, err: &CodecError) {
    ctx.counters.dead_letters.fetch_add(1, Ordering::Relaxed);
    warn!(subject = %msg.subject, reason = err.code(), error = %err, "message dead-lettered");
    typed::dead_letter(&ctx.bus, &ctx.subjects, msg, err).await;
}

/// Seed 000's report files give `context_fill_pct` (in `size` or at the
/// top), a percentage (or, as the seed's own threshold reads, a fraction):
/// the fill is taken from it when `context_fill` is absent.
pub fn fill_from_pct(report: &mut SaluteReport, json: &[u8]) {
    if report.size.context_fill > 0.0 {
        return;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    let pct = v
        .get("size")
        .and_then(|s| s.get("context_fill_pct"))
        .or_else(|| v.get("context_fill_pct"))
        .and_then(serde_json::Value::as_f64);
    if let Some(p) = pct.filter(|p| p.is_finite() && *p >= 0.0) {
        report.size.context_fill = if p > 1.0 { p / 100.0 } else { p }.min(1.0);
    }
}

/// Dead-letters a report file that could not be used, as if it had come on
/// the unit's report subject (`xo.dlq.xo.salute.<unit>`), with the file
/// named in a header; a file name that is no unit id goes under `_file`.
pub async fn reject_file(ctx: &Ctx, path: &Path, unit: &str, payload: Vec<u8>, err: &CodecError) {
    let unit = if xo_proto::validate_unit_id(unit).is_ok() {
        unit
    } else {
        "_file"
    };
    let mut headers = Headers::new();
    headers.insert(DLQ_FILE, path.display().to_string());
    let msg = Message {
        subject: ctx.subjects.salute(unit),
        reply: None,
        headers,
        payload: payload.into(),
    };
    ctx.counters.dead_letters.fetch_add(1, Ordering::Relaxed);
    warn!(path = %path.display(), reason = err.code(), error = %err, "report file dead-lettered");
    typed::dead_letter(&ctx.bus, &ctx.subjects, &msg, err).await;
}
