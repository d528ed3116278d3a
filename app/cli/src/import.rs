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

use anyhow::bail;
use xo_runner::recordings::{self, Imported};
use xo_sensor::Format;

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

/// Reads a recording's runs and tells on stderr what could not be used.
pub fn read_runs(format: Format, path: &Path) -> anyhow::Result<Vec<Imported>> {
    let file = path.display().to_string();
    let runs = recordings::read_runs(format, path)?;
    for r in &runs {
        for e in &r.run.errors {
            errln!("{file}:{}: {}", e.line, e.reason);
        }
        errln!("{file}: {}", r.summary());
    }
    Ok(runs)
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
