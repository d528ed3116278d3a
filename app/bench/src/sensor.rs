//! `xo bench sensor`: agent event lines read per second by each format's
//! sensor, against a baseline measured in the same run: parsing the same
//! lines into `serde_json::Value` (what any generic reader does). Two
//! kinds of rows: a made stream of each format's common lines, and the
//! public recordings of real runs the tests hold (`tests/fixtures/real`),
//! read as each agent wrote them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use xo_sensor::{Format, Sensor};

use super::util::verdict;

#[derive(Debug, clap::Args)]
pub struct SensorArgs {
    /// Lines per format (each of the 7 rounds reads them all, twice).
    #[arg(long, default_value_t = 50_000)]
    lines: usize,
    /// One format only (`claude`, `cursor`, `codex`, `openhands`), as for a profile.
    #[arg(long)]
    only: Option<String>,
    /// The recordings of real runs (`tests/fixtures/real` of a checkout;
    /// their rows are left out, saying so, where the folder is not there).
    #[arg(long, default_value = "tests/fixtures/real")]
    real: PathBuf,
}

/// A realistic stream of `n` lines: tool calls and results (a third
/// failing), messages, usage.
fn stream(format: Format, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    let mut i = 0usize;
    while out.len() < n {
        let fail = i.is_multiple_of(3);
        let lines: Vec<String> = match format {
            // As Claude Code writes a message: a content block a line,
            // each with the message's usage so far.
            Format::Claude => vec![
                format!(
                    r#"{{"type":"assistant","message":{{"id":"msg_{i}","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{{"type":"text","text":"Let me check the build output for step {i}."}}],"stop_reason":null,"usage":{{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":45000,"output_tokens":90}}}},"session_id":"5f0c2a7e-1b2c-4d3e-9f00-aa11bb22cc33"}}"#
                ),
                format!(
                    r#"{{"type":"assistant","message":{{"id":"msg_{i}","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{{"type":"tool_use","id":"toolu_{i}","name":"Bash","input":{{"command":"cargo build -p crate{}","description":"build"}}}}],"stop_reason":null,"usage":{{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":45000,"output_tokens":90}}}},"session_id":"5f0c2a7e-1b2c-4d3e-9f00-aa11bb22cc33"}}"#,
                    i % 7
                ),
                format!(
                    r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"toolu_{i}","type":"tool_result","content":"{}","is_error":{fail}}}]}},"session_id":"5f0c2a7e-1b2c-4d3e-9f00-aa11bb22cc33"}}"#,
                    if fail {
                        "error[E0425]: cannot find value `x` in this scope\\n --> src/lib.rs:10:5"
                    } else {
                        "   Compiling crate v0.1.0\\n    Finished dev profile in 2.1s"
                    }
                ),
            ],
            Format::Cursor => vec![
                format!(
                    r#"{{"type":"tool_call","subtype":"started","call_id":"call_{i}","tool_call":{{"shellToolCall":{{"args":{{"command":"npm test -- --grep case{}"}}}}}},"session_id":"c-1"}}"#,
                    i % 5
                ),
                format!(
                    r#"{{"type":"tool_call","subtype":"completed","call_id":"call_{i}","tool_call":{{"shellToolCall":{{"args":{{"command":"npm test"}},"result":{{"{}":{{"exitCode":{},"stdout":"3 passing\n1 failing","stderr":""}}}}}}}},"session_id":"c-1"}}"#,
                    if fail { "error" } else { "success" },
                    u8::from(fail)
                ),
            ],
            Format::Codex => vec![
                format!(
                    r#"{{"type":"item.completed","item":{{"id":"item_{i}","type":"command_execution","command":"bash -lc 'pytest -q tests/test_{}.py'","aggregated_output":"{}","exit_code":{},"status":"{}"}}}}"#,
                    i % 9,
                    if fail {
                        "1 failed, 12 passed in 0.31s\\n"
                    } else {
                        "13 passed in 0.29s\\n"
                    },
                    u8::from(fail),
                    if fail { "failed" } else { "completed" }
                ),
                format!(
                    r#"{{"type":"item.completed","item":{{"id":"msg_{i}","type":"agent_message","text":"The tests in batch {i} ran; looking at the failures next."}}}}"#
                ),
            ],
            Format::OpenHands => vec![
                format!(
                    r#"{{"id":{},"timestamp":"2026-11-20T10:00:00","source":"agent","message":"Running command","action":"run","args":{{"command":"pytest -x tests/test_{}.py","is_input":false,"thought":"run step {i}","blocking":false,"hidden":false,"confirmation_state":"confirmed"}},"llm_metrics":{{"accumulated_cost":{},"accumulated_token_usage":{{"prompt_tokens":{},"completion_tokens":{},"context_window":128000}}}}}}"#,
                    2 * i,
                    i % 9,
                    i as f64 * 0.001,
                    i * 100,
                    i * 10
                ),
                format!(
                    r#"{{"id":{},"timestamp":"2026-11-20T10:00:01","source":"agent","cause":{},"observation":"run","content":"{}","extras":{{"command":"pytest","metadata":{{"exit_code":{}}}}}}}"#,
                    2 * i + 1,
                    2 * i,
                    if fail {
                        "E   AssertionError\\n1 failed"
                    } else {
                        "5 passed"
                    },
                    u8::from(fail)
                ),
            ],
            Format::SweAgent => unreachable!("a document format"),
        };
        out.extend(lines);
        i += 1;
    }
    out.truncate(n);
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One row's lines: a sensor for each run (each recording a run of its
/// own), the lines of each.
struct Runs {
    format: Format,
    runs: Vec<Vec<String>>,
}

/// The recordings of real runs under `dir` (found and told apart as
/// `xo bench detection` finds them), by format, each record as the agent
/// wrote it: a line of Claude Code's transcripts, Codex's rollouts,
/// Cursor's streams and OpenHands' event logs; an event's own text in an
/// OpenHands trajectory (an indented JSON array) or in an evaluation's
/// `history` (a run a line). SWE-agent's trajectories are whole documents,
/// read by no line sensor: no row.
fn recordings(dir: &Path) -> anyhow::Result<Vec<Runs>> {
    use anyhow::Context;
    use serde_json::value::RawValue;
    let mut files = Vec::new();
    crate::detection::recordings(dir, &mut files)?;
    let mut out: Vec<Runs> = Vec::new();
    for f in files {
        let Some((format, _)) = crate::detection::format_of(&f) else {
            continue;
        };
        if format == Format::SweAgent || !f.is_file() {
            continue;
        }
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        let events = |raw: &str| -> anyhow::Result<Vec<String>> {
            let events: Vec<&RawValue> = serde_json::from_str(raw)
                .with_context(|| format!("{}: not a JSON array of events", f.display()))?;
            Ok(events.iter().map(|e| e.get().to_string()).collect())
        };
        let head = text.trim_start();
        let mut runs = Vec::new();
        if format == Format::OpenHands && head.starts_with('[') {
            runs.push(events(head)?);
        } else if format == Format::OpenHands
            && head
                .lines()
                .next()
                .is_some_and(|l| l.contains("\"history\""))
        {
            #[derive(serde::Deserialize)]
            struct Evaluation<'a> {
                #[serde(borrow)]
                history: &'a RawValue,
            }
            for l in text.lines().filter(|l| !l.trim().is_empty()) {
                let run: Evaluation<'_> = serde_json::from_str(l).with_context(|| {
                    format!("{}: a line that is no run with a history", f.display())
                })?;
                runs.push(events(run.history.get())?);
            }
        } else {
            runs.push(
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(str::to_string)
                    .collect(),
            );
        }
        match out.iter_mut().find(|r| r.format == format) {
            Some(row) => row.runs.extend(runs),
            None => out.push(Runs { format, runs }),
        }
    }
    out.retain(|r| r.runs.iter().any(|l| !l.is_empty()));
    Ok(out)
}

/// Lines a second through the sensor and through `Value` (medians of
/// `rounds` alternating rounds), and the turns the sensor made of them.
/// A line either reader refuses is read all the same (the recordings
/// hold a few the sensors count as malformed): its cost is the reader's.
fn measure(row: &Runs, rounds: usize) -> (f64, f64, usize) {
    let n: usize = row.runs.iter().map(Vec::len).sum();
    let (mut bases, mut rates, mut turns) = (Vec::new(), Vec::new(), 0usize);
    for _ in 0..rounds {
        let begun = Instant::now();
        for l in row.runs.iter().flatten() {
            let _ = std::hint::black_box(serde_json::from_str::<serde_json::Value>(l));
        }
        bases.push(n as f64 / begun.elapsed().as_secs_f64());
        turns = 0;
        let begun = Instant::now();
        for run in &row.runs {
            let mut s = Sensor::new(row.format);
            for l in run {
                turns += std::hint::black_box(s.line(l)).map_or(0, |t| t.len());
            }
        }
        rates.push(n as f64 / begun.elapsed().as_secs_f64());
    }
    (median(bases), median(rates), turns)
}

pub async fn run(args: SensorArgs) -> anyhow::Result<ExitCode> {
    const ROUNDS: usize = 7;
    println!(
        "== sensor: {} lines per format, {ROUNDS} alternating rounds (medians); baseline: the same lines into serde_json::Value",
        args.lines
    );
    let wanted = |f: Format| args.only.as_deref().is_none_or(|o| o == f.as_str());
    let mut worst = f64::MAX;
    for format in [
        Format::Claude,
        Format::Cursor,
        Format::Codex,
        Format::OpenHands,
    ] {
        if !wanted(format) {
            continue;
        }
        let lines = stream(format, args.lines);
        let bytes: usize = lines.iter().map(String::len).sum();
        // Every line of the made stream is one the sensor reads: one it
        // refused would be a fault of the stream, so it stops the bench.
        let mut check = Sensor::new(format);
        for l in &lines {
            check.line(l).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let row = Runs {
            format,
            runs: vec![lines],
        };
        let (base, rate, turns) = measure(&row, ROUNDS);
        let ratio = rate / base;
        worst = worst.min(ratio);
        println!(
            "   {:<10} {rate:>10.0} lines/s ({:>6.1} MB/s, {turns} turns)   baseline {base:>10.0}/s   ratio {ratio:.2}",
            format.as_str(),
            rate * (bytes as f64 / row.runs[0].len() as f64) / 1e6,
        );
    }
    if args.real.is_dir() {
        println!(
            "   real runs ({}: the recordings, each a sensor of its own):",
            args.real.display()
        );
        for row in recordings(&args.real)?
            .into_iter()
            .filter(|r| wanted(r.format))
        {
            let n: usize = row.runs.iter().map(Vec::len).sum();
            let bytes: usize = row.runs.iter().flatten().map(String::len).sum();
            let (base, rate, turns) = measure(&row, ROUNDS);
            let ratio = rate / base;
            worst = worst.min(ratio);
            println!(
                "   {:<10} {rate:>10.0} lines/s ({:>6.1} MB/s, {turns} turns of {n} lines in {} runs)   baseline {base:>10.0}/s   ratio {ratio:.2}",
                row.format.as_str(),
                rate * (bytes as f64 / n as f64) / 1e6,
                row.runs.len(),
            );
        }
    } else {
        println!(
            "   real runs: left out ({} is not here: run from a checkout, or give --real)",
            args.real.display()
        );
    }
    println!(
        "   worst ratio {worst:.2}   target >= 1.0: {}",
        verdict(worst >= 1.0)
    );
    Ok(ExitCode::SUCCESS)
}
