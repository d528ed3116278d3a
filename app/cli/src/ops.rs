//! Operator commands.

use std::io::{BufRead, Read};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use xo_bus::{Message, typed};
use xo_proto::codec::{self, CONTENT_TYPE, Format};
use xo_proto::control::{ShowUnit, SteerUnit, UnitSummary};
use xo_proto::{Health, SaluteReport, Severity, Steering};
use xo_radio::Radio;
use xo_runtime::XoConfig;

use crate::connect::{client, client_bus};

const TIMEOUT: Duration = Duration::from_secs(10);

fn read_input(file: &str) -> anyhow::Result<Vec<u8>> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading stdin")?;
        Ok(buf)
    } else {
        std::fs::read(file).with_context(|| format!("reading {file}"))
    }
}

pub async fn report(cfg: &XoConfig, file: &str) -> anyhow::Result<ExitCode> {
    let bytes = read_input(file)?;
    let report: SaluteReport = codec::decode(&bytes, Some(codec::JSON), cfg.wire.max_payload)
        .with_context(|| format!("{file} is not a valid SALUTE report"))?;
    let bus = client_bus(cfg).await?;
    let subjects = cfg.subjects();
    typed::publish(
        &bus,
        &subjects.salute(&report.unit.unit),
        &report,
        cfg.wire.format,
    )
    .await?;
    bus.flush().await?;
    outln!(
        "published report of {} (turn {}, seq {})",
        report.unit.unit,
        report.time.turn,
        report.time.seq
    );
    Ok(ExitCode::SUCCESS)
}

/// A payload as JSON: JSON as is, MessagePack decoded, anything else as text.
fn payload_json(m: &Message) -> serde_json::Value {
    match Format::detect(&m.payload, m.headers.get(CONTENT_TYPE)) {
        Format::Json => serde_json::from_slice(&m.payload).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&m.payload).into())
        }),
        Format::Msgpack => rmp_value(&m.payload).unwrap_or_else(|| {
            serde_json::Value::String(String::from_utf8_lossy(&m.payload).into())
        }),
    }
}

fn rmp_value(bytes: &[u8]) -> Option<serde_json::Value> {
    codec::decode_plain::<serde_json::Value>(bytes, Some(codec::MSGPACK), usize::MAX).ok()
}

fn summarize(cfg: &XoConfig, m: &Message) -> String {
    let p = cfg.org.prefix.as_str();
    let kind = m
        .subject
        .strip_prefix(p)
        .and_then(|r| r.strip_prefix('.'))
        .and_then(|r| r.split('.').next())
        .unwrap_or("");
    match kind {
        "salute" => match typed::decode::<SaluteReport>(m, usize::MAX) {
            Ok(r) => format!(
                "report {} turn={} seq={} health={} ctx={:.0}% stalled={} recent={} task={}",
                r.unit.unit,
                r.time.turn,
                r.time.seq,
                health(r.status.health),
                r.size.fill() * 100.0,
                r.activity.turns_since_progress,
                r.activity.recent.len(),
                r.activity.task_id.as_deref().unwrap_or("-")
            ),
            Err(e) => format!("undecodable report: {e}"),
        },
        "steer" => match typed::decode::<Steering>(m, usize::MAX) {
            Ok(s) => format!("steer {} [{}/{}] {}", s.unit, s.kind, s.severity, s.message),
            Err(e) => format!("undecodable steering: {e}"),
        },
        "dlq" => format!(
            "dead letter ({}) {}",
            m.headers.get(typed::DLQ_REASON).unwrap_or("?"),
            m.headers.get(typed::DLQ_ERROR).unwrap_or("")
        ),
        _ => {
            let v = payload_json(m);
            let mut s = v.to_string();
            if s.len() > 200 {
                s.truncate(200);
                s.push('…');
            }
            s
        }
    }
}

pub async fn tap(
    cfg: &XoConfig,
    subject: Option<String>,
    json: bool,
    count: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let bus = client_bus(cfg).await?;
    let pattern = subject.unwrap_or_else(|| cfg.subjects().all());
    let sub = bus.subscribe(&pattern).await?;
    bus.flush().await?;
    errln!("tapping {pattern} on {} (ctrl-c stops)", bus.kind());
    let cfg = cfg.clone();
    let mut seen = 0u64;
    // Read as every service reads: through the bus's input (a message that
    // cannot be shown does not end the tap).
    let tap = xo_bus::input::raw(sub, std::future::pending(), move |m: xo_bus::Message| {
        if json {
            let headers: serde_json::Map<String, serde_json::Value> = m
                .headers
                .iter()
                .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v.to_owned())))
                .collect();
            let line = serde_json::json!({
                "subject": m.subject,
                "reply": m.reply,
                "headers": headers,
                "payload": payload_json(&m),
            });
            outln!("{line}");
        } else {
            outln!("{:<32} {}", m.subject, summarize(&cfg, &m));
        }
        seen += 1;
        let next = if count.is_some_and(|c| seen >= c) {
            xo_bus::input::Next::Stop
        } else {
            xo_bus::input::Next::Go
        };
        async move { next }
    });
    let _ = tap.await;
    Ok(ExitCode::SUCCESS)
}

fn health(h: Health) -> &'static str {
    match h {
        Health::Green => "green",
        Health::Amber => "amber",
        Health::Red => "red",
    }
}

fn age(last_seen: u64) -> String {
    let secs = xo_proto::now_ms().saturating_sub(last_seen) / 1000;
    format!("{secs}s ago")
}

/// A unit's STATE in `xo units`: waiting for a usage limit shows until when
/// (UTC).
fn state_of(u: &UnitSummary) -> String {
    if u.stale {
        "stale".into()
    } else if u.refused_reports >= 3 {
        "refused".into()
    } else if let (true, Some(t)) = (u.ended, u.waiting_until) {
        format!("until {}Z", xo_runtime::clock::hh_mm(t))
    } else if u.ended {
        "ended".into()
    } else {
        "live".into()
    }
}

fn table(units: &[UnitSummary]) -> String {
    let mut out = format!(
        "{:<20} {:<12} {:<7} {:<7} {:<7} {:<10} {:>6} {:>5} {:>6} {:<10} {}\n",
        "UNIT", "ROLE", "HEALTH", "SELF", "STATE", "NEEDS", "TURN", "CTX", "STEER", "TASK", "SEEN"
    );
    for u in units {
        out.push_str(&format!(
            "{:<20} {:<12} {:<7} {:<7} {:<7} {:<10} {:>6} {:>4}% {:>6} {:<10} {}\n",
            u.unit,
            u.role,
            health(u.health),
            health(u.self_health),
            state_of(u),
            u.needs.as_ref().map_or("-", |n| n.reason.as_str()),
            u.turn,
            (u.context_fill * 100.0).round(),
            u.steering_sent,
            u.task_id.as_deref().unwrap_or("-"),
            age(u.last_seen)
        ));
        if u.unreadable > 0 {
            // The row's newline, then what its sensor could not read.
            out.pop();
            out.push_str(&format!(
                " · unreadable: {} records (not steered on them)\n",
                u.unreadable
            ));
        }
        if let Some(a) = &u.ack {
            out.pop();
            out.push_str(&format!(
                " · acked by {} until {}: {}\n",
                a.by,
                xo_runtime::clock::hh_mm(a.until),
                a.why
            ));
        }
    }
    out
}

pub async fn units(
    cfg: &XoConfig,
    unit: Option<String>,
    json: bool,
    needs: bool,
) -> anyhow::Result<ExitCode> {
    let client = client(cfg).await?.with_timeout(TIMEOUT);
    match unit {
        None => {
            let mut list = client
                .all_units()
                .await
                .context("asking the supervisor (is `xo up` or `xo serve supervisor` running?)")?;
            if needs {
                list = xo_proto::control::needing(&list)
                    .into_iter()
                    .cloned()
                    .collect();
            }
            if json {
                outln!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() && needs {
                outln!("no unit needs you");
            } else if list.is_empty() {
                outln!("no units have reported yet");
            } else {
                out!("{}", table(&list));
                if needs {
                    for u in &list {
                        if let Some(n) = &u.needs {
                            outln!(
                                "\n{} needs you ({}, since turn {}, {}): {}",
                                u.unit,
                                n.reason,
                                n.turn,
                                age(n.since),
                                n.detail
                            );
                        }
                    }
                }
            }
        }
        Some(unit) => {
            let d = client.call(&ShowUnit { unit }).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                out!("{}", table(std::slice::from_ref(&d.summary)));
                if let Some(n) = &d.summary.needs {
                    outln!(
                        "\nneeds you ({}, since turn {}, stretch from turn {}): {}",
                        n.reason,
                        n.turn,
                        n.stretch_from,
                        n.detail
                    );
                }
                if let Some(r) = &d.report {
                    outln!(
                        "\nlatest report: turn {} seq {} pace {} step {} — {}",
                        r.time.turn,
                        r.time.seq,
                        serde_json::to_value(r.unit.pace)?.as_str().unwrap_or("?"),
                        r.activity.step.as_deref().unwrap_or("-"),
                        r.activity.summary.as_deref().unwrap_or("-")
                    );
                }
                if !d.recent_steering.is_empty() {
                    outln!("\nrecent steering:");
                    for (i, s) in d.recent_steering.iter().enumerate() {
                        // What followed it: the console's words.
                        let then = xo_proto::control::followed(
                            &d.recent_steering,
                            i,
                            &d.history,
                            d.summary.needs.as_ref(),
                        );
                        outln!(
                            "  turn {:>5} {:<11} {:<8} {}\n             then: {then}",
                            s.turn,
                            s.kind,
                            s.severity,
                            s.message
                        );
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn steer(
    cfg: &XoConfig,
    unit: String,
    text: String,
    severity: &str,
) -> anyhow::Result<ExitCode> {
    let severity: Severity = serde_json::from_value(serde_json::Value::String(severity.into()))
        .map_err(|_| {
            anyhow::anyhow!("--severity {severity:?}: use info, warning, urgent or critical")
        })?;
    let s = client(cfg)
        .await?
        .with_timeout(TIMEOUT)
        .call(&SteerUnit {
            unit,
            message: text,
            severity,
            by: std::env::var("USER").unwrap_or_default(),
        })
        .await?;
    outln!("sent {} to {}: {}", s.id, s.unit, s.message);
    Ok(ExitCode::SUCCESS)
}

/// `xo ack UNIT --why TEXT [--for 30m] [--by NAME]`.
pub async fn ack(
    cfg: &XoConfig,
    unit: String,
    why: String,
    for_: &str,
    by: Option<String>,
) -> anyhow::Result<ExitCode> {
    let for_ms = xo_runtime::clock::parse_ms(for_)
        .ok_or_else(|| anyhow::anyhow!("--for {for_:?}: a duration such as 30m, 2h or 1d"))?;
    let by = by
        .or_else(|| std::env::var("USER").ok())
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "cli".into());
    let req = xo_proto::control::AckUnit {
        unit,
        by,
        why,
        for_ms,
    };
    req.check().map_err(anyhow::Error::msg)?;
    let s = client(cfg).await?.with_timeout(TIMEOUT).call(&req).await?;
    match s.ack {
        Some(a) => outln!(
            "{} acknowledged by {} until {}: {}",
            s.unit,
            a.by,
            xo_runtime::clock::rfc3339(a.until),
            a.why
        ),
        None => outln!("{} acknowledged", s.unit),
    }
    Ok(ExitCode::SUCCESS)
}

/// What a replay learned of one unit's run.
#[derive(Debug, Default)]
struct RunSummary {
    reports: u64,
    last_turn: u64,
    steering: std::collections::BTreeMap<String, u64>,
    /// The turn, tokens (in + out) and cost at the first steering.
    first: Option<(u64, u64, f64)>,
    tokens: u64,
    cost: f64,
    outcome: Option<String>,
}

impl RunSummary {
    fn json(&self, unit: &str) -> serde_json::Value {
        let after = self.first.map(|(turn, tokens, cost)| {
            serde_json::json!({
                "turns": self.last_turn.saturating_sub(turn),
                "tokens": self.tokens.saturating_sub(tokens),
                "cost_usd": (self.cost - cost).max(0.0),
            })
        });
        serde_json::json!({
            "unit": unit,
            "turns": self.last_turn,
            "reports": self.reports,
            "steering": self.steering,
            "first_detection_turn": self.first.map(|f| f.0),
            "after_first_detection": after,
            "tokens": self.tokens,
            "cost_usd": self.cost,
            "outcome": self.outcome,
        })
    }
}

/// Replays recorded reports (JSON lines) through the detector: one JSON
/// line per steering decision, or with `summary` one line per unit (what
/// steering would have said, when, and what the run spent after it) and
/// the counts of steered and unsteered runs by outcome.
pub fn replay(
    cfg: &XoConfig,
    file: &str,
    summary: bool,
    json: bool,
    explain: bool,
) -> anyhow::Result<ExitCode> {
    let reader: Box<dyn BufRead> = if file == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("opening {file}"))?,
        ))
    };
    let mut radio = Radio::new(cfg.roles());
    let (mut reports, mut rejected, mut decisions) = (0u64, 0u64, 0u64);
    let mut runs: std::collections::BTreeMap<String, RunSummary> = Default::default();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{file}: reading line {}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let report: SaluteReport =
            match codec::decode(line.as_bytes(), Some(codec::JSON), cfg.wire.max_payload) {
                Ok(r) => r,
                Err(e) => {
                    errln!("{file}:{}: {e}", i + 1);
                    rejected += 1;
                    continue;
                }
            };
        reports += 1;
        let a = radio.check(&report);
        let run = runs.entry(report.unit.unit.clone()).or_default();
        run.reports += 1;
        run.last_turn = run.last_turn.max(report.time.turn);
        run.tokens = report.equipment.tokens_in + report.equipment.tokens_out;
        run.cost = report.equipment.cost_usd;
        if let Some(o) = report
            .status
            .note
            .as_deref()
            .and_then(|n| n.strip_prefix("outcome="))
        {
            run.outcome = Some(o.split(';').next().unwrap_or(o).trim().to_string());
        }
        if !a.steering.is_empty() && run.first.is_none() {
            run.first = Some((report.time.turn, run.tokens, run.cost));
        }
        for s in a.steering {
            decisions += 1;
            *run.steering.entry(s.kind.as_str().to_string()).or_default() += 1;
            if summary {
                continue;
            }
            if explain {
                let st = radio.unit_state(&s.unit);
                let from = st.map_or(0, |st| st.stretch_from);
                let given = st
                    .and_then(|st| st.stretches.get(&s.kind))
                    .map_or(0, |k| k.given);
                outln!(
                    "{} turn {} {} ({}): {}",
                    s.unit,
                    s.turn,
                    s.kind,
                    s.severity,
                    s.message
                );
                outln!(
                    "  rule: {} (observed {})",
                    s.evidence.rule,
                    s.evidence.observed
                );
                if xo_radio::escalate::escalates(s.kind) {
                    outln!(
                        "  stretch: since turn {from} without progress; this is steering {given} of at most {} of its kind in it",
                        xo_radio::escalate::MAX_PER_STRETCH
                    );
                }
                for a in report
                    .activity
                    .recent
                    .iter()
                    .filter(|a| s.evidence.turns.contains(&a.turn))
                {
                    let outcome = match a.outcome {
                        xo_proto::Outcome::Ok => "ok",
                        xo_proto::Outcome::Error => "error",
                        xo_proto::Outcome::Empty => "empty",
                    };
                    outln!(
                        "  turn {:>5}  {:<12} {:<6} {:<24} {}{}",
                        a.turn,
                        a.tool.as_deref().unwrap_or("message"),
                        outcome,
                        a.error_type.as_deref().unwrap_or("-"),
                        a.cmd
                            .as_deref()
                            .map(|c| format!("`{c}`"))
                            .unwrap_or_default(),
                        a.line
                            .as_deref()
                            .map(|l| format!("  \"{l}\""))
                            .unwrap_or_default(),
                    );
                }
                if let Some(n) = &a.needs {
                    outln!("  needs you: {} since turn {}", n.reason, n.turn);
                }
                continue;
            }
            let line = serde_json::json!({
                "unit": s.unit,
                "turn": s.turn,
                "seq": report.time.seq,
                "kind": s.kind,
                "severity": s.severity,
                "message": s.message,
                "evidence": s.evidence,
                "health": a.health,
            });
            outln!("{line}");
        }
    }
    if summary {
        print_summary(&runs, json);
    }
    errln!("{reports} reports, {decisions} steering decisions, {rejected} lines rejected");
    if rejected > 0 {
        bail!("{rejected} lines of {file} were not valid reports");
    }
    Ok(ExitCode::SUCCESS)
}

fn print_summary(runs: &std::collections::BTreeMap<String, RunSummary>, json: bool) {
    // steered / unsteered by outcome
    let mut table: std::collections::BTreeMap<(&str, bool), u64> = Default::default();
    for r in runs.values() {
        let outcome = r.outcome.as_deref().unwrap_or("unknown");
        *table.entry((outcome, r.first.is_some())).or_default() += 1;
    }
    if json {
        for (unit, r) in runs {
            outln!("{}", r.json(unit));
        }
        let totals: Vec<serde_json::Value> = table
            .iter()
            .map(|((o, s), n)| serde_json::json!({"outcome": o, "steered": s, "runs": n}))
            .collect();
        outln!("{}", serde_json::json!({ "totals": totals }));
        return;
    }
    outln!(
        "{:<28} {:>6} {:>6} {:>8} {:>8} {:>9}  {:<10} steering",
        "run",
        "turns",
        "first",
        "after",
        "tok.after",
        "cost.after",
        "outcome"
    );
    for (unit, r) in runs {
        let (first, after, tok, cost) = match r.first {
            Some((t, tokens, c)) => (
                t.to_string(),
                r.last_turn.saturating_sub(t).to_string(),
                r.tokens.saturating_sub(tokens).to_string(),
                format!("{:.4}", (r.cost - c).max(0.0)),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let kinds: Vec<String> = r.steering.iter().map(|(k, n)| format!("{k}×{n}")).collect();
        outln!(
            "{unit:<28} {:>6} {first:>6} {after:>8} {tok:>8} {cost:>9}  {:<10} {}",
            r.last_turn,
            r.outcome.as_deref().unwrap_or("unknown"),
            kinds.join(", ")
        );
    }
    outln!();
    for ((outcome, steered), n) in &table {
        outln!(
            "{n:>5} {outcome} runs {}",
            if *steered {
                "the XO would have steered"
            } else {
                "with no steering"
            }
        );
    }
}

/// `xo store repair`: every damaged store file rewritten with its good
/// records, after a backup; what was dropped is listed.
pub async fn store_repair(cfg: &XoConfig, files: &[String]) -> anyhow::Result<ExitCode> {
    let files: Vec<std::path::PathBuf> = if files.is_empty() {
        let mut v = Vec::new();
        for sub in ["kv", "log"] {
            let dir = cfg.state.store_dir().join(sub);
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "kv" || x == "log") {
                    v.push(p);
                }
            }
        }
        v.sort();
        v
    } else {
        files.iter().map(std::path::PathBuf::from).collect()
    };
    if files.is_empty() {
        outln!("no store files under {}", cfg.state.store_dir().display());
        return Ok(ExitCode::SUCCESS);
    }
    for f in &files {
        match xo_bus::file_store::repair_file(f) {
            Ok(None) => outln!("{}: intact", f.display()),
            Ok(Some(r)) => {
                outln!(
                    "{}: repaired — {} records kept; backup {}",
                    f.display(),
                    r.kept,
                    r.backup.display()
                );
                for (offset, len, why) in &r.dropped {
                    outln!("  dropped {len} bytes at {offset}: {why}");
                }
                for held in &r.lost {
                    outln!("  it held {held}");
                }
                if let Some((offset, len)) = r.torn {
                    outln!("  cut a torn last record: {len} bytes at {offset}");
                }
            }
            Err(e) => anyhow::bail!("{}: {e}", f.display()),
        }
    }
    queue_status_note(cfg).await;
    Ok(ExitCode::SUCCESS)
}

/// Whether the queue's status decodes, on the embedded store; if not, what
/// the queue does about it at its next start (recover the last good
/// revision, keep the unreadable one).
async fn queue_status_note(cfg: &XoConfig) {
    use xo_proto::names::{QUEUE_BUCKET, QUEUE_GOOD_STATUS_KEY, QUEUE_STATUS_KEY};
    use xo_proto::queue::QueueStatus;
    let dir = cfg.state.store_dir();
    if !dir.join("kv").join(format!("{QUEUE_BUCKET}.kv")).is_file() {
        return;
    }
    let Ok(store) = xo_bus::FileStore::open(&dir) else {
        return;
    };
    let Ok(Some(status)) = store.get(QUEUE_BUCKET, QUEUE_STATUS_KEY).await else {
        return;
    };
    let Err(e) = serde_json::from_slice::<QueueStatus>(&status.value) else {
        outln!("{QUEUE_BUCKET}/{QUEUE_STATUS_KEY}: decodes");
        return;
    };
    let good = store
        .get(QUEUE_BUCKET, QUEUE_GOOD_STATUS_KEY)
        .await
        .ok()
        .flatten()
        .and_then(|g| serde_json::from_slice::<QueueStatus>(&g.value).ok());
    match good {
        Some(g) => outln!(
            "{QUEUE_BUCKET}/{QUEUE_STATUS_KEY}: does not decode ({e}); the queue's next start recovers it from the last good revision, {QUEUE_BUCKET}/{QUEUE_GOOD_STATUS_KEY} (written {}, goal {:?}), and keeps the unreadable one under {QUEUE_BUCKET}/status.corrupt",
            if g.last_updated.is_empty() {
                "at an unknown time"
            } else {
                g.last_updated.as_str()
            },
            g.goal.description
        ),
        None => outln!(
            "{QUEUE_BUCKET}/{QUEUE_STATUS_KEY}: does not decode ({e}) and no good revision is kept: the queue starts uninitialised; set the goal again with `xo init --force`"
        ),
    }
}

/// `xo config`: the configuration in force, secrets masked.
pub fn show_config(cfg: &XoConfig) -> anyhow::Result<ExitCode> {
    // Secrets are never printed: set or not, that is all it says.
    let mut shown = cfg.clone();
    if !shown.nats.password.is_empty() {
        shown.nats.password = "*** (set)".into();
    }
    shown.nats.url = xo_bus::nats::redact_url(&shown.nats.url);
    for w in &mut shown.alerts.webhooks {
        if !w.authorization.is_empty() && !w.authorization.starts_with("env:") {
            w.authorization = "*** (set)".into();
        }
    }
    outln!("{}", serde_json::to_string_pretty(&shown)?);
    Ok(ExitCode::SUCCESS)
}
