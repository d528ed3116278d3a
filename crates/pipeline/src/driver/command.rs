//! The `command` driver: any CLI agent, one process per prompt.
//!
//! With a stream format (`runner.driver.stream`), the agent's stdout is read
//! as it runs: every agent turn becomes a SALUTE turn (so every radio rule
//! fires during the run). Steering that arrives while the agent runs reaches
//! it on its next turn, through the first channel it has ([`Channel`]):
//! its hook (`runner.driver.hook`: Claude Code's or Codex's, run after every
//! tool call), else a stop at its next turn and a resume of its own session
//! with the steering as the prompt (`runner.driver.resume`), else the file
//! `$XO_STEERING_FILE` it may read. Critical steering (PACE emergency, a
//! loop steered twice) stops a resumable agent at once. Steering no channel
//! took goes in front of the next prompt. The reply is the agent's last
//! words (its result, else its last message).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use xo_proto::{Action, Outcome};
use xo_runtime::config::DriverConfig;
use xo_sensor::{Format, Sensor};

use super::{AgentOutput, DriverError, RunCtx, TurnEvent, short_hash};
use crate::compose::ComposedPrompt;
use crate::proc::{Live, Spawn, run, run_live};

pub use super::hooks::{
    CLAUDE_HOOK_EVENTS, CODEX_HOOK_EVENTS, install_claude_hook, install_codex_hook,
    install_codex_user_hook,
};

/// Resumes of one run at most, unless `runner.driver.max_resumes` says.
const MAX_RESUMES: u32 = 10;

/// The file a PostToolUse hook reads pending steering from (in the task's
/// working directory), and where delivered steering is kept.
pub const PENDING: &str = ".xo/steering.pending";
/// The agent's checkpoint in its working directory: while it exists, the
/// runner's heartbeats say `checkpoint`, and a task offered again after its
/// runner died is resumed, not rolled back (SUP-6). An agent writes it
/// itself (`$XO_CHECKPOINT`), or the command driver does when the agent's
/// stream names a session it can resume (`runner.driver.resume`).
pub const CHECKPOINT: &str = ".xo/checkpoint";

async fn write_checkpoint(cwd: &std::path::Path, text: &str) {
    if let Err(e) = agent_file(cwd, CHECKPOINT, text.as_bytes().to_vec(), false).await {
        warn!(error = %e, "checkpoint not written; a replay rolls back");
    }
}

/// Writes (or appends to) `rel` in the agent's tree as untrusted ground:
/// no symlink on the way is followed, only a regular file of its own is
/// written (see [`xo_runtime::untrusted`]): an agent that put a link in
/// place of `.xo/steering.pending` gets a refusal, not a write to
/// `~/.bashrc`.
pub async fn agent_file(
    cwd: &Path,
    rel: &str,
    bytes: Vec<u8>,
    append: bool,
) -> Result<(), xo_runtime::untrusted::UntrustedError> {
    let shown = cwd.join(rel).display().to_string();
    let (cwd, rel) = (cwd.to_path_buf(), PathBuf::from(rel));
    tokio::task::spawn_blocking(move || {
        if append {
            xo_runtime::untrusted::append(&cwd, &rel, &bytes)
        } else {
            xo_runtime::untrusted::write(&cwd, &rel, &bytes)
        }
    })
    .await
    .map_err(|e| xo_runtime::untrusted::UntrustedError::Io {
        path: shown,
        source: std::io::Error::other(e.to_string()),
    })?
}
pub const DELIVERED: &str = ".xo/steering.delivered";

/// The agent hooks the runner installs (`runner.driver.hook`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Claude,
    Codex,
}

/// How steering that arrives during a run reaches the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Appended to `.xo/steering.pending`; the agent's hook hands it to the
    /// model after its next tool call.
    Hook(Hook),
    /// The agent is stopped at its next turn and its session resumed with
    /// the steering as the prompt.
    Resume,
    /// Appended to `.xo/steering.pending` (`$XO_STEERING_FILE`) for the
    /// agent to read; what it leaves there goes with the next prompt.
    File,
}

/// Codex's flag that runs hooks nobody reviewed in its TUI (a new hook is
/// otherwise skipped without a word).
pub const CODEX_BYPASS_HOOK_TRUST: &str = "--dangerously-bypass-hook-trust";

/// Runs `argv` in the task's working directory. `{prompt}` in an argument
/// becomes the prompt text, `{prompt_file}` the path of a file holding it;
/// with neither the prompt is written to stdin.
#[derive(Debug, Clone)]
pub struct CommandDriver {
    argv: Vec<String>,
    stream: Option<Format>,
    hook: Option<Hook>,
    resume: Vec<String>,
    max_resumes: u32,
}

impl CommandDriver {
    pub fn new(argv: Vec<String>) -> Result<Self, DriverError> {
        if argv.is_empty() || argv[0].trim().is_empty() {
            return Err(DriverError::Spawn(
                "command driver: runner.driver.command is empty".into(),
            ));
        }
        Ok(Self {
            argv,
            stream: None,
            hook: None,
            resume: Vec::new(),
            max_resumes: MAX_RESUMES,
        })
    }

    /// The driver `runner.driver` describes (stream, hook, resume included).
    pub fn from_config(d: &DriverConfig) -> Result<Self, DriverError> {
        let mut c = Self::new(d.command.clone())?;
        c.stream = match d.stream.as_str() {
            "" | "none" => None,
            s => Some(Format::parse(s)?),
        };
        c.hook = match d.hook.as_str() {
            "" => None,
            "claude" => Some(Hook::Claude),
            "codex" => Some(Hook::Codex),
            other => {
                return Err(DriverError::Spawn(format!(
                    "runner.driver.hook {other:?}: the hooks are \"claude\" and \"codex\""
                )));
            }
        };
        if c.hook == Some(Hook::Codex) && !d.command.iter().any(|a| a == CODEX_BYPASS_HOOK_TRUST) {
            warn!(
                "runner.driver.hook = \"codex\" but runner.driver.command has no {CODEX_BYPASS_HOOK_TRUST}: Codex skips a hook nobody trusted in its /hooks screen without a word, and steering then waits for the next prompt; add the flag (and to runner.driver.resume), or trust the hook once by hand"
            );
        }
        c.resume = d.resume.clone();
        c.max_resumes = d.max_resumes;
        Ok(c)
    }

    /// How steering reaches this agent while it runs.
    pub fn channel(&self) -> Channel {
        match (self.hook, self.stream.is_some() && !self.resume.is_empty()) {
            (Some(h), _) if self.stream.is_some() => Channel::Hook(h),
            (_, true) => Channel::Resume,
            _ => Channel::File,
        }
    }

    pub async fn run(
        &mut self,
        prompt: &ComposedPrompt,
        ctx: &RunCtx,
    ) -> Result<AgentOutput, DriverError> {
        // Steering goes in front of the next prompt and into a file the
        // agent can re-read.
        let steering = ctx.turns.take_steering();
        let prompt = prompt.with_steering(&steering);
        let xo_dir = ctx.cwd.join(".xo");
        let io = |what: &str, e: std::io::Error| {
            DriverError::Spawn(format!("{what} in {}: {e}", xo_dir.display()))
        };
        if !steering.is_empty() {
            agent_file(
                &ctx.cwd,
                ".xo/steering.md",
                crate::compose::steering_section(&steering).into_bytes(),
                false,
            )
            .await
            .map_err(|e| io("writing steering.md", std::io::Error::other(e.to_string())))?;
        }
        let uses_file = self.argv.iter().any(|a| a.contains("{prompt_file}"));
        let uses_text = self.argv.iter().any(|a| a.contains("{prompt}"));
        let prompt_name = format!(".xo/prompt-{}.md", prompt.task_id());
        let prompt_file = ctx.cwd.join(&prompt_name);
        if uses_file {
            agent_file(
                &ctx.cwd,
                &prompt_name,
                prompt.text().as_bytes().to_vec(),
                false,
            )
            .await
            .map_err(|e| io("writing the prompt", std::io::Error::other(e.to_string())))?;
        }
        let file_str = prompt_file.display().to_string();
        let argv = with_mode(&self.argv, self.stream, ctx.mode());
        let argv: Vec<String> = argv
            .iter()
            .map(|a| {
                xo_runtime::template::fill(
                    a,
                    &[("{prompt_file}", &file_str), ("{prompt}", prompt.text())],
                )
            })
            .collect();
        let stdin = (!uses_file && !uses_text).then(|| prompt.text().as_bytes());
        if let Some(format) = self.stream {
            match self.hook {
                Some(Hook::Claude) => {
                    install_claude_hook(&ctx.cwd).await?;
                }
                Some(Hook::Codex) => {
                    install_codex_user_hook(&ctx.env).await?;
                }
                None => {}
            }
            return self.run_streamed(format, argv, stdin, ctx).await;
        }
        let spawn = Spawn {
            argv: &argv,
            cwd: &ctx.cwd,
            env: &ctx.env,
            stdin,
            timeout: ctx.timeout,
            max_output: ctx.max_output,
            confine: ctx.confine.as_ref(),
        };
        // Steering that arrives while the agent runs goes to the file it
        // may read ($XO_STEERING_FILE).
        let out = tokio::select! {
            biased;
            out = run(spawn, ctx.cancel.clone(), ctx.groups.as_ref()) => out,
            () = hand_to_file(ctx) => unreachable!("hand_to_file never ends"),
        }?;
        take_back(ctx).await;
        let ok = out.exit_code == Some(0);
        let outcome = if !ok {
            Outcome::Error
        } else if out.stdout.trim().is_empty() {
            Outcome::Empty
        } else {
            Outcome::Ok
        };
        let mut action = Action::tool(&self.argv[0], &short_hash(prompt.text()), outcome, 0)
            .with_output(&short_hash(&out.stdout));
        if !ok {
            action = action.with_error(if out.timed_out { "timeout" } else { "exit" });
        }
        ctx.turns.turn(TurnEvent {
            action: Some(action),
            summary: Some(format!("{} ran ({} ms)", self.argv[0], out.elapsed_ms)),
            progress: ok,
            ..Default::default()
        });
        Ok(AgentOutput { turns: 1, ..out })
    }

    /// A run read live: turns as they happen, steering delivered while the
    /// agent works (its hook, a resume at its next turn, or its file), and
    /// a stop and resume on critical steering.
    async fn run_streamed(
        &self,
        format: Format,
        mut argv: Vec<String>,
        stdin: Option<&[u8]>,
        ctx: &RunCtx,
    ) -> Result<AgentOutput, DriverError> {
        let mut sensor = Sensor::new(format);
        let mut stdin = stdin.map(<[u8]>::to_vec);
        let mut resumes = 0;
        let started = std::time::Instant::now();
        let channel = self.channel();
        let resumable = !self.resume.is_empty();
        loop {
            let (lines_tx, mut lines) = mpsc::unbounded_channel::<String>();
            let (stop, interrupt) = watch::channel(false);
            let spawn = Spawn {
                argv: &argv,
                cwd: &ctx.cwd,
                env: &ctx.env,
                stdin: stdin.as_deref(),
                timeout: ctx.timeout.saturating_sub(started.elapsed()),
                max_output: ctx.max_output,
                confine: ctx.confine.as_ref(),
            };
            let live = Live {
                lines: Some(lines_tx),
                interrupt: Some(interrupt),
            };
            // Steering taken during this process's run, for a resume.
            let mut taken: Vec<String> = Vec::new();
            let mut stopping = false;
            // Steering waits for the agent's next turn to resume it.
            let mut at_next_turn = false;
            let mut checkpointed = false;
            let may_resume = resumable && resumes < self.max_resumes;
            let read = async {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                loop {
                    let mut turned = false;
                    tokio::select! {
                        line = lines.recv() => {
                            let Some(line) = line else {
                                // The stream ended: the turn it held back.
                                for t in sensor.finish() {
                                    ctx.turns.turn(t);
                                }
                                break;
                            };
                            match sensor.line(&line) {
                                Ok(turns) => {
                                    turned = !turns.is_empty();
                                    for t in turns {
                                        ctx.turns.turn(t);
                                    }
                                    // A session the agent can resume is a
                                    // checkpoint (SUP-6): a replay resumes.
                                    if !checkpointed
                                        && resumable
                                        && let Some(session) = sensor.session()
                                    {
                                        checkpointed = true;
                                        write_checkpoint(&ctx.cwd, &format!("session {session}\n")).await;
                                    }
                                }
                                Err(e) => warn!(agent = %self.argv[0], line = e.line, reason = %e.reason, "agent stream line not used"),
                            }
                        }
                        _ = tick.tick() => {}
                    }
                    if stopping {
                        continue;
                    }
                    // The agent's turn ended with steering waiting: now.
                    if at_next_turn && turned {
                        stopping = true;
                        info!(agent = %self.argv[0], steering = taken.len(), "steering at the agent's next turn: stopping it to resume its session with it");
                        let _ = stop.send(true);
                        continue;
                    }
                    // Steering that arrived while the agent works.
                    if ctx.turns.has_steering() {
                        let new = ctx.turns.take_steering();
                        match channel {
                            Channel::Hook(_) | Channel::File => deliver(&ctx.cwd, &new).await,
                            Channel::Resume => {}
                        }
                        taken.extend(new);
                        if channel == Channel::Resume && may_resume && sensor.session().is_some() {
                            at_next_turn = true;
                        }
                    }
                    if may_resume && sensor.session().is_some() && ctx.turns.take_critical() {
                        stopping = true;
                        info!(agent = %self.argv[0], "critical steering: stopping the agent to resume its session with it");
                        let _ = stop.send(true);
                    }
                }
            };
            let (out, ()) = tokio::join!(
                run_live(spawn, ctx.cancel.clone(), ctx.groups.as_ref(), live),
                read
            );
            let out = out?;
            if out.interrupted && !out.cancelled && !taken.is_empty() {
                resumes += 1;
                // Handed over in the prompt: not again through the file.
                if channel != Channel::Resume {
                    let _ = take_pending(&ctx.cwd).await;
                }
                let session = sensor.session().unwrap_or_default().to_string();
                let next = taken.join("\n\n");
                argv = self
                    .resume
                    .iter()
                    .map(|a| {
                        xo_runtime::template::fill(
                            a,
                            &[("{session}", &session), ("{prompt}", &next)],
                        )
                    })
                    .collect();
                stdin = None;
                continue;
            }
            if channel == Channel::Resume && !taken.is_empty() {
                if resumable && resumes >= self.max_resumes {
                    warn!(agent = %self.argv[0], resumes, "runner.driver.max_resumes reached: this run's later steering waits for the next prompt");
                }
                // Not delivered during the run: it goes with the next prompt.
                for s in taken {
                    ctx.turns.push_steering(s);
                }
            }
            take_back(ctx).await;
            let raw = out.stdout.clone();
            let reply = sensor.final_text().map(str::to_string).unwrap_or(raw);
            let st = sensor.stats();
            info!(
                agent = %self.argv[0],
                format = format.as_str(),
                turns = st.turns,
                unknown = st.unknown,
                rejected = st.malformed,
                resumes,
                "agent run read live"
            );
            return Ok(AgentOutput {
                stdout: reply,
                turns: st.turns as u32,
                elapsed_ms: started.elapsed().as_millis() as u64,
                ..out
            });
        }
    }
}

/// Hands steering that arrives during a run to `.xo/steering.pending`,
/// polling every 100 ms; never ends (raced against the run).
async fn hand_to_file(ctx: &RunCtx) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if ctx.turns.has_steering() {
            deliver(&ctx.cwd, &ctx.turns.take_steering()).await;
        }
    }
}

/// After a run: steering still pending (no hook took it, the agent did not
/// read it) goes in front of the next prompt, so none is lost.
async fn take_back(ctx: &RunCtx) {
    let left = take_pending(&ctx.cwd).await;
    if !left.is_empty() {
        info!(
            steering = left.len(),
            "steering the agent did not take during its run goes with its next prompt"
        );
        for s in left {
            ctx.turns.push_steering(s);
        }
    }
}

/// Takes the steering still in `.xo/steering.pending` (and removes the
/// file): the texts of its lines, addressed or not.
pub async fn take_pending(cwd: &Path) -> Vec<String> {
    let path = cwd.join(PENDING);
    let (dir, rel) = (cwd.to_path_buf(), PathBuf::from(PENDING));
    let read = tokio::task::spawn_blocking(move || {
        xo_runtime::untrusted::read_head(&dir, &rel, PENDING_MAX_BYTES)
    })
    .await;
    let text = match read {
        Ok(Ok((b, more))) => {
            if more {
                warn!(path = %path.display(), bytes = PENDING_MAX_BYTES, "pending steering longer than its bound; the rest is dropped");
            }
            String::from_utf8_lossy(&b).into_owned()
        }
        Ok(Err(e)) if e.is_not_found() => return Vec::new(),
        Ok(Err(e)) => {
            warn!(error = %e, "pending steering not readable; left where it is");
            return Vec::new();
        }
        Err(e) => {
            warn!(path = %path.display(), error = %e, "pending steering not read");
            return Vec::new();
        }
    };
    if let Err(e) = tokio::fs::remove_file(&path).await {
        warn!(path = %path.display(), error = %e, "pending steering not removed; an agent hook may hand it over again");
    }
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| addressed(l).1)
        .collect()
}

/// The most of `.xo/steering.pending` read back (the agent's tree: it may
/// have made it any size).
const PENDING_MAX_BYTES: usize = 1 << 20;

/// Whose a line of `.xo/steering.pending` is: `Some(session)` when
/// addressed (`{"session_id": …, "text": …}`, [`deliver_to`]), and its text.
pub fn addressed(line: &str) -> (Option<String>, String) {
    if line.trim_start().starts_with('{')
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
        && let Some(text) = v.get("text").and_then(|t| t.as_str())
    {
        let session = v
            .get("session_id")
            .and_then(|s| s.as_str())
            .map(String::from);
        return (session, text.to_string());
    }
    (None, line.to_string())
}

/// Appends steering for the hook to hand to the agent at its next tool call
/// (`<cwd>/.xo/steering.pending`, read by `xo hook claude`), for whichever
/// session runs there (the runner's one agent a task directory).
pub async fn deliver(cwd: &Path, steering: &[String]) {
    deliver_to(cwd, None, steering).await
}

/// [`deliver`] addressed to one session: only that session's hook takes
/// it (a line `{"session_id": …, "text": …}`; plain lines are for anyone).
pub async fn deliver_to(cwd: &Path, session: Option<&str>, steering: &[String]) {
    let mut text = String::new();
    for s in steering {
        let line = match session {
            Some(id) => serde_json::json!({"session_id": id, "text": s}).to_string(),
            // One line a steering: its own line breaks would split it.
            None => s.replace('\n', " "),
        };
        text.push_str(&line);
        text.push('\n');
    }
    if let Err(e) = agent_file(cwd, PENDING, text.into_bytes(), true).await {
        warn!(error = %e, "steering not handed to the hook");
    }
}

/// `argv` with the task's `agent_mode` passed on: into `{agent_mode}`
/// where the command names it (removed, with the option before it, when
/// the task asks for none), else as `--model MODE` for the agents whose
/// CLI documents it (Claude Code `--model`, Codex `--model`, Cursor
/// `--model`), before a `--` that ends the options. No mode (or `auto`):
/// the agent's own default.
pub fn with_mode(argv: &[String], stream: Option<Format>, mode: Option<&str>) -> Vec<String> {
    if argv.iter().any(|a| a.contains("{agent_mode}")) {
        let mut out = Vec::with_capacity(argv.len());
        for a in argv {
            match mode {
                Some(m) => out.push(a.replace("{agent_mode}", m)),
                // `--model {agent_mode}` with no mode: both dropped.
                None if a == "{agent_mode}" => {
                    if out.last().is_some_and(|p: &String| p.starts_with('-')) {
                        out.pop();
                    }
                }
                None => out.push(a.replace("{agent_mode}", "")),
            }
        }
        return out;
    }
    let mut out = argv.to_vec();
    let takes_model =
        stream.is_some_and(|f| xo_runtime::config::MODE_STREAMS.contains(&f.as_str()));
    if let (Some(m), true) = (mode, takes_model) {
        let at = out.iter().position(|a| a == "--").unwrap_or(out.len());
        out.splice(at..at, ["--model".to_string(), m.to_string()]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_tasks_mode_is_the_agents_model_option() {
        let claude = argv(&["claude", "-p", "{prompt}", "--output-format", "stream-json"]);
        assert_eq!(
            with_mode(&claude, Some(Format::Claude), Some("opus")),
            argv(&[
                "claude",
                "-p",
                "{prompt}",
                "--output-format",
                "stream-json",
                "--model",
                "opus"
            ])
        );
        assert_eq!(with_mode(&claude, Some(Format::Claude), None), claude);
        // Before a `--` that ends the options (the prompt after it).
        let codex = argv(&["codex", "exec", "--json", "--", "{prompt}"]);
        assert_eq!(
            with_mode(&codex, Some(Format::Codex), Some("gpt-5.5")),
            argv(&[
                "codex", "exec", "--json", "--model", "gpt-5.5", "--", "{prompt}"
            ])
        );
        // A command that names the mode itself: there, and dropped with its
        // option when the task asks for none.
        let own = argv(&["agent", "--mode", "{agent_mode}", "{prompt}"]);
        assert_eq!(
            with_mode(&own, None, Some("fast")),
            argv(&["agent", "--mode", "fast", "{prompt}"])
        );
        assert_eq!(with_mode(&own, None, None), argv(&["agent", "{prompt}"]));
        // An agent with no known option gets nothing added (enqueue refuses
        // such a task: DriverConfig::honours_mode).
        let plain = argv(&["python3", "agent.py"]);
        assert_eq!(with_mode(&plain, None, Some("opus")), plain);
    }
}
