//! `xo watch FORMAT DIR...`: supervise agents that run outside XO from their
//! live transcripts (macrocosm over a shared volume). Every session file in
//! the directories (Claude Code projects, Codex sessions, Cursor logs; for
//! OpenHands, event directories of one JSON file an event) is a unit: its
//! new lines are read as they are appended and published as SALUTE
//! reports, one a turn. Steering for a Claude Code session is handed to it
//! through the same hook as in the runner (`.xo/steering.pending` in the
//! session's project directory, read by `xo hook claude`).
//!
//! New sessions are picked up as they appear; a file that shrinks
//! (truncated or rotated) is read again from its start (the unit's
//! sequence goes on); a file that is not of the format is skipped with a
//! warning naming it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::time::Duration;
use xo_runtime::config::WatchConfig;

use anyhow::Context;
use tracing::{info, warn};
use xo_bus::{Bus, typed};
use xo_proto::{Steering, Subjects};
use xo_runtime::XoConfig;
use xo_sensor::salute::SaluteState;
use xo_sensor::{Format, Sensor};

/// Lines read with no event of the format: the file is not one of its streams.
const PROBE_LINES: u64 = 20;

/// One watched session.
struct Session {
    unit: String,
    sensor: Sensor,
    state: SaluteState,
    /// Bytes of the file read so far, and the partial last line.
    offset: u64,
    partial: Vec<u8>,
    /// OpenHands event directories: the event files read.
    seen: std::collections::BTreeSet<String>,
    /// The session's project directory, where its hook looks for steering.
    cwd: Option<PathBuf>,
    skipped: bool,
}

/// What `xo watch` was asked.
#[derive(Debug, Clone)]
pub struct WatchArgs {
    pub format: String,
    pub dirs: Vec<String>,
    pub role: String,
    pub poll_ms: u64,
}

/// `xo watch`: the watch on the bus of this machine (NATS or a running
/// `xo up`), with its own logs.
pub async fn watch(
    cfg: &XoConfig,
    args: WatchArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    check(&args)?;
    let mut telemetry =
        xo_runtime::telemetry::init(&cfg.telemetry, "xo-watch").map_err(anyhow::Error::msg)?;
    let bus = crate::connect::client_bus(cfg).await?;
    eprintln!(
        "xo watch: {} sessions in {} — ctrl-c stops",
        args.format,
        args.dirs.join(", ")
    );
    let res = run(bus, cfg, args, shutdown).await;
    telemetry.shutdown();
    res.map(|()| ExitCode::SUCCESS)
}

/// What is wrong with a watch, before it starts.
pub fn check(args: &WatchArgs) -> anyhow::Result<()> {
    let format = Format::parse(&args.format).map_err(anyhow::Error::msg)?;
    if !format.is_lines() {
        anyhow::bail!(
            "{} writes its trajectory when a run ends; import it with `xo import` instead",
            format.as_str()
        );
    }
    for d in &args.dirs {
        if !Path::new(d).is_dir() {
            anyhow::bail!("{d} is not a directory to watch");
        }
    }
    Ok(())
}

/// Watches until `shutdown` (also run by the XO's process for each
/// `[[supervisor.watch]]`).
pub async fn run(
    bus: Bus,
    cfg: &XoConfig,
    args: WatchArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let format = Format::parse(&args.format).map_err(anyhow::Error::msg)?;
    let subjects = cfg.subjects();
    let mut steering = bus
        .subscribe(&subjects.steer_all())
        .await
        .context("subscribing to steering")?;
    let mut sessions: BTreeMap<PathBuf, Session> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(args.poll_ms.max(20)));
    let mut shutdown = std::pin::pin!(shutdown);
    info!(format = format.as_str(), dirs = ?args.dirs, "watching agent transcripts");
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => {
                for (path, dir_mode) in scan(format, &args.dirs) {
                    let s = sessions.entry(path.clone()).or_insert_with(|| {
                        let unit = crate::import::unit_id(&unit_name(&path, dir_mode));
                        info!(unit = %unit, path = %path.display(), "watching a new session");
                        Session {
                            state: SaluteState::new(&unit, &args.role, None, cfg.runner.context_limit),
                            unit,
                            sensor: Sensor::new(format),
                            offset: 0,
                            partial: Vec::new(),
                            seen: Default::default(),
                            cwd: None,
                            skipped: false,
                        }
                    });
                    if s.skipped {
                        continue;
                    }
                    let lines = if dir_mode { read_events(&path, s) } else { read_lines(&path, s, format) };
                    publish(&bus, &subjects, cfg, s, lines).await;
                    if s.sensor.stats().events == 0 && s.sensor.stats().lines >= PROBE_LINES {
                        warn!(path = %path.display(), format = format.as_str(), "not a {} stream: skipped", format.as_str());
                        s.skipped = true;
                    }
                }
            }
            m = steering.next() => {
                let Some(m) = m else { break };
                match typed::decode::<Steering>(&m, cfg.wire.max_payload) {
                    Ok(st) => hand_over(&sessions, &st).await,
                    Err(e) => warn!(subject = %m.subject, error = %e, "steering not decoded"),
                }
            }
        }
    }
    let _ = bus.flush().await;
    Ok(())
}

/// The session files (`*.jsonl`) under the directories; for OpenHands also
/// event directories (`events/` folders of `<n>.json` files), marked `true`.
fn scan(format: Format, dirs: &[String]) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.iter().map(PathBuf::from).collect();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut has_events = false;
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                out.push((p, false));
            } else if format == Format::OpenHands && p.extension().is_some_and(|x| x == "json") {
                has_events = true;
            }
        }
        if has_events {
            out.push((d, true));
        }
    }
    out.sort();
    out
}

/// A unit's name: the file's stem; an event directory's session folder.
fn unit_name(path: &Path, dir_mode: bool) -> String {
    let p = if dir_mode && path.file_name().is_some_and(|n| n == "events") {
        path.parent().unwrap_or(path)
    } else {
        path
    };
    p.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("session")
        .to_string()
}

/// The complete lines appended since the last read. A file shorter than
/// what was read was truncated or replaced: read again from its start.
fn read_lines(path: &Path, s: &mut Session, format: Format) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len < s.offset {
        info!(unit = %s.unit, path = %path.display(), "session file truncated or rotated: reading it again");
        s.offset = 0;
        s.partial.clear();
        s.sensor = Sensor::new(format);
    }
    if len == s.offset || f.seek(SeekFrom::Start(s.offset)).is_err() {
        return Vec::new();
    }
    let mut buf = Vec::new();
    if f.take(len - s.offset).read_to_end(&mut buf).is_err() {
        return Vec::new();
    }
    s.offset += buf.len() as u64;
    s.partial.extend_from_slice(&buf);
    let mut lines = Vec::new();
    while let Some(i) = s.partial.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = s.partial.drain(..=i).collect();
        lines.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
    }
    lines
}

/// OpenHands event files not read yet, in event order, one line each.
fn read_events(dir: &Path, s: &mut Session) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut new: Vec<(u64, String, PathBuf)> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let n = p.file_stem()?.to_str()?.parse::<u64>().unwrap_or(u64::MAX);
            (!s.seen.contains(&name)).then_some((n, name, p))
        })
        .collect();
    new.sort();
    let mut lines = Vec::new();
    for (_, name, p) in new {
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        // An event file still being written is read on a later poll.
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            break;
        };
        s.seen.insert(name);
        lines.push(v.to_string());
    }
    lines
}

/// Feeds the lines to the session's sensor and publishes a report a turn.
async fn publish(
    bus: &Bus,
    subjects: &Subjects,
    cfg: &XoConfig,
    s: &mut Session,
    lines: Vec<String>,
) {
    for line in lines {
        // The project directory, from the first line that names one (a
        // format that never does is not parsed a second time per line).
        if s.cwd.is_none()
            && line.contains("\"cwd\"")
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
        {
            let cwd = v
                .get("cwd")
                .or_else(|| v.get("payload").and_then(|p| p.get("cwd")))
                .and_then(|c| c.as_str());
            s.cwd = cwd.map(PathBuf::from);
        }
        match s.sensor.line(&line) {
            Ok(turns) => {
                if s.state.task().is_none() {
                    let task = s
                        .sensor
                        .session()
                        .map(str::to_string)
                        .unwrap_or_else(|| s.unit.clone());
                    s.state.start_task(Some(task));
                }
                for t in turns {
                    let r = s.state.turn(t);
                    if let Err(e) =
                        typed::publish(bus, &subjects.salute(&s.unit), &r, cfg.wire.format).await
                    {
                        warn!(unit = %s.unit, error = %e, "report not published");
                    }
                }
            }
            Err(e) => {
                warn!(unit = %s.unit, line = e.line, reason = %e.reason, "session line not used")
            }
        }
    }
}

/// Steering for a watched session: appended for its hook, in its project.
async fn hand_over(sessions: &BTreeMap<PathBuf, Session>, st: &Steering) {
    let by_unit: HashMap<&str, &Session> =
        sessions.values().map(|s| (s.unit.as_str(), s)).collect();
    let Some(s) = by_unit.get(st.unit.as_str()) else {
        return;
    };
    let Some(cwd) = &s.cwd else {
        warn!(unit = %st.unit, "steering for a session with no project directory known: not delivered");
        return;
    };
    // Logged there if it cannot be written.
    // Addressed to this session: another session of the same project
    // (its hook reads the same file) leaves it pending.
    xo_pipeline::driver::command::deliver_to(cwd, Some(&s.unit), std::slice::from_ref(&st.message))
        .await;
    info!(unit = %st.unit, kind = st.kind.as_str(), dir = %cwd.display(), "steering handed to the session's hook");
}

impl From<&WatchConfig> for WatchArgs {
    fn from(w: &WatchConfig) -> Self {
        Self {
            format: w.format.clone(),
            dirs: w.dirs.clone(),
            role: w.role.clone(),
            poll_ms: w.poll_ms,
        }
    }
}
