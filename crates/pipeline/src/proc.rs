//! Agent and check processes: each in its own process group, in a checked
//! working directory, with an allow-listed environment, a timeout, bounded
//! verbatim capture, and the whole group killed on timeout or halt. Groups
//! are recorded in a file so a restarted runner kills what its earlier
//! incarnation left behind.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::confine::ConfineError;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tracing::{info, warn};

/// What one run of an agent produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Stopped by a halt or shutdown.
    pub cancelled: bool,
    /// Stopped by the driver itself (to resume the agent with steering).
    pub interrupted: bool,
    /// stdout or stderr was longer than the bound and cut.
    pub truncated: bool,
    pub elapsed_ms: u64,
    pub turns: u32,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Spawn<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    /// The whole environment of the child (nothing else is inherited).
    pub env: &'a [(String, String)],
    pub stdin: Option<&'a [u8]>,
    pub timeout: Duration,
    pub max_output: usize,
    /// Started confined ([`crate::confine`]): writes only under `cwd` and
    /// these, no reading or signalling the runner.
    pub confine: Option<&'a crate::confine::Confinement>,
}

/// The environment an agent gets: the allow-listed variables that are set,
/// plus the given extras.
pub fn allowed_env(allow: &[String], extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = allow
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
        .collect();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

/// Process groups started by one unit, in `<dir>/<unit>.pgids`.
#[derive(Debug, Clone)]
pub struct Groups {
    path: PathBuf,
    unit: String,
    lock: std::sync::Arc<std::sync::Mutex<()>>,
}

impl Groups {
    pub fn new(dir: &Path, unit: &str) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            path: dir.join(format!("{unit}.pgids")),
            unit: unit.to_string(),
            lock: Default::default(),
        })
    }

    fn edit(&self, f: impl FnOnce(&mut Vec<i32>)) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut ids = self.read();
        f(&mut ids);
        let text: String = ids.iter().map(|i| format!("{i}\n")).collect();
        if let Err(e) = std::fs::write(&self.path, text) {
            warn!(path = %self.path.display(), error = %e, "process group file not written");
        }
    }

    fn read(&self) -> Vec<i32> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    fn add(&self, pgid: i32) {
        self.edit(|v| v.push(pgid));
    }

    fn remove(&self, pgid: i32) {
        self.edit(|v| v.retain(|x| *x != pgid));
    }

    /// Kills the groups an earlier incarnation of this unit left running.
    /// A group is killed only if its leader still carries this unit's
    /// `XO_UNIT` (a reused pid of another program is left alone).
    pub fn kill_orphans(&self) -> Vec<i32> {
        let mut killed = Vec::new();
        let marker = format!("XO_UNIT={}", self.unit);
        for pgid in self.read() {
            let environ = std::fs::read(format!("/proc/{pgid}/environ")).unwrap_or_default();
            let ours = environ.split(|b| *b == 0).any(|kv| kv == marker.as_bytes());
            if ours && killpg(Pid::from_raw(pgid), Signal::SIGKILL).is_ok() {
                info!(unit = %self.unit, pgid, "killed an orphaned agent process group");
                killed.push(pgid);
            }
        }
        self.edit(|v| v.clear());
        killed
    }
}

/// Starts `cmd` from a new thread that first confines itself: the child
/// inherits the thread's Landlock domain, the runner's other threads keep
/// theirs (none). The thread ends once the child is started.
pub(crate) async fn spawn_confined(
    mut cmd: tokio::process::Command,
    confine: &crate::confine::Confinement,
    cwd: &Path,
) -> Result<std::io::Result<tokio::process::Child>, ConfineError> {
    let handle = tokio::runtime::Handle::current();
    let (confine, cwd) = (confine.clone(), cwd.to_path_buf());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("xo-confine".into())
        .spawn(move || {
            let _runtime = handle.enter();
            let r = confine
                .restrict_this_thread(&cwd)
                .and_then(|status| match status {
                    landlock::RulesetStatus::NotEnforced => Err(ConfineError::NotEnforced),
                    _ => Ok(cmd.spawn()),
                });
            let _ = tx.send(r);
        })
        .map_err(ConfineError::Thread)?;
    rx.await.map_err(|_| ConfineError::NoAnswer)?
}

/// Why a process could not be started (what it does once started is
/// never an error: see [`AgentOutput`]).
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("empty command")]
    EmptyCommand,
    #[error("cannot start {program:?} in {cwd}: {source}")]
    Start {
        program: String,
        cwd: String,
        source: std::io::Error,
    },
    #[error("cannot start {program:?} in {cwd}: {source}")]
    Confine {
        program: String,
        cwd: String,
        source: ConfineError,
    },
}

/// Runs a process to the end, a timeout or a cancel. Never fails on what
/// the process does; fails only if it cannot be started.
pub async fn run(
    s: Spawn<'_>,
    cancel: Option<watch::Receiver<bool>>,
    groups: Option<&Groups>,
) -> Result<AgentOutput, ProcError> {
    run_live(s, cancel, groups, Live::default()).await
}

/// What a live run adds: every stdout line as it comes, and a stop the
/// driver can pull itself (to resume the agent with steering).
#[derive(Debug, Default)]
pub struct Live {
    pub lines: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    pub interrupt: Option<watch::Receiver<bool>>,
}

/// [`run`], with the stdout lines sent to `live.lines` as they are read
/// (the capture stays bounded; lines are cut at 16 MiB) and the process
/// group killed when `live.interrupt` turns true (`interrupted` is set).
pub async fn run_live(
    s: Spawn<'_>,
    mut cancel: Option<watch::Receiver<bool>>,
    groups: Option<&Groups>,
    live: Live,
) -> Result<AgentOutput, ProcError> {
    let Live {
        lines,
        mut interrupt,
    } = live;
    let (program, args) = s.argv.split_first().ok_or(ProcError::EmptyCommand)?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(s.cwd)
        .env_clear()
        .envs(s.env.iter().map(|(k, v)| (k, v)))
        .stdin(if s.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let started = Instant::now();
    let spawned = match s.confine {
        None => Ok(cmd.spawn()),
        Some(c) => {
            // The program and the script it runs are read where they are.
            let path_var = s
                .env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_str());
            let c = c.reading(crate::confine::program_files(s.argv, path_var));
            spawn_confined(cmd, &c, s.cwd).await
        }
    };
    let (program, cwd) = (program.to_string(), s.cwd.display().to_string());
    let mut child = match spawned {
        Ok(Ok(child)) => child,
        Ok(Err(source)) => {
            return Err(ProcError::Start {
                program,
                cwd,
                source,
            });
        }
        Err(source) => {
            return Err(ProcError::Confine {
                program,
                cwd,
                source,
            });
        }
    };
    let pgid = child.id().map(|p| p as i32);
    if let (Some(g), Some(p)) = (groups, pgid) {
        g.add(p);
    }
    if let (Some(input), Some(mut stdin)) = (s.stdin, child.stdin.take()) {
        let input = input.to_vec();
        tokio::spawn(async move {
            // An agent that does not read its stdin is not an error.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let out = tokio::spawn(capture(child.stdout.take(), s.max_output, lines));
    let err = tokio::spawn(capture(child.stderr.take(), s.max_output, None));
    let mut timed_out = false;
    let mut cancelled = false;
    let cancel_fut = async {
        match cancel.as_mut() {
            Some(rx) => {
                while !*rx.borrow() {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
            None => std::future::pending::<()>().await,
        }
    };
    let mut interrupted = false;
    let interrupt_fut = async {
        match interrupt.as_mut() {
            Some(rx) => {
                if rx.wait_for(|v| *v).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    };
    let status = tokio::select! {
        st = child.wait() => st.ok(),
        _ = tokio::time::sleep(s.timeout) => { timed_out = true; None }
        _ = cancel_fut => { cancelled = true; None }
        _ = interrupt_fut => { interrupted = true; None }
    };
    let status = match status {
        Some(st) => {
            // The agent is done; its helpers in the group go with it.
            if let Some(p) = pgid {
                let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
            }
            Some(st)
        }
        None => {
            if let Some(p) = pgid {
                let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
            }
            child.wait().await.ok()
        }
    };
    if let (Some(g), Some(p)) = (groups, pgid) {
        g.remove(p);
    }
    // A process that escaped the group may hold the pipes: do not wait forever.
    let grace = Duration::from_secs(2);
    let (stdout, t1) = tokio::time::timeout(grace, out)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let (stderr, t2) = tokio::time::timeout(grace, err)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    use std::os::unix::process::ExitStatusExt;
    Ok(AgentOutput {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        cancelled,
        interrupted,
        truncated: t1 || t2,
        elapsed_ms: started.elapsed().as_millis() as u64,
        ..Default::default()
    })
}

/// Reads a pipe to its end, keeping its head and its tail within `max`
/// bytes (an agent's reply comes at the end of its output): past the bound,
/// the first half and the last half are kept with a line between them that
/// says how much was cut.
async fn capture<R: AsyncRead + Unpin>(
    pipe: Option<R>,
    max: usize,
    lines: Option<tokio::sync::mpsc::UnboundedSender<String>>,
) -> (Vec<u8>, bool) {
    const MAX_LINE: usize = 16 * 1024 * 1024;
    let Some(mut pipe) = pipe else {
        return (Vec::new(), false);
    };
    let head_max = max / 2;
    let tail_max = max - head_max;
    let mut head = Vec::new();
    let mut tail = HeadTail::new(tail_max);
    let mut buf = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let send = |line: &mut Vec<u8>| {
        if let Some(tx) = &lines {
            let _ = tx.send(String::from_utf8_lossy(line).into_owned());
        }
        line.clear();
    };
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let chunk = &buf[..n];
                let room = head_max.saturating_sub(head.len());
                head.extend_from_slice(&chunk[..n.min(room)]);
                if n > room {
                    tail.push(&chunk[room..]);
                }
                if lines.is_some() {
                    for &b in chunk {
                        if b == b'\n' {
                            send(&mut line);
                        } else if line.len() < MAX_LINE + 1 {
                            // Past the bound the line is only counted as too
                            // long: the sensor rejects it by its length.
                            line.push(b);
                        }
                    }
                }
            }
        }
    }
    if !line.is_empty() {
        send(&mut line);
    }
    let truncated = tail.dropped > 0;
    if truncated {
        head.extend_from_slice(
            format!(
                "\n[xo: {} bytes of output cut here; the first and last {} bytes are kept]\n",
                tail.dropped,
                tail_max.min(head_max)
            )
            .as_bytes(),
        );
    }
    head.extend(tail.bytes());
    (head, truncated)
}

/// The last `max` bytes of a stream, and how many came before them.
struct HeadTail {
    max: usize,
    buf: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl HeadTail {
    fn new(max: usize) -> Self {
        Self {
            max,
            buf: std::collections::VecDeque::new(),
            dropped: 0,
        }
    }
    fn push(&mut self, b: &[u8]) {
        if b.len() >= self.max {
            self.dropped += (self.buf.len() + b.len() - self.max) as u64;
            self.buf.clear();
            self.buf.extend(&b[b.len() - self.max..]);
            return;
        }
        let over = (self.buf.len() + b.len()).saturating_sub(self.max);
        self.buf.drain(..over);
        self.dropped += over as u64;
        self.buf.extend(b);
    }
    fn bytes(self) -> impl Iterator<Item = u8> {
        self.buf.into_iter()
    }
}

/// Runs a shell command line (validation checks, test commands).
pub async fn shell(
    line: &str,
    cwd: &Path,
    env: &[(String, String)],
    timeout: Duration,
    max_output: usize,
    confine: Option<&crate::confine::Confinement>,
) -> Result<AgentOutput, ProcError> {
    let argv = ["sh".to_string(), "-c".to_string(), line.to_string()];
    run(
        Spawn {
            argv: &argv,
            cwd,
            env,
            stdin: None,
            timeout,
            max_output,
            confine,
        },
        None,
        None,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Vec<(String, String)> {
        allowed_env(&["PATH".into()], &[])
    }

    #[tokio::test]
    async fn captures_verbatim_and_keeps_the_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let o = shell(
            "printf 'a\\nb'; echo err >&2; exit 3",
            dir.path(),
            &env(),
            Duration::from_secs(60),
            1024,
            None,
        )
        .await
        .unwrap();
        assert_eq!(o.stdout, "a\nb");
        assert_eq!(o.stderr, "err\n");
        assert_eq!(o.exit_code, Some(3));
        assert!(!o.truncated && !o.timed_out);
    }

    #[tokio::test]
    async fn environment_is_allow_listed() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY-free: set for this process before spawning; the child must not see it.
        let o = shell(
            "env",
            dir.path(),
            &allowed_env(&["PATH".into()], &[("XO_UNIT", "u1")]),
            Duration::from_secs(60),
            1 << 16,
            None,
        )
        .await
        .unwrap();
        assert!(o.stdout.contains("XO_UNIT=u1"));
        assert!(!o.stdout.contains("HOME="), "{}", o.stdout);
    }

    #[tokio::test]
    async fn a_flood_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let o = shell(
            "head -c 100000000 /dev/zero | tr '\\0' a",
            dir.path(),
            &env(),
            Duration::from_secs(600),
            1 << 20,
            None,
        )
        .await
        .unwrap();
        assert!(o.truncated);
        // The head and the tail, with the cut named between them.
        assert!(o.stdout.len() <= (1 << 20) + 200, "{}", o.stdout.len());
        assert!(o.stdout.contains("bytes of output cut here"));
        assert!(o.stdout.starts_with("aaaa") && o.stdout.ends_with("aaaa"));
        assert_eq!(
            o.exit_code,
            Some(0),
            "the whole flood was read, so the writer ended"
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild");
        let line = format!("sleep 1000 & echo $! > {}; wait", pidfile.display());
        let groups = Groups::new(dir.path(), "u1").unwrap();
        let argv = ["sh".to_string(), "-c".to_string(), line];
        let o = run(
            Spawn {
                argv: &argv,
                cwd: dir.path(),
                env: &env(),
                stdin: None,
                timeout: Duration::from_millis(300),
                max_output: 1024,
                confine: None,
            },
            None,
            Some(&groups),
        )
        .await
        .unwrap();
        assert!(o.timed_out);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild got SIGKILL with its group; wait until it is reaped by init.
        let mut gone = false;
        for _ in 0..200 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.contains(") Z ") {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(gone, "grandchild {pid} survived the timeout");
        assert!(groups.read().is_empty(), "a finished group is forgotten");
    }

    #[tokio::test]
    async fn cancel_stops_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = watch::channel(false);
        let argv = ["sleep".to_string(), "1000".to_string()];
        let h = tokio::spawn({
            let cwd = dir.path().to_path_buf();
            let env = env();
            async move {
                run(
                    Spawn {
                        argv: &argv,
                        cwd: &cwd,
                        env: &env,
                        stdin: None,
                        timeout: Duration::from_secs(600),
                        max_output: 1024,
                        confine: None,
                    },
                    Some(rx),
                    None,
                )
                .await
            }
        });
        tx.send(true).unwrap();
        let o = h.await.unwrap().unwrap();
        assert!(o.cancelled && !o.timed_out);
    }

    #[tokio::test]
    async fn orphans_of_this_unit_are_killed_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let groups = Groups::new(dir.path(), "u9").unwrap();
        let spawn = |unit: &str| {
            std::process::Command::new("sleep")
                .arg("1000")
                .env_clear()
                .env("XO_UNIT", unit)
                .process_group(0)
                .spawn()
                .unwrap()
        };
        use std::os::unix::process::CommandExt;
        let mut ours = spawn("u9");
        let mut theirs = spawn("other");
        groups.add(ours.id() as i32);
        groups.add(theirs.id() as i32);
        let killed = Groups::new(dir.path(), "u9").unwrap().kill_orphans();
        assert_eq!(killed, vec![ours.id() as i32]);
        assert!(ours.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(
            theirs.try_wait().unwrap().is_none(),
            "another unit's process lives"
        );
        theirs.kill().unwrap();
        let _ = theirs.wait();
        assert!(groups.read().is_empty());
    }
}
