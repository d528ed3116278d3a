//! The `script` driver: a deterministic scripted agent for demos and tests.
//!
//! A script is TOML. A file holds `[default]` and `[tasks.<task id>]`
//! entries; a fenced ```` ```xo-script ```` block in the task's instructions
//! is one entry and wins. An entry has `turn_ms` (pause between turns, so
//! steering can arrive) and `[[run]]` lists of steps; the Nth run of a task
//! uses the Nth `run` (the last repeats), and a run with `attempt = N` is
//! used only on the queue's Nth attempt. Steps (one key each):
//!
//! - `write = "path"`, `content = "..."`: writes a file in the sandbox
//! - `tool = "name"`, `args`, `fail = "error type"`, `output`: one tool call
//! - `repeat = N` with a tool call: the same call N times
//! - `stall = N`: N turns of thinking without progress
//! - `until_steered = true` on `repeat`/`stall`: stop early when steered
//! - `fill = 0.95`: the context is that full
//! - `run = "shell line"`: a real command in the working directory
//! - `say = "..."`: a message turn; `reply = "..."`: text of the final reply
//! - `sleep_ms = N`

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use xo_proto::{Action, Outcome};

use super::{AgentOutput, DriverError, RunCtx, TurnEvent, short_hash};
use crate::compose::{ComposedPrompt, Section};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptFile {
    #[serde(default)]
    pub default: Option<Script>,
    #[serde(default)]
    pub tasks: BTreeMap<String, Script>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default = "default_turn_ms")]
    pub turn_ms: u64,
    #[serde(default)]
    pub run: Vec<Run>,
}

fn default_turn_ms() -> u64 {
    20
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    #[serde(default)]
    pub attempt: Option<u32>,
    #[serde(default)]
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub write: Option<String>,
    pub content: Option<String>,
    pub tool: Option<String>,
    pub args: Option<String>,
    pub fail: Option<String>,
    pub output: Option<String>,
    pub repeat: Option<u32>,
    pub stall: Option<u32>,
    #[serde(default)]
    pub until_steered: bool,
    pub fill: Option<f64>,
    pub run: Option<String>,
    pub say: Option<String>,
    pub reply: Option<String>,
    pub sleep_ms: Option<u64>,
}

/// Why a scripted step is not one (its number in the run).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadStep {
    #[error(
        "step {at}: needs exactly one of write, tool, repeat, stall, fill, run, say, reply, sleep_ms (found {found})"
    )]
    Keys { at: usize, found: usize },
    #[error("step {at}: repeat needs a tool")]
    RepeatWithoutTool { at: usize },
    #[error("step {at}: fill {fill} is not within 0..1")]
    Fill { at: usize, fill: f64 },
}

impl Step {
    fn check(&self, at: usize) -> Result<(), BadStep> {
        let keys = [
            self.write.is_some(),
            self.tool.is_some() && self.repeat.is_none(),
            self.repeat.is_some(),
            self.stall.is_some(),
            self.fill.is_some(),
            self.run.is_some(),
            self.say.is_some(),
            self.reply.is_some(),
            self.sleep_ms.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if keys != 1 {
            return Err(BadStep::Keys { at, found: keys });
        }
        if self.repeat.is_some() && self.tool.is_none() {
            return Err(BadStep::RepeatWithoutTool { at });
        }
        if let Some(f) = self.fill
            && !(0.0..=1.0).contains(&f)
        {
            return Err(BadStep::Fill { at, fill: f });
        }
        Ok(())
    }
}

impl Script {
    pub fn parse(text: &str, origin: &str) -> Result<Self, DriverError> {
        let s: Script = toml::from_str(text).map_err(|e| {
            DriverError::Script(format!(
                "{origin}: {}",
                e.to_string().trim_end().replace('\n', " ")
            ))
        })?;
        s.check(origin)?;
        Ok(s)
    }

    fn check(&self, origin: &str) -> Result<(), DriverError> {
        for (r, run) in self.run.iter().enumerate() {
            for (i, st) in run.steps.iter().enumerate() {
                st.check(i + 1)
                    .map_err(|e| DriverError::Script(format!("{origin}: run {}: {e}", r + 1)))?;
            }
        }
        Ok(())
    }
}

/// The scripted agent; remembers how often it ran each task.
#[derive(Debug, Default)]
pub struct ScriptDriver {
    file: ScriptFile,
    runs: HashMap<(String, u32), usize>,
}

impl ScriptDriver {
    pub fn from_file(path: Option<&Path>) -> Result<Self, DriverError> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| DriverError::Script(format!("{}: {e}", path.display())))?;
        let file: ScriptFile = toml::from_str(&text).map_err(|e| {
            DriverError::Script(format!(
                "{}: {}",
                path.display(),
                e.to_string().trim_end().replace('\n', " ")
            ))
        })?;
        let origin = path.display().to_string();
        if let Some(d) = &file.default {
            d.check(&origin)?;
        }
        for s in file.tasks.values() {
            s.check(&origin)?;
        }
        Ok(Self {
            file,
            runs: HashMap::new(),
        })
    }

    fn script_for(&self, prompt: &ComposedPrompt) -> Result<Script, DriverError> {
        let task = prompt.section(Section::Task).unwrap_or("");
        if let Some(block) = fenced(task, "xo-script") {
            return Script::parse(block, &format!("task {} xo-script block", prompt.task_id()));
        }
        if let Some(s) = self.file.tasks.get(prompt.task_id()) {
            return Ok(s.clone());
        }
        Ok(self.file.default.clone().unwrap_or_default())
    }

    pub async fn run(
        &mut self,
        prompt: &ComposedPrompt,
        ctx: &RunCtx,
    ) -> Result<AgentOutput, DriverError> {
        let script = self.script_for(prompt)?;
        let attempt = attempt_of(prompt);
        let n = self
            .runs
            .entry((prompt.task_id().to_string(), attempt))
            .or_insert(0);
        let candidates: Vec<&Run> = script
            .run
            .iter()
            .filter(|r| r.attempt.is_none_or(|a| a == attempt))
            .collect();
        let steps = candidates
            .get((*n).min(candidates.len().saturating_sub(1)))
            .map(|r| r.steps.clone())
            .unwrap_or_default();
        *n += 1;
        let mut a = Agent {
            ctx,
            out: AgentOutput::default(),
            turn: 0,
            context: (prompt.text().len() / 4) as u64,
            limit: 100_000,
            pause: Duration::from_millis(script.turn_ms),
            steered: 0,
        };
        let started = std::time::Instant::now();
        let mut reply = None;
        for st in &steps {
            if a.cancelled() {
                a.out.cancelled = true;
                break;
            }
            a.step(st, &mut reply).await;
        }
        if a.cancelled() {
            // Stopped mid-run (halt, shutdown): never a reply.
            a.out.cancelled = true;
        }
        a.out.stdout.push_str(
            reply
                .as_deref()
                .unwrap_or("{\"status\": \"ok\", \"message\": \"scripted run complete\"}"),
        );
        a.out.exit_code = Some(0);
        a.out.elapsed_ms = started.elapsed().as_millis() as u64;
        a.out.turns = a.turn as u32;
        Ok(a.out)
    }
}

struct Agent<'a> {
    ctx: &'a RunCtx,
    out: AgentOutput,
    turn: u64,
    context: u64,
    limit: u64,
    pause: Duration,
    steered: u32,
}

impl Agent<'_> {
    fn cancelled(&self) -> bool {
        self.ctx.cancel.as_ref().is_some_and(|c| *c.borrow())
    }

    /// Ends a turn: reports it, pauses, and takes steering that arrived.
    async fn turn(&mut self, action: Action, summary: String, progress: bool) -> bool {
        self.turn += 1;
        self.context += 200;
        self.ctx.turns.turn(TurnEvent {
            action: Some(action),
            summary: Some(summary),
            progress,
            tokens_in: 200,
            tokens_out: 50,
            context_tokens: Some(self.context),
            context_limit: Some(self.limit),
            model: Some("script".into()),
            ..Default::default()
        });
        tokio::time::sleep(self.pause).await;
        let steering = self.ctx.turns.take_steering();
        if steering.is_empty() {
            return false;
        }
        self.steered += 1;
        for s in &steering {
            self.out
                .stdout
                .push_str(&format!("[steering received] {s}\n"));
        }
        true
    }

    async fn step(&mut self, st: &Step, reply: &mut Option<String>) {
        if let Some(path) = &st.write {
            let content = st.content.clone().unwrap_or_default();
            let r = self
                .ctx
                .sandbox
                .resolve(&self.ctx.cwd, path)
                .map_err(|e| e.to_string())
                .and_then(|p| {
                    if let Some(parent) = p.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                    }
                    std::fs::write(&p, &content).map_err(|e| e.to_string())
                });
            let (outcome, ok) = match &r {
                Ok(()) => (Outcome::Ok, true),
                Err(e) => {
                    self.out
                        .stdout
                        .push_str(&format!("write_file {path}: {e}\n"));
                    (Outcome::Error, false)
                }
            };
            let mut action = Action::tool("write_file", &short_hash(path), outcome, self.turn + 1)
                .with_output(&short_hash(&content));
            if !ok {
                action = action.with_error("sandbox");
            }
            self.turn(action, format!("wrote {path}"), ok).await;
        } else if let Some(n) = st.repeat {
            for _ in 0..n {
                if self.cancelled() {
                    return;
                }
                let steered = self.tool_call(st).await;
                if steered && st.until_steered {
                    break;
                }
            }
        } else if st.tool.is_some() {
            self.tool_call(st).await;
        } else if let Some(n) = st.stall {
            for i in 0..n {
                if self.cancelled() {
                    return;
                }
                let action = Action::message(
                    Some(&short_hash(&format!("thinking {i}"))),
                    Outcome::Ok,
                    self.turn + 1,
                );
                if self.turn(action, "thinking".into(), false).await && st.until_steered {
                    break;
                }
            }
        } else if let Some(f) = st.fill {
            self.context = (f * self.limit as f64) as u64;
            let action = Action::message(Some(&short_hash("fill")), Outcome::Ok, self.turn + 1);
            self.turn(action, format!("context {:.0}% full", f * 100.0), false)
                .await;
        } else if let Some(line) = &st.run {
            // Like any agent's subprocess: its own group, recorded, killed on halt.
            let argv = ["sh".to_string(), "-c".to_string(), line.clone()];
            let o = crate::proc::run(
                crate::proc::Spawn {
                    argv: &argv,
                    cwd: &self.ctx.cwd,
                    env: &self.ctx.env,
                    stdin: None,
                    timeout: self.ctx.timeout,
                    max_output: self.ctx.max_output,
                    confine: self.ctx.confine.as_ref(),
                },
                self.ctx.cancel.clone(),
                self.ctx.groups.as_ref(),
            )
            .await;
            let (outcome, text) = match o {
                Ok(o) if o.exit_code == Some(0) => (Outcome::Ok, o.stdout),
                Ok(o) => (Outcome::Error, format!("{}{}", o.stdout, o.stderr)),
                Err(e) => (Outcome::Error, e.to_string()),
            };
            self.out.stdout.push_str(&text);
            let mut action = Action::tool("run_command", &short_hash(line), outcome, self.turn + 1)
                .with_output(&short_hash(&text));
            if outcome == Outcome::Error {
                action = action.with_error("exit");
            }
            self.turn(action, format!("ran {line}"), outcome == Outcome::Ok)
                .await;
        } else if let Some(text) = &st.say {
            self.out.stdout.push_str(text);
            self.out.stdout.push('\n');
            let outcome = if text.trim().is_empty() {
                Outcome::Empty
            } else {
                Outcome::Ok
            };
            let action = Action::message(Some(&short_hash(text)), outcome, self.turn + 1);
            self.turn(action, "said something".into(), false).await;
        } else if let Some(r) = &st.reply {
            *reply = Some(r.clone());
        } else if let Some(ms) = st.sleep_ms {
            let mut cancel = self.ctx.cancel.clone();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = async {
                    match cancel.as_mut() {
                        Some(c) => { let _ = c.wait_for(|v| *v).await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {}
            }
        }
    }

    /// One tool call; true if steering arrived after it.
    async fn tool_call(&mut self, st: &Step) -> bool {
        let tool = st.tool.as_deref().unwrap_or("tool");
        let args = st.args.as_deref().unwrap_or("");
        let output = st.output.as_deref().unwrap_or("");
        let (outcome, progress) = if st.fail.is_some() {
            (Outcome::Error, false)
        } else {
            (Outcome::Ok, true)
        };
        let mut action = Action::tool(tool, &short_hash(args), outcome, self.turn + 1)
            .with_output(&short_hash(output));
        if let Some(f) = &st.fail {
            action = action.with_error(f);
        }
        let summary = format!("{tool} {args}");
        self.turn(action, summary, progress).await
    }
}

/// The first fenced block of the given info string.
pub fn fenced<'a>(text: &'a str, info: &str) -> Option<&'a str> {
    let open = format!("```{info}");
    let start = text.find(&open)? + open.len();
    let body = &text[start..];
    let body = body.strip_prefix('\n').unwrap_or(body);
    let end = body.find("```")?;
    Some(&body[..end])
}

/// The queue attempt the prompt's state snapshot names (1 if absent).
fn attempt_of(prompt: &ComposedPrompt) -> u32 {
    let task = prompt.section(Section::Task).unwrap_or("");
    task.find("\"attempt\":")
        .and_then(|i| {
            let rest = &task[i + "\"attempt\":".len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse().ok()
        })
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script's bad step is refused by case, with its run and number.
    #[test]
    fn a_bad_step_says_which_way() {
        let step = |t: &str| toml::from_str::<Step>(t).unwrap();
        assert_eq!(
            step("write = \"a\"\nsay = \"b\"").check(2),
            Err(BadStep::Keys { at: 2, found: 2 })
        );
        assert_eq!(
            step("repeat = 3").check(1),
            Err(BadStep::RepeatWithoutTool { at: 1 })
        );
        assert_eq!(
            step("fill = 1.5").check(4),
            Err(BadStep::Fill { at: 4, fill: 1.5 })
        );
        assert!(step("tool = \"t\"\nrepeat = 3").check(1).is_ok());
        let e = Script::parse("[[run]]\nsteps = [{ fill = 2.0 }]\n", "s.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            DriverError::Script("s.toml: run 1: step 1: fill 2 is not within 0..1".into())
                .to_string()
        );
    }
}
