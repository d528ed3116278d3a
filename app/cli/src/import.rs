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

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use xo_runner::recordings::{self, Imported};
use xo_sensor::{Format, KindCount};

/// What `xo import` was asked.
#[derive(Debug)]
pub struct ImportArgs {
    pub format: String,
    pub files: Vec<String>,
    pub role: String,
    /// Overrides the outcome read from the stream (`succeeded`, `failed`).
    pub label: Option<String>,
    pub context_limit: u64,
    /// Print what was read per record kind.
    pub stats: bool,
    /// Import a file whose records were not all read.
    pub lenient: bool,
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
    let mut unread = Vec::new();
    for file in &args.files {
        let runs = read_runs(format, Path::new(file))?;
        let kinds = kinds_of(&runs);
        if args.stats {
            print_kinds(file, &kinds);
        }
        if let Some(what) = not_read(&runs, &kinds) {
            errln!("{file}: {what}");
            unread.push(file.clone());
        }
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
    if !unread.is_empty() && !args.lenient {
        bail!(
            "{} had records the {} sensor could not read (above, each with its first line); \
             what was read is imported, the rest is not. A kind not known is a format this \
             XO does not read yet (docs/sensors.md lists what it reads); --lenient imports \
             such files and exits 0",
            unread.join(", "),
            format.as_str()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The record kinds of a file's runs, summed.
fn kinds_of(runs: &[Imported]) -> BTreeMap<String, KindCount> {
    let mut all: BTreeMap<String, KindCount> = BTreeMap::new();
    for r in runs {
        for (k, n) in &r.run.stats.kinds {
            let a = all.entry(k.clone()).or_default();
            a.read += n.read;
            a.mapped += n.mapped;
            a.skipped += n.skipped;
            a.unknown += n.unknown;
            a.malformed += n.malformed;
            a.first_unread = a.first_unread.or(n.first_unread);
        }
    }
    all
}

fn print_kinds(file: &str, kinds: &BTreeMap<String, KindCount>) {
    errln!(
        "{file}:\n  {:<40} {:>7} {:>7} {:>7} {:>7} {:>9}",
        "kind",
        "read",
        "mapped",
        "skipped",
        "unknown",
        "malformed"
    );
    for (k, n) in kinds {
        errln!(
            "  {k:<40} {:>7} {:>7} {:>7} {:>7} {:>9}",
            n.read,
            n.mapped,
            n.skipped,
            n.unknown,
            n.malformed
        );
    }
}

/// What of a file was not read, said, or `None` when all of it was:
/// records of kinds the sensor does not know or could not read (each
/// kind with its first line), and results that named no call.
fn not_read(runs: &[Imported], kinds: &BTreeMap<String, KindCount>) -> Option<String> {
    let mut parts: Vec<String> = kinds
        .iter()
        .filter(|(_, n)| n.unknown + n.malformed > 0)
        .map(|(k, n)| {
            let what = match (n.unknown, n.malformed) {
                (0, m) => format!("{m} not readable"),
                (u, 0) => format!("{u} of a kind not known"),
                (u, m) => format!("{u} of a kind not known, {m} not readable"),
            };
            format!(
                "{what} of kind {k:?} (first at line {})",
                n.first_unread.unwrap_or(0)
            )
        })
        .collect();
    let orphans: u64 = runs.iter().map(|r| r.run.stats.orphan_results).sum();
    if orphans > 0 {
        let first = runs
            .iter()
            .filter_map(|r| r.run.stats.first_orphan)
            .min()
            .map(|l| format!(" (first at line {l})"))
            .unwrap_or_default();
        parts.push(format!(
            "{orphans} results that name no call seen{first}: the call's record is missing from the file or was not read"
        ));
    }
    (!parts.is_empty()).then(|| format!("not read: {}", parts.join("; ")))
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
