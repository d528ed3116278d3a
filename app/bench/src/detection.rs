//! `xo bench detection DIR`: every recording under a folder imported,
//! replayed through the radio check, and the same actions through a
//! baseline detector measured in the same run — OpenHands' stuck-detector
//! rules ([`xo_radio::baseline`]). Per format and in total: runs, steered
//! runs, decisions, decisions per 100 turns; then the goals (on runs that
//! succeeded: at most 1 steering per 100 turns and at most 1 run in 5
//! steered; every loop the baseline catches caught by XO at the same turn
//! or earlier).
//!
//! A recording's format is the name of a folder on its path (`claude`,
//! `codex`, `cursor`, `openhands`, `swe-agent`, `mini-swe-agent`), else
//! guessed from its first bytes. `*.md`, `*.txt`, `*.yaml`, `*.py` and
//! `*.patch` are skipped; a folder named `events` is one OpenHands run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use xo_proto::{AnomalyKind, SaluteReport};
use xo_radio::Radio;
use xo_radio::baseline::OpenHandsStuck;
use xo_runtime::XoConfig;
use xo_sensor::Format;

use crate::fidelity;
use xo_runner::recordings as import;

#[derive(Debug, clap::Args)]
pub struct DetectionArgs {
    /// The folder of recordings (e.g. tests/fixtures/real).
    pub dir: PathBuf,
    /// The role the runs are supervised as (its doctrine applies).
    #[arg(long, default_value = "agent")]
    pub role: String,
    /// Print every run, not only the totals.
    #[arg(long)]
    pub runs: bool,
}

/// The figures of one detector over a set of runs.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub runs: u64,
    pub turns: u64,
    pub steered: u64,
    pub decisions: u64,
}

impl Figures {
    fn per_100(&self) -> f64 {
        if self.turns == 0 {
            0.0
        } else {
            self.decisions as f64 * 100.0 / self.turns as f64
        }
    }
}

/// One run's result under both detectors.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub format: &'static str,
    pub unit: String,
    pub outcome: &'static str,
    pub turns: u64,
    pub xo: u64,
    pub xo_kinds: BTreeMap<String, u64>,
    pub baseline: u64,
    /// The first turn the baseline found the run stuck.
    pub baseline_first: Option<u64>,
    /// The first turn XO steered a loop-like anomaly (loop, oscillation,
    /// monologue, empty replies, cascade).
    pub xo_loop_first: Option<u64>,
    /// The longest run of turns without progress.
    pub longest_stall: u32,
    /// The highest fill before each compaction the agent made.
    pub compacted_at: Vec<f64>,
    /// The most steerings of one kind in one stretch (escalation: at most 3).
    pub most_per_stretch: u64,
    /// Steerings whose text quotes a command or an output line.
    pub quoting: u64,
    /// Turns from the start of the stretch to "needs you", when it came.
    pub needs_after: Option<u64>,
}

/// The format a recording is in, and the name its figures are printed
/// under (mini-swe-agent's trajectories are read by the SWE-agent sensor
/// but counted apart): a folder name on its path, else its first bytes.
pub fn format_of(path: &Path) -> Option<(Format, &'static str)> {
    let format = format_in(path)?;
    let mini = format == Format::SweAgent
        && (path.components().any(|c| c.as_os_str() == "mini-swe-agent")
            || head_of(path).is_some_and(|h| h.contains("\"mini-swe-agent")));
    Some((
        format,
        if mini {
            "mini-swe-agent"
        } else {
            format.as_str()
        },
    ))
}

/// The first bytes of a file (a folder has none).
fn head_of(path: &Path) -> Option<String> {
    let mut head = Vec::with_capacity(4096);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::open(path).ok()?, 4096),
        &mut head,
    )
    .ok()?;
    Some(String::from_utf8_lossy(&head).into_owned())
}

fn format_in(path: &Path) -> Option<Format> {
    for c in path.components().rev().skip(1) {
        let name = c.as_os_str().to_str().unwrap_or("");
        if name == "mini-swe-agent" {
            return Some(Format::SweAgent);
        }
        if let Ok(f) = Format::parse(name) {
            return Some(f);
        }
    }
    if path.is_dir() {
        return None;
    }
    // The first bytes tell; the file is read whole once, by the import.
    let head = head_of(path)?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext == "traj" || head.contains("\"trajectory\"") {
        Some(Format::SweAgent)
    } else if head.contains("\"session_meta\"") || head.contains("\"thread.started\"") {
        Some(Format::Codex)
    } else if head.contains("\"observation\"") || head.contains("\"ActionEvent\"") {
        Some(Format::OpenHands)
    } else if head.contains("\"tool_call\"") {
        Some(Format::Cursor)
    } else if head.contains("\"sessionId\"") || head.contains("\"session_id\"") {
        Some(Format::Claude)
    } else {
        None
    }
}

/// The recordings under a folder: files, and `events` folders. An OpenHands
/// session or conversation folder is its `events/` alone: what it keeps
/// beside them (`metadata.json`, `base_state.json`, the `event_cache/`
/// pages that repeat the events) is no run.
pub(crate) fn recordings(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if let Some((events, _)) = xo_runner::watch::conversation_events(dir) {
        out.push(events);
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            recordings(&p, out)?;
        } else if !matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("md" | "txt" | "yaml" | "yml" | "py" | "patch" | "png")
        ) {
            out.push(p);
        }
    }
    Ok(())
}

const LOOP_KINDS: [AnomalyKind; 5] = [
    AnomalyKind::Loop,
    AnomalyKind::Oscillation,
    AnomalyKind::Monologue,
    AnomalyKind::Empty,
    AnomalyKind::Cascade,
];

/// Replays one run's reports through a radio and the baseline.
fn replay(
    radio: &mut Radio,
    format: &'static str,
    unit: &str,
    outcome: &'static str,
    reports: &[SaluteReport],
) -> RunResult {
    let mut baseline = OpenHandsStuck::new();
    let mut r = RunResult {
        format,
        unit: unit.to_string(),
        outcome,
        turns: reports.len() as u64,
        xo: 0,
        xo_kinds: BTreeMap::new(),
        baseline: 0,
        baseline_first: None,
        xo_loop_first: None,
        longest_stall: 0,
        compacted_at: Vec::new(),
        most_per_stretch: 0,
        quoting: 0,
        needs_after: None,
    };
    let mut per_stretch: BTreeMap<(u64, AnomalyKind), u64> = BTreeMap::new();
    let (mut peak, mut condensations) = (0.0f64, 0);
    for report in reports {
        let turn = report.time.turn;
        r.longest_stall = r.longest_stall.max(report.activity.turns_since_progress);
        if report.size.condensations > condensations {
            condensations = report.size.condensations;
            r.compacted_at.push(peak);
            peak = 0.0;
        }
        peak = peak.max(report.size.fill());
        if let Some(a) = report.activity.recent.last().filter(|a| a.turn == turn)
            && baseline.push(a).is_some()
        {
            r.baseline += 1;
            r.baseline_first.get_or_insert(turn);
        }
        let a = radio.check(report);
        let from = radio
            .unit_state(&report.unit.unit)
            .map_or(0, |st| st.stretch_from);
        if r.needs_after.is_none()
            && let Some(n) = &a.needs
        {
            r.needs_after = Some(n.turn.saturating_sub(n.stretch_from));
        }
        for s in a.steering {
            let k = per_stretch.entry((from, s.kind)).or_default();
            *k += 1;
            r.most_per_stretch = r.most_per_stretch.max(*k);
            if s.message.contains('`') || s.message.contains('"') {
                r.quoting += 1;
            }
            r.xo += 1;
            *r.xo_kinds.entry(s.kind.as_str().to_string()).or_default() += 1;
            if LOOP_KINDS.contains(&s.kind) {
                r.xo_loop_first.get_or_insert(turn);
            }
        }
    }
    r
}

/// Every run under `dir`, replayed; and how faithfully each format's
/// files were read.
pub fn measure(
    cfg: &XoConfig,
    dir: &Path,
    role: &str,
) -> anyhow::Result<(Vec<RunResult>, fidelity::ByFormat)> {
    let mut files = Vec::new();
    recordings(dir, &mut files)?;
    if files.is_empty() {
        bail!("no recordings under {}", dir.display());
    }
    let mut radio = Radio::new(cfg.roles());
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut read = fidelity::ByFormat::new();
    for f in files {
        let Some((format, label)) = format_of(&f) else {
            eprintln!(
                "{}: format not known (put it under a folder named after its agent); skipped",
                f.display()
            );
            continue;
        };
        let runs = import::read_runs(format, &f)?;
        // A folder (an OpenHands `events/`) has no one text to count from.
        let text = if f.is_file() {
            std::fs::read_to_string(&f).unwrap_or_default()
        } else {
            String::new()
        };
        read.entry(label).or_default().add(format, &runs, &text);
        for run in runs {
            if run.run.turns.is_empty() {
                continue;
            }
            // Runs of one name (the same session in two places) stay apart.
            let mut unit = run.unit.clone();
            let mut n = 1;
            while !seen.insert(unit.clone()) {
                n += 1;
                unit = format!("{}-{n}", run.unit);
            }
            let named = import::Imported {
                unit: unit.clone(),
                ..run
            };
            let reports = named.reports(role, 200_000, None);
            out.push(replay(
                &mut radio,
                label,
                &unit,
                named.run.outcome(),
                &reports,
            ));
        }
    }
    Ok((out, read))
}

/// The `pct` percentile of sorted values, by nearest rank.
fn nearest_rank(sorted: &[u32], pct: usize) -> u32 {
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The figures of both detectors over the runs `keep` selects.
pub fn figures(runs: &[RunResult], keep: impl Fn(&RunResult) -> bool) -> (Figures, Figures) {
    let (mut xo, mut base) = (Figures::default(), Figures::default());
    for r in runs.iter().filter(|r| keep(r)) {
        for (f, d) in [(&mut xo, r.xo), (&mut base, r.baseline)] {
            f.runs += 1;
            f.turns += r.turns;
            f.decisions += d;
            f.steered += u64::from(d > 0);
        }
    }
    (xo, base)
}

pub async fn run(cfg: &XoConfig, a: DetectionArgs) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let (runs, read) = measure(cfg, &a.dir, &a.role)?;
    if a.runs {
        println!(
            "{:<14} {:<58} {:>5} {:<9} {:>3} {:>4}  xo steering",
            "format", "run", "turns", "outcome", "xo", "base"
        );
        for r in &runs {
            let kinds: Vec<String> = r.xo_kinds.iter().map(|(k, n)| format!("{k}×{n}")).collect();
            println!(
                "{:<14} {:<58} {:>5} {:<9} {:>3} {:>4}  {}",
                r.format,
                r.unit.chars().take(58).collect::<String>(),
                r.turns,
                r.outcome,
                r.xo,
                r.baseline,
                kinds.join(" ")
            );
        }
        println!();
    }
    let mut formats: Vec<&str> = runs.iter().map(|r| r.format).collect();
    formats.sort();
    formats.dedup();
    println!(
        "{:<14} {:<9} {:>5} {:>6} | {:>8} {:>10} {:>9} | {:>8} {:>10} {:>9}",
        "format",
        "runs",
        "",
        "turns",
        "XO runs",
        "decisions",
        "per 100",
        "OH runs",
        "decisions",
        "per 100"
    );
    let row = |name: &str, which: &str, keep: &dyn Fn(&RunResult) -> bool| {
        let (xo, b) = figures(&runs, keep);
        if xo.runs == 0 {
            return;
        }
        println!(
            "{:<14} {:<9} {:>5} {:>6} | {:>8} {:>10} {:>9.2} | {:>8} {:>10} {:>9.2}",
            name,
            which,
            xo.runs,
            xo.turns,
            format!("{}/{}", xo.steered, xo.runs),
            xo.decisions,
            xo.per_100(),
            format!("{}/{}", b.steered, b.runs),
            b.decisions,
            b.per_100()
        );
    };
    for f in &formats {
        row(f, "all", &|r: &RunResult| r.format == *f);
        row(f, "succeeded", &|r: &RunResult| {
            r.format == *f && r.outcome == "succeeded"
        });
    }
    row("total", "all", &|_| true);
    row("total", "succeeded", &|r: &RunResult| {
        r.outcome == "succeeded"
    });
    // What the agent role's thresholds rest on: how long real runs go
    // without progress, and where agents compact their own context.
    println!();
    for f in &formats {
        let mut longest: Vec<u32> = runs
            .iter()
            .filter(|r| r.format == *f && r.outcome != "failed")
            .map(|r| r.longest_stall)
            .collect();
        longest.sort_unstable();
        let mut fills: Vec<f64> = runs
            .iter()
            .filter(|r| r.format == *f)
            .flat_map(|r| r.compacted_at.iter().copied())
            .filter(|p| *p > 0.0)
            .collect();
        fills.sort_by(f64::total_cmp);
        let compactions = match (fills.first(), fills.last()) {
            (Some(lo), Some(hi)) => format!(
                "; compacted itself {} times, at fills {:.3}–{:.3}",
                fills.len(),
                lo,
                hi
            ),
            _ => String::new(),
        };
        if !longest.is_empty() {
            println!(
                "{f:<14} longest stretch without progress, runs not failed: median {}, 90th percentile {}, most {} ({} runs){compactions}",
                nearest_rank(&longest, 50),
                nearest_rank(&longest, 90),
                longest[longest.len() - 1],
                longest.len()
            );
        }
    }
    // What follows a decision: escalation caps a stretch, the text quotes
    // the evidence, a stuck run reaches a person.
    println!();
    for f in &formats {
        let of: Vec<&RunResult> = runs.iter().filter(|r| r.format == *f).collect();
        let most = of.iter().map(|r| r.most_per_stretch).max().unwrap_or(0);
        let steered: u64 = of.iter().map(|r| r.xo).sum();
        let quoting: u64 = of.iter().map(|r| r.quoting).sum();
        let mut needs: Vec<u32> = of
            .iter()
            .filter_map(|r| r.needs_after)
            .map(|t| u32::try_from(t).unwrap_or(u32::MAX))
            .collect();
        needs.sort_unstable();
        let needs = if needs.is_empty() {
            "no run came to need a person".to_string()
        } else {
            format!(
                "{} runs came to need a person, median {} turns after their stretch began",
                needs.len(),
                nearest_rank(&needs, 50)
            )
        };
        println!(
            "{f:<14} after a decision: most steerings of one kind in one stretch {most} (at most 3); {quoting} of {steered} steerings quote the command or its output; {needs}"
        );
    }
    // What the sensors read of the files, and the tool errors they saw
    // beside an independent count from the raw files.
    println!();
    for (f, d) in &read {
        let errors = match d.raw {
            Some(raw) => format!(
                "tool errors: {} read as failures + {} non-zero exits read by their tool's meaning, beside {raw} in the raw files ({:.0}%)",
                d.failed,
                d.by_meaning,
                if raw == 0 {
                    100.0
                } else {
                    (d.failed + d.by_meaning) as f64 * 100.0 / raw as f64
                }
            ),
            None => "tool errors: the format records no exit status".to_string(),
        };
        println!(
            "{f:<14} records: {} read, {:.1}% mapped or skipped by name ({} mapped, {} skipped, {} of kinds not known, {} not readable); {errors}",
            d.records,
            d.read_pct(),
            d.mapped,
            d.skipped,
            d.unknown,
            d.malformed
        );
    }
    let (xo, base) = figures(&runs, |r| r.outcome == "succeeded");
    let caught: Vec<&RunResult> = runs.iter().filter(|r| r.baseline_first.is_some()).collect();
    let earlier = caught
        .iter()
        .filter(|r| matches!((r.xo_loop_first, r.baseline_first), (Some(x), Some(b)) if x <= b))
        .count();
    println!();
    let verdict = |ok: bool| if ok { "MET" } else { "MISSED" };
    let per_100_ok = xo.per_100() <= 1.0;
    let steered_ok = xo.steered * 5 <= xo.runs;
    let loops_ok = earlier == caught.len();
    println!(
        "goal, succeeded runs: {:.2} steering per 100 turns (≤ 1; OpenHands rules {:.2}): {}",
        xo.per_100(),
        base.per_100(),
        verdict(per_100_ok)
    );
    println!(
        "goal, succeeded runs: {} of {} steered (≤ 1 in 5; OpenHands rules {}): {}",
        xo.steered,
        xo.runs,
        base.steered,
        verdict(steered_ok)
    );
    println!(
        "goal, loops: OpenHands rules caught {} runs, XO caught {} of them at the same turn or earlier: {}",
        caught.len(),
        earlier,
        verdict(loops_ok)
    );
    let (all_xo, all_base) = figures(&runs, |_| true);
    println!(
        "ratio, decisions on all runs: XO {} / OpenHands rules {} ({} runs, read and replayed in {:.2} s)",
        all_xo.decisions,
        all_base.decisions,
        runs.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
