//! `xo import FORMAT FILE...`: recorded agent runs (Claude Code, Cursor,
//! Codex, OpenHands, SWE-agent) as SALUTE JSON lines on stdout, one report
//! a turn, ready for `xo radio replay --summary` or `xo report`.
//!
//! Each session is one unit (its session id, else its file name) and one
//! task; a file may hold several (an OpenHands evaluation's `output.jsonl`)
//! and a folder one (an OpenHands `events/` folder). The last report of a
//! run carries `status.note` = `outcome=succeeded|failed|unknown; <summary>`
//! (`unknown`: the log records no end; `--label` overrides), which the
//! replay summary counts; a Claude Code subagent's adds `parent=<unit>`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use xo_runner::watch::{event_files, recording_name};
use xo_sensor::Format;
use xo_sensor::document::{self, unit_for, unit_id};
use xo_sensor::salute::SaluteState;

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

/// One recorded session, read and named.
pub struct Imported {
    /// Its unit id: the session's id, else the file's name.
    pub unit: String,
    pub run: document::Run,
}

impl Imported {
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
        let runs = read_runs(format, Path::new(file))?;
        if runs.iter().all(|r| r.run.turns.is_empty()) {
            empty.push(file.clone());
            continue;
        }
        for imported in runs.iter().filter(|r| !r.run.turns.is_empty()) {
            for r in imported.reports(&args.role, args.context_limit, args.label.as_deref()) {
                serde_json::to_writer(&mut out, &r)?;
                out.write_all(b"\n")?;
            }
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

/// The runs of one recording: a file, or an OpenHands `events/` folder
/// (one event a JSON file, read in the order of their numbers). Events
/// that cannot be used are told on stderr with file and line; the rest is
/// read.
pub fn read_runs(format: Format, path: &Path) -> anyhow::Result<Vec<Imported>> {
    let file = path.display().to_string();
    let text = if path.is_dir() {
        events_folder(format, path)?
    } else {
        let bytes = std::fs::read(path).with_context(|| format!("reading {file}"))?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let name = recording_name(path);
    let runs = document::read_runs(format, &text).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let many = runs.len() > 1;
    Ok(runs
        .into_iter()
        .enumerate()
        .map(|(i, run)| {
            for e in &run.errors {
                errln!("{file}:{}: {}", e.line, e.reason);
            }
            let st = &run.stats;
            errln!(
                "{file}: {} lines, {} events, {} turns; {} unknown events skipped, {} lines rejected, {} results without a call, {} calls without a result, {} cancelled calls; outcome {}",
                st.lines,
                st.events,
                run.turns.len(),
                st.unknown,
                st.malformed,
                st.orphan_results,
                run.unfinished,
                st.cancelled,
                run.outcome()
            );
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
fn events_folder(format: Format, dir: &Path) -> anyhow::Result<String> {
    if format != Format::OpenHands {
        bail!(
            "{} is a folder: only openhands reads folders (an events/ folder); give {} files",
            dir.display(),
            format.as_str()
        );
    }
    let events = if dir.join("events").is_dir() {
        dir.join("events")
    } else {
        dir.to_path_buf()
    };
    let files = event_files(&events).with_context(|| format!("listing {}", events.display()))?;
    if files.is_empty() {
        bail!("{}: no event files (*.json) in it", events.display());
    }
    let mut text = String::new();
    for (_, _, p) in files {
        let raw =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        // One event a line: an event file is indented JSON.
        match serde_json::from_str::<serde_json::Value>(&raw) {
            Ok(v) => text.push_str(&v.to_string()),
            Err(_) => text.push_str(&raw.replace('\n', " ")),
        }
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    #[test]
    fn unit_ids_are_tokens() {
        assert_eq!(xo_sensor::document::unit_id("3f2a-77b1"), "3f2a-77b1");
        assert_eq!(
            xo_sensor::document::unit_id("django__django-11099.traj"),
            "django__django-11099-traj"
        );
        assert_eq!(xo_sensor::document::unit_id(""), "run");
        assert!(
            xo_proto::validate_unit_id(&xo_sensor::document::unit_id(&"é".repeat(300))).is_ok()
        );
    }
}
