//! Transcript watches (`xo watch FORMAT DIR...`, `[[supervisor.watch]]`):
//! supervise agents that run outside XO from their
//! live transcripts (macrocosm over a shared volume). Every session file in
//! the directories (Claude Code projects, Codex sessions, Cursor logs; for
//! OpenHands, event directories of one JSON file an event) is a unit, named
//! after the session id its stream gives (as `xo import` names it), else
//! after its file: its new lines are read as they are appended and
//! published as SALUTE reports, one a turn.
//!
//! The watch starts at the end of the files already there: their history is
//! read (so turns, tokens and the session's name are right) but not
//! reported; `--from-start` reports it too. Steering is written only for a
//! session that has written since the watch started and has not ended: a
//! session idle before the start, or one whose agent has ended (or waits
//! for its user), gets none. A session that ends is reported ended
//! (`status.ended`), so the XO does not call it stale for being silent.
//!
//! Steering for a Claude Code or Codex session is handed to it through the
//! same hook as in the runner (`.xo/steering.pending` in the session's
//! project directory, read by `xo hook claude` / `xo hook codex`), addressed
//! to the session. New sessions are picked up as they appear and read from
//! their start; a file that shrinks (truncated or rotated) is read again
//! from its start (the unit's sequence goes on); a file that is not of the
//! format is skipped with a warning naming it.

//!
//! A watch is a service like the others: an actor under a one-for-one root
//! (restarted, it reads the sessions' history again, quietly, as at a
//! start), a ticker that makes it look at the files every `poll_ms` (the
//! files are read on the blocking pool), and the steering as an input.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info, warn};
use xo_bus::{Bus, input, typed};
use xo_proto::{SaluteReport, Steering, Subjects, UnitNeeds};
use xo_runtime::config::WatchConfig;
use xo_runtime::service::{BoxFuture, StopError};
use xo_runtime::tree::{self, Intensity, Running};
use xo_runtime::{Service, ServiceCtx, XoConfig};
use xo_sensor::document::unit_for;
use xo_sensor::salute::SaluteState;
use xo_sensor::{Format, Sensor, SensorError};

/// Lines read with no event of the format: the file is not one of its streams.
const PROBE_LINES: u64 = 20;

mod files;
mod report;

pub use files::{EventFile, conversation_events, event_files, event_number, recording_name};
use files::{read_events, read_lines, scan};
use report::{Out, hand_over};

/// One watched session.
struct Session {
    /// The file's (or event folder's) name: the unit's name when the
    /// stream names no session.
    name: String,
    /// The unit and its SALUTE state, from the session's first turn.
    unit: Option<(String, SaluteState)>,
    sensor: Sensor,
    /// Bytes of the file read so far, and the partial last line.
    offset: u64,
    partial: Vec<u8>,
    /// OpenHands event directories: the event files read.
    seen: std::collections::BTreeSet<String>,
    /// The session's project directory, where its hook looks for steering.
    cwd: Option<PathBuf>,
    skipped: bool,
    /// It has written since the watch started: steering may reach it.
    live: bool,
    /// The XO has been told it rests (its last report said ended).
    rested: bool,
    /// What it waits for, by its hooks' account or its cap: on every
    /// report until the session moves (a cap, until the watch restarts).
    needs: Option<UnitNeeds>,
    /// The needs was read in this look: lines read with it do not clear it.
    needs_fresh: bool,
    /// Told it is at 80% of a cap; its cap reached.
    warned: bool,
    spent: bool,
    /// Its spend already counted into the day's.
    counted: (f64, u64),
    /// The usage-limit reset the XO was told it waits for.
    limit_told: Option<u64>,
}

impl Session {
    fn new(path: &Path, format: Format) -> Self {
        Self {
            name: recording_name(path),
            unit: None,
            sensor: Sensor::new(format),
            offset: 0,
            partial: Vec::new(),
            seen: Default::default(),
            cwd: None,
            skipped: false,
            live: false,
            rested: false,
            needs: None,
            needs_fresh: false,
            warned: false,
            spent: false,
            counted: (0.0, 0),
            limit_told: None,
        }
    }

    /// The session id its hook is called with (a subagent's calls run in
    /// its parent's session).
    fn hook_session(&self) -> Option<&str> {
        self.sensor.parent().or(self.sensor.session())
    }

    fn unit(&self) -> Option<&str> {
        self.unit.as_ref().map(|(u, _)| u.as_str())
    }
}

/// What `xo watch` was asked.
#[derive(Debug, Clone)]
pub struct WatchArgs {
    pub format: String,
    pub dirs: Vec<String>,
    pub role: String,
    pub poll_ms: u64,
    /// Report the history of the sessions already there.
    pub from_start: bool,
    /// Spend caps for the sessions (0: none).
    pub caps: Caps,
}

/// A watch's spend caps: per session, and for all its sessions of one day
/// (UTC). 0 is none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Caps {
    pub cost_usd: f64,
    pub tokens: u64,
    pub cost_usd_per_day: f64,
    pub tokens_per_day: u64,
}

/// The share of a cap reached at which a session is warned.
const WARN_AT: f64 = 0.8;

/// One cap and what was spent against it, said only when it matters.
#[derive(Debug, Clone, Copy)]
enum Cap {
    None,
    Cost {
        spent: f64,
        cap: f64,
        of: &'static str,
    },
    Tokens {
        spent: u64,
        cap: u64,
        of: &'static str,
    },
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Cap::None => Ok(()),
            Cap::Cost { spent, cap, of } => write!(f, "${spent:.2} of {of} max_cost_usd ${cap:.2}"),
            Cap::Tokens { spent, cap, of } => {
                write!(f, "{spent} tokens of {of} max_tokens {cap}")
            }
        }
    }
}

impl Caps {
    /// The largest share of a cap `cost` and `tokens` reach (0 with no
    /// cap), and which cap it is.
    fn share(
        cost: f64,
        cap_cost: f64,
        tokens: u64,
        cap_tokens: u64,
        of: &'static str,
    ) -> (f64, Cap) {
        let by_cost = (cap_cost > 0.0).then_some((
            cost / cap_cost,
            Cap::Cost {
                spent: cost,
                cap: cap_cost,
                of,
            },
        ));
        let by_tokens = (cap_tokens > 0).then_some((
            tokens as f64 / cap_tokens as f64,
            Cap::Tokens {
                spent: tokens,
                cap: cap_tokens,
                of,
            },
        ));
        [by_cost, by_tokens]
            .into_iter()
            .flatten()
            .fold((0.0, Cap::None), |a, b| if b.0 > a.0 { b } else { a })
    }
}

/// Why a watch cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Format(#[from] SensorError),
    #[error("{} writes its trajectory when a run ends; import it with `xo import` instead", .0.as_str())]
    WholeDocument(Format),
    #[error("{0} is not a directory to watch")]
    NotADirectory(String),
    #[error("{what} = {value} is not a cap: a number of dollars from 0 (none) to 1e12")]
    BadCap { what: &'static str, value: f64 },
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
    /// The runtime: an actor tree that did not start or gave up, no store.
    #[error(transparent)]
    Runtime(#[from] xo_runtime::RuntimeError),
}

xo_bus::bus_error_from!(WatchError);
xo_runtime::runtime_error_from!(WatchError);

/// What is wrong with a watch, before it starts: its format, else the
/// first directory that is not one.
pub fn check(args: &WatchArgs) -> Result<Format, WatchError> {
    let format = Format::parse(&args.format)?;
    if !format.is_lines() {
        return Err(WatchError::WholeDocument(format));
    }
    for d in &args.dirs {
        if !Path::new(d).is_dir() {
            return Err(WatchError::NotADirectory(d.clone()));
        }
    }
    for (what, value) in [
        ("max_cost_usd", args.caps.cost_usd),
        ("max_cost_usd_per_day", args.caps.cost_usd_per_day),
    ] {
        if xo_proto::finite::check_amount(what, value).is_err() {
            return Err(WatchError::BadCap { what, value });
        }
    }
    Ok(format)
}

/// The watch's messages.
#[derive(Debug)]
pub enum WatchMsg {
    /// Look at the files (the ticker's).
    Scan,
    /// Steering for a unit: handed to its session if it is one of ours.
    Steer(Box<Steering>),
}

/// The watch actor: its definition (cloned for every start).
#[derive(Debug, Clone)]
struct Watcher {
    bus: Bus,
    cfg: XoConfig,
    args: WatchArgs,
    format: Format,
    /// The service clock: the spend caps' day is its.
    clock: xo_runtime::Clock,
}

/// The sessions seen, and whether the next look is the first.
struct Sessions {
    all: BTreeMap<PathBuf, Session>,
    first: bool,
    /// How far each project's `.xo/needs.jsonl` is read.
    needs_read: HashMap<PathBuf, u64>,
    /// The day (days since the epoch, UTC) and what all the sessions spent
    /// in it since the watch started.
    day: (u64, f64, u64),
}

impl Actor for Watcher {
    type Msg = WatchMsg;
    type State = Sessions;
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<WatchMsg>,
        _: (),
    ) -> Result<Sessions, ActorProcessingErr> {
        info!(format = self.format.as_str(), dirs = ?self.args.dirs, from_start = self.args.from_start, "watching agent transcripts");
        Ok(Sessions {
            all: BTreeMap::new(),
            first: true,
            needs_read: HashMap::new(),
            day: (0, 0.0, 0),
        })
    }

    async fn handle(
        &self,
        _: ActorRef<WatchMsg>,
        msg: WatchMsg,
        st: &mut Sessions,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WatchMsg::Scan => self.scan(st).await?,
            WatchMsg::Steer(s) => hand_over(&st.all, &s).await,
        }
        Ok(())
    }
}

impl Watcher {
    /// Reads what every session wrote since the last look (on the
    /// blocking pool: these are file reads) and reports its turns.
    async fn scan(&self, st: &mut Sessions) -> Result<(), ActorProcessingErr> {
        let (format, dirs, first) = (self.format, self.args.dirs.clone(), st.first);
        let mut all = std::mem::take(&mut st.all);
        let mut needs_read = std::mem::take(&mut st.needs_read);
        let (all, read, waits, needs_read) = tokio::task::spawn_blocking(move || {
            // The hooks' account first: transcript lines read after it
            // were written after it (the session moved since).
            let projects: std::collections::BTreeSet<PathBuf> =
                all.values().filter_map(|s| s.cwd.clone()).collect();
            let mut waits = Vec::new();
            for dir in projects {
                let at = needs_read.entry(dir.clone()).or_default();
                let w = xo_pipeline::driver::waiting::read_new(&dir, at);
                if !w.is_empty() {
                    waits.push((dir, w));
                }
            }
            let mut read = Vec::new();
            for (path, dir_mode) in scan(format, &dirs) {
                let s = all.entry(path.clone()).or_insert_with(|| {
                    info!(path = %path.display(), before_start = first, "watching a new session");
                    Session::new(&path, format)
                });
                if s.skipped {
                    continue;
                }
                let lines = if dir_mode {
                    read_events(&path, s)
                } else {
                    read_lines(&path, s, format)
                };
                read.push((path, lines));
            }
            (all, read, waits, needs_read)
        })
        .await?;
        st.all = all;
        st.needs_read = needs_read;
        let out = Out {
            bus: &self.bus,
            subjects: &self.cfg.subjects(),
            cfg: &self.cfg,
            role: &self.args.role,
            quiet: st.first && !self.args.from_start,
        };
        for (path, lines) in read {
            let Some(s) = st.all.get_mut(&path) else {
                continue;
            };
            if !st.first && !lines.is_empty() && !s.live {
                s.live = true;
                info!(
                    unit = s.unit().unwrap_or(&s.name),
                    "session active since the watch started: steering reaches it"
                );
            }
            out.publish(s, lines).await;
            if s.sensor.stats().events == 0 && s.sensor.stats().lines >= PROBE_LINES {
                warn!(path = %path.display(), format = format.as_str(), "not a {} stream: skipped", format.as_str());
                s.skipped = true;
            }
        }
        // What the hooks said (history before the watch started is not
        // news: read past).
        for (dir, waits) in waits {
            if st.first {
                continue;
            }
            for w in waits {
                for s in st.all.values_mut() {
                    let mine = s.cwd.as_deref() == Some(dir.as_path())
                        && (w.session_id.is_none() || w.session_id.as_deref() == s.hook_session());
                    if mine && !s.spent {
                        out.wait(
                            s,
                            UnitNeeds {
                                reason: w.reason,
                                detail: w.detail.clone(),
                            },
                        )
                        .await;
                    }
                }
            }
        }
        self.caps(st, &out).await;
        for s in st.all.values_mut() {
            s.needs_fresh = false;
        }
        if st.first {
            st.first = false;
            let before = st.all.values().filter(|s| !s.skipped).count();
            info!(
                sessions = before,
                reported = self.args.from_start,
                "sessions already there read; watching from now on"
            );
        }
        Ok(())
    }
}

impl Watcher {
    /// Each session's spend against the caps: a warning at 80%, and at
    /// 100% the session's hook refuses its next tool call and the unit
    /// needs you (`budget`).
    async fn caps(&self, st: &mut Sessions, out: &Out<'_>) {
        let caps = self.args.caps;
        if caps == Caps::default() {
            return;
        }
        let today = self.clock.now_ms() / 86_400_000;
        if st.day.0 != today {
            st.day = (today, 0.0, 0);
        }
        for s in st.all.values_mut() {
            let Some((_, state)) = &s.unit else { continue };
            let (cost, tokens) = state.spend();
            if !st.first {
                st.day.1 = xo_proto::finite::add(st.day.1, (cost - s.counted.0).max(0.0));
                st.day.2 = st.day.2.saturating_add(tokens.saturating_sub(s.counted.1));
            }
            s.counted = (cost, tokens);
        }
        if st.first {
            return;
        }
        let day = Caps::share(
            st.day.1,
            caps.cost_usd_per_day,
            st.day.2,
            caps.tokens_per_day,
            "the day's",
        );
        for s in st.all.values_mut() {
            let Some((unit, state)) = &s.unit else {
                continue;
            };
            if !s.live || s.spent {
                continue;
            }
            let (cost, tokens) = state.spend();
            let own = Caps::share(cost, caps.cost_usd, tokens, caps.tokens, "the session's");
            let (share, cap) = if own.0 >= day.0 { own } else { day };
            // Below the warning, or warned and below the cap: nothing to do.
            if share < WARN_AT || (share < 1.0 && s.warned) {
                continue;
            }
            let unit = unit.clone();
            let (Some(cwd), Some(session)) = (s.cwd.clone(), s.hook_session().map(String::from))
            else {
                continue;
            };
            if share >= 1.0 {
                s.spent = true;
                let why = format!("{cap} spent");
                if let Err(e) = xo_pipeline::driver::waiting::spend(&cwd, &session, &why) {
                    warn!(unit = %unit, error = %e, "cap reached but the hook cannot be told: its calls are not refused");
                }
                warn!(unit = %unit, cap = %why, "session cap reached: its next tool call is refused, the unit needs you");
                out.wait(
                    s,
                    UnitNeeds {
                        reason: xo_proto::NeedsReason::Budget,
                        detail: why,
                    },
                )
                .await;
            } else if share >= WARN_AT && !s.warned {
                s.warned = true;
                let text = format!(
                    "[SUPERVISOR] {}% of this session's cap is spent ({cap}). Finish the step you are on, say what is left, and stop before the cap; at the cap your tool calls are refused.",
                    (share * 100.0).floor()
                );
                xo_pipeline::driver::command::deliver_to(&cwd, Some(&session), &[text]).await;
                info!(unit = %unit, cap = %cap, "session at 80% of its cap: warned");
            }
        }
    }
}

/// A running watch.
#[derive(Debug)]
pub struct WatchHandle {
    name: String,
    running: Running<WatchMsg>,
    bus: Bus,
}

/// Starts a watch: checks it, subscribes to the steering, starts its tree
/// and its ticker. It runs until stopped.
pub async fn start(ctx: ServiceCtx, args: WatchArgs) -> Result<WatchHandle, WatchError> {
    let format = check(&args)?;
    let ServiceCtx {
        cfg,
        bus,
        shutdown,
        clock,
        ..
    } = ctx;
    let subjects = cfg.subjects();
    let steering = bus.subscribe(&subjects.steer_all()).await?;
    let name = format!("watch {} {}", args.format, args.dirs.join(","));
    let poll = Duration::from_millis(args.poll_ms.max(20));
    let actor = Watcher {
        bus: bus.clone(),
        cfg: cfg.clone(),
        args,
        format,
        clock,
    };
    let mut running = Running::one_for_one(
        "watch",
        actor,
        Intensity::of(&cfg),
        tree::no_args::<Watcher>(),
    )
    .await?
    .ending_on(shutdown);
    running.every(poll, || WatchMsg::Scan);
    running.input(input::cast(
        steering,
        cfg.wire.max_payload,
        input::DeadLetters::new(bus.clone(), subjects, "watch: steering"),
        running.signal(),
        running.current.clone(),
        |s: Steering| WatchMsg::Steer(Box::new(s)),
    ));
    Ok(WatchHandle { name, running, bus })
}

impl WatchHandle {
    /// Waits for `shutdown`, or for the tree to give up.
    pub async fn until(&mut self, shutdown: impl std::future::Future<Output = ()>) {
        self.running.until(shutdown).await
    }

    /// Stops in order: the ticker and the steering, the actor, the bus flushed.
    pub async fn stop(self) -> Result<(), WatchError> {
        let escalated = self.running.stop().await;
        let _ = self.bus.flush().await;
        Ok(escalated?)
    }
}

impl Service for WatchHandle {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn until<'a>(&'a mut self, shutdown: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        Box::pin(WatchHandle::until(self, shutdown))
    }
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), StopError>> {
        Box::pin(async move { WatchHandle::stop(*self).await.map_err(Into::into) })
    }
}

impl From<&WatchConfig> for WatchArgs {
    fn from(w: &WatchConfig) -> Self {
        Self {
            format: w.format.clone(),
            dirs: w.dirs.clone(),
            role: w.role.clone(),
            poll_ms: w.poll_ms,
            from_start: w.from_start,
            caps: Caps {
                cost_usd: w.max_cost_usd,
                tokens: w.max_tokens,
                cost_usd_per_day: w.max_cost_usd_per_day,
                tokens_per_day: w.max_tokens_per_day,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::event_number;

    /// The names OpenHands gives its event files are events; what it keeps
    /// beside them is not.
    #[test]
    fn only_openhands_event_files_are_events() {
        assert_eq!(event_number("12.json"), Some(12));
        assert_eq!(
            event_number("event-00007-3f1c2b9e-8d4a-4b7e-9c1d-2a3b4c5d6e7f.json"),
            Some(7)
        );
        for other in [
            "metadata.json",
            "init.json",
            "base_state.json",
            "llm_registry.json",
            "0-25.json",
            "event-00007.json",
            "event--x.json",
            "12.jsonl",
            "12",
        ] {
            assert_eq!(event_number(other), None, "{other}");
        }
    }
}
