//! What comes in is checked here, for the pumps and the watchers alike:
//! decoding, the subject's unit against the message's, and dead letters
//! (bus input and rejected report files go the same way: counted, logged
//! with the reason, and published on `xo.dlq.<subject>`).

use std::path::Path;
use std::sync::atomic::Ordering;

use tracing::warn;
use xo_bus::{Headers, Message, typed};
use xo_proto::codec::Format;
use xo_proto::{CodecError, Heartbeat, Invalid, SaluteReport, Subjects};

use crate::ctx::Ctx;

pub use xo_proto::names::DLQ_FILE;

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
                reason: reason.into(),
            })
            .and_then(|_| check_subject_unit(&ctx.subjects, &msg.subject, &h.unit))
            .map(|_| h)
    })
}

/// Decodes a report the pump routed to `unit`'s watcher by its subject
/// (which it parsed once), in the format its content type named (`None`:
/// the payload decides): the report's unit must be `unit`.
pub fn decode_routed(
    ctx: &Ctx,
    msg: &Message,
    format: Option<Format>,
    unit: &str,
) -> Result<SaluteReport, CodecError> {
    let format = format.unwrap_or_else(|| Format::detect(&msg.payload, None));
    xo_proto::codec::decode_as::<SaluteReport>(&msg.payload, format, ctx.cfg.wire.max_payload)
        .and_then(|r| same_unit(Some(unit), &r.unit.unit).map(|_| r))
}

/// A unit may only report for itself: the subject's unit must match.
fn check_subject_unit(subjects: &Subjects, subject: &str, unit: &str) -> Result<(), CodecError> {
    same_unit(subjects.unit_of(subject), unit)
}

/// `unit` (a message's) against the unit its subject names, if any.
fn same_unit(subject_unit: Option<&str>, unit: &str) -> Result<(), CodecError> {
    match subject_unit {
        Some(u) if u == unit => Ok(()),
        other => Err(CodecError::Invalid {
            ty: "SaluteReport",
            reason: Invalid::NotSubjectUnit {
                unit: unit.to_string(),
                subject: other.unwrap_or("").to_string(),
            },
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
    if let Some(f) = pct.and_then(fill_of_pct) {
        report.size.context_fill = f;
    }
}

/// `context_fill_pct` as a fill in 0..1: a percentage, or (as the seed's own
/// threshold `> 0.80` reads) a fraction when at most 1.
fn fill_of_pct(p: f64) -> Option<f64> {
    (p.is_finite() && p >= 0.0).then(|| if p > 1.0 { p / 100.0 } else { p }.min(1.0))
}

/// A report file in seed 000's own shape — the host of the seed's agents
/// writes `role_id`, `timestamp`, `context_fill_pct` and `status.health`,
/// and no `v` — as the same report in XO's shape (JSON), to be decoded and
/// checked like any other. `None`: not that shape (XO's own, or something
/// else, which the usual decoding names). The mapping:
///
/// | seed | XO |
/// | --- | --- |
/// | `role_id` | `unit.unit` and `unit.role` (the file is `<role_id>_latest.json`) |
/// | `timestamp` (RFC 3339, or seconds or ms since the epoch) | `time.seq` (ms): later rewrites count higher |
/// | `turn` or `iteration`, if given | `time.turn` (else 0: turn-based cooldowns then never run out) |
/// | `context_fill_pct` (top or in `size`) | `size.context_fill` (a percentage, or a fraction ≤ 1) |
/// | `status.health` or `health` (any case) | `status.health` |
/// | `turns_since_progress`, if given | `activity.turns_since_progress` |
pub fn seed_shaped(json: &[u8]) -> Option<Result<Vec<u8>, CodecError>> {
    use serde_json::{Value, json};
    let v: Value = serde_json::from_slice(json).ok()?;
    let o = v.as_object()?;
    if o.contains_key("v") || !o.contains_key("role_id") {
        return None;
    }
    let bad = |reason: String| {
        Some(Err(CodecError::Invalid {
            ty: "SaluteReport",
            reason: Invalid::SeedShaped(reason),
        }))
    };
    let Some(role) = o["role_id"].as_str() else {
        return bad("role_id is not a string".into());
    };
    let seq = match o.get("timestamp") {
        Some(Value::String(t)) => xo_sensor::parse_time_ms(t),
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(|t| if t < 1e11 { t * 1000.0 } else { t } as u64),
        _ => None,
    };
    let Some(seq) = seq else {
        return bad(format!(
            "timestamp {} is no RFC 3339 time or number (it orders the file's rewrites)",
            o.get("timestamp")
                .map_or("(missing)".into(), Value::to_string)
        ));
    };
    let turn = o
        .get("turn")
        .or_else(|| o.get("iteration"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let pct = o
        .get("context_fill_pct")
        .or_else(|| o.get("size").and_then(|s| s.get("context_fill_pct")));
    let fill = match pct {
        None => 0.0,
        Some(p) => match p.as_f64().and_then(fill_of_pct) {
            Some(f) => f,
            None => return bad(format!("context_fill_pct {p} is no percentage")),
        },
    };
    let health = o
        .get("status")
        .and_then(|s| s.get("health"))
        .or_else(|| o.get("health"));
    let health = match health.map(|h| h.as_str().map(str::to_ascii_lowercase)) {
        None => "green".to_string(),
        Some(Some(h)) if matches!(h.as_str(), "green" | "amber" | "red") => h,
        Some(_) => {
            return bad(format!(
                "status.health {} is not GREEN, AMBER or RED",
                health.map_or(String::new(), Value::to_string)
            ));
        }
    };
    let mut out = json!({
        "v": xo_proto::PROTOCOL_VERSION,
        "unit": {"unit": role, "role": role},
        "time": {"turn": turn, "seq": seq},
        "size": {"context_fill": fill},
        "status": {"health": health},
    });
    if let Some(t) = o.get("turns_since_progress").and_then(Value::as_u64) {
        out["activity"] = json!({"turns_since_progress": t});
    }
    Some(serde_json::to_vec(&out).map_err(|e| CodecError::Invalid {
        ty: "SaluteReport",
        reason: Invalid::SeedShaped(e.to_string()),
    }))
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
