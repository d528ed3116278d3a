//! Recorded agent runs read from disk (`xo import`, the detection bench): a
//! file of one of the sensor's formats, or an OpenHands `events/` folder,
//! each session named as `xo watch` names it.

use std::path::Path;

use xo_sensor::document::{self, unit_for, unit_id};
use xo_sensor::salute::SaluteState;
use xo_sensor::{Format, SensorError};

use crate::watch::{event_files, recording_name};

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Format(String, SensorError),
    #[error("{path} is a folder: only openhands reads folders (an events/ folder); give {} files", .format.as_str())]
    Folder { path: String, format: Format },
    #[error("{0}: no event files (*.json) in it")]
    NoEvents(String),
}

/// One recorded session, read and named.
pub struct Imported {
    /// Its unit id: the session's id, else the file's name.
    pub unit: String,
    pub run: document::Run,
}

impl Imported {
    /// What was read of the run, in one line (for a log).
    pub fn summary(&self) -> String {
        let (run, st) = (&self.run, &self.run.stats);
        format!(
            "{} lines, {} events, {} turns; {} unknown events skipped, {} lines rejected, {} results without a call, {} calls without a result, {} cancelled calls; outcome {}",
            st.lines,
            st.events,
            run.turns.len(),
            st.unknown,
            st.malformed,
            st.orphan_results,
            run.unfinished,
            st.cancelled,
            run.outcome()
        )
    }

    /// What the run's last report says of it: `<outcome>; <summary>`
    /// (`outcome` from `label` when given).
    pub fn note(&self, label: Option<&str>) -> String {
        let summary = self
            .run
            .turns
            .iter()
            .rev()
            .find_map(|t| t.summary.clone())
            .unwrap_or_else(|| "no end recorded".into());
        let mut note = format!("outcome={}; {summary}", label.unwrap_or(self.run.outcome()));
        if let Some(p) = &self.run.parent {
            note.push_str(&format!("; parent={}", unit_id(p)));
        }
        note
    }

    /// The SALUTE reports of the run, one a turn; the last carries the note.
    pub fn reports(
        &self,
        role: &str,
        context_limit: u64,
        label: Option<&str>,
    ) -> Vec<xo_proto::SaluteReport> {
        let mut state = SaluteState::new(&self.unit, role, None, context_limit);
        state.start_task(Some(self.unit.clone()));
        let n = self.run.turns.len();
        let note = self.note(label);
        self.run
            .turns
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, t)| {
                let mut r = state.turn(t);
                if i + 1 == n {
                    r.status.note = Some(note.clone());
                }
                r
            })
            .collect()
    }
}

/// The runs of one recording: a file, or an OpenHands `events/` folder
/// (one event a JSON file, read in the order of their numbers). Each run
/// keeps the lines (events) that could not be used (`run.errors`) and what
/// was read (`summary`); the rest is read.
pub fn read_runs(format: Format, path: &Path) -> Result<Vec<Imported>, RecordingError> {
    let file = path.display().to_string();
    let text = if path.is_dir() {
        events_folder(format, path)?
    } else {
        let bytes = std::fs::read(path).map_err(|e| RecordingError::Read(file.clone(), e))?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let name = recording_name(path);
    let runs = document::read_runs(format, &text).map_err(|e| RecordingError::Format(file, e))?;
    let many = runs.len() > 1;
    Ok(runs
        .into_iter()
        .enumerate()
        .map(|(i, run)| {
            let unit = match &run.id {
                None if many => unit_id(&format!("{name}-{}", i + 1)),
                id => unit_for(id.as_deref(), &name),
            };
            Imported { unit, run }
        })
        .collect())
}

/// An OpenHands conversation folder (or its `events/`): its events as
/// lines, in order.
fn events_folder(format: Format, dir: &Path) -> Result<String, RecordingError> {
    if format != Format::OpenHands {
        return Err(RecordingError::Folder {
            path: dir.display().to_string(),
            format,
        });
    }
    let (events, files) = match crate::watch::conversation_events(dir) {
        Some(found) => found,
        // None here: say why (unreadable, or no event file in it).
        None => (
            dir.to_path_buf(),
            event_files(dir).map_err(|e| RecordingError::Read(dir.display().to_string(), e))?,
        ),
    };
    if files.is_empty() {
        return Err(RecordingError::NoEvents(events.display().to_string()));
    }
    let mut text = String::new();
    for (_, _, p) in files {
        let raw = std::fs::read_to_string(&p)
            .map_err(|e| RecordingError::Read(p.display().to_string(), e))?;
        // One event a line: an event file is indented JSON.
        match serde_json::from_str::<serde_json::Value>(&raw) {
            Ok(v) => text.push_str(&v.to_string()),
            Err(_) => text.push_str(&raw.replace('\n', " ")),
        }
        text.push('\n');
    }
    Ok(text)
}
