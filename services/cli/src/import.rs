//! `xo import FORMAT FILE...`: recorded agent runs (Claude Code, Cursor,
//! Codex, OpenHands, SWE-agent) as SALUTE JSON lines on stdout, one report
//! a turn, ready for `xo radio replay --summary` or `xo report`.
//!
//! Each file is one unit (its session id, else its file name), one task.
//! The last report of a run carries `status.note` = `outcome=succeeded|failed; <summary>`
//! (or the `--label` given), which the replay summary counts.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use xo_sensor::salute::SaluteState;
use xo_sensor::{Format, Sensor, TurnEvent, swe};

/// What `xo import` was asked.
#[derive(Debug)]
pub struct ImportArgs {
    pub format: String,
    pub files: Vec<String>,
    pub role: String,
    /// Overrides the outcome read from the stream (`succeeded`, `failed`).
    pub label: Option<String>,
    pub context_limit: u64,
}

/// A unit id from a session id or a file name: letters, digits, `-`, `_`.
pub fn unit_id(raw: &str) -> String {
    let s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(128)
        .collect();
    if s.is_empty() { "run".into() } else { s }
}

pub fn import(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    let format = Format::parse(&args.format).map_err(anyhow::Error::msg)?;
    if let Some(l) = &args.label
        && !matches!(l.as_str(), "succeeded" | "failed")
    {
        bail!("--label {l:?}: use succeeded or failed");
    }
    if args.files.is_empty() {
        bail!("no files: give one or more {} logs", format.as_str());
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut empty = Vec::new();
    for file in &args.files {
        let (turns, unit, note) = read_run(format, file)?;
        if turns.is_empty() {
            empty.push(file.clone());
            continue;
        }
        let mut state = SaluteState::new(&unit, &args.role, None, args.context_limit);
        state.start_task(Some(unit.clone()));
        // A run that ended with an error (its end turn carries one).
        let failed = turns.last().is_some_and(|t| {
            t.summary.is_some()
                && t.action
                    .as_ref()
                    .is_some_and(|a| a.outcome == xo_proto::Outcome::Error)
        });
        let n = turns.len();
        for (i, t) in turns.into_iter().enumerate() {
            let mut r = state.turn(t);
            if i + 1 == n {
                let outcome = args.label.clone().unwrap_or_else(|| {
                    if failed {
                        "failed".into()
                    } else {
                        "succeeded".into()
                    }
                });
                r.status.note = Some(format!("outcome={outcome}; {note}"));
            }
            serde_json::to_writer(&mut out, &r)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    if !empty.is_empty() {
        bail!(
            "no agent turns in {} — are they {} logs?",
            empty.join(", "),
            format.as_str()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One file's turns, its unit id and the run's summary. Lines that cannot
/// be used are told on stderr with file and line; the rest is read.
fn read_run(format: Format, file: &str) -> anyhow::Result<(Vec<TurnEvent>, String, String)> {
    let stem = Path::new(file)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("run")
        .to_string();
    if !format.is_lines() {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
        let (turns, stats) =
            swe::parse_document(&text).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        let note = turns
            .last()
            .and_then(|t| t.summary.clone())
            .unwrap_or_default();
        eprintln!("{file}: {} steps, {} turns", stats.events, turns.len());
        return Ok((turns, unit_id(&stem), note));
    }
    let f = std::fs::File::open(file).with_context(|| format!("opening {file}"))?;
    let mut sensor = Sensor::new(format);
    let mut turns = Vec::new();
    for line in std::io::BufReader::new(f).split(b'\n') {
        let line = line.with_context(|| format!("reading {file}"))?;
        match sensor.line(&String::from_utf8_lossy(&line)) {
            Ok(t) => turns.extend(t),
            Err(e) => eprintln!("{file}:{}: {}", e.line, e.reason),
        }
    }
    let st = sensor.stats();
    eprintln!(
        "{file}: {} lines, {} events, {} turns; {} unknown events skipped, {} lines rejected, {} results without a call, {} calls without a result",
        st.lines,
        st.events,
        turns.len(),
        st.unknown,
        st.malformed,
        st.orphan_results,
        sensor.unfinished()
    );
    let unit = unit_id(sensor.session().unwrap_or(&stem));
    let note = turns
        .iter()
        .rev()
        .find_map(|t| t.summary.clone())
        .unwrap_or_else(|| "no end recorded".into());
    Ok((turns, unit, note))
}

#[cfg(test)]
mod tests {
    #[test]
    fn unit_ids_are_tokens() {
        assert_eq!(super::unit_id("3f2a-77b1"), "3f2a-77b1");
        assert_eq!(
            super::unit_id("django__django-11099.traj"),
            "django__django-11099-traj"
        );
        assert_eq!(super::unit_id(""), "run");
        assert!(xo_proto::validate_unit_id(&super::unit_id(&"é".repeat(300))).is_ok());
    }
}
