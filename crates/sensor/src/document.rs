//! Whole recordings as their agents leave them on disk, each read into
//! [`Run`]s: one run per session, whatever the file's shape.
//!
//! | format | shapes |
//! | --- | --- |
//! | every line format | one event a line (a stream, a transcript, a rollout) |
//! | `openhands` | also: an indented JSON array of events (`openhands.core.main`'s `save_trajectory_path`); an evaluation `output.jsonl`, one run a line with its events in `history`; an `events/` folder, one event a file (the caller lists the files in order and gives them as lines) |
//! | `swe-agent` | a `.traj` (`trajectory`, or only `history`), a mini-swe-agent document (`messages`) or its bare message list |

use serde_json::Value;

use crate::{Format, LineError, Sensor, SensorError, Stats, TurnEvent, swe};

/// One session of an agent, read from a recording.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// The session's id as the recording names it (else `None`: the caller
    /// names the run after its file).
    pub id: Option<String>,
    /// The session that started this one (a Claude Code subagent's parent).
    pub parent: Option<String>,
    pub turns: Vec<TurnEvent>,
    pub stats: Stats,
    /// Calls with no result when the recording ended.
    pub unfinished: usize,
    /// `None`: the recording has no end (cut short, or still running);
    /// `Some(true)`: it ended failed.
    pub ended: Option<bool>,
    /// Lines (events) that could not be used; the rest was read.
    pub errors: Vec<LineError>,
}

impl Run {
    /// `succeeded`, `failed` or `unknown` (no end recorded).
    pub fn outcome(&self) -> &'static str {
        match self.ended {
            Some(false) => "succeeded",
            Some(true) => "failed",
            None => "unknown",
        }
    }
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

/// A session's unit: its session id, else the name of its file (or
/// folder). `xo import` and `xo watch` name a session alike.
pub fn unit_for(session: Option<&str>, name: &str) -> String {
    unit_id(session.unwrap_or(name))
}

/// Every run of one recording's text.
pub fn read_runs(format: Format, text: &str) -> Result<Vec<Run>, SensorError> {
    if format == Format::SweAgent {
        let (turns, stats, ended, unfinished) = swe::read(text)?;
        return Ok(vec![Run {
            turns,
            stats,
            ended,
            unfinished,
            ..Run::default()
        }]);
    }
    let head = text.trim_start();
    if format == Format::OpenHands && head.starts_with('[') {
        let events: Vec<Value> = serde_json::from_str(head).map_err(|e| SensorError::Document {
            what: "a JSON array of OpenHands events".into(),
            why: e.to_string(),
        })?;
        return Ok(vec![events_run(format, events.iter(), None)]);
    }
    if format == Format::OpenHands
        && let Some(first) = head.lines().next()
        && first.contains("\"history\"")
        && let Ok(v) = serde_json::from_str::<Value>(first)
        && v.get("history").is_some_and(Value::is_array)
    {
        // An evaluation's output: a run a line.
        let mut runs = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value = serde_json::from_str(line).map_err(|e| SensorError::Document {
                what: format!("a JSON run (line {})", i + 1),
                why: e.to_string(),
            })?;
            let history = v.get("history").and_then(Value::as_array);
            // The harness's own verdict: an error stopped the run, failed.
            let error = v
                .get("error")
                .and_then(Value::as_str)
                .filter(|e| !e.is_empty());
            let mut run = events_run(format, history.into_iter().flatten(), error);
            if let Some(id) = v.get("instance_id").and_then(Value::as_str) {
                run.id = Some(id.to_string());
            }
            runs.push(run);
        }
        return Ok(runs);
    }
    let mut sensor = Sensor::new(format);
    let mut run = Run::default();
    for line in text.split('\n') {
        match sensor.line(line) {
            Ok(t) => run.turns.extend(t),
            Err(e) => run.errors.push(e),
        }
    }
    Ok(vec![finish(sensor, run)])
}

/// A run from events given one by one; `error`, the harness's, ends it failed.
fn events_run<'a>(
    format: Format,
    events: impl Iterator<Item = &'a Value>,
    error: Option<&str>,
) -> Run {
    let mut sensor = Sensor::new(format);
    let mut run = Run::default();
    for e in events {
        match sensor.line(&e.to_string()) {
            Ok(t) => run.turns.extend(t),
            Err(e) => run.errors.push(e),
        }
    }
    if let Some(e) = error {
        run.turns
            .push(sensor.common.end(format!("error: {e}"), Some(e)));
    }
    finish(sensor, run)
}

fn finish(mut sensor: Sensor, mut run: Run) -> Run {
    run.turns.extend(sensor.finish());
    run.id = sensor.session().map(str::to_string);
    run.parent = sensor.parent().map(str::to_string);
    run.ended = sensor.ended();
    run.unfinished = sensor.unfinished();
    run.stats = sensor.stats().clone();
    run
}
