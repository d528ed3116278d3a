//! The `command` driver: any CLI agent, one process per prompt.

use xo_proto::{Action, Outcome};

use super::{AgentOutput, DriverError, RunCtx, TurnEvent, short_hash};
use crate::compose::ComposedPrompt;
use crate::proc::{Spawn, run};

/// Runs `argv` in the task's working directory. `{prompt}` in an argument
/// becomes the prompt text, `{prompt_file}` the path of a file holding it;
/// with neither the prompt is written to stdin.
#[derive(Debug, Clone)]
pub struct CommandDriver {
    argv: Vec<String>,
}

impl CommandDriver {
    pub fn new(argv: Vec<String>) -> Result<Self, DriverError> {
        if argv.is_empty() || argv[0].trim().is_empty() {
            return Err(DriverError::Spawn(
                "command driver: runner.driver.command is empty".into(),
            ));
        }
        Ok(Self { argv })
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
            std::fs::create_dir_all(&xo_dir).map_err(|e| io("creating .xo", e))?;
            std::fs::write(
                xo_dir.join("steering.md"),
                crate::compose::steering_section(&steering),
            )
            .map_err(|e| io("writing steering.md", e))?;
        }
        let uses_file = self.argv.iter().any(|a| a.contains("{prompt_file}"));
        let uses_text = self.argv.iter().any(|a| a.contains("{prompt}"));
        let prompt_file = xo_dir.join(format!("prompt-{}.md", prompt.task_id()));
        if uses_file {
            std::fs::create_dir_all(&xo_dir).map_err(|e| io("creating .xo", e))?;
            std::fs::write(&prompt_file, prompt.text()).map_err(|e| io("writing the prompt", e))?;
        }
        let file_str = prompt_file.display().to_string();
        let argv: Vec<String> = self
            .argv
            .iter()
            .map(|a| {
                a.replace("{prompt_file}", &file_str)
                    .replace("{prompt}", prompt.text())
            })
            .collect();
        let stdin = (!uses_file && !uses_text).then(|| prompt.text().as_bytes());
        let out = run(
            Spawn {
                argv: &argv,
                cwd: &ctx.cwd,
                env: &ctx.env,
                stdin,
                timeout: ctx.timeout,
                max_output: ctx.max_output,
            },
            ctx.cancel.clone(),
            ctx.groups.as_ref(),
        )
        .await
        .map_err(DriverError::Spawn)?;
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
}
